//! A diagnostic: one problem in one file at one line and column, with a hint.

use std::fmt::Write as _;

use serde::Serialize;

use super::yaml::Pos;

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The workflow cannot run.
    Error,
    /// The workflow runs, but probably not as meant.
    Warning,
}

/// One problem found in a workflow file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Diagnostic {
    /// The file, as given on the command line.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// Error or warning.
    pub severity: Severity,
    /// Stable identifier of the rule (`unknown-key`, `missing-route`, …).
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Diagnostic {
    /// Renders `FILE:LINE:COL: error: message` and, when there is one, a hint line.
    pub fn render(&self, color: bool) -> String {
        let (bold, red, yellow, cyan, reset) = if color {
            ("\x1b[1m", "\x1b[1;31m", "\x1b[1;33m", "\x1b[36m", "\x1b[0m")
        } else {
            ("", "", "", "", "")
        };
        let (tone, label) = match self.severity {
            Severity::Error => (red, "error"),
            Severity::Warning => (yellow, "warning"),
        };
        let mut text = format!(
            "{bold}{}:{}:{}{reset}: {tone}{label}{reset}: {} [{}]\n",
            self.file, self.line, self.column, self.message, self.code
        );
        if let Some(hint) = &self.hint {
            let _ = writeln!(text, "  {cyan}hint{reset}: {hint}");
        }
        text
    }
}

/// Collects diagnostics for one file while decoding and validating it.
#[derive(Debug)]
pub struct Diagnostics {
    file: String,
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// An empty collection for `file`.
    pub fn new(file: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            items: Vec::new(),
        }
    }

    /// Records an error.
    pub fn error(
        &mut self,
        pos: Pos,
        code: &'static str,
        message: impl Into<String>,
    ) -> Hinted<'_> {
        self.push(pos, Severity::Error, code, message.into())
    }

    /// Records a warning.
    pub fn warning(
        &mut self,
        pos: Pos,
        code: &'static str,
        message: impl Into<String>,
    ) -> Hinted<'_> {
        self.push(pos, Severity::Warning, code, message.into())
    }

    fn push(
        &mut self,
        pos: Pos,
        severity: Severity,
        code: &'static str,
        message: String,
    ) -> Hinted<'_> {
        self.items.push(Diagnostic {
            file: self.file.clone(),
            line: pos.line,
            column: pos.column,
            severity,
            code,
            message,
            hint: None,
        });
        let last = self.items.len() - 1;
        Hinted {
            diagnostic: &mut self.items[last],
        }
    }

    /// True when any error (not warning) was recorded.
    pub fn has_errors(&self) -> bool {
        self.items
            .iter()
            .any(|item| item.severity == Severity::Error)
    }

    /// The diagnostics sorted by position, then code.
    pub fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.items.sort_by(|left, right| {
            (left.line, left.column, left.code).cmp(&(right.line, right.column, right.code))
        });
        self.items
    }
}

/// A just-recorded diagnostic, to attach a hint to.
#[derive(Debug)]
pub struct Hinted<'a> {
    diagnostic: &'a mut Diagnostic,
}

impl Hinted<'_> {
    /// Attaches a hint.
    pub fn hint(self, hint: impl Into<String>) {
        self.diagnostic.hint = Some(hint.into());
    }

    /// Attaches "did you mean `X`?" when a near candidate exists, else the fallback hint.
    pub fn suggest<'c>(
        self,
        typed: &str,
        candidates: impl IntoIterator<Item = &'c str>,
        fallback: impl Into<String>,
    ) {
        match nearest(typed, candidates) {
            Some(best) => self.hint(format!("did you mean `{best}`?")),
            None => self.hint(fallback),
        }
    }
}

/// The candidate nearest to `typed`, when it is near enough to be a likely typo.
pub fn nearest<'c>(typed: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    candidates
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(typed, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|left, right| left.0.total_cmp(&right.0))
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_finds_typos_but_not_strangers() {
        assert_eq!(
            nearest("entry_stp", ["entry_step", "steps"]),
            Some("entry_step")
        );
        assert_eq!(
            nearest("allowed_next", ["allowed_next_steps", "routes"]),
            Some("allowed_next_steps")
        );
        assert_eq!(nearest("zzz", ["entry_step", "steps"]), None);
    }

    #[test]
    fn render_shows_position_code_and_hint() {
        let mut diagnostics = Diagnostics::new("wf.yaml");
        diagnostics
            .error(Pos::new(3, 5), "unknown-key", "unknown key `rotes`")
            .hint("did you mean `routes`?");
        let rendered = diagnostics.into_sorted()[0].render(false);
        assert_eq!(
            rendered,
            "wf.yaml:3:5: error: unknown key `rotes` [unknown-key]\n  hint: did you mean `routes`?\n"
        );
    }
}
