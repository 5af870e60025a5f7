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
- smu_busy: "SMU: I'm not done with your previous command" (the SMU did not finish the
  driver's last message; its mailbox is stuck)
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

amdgpu's start-up lines identify each GPU whatever HSA_OVERRIDE_GFX_VERSION makes the runtime
say: "initializing kernel modesetting (IP DISCOVERY 0x1002:0x7551 0x1043:0x0626 0xC0)" gives
its PCI id and revision, "detected ip block number 6 <gfx_v12_0>" its GFX IP (12 = RDNA4);
`devices` keeps them per PCI address ("" when the lines name none).

A log pasted without timestamps and without the "amdgpu 0000:03:00.0:" prefixes ("amdgpu:
SMU ...", "[drm] ...") is still a kernel log: only a file with no such line at all is
unreadable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import (
    cannot_read,
    failure,
    from_file,
    is_source_line,
    never_raises,
    normalise_bdf,
)

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
    # amdgpu's swsmu (smu_cmn.c) when the SMU has not answered the previous message.
    ("smu_busy", re.compile(r"SMU: I'm not done with your previous command", re.IGNORECASE)),
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
_GPU_STACK = re.compile(
    # amdgpu's own messages are its lines even where a paste dropped the "amdgpu" prefix
    r"amdgpu|\[drm|kfd|amdkfd|SMU: I'm not done with your previous command|SMU is in hanged state|"
    r"MES(?:\(\d+\))? failed to respon",
    re.IGNORECASE,
)
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
# amdgpu_device_init: "initializing kernel modesetting (IP DISCOVERY 0x1002:0x7551 0x1043:0x0626 0xC0)"
# (older chips name their ASIC instead of IP DISCOVERY: "(NAVY_FLOUNDER 0x1002:0x73DF 0x1458:0x2408 0xC1)").
_MODESET = re.compile(
    r"initializing kernel modesetting \([^)]*?0x(?P<vendor>[0-9a-fA-F]{4}):0x(?P<device>[0-9a-fA-F]{4})"
    r"(?: 0x[0-9a-fA-F]{4}:0x[0-9a-fA-F]{4} 0x(?P<rev>[0-9a-fA-F]{2}))?"
)
# amdgpu_discovery: "detected ip block number 6 <gfx_v12_0>" (6.x: "<gfx_v11_0_0> (gfx_v11_0)";
# FreeBSD's drm-kmod: "[drm] add ip block number 6 <gfx_v12_0>").
_GFX_BLOCK = re.compile(r"ip block number \d+ <(?P<ip>gfx_v\d+_\d+)")
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
class DmesgDevice:
    """One GPU as amdgpu named it while starting: PCI id, revision and GFX IP block."""

    bdf: str  # "" when the lines name no PCI address
    pci_id: str | None = None  # "1002:7551"
    revision: str | None = None  # "c0"
    gfx_ip: str | None = None  # "gfx_v12_0"
    line: int = 0  # the first line that named it

    @property
    def gfx_major(self) -> int | None:
        """12 from gfx_v12_0: the GFX major version an HSA override must keep (AMD rejects others)."""
        match = re.match(r"gfx_v(\d+)_", self.gfx_ip or "")
        return int(match.group(1)) if match else None


@dataclass
class DmesgReport:
    source: str
    findings: list[DmesgFinding] = field(default_factory=list)
    devices: dict[str, DmesgDevice] = field(default_factory=dict)  # by PCI address ("" = unnamed)
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


_failed = failure(DmesgReport)


@never_raises(_failed)
def parse(text: str, source: str = "dmesg.txt") -> DmesgReport:
    report = DmesgReport(source=source)
    log_like = 0
    addresses: set[str] = set()  # the PCI addresses amdgpu's lines name
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or (number == 1 and is_source_line(line)):
            continue
        report.lines_read += 1
        if _TIMESTAMP.match(line) or _UNTIMED.match(line):
            log_like += 1
        _note_device(report, line, number)
        if _AER.search(line):
            address = _ADDRESS.search(line)
            bdf = normalise_bdf(address.group(0)) if address else None
            report.aer.append(DmesgFinding("aer", number, line.strip(), bdf))
        if not _GPU_STACK.search(line) or not is_amd_gpu_line(line):
            continue
        report.amdgpu_lines += 1
        named = _DEVICE_PREFIX.search(line)
        if named:
            addresses.add(normalise_bdf(named.group("bdf")) or "")
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
    _attribute_unnamed(report, addresses - {""})
    # Lines of the GPU stack make it a kernel log even without timestamps or PCI prefixes.
    if report.lines_read and not log_like and not report.amdgpu_lines and not report.aer:
        report.error = cannot_read(source, "no kernel log lines ('[   12.345678] ...') in it")
    return report


def _attribute_unnamed(report: DmesgReport, addresses: set[str]) -> None:
    """Start-up lines without an address ("[drm] initializing kernel modesetting (IP DISCOVERY ...)"
    on 6.8) belong to the GPU when amdgpu's other lines name only one."""
    unnamed = report.devices.get("")
    if unnamed is None or len(addresses) != 1:
        return
    bdf = addresses.pop()
    device = report.devices.setdefault(bdf, DmesgDevice(bdf=bdf, line=unnamed.line))
    device.pci_id = device.pci_id or unnamed.pci_id
    device.revision = device.revision or unnamed.revision
    device.gfx_ip = device.gfx_ip or unnamed.gfx_ip
    del report.devices[""]


def _note_device(report: DmesgReport, line: str, number: int) -> None:
    modeset, block = _MODESET.search(line), _GFX_BLOCK.search(line)
    if not modeset and not block:
        return
    address = _ADDRESS.search(line)
    bdf = normalise_bdf(address.group(0)) if address else ""
    device = report.devices.setdefault(bdf or "", DmesgDevice(bdf=bdf or "", line=number))
    if modeset:
        device.pci_id = f"{modeset.group('vendor')}:{modeset.group('device')}".lower()
        device.revision = modeset.group("rev").lower() if modeset.group("rev") else None
    if block:
        device.gfx_ip = device.gfx_ip or block.group("ip")


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
