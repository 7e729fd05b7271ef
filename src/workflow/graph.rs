//! Drawing a workflow's steps and routes as Mermaid or Graphviz DOT text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::model::{RouteKey, StepBody, StopOutcome, Workflow};

/// The graph formats `graph` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphFormat {
    /// A Mermaid flowchart.
    Mermaid,
    /// A Graphviz digraph.
    Dot,
}

/// One drawn edge: the route keys from one step to one target, merged.
struct Edge<'w> {
    from: &'w str,
    to: &'w str,
    labels: Vec<String>,
}

fn edges(workflow: &Workflow) -> Vec<Edge<'_>> {
    let mut edges = Vec::new();
    for step in &workflow.steps {
        let mut by_target: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        let mut order: Vec<&str> = Vec::new();
        for (key, target) in &step.routes.entries {
            let label = match key.value {
                RouteKey::Outcome(outcome) => outcome.as_str().to_owned(),
                RouteKey::Wildcard => "*".to_owned(),
            };
            let target = target.value.as_str();
            if !by_target.contains_key(target) {
                order.push(target);
            }
            by_target.entry(target).or_default().push(label);
        }
        for target in order {
            let labels = by_target.remove(target).unwrap_or_default();
            edges.push(Edge {
                from: step.id.value.as_str(),
                to: target,
                labels,
            });
        }
    }
    edges
}

/// A node id safe in both formats (ids may contain `.` and `-`).
fn node_id(step_id: &str) -> String {
    let safe: String = step_id
        .chars()
        .map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '_' })
        .collect();
    format!("s_{safe}")
}

fn node_label(body: &StepBody) -> String {
    match body {
        StepBody::Stop(stop) if stop.outcome == StopOutcome::Failure => "STOP (failure)".to_owned(),
        other => other.opcode().name().to_owned(),
    }
}

/// Renders the workflow.
pub fn render_graph(workflow: &Workflow, format: GraphFormat) -> String {
    match format {
        GraphFormat::Mermaid => mermaid(workflow),
        GraphFormat::Dot => dot(workflow),
    }
}

fn uses_bare_stop(workflow: &Workflow) -> bool {
    workflow.step("STOP").is_none()
        && workflow.steps.iter().any(|step| {
            step.routes
                .entries
                .iter()
                .any(|(_, target)| target.value.is_stop())
        })
}

fn mermaid(workflow: &Workflow) -> String {
    let mut text = format!(
        "%% {} v{}\nflowchart TD\n",
        workflow.workflow_id.value, workflow.version.value
    );
    for step in &workflow.steps {
        let id = node_id(step.id.value.as_str());
        let label = format!(
            "{}<br/><small>{}</small>",
            step.id.value,
            node_label(&step.body)
        );
        let shape = match step.body {
            StepBody::Stop(_) => format!("{id}([\"{label}\"])"),
            StepBody::Evaluate(_) | StepBody::Gate(_) => format!("{id}{{\"{label}\"}}"),
            _ => format!("{id}[\"{label}\"]"),
        };
        let _ = writeln!(text, "    {shape}");
    }
    if uses_bare_stop(workflow) {
        let _ = writeln!(text, "    {}((STOP))", node_id("STOP"));
    }
    let _ = writeln!(
        text,
        "    start((start)) --> {}",
        node_id(workflow.entry_step.value.as_str())
    );
    for edge in edges(workflow) {
        let _ = writeln!(
            text,
            "    {} -->|{}| {}",
            node_id(edge.from),
            edge.labels.join(", "),
            node_id(edge.to)
        );
    }
    text
}

fn dot(workflow: &Workflow) -> String {
    let mut text = format!(
        "digraph \"{}\" {{\n    rankdir=TB;\n    node [fontname=\"Helvetica\"];\n    start [shape=point];\n",
        workflow.workflow_id.value
    );
    for step in &workflow.steps {
        let shape = match step.body {
            StepBody::Stop(_) => "doublecircle",
            StepBody::Evaluate(_) | StepBody::Gate(_) => "diamond",
            _ => "box",
        };
        let _ = writeln!(
            text,
            "    {} [label=\"{}\\n{}\", shape={shape}];",
            node_id(step.id.value.as_str()),
            step.id.value,
            node_label(&step.body)
        );
    }
    if uses_bare_stop(workflow) {
        let _ = writeln!(
            text,
            "    {} [label=\"STOP\", shape=doublecircle];",
            node_id("STOP")
        );
    }
    let _ = writeln!(
        text,
        "    start -> {};",
        node_id(workflow.entry_step.value.as_str())
    );
    for edge in edges(workflow) {
        let _ = writeln!(
            text,
            "    {} -> {} [label=\"{}\"];",
            node_id(edge.from),
            node_id(edge.to),
            edge.labels.join(", ")
        );
    }
    text.push_str("}\n");
    text
}
