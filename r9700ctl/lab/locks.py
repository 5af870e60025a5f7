"""Host-wide locks: parallel `lab up`/`lab down` (parallel test sessions) must not race."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def lab_ids() -> Iterator[None]:
    """Held while a lab id is chosen and its bridge made, and while `down` frees one and checks.

    Without it a parallel `up` could take an id the moment `down` released it, and `down`'s
    final check would report the newcomer's bridge as its own leftover.
    """
    with _host_lock("r9700ctl-lab.lock"):
        yield


@contextlib.contextmanager
def directory(path: Path) -> Iterator[None]:
    """One `up`, `down` or `add_node` at a time per lab directory (two terminals, one DIR)."""
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    with _host_lock(f"r9700ctl-lab-{digest}.lock"):
        yield


@contextlib.contextmanager
def _host_lock(name: str) -> Iterator[None]:
    # In /run/lock (tmpfs): never deleted while in use, gone after a reboot.
    lock_dir = Path("/run/lock") if Path("/run/lock").is_dir() else Path("/tmp")
    with open(lock_dir / name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_once(target: Path, lock: Path, build: Callable[[Path], None]) -> bool:
    """Make the directory `target` once per host; True when this call built it.

    `build` fills a scratch directory that is renamed to `target`, so its presence means done; a
    parallel caller waits on `lock`, then uses what the first one made.
    """
    if target.is_dir():
        return False
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if target.is_dir():
            return False
        work = target.with_name(target.name + ".tmp")
        if work.exists():
            shutil.rmtree(work)  # an interrupted earlier build
        work.mkdir(parents=True)
        build(work)
        os.replace(work, target)
    return True
