"""Reads of phenotype runs, shaped for the command line, the API and the pages.

Who sees what: without `askdb.view_row_level` a user gets the counts only (no patient list, no
snippets); without `askdb.view_sensitive` the patient list and the assertions but no note text.
"""

from __future__ import annotations

import random

from phenotypes.decide import wilson_interval
from phenotypes.models import Adjudication, Evidence, PatientDecision, Phenotype, PhenotypeRun


def phenotype_list() -> list[Phenotype]:
    return list(Phenotype.objects.all())


def run_access(user) -> tuple[bool, bool]:
    """(may see patients, may see note text) for `user`; None means the operator (command line)."""
    if user is None:
        return True, True
    return user.has_perm("askdb.view_row_level"), user.has_perm("askdb.view_sensitive")


def run_result(run: PhenotypeRun, *, user=None, evidence: str = "deciding") -> dict:
    """The run as {"phenotype", "patients": [{subject_id, decision, evidence: [...]}], "counts"}.

    `evidence`: "deciding" (the snippets that decided each patient), "all" or "none".
    """
    rows_ok, text_ok = run_access(user)
    result: dict = {
        "phenotype": run.definition.get("name", run.phenotype.name),
        "run": run.pk,
        "status": run.status,
        "judge": run.judge,
        "counts": run.counts,
        "agreement": run.agreement,
    }
    if run.status == PhenotypeRun.Status.FAILED:
        result["error"] = run.error
    if not rows_ok:
        return result
    decisions = list(PatientDecision.objects.filter(run=run).order_by("subject_id"))
    by_decision: dict[int, list[dict]] = {d.pk: [] for d in decisions}
    if evidence != "none":
        qs = Evidence.objects.filter(decision__run=run)
        if evidence == "deciding":
            qs = qs.filter(deciding=True)
        for e in qs.order_by("decision_id", "-deciding", "-score", "id"):
            item = {"note_id": e.note_id, "section": e.section, "assertion": e.assertion, "score": e.score}
            if text_ok:
                item.update(text=e.text, term=[e.term_start, e.term_end])
            by_decision[e.decision_id].append(item)
    result["patients"] = [
        {"subject_id": d.subject_id, "decision": d.decision, "coded": d.coded, "evidence": by_decision[d.pk]}
        for d in decisions
    ]
    return result


def adjudication_sample(
    run: PhenotypeRun, *, size: int = 20, seed: int | None = None
) -> list[PatientDecision]:
    """A random sample of the run's 'present' patients to adjudicate, the same for every reviewer."""
    ids = list(
        PatientDecision.objects.filter(run=run, decision=PatientDecision.Decision.PRESENT)
        .order_by("subject_id")
        .values_list("pk", flat=True)
    )
    rng = random.Random(run.pk if seed is None else seed)
    chosen = rng.sample(ids, min(size, len(ids)))
    return list(PatientDecision.objects.filter(pk__in=chosen).order_by("subject_id"))


def estimated_precision(run: PhenotypeRun) -> dict:
    """Share of adjudicated 'present' decisions reviewers agreed with, with its 95 % Wilson interval."""
    votes = Adjudication.objects.filter(
        decision__run=run, decision__decision=PatientDecision.Decision.PRESENT
    )
    n = votes.count()
    agree = votes.filter(agree=True).count()
    low, high = wilson_interval(agree, n)
    return {
        "adjudicated": n,
        "agree": agree,
        "precision": (agree / n) if n else None,
        "low": low,
        "high": high,
    }
