//! A fast mock LLM provider: an HTTP/1.1 (and h2 over TLS) server on 127.0.0.1 that behaves
//! like a real one (latency, time to first token, SSE streaming, 429 with Retry-After, 5xx,
//! connection resets, a concurrency capacity) and records exactly what it received.
//!
//! It speaks three APIs, chosen by the request path (see [`Api`]): OpenAI's (every path not
//! claimed by the others), Anthropic's Messages API (`POST /v1/messages`, [`anthropic`]) and
//! Google's Gemini API (`POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent`, [`google`]). Every fault of `x-mock-behavior` works on every API,
//! answered in that API's own shapes. A provider playing Azure OpenAI (`Behavior::azure`) takes
//! paths under `/openai/` as Azure's ([`azure`]: its deployments and v1 paths, `api-key`,
//! `api-version`, the prompt filter chunk, content-filter refusals); deployments paths always are.
//!
//! As strict as the real APIs where a lenient mock would hide a defect: each API refuses a request
//! without its key (OpenAI on its generation paths: [`openai`]) and a body with a top-level field
//! it does not document, with the real API's 400 (OpenAI: `Unrecognized request argument
//! supplied: <field>`, `error.param`; Anthropic: `<field>: Extra inputs are not permitted`;
//! Google: `Unknown name "<field>"`), so an OpenRouter field that leaks to a provider fails the
//! test (Anthropic also refuses one without `max_tokens`; the OpenAI API is OpenAI's own unless
//! `compat` makes it an OpenAI-compatible host's, see [`openai`]); an OpenAI stream ends with its
//! usage only when the body asks (`stream_options.include_usage`), alone in a last chunk without
//! choices; Gemini reports a 429's delay only in the body (`RetryInfo`), never in `retry-after`.

mod agent;
mod anthropic;
mod azure;
pub mod azure_imds;
pub mod bedrock;
pub mod converse;
pub mod gcp_metadata;
mod google;
pub mod google_oauth2;
mod openai;
mod responses;
pub mod strict;
pub mod vertex;

pub use azure::AZURE_KEY;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::tls::Identity;

/// How the provider answers.
#[derive(Clone, Debug)]
pub enum Mode {
    /// 200 with a completion (streamed when the request asks: `"stream": true`, or Google's
    /// `:streamGenerateContent`).
    Ok,
    /// This status with the API's error body (OpenAI's, Anthropic's or Google's shape);
    /// `retry_after` (seconds) adds the `retry-after` header (OpenAI, Anthropic) or, as Gemini
    /// reports it, only a `RetryInfo` detail in the body (Google).
    Status { status: u16, retry_after: Option<u32> },
    /// Close the connection without answering.
    Reset,
    /// 200 whose body is not what was asked for: broken JSON, or for a stream one broken event
    /// and no terminating event (`[DONE]`, `message_stop`, a `finishReason`).
    Garbage,
}

#[derive(Clone, Debug)]
pub struct Behavior {
    pub mode: Mode,
    /// Delay before the response headers (and the first SSE chunk).
    pub ttft: Duration,
    /// Delay between SSE chunks.
    pub chunk_interval: Duration,
    /// Number of content chunks in a stream.
    pub chunks: usize,
    /// Requests in flight above this get 429 with `Retry-After: 1` (Google: `retryDelay` 1s).
    pub capacity: Option<usize>,
    /// Error responses without a body.
    pub empty_errors: bool,
    /// Streams stop after this many content chunks: the body ends without the closing events
    /// (OpenAI: the finish chunk, the usage chunk when asked, and `data: [DONE]`; Anthropic: `content_block_stop`,
    /// `message_delta`, `message_stop`; Google: the chunk with `finishReason`) (`cut<n>`), or
    /// the connection is aborted mid-body (`abort<n>`), or the stream carries the API's
    /// in-stream error event (overloaded) and ends there (`sserror<n>`).
    pub cut_after: Option<(usize, CutKind)>,
    /// Answer with a tool call (`get_weather`) instead of text: well-formed (`tool`) or with
    /// arguments that are not JSON (`badtool`).
    pub tool_call: Option<bool>,
    /// Error responses with an HTML body (a gateway's error page) instead of JSON.
    pub html_errors: bool,
    /// Non-streaming answers carry this many bytes of content, sent in 16 KiB chunks without
    /// `content-length` (chunked).
    pub big_body: Option<usize>,
    /// `big<bytes>` answers announce their length (`content-length`), still sent in 16 KiB
    /// chunks (`sized`).
    pub big_sized: bool,
    /// `usage.prompt_tokens_details.cached_tokens` reported.
    pub cached_tokens: Option<u64>,
    /// Answers gzipped whatever the request's `accept-encoding` says (`gzip`), as a provider that
    /// ignores `identity` does.
    pub force_gzip: bool,
    /// The OpenAI API is an OpenAI-compatible host's (`compat`), which also takes `top_k`,
    /// `min_p`, `top_a` and `repetition_penalty`; by default it is OpenAI's own.
    pub openai_compatible: bool,
    /// OpenAI chat and Anthropic answers follow the scripted coding-agent model of [`agent`]
    /// (`agent`).
    pub agent: bool,
    /// The fault (status, reset, garbage) applies only to a request whose last message is a
    /// tool's result (`onresult`): a provider that fails mid-session.
    pub fault_on_result: bool,
    /// Azure (paths under `/openai/`, see [`azure`]): the prompt trips the content filter, a 400
    /// `content_filter` (`filter`), or the answer is cut by it, `finish_reason:
    /// "content_filter"` (`filterout`).
    pub content_filter: Option<bool>,
    /// Every request must carry `authorization: Bearer <token>` with a live token this metadata
    /// server issued (a Google Cloud provider: [`gcp_metadata`]); any other is Google's 401.
    pub google_tokens: Option<Arc<gcp_metadata::TokenIssuer>>,
    /// The provider is an Azure OpenAI resource (`azure`): every path under `/openai/` is
    /// Azure's. Without it only `/openai/deployments/...` is (an OpenAI-compatible host such as
    /// Groq serves `/openai/v1/...` too).
    pub azure: bool,
    /// Azure: the one `api-key` the resource accepts (None: [`AZURE_KEY`]).
    pub azure_key: Option<String>,
    /// Azure: Microsoft Entra tokens are taken too (`authorization: Bearer`, no `api-key`),
    /// those this mock IMDS issued ([`azure_imds`]) while they live; any other is Azure's 401.
    pub azure_tokens: Option<Arc<gcp_metadata::TokenIssuer>>,
    /// Vertex AI (paths under `/v1/projects/`, see [`vertex`]): the access tokens it accepts
    /// (None: [`vertex::TOKEN`]); a test expires one by leaving it out.
    pub vertex_tokens: Option<Vec<String>>,
    /// Vertex AI: the project it serves (None: [`vertex::PROJECT`]).
    pub vertex_project: Option<String>,
}

