"""Text that askdb can store: PostgreSQL's text type cannot hold a NUL character (\\x00), so a NUL in
a question, an import, a review or a doc failed deep inside a write (a 500, a traceback). Every place
input enters refuses it first, with the same sentence (config/middleware.py for every web request,
askdb/library_io.py for imported files, the services for commands)."""

from __future__ import annotations

from typing import Any

NUL = "\x00"


def nul_message(where: str) -> str:
    """The one sentence a user sees, naming where the NUL was."""
    return (
        f"{where} contains a NUL character (\\x00), which askdb cannot store; "
        "remove it (it usually comes from a binary file or a bad copy-paste) and try again."
    )


def find_nul(value: Any, where: str = "the input") -> str | None:
    """Where the first NUL is in `value` (strings, and lists/dicts of them, keys included), or None."""
    if isinstance(value, str):
        return where if NUL in value else None
    if isinstance(value, bytes):
        return where if b"\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            shown = str(key).replace(NUL, "\\x00")
            name = f"{where}, field {shown!r}"
            if isinstance(key, str) and NUL in key:
                return name
            found = find_nul(item, name)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value, start=1):
            found = find_nul(item, f"{where}, item {n}")
            if found:
                return found
    return None
