//! The /metrics endpoint: hyper (HTTP/1.1) on a tokio runtime of its own thread, TLS through
//! rustls and basic auth as `--web.config.file` says (config.rs, auth.rs).
//!
//! What a neighbour on the network can do to it is bounded:
//! - a request line and headers over MAX_HEAD_BYTES get 431 and the connection closed
//!   (hyper stops reading there: memory per connection stays under that);
//! - the headers must arrive within HEAD_DEADLINE and the whole exchange, TLS handshake
//!   included, end within DEADLINE, or the connection is closed;
//! - at most MAX_CONNECTIONS connections are open; a new one arriving at the limit closes
//!   the oldest, so connections that trickle or idle are dropped before a healthy scrape
//!   (which sends its request at once and is answered in milliseconds) waits behind them;
//! - one request per connection (Connection: close): nothing idles between scrapes.
//!
//! Each closed-unserved connection is counted in tlsprof_scrapes_refused_total{reason}.
mod auth;
mod client_cert;
pub mod config;

use std::{
    collections::BTreeMap,
    convert::Infallible,
    net::TcpListener,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, Result};
use http_body_util::Full;
use hyper::{
    body::{Bytes, Incoming},
    header::{HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE},
    server::conn::http1,
    service::service_fn,
    Method, Request, Response, StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::task::AbortHandle;

use self::auth::BasicAuth;
pub use self::config::WebConfig;
use crate::metrics::{Metrics, RefusalLabels};

/// Connections open at once (each holds at most MAX_HEAD_BYTES of request and a TLS session).
pub const MAX_CONNECTIONS: usize = 256;
/// Request line and headers (hyper's read buffer; 431 beyond).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// From the first byte of a request to the end of its headers.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// From accept to the last byte of the response, TLS handshake included.
pub const DEADLINE: Duration = Duration::from_secs(10);

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

struct Endpoint {
    metrics: Arc<Metrics>,
    auth: Arc<BasicAuth>,
    headers: Vec<(HeaderName, HeaderValue)>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Endpoint {
    fn refused(&self, reason: &str) {
        self.metrics
            .scrapes_refused
            .get_or_create(&RefusalLabels { reason: reason.into() })
            .inc();
    }
}

/// Serves /metrics on `listener` from a thread of its own until the process exits.
pub fn serve(listener: TcpListener, metrics: Arc<Metrics>, web: WebConfig) -> Result<()> {
    let mut headers = Vec::new();
    for (k, v) in web.headers {
        headers.push((HeaderName::try_from(k)?, HeaderValue::try_from(v)?));
    }
    let endpoint = Arc::new(Endpoint {
        metrics,
        auth: BasicAuth::new(web.users),
        headers,
        tls: web.tls.map(tokio_rustls::TlsAcceptor::from),
    });
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .thread_name("tlsprof-http")
        .build()
        .context("the metrics endpoint's runtime")?;
    std::thread::Builder::new()
        .name("tlsprof-http".into())
        .spawn(move || {
            runtime.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => accept_loop(l, endpoint).await,
                    Err(e) => log::error!("metrics endpoint: {e}"),
                }
            })
        })
        .context("cannot start the HTTP thread")?;
    Ok(())
}

/// The open connections by age (ids increase), each with the handle that closes it.
type Live = Arc<Mutex<BTreeMap<u64, AbortHandle>>>;

/// Removes its connection from `Live` when the connection's task ends or is aborted.
struct Slot {
    id: u64,
    live: Live,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.live.lock().unwrap().remove(&self.id);
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, endpoint: Arc<Endpoint>) {
    let live: Live = Arc::default();
    for id in 0u64.. {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of file descriptors and the like: do not spin.
                log::debug!("metrics endpoint: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let mut open = live.lock().unwrap();
        while open.len() >= MAX_CONNECTIONS {
            let Some((_, oldest)) = open.pop_first() else { break };
            oldest.abort();
            endpoint.refused("evicted");
        }
        let slot = Slot { id, live: live.clone() };
        let e = endpoint.clone();
        // The task cannot run before the lock is released (one thread), so its Slot
        // always finds its entry.
        let task = tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(DEADLINE, connection(stream, &e)).await {
                Err(_) => e.refused("deadline"),
                Ok(Err(reason)) => e.refused(reason),
                Ok(Ok(())) => {}
            }
        });
        open.insert(id, task.abort_handle());
    }
}

async fn connection(stream: tokio::net::TcpStream, e: &Arc<Endpoint>) -> Result<(), &'static str> {
    let _ = stream.set_nodelay(true);
    match &e.tls {
        Some(acceptor) => {
            let tls = acceptor.accept(stream).await.map_err(|_| "tls")?;
            http(TokioIo::new(tls), e).await
        }
        None => http(TokioIo::new(stream), e).await,
    }
}

async fn http<I>(io: I, e: &Arc<Endpoint>) -> Result<(), &'static str>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let e2 = e.clone();
    let service = service_fn(move |req| {
        let e = e2.clone();
        async move { Ok::<_, Infallible>(respond(req, &e).await) }
    });
    let result = http1::Builder::new()
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_DEADLINE)
        .serve_connection(io, service)
        .await;
    match result {
        Ok(()) => Ok(()),
        Err(err) if err.is_parse_too_large() => Err("too_large"),
        Err(err) if err.is_timeout() => Err("deadline"),
        // A client that hung up or sent something that is not HTTP: hyper answered it
        // (400) where it could; nothing else to do.
        Err(err) => {
            log::debug!("metrics endpoint: {err}");
            Ok(())
        }
    }
}

async fn respond(req: Request<Incoming>, e: &Arc<Endpoint>) -> Response<Full<Bytes>> {
    if e.auth.required()
        && !e
            .auth
            .allows(req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes))
            .await
    {
        e.refused("unauthorized");
        let mut r = reply(
            StatusCode::UNAUTHORIZED,
            "text/plain; charset=utf-8",
            "Unauthorized\n".into(),
            e,
        );
        r.headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
        return r;
    }
    let openmetrics = req
        .headers()
        .get_all(ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains("application/openmetrics-text")));
    let (status, ctype, body) = match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") if openmetrics => {
            (StatusCode::OK, OPENMETRICS, e.metrics.render_openmetrics())
        }
        (&Method::GET | &Method::HEAD, "/metrics") => (StatusCode::OK, TEXT_FORMAT, e.metrics.render_text()),
        (&Method::GET | &Method::HEAD, "/") => (
            StatusCode::OK,
            "text/html; charset=utf-8",
            "<html><body><h1>tlsprof</h1><a href=\"/metrics\">/metrics</a></body></html>\n".to_string(),
        ),
        (&Method::GET | &Method::HEAD, _) => (StatusCode::NOT_FOUND, "text/plain", "not found\n".to_string()),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n".to_string(),
        ),
    };
    reply(status, ctype, body, e)
}

fn reply(status: StatusCode, ctype: &'static str, body: String, e: &Endpoint) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    for (k, v) in &e.headers {
        r.headers_mut().insert(k.clone(), v.clone());
    }
    r
}
