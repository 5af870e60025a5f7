"""Where the agent runs (`validate --runtime`): r9700ctl.runtime's choice, the container command,
`validate --local` through an r9700-run on the PATH, and the fleet's runtime per node.

The container runs through a stand-in r9700-run (a shell script that answers --check with an image
name and runs the command on this machine after its -e/-v options): what is checked is that the
agent is started through the wrapper with its staged code and paths, and that the report says so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from child_process import r9700ctl

from r9700ctl import runtime
from r9700ctl.errors import CannotRun
from r9700ctl.validate import read_node

REPO = Path(__file__).resolve().parents[2]
STAND_IN = """#!/bin/sh
# stand-in r9700-run for tests: no docker here
if [ "$1" = --check ]; then
    if [ -n "$NO_IMAGE" ]; then
        echo "r9700-run: image stand-in/pytorch:test is not usable here: No such image" >&2; exit 3
    fi
    echo stand-in/pytorch:test; exit 0
fi
echo "$@" > "$WRAPPER_LOG"
while [ $# -gt 0 ]; do case "$1" in -e) export "$2"; shift 2;; -v) shift 2;; *) break;; esac; done
exec "$@"
"""


@pytest.fixture
def wrapper(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    path = bin_dir / "r9700-run"
    path.write_text(STAND_IN)
    path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("WRAPPER_LOG", str(tmp_path / "wrapper.log"))
    return path


def test_auto_takes_the_provisioned_image_when_it_is_there(wrapper):
    chosen = runtime.choose("auto", "quick")
    assert chosen == runtime.Runtime("container", image="stand-in/pytorch:test", wrapper=str(wrapper))


def test_auto_falls_back_to_the_hosts_torch_then_refuses_with_the_fix(wrapper, monkeypatch):
    monkeypatch.setenv("NO_IMAGE", "1")
    monkeypatch.setattr(runtime, "host_has_torch", lambda: True)
    assert runtime.choose("auto", "quick").name == "host"
    monkeypatch.setattr(runtime, "host_has_torch", lambda: False)
    assert runtime.choose("auto", "config").name == "host"  # the config level needs no torch
    with pytest.raises(CannotRun) as caught:
        runtime.choose("auto", "quick")
    assert (
        caught.value.what == "could not run: no torch on the node; provision the containers or install torch"
    )
    assert "No such image" in caught.value.hint
    with pytest.raises(CannotRun, match="could not run in the container"):
        runtime.choose("container", "config")
    assert runtime.choose("host", "quick").name == "host"


def test_the_container_command_mounts_the_staged_code_the_journal_and_the_paths(tmp_path):
    chosen = runtime.Runtime("container", image="img", wrapper="/usr/local/bin/r9700-run")
    staged = tmp_path / "staged"
    argv = runtime.container_command(chosen, staged, [tmp_path / "out", staged], ["--level", "quick"])
    assert argv == [
        "/usr/local/bin/r9700-run",
        "-e", f"PYTHONPATH={staged}",
        "-e", "PYTHONDONTWRITEBYTECODE=1",
        "-v", "/var/lib/r9700ctl:/var/lib/r9700ctl",
        "-v", f"{tmp_path / 'out'}:{tmp_path / 'out'}",
        "python3", "-m", "r9700ctl.agent", "--level", "quick",
    ]  # fmt: skip


def test_validate_local_runs_the_agent_through_r9700_run_and_the_report_says_so(wrapper, tmp_path):
    out = tmp_path / "reports" / "out.json"
    out.parent.mkdir()
    done = r9700ctl("validate", "--local", "--level", "config", "--runtime", "container", "--json", str(out),
                "--journal-dir", str(tmp_path / "j"), "--no-history")  # fmt: skip
    report = json.loads(out.read_text())
    assert done.returncode == report["exit_code"], done.stderr
    assert report["runtime"] == "container" and report["image"] == "stand-in/pytorch:test"
    called = (tmp_path / "wrapper.log").read_text().split()
    assert called[called.index("python3") :][:3] == ["python3", "-m", "r9700ctl.agent"]
    assert f"{out.parent}:{out.parent}" in called and f"{tmp_path / 'j'}:{tmp_path / 'j'}" in called
    assert "the agent runs in stand-in/pytorch:test (r9700-run)" in done.stderr


def test_validate_local_container_without_an_image_is_one_line_and_exit_3(wrapper, tmp_path):
    done = r9700ctl("validate", "--local", "--runtime", "container", "--no-history", env={"NO_IMAGE": "1"})
    assert done.returncode == 3
    assert done.stderr.startswith(
        "error: could not run in the container: r9700-run: image stand-in/pytorch:test"
    )
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_node_without_torch_is_no_report_with_the_reason_and_the_runtime(tmp_path):
    (tmp_path / "n1.agent.json").write_text(
        json.dumps({"rc": 3, "runtime": "none", "image": "", "msg": runtime.NO_TORCH, "stderr_tail": []})
    )
    node = read_node("n1", tmp_path, type("Outcome", (), {"status": "OK", "first_error": ""})())
    assert (node.status, node.error, node.runtime) == ("NO_REPORT", runtime.NO_TORCH, "none")
    (tmp_path / "n2.agent.json").write_text(json.dumps({"rc": 0, "runtime": "container", "image": "img:1"}))
    (tmp_path / "n2.json").write_text(
        json.dumps({"schema": "r9700ctl.validate/1", "status": "PASS", "results": []})
    )
    node = read_node("n2", tmp_path, type("Outcome", (), {"status": "OK", "first_error": ""})())
    assert node.to_dict()["runtime"] == "container" and node.to_dict()["image"] == "img:1"
    assert node.runtime_text == "container img:1"


def test_the_fleet_table_names_each_nodes_runtime_and_image_in_full():
    from rich.console import Console

    from r9700ctl.fleet import FleetJudgement
    from r9700ctl.report.validate import image_lines, nodes_table
    from r9700ctl.validate import FleetReport, NodeOutcome

    image = "rocm/pytorch:rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.9.1"
    nodes = [
        NodeOutcome("node1", "PASS", report={"results": []}, runtime="container", image=image),
        NodeOutcome("node2", "NO_REPORT", error=runtime.NO_TORCH, runtime="none"),
    ]
    report = FleetReport(level="quick", nodes=nodes, fleet=FleetJudgement(results=[]), reports_dir=Path("/r"))
    console = Console(width=200, record=True, color_system=None)
    console.print(nodes_table(report))
    lines = console.export_text().splitlines()
    # The column says where the agent ran; the line below the table names the image in full.
    assert next(line for line in lines if line.split()[:1] == ["node1"]).split()[2] == "container"
    assert image_lines(report) == [f"node1: the agent ran in {image}"]
    node2 = next(line for line in lines if line.split()[:1] == ["node2"])
    assert node2.split()[2] == "none" and "could not run: no torch on the node" in node2
