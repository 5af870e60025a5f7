#!/usr/bin/env bash
# Every check the project has: lint (ruff, yamllint, ansible-lint, playbook syntax) and all
# tests (unit, render, the lab integration tests, GPU tests where a GPU exists).
# Lab tests need root; as another user they are skipped with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export PATH="$PWD/.venv/bin:$PATH"

echo "== lint"
ruff check .
ruff format --check .
yamllint -s .
ansible-lint --offline -q playbooks roles
for playbook in playbooks/*.yml; do
    ANSIBLE_ROLES_PATH=roles ansible-playbook --syntax-check -i localhost, "$playbook" >/dev/null
done

echo "== tests"
pytest -q -p no:cacheprovider "$@"
