#!/usr/bin/env bash
# Every check the project has: lint (ruff, yamllint, ansible-lint, playbook syntax) and all
# tests (unit, render, the lab integration tests, GPU tests where a GPU exists).
# Lab tests need root; as another user they are skipped with the reason.
# Each stage prints its name when it starts and its time when it ends.
#   scripts/test.sh            everything (the README's test command; CI runs it)
#   scripts/test.sh --fast     the edit loop: lint, unit and render tests on both cores (no lab)
# Pytest workers: one more than cores; R9700CTL_TEST_WORKERS=N sets another count (a container whose
# CPU quota is below what nproc reports, a large host where many lab files at once would crowd it).
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0
if [ "${1:-}" = "--fast" ]; then
    fast=1
    shift
fi
workers=${R9700CTL_TEST_WORKERS:-$(($(nproc) + 1))}
if ! [[ $workers =~ ^[1-9][0-9]*$ ]]; then
    echo "error: R9700CTL_TEST_WORKERS=$workers is not a count of pytest workers (a whole number, 1 or more; unset it for cores + 1)" >&2
    exit 64
fi
# What a run takes on this 2-core machine with the lab's root file system cached (the first lab
# test builds it once: add about 5 minutes); lab tests need root, without it they are skipped.
if [ $fast = 1 ]; then
    echo "r9700ctl tests (--fast): setup ~5 s once installed, lint ~25 s, unit and render ~2.5-3 min;" \
        "extra arguments go to pytest"
else
    echo "r9700ctl tests: setup ~5 s once installed (a fresh clone: ~1 min), lint ~20 s, tests ~13.5-15 min, as fast as the machine is that hour (~16.5-17.5 when the lab snapshots are made)" \
        "as root on 2 cores (~3 min without the lab tests); extra arguments go to pytest"
fi

stage_started=0
stage() {  # stage NAME: close the previous stage with its time, open the next
    local now
    now=$(date +%s)
    if [ "$stage_started" -ne 0 ]; then
        echo "== done in $((now - stage_started)) s"
    fi
    stage_started=$now
    [ -n "${1:-}" ] && echo "== $1 ($(date -u +%H:%M:%S) UTC)"
    return 0
}

trap 'stage ""' EXIT  # the last stage's time, also when it fails
# Bytecode for the checkout's own package (r9700ctl/, plugins/; __pycache__ is ignored by git, the
# collection build and the content digest): every r9700ctl run, pytest worker and Ansible worker that
# runs preflight imports it, and an environment that sets PYTHONDONTWRITEBYTECODE (this machine's
# does) has each of them compile it again (0.3 s of a 6-node provision that changes nothing).
unset PYTHONDONTWRITEBYTECODE
stage "setup"
scripts/setup.sh --test
export PATH="$PWD/.venv/bin:$PATH"

stage "lint"
ruff check .
ruff format --check .
yamllint -s .
# The checkout is the collection r9700ctl.nodes (galaxy.yml): lint and syntax-check it as Ansible
# loads it, through a collections path that links to this checkout (what r9700ctl does per run).
collections=$(mktemp -d)
trap 'rm -rf "$collections"; stage ""' EXIT
mkdir -p "$collections/ansible_collections/r9700ctl"
ln -s "$PWD" "$collections/ansible_collections/r9700ctl/nodes"
export ANSIBLE_COLLECTIONS_PATH="$collections"
ansible-lint --offline -q
# One ansible-playbook for all of them (it checks each in turn and stops at the first error).
names=()
for playbook in playbooks/*.yml; do
    names+=("r9700ctl.nodes.$(basename "$playbook" .yml)")
done
ansible-playbook --syntax-check -i localhost, "${names[@]}" >/dev/null
unset ANSIBLE_COLLECTIONS_PATH

if [ $fast = 1 ]; then
    # One worker more than cores: several unit tests wait on child processes and deadlines (the
    # cluster process tree, gloo ranks that never join), and a third worker fills those waits
    # (on 2 cores: 133 s with 3 workers, 166 s with 2, 140 s with 4).
    stage "tests (unit, render)"
    pytest -q -p no:cacheprovider -n "$workers" tests/unit tests/render "$@"
else
    # A file at a time per worker: a lab file's tests share its module's labs (and test_provision.py
    # the session's provisioned lab), so they stay on one worker; the longest lab files start first
    # (tests/lab/conftest.py). One worker more than cores, as for --fast: lab tests wait too (the
    # cluster network's iperf3 rounds, timeouts of nodes that do not answer, gloo ranks that never
    # join), and with two workers on 2 cores about an eighth of the CPU stayed idle.
    # (loadgroup: pytest 9.2 ignores xdist 3.8's groups.) --no-loadscope-reorder keeps that order:
    # xdist 3.8 otherwise hands out the files with the most tests first, which started the 7-test
    # lifecycle file (the longest) after files of 90 unit tests.
    stage "tests"
    pytest -q -p no:cacheprovider -n "$workers" --dist loadfile --no-loadscope-reorder --durations=15 "$@"
fi
