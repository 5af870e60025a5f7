"""Read every file of a support bundle directory with the parser for its name.

A bundle is one node's directory of recorded tool outputs (`r9700ctl collect`, or what a
customer sends). Every file is optional: what is absent is listed in `missing`, so a
diagnosis can say what it could not judge; what is present but unreadable carries
`.error` in its result.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent.parsers import BUNDLE_FILES


@dataclass
class Bundle:
    directory: Path
    results: dict[str, Any] = field(default_factory=dict)  # file name -> parser result
    missing: list[str] = field(default_factory=list)  # known file names not in the directory
    unknown: list[str] = field(default_factory=list)  # files no parser reads (kept as they are)

    @property
    def errors(self) -> dict[str, str]:
        """File name -> "could not read FILE: reason", for every file that did not parse."""
        return {name: r.error for name, r in self.results.items() if getattr(r, "error", None)}

    def get(self, name: str) -> Any:
        return self.results.get(name)


def _reader(spec: str) -> Any:
    module, function = spec.split(":")
    return getattr(importlib.import_module(f"r9700ctl.agent.parsers.{module}"), function)


def read_bundle(directory: str | Path) -> Bundle:
    """Parse the files of `directory`; never raises for their content (a missing directory
    gives a bundle where every file is missing)."""
    root = Path(directory)
    bundle = Bundle(directory=root)
    present = {p.name for p in root.iterdir() if p.is_file()} if root.is_dir() else set()
    for name, spec in BUNDLE_FILES.items():
        if name in present:
            bundle.results[name] = _reader(spec)(root / name)
        else:
            bundle.missing.append(name)
    bundle.unknown = sorted(present - set(BUNDLE_FILES))
    return bundle
