"""SSH keys the lab generates: one client key per lab, one host key per node."""

from __future__ import annotations

from pathlib import Path

from r9700ctl.lab import processes
from r9700ctl.lab.hostcheck import tool

CLIENT_KEY = "id_ed25519"
# A unix socket path holds 107 bytes; ssh adds "/" + 40 (%C) + a 17-byte temporary suffix.
MAX_CONTROL_DIR = 107 - 1 - 40 - 17


def ensure_client_key(directory: Path) -> Path:
    key = directory / CLIENT_KEY
    if not key.is_file():
        processes.run(
            [tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", "r9700ctl-lab", "-f", str(key)],
            what="create the lab's SSH client key",
        )
    return key


def make_host_key(root: Path, node_name: str) -> str:
    """Write the node's own ed25519 host key into its root; returns '<type> <base64>' for known_hosts."""
    key = root / "etc/ssh/ssh_host_ed25519_key"  # node.HOST_KEY
    for path in (key, key.with_name(key.name + ".pub")):
        path.unlink(missing_ok=True)
    processes.run(
        [tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node_name}", "-f", str(key)],
        what=f"create {node_name}'s host key",
    )
    key.chmod(0o600)
    public = key.with_name(key.name + ".pub").read_text().split()
    return f"{public[0]} {public[1]}"


def control_dir(directory: Path, lab_id: int) -> Path:
    """DIR/cm when short enough for a socket path, else a short directory in /tmp (removed by down)."""
    preferred = directory / "cm"
    return preferred if len(str(preferred)) <= MAX_CONTROL_DIR else Path(f"/tmp/r97cm-{lab_id}")
