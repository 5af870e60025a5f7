"""Every template and task file of the provisioning roles, rendered for a matrix of nodes.

Ubuntu 24.04 and 22.04 (AMD's systems for the R9700); 1, 4 and 8 R9700s; with and without a
mirror; with and without an HSA override. Files are rendered by Ansible's own template lookup
and conditions judged by Ansible's own conditional (role_render_harness.py says what is the
harness's); the values come from the real preflight judge and the real manifest; registered
results come from recorded tool outputs (tests/render/fixtures/). Shell fragments the roles
write are executed by a real /bin/sh.

Nothing here runs a module, so nothing here proves a second run changes nothing: real
ansible-playbook runs against the lab's nodes (Debian 12) do, in
tests/lab/test_provision.py::test_a_second_provision_changes_nothing_on_any_host.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
from itertools import product
from pathlib import Path
from typing import Any

import pytest
import yaml
from role_render_harness import AssertFailed, RoleRender, fixture_lines, host_context, node_script

from r9700ctl.agent.result import one_line

MIRROR = "http://10.213.0.1:8080"
TEST_KEY_FPR = "DB4CCF23AC5D3E2846037EB801190F9BDF85CB5A"  # the key in fixtures/gpg-show-keys-colons.txt
AMDGPU_DKMS = "1:6.16.6.30200100-2255209.22.04"
ROCM_711 = "7.1.1.70101-38~22.04"
MATRIX = list(product(["ubuntu-24.04", "ubuntu-22.04"], [1, 4, 8], [None, MIRROR], ["", "12.0.1"]))
MATRIX_IDS = [
    f"{o}-{g}gpu-{'mirror' if m else 'amd'}-{'override' if h else 'plain'}" for o, g, m, h in MATRIX
]


def repos_registered(changed: bool = True, policy: str = "") -> dict[str, Any]:
    return {
        "__r9700_repos_legacy_keyring_stat": {"stat": {"exists": False}},
        "__r9700_repos_key_download": {"changed": changed},
        "__r9700_repos_key_colons": {
            "stdout_lines": fixture_lines("gpg-show-keys-colons.txt"),
            "failed": False,
        },
        "__r9700_repos_dearmored": {"stat": {"exists": not changed}},
        "__r9700_repos_keyring_copy": {"changed": changed},
        "__r9700_repos_rocm_source": {"changed": changed},
        "__r9700_repos_amdgpu_source": {"changed": changed},
        "__r9700_repos_graphics_source": {"changed": changed},
        "__r9700_repos_graphics_removed": {"changed": False},
        "__r9700_repos_pin": {"changed": changed},
        "__r9700_repos_policy": {"stdout": policy},
    }


def driver_registered(installed: bool = True) -> dict[str, Any]:
    return {
        "__r9700_driver_madison": {"stdout_lines": fixture_lines("apt-cache-madison-amdgpu.txt")},
        "__r9700_driver_install": {"changed": installed},
    }


def rocm_registered(old_state: dict[str, Any] | None = None) -> dict[str, Any]:
    registered: dict[str, Any] = {
        "__r9700_rocm_madison": {"stdout_lines": fixture_lines("apt-cache-madison-rocm.txt")},
        "__r9700_rocm_dpkg": {"stdout_lines": fixture_lines("dpkg-query-installed.txt")},
        "__r9700_rocm_state_stat": {"stat": {"exists": old_state is not None}},
    }
    if old_state is not None:
        registered["__r9700_rocm_state_old"] = {
            "content": base64.b64encode(json.dumps(old_state).encode()).decode()
        }
    return registered


def access_registered(users: dict[str, Any], adduser_conf: str) -> dict[str, Any]:
    return {
        "__r9700_access_lookup": {"ansible_facts": {"getent_passwd": users}},
        "__r9700_access_adduser": {"content": base64.b64encode(adduser_conf.encode()).decode()},
    }


def context(os_key="ubuntu-24.04", gpus=4, mirror=None, override="", **host_vars) -> dict[str, Any]:
    host_vars.setdefault("r9700_rocm_version", "7.1.1")
    host_vars.setdefault("r9700_repo_key_fingerprint", TEST_KEY_FPR)
    if mirror:
        host_vars["r9700_repo_base_url"] = mirror
    if override:
        host_vars["r9700_hsa_override_gfx_version"] = override
    igpu = host_vars.pop("igpu", False)
    manager = host_vars.pop("service_manager", "systemd")
    return host_context(os_key, gpus, igpu=igpu, host_vars=host_vars, service_manager=manager)


def sh(script: str) -> str:
    """Run a shell fragment with a real /bin/sh."""
    out = subprocess.run(["/bin/sh", "-ec", script], capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


# -- the whole matrix ----------------------------------------------------------------------------


@pytest.mark.parametrize(("os_key", "gpus", "mirror", "override"), MATRIX, ids=MATRIX_IDS)
def test_every_role_renders_for_the_node_matrix(os_key, gpus, mirror, override, tmp_path):
    """No template or task expression may fail to render for a supported node shape."""
    ctx = context(os_key, gpus, mirror, override)
    resolved = ctx["r9700_resolved"]
    suite = {"ubuntu-24.04": "noble", "ubuntu-22.04": "jammy"}[os_key]
    assert resolved["suite"] == suite and resolved["discrete_gpus"] == gpus

    repos = RoleRender("r9700_repos", ctx, repos_registered()).run()
    base = mirror or "https://repo.radeon.com"
    rocm_source = repos.task("Configure | Add the ROCm repository").args
    assert rocm_source["uris"] == [f"{base}/rocm/apt/7.1.1"] and rocm_source["suites"] == [suite]
    assert repos.task("Configure | Add the amdgpu driver repository").args["uris"] == [
        f"{base}/amdgpu/30.20.1/ubuntu"
    ]
    pin = repos.task("Configure | Pin").files["/etc/apt/preferences.d/rocm-pin-600"]
    assert f'Pin: origin "{"10.213.0.1" if mirror else "repo.radeon.com"}"' in pin

    driver = RoleRender("r9700_driver", ctx, driver_registered()).run()
    headers = driver.task("Install | Ensure the running kernel's headers").args["name"]
    assert headers[0] == resolved["headers_package"]
    assert (resolved["modules_extra_package"] in headers) is os_key.startswith("ubuntu")
    assert driver.task("Install | Ensure AMD's amdgpu-dkms").args["name"] == [f"amdgpu-dkms={AMDGPU_DKMS}"]

    rocm = RoleRender("r9700_rocm", ctx, rocm_registered()).run()
    state = lifecycle_state({**ctx, "r9700_versions": rocm.vars["r9700_versions"]})
    assert state["rocm_version"] == "7.1.1" and state["suite"] == suite
    assert state["hsa_override_gfx_version"] == override

    env = RoleRender("r9700_env", ctx).run()
    profile = env.task("Configure | Write the login-shell environment").files["/etc/profile.d/r9700.sh"]
    (tmp_path / "r9700.sh").write_text(profile)
    values = sh(f'. {tmp_path / "r9700.sh"}; echo "$HSA_OVERRIDE_GFX_VERSION|$NCCL_P2P_DISABLE"').strip()
    assert values == f"{override}|1"

    kernel = RoleRender("r9700_kernel", ctx).run()
    assert (
        "iommu=pt"
        in kernel.task("Configure | Write the kernel parameters").files["/etc/default/grub.d/99-r9700.cfg"]
    )

    users = {"r9700": ["x", "1000", "1000", "", "/home/r9700", "/bin/bash"]}
    access = RoleRender("r9700_access", ctx, access_registered(users, "")).run()
    assert access.task("Configure | Put the users in the GPU groups").items == ["r9700"]

    power = RoleRender("r9700_power", ctx).run()  # no cap, no PSU map: nothing written
    assert power.task("Plan | Read each card's power-cap range").skipped
    assert not power.task("Configure | Remove the policy file").skipped


# -- r9700_repos ---------------------------------------------------------------------------------


def test_the_key_url_defaults_to_the_repositorys_own_and_a_mirror_can_name_another():
    """Lab and air-gapped mirrors serve the key themselves; AMD's sits at rocm/rocm.gpg.key."""
    repos = RoleRender("r9700_repos", context(mirror=MIRROR), repos_registered()).run()
    assert (
        repos.task("Configure | Fetch the repositories' signing key").args["url"]
        == f"{MIRROR}/rocm/rocm.gpg.key"
    )
    ctx = context(r9700_repo_key_url="http://keys.example/lab.asc")
    key = (
        RoleRender("r9700_repos", ctx, repos_registered())
        .run()
        .task("Configure | Fetch the repositories' signing key")
    )
    assert key.args["url"] == "http://keys.example/lab.asc"


