//! A run told from its record, for the message of its result commit and the body of its pull
//! request: a one-line summary, the visits and their outcomes in order, validations, planner
//! assessments, and who approved its blocking gates.

use std::fmt::Write as _;

use crate::artifacts::event_payload::{PlannerDecision, RunnerCompleted};
use crate::artifacts::{ArtifactRole, Event, EventPayload, RunDir, RunMetadata, safe_files};
use crate::outcome::Outcome;
use crate::text::one_line;

/// The longest first line of a result commit (git's own advice is to keep it short).
const SUBJECT_LIMIT: usize = 72;

/// How much of an agent's final answer is read for the summary.
const FINAL_ANSWER_LIMIT: u64 = 64 * 1024;

/// A run, told from its events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStory {
    /// The run.
    pub run_id: String,
    /// The workflow.
    pub workflow_id: String,
    /// Its version.
    pub workflow_version: i64,
    /// The last gate's reason, else the last agent's final answer (first line), if any.
    pub summary: Option<String>,
    /// `step #visit (OPCODE): outcome`, in the order the visits ended.
    pub steps: Vec<String>,
    /// `step #visit: outcome (validator: exit code, …)` of each validation.
    pub validations: Vec<String>,
    /// `step #visit: status by planner (risk: …)` of each planner decision.
    pub assessments: Vec<String>,
    /// Who approved a blocking gate, one entry per approval.
    pub approvers: Vec<String>,
}

impl RunStory {
    /// Reads the story of a run from its events (and its last agent's final answer).
    pub fn of(run_dir: &RunDir, metadata: &RunMetadata, events: &[Event]) -> Self {
        let mut story = RunStory {
            run_id: metadata.run_id.clone(),
            workflow_id: metadata.workflow_id.clone(),
            workflow_version: metadata.workflow_version,
            ..RunStory::default()
        };
        let mut gate_reason = None;
        let mut final_answer = None;
        for event in events {
            let visit = || {
                format!(
                    "{} #{}",
                    one_line(event.step_id.as_deref().unwrap_or("?")),
                    event.visit.unwrap_or(0)
                )
            };
            match &event.payload {
                EventPayload::StepCompleted(completed) => {
                    let opcode = opcode_of(events, event);
                    let outcome = completed.outcome.map_or("?", Outcome::as_str);
                    story
                        .steps
                        .push(format!("{} ({opcode}): {outcome}", visit()));
                }
                EventPayload::RunnerCompleted(completed) if completed.exit_codes.is_some() => {
                    story.validations.push(format!(
                        "{}: {}{}",
                        visit(),
                        completed.outcome.map_or("?", Outcome::as_str),
                        exit_codes(completed)
                    ));
                }
                EventPayload::PlannerDecision(decision) => {
                    story.assessments.push(assessment(decision, &visit()));
                }
                EventPayload::GateRequested(requested) => {
                    // A gate without a `reason:` says only which step it is: no summary.
                    let unwritten = format!(
                        "review step `{}` of run {}",
                        event.step_id.as_deref().unwrap_or_default(),
                        metadata.run_id
                    );
                    let reason = &requested.reason;
                    if !reason.trim().is_empty() && *reason != unwritten {
                        gate_reason = Some(reason.clone());
                    }
                }
                EventPayload::GateResolved(resolved) if resolved.decision == "gate_approved" => {
                    if let Some(Some(reviewer)) = &resolved.reviewer {
                        story.approvers.push(one_line(reviewer).into_owned());
                    }
                }
                EventPayload::ArtifactRecorded(recorded)
                    if recorded.role == Some(ArtifactRole::RunnerFinalResponse) =>
                {
                    final_answer = Some(recorded.path.clone());
                }
                _ => {}
            }
        }
        story.summary = gate_reason
            .or_else(|| final_answer.and_then(|path| first_line_of(run_dir, &path)))
            .map(|text| one_line(text.trim()).into_owned());
        story
    }

    /// The result commit's message: `<workflow>: <summary>`, a blank line, the visits and
    /// their outcomes, a blank line, the trailers.
    pub fn commit_message(&self) -> String {
        let subject = self.subject();
        let mut message = subject.clone();
        message.push_str("\n\n");
        // A summary cut short in the subject is given whole first.
        if let Some(summary) = &self.summary
            && subject.ends_with('…')
        {
            let _ = writeln!(message, "{summary}\n");
        }
        for step in &self.steps {
            let _ = writeln!(message, "- {step}");
        }
        message.push('\n');
        message.push_str(&self.trailers());
        message
    }

    /// `<workflow>: <summary>`, cut to a short line.
    pub fn subject(&self) -> String {
        let summary = self.summary.as_deref().unwrap_or("the run's result");
        shorten(&format!("{}: {summary}", self.workflow_id), SUBJECT_LIMIT)
    }

    /// `Tnh-Run`, `Tnh-Workflow` and one `Tnh-Approved-By` per approval.
    pub fn trailers(&self) -> String {
        let mut trailers = format!(
            "{}\nTnh-Workflow: {} v{}\n",
            crate::workspace::run_trailer(&self.run_id),
            self.workflow_id,
            self.workflow_version
        );
        for approver in &self.approvers {
            let _ = writeln!(trailers, "Tnh-Approved-By: {approver}");
        }
        trailers
    }

