//! Checking a step's changes against a compiled policy. Every changed path is normalised
//! first; then forbidden paths, allowed paths, operations and the optional per-file hook are
//! checked, and what the ref guard saw (protected refs, commits, pushes, git configuration) is
//! classified. Protected-ref changes and path escapes are violations whatever the policy says.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use crate::config::OperatorCheckout;
use crate::text::one_line;

use super::error::PolicyError;
use super::folder::FolderPattern;
use super::normalize::{LinkLookup, lookup_on_disk, normalize_path, resolve_symlink};
use super::spec::{CI_PATHS, LOCKFILES, Operation, PolicySpec};
use crate::workspace::{
    ChangeKind, ChangedFile, CommittedChange, GuardReport, RefClass, WorkspaceStatus,
};

/// The per-file hook (a policy's Rhai `check` function, wired by the scripting layer): returns
/// a reason when the change is not acceptable.
pub type CheckHook<'a> = dyn Fn(&ChangedFile) -> Option<String> + 'a;

/// Why a change violates the policy.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ViolationClass {
    /// The path matches `forbidden_paths`.
    ForbiddenPath,
    /// `allowed_paths` is set and the path matches none of it.
    OutsideAllowedPaths,
    /// The change performs a forbidden operation.
    ForbiddenOperation,
    /// A protected branch, the operator's HEAD, one of the run's snapshot refs, a replace or
    /// notes ref or the stash was moved, created or deleted (restored, except the operator's HEAD); or
    /// another of the operator's branches was moved or deleted, or another run's refs changed
    /// while it was not driven (restored).
    ProtectedBranchViolation,
    /// A tag was created, moved or deleted (restored).
    ProtectedTagViolation,
    /// The path is absolute, climbs out with `..`, or is a symlink pointing outside.
    PathEscape,
    /// The policy's `check` hook rejected the change.
    CheckFailed,
    /// A planner changed the worktree while an EVALUATE asked it (EVALUATE changes nothing).
    PlannerChangedWorktree,
}

/// One violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Violation {
    /// The class.
    pub class: ViolationClass,
    /// The path or ref concerned, when there is one.
    pub path: Option<String>,
    /// The rule that was broken: a glob, an operation id, or an implicit rule's name.
    pub rule: String,
    /// A sentence for the operator.
    pub detail: String,
}

