"""An apt repository on disk: pool, Packages indices and a GPG-signed Release per suite.

Laid out like repo.radeon.com's: <repo>/pool/main/<initial>/<name>/<file>.deb and
<repo>/dists/<suite>/{InRelease,Release,Release.gpg,main/binary-amd64/Packages[.gz]}.
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from r9700ctl.errors import CannotRun
from r9700ctl.lab import debs, locks
from r9700ctl.lab.hostcheck import tool

COMPONENT = "main"
ARCHITECTURE = "amd64"
SIGNER_VERSION = "v1"  # raise to make every host's lab key anew
SIGNER_USER_ID = "r9700ctl lab TEST KEY (not AMD's) <lab@r9700ctl.invalid>"


@dataclass(frozen=True)
class PoolFile:
    package: debs.DebPackage
    path: str  # relative to the repository root
    data: bytes


def pool_path(package: debs.DebPackage) -> str:
    initial = package.name[:4] if package.name.startswith("lib") else package.name[0]
    return f"pool/{COMPONENT}/{initial}/{package.name}/{package.filename}"


def build_pool(packages: Iterable[debs.DebPackage]) -> list[PoolFile]:
    return [PoolFile(package=p, path=pool_path(p), data=debs.build(p)) for p in packages]


def packages_index(files: Iterable[PoolFile]) -> str:
    """The Packages file: each control stanza plus where the file is and its checksums."""
    stanzas = []
    for item in sorted(files, key=lambda f: (f.package.name, f.package.version)):
        control = item.package.control()
        head, _, description = control.partition("Description:")
        stanzas.append(
            head
            + f"Filename: {item.path}\n"
            + f"Size: {len(item.data)}\n"
            + f"MD5sum: {hashlib.md5(item.data).hexdigest()}\n"
            + f"SHA1: {hashlib.sha1(item.data).hexdigest()}\n"
            + f"SHA256: {hashlib.sha256(item.data).hexdigest()}\n"
            + "Description:"
            + description
        )
    return "\n".join(stanzas)


def release_file(*, origin: str, label: str, suite: str, description: str, indices: dict[str, bytes]) -> str:
    """dists/<suite>/Release: what apt checks each index against (signed as InRelease/Release.gpg)."""
    lines = [
        f"Origin: {origin}",
        f"Label: {label}",
        f"Suite: {suite}",
        f"Codename: {suite}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        f"Architectures: {ARCHITECTURE}",
        f"Components: {COMPONENT}",
        f"Description: {description}",
    ]
    for field, algorithm in (("MD5Sum", hashlib.md5), ("SHA1", hashlib.sha1), ("SHA256", hashlib.sha256)):
        lines.append(f"{field}:")
        for name, data in sorted(indices.items()):
            lines.append(f" {algorithm(data).hexdigest()} {len(data):>8} {name}")
    return "\n".join(lines) + "\n"


class Signer:
    """A throwaway signing key in a private GNUPGHOME (never the user's ~/.gnupg)."""

    def __init__(self, homedir: Path) -> None:
        self.homedir = homedir
        self.fingerprint = ""

    def _gpg(self, *args: str, stdin_data: bytes | None = None) -> bytes:
        argv = [tool("gpg"), "--homedir", str(self.homedir), "--batch", "--quiet", *args]
        proc = subprocess.run(argv, input=stdin_data, capture_output=True, timeout=60, check=False)
        if proc.returncode != 0:
            message = proc.stderr.decode(errors="replace").strip().splitlines()
            raise CannotRun(what=f"gpg {args[0]} failed: {message[-1] if message else proc.returncode}")
        return proc.stdout

    def create(self, user_id: str) -> str:
        self.homedir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.homedir, 0o700)
        self._gpg(
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
            "--quick-gen-key",
            user_id,
            "ed25519",
            "sign",
            "never",
        )
        for line in self._gpg("--with-colons", "--list-secret-keys").decode().splitlines():
            if line.startswith("fpr:"):
                self.fingerprint = line.split(":")[9]
                break
        return self.fingerprint

    @classmethod
    def from_cache(cls, cache: Path, homedir: Path) -> Signer:
        """The host's one lab key (made once in `cache`), copied into `homedir` for this lab to sign with.

        Each lab signs from its own copy, so its gpg-agent is its own and dies with the lab.
        """
        cached = cache / f"signer-{SIGNER_VERSION}"

        def make(work: Path) -> None:
            maker = cls(work / "gnupg")
            maker.create(SIGNER_USER_ID)
            maker.close()
            for leftover in (work / "gnupg").glob("S.*"):  # the agent's sockets, not key material
                leftover.unlink()

        locks.build_once(cached, cached.with_suffix(".lock"), make)
        shutil.copytree(cached / "gnupg", homedir, ignore=shutil.ignore_patterns("S.*"))
        os.chmod(homedir, 0o700)
        signer = cls(homedir)
        for line in signer._gpg("--with-colons", "--list-secret-keys").decode().splitlines():
            if line.startswith("fpr:"):
                signer.fingerprint = line.split(":")[9]
                break
        if not signer.fingerprint:
            raise CannotRun(
                what=f"the cached lab key in {cached} holds no secret key", hint=f"remove {cached}"
            )
        return signer

    def public_key(self, armor: bool = True) -> bytes:
        return self._gpg(*(["--armor"] if armor else []), "--export", self.fingerprint)

    def clearsign(self, data: bytes) -> bytes:
        return self._gpg(*self._signing(), "--clearsign", stdin_data=data)

    def detach_sign(self, data: bytes) -> bytes:
        return self._gpg(*self._signing(), "--armor", "--detach-sign", stdin_data=data)

    def _signing(self) -> list[str]:
        return [
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
            "--local-user",
            self.fingerprint,
            "--digest-algo",
            "SHA512",
        ]

    def close(self) -> None:
        """Stop the gpg-agent that signing started (it would outlive the lab otherwise)."""
        stop_agent(self.homedir)


def stop_agent(homedir: Path) -> None:
    gpgconf = tool("gpgconf")
    if homedir.is_dir():
        subprocess.run(
            [gpgconf, "--homedir", str(homedir), "--kill", "all"], capture_output=True, check=False
        )


def write_repository(
    root: Path,
    suites: dict[str, list[PoolFile]],
    *,
    signer: Signer,
    origin: str,
    label: str,
    description: str,
) -> None:
    """Write the pool (shared by all suites) and one signed dists/<suite> per suite."""
    for files in suites.values():
        for item in files:
            target = root / item.path
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(item.data)
    for suite, files in suites.items():
        write_suite(
            root / "dists" / suite,
            packages_index(files).encode(),
            signer=signer,
            origin=origin,
            label=label,
            suite=suite,
            description=description,
        )


def write_suite(
    dists: Path, index: bytes, *, signer: Signer, origin: str, label: str, suite: str, description: str
) -> None:
    """dists/<suite>: the Packages index (plain and gzip) and the Release that names them, signed."""
    indices = {
        f"{COMPONENT}/binary-{ARCHITECTURE}/Packages": index,
        f"{COMPONENT}/binary-{ARCHITECTURE}/Packages.gz": gzip.compress(index, mtime=0),
    }
    for name, data in indices.items():
        (dists / name).parent.mkdir(parents=True, exist_ok=True)
        (dists / name).write_bytes(data)
    release = release_file(origin=origin, label=label, suite=suite, description=description, indices=indices)
    (dists / "Release").write_text(release)
    (dists / "InRelease").write_bytes(signer.clearsign(release.encode()))
    (dists / "Release.gpg").write_bytes(signer.detach_sign(release.encode()))
