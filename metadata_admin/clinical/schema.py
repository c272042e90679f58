"""The MIMIC-IV v2.2 table layout (schemas mimiciv_hosp, mimiciv_icu and mimiciv_note), as Python data.

Why data and not a .sql file: the loader needs each table's column order and nullability to
check a CSV header before COPY, the app needs to know which tables exist, and constraints must
be applied one by one (a failed foreign key is reported, not fatal). Everything here is
transcribed from the MIT-LCP community build scripts for v2.2 (mimic-code,
mimic-iv/buildmimic/postgres: create.sql, constraint.sql, index.sql) so that queries written
against a community-built database run here unchanged: same types, same constraint and index
names. Index names are the community ones lower-cased, which is what PostgreSQL stores anyway
because the community scripts leave them unquoted. askdb adds single-column indexes on the keys
researchers filter by (RESEARCH_KEYS; named <table>_<column>_ix, flagged community=False), and a
few more where bench-scale showed the library's queries need them (_COMPOSITE_KEYS).
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

HOSP = "mimiciv_hosp"
ICU = "mimiciv_icu"
NOTE = "mimiciv_note"
# The schemas the SQL path reads (and the reader roles are granted). Notes are not among them:
# note text is the most sensitive data askdb holds and only the phenotype app reads it.
SCHEMAS: tuple[str, ...] = (HOSP, ICU)
# Every schema the loader creates (MIMIC-IV-Note is a separate module with its own schema).
ALL_SCHEMAS: tuple[str, ...] = (HOSP, ICU, NOTE)
# Release folder of each schema inside a MIMIC-IV download (hosp/admissions.csv.gz, ...).
MODULE_OF_SCHEMA: dict[str, str] = {HOSP: "hosp", ICU: "icu", NOTE: "note"}

_NOT_NULL = " NOT NULL"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # SQL type without the NOT NULL, e.g. "VARCHAR(40)"
    nullable: bool = True

    @property
    def ddl(self) -> str:
        return f"{self.name} {self.type}" + ("" if self.nullable else _NOT_NULL)


@dataclass(frozen=True)
class ForeignKey:
    name: str
    columns: tuple[str, ...]
    references: str  # "schema.table"
    ref_columns: tuple[str, ...]


@dataclass(frozen=True)
class Index:
    name: str
    columns: tuple[str, ...]
    # Set for the notes' search indexes: GIN over an expression (a tsvector, trigrams).
    method: str = ""
    expression: str = ""
    # False for the indexes askdb adds beyond the community index.sql (see RESEARCH_KEYS).
    community: bool = True
    # Columns stored in the index but not searched by (INCLUDE): what an index-only scan returns.
    include: tuple[str, ...] = ()


@dataclass(frozen=True)
class Table:
    schema: str
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    foreign_keys: tuple[ForeignKey, ...] = ()
    indexes: tuple[Index, ...] = ()

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def module(self) -> str:
        """The release folder holding this table's CSV: 'hosp' or 'icu'."""
        return MODULE_OF_SCHEMA[self.schema]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.qualified_name} has no column {name!r}")

    @property
    def pk_name(self) -> str:
        return f"{self.name}_pk"

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    # SQL generation. Identifiers come from this module only, but they still go through
    # psycopg.sql so that nothing here depends on them being tame.

    def create_sql(self, if_not_exists: bool = True) -> sql.Composed:
        cols = sql.SQL(",\n  ").join(
            sql.SQL("{} {}").format(
                sql.Identifier(c.name), sql.SQL(c.type + ("" if c.nullable else _NOT_NULL))
            )
            for c in self.columns
        )
        return sql.SQL("CREATE TABLE {ine}{table} (\n  {cols}\n)").format(
            ine=sql.SQL("IF NOT EXISTS " if if_not_exists else ""), table=self.ident, cols=cols
        )

    def primary_key_sql(self) -> sql.Composed | None:
        if not self.primary_key:
            return None
        return sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY ({})").format(
            self.ident,
            sql.Identifier(self.pk_name),
            sql.SQL(", ").join(map(sql.Identifier, self.primary_key)),
        )

    def index_sql(self) -> list[sql.Composed]:
        statements = []
        for ix in self.indexes:
            include = sql.SQL("")
            if ix.include:
                include = sql.SQL(" INCLUDE ({})").format(sql.SQL(", ").join(map(sql.Identifier, ix.include)))
            if ix.expression:
                # Expressions are constants of this module (never input), hence sql.SQL.
                statements.append(
                    sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING {} ({}){}").format(
                        sql.Identifier(ix.name),
                        self.ident,
                        sql.SQL(ix.method),
                        sql.SQL(ix.expression),
                        include,
                    )
                )
                continue
            statements.append(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({}){}").format(
                    sql.Identifier(ix.name),
                    self.ident,
                    sql.SQL(", ").join(map(sql.Identifier, ix.columns)),
                    include,
                )
            )
        return statements

    def foreign_key_sql(self, fk: ForeignKey) -> sql.Composed:
        ref_schema, ref_table = fk.references.split(".")
        return sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {} ({})").format(
            self.ident,
            sql.Identifier(fk.name),
            sql.SQL(", ").join(map(sql.Identifier, fk.columns)),
            sql.Identifier(ref_schema, ref_table),
            sql.SQL(", ").join(map(sql.Identifier, fk.ref_columns)),
        )


