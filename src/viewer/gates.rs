//! The gates page: every run waiting at a gate, with what it asks and a form to approve or
//! reject it. A decision goes through the same kernel function as `gate approve|reject`
//! (approvers, drift refusals, exactly one decision wins), and a refusal is shown with the
//! message the command prints. A run that succeeded can be landed from its page.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::html::{Delivery, escape, page, segment, short_time};
use crate::artifacts::GateRequest;
use crate::artifacts::{LifecycleState, RunDir, is_run_id};
use crate::kernel::finished_runs::FinishedIndex;
use crate::kernel::gate::{Decision, DecisionRequest};
use crate::kernel::run::DEFAULT_ARTIFACTS_ROOT;
use crate::kernel::state::Phase;

/// The form of a decision.
#[derive(Debug, serde::Deserialize)]
pub(super) struct DecisionForm {
    /// `approve` or `reject`.
    decision: String,
    /// Who decides.
    #[serde(default)]
    reviewer: String,
    /// Why.
    #[serde(default)]
    comment: String,
    /// Continue the run in the background afterwards (a checkbox: present when ticked).
    #[serde(default)]
    resume: Option<String>,
}

/// What a decision or a landing did, or why it was refused.
pub(super) type Told = Result<String, String>;

/// The message and hint of a refusal, as the command line prints them.
fn refusal(message: String, hint: Option<String>) -> String {
    match hint {
        Some(hint) => format!("{message}\nhint: {hint}"),
        None => message,
    }
}

/// Decides the waiting gate of `run_id`, as `gate approve|reject` does; continues the run in
/// the background with `program resume` when asked.
pub(super) fn decide(
    repo: &Path,
    run_id: &str,
    form: &DecisionForm,
    program: Option<&Path>,
) -> Told {
    let decision = match form.decision.as_str() {
        "approve" => Decision::Approve,
        "reject" => Decision::Reject,
        other => return Err(format!("`{other}` is not a decision: approve or reject")),
    };
    let comment = form.comment.trim();
    let phase = crate::kernel::gate::decide(&DecisionRequest {
        repo,
        run_id,
        decision,
        reviewer: form.reviewer.trim(),
        comment: (!comment.is_empty()).then_some(comment),
        accept_drift: false,
        answered_at: None,
    })
    .map_err(|error| refusal(error.to_string(), error.hint()))?;
    let verb = match decision {
        Decision::Approve => "approved",
        Decision::Reject => "rejected",
    };
    let mut told = format!("gate of run {run_id} {verb} by {}", form.reviewer.trim());
    match phase {
        Phase::Finished { end, .. } => {
            let _ = write!(told, "; the run ended ({})", end.name());
        }
        _ if form.resume.is_some() => match program.map(|program| resume(program, repo, run_id)) {
            Some(Ok(())) => told.push_str("; the run continues in the background"),
            Some(Err(error)) => {
                let _ = write!(
                    told,
                    "; it could not be continued ({error}): run `tnh-conductor resume {run_id}`"
                );
            }
            None => {
                let _ = write!(told, "; continue it with `tnh-conductor resume {run_id}`");
            }
        },
        _ => {
            let _ = write!(told, "; continue it with `tnh-conductor resume {run_id}`");
        }
    }
    Ok(told)
}

