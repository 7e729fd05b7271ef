//! Finding and signalling every process that belongs to a step.
//!
//! A step's processes are (a) its process group, which every descendant joins unless it
//! calls `setsid`/`setpgid`, and (b) every process whose environment carries the step's
//! supervision token (`TNH_SUPERVISION_ID`), which catches descendants that left the group
//! (a `setsid` escape, a double-forked daemon) because the environment is inherited across
//! `fork` and `exec`. Both are read from `/proc`, which also lets us ignore zombies: on this
//! kind of host PID 1 does not reap orphans, so `kill(-pgid, 0)` alone would report dead
//! processes as alive.
//!
//! Where to look: this process makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`)
//! before it starts a step, so a step process whose parent dies is adopted by us instead of
//! PID 1, and every process of the step stays a descendant of ours. The candidates are then
//! our descendants, listed from `/proc/PID/task/TID/children`: a handful of reads, however
//! many processes the host runs. Where the kernel offers neither, every process in `/proc`
//! is a candidate, as before.
//!
//! Limitation: a descendant that both leaves the group and execs with a cleared environment
//! cannot be found this way (see docs/runners.md).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// The environment variable that marks every process of one step.
pub const SUPERVISION_TOKEN_VARIABLE: &str = "TNH_SUPERVISION_ID";

/// The token of the enclosing supervision, kept by a supervision started inside a supervised
/// step (`tnh test` run by an agent supervises the tool with its own token): the step's sweep
/// finds the tool by it even when `tnh` itself was killed before it could end the tool.
pub const OUTER_SUPERVISION_TOKEN_VARIABLE: &str = "TNH_OUTER_SUPERVISION_ID";

/// A process found alive that belonged to a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StrayProcess {
    /// Its process id.
    pub pid: i32,
    /// Its command line (`/proc/PID/cmdline`, arguments joined by spaces).
    pub command: String,
    /// True when it had left the step's process group (`setsid` or `setpgid`).
    pub left_group: bool,
}

/// How one step's processes are recognised: its process group, its supervision token, and
/// the moment its leader was about to start, before which none of them can have been born.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepMark {
    /// The leader's pid, which is the group id (0 until the leader exists).
    pub(crate) pgid: i32,
    /// The value of [`SUPERVISION_TOKEN_VARIABLE`] in every process of the step.
    pub(crate) token: String,
    /// Clock ticks since boot (the unit of `/proc/PID/stat`'s start time), rounded down and
    /// less one, taken before the leader was started.
    pub(crate) born_after: u64,
    /// Every process of the step is a descendant of this process (it adopts orphans and
    /// `/proc` lists children), so only descendants need to be looked at.
    pub(crate) descendants_suffice: bool,
}

impl StepMark {
    /// The mark of a step whose leader is about to be started. Makes this process adopt the
    /// orphans of its descendants first, so none of the step's can slip away to PID 1.
    pub(crate) fn before_start() -> StepMark {
        StepMark {
            pgid: 0,
            token: new_token(),
            born_after: ticks_since_boot().saturating_sub(1),
            descendants_suffice: adopt_orphans() && std::env::var_os(SCAN_ALL_VARIABLE).is_none(),
        }
    }
}

/// Set (to anything) in the conductor's environment, this makes every search for a step's
/// processes read the whole of `/proc` instead of our descendants: for a kernel whose lists of
/// children cannot be trusted, and for the benchmark that compares the two.
pub const SCAN_ALL_VARIABLE: &str = "TNH_SUPERVISION_SCAN_ALL";

/// Makes this process a child subreaper (once) and says whether its descendants can be
/// listed: false on a kernel without `PR_SET_CHILD_SUBREAPER` or without
/// `/proc/PID/task/TID/children`, where the whole of `/proc` is searched instead.
pub(crate) fn adopt_orphans() -> bool {
    static ADOPTING: OnceLock<bool> = OnceLock::new();
    *ADOPTING
        .get_or_init(|| nix::sys::prctl::set_child_subreaper(true).is_ok() && children_are_listed())
}

/// Whether this kernel lists a thread's children (`/proc/PID/task/TID/children`). Only that
/// is decided once: whether a list holds still is decided by each search, which reads the
/// whole of `/proc` when it does not ([`candidates`]). (Deciding it from one walk of our
/// descendants made a process whose first walk met a fork chain search the slow way, and
/// never freeze an escaped chain's group, for the rest of its life.)
fn children_are_listed() -> bool {
    let pid = std::process::id() as i32;
    crate::proc::children(pid, pid).is_some()
}

