#!/usr/bin/env python
"""Django's command-line utility. Starts the embedded PostgreSQL and Redis when they are in use."""

import os
import sys

# Commands that must not start the embedded services (they manage or don't need them).
NO_SERVICES = {"services", "help", "version", "--help", "-h", "--version"}

# SQLSTATEs of a database that has not been migrated (to this version): no such table / column.
UNMIGRATED = {"42P01", "42703"}


def next_step(exc: BaseException) -> str | None:
    """One line saying what to run, for the database errors a newcomer meets before `make demo`;
    None for anything else (a real bug keeps its traceback)."""
    from django.db import utils

    cause = exc.__cause__
    if isinstance(exc, utils.ProgrammingError) and getattr(cause, "sqlstate", None) in UNMIGRATED:
        return (
            "the database is not set up yet (or not migrated to this version); "
            "run `make demo` (or `python manage.py migrate`) first"
        )
    if isinstance(exc, utils.ProgrammingError) and getattr(cause, "sqlstate", None) == "42501":
        return (
            "the app's database role lacks its grants (a state from before roles were split); "
            "run `python manage.py migrate` (it grants them)"
        )
    return None  # an unreachable database is reported by the system checks (askdb.E005), with a hint


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    from django.conf import settings

    settings.ASKDB_HOME  # noqa: B018 - importing settings fixes ASKDB_HOME for the runtime below
    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    if command not in NO_SERVICES:
        from infra import embedded

        try:
            started = embedded.ensure_started()
            # `demo` stops on exit what this process started, and only that.
            os.environ["ASKDB_STARTED_SERVICES"] = ",".join(started)
        except embedded.EmbeddedError as exc:
            sys.stderr.write(f"askdb: {exc}\n")
            sys.exit(1)

    from django.core.management import execute_from_command_line
    from django.db import DatabaseError

    try:
        execute_from_command_line(sys.argv)
    except DatabaseError as exc:
        line = None if "--traceback" in sys.argv else next_step(exc)
        if line is None:
            raise
        sys.stderr.write(f"askdb: {line}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