def test_a_key_with_another_fingerprint_is_refused_before_any_source_is_written():
    """R16: the key's fingerprint is asserted; by default against the manifest's AMD key."""
    ctx = context(r9700_repo_key_fingerprint="")
    with pytest.raises(
        AssertFailed,
        match=f"has fingerprint\\(s\\) {TEST_KEY_FPR}, expected CA8BB4727A47B4D09B4EE8969386B48A1A693C5C",
    ):
        RoleRender("r9700_repos", ctx, repos_registered()).run()


def test_a_fingerprint_with_spaces_is_accepted_as_gpg_prints_it():
    spaced = " ".join(TEST_KEY_FPR[i : i + 4] for i in range(0, 40, 4)).lower()
    RoleRender("r9700_repos", context(r9700_repo_key_fingerprint=spaced), repos_registered()).run()


# AMD's ROCm 7.x Ubuntu instructions, verbatim but for the substitutions (ROCm/rocm-install-on-linux,
# docs/install/install-methods/package-manager/package-manager-ubuntu.rst): /etc/apt/sources.list.d/rocm.list
AMD_7X_ROCM_LIST = """\
deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/rocm/apt/{v} {codename} main
deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/graphics/{v}/ubuntu {codename} main
"""  # noqa: E501 (AMD's lines as documented)


def one_line_source(line: str) -> dict[str, Any]:
    """A one-line apt source as deb822 fields (sources.list(5))."""
    match = re.fullmatch(r"(deb) \[(.*)\] (\S+) (\S+) (.+)", line)
    assert match, line
    options = dict(option.split("=", 1) for option in match.group(2).split())
    return {
        "types": [match.group(1)],
        "architectures": options["arch"].split(","),
        "signed_by": options["signed-by"],
        "uris": [match.group(3)],
        "suites": [match.group(4)],
        "components": match.group(5).split(),
    }


def deb822_args(task) -> dict[str, Any]:
    return {
        key: task.args[key] for key in ("types", "architectures", "signed_by", "uris", "suites", "components")
    }


@pytest.mark.parametrize("version", ["7.0.2", "7.1.1", "7.2.3"])
@pytest.mark.parametrize("os_key", ["ubuntu-24.04", "ubuntu-22.04"])
def test_rocm_7x_gets_the_rocm_and_graphics_sources_exactly_as_amd_documents_them(version, os_key):
    """Issue 9 item 1: without graphics/<version>/ubuntu, `apt install rocm` fails on 7.x."""
    repos = RoleRender("r9700_repos", context(os_key, r9700_rocm_version=version), repos_registered()).run()
    codename = {"ubuntu-24.04": "noble", "ubuntu-22.04": "jammy"}[os_key]
    rocm_line, graphics_line = AMD_7X_ROCM_LIST.format(v=version, codename=codename).splitlines()
    assert deb822_args(repos.task("Configure | Add the ROCm repository")) == one_line_source(rocm_line)
    graphics = repos.task("Configure | Add the graphics repository")
    assert graphics.args["state"] == "present" and graphics.args["name"] == "rocm-graphics"
    assert repos.task("Configure | Remove a graphics repository left by").skipped
    assert deb822_args(graphics) == one_line_source(graphics_line)


def test_a_6x_release_has_no_graphics_source_and_a_stale_one_is_removed():
    """ROCm 6.4.x kept mesa-amdgpu-* in amdgpu/<ver>/ubuntu: no graphics repository to add."""
    repos = RoleRender("r9700_repos", context(r9700_rocm_version="6.4.1"), repos_registered()).run()
    assert repos.task("Configure | Add the graphics repository").skipped
    removed = repos.task("Configure | Remove a graphics repository left by a 7.x release")
    assert removed.args == {"path": "/etc/apt/sources.list.d/rocm-graphics.sources", "state": "absent"}


def test_a_mirror_serves_the_graphics_repository_under_its_own_base_url():
    repos = RoleRender("r9700_repos", context(mirror=MIRROR), repos_registered()).run()
    assert repos.task("Configure | Add the graphics repository").args["uris"] == [
        f"{MIRROR}/graphics/7.1.1/ubuntu"
    ]


def test_legacy_sources_are_removed_before_apt_is_first_asked_for_anything():
    """A pre-seeded rocm.list with another Signed-By breaks `apt update`: it must go first."""
    repos = RoleRender("r9700_repos", context(), repos_registered()).run()
    names = [t.name for t in repos.tasks]
    legacy = names.index("Configure | Remove legacy one-line AMD sources before apt reads them")
    assert legacy < names.index("Install | Ensure apt can read deb822 sources and check keys")
    assert repos.task("Configure | Remove legacy one-line AMD sources").items == [
        "/etc/apt/sources.list.d/rocm.list",
        "/etc/apt/sources.list.d/amdgpu.list",
        "/etc/apt/sources.list.d/amdgpu-proprietary.list",
    ]


def test_apt_lists_are_refreshed_after_a_change_and_not_when_apt_already_reads_the_sources():
    """No cache_valid_time after adding a repository; no refresh (and no key conversion) when no source
    changed and `apt-cache policy` (recorded) already lists them. The conditions only: that a second
    provision reports changed=0 is tests/lab/test_provision.py's, with real runs."""
    first = RoleRender("r9700_repos", context(mirror=MIRROR), repos_registered(changed=True)).run()
    assert not first.task("Configure | Refresh apt's lists").skipped
    assert "cache_valid_time" not in first.task("Configure | Refresh apt's lists").args
    policy = "\n".join(fixture_lines("apt-cache-policy-sources.txt")).replace(
        "127.0.0.1:18766", "10.213.0.1:8080"
    )
    second = RoleRender(
        "r9700_repos", context(mirror=MIRROR), repos_registered(changed=False, policy=policy)
    ).run()
    assert second.task("Configure | Refresh apt's lists").skipped
    assert second.task("Configure | Convert the checked key").skipped


def test_a_proxy_reaches_apt_and_the_key_download():
    """R19: one proxy setting for apt (its own conf file) and for get_url (environment)."""
    ctx = context(r9700_proxy="http://proxy.example:3128", r9700_no_proxy=["10.213.0.1"])
    repos = RoleRender("r9700_repos", ctx, repos_registered()).run()
    conf = repos.task("Configure | Route apt through the proxy").files["/etc/apt/apt.conf.d/90r9700-proxy"]
    assert 'Acquire::http::Proxy "http://proxy.example:3128";' in conf
    assert 'Acquire::https::Proxy::10.213.0.1 "DIRECT";' in conf
    assert repos.task("Configure | Remove the proxy file").skipped
    assert repos.vars["__r9700_repos_proxy_env"] == {
        "http_proxy": "http://proxy.example:3128",
        "https_proxy": "http://proxy.example:3128",
        "no_proxy": "10.213.0.1",
    }
    plain = RoleRender("r9700_repos", context(), repos_registered()).run()
    assert plain.task("Configure | Route apt through the proxy").skipped
    assert not plain.task("Configure | Remove the proxy file").skipped