/// How a stream is cut short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutKind {
    /// The body ends cleanly (HTTP-wise) but without the terminating SSE event.
    CleanEnd,
    /// The connection is aborted mid-body.
    Abort,
    /// The API's in-stream error event (as a provider overloaded mid-answer sends it: OpenAI
    /// `data: {"error":{..}}`, Anthropic `event: error` with `overloaded_error`, Google
    /// `data: {"error":{"code":503,..,"status":"UNAVAILABLE"}}`), then the body ends cleanly.
    ErrorEvent,
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            mode: Mode::Ok,
            ttft: Duration::ZERO,
            chunk_interval: Duration::ZERO,
            chunks: 3,
            capacity: None,
            empty_errors: false,
            cut_after: None,
            tool_call: None,
            html_errors: false,
            big_body: None,
            big_sized: false,
            cached_tokens: None,
            force_gzip: false,
            openai_compatible: false,
            agent: false,
            fault_on_result: false,
            content_filter: None,
            azure: false,
            google_tokens: None,
            azure_key: None,
            azure_tokens: None,
            vertex_tokens: None,
            vertex_project: None,
        }
    }
}

/// The provider API a request speaks, told by its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// OpenAI's (chat completions, completions, responses, and every path the others do not claim).
    OpenAi,
    /// Anthropic's Messages API: `POST /v1/messages`.
    Anthropic,
    /// Google's Gemini API: `POST /v1beta/models/{model}:generateContent` or `:streamGenerateContent`
    /// (also under `/v1/`).
    Google,
}

impl Api {
    /// The API of a request path (without the query). Allocation-free: it runs on every request.
    pub fn of_path(path: &str) -> Api {
        if path == "/v1/messages" {
            Api::Anthropic
        } else if let Some(api) = vertex::call_of(path).and_then(|c| c.api()) {
            api
        } else if google::model_and_method(path).is_some() {
            Api::Google
        } else {
            Api::OpenAi
        }
    }
}

/// One request as the provider saw it.
#[derive(Clone, Debug)]
pub struct Received {
    /// The API the path belongs to.
    pub api: Api,
    pub method: String,
    pub path: String,
    /// Lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub version: String,
    /// Received over TLS.
    pub tls: bool,
    /// Arrival order across every mock provider of the process (attempts of one request in the
    /// order they reached their providers; providers never see Envoy's attempt count).
    pub seq: u64,
}

/// A cluster token as `slots::slot_token` or `keyed_slot_token` writes it: 16 lower-case hex
/// digits.
fn is_token(v: &str) -> bool {
    v.len() == 16 && v.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

use switchyard::wiring::NEXT_CLUSTER_HEADER;

/// The next arrival number (`Received::seq`).
static ARRIVALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The credential this request carried where its API expects one: `authorization` (OpenAI),
    /// `x-api-key` or else `authorization` (Anthropic), `x-goog-api-key` or else the `key` query
    /// parameter (Google).
    pub fn credential(&self) -> Option<&str> {
        match self.api {
            Api::OpenAi => self.header("authorization"),
            Api::Anthropic => self.header("x-api-key").or_else(|| self.header("authorization")),
            Api::Google => self
                .header("x-goog-api-key")
                .or_else(|| self.path.split_once('?').and_then(|(_, q)| query_param(q, "key"))),
        }
    }
}

impl Received {
    /// Every `x-envoy-*` and `x-switchyard-*` header this attempt carried. Empty for a clean
    /// attempt: on plain Envoy the next attempt's cluster travels in filter state.
    pub fn internal_headers(&self) -> Vec<(String, String)> {
        self.headers
            .iter()
            .filter(|(k, _)| k.starts_with("x-envoy-") || k.starts_with(switchyard::wiring::INTERNAL_PREFIX))
            .cloned()
            .collect()
    }

    /// `internal_headers` beyond the one a retried attempt carries where the matcher can read
    /// only headers (istio-proxy: `next_token`, see the filter's `slots` module).
    pub fn internal_headers_but_next_token(&self) -> Vec<(String, String)> {
        self.internal_headers().into_iter().filter(|(k, v)| !(k == NEXT_CLUSTER_HEADER && is_token(v))).collect()
    }

    /// The next attempt's cluster token this attempt carried (None: nothing could follow it).
    pub fn next_token(&self) -> Option<&str> {
        self.header(NEXT_CLUSTER_HEADER)
    }

