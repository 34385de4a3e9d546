//! `kiln serve` against slow, idle, greedy and cross-origin clients: servers on ephemeral localhost
//! ports (in this process, on the CPU with the fixture model), driven over raw sockets.

use kiln::{DType, Device};
use kiln_llm::{LoadOptions, ModelDir};
use kiln_serve::scheduler::SchedulerOptions;
use kiln_serve::{Engine, HttpOptions, ServeOptions};
use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn scheduler(max_batch: usize, kv_blocks: usize) -> SchedulerOptions {
    SchedulerOptions { max_batch, max_queue: 16, prefill_chunk: 64, block_size: 4, kv_blocks, warmup: false }
}

/// Starts a server (context 128 positions) on a free port; returns once `/health` answers.
fn start(http: HttpOptions, sched: SchedulerOptions) -> SocketAddr {
    let dir = ModelDir::open(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-llm/tests/fixtures/llama"))
        .unwrap();
    let model = dir.load(&Device::cpu(), LoadOptions { dtype: DType::F32, max_context: 128, progress: None }).unwrap();
    let tokenizer = dir.tokenizer().unwrap();
    let stop_tokens = dir.stop_tokens(&tokenizer).unwrap();
    let engine = Engine { model, tokenizer, template: dir.chat_template().ok(), stop_tokens, model_name: "fx".into() };
    let opts = ServeOptions {
        host: String::new(),
        port: 0,
        api_key: None,
        scheduler: sched,
        shutdown_grace: Duration::from_secs(1),
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || kiln_serve::serve_on(listener, engine, opts, http).unwrap());
    let end = Instant::now() + Duration::from_secs(60);
    while exchange(addr, &request(addr, "GET", "/health", &[], "")).0 != 200 {
        assert!(Instant::now() < end, "the server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    addr
}

/// A whole HTTP/1.1 request that asks for the connection to close after the answer.
fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        r += &format!("{k}: {v}\r\n");
    }
    if method == "POST" {
        r += &format!("Content-Length: {}\r\n", body.len());
    }
    r + "\r\n" + body
}

/// Sends `raw` and reads the answer to the end: status, head (lowercase), body. Status 0: the
/// connection failed or closed without an answer.
fn exchange(addr: SocketAddr, raw: &str) -> (u16, String, String) {
    let Ok(mut s) = TcpStream::connect(addr) else { return (0, String::new(), String::new()) };
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    if s.write_all(raw.as_bytes()).is_err() {
        return (0, String::new(), String::new());
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return (0, text, String::new()) };
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// The `error.code` of an OpenAI-style error body.
fn error_code(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"));
    v["error"]["code"].as_str().unwrap_or("").to_string()
}

/// Whether the server closed `s` (a read sees the end), waiting at most `wait`.
fn closed_within(mut s: &TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 512];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // an answer (408, 503) before the close
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// How long `/health` takes, the best of three, and the worst.
fn health_times(addr: SocketAddr) -> (Duration, Duration) {
    let times: Vec<Duration> = (0..3)
        .map(|_| {
            let t = Instant::now();
            let (status, _, _) = exchange(addr, &request(addr, "GET", "/health", &[], ""));
            assert_eq!(status, 200);
            t.elapsed()
        })
        .collect();
    (*times.iter().min().unwrap(), *times.iter().max().unwrap())
}

/// 300 idle sockets against a limit of 32 connections: the longest-idle ones are closed to make
/// room, and `/health` is answered at once. A body announced but never sent gets 408 and a close
/// after `--body-timeout`; an idle connection is closed after `--idle-timeout`, one that sent half
/// its headers after `--header-timeout`.
#[test]
fn idle_and_slow_clients_are_bounded() {
    let http = HttpOptions {
        max_connections: 32,
        idle_timeout: Duration::from_secs(60),
        header_timeout: Duration::from_secs(60),
        body_timeout: Duration::from_millis(300),
        ..HttpOptions::default()
    };
    let addr = start(http, scheduler(2, 64));
    let idle: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let (best, worst) = health_times(addr);
    assert!(best < Duration::from_millis(100), "/health took {best:?} at best with 300 idle sockets open");
    assert!(worst < Duration::from_secs(2), "/health took {worst:?} with 300 idle sockets open");
    let closed = idle.iter().filter(|s| closed_within(s, Duration::from_millis(20))).count();
    assert!(closed >= 300 - 32, "only {closed} of 300 idle sockets were closed under a limit of 32");
    drop(idle);

    // Headers announcing 100 bytes of body, and no body.
    let mut s = TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "an unsent body got {answer:?} after {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(5), "the unsent body was closed after {:?}", t.elapsed());
    assert_eq!(error_code(answer.split_once("\r\n\r\n").unwrap().1), "request_timeout");

    let http = HttpOptions {
        idle_timeout: Duration::from_millis(300),
        header_timeout: Duration::from_millis(300),
        ..HttpOptions::default()
    };
    let addr = start(http, scheduler(2, 64));
    let silent = TcpStream::connect(addr).unwrap();
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(b"GET /health HTTP/1.1\r\nHost: x").unwrap();
    let mut kept = TcpStream::connect(addr).unwrap();
    kept.write_all(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).unwrap();
    for (what, s) in [("a silent connection", &silent), ("half a head", &half), ("a kept-alive one", &kept)] {
        assert!(closed_within(s, Duration::from_secs(5)), "{what} was not closed");
    }
}

/// Four prompts of 2 MB are tokenized off the HTTP threads: `/health` answers at once meanwhile;
/// a body past `--max-body-bytes` gets a JSON 413 before it is read.
#[test]
fn large_prompts_do_not_stall_the_server() {
    let http = HttpOptions { max_body_bytes: 4 << 20, ..HttpOptions::default() };
    let addr = start(http, scheduler(2, 64));
    let words = "the kiln fires clay into stone ".repeat(2_000_000 / 31);
    let body = serde_json::json!({"prompt": words, "max_tokens": 1}).to_string();
    let posts: Vec<_> = (0..4)
        .map(|_| {
            let raw = request(addr, "POST", "/v1/completions", &[("Content-Type", "application/json")], &body);
            std::thread::spawn(move || exchange(addr, &raw))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let mut worst = Duration::ZERO;
    while !posts.iter().all(|p| p.is_finished()) {
        worst = worst.max(health_times(addr).1);
    }
    for p in posts {
        let (status, _, body) = p.join().unwrap();
        assert_eq!((status, error_code(&body).as_str()), (400, "context_length_exceeded"), "{body}");
    }
    assert!(worst < Duration::from_secs(1), "/health took {worst:?} while long prompts were tokenized");

    // Only the headers: the 413 comes from the announced length, before any body is read.
    let big = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        (4 << 20) + 1
    );
    let (status, _, body) = exchange(addr, &big);
    assert_eq!((status, error_code(&body).as_str()), (413, "request_too_large"));
}

fn completion(addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    exchange(addr, &request(addr, "POST", "/v1/completions", headers, body))
}

/// Browsers: JSON only, loopback `Host` names only, origins only as allowed; API keys from both
/// headers; 405 and 429-style bodies are JSON.
#[test]
fn cross_origin_requests_and_keys() {
    let json = ("Content-Type", "application/json");
    let body = r#"{"prompt": "hello", "max_tokens": 2}"#;
    // Off by default: no CORS headers, every origin refused.
    let addr = start(HttpOptions::default(), scheduler(2, 64));
    let (status, head, _) = completion(addr, &[json], body);
    assert_eq!(status, 200, "{head}");
    assert!(!head.contains("access-control-"), "{head}");
    for form in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
        let (status, _, err) = completion(addr, &[("Content-Type", form)], body);
        assert_eq!((status, error_code(&err).as_str()), (415, "unsupported_media_type"), "{form}");
    }
    let (status, _, err) = completion(addr, &[], body);
    assert_eq!((status, error_code(&err).as_str()), (415, "unsupported_media_type"));
    let preflight = [("Origin", "https://page.example"), ("Access-Control-Request-Method", "POST")];
    let (status, head, _) = exchange(addr, &request(addr, "OPTIONS", "/v1/completions", &preflight, ""));
    assert_eq!(status, 403);
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    let rebound = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: rebind.example:{}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        addr.port(),
        body.len()
    );
    let (status, _, err) = exchange(addr, &rebound);
    assert_eq!((status, error_code(&err).as_str()), (403, "host_not_allowed"));
    let (status, head, err) = exchange(addr, &request(addr, "GET", "/v1/completions", &[], ""));
    assert_eq!((status, error_code(&err).as_str()), (405, "method_not_allowed"));
    assert!(head.contains("allow: post"), "{head}");

    // Allowed origins and keys.
    let http = HttpOptions {
        api_keys: vec!["key-one".into()],
        allowed_origins: vec!["https://chat.example".into()],
        ..HttpOptions::default()
    };
    let addr = start(http, scheduler(2, 64));
    let (status, _, err) = completion(addr, &[json], body);
    assert_eq!((status, error_code(&err).as_str()), (401, "invalid_api_key"));
    assert_eq!(completion(addr, &[json, ("Authorization", "bearer key-one")], body).0, 200);
    assert_eq!(completion(addr, &[json, ("x-api-key", "key-one")], body).0, 200);
    assert_eq!(completion(addr, &[json, ("x-api-key", "key-on")], body).0, 401);
    assert_eq!(exchange(addr, &request(addr, "GET", "/metrics", &[], "")).0, 401);
    assert_eq!(exchange(addr, &request(addr, "GET", "/metrics", &[("x-api-key", "key-one")], "")).0, 200);
    assert_eq!(exchange(addr, &request(addr, "GET", "/health", &[], "")).0, 200);
    let allowed = [("Origin", "https://chat.example"), ("Access-Control-Request-Method", "POST")];
    let (status, head, _) = exchange(addr, &request(addr, "OPTIONS", "/v1/completions", &allowed, ""));
    assert_eq!(status, 204);
    assert!(head.contains("access-control-allow-origin: https://chat.example"), "{head}");
    let from = |o| [json, ("x-api-key", "key-one"), ("Origin", o)];
    let (status, head, _) = completion(addr, &from("https://chat.example"), body);
    assert_eq!(status, 200);
    assert!(head.contains("access-control-allow-origin: https://chat.example"), "{head}");
    let (status, _, err) = completion(addr, &from("https://evil.example"), body);
    assert_eq!((status, error_code(&err).as_str()), (403, "origin_not_allowed"));
}

/// With a KV pool smaller than the context (or one sequence a batch), a request without
/// `max_tokens` is served until the pool's positions run out (`length`), never a 500; a prompt
/// longer than the whole pool is a 400.
#[test]
fn open_ended_requests_fit_a_small_pool() {
    // 12 blocks of 4 positions: 48 positions, where the context holds 128.
    let addr = start(HttpOptions::default(), scheduler(1, 12));
    let json = ("Content-Type", "application/json");
    let (status, _, body) = completion(addr, &[json], r#"{"prompt": "hello there", "temperature": 0}"#);
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let total = v["usage"]["total_tokens"].as_u64().unwrap();
    assert!(total <= 49, "{total} positions from a pool of 48: {body}");
    if v["choices"][0]["finish_reason"] == "length" {
        assert!(total >= 48, "ended with `length` at {total} positions of 48");
    }
    let long = format!(r#"{{"prompt": "{}", "max_tokens": 1}}"#, "stone ".repeat(60));
    let (status, _, body) = completion(addr, &[json], &long);
    assert_eq!((status, error_code(&body).as_str()), (400, "context_length_exceeded"), "{body}");
}

/// A full queue answers 429 with `Retry-After` and a JSON body.
#[test]
fn a_full_queue_says_when_to_retry() {
    let addr = start(HttpOptions::default(), SchedulerOptions { max_queue: 0, ..scheduler(1, 64) });
    let (status, head, body) =
        completion(addr, &[("Content-Type", "application/json")], r#"{"prompt": "hi", "max_tokens": 1}"#);
    assert_eq!((status, error_code(&body).as_str()), (429, "queue_full"));
    assert!(head.contains("retry-after: 1"), "{head}");
}
