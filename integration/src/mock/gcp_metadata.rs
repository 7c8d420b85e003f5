//! A mock GKE / GCE metadata server issuing OAuth2 access tokens, and the check a mock Google
//! Cloud provider makes of them ([`TokenIssuer::check`]): only a token this server issued and
//! that has not expired is accepted, as Google's APIs accept only live tokens.
//!
//! - `GET /computeMetadata/v1/instance/service-accounts/<account>/token[?scopes=...]` with
//!   `Metadata-Flavor: Google` answers `{"access_token", "expires_in", "token_type": "Bearer"}`
//!   with a fresh token living the configured lifetime (short in tests: a token expires under
//!   load). Without the header, or with `X-Forwarded-For`, it is the server's 403; another path
//!   its 404; the account must be `default` or the one configured.
//! - Every fetch is counted ([`TokenIssuer::fetches`]), and so is every check by outcome.
//! - [`MetadataServer::set_down`]: the server closes every connection without answering (the
//!   metadata server unreachable) until it is up again.
//! - [`TokenIssuer::expire_all`]: every token issued so far is expired at once (a token that
//!   lapsed while the proxy still holds it).
//!
//! A mock provider checks the token with `Behavior::google_tokens` (any API: the token is in
//! `authorization: Bearer`); the Vertex mock calls [`TokenIssuer::check`] itself.
//!
//! The server (its down switch, its issuer) serves Azure's IMDS too ([`MetadataServer::serve`]
//! with the answers of `azure_imds`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;

const TOKEN_PATH_PREFIX: &str = "/computeMetadata/v1/instance/service-accounts/";

/// The tokens a metadata server issued, shared with the providers that check them.
#[derive(Debug, Default)]
pub struct TokenIssuer {
    /// Token -> when it expires.
    issued: Mutex<HashMap<String, Instant>>,
    fetches: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    next: AtomicU64,
}

/// Why a token was refused (Google's 401 `UNAUTHENTICATED`, with its message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No `authorization: Bearer` at all.
    Missing,
    /// A token this server never issued.
    Unknown,
    /// An issued token past its expiry.
    Expired,
}

impl TokenIssuer {
    /// A fresh token living `life`, `<prefix>mock-<n>.<pid>` (Google's look like `ya29.`,
    /// Entra's like a JWT, `eyJ0...`), counted as a fetch.
    pub(crate) fn issue(&self, prefix: &str, life: Duration) -> String {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let token = format!("{prefix}mock-{n}.{}", std::process::id());
        if let Ok(mut m) = self.issued.lock() {
            m.insert(token.clone(), Instant::now() + life);
        }
        token
    }

    /// Token fetches answered so far.
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::SeqCst)
    }

    /// Checks accepted and refused so far.
    pub fn checks(&self) -> (u64, u64) {
        (self.accepted.load(Ordering::SeqCst), self.refused.load(Ordering::SeqCst))
    }

    /// Every token issued so far expires now.
    pub fn expire_all(&self) {
        if let Ok(mut m) = self.issued.lock() {
            let now = Instant::now();
            for exp in m.values_mut() {
                *exp = now;
            }
        }
    }

    /// Whether `authorization` carries a token this server issued that has not expired.
    pub fn check(&self, authorization: Option<&str>) -> Result<(), Refused> {
        let r = self.check_inner(authorization);
        let counter = if r.is_ok() { &self.accepted } else { &self.refused };
        counter.fetch_add(1, Ordering::SeqCst);
        r
    }

    fn check_inner(&self, authorization: Option<&str>) -> Result<(), Refused> {
        let token = authorization.and_then(|a| a.strip_prefix("Bearer ")).ok_or(Refused::Missing)?;
        let expiry = self.issued.lock().ok().and_then(|m| m.get(token).copied()).ok_or(Refused::Unknown)?;
        if Instant::now() >= expiry {
            return Err(Refused::Expired);
        }
        Ok(())
    }
}

/// Google's 401 for a refused token (`google.rpc.Status` in `error`, as every Google API answers).
pub fn refusal_json(why: Refused) -> Value {
    let message = match why {
        Refused::Missing => "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        Refused::Unknown | Refused::Expired => "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
    };
    json!({"error": {"code": 401, "message": message, "status": "UNAUTHENTICATED"}})
}

