//! What a planner process changed while it was asked: the worktree compared before and after,
//! and the repository around it guarded as around an agent.

use super::super::{OpcodeError, StepContext};
use crate::artifacts::write_json_private;
use crate::config::OperatorCheckout;
use crate::planner::backend::{Backend, External, ExternalKind};
use crate::policy::{Policy, PolicySpec, PolicySummary, Violation, ViolationClass};
use crate::workspace::{
    Fingerprint, GUARD_STATE_FILE, GuardReport, RefGuard, Workspace, WorkspaceError,
};

/// What is watched around an external planner: the worktree's fingerprint, and for a planner
/// process (`command`, `claude`, `codex`: not `http`, which starts none) the guard, saved as
/// `guard_state.json` in the visit's folder while the planner runs so that `resume` checks the
/// visit if this process dies.
pub(super) struct Watch {
    before: Fingerprint,
    guard: Option<(RefGuard, std::path::PathBuf)>,
}

/// What the planner changed.
#[derive(Default)]
pub(super) struct Found {
    /// The guard's findings, then the worktree's change, as violations.
    pub(super) violations: Vec<Violation>,
    /// The guard's report and those violations, when a planner process ran.
    pub(super) policy_summary: Option<PolicySummary>,
    /// The worktree's fingerprint, when the planner changed it.
    pub(super) changed_worktree: Option<Fingerprint>,
    /// The guard state saved while the planner ran.
    pub(super) guard_state: Option<std::path::PathBuf>,
}

impl Watch {
    pub(super) fn start(
        context: &StepContext<'_>,
        backend: &Backend,
        visit_dir: &std::path::Path,
    ) -> Result<Watch, OpcodeError> {
        // A planner process works in the worktree: the next agent step reads it again.
        context.workspace.forget_capture();
        // The fingerprint first: computing it rewrites the scratch index the guard watches.
        let before = context.workspace.fingerprint()?;
        let process = !matches!(
            backend,
            Backend::External(External {
                kind: ExternalKind::Http { .. },
                ..
            })
        );
        let guard = if process {
            let guard = context
                .workspace
                .guard(&context.run.config.protected_branches)?;
            let saved = visit_dir.join(GUARD_STATE_FILE);
            write_json_private(&saved, &guard.state())?;
            Some((guard, saved))
        } else {
            None
        };
        Ok(Watch { before, guard })
    }

    /// The guard's check (refs and git files put back), then the worktree's change since the
    /// start — after the check, so a file hidden through `.git/info/exclude` shows.
    pub(super) fn finish(
        self,
        context: &StepContext<'_>,
        name: &str,
    ) -> Result<Found, OpcodeError> {
        let who = format!("planner `{name}`");
        let operator_checkout = context.run.config.operator_checkout;
        let mut found = Found::default();
        let mut report = None;
        if let Some((guard, saved)) = self.guard {
            let checked = guard.check()?.report;
            found.violations = planner_guard_violations(&checked, operator_checkout, &who);
            report = Some(checked);
            found.guard_state = Some(saved);
        }
        let after = context.workspace.fingerprint()?;
        if after != self.before {
            found.violations.extend(planner_worktree_change(
                context.workspace,
                &who,
                &self.before,
                &after,
            )?);
            found.changed_worktree = Some(after);
        }
        found.policy_summary = report.and_then(|report| {
            planner_policy(operator_checkout).map(|policy| {
                PolicySummary::new(&policy, 0, false, found.violations.clone())
                    .with_guard_report(report)
            })
        });
        Ok(found)
    }
}

/// The policy a planner process is judged by: EVALUATE changes nothing, so besides the rules
/// every step has (protected refs and tags, the operator's checkout as `operator_checkout`
/// says), a commit, a push and a changed git configuration file are forbidden. (It has no
/// globs of its own: it always compiles.)
fn planner_policy(operator_checkout: OperatorCheckout) -> Option<Policy> {
    let spec = PolicySpec {
        forbidden_operations: ["commit", "push", "modify_git_config"]
            .map(str::to_owned)
            .to_vec(),
        ..PolicySpec::default()
    };
    Policy::compile(&spec)
        .ok()
        .map(|policy| policy.with_operator_checkout(operator_checkout))
}

