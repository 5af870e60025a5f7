"""RCCL/NCCL log lines (NCCL_DEBUG=INFO or WARN) that say why multi-GPU work may hang or crawl.

- missing_iommu_pt, missing_amd_iommu: RCCL checks /proc/cmdline at start-up and warns
  'Missing "iommu=pt" from kernel command line which can lead to system instablity or
  hang!' (RCCL's own spelling); these are the warnings ROCm/vllm#390 and #11348 point at;
- missing_fine_grain_pcie: 'Missing "HSA_FORCE_FINE_GRAIN_PCIE=1" from environment';
- p2p_disabled: NCCL_P2P_DISABLE set in the environment (RCCL echoes it);
- ipc_failure: hipIpcGetMemHandle/hipIpcOpenMemHandle failed (peer memory not mappable);
- warn: any other "NCCL WARN" line.
Transports in use ("via P2P/IPC", "via SHM", "via NET") are counted too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import failure, from_file, is_source_line, never_raises

PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("missing_iommu_pt", re.compile(r'Missing "iommu=pt"')),
    ("missing_amd_iommu", re.compile(r'Missing "amd_iommu=on"')),
    ("missing_fine_grain_pcie", re.compile(r'Missing "HSA_FORCE_FINE_GRAIN_PCIE=1"')),
    ("p2p_disabled", re.compile(r"NCCL_P2P_DISABLE set by environment to 1|P2P is disabled", re.IGNORECASE)),
    ("ipc_failure", re.compile(r"hipIpc\w+ failed|cudaIpc\w+ failed", re.IGNORECASE)),
    ("warn", re.compile(r"NCCL WARN")),
)
_TRANSPORT = re.compile(r"\bvia (P2P/IPC\S*|P2P/direct\S*|P2P\S*|SHM\S*|NET\S*)")
_VERSION = re.compile(r"RCCL version\s*:?\s*(\S+)")
_NCCL_LINE = re.compile(r"NCCL (?:INFO|WARN)|RCCL version")


@dataclass
class RcclFinding:
    kind: str
    line: int
    text: str


@dataclass
class RcclLog:
    source: str
    findings: list[RcclFinding] = field(default_factory=list)
    transports: dict[str, int] = field(default_factory=dict)
    rccl_version: str | None = None
    nccl_lines: int = 0
    error: str | None = None

    def has(self, kind: str) -> bool:
        return any(f.kind == kind for f in self.findings)

    def of_kind(self, kind: str) -> list[RcclFinding]:
        return [f for f in self.findings if f.kind == kind]


_failed = failure(RcclLog)


@never_raises(_failed)
def parse(text: str, source: str = "rccl.log") -> RcclLog:
    """Any log that may contain RCCL lines among others; a log with none is not an error."""
    log = RcclLog(source=source)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or (number == 1 and is_source_line(line)):
            continue
        if _NCCL_LINE.search(line):
            log.nccl_lines += 1
        version = _VERSION.search(line)
        if version and log.rccl_version is None:
            log.rccl_version = version.group(1)
        for transport in _TRANSPORT.findall(line):
            kind = transport.split("/")[0].rstrip(",;")
            log.transports[kind] = log.transports.get(kind, 0) + 1
        for kind, pattern in PATTERNS:
            if pattern.search(line):
                log.findings.append(RcclFinding(kind, number, line))
                break
    return log


def parse_file(path: str | Path) -> RcclLog:
    return from_file(parse, _failed, path)
