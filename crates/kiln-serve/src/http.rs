//! The HTTP layer (axum): routes, the API key, request checks, prompts (the chat template as
//! `kiln chat` renders it), and turning the scheduler's token events into OpenAI JSON or
//! server-sent events, with stop strings found in the decoded text.

use crate::api::{self, ApiError, ChatRequest, CompletionRequest, Settings};
use crate::metrics::Metrics;
use crate::scheduler::{Event, Finish, GenRequest, Rejected, Scheduler};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use kiln_llm::{ChatTemplate, Message, SamplingParams, Tokenizer};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::UnboundedReceiver;

/// What every handler shares.
pub struct App {
    pub scheduler: Scheduler,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    pub stop_tokens: Vec<u32>,
    pub model_name: String,
    pub api_key: Option<String>,
    pub max_context: usize,
    pub metrics: Arc<Metrics>,
    pub next_id: AtomicU64,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(app)
}

fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(e.body())).into_response()
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

fn authorize(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &app.api_key else { return Ok(()) };
    let given =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    // Compared in full whatever the first difference (no timing hint about the key).
    let ok = given
        .is_some_and(|g| g.len() == key.len() && g.bytes().zip(key.bytes()).fold(0u8, |a, (x, y)| a | (x ^ y)) == 0);
    if ok {
        Ok(())
    } else {
        Err(ApiError {
            status: 401,
            message: "missing or wrong API key: send the header `Authorization: Bearer KEY`".into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("invalid_api_key"),
        })
    }
}

async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let r = match authorize(&app, &headers) {
        Err(e) => error_response(&e),
        Ok(()) => Json(json!({
            "object": "list",
            "data": [{"id": app.model_name, "object": "model", "created": unix_now(), "owned_by": "kiln"}],
        }))
        .into_response(),
    };
    app.metrics.count_request("/v1/models", r.status().as_u16());
    r
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let r = handle(&app, &headers, &body, Kind::Chat).await.unwrap_or_else(|e| error_response(&e));
    app.metrics.count_request("/v1/chat/completions", r.status().as_u16());
    r
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let r = handle(&app, &headers, &body, Kind::Completion).await.unwrap_or_else(|e| error_response(&e));
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
    if ids.len() >= app.max_context {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::bad_request(
                format!(
                    "the prompt has {} tokens; the context holds {} (one is needed for the answer)",
                    ids.len(),
                    app.max_context
                ),
                Some("messages"),
            )
        });
    }
    Ok((ids, settings))
}

async fn handle(app: &Arc<App>, headers: &HeaderMap, body: &[u8], kind: Kind) -> Result<Response, ApiError> {
    authorize(app, headers)?;
    let (prompt, settings) = prepare(app, body, kind)?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let prompt_len = prompt.len();
    let req = GenRequest {
        max_tokens: settings.max_tokens.unwrap_or(app.max_context).min(app.max_context - prompt_len),
        prompt,
        sampling: SamplingParams {
            temperature: settings.temperature,
            top_k: None,
            top_p: settings.top_p,
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
    let out = Output::new(rx, app.tokenizer.clone(), prompt_len, settings.stop.clone());
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
            let rx = self.rx.as_mut()?;
            let ev = rx.recv().await;
            match ev {
                None => self.end = Some(Step::Failed("the scheduler stopped".into())),
                Some(Event::Error(e)) => self.end = Some(Step::Failed(e)),
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
