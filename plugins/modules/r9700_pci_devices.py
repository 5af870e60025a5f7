#!/usr/bin/python
"""Ansible module: the node's display-class PCI devices (GPUs), read from sysfs.

Runs on the node. Reads /sys/bus/pci/devices/*/{vendor,device,class,subsystem_*} in one
pass (one module call instead of a slurp per file) and keeps every device whose class
is 0x03xxxx (VGA, 3D, display controllers), whichever vendor made it. Lab nodes present
their machine in sysfs too (r9700ctl/lab/machine.py), so there is one way to read a node.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: r9700_pci_devices
short_description: List the display-class PCI devices (GPUs) of a node
description:
  - Reads vendor, device, class and subsystem ids of every PCI device in sysfs and returns the
    ones whose class is 0x03xxxx (display controllers).
  - Never changes anything.
options:
  sysfs_root:
    description: Root of the sysfs tree to read (tests point it at a fake tree).
    type: path
    default: /sys
author: r9700ctl maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the display-class PCI devices (GPUs) of the node
  r9700ctl.nodes.r9700_pci_devices: {}
  register: pci

- name: Count the AMD ones
  ansible.builtin.debug:
    msg: "{{ pci.devices | selectattr('vendor', 'equalto', '0x1002') | list | length }} AMD display devices"
"""

RETURN = r"""
devices:
  description:
    - Display-class devices, sorted by PCI address; ids as lower-case 0x... text, plus vendor_name.
  type: list
  elements: dict
  returned: always
source:
  description: Where the devices came from, always C(sysfs).
  type: str
  returned: always
"""

import os  # noqa: E402  (the documentation comes first: ansible-test's validate-modules)

DISPLAY_CLASS_PREFIX = "0x03"
# Who makes the display devices a GPU server may carry (pci.ids); BMC graphics count too.
VENDOR_NAMES = {
    "0x1002": "AMD",
    "0x10de": "NVIDIA",
    "0x8086": "Intel",
    "0x1a03": "ASPEED",
    "0x102b": "Matrox",
}
FIELDS = ("vendor", "device", "class", "subsystem_vendor", "subsystem_device", "revision")


def read_display_devices(sysfs_root: str) -> list[dict[str, str]]:
    """Display-class devices under sysfs_root/bus/pci/devices, sorted by address."""
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    try:
        addresses = sorted(os.listdir(base))
    except OSError:
        return []
    devices = []
    for address in addresses:
        device = {"address": address}
        for name in FIELDS:
            value = _read(os.path.join(base, address, name))
            if value is not None:
                device[name] = value
        devices.append(device)
    return keep_display(devices)


def keep_display(devices: list[dict]) -> list[dict[str, str]]:
    """Only display-class devices, with ids normalised to lower-case 0x... text."""
    kept = []
    for raw in devices:
        device = {str(k): _normalised(v) for k, v in raw.items()}
        if device.get("class", "").startswith(DISPLAY_CLASS_PREFIX):
            device["vendor_name"] = VENDOR_NAMES.get(device.get("vendor", ""), "unknown")
            kept.append(device)
    return sorted(kept, key=lambda d: d.get("address", ""))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _normalised(value) -> str:
    text = str(value).strip()
    return text.lower() if text.lower().startswith("0x") else text


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    module.exit_json(changed=False, devices=read_display_devices(module.params["sysfs_root"]), source="sysfs")


if __name__ == "__main__":
    main()
