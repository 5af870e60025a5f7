"""Decode amdgpu's ASIC-independent throttle bits (gpu_metrics `indep_throttle_status`).

The bit numbers are the kernel's SMU_THROTTLER_*_BIT defines (drivers/gpu/drm/amd/pm/
swsmu/inc/amdgpu_smu.h, "Add new defines for thermal throttle status bits which are ASIC
independent", Graham Sider, 2021). They come in groups: power (0-15), current (16-31),
temperature (32-55, of which VRHOT and PROCHOT are 44-47) and other (56-63).

Power limiting at the board's cap is expected under load; thermal or PROCHOT bits are
not (docs/validation.md, C7). The value is instantaneous: sample it during load.
"""

from __future__ import annotations

from dataclasses import dataclass, field

POWER_BITS = {0: "PPT0", 1: "PPT1", 2: "PPT2", 3: "PPT3", 4: "SPL", 5: "FPPT", 6: "SPPT", 7: "SPPT_APU"}
CURRENT_BITS = {
    16: "TDC_GFX",
    17: "TDC_SOC",
    18: "TDC_MEM",
    19: "TDC_VDD",
    20: "TDC_CVIP",
    21: "EDC_CPU",
    22: "EDC_GFX",
    23: "APCC",
}
THERMAL_BITS = {
    32: "TEMP_GPU",
    33: "TEMP_CORE",
    34: "TEMP_MEM",
    35: "TEMP_EDGE",
    36: "TEMP_HOTSPOT",
    37: "TEMP_SOC",
    38: "TEMP_VR_GFX",
    39: "TEMP_VR_SOC",
    40: "TEMP_VR_MEM0",
    41: "TEMP_VR_MEM1",
    42: "TEMP_LIQUID0",
    43: "TEMP_LIQUID1",
    44: "VRHOT0",
    45: "VRHOT1",
}
PROCHOT_BITS = {46: "PROCHOT_CPU", 47: "PROCHOT_GFX"}
OTHER_BITS = {56: "PPM", 57: "FIT"}

GROUPS = {
    "power": POWER_BITS,
    "current": CURRENT_BITS,
    "thermal": THERMAL_BITS,
    "prochot": PROCHOT_BITS,
    "other": OTHER_BITS,
}


@dataclass
class ThrottleDecode:
    """Which throttlers were active in one sample, by group."""

    raw: int
    power: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    thermal: list[str] = field(default_factory=list)
    prochot: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    unknown_bits: list[int] = field(default_factory=list)


def decode_indep_throttle(value: int) -> ThrottleDecode:
    """Split a 64-bit indep_throttle_status into named throttlers per group."""
    result = ThrottleDecode(raw=value)
    for bit in range(64):
        if not value >> bit & 1:
            continue
        for group, names in GROUPS.items():
            if bit in names:
                getattr(result, group).append(names[bit])
                break
        else:
            result.unknown_bits.append(bit)
    return result
