"""What software and settings the figures were measured under (docs/validation.md R-G8).

Kernel, command line, OS, BIOS, driver module versions, ROCm/HIP/CUDA/RCCL/torch versions and
the variables that steer RCCL/NCCL and the HSA runtime. The controller groups fleet
comparisons by this, so a figure always travels with its stack. Readers take the root path.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from r9700ctl.agent.sysfs import read_text

# Variables that change what RCCL/NCCL, the HSA runtime and HIP/CUDA do.
ENV_PREFIXES = ("NCCL_", "RCCL_", "HSA_", "HIP_", "ROCR_", "TORCH_NCCL_", "GPU_MAX_HW_QUEUES")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "AMD_SERIALIZE_KERNEL", "AMD_LOG_LEVEL")


def relevant_variables(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


def parse_os_release(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            values[key] = value.strip().strip("\"'")
    return values


# Files that give every login session its environment: pam_env reads /etc/environment (Debian's
# sshd PAM stack, `session required pam_env.so`), systemd's environment.d(5) the *.conf files. A
# variable set there reaches the users' programs even when this agent runs under sudo, whose
# env_reset drops it from the agent's own environment.
SYSTEM_ENV_FILES = ("etc/environment", "etc/environment.d/*.conf")


def system_variables(root: Path) -> dict[str, str]:
    """The relevant variables (ENV_PREFIXES, ENV_NAMES) the system-wide environment files set."""
    found: dict[str, str] = {}
    for pattern in SYSTEM_ENV_FILES:
        for path in sorted(root.glob(pattern)):
            for line in (read_text(path) or "").splitlines():
                key, sep, value = line.strip().removeprefix("export ").partition("=")
                if sep and key and not key.startswith("#"):
                    found[key.strip()] = value.strip().strip("\"'")
    return relevant_variables(found)


def _first_cpu_model(root: Path) -> str | None:
    for line in (read_text(root / "proc/cpuinfo") or "").splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def _mem_total_bytes(root: Path) -> int | None:
    for line in (read_text(root / "proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            try:
                return int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                return None
    return None


def capture(
    root: Path, torch_probe: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The environment record of the report's "environment" field."""
    probe = dict(torch_probe or {})
    os_release = parse_os_release(
        read_text(root / "etc/os-release") or read_text(root / "usr/lib/os-release") or ""
    )
    dmi = root / "sys/class/dmi/id"
    return {
        "hostname": socket.gethostname(),
        "kernel": read_text(root / "proc/sys/kernel/osrelease") or platform.release(),
        "cmdline": read_text(root / "proc/cmdline"),
        "os": {k: os_release.get(k) for k in ("ID", "VERSION_ID", "VERSION_CODENAME", "PRETTY_NAME")},
        "bios": {
            "vendor": read_text(dmi / "bios_vendor"),
            "version": read_text(dmi / "bios_version"),
            "date": read_text(dmi / "bios_date"),
            "board": " ".join(filter(None, (read_text(dmi / "board_vendor"), read_text(dmi / "board_name"))))
            or None,
            "system": " ".join(filter(None, (read_text(dmi / "sys_vendor"), read_text(dmi / "product_name"))))
            or None,
        },
        "cpu": _first_cpu_model(root),
        "cpus": os.cpu_count(),
        "memory_bytes": _mem_total_bytes(root),
        "drivers": {
            "amdgpu": read_text(root / "sys/module/amdgpu/version"),
            "amdgpu_loaded": (root / "sys/module/amdgpu").is_dir(),
            "nvidia": read_text(root / "sys/module/nvidia/version"),
        },
        "rocm": read_text(root / "opt/rocm/.info/version"),
        "python": platform.python_version(),
        "torch": probe.get("torch"),
        "hip": probe.get("hip"),
        "cuda": probe.get("cuda"),
        "nccl": probe.get("nccl"),
        "torch_arch_list": probe.get("arch_list"),
        "variables": relevant_variables(os.environ if environ is None else environ),
        "system_variables": system_variables(root),
    }
