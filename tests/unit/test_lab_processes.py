"""Starting and stopping lab daemons, with real child processes."""

import signal
import socket
import sys

from r9700ctl.lab import processes

SLEEPER = [sys.executable, "-c", "import time, sys; time.sleep(60)", "/tmp/r97-unit-marker/x"]


def test_a_spawned_daemon_is_verified_by_its_command_line_and_stopped(tmp_path):
    pid = processes.spawn(SLEEPER, tmp_path / "log")
    try:
        assert processes.verified(pid, "/tmp/r97-unit-marker/") == pid
        # Bug pinned: after a reboot lab.json's PIDs belong to strangers; never signal those.
        assert processes.verified(pid, "/tmp/r97-other-lab/") is None
        assert processes.stop(pid, grace=5.0) is True
        assert processes.alive(pid) is False
    finally:
        if processes.alive(pid):
            processes.stop(pid, sig=signal.SIGKILL)


def test_a_process_that_ignores_term_is_killed_after_the_grace_time(tmp_path):
    stubborn = [
        sys.executable,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)",
    ]
    pid = processes.spawn(stubborn, tmp_path / "log")
    processes.wait_gone(pid, 0.3)  # let it install the handler
    assert processes.stop(pid, grace=0.5) is True
    assert processes.alive(pid) is False


def test_stopping_nothing_is_harmless():
    assert processes.stop(None) is False
    assert processes.verified(None, "x") is None


def test_the_daemon_environment_does_not_leak_the_callers(tmp_path, monkeypatch):
    monkeypatch.setenv("R97_SECRET_OF_CALLER", "leak")
    pid = processes.spawn([sys.executable, "-c", "import os; print(sorted(os.environ))"], tmp_path / "log")
    processes.wait_gone(pid, 10)
    assert "R97_SECRET_OF_CALLER" not in (tmp_path / "log").read_text()


def test_a_port_someone_listens_on_is_skipped():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert processes.port_free("127.0.0.1", port) is False
        assert processes.free_port("127.0.0.1", port) != port
        assert processes.port_open("127.0.0.1", port) is True
