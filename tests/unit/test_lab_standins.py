"""Stand-in packages: AMD's names and version shapes, honest descriptions, tools that replay recordings."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from r9700ctl import manifest
from r9700ctl.lab import aptrepo, mirror, standins
from r9700ctl.lab.recordings import Recordings
from r9700ctl.manifest import RocmRelease


def _release(version: str, driver: str, installer: str = "") -> RocmRelease:
    raw = {"amdgpu": driver, **({"amdgpu_install": installer} if installer else {})}
    if version.startswith("7."):
        raw["graphics"] = version
    return RocmRelease(version=version, gfx=("gfx1201",), os={"ubuntu-24.04": "noble"}, raw=raw)


RECORDED = Recordings(
    scenario="r9700-test",
    outputs={"rocminfo.txt": b"ROCk module is loaded\nName: gfx1201\n", "amd-smi-static.json": b"[]\n"},
    sources={"rocminfo.txt": "# source: test", "amd-smi-static.json": "# source: test"},
)


@pytest.mark.parametrize(
    ("version", "driver", "package", "expected"),
    [
        # Shapes seen in public apt logs (see the table in r9700ctl/lab/standins.py).
        ("6.4.1", "6.4.1", "rocm-core", "6.4.1.60401-83~24.04"),
        ("6.4.1", "6.4.1", "rocminfo", "1.0.0.60401-83~24.04"),
        ("6.3.2", "6.3.2", "rocm", "6.3.2.60302-66~24.04"),
        ("7.1.1", "30.20.1", "rocm", "7.1.1.70101-38~24.04"),
    ],
)
def test_rocm_versions_have_amds_shape(version, driver, package, expected):
    packages = {p.name: p for p in standins.rocm_packages(_release(version, driver), "24.04", RECORDED)}
    assert packages[package].version == expected


@pytest.mark.parametrize(
    ("version", "driver", "dkms", "module"),
    [
        ("6.4.1", "6.4.1", "1:6.12.12.60401-2164967.22.04", "6.12.12-2164967.22.04"),
        ("7.0.2", "30.10.2", "1:6.14.14.30100200-2226257.22.04", "6.14.14-2226257.22.04"),
        ("7.1.1", "30.20.1", "1:6.16.6.30200100-2255209.22.04", "6.16.6-2255209.22.04"),
    ],
)
def test_amdgpu_dkms_drops_a_dkms_conf_and_no_driver_source_under_amds_version(version, driver, dkms, module):
    """DKMS must accept it (`dkms add`; autoinstall tries it for a new kernel, the way a kernel
    upgrade fails on a real node) and every build must fail in make: no module ever exists."""
    packages = {p.name: p for p in standins.amdgpu_packages(_release(version, driver), "22.04")}
    package = packages["amdgpu-dkms"]
    assert package.version == dkms
    assert [f.path for f in package.files] == [
        f"/usr/src/amdgpu-{module}/dkms.conf",
        f"/usr/src/amdgpu-{module}/README.lab",
    ]
    assert not package.scripts, "the stand-in must run no dkms"
    conf = package.files[0].content.decode()
    assert f'PACKAGE_VERSION="{module}"' in conf and 'AUTOINSTALL="yes"' in conf
    assert 'BUILT_MODULE_NAME[0]="amdgpu"' in conf
    assert 'MAKE[0]="make -C ${kernel_source_dir} ' in conf


def test_amdgpu_install_takes_its_version_from_the_manifest_file_name():
    release = _release("6.3.2", "6.3.2", installer="amdgpu-install_6.3.60302-1_all.deb")
    assert standins.amdgpu_install_filename(release) == "amdgpu-install_6.3.60302-1_all.deb"
    assert standins.amdgpu_install_package(release).architecture == "all"


def test_every_stand_in_says_so_and_every_dependency_is_in_the_same_repository():
    release = _release("7.1.1", "30.20.1")
    rocm = standins.rocm_packages(release, "22.04", RECORDED)
    amdgpu = standins.amdgpu_packages(release, "22.04")
    for group in (rocm, amdgpu):
        versions = {p.name: p.version for p in group}
        for package in group:
            assert "lab stand-in" in package.summary
            for dependency in package.depends:
                if dependency == standins.GRAPHICS_PACKAGE:
                    continue  # from the graphics repository (test above)
                name, _, pinned = dependency.partition(" (= ")
                assert versions.get(name) == pinned.rstrip(")"), f"{package.name} -> {dependency}"
    assert {"rocm", "rocm-hip-runtime", "rocminfo", "amd-smi-lib", "rocm-smi-lib", "rccl"} <= {
        p.name for p in rocm
    }


def test_rocm_7x_needs_the_graphics_repository_as_amds_does_and_6x_does_not():
    """rocdecode Depends on mesa-amdgpu-va-drivers (ROCm/rocDecode#656), which 7.x serves only from
    graphics/<version>/ubuntu: without that source `apt install rocm` fails, in the lab as on a node."""
    release = RocmRelease("7.1.1", ("gfx1201",), {}, raw={"amdgpu": "30.20.1", "graphics": "7.1.1"})
    rocm = {p.name: p for p in standins.rocm_packages(release, "24.04", RECORDED)}
    assert "rocdecode (= 1.4.0.70101-38~24.04)" in rocm["rocm"].depends
    assert "mesa-amdgpu-va-drivers" in rocm["rocdecode"].depends
    graphics = standins.graphics_packages(release, "24.04")
    assert [(p.name, p.version) for p in graphics] == [
        ("mesa-amdgpu-va-drivers", "25.0.0.70101-2255209.24.04")
    ]
    assert "mesa-amdgpu-va-drivers" not in {p.name for p in rocm.values()}
    older = {p.name: p for p in standins.rocm_packages(_release("6.4.1", "6.4.1"), "24.04", RECORDED)}
    assert "rocdecode" not in older and not any("rocdecode" in d for d in older["rocm"].depends)


def test_rocm_core_manages_opt_rocm_like_amds_package():
    package = {p.name: p for p in standins.rocm_packages(_release("6.4.1", "6.4.1"), "24.04", RECORDED)}[
        "rocm-core"
    ]
    assert "update-alternatives --install /opt/rocm rocm /opt/rocm-6.4.1" in package.scripts["postinst"]
    assert "update-alternatives --remove rocm /opt/rocm-6.4.1" in package.scripts["prerm"]


def _script(tmp_path: Path, tool: str, recordings: Recordings) -> Path:
    """Install a tool's stand-in files under tmp_path the way dpkg would place them."""
    package = next(
        p
        for p in standins.rocm_packages(_release("6.4.1", "6.4.1"), "24.04", recordings)
        if standins.TOOLS.get(p.name) == tool
    )
    for item in package.files:
        target = tmp_path / item.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.content)
        target.chmod(item.mode)
    script = tmp_path / f"opt/rocm-6.4.1/bin/{tool}"
    # The script reads its data at the installed path; point it at tmp_path instead.
    script.write_text(script.read_text().replace("/opt/rocm-6.4.1/", f"{tmp_path}/opt/rocm-6.4.1/"))
    return script


