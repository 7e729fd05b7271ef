//! The few git queries the `tnh` commands need, through the git CLI (fast to start, and the
//! same view of the worktree the agent has).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::TnhError;

/// Where the command runs: the repository root, and the base to compare with.
pub struct Place {
    /// The worktree or repository root.
    pub root: PathBuf,
    /// The base commit.
    pub base: String,
    /// Where the base came from (`TNH_BASE_SHA`, `merge-base with main`, …).
    pub base_source: String,
}

/// The repository containing the current directory, without running git.
pub fn root() -> Result<PathBuf, TnhError> {
    let start = match std::env::var_os("TNH_WORKTREE") {
        // Empty, it would be taken for a folder named "" (and git then fails to start there).
        Some(worktree) if worktree.is_empty() => {
            return Err(TnhError::new(
                "TNH_WORKTREE is set but empty",
                "inside a run tnh-conductor sets it to the run's worktree; outside one, unset it (`unset TNH_WORKTREE`) or set it to a folder of a checkout",
            ));
        }
        Some(worktree) => PathBuf::from(worktree),
        None => std::env::current_dir().unwrap_or_default(),
    };
    start
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            TnhError::new(
                "not inside a git repository",
                "run tnh from a repository or a tnh-conductor worktree",
            )
        })
}

/// Runs git in `root`; stdout as text, or the error git printed. Paths come out as they are
/// (`core.quotePath=off`), never in git's octal-quoted form.
pub fn git(root: &Path, args: &[&str]) -> Result<String, TnhError> {
    let output = git_output(root, args)?;
    if !output.status.success() {
        return Err(git_failed(args, &output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// git in `root`, paths unquoted (`core.quotePath=off`).
fn git_command(root: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("git");
    command
        .current_dir(root)
        .args(["-c", "core.quotePath=off"])
        .args(args);
    command
}

/// git could not be started.
fn cannot_run_git(error: &std::io::Error) -> TnhError {
    TnhError::new(
        format!("cannot run git: {error}"),
        "install git and put it on PATH",
    )
}

/// git ran and failed, saying `stderr`. Two failures an agent causes are named as such: a
/// `TNH_BASE_SHA` that is not a commit of the repository, and a PATH outside it.
fn git_failed(args: &[&str], stderr: &[u8]) -> TnhError {
    let said = String::from_utf8_lossy(stderr);
    let said = said.trim();
    let base = std::env::var("TNH_BASE_SHA").unwrap_or_default();
    let about_revision = [
        "bad revision",
        "unknown revision",
        "bad object",
        "not a valid",
    ]
    .iter()
    .any(|phrase| said.contains(phrase));
    if !base.is_empty() && args.contains(&base.as_str()) && about_revision && said.contains(&base) {
        return TnhError::new(
            format!("TNH_BASE_SHA `{base}` is not a commit of this repository: {said}"),
            BASE_HINT,
        );
    }
    let hint = if said.contains("is outside repository") {
        "PATHs are relative to the repository root, not to the current folder (`src/lib.rs`, not `../src/lib.rs`)"
    } else {
        "check the repository state"
    };
    TnhError::new(format!("git {} failed: {said}", args.join(" ")), hint)
}

/// What to do about a `TNH_BASE_SHA` that is not a commit.
const BASE_HINT: &str = "inside a run tnh-conductor sets it to the run's base commit; outside one, unset it (`unset TNH_BASE_SHA`) or set it to a commit (`git rev-parse HEAD`)";

/// Runs git in `root` (paths unquoted: `core.quotePath=off`) and returns what it did; only a
/// git that cannot be started is an error here.
fn git_output(root: &Path, args: &[&str]) -> Result<std::process::Output, TnhError> {
    git_command(root, args)
        .output()
        .map_err(|error| cannot_run_git(&error))
}

/// Runs git in `root` with the index `index` (`GIT_INDEX_FILE`) when given, keeping at most
/// `cap` bytes of its stdout: beyond that git is killed and the second value is `true`. Memory
/// stays bounded whatever git prints (a huge new file in a patch).
pub fn git_capped(
    root: &Path,
    args: &[&str],
    index: Option<&Path>,
    cap: usize,
) -> Result<(String, bool), TnhError> {
    use std::io::Read as _;
    let mut command = git_command(root, args);
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(index) = index {
        command.env("GIT_INDEX_FILE", index);
    }
    let mut child = command.spawn().map_err(|error| cannot_run_git(&error))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(TnhError::new("cannot read git's output", "try again"));
    };
    // stderr is drained meanwhile (a git blocked writing it would never finish stdout); only
    // its start is kept, for the error message.
    let errors = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut stderr = stderr;
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut kept);
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        kept
    });
    let mut bytes = Vec::new();
    let read = stdout
        .take(u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes);
    let cut = bytes.len() > cap;
    if cut {
        bytes.truncate(cap);
        let _ = child.kill();
    }
    let status = child.wait();
    let stderr = errors.join().unwrap_or_default();
    if let Err(error) = read {
        return Err(TnhError::new(
            format!("cannot read the output of git {}: {error}", args.join(" ")),
            "try again",
        ));
    }
    if !cut && !status.as_ref().is_ok_and(std::process::ExitStatus::success) {
        return Err(git_failed(args, &stderr));
    }
    Ok((String::from_utf8_lossy(&bytes).into_owned(), cut))
}

