"""Rewrite imports of the old match-stage modules to askdb.pipeline.match (run from the repo root)."""

import re
import subprocess
from pathlib import Path

NAMES = r"(CV_FOLDS|DEFAULT_RISK|LibraryIndex|UNANSWERABLE|ValueIndex|answer_threshold|cross_validate|entry_for|expected|fit_risk|fold_risks|key_hash|load_values|match_library|out_of_fold|Calibration|decide|mask_question|TemplateCandidate|MatchResult|grouped_folds|calibrate_library|decide_answer)"
files = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True).stdout.split()
for f in [f for f in files if not f.startswith(("askdb/pipeline/match/", "tests/askdb/pipeline/match/"))]:
    p = Path(f)
    s = p.read_text()
    o = s
    s = s.replace(
        "from askdb.pipeline import match_reasons as R", "from askdb.pipeline.match import reasons as R"
    )
    s = re.sub(
        r"from askdb\.pipeline import (library, offline|offline, library|library|offline)\b",
        "from askdb.pipeline import match",
        s,
    )
    s = re.sub(r"\b(?<!\.)(library|offline)\." + NAMES + r"\b", r"match.\2", s)
    s = re.sub(
        r"from askdb\.pipeline\.(templates|offline|library) import", "from askdb.pipeline.match import", s
    )
    s = s.replace(
        "from askdb.pipeline.match import ADMISSION_ID, PATIENT_ID, STAY_ID",
        "from askdb.pipeline.match.spans import ADMISSION_ID, PATIENT_ID, STAY_ID",
    )
    if s != o:
        p.write_text(s)
        print("rewrote", f)
