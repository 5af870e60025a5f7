"""The history database: one SQLite file, opened safely by several processes at once.

Concurrency: WAL journal (readers never wait for a writer) and a busy timeout, and every write
is one `BEGIN IMMEDIATE` transaction, so two validate runs finishing together queue instead of
failing or interleaving. Schema: MIGRATIONS[i] takes the file from user_version i to i + 1,
each applied in its own transaction, so a newer r9700ctl upgrades an older file in place and an
older r9700ctl refuses a newer file instead of misreading it. Any sqlite3.DatabaseError (not a
database, malformed pages) becomes HistoryDamaged: one line with the path and what to do.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from r9700ctl.errors import BadInput, CannotRun

FILE_NAME = "history.db"
BUSY_TIMEOUT_S = 60.0  # a long fleet run's insert takes well under a second; waiting is cheap

MIGRATIONS: tuple[str, ...] = (
    # 1: runs, the nodes of each run, every check result, the figures the 3-gate compares, baselines.
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        started TEXT NOT NULL,            -- UTC, 2026-12-02T13:34:40Z: sorts as text
        toolkit_version TEXT NOT NULL,
        level TEXT NOT NULL,
        runtime TEXT NOT NULL,            -- host, or the container image the agent ran in
        scope TEXT NOT NULL,              -- local (validate --local) or inventory
        status TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT ''   -- where the reports are (file or directory)
    );
    CREATE TABLE run_nodes (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        node TEXT NOT NULL,
        status TEXT NOT NULL,
        started TEXT NOT NULL DEFAULT '',
        gpus TEXT NOT NULL DEFAULT '[]',          -- JSON: index, key, pci_address, serial, model
        environment TEXT NOT NULL DEFAULT '{}',   -- JSON: the agent's captured environment
        PRIMARY KEY (run_id, node)
    );
    CREATE TABLE results (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        node TEXT NOT NULL,
        check_id TEXT NOT NULL,
        subject TEXT NOT NULL,     -- as the run named it: node, gpu0, gpu0->gpu1
        gpu TEXT NOT NULL,         -- the same with GPUs by serial or PCI address; '' for the node
        metric TEXT NOT NULL,
        value REAL,                -- the figure, when it is a number
        value_text TEXT,           -- otherwise its text (Gen5 x16)
        unit TEXT NOT NULL,
        status TEXT NOT NULL
    );
    CREATE INDEX results_trend ON results (node, check_id, gpu);
    CREATE TABLE figures (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        node TEXT NOT NULL,
        check_id TEXT NOT NULL,
        subject TEXT NOT NULL,
        gpu TEXT NOT NULL,
        metric TEXT NOT NULL,
        kind TEXT NOT NULL,        -- busbw, bandwidth, tflops, speedup (agent/baseline.py)
        value REAL NOT NULL,
        unit TEXT NOT NULL,
        size_bytes INTEGER,
        samples TEXT NOT NULL      -- JSON list: the timed windows the 3-gate compares
    );
    CREATE INDEX figures_run_node ON figures (run_id, node);
    CREATE TABLE baselines (
        name TEXT NOT NULL,
        node TEXT NOT NULL,
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        saved TEXT NOT NULL,
        PRIMARY KEY (name, node)
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass
class HistoryDamaged(CannotRun):
    """The database cannot be read or written: exit 3, one line with the path and the way out."""


@dataclass
class HistoryTooNew(CannotRun):
    """The file was written by a newer r9700ctl (a higher user_version than this one knows)."""


@dataclass
class NotHistory(BadInput):
    """The file exists and r9700ctl did not create it (empty, or another program's SQLite
    database): refused before anything is written to it, exit 64."""


# PRAGMA application_id of the files r9700ctl creates ("R970" in ASCII): SQLite keeps it at
# offset 68 of the header for exactly this, telling one application's files from another's
# (https://www.sqlite.org/fileformat2.html#application_id). Files of older r9700ctl versions
# carry 0 and are known by their tables.
APPLICATION_ID = 0x52393730
SQLITE_MAGIC = b"SQLite format 3\0"
TABLES = ("runs", "run_nodes", "results", "figures", "baselines")


def default_path() -> Path:
    """~/.local/state/r9700ctl/history.db (XDG_STATE_HOME moves it; R9700CTL_HISTORY names it)."""
    from r9700ctl import paths

    named = os.environ.get("R9700CTL_HISTORY")
    return Path(named) if named else paths.state_dir() / FILE_NAME


def damaged(path: Path, exc: BaseException) -> HistoryDamaged:
    return HistoryDamaged(
        what=f"the history database is damaged or unreadable ({exc})",
        where=str(path),
        hint=f"move it aside (mv {path} {path}.damaged); the next run starts a new one",
    )


class History:
    """An open history database. Use as a context manager; every method may raise HistoryDamaged."""

    def __init__(self, path: Path, connection: sqlite3.Connection) -> None:
        self.path = path
        self.db = connection

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (BEGIN IMMEDIATE): concurrent writers queue here."""
        with self.guard():
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """sqlite3 errors of this file become HistoryDamaged (one line with the path)."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise HistoryDamaged(
                    what=f"the history database stayed locked for {BUSY_TIMEOUT_S:.0f} s ({exc})",
                    where=str(self.path),
                    hint="another r9700ctl is writing to it; run again when it is done",
                ) from exc
            raise damaged(self.path, exc) from exc
        except sqlite3.DatabaseError as exc:
            raise damaged(self.path, exc) from exc

    def query(self, sql: str, parameters: tuple | dict = ()) -> list[sqlite3.Row]:
        with self.guard():
            return list(self.db.execute(sql, parameters))


def open_history(path: Path | None = None, *, create: bool = True) -> History:
    """Open (and create or migrate) the database; HistoryDamaged when it is not a usable one,
    NotHistory when the file is not one r9700ctl created (it is then left as it was)."""
    path = Path(path) if path is not None else default_path()
    if not path.exists():
        if not create:
            raise CannotRun(
                what="no history yet",
                where=str(path),
                hint="every `r9700ctl validate` run is recorded there; run one first",
            )
        _create(path)
    else:
        identify(path)
    history = _connect(path)
    try:
        with history.guard():
            if history.db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                history.db.execute("PRAGMA journal_mode = WAL")
            _migrate(history)
    except BaseException:
        history.close()
        raise
    return history


def identify(path: Path) -> None:
    """Refuse (NotHistory) a file r9700ctl did not create, reading it only.

    An empty file, or an SQLite database with another application id or without the history's
    tables, is someone else's: opening it as a history would add tables to it. A file that is
    not SQLite at all is left to SQLite, which calls it damaged (HistoryDamaged, as before).
    """
    try:
        with path.open("rb") as handle:
            header = handle.read(100)
    except OSError as exc:
        raise damaged(path, exc) from exc
    if not header:
        raise _not_history(path, "the file is empty")
    if not header.startswith(SQLITE_MAGIC) or len(header) < 100:
        return
    application_id = int.from_bytes(header[68:72], "big")
    if application_id == APPLICATION_ID:
        return
    if application_id != 0:
        raise _not_history(
            path, f"an SQLite database of another program (application id {application_id:#x})"
        )
    try:
        uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
        reader = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            tables = {row[0] for row in reader.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            reader.close()
    except sqlite3.Error as exc:
        raise damaged(path, exc) from exc
    missing = [name for name in TABLES if name not in tables]
    if missing:
        raise _not_history(path, f"an SQLite database without the history's tables ({', '.join(missing)})")


def _not_history(path: Path, why: str) -> NotHistory:
    return NotHistory(
        what=f"not an r9700ctl history: {path} ({why})",
        hint="r9700ctl writes only to a history it created: point R9700CTL_HISTORY at another file, "
        "or move this one aside",
    )


def _create(path: Path) -> None:
    """A new history, complete before it appears: built under a temporary name, then linked
    into place. A file at `path` is therefore always a whole r9700ctl history; when another
    process links its own first, that one is kept."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
        os.close(descriptor)
    except OSError as exc:
        raise damaged(path, exc) from exc
    fresh = Path(name)
    try:
        history = _connect(fresh)
        try:
            with history.guard():
                history.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                history.db.execute("PRAGMA journal_mode = WAL")
                _migrate(history)
        finally:
            history.close()  # the last connection: SQLite checkpoints and removes the -wal file
        try:
            os.link(fresh, path)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(fresh, path)
    except OSError as exc:
        raise damaged(path, exc) from exc
    finally:
        for leftover in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
            with contextlib.suppress(OSError):
                leftover.unlink()


def _connect(path: Path) -> History:
    try:
        connection = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise damaged(path, exc) from exc
    connection.row_factory = sqlite3.Row
    history = History(path, connection)
    try:
        with history.guard():
            connection.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        history.close()
        raise
    return history


def _migrate(history: History) -> None:
    if history.db.execute("PRAGMA application_id").fetchone()[0] == 0:
        # A history of an r9700ctl before application ids (identify() knew it by its tables).
        with history.write() as db:
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    version = history.db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise HistoryTooNew(
            what=f"schema version {version} is from a newer r9700ctl (this one knows {SCHEMA_VERSION})",
            where=str(history.path),
            hint="upgrade r9700ctl, or point R9700CTL_HISTORY at another file",
        )
    while version < SCHEMA_VERSION:
        with history.write() as db:
            # Read again inside the lock: another process may have migrated meanwhile.
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version >= SCHEMA_VERSION:
                break
            for statement in _statements(MIGRATIONS[version]):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {version + 1}")
        version += 1


def _statements(script: str) -> list[str]:
    """A migration script split into statements (none of ours has a ';' inside a string)."""
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