    /// How this request differs from what a caller sent through a proxy that must leave it
    /// alone (None: not at all): the method, path and body byte for byte, every header the caller
    /// sent with its value, nothing added but a matching `content-length` and `proxy_adds` (the
    /// proxy's own, such as `x-request-id`), and no header carrying any of `secrets`.
    pub fn differs_from_sent(
        &self,
        method: &str,
        path: &str,
        sent: &[(&str, &str)],
        body: &[u8],
        proxy_adds: &[&str],
        secrets: &[&str],
    ) -> Option<String> {
        if self.method != method || self.path != path {
            return Some(format!("{} {} instead of {method} {path}", self.method, self.path));
        }
        if self.body[..] != *body {
            return Some(format!("body changed: {:?}", String::from_utf8_lossy(&self.body)));
        }
        for (k, v) in sent {
            if self.header(k) != Some(*v) {
                return Some(format!("{k} changed or removed: {:?}", self.headers));
            }
        }
        for (k, v) in &self.headers {
            let length = k == "content-length" && v.parse::<usize>().ok() == Some(body.len());
            if !(sent.iter().any(|(s, _)| s == k) || length || proxy_adds.contains(&k.as_str())) {
                return Some(format!("added header {k}: {v}"));
            }
            if secrets.iter().any(|secret| v.contains(secret)) {
                return Some(format!("a secret reached it: {k}: {v}"));
            }
        }
        None
    }
}

/// Every (provider name, request) the `providers` received for this test id.
pub fn received_by(providers: &[MockProvider], test_id: &str) -> Vec<(String, Received)> {
    providers.iter().flat_map(|p| p.received_for(test_id).into_iter().map(move |r| (p.name.clone(), r))).collect()
}

/// As `received_by`, in arrival order (a request's attempts in the order they were sent).
pub fn received_in_order(providers: &[MockProvider], test_id: &str) -> Vec<(String, Received)> {
    let mut got = received_by(providers, test_id);
    got.sort_by_key(|(_, r)| r.seq);
    got
}

/// The raw value of `name` in a query string (`a=1&key=v`), not percent-decoded.
pub fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

struct Shared {
    name: String,
    behavior: Mutex<Behavior>,
    received: Mutex<Vec<Received>>,
    in_flight: AtomicUsize,
    served: AtomicU64,
}

/// A running mock provider. It stops when the tokio runtime that started it stops.
#[derive(Clone)]
pub struct MockProvider {
    pub name: String,
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl MockProvider {
    /// Binds 127.0.0.1:`port` (0 = any free port) and serves on the current tokio runtime.
    pub async fn start(name: &str, port: u16, behavior: Behavior) -> std::io::Result<MockProvider> {
        MockProvider::start_with(name, port, behavior, None).await
    }

    /// An HTTPS provider presenting `identity`; `http2` offers h2 by ALPN (else HTTP/1.1 only).
    pub async fn start_tls(
        name: &str,
        port: u16,
        behavior: Behavior,
        identity: &Identity,
        http2: bool,
    ) -> std::io::Result<MockProvider> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(identity.key_der.clone()));
        let certs = vec![CertificateDer::from(identity.cert_der.clone())];
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
            .map_err(std::io::Error::other)?;
        config.alpn_protocols =
            if http2 { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] };
        MockProvider::start_with(name, port, behavior, Some(TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn start_with(
        name: &str,
        port: u16,
        behavior: Behavior,
        tls: Option<TlsAcceptor>,
    ) -> std::io::Result<MockProvider> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            name: name.to_string(),
            behavior: Mutex::new(behavior),
            received: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            served: AtomicU64::new(0),
        });
        let s = Arc::clone(&shared);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let _ = stream.set_nodelay(true);
                let s = Arc::clone(&s);
                let tls = tls.clone();
                tokio::spawn(async move {
                    let Some(acceptor) = tls else {
                        let svc = hyper::service::service_fn(move |req| handle(Arc::clone(&s), req, false));
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                        return;
                    };
                    // A failed handshake (the client rejected our certificate) ends here: no
                    // HTTP request is ever read from it.
                    let Ok(stream) = acceptor.accept(stream).await else { return };
                    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                    let svc = hyper::service::service_fn(move |req| handle(Arc::clone(&s), req, true));
                    if h2 {
                        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    }
                });
            }
        });
        Ok(MockProvider { name: name.to_string(), addr, shared })
    }

    pub fn set_behavior(&self, b: Behavior) {
        if let Ok(mut g) = self.shared.behavior.lock() {
            *g = b;
        }
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Requests carrying `x-test-id: <id>` (tests tag requests to share one provider set).
    pub fn received_for(&self, test_id: &str) -> Vec<Received> {
        self.received().into_iter().filter(|r| r.header("x-test-id") == Some(test_id)).collect()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Per-request behaviour from the `x-mock-behavior` request header, so parallel tests can share
/// providers: `alpha=429/7,beta=503,delta=reset,gamma=ttft300+interval50+chunks8`. Every token
/// works on every API, answered in that API's shapes (errors, events, usage fields).
/// Tokens (joined by `+`): `ok`, `reset`, `<status>` or `<status>/<retry-after s>`,
/// `ttft<ms>`, `interval<ms>`, `chunks<n>`, `empty` (error responses without a body),
/// `cut<n>` / `abort<n>` / `sserror<n>` (a stream stops after n chunks: clean end without
/// `[DONE]`, an aborted connection, or the API's in-stream error event), `tool` / `badtool` (answer with a well-formed or malformed tool call),
/// `cap<n>` (requests in flight above n get 429 with `Retry-After: 1`), `html` (error responses
/// with an HTML page), `big<bytes>` (a large chunked answer; with `sized` it carries a
/// `content-length`), `cached<n>` (cached prompt tokens
/// in `usage`; Anthropic: `cache_read_input_tokens`; Google: `cachedContentTokenCount`), `gzip`
/// (answers compressed even when the request asked for `identity`), `compat` (the OpenAI API is
/// an OpenAI-compatible host's: `Behavior::openai_compatible`), `agent` (OpenAI chat and
/// Anthropic answers scripted as a coding agent's model: [`agent`]), `onresult` (the fault only on a request
/// carrying a tool's result), `azure` (the provider is an Azure
/// OpenAI resource: `Behavior::azure`), `filter` / `filterout` (Azure's
/// content filter refuses the prompt or cuts the answer: `Behavior::content_filter`).
pub fn apply_override(b: &mut Behavior, name: &str, header: &str) {
    for entry in header.split(',') {
        let Some((who, spec)) = entry.trim().split_once('=') else { continue };
        if who != name {
            continue;
        }
        for tok in spec.split('+') {
            if tok == "ok" {
                b.mode = Mode::Ok;
            } else if tok == "garbage" {
                b.mode = Mode::Garbage;
            } else if tok == "reset" {
                b.mode = Mode::Reset;
            } else if tok == "empty" {
                b.empty_errors = true;
            } else if tok == "html" {
                b.html_errors = true;
            } else if tok == "gzip" {
                b.force_gzip = true;
            } else if tok == "azure" {
                b.azure = true;
            } else if tok == "filter" || tok == "filterout" {
                b.content_filter = Some(tok == "filter");
            } else if tok == "compat" {
                b.openai_compatible = true;
            } else if tok == "agent" {
                b.agent = true;
            } else if tok == "onresult" {
                b.fault_on_result = true;
            } else if tok == "sized" {
                b.big_sized = true;
            } else if let Some(n) = tok.strip_prefix("big") {
                b.big_body = n.parse().ok();
            } else if let Some(n) = tok.strip_prefix("cached") {
                b.cached_tokens = n.parse().ok();
            } else if let Some(ms) = tok.strip_prefix("ttft") {
                b.ttft = Duration::from_millis(ms.parse().unwrap_or(0));
            } else if let Some(ms) = tok.strip_prefix("interval") {
                b.chunk_interval = Duration::from_millis(ms.parse().unwrap_or(0));
            } else if let Some(n) = tok.strip_prefix("chunks") {
                b.chunks = n.parse().unwrap_or(3);
            } else if tok == "tool" || tok == "badtool" {
                b.tool_call = Some(tok == "tool");
            } else if let Some(n) = tok.strip_prefix("cap") {
                b.capacity = n.parse().ok();
            } else if let Some(n) = tok.strip_prefix("sserror") {
                b.cut_after = Some((n.parse().unwrap_or(2), CutKind::ErrorEvent));
            } else if let Some(n) = tok.strip_prefix("cut") {
                b.cut_after = Some((n.parse().unwrap_or(2), CutKind::CleanEnd));
            } else if let Some(n) = tok.strip_prefix("abort") {
                b.cut_after = Some((n.parse().unwrap_or(2), CutKind::Abort));
            } else {
                let (status, ra) = tok.split_once('/').map_or((tok, None), |(s, r)| (s, r.parse().ok()));
                if let Ok(status) = status.parse() {
                    b.mode = Mode::Status { status, retry_after: ra };
                }
            }
        }
    }
}

/// A response body fed from a channel, so chunks leave when they are produced. An `Err` item
/// makes hyper abort the connection mid-body (a provider that dies while streaming).
pub struct ChannelBody(pub mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }
}

/// Tool-call arguments the mock sends: valid JSON, or broken JSON.
fn tool_arguments(valid: bool) -> &'static str {
    if valid {
        r#"{"city":"Paris"}"#
    } else {
        r#"{"city": Paris"#
    }
}