# -- r9700_driver --------------------------------------------------------------------------------


def test_dkms_builds_with_one_job_per_cpu_unless_told():
    """R45: parallel DKMS builds; the amdgpu build takes minutes on one core."""
    driver = RoleRender("r9700_driver", context(), driver_registered()).run()
    assert (
        "parallel_jobs=16"
        in driver.task("Configure | Build DKMS modules").files["/etc/dkms/framework.conf.d/r9700.conf"]
    )
    told = RoleRender("r9700_driver", context(r9700_driver_dkms_jobs=4), driver_registered()).run()
    assert (
        "parallel_jobs=4"
        in told.task("Configure | Build DKMS modules").files["/etc/dkms/framework.conf.d/r9700.conf"]
    )


def test_the_inbox_driver_is_blacklisted_only_when_policy_says_replace():
    """Default leaves /etc/modprobe.d alone; replace blacklists autoload and loads amdgpu by name."""
    default = RoleRender("r9700_driver", context(), driver_registered()).run()
    assert default.task("Configure | Blacklist automatic loading").skipped
    assert not default.task("Configure | Remove the inbox-driver replacement").skipped
    replace = RoleRender("r9700_driver", context(r9700_driver_replace_inbox=True), driver_registered()).run()
    blacklist = replace.task("Configure | Blacklist automatic loading").files
    assert blacklist["/etc/modprobe.d/r9700-amdgpu-blacklist.conf"].splitlines()[-1] == "blacklist amdgpu"
    load = replace.task("Configure | Load amdgpu by name").files["/etc/modules-load.d/r9700-amdgpu.conf"]
    assert load.splitlines()[-1] == "amdgpu"
    assert "Rebuild the initramfs" in replace.notified


def test_inbox_and_present_sources_install_no_driver():
    for source in ("inbox", "present"):
        ctx = context(r9700_driver_source="inbox")  # `present` needs a loaded driver to pass preflight
        ctx["r9700_resolved"]["driver_source"] = source
        driver = RoleRender("r9700_driver", ctx, driver_registered()).run()
        assert driver.task("Install | Ensure AMD's amdgpu-dkms").skipped
        assert driver.task("Install | Ensure the running kernel's headers").skipped


def test_a_changed_driver_records_a_reboot_reason_only_where_runtime_steps_run():
    """The lab (no systemd) writes files but never plans a reboot; a real server does."""
    real = RoleRender("r9700_driver", context(), driver_registered(installed=True)).run()
    assert (
        real.task("Configure | Record why this node needs a reboot").items[0]["reason"]
        == "amdgpu-dkms installed or changed"
    )
    lab = RoleRender("r9700_driver", context(service_manager="sshd"), driver_registered(installed=True)).run()
    assert lab.task("Configure | Record why this node needs a reboot").skipped
    unchanged = RoleRender("r9700_driver", context(), driver_registered(installed=False)).run()
    assert unchanged.task("Configure | Record why this node needs a reboot").skipped


@pytest.mark.parametrize(
    "prefix", ["r9700ctl.nodes.", ""], ids=["roles-by-fully-qualified-name", "roles-by-short-name"]
)
def test_the_driver_reboots_itself_only_when_r9700_kernel_is_not_in_the_play(prefix: str):
    """One reboot per play: r9700_kernel reboots once for both roles' reasons. The collection's
    playbooks name the roles fully qualified, and so does Ansible's ansible_play_role_names
    (r9700ctl.nodes.r9700_kernel): a check for the short name alone rebooted twice."""
    ctx = context()
    ctx["ansible_play_role_names"] = [f"{prefix}{role}" for role in ("r9700_driver", "r9700_kernel")]
    assert RoleRender("r9700_driver", ctx, driver_registered()).run().task("Reboot | Reboot now").skipped
    ctx["ansible_play_role_names"] = [f"{prefix}r9700_preflight", f"{prefix}r9700_driver"]
    assert not RoleRender("r9700_driver", ctx, driver_registered()).run().task("Reboot | Reboot now").skipped


def reboot_render(reasons: str | None, **ctx_over: Any) -> RoleRender:
    ctx = context()
    ctx.update(ctx_over)
    registered: dict[str, Any] = {"__r9700_driver_marker": {"stat": {"exists": reasons is not None}}}
    if reasons is not None:
        registered["__r9700_driver_marker_content"] = {"content": base64.b64encode(reasons.encode()).decode()}
    registered["__r9700_driver_rebooted"] = {"changed": True, "rebooted": True}
    return RoleRender("r9700_driver", ctx, registered).run("tasks/reboot.yml")


def test_a_recorded_reason_reboots_a_remote_node_and_forgets_the_reasons():
    run = reboot_render("amdgpu-dkms installed or changed\nkernel command line changed\n")
    reboot = run.task("Reboot | Reboot the node")
    assert not reboot.skipped
    assert (
        reboot.args["msg"]
        == "r9700ctl: rebooting for amdgpu-dkms installed or changed; kernel command line changed"
    )
    assert not run.task("Reboot | Forget the reasons").skipped
    assert not run.task("Reboot | Gather facts again").skipped
    assert run.task('Reboot | Report "reboot required"').skipped


@pytest.mark.parametrize(
    "ctx_over",
    [
        pytest.param({"ansible_connection": "local"}, id="local-connection"),
        pytest.param({"r9700_reboot": False}, id="reboot-not-allowed"),
    ],
)
def test_a_node_that_may_not_reboot_reports_reboot_required(ctx_over):
    """NVIDIA/ansible-role-nvidia-driver#20: never reboot the machine running Ansible."""
    run = reboot_render("amdgpu-dkms installed or changed\n", **ctx_over)
    assert run.task("Reboot | Reboot the node").skipped
    assert run.vars["r9700_reboot_pending"] is True
    assert run.vars["r9700_reboot_reasons"] == ["amdgpu-dkms installed or changed"]


def test_no_recorded_reason_means_no_reboot():
    """No reason recorded, no reboot: the reboot step's condition (that a second provision reboots
    nothing, R1, is tests/lab/test_provision.py::test_a_second_provision_changes_nothing_on_any_host)."""
    run = reboot_render(None)
    assert run.task("Reboot | Reboot the node").skipped
    assert "r9700_reboot_pending" not in run.vars


# `dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' 'linux-*'` on an Ubuntu 24.04 node that
# follows the HWE line (names as Ubuntu's linux-meta packages them; not a recorded output).
HWE_NODE_LINUX_PACKAGES = [
    "linux-base ii ",
    "linux-firmware ii ",
    "linux-generic un ",
    "linux-generic-hwe-24.04 ii ",
    "linux-headers-6.8.0-31 ii ",
    "linux-headers-6.8.0-31-generic ii ",
    "linux-headers-generic-hwe-24.04 ii ",
    "linux-image-6.8.0-31-generic ii ",
    "linux-image-6.8.0-28-generic rc ",
    "linux-image-extra-virtual un ",
    "linux-image-generic un ",
    "linux-image-generic-hwe-24.04 ii ",
    "linux-image-unsigned-6.8.0-31-generic un ",
    "linux-modules-6.8.0-31-generic ii ",
    "linux-modules-extra-6.8.0-31-generic ii ",
    "linux-tools-common ii ",
]


def test_the_kernel_hold_holds_installed_packages_and_fences_unattended_upgrades():
    """R21: apt-mark hold of the running kernel image and headers; unattended-upgrades off linux-*."""
    registered = driver_registered()
    registered["__r9700_driver_kernel_packages"] = {
        "stdout_lines": ["linux-image-6.8.0-31-generic ii ", "linux-headers-6.8.0-31-generic un "]
    }
    run = RoleRender("r9700_driver", context(r9700_kernel_hold=True), registered).run()
    assert run.task("Configure | Hold the running kernel").items == ["linux-image-6.8.0-31-generic"]
    hold = run.task("Configure | Keep unattended-upgrades off").files[
        "/etc/apt/apt.conf.d/51r9700-kernel-hold"
    ]
    assert '"linux-";' in hold


