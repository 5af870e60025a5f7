"""`python -m r9700ctl.agent` end to end, as a real subprocess on fake node trees.

Torch is controlled, not mocked: a directory on PYTHONPATH whose `torch` package fails to
import makes "PyTorch not installed" real for the agent and its spawned children, so these
tests give the same answers whether or not the test machine has torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from agent_fake_node import agent_environment, r9700_node, run_agent

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path):
    return agent_environment(tmp_path)


agent = run_agent


def test_config_level_on_a_healthy_four_card_node_passes_and_writes_the_report(tmp_path, env):
    root = tmp_path / "root"
    r9700_node(root, 4)
    report_path = tmp_path / "out" / "report.json"
    result = agent(
        env,
        "--level",
        "config",
        "--root",
        str(root),
        "--journal-dir",
        str(tmp_path / "j"),
        "--expected-gpus",
        "4",
        "--json",
        str(report_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].startswith("r9700ctl validate: node ")
    assert "level config, 4 GPU(s), thresholds: AMD Radeon AI PRO R9700" in lines[0]
    assert any(line.split()[:3] == ["inventory.count", "node", "PASS"] for line in lines)
    assert any(line.split()[:4] == ["pcie.link", "gpu3", "PASS", "Gen5"] for line in lines)
    assert lines[-1].startswith("node ") and "PASS (exit 0: all good)" in lines[-1]

    report = json.loads(report_path.read_text())
    assert report["schema"] == "r9700ctl.validate/1"
    assert (report["level"], report["status"], report["exit_code"]) == ("config", "PASS", 0)
    assert report["model"] == "AMD Radeon AI PRO R9700"
    assert [g["pci_address"] for g in report["gpus"]][:2] == ["0000:12:00.0", "0000:22:00.0"]
    assert report["gpus"][0]["link"]["at"] == "0000:10:00.0"
    assert {"kernel", "cmdline", "torch", "variables", "rocm"} <= set(report["environment"])
    result_keys = {"id", "subject", "status", "metric", "value", "unit", "threshold", "hint", "evidence"}
    result_keys |= {"code", "detail"}  # added by issue 20 (fields are only added within a schema)
    assert all(set(r) == result_keys for r in report["results"])
    torch_result = next(r for r in report["results"] if r["id"] == "inventory.torch")
    assert torch_result["status"] == "SKIP"
    assert not list(report_path.parent.glob("*.tmp"))


def test_config_level_without_any_gpu_reports_them_missing(tmp_path, env):
    root = tmp_path / "root"
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    result = agent(env, "--level", "config", "--root", str(root), "--journal-dir", str(tmp_path / "j"))
    assert result.returncode == 2
    assert any(
        line.split()[:5] == ["inventory.count", "node", "FAIL", "0", "GPUs"]
        for line in result.stdout.splitlines()
    )
    assert "FAIL (exit 2: something failed)" in result.stdout


def test_quick_level_without_a_gpu_is_one_line_and_exit_3(tmp_path, env):
    root = tmp_path / "root"
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    report_path = tmp_path / "quick.json"
    report_path.write_text('{"status": "PASS"}')  # a stale report from an older run
    result = agent(
        env,
        "--level",
        "quick",
        "--root",
        str(root),
        "--journal-dir",
        str(tmp_path / "j"),
        "--json",
        str(report_path),
    )
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: no GPU found: no AMD or NVIDIA display device on the PCI bus")
    report = json.loads(report_path.read_text())
    assert (report["status"], report["exit_code"]) == ("ERROR", 3)
    assert report["results"][-1]["id"] == "node.gpu"


def test_quick_level_with_gpus_but_no_torch_says_how_to_get_torch(tmp_path, env):
    root = tmp_path / "root"
    r9700_node(root, 2)
    result = agent(env, "--level", "quick", "--root", str(root), "--journal-dir", str(tmp_path / "j"))
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "PyTorch is not importable" in result.stderr and "rocm/pytorch" in result.stderr


def test_a_host_reset_during_a_p2p_step_is_reported_by_the_next_run(tmp_path, env):
    """The journal of a run that died in p2p on another boot: the next run FAILs naming step and GPUs."""
    root = tmp_path / "root"
    r9700_node(root, 4, boot_id="bbbbbbbb-0000-0000-0000-000000000002")
    journal = tmp_path / "j"
    journal.mkdir()
    records = [
        {
            "type": "run_start",
            "run_id": "r1",
            "boot_id": "aaaaaaaa-0000-0000-0000-000000000001",
            "level": "quick",
            "time": "2026-01-05T10:00:00+0000",
        },
        {"type": "step_start", "seq": 1, "step": "p2p.copy.gpu2-gpu3", "gpus": [2, 3], "timeout_s": 60},
    ]
    (journal / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = agent(env, "--level", "config", "--root", str(root), "--journal-dir", str(journal))
    assert result.returncode == 2
    assert any(
        line.split()[:3] == ["node.previous_run_interrupted", "node", "FAIL"]
        for line in result.stdout.splitlines()
    )
    assert "host hang during step p2p.copy.gpu2-gpu3 on GPU(s) 2,3" in " ".join(result.stdout.split())
    assert "ROCm/rocm-systems#11348" in result.stdout
    # That report is given once: the next run starts clean.
    again = agent(env, "--level", "config", "--root", str(root), "--journal-dir", str(journal))
    assert again.returncode == 0, again.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--level", "fast"], "argument --level: invalid choice: 'fast'", id="level"),
        pytest.param(["--expect-scaling", "4:x"], "expected N:SPEEDUP pairs like 4:3.4,8:6.1", id="scaling"),
        pytest.param(["--expect-scaling", "4:5"], "0 < SPEEDUP <= N", id="superlinear"),
        pytest.param(["--only", "nosuch"], "--only: unknown check nosuch (known: ", id="only"),
        pytest.param(["--duration", "60"], "--duration applies to --level burnin only", id="duration"),
        pytest.param(["--gpus", "0,0"], "expected distinct GPU indices", id="gpus-dup"),
        pytest.param(["--gpus", "7"], "--gpus: no GPU 7 on this node (GPUs: 0,1)", id="gpus-absent"),
        pytest.param(
            ["--thresholds", "/nonexistent.yaml"], "--thresholds: /nonexistent.yaml is not a file", id="th"
        ),
    ],
)
def test_bad_options_are_one_line_and_exit_64(tmp_path, env, args, message):
    root = tmp_path / "root"
    r9700_node(root, 2)
    result = agent(env, "--root", str(root), "--journal-dir", str(tmp_path / "j"), *args)
    assert result.returncode == 64, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: ")
    assert message in result.stderr


def test_list_shows_the_checks_of_each_level(env):
    result = agent(env, "--list")
    assert result.returncode == 0
    config = next(line for line in result.stdout.splitlines() if line.startswith("config"))
    assert "inventory, driver, platform, pcie" in config


def test_verbose_progress_goes_to_stderr(tmp_path, env):
    root = tmp_path / "root"
    r9700_node(root, 1)
    result = agent(env, "-v", "--level", "config", "--root", str(root), "--journal-dir", str(tmp_path / "j"))
    assert "[agent] check inventory" in result.stderr
    assert "[agent]" not in result.stdout


def test_the_agent_imports_only_the_standard_library_and_itself():
    """The agent runs on nodes with the stdlib and torch only; torch is imported in children only."""
    code = (
        "import sys\n"
        "import r9700ctl.agent.__main__, r9700ctl.agent.check_run\n"
        "from r9700ctl.agent import checks\n"
        "failures = checks.load_all()\n"
        "assert not failures, failures\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    foreign = []
    for name in result.stdout.split():
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top.startswith("_") or name in ("r9700ctl", "__main__"):
            continue
        if name.startswith("r9700ctl.agent"):
            continue
        foreign.append(name)
    assert foreign == []
