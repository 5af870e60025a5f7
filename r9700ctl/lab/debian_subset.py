"""The lab nodes' Debian: bookworm main cut to what a lab node can install, served by the lab mirror.

Why: with all of bookworm main as its source (63,000 packages: a 50 MB Packages index and a 32 MB
Translation-en), a node's apt rebuilds its cache from them on every `apt-get update` (about 1 CPU-s,
also when nothing changed) and sets up its dependency cache over all of them on every apt run
(`apt-mark manual` 0.19 s, python-apt's `apt.Cache()` 0.33 s, `apt-get install -s` 0.36 s): about a
tenth of a whole provision's CPU on this project's 2-core machine (docs/benchmarks.md, 2026-12-07).

What: Debian's own index entries for the packages the root file system has installed, for SEEDS
(every package a role or a lab test installs from Debian) and for the names of the lab's AMD
stand-ins (Debian has a rocminfo of its own, which AMD's must win against), closed over Depends,
Pre-Depends and Recommends with every alternative and every provider of a virtual package, so apt
resolves on a node as it would against the whole archive (1,244 packages at the first build). The
index is taken from Debian's InRelease after gpgv checked it with the host's debian-archive-keyring
and the Packages file against its SHA256 there, then signed again with the lab's key. The
packages themselves are Debian's: the lab mirror answers pool/ with a redirect to the Debian
mirror, and the node's apt fetches them through the lab's apt-cacher-ng like before. Nothing here
is a stand-in.

Cached per host below the lab cache, keyed by what is wanted, the lab key, this file and Debian's
InRelease. A host that cannot read Debian's index now uses the newest cut made for the same wants
and key; an index whose signature or checksum does not hold gives no cut at all. Without a cut the
nodes keep the whole archive as their source (the caller's fallback).
"""

from __future__ import annotations

import hashlib
import http.client
import lzma
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from r9700ctl.errors import CannotRun
from r9700ctl.lab import aptrepo, locks
from r9700ctl.lab.hostcheck import tool

SUITE = "bookworm"
INDEX = "main/binary-amd64/Packages.xz"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
# What a lab node installs from Debian beyond its root file system. A package missing here fails
# loudly on the node ("Unable to locate package"); tests/unit/test_debian_subset.py checks that the
# roles' package lists are all here.
SEEDS = (
    "python3-debian", "gnupg", "ca-certificates",  # r9700_repos, r9700_containers (vars, tasks)
    "docker.io",  # r9700_containers with r9700_docker_source: distribution
    "iperf3", "iputils-ping", "ethtool",  # r9700_cluster (vars/main.yml)
    "prometheus-node-exporter", "python3-prometheus-client",  # r9700_monitoring (vars/main.yml)
    "pciutils",  # tests/lab/test_lab.py: a Debian package through the apt proxy
    "dkms",  # tests/lab/test_kernel_upgrade_lab.py: DKMS hooks on a kernel install
)  # fmt: skip
RELATIONS = ("Depends", "Pre-Depends", "Recommends")
KEEP = 3  # cuts kept in the cache: the newest, and two that labs still running may have copied
INRELEASE_TIMEOUT_S = 20  # a warm `lab up` waits at most this on a network that drops traffic
FETCH_TIMEOUT_S = 120
# What "Debian cannot be read now" looks like: the network or proxy (OSError, a cut-off transfer)
# or a gpgv that hangs. A signature or checksum that does not hold is CannotRun, never this.
UNREADABLE: tuple[type[Exception], ...] = (OSError, http.client.HTTPException, subprocess.SubprocessError)

Progress = Callable[[str], None]


