//! The HTTP layer (axum): routes, request checks, the body's size and time bounds, prompts (the
//! chat template as `kiln chat` renders it, tokenized on tokio's blocking pool so that long prompts
//! never stall other connections), and turning the scheduler's token events into OpenAI JSON or
//! server-sent events, with stop strings found in the decoded text.

use crate::api::{self, ApiError, ChatRequest, CompletionRequest, Settings};
use crate::gate::{self, Gate};
use crate::metrics::Metrics;
use crate::scheduler::{Event, Finish, GenRequest, Rejected, Scheduler};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use kiln_llm::{ChatTemplate, Message, SamplingParams, Tokenizer};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::UnboundedReceiver;

/// What every handler shares.
pub struct App {
    pub scheduler: Scheduler,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    pub stop_tokens: Vec<u32>,
    pub model_name: String,
    pub gate: Gate,
    pub max_context: usize,
    /// Past it a body gets 413 (this bounds the prompt before it is tokenized).
    pub max_body_bytes: usize,
    /// The whole body must arrive within it from the headers (else 408).
    pub body_timeout: Duration,
    /// Prompts rendered and tokenized at once (one per core): a flood of long prompts waits here
    /// instead of taking every thread of the blocking pool.
    pub tokenizing: tokio::sync::Semaphore,
    pub metrics: Arc<Metrics>,
    pub next_id: AtomicU64,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat).fallback(method_not_allowed_post))
        .route("/v1/completions", post(completions).fallback(method_not_allowed_post))
        .route("/v1/models", get(models).fallback(method_not_allowed_get))
        .route("/health", get(health).fallback(method_not_allowed_get))
        .route("/metrics", get(metrics).fallback(method_not_allowed_get))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(app.clone(), gate::check))
        .with_state(app)
}

/// The error as a response: its status and OpenAI-style JSON body; a 429 says when to retry.
pub fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, Json(e.body())).into_response();
    if e.status == 429 {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

fn method_not_allowed(allow: &'static str) -> Response {
    let mut resp = error_response(&ApiError {
        status: 405,
        message: format!("this endpoint answers {allow} only"),
        kind: "invalid_request_error",
        param: None,
        code: Some("method_not_allowed"),
    });
    resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

async fn method_not_allowed_post() -> Response {
    method_not_allowed("POST")
}

async fn method_not_allowed_get() -> Response {
    method_not_allowed("GET, HEAD")
}

/// The request body, at most `app.max_body_bytes` (413) and whole within `app.body_timeout` of
/// the headers (408). Both close the connection (the rest of the body is never read).
async fn read_body(app: &App, headers: &HeaderMap, body: Body) -> Result<Bytes, Response> {
    let limit = app.max_body_bytes;
    let close = |e: ApiError| {
        let mut resp = error_response(&e);
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        resp
    };
    let too_large = || {
        close(ApiError {
            status: 413,
            message: format!("the request body is larger than {limit} bytes (see --max-body-bytes)"),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_too_large"),
        })
    };
    let announced = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buf = Vec::with_capacity(announced.map_or(0, |n| n as usize));
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| error_response(&ApiError::bad_request(format!("reading the body: {e}"), None)))?;
            if buf.len() + chunk.len() > limit {
                return Err(too_large());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(buf))
    };
    match tokio::time::timeout(app.body_timeout, read).await {
        Ok(r) => r,
        Err(_) => Err(close(ApiError {
            status: 408,
            message: format!(
                "the request body did not arrive within {} s (see --body-timeout)",
                app.body_timeout.as_secs_f64()
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_timeout"),
        })),
    }
}

async fn not_found() -> Response {
    error_response(&ApiError {
        status: 404,
        message: "no such endpoint (kiln serves /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics)"
            .into(),
        kind: "invalid_request_error",
        param: None,
        code: None,
    })
}

async fn health() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render()).into_response()
}

