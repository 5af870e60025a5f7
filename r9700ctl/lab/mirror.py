"""The lab's package mirror: stand-ins for repo.radeon.com, served over HTTP on the bridge address.

Layout (every release in data/manifest.yaml, suites noble, jammy and bookworm, one signing key):
  rocm/rocm.gpg.key                                   armored public key, like AMD's
  rocm/apt/<version>/dists/<suite>/...                ROCm stand-ins
  amdgpu/<driver>/ubuntu/dists/<suite>/...            amdgpu-dkms, amdgpu-dkms-firmware, amdgpu-install
  graphics/<version>/ubuntu/dists/<suite>/...         7.x only: mesa-amdgpu-va-drivers, which the
                                                      stand-in rocdecode (and so `rocm`) depends on
  amdgpu-install/<version>/ubuntu/<suite>/amdgpu-install_<v>_all.deb
  lab-kernel/dists/bookworm/...                       lab plumbing: headers for the host's kernel, and a
                                                      stand-in kernel line "lab" for kernel-upgrade tests
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from r9700ctl.lab import aptrepo, processes, standins
from r9700ctl.lab.recordings import Recordings
from r9700ctl.manifest import Manifest, RocmRelease

KEY_PATH = "rocm/rocm.gpg.key"
KERNEL_REPO = "lab-kernel"
KERNEL_SUITE = "bookworm"
LABEL = "r9700ctl lab"
README = """\
r9700ctl lab package mirror: STAND-INS for AMD's repositories, for testing only.
Nothing here is AMD software; every package's Description says "lab stand-in".
"""


@dataclass(frozen=True)
class MirrorSummary:
    releases: list[str]
    packages: int
    repositories: int
    names: frozenset[str] = frozenset()  # every package name the stand-ins publish


def suites_for(release: RocmRelease) -> list[str]:
    """The lab's three suites plus any other the manifest names for this release."""
    return list(dict.fromkeys([*standins.LAB_SUITES, *release.os.values()]))


def flavour_of(suite: str) -> str:
    return standins.SUITE_FLAVOUR.get(suite, "24.04")


def build(
    root: Path,
    *,
    manifest: Manifest,
    recordings: Recordings,
    kernel_release: str,
    signer: aptrepo.Signer,
    origin: str,
    progress: Callable[[str], None] = lambda _: None,
) -> MirrorSummary:
    """Write the whole mirror under `root` (the signer already holds its key)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.txt").write_text(README)
    (root / KEY_PATH).parent.mkdir(parents=True, exist_ok=True)
    (root / KEY_PATH).write_bytes(signer.public_key(armor=True))
    packages = repositories = 0
    names: set[str] = set()

    def publish(repo: Path, suites: dict[str, list[aptrepo.PoolFile]], what: str) -> None:
        nonlocal packages, repositories
        aptrepo.write_repository(
            repo,
            suites,
            signer=signer,
            origin=origin,
            label=LABEL,
            description=f"{what} (r9700ctl lab stand-ins)",
        )
        packages += len({f.path for files in suites.values() for f in files})
        names.update(f.package.name for files in suites.values() for f in files)
        repositories += 1

    extra = tuple(standins.package_names(manifest.raw.get("packages", ())))
    for name in manifest.release_names():
        release = manifest.releases[name]
        suites = suites_for(release)
        rocm_dir, amdgpu_dir = repository_paths(manifest, release)
        rocm = {
            f: aptrepo.build_pool(standins.rocm_packages(release, f, recordings, extra))
            for f in _flavours(suites)
        }
        publish(root / rocm_dir, {s: rocm[flavour_of(s)] for s in suites}, f"ROCm {name}")
        driver = standins.driver_directory(release)
        amdgpu = {f: aptrepo.build_pool(standins.amdgpu_packages(release, f)) for f in _flavours(suites)}
        publish(root / amdgpu_dir, {s: amdgpu[flavour_of(s)] for s in suites}, f"amdgpu {driver}")
        graphics_dir = manifest.repository.graphics_path(release)
        if graphics_dir:
            graphics = {
                f: aptrepo.build_pool(standins.graphics_packages(release, f)) for f in _flavours(suites)
            }
            publish(root / graphics_dir, {s: graphics[flavour_of(s)] for s in suites}, f"graphics {name}")
        installer = aptrepo.build_pool([standins.amdgpu_install_package(release)])[0]
        for suite in suites:
            target = (
                root / "amdgpu-install" / name / "ubuntu" / suite / standins.amdgpu_install_filename(release)
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(installer.data)
        progress(f"mirror: ROCm {name} and amdgpu {driver} stand-ins for {', '.join(suites)}")

    kernel = aptrepo.build_pool(standins.kernel_packages(kernel_release) + standins.next_kernel_packages())
    publish(root / KERNEL_REPO, {KERNEL_SUITE: kernel}, f"headers for the lab host's kernel {kernel_release}")
    return MirrorSummary(
        releases=manifest.release_names(),
        packages=packages,
        repositories=repositories,
        names=frozenset(names),
    )


def repository_paths(manifest: Manifest, release: RocmRelease) -> tuple[str, str]:
    """(rocm repository, driver repository) below the base URL, from the manifest's templates."""
    repository = manifest.raw.get("repository", {})
    rocm = repository.get("rocm_path_template", "rocm/apt/{rocm_path}")
    amdgpu = repository.get("amdgpu_path_template", "amdgpu/{amdgpu_path}/ubuntu")
    return (
        rocm.format(rocm_path=release.raw.get("rocm_path") or release.version),
        amdgpu.format(amdgpu_path=standins.driver_directory(release)),
    )


def _flavours(suites: list[str]) -> list[str]:
    return list(dict.fromkeys(flavour_of(s) for s in suites))


def serve(root: Path, address: str, port: int, log: Path, redirects: dict[str, str] | None = None) -> int:
    """Start the mirror's HTTP server (Python's static one, plus `redirects`: path prefix -> URL) on
    the bridge address only; returns its PID."""
    server = Path(__file__).with_name("mirror_http.py")
    pairs = [f"{prefix}={url}" for prefix, url in (redirects or {}).items()]
    return processes.spawn([sys.executable, str(server), str(port), address, str(root), *pairs], log)
