"""The in-process .deb writer, checked by dpkg-deb itself."""

import shutil
import subprocess

import pytest

from r9700ctl.lab.debs import DebFile, DebPackage, DebSymlink, build

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")


def _package() -> DebPackage:
    return DebPackage(
        name="rocminfo",
        version="1.0.0.60401-83~24.04",
        summary="rocminfo - lab stand-in",
        description="First paragraph.\n\nSecond paragraph.",
        depends=["rocm-core (= 6.4.1.60401-83~24.04)"],
        files=[
            DebFile("/opt/rocm-6.4.1/bin/rocminfo", b"#!/bin/sh\necho stand-in\n", 0o755),
            DebFile("/opt/rocm-6.4.1/share/doc/rocminfo/README.lab", b"stand-in\n"),
        ],
        symlinks=[DebSymlink("/opt/rocm-6.4.1/bin/rocminfo-link", "rocminfo")],
        scripts={"postinst": "#!/bin/sh\nexit 0\n"},
    )


def test_dpkg_deb_reads_the_control_fields(tmp_path):
    deb = tmp_path / "p.deb"
    deb.write_bytes(build(_package()))
    fields = subprocess.run(
        ["dpkg-deb", "--field", str(deb), "Package", "Version", "Depends"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Package: rocminfo" in fields
    assert "Version: 1.0.0.60401-83~24.04" in fields
    assert "Depends: rocm-core (= 6.4.1.60401-83~24.04)" in fields


def test_files_unpack_with_their_modes_owned_by_root(tmp_path):
    deb = tmp_path / "p.deb"
    deb.write_bytes(build(_package()))
    listing = subprocess.run(
        ["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    assert "-rwxr-xr-x root/root" in listing and "./opt/rocm-6.4.1/bin/rocminfo\n" in listing
    assert "./opt/rocm-6.4.1/bin/rocminfo-link -> rocminfo" in listing
    subprocess.run(["dpkg-deb", "--extract", str(deb), str(tmp_path / "x")], check=True)
    tool = tmp_path / "x/opt/rocm-6.4.1/bin/rocminfo"
    assert subprocess.run([str(tool)], capture_output=True, text=True, check=True).stdout == "stand-in\n"


def test_maintainer_scripts_are_executable_in_the_control_archive(tmp_path):
    deb = tmp_path / "p.deb"
    deb.write_bytes(build(_package()))
    subprocess.run(["dpkg-deb", "--control", str(deb), str(tmp_path / "c")], check=True)
    assert (tmp_path / "c/postinst").stat().st_mode & 0o111
    assert (tmp_path / "c/md5sums").read_text().count("\n") == 2


def test_the_same_package_gives_the_same_bytes():
    """Deterministic output: a rebuilt mirror serves identical files (apt caches stay valid)."""
    assert build(_package()) == build(_package())


def test_the_file_name_leaves_out_the_epoch_as_debian_does():
    package = DebPackage(
        name="amdgpu-dkms", version="1:6.12.12.60401-2164967.24.04", summary="x", architecture="all"
    )
    assert package.filename == "amdgpu-dkms_6.12.12.60401-2164967.24.04_all.deb"
