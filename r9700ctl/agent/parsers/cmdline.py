"""/proc/cmdline: the kernel parameters that matter for GPUs.

IOMMU: `iommu=pt` (passthrough; RCCL warns when it is missing), `amd_iommu=on|off`,
`intel_iommu=on|off`, `iommu.passthrough=1`; PCIe: `pci=noacs` and friends (a
comma-separated list); amdgpu module options given as `amdgpu.<name>=<value>`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import failure, from_file, is_source_line, never_raises


@dataclass
class KernelCmdline:
    source: str
    raw: str = ""
    tokens: list[str] = field(default_factory=list)
    params: dict[str, str | None] = field(default_factory=dict)  # last one wins, as in the kernel
    error: str | None = None

    @property
    def iommu(self) -> str | None:
        return self.params.get("iommu")

    @property
    def amd_iommu(self) -> str | None:
        return self.params.get("amd_iommu")

    @property
    def intel_iommu(self) -> str | None:
        return self.params.get("intel_iommu")

    @property
    def iommu_passthrough(self) -> bool:
        """The IOMMU passes DMA through: iommu=pt or iommu.passthrough=1 (or =on/y)."""
        return self.iommu == "pt" or (self.params.get("iommu.passthrough") or "").lower() in ("1", "on", "y")

    @property
    def iommu_disabled(self) -> bool:
        return "off" in (self.iommu, self.amd_iommu, self.intel_iommu)

    @property
    def pci_options(self) -> list[str]:
        value = self.params.get("pci")
        return [v for v in (value or "").split(",") if v]

    @property
    def pci_noacs(self) -> bool:
        return "noacs" in self.pci_options

    @property
    def amdgpu(self) -> dict[str, str | None]:
        """amdgpu.<option>=<value> parameters, by option name."""
        return {k.split(".", 1)[1]: v for k, v in self.params.items() if k.startswith("amdgpu.")}

    @property
    def boot_image(self) -> str | None:
        return self.params.get("BOOT_IMAGE")


_failed = failure(KernelCmdline)


@never_raises(_failed)
def parse(text: str, source: str = "cmdline.txt") -> KernelCmdline:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines and is_source_line(lines[0]):
        lines = lines[1:]
    if not lines:
        return _failed(source, "it is empty")
    if len(lines) > 1:
        return _failed(source, f"expected the one line of /proc/cmdline, found {len(lines)} lines")
    raw = lines[0].strip()
    if not raw.isprintable() or "\ufffd" in raw:
        return _failed(source, "unprintable characters, not a kernel command line")
    try:
        tokens = shlex.split(raw)
    except ValueError:  # an unbalanced quote: the kernel splits on spaces regardless
        tokens = raw.split()
    cmdline = KernelCmdline(source=source, raw=raw, tokens=tokens)
    for token in tokens:
        key, sep, value = token.partition("=")
        cmdline.params[key] = value if sep else None
    return cmdline


def parse_file(path: str | Path) -> KernelCmdline:
    return from_file(parse, _failed, path)
