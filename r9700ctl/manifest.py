"""Load data/manifest.yaml, the one source of truth for GPUs, ROCm releases and systems."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl import fastyaml
from r9700ctl.agent.known_issue_match import version_tuple
from r9700ctl.paths import data_file

AMD_PCI_VENDOR = "1002"
# Figures that differ between products sharing one PCI device id (told apart by PCI revision,
# data/manifest.yaml `skus`): for such a model they come only from the matching revision.
PER_SKU = ("name", "vram_gib", "memory_bandwidth_gbs", "board_power_w")


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

    @property
    def amdgpu(self) -> str:
        """Driver repository directory (repo.radeon.com/amdgpu/<this>/ubuntu)."""
        return str(self.raw.get("amdgpu", self.version))

    @property
    def rocm_path(self) -> str:
        """ROCm repository directory (repo.radeon.com/rocm/apt/<this>)."""
        return str(self.raw.get("rocm_path", self.version))

    @property
    def graphics(self) -> str | None:
        """Graphics repository directory (repo.radeon.com/graphics/<this>/ubuntu), None before 7.0."""
        value = self.raw.get("graphics")
        return str(value) if value else None

    @property
    def pytorch_image(self) -> str:
        """The rocm/pytorch tag AMD pairs with this release (r9700_containers pins it)."""
        return str(self.raw.get("pytorch_image", ""))

    @property
    def pytorch_image_digest(self) -> str:
        """sha256:... of that tag where the manifest pins one ("" = by tag)."""
        return str(self.raw.get("pytorch_image_digest", ""))

    def listed_systems(self, target: str) -> list[str] | None:
        """The systems AMD lists `target` for in this release, or None when every `os` entry is."""
        limits = self.raw.get("gfx_os") or {}
        return list(limits[target]) if target in limits else None

    def lists_target_on(self, target: str, os_key: str) -> bool:
        """True when AMD's support matrix lists `target` on `os_key` for this release."""
        systems = self.listed_systems(target)
        return os_key in self.os and (systems is None or os_key in systems)

    def kernel_lines(self, os_key: str) -> dict[str, str]:
        """The kernel lines AMD lists with this release on `os_key`, by kind: {"GA": "6.8", "HWE": "6.14"}."""
        return {str(k): str(v) for k, v in ((self.raw.get("kernels") or {}).get(os_key) or {}).items()}

    def dkms_build_fails(self, line: str) -> str | None:
        """The public report that this release's amdgpu-dkms does not build on kernel `line`, if any."""
        report = (self.raw.get("dkms_build_fails") or {}).get(line)
        return " ".join(str(report).split()) if report else None


@dataclass(frozen=True)
class Repository:
    base_url: str
    key_url: str
    key_fingerprint: str
    pin_priority: int
    rocm_path_template: str
    amdgpu_path_template: str
    graphics_path_template: str

    def rocm_url(self, release: RocmRelease, base_url: str | None = None) -> str:
        base = (base_url or self.base_url).rstrip("/")
        return f"{base}/{self.rocm_path_template.format(rocm_path=release.rocm_path)}"

    def amdgpu_url(self, release: RocmRelease, base_url: str | None = None) -> str:
        base = (base_url or self.base_url).rstrip("/")
        return f"{base}/{self.amdgpu_path_template.format(amdgpu_path=release.amdgpu)}"

    def graphics_path(self, release: RocmRelease) -> str:
        """graphics/<version>/ubuntu below the base URL, or "" for a release without one."""
        if release.graphics is None:
            return ""
        return self.graphics_path_template.format(graphics_path=release.graphics)


@dataclass(frozen=True)
class Packages:
    default: tuple[str, ...]
    runtime: tuple[str, ...]
    meta: tuple[str, ...]
    core: str
    driver: str


