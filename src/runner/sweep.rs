//! Ending every process of a step (or of a run) for good, even one that keeps forking.
//!
//! One look at `/proc` followed by one SIGKILL per pid is not enough: a fork chain (each
//! generation forks the next and exits at once) always has a successor the look did not see,
//! and a search that happens to catch only dying generations finds nothing at all. So the
//! ending is made of passes, each of which *freezes* before it kills: SIGSTOP to every group
//! the processes may be signalled through as a whole (a group signal reaches a child being
//! forked too), then a search, then SIGSTOP to everything found (a stopped process cannot
//! fork), then SIGKILL to all of it. Passes repeat until one finds nothing, within a time
//! limit; what is still alive then is reported, never silently left.
//!
//! A group of our adopted children in a session of their own is also frozen *before* the
//! search: a fork chain that left with `setsid` is never caught alive by a search (a
//! generation lives a millisecond, a search takes longer), but its dead generations stay as
//! our zombies and name its group. Such a group is let go (SIGCONT) when nothing in it holds
//! the step's token (another step's processes, for a library user supervising several), and
//! only by the last of the sweeps of this process that froze it: two steps sweeping at once
//! each take the other's escaped group for a suspect, and one letting it go while the other
//! searches it would let a fork chain slip through that search ([`hold_groups`]). Suspects
//! are frozen again in every pass, and a pass that could not list our children does not end
//! the sweep.
//!
//! A whole group is signalled only when that cannot reach anyone else: the step's own group;
//! a group in a session the step created (a `setsid` escape: a session cannot be joined, only
//! inherited, so all its members descend from the step); and, for a run's orphans found by a
//! scan of every process, a group all of whose live members carry the run's mark.
//!
//! After the conductor died, its step's group is found again from the record the supervisor
//! left in the step's folder ([`PROCESS_GROUP_FILE`]), and ended as a whole when it can be
//! shown to be still that group ([`kill_recorded_group`]): members that cleared their
//! environment are caught that way.
//!
//! Limits: a descendant that leaves the group *and* clears its environment is not found
//! (docs/runners.md); a group is judged from one reading of `/proc`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::process::{self, StepMark, StrayProcess};
use crate::proc::boot_id;

/// How long the final sweep of a step keeps trying before it reports survivors.
const SWEEP_LIMIT: Duration = Duration::from_secs(2);
/// How long `kill_marked` keeps trying before it reports survivors.
const ORPHAN_LIMIT: Duration = Duration::from_secs(5);
/// The pause between passes that found something: killed processes die asynchronously.
const PASS_PAUSE: Duration = Duration::from_millis(1);

/// What a sweep found and could not end.
#[derive(Debug, Clone, Default)]
pub(crate) struct Swept {
    /// Every process of the step found alive, in any pass; all were sent SIGKILL.
    pub(crate) found: Vec<StrayProcess>,
    /// Processes still alive when the time limit ran out.
    pub(crate) survivors: Vec<StrayProcess>,
}

/// The conductor's own group and session, which are never signalled as a whole.
#[derive(Debug, Clone, Copy)]
struct Own {
    group: i32,
    session: i32,
}

impl Own {
    fn read() -> Own {
        Own {
            group: nix::unistd::getpgrp().as_raw(),
            session: nix::unistd::getsid(None).map_or(0, Pid::as_raw),
        }
    }

    /// Whether `group` may be signalled as a whole by us at all.
    fn may_signal_group(self, group: i32) -> bool {
        group > 1 && group != self.group
    }
}

