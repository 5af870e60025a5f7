"""Callback plugin of r9700ctl's own runs: builtin module payloads kept from one run to the next.

r9700ctl (r9700ctl/ansiballz_cache.py) names a private directory in R9700CTL_ANSIBALLZ_CACHE and
puts this file's directory on ANSIBLE_CALLBACK_PLUGINS; the plugin needs no enabling. It works in
the ansible-playbook that runs, on the ansible-core that builds the payloads:
  * the payloads live in <directory>/<digest>, the digest of this Python and of ansible-core (its
    version, where it is installed, and the size and time of every file under its modules,
    module_utils and payload builder): another ansible-core, or a changed one, never reads them;
  * at the start of the run every kept payload is pinned into the run's own cache
    (C.DEFAULT_LOCAL_TMP/ansiballz_cache, where ansible-playbook looks before it builds one): a hard
    link, or a copy, checked there (a regular file of this user), so nothing that happens to the
    kept directory later in the run reaches what the run loads;
  * at the end of the run the payloads it built are copied back (a temporary file, synced, then
    renamed into place).
Only ansible.builtin's modules (names "ansible.modules.*") are kept: the digest covers exactly their
sources. Where the run could build them from other sources (module_utils directories of the
user's, of a playbook or a role, which Ansible searches before its own; looked for when the run
starts and again before anything is kept), nothing is kept or used.
Anything unexpected leaves the run as Ansible runs it: nothing here fails a run.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import sys
import tempfile

import ansible
from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import module_utils_loader
from ansible.release import __version__ as ansible_version
from ansible.utils.display import Display

DOCUMENTATION = """
name: r9700ctl_ansiballz_cache
type: aggregate
short_description: keeps the builtin module payloads of r9700ctl's runs from one run to the next
description:
  - Pins the payloads kept under R9700CTL_ANSIBALLZ_CACHE into the run's cache, copies new ones back.
"""

ENV = "R9700CTL_ANSIBALLZ_CACHE"
# The payload file names ansible-core 2.19 gives: "<module fqn>-<compression>-<extensions>".
KEPT_PREFIX = "ansible.modules."
# ansible-core's files a builtin payload is built from, relative to its package directory.
ANSIBLE_TREES = ("modules", "module_utils", "_internal/_ansiballz")
ANSIBLE_FILES = ("release.py", "executor/module_common.py")
# Digest directories of other ansible-cores kept beside the current one (other venvs, checkouts).
KEEP_OTHERS = 4
display = Display()


def digest(ansible_dir: str) -> str:
    """What every kept payload of this ansible-core depends on, as a short hex digest."""
    lines = [sys.version, ansible_version, ansible_dir]
    for tree in ANSIBLE_TREES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ansible_dir, tree)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in filenames:
                path = os.path.join(dirpath, name)
                info = os.stat(path)
                lines.append(f"{os.path.relpath(path, ansible_dir)} {info.st_size} {info.st_mtime_ns}")
    for name in ANSIBLE_FILES:
        info = os.stat(os.path.join(ansible_dir, name))
        lines.append(f"{name} {info.st_size} {info.st_mtime_ns}")
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:16]


def private_dir(path: str) -> bool:
    """A directory of this user's that nobody else may write into, and not a link."""
    info = os.lstat(path)
    return (
        os.path.isdir(path)
        and not os.path.islink(path)
        and info.st_uid == os.geteuid()
        and not info.st_mode & 0o077
    )


def keepable(name: str) -> bool:
    # Not Ansible's lock files, nor a file half written (its "-part", a temporary file of ours).
    return name.startswith(KEPT_PREFIX) and not name.endswith((".lock", "-part", ".tmp"))


def foreign_module_utils() -> list[str]:
    """module_utils directories other than ansible-core's own that this run searches (they come first)."""
    own = os.path.realpath(os.path.join(os.path.dirname(ansible.__file__), "module_utils"))
    # What recursive_finder searches (ansible/executor/module_common.py), Ansible's own directory last.
    paths = module_utils_loader._get_paths(subdirs=False)
    return [p for p in paths if os.path.isdir(p) and os.path.realpath(p) != own]


def pin(source: str, target: str) -> None:
    """target: the kept payload's bytes, which no later change of the kept directory reaches."""
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        descriptor = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as kept, open(target, "xb") as copy:
            shutil.copyfileobj(kept, copy)
    info = os.lstat(target)
    if (
        not os.path.isfile(target)
        or os.path.islink(target)
        or info.st_uid != os.geteuid()
        or not info.st_size
    ):
        os.unlink(target)  # not this user's regular file (or empty): Ansible builds its own


def prune(base: str, current: str) -> None:
    others = [os.path.join(base, n) for n in os.listdir(base) if os.path.join(base, n) != current]
    others = [p for p in others if os.path.isdir(p) and not os.path.islink(p)]
    others.sort(key=os.path.getmtime, reverse=True)
    for old in others[KEEP_OTHERS:]:
        shutil.rmtree(old, ignore_errors=True)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "r9700ctl_ansiballz_cache"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self) -> None:
        super().__init__()
        self._kept = ""
        self._run_cache = os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache")
        base = os.environ.get(ENV, "")
        try:
            if not base or not os.path.isabs(base) or not private_dir(base) or foreign_module_utils():
                return
            kept = os.path.join(base, digest(os.path.dirname(ansible.__file__)))
            os.makedirs(kept, mode=0o700, exist_ok=True)
            if not private_dir(kept):
                return
            os.utime(kept)  # the newest digests are the ones kept
            prune(base, kept)
            os.makedirs(self._run_cache, exist_ok=True)
        except OSError as exc:
            display.vvv(f"r9700ctl: no kept module payloads for this run ({exc})")
            return
        self._kept = kept
        for name in os.listdir(kept):
            if keepable(name):
                try:
                    pin(os.path.join(kept, name), os.path.join(self._run_cache, name))
                except OSError as exc:
                    display.vvv(f"r9700ctl: kept module payload {name} not used ({exc})")

    def v2_playbook_on_stats(self, stats: object) -> None:
        # A role or playbook with module_utils of its own may have joined the search since the start.
        if not self._kept or foreign_module_utils():
            return
        for name in os.listdir(self._run_cache):
            built = os.path.join(self._run_cache, name)
            kept = os.path.join(self._kept, name)
            if not keepable(name) or os.path.islink(built) or os.path.exists(kept):
                continue
            try:
                descriptor, part = tempfile.mkstemp(dir=self._kept, suffix=".tmp")
                try:
                    with os.fdopen(descriptor, "wb") as target, open(built, "rb") as source:
                        shutil.copyfileobj(source, target)
                        target.flush()
                        os.fsync(target.fileno())
                    os.replace(part, kept)
                finally:
                    if os.path.exists(part):
                        os.unlink(part)
            except OSError as exc:
                display.vvv(f"r9700ctl: module payload {name} not kept ({exc})")
