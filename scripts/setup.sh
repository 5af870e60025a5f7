#!/usr/bin/env bash
# Prepare this machine for r9700ctl's demo or tests: Debian packages the lab needs, and a
# virtual environment in .venv with r9700ctl installed. Safe to run again.
#   scripts/setup.sh          runtime only (demo)
#   scripts/setup.sh --test   also the test tools and a CPU build of PyTorch (the agent's gloo tests)
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

# Debian packages: Python venv support, and what the lab uses (debootstrap, namespaces,
# sshd client, package mirror tools, the caching proxy, the container registry; nftables for the
# cluster lab's firewall fault). Only missing ones are installed.
packages=(python3 python3-venv python3-pip debootstrap apt-cacher-ng docker-registry zstd openssh-client iproute2
          dpkg-dev apt-utils gnupg util-linux procps psmisc ca-certificates git nftables)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
        exit 3
    fi
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The tests' own services and tools: Prometheus (the lab monitoring test scrapes lab nodes with
# it; promtool checks the generated configuration), headless Chromium (the HTML report test) and a
# C compiler (the kernel-line lab test builds a node's uname stand-in).
if [ $want_test = 1 ]; then
    test_missing=()
    for p in prometheus chromium fonts-dejavu-core gcc libc6-dev; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || test_missing+=("$p")
    done
    if [ ${#test_missing[@]} -gt 0 ]; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "setup: missing test packages: ${test_missing[*]} (sudo apt-get install ${test_missing[*]})" >&2
            exit 3
        fi
        echo "setup: installing ${test_missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${test_missing[@]}" >/dev/null
    fi
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
# The test environment is installed once per pyproject.toml (an editable install runs the
# source, so only a change of dependencies needs pip again): the edit loop skips a minute of pip.
stamp=.venv/.r9700ctl-test-env
wanted=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ $want_test = 1 ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ] && .venv/bin/python -c "import r9700ctl, torch, xdist" 2>/dev/null; then
    echo "setup: ready ($(.venv/bin/r9700ctl --version); test environment as installed for this pyproject.toml)"
    exit 0
fi
rm -f "$stamp"
.venv/bin/python -m pip install -q --upgrade pip
if [ $want_test = 1 ]; then
    .venv/bin/python -m pip install -q -e ".[test]"
    # CPU build of PyTorch for the agent's multi-process (gloo) tests. --no-compile: pip would compile
    # all of torch's thousands of files to bytecode; only what the tests import is compiled, on first
    # import (scripts/test.sh lets Python write it). The rest keeps pip's bytecode: r9700ctl and
    # Ansible start without compiling where PYTHONDONTWRITEBYTECODE is set (this machine sets it).
    .venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q --no-compile "torch==2.13.0"
    echo "$wanted" > "$stamp"
elif .venv/bin/python -m pip show r9700ctl 2>/dev/null | grep '^Editable project location:' >/dev/null; then  # not -q: pipefail
    # A test environment (--test installs editable) stays editable: after the demo, the tests must
    # still run the source, not a copy of it frozen at the demo's start.
    .venv/bin/python -m pip install -q -e .
else
    .venv/bin/python -m pip install -q .
fi
echo "setup: ready ($(.venv/bin/r9700ctl --version))"
