"""What the roles do for ROCm's apt source, by hand, for lab tests that need the stand-in packages on
a node that was never provisioned: the mirror's key, a deb822 source and pin 600 on the mirror's
origin (Debian ships a rocminfo package of its own, 5.2.3, that would win over ROCm's otherwise)."""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

from r9700ctl.lab.naming import HOST_NAME

# A manifest release with gfx1201; the lab's mirror serves every release.
RELEASE = "7.1.1"


def add_rocm_source(lab: Any, node: str, release: str = RELEASE) -> subprocess.CompletedProcess[str]:
    """Key, source and pin on `node`, then apt-get update; returns the ssh result."""
    fetch = (
        f"import urllib.request,sys; sys.stdout.buffer.write(urllib.request.urlopen('{lab.key_url}').read())"
    )
    source = (
        f"Types: deb\nURIs: {lab.mirror_url}/rocm/apt/{release}\nSuites: bookworm\n"
        "Components: main\nSigned-By: /etc/apt/keyrings/rocm.asc\n"
    )
    # The mirror's Origin is the host name its URL names (lab-host), as r9700_repos pins it.
    pin = f"Package: *\nPin: release o={HOST_NAME}\nPin-Priority: 600\n"
    script = "\n".join(
        [
            "set -e",
            "sudo install -d -m 0755 /etc/apt/keyrings",
            f"python3 -c {shlex.quote(fetch)} | sudo tee /etc/apt/keyrings/rocm.asc >/dev/null",
            f"printf %s {shlex.quote(source)} | sudo tee /etc/apt/sources.list.d/rocm.sources >/dev/null",
            f"printf %s {shlex.quote(pin)} | sudo tee /etc/apt/preferences.d/rocm-pin-600 >/dev/null",
            "sudo apt-get update -q",
        ]
    )
    return lab.ssh(node, script)


STAND_IN_PACKAGES = "rocm-hip-runtime amd-smi-lib rocm-smi-lib"


def install_stand_in_rocm(lab: Any, node: str, packages: str = STAND_IN_PACKAGES) -> None:
    """The source as above, then the stand-in packages; asserts both worked."""
    update = add_rocm_source(lab, node)
    assert update.returncode == 0, update.stdout + update.stderr
    install = lab.ssh(node, f"sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q {packages}")
    assert install.returncode == 0, install.stdout + install.stderr
