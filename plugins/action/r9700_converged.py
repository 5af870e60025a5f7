"""Action plugin: is this node as the last complete provision left it? (runs on the controller).

``mode: check`` computes the key of what this run is asked to do (r9700ctl/converge.py) and asks
the node, with one Python script on stdin (r9700ctl/agent/converged.py), for the key it recorded
and for what differs between the node now and what that run left. In provision that question
rides on preflight's node call moments before (``observed``: its registered result's
``converged_observed``, for the same managed paths), so the step makes no node call of its own.
The result is the host fact ``r9700_converged``: ``converged`` (same key, no difference),
``reason`` (one line: why it is, or the first differences and why not) and ``facts`` (what that
run reported: r9700_versions, r9700_containers_status), so a converged node is reported as a full
run would report it.

The verdict is final here (roles/r9700_lifecycle/tasks/converged.yml only says it and ends the
play for a converged node): ``skip_converged: false`` (provision --full) runs every role all the
same, and so does a play that also runs roles that are not r9700ctl's (a site play of its own,
whose inputs the check does not know: ending the play would skip them). A converged node also
gets the facts a full run would report (r9700_versions, r9700_containers_status, saying that the
smoke check ran then and not now, and r9700_reboot_pending false).

``mode: record`` writes the record for the run that is ending (the key, what the node now is, the
facts to report next time); changed only when the record differs from the last one.
"""

from __future__ import annotations

import json
import re
import time

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.r9700ctl.nodes.plugins.plugin_utils.r9700ctl_package import preload, require

NODE_SCRIPT = "r9700ctl.agent.converged"
# converge.content_digest hashes the collection and the package: once, not once per host
preload(
    ("r9700ctl.agentpack", "r9700ctl.converge", "r9700ctl.agent.nodefacts"),
    (NODE_SCRIPT,),
    ("r9700ctl.converge:content_digest",),
)

ARGUMENT_SPEC = {
    "mode": {"type": "str", "choices": ["check", "record"], "required": True},
    "managed": {"type": "dict", "required": True},
    "image": {"type": "str", "default": ""},
    "facts": {"type": "dict", "default": {}},
    # record: the key the check computed at the start of this run (the roles set facts since).
    "key": {"type": "str", "default": ""},
    "python": {"type": "str", "default": "python3"},
    # check: false runs every role whatever the check finds (r9700_lifecycle_skip_converged, --full).
    # Raw here, converted in run(): provision imports this step by its own entry point, which has no
    # argument check, so a bad value is refused under the variable's own name (skip_converged()).
    "skip_converged": {"type": "raw", "default": True},
    # check: the answer preflight's node call brought for the same managed paths moments before
    # (its registered result's converged_observed), used instead of asking the node again.
    "observed": {"type": "raw", "default": None},
}
# How old preflight's answer may be to stand for this check (it is made moments before, in the same
# play; a registered result lives as long as the ansible-playbook run).
OBSERVED_FRESH_S = 600
# The roles of this collection, by their short or full name: a play of nothing else may end early.
OWN_ROLE = re.compile(r"^(r9700ctl[.]nodes[.])?r9700_")