def test_the_kernel_hold_holds_the_lines_meta_packages_too():
    """Issue 22 item 3: holding only the running image and headers left linux-generic-hwe-24.04
    and its image and headers metas free, and they pull the next kernel in under new package
    names, so a routine apt upgrade still moved the kernel (ROCm/legacy-rocm-build#3883)."""
    registered = driver_registered()
    registered["__r9700_driver_kernel_packages"] = {"stdout_lines": HWE_NODE_LINUX_PACKAGES}
    run = RoleRender("r9700_driver", context(r9700_kernel_hold=True), registered).run()
    assert run.task("Configure | Hold the running kernel").items == [
        "linux-image-6.8.0-31-generic",
        "linux-headers-6.8.0-31-generic",
        "linux-image-generic-hwe-24.04",
        "linux-headers-generic-hwe-24.04",
        "linux-generic-hwe-24.04",
    ]


# -- r9700_rocm ----------------------------------------------------------------------------------


def test_rocm_is_pinned_to_the_exact_versions_of_the_resolved_repository():
    """R20: versions from rocm/apt/7.1.1 only, although rocm-core 6.4.1 is also in apt's lists."""
    rocm = RoleRender(
        "r9700_rocm", context(r9700_rocm_packages=["rocm", "rocm-core"]), rocm_registered()
    ).run()
    assert rocm.task("Install | Ensure the ROCm packages").args["name"] == [
        f"rocm={ROCM_711}",
        f"rocm-core={ROCM_711}",
    ]
    assert rocm.task("Install | Ensure the ROCm packages").args["allow_downgrade"] is True


def test_the_default_set_is_the_rocm_meta_package_and_runtime_only_uses_the_manifests_set():
    default = RoleRender("r9700_rocm", context(), rocm_registered()).run()
    assert default.vars["__r9700_rocm_wanted"] == ["rocm"]
    with pytest.raises(
        AssertFailed, match=re.escape("not offered by .../rocm/apt/7.1.1 (noble): rocm-opencl-runtime")
    ):
        RoleRender("r9700_rocm", context(r9700_rocm_runtime_only=True), rocm_registered()).run()


RELEASE_BROUGHT = ["amdgpu-dkms", "mesa-amdgpu-va-drivers", "rocm", "rocm-core"]


def lifecycle_state(ctx: dict[str, Any]) -> dict[str, Any]:
    """The state r9700_lifecycle's state step hands its node script (the --new JSON)."""
    registered = {
        "__r9700_lifecycle_dpkg": {"stdout_lines": fixture_lines("dpkg-query-installed.txt")},
        # `r9700-lifecycle release-packages`: what apt's lists say the release's repositories brought.
        "__r9700_lifecycle_release": {"stdout": json.dumps({"packages": RELEASE_BROUGHT, "unread": []})},
    }
    # The role loads vars/main.yml with itself, before tasks/main.yml includes the step.
    role_vars = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "roles/r9700_lifecycle/vars/main.yml").read_text()
    )
    render = RoleRender("r9700_lifecycle", {**role_vars, **ctx}, registered).run("tasks/state.yml")
    argv = shlex.split(render.task("State | Write /etc/r9700ctl/state.json").args["cmd"])
    state = json.loads(argv[argv.index("--new") + 1])
    # The repositories whose lists say what the release brought are the ones the state records.
    asked = shlex.split(render.task("State | Read from apt's lists").args["cmd"])
    assert json.loads(asked[asked.index("--repositories") + 1]) == state["repositories"]
    return state


def test_state_json_records_versions_and_the_node_script_keeps_the_previous_one_on_a_change(tmp_path):
    """Issue 13: versions, repositories, image and kernel go to state.json with the time it was
    written. The role's node script (real code, run here) leaves the file alone when handed the
    same state and keeps the old file as state.prev.json, which is what rollback returns to, when
    handed another. Whether a real second provision hands it the same state is the lab's test
    (tests/lab/test_provision.py::test_a_second_provision_changes_nothing_on_any_host)."""
    rocm = RoleRender("r9700_rocm", context(), rocm_registered()).run()
    assert rocm.vars["r9700_versions"]["after"]["rocm-core"] == ROCM_711
    state = lifecycle_state({**context(), "r9700_versions": rocm.vars["r9700_versions"]})
    assert state["installed"] == {"amdgpu-dkms": AMDGPU_DKMS, "rocm": ROCM_711, "rocm-core": ROCM_711}
    assert state["amdgpu_repo_path"] == "amdgpu/30.20.1/ubuntu"
    paths = ["rocm/apt/7.1.1", "amdgpu/30.20.1/ubuntu", "graphics/7.1.1/ubuntu"]
    assert state["repositories"]["paths"] == paths
    assert state["image"].startswith("rocm/pytorch:rocm7.1.1_")
    assert state["kernel"] and "time" not in state
    # What the release's repositories brought, read from apt's lists (issue 22 item 4).
    assert state["release_packages"] == RELEASE_BROUGHT

    new = json.dumps(state)
    assert node_script(tmp_path, "state", "--new", new, "--time", "2026-12-01T10:00:00Z")["changed"]
    first = (tmp_path / "etc/r9700ctl/state.json").read_bytes()
    assert json.loads(first)["time"] == "2026-12-01T10:00:00Z"
    again = node_script(tmp_path, "state", "--new", new, "--time", "2026-12-02T10:00:00Z")
    assert again == {"changed": False, "rotated": False}
    assert (tmp_path / "etc/r9700ctl/state.json").read_bytes() == first
    assert not (tmp_path / "etc/r9700ctl/state.prev.json").exists()

    upgraded = json.dumps({**state, "rocm_version": "7.2.3"})
    assert node_script(tmp_path, "state", "--new", upgraded, "--time", "2026-12-03T10:00:00Z")["rotated"]
    assert (tmp_path / "etc/r9700ctl/state.prev.json").read_bytes() == first
    assert json.loads((tmp_path / "etc/r9700ctl/state.json").read_text())["rocm_version"] == "7.2.3"


def test_the_linker_entry_lists_the_rocm_library_directories():
    rocm = RoleRender("r9700_rocm", context(), rocm_registered()).run()
    conf = rocm.task("Configure | Register ROCm's libraries").files["/etc/ld.so.conf.d/r9700-rocm.conf"]
    assert conf.splitlines()[1:] == ["/opt/rocm/lib", "/opt/rocm/lib64"]


# -- r9700_access --------------------------------------------------------------------------------

ADDUSER = "\n".join(fixture_lines("adduser.conf-debian12"))
R9700_USER = {"r9700": ["x", "1000", "1000", "", "/home/r9700", "/bin/bash"]}


def test_users_join_render_and_video_and_future_users_inherit_them():
    """R26: the SSH user by default; adduser.conf's commented EXTRA_GROUPS becomes the GPU groups."""
    access = RoleRender("r9700_access", context(), access_registered(R9700_USER, ADDUSER)).run()
    user = access.task("Configure | Put the users in the GPU groups")
    assert (
        user.items == ["r9700"] and user.args["groups"] == ["render", "video"] and user.args["append"] is True
    )
    lines = access.task("Configure | Let users made later").items
    assert [i["line"] for i in lines] == ["ADD_EXTRA_GROUPS=1", 'EXTRA_GROUPS="render video"']


def test_extra_groups_already_set_in_adduser_conf_are_kept():
    conf = ADDUSER + '\nEXTRA_GROUPS="users plugdev"\n'
    access = RoleRender("r9700_access", context(), access_registered(R9700_USER, conf)).run()
    assert (
        access.task("Configure | Let users made later").items[1]["line"]
        == 'EXTRA_GROUPS="users plugdev render video"'
    )


