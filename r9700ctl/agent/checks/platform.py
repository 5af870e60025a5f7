"""C3 platform P2P prerequisites: IOMMU mode, ACS redirect between GPUs, large BAR, NUMA map.

The rules are the shared judges of r9700ctl/agent/rules (the bundle diagnosis and preflight's P2P
decision call the same ones); here they get the live node's facts from sysfs:
- IOMMU (rules/iommu.py): the IOMMU group type of each GPU, the IOMMUs registered, the command line.
- ACS (rules/acs.py): the redirect controls of the switch ports two GPUs share.
- BAR (rules/bar.py): the largest prefetchable BAR against the VRAM (CONFIG_HSA_AMD_P2P).
- Topology: NUMA node and root port per GPU (reported only, SKIP: it explains cross-socket pairs).
"""

from __future__ import annotations

from typing import Any

from r9700ctl.agent import codes, sysfs
from r9700ctl.agent.checks import _measure, register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.parsers import cmdline
from r9700ctl.agent.result import PASS, SKIP, CheckResult
from r9700ctl.agent.rules import acs, bar, iommu

GIB = 2**30


def _cmdline(ctx: AgentContext) -> cmdline.KernelCmdline:
    text = ctx.environment.get("cmdline") or sysfs.read_text(ctx.root / "proc/cmdline") or ""
    return cmdline.parse(text, "/proc/cmdline")


def _iommu_result(ctx: AgentContext) -> CheckResult:
    kernel_cmdline = _cmdline(ctx)
    types = {g.subject: g.iommu_group_type or "" for g in ctx.gpus if g.pci_address}
    units = sysfs.iommu_units(ctx.root)
    facts = iommu.IommuFacts(
        gpus=len(ctx.gpus),
        passthrough_param=kernel_cmdline.iommu_passthrough or kernel_cmdline.amd_iommu == "pt",
        disabled_param=kernel_cmdline.iommu_disabled,
        group_types=types,
        units=tuple(units),
    )
    verdict = iommu.judge(facts, expected=bool(ctx.threshold("platform.iommu_passthrough_expected")))
    return CheckResult(
        id="platform.iommu",
        subject="node",
        status=verdict.status,
        metric="iommu_mode",
        value=verdict.mode,
        threshold=iommu.THRESHOLD,
        hint=codes.hint(verdict.code, verdict.reason) if verdict.status != PASS else "",
        evidence={
            "group_types": {s: t or None for s, t in types.items()},
            "iommu_units": units,
            "cmdline_iommu": [t for t in kernel_cmdline.tokens if "iommu" in t],
        },
        code=verdict.code,
    )


def _acs_result(ctx: AgentContext) -> CheckResult:
    gpus = [g for g in ctx.gpus if g.pci_address]
    chains = {g.subject: sysfs.bridge_chain(ctx.root, g.pci_address) for g in gpus}
    paths = {g.subject: [*chains[g.subject], g.pci_address] for g in gpus}
    read: dict[str, dict[str, bool] | None] = {}
    states: dict[str, acs.PortAcs] = {}
    for path in paths.values():
        for port in path[:-1]:
            if port not in read:
                read[port] = sysfs.acs_control(ctx.root, port)
                flags = read[port]
                states[port] = (
                    acs.PortAcs(readable=False, why_unreadable="extended PCI config space needs root")
                    if flags is None
                    else acs.PortAcs(tuple(f for f in acs.REDIRECT_FLAGS if flags.get(f)))
                )
    verdict = acs.judge(paths, states, noacs_param=_cmdline(ctx).pci_noacs)
    evidence: dict[str, Any] = {"chains": chains, "acs": read}
    if verdict.redirecting:
        evidence["redirecting"] = verdict.redirecting
    if verdict.status == PASS and verdict.reason:
        evidence["note"] = verdict.reason
    metric, value, unit = "redirecting_bridges", len(verdict.redirecting), "bridges"
    if verdict.status == PASS and verdict.shared_pairs == 0:
        metric, value, unit = "pairs_behind_a_shared_switch", 0, "pairs"
    elif verdict.code == acs.UNREADABLE_CODE:
        value = None
    elif verdict.code == acs.NOT_APPLICABLE:
        metric, value, unit = "", None, ""
    port = next(iter(sorted(verdict.redirecting)), "<port>")
    hint = ""
    if verdict.code == acs.CODE:
        hint = codes.hint(verdict.code, verdict.reason, port=port)
    elif verdict.status != PASS:
        hint = verdict.reason
    return CheckResult(
        id="platform.acs",
        subject="node",
        status=verdict.status,
        metric=metric,
        value=value,
        unit=unit,
        threshold=acs.THRESHOLD,
        hint=hint,
        evidence=evidence,
        code=verdict.code,
    )


def _bar_results(ctx: AgentContext) -> list[CheckResult]:
    results = []
    fraction = ctx.threshold("platform.bar_min_fraction_of_vram")
    for gpu in ctx.gpus:
        bar_gib = round(gpu.bar0_bytes / GIB, 3) if gpu.bar0_bytes else None
        evidence = {"pci": gpu.pci_address, "bar_bytes": gpu.bar0_bytes, "vram_bytes": gpu.vram_bytes}
        common = {
            "id": "platform.bar",
            "subject": gpu.subject,
            "metric": "bar0",
            "value": bar_gib,
            "unit": "GiB",
        }
        if fraction is None and gpu.bar0_bytes is not None and gpu.vram_bytes:
            verdict = ctx.unjudged("platform.bar_min_fraction_of_vram", "the large-BAR rule")
            results.append(
                CheckResult(
                    **common,
                    status=verdict.status,
                    threshold=verdict.threshold,
                    hint=verdict.reason,
                    evidence=evidence,
                    code=verdict.code,
                )
            )
            continue
        judged = bar.judge(gpu.bar0_bytes, gpu.vram_bytes, float(fraction if fraction is not None else 1.0))
        hint = ""
        if judged.code == bar.CODE:
            hint = codes.hint(judged.code, judged.reason)
        elif judged.status != PASS:
            hint = f"{judged.reason} (no sysfs resource file or memory size)"
        results.append(
            CheckResult(
                **common,
                status=judged.status,
                threshold=judged.threshold,
                hint=hint,
                evidence=evidence,
                code=judged.code,
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
        threshold="reported only",
        hint=note or "reported only: where each GPU sits (NUMA node, root port)",
        evidence={"gpus": rows, "root_ports": root_ports, "numa_nodes": numa_nodes},
        code="NUMA_SPAN" if note else "REPORTED_ONLY",
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
        threshold="reported only",
        hint="; ".join(notes) or "reported only: the P2P-related variables of this environment",
        evidence={"variables": found},
        code="P2P_ENV_NOTE",
    )


@register(
    id="platform",
    levels=from_level("config"),
    needs_gpu=False,
    order=12,
    thresholds=("platform.iommu_passthrough_expected", "platform.bar_min_fraction_of_vram"),
)
def run(ctx: AgentContext) -> list[CheckResult]:
    if not ctx.gpus:
        return _measure.no_gpu("platform.iommu", "GPUs to judge")
    return [
        _iommu_result(ctx),
        _acs_result(ctx),
        *_bar_results(ctx),
        _topology_result(ctx),
        _p2p_env_result(ctx),
    ]
