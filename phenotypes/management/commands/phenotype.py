"""`python manage.py phenotype define --file F` and `phenotype run NAME --source S [--json]`."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from metadata_admin.models import ClinicalSource
from phenotypes.models import Phenotype, PhenotypeRun
from phenotypes.selectors import run_result
from phenotypes.services import (
    PhenotypeError,
    phenotype_define,
    phenotype_define_bundled,
    phenotype_run_create,
    phenotype_run_execute,
    read_definition_file,
)


class Command(BaseCommand):
    help = "Define phenotypes (YAML/JSON) and find them in a source's clinical notes."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        define = sub.add_parser("define", help="create or replace phenotype definitions")
        define.add_argument("--file", type=Path, help="YAML or JSON with name, description, terms, icd")
        define.add_argument("--bundled", action="store_true", help="the four definitions askdb ships")
        run = sub.add_parser("run", help="decide present/absent/uncertain per patient from the notes")
        run.add_argument("name")
        run.add_argument("--source", required=True, help="clinical source name")
        run.add_argument("--judge", default="context", choices=PhenotypeRun.Judge.values)
        run.add_argument("--json", action="store_true", help="print the result as JSON")
        run.add_argument("--evidence", default="deciding", choices=("deciding", "all", "none"))
        run.add_argument("--no-rerank", action="store_true", help="skip ranking snippets by embedding")

    def handle(self, *args, action, **options):
        try:
            if action == "define":
                self._define(options["file"], options["bundled"])
            else:
                self._run(options)
        except PhenotypeError as exc:
            raise CommandError(str(exc)) from exc

    def _define(self, path: Path | None, bundled: bool) -> None:
        if not path and not bundled:
            raise CommandError("give --file F (YAML or JSON) or --bundled")
        defined = (
            phenotype_define_bundled()
            if bundled
            else [phenotype_define(data=d) for d in read_definition_file(path)]
        )
        for p in defined:
            self.stdout.write(f"defined {p.name}: {len(p.terms)} terms, {len(p.icd)} ICD patterns")

    def _run(self, options) -> None:
        phenotype = Phenotype.objects.filter(name=options["name"]).first()
        if phenotype is None:
            known = ", ".join(Phenotype.objects.values_list("name", flat=True)) or "none yet"
            raise CommandError(f"no phenotype {options['name']!r} (defined: {known})")
        source = ClinicalSource.objects.filter(name=options["source"]).first()
        if source is None:
            raise CommandError(f"no clinical source {options['source']!r}")
        run = phenotype_run_create(phenotype=phenotype, source=source, judge=options["judge"])
        if run.judge == PhenotypeRun.Judge.LLM:
            from phenotypes.tasks import phenotype_run_llm_wait  # local: Celery only for the LLM judge

            run = phenotype_run_llm_wait(run.pk)
        else:
            say = None if options["json"] else self.stderr.write
            try:
                run = phenotype_run_execute(run_id=run.pk, rerank=not options["no_rerank"], out=say)
            except Exception as exc:
                raise CommandError(f"run {run.pk} failed: {exc}") from exc
        if run.status != PhenotypeRun.Status.DONE:
            raise CommandError(f"run {run.pk} {run.status}: {run.error}")
        result = run_result(run, evidence=options["evidence"])
        if options["json"]:
            self.stdout.write(json.dumps(result, default=str))
            return
        c = run.counts
        self.stdout.write(
            f"{result['phenotype']}: {c['present']} present, {c['uncertain']} uncertain, "
            f"{c['absent']} absent of {c['patients']} patients (run {run.pk})"
        )
        if run.agreement:
            a = run.agreement
            self.stdout.write(
                f"against the ICD definition: both {a['both']}, notes only {a['notes_only']}, "
                f"codes only {a['codes_only']}, neither {a['neither']}"
            )
