"""Action plugin: run a program in a scratch directory r9700ctl.nodes.r9700_scratch_stage made, and wait.

What the command module started in the background (async_wrapper and the command module: two
Python runs on the node), wait_for watched and async_status read (two more), in one shell
command over the connection Ansible already holds: ``cd DIR && exec env NAME=VALUE ... ARGV``.
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

ARGUMENT_SPEC = {
    "path": {"type": "str", "required": True},
    "argv": {"type": "list", "elements": "str", "required": True},
    "env": {"type": "dict", "default": {}},
}
# r9700_scratch_stage's directories (r9700_scratch_collect.SCRATCH_PATH says the same).
SCRATCH_PATH = re.compile(r"^/(?:[^/\0]+/)*r9700ctl[-.][A-Za-z0-9-]*[.][A-Za-z0-9]{10}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ActionModule(ActionBase):
    _supports_check_mode = False
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        if not SCRATCH_PATH.match(args["path"]):
            raise AnsibleActionFail(f"{args['path']!r} is not a scratch directory r9700_scratch_stage made")
        if not args["argv"]:
            raise AnsibleActionFail("argv is empty: nothing to run")
        bad = [name for name in args["env"] if not ENV_NAME.match(str(name))]
        if bad:
            raise AnsibleActionFail(f"{bad[0]!r} is not an environment variable's name")
        assignments = [shlex.quote(f"{name}={value}") for name, value in args["env"].items()]
        command = " ".join(
            [
                "cd",
                shlex.quote(args["path"]),
                "&&",
                "exec",
                "env",
                *assignments,
                *map(shlex.quote, args["argv"]),
            ]
        )
        out = self._low_level_execute_command(command, sudoable=True)
        stdout, stderr = out.get("stdout") or "", out.get("stderr") or ""
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
