//! `tnh adr list [--status S]` and `tnh adr open ID`: architecture decision records found under
//! the configured folders (default `docs/**/adr/*.md`), with ids, titles and status taken from
//! front matter or headings.

use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use clap::Subcommand;

use super::{TnhError, TnhResult, git, print};
use crate::config::DEFAULT_ADR_PATHS;
use crate::exit::ExitStatus;

/// `tnh adr …`.
#[derive(Debug, Subcommand)]
pub enum AdrCommand {
    /// Every ADR: id, status and title, one a line.
    #[command(
        after_help = "Examples:\n  tnh adr list\n  tnh adr list --status accepted\n\nADRs are Markdown files of this checkout matching `adr_paths` in .tnh/config.yaml of the repository's \
main working tree (default docs/**/adr/*.md).\n\nExit codes: 0 listed (also when none are found); 2 outside a repository, or .tnh/config.yaml is invalid (its file, line and column named)."
    )]
    List {
        /// Only ADRs with this status (case-insensitive).
        #[arg(long)]
        status: Option<String>,
    },
    /// Print one ADR in full.
    #[command(
        after_help = "Examples:\n  tnh adr open OA04\n  tnh adr open ADR-OA04.1\n  tnh adr open ADR-12\n\nThe id is case-insensitive, the `ADR-` prefix is optional and a number's leading zeros do not count \
(ADR-12, 12 and 0012 name the file 0012-….md).\n\nExit codes: 0 printed; 2 for an unknown id, outside a repository, or when .tnh/config.yaml is invalid."
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

/// What [`find`] found, and what it did not look at.
pub struct Found {
    /// The ADRs, sorted by id.
    pub adrs: Vec<Adr>,
    /// One line for each place not looked at (a symbolic link, a pattern leaving the
    /// checkout, a walk cut short), for stderr.
    pub skipped: Vec<String>,
}

/// The most folder entries one search reads: a pattern such as `**/*.md` in a huge checkout
/// stops there (and says so) instead of walking on.
const MAX_ENTRIES: usize = 100_000;
/// The most links named in the notes; the rest are counted.
const MAX_NOTED_LINKS: usize = 5;

