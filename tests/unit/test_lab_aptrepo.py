"""The lab's signed apt repositories, verified by gpgv and read by a real apt-get."""

import shutil
import subprocess
from pathlib import Path

import pytest

from r9700ctl.lab import aptrepo
from r9700ctl.lab.debs import DebFile, DebPackage

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("gpg", "gpgv", "apt-get")), reason="needs gpg, gpgv and apt"
)


@pytest.fixture(scope="module")
def signed_repo(tmp_path_factory):
    base = Path(tmp_path_factory.mktemp("repo", numbered=True))
    signer = aptrepo.Signer(base / "gnupg")
    signer.create("r9700ctl unit test key <test@r9700ctl.invalid>")
    package = DebPackage(
        name="rocm-core",
        version="6.4.1.60401-83~24.04",
        summary="rocm-core - lab stand-in",
        files=[DebFile("/opt/rocm-6.4.1/.info/version", b"6.4.1-83\n")],
    )
    pool = aptrepo.build_pool([package])
    try:
        aptrepo.write_repository(
            base / "repo",
            {"noble": pool, "bookworm": pool},
            signer=signer,
            origin="10.213.9.1",
            label="t",
            description="t",
        )
        (base / "key.gpg").write_bytes(signer.public_key(armor=False))
        (base / "key.asc").write_bytes(signer.public_key(armor=True))
    finally:
        signer.close()
    return base


def _gpgv(key: Path, *files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["gpgv", "--keyring", str(key), *map(str, files)], capture_output=True, text=True)


def test_inrelease_and_release_gpg_verify_with_the_lab_key(signed_repo):
    dists = signed_repo / "repo/dists/noble"
    assert _gpgv(signed_repo / "key.gpg", dists / "InRelease").returncode == 0
    assert _gpgv(signed_repo / "key.gpg", dists / "Release.gpg", dists / "Release").returncode == 0


def test_a_changed_release_file_fails_verification(signed_repo, tmp_path):
    """Bug pinned: a signature over the wrong bytes would let apt accept a tampered index."""
    release = (signed_repo / "repo/dists/noble/Release").read_text()
    forged = tmp_path / "Release"
    forged.write_text(release.replace("Origin: 10.213.9.1", "Origin: evil"))
    result = _gpgv(signed_repo / "key.gpg", signed_repo / "repo/dists/noble/Release.gpg", forged)
    assert result.returncode != 0
    assert "BAD signature" in result.stderr


def test_release_lists_the_checksums_of_its_indices(signed_repo):
    import hashlib

    release = (signed_repo / "repo/dists/bookworm/Release").read_text()
    index = (signed_repo / "repo/dists/bookworm/main/binary-amd64/Packages").read_bytes()
    assert f" {hashlib.sha256(index).hexdigest()} " in release
    assert "Origin: 10.213.9.1\n" in release and "Suite: bookworm\n" in release


def test_apt_accepts_the_repository_and_offers_the_package(signed_repo, tmp_path):
    """A real apt-get update against file:// with Signed-By: the format and signatures are right."""
    etc, state, cache = tmp_path / "etc", tmp_path / "state", tmp_path / "cache"
    for path in (etc / "sources.list.d", etc / "preferences.d", etc / "apt.conf.d", state / "lists/partial"):
        path.mkdir(parents=True)
    (cache / "archives/partial").mkdir(parents=True)
    (etc / "sources.list").write_text(
        f"deb [signed-by={signed_repo / 'key.asc'}] file://{signed_repo / 'repo'} bookworm main\n"
    )
    (tmp_path / "status").write_text("")
    options = [
        f"-oDir::Etc={etc}",
        f"-oDir::State={state}",
        f"-oDir::Cache={cache}",
        f"-oDir::State::status={tmp_path / 'status'}",
        "-oDebug::NoLocking=1",
        "-oAPT::Sandbox::User=root",
    ]
    update = subprocess.run(["apt-get", *options, "update"], capture_output=True, text=True)
    assert update.returncode == 0, update.stdout + update.stderr
    assert "NO_PUBKEY" not in update.stderr and "not signed" not in update.stderr
    policy = subprocess.run(["apt-cache", *options, "policy", "rocm-core"], capture_output=True, text=True)
    assert "Candidate: 6.4.1.60401-83~24.04" in policy.stdout
