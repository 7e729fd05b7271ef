//! The index of finished runs (`.tnh/finished-runs.json`) that lets `gate list` and `journal`
//! skip them: it learns a run only once the run finished, drops runs whose directory is gone,
//! and a damaged index reads as none, so every output is what reading each run gives.

use crate::kernel_support::RunRepo;
use crate::support::{stderr_text, stdout_text};

const INDEX: &str = ".tnh/finished-runs.json";

fn index(repo: &RunRepo) -> serde_json::Value {
    let text = std::fs::read_to_string(repo.path().join(INDEX)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn indexed(repo: &RunRepo) -> Vec<String> {
    listed(repo, "runs")
}

fn listed(repo: &RunRepo, key: &str) -> Vec<String> {
    index(repo)[key]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

fn today() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%d").to_string()
}

/// What `gate list` and the day's journal (Markdown and JSON) print.
fn views(repo: &RunRepo, day: &str) -> (String, String, String) {
    let gates = repo.conductor_exits(&["gate", "list"], 0);
    let markdown = repo.conductor_exits(&["journal", "--date", day], 0);
    let json = repo.conductor_exits(&["journal", "--date", day, "--format", "json"], 0);
    // A gate's age (`now`, `3s`) moves on between two calls: left out.
    let gate_lines: Vec<String> = stdout_text(&gates)
        .lines()
        .map(|line| {
            let mut words: Vec<&str> = line.split_whitespace().collect();
            if words.len() > 2 && line.starts_with(|first: char| first.is_ascii_digit()) {
                words.remove(1);
            }
            words.join(" ")
        })
        .collect();
    (
        format!("{}\n{}", gate_lines.join("\n"), stderr_text(&gates)),
        stdout_text(&markdown),
        stdout_text(&json),
    )
}

/// The same views with no index at all: each run read from its files.
fn views_without_index(repo: &RunRepo, day: &str) -> (String, String, String) {
    let _ = std::fs::remove_file(repo.path().join(INDEX));
    let seen = views(repo, day);
    // The first command wrote it again; the views read from it match.
    assert!(repo.path().join(INDEX).is_file());
    seen
}

fn run_id(result: &serde_json::Value) -> String {
    result["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn a_run_is_indexed_only_once_it_finished_and_a_damaged_index_reads_as_none() {
    let repo = RunRepo::new();
    let (completed, _) = repo.run_exits(&repo.workflow("linear.yaml"), &[], 0);
    let (code, waiting, output) = repo.run(&repo.workflow("gate.yaml"), &[]);
    assert_eq!(code, Some(3), "{waiting}{}", stderr_text(&output));
    let waiting = run_id(&waiting);
    let day = today();

    let before = views_without_index(&repo, &day);
    assert!(before.0.contains(&waiting), "{}", before.0);
    assert_eq!(indexed(&repo), [completed.as_str()], "a waiting run is not");
    assert_eq!(index(&repo)["runs"][&completed]["ended"], day.as_str());
    assert_eq!(views(&repo, &day), before, "read through the index");

    // The waiting run ends after the index was written: it is read as before, and learned.
    repo.conductor_exits(&["runs", "abandon", &waiting, "--reason", "not needed"], 0);
    let after = views(&repo, &day);
    assert!(!after.0.contains(&waiting), "{}", after.0);
    assert!(after.1.contains("## Abandoned"), "{}", after.1);
    let mut both = vec![completed.clone(), waiting.clone()];
    both.sort();
    assert_eq!(indexed(&repo), both);
    assert_eq!(views_without_index(&repo, &day), after);

    // Garbled, from a newer release, or not a file: read as no index, and written anew.
    for damage in [
        "{\"schema_version\": 1, \"runs\": {",
        "{\"schema_version\": 999, \"runs\": {}}",
        "\u{0}\u{1}",
    ] {
        std::fs::write(repo.path().join(INDEX), damage).unwrap();
        assert_eq!(views(&repo, &day), after, "{damage:?}");
        assert_eq!(indexed(&repo), both, "{damage:?}");
    }
    std::fs::remove_file(repo.path().join(INDEX)).unwrap();
    std::fs::create_dir(repo.path().join(INDEX)).unwrap();
    assert_eq!(views(&repo, &day), after, "a folder in its place");
    assert_eq!(indexed(&repo), both, "the folder was replaced");

    // Removed runs leave it for its list of removed runs, whose kept records the journal
    // reads as before.
    views(&repo, &day);
    repo.conductor_exits(&["runs", "clean", "--all"], 0);
    assert_eq!(views(&repo, &day), after);
    assert_eq!(indexed(&repo), Vec::<String>::new());
    assert_eq!(listed(&repo, "removed"), both);
    assert_eq!(views_without_index(&repo, &day), after);
    // A kept record removed in turn leaves it too.
    std::fs::remove_file(repo.path().join(format!(".tnh/history/{waiting}.json"))).unwrap();
    views(&repo, &day);
    assert_eq!(listed(&repo, "removed"), [completed.as_str()]);
}

/// A run of other days: the index keeps the days its metadata records, so the journal of each
/// day reads the same with the index as without it.
#[test]
fn the_journal_of_every_day_reads_the_same_with_the_index() {
    let repo = RunRepo::new();
    let (earlier, _) = repo.run_exits(&repo.workflow("linear.yaml"), &[], 0);
    let (later, _) = repo.run_exits(&repo.workflow("linear.yaml"), &[], 0);
    let redate = |run_id: &str, started: &str, ended: &str| {
        let path = repo.run_dir(run_id).join("metadata.json");
        let mut metadata: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        metadata["started_at"] = started.into();
        metadata["ended_at"] = ended.into();
        std::fs::write(&path, metadata.to_string()).unwrap();
    };
    redate(&earlier, "2026-01-01T23:50:00Z", "2026-01-02T00:10:00Z");
    redate(&later, "2026-01-03T08:00:00Z", "2026-01-03T09:00:00Z");
    let day = today();
    for date in ["2025-12-31", "2026-01-01", "2026-01-02", "2026-01-03", &day] {
        let without = views_without_index(&repo, date);
        assert_eq!(views(&repo, date), without, "{date}");
    }
    assert_eq!(index(&repo)["runs"][&earlier]["started"], "2026-01-01");
    assert_eq!(index(&repo)["runs"][&earlier]["ended"], "2026-01-02");
    let since = |repo: &RunRepo| {
        stdout_text(&repo.conductor_exits(&["journal", "--since", "2026-01-02"], 0))
    };
    let with_index = since(&repo);
    std::fs::remove_file(repo.path().join(INDEX)).unwrap();
    assert_eq!(since(&repo), with_index);
    assert!(with_index.contains(&earlier) && with_index.contains(&later));

    // The same once the runs were removed: read from the records kept of them.
    let days = ["2025-12-31", "2026-01-01", "2026-01-02", "2026-01-03", &day];
    let before: Vec<_> = days.iter().map(|date| views(&repo, date)).collect();
    repo.conductor_exits(&["runs", "clean", "--all"], 0);
    for (date, before) in days.iter().zip(&before) {
        assert_eq!(&views_without_index(&repo, date), before, "{date}");
        assert_eq!(&views(&repo, date), before, "{date}");
    }
    assert_eq!(index(&repo)["removed"][&later]["started"], "2026-01-03");
    assert_eq!(since(&repo), with_index);
}
