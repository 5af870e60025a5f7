"""Start the agent on this machine as a child process and stream its output (controller side).

`r9700ctl validate --local` uses this: the agent runs exactly as it does on a node
(`python -m r9700ctl.agent ...` with this interpreter), in its own process, and its exit code
is the command's. Lines are handed to callbacks; nothing here prints.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO


def agent_command(args: Sequence[str], python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "r9700ctl.agent", *args]


def _pump(stream: IO[str], sink: Callable[[str], None]) -> None:
    for line in stream:
        sink(line.rstrip("\n"))


def run_agent(
    args: Sequence[str],
    on_stdout: Callable[[str], None],
    on_stderr: Callable[[str], None],
    python: str | None = None,
) -> int:
    """Run the agent with `args`, each output line to its callback as it arrives; return its exit code."""
    process = subprocess.Popen(
        agent_command(args, python),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        bufsize=1,
    )
    assert process.stdout is not None and process.stderr is not None
    err_thread = threading.Thread(target=_pump, args=(process.stderr, on_stderr), daemon=True)
    err_thread.start()
    try:
        _pump(process.stdout, on_stdout)
        return process.wait()
    except BaseException:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        raise
    finally:
        err_thread.join(timeout=5)
