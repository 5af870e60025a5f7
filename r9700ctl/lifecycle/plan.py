"""What an upgrade or a rollback would do, per node, decided before anything changes.

Pure functions: the controller feeds them what each node reported (its state files from
r9700_lifecycle's `info` step, and what r9700_preflight resolved for the target release) and
gets a NodePlan per node and the batches. Bad options are BadInput (exit 64, nothing contacted).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from r9700ctl.errors import BadInput
from r9700ctl.manifest import Manifest, version_key

MOVE = "move"  # the node's release or driver changes
NOTHING = "nothing"  # already there: a second upgrade changes nothing
REFUSED = "refused"  # preflight refused it, or it has no state to roll back to
UNREACHABLE = "unreachable"

_SERIAL = re.compile(r"^\s*(\d+)\s*(%?)\s*$")


def check_target(rocm: str, manifest: Manifest) -> str:
    """--rocm: 'auto' or a release of the manifest (one line naming the known ones otherwise)."""
    text = rocm.strip()
    if text == "auto" or manifest.release(text) is not None:
        return text
    known = ", ".join(manifest.release_names())
    raise BadInput(
        what=f"--rocm {rocm}: not a ROCm release r9700ctl knows",
        hint=f"use auto or one of {known} (r9700ctl known releases: see the manifest)",
    )


def batch_size(serial: str | None, hosts: int) -> int:
    """--serial N or P% of the inventory's hosts (at least 1); larger than the inventory is refused."""
    if hosts < 1:
        raise BadInput(what="the inventory has no host to work on")
    if serial is None or serial == "":
        return 1
    match = _SERIAL.match(serial)
    if not match:
        raise BadInput(
            what=f"--serial {serial}: not a count or a percentage", hint="use e.g. --serial 1 or 25%"
        )
    value, percent = int(match.group(1)), bool(match.group(2))
    if percent:
        if not 1 <= value <= 100:
            raise BadInput(what=f"--serial {serial}: a percentage must be 1% to 100%")
        return max(1, hosts * value // 100)
    if value < 1:
        raise BadInput(what=f"--serial {serial}: a batch needs at least one node", hint="use --serial 1")
    if value > hosts:
        raise BadInput(
            what=f"--serial {value}: larger than the inventory ({hosts} host(s))",
            hint=f"use --serial {hosts} or less, or a percentage such as 50%",
        )
    return value


def fail_percent(value: float | None) -> float:
    if value is None:
        return 0.0
    if not 0 <= value <= 100:
        raise BadInput(
            what=f"--max-fail-percent {value:g}: must be 0 to 100", hint="0 stops at the first failure"
        )
    return float(value)


def batches(hosts: list[str], size: int) -> list[list[str]]:
    return [hosts[i : i + size] for i in range(0, len(hosts), size)]


@dataclass
class NodePlan:
    host: str
    action: str  # MOVE, NOTHING, REFUSED, UNREACHABLE
    from_release: str = ""
    from_driver: str = ""
    to_release: str = ""
    to_driver: str = ""
    reboot: str = "no"  # "yes", "no", or "needed, not done here: <why>"
    downgrade: bool = False
    why: str = ""
    holders: list[str] = field(default_factory=list)  # processes holding /dev/kfd now ("PID 7 (cmd)")

    @property
    def driver_changes(self) -> bool:
        return self.action == MOVE and self.from_driver != self.to_driver

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def kernel_line(self) -> str:
        """One line of kernel-upgrade --check."""
        if self.action in (REFUSED, UNREACHABLE):
            return f"{self.host}: {self.action.upper()}: {self.why}"
        if self.action == NOTHING:
            return f"{self.host}: nothing to do, kernel {self.from_release or '?'} is the newest of its line"
        return (
            f"{self.host}: kernel {self.from_release or '?'} -> {self.to_release} ({self.why}); amdgpu built "
            f"by DKMS and checked before the reboot; reboot: {self.reboot}"
        )

    def line(self) -> str:
        """One line of the --check plan."""
        if self.action in (REFUSED, UNREACHABLE):
            return f"{self.host}: {self.action.upper()}: {self.why}"
        source = f"ROCm {self.from_release or '?'} (amdgpu {self.from_driver or '?'})"
        if self.action == NOTHING:
            return f"{self.host}: nothing to do, already at {source}"
        target = f"ROCm {self.to_release} (amdgpu {self.to_driver})"
        kind = "downgrade" if self.downgrade else "upgrade"
        held = (
            f"; /dev/kfd held by {', '.join(self.holders)} (stopped only with --force)"
            if self.holders
            else ""
        )
        return f"{self.host}: {kind} {source} -> {target}; reboot: {self.reboot}{held}"


def plan_node(
    host: str,
    info: dict[str, Any],
    resolved: dict[str, Any],
    *,
    target_release: str | None = None,
    manifest: Manifest,
    reboot_allowed: bool = True,
) -> NodePlan:
    """One node's plan from its `info` (state files, systemd) and the release preflight resolved.

    target_release: the release to go to (rollback: the node's state.prev.json names it); None:
    what preflight resolved for --rocm.
    """
    state = info.get("state") or {}
    plan = NodePlan(
        host=host,
        action=MOVE,
        from_release=str(state.get("rocm_version") or ""),
        from_driver=str(state.get("amdgpu_version") or ""),
        holders=[f"PID {h.get('pid')} ({h.get('command')})" for h in info.get("kfd_holders") or []],
    )
    to = target_release or str(resolved.get("rocm_version") or "")
    release = manifest.release(to) if to else None
    if release is None:
        return _refused(plan, f"no release to go to (preflight resolved '{to or 'nothing'}')")
    plan.to_release = to
    plan.to_driver = (
        str(resolved.get("amdgpu_version") or release.amdgpu) if not target_release else release.amdgpu
    )
    if not state:
        plan.why = "no /etc/r9700ctl/state.json: never provisioned by this r9700ctl"
    if plan.from_release == plan.to_release and plan.from_driver == plan.to_driver:
        plan.action = NOTHING
        return plan
    plan.downgrade = bool(plan.from_release) and version_key(plan.to_release) < version_key(plan.from_release)
    if plan.from_driver != plan.to_driver and str(resolved.get("driver_source") or "dkms") == "dkms":
        plan.reboot = _reboot(info, resolved, reboot_allowed)
    return plan


def plan_kernel(host: str, info: dict[str, Any]) -> NodePlan:
    """kernel-upgrade --check for one node, from r9700-lifecycle kernel-plan (apt-get -s of its line)."""
    found = info.get("kernel_plan") or {}
    running = str(found.get("running") or info.get("kernel") or "")
    plan = NodePlan(host=host, action=MOVE, from_release=running)
    if found.get("error"):
        return _refused(plan, str(found["error"]))
    plan.to_release = str(found.get("to") or "")
    if not plan.to_release:
        plan.action = NOTHING
        return plan
    installs = found.get("installs") or {}
    plan.why = "installs " + (", ".join(f"{n} {v}" for n, v in sorted(installs.items())) or "nothing new")
    plan.reboot = _reboot(info, {}, True)
    return plan


def _reboot(info: dict[str, Any], resolved: dict[str, Any], reboot_allowed: bool) -> str:
    """Whether the driver change reboots this node, decided from its facts (never a lab switch)."""
    if not reboot_allowed:
        return "needed, not done here: r9700_reboot is false"
    if not resolved.get("runtime", info.get("systemd")):
        return "needed, not done here: no init system to reboot with (runtime steps off)"
    return "yes"


def _refused(plan: NodePlan, why: str) -> NodePlan:
    plan.action = REFUSED
    plan.why = why
    return plan


def refused(host: str, why: str, info: dict[str, Any] | None = None) -> NodePlan:
    state = (info or {}).get("state") or {}
    return NodePlan(
        host=host,
        action=REFUSED,
        from_release=str(state.get("rocm_version") or ""),
        from_driver=str(state.get("amdgpu_version") or ""),
        why=why,
    )


def unreachable(host: str, why: str) -> NodePlan:
    return NodePlan(host=host, action=UNREACHABLE, why=why)
