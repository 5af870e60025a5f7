"""The nodes' root file system: which Debian mirror, and when the cache must be rebuilt."""

import pytest

from r9700ctl.lab import rootfs


@pytest.mark.parametrize(
    ("files", "mirror"),
    [
        (
            {
                "etc/apt/sources.list.d/debian.sources": (
                    "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
                    "URIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n\n"
                    "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n"
                )
            },
            "http://deb.debian.org/debian",
        ),
        (
            {
                "etc/apt/sources.list": (
                    "# deb http://old.example/debian bookworm main\n"
                    "deb [arch=amd64] http://mirror.example/debian/ bookworm main\n"
                )
            },
            "http://mirror.example/debian",
        ),
        (
            {
                "etc/apt/sources.list.d/security.sources": "Types: deb\nURIs: http://security.debian.org/debian-security\n"
            },
            rootfs.DEFAULT_MIRROR,
        ),
        (
            {"etc/apt/sources.list": "deb http://archive.ubuntu.com/ubuntu noble main\n"},
            rootfs.DEFAULT_MIRROR,
        ),
        ({}, rootfs.DEFAULT_MIRROR),
    ],
    ids=["deb822", "one-line-with-options", "security-only", "ubuntu-host", "no-sources"],
)
def test_the_debian_mirror_comes_from_the_hosts_own_sources(tmp_path, files, mirror):
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert rootfs.debian_mirror(tmp_path) == mirror


def test_the_cache_key_changes_with_the_package_list(monkeypatch):
    """Bug pinned: a node image without a newly required package would be reused from the cache."""
    before = rootfs.cache_key()
    monkeypatch.setattr(rootfs, "PACKAGES", (*rootfs.PACKAGES, "kmod"))
    assert rootfs.cache_key() != before
    assert rootfs.cache_path().name.startswith("rootfs-bookworm-")


def test_the_cache_directory_can_be_moved_for_tests(monkeypatch, tmp_path):
    monkeypatch.setenv("R9700CTL_LAB_CACHE", str(tmp_path))
    assert rootfs.cache_path().parent == tmp_path
    assert rootfs.base_path().parent == tmp_path
