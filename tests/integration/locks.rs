//! Locks that cannot be fooled: the repository's worktree
//! lock (`.git/tnh-worktrees.lock`) replaced by a FIFO, a link or a folder, or held by another
//! program or another conductor; a live run's lock file removed; a shared `flock` on a killed
//! run's lock; a folder where a run's lock file should be.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::kernel_support::{RunRepo, assert_contiguous, git_on_path_when};
use crate::support::{conductor, stderr_text};

/// How long a command may take before the test gives up on it (it hangs): the command is
/// killed and the test fails, instead of the test run hanging.
const HANG: Duration = Duration::from_secs(60);

/// Waits for `child` and its output; kills it and panics when it is still running after
/// [`HANG`].
fn finish(child: Child, what: &str) -> Output {
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(HANG) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let _ = receiver.recv();
            panic!("{what}: still running after {HANG:?} (hung), killed");
        }
    }
}

/// `tnh-conductor --repo REPO ARGS…`, killed (and the test failed) if it hangs.
fn conductor_within(repo: &RunRepo, args: &[&str]) -> Output {
    let child = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(child, &format!("{args:?}"))
}

/// A FIFO at `path`.
fn fifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).unwrap();
}

/// What a process wrote to the FIFO: opening it for reading waits until it has.
fn read_fifo(fifo: &Path) -> String {
    let mut text = String::new();
    std::fs::File::open(fifo)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text.trim().to_owned()
}

/// A process that kills its process group when dropped (a holder of a lock, and the command
/// it runs).
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(Pid::from_raw(self.0.id() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// `FLOCK OPTION FILE` running a shell that says so on the FIFO `ready` and then waits until it
/// is killed; returns once the lock is held. `flock` is the program run (the real `flock`, or
/// a copy of it under another name).
fn hold_with(flock: &Path, option: &str, file: &Path, ready: &Path) -> Holder {
    let child = Command::new(flock)
        .arg(option)
        .arg(file)
        .process_group(0)
        .args(["sh", "-c", "echo held > \"$0\"; exec sleep 600"])
        .arg(ready)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let holder = Holder(child);
    assert_eq!(read_fifo(ready), "held");
    holder
}

/// The real `flock` program.
fn flock_program() -> PathBuf {
    ["/usr/bin/flock", "/bin/flock"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .expect("flock(1) installed")
}

/// A one-step workflow whose scripted agent writes a file, then a success STOP.
fn simple_workflow(repo: &RunRepo) -> PathBuf {
    repo.workflow_text(
        "simple.yaml",
        "workflow_id: simple\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - {id: work, opcode: RUN_AGENT, agent: scripted, prompt: \"WRITE f.txt: x\", routes: {completed: done, \"*\": bad}}\n  - {id: done, opcode: STOP}\n  - {id: bad, opcode: STOP, outcome: failure}\n",
    )
}

/// The repository's worktree lock.
fn worktrees_lock(repo: &RunRepo) -> PathBuf {
    repo.path().join(".git/tnh-worktrees.lock")
}

fn run_dirs(repo: &RunRepo) -> usize {
    std::fs::read_dir(repo.path().join(".tnh/run")).map_or(0, |entries| entries.count())
}

/// A FIFO an agent put at `.git/tnh-worktrees.lock` made every later
/// `run` block for ever in `open`, deaf to Ctrl-C. A FIFO, a link or a folder there is
/// refused at once, naming the file, with the hint to remove it; nothing is started, and
/// nothing is created through the link.
#[test]
fn a_fifo_link_or_folder_at_the_worktree_lock_is_refused_not_waited_on() {
    for kind in ["a FIFO", "a symbolic link", "a folder"] {
        let repo = RunRepo::new();
        let workflow = simple_workflow(&repo);
        let lock = worktrees_lock(&repo);
        let target = repo.path().join(".git/elsewhere");
        match kind {
            "a FIFO" => fifo(&lock),
            "a symbolic link" => std::os::unix::fs::symlink(&target, &lock).unwrap(),
            _ => std::fs::create_dir(&lock).unwrap(),
        }
        let output = conductor_within(&repo, &["run", workflow.to_str().unwrap()]);
        let stderr = stderr_text(&output);
        assert_eq!(output.status.code(), Some(2), "{kind}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "the worktree lock `{}` is {kind}, not a regular file",
                lock.display()
            )) && stderr.contains("rm ")
                && stderr.contains("try again"),
            "{kind}: {stderr}"
        );
        assert_eq!(run_dirs(&repo), 0, "{kind}: nothing started");
        assert!(!target.exists(), "{kind}: nothing created through a link");

        // Once removed, as the hint says, runs work again.
        if lock.is_dir() && !lock.is_symlink() {
            std::fs::remove_dir(&lock).unwrap();
        } else {
            std::fs::remove_file(&lock).unwrap();
        }
        let output = conductor_within(&repo, &["run", workflow.to_str().unwrap()]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{kind}: {}",
            stderr_text(&output)
        );
        assert!(std::fs::symlink_metadata(&lock).unwrap().is_file());
    }
}

/// `runs clean` takes the worktree lock too; a FIFO there is refused,
/// never waited on, and the run is kept.
#[test]
fn runs_clean_refuses_a_fifo_at_the_worktree_lock() {
    let repo = RunRepo::new();
    let workflow = simple_workflow(&repo);
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let lock = worktrees_lock(&repo);
    std::fs::remove_file(&lock).unwrap();
    fifo(&lock);
    let output = conductor_within(&repo, &["runs", "clean"]);
    let stderr = stderr_text(&output);
    assert_ne!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("`{}` is a FIFO", lock.display())),
        "{stderr}"
    );
    assert!(repo.run_dir(&run_id).is_dir(), "the run is kept");
    assert!(repo.path().join(".tnh/worktrees").join(&run_id).is_dir());
}

