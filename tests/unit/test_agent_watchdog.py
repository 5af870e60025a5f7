"""The watchdog runs every GPU step in a real spawned child; these tests use real children too.

A hung kernel or collective must become a TIMEOUT result, with the whole process group gone,
and the agent must go on: that is the contract the measurement checks rely on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import agent_step_fns as fns
import pytest

from r9700ctl.agent import watchdog


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): look at its state.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_step_returns_its_dict_from_a_child_in_its_own_process_group():
    """Steps must run outside the agent's process (fresh GPU state) and lead their own group (killpg)."""
    outcome = watchdog.run_in_child("echo", fns.echo, (7,), timeout_s=60)
    assert outcome.status == "ok", outcome.error
    assert outcome.value["value"] == 7
    assert outcome.value["pid"] != os.getpid()
    assert outcome.value["pgid"] == outcome.value["pid"]


def test_env_is_applied_in_the_child_only():
    """NCCL_P2P_DISABLE must reach the child before torch loads, and never leak into the agent."""
    outcome = watchdog.run_in_child(
        "env", fns.read_env, ("R9700_TEST_VAR",), timeout_s=60, env={"R9700_TEST_VAR": "1"}
    )
    assert outcome.value == {"value": "1"}
    assert "R9700_TEST_VAR" not in os.environ


def test_a_hung_step_times_out_and_its_helpers_die_with_it(tmp_path):
    """Bug pinned: killing only the child left a step's helper processes running on the GPU."""
    pid_file = tmp_path / "helper.pid"
    started = time.monotonic()
    outcome = watchdog.run_in_child("hang", fns.spawn_grandchild_then_hang, (str(pid_file),), timeout_s=3)
    assert outcome.status == "timeout"
    assert "3 s" in outcome.error
    assert 2.5 < outcome.duration_s < 20
    assert time.monotonic() - started < 30
    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(helper)


def test_an_exception_in_the_step_is_an_error_with_the_traceback():
    outcome = watchdog.run_in_child("boom", fns.raise_error, timeout_s=60)
    assert outcome.status == "error"
    assert "RuntimeError: the kernel found 3 wrong values" in outcome.error
    assert "Traceback" in outcome.error


def test_a_child_killed_by_a_signal_is_an_error_naming_the_signal():
    """A segfaulting HIP runtime must read as a crash, not hang the agent waiting for a result."""
    outcome = watchdog.run_in_child("sigkill", fns.die_by_signal, timeout_s=60)
    assert outcome.status == "error"
    assert "SIGKILL" in outcome.error


def test_a_non_dict_return_is_the_steps_bug_not_the_agents():
    outcome = watchdog.run_in_child("list", fns.return_list, timeout_s=60)
    assert outcome.status == "error"
    assert "expected a dict" in outcome.error


def test_child_output_is_captured_not_printed(capfd):
    """RCCL/HIP warnings must not break the agent's one-line errors; they are kept as evidence."""
    outcome = watchdog.run_in_child("noisy", fns.noisy, ("hello",), timeout_s=60)
    assert outcome.ok
    captured = capfd.readouterr()
    assert "hello" not in captured.out + captured.err
    assert "hello\n" in outcome.output
    assert "hello on stderr" in outcome.output
    assert "C-level write" in outcome.output


def test_an_unpicklable_function_is_an_error_result():
    outcome = watchdog.run_in_child("lambda", lambda: {}, timeout_s=10)
    assert outcome.status == "error"
    assert "could not start child" in outcome.error


def test_free_port_is_a_bindable_loopback_port():
    port = watchdog.free_port()
    assert 1024 <= port <= 65535


@pytest.fixture
def torch_distributed():
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this build")
    return torch


def test_ranks_all_reduce_over_gloo_and_return_every_ranks_dict(torch_distributed):
    """The collective, scaling and stability steps depend on this orchestration (CPU, gloo)."""
    outcome = watchdog.run_ranks("sum", 3, fns.rank_sum, (10,), timeout_s=120, backend="gloo")
    assert outcome.status == "ok", outcome.error
    assert outcome.value["sum"] == 10 * (1 + 2 + 3)
    assert [v["rank"] for v in outcome.values] == [0, 1, 2]
    assert [v["env_rank"] for v in outcome.values] == ["0", "1", "2"]
    assert all(v["world_size"] == 3 for v in outcome.values)


def test_one_failing_rank_fails_the_step_and_the_waiting_ranks_are_killed(torch_distributed):
    """Bug pinned: survivors blocked in all_reduce forever after a peer died."""
    started = time.monotonic()
    outcome = watchdog.run_ranks("fail", 2, fns.rank_one_fails, timeout_s=120, backend="gloo")
    assert outcome.status == "error"
    assert outcome.error.startswith("rank 1 failed")
    assert "corrupted data" in outcome.error
    assert time.monotonic() - started < 60


def test_hung_ranks_time_out(torch_distributed):
    outcome = watchdog.run_ranks("hang", 2, fns.rank_hangs, timeout_s=4, backend="gloo")
    assert outcome.status == "timeout"
    assert "ranks 0, 1" in outcome.error


def test_nccl_ranks_need_as_many_gpus_as_ranks():
    outcome = watchdog.run_ranks("nccl", 4, fns.rank_hangs, timeout_s=4, backend="nccl", gpus=[0, 1])
    assert outcome.status == "error"
    assert "4 ranks need 4 GPUs" in outcome.error


def _agent_like_parent(tmp_path, install_sigterm_handler: bool):
    """A real parent process running a hanging step, as the agent would."""
    pid_file = tmp_path / "step.pid"
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import agent_step_fns as fns\n"
        "from r9700ctl.agent import watchdog\n"
        "from r9700ctl.agent.__main__ import _stop_on_sigterm\n"
        "if __name__ == '__main__':\n"
        f"    if {install_sigterm_handler}: _stop_on_sigterm()\n"
        "    try:\n"
        f"        watchdog.run_in_child('hang', fns.write_pid_then_hang, ({str(pid_file)!r},),\n"
        "                              timeout_s=600)\n"
        "    except KeyboardInterrupt:\n"
        "        sys.exit(143)\n"
    )
    parent = subprocess.Popen(  # TMPDIR: a SIGKILLed agent cannot remove its step output file
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert parent.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return parent, int(pid_file.read_text())


def _gone(pid: int, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def test_sigterm_to_the_agent_kills_the_running_step(tmp_path):
    """Ansible's timeout sends SIGTERM: the step's process group must not outlive the agent."""
    parent, step = _agent_like_parent(tmp_path, install_sigterm_handler=True)
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == 143
    assert _gone(step)


def test_a_sigkilled_agent_takes_its_step_child_with_it(tmp_path):
    """PR_SET_PDEATHSIG: even SIGKILL of the agent leaves no GPU work running."""
    parent, step = _agent_like_parent(tmp_path, install_sigterm_handler=False)
    parent.kill()
    parent.wait(timeout=30)
    assert _gone(step)
