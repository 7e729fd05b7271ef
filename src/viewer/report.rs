//! `report RUN_ID`: a run's page and all its visits as one HTML file with everything inline
//! (styles, the graph): opening it fetches nothing and runs no script.

use std::path::Path;

use super::ViewerError;
use super::html::{Delivery, page};
use super::records::RunView;
use super::run_page::Links;

/// The report of run `run_id` of the repository `repo`.
pub fn report_html(repo: &Path, run_id: &str) -> Result<String, ViewerError> {
    let run_dir = crate::kernel::run::find_run_dir(repo, run_id)?;
    let view = RunView::load(&run_dir, run_id);
    let mut body = super::run_page::body(&view, Links::Report);
    body.push_str("<h2>Visits in detail</h2>");
    for visit in &view.visits {
        body.push_str(&super::visit_page::body(
            &run_dir,
            run_id,
            &visit.step_id,
            visit.visit,
            Links::Report,
            view.is_active(),
        ));
    }
    Ok(page(&format!("Run {run_id}"), &body, Delivery::Report))
}
