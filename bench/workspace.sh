#!/usr/bin/env bash
# Reproduces the workspace benchmark of docs/workspace.md: worktree creation, snapshot,
# status, diff and rollback of tnh_conductor::workspace, each next to the git CLI doing the
# same work, on a generated repository (default 20,000 files of 10 KiB, about 200 MB).
#
# Usage: bench/workspace.sh [FILES [FILE_BYTES [ITERATIONS]]]
# Needs: cargo, git. Builds in release mode (several minutes the first time).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

export TNH_BENCH_FILES="${1:-${TNH_BENCH_FILES:-20000}}"
export TNH_BENCH_FILE_BYTES="${2:-${TNH_BENCH_FILE_BYTES:-10240}}"
export TNH_BENCH_ITERATIONS="${3:-${TNH_BENCH_ITERATIONS:-5}}"

echo "git: $(git --version)" >&2
echo "files: $TNH_BENCH_FILES x $TNH_BENCH_FILE_BYTES bytes, $TNH_BENCH_ITERATIONS iterations" >&2
exec cargo bench --bench workspace
