#!/usr/bin/env bash
# Kernel step time beside a plain shell loop: a loop workflow whose agent is `true` runs N
# transitions through `tnh-conductor run`, next to a shell loop doing the same spawns and the
# same git capture work per step (snapshot into a scratch index, write-tree, ref listings, diff
# against it). The shell pays a fork per command where the kernel uses posix_spawn, so this
# difference understates what the kernel adds; `cargo bench --bench kernel` measures the
# overhead itself, against the same library calls without the kernel.
#
# The machine is shared and its file system's speed drifts (a file system without a journal
# slows inode allocation for a while after many deletions, which both sides cause), so the
# kernel and the shell loop run in alternating rounds and each round is compared side by side;
# the median round is reported.
#
# Usage: bench/kernel.sh [TRANSITIONS [FILES [ROUNDS]]]  (defaults: 1000 transitions, 20 files,
#                                                          5 rounds of TRANSITIONS/ROUNDS steps)
# Needs: cargo, git, python3. Builds in release mode.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
transitions="${1:-1000}"
files="${2:-20}"
rounds="${3:-5}"
per_round=$(( transitions / rounds ))
# TNH_BENCH_BIN measures another build (for example the previous commit's) instead.
if [ -n "${TNH_BENCH_BIN:-}" ]; then
    bin="$TNH_BENCH_BIN"
else
    cargo build --release --quiet
    bin="$PWD/target/release/tnh-conductor"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
repo="$work/repo"
mkdir -p "$repo" && cd "$repo"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid
git init -q -b main
python3 - "$files" <<'PY'
import os, sys
count = int(sys.argv[1])
for index in range(count):
    folder = f"src/d{index // 1000:03d}"
    os.makedirs(folder, exist_ok=True)
    with open(f"{folder}/f{index:05d}.txt", "w") as handle:
        handle.write(("line %d of a generated file\n" % index) * 300)
PY
git add -A && git commit -q -m base
mkdir -p .tnh
printf 'agents:\n  noop: {kind: command, argv: ["true"]}\n' > .tnh/config.yaml
cat > "$work/loop.yaml" <<YAML
workflow_id: bench_loop
version: 1
description: a loop of agent steps that do nothing
entry_step: work
defaults:
  limits: {max_visits: $((per_round + 1)), max_transitions: $per_round}
steps:
  - id: work
    opcode: RUN_AGENT
    agent: noop
    prompt: Do nothing.
    routes:
      completed: work
      "*": STOP
YAML

now() { date +%s%N; }
export GIT_INDEX_FILE_SHELL="$work/scratch-index"
refs="refs/heads/ refs/tags/ refs/remotes/ refs/replace/ refs/stash refs/tnh/shell/"

# The same spawns and git captures as the kernel's workspace module makes per agent step
# (read off `strace -f -e execve` of a run), with no kernel around them. The kernel writes the
# snapshot's commit and its two refs with libgit2, in process; the loop does that git work
# with `git commit-tree` and one `git update-ref --stdin`. Like the kernel, the loop reads the
# worktree, the configuration and the operator's checkout before the first step only, then
# starts each step from what the previous one read at its end, and diffs only a changed tree;
# it writes the tree with `git write-tree`, which the kernel does in process for a small index.
shell_loop() {
    local worktree=$1 steps=$2 visit=0 tree=""
    (
        cd "$worktree"
        export GIT_INDEX_FILE="$GIT_INDEX_FILE_SHELL"
        for _ in $(seq "$steps"); do
            visit=$((visit + 1))
            if [ -z "$tree" ]; then
                git add --all --ignore-errors; tree=$(git write-tree)                                              # snapshot
                git config --list --show-origin --includes -z >/dev/null                                           # the files it names
                GIT_INDEX_FILE="$repo/.git/index" git -C "$repo" --no-optional-locks status --porcelain=v2 -z --untracked-files=all --no-renames >/dev/null  # the operator's checkout
            fi
            head=$(git rev-parse --verify HEAD^{commit})
            commit=$(git commit-tree "$tree" -p "$head" -m "pre_step work $visit")
            printf 'update refs/tnh/shell/pre_step/work/%s %s\nupdate refs/tnh/shell/latest_pre_step %s\n' \
                "$visit" "$commit" "$commit" | git update-ref --stdin
            git for-each-ref --format='%(objectname) %(refname)' $refs >/dev/null                                  # guard
            true < /dev/null                                                                                       # the agent
            git for-each-ref --format='%(objectname) %(refname)' $refs >/dev/null                                  # check
            GIT_INDEX_FILE="$repo/.git/index" git -C "$repo" --no-optional-locks status --porcelain=v2 -z --untracked-files=all --no-renames >/dev/null  # the operator's checkout
            git add --all --ignore-errors; after=$(git write-tree)                                                 # capture
            if [ "$after" != "$tree" ]; then
                git -c core.quotePath=true diff-tree -r -z --raw -p --binary -M --no-color --no-ext-diff --no-textconv "$tree" "$after" >/dev/null
            fi
            tree=$after
        done
    )
}

