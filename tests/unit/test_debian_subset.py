"""The lab nodes' cut of Debian: what it keeps, where its index comes from, and what it does when
Debian's index cannot be had or trusted (r9700ctl/lab/debian_subset.py, r9700ctl/lab/mirror_http.py)."""

import hashlib
import http.server
import lzma
import shutil
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

import pytest
import yaml

from r9700ctl.lab import aptrepo, debian_subset, mirror, processes

REPO = Path(__file__).resolve().parents[2]
needs_gpg = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("gpg", "gpgv", "apt-get")), reason="needs gpg, gpgv and apt"
)

PACKAGES = """\
Package: seed
Version: 1
Depends: libc6 (>= 2.36), liba | libb, virtual-x
Pre-Depends: early:any
Recommends: helper
Suggests: extra
Filename: pool/main/s/seed/seed_1_amd64.deb

Package: libc6
Version: 2.36
Filename: pool/main/g/glibc/libc6_2.36_amd64.deb

Package: liba
Version: 1
Filename: pool/main/liba/liba/liba_1_amd64.deb

Package: libb
Version: 1
Depends: libb-data
Filename: pool/main/libb/libb/libb_1_amd64.deb

Package: libb-data
Version: 1
Filename: pool/main/libb/libb/libb-data_1_all.deb

Package: x-one
Version: 1
Provides: virtual-x (= 1)
Filename: pool/main/x/x-one/x-one_1_amd64.deb

Package: x-two
Version: 1
Provides: other, virtual-x
Filename: pool/main/x/x-two/x-two_1_amd64.deb

Package: early
Version: 1
Filename: pool/main/e/early/early_1_amd64.deb

Package: helper
Version: 1
Description: a multi-line
 description that mentions
 Depends: not-a-relation
Filename: pool/main/h/helper/helper_1_all.deb

Package: extra
Version: 1
Filename: pool/main/e/extra/extra_1_all.deb

Package: not-a-relation
Version: 1
Filename: pool/main/n/not-a-relation/not-a-relation_1_all.deb

Package: unrelated
Version: 1
Depends: libc6
Filename: pool/main/u/unrelated/unrelated_1_amd64.deb
"""


def names(stanzas: list[str]) -> list[str]:
    return [s.split("\n", 1)[0].removeprefix("Package: ") for s in stanzas]


def test_the_cut_keeps_every_alternative_provider_and_recommendation_but_not_suggestions():
    kept = debian_subset.subset(PACKAGES, {"seed"})
    assert names(kept) == ["early", "helper", "liba", "libb", "libb-data", "libc6", "seed", "x-one", "x-two"]
    # Debian's own stanzas, whole: apt fetches each package by its Filename.
    assert "Suggests: extra\nFilename: pool/main/s/seed/seed_1_amd64.deb" in kept[names(kept).index("seed")]


def test_the_installed_set_is_what_dpkg_calls_installed(tmp_path):
    status = tmp_path / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text(
        "Package: kept\nStatus: install ok installed\n\n"
        "Package: gone\nStatus: deinstall ok config-files\n\n"
        "Package: half\nStatus: install reinstreq half-installed\n"
    )
    assert debian_subset.installed(tmp_path) == {"kept"}


def test_debians_packages_named_like_an_amd_stand_in_stay_in_the_cut(tmp_path):
    """Debian's own rocminfo 5.2.3 must stay visible to the nodes: r9700_repos's pin exists to beat it."""
    from r9700ctl import manifest
    from r9700ctl.lab import recordings

    signer = aptrepo.Signer(tmp_path / "gnupg")
    signer.create("r9700ctl unit test key <test@r9700ctl.invalid>")
    try:
        summary = mirror.build(
            tmp_path / "mirror",
            manifest=manifest.load(),
            recordings=recordings.load(recordings.recorded_root(), None),
            kernel_release="6.1.0-99-amd64",
            signer=signer,
            origin="lab-host",
        )
    finally:
        signer.close()
    debian = PACKAGES + "\nPackage: rocminfo\nVersion: 5.2.3-3\nDepends: libhsa-runtime64-1\n\n"
    debian += "Package: libhsa-runtime64-1\nVersion: 5.2.3-5\n"
    assert {"rocminfo", "rocm-core", "amdgpu-dkms"} <= summary.names
    assert names(debian_subset.subset(debian, set(summary.names))) == ["libhsa-runtime64-1", "rocminfo"]


