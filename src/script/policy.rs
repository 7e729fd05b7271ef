//! Hooks: functions of the workflow script the host calls by name — a policy's `check`, once
//! per changed file (DESIGN §9), and any other function such as `summarize`.
//!
//! A hook's result is checked here, not trusted: `check` must answer `true` or a reason
//! string (`false` is accepted as a reason-less violation), anything else is an error that
//! points at the `check:` line of the workflow and, through the trace, into the script.

use rhai::{Dynamic, ImmutableString, Scope};

use super::context::{ChangedFile, Context};
use super::error::{CodeKind, Origin, ScriptError};
use super::host::ScriptHost;
use super::value::{dynamic_to_json, json_to_dynamic};
use crate::workflow::model::At;

/// A changed file a policy `check` rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The changed file.
    pub path: String,
    /// Why, in the script's words.
    pub reason: String,
}

impl ScriptHost {
    /// Calls the script function named by a policy's `check` for each changed file of
    /// `context`, collecting the violations in change order.
    pub fn check_policy(
        &self,
        function: &At<String>,
        context: &Context,
    ) -> Result<Vec<Violation>, ScriptError> {
        let mut violations = Vec::new();
        for change in context.changes()?.iter() {
            if let Some(reason) = self.check_change(function, change, context)? {
                violations.push(Violation {
                    path: change.path.clone(),
                    reason,
                });
            }
        }
        Ok(violations)
    }

    /// Calls a policy's `check` function for one change: `None` when it passes, the reason
    /// when it does not. This is the per-file hook `policy::check` takes; a kernel that adapts
    /// it should treat an error as a violation (fail closed).
    pub fn check_change(
        &self,
        function: &At<String>,
        change: &ChangedFile,
        context: &Context,
    ) -> Result<Option<String>, ScriptError> {
        let origin = hook_origin(function);
        let ast = self.expression(&call_code(&function.value, 1, &origin, self)?, &origin)?;
        let mut scope = Scope::new();
        scope.push_constant("argument_0", change.to_dynamic());
        let verdict = self.run(&origin, &ast, &mut scope, context)?;
        reason(&verdict).map_err(|message| {
            ScriptError::value(
                self.file(),
                &origin,
                format!("`{}` {message}", function.value),
            )
        })
    }

    /// Calls a script function with JSON arguments and returns its value as JSON; errors point
    /// at `function.pos`, the YAML that names the function.
    pub fn call_function(
        &self,
        function: &At<String>,
        arguments: &[serde_json::Value],
        context: &Context,
    ) -> Result<serde_json::Value, ScriptError> {
        let origin = hook_origin(function);
        let code = call_code(&function.value, arguments.len(), &origin, self)?;
        let ast = self.expression(&code, &origin)?;
        let mut scope = Scope::new();
        for (index, argument) in arguments.iter().enumerate() {
            let value = json_to_dynamic(argument)
                .map_err(|message| ScriptError::value(self.file(), &origin, message))?;
            scope.push_constant(format!("argument_{index}"), value);
        }
        let value = self.run(&origin, &ast, &mut scope, context)?;
        dynamic_to_json(&value).map_err(|message| ScriptError::value(self.file(), &origin, message))
    }
}

fn hook_origin(function: &At<String>) -> Origin {
    Origin {
        pos: function.pos,
        kind: CodeKind::Hook,
        precise: false,
    }
}

/// `name(argument_0, …)`, refusing names that are not plain identifiers (no code injection).
fn call_code(
    name: &str,
    arity: usize,
    origin: &Origin,
    host: &ScriptHost,
) -> Result<String, ScriptError> {
    let identifier = name
        .chars()
        .next()
        .is_some_and(|ch| ch.is_ascii_alphabetic() || ch == '_')
        && name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
    if !identifier {
        return Err(ScriptError::value(
            host.file(),
            origin,
            format!("`{name}` is not a function name"),
        ));
    }
    let arguments: Vec<String> = (0..arity)
        .map(|index| format!("argument_{index}"))
        .collect();
    Ok(format!("{name}({})", arguments.join(", ")))
}

/// `None` for a pass, the reason for a violation.
fn reason(verdict: &Dynamic) -> Result<Option<String>, String> {
    if let Ok(pass) = verdict.as_bool() {
        return Ok((!pass).then(|| "rejected by the policy check".to_owned()));
    }
    if let Some(text) = verdict.read_lock::<ImmutableString>() {
        if text.trim().is_empty() {
            return Err("returned an empty reason".to_owned());
        }
        return Ok(Some(text.to_string()));
    }
    Err(format!(
        "returned a value of type `{}`; a check returns `true` or a reason string",
        verdict.type_name()
    ))
}
