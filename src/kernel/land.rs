//! `tnh-conductor land`: bringing a successful run's result commit into a branch of the
//! operator's, and pushing the run's branch (with a pull request opened through `gh`).
//!
//! Only on the operator's command, and refusing — with nothing changed — a run that did not
//! succeed, one landed already, a checkout with uncommitted changes, a conflict, or another
//! run being driven meanwhile (its guard would take the operator's branch or checkout moving
//! under its step for its agent's doing, and put the branch back). Each landing is recorded
//! as a `landed` event and in `metadata.json` (`landings`), under the run's lock.

use std::path::{Path, PathBuf};

use super::lock::{RunLock, is_held};
use super::run::{RunError, find_run_dir};
use super::run_story::RunStory;
use crate::artifacts::{
    ArtifactsError, Event, EventLog, EventPayload, Landing, RunDir, RunMetadata, is_run_id, now,
    write_json_atomic,
};
use crate::workspace::WorkspaceError;
use crate::workspace::land::{LandMode, LandRequest, Landed, Refusal, land as land_into, push};

/// What `land` was asked to do.
#[derive(Debug, Clone)]
pub struct LandOptions {
    /// The branch to land into; default: the branch the run started from.
    pub into: Option<String>,
    /// How.
    pub mode: LandMode,
    /// Push the run's branch to this remote.
    pub push: Option<String>,
    /// Then open a pull request with `gh pr create`.
    pub pull_request: bool,
}

/// Why `land` did nothing, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LandError {
    /// The run could not be found or opened.
    #[error(transparent)]
    Run(Box<RunError>),
    /// The run did not reach a success STOP.
    #[error("run `{run_id}` did not end in success ({state}): there is nothing to land")]
    NotSucceeded {
        /// The run.
        run_id: String,
        /// How it stands.
        state: String,
    },
    /// The run succeeded without changing anything.
    #[error("run `{run_id}` changed nothing: it has no commit to land")]
    NoChange {
        /// The run.
        run_id: String,
    },
    /// The run was landed into a branch before.
    #[error("run `{run_id}` was landed already, into `{into}` at {at}")]
    AlreadyLanded {
        /// The run.
        run_id: String,
        /// Where.
        into: String,
        /// When.
        at: String,
    },
    /// No `--into`, and the run started from no branch.
    #[error("run `{run_id}` started from `{base_ref}`, which is no branch: say where to land it")]
    NoTarget {
        /// The run.
        run_id: String,
        /// Its base.
        base_ref: String,
    },
    /// The git checks refused the landing.
    #[error("{}", refusal_message(branch, refusal))]
    Refused {
        /// The branch.
        branch: String,
        /// Why.
        refusal: Refusal,
    },
    /// Other runs of the repository are being driven.
    #[error("runs are being driven in this repository ({}): landing now would move a branch and files their guards watch", runs.join(", "))]
    OtherRunsDriven {
        /// Their ids.
        runs: Vec<String>,
    },
    /// `--push` names something that is not a remote name.
    #[error("`{remote}` is not a remote name")]
    BadRemote {
        /// What was given.
        remote: String,
    },
    /// git failed.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The run directory could not be read or written.
    #[error(transparent)]
    Artifacts(#[from] ArtifactsError),
    /// `gh pr create` failed (the branch was pushed).
    #[error("`gh pr create` failed ({status}): {stderr}")]
    PullRequest {
        /// How it exited.
        status: String,
        /// What it said.
        stderr: String,
    },
}

impl From<RunError> for LandError {
    fn from(error: RunError) -> Self {
        LandError::Run(Box::new(error))
    }
}

fn refusal_message(branch: &str, refusal: &Refusal) -> String {
    match refusal {
        Refusal::NoBranch => format!("there is no branch `{branch}`"),
        Refusal::Dirty { checkout, files } => format!(
            "`{branch}` is checked out in `{}` with uncommitted changes to {}",
            checkout.display(),
            files.join(", ")
        ),
        Refusal::Conflict { files } => format!(
            "the run's change conflicts with what `{branch}` gained since the run started, in {}",
            files.join(", ")
        ),
        Refusal::NotFastForward => format!(
            "`{branch}` moved since the run started: landing it is no fast-forward (--ff-only)"
        ),
        Refusal::AlreadyContained => {
            format!("`{branch}` already holds the run's change (its commit, or one naming the run)")
        }
        Refusal::InTheWay { checkout, detail } => format!(
            "files the landing would write stand untracked in `{}`: {detail}",
            checkout.display()
        ),
    }
}

