"""Stand-in packages under AMD's real names and version shapes, for the lab's package mirror.

They install like AMD's (to /opt/rocm-<version>, with /opt/rocm managed by update-alternatives
as rocm-core does) but contain no software: their tools replay outputs recorded on real R9700
nodes, and amdgpu-dkms drops a dkms.conf and builds nothing. Every Description says "lab stand-in".
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from r9700ctl.lab import recordings as recordings_module
from r9700ctl.lab.debs import DebFile, DebPackage, DebSymlink
from r9700ctl.lab.recordings import Recordings
from r9700ctl.manifest import RocmRelease

LAB_SUITES = ("noble", "jammy", "bookworm")
# Ubuntu build flavour per suite: AMD ships ~24.04 and ~22.04 builds; its 7.x install docs put
# the jammy packages on Debian 12 (manifest rocm_releases.*.os, docs/hardware.md), so the lab's
# bookworm suite serves those.
SUITE_FLAVOUR = {"noble": "24.04", "jammy": "22.04", "bookworm": "22.04"}
STANDIN = "lab stand-in (r9700ctl test lab; contains no AMD software)"


@dataclass(frozen=True)
class ReleaseBuild:
    """AMD's build numbers of one release, as seen in public apt logs."""

    rocm_build: str  # "83" in rocm-core 6.4.1.60401-83~24.04
    dkms_kernel: str  # "6.12.12" in amdgpu-dkms 1:6.12.12.60401-2164967.24.04
    dkms_build: str  # "2164967" in the same version


# Sources: apt output quoted in public GitHub issue threads (found with the project's search tool):
# 6.3.2 "rocm ... 6.3.2.60302-66~22.04", "amdgpu-dkms ... 1:6.10.5.60302-2109964.22.04";
# 6.4.1 "rocm-hip-runtime-dev (6.4.1.60401-83~24.04)", "amdgpu-dkms (1:6.12.12.60401-2164967.24.04)";
# 7.0.2 "7.0.2.70002-56~24.04", DKMS "6.14.14.30100200-2226257"; 7.1.1 "rocm 7.1.1.70101-38~24.04",
# "amdgpu-dkms 1:6.16.6.30200100-2255209.24.04"; 7.2.3 "rocm-core 7.2.3.70203-90", driver 30.30.3 DKMS
# "6.16.13.30300300-2327507".
KNOWN_BUILDS = {
    "6.3.2": ReleaseBuild("66", "6.10.5", "2109964"),
    "6.4.1": ReleaseBuild("83", "6.12.12", "2164967"),
    "7.0.2": ReleaseBuild("56", "6.14.14", "2226257"),
    "7.1.1": ReleaseBuild("38", "6.16.6", "2255209"),
    "7.2.3": ReleaseBuild("90", "6.16.13", "2327507"),
}
# A manifest release the table does not know gets AMD-shaped numbers that are plainly made up.
UNKNOWN_BUILD = ReleaseBuild("1", "6.0.0", "1")

