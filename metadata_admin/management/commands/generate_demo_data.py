"""`python manage.py generate_demo_data OUT_DIR --patients N --seed S [--load]`."""

from pathlib import Path

from django.core.management import call_command
from django.core.management.base import BaseCommand

from metadata_admin.clinical import synthetic


class Command(BaseCommand):
    help = "Write deterministic synthetic MIMIC-IV-shaped data (hosp/ and icu/ .csv.gz); --load loads it."

    def add_arguments(self, parser):
        parser.add_argument("out_dir", type=Path)
        parser.add_argument("--patients", type=int, default=100)
        parser.add_argument("--seed", type=int, default=42)
        parser.add_argument("--load", action="store_true", help="then load it like load_mimic")
        parser.add_argument("--replace", action="store_true")

    def handle(self, *args, out_dir: Path, patients: int, seed: int, load: bool, replace: bool, **options):
        result = synthetic.generate(out_dir, patients=patients, seed=seed, progress=True)
        rows = getattr(result, "rows", result)
        self.stdout.write(f"wrote {sum(rows.values()):,} rows in {len(rows)} tables to {out_dir}")
        if load:
            call_command("load_mimic", str(out_dir), *(["--replace"] if replace else []))
