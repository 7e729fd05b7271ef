#!/usr/bin/env bash
# The viewer's speed goals, against a real `serve` on loopback:
#   - the runs page of a repository with COUNT runs (goal: under 200 ms), unfiltered and
#     filtered by state (the first filtered load may add the finished runs to
#     `.tnh/finished-runs.json`; the median is of the loads after it);
#   - the page of a run with VISITS visits (goal: under 200 ms);
#   - an event on an open page: the time from appending a line to `events.ndjson` to its
#     delivery on the page's event stream (goal: under 1 s).
#
# Runs are made as bench/kept_runs.sh makes them: one real run, copied under older run ids.
# The run with many visits is a real run of a workflow whose agent is `true`, looping until
# its limit of visits.
#
# TNH_BENCH_BASELINE names another build timed side by side in the same repositories.
#
# Usage: bench/viewer.sh [COUNT [VISITS [ROUNDS]]]  (defaults: 10000, 500, 5)
# Needs: git, python3. Uses the release binary if one is built, else the debug one
# (`cargo build`); TNH_BENCH_BIN names another build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
count="${1:-10000}"
visits="${2:-500}"
rounds="${3:-5}"
if [ -n "${TNH_BENCH_BIN:-}" ]; then
    bin="$TNH_BENCH_BIN"
elif [ -x target/release/tnh-conductor ]; then
    bin="$PWD/target/release/tnh-conductor"
else
    cargo build --quiet --bin tnh-conductor
    bin="$PWD/target/debug/tnh-conductor"
fi
echo "binary: $bin"

