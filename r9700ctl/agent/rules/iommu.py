"""Is GPU DMA translated by an IOMMU? RCCL warns at start-up when `iommu=pt` is missing from the
kernel command line: "can lead to system instability or hang" (RCCL src/init.cc; ROCm/vllm#390),
and peer-to-peer copies slow down.

Facts, best first: the IOMMU group type of each GPU (/sys/kernel/iommu_groups/N/type, Linux
5.11+: "identity" is passthrough, "DMA" and "DMA-FQ" translate; Documentation/ABI/testing/
sysfs-kernel-iommu_groups), then whether the kernel registered an IOMMU at all, then the command
line. Translation matters for RCCL and P2P, which need two or more GPUs: on one GPU it is a note.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from r9700ctl.agent.result import PASS, SKIP, WARN

PASSTHROUGH_PARAM = "iommu=pt"  # the kernel parameter that passes GPU DMA through
IDENTITY = "identity"
CODE = "IOMMU_TRANSLATED"
THRESHOLD = f"passthrough ({PASSTHROUGH_PARAM}) or IOMMU off"


@dataclass(frozen=True)
class IommuFacts:
    """What is known of a node's IOMMU. None: not known (a bundle has no sysfs)."""

    gpus: int
    passthrough_param: bool = False  # iommu=pt, iommu.passthrough=1 or amd_iommu=pt
    disabled_param: bool = False  # iommu=off, amd_iommu=off or intel_iommu=off
    group_types: Mapping[str, str] | None = None  # GPU -> its IOMMU group's type ("" unknown)
    units: tuple[str, ...] | None = None  # IOMMUs the kernel registered (empty: none)


@dataclass(frozen=True)
class IommuVerdict:
    status: str
    mode: str  # translated, passthrough, "passthrough (cmdline)", off, unknown
    reason: str = ""  # what was found, for the hint (its next step is the code's)
    code: str = ""
    translated: tuple[str, ...] = field(default_factory=tuple)  # GPUs in translated domains


def translating(group_type: str) -> bool:
    return group_type.upper().startswith("DMA") or group_type == "unmanaged"


def passed_through(group_type: str) -> bool:
    return group_type == IDENTITY


def telling(group_type: str) -> bool:
    """Whether a group type says how DMA goes. The kernel also prints "blocked" (no DMA at all) and
    "unknown" (a domain type its sysfs does not name; iommu_group_show_type): neither is a
    passthrough, so they count as not known and the other facts decide."""
    return translating(group_type) or passed_through(group_type)


def judge(facts: IommuFacts, *, expected: bool = True) -> IommuVerdict:
    """PASS when DMA is passed through or the IOMMU is off; else WARN on two or more GPUs (a note
    on one); `expected` False (thresholds platform.iommu_passthrough_expected) passes it all."""
    known = {gpu: kind for gpu, kind in (facts.group_types or {}).items() if kind and telling(kind)}
    translated = tuple(sorted(gpu for gpu, kind in known.items() if translating(kind)))
    if translated:
        reason = f"GPUs in translated IOMMU domains: {', '.join(translated)}"
        return _translated("translated", reason, facts, expected, translated)
    if known:
        return IommuVerdict(PASS, "passthrough")
    if facts.disabled_param or facts.units == ():
        return IommuVerdict(PASS, "off")
    if facts.passthrough_param:
        return IommuVerdict(PASS, "passthrough (cmdline)")
    active = " and an IOMMU is active" if facts.units else ""
    reason = (
        f"{PASSTHROUGH_PARAM} is missing from the kernel command line{active}: GPU DMA goes through IOMMU "
        "translation"
    )
    return _translated("unknown", reason, facts, expected, ())


def _translated(
    mode: str, reason: str, facts: IommuFacts, expected: bool, translated: tuple[str, ...]
) -> IommuVerdict:
    if not expected:
        return IommuVerdict(PASS, mode, reason, CODE, translated)
    if facts.gpus < 2:
        note = f"{reason}; with one GPU there is no RCCL or peer-to-peer traffic to suffer from it"
        return IommuVerdict(SKIP, mode, note, CODE, translated)
    return IommuVerdict(WARN, mode, reason, CODE, translated)