/// The index file git uses for the checkout at `root`: `GIT_INDEX_FILE` when set, else the
/// checkout's own git folder's `index`.
pub fn index_file(root: &Path) -> PathBuf {
    match std::env::var_os("GIT_INDEX_FILE").filter(|file| !file.is_empty()) {
        Some(file) => root.join(file),
        None => git_dir(root).join("index"),
    }
}

/// The root and the base: `TNH_BASE_SHA` inside a run, else the merge-base with the default
/// branch (`origin/HEAD`, `main`, `master`), else `HEAD`, or the empty tree while HEAD has no
/// commit yet.
pub fn place() -> Result<Place, TnhError> {
    let root = root()?;
    if let Ok(base) = std::env::var("TNH_BASE_SHA")
        && !base.is_empty()
    {
        // git would take it for an option (`--output=FILE` writes a file), as `--against`
        // refuses it.
        if base.starts_with('-') {
            return Err(TnhError::new(
                format!("TNH_BASE_SHA `{base}` is not a commit"),
                BASE_HINT,
            ));
        }
        return Ok(Place {
            root,
            base,
            base_source: "TNH_BASE_SHA (the run's base)".into(),
        });
    }
    // Agents call these commands often: look for the default branch in the ref files instead
    // of paying for a failing git process per candidate.
    let common = common_dir(&root);
    let packed = std::fs::read_to_string(common.join("packed-refs")).unwrap_or_default();
    let candidates = [
        ("origin/HEAD", "refs/remotes/origin/HEAD"),
        ("main", "refs/heads/main"),
        ("master", "refs/heads/master"),
    ];
    for (branch, reference) in candidates {
        let exists = common.join(reference).exists()
            || packed
                .lines()
                .any(|line| line.ends_with(&format!(" {reference}")));
        if exists && let Ok(base) = git(&root, &["merge-base", "HEAD", branch]) {
            return Ok(Place {
                root,
                base: base.trim().to_owned(),
                base_source: format!("merge-base with {branch}"),
            });
        }
    }
    if head_is_unborn(&root, &common, &packed) {
        // No commit yet: everything in the checkout is new, as against the empty tree.
        let empty_tree = git(&root, &["hash-object", "-t", "tree", "/dev/null"])?;
        return Ok(Place {
            root,
            base: empty_tree.trim().to_owned(),
            base_source: "empty tree: no commit yet".into(),
        });
    }
    Ok(Place {
        root,
        base: "HEAD".into(),
        base_source: "HEAD (no default branch found)".into(),
    })
}

/// Whether HEAD names a branch that has no commit yet (a new repository, an orphan branch),
/// read from the ref files; a reftable repository is taken to have its commit.
fn head_is_unborn(root: &Path, common: &Path, packed: &str) -> bool {
    let Ok(head) = std::fs::read_to_string(git_dir(root).join("HEAD")) else {
        return false;
    };
    let Some(reference) = head.trim().strip_prefix("ref: ") else {
        return false;
    };
    !common.join("reftable").exists()
        && !common.join(reference).is_file()
        && !packed
            .lines()
            .any(|line| line.ends_with(&format!(" {reference}")))
}

