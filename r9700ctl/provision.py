"""`r9700ctl provision` as a service: check the inventory, run provision.yml, judge the run.

Nothing is contacted before the inventory, the options and the extra vars have passed their
checks (BadInput, exit 64). The exit code follows the contract of docs/architecture.md:

  0    every host OK or CHANGED
  1    every host OK or CHANGED, and some host needs a reboot it could not do itself
  2    some host FAILED (a task failed; other hosts still ran to the end)
  3    no host failed, but some host was UNREACHABLE or never ran, or ansible-playbook
       stopped outside any host (its first error line is in the result)
  130  interrupted (Ctrl-C); the hosts left mid-way are named
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl import ansible_run
from r9700ctl import inventory as inventory_module
from r9700ctl.agent import schemas
from r9700ctl.agent.atomic import write_json
from r9700ctl.ansible_run import (
    CHANGED,
    FAILED,
    INTERRUPTED,
    NOT_RUN,
    OK,
    UNREACHABLE,
    HostResult,
    ProgressCallback,
    RunRequest,
    RunResult,
)
from r9700ctl.clock import utc_text
from r9700ctl.errors import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_OK, EXIT_WARN, BadInput
from r9700ctl.inventory import Inventory

EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's and Click's convention for Ctrl-C
PLAYBOOK = "provision.yml"
# The host facts provision's roles hand back (the runner keeps every r9700_* fact).
RESOLVED_FACT = "r9700_resolved"  # r9700_preflight: rocm_choice, known_issues, p2p and the rest it resolved
VERSIONS_FACT = "r9700_versions"  # r9700_rocm: {"before": {...}, "after": {...}} package versions
CONTAINERS_FACT = "r9700_containers_status"  # r9700_containers: engine, image, smoke check
CONVERGED_FACT = "r9700_converged"  # r9700_lifecycle's converged step: converged, reason


@dataclass(frozen=True)
class RoleFacts:
    """What provision reports of a host from its roles' facts."""

    versions: dict[str, Any]
    rocm_choice: str  # how the release was chosen, with the releases `auto` skipped
    known_issues: list[dict[str, Any]]
    p2p: dict[str, Any]  # the node's PCIe P2P decision: state and reason (r9700ctl/p2p_policy.py)
    containers: dict[str, Any]
    converged: dict[str, Any]  # whether the node was left alone as the last complete run left it, and why

    @classmethod
    def of(cls, host: HostResult) -> RoleFacts:
        resolved = host.fact(RESOLVED_FACT)
        p2p = resolved.get("p2p")
        return cls(
            versions=host.fact(VERSIONS_FACT),
            rocm_choice=str(resolved.get("rocm_choice") or ""),
            known_issues=[k for k in resolved.get("known_issues") or [] if isinstance(k, dict)],
            p2p=p2p if isinstance(p2p, dict) else {},
            containers=host.fact(CONTAINERS_FACT),
            converged=host.fact(CONVERGED_FACT),
        )


@dataclass
class ProvisionOptions:
    inventory: Path
    group: str = inventory_module.DEFAULT_GROUP
    limit: str | None = None
    check: bool = False
    diff: bool = False
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    extra_vars: tuple[str, ...] = ()  # as given to -e: key=value, @file.yml or JSON
    forks: int | None = None  # None: one per host, at most ansible_run.MAX_FORKS
    verbosity: int = 0
    full: bool = False  # run every task, also on a node as the last complete run left it
    playbook: Path | None = None  # None: the installed playbooks/provision.yml
    runs_dir: Path | None = None  # None: state_dir()/runs
    envvars: dict[str, str] = field(default_factory=dict)


@dataclass
class ProvisionOutcome:
    options: ProvisionOptions
    inventory: Inventory
    run: RunResult
    hosts: list[HostResult]  # inventory order; hosts ansible never reported are NOT_RUN
    exit_code: int

    @property
    def reboot_pending(self) -> list[str]:
        return [h.host for h in self.hosts if h.reboot_pending]

    def to_dict(self) -> dict[str, Any]:
        """The run report (schema r9700ctl.provision/1): `--json` and the run directory's report.json."""
        from r9700ctl import __version__

        run = self.run
        addresses = {host.name: host.address for host in self.inventory.hosts}
        return {
            "schema": schemas.PROVISION,
            "toolkit_version": __version__,
            "status": run.status,
            "exit_code": self.exit_code,
            "rc": run.rc,
            "started_at": utc_text(run.started_at),
            "finished_at": utc_text(run.finished_at),
            "duration_s": round(run.duration_s, 3),
            "artifact_dir": str(run.run_dir),
            "inventory": str(self.inventory.path.resolve()),
            "group": self.inventory.group,
            "limit": self.options.limit,
            "check": self.options.check,
            "tags": list(split_tags(self.options.tags)),
            "skip_tags": list(split_tags(self.options.skip_tags)),
            "forks": run.forks,
            "error": run.error or None,
            "totals": totals(self.hosts),
            "reboot_pending": self.reboot_pending,
            "hosts": [_host_entry(host, addresses.get(host.host)) for host in self.hosts],
        }