/// Every process descended from this one (children of all its threads, their children, and
/// so on), or `None` when `/proc` does not list children or the tree would not hold still.
///
/// A process that ends while the tree is walked hands its children to us (we are their
/// subreaper), possibly after our own list was read: a fork chain, each generation forking
/// the next and exiting, would slip through one walk. So our own list is read again after
/// each walk, and the subtrees of children that appeared meanwhile are walked, until a
/// reading adds nobody.
fn descendants() -> Option<Vec<i32>> {
    let own_pid = std::process::id() as i32;
    let mut found = std::collections::BTreeSet::new();
    for _ in 0..DESCENDANT_WALKS {
        let mut own_children = String::new();
        if read_children(own_pid, &mut own_children)? != Listing::Listed {
            return None;
        }
        let fresh: Vec<i32> = own_children
            .split_ascii_whitespace()
            .filter_map(|child| child.parse::<i32>().ok())
            .filter(|child| !found.contains(child))
            .collect();
        if fresh.is_empty() {
            return Some(found.into_iter().collect());
        }
        walk_subtrees(fresh, &mut found)?;
    }
    None
}

/// How many times [`descendants`] walks newly adopted subtrees before it gives up on a tree
/// that keeps changing (the caller then reads the whole of `/proc`).
const DESCENDANT_WALKS: usize = 4;

/// Adds `roots` and everything below them to `found`; `None` when a list would not hold still.
fn walk_subtrees(roots: Vec<i32>, found: &mut std::collections::BTreeSet<i32>) -> Option<()> {
    let mut pending = roots;
    while let Some(pid) = pending.pop() {
        if !found.insert(pid) {
            continue;
        }
        let mut children = String::new();
        // A process that ended while we looked has no list; its children are ours now and
        // show up when our own list is read again.
        if read_children(pid, &mut children)? == Listing::Absent {
            continue;
        }
        pending.extend(
            children
                .split_ascii_whitespace()
                .filter_map(|child| child.parse::<i32>().ok()),
        );
    }
    Some(())
}

/// How many times a list of children is read, at most, to get two readings that agree.
const CHILDREN_READINGS: usize = 4;

/// What reading a process's children gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    /// The children of every thread were read.
    Listed,
    /// No thread's list could be read: the process is gone, or the kernel has no such lists.
    Absent,
}

/// Appends the children of every thread of `pid` to `into`; `None` when a list would not
/// hold still. A thread that ends while we look hands its children to another thread of the
/// process, which lists them.
///
/// The kernel builds a list entry by entry, and a child that ends meanwhile can make it skip
/// a live sibling. A list is therefore read until two readings agree.
fn read_children(pid: i32, into: &mut String) -> Option<Listing> {
    let Some(threads) = crate::proc::threads(pid) else {
        return Some(Listing::Absent);
    };
    let mut listing = Listing::Absent;
    for thread in threads {
        let Some(mut last) = crate::proc::children(pid, thread) else {
            continue;
        };
        let mut agreed = false;
        for _ in 1..CHILDREN_READINGS {
            let Some(reading) = crate::proc::children(pid, thread) else {
                break;
            };
            if reading == last {
                agreed = true;
                break;
            }
            last = reading;
        }
        if !agreed {
            return None;
        }
        listing = Listing::Listed;
        into.push_str(&last);
        into.push(' ');
    }
    Some(listing)
}

/// The processes that may belong to the step: our descendants, or every process.
fn candidates(mark: &StepMark) -> Vec<i32> {
    if let Some(found) = mark.descendants_suffice.then(descendants).flatten() {
        return found;
    }
    crate::proc::pids()
}

