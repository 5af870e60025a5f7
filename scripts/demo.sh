#!/usr/bin/env bash
# The main job on the built-in lab: build 2 throwaway Debian 12 nodes on this machine,
# provision them with r9700ctl, check them with the testinfra suite, run the validation agent
# inside the provisioned container image, show the summary, and remove the lab again. Needs root (network namespaces, chroot).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

lab_dir=${LAB_DIR:-lab}
r9700ctl=.venv/bin/r9700ctl
cleanup() { "$r9700ctl" lab down --dir "$lab_dir" || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

"$r9700ctl" lab up --nodes 2 --dir "$lab_dir"
"$r9700ctl" provision "$lab_dir/inventory.ini" --json "$lab_dir/provision.json"
"$r9700ctl" verify "$lab_dir/inventory.ini"
# The container step: the nodes have no init system, so dockerd is started by hand; a second
# provision pulls the pinned rocm/pytorch tag (the lab registry's stand-in image) and the agent
# then runs inside it on every node.
"$r9700ctl" lab dockerd --dir "$lab_dir"
"$r9700ctl" provision "$lab_dir/inventory.ini"
ssh -F "$lab_dir/ssh_config" node1 r9700-run -n python3 -c "'import torch; print(torch.cuda.device_count())'"
"$r9700ctl" validate "$lab_dir/inventory.ini" --level config --runtime container --no-history ||
    echo "demo: validate exited $? (its table above says why)"
echo "demo: the provision report (JSON) is in $lab_dir/provision.json"
