"""Phenotype runs end to end on the test clinical database (synthetic notes with known truth):
define from a file, run from the command line, decisions and evidence, the 2x2 against codes,
and who sees what."""

from __future__ import annotations

import json
from io import StringIO

import psycopg
import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command

from askdb.roles import roles_sync
from infra.audit.models import AuditEvent
from metadata_admin.clinical import synthetic_notes
from phenotypes.models import Evidence, PatientDecision, Phenotype, PhenotypeRun
from phenotypes.selectors import run_result
from phenotypes.services import (
    PhenotypeError,
    phenotype_define,
    phenotype_define_bundled,
    phenotype_run_create,
    phenotype_run_execute,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def truth(source):
    return synthetic_notes.read_truth(settings.ASKDB_HOME / "test-data" / synthetic_notes.TRUTH_FILE)


def _f1(predicted: set[int], actual: set[int]) -> float:
    tp = len(predicted & actual)
    if not predicted and not actual:
        return 1.0
    return 2 * tp / (len(predicted) + len(actual))


def test_define_from_yaml_and_json_replaces_by_name_and_audits(tmp_path):
    f = tmp_path / "ph.yaml"
    f.write_text(
        "name: pulmonary hypertension\ndescription: high PA pressure\nterms: [pulmonary hypertension]\nicd: ['I27.%']\n"
    )
    call_command("phenotype", "define", "--file", str(f), stdout=StringIO())
    g = tmp_path / "ph.json"
    g.write_text(
        json.dumps(
            {
                "name": "pulmonary hypertension",
                "description": "PH",
                "terms": ["PAH", "pulmonary hypertension"],
                "icd": [],
            }
        )
    )
    call_command("phenotype", "define", "--file", str(g), stdout=StringIO())
    p = Phenotype.objects.get()
    assert (p.description, p.terms, p.icd) == ("PH", ["PAH", "pulmonary hypertension"], [])
    events = list(AuditEvent.objects.filter(action="phenotype.defined").order_by("id"))
    assert len(events) == 2
    assert events[0].detail["definition"]["icd"] == ["I27%"]  # the dot MIMIC does not store is dropped
    assert events[1].detail["before"]["terms"] == ["pulmonary hypertension"]


@pytest.mark.parametrize(
    "data, message",
    [
        ({"name": "x", "description": "d", "terms": []}, "non-empty list"),
        ({"name": "x", "description": "", "terms": ["a"]}, "no description"),
        ({"name": "x", "description": "d", "terms": ["a"], "icd": ["I27'; DROP"]}, "not an ICD code pattern"),
        ({"name": "x", "description": "d", "terms": ["a"], "codes": []}, "unknown key"),
    ],
)
def test_bad_definitions_are_refused_with_a_reason(data, message):
    with pytest.raises(PhenotypeError, match=message):
        phenotype_define(data=data)


def test_run_finds_the_truth_better_than_codes_and_prints_the_json_shape(source, truth):
    phenotype_define_bundled()
    for name, t in truth["phenotypes"].items():
        out = StringIO()
        call_command("phenotype", "run", name, "--source", source.name, "--json", stdout=out)
        result = json.loads(out.getvalue())
        assert result["phenotype"] == name
        assert set(result["counts"]) >= {"present", "absent", "uncertain", "patients"}
        patients = {p["subject_id"]: p for p in result["patients"]}
        assert set(patients) == set(truth["subjects"])
        present = {s for s, p in patients.items() if p["decision"] == "present"}
        assert _f1(present, set(t["present"])) >= 0.9, name
        uncertain = {s for s, p in patients.items() if p["decision"] == "uncertain"}
        assert uncertain == set(t["uncertain"]), name
        for subject in present:
            evidence = patients[subject]["evidence"]
            assert evidence and all(e["assertion"] in ("affirmed", "historical") for e in evidence)
            assert all(e["text"][e["term"][0] : e["term"][1]] for e in evidence)
        run = PhenotypeRun.objects.get(pk=result["run"])
        a = run.agreement
        assert sum(a.values()) == len(patients)
        assert a["both"] + a["codes_only"] == len(set(t["coded"]))


def test_a_patient_coded_but_ruled_out_in_the_notes_is_absent_with_the_negation_as_evidence(source, truth):
    (p,) = [x for x in phenotype_define_bundled() if x.name == "heart failure"]
    run = phenotype_run_execute(run_id=phenotype_run_create(phenotype=p, source=source).pk, rerank=False)
    t = truth["phenotypes"]["heart failure"]
    ruled_out = set(t["coded"]) - set(t["present"]) - set(t["uncertain"])
    for decision in PatientDecision.objects.filter(run=run, subject_id__in=ruled_out):
        assert decision.decision == "absent" and decision.coded
        deciding = list(Evidence.objects.filter(decision=decision, deciding=True))
        assert deciding and {e.assertion for e in deciding} == {"negated"}


def test_evidence_is_ranked_by_similarity_to_the_description(source):
    (p,) = [x for x in phenotype_define_bundled() if x.name == "atrial fibrillation"]
    run = phenotype_run_execute(run_id=phenotype_run_create(phenotype=p, source=source).pk)
    scores = [e.score for e in Evidence.objects.filter(decision__run=run)]
    assert scores and all(s is not None and -1.0 <= s <= 1.0 for s in scores)


def _user(name: str, group: str) -> User:
    roles_sync()
    user = User.objects.create_user(name, password="x")
    user.groups.add(Group.objects.get(name=group))
    return user


def test_aggregate_only_users_see_counts_and_researchers_no_note_text(source):
    (p,) = [x for x in phenotype_define_bundled() if x.name == "sepsis"]
    run = phenotype_run_execute(run_id=phenotype_run_create(phenotype=p, source=source).pk, rerank=False)
    aggregate = run_result(run, user=_user("agg", "aggregate_researcher"))
    assert "patients" not in aggregate and aggregate["counts"]["patients"] > 0
    researcher = run_result(run, user=_user("res", "researcher"))
    evidence = [e for p in researcher["patients"] for e in p["evidence"]]
    assert evidence and all("text" not in e and "assertion" in e for e in evidence)
    reviewer = run_result(run, user=_user("rev", "reviewer"))
    assert any("text" in e for p in reviewer["patients"] for e in p["evidence"])


def test_run_of_an_unknown_phenotype_or_a_source_without_notes_fails_with_a_reason(source):
    with pytest.raises(CommandError, match="no phenotype 'gout'"):
        call_command("phenotype", "run", "gout", "--source", source.name)
    p = phenotype_define(data={"name": "gout", "description": "gout", "terms": ["gout"]})
    from metadata_admin.models import ClinicalSource

    other = ClinicalSource.objects.create(name="elsewhere", url="sqlite:///nothing.db", engine="sqlite")
    with pytest.raises(PhenotypeError, match="has no notes askdb may read"):
        phenotype_run_create(phenotype=p, source=other)


def test_the_sql_readers_cannot_read_note_text(source):
    """Generated SQL runs as the reader: even SQL that slipped past validation gets no note."""
    with (
        psycopg.connect(settings.CLINICAL_DATABASE_URL) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("SELECT text FROM mimiciv_note.discharge LIMIT 1")
