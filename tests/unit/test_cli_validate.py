"""`r9700ctl validate`: the command line around the on-node agent.

`--local` runs the real agent in a child process on this machine, so these tests hold only
what is true on any machine (with or without GPUs): the exit code is the report's, the JSON is
valid and complete, errors are one line with the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from child_process import r9700ctl
from click.testing import CliRunner

from r9700ctl.cli import cli

REPO = Path(__file__).resolve().parents[2]


def test_validate_local_config_writes_a_valid_report_and_exits_with_its_code(tmp_path):
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        cli,
        [
            "validate",
            "--local",
            "--level",
            "config",
            "--json",
            str(out),
            "--journal-dir",
            str(tmp_path / "j"),
        ],
        catch_exceptions=False,
    )
    report = json.loads(out.read_text())
    assert result.exit_code == report["exit_code"], result.output
    assert report["schema"] == "r9700ctl.validate/1"
    assert report["level"] == "config"
    assert report["status"] in ("PASS", "WARN", "FAIL", "ERROR", "INCONCLUSIVE")
    assert any(r["id"] == "inventory.count" for r in report["results"])
    lines = result.stdout.splitlines()
    assert lines[0].startswith("r9700ctl validate: node ")
    assert lines[-1].startswith(f"node {report['node']}: {report['status']} (exit {report['exit_code']}")
    assert result.stderr.startswith("history: run ") and " recorded in " in result.stderr
    assert report["duration_s"] < 30


def test_json_dash_puts_the_report_alone_on_stdout_and_the_table_on_stderr(tmp_path, monkeypatch):
    monkeypatch.setenv("R9700CTL_HISTORY", str(tmp_path / "history.db"))
    args = ["validate", "--local", "--level", "config", "--json", "-", "--journal-dir", str(tmp_path / "j")]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    report = json.loads(result.stdout)
    assert report["schema"] == "r9700ctl.validate/1" and result.exit_code == report["exit_code"]
    assert result.stderr.startswith("r9700ctl validate: node ")


def test_validate_without_inventory_or_local_is_bad_input():
    result = r9700ctl("validate")
    assert result.returncode == 64
    assert result.stdout == ""
    assert result.stderr == (
        "error: nothing to validate (give an INVENTORY for the nodes, or --local for this machine; "
        "see r9700ctl validate --help)\n"
    )


def test_validate_with_both_an_inventory_and_local_is_bad_input():
    result = r9700ctl("validate", "nodes.ini", "--local")
    assert result.returncode == 64
    assert result.stderr.startswith("error: give an inventory or --local, not both")


def test_validating_a_missing_inventory_is_one_line_and_exit_64():
    """The fleet path checks its inventory before contacting anything, like provision."""
    result = r9700ctl("validate", "nodes.ini")
    assert result.returncode == 64
    assert result.stdout == ""
    assert result.stderr == (
        "error: nodes.ini: inventory file not found (give the path of an INI or YAML "
        "inventory; inventory/example.ini shows the format)\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--level", "fast"], "Invalid value for '--level'", id="level"),
        pytest.param(["--expect-scaling", "4:x"], "expected N:SPEEDUP pairs like 4:3.4,8:6.1", id="scaling"),
        pytest.param(["--gpus", "0,a"], "expected distinct GPU indices like 0,1,3", id="gpus"),
        pytest.param(["--duration", "60"], "--duration applies to --level burnin only", id="duration"),
        pytest.param(["--only", "nosuch"], "--only: unknown check nosuch", id="only"),
    ],
)
def test_bad_options_are_one_line_with_exit_64(tmp_path, args, message):
    result = r9700ctl("validate", "--local", "--journal-dir", str(tmp_path / "j"), *args)
    assert result.returncode == 64, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert message in result.stderr


def test_help_teaches_levels_examples_and_exit_codes():
    result = CliRunner().invoke(cli, ["validate", "--help"], catch_exceptions=False)
    assert result.exit_code == 0
    for text in (
        "--local",
        "Levels:",
        "quick",
        "r9700ctl validate --local --level quick",
        "Exit codes: 0 all good",
        "4 inconclusive",
    ):
        assert text in result.output


def test_a_thresholds_file_with_a_typo_is_refused_before_anything_runs(tmp_path):
    """thresholds.yaml is the one source; a key it does not have is bad input, not ignored."""
    site = tmp_path / "site.yaml"
    site.write_text("models:\n  default:\n    compute:\n      peak_tflops_bf17: 100\n")
    result = r9700ctl("validate", "--local", "--journal-dir", str(tmp_path / "j"), "--thresholds", str(site))
    assert result.returncode == 64, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "compute.peak_tflops_bf17" in result.stderr and str(site) in result.stderr


def test_a_thresholds_file_reaches_the_agent_and_is_named_as_the_source(tmp_path, monkeypatch):
    """--local converts the YAML override to the JSON the agent reads; relative paths still work
    although the agent runs in its staged directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "site.yaml").write_text(
        "models:\n  default:\n    inventory:\n      vram_min_fraction_of_healthy: 0.5\n"
    )
    result = CliRunner().invoke(
        cli,
        ["validate", "--local", "--journal-dir", "j", "--json", "out.json", "--thresholds", "site.yaml"],
        catch_exceptions=False,
    )
    report = json.loads((tmp_path / "out.json").read_text())
    assert result.exit_code == report["exit_code"], result.output
    assert "overrides from site.yaml" in report["model_reason"]