def test_udev_rules_give_kfd_and_render_nodes_to_the_group_and_accept_a_numeric_gid():
    """R27: a network group given by gid is not created locally and goes into the rule as a number."""
    access = RoleRender(
        "r9700_access", context(r9700_device_group=2345), access_registered(R9700_USER, ADDUSER)
    ).run()
    rules = access.task("Configure | Give /dev/kfd").files["/etc/udev/rules.d/70-r9700-gpu-access.rules"]
    assert 'KERNEL=="kfd", GROUP="2345", MODE="0660"' in rules
    assert 'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="2345", MODE="0660"' in rules
    assert access.task("Configure | Ensure the GPU groups exist").items == ["render", "video"]


def test_a_listed_user_that_does_not_exist_is_refused_not_created():
    ctx = context(r9700_users=["r9700", "ghost"])
    registered = access_registered({"ghost": None}, ADDUSER)
    with pytest.raises(AssertFailed, match="no such user on node1: ghost"):
        RoleRender("r9700_access", ctx, registered).run()


# -- r9700_env -----------------------------------------------------------------------------------


PROFILE, SESSION, MANAGER = (
    "/etc/profile.d/r9700.sh",
    "/etc/environment.d/90-r9700.conf",
    "/etc/systemd/system.conf.d/90-r9700.conf",
)


def env_files(tmp_path: Path, **host_vars: Any) -> tuple[str, str, str]:
    env = RoleRender("r9700_env", context(**host_vars)).run()
    profile = env.task("Configure | Write the login-shell environment").files[PROFILE]
    session = env.task("Configure | Write the systemd user-manager environment").files[SESSION]
    manager = env.task("Configure | Write the system manager's DefaultEnvironment").files[MANAGER]
    (tmp_path / "r9700.sh").write_text(profile)
    return profile, session, manager


def session_values(session: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in session.splitlines() if line and not line.startswith("#"))


def manager_values(manager: str) -> dict[str, str]:
    """As systemd reads DefaultEnvironment= (systemd-system.conf(5)): quoted words, NAME=value each."""
    lines = [line.split("=", 1)[1] for line in manager.splitlines() if line.startswith("DefaultEnvironment=")]
    return dict(word.split("=", 1) for line in lines for word in shlex.split(line))


def profile_values(tmp_path: Path, names: list[str]) -> dict[str, str]:
    script = f". {tmp_path / 'r9700.sh'}; " + "; ".join(f'printf "%s|" "${{{n}-<unset>}}"' for n in names)
    values = sh(f"env -i /bin/sh -c {shlex.quote(script)}").split("|")[: len(names)]
    return {n: v for n, v in zip(names, values, strict=True) if v != "<unset>"}


def all_three(tmp_path: Path, **host_vars: Any) -> dict[str, str]:
    """The variables of the three files; fails unless all three carry exactly the same ones."""
    _, session, manager = env_files(tmp_path, **host_vars)
    from_session, from_manager = session_values(session), manager_values(manager)
    names = sorted({*from_session, *from_manager, "HSA_OVERRIDE_GFX_VERSION", "HSA_FORCE_FINE_GRAIN_PCIE"})
    assert from_session == from_manager == profile_values(tmp_path, names)
    return from_session


def test_the_three_files_carry_one_list_for_login_shells_user_managers_and_system_services(tmp_path):
    """Issue 9: a system service (slurmd, dockerd) read no environment.d and no profile.d."""
    _, _, manager = env_files(tmp_path, r9700_env_extra={"NCCL_SOCKET_IFNAME": "^docker0,lo"})
    assert "[Manager]" in manager.splitlines()
    values = all_three(tmp_path, r9700_env_extra={"NCCL_SOCKET_IFNAME": "^docker0,lo"})
    assert values["NCCL_SOCKET_IFNAME"] == "^docker0,lo"


def test_defaults_carry_no_article_values_only_the_p2p_decision(tmp_path):
    """NCCL_MIN_NCHANNELS=4 (MI300X tuning) and NCCL_P2P_DISABLE=0 (a no-op) are opt-in, not defaults;
    the known issues' default workaround for gfx1201 (IPC legacy mode off, ROCm/rocm-systems#2209) is."""
    values = all_three(tmp_path)
    # no P2P facts in this render: auto decides off
    assert values == {"NCCL_P2P_DISABLE": "1", "HSA_ENABLE_IPC_MODE_LEGACY": "0"}
    out = sh(f"PATH=/usr/bin:/bin; . {tmp_path / 'r9700.sh'}; . {tmp_path / 'r9700.sh'}; echo $PATH")
    assert out.splitlines()[0] == "/usr/bin:/bin:/opt/rocm/bin"  # added once, even when sourced twice


def test_a_key_set_to_null_is_removed_and_extra_keys_are_merged(tmp_path):
    values = all_three(
        tmp_path,
        r9700_env={"NCCL_DEBUG": "WARN", "NCCL_MIN_NCHANNELS": "4"},
        r9700_env_extra={"NCCL_MIN_NCHANNELS": None, "NCCL_SOCKET_IFNAME": "eth0"},
    )
    assert values == {
        "NCCL_DEBUG": "WARN",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_P2P_DISABLE": "1",
        "HSA_ENABLE_IPC_MODE_LEGACY": "0",
    }


def test_the_recorded_list_names_a_reason_and_a_source_for_every_entry(tmp_path):
    ctx = context(r9700_env_extra={"NCCL_DEBUG": "INFO"})
    env = RoleRender("r9700_env", ctx).run()
    listed = {e["name"]: e for e in env.vars["r9700_environment"]}
    assert listed["NCCL_DEBUG"]["source"] == "r9700_env_extra"
    assert "rocm-systems#11348" in listed["NCCL_P2P_DISABLE"]["reason"]
    assert all(e["reason"] and e["source"] for e in listed.values())


def test_a_known_issues_workaround_reaches_all_three_files_only_where_the_issue_applies(tmp_path):
    """Issue 14: ROCm 7.2.x deadlocks RCCL on two or more gfx1201 cards (vllm-project/vllm#40980):
    a pinned 7.2.3 gets NCCL_PROTO=Simple in profile.d, environment.d and the systemd drop-in; one
    card, or 7.1.1, or the workaround skipped by the inventory gets none."""
    assert all_three(tmp_path, r9700_rocm_version="7.2.3")["NCCL_PROTO"] == "Simple"
    assert "NCCL_PROTO" not in all_three(tmp_path, r9700_rocm_version="7.1.1")
    assert "NCCL_PROTO" not in all_three(tmp_path, gpus=1, r9700_rocm_version="7.2.3")
    skipped = all_three(
        tmp_path, r9700_rocm_version="7.2.3", r9700_known_issue_workarounds_skip=["r9700-rccl-72-hang"]
    )
    assert "NCCL_PROTO" not in skipped and skipped["HSA_ENABLE_IPC_MODE_LEGACY"] == "0"
    env = RoleRender("r9700_env", context(r9700_rocm_version="7.2.3")).run()
    listed = {e["name"]: e for e in env.vars["r9700_environment"]}
    assert listed["NCCL_PROTO"]["reason"].startswith("workaround of known issue r9700-rccl-72-hang")
    assert listed["NCCL_PROTO"]["source"] == "https://github.com/vllm-project/vllm/issues/40980"


