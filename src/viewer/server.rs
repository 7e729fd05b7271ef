//! The HTTP server of `serve`: binding (loopback unless allowed otherwise), the routes, and
//! running each page's file reading off the async threads.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};

use super::ViewerError;
use super::html::{Delivery, escape, page};
use crate::artifacts::RunDir;

/// The default address: loopback only.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:8765";

/// How `serve` was asked to run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// `HOST:PORT` (port 0: any free one).
    pub address: String,
    /// Serve on an address other machines reach.
    pub allow_remote: bool,
    /// The repositories whose runs are shown (their main working trees).
    pub repos: Vec<PathBuf>,
    /// The program `resume` is run with when a decision asks to continue the run.
    pub program: Option<PathBuf>,
}

/// What every request handler shares.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) repos: Vec<PathBuf>,
    pub(super) token: String,
    pub(super) address: SocketAddr,
    pub(super) allow_remote: bool,
    pub(super) program: Option<PathBuf>,
}

impl Shared {
    /// The run directory of `run_id` in repository number `repo`, or the page saying there
    /// is none.
    pub(super) fn run(
        &self,
        repo: usize,
        run_id: &str,
    ) -> Result<(PathBuf, RunDir), Box<Response>> {
        let Some(root) = self.repos.get(repo) else {
            return Err(Box::new(not_found("no such repository")));
        };
        crate::kernel::run::find_run_dir(root, run_id)
            .map(|run_dir| (root.clone(), run_dir))
            .map_err(|error| Box::new(not_found(&error.to_string())))
    }
}

/// A bound server, not yet answering.
#[derive(Debug)]
pub struct Viewer {
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
}

impl Viewer {
    /// Listens on the address: refused for one other machines reach unless allowed.
    pub fn bind(options: ServeOptions) -> Result<Self, ViewerError> {
        let address = options
            .address
            .to_socket_addrs()
            .ok()
            .and_then(|mut addresses| addresses.next())
            .ok_or_else(|| ViewerError::BadAddress {
                addr: options.address.clone(),
            })?;
        if !address.ip().is_loopback() && !options.allow_remote {
            return Err(ViewerError::Remote { addr: address });
        }
        let listener =
            std::net::TcpListener::bind(address).map_err(|source| ViewerError::Bind {
                addr: options.address.clone(),
                source,
            })?;
        let address = listener.local_addr().map_err(ViewerError::Serve)?;
        listener.set_nonblocking(true).map_err(ViewerError::Serve)?;
        let shared = Shared {
            repos: options.repos,
            token: super::security::new_token()?,
            address,
            allow_remote: options.allow_remote,
            program: options.program,
        };
        Ok(Self {
            listener,
            shared: Arc::new(shared),
        })
    }

    /// The URL to open: it carries the access token.
    pub fn url(&self) -> String {
        format!(
            "http://{}/?token={}",
            self.shared.address, self.shared.token
        )
    }

    /// Whether other machines can reach it.
    pub fn is_remote(&self) -> bool {
        !self.shared.address.ip().is_loopback()
    }

    /// Answers until the process is stopped.
    pub fn run(self) -> Result<(), ViewerError> {
        // The process's one runtime: pages are read on its blocking threads, and what a
        // decision starts is supervised on it as in any other command.
        let runtime = crate::runner::runtime::shared().map_err(ViewerError::Serve)?;
        runtime.block_on(async move {
            let listener =
                tokio::net::TcpListener::from_std(self.listener).map_err(ViewerError::Serve)?;
            axum::serve(listener, router(self.shared))
                .await
                .map_err(ViewerError::Serve)
        })
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(runs))
        .route("/assets/viewer.css", get(style))
        .route("/assets/live.js", get(script))
        .route("/gates", get(gates))
        .route("/journal", get(journal))
        .route("/r/{repo}/{run}", get(run))
        .route("/r/{repo}/{run}/events", get(super::live::events))
        .route("/r/{repo}/{run}/visit/{step}/{visit}", get(visit))
        .route("/r/{repo}/{run}/file/{*path}", get(file))
        .route("/r/{repo}/{run}/gate", post(decide))
        .route("/r/{repo}/{run}/land", post(land))
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            super::security::guard,
        ))
        .with_state(shared)
}

/// A page that was not found.
pub(super) fn not_found(why: &str) -> Response {
    let body = format!("<h1>Not found</h1><p>{}</p>", escape(why));
    (
        StatusCode::NOT_FOUND,
        Html(page("Not found", &body, Delivery::Served { live: false })),
    )
        .into_response()
}

/// Runs `work` (which reads files) on a thread that may block.
async fn blocking(work: impl FnOnce() -> Response + Send + 'static) -> Response {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|_| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the page could not be made",
        )
            .into_response()
    })
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        super::html::STYLE,
    )
        .into_response()
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        super::live::SCRIPT,
    )
        .into_response()
}

async fn runs(
    State(shared): State<Arc<Shared>>,
    Query(filters): Query<super::runs_page::Filters>,
) -> Response {
    blocking(move || Html(super::runs_page::render(&shared.repos, &filters)).into_response()).await
}

async fn run(
    State(shared): State<Arc<Shared>>,
    Path((repo, run_id)): Path<(usize, String)>,
) -> Response {
    blocking(move || match shared.run(repo, &run_id) {
        Ok((_, run_dir)) => Html(super::run_page::served(repo, run_dir, &run_id)).into_response(),
        Err(response) => *response,
    })
    .await
}

async fn visit(
    State(shared): State<Arc<Shared>>,
    Path((repo, run_id, step, visit)): Path<(usize, String, String, u32)>,
) -> Response {
    blocking(move || match shared.run(repo, &run_id) {
        Ok((_, run_dir)) => super::visit_page::served(repo, &run_dir, &run_id, &step, visit),
        Err(response) => *response,
    })
    .await
}

async fn file(
    State(shared): State<Arc<Shared>>,
    Path((repo, run_id, path)): Path<(usize, String, String)>,
) -> Response {
    blocking(move || match shared.run(repo, &run_id) {
        Ok((_, run_dir)) => super::visit_page::raw_file(&run_dir, &path),
        Err(response) => *response,
    })
    .await
}

async fn gates(State(shared): State<Arc<Shared>>) -> Response {
    blocking(move || Html(super::gates::render(&shared.repos, None)).into_response()).await
}

async fn decide(
    State(shared): State<Arc<Shared>>,
    Path((repo, run_id)): Path<(usize, String)>,
    Form(form): Form<super::gates::DecisionForm>,
) -> Response {
    blocking(move || match shared.run(repo, &run_id) {
        Ok((root, _)) => {
            let told = super::gates::decide(&root, &run_id, &form, shared.program.as_deref());
            Html(super::gates::render(&shared.repos, Some(&told))).into_response()
        }
        Err(response) => *response,
    })
    .await
}

async fn land(
    State(shared): State<Arc<Shared>>,
    Path((repo, run_id)): Path<(usize, String)>,
) -> Response {
    blocking(move || match shared.run(repo, &run_id) {
        Ok((root, _)) => {
            let told = super::gates::land(&root, &run_id);
            Html(super::gates::render(&shared.repos, Some(&told))).into_response()
        }
        Err(response) => *response,
    })
    .await
}

async fn journal(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<super::journal_page::JournalQuery>,
) -> Response {
    blocking(move || Html(super::journal_page::render(&shared.repos, &query)).into_response()).await
}
