//! A corpus of hostile requests through real Envoy 1.40 with the built filter, over HTTP/1.1
//! (raw bytes, so nothing is normalised by a client library) and HTTP/2: every answer is an
//! OpenAI-style JSON error with the right 4xx status or a correct route, no header is injected
//! into an upstream request, the Wasm VM never fails, and a good request is served afterwards.
//!
//! The stack uses the defaults a new operator gets: no debug header, no pass-through cluster.

mod common;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;
use switchyard::protocol::slots::slot_token;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::{closed_port, test_catalog};
use switchyard_integration::envoy::{keep_running, ClusterSpec, Envoy, StackConfig};
use switchyard_integration::mock::{MockProvider, Received};

const LIMIT: usize = 65536;
const PROVIDER_KEYS: [&str; 4] = ["key-alpha", "key-beta-from-env", "key-gamma", "key-delta"];

struct Stack {
    addr: SocketAddr,
    admin: SocketAddr,
    log: std::path::PathBuf,
    providers: Vec<MockProvider>,
}

impl Stack {
    fn received(&self, id: &str) -> Vec<(String, Received)> {
        self.providers.iter().flat_map(|p| p.received_for(id).into_iter().map(move |r| (p.name.clone(), r))).collect()
    }

    fn admin_get(&self, path: &str) -> String {
        match switchyard_integration::envoy::http_get(self.admin, path) {
            Ok((200, body)) => body,
            other => panic!("admin {path}: {other:?}"),
        }
    }
}

static STACK: OnceLock<Stack> = OnceLock::new();

fn stack() -> &'static Stack {
    STACK.get_or_init(|| {
        let names = ["alpha", "beta", "gamma", "delta"].map(String::from).to_vec();
        keep_running("hostile-input", names, |providers| {
            let port = |n: &str| providers.iter().find(|p| p.name == n).map(|p| p.addr.port()).unwrap_or(0);
            let clusters = ["alpha", "beta", "gamma", "delta"]
                .iter()
                .map(|n| ClusterSpec { name: format!("c_{n}"), port: port(n) })
                .chain(std::iter::once(ClusterSpec { name: "c_dead".into(), port: closed_port() }))
                .collect();
            let mut catalog = test_catalog();
            // What a new operator gets, apart from a small body limit.
            catalog["routing"] = json!({"max_body_bytes": LIMIT});
            let mut cfg = StackConfig::new(catalog, clusters, None);
            cfg.env_keys = vec!["SY_TEST_BETA_KEY".into()];
            let envoy = match Envoy::start_with_env(&cfg, "hostile", &[("SY_TEST_BETA_KEY", "key-beta-from-env")]) {
                Ok(e) => e,
                Err(e) => panic!("envoy: {e}"),
            };
            let stack = Stack { addr: envoy.addr(), admin: envoy.admin, log: envoy.dir.join("envoy.log"), providers };
            (envoy, stack)
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Clients: raw HTTP/1.1 bytes and HTTP/2 (h2c, prior knowledge)
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Writes `request` as is on a fresh connection and reads the final (non-1xx) answer.
async fn raw_http1(addr: SocketAddr, request: &[u8]) -> Result<Answer, String> {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        s.write_all(request).await.map_err(|e| e.to_string())?;
        // Read until the final answer is complete (Envoy keeps a connection it answered
        // locally open for its delayed-close timeout, so EOF would cost a second).
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 65536];
        loop {
            if let Ok(Some(a)) = complete_http1(&buf) {
                return Ok(a);
            }
            let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return parse_http1(&buf);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(20), exchange).await.map_err(|_| "no answer within 20 s".to_string())?
}

/// The answer, if `buf` holds all of it (content-length or the chunked terminator).
fn complete_http1(buf: &[u8]) -> Result<Option<Answer>, String> {
    let a = parse_http1(buf)?;
    let mut rest = buf;
    // Skip 1xx heads, then find where the final head ends.
    loop {
        let end = rest.windows(4).position(|w| w == b"\r\n\r\n").ok_or("incomplete")?;
        let status_1xx = rest.get(9) == Some(&b'1');
        rest = &rest[end + 4..];
        if !status_1xx {
            break;
        }
    }
    if let Some(len) = a.header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        return Ok((rest.len() >= len).then_some(a));
    }
    if a.header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        return Ok(rest.ends_with(b"0\r\n\r\n").then_some(a));
    }
    Ok(None)
}

fn parse_http1(mut buf: &[u8]) -> Result<Answer, String> {
    loop {
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no complete response head")?;
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let rest = &buf[end + 4..];
        let mut lines = head.split("\r\n");
        let status: u16 =
            lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
        if (100..200).contains(&status) {
            buf = rest;
            continue;
        }
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        let body = if chunked { dechunk(rest) } else { rest.to_vec() };
        return Ok(Answer { status, headers, body });
    }
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).trim(), 16).unwrap_or(0);
        let data = &rest[eol + 2..];
        if n == 0 || data.len() < n {
            break;
        }
        out.extend_from_slice(&data[..n]);
        rest = data.get(n + 2..).unwrap_or(&[]);
    }
    out
}

