"""The collection r9700ctl.nodes from a site's own Ansible, against a lab node (issue 24 item 5).

A site installs the collection (built from this checkout, installed offline with ansible-galaxy,
as README "Use it from your own Ansible" says), imports r9700ctl.nodes.provision from its own
site.yml and runs plain `ansible-playbook`: no r9700ctl command touches the node. Then
`r9700ctl verify` holds the node to the same promises as after `r9700ctl provision`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import collection_plugins
from child_process import r9700ctl

from r9700ctl import __version__

PLAY_TIMEOUT_S = 1500  # a cold provision installs the stand-in packages through the lab's proxy


def test_a_site_playbook_importing_the_collection_provisions_a_node_that_verify_passes(
    make_lab: Any, tmp_path: Path
) -> None:
    lab = make_lab(nodes=1)
    collections = tmp_path / "collections"
    collection_plugins.install(collection_plugins.build(tmp_path / "built"), collections)
    site = tmp_path / "site.yml"
    site.write_text(
        "---\n# A site's own playbook: the R9700 nodes' part is the collection's.\n"
        "- name: Provision the R9700 nodes\n  ansible.builtin.import_playbook: r9700ctl.nodes.provision\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(collections),  # the installed copy, not this checkout
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    played = subprocess.run(
        [collection_plugins.ansible_tool("ansible-playbook"), "-i", str(lab.inventory), str(site)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PLAY_TIMEOUT_S,
    )
    assert played.returncode == 0, played.stdout[-8000:] + played.stderr[-4000:]
    (node, _address) = lab.nodes[0]
    recap = re.search(
        rf"^{node}\s+: ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0\b", played.stdout, re.M
    )
    assert recap and int(recap.group(1)) > 0, played.stdout[-3000:]
    assert "r9700ctl.nodes.r9700_preflight" in played.stdout or "r9700_preflight" in played.stdout

    checked = r9700ctl("verify", str(lab.inventory), "--json", str(tmp_path / "verify.json"),
                       home=tmp_path / "state", columns=200, timeout=PLAY_TIMEOUT_S)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (summary,) = json.loads((tmp_path / "verify.json").read_text())["hosts"]
    assert (summary["host"], summary["status"]) == (node, "PASS") and summary["passed"] > 30, summary

    # The node's record names the r9700ctl that judged it (r9700_preflight's fact), as after
    # `r9700ctl provision` (its extra var), not "unknown".
    record = json.loads(lab.ssh(node, "cat /etc/r9700ctl/node.json").stdout)
    assert record["toolkit_version"] == __version__