@dataclass(frozen=True)
class Manifest:
    raw: dict[str, Any]

    @property
    def gpus(self) -> dict[str, GpuModel]:
        return {
            pci: GpuModel(
                pci_id=pci, name=v["name"], gfx=v["gfx"], discrete=bool(v.get("discrete", True)), raw=v
            )
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

    def release(self, version: str) -> RocmRelease | None:
        return self.releases.get(version)

    def gpu(self, pci_id: str) -> GpuModel | None:
        return self.gpus.get(pci_id.lower())

    @property
    def devices(self) -> dict[str, GpuModel]:
        """Every AMD GPU the manifest can recognise: the models of `gpus`, then `device_targets`
        (iGPUs and other Radeons whose true gfx target the doctor must know, with no figures)."""
        others = {
            pci: GpuModel(
                pci_id=pci, name=v["name"], gfx=v["gfx"], discrete=bool(v.get("discrete", True)), raw=v
            )
            for pci, v in (self.raw.get("device_targets") or {}).items()
        }
        return {**others, **self.gpus}

    def device(self, pci_id: str) -> GpuModel | None:
        """The model or recognised device of a PCI id; None for an id the manifest does not know."""
        return self.devices.get(pci_id.lower())

    def devices_named(self, lspci_name: str) -> list[GpuModel]:
        """The devices whose pci.ids name lspci printed (lspci without -nn: "Navi 48 [Radeon AI PRO
        R9700]"). pci.ids grows: an older one prints fewer products in the brackets ("Navi 48 [Radeon
        RX 9070/9070 XT]"), so one product in common with the same chip is a match; a bare chip name
        ("Navi 48") gives every device of that chip. Empty when no name matches."""
        chip, products = _pci_ids_products(lspci_name)
        exact, common, same_chip = [], [], []
        for model in self.devices.values():
            for known in model.raw.get("lspci_names") or ():
                known_chip, known_products = _pci_ids_products(str(known))
                if (known_chip, known_products) == (chip, products):
                    exact.append(model)
                elif known_chip == chip and products & known_products:
                    common.append(model)
                elif known_chip == chip and not products:
                    same_chip.append(model)
        found = exact or common or same_chip
        return list({m.pci_id: m for m in found}.values())

    def gpu_spec(self, pci_id: str, revision: str | None = None) -> dict[str, Any] | None:
        """A model's figures for one card: the product its PCI revision names where the id is shared.

        For a model with `skus`, PER_SKU figures come only from the revision's entry: an unknown or
        missing revision leaves them unknown (None) instead of borrowing a neighbour's; the name
        then is the model's list of products. None for an id the manifest lacks.
        """
        model = self.gpu(pci_id)
        if model is None:
            return None
        spec = {k: v for k, v in model.raw.items() if k != "skus"}
        skus = model.raw.get("skus") or {}
        if not skus:
            return spec
        sku = skus.get(normalise_revision(revision)) or {}
        for key in PER_SKU:
            spec[key] = sku.get(key)
        spec["name"] = sku.get("name") or model.name
        spec["sku_known"] = bool(sku)
        return spec

    def releases_supporting(self, gfx_targets: set[str], os_key: str | None = None) -> list[str]:
        """Releases (oldest first) that support every target, and the OS when given."""
        names = []
        for name in self.release_names():
            rel = self.releases[name]
            if all(rel.supports_gfx(t) for t in gfx_targets) and (os_key is None or rel.suite_for(os_key)):
                names.append(name)
        return names

    def newest_supporting(self, gfx_targets: set[str], os_key: str) -> str | None:
        """The newest release that supports every target on the OS, or None."""
        names = self.releases_supporting(gfx_targets, os_key)
        return names[-1] if names else None

    def hsa_version(self, gfx: str) -> str | None:
        return self.raw.get("gfx_targets", {}).get(gfx, {}).get("hsa_version")

    def gfx_family(self, gfx: str) -> str | None:
        return self.raw.get("gfx_targets", {}).get(gfx, {}).get("family")

    def first_release(self, gfx: str) -> str | None:
        """The first ROCm release that supports `gfx`, where the manifest records one (gfx1201: 6.4.1)."""
        value = self.raw.get("gfx_targets", {}).get(gfx, {}).get("first_rocm")
        return str(value) if value else None

    def gfx_for_hsa_version(self, hsa_version: str) -> str | None:
        """The target an HSA_OVERRIDE_GFX_VERSION value names (9.4.2 -> gfx942), or None."""
        for gfx, entry in self.raw.get("gfx_targets", {}).items():
            if entry.get("hsa_version") == hsa_version:
                return gfx
        return None

    @property
    def repository(self) -> Repository:
        repo = self.raw.get("repository", {})
        return Repository(
            base_url=repo["base_url"],
            key_url=repo["key_url"],
            key_fingerprint=repo["key_fingerprint"],
            pin_priority=int(repo.get("pin_priority", 600)),
            rocm_path_template=repo.get("rocm_path_template", "rocm/apt/{rocm_path}"),
            amdgpu_path_template=repo.get("amdgpu_path_template", "amdgpu/{amdgpu_path}/ubuntu"),
            graphics_path_template=repo.get("graphics_path_template", "graphics/{graphics_path}/ubuntu"),
        )

    @property
    def packages(self) -> Packages:
        pkgs = self.raw.get("packages", {})
        return Packages(
            default=tuple(pkgs.get("default", ["rocm"])),
            runtime=tuple(pkgs.get("runtime", ())),
            meta=tuple(pkgs.get("meta", ())),
            core=pkgs.get("core", "rocm-core"),
            driver=pkgs.get("driver", "amdgpu-dkms"),
        )

    def os_keys(self) -> list[str]:
        return list(self.raw.get("os_releases", {}))

    def os_release(self, os_key: str) -> dict[str, Any] | None:
        return self.raw.get("os_releases", {}).get(os_key)


def _pci_ids_products(name: str) -> tuple[str, frozenset[str]]:
    """("navi 48", {"radeon rx 9070", "radeon rx 9070 xt", "radeon rx 9070 gre"}) from pci.ids'
    "Navi 48 [Radeon RX 9070/9070 XT/9070 GRE]": the products after the first repeat its leading
    words, as pci.ids abbreviates them."""
    chip, _, rest = " ".join(name.split()).partition(" [")
    parts = [p.strip() for p in rest.rstrip("]").split("/") if p.strip()] if rest else []
    if not parts:
        return chip.lower(), frozenset()
    words = parts[0].split()
    lead: list[str] = []
    if len(parts) > 1 and parts[1].split()[0] in words:
        lead = words[: words.index(parts[1].split()[0])]
    products = {parts[0]}
    for part in parts[1:]:
        products.add(part if not lead or part.startswith(" ".join(lead)) else " ".join([*lead, part]))
    return chip.lower(), frozenset(p.lower() for p in products)


def normalise_revision(revision: str | None) -> str:
    """ "0xc0" from "c0", "C0", "0xC0" (sysfs prints 0xc0, lspci "(rev c0)")."""
    text = str(revision or "").strip().lower().removeprefix("0x")
    return f"0x{text}" if text else ""


def kernel_line(release: str) -> str:
    """The line of a kernel release, as AMD's tables name it: 6.8.0-49-generic -> 6.8 ("" if none)."""
    parts = release.split(".")
    if len(parts) < 2 or not parts[0].isdigit():
        return ""
    minor = "".join(itertools.takewhile(str.isdigit, parts[1]))
    return f"{parts[0]}.{minor}" if minor else ""


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of a release ("7.2" and "7.2.0" compare equal; "7.1.1.70101-..." reads as 7.1.1)."""
    return version_tuple(version) or (0, 0, 0)


def os_key(distribution_id: str, version_id: str) -> str:
    """Manifest key for an OS: ("Ubuntu", "24.04") -> "ubuntu-24.04", ("debian", "12") -> "debian-12"."""
    return f"{distribution_id.strip().lower()}-{version_id.strip()}"


@functools.lru_cache(maxsize=4)
def load(path: Path | None = None) -> Manifest:
    with open(path or data_file("manifest.yaml"), encoding="utf-8") as fh:
        return Manifest(raw=fastyaml.safe_load(fh))
