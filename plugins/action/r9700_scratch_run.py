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

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure, AnsibleError
from ansible.plugins.action import ActionBase
from ansible_collections.r9700ctl.nodes.plugins.plugin_utils.r9700ctl_scratch import (
    MARK,
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
        # The play's and role's `environment:` (a proxy ...), then the task's own variables.
        inherited = self._compute_environment_string()
        assignments = [shlex.quote(f"{name}={value}") for name, value in args["env"].items()]
        program = " ".join(
            ["exec", "env", *filter(None, [inherited]), *assignments, *map(shlex.quote, args["argv"])]
        )
        # Its output goes to files, read back after it ends: a command sent without standard-input
        # data may run on a terminal (ssh -tt, whenever become could ask a password), which would
        # merge stderr into stdout and make the program's stdout a tty (colours, prompts); the
        # command module gave it pipes and no input, and so does this. Its exit status comes back
        # as a printed line and the command exits 0: ssh's own status 255 means "connection
        # failed" to Ansible, so a program exiting 255 must not be ssh's exit status.
        command = "; ".join(
            [
                f"cd {shlex.quote(args['path'])} || exit 1",
                f"rm -f {OUTPUT['stdout']} {OUTPUT['stderr']}",  # a run cut short left them
                f"({program}) >{OUTPUT['stdout']} 2>{OUTPUT['stderr']} </dev/null",
                "rc=$?",
                *(print_file(name, label) for label, name in OUTPUT.items()),
                f"rm -f {OUTPUT['stdout']} {OUTPUT['stderr']}",
                f'printf "%s\\n" {shlex.quote(MARK + "rc")} "$rc"',
            ]
        )
        try:
            out = self._low_level_execute_command(command, sudoable=True)
        except AnsibleConnectionFailure:
            raise  # unreachable stays unreachable
        except AnsibleError as exc:  # become could not (no sudo, a password needed): no rc, as a module
            return {
                **result,
                "failed": True,
                "changed": False,
                "msg": str(exc).splitlines()[0] if str(exc) else repr(exc),
            }
        said = out.get("stdout") or ""
        printed = printed_files(said)
        rc_line = _rc_line(said)
        if rc_line is None or not set(OUTPUT) <= set(printed):  # it never ran, or its output was lost
            lines = (out.get("stderr") or said or "").strip().splitlines()
            why = lines[-1] if lines else "no output"
            raise AnsibleActionFail(
                f"{args['argv'][0]} in {args['path']}: no exit status came back (rc {out.get('rc')}: {why})"
            )
        stdout, stderr = (printed[label].decode("utf-8", "replace") for label in ("stdout", "stderr"))
        rc = rc_line
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


def _rc_line(said: str) -> int | None:
    """The exit status the command printed after its marker line; None when it never got there."""
    lines = [line.strip() for line in said.splitlines()]
    for index, line in enumerate(lines[:-1]):
        if line == MARK + "rc" and lines[index + 1].lstrip("-").isdigit():
            return int(lines[index + 1])
    return None
