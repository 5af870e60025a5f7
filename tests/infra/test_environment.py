"""The node-wide environment: one profile.d file and one environment.d file, nothing else."""

from __future__ import annotations

import shlex

import pytest

PROFILE = "/etc/profile.d/r9700.sh"
SESSION = "/etc/environment.d/90-r9700.conf"
NAMES = [
    "NCCL_MIN_NCHANNELS",
    "NCCL_P2P_DISABLE",
    "HSA_FORCE_FINE_GRAIN_PCIE",
    "HSA_OVERRIDE_GFX_VERSION",
    "ROCR_VISIBLE_DEVICES",
]


@pytest.mark.parametrize("name", NAMES)
def test_a_login_shell_sees_the_variable_as_configured(host, node, name):
    """What a login shell gets from r9700.sh: the value, or unset (the HSA override only if accepted)."""
    expected = node.environment().get(name)
    script = f'. {PROFILE}; printf %s "${{{name}-<unset>}}"'
    out = host.run(f"sh -c {shlex.quote(script)}")
    assert out.rc == 0, out.stderr
    assert out.stdout == (expected if expected is not None else "<unset>")


def test_the_session_file_carries_exactly_the_configured_variables(host, node):
    lines = [
        line for line in host.file(SESSION).content_string.splitlines() if line and not line.startswith("#")
    ]
    assert dict(line.split("=", 1) for line in lines) == node.environment()


def test_rocm_bin_is_on_a_login_shells_path(host, node):
    if not node.var("r9700_env_rocm_path"):
        pytest.skip("r9700_env_rocm_path is false")
    out = host.run(f"sh -c {shlex.quote(f'PATH=/usr/bin:/bin; . {PROFILE}; echo $PATH')}")
    assert out.stdout.strip().split(":").count("/opt/rocm/bin") == 1


@pytest.mark.parametrize("path", [PROFILE, SESSION])
def test_the_environment_files_are_root_owned_and_readable(host, path):
    f = host.file(path)
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644)
