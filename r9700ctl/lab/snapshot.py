"""Provisioned-node snapshots: a lab node's overlay upper layer as one cold provision left it.

Tests that need a provisioned node but do not prove the cold provision itself (containers,
monitoring, power, lifecycle, kernel upgrade, collect, validate, verify) start from a snapshot:
the node's overlay gets it as a second lower layer (lowerdir=SNAPSHOT:BASE), so the node starts
with every package, file and dpkg state that provision left, and its own upper layer takes what
happens next. A lower layer that was once an upper layer keeps its meaning: overlayfs honours its
whiteouts and opaque directories (the kernel's Documentation/filesystems/overlayfs.rst, "Multiple
lower layers"; Docker's overlay2 driver stacks its layers the same way).

A snapshot holds only what provision made: the lab's own files in a node (node.PLUMBING: host
name, host key, authorized keys, apt plumbing, the machine's recorded outputs) are left out and
each node writes its own. What provision wrote is the same in every lab because the nodes are
given lab-host URLs (naming.HOST_NAME) and the mirror is signed with the host's one lab key.

Kept in the lab cache (rootfs.cache_dir()/snapshots) under the release asked for and a digest of
everything a provision's outcome follows from: the collection (roles, playbooks, plugins), the
r9700ctl package (manifest, stand-ins, node program, the plugins' helpers) and the root file
system. A change to any of them makes new snapshots; old ones go once unused for a day.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from r9700ctl.errors import CannotRun
from r9700ctl.lab import locks, node, processes, rootfs, state
from r9700ctl.lab.hostcheck import tool

UPPER = "upper"
META = "snapshot.json"
STALE_AFTER_S = 24 * 3600
# Each change to the roles, playbooks or package is a new digest and a new set of snapshots (about
# 1.5 GB): a day of changes filled this machine's disk until the lab nodes' preflight refused them
# for want of space. Besides the current inputs' snapshots, those of the most recently used other
# digests are kept, so that switching between two checkouts does not rebuild them every time.
OTHER_DIGESTS_KEPT = 2
# Left out besides the lab's plumbing: downloaded .debs (apt fetches again if it must) and scratch.
NOT_KEPT = ("var/cache/apt/archives", "tmp", "var/tmp", "root/.ansible")


def digest() -> str:
    """The inputs' hash: the collection and the package (r9700ctl.converge), the root file system."""
    from r9700ctl.converge import content_digest

    return hashlib.sha256(f"{content_digest()} {rootfs.cache_key()}".encode()).hexdigest()[:16]


def directory(release: str, gpus: int, name: str) -> Path:
    """Where the snapshot of node `name` of a `gpus`-GPU lab provisioned with `release` is kept."""
    return rootfs.cache_dir() / "snapshots" / f"{release}-{gpus}gpu-{name}-{digest()}"


def find(release: str, gpus: int, name: str) -> Path | None:
    """The upper layer to stack, or None when no snapshot of the current inputs exists."""
    where = directory(release, gpus, name)
    if not (where / META).is_file():
        return None
    os.utime(where / META)  # last used: what prune() goes by
    return where / UPPER


def require(release: str, gpus: int, name: str) -> Path:
    found = find(release, gpus, name)
    if found is None:
        raise CannotRun(
            what=f"no snapshot of {name} of a {gpus}-GPU lab provisioned with ROCm {release} (this checkout)",
            hint="the lab tests make them (tests/lab/conftest.py, node_snapshots)",
        )
    return found


def take(lab_directory: Path, node_name: str, release: str) -> Path:
    """Stop `node_name` of the lab in `lab_directory` and keep its upper layer as its snapshot.

    The node stays stopped (`lab down` removes the rest). Returns the snapshot's directory; one
    of the same inputs that is there already stays (a node may be using it as its lower layer).
    """
    lab = state.load(lab_directory)
    if lab is None:
        raise CannotRun(what=f"no lab in {lab_directory}")
    entry = lab.node(node_name)
    node.stop(processes.verified(entry.pid, f"{lab_directory}/"))
    entry.pid = None
    state.save(lab)
    upper = node.NodePaths(lab_directory / "nodes" / node_name).upper
    target = directory(release, lab.gpus, node_name)

    def keep(work: Path) -> None:
        _copy_tree(upper, work / UPPER)
        for relative in (*node.PLUMBING, *NOT_KEPT):
            _remove(work / UPPER / relative)
        meta = {
            "release": release,
            "gpus": lab.gpus,
            "node": node_name,
            "digest": digest(),
            "taken_at": time.time(),
        }
        (work / META).write_text(json.dumps(meta, indent=2) + "\n")

    locks.build_once(target, target.with_suffix(".lock"), keep)
    prune(keep_only=target)
    return target


def prune(keep_only: Path | None = None) -> list[Path]:
    """Remove snapshots unused for STALE_AFTER_S, and those of all but the OTHER_DIGESTS_KEPT most
    recently used digests besides `keep_only`'s (never `keep_only`); returns what went."""
    root = rootfs.cache_dir() / "snapshots"
    candidates = [c for c in sorted(root.glob("*/")) if (c / META).is_file()] if root.is_dir() else []
    current = _digest_of(keep_only) if keep_only else None
    last_used: dict[str, float] = {}
    for candidate in candidates:
        used = (candidate / META).stat().st_mtime
        last_used[_digest_of(candidate)] = max(used, last_used.get(_digest_of(candidate), 0.0))
    others = sorted((d for d in last_used if d != current), key=last_used.__getitem__, reverse=True)
    kept_digests = {current, *others[:OTHER_DIGESTS_KEPT]}
    gone = []
    for candidate in candidates:
        if candidate == keep_only:
            continue
        stale = time.time() - (candidate / META).stat().st_mtime > STALE_AFTER_S
        if stale or _digest_of(candidate) not in kept_digests:
            shutil.rmtree(candidate, ignore_errors=True)
            gone.append(candidate)
    return gone


def _digest_of(snapshot: Path) -> str:
    return snapshot.name.rsplit("-", 1)[-1]


def _copy_tree(source: Path, target: Path) -> None:
    """cp -a: whiteouts (0:0 character devices), owners, modes and the trusted.overlay.* xattrs."""
    processes.run(
        [tool("cp"), "-a", "--preserve=all", str(source), str(target)],
        what=f"copy {source} into the snapshot",
    )


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file() or path.is_char_device():
        path.unlink()
    elif path.is_dir():
        subprocess.run([tool("rm"), "-rf", "--one-file-system", str(path)], check=True)
