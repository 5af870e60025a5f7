"""apt-cacher-ng on the bridge address: the nodes' only way to Debian's packages.

It runs with its own minimal configuration: the packaged /etc/apt-cacher-ng/acng.conf remaps
Debian URLs to a backend chosen at install time (ftp.debian.org) that may not be reachable,
while without Remap lines it is a plain caching proxy for whatever mirror the node asks for.
"""

from __future__ import annotations

from pathlib import Path

from r9700ctl.lab import processes
from r9700ctl.lab.hostcheck import tool


def config(directory: Path, address: str, port: int) -> str:
    base = directory / "acng"
    return (
        "# r9700ctl lab: apt-cacher-ng for one lab, bound to its bridge address only\n"
        f"CacheDir: {base / 'cache'}\n"
        f"LogDir: {base / 'log'}\n"
        "SupportDir: /usr/lib/apt-cacher-ng\n"
        f"BindAddress: {address}\n"
        f"Port: {port}\n"
        f"SocketPath: {base / 'socket'}\n"
        f"PidFile: {base / 'acng.pid'}\n"
        "ForeGround: 1\n"
        "ExThreshold: 4\n"
    )


def start(directory: Path, address: str, port: int, log: Path) -> int:
    base = directory / "acng"
    for sub in ("cache", "log", "conf"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "conf" / "acng.conf").write_text(config(directory, address, port))
    return processes.spawn([tool("apt-cacher-ng"), "-c", str(base / "conf")], log)
