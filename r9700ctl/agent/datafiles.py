"""The agent's data files (manifest, thresholds) as JSON, read with the standard library only.

The sources are r9700ctl/data/manifest.yaml, thresholds.yaml and codes.yaml on the controller;
the controller converts them to JSON when it packs the agent (r9700ctl/agentpack.py), so the node
needs no YAML reader: the packed tree holds r9700ctl/data/manifest.json, thresholds.json and
codes.json.
Running the agent from a checkout without packing it finds no JSON and says how to pack.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Beside the agent package, as the packer lays it out (tests point this at a packed tree).
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
NOT_PACKED_HINT = (
    "the agent reads the JSON data files the controller writes when it packs the agent: run it through "
    "`r9700ctl validate`, or pack it with `python3 -m r9700ctl.agentpack DIR` and run it from DIR"
)

_cache: dict[Path, Any] = {}


class DataFileError(Exception):
    """A data file is missing or not valid JSON (the message names the file)."""


def load_json(path: Path) -> Any:
    """A JSON document; DataFileError naming the file when it is missing or broken."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataFileError(f"{path}: no such file") from None
    except OSError as exc:
        raise DataFileError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DataFileError(f"{path}: not valid JSON: {exc}") from exc


def load_data(name: str) -> Any:
    """`name` ("manifest", "thresholds" or "codes") from the packed data directory (read once)."""
    path = DATA_DIR / f"{name}.json"
    if path not in _cache:
        if not path.is_file():
            raise DataFileError(f"{path}: missing ({NOT_PACKED_HINT})")
        _cache[path] = load_json(path)
    return _cache[path]


def gpu_models() -> dict[str, dict[str, Any]]:
    """The manifest's GPU models by "vendor:device" PCI id (lower case)."""
    manifest = load_data("manifest") or {}
    return {str(k).lower(): dict(v or {}) for k, v in (manifest.get("gpus") or {}).items()}


def gfx_name(gfx_target_version: int) -> str:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) as an LLVM target: 120001 -> gfx1201."""
    major, rest = divmod(int(gfx_target_version), 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"
