//! What every request passes before a handler (an axum middleware), so that a web page cannot
//! drive a server that a browser can reach:
//!
//! 1. `Host`: while listening on a loopback address, only `localhost`, `127.0.0.1`, `[::1]` (any
//!    port) and `--allowed-hosts` are answered, so a DNS-rebinding page (its own name resolving to
//!    127.0.0.1) gets 403. A request without `Host` (HTTP/1.0) passes: browsers always send one.
//! 2. `Origin` (CORS): only browsers send it. Origins in `--allowed-origins` get CORS headers and
//!    their preflights (`OPTIONS`) answered; every other origin gets 403, preflight or not. By
//!    default the list is empty: no CORS headers, no preflight passes.
//! 3. The API key ([`ApiKeys`]) on `/v1/*` and `/metrics` (401).
//! 4. `POST` bodies must be `Content-Type: application/json` (415): a page's blind cross-site POST
//!    can only send form and text types without a preflight.
//!
//! Refusals carry OpenAI-style JSON bodies like every other error.

use crate::api::ApiError;
use crate::auth::ApiKeys;
use crate::http::{error_response, App};
use crate::options::HttpOptions;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The checks' configuration.
pub struct Gate {
    keys: ApiKeys,
    /// Lowercase, without a trailing `/`.
    origins: Vec<String>,
    any_origin: bool,
    /// While listening on loopback: the accepted host names (lowercase, without port).
    hosts: Option<Vec<String>>,
}

impl Gate {
    pub fn new(keys: ApiKeys, http: &HttpOptions, loopback: bool) -> Result<Gate, String> {
        let mut origins = Vec::new();
        let mut any_origin = false;
        for o in &http.allowed_origins {
            let o = o.trim().trim_end_matches('/').to_ascii_lowercase();
            if o == "*" {
                any_origin = true;
            } else if o.starts_with("http://") || o.starts_with("https://") {
                origins.push(o);
            } else if !o.is_empty() {
                return Err(format!("--allowed-origins takes origins such as https://app.example.com, got {o:?}"));
            }
        }
        let hosts = loopback.then(|| {
            let mut h: Vec<String> = ["localhost", "127.0.0.1", "[::1]"].map(String::from).into();
            h.extend(http.allowed_hosts.iter().map(|s| host_name(s.trim()).to_ascii_lowercase()));
            h
        });
        Ok(Gate { keys, origins, any_origin, hosts })
    }

    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let (Some(hosts), Some(host)) = (&self.hosts, headers.get(header::HOST)) else { return true };
        let Ok(host) = host.to_str() else { return false };
        let name = host_name(host).to_ascii_lowercase();
        hosts.contains(&name)
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        self.any_origin || self.origins.iter().any(|o| o.eq_ignore_ascii_case(origin.trim_end_matches('/')))
    }
}

/// `host` without its port: `[::1]:8080` -> `[::1]`, `localhost:80` -> `localhost`.
fn host_name(host: &str) -> &str {
    if let Some(end) = host.find(']') {
        return &host[..=end];
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

fn refusal(status: u16, message: String, code: &'static str) -> Response {
    let kind = if status == 403 { "permission_error" } else { "invalid_request_error" };
    error_response(&ApiError { status, message, kind, param: None, code: Some(code) })
}

/// The middleware: the checks of the module's comment, in its order. A refusal on an endpoint
/// `/metrics` counts by status is counted as the handler's answers are.
pub async fn check(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let counted = ["/v1/chat/completions", "/v1/completions", "/v1/models"].into_iter().find(|p| *p == path);
    match verdict(&app.gate, &req) {
        Verdict::Refuse(resp) => {
            if let Some(endpoint) = counted {
                app.metrics.count_request(endpoint, resp.status().as_u16());
            }
            resp
        }
        Verdict::Pass(None) => next.run(req).await,
        Verdict::Pass(Some(origin)) => with_cors(next.run(req).await, Some(&origin)),
    }
}

/// What the checks make of a request.
enum Verdict {
    /// On to the handler; with the allowed origin to answer with CORS headers.
    Pass(Option<HeaderValue>),
    /// The answer instead (a refusal, or an allowed preflight's 204).
    Refuse(Response),
}

fn verdict(gate: &Gate, req: &Request) -> Verdict {
    let headers = req.headers();
    if !gate.host_allowed(headers) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("?");
        let message = format!(
            "Host {host:?} is not served here (a loopback server answers localhost, 127.0.0.1 and [::1]; \
             see --allowed-hosts)"
        );
        return Verdict::Refuse(refusal(403, message, "host_not_allowed"));
    }
    let origin = headers.get(header::ORIGIN).cloned();
    if let Some(origin) = &origin {
        let o = origin.to_str().unwrap_or("");
        if !gate.origin_allowed(o) {
            let message = format!("requests from the browser origin {o:?} are not allowed (see --allowed-origins)");
            return Verdict::Refuse(refusal(403, message, "origin_not_allowed"));
        }
        if req.method() == Method::OPTIONS && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
            return Verdict::Refuse(preflight(origin));
        }
    }
    let path = req.uri().path();
    if (path.starts_with("/v1/") || path == "/metrics") && !gate.keys.allows(headers) {
        let message = "missing or wrong API key: send `Authorization: Bearer KEY` or `x-api-key: KEY`".into();
        return Verdict::Refuse(with_cors(refusal(401, message, "invalid_api_key"), origin.as_ref()));
    }
    if req.method() == Method::POST && !is_json(headers) {
        let given = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("none");
        let message = format!("the body must be JSON, sent with `Content-Type: application/json` (got {given})");
        return Verdict::Refuse(with_cors(refusal(415, message, "unsupported_media_type"), origin.as_ref()));
    }
    Verdict::Pass(origin)
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(ct) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    ct.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// An allowed origin's preflight: 204 with what it may send.
fn preflight(origin: &HeaderValue) -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST"));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("authorization, content-type, x-api-key"));
    h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    with_cors(resp, Some(origin))
}

/// Adds the CORS headers for an allowed `origin` (none without one).
fn with_cors(mut resp: Response, origin: Option<&HeaderValue>) -> Response {
    if let Some(o) = origin {
        resp.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o.clone());
        resp.headers_mut().append(header::VARY, HeaderValue::from_static("Origin"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_without_ports() {
        assert_eq!(host_name("localhost:8080"), "localhost");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
        assert_eq!(host_name("example.com"), "example.com");
        let gate = Gate::new(
            ApiKeys::default(),
            &HttpOptions { allowed_hosts: vec!["api.example.com".into()], ..HttpOptions::default() },
            true,
        )
        .unwrap();
        let with = |h: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::HOST, h.parse().unwrap());
            gate.host_allowed(&m)
        };
        assert!(with("localhost:8080") && with("127.0.0.1") && with("[::1]:1") && with("API.example.com:443"));
        assert!(!with("evil.example:8080") && !with("localhost.evil.example"));
        assert!(gate.host_allowed(&HeaderMap::new()));
    }
}
