"""C3 platform P2P prerequisites: IOMMU mode, ACS redirect between GPUs, large BAR, NUMA map.

- IOMMU: the IOMMU group type of each GPU ("identity" = passthrough), else the command line.
  RCCL warns without iommu=pt: "can lead to system instability or hang" (ROCm/vllm#390).
- ACS: request/completion redirect on a bridge between two GPUs sends their peer traffic up
  through the root complex. Bridges of the card itself (its on-card switch) are on the path
  anyway and are not judged; GPUs under different root ports cross the root complex by design.
- BAR: the kernel enables AMD P2P only between GPUs whose BAR exposes the whole VRAM
  (CONFIG_HSA_AMD_P2P): BAR0 >= VRAM, else FAIL.
- Topology: NUMA node and root port per GPU (reported only, SKIP: it explains cross-socket pairs).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from r9700ctl.agent import sysfs
from r9700ctl.agent.checks import register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.gpus import GpuInfo
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.parsers import cmdline
from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN, CheckResult
from r9700ctl.agent.units import size_text

IOMMU_HINT = (
    "IOMMU in translated mode: add iommu=pt to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub "
    "and reboot (RCCL warns that without it the system can hang; r9700ctl provision sets it)"
)
ACS_HINT = (
    "ACS redirect is on for bridge(s) {bridges} between GPUs {pairs}: peer traffic detours through the root "
    "complex; disable ACS in the BIOS, boot with pci=noacs, or `setpci -s <bdf> ECAP_ACS+6.w=0000` (as root)"
)
BAR_HINT = (
    "the GPU's BAR is smaller than its VRAM: enable 'Above 4G Decoding' and 'Resizable BAR' in the BIOS; "
    "the kernel enables AMD PCIe P2P only with a large BAR that exposes the whole VRAM"
)
GIB = 2**30


def _iommu_result(ctx: AgentContext) -> CheckResult:
    text = ctx.environment.get("cmdline") or sysfs.read_text(ctx.root / "proc/cmdline") or ""
    kernel_cmdline = cmdline.parse(text, "/proc/cmdline")
    passthrough_flag = kernel_cmdline.iommu_passthrough or kernel_cmdline.amd_iommu == "pt"
    disabled_flag = kernel_cmdline.iommu_disabled
    types = {g.subject: g.iommu_group_type for g in ctx.gpus if g.pci_address}
    units = sysfs.iommu_units(ctx.root)
    evidence: dict[str, Any] = {
        "group_types": types,
        "iommu_units": units,
        "cmdline_iommu": [t for t in kernel_cmdline.tokens if "iommu" in t],
    }
    expected = bool(ctx.threshold("platform.iommu_passthrough_expected"))
    threshold = "passthrough (iommu=pt) or IOMMU off"
    known = {s: t for s, t in types.items() if t}
    translated = sorted(s for s, t in known.items() if t.upper().startswith("DMA") or t == "unmanaged")
    if translated:
        status = WARN if expected else PASS
        return CheckResult(
            id="platform.iommu",
            subject="node",
            status=status,
            metric="iommu_mode",
            value="translated",
            unit="",
            threshold=threshold,
            hint=IOMMU_HINT + f" (GPUs in translated domains: {', '.join(translated)})",
            evidence=evidence,
        )
    if known:
        return CheckResult(
            id="platform.iommu",
            subject="node",
            status=PASS,
            metric="iommu_mode",
            value="passthrough",
            unit="",
            threshold=threshold,
            hint="",
            evidence=evidence,
        )
    if not units or disabled_flag:
        return CheckResult(
            id="platform.iommu",
            subject="node",
            status=PASS,
            metric="iommu_mode",
            value="off",
            unit="",
            threshold=threshold,
            hint="",
            evidence=evidence,
        )
    if passthrough_flag:
        return CheckResult(
            id="platform.iommu",
            subject="node",
            status=PASS,
            metric="iommu_mode",
            value="passthrough (cmdline)",
            unit="",
            threshold=threshold,
            hint="",
            evidence=evidence,
        )
    return CheckResult(
        id="platform.iommu",
        subject="node",
        status=WARN if expected else PASS,
        metric="iommu_mode",
        value="unknown",
        unit="",
        threshold=threshold,
        hint="an IOMMU is active and iommu=pt is not on the kernel command line; " + IOMMU_HINT,
        evidence=evidence,
    )


def _card_bridges(ctx: AgentContext, gpu: GpuInfo) -> set[str]:
    """The card's own bridges (on-card switch ports) from its upstream port down."""
    chain = sysfs.bridge_chain(ctx.root, gpu.pci_address)
    top = gpu.link.at or gpu.pci_address
    return set(chain[chain.index(top) :]) if top in chain else set()