/// Starts `program --repo REPO resume RUN_ID` detached from the page; a thread reaps it.
fn resume(program: &Path, repo: &Path, run_id: &str) -> std::io::Result<()> {
    let mut child = std::process::Command::new(program)
        .arg("--repo")
        .arg(repo)
        .args(["--color", "never", "resume", run_id])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// Lands a succeeded run into the branch it started from, as `land RUN_ID` does.
pub(super) fn land(repo: &Path, run_id: &str) -> Told {
    let options = crate::kernel::land::LandOptions {
        into: None,
        mode: crate::workspace::land::LandMode::Auto,
        push: None,
        pull_request: false,
    };
    let report = crate::kernel::land::land(repo, run_id, &options)
        .map_err(|error| refusal(error.to_string(), error.hint()))?;
    Ok(match report.landed {
        Some(landed) => format!(
            "run {run_id} landed into {} ({}): {}",
            landed.branch, landed.mode, landed.after
        ),
        None => format!("run {run_id}: nothing was landed"),
    })
}

/// A run waiting at a gate.
struct Waiting {
    repo: usize,
    run_id: String,
    step_id: String,
    visit: u32,
    /// What the gate asks; `None` while it is being written or when damaged.
    request: Option<GateRequest>,
}

/// Every run waiting at a gate; finished runs the index knows are not read, and those it
/// did not know yet are added to it (as `gate list` does). A gate past its deadline is shown
/// as it is: reading changes no run, and deciding it times it out.
fn waiting(repos: &[PathBuf]) -> Vec<Waiting> {
    let mut found = Vec::new();
    for (index, repo) in repos.iter().enumerate() {
        let mut finished = FinishedIndex::load(repo);
        let root = repo.join(DEFAULT_ARTIFACTS_ROOT);
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut ids: Vec<String> = entries
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| is_run_id(name))
            .collect();
        ids.sort_unstable();
        for run_id in &ids {
            if finished.get(run_id).is_some() {
                continue;
            }
            let run_id = run_id.clone();
            let run_dir = RunDir::at(root.join(&run_id));
            if crate::kernel::state::read_state(&run_dir.state())
                .is_ok_and(|state| matches!(state.phase, Phase::Finished { .. }))
            {
                finished.learn(&run_dir, &run_id);
                continue;
            }
            let Ok(status) = crate::kernel::run_status::read_status(&run_dir) else {
                continue;
            };
            let (Some(step_id), Some(visit)) = (status.current_step_id, status.visit) else {
                continue;
            };
            if status.lifecycle_state != LifecycleState::Waiting {
                continue;
            }
            let request = crate::kernel::gate::request_of(&run_dir, &step_id, visit).ok();
            found.push(Waiting {
                repo: index,
                run_id,
                step_id,
                visit,
                request,
            });
        }
        finished.save(&ids, None);
    }
    found
}

/// The gates page, with what a decision or landing just did.
pub(super) fn render(repos: &[PathBuf], told: Option<&Told>) -> String {
    let mut body = String::from("<h1>Gates</h1>");
    match told {
        Some(Ok(message)) => {
            let _ = write!(body, "<pre class=\"done\">{}</pre>", escape(message));
        }
        Some(Err(message)) => {
            let _ = write!(body, "<pre class=\"refused\">{}</pre>", escape(message));
        }
        None => {}
    }
    let gates = waiting(repos);
    if gates.is_empty() {
        body.push_str("<p>No run waits at a gate.</p>");
    }
    for gate in gates {
        body.push_str(&gate_section(&gate));
    }
    page("Gates", &body, Delivery::Served { live: false })
}

fn gate_section(gate: &Waiting) -> String {
    let run = segment(&gate.run_id);
    let step = segment(&gate.step_id);
    let repo = gate.repo;
    let request = gate.request.as_ref();
    let approvers = match request.map(|request| &request.approvers) {
        Some(approvers) if !approvers.is_empty() => approvers.join(", "),
        _ => "anyone".to_owned(),
    };
    format!(
        "<section id=\"run-{repo}-{run}\"><h2><a href=\"/r/{repo}/{run}\">{}</a> at {} #{}</h2>\
         <p>{}</p><p>Approvers: {}. Deadline: {}.</p>\
         <p><a href=\"/r/{repo}/{run}/visit/{step}/{}\">What it shows (the change, the request)</a></p>\
         <form class=\"decide\" method=\"post\" action=\"/r/{repo}/{run}/gate\">\
         <p><label>Reviewer <input name=\"reviewer\" required></label></p>\
         <p><label>Comment<br><textarea name=\"comment\"></textarea></label></p>\
         <p><label><input type=\"checkbox\" name=\"resume\" value=\"on\"> continue the run afterwards</label></p>\
         <button name=\"decision\" value=\"approve\">Approve</button> \
         <button name=\"decision\" value=\"reject\">Reject</button></form></section>",
        escape(&gate.run_id),
        escape(&gate.step_id),
        gate.visit,
        escape(request.map_or("(the request is being written)", |request| &request.reason)),
        escape(&approvers),
        escape(
            &request
                .and_then(|request| request.deadline.as_deref())
                .map(short_time)
                .unwrap_or_else(|| "none".to_owned())
        ),
        gate.visit
    )
}
