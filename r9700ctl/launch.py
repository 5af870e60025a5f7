"""Start the agent on this machine as a child process and stream its output (controller side).

`r9700ctl validate --local` uses this: the agent is staged (code + data as JSON,
r9700ctl.agentpack) in a scratch directory and runs from there with this interpreter, in its
own process, exactly as it runs on a node; its exit code is the command's. Lines are handed to
callbacks; nothing here prints.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from r9700ctl import agentpack

if TYPE_CHECKING:
    from r9700ctl.runtime import Runtime


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
    runtime: Runtime | None = None,
    mounts: Sequence[Path] = (),
) -> int:
    """Stage the agent, run it with `args`, each output line to its callback; return its exit code.

    It runs in the staged directory (so `python -m` finds the staged package first, not an
    r9700ctl checkout in the caller's directory): paths in `args` must be absolute. With a
    container runtime it runs in the node's image through r9700-run, the staged directory and
    `mounts` (the directories of the paths in `args`) mounted at the same paths.
    """
    with tempfile.TemporaryDirectory(prefix="r9700ctl-agent-") as scratch:
        staged = agentpack.stage(Path(scratch))
        env = {**os.environ, "PYTHONPATH": str(staged), "PYTHONDONTWRITEBYTECODE": "1"}
        command = agent_command(args, python)
        if runtime is not None and runtime.name == "container":
            from r9700ctl.runtime import container_command

            command = container_command(runtime, staged, mounts, args)
        return _run(command, env, staged, on_stdout, on_stderr)


def _run(
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    on_stdout: Callable[[str], None],
    on_stderr: Callable[[str], None],
) -> int:
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        bufsize=1,
        env=env,
        cwd=cwd,
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
