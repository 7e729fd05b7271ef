#!/usr/bin/env bash
# Reproduces every figure of the README's performance section, each side by side with its
# baseline, and prints the ratios. Release builds; takes a while on 2 cores (the 20,000-file
# workspace benchmark dominates). Needs cargo, git, python3.
#
# Usage: bench/all.sh [--quick]      (--quick: smaller workspace and kernel runs)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
quick=${1:-}

section() { printf '\n== %s ==\n' "$1"; }

section "validate: a generated 10,000-step workflow (goal < 100 ms), growth 100 → 10,000"
cargo bench --quiet --bench validate

section "runner: 1 GiB capture vs cat > file (ratio ≥ 0.8), timers, SIGTERM-ignoring group, process search"
cargo bench --quiet --bench runner

section "script: a compiled Rhai helper (< 5 µs), 100 cold expressions (< 1 ms)"
cargo bench --quiet --bench script

section "workspace: worktree, snapshot, status, diff, rollback vs the git CLI"
if [ "$quick" = --quick ]; then
    TNH_BENCH_FILES=2000 bench/workspace.sh
else
    bench/workspace.sh
fi

section "tnh: diff --stat and context startup vs git diff --stat (goal ≤ 3×)"
bench/tnh.sh

section "kernel: overhead per agent step within the run, and vs the same agent and git calls without the kernel (goal < 5 ms)"
if [ "$quick" = --quick ]; then
    TNH_BENCH_TRANSITIONS=200 TNH_BENCH_ROUNDS=4 cargo bench --quiet --bench kernel
else
    cargo bench --quiet --bench kernel
    # The same with the run's files on tmpfs: the kernel's own work, without the disk's fsyncs.
    if [ -d /dev/shm ]; then
        TMPDIR=/dev/shm cargo bench --quiet --bench kernel
    fi
    TNH_BENCH_FILES=20000 cargo bench --quiet --bench kernel
fi

section "kernel: step time vs a shell loop making the same git processes"
if [ "$quick" = --quick ]; then
    bench/kernel.sh 100
else
    bench/kernel.sh 1000 20 10
fi

section "viewer: runs page at 10,000 runs, a run of 500 visits (< 200 ms), an event delivered (< 1 s)"
if [ "$quick" = --quick ]; then
    bench/viewer.sh 1000 50 3
else
    bench/viewer.sh
fi
