"""validate --cluster's wall clocks on a node: a step past its deadline leaves no process behind.

Real child processes: a stand-in `torch.distributed.run` (a package `torch` put first on
PYTHONPATH, so the agent's own `python -m torch.distributed.run` argv runs it) that starts a
"worker" in a session of its own, as torch's elastic agent does (torch/distributed/elastic/
multiprocessing/subprocess_handler/subprocess_handler.py: `start_new_session=True`), and the worker
starts a grandchild; all three sleep. Each writes its pid to a directory, so the test can ask
whether any of them is still there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from child_process import REPO

from r9700ctl.agent.cluster import collective, launch, processes

SLEEP_S = 20  # longer than any deadline here: a process still there at the end was not killed

FAKE_RUN = f"""
import os, subprocess, sys, time
pids = os.environ["R9700_TEST_PIDS"]
open(os.path.join(pids, "torchrun." + str(os.getpid())), "w").close()
print("fake torchrun", " ".join(sys.argv[1:]), flush=True)
worker = os.path.join(os.path.dirname(__file__), "worker.py")
subprocess.Popen([sys.executable, worker], start_new_session=True)
time.sleep({SLEEP_S})
"""
FAKE_WORKER = f"""
import os, subprocess, sys, time
pids = os.environ["R9700_TEST_PIDS"]
open(os.path.join(pids, "worker." + str(os.getpid())), "w").close()
subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "grandchild.py")])
time.sleep({SLEEP_S})
"""
FAKE_GRANDCHILD = f"""
import os, time
open(os.path.join(os.environ["R9700_TEST_PIDS"], "grandchild." + str(os.getpid())), "w").close()
time.sleep({SLEEP_S})
"""


@pytest.fixture
def fake_torchrun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    site = tmp_path / "site"
    run = site / "torch" / "distributed"
    run.mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    (run / "__init__.py").write_text("")
    (run / "run.py").write_text(textwrap.dedent(FAKE_RUN))
    (run / "worker.py").write_text(textwrap.dedent(FAKE_WORKER))
    (run / "grandchild.py").write_text(textwrap.dedent(FAKE_GRANDCHILD))
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{REPO}")
    monkeypatch.setenv("R9700_TEST_PIDS", str(pids))
    yield pids
    for pid in recorded(pids).values():  # a failing test must not leave its sleepers behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def recorded(pids: Path) -> dict[str, int]:
    return {p.name: int(p.suffix[1:]) for p in pids.iterdir()}


def wait_for(pids: Path, count: int, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while len(recorded(pids)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(recorded(pids)) >= count, recorded(pids)


def left_running(pids: Path) -> dict[str, int]:
    return {name: pid for name, pid in recorded(pids).items() if processes.alive(pid)}


def plan(timeout_s: float, **more) -> dict:
    return {
        "node": "node1",
        "head": "node1",
        "address": "127.0.0.1",
        "head_address": "127.0.0.1",
        "port": 29400,
        "nnodes": 1,
        "run_id": "test",
        "join_timeout_s": 300,
        "timeout_s": timeout_s,
        **more,
    }


def test_a_step_past_its_deadline_leaves_no_process_of_it_behind(fake_torchrun, tmp_path):
    """Bug pinned: the step's `killpg(torchrun)` killed torchrun alone; its worker (a session of its
    own) and the worker's child kept running, holding the output pipe, so the agent waited for them."""
    began = time.monotonic()
    done = launch.run(plan(4.0), "worker", str(tmp_path / "rank"))
    took = time.monotonic() - began
    # Before the fix the agent sat in communicate() until the orphaned worker and its child (holding
    # the pipe) ended by themselves, SLEEP_S later.
    assert took < 4.0 + launch.PIPE_GRACE_S, took
    assert set(n.split(".")[0] for n in recorded(fake_torchrun)) == {"torchrun", "worker", "grandchild"}
    assert left_running(fake_torchrun) == {}
    assert done["timed_out"] is True and done["rc"] == -signal.SIGKILL and done["killed"] >= 3
    assert any("fake torchrun" in line for line in done["tail"])


