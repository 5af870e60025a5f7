"""Clocks, temperatures, power, throttle reasons and PCIe link, sampled while a load runs.

Throttle state is instantaneous, so it must be sampled during the load, every 0.5-1 s
(docs/validation.md C7). Sources, best first:
- AMD: sysfs of the GPU's PCI function: `gpu_metrics` (binary; format 1, content >= 3 carries
  `indep_throttle_status`, the ASIC-independent throttle bits), hwmon (temperatures, power,
  power cap and its default, clocks) and `current_link_speed/width`;
- NVIDIA: NVML through pynvml (nvidia-ml-py) when importable, else `nvidia-smi --query-gpu`.

Throttle bits are decoded into groups, which is what the verdict uses:
  power      expected under load (a healthy H200 sits at its power cap, docs/benchmarks.md)
  current    TDC/EDC current limits (informational)
  thermal    temperature limits: FAIL when persistent
  hw_slowdown  NVIDIA hardware slowdown / power brake: FAIL when persistent
  prochot    PROCHOT asserted: FAIL when persistent
  idle, other  informational
Radeon RDNA3/RDNA4 firmware reports TEMP_HOTSPOT at idle and at 37 C (ROCm/rocm-systems#11781,
R9700): that bit alone counts as `thermal_unconfirmed` unless the same sample's hotspot
temperature is at least `hotspot_credible_c`.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from r9700ctl.agent import stats
from r9700ctl.agent.parsers import nvidia_smi, throttle

GEN_TO_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}

# The bit tables live with the parsers of the same values (one source each): NVML's clocks event
# reasons in parsers/nvidia_smi.py, amdgpu's SMU_THROTTLER_* bits in parsers/throttle.py.
NVIDIA_REASONS = nvidia_smi.EVENT_REASONS
AMD_THROTTLERS = {bit: name for names in throttle.GROUPS.values() for bit, name in names.items()}
AMD_GROUP_OF = {bit: group for group, names in throttle.GROUPS.items() for bit in names}
AMD_TEMP_HOTSPOT_BIT = next(bit for bit, name in AMD_THROTTLERS.items() if name == "TEMP_HOTSPOT")

FAILING_GROUPS = ("thermal", "hw_slowdown", "prochot")


def amd_group(bit: int) -> str:
    """The group of a named bit; an unnamed one by the kernel's ranges, where 48-55 (no throttler
    defined there) count as "other": an unknown bit never fails a card as thermal."""
    if bit in AMD_GROUP_OF:
        return AMD_GROUP_OF[bit]
    if bit < 16:
        return "power"
    if bit < 32:
        return "current"
    if bit < 46:
        return "thermal"
    if bit < 48:
        return "prochot"
    return "other"


@dataclass
class Sample:
    """One reading of one GPU; None where the source had no value."""

    t: float
    gpu: int
    sclk_mhz: float | None = None
    mclk_mhz: float | None = None
    temp_c: float | None = None
    hotspot_c: float | None = None
    mem_temp_c: float | None = None
    power_w: float | None = None  # instantaneous where the source has it (peaks), else its average
    power_avg_w: float | None = None  # the source's own averaged reading (hwmon power1_average, NVML)
    fan_rpm: float | None = None
    fan_pct: float | None = None
    power_cap_w: float | None = None
    power_cap_default_w: float | None = None
    throttle_raw: int | None = None
    reasons: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    link_speed_gts: float | None = None
    link_width: int | None = None
    # Sensors whose read failed in this sample (EBUSY, EIO, NVML errors): a failing sensor is not
    # a cool card (r9700ctl/agent/thermal.py: "thermally blind").
    errors: list[str] = field(default_factory=list)


def decode_nvidia(mask: int) -> tuple[list[str], list[str]]:
    """Names and groups of the set bits of an NVML clocks-event-reasons mask."""
    names, groups = [], []
    for bit, (name, group) in NVIDIA_REASONS.items():
        if mask & bit:
            names.append(name)
            if group not in groups:
                groups.append(group)
    unknown = mask & ~sum(NVIDIA_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
        if "other" not in groups:
            groups.append("other")
    return names, groups


def decode_amd(mask: int, hotspot_c: float | None, hotspot_credible_c: float) -> tuple[list[str], list[str]]:
    """Names and groups of indep_throttle_status bits (TEMP_HOTSPOT needs a hot reading)."""
    names, groups = [], []
    for bit in range(64):
        if not mask >> bit & 1:
            continue
        names.append(AMD_THROTTLERS.get(bit, f"BIT{bit}"))
        group = amd_group(bit)
        if bit == AMD_TEMP_HOTSPOT_BIT and (hotspot_c is None or hotspot_c < hotspot_credible_c):
            group = "thermal_unconfirmed"
        if group not in groups:
            groups.append(group)
    return names, groups


# gpu_metrics_v1_3 (drivers/gpu/drm/amd/include/kgd_pp_interface.h), naturally aligned, 120 bytes.
_V1_3 = struct.Struct("<HBB6H3HHQQ7H7HIHHHHII4HQ3HHQ")
_V1_3_FIELDS = (
    "structure_size", "format_revision", "content_revision", "temperature_edge", "temperature_hotspot",
    "temperature_mem", "temperature_vrgfx", "temperature_vrsoc", "temperature_vrmem",
    "average_gfx_activity", "average_umc_activity", "average_mm_activity", "average_socket_power",
    "energy_accumulator", "system_clock_counter", "average_gfxclk_frequency",
    "average_socclk_frequency", "average_uclk_frequency", "average_vclk0_frequency",
    "average_dclk0_frequency", "average_vclk1_frequency", "average_dclk1_frequency", "current_gfxclk",
    "current_socclk", "current_uclk", "current_vclk0", "current_dclk0", "current_vclk1",
    "current_dclk1", "throttle_status", "current_fan_speed", "pcie_link_width", "pcie_link_speed",
    "padding", "gfx_activity_acc", "mem_activity_acc", "hbm0", "hbm1", "hbm2", "hbm3",
    "firmware_timestamp", "voltage_soc", "voltage_gfx", "voltage_mem", "padding1",
    "indep_throttle_status",
)  # fmt: skip
_NOT_AVAILABLE_U16 = 0xFFFF


def parse_gpu_metrics(blob: bytes) -> dict[str, int] | None:
    """Fields of a gpu_metrics v1.3+ table (v1.4+ and v2 APU tables are other layouts: None)."""
    if len(blob) < _V1_3.size:
        return None
    fields = dict(zip(_V1_3_FIELDS, _V1_3.unpack_from(blob), strict=True))
    if fields["format_revision"] != 1 or fields["content_revision"] != 3:
        return None
    return fields


def _u16(value: int) -> float | None:
    return None if value == _NOT_AVAILABLE_U16 else float(value)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _sensor(path: Path, sensor: str, sample: Sample, scale: float = 1.0) -> float | None:
    """A hwmon reading; an absent attribute is None, one that exists but fails to read is noted
    in sample.errors (amdgpu answers EBUSY/EIO when the card is parked or the SMU does not respond)."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError:
        sample.errors.append(sensor)
        return None
    value = _number(text, scale)
    if value is None and text:
        sample.errors.append(sensor)
    return value


