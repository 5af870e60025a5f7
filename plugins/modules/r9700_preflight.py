#!/usr/bin/python
"""Documentation of the action r9700ctl.nodes.r9700_preflight (plugins/action/r9700_preflight.py).

The action runs on the controller; this file only documents it, as Ansible's documentation and
ansible-test expect of an action plugin (a module of the same name carries its DOCUMENTATION).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: r9700_preflight
short_description: Judge an R9700 node before anything changes on it
description:
  - Gathers the node's raw facts (OS, GPUs, kernel, driver, Secure Boot, disk, apt lock, environment
    files, network) with one Python script sent on standard input, and judges them on the controller
    with the r9700ctl package (the same judge C(r9700ctl doctor) runs) against r9700ctl's manifest.
  - Sets the host facts C(r9700_resolved) (what the later roles install and configure) and
    C(r9700_preflight) (every check with its status, detail, fix and reason code).
  - A check that FAILs fails this host only, with one line naming the reason and the fix; nothing is
    changed on the node. WARN checks become warnings.
  - Runs on the controller and needs the Python package r9700ctl there, at the collection's version
    (the collection's requirements.txt).
options:
  python:
    description:
      - The node's Python that gathers the facts (it reads the script on its standard input).
      - Ansible's interpreter discovery keywords (C(auto), C(auto_silent) ...) mean C(python3).
    type: str
    default: python3
  apt_update:
    description:
      - Whether the facts refresh apt's package lists first (the role variable C(r9700_preflight_apt_update)).
    type: bool
    default: true
  apt_cache_valid_time:
    description:
      - Seconds for which a refresh by an earlier preflight stands, while nothing under /etc/apt changed
        since (the role variable C(r9700_preflight_apt_cache_valid_time)); C(0) refreshes every time.
    type: int
    default: 0
  rocm_version:
    description:
      - The role variable C(r9700_rocm_version), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  allow_unsupported:
    description:
      - The role variable C(r9700_allow_unsupported), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  hsa_override_gfx_version:
    description:
      - The role variable C(r9700_hsa_override_gfx_version), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  expected_gpus:
    description:
      - The role variable C(r9700_expected_gpus), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  min_free_gb:
    description:
      - The role variable C(r9700_min_free_gb), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  driver_source:
    description:
      - The role variable C(r9700_driver_source), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  apt_lock_timeout:
    description:
      - The role variable C(r9700_apt_lock_timeout), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  apply_runtime:
    description:
      - The role variable C(r9700_apply_runtime), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  known_issue_workarounds_skip:
    description:
      - The role variable C(r9700_known_issue_workarounds_skip), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  env:
    description:
      - The role variable C(r9700_env), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  env_extra:
    description:
      - The role variable C(r9700_env_extra), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  rocr_visible_devices:
    description:
      - The role variable C(r9700_rocr_visible_devices), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  p2p:
    description:
      - The role variable C(r9700_p2p), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  env_comment_out_conflicts:
    description:
      - The role variable C(r9700_env_comment_out_conflicts), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  users:
    description:
      - The role variable C(r9700_users), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  docker_users:
    description:
      - The role variable C(r9700_docker_users), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  power_cap_w:
    description:
      - The role variable C(r9700_power_cap_w), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  power_cap_w_by_gpu:
    description:
      - The role variable C(r9700_power_cap_w_by_gpu), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  psus:
    description:
      - The role variable C(r9700_psus), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  psu_margin:
    description:
      - The role variable C(r9700_psu_margin), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  cluster_network:
    description:
      - The role variable C(r9700_cluster_network), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  cluster_rdma:
    description:
      - The role variable C(r9700_cluster_rdma), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  cluster_rdma_hca:
    description:
      - The role variable C(r9700_cluster_rdma_hca), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
  cluster_rdma_gid_index:
    description:
      - The role variable C(r9700_cluster_rdma_gid_index), judged before anything changes (its type,
        choices and default are in the argument spec of the role that declares it).
    type: raw
notes:
  - Supports check mode (it only reads).
  - Used by the role r9700ctl.nodes.r9700_preflight, which passes every option from its variables.
requirements:
  - the Python package r9700ctl on the controller, at the collection's version
author: r9700ctl maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Judge the node as r9700ctl.nodes.r9700_preflight does
  r9700ctl.nodes.r9700_preflight:
    rocm_version: auto
    expected_gpus: 4
"""

RETURN = r"""
checks:
  description: Every check, with C(id), C(status) (PASS WARN FAIL SKIP), C(detail), C(fix) and C(code).
  type: list
  elements: dict
  returned: always
ansible_facts:
  description: C(r9700_resolved) (what later roles act on), C(r9700_preflight) (the checks, the facts).
  type: dict
  returned: always
"""
