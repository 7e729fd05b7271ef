//! `events.ndjson`: one JSON object a line, `seq` 1, 2, 3… without gaps, append-only.
//!
//! A process killed mid-write can leave a torn last line; opening the log removes it (it was
//! never acknowledged) and appending continues with the next sequence number, so a resumed run's
//! events stay contiguous.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{ArtifactsError, EventPayload, SCHEMA_VERSION, now};

/// What an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    /// A run began.
    RunStarted,
    /// A run continued after an interruption or a gate.
    RunResumed,
    /// A step began a visit.
    StepStarted,
    /// An agent or validator process started.
    RunnerStarted,
    /// An agent or validator process ended.
    RunnerCompleted,
    /// A file was added to a step's manifest.
    ArtifactRecorded,
    /// A step's diff broke the policy.
    PolicyViolation,
    /// The kernel chose the next step.
    RouteSelected,
    /// A step visit ended with an outcome.
    StepCompleted,
    /// A step visit failed at runtime (not an outcome of its opcode).
    StepFailed,
    /// A step visit was cut short by a crash or Ctrl-C.
    StepInterrupted,
    /// The operator's `tnh-conductor rollback` is about to reset the worktree (`"by":
    /// "operator"`, no step): its `target`, `snapshot`, and the worktree's `head_before` and
    /// `tree_before`. Recorded first, so a rollback killed part-way leaves what it was undoing
    /// in the record; its `rollback_completed` follows.
    RollbackStarted,
    /// A rollback reset the worktree: a ROLLBACK step, or the operator's `tnh-conductor rollback`
    /// (`"by": "operator"`, no step).
    RollbackCompleted,
    /// A blocking gate is waiting for a human.
    GateRequested,
    /// A gate was decided.
    GateResolved,
    /// A human's decision and comments.
    HumanFeedback,
    /// The planner decided.
    PlannerDecision,
    /// A script printed something.
    ScriptOutput,
    /// The worktree differed from the recorded state and the operator accepted it.
    DriftAccepted,
    /// `resume --accept-drift` of a run killed in an agent step: repository-wide refs and git
    /// configuration files that changed since the step started (`ref_changes`,
    /// `git_config_changed`) are kept as the operator's — left as they are, not put back.
    RepositoryChangesKept,
    /// `resume --skip-guard-check` of a run killed in an agent or validation step whose saved
    /// guard state (`guard_state` names the file) was damaged or missing: the visit was not
    /// checked — refs, git configuration and the operator's checkout are left as they are,
    /// and nothing they show is charged to the visit. `reason` says what was wrong with the
    /// file; `by` is `operator`.
    GuardCheckSkipped,
    /// The worktree folder was gone on resume and was checked out again from the work branch.
    WorktreeRecreated,
    /// The workflow file differs from the one the run started (or last continued) with; the
    /// file as it is now applies from here on.
    WorkflowChanged,
    /// The configuration file (agents, validators, planners) differs from the one the run
    /// started (or last continued) with; it applies from here on.
    ConfigChanged,
    /// The repository's prompt files (`.tnh/prompts/`) differ from those the run started (or
    /// last continued) with; they apply from here on. `changed` lists the files edited,
    /// added or removed.
    PromptsChanged,
    /// The edited workflow's parameter declarations changed the run's parameters: `added`
    /// (new parameters, with the defaults filled in) and `removed` (no longer declared).
    ParamsChanged,
    /// An agent appended to the run log.
    AgentRunlog,
    /// The agent left something (a link, a FIFO, a file) in its step folder under a name the
    /// conductor writes: each entry describes one. It was replaced, never written through.
    EvidenceTampered,
    /// A success STOP committed the run's change on its work branch: `commit`, `parent` (the
    /// base), `tree`, `branch`, `author`, and `identity` (`configured`, or `fallback` when git
    /// had no `user.name`/`user.email`). Recorded just before `run_completed`.
    RunCommitted,
    /// The run ended at a STOP.
    RunCompleted,
    /// The run ended with a runtime error.
    RunFailed,
    /// The operator interrupted the run.
    RunInterrupted,
    /// The operator ended the run with `runs abandon`: `by` (who), `reason` (why, when
    /// given), `was` (where it stood: `waiting`, `blocked`) and `stopped_pids` (the leftover
    /// processes of the run that were killed). Its step and visit are where it stood.
    RunAbandoned,
    /// `tnh-conductor land` brought the run's commit into a branch (`into`, `mode`, `commit`:
    /// the branch's new tip, `before`: its tip before) and/or pushed the run's branch
    /// (`remote`, `pull_request`).
    Landed,
}

