//! A minimal HTTP/1.1 server for /metrics: one short-lived connection at a time is
//! all a Prometheus scraper needs, and it keeps tokio/hyper out of the build.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{TcpListener, TcpStream},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::metrics::Metrics;

const MAX_CONCURRENT_SCRAPES: usize = 8;
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    std::thread::Builder::new()
        .name("tlsprof-http".into())
        .spawn(move || {
            let active = Arc::new(AtomicUsize::new(0));
            for stream in listener.incoming().flatten() {
                // Bounded: a flood of connections cannot make the agent spawn without limit.
                if active.load(Ordering::Relaxed) >= MAX_CONCURRENT_SCRAPES {
                    continue; // dropping the stream closes it
                }
                active.fetch_add(1, Ordering::Relaxed);
                let active = active.clone();
                let metrics = metrics.clone();
                // One thread per scrape, so a stalled client cannot hold up the next one.
                let _ = std::thread::Builder::new()
                    .name("tlsprof-scrape".into())
                    .spawn(move || {
                        // A scraper that hung up: nothing to do but go on.
                        let _ = handle(stream, &metrics);
                        active.fetch_sub(1, Ordering::Relaxed);
                    });
            }
        })
        .expect("cannot start the HTTP thread");
}

fn handle(stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Read the headers: only Accept matters (content negotiation, as Prometheus does it).
    let mut openmetrics = false;
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("accept:") && lower.contains("application/openmetrics-text") {
            openmetrics = true;
        }
        line.clear();
    }
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") if openmetrics => ("200 OK", OPENMETRICS, metrics.render_openmetrics()),
        ("GET" | "HEAD", "/metrics") => ("200 OK", TEXT_FORMAT, metrics.render_text()),
        ("GET" | "HEAD", "/") => (
            "200 OK",
            "text/html; charset=utf-8",
            "<html><body><h1>tlsprof</h1><a href=\"/metrics\">/metrics</a></body></html>\n".to_string(),
        ),
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "method not allowed\n".to_string(),
        ),
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if method != "HEAD" {
        out.write_all(body.as_bytes())?;
    }
    out.flush()
}
