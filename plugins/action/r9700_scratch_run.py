"""Action plugin: run a program in a scratch directory r9700ctl.nodes.r9700_scratch_stage made, and wait.

What the command module started in the background (async_wrapper and the command module: two
Python runs on the node), wait_for watched and async_status read (two more), in one shell
command over the connection Ansible already holds: ``cd DIR; (exec env NAME=VALUE ... ARGV)``
with its output in two files of the directory, printed back in base64 when it ends.
The program's own wall clock is in its argv (``timeout --kill-after=K T ...``, as the role has
always given it); the task's ``timeout`` keyword is the controller's backstop.

Returns what the command module returned and the role reads: ``rc``, ``stdout``, ``stderr``, their
``_lines``, and ``msg`` ("non-zero return code" where rc is not 0; Ansible then fails the task, as
for the command module, unless ``failed_when`` says otherwise: the role's verdict is its own).
"""

from __future__ import annotations

import re
import shlex

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.r9700ctl.nodes.plugins.plugin_utils.r9700ctl_scratch import (
    is_scratch,
    print_file,
    printed_files,
)

ARGUMENT_SPEC = {
    "path": {"type": "str", "required": True},
    "argv": {"type": "list", "elements": "str", "required": True},
    "env": {"type": "dict", "default": {}},
}
# Where the program's output waits in the scratch directory until it is printed back.
OUTPUT = {"stdout": ".r9700ctl-stdout", "stderr": ".r9700ctl-stderr"}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ActionModule(ActionBase):
    _supports_check_mode = False
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        if not is_scratch(args["path"]):
            raise AnsibleActionFail(f"{args['path']!r} is not a scratch directory r9700_scratch_stage made")
        if not args["argv"]:
            raise AnsibleActionFail("argv is empty: nothing to run")
        bad = [name for name in args["env"] if not ENV_NAME.match(str(name))]
        if bad:
            raise AnsibleActionFail(f"{bad[0]!r} is not an environment variable's name")
        assignments = [shlex.quote(f"{name}={value}") for name, value in args["env"].items()]
        program = " ".join(["exec", "env", *assignments, *map(shlex.quote, args["argv"])])
        # Its output goes to files, read back after it ends: under become the command runs on a
        # terminal (ssh -tt), which would merge stderr into stdout and make the program's stdout a
        # tty (colours, prompts); the command module gave it pipes and no input, and so does this.
        command = "; ".join(
            [
                f"cd {shlex.quote(args['path'])} || exit 3",
                f"({program}) >{OUTPUT['stdout']} 2>{OUTPUT['stderr']} </dev/null",
                "rc=$?",
                *(print_file(name, label) for label, name in OUTPUT.items()),
                f"rm -f {OUTPUT['stdout']} {OUTPUT['stderr']}",
                'exit "$rc"',
            ]
        )
        out = self._low_level_execute_command(command, sudoable=True)
        printed = printed_files(out.get("stdout") or "")
        if set(printed) != set(OUTPUT):  # never got as far as running it (cd, a shell error)
            printed = {"stdout": b"", "stderr": (out.get("stderr") or out.get("stdout") or "").encode()}
        stdout, stderr = (printed[label].decode("utf-8", "replace") for label in ("stdout", "stderr"))
        rc = out.get("rc")
        result.update(
            changed=False,
            rc=rc,
            stdout=stdout,
            stderr=stderr,
            stdout_lines=stdout.splitlines(),
            stderr_lines=stderr.splitlines(),
            msg="" if rc == 0 else "non-zero return code",
        )
        return result