/// The agent that replaces the worktree lock by a FIFO is caught at its
/// own step (the guard watches the file with `.git`'s others), and the file is put back, so
/// the next run does not stop on it.
#[test]
fn an_agent_replacing_the_worktree_lock_by_a_fifo_is_reported_and_the_file_put_back() {
    let repo = RunRepo::new();
    let agent = repo.repo.write(
        ".tnh/fifo_agent.sh",
        "cat >/dev/null\nL=\"$(git rev-parse --git-common-dir)/tnh-worktrees.lock\"\nrm -f \"$L\"\nmkfifo \"$L\"\necho done\n",
    );
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  planter:\n    kind: command\n    argv: [/bin/sh, \"{}\"]\n",
            agent.display()
        ),
    );
    let workflow = repo.workflow_text(
        "plant.yaml",
        "workflow_id: plant\nversion: 1\ndescription: d\nentry_step: work\ndefaults:\n  policy: {forbidden_operations: [modify_git_config]}\nsteps:\n  - {id: work, opcode: RUN_AGENT, agent: planter, prompt: p, routes: {\"*\": done}}\n  - {id: done, opcode: STOP}\n",
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    // The violation keeps the run from ending in success.
    assert_eq!(code, Some(1), "{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let lock = worktrees_lock(&repo);
    assert!(
        std::fs::symlink_metadata(&lock).unwrap().is_file(),
        "put back as a regular file"
    );
    let summary = repo.json(&run_id, "artifacts/work/1/policy_summary.json");
    let reported = summary["violations"].as_array().is_some_and(|violations| {
        violations.iter().any(|violation| {
            violation["path"] == "tnh-worktrees.lock"
                && violation.to_string().contains("modify_git_config")
        })
    });
    assert!(reported, "{summary}");

    let output = conductor_within(&repo, &["run", simple_workflow(&repo).to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
}

/// A program that is not a conductor holding the worktree lock (an
/// agent's leftover `flock`) is named at once, never waited on for ever.
#[test]
fn a_worktree_lock_held_by_another_program_is_refused_naming_it() {
    let repo = RunRepo::new();
    let workflow = simple_workflow(&repo);
    let lock = worktrees_lock(&repo);
    let ready = repo.path().join(".git/ready.fifo");
    fifo(&ready);
    let holder = hold_with(&flock_program(), "-x", &lock, &ready);
    let output = conductor_within(&repo, &["run", workflow.to_str().unwrap()]);
    let pid = holder.0.id();
    drop(holder);
    let stderr = stderr_text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("is held by process {pid} (`")) && stderr.contains("flock`)"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("kill {pid}")), "{stderr}");
    assert_eq!(run_dirs(&repo), 0, "nothing started");
}

/// While another conductor holds the worktree lock, a `run` waits for
/// it, and Ctrl-C still stops it: the run is kept interrupted, and `resume` makes its worktree
/// once the lock is free. (The holder is `flock` under the name `tnh-conductor`, which is
/// what the waiting run looks at; the Ctrl-C is sent while the run runs its last git command
/// before the lock.)
#[test]
fn a_run_waiting_for_the_worktree_lock_stops_on_ctrl_c_and_resumes() {
    let repo = RunRepo::new();
    let workflow = simple_workflow(&repo);
    let lock = worktrees_lock(&repo);
    let bin = repo.path().join(".git/other-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let named = bin.join("tnh-conductor");
    std::fs::copy(flock_program(), &named).unwrap();
    let ready = repo.path().join(".git/ready.fifo");
    fifo(&ready);
    let holder = hold_with(&named, "-x", &lock, &ready);

    let asked = repo.path().join(".git/asked.fifo");
    fifo(&asked);
    let path = git_on_path_when(
        &repo,
        "[ \"$1\" = show-ref ]",
        &format!("echo asked > '{}'", asked.display()),
    );
    let child = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .env("PATH", &path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(read_fifo(&asked), "asked");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let output = finish(child, "run waiting for the worktree lock");
    assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["state"], "interrupted", "{result}");
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    assert!(!repo.path().join(".tnh/worktrees").join(&run_id).exists());

    drop(holder);
    let output = conductor_within(&repo, &["resume", &run_id]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert!(
        repo.path()
            .join(".tnh/worktrees")
            .join(&run_id)
            .join("f.txt")
            .is_file()
    );
}

/// A repository whose `waiter` agent tells the test its pid on the FIFO `started`, then waits
/// until the test writes to the FIFO `go`, and finishes; one step, then a success STOP.
fn repo_with_waiting_agent() -> (RunRepo, PathBuf, PathBuf, PathBuf) {
    let repo = RunRepo::new();
    let started = repo.path().join(".git/started.fifo");
    let go = repo.path().join(".git/go.fifo");
    fifo(&started);
    fifo(&go);
    let agent = repo.repo.write(
        ".tnh/waiter.sh",
        &format!(
            "cat >/dev/null\necho $$ > '{}'\nread line < '{}'\necho done > done.txt\necho finished\n",
            started.display(),
            go.display()
        ),
    );
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  waiter:\n    kind: command\n    argv: [/bin/sh, \"{}\"]\n",
            agent.display()
        ),
    );
    let workflow = repo.workflow_text(
        "wait.yaml",
        "workflow_id: wait\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - {id: work, opcode: RUN_AGENT, agent: waiter, prompt: p, routes: {completed: done, \"*\": bad}}\n  - {id: done, opcode: STOP}\n  - {id: bad, opcode: STOP, outcome: failure}\n",
    );
    (repo, workflow, started, go)
}

/// Removing a live run's lock file (its agent can write the run
/// directory; an operator may tidy a "stale" lock) let `resume` take a fresh lock while the
/// driver lived: it killed the live agent as an orphan, and both appended to `events.ndjson`,
/// tearing it. Now `status` and `runs list` still say running, `resume` (and a rollback) are
/// refused naming the driver, and the run ends as it would have, its log whole.
#[test]
fn a_live_runs_removed_lock_file_lets_no_second_driver_in() {
    for how in ["removed", "renamed"] {
        a_live_runs_lock_file_taken_away(how);
    }
}

/// [`a_live_runs_removed_lock_file_lets_no_second_driver_in`], the lock file `removed` or
/// `renamed` (to `lock.old`, in the run directory).
fn a_live_runs_lock_file_taken_away(how: &str) {
    let (repo, workflow, started, go) = repo_with_waiting_agent();
    let child = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let driver = child.id();
    let agent: i32 = read_fifo(&started).parse().unwrap();
    let run_id = repo.only_run_id();
    let lock = repo.run_dir(&run_id).join("lock");
    if how == "removed" {
        std::fs::remove_file(&lock).unwrap();
    } else {
        std::fs::rename(&lock, lock.with_extension("old")).unwrap();
    }

    let status = conductor_within(&repo, &["status", "--json", &run_id]);
    let listed = conductor_within(&repo, &["runs", "list", "--json"]);
    let resumed = conductor_within(&repo, &["resume", &run_id]);
    let rolled_back = conductor_within(&repo, &["rollback", &run_id]);
    let agent_alive = kill(Pid::from_raw(agent), None).is_ok();
    // Let the agent finish (when it was killed, nobody reads the FIFO any more).
    if agent_alive {
        std::fs::write(&go, "go\n").unwrap();
    }
    let output = finish(child, "the first driver");

    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["lifecycle_state"], "running", "{how}: {status}");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("running") && !listed.contains("blocked"),
        "{how}: {listed}"
    );
    for (what, refused) in [("resume", &resumed), ("rollback", &rolled_back)] {
        let stderr = stderr_text(refused);
        assert_eq!(refused.status.code(), Some(2), "{how}, {what}: {stderr}");
        assert!(
            stderr.contains(&format!("run is being driven by process {driver}"))
                && stderr.contains("removed or replaced"),
            "{how}, {what}: {stderr}"
        );
    }
    assert!(agent_alive, "{how}: the live agent was killed as an orphan");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{how}: {}",
        stderr_text(&output)
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    assert!(
        !events
            .iter()
            .any(|event| event["event_type"] == "run_resumed"),
        "{events:?}"
    );
}

