"""Running r9700ctl (or a driver script) as a real child process, the way a user's shell does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def interruptible() -> None:
    """preexec_fn: the child takes SIGINT as at a terminal, even when the tests run from a job
    started with `&` by a shell without job control: that shell ignores SIGINT, children inherit
    the ignore, and Python then installs no KeyboardInterrupt handler (Ctrl-C tests would hang)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def r9700ctl(
    *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """The real console entry point (r9700ctl.cli.main), where errors become one line and a code."""
    return subprocess.run(
        [sys.executable, "-m", "r9700ctl", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        check=False,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )
