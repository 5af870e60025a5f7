"""Build a fake node file system (sysfs, /proc, /dev) in a temp dir, laid out like the kernel's.

The agent's readers take a root path; these trees give them the same shapes a real node has:
/sys/bus/pci/devices/<bdf> symlinks into /sys/devices/pciDDDD:BB/<port>/<...>/<bdf> (so the
bridge chain is real directory nesting), attribute files with the kernel's spellings
("32.0 GT/s PCIe"), the `resource` table, a 4 KiB `config` with an ACS capability, the KFD
topology and /dev nodes. Values are typical ones, not a recording of a particular machine.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from agent_stage import staged_agent_dir

GIB = 2**30
BRIDGE = "0x060400"
VGA = "0x030000"
DISPLAY_3D = "0x030200"
# resource flags: IORESOURCE_MEM | PREFETCH | MEM_64 (+ alignment bits, as the kernel prints them)
PREFETCH_64 = 0x14220C
MEM_32 = 0x40200


class FakeNode:
    def __init__(self, root: Path, boot_id: str = "11111111-2222-3333-4444-555555555555") -> None:
        self.root = root
        self._write("proc/sys/kernel/random/boot_id", boot_id + "\n")
        self._write("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n")
        (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
        self._paths: dict[str, Path] = {}
        self._kfd_nodes = 0
        self.add_kfd_cpu_node()

    # --- low level -------------------------------------------------------------------

    def _write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def path_of(self, bdf: str) -> Path:
        return self._paths[bdf]

    def add_pci(
        self,
        bdf: str,
        parent: str | None,
        *,
        vendor: str,
        device: str,
        pci_class: str,
        numa: int = 0,
        cur: tuple[str, int] | None = ("32.0 GT/s PCIe", 16),
        maxi: tuple[str, int] | None = ("32.0 GT/s PCIe", 16),
        driver: str | None = None,
    ) -> Path:
        """A PCI function under `parent` (None: directly under the host bridge pciDDDD:BB)."""
        if parent is None:
            base = self.root / "sys/devices" / f"pci{bdf[:4]}:{bdf[5:7]}"
        else:
            base = self._paths[parent]
        path = base / bdf
        path.mkdir(parents=True)
        self._paths[bdf] = path
        (path / "vendor").write_text(f"0x{vendor}\n")
        (path / "device").write_text(f"0x{device}\n")
        (path / "class").write_text(f"{pci_class}\n")
        (path / "numa_node").write_text(f"{numa}\n")
        if cur:
            (path / "current_link_speed").write_text(f"{cur[0]}\n")
            (path / "current_link_width").write_text(f"{cur[1]}\n")
        if maxi:
            (path / "max_link_speed").write_text(f"{maxi[0]}\n")
            (path / "max_link_width").write_text(f"{maxi[1]}\n")
        (path / "config").write_bytes(bytes(64))
        link = self.root / "sys/bus/pci/devices" / bdf
        link.symlink_to(os.path.relpath(path, link.parent))
        if driver:
            drv = self.root / "sys/bus/pci/drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            (path / "driver").symlink_to(os.path.relpath(drv, path))
        return path

    def set_resources(self, bdf: str, bars: list[tuple[int, int]]) -> None:
        """BARs as (size, flags); written as the kernel's start/end/flags table (13 lines)."""
        lines, start = [], 0x7800000000
        for size, flags in bars:
            if size:
                lines.append(f"0x{start:016x} 0x{start + size - 1:016x} 0x{flags:016x}")
                start += max(size, 2**20)
            else:
                lines.append("0x0000000000000000 0x0000000000000000 0x0000000000000000")
        lines += ["0x0000000000000000 0x0000000000000000 0x0000000000000000"] * (13 - len(lines))
        (self._paths[bdf] / "resource").write_text("\n".join(lines) + "\n")

    def set_acs(self, bdf: str, control: int | None, *, readable: bool = True) -> None:
        """A 4 KiB config space with an AER capability at 0x100 then ACS at 0x148 (control at +6)."""
        if not readable:
            (self._paths[bdf] / "config").write_bytes(bytes(64))
            return
        config = bytearray(4096)
        config[0x100:0x104] = (0x0001 | (1 << 16) | (0x148 << 20)).to_bytes(4, "little")  # AER -> next 0x148
        if control is None:
            config[0x148:0x14C] = (0x0018 | (1 << 16)).to_bytes(4, "little")  # LTR, last capability
        else:
            config[0x148:0x14C] = (0x000D | (1 << 16)).to_bytes(4, "little")  # ACS, last capability
            config[0x14C:0x14E] = (0x005F).to_bytes(2, "little")
            config[0x14E:0x150] = control.to_bytes(2, "little")
        (self._paths[bdf] / "config").write_bytes(bytes(config))

    def set_aer(self, bdf: str, **kinds: dict[str, int]) -> None:
        """aer_dev_correctable/_nonfatal/_fatal as the kernel prints them ("RxErr 3" ... TOTAL_ERR_*).

        set_aer(bdf, correctable={"RxErr": 3}) writes every kind, the others all zero.
        """
        uncorrectable = ["DLP", "SDES", "TLP", "FCP", "CmpltTO", "UnxCmplt", "MalfTLP"]
        names = {
            "correctable": (["RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout"], "TOTAL_ERR_COR"),
            "nonfatal": (uncorrectable, "TOTAL_ERR_NONFATAL"),
            "fatal": (uncorrectable, "TOTAL_ERR_FATAL"),
        }
        for kind, (errors, total) in names.items():
            counts = kinds.get(kind) or {}
            lines = [f"{name} {counts.get(name, 0)}" for name in errors]
            lines.append(f"{total} {sum(counts.values())}")
            (self._paths[bdf] / f"aer_dev_{kind}").write_text("\n".join(lines) + "\n")

    def add_slot(self, name: str, bdf: str) -> None:
        """/sys/bus/pci/slots/<name>/address: the slot holding the device (domain:bus:device)."""
        self._write(f"sys/bus/pci/slots/{name}/address", bdf.rsplit(".", 1)[0] + "\n")

    def set_iommu_group(self, bdf: str, group: int, domain_type: str) -> None:
        group_dir = self.root / "sys/kernel/iommu_groups" / str(group)
        group_dir.mkdir(parents=True, exist_ok=True)
        (group_dir / "type").write_text(domain_type + "\n")
        target = self._paths[bdf] / "iommu_group"
        target.symlink_to(os.path.relpath(group_dir, target.parent))
        (self.root / "sys/class/iommu/ivhd0").mkdir(parents=True, exist_ok=True)

    # --- kernel module, /dev, KFD -----------------------------------------------------

    def load_module(self, name: str, version: str | None = None) -> None:
        mod = self.root / "sys/module" / name
        mod.mkdir(parents=True, exist_ok=True)
        if version:
            (mod / "version").write_text(version + "\n")

    def add_dev(self, rel: str) -> Path:
        return self._write(rel, "")

    def add_kfd_cpu_node(self) -> None:
        self._kfd_node("cpu_cores_count 32\nsimd_count 0\ngfx_target_version 0\nlocation_id 0\ndomain 0\n")

    def _kfd_node(self, text: str, gpu_id: int | None = None) -> None:
        self._write(f"sys/class/kfd/kfd/topology/nodes/{self._kfd_nodes}/properties", text)
        if gpu_id is not None:
            self._write(f"sys/class/kfd/kfd/topology/nodes/{self._kfd_nodes}/gpu_id", f"{gpu_id}\n")
        self._kfd_nodes += 1

    def add_process(
        self, pid: int, cmdline: list[str], *, ppid: int = 1, fds: dict[int, str] | None = None
    ) -> None:
        """A process as /proc shows it: cmdline (NUL-separated), comm, stat (ppid) and fd symlinks."""
        base = self.root / "proc" / str(pid)
        self._write(f"proc/{pid}/cmdline", "\0".join(cmdline) + "\0")
        self._write(f"proc/{pid}/comm", Path(cmdline[0]).name[:15] + "\n")
        self._write(f"proc/{pid}/stat", f"{pid} ({Path(cmdline[0]).name[:15]}) S {ppid} {pid} {pid} 0\n")
        (base / "fd").mkdir(parents=True, exist_ok=True)
        for fd, target in (fds or {}).items():
            os.symlink(target, base / "fd" / str(fd))

    def add_kfd_process(self, pid: int, gpu_ids: list[int]) -> None:
        """/sys/class/kfd/kfd/proc/<pid>/ as amdgpu makes it for a process with a ROCm context."""
        for gpu_id in gpu_ids:
            self._write(f"sys/class/kfd/kfd/proc/{pid}/vram_{gpu_id}", "268435456\n")
            (self.root / f"sys/class/kfd/kfd/proc/{pid}/stats_{gpu_id}").mkdir(parents=True, exist_ok=True)
        self._write(f"sys/class/kfd/kfd/proc/{pid}/pasid", "32770\n")

    # --- whole cards -------------------------------------------------------------------

    def add_root_port(
        self, bdf: str, *, numa: int = 0, maxi: tuple[str, int] = ("32.0 GT/s PCIe", 16)
    ) -> str:
        self.add_pci(
            bdf, None, vendor="1022", device="14ab", pci_class=BRIDGE, numa=numa, cur=maxi, maxi=maxi
        )
        return bdf

    def add_switch_port(self, bdf: str, parent: str, *, numa: int = 0) -> str:
        """A port of a platform PCIe switch (Broadcom/PLX vendor 1000)."""
        self.add_pci(bdf, parent, vendor="1000", device="c030", pci_class=BRIDGE, numa=numa)
        return bdf

    def add_r9700(
        self,
        bus: int,
        parent: str,
        *,
        numa: int = 0,
        link_cur: tuple[str, int] = ("32.0 GT/s PCIe", 16),
        link_max: tuple[str, int] = ("32.0 GT/s PCIe", 16),
        bar_bytes: int = 32 * GIB,
        vram_bytes: int = 30576 * 2**20,  # what healthy R9700s report (ROCm/ROCm#5832)
        render_minor: int = 128,
        vbios: str = "113-APM7551-100",
        driver: str = "amdgpu",
    ) -> str:
        """An R9700 as the kernel shows it: on-card switch upstream port, downstream port, GPU function."""
        usp, dsp, gpu = f"0000:{bus:02x}:00.0", f"0000:{bus + 1:02x}:00.0", f"0000:{bus + 2:02x}:00.0"
        self.add_pci(
            usp,
            parent,
            vendor="1002",
            device="1478",
            pci_class=BRIDGE,
            numa=numa,
            cur=link_cur,
            maxi=link_max,
        )
        self.add_pci(dsp, usp, vendor="1002", device="1479", pci_class=BRIDGE, numa=numa)
        # The GPU function's own link is the on-card one; values there say nothing about the slot.
        path = self.add_pci(
            gpu,
            dsp,
            vendor="1002",
            device="7551",
            pci_class=VGA,
            numa=numa,
            cur=("2.5 GT/s PCIe", 16),
            maxi=("2.5 GT/s PCIe", 16),
            driver=driver,
        )
        self.set_resources(
            gpu,
            [
                (bar_bytes, PREFETCH_64),
                (0, 0),
                (256 * 2**20, PREFETCH_64),
                (0, 0),
                (0, 0),
                (512 * 1024, MEM_32),
            ],
        )
        (path / "mem_info_vram_total").write_text(f"{vram_bytes}\n")
        (path / "vbios_version").write_text(vbios + "\n")
        (path / "drm" / f"card{render_minor - 128}").mkdir(parents=True)
        (path / "drm" / f"renderD{render_minor}").mkdir(parents=True)
        (path / "pp_dpm_sclk").write_text("0: 500Mhz *\n1: 2350Mhz\n")
        hw = path / "hwmon" / f"hwmon{render_minor - 120}"
        hw.mkdir(parents=True)
        (hw / "power1_cap").write_text("300000000\n")
        (hw / "power1_cap_default").write_text("300000000\n")
        (hw / "power1_average").write_text("33000000\n")
        (hw / "temp1_input").write_text("34000\n")
        (hw / "temp1_label").write_text("edge\n")
        (hw / "temp2_input").write_text("36000\n")
        (hw / "temp2_label").write_text("junction\n")
        location = ((bus + 2) << 8) | 0
        self._kfd_node(
            f"simd_count 128\ngfx_target_version 120001\nvendor_id 4098\ndevice_id 30033\n"
            f"location_id {location}\ndomain 0\ndrm_render_minor {render_minor}\n",
            gpu_id=40000 + render_minor,
        )
        self.add_dev(f"dev/dri/renderD{render_minor}")
        return gpu

    def add_nvidia(self, bdf: str, parent: str, *, numa: int = 0, bar1_bytes: int = 256 * GIB) -> str:
        """An H200-class NVIDIA GPU directly under a port (no on-card switch)."""
        self.add_pci(
            bdf,
            parent,
            vendor="10de",
            device="2335",
            pci_class=DISPLAY_3D,
            numa=numa,
            driver="nvidia",
            cur=("2.5 GT/s PCIe", 16),
            maxi=("32.0 GT/s PCIe", 16),
        )
        self.set_resources(
            bdf, [(16 * 2**20, MEM_32), (bar1_bytes, PREFETCH_64), (0, 0), (32 * 2**20, PREFETCH_64)]
        )
        return bdf

    def add_igpu(self, bdf: str) -> str:
        """AMD Raphael integrated graphics (manifest 1002:164e, discrete: false)."""
        self.add_pci(
            bdf,
            None,
            vendor="1002",
            device="164e",
            pci_class=VGA,
            cur=("16.0 GT/s PCIe", 16),
            maxi=("16.0 GT/s PCIe", 16),
            driver="amdgpu",
        )
        return bdf


def r9700_node(
    root: Path, count: int = 4, *, boot_id: str = "11111111-2222-3333-4444-555555555555"
) -> FakeNode:
    """`count` R9700 cards, each on its own root port, amdgpu loaded, /dev/kfd present."""
    node = FakeNode(root, boot_id)
    for i in range(count):
        port = node.add_root_port(f"0000:00:{i + 1:02x}.1", numa=0 if i < max(1, count // 2) else 1)
        node.add_r9700(0x10 * (i + 1), port, numa=0 if i < max(1, count // 2) else 1, render_minor=128 + i)
    node.load_module("amdgpu", "6.12.12")
    node.add_dev("dev/kfd")
    return node


# --- running the agent as a user would (a real child process) ------------------------------------

REPO = Path(__file__).resolve().parents[2]


def agent_environment(tmp_path: Path) -> dict[str, str]:
    """No torch, fake tools only: the agent's answers do not depend on the test machine."""
    no_torch = tmp_path / "no-torch"
    (no_torch / "torch").mkdir(parents=True)
    (no_torch / "torch/__init__.py").write_text("raise ImportError('No module named torch (test)')\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dmesg = bin_dir / "dmesg"
    dmesg.write_text("#!/bin/sh\nexit 0\n")
    dmesg.chmod(dmesg.stat().st_mode | stat.S_IEXEC)
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "HSA_", "RCCL_", "HIP_"))}
    staged = staged_agent_dir()
    variables.update(PYTHONPATH=f"{no_torch}{os.pathsep}{staged}", PATH=str(bin_dir), NO_COLOR="1")
    return variables


def run_agent(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`python -m r9700ctl.agent ARGS` in a child process with `env`, from the staged agent (as
    the controller runs it: code + data as JSON, r9700ctl.agentpack); paths in ARGS absolute."""
    return subprocess.run(
        [sys.executable, "-m", "r9700ctl.agent", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=staged_agent_dir(),
        timeout=120,
        check=False,
    )
