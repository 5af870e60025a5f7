"""PCIe AER statistics (sysfs aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal).

Kernel ABI (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats, Linux 4.19 and later):
each file lists one error type per line, "<name> <count>", and ends with TOTAL_ERR_COR,
TOTAL_ERR_NONFATAL or TOTAL_ERR_FATAL. Names differ between kernels ("Receiver Error" in the ABI's
sample, "RxErr" in newer kernels), so the count is the last word and the name what precedes it.
The ABI also warns that errors an endpoint causes "may increment at its link partner (e.g. root
port)": a GPU's counters alone can stay at 0 while its slot port counts, so readers take the
whole path up to the root port.

Two inputs, one model:
- one file's text (parse_counts), read live by r9700ctl/agent/aer_counters.py;
- a support bundle's aer.txt, `grep -H .` over every aer_dev_* file under /sys/devices: one
  line per counter prefixed by the file's resolved path, whose PCI addresses give the device's
  place below its root port (parse, parse_file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import cannot_read, failure, from_file, never_raises

FILES = {"aer_dev_correctable": "correctable", "aer_dev_nonfatal": "nonfatal", "aer_dev_fatal": "fatal"}
KINDS = tuple(FILES.values())
TOTALS = {"TOTAL_ERR_COR": "correctable", "TOTAL_ERR_NONFATAL": "nonfatal", "TOTAL_ERR_FATAL": "fatal"}
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_LINE = re.compile(r"^(?P<path>/\S*/(?P<file>aer_dev_(?:correctable|nonfatal|fatal))):(?P<rest>.*)$")


@dataclass
class DeviceAer:
    """One PCI function's counters: per kind (correctable, nonfatal, fatal) each error's count."""

    address: str
    path: list[str] = field(default_factory=list)  # bridges above it, root port first
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def total(self, kind: str) -> int | None:
        """The TOTAL_ERR_* line, else the sum of the kind's lines; None when the kind was not read."""
        counts = self.counts.get(kind)
        if counts is None:
            return None
        for name, value in counts.items():
            if TOTALS.get(name) == kind:
                return value
        return sum(counts.values())

    def errors(self, kind: str) -> dict[str, int]:
        """The kind's non-zero counts without the total line."""
        return {n: v for n, v in (self.counts.get(kind) or {}).items() if v and n not in TOTALS}


@dataclass
class AerReport:
    source: str
    devices: dict[str, DeviceAer] = field(default_factory=dict)
    skipped_lines: list[str] = field(default_factory=list)
    error: str | None = None


def parse_counts(text: str) -> dict[str, int]:
    """One aer_dev_* file: {"RxErr": 0, ..., "TOTAL_ERR_COR": 0}; lines without a count are skipped."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.strip().rpartition(" ")
        if name and value.isdigit():
            counts[name.strip()] = int(value)
    return counts


_failed = failure(AerReport)


@never_raises(_failed)
def parse(text: str, source: str = "aer.txt") -> AerReport:
    """A bundle's aer.txt (`grep -H .` of every aer_dev_* file under /sys/devices)."""
    report = AerReport(source=source)
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line.strip())
        if match is None:
            report.skipped_lines.append(line)
            continue
        parts = [p for p in match.group("path").split("/") if _BDF.match(p)]
        if not parts:
            report.skipped_lines.append(line)
            continue
        address = parts[-1]
        device = report.devices.setdefault(address, DeviceAer(address, parts[:-1]))
        kind = FILES[match.group("file")]
        counts = device.counts.setdefault(kind, {})
        counts.update(parse_counts(match.group("rest")))
    # Empty output is an answer (no device exposes AER statistics: AER off in the firmware, or a
    # kernel before 4.19); text with no counter line in it is not this command's output.
    if not report.devices and report.skipped_lines:
        report.error = cannot_read(source, "no aer_dev_* counter lines (`grep -H .` of the sysfs files)")
    return report


def parse_file(path: str | Path) -> AerReport:
    return from_file(parse, _failed, path)