impl LandError {
    /// Whether the command line asked for something impossible (exit 2) rather than the
    /// repository or the run refusing it (exit 1) or a failure (exit 4).
    pub fn is_usage(&self) -> bool {
        match self {
            LandError::Run(error) => error.is_usage(),
            LandError::NoTarget { .. } | LandError::BadRemote { .. } => true,
            LandError::Refused { refusal, .. } => *refusal == Refusal::NoBranch,
            _ => false,
        }
    }

    /// Whether nothing was changed because the run, the branch or the checkout said no.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            LandError::NotSucceeded { .. }
                | LandError::NoChange { .. }
                | LandError::AlreadyLanded { .. }
                | LandError::Refused { .. }
                | LandError::OtherRunsDriven { .. }
        )
    }

    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        let unchanged = "nothing was changed";
        Some(match self {
            LandError::Run(error) => return error.hint(),
            LandError::NotSucceeded { run_id, .. } => {
                format!("{unchanged}; `tnh-conductor runs show {run_id}` says how it stands")
            }
            LandError::NoChange { .. } => format!("{unchanged}; the branch has nothing to gain"),
            LandError::AlreadyLanded { run_id, .. } => format!(
                "{unchanged}; `tnh-conductor runs show {run_id}` shows the landing; `--push REMOTE` alone still pushes the run's branch"
            ),
            LandError::NoTarget { .. } => "pass --into BRANCH".to_owned(),
            LandError::Refused { refusal, .. } => refusal_hint(refusal),
            LandError::OtherRunsDriven { .. } => format!(
                "{unchanged}; land once they finish or wait at a gate (`tnh-conductor runs list`)"
            ),
            LandError::BadRemote { .. } => "name a remote of `git remote -v`".to_owned(),
            LandError::Workspace(error) => return error.hint(),
            LandError::Artifacts(error) => return error.hint(),
            LandError::PullRequest { .. } => {
                "the branch was pushed; open the pull request by hand, or fix `gh` (`gh auth status`) and run `land --push REMOTE --pr` again".to_owned()
            }
        })
    }
}

fn refusal_hint(refusal: &Refusal) -> String {
    let unchanged = "nothing was changed";
    match refusal {
        Refusal::NoBranch => format!("{unchanged}; pass --into with an existing local branch"),
        Refusal::Dirty { .. } => {
            format!("{unchanged}; commit or stash those changes, then land again")
        }
        Refusal::Conflict { .. } => format!(
            "{unchanged}; merge the run's branch by hand (`git merge` it and resolve), or land it into another branch"
        ),
        Refusal::NotFastForward => {
            format!("{unchanged}; drop --ff-only for a merge commit, or use --squash")
        }
        Refusal::AlreadyContained => format!(
            "{unchanged}; the branch has nothing to gain (a `land` interrupted before it was recorded leaves it so)"
        ),
        Refusal::InTheWay { .. } => {
            format!("{unchanged}; move those untracked files away, then land again")
        }
    }
}

/// What `land` did.
#[derive(Debug, Clone)]
pub struct LandReport {
    /// The run.
    pub run_id: String,
    /// The run's result commit.
    pub result_commit: String,
    /// The local landing, when one was made.
    pub landed: Option<Landed>,
    /// The remote and the branch pushed, when pushed.
    pub pushed: Option<(String, String)>,
    /// The pull request, when asked for.
    pub pull_request: Option<PullRequest>,
}

/// The pull request of a `--pr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullRequest {
    /// `gh` opened it; what it printed (its URL).
    Opened(String),
    /// `gh` is not on PATH: the command that would open it, for the operator to run.
    Command(Vec<String>),
}

