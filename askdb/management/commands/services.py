"""`python manage.py services start|stop|status`: the embedded PostgreSQL and Redis."""

from django.core.management.base import BaseCommand, CommandError

from infra import embedded


class Command(BaseCommand):
    help = "Start, stop or show the embedded PostgreSQL (with pgvector) and Redis."
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["start", "stop", "status"])

    def handle(self, *args, action: str, **options):
        try:
            if action == "start":
                started = embedded.ensure_started()
                self.stdout.write(f"started: {', '.join(started) or 'nothing (already running)'}")
            elif action == "stop":
                stopped = embedded.stop()
                self.stdout.write(f"stopped: {', '.join(stopped) or 'nothing (not running)'}")
            p = embedded.paths()
            for name, up in embedded.status().items():
                self.stdout.write(f"{name:<11} {'running' if up else 'stopped'}")
            self.stdout.write(f"state folder: {p.home}\nsockets:      {p.run_dir}")
        except embedded.EmbeddedError as exc:
            raise CommandError(str(exc)) from exc
