"""YAML of r9700ctl's own files (the manifest, the roles' defaults and argument specs, the data
files): PyYAML's safe loader parsed by libyaml where PyYAML was built with it (CSafeLoader: the same
resolver and constructors, the scanning and parsing in C).

Every provision loads the manifest and the roles' specs in each Ansible worker that runs preflight,
one per host: with the pure-Python loader that was about 0.15 CPU-seconds per host on this 2-core
machine (py-spy over a 6-node provision that changed nothing).
"""

from __future__ import annotations

from typing import IO, Any

import yaml

LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(stream: str | bytes | IO[str] | IO[bytes]) -> Any:
    """yaml.safe_load, through libyaml where available."""
    return yaml.load(stream, Loader=LOADER)  # a safe loader: SafeLoader or CSafeLoader
