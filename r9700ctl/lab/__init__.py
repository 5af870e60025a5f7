"""Throwaway test nodes on one Linux machine: a TEST and DEMO environment, never for production.

`up()` builds N Debian 12 nodes (debootstrap root file system, overlayfs per node, own network
namespace, sshd as PID 1 of its own PID namespace) plus, on the host side of the lab bridge, a
package mirror with stand-ins for AMD's repositories and an apt proxy for Debian's packages.
`down()` removes all of it and checks that nothing is left. docs/lab.md tells the whole story.

    from r9700ctl.lab import up, down, NodeOptions
    lab = up(Path("/tmp/r97-x"), nodes=2)
    lab.ssh("node1", "sudo -n true").returncode  # -> 0
    down(lab.directory)
"""

from r9700ctl.lab.api import LabInfo, add_node, down, status, up
from r9700ctl.lab.health import ComponentStatus, LabStatus
from r9700ctl.lab.node import NodeOptions
from r9700ctl.lab.teardown import DownReport

__all__ = [
    "ComponentStatus",
    "DownReport",
    "LabInfo",
    "LabStatus",
    "NodeOptions",
    "add_node",
    "down",
    "status",
    "up",
]
