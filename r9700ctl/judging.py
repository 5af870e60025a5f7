"""What preflight's judges share: a node's GPU as preflight sees it, and the form of an HSA override.

Kept outside the preflight package so that the judges preflight calls (envlist.py, nodeenv.py,
value_rules.py through variables.py) use them without importing preflight back
(tests/unit/test_import_cycles.py); r9700ctl.preflight re-exports both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# HSA_OVERRIDE_GFX_VERSION's form: major.minor.stepping of a gfx target, e.g. 11.0.0 for gfx1100.
HSA_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


@dataclass
class Gpu:
    address: str
    pci_id: str
    name: str
    gfx: str
    discrete: bool
    known: bool
    revision: str = ""  # PCI revision: tells apart products sharing a device id (manifest `skus`)