def test_the_stand_in_tool_replays_the_recording_whatever_the_argument_order(tmp_path):
    amd_smi = _script(tmp_path, "amd-smi", RECORDED)
    for argv in (["static", "--json"], ["--json", "static"]):
        result = subprocess.run([str(amd_smi), *argv], capture_output=True)
        assert (result.returncode, result.stdout, result.stderr) == (0, b"[]\n", b"")
    rocminfo = _script(tmp_path, "rocminfo", RECORDED)
    assert subprocess.run([str(rocminfo)], capture_output=True).stdout == RECORDED.outputs["rocminfo.txt"]


def test_a_missing_recording_fails_with_one_line_naming_the_arguments(tmp_path):
    amd_smi = _script(tmp_path, "amd-smi", RECORDED)
    result = subprocess.run([str(amd_smi), "metric", "--json"], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "stand-in amd-smi: no recorded output for metric --json\n"
    rocm_smi = _script(tmp_path, "rocm-smi", Recordings(scenario=None))
    result = subprocess.run([str(rocm_smi)], capture_output=True, text=True)
    assert result.stderr == "stand-in rocm-smi: no recorded output for (no arguments)\n"


def test_kernel_stand_ins_match_uname_and_point_build_at_the_headers():
    headers, extra = standins.kernel_packages("6.18.44-fc-v1098")
    assert (headers.name, extra.name) == (
        "linux-headers-6.18.44-fc-v1098",
        "linux-modules-extra-6.18.44-fc-v1098",
    )
    assert headers.version == "6.18.44-1"
    assert headers.symlinks[0].path == "/lib/modules/6.18.44-fc-v1098/build"
    assert standins.kernel_packages("Weird_Kernel") == []


def test_the_next_kernels_headers_run_the_kernel_hooks_and_fail_with_the_first_that_fails(tmp_path):
    """Issue 22 item 1: the lab's new kernel must fail through dpkg as Ubuntu's does
    (ROCm/legacy-rocm-build#3701): its headers' postinst runs /etc/kernel/header_postinst.d
    (where Debian's dkms puts its hook) and stops at a hook that fails, and the headers have an
    include/ directory so that DKMS's hook does not skip them."""
    packages = {p.name: p for p in standins.next_kernel_packages()}
    headers = packages[f"linux-headers-{standins.NEXT_KERNEL}"]
    include = f"/usr/src/linux-headers-{standins.NEXT_KERNEL}/include/README.lab"
    assert include in {f.path for f in headers.files}
    assert not packages[f"linux-image-{standins.NEXT_KERNEL}"].scripts
    postinst = tmp_path / "postinst"
    hooks = tmp_path / "header_postinst.d"
    postinst.write_text(headers.scripts["postinst"].replace("/etc/kernel/header_postinst.d", str(hooks)))
    postinst.chmod(0o755)
    hooks.mkdir()
    (hooks / "dkms").write_text('#!/bin/sh\necho "stand-in hook for $1" >&2\nexit 11\n')
    (hooks / "dkms").chmod(0o755)
    (hooks / "zz-after").write_text("#!/bin/sh\necho never\n")
    (hooks / "zz-after").chmod(0o755)
    done = subprocess.run([str(postinst), "configure"], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert f"stand-in hook for {standins.NEXT_KERNEL}" in done.stderr
    assert "exited with return code 11" in done.stderr and "never" not in done.stdout
    assert subprocess.run([str(postinst), "remove"], timeout=30).returncode == 0


@pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg is not installed")
def test_the_mirror_has_every_manifest_release_in_all_three_suites(tmp_path):
    """Laid out like repo.radeon.com, for every release the roles can be asked to install."""
    signer = aptrepo.Signer(tmp_path / "gnupg")
    signer.create("r9700ctl unit test <test@r9700ctl.invalid>")
    data = manifest.load()
    try:
        mirror.build(
            tmp_path / "m",
            manifest=data,
            recordings=RECORDED,
            kernel_release=os.uname().release,
            signer=signer,
            origin="10.213.9.1",
        )
    finally:
        signer.close()
    root = tmp_path / "m"
    assert (root / "rocm/rocm.gpg.key").read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    for name, release in data.releases.items():
        rocm_dir, amdgpu_dir = mirror.repository_paths(data, release)
        for suite in ("noble", "jammy", "bookworm"):
            for repo in (rocm_dir, amdgpu_dir):
                assert (root / repo / "dists" / suite / "InRelease").is_file(), f"{repo} {suite}"
            packages = (root / rocm_dir / "dists" / suite / "main/binary-amd64/Packages").read_text()
            assert "Package: rocm\n" in packages and f"Version: {name}." in packages
            installer = (
                root / "amdgpu-install" / name / "ubuntu" / suite / standins.amdgpu_install_filename(release)
            )
            assert installer.is_file()
            graphics_dir = data.repository.graphics_path(release)
            if graphics_dir:
                served = (root / graphics_dir / "dists" / suite / "main/binary-amd64/Packages").read_text()
                assert "Package: mesa-amdgpu-va-drivers\n" in served, f"{graphics_dir} {suite}"
            else:
                assert not (root / "graphics" / name).exists()
    assert (root / "lab-kernel/dists/bookworm/InRelease").is_file()


def test_the_nodes_own_output_wins_over_the_packaged_recording(tmp_path):
    """A node's machine directory (r9700ctl/lab/machine.py) holds its amd-smi/rocminfo outputs."""
    data, mine = tmp_path / "data", tmp_path / "machine"
    data.mkdir()
    mine.mkdir()
    (data / "rocminfo.txt").write_text("packaged\n")
    script = tmp_path / "rocminfo"
    script.write_text(standins.tool_script("rocminfo", str(data), {(): "rocminfo.txt"}, str(mine)))
    script.chmod(0o755)
    assert subprocess.run([str(script)], capture_output=True, text=True).stdout == "packaged\n"
    (mine / "rocminfo.txt").write_text("this node's machine\n")
    (mine / "amd-smi.txt").write_text("not rocminfo's\n")
    assert subprocess.run([str(script), "--support"], capture_output=True, text=True).stdout == (
        "this node's machine\n"
    )