/// The event log is opened `O_APPEND`, so two writers (two drivers let
/// in at once) can never overwrite each other's lines: each line lands whole at the end.
#[test]
fn two_writers_of_one_event_log_never_overwrite_a_line() {
    use tnh_conductor::artifacts::{EventLog, EventPayload};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.ndjson");
    let mut first = EventLog::open(&path, "run").unwrap();
    first
        .append(None, EventPayload::RunStarted(Default::default()))
        .unwrap();
    let mut second = EventLog::open(&path, "run").unwrap();
    first
        .append(
            Some(("a", 1)),
            EventPayload::StepStarted(Default::default()),
        )
        .unwrap();
    second
        .append(None, EventPayload::RunResumed(Default::default()))
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let types: Vec<&str> = lines
        .iter()
        .map(|line| line["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["run_started", "step_started", "run_resumed"],
        "{text}"
    );
}

/// `/proc/locks` was matched by inode alone, any lock type: a shared
/// `flock` (which the conductor never takes) made a killed run read as `running`. Only an
/// exclusive `flock` on the same device and inode counts. (The reviewer's case, an inode
/// number shared with a file on another device, cannot be made on purpose; the unit tests of
/// `kernel::lock` read recorded tables.)
#[test]
fn a_shared_flock_on_a_killed_runs_lock_does_not_make_it_read_as_running() {
    let repo = RunRepo::new();
    let workflow = simple_workflow(&repo);
    repo.run_killed_at(&workflow, 2);
    let run_id = repo.only_run_id();
    let lock = repo.run_dir(&run_id).join("lock");
    let ready = repo.path().join(".git/ready.fifo");
    fifo(&ready);
    let holder = hold_with(&flock_program(), "-s", &lock, &ready);
    let status = conductor_within(&repo, &["status", "--json", &run_id]);
    let listed = conductor_within(&repo, &["runs", "list", "--json"]);
    drop(holder);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["lifecycle_state"], "blocked", "{status}");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("blocked") && !listed.contains("running"),
        "{listed}"
    );
}