/// The ADRs of the checkout at `root`, sorted by id, matching `patterns` (the `adr_paths` of
/// the configuration — the main working tree's, see `tnh::config` — already checked by
/// [`crate::config::Config::parse`]; empty for the default [`DEFAULT_ADR_PATHS`]).
///
/// Only files of the checkout are read: no symbolic link is followed — not a linked file, not
/// a linked folder met on the walk, not a link on a pattern's literal prefix (`docs -> /`) —
/// and a prefix that leaves the checkout (`../x/*.md`, `/x/*.md`) is refused; each is named in
/// [`Found::skipped`]. The walk reads at most [`MAX_ENTRIES`] folder entries.
pub fn find(root: &Path, patterns: &[String]) -> Found {
    let globs = effective_patterns(patterns);
    let mut walk = Walk::new(root, MAX_ENTRIES);
    // The configuration checked every pattern when it was loaded; should one still not
    // compile, it is said, not passed over.
    let set = globs
        .iter()
        .try_fold(globset::GlobSetBuilder::new(), |mut builder, pattern| {
            builder.add(
                globset::GlobBuilder::new(pattern)
                    .literal_separator(true)
                    .build()?,
            );
            Ok::<_, globset::Error>(builder)
        })
        .and_then(|builder| builder.build());
    let set = match set {
        Ok(set) => set,
        Err(error) => {
            walk.skipped
                .push(format!("adr: not looking for ADRs: {error}"));
            return walk.into_found(Vec::new());
        }
    };
    // Walk only below each pattern's literal prefix (`docs/` for `docs/**/adr/*.md`).
    let mut prefixes: Vec<String> = globs
        .iter()
        .map(|pattern| {
            pattern
                .split('/')
                .take_while(|part| !part.contains(['*', '?', '[', '{']))
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect();
    prefixes.sort();
    prefixes.dedup();
    for prefix in &prefixes {
        walk.walk_prefix(prefix, &set);
    }
    let found = std::mem::take(&mut walk.found);
    let mut adrs: Vec<Adr> = found
        .into_iter()
        .filter(|relative| set.is_match(relative))
        .filter_map(|relative| parse(root, &relative))
        .collect();
    adrs.sort_by(|left, right| {
        left.id
            .cmp(&right.id)
            .then_with(|| left.path.cmp(&right.path))
    });
    adrs.dedup_by(|left, right| left.path == right.path);
    walk.into_found(adrs)
}

/// The patterns searched: the configured ones, else the default.
fn effective_patterns(patterns: &[String]) -> Vec<String> {
    if patterns.is_empty() {
        vec![DEFAULT_ADR_PATHS.to_owned()]
    } else {
        patterns.to_vec()
    }
}

/// A bounded walk for Markdown files below the checkout's root that follows no link.
struct Walk<'a> {
    root: &'a Path,
    /// Folder entries that may still be read.
    budget: usize,
    /// The budget at the start.
    limit: usize,
    /// Markdown files found, relative to the root.
    found: Vec<PathBuf>,
    /// Why places were not looked at.
    skipped: Vec<String>,
    /// Symbolic links met (and not followed) beyond those named in `skipped`.
    more_links: usize,
    /// The budget ran out.
    exhausted: bool,
}

impl<'a> Walk<'a> {
    fn new(root: &'a Path, budget: usize) -> Self {
        Walk {
            root,
            budget,
            limit: budget,
            found: Vec::new(),
            skipped: Vec::new(),
            more_links: 0,
            exhausted: false,
        }
    }

    fn into_found(mut self, adrs: Vec<Adr>) -> Found {
        if self.more_links > 0 {
            self.skipped.push(format!(
                "adr: {} more symbolic link(s) not followed",
                self.more_links
            ));
        }
        if self.exhausted {
            self.skipped.push(format!(
                "adr: stopped looking for ADRs after reading {} folder entries; ADRs further on are not listed (narrow adr_paths in .tnh/config.yaml)",
                self.limit
            ));
        }
        Found {
            adrs,
            skipped: self.skipped,
        }
    }

    /// Notes a symbolic link that is not followed.
    fn link(&mut self, relative: &Path) {
        let noted = self
            .skipped
            .iter()
            .filter(|line| line.contains("symbolic link"))
            .count();
        if noted >= MAX_NOTED_LINKS {
            self.more_links += 1;
            return;
        }
        let target = std::fs::read_link(self.root.join(relative))
            .map(|target| format!(" (to {})", target.display()))
            .unwrap_or_default();
        self.skipped.push(format!(
            "adr: not following `{}`: it is a symbolic link{target}; ADRs are read only from the checkout's own files",
            relative.display()
        ));
    }

    /// Walks below the literal prefix of a pattern, checking each of its parts first: a link,
    /// or a part that leaves the checkout, is named and not entered.
    fn walk_prefix(&mut self, prefix: &str, set: &globset::GlobSet) {
        let mut relative = PathBuf::new();
        for part in Path::new(prefix).components() {
            match part {
                Component::Normal(name) => relative.push(name),
                Component::CurDir => continue,
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    self.skipped.push(format!(
                        "adr: not looking below `{prefix}`: it is outside the checkout (adr_paths are relative to the repository root)"
                    ));
                    return;
                }
            }
            match std::fs::symlink_metadata(self.root.join(&relative)) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    self.link(&relative);
                    return;
                }
                Ok(_) => {}
                // Absent: nothing to find there.
                Err(_) => return,
            }
        }
        let start = self.root.join(&relative);
        match std::fs::symlink_metadata(&start) {
            Ok(meta) if meta.is_file() => self.found.push(relative),
            Ok(meta) if meta.is_dir() => self.walk(start, set),
            _ => {}
        }
    }

    /// Walks the folder `start`; a link is named when it leads to a folder or when its name
    /// matches the patterns (a link to an image is none of the ADRs' business).
    fn walk(&mut self, start: PathBuf, set: &globset::GlobSet) {
        let mut walker = walkdir::WalkDir::new(start).min_depth(1).into_iter();
        while let Some(next) = walker.next() {
            // A folder that cannot be listed is passed over.
            let Ok(entry) = next else {
                continue;
            };
            if self.budget == 0 {
                self.exhausted = true;
                return;
            }
            self.budget -= 1;
            // Not followed: a link's own type.
            let kind = entry.file_type();
            let name = entry.file_name();
            if name == ".git" || name == "target" || name == "node_modules" || name == ".tnh" {
                if kind.is_dir() {
                    walker.skip_current_dir();
                }
                continue;
            }
            let path = entry.path();
            let Ok(relative) = path.strip_prefix(self.root).map(Path::to_path_buf) else {
                continue;
            };
            if kind.is_file() && path.extension().is_some_and(|extension| extension == "md") {
                self.found.push(relative);
            } else if kind.is_symlink()
                && (set.is_match(&relative)
                    || std::fs::metadata(path).is_ok_and(|meta| meta.is_dir()))
            {
                self.link(&relative);
            }
        }
    }
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
    let text = text.replace("\r\n", "\n");
    let mut body = text.as_str();
    if let Some((front, rest)) = text
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---"))
    {
        body = rest;
        for line in front.lines() {
            let (key, value) = line.split_once(':').unwrap_or_default();
            let value = value.trim().trim_matches(['"', '\'']).to_owned();
            match key.trim().to_ascii_lowercase().as_str() {
                "title" => title = value,
                "status" => status = value,
                "id" => id = normalised_id(&value),
                _ => {}
            }
        }
    }
    let mut lines = body.lines();
    while let Some(line) = lines.next() {
        if title.is_empty()
            && let Some(heading) = line.strip_prefix("# ")
        {
            title = heading.trim().to_owned();
        }
        if !status.is_empty() {
            continue;
        }
        if let Some(value) = status_line(line) {
            status = value;
        } else if is_status_heading(line) {
            // `## Status` then the status on the first line that is not blank (adr-tools,
            // MADR): `Accepted`, `Superseded by [3. …](0003-….md)`.
            if let Some(next) = lines.by_ref().map(str::trim).find(|next| !next.is_empty())
                && !next.starts_with('#')
            {
                status = clean_status(next);
            }
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

/// The status a line such as `Status: Accepted`, `**Status**: Accepted`, `**Status:**
/// Accepted` or `- Status: accepted` gives, if it is one.
fn status_line(line: &str) -> Option<String> {
    let plain = line
        .trim()
        .trim_start_matches(['-', '*', '>', '+', ' '])
        .replace("**", "")
        .replace("__", "");
    let rest = plain.trim_start();
    let head = rest.get(..6)?;
    if !head.eq_ignore_ascii_case("status") {
        return None;
    }
    let value = rest[6..].trim_start().strip_prefix(':')?;
    Some(clean_status(value)).filter(|value| !value.is_empty())
}

/// A heading `Status` of any level (`## Status`), in any case.
fn is_status_heading(line: &str) -> bool {
    let trimmed = line.trim();
    let text = trimmed.trim_start_matches('#');
    text.len() < trimmed.len()
        && text.starts_with([' ', '\t'])
        && text
            .trim()
            .trim_end_matches(':')
            .eq_ignore_ascii_case("status")
}

/// A status as written, without emphasis or list markers around it.
fn clean_status(text: &str) -> String {
    text.trim()
        .trim_start_matches(['-', '+', '>', ' '])
        .trim_matches(['*', '_', '`', '"', ' '])
        .to_owned()
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

/// The key two ids are matched by: [`normalised_id`] without the leading zeros of a number
/// (`ADR-12`, `12`, `0012` and `ADR-0012` are one ADR; `OA04` keeps its zero).
fn id_key(text: &str) -> String {
    let id = normalised_id(text);
    let digits = id.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return id;
    }
    let zeros = id[..digits]
        .chars()
        .take_while(|digit| *digit == '0')
        .count();
    // Keep one digit of an all-zero number (`000` is `0`).
    id[zeros.min(digits - 1)..].to_owned()
}

/// Runs `tnh adr …`.
pub fn run(command: &AdrCommand) -> TnhResult {
    let root = git::root()?;
    let config = super::config::load(&root)?;
    let Found { adrs, skipped } = find(&root, &config.config.adr_paths);
    for line in &skipped {
        super::note(line);
    }
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
                let _ = writeln!(
                    text,
                    "no ADRs found ({}: {})",
                    if config.config.adr_paths.is_empty() {
                        "the default; set adr_paths in .tnh/config.yaml"
                    } else {
                        "adr_paths of .tnh/config.yaml"
                    },
                    effective_patterns(&config.config.adr_paths).join(", ")
                );
            }
            print(&text);
            Ok(ExitStatus::Success)
        }
        AdrCommand::Open { id } => {
            let wanted = id_key(id);
            let Some(adr) = adrs.iter().find(|adr| id_key(&adr.id) == wanted) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_ids_match_whatever_their_leading_zeros() {
        for id in ["12", "0012", "ADR-12", "adr-0012", " 012 "] {
            assert_eq!(id_key(id), "12", "{id}");
        }
        assert_eq!(id_key("0000"), "0");
        assert_eq!(id_key("OA04.1"), "OA04.1");
        assert_eq!(id_key("007a"), "7A");
    }

    #[test]
    fn the_common_ways_of_writing_a_status_are_read() {
        for line in [
            "Status: Accepted",
            "status: accepted",
            "**Status**: Accepted",
            "**Status:** Accepted",
            "- Status: Accepted",
            "* **Status**: *Accepted*",
        ] {
            assert_eq!(
                status_line(line).as_deref().map(str::to_lowercase),
                Some("accepted".to_owned()),
                "{line}"
            );
        }
        for line in ["Statusquo: x", "The status: x", "Status:", "## Status"] {
            assert_eq!(status_line(line), None, "{line}");
        }
        assert!(is_status_heading("## Status") && is_status_heading("# status:"));
        assert!(!is_status_heading("## Statuses") && !is_status_heading("Status"));
    }

    /// The walk had no bound (`docs -> /` read the whole file system). It
    /// reads at most its budget of folder entries, then stops and says so.
    #[test]
    fn the_walk_stops_at_its_budget_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        for index in 0..10 {
            let folder = dir.path().join(format!("docs/{index}/adr"));
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::write(folder.join("adr-1-x.md"), "# X\n").unwrap();
        }
        let set = globset::GlobSetBuilder::new()
            .add(globset::Glob::new("docs/**/adr/*.md").unwrap())
            .build()
            .unwrap();
        let mut walk = Walk::new(dir.path(), 7);
        walk.walk_prefix("docs", &set);
        assert!(walk.exhausted);
        assert!(walk.found.len() < 10, "{:?}", walk.found);
        let found = walk.into_found(Vec::new());
        assert!(
            found
                .skipped
                .iter()
                .any(|line| line.contains("stopped looking for ADRs")),
            "{:?}",
            found.skipped
        );
        let mut unbounded = Walk::new(dir.path(), MAX_ENTRIES);
        unbounded.walk_prefix("docs", &set);
        assert!(!unbounded.exhausted);
        assert_eq!(unbounded.found.len(), 10);
    }
}
