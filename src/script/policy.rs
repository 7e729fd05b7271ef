//! Hooks: functions of the workflow script the host calls by name — a policy's `check`, once
//! per changed file, and any other function such as `summarize`.
//!
//! A hook's result is checked here, not trusted: `check` must answer `true` or a reason
//! string (`false` is accepted as a reason-less violation), anything else is an error that
//! points at the `check:` line of the workflow and, through the trace, into the script.

use std::cell::Cell;
use std::time::Instant;

use rhai::{Dynamic, ImmutableString, Scope};

use super::context::{ChangedFile, Context};
use super::error::{CodeKind, Origin, ScriptError};
use super::host::ScriptHost;
use super::value::{dynamic_to_json, json_to_dynamic};
use crate::document::at::At;

/// A changed file a policy `check` rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The changed file.
    pub path: String,
    /// Why, in the script's words.
    pub reason: String,
}

/// The `check` calls of one step's policy stage, one per changed file, under one budget for
/// all of them (`Limits::max_check_time`): each call stops at the budget's end if that comes
/// before its own deadline, and once the budget is spent the remaining files are not checked
/// but get a violation that says so (fail closed).
#[derive(Debug)]
pub struct PolicyStage<'a> {
    host: &'a ScriptHost,
    function: &'a At<String>,
    context: &'a Context,
    ends: Instant,
    calls: Cell<usize>,
}

impl PolicyStage<'_> {
    /// Calls the `check` function for one change: `None` when it passes, the reason when it
    /// does not, or a reason that the budget ran out before the file was judged. An error is
    /// the check's own failure; a kernel should treat it as a violation too.
    pub fn check(&self, change: &ChangedFile) -> Result<Option<String>, ScriptError> {
        if self.host.state().now() >= self.ends {
            return Ok(Some(self.out_of_time()));
        }
        self.calls.set(self.calls.get() + 1);
        match self
            .host
            .check_change_until(self.function, change, self.context, Some(self.ends))
        {
            Err(ScriptError::Deadline { .. }) if self.host.state().now() >= self.ends => {
                Ok(Some(self.out_of_time()))
            }
            other => other,
        }
    }

    fn out_of_time(&self) -> String {
        let budget = self.host.limits().max_check_time;
        let budget = if budget.subsec_millis() == 0 {
            format!("{} s", budget.as_secs())
        } else {
            format!("{} ms", budget.as_millis())
        };
        format!(
            "not checked: the policy's `check` calls of this step ran out of their {budget} budget after {} call(s); a check should judge its own file (`change`) and count with `diff_stat()` rather than walk every change",
            self.calls.get()
        )
    }
}

impl ScriptHost {
    /// The policy stage of one step: `function`, called per changed file against `context`,
    /// within one budget that starts now.
    pub fn policy_stage<'a>(
        &'a self,
        function: &'a At<String>,
        context: &'a Context,
    ) -> PolicyStage<'a> {
        PolicyStage {
            host: self,
            function,
            context,
            ends: self.state().now() + self.limits().max_check_time,
            calls: Cell::new(0),
        }
    }

    /// Calls the script function named by a policy's `check` for each changed file of
    /// `context`, collecting the violations in change order, within one policy stage's budget.
    pub fn check_policy(
        &self,
        function: &At<String>,
        context: &Context,
    ) -> Result<Vec<Violation>, ScriptError> {
        let stage = self.policy_stage(function, context);
        let mut violations = Vec::new();
        for change in context.changes()?.iter() {
            if let Some(reason) = stage.check(change)? {
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
    /// it should treat an error as a violation (fail closed), and call it through a
    /// [`PolicyStage`] so all the calls of a step share one budget.
    pub fn check_change(
        &self,
        function: &At<String>,
        change: &ChangedFile,
        context: &Context,
    ) -> Result<Option<String>, ScriptError> {
        self.check_change_until(function, change, context, None)
    }

    fn check_change_until(
        &self,
        function: &At<String>,
        change: &ChangedFile,
        context: &Context,
        until: Option<Instant>,
    ) -> Result<Option<String>, ScriptError> {
        let origin = hook_origin(function);
        let ast = self.expression(&call_code(&function.value, 1, &origin, self)?, &origin)?;
        let mut scope = Scope::new();
        scope.push_constant("argument_0", change.to_dynamic());
        let verdict = self.run_until(&origin, &ast, &mut scope, context, until)?;
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
