//! Connections: the accept loop and what bounds each connection, so that slow or idle clients
//! cannot hold the server (hyper's HTTP/1 connections under our own watch; axum's `serve` has no
//! such bounds).
//!
//! - At most `max_connections` are open. At the bound, a new connection makes room by closing the
//!   connection that has been idle longest (no request in flight), as nginx reuses idle keep-alive
//!   connections; when every connection is busy, the new one gets a 503 and is closed. An accept
//!   that fails (out of file descriptors) also closes an idle connection.
//! - Between requests a connection may stay idle for `idle_timeout`; once a request's first byte
//!   has come, its headers must be complete within `header_timeout`. Either way it is closed past
//!   its time (a watchdog task per connection, ticking at a fraction of the shorter timeout).
//! - The body's own deadline is the handler's ([`crate::http`] reads it within `body_timeout`).
//!
//! A request is in flight from its complete headers until hyper drops its response body (the last
//! byte of a stream sent, or the client gone).

use axum::body::Body;
use axum::Router;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tower::ServiceExt;

/// The bounds on connections (see the module's comment).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

impl Limits {
    fn tick(&self) -> Duration {
        (self.header_timeout.min(self.idle_timeout) / 8).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

/// Milliseconds since the server started, plus one (0 means "never").
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn now(&self) -> u64 {
        self.0.elapsed().as_millis() as u64 + 1
    }
}

/// What the accept loop and the watchdog know of one connection.
struct ConnState {
    /// Requests in flight (more than one only when a client pipelines).
    busy: AtomicUsize,
    /// When the connection last became idle (opened, or its last answer ended).
    idle_since: AtomicU64,
    /// When the first byte of the next request's head came while idle (0: none yet).
    head_since: AtomicU64,
    /// Set by the accept loop to make room; the watchdog closes the connection if idle.
    evict: Notify,
    evicted: AtomicBool,
}

impl ConnState {
    fn new(now: u64) -> ConnState {
        ConnState {
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(now),
            head_since: AtomicU64::new(0),
            evict: Notify::new(),
            evicted: AtomicBool::new(false),
        }
    }

    fn is_idle(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0
    }

    /// Whether the idle or header time has run out.
    fn expired(&self, now: u64, limits: &Limits) -> bool {
        if !self.is_idle() {
            return false;
        }
        let ms = |d: Duration| d.as_millis() as u64;
        match self.head_since.load(Ordering::SeqCst) {
            0 => now.saturating_sub(self.idle_since.load(Ordering::SeqCst)) > ms(limits.idle_timeout),
            head => now.saturating_sub(head) > ms(limits.header_timeout),
        }
    }
}

/// Ends a request's time in flight when dropped (with its response body).
struct InFlight(Arc<ConnState>, Clock);

impl InFlight {
    fn begin(state: Arc<ConnState>, clock: Clock) -> InFlight {
        state.busy.fetch_add(1, Ordering::SeqCst);
        state.head_since.store(0, Ordering::SeqCst);
        InFlight(state, clock)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.idle_since.store(self.1.now(), Ordering::SeqCst);
        self.0.head_since.store(0, Ordering::SeqCst);
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that holds its request's [`InFlight`] until hyper drops it.
struct Tracked {
    inner: Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The socket, noting when a request's first byte arrives on an idle connection.
struct Watched {
    io: TcpStream,
    state: Arc<ConnState>,
    clock: Clock,
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before && this.state.is_idle() {
            let _ = this.state.head_since.compare_exchange(0, this.clock.now(), Ordering::SeqCst, Ordering::SeqCst);
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The open connections.
struct Table {
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
    /// Woken when a connection ends (shutdown waits for the table to empty).
    ended: Notify,
}

impl Table {
    fn len(&self) -> usize {
        self.conns.lock().map_or(0, |c| c.len())
    }

    /// Asks the longest-idle connection not already asked to close; false when none is idle.
    fn evict_idle(&self) -> bool {
        let Ok(conns) = self.conns.lock() else { return false };
        let oldest = conns
            .values()
            .filter(|c| c.is_idle() && !c.evicted.load(Ordering::SeqCst))
            .min_by_key(|c| c.idle_since.load(Ordering::SeqCst));
        match oldest {
            Some(c) => {
                c.evicted.store(true, Ordering::SeqCst);
                c.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Accepts connections on `listener` and serves `router` on each until `shutdown` turns true; then
/// stops accepting, lets each connection finish its requests (hyper's graceful shutdown) and
/// returns once all have closed.
pub async fn serve(listener: TcpListener, router: Router, limits: Limits, mut shutdown: watch::Receiver<bool>) {
    let clock = Clock(Instant::now());
    let table = Arc::new(Table { conns: Mutex::new(HashMap::new()), ended: Notify::new() });
    let mut next_id = 0u64;
    let mut said_accept_error = false;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors (or a transient error): make room and back off a little.
                if !said_accept_error {
                    eprintln!("kiln serve: cannot accept a connection ({e}); closing idle ones");
                    said_accept_error = true;
                }
                table.evict_idle();
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if table.len() >= limits.max_connections && !table.evict_idle() {
            tokio::spawn(refuse(stream));
            continue;
        }
        let _ = stream.set_nodelay(true);
        let state = Arc::new(ConnState::new(clock.now()));
        next_id += 1;
        if let Ok(mut conns) = table.conns.lock() {
            conns.insert(next_id, state.clone());
        }
        let (id, table, router, shutdown) = (next_id, table.clone(), router.clone(), shutdown.clone());
        tokio::spawn(async move {
            connection(stream, state, clock, router, limits, shutdown).await;
            if let Ok(mut conns) = table.conns.lock() {
                conns.remove(&id);
            }
            table.ended.notify_waiters();
        });
    }
    drop(listener);
    loop {
        let ended = table.ended.notified();
        if table.len() == 0 {
            break;
        }
        // Bounded wait: a connection that ends between the check and the wait is seen next time.
        let _ = tokio::time::timeout(Duration::from_millis(50), ended).await;
    }
}

/// Serves one connection until it closes, its idle or header time runs out, the accept loop asks
/// for its place while it is idle, or the server shuts down.
async fn connection(
    stream: TcpStream,
    state: Arc<ConnState>,
    clock: Clock,
    router: Router,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
) {
    let io = TokioIo::new(Watched { io: stream, state: state.clone(), clock });
    let svc_state = state.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let in_flight = InFlight::begin(svc_state.clone(), clock);
        let router = router.clone();
        async move {
            let Ok(resp) = router.oneshot(req.map(Body::new)).await;
            Ok::<_, Infallible>(resp.map(|inner| Body::new(Tracked { inner, _in_flight: in_flight })))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Our watchdog bounds the headers (hyper's timeout would also start on an idle connection).
    builder.timer(TokioTimer::new()).header_read_timeout(None);
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    let mut tick = tokio::time::interval(limits.tick());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = tick.tick() => {
                if state.expired(clock.now(), &limits) {
                    return; // dropping the connection closes the socket
                }
            }
            _ = state.evict.notified() => {
                if state.is_idle() {
                    return;
                }
                conn.as_mut().graceful_shutdown();
            }
            _ = shutdown.changed() => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.as_mut().await;
                return;
            }
        }
    }
}

/// Answers a connection the server has no room for: 503 with `Retry-After`, then closes it.
async fn refuse(mut stream: TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = crate::api::ApiError {
        status: 503,
        message: "the server has too many open connections: retry later".into(),
        kind: "server_error",
        param: None,
        code: Some("too_many_connections"),
    }
    .body()
    .to_string();
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(reply.as_bytes())).await;
}
