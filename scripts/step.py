"""Run one set-up step and say what it does: one line with its time, a live progress line while it
works, and the full output kept in a log instead of on the screen.

Called by the Makefile before the virtualenv exists, so it uses the standard library only:
    python3 scripts/step.py "installing torch (CPU build)" LOG -- pip install ...
prints "[ 93.2s] installing torch (CPU build) — done" (or "— FAILED" and the log's last lines).
A step that fails prints the last lines of its log and exits with the command's code.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TAIL = 25  # log lines shown when a step fails
QUIET_EVERY_S = 30  # without a terminal (CI, a piped log): a "still working" line this often
# What pip is doing, in a few words: "Collecting torch==2.13.0", "Downloading numpy-2.4.6-…whl (16.4 MB)"
_PIP = re.compile(r"^\s*(Collecting|Downloading|Building|Installing collected|Preparing|Using cached)\b")


def _fmt(seconds: float) -> str:
    return f"{seconds:5.1f}s" if seconds < 600 else f"{seconds / 60:4.1f}m"


def run(label: str, log: Path, cmd: list[str]) -> int:
    """Run cmd with its output appended to log; show a spinner with the latest pip action on a tty."""
    log.parent.mkdir(parents=True, exist_ok=True)
    tty = sys.stdout.isatty()
    started = time.monotonic()
    latest = {"what": ""}
    start = log.stat().st_size if log.exists() else 0
    width = shutil.get_terminal_size((80, 20)).columns - 1  # one line, or \r cannot rewrite it
    with open(log, "a", encoding="utf-8", errors="replace") as out:
        out.write(f"\n=== {label}: {' '.join(cmd)}\n")
        out.flush()
        try:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
            )
        except OSError as exc:  # no such program, not executable
            print(f"[{_fmt(0)}] {label} — FAILED: cannot run {cmd[0]} ({exc.strerror})", flush=True)
            return 127

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if _PIP.match(line):
                    latest["what"] = line.strip()[:60]

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        tick, last_quiet = 0, started
        while proc.poll() is None:
            time.sleep(0.2)
            now = time.monotonic()
            if tty:
                tick += 1
                what = f" — {latest['what']}" if latest["what"] else ""
                line = f"  {SPINNER[tick % len(SPINNER)]} {label} {_fmt(now - started)}{what}"
                sys.stdout.write(f"\r\033[K{line[:width]}")
                sys.stdout.flush()
            elif now - last_quiet >= QUIET_EVERY_S:
                last_quiet = now
                print(f"  … {label}: still working ({_fmt(now - started).strip()})", flush=True)
        reader.join(5)
    elapsed = _fmt(time.monotonic() - started)
    if tty:
        sys.stdout.write("\r\033[K")
    if proc.returncode == 0:
        print(f"[{elapsed}] {label} — done", flush=True)
        return 0
    print(f"[{elapsed}] {label} — FAILED (exit {proc.returncode}); the last lines of {log}:", flush=True)
    with open(log, encoding="utf-8", errors="replace") as f:
        f.seek(start)
        lines = f.read().splitlines()
    for line in lines[-TAIL:]:
        print(f"    {line}")
    return proc.returncode


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") != 2:
        print("usage: step.py LABEL LOG -- COMMAND...", file=sys.stderr)
        return 2
    label, log, cmd = argv[0], Path(argv[1]), argv[3:]
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return run(label, log, cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
