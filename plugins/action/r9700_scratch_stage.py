"""Action plugin: a private scratch directory on the node with the agent unpacked and given files in it.

What the tempfile, unarchive and copy modules did in three tasks (six Python module runs on the
node, a file transfer, seconds of CPU for each node and each validation phase), in two shell
commands over the connection Ansible already holds: ``mktemp -d`` and ``tar`` reading the
archive on standard input, then ``tar`` reading the given files. Nothing runs Python on the node,
so it works the same where the node's interpreter is not yet known.

Returns ``path``, the directory (mode 0700, owned by the user the task becomes), as the tempfile
module did; r9700ctl.nodes.r9700_scratch_collect fetches from it and removes it.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
import shlex
import tarfile
import time
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.r9700ctl.nodes.plugins.plugin_utils.r9700ctl_scratch import FILE_NAME, NAME_PREFIX

ARGUMENT_SPEC = {
    "archive": {"type": "path"},  # none: an empty directory (r9700_collect's)
    "prefix": {"type": "str", "default": "r9700ctl-scratch."},
    "files": {"type": "dict", "default": {}},
}
# The collect step removes only what SCRATCH_PATH matches: mktemp's ten random characters after
# this prefix.
PREFIX = re.compile(rf"^{NAME_PREFIX}$")


class ActionModule(ActionBase):
    _supports_check_mode = False  # it makes a directory: nothing to say without doing it
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        host = task_vars.get("inventory_hostname", "this host")
        if not PREFIX.match(args["prefix"]):
            raise AnsibleActionFail(
                f"prefix {args['prefix']!r} must look like r9700ctl-NAME. (letters, digits, -)"
            )
        bad = [name for name in args["files"] if not FILE_NAME.match(str(name))]
        if bad:
            raise AnsibleActionFail(f"file names must be plain names in the directory, not {bad[0]!r}")
        payload = None
        if args["archive"]:
            archive = Path(args["archive"])
            try:
                payload = archive.read_bytes()
            except OSError as exc:
                raise AnsibleActionFail(
                    f"cannot read the agent archive {archive}: {exc.strerror or exc}"
                ) from exc

        # mktemp's directory is 0700 whatever the umask; tar as root keeps the archive's modes
        # (r9700ctl/agentpack.py writes them). A failed unpack removes the directory it made. A
        # TMPDIR that is not absolute is not used (the directory could not be found again).
        template = shlex.quote(args["prefix"]) + "XXXXXXXXXX"
        make = (
            't="${TMPDIR:-/tmp}"; case "$t" in /*) ;; *) t=/tmp ;; esac; '
            f'd=$(mktemp -d "$t/"{template}) || exit 3; '
            + (
                'if tar -xzf {source} -C "$d" --no-same-owner; then printf "%s\\n" "$d"; '
                'else rc=$?; rm -rf "$d"; exit "$rc"; fi'
                if payload is not None
                else 'printf "%s\\n" "$d"'
            )
        )
        out = (
            self._reading(make, payload)
            if payload is not None
            else self._low_level_execute_command(make, sudoable=True)
        )
        lines = (out.get("stdout") or "").strip().splitlines()
        path = posixpath.normpath(lines[-1].strip()) if lines else ""  # TMPDIR=/tmp/ gives /tmp//name
        if out.get("rc") != 0 or not path.startswith("/"):
            raise AnsibleActionFail(
                f"{host}: could not unpack the agent in a scratch directory: {_last_line(out)}"
            )
        result["path"] = path
        result["changed"] = True
        if args["files"]:
            unpack = f"umask 077 && tar -xf {{source}} -C {shlex.quote(path)} --no-same-owner"
            given = self._reading(unpack, _tar_of(args["files"]))
            if given.get("rc") != 0:
                self._low_level_execute_command(f"rm -rf {shlex.quote(path)}", sudoable=True)
                raise AnsibleActionFail(
                    f"{host}: could not write {', '.join(args['files'])} in {path}: {_last_line(given)}"
                )
        return result

    def _reading(self, command: str, payload: bytes) -> dict:
        """`command` with {source} reading `payload`: standard input where the connection pipelines,
        else a copy in Ansible's remote temporary directory (become su, sudo with requiretty,
        pipelining off, paramiko: sending data on standard input fails there, as Ansible knows)."""
        if _pipelining(self._connection):
            return self._low_level_execute_command(
                command.replace("{source}", "-"), sudoable=True, in_data=payload
            )
        tmp = self._make_tmp_path()
        try:
            copy = self._connection._shell.join_path(tmp, "payload")
            self._transfer_data(copy, payload)
            self._fixup_perms2([tmp, copy], execute=False)
            return self._low_level_execute_command(
                command.replace("{source}", shlex.quote(copy)), sudoable=True
            )
        finally:
            self._remove_tmp_path(tmp, force=True)


def _pipelining(connection: object) -> bool:
    enabled = getattr(connection, "is_pipelining_enabled", None)
    try:
        return bool(enabled()) if callable(enabled) else False
    except Exception:  # a connection plugin's own check failing: copying is always safe
        return False


def _tar_of(files: dict[str, object]) -> bytes:
    """An uncompressed tar of name -> text (mode 0600), for `tar -xf -` on the node."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in files.items():
            # ansible-core before 2.19 turns a template's text that looks like a dict back into one
            # (copy's content does the same json.dumps for it).
            text = content if isinstance(content, str) else json.dumps(content)
            data = text.encode("utf-8")
            info = tarfile.TarInfo(str(name))
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _last_line(out: dict) -> str:
    lines = (out.get("stderr") or out.get("stdout") or "").strip().splitlines()
    return f"rc {out.get('rc')}: {lines[-1] if lines else 'no output'}"