/// `class \`path\`: detail`, as the operator reads it (`path escape \`src\`: symlink points
/// outside the worktree: \`/etc\``).
impl std::fmt::Display for Violation {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let class = serde_json::to_value(self.class)
            .ok()
            .and_then(|value| value.as_str().map(|name| name.replace('_', " ")))
            .unwrap_or_default();
        formatter.write_str(&class)?;
        // An operation names its rule: that is what a policy forbids, and what to relax.
        let operation = self.class == ViolationClass::ForbiddenOperation;
        if operation {
            write!(formatter, " `{}`", self.rule)?;
        }
        // A path is the agent's choice: one line (`\n` for a newline), as in the detail.
        match (self.path.as_deref().map(one_line), operation) {
            (Some(path), true) => write!(formatter, " on `{path}`")?,
            (Some(path), false) => write!(formatter, " `{path}`")?,
            (None, _) => {}
        }
        // The detail, unless it only repeats the operation's name.
        let repeats_rule = operation && self.detail == self.rule;
        if !(self.detail.is_empty() || repeats_rule) {
            write!(formatter, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl Violation {
    /// A violation; `path` is kept exact, while `detail`, a sentence for the operator that
    /// quotes paths, link targets and hook reasons an agent chose, is made one line (control
    /// characters escaped: `\n`), so that it cannot add lines of its own to an end reason,
    /// the journal or `runs show`.
    fn new(
        class: ViolationClass,
        path: Option<&str>,
        rule: &str,
        detail: impl Into<String>,
    ) -> Self {
        let detail = detail.into();
        Self {
            class,
            path: path.map(str::to_owned),
            rule: rule.to_owned(),
            detail: one_line(&detail).into_owned(),
        }
    }
}

/// A compiled glob list that can say which pattern matched.
#[derive(Debug, Clone)]
struct Patterns {
    patterns: Vec<String>,
    set: GlobSet,
    /// The same patterns split for matching a folder (a nested repository).
    folders: Vec<FolderPattern>,
}

impl Patterns {
    fn compile(field: &'static str, patterns: &[String]) -> Result<Self, PolicyError> {
        let mut builder = GlobSetBuilder::new();
        let mut normalised = Vec::new();
        for pattern in patterns {
            let effective = normalise_pattern(pattern);
            builder.add(build_glob(field, pattern, &effective)?);
            normalised.push(effective);
        }
        let set = builder.build().map_err(|error| PolicyError::InvalidGlob {
            field,
            pattern: patterns.join(", "),
            reason: error.to_string(),
        })?;
        Ok(Self {
            folders: normalised
                .iter()
                .map(|pattern| FolderPattern::new(pattern))
                .collect(),
            patterns: normalised,
            set,
        })
    }

    fn first_match(&self, path: &str) -> Option<&str> {
        let matches = self.set.matches(path);
        matches.first().map(|index| self.patterns[*index].as_str())
    }

    /// The first pattern that matches the folder `path` or could match something in it.
    fn first_match_within(&self, path: &str) -> Option<&str> {
        self.folders
            .iter()
            .position(|folder| folder.may_match_within(path))
            .map(|index| self.patterns[index].as_str())
    }

    /// True when some pattern matches everything in the folder `path`.
    fn covers(&self, path: &str) -> bool {
        self.folders.iter().any(|folder| folder.covers(path))
    }
}

fn build_glob(field: &'static str, original: &str, effective: &str) -> Result<Glob, PolicyError> {
    GlobBuilder::new(effective)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|error| PolicyError::InvalidGlob {
            field,
            pattern: original.to_owned(),
            reason: error.kind().to_string(),
        })
}

/// `./src/` → `src/**`; `/docs/*.md` → `docs/*.md`. Patterns are always relative to the
/// worktree root.
fn normalise_pattern(pattern: &str) -> String {
    let mut pattern = pattern.trim();
    while let Some(rest) = pattern.strip_prefix("./") {
        pattern = rest;
    }
    let pattern = pattern.trim_start_matches('/');
    if pattern.ends_with('/') {
        format!("{pattern}**")
    } else {
        pattern.to_owned()
    }
}

/// A policy ready to check changes.
#[derive(Debug, Clone)]
pub struct Policy {
    requested: PolicySpec,
    allowed: Patterns,
    forbidden: Patterns,
    enforced: BTreeSet<Operation>,
    advisory: Vec<String>,
    ci: Patterns,
    /// The worktree the changes are in, when known: symlinks are then resolved through the
    /// links on disk, not only through the ones the change lists.
    worktree: Option<PathBuf>,
    /// Whether a change to the operator's checkout during the step is a violation
    /// (`operator_checkout` in the configuration; it is always reported by the guard).
    operator_checkout_forbidden: bool,
}

impl Policy {
    /// Compiles a requested policy; an invalid glob is an error, never ignored.
    pub fn compile(spec: &PolicySpec) -> Result<Self, PolicyError> {
        let mut enforced = BTreeSet::new();
        let mut advisory = Vec::new();
        for entry in &spec.forbidden_operations {
            match entry.trim().parse::<Operation>() {
                Ok(operation) => {
                    enforced.insert(operation);
                }
                Err(()) => advisory.push(entry.clone()),
            }
        }
        let ci_patterns: Vec<String> = CI_PATHS
            .iter()
            .map(|pattern| (*pattern).to_owned())
            .collect();
        Ok(Self {
            requested: spec.clone(),
            allowed: Patterns::compile("allowed_paths", &spec.allowed_paths)?,
            forbidden: Patterns::compile("forbidden_paths", &spec.forbidden_paths)?,
            enforced,
            advisory,
            ci: Patterns::compile("ci", &ci_patterns)?,
            worktree: None,
            operator_checkout_forbidden: true,
        })
    }

    /// The policy without enforcing `operation` (a validation step's build tool that syncs a
    /// lockfile is not an agent changing dependencies).
    pub fn without_operation(mut self, operation: Operation) -> Self {
        self.enforced.remove(&operation);
        self
    }

    /// The policy with the configuration's say on changes to the operator's checkout.
    pub fn with_operator_checkout(mut self, setting: OperatorCheckout) -> Self {
        self.operator_checkout_forbidden = setting == OperatorCheckout::Forbid;
        self
    }

    /// The policy checking changes made in the worktree at `root`, which is on disk as captured:
    /// a symlink's target is then resolved through every symlink of the worktree, those the
    /// step did not change included. Without it only the links the change lists are followed.
    pub fn with_worktree(mut self, root: &Path) -> Self {
        self.worktree = Some(root.to_path_buf());
        self
    }

    /// The policy as requested.
    pub fn requested(&self) -> &PolicySpec {
        &self.requested
    }

    /// The normalised `allowed_paths` globs.
    pub fn allowed_paths(&self) -> &[String] {
        &self.allowed.patterns
    }

    /// The normalised `forbidden_paths` globs.
    pub fn forbidden_paths(&self) -> &[String] {
        &self.forbidden.patterns
    }

    /// The operations checked mechanically.
    pub fn enforced_operations(&self) -> impl Iterator<Item = Operation> + '_ {
        self.enforced.iter().copied()
    }

    /// The `forbidden_operations` entries that are text for the agent, not checked.
    pub fn advisory(&self) -> &[String] {
        &self.advisory
    }

    fn forbids(&self, operation: Operation) -> bool {
        self.enforced.contains(&operation)
    }

    /// Checks a step's changes and what the ref guard saw; returns every violation in a
    /// stable order (files by path, then repository-level findings).
    pub fn check(
        &self,
        status: &WorkspaceStatus,
        guard: &GuardReport,
        hook: Option<&CheckHook<'_>>,
    ) -> Vec<Violation> {
        let mut violations = Vec::new();
        let links = changed_links(status);
        for file in &status.files {
            self.check_file_with(file, hook, &links, &mut violations);
        }
        if self.forbids(Operation::CreateTopLevelDirs) {
            for dir in &status.new_top_level_dirs {
                violations.push(operation_violation(
                    Operation::CreateTopLevelDirs,
                    dir,
                    "new top-level directory",
                ));
            }
        }
        self.check_guard(guard, &mut violations);
        violations
    }

    /// Checks what the step committed on the work branch
    /// ([`Workspace::committed_changes`](crate::workspace::Workspace::committed_changes)) with
    /// the rules of a changed file (paths, operations, the hook), leaving out the paths the
    /// capture `status` lists, which [`Policy::check`] judged already. Each violation's detail
    /// names the commit: what it judges is not in the worktree's files, only on the branch.
    pub fn check_committed(
        &self,
        committed: &[CommittedChange],
        status: &WorkspaceStatus,
        hook: Option<&CheckHook<'_>>,
    ) -> Vec<Violation> {
        let captured: BTreeSet<&str> = status
            .files
            .iter()
            .flat_map(|file| std::iter::once(file.path.as_str()).chain(file.old_path.as_deref()))
            .collect();
        let mut violations = Vec::new();
        for change in committed {
            if captured.contains(change.file.path.as_str()) {
                continue;
            }
            let first = violations.len();
            self.check_file_with(&change.file, hook, &HashMap::new(), &mut violations);
            for violation in &mut violations[first..] {
                violation.detail = format!(
                    "{}; committed on the work branch in {}, not in the worktree's files",
                    violation.detail, change.commit
                );
            }
        }
        violations
    }

    /// Checks only what the ref guard saw (for a step whose changes were not captured).
    pub fn check_guard_report(&self, guard: &GuardReport) -> Vec<Violation> {
        let mut violations = Vec::new();
        self.check_guard(guard, &mut violations);
        violations
    }

    /// Checks one changed file (its symlink target resolved through the worktree on disk when
    /// the policy knows it, else on its own).
    pub fn check_file(
        &self,
        file: &ChangedFile,
        hook: Option<&CheckHook<'_>>,
        violations: &mut Vec<Violation>,
    ) {
        self.check_file_with(file, hook, &HashMap::new(), violations);
    }

    /// Checks one changed file; `links` are the symlinks of the change, by normalised path.
    fn check_file_with(
        &self,
        file: &ChangedFile,
        hook: Option<&CheckHook<'_>>,
        links: &HashMap<String, String>,
        violations: &mut Vec<Violation>,
    ) {
        let folder = is_gitlink(file);
        let mut paths = vec![file.path.as_str()];
        paths.extend(file.old_path.as_deref());
        for raw in paths {
            match normalize_path(raw) {
                Ok(path) if folder => self.check_folder(&path, violations),
                Ok(path) => self.check_path(&path, violations),
                Err(escape) => violations.push(Violation::new(
                    ViolationClass::PathEscape,
                    Some(raw),
                    "path_normalisation",
                    escape.describe(),
                )),
            }
        }
        if let Some(target) = file.symlink_target.as_deref() {
            let mut lookup = |path: &str| match links.get(path) {
                Some(target) => LinkLookup::Link(target.clone()),
                None => match &self.worktree {
                    Some(root) => lookup_on_disk(root, path),
                    None => LinkLookup::NotALink,
                },
            };
            if let Err(escape) = resolve_symlink(&file.path, target, &mut lookup) {
                violations.push(Violation::new(
                    ViolationClass::PathEscape,
                    Some(&file.path),
                    "symlink_target",
                    format!(
                        "symlink points outside the worktree: `{target}` ({})",
                        escape.describe()
                    ),
                ));
            }
        }
        for operation in operations_of(file, &self.ci) {
            if self.forbids(operation) {
                violations.push(operation_violation(
                    operation,
                    &file.path,
                    describe(operation),
                ));
            }
        }
        if let Some(reason) = hook.and_then(|hook| hook(file)) {
            violations.push(Violation::new(
                ViolationClass::CheckFailed,
                Some(&file.path),
                "check",
                reason,
            ));
        }
    }

    fn check_path(&self, path: &str, violations: &mut Vec<Violation>) {
        // A tool's cache (`__pycache__/`) is no one's intended change: the way out is to
        // ignore it, not to widen the policy.
        let cache = super::tool_caches::cache_entry(path)
            .map(|entry| format!("; {}", super::tool_caches::ignore_hint(entry)))
            .unwrap_or_default();
        if let Some(pattern) = self.forbidden.first_match(path) {
            violations.push(Violation::new(
                ViolationClass::ForbiddenPath,
                Some(path),
                pattern,
                format!("`{path}` matches forbidden path `{pattern}`{cache}"),
            ));
        }
        if !self.allowed.patterns.is_empty() && self.allowed.first_match(path).is_none() {
            violations.push(Violation::new(
                ViolationClass::OutsideAllowedPaths,
                Some(path),
                "allowed_paths",
                format!("`{path}` matches none of allowed_paths{cache}"),
            ));
        }
    }

    /// Checks a nested repository (a gitlink): a folder whose files the capture does not list,
    /// so it breaks a forbidden glob that could match anything in it, and needs an allowed glob
    /// that matches everything in it.
    fn check_folder(&self, path: &str, violations: &mut Vec<Violation>) {
        if let Some(pattern) = self.forbidden.first_match_within(path) {
            violations.push(Violation::new(
                ViolationClass::ForbiddenPath,
                Some(path),
                pattern,
                format!(
                    "`{path}` is a nested repository: files in it can match forbidden path \
                     `{pattern}`"
                ),
            ));
        }
        if !self.allowed.patterns.is_empty() && !self.allowed.covers(path) {
            violations.push(Violation::new(
                ViolationClass::OutsideAllowedPaths,
                Some(path),
                "allowed_paths",
                format!(
                    "`{path}` is a nested repository: no pattern of allowed_paths covers \
                     everything in it"
                ),
            ));
        }
    }

    fn check_guard(&self, guard: &GuardReport, violations: &mut Vec<Violation>) {
        for change in &guard.ref_changes {
            let (class, rule) = match change.class {
                RefClass::Tag => (ViolationClass::ProtectedTagViolation, "protected_tags"),
                RefClass::ProtectedBranch => (
                    ViolationClass::ProtectedBranchViolation,
                    "protected_branches",
                ),
                RefClass::OperatorHead => {
                    (ViolationClass::ProtectedBranchViolation, "operator_head")
                }
                RefClass::Snapshot => (ViolationClass::ProtectedBranchViolation, "snapshot_refs"),
                RefClass::Replace => (ViolationClass::ProtectedBranchViolation, "replace_refs"),
                RefClass::Notes => (ViolationClass::ProtectedBranchViolation, "notes_refs"),
                RefClass::Stash => (ViolationClass::ProtectedBranchViolation, "stash"),
                RefClass::SymbolicRef => {
                    (ViolationClass::ProtectedBranchViolation, "symbolic_refs")
                }
                RefClass::OperatorBranch => (
                    ViolationClass::ProtectedBranchViolation,
                    "operator_branches",
                ),
                RefClass::OtherRun => (ViolationClass::ProtectedBranchViolation, "other_runs_refs"),
            };
            let show =
                |value: &Option<String>| value.clone().unwrap_or_else(|| "(none)".to_owned());
            let outcome = if change.restored {
                "restored"
            } else {
                "not restored"
            };
            let detail = format!(
                "`{}` changed from {} to {}; {outcome}",
                change.refname,
                show(&change.before),
                show(&change.after)
            );
            violations.push(Violation::new(class, Some(&change.refname), rule, detail));
        }
        if guard.commits > 0 && self.forbids(Operation::Commit) {
            let detail = format!("{} new commit(s)", guard.commits);
            violations.push(Violation::new(
                ViolationClass::ForbiddenOperation,
                None,
                "commit",
                detail,
            ));
        }
        if self.forbids(Operation::Push) {
            for name in &guard.remote_refs_changed {
                violations.push(operation_violation(
                    Operation::Push,
                    name,
                    "remote-tracking ref moved",
                ));
            }
        }
        let checkout_changes = if self.operator_checkout_forbidden {
            guard.operator_checkout_changed.as_slice()
        } else {
            &[]
        };
        let beside = beside_runs(&guard.other_runs_driven);
        for path in checkout_changes {
            violations.push(Violation::new(
                ViolationClass::PathEscape,
                Some(path),
                "operator_checkout",
                format!(
                    "changed in the operator's checkout while the step ran: the step's agent \
                     (or planner) wrote outside its worktree (or someone edited the checkout meanwhile{beside}); \
                     not restored"
                ),
            ));
        }
        if self.forbids(Operation::ModifyGitConfig) {
            for name in &guard.git_config_changed {
                let detail = if guard.other_runs_driven.is_empty() {
                    "git configuration changed; restored".to_owned()
                } else {
                    format!(
                        "git configuration changed; restored; possibly by another run: {} \
                         driven during the step (each run whose step saw the change is charged)",
                        run_list(&guard.other_runs_driven)
                    )
                };
                violations.push(operation_violation(
                    Operation::ModifyGitConfig,
                    name,
                    &detail,
                ));
            }
            for change in &guard.git_config_put_back_by_other_runs {
                let detail = format!(
                    "git configuration changed during the step and put back by run {}'s guard \
                     at {} before this run's guard looked: by this run's agent or possibly by {} \
                     (each run whose step saw the change is charged)",
                    change.put_back_by,
                    change.at,
                    run_list(&change.possibly_by)
                );
                violations.push(operation_violation(
                    Operation::ModifyGitConfig,
                    &change.path,
                    &detail,
                ));
            }
        }
    }
}

/// `run A`, `runs A, B`.
fn run_list(runs: &[String]) -> String {
    match runs {
        [one] => format!("run {one}"),
        _ => format!("runs {}", runs.join(", ")),
    }
}

/// `; possibly another run's: run A was driven during the step`, or nothing when no other run
/// was.
fn beside_runs(runs: &[String]) -> String {
    if runs.is_empty() {
        return String::new();
    }
    let verb = if runs.len() == 1 { "was" } else { "were" };
    format!(
        "; possibly another run's: {} {verb} driven during the step",
        run_list(runs)
    )
}

fn operation_violation(operation: Operation, path: &str, detail: &str) -> Violation {
    Violation::new(
        ViolationClass::ForbiddenOperation,
        Some(path),
        operation.id(),
        detail,
    )
}

fn describe(operation: Operation) -> &'static str {
    match operation {
        Operation::DeleteFiles => "file deleted",
        Operation::RenameFiles => "file renamed",
        Operation::AddSymlinks => "symlink added",
        Operation::AddBinaryFiles => "binary file added",
        Operation::ChangeFileMode => "file mode changed",
        Operation::ModifyLockfiles => "lockfile changed",
        Operation::ModifyCi => "CI configuration changed",
        _ => "forbidden operation",
    }
}