/// Reaps the step's processes that died as our adopted children: members of the step's
/// group other than the leader (whose exit status the supervisor collects), members of the
/// `escaped_groups` the step created outside it, and the `strays` found outside the group.
/// Nothing else here waits for them, and a zombie would otherwise stay until the conductor
/// exits (a fork chain leaves one per generation).
pub(crate) fn reap_adopted(
    mark: &StepMark,
    strays: &[StrayProcess],
    escaped_groups: &std::collections::BTreeSet<i32>,
) {
    if !mark.descendants_suffice {
        return;
    }
    let own_pid = std::process::id() as i32;
    let mut children = String::new();
    if read_children(own_pid, &mut children) != Some(Listing::Listed) {
        return;
    }
    for child in children
        .split_ascii_whitespace()
        .filter_map(|pid| pid.parse::<i32>().ok())
    {
        let Some(stat) = read_stat(child) else {
            continue;
        };
        let of_step = child != mark.pgid
            && (stat.group == mark.pgid
                || escaped_groups.contains(&stat.group)
                || strays.iter().any(|stray| stray.pid == child));
        if of_step && !stat.is_live() && stat.parent == own_pid {
            let _ = waitpid(Pid::from_raw(child), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// Now, in the clock ticks since boot that `/proc/PID/stat` counts start times in (0 when the
/// clock cannot be read, which makes every process a candidate).
fn ticks_since_boot() -> u64 {
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&ticks| ticks > 0)
        .unwrap_or(100) as u64;
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).map_or(0, |now| {
        let nanos = now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64;
        nanos / (1_000_000_000 / ticks_per_second)
    })
}

/// Signals the whole group and every token holder outside it; absent processes are fine.
pub(crate) fn signal_step(mark: &StepMark, signal: Signal) {
    // ESRCH (group already empty) is the expected end state, not an error.
    let _ = killpg(Pid::from_raw(mark.pgid), signal);
    for stray in find_step_processes(mark) {
        if stray.left_group {
            let _ = kill(Pid::from_raw(stray.pid), signal);
        }
    }
}

/// Every live (non-zombie) process of the step: group members and token holders.
pub(crate) fn find_step_processes(mark: &StepMark) -> Vec<StrayProcess> {
    find_step_members(mark)
        .into_iter()
        .map(|member| member.stray)
        .collect()
}

/// Every live process of the step, and whether the search can be trusted to have missed none
/// that was alive at its end.
///
/// A walk of our descendants is a snapshot: a step process that dies between the walk and
/// its inspection may have forked a successor the walk never saw (a fork chain does this in
/// every generation). That successor is adopted by us, so our own list of children gains a
/// pid; when it gained one during the search, the search is not conclusive and the caller
/// looks again, with a reading of the whole of `/proc` (in pid order, where a successor
/// normally comes after its parent, so it is read while or after its parent lived).
pub(crate) fn search_step(mark: &StepMark) -> (Vec<Member>, bool) {
    if !mark.descendants_suffice {
        return (find_step_members(mark), true);
    }
    let Some(before) = own_children() else {
        let everything = StepMark {
            descendants_suffice: false,
            ..mark.clone()
        };
        return (find_step_members(&everything), true);
    };
    let members = find_step_members(mark);
    let settled = own_children().is_some_and(|after| after.is_subset(&before));
    (members, settled)
}

/// The groups that our children born since the step began — live or zombies, which keep
/// their group and session — formed in sessions other than `own_session`.
///
/// A fork chain in a session of its own is never caught alive by a search: each generation
/// lives a millisecond, while a search takes longer. But its dead generations stay behind as
/// our zombies (we adopted them), and their group outlives them; a SIGSTOP to that group
/// freezes the live generation wherever it is, after which a search finds it.
///
/// `None` when our list of children would not hold still (it changes with every generation
/// we adopt): the caller cannot take "no such group" from that.
pub(crate) fn foreign_groups_of_children(mark: &StepMark, own_session: i32) -> Option<Vec<i32>> {
    if !mark.descendants_suffice {
        return Some(Vec::new());
    }
    let groups: std::collections::BTreeSet<i32> = own_children()?
        .into_iter()
        .filter_map(read_stat)
        .filter(|stat| stat.session != own_session && stat.started >= mark.born_after)
        .map(|stat| stat.group)
        .collect();
    Some(groups.into_iter().collect())
}

/// The pids our threads list as children (zombies included).
fn own_children() -> Option<std::collections::BTreeSet<i32>> {
    let mut children = String::new();
    if read_children(std::process::id() as i32, &mut children)? != Listing::Listed {
        return None;
    }
    Some(
        children
            .split_ascii_whitespace()
            .filter_map(|child| child.parse().ok())
            .collect(),
    )
}

/// A live process of a step, with the group and session the sweep needs to stop it.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// What is recorded of it.
    pub(crate) stray: StrayProcess,
    /// Its process group.
    pub(crate) group: i32,
    /// Its session.
    pub(crate) session: i32,
}

/// Every live (non-zombie) process of the step, with its group and session.
///
/// Only processes born since the step began can hold its token, so the environment (the
/// costly read) is looked at only for those: on a busy host most processes are older.
pub(crate) fn find_step_members(mark: &StepMark) -> Vec<Member> {
    // NUL-framed, so one token cannot match as the suffix of another variable. A process of a
    // supervision nested in the step holds the step's token as the outer one.
    let needles = [SUPERVISION_TOKEN_VARIABLE, OUTER_SUPERVISION_TOKEN_VARIABLE]
        .map(|name| format!("\0{name}={}\0", mark.token));
    let mut found = BTreeMap::new();
    let own_pid = std::process::id() as i32;
    for pid in candidates(mark) {
        if pid == own_pid {
            continue;
        }
        let Some(stat) = read_stat(pid) else {
            continue;
        };
        if stat.state == 'Z' || stat.state == 'X' {
            continue;
        }
        let in_group = stat.group == mark.pgid;
        let may_hold_token = stat.started >= mark.born_after;
        if in_group || (may_hold_token && environment_contains_any(pid, &needles)) {
            let stray = StrayProcess {
                pid,
                command: read_command(pid),
                left_group: !in_group,
            };
            found.insert(
                pid,
                Member {
                    stray,
                    group: stat.group,
                    session: stat.session,
                },
            );
        }
    }
    found.into_values().collect()
}

/// Live processes (other than this one, zombies excluded) whose environment holds `NAME=value`:
/// how processes of a run are found again after the process that started them was killed.
pub fn processes_with_variable(name: &str, value: &str) -> Vec<i32> {
    let needle = format!("\0{name}={value}\0");
    let own_pid = std::process::id() as i32;
    crate::proc::pids()
        .into_iter()
        .filter(|&pid| pid != own_pid)
        .filter(|&pid| read_stat(pid).is_some_and(|stat| stat.is_live()))
        .filter(|&pid| environment_contains(pid, needle.as_bytes()))
        .collect()
}

/// Every live process in group `pgid` (used by tests and the final sweep).
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    crate::proc::pids()
        .into_iter()
        .filter(|&pid| read_stat(pid).is_some_and(|stat| stat.group == pgid && stat.is_live()))
        .collect()
}