/// Lands run `run_id` of the repository at `repo` as `options` say.
pub fn land(repo: &Path, run_id: &str, options: &LandOptions) -> Result<LandReport, LandError> {
    if let Some(remote) = &options.push
        && (remote.is_empty() || remote.starts_with('-') || remote.chars().any(char::is_whitespace))
    {
        return Err(LandError::BadRemote {
            remote: remote.clone(),
        });
    }
    let run_dir = find_run_dir(repo, run_id)?;
    super::run::check_recorded_repository(repo, &run_dir, run_id)?;
    let _lock = RunLock::acquire(&run_dir.lock()).map_err(RunError::from)?;
    let metadata = run_dir.read_metadata()?;
    let events = EventLog::read_all(&run_dir.events())?;
    let result_commit = result_of(run_id, &metadata, &events)?;
    let mut report = LandReport {
        run_id: run_id.to_owned(),
        result_commit: result_commit.clone(),
        landed: None,
        pushed: None,
        pull_request: None,
    };
    let repo_root = PathBuf::from(&metadata.repo_root);
    let local = options.push.is_none() || options.into.is_some();
    if local {
        let target = Target {
            repo_root: &repo_root,
            run_dir: &run_dir,
            metadata: &metadata,
            events: &events,
            result: &result_commit,
        };
        let landed = land_locally(&target, options)?;
        record(
            &run_dir,
            Landing {
                at: now(),
                into: Some(landed.branch.clone()),
                mode: Some(landed.mode.to_owned()),
                commit: Some(landed.after.clone()),
                remote: None,
                pull_request: None,
            },
            Some(&landed.before),
            &result_commit,
        )?;
        report.landed = Some(landed);
    }
    if let Some(remote) = &options.push {
        push(&repo_root, remote, &result_commit, &metadata.branch)?;
        report.pushed = Some((remote.clone(), metadata.branch.clone()));
        let pull_request = if options.pull_request {
            let base = options.into.clone().or(metadata.base_branch.clone());
            let story = RunStory::of(&run_dir, &metadata, &events);
            Some(open_pull_request(
                &repo_root,
                &metadata.branch,
                base.as_deref(),
                &story,
            ))
        } else {
            None
        };
        let opened = match &pull_request {
            Some(Ok(PullRequest::Opened(url))) => Some(url.clone()),
            _ => None,
        };
        let landing = Landing {
            at: now(),
            into: None,
            mode: None,
            commit: None,
            remote: Some(remote.clone()),
            pull_request: opened,
        };
        record(&run_dir, landing, None, &result_commit)?;
        report.pull_request = pull_request.transpose()?;
    }
    Ok(report)
}

/// The run's result commit, once it is known to have ended in success.
fn result_of(run_id: &str, metadata: &RunMetadata, events: &[Event]) -> Result<String, LandError> {
    let kind = metadata.termination.as_ref().map(|end| end.kind.as_str());
    if kind != Some("success") {
        return Err(LandError::NotSucceeded {
            run_id: run_id.to_owned(),
            state: kind.map_or_else(
                || "it has not ended".to_owned(),
                |kind| format!("it ended in {kind}"),
            ),
        });
    }
    let recorded = events.iter().rev().find_map(|event| match &event.payload {
        EventPayload::RunCommitted(committed) => Some(committed.commit.clone()),
        _ => None,
    });
    recorded
        .or_else(|| metadata.result_commit.clone())
        .ok_or_else(|| LandError::NoChange {
            run_id: run_id.to_owned(),
        })
}

/// The run being landed, as read under its lock.
struct Target<'a> {
    repo_root: &'a Path,
    run_dir: &'a RunDir,
    metadata: &'a RunMetadata,
    events: &'a [Event],
    /// Its result commit.
    result: &'a str,
}

