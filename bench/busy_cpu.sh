#!/usr/bin/env bash
# Wall time and the whole machine's busy CPU-seconds (user, nice, system, irq, softirq from
# /proc/stat) around a command: what docs/benchmarks.md's "busy CPU-s" figures are.
#   bench/busy_cpu.sh ./scripts/test.sh
#   bench/busy_cpu.sh .venv/bin/pytest -p no:cacheprovider tests/lab/test_containers_lab.py
# Other work on the machine counts too: measure with nothing else running.
set -uo pipefail
if [ $# -eq 0 ]; then
    echo "usage: bench/busy_cpu.sh COMMAND [ARG...]" >&2
    exit 64
fi
busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
ticks=$(getconf CLK_TCK)
before=$(busy)
started=$(date +%s.%N)
"$@"
status=$?
ended=$(date +%s.%N)
after=$(busy)
awk -v s="$started" -v e="$ended" -v b="$before" -v a="$after" -v t="$ticks" \
    'BEGIN { printf "wall %.1f s, busy CPU %.1f s\n", e - s, (a - b) / t }' >&2
exit $status