# --------------------------------------------------------------------------- builders
# Columns are written as (name, "TYPE [NOT NULL]") pairs so each table reads like, and can be
# diffed line by line against, the community create.sql.


def _fk(table: str, column: str, references: str) -> ForeignKey:
    """A community-named foreign key: <table>_<referenced table>_fk on one column."""
    ref_schema_table, ref_column = references.rsplit(".", 1)
    ref_name = ref_schema_table.split(".")[1]
    return ForeignKey(f"{table}_{ref_name}_fk", (column,), ref_schema_table, (ref_column,))


# The columns researchers' queries filter and join on. The community index.sql for v2.2 indexes
# the event tables mostly by time, so "the labs of patient 10001217" or "every heart rate"
# scans all of labevents (118M rows) or chartevents (313M); askdb adds one single-column index
# per key below that no primary key or community index already leads with (an index serves a
# filter on its leading column only). The dictionaries' keys are their primary keys, except the
# two key-only tables the community build leaves without one.
RESEARCH_KEYS: tuple[str, ...] = ("subject_id", "hadm_id", "stay_id", "itemid")
_DICTIONARY_KEYS: dict[str, str] = {"provider": "provider_id", "caregiver": "caregiver_id"}
# Indexes `make bench-scale` showed the library's queries need, at 10,000 patients:
# - labevents (hadm_id, itemid), "the potassium values of this admission": with one index per key
#   the planner ANDs the admission's few hundred rows with every row of that test (172k: 75 ms);
# - labevents (itemid, valuenum, subject_id), "patients with a potassium above 5": read from the
#   index alone, not the test's 172k rows from the table (370 ms -> 1.3 ms);
# - prescriptions (drug), "the routes of metoprolol", "heparin in 2150" (a scan: 70-90 ms -> 16-20 ms).
# - prescriptions (hadm_id, drug), "the top 3 drugs of patients with atrial fibrillation": the drugs
#   of those admissions read from the index alone (an index-only scan once VACUUM has set the
#   visibility map, which the loader runs after COPY), not a heap fetch per prescription.
# - diagnoses_icd (icd_code, icd_version, subject_id, hadm_id), "patients diagnosed with atrial
#   fibrillation" (and its admissions' drugs): the few codes a title names, looked up in the index
#   that also holds who and which admission, not a scan of every diagnosis (AF drugs: 139 -> 45 ms).
_COMPOSITE_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    "labevents": (("hadm_id", "itemid"), ("itemid", "valuenum", "subject_id")),
    "prescriptions": (("drug",), ("hadm_id", "drug")),
    "diagnoses_icd": (("icd_code", "icd_version", "subject_id", "hadm_id"),),
}
# The library asks "in 2150" as `EXTRACT(YEAR FROM <time>) = 2150`: its year slot binds a number
# there, so the SQL keeps that shape and the index matches it instead (an expression index on
# exactly that expression; a plain index on the time cannot serve EXTRACT). Each is led by the
# key the same questions name (a lab test, a drug) and INCLUDEs the time column and what the
# question returns, so the planner can answer from the index alone (it needs every column the
# query reads, the time inside EXTRACT included): "the average urea nitrogen in 2150" reads that
# test's rows of that year, not every urea nitrogen since 2110. (key, time column, returned)
_YEAR_KEYS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "labevents": (("itemid", "charttime", ("valuenum",)),),
    "prescriptions": (("drug", "starttime", ("subject_id",)),),
}


def year_expression(column: str) -> str:
    """The indexed year of a time column, written as the library's SQL writes it."""
    return f"EXTRACT(YEAR FROM {column})"


def _year_indexes(name: str) -> list[Index]:
    return [
        Index(
            f"{name}_{key}_{time}_year_ix",
            (key, time),
            method="btree",
            expression=f"{key}, ({year_expression(time)})",
            community=False,
            include=(time, *returned),
        )
        for key, time, returned in _YEAR_KEYS.get(name, ())
    ]


def _research_indexes(
    name: str, columns: list[Column], pk: tuple[str, ...], community: list[Index]
) -> list[Index]:
    names = {c.name for c in columns}
    led = {pk[0]} if pk else set()
    led |= {ix.columns[0] for ix in community}
    keys = [k for k in (*RESEARCH_KEYS, _DICTIONARY_KEYS.get(name, "")) if k in names and k not in led]
    single = [Index(f"{name}_{key}_ix", (key,), community=False) for key in keys]
    both = [Index(f"{name}_{'_'.join(c)}_ix", c, community=False) for c in _COMPOSITE_KEYS.get(name, ())]
    return single + both + _year_indexes(name)


