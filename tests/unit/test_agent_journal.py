"""The journal must survive the process (and, on a real node, the host) dying mid-step.

These tests kill a real child process with SIGKILL in the middle of a step and read what it
left on disk; the boot id comes from a fake /proc tree, so "the host rebooted" is a different
boot id file, exactly what the agent compares on a node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from r9700ctl.agent.check_run import previous_run_results
from r9700ctl.agent.journal import (
    JOURNAL_NAME,
    PREVIOUS_NAME,
    Journal,
    JournalError,
    find_interrupted,
    read_boot_id,
    read_records,
)
from r9700ctl.agent.result import FAIL, WARN

REPO = Path(__file__).resolve().parents[2]
BOOT_A = "aaaaaaaa-0000-0000-0000-000000000001"
BOOT_B = "bbbbbbbb-0000-0000-0000-000000000002"


def _fake_root(tmp_path: Path, boot_id: str) -> Path:
    root = tmp_path / f"root-{boot_id[:4]}"
    boot = root / "proc/sys/kernel/random/boot_id"
    boot.parent.mkdir(parents=True, exist_ok=True)
    boot.write_text(boot_id + "\n")
    return root


def _die_during_step(journal_dir: Path, root: Path, step: str, gpus: list[int]) -> None:
    """A real agent-like process: open the journal, start a step, then get SIGKILLed inside it."""
    ready = journal_dir.parent / "ready"
    code = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from r9700ctl.agent.journal import Journal, read_boot_id
        journal = Journal(Path({str(journal_dir)!r}), read_boot_id(Path({str(root)!r})))
        journal.open("quick")
        journal.step_end(journal.step_start("hostbw.h2d.gpu0", [0], 60), "hostbw.h2d.gpu0", "ok", 1.5)
        journal.step_start({step!r}, {gpus!r}, 120)
        Path({str(ready)!r}).write_text("1")
        time.sleep(3600)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert child.poll() is None, "the child died before starting its step"
        assert time.monotonic() < deadline, "the child never started its step"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)


def test_boot_id_is_read_from_the_root_and_missing_is_empty(tmp_path):
    assert read_boot_id(_fake_root(tmp_path, BOOT_A)) == BOOT_A
    assert read_boot_id(tmp_path / "nothing") == ""


def test_a_step_killed_mid_run_is_on_disk_and_a_new_boot_makes_it_a_host_failure(tmp_path):
    """The P2P host hang (ROCm/rocm-systems#11348) resets the node: the next run must name the step."""
    journal_dir = tmp_path / "journal"
    _die_during_step(journal_dir, _fake_root(tmp_path, BOOT_A), "p2p.copy.gpu2-gpu3", [2, 3])

    journal = Journal(journal_dir, read_boot_id(_fake_root(tmp_path, BOOT_B)))
    previous = journal.open("quick")
    journal.close("PASS")

    assert previous is not None and previous.rebooted
    assert previous.level == "quick"
    assert [s["step"] for s in previous.open_steps] == ["p2p.copy.gpu2-gpu3"]
    [result] = previous_run_results(previous)
    assert result.id == "node.previous_run_interrupted"
    assert result.status == FAIL
    assert result.value == "p2p.copy.gpu2-gpu3"
    assert "GPU(s) 2,3" in result.hint
    assert "ROCm/rocm-systems#11348" in result.hint
    assert "iommu=pt" in result.hint and "NCCL_P2P_DISABLE=1" in result.hint
    assert result.evidence["previous_boot_id"] == BOOT_A
    # The dead run's journal is kept beside the new one.
    assert "p2p.copy.gpu2-gpu3" in (journal_dir / PREVIOUS_NAME).read_text()


def test_same_boot_means_the_agent_was_killed_not_the_host(tmp_path):
    journal_dir = tmp_path / "journal"
    root = _fake_root(tmp_path, BOOT_A)
    _die_during_step(journal_dir, root, "compute.gemm", [0, 1, 2, 3])

    journal = Journal(journal_dir, read_boot_id(root))
    previous = journal.open("quick")
    journal.close("PASS")

    [result] = previous_run_results(previous)
    assert result.status == WARN
    assert "killed during step compute.gemm on GPU(s) 0,1,2,3" in result.hint


def test_a_finished_run_leaves_nothing_to_report(tmp_path):
    first = Journal(tmp_path, BOOT_A)
    assert first.open("config") is None
    first.close("PASS")
    second = Journal(tmp_path, BOOT_B)
    assert second.open("config") is None
    second.close("PASS")


def test_every_record_is_complete_json_with_the_boot_id_first(tmp_path):
    journal = Journal(tmp_path, BOOT_A)
    journal.open("standard")
    seq = journal.step_start("memory.triad", [1], 90)
    journal.step_end(seq, "memory.triad", "ok", 2.25)
    journal.close("WARN")
    records = [json.loads(line) for line in (tmp_path / JOURNAL_NAME).read_text().splitlines()]
    assert [r["type"] for r in records] == ["run_start", "step_start", "step_end", "run_end"]
    assert records[0]["boot_id"] == BOOT_A and records[0]["level"] == "standard"
    assert records[1]["gpus"] == [1] and records[2]["status"] == "ok"


def test_a_torn_last_line_from_a_power_loss_is_ignored(tmp_path):
    path = tmp_path / JOURNAL_NAME
    path.write_text(
        json.dumps({"type": "run_start", "run_id": "r1", "boot_id": BOOT_A, "level": "quick"})
        + "\n"
        + json.dumps({"type": "step_start", "seq": 1, "step": "p2p.copy.gpu0-gpu1", "gpus": [0, 1]})
        + "\n"
        + '{"type": "step_end", "se'
    )
    previous = find_interrupted(read_records(path), BOOT_B)
    assert previous is not None and previous.rebooted
    assert previous.last_step["step"] == "p2p.copy.gpu0-gpu1"


def test_a_run_stopped_between_steps_is_a_warning(tmp_path):
    path = tmp_path / JOURNAL_NAME
    path.write_text(
        json.dumps({"type": "run_start", "run_id": "r1", "boot_id": BOOT_A, "level": "quick"}) + "\n"
    )
    [result] = previous_run_results(find_interrupted(read_records(path), BOOT_B))
    assert result.status == WARN
    assert "rebooted between steps" in result.hint


def test_a_second_agent_on_the_same_journal_is_refused(tmp_path):
    """Two agents at once would measure each other's load and interleave the journal."""
    first = Journal(tmp_path, BOOT_A)
    first.open("quick")
    try:
        with pytest.raises(JournalError, match=f"another r9700ctl agent \\(pid {os.getpid()}\\)"):
            Journal(tmp_path, BOOT_A).open("quick")
    finally:
        first.close("PASS")
    Journal(tmp_path, BOOT_A).open("quick")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_an_unwritable_journal_directory_is_a_clear_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(JournalError, match="cannot write the journal directory"):
        Journal(locked / "journal", BOOT_A).open("quick")


def test_a_run_stopped_by_sigterm_inside_a_step_still_reports_that_step(tmp_path):
    """The agent closes its journal on SIGTERM; the step it was in is still the evidence."""
    path = tmp_path / JOURNAL_NAME
    records = [
        {"type": "run_start", "run_id": "r1", "boot_id": BOOT_A, "level": "standard"},
        {"type": "step_start", "seq": 1, "step": "collective.allreduce", "gpus": [0, 1]},
        {"type": "run_end", "status": "aborted"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    [result] = previous_run_results(find_interrupted(read_records(path), BOOT_A))
    assert result.status == WARN
    assert "collective.allreduce on GPU(s) 0,1" in result.hint