# name -> (Depends, summary). Upstream versions are the ROCm version except where noted.
ROCM_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "rocm-core": ((), "ROCm core: version file and the /opt/rocm link"),
    "hsa-rocr": (("rocm-core",), "ROCm runtime (ROCr)"),
    "comgr": (("rocm-core",), "code object manager"),
    "hip-runtime-amd": (("hsa-rocr", "comgr", "rocm-core"), "HIP runtime for AMD GPUs"),
    "rocminfo": (("hsa-rocr", "rocm-core"), "rocminfo: agents and their properties"),
    "rocm-smi-lib": (("rocm-core",), "rocm-smi: system management (deprecated)"),
    "amd-smi-lib": (("rocm-core",), "amd-smi: system management"),
    "rocm-opencl": (("hsa-rocr", "comgr", "rocm-core"), "OpenCL runtime"),
    "rocblas": (("hip-runtime-amd", "rocm-core"), "BLAS on ROCm"),
    "hipblas": (("rocblas", "hip-runtime-amd", "rocm-core"), "hipBLAS"),
    "rccl": (("hip-runtime-amd", "rocm-smi-lib", "rocm-core"), "ROCm collective communication library"),
    "miopen-hip": (("hip-runtime-amd", "rocblas", "rocm-core"), "MIOpen deep learning primitives"),
    "hipcc": (("hip-runtime-amd", "rocm-core"), "HIP compiler driver"),
    "rocm-language-runtime": (("rocm-core", "hsa-rocr", "comgr"), "meta package: language runtime"),
    "rocm-hip-runtime": (
        ("rocm-core", "rocm-language-runtime", "hip-runtime-amd", "rocminfo"),
        "meta package: HIP runtime",
    ),
    "rocm-opencl-runtime": (
        ("rocm-core", "rocm-language-runtime", "rocm-opencl"),
        "meta package: OpenCL runtime",
    ),
    "rocm-hip-libraries": (
        ("rocm-core", "rocm-hip-runtime", "rocblas", "hipblas", "rccl", "rocm-smi-lib", "amd-smi-lib"),
        "meta package: HIP libraries",
    ),
    "rocm-ml-libraries": (("rocm-core", "rocm-hip-libraries", "miopen-hip"), "meta package: ML libraries"),
    "rocm-hip-sdk": (
        ("rocm-core", "rocm-hip-runtime", "rocm-hip-libraries", "hipcc"),
        "meta package: HIP SDK",
    ),
    "rocm-ml-sdk": (("rocm-core", "rocm-ml-libraries", "rocm-hip-sdk"), "meta package: ML SDK"),
    "rocm-opencl-sdk": (("rocm-core", "rocm-opencl-runtime"), "meta package: OpenCL SDK"),
    "rocm": (
        (
            "rocm-core",
            "rocm-hip-sdk",
            "rocm-ml-sdk",
            "rocm-opencl-sdk",
            "rocminfo",
            "amd-smi-lib",
            "rocm-smi-lib",
        ),
        "meta package: the whole ROCm stack",
    ),
}
UPSTREAM_VERSION = {"rocminfo": "1.0.0", "rocdecode": "1.4.0"}  # rocminfo keeps 1.0.0 across releases
# ROCm 7.x moved libdrm-amdgpu and mesa-amdgpu-* into a third repository, graphics/<version>/ubuntu,
# and rocdecode (pulled in by `rocm`) Depends on mesa-amdgpu-va-drivers: "Depends: rocm-hip-runtime,
# libva-drm2 (>= 2.16.0) | libva-amdgpu-drm2, mesa-amdgpu-va-drivers, rocprofiler-register"
# (`dpkg -I rocdecode_1.4.0.70002`, ROCm/rocDecode#656). The stand-ins keep that dependency, so a node
# without the graphics source fails `apt install rocm` exactly as a real one does.
GRAPHICS_PACKAGE = "mesa-amdgpu-va-drivers"
ROCDECODE = "rocdecode"
AMDGPU_PACKAGES = frozenset({"amdgpu-dkms", "amdgpu-dkms-firmware", "amdgpu-install"})
TOOLS = {"rocminfo": "rocminfo", "amd-smi-lib": "amd-smi", "rocm-smi-lib": "rocm-smi"}
PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")

# amdgpu-install use cases -> stand-in packages (AMD's script knows more; those are not in the lab).
USECASES = {
    "rocm": "rocm",
    "rocmdev": "rocm-hip-sdk",
    "hip": "rocm-hip-runtime",
    "hiplibsdk": "rocm-hip-sdk",
    "lrt": "rocm-language-runtime",
    "opencl": "rocm-opencl-runtime",
    "mllib": "rocm-ml-libraries",
    "mlsdk": "rocm-ml-sdk",
    "dkms": "amdgpu-dkms",
}


def build_of(release: RocmRelease) -> ReleaseBuild:
    return KNOWN_BUILDS.get(release.version, UNKNOWN_BUILD)


def version_code(version: str) -> str:
    """AMD's numeric release code: 6.4.1 -> 60401, 7.0.2 -> 70002."""
    major, minor, patch = ([int(p) for p in version.split(".")] + [0, 0])[:3]
    return f"{major * 10000 + minor * 100 + patch}"


def driver_directory(release: RocmRelease) -> str:
    """repo.radeon.com/amdgpu/<this>/ubuntu: the manifest's amdgpu entry (30.10.2 for ROCm 7.0.2)."""
    return str(release.raw.get("amdgpu") or release.version)