/// What the supervisor reads of `/proc/PID/stat`.
pub(crate) use crate::proc::{Stat, stat as read_stat};

pub(crate) fn environment_contains(pid: i32, needle: &[u8]) -> bool {
    environment_contains_any(pid, &[needle])
}

/// [`environment_contains`] for any of `needles`, reading the environment once.
pub(crate) fn environment_contains_any(pid: i32, needles: &[impl AsRef<[u8]>]) -> bool {
    // Other users' processes are unreadable (EACCES); they cannot be ours anyway.
    match crate::proc::environment(pid) {
        Some(environment) => needles.iter().any(|needle| {
            let needle = needle.as_ref();
            // The first variable has no NUL before it.
            environment.starts_with(&needle[1..])
                || memchr::memmem::find(&environment, needle).is_some()
        }),
        None => false,
    }
}

pub(crate) fn read_command(pid: i32) -> String {
    let raw = crate::proc::command_line(pid).unwrap_or_default();
    let text = String::from_utf8_lossy(&raw);
    text.trim_end_matches('\0').replace('\0', " ")
}

/// A token unique to one supervised step on this machine.
pub(crate) fn new_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let sequence = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{nanos:x}-{sequence}", std::process::id())
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    /// A process outside any step's group that carries `mark`'s token, killed when dropped.
    struct TokenHolder(std::process::Child);

    impl TokenHolder {
        /// Returns once the holder runs with the token in its `/proc/PID/environ`: the shell
        /// says so on stdout, then waits on its stdin (which stays open) without ever exec'ing,
        /// since an environment read in the middle of an `exec` can fail.
        fn start(mark: &StepMark) -> TokenHolder {
            use std::io::BufRead;
            let mut child = std::process::Command::new("sh")
                .args(["-c", "echo started; read line"])
                .env(SUPERVISION_TOKEN_VARIABLE, &mark.token)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .process_group(0)
                .spawn()
                .unwrap();
            let mut line = String::new();
            let stdout = child.stdout.take().unwrap();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .unwrap();
            assert_eq!(line, "started\n");
            TokenHolder(child)
        }
    }

    impl Drop for TokenHolder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A fresh mark (with a group no process has) and a running holder of its token.
    fn holder_of_a_fresh_mark() -> (StepMark, TokenHolder) {
        let mut mark = StepMark::before_start();
        mark.pgid = -1;
        let holder = TokenHolder::start(&mark);
        (mark, holder)
    }

    #[test]
    fn a_token_holder_born_after_the_mark_is_found_outside_the_group() {
        let (mark, holder) = holder_of_a_fresh_mark();
        let found = find_step_processes(&mark);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, holder.0.id() as i32);
        assert!(found[0].left_group);
    }

    #[test]
    fn the_full_scan_finds_what_the_descendant_walk_finds() {
        let (mut mark, holder) = holder_of_a_fresh_mark();
        assert!(
            mark.descendants_suffice,
            "this host lists children in /proc"
        );
        // Pids and group membership (the command line changes when the holder execs).
        let found = |mark: &StepMark| {
            find_step_processes(mark)
                .into_iter()
                .map(|stray| (stray.pid, stray.left_group))
                .collect::<Vec<_>>()
        };
        let walked = found(&mark);
        mark.descendants_suffice = false;
        assert_eq!(found(&mark), walked);
        assert_eq!(walked, [(holder.0.id() as i32, true)]);
    }

    /// Starts `sh -c SCRIPT` in a group of its own and returns it with the pid it prints.
    fn shell_printing_a_pid(script: &str) -> (std::process::Child, i32) {
        use std::io::BufRead;
        let mut shell = std::process::Command::new("sh")
            .args(["-c", script])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(shell.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (shell, line.trim().parse().unwrap())
    }

    /// Blocks until our child `pid` has ended, leaving it a zombie (not reaped).
    fn wait_until_dead(pid: i32) {
        use nix::sys::wait::{Id, waitid};
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
        waitid(Id::Pid(Pid::from_raw(pid)), flags).unwrap();
    }

    #[test]
    fn an_orphaned_grandchild_is_adopted_and_stays_a_descendant() {
        assert!(adopt_orphans());
        // The shell leaves its `sleep` behind; with PID 1 as the adopter it would vanish from
        // our tree.
        let (mut shell, orphan) =
            shell_printing_a_pid("sleep 30 </dev/null >/dev/null 2>&1 & echo $!");
        shell.wait().unwrap();
        let stat = read_stat(orphan).unwrap();
        let _ = kill(Pid::from_raw(orphan), Signal::SIGKILL);
        assert_eq!(stat.parent, std::process::id() as i32);
        assert!(descendants().unwrap().contains(&orphan));
        wait_until_dead(orphan);
        let _ = waitpid(Pid::from_raw(orphan), None);
    }

    #[test]
    fn adopted_step_processes_are_reaped_and_other_children_are_left_alone() {
        let mut mark = StepMark::before_start();
        assert!(mark.descendants_suffice);
        // A group member that outlives the leader and then ends on its own.
        let (mut leader, member) =
            shell_printing_a_pid("sleep 30 </dev/null >/dev/null 2>&1 & echo $!");
        mark.pgid = leader.id() as i32;
        leader.wait().unwrap();
        // A child of ours that is not the step's, ended and not yet waited for.
        let mut other = std::process::Command::new("true").spawn().unwrap();
        let other_pid = other.id() as i32;
        kill(Pid::from_raw(member), Signal::SIGKILL).unwrap();
        wait_until_dead(member);
        wait_until_dead(other_pid);
        // Other tests of this process start and reap children meanwhile, so a listing of our
        // children can disagree with itself, and `reap_adopted` then leaves the reaping to its
        // next call (as the sweep's next pass does): call it until it reaps, a bounded number
        // of times.
        let gone = || !crate::proc::exists(member);
        for _ in 0..1000 {
            reap_adopted(&mark, &[], &std::collections::BTreeSet::new());
            if gone() {
                break;
            }
            std::thread::yield_now();
        }
        assert!(gone(), "the adopted member was not reaped");
        // Its exit status is still there for whoever started it.
        assert!(other.wait().unwrap().success());
    }

    #[test]
    fn a_process_born_before_the_mark_is_not_a_token_holder() {
        let (mut mark, _holder) = holder_of_a_fresh_mark();
        // As if the step had begun after the holder was born.
        mark.born_after = ticks_since_boot() + 1;
        assert!(find_step_processes(&mark).is_empty());
    }
}
