"""May PCIe peer-to-peer between this node's GPUs be switched on? (pure: facts in, a decision out)

The R9700 has no card-to-card bridge: peer traffic crosses PCIe, and it works only where
  * every GPU exposes its whole VRAM through a BAR: the kernel enables P2P "only ... between GPUs
    with large memory BARs that expose the entire VRAM in PCIe bus address space" (Linux
    drivers/gpu/drm/amd/amdkfd/Kconfig, HSA_AMD_P2P);
  * the IOMMU does not translate the GPUs' DMA (passthrough, iommu=pt, or off): RCCL warns at start
    that a missing iommu=pt "can lead to system instability or hang" (RCCL src/init.cc);
  * no switch between two GPUs redirects peer requests upstream (ACS P2P Request/Completion
    Redirect, PCI_ACS_RR/PCI_ACS_CR in include/uapi/linux/pci_regs.h). Linux itself sets it on
    root ports and switch downstream ports when the IOMMU is on (pci_request_acs), so it is judged
    only on the ports of a switch that two GPUs share, never on a card's own switch or a root port.
Even then owners report host hangs with direct P2P on 4x R9700 (ROCm/rocm-systems#11348) and
RCCL's P2P transport failing there (ROCm/rccl-tests#162), so `r9700_p2p: auto` turns P2P on only
when every fact above is seen AND no known issue that applies to the node's GPU count and release
(data/manifest.yaml `known_issues` whose workaround is this policy's NCCL_P2P_DISABLE=1) says off;
the first such issue is named as the reason. `on` overrides both, and the caller warns.

One place for these rules: the preflight judge (provision and doctor) decides from nodefacts'
sysfs facts, and the bundle doctor judges ACS between GPUs with the same `ports_between`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent.result import PASS
from r9700ctl.agent.rules import acs, bar, iommu
from r9700ctl.agent.units import size_text

MODES = ("auto", "on", "off")
# ACS control bits that send peer traffic to the root complex, and the one rule of which ports
# between two GPUs matter: the agent's (r9700ctl/agent/rules/acs.py), as the checks judge them.
ACS_REQUEST_REDIRECT = acs.REQUEST_REDIRECT
ACS_COMPLETION_REDIRECT = acs.COMPLETION_REDIRECT
ports_between = acs.ports_between


@dataclass(frozen=True)
class GpuUnderTest:
    """A GPU the decision covers: its PCI address and the VRAM its BAR must cover (None: unknown)."""

    address: str
    vram_bytes: int | None


@dataclass(frozen=True)
class KnownHazard:
    """A known issue of this node whose workaround is P2P off (the caller matched it to the node)."""

    id: str
    title: str
    source: str

    def text(self) -> str:
        return f"known issue {self.id} ({self.title}; {self.source})"


@dataclass
class Decision:
    """The P2P choice for one node, with the facts behind it (recorded in /etc/r9700ctl/node.json)."""

    mode: str  # what was asked: auto, on or off
    requested_by: str  # the knob that asked ("r9700_p2p", or a variable of r9700_env_extra)
    enabled: bool
    reason: str  # one line for the provision summary
    blockers: list[str] = field(default_factory=list)  # facts that keep P2P off
    checked: list[str] = field(default_factory=list)  # facts seen to allow it
    known_issues: list[str] = field(default_factory=list)  # ids of the known issues that say off

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "requested_by": self.requested_by,
            "enabled": self.enabled,
            "state": "on" if self.enabled else "off",
            "reason": self.reason,
            "blockers": list(self.blockers),
            "checked": list(self.checked),
            "known_issues": list(self.known_issues),
        }


def largest_prefetchable_bar(bars: Sequence[Mapping[str, Any]]) -> int | None:
    sizes = [int(b.get("size") or 0) for b in bars if b.get("prefetch") and b.get("memory", True)]
    return max(sizes) if sizes else None


def blockers(gpus: Sequence[GpuUnderTest], facts: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(what stops P2P, what was seen to allow it) from nodefacts' `p2p` facts, judged by the same
    rules as the agent's platform checks and doctor (r9700ctl/agent/rules: bar, iommu, acs)."""
    stops: list[str] = []
    seen: list[str] = []
    per_gpu = facts.get("gpus") or {}
    missing = [g.address for g in gpus if g.address not in per_gpu]
    if missing:
        source = facts.get("source") or "sysfs"
        stops.append(f"no BAR, IOMMU or ACS facts for {', '.join(missing)} (from {source})")
        return stops, seen
    for gpu in gpus:
        info = per_gpu[gpu.address]
        largest = largest_prefetchable_bar(info.get("bars") or [])
        vram = info.get("vram_bytes") or gpu.vram_bytes
        judged = bar.judge(largest, vram)
        if largest is None:
            stops.append(f"{gpu.address}: no prefetchable memory BAR found")
        elif judged.code == bar.UNKNOWN_CODE:
            stops.append(
                f"{gpu.address}: VRAM size unknown, cannot tell whether BAR {size_text(largest)} covers it"
            )
        elif judged.status != PASS:
            stops.append(
                f"{gpu.address}: BAR {size_text(largest)} < VRAM {size_text(vram)} "
                "(enable Resizable BAR / Above 4G decoding in the firmware)"
            )
        else:
            seen.append(f"{gpu.address}: BAR {size_text(largest)} >= VRAM {size_text(vram)}")
        group, kind = info.get("iommu_group"), info.get("iommu_type")
        judged = _iommu(len(gpus), gpu.address, group, kind)
        if judged.status == PASS and judged.mode == "off":
            seen.append(f"{gpu.address}: no IOMMU group (IOMMU off)")
        elif judged.status == PASS:
            seen.append(f"{gpu.address}: IOMMU passthrough (group {group})")
        else:  # translating, or a type that does not say (not seen to allow it)
            verb = "translates" if judged.translated else "may translate"
            stops.append(
                f"{gpu.address}: the IOMMU {verb} its DMA (group {group} type {kind or 'unknown'}; "
                f"add {iommu.PASSTHROUGH_PARAM} to the kernel command line)"
            )
    stops_acs, seen_acs = _acs(gpus, per_gpu, facts.get("bridges") or {})
    return stops + stops_acs, seen + seen_acs


