"""The reason-code catalogue (r9700ctl/data/codes.yaml): one record per code, append-only.

A verdict that is not PASS carries a code (CheckResult.code); its hint is the code's next step
with the figures of the case. `load()` reads the catalogue once; `record(code)` returns the entry
(KeyError for an unknown code is a bug, caught by the tests that build every verdict).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import yaml

from r9700ctl import paths

FIELDS = ("meaning", "cause", "next", "action", "source")


@dataclass(frozen=True)
class Code:
    code: str
    meaning: str
    cause: str
    next: str
    action: str
    source: str


@functools.lru_cache(maxsize=1)
def load() -> dict[str, Code]:
    with open(paths.data_file("codes.yaml"), encoding="utf-8") as fh:
        document = yaml.safe_load(fh)
    codes = {}
    for name, entry in (document.get("codes") or {}).items():
        missing = [f for f in FIELDS if not str((entry or {}).get(f) or "").strip()]
        if missing:
            raise ValueError(f"codes.yaml: {name} lacks {', '.join(missing)}")
        codes[name] = Code(name, *(str(entry[f]).strip() for f in FIELDS))
    return codes


def record(code: str) -> Code:
    return load()[code]