def test_every_package_a_role_installs_from_debian_is_in_the_cut():
    def var(path: str, name: str):
        return yaml.safe_load((REPO / path).read_text())[name]

    listed = [
        *var("roles/r9700_repos/vars/Debian.yml", "__r9700_repos_prerequisites"),
        *var("roles/r9700_containers/vars/main.yml", "__r9700_containers_packages")["distribution"],
        *var("roles/r9700_cluster/vars/main.yml", "__r9700_cluster_packages"),
        *var("roles/r9700_monitoring/vars/main.yml", "__r9700_monitoring_packages"),
    ]
    tasks = yaml.safe_load((REPO / "roles/r9700_containers/tasks/main.yml").read_text())
    for block in tasks:
        for task in block.get("block", [block]):
            apt = task.get("ansible.builtin.apt") or {}
            if isinstance(apt.get("name"), list):
                listed += apt["name"]
    assert set(listed) - set(debian_subset.SEEDS) == set()


class Archive:
    """A Debian-shaped archive on 127.0.0.1 (InRelease signed by a test key, Packages.xz)."""

    def __init__(self, root: Path, signer: aptrepo.Signer, keyring: Path) -> None:
        self.root, self.signer, self.keyring = root, signer, keyring
        handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
        handler.log_message = lambda *_: None  # type: ignore[method-assign]
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/debian"

    def publish(self, packages: str, *, claimed: bytes | None = None, sign=None) -> None:  # type: ignore[no-untyped-def]
        """Packages.xz, and an InRelease naming the SHA256 of `claimed` (default: the real file)."""
        data = lzma.compress(packages.encode())
        named = claimed if claimed is not None else data
        dists = self.root / "debian/dists/bookworm"
        (dists / "main/binary-amd64").mkdir(parents=True, exist_ok=True)
        (dists / debian_subset.INDEX).write_bytes(data)
        release = (
            "Origin: Debian\nSuite: stable\nCodename: bookworm\nSHA256:\n"
            f" {hashlib.sha256(named).hexdigest()} {len(named):>8} {debian_subset.INDEX}\n"
        )
        (dists / "InRelease").write_bytes((sign or self.signer.clearsign)(release.encode()))


@pytest.fixture
def cache():
    """The lab cache, at a short path: gpg's agent socket in the lab key's home must fit 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="r97c-"))
    yield path
    for home in (path / "signer-v1" / "gnupg", path / "lab-gnupg"):
        aptrepo.stop_agent(home)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def lab_key(cache, tmp_path) -> str:
    """The host's lab key (made in the cache as `lab up` makes it); its public half in tmp_path/lab.gpg."""
    signer = aptrepo.Signer.from_cache(cache, cache / "lab-gnupg")
    (tmp_path / "lab.gpg").write_bytes(signer.public_key(armor=False))
    signer.close()
    return signer.fingerprint


@pytest.fixture
def archive(tmp_path, cache, monkeypatch):
    signer = aptrepo.Signer(cache / "debian-gnupg")
    signer.create("Debian stand-in archive key <archive@r9700ctl.invalid>")
    keyring = tmp_path / "debian-archive-keyring.gpg"
    keyring.write_bytes(signer.public_key(armor=False))
    monkeypatch.setattr(debian_subset, "KEYRING", keyring)
    served = Archive(tmp_path / "www", signer, keyring)
    yield served
    served.server.shutdown()
    signer.close()


def ensure(archive: Archive, tmp_path: Path, cache: Path, lab_key: str, lines: list[str], **kw) -> bool:
    wanted = kw.get("wanted", {"libc6"})
    target = tmp_path / "lab/mirror/debian"
    return debian_subset.ensure(target, cache, wanted, lab_key, archive.url, "", lines.append)


