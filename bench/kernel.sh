#!/usr/bin/env bash
# Kernel overhead per step: a loop workflow whose agent is `true` runs N transitions through
# `tnh-conductor run`, next to a plain shell loop doing the same spawn and the same git capture
# work per step (snapshot into a scratch index, write-tree, diff against it). The difference per
# step is what the kernel adds: routing, events, manifests, atomic state and status writes.
#
# Usage: bench/kernel.sh [TRANSITIONS [FILES]]     (defaults: 1000 transitions, 20 files)
# Needs: cargo, git, python3. Builds in release mode.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
transitions="${1:-1000}"
files="${2:-20}"
cargo build --release --quiet
bin="$PWD/target/release/tnh-conductor"

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
  limits: {max_visits: $((transitions + 1)), max_transitions: $transitions}
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
start=$(now)
"$bin" -q run "$work/loop.yaml" >/dev/null 2>&1 || true   # ends at max_transitions (exit 4)
kernel_ns=$(( $(now) - start ))
steps=$(grep -c '"event_type":"step_completed"' .tnh/run/*/events.ndjson)
events_file=$(ls "$PWD"/.tnh/run/*/events.ndjson)

# The same spawns and git captures as the kernel's workspace module makes per agent step
# (read off `strace -f -e execve` of a run), with no kernel around them.
worktree="$(ls -d "$PWD"/.tnh/worktrees/*)"
branch="refs/heads/$(git -C "$worktree" symbolic-ref --short HEAD)"
cd "$worktree"
export GIT_INDEX_FILE="$work/scratch-index"
refs="refs/heads/ refs/tags/ refs/remotes/"
start=$(now)
for _ in $(seq "$steps"); do
    git add --all --ignore-errors; tree=$(git write-tree); git rev-parse --verify HEAD^{commit} >/dev/null  # snapshot
    git for-each-ref --format='%(objectname) %(refname)' $refs >/dev/null                                  # guard
    true < /dev/null                                                                                       # the agent
    git for-each-ref --format='%(objectname) %(refname)' $refs >/dev/null                                  # verify
    git rev-parse --verify --quiet HEAD^{commit} >/dev/null; git rev-parse --verify --quiet "$branch" >/dev/null
    git symbolic-ref --quiet HEAD >/dev/null; git show-ref --verify --quiet "$branch"
    git add --all --ignore-errors                                                                           # capture
    git diff-index --cached -p --binary -M --no-color --no-ext-diff --no-textconv "$tree" >/dev/null
    git diff-index --cached -z -M --raw --numstat --no-textconv "$tree" >/dev/null
    git add --all --ignore-errors; git write-tree >/dev/null; git rev-parse --verify HEAD^{commit} >/dev/null  # fingerprint
done
shell_ns=$(( $(now) - start ))

python3 - "$steps" "$kernel_ns" "$shell_ns" "$files" "$events_file" <<'PY'
import datetime, json, re, sys
steps, kernel, shell, files, events_file = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
events = [json.loads(line) for line in open(events_file)]
def stamp(event):
    text = re.sub(r"\.(\d{6})\d*", r".\1", event["timestamp"]).replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text).timestamp()
first = next(stamp(event) for event in events if event["event_type"] == "step_started")
# Steady state: from the first step's start to the run's last event, so the one-time worktree
# creation (checking out the repository; see bench/workspace.sh) is not spread over the steps.
steady = (stamp(events[-1]) - first) / steps * 1e3
per_kernel = kernel / steps / 1e6
per_shell = shell / steps / 1e6
print(f"repository: {files} files; {steps} agent steps")
print(f"tnh-conductor run:  {per_kernel:8.2f} ms per step, wall clock including worktree creation")
print(f"                    {steady:8.2f} ms per step from the first step on (events' timestamps)")
print(f"shell loop:         {per_shell:8.2f} ms per step (same spawn and git capture)")
print(f"kernel overhead:    {steady - per_shell:8.2f} ms per step (goal < 5 ms); ratio {steady / per_shell:.2f}x")
PY
