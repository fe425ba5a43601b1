#!/usr/bin/env bash
# The project's test command: install test dependencies, build the workspace,
# run the Rust tests, then the Python integration tests against the built
# `gradus` binary.  Exits nonzero if any stage fails.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh -k differential # extra arguments go to pytest
#
# Environment: GRADUS_BIN overrides the binary under test; GRADUS_DIFF_SEEDS
# raises the number of differential-test seeds (see tests/python/conftest.py).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

step() { printf '\n==> %s\n' "$*"; }

step "dependencies"
scripts/install-deps.sh

step "cargo build --workspace"
cargo build --workspace

status=0
step "cargo test --workspace"
if ! cargo test --workspace; then
    echo "scripts/test.sh: cargo test failed" >&2
    status=1
fi

target_dir="${CARGO_TARGET_DIR:-target}"
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
export GRADUS_BIN="${GRADUS_BIN:-$target_dir/debug/gradus}"

step "python integration tests (gradus: $GRADUS_BIN)"
if [ "$status" -ne 0 ]; then
    echo "scripts/test.sh: running the integration tests anyway; cargo test failed above" >&2
fi
pytest_status=0
python3 -m pytest -q tests/python "$@" || pytest_status=$?
if [ "$pytest_status" -ne 0 ]; then
    status=$pytest_status
fi
exit "$status"