def _table(
    schema: str,
    name: str,
    columns: list[tuple[str, str]],
    pk: tuple[str, ...] = (),
    fks: list[tuple[str, str]] | None = None,
    indexes: list[tuple[str, tuple[str, ...]]] | None = None,
) -> Table:
    cols = []
    for col_name, col_type in columns:
        nullable = not col_type.endswith(_NOT_NULL)
        cols.append(Column(col_name, col_type.removesuffix(_NOT_NULL), nullable))
    community = [Index(ix_name, ix_cols) for ix_name, ix_cols in (indexes or [])]
    return Table(
        schema=schema,
        name=name,
        columns=tuple(cols),
        primary_key=pk,
        foreign_keys=tuple(_fk(name, col, ref) for col, ref in (fks or [])),
        indexes=(*community, *_research_indexes(name, cols, pk, community)),
    )


_PATIENT = ("subject_id", "mimiciv_hosp.patients.subject_id")
_ADMISSION = ("hadm_id", "mimiciv_hosp.admissions.hadm_id")
_STAY = ("stay_id", "mimiciv_icu.icustays.stay_id")
_ITEM = ("itemid", "mimiciv_icu.d_items.itemid")

# --------------------------------------------------------------------------- hosp

_HOSP_TABLES = [
    _table(
        HOSP,
        "admissions",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("admittime", "TIMESTAMP NOT NULL"),
            ("dischtime", "TIMESTAMP"),
            ("deathtime", "TIMESTAMP"),
            ("admission_type", "VARCHAR(40) NOT NULL"),
            ("admit_provider_id", "VARCHAR(10)"),
            ("admission_location", "VARCHAR(60)"),
            ("discharge_location", "VARCHAR(60)"),
            ("insurance", "VARCHAR(255)"),
            ("language", "VARCHAR(10)"),
            ("marital_status", "VARCHAR(30)"),
            ("race", "VARCHAR(80)"),
            ("edregtime", "TIMESTAMP"),
            ("edouttime", "TIMESTAMP"),
            ("hospital_expire_flag", "SMALLINT"),
        ],
        pk=("hadm_id",),
        fks=[_PATIENT],
        indexes=[("admissions_idx01", ("admittime", "dischtime", "deathtime"))],
    ),
    _table(
        HOSP,
        "d_hcpcs",
        [
            ("code", "CHAR(5) NOT NULL"),
            ("category", "SMALLINT"),
            ("long_description", "TEXT"),
            ("short_description", "VARCHAR(180)"),
        ],
        pk=("code",),
    ),
    _table(
        HOSP,
        "diagnoses_icd",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("seq_num", "INTEGER NOT NULL"),
            ("icd_code", "CHAR(7)"),
            ("icd_version", "SMALLINT"),
        ],
        pk=("hadm_id", "seq_num", "icd_code", "icd_version"),
        fks=[_PATIENT, _ADMISSION],
    ),
    _table(
        HOSP,
        "d_icd_diagnoses",
        [
            ("icd_code", "CHAR(7) NOT NULL"),
            ("icd_version", "SMALLINT NOT NULL"),
            ("long_title", "VARCHAR(255)"),
        ],
        pk=("icd_code", "icd_version"),
        indexes=[("d_icd_diag_idx02", ("long_title",))],
    ),
    _table(
        HOSP,
        "d_icd_procedures",
        [
            ("icd_code", "CHAR(7) NOT NULL"),
            ("icd_version", "SMALLINT NOT NULL"),
            ("long_title", "VARCHAR(222)"),
        ],
        pk=("icd_code", "icd_version"),
        indexes=[("d_icd_proc_idx02", ("long_title",))],
    ),
    _table(
        HOSP,
        "d_labitems",
        [
            ("itemid", "INTEGER NOT NULL"),
            ("label", "VARCHAR(50)"),
            ("fluid", "VARCHAR(50)"),
            ("category", "VARCHAR(50)"),
        ],
        pk=("itemid",),
        indexes=[("d_labitems_idx01", ("label", "fluid", "category"))],
    ),
    _table(
        HOSP,
        "drgcodes",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("drg_type", "VARCHAR(4)"),
            ("drg_code", "VARCHAR(10) NOT NULL"),
            ("description", "VARCHAR(195)"),
            ("drg_severity", "SMALLINT"),
            ("drg_mortality", "SMALLINT"),
        ],
        fks=[_PATIENT, _ADMISSION],
        indexes=[
            ("drgcodes_idx01", ("drg_code", "drg_type")),
            ("drgcodes_idx02", ("description", "drg_severity")),
        ],
    ),
    _table(
        HOSP,
        "emar_detail",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("emar_id", "VARCHAR(25) NOT NULL"),
            ("emar_seq", "INTEGER NOT NULL"),
            ("parent_field_ordinal", "VARCHAR(10)"),
            ("administration_type", "VARCHAR(50)"),
            ("pharmacy_id", "INTEGER"),
            ("barcode_type", "VARCHAR(4)"),
            ("reason_for_no_barcode", "TEXT"),
            ("complete_dose_not_given", "VARCHAR(5)"),
            ("dose_due", "VARCHAR(100)"),
            ("dose_due_unit", "VARCHAR(50)"),
            ("dose_given", "VARCHAR(255)"),
            ("dose_given_unit", "VARCHAR(50)"),
            ("will_remainder_of_dose_be_given", "VARCHAR(5)"),
            ("product_amount_given", "VARCHAR(30)"),
            ("product_unit", "VARCHAR(30)"),
            ("product_code", "VARCHAR(30)"),
            ("product_description", "VARCHAR(255)"),
            ("product_description_other", "VARCHAR(255)"),
            ("prior_infusion_rate", "VARCHAR(40)"),
            ("infusion_rate", "VARCHAR(40)"),
            ("infusion_rate_adjustment", "VARCHAR(50)"),
            ("infusion_rate_adjustment_amount", "VARCHAR(30)"),
            ("infusion_rate_unit", "VARCHAR(30)"),
            ("route", "VARCHAR(10)"),
            ("infusion_complete", "VARCHAR(1)"),
            ("completion_interval", "VARCHAR(50)"),
            ("new_iv_bag_hung", "VARCHAR(1)"),
            ("continued_infusion_in_other_location", "VARCHAR(1)"),
            ("restart_interval", "VARCHAR(2305)"),
            ("side", "VARCHAR(10)"),
            ("site", "VARCHAR(255)"),
            ("non_formulary_visual_verification", "VARCHAR(1)"),
        ],
        # No primary key: the community constraint.sql leaves (emar_id, parent_field_ordinal)
        # commented out because it is not unique in the release.
        fks=[_PATIENT, ("emar_id", "mimiciv_hosp.emar.emar_id")],
        indexes=[
            ("emar_detail_idx01", ("pharmacy_id",)),
            ("emar_detail_idx02", ("product_code",)),
            ("emar_detail_idx03", ("route", "site", "side")),
            ("emar_det_idx04", ("product_description",)),
        ],
    ),
    _table(
        HOSP,
        "emar",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER"),
            ("emar_id", "VARCHAR(25) NOT NULL"),
            ("emar_seq", "INTEGER NOT NULL"),
            ("poe_id", "VARCHAR(25) NOT NULL"),
            ("pharmacy_id", "INTEGER"),
            ("enter_provider_id", "VARCHAR(10)"),
            ("charttime", "TIMESTAMP NOT NULL"),
            ("medication", "TEXT"),
            ("event_txt", "VARCHAR(100)"),
            ("scheduletime", "TIMESTAMP"),
            ("storetime", "TIMESTAMP NOT NULL"),
        ],
        pk=("emar_id",),
        fks=[_PATIENT, _ADMISSION],
        indexes=[
            ("emar_idx01", ("poe_id",)),
            ("emar_idx02", ("pharmacy_id",)),
            ("emar_idx03", ("charttime", "scheduletime", "storetime")),
            ("emar_idx04", ("medication",)),
        ],
    ),
    _table(
        HOSP,
        "hcpcsevents",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("chartdate", "DATE"),
            ("hcpcs_cd", "CHAR(5) NOT NULL"),
            ("seq_num", "INTEGER NOT NULL"),
            ("short_description", "VARCHAR(180)"),
        ],
        pk=("hadm_id", "hcpcs_cd", "seq_num"),
        fks=[_PATIENT, _ADMISSION, ("hcpcs_cd", "mimiciv_hosp.d_hcpcs.code")],
        indexes=[("hcpcsevents_idx04", ("short_description",))],
    ),
    _table(
        HOSP,
        "labevents",
        [
            ("labevent_id", "INTEGER NOT NULL"),
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER"),
            ("specimen_id", "INTEGER NOT NULL"),
            ("itemid", "INTEGER NOT NULL"),
            ("order_provider_id", "VARCHAR(10)"),
            ("charttime", "TIMESTAMP(0)"),
            ("storetime", "TIMESTAMP(0)"),
            ("value", "VARCHAR(200)"),
            ("valuenum", "DOUBLE PRECISION"),
            ("valueuom", "VARCHAR(20)"),
            ("ref_range_lower", "DOUBLE PRECISION"),
            ("ref_range_upper", "DOUBLE PRECISION"),
            ("flag", "VARCHAR(10)"),
            ("priority", "VARCHAR(7)"),
            ("comments", "TEXT"),
        ],
        pk=("labevent_id",),
        fks=[_PATIENT, ("itemid", "mimiciv_hosp.d_labitems.itemid")],
        indexes=[
            ("labevents_idx01", ("charttime", "storetime")),
            ("labevents_idx02", ("specimen_id",)),
        ],
    ),
    _table(
        HOSP,
        "microbiologyevents",
        [
            ("microevent_id", "INTEGER NOT NULL"),
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER"),
            ("micro_specimen_id", "INTEGER NOT NULL"),
            ("order_provider_id", "VARCHAR(10)"),
            ("chartdate", "TIMESTAMP(0) NOT NULL"),
            ("charttime", "TIMESTAMP(0)"),
            ("spec_itemid", "INTEGER NOT NULL"),
            ("spec_type_desc", "VARCHAR(100) NOT NULL"),
            ("test_seq", "INTEGER NOT NULL"),
            ("storedate", "TIMESTAMP(0)"),
            ("storetime", "TIMESTAMP(0)"),
            ("test_itemid", "INTEGER"),
            ("test_name", "VARCHAR(100)"),
            ("org_itemid", "INTEGER"),
            ("org_name", "VARCHAR(100)"),
            ("isolate_num", "SMALLINT"),
            ("quantity", "VARCHAR(50)"),
            ("ab_itemid", "INTEGER"),
            ("ab_name", "VARCHAR(30)"),
            ("dilution_text", "VARCHAR(10)"),
            ("dilution_comparison", "VARCHAR(20)"),
            ("dilution_value", "DOUBLE PRECISION"),
            ("interpretation", "VARCHAR(5)"),
            ("comments", "TEXT"),
        ],
        pk=("microevent_id",),
        fks=[_PATIENT, _ADMISSION],
        indexes=[
            ("microbiologyevents_idx01", ("chartdate", "charttime", "storedate", "storetime")),
            ("microbiologyevents_idx02", ("spec_itemid", "test_itemid", "org_itemid", "ab_itemid")),
            ("microbiologyevents_idx03", ("micro_specimen_id",)),
        ],
    ),
    _table(
        HOSP,
        "omr",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("chartdate", "DATE NOT NULL"),
            ("seq_num", "INTEGER NOT NULL"),
            ("result_name", "VARCHAR(100) NOT NULL"),
            ("result_value", "TEXT NOT NULL"),
        ],
    ),
    _table(
        HOSP,
        "patients",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("gender", "CHAR(1) NOT NULL"),
            ("anchor_age", "SMALLINT"),
            ("anchor_year", "SMALLINT NOT NULL"),
            ("anchor_year_group", "VARCHAR(20) NOT NULL"),
            ("dod", "DATE"),
        ],
        pk=("subject_id",),
        indexes=[("patients_idx01", ("anchor_age",)), ("patients_idx02", ("anchor_year",))],
    ),
    _table(
        HOSP,
        "pharmacy",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("pharmacy_id", "INTEGER NOT NULL"),
            ("poe_id", "VARCHAR(25)"),
            ("starttime", "TIMESTAMP(3)"),
            ("stoptime", "TIMESTAMP(3)"),
            ("medication", "TEXT"),
            ("proc_type", "VARCHAR(50) NOT NULL"),
            ("status", "VARCHAR(50)"),
            ("entertime", "TIMESTAMP(3) NOT NULL"),
            ("verifiedtime", "TIMESTAMP(3)"),
            ("route", "VARCHAR(50)"),
            ("frequency", "VARCHAR(50)"),
            ("disp_sched", "VARCHAR(255)"),
            ("infusion_type", "VARCHAR(15)"),
            ("sliding_scale", "VARCHAR(1)"),
            ("lockout_interval", "VARCHAR(50)"),
            ("basal_rate", "REAL"),
            ("one_hr_max", "VARCHAR(10)"),
            ("doses_per_24_hrs", "REAL"),
            ("duration", "REAL"),
            ("duration_interval", "VARCHAR(50)"),
            ("expiration_value", "INTEGER"),
            ("expiration_unit", "VARCHAR(50)"),
            ("expirationdate", "TIMESTAMP(3)"),
            ("dispensation", "VARCHAR(50)"),
            ("fill_quantity", "VARCHAR(50)"),
        ],
        pk=("pharmacy_id",),
        fks=[_PATIENT, _ADMISSION],
        indexes=[
            ("pharmacy_idx01", ("poe_id",)),
            ("pharmacy_idx02", ("starttime", "stoptime")),
            ("pharmacy_idx03", ("medication",)),
            ("pharmacy_idx04", ("route",)),
        ],
    ),
    _table(
        HOSP,
        "poe_detail",
        [
            ("poe_id", "VARCHAR(25) NOT NULL"),
            ("poe_seq", "INTEGER NOT NULL"),
            ("subject_id", "INTEGER NOT NULL"),
            ("field_name", "VARCHAR(255) NOT NULL"),
            ("field_value", "TEXT"),
        ],
        pk=("poe_id", "field_name"),
        fks=[_PATIENT, ("poe_id", "mimiciv_hosp.poe.poe_id")],
    ),
    _table(
        HOSP,
        "poe",
        [
            ("poe_id", "VARCHAR(25) NOT NULL"),
            ("poe_seq", "INTEGER NOT NULL"),
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER"),
            ("ordertime", "TIMESTAMP(0) NOT NULL"),
            ("order_type", "VARCHAR(25) NOT NULL"),
            ("order_subtype", "VARCHAR(50)"),
            ("transaction_type", "VARCHAR(15)"),
            ("discontinue_of_poe_id", "VARCHAR(25)"),
            ("discontinued_by_poe_id", "VARCHAR(25)"),
            ("order_provider_id", "VARCHAR(10)"),
            ("order_status", "VARCHAR(15)"),
        ],
        pk=("poe_id",),
        fks=[_PATIENT, _ADMISSION],
        indexes=[("poe_idx01", ("order_type",))],
    ),
    _table(
        HOSP,
        "prescriptions",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("pharmacy_id", "INTEGER NOT NULL"),
            ("poe_id", "VARCHAR(25)"),
            ("poe_seq", "INTEGER"),
            ("order_provider_id", "VARCHAR(10)"),
            ("starttime", "TIMESTAMP(3)"),
            ("stoptime", "TIMESTAMP(3)"),
            ("drug_type", "VARCHAR(20) NOT NULL"),
            ("drug", "VARCHAR(255) NOT NULL"),
            ("formulary_drug_cd", "VARCHAR(50)"),
            ("gsn", "VARCHAR(255)"),
            ("ndc", "VARCHAR(25)"),
            ("prod_strength", "VARCHAR(255)"),
            ("form_rx", "VARCHAR(25)"),
            ("dose_val_rx", "VARCHAR(100)"),
            ("dose_unit_rx", "VARCHAR(50)"),
            ("form_val_disp", "VARCHAR(50)"),
            ("form_unit_disp", "VARCHAR(50)"),
            ("doses_per_24_hrs", "REAL"),
            ("route", "VARCHAR(50)"),
        ],
        pk=("pharmacy_id", "drug_type", "drug"),
        fks=[_PATIENT, _ADMISSION],
        indexes=[("prescriptions_idx01", ("starttime", "stoptime"))],
    ),
    _table(
        HOSP,
        "procedures_icd",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("seq_num", "INTEGER NOT NULL"),
            ("chartdate", "DATE NOT NULL"),
            ("icd_code", "VARCHAR(7)"),
            ("icd_version", "SMALLINT"),
        ],
        pk=("hadm_id", "seq_num", "icd_code", "icd_version"),
        fks=[_PATIENT, _ADMISSION],
    ),
    _table(HOSP, "provider", [("provider_id", "VARCHAR(10) NOT NULL")]),
    _table(
        HOSP,
        "services",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("transfertime", "TIMESTAMP NOT NULL"),
            ("prev_service", "VARCHAR(10)"),
            ("curr_service", "VARCHAR(10)"),
        ],
        pk=("hadm_id", "transfertime", "curr_service"),
        fks=[_PATIENT, _ADMISSION],
    ),
    _table(
        HOSP,
        "transfers",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER"),
            ("transfer_id", "INTEGER NOT NULL"),
            ("eventtype", "VARCHAR(10)"),
            ("careunit", "VARCHAR(255)"),
            ("intime", "TIMESTAMP"),
            ("outtime", "TIMESTAMP"),
        ],
        pk=("transfer_id",),
        fks=[_PATIENT],
        indexes=[
            ("transfers_idx01", ("hadm_id",)),
            ("transfers_idx02", ("intime",)),
            ("transfers_idx03", ("careunit",)),
        ],
    ),
]