async fn models(State(app): State<Arc<App>>) -> Response {
    let r = Json(json!({
        "object": "list",
        "data": [{"id": app.model_name, "object": "model", "created": unix_now(), "owned_by": "kiln"}],
    }))
    .into_response();
    app.metrics.count_request("/v1/models", r.status().as_u16());
    r
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let r = match read_body(&app, &headers, body).await {
        Ok(body) => handle(&app, body, Kind::Chat).await.unwrap_or_else(|e| error_response(&e)),
        Err(r) => r,
    };
    app.metrics.count_request("/v1/chat/completions", r.status().as_u16());
    r
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let r = match read_body(&app, &headers, body).await {
        Ok(body) => handle(&app, body, Kind::Completion).await.unwrap_or_else(|e| error_response(&e)),
        Err(r) => r,
    };
    app.metrics.count_request("/v1/completions", r.status().as_u16());
    r
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The prompt's token ids and the request's settings.
fn prepare(app: &App, body: &[u8], kind: Kind) -> Result<(Vec<u32>, Settings), ApiError> {
    let internal = |e: kiln_llm::LlmError| ApiError::bad_request(e.to_string(), None);
    let (ids, settings) = match kind {
        Kind::Chat => {
            let r: ChatRequest = api::parse(body)?;
            let settings = r.common.settings()?;
            let template = app.template.as_ref().ok_or_else(|| {
                ApiError::bad_request("this model has no chat template: use /v1/completions", Some("messages"))
            })?;
            if r.messages.is_empty() {
                return Err(ApiError::bad_request("messages must not be empty", Some("messages")));
            }
            let messages = r
                .messages
                .iter()
                .map(|m| Ok(Message::new(&m.role, &m.text()?)))
                .collect::<Result<Vec<_>, ApiError>>()?;
            let text = template.render(&messages, true).map_err(internal)?;
            (app.tokenizer.encode(&text, false).map_err(internal)?, settings)
        }
        Kind::Completion => {
            let r: CompletionRequest = api::parse(body)?;
            let settings = r.common.settings()?;
            (app.tokenizer.encode(r.prompt.text()?, true).map_err(internal)?, settings)
        }
    };
    if ids.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty", Some("prompt")));
    }
    // A sequence's positions must fit the context and the whole KV pool.
    let room = app.max_context.min(app.scheduler.pool_positions());
    if ids.len() >= room {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::bad_request(
                format!("the prompt has {} tokens; the context holds {room} (one is needed for the answer)", ids.len()),
                Some("messages"),
            )
        });
    }
    Ok((ids, settings))
}

async fn handle(app: &Arc<App>, body: Bytes, kind: Kind) -> Result<Response, ApiError> {
    // Rendering and tokenizing a long prompt takes long: off the HTTP threads.
    let slot = app.tokenizing.acquire().await.map_err(|e| server_error(e.to_string()))?;
    let app2 = app.clone();
    let (prompt, settings) = tokio::task::spawn_blocking(move || prepare(&app2, &body, kind))
        .await
        .map_err(|e| server_error(format!("preparing the prompt failed: {e}")))??;
    drop(slot);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let prompt_len = prompt.len();
    let req = GenRequest {
        max_tokens: settings.max_tokens.unwrap_or(app.max_context).min(app.max_context - prompt_len),
        prompt,
        sampling: SamplingParams {
            temperature: settings.temperature,
            top_k: settings.top_k,
            top_p: settings.top_p,
            min_p: settings.min_p,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
        },
        seed: settings.seed,
        stop_tokens: app.stop_tokens.clone(),
        events: tx,
    };
    app.scheduler.submit(req).map_err(|r| match r {
        Rejected::QueueFull => ApiError {
            status: 429,
            message: "the server is busy (the request queue is full): retry later".into(),
            kind: "rate_limit_error",
            param: None,
            code: Some("queue_full"),
        },
        Rejected::Unavailable => ApiError {
            status: 503,
            message: "the server is shutting down".into(),
            kind: "server_error",
            param: None,
            code: None,
        },
    })?;
    app.metrics.prompt_tokens_total.fetch_add(prompt_len as u64, Ordering::Relaxed);
    let id = app.next_id.fetch_add(1, Ordering::Relaxed);
    let meta = Meta {
        id: match kind {
            Kind::Chat => format!("chatcmpl-kiln-{id}"),
            Kind::Completion => format!("cmpl-kiln-{id}"),
        },
        created: unix_now(),
        model: app.model_name.clone(),
        kind,
        include_usage: settings.include_usage,
    };
    let mut out = Output::new(rx, app.tokenizer.clone(), prompt_len, settings.stop.clone());
    // Wait for the answer to start (its first event), so that a request refused while it waited in
    // the queue (the server shutting down) gets 503 and not a 200 that breaks off.
    out.start().await?;
    if settings.stream {
        Ok(stream(meta, out).into_response())
    } else {
        whole(meta, out).await
    }
}

