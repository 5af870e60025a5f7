"""Does a GPU's BAR expose its whole VRAM? The kernel enables AMD PCIe peer-to-peer "only ...
between GPUs with large memory BARs that expose the entire VRAM in PCIe bus address space"
(Linux drivers/gpu/drm/amd/amdkfd/Kconfig, HSA_AMD_P2P); without Resizable BAR (or "Above 4G
Decoding") the firmware gives the card a 256 MiB window. docs/validation.md C3: FAIL.
"""

from __future__ import annotations

from dataclasses import dataclass

from r9700ctl.agent.result import FAIL, PASS, SKIP
from r9700ctl.agent.units import size_text

CODE = "BAR_SMALLER_THAN_VRAM"
UNKNOWN_CODE = "BAR_SIZE_UNKNOWN"


@dataclass(frozen=True)
class BarVerdict:
    status: str
    threshold: str
    reason: str = ""
    code: str = ""


def judge(bar_bytes: int | None, vram_bytes: float | None, min_fraction: float = 1.0) -> BarVerdict:
    """FAIL when the largest prefetchable BAR is below `min_fraction` x VRAM (thresholds.yaml
    platform.bar_min_fraction_of_vram: the BAR is a power of two, VRAM as reported a little less
    than nominal, so 1.0 holds a healthy card); either size unknown: SKIP (not judged)."""
    threshold = f"BAR >= {min_fraction:g} x VRAM" + (f" ({size_text(vram_bytes)})" if vram_bytes else "")
    if bar_bytes is None or not vram_bytes:
        unknown = "BAR" if bar_bytes is None else "VRAM"
        return BarVerdict(SKIP, threshold, f"{unknown} size unknown", UNKNOWN_CODE)
    if bar_bytes >= min_fraction * vram_bytes:
        return BarVerdict(PASS, threshold)
    reason = (
        f"its largest BAR is {size_text(bar_bytes)}, less than its {size_text(vram_bytes)} of VRAM: without "
        "large BAR the kernel does not enable GPU peer-to-peer (CONFIG_HSA_AMD_P2P)"
    )
    return BarVerdict(FAIL, threshold, reason, CODE)
