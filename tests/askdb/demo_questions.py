"""Researcher questions of new shapes on the demo, each with its expected outcome: the hand-written SQL
whose result is the right answer, or None when askdb must decline.

Why a list of its own: the demo library (benchmarks/data/mimiciv/train.json) was written beside its
SQL, so it measures how askdb answers what the library's authors thought of. These are written the
way a researcher trying askdb for the first time writes: other numbers ("10 most common" where the
library says "top 5"), number words, other values, other word order, typos, a question with no
patient id where the library has one, and questions the library must not answer (an operator the
library never uses, a condition more, a person's details). Written before the reading that tolerates
them was built (issue 26), so that the share answered right measures it rather than being tuned to it.

`{patient}` and `{year}` are filled from the clinical database the test runs on (the patient with the
most hospital admissions, the year with the most): the test data is synthetic, so ids and years
differ from the open demo's.
"""

from __future__ import annotations

H = "mimiciv_hosp"
I = "mimiciv_icu"  # noqa: E741

_DIAG = f"{H}.diagnoses_icd AS di JOIN {H}.d_icd_diagnoses AS d ON d.icd_code = di.icd_code AND d.icd_version = di.icd_version"
_PROC = f"{H}.procedures_icd AS pi JOIN {H}.d_icd_procedures AS d ON d.icd_code = pi.icd_code AND d.icd_version = pi.icd_version"
_LAB = f"{H}.labevents AS l JOIN {H}.d_labitems AS dl ON dl.itemid = l.itemid"