def _number(text: str | None, scale: float = 1.0) -> float | None:
    if text is None:
        return None
    try:
        return float(text.split()[0]) * scale
    except (ValueError, IndexError):
        return None


def read_sysfs_link(device_dir: Path) -> tuple[float | None, int | None]:
    """Current PCIe link of a PCI function: ("32.0 GT/s PCIe", "16") -> (32.0, 16)."""
    speed = _number(_read(device_dir / "current_link_speed"))
    width = _number(_read(device_dir / "current_link_width"))
    return speed, (int(width) if width is not None else None)


class Source(Protocol):
    name: str

    def read(self, t: float) -> list[Sample]: ...


class AmdSysfsSource:
    """gpu_metrics + hwmon + link of each GPU's PCI function under `root`."""

    name = "sysfs gpu_metrics + hwmon"

    def __init__(
        self,
        root: str | Path,
        gpus: Sequence[tuple[int, str]],
        hotspot_credible_c: float,
        link_addresses: dict[int, str | None] | None = None,
    ) -> None:
        base = Path(root) / "sys/bus/pci/devices"
        links = link_addresses or {}
        self.dirs = [(index, base / pci, base / (links.get(index) or pci)) for index, pci in gpus]
        self.hotspot_credible_c = hotspot_credible_c

    @staticmethod
    def _hwmon(device_dir: Path) -> Path | None:
        found = sorted((device_dir / "hwmon").glob("hwmon*"))
        return found[0] if found else None

    def read(self, t: float) -> list[Sample]:
        out = []
        for index, d, link_dir in self.dirs:
            s = Sample(t=t, gpu=index)
            hw = self._hwmon(d)
            if hw is not None:
                # amdgpu's hwmon (amdgpu_pm.c, DOC: hwmon): temp1 edge, temp2 junction, temp3 memory in
                # millidegrees; power1_input instantaneous and power1_average in microwatts; fan1_input rpm.
                s.temp_c = _sensor(hw / "temp1_input", "temp_c", s, 1e-3)
                s.hotspot_c = _sensor(hw / "temp2_input", "hotspot_c", s, 1e-3)
                s.mem_temp_c = _sensor(hw / "temp3_input", "mem_temp_c", s, 1e-3)
                s.power_avg_w = _sensor(hw / "power1_average", "power_w", s, 1e-6)
                instant = _sensor(hw / "power1_input", "power_w", s, 1e-6)
                s.power_w = instant if instant is not None else s.power_avg_w
                s.fan_rpm = _sensor(hw / "fan1_input", "fan_rpm", s)
                s.power_cap_w = _number(_read(hw / "power1_cap"), 1e-6)
                s.power_cap_default_w = _number(_read(hw / "power1_cap_default"), 1e-6)
                s.sclk_mhz = _number(_read(hw / "freq1_input"), 1e-6)
                s.mclk_mhz = _number(_read(hw / "freq2_input"), 1e-6)
            try:
                metrics = parse_gpu_metrics((d / "gpu_metrics").read_bytes())
            except OSError:
                metrics = None
            if metrics is not None:
                s.sclk_mhz = _u16(metrics["current_gfxclk"]) or s.sclk_mhz
                s.mclk_mhz = _u16(metrics["current_uclk"]) or s.mclk_mhz
                s.hotspot_c = _u16(metrics["temperature_hotspot"]) or s.hotspot_c
                s.throttle_raw = int(metrics["indep_throttle_status"])
                s.reasons, s.groups = decode_amd(s.throttle_raw, s.hotspot_c, self.hotspot_credible_c)
            # The card's upstream port: a Radeon card's own function sits behind an on-card switch.
            s.link_speed_gts, s.link_width = read_sysfs_link(link_dir)
            out.append(s)
        return out

    def limits(self) -> dict[int, dict[str, float]]:
        """Each card's critical temperatures as its driver reports them (temp1..3_crit, C)."""
        out: dict[int, dict[str, float]] = {}
        for index, d, _ in self.dirs:
            hw = self._hwmon(d)
            crit: dict[str, float] = {}
            for k, name in enumerate(("temp_c", "hotspot_c", "mem_temp_c"), 1):
                value = _number(_read(hw / f"temp{k}_crit"), 1e-3) if hw is not None else None
                if value is not None and 0 < value < 200:  # amdgpu prints a huge value for "none"
                    crit[name] = value
            out[index] = crit
        return out


