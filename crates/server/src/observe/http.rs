//! The HTTP listener on `metrics-port` (bound on `metrics-bind`, loopback by default): `/metrics`
//! (Prometheus' text format) and `/` (the status page), served with hyper's HTTP/1 server.
//!
//! It is read-only and strict, so no web page can use it for anything (cross-protocol tricks):
//! only GET and HEAD, only those two paths (another path is 404, another method on them 405),
//! no request body is ever read, nothing changes state. When authentication is on (tenants or
//! `requirepass`), both paths need HTTP Basic auth with the credentials of a user that has the
//! `admin` right (failures count in the same AUTH throttle as the RESP port). On a loopback
//! listener the `Host` header must name a loopback address or `localhost` (a page that
//! rebinds its own DNS name to 127.0.0.1 cannot read it). Connections are capped and timed out.
//!
//! May import: `state`, `observe` (the renderers), `tenancy` (users and the throttle), `config`,
//! `error`.

use crate::config::Config;
use crate::error::ServerError;
use crate::state::Shared;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE, HOST, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Most simultaneous HTTP connections (more wait in the accept queue).
const MAX_CONNECTIONS: usize = 32;
/// A connection is closed after this long, whatever it is doing.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Bind the metrics listeners (None when `metrics-port` is 0).
pub async fn bind(config: &Config) -> Result<Option<Vec<TcpListener>>, ServerError> {
    if config.metrics_port == 0 {
        return Ok(None);
    }
    let mut listeners = Vec::new();
    for addr in &config.metrics_bind {
        let ip: std::net::IpAddr = addr
            .parse()
            .map_err(|_| ServerError::Config(format!("bad metrics-bind address {addr}")))?;
        let sa = SocketAddr::new(ip, config.metrics_port);
        let listener = TcpListener::bind(sa)
            .await
            .map_err(|source| ServerError::Bind {
                addr: sa.to_string(),
                source,
            })?;
        listeners.push(listener);
    }
    Ok(Some(listeners))
}

/// Serve HTTP connections until the task is aborted at shutdown.
pub async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let loopback = listener
        .local_addr()
        .map(|a| a.ip().is_loopback())
        .unwrap_or(true);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(respond(&shared, req, peer, loopback).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .max_buf_size(16 * 1024)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await;
        });
    }
}

/// The paths served.
#[derive(Clone, Copy)]
enum Page {
    Metrics,
    Status,
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Answer one request (see the module docs for the rules).
async fn respond(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    peer: SocketAddr,
    loopback: bool,
) -> Response<Full<Bytes>> {
    let page = match req.uri().path() {
        "/metrics" => Page::Metrics,
        "/" => Page::Status,
        _ => return plain(StatusCode::NOT_FOUND, "not found\n"),
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if loopback && !host_is_loopback(req.headers().get(HOST)) {
        return plain(
            StatusCode::MISDIRECTED_REQUEST,
            "this listener answers only to a loopback Host\n",
        );
    }
    if shared.auth_required() && !authorized(shared, &req, peer).await {
        let mut r = plain(StatusCode::UNAUTHORIZED, "authentication required\n");
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"Gradus\", charset=\"UTF-8\""),
        );
        return r;
    }
    let (body, content_type) = match page {
        Page::Metrics => (
            super::prometheus::render(shared),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        Page::Status => (super::status::render(shared), "text/html; charset=utf-8"),
    };
    let head = req.method() == Method::HEAD;
    let len = body.len();
    let mut r = Response::new(Full::new(if head {
        Bytes::new()
    } else {
        Bytes::from(body)
    }));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "X-Content-Type-Options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        "Content-Security-Policy",
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
    );
    h.insert("X-Frame-Options", HeaderValue::from_static("DENY"));
    if head {
        h.insert(hyper::header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    r
}

/// True for a `Host` naming `localhost` or a loopback address (with or without a port).
fn host_is_loopback(host: Option<&HeaderValue>) -> bool {
    let Some(host) = host.and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The `user:password` of a Basic `Authorization` header.
fn basic_credentials(req: &Request<Incoming>) -> Option<(Vec<u8>, Vec<u8>)> {
    let value = req.headers().get(hyper::header::AUTHORIZATION)?.as_bytes();
    let (scheme, encoded) = value.split_at(value.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let decoded = gradus_memcache::base64::decode(encoded.trim_ascii())?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some((decoded[..colon].to_vec(), decoded[colon + 1..].to_vec()))
}

/// True when the request carries the credentials of a user with the `admin` right. Password
/// checks (PBKDF2) run off the async workers; failures feed the AUTH throttle of the address.
async fn authorized(shared: &Arc<Shared>, req: &Request<Incoming>, peer: SocketAddr) -> bool {
    let Some((user, pass)) = basic_credentials(req) else {
        return false;
    };
    let delay = shared.auth_throttle.delay(peer.ip());
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let checking = shared.clone();
    let ok = tokio::task::spawn_blocking(move || {
        let requirepass = checking.live.requirepass.lock().clone();
        checking.tenancy.user(&user).is_some_and(|u| {
            u.perms.contains(crate::tenancy::Perms::ADMIN) && u.verify(&pass, &requirepass)
        })
    })
    .await
    .unwrap_or(false);
    if ok {
        shared.auth_throttle.succeeded(peer.ip());
    } else {
        shared.auth_throttle.failed(peer.ip());
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_pass_on_a_loopback_listener() {
        let h = |s: &'static str| Some(HeaderValue::from_static(s));
        assert!(host_is_loopback(h("127.0.0.1:9121").as_ref()));
        assert!(host_is_loopback(h("localhost").as_ref()));
        assert!(host_is_loopback(h("[::1]:80").as_ref()));
        assert!(!host_is_loopback(h("evil.example:9121").as_ref()));
        assert!(!host_is_loopback(None));
    }
}
