//! The `command` adapter: any program, the prompt on stdin, plain-text output.
//!
//! Used for scripted agents, validators and tests. The final response is the end of stdout
//! (at most [`FINAL_RESPONSE_LIMIT`] bytes), since a plain program has no other way to
//! answer.

use std::path::Path;

use super::{Invocation, StreamSummary};
use crate::runner::profile::AgentProfile;
use crate::runner::progress::CaptureFormat;
use crate::runner::transcript::read_end;

/// The most of stdout kept as the final response.
const FINAL_RESPONSE_LIMIT: u64 = 64 * 1024;

/// `argv` as given: the first element is the program.
pub(crate) fn invocation(profile: &AgentProfile) -> Invocation {
    // `AgentProfile::check` has refused an empty argv before we get here.
    let program = profile.argv.first().cloned().unwrap_or_default();
    let mut args: Vec<String> = profile.argv.iter().skip(1).cloned().collect();
    args.extend(profile.extra_args.iter().cloned());
    Invocation {
        program,
        args,
        format: CaptureFormat::Text,
    }
}

/// The end of stdout as the final response; nothing else can be known.
pub(crate) fn summarize(stdout: &Path) -> std::io::Result<StreamSummary> {
    let text = read_end(stdout, FINAL_RESPONSE_LIMIT)?;
    Ok(StreamSummary {
        final_response: (!text.is_empty()).then_some(text),
        ..StreamSummary::default()
    })
}
