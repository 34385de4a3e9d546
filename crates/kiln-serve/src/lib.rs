//! kiln-serve: an OpenAI-compatible HTTP server for kiln-llm models, with continuous batching.
//!
//! - [`http`]: the axum routes (`POST /v1/chat/completions`, `POST /v1/completions`, streaming as
//!   server-sent events or not; `GET /v1/models`, `/health`, `/metrics`), the API key, request
//!   checks (OpenAI-style 400 bodies), stop strings.
//! - [`scheduler`]: one thread that owns the model and runs every active sequence through one
//!   batched forward pass per token, with a bounded queue (429 past it) and a paged KV pool.
//!
//! `kiln serve` (kiln-cli) loads the model and calls [`serve`].

pub mod api;
pub mod http;
pub mod metrics;
pub mod scheduler;

use kiln_llm::{ChatTemplate, Model, Tokenizer};
use metrics::Metrics;
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

/// Serves `engine` until SIGINT or SIGTERM, then stops accepting, lets running answers finish
/// (at most `shutdown_grace`) and returns `Ok`. Prints `kiln serve: listening on http://ADDR` on
/// stderr once the port is bound.
pub fn serve(engine: Engine, opts: ServeOptions) -> Result<(), String> {
    let metrics = Arc::new(Metrics::default());
    let max_context = engine.model.max_context();
    let scheduler = Scheduler::start(engine.model, opts.scheduler.clone(), metrics.clone())?;
    let app = Arc::new(http::App {
        scheduler,
        tokenizer: Arc::new(engine.tokenizer),
        template: engine.template,
        stop_tokens: engine.stop_tokens,
        model_name: engine.model_name,
        api_key: opts.api_key.clone(),
        max_context,
        metrics,
        next_id: AtomicU64::new(0),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let result = rt.block_on(run(app.clone(), &opts));
    app.scheduler.begin_shutdown(Duration::ZERO);
    app.scheduler.join();
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn run(app: Arc<http::App>, opts: &ServeOptions) -> Result<(), String> {
    let addr = format!("{}:{}", opts.host, opts.port);
    let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("kiln serve: listening on http://{local}");
    let grace = opts.shutdown_grace;
    let app2 = app.clone();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        signal().await;
        eprintln!("kiln serve: shutting down (running answers get {} s to finish)", grace.as_secs_f64());
        app2.scheduler.begin_shutdown(grace);
        let _ = done_tx.send(());
    };
    let server = axum::serve(listener, http::router(app)).with_graceful_shutdown(shutdown);
    let mut server = tokio::spawn(async move { server.await });
    tokio::select! {
        r = &mut server => {
            return match r {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(format!("server error: {e}")),
                Err(e) => Err(format!("server task failed: {e}")),
            }
        }
        _ = done_rx => {}
    }
    // After the signal, connections get the grace period and a little more to close.
    match tokio::time::timeout(grace + Duration::from_secs(2), server).await {
        Ok(Ok(Ok(()))) | Err(_) => Ok(()),
        Ok(Ok(Err(e))) => Err(format!("server error: {e}")),
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
