"""locks.build_once: the lab's host-wide caches (root file system, registry) appear whole or not at all."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from r9700ctl.lab import locks


def test_a_failed_build_leaves_nothing_and_the_next_call_builds_again(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "rootfs-x"

    def broken(work: Path) -> None:
        (work / "half").write_text("written before the failure")
        raise RuntimeError("debootstrap failed")

    with pytest.raises(RuntimeError):
        locks.build_once(target, tmp_path / "cache" / "rootfs-x.lock", broken)
    assert not target.exists()

    assert locks.build_once(
        target, tmp_path / "cache" / "rootfs-x.lock", lambda w: (w / "ok").write_text("1")
    )
    assert sorted(p.name for p in target.iterdir()) == ["ok"]  # the broken build's scratch is gone


def test_parallel_callers_build_once_and_both_see_the_result(tmp_path: Path) -> None:
    target, lock = tmp_path / "registry-1", tmp_path / "registry-1.lock"
    builds: list[int] = []

    def slow(work: Path) -> None:
        builds.append(1)
        time.sleep(0.3)
        (work / "storage").mkdir()

    results: list[bool] = []
    threads = [
        threading.Thread(target=lambda: results.append(locks.build_once(target, lock, slow)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert builds == [1] and sorted(results) == [False, True]
    assert (target / "storage").is_dir()
