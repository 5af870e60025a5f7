"""GPU access: users in render and video, future users too, and the device nodes' group and mode."""

from __future__ import annotations

import pytest

RULES = "/etc/udev/rules.d/70-r9700-gpu-access.rules"


@pytest.mark.parametrize("group", ["render", "video"])
def test_the_gpu_groups_exist(host, group):
    assert host.group(group).exists


@pytest.mark.parametrize("group", ["render", "video"])
def test_the_users_are_in_the_group(host, node, group):
    """R26: every listed user (default: the SSH user) can open /dev/kfd and the render nodes."""
    if group not in node.var("r9700_access_groups"):
        pytest.skip(f"{group} is not in r9700_access_groups")
    if not node.users:
        pytest.skip("no r9700_users and no ansible_user known for this host")
    missing = [user for user in node.users if group not in host.user(user).groups]
    assert missing == []


def test_users_made_later_join_the_gpu_groups(host, node):
    if not node.var("r9700_adduser_extra_groups"):
        pytest.skip("r9700_adduser_extra_groups is false")
    conf = host.file("/etc/adduser.conf").content_string.splitlines()
    assert "ADD_EXTRA_GROUPS=1" in conf
    extra = next(line for line in conf if line.startswith("EXTRA_GROUPS="))
    assert set(node.var("r9700_access_groups")) <= set(extra.split("=", 1)[1].strip('"').split())


def test_udev_gives_kfd_to_the_device_group(host, node):
    group, mode = node.var("r9700_device_group"), node.var("r9700_device_mode")
    assert f'KERNEL=="kfd", GROUP="{group}", MODE="{mode}"' in host.file(RULES).content_string


def test_udev_gives_the_render_nodes_to_the_device_group(host, node):
    group, mode = node.var("r9700_device_group"), node.var("r9700_device_mode")
    assert (
        f'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="{group}", MODE="{mode}"'
        in host.file(RULES).content_string
    )


@pytest.mark.runtime
def test_kfd_has_the_group_and_mode_the_rule_sets(host, node):
    kfd = host.file("/dev/kfd")
    if not kfd.exists:
        pytest.skip("no /dev/kfd on this node (no GPU driver loaded)")
    if not node.runtime:
        # Without systemd nothing runs udev: the rule (test above) applies at the node's next boot.
        pytest.skip("runtime steps are off on this node (no systemd: image build or lab): no udev")
    group = str(node.var("r9700_device_group"))
    assert (kfd.group if not group.isdigit() else str(kfd.gid), oct(kfd.mode)) == (
        group,
        oct(int(node.var("r9700_device_mode"), 8)),
    )
