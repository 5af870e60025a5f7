"""Lab nodes that start provisioned: the snapshots a lab of some shape needs, made by one cold
`r9700ctl provision` where any is missing (r9700ctl/lab/snapshot.py keeps and stacks them).

Its own module because it drives a whole lab (api) while build stacks snapshots: in snapshot.py it
would close an import ring api -> build -> snapshot -> api."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from r9700ctl.errors import CannotRun
from r9700ctl.lab import api, snapshot, state


def ensure(release: str, gpus: int, nodes: int, progress: Callable[[str], None] | None = None) -> None:
    """Snapshots of node1..node`nodes` of a `gpus`-GPU lab provisioned with `release`, made when any
    is missing: a lab of that shape, one cold `r9700ctl provision` (exit 0 required), every node kept."""
    names = [f"node{i}" for i in range(1, nodes + 1)]
    if all(snapshot.find(release, gpus, name) for name in names):
        return
    say = progress or (lambda _line: None)
    lab_dir = Path(tempfile.mkdtemp(prefix="r97-", dir="/tmp"))  # short: ssh sockets live below it
    home = Path(tempfile.mkdtemp(prefix="r97-snapshot-home-"))
    try:
        info = api.up(lab_dir, nodes=nodes, gpus=gpus)
        say(f"snapshots: a cold provision of {nodes} node(s) x {gpus} GPU(s) with ROCm {release}")
        pinned = [] if release == "auto" else ["-e", f"r9700_rocm_version={release}"]
        env = {**os.environ, "NO_COLOR": "1", "XDG_STATE_HOME": str(home)}
        done = subprocess.run(
            [sys.executable, "-m", "r9700ctl", "provision", str(info.inventory), *pinned],
            capture_output=True, text=True, env=env, timeout=1800, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise CannotRun(what=f"the snapshots' provision exited {done.returncode}: {done.stdout[-1500:]}")
        for name in names:
            snapshot.take(lab_dir, name, release)
    finally:
        if state.load(lab_dir) is not None:
            api.down(lab_dir)
        shutil.rmtree(home, ignore_errors=True)
        with contextlib.suppress(OSError):
            lab_dir.rmdir()