def ensure(
    target: Path, cache: Path, wanted: Iterable[str], lab_key: str, mirror: str, proxy: str, report: Progress
) -> bool:
    """Write the cut of Debian into `target` (a directory holding dists/); False when there is none.

    wanted: besides SEEDS, the packages installed in the root file system and the names of the
    lab's AMD stand-ins: Debian's packages of the same names (its own rocminfo 5.2.3-2 and hipcc:
    bookworm's main index, https://packages.debian.org/bookworm/rocminfo) stay in the cut, so the
    nodes' apt weighs them against AMD's as on a real node, and r9700_repos's pin still has
    something to win against. lab_key: the fingerprint of the lab key
    the nodes trust (aptrepo.Signer.from_cache), which signs the cut.
    """
    wanted = {*wanted, *SEEDS}
    stable = _stable_key(wanted, lab_key)
    try:
        inrelease = _fetch(f"{mirror}/dists/{SUITE}/InRelease", proxy, INRELEASE_TIMEOUT_S)
    except UNREADABLE as exc:
        return _use_earlier(target, cache, stable, report, f"Debian's InRelease could not be read ({exc})")
    made = cache / f"debian-{SUITE}-{stable}-{hashlib.sha256(inrelease).hexdigest()[:12]}"

    def build(work: Path) -> None:
        release = _verified(inrelease)
        digest, size = _index_checksum(release)
        data = _fetch(f"{mirror}/dists/{SUITE}/{INDEX}", proxy, FETCH_TIMEOUT_S)
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            raise CannotRun(what=f"Debian's {INDEX} does not match its InRelease (a proxy or mirror fault)")
        stanzas = subset(lzma.decompress(data).decode("utf-8", errors="replace"), wanted)
        report(f"debian: the nodes see {len(stanzas)} of {SUITE} main's packages, those they can install")
        _write_signed(work, ("\n\n".join(stanzas) + "\n").encode(), cache, lab_key)

    try:
        if not locks.build_once(made, made.with_name(made.name + ".lock"), build):
            report(f"debian: the nodes see the cut of {SUITE} main made for this index ({made.name})")
        _copy(made, target)
    except CannotRun as exc:  # a signature or checksum that does not hold: no cut, new or earlier
        report(f"debian: {exc.what}; the nodes use the whole of {SUITE} main")
        return False
    except (*UNREADABLE, lzma.LZMAError) as exc:
        return _use_earlier(target, cache, stable, report, f"Debian's index could not be read ({exc})")
    _prune(cache, made)
    return True


def _write_signed(work: Path, index: bytes, cache: Path, lab_key: str) -> None:
    # A short home for gpg: its agent's socket path must fit in 108 bytes.
    scratch = Path(tempfile.mkdtemp(prefix="r97-gpg-"))
    try:
        signer = aptrepo.Signer.from_cache(cache, scratch / "gnupg")
        try:
            if signer.fingerprint != lab_key:
                raise CannotRun(
                    what=f"the lab key is {signer.fingerprint} now, the nodes were given {lab_key}"
                )
            aptrepo.write_suite(
                work / "dists" / SUITE,
                index,
                signer=signer,
                origin="Debian",
                label="Debian (r9700ctl lab cut)",
                suite=SUITE,
                description=f"Debian {SUITE} main, the packages a lab node can install",
            )
        finally:
            signer.close()
    finally:
        aptrepo.stop_agent(scratch / "gnupg")
        shutil.rmtree(scratch, ignore_errors=True)


def installed(root: Path) -> set[str]:
    """The packages dpkg has installed in the root file system at `root`."""
    status = (root / "var/lib/dpkg/status").read_text(errors="replace")
    return {
        _field(stanza, "Package")
        for stanza in status.split("\n\n")
        if _field(stanza, "Status").endswith(" installed")
    }


def subset(packages: str, seeds: set[str]) -> list[str]:
    """The stanzas of `packages` (a Packages file) for `seeds` and all they may pull in, by name."""
    stanzas: dict[str, str] = {}
    providers: dict[str, list[str]] = {}
    # Only five fields of each stanza are read: a plain split is enough, and fast on 50 MB.
    for stanza in packages.split("\n\n"):
        name = _field(stanza, "Package")
        if not name:
            continue
        stanzas[name] = stanza.strip("\n")
        for provided in _names(_field(stanza, "Provides")):
            providers.setdefault(provided, []).append(name)
    wanted: set[str] = set()
    todo = list(seeds)
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        todo.extend(providers.get(name, ()))
        if name in stanzas:
            todo.extend(n for relation in RELATIONS for n in _names(_field(stanzas[name], relation)))
    return [stanzas[n] for n in sorted(wanted & stanzas.keys())]


