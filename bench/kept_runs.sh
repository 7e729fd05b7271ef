#!/usr/bin/env bash
# A step's cost against the number of finished runs a repository keeps. Builds repositories
# with 0, 1,000 and 10,000 kept runs, then times one-step and ten-step runs of a workflow whose
# agent is `true` in each: the cost of a step is (ten-step run - one-step run) / 9, reported
# with its ratio to the repository with none. One traced run in each counts the reads of
# `/proc/locks` and the git processes it started; the read-only commands (`runs list
# --limit 20`, `journal`, `gate list`, `status`) are timed at the largest count.
#
# Kept runs are made cheaply: one real run is made, then its run directory and its refs are
# copied under new (older) run ids, its times moved to the day of the id, as a finished run
# leaves them: its refs packed into `packed-refs` and, beyond the five most recent
# (`retention`), no checkout. TNH_BENCH_CHECKOUTS=1 copies a
# worktree registration (`.git/worktrees/<run>`, and a folder holding only its `.git` file)
# and leaves the refs loose for each, as runs before retention left them.
#
# Both runs end at their limit of visits (exit 4): the same way in every repository.
#
# TNH_BENCH_BASELINE names another build timed side by side in the same repositories (its
# rounds alternate with the first's), each reported with its own ratio.
#
# Usage: bench/kept_runs.sh [COUNTS [ROUNDS]]  (defaults: "0 1000 10000", 5 rounds)
# Needs: git, python3, strace (for the counts; skipped without it). Uses the release binary if
# one is built, else the debug one (`cargo build`); TNH_BENCH_BIN names another build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
counts="${1:-0 1000 10000}"
rounds="${2:-5}"
if [ -n "${TNH_BENCH_BIN:-}" ]; then
    bin="$TNH_BENCH_BIN"
elif [ -x target/release/tnh-conductor ]; then
    bin="$PWD/target/release/tnh-conductor"
else
    cargo build --quiet --bin tnh-conductor
    bin="$PWD/target/debug/tnh-conductor"
fi
echo "binary: $bin"

# TNH_BENCH_WORK keeps the repositories in that (new) folder, for a closer look.
if [ -n "${TNH_BENCH_WORK:-}" ]; then
    work="$TNH_BENCH_WORK" && mkdir "$work"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_AUTHOR_NAME=bench \
    GIT_AUTHOR_EMAIL=bench@example.invalid GIT_COMMITTER_NAME=bench \
    GIT_COMMITTER_EMAIL=bench@example.invalid

workflow() {
    cat <<YAML
workflow_id: kept
version: 1
description: agent steps that do nothing
entry_step: work
defaults:
  limits: {max_visits: $1, max_transitions: $1}
steps:
  - id: work
    opcode: RUN_AGENT
    agent: noop
    prompt: Do nothing.
    routes:
      completed: work
      "*": STOP
YAML
}

# A repository of 20 files with a one-step and a ten-step workflow.
make_repo() {
    local repo=$1
    mkdir -p "$repo" && cd "$repo"
    git init -q -b main
    mkdir -p src .tnh
    for index in $(seq 20); do
        seq 300 | sed "s/^/line of file $index: /" > "src/f$index.txt"
    done
    printf 'agents:\n  noop: {kind: command, argv: ["true"]}\n' > .tnh/config.yaml
    workflow 1 > one.yaml
    workflow 10 > ten.yaml
    git add -A && git commit -q -m base
    cd - > /dev/null
}

