"""Action plugin: bring a scratch directory's results to the controller, keep one on the node, remove it.

What the copy (a record written on the node), fetch (once per file), stat, file and copy
(remote_src) modules did in up to seven tasks (a dozen Python module runs on the node per node
and per validation phase), in one shell command over the connection Ansible already holds: each
present output printed in base64, the kept file copied into place (a temporary name, then
renamed), the directory removed. The record (the agent's exit status and output tail) is written
on the controller directly: it never needed the node.

Outputs that are not there are left out, as fetch with fail_on_missing: false did; the result
says which were fetched. Only a directory r9700ctl.nodes.r9700_scratch_stage made is removed.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.r9700ctl.nodes.plugins.plugin_utils.r9700ctl_scratch import (
    FILE_NAME,
    is_scratch,
    print_file,
    printed_files,
)

ARGUMENT_SPEC = {
    "path": {"type": "str", "required": True},
    "outputs": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {"src": {"type": "str", "required": True}, "dest": {"type": "path", "required": True}},
    },
    # Plain names of the directory fetched into one controller directory (`into`/<name>).
    "names": {"type": "list", "elements": "str", "default": []},
    "into": {"type": "path"},
    "record": {"type": "dict"},
    "record_dest": {"type": "path"},
    "keep": {
        "type": "dict",
        "options": {"src": {"type": "str", "required": True}, "dest": {"type": "str", "required": True}},
    },
    "remove": {"type": "bool", "default": True},
}


class ActionModule(ActionBase):
    _supports_check_mode = False
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        host = task_vars.get("inventory_hostname", "this host")
        path = args["path"]
        if not is_scratch(path):  # anything else is refused before `rm -rf` could reach it
            raise AnsibleActionFail(
                f"{path!r} is not a scratch directory r9700_scratch_stage made; nothing removed"
            )
        if args["names"] and not args["into"]:
            raise AnsibleActionFail("names need into, the controller directory they are fetched into")
        outputs = args["outputs"] + [
            {"src": name, "dest": os.path.join(args["into"], name)} for name in args["names"]
        ]
        keep = args["keep"]
        names = [o["src"] for o in outputs] + ([keep["src"]] if keep else [])
        bad = [name for name in names if not FILE_NAME.match(name)]
        if bad:
            raise AnsibleActionFail(f"outputs are plain names in the scratch directory, not {bad[0]!r}")
        if keep and not (keep["dest"].startswith("/") and FILE_NAME.match(os.path.basename(keep["dest"]))):
            raise AnsibleActionFail(
                f"keep.dest must be an absolute file path on the node, not {keep['dest']!r}"
            )
        if (args["record"] is None) != (args["record_dest"] is None):
            raise AnsibleActionFail("record and record_dest go together")

        # The record first: it says how the run ended even where the node cannot be read now.
        if args["record"] is not None:
            _write(
                Path(args["record_dest"]),
                (json.dumps(args["record"], indent=4, sort_keys=True) + "\n").encode(),
            )

        out = self._low_level_execute_command(_script(path, outputs, keep, args["remove"]), sudoable=True)
        # What was read is written even where a later step (the kept copy, the removal) failed.
        found = printed_files(out.get("stdout") or "")
        fetched = []
        for output in outputs:
            if output["src"] in found:
                _write(Path(output["dest"]), found[output["src"]])
                fetched.append(output["src"])
        if out.get("rc") != 0:
            lines = (out.get("stderr") or out.get("stdout") or "").strip().splitlines()
            why = lines[-1] if lines else "no output"
            rc = out.get("rc")
            raise AnsibleActionFail(f"{host}: could not read the results in {path} (rc {rc}: {why})")
        result.update(changed=True, fetched=fetched, removed=path if args["remove"] else "")
        return result


def _script(path: str, outputs: list[dict], keep: dict | None, remove: bool) -> str:
    directory = shlex.quote(path)
    steps = [f"cd {directory} || exit 0"]  # already gone: nothing to read, nothing to remove
    steps.extend(print_file(name) for name in dict.fromkeys(o["src"] for o in outputs))
    if keep:
        src, dest = shlex.quote(keep["src"]), keep["dest"]
        folder, temporary = shlex.quote(os.path.dirname(dest) or "/"), shlex.quote(f"{dest}.r9700ctl-new")
        steps.append(
            f"if [ -f {src} ]; then mkdir -p {folder} && chmod 0755 {folder} && cp {src} {temporary} "
            f"&& chmod 0644 {temporary} && mv -f {temporary} {shlex.quote(dest)} || exit 5; fi"
        )
    if remove:
        steps.append(f"cd / && rm -rf {directory}")
    return "; ".join(steps)


def _write(dest: Path, data: bytes) -> None:
    """Atomically, as fetch does: a half-written result never stands for a whole one."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, dest)
    except OSError as exc:
        raise AnsibleActionFail(f"cannot write {dest} on the controller: {exc.strerror or exc}") from exc