fn tool_completion_json(provider: &str, model: &str, id: u64, valid: bool) -> Value {
    json!({
        "id": format!("chatcmpl-{provider}-{id}"),
        "object": "chat.completion",
        "created": 1_700_000_000u64,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": tool_arguments(valid)}}
        ]}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18}
    })
}

/// Two stream chunks carrying one tool call, its arguments split between them.
fn tool_chunks(provider: &str, model: &str, id: u64, valid: bool) -> [String; 2] {
    let args = tool_arguments(valid);
    let (a, b) = args.split_at(args.len() / 2);
    let chunk = |delta: Value| {
        let v = json!({"id": format!("chatcmpl-{provider}-{id}"), "object": "chat.completion.chunk", "created": 1_700_000_000u64,
            "model": model, "choices": [{"index": 0, "delta": {"tool_calls": [delta]}, "finish_reason": null}]});
        format!("data: {v}\n\n")
    };
    [
        chunk(
            json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": a}}),
        ),
        chunk(json!({"index": 0, "function": {"arguments": b}})),
    ]
}

fn completion_json(provider: &str, model: &str, id: u64, prompt_tokens: u64, b: &Behavior) -> Value {
    let content = answer_text(provider, b);
    let mut usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": 4, "total_tokens": prompt_tokens + 4});
    if let Some(c) = b.cached_tokens {
        usage["prompt_tokens_details"] = json!({"cached_tokens": c});
    }
    json!({
        "id": format!("chatcmpl-{provider}-{id}"),
        "object": "chat.completion",
        "created": 1_700_000_000u64,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": usage
    })
}

/// Gzip, flushed after every piece so a compressed stream still arrives chunk by chunk.
struct Gzip(flate2::write::GzEncoder<Vec<u8>>);

impl Gzip {
    fn new() -> Gzip {
        Gzip(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()))
    }
    fn piece(&mut self, data: &[u8]) -> Bytes {
        use std::io::Write;
        let _ = self.0.write_all(data);
        let _ = self.0.flush();
        Bytes::from(std::mem::take(self.0.get_mut()))
    }
    fn finish(self) -> Bytes {
        Bytes::from(self.0.finish().unwrap_or_default())
    }
}

