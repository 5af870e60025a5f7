"""`r9700ctl history` and validate's history options, as a user runs them.

Seeded with the agent's recorded H200 reports (and a copy with a planted slow GPU); validate
--local runs the real agent at level config on this machine (no GPU needed).
"""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner
from history_reports import four_gpus, recorded, slow_gpu
from test_cli_validate import r9700ctl

from r9700ctl.agent.result import exit_code_for, worst
from r9700ctl.cli import cli
from r9700ctl.history.record import record
from r9700ctl.history.store import open_history


@pytest.fixture
def seeded(tmp_path, monkeypatch):
    """Three standard runs of node1 (4 GPUs): healthy, healthy, then GPU 1's host->GPU 30% slower."""
    path = tmp_path / "history.db"
    monkeypatch.setenv("R9700CTL_HISTORY", str(path))
    healthy = four_gpus(recorded())
    with open_history(path) as history:
        for day, report in (
            ("01", healthy),
            ("02", healthy),
            ("03", slow_gpu(healthy, "gpu1", 0.7, "hostbw.h2d")),
        ):
            report = copy.deepcopy(report)
            report["started"] = f"2026-12-{day}T10:00:00+0000"
            record(history, report, scope="local")
    return path


def test_history_lists_runs_newest_first(seeded):
    result = CliRunner().invoke(cli, ["history"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith(" 202612")]
    assert [row.split()[0][:8] for row in rows] == ["20261203", "20261202", "20261201"]
    assert all(row.split()[1:5] == ["standard", "PASS", "host", "0.1.0"] for row in rows), result.output
    assert result.output.rstrip().endswith(f"3 run(s) shown from {seeded}")


def test_history_table_fits_80_columns_with_whole_headers(seeded):
    # CliRunner is not a terminal: rich lays the table out for 80 columns.
    result = CliRunner().invoke(cli, ["history"], catch_exceptions=False)
    lines = result.output.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("run "))
    assert header.split() == ["run", "level", "status", "runtime", "version", "nodes", "baselines"]
    table = lines[: lines.index("a run id starts with its UTC start time")]
    assert max(len(line) for line in table) <= 80


def test_history_trend_shows_each_gpu_and_the_drop_of_the_slow_one(seeded, tmp_path):
    out = tmp_path / "trend.json"
    result = CliRunner().invoke(
        cli,
        ["history", "--node", "node1", "--check", "hostbw.h2d", "--json", str(out)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    sparks = [line for line in result.output.splitlines() if line.startswith("node1 sn:")]
    assert len(sparks) == 4
    slow = next(line for line in sparks if line.startswith("node1 sn:1650522000001"))
    assert slow.endswith("54.46 -> 38.12 GB/s (-30.0% over 3 runs)"), slow
    assert " ██▁ " in slow
    steady = next(line for line in sparks if line.startswith("node1 sn:1650522000000"))
    assert steady.endswith("(+0.0% over 3 runs)")
    document = json.loads(out.read_text())
    assert document["schema"] == "r9700ctl.history/1"
    assert [len(s["points"]) for s in document["series"]] == [3, 3, 3, 3]


def test_json_dash_writes_the_document_alone_to_stdout_and_the_table_to_stderr(seeded):
    result = CliRunner().invoke(cli, ["history", "--json", "-"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["schema"] == "r9700ctl.history/1"
    assert "3 run(s) shown from" in result.stderr


def test_history_of_an_unknown_node_is_one_line_and_exit_64(seeded):
    result = r9700ctl("history", "--node", "node9", "--check", "hostbw")
    assert result.returncode == 64
    assert result.stdout == ""
    assert (
        result.stderr == f"error: {seeded}: --node node9: no run of that node in the history (nodes: node1)\n"
    )


def test_history_without_a_database_says_so_and_exits_3(tmp_path, monkeypatch):
    monkeypatch.setenv("R9700CTL_HISTORY", str(tmp_path / "none.db"))
    result = r9700ctl("history")
    assert result.returncode == 3
    assert result.stderr == (
        f"error: {tmp_path / 'none.db'}: no history yet (every `r9700ctl validate` run is recorded there; "
        "run one first)\n"
    )


def test_history_of_a_damaged_database_is_one_line_with_its_path(tmp_path, monkeypatch):
    path = tmp_path / "history.db"
    path.write_bytes(b"not a database" * 500)
    monkeypatch.setenv("R9700CTL_HISTORY", str(path))
    result = r9700ctl("history")
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {path}: the history database is damaged or unreadable (")
    assert "Traceback" not in result.stderr


def test_validate_local_runs_records_and_exits_with_its_code_despite_a_damaged_history(tmp_path, monkeypatch):
    path = tmp_path / "history.db"
    path.write_bytes(b"not a database" * 500)
    monkeypatch.setenv("R9700CTL_HISTORY", str(path))
    out = tmp_path / "report.json"
    result = r9700ctl("validate", "--local", "--journal-dir", str(tmp_path / "j"), "--json", str(out))
    report = json.loads(out.read_text())
    assert result.returncode == report["exit_code"]
    history_lines = [line for line in result.stderr.splitlines() if line.startswith("history:")]
    assert history_lines == [
        f"history: not used: {path}: the history database is damaged or unreadable (file is not a database) "
        f"(move it aside (mv {path} {path}.damaged); the next run starts a new one)"
    ]
    assert path.read_bytes() == b"not a database" * 500  # never deleted or rewritten behind the user's back


def test_validate_local_compare_last_with_nothing_comparable_is_inconclusive_never_pass(tmp_path):
    """Level config measures no GB/s or TFLOPS: the comparison is INCONCLUSIVE, and the node's
    verdict and exit code take it in (exit 3 unless the node is already worse, e.g. no GPU here)."""
    journal = str(tmp_path / "j")
    first = r9700ctl("validate", "--local", "--journal-dir", journal)
    assert "history: run " in first.stderr
    out = tmp_path / "second.json"
    second = r9700ctl(
        "validate", "--local", "--journal-dir", journal, "--compare", "last", "--json", str(out)
    )
    report = json.loads(out.read_text())
    node = report["node"]
    statuses = [r["status"] for r in report["results"]]
    assert report["results"][-1]["id"] == "baseline.coverage"
    assert report["exit_code"] == exit_code_for(statuses) == second.returncode >= 2, second.stdout
    lines = second.stdout.splitlines()
    assert lines[-2] == (
        f"{node} baseline.coverage: INCONCLUSIVE, 0 figure(s) compared; "
        f"no earlier run of {node} with figures in the history: nothing was compared"
    )
    assert (
        lines[-1]
        == f"node {node} with the history comparison: {worst(statuses)} (exit {report['exit_code']})"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compare", "golden"], "--compare golden: no baseline of that name in the history"),
        (["--save-baseline", "a b"], "--save-baseline 'a b': a baseline name uses letters, digits"),
        (["--no-history", "--compare", "last"], "--compare needs the history, and --no-history turns it off"),
        (
            ["--baseline", "x.json", "--compare", "last"],
            "--baseline FILE and --compare NAME both name a baseline",
        ),
    ],
    ids=["unknown-name", "bad-name", "no-history", "two-baselines"],
)
def test_bad_history_options_are_one_line_and_exit_64_before_anything_runs(tmp_path, args, message):
    result = r9700ctl("validate", "--local", "--journal-dir", str(tmp_path / "j"), *args)
    assert result.returncode == 64, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert not (tmp_path / "j").exists()
