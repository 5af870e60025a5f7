"""Thresholds for the node's GPU model: data/thresholds.yaml, merged in one place.

Choice of section (`resolve`): the model key itself; else a section whose `match_vendor` is the
GPUs' PCI vendor; else `default`, the strictest values, so an unknown card is never judged
leniently (ROCm/cvs: "an unknown collective gets the tightest threshold"). A node with mixed
models uses `default`. The section is merged over `default`; an overrides file (`--thresholds`)
with the same layout is merged over both. Values are read flat: "pcie.expect_width".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent.datafiles import DataFileError, load_data, load_yaml

DEFAULT = "default"
# Keys of a model section that configure matching, not thresholds.
_META_KEYS = {"match_vendor"}


@dataclass(frozen=True)
class Thresholds:
    """The resolved values for one node: `section` names where they came from."""

    section: str
    values: dict[str, Any] = field(default_factory=dict)
    reason: str = ""

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.values


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"pcie": {"expect_width": 16}} -> {"pcie.expect_width": 16}."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _models(document: Any, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(document, Mapping) or not isinstance(document.get("models"), Mapping):
        raise DataFileError(f"{where}: expected a top-level 'models:' mapping")
    return {str(k): dict(v or {}) for k, v in document["models"].items()}


def choose_section(
    models: Mapping[str, Mapping[str, Any]], model_keys: Iterable[str], vendors: Iterable[str]
) -> tuple[str, str]:
    """(section, reason) for GPUs of these model keys and PCI vendors."""
    keys = sorted(set(model_keys))
    vendor_set = sorted({v.lower() for v in vendors if v})
    if len(keys) > 1:
        return DEFAULT, f"mixed GPU models on this node ({', '.join(keys)}): strictest thresholds"
    if keys and keys[0] in models:
        return keys[0], "thresholds for this model"
    if len(vendor_set) == 1:
        for name, section in models.items():
            if str(section.get("match_vendor", "")).lower() == vendor_set[0]:
                label = keys[0] if keys else "unknown model"
                return name, f"{label}: generic thresholds for PCI vendor {vendor_set[0]}"
    label = keys[0] if keys else "no GPU model known"
    return DEFAULT, f"{label}: not in thresholds.yaml, strictest thresholds"


def resolve(
    model_keys: Iterable[str],
    vendors: Iterable[str] = (),
    *,
    overrides: Path | None = None,
    document: Any = None,
) -> Thresholds:
    """The thresholds for a node whose GPUs have these model keys and vendors."""
    document = load_data("thresholds.yaml") if document is None else document
    models = _models(document, "thresholds.yaml")
    section, reason = choose_section(models, list(model_keys), list(vendors))
    merged = flatten(models.get(DEFAULT, {}))
    if section != DEFAULT:
        merged.update(flatten({k: v for k, v in models[section].items() if k not in _META_KEYS}))
    if overrides is not None:
        extra = _models(load_yaml(overrides), str(overrides))
        merged.update(flatten(extra.get(DEFAULT, {})))
        if section != DEFAULT and section in extra:
            merged.update(flatten({k: v for k, v in extra[section].items() if k not in _META_KEYS}))
        reason += f"; overrides from {overrides}"
    return Thresholds(section=section, values=merged, reason=reason)