/// A content chunk (`content`), or the last chunk with the finish reason (None). Asked for its
/// usage, OpenAI gives every chunk `"usage": null`.
fn chunk_json(provider: &str, model: &str, id: u64, content: Option<&str>, usage_asked: bool) -> String {
    let mut v = json!({
        "id": format!("chatcmpl-{provider}-{id}"),
        "object": "chat.completion.chunk",
        "created": 1_700_000_000u64,
        "model": model,
        "choices": [{"index": 0, "delta": content.map_or(json!({}), |c| json!({"content": c})), "finish_reason": if content.is_none() { json!("stop") } else { Value::Null }}],
    });
    if usage_asked {
        v["usage"] = Value::Null;
    }
    format!("data: {v}\n\n")
}

/// The usage chunk OpenAI sends last when asked (`stream_options.include_usage`): no choices;
/// `cached<n>` adds `prompt_tokens_details.cached_tokens` as in a whole answer.
fn usage_chunk_json(provider: &str, model: &str, id: u64, cached: Option<u64>) -> String {
    let mut v = json!({
        "id": format!("chatcmpl-{provider}-{id}"),
        "object": "chat.completion.chunk",
        "created": 1_700_000_000u64,
        "model": model,
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    });
    if let Some(c) = cached {
        v["usage"]["prompt_tokens_details"] = json!({"cached_tokens": c.min(5)});
    }
    format!("data: {v}\n\n")
}

struct InFlight(Arc<Shared>);
impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

type Sender = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// A stream's events: `head`, then `count` content events from `content(i)`, then `tail`;
/// `error` is the API's in-stream error event (made only when a fault asks for it).
struct Events<H, C, T, E> {
    head: H,
    count: usize,
    content: C,
    tail: T,
    error: E,
}

/// Sends a stream as a provider produces it: the head events, then the content events (spaced
/// by the chunk interval; cut short, aborted or ended by the error event as `cut_after` says,
/// in which case nothing more is sent), then the tail events. Gzipped piece by piece when
/// asked. Generic so the OpenAI path allocates nothing for it.
async fn send_stream<H, C, T, E>(tx: Sender, b: &Behavior, gzip: bool, events: Events<H, C, T, E>)
where
    H: IntoIterator<Item = Bytes>,
    C: FnMut(usize) -> Bytes,
    T: IntoIterator<Item = Bytes>,
    E: FnOnce() -> Bytes,
{
    let Events { head, count, mut content, tail, error } = events;
    let mut gz = gzip.then(Gzip::new);
    let mut wrap = |b: Bytes| -> Result<Bytes, std::io::Error> {
        Ok(match gz.as_mut() {
            Some(g) => g.piece(&b),
            None => b,
        })
    };
    for event in head {
        if tx.send(wrap(event)).await.is_err() {
            return;
        }
    }
    for i in 0..count {
        if i > 0 && !b.chunk_interval.is_zero() {
            tokio::time::sleep(b.chunk_interval).await;
        }
        if let Some((n, kind)) = b.cut_after {
            if i == n {
                match kind {
                    CutKind::CleanEnd => {}
                    CutKind::Abort => {
                        // Give the chunks already sent time to leave before the abort.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let _ = tx.send(Err(std::io::Error::other("mock aborts the stream"))).await;
                    }
                    CutKind::ErrorEvent => {
                        let _ = tx.send(wrap(error())).await;
                        if let Some(g) = gz {
                            let _ = tx.send(Ok(g.finish())).await;
                        }
                    }
                }
                return;
            }
        }
        if tx.send(wrap(content(i))).await.is_err() {
            return;
        }
    }
    for event in tail {
        let _ = tx.send(wrap(event)).await;
    }
    if let Some(g) = gz {
        let _ = tx.send(Ok(g.finish())).await;
    }
}

/// The headers of a streamed 200.
fn stream_head(provider: &str, content_type: &'static str, gzip: bool) -> hyper::http::response::Builder {
    let mut resp = Response::builder()
        .status(200)
        .header("content-type", content_type)
        .header("cache-control", "no-cache")
        .header("x-mock-provider", provider);
    if gzip {
        resp = resp.header("content-encoding", "gzip");
    }
    resp
}

/// A whole (non-streamed) 200 answer: gzipped when asked; sent with `content-length`, or
/// in 16 KiB pieces when `chunked` is set (large answers; `Some(true)`: with a `content-length`).
fn whole_answer(
    provider: &str,
    json: String,
    gzip: bool,
    chunked: Option<bool>,
) -> (hyper::http::response::Builder, ChannelBody) {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let mut out = Bytes::from(json);
    if gzip {
        let mut g = Gzip::new();
        let mut all = g.piece(&out).to_vec();
        all.extend_from_slice(&g.finish());
        out = Bytes::from(all);
    }
    let mut resp = Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .header("x-mock-provider", provider)
        .header("x-ratelimit-remaining-requests", "99");
    if gzip {
        resp = resp.header("content-encoding", "gzip");
    }
    if let Some(sized) = chunked {
        // In 16 KiB pieces; with `sized`, the length announced all the same.
        if sized {
            resp = resp.header("content-length", out.len());
        }
        tokio::spawn(async move {
            for piece in out.chunks(16 * 1024) {
                if tx.send(Ok(Bytes::copy_from_slice(piece))).await.is_err() {
                    return;
                }
            }
        });
    } else {
        resp = resp.header("content-length", out.len());
        let _ = tx.try_send(Ok(out));
    }
    (resp, ChannelBody(rx))
}