def _iommu(gpus: int, address: str, group: str | None, kind: str | None) -> iommu.IommuVerdict:
    """One GPU's IOMMU by the one rule (agent/rules/iommu.py) from its group: none means the IOMMU is
    off; a group is judged by its type alone (P2P weighs no command line: the group says more)."""
    units = () if group is None else None
    return iommu.judge(iommu.IommuFacts(gpus=gpus, group_types={address: kind or ""}, units=units))


def _acs(
    gpus: Sequence[GpuUnderTest], per_gpu: Mapping[str, Any], bridges: Mapping[str, Any]
) -> tuple[list[str], list[str]]:
    """The ACS rule over nodefacts' bridges: each port two GPUs share, with what it showed."""
    paths = {g.address: list(per_gpu[g.address].get("path") or []) for g in gpus}
    states = {}
    for path in paths.values():
        for port in path[:-1]:
            found = bridges.get(port) or {}
            if found.get("error"):
                states[port] = acs.PortAcs(readable=False, why_unreadable=str(found["error"]))
            else:
                states[port] = acs.PortAcs.from_control(int(found.get("control") or 0))
    verdict = acs.judge(paths, states)
    stops, seen = [], []
    for pair, port, outcome in verdict.judged:
        control = (bridges.get(port) or {}).get("control")
        if outcome == "unreadable":
            stops.append(f"ACS of {port} ({pair}) unknown: {verdict.unreadable[port]}")
        elif outcome == "redirects":
            stops.append(
                f"ACS on {port} redirects peer traffic between {pair} (control 0x{int(control):04x})"
            )
        elif control is None:
            seen.append(f"{port} ({pair}): no ACS capability")
        else:
            seen.append(f"{port} ({pair}): no ACS redirect")
    return stops, seen


def decide(
    mode: str,
    requested_by: str,
    gpus: Sequence[GpuUnderTest],
    facts: Mapping[str, Any],
    hazards: Sequence[KnownHazard] = (),
) -> Decision:
    """The node's P2P state; `on` with unmet facts stays enabled with its blockers: the caller refuses.

    `hazards` are the known issues of this node whose workaround is P2P off: `auto` decides off and
    names the first; `on` stays on and lists them in `known_issues` for the caller's warning.
    """
    if mode == "off":
        return Decision(mode, requested_by, False, f"off: {requested_by} asks for it")
    if len(gpus) < 2:
        return Decision(mode, requested_by, False, f"off: {len(gpus)} GPU(s), no peer to talk to")
    stops, seen = blockers(gpus, facts)
    issues = [h.id for h in hazards]
    if mode == "on":
        reason = f"on: {requested_by} asks for it" + (f" despite {stops[0]}" if stops else "")
        return Decision(mode, requested_by, True, reason, stops, seen, issues)
    if hazards:
        more = f" (+{len(hazards) - 1} more)" if len(hazards) > 1 else ""
        hardware = f"also {_first(stops)}" if stops else "BAR, IOMMU and ACS would allow it"
        reason = f"off: {hazards[0].text()}{more}; {hardware}"
        return Decision(mode, requested_by, False, reason, stops, seen, issues)
    if stops:
        return Decision(mode, requested_by, False, f"off: {_first(stops)}", stops, seen)
    reason = "on: every GPU's BAR covers its VRAM, IOMMU passthrough or off, no ACS redirect between GPUs"
    return Decision(mode, requested_by, True, reason, stops, seen)


def _first(stops: Sequence[str]) -> str:
    return stops[0] + (f" (+{len(stops) - 1} more)" if len(stops) > 1 else "")