/// A running mock metadata server.
#[derive(Clone)]
pub struct MetadataServer {
    pub addr: SocketAddr,
    pub issuer: Arc<TokenIssuer>,
    down: Arc<AtomicBool>,
}

/// A Google metadata server for the whole test process, on a thread of its own, and where it
/// listens: for tests that run the shipped catalog without looking at its token providers (they
/// still must not reach 169.254.169.254; `Catalog::with_metadata_server`).
pub fn process_wide() -> (String, u16) {
    static PORT: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    let port = *PORT.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                let server = MetadataServer::start(Duration::from_secs(3_600), "default").await.expect("metadata");
                let _ = tx.send(server.addr.port());
                std::future::pending::<()>().await;
            });
        });
        rx.recv().expect("the process-wide metadata server started")
    });
    ("127.0.0.1".to_string(), port)
}

/// How a metadata server answers one request, issuing from its issuer.
pub type Answerer = Arc<dyn Fn(&TokenIssuer, &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> + Send + Sync>;

impl MetadataServer {
    /// Google's metadata server: binds 127.0.0.1 (any free port) and serves on the current tokio
    /// runtime; tokens live `life` (sent as `expires_in`, whole seconds). `account`: the email it
    /// also answers for besides `default`.
    pub async fn start(life: Duration, account: &str) -> std::io::Result<MetadataServer> {
        let account = account.to_string();
        MetadataServer::serve(Arc::new(move |issuer, req| answer(issuer, &account, life, req))).await
    }

    /// A metadata server answering with `answer` (Google's or Azure's), on 127.0.0.1.
    pub async fn serve(answer: Answerer) -> std::io::Result<MetadataServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let issuer = Arc::new(TokenIssuer::default());
        let down = Arc::new(AtomicBool::new(false));
        let (i, d) = (Arc::clone(&issuer), Arc::clone(&down));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                if d.load(Ordering::SeqCst) {
                    drop(stream); // unreachable: closed without a byte
                    continue;
                }
                let (i, d, answer) = (Arc::clone(&i), Arc::clone(&d), Arc::clone(&answer));
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let answer = if d.load(Ordering::SeqCst) {
                            text(503, "text/plain", "metadata server down".into())
                        } else {
                            answer(&i, &req)
                        };
                        async move { Ok::<_, std::convert::Infallible>(answer) }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(MetadataServer { addr, issuer, down })
    }

    /// Down: every new connection is closed unanswered (a request on a kept-alive connection
    /// gets a 503). Up again: answered.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }
}

fn text(status: u16, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r.headers_mut().insert("metadata-flavor", hyper::header::HeaderValue::from_static("Google"));
    r
}

fn answer(
    issuer: &TokenIssuer,
    account: &str,
    life: Duration,
    req: &Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    // The metadata server refuses a request without the flavor header (a browser's redirect).
    let flavored = req.headers().get("metadata-flavor").and_then(|v| v.to_str().ok()) == Some("Google");
    if !flavored {
        return text(403, "text/html", "Missing required header: Metadata-Flavor".into());
    }
    // Nor one a proxy forwarded: "requests that contain the header X-Forwarded-For are
    // automatically rejected" (Envoy's native callouts add one; the cluster takes it off).
    if req.headers().contains_key("x-forwarded-for") {
        return text(403, "text/html", "Requests with X-Forwarded-For are rejected".into());
    }
    let path = req.uri().path();
    let sa = path.strip_prefix(TOKEN_PATH_PREFIX).and_then(|r| r.strip_suffix("/token"));
    let known = sa.is_some_and(|sa| sa == "default" || sa == account);
    if req.method() != hyper::Method::GET || !known {
        return text(404, "text/html", "Not Found".into());
    }
    // Scopes, when asked, must include cloud-platform (what Vertex AI needs).
    let scopes = req.uri().query().and_then(|q| crate::mock::query_param(q, "scopes")).unwrap_or_default();
    if !scopes.is_empty() && !scopes.split(',').any(|s| s == switchyard::tokens::CLOUD_PLATFORM_SCOPE) {
        return text(400, "text/plain", "scopes must include cloud-platform in this mock".into());
    }
    let token = issuer.issue("ya29.", life);
    let body = json!({"access_token": token, "expires_in": life.as_secs(), "token_type": "Bearer"});
    text(200, "application/json", body.to_string())
}
