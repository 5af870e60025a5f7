"""Kernel log (`dmesg`, `dmesg -T/-H`, `journalctl -k`): amdgpu's trouble, with line numbers.

Kinds of finding, each with the 1-based line number as evidence and the GPU's PCI address
when the line names one (what each means, and what to do, is data/manifest.yaml
`kernel_log_signatures`; a test keeps the two lists of kinds equal):
- probe_failed: "amdgpu: probe of 0000:01:00.0 failed with error -22"
- init_failed: "Fatal error during GPU init", "amdgpu_device_ip_init failed", "hw_init of IP block ... failed"
- reset_failed: a reset that did not bring the GPU back ("GPU reset(1) failed", "GPU recovery
  failed", "resume of IP block <psp> failed -62")
- bus_lost: "device lost from bus!" (the GPU fell off the PCIe bus)
- smu_hang: "SMU is in hanged state" (the power-management firmware stopped answering)
- firmware: firmware that failed to load ("Direct firmware load for amdgpu/... failed",
  "failed to load ucode")
- ring_timeout: "ring gfx_0.0.0 timeout" (a job that never finished)
- mes: the MES scheduler not answering ("MES failed to respond", "MES(0) failed to respond to
  msg=REMOVE_QUEUE", "MES might be in unrecoverable state")
- gpu_reset: "GPU reset begin!", "GPU reset(N) succeeded!", "MODE1 reset", "VRAM is lost due to GPU reset!"
- page_fault: "[gfxhub] page fault", "[mmhub] no-retry page fault" (a bad GPU address)
- smu_mismatch: "SMU driver if version not matched" (counted; never a problem alone)
- error: any other "*ERROR*" line of amdgpu/drm/kfd
PCIe AER lines ("AER: ...", "PCIe Bus Error") of any device are kept apart (`aer`), so a GPU
fault can be told apart from a link error at the same time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import cannot_read, from_file, is_source_line, never_raises, normalise_bdf

# Order matters: the first pattern that matches names the finding.
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("probe_failed", re.compile(r"amdgpu:? probe of (\S+) failed with error (-?\d+)", re.IGNORECASE)),
    (
        "init_failed",
        re.compile(r"Fatal error during GPU init|amdgpu_device_ip_init failed|hw_init of IP block.*failed"),
    ),
    (
        "reset_failed",
        re.compile(
            r"GPU reset(?:\(\d+\))? failed|GPU recovery failed|resume of IP block <\w+> failed",
            re.IGNORECASE,
        ),
    ),
    ("bus_lost", re.compile(r"device lost from bus", re.IGNORECASE)),
    ("smu_hang", re.compile(r"SMU is in hanged state", re.IGNORECASE)),
    (
        "firmware",
        re.compile(
            r"Direct firmware load for amdgpu/\S+ failed|failed to load (?:ucode|firmware)|"
            r"Failed to load gpu_info firmware|psp.*load.*failed|firmware loading failed",
            re.IGNORECASE,
        ),
    ),
    ("ring_timeout", re.compile(r"ring \S+ timeout", re.IGNORECASE)),
    (
        "mes",
        re.compile(r"MES(?:\(\d+\))? failed to respon|MES might be in unrecoverable state", re.IGNORECASE),
    ),
    (
        "gpu_reset",
        re.compile(
            r"GPU reset|GPU recovery|gpu_recover|Mode[12] reset|BACO reset|VRAM is lost", re.IGNORECASE
        ),
    ),
    ("page_fault", re.compile(r"\[(?:gfxhub|mmhub)\w*\] (?:no-retry |retry )?page fault", re.IGNORECASE)),
    ("smu_mismatch", re.compile(r"SMU driver if version not matched", re.IGNORECASE)),
    ("error", re.compile(r"\*ERROR\*")),
)
# A line belongs to the GPU stack when it names one of these...
_GPU_STACK = re.compile(r"amdgpu|\[drm|kfd|amdkfd", re.IGNORECASE)
# ...unless its prefix names another driver: dev_printk's "<driver> <PCI address>: [drm] ..." (a
# server's BMC graphics, ast, logs "[drm] *ERROR*" lines on healthy machines) or the module tag of
# "[drm:<function> [<module>]]". A line is attributed by that prefix and address, never by "[drm]".
_DEVICE_PREFIX = re.compile(
    r"(?:^|\]\s*|kernel:\s*)(?P<driver>[A-Za-z0-9_.-]+) "
    r"(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): "
)
_MODULE_TAG = re.compile(r"\[drm:\S+ \[(?P<module>\w+)\]\]")
# DRM core's own line when a driver registers names that driver ("[drm] Initialized ast 0.1.0 for
# 0000:0a:00.0 on minor 0"; drm_dev_register in drivers/gpu/drm/drm_drv.c).
_DRM_INITIALIZED = re.compile(r"\[drm\] Initialized (?P<driver>\w+) ")
OURS = frozenset({"amdgpu", "amdkfd", "kfd"})
_TIMESTAMP = re.compile(r"^\s*\[[^\]]{1,40}\]|^\w{3}\s+\d+\s+[\d:]+\s+\S+\s+kernel:|^\d{4}-\d\d-\d\dT")
# `dmesg -t` and `journalctl -o cat` drop the time: a driver's own prefix "amdgpu 0000:03:00.0: ..."
_UNTIMED = re.compile(r"^\s*[\w-]+ (?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]: ")
_AER = re.compile(r"\bAER: |PCIe Bus Error")
_ADDRESS = re.compile(r"\b(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")

SERIOUS = (
    "probe_failed",
    "init_failed",
    "reset_failed",
    "bus_lost",
    "smu_hang",
    "firmware",
    "ring_timeout",
    "gpu_reset",
    "page_fault",
    "mes",
    "error",
)


@dataclass
class DmesgFinding:
    kind: str
    line: int
    text: str
    bdf: str | None = None


@dataclass
class DmesgReport:
    source: str
    findings: list[DmesgFinding] = field(default_factory=list)
    aer: list[DmesgFinding] = field(default_factory=list)  # PCIe AER lines of any device (kind "aer")
    lines_read: int = 0
    amdgpu_lines: int = 0
    error: str | None = None

    def of_kind(self, kind: str) -> list[DmesgFinding]:
        return [f for f in self.findings if f.kind == kind]

    @property
    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for finding in self.findings:
            counts[finding.kind] = counts.get(finding.kind, 0) + 1
        return counts

    @property
    def serious(self) -> list[DmesgFinding]:
        return [f for f in self.findings if f.kind in SERIOUS]


def _failed(source: str, reason: str) -> DmesgReport:
    return DmesgReport(source=source, error=cannot_read(source, reason))


@never_raises(_failed)
def parse(text: str, source: str = "dmesg.txt") -> DmesgReport:
    report = DmesgReport(source=source)
    log_like = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or (number == 1 and is_source_line(line)):
            continue
        report.lines_read += 1
        if _TIMESTAMP.match(line) or _UNTIMED.match(line):
            log_like += 1
        if _AER.search(line):
            address = _ADDRESS.search(line)
            bdf = normalise_bdf(address.group(0)) if address else None
            report.aer.append(DmesgFinding("aer", number, line.strip(), bdf))
        if not _GPU_STACK.search(line) or not is_amd_gpu_line(line):
            continue
        report.amdgpu_lines += 1
        for kind, pattern in PATTERNS:
            match = pattern.search(line)
            if match:
                bdf = normalise_bdf(match.group(1)) if kind == "probe_failed" else None
                address = _ADDRESS.search(line)
                report.findings.append(
                    DmesgFinding(
                        kind,
                        number,
                        line.strip(),
                        bdf or (normalise_bdf(address.group(0)) if address else None),
                    )
                )
                break
    if report.lines_read and not log_like:
        report.error = cannot_read(source, "no kernel log lines ('[   12.345678] ...') in it")
    return report


def is_amd_gpu_line(line: str) -> bool:
    """False when the line's own prefix names another driver (ast, i915, nouveau ...) as its author."""
    prefix = _DEVICE_PREFIX.search(line)
    if prefix and prefix.group("driver").lower() not in OURS:
        return False
    tag = _MODULE_TAG.search(line)
    if tag and tag.group("module").lower() not in OURS:
        return False
    initialized = _DRM_INITIALIZED.search(line)
    return not (initialized and initialized.group("driver").lower() not in OURS)


def parse_file(path: str | Path) -> DmesgReport:
    return from_file(parse, _failed, path)