/// What the guard found around a planner process (`who`, e.g. ``planner `judge` ``), as
/// violations: those of [`planner_policy`], and a worktree whose HEAD left the work branch,
/// that was deleted or whose access was taken away (`planner_changed_worktree`).
pub(crate) fn planner_guard_violations(
    report: &GuardReport,
    operator_checkout: OperatorCheckout,
    who: &str,
) -> Vec<Violation> {
    let mut violations = planner_policy(operator_checkout)
        .map(|policy| policy.check_guard_report(report))
        .unwrap_or_default();
    let mut what = Vec::new();
    if report.worktree_head_restored {
        what.push("its HEAD left the work branch (re-attached)");
    }
    if report.worktree_recreated {
        what.push("it was deleted (checked out again)");
    }
    if report.worktree_access_restored {
        what.push("its access was taken away (given back)");
    }
    if !what.is_empty() {
        violations.push(Violation {
            class: ViolationClass::PlannerChangedWorktree,
            path: None,
            rule: "evaluate_changes_nothing".to_owned(),
            detail: format!(
                "{who} changed the worktree during EVALUATE: {}",
                what.join(", ")
            ),
        });
    }
    violations
}

/// The change `who` (e.g. ``planner `judge` ``) made to the worktree between the fingerprints
/// `before` and `after`, as a violation naming the changed paths (or the moved HEAD); `None`
/// when the worktree is as it was.
pub(crate) fn planner_worktree_change(
    workspace: &Workspace,
    who: &str,
    before: &Fingerprint,
    after: &Fingerprint,
) -> Result<Option<Violation>, WorkspaceError> {
    if after == before {
        return Ok(None);
    }
    let paths: Vec<String> = workspace
        .changes_between(&before.tree, &after.tree)?
        .into_iter()
        .map(|file| file.path)
        .collect();
    let mut what: Vec<String> = paths
        .iter()
        .take(5)
        .map(|path| format!("`{path}`"))
        .collect();
    if paths.len() > 5 {
        what.push(format!("and {} more", paths.len() - 5));
    }
    if after.head != before.head {
        what.push("HEAD moved".to_owned());
    }
    Ok(Some(Violation {
        class: ViolationClass::PlannerChangedWorktree,
        path: paths.first().cloned(),
        rule: "evaluate_changes_nothing".to_owned(),
        detail: format!(
            "{who} changed the worktree during EVALUATE: {}",
            what.join(", ")
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_guard_finds_around_a_planner_is_a_violation_whatever_the_policy() {
        let report = GuardReport {
            commits: 1,
            git_config_changed: vec!["/repo/.git/hooks/pre-commit".to_owned()],
            remote_refs_changed: vec!["refs/remotes/origin/main".to_owned()],
            worktree_head_restored: true,
            operator_checkout_changed: vec!["README.md".to_owned()],
            ..GuardReport::default()
        };
        let rules = |found: &[Violation]| -> Vec<String> {
            found
                .iter()
                .map(|violation| violation.rule.clone())
                .collect()
        };
        let found = planner_guard_violations(&report, OperatorCheckout::Forbid, "planner `p`");
        assert_eq!(
            rules(&found),
            [
                "commit",
                "push",
                "operator_checkout",
                "modify_git_config",
                "evaluate_changes_nothing"
            ],
            "{found:?}"
        );
        assert!(
            found[4]
                .detail
                .starts_with("planner `p` changed the worktree")
        );
        let reported = planner_guard_violations(&report, OperatorCheckout::Report, "planner `p`");
        assert!(!rules(&reported).contains(&"operator_checkout".to_owned()));
        assert!(
            planner_guard_violations(&GuardReport::default(), OperatorCheckout::Forbid, "p")
                .is_empty()
        );
    }
}
