//! A mock of Google's OAuth2 token endpoint (`POST https://oauth2.googleapis.com/token`) for
//! service-account key files: it verifies the JWT assertion as Google does and issues tokens
//! into a [`TokenIssuer`] (the one the Vertex mock checks, see `gcp_metadata.rs`).
//!
//! - The body is form-encoded `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&
//!   assertion=<jwt>`; the JWT's header must be `{"alg": "RS256", "kid": <the key's id>}`, its
//!   RS256 signature must verify with the key's public half (ring, independent of the filter's
//!   own RSA), `iss` must be the account, `aud` the token URI, `scope` must include
//!   cloud-platform, `iat` within five minutes of now and `exp` at most an hour after `iat`.
//!   Anything else is Google's 400 `invalid_grant` (counted, [`TokenEndpoint::refused`]).
//! - [`TokenEndpoint::set_down`]: every connection is closed unanswered until it is up again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::gcp_metadata::TokenIssuer;

/// What the endpoint accepts: the account, its key id and public half, and the token URI.
#[derive(Debug, Clone)]
pub struct Expected {
    pub client_email: String,
    pub private_key_id: String,
    /// PKCS#1 RSAPublicKey, DER.
    pub public_key_der: Vec<u8>,
    pub token_uri: String,
}

/// A running mock token endpoint.
#[derive(Clone)]
pub struct TokenEndpoint {
    pub addr: SocketAddr,
    pub issuer: Arc<TokenIssuer>,
    down: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
}

impl TokenEndpoint {
    /// Binds 127.0.0.1 (a free port), serves on the current tokio runtime; tokens live `life`.
    pub async fn start(expected: Expected, life: Duration) -> std::io::Result<TokenEndpoint> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let ep = TokenEndpoint {
            addr,
            issuer: Arc::new(TokenIssuer::default()),
            down: Arc::new(AtomicBool::new(false)),
            refused: Arc::new(AtomicU64::new(0)),
        };
        let (shared, expected) = (ep.clone(), Arc::new(expected));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                if shared.down.load(Ordering::SeqCst) {
                    drop(stream);
                    continue;
                }
                let (ep, expected) = (shared.clone(), Arc::clone(&expected));
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let (ep, expected) = (ep.clone(), Arc::clone(&expected));
                        async move { Ok::<_, std::convert::Infallible>(ep.answer(&expected, life, req).await) }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(ep)
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Assertions refused so far (bad signature, claims or grant).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    async fn answer(
        &self,
        expected: &Expected,
        life: Duration,
        req: Request<hyper::body::Incoming>,
    ) -> Response<Full<Bytes>> {
        let form_ok = req.method() == hyper::Method::POST
            && req.headers().get("content-type").and_then(|v| v.to_str().ok())
                == Some("application/x-www-form-urlencoded");
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => return reply(400, json!({"error": "invalid_request"})),
        };
        let verdict = if form_ok { verify(expected, &String::from_utf8_lossy(&body)) } else { Err("not a form POST") };
        match verdict {
            Ok(()) => {
                let token = self.issuer.issue("ya29.c.", life);
                reply(200, json!({"access_token": token, "expires_in": life.as_secs(), "token_type": "Bearer"}))
            }
            Err(why) => {
                self.refused.fetch_add(1, Ordering::SeqCst);
                reply(400, json!({"error": "invalid_grant", "error_description": why}))
            }
        }
    }
}

fn reply(status: u16, body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::BAD_REQUEST);
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}

fn b64url(s: &str) -> Option<Vec<u8>> {
    switchyard::protocol::base64::decode(&s.replace('-', "+").replace('_', "/"))
}

/// Google's checks of a JWT-bearer grant.
pub fn verify(expected: &Expected, form: &str) -> Result<(), &'static str> {
    let grant = crate::mock::query_param(form, "grant_type").ok_or("no grant_type")?;
    if grant != "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
        && grant != "urn:ietf:params:oauth:grant-type:jwt-bearer"
    {
        return Err("Invalid grant_type");
    }
    let jwt = crate::mock::query_param(form, "assertion").ok_or("no assertion")?;
    let mut parts = jwt.split('.');
    let (Some(h), Some(c), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err("Invalid JWT");
    };
    let header: Value = b64url(h).and_then(|b| serde_json::from_slice(&b).ok()).ok_or("Invalid JWT header")?;
    if header["alg"] != "RS256" || header["kid"] != expected.private_key_id.as_str() {
        return Err("Invalid JWT header: alg or kid");
    }
    let sig = b64url(s).ok_or("Invalid JWT signature encoding")?;
    let key =
        ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, &expected.public_key_der);
    key.verify(format!("{h}.{c}").as_bytes(), &sig).map_err(|_| "Invalid JWT Signature.")?;
    let claims: Value = b64url(c).and_then(|b| serde_json::from_slice(&b).ok()).ok_or("Invalid JWT claims")?;
    if claims["iss"] != expected.client_email.as_str() || claims["aud"] != expected.token_uri.as_str() {
        return Err("Invalid JWT: iss or aud");
    }
    let scope = claims["scope"].as_str().unwrap_or_default();
    if !scope.split(' ').any(|s| s == switchyard::tokens::CLOUD_PLATFORM_SCOPE) {
        return Err("Invalid JWT: scope");
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (iat, exp) = (claims["iat"].as_u64().unwrap_or(0), claims["exp"].as_u64().unwrap_or(0));
    if iat.abs_diff(now) > 300 || exp <= iat || exp - iat > 3600 {
        return Err("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.");
    }
    Ok(())
}
