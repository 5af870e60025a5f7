"""The testinfra suite's container checks (tests/infra/test_containers.py) on stand-in hosts.

`r9700ctl verify` must fail a node whose container environment would point ROCm at GPUs the
container does not see (issue 22 item 8), and whose CDI spec no longer lists the node's GPUs
(item 7); the same checks pass the node as provision leaves it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from test_infra_expectations import conftest, load

containers = load("test_containers")

# node.json's gpus (r9700-pci-devices): an AMD iGPU that sorts first, then four R9700s.
GPUS = [{"address": "0000:01:00.0", "vendor": "0x1002", "device": "0x164e", "class": "0x030000"}] + [
    {"address": f"0000:{3 + i:02x}:00.0", "vendor": "0x1002", "device": "0x7551", "class": "0x030000"}
    for i in range(4)
]
ENVIRONMENT = [
    {"name": "NCCL_P2P_DISABLE", "value": "1", "reason": "", "source": ""},
    {"name": "ROCR_VISIBLE_DEVICES", "value": "1,2,3,4", "reason": "", "source": ""},
]


@dataclass
class Host:
    files: dict[str, str] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)

    def file(self, path: str) -> SimpleNamespace:
        return SimpleNamespace(exists=path in self.files, content_string=self.files.get(path, ""))

    def run(self, command: str) -> SimpleNamespace:
        return SimpleNamespace(rc=0, stdout=self.commands.get(command, ""), stderr="")


def provisioned(render_nodes: str, visible_inside: str) -> tuple[Host, Any]:
    config = {
        "image": "img",
        "gpu_access": "devices",
        "render_nodes": render_nodes,
        "pci": [g["address"] for g in GPUS[1:]],
    }
    env = f"NCCL_P2P_DISABLE=1\nROCR_VISIBLE_DEVICES={visible_inside}\n"
    dockerfile = f"FROM img\nENV NCCL_P2P_DISABLE=1 \\\n    ROCR_VISIBLE_DEVICES={visible_inside}\n"
    host = Host(
        {
            containers.CONFIG: json.dumps(config),
            containers.ENV_FILE: "# managed\n" + env,
            containers.DOCKERFILE: dockerfile,
        }
    )
    node = conftest.Node(
        name="node1",
        state={},
        record={"environment": ENVIRONMENT, "gpus": GPUS},
        inventory={"r9700_container_image": "img"},
        defaults=conftest.role_defaults(),
        manifest={},
    )
    return host, node


def test_a_container_that_sees_only_the_cards_must_get_them_renumbered():
    host, node = provisioned("gpus", "0,1,2,3")
    containers.test_the_dockerfile_and_the_env_file_carry_the_nodes_environment_list(host, node)


def test_the_hosts_indices_in_a_container_that_sees_only_the_cards_fail_verify():
    """What the role wrote before the fix: card 0 hidden, index 4 naming no GPU inside."""
    host, node = provisioned("gpus", "1,2,3,4")
    with pytest.raises(AssertionError):
        containers.test_the_dockerfile_and_the_env_file_carry_the_nodes_environment_list(host, node)


def test_a_container_with_all_of_dev_dri_keeps_the_host_indices():
    host, node = provisioned("all", "1,2,3,4")
    containers.test_the_dockerfile_and_the_env_file_carry_the_nodes_environment_list(host, node)


# -- the CDI spec (item 7) -------------------------------------------------------------------------------


def spec_of(renders: list[int]) -> str:
    """amd-ctk's spec: a device per GPU (card, render node, /dev/kfd), then "all" (internal/cdi)."""
    devices = [
        {
            "name": str(i),
            "containerEdits": {
                "deviceNodes": [
                    {"path": f"/dev/dri/card{r - 127}"},
                    {"path": f"/dev/dri/renderD{r}"},
                    {"path": "/dev/kfd"},
                ]
            },
        }
        for i, r in enumerate(renders)
    ]
    every = [n for d in devices for n in d["containerEdits"]["deviceNodes"][:-1]] + [{"path": "/dev/kfd"}]
    return json.dumps(
        {
            "kind": "amd.com/gpu",
            "devices": [*devices, {"name": "all", "containerEdits": {"deviceNodes": every}}],
        }
    )


def cdi_node(spec_renders: list[int], now: list[int]) -> tuple[Host, Any]:
    listing = "".join(f"/dev/dri/card{r - 127}\n/dev/dri/renderD{r}\n" for r in now)
    host = Host({containers.CDI_SPEC: spec_of(spec_renders)}, {containers.GPU_DEVICES: listing})
    node = conftest.Node(
        name="node1", state={}, record={}, inventory={"r9700_container_gpu_access": "cdi"},
        defaults=conftest.role_defaults(), manifest={},
    )  # fmt: skip
    return host, node


def test_a_cdi_spec_that_lists_the_nodes_gpus_passes():
    containers.test_the_cdi_spec_lists_the_gpus_the_node_has_now(*cdi_node([128, 129], [128, 129]))


def test_a_cdi_spec_made_before_a_card_was_pulled_fails_naming_the_devices():
    with pytest.raises(AssertionError, match=r"lists \['/dev/dri/card3', '/dev/dri/renderD130'\]"):
        containers.test_the_cdi_spec_lists_the_gpus_the_node_has_now(*cdi_node([128, 129, 130], [128, 129]))