struct Meta {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    include_usage: bool,
}

impl Meta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }
    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({"id": self.id, "object": self.object(chunk), "created": self.created, "model": self.model, "choices": choices})
    }
    /// One streamed choice: text (or the role) and the finish reason.
    fn chunk(&self, text: Option<&str>, finish: Option<Finish>, first: bool) -> Value {
        let finish = finish.map(Finish::as_str);
        let choice = match self.kind {
            Kind::Chat => {
                let delta = match (first, text) {
                    (true, _) => json!({"role": "assistant", "content": ""}),
                    (false, Some(t)) => json!({"content": t}),
                    (false, None) => json!({}),
                };
                json!({"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null})
            }
            Kind::Completion => {
                json!({"index": 0, "text": text.unwrap_or(""), "finish_reason": finish, "logprobs": null})
            }
        };
        self.envelope(true, json!([choice]))
    }
}

fn server_error(message: String) -> ApiError {
    ApiError { status: 500, message, kind: "server_error", param: None, code: None }
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// What the answer does next.
enum Step {
    Text(String),
    Finished { finish: Finish, prompt_tokens: usize, completion_tokens: usize },
    Failed(String),
}

/// Decodes a request's token events into text, cutting it at the first stop string (and holding
/// back text that may be the start of one).
struct Output {
    rx: Option<UnboundedReceiver<Event>>,
    tok: Arc<Tokenizer>,
    prompt_tokens: usize,
    stops: Vec<String>,
    ids: Vec<u32>,
    /// Bytes of the decoded ids already in `text`.
    printed: usize,
    /// The answer so far, and how much of it was handed out.
    text: String,
    sent: usize,
    end: Option<Step>,
    /// An event received by [`Output::start`], not yet handled.
    pending: Option<Event>,
}

impl Output {
    fn new(rx: UnboundedReceiver<Event>, tok: Arc<Tokenizer>, prompt_tokens: usize, stops: Vec<String>) -> Output {
        Output {
            rx: Some(rx),
            tok,
            prompt_tokens,
            stops,
            ids: vec![],
            printed: 0,
            text: String::new(),
            sent: 0,
            end: None,
            pending: None,
        }
    }

    /// Waits for the first event: a refusal becomes a 503.
    async fn start(&mut self) -> Result<(), ApiError> {
        let Some(rx) = self.rx.as_mut() else { return Ok(()) };
        match rx.recv().await {
            Some(Event::Refused(message)) => {
                Err(ApiError { status: 503, message, kind: "server_error", param: None, code: None })
            }
            ev => {
                self.pending = ev;
                if self.pending.is_none() {
                    self.end = Some(Step::Failed("the scheduler stopped".into()));
                }
                Ok(())
            }
        }
    }

    /// The next piece of text, or the end. After the end, `None`.
    async fn next(&mut self) -> Option<Step> {
        loop {
            if let Some(end) = self.end.take() {
                // Text held back (a possible stop string that did not come) goes out first.
                if self.sent < self.text.len() && matches!(end, Step::Finished { .. }) {
                    let rest = self.text[self.sent..].to_string();
                    self.sent = self.text.len();
                    self.end = Some(end);
                    return Some(Step::Text(rest));
                }
                self.rx = None;
                return Some(end);
            }
            let ev = match self.pending.take() {
                Some(ev) => Some(ev),
                None => self.rx.as_mut()?.recv().await,
            };
            match ev {
                None => self.end = Some(Step::Failed("the scheduler stopped".into())),
                Some(Event::Error(e) | Event::Refused(e)) => self.end = Some(Step::Failed(e)),
                Some(Event::Done { finish, prompt_tokens, completion_tokens }) => {
                    self.end = Some(Step::Finished { finish, prompt_tokens, completion_tokens })
                }
                Some(Event::Token(id)) => {
                    // As `kiln_llm::TokenStream` (what `kiln generate` prints): the new text once the
                    // decoded ids do not end in an incomplete character.
                    self.ids.push(id);
                    let Ok(text) = self.tok.decode(&self.ids, true) else { continue };
                    if text.ends_with('\u{FFFD}') || text.len() <= self.printed || !text.is_char_boundary(self.printed)
                    {
                        continue;
                    }
                    let from = self.text.len();
                    self.text.push_str(&text[self.printed..]);
                    self.printed = text.len();
                    if let Some(at) = api::find_stop(&self.text, from, &self.stops) {
                        self.text.truncate(at);
                        // Dropping the receiver frees the sequence at the next token boundary.
                        self.rx = None;
                        self.end = Some(Step::Finished {
                            finish: Finish::Stop,
                            prompt_tokens: self.prompt_tokens,
                            completion_tokens: self.ids.len(),
                        });
                        continue;
                    }
                    let upto = self.text.len() - api::held_back(&self.text, &self.stops);
                    if upto > self.sent && self.text.is_char_boundary(upto) {
                        let piece = self.text[self.sent..upto].to_string();
                        self.sent = upto;
                        return Some(Step::Text(piece));
                    }
                }
            }
        }
    }
}

/// A non-streaming answer: everything collected, then one JSON body.
async fn whole(meta: Meta, mut out: Output) -> Result<Response, ApiError> {
    let mut text = String::new();
    loop {
        match out.next().await {
            Some(Step::Text(t)) => text.push_str(&t),
            Some(Step::Finished { finish, prompt_tokens, completion_tokens }) => {
                let choice = match meta.kind {
                    Kind::Chat => {
                        json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish.as_str(), "logprobs": null})
                    }
                    Kind::Completion => {
                        json!({"index": 0, "text": text, "finish_reason": finish.as_str(), "logprobs": null})
                    }
                };
                let mut body = meta.envelope(false, json!([choice]));
                body["usage"] = usage(prompt_tokens, completion_tokens);
                return Ok(Json(body).into_response());
            }
            Some(Step::Failed(e)) => return Err(server_error(e)),
            None => return Err(server_error("the answer ended without a finish".into())),
        }
    }
}

