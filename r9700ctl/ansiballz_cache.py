"""The module payloads Ansible builds, kept from one r9700ctl run to the next.

Before a module runs on a node, ansible-playbook builds its AnsiballZ payload on the controller:
it parses the module and every module_util it imports (ansible/executor/module_common.py,
recursive_finder) and zips them, about 0.1-0.2 CPU-s per module. It keeps what it built only in
the run's own local temporary directory (C.DEFAULT_LOCAL_TMP/ansiballz_cache), removed when the
run ends, so every run builds each module it uses again: a full provision of one node spends about
2 CPU-s of its 35 on it, and an upgrade in batches of one runs ansible-playbook once per batch.

r9700ctl keeps those payloads in a directory of this user's cache, named by a digest of what they
are built from: this Python, ansible-core (its version, where it is installed and the size and
time of every file under its modules, module_utils and the payload builder) and this installation's
collection modules. Any change to those gives a new directory; the newest few are kept. The
callback plugin r9700ctl/ansible_callbacks/r9700ctl_ansiballz_cache.py links the kept payloads into
each run's directory at its start and copies the new ones back at its end; only payloads of
ansible.builtin modules and of r9700ctl.nodes (what the digest covers) are kept, never a site's
own modules or another collection's.

The payloads are pickles that ansible-playbook loads: the directory is this user's own (0700,
owned by the user, no link), or it is not used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

from r9700ctl.paths import collection_root

# The variable the callback plugin reads: the directory of this run's kept payloads.
ENV = "R9700CTL_ANSIBALLZ_CACHE"
CALLBACK_DIR = Path(__file__).resolve().parent / "ansible_callbacks"
# Directories of earlier digests kept beside the current one (another checkout, another venv).
KEEP = 4
# ansible-core's files a payload is built from, relative to its package directory.
ANSIBLE_TREES = ("modules", "module_utils", "_internal/_ansiballz")
ANSIBLE_FILES = ("release.py", "executor/module_common.py")
COLLECTION_TREES = ("plugins/modules", "plugins/module_utils")


def _cache_base() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "r9700ctl" / "ansiballz"


def _stat_lines(root: Path, rel_to: Path) -> list[str]:
    """'path size mtime_ns' of every file below root (nothing when root is absent)."""
    lines = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            path = Path(dirpath) / name
            info = path.stat()
            lines.append(f"{path.relative_to(rel_to)} {info.st_size} {info.st_mtime_ns}")
    return lines


def digest(ansible_dir: Path, collection: Path) -> str:
    """What every kept payload depends on, as a short hex digest."""
    from ansible.release import __version__ as ansible_version

    lines = [sys.version, ansible_version, str(ansible_dir), str(collection)]
    for tree in ANSIBLE_TREES:
        lines += _stat_lines(ansible_dir / tree, ansible_dir)
    for name in ANSIBLE_FILES:
        info = (ansible_dir / name).stat()
        lines.append(f"{name} {info.st_size} {info.st_mtime_ns}")
    for tree in COLLECTION_TREES:
        lines += _stat_lines(collection / tree, collection)
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:16]


def _own_private_dir(path: Path) -> bool:
    info = path.lstat()
    private = info.st_uid == os.geteuid() and not info.st_mode & 0o077
    return private and path.is_dir() and not path.is_symlink()


def _prune(base: Path, current: Path) -> None:
    others = [p for p in base.iterdir() if p != current and p.is_dir() and not p.is_symlink()]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def prepare() -> Path | None:
    """This run's directory of kept payloads, made if needed; None where it cannot be used safely
    (not this user's own, unwritable, ansible-core not found): the run then builds as Ansible does."""
    spec = importlib.util.find_spec("ansible")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        base = _cache_base()
        path = base / digest(Path(next(iter(spec.submodule_search_locations))), collection_root())
        base.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        for directory in (base, path):
            directory.mkdir(mode=0o700, exist_ok=True)
            if not _own_private_dir(directory):
                return None
        os.utime(path)  # the newest digests are the ones kept
        _prune(base, path)
    except (OSError, ImportError):
        return None
    return path
