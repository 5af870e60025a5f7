"""Action plugin: judge a node before anything changes on it (runs on the controller).

It sends r9700ctl/agent/nodefacts.py, with the node-package modules it imports, to the node on
stdin (``python3 - ARGS``, r9700ctl.agentpack.stdin_invocation; with become when
the play uses it), reads the JSON facts, and judges them with r9700ctl.preflight against
r9700ctl's manifest: the same code `r9700ctl doctor` runs over paramiko. It returns the
values later roles act on as the host fact ``r9700_resolved`` and the checks as
``r9700_preflight``; WARN checks become Ansible warnings; a FAIL fails this host only,
with one line that names the reason, the fix and that nothing was changed.
"""

from __future__ import annotations

import json
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.r9700ctl.nodes.plugins.plugin_utils.r9700ctl_package import preload, require

MODULES = (
    "r9700ctl",
    "r9700ctl.agentpack",
    "r9700ctl.manifest",
    "r9700ctl.nodeenv",
    "r9700ctl.preflight",
    "r9700ctl.agent.result",
    "r9700ctl.agent.nodefacts",  # agentpack.stdin_invocation encodes the arguments with it
)
NODE_SCRIPT = "r9700ctl.agent.nodefacts"
preload(MODULES, (NODE_SCRIPT,), ("r9700ctl.preflight:prepare",))

# The action's own parameters. The r9700_* values it passes on are "raw" here: their types and
# choices live once, in the roles' meta/argument_specs.yml, which Ansible checks when the role
# starts and preflight.judge checks again with the same validator (doctor runs no role).
ARGUMENT_SPEC = {
    "python": {"type": "str", "default": "python3"},
    # The release and the driver's source are r9700_rocm's and r9700_driver's variables, read here
    # to judge them first. None = not given (a play without those roles): the judge's default.
    "rocm_version": {"type": "raw", "default": None},
    "allow_unsupported": {"type": "raw", "default": False},
    "hsa_override_gfx_version": {"type": "raw", "default": ""},
    "expected_gpus": {"type": "raw", "default": None},
    "min_free_gb": {"type": "raw", "default": 30.0},
    "driver_source": {"type": "raw", "default": None},
    "apt_lock_timeout": {"type": "raw", "default": 600.0},
    "apt_update": {"type": "bool", "default": True},
    "apt_cache_valid_time": {"type": "int", "default": 0},
    "apply_runtime": {"type": "raw", "default": "auto"},
    "known_issue_workarounds_skip": {"type": "raw", "default": []},
    # The r9700_env role's knobs: the environment list is composed and checked here, before any
    # change (r9700ctl/envlist.py). None = not given: the judge applies the role's defaults.
    "env": {"type": "raw", "default": None},
    "env_extra": {"type": "raw", "default": None},
    "rocr_visible_devices": {"type": "raw", "default": None},
    "p2p": {"type": "raw", "default": None},
    "env_comment_out_conflicts": {"type": "raw", "default": None},
    # Whose shell start files hold environment variables to judge (r9700ctl/nodeenv.py).
    "users": {"type": "raw", "default": None},
    "docker_users": {"type": "raw", "default": None},
    # The r9700_power role's knobs: the PSU budget is judged here, before anything changes.
    "power_cap_w": {"type": "raw", "default": None},
    "power_cap_w_by_gpu": {"type": "raw", "default": None},
    "psus": {"type": "raw", "default": None},
    "psu_margin": {"type": "raw", "default": None},
    # The r9700_cluster role's knobs: the cluster NIC is found here, its variables composed into
    # the environment list (r9700ctl/cluster/netcheck.py).
    "cluster_network": {"type": "raw", "default": None},
    "cluster_rdma": {"type": "raw", "default": None},
    "cluster_rdma_hca": {"type": "raw", "default": None},
    "cluster_rdma_gid_index": {"type": "raw", "default": None},
    # The converged step's managed paths (roles/r9700_lifecycle): given, this node call also makes
    # that step's check, which reads its answer instead of calling the node again.
    # Raw: a template that leaves it out may give None or '' (ansible-core before 2.19); only a
    # non-empty dict asks.
    "converged_managed": {"type": "raw", "default": None},
}
ENV_KNOBS = {
    "env": "r9700_env",
    "env_extra": "r9700_env_extra",
    "rocr_visible_devices": "r9700_rocr_visible_devices",
    "p2p": "r9700_p2p",
    "env_comment_out_conflicts": "r9700_env_comment_out_conflicts",
}
OTHER_ROLES_KNOBS = {
    "rocm_version": "r9700_rocm_version",
    "driver_source": "r9700_driver_source",
}
CLUSTER_KNOBS = {
    "cluster_network": "r9700_cluster_network",
    "cluster_rdma": "r9700_cluster_rdma",
    "cluster_rdma_hca": "r9700_cluster_rdma_hca",
    "cluster_rdma_gid_index": "r9700_cluster_rdma_gid_index",
}
POWER_KNOBS = {
    "power_cap_w": "r9700_power_cap_w",
    "power_cap_w_by_gpu": "r9700_power_cap_w_by_gpu",
    "psus": "r9700_psus",
    "psu_margin": "r9700_psu_margin",
}


