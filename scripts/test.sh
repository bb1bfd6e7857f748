#!/usr/bin/env bash
# The whole test suite: unit tests, and integration tests that run the real gpuhost binary
# against install roots with the real rpm and dnf (tests/). Installs missing tools first.
# The last line sums cargo's `test result:` lines over every test binary: `N passed, N failed`.
# The suite leaves nothing outside target/ and the clone: what is new afterwards at the top of
# $HOME (and of ~/.cache, ~/.config, ~/.local/share, ~/.cargo/bin) or of the temp dir
# ($TMPDIR, default /tmp) is named on stderr and fails the run (exit 1 when cargo passed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/deps.sh test
tmp=${TMPDIR:-/tmp}
# The entries a run could leave behind, one per line, sorted.
leftovers() {
  {
    find "$HOME" "$tmp" -mindepth 1 -maxdepth 1 2>/dev/null || true
    for d in .cache .config .local/share .cargo/bin; do
      if [ -d "$HOME/$d" ]; then find "$HOME/$d" -mindepth 1 -maxdepth 1 2>/dev/null || true; fi
    done
  } | sort
}
log=$(mktemp)
before=$(mktemp)
trap 'rm -f "$log" "$before"' EXIT
leftovers >"$before"
status=0
# --no-fail-fast: every test binary runs even after one fails, and the total below counts them all.
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
left=$(leftovers | comm -13 "$before" - | grep -vxF -e "$log" -e "$before" || true)
if [ -n "$left" ]; then
  echo "test.sh: the suite left these outside target/ and the clone:" >&2
  sed 's/^/  /' <<<"$left" >&2
  [ "$status" -ne 0 ] || status=1
fi
awk '/^test result:/ {
       for (i = 2; i <= NF; i++) {
         if ($i ~ /^passed;?$/) passed += $(i - 1)
         if ($i ~ /^failed;?$/) failed += $(i - 1)
       }
     }
     END { printf "%d passed, %d failed\n", passed, failed }' "$log"
exit "$status"