# (question, hand-written SQL or None for "must decline")
DEMO_QUESTIONS: list[tuple[str, str | None]] = [
    # --- the questions of issue 26 -------------------------------------------------------------
    # "Most common diagnoses" are those the most patients have (issue 30), not the most diagnosis rows.
    ("what are the 10 most common diagnoses?",
     f"SELECT d.long_title, COUNT(DISTINCT di.subject_id) AS n FROM {_DIAG} GROUP BY d.long_title ORDER BY n DESC, d.long_title LIMIT 10"),
    ("average length of stay in the ICU by first care unit",
     f"SELECT first_careunit, AVG(los) FROM {I}.icustays GROUP BY first_careunit"),
    ("how many female patients over 80?",
     f"SELECT COUNT(*) FROM {H}.patients WHERE gender = 'F' AND anchor_age > 80"),
    ("what is the average age of patients?", f"SELECT AVG(anchor_age) FROM {H}.patients"),
    ("how many ICU stays were there?", f"SELECT COUNT(*) FROM {I}.icustays"),
    ("how mnay femal patients are in teh databse?", f"SELECT COUNT(*) FROM {H}.patients WHERE gender = 'F'"),
    # --- counts of people and stays ------------------------------------------------------------
    ("how many male patients are in the database?", f"SELECT COUNT(*) FROM {H}.patients WHERE gender = 'M'"),
    ("how many female patients are there?", f"SELECT COUNT(*) FROM {H}.patients WHERE gender = 'F'"),
    ("count the number of patients older than 80.", f"SELECT COUNT(*) FROM {H}.patients WHERE anchor_age > 80"),
    ("count the number of patients older than fifty.",
     f"SELECT COUNT(*) FROM {H}.patients WHERE anchor_age > 50"),
    ("how many patients are older than 75?", f"SELECT COUNT(*) FROM {H}.patients WHERE anchor_age > 75"),
    ("cuont the number of patients older than 60.", f"SELECT COUNT(*) FROM {H}.patients WHERE anchor_age > 60"),
    ("what is the average age of female patients?",
     f"SELECT AVG(anchor_age) FROM {H}.patients WHERE gender = 'F'"),
    ("what is the avrage age of male patients?", f"SELECT AVG(anchor_age) FROM {H}.patients WHERE gender = 'M'"),
    ("how many hospital admissions were there in {year}?",
     f"SELECT COUNT(*) FROM {H}.admissions WHERE EXTRACT(YEAR FROM admittime) = {{year}}"),
    ("how many patients died in the hospital?",
     f"SELECT COUNT(DISTINCT subject_id) FROM {H}.admissions WHERE hospital_expire_flag = 1"),
    ("how many ICU stays lasted longer than 3 days?", f"SELECT COUNT(*) FROM {I}.icustays WHERE los > 3"),
    ("how many ICU stays lasted longer than ten days?", f"SELECT COUNT(*) FROM {I}.icustays WHERE los > 10"),
    ("how many patients stayed in the ICU more than once?",
     f"SELECT COUNT(*) FROM (SELECT subject_id FROM {I}.icustays GROUP BY subject_id HAVING COUNT(*) > 1) AS t"),
    ("how many hospital admissions included an ICU stay?",
     f"SELECT COUNT(DISTINCT hadm_id) FROM {I}.icustays"),
    ("how many patients were admitted to the ICU in {year}?",
     f"SELECT COUNT(DISTINCT subject_id) FROM {I}.icustays WHERE EXTRACT(YEAR FROM intime) = {{year}}"),
    ("how many hospital admissions were there per year since {year}?",
     f"SELECT EXTRACT(YEAR FROM admittime) AS y, COUNT(*) FROM {H}.admissions "
     f"WHERE EXTRACT(YEAR FROM admittime) >= {{year}} GROUP BY y"),
    # --- top N ---------------------------------------------------------------------------------
    ("what are the 10 most frequent diagnoses?",
     f"SELECT d.long_title, COUNT(DISTINCT di.subject_id) AS n FROM {_DIAG} GROUP BY d.long_title ORDER BY n DESC, d.long_title LIMIT 10"),
    ("what are the top 3 most frequent diagnoses?",
     f"SELECT d.long_title, COUNT(DISTINCT di.subject_id) AS n FROM {_DIAG} GROUP BY d.long_title ORDER BY n DESC, d.long_title LIMIT 3"),
    ("what are the three most common procedures?",
     f"SELECT d.long_title, COUNT(*) AS n FROM {_PROC} GROUP BY d.long_title ORDER BY n DESC, d.long_title LIMIT 3"),
    ("what are the 10 most common procedures?",
     f"SELECT d.long_title, COUNT(*) AS n FROM {_PROC} GROUP BY d.long_title ORDER BY n DESC, d.long_title LIMIT 10"),
    ("what are the 10 most frequently prescribed drugs?",
     f"SELECT drug, COUNT(*) AS n FROM {H}.prescriptions GROUP BY drug ORDER BY n DESC, drug LIMIT 10"),
    ("what are the top three most frequent lab tests?",
     f"SELECT dl.label, COUNT(*) AS n FROM {_LAB} GROUP BY dl.label ORDER BY n DESC, dl.label LIMIT 3"),
    ("what are the 5 most common specimen types in microbiology tests?",
     f"SELECT spec_type_desc, COUNT(*) AS n FROM {H}.microbiologyevents GROUP BY spec_type_desc "
     "ORDER BY n DESC, spec_type_desc LIMIT 5"),
    ("what are the top 3 admission locations by number of admissions?",
     f"SELECT admission_location, COUNT(*) AS n FROM {H}.admissions GROUP BY admission_location "
     "ORDER BY n DESC, admission_location LIMIT 3"),
    ("what are the 10 most common DRG descriptions?",
     f"SELECT description, COUNT(*) AS n FROM {H}.drgcodes GROUP BY description ORDER BY n DESC, description LIMIT 10"),
    ("what are the top 10 most frequent ICU input events?",
     f"SELECT di.label, COUNT(*) AS n FROM {I}.inputevents AS ie JOIN {I}.d_items AS di ON di.itemid = ie.itemid "
     "GROUP BY di.label ORDER BY n DESC, di.label LIMIT 10"),
    # --- other values, other wording -----------------------------------------------------------
    ("what is the average ICU length of stay in the Medical Intensive Care Unit (MICU)?",
     f"SELECT AVG(los) FROM {I}.icustays WHERE first_careunit = 'Medical Intensive Care Unit (MICU)'"),
    ("what is the average hospital length of stay in days for urgent admissions?",
     f"SELECT AVG(EXTRACT(EPOCH FROM (dischtime - admittime)) / 86400.0) FROM {H}.admissions "
     "WHERE admission_type = 'URGENT'"),
    ("how many admissions were covered by Medicaid since {year}?",
     f"SELECT COUNT(*) FROM {H}.admissions WHERE insurance = 'Medicaid' AND EXTRACT(YEAR FROM admittime) >= {{year}}"),
    ("count the number of patients diagnosed with acute kidney failure, unspecified.",
     f"SELECT COUNT(DISTINCT di.subject_id) FROM {_DIAG} WHERE d.long_title = 'Acute kidney failure, unspecified'"),
    ("how many patients received norepinephrine in the ICU?",
     f"SELECT COUNT(DISTINCT ie.subject_id) FROM {I}.inputevents AS ie JOIN {I}.d_items AS di "
     "ON di.itemid = ie.itemid WHERE di.label = 'Norepinephrine'"),
    ("count the number of patients who had a potassium value above 5.5.",
     f"SELECT COUNT(DISTINCT l.subject_id) FROM {_LAB} WHERE dl.label = 'Potassium' AND l.valuenum > 5.5"),
    ("count the number of patients who had a sodium value above 145.",
     f"SELECT COUNT(DISTINCT l.subject_id) FROM {_LAB} WHERE dl.label = 'Sodium' AND l.valuenum > 145"),
    ("how many patients were prescribed furosemide in {year}?",
     f"SELECT COUNT(DISTINCT subject_id) FROM {H}.prescriptions WHERE drug = 'Furosemide' "
     "AND EXTRACT(YEAR FROM starttime) = {year}"),
    ("what is the average age of patients whose ICU stay started in the Medical Intensive Care Unit (MICU)?",
     f"SELECT AVG(p.anchor_age) FROM {H}.patients AS p WHERE p.subject_id IN (SELECT subject_id FROM {I}.icustays "
     "WHERE first_careunit = 'Medical Intensive Care Unit (MICU)')"),
    ("what was the average potassium value across all patients in {year}?",
     f"SELECT AVG(l.valuenum) FROM {_LAB} WHERE dl.label = 'Potassium' AND EXTRACT(YEAR FROM l.charttime) = {{year}}"),
    ("how many patients were admitted through the emergency room in {year}?",
     f"SELECT COUNT(DISTINCT subject_id) FROM {H}.admissions WHERE admission_location = 'EMERGENCY ROOM' "
     "AND EXTRACT(YEAR FROM admittime) = {year}"),
    # --- one patient ---------------------------------------------------------------------------
    ("what is the gender of patient {patient}?", f"SELECT gender FROM {H}.patients WHERE subject_id = {{patient}}"),
    ("how many times was patient {patient} admited to the hospital?",
     f"SELECT COUNT(*) FROM {H}.admissions WHERE subject_id = {{patient}}"),
    ("how many ICU stays did patient {patient} have?",
     f"SELECT COUNT(*) FROM {I}.icustays WHERE subject_id = {{patient}}"),
    ("what was the insurance of patient {patient} on the first hospital visit?",
     f"SELECT insurance FROM {H}.admissions WHERE subject_id = {{patient}} ORDER BY admittime ASC LIMIT 1"),
    ("what is the anchor age of patient {patient}?",
     f"SELECT anchor_age FROM {H}.patients WHERE subject_id = {{patient}}"),
    ("what was the marital status of patient {patient} at the first hospital visit?",
     f"SELECT marital_status FROM {H}.admissions WHERE subject_id = {{patient}} ORDER BY admittime ASC LIMIT 1"),
    # --- questions the library must not answer with what it has (no template says it) ----------
    ("what is the median age of patients?",
     f"SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY anchor_age) FROM {H}.patients"),
    ("what is the maximum age of female patients?", f"SELECT MAX(anchor_age) FROM {H}.patients WHERE gender = 'F'"),
    ("how many patients are younger than 40?", f"SELECT COUNT(*) FROM {H}.patients WHERE anchor_age < 40"),
    ("how many ICU stays lasted less than 2 days?", f"SELECT COUNT(*) FROM {I}.icustays WHERE los < 2"),
    ("what are the 10 least common diagnoses?",
     f"SELECT d.long_title, COUNT(*) AS n FROM {_DIAG} GROUP BY d.long_title ORDER BY n ASC, d.long_title LIMIT 10"),
    ("how many female patients died in the hospital?",
     f"SELECT COUNT(DISTINCT a.subject_id) FROM {H}.admissions AS a JOIN {H}.patients AS p "
     "ON p.subject_id = a.subject_id WHERE a.hospital_expire_flag = 1 AND p.gender = 'F'"),
    ("how many patients were never diagnosed with atrial fibrillation?",
     f"SELECT COUNT(*) FROM {H}.patients WHERE subject_id NOT IN (SELECT di.subject_id FROM {_DIAG} "
     "WHERE d.long_title = 'Atrial fibrillation')"),
    ("how many procedures were performed in {year}?",
     f"SELECT COUNT(*) FROM {H}.procedures_icd WHERE EXTRACT(YEAR FROM chartdate) = {{year}}"),
    ("what is the average number of hospital admissions per patient?",
     f"SELECT AVG(n) FROM (SELECT subject_id, COUNT(*) AS n FROM {H}.admissions GROUP BY subject_id) AS t"),
    ("how many admissions lasted more than 10 days?",
     f"SELECT COUNT(*) FROM {H}.admissions WHERE dischtime - admittime > INTERVAL '10 days'"),
    ("how many patients older than 65 were admitted to the ICU?",
     f"SELECT COUNT(DISTINCT p.subject_id) FROM {H}.patients AS p JOIN {I}.icustays AS s "
     "ON s.subject_id = p.subject_id WHERE p.anchor_age > 65"),
    ("how many distinct drugs were prescribed?", f"SELECT COUNT(DISTINCT drug) FROM {H}.prescriptions"),
    # --- must decline --------------------------------------------------------------------------
    ("what is the home address of patient {patient}?", None),
    ("what is the phone number of patient {patient}?", None),
    ("how many patients will be admitted next year?", None),
    ("delete all patients older than 90.", None),
    ("what's the weather like in boston today?", None),
    ("which treatment should patient {patient} get for atrial fibrillation?", None),
]  # fmt: skip
