#!/usr/bin/env bash
# The whole test suite: unit tests, and integration tests that run the real gpuhost binary
# against install roots with the real rpm and dnf (tests/). Installs missing tools first.
# The last line sums cargo's `test result:` lines over every test binary: `N passed, N failed`.
# The suite leaves nothing outside target/ and the clone (its /tmp is target/test-tmp, below):
# what is new afterwards at the top of
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
# The suite's /tmp is a folder of its own, target/test-tmp, bind-mounted over /tmp in a private
# mount namespace (root, a clone outside /tmp; the same paths, so nothing else changes): what a process the
# tests run leaves there — dnf's scratch files when a test kills a transaction, a Python tool's
# temp folders — stays under target/ and is removed below. The build host's /tmp and $HOME are
# still compared before and after.
scratch="$PWD/target/test-tmp"
rm -rf "$scratch"
mkdir -p "$scratch"
chmod 1777 "$scratch"
private=()
case "$PWD/" in
  # A clone under /tmp would be hidden by its own /tmp: there the build host's /tmp stays.
  /tmp/*) ;;
  *)
    if [ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2>/dev/null; then
      private=(unshare --mount --propagation private sh -c 'mount --bind "$0" /tmp && exec "$@"' "$scratch")
    fi
    ;;
esac
# --no-fail-fast: every test binary runs even after one fails, and the total below counts them all.
"${private[@]}" cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
if [ -n "$(ls -A "$scratch")" ]; then
  echo "test.sh: removing what the suite left in its own /tmp ($(ls -A "$scratch" | wc -l) entries, target/test-tmp)" >&2
fi
rm -rf "$scratch"
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