def totals(hosts: list[HostResult]) -> dict[str, int]:
    """Hosts per status, and how many in all."""
    counts = {status: 0 for status in (OK, CHANGED, FAILED, UNREACHABLE, INTERRUPTED, NOT_RUN)}
    for host in hosts:
        counts[host.status] += 1
    return {"hosts": len(hosts), **counts}


def _host_entry(host: HostResult, address: str | None) -> dict[str, Any]:
    facts = RoleFacts.of(host)
    return {
        "host": host.host,
        "address": address,
        "status": host.status,
        "ok": host.ok,
        "changed": host.changed,
        "failed": host.failed,
        "unreachable": host.unreachable,
        "skipped": host.skipped,
        "rescued": host.rescued,
        "ignored": host.ignored,
        "duration_s": round(host.duration_s, 3),
        "failed_tasks": [
            {"task": t.task, "message": t.message, "unreachable": t.unreachable, "rescued": t.rescued}
            for t in host.failed_tasks
        ],
        "reboot_pending": host.reboot_pending,
        "reboot_reasons": host.reboot_reasons,
        "versions": facts.versions,
        "rocm_choice": facts.rocm_choice,
        "known_issues": facts.known_issues,
        "p2p": facts.p2p or None,
        "containers": facts.containers or None,
        "converged": bool(facts.converged.get("converged")),
        "converged_reason": str(facts.converged.get("reason") or "") or None,
        "interrupted_in": host.current_task if host.interrupted else None,
    }


def provision(
    options: ProvisionOptions,
    on_progress: ProgressCallback | None = None,
    ask_become_password: Callable[[], str] | None = None,
) -> ProvisionOutcome:
    """Check everything, then run the playbook. The password is asked only once the checks passed."""
    from r9700ctl import __version__
    from r9700ctl.agentpack import node_program_vars, pack
    from r9700ctl.paths import playbook as installed_playbook

    if options.forks is not None and options.forks < 1:
        raise BadInput(what=f"--forks {options.forks}: must be 1 or more", hint="for example --forks 10")
    user_vars = inventory_module.parse_extra_vars(options.extra_vars)
    checked = inventory_module.load_inventory(
        options.inventory, group=options.group, limit=options.limit, extra_vars=user_vars
    )
    password = ask_become_password() if ask_become_password else None

    with tempfile.TemporaryDirectory(prefix="r9700ctl-provision-") as scratch, node_program_vars() as node:
        # The agent for r9700_monitoring (used where r9700_monitoring_enabled) and the node
        # program the roles install and run: byte-identical for the same r9700ctl, so a second
        # provision changes nothing on the node.
        archive = pack(Path(scratch) / "agent.tar.gz")
        request = RunRequest(
            playbook=options.playbook or installed_playbook(PLAYBOOK),
            inventory=checked.path,
            limit=options.limit,
            check=options.check,
            diff=options.diff,
            tags=split_tags(options.tags),
            skip_tags=split_tags(options.skip_tags),
            extra_vars={
                # --full refreshes apt's lists whatever an earlier preflight did (a user's -e wins)
                **({"r9700_preflight_apt_cache_valid_time": 0} if options.full else {}),
                **user_vars,
                "r9700_group": options.group,
                "r9700_toolkit_version": __version__,
                "r9700_monitoring_agent_archive": str(archive),
                **node,
                **({"r9700_lifecycle_skip_converged": False} if options.full else {}),
            },
            forks=options.forks,
            hosts=len(checked.hosts),
            become_password=password or None,
            verbosity=options.verbosity,
            envvars=dict(options.envvars),
            runs_dir=options.runs_dir,
        )
        # Through the module, as every other caller: a test's patch of ansible_run.run_playbook
        # must never outlive it in a name bound at import time.
        run = ansible_run.run_playbook(request, on_progress=on_progress)
    hosts = _in_inventory_order(checked, run)
    outcome = ProvisionOutcome(
        options=options,
        inventory=checked,
        run=run,
        hosts=hosts,
        exit_code=exit_code_for(run, hosts),
    )
    _keep_report(outcome)
    return outcome


def exit_code_for(run: RunResult, hosts: list[HostResult]) -> int:
    """The contract's exit code for a finished run (see the module docstring)."""
    if run.canceled:
        return EXIT_INTERRUPTED
    statuses = {host.status for host in hosts}
    if FAILED in statuses:
        return EXIT_FAIL
    if statuses & {UNREACHABLE, NOT_RUN, INTERRUPTED} or run.status != "successful" or not hosts:
        return EXIT_CANNOT_RUN
    if any(host.reboot_pending for host in hosts):
        return EXIT_WARN
    return EXIT_OK


def _in_inventory_order(checked: Inventory, run: RunResult) -> list[HostResult]:
    ordered = [run.hosts.get(name) or HostResult(host=name) for name in checked.host_names]
    ordered += [result for name, result in run.hosts.items() if name not in checked.host_names]
    return ordered


def split_tags(values: tuple[str, ...]) -> tuple[str, ...]:
    """--tags a,b --tags c -> (a, b, c)."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def _keep_report(outcome: ProvisionOutcome) -> None:
    """The run directory keeps the report next to Ansible's own artifacts."""
    write_json(outcome.run.run_dir / "report.json", outcome.to_dict())
