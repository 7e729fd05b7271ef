//! `tnh adr list [--status S]` and `tnh adr open ID`: architecture decision records found under
//! the configured folders (default `docs/**/adr/*.md`), with ids, titles and status taken from
//! front matter or headings.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::{TnhError, TnhResult, git, print};
use crate::error::ExitStatus;

/// `tnh adr …`.
#[derive(Debug, Subcommand)]
pub enum AdrCommand {
    /// Every ADR: id, status and title, one a line.
    #[command(
        after_help = "Examples:\n  tnh adr list\n  tnh adr list --status accepted\n\nADRs are Markdown files of this checkout matching `adr_paths` in .tnh/config.yaml of the repository's \
main working tree (default docs/**/adr/*.md).\n\nExit codes: 0 listed (also when none are found); 2 outside a repository."
    )]
    List {
        /// Only ADRs with this status (case-insensitive).
        #[arg(long)]
        status: Option<String>,
    },
    /// Print one ADR in full.
    #[command(
        after_help = "Examples:\n  tnh adr open OA04\n  tnh adr open ADR-OA04.1\n\nThe id is case-insensitive and the `ADR-` prefix is optional.\n\nExit codes: 0 printed; 2 for an unknown id or outside a repository."
    )]
    Open {
        /// The ADR id.
        id: String,
    },
}

/// One ADR.
pub struct Adr {
    /// `OA04`, `OA04.1`, `0007`.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its status (`unknown` when not written).
    pub status: String,
    /// The file.
    pub path: PathBuf,
}

/// The ADRs of the checkout at `root`, sorted by id; `adr_paths` comes from the configuration
/// file `config_file` (the main working tree's, see `tnh::config`).
pub fn find(root: &Path, config_file: &Path) -> Vec<Adr> {
    let configured = super::config::adr_paths(config_file);
    let globs = if configured.is_empty() {
        vec!["docs/**/adr/*.md".to_owned()]
    } else {
        configured
    };
    let Ok(set) = globs
        .iter()
        .try_fold(globset::GlobSetBuilder::new(), |mut builder, pattern| {
            builder.add(
                globset::GlobBuilder::new(pattern)
                    .literal_separator(true)
                    .build()?,
            );
            Ok::<_, globset::Error>(builder)
        })
    else {
        return Vec::new();
    };
    let Ok(set) = set.build() else {
        return Vec::new();
    };
    // Walk only below each pattern's literal prefix (`docs/` for `docs/**/adr/*.md`).
    let mut starts: Vec<PathBuf> = globs
        .iter()
        .map(|pattern| {
            pattern
                .split('/')
                .take_while(|part| !part.contains(['*', '?', '[', '{']))
                .collect::<Vec<_>>()
                .join("/")
        })
        .map(|prefix| root.join(prefix))
        .collect();
    starts.sort();
    starts.dedup();
    let mut adrs: Vec<Adr> = starts
        .iter()
        .flat_map(|start| markdown_files(root, start))
        .filter(|relative| set.is_match(relative))
        .filter_map(|relative| parse(root, &relative))
        .collect();
    adrs.sort_by(|left, right| {
        left.id
            .cmp(&right.id)
            .then_with(|| left.path.cmp(&right.path))
    });
    adrs.dedup_by(|left, right| left.path == right.path);
    adrs
}

fn markdown_files(root: &Path, start: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![start.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name == ".git" || name == "target" || name == "node_modules" || name == ".tnh" {
                continue;
            }
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                Ok(kind)
                    if kind.is_file()
                        && path.extension().is_some_and(|extension| extension == "md") =>
                {
                    if let Ok(relative) = path.strip_prefix(root) {
                        found.push(relative.to_path_buf());
                    }
                }
                _ => {}
            }
        }
    }
    found
}

fn parse(root: &Path, relative: &Path) -> Option<Adr> {
    let text = std::fs::read_to_string(root.join(relative)).ok()?;
    let stem = relative.file_stem()?.to_string_lossy().to_lowercase();
    let mut id = stem
        .strip_prefix("adr-")
        .unwrap_or(&stem)
        .split('-')
        .next()
        .unwrap_or(&stem)
        .to_uppercase();
    let mut title = String::new();
    let mut status = String::new();
    if let Some(front) = text
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---").map(|(front, _)| front))
    {
        for line in front.lines() {
            let (key, value) = line.split_once(':').unwrap_or_default();
            let value = value.trim().trim_matches('"').to_owned();
            match key.trim() {
                "title" => title = value,
                "status" => status = value,
                "id" => id = normalised_id(&value),
                _ => {}
            }
        }
    }
    for line in text.lines() {
        if title.is_empty()
            && let Some(heading) = line.strip_prefix("# ")
        {
            title = heading.trim().to_owned();
        }
        if status.is_empty()
            && let Some(rest) = line.split_once("**Status**:").map(|(_, rest)| rest)
        {
            status = rest.trim().to_owned();
        }
    }
    Some(Adr {
        id,
        title,
        status: if status.is_empty() {
            "unknown".into()
        } else {
            status.to_lowercase()
        },
        path: root.join(relative),
    })
}

/// An ADR id as ids are compared: upper case, without an `ADR-` prefix in any case (`Adr-7`,
/// `adr-7` and `7` are all `7`).
fn normalised_id(text: &str) -> String {
    let upper = text.trim().to_uppercase();
    match upper.strip_prefix("ADR-") {
        Some(rest) => rest.to_owned(),
        None => upper,
    }
}

/// Runs `tnh adr …`.
pub fn run(command: &AdrCommand) -> TnhResult {
    let root = git::root()?;
    let adrs = find(&root, &super::config::config_file(&root)?);
    match command {
        AdrCommand::List { status } => {
            let mut text = String::new();
            for adr in adrs.iter().filter(|adr| {
                status
                    .as_ref()
                    .is_none_or(|wanted| adr.status.eq_ignore_ascii_case(wanted))
            }) {
                let _ = writeln!(text, "{}\t{}\t{}", adr.id, adr.status, adr.title);
            }
            if adrs.is_empty() {
                text.push_str(
                    "no ADRs found (docs/**/adr/*.md, or adr_paths in .tnh/config.yaml)\n",
                );
            }
            print(&text);
            Ok(ExitStatus::Success)
        }
        AdrCommand::Open { id } => {
            let wanted = normalised_id(id);
            let Some(adr) = adrs.iter().find(|adr| adr.id == wanted) else {
                let known: Vec<&str> = adrs.iter().map(|adr| adr.id.as_str()).collect();
                return Err(TnhError::new(
                    format!("no ADR `{id}`"),
                    if known.is_empty() {
                        "no ADRs were found; see `tnh adr list`".to_owned()
                    } else {
                        format!("known ids: {}", known.join(", "))
                    },
                ));
            };
            let text = std::fs::read_to_string(&adr.path).map_err(|error| {
                TnhError::new(
                    format!("cannot read {}: {error}", adr.path.display()),
                    "check the file",
                )
            })?;
            print(&text);
            Ok(ExitStatus::Success)
        }
    }
}
