//! The workflow drawn as an SVG inside the page: steps as boxes in the workflow's order,
//! routes as arrows labelled with their outcomes, the path the run took and its current step
//! marked. Drawn on the server, with presentation attributes only (no inline style, no script).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use super::html::escape;
use crate::artifacts::RunMetadata;
use crate::workflow::model::{RouteKey, Workflow};

const BOX_WIDTH: usize = 220;
const BOX_HEIGHT: usize = 34;
const ROW: usize = 58;
const LEFT: usize = 20;

/// The workflow the run started with, as its file is now (`None` when it cannot be read).
pub(super) fn load_workflow(metadata: &RunMetadata) -> Option<Workflow> {
    let path = Path::new(&metadata.workflow_path);
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        Path::new(&metadata.repo_root).join(path)
    };
    let known = crate::workflow::validate::KnownNames::default();
    crate::workflow::load::check_file(&path, &metadata.workflow_path, &known).workflow
}

/// A node of the drawing: a step (with its opcode) or the bare `STOP` routes name.
struct Node {
    id: String,
    kind: String,
}

/// The SVG. Without the workflow, the steps the run visited are drawn in order.
pub(super) fn draw(workflow: Option<&Workflow>, path: &[&str], current: Option<&str>) -> String {
    let (nodes, edges) = match workflow {
        Some(workflow) => model_of(workflow),
        None => visited_only(path),
    };
    let taken: BTreeSet<(&str, &str)> = path.windows(2).map(|pair| (pair[0], pair[1])).collect();
    let visited: BTreeSet<&str> = path.iter().copied().collect();
    let position = |id: &str| nodes.iter().position(|node| node.id == id);
    let width = LEFT + BOX_WIDTH + 60 + edges.len().min(40) * 14 + 160;
    let height = nodes.len() * ROW + 20;
    let mut svg = format!(
        "<svg class=\"graph\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"workflow graph\">\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" \
         markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#57606a\"/></marker></defs>"
    );
    for (number, (from, to, labels)) in edges.iter().enumerate() {
        let (Some(start), Some(end)) = (position(from), position(to)) else {
            continue;
        };
        let on_path = taken.contains(&(from.as_str(), to.as_str()));
        let colour = if on_path { "#0969da" } else { "#8c959f" };
        let stroke = if on_path { 2.5 } else { 1.2 };
        let y1 = 10 + start * ROW + BOX_HEIGHT / 2;
        let y2 = 10 + end * ROW + BOX_HEIGHT / 2;
        let x = LEFT + BOX_WIDTH;
        let out = x + 30 + (number % 40) * 14;
        let _ = write!(
            svg,
            "<path d=\"M{x},{y1} C{out},{y1} {out},{y2} {x},{y2}\" fill=\"none\" stroke=\"{colour}\" \
             stroke-width=\"{stroke}\" marker-end=\"url(#arrow)\"/>\
             <text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"{colour}\">{}</text>",
            out - 8,
            (y1 + y2) / 2,
            escape(&labels.join(", "))
        );
    }
    for (index, node) in nodes.iter().enumerate() {
        let y = 10 + index * ROW;
        let is_current = current == Some(node.id.as_str());
        let (fill, stroke, stroke_width) = match (is_current, visited.contains(node.id.as_str())) {
            (true, _) => ("#fff8c5", "#9a6700", 3),
            (false, true) => ("#ddf4ff", "#0969da", 2),
            (false, false) => ("#ffffff", "#8c959f", 1),
        };
        let _ = write!(
            svg,
            "<rect x=\"{LEFT}\" y=\"{y}\" width=\"{BOX_WIDTH}\" height=\"{BOX_HEIGHT}\" rx=\"5\" \
             fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"{stroke_width}\"/>\
             <text x=\"{}\" y=\"{}\" font-size=\"12\" font-weight=\"600\" fill=\"#1d1d1f\">{}</text>\
             <text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#57606a\">{}{}</text>",
            LEFT + 8,
            y + 15,
            escape(&node.id),
            LEFT + 8,
            y + 28,
            escape(&node.kind),
            if is_current { " — current" } else { "" }
        );
    }
    svg.push_str("</svg>");
    svg
}

type Edges = Vec<(String, String, Vec<String>)>;

fn model_of(workflow: &Workflow) -> (Vec<Node>, Edges) {
    let mut nodes: Vec<Node> = workflow
        .steps
        .iter()
        .map(|step| Node {
            id: step.id.value.as_str().to_owned(),
            kind: step.body.opcode().name().to_owned(),
        })
        .collect();
    let mut edges: Edges = Vec::new();
    for step in &workflow.steps {
        for (key, target) in &step.routes.entries {
            let label = match key.value {
                RouteKey::Outcome(outcome) => outcome.as_str().to_owned(),
                RouteKey::Wildcard => "*".to_owned(),
            };
            let (from, to) = (step.id.value.as_str(), target.value.as_str());
            match edges
                .iter_mut()
                .find(|(edge_from, edge_to, _)| edge_from == from && edge_to == to)
            {
                Some(edge) => edge.2.push(label),
                None => edges.push((from.to_owned(), to.to_owned(), vec![label])),
            }
        }
    }
    // Routes to `STOP` without a step of that name end the run.
    if edges.iter().any(|(_, to, _)| to == "STOP") && !nodes.iter().any(|node| node.id == "STOP") {
        nodes.push(Node {
            id: "STOP".to_owned(),
            kind: "end".to_owned(),
        });
    }
    (nodes, edges)
}

fn visited_only(path: &[&str]) -> (Vec<Node>, Edges) {
    let mut nodes: Vec<Node> = Vec::new();
    for step in path {
        if !nodes.iter().any(|node| node.id == *step) {
            nodes.push(Node {
                id: (*step).to_owned(),
                kind: "step".to_owned(),
            });
        }
    }
    let mut edges: Edges = Vec::new();
    for pair in path.windows(2) {
        if !edges
            .iter()
            .any(|(from, to, _)| from == pair[0] && to == pair[1])
        {
            edges.push((pair[0].to_owned(), pair[1].to_owned(), Vec::new()));
        }
    }
    (nodes, edges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_taken_and_the_current_step_are_marked() {
        let svg = draw(None, &["a", "b<x>", "a"], Some("a"));
        assert!(svg.contains("b&lt;x&gt;"), "{svg}");
        assert!(svg.contains("— current"));
        assert!(svg.contains("#0969da"));
        assert!(!svg.contains("<x>"));
    }
}