def served_index(tmp_path: Path) -> str:
    return (tmp_path / "lab/mirror/debian/dists/bookworm/main/binary-amd64/Packages").read_text()


@needs_gpg
def test_a_verified_index_is_cut_signed_with_the_lab_key_and_apt_accepts_it(
    archive, tmp_path, cache, lab_key
):
    archive.publish(PACKAGES)
    lines: list[str] = []
    assert ensure(archive, tmp_path, cache, lab_key, lines), lines
    dists = tmp_path / "lab/mirror/debian/dists/bookworm"
    check = subprocess.run(
        ["gpgv", "--keyring", str(tmp_path / "lab.gpg"), str(dists / "InRelease")], capture_output=True
    )
    assert check.returncode == 0, check.stderr
    index = served_index(tmp_path)
    assert "Package: docker.io" not in index  # not in this archive: nothing is made up
    assert "Package: libc6\n" in index and "Package: unrelated" not in index
    assert lines == ["debian: the nodes see 1 of bookworm main's packages, those they can install"]
    # A real apt takes it with the lab key as Signed-By, and offers Debian's version.
    etc, state, apt_cache = tmp_path / "etc", tmp_path / "state", tmp_path / "apt-cache"
    for path in (etc / "sources.list.d", etc / "preferences.d", etc / "apt.conf.d", state / "lists/partial"):
        path.mkdir(parents=True)
    (apt_cache / "archives/partial").mkdir(parents=True)
    source = f"deb [signed-by={tmp_path / 'lab.gpg'}] file://{tmp_path / 'lab/mirror/debian'} bookworm main\n"
    (etc / "sources.list").write_text(source)
    (tmp_path / "status").write_text("")
    options = [f"-oDir::Etc={etc}", f"-oDir::State={state}", f"-oDir::Cache={apt_cache}"]
    options += [
        f"-oDir::State::status={tmp_path / 'status'}",
        "-oDebug::NoLocking=1",
        "-oAPT::Sandbox::User=root",
    ]
    update = subprocess.run(["apt-get", *options, "update"], capture_output=True, text=True)
    assert update.returncode == 0 and "NO_PUBKEY" not in update.stderr, update.stdout + update.stderr
    policy = subprocess.run(["apt-cache", *options, "policy", "libc6"], capture_output=True, text=True)
    assert "Candidate: 2.36" in policy.stdout, policy.stdout


@needs_gpg
def test_a_signature_by_a_key_the_host_lacks_beside_a_good_one_is_accepted_as_apt_accepts_it(
    archive, tmp_path, cache, lab_key
):
    """Bookworm's InRelease carries three signatures, one by trixie's key: gpgv exits 2 on a keyring
    without it, apt does not fail, and neither may the cut."""
    other = aptrepo.Signer(cache / "newer-gnupg")  # its key is not in the keyring
    other.create("Newer archive key <newer@r9700ctl.invalid>")
    loopback = ("--pinentry-mode", "loopback", "--passphrase", "")
    first = archive.signer
    other._gpg("--import", stdin_data=first._gpg(*loopback, "--export-secret-keys", first.fingerprint))
    users = ("--local-user", first.fingerprint, "--local-user", other.fingerprint)
    try:
        archive.publish(
            PACKAGES, sign=lambda data: other._gpg(*loopback, *users, "--clearsign", stdin_data=data)
        )
    finally:
        other.close()
    signed = (tmp_path / "www/debian/dists/bookworm/InRelease").read_bytes()
    assert subprocess.run(["gpgv", "--keyring", str(archive.keyring), "-"], input=signed).returncode != 0
    lines: list[str] = []
    assert ensure(archive, tmp_path, cache, lab_key, lines), lines
    assert "Package: libc6\n" in served_index(tmp_path)


