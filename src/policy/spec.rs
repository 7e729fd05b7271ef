//! The policy as a workflow requests it and the operation ids the
//! kernel can check mechanically.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A policy as written in a workflow (`policy:` inline map) or a `policy.*` prompt's front
/// matter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    /// Globs of paths a step may change; empty means any path. `*` does not cross `/`, `**`
    /// does; a pattern ending in `/` means everything below it.
    #[serde(default)]
    pub allowed_paths: Vec<String>,
    /// Globs of paths a step must not change (checked before `allowed_paths`).
    #[serde(default)]
    pub forbidden_paths: Vec<String>,
    /// Operation ids (enforced) or free text (advisory, passed to the agent).
    #[serde(default)]
    pub forbidden_operations: Vec<String>,
    /// The Rhai function called for each changed file (wired by the scripting issue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
}

/// A machine-checkable operation a policy can forbid.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Deleting a tracked or snapshotted file.
    DeleteFiles,
    /// Renaming or moving a file.
    RenameFiles,
    /// Creating a directory at the top of the worktree.
    CreateTopLevelDirs,
    /// Adding a symlink (or turning a file into one).
    AddSymlinks,
    /// Adding a file git considers binary.
    AddBinaryFiles,
    /// Changing a file's executable bit.
    ChangeFileMode,
    /// Changing a dependency lockfile (`Cargo.lock`, `package-lock.json`, …).
    ModifyLockfiles,
    /// Changing CI configuration (`.github/workflows/`, `.gitlab-ci.yml`, …).
    ModifyCi,
    /// Creating commits.
    Commit,
    /// Pushing (seen as moved remote-tracking refs).
    Push,
    /// Changing `.git/config`, `.git/info/*` or `.git/hooks/*`.
    ModifyGitConfig,
}

impl Operation {
    /// Every operation id.
    pub const ALL: [Operation; 11] = [
        Operation::DeleteFiles,
        Operation::RenameFiles,
        Operation::CreateTopLevelDirs,
        Operation::AddSymlinks,
        Operation::AddBinaryFiles,
        Operation::ChangeFileMode,
        Operation::ModifyLockfiles,
        Operation::ModifyCi,
        Operation::Commit,
        Operation::Push,
        Operation::ModifyGitConfig,
    ];

    /// The id as written in a policy.
    pub fn id(self) -> &'static str {
        match self {
            Operation::DeleteFiles => "delete_files",
            Operation::RenameFiles => "rename_files",
            Operation::CreateTopLevelDirs => "create_top_level_dirs",
            Operation::AddSymlinks => "add_symlinks",
            Operation::AddBinaryFiles => "add_binary_files",
            Operation::ChangeFileMode => "change_file_mode",
            Operation::ModifyLockfiles => "modify_lockfiles",
            Operation::ModifyCi => "modify_ci",
            Operation::Commit => "commit",
            Operation::Push => "push",
            Operation::ModifyGitConfig => "modify_git_config",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.id())
    }
}

impl FromStr for Operation {
    type Err = ();

    /// Exact ids only: anything else is advisory text, never guessed at.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Operation::ALL
            .into_iter()
            .find(|operation| operation.id() == text)
            .ok_or(())
    }
}

/// Basenames of dependency lockfiles (`modify_lockfiles`).
pub const LOCKFILES: [&str; 20] = [
    "Cargo.lock",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "bun.lock",
    "bun.lockb",
    "poetry.lock",
    "uv.lock",
    "Pipfile.lock",
    "pdm.lock",
    "Gemfile.lock",
    "composer.lock",
    "go.sum",
    "flake.lock",
    "mix.lock",
    "pubspec.lock",
    "Package.resolved",
    "packages.lock.json",
    "gradle.lockfile",
];

/// Globs of CI configuration (`modify_ci`).
pub const CI_PATHS: [&str; 13] = [
    ".github/workflows/**",
    ".github/actions/**",
    ".gitlab-ci.yml",
    ".gitlab/**",
    ".circleci/**",
    ".travis.yml",
    "azure-pipelines.yml",
    "Jenkinsfile",
    ".buildkite/**",
    ".drone.yml",
    "bitbucket-pipelines.yml",
    ".woodpecker/**",
    ".ci/**",
];