/// What an answer builder needs to know about the request.
struct Ask<'a> {
    provider: &'a str,
    /// The provider's running request number (ids in answers).
    id: u64,
    /// From the body (OpenAI, Anthropic) or the path (Google).
    model: String,
    stream: bool,
    /// Estimated from the body size, as a provider counts the prompt.
    prompt_tokens: u64,
    gzip: bool,
    /// OpenAI: the stream asked for its usage (`stream_options.include_usage`).
    stream_usage: bool,
    /// The request body (`agent` reads it).
    body: &'a [u8],
}

async fn handle(s: Arc<Shared>, req: Request<Incoming>, tls: bool) -> Result<Response<ChannelBody>, BoxError> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let api = Api::of_path(parts.uri.path());
    let headers = crate::client::header_pairs(&parts.headers);
    let mut full_headers: Vec<(String, String)> = headers;
    // hyper moves :authority into Host for HTTP/1.1; record both views for assertions.
    if let Some(h) = parts.uri.authority() {
        full_headers.push((":authority".into(), h.to_string()));
    }
    if let Some(scheme) = parts.uri.scheme_str() {
        full_headers.push((":scheme".into(), scheme.to_string()));
    }
    if let Ok(mut g) = s.received.lock() {
        g.push(Received {
            api,
            method: parts.method.to_string(),
            path: parts.uri.path_and_query().map_or_else(|| parts.uri.to_string(), |p| p.to_string()),
            headers: full_headers.clone(),
            body: body.clone(),
            version: format!("{:?}", parts.version),
            tls,
            seq: ARRIVALS.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        });
    }
    // Each API turns away a request without its credential before anything else, then a body it
    // does not accept (a field it does not document; Anthropic: no `max_tokens`), as the real
    // APIs do. OpenAI is checked on its generation paths (the mock also plays other services).
    let header = |name: &str| full_headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let mut behavior = s.behavior.lock().map(|b| b.clone()).unwrap_or_default();
    if let Some(spec) = header("x-mock-behavior") {
        apply_override(&mut behavior, &s.name, spec);
    }
    // Amazon Bedrock: its own paths (InvokeModel, Converse), SigV4 or API key, body and
    // exceptions (`bedrock`, `converse`).
    let bedrock_call = bedrock::model_of(parts.uri.path())
        .map(|(m, s)| (m, s, false))
        .or_else(|| converse::converse_of(parts.uri.path()).map(|(m, s)| (m, s, true)));
    if let Some((model, stream, converse)) = bedrock_call {
        let signed = bedrock::Signed {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query().unwrap_or(""),
            headers: &full_headers,
            body: &body,
        };
        return bedrock::answer(&s.name, &signed, &behavior, &model, stream, converse);
    }
    // A Google Cloud provider takes only a live OAuth2 token its metadata server issued.
    if let Some(issuer) = &behavior.google_tokens {
        if let Err(why) = issuer.check(header("authorization")) {
            let body = gcp_metadata::refusal_json(why).to_string();
            return Ok(canned(&s.name, 401, "application/json", body, None));
        }
    }
    // Google Vertex AI: its token, project, location and body before the API's answer.
    let on_vertex = vertex::call_of(parts.uri.path());
    if vertex::is_vertex_path(parts.uri.path()) {
        let owned = |name: &str| header(name).map(str::to_string);
        // A token a mock metadata server issued was checked (live, its issuer's) just above.
        let issued = behavior
            .google_tokens
            .as_ref()
            .and_then(|_| header("authorization").and_then(|a| a.strip_prefix("Bearer ")).map(|t| vec![t.to_string()]));
        let tokens =
            issued.or_else(|| behavior.vertex_tokens.clone()).unwrap_or_else(|| vec![vertex::TOKEN.to_string()]);
        let project = behavior.vertex_project.as_deref().unwrap_or(vertex::PROJECT);
        let served = vertex::Served { tokens: &tokens, project };
        let refused = match &on_vertex {
            Some(call) => vertex::refusal(call, &served, &owned, &body),
            None => Some((404, vertex::error(404, "The requested URL was not found on this server."))),
        };
        if let Some((status, body)) = refused {
            return Ok(canned(&s.name, status, "application/json", body.to_string(), None));
        }
    }
    // Azure OpenAI: its own paths, key and api-version before OpenAI's body checks.
    let on_azure = (behavior.azure && parts.uri.path().starts_with("/openai/"))
        || parts.uri.path().starts_with("/openai/deployments/");
    if on_azure {
        let owned = |name: &str| header(name).map(str::to_string);
        let filter = behavior.content_filter == Some(true);
        let key = behavior.azure_key.as_deref().unwrap_or(AZURE_KEY);
        let tokens = behavior.azure_tokens.as_deref();
        let asked = azure::Asked { path: parts.uri.path(), query: parts.uri.query(), key, tokens };
        if let Some((status, body)) = azure::refusal(&asked, &owned, &body, filter) {
            return Ok(canned(&s.name, status, "application/json", body.to_string(), None));
        }
    }
    let refusal = match api {
        _ if on_vertex.is_some() => None,
        Api::OpenAi if on_azure => None,
        Api::OpenAi => {
            let owned = |name: &str| header(name).map(str::to_string);
            let compatible = behavior.openai_compatible;
            if let Some((status, body)) = openai::refusal(parts.uri.path(), &owned, &body, compatible) {
                return Ok(canned(&s.name, status, "application/json", body.to_string(), None));
            }
            if let Some(msg) = strict::check(api, parts.uri.path(), &body) {
                let body = openai::error_json(&msg, None, None);
                return Ok(canned(&s.name, 400, "application/json", body.to_string(), None));
            }
            None
        }
        Api::Anthropic => anthropic::refusal(header("x-api-key"), header("anthropic-version"))
            .map(|(status, msg)| (status, msg.to_string()))
            .or_else(|| anthropic::invalid_body(&body).map(|msg| (400, msg)))
            .or_else(|| strict::check(api, parts.uri.path(), &body).map(|msg| (400, msg))),
        Api::Google => google::refusal(header("x-goog-api-key"), parts.uri.query())
            .map(|(status, msg)| (status, msg.to_string()))
            .or_else(|| google::invalid_body(&body).map(|msg| (400, msg)))
            .or_else(|| strict::check(api, parts.uri.path(), &body).map(|msg| (400, msg))),
    };
    if let Some((status, msg)) = refusal {
        let body = match api {
            Api::Google => google::error_json(status, &msg, None),
            _ => anthropic::error_json(status, &msg),
        };
        return Ok(canned(&s.name, status, "application/json", body.to_string(), None));
    }
    let n = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let guard = InFlight(Arc::clone(&s));
    let id = s.served.fetch_add(1, Ordering::Relaxed);

    // Vertex's failures are its own (Google-shaped; Claude's overload Anthropic's).
    let vertex_failure = |status: u16| {
        let call = on_vertex.as_ref()?;
        let body = vertex::failure(api, status, &call.model).to_string();
        Some(canned(&s.name, status, "application/json", body, None))
    };
    if let Some(cap) = behavior.capacity {
        if let Some(r) = vertex_failure(429).filter(|_| n > cap) {
            return Ok(r);
        }
        if n > cap {
            return Ok(error_response(api, &s.name, 429, Some(1), "capacity exceeded", behavior.empty_errors));
        }
    }
    if !behavior.ttft.is_zero() {
        tokio::time::sleep(behavior.ttft).await;
    }
    // The model and whether to stream: from the body, or (Google) from the path. Read only
    // when answering with a body that depends on them.
    let model_and_stream = || match (api, &on_vertex) {
        // Vertex: the path names the model and whether it streams.
        (_, Some(call)) => (call.model.clone(), call.streams(), false),
        (Api::Google, None) => {
            let (model, method) = google::model_and_method(parts.uri.path()).unwrap_or_default();
            (model.to_string(), method == "streamGenerateContent", false)
        }
        _ => {
            let req_json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            (
                req_json.get("model").and_then(Value::as_str).unwrap_or("unknown").to_string(),
                req_json.get("stream").and_then(Value::as_bool).unwrap_or(false),
                api == Api::OpenAi && openai::asks_usage(&req_json),
            )
        }
    };
    if behavior.fault_on_result && !agent::carries_tool_result(&body) {
        behavior.mode = Mode::Ok;
    }
    match behavior.mode {
        Mode::Reset => return Err("mock reset".into()),
        Mode::Garbage => {
            let (_, stream, _) = model_and_stream();
            let (ct, text) = match api {
                Api::OpenAi if stream => {
                    ("text/event-stream", "data: {\"choices\": [{\"delta\": {\"content\": \"x\"\n\n")
                }
                Api::OpenAi => ("application/json", "{\"choices\": [oops <html>"),
                Api::Anthropic => anthropic::garbage(stream),
                Api::Google => google::garbage(stream),
            };
            return Ok(canned(&s.name, 200, ct, text.to_string(), None));
        }
        Mode::Status { status, retry_after } if behavior.html_errors => {
            return Ok(html_error(&s.name, status, retry_after))
        }
        Mode::Status { status, .. } if on_vertex.is_some() && !behavior.empty_errors => {
            if let Some(r) = vertex_failure(status) {
                return Ok(r);
            }
        }
        Mode::Status { status, retry_after } => {
            return Ok(error_response(api, &s.name, status, retry_after, "mock failure", behavior.empty_errors))
        }
        Mode::Ok => {}
    }

    // Like real providers, answer compressed when the request accepts gzip.
    let gzip = behavior.force_gzip || full_headers.iter().any(|(k, v)| k == "accept-encoding" && v.contains("gzip"));
    let (model, stream, stream_usage) = model_and_stream();
    let prompt_tokens = (body.len() as u64).div_ceil(4);
    let ask = Ask { provider: &s.name, id, model, stream, prompt_tokens, gzip, stream_usage, body: &body };
    match api {
        Api::OpenAi if parts.uri.path() == "/v1/responses" => responses::answer(ask, behavior, guard),
        Api::OpenAi => openai_answer(ask, behavior, guard, on_azure),
        Api::Anthropic => anthropic::answer(ask, behavior, guard),
        Api::Google => {
            // Without `alt=sse` Google streams one JSON array instead of events.
            let sse = parts.uri.query().and_then(|q| query_param(q, "alt")) == Some("sse");
            google::answer(ask, sse, behavior, guard)
        }
    }
}