# --------------------------------------------------------------------------- icu

_ICU_TABLES = [
    _table(ICU, "caregiver", [("caregiver_id", "INTEGER NOT NULL")]),
    _table(
        ICU,
        "chartevents",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("stay_id", "INTEGER NOT NULL"),
            ("caregiver_id", "INTEGER"),
            ("charttime", "TIMESTAMP NOT NULL"),
            ("storetime", "TIMESTAMP"),
            ("itemid", "INTEGER NOT NULL"),
            ("value", "VARCHAR(200)"),
            ("valuenum", "FLOAT"),
            ("valueuom", "VARCHAR(20)"),
            ("warning", "SMALLINT"),
        ],
        fks=[_PATIENT, _ADMISSION, _STAY, _ITEM],
        indexes=[("chartevents_idx01", ("charttime", "storetime"))],
    ),
    _table(
        ICU,
        "datetimeevents",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("stay_id", "INTEGER NOT NULL"),
            ("caregiver_id", "INTEGER"),
            ("charttime", "TIMESTAMP NOT NULL"),
            ("storetime", "TIMESTAMP"),
            ("itemid", "INTEGER NOT NULL"),
            ("value", "TIMESTAMP NOT NULL"),
            ("valueuom", "VARCHAR(20)"),
            ("warning", "SMALLINT"),
        ],
        pk=("stay_id", "itemid", "charttime"),
        fks=[_PATIENT, _ADMISSION, _STAY, _ITEM],
        indexes=[
            ("datetimeevents_idx01", ("charttime", "storetime")),
            ("datetimeevents_idx02", ("value",)),
        ],
    ),
    _table(
        ICU,
        "d_items",
        [
            ("itemid", "INTEGER NOT NULL"),
            ("label", "VARCHAR(100) NOT NULL"),
            ("abbreviation", "VARCHAR(50) NOT NULL"),
            ("linksto", "VARCHAR(30) NOT NULL"),
            ("category", "VARCHAR(50) NOT NULL"),
            ("unitname", "VARCHAR(50)"),
            ("param_type", "VARCHAR(20) NOT NULL"),
            ("lownormalvalue", "FLOAT"),
            ("highnormalvalue", "FLOAT"),
        ],
        pk=("itemid",),
        indexes=[("d_items_idx01", ("label", "abbreviation")), ("d_items_idx02", ("category",))],
    ),
    _table(
        ICU,
        "icustays",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("stay_id", "INTEGER NOT NULL"),
            ("first_careunit", "VARCHAR(255)"),
            ("last_careunit", "VARCHAR(255)"),
            ("intime", "TIMESTAMP"),
            ("outtime", "TIMESTAMP"),
            ("los", "FLOAT"),
        ],
        pk=("stay_id",),
        fks=[_PATIENT, _ADMISSION],
        indexes=[
            ("icustays_idx01", ("first_careunit", "last_careunit")),
            ("icustays_idx02", ("intime", "outtime")),
        ],
    ),
    _table(
        ICU,
        "ingredientevents",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("stay_id", "INTEGER"),
            ("caregiver_id", "INTEGER"),
            ("starttime", "TIMESTAMP NOT NULL"),
            ("endtime", "TIMESTAMP NOT NULL"),
            ("storetime", "TIMESTAMP"),
            ("itemid", "INTEGER NOT NULL"),
            ("amount", "FLOAT"),
            ("amountuom", "VARCHAR(20)"),
            ("rate", "FLOAT"),
            ("rateuom", "VARCHAR(20)"),
            ("orderid", "INTEGER NOT NULL"),
            ("linkorderid", "INTEGER"),
            ("statusdescription", "VARCHAR(20)"),
            ("originalamount", "FLOAT"),
            ("originalrate", "FLOAT"),
        ],
        # The community v2.2 scripts define no keys or indexes for ingredientevents.
    ),
    _table(
        ICU,
        "inputevents",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("stay_id", "INTEGER"),
            ("caregiver_id", "INTEGER"),
            ("starttime", "TIMESTAMP NOT NULL"),
            ("endtime", "TIMESTAMP NOT NULL"),
            ("storetime", "TIMESTAMP"),
            ("itemid", "INTEGER NOT NULL"),
            ("amount", "FLOAT"),
            ("amountuom", "VARCHAR(20)"),
            ("rate", "FLOAT"),
            ("rateuom", "VARCHAR(20)"),
            ("orderid", "INTEGER NOT NULL"),
            ("linkorderid", "INTEGER"),
            ("ordercategoryname", "VARCHAR(50)"),
            ("secondaryordercategoryname", "VARCHAR(50)"),
            ("ordercomponenttypedescription", "VARCHAR(100)"),
            ("ordercategorydescription", "VARCHAR(30)"),
            ("patientweight", "FLOAT"),
            ("totalamount", "FLOAT"),
            ("totalamountuom", "VARCHAR(50)"),
            ("isopenbag", "SMALLINT"),
            ("continueinnextdept", "SMALLINT"),
            ("statusdescription", "VARCHAR(20)"),
            ("originalamount", "FLOAT"),
            ("originalrate", "FLOAT"),
        ],
        pk=("orderid", "itemid"),
        fks=[_PATIENT, _ADMISSION, _STAY, _ITEM],
        indexes=[
            ("inputevents_idx01", ("starttime", "endtime")),
            ("inputevents_idx02", ("ordercategorydescription",)),
        ],
    ),
    _table(
        ICU,
        "outputevents",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("stay_id", "INTEGER NOT NULL"),
            ("caregiver_id", "INTEGER"),
            ("charttime", "TIMESTAMP(3) NOT NULL"),
            ("storetime", "TIMESTAMP(3) NOT NULL"),
            ("itemid", "INTEGER NOT NULL"),
            ("value", "FLOAT NOT NULL"),
            ("valueuom", "VARCHAR(20)"),
        ],
        pk=("stay_id", "charttime", "itemid"),
        fks=[_PATIENT, _ADMISSION, _STAY, _ITEM],
        indexes=[("outputevents_idx01", ("charttime", "storetime"))],
    ),
    _table(
        ICU,
        "procedureevents",
        [
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", "INTEGER NOT NULL"),
            ("stay_id", "INTEGER NOT NULL"),
            ("caregiver_id", "INTEGER"),
            ("starttime", "TIMESTAMP NOT NULL"),
            ("endtime", "TIMESTAMP NOT NULL"),
            ("storetime", "TIMESTAMP NOT NULL"),
            ("itemid", "INTEGER NOT NULL"),
            ("value", "FLOAT"),
            ("valueuom", "VARCHAR(20)"),
            ("location", "VARCHAR(100)"),
            ("locationcategory", "VARCHAR(50)"),
            ("orderid", "INTEGER"),
            ("linkorderid", "INTEGER"),
            ("ordercategoryname", "VARCHAR(50)"),
            ("ordercategorydescription", "VARCHAR(30)"),
            ("patientweight", "FLOAT"),
            ("isopenbag", "SMALLINT"),
            ("continueinnextdept", "SMALLINT"),
            ("statusdescription", "VARCHAR(20)"),
            ("originalamount", "FLOAT"),
            ("originalrate", "FLOAT"),
        ],
        pk=("orderid",),
        fks=[_PATIENT, _ADMISSION, _STAY, _ITEM],
        indexes=[
            ("procedureevents_idx01", ("starttime", "endtime")),
            ("procedureevents_idx02", ("ordercategoryname",)),
        ],
    ),
]

