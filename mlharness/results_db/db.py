"""Opening the evaluation database: the embedded SQLite file of a results root, or any SQLAlchemy URL (a
PostgreSQL server for a team), brought to the newest schema by Alembic on open.

Alembic is configured in code (the migrations folder ships inside the package), so nothing but the URL is needed
at run time. Opening runs ``upgrade head`` every time: on a current database that is one query of the version
table; on an older one it applies the missing revisions, which ``mlharness results upgrade`` also does on demand.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlharness.cluster.connect import connect_timeout, expired
from mlharness.errors import MLHarnessError

DB_FILE = "mlharness_results.sqlite"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


class DatabaseError(MLHarnessError):
    """The database cannot be opened, reached or migrated: names the URL (password hidden) and why."""


def sqlite_url(root: Path) -> str:
    return f"sqlite:///{Path(root).resolve() / DB_FILE}"


def shown_url(url: str) -> str:
    """The URL with any password hidden, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is shown as given: it holds no parsed password to hide
        return url


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA foreign_keys=ON")  # a run's metrics go with it (ON DELETE CASCADE)
    cur.execute("PRAGMA busy_timeout=30000")  # two indexers of one root wait for each other, bounded
    cur.close()


def _timeouts(url: str, seconds: float) -> dict[str, Any]:
    """A PostgreSQL server that accepts the connection and never answers would hold the command for ever: the
    connect and every statement are bounded by the connect timeout (``MLHARNESS_CONNECT_TIMEOUT``)."""
    if not url.startswith("postgresql"):
        return {}
    return {"connect_timeout": max(1, math.ceil(seconds)),
            "options": f"-c statement_timeout={math.ceil(seconds * 1000)}"}


def engine_for(url: str) -> Any:
    """A SQLAlchemy engine for ``url``, refused with the reason (an unknown scheme, a missing driver) before any
    connection is attempted."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    seconds = connect_timeout()
    try:
        engine = create_engine(url, future=True, connect_args=_timeouts(url, seconds))
    except NoSuchModuleError as e:
        raise DatabaseError(f"--db {shown_url(url)}: no SQLAlchemy dialect for it ({e}); use "
                            "sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DB") from e
    except ArgumentError as e:
        raise DatabaseError(f"--db {shown_url(url)} is not a database URL: {e}; use sqlite:///PATH or "
                            "postgresql+psycopg://USER@HOST:PORT/DB") from e
    except ModuleNotFoundError as e:
        hint = " (pip install 'mlharness[postgres]')" if url.startswith("postgresql") else ""
        raise DatabaseError(f"--db {shown_url(url)}: its driver {e.name} is not installed{hint}") from e
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _on_sqlite_connect)
    return engine


def alembic_config(connection: Any) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


LOCK_WAIT_S = 120.0
PG_LOCK_KEY = 0x6D6C686172  # pg_advisory_xact_lock's key of mlharness's schema and indexing ("mlhar")


def sqlite_file(engine: Any) -> Path | None:
    """The file of an SQLite database (None: in memory, or another dialect)."""
    if engine.dialect.name != "sqlite" or not engine.url.database or engine.url.database == ":memory:":
        return None
    return Path(engine.url.database)


def check_file(engine: Any) -> None:
    """An SQLite database path that is a device, a FIFO or a folder, or a file that cannot be written (read-only,
    immutable): one line naming the file instead of SQLite's "disk I/O error" or a traceback."""
    from mlharness import fileguard

    path = sqlite_file(engine)
    if path is None or not os.path.lexists(path):
        return
    fileguard.check_regular_file(path, "the evaluation database file", error=DatabaseError)
    if not os.access(path, os.W_OK):  # the kernel says EPERM for an immutable file, to root too
        why = "it is read-only or immutable (lsattr shows 'i'; chattr -i clears it)"
        raise DatabaseError(f"the evaluation database file {path} cannot be written: {why}; give a writable "
                            "file (or another results root, or --db URL)") from None


@contextmanager
def exclusive(engine: Any, conn: Any = None) -> Iterator[None]:
    """Hold mlharness's lock of the database while the schema is made or rows are indexed, so that two first
    uses at once (two ``results index`` of a new root) wait for each other instead of racing: an SQLite file's
    folder is locked with ``flock`` (SQLite's own fcntl locks on the file are left alone), a PostgreSQL database
    with a transaction-scoped advisory lock on ``conn``."""
    import fcntl

    if engine.dialect.name == "postgresql" and conn is not None:
        from sqlalchemy import text

        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_LOCK_KEY})
        yield
        return
    path = sqlite_file(engine)
    if path is None:
        yield
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DatabaseError(f"the evaluation database {path} stayed locked by another mlharness "
                                        f"process for {LOCK_WAIT_S:g} s (an index of its root in progress?)"
                                        ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def upgrade(engine: Any) -> str | None:
    """Apply every migration the database lacks; returns the revision it is at."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.exc import SQLAlchemyError

    check_file(engine)
    try:
        with engine.begin() as conn, exclusive(engine, conn):
            command.upgrade(alembic_config(conn), "head")
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except SQLAlchemyError as e:
        reason = str(e.orig if hasattr(e, "orig") else e)
        if "timeout expired" in reason or "statement timeout" in reason:
            raise expired("the evaluation database", engine.url.render_as_string(hide_password=True),
                          connect_timeout(), "check the URL, and that the server is up") from None
        raise failed(engine, e, "cannot be opened or migrated") from None


def open_db(url: str) -> Any:
    """An engine on ``url`` at the newest schema."""
    engine = engine_for(url)
    upgrade(engine)
    return engine


def failed(engine: Any, e: Exception, doing: str) -> DatabaseError:
    """A database error as one line naming the database (its file, or its URL with the password hidden)."""
    reason = str(getattr(e, "orig", None) or e).strip().splitlines()
    where = sqlite_file(engine) or engine.url.render_as_string(hide_password=True)
    first = reason[0] if reason else type(e).__name__
    return DatabaseError(f"the evaluation database {where} {doing}: {first[:400]}")
