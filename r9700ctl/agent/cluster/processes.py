"""Every process a step started, killed by its pid: at the step's deadline, and when the agent is stopped.

torchrun is started in a session of its own (so the phase program's own process group, which the
role's `timeout` signals, does not take it down half-way), and torch's elastic agent starts every
worker in yet another session (torch/distributed/elastic/multiprocessing/subprocess_handler/
subprocess_handler.py: `Popen(..., start_new_session=True)`, closed with `os.killpg(worker pid)`).
So neither `timeout` nor one `killpg(torchrun)` reaches a worker, nor what a worker started: a
killed torchrun left its workers running, holding the output pipe, the rendezvous port and the GPU.

`kill_tree(pid)` finds the processes by /proc: the descendants of `pid` (parent links) and every
process in a session or process group one of them leads (a worker whose parent died is still in
its own session); it stops each found (SIGSTOP: a stopped process forks nothing) until a pass finds
no new one, then kills each by its pid (SIGKILL). Standard library only (it runs on the nodes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable

# Processes started by a running step (torchrun's pid): the signal handlers of the phase program
# (r9700ctl/agent/cluster/__main__.py) kill these when the agent itself is stopped.
LIVE: set[int] = set()


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgid, sid) of a process from /proc/PID/stat, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    # proc(5): "pid (comm) state ppid pgrp session ..."; comm may hold spaces and parentheses.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _table() -> dict[int, tuple[str, int, int, int]]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            found = _stat(int(name))
            if found is not None:
                table[int(name)] = found
    return table


def alive(pid: int) -> bool:
    """Running (or stopped): present and not a zombie waiting for its parent."""
    found = _stat(pid)
    return found is not None and found[0] not in ("Z", "X")


def tree(roots: Iterable[int], leaders: Iterable[int] = ()) -> set[int]:
    """The live processes below `roots` (roots included), and every process in a session or
    process group led by one of them or by one of `leaders` (pids that may be gone already)."""
    table = _table()
    leading = set(leaders)
    found: set[int] = set()
    frontier = [pid for pid in roots if pid in table]
    while frontier:
        found.update(frontier)
        leading.update(frontier)
        frontier = [
            pid
            for pid, (_state, ppid, pgid, sid) in table.items()
            if pid not in found and (ppid in found or pgid in leading or sid in leading)
        ]
    me = os.getpid()
    return {pid for pid in found if pid != me and table[pid][0] not in ("Z", "X")}


def kill_tree(pid: int, *, root_alive: bool = True) -> set[int]:
    """Stop, then kill by pid, `pid` and every process of its tree and sessions; the pids killed.

    root_alive=False: `pid` has exited (and may have been reaped): only what is left in the session
    and process group it led is killed, never a process that took its number since.
    """
    roots = [pid] if root_alive else []
    stopped: set[int] = set()
    while True:
        new = tree(roots + sorted(stopped), leaders=[pid]) - stopped
        if not new:
            break
        for each in sorted(new):
            _signal(each, signal.SIGSTOP)
        stopped |= new
    for each in sorted(stopped):
        _signal(each, signal.SIGKILL)
    _wait_gone(stopped)
    return stopped


def kill_live() -> set[int]:
    """Every step still running, killed with its tree (the agent is being stopped)."""
    killed: set[int] = set()
    for pid in sorted(LIVE):
        killed |= kill_tree(pid)
    return killed


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_gone(pids: set[int], within_s: float = 5.0) -> None:
    """Wait (briefly) until `pids` are gone or zombies. Nothing is reaped here: the caller's own
    child keeps its exit status for its Popen; the others are reaped by their parent or init."""
    deadline = time.monotonic() + within_s
    left = set(pids)
    while left and time.monotonic() < deadline:
        left = {pid for pid in left if alive(pid)}
        if left:
            time.sleep(0.02)
