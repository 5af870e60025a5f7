"""`r9700ctl doctor`: can the tool reach and work on these hosts, and what will stop it?

Per host, in parallel threads: the SSH checks of sshcheck.py (resolve, connect, host key, login,
shell, sudo, python3), then the preflight that the r9700_preflight role runs: agent/nodefacts.py is streamed
to the node's python3 over the same SSH session and its JSON facts are judged by r9700ctl/preflight/ on this
machine. One implementation for both, so the doctor and the role cannot drift apart.

Library code: progress goes through a callback, nothing is printed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from r9700ctl import sshcheck
from r9700ctl.agent import schemas
from r9700ctl.agent.result import ERROR, PASS, SKIP, WARN, CheckResult, exit_code_for, finding, overall
from r9700ctl.errors import EXIT_CANNOT_RUN
from r9700ctl.preflight import check_dict

SCHEMA = schemas.DOCTOR
# Hosts checked at once: each is one SSH connection doing little; more would only queue on the network.
MAX_PARALLEL_HOSTS = 32
# nodefacts reads sysfs, os-release and apt's cache: seconds on a healthy node.
NODEFACTS_TIMEOUT_S = 120.0


class InventoryHost(Protocol):
    name: str
    address: str
    port: int | None
    vars: Mapping[str, Any]


@dataclass
class HostReport:
    """Everything the doctor found on one host."""

    name: str
    address: str
    checks: list[CheckResult] = field(default_factory=list)
    reached: bool = False
    duration_s: float = 0.0
    resolved: dict[str, Any] = field(default_factory=dict)  # what preflight resolved (ROCm release ...)

    @property
    def status(self) -> str:
        """The worst check; no check judged (none, or skips only) is INCONCLUSIVE, never PASS."""
        return overall([c.status for c in self.checks])

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.name,
            "address": self.address,
            "reached": self.reached,
            "status": self.status,
            "duration_s": round(self.duration_s, 2),
            "resolved": self.resolved,
            # subject and hint: the field names every r9700ctl check result carries (docs/architecture.md)
            "checks": [{**check_dict(c), "subject": self.name, "hint": c.hint} for c in self.checks],
        }


@dataclass
class DoctorReport:
    inventory: str
    group: str
    hosts: list[HostReport]
    started: str
    finished: str

    @property
    def exit_code(self) -> int:
        """3 when any host could not be reached (its verdict is unknown), else worst status of all."""
        if any(not h.reached for h in self.hosts):
            return EXIT_CANNOT_RUN
        return exit_code_for([c.status for h in self.hosts for c in h.checks])

    def to_dict(self) -> dict[str, Any]:
        from r9700ctl import __version__

        return {
            "schema": SCHEMA,
            "mode": "hosts",
            "toolkit_version": __version__,
            "inventory": self.inventory,
            "group": self.group,
            "started": self.started,
            "finished": self.finished,
            "exit_code": self.exit_code,
            "hosts": [h.to_dict() for h in self.hosts],
        }


Progress = Callable[[str, CheckResult], None]


def doctor_inventory(
    inventory_path: str,
    group: str,
    *,
    accept_new_host_keys: bool = False,
    timeout: float = 10.0,
    progress: Progress | None = None,
    host_done: Callable[[HostReport], None] | None = None,
) -> DoctorReport:
    """Load the inventory (bad input raises BadInput before any host is contacted), then check every host."""
    from r9700ctl.inventory import load_inventory

    inventory = load_inventory(inventory_path, group)
    return check_hosts(
        inventory.hosts,
        inventory=str(inventory_path),
        group=group,
        accept_new_host_keys=accept_new_host_keys,
        timeout=timeout,
        progress=progress,
        host_done=host_done,
    )


def check_hosts(
    hosts: Sequence[InventoryHost],
    *,
    inventory: str = "",
    group: str = "",
    accept_new_host_keys: bool = False,
    timeout: float = 10.0,
    progress: Progress | None = None,
    host_done: Callable[[HostReport], None] | None = None,
) -> DoctorReport:
    """Check every host in parallel threads; callbacks are called one at a time (under a lock)."""
    started = _now()
    lock = threading.Lock()

    def report(host: str, check: CheckResult) -> None:
        if progress is not None:
            with lock:  # one progress line at a time, whichever thread found it
                progress(host, check)

    def one(host: InventoryHost) -> HostReport:
        result = check_host(host, accept_new_host_keys=accept_new_host_keys, timeout=timeout, report=report)
        if host_done is not None:
            with lock:
                host_done(result)
        return result

    # Daemon threads, not a pool: Ctrl-C must end the run at once, not wait for every SSH timeout.
    slots = threading.BoundedSemaphore(MAX_PARALLEL_HOSTS)
    results: dict[int, HostReport] = {}

    def work(index: int, host: InventoryHost) -> None:
        with slots:
            results[index] = one(host)

    threads = [
        threading.Thread(target=work, args=(i, host), name=f"doctor-{host.name}", daemon=True)
        for i, host in enumerate(hosts)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stopped = finding(
        "doctor.internal", ERROR, "the check of this host stopped unexpectedly", code="DOCTOR_INTERNAL_ERROR"
    )
    ordered = [results.get(i) or HostReport(h.name, h.address, [stopped]) for i, h in enumerate(hosts)]
    return DoctorReport(inventory=inventory, group=group, hosts=ordered, started=started, finished=_now())


def check_host(
    host: InventoryHost,
    *,
    accept_new_host_keys: bool = False,
    timeout: float = 10.0,
    report: Callable[[str, CheckResult], None] | None = None,
) -> HostReport:
    """All checks of one host; an unexpected error becomes an ERROR check, never an exception."""
    began = time.monotonic()
    result = HostReport(name=host.name, address=host.address or host.name)

    def add(check: CheckResult) -> None:
        result.checks.append(check)
        if report is not None:
            report(host.name, check)

    try:
        # No port argument: without ansible_port Ansible passes none, so the ssh config's Port applies.
        target = sshcheck.target_for(host.name, host.address, None, host.vars)
        result.address = target.hostname
        outcome = sshcheck.check_connection(
            target, accept_new_host_keys=accept_new_host_keys, timeout=timeout
        )
        for check in outcome.checks:
            add(check)
        if outcome.session is not None:
            result.reached = True
            try:
                _checks_once_logged_in(outcome.session, host, add, result)
            finally:
                outcome.session.close()
    except Exception as exc:  # one host's surprise must not hide the others' results
        add(
            finding(
                "doctor.internal",
                ERROR,
                f"the check stopped unexpectedly: {type(exc).__name__}: {exc}",
                code="DOCTOR_INTERNAL_ERROR",
            )
        )
    result.duration_s = time.monotonic() - began
    return result


def _checks_once_logged_in(
    session: sshcheck.Session, host: InventoryHost, add: Callable[[CheckResult], None], report: HostReport
) -> None:
    shell = sshcheck.check_shell(session)
    add(shell)
    if shell.status != PASS:
        return
    sudo = sshcheck.check_sudo(session)
    add(sudo)
    python = sshcheck.check_python(session)
    add(python)
    if python.status != PASS:
        add(
            finding(
                "preflight", SKIP, "preflight not run: it needs python3 on the node", code="PREFLIGHT_NOT_RUN"
            )
        )
        return
    checks, resolved = run_preflight(
        session, host.vars, as_root=session.target.is_root or sudo.status == PASS
    )
    for check in checks:
        add(check)
    report.resolved = resolved


def run_preflight(
    session: sshcheck.Session, host_vars: Mapping[str, Any], as_root: bool
) -> tuple[list[CheckResult], dict[str, Any]]:
    """Stream agent/nodefacts.py (and the node-package modules it imports) to the node's python3,
    then judge its JSON facts with r9700ctl/preflight.

    Returns the checks and what preflight resolved (ROCm release, suite, gfx targets). As the role's
    preflight does, apt's package lists are refreshed first (r9700_preflight_apt_update, default
    true: only /var/lib/apt/lists changes), else "no headers candidate" would be a stale answer; an
    apt lock holder is named at once instead of waited for.
    """
    from r9700ctl import agentpack, manifest, nodeenv, preflight, variables

    target = session.target
    apt_update = _truthy(host_vars.get("r9700_preflight_apt_update", True)) and as_root
    args: dict[str, Any] = {
        "lock_wait_s": 0,
        "apt_update": apt_update,
        "apt_max_age_s": _seconds(
            host_vars.get(
                "r9700_preflight_apt_cache_valid_time",
                variables.role_default("r9700_preflight", "r9700_preflight_apt_cache_valid_time"),
            )
        ),
    }
    args.update(nodeenv.fact_args(host_vars, target.user))
    command, script = agentpack.stdin_invocation("r9700ctl.agent.nodefacts", args, python=target.python)
    if as_root and not target.is_root:
        command = f"sudo -n {command}"
    try:
        ran = session.run(command, stdin=script, timeout=NODEFACTS_TIMEOUT_S)
    except TimeoutError as exc:
        return [
            finding(
                "preflight.facts",
                ERROR,
                f"gathering node facts did not finish: {exc}",
                code="NODE_FACTS_FAILED",
            )
        ], {}
    try:
        facts = json.loads(ran.stdout)
    except ValueError:
        said = (ran.stderr.strip().splitlines() or [f"exit status {ran.rc}"])[-1]
        return [
            finding(
                "preflight.facts", ERROR, f"gathering node facts failed: {said}", code="NODE_FACTS_FAILED"
            )
        ], {}
    checks = []
    if not as_root:
        checks.append(
            finding(
                "preflight.facts",
                WARN,
                "facts gathered without root (no passwordless sudo): apt lock holders may be unseen",
                fix="give the user passwordless sudo, or log in as root",
                code="FACTS_WITHOUT_ROOT",
            )
        )
    verdict = preflight.judge(facts, dict(host_vars), manifest.load())
    for item in verdict.checks:
        checks.append(
            finding(
                f"preflight.{item.id}",
                item.status,
                item.detail,
                fix=item.hint,
                evidence=dict(item.evidence),
                code=item.code,
            )
        )
    resolved = verdict.resolved
    summary = {
        "rocm_version": resolved.rocm_version,
        "suite": resolved.suite,
        "gfx_targets": resolved.gfx_targets,
        "discrete_gpus": resolved.discrete_gpus,
        "os": resolved.os_key,
        "kernel": resolved.kernel,
        "driver_loaded": resolved.driver_loaded,
        "driver_version": resolved.driver_version,
        "rocm_choice": resolved.rocm_choice,
        "known_issues": resolved.known_issues,
    }
    return checks, summary


def _seconds(value: Any) -> float:
    """A number of seconds from an inventory value; a value that is not one refreshes (0)."""
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return 0.0


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on", "y")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