def test_each_collective_step_gets_a_share_of_what_is_left_of_the_phases_wall_clock(
    fake_torchrun, monkeypatch
):
    """Bug pinned: every step was given the whole phase's timeout while the steps run one after
    another, so a hanging step ran the phase past the role's outer `timeout`."""
    monkeypatch.setattr(collective, "MIN_STEP_S", 1.0)  # seconds here, not a real torchrun's minutes
    steps = [{"name": f"s{i}", "members": ["node1"], "sweep": {}, "nproc_per_node": 1} for i in range(3)]
    began = time.monotonic()
    done = collective.run(plan(9.0, steps=steps))
    took = time.monotonic() - began
    assert took < 9.0 + 3.0, took
    deadlines = [step["torchrun"]["deadline_s"] for step in done["steps"]]
    assert len(deadlines) == 3 and all(2.0 <= d <= 3.1 for d in deadlines), deadlines
    assert all(step["torchrun"]["timed_out"] for step in done["steps"])
    assert left_running(fake_torchrun) == {}


def test_deadlines_share_what_is_left_and_the_join_never_outlasts_the_step():
    assert collective.deadlines(600.0, 4, 300) == (150.0, 150)
    assert collective.deadlines(100.0, 1, 300) == (100.0, 100)
    assert collective.deadlines(-5.0, 2, 300) == (0.0, 1)


def test_steps_with_no_time_left_are_not_started_and_say_so():
    steps = [{"name": name, "members": ["node1"], "sweep": {}, "nproc_per_node": 1} for name in "ab"]
    done = collective.run(plan(1.0, steps=steps))
    assert [s["step"] for s in done["steps"]] == ["a", "b"]
    for step in done["steps"]:
        assert step["torchrun"]["timed_out"] and step["torchrun"]["not_started"] and step["ranks"] == []


def test_sigterm_to_the_phase_program_kills_its_step_and_everything_the_step_started(fake_torchrun, tmp_path):
    """The role's `timeout` signals the phase program's process group; torchrun (a session of its
    own) is not in it: the program's handler must kill the step's processes by their pids."""
    (tmp_path / "plan.json").write_text(json.dumps(plan(60.0)))
    agent = subprocess.Popen(
        [sys.executable, "-m", "r9700ctl.agent.cluster", "smoke", "--plan", "plan.json", "--out", "out.json"],
        cwd=tmp_path,
        env=dict(os.environ),
    )
    try:
        wait_for(fake_torchrun, 3)
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 128 + signal.SIGTERM
    finally:
        agent.kill()
    time.sleep(0.2)
    assert left_running(fake_torchrun) == {}
    assert not (tmp_path / "out.json").exists()


HANG_WORKER = f"""
import os, subprocess, sys, time
pids = os.environ["R9700_TEST_PIDS"]
open(os.path.join(pids, "worker." + str(os.getpid())), "w").close()
subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "grandchild.py")])
time.sleep({SLEEP_S * 3})
"""


def test_with_the_real_torchrun_its_workers_and_their_children_are_killed_at_the_deadline(
    tmp_path, monkeypatch
):
    """torch's own elastic agent (two workers, each in a session of its own, each with a child):
    recorded before the fix, 4 of the 4 were still running after the deadline and the agent waited
    for them to end by themselves."""
    pytest.importorskip("torch.distributed.run")
    site = tmp_path / "site"
    site.mkdir()
    (site / "hang_worker.py").write_text(textwrap.dedent(HANG_WORKER))
    grandchild = FAKE_GRANDCHILD.replace(f"time.sleep({SLEEP_S})", f"time.sleep({SLEEP_S * 3})")
    (site / "grandchild.py").write_text(textwrap.dedent(grandchild))  # outlives the 30 s deadline
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{REPO}")
    monkeypatch.setenv("R9700_TEST_PIDS", str(pids))
    try:
        began = time.monotonic()
        done = launch.run(plan(30.0, nproc_per_node=2, port=29471), "hang_worker", str(tmp_path / "rank"))
        took = time.monotonic() - began
        assert took < 30.0 + launch.PIPE_GRACE_S, took
        assert sorted(n.split(".")[0] for n in recorded(pids)) == ["grandchild"] * 2 + ["worker"] * 2
        assert left_running(pids) == {}
        assert done["timed_out"] and done["killed"] >= 5  # torchrun, 2 workers, 2 children
    finally:
        for pid in recorded(pids).values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