def test_a_report_format_cannot_go_to_stdout(tmp_path):
    result = r9700ctl("validate", "--local", "--html", "-")
    assert result.returncode == 64
    assert result.stderr == "error: -: --html writes a file, not standard output (give --html a file name)\n"


def test_a_fleet_with_no_reachable_node_says_why_and_points_at_no_empty_directory(tmp_path):
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[r9700_nodes]\nghost ansible_host=127.0.0.1 ansible_port=1 "
        "ansible_ssh_common_args='-o ConnectTimeout=5 -o BatchMode=yes'\n"
    )
    result = r9700ctl("validate", str(inventory), "--no-history")
    assert result.returncode == 3, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["ghost"])
    # The connection failure, not the task that met it ("Validate | Ensure a private scratch ...").
    assert "UNREACHABLE" in row and "ssh: connect to host" in row and "Validate |" not in row
    assert result.stdout.splitlines()[-1] == (
        "fleet: ERROR (exit 3); no node wrote a report "
        "(`r9700ctl doctor INVENTORY` checks reachability and sudo)"
    )


def test_the_fleet_table_keeps_node_status_and_finding_readable_in_80_columns_with_an_image():
    # The image's full name once crowded node, status and finding out of the demo's table.
    from rich.console import Console

    from r9700ctl.fleet import FleetJudgement
    from r9700ctl.report.validate import image_lines, nodes_table
    from r9700ctl.validate import FleetReport, NodeOutcome

    image = "rocm/pytorch:rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.9.1"
    finding = {"id": "pcie.link", "subject": "gpu0", "status": "WARN", "hint": "reseat the card"}
    nodes = [
        NodeOutcome("node1", "WARN", {"results": [finding]}, runtime="container", image=image),
        NodeOutcome(
            "node2", "PASS", {"results": [{"id": "x", "status": "PASS"}]}, runtime="container", image=image
        ),
        NodeOutcome(
            "ghost", "UNREACHABLE", None, error="ssh: connect to host 10.0.0.9 port 22: Connection refused"
        ),
    ]
    report = FleetReport("config", nodes, FleetJudgement(results=[], compared=0, note=""), Path("/r"))
    console = Console(width=80, record=True)
    console.print(nodes_table(report))
    rows = {line.split()[0]: line.split() for line in console.export_text().splitlines() if line.strip()}
    assert rows["node1"][1:3] == ["WARN", "container"] and "pcie.link" in rows["node1"]
    assert rows["node2"][1:3] == ["PASS", "container"]
    assert rows["ghost"][1:3] == ["UNREACHABLE", "-"] and "ssh:" in rows["ghost"]
    assert image_lines(report) == [f"node1, node2: the agent ran in {image}"]


def fake_agent(report: dict, code: int):
    """run_agent stand-in: writes `report` where validate asked for the agent's JSON."""

    def run_agent(args, on_stdout, on_stderr, **kwargs):
        Path(args[list(args).index("--json") + 1]).write_text(json.dumps(report), encoding="utf-8")
        on_stdout(f"node vm: {report['status']}")
        return code

    return run_agent


NO_GPU_REPORT = {  # the agent's report on a machine without a GPU at --level quick (this build host)
    "schema": "r9700ctl.validate/1",
    "node": "vm",
    "level": "quick",
    "started": "2026-12-03T10:09:42+0000",
    "duration_s": 6.2,
    "gpus": [],
    "results": [
        {"id": "inventory.count", "subject": "node", "status": "FAIL", "value": 0},
        {"id": "node.gpu", "subject": "node", "status": "ERROR", "hint": "no GPU found"},
    ],
    "status": "ERROR",
    "exit_code": 3,
}


def test_a_local_run_that_found_no_gpu_is_not_recorded_in_the_history(tmp_path, monkeypatch):
    """It measured nothing: a history row would read as a broken node and be the next 'last'."""
    from r9700ctl import launch
    from r9700ctl.history.store import open_history

    monkeypatch.setattr(launch, "run_agent", fake_agent(NO_GPU_REPORT, 3))
    monkeypatch.setenv("R9700CTL_HISTORY", str(tmp_path / "history.db"))
    args = ["validate", "--local", "--level", "quick", "--journal-dir", str(tmp_path / "j")]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 3
    assert "history: not recorded: the agent found no GPU and measured nothing\n" in result.stderr
    if (tmp_path / "history.db").exists():
        with open_history(tmp_path / "history.db") as history:
            assert history.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0

    gpu = {"index": 0, "pci_address": "0000:03:00.0", "name": "R9700"}
    ran = {**NO_GPU_REPORT, "gpus": [gpu], "status": "FAIL", "exit_code": 2}
    monkeypatch.setattr(launch, "run_agent", fake_agent(ran, 2))
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 2 and "history: run " in result.stderr, result.stderr