enum Phase {
    Start,
    Body,
    Usage(usize, usize),
    Done,
    End,
}

/// A streaming answer as server-sent events: a first chunk (the role), text chunks, a chunk with
/// the finish reason, the usage chunk when asked for, and `[DONE]`. The stream is dropped when the
/// client goes away, and with it the receiver: the scheduler frees the sequence.
fn stream(meta: Meta, out: Output) -> Sse<impl futures_util::Stream<Item = Result<sse::Event, Infallible>>> {
    let state = (meta, out, Phase::Start);
    let s = futures_util::stream::unfold(state, |(meta, mut out, phase)| async move {
        let data = |v: Value| sse::Event::default().data(v.to_string());
        match phase {
            Phase::Start => {
                let ev = match meta.kind {
                    Kind::Chat => data(meta.chunk(None, None, true)),
                    Kind::Completion => sse::Event::default().comment("kiln"),
                };
                Some((Ok(ev), (meta, out, Phase::Body)))
            }
            Phase::Body => match out.next().await {
                Some(Step::Text(t)) => Some((Ok(data(meta.chunk(Some(&t), None, false))), (meta, out, Phase::Body))),
                Some(Step::Finished { finish, prompt_tokens, completion_tokens }) => {
                    let ev = data(meta.chunk(None, Some(finish), false));
                    let next =
                        if meta.include_usage { Phase::Usage(prompt_tokens, completion_tokens) } else { Phase::Done };
                    Some((Ok(ev), (meta, out, next)))
                }
                Some(Step::Failed(e)) => Some((Ok(data(server_error(e).body())), (meta, out, Phase::Done))),
                None => Some((Ok(sse::Event::default().data("[DONE]")), (meta, out, Phase::End))),
            },
            Phase::Usage(p, c) => {
                let mut v = meta.envelope(true, json!([]));
                v["usage"] = usage(p, c);
                Some((Ok(data(v)), (meta, out, Phase::Done)))
            }
            Phase::Done => Some((Ok(sse::Event::default().data("[DONE]")), (meta, out, Phase::End))),
            Phase::End => None,
        }
    });
    Sse::new(s).keep_alive(KeepAlive::default())
}
