"""Child processes of the lab: run a tool, start a daemon, stop exactly the PIDs we recorded."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from r9700ctl.errors import CannotRun


def run(argv: Sequence[str], *, what: str, stdin_data: bytes | None = None, timeout: float = 120) -> str:
    """Run a host tool; a failure becomes CannotRun naming the step and the tool's last words."""
    try:
        proc = subprocess.run(list(argv), input=stdin_data, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise CannotRun(what=f"{what}: {argv[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise CannotRun(what=f"{what}: {argv[0]} did not finish within {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise CannotRun(
            what=f"{what}: {' '.join(argv[:3])} exited {proc.returncode}: {_last_line(proc.stderr)}"
        )
    return proc.stdout.decode(errors="replace")


def _last_line(data: bytes) -> str:
    lines = [line for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


# Daemons and nodes start with a small, fixed environment: nothing of the caller's shell
# (a virtualenv, PYTHONPATH, proxies) leaks into a node.
DAEMON_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def spawn(argv: Sequence[str], log: Path) -> int:
    """Start a long-running process in its own session, output to `log`; returns its PID.

    The process outlives the calling CLI; `stop()` ends it by the PID recorded in lab.json.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=DAEMON_ENV,
        )
    return proc.pid


def alive(pid: int | None) -> bool:
    """Exists and is not a zombie (killed daemons linger as zombies until their parent reaps them)."""
    if not pid:
        return False
    _reap(pid)
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def verified(pid: int | None, marker: str) -> int | None:
    """`pid` if it is alive and still the process we started (its command line names `marker`).

    lab.json outlives a reboot; a recorded PID may by then belong to an unrelated process.
    """
    deadline = time.monotonic() + 1.0
    while alive(pid):
        try:
            cmdline = " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            return None
        if cmdline or time.monotonic() > deadline:  # empty for a moment while it execs
            return pid if marker in cmdline else None
        time.sleep(0.01)
    return None


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our own child (a lab built in this process)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def children(pid: int) -> list[int]:
    try:
        return sorted(child.pid for child in psutil.Process(pid).children())
    except psutil.Error:
        return []


def stop(pid: int | None, *, grace: float = 5.0, sig: int = signal.SIGTERM) -> bool:
    """Signal one recorded PID, wait up to `grace` seconds, then SIGKILL. True if it had been running."""
    if not alive(pid):
        return False
    assert pid is not None
    _signal(pid, sig)
    if not wait_gone(pid, grace):
        _signal(pid, signal.SIGKILL)
        wait_gone(pid, 5.0)
    return True


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def port_open(address: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(address: str, port: int, timeout: float, pid: int | None = None) -> bool:
    """Poll until something accepts on address:port; give up early when `pid` has died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(address, port, timeout=0.3):
            return True
        if pid is not None and not alive(pid):
            return False
        time.sleep(0.05)
    return False


def port_free(address: str, port: int) -> bool:
    """True when we could listen on address:port (another apt-cacher-ng may hold *:3142)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like the servers themselves: connections of an earlier lab in TIME_WAIT do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def free_port(address: str, preferred: int, tries: int = 50) -> int:
    for port in range(preferred, preferred + tries):
        if port_free(address, port):
            return port
    raise CannotRun(what=f"no free TCP port on {address} in {preferred}..{preferred + tries - 1}")


def tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(empty log)"