/// `azure`: as Azure answers (its stream opens with the prompt filter chunk; `filterout` ends
/// the answer with `finish_reason: "content_filter"`).
fn openai_answer(
    ask: Ask<'_>,
    behavior: Behavior,
    guard: InFlight,
    azure: bool,
) -> Result<Response<ChannelBody>, BoxError> {
    let finish = if azure && behavior.content_filter == Some(false) { "content_filter" } else { "stop" };
    let Ask { provider, id, model, stream, prompt_tokens, gzip, stream_usage, body } = ask;
    if let Some(turn) = behavior.agent.then(|| agent::turn(body)).flatten() {
        drop(guard);
        if stream {
            let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
            for c in agent::chunks(provider, &model, id, &turn, stream_usage) {
                let _ = tx.try_send(Ok(c));
            }
            return Ok(stream_head(provider, "text/event-stream", false).body(ChannelBody(rx))?);
        }
        let json = agent::completion(provider, &model, id, &turn).to_string();
        let (resp, body) = whole_answer(provider, json, false, None);
        return Ok(resp.body(body)?);
    }
    if stream {
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
        let name = provider.to_string();
        tokio::spawn(async move {
            let _guard = guard;
            let chunk = |content: Option<&str>| {
                Bytes::from(
                    chunk_json(&name, &model, id, content, stream_usage).replace("\"stop\"", &format!("\"{finish}\"")),
                )
            };
            // As OpenAI ends a stream: the finish reason, then (only when asked) the usage alone
            // in a chunk without choices, then `[DONE]`.
            let mut tail = vec![chunk(None)];
            if stream_usage {
                tail.push(Bytes::from(usage_chunk_json(&name, &model, id, behavior.cached_tokens)));
            }
            tail.push(Bytes::from_static(b"data: [DONE]\n\n"));
            if azure {
                let _ = tx.send(Ok(Bytes::from(azure::prompt_filter_chunk()))).await;
            }
            if let (Some(valid), true) = (behavior.tool_call, azure) {
                let mut chunks = azure::tool_chunks(&name, &model, id, tool_arguments(valid));
                if stream_usage {
                    chunks.push(usage_chunk_json(&name, &model, id, behavior.cached_tokens));
                }
                chunks.push("data: [DONE]\n\n".into());
                for c in chunks {
                    let _ = tx.send(Ok(Bytes::from(c))).await;
                }
                return;
            }
            if let Some(valid) = behavior.tool_call {
                for c in tool_chunks(&name, &model, id, valid) {
                    let _ = tx.send(Ok(Bytes::from(c))).await;
                }
                for t in tail {
                    let _ = tx.send(Ok(t)).await;
                }
                return;
            }
            let content = |i: usize| chunk(Some(&format!("tok{i} ")));
            let error = || {
                let e = json!({"error": {"message": format!("{name}: overloaded mid-stream"), "type": "server_error", "param": null, "code": null}});
                Bytes::from(format!("data: {e}\n\n"))
            };
            let events = Events { head: [], count: behavior.chunks, content, tail, error };
            send_stream(tx, &behavior, gzip, events).await;
        });
        Ok(stream_head(provider, "text/event-stream", gzip).body(ChannelBody(rx))?)
    } else {
        drop(guard);
        let mut json = match behavior.tool_call {
            Some(valid) => tool_completion_json(provider, &model, id, valid),
            None => completion_json(provider, &model, id, prompt_tokens, &behavior),
        };
        if azure && finish != "stop" {
            json["choices"][0]["finish_reason"] = json!(finish);
        }
        if azure {
            azure::dress_completion(&mut json);
        }
        let (resp, body) =
            whole_answer(provider, json.to_string(), gzip, behavior.big_body.map(|_| behavior.big_sized));
        Ok(resp.body(body)?)
    }
}

