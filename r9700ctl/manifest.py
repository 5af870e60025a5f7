"""Load data/manifest.yaml, the one source of truth for GPUs and ROCm releases."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from r9700ctl.paths import data_file


@dataclass(frozen=True)
class GpuModel:
    pci_id: str
    name: str
    gfx: str
    discrete: bool
    raw: dict[str, Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class RocmRelease:
    version: str
    gfx: tuple[str, ...]
    os: dict[str, str]
    raw: dict[str, Any] = field(compare=False, repr=False)

    def supports_gfx(self, target: str) -> bool:
        return target in self.gfx

    def suite_for(self, os_key: str) -> str | None:
        return self.os.get(os_key)


@dataclass(frozen=True)
class Manifest:
    raw: dict[str, Any]

    @property
    def gpus(self) -> dict[str, GpuModel]:
        return {
            pci: GpuModel(pci_id=pci, name=v["name"], gfx=v["gfx"], discrete=bool(v.get("discrete", True)), raw=v)
            for pci, v in self.raw.get("gpus", {}).items()
        }

    @property
    def releases(self) -> dict[str, RocmRelease]:
        return {
            ver: RocmRelease(version=ver, gfx=tuple(v.get("gfx", ())), os=dict(v.get("os", {})), raw=v)
            for ver, v in self.raw.get("rocm_releases", {}).items()
        }

    def release_names(self) -> list[str]:
        return sorted(self.releases, key=version_key)

    def gpu(self, pci_id: str) -> GpuModel | None:
        return self.gpus.get(pci_id.lower())

    def releases_supporting(self, gfx_targets: set[str], os_key: str | None = None) -> list[str]:
        """Releases (oldest first) that support every target, and the OS when given."""
        names = []
        for name in self.release_names():
            rel = self.releases[name]
            if all(rel.supports_gfx(t) for t in gfx_targets) and (os_key is None or rel.suite_for(os_key)):
                names.append(name)
        return names

    def hsa_version(self, gfx: str) -> str | None:
        return self.raw.get("gfx_targets", {}).get(gfx, {}).get("hsa_version")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


@functools.lru_cache(maxsize=4)
def load(path: Path | None = None) -> Manifest:
    with open(path or data_file("manifest.yaml"), encoding="utf-8") as fh:
        return Manifest(raw=yaml.safe_load(fh))