/// One line of `events.ndjson`: the event's own keys, and its payload's fields beside them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Event {
    /// The event format's version.
    pub schema_version: u32,
    /// 1, 2, 3… without gaps.
    pub seq: u64,
    /// RFC 3339 UTC.
    pub timestamp: String,
    /// The run.
    pub run_id: String,
    /// The step, for step events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// The visit of the step, for step events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visit: Option<u32>,
    /// What happened (`event_type`), with its fields (large payloads are artifacts the event
    /// points to).
    #[serde(flatten)]
    pub payload: EventPayload,
}

impl Event {
    /// What the event records.
    pub fn event_type(&self) -> EventType {
        self.payload.event_type()
    }

    /// Whether the event is of the visit `(step_id, visit)`.
    pub fn is_of(&self, (step_id, visit): (&str, u32)) -> bool {
        self.step_id.as_deref() == Some(step_id) && self.visit == Some(visit)
    }
}

/// The append-only event stream of one run.
#[derive(Debug)]
pub struct EventLog {
    path: PathBuf,
    file: File,
    run_id: String,
    last_seq: u64,
}

impl EventLog {
    /// Opens (creating if needed) the log, dropping a torn last line and checking that sequence
    /// numbers are contiguous.
    pub fn open(path: &Path, run_id: &str) -> Result<Self, ArtifactsError> {
        Self::open_after(path, run_id, None)
    }

    /// [`EventLog::open`] for a run whose `state.json` (the file `checkpoint.0`) accounts for
    /// the events up to `checkpoint.1`: a log that is missing or ends before that event is
    /// refused, untouched — only a torn line after the checkpoint (a crash mid-append) is
    /// dropped. Events the checkpoint accounts for were made durable before it was written, so
    /// their loss is damage, never a crash; repairing it would reuse their sequence numbers.
    pub fn open_after(
        path: &Path,
        run_id: &str,
        checkpoint: Option<(&Path, u64)>,
    ) -> Result<Self, ArtifactsError> {
        if let Some((state, checkpoint)) = checkpoint {
            check_against_checkpoint(path, state, checkpoint)?;
        }
        let (events, valid_bytes) = read_events(path)?;
        use std::os::unix::fs::OpenOptionsExt;
        // `O_APPEND`: each line lands at the end of the file as it is then, so a second
        // writer (a driver let in while another still appends) can never overwrite a line.
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .append(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(path)
            .map_err(ArtifactsError::io("open", path))?;
        let metadata = file.metadata().map_err(ArtifactsError::io("stat", path))?;
        if !metadata.is_file() {
            return Err(ArtifactsError::io("open", path)(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it is not a regular file",
            )));
        }
        let length = metadata.len();
        if valid_bytes < length {
            file.set_len(valid_bytes)
                .map_err(ArtifactsError::io("truncate the torn last line of", path))?;
        }
        file.seek(SeekFrom::End(0))
            .map_err(ArtifactsError::io("seek", path))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            run_id: run_id.to_owned(),
            last_seq: events.last().map_or(0, |event| event.seq),
        })
    }

    /// The sequence number of the last event written.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Appends an event and returns it.
    pub fn append(
        &mut self,
        step: Option<(&str, u32)>,
        payload: EventPayload,
    ) -> Result<Event, ArtifactsError> {
        let event = Event {
            schema_version: SCHEMA_VERSION,
            seq: self.last_seq + 1,
            timestamp: now(),
            run_id: self.run_id.clone(),
            step_id: step.map(|(id, _)| id.to_owned()),
            visit: step.map(|(_, visit)| visit),
            payload,
        };
        let mut line = serde_json::to_vec(&event).map_err(|source| ArtifactsError::Json {
            what: "event",
            path: self.path.clone(),
            source,
        })?;
        line.push(b'\n');
        // One write per line: a crash leaves at most one torn line at the end.
        self.file
            .write_all(&line)
            .map_err(ArtifactsError::io("append to", &self.path))?;
        self.last_seq = event.seq;
        Ok(event)
    }

    /// Makes every appended event durable.
    pub fn sync(&self) -> Result<(), ArtifactsError> {
        self.file
            .sync_data()
            .map_err(ArtifactsError::io("fsync", &self.path))
    }

    /// Every readable event of a log, and what is wrong with the other lines (each an
    /// [`ArtifactsError::Events`] naming its line): a damaged line (an edit, a disk error, an agent
    /// that wrote into the run directory) hides nothing that comes after it.
    pub fn read_readable(path: &Path) -> Result<(Vec<Event>, Vec<ArtifactsError>), ArtifactsError> {
        scan_events(path).map(|(events, _, damage)| (events, damage))
    }

    /// Reads every complete event of a log (a torn last line is ignored).
    pub fn read_all(path: &Path) -> Result<Vec<Event>, ArtifactsError> {
        read_events(path).map(|(events, _)| events)
    }
}