/// The merge-base of `reference` and HEAD: where the current branch left `reference`.
pub fn merge_base(root: &Path, reference: &str) -> Result<String, TnhError> {
    if reference.starts_with('-') {
        return Err(TnhError::new(
            format!("`{reference}` is not a ref"),
            "give a branch, tag or commit, e.g. `--against main`",
        ));
    }
    let output = git_output(root, &["merge-base", "HEAD", reference])?;
    if !output.status.success() {
        return Err(TnhError::new(
            format!(
                "cannot compare with `{reference}`: {}",
                String::from_utf8_lossy(&output.stderr)
                    .trim()
                    .lines()
                    .next()
                    .map_or_else(
                        || "it shares no history with HEAD".to_owned(),
                        str::to_owned
                    )
            ),
            "give a branch, tag or commit of this repository (`git branch -a` lists them), e.g. `--against main`",
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The checkout's own git folder: `root/.git`, or the folder its `.git` file names (a linked
/// worktree's `<repo>/.git/worktrees/<name>`, a submodule's `../.git/modules/<name>`, a
/// `--separate-git-dir` folder), relative to `root` when the file gives a relative path.
fn git_dir(root: &Path) -> PathBuf {
    let dot_git = root.join(".git");
    if dot_git.is_dir() {
        return dot_git;
    }
    std::fs::read_to_string(&dot_git)
        .ok()
        .and_then(|text| {
            text.strip_prefix("gitdir:")
                .map(|path| root.join(path.trim()))
        })
        .unwrap_or(dot_git)
}

/// The repository's common git folder: the checkout's git folder, or for a linked worktree
/// the one its `commondir` file names (relative to it).
pub fn common_dir(root: &Path) -> PathBuf {
    let git_dir = git_dir(root);
    let common = std::fs::read_to_string(git_dir.join("commondir"))
        .map(|text| git_dir.join(text.trim()))
        .unwrap_or(git_dir);
    common.canonicalize().unwrap_or(common)
}

/// The current branch, read from HEAD without running git (`None` when detached).
pub fn branch(root: &Path) -> Option<String> {
    let head = std::fs::read_to_string(git_dir(root).join("HEAD")).ok()?;
    head.trim()
        .strip_prefix("ref: refs/heads/")
        .map(str::to_owned)
}

/// Runs two git commands at once (agents pay for every millisecond of these commands).
pub fn git_pair(
    root: &Path,
    first: &[&str],
    second: &[&str],
) -> Result<(String, String), TnhError> {
    std::thread::scope(|scope| {
        let other = scope.spawn(|| git(root, second));
        let mine = git(root, first);
        let theirs = other
            .join()
            .unwrap_or_else(|_| Err(TnhError::new("git failed", "try again")));
        Ok((mine?, theirs?))
    })
}

/// Changed paths against the base (`A`/`M`/`D`/`R`/`C`/`T` status, a rename or copy under its
/// new path) plus untracked files (`?`), limited to the git pathspecs `paths` (all when
/// empty). Tracked and untracked files are matched by git with the same pathspecs, so `src`
/// means the folder `src` (not `srcgen/`) and `src/*.rs` is a glob, in every mode.
pub fn changes(place: &Place, paths: &[String]) -> Result<Vec<(String, String)>, TnhError> {
    let tracked = with_paths(&["diff", "--name-status", "-z", "-M", &place.base], paths);
    let untracked = untracked_args(paths);
    let (tracked, untracked) = git_pair(&place.root, &as_strs(&tracked), &as_strs(&untracked))?;
    let mut changes = parse_name_status(&tracked);
    changes.extend(
        split_nul(&untracked)
            .into_iter()
            .map(|path| ("?".to_owned(), path.to_owned())),
    );
    Ok(changes)
}

/// `git ls-files` arguments listing untracked (not ignored) files within `paths`, NUL-separated.
pub fn untracked_args(paths: &[String]) -> Vec<String> {
    with_paths(&["ls-files", "-z", "--others", "--exclude-standard"], paths)
}

/// `command`, then `--` and the pathspecs: git reads every one of them as a pathspec.
pub fn with_paths(command: &[&str], paths: &[String]) -> Vec<String> {
    command
        .iter()
        .map(|&argument| argument.to_owned())
        .chain(std::iter::once("--".to_owned()))
        .chain(paths.iter().cloned())
        .collect()
}

/// The arguments as `&str`, for `git`.
pub fn as_strs(arguments: &[String]) -> Vec<&str> {
    arguments.iter().map(String::as_str).collect()
}

/// A path as git prints it in text with `core.quotePath` off, so every mode and command spells
/// a path the same way: as it is, unless it holds a `"`, a `\` or a control character (a tab,
/// a newline), which would break a line-oriented reading — then C-quoted (`"quo\"te.txt"`),
/// as `git diff --stat` and `--patch` print it.
pub fn quoted(path: &str) -> std::borrow::Cow<'_, str> {
    if !path
        .chars()
        .any(|c| matches!(c, '"' | '\\') || c.is_ascii_control())
    {
        return path.into();
    }
    let mut text = String::with_capacity(path.len() + 2);
    text.push('"');
    for c in path.chars() {
        match c {
            '"' => text.push_str("\\\""),
            '\\' => text.push_str("\\\\"),
            '\x07' => text.push_str("\\a"),
            '\x08' => text.push_str("\\b"),
            '\t' => text.push_str("\\t"),
            '\n' => text.push_str("\\n"),
            '\x0b' => text.push_str("\\v"),
            '\x0c' => text.push_str("\\f"),
            '\r' => text.push_str("\\r"),
            c if c.is_ascii_control() => text.push_str(&format!("\\{:03o}", u32::from(c))),
            c => text.push(c),
        }
    }
    text.push('"');
    text.into()
}

/// The path a C-quoted `"…"` (as [`quoted`] and git write it) stands for; text that does not
/// start with `"` is returned as it is.
pub fn unquoted(text: &str) -> std::borrow::Cow<'_, str> {
    let Some(inner) = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return text.into();
    };
    let mut bytes = Vec::with_capacity(inner.len());
    let mut rest = inner.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        if byte != b'\\' {
            bytes.push(byte);
            continue;
        }
        let Some((&escape, tail)) = rest.split_first() else {
            bytes.push(byte);
            break;
        };
        rest = tail;
        let plain = match escape {
            b'a' => 0x07,
            b'b' => 0x08,
            b't' => b'\t',
            b'n' => b'\n',
            b'v' => 0x0b,
            b'f' => 0x0c,
            b'r' => b'\r',
            b'0'..=b'7' => {
                let digits: Vec<u8> = std::iter::once(escape)
                    .chain(rest.iter().copied().take(2))
                    .take_while(|digit| (b'0'..=b'7').contains(digit))
                    .collect();
                rest = &rest[digits.len() - 1..];
                digits
                    .iter()
                    .fold(0u32, |value, digit| value * 8 + u32::from(digit - b'0'))
                    .try_into()
                    .unwrap_or(b'?')
            }
            other => other,
        };
        bytes.push(plain);
    }
    String::from_utf8_lossy(&bytes).into_owned().into()
}

/// The entries of `-z` output.
pub fn split_nul(text: &str) -> Vec<&str> {
    text.split('\0').filter(|entry| !entry.is_empty()).collect()
}

/// `git diff --name-status -z` output: a status field, then one path (two for a rename or a
/// copy, of which the new one is kept).
fn parse_name_status(text: &str) -> Vec<(String, String)> {
    let mut fields = split_nul(text).into_iter();
    let mut changes = Vec::new();
    while let Some(status) = fields.next() {
        let Some(letter) = status.chars().next() else {
            continue;
        };
        let mut path = fields.next();
        if matches!(letter, 'R' | 'C') {
            path = fields.next();
        }
        if let Some(path) = path {
            changes.push((letter.to_string(), path.to_owned()));
        }
    }
    changes
}
