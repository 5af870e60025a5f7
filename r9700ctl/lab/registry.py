"""The lab's container registry (stand-in for Docker Hub): Debian's docker-registry on the bridge.

It serves ONE small stand-in image under every `rocm/pytorch:<tag>` the manifest pins, so a
node pulls "the pinned image" through r9700_container_registry_mirror as a real node pulls it
from Docker Hub. The image is NOT AMD's: one layer, the lab's own Debian root file system (which
has python3, so the agent's config level runs inside it), labelled as a lab stand-in. It has no
torch and no ROCm.

The image is built once per host (keyed by the root file system and this module's code) into a
registry storage directory under the lab cache, by pushing it through the Registry HTTP API v2
to a docker-registry bound to 127.0.0.1; each lab then serves that storage read-only.
"""

from __future__ import annotations

import gzip
import hashlib
import inspect
import json
import shutil
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from r9700ctl.errors import CannotRun
from r9700ctl.lab import locks, processes
from r9700ctl.lab.hostcheck import tool
from r9700ctl.manifest import Manifest

PORT = 5000
STAND_IN_LABEL = "io.r9700ctl.lab.stand-in"
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_V1 = "application/vnd.docker.container.image.v1+json"
LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"


@dataclass(frozen=True)
class ImageRef:
    repository: str  # rocm/pytorch
    tag: str

    @classmethod
    def parse(cls, image: str) -> ImageRef:
        name, _, tag = image.partition("@")[0].rpartition(":")
        return cls(name, tag)


def pinned_images(manifest: Manifest) -> list[ImageRef]:
    """Every rocm/pytorch:<tag> the manifest pairs with a release (what nodes will pull)."""
    refs = {ImageRef.parse(r.pytorch_image) for r in manifest.releases.values() if r.pytorch_image}
    return sorted(refs, key=lambda r: (r.repository, r.tag))


def config_yaml(storage: Path, address: str, port: int, *, readonly: bool) -> str:
    """docker-registry's configuration (distribution 2.8): filesystem storage, one listener."""
    return (
        "# r9700ctl lab: the stand-in container registry\n"
        "version: 0.1\n"
        "log:\n  level: warn\n"
        "storage:\n"
        f"  filesystem:\n    rootdirectory: {storage}\n"
        "  maintenance:\n"
        "    uploadpurging:\n      enabled: false\n"
        f"    readonly:\n      enabled: {'true' if readonly else 'false'}\n"
        "http:\n"
        f"  addr: {address}:{port}\n"
    )


def cache_key(base: Path, refs: list[ImageRef]) -> str:
    digest = hashlib.sha256(base.name.encode())
    digest.update(",".join(f"{r.repository}:{r.tag}" for r in refs).encode())
    digest.update(inspect.getsource(_build).encode())
    return digest.hexdigest()[:12]


def ensure_storage(cache: Path, base: Path, refs: list[ImageRef], log: Path) -> Path:
    """The registry storage holding the stand-in image under every tag; built once per host."""
    target = cache / f"registry-{cache_key(base, refs)}"
    locks.build_once(target, target.with_suffix(".lock"), lambda work: _build(work, base, refs, log))
    return target / "storage"


def _build(work: Path, base: Path, refs: list[ImageRef], log: Path) -> None:
    layer, diff_id = _layer(base, work / "layer.tar.gz")
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "Cmd": ["python3"],
                "Labels": {
                    STAND_IN_LABEL: "Debian bookworm with python3; no torch, no ROCm; not AMD's image"
                },
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": "r9700ctl lab: the lab's Debian root file system (stand-in)"}],
        },
        sort_keys=True,
    ).encode()
    port = processes.free_port("127.0.0.1", PORT + 100)
    conf = work / "build.yml"
    conf.write_text(config_yaml(work / "storage", "127.0.0.1", port, readonly=False))
    pid = processes.spawn([tool("docker-registry"), "serve", str(conf)], work / "build.log")
    try:
        if not processes.wait_for_port("127.0.0.1", port, timeout=20, pid=pid):
            raise CannotRun(what=f"docker-registry did not start: {processes.tail(work / 'build.log')}")
        url = f"http://127.0.0.1:{port}"
        for ref in {r.repository for r in refs}:
            _push_blob(url, ref, layer.read_bytes())
            _push_blob(url, ref, config)
        body = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_V2,
                "config": {"mediaType": CONFIG_V1, "size": len(config), "digest": _digest(config)},
                "layers": [
                    {"mediaType": LAYER_GZIP, "size": layer.stat().st_size, "digest": _file_digest(layer)}
                ],
            }
        ).encode()
        for ref in refs:
            _request(f"{url}/v2/{ref.repository}/manifests/{ref.tag}", "PUT", body, MANIFEST_V2)
    finally:
        processes.stop(pid)
        layer.unlink(missing_ok=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(work / "build.log", log)


def _layer(base: Path, out: Path) -> tuple[Path, str]:
    """base as one gzip'd tar layer; returns (file, diff_id = sha256 of the uncompressed tar)."""
    diff = hashlib.sha256()
    tar = subprocess.Popen(
        [tool("tar"), "--numeric-owner", "-C", str(base), "-cf", "-", "."], stdout=subprocess.PIPE
    )
    assert tar.stdout is not None
    with gzip.GzipFile(out, "wb", compresslevel=1, mtime=0) as packed:
        while chunk := tar.stdout.read(1 << 20):
            diff.update(chunk)
            packed.write(chunk)
    if tar.wait() != 0:
        raise CannotRun(what=f"tar of {base} failed (exit {tar.returncode})")
    return out, f"sha256:{diff.hexdigest()}"


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def _push_blob(url: str, repository: str, data: bytes) -> None:
    """Monolithic upload (Registry API v2): POST an upload, PUT the bytes with their digest."""
    started = _request(f"{url}/v2/{repository}/blobs/uploads/", "POST", b"", "application/octet-stream")
    location = started.headers["Location"]
    if location.startswith("/"):
        location = url + location
    separator = "&" if "?" in location else "?"
    _request(f"{location}{separator}digest={_digest(data)}", "PUT", data, "application/octet-stream")


def _request(url: str, method: str, body: bytes, content_type: str) -> urllib.request.addinfourl:
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
            return response
    except OSError as exc:
        raise CannotRun(what=f"pushing the stand-in image failed: {method} {url}: {exc}") from exc


def serve(storage: Path, directory: Path, address: str, port: int, log: Path) -> int:
    """docker-registry serving the cached storage read-only on address:port; returns its PID."""
    conf = directory / "registry" / "config.yml"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(config_yaml(storage, address, port, readonly=True))
    return processes.spawn([tool("docker-registry"), "serve", str(conf)], log)
