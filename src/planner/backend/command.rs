//! The `command` backend: any program, given the envelope as JSON on stdin, answering a
//! decision JSON on stdout.

use super::decision::parse_decision;
use super::process::{Invocation, ProcessError, run_process};
use super::{Asked, AttemptError, External, Request};

/// One attempt of a `command` planner.
pub(super) fn ask(external: &External, request: &Request<'_>, argv: &[String]) -> Asked {
    let Some((program, args)) = argv.split_first() else {
        return Asked::process(String::new(), Err(ProcessError::NoProgram.into()), None);
    };
    let input = serde_json::to_vec(request.envelope).unwrap_or_default();
    let invocation = Invocation {
        program,
        args,
        input,
    };
    match run_process(external, request, invocation, None) {
        Ok(run) => {
            let answer = match (run.failure, run.not_utf8) {
                (Some(failure), _) => Err(failure.into()),
                (None, Some(not_utf8)) => Err(not_utf8.into()),
                (None, None) => parse_decision(&run.stdout).map_err(AttemptError::from),
            };
            Asked::process(run.stdout, answer, run.stderr)
        }
        Err(error) => Asked::process(String::new(), Err(error.into()), None),
    }
}
