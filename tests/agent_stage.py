"""The agent staged as the controller ships it (code + data as JSON), once per test process."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path


@functools.lru_cache(maxsize=1)
def staged_agent_dir() -> Path:
    """A directory holding r9700ctl/{__init__.py,agent/,data/*.json} (r9700ctl.agentpack.stage)."""
    from r9700ctl import agentpack

    directory = Path(tempfile.mkdtemp(prefix="r9700ctl-test-agent-"))
    atexit.register(shutil.rmtree, directory, True)
    return agentpack.stage(directory)


@functools.lru_cache(maxsize=1)
def node_program_file() -> Path:
    """r9700ctl's node program (r9700ctl.agentpack.node_program): the one file the roles run and
    install under their programs' names."""
    from r9700ctl import agentpack

    directory = Path(tempfile.mkdtemp(prefix="r9700ctl-test-node-"))
    atexit.register(shutil.rmtree, directory, True)
    return agentpack.node_program(directory / "r9700-node")


def installed_as(name: str) -> Path:
    """The node program under a program's name (r9700-run, r9700-power-cap), as a role installs it."""
    program = node_program_file()
    path = program.parent / name
    if not path.exists():
        path.symlink_to(program)
    return path
