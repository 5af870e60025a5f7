"""`rocminfo` (and `rocminfo --support`): the HSA runtime's agents, CPUs and GPUs.

Per agent: name (the gfx target on GPUs, "gfx1201"), marketing name, vendor, device type,
node, chip id (0x7551 for an R9700), compute units, clock, BDF (from BDFID), the size of
the coarse-grained global pool (the VRAM the runtime hands out) and the ISAs. Real
outputs pad values with trailing spaces and may be preceded by "ROCk module ..." lines;
a failing rocminfo prints "hsa api call failure" instead of agents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import cannot_read, from_file, never_raises, number


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

    @property
    def gpus(self) -> list[Agent]:
        return [a for a in self.agents if a.is_gpu]

    @property
    def cpus(self) -> list[Agent]:
        return [a for a in self.agents if (a.device_type or "").upper() == "CPU"]


def _failed(source: str, reason: str) -> RocmInfo:
    return RocmInfo(source=source, error=cannot_read(source, reason))


_AGENT = re.compile(r"^\s*Agent\s+(\d+)\s*$")
_KEY_VALUE = re.compile(r"^(\s*)([^:]+?):\s*(.*?)\s*$")
_ROCK = re.compile(r"ROCk module(?: version (\S+))? is (NOT )?loaded", re.IGNORECASE)


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
    if not info.agents:
        failure = re.search(r"hsa api call failure.*|Call returned.*", text)
        reason = failure.group(0).strip() if failure else "no HSA agents in it"
        info.error = cannot_read(source, reason)
    return info


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
