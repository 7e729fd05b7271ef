//! A validator's declared artifacts: the files its globs match in its working directory,
//! copied into its folder of the visit, bounded in size and count and never leaving the
//! working directory.

use std::path::Path;

/// The most files one validator's artifact globs may collect.
const MAX_ARTIFACT_FILES: usize = 10_000;

/// The largest artifact file copied, in bytes.
pub(super) const MAX_ARTIFACT_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The most artifact bytes one validator may copy.
const MAX_ARTIFACT_TOTAL_BYTES: u64 = 512 * 1024 * 1024;

/// What artifact capture did.
#[derive(Debug, Default)]
pub(super) struct Collected {
    /// Relative paths copied.
    pub(super) copied: Vec<String>,
    /// Literal (wildcard-free) or refused patterns that produced nothing.
    pub(super) missing: Vec<String>,
    /// Patterns and files refused because they leave the worktree, with the reason.
    pub(super) refused: Vec<(String, String)>,
    /// Files left out by the size caps, with the reason.
    pub(super) skipped: Vec<(String, String)>,
}

/// Copies files matching the globs (relative to `root`) into `base/name`. Patterns with `..` or an
/// absolute path, and files whose real path leaves `root` (symlinks out), are refused and
/// recorded; the per-file and per-validator size caps are recorded when hit.
pub(super) fn collect_artifacts(
    root: &Path,
    globs: &[String],
    (base, name): (&Path, &str),
) -> Collected {
    let mut collected = Collected::default();
    let Ok(real_root) = root.canonicalize() else {
        collected.missing = globs.to_vec();
        return collected;
    };
    let files = if globs.is_empty() {
        Vec::new()
    } else {
        walk(&real_root)
    };
    let mut total: u64 = 0;
    for pattern in globs {
        let escapes = Path::new(pattern).is_absolute()
            || Path::new(pattern)
                .components()
                .any(|component| matches!(component, std::path::Component::ParentDir));
        if escapes {
            collected.refused.push((
                pattern.clone(),
                "the pattern leaves the working directory".into(),
            ));
            collected.missing.push(pattern.clone());
            continue;
        }
        let Ok(glob) = globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map(|glob| glob.compile_matcher())
        else {
            collected.missing.push(pattern.clone());
            continue;
        };
        let mut matched = false;
        for relative in files.iter().filter(|relative| glob.is_match(relative)) {
            if collected.copied.contains(relative) {
                matched = true;
                continue;
            }
            let source = real_root.join(relative);
            if !source
                .canonicalize()
                .is_ok_and(|real| real.starts_with(&real_root))
            {
                collected.refused.push((
                    relative.clone(),
                    "a symlink to outside the working directory".into(),
                ));
                continue;
            }
            let Ok(size) = std::fs::metadata(&source).map(|metadata| metadata.len()) else {
                continue;
            };
            if size > MAX_ARTIFACT_FILE_BYTES
                || total + size > MAX_ARTIFACT_TOTAL_BYTES
                || collected.copied.len() >= MAX_ARTIFACT_FILES
            {
                collected.skipped.push((
                    relative.clone(),
                    format!("{size} bytes: over the artifact size or count caps"),
                ));
                continue;
            }
            if copy_into((base, name), relative, &source, size) {
                matched = true;
                total += size;
                collected.copied.push(relative.clone());
            }
        }
        if !matched && !pattern.contains(['*', '?', '[', '{']) {
            collected.missing.push(pattern.clone());
        }
    }
    collected
}

/// Copies `source` (`size` bytes) to `base/name/relative`; false when it could not be.
/// The copy lands in the step folder, where what the validator ran (the agent's code) may
/// have put links: folders on the way are real ones, the file a new one, and only a regular
/// file is read (a FIFO would block the copy).
fn copy_into((base, name): (&Path, &str), relative: &str, source: &Path, size: u64) -> bool {
    let mut folders = vec![name];
    folders.extend(
        Path::new(relative)
            .parent()
            .into_iter()
            .flat_map(Path::components)
            .filter_map(|part| part.as_os_str().to_str()),
    );
    crate::artifacts::safe_files::create_real_folders(base, &folders)
        .and_then(|(folder, _)| {
            let target = folder.join(Path::new(relative).file_name().unwrap_or_default());
            crate::artifacts::safe_files::copy_regular(source, &target, size)
        })
        .is_ok()
}

/// Relative paths of the files under `root` (symlinks listed, not followed), bounded.
fn walk(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut walker = walkdir::WalkDir::new(root).min_depth(1).into_iter();
    while let Some(next) = walker.next() {
        // A folder that cannot be listed is passed over.
        let Ok(entry) = next else {
            continue;
        };
        if entry.file_name() == ".git" {
            if entry.file_type().is_dir() {
                walker.skip_current_dir();
            }
            continue;
        }
        if !entry.file_type().is_dir()
            && let Ok(relative) = entry.path().strip_prefix(root)
        {
            found.push(relative.to_string_lossy().into_owned());
        }
        if found.len() > 50 * MAX_ARTIFACT_FILES {
            return found;
        }
    }
    found
}