def test_the_known_issues_workarounds_reach_the_containers_dockerfile_from_the_same_list(tmp_path):
    """Issue 14 item 3, the fourth place: the Dockerfile r9700_containers renders takes its ENV from
    the list r9700_env publishes, so a pinned 7.2.3 on four R9700s builds images with NCCL_PROTO=Simple
    and HSA_ENABLE_IPC_MODE_LEGACY=0, the same values as the three host files."""
    import test_containers_render as containers

    ctx = containers.context(r9700_rocm_version="7.2.3")
    ctx["r9700_environment"] = RoleRender("r9700_env", ctx).run().vars["r9700_environment"]
    role = containers.run(ctx, containers.registered())
    dockerfile = role.task("Configure | Write the container environment file and the Dockerfile").files[
        "/etc/r9700ctl/Dockerfile"
    ]
    env_block = dockerfile[dockerfile.index("\nENV ") + 5 :].split("\n\n")[0].replace("\\\n", " ").split()
    in_image = dict(item.split("=", 1) for item in env_block)
    assert in_image["NCCL_PROTO"] == "Simple" and in_image["HSA_ENABLE_IPC_MODE_LEGACY"] == "0"
    assert in_image == all_three(tmp_path, r9700_rocm_version="7.2.3")


@pytest.mark.parametrize("value", ["INIT,ENV $HOME", "a b", "50%", 'say "hi"', "x'y", "${PATH}"], ids=str)
def test_a_value_the_three_files_would_read_differently_is_refused_before_any_change(value):
    with pytest.raises(AssertionError, match=r"profile\.d, environment\.d and systemd would read"):
        context(r9700_env_extra={"NCCL_DEBUG_SUBSYS": value})


def test_a_bad_variable_name_is_refused():
    with pytest.raises(AssertionError, match="'NOT-A-NAME' is not a variable name"):
        context(r9700_env_extra={"NOT-A-NAME": "1"})


def test_rocr_visible_devices_hides_an_igpu_by_default_and_can_be_set_or_switched_off(tmp_path):
    """ROCm/ROCm#5696: the iGPU must not become device 0 beside the R9700s."""
    assert all_three(tmp_path, igpu=True)["ROCR_VISIBLE_DEVICES"] == "0,1,2,3"
    assert "ROCR_VISIBLE_DEVICES" not in all_three(tmp_path, igpu=True, r9700_rocr_visible_devices="")
    assert all_three(tmp_path, r9700_rocr_visible_devices="1,3")["ROCR_VISIBLE_DEVICES"] == "1,3"
    assert "ROCR_VISIBLE_DEVICES" not in all_three(tmp_path)


def test_an_accepted_hsa_override_reaches_all_three_files(tmp_path):
    assert all_three(tmp_path, override="12.0.1")["HSA_OVERRIDE_GFX_VERSION"] == "12.0.1"


def _with_article_override(ctx: dict[str, Any]) -> dict[str, Any]:
    """ctx with preflight's verdict on a node whose /etc/environment line 2 holds the article's override."""
    import role_render_harness as harness

    from r9700ctl import manifest as manifest_module
    from r9700ctl import preflight

    facts = harness.node_facts("ubuntu-24.04", 4)
    line = {"path": "/etc/environment", "line": 2, "name": "HSA_OVERRIDE_GFX_VERSION", "value": "9.4.2"}
    facts["environment_sources"] = {
        "read": ["/etc/environment"],
        "settings": [{**line, "text": "HSA_OVERRIDE_GFX_VERSION=9.4.2"}],
        "errors": [],
        "users": {"root": "/root"},
    }
    verdict = preflight.judge(facts, ctx, manifest_module.load())
    ctx["r9700_resolved"] = verdict.resolved.to_dict()
    return ctx


def test_with_the_opt_in_the_nodes_own_breaking_line_is_commented_out_with_a_backup():
    """Issue 22 item 19: r9700_env_comment_out_conflicts lets provision comment out the line preflight
    would refuse (/etc/environment's HSA_OVERRIDE_GFX_VERSION=9.4.2), keeping a backup; the pattern
    replace applies leaves every other line alone and matches nothing once done (changed=0 next time)."""
    import re

    env = RoleRender("r9700_env", _with_article_override(context(r9700_env_comment_out_conflicts=True))).run()
    task = env.task("Configure | Comment out the node's own lines that break the GPUs")
    assert not task.skipped
    assert [item["path"] for item in task.items] == ["/etc/environment"]
    args = task.args
    assert args["path"] == "/etc/environment" and args["backup"] is True
    before = 'PATH="/usr/bin"\nHSA_OVERRIDE_GFX_VERSION=9.4.2\nexport HSA_OVERRIDE_GFX_VERSION_X=1\n'
    # ansible.builtin.replace: re.subn(regexp, replace, contents) with re.MULTILINE
    after, count = re.subn(re.compile(args["regexp"], re.MULTILINE), args["replace"], before)
    assert count == 1
    lines = after.splitlines()
    assert lines[1].startswith("# ") and lines[1].endswith("): HSA_OVERRIDE_GFX_VERSION=9.4.2")
    assert lines[0] == 'PATH="/usr/bin"' and lines[2].startswith("export HSA_")
    assert re.subn(re.compile(args["regexp"], re.MULTILINE), args["replace"], after)[1] == 0


def test_without_the_opt_in_no_file_of_the_node_is_touched():
    env = RoleRender("r9700_env", _with_article_override(context(r9700_env_comment_out_conflicts=True))).run()
    assert env.task("Configure | Comment out the node's own lines that break the GPUs").items
    off = RoleRender("r9700_env", _with_article_override(context())).run()
    assert off.task("Configure | Comment out the node's own lines that break the GPUs").skipped


# -- r9700_kernel --------------------------------------------------------------------------------


def test_the_grub_drop_in_appends_the_parameters_when_grub_sources_it(tmp_path):
    """update-grub sources /etc/default/grub then grub.d/*.cfg; ours adds to what is there."""
    kernel = RoleRender(
        "r9700_kernel", context(r9700_kernel_params=["iommu=pt", "amdgpu.ppfeaturemask=0xffffffff"])
    ).run()
    dropin = kernel.task("Configure | Write the kernel parameters").files["/etc/default/grub.d/99-r9700.cfg"]
    (tmp_path / "99-r9700.cfg").write_text(dropin)
    out = sh(f'GRUB_CMDLINE_LINUX="console=ttyS0"; . {tmp_path / "99-r9700.cfg"}; echo "$GRUB_CMDLINE_LINUX"')
    assert out.strip() == "console=ttyS0 iommu=pt amdgpu.ppfeaturemask=0xffffffff"


def test_an_empty_parameter_list_removes_the_drop_in():
    """R29: a parameter taken out of the list leaves the drop-in; no parameter, no drop-in."""
    kernel = RoleRender("r9700_kernel", context(r9700_kernel_params=[])).run()
    assert kernel.task("Configure | Write the kernel parameters").skipped
    assert not kernel.task("Configure | Remove the GRUB drop-in").skipped


def test_a_parameter_that_is_not_one_word_is_refused():
    """The role's own guard (for ansible-playbook runs); r9700ctl refuses the value even earlier,
    on the controller (r9700ctl/value_rules.py, tests/unit/test_cli_bad_input.py)."""
    ctx = {**context(), "r9700_kernel_params": ["iommu=pt quiet"]}
    with pytest.raises(AssertFailed, match="r9700_kernel_params must be words"):
        RoleRender("r9700_kernel", ctx).run()


def test_a_changed_drop_in_hands_its_reason_to_the_one_reboot_step():
    kernel = RoleRender("r9700_kernel", context(), {"__r9700_kernel_dropin": {"changed": True}}).run()
    assert "Regenerate the GRUB configuration" in kernel.notified
    include = kernel.task("Reboot | Reboot once")
    assert include.args["tasks_from"] == "reboot.yml"
    assert include.args["name"] == "r9700ctl.nodes.r9700_driver"


# -- r9700_preflight -----------------------------------------------------------------------------