def _field(stanza: str, name: str) -> str:
    found = re.search(rf"^{name}: *(.*(?:\n[ \t].*)*)", stanza, re.M)
    return found.group(1) if found else ""


def _names(relation: str) -> list[str]:
    """Package names in a relation field: every alternative, without versions or :any."""
    return [
        alternative.split()[0].split(":")[0]
        for part in relation.split(",")
        for alternative in part.split("|")
        if alternative.strip()
    ]


def _fetch(url: str, proxy: str, timeout: float) -> bytes:
    proxies = {"http": proxy, "https": proxy} if proxy else {}  # "": straight to the mirror
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
    with opener.open(url, timeout=timeout) as response:
        return response.read()


def _verified(inrelease: bytes) -> str:
    """The text Debian signed, once gpgv found a good signature by a key of the host's archive keyring.

    Judged as apt judges it (apt 2.6 methods/gpgv.cc): at least one good signature and no bad one;
    a signature by a key the keyring lacks is no failure (bookworm's InRelease is signed by three
    keys, one of them trixie's, which an older keyring does not have), though gpgv exits 2 for it.
    """
    if not KEYRING.is_file():
        raise CannotRun(what=f"{KEYRING} is missing", hint="apt-get install debian-archive-keyring")
    with tempfile.TemporaryDirectory() as scratch:
        signed, text = Path(scratch) / "InRelease", Path(scratch) / "Release"
        signed.write_bytes(inrelease)
        proc = subprocess.run(
            [tool("gpgv"), "--status-fd", "1", "--keyring", str(KEYRING), "--output", str(text), str(signed)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        status = [
            line.split()[1] for line in proc.stdout.decode(errors="replace").splitlines()[:200] if " " in line
        ]
        if "BADSIG" in status or "GOODSIG" not in status or not text.is_file():
            why = proc.stderr.decode(errors="replace").strip().splitlines()
            raise CannotRun(
                what=f"Debian's InRelease has no good signature: {why[-1] if why else proc.returncode}"
            )
        return text.read_text()


def _index_checksum(release: str) -> tuple[str, int]:
    section = release.split("\nSHA256:", 1)[-1]
    found = re.search(rf"^ ([0-9a-f]{{64}}) +(\d+) {re.escape(INDEX)}$", section, re.M)
    if not found:
        raise CannotRun(what=f"Debian's InRelease names no SHA256 for {INDEX}")
    return found.group(1), int(found.group(2))


def _stable_key(wanted: set[str], lab_key: str) -> str:
    """What a cut depends on besides Debian's index: the wanted names, the lab key and this code."""
    digest = hashlib.sha256(",".join(sorted(wanted)).encode())
    digest.update(lab_key.encode())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:12]


def _copy(made: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(made, target)


def _use_earlier(target: Path, cache: Path, stable: str, report: Progress, why: str) -> bool:
    """The newest cut made before for the same wants and lab key, when Debian cannot be read now."""
    for cut in sorted(_cuts(cache, stable), key=_mtime, reverse=True):
        try:
            _copy(cut, target)
        except OSError:  # pruned by another lab meanwhile
            continue
        report(f"debian: {why}; the nodes use the cut of {SUITE} main made before ({cut.name})")
        return True
    report(f"debian: {why}; the nodes use the whole of {SUITE} main")
    return False


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _cuts(cache: Path, stable: str = "") -> list[Path]:
    pattern = f"debian-{SUITE}-{stable}-*" if stable else f"debian-{SUITE}-*"
    return [p for p in cache.glob(pattern) if p.is_dir() and not p.name.endswith(".tmp")]


def _prune(cache: Path, current: Path) -> None:
    """Keep the KEEP newest cuts; drop scratch left by a build that died over an hour ago."""
    current.touch()
    for old in sorted(_cuts(cache), key=_mtime, reverse=True)[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
        old.with_name(old.name + ".lock").unlink(missing_ok=True)
    for scratch in cache.glob(f"debian-{SUITE}-*.tmp"):
        if time.time() - _mtime(scratch) > 3600:
            shutil.rmtree(scratch, ignore_errors=True)