work=$(mktemp -d)
servers=()
url=""
cleanup() {
    for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_AUTHOR_NAME=bench \
    GIT_AUTHOR_EMAIL=bench@example.invalid GIT_COMMITTER_NAME=bench \
    GIT_COMMITTER_EMAIL=bench@example.invalid

workflow() {
    cat <<YAML
workflow_id: viewer
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

make_repo() {
    local repo=$1
    mkdir -p "$repo/.tnh" && cd "$repo"
    git init -q -b main
    echo base > file.txt
    printf 'agents:\n  noop: {kind: command, argv: ["true"]}\n' > .tnh/config.yaml
    workflow 1 > one.yaml
    workflow "$visits" > many.yaml
    git add -A && git commit -q -m base
    cd - > /dev/null
}

# Copies the repository's one run COUNT times under new (older) run ids, dated as their ids.
replicate() {
    python3 - "$1" "$2" <<'PY'
import os, shutil, sys
repo, count = sys.argv[1], int(sys.argv[2])
runs = os.path.join(repo, ".tnh/run")
(template,) = [name for name in os.listdir(runs) if not name.startswith(".")]
def day_of(run_id):
    return ("%s-%s-%sT" % (run_id[:4], run_id[4:6], run_id[6:8])).encode()
for index in range(count):
    run = "2025%04dT%06dZ-%06x" % (101 + index // 100000, index % 100000, index)
    target = os.path.join(runs, run)
    shutil.copytree(os.path.join(runs, template), target)
    for folder, _, files in os.walk(target):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                data = handle.read()
            copied = data.replace(template.encode(), run.encode()).replace(
                day_of(template), day_of(run))
            if copied != data:
                with open(path, "wb") as handle:
                    handle.write(copied)
PY
}

# Starts `serve` of the repository with BINARY; sets `url` to its URL (with the token).
serve() {
    local binary=$1 repo=$2 out="$work/serve-${#servers[@]}"
    "$binary" --repo "$repo" serve --addr 127.0.0.1:0 > "$out" 2>/dev/null &
    servers+=("$!")
    # Its first line is the URL; read it as soon as it is written.
    url=$(python3 - "$out" <<'PY'
import sys, time
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    with open(sys.argv[1]) as handle:
        line = handle.readline()
    if line.endswith("\n"):
        print(line.strip())
        sys.exit(0)
    time.sleep(0.01)
sys.exit("serve printed no URL")
PY
)
}

# Median milliseconds of ROUNDS loads of PATH from the server at URL (after one warm-up).
page_ms() {
    python3 - "$1" "$2" "$rounds" <<'PY'
import sys, time, urllib.request
url, path, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
base, token = url.split("/?token=")
def load():
    request = urllib.request.Request(base + path,
                                     headers={"Cookie": "tnh_viewer_token=" + token})
    start = time.monotonic()
    with urllib.request.urlopen(request, timeout=120) as answer:
        body = answer.read()
        assert answer.status == 200, answer.status
    return (time.monotonic() - start) * 1000, body
load()
samples = sorted(load()[0] for _ in range(rounds))
print("%.0f" % samples[len(samples) // 2])
PY
}

# Median milliseconds from appending an event to its delivery on the run's event stream.
event_ms() {
    python3 - "$1" "$2" "$3" "$rounds" <<'PY'
import os, socket, sys, time, json
url, run_dir, run_id, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
base, token = url.split("/?token=")
host = base[len("http://"):]
address, port = host.rsplit(":", 1)
events = os.path.join(run_dir, "events.ndjson")
samples = []
for round_number in range(rounds):
    offset = os.path.getsize(events)
    stream = socket.create_connection((address, int(port)), timeout=30)
    stream.sendall(("GET /r/0/%s/events?from=%d HTTP/1.1\r\nHost: %s\r\n"
                    "Cookie: tnh_viewer_token=%s\r\nAccept: text/event-stream\r\n\r\n"
                    % (run_id, offset, host, token)).encode())
    received = b""
    while b"\r\n\r\n" not in received:
        received += stream.recv(65536)
    marker = "bench-%d-%d" % (os.getpid(), round_number)
    with open(events) as handle:
        seq = sum(1 for _ in handle) + 1
    # A visit's start, as the driver writes it, under a step name of its own.
    line = json.dumps({"schema_version": 1, "seq": seq, "timestamp": "2026-01-01T00:00:00Z",
                       "run_id": run_id, "step_id": marker, "visit": 1,
                       "event_type": "step_started", "opcode": "RUN_AGENT"},
                      separators=(",", ":")) + "\n"
    start = time.monotonic()
    with open(events, "a") as handle:
        handle.write(line)
    while marker.encode() not in received:
        chunk = stream.recv(65536)
        if not chunk:
            sys.exit("the event stream closed before the event arrived")
        received += chunk
    samples.append((time.monotonic() - start) * 1000)
    stream.close()
samples.sort()
print("%.0f" % samples[len(samples) // 2])
PY
}

binaries=("$bin")
[ -n "${TNH_BENCH_BASELINE:-}" ] && binaries+=("$TNH_BENCH_BASELINE")

# The repository of COUNT runs.
runs_repo="$work/runs"
make_repo "$runs_repo"
"$bin" --repo "$runs_repo" run "$runs_repo/one.yaml" > /dev/null 2>&1 || true
[ "$count" -gt 1 ] && replicate "$runs_repo" "$((count - 1))"

# The run of VISITS visits: it ends at its limit of visits, as every run of it does.
visits_repo="$work/visits"
make_repo "$visits_repo"
"$bin" --repo "$visits_repo" run "$visits_repo/many.yaml" > /dev/null 2>&1 || true
many_run=$(ls "$visits_repo/.tnh/run" | grep -v '^\.' | tail -n 1)

for binary in "${binaries[@]}"; do
    name=$(basename "$binary")
    serve "$binary" "$runs_repo"
    echo "$name: runs page, $count runs: $(page_ms "$url" /) ms (goal < 200)"
    echo "$name: runs page filtered by state, $count runs: $(page_ms "$url" '/?state=failed') ms (goal < 200)"
    echo "$name: runs page filtered by workflow, $count runs: $(page_ms "$url" '/?workflow=viewer') ms"
    serve "$binary" "$visits_repo"
    echo "$name: run page, $visits visits: $(page_ms "$url" "/r/0/$many_run") ms (goal < 200)"
    echo "$name: event appended to delivered on the stream: $(event_ms "$url" \
        "$visits_repo/.tnh/run/$many_run" "$many_run") ms (goal < 1000)"
done