def test_the_preflight_task_hands_the_inventory_values_to_the_judge():
    task = RoleRender("r9700_preflight", context()).run().task("Preflight | Judge the node")
    assert task.module == "r9700ctl.nodes.r9700_preflight"
    assert task.args["rocm_version"] == "7.1.1"
    assert "lab_pci_devices" not in task.args  # lab nodes present their machine in sysfs
    assert task.args["apt_lock_timeout"] == 600 and task.args["driver_source"] == "dkms"


def p2p_facts(bar_bytes: int, iommu: str | None = "identity", count: int = 4) -> dict[str, Any]:
    """nodefacts' `p2p` facts for `count` R9700s, each behind its own switch on its own root port."""
    gpus, bridges = {}, {}
    for i in range(count):
        root_port = f"0000:00:0{i + 1}.1"
        usp, dsp, gpu = (f"0000:{i * 4 + bus:02x}:00.0" for bus in (1, 2, 3))
        gpus[gpu] = {
            "bars": [{"index": 0, "size": bar_bytes, "memory": True, "prefetch": True, "mem64": True}],
            "vram_bytes": None,
            "iommu_group": str(i) if iommu else None,
            "iommu_type": iommu,
            "path": [root_port, usp, dsp, gpu],
        }
        # Linux's own ACS redirect on root ports and on each card's downstream port (0x001d)
        bridges.update({root_port: {"control": 0x1D}, usp: {"control": None}, dsp: {"control": 0x1D}})
    return {"source": "sysfs", "gpus": gpus, "bridges": bridges}


@pytest.mark.parametrize(
    ("bar", "iommu", "count", "state", "variable"),
    [
        (32 * 2**30, "identity", 2, "on", "HSA_FORCE_FINE_GRAIN_PCIE"),
        (256 * 2**20, "identity", 2, "off", "NCCL_P2P_DISABLE"),
        (32 * 2**30, "DMA-FQ", 2, "off", "NCCL_P2P_DISABLE"),
        (32 * 2**30, "identity", 4, "off", "NCCL_P2P_DISABLE"),
    ],
    ids=["large-bar-passthrough", "small-bar", "iommu-translated", "4x-r9700-known-issues"],
)
def test_r9700_p2p_auto_decides_from_the_facts_and_all_three_files_carry_it(
    tmp_path, bar, iommu, count, state, variable
):
    """Issue 9 item 4: P2P on only with BAR >= VRAM on every GPU, IOMMU passthrough/off, no ACS redirect
    between GPUs (Linux's own on root ports and each card's switch does not count); else off. Issue 22
    item 20: and off on 4x R9700 whatever the hardware allows, for the host hang and IPC failure known
    there (ROCm/rocm-systems#11348, ROCm/rccl-tests#162)."""
    import role_render_harness as harness

    from r9700ctl import manifest as manifest_module
    from r9700ctl import preflight

    ctx = context()
    facts = harness.node_facts("ubuntu-24.04", count)
    for i, device in enumerate(facts["pci"]["devices"]):
        device["revision"] = "0xc0"  # an R9700 (libdrm amdgpu.ids 7551 C0)
        device["address"] = f"0000:{i * 4 + 3:02x}:00.0"  # the GPU behind card i's switch (p2p_facts)
    facts["p2p"] = p2p_facts(bar, iommu, count)
    verdict = preflight.judge(facts, ctx, manifest_module.load())
    assert verdict.ok, [one_line(c) for c in verdict.failures]
    ctx["r9700_resolved"] = verdict.resolved.to_dict()
    assert ctx["r9700_resolved"]["p2p"]["state"] == state
    env = RoleRender("r9700_env", ctx).run()
    (tmp_path / "r9700.sh").write_text(
        env.task("Configure | Write the login-shell environment").files[PROFILE]
    )
    session = env.task("Configure | Write the systemd user-manager environment").files[SESSION]
    manager = env.task("Configure | Write the system manager's DefaultEnvironment").files[MANAGER]
    values = session_values(session)
    # and the default workaround of a known issue of gfx1201 (ROCm/rocm-systems#2209)
    assert values == manager_values(manager) == {variable: "1", "HSA_ENABLE_IPC_MODE_LEGACY": "0"}
    if state == "off":
        reason = ctx["r9700_resolved"]["p2p"]["reason"]
        assert f"# P2P {reason}" in manager  # the drop-in says why, next to the value


# -- r9700_power ---------------------------------------------------------------------------------

# `amd-smi static --json` of a real card (RX 6600: power cap 94-100 W, at 0000:0b:00.0); the
# stand-in amd-smi of the lab prints the same file.
RECORDED_STATIC = Path(__file__).resolve().parents[2] / "r9700ctl/data/recorded/rx6600-1x/amd-smi-static.json"


def power_registered(rc: int = 0, stderr: str = "") -> dict[str, Any]:
    stdout = "\n".join(RECORDED_STATIC.read_text().splitlines()[1:]) if rc == 0 else ""
    return {"__r9700_power_static": {"rc": rc, "stdout": stdout, "stderr": stderr, "changed": False}}


def test_a_cap_inside_the_cards_range_gets_a_policy_file_an_applier_and_an_enabled_boot_unit():
    ctx = context(r9700_power_cap_w=95)
    power = RoleRender("r9700_power", ctx, power_registered()).run()

    policy = json.loads(power.task("Configure | Write the node's power policy").args["content"])
    assert policy == {
        "schema": "r9700ctl.power/1",
        "caps_w": {"0000:0b:00.0": 95.0},
        "psus": [],
        "margin": 0.1,
    }
    unit_task = power.task("Configure | Write the oneshot unit")
    unit = unit_task.files["/etc/systemd/system/r9700-power-cap.service"]
    assert "Type=oneshot" in unit and "WantedBy=multi-user.target" in unit
    assert (
        "ExecStart=/usr/bin/python3 /usr/local/sbin/r9700-power-cap apply --policy /etc/r9700ctl/power.json"
        in unit
    )
    link = power.task("Configure | Enable the unit").args
    assert link["dest"] == "/etc/systemd/system/multi-user.target.wants/r9700-power-cap.service"
    assert link["src"] == "/etc/systemd/system/r9700-power-cap.service" and link["state"] == "link"
    # A systemd node (runtime steps on) also gets the caps now, through the same applier.
    apply = power.task("Apply | Set the caps now")
    assert not apply.skipped and apply.args["argv"][2:4] == ["apply", "--policy"]
    assert power.notified == ["Reload the systemd units"]


def test_files_only_nodes_get_the_enabled_unit_but_no_cap_is_set_now():
    """The lab and image builds run no systemd: the unit applies the caps at next boot."""
    ctx = context(r9700_power_cap_w=95, service_manager="sshd")
    power = RoleRender("r9700_power", ctx, power_registered())

    assert power.run().task("Apply | Set the caps now").skipped
    assert not power.task("Configure | Enable the unit").skipped


def test_a_cap_outside_the_cards_own_range_is_refused_with_that_range_before_any_file():
    power = RoleRender("r9700_power", context(r9700_power_cap_w=250), power_registered())

    with pytest.raises(AssertFailed, match=r"250 W is outside the 94-100 W this card accepts"):
        power.run()
    assert not any(t.name.startswith("Configure") for t in power.tasks)


def test_a_per_gpu_cap_must_name_a_card_amd_smi_lists():
    power = RoleRender(
        "r9700_power", context(r9700_power_cap_w_by_gpu={"0000:03:00.0": 95}), power_registered()
    )

    with pytest.raises(AssertFailed, match=r"names 0000:03:00.0, which is not a GPU of this node"):
        power.run()


def test_without_a_working_amd_smi_no_cap_is_set_blind():
    ctx = context(r9700_power_cap_w=95)
    power = RoleRender("r9700_power", ctx, power_registered(2, "amd-smi: not found"))

    with pytest.raises(AssertFailed, match=r"amd-smi static --json failed \(rc 2: amd-smi: not found\)"):
        power.run()


