"""The functions generated SQL may call, per dialect: an allow-list, not a deny-list.

A deny-list loses to every function nobody thought of (ts_stat runs SQL from a string,
pg_stat_get_activity lists other sessions), so validation refuses any function whose name is not
below. The lists are generous for analytics: aggregates, window, math, string, date/time,
conditional, array/JSON access and casts; they hold nothing that reads server state, files,
settings, other sessions, locks or sequences, or runs SQL given as text. Names are lower-case and
unqualified; validation refuses schema-qualified calls.
"""

from __future__ import annotations

# Standard SQL names both dialects understand.
_COMMON = """
abs avg ceil ceiling coalesce count cume_dist dense_rank exp first_value floor greatest lag
last_value lead least length lower ltrim max min nth_value ntile nullif percent_rank rank
replace round row_number rtrim sign substr substring sum trim upper
"""

_POSTGRES = """
acos acosd asin asind atan atan2 atan2d atand cbrt cos cosd cosh cot cotd degrees div erf erfc
factorial gcd lcm ln log log10 min_scale mod pi power radians random_normal scale sin sind sinh
sqrt tan tand tanh trim_scale trunc width_bucket

array_agg avg bit_and bit_or bit_xor bool_and bool_or corr count covar_pop covar_samp every
json_agg json_object_agg jsonb_agg jsonb_object_agg max min mode percentile_cont percentile_disc
regr_avgx regr_avgy regr_count regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy
stddev stddev_pop stddev_samp string_agg sum var_pop var_samp variance any_value
range_agg range_intersect_agg

ascii bit_length btrim char_length character_length chr concat concat_ws format initcap left
lpad md5 octet_length overlay position quote_ident quote_literal quote_nullable regexp_count
regexp_instr regexp_like regexp_match regexp_matches regexp_replace regexp_split_to_array
regexp_split_to_table regexp_substr repeat reverse right rpad split_part starts_with
string_to_array string_to_table strpos to_ascii to_hex translate unistr casefold normalize
convert_from encode decode sha224 sha256 sha384 sha512 text random

age clock_timestamp current_date current_time current_timestamp date_add date_bin date_part
date_subtract date_trunc extract isfinite justify_days justify_hours justify_interval localtime
localtimestamp make_date make_interval make_time make_timestamp make_timestamptz now
statement_timestamp timeofday to_char to_date to_number to_timestamp transaction_timestamp
timezone

generate_series generate_subscripts unnest array_append array_cat array_dims array_fill
array_length array_lower array_ndims array_position array_positions array_prepend array_remove
array_replace array_to_string array_upper cardinality trim_array array_sample array_shuffle
array_reverse array_sort

json_array_elements json_array_elements_text json_array_length json_build_array
json_build_object json_each json_each_text json_extract_path json_extract_path_text
json_object json_object_keys json_typeof jsonb_array_elements jsonb_array_elements_text
jsonb_array_length jsonb_build_array jsonb_build_object jsonb_each jsonb_each_text
jsonb_extract_path jsonb_extract_path_text jsonb_object_keys jsonb_path_exists jsonb_path_query
jsonb_path_query_array jsonb_path_query_first jsonb_strip_nulls jsonb_typeof row_to_json
to_json to_jsonb array_to_json json_strip_nulls jsonb_pretty

num_nonnulls num_nulls lower_inc lower_inf upper_inc upper_inf isempty range_merge
int4range int8range numrange tsrange tstzrange daterange
"""

# SQLite core, date/time and math functions (EHRSQL's gold SQL uses strftime, datetime, julianday).
_SQLITE = """
avg count group_concat max min sum total string_agg median percentile percentile_cont
percentile_disc stddev

char concat concat_ws format hex ifnull iif instr like likelihood likely lower ltrim
nullif octet_length printf quote replace round rtrim soundex substr substring trim typeof
unicode unlikely unhex upper

date time datetime julianday unixepoch strftime timediff current_date current_time
current_timestamp

acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10
log2 mod pi pow power radians sign sin sinh sqrt tan tanh trunc

json json_array json_array_length json_extract json_insert json_object json_patch json_quote
json_remove json_replace json_set json_type json_valid json_group_array json_group_object
json_each json_tree

random
"""

_DUCKDB = """
array_agg bool_and bool_or corr date_diff date_part date_trunc datediff epoch first last list
median mode month quantile quantile_cont quantile_disc stddev stddev_pop stddev_samp
string_agg var_pop var_samp variance year day hour minute second week dayofweek dayofyear
strftime strptime to_timestamp make_date age generate_series range unnest regexp_matches
regexp_replace regexp_extract split_part concat concat_ws left right lpad rpad strpos
starts_with contains ifnull list_value percentile_cont percentile_disc ln log log10 log2 sqrt
power pow mod trunc approx_count_distinct date_add date_sub
"""


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


ALLOWED_FUNCTIONS: dict[str, frozenset[str]] = {
    "postgres": _words(_COMMON) | _words(_POSTGRES),
    "sqlite": _words(_COMMON) | _words(_SQLITE),
    "duckdb": _words(_COMMON) | _words(_DUCKDB),
}


def allowed_functions(dialect: str) -> frozenset[str]:
    """The function names `dialect` queries may call; a dialect without a list gets the common core."""
    return ALLOWED_FUNCTIONS.get(dialect, _words(_COMMON))