@needs_gpg
def test_an_index_that_does_not_match_its_inrelease_is_never_served(archive, tmp_path, cache, lab_key):
    archive.publish(PACKAGES, claimed=b"what Debian signed")
    lines: list[str] = []
    assert not ensure(archive, tmp_path, cache, lab_key, lines)
    assert not (tmp_path / "lab/mirror/debian").exists()
    assert lines == [
        f"debian: Debian's {debian_subset.INDEX} does not match its InRelease (a proxy or mirror fault); "
        "the nodes use the whole of bookworm main"
    ]


@needs_gpg
def test_an_inrelease_signed_by_another_key_gives_no_cut_not_even_the_one_made_before(
    archive, tmp_path, cache, lab_key
):
    archive.publish(PACKAGES)
    assert ensure(archive, tmp_path, cache, lab_key, [])
    stranger = aptrepo.Signer(cache / "stranger")
    stranger.create("Not Debian <evil@r9700ctl.invalid>")
    try:
        archive.signer = stranger
        archive.publish(PACKAGES.replace("Version: 2.36", "Version: 9.99"))
    finally:
        stranger.close()
    shutil.rmtree(tmp_path / "lab")
    lines: list[str] = []
    assert not ensure(archive, tmp_path, cache, lab_key, lines)
    assert lines[0].startswith("debian: Debian's InRelease has no good signature: "), lines
    assert not (tmp_path / "lab").exists()


@needs_gpg
def test_an_unreachable_debian_uses_the_cut_made_before_for_the_same_wants_only(
    archive, tmp_path, cache, lab_key
):
    archive.publish(PACKAGES)
    assert ensure(archive, tmp_path, cache, lab_key, [])
    archive.server.shutdown()
    archive.server.server_close()
    shutil.rmtree(tmp_path / "lab")
    lines: list[str] = []
    assert ensure(archive, tmp_path, cache, lab_key, lines)
    assert "could not be read" in lines[0] and "the cut of bookworm main made before" in lines[0], lines
    assert "Package: libc6\n" in served_index(tmp_path)
    # Made for other wants (another stand-in or seed list): never used in their place.
    shutil.rmtree(tmp_path / "lab")
    lines = []
    assert not ensure(archive, tmp_path, cache, lab_key, lines, wanted={"libc6", "seed"})
    assert lines[0].endswith("; the nodes use the whole of bookworm main"), lines


def test_an_unreachable_debian_with_nothing_cached_leaves_the_whole_archive(tmp_path):
    lines: list[str] = []
    port = processes.free_port("127.0.0.1", 18000)
    url = f"http://127.0.0.1:{port}/debian"
    assert not debian_subset.ensure(tmp_path / "t", tmp_path / "cache", set(), "F1", url, "", lines.append)
    assert lines[0].startswith("debian: Debian's InRelease could not be read (") and lines[0].endswith(
        "; the nodes use the whole of bookworm main"
    ), lines


def test_the_mirror_serves_its_files_and_redirects_the_pool_to_debian(tmp_path):
    (tmp_path / "debian/dists").mkdir(parents=True)
    (tmp_path / "debian/dists/x").write_text("index")
    port = processes.free_port("127.0.0.1", 18100)
    pid = mirror.serve(
        tmp_path, "127.0.0.1", port, tmp_path / "log", {"/debian/pool/": "http://deb.example/d/pool/"}
    )
    try:
        assert processes.wait_for_port("127.0.0.1", port, timeout=15, pid=pid)
        base = f"http://127.0.0.1:{port}"
        assert urllib.request.urlopen(f"{base}/debian/dists/x", timeout=10).read() == b"index"

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args):  # type: ignore[no-untyped-def]
                return None

        opener = urllib.request.build_opener(NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as moved:
            opener.open(f"{base}/debian/pool/main/p/pciutils/pciutils_1_amd64.deb", timeout=10)
        assert moved.value.code == 302
        assert (
            moved.value.headers["Location"]
            == "http://deb.example/d/pool/main/p/pciutils/pciutils_1_amd64.deb"
        )
    finally:
        processes.stop(pid)
