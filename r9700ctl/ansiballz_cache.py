"""The builtin module payloads Ansible builds, kept from one r9700ctl run to the next.

Before a module runs on a node, ansible-playbook builds its AnsiballZ payload on the controller:
it parses the module and every module_util it imports (ansible/executor/module_common.py,
recursive_finder) and zips them, about 0.1-0.2 CPU-s per module. It keeps what it built only in
the run's own local temporary directory (C.DEFAULT_LOCAL_TMP/ansiballz_cache), removed when the
run ends, so every run builds each module it uses again: a full provision of one node spends about
2 CPU-s of its 35 on it, and an upgrade in batches of one runs ansible-playbook once per batch.

r9700ctl names a directory of this user's cache (XDG_CACHE_HOME, else ~/.cache: r9700ctl/ansiballz)
in R9700CTL_ANSIBALLZ_CACHE; the callback plugin r9700ctl/ansible_callbacks/r9700ctl_ansiballz_cache.py,
inside the ansible-playbook that runs, keeps the payloads there under a digest of that ansible-core
and says which ones it keeps and why. The payloads are pickles that ansible-playbook loads: the
directory is this user's own and private (0700, not a link, its parent writable by nobody else),
or it is not used at all.
"""

from __future__ import annotations

import os
from pathlib import Path

# The variable the callback plugin reads, and the plugin's directory (ANSIBLE_CALLBACK_PLUGINS).
ENV = "R9700CTL_ANSIBALLZ_CACHE"
CALLBACK_DIR = Path(__file__).resolve().parent / "ansible_callbacks"


def _cache_base() -> Path:
    # XDG: a relative XDG_CACHE_HOME is invalid and ignored.
    configured = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(configured) if os.path.isabs(configured) else Path.home() / ".cache"
    return base / "r9700ctl" / "ansiballz"


def prepare() -> Path | None:
    """The directory of kept payloads, made if needed; None where it cannot be used safely (not
    this user's own and private, unwritable): the run then builds every payload as Ansible does."""
    directory = _cache_base()
    try:
        directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
        parent, own = directory.parent.lstat(), directory.lstat()
    except OSError:
        return None
    uid = os.geteuid()
    if directory.parent.is_symlink() or parent.st_uid != uid or parent.st_mode & 0o022:
        return None
    if directory.is_symlink() or own.st_uid != uid or own.st_mode & 0o077:
        return None
    return directory
