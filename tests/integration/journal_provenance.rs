//! The journal's Provenance section stays readable for a run that loops: the Markdown lists
//! each step's last transcript and how many earlier visits it leaves out; the JSON format,
//! whose schema lists every transcript, keeps them all.

use crate::kernel_support::RunRepo;
use crate::support::stdout_text;

/// Fails (exit 1) on its first four visits, succeeds on the fifth.
const AGENT: &str = "#!/bin/sh
cat > /dev/null
visit=$(basename \"$TNH_STEP_DIR\")
echo \"visit $visit\" >> visits.txt
echo \"visit $visit\"
[ \"$visit\" -ge 5 ]
";

const LOOP: &str = "workflow_id: looping
version: 1
description: an agent step tried until it succeeds, then another
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: looper
    prompt: try again
    routes:
      completed: polish
      \"*\": work
  - id: polish
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE polish.txt: polished
    routes:
      \"*\": STOP
";

/// The journal printed one `Transcript:` line per agent visit — 250
/// lines for a 250-visit loop.
#[test]
fn the_journal_lists_each_steps_last_transcript_and_counts_the_earlier_visits() {
    let repo = RunRepo::new();
    let agent = repo.repo.write(".tnh/looper.sh", AGENT);
    let config = repo.path().join(".tnh/config.yaml");
    let text = format!(
        "{}  looper:\n    kind: command\n    argv: [sh, \"{}\"]\n",
        std::fs::read_to_string(&config).unwrap(),
        agent.display()
    );
    std::fs::write(&config, text).unwrap();
    let workflow = repo.workflow_text("loop.yaml", LOOP);
    let (run, _) = repo.run_exits(&workflow, &[], 0);
    let run_id = run.as_str();

    let journal = stdout_text(&repo.conductor_exits(&["journal"], 0));

    let run_dir = format!(".tnh/run/{run_id}");
    let transcripts: Vec<&str> = journal
        .lines()
        .filter(|line| line.trim_start().starts_with("- Transcript:"))
        .collect();
    assert_eq!(
        transcripts,
        [
            format!("  - Transcript: {run_dir}/artifacts/work/5/transcript.md"),
            format!("  - Transcript: {run_dir}/artifacts/polish/1/transcript.md"),
        ],
        "{journal}"
    );
    assert!(
        journal.contains(&format!(
            "  - (4 earlier visits not listed: each visit's transcript is artifacts/STEP/VISIT/transcript.md of the run directory; `tnh-conductor runs show {run_id}` lists the visits)"
        )),
        "{journal}"
    );
    // The JSON keeps every transcript, as its schema says.
    let json = repo.conductor_exits(&["journal", "--format", "json"], 0);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let listed = json["provenance"][0]["transcripts"].as_array().unwrap();
    assert_eq!(listed.len(), 6, "{json:#}");
    assert_eq!(
        listed[0],
        format!("{run_dir}/artifacts/work/1/transcript.md").as_str()
    );
    assert!(
        json["provenance"][0].get("transcript_steps").is_none(),
        "the JSON format is unchanged: {json:#}"
    );
}