/// Refuses a log that is missing, or whose complete events end before `checkpoint`, the last
/// event `state` (the run's `state.json`) accounts for. Nothing is written.
pub(crate) fn check_against_checkpoint(
    path: &Path,
    state: &Path,
    checkpoint: u64,
) -> Result<(), ArtifactsError> {
    if checkpoint == 0 {
        return Ok(());
    }
    if std::fs::symlink_metadata(path)
        .is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound)
    {
        return Err(ArtifactsError::EventsMissing {
            path: path.to_path_buf(),
            state: state.to_path_buf(),
            checkpoint,
        });
    }
    let (events, valid_bytes) = read_events(path)?;
    let last = events.last().map_or(0, |event| event.seq);
    if last >= checkpoint {
        return Ok(());
    }
    let length = std::fs::symlink_metadata(path).map_or(valid_bytes, |metadata| metadata.len());
    Err(ArtifactsError::EventsShort {
        path: path.to_path_buf(),
        state: state.to_path_buf(),
        last,
        checkpoint,
        torn_line: (valid_bytes < length).then_some(events.len() as u64 + 1),
    })
}

/// The complete events and the byte length they occupy; the first damaged line is an error.
fn read_events(path: &Path) -> Result<(Vec<Event>, u64), ArtifactsError> {
    let (events, valid_bytes, mut damage) = scan_events(path)?;
    match damage.drain(..).next() {
        Some(first) => Err(first),
        None => Ok((events, valid_bytes)),
    }
}

