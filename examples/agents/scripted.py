#!/usr/bin/env python3
"""A scripted coding agent for offline runs and tests (a `command` agent profile).

It reads its prompt on stdin and carries out the directives it finds there, one per line, in
its working directory (the run's worktree). Everything else in the prompt is ignored, so the
directives can sit inside a normal task prompt.

    WRITE path: text          write a file (\\n in text becomes a newline); folders are created
    APPEND path: text         append a line to a file
    DELETE path               delete a file
    SAY text                  the final message (printed last)
    FAIL text                 print text to stderr and exit 1
    EXIT n                    exit with status n after the other directives
    ONCE directive            the directive applies on the first visit of the step only
    AFTER_FIRST directive     the directive applies from the second visit on

The visit is taken from TNH_STEP_DIR (`…/artifacts/<step>/<visit>`).
"""

import os
import sys


def visit_number():
    step_dir = os.environ.get("TNH_STEP_DIR", "")
    tail = os.path.basename(step_dir.rstrip("/"))
    return int(tail) if tail.isdigit() else 1


def main():
    prompt = sys.stdin.read()
    visit = visit_number()
    said = []
    status = 0
    for raw in prompt.splitlines():
        line = raw.strip()
        if line.startswith("ONCE "):
            if visit != 1:
                continue
            line = line[len("ONCE "):]
        elif line.startswith("AFTER_FIRST "):
            if visit == 1:
                continue
            line = line[len("AFTER_FIRST "):]
        verb, _, rest = line.partition(" ")
        if verb in ("WRITE", "APPEND"):
            path, _, text = rest.partition(": ")
            folder = os.path.dirname(path)
            if folder:
                os.makedirs(folder, exist_ok=True)
            mode = "w" if verb == "WRITE" else "a"
            with open(path, mode, encoding="utf-8") as handle:
                handle.write(text.replace("\\n", "\n") + ("\n" if verb == "APPEND" else ""))
            print(f"{verb.lower()} {path}", flush=True)
        elif verb == "DELETE":
            os.remove(rest)
            print(f"deleted {rest}", flush=True)
        elif verb == "SAY":
            said.append(rest)
        elif verb == "FAIL":
            print(rest, file=sys.stderr, flush=True)
            return 1
        elif verb == "EXIT":
            status = int(rest)
    for message in said:
        print(message, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
