//! What `runs list`, `runs show`, `gate list` and `journal` show of runs that are not plain
//! finished runs: a run waiting at a gate, a run whose driver was killed mid-visit, a run whose
//! `metadata.json` is damaged (listed as damaged, never hidden).

use crate::kernel_support::RunRepo;
use crate::support::{conductor, stderr_text, stdout_text};

fn waiting_run(repo: &RunRepo) -> String {
    let (code, result, output) = repo.run(&repo.workflow("gate.yaml"), &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    result["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn runs_show_lists_the_gate_a_run_waits_at() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let shown = repo.conductor(&["runs", "show", &run_id]);
    assert_eq!(shown.status.code(), Some(0), "{}", stderr_text(&shown));
    let text = stdout_text(&shown);
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with(&format!(
            "  review #1: waiting — Approve the feature of {run_id} (since "
        )),
        "{text}"
    );
    // Once decided, the visit is described by its outcome, not as waiting.
    let approved = repo.conductor(&["gate", "approve", &run_id, "--as", "lead"]);
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        stderr_text(&approved)
    );
    let text = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(!text.contains("waiting —"), "{text}");
    assert!(text.contains("  review #1: gate_approved"), "{text}");
}

#[test]
fn runs_show_says_a_killed_runs_last_visit_did_not_finish() {
    let repo = RunRepo::new();
    let killed = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(repo.workflow("crash.yaml"))
        .env("TNH_TEST_KILL_AT_EVENT", "3")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), None, "{}", stderr_text(&killed));
    let run_id = std::fs::read_dir(repo.path().join(".tnh/run"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap();
    let text = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(
        text.contains("  write #1: stopped before it finished (started ")
            && text.contains(&format!("`tnh-conductor resume {run_id}` continues it")),
        "{text}"
    );
}

#[test]
fn a_run_with_damaged_metadata_is_listed_as_damaged_not_hidden() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let metadata = repo.run_dir(&run_id).join("metadata.json");
    std::fs::write(&metadata, "{\"trunc").unwrap();
    let names_the_damage = |text: &str| {
        text.contains(&format!(
            "`{}` is not a valid run metadata",
            metadata.display()
        ))
    };

    let listed = repo.conductor(&["runs", "list"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr_text(&listed));
    assert!(
        stdout_text(&listed).contains(&format!("{run_id}  waiting    gated")),
        "{}",
        stdout_text(&listed)
    );
    assert!(
        stderr_text(&listed).contains(&format!("run {run_id} is damaged"))
            && names_the_damage(&stderr_text(&listed)),
        "{}",
        stderr_text(&listed)
    );

    let listed = repo.conductor(&["runs", "list", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(rows[0]["run_id"], run_id.as_str(), "{rows}");
    assert_eq!(rows[0]["state"], "waiting", "{rows}");
    assert!(
        names_the_damage(rows[0]["damaged"].as_str().unwrap()),
        "{rows}"
    );

    let gates = repo.conductor(&["gate", "list"]);
    let text = stdout_text(&gates);
    assert!(text.contains(&run_id) && text.contains("review"), "{text}");
    assert!(names_the_damage(&text), "{text}");

    let journal = repo.conductor(&["journal", "--format", "json"]);
    let data: serde_json::Value = serde_json::from_slice(&journal.stdout).unwrap();
    let blockers = data["blockers"].to_string();
    assert!(
        blockers.contains(&format!("{run_id} (gated.v?): its metadata is damaged"))
            && blockers.contains("is not a valid run metadata"),
        "{blockers}"
    );
    let waiting = data["pending_review"]
        .as_array()
        .unwrap()
        .iter()
        .find(|review| review["kind"] == "waiting")
        .unwrap_or_else(|| panic!("no waiting gate in {data}"));
    assert_eq!(waiting["run_id"], run_id.as_str(), "{data}");
}