/// A folder where a run's lock file should be was reported as an I/O
/// failure (`Is a directory`) with a hint about permissions and disk space; it is named like a
/// link or a FIFO there, with the hint to remove it.
#[test]
fn a_folder_in_place_of_a_runs_lock_file_is_named_with_the_hint_to_remove_it() {
    let repo = RunRepo::new();
    let workflow = simple_workflow(&repo);
    repo.run_killed_at(&workflow, 2);
    let run_id = repo.only_run_id();
    let lock = repo.run_dir(&run_id).join("lock");
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    for command in ["resume", "rollback"] {
        let output = conductor_within(&repo, &[command, &run_id]);
        let stderr = stderr_text(&output);
        assert_eq!(output.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "the lock file `{}` is a folder, not a regular file",
                lock.display()
            )) && stderr.contains(&format!("rm -r {}", lock.display()))
                && !stderr.contains("writable"),
            "{command}: {stderr}"
        );
    }
}

/// A run directory
/// on tmpfs (small inode numbers) and a file of sysfs with the same inode number, on which an
/// unrelated process holds an exclusive `flock`. Matched by inode alone, the killed run read
/// as `running`; the device tells them apart. Where there is no `/dev/shm`, or no such file,
/// there is nothing to show.
#[test]
fn an_exclusive_flock_on_another_devices_file_with_the_same_inode_is_not_the_driver() {
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        return;
    };
    let repo = RunRepo::in_dir(dir);
    let workflow = simple_workflow(&repo);
    repo.run_killed_at(&workflow, 2);
    let run_id = repo.only_run_id();
    let lock = repo.run_dir(&run_id).join("lock");
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&lock).unwrap());
    let found = Command::new("find")
        .args(["/sys", "-xdev", "-type", "f", "-inum", &inode.to_string()])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let Some(other) = String::from_utf8_lossy(&found.stdout)
        .lines()
        .next()
        .map(PathBuf::from)
    else {
        return;
    };
    let ready = repo.path().join(".git/ready.fifo");
    fifo(&ready);
    let holder = hold_with(&flock_program(), "-x", &other, &ready);
    let status = conductor_within(&repo, &["status", "--json", &run_id]);
    drop(holder);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        status["lifecycle_state"],
        "blocked",
        "{status} ({} has inode {inode} too)",
        other.display()
    );
}
