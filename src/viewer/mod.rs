//! The run viewer: `serve` answers a browser with the runs of one or more repositories, a run
//! (its workflow drawn, its visits, live while it runs), a visit's evidence, the gates that wait
//! and the journal; `report` writes one run as a single self-contained HTML file.
//!
//! Everything an agent wrote is hostile text: every page escapes it, a Content-Security-Policy
//! forbids inline scripts, files are read only from inside run directories and never through
//! a link, and nothing changes without the server's token and a same-origin request.
//! The pages are drawn from the typed run records (`crate::artifacts`) and the views the
//! kernel already assembles (run status, journal, step lines, gate decisions, landing).

mod files;
mod gates;
mod graph_svg;
mod html;
mod journal_page;
mod live;
mod records;
mod report;
mod run_page;
mod runs_page;
mod security;
mod server;
mod visit_page;

pub use report::report_html;
pub use server::{DEFAULT_ADDRESS, ServeOptions, Viewer};

use std::net::SocketAddr;

/// The viewer could not start, stopped, or a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ViewerError {
    /// The address could not be listened on.
    #[error("failed to listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// An address other than a loopback one without `--allow-remote`.
    #[error("refusing to listen on {addr}: it is reachable from other machines")]
    Remote {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The address is not `HOST:PORT`.
    #[error("`{addr}` is not an address to listen on (HOST:PORT)")]
    BadAddress {
        /// What was given.
        addr: String,
    },
    /// The random access token could not be made.
    #[error("failed to make the viewer's access token: {0}")]
    Token(String),
    /// The server's runtime could not start, or the server stopped with an error.
    #[error("the viewer failed: {0}")]
    Serve(std::io::Error),
    /// The run of a report could not be read.
    #[error(transparent)]
    Run(Box<crate::kernel::run::RunError>),
}

impl From<crate::kernel::run::RunError> for ViewerError {
    fn from(error: crate::kernel::run::RunError) -> Self {
        ViewerError::Run(Box::new(error))
    }
}

impl ViewerError {
    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            ViewerError::Bind { .. } => Some(
                "pick another port with --addr 127.0.0.1:PORT (port 0 picks a free one)".to_owned(),
            ),
            ViewerError::Remote { .. } => Some(
                "listen on 127.0.0.1 (the default), or pass --allow-remote to serve other \
                 machines: anyone who can reach the port and has the token can decide gates"
                    .to_owned(),
            ),
            ViewerError::BadAddress { .. } => {
                Some("give an address such as 127.0.0.1:8080".to_owned())
            }
            ViewerError::Token(_) | ViewerError::Serve(_) => None,
            ViewerError::Run(error) => error.hint(),
        }
    }

    /// Whether the command line asked for something that cannot be done.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            ViewerError::Remote { .. } | ViewerError::BadAddress { .. }
        ) || matches!(self, ViewerError::Run(error) if error.is_usage())
    }
}
