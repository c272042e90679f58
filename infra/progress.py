"""Progress of a long command, also when its output is not a terminal.

tqdm draws a bar on a terminal and, with `disable=None`, nothing at all otherwise: a library import
run from cron, CI or `make`, or piped into a log, then looks hung for minutes. `Progress` draws the
bar on a terminal and otherwise writes a plain line every few seconds with the count, the rate and
the time left, plus one at the end, so a log always says how far a command got and how fast.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

LOG_EVERY_S = 5.0  # seconds between lines when the output is not a terminal


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """`update(done)` with the absolute count done so far; `close()` (or a `with` block) at the end.

    On a terminal: a tqdm bar. Otherwise: "importing: 1,200 of 5,124 pairs (85/s, 46 s left)"
    at most every `every_s` seconds, and a last line with the total time. `enabled=False` is silent.
    """

    def __init__(
        self,
        total: int,
        desc: str,
        *,
        unit: str = "",
        stream: TextIO | None = None,
        enabled: bool = True,
        every_s: float = LOG_EVERY_S,
    ) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        # A management command's OutputWrapper ends every write with a newline: use what it wraps.
        self.stream = getattr(stream, "_out", stream) or sys.stderr
        self.every_s = every_s
        self.done = 0
        self._start = self._last = time.monotonic()
        self._closed = not enabled
        self._bar = None
        if enabled and _isatty(self.stream):
            from tqdm import tqdm  # local: only a terminal needs the bar

            self._bar = tqdm(total=total, desc=desc, unit=f" {unit}" if unit else "it", file=self.stream)

    def update(self, done: int) -> None:
        if self._closed or done <= self.done:
            return
        if self._bar is not None:
            self._bar.update(done - self.done)
        self.done = done
        now = time.monotonic()
        if self._bar is None and now - self._last >= self.every_s and done < self.total:
            self._last = now
            self._write(self.line())

    def line(self) -> str:
        """The current state as one line (what is logged when the output is not a terminal)."""
        elapsed = time.monotonic() - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        unit = f" {self.unit}" if self.unit else ""
        left = (
            f", {_duration((self.total - self.done) / rate)} left"
            if rate > 0 and self.done < self.total
            else ""
        )
        return f"{self.desc}: {self.done:,} of {self.total:,}{unit} ({rate:,.0f}/s{left})"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
            return
        elapsed = time.monotonic() - self._start
        unit = f" {self.unit}" if self.unit else ""
        self._write(f"{self.desc}: {self.done:,} of {self.total:,}{unit} in {_duration(elapsed)}")

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