class ActionModule(ActionBase):
    _supports_check_mode = True  # check only reads; record honours check mode (it writes nothing)
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        agentpack, converge = require(AnsibleActionFail, "r9700ctl.agentpack", "r9700ctl.converge")
        host = task_vars.get("inventory_hostname", "this host")
        skip = skip_converged(args["skip_converged"], host)
        if args["mode"] == "record":
            if not args["key"]:
                raise AnsibleActionFail(
                    f"{host}: record needs the key the check computed (r9700_converged.key)"
                )
            key = args["key"]
        else:
            variables = {
                name: self._templar.template(value)
                for name, value in task_vars.items()
                if (name.startswith("r9700_") and name not in converge.NOT_INPUTS)
                or name in converge.PLAY_VARS
            }
            variables["ansible_managed"] = C.DEFAULT_MANAGED_STR
            key = converge.key(variables)
        node_args = {"mode": args["mode"], "managed": args["managed"], "key": key}
        if args["mode"] == "record":
            node_args.update(image=args["image"], facts=args["facts"], recorded_at=time.time())
            node_args["dry_run"] = bool(self._task.check_mode)
        python = args["python"]
        if python.startswith("auto"):  # Ansible's interpreter discovery keywords
            python = "python3"
        # The check preflight's node call made moments ago in this play, for these managed paths;
        # else (a play without preflight, record mode) the node is asked here.
        observed = args["observed"] if isinstance(args["observed"], dict) else {}
        fresh = time.time() - float(observed.get("at") or 0) < OBSERVED_FRESH_S
        if args["mode"] == "check" and observed.get("managed") == args["managed"] and fresh:
            answer = observed.get("answer") or {}
        else:
            command, script = agentpack.stdin_invocation(NODE_SCRIPT, node_args, python=python)
            answer = self._ask_node(command, script)
        if "error" in answer:
            raise AnsibleActionFail(f"{host}: the converged check could not run: {answer['error']}")
        if args["mode"] == "record":
            result["changed"] = bool(answer.get("changed"))
            result["observed"] = answer.get("observed", 0)
            return result
        converged, reason = verdict(answer, key)
        refreshed = ((task_vars.get("r9700_preflight") or {}).get("facts") or {}).get("apt_update") or {}
        if converged and refreshed.get("ok") is False:  # what the mirror offers now is unknown
            why = refreshed.get("detail") or "apt-get update failed"
            converged, reason = False, f"not converged: apt could not refresh its lists ({why})"
        other_roles = [r for r in task_vars.get("ansible_play_role_names") or [] if not OWN_ROLE.match(r)]
        converged, reason = final(converged, reason, skip, other_roles)
        recorded = answer.get("facts") or {}
        result["ansible_facts"] = {
            "r9700_converged": {"converged": converged, "reason": reason, "facts": recorded, "key": key},
            **(reported(recorded) if converged else {}),
        }
        result["changed"] = False
        result["msg"] = reason
        return result

    def _ask_node(self, command: str, script: bytes) -> dict:
        """The node script's answer, or {"error": its last line} when it gave none."""
        out = self._low_level_execute_command(command, sudoable=True, in_data=script)
        try:
            answer = json.loads(out.get("stdout") or "")
        except ValueError:
            lines = (out.get("stderr") or out.get("stdout") or "no output").strip().splitlines()
            return {"error": (lines or ["?"])[-1]}
        if out.get("rc") != 0 and "error" not in answer:
            return {"error": f"rc {out.get('rc')}"}
        return answer


def skip_converged(value: object, host: str) -> bool:
    """r9700_lifecycle_skip_converged as Ansible's `bool` takes it; anything else refuses the node in
    one line, in the words r9700ctl's own check of inventory values uses (r9700ctl.variables.BadValue)."""
    try:
        return boolean(value, strict=True)
    except TypeError:
        (variables,) = require(AnsibleActionFail, "r9700ctl.variables")
        bad = variables.BadValue("r9700_lifecycle_skip_converged", value, "true or false")
        raise AnsibleActionFail(
            f"{host}: {bad.what()}; nothing changed ({bad.fix('in the inventory or with -e')})"
        ) from None


def final(converged: bool, reason: str, skip_converged: bool, other_roles: list[str]) -> tuple[bool, str]:
    """The verdict the play acts on: every role runs when asked to (--full), or where the play also
    runs roles of its own that ending it here would skip."""
    if not skip_converged:
        return False, f"every role runs (--full); the check found: {reason}"
    if converged and other_roles:
        return False, (
            f"not converged: this play also runs {', '.join(other_roles)} (a site play of its own), "
            "which ending the play here would skip"
        )
    return converged, reason


def reported(recorded: dict) -> dict:
    """What a converged node reports: the last complete run's versions and containers, its smoke
    check said as that run's (never replayed as this run's verdict), no reboot pending."""
    facts = {"r9700_versions": recorded.get("r9700_versions") or {}, "r9700_reboot_pending": False}
    containers = recorded.get("r9700_containers_status")
    if isinstance(containers, dict):
        smoke = containers.get("smoke") or "none"
        facts["r9700_containers_status"] = {
            **containers,
            "smoke": f"not run (node converged); the last complete run: {smoke}",
        }
    return facts


def verdict(answer: dict, key: str) -> tuple[bool, str]:
    """(converged, one line saying why or why not) from the node's answer and this run's key."""
    if answer.get("recorded_key") is None:
        return False, f"not converged: {answer.get('reason') or 'no complete provision recorded'}"
    if answer["recorded_key"] != key:
        return (
            False,
            "not converged: this run's inputs (variables, roles, r9700ctl) are not the last run's",
        )
    found = answer.get("differences") or []
    if found:
        shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
        return False, f"not converged: since the last complete run {shown}"
    when = answer.get("recorded_at")
    since = (
        time.strftime(" since %Y-%m-%d %H:%M UTC", time.gmtime(when))
        if isinstance(when, (int, float))
        else ""
    )
    return True, (
        f"converged{since}: same inputs, and the {answer.get('observed', 0)} managed files, packages, groups "
        "and units are as that run left them; nothing to do (--full runs every task)"
    )