def normalize_pci(address: str) -> str:
    """'00000000:17:00.0' or '0000:17:00.0' -> '0000:17:00.0' (lower case)."""
    address = address.strip().lower()
    domain, sep, rest = address.partition(":")
    if not sep or rest.count(":") != 1:
        return address
    return f"{int(domain, 16):04x}:{rest}"


class NvmlSource:
    """NVML through pynvml; `gpus` maps torch indices to PCI addresses."""

    name = "nvml"

    def __init__(self, gpus: Sequence[tuple[int, str | None]]) -> None:
        import pynvml  # nvidia-ml-py; ImportError tells the caller to use nvidia-smi

        self.nvml = pynvml
        pynvml.nvmlInit()
        handles = {}
        for k in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(k)
            bus = pynvml.nvmlDeviceGetPciInfo(h).busId
            handles[normalize_pci(bus.decode() if isinstance(bus, bytes) else bus)] = h
        ordered = list(handles.values())
        self.handles = []
        for pos, (index, pci) in enumerate(gpus):
            h = handles.get(normalize_pci(pci)) if pci else None
            self.handles.append((index, h if h is not None else ordered[min(pos, len(ordered) - 1)]))

    def _get(self, fn: str, *args: Any, sample: Sample | None = None, sensor: str = "") -> Any:
        """An NVML reading; NOT_SUPPORTED is None, any other NVML error is noted in sample.errors."""
        f = getattr(self.nvml, fn, None)
        if f is None:
            return None
        try:
            return f(*args)
        except self.nvml.NVMLError as err:
            unsupported = getattr(self.nvml, "NVML_ERROR_NOT_SUPPORTED", None)
            if sample is not None and sensor and getattr(err, "value", None) != unsupported:
                sample.errors.append(sensor)
            return None

    def _instant_power_w(self, h: Any, sample: Sample) -> float | None:
        """NVML_FI_DEV_POWER_INSTANT: nvmlDeviceGetPowerUsage averages over 1 s on Ampere (except
        GA100) and newer (NVML reference), which would hide the peaks a 10 Hz sampler is for."""
        # nvml.h: #define NVML_FI_DEV_POWER_INSTANT 186 ("current instantaneous power usage in mW"),
        # for bindings that predate the name.
        field_id = getattr(self.nvml, "NVML_FI_DEV_POWER_INSTANT", 186)
        values = self._get("nvmlDeviceGetFieldValues", h, [field_id], sample=sample, sensor="power_w")
        if not values or getattr(values[0], "nvmlReturn", 1) != 0:
            return None
        return _float(values[0].value.uiVal, 1e-3)

    def limits(self) -> dict[int, dict[str, float]]:
        """The GPU temperature at which the card shuts down (NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)."""
        n, out = self.nvml, {}
        for index, h in self.handles:
            value = _float(
                self._get("nvmlDeviceGetTemperatureThreshold", h, n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
            )
            out[index] = {"temp_c": value} if value else {}
        return out

    def read(self, t: float) -> list[Sample]:
        n = self.nvml
        out = []
        for index, h in self.handles:
            s = Sample(t=t, gpu=index)
            s.sclk_mhz = _float(self._get("nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_SM))
            s.mclk_mhz = _float(self._get("nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_MEM))
            s.temp_c = _float(
                self._get("nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU, sample=s, sensor="temp_c")
            )
            s.power_avg_w = _float(self._get("nvmlDeviceGetPowerUsage", h, sample=s, sensor="power_w"), 1e-3)
            instant = self._instant_power_w(h, s)
            s.power_w = instant if instant is not None else s.power_avg_w
            s.fan_pct = _float(self._get("nvmlDeviceGetFanSpeed", h, sample=s, sensor="fan_pct"))
            s.power_cap_w = _float(self._get("nvmlDeviceGetEnforcedPowerLimit", h), 1e-3)
            s.power_cap_default_w = _float(self._get("nvmlDeviceGetPowerManagementDefaultLimit", h), 1e-3)
            mask = self._get("nvmlDeviceGetCurrentClocksEventReasons", h)
            if mask is None:
                mask = self._get("nvmlDeviceGetCurrentClocksThrottleReasons", h)
            if mask is not None:
                s.throttle_raw = int(mask)
                s.reasons, s.groups = decode_nvidia(s.throttle_raw)
            gen = self._get("nvmlDeviceGetCurrPcieLinkGeneration", h)
            s.link_speed_gts = GEN_TO_GTS.get(int(gen)) if gen is not None else None
            width = self._get("nvmlDeviceGetCurrPcieLinkWidth", h)
            s.link_width = int(width) if width is not None else None
            out.append(s)
        return out


def _float(value: Any, scale: float = 1.0) -> float | None:
    try:
        return float(value) * scale if value is not None else None
    except (TypeError, ValueError):
        return None


NVIDIA_SMI_FIELDS = (
    "pci.bus_id",
    "clocks.sm",
    "clocks.mem",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "power.default_limit",
    "clocks_event_reasons.active",
    "pcie.link.gen.current",
    "pcie.link.width.current",
)


def parse_nvidia_smi_csv(text: str, t: float, gpus: Sequence[tuple[int, str | None]]) -> list[Sample]:
    """Rows of `nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits`."""
    rows = {}
    order = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(NVIDIA_SMI_FIELDS):
            continue
        rows[normalize_pci(cells[0])] = cells
        order.append(cells)
    out = []
    for pos, (index, pci) in enumerate(gpus):
        cells = rows.get(normalize_pci(pci)) if pci else None
        if cells is None and pos < len(order):
            cells = order[pos]
        if cells is None:
            continue
        s = Sample(t=t, gpu=index)
        s.sclk_mhz, s.mclk_mhz, s.temp_c = _cell(cells[1]), _cell(cells[2]), _cell(cells[3])
        s.power_w, s.power_cap_w, s.power_cap_default_w = _cell(cells[4]), _cell(cells[5]), _cell(cells[6])
        try:
            s.throttle_raw = int(cells[7], 16)
            s.reasons, s.groups = decode_nvidia(s.throttle_raw)
        except ValueError:
            pass
        gen = _cell(cells[8])
        s.link_speed_gts = GEN_TO_GTS.get(int(gen)) if gen is not None else None
        width = _cell(cells[9])
        s.link_width = int(width) if width is not None else None
        out.append(s)
    return out


def _cell(text: str) -> float | None:
    """A csv cell as a number; '[N/A]', 'N/A', '[Not Supported]' give None."""
    try:
        return float(text)
    except ValueError:
        return None


class NvidiaSmiSource:
    name = "nvidia-smi"

    def __init__(self, gpus: Sequence[tuple[int, str | None]], binary: str = "nvidia-smi") -> None:
        self.gpus = list(gpus)
        self.binary = binary

    def read(self, t: float) -> list[Sample]:
        cmd = [self.binary, f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", "--format=csv,noheader,nounits"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
        return parse_nvidia_smi_csv(done.stdout, t, self.gpus)


def pick_source(
    vendor: str,
    gpus: Sequence[tuple[int, str | None]],
    root: str | Path = "/",
    hotspot_credible_c: float | None = None,
    link_addresses: dict[int, str | None] | None = None,
) -> Source | None:
    """The best source on this node, or None when nothing can be read.

    AMD needs `hotspot_credible_c` (thresholds compute.hotspot_warn_c): the reading that makes a
    TEMP_HOTSPOT bit count.
    """
    if vendor == "amd":
        if hotspot_credible_c is None:
            raise ValueError("the AMD sampler needs hotspot_credible_c (thresholds compute.hotspot_warn_c)")
        known = [(i, p) for i, p in gpus if p]
        return AmdSysfsSource(root, known, hotspot_credible_c, link_addresses) if known else None
    try:
        return NvmlSource(gpus)
    except Exception:  # no pynvml, or NVML failed to start: nvidia-smi reads the same counters
        pass
    if shutil.which("nvidia-smi"):
        return NvidiaSmiSource(gpus)
    return None


class Sampler:
    """Reads `source` every `interval_s` seconds on a background thread until stop()."""

    def __init__(self, source: Source | None, interval_s: float = 0.5) -> None:
        self.source = source
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="r9700ctl-sampler", daemon=True)
        self._t0 = 0.0

    def _loop(self) -> None:
        # A fixed schedule (tick k at k x interval), not "read, then wait the interval": the time
        # a read takes must not stretch the period, or a 10 Hz sampler runs at 9.
        tick = 0
        while True:
            t = time.monotonic() - self._t0
            try:
                self.samples.extend(self.source.read(t))  # type: ignore[union-attr]
            except Exception as err:  # a failed read is evidence, never a crash of the load
                if len(self.errors) < 10:
                    self.errors.append(f"{type(err).__name__}: {err}")
            tick = max(tick + 1, int((time.monotonic() - self._t0) / self.interval_s))
            if self._stop.wait(max(0.0, tick * self.interval_s - (time.monotonic() - self._t0))):
                return

    def start(self) -> Sampler:
        self._t0 = time.monotonic()
        if self.source is not None:
            self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        return self.samples


def summarize(samples: Sequence[Sample], gpu: int) -> dict[str, Any]:
    """Per-GPU summary: clock median and p5, temperatures, power, throttle-group counts."""
    mine = [s for s in samples if s.gpu == gpu]
    out: dict[str, Any] = {"samples": len(mine)}
    for name in (
        "sclk_mhz",
        "mclk_mhz",
        "power_w",
        "temp_c",
        "hotspot_c",
        "mem_temp_c",
        "fan_rpm",
        "fan_pct",
    ):
        values = [getattr(s, name) for s in mine if getattr(s, name) is not None]
        if values:
            out[name] = {
                "median": stats.median(values),
                "p5": stats.percentile(values, 5),
                "max": max(values),
            }
    caps = [s.power_cap_w for s in mine if s.power_cap_w is not None]
    defaults = [s.power_cap_default_w for s in mine if s.power_cap_default_w is not None]
    out["power_cap_w"] = caps[-1] if caps else None
    out["power_cap_default_w"] = defaults[-1] if defaults else None
    with_bits = [s for s in mine if s.throttle_raw is not None]
    out["throttle_samples"] = len(with_bits)
    groups: dict[str, dict[str, Any]] = {}
    for group in sorted({g for s in with_bits for g in s.groups}):
        flags = [group in s.groups for s in with_bits]
        groups[group] = {
            "count": sum(flags),
            "fraction": sum(flags) / len(with_bits),
            "longest_run": stats.longest_run(flags),
            "reasons": sorted({r for s in with_bits if group in s.groups for r in s.reasons}),
        }
    out["throttle_groups"] = groups
    links = [(s.link_speed_gts, s.link_width) for s in mine if s.link_speed_gts is not None]
    if links:
        out["link_under_load"] = {
            "max_speed_gts": max(sp for sp, _ in links),
            "max_width": max((w for _, w in links if w is not None), default=None),
            "min_speed_gts": min(sp for sp, _ in links),
        }
    return out


def sample_rate_hz(samples: Sequence[Sample], gpu: int) -> float | None:
    """Readings per second actually achieved for one GPU (None with fewer than two)."""
    times = [s.t for s in samples if s.gpu == gpu]
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    return (len(times) - 1) / (times[-1] - times[0])


def samples_json(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """Samples as plain dicts (rounded), for the evidence."""
    out = []
    for s in samples:
        d = asdict(s)
        d["t"] = round(s.t, 3)
        out.append({k: v for k, v in d.items() if v not in (None, [])})
    return out