def driver_code(release: RocmRelease) -> str:
    """6.x drivers reuse the ROCm code; 30.10.2 -> 30100200 (AMD's own numbering since 7.0)."""
    driver = driver_directory(release)
    parts = [int(p) for p in driver.split(".")] + [0, 0]
    if parts[0] >= 30:
        return f"{parts[0]}{parts[1]:02d}{parts[2]:02d}00"
    return version_code(driver)


def rocm_package_version(name: str, release: RocmRelease, flavour: str) -> str:
    upstream = UPSTREAM_VERSION.get(name, release.version)
    return f"{upstream}.{version_code(release.version)}-{build_of(release).rocm_build}~{flavour}"


def dkms_module_version(release: RocmRelease, flavour: str) -> str:
    """The /usr/src/amdgpu-<this> directory and dkms.conf PACKAGE_VERSION."""
    build = build_of(release)
    return f"{build.dkms_kernel}-{build.dkms_build}.{flavour}"


def dkms_package_version(release: RocmRelease, flavour: str) -> str:
    build = build_of(release)
    return f"1:{build.dkms_kernel}.{driver_code(release)}-{build.dkms_build}.{flavour}"


def firmware_package_version(release: RocmRelease, flavour: str) -> str:
    build = build_of(release)
    driver = driver_directory(release)
    if int(driver.split(".")[0]) >= 30:
        return f"{driver}.0.{driver_code(release)}-{build.dkms_build}.{flavour}"
    return dkms_package_version(release, flavour)


def amdgpu_install_version(release: RocmRelease) -> str:
    """From the manifest's file name (amdgpu-install_6.4.60401-1_all.deb -> 6.4.60401-1)."""
    match = re.fullmatch(r"amdgpu-install_(.+)_all\.deb", str(release.raw.get("amdgpu_install", "")))
    return match.group(1) if match else f"{release.version}.{version_code(release.version)}-1"


def amdgpu_install_filename(release: RocmRelease) -> str:
    return f"amdgpu-install_{amdgpu_install_version(release)}_all.deb"