/// The answer's text: a greeting naming the provider, or `big<bytes>` of filler.
fn answer_text(provider: &str, b: &Behavior) -> String {
    match b.big_body {
        Some(n) => "x".repeat(n),
        None => format!("Hello from {provider}"),
    }
}

fn html_error(provider: &str, status: u16, retry_after: Option<u32>) -> Response<ChannelBody> {
    let body = format!("<html><body><h1>{status}</h1><p>{provider} gateway error</p></body></html>");
    canned(provider, status, "text/html", body, retry_after)
}

/// An error in the shape of the request's API, with `retry-after` when given.
fn error_response(
    api: Api,
    provider: &str,
    status: u16,
    retry_after: Option<u32>,
    msg: &str,
    empty: bool,
) -> Response<ChannelBody> {
    let body = if empty {
        String::new()
    } else {
        let msg = format!("{provider}: {msg}");
        match api {
            Api::OpenAi => json!({"error": {"message": msg, "type": "provider_error", "code": status}}),
            Api::Anthropic => anthropic::error_json(status, &msg),
            Api::Google => google::error_json(status, &msg, retry_after),
        }
        .to_string()
    };
    // Gemini names its delay only in the body (`RetryInfo`), never in a header.
    let header = if api == Api::Google { None } else { retry_after };
    canned(provider, status, "application/json", body, header)
}

/// A whole answer with a fixed body (errors, garbage), as a provider out of capacity sends it.
fn canned(
    provider: &str,
    status: u16,
    content_type: &str,
    body: String,
    retry_after: Option<u32>,
) -> Response<ChannelBody> {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let len = body.len();
    if len > 0 {
        let _ = tx.try_send(Ok(Bytes::from(body)));
    }
    let mut b = Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("content-length", len)
        .header("x-mock-provider", provider)
        .header("x-ratelimit-remaining-requests", "0");
    if let Some(s) = retry_after {
        b = b.header("retry-after", s.to_string());
    }
    b.body(ChannelBody(rx)).unwrap_or_else(|_| Response::new(ChannelBody(mpsc::channel(1).1)))
}

/// A TCP listener that records the first bytes each connection sends and then closes it:
/// shows what a client puts on the wire (a TLS ClientHello, never a clear-text request).
#[derive(Clone)]
pub struct RawListener {
    pub addr: SocketAddr,
    bytes: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl RawListener {
    pub async fn start() -> std::io::Result<RawListener> {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let bytes: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let b = Arc::clone(&bytes);
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { continue };
                let b = Arc::clone(&b);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut got = Vec::new();
                    // Read what the client sends first (a ClientHello fits in one flight), then close.
                    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await
                    {
                        if n == 0 {
                            break;
                        }
                        got.extend_from_slice(buf.get(..n).unwrap_or_default());
                    }
                    if let Ok(mut g) = b.lock() {
                        g.push(got);
                    }
                });
            }
        });
        Ok(RawListener { addr, bytes })
    }

    /// The bytes each connection sent, in order of arrival.
    pub fn connections(&self) -> Vec<Vec<u8>> {
        self.bytes.lock().map(|g| g.clone()).unwrap_or_default()
    }
}