/// Reads the log line by line: the events, the bytes up to the last event that follows an
/// unbroken sequence, and the damaged lines (a torn last line is not damage: a crash leaves
/// one, and it is dropped).
fn scan_events(path: &Path) -> Result<(Vec<Event>, u64, Vec<ArtifactsError>), ArtifactsError> {
    // An agent can write the run directory: a link or a FIFO in the log's place is refused,
    // never followed or waited on.
    let file = match super::safe_files::open_regular(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Vec::new(), 0, Vec::new()));
        }
        Err(error) => {
            return Err(ArtifactsError::Io {
                action: "open",
                path: path.to_path_buf(),
                source: error,
            });
        }
    };
    let mut reader = BufReader::new(file);
    let mut events: Vec<Event> = Vec::new();
    let mut damage = Vec::new();
    let mut valid_bytes = 0u64;
    let mut line = Vec::new();
    let mut number = 0;
    let problem = |line: usize, message: String| ArtifactsError::Events {
        path: path.to_path_buf(),
        line,
        message,
    };
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(ArtifactsError::io("read", path))?;
        if read == 0 {
            break;
        }
        number += 1;
        let complete = line.ends_with(b"\n");
        match serde_json::from_slice::<Event>(&line) {
            Ok(event) if complete => {
                let expected = events.last().map_or(1, |previous| previous.seq + 1);
                // Right after a damaged line the gap is that line's: said once.
                let after_damage = damage.last().is_some_and(|last| {
                    matches!(last, ArtifactsError::Events { line, .. } if *line + 1 == number)
                });
                if event.seq != expected && !after_damage {
                    let message = format!(
                        "sequence number {} where {expected} was expected",
                        event.seq
                    );
                    damage.push(problem(number, message));
                }
                if damage.is_empty() {
                    valid_bytes += read as u64;
                }
                events.push(event);
            }
            // Only the last line can be torn by a crash; anything else is damage.
            _ if !complete || reader.fill_buf().map_or(true, |rest| rest.is_empty()) => break,
            Ok(_) | Err(_) => damage.push(problem(number, "not a valid event line".to_owned())),
        }
    }
    Ok((events, valid_bytes, damage))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::event_payload::{RunResumed, RunStarted, StepStarted};

    fn started(opcode: &str) -> EventPayload {
        EventPayload::StepStarted(StepStarted {
            opcode: opcode.to_owned(),
        })
    }

    #[test]
    fn sequence_numbers_continue_across_reopen_and_a_torn_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.ndjson");
        let mut log = EventLog::open(&path, "run").unwrap();
        log.append(None, EventPayload::RunStarted(RunStarted::default()))
            .unwrap();
        log.append(Some(("a", 1)), started("RUN_AGENT")).unwrap();
        drop(log);
        // A crash in the middle of the third line.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"schema_version\":1,\"seq\":3,\"timest")
            .unwrap();
        let mut log = EventLog::open(&path, "run").unwrap();
        assert_eq!(log.last_seq(), 2);
        let event = log
            .append(None, EventPayload::RunResumed(RunResumed { from_seq: 2 }))
            .unwrap();
        assert_eq!(event.seq, 3);
        let events = EventLog::read_all(&path).unwrap();
        assert_eq!(
            events.iter().map(|event| event.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(events[1].payload, started("RUN_AGENT"));
        assert_eq!(
            (events[1].step_id.as_deref(), events[1].visit),
            (Some("a"), Some(1))
        );
    }

    /// The payload's fields are written beside the event's own keys, as one flat object.
    #[test]
    fn an_event_line_is_one_flat_object() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.ndjson");
        let mut log = EventLog::open(&path, "run").unwrap();
        log.append(Some(("a", 1)), started("GATE")).unwrap();
        let line: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
        let keys: Vec<&str> = line
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys.iter()
                .copied()
                .collect::<std::collections::BTreeSet<_>>(),
            [
                "schema_version",
                "seq",
                "timestamp",
                "run_id",
                "step_id",
                "visit",
                "event_type",
                "opcode"
            ]
            .into_iter()
            .collect()
        );
        assert_eq!(line["event_type"], "step_started");
        assert_eq!(line["opcode"], "GATE");
    }

    /// A line of an event type this release does not know is damage, as it always was: the
    /// lines after it are still read.
    #[test]
    fn an_unknown_event_type_is_a_damaged_line_that_hides_nothing_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.ndjson");
        let line = |seq: u64, event_type: &str| {
            format!(
                "{{\"schema_version\":1,\"seq\":{seq},\"timestamp\":\"t\",\"run_id\":\"r\",\"event_type\":\"{event_type}\"}}\n"
            )
        };
        let text = [
            line(1, "run_started"),
            line(2, "step_exploded"),
            line(3, "run_resumed"),
        ]
        .concat();
        std::fs::write(&path, text).unwrap();
        let (events, damage) = EventLog::read_readable(&path).unwrap();
        assert_eq!(
            events.iter().map(|event| event.seq).collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(events[1].event_type(), EventType::RunResumed);
        assert_eq!(damage.len(), 1, "{damage:?}");
        assert!(damage[0].to_string().contains("line 2"), "{}", damage[0]);
    }

    #[test]
    fn a_gap_in_the_middle_is_reported_not_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.ndjson");
        let line = |seq: u64| {
            format!(
                "{{\"schema_version\":1,\"seq\":{seq},\"timestamp\":\"t\",\"run_id\":\"r\",\"event_type\":\"run_started\"}}\n"
            )
        };
        std::fs::write(&path, format!("{}{}{}", line(1), line(3), line(4))).unwrap();
        let error = EventLog::open(&path, "r").unwrap_err().to_string();
        assert!(
            error.contains("line 2: sequence number 3 where 2 was expected"),
            "{error}"
        );
    }
}