class ActionModule(ActionBase):
    _supports_check_mode = True  # it only reads
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]  # (validator result, arguments)
        package, agentpack, manifest_module, nodeenv, preflight, result_module, _nodefacts = require(
            AnsibleActionFail, *MODULES
        )
        one_line = result_module.one_line

        host = task_vars.get("inventory_hostname", "this host")
        # The lock wait is needed before the judge runs: take it as the spec converts it.
        wait, bad = preflight.checked_vars({"r9700_apt_lock_timeout": args["apt_lock_timeout"]})
        if bad:
            raise AnsibleActionFail(f"{host}: preflight refused, nothing changed: {one_line(bad[0])}")
        lock_wait = wait["r9700_apt_lock_timeout"]
        lock_wait = 600.0 if lock_wait in (None, "") else lock_wait
        fact_args = {
            "apt_update": args["apt_update"],
            "apt_max_age_s": max(0, args["apt_cache_valid_time"]),
            "lock_wait_s": lock_wait,
        }
        users = {"r9700_users": args["users"], "r9700_docker_users": args["docker_users"]}
        login = self._play_context.remote_user or task_vars.get("ansible_user")
        fact_args.update(nodeenv.fact_args(users, login))
        python = args["python"]
        if python.startswith("auto"):  # Ansible's interpreter discovery keywords
            python = "python3"
        managed = args["converged_managed"] if isinstance(args["converged_managed"], dict) else {}
        if managed:
            fact_args["converged"] = {"mode": "check", "managed": managed}
        command, script = agentpack.stdin_invocation(NODE_SCRIPT, fact_args, python=python)
        before = time.time()
        out = self._low_level_execute_command(command, sudoable=True, in_data=script)
        after = time.time()
        if out.get("rc") != 0:
            stderr = (out.get("stderr") or out.get("stdout") or "").strip().splitlines()
            raise AnsibleActionFail(
                f"{host}: preflight could not gather facts (rc {out.get('rc')}: "
                f"{stderr[-1] if stderr else 'no output'}); nothing changed"
            )
        try:
            facts = json.loads(out.get("stdout", ""))
        except ValueError as exc:
            raise AnsibleActionFail(
                f"{host}: preflight got unreadable facts ({exc}); nothing changed"
            ) from exc

        converged = facts.pop("converged", None)
        host_vars = {
            "r9700_allow_unsupported": args["allow_unsupported"],
            "r9700_hsa_override_gfx_version": args["hsa_override_gfx_version"],
            "r9700_expected_gpus": args["expected_gpus"],
            "r9700_min_free_gb": args["min_free_gb"],
            "r9700_apt_lock_timeout": args["apt_lock_timeout"],
            "r9700_apply_runtime": args["apply_runtime"],
            "r9700_known_issue_workarounds_skip": args["known_issue_workarounds_skip"],
        }
        # The controller's clock around the facts call: the node's own reading lies in between.
        facts["controller_clock"] = {"before": before, "after": after}
        knobs = {**OTHER_ROLES_KNOBS, **ENV_KNOBS, **POWER_KNOBS, **CLUSTER_KNOBS}
        host_vars.update({name: args[arg] for arg, name in knobs.items() if args[arg] is not None})
        verdict = preflight.judge(facts, host_vars, manifest_module.load())
        # id, status, detail and fix as before; the reason code beside them (r9700ctl explain CODE)
        checks = [
            {"id": c.id, "status": c.status, "detail": c.detail, "fix": c.hint, "code": c.code}
            for c in verdict.checks
        ]
        result["changed"] = False
        result["ansible_facts"] = {
            "r9700_resolved": verdict.resolved.to_dict(),
            "r9700_preflight": {"ok": verdict.ok, "checks": checks, "facts": facts},
            # The r9700ctl that judged the node, for the node's records (node.json, state.json) when
            # a site's own ansible-playbook runs the roles; r9700ctl's extra var outranks a fact.
            "r9700_toolkit_version": package.__version__,
        }
        result["checks"] = checks
        # For the converged step right after (roles/r9700_lifecycle/tasks/converged.yml reads it from
        # this task's registered result: never a fact, so no fact cache keeps it for a later run).
        if isinstance(converged, dict):
            result["converged_observed"] = {"managed": managed, "answer": converged, "at": after}
        warnings = [f"{host}: {c.id}: {one_line(c)}" for c in verdict.warnings]
        if warnings:
            result["warnings"] = warnings
        if not verdict.ok:
            result["failed"] = True
            result["msg"] = verdict.refusal(host)
        else:
            result["msg"] = f"{host}: preflight passed ({len(verdict.warnings)} warning(s)); ROCm " + (
                verdict.resolved.rocm_version or "?"
            )
        return result