# Copies the repository's one run COUNT times under new (older) run ids.
replicate() {
    python3 - "$1" "$2" <<'PY'
import os, shutil, subprocess, sys
repo, count = sys.argv[1], int(sys.argv[2])
checkouts = os.environ.get("TNH_BENCH_CHECKOUTS") == "1"
runs = os.path.join(repo, ".tnh/run")
(template,) = [name for name in os.listdir(runs) if not name.startswith(".")]
git_dir = os.path.join(repo, ".git")
refs = subprocess.run(
    ["git", "-C", repo, "for-each-ref", "--format=%(objectname) %(refname)"],
    check=True, capture_output=True, text=True).stdout.splitlines()
own = [line.split(" ", 1) for line in refs if template in line]
updates = []
def day_of(run_id):
    return ("%s-%s-%sT" % (run_id[:4], run_id[4:6], run_id[6:8])).encode()
for index in range(count):
    run = "2025%04dT%06dZ-%06x" % (101 + index // 100000, index % 100000, index)
    source = os.path.join(runs, template)
    target = os.path.join(runs, run)
    shutil.copytree(source, target)
    for folder, _, files in os.walk(target):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                data = handle.read()
            # Dated as its id says, as a run of that day: its start, end and events.
            copied = data.replace(template.encode(), run.encode()).replace(
                day_of(template), day_of(run))
            if copied != data:
                with open(path, "wb") as handle:
                    handle.write(copied)
    for sha, name in own:
        updates.append("create %s %s\n" % (name.replace(template, run), sha))
    if not checkouts:
        continue
    admin = os.path.join(git_dir, "worktrees", run)
    checkout = os.path.join(repo, ".tnh/worktrees", run)
    os.makedirs(admin)
    os.makedirs(checkout)
    with open(os.path.join(admin, "HEAD"), "w") as handle:
        handle.write("ref: refs/heads/tnh/kept/%s\n" % run)
    with open(os.path.join(admin, "gitdir"), "w") as handle:
        handle.write(os.path.join(checkout, ".git") + "\n")
    with open(os.path.join(admin, "commondir"), "w") as handle:
        handle.write("../..\n")
    with open(os.path.join(checkout, ".git"), "w") as handle:
        handle.write("gitdir: %s\n" % admin)
subprocess.run(["git", "-C", repo, "update-ref", "--stdin"], check=True,
               input="".join(updates), text=True)
if not checkouts:
    subprocess.run(["git", "-C", repo, "pack-refs", "--include=refs/tnh/*",
                    "--include=refs/heads/tnh/*"], check=True)
PY
}

median() { sort -n | awk '{ values[NR] = $1 } END { print values[int((NR + 1) / 2)] }'; }
now() { date +%s%N; }
# Milliseconds a command takes.
timed() { local start end; start=$(now); "$@" > /dev/null 2>&1 || true; end=$(now); echo $(( (end - start) / 1000000 )); }

binaries=("$bin")
[ -n "${TNH_BENCH_BASELINE:-}" ] && binaries+=("$TNH_BENCH_BASELINE")
declare -A base_step
for count in $counts; do
    repo="$work/repo-$count"
    make_repo "$repo"
    "$bin" --repo "$repo" run "$repo/one.yaml" > /dev/null 2>&1 || true
    [ "$count" -gt 0 ] && replicate "$repo" "$count"
    declare -A one ten
    for binary in "${binaries[@]}"; do one[$binary]="" ten[$binary]=""; done
    for _ in $(seq "$rounds"); do
        for binary in "${binaries[@]}"; do
            one[$binary]+="$(timed "$binary" --repo "$repo" run "$repo/one.yaml") "
            ten[$binary]+="$(timed "$binary" --repo "$repo" run "$repo/ten.yaml") "
        done
    done
    for binary in "${binaries[@]}"; do
        # shellcheck disable=SC2086
        one_ms=$(printf '%s\n' ${one[$binary]} | median)
        # shellcheck disable=SC2086
        ten_ms=$(printf '%s\n' ${ten[$binary]} | median)
        step_ms=$(awk -v one="$one_ms" -v ten="$ten_ms" 'BEGIN { printf "%.1f", (ten - one) / 9 }')
        [ -z "${base_step[$binary]:-}" ] && base_step[$binary]=$step_ms
        ratio=$(awk -v step="$step_ms" -v base="${base_step[$binary]}" 'BEGIN { printf "%.2f", step / base }')
        locks="-" gits="-"
        if command -v strace > /dev/null; then
            trace="$work/trace-$count"
            strace -f -qq -e trace=openat,execve -o "$trace" \
                "$binary" --repo "$repo" run "$repo/one.yaml" > /dev/null 2>&1 || true
            locks=$(grep -c '"/proc/locks"' "$trace" || true)
            gits=$(grep -E 'execve\("[^"]*/git"' "$trace" | grep -vc ENOENT || true)
        fi
        echo "$(basename "$binary"): kept runs $count: one-step run ${one_ms} ms," \
            "ten-step run ${ten_ms} ms, step ${step_ms} ms (${ratio}x), one-step run:" \
            "/proc/locks read ${locks} times, ${gits} git processes"
    done
done

# The read-only commands, at the largest count.
run_id=$(ls "$repo/.tnh/run" | sort | tail -n 1)
for command in "runs list --limit 20" "journal" "gate list" "status $run_id"; do
    samples=()
    for _ in $(seq "$rounds"); do
        # shellcheck disable=SC2086
        samples+=("$(timed "$bin" --repo "$repo" $command)")
    done
    echo "$command at $count kept runs: $(printf '%s\n' "${samples[@]}" | median) ms"
done