/// Kills whatever of the step is still alive, in passes until one finds nothing, and waits
/// until it is gone. The step's group is sent SIGKILL whatever a search found.
pub(crate) async fn sweep_step(mark: &StepMark) -> Swept {
    let own = Own::read();
    let mut found = BTreeMap::new();
    let mut groups = BTreeSet::new();
    if own.may_signal_group(mark.pgid) {
        groups.insert(mark.pgid);
    }
    let deadline = Instant::now() + SWEEP_LIMIT;
    let mut survivors = Vec::new();
    // After a search that may have missed a successor, the next reads the whole of `/proc`.
    let everything = StepMark {
        descendants_suffice: false,
        ..mark.clone()
    };
    let mut settled = true;
    loop {
        // Groups of our adopted children in sessions of their own are frozen before the
        // search, in every pass (a fork chain there is never caught alive otherwise), and let
        // go again when nothing in them turns out to be the step's. A pass that could not
        // list our children froze nothing, so it does not end the sweep.
        let children = process::foreign_groups_of_children(mark, own.session);
        let listed = children.is_some();
        let suspects: BTreeSet<i32> = children
            .unwrap_or_default()
            .into_iter()
            .filter(|&group| own.may_signal_group(group))
            .collect();
        hold_groups(&suspects);
        signal_groups(&groups, Signal::SIGSTOP);
        let (members, conclusive) = process::search_step(if settled { mark } else { &everything });
        settled = conclusive && listed;
        for member in &members {
            found
                .entry(member.stray.pid)
                .or_insert_with(|| member.stray.clone());
            if own.may_signal_group(member.group) && member.session != own.session {
                groups.insert(member.group);
            }
        }
        release_groups(&suspects.difference(&groups).copied().collect(), true);
        let pids: Vec<i32> = members.iter().map(|member| member.stray.pid).collect();
        stop_then_kill(&pids, &groups);
        // The step's own suspects are killed: forgotten, not continued.
        release_groups(&suspects.intersection(&groups).copied().collect(), false);
        if members.is_empty() && settled {
            break;
        }
        if Instant::now() >= deadline {
            survivors = process::find_step_processes(&everything);
            break;
        }
        tokio::time::sleep(PASS_PAUSE).await;
    }
    let found: Vec<StrayProcess> = found.into_values().collect();
    // The step group is the leader's, which the supervisor reaps itself.
    groups.remove(&mark.pgid);
    process::reap_adopted(mark, &found, &groups);
    Swept { found, survivors }
}

/// What [`kill_marked`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KilledProcesses {
    /// Every process found alive with the mark, in any pass; all were sent SIGKILL.
    pub killed: Vec<i32>,
    /// Processes with the mark still alive when the time limit ran out.
    pub survivors: Vec<i32>,
}

/// How many passes in a row must find no marked process before [`kill_marked`] believes it.
/// A fork chain that left its group has no process that lives longer than a millisecond,
/// and a look at `/proc` catches a generation alive only now and then; the passes are quick
/// (only processes new since the last pass are read), so fifty of them cost little.
const QUIET_PASSES: usize = 50;

/// Kills every live process (other than this one) whose environment holds `NAME=value`, in
/// passes until [`QUIET_PASSES`] in a row find none: how the processes of a run are ended
/// after the conductor that supervised them was killed. Reads `/proc` (they are not our
/// descendants).
pub fn kill_marked(name: &str, value: &str) -> KilledProcesses {
    let mut scanner = MarkScanner::new(name, value);
    let mut killed = BTreeSet::new();
    let deadline = Instant::now() + ORPHAN_LIMIT;
    let mut quiet = 0;
    while quiet < QUIET_PASSES {
        if Instant::now() >= deadline {
            return KilledProcesses {
                killed: killed.into_iter().collect(),
                survivors: process::processes_with_variable(name, value),
            };
        }
        let (mut pids, groups) = scanner.scan();
        if pids.is_empty() {
            quiet += 1;
            continue;
        }
        quiet = 0;
        signal_groups(&groups, Signal::SIGSTOP);
        signal_pids(&pids, Signal::SIGSTOP);
        // A second look while they are frozen names what the group signal reached.
        let (frozen, more_groups) = scanner.scan();
        pids.extend(frozen);
        let groups: BTreeSet<i32> = groups.union(&more_groups).copied().collect();
        stop_then_kill(&pids, &groups);
        killed.extend(pids);
        std::thread::sleep(PASS_PAUSE);
    }
    KilledProcesses {
        killed: killed.into_iter().collect(),
        survivors: Vec::new(),
    }
}

/// Looks through `/proc` for processes holding a mark, pass after pass, reading only what may
/// have changed: processes new since the last pass, and those found marked before (an old
/// unmarked process cannot gain the mark; one it forks is new).
struct MarkScanner {
    needle: Vec<u8>,
    own: Own,
    previous: BTreeSet<i32>,
    marked: BTreeSet<i32>,
    /// Groups seen with a live unmarked member: never signalled as a whole.
    mixed_groups: BTreeSet<i32>,
}

impl MarkScanner {
    fn new(name: &str, value: &str) -> MarkScanner {
        MarkScanner {
            needle: format!("\0{name}={value}\0").into_bytes(),
            own: Own::read(),
            previous: BTreeSet::new(),
            marked: BTreeSet::new(),
            mixed_groups: BTreeSet::new(),
        }
    }

