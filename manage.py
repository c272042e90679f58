#!/usr/bin/env python
"""Django's command-line utility. Starts the embedded PostgreSQL and Redis when they are in use."""

import os
import sys

# Commands that must not start the embedded services (they manage or don't need them).
NO_SERVICES = {"services", "help", "version", "--help", "-h", "--version"}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    from django.conf import settings

    settings.ASKDB_HOME  # noqa: B018 - importing settings fixes ASKDB_HOME for the runtime below
    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    if command not in NO_SERVICES:
        from config import embedded

        try:
            started = embedded.ensure_started()
            # `demo` stops on exit what this process started, and only that.
            os.environ["ASKDB_STARTED_SERVICES"] = ",".join(started)
        except embedded.EmbeddedError as exc:
            sys.stderr.write(f"askdb: {exc}\n")
            sys.exit(1)

    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
