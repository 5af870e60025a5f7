"""Before the lab touches anything: are we root, and are the host tools there?"""

from __future__ import annotations

import os
import shutil

from r9700ctl.errors import CannotRun

# executable -> the Debian package that ships it (named in the one-line fix).
HOST_TOOLS = {
    "debootstrap": "debootstrap",
    "apt-cacher-ng": "apt-cacher-ng",
    "zstd": "zstd",
    "tar": "tar",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "ip": "iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "mount": "mount",
    "umount": "mount",
    "chroot": "coreutils",
    "gpg": "gnupg",
    "gpgconf": "gnupg",
    "docker-registry": "docker-registry",
}
# apt-cacher-ng and chroot live in sbin, which a sudo-less PATH may lack.
EXTRA_PATH = "/usr/local/sbin:/usr/sbin:/sbin"


def require_root(command: str) -> None:
    if os.geteuid() != 0:
        raise CannotRun(
            what=f"'r9700ctl {command}' needs root: it creates network namespaces, mounts and daemons",
            hint=f"run it as root, e.g. sudo r9700ctl {command}",
        )


def which(tool: str) -> str | None:
    path = os.environ.get("PATH", "") + os.pathsep + EXTRA_PATH
    return shutil.which(tool, path=path)


def missing_tools(tools: dict[str, str] | None = None) -> dict[str, str]:
    """Tools (with their package) that are not installed."""
    return {tool: pkg for tool, pkg in (tools or HOST_TOOLS).items() if which(tool) is None}


def require_tools() -> None:
    missing = missing_tools()
    if missing:
        packages = " ".join(sorted(set(missing.values())))
        raise CannotRun(
            what=f"the lab needs host tools that are missing: {', '.join(sorted(missing))}",
            hint=f"install them: apt-get install -y {packages}",
        )


def tool(name: str) -> str:
    """Absolute path of a host tool (require_tools() ran first)."""
    path = which(name)
    if path is None:
        raise CannotRun(
            what=f"{name} is not installed", hint=f"apt-get install -y {HOST_TOOLS.get(name, name)}"
        )
    return path