# --------------------------------------------------------------------------- note
# MIMIC-IV-Note v2.2 (note/discharge.csv.gz, note/radiology.csv.gz), as in mimic-code's
# mimic-iv-note/buildmimic/postgres/create.sql. No foreign keys: a notes-only release may be
# loaded beside hosp/icu data of another build. The search indexes (a full-text tsvector and
# trigrams, both GIN) are built at load time so that phenotype retrieval scales to the module.
NOTE_TEXT_SEARCH = "to_tsvector('english'::regconfig, text)"
"""The indexed expression; queries must use exactly this for the planner to use the index."""


def _note_table(name: str, hadm: str) -> Table:
    base = _table(
        NOTE,
        name,
        [
            ("note_id", "VARCHAR(25) NOT NULL"),
            ("subject_id", "INTEGER NOT NULL"),
            ("hadm_id", hadm),
            ("note_type", "CHAR(2) NOT NULL"),
            ("note_seq", "INTEGER NOT NULL"),
            ("charttime", "TIMESTAMP NOT NULL"),
            ("storetime", "TIMESTAMP"),
            ("text", "TEXT NOT NULL"),
        ],
        pk=("note_id",),
        indexes=[(f"{name}_idx01", ("subject_id",)), (f"{name}_idx02", ("hadm_id",))],
    )
    search = (
        Index(f"{name}_fts", ("text",), "gin", NOTE_TEXT_SEARCH),
        Index(f"{name}_trgm", ("text",), "gin", "text gin_trgm_ops"),
    )
    return Table(base.schema, base.name, base.columns, base.primary_key, (), base.indexes + search)


