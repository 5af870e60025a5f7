"""`rocminfo` (and `rocminfo --support`): the HSA runtime's agents, CPUs and GPUs.

Per agent: name (the gfx target on GPUs, "gfx1201"), marketing name, vendor, device type,
node, chip id (0x7551 for an R9700), compute units, clock, BDF (from BDFID), the size of
the coarse-grained global pool (the VRAM the runtime hands out) and the ISAs. Real
outputs pad values with trailing spaces and may be preceded by "ROCk module ..." lines;
a failing rocminfo prints "hsa api call failure" instead of agents.

rocminfo's own failure report is read, not called unreadable: before it starts the runtime it
opens /dev/kfd and, when that fails, prints "Unable to open /dev/kfd read-write: <strerror>"
and whether the user is in the group that owns /dev/kfd, from the user database
(getgrouplist), not from the groups of the running process ("x is member of render group",
'x is not member of "render" group, ...'; CheckInitialState in ROCm/rocminfo rocminfo.cc).
`failure` is the line where it stopped; `.error` stays for text that is not rocminfo's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import cannot_read, failure, from_file, never_raises, number


@dataclass
class Agent:
    """One HSA agent; for a GPU `name` is its gfx target."""

    number: int
    name: str = ""
    uuid: str | None = None
    marketing_name: str | None = None
    vendor_name: str | None = None
    device_type: str | None = None
    node: int | None = None
    chip_id: int | None = None
    compute_units: int | None = None
    max_clock_mhz: int | None = None
    bdfid: int | None = None
    wavefront_size: int | None = None
    coarse_grained_pool_kib: int | None = None
    apu_memory: bool = False
    isas: list[str] = field(default_factory=list)

    @property
    def is_gpu(self) -> bool:
        return (self.device_type or "").upper() == "GPU"

    @property
    def gfx_target(self) -> str | None:
        return self.name if self.is_gpu and self.name.startswith("gfx") else None

    @property
    def device_id(self) -> str | None:
        """ "0x7551" from "Chip ID: 30033(0x7551)"; None for CPUs (chip id 0)."""
        return f"0x{self.chip_id:04x}" if self.chip_id else None

    @property
    def bdf(self) -> str | None:
        """PCI address from BDFID (bus << 8 | device << 3 | function); domain 0000 assumed."""
        if not self.is_gpu or self.bdfid is None:
            return None
        bus, dev, fn = self.bdfid >> 8 & 0xFF, self.bdfid >> 3 & 0x1F, self.bdfid & 0x7
        return f"0000:{bus:02x}:{dev:02x}.{fn}"


@dataclass
class RocmInfo:
    source: str
    rock_module_loaded: bool | None = None
    rock_module_version: str | None = None
    runtime_version: str | None = None
    runtime_ext_version: str | None = None
    agents: list[Agent] = field(default_factory=list)
    error: str | None = None
    failure: str | None = None  # rocminfo's own report of why it stopped, when it stopped
    failure_line: int | None = None  # 1-based line of `failure`
    kfd_open_error: str | None = None  # strerror of the failed open: "Permission denied", "Invalid argument"
    kfd_group: str | None = None  # the group rocminfo checked ("render", "video")
    kfd_user: str | None = None
    kfd_member: bool | None = None  # rocminfo's verdict from the user database; None: it did not say
    kfd_no_login: bool = False  # it could not check: no login name (a container, a service)

    @property
    def gpus(self) -> list[Agent]:
        return [a for a in self.agents if a.is_gpu]

    @property
    def cpus(self) -> list[Agent]:
        return [a for a in self.agents if (a.device_type or "").upper() == "CPU"]


_failed = failure(RocmInfo)


_AGENT = re.compile(r"^\s*Agent\s+(\d+)\s*$")
_KEY_VALUE = re.compile(r"^(\s*)([^:]+?):\s*(.*?)\s*$")
_ROCK = re.compile(r"ROCk module(?: version (\S+))? is (NOT )?(?:loaded|live)", re.IGNORECASE)
_KFD_OPEN = re.compile(r"Unable to open /dev/kfd read-write: (?P<error>[^\x1b\n]+)")
_MEMBER = re.compile(r"^(?P<user>\S+) is member of (?P<group>\S+) group")
_NOT_MEMBER = re.compile(r'^(?P<user>\S+) is not member of "(?P<group>[^"]+)" group')
# getlogin_r failed (a container without a login session): rocminfo could not check the groups
_NO_LOGIN = re.compile(r"^Failed to get user name to check for (?P<group>\S+) group membership")
# What rocminfo prints when it stops before listing agents (rocminfo.cc CheckInitialState and
# RET_IF_HSA_ERR), first match wins.
_STOPPED = re.compile(
    r"ROCk module is NOT (?:loaded|live).*|Unable to open /dev/kfd read-write: .*|hsa api call failure.*"
)


@never_raises(_failed)
def parse(text: str, source: str = "rocminfo.txt") -> RocmInfo:
    info = RocmInfo(source=source)
    rock = _ROCK.search(text)
    if rock:
        info.rock_module_loaded = rock.group(2) is None
        info.rock_module_version = rock.group(1)
    agent: Agent | None = None
    pool_segment: str | None = None
    in_isa = False
    for line in text.splitlines():
        header = _AGENT.match(line)
        if header:
            agent = Agent(number=int(header.group(1)))
            info.agents.append(agent)
            pool_segment, in_isa = None, False
            continue
        match = _KEY_VALUE.match(line)
        if not match:
            continue
        indent, key, value = len(match.group(1)), match.group(2).strip(), match.group(3)
        if agent is None:
            if key == "Runtime Version":
                info.runtime_version = value or None
            elif key == "Runtime Ext Version":
                info.runtime_ext_version = value or None
            continue
        if key == "ISA Info":
            in_isa = True
            continue
        if in_isa and key == "Name" and indent > 2:
            agent.isas.append(value)
            continue
        if indent > 2:  # pool and cache details
            if key == "Segment":
                pool_segment = value
            elif key == "Size" and pool_segment and "GLOBAL" in pool_segment and "COARSE" in pool_segment:
                size = _leading_int(value)
                if size is not None and agent.coarse_grained_pool_kib is None:
                    agent.coarse_grained_pool_kib = size
            continue
        _set_agent_field(agent, key, value)
    _read_failure(info, text)
    if not info.agents and info.failure is None:
        failure = re.search(r"Call returned.*", text)
        reason = failure.group(0).strip() if failure else "no HSA agents in it"
        info.error = cannot_read(source, reason)
    return info


def _read_failure(info: RocmInfo, text: str) -> None:
    """rocminfo's report of why it stopped: the line, the errno of /dev/kfd, the group check."""
    for line_number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"\x1b\[[0-9;]*m", "", raw).strip()  # rocminfo colours these lines
        stopped = _STOPPED.search(line)
        if stopped and info.failure is None:
            info.failure, info.failure_line = stopped.group(0).strip(), line_number
        kfd = _KFD_OPEN.search(line)
        if kfd:
            info.kfd_open_error = kfd.group("error").strip()
        no_login = _NO_LOGIN.match(line)
        if no_login:
            info.kfd_group, info.kfd_no_login = no_login.group("group"), True
        member = _MEMBER.match(line) or _NOT_MEMBER.match(line)
        if member:
            info.kfd_user, info.kfd_group = member.group("user"), member.group("group")
            info.kfd_member = bool(_MEMBER.match(line))


def _leading_int(value: str) -> int | None:
    match = re.match(r"\s*(\d+)", value)
    return int(match.group(1)) if match else None


def _set_agent_field(agent: Agent, key: str, value: str) -> None:
    if key == "Name":
        agent.name = value
    elif key == "Uuid":
        agent.uuid = value or None
    elif key == "Marketing Name":
        agent.marketing_name = value or None
    elif key == "Vendor Name":
        agent.vendor_name = value or None
    elif key == "Device Type":
        agent.device_type = value or None
    elif key == "Node":
        agent.node = _leading_int(value)
    elif key == "Chip ID":
        agent.chip_id = _leading_int(value)
    elif key == "Compute Unit":
        agent.compute_units = _leading_int(value)
    elif key == "Max Clock Freq. (MHz)":
        agent.max_clock_mhz = _leading_int(value)
    elif key == "BDFID":
        num = number(value)
        agent.bdfid = int(num) if num is not None else None
    elif key == "Wavefront Size":
        agent.wavefront_size = _leading_int(value)
    elif key == "Memory Properties":
        agent.apu_memory = "APU" in value.upper()


def parse_file(path: str | Path) -> RocmInfo:
    return from_file(parse, _failed, path)
