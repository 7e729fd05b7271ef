//! The files `tnh` writes into a visit's folder while the agent works: the whole output of
//! each `tnh test|lint|typecheck` call and the run log. Named here, below both `tnh` that
//! writes them and the kernel that lists them in the visit's manifest.

/// The run-log file of a step folder.
pub const RUNLOG_FILE: &str = super::VisitDir::RUNLOG;

/// The file in the step folder that keeps the whole output of the step's `call`th `tnh NAME`.
pub fn tool_log_name(name: &str, call: u32) -> String {
    if call == 1 {
        format!("{LOG_PREFIX}{name}{LOG_SUFFIX}")
    } else {
        format!("{LOG_PREFIX}{name}.{call}{LOG_SUFFIX}")
    }
}

const LOG_PREFIX: &str = super::VisitDir::TOOL_LOG_PREFIX;
const LOG_SUFFIX: &str = super::VisitDir::TOOL_LOG_SUFFIX;

/// The `tnh test|lint|typecheck` logs in a step folder (regular files named `tnh-<name>.log`,
/// `tnh-<name>.<N>.log`), by name and then in the order of the calls, for the visit's manifest.
pub fn tool_logs(visit_dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(visit_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| {
            name.len() > LOG_PREFIX.len() + LOG_SUFFIX.len()
                && name.starts_with(LOG_PREFIX)
                && name.ends_with(LOG_SUFFIX)
        })
        .collect();
    names.sort_by_cached_key(|name| {
        let middle = &name[LOG_PREFIX.len()..name.len() - LOG_SUFFIX.len()];
        middle
            .rsplit_once('.')
            .and_then(|(tool, call)| Some((tool.to_owned(), call.parse::<u32>().ok()?)))
            .unwrap_or_else(|| (middle.to_owned(), 1))
    });
    names
}
