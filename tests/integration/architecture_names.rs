//! Every file and folder of a run directory is named once, in src/artifacts/run_dir.rs
//! (`RunDir`) and src/artifacts/visit_dir.rs (`VisitDir`): a reader and a writer that spell a
//! name each could drift apart. Checked here: outside those two files (test modules and
//! test-only files left out), src/ spells none of the names those types list.

use std::path::Path;

use tnh_conductor::artifacts::{RunDir, VisitDir};

/// The files that name the run directory's files.
const NAMING_FILES: &[&str] = &["artifacts/run_dir.rs", "artifacts/visit_dir.rs"];

/// Every name of a run directory, as `RunDir` and `VisitDir` list them.
fn run_directory_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = RunDir::ALL.iter().chain(VisitDir::ALL).copied().collect();
    names.extend([
        VisitDir::VALIDATORS,
        VisitDir::VALIDATOR_ARTIFACTS,
        VisitDir::TOOL_LOG_PREFIX,
        VisitDir::TOOL_LOG_SUFFIX,
    ]);
    names
}

/// The text of a source file without its test module (at the end of the file, as every file
/// of src/ keeps it).
fn without_tests(text: &str) -> &str {
    let mut rest = text;
    let mut offset = 0;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        let after = match after.strip_prefix("#[path") {
            Some(path) => path
                .split_once('\n')
                .map_or("", |(_, next)| next)
                .trim_start(),
            None => after,
        };
        if after.starts_with("mod ") {
            return &text[..offset + at];
        }
        offset += at + "#[cfg(test)]".len();
        rest = &rest[at + "#[cfg(test)]".len()..];
    }
    text
}

/// Where `text` spells one of `names` as code does: a file name (one with a dot, or a
/// prefix) as a whole string literal, a folder name joined onto a path, given as a path
/// segment or starting a path. Comments are prose and left out.
fn spelled(text: &str, names: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in without_tests(text).lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        for name in names {
            let file_like = name.contains('.') || name.ends_with('-');
            let forms = if file_like {
                vec![format!("\"{name}\"")]
            } else {
                vec![
                    format!("join(\"{name}\")"),
                    format!("[\"{name}\","),
                    format!("\"{name}/"),
                ]
            };
            if forms.iter().any(|form| line.contains(form.as_str())) {
                found.push(format!("{}: `{name}`: {}", number + 1, code));
            }
        }
    }
    found
}

/// Whether a file of src/ holds only tests (a test module kept in its own file, test helpers).
fn test_only(relative: &str) -> bool {
    relative.ends_with("_tests.rs")
        || relative.ends_with("/tests.rs")
        || relative.ends_with("test_support.rs")
}

/// Every source file of src/ but the naming ones and the test-only ones, by path from src/.
fn checked_sources(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|extension| extension != "rs") {
                continue;
            }
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if !NAMING_FILES.contains(&relative.as_str()) && !test_only(&relative) {
                files.push((relative, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    files
}

#[test]
fn only_run_dir_and_visit_dir_spell_a_run_directory_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let names = run_directory_names();
    let found: Vec<String> = checked_sources(&root)
        .into_iter()
        .flat_map(|(file, text)| {
            spelled(&text, &names)
                .into_iter()
                .map(move |place| format!("src/{file}:{place}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "run-directory names spelled outside src/artifacts/run_dir.rs and visit_dir.rs — use \
         the `RunDir`/`VisitDir` constant or method instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_planted_run_directory_name_is_caught_outside_tests_and_comments() {
    let names = run_directory_names();
    let planted = "fn a(dir: &Path) -> PathBuf {\n    dir.join(\"policy_summary.json\")\n}\n\
        fn b(dir: &Path) -> PathBuf {\n    dir.join(\"rollbacks\")\n}\n\
        const C: &str = \"tnh-\";\n\
        fn d(id: &str) -> String {\n    format!(\"validators/{id}\")\n}\n\
        // prose may say \"state.json\"\n\
        fn e() -> &'static str {\n    \"the lock is held\"\n}\n\
        #[cfg(test)]\nfn helper() {}\n\
        fn f() -> &'static str {\n    \"events.ndjson\"\n}\n\
        #[cfg(test)]\nmod tests {\n    const X: &str = \"manifest.json\";\n}\n";
    let found = spelled(planted, &names);
    let lines: Vec<&str> = found
        .iter()
        .map(|place| place.split_once(':').map_or("", |(line, _)| line))
        .collect();
    assert_eq!(lines, ["2", "5", "7", "9", "18"], "{found:#?}");
    assert!(found[0].contains("`policy_summary.json`"));
    assert!(found[2].contains("`tnh-`"));
}

#[test]
fn the_listed_names_are_the_files_the_types_name() {
    let names = run_directory_names();
    for name in [
        "metadata.json",
        "events.ndjson",
        "final-state.txt",
        "lock",
        "manifest.json",
        "stopped_orphans.json",
        "validators",
    ] {
        assert!(names.contains(&name), "`{name}` is not listed");
    }
}
