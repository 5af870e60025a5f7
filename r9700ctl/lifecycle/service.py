"""`r9700ctl upgrade` and `r9700ctl rollback` as a service: plan, check, roll out in batches.

1. Bad options are refused before any host is contacted (BadInput, exit 64): an unknown
   release, a batch larger than the inventory, a fail percentage outside 0..100.
2. Plan (playbooks/lifecycle_plan.yml, read only): each node's state files and /dev/kfd
   holders; for upgrade, what r9700_preflight resolves for --rocm. A downgrade without
   --allow-downgrade is refused here (exit 64, nothing changed); so is a rollback of a node
   without state.prev.json. --check stops here and returns the plan.
3. A node that preflight refuses or that does not answer stops everything before any change.
4. Roll out (r9700ctl/lifecycle/rollout.py): per batch drain hook, playbooks/upgrade.yml
   (quiesce, the provisioning roles at the target release, reboot where the driver changed),
   the validation gate (`validate --level <gate>`, PASS or WARN passes), resume.

Exit codes: 0 every node upgraded or already there; 1 as 0 but a node needs a reboot it could
not do itself; 2 a node failed (the rollout stopped; the summary says which nodes are
upgraded, failed and why, untouched); 3 a node was unreachable; 64 bad input.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl import agentpack
from r9700ctl import inventory as inventory_module
from r9700ctl.agent import codes, schemas
from r9700ctl.agent.levels import LEVEL_NAMES
from r9700ctl.agent.result import ERROR, FAIL, PASS, SEVERITY, WARN, CheckResult
from r9700ctl.errors import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_OK, EXIT_WARN, BadInput
from r9700ctl.lifecycle import plan as planning
from r9700ctl.lifecycle.plan import NodePlan
from r9700ctl.lifecycle.rollout import FAILED, LOST, UNTOUCHED, Hooks, Rollout, StepResult, roll_out
from r9700ctl.provision import RESOLVED_FACT

UPGRADE = "upgrade"
ROLLBACK = "rollback"
KERNEL = "kernel-upgrade"
GATE_LEVELS = LEVEL_NAMES
GATE_PASSES = (PASS, WARN)
# --gate-rule: "pass" returns a node whose validation is PASS or WARN; "no-worse" also one whose
# validation after the move is no worse than before it (same status, no check newly failing):
# for nodes that did not pass before, such as the lab's, which have no GPU to count.
GATE_RULES = ("pass", "no-worse")
# The one severity order (agent/result.py: FAIL above ERROR), with validate's two node states
# that have no report above every status: nothing of such a node is known.
_SEVERITY = {**SEVERITY, "NO_REPORT": len(SEVERITY), "UNREACHABLE": len(SEVERITY)}
# The host fact the lifecycle playbooks report through (role r9700_lifecycle): state files,
# /dev/kfd holders, what a refused kernel left, what uninstall removed.
LIFECYCLE_FACT = "r9700_lifecycle"


@dataclass
class LifecycleOptions:
    inventory: Path
    mode: str = UPGRADE
    group: str = inventory_module.DEFAULT_GROUP
    limit: str | None = None
    rocm: str = "auto"
    serial: str | None = None
    max_fail_percent: float | None = None
    check: bool = False
    allow_downgrade: bool = False
    force: bool = False
    gate_level: str = "quick"
    gate_rule: str = "pass"
    drain_cmd: str | None = None
    resume_cmd: str | None = None
    runs_dir: Path | None = None
    envvars: dict[str, str] = field(default_factory=dict)


@dataclass
class LifecycleOutcome:
    options: LifecycleOptions
    plans: list[NodePlan]
    batch_size: int
    rollout: Rollout | None = None
    exit_code: int = EXIT_OK
    note: str = ""  # why nothing was started, when nothing was

    def to_dict(self) -> dict[str, Any]:
        from r9700ctl import __version__

        rollout = self.rollout
        return {
            "schema": schemas.LIFECYCLE,
            "toolkit_version": __version__,
            "mode": self.options.mode,
            "rocm": self.options.rocm if self.options.mode == UPGRADE else "state.prev.json",
            "check": self.options.check,
            "batch_size": self.batch_size,
            "gate_level": self.options.gate_level,
            "gate_rule": self.options.gate_rule,
            "exit_code": self.exit_code,
            "note": self.note,
            "stopped": rollout.stopped if rollout else "",
            "plans": [p.to_dict() for p in self.plans],
            "nodes": [o.to_dict() for o in rollout.outcomes] if rollout else [],
        }


Progress = Callable[[str], None]


def run(options: LifecycleOptions, progress: Progress = lambda _: None) -> LifecycleOutcome:
    from r9700ctl import manifest as manifest_module

    manifest = manifest_module.load()
    if options.mode == UPGRADE:
        options.rocm = planning.check_target(options.rocm, manifest)
    if options.gate_rule not in GATE_RULES:
        raise BadInput(what=f"--gate-rule {options.gate_rule}", hint=f"use one of {', '.join(GATE_RULES)}")
    if options.gate_level not in GATE_LEVELS:
        raise BadInput(what=f"--gate-level {options.gate_level}", hint=f"use one of {', '.join(GATE_LEVELS)}")
    hooks = Hooks(drain=options.drain_cmd, resume=options.resume_cmd)
    hooks.check()
    fail_percent = planning.fail_percent(options.max_fail_percent)
    checked = inventory_module.load_inventory(options.inventory, group=options.group, limit=options.limit)
    size = planning.batch_size(options.serial, len(checked.hosts))

    if options.mode == KERNEL and not options.check:
        # Each node follows its own kernel line; the playbook finds and checks the new kernel.
        plans = [
            NodePlan(host=h, action=planning.MOVE, to_release="newest kernel") for h in checked.host_names
        ]
    else:
        plans = make_plans(options, checked.host_names, manifest, progress)
    outcome = LifecycleOutcome(options=options, plans=plans, batch_size=size)
    if options.mode == UPGRADE and not options.allow_downgrade:
        down = [p for p in plans if p.downgrade]
        if down:
            first = down[0]
            raise BadInput(
                what=(
                    f"--rocm {first.to_release} is a downgrade from {first.from_release} on "
                    f"{', '.join(p.host for p in down)}; nothing was changed"
                ),
                hint="add --allow-downgrade, or use r9700ctl rollback to return to the state before "
                "the last upgrade",
            )
    blocked = [p for p in plans if p.action in (planning.REFUSED, planning.UNREACHABLE)]
    if blocked:
        outcome.note = "nothing was changed: " + "; ".join(f"{p.host}: {p.why}" for p in blocked)
        unreachable = any(p.action == planning.UNREACHABLE for p in blocked)
        outcome.exit_code = EXIT_CANNOT_RUN if unreachable else EXIT_FAIL
        return outcome
    if options.check:
        outcome.note = "--check: nothing was changed"
        return outcome

    baselines: dict[str, Any] = {}

    def before(hosts: list[str]) -> None:
        if options.gate_rule == "no-worse":
            progress(f"validating {', '.join(hosts)} before the move (level {options.gate_level})")
            baselines.update({n.host: n for n in validation(options, hosts).nodes})

    outcome.rollout = roll_out(
        plans,
        size,
        before=before,
        move=lambda hosts, release: (
            move_kernel(options, hosts, progress)
            if options.mode == KERNEL
            else move(options, hosts, release, progress)
        ),
        gate=lambda hosts: gate(options, hosts, progress, baselines),
        resume=lambda hosts: resume(options, hosts, progress),
        hooks=hooks,
        max_fail_percent=fail_percent,
        progress=progress,
    )
    outcome.exit_code = exit_code_for(outcome.rollout)
    return outcome


def exit_code_for(rollout: Rollout) -> int:
    statuses = {o.status for o in rollout.outcomes}
    if LOST in statuses:
        return EXIT_CANNOT_RUN
    if FAILED in statuses or UNTOUCHED in statuses:
        return EXIT_FAIL
    if any(o.reboot_pending for o in rollout.outcomes):
        return EXIT_WARN
    return EXIT_OK


def run_play(
    options: LifecycleOptions, playbook: str, limit: str | None, hosts: int, extra: dict[str, Any]
) -> Any:
    """One of the lifecycle playbooks on these hosts, with the node program its roles run
    (r9700-lifecycle); the same run directory and environment as every step of the command."""
    from r9700ctl import ansible_run, paths

    with agentpack.node_program_vars() as node:
        return ansible_run.run_playbook(
            ansible_run.RunRequest(
                playbook=paths.playbook(playbook),
                inventory=options.inventory,
                limit=limit,
                hosts=hosts,
                extra_vars={**extra, **node},
                envvars=dict(options.envvars),
                runs_dir=options.runs_dir,
            )
        )


# --- plan -----------------------------------------------------------------------------------------


def make_plans(
    options: LifecycleOptions, hosts: list[str], manifest: Any, progress: Progress
) -> list[NodePlan]:
    from r9700ctl import ansible_run

    extra: dict[str, Any] = {"r9700_group": options.group}
    if options.mode == UPGRADE:
        extra["r9700_rocm_version"] = options.rocm
    else:
        extra["r9700_lifecycle_plan_preflight"] = False
    if options.mode == KERNEL:
        # kernel-upgrade --check: apt-get -s of each node's kernel line (r9700-lifecycle kernel-plan).
        extra["r9700_lifecycle_plan_kernel"] = True
    progress(
        "plan: reading each node's state"
        + (" and resolving the target release" if options.mode == UPGRADE else "")
        + (" and simulating its kernel upgrade" if options.mode == KERNEL else "")
    )
    result = run_play(options, "lifecycle_plan.yml", options.limit, len(hosts), extra)
    plans = []
    for host in hosts:
        seen = result.hosts.get(host)
        if seen is None or seen.status == ansible_run.NOT_RUN:
            plans.append(planning.unreachable(host, result.error or "not in the play's results"))
            continue
        state = seen.fact(LIFECYCLE_FACT)
        if seen.status == ansible_run.UNREACHABLE:
            plans.append(planning.unreachable(host, f"unreachable: {seen.first_error}"))
        elif seen.status == ansible_run.FAILED:
            plans.append(planning.refused(host, seen.first_error, state))
        elif options.mode == UPGRADE:
            plans.append(planning.plan_node(host, state, seen.fact(RESOLVED_FACT), manifest=manifest))
        elif options.mode == KERNEL:
            plans.append(planning.plan_kernel(host, state))
        else:
            previous = (state.get("state_prev") or {}).get("rocm_version")
            if not previous:
                plans.append(
                    planning.refused(
                        host,
                        "no /etc/r9700ctl/state.prev.json: nothing to roll back to (it is written when an "
                        "upgrade or a provision changes the node)",
                        state,
                    )
                )
                continue
            plans.append(planning.plan_node(host, state, {}, target_release=str(previous), manifest=manifest))
    return plans


# --- the steps the rollout calls -------------------------------------------------------------------


def move(
    options: LifecycleOptions, hosts: list[str], release: str, progress: Progress
) -> dict[str, StepResult]:
    """playbooks/upgrade.yml on these hosts at `release` (through the provision service)."""
    from r9700ctl import paths
    from r9700ctl.ansible_run import FAILED as RUN_FAILED
    from r9700ctl.ansible_run import INTERRUPTED, NOT_RUN
    from r9700ctl.ansible_run import UNREACHABLE as RUN_UNREACHABLE
    from r9700ctl.provision import ProvisionOptions, provision

    progress(f"moving {', '.join(hosts)} to ROCm {release}")
    variables = {
        "r9700_rocm_version": release,
        "r9700_lifecycle_force": options.force,
        # Managed packages the state rolled back to did not have are purged (role r9700_lifecycle).
        "r9700_lifecycle_rollback": options.mode == ROLLBACK,
    }
    done = provision(
        ProvisionOptions(
            inventory=options.inventory,
            group=options.group,
            limit=",".join(hosts),
            extra_vars=(json.dumps(variables),),
            playbook=paths.playbook("upgrade.yml"),
            runs_dir=options.runs_dir,
            envvars=dict(options.envvars),
        )
    )
    results = {}
    for host in done.hosts:
        if host.host not in hosts:
            continue
        if host.status == RUN_UNREACHABLE:
            where = host.failed_tasks[-1].task if host.failed_tasks else "?"
            results[host.host] = StepResult(
                ok=False,
                lost=True,
                why=f"unreachable during '{where}': its state is unknown (between its old release and "
                f"{release}); once it answers, run the same command again",
            )
        elif host.status == RUN_FAILED:
            results[host.host] = StepResult(ok=False, why=host.first_error or "a task failed")
        elif host.status in (NOT_RUN, INTERRUPTED):
            results[host.host] = StepResult(
                ok=False, why=f"the upgrade did not run to its end ({host.status})"
            )
        else:
            results[host.host] = StepResult(
                ok=True, reboot_pending=list(host.reboot_reasons) if host.reboot_pending else []
            )
    return results


def validation(options: LifecycleOptions, hosts: list[str]) -> Any:
    from r9700ctl.validate import validate_inventory

    return validate_inventory(
        options.inventory,
        options.group,
        level=options.gate_level,
        limit=",".join(hosts),
        reports_root=options.runs_dir / "validate" if options.runs_dir else None,
    )


def move_kernel(options: LifecycleOptions, hosts: list[str], progress: Progress) -> dict[str, StepResult]:
    """playbooks/kernel_upgrade.yml: kernel, headers and the amdgpu DKMS build, checked before a reboot."""
    from r9700ctl import ansible_run

    progress(f"moving {', '.join(hosts)} to the newest kernel of their line")
    extra = {"r9700_group": options.group, "r9700_lifecycle_force": options.force}
    result = run_play(options, "kernel_upgrade.yml", ",".join(hosts), len(hosts), extra)
    results = {}
    for host in hosts:
        seen = result.hosts.get(host)
        if seen is None or seen.status in (ansible_run.NOT_RUN, ansible_run.INTERRUPTED):
            results[host] = StepResult(ok=False, why="the kernel upgrade did not run to its end")
        elif seen.status == ansible_run.UNREACHABLE:
            results[host] = StepResult(ok=False, lost=True, why=f"unreachable: {seen.first_error}")
        elif seen.status == ansible_run.FAILED:
            # A refused kernel: what the node did so that its next boot is the running kernel.
            # (the runner keeps 300 characters of the task's message; this comes whole).
            undone = str(seen.fact(LIFECYCLE_FACT).get("undone") or "").strip()
            why = seen.first_error
            if undone and undone not in why:
                why = f"{why} (kept bootable: {undone})"
            results[host] = StepResult(ok=False, why=why)
        else:
            pending = list(seen.reboot_reasons) if seen.reboot_pending else []
            results[host] = StepResult(ok=True, reboot_pending=pending)
    return results


def gate(
    options: LifecycleOptions, hosts: list[str], progress: Progress, baselines: dict[str, Any] | None = None
) -> dict[str, StepResult]:
    """`validate --level <gate>` on the moved nodes, judged by --gate-rule (GATE_RULES)."""
    progress(f"validating {', '.join(hosts)} (level {options.gate_level})")
    report = validation(options, hosts)
    results = {}
    for node in report.nodes:
        if node.status in GATE_PASSES:
            results[node.host] = StepResult(ok=True, verdict=_gate_verdict(options, node, PASS, "", ""))
            continue
        finding = node.worst_finding()
        detail = node.error
        if finding:
            said = finding.get("hint") or finding.get("threshold") or ""
            detail = f"{finding.get('id')} {finding.get('status')} on {finding.get('subject')}: {said}"
        earlier = (baselines or {}).get(node.host)
        if options.gate_rule == "no-worse" and earlier is not None:
            worse = got_worse(earlier, node)
            if not worse:
                why = f"validation {node.status} as before the move, no check got worse ({detail})"
                results[node.host] = StepResult(
                    ok=True, why=why, verdict=_gate_verdict(options, node, PASS, why, "")
                )
                continue
            detail = f"{worse}; {detail}"
        why = f"validation {node.status} after the move ({detail.strip()}); reports: {report.reports_dir}"
        lost = node.status == "UNREACHABLE"
        code = (
            "GATE_NODE_LOST"
            if lost
            else "GATE_GOT_WORSE"
            if options.gate_rule == "no-worse"
            else "GATE_NOT_PASSED"
        )
        results[node.host] = StepResult(
            ok=False, lost=lost, why=why, verdict=_gate_verdict(options, node, FAIL, why, code)
        )
    return results


def _gate_verdict(options: LifecycleOptions, node: Any, status: str, why: str, code: str) -> CheckResult:
    """The gate's decision on one node, in the one verdict model (kept in the rollout's JSON)."""
    rule = "PASS or WARN" if options.gate_rule == "pass" else "PASS or WARN, or no worse than before the move"
    return CheckResult(
        id="lifecycle.gate",
        subject=node.host,
        status=status,
        metric="validation",
        value=node.status,
        threshold=f"validate --level {options.gate_level}: {rule}",
        hint=codes.hint(code, why) if code else why,
        code=code,
    )


def got_worse(before: Any, after: Any) -> str:
    """Why `after` (a node's validation) is worse than `before`, or "" when it is not."""
    if _rank(after.status) > _rank(before.status):
        return f"worse than before the move ({before.status} then)"

    def statuses(node: Any) -> dict[tuple[str, str], str]:
        results = (node.report or {}).get("results") or []
        return {(r.get("id"), r.get("subject")): r.get("status") for r in results if isinstance(r, dict)}

    earlier = statuses(before)
    for key, status in statuses(after).items():
        # A check newly FAIL or ERROR (or worse) counts; one newly WARN or INCONCLUSIVE does not.
        if _rank(status) > _rank(earlier.get(key, PASS)) and _rank(status) >= SEVERITY[ERROR]:
            return f"{key[0]} on {key[1]} newly {status}"
    return ""


def _rank(status: Any) -> int:
    """A status's place in the one order; anything unknown ranks with a node that has no report."""
    return _SEVERITY.get(status, _SEVERITY["NO_REPORT"])


def resume(options: LifecycleOptions, hosts: list[str], progress: Progress) -> dict[str, StepResult]:
    from r9700ctl import ansible_run

    result = run_play(
        options, "lifecycle_resume.yml", ",".join(hosts), len(hosts), {"r9700_group": options.group}
    )
    results = {}
    for host in hosts:
        seen = result.hosts.get(host)
        if seen is not None and seen.status in (ansible_run.OK, ansible_run.CHANGED):
            results[host] = StepResult(ok=True)
        else:
            results[host] = StepResult(
                ok=False,
                lost=seen is not None and seen.status == ansible_run.UNREACHABLE,
                why=(seen.first_error if seen else "") or "the resume step did not run",
            )
    return results
