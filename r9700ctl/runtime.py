"""Where the validation agent runs: in the node's provisioned ROCm image, or on the host's Python.

The user's torch lives in the container the r9700_containers role pins (r9700-run); a node may
also have torch on the host. `--runtime auto` takes the provisioned image when it is on the node,
else the host's Python when it imports torch (or when the level needs no torch: config), else the
agent cannot run there. The same rule runs on each node inside roles/r9700_validate (its tasks
probe `r9700-run --check` and `python3 -c 'import torch'`); this module is `validate --local`'s.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from r9700ctl.errors import CannotRun

RUNTIMES = ("auto", "container", "host")
WRAPPER = "r9700-run"
WRAPPER_PATH = Path("/usr/local/bin/r9700-run")  # where r9700_containers installs it
NO_TORCH = "could not run: no torch on the node; provision the containers or install torch"
# The agent's crash-proof journal (agent default): kept on the host across container runs.
JOURNAL_DIR = "/var/lib/r9700ctl"


@dataclass(frozen=True)
class Runtime:
    """The chosen runtime: "container" (with its image and wrapper) or "host"."""

    name: str
    image: str = ""
    wrapper: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"runtime": self.name, "image": self.image}


def find_wrapper() -> str | None:
    found = shutil.which(WRAPPER)
    if found:
        return found
    return str(WRAPPER_PATH) if WRAPPER_PATH.is_file() else None


def provisioned_image(wrapper: str | None) -> tuple[str | None, str]:
    """(the image, "") when r9700-run says it is on this machine and dockerd answers; else (None, why)."""
    if wrapper is None:
        return None, f"{WRAPPER} is not installed (provision the node: role r9700_containers)"
    try:
        done = subprocess.run([wrapper, "--check"], capture_output=True, text=True, timeout=90, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{WRAPPER} --check did not answer ({exc})"
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return None, lines[-1] if lines else f"{WRAPPER} --check exited {done.returncode}"
    return done.stdout.strip().splitlines()[-1], ""


def host_has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def choose(requested: str, level: str) -> Runtime:
    """The runtime for `validate --local`, or CannotRun (exit 3) with the fix."""
    if requested not in RUNTIMES:
        raise ValueError(requested)
    if requested == "host":
        return Runtime("host")
    wrapper = find_wrapper()
    image, why = provisioned_image(wrapper)
    if image and wrapper:
        return Runtime("container", image=image, wrapper=wrapper)
    if requested == "container":
        raise CannotRun(
            what=f"could not run in the container: {why}",
            hint="provision the node (role r9700_containers), or use --runtime host",
        )
    if level == "config" or host_has_torch():
        return Runtime("host")
    raise CannotRun(what=NO_TORCH, hint=f"the container runtime is not usable here: {why}")


def container_command(
    runtime: Runtime, staged: Path, mounts: Sequence[Path], agent_args: Sequence[str]
) -> list[str]:
    """The agent inside the image: the staged code on PYTHONPATH, the paths it reads and writes mounted.

    r9700-run mounts the current directory (the staged one, where the command runs) and passes
    the GPUs, groups, ipc and shm of the node's provisioned access.
    """
    argv = [runtime.wrapper, "-e", f"PYTHONPATH={staged}", "-e", "PYTHONDONTWRITEBYTECODE=1"]
    argv += ["-v", f"{JOURNAL_DIR}:{JOURNAL_DIR}"]
    for directory in sorted({str(m) for m in mounts} - {str(staged), JOURNAL_DIR}):
        argv += ["-v", f"{directory}:{directory}"]
    return [*argv, "python3", "-m", "r9700ctl.agent", *agent_args]
