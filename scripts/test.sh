#!/usr/bin/env bash
# The whole test suite: unit tests, and integration tests that run the real gpuhost binary
# against install roots with the real rpm and dnf (tests/). Installs missing tools first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/deps.sh
cargo test --workspace --locked "$@"
