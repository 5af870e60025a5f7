"""Callback plugin of r9700ctl's own runs: module payloads kept from one run to the next.

r9700ctl (r9700ctl/ansiballz_cache.py) names a directory of kept payloads in R9700CTL_ANSIBALLZ_CACHE
and puts this file's directory on ANSIBLE_CALLBACK_PLUGINS; it needs no enabling. At the start of
the run it links every kept payload into the run's own cache (C.DEFAULT_LOCAL_TMP/ansiballz_cache,
where ansible-playbook looks before it builds one); at the end of the run it copies the payloads
this run built back. Only ansible.builtin's and r9700ctl.nodes' modules are kept: the directory's
name is a digest of exactly their sources. Anything unexpected (the variable unset, a file not
this user's) leaves the run as Ansible runs it: nothing here ever fails a run.
"""

from __future__ import annotations

import os

from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

DOCUMENTATION = """
name: r9700ctl_ansiballz_cache
type: aggregate
short_description: keeps the module payloads of r9700ctl's runs from one run to the next
description:
  - Links the payloads kept in R9700CTL_ANSIBALLZ_CACHE into the run's cache, copies new ones back.
"""

ENV = "R9700CTL_ANSIBALLZ_CACHE"
# The payload file names ansible-core 2.19 gives: "<module fqn>-<compression>-<extensions>".
KEPT_PREFIXES = ("ansible.modules.", "ansible_collections.r9700ctl.nodes.plugins.modules.")
display = Display()


def _keepable(name: str) -> bool:
    # Not Ansible's lock files, nor a file half written (its "-part", this plugin's ".part").
    return name.startswith(KEPT_PREFIXES) and not name.endswith((".lock", "-part", ".part"))


def _own_file(path: str) -> bool:
    info = os.lstat(path)
    return os.path.isfile(path) and not os.path.islink(path) and info.st_uid == os.geteuid()


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "r9700ctl_ansiballz_cache"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self) -> None:
        super().__init__()
        self._kept = os.environ.get(ENV, "")
        self._run_cache = os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache")
        if not self._kept:
            return
        try:
            os.makedirs(self._run_cache, exist_ok=True)
            for name in os.listdir(self._kept):
                source = os.path.join(self._kept, name)
                if _keepable(name) and _own_file(source):
                    os.symlink(source, os.path.join(self._run_cache, name))
        except OSError as exc:
            display.vvv(f"r9700ctl: no kept module payloads for this run ({exc})")

    def v2_playbook_on_stats(self, stats: object) -> None:
        if not self._kept:
            return
        try:
            for name in os.listdir(self._run_cache):
                built = os.path.join(self._run_cache, name)
                kept = os.path.join(self._kept, name)
                if not _keepable(name) or os.path.islink(built) or os.path.exists(kept):
                    continue
                part = f"{kept}.{os.getpid()}.part"
                with open(built, "rb") as source, open(part, "wb") as target:
                    target.write(source.read())
                os.replace(part, kept)
        except OSError as exc:
            display.vvv(f"r9700ctl: module payloads not kept ({exc})")