/// The checks that need the repository, then the landing itself.
fn land_locally(target: &Target<'_>, options: &LandOptions) -> Result<Landed, LandError> {
    let Target {
        repo_root,
        run_dir,
        metadata,
        events,
        result,
    } = *target;
    let earlier = events.iter().find_map(|event| match &event.payload {
        EventPayload::Landed(landed) => Some((event, landed.into.as_ref()?)),
        _ => None,
    });
    if let Some((earlier, into)) = earlier {
        return Err(LandError::AlreadyLanded {
            run_id: metadata.run_id.clone(),
            into: into.clone(),
            at: earlier.timestamp.clone(),
        });
    }
    let Some(branch) = options.into.clone().or(metadata.base_branch.clone()) else {
        return Err(LandError::NoTarget {
            run_id: metadata.run_id.clone(),
            base_ref: metadata.base_ref.clone(),
        });
    };
    let driven = other_runs_driven(run_dir, &metadata.run_id);
    if !driven.is_empty() {
        return Err(LandError::OtherRunsDriven { runs: driven });
    }
    let story = RunStory::of(run_dir, metadata, events);
    let merge_message = format!(
        "Merge run {} of {} into {branch}\n\n{}\n\n{}",
        metadata.run_id,
        metadata.workflow_id,
        story.subject(),
        story.trailers()
    );
    let request = LandRequest {
        repo_root,
        branch: &branch,
        result,
        run_id: &metadata.run_id,
        mode: options.mode,
        squash_message: &story.commit_message(),
        merge_message: &merge_message,
    };
    land_into(&request)?.map_err(|refusal| LandError::Refused {
        branch: branch.clone(),
        refusal,
    })
}

/// The other runs of the repository whose lock a process holds.
fn other_runs_driven(run_dir: &RunDir, run_id: &str) -> Vec<String> {
    let Some(root) = run_dir.root().parent() else {
        return Vec::new();
    };
    let mut driven: Vec<String> = std::fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| is_run_id(name) && name != run_id)
                .filter(|name| is_held(&RunDir::at(root.join(name)).lock()))
                .collect()
        })
        .unwrap_or_default();
    driven.sort();
    driven
}

/// Appends a `landed` event (after the run's checkpoint, as an operator's rollback of an
/// ended run does) and adds the landing to `metadata.json`.
fn record(
    run_dir: &RunDir,
    landing: Landing,
    before: Option<&str>,
    result_commit: &str,
) -> Result<(), LandError> {
    let checkpoint = super::recorder::checkpointed_seq(run_dir);
    let state = run_dir.state();
    let mut metadata = run_dir.read_metadata()?;
    let mut events = EventLog::open_after(
        &run_dir.events(),
        &metadata.run_id,
        checkpoint.map(|seq| (state.as_path(), seq)),
    )?;
    let fields = crate::artifacts::event_payload::Landed {
        run_commit: result_commit.to_owned(),
        into: landing.into.clone(),
        mode: landing.mode.clone(),
        commit: landing.commit.clone(),
        before: before.map(str::to_owned),
        remote: landing.remote.clone(),
        pull_request: landing.pull_request.clone(),
    };
    events.append(None, EventPayload::Landed(fields))?;
    events.sync()?;
    metadata.landings.push(landing);
    write_json_atomic(&run_dir.metadata(), &metadata)?;
    Ok(())
}

/// Opens the pull request with `gh pr create`, or, without `gh` on PATH, gives the command.
fn open_pull_request(
    repo_root: &Path,
    head: &str,
    base: Option<&str>,
    story: &RunStory,
) -> Result<PullRequest, LandError> {
    let mut argv: Vec<String> = ["gh", "pr", "create", "--head", head]
        .into_iter()
        .map(str::to_owned)
        .collect();
    if let Some(base) = base {
        argv.extend(["--base".to_owned(), base.to_owned()]);
    }
    argv.extend([
        "--title".to_owned(),
        story.subject(),
        "--body".to_owned(),
        story.pull_request_body(),
    ]);
    let Some(gh) = on_path("gh") else {
        return Ok(PullRequest::Command(argv));
    };
    let output = std::process::Command::new(gh)
        .args(&argv[1..])
        .current_dir(repo_root)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|error| LandError::PullRequest {
            status: "not started".to_owned(),
            stderr: error.to_string(),
        })?;
    if !output.status.success() {
        return Err(LandError::PullRequest {
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(PullRequest::Opened(
        String::from_utf8_lossy(&output.stdout).trim().to_owned(),
    ))
}

/// The executable `name` as PATH finds it.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|folder| !folder.as_os_str().is_empty())
        .map(|folder| folder.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|metadata| {
                metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
            })
        })
}