_NOTE_TABLES = [_note_table("discharge", "INTEGER NOT NULL"), _note_table("radiology", "INTEGER")]
NOTE_TABLES: tuple[Table, ...] = tuple(_NOTE_TABLES)

TABLES: tuple[Table, ...] = (*_HOSP_TABLES, *_ICU_TABLES, *_NOTE_TABLES)
_BY_QUALIFIED = {t.qualified_name: t for t in TABLES}


def table(name: str) -> Table:
    """Look a table up by 'admissions', 'hosp.admissions' or 'mimiciv_hosp.admissions'."""
    key = name.strip().lower()
    if key in _BY_QUALIFIED:
        return _BY_QUALIFIED[key]
    if "." in key:
        module, _, bare = key.partition(".")
        schema = {v: k for k, v in MODULE_OF_SCHEMA.items()}.get(module)
        if schema and f"{schema}.{bare}" in _BY_QUALIFIED:
            return _BY_QUALIFIED[f"{schema}.{bare}"]
    else:
        # Bare names are unique across hosp, icu and note in MIMIC-IV.
        matches = [t for t in TABLES if t.name == key]
        if len(matches) == 1:
            return matches[0]
    raise KeyError(f"unknown MIMIC-IV table {name!r}")


# --------------------------------------------------------------------------- summaries
# Whole-table aggregates over the event tables cannot be fast at full size: counting labevents
# per test reads all 118M rows (about 23 s extrapolated from 10,000 patients, whatever the index).
# The loader keeps the count instead, as a materialised view beside the table it summarises:
# built after the table's COPY, refreshed when the table is loaded again, created by
# `load_mimic --indexes-only` for a database loaded by other means, and documented in the
# catalog (docs/mimiciv/hosp.yaml) so the SQL a researcher is shown says what it reads.


