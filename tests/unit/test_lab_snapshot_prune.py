"""The lab's provisioned-node snapshots do not fill the disk (r9700ctl/lab/snapshot.py, prune).

A day of changes made a new set of snapshots per digest (about 1.5 GB each), all kept for 24 hours,
until the lab nodes' preflight refused them for want of space on /.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from r9700ctl.lab import snapshot


def _made(root: Path, name: str, used_s_ago: float) -> Path:
    where = root / "snapshots" / name
    where.mkdir(parents=True)
    meta = where / snapshot.META
    meta.write_text(json.dumps({"name": name}))
    when = time.time() - used_s_ago
    os.utime(meta, (when, when))
    return where


def test_only_the_current_and_the_two_most_recently_used_other_digests_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("R9700CTL_LAB_CACHE", str(tmp_path))
    current = _made(tmp_path, "auto-4gpu-node1-cccccccccccccccc", 0)
    # Each digest has snapshots of two releases; 6.4.1's name has dots, as the real ones do.
    ages = {
        "aaaaaaaaaaaaaaaa": 60,
        "bbbbbbbbbbbbbbbb": 120,
        "dddddddddddddddd": 3600,
        "eeeeeeeeeeeeeeee": 7200,
    }
    for digest, age in ages.items():
        _made(tmp_path, f"auto-4gpu-node1-{digest}", age)
        _made(tmp_path, f"6.4.1-1gpu-node1-{digest}", age + 1)
    stale = _made(tmp_path, "auto-4gpu-node2-cccccccccccccccc", snapshot.STALE_AFTER_S + 60)
    gone = snapshot.prune(keep_only=current)
    left = sorted(p.name for p in (tmp_path / "snapshots").iterdir())
    assert left == sorted(
        [current.name]
        + [
            f"{release}-node1-{d}"
            for d in ("aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb")
            for release in ("auto-4gpu", "6.4.1-1gpu")
        ]
    )
    # The current digest's unused snapshot of another node still goes after a day.
    assert stale in gone and len(gone) == 5
