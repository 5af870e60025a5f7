"""AMD's repositories: deb822 sources for the resolved release, a checked keyring, the pin."""

from __future__ import annotations

import pytest

KEYRING = "/etc/apt/keyrings/rocm.gpg"


def deb822(host, path: str) -> dict[str, str]:
    fields = {}
    for line in host.file(path).content_string.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            fields[key.strip()] = value.strip()
    return fields


def test_rocm_source_points_at_the_resolved_release(host, node):
    """rocm.sources: the manifest's path of the release, its suite for this OS, Signed-By the keyring."""
    source = deb822(host, "/etc/apt/sources.list.d/rocm.sources")
    expected = {
        "URIs": f"{node.base_url}/{node.release.rocm_repo_path}",
        "Suites": node.suite,
        "Signed-By": KEYRING,
    }
    actual = {k: source.get(k) for k in expected}
    assert actual == expected, f"rocm.sources has {actual}, expected {expected}"


def test_amdgpu_source_points_at_the_manifests_driver(host, node):
    source = deb822(host, "/etc/apt/sources.list.d/amdgpu.sources")
    expected = {
        "URIs": f"{node.base_url}/{node.release.amdgpu_repo_path}",
        "Suites": node.suite,
        "Signed-By": KEYRING,
    }
    actual = {k: source.get(k) for k in expected}
    assert actual == expected, f"amdgpu.sources has {actual}, expected {expected}"


def test_graphics_source_is_there_exactly_for_releases_that_have_one(host, node):
    """ROCm 7.x: graphics/<version>/ubuntu beside rocm/apt, same key (AMD's 7.x Ubuntu instructions);
    without it `apt install rocm` fails (rocdecode needs mesa-amdgpu-va-drivers from there)."""
    path = "/etc/apt/sources.list.d/rocm-graphics.sources"
    graphics = node.release.graphics_repo_path
    if not graphics:
        assert not host.file(path).exists, f"{path} is left from another release"
        return
    source = deb822(host, path)
    expected = {
        "Types": "deb",
        "URIs": f"{node.base_url}/{graphics}",
        "Suites": node.suite,
        "Components": "main",
        "Architectures": "amd64",
        "Signed-By": KEYRING,
    }
    actual = {k: source.get(k) for k in expected}
    assert actual == expected, f"{path} has {actual}, expected {expected}"


@pytest.mark.parametrize("legacy", ["rocm.list", "amdgpu.list", "amdgpu-proprietary.list"])
def test_legacy_one_line_sources_are_gone(host, legacy):
    """A leftover with another Signed-By breaks apt ("Conflicting values set for option Signed-By")."""
    path = f"/etc/apt/sources.list.d/{legacy}"
    assert not host.file(path).exists, f"{path} is back: apt may refuse the sources (r9700_repos removes it)"


def test_keyring_holds_the_expected_signing_key(host, node):
    """The fingerprint was checked before the keyring was written; it must still be that key."""
    out = host.run(f"gpg --batch --show-keys --with-colons {KEYRING}")
    assert out.rc == 0, out.stderr
    fingerprints = [line.split(":")[9] for line in out.stdout.splitlines() if line.startswith("fpr:")]
    assert node.key_fingerprint in fingerprints, (
        f"{KEYRING} holds {fingerprints}, expected {node.key_fingerprint}"
    )


def test_keyring_is_root_owned_and_world_readable(host):
    keyring = host.file(KEYRING)
    assert (keyring.user, keyring.group, keyring.mode) == ("root", "root", 0o644)


def test_pin_prefers_the_repositories_host(host, node):
    """AMD's rocm-pin-600, with the origin taken from the repository URL (a mirror's host too)."""
    from urllib.parse import urlsplit

    pin = host.file("/etc/apt/preferences.d/rocm-pin-600").content_string
    assert f'Pin: origin "{urlsplit(node.base_url).hostname}"' in pin
    assert f"Pin-Priority: {int(node.var('r9700_repo_pin_priority'))}" in pin


def test_apt_reads_every_source_at_the_pin_priority(host, node):
    """`apt-cache policy`: the pin really applies to the sources (not only written to a file)."""
    policy = host.run("apt-cache policy").stdout
    priority = int(node.var("r9700_repo_pin_priority"))
    release = node.release
    paths = [release.rocm_repo_path, release.amdgpu_repo_path, release.graphics_repo_path]
    for path in filter(None, paths):
        assert f"{priority} {node.base_url}/{path} {node.suite}/main" in policy, path


def test_apt_proxy_file_follows_r9700_proxy(host, node):
    proxy_file = host.file("/etc/apt/apt.conf.d/90r9700-proxy")
    proxy = node.var("r9700_proxy")
    if proxy:
        assert f'Acquire::http::Proxy "{proxy}";' in proxy_file.content_string
    else:
        assert not proxy_file.exists