results="$work/rounds.txt"
for round in $(seq "$rounds"); do
    before=$(ls .tnh/run 2>/dev/null || true)
    start=$(now)
    "$bin" -q run "$work/loop.yaml" >/dev/null 2>&1 || true   # ends at max_transitions (exit 4)
    kernel_ns=$(( $(now) - start ))
    run_id=$(comm -13 <(printf '%s\n' $before | sort) <(ls .tnh/run | sort) | head -1)
    events_file="$PWD/.tnh/run/$run_id/events.ndjson"
    steps=$(grep -c '"event_type":"step_completed"' "$events_file")
    start=$(now)
    shell_loop "$PWD/.tnh/worktrees/$run_id" "$steps"
    shell_ns=$(( $(now) - start ))
    echo "$steps $kernel_ns $shell_ns $events_file" >> "$results"
done

python3 - "$files" "$results" <<'PY'
import datetime, json, re, statistics, sys
files, results = sys.argv[1], sys.argv[2]
def stamp(event):
    text = re.sub(r"\.(\d{6})\d*", r".\1", event["timestamp"]).replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text).timestamp()
rows = []
for line in open(results):
    steps, kernel, shell, events_file = line.split()
    steps, kernel, shell = int(steps), int(kernel), int(shell)
    events = [json.loads(text) for text in open(events_file)]
    first = next(stamp(event) for event in events if event["event_type"] == "step_started")
    # Steady state: from the first step's start to the run's last event, so the one-time
    # worktree creation (checking out the repository; see bench/workspace.sh) is not spread
    # over the steps.
    steady = (stamp(events[-1]) - first) / steps * 1e3
    rows.append((steps, kernel / steps / 1e6, steady, shell / steps / 1e6))
print(f"repository: {files} files; {len(rows)} rounds of {rows[0][0]} agent steps, kernel and shell loop alternating")
print("round  kernel wall  kernel steady  shell loop  overhead  ratio   (ms per step)")
for index, (steps, wall, steady, shell) in enumerate(rows, 1):
    print(f"{index:5}  {wall:11.2f}  {steady:13.2f}  {shell:10.2f}  {steady - shell:8.2f}  {steady / shell:5.2f}x")
overheads = [steady - shell for _, _, steady, shell in rows]
ratios = [steady / shell for _, _, steady, shell in rows]
steadies = [steady for _, _, steady, _ in rows]
shells = [shell for _, _, _, shell in rows]
print(f"median: kernel {statistics.median(steadies):.2f} ms per step, shell loop {statistics.median(shells):.2f} ms")
print(f"kernel overhead: {statistics.median(overheads):.2f} ms per step (median round; range "
      f"{min(overheads):.2f}..{max(overheads):.2f}; goal < 5 ms); ratio {statistics.median(ratios):.2f}x")
PY