/// An HTTP/1.1 request with `connection: close` and a content-length body.
fn http1(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nhost: switchyard.local\r\nconnection: close\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        r.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    r.push_str("\r\n");
    let mut out = r.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A body sent as data frames, optionally followed by trailers.
struct Frames(Vec<Frame<Bytes>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.0.is_empty() {
            Poll::Ready(None)
        } else {
            Poll::Ready(Some(Ok(self.0.remove(0))))
        }
    }
}

type H2 = hyper::client::conn::http2::SendRequest<Frames>;

async fn h2_connect(addr: SocketAddr) -> H2 {
    let stream = match TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) => panic!("connect: {e}"),
    };
    let (sender, conn) = match hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await {
        Ok(x) => x,
        Err(e) => panic!("h2 handshake: {e}"),
    };
    tokio::spawn(conn);
    sender
}

async fn h2_send(
    h2: &mut H2,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    trailers: Option<(&str, &str)>,
) -> Result<Answer, String> {
    let mut b = Request::builder().method(method).uri(format!("http://switchyard.local{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut frames = Vec::new();
    if !body.is_empty() {
        frames.push(Frame::data(Bytes::copy_from_slice(body)));
    }
    if let Some((k, v)) = trailers {
        let mut t = hyper::HeaderMap::new();
        if let (Ok(k), Ok(v)) = (hyper::header::HeaderName::from_bytes(k.as_bytes()), v.parse()) {
            t.insert(k, v);
        }
        frames.push(Frame::trailers(t));
    }
    let req = b.body(Frames(frames)).map_err(|e| e.to_string())?;
    let exchange = async {
        h2.ready().await.map_err(|e| e.to_string())?;
        let resp = h2.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let headers = switchyard_integration::client::header_pairs(resp.headers());
        let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes().to_vec();
        Ok(Answer { status, headers, body })
    };
    tokio::time::timeout(Duration::from_secs(20), exchange).await.map_err(|_| "no answer within 20 s".to_string())?
}

// ---------------------------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Expect {
    /// An OpenAI-style JSON error with this status (and this `error.code`, when given).
    Error(u16, Option<&'static str>),
    /// Routed: a provider answered 200 with the Switchyard headers (and `provider`, when given).
    Routed(Option<&'static str>),
}

#[derive(Clone)]
struct Case {
    name: String,
    method: &'static str,
    path: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    expect: Expect,
}

fn chat(name: &str, body: impl Into<Vec<u8>>, expect: Expect) -> Case {
    Case {
        name: name.to_string(),
        method: "POST",
        path: "/v1/chat/completions",
        headers: vec![("content-type", "application/json".into())],
        body: body.into(),
        expect,
    }
}

const BAD_JSON: Expect = Expect::Error(400, Some("invalid_json"));
const BAD_PARAM: Expect = Expect::Error(400, Some("invalid_parameter"));

/// A valid body padded (inside a message) to exactly `len` bytes, for beta (the endpoint whose
/// context window holds it).
fn body_of_len(len: usize) -> Vec<u8> {
    let head = r#"{"model":"test/basic","provider":{"only":["beta"]},"messages":[{"role":"user","content":""#;
    let tail = r#""}]}"#;
    let pad = len.saturating_sub(head.len() + tail.len());
    format!("{head}{}{tail}", "x".repeat(pad)).into_bytes()
}

fn corpus() -> Vec<Case> {
    let good =
        |extra: &str| format!(r#"{{"model":"test/basic","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#);
    let mut c = Vec::new();

    // Malformed and truncated JSON.
    let full = good(r#","provider":{"only":["alpha"]}"#);
    for (i, cut) in [1usize, 10, 25, full.len() / 2, full.len() - 1].into_iter().enumerate() {
        c.push(chat(&format!("truncated-{i}"), full.as_bytes()[..cut].to_vec(), BAD_JSON));
    }
    for (i, b) in
        ["[]", "null", "\"str\"", "42", "{,}", "{\"model\":\"test/basic\",}", "{'model':'test/basic'}", "{}{}"]
            .into_iter()
            .enumerate()
    {
        c.push(chat(&format!("malformed-{i}"), b, BAD_JSON));
    }
    c.push(chat("empty-object", "{}", Expect::Error(400, Some("invalid_parameter"))));

    // Wrong types for every provider field.
    for (field, value) in [
        ("order", "1"),
        ("allow_fallbacks", "\"no\""),
        ("only", "{}"),
        ("ignore", "5"),
        ("sort", "5"),
        ("quantizations", "\"fp8\""),
        ("data_collection", "true"),
        ("zdr", "\"yes\""),
        ("enforce_distillable_text", "1"),
        ("require_parameters", "[]"),
        ("max_price", "[]"),
        ("preferred_min_throughput", "\"fast\""),
        ("preferred_max_latency", "[1]"),
        ("unknown_field", "1"),
    ] {
        c.push(chat(
            &format!("type-provider.{field}"),
            good(&format!(r#","provider":{{"{field}":{value}}}"#)),
            BAD_PARAM,
        ));
    }
    for (field, value) in
        [("model", "5"), ("models", "\"x\""), ("stream", "\"yes\""), ("max_tokens", "-1"), ("provider", "[]")]
    {
        let body = good(&format!(r#","{field}":{value}"#)).replacen(
            r#""model":"test/basic","#,
            "",
            usize::from(field == "model"),
        );
        c.push(chat(&format!("type-{field}"), body, BAD_PARAM));
    }

    // Duplicate keys, at the top level and inside routing fields.
    c.push(chat("dup-top", good(r#","model":"test/byok""#), BAD_JSON));
    c.push(chat("dup-provider", good(r#","provider":{"zdr":true,"zdr":false}"#), BAD_PARAM));
    c.push(chat("dup-nested", good(r#","provider":{"max_price":{"prompt":1,"prompt":100}}"#), BAD_PARAM));

    // Invalid UTF-8 (inside a string and as a key).
    let mut b = good("").into_bytes();
    let at = b.iter().position(|&x| x == b'h').unwrap_or(0);
    b.splice(at..at + 2, [0xff, 0xfe]);
    c.push(chat("utf8-in-string", b, BAD_JSON));
    c.push(chat("utf8-in-key", b"{\"mo\xc3\x28del\":\"test/basic\"}".to_vec(), BAD_JSON));

    // Deep nesting: inside a routing field it is bounded (400); inside the messages it is the
    // provider's content and is passed through untouched.
    let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    c.push(chat("deep-provider", good(&format!(r#","provider":{{"order":{deep}}}"#)), BAD_PARAM));
    c.push(chat(
        "deep-messages",
        format!(r#"{{"model":"test/basic","provider":{{"only":["beta"]}},"messages":{deep}}}"#),
        Expect::Routed(Some("beta")),
    ));

    // Huge arrays, strings and numbers.
    let many: Vec<String> = (0..5000).map(|i| format!("\"m{i}\"")).collect();
    c.push(chat("huge-models", good(&format!(r#","models":[{}]"#, many.join(","))), BAD_PARAM));
    let slugs: Vec<String> = (0..5000).map(|i| format!("\"p{i}\"")).collect();
    c.push(chat(
        "huge-order",
        good(&format!(r#","provider":{{"order":[{}],"only":["alpha"]}}"#, slugs.join(","))),
        Expect::Routed(Some("alpha")),
    ));
    c.push(chat(
        "huge-model-string",
        format!(r#"{{"model":"{}","messages":[]}}"#, "m".repeat(60_000)),
        Expect::Error(400, Some("model_not_found")),
    ));
    for (i, n) in ["1e400", "99999999999999999999999", "18446744073709551616", "1.5", "-0.0001"].into_iter().enumerate()
    {
        c.push(chat(&format!("huge-number-{i}"), good(&format!(r#","max_tokens":{n}"#)), Expect::Error(400, None)));
    }
    c.push(chat(
        "huge-max-tokens-fits-no-window",
        good(r#","max_tokens":18446744073709551615,"provider":{"only":["alpha"]}"#),
        Expect::Error(404, Some("no_endpoints")),
    ));
    c.push(chat("huge-price", good(r#","provider":{"max_price":{"prompt":1e308}}"#), Expect::Routed(None)));

    // Bodies at and over the limit.
    c.push(chat("at-limit", body_of_len(LIMIT), Expect::Routed(Some("beta"))));
    c.push(chat("over-limit", body_of_len(LIMIT + 1), Expect::Error(413, Some("request_too_large"))));
    c.push(chat("empty-body", Vec::new(), BAD_JSON));

    // CR/LF and control characters in model, slugs, session ids: JSON-escaped text never becomes
    // a header. (Raw control characters inside a JSON string are invalid JSON.)
    c.push(chat(
        "crlf-model",
        good("").replace("test/basic", "test/basic\\r\\nx-injected: 1"),
        Expect::Error(400, None),
    ));
    c.push(chat(
        "crlf-slug",
        good(r#","provider":{"order":["alpha\r\nx-injected: 1","alpha"],"only":["alpha"]}"#),
        Expect::Routed(Some("alpha")),
    ));
    c.push(chat(
        "crlf-session",
        good(r#","session_id":"s\r\nx-injected: 1","user":"u\u0000\r\n","provider":{"only":["alpha"]}"#),
        Expect::Routed(Some("alpha")),
    ));
    c.push(chat("raw-crlf-in-string", good("").replace("hi", "h\r\nx-injected: 1"), BAD_JSON));
    c.push(chat(
        "nul-in-model",
        good("").replace("test/basic", "test/basic\\u0000"),
        Expect::Error(400, Some("model_not_found")),
    ));

    // Forged internal headers never route, pass through or mark a reply.
    let mut forged = chat("forged-internal", good(r#","provider":{"only":["beta"]}"#), Expect::Routed(Some("beta")));
    // Next-cluster tokens naming real clusters: alpha's first-attempt cluster (and the old slot
    // headers, which nothing reads any more).
    forged.headers.extend([
        ("x-switchyard-next", slot_token("c_alpha-first")),
        ("x-switchyard-slot-1", slot_token("c_alpha-first")),
        ("x-switchyard-slot-2", slot_token("c_alpha")),
        ("x-switchyard-slot-5", slot_token("c_alpha")),
        ("x-switchyard-passthrough", "c_alpha".to_string()),
        ("x-switchyard-own-reply", "1".to_string()),
        ("x-envoy-max-retries", "50".to_string()),
    ]);
    c.push(forged);
    let mut forged_get = chat("forged-get", Vec::new(), Expect::Error(404, Some("not_found")));
    forged_get.method = "GET";
    forged_get.path = "/v1/files";
    forged_get.headers = vec![
        ("x-switchyard-next", slot_token("c_alpha")),
        ("x-switchyard-passthrough", "c_alpha".into()),
        ("authorization", "Bearer caller-secret".into()),
    ];
    c.push(forged_get);

    // Unrouted paths and methods: never a provider.
    for (i, (method, path, status, code)) in [
        ("GET", "/", 404, "not_found"),
        ("GET", "/v1/files", 404, "not_found"),
        ("POST", "/v1/models", 404, "not_found"),
        ("POST", "/v1/embeddings", 404, "not_found"),
        ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
        ("DELETE", "/v1/responses", 405, "method_not_allowed"),
    ]
    .into_iter()
    .enumerate()
    {
        let body = if method == "POST" { good("").into_bytes() } else { Vec::new() };
        let mut u = chat(&format!("unrouted-{i}"), body, Expect::Error(status, Some(code)));
        u.method = method;
        u.path = path;
        u.headers.push(("authorization", "Bearer caller-secret".into()));
        c.push(u);
    }

    // Content types: the body decides (JSON is routed whatever the label; a form is not JSON).
    let mut plain = chat("ctype-text", good(r#","provider":{"only":["alpha"]}"#), Expect::Routed(Some("alpha")));
    plain.headers = vec![("content-type", "text/plain".into())];
    c.push(plain);
    let mut form = chat("ctype-form", "model=test%2Fbasic&messages=hi", BAD_JSON);
    form.headers = vec![("content-type", "application/x-www-form-urlencoded".into())];
    c.push(form);

    // A caller's credentials and identity never reach the provider.
    let mut creds =
        chat("caller-credentials", good(r#","provider":{"only":["alpha"]}"#), Expect::Routed(Some("alpha")));
    creds.headers.extend([
        ("authorization", "Bearer caller-secret".into()),
        ("x-api-key", "caller-secret".into()),
        ("cookie", "sid=caller-secret".into()),
        ("proxy-authorization", "Basic caller-secret".into()),
        ("x-switchyard-debug", "1".into()),
    ]);
    c.push(creds);
    c
}

/// Checks one answer; returns a description of what is wrong.
fn check(s: &Stack, case: &Case, id: &str, a: &Answer) -> Result<(), String> {
    let what = format!("{} -> {} {}", case.name, a.status, a.text().chars().take(300).collect::<String>());
    match &case.expect {
        Expect::Error(status, code) => {
            if a.status != *status {
                return Err(format!("{what}: expected status {status}"));
            }
            if !a.header("content-type").is_some_and(|c| c.starts_with("application/json")) {
                return Err(format!("{what}: not JSON ({:?})", a.header("content-type")));
            }
            let e = &a.json()["error"];
            if !e["message"].is_string() || !e["type"].is_string() {
                return Err(format!("{what}: not an OpenAI-style error"));
            }
            if let Some(code) = code {
                if e["code"] != *code {
                    return Err(format!("{what}: expected code {code}"));
                }
            }
            if !s.received(id).is_empty() {
                return Err(format!("{what}: a provider received a rejected request"));
            }
        }
        Expect::Routed(provider) => {
            if a.status != 200 || a.header("x-switchyard-provider").is_none() {
                return Err(format!("{what}: expected a routed 200"));
            }
            let got = s.received(id);
            if got.len() != 1 {
                return Err(format!("{what}: {} upstream requests", got.len()));
            }
            let (who, r) = &got[0];
            if let Some(p) = provider {
                if who != p {
                    return Err(format!("{what}: served by {who}, expected {p}"));
                }
            }
            let own = format!("key-{who}");
            if let Some((k, _)) = r.internal_headers().first() {
                return Err(format!("{what}: {who} received header {k}"));
            }
            for (k, v) in &r.headers {
                if k.starts_with("x-injected") || k == "cookie" || k == "proxy-authorization" {
                    return Err(format!("{what}: {who} received header {k}"));
                }
                if v.contains("caller-secret") {
                    return Err(format!("{what}: {who} received the caller's secret in {k}"));
                }
                if PROVIDER_KEYS.iter().any(|key| v.contains(key) && !own.starts_with(key) && !key.starts_with(&own)) {
                    return Err(format!("{what}: {who} received another provider's key in {k}"));
                }
            }
        }
    }
    if a.header("x-switchyard-candidates").is_some() {
        return Err(format!("{what}: the debug header is off by default"));
    }
    Ok(())
}

fn wasm_counters(s: &Stack) -> Vec<(String, String)> {
    s.admin_get("/stats")
        .lines()
        .filter(|l| l.starts_with("wasm.") || l.contains("wasm_vm") || l.contains(".wasm."))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// No VM was created after start (a failed VM is replaced), and Envoy logged no Wasm failure.
fn assert_no_vm_failure(s: &Stack, before: &[(String, String)]) {
    if switchyard_integration::envoy::Build::from_env() == switchyard_integration::envoy::Build::Native {
        // The native build has no VM: no hook panicked (each is caught, counted and logged).
        let stats = s.admin_get("/stats");
        assert!(!stats.contains("native_panics_total"), "a hook panicked: {stats}");
        let log = std::fs::read_to_string(&s.log).unwrap_or_default();
        assert!(!log.contains("switchyard: panic in"), "Envoy log shows a panic:\n{log}");
        return;
    }
    let after = wasm_counters(s);
    let created = |list: &[(String, String)]| -> Vec<(String, String)> {
        list.iter().filter(|(k, _)| k.ends_with(".created")).cloned().collect()
    };
    assert!(!created(before).is_empty(), "no wasm runtime stats: {before:?}");
    assert_eq!(created(before), created(&after), "a Wasm VM was (re)created during the corpus");
    for (k, v) in &after {
        if k.contains("fail") || k.contains("crash") {
            assert_eq!(v, "0", "{k}");
        }
    }
    let log = std::fs::read_to_string(&s.log).unwrap_or_default();
    for bad in ["panicked", "Uncaught", "RuntimeError", "Wasm VM failed"] {
        assert!(!log.contains(bad), "Envoy log shows a Wasm failure ({bad}):\n{log}");
    }
}

async fn good_request_is_served(s: &Stack, tag: &str) {
    let id = format!("good-after-{tag}");
    let body = br#"{"model":"test/basic","messages":[{"role":"user","content":"hi"}],"provider":{"only":["alpha"]}}"#;
    let a = raw_http1(
        s.addr,
        &http1("POST", "/v1/chat/completions", &[("x-test-id", &id), ("content-type", "application/json")], body),
    )
    .await
    .unwrap_or_else(|e| panic!("good request: {e}"));
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.header("x-switchyard-provider"), Some("alpha"));
    assert_eq!(a.json()["provider"], "alpha");
}

#[tokio::test]
async fn corpus_over_http1_gets_json_errors_or_correct_routes() {
    let s = stack();
    let before = wasm_counters(s);
    let mut failures = Vec::new();
    let cases = corpus();
    assert!(cases.len() > 60, "{}", cases.len());
    for case in &cases {
        let id = format!("h1-{}", case.name);
        let mut headers: Vec<(&str, &str)> = vec![("x-test-id", &id)];
        headers.extend(case.headers.iter().map(|(k, v)| (*k, v.as_str())));
        match raw_http1(s.addr, &http1(case.method, case.path, &headers, &case.body)).await {
            Ok(a) => {
                if let Err(e) = check(s, case, &id, &a) {
                    failures.push(e);
                }
            }
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
    good_request_is_served(s, "h1").await;
    assert_no_vm_failure(s, &before);
}

#[tokio::test]
async fn corpus_over_http2_gets_json_errors_or_correct_routes() {
    let s = stack();
    let before = wasm_counters(s);
    let mut h2 = h2_connect(s.addr).await;
    let mut failures = Vec::new();
    let cases = corpus();
    for case in &cases {
        let id = format!("h2-{}", case.name);
        let mut headers: Vec<(&str, &str)> = vec![("x-test-id", &id)];
        headers.extend(case.headers.iter().map(|(k, v)| (*k, v.as_str())));
        // A rejected stream may end the connection for the next request; reconnect then.
        let a = match h2_send(&mut h2, case.method, case.path, &headers, &case.body, None).await {
            Ok(a) => a,
            Err(_) => {
                h2 = h2_connect(s.addr).await;
                match h2_send(&mut h2, case.method, case.path, &headers, &case.body, None).await {
                    Ok(a) => a,
                    Err(e) => {
                        failures.push(format!("{}: {e}", case.name));
                        continue;
                    }
                }
            }
        };
        if let Err(e) = check(s, case, &id, &a) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
    good_request_is_served(s, "h2").await;
    assert_no_vm_failure(s, &before);
}

// Framing the corpus cannot express: Expect: 100-continue, request trailers (HTTP/1.1 chunked
// and HTTP/2), a chunked body over the limit, header values with raw control characters.
#[tokio::test]
async fn framing_edge_cases() {
    let s = stack();
    let before = wasm_counters(s);
    let body = br#"{"model":"test/basic","messages":[{"role":"user","content":"hi"}],"provider":{"only":["alpha"]}}"#;

    // Expect: 100-continue: Envoy answers the 100 itself; the request is routed.
    let mut req = http1(
        "POST",
        "/v1/chat/completions",
        &[("x-test-id", "f-expect"), ("content-type", "application/json"), ("expect", "100-continue")],
        body,
    );
    let a = raw_http1(s.addr, &req).await.unwrap_or_else(|e| panic!("expect: {e}"));
    assert_eq!((a.status, a.header("x-switchyard-provider")), (200, Some("alpha")), "{}", a.text());

    // HTTP/1.1 chunked body with trailers.
    req = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-test-id: f-trailers\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\ntrailer: x-checksum\r\n\r\n".to_vec();
    let (first, second) = body.split_at(20);
    for part in [first, second] {
        req.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        req.extend_from_slice(part);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\nx-checksum: abc\r\n\r\n");
    let a = raw_http1(s.addr, &req).await.unwrap_or_else(|e| panic!("trailers: {e}"));
    assert_eq!((a.status, a.header("x-switchyard-provider")), (200, Some("alpha")), "{}", a.text());
    let got = s.received("f-trailers");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1.json()["model"], "alpha-basic");

    // HTTP/2 body with trailers.
    let mut h2 = h2_connect(s.addr).await;
    let a = h2_send(
        &mut h2,
        "POST",
        "/v1/chat/completions",
        &[("x-test-id", "f-h2-trailers"), ("content-type", "application/json")],
        body,
        Some(("x-checksum", "abc")),
    )
    .await
    .unwrap_or_else(|e| panic!("h2 trailers: {e}"));
    assert_eq!((a.status, a.header("x-switchyard-provider")), (200, Some("alpha")), "{}", a.text());

    // Chunked (no content-length) over the limit: the filter's 413 JSON.
    let big = body_of_len(LIMIT + 100);
    req = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-test-id: f-chunked-big\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for part in big.chunks(8192) {
        req.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        req.extend_from_slice(part);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let a = raw_http1(s.addr, &req).await.unwrap_or_else(|e| panic!("chunked big: {e}"));
    assert_eq!(a.status, 413, "{}", a.text());
    assert_eq!(a.json()["error"]["code"], "request_too_large");
    assert!(s.received("f-chunked-big").is_empty());

    // A raw CR inside a header value is a protocol error Envoy answers itself (400), never a
    // split header upstream.
    let req = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-test-id: f-cr\r\nx-note: a\rx-injected: 1\r\ncontent-length: 2\r\n\r\n{}".to_vec();
    let a = raw_http1(s.addr, &req).await.unwrap_or_else(|e| panic!("cr header: {e}"));
    assert_eq!(a.status, 400, "{}", a.text());
    assert!(s.received("f-cr").is_empty());

    // Caller-sent Envoy router controls (a 1 ms timeout, extra retry conditions) change nothing:
    // the provider answers after 300 ms and the request is served, and none reaches the
    // provider. (This listener's Envoy treats loopback callers as external and ignores them
    // itself; in a mesh that marks callers internal, the filter's removal is what holds.)
    let req = http1(
        "POST",
        "/v1/chat/completions",
        &[
            ("x-test-id", "f-envoy-controls"),
            ("content-type", "application/json"),
            ("x-mock-behavior", "alpha=ttft300"),
            ("x-envoy-upstream-rq-timeout-ms", "1"),
            ("x-envoy-upstream-rq-per-try-timeout-ms", "1"),
            ("x-envoy-retry-on", "retriable-4xx"),
            ("x-envoy-max-retries", "50"),
        ],
        body,
    );
    let a = raw_http1(s.addr, &req).await.unwrap_or_else(|e| panic!("envoy controls: {e}"));
    assert_eq!((a.status, a.header("x-switchyard-provider")), (200, Some("alpha")), "{}", a.text());
    let got = s.received("f-envoy-controls");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1.internal_headers(), vec![], "{:?}", got[0].1.headers);

    good_request_is_served(s, "framing").await;
    assert_no_vm_failure(s, &before);
}