def _acs_result(ctx: AgentContext) -> CheckResult:
    threshold = "no ACS redirect on bridges between GPUs"
    gpus = [g for g in ctx.gpus if g.pci_address]
    if len(gpus) < 2:
        return CheckResult(
            id="platform.acs", subject="node", status=SKIP, threshold=threshold, hint="needs >= 2 GPUs"
        )
    chains = {g.subject: sysfs.bridge_chain(ctx.root, g.pci_address) for g in gpus}
    own = {g.subject: _card_bridges(ctx, g) for g in gpus}
    judged: dict[str, dict[str, bool] | None] = {}
    redirecting: dict[str, list[str]] = {}
    shared_pairs = 0
    for a, b in combinations(gpus, 2):
        chain_a = [x for x in chains[a.subject] if x not in own[a.subject]]
        chain_b = [x for x in chains[b.subject] if x not in own[b.subject]]
        common = [x for x in chain_a if x in chain_b]
        if not common:
            continue  # different root ports: the path crosses the root complex whatever ACS says
        shared_pairs += 1
        lowest = common[-1]
        between = chain_a[chain_a.index(lowest) + 1 :] + chain_b[chain_b.index(lowest) + 1 :]
        for bridge in between:
            if bridge not in judged:
                judged[bridge] = sysfs.acs_control(ctx.root, bridge)
            flags = judged[bridge]
            if flags and (flags.get("ReqRedir") or flags.get("CmpltRedir")):
                redirecting.setdefault(bridge, []).append(f"{a.subject}-{b.subject}")
    evidence: dict[str, Any] = {"chains": chains, "acs": judged}
    if shared_pairs == 0:
        return CheckResult(
            id="platform.acs",
            subject="node",
            status=PASS,
            metric="pairs_behind_a_shared_switch",
            value=0,
            unit="pairs",
            threshold=threshold,
            hint="",
            evidence={
                **evidence,
                "note": "every GPU has its own root port: peer traffic crosses the root complex by design",
            },
        )
    unreadable = sorted(b for b, f in judged.items() if f is None)
    if redirecting:
        pairs = sorted({p for ps in redirecting.values() for p in ps})
        return CheckResult(
            id="platform.acs",
            subject="node",
            status=WARN,
            metric="redirecting_bridges",
            value=len(redirecting),
            unit="bridges",
            threshold=threshold,
            hint=ACS_HINT.format(bridges=", ".join(sorted(redirecting)), pairs=", ".join(pairs)),
            evidence={**evidence, "redirecting": redirecting},
        )
    if unreadable:
        return CheckResult(
            id="platform.acs",
            subject="node",
            status=SKIP,
            metric="redirecting_bridges",
            value=None,
            unit="bridges",
            threshold=threshold,
            hint=f"cannot read the ACS control of {', '.join(unreadable)}: extended PCI config space "
            "needs root (rerun as root)",
            evidence=evidence,
        )
    return CheckResult(
        id="platform.acs",
        subject="node",
        status=PASS,
        metric="redirecting_bridges",
        value=0,
        unit="bridges",
        threshold=threshold,
        hint="",
        evidence=evidence,
    )


