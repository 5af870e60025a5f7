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