/// The git mode of a gitlink: a nested repository with a commit, one entry for a folder.
const MODE_GITLINK: &str = "160000";

/// True when either side of the change is a nested repository (a gitlink).
fn is_gitlink(file: &ChangedFile) -> bool {
    file.old_mode.as_deref() == Some(MODE_GITLINK) || file.new_mode.as_deref() == Some(MODE_GITLINK)
}

/// The symlinks on the new side of a change, by normalised path, with their targets.
fn changed_links(status: &WorkspaceStatus) -> HashMap<String, String> {
    status
        .files
        .iter()
        .filter_map(|file| {
            let target = file.symlink_target.as_ref()?;
            let path = normalize_path(&file.path).ok()?;
            Some((path, target.clone()))
        })
        .collect()
}

/// The operations a single file change performs (`ci` holds the `modify_ci` globs).
fn operations_of(file: &ChangedFile, ci: &Patterns) -> Vec<Operation> {
    let mut operations = Vec::new();
    const SYMLINK: &str = "120000";
    let old_symlink = file.old_mode.as_deref() == Some(SYMLINK);
    match file.kind {
        ChangeKind::Delete => operations.push(Operation::DeleteFiles),
        ChangeKind::Rename => operations.push(Operation::RenameFiles),
        _ => {}
    }
    if file.is_symlink() && !old_symlink {
        operations.push(Operation::AddSymlinks);
    }
    // A rename is a new path too: git pairs a deleted text file with a new binary one.
    if file.binary && (file.is_new() || file.kind == ChangeKind::Rename) {
        operations.push(Operation::AddBinaryFiles);
    }
    if let (Some(old), Some(new)) = (&file.old_mode, &file.new_mode)
        && old != new
        && !old_symlink
        && !file.is_symlink()
    {
        operations.push(Operation::ChangeFileMode);
    }
    let names: Vec<&str> = std::iter::once(file.path.as_str())
        .chain(file.old_path.as_deref())
        .collect();
    if names
        .iter()
        .any(|path| LOCKFILES.contains(&path.rsplit('/').next().unwrap_or(path)))
    {
        operations.push(Operation::ModifyLockfiles);
    }
    let gitlink = is_gitlink(file);
    if names
        .iter()
        .any(|path| ci.set.is_match(path) || (gitlink && ci.first_match_within(path).is_some()))
    {
        operations.push(Operation::ModifyCi);
    }
    operations
}
