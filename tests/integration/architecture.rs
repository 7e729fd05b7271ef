//! The layers of docs/reference/architecture.md, checked: a module of src/ refers (`crate::…`)
//! only to modules of its own layer or below, and no modules use each other, not even within a
//! layer. The references that still go up are listed in `UPWARD`, to be moved down one by
//! one: a new one fails, and so does a listed one that is gone (the list only shrinks).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level modules, bottom layer first (as docs/reference/architecture.md draws them).
const LAYERS: &[&[&str]] = &[
    &["ids", "text", "outcome", "exit", "document", "proc"],
    &["artifacts"],
    &["script", "prompt"],
    &["workflow"],
    &["config", "runner"],
    &["workspace", "policy"],
    &["planner"],
    &["kernel"],
    &["tnh", "doctor", "demo", "viewer"],
    &["cli", "error"],
];

/// References that go up a layer today, as `from -> to`.
const UPWARD: &[&str] = &[];

/// Each module's layer.
fn layer_of() -> BTreeMap<&'static str, usize> {
    LAYERS
        .iter()
        .enumerate()
        .flat_map(|(layer, modules)| modules.iter().map(move |module| (*module, layer)))
        .collect()
}

/// The top-level modules a source text refers to through `crate::`, test modules left out:
/// `crate::x::…` and each name of `use crate::{x::…, y, …}`.
fn referenced(text: &str) -> BTreeSet<String> {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = matching_brace(group);
            let mut depth = 0;
            let mut start = true;
            for (index, character) in group[..end].char_indices() {
                match character {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    _ if start && (character.is_alphanumeric() || character == '_') => {
                        found.insert(identifier(&group[index..]));
                        start = false;
                    }
                    _ if start && !character.is_whitespace() => start = false,
                    _ => {}
                }
            }
        } else {
            found.insert(identifier(rest));
        }
    }
    found
}

fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|character| character.is_alphanumeric() || *character == '_')
        .collect()
}

/// Where the group opened just before `text` closes.
fn matching_brace(text: &str) -> usize {
    let mut depth = 0;
    for (index, character) in text.char_indices() {
        match character {
            '{' => depth += 1,
            '}' if depth == 0 => return index,
            '}' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

/// Each module's references to other modules, from `(module, source text)` pairs.
fn references<'a>(
    sources: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, BTreeSet<String>> {
    let layers = layer_of();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in sources {
        for target in referenced(text) {
            if target != module && layers.contains_key(target.as_str()) {
                graph.entry(module.to_owned()).or_default().insert(target);
            }
        }
    }
    graph
}

/// The modules that use each other (each reaches the other through references), as
/// `a <-> b` with `a` before `b`.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut pending = vec![from.to_owned()];
        while let Some(module) = pending.pop() {
            for next in graph.get(&module).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    pending.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|module| (module, reach(module))).collect();
    let mut found = BTreeSet::new();
    for (module, targets) in &reached {
        for target in targets {
            let back = reached
                .get(target)
                .is_some_and(|from| from.contains(module.as_str()));
            if back && module.as_str() < target.as_str() {
                found.insert(format!("{module} <-> {target}"));
            }
        }
    }
    found
}

/// The references from one module to a module of a higher layer, as `from -> to`, from
/// `(module, source text)` pairs.
fn upward<'a>(sources: impl IntoIterator<Item = (&'a str, &'a str)>) -> BTreeSet<String> {
    let layers = layer_of();
    let mut found = BTreeSet::new();
    for (module, text) in sources {
        let Some(from) = layers.get(module) else {
            continue;
        };
        for target in referenced(text) {
            if layers.get(target.as_str()).is_some_and(|to| to > from) {
                found.insert(format!("{module} -> {target}"));
            }
        }
    }
    found
}

/// Every source file of src/ with its top-level module.
fn sources(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let relative = path.strip_prefix(root).unwrap();
                let first = relative.components().next().unwrap().as_os_str();
                let module = first.to_string_lossy().trim_end_matches(".rs").to_owned();
                files.push((module, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    files
}

#[test]
fn every_module_is_in_a_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layers = layer_of();
    let modules: BTreeSet<String> = sources(&root)
        .into_iter()
        .map(|(module, _)| module)
        .filter(|module| !["lib", "bin"].contains(&module.as_str()))
        .collect();
    for module in &modules {
        assert!(
            layers.contains_key(module.as_str()),
            "`{module}` is in no layer of docs/reference/architecture.md (and of LAYERS here)"
        );
    }
}

#[test]
fn no_module_refers_to_a_higher_layer_beyond_the_listed_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = sources(&root);
    let found = upward(
        files
            .iter()
            .map(|(module, text)| (module.as_str(), text.as_str())),
    );
    let listed: BTreeSet<String> = UPWARD.iter().map(|edge| (*edge).to_owned()).collect();
    let new: Vec<&String> = found.difference(&listed).collect();
    assert!(
        new.is_empty(),
        "references to a higher layer: {new:?} — move the code they need down a layer (see \
         docs/reference/architecture.md)"
    );
    let gone: Vec<&String> = listed.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "no longer referenced, take them off UPWARD: {gone:?}"
    );
}

#[test]
fn no_two_modules_use_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = sources(&root);
    let found = cycles(&references(
        files
            .iter()
            .map(|(module, text)| (module.as_str(), text.as_str())),
    ));
    assert!(
        found.is_empty(),
        "modules that use each other: {found:?} — move what both need into the lower one, or \
         below both (see docs/reference/architecture.md)"
    );
}

#[test]
fn a_planted_cycle_is_caught_within_a_layer_and_through_a_third_module() {
    let planted = [
        ("tnh", "use crate::doctor::Check;"),
        ("doctor", "fn f() { crate::tnh::main(); }"),
        ("ids", "use crate::text::x;"),
        ("text", "use crate::{outcome::Outcome};"),
        ("outcome", "use crate::ids::RunId;"),
        ("exit", "use crate::ids::RunId;"),
    ];
    assert_eq!(
        cycles(&references(planted)),
        BTreeSet::from([
            "doctor <-> tnh".to_owned(),
            "ids <-> outcome".to_owned(),
            "ids <-> text".to_owned(),
            "outcome <-> text".to_owned(),
        ])
    );
}

#[test]
fn a_planted_upward_reference_is_caught_however_it_is_written() {
    let planted = [
        ("ids", "use crate::kernel::lock::LockTable;"),
        (
            "artifacts",
            "use crate::{\n    ids::RunId,\n    workspace::{Workspace, guard},\n};",
        ),
        ("runner", "fn f() { crate::cli::main(); }"),
        (
            "workflow",
            "use crate::text;\n#[cfg(test)]\nmod tests { use crate::kernel::x; }",
        ),
    ];
    assert_eq!(
        upward(planted),
        BTreeSet::from([
            "artifacts -> workspace".to_owned(),
            "ids -> kernel".to_owned(),
            "runner -> cli".to_owned(),
        ])
    );
}