    /// The live marked processes, and the groups they may be signalled through as a whole:
    /// those in which no live unmarked process was ever seen. (A session other than ours is
    /// no proof here: it may be the session of the killed conductor's terminal.)
    fn scan(&mut self) -> (Vec<i32>, BTreeSet<i32>) {
        let own_pid = std::process::id() as i32;
        let listing: BTreeSet<i32> = crate::proc::pids()
            .into_iter()
            .filter(|&pid| pid != own_pid)
            .collect();
        let mut marked = Vec::new();
        let mut marked_groups = BTreeSet::new();
        for &pid in &listing {
            if self.previous.contains(&pid) && !self.marked.contains(&pid) {
                continue;
            }
            let Some(stat) = process::read_stat(pid).filter(process::Stat::is_live) else {
                self.marked.remove(&pid);
                continue;
            };
            if process::environment_contains(pid, &self.needle) {
                self.marked.insert(pid);
                marked.push(pid);
                marked_groups.insert(stat.group);
            } else {
                self.marked.remove(&pid);
                self.mixed_groups.insert(stat.group);
            }
        }
        self.previous = listing;
        let whole = marked_groups
            .into_iter()
            .filter(|group| !self.mixed_groups.contains(group) && self.own.may_signal_group(*group))
            .collect();
        (marked, whole)
    }
}

/// The groups frozen by the passes of the sweeps of this process, with how many passes hold
/// each. A library user supervising several steps at once has several sweeps at once, and
/// each takes the others' escaped groups (our adopted children in sessions of their own) for
/// suspects: a sweep that let such a group go while another was searching it for its own
/// fork chain would thaw that chain mid-search. So a group is continued only by the last
/// holder's release.
static HELD: Mutex<BTreeMap<i32, usize>> = Mutex::new(BTreeMap::new());

/// Freezes `groups` (SIGSTOP), holding each until [`release_groups`].
fn hold_groups(groups: &BTreeSet<i32>) {
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    for &group in groups {
        *held.entry(group).or_default() += 1;
        // ESRCH (the group is empty) is the expected end state.
        let _ = killpg(Pid::from_raw(group), Signal::SIGSTOP);
    }
}

/// Lets go of `groups` held by [`hold_groups`]; a group no other pass holds is continued
/// (SIGCONT) when `thaw`. The signal is sent under the lock, so a pass freezing the group at
/// the same moment freezes it after the thaw, never before.
fn release_groups(groups: &BTreeSet<i32>, thaw: bool) {
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    for &group in groups {
        match held.get_mut(&group) {
            Some(count) if *count > 1 => *count -= 1,
            _ => {
                held.remove(&group);
                if thaw {
                    let _ = killpg(Pid::from_raw(group), Signal::SIGCONT);
                }
            }
        }
    }
}

/// Stops every process and group given (nothing stopped can fork), then kills them all.
fn stop_then_kill(pids: &[i32], groups: &BTreeSet<i32>) {
    for signal in [Signal::SIGSTOP, Signal::SIGKILL] {
        signal_groups(groups, signal);
        signal_pids(pids, signal);
    }
}