def package_names(value: object) -> list[str]:
    """Package names found anywhere in a manifest value (lists, dicts, strings), in order."""
    found: list[str] = []
    if isinstance(value, str):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            found += package_names(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "source":
                found += package_names(item)
    return [name for name in found if PACKAGE_NAME.match(name)]


def rocm_packages(
    release: RocmRelease, flavour: str, recordings: Recordings, extra_names: tuple[str, ...] = ()
) -> list[DebPackage]:
    """The ROCm repository's stand-ins (rocm/apt/<version>) for one build flavour.

    extra_names: packages the manifest names (the roles install those) that the table lacks;
    each becomes a stand-in depending on rocm-core.
    """
    prefix = f"/opt/rocm-{release.version}"
    table = dict(ROCM_PACKAGES)
    unversioned: dict[str, list[str]] = {}
    if release.graphics:
        table[ROCDECODE] = (
            ("rocm-core", "hip-runtime-amd"),
            "rocDecode video decode (needs the graphics repository)",
        )
        unversioned[ROCDECODE] = [GRAPHICS_PACKAGE]
        depends, summary = table["rocm"]
        table["rocm"] = ((*depends, ROCDECODE), summary)
    for name in [*extra_names, *package_names(release.raw.get("packages", ()))]:
        if name not in AMDGPU_PACKAGES:
            table.setdefault(name, (("rocm-core",), f"{name} (named in the r9700ctl manifest)"))
    packages = []
    for name, (depends, summary) in table.items():
        package = DebPackage(
            name=name,
            version=rocm_package_version(name, release, flavour),
            summary=f"{summary} - {STANDIN}",
            description=f"Lab stand-in for AMD's {name} {release.version}, built by `r9700ctl lab up`.",
            depends=[f"{dep} (= {rocm_package_version(dep, release, flavour)})" for dep in depends]
            + unversioned.get(name, []),
            files=[DebFile(f"{prefix}/share/doc/{name}/README.lab", _readme(name, release).encode())],
        )
        if name == "rocm-core":
            _add_rocm_core(package, release)
        if name in TOOLS:
            _add_tool(package, TOOLS[name], prefix, recordings)
        packages.append(package)
    return packages


def _readme(name: str, release: RocmRelease) -> str:
    return (
        f"{name}: {STANDIN}.\n"
        f"It stands in for AMD's package of ROCm {release.version} so that provisioning can be tested\n"
        "without AMD hardware or AMD's repository. Never install it on a real node.\n"
    )


def _add_rocm_core(package: DebPackage, release: RocmRelease) -> None:
    prefix = f"/opt/rocm-{release.version}"
    build = build_of(release)
    package.files.append(
        DebFile(f"{prefix}/.info/version", f"{release.version}-{build.rocm_build}\n".encode())
    )
    priority = version_code(release.version)
    # Like AMD's rocm-core: /opt/rocm -> /etc/alternatives/rocm -> /opt/rocm-<version>.
    package.scripts["postinst"] = (
        "#!/bin/sh\nset -e\n"
        'if [ "$1" = configure ]; then\n'
        f"    update-alternatives --install /opt/rocm rocm {prefix} {priority}\n"
        "fi\n"
    )
    package.scripts["prerm"] = (
        "#!/bin/sh\nset -e\n"
        'if [ "$1" = remove ] || [ "$1" = deconfigure ]; then\n'
        f"    update-alternatives --remove rocm {prefix}\n"
        "fi\n"
    )


def _add_tool(package: DebPackage, tool: str, prefix: str, recordings: Recordings) -> None:
    data_dir = f"{prefix}/share/r9700ctl-lab/recorded"
    replayed = recordings.for_tool(tool)
    for name in sorted(set(replayed.values())):
        package.files.append(DebFile(f"{data_dir}/{name}", recordings.outputs[name]))
    package.files.append(
        DebFile(f"{prefix}/bin/{tool}", tool_script(tool, data_dir, replayed).encode(), 0o755)
    )
    if replayed:
        sources = "\n".join(f"{name}: {recordings.sources[name]}" for name in sorted(set(replayed.values())))
        package.files.append(DebFile(f"{data_dir}/SOURCES-{tool}", (sources + "\n").encode()))
        package.description += (
            f"\n\n{tool} replays outputs recorded on a real node (scenario {recordings.scenario}):\n"
            + "\n".join(f"{' '.join(args) or '(no arguments)'} -> {name}" for args, name in replayed.items())
        )
    else:
        package.description += f"\n\nNo recorded output of {tool} was available when the lab was built."


def argument_key(args: tuple[str, ...]) -> str:
    """Arguments in C-locale order, space-terminated: what the script's `sort | tr` computes."""
    return "".join(f"{arg} " for arg in sorted(args)) or " "


# This node's own outputs (r9700ctl/lab/machine.py writes them when the node is made, node.MACHINE_DIR):
# they win over the recordings in the package, so every tool tells the node's one story.
NODE_MACHINE_DIR = "/var/lib/r9700ctl-lab/machine"


def tool_script(
    tool: str, data_dir: str, replayed: dict[tuple[str, ...], str], machine_dir: str = NODE_MACHINE_DIR
) -> str:
    """A POSIX sh stand-in: for known arguments (in any order) print the node's own output if it
    has one, else the recording in the package; otherwise fail with one line."""
    known = recordings_module.TOOL_OUTPUTS.get(tool, {})
    cases = "".join(
        f"    {shlex.quote(argument_key(args))}) file={shlex.quote(name)} ;;\n"
        for args, name in {**known, **replayed}.items()
    )
    return (
        "#!/bin/sh\n"
        f"# r9700ctl lab stand-in for AMD's {tool}: replays outputs recorded on real R9700 nodes.\n"
        "key=$(printf '%s\\n' \"$@\" | LC_ALL=C sort | tr '\\n' ' ')\n"
        "file=\n"
        'case "$key" in\n'
        f"{cases}"
        "esac\n"
        f"for dir in {shlex.quote(machine_dir)} {shlex.quote(data_dir)}; do\n"
        '    if [ -n "$file" ] && [ -r "$dir/$file" ]; then exec cat "$dir/$file"; fi\n'
        "done\n"
        f'echo "stand-in {tool}: no recorded output for ${{*:-(no arguments)}}" >&2\n'
        "exit 1\n"
    )


def graphics_packages(release: RocmRelease, flavour: str) -> list[DebPackage]:
    """The graphics repository's stand-ins (graphics/<version>/ubuntu, ROCm 7.x).

    Version shape of AMD's mesa-amdgpu-va-drivers_25.0.0.60401-2164967.24.04 (repo.radeon.com's
    amdgpu/6.4.1 pool, where it lived before 7.0); the 7.x numbers here follow that shape.
    """
    build = build_of(release)
    return [
        DebPackage(
            name=GRAPHICS_PACKAGE,
            version=f"25.0.0.{version_code(release.version)}-{build.dkms_build}.{flavour}",
            summary=f"Mesa VA-API video acceleration drivers - {STANDIN}",
            description=f"Lab stand-in for AMD's {GRAPHICS_PACKAGE} (graphics/{release.graphics}/ubuntu).",
            files=[
                DebFile(
                    f"/usr/share/doc/{GRAPHICS_PACKAGE}/README.lab",
                    _readme(GRAPHICS_PACKAGE, release).encode(),
                )
            ],
        )
    ]


def amdgpu_packages(release: RocmRelease, flavour: str) -> list[DebPackage]:
    """The driver repository's stand-ins (amdgpu/<driver>/ubuntu)."""
    module = dkms_module_version(release, flavour)
    firmware_version = firmware_package_version(release, flavour)
    # A dkms.conf that DKMS accepts (`dkms add` registers it, `dkms autoinstall` tries it for a new
    # kernel, as AMD's does), whose build runs the kernel headers' own Makefile: the lab's headers
    # build nothing, so every build fails with DKMS's own "Bad return status for module build".
    dkms_conf = (
        "# r9700ctl lab stand-in: no driver sources; nothing is built or loaded.\n"
        'PACKAGE_NAME="amdgpu"\n'
        f'PACKAGE_VERSION="{module}"\n'
        'BUILT_MODULE_NAME[0]="amdgpu"\n'
        'DEST_MODULE_LOCATION[0]="/updates/dkms"\n'
        'MAKE[0]="make -C ${kernel_source_dir} M=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build"\n'
        'CLEAN="true"\n'
        'AUTOINSTALL="yes"\n'
    )
    firmware = DebPackage(
        name="amdgpu-dkms-firmware",
        version=firmware_version,
        architecture="all",
        summary=f"firmware for the amdgpu DKMS driver - {STANDIN}",
        description=f"Lab stand-in for AMD's amdgpu-dkms-firmware (driver {driver_directory(release)}).",
        files=[
            DebFile(
                "/usr/share/doc/amdgpu-dkms-firmware/README.lab",
                _readme("amdgpu-dkms-firmware", release).encode(),
            )
        ],
    )
    dkms = DebPackage(
        name="amdgpu-dkms",
        version=dkms_package_version(release, flavour),
        architecture="all",
        summary=f"amdgpu driver in DKMS format - {STANDIN}",
        description=(
            f"Lab stand-in for AMD's amdgpu-dkms {driver_directory(release)} (ROCm {release.version}).\n"
            f"Installs /usr/src/amdgpu-{module}/dkms.conf and a README, no driver sources: it runs no dkms,\n"
            "and a build DKMS starts for a kernel fails in make (the lab's kernel headers build nothing)."
        ),
        depends=[f"amdgpu-dkms-firmware (= {firmware_version})"],
        files=[
            DebFile(f"/usr/src/amdgpu-{module}/dkms.conf", dkms_conf.encode()),
            # DKMS refuses a source tree with nothing beside dkms.conf before it builds (dkms.in
            # 3.0.10: "does not appear to have module source located within it"); this file
            # lets the build start and fail where a real one fails, in make.
            DebFile(f"/usr/src/amdgpu-{module}/README.lab", _readme("amdgpu-dkms", release).encode()),
        ],
    )
    return [firmware, dkms, amdgpu_install_package(release)]


def amdgpu_install_package(release: RocmRelease) -> DebPackage:
    return DebPackage(
        name="amdgpu-install",
        version=amdgpu_install_version(release),
        architecture="all",
        summary=f"AMDGPU driver repository and installer - {STANDIN}",
        description=(
            f"Lab stand-in for AMD's amdgpu-install {release.version}. Its amdgpu-install script installs\n"
            "the stand-in packages from repositories already configured; it writes no sources of its own."
        ),
        files=[
            DebFile("/usr/bin/amdgpu-install", _amdgpu_install_script(release).encode(), 0o755),
            DebFile("/usr/bin/amdgpu-uninstall", _AMDGPU_UNINSTALL.encode(), 0o755),
        ],
    )


def _amdgpu_install_script(release: RocmRelease) -> str:
    usecases = "".join(f'        {name}) pkgs="$pkgs {pkg}" ;;\n' for name, pkg in USECASES.items())
    return (
        "#!/bin/sh\n"
        f"# r9700ctl lab stand-in for AMD's amdgpu-install {release.version}.\n"
        "set -e\n"
        "usecases=rocm dkms=yes yes=\n"
        'for arg in "$@"; do\n'
        '    case "$arg" in\n'
        "        --usecase=*) usecases=${arg#--usecase=} ;;\n"
        "        --no-dkms) dkms=no ;;\n"
        "        -y|--accept-eula) yes=-y ;;\n"
        f'        -h|--help) echo "amdgpu-install (lab stand-in, ROCm {release.version}): '
        '[--usecase=rocm,hip,...] [--no-dkms] [-y]"; exit 0 ;;\n'
        '        *) echo "stand-in amdgpu-install: unsupported option $arg" >&2; exit 1 ;;\n'
        "    esac\n"
        "done\n"
        'pkgs=""\n'
        '[ "$dkms" = yes ] && pkgs=amdgpu-dkms\n'
        'for uc in $(echo "$usecases" | tr , " "); do\n'
        '    case "$uc" in\n'
        f"{usecases}"
        '        *) echo "stand-in amdgpu-install: use case $uc is not available in the lab" >&2; exit 1 ;;\n'
        "    esac\n"
        "done\n"
        'echo "amdgpu-install (lab stand-in): apt-get install $yes$pkgs"\n'
        "exec apt-get install $yes $pkgs\n"
    )


_AMDGPU_UNINSTALL = """\
#!/bin/sh
# r9700ctl lab stand-in for AMD's amdgpu-uninstall.
exec apt-get purge "$@" rocm-core amdgpu-dkms amdgpu-dkms-firmware
"""


def kernel_packages(kernel_release: str) -> list[DebPackage]:
    """linux-headers-<uname -r> and linux-modules-extra-<uname -r> for the host kernel the nodes run.

    Debian has no headers for this machine's kernel; the lab-kernel source offers these so a
    node looks like a server whose running kernel has headers. Empty when the name is unusable.
    """
    headers, extra = f"linux-headers-{kernel_release}", f"linux-modules-extra-{kernel_release}"
    if not PACKAGE_NAME.match(headers):
        return []
    numeric = re.match(r"\d+(\.\d+)*", kernel_release)
    version = f"{numeric.group(0) if numeric else '0'}-1"
    note = f"Lab stand-in: the lab's nodes run the host's kernel {kernel_release}; this package is empty."
    return [
        DebPackage(
            name=headers,
            version=version,
            summary=f"headers for Linux {kernel_release} - {STANDIN}",
            description=note,
            section="kernel",
            files=[
                DebFile(
                    f"/usr/src/{headers}/Makefile",
                    b"# r9700ctl lab stand-in: no kernel headers here; nothing can be built against them.\n",
                )
            ],
            symlinks=[DebSymlink(f"/lib/modules/{kernel_release}/build", f"/usr/src/{headers}")],
        ),
        DebPackage(
            name=extra,
            version=version,
            summary=f"extra modules for Linux {kernel_release} - {STANDIN}",
            description=note,
            section="kernel",
            files=[DebFile(f"/usr/share/doc/{extra}/README.lab", (note + "\n").encode())],
        ),
    ]


# A stand-in kernel line for `r9700ctl kernel-upgrade` tests. As on Ubuntu and Debian, the meta
# package linux-image-<flavour> depends on the newest kernel image and linux-headers-<flavour> on
# its headers (https://wiki.ubuntu.com/Kernel/Dev/Meta-Pkgs). Version 1 of the metas depends on
# nothing (the line before its update, which a test installs); version 2 brings NEXT_KERNEL,
# whose headers build nothing, so amdgpu's DKMS build for it fails as on a node whose new kernel
# amdgpu-dkms cannot build for (ROCm/amdgpu#192: 6.4.1's amdgpu-dkms on the 6.14 HWE kernel).
# The nodes never boot it (they run the lab host's kernel).
NEXT_KERNEL = "6.99.1-1-lab"
NEXT_KERNEL_FLAVOUR = "lab"

# The headers' postinst runs the hooks in /etc/kernel/header_postinst.d as Ubuntu's linux-headers
# packages do: "Examining /etc/kernel/header_postinst.d." then "run-parts: executing
# /etc/kernel/header_postinst.d/dkms <version> /boot/vmlinuz-<version>", stopping at a hook that
# fails, whose exit status becomes the package's: "run-parts: /etc/kernel/header_postinst.d/dkms
# exited with return code 11 / dpkg: error processing package linux-headers-6.8.0-44-generic
# (--configure): installed linux-headers-6.8.0-44-generic package post-installation script
# subprocess returned error exit status 11" (apt log in ROCm/legacy-rocm-build#3701). The hook is
# the node's real one, from Debian's dkms: `dkms autoinstall` for the new kernel, exit 11 when a
# module fails to build (dkms 3.0.10, dell/dkms dkms.in autoinstall: "die 11 ... One or more
# modules failed to install during autoinstall"). So dpkg leaves the headers half-configured and
# the metas that need them unconfigured, and apt exits non-zero, as on that Ubuntu node. The
# image's postinst runs no hooks (there is no kernel for an initramfs or GRUB): it ends
# configured, as linux-image-6.8.0-44-generic did there.
_HEADERS_POSTINST = """#!/bin/sh
# r9700ctl lab stand-in: runs /etc/kernel/header_postinst.d as Ubuntu's linux-headers postinst does.
set -e
if [ "$1" = configure ] && [ -d /etc/kernel/header_postinst.d ]; then
    echo "Examining /etc/kernel/header_postinst.d."
    exec run-parts --verbose --exit-on-error --arg={kernel} --arg=/boot/vmlinuz-{kernel} \\
        /etc/kernel/header_postinst.d
fi
"""


def next_kernel_packages() -> list[DebPackage]:
    image, headers = f"linux-image-{NEXT_KERNEL}", f"linux-headers-{NEXT_KERNEL}"
    note = f"Lab stand-in kernel {NEXT_KERNEL}: no kernel, never booted; its headers build nothing."
    packages = [
        DebPackage(
            name=image,
            version="6.99.1-1",
            summary=f"Linux {NEXT_KERNEL} - {STANDIN}",
            description=note,
            section="kernel",
            files=[
                DebFile(f"/boot/vmlinuz-{NEXT_KERNEL}", b"r9700ctl lab stand-in: not a kernel\n"),
                DebFile(f"/lib/modules/{NEXT_KERNEL}/modules.order", b""),
            ],
        ),
        DebPackage(
            name=headers,
            version="6.99.1-1",
            summary=f"headers for Linux {NEXT_KERNEL} - {STANDIN}",
            description=note,
            section="kernel",
            files=[
                DebFile(
                    f"/usr/src/{headers}/Makefile",
                    b"$(error r9700ctl lab stand-in headers for "
                    + NEXT_KERNEL.encode()
                    + b": nothing builds here)\n",
                ),
                # DKMS's hook skips a kernel whose build directory has no include/ ("headers ...
                # do not seem to be installed"); real headers have one, so these do too.
                DebFile(
                    f"/usr/src/{headers}/include/README.lab",
                    b"r9700ctl lab stand-in: no kernel headers here.\n",
                ),
            ],
            symlinks=[DebSymlink(f"/lib/modules/{NEXT_KERNEL}/build", f"/usr/src/{headers}")],
            scripts={"postinst": _HEADERS_POSTINST.format(kernel=NEXT_KERNEL)},
        ),
    ]
    for version, brings in (("1.0", False), ("2.0", True)):
        for kind, target in (("image", image), ("headers", headers)):
            packages.append(
                DebPackage(
                    name=f"linux-{kind}-{NEXT_KERNEL_FLAVOUR}",
                    version=version,
                    summary=f"the lab kernel line's {kind} meta package - {STANDIN}",
                    description=(
                        f"Lab stand-in meta package (version {version}): "
                        + (
                            f"depends on {target}."
                            if brings
                            else "the line before its update; depends on nothing."
                        )
                    ),
                    section="kernel",
                    depends=[f"{target} (= 6.99.1-1)"] if brings else [],
                    files=[
                        DebFile(
                            f"/usr/share/doc/linux-{kind}-{NEXT_KERNEL_FLAVOUR}/README.lab",
                            f"{STANDIN}\n".encode(),
                        )
                    ],
                )
            )
    return packages
