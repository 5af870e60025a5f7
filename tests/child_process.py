"""Running r9700ctl (or a driver script) as a real child process, the way a user's shell does.

The one helper for unit and lab tests alike: plain output (NO_COLOR), a fixed width where asked, and with
`home` a state directory of the test's own (XDG_STATE_HOME: run artifacts, the history).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def interruptible() -> None:
    """preexec_fn: the child takes SIGINT as at a terminal, even when the tests run from a job
    started with `&` by a shell without job control: that shell ignores SIGINT, children inherit
    the ignore, and Python then installs no KeyboardInterrupt handler (Ctrl-C tests would hang)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def r9700ctl(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 180,
    home: Path | str | None = None,
    columns: int | None = None,
    history_in_home: bool = False,
    without: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    """The real console entry point (r9700ctl.cli.main), where errors become one line and a code.

    history_in_home: the history database is `home`/history.db (R9700CTL_HISTORY) rather than the
    one the environment names: for runs from module-scoped fixtures, which start before conftest's
    per-test history is set, and for tests that read back the history their runs wrote.
    without: variables of this process's environment the child does not get (e.g. SSH_AUTH_SOCK,
    so no ssh-agent key is offered).
    """
    own = {"NO_COLOR": "1", **({"COLUMNS": str(columns)} if columns else {})}
    if home is not None:
        own["XDG_STATE_HOME"] = str(home)
    if history_in_home:
        if home is None:
            raise ValueError("history_in_home needs home")
        own["R9700CTL_HISTORY"] = str(Path(home) / "history.db")
    return subprocess.run(
        [sys.executable, "-m", "r9700ctl", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        check=False,
        env={**{k: v for k, v in os.environ.items() if k not in without}, **own, **(env or {})},
    )