fn signal_pids(pids: &[i32], signal: Signal) {
    for &pid in pids {
        // ESRCH: it died meanwhile, which is the point.
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

fn signal_groups(groups: &BTreeSet<i32>, signal: Signal) {
    for &group in groups {
        // ESRCH (the group is empty) is the expected end state.
        let _ = killpg(Pid::from_raw(group), signal);
    }
}

/// The file in a step's folder that names its process group while the step runs: written by
/// [`super::supervisor::supervise_recorded`] as soon as the leader exists, removed once the
/// step's processes are gone. One left behind means the conductor died during the step, and
/// `resume` reads it to end the group (see [`kill_recorded_group`]).
pub const PROCESS_GROUP_FILE: &str = crate::artifacts::VisitDir::PROCESS_GROUP;

/// A step's process group as recorded while it ran: enough to tell, after the conductor that
/// supervised it died, whether a group with that id is still the same one
/// (`tnh-conductor schema process-group`).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[schemars(
    title = "ProcessGroup",
    description = "`process_group.json`: a step's process group while its agent, validator or planner runs, so that `resume` after a crash ends what is left of it. Removed once its processes are gone. A record an older release wrote has no `schema_version`; it is still read.",
    deny_unknown_fields
)]
pub struct RecordedGroup {
    /// The version of this format. A record an older release wrote has none: it is read as
    /// version 1, whose fields it has.
    #[serde(default = "first_version")]
    pub schema_version: u32,
    /// The group id: the leader's pid.
    #[schemars(range(min = 1))]
    pub pgid: i32,
    /// The session the group was made in (the conductor's): a group never leaves it.
    pub session: i32,
    /// The leader's start time, in clock ticks since boot (`/proc/PID/stat`).
    pub leader_started: u64,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`; empty when unreadable): start
    /// times and pids of another boot mean nothing.
    pub boot_id: String,
}

impl RecordedGroup {
    /// The group of a leader just started (`None` when its `/proc` entry cannot be read).
    pub(crate) fn of_leader(pid: i32) -> Option<RecordedGroup> {
        let stat = process::read_stat(pid)?;
        Some(RecordedGroup {
            schema_version: crate::artifacts::SCHEMA_VERSION,
            pgid: pid,
            session: stat.session,
            leader_started: stat.started,
            boot_id: boot_id(),
        })
    }
}

/// The version of a record written before records carried one.
fn first_version() -> u32 {
    1
}

/// Why a recorded group was not signalled, or what was killed of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupEnding {
    /// No live process is in the group any more.
    Empty,
    /// The group was the step's: these members were stopped, then killed; `survivors` were
    /// still alive when the time limit ran out.
    Killed {
        /// Every member found alive, in any pass.
        killed: Vec<i32>,
        /// Members still alive at the time limit.
        survivors: Vec<i32>,
    },
    /// A group with that id exists but cannot be shown to be the step's (the id may have been
    /// reused); it was left alone.
    NotTheSame(String),
}

/// Ends what is left of a step's process group after the conductor that supervised it died:
/// every member, marked or not (a process that cleared its environment but stayed in the
/// group included), provided the group can be shown to be still the step's:
///
/// - it was recorded during this boot, and is neither this process's group or session nor
///   the group of any of its ancestors (the operator's shell, the `resume` job);
/// - every live member is in the session the group was made in (a group never leaves its
///   session, and only a process of that session can make a group there);
/// - when the leader (pid = group id) is alive, it is the recorded one (same start time): a
///   live leader keeps the group's number from being reused, so the group is the step's;
/// - when the leader is gone, every member started no earlier than the leader did.
///
/// The last rule cannot exclude one case: the step's group emptied, the pid counter came all
/// the way round to the group's number, and a process of the same session made a new group
/// with it before `resume` ran (docs/runners.md, Limitations).
pub fn kill_recorded_group(group: &RecordedGroup) -> GroupEnding {
    if let Some(reason) = not_the_same(group) {
        return GroupEnding::NotTheSame(reason);
    }
    let deadline = Instant::now() + ORPHAN_LIMIT;
    let mut killed = BTreeSet::new();
    let groups = BTreeSet::from([group.pgid]);
    loop {
        let members = process::live_group_members(group.pgid);
        if members.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            return GroupEnding::Killed {
                killed: killed.into_iter().collect(),
                survivors: members,
            };
        }
        // Stopped first: a stopped process cannot fork a member the kill would miss.
        stop_then_kill(&members, &groups);
        killed.extend(members);
        std::thread::sleep(PASS_PAUSE);
    }
    if killed.is_empty() {
        GroupEnding::Empty
    } else {
        GroupEnding::Killed {
            killed: killed.into_iter().collect(),
            survivors: Vec::new(),
        }
    }
}

/// Why `group` cannot be taken for the recorded one, if it cannot.
fn not_the_same(group: &RecordedGroup) -> Option<String> {
    let own = Own::read();
    if !own.may_signal_group(group.pgid) || group.pgid == own.session {
        return Some("it is this process's own group or session".to_owned());
    }
    let now = boot_id();
    if !group.boot_id.is_empty() && !now.is_empty() && group.boot_id != now {
        return Some("it was recorded before the machine restarted".to_owned());
    }
    let mut ancestor = nix::unistd::getppid().as_raw();
    while ancestor > 1 {
        let Some(stat) = process::read_stat(ancestor) else {
            break;
        };
        if stat.group == group.pgid {
            return Some(format!(
                "it is the group of process {ancestor}, an ancestor of this one"
            ));
        }
        ancestor = stat.parent;
    }
    // A live leader that is the recorded process holds the group's number: the group is
    // the step's. A pid of the group's number that is another process means the number was
    // free once, so the group may be another's.
    if let Some(leader) = process::read_stat(group.pgid).filter(process::Stat::is_live)
        && leader.started != group.leader_started
    {
        return Some(format!(
            "process {} is another process than the recorded leader",
            group.pgid
        ));
    }
    for pid in process::live_group_members(group.pgid) {
        let Some(stat) = process::read_stat(pid).filter(|stat| stat.group == group.pgid) else {
            continue;
        };
        if stat.session != group.session {
            return Some(format!(
                "its member {pid} is in session {}, not the recorded {}",
                stat.session, group.session
            ));
        }
        if stat.started < group.leader_started {
            return Some(format!(
                "its member {pid} started before the recorded leader"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    /// A `sleep` leading a group of its own, as a step's leader does.
    fn leader() -> (std::process::Child, RecordedGroup) {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let group = RecordedGroup::of_leader(child.id() as i32).unwrap();
        (child, group)
    }

    fn stopped(pid: i32) -> bool {
        process::read_stat(pid).is_some_and(|stat| stat.state == 'T')
    }

    /// Reads `pid`'s stat until `done` holds (a signal acts when its target next runs),
    /// for at most 30 s.
    fn until(pid: i32, done: impl Fn(&process::Stat) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if process::read_stat(pid).is_some_and(|stat| done(&stat)) {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    /// Two steps sweeping at once in one process each took the
    /// other's escaped group for a suspect, froze it, found none of their own in it and sent
    /// it SIGCONT, possibly while the other sweep had it frozen to search it for its fork
    /// chain, which then slipped through. A group another sweep holds now stays frozen.
    #[tokio::test]
    async fn a_sweep_does_not_thaw_a_group_another_sweep_holds() {
        let mut mark = StepMark::before_start();
        if !mark.descendants_suffice {
            return; // No lists of children: no suspects are looked for.
        }
        let (mut step_leader, step_group) = leader();
        mark.pgid = step_group.pgid;
        // Another step's process: our child, in a session of its own.
        let mut other = std::process::Command::new("setsid")
            .args(["sleep", "30"])
            .spawn()
            .unwrap();
        let other_pid = other.id() as i32;
        assert!(until(other_pid, |stat| stat.session == other_pid));
        let held = BTreeSet::from([other_pid]);
        hold_groups(&held); // the other step's sweep, searching
        assert!(until(other_pid, |stat| stat.state == 'T'));

        let swept = sweep_step(&mark).await;
        assert!(
            swept.found.iter().all(|stray| stray.pid != other_pid),
            "{swept:?}"
        );
        assert!(stopped(other_pid), "the other sweep's group was thawed");

        release_groups(&held, true);
        {
            // (Under the lock: a concurrent test's sweep may hold the group a moment.)
            let held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
            if !held.contains_key(&other_pid) {
                assert!(
                    until(other_pid, |stat| stat.state != 'T'),
                    "the last holder thaws it"
                );
            }
        }
        let _ = other.kill();
        let _ = other.wait();
        let _ = step_leader.wait();
    }

    #[test]
    fn a_recorded_group_is_killed_when_it_is_still_the_same() {
        use std::os::unix::process::ExitStatusExt as _;
        let (mut child, group) = leader();
        let ending = kill_recorded_group(&group);
        assert_eq!(
            ending,
            GroupEnding::Killed {
                killed: vec![group.pgid],
                survivors: Vec::new()
            }
        );
        assert!(child.wait().unwrap().signal().is_some());
        assert_eq!(kill_recorded_group(&group), GroupEnding::Empty);
    }

    #[test]
    fn a_group_that_cannot_be_the_recorded_one_is_left_alone() {
        use std::os::unix::process::ExitStatusExt as _;
        let (mut child, group) = leader();
        let another_leader = RecordedGroup {
            leader_started: group.leader_started + 1,
            ..group.clone()
        };
        let another_session = RecordedGroup {
            session: group.session + 1,
            ..group.clone()
        };
        let another_boot = RecordedGroup {
            boot_id: "not-this-boot".to_owned(),
            ..group.clone()
        };
        let own = RecordedGroup {
            pgid: nix::unistd::getpgrp().as_raw(),
            ..group.clone()
        };
        for wrong in [another_leader, another_session, another_boot, own] {
            assert!(
                matches!(kill_recorded_group(&wrong), GroupEnding::NotTheSame(_)),
                "{wrong:?}"
            );
        }
        assert!(child.try_wait().unwrap().is_none(), "left alive");
        let _ = child.kill();
        let status = child.wait().unwrap();
        assert!(status.signal().is_some());
    }

    #[test]
    fn a_record_is_versioned_and_one_an_older_release_wrote_is_still_read() {
        let (mut child, group) = leader();
        let written: serde_json::Value = serde_json::to_value(&group).unwrap();
        assert_eq!(written["schema_version"], crate::artifacts::SCHEMA_VERSION);
        let old = r#"{"pgid":4242,"session":7,"leader_started":99,"boot_id":"b"}"#;
        let read: RecordedGroup = serde_json::from_str(old).unwrap();
        assert_eq!(
            read,
            RecordedGroup {
                schema_version: 1,
                pgid: 4242,
                session: 7,
                leader_started: 99,
                boot_id: "b".into(),
            }
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}
