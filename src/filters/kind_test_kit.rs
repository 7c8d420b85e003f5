//! What the provider-kind tests (`bedrock_tests`, `converse_tests`, `vertex_tests`) share: a
//! request decided by the decision filter, an attempt through the per-attempt filter, the body
//! it sent, and an answer fed back through both filters.

use std::rc::Rc;

use serde_json::Value;

use super::downstream::Stream;
use super::host::Action;
use super::mock::MockHost;
use super::upstream::Attempt;
use super::{configure, Configured, Filter};
use crate::protocol::scope::route_mark_path;

pub fn configured(config: &str) -> Rc<Configured> {
    Rc::new(configure(config.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("test config rejected: {e}")))
}

/// Decides a request on `path` with `body`, the routing header's `provider` preferences and
/// the caller's `extra` headers.
pub fn decide(
    host: &MockHost,
    config: &Rc<Configured>,
    path: &str,
    body: &str,
    provider: &str,
    extra: &[(&str, &str)],
) -> Stream<MockHost> {
    let routing = format!(r#"{{"provider": {provider}}}"#);
    host.set_prop(&route_mark_path(), b"llm");
    let mut headers = vec![
        (":method", "POST"),
        (":path", path),
        (":authority", "gateway"),
        ("content-type", "application/json"),
        ("anthropic-version", "2023-06-01"),
        ("x-switchyard-routing", routing.as_str()),
    ];
    headers.extend_from_slice(extra);
    host.with_request_headers(&headers);
    host.state().request_body = body.as_bytes().to_vec();
    let mut stream = Stream::new(host.clone(), Rc::clone(config));
    assert_eq!(stream.on_request_headers(false), Action::Pause);
    let reply = |h: &MockHost| h.state().reply.as_ref().map(|r| String::from_utf8_lossy(&r.body).to_string());
    assert_eq!(stream.on_request_body(body.len(), true), Action::Continue, "{:?}", reply(host));
    stream
}

/// Attempt `k` on `cluster`, its request headers and body as the filter leaves them.
pub fn attempt(host: &MockHost, config: &Rc<Configured>, k: u64, cluster: &str) -> Attempt<MockHost> {
    host.set_prop(&["upstream", "request_attempt_count"], &k.to_le_bytes());
    host.set_prop(&["xds", "cluster_name"], cluster.as_bytes());
    let mut a = Attempt::new(host.clone(), Rc::clone(config));
    assert_eq!(a.on_request_headers(false), Action::Continue, "attempt {k} is sent");
    let len = host.state().request_body.len();
    assert_eq!(a.on_request_body(len, true), Action::Continue);
    a
}

pub fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

/// The request body as sent, checked against its content-length.
pub fn sent_body(host: &MockHost) -> Value {
    let body = host.state().request_body.clone();
    assert_eq!(host.request_header_value("content-length"), Some(body.len().to_string()));
    json_of(&body)
}

/// Feeds `body` in chunks of `size` through the attempt's filter, then the decision filter, as
/// Envoy does; what the caller receives.
pub fn feed_answer(
    host: &MockHost,
    a: &mut Attempt<MockHost>,
    s: &mut Stream<MockHost>,
    body: &[u8],
    size: usize,
) -> String {
    let mut out = Vec::new();
    let pieces: Vec<&[u8]> = body.chunks(size).collect();
    for (i, piece) in pieces.iter().enumerate() {
        let end = i + 1 == pieces.len();
        host.state().response_body = piece.to_vec();
        assert_eq!(a.on_response_body(piece.len(), end), Action::Continue);
        let n = host.state().response_body.len();
        s.on_response_body(n, end);
        out.extend(host.state().response_body.clone());
    }
    a.on_done();
    String::from_utf8(out).unwrap_or_else(|e| panic!("the answer is not UTF-8: {e}"))
}