def _bar_results(ctx: AgentContext) -> list[CheckResult]:
    results = []
    fraction = ctx.threshold("platform.bar_min_fraction_of_vram")
    for gpu in ctx.gpus:
        bar_gib = round(gpu.bar0_bytes / GIB, 3) if gpu.bar0_bytes else None
        evidence = {"pci": gpu.pci_address, "bar_bytes": gpu.bar0_bytes, "vram_bytes": gpu.vram_bytes}
        if gpu.bar0_bytes is None or not gpu.vram_bytes:
            results.append(
                CheckResult(
                    id="platform.bar",
                    subject=gpu.subject,
                    status=SKIP,
                    metric="bar0",
                    value=bar_gib,
                    unit="GiB",
                    threshold="BAR0 >= VRAM",
                    hint="BAR or VRAM size unknown (no sysfs resource file or memory size)",
                    evidence=evidence,
                )
            )
            continue
        if fraction is None:
            verdict = ctx.unjudged("platform.bar_min_fraction_of_vram", "the large-BAR rule")
            results.append(
                CheckResult(
                    id="platform.bar",
                    subject=gpu.subject,
                    status=verdict.status,
                    metric="bar0",
                    value=bar_gib,
                    unit="GiB",
                    threshold=verdict.threshold,
                    hint=verdict.reason,
                    evidence=evidence,
                )
            )
            continue
        # The BAR is a power of two; VRAM as reported is slightly below the nominal size.
        needed = float(fraction) * gpu.vram_bytes
        status = PASS if gpu.bar0_bytes >= needed else FAIL
        results.append(
            CheckResult(
                id="platform.bar",
                subject=gpu.subject,
                status=status,
                metric="bar0",
                value=bar_gib,
                unit="GiB",
                threshold=f">= {float(fraction):g} x VRAM ({size_text(gpu.vram_bytes)})",
                hint="" if status == PASS else BAR_HINT,
                evidence=evidence,
            )
        )
    return results


def _topology_result(ctx: AgentContext) -> CheckResult:
    rows = {}
    for gpu in ctx.gpus:
        chain = sysfs.bridge_chain(ctx.root, gpu.pci_address) if gpu.pci_address else []
        rows[gpu.subject] = {
            "pci": gpu.pci_address,
            "numa_node": gpu.numa_node,
            "root_port": chain[0] if chain else None,
            "slot_port": gpu.link.slot_port or None,
        }
    numa_nodes = sorted({r["numa_node"] for r in rows.values() if r["numa_node"] is not None})
    root_ports = sorted({r["root_port"] for r in rows.values() if r["root_port"]})
    note = ""
    if len(numa_nodes) > 1:
        note = (
            f"GPUs span NUMA nodes {numa_nodes}: pairs across sockets are expected to be slower; "
            "they are compared within their class"
        )
    return CheckResult(
        id="platform.topology",
        subject="node",
        status=SKIP,
        metric="numa_nodes",
        value=len(numa_nodes) or None,
        unit="",
        threshold="reported only",
        hint=note or "reported only: where each GPU sits (NUMA node, root port)",
        evidence={"gpus": rows, "root_ports": root_ports, "numa_nodes": numa_nodes},
    )


def _p2p_env_result(ctx: AgentContext) -> CheckResult:
    variables = ctx.environment.get("variables", {})
    keys = ("HSA_FORCE_FINE_GRAIN_PCIE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_IGNORE_CPU_AFFINITY")
    found = {k: variables.get(k) for k in keys if k in variables}
    notes = []
    if found.get("NCCL_P2P_DISABLE") == "0":
        notes.append("NCCL_P2P_DISABLE=0 is already the default: it changes nothing")
    if found.get("NCCL_P2P_DISABLE") == "1":
        notes.append("P2P is disabled for this environment: stable on R9700 (rocm-systems#11348), slower")
    return CheckResult(
        id="platform.p2p_env",
        subject="node",
        status=SKIP,
        metric="variables",
        value=len(found),
        unit="",
        threshold="reported only",
        hint="; ".join(notes) or "reported only: the P2P-related variables of this environment",
        evidence={"variables": found},
    )


@register(
    id="platform",
    family="platform",
    levels=from_level("config"),
    needs_gpu=False,
    order=12,
    thresholds=("platform.iommu_passthrough_expected", "platform.bar_min_fraction_of_vram"),
)
def run(ctx: AgentContext) -> list[CheckResult]:
    if not ctx.gpus:
        return [
            CheckResult(
                id="platform.iommu",
                subject="node",
                status=SKIP,
                threshold="GPUs to judge",
                hint="no GPU found",
            )
        ]
    return [
        _iommu_result(ctx),
        _acs_result(ctx),
        *_bar_results(ctx),
        _topology_result(ctx),
        _p2p_env_result(ctx),
    ]
