//! kiln-serve: an OpenAI-compatible HTTP server for kiln-llm models, with continuous batching.
//!
//! - [`http`]: the axum routes (`POST /v1/chat/completions`, `POST /v1/completions`, streaming as
//!   server-sent events or not; `GET /v1/models`, `/health`, `/metrics`), request checks
//!   (OpenAI-style error bodies), the body's size and time bounds, stop strings.
//! - [`gate`]: what every request passes first: the `Host` check, CORS and `Origin`, the JSON
//!   content type, the API key ([`auth`]).
//! - [`conn`]: the accept loop: the connection limit, header and idle timeouts.
//! - [`scheduler`]: one thread that owns the model and runs every active sequence through one
//!   batched forward pass per token, with a bounded queue (429 past it) and a paged KV pool.
//!
//! `kiln serve` (kiln-cli) loads the model and calls [`serve_with`] (its HTTP flags: [`HttpArgs`]).

pub mod api;
pub mod auth;
pub mod conn;
pub mod gate;
pub mod http;
pub mod metrics;
mod options;
pub mod scheduler;

use auth::ApiKeys;
use kiln_llm::{ChatTemplate, Model, Tokenizer};
use metrics::Metrics;
pub use options::{HttpArgs, HttpOptions};
use scheduler::{Scheduler, SchedulerOptions};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// A loaded model and what serving it needs.
pub struct Engine {
    pub model: Model,
    pub tokenizer: Tokenizer,
    /// `None`: a base model (chat requests get a 400).
    pub template: Option<ChatTemplate>,
    pub stop_tokens: Vec<u32>,
    /// The id `/v1/models` lists.
    pub model_name: String,
}

pub struct ServeOptions {
    pub host: String,
    /// 0 picks a free port (printed when listening).
    pub port: u16,
    pub api_key: Option<String>,
    pub scheduler: SchedulerOptions,
    /// How long running streams may go on after SIGINT/SIGTERM.
    pub shutdown_grace: Duration,
}

/// [`serve_with`] with the default HTTP options.
pub fn serve(engine: Engine, opts: ServeOptions) -> Result<(), String> {
    serve_with(engine, opts, HttpOptions::default())
}

/// Binds `opts.host:opts.port`, takes the keys of `KILN_API_KEY` (unless `http` has them already)
/// and runs [`serve_on`].
pub fn serve_with(engine: Engine, opts: ServeOptions, mut http: HttpOptions) -> Result<(), String> {
    let listener = bind(&opts.host, opts.port)?;
    if http.env_api_key.is_none() {
        http.env_api_key = std::env::var(auth::API_KEY_VAR).ok();
    }
    serve_on(listener, engine, opts, http)
}

/// The listening socket for `host:port`, with the error `kiln serve` prints: bind it before the
/// model loads, so that a busy port fails at once, then hand it to [`serve_on`].
pub fn bind(host: &str, port: u16) -> Result<std::net::TcpListener, String> {
    let addr = format!("{host}:{port}");
    std::net::TcpListener::bind(&addr).map_err(|e| format!("cannot listen on {addr}: {e}"))
}

/// Serves `engine` on `listener` until SIGINT or SIGTERM, then stops accepting, lets running
/// answers finish (at most `shutdown_grace`) and returns `Ok`. Prints `kiln serve: listening on
/// http://ADDR` on stderr once serving. `opts.host` and `opts.port` are not used (the listener is
/// bound); a key in `opts.api_key` joins `http`'s.
pub fn serve_on(
    listener: std::net::TcpListener,
    engine: Engine,
    opts: ServeOptions,
    http: HttpOptions,
) -> Result<(), String> {
    let keys = ApiKeys::gather(
        &opts.api_key.iter().chain(&http.api_keys).cloned().collect::<Vec<_>>(),
        http.api_key_file.as_deref(),
        http.env_api_key.as_deref(),
    )?;
    let local: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    if keys.is_empty() && !local.ip().is_loopback() {
        eprintln!(
            "kiln serve: warning: listening on {} without an API key: anyone who can reach it can use it \
             (set {} or --api-key-file)",
            local.ip(),
            auth::API_KEY_VAR
        );
    }
    let gate = gate::Gate::new(keys, &http, local.ip().is_loopback())?;
    let limits = http.limits();
    let metrics = Arc::new(Metrics::default());
    let max_context = engine.model.max_context();
    let scheduler = Scheduler::start(engine.model, opts.scheduler.clone(), metrics.clone())?;
    let app = Arc::new(http::App {
        scheduler,
        tokenizer: Arc::new(engine.tokenizer),
        template: engine.template,
        stop_tokens: engine.stop_tokens,
        model_name: engine.model_name,
        gate,
        max_context,
        max_body_bytes: http.max_body_bytes,
        body_timeout: http.body_timeout,
        tokenizing: tokio::sync::Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get())),
        metrics,
        next_id: AtomicU64::new(0),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let result = rt.block_on(run(app.clone(), listener, limits, opts.shutdown_grace));
    app.scheduler.begin_shutdown(Duration::ZERO);
    app.scheduler.join();
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn run(
    app: Arc<http::App>,
    listener: std::net::TcpListener,
    limits: conn::Limits,
    grace: Duration,
) -> Result<(), String> {
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
    let local: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("kiln serve: listening on http://{local}");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut server = tokio::spawn(conn::serve(listener, http::router(app.clone()), limits, stop_rx));
    tokio::select! {
        r = &mut server => return r.map_err(|e| format!("server task failed: {e}")),
        _ = signal() => {}
    }
    eprintln!("kiln serve: shutting down (running answers get {} s to finish)", grace.as_secs_f64());
    app.scheduler.begin_shutdown(grace);
    let _ = stop_tx.send(true);
    // After the signal, connections get the grace period and a little more to close.
    match tokio::time::timeout(grace + Duration::from_secs(2), server).await {
        Ok(Ok(())) | Err(_) => Ok(()),
        Ok(Err(e)) => Err(format!("server task failed: {e}")),
    }
}

/// Resolves at SIGINT (Ctrl-C) or, on Unix, SIGTERM.
async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
