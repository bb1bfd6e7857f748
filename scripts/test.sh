#!/usr/bin/env bash
# The whole test suite: unit tests, and integration tests that run the real gpuhost binary
# against install roots with the real rpm and dnf (tests/). Installs missing tools first.
# The last line sums cargo's `test result:` lines over every test binary: `N passed, N failed`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/deps.sh test
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# --no-fail-fast: every test binary runs even after one fails, and the total below counts them all.
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ {
       for (i = 2; i <= NF; i++) {
         if ($i ~ /^passed;?$/) passed += $(i - 1)
         if ($i ~ /^failed;?$/) failed += $(i - 1)
       }
     }
     END { printf "%d passed, %d failed\n", passed, failed }' "$log"
exit "$status"