def test_a_psu_map_alone_writes_the_policy_for_validate_and_no_unit():
    psus = {"psu1": {"watts": 1600, "gpus": ["0000:03:00.0", "0000:04:00.0"], "host_w": 300}}
    earlier = {"__r9700_power_old_applier": {"stat": {"exists": True}, "changed": False}}
    power = RoleRender("r9700_power", context(r9700_psus=psus), earlier).run()

    policy = json.loads(power.task("Configure | Write the node's power policy").args["content"])
    assert policy["caps_w"] == {} and policy["psus"][0]["gpus"] == ["0000:03:00.0", "0000:04:00.0"]
    assert power.task("Configure | Write the oneshot unit").skipped
    assert not power.task("Configure | Remove the unit, its link and the applier").skipped
    # An earlier run's caps go back to the cards' defaults before the applier is removed.
    assert not power.task("Configure | Restore the cards' default caps").skipped


def test_the_policy_path_is_the_one_the_agent_reads():
    from r9700ctl.agent import power_budget as power

    ctx = context()
    vars_file = Path(__file__).resolve().parents[2] / "roles/r9700_power/vars/Debian.yml"
    import yaml

    assert yaml.safe_load(vars_file.read_text())["__r9700_power_policy_path"] == "/" + power.POLICY_PATH
    assert ctx["r9700_psu_margin"] == power.DEFAULT_MARGIN


def test_going_back_to_an_older_release_removes_the_newer_one_first():
    """Issue 13 (rollback): apt will not downgrade ROCm's exact-version dependencies, so an older
    target removes the installed rocm-core first; the same or a newer release removes nothing."""
    for installed, removes in (
        ({"rocm-core": "7.2.3.70203-90~24.04", "amdgpu-dkms": "1:6.16.13.30300300-2327507.24.04"}, True),
        ({"rocm-core": ROCM_711, "amdgpu-dkms": AMDGPU_DKMS}, False),
        ({"rocm-core": "6.4.1.60401-83~22.04", "amdgpu-dkms": "1:6.12.12.60401-2164967.22.04"}, False),
        ({"rocm-core": None, "amdgpu-dkms": None}, False),
    ):
        ctx = context()
        ctx["r9700_resolved"] = {**ctx["r9700_resolved"], "installed_before": installed}
        rocm = RoleRender("r9700_rocm", ctx, rocm_registered()).run()
        removal = rocm.task("Install | Remove the installed ROCm first")
        assert removal.skipped is not removes, installed
        if removes:
            assert removal.args["name"] == "rocm-core" and removal.args["state"] == "absent"


def test_amdgpu_dkms_is_installed_with_its_firmware_at_the_repositorys_versions():
    """Issue 13: amdgpu-dkms depends on amdgpu-dkms-firmware (= its version); naming both lets apt
    move up and down between driver releases whose firmware versions apt would not pick itself."""
    registered = driver_registered()
    firmware = (
        "amdgpu-dkms-firmware | 30.20.1.0.30200100-2255209.22.04 | "
        "http://127.0.0.1:18766/amdgpu/30.20.1/ubuntu jammy/main amd64 Packages"
    )
    lines = registered["__r9700_driver_madison"]["stdout_lines"]
    registered["__r9700_driver_madison"] = {"stdout_lines": [*lines, firmware]}
    driver = RoleRender("r9700_driver", context(), registered).run()
    assert driver.task("Install | Ensure AMD's amdgpu-dkms").args["name"] == [
        f"amdgpu-dkms={AMDGPU_DKMS}",
        "amdgpu-dkms-firmware=30.20.1.0.30200100-2255209.22.04",
    ]


# -- the harness's files are the template module's ------------------------------------------------


def every_template(os_key: str) -> list[RoleRender]:
    """Renders that write every template of the provisioning roles and of r9700_containers."""
    import test_containers_render as containers

    kernel_packages = {"stdout_lines": ["linux-image-6.8.0-31-generic ii "]}
    proxy = {"r9700_proxy": "http://proxy.example:3128", "r9700_no_proxy": ["10.213.0.1"]}
    return [
        RoleRender("r9700_repos", context(os_key, mirror=MIRROR, **proxy), repos_registered()).run(),
        RoleRender(
            "r9700_driver",
            context(os_key, r9700_driver_replace_inbox=True, r9700_kernel_hold=True),
            {**driver_registered(), "__r9700_driver_kernel_packages": kernel_packages},
        ).run(),
        RoleRender("r9700_rocm", context(os_key), rocm_registered()).run(),
        RoleRender("r9700_access", context(os_key), access_registered(R9700_USER, ADDUSER)).run(),
        RoleRender(
            "r9700_env", context(os_key, r9700_rocm_version="7.2.3", r9700_env_extra={"NCCL_DEBUG": "WARN"})
        ).run(),
        RoleRender("r9700_kernel", context(os_key, r9700_kernel_params=["iommu=pt", "quiet"])).run(),
        RoleRender("r9700_power", context(os_key, r9700_power_cap_w=95), power_registered()).run(),
        containers.run(containers.context(os_key, **proxy), containers.registered()),
    ]


@pytest.mark.timeout(300)
def test_files_with_jinja_statements_are_byte_for_byte_what_the_template_module_writes(tmp_path):
    """The harness's files are the template module's: one real ansible-playbook run (connection local,
    writing into tmp_path) renders each template with Jinja statements ({% for %}, {% if %}: where
    block whitespace and trim_blocks decide the bytes) from the same variables and task variables,
    and every file is the same bytes as the harness's. One system: the two differ in values, not in
    how they are rendered; and each file costs the module two Python starts (about a second here),
    so the templates of plain substitutions are left to the lookup alone."""
    renders = every_template("ubuntu-24.04")
    plays: list[dict[str, Any]] = []
    expected: dict[
        str, tuple[Path, str]
    ] = {}  # role and destination -> (where Ansible wrote it, the harness's)
    sources: set[str] = set()
    for render in renders:
        # The host's variables as the play's vars file; Ansible sets its own magic and connection ones.
        variables = {
            k: v
            for k, v in render.vars.items()
            if not k.startswith("ansible_") and k not in ("role_path", "inventory_hostname")
        }
        vars_file = tmp_path / f"{len(plays)}.json"
        vars_file.write_text(json.dumps(variables))
        # ansible_facts the templates read (processor_nproc) as facts, as fact gathering would set them
        tasks: list[dict[str, Any]] = [
            {"ansible.builtin.set_fact": {**render.vars["ansible_facts"], "cacheable": True}}
        ]
        for task in render.tasks:
            for dest, (src, task_vars) in task.file_inputs.items():
                if "{%" not in (render.base / "templates" / src).read_text():
                    continue
                written = tmp_path / f"{len(plays)}-{len(tasks)}"
                expected[f"{render.role} {dest}"] = (written, task.files[dest])
                sources.add(f"{render.role}/{src}")
                template = {"src": str(render.base / "templates" / src), "dest": str(written)}
                tasks.append({"ansible.builtin.template": template, "vars": task_vars})
        plays.append(
            {"hosts": "node1", "gather_facts": False, "vars_files": [vars_file.name], "tasks": tasks}
        )
    # every such template of the eight roles is rendered at least once
    assert sources == {
        f"{r.role}/{t.name}"
        for r in renders
        for t in (r.base / "templates").iterdir()
        if "{%" in t.read_text()
    }
    (tmp_path / "play.yml").write_text(json.dumps(plays))
    ansible_playbook = Path(sys.executable).with_name("ansible-playbook")
    # node1 over a local connection, with this venv's Python (not the first python3 on PATH)
    host = f"node1 ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    (tmp_path / "hosts").write_text(host)
    done = subprocess.run(
        [str(ansible_playbook), "-i", "hosts", "play.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert {name: written.read_text() for name, (written, _) in expected.items()} == {
        name: text for name, (_, text) in expected.items()
    }
