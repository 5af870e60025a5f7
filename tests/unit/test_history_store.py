"""The history database: schema migrations, concurrent writers, a damaged file.

Concurrency is tested with real processes writing the same file at once (as two `validate`
runs finishing together would), not threads: SQLite's locking is between processes.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap

import pytest
from history_reports import REPO, recorded

from r9700ctl.history.record import record
from r9700ctl.history.store import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    HistoryDamaged,
    HistoryTooNew,
    NotHistory,
    open_history,
)


def test_a_new_database_is_created_at_the_current_schema_version_in_wal_mode(tmp_path):
    path = tmp_path / "state" / "history.db"
    with open_history(path) as history:
        assert history.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
        assert history.query("PRAGMA journal_mode")[0][0] == "wal"
    assert (path.parent.stat().st_mode & 0o777) == 0o700


def test_an_older_database_is_migrated_forward_and_keeps_its_rows(tmp_path, monkeypatch):
    """A file of schema 1 opened by an r9700ctl that knows schema 2 gains it and keeps its runs."""
    from r9700ctl.history import store

    path = tmp_path / "history.db"
    with open_history(path) as history:
        run_id = record(history, recorded("quick.json"), scope="local")
    monkeypatch.setattr(
        store, "MIGRATIONS", (*store.MIGRATIONS, "CREATE TABLE notes (run_id TEXT, text TEXT)")
    )
    monkeypatch.setattr(store, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with store.open_history(path) as history:
        assert history.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION + 1
        assert [r["id"] for r in history.query("SELECT id FROM runs")] == [run_id]
        assert history.query("SELECT count(*) FROM notes")[0][0] == 0


def test_a_database_from_a_newer_r9700ctl_is_refused_not_misread(tmp_path):
    path = tmp_path / "history.db"
    connection = sqlite3.connect(path)
    connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")  # as every r9700ctl creates it
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    connection.close()
    with pytest.raises(HistoryTooNew) as caught:
        open_history(path)
    assert caught.value.exit_code == 3
    assert caught.value.one_line().startswith(f"{path}: schema version {SCHEMA_VERSION + 5} is from a newer")


WRITER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from r9700ctl.history.record import record
    from r9700ctl.history.store import open_history
    report = json.load(open(sys.argv[3]))
    for i in range(int(sys.argv[4])):
        report["node"] = f"{sys.argv[5]}-{i}"
        with open_history(__import__("pathlib").Path(sys.argv[2])) as history:
            record(history, report, scope="local")
    """
)


def test_concurrent_writers_lose_no_run_and_leave_a_sound_database(tmp_path):
    """Six processes, started together on a file that does not exist yet (so they also race to
    create and migrate it), each record five standard-level reports."""
    path = tmp_path / "history.db"
    report = REPO / "bench/results/2026-12-02-h200/standard.json"
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(REPO), str(path), str(report), "5", f"w{n}"])
        for n in range(6)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0] * 6
    with open_history(path) as history:
        assert history.query("PRAGMA integrity_check")[0][0] == "ok"
        assert history.query("SELECT count(*) FROM runs")[0][0] == 30
        assert history.query("SELECT count(DISTINCT node) FROM run_nodes")[0][0] == 30
        per_run = {r[0] for r in history.query("SELECT count(*) FROM results GROUP BY run_id")}
        assert per_run == {len(recorded()["results"])}


def _corrupt_header(path):
    path.write_bytes(b"this is not an SQLite file, a disk or a person overwrote it\n" * 100)


def _corrupt_pages(path):
    """Keep the header, overwrite the pages behind it: 'database disk image is malformed'."""
    data = bytearray(path.read_bytes())
    for offset in range(4096, len(data), 512):
        data[offset : offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("corrupt", [_corrupt_header, _corrupt_pages], ids=["header", "pages"])
def test_a_damaged_database_is_one_line_with_its_path_and_the_way_out(tmp_path, corrupt):
    path = tmp_path / "history.db"
    with open_history(path) as history:
        for _ in range(3):
            record(history, recorded("standard.json"), scope="local")
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"history.db{suffix}").unlink(missing_ok=True)
    corrupt(path)
    with pytest.raises(HistoryDamaged) as caught, open_history(path) as history:
        record(history, recorded("standard.json"), scope="local")
        history.query("SELECT * FROM results")
    line = caught.value.one_line()
    assert "\n" not in line
    assert line.startswith(f"{path}: the history database is damaged or unreadable (")
    assert line.endswith(f"(move it aside (mv {path} {path}.damaged); the next run starts a new one)")
    assert caught.value.exit_code == 3


def _empty(path):
    path.write_bytes(b"")


def _another_programs_database(path):
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE songs (title TEXT)")
    connection.execute("INSERT INTO songs VALUES ('a')")
    connection.commit()
    connection.close()


def _another_programs_marked_database(path):
    """With its own application id and even a table named like one of ours."""
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA application_id = 1179603539")
    connection.execute("CREATE TABLE runs (id TEXT)")
    connection.commit()
    connection.close()


@pytest.mark.parametrize(
    "make",
    [_empty, _another_programs_database, _another_programs_marked_database],
    ids=["empty file", "another program's SQLite database", "another program's marked database"],
)
def test_a_file_r9700ctl_did_not_create_is_refused_and_left_byte_for_byte(tmp_path, make):
    """Bug pinned: on an empty file or another program's database, open_history added the
    history's tables to it (and switched it to WAL). It must refuse, writing nothing."""
    path = tmp_path / "someone-elses.db"
    make(path)
    before = path.read_bytes()
    with pytest.raises(NotHistory) as caught:
        open_history(path)
    assert caught.value.exit_code == 64
    assert caught.value.one_line().startswith(f"not an r9700ctl history: {path} (")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["someone-elses.db"]  # no -wal, -shm or temp file


def test_a_history_of_an_older_r9700ctl_without_an_application_id_is_still_opened_and_marked(tmp_path):
    """Files written before the application id are known by their tables, then marked."""
    path = tmp_path / "history.db"
    with open_history(path) as history:
        run_id = record(history, recorded("quick.json"), scope="local")
        history.db.execute("PRAGMA application_id = 0")
    with open_history(path) as history:
        assert [r["id"] for r in history.query("SELECT id FROM runs")] == [run_id]
        assert history.query("PRAGMA application_id")[0][0] == APPLICATION_ID


def test_a_new_history_appears_whole_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "state" / "history.db"
    with open_history(path) as history:
        assert history.query("PRAGMA application_id")[0][0] == APPLICATION_ID
        assert history.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
    assert not [p.name for p in path.parent.iterdir() if p.name.startswith(".")]
