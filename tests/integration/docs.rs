//! The documentation holds: every relative link and anchor in README.md and docs/ resolves,
//! and every YAML and prompt example is valid for what it claims to be — a workflow passes
//! `tnh-conductor validate`, a configuration parses, a prompt's front matter loads.
//!
//! A block preceded by the line `<!-- snippet -->` is a deliberate fragment and is skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::{TempRepo, conductor, stderr_text, stdout_text};

/// One fenced code block of a Markdown file.
struct Block {
    file: PathBuf,
    /// 1-based line of the opening fence.
    line: usize,
    language: String,
    /// The fence's indentation, removed from the block's lines.
    indent: usize,
    text: String,
    snippet: bool,
}

/// One Markdown file: its links (outside code) and the anchors of its headings.
struct Page {
    links: Vec<(usize, String)>,
    anchors: Vec<String>,
    blocks: Vec<Block>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/, sorted.
fn documentation_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut folders = vec![root().join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|extension| extension == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// GitHub's anchor for a heading: lowercase, spaces to `-`, punctuation dropped.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The line without its inline code spans, so that `[a](b)` written as code is no link.
fn without_code_spans(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// Every `[text](target)` of a line.
fn links_of(line: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else { break };
        links.push(after[..end].trim().to_owned());
        rest = &after[end..];
    }
    links
}

fn read_page(file: &Path) -> Page {
    let text = std::fs::read_to_string(file).unwrap();
    let mut page = Page {
        links: Vec::new(),
        anchors: Vec::new(),
        blocks: Vec::new(),
    };
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut open: Option<Block> = None;
    let mut previous = "";
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(block) = open.as_mut() {
            if trimmed.starts_with("```") {
                page.blocks.push(open.take().unwrap());
            } else {
                // A block inside a list item is indented like its fence.
                let indent = line.len() - trimmed.len();
                block.text.push_str(if indent >= block.indent {
                    &line[block.indent..]
                } else {
                    trimmed
                });
                block.text.push('\n');
            }
            continue;
        }
        if let Some(language) = trimmed.strip_prefix("```") {
            open = Some(Block {
                file: file.to_path_buf(),
                line: index + 1,
                language: language.trim().to_owned(),
                indent: line.len() - trimmed.len(),
                text: String::new(),
                snippet: previous.trim() == "<!-- snippet -->",
            });
            continue;
        }
        if !line.trim().is_empty() {
            previous = line;
        }
        if let Some(heading) = line.strip_prefix('#') {
            let heading = heading.trim_start_matches('#');
            let base = anchor_of(heading);
            let count = seen.entry(base.clone()).or_insert(0);
            let anchor = if *count == 0 {
                base.clone()
            } else {
                format!("{base}-{count}")
            };
            *count += 1;
            page.anchors.push(anchor);
        }
        for link in links_of(&without_code_spans(line)) {
            page.links.push((index + 1, link));
        }
    }
    assert!(
        open.is_none(),
        "{}: a code fence is never closed",
        relative(file)
    );
    page
}

fn pages() -> BTreeMap<PathBuf, Page> {
    documentation_files()
        .into_iter()
        .map(|file| {
            let page = read_page(&file);
            (file, page)
        })
        .collect()
}

#[test]
fn every_relative_link_and_anchor_in_the_documentation_resolves() {
    let pages = pages();
    let mut problems = Vec::new();
    for (file, page) in &pages {
        for (line, link) in &page.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let place = format!("{}:{line}", relative(file));
            if !target.exists() {
                problems.push(format!("{place}: `{link}`: no file {}", target.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let canonical = target.canonicalize().unwrap();
            let Some(target_page) = pages
                .iter()
                .find(|(page_file, _)| page_file.canonicalize().unwrap() == canonical)
                .map(|(_, page)| page)
            else {
                problems.push(format!(
                    "{place}: `{link}`: an anchor into a file that is not documentation"
                ));
                continue;
            };
            if !target_page.anchors.iter().any(|known| known == anchor) {
                problems.push(format!(
                    "{place}: `{link}`: no heading with the anchor `#{anchor}`"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

/// What a block claims to be, from its language and its first keys.
enum Kind {
    Workflow,
    Configuration,
    Prompt { reference: String },
    Other,
}

fn top_level_keys(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| !line.starts_with([' ', '#', '-']) && !line.is_empty())
        .filter_map(|line| line.split_once(':').map(|(key, _)| key.trim()))
        .collect()
}

/// `family/name.vN.md` from a prompt's front matter.
fn prompt_reference(text: &str) -> Option<String> {
    let front = text.strip_prefix("---\n")?.split("\n---").next()?;
    let value = |key: &str| {
        front.lines().find_map(|line| {
            let rest = line.strip_prefix(key)?.strip_prefix(':')?;
            Some(rest.split('#').next()?.trim().to_owned())
        })
    };
    let id = value("prompt_id")?;
    let version = value("version")?;
    let (family, name) = id.split_once('.')?;
    Some(format!("{family}/{name}.v{version}.md"))
}

fn kind_of(block: &Block) -> Kind {
    match block.language.as_str() {
        "yaml" => {
            let keys = top_level_keys(&block.text);
            if keys.contains(&"workflow_id") {
                Kind::Workflow
            } else if keys
                .iter()
                .any(|key| ["agents", "validators", "planners"].contains(key))
            {
                Kind::Configuration
            } else {
                Kind::Other
            }
        }
        "markdown" if block.text.starts_with("---\n") && block.text.contains("prompt_id:") => {
            prompt_reference(&block.text)
                .map_or(Kind::Other, |reference| Kind::Prompt { reference })
        }
        _ => Kind::Other,
    }
}

/// A repository where the documentation's examples can be validated: the agents, planners,
/// validators and prompts they name exist.
fn example_repository(prompts: &[(&Block, String)]) -> TempRepo {
    let repo = TempRepo::new();
    repo.write(
        ".tnh/config.yaml",
        "agents:\n  scripted: {kind: command, argv: [\"true\"]}\n\
         planners:\n  judge: {kind: command, argv: [\"true\"]}\n\
         validators:\n  tests: {argv: [\"true\"]}\n  lint: {argv: [\"true\"]}\n  typecheck: {argv: [\"true\"]}\n",
    );
    for (block, reference) in prompts {
        repo.write(&format!(".tnh/prompts/{reference}"), &block.text);
    }
    repo
}

fn place(block: &Block) -> String {
    format!("{}:{}", relative(&block.file), block.line)
}

#[test]
fn every_yaml_and_prompt_example_in_the_documentation_is_valid() {
    let pages = pages();
    let blocks: Vec<&Block> = pages
        .values()
        .flat_map(|page| &page.blocks)
        .filter(|block| !block.snippet)
        .collect();
    let prompts: Vec<(&Block, String)> = blocks
        .iter()
        .filter_map(|block| match kind_of(block) {
            Kind::Prompt { reference } => Some((*block, reference)),
            _ => None,
        })
        .collect();
    let repo = example_repository(&prompts);
    let mut problems = Vec::new();
    let (mut workflows, mut configurations) = (0, 0);

    let listed = conductor()
        .current_dir(repo.path())
        .args(["prompts", "list"])
        .output()
        .unwrap();
    if !listed.status.success() {
        let sources: Vec<String> = prompts
            .iter()
            .map(|(block, reference)| format!("{} (.tnh/prompts/{reference})", place(block)))
            .collect();
        problems.push(format!(
            "prompt examples {} do not load:\n{}",
            sources.join(", "),
            stderr_text(&listed)
        ));
    }

    for (index, block) in blocks.iter().enumerate() {
        match kind_of(block) {
            Kind::Workflow => {
                let file = repo.write(&format!("examples/doc-{index}.yaml"), &block.text);
                let output = conductor()
                    .current_dir(repo.path())
                    .arg("validate")
                    .arg(&file)
                    .output()
                    .unwrap();
                if !output.status.success() {
                    problems.push(format!(
                        "{}: the workflow example is not valid (its line 1 is line {} of the page):\n{}{}",
                        place(block),
                        block.line + 1,
                        stdout_text(&output),
                        stderr_text(&output)
                    ));
                }
                workflows += 1;
            }
            Kind::Configuration => {
                // Positions in the error are within the block.
                let path = PathBuf::from(format!("{}:{}", relative(&block.file), block.line));
                if let Err(error) =
                    tnh_conductor::config::Config::parse(block.text.as_bytes(), &path)
                {
                    problems.push(format!(
                        "{}: the configuration example does not parse: {error}",
                        place(block)
                    ));
                }
                configurations += 1;
            }
            Kind::Prompt { .. } | Kind::Other => {}
        }
    }
    assert!(
        problems.is_empty(),
        "invalid examples:\n{}",
        problems.join("\n\n")
    );
    assert!(
        workflows > 0 && configurations > 0 && !prompts.is_empty(),
        "found {workflows} workflow, {configurations} configuration and {} prompt examples: \
         is the block detection broken?",
        prompts.len()
    );
    eprintln!(
        "checked {workflows} workflow, {configurations} configuration and {} prompt examples",
        prompts.len()
    );
}

#[test]
fn anchors_are_computed_as_github_computes_them() {
    assert_eq!(
        anchor_of(" Exit codes of `run` and `resume`"),
        "exit-codes-of-run-and-resume"
    );
    assert_eq!(anchor_of("RUN_VALIDATION"), "run_validation");
    assert_eq!(
        anchor_of("Checks (`tnh test`, `lint`, `typecheck`)"),
        "checks-tnh-test-lint-typecheck"
    );
    assert_eq!(
        links_of("see [a](b.md#c) and [d](e.md)"),
        ["b.md#c", "e.md"]
    );
    assert!(links_of(&without_code_spans("`[a](b)` only")).is_empty());
}
