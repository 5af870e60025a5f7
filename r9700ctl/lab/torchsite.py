"""PyTorch (CPU) for the lab's nodes: one site directory per host, bound read-only into each node.

Cluster validation runs gloo across the nodes' network namespaces, so the nodes' python3 (Debian
12's 3.11) must import torch. The nodes reach no package index; the controller does (pip, as
`scripts/setup.sh --test` installs torch into the venv). So the lab installs torch ONCE per host
with `pip install --target` into a cached directory beside the root file system, and each node of
a cluster lab gets it as a read-only bind mount at NODE_DIR plus a .pth file that puts it on
python3's path. Nothing is copied per node; `lab down` drops the mount with the node's namespace.
The wheel is CPython 3.11 (cp311), the ABI of both the controller's Python and Debian 12's.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from r9700ctl.lab import locks, processes, rootfs

# The release the project's tests use (scripts/setup.sh), unless the controller has another one.
DEFAULT_VERSION = "2.13.0"
NODE_DIR = "opt/r9700ctl-lab/torch"
# Debian's python3 reads .pth files in its dist-packages (site.py, Debian's python3 packaging).
PTH_FILE = "usr/lib/python3/dist-packages/r9700ctl-lab-torch.pth"


def version() -> str:
    """The controller's torch version without its local tag (2.13.0+cpu -> 2.13.0), else the default."""
    try:
        return metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        return DEFAULT_VERSION


def site_path() -> Path:
    return rootfs.cache_dir() / f"torch-cp{sys.version_info.major}{sys.version_info.minor}-{version()}"


def ensure(progress) -> Path:
    """The cached site directory, built once per host (pip through the controller's own config)."""
    target = site_path()

    def build(work: Path) -> None:
        progress(f"torch {version()} (CPU) for the nodes: pip install --target {target} (once per host)")
        processes.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-warn-script-location", "--target", str(work),
             f"torch=={version()}", "numpy"],
            what="install torch for the lab's nodes",
            timeout=1800,
        )  # fmt: skip

    if not locks.build_once(target, target.with_suffix(".lock"), build):
        progress(f"torch for the nodes: cached in {target}")
    return target
