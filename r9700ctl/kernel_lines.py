"""The running kernel against the kernel lines AMD lists per ROCm release and system.

AMD's compatibility matrix and system requirements list, for each release and OS, the kernel
lines it supports (Ubuntu 24.04: 6.8 GA and 6.11 HWE for 6.4.x, 6.8 GA and 6.14 HWE for 7.x;
the manifest's `kernels`, with the source beside each), and some releases' amdgpu-dkms is known
not to build on a line at all (the manifest's `dkms_build_fails`: 6.4.1 on 6.14, ROCm/amdgpu#192).
Two answers for preflight (and so for doctor): which releases `auto` may pick for this kernel,
and the verdict on the release chosen. Pure: facts in, a verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass

from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN, CheckResult, finding
from r9700ctl.manifest import Manifest, kernel_line


@dataclass(frozen=True)
class Node:
    """What the judge needs to know of a node."""

    kernel: str  # uname -r
    os_key: str  # ubuntu-24.04
    driver_source: str  # dkms builds amdgpu for the kernel; inbox and present build nothing
    gfx_targets: frozenset[str] = frozenset()

    @property
    def line(self) -> str:
        return kernel_line(self.kernel)


def _builds_on(manifest: Manifest, version: str, node: Node) -> bool:
    release = manifest.release(version)
    return node.driver_source != "dkms" or release is None or release.dkms_build_fails(node.line) is None


def _lists(manifest: Manifest, version: str, node: Node) -> bool:
    release = manifest.release(version)
    return release is not None and node.line in release.kernel_lines(node.os_key).values()


def auto_candidates(working: list[str], node: Node, manifest: Manifest) -> tuple[list[str], str]:
    """The releases `auto` may choose from (oldest first) for this kernel, and a note saying what
    the kernel decided ("" when it decided nothing).

    A release whose amdgpu-dkms is known not to build on the kernel is out; of the rest, those
    that list the kernel's line on the node's system are preferred when there are any.
    """
    if not node.line:
        return working, ""
    builds = [v for v in working if _builds_on(manifest, v, node)] or working
    listing = [v for v in builds if _lists(manifest, v, node)]
    if not listing or listing == working:
        return builds, ""
    others = [v for v in working if v not in listing]
    return listing, (
        f" that AMD lists with kernel {node.line} on {node.os_key}; {', '.join(others)} "
        f"{'does' if len(others) == 1 else 'do'} not"
    )


def judge(node: Node, rocm_version: str, allow_unsupported: bool, manifest: Manifest) -> CheckResult:
    """kernel.line: PASS where AMD lists the kernel's line with the release on the node's system,
    WARN where it does not, FAIL where the release's amdgpu-dkms is known not to build on it."""
    release = manifest.release(rocm_version)
    lines = release.kernel_lines(node.os_key) if release else {}
    if not node.line or not lines:
        why = "the running kernel is unknown" if not node.line else f"no kernel lines for {node.os_key}"
        return finding(
            "kernel.line",
            SKIP,
            f"not judged: {why} (ROCm {rocm_version or 'unresolved'})",
            code="KERNEL_LINE_UNJUDGED",
        )
    named = ", ".join(f"{line} {kind}" for kind, line in lines.items())
    boot = " or ".join(f"{line} ({kind})" for kind, line in lines.items())
    elsewhere = [
        v
        for v in manifest.releases_supporting(set(node.gfx_targets), node.os_key)
        if v != rocm_version and _lists(manifest, v, node) and _builds_on(manifest, v, node)
    ]
    fix = f"boot a {boot} kernel"
    if elsewhere:
        fix += f", or use a release that lists {node.line} on {node.os_key}: {', '.join(elsewhere)}"
    report = release.dkms_build_fails(node.line) if release else None
    if report and node.driver_source == "dkms":
        return finding(
            "kernel.line",
            WARN if allow_unsupported else FAIL,
            f"ROCm {rocm_version}'s amdgpu-dkms does not build on kernel {node.kernel} (line {node.line}): "
            f"{report}",
            fix,
            code="KERNEL_DKMS_BUILD_FAILS",
        )
    for kind, line in lines.items():
        if line == node.line:
            return finding(
                "kernel.line",
                PASS,
                f"kernel {node.kernel}: line {line} ({kind}), which AMD lists for ROCm {rocm_version} "
                f"on {node.os_key}",
            )
    return finding(
        "kernel.line",
        WARN,
        f"kernel {node.kernel} (line {node.line}) is not a kernel line AMD lists for ROCm {rocm_version} "
        f"on {node.os_key} ({named})",
        fix,
        code="KERNEL_LINE_UNLISTED",
    )
