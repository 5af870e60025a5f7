"""`r9700-pci-devices`: the node's display-class PCI devices (GPUs) as JSON, for its node record.

The r9700_node_record role runs it (`r9700-node r9700-pci-devices`) and writes what it prints into
/etc/r9700ctl/node.json: every display-class function whoever made it, read from sysfs by the one
reader preflight's facts use too (r9700ctl.agent.sysfs.display_devices). Lab nodes present their
machine in sysfs (r9700ctl/lab/machine.py), so a lab node is read as any server is. Read only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from r9700ctl.agent import sysfs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="r9700-pci-devices", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="/", help="file-system root (tests use a fake sysfs tree)")
    args = parser.parse_args(argv)
    print(json.dumps({"source": "sysfs", "devices": sysfs.display_devices(Path(args.root))}, sort_keys=True))
    return 0