@dataclass(frozen=True)
class Summary:
    schema: str
    name: str
    over: str  # the table it is computed from, in the same schema
    columns: tuple[str, ...]
    query: str  # a constant of this module (never input), its columns in that order

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    def create_sql(self) -> sql.Composed:
        return sql.SQL("CREATE MATERIALIZED VIEW {} AS {}").format(self.ident, sql.SQL(self.query))


SUMMARIES: tuple[Summary, ...] = (
    Summary(
        HOSP,
        "labevents_item_counts",
        "labevents",
        ("itemid", "n_events"),
        "SELECT itemid, count(*) AS n_events FROM mimiciv_hosp.labevents GROUP BY itemid",
    ),
)


def foreign_keys() -> list[tuple[Table, ForeignKey]]:
    """Every foreign key of the layout with the table that owns it, in community order."""
    return [(t, fk) for t in TABLES for fk in t.foreign_keys]


def indexed_columns(table: Table) -> frozenset[str]:
    """Columns a filter on which can use an index: the leading column of the primary key and of
    each index. The catalog page marks them so curators know which questions stay fast."""
    led = {table.primary_key[0]} if table.primary_key else set()
    return frozenset(led | {ix.columns[0] for ix in table.indexes if not ix.expression})


def ddl(conn=None) -> str:
    """The whole layout as one SQL script (tables, primary keys, indexes, foreign keys).

    For reading and for building a database by hand; the loader applies the same statements
    piecewise. `conn` is only needed to render identifiers exactly as psycopg would quote them
    for a given connection; without it they are rendered for a UTF-8 connection.
    """
    parts: list[sql.Composable] = [
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(s)) for s in ALL_SCHEMAS
    ]
    parts.append(sql.SQL("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
    for t in TABLES:
        parts.append(t.create_sql())
        if (pk := t.primary_key_sql()) is not None:
            parts.append(pk)
        parts.extend(t.index_sql())
    parts.extend(t.foreign_key_sql(fk) for t, fk in foreign_keys())
    return "".join(p.as_string(conn) + ";\n" for p in parts)