    /// A pull request's body, in Markdown.
    pub fn pull_request_body(&self) -> String {
        let mut body = String::new();
        if let Some(summary) = &self.summary {
            let _ = writeln!(body, "{summary}\n");
        }
        let sections = [
            ("Steps", &self.steps),
            ("Validation", &self.validations),
            ("Planner assessments", &self.assessments),
            ("Approved by", &self.approvers),
        ];
        for (title, lines) in sections {
            if lines.is_empty() {
                continue;
            }
            let _ = writeln!(body, "### {title}\n");
            for line in lines {
                let _ = writeln!(body, "- {line}");
            }
            body.push('\n');
        }
        let _ = writeln!(
            body,
            "Run `{}` of workflow `{}` v{} (tnh-conductor).",
            self.run_id, self.workflow_id, self.workflow_version
        );
        body
    }
}

/// The opcode of the visit `completed` ended, from its `step_started` event.
fn opcode_of<'a>(events: &'a [Event], completed: &Event) -> &'a str {
    events
        .iter()
        .rev()
        .filter(|event| {
            event.seq < completed.seq
                && event.step_id == completed.step_id
                && event.visit == completed.visit
        })
        .find_map(|event| match &event.payload {
            EventPayload::StepStarted(started) => Some(started.opcode.as_str()),
            _ => None,
        })
        .unwrap_or("?")
}

/// ` (tests: 0, lint: 1)` from a validation's exit codes; empty without any.
fn exit_codes(completed: &RunnerCompleted) -> String {
    let codes = completed.exit_codes.as_ref();
    if codes.is_none_or(std::collections::BTreeMap::is_empty) {
        return String::new();
    }
    let listed: Vec<String> = codes
        .into_iter()
        .flatten()
        .map(|(name, code)| match code {
            Some(code) => format!("{}: {code}", one_line(name)),
            None => format!("{}: null", one_line(name)),
        })
        .collect();
    format!(" ({})", listed.join(", "))
}

/// `judge #1: success by rules (risk: …)`.
fn assessment(decision: &PlannerDecision, visit: &str) -> String {
    let status = decision.status.map_or("?", Outcome::as_str);
    let planner = decision
        .planner
        .as_deref()
        .map(|planner| format!(" by {}", one_line(planner)))
        .unwrap_or_default();
    let flags: Vec<String> = decision
        .risk_flags
        .iter()
        .flatten()
        .map(|flag| one_line(flag).into_owned())
        .collect();
    let risk = if flags.is_empty() {
        String::new()
    } else {
        format!(" (risk: {})", flags.join(", "))
    };
    format!("{visit}: {status}{planner}{risk}")
}

/// The first non-blank line of a file of the run directory (an agent's final answer).
fn first_line_of(run_dir: &RunDir, relative: &str) -> Option<String> {
    if relative.split('/').any(|part| part == "..") {
        return None;
    }
    let (bytes, _) =
        safe_files::read_regular(&run_dir.root().join(relative), FINAL_ANSWER_LIMIT).ok()?;
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(str::to_owned)
}

/// `text` cut to `limit` characters, ending with `…` when cut.
fn shorten(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(limit - 1).collect();
    // At a word's end when there is one in the second half, not in the middle of a word.
    if let Some(space) = cut.rfind(' ').filter(|space| *space > cut.len() / 2) {
        cut.truncate(space);
    }
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_summary_is_cut_to_a_short_subject() {
        let story = RunStory {
            workflow_id: "wf".into(),
            summary: Some("x".repeat(200)),
            ..RunStory::default()
        };
        let subject = story.subject();
        assert_eq!(subject.chars().count(), SUBJECT_LIMIT);
        assert!(subject.starts_with("wf: xxx") && subject.ends_with('…'));
        // Words are not cut in the middle, and the whole summary opens the message's body.
        let words = RunStory {
            summary: Some(format!("{} passed validation", "word ".repeat(14))),
            ..story
        };
        let subject = words.subject();
        assert!(subject.ends_with("word…"), "{subject}");
        assert!(
            words
                .commit_message()
                .contains(&format!("\n\n{} passed validation\n", "word ".repeat(14))),
            "{}",
            words.commit_message()
        );
    }

    #[test]
    fn the_message_ends_with_its_trailers_after_a_blank_line() {
        let story = RunStory {
            run_id: "R1".into(),
            workflow_id: "wf".into(),
            workflow_version: 2,
            summary: Some("ship it".into()),
            steps: vec!["work #1 (RUN_AGENT): completed".into()],
            approvers: vec!["lead".into(), "second".into()],
            ..RunStory::default()
        };
        assert_eq!(
            story.commit_message(),
            "wf: ship it\n\n- work #1 (RUN_AGENT): completed\n\nTnh-Run: R1\nTnh-Workflow: wf v2\nTnh-Approved-By: lead\nTnh-Approved-By: second\n"
        );
    }
}
