#!/usr/bin/env bash
# Startup cost of the agent commands: `tnh context` and `tnh diff --stat` next to
# `git diff --stat` on the same small repository, interleaved, median of N runs each.
# Goal: both within 3x of git's wall time.
#
# Usage: bench/tnh.sh [RUNS]      (default 100)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs="${1:-100}"
cargo build --release --quiet --bin tnh
tnh="$PWD/target/release/tnh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@x GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@x
git init -q -b main
for i in $(seq 1 50); do mkdir -p "src/m$((i % 5))"; printf 'line %s\n' $(seq 1 40) > "src/m$((i % 5))/f$i.txt"; done
git add -A && git commit -q -m base
for i in 1 2 3; do echo change >> "src/m$i/f$i.txt"; done
echo new > src/new.txt

python3 - "$runs" "$tnh" <<'PY'
import statistics, subprocess, sys, time
runs, tnh = int(sys.argv[1]), sys.argv[2]
commands = {
    "git diff --stat": ["git", "diff", "--stat"],
    "tnh diff --stat": [tnh, "diff", "--stat"],
    "tnh context": [tnh, "context"],
}
times = {name: [] for name in commands}
for _ in range(runs):
    for name, argv in commands.items():  # interleaved, so load hits all alike
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times[name].append(time.perf_counter() - start)
base = statistics.median(times["git diff --stat"])
for name, samples in times.items():
    median = statistics.median(samples)
    print(f"{name:18} median {median * 1000:6.2f} ms   ratio to git diff --stat {median / base:4.2f}x (goal <= 3x)")
PY
