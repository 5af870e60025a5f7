"""Thresholds for the node's GPU model: data/thresholds.yaml (packed as JSON), merged in one place.

thresholds.yaml is the ONLY place a number a verdict depends on lives: the code has no literal
fallbacks. `models.default` lists every key (its layout is the schema); a model section and an
overrides file (`--thresholds`, same layout) may only set keys the default section has, so a
typo is an error when the file loads, not a silently ignored rule.

Choice of section (`choose_section`): the model key itself; else a section whose `match_vendor`
is the GPUs' PCI vendor; else `default`, the strictest values, so an unknown card is never
judged leniently (ROCm/cvs: "an unknown collective gets the tightest threshold"). A node with
mixed models uses `default`. The section is merged over `default`; the overrides over both.
Values are read flat: "pcie.expect_width".

null means "no limit". Where it comes from matters (`reported_only`): null set in the model's
own section (or an override) is a decision that the figure is not judged for this model, and
the figure is reported only (SKIP); null inherited from `default` means nobody knows a limit for
this model, and the figure is INCONCLUSIVE.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent.datafiles import DataFileError, load_data, load_json

DEFAULT = "default"
SHIPPED = "thresholds.yaml"
# Keys of a model section that configure matching, not thresholds.
_META_KEYS = {"match_vendor"}


@dataclass(frozen=True)
class Thresholds:
    """The resolved values for one node: `section` names the model section chosen; `origins`
    says for every key which file and section set its value."""

    section: str
    values: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    origins: dict[str, str] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        """The value of `key` (None = no limit); an unknown key is a bug: KeyError."""
        if key not in self.values:
            raise KeyError(f"threshold {key!r} is not in thresholds.yaml (models.default lists every key)")
        return self.values[key]

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def origin(self, key: str) -> str:
        """Where the value of `key` came from: 'thresholds.yaml [NVIDIA H200]', 'my.yaml [default]'."""
        return self.origins.get(key, f"{SHIPPED} [{DEFAULT}]")

    def reported_only(self, key: str) -> bool:
        """True when `key` is null because the model's section (or an override) says so."""
        return self.values.get(key) is None and not self.origin(key).endswith(f"[{DEFAULT}]")


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


def section_values(section: Mapping[str, Any]) -> dict[str, Any]:
    return flatten({k: v for k, v in section.items() if k not in _META_KEYS})


def check_keys(models: Mapping[str, Mapping[str, Any]], known: Iterable[str], where: str) -> None:
    """Every key of every section must be one `models.default` has (typos are errors)."""
    known_set = set(known)
    for name, section in models.items():
        unknown = sorted(set(section_values(section)) - known_set)
        if unknown:
            raise DataFileError(
                f"{where}: models.{name} sets unknown threshold(s) {', '.join(unknown)} "
                f"(the keys are those of models.default in {SHIPPED})"
            )


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def check_shapes(models: Any, shipped: Mapping[str, Mapping[str, Any]], where: str) -> None:
    """An overrides file has the shipped file's shape: `models` maps section names to mappings,
    a family (pcie, hostbw) is a mapping, and every value is null or of the kind the shipped
    file gives that key (a number where it has a number): 'fast' as a floor would otherwise
    reach a comparison on the node and stop the check there."""
    if not isinstance(models, Mapping):
        raise DataFileError(f"{where}: models must map section names (default, a GPU model) to thresholds")
    kinds: dict[str, str] = {}
    for section in shipped.values():
        for key, value in section_values(section).items():
            if value is not None:
                kinds.setdefault(key, _kind(value))
    families = {key.split(".", 1)[0] for key in kinds}
    for name, section in models.items():
        if section is None:
            continue
        if not isinstance(section, Mapping):
            raise DataFileError(
                f"{where}: models.{name} must be a mapping of threshold families, got {section!r}"
            )
        for family, content in section.items():
            if family in families and not isinstance(content, Mapping):
                raise DataFileError(
                    f"{where}: models.{name}.{family} is a family of thresholds, not a value: "
                    f"give a mapping such as {family}: {{KEY: VALUE}}"
                )
        for key, value in section_values(section).items():
            kind = kinds.get(key)
            if value is None or kind is None:
                continue  # null: no limit; an unknown key is check_keys' to refuse
            if _kind(value) != kind or (kind == "a number" and not math.isfinite(value)):
                raise DataFileError(f"{where}: models.{name}.{key} must be {kind} (or null), got {value!r}")


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
    required: Iterable[str] = (),
) -> Thresholds:
    """The thresholds for a node whose GPUs have these model keys and vendors.

    `overrides` is a JSON file of the same layout (the controller converts a user's YAML and
    records its name as "source"); `required` are the keys the planned checks read: one that
    the files do not define is an error here, before anything runs.
    """
    document = load_data("thresholds") if document is None else document
    models = _models(document, SHIPPED)
    defaults = section_values(models.get(DEFAULT, {}))
    check_keys(models, defaults, SHIPPED)
    section, reason = choose_section(models, list(model_keys), list(vendors))
    merged = dict(defaults)
    origins = {key: f"{SHIPPED} [{DEFAULT}]" for key in merged}
    layers: list[tuple[str, dict[str, Any]]] = []
    if section != DEFAULT:
        layers.append((f"{SHIPPED} [{section}]", section_values(models[section])))
    if overrides is not None:
        extra_document = load_json(overrides)
        source = str(extra_document.get("source") or overrides) if isinstance(extra_document, Mapping) else ""
        extra = _models(extra_document, source or str(overrides))
        check_keys(extra, defaults, source)
        layers.append((f"{source} [{DEFAULT}]", section_values(extra.get(DEFAULT, {}))))
        if section != DEFAULT and section in extra:
            layers.append((f"{source} [{section}]", section_values(extra[section])))
        reason += f"; overrides from {source}"
    for where, values in layers:
        merged.update(values)
        origins.update(dict.fromkeys(values, where))
    missing = sorted(set(required) - set(merged))
    if missing:
        raise DataFileError(
            f"{SHIPPED}: models.default lacks {', '.join(missing)}, which the checks read "
            "(every threshold lives in thresholds.yaml; add the key with its source)"
        )
    return Thresholds(section=section, values=merged, reason=reason, origins=origins)
