//! A real OTLP trace receiver for the tests: the OpenTelemetry protocol's gRPC
//! `TraceService/Export`, served on hyper's HTTP/2 (no tonic), decoded with the published protos.
//! Point Envoy's OpenTelemetry tracer at [`OtlpReceiver::addr`], then read what it exported.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message;

/// The gRPC method the receiver serves.
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// One span as received, flattened for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedSpan {
    /// The span's name.
    pub name: String,
    /// The trace id, lowercase hex (32 digits).
    pub trace_id: String,
    /// The span id, lowercase hex (16 digits).
    pub span_id: String,
    /// The parent's span id, lowercase hex; empty for a root span.
    pub parent_span_id: String,
    /// The OTLP `SpanKind` as its number (2 server, 3 client, ...).
    pub kind: i32,
    /// The span's attributes, every value rendered as text (see [`render`]).
    pub attributes: BTreeMap<String, String>,
    /// Each attribute's OTLP value type: `string`, `int`, `double`, `bool`, `bytes`, `array`,
    /// `kvlist`, or `unset` (the rendered text alone cannot tell `"42"` from `42`).
    pub attribute_kinds: BTreeMap<String, &'static str>,
    /// The resource attribute `service.name`, when the resource has it.
    pub service_name: Option<String>,
}

/// What the server has received so far.
#[derive(Default)]
struct State {
    spans: Vec<ReceivedSpan>,
    exports: usize,
}

/// A running OTLP/gRPC trace receiver on 127.0.0.1; dropping it stops the server.
pub struct OtlpReceiver {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Starts a receiver on a free port of 127.0.0.1, served by its own thread and tokio runtime
/// (so it works from sync code and from inside a runtime alike).
pub fn start() -> Result<OtlpReceiver, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("otlp: bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("otlp: local addr: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| format!("otlp: nonblocking: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("otlp: runtime: {e}"))?;
    let state = Arc::new(Mutex::new(State::default()));
    let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
    let served = Arc::clone(&state);
    let thread = std::thread::Builder::new()
        .name(format!("otlp-{}", addr.port()))
        .spawn(move || runtime.block_on(serve(listener, served, stop)))
        .map_err(|e| format!("otlp: thread: {e}"))?;
    Ok(OtlpReceiver { addr, state, shutdown: Some(shutdown), thread: Some(thread) })
}

impl OtlpReceiver {
    /// The address to point an OTLP/gRPC exporter at.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        lock(&self.state).spans.clone()
    }

    /// Polls until `pred` holds for the spans received or `timeout` passes; returns the spans either way.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if pred(&spans) || Instant::now() >= deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many Export calls were received (decoded or not).
    pub fn exports(&self) -> usize {
        lock(&self.state).exports
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The state, even if a holder panicked (a test's assertion must not hide behind a poisoned lock).
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Accepts HTTP/2 connections until told to stop; dropping the runtime ends their tasks.
async fn serve(
    listener: std::net::TcpListener,
    state: Arc<Mutex<State>>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new()).serve_connection(
                TokioIo::new(stream),
                hyper::service::service_fn(move |req| handle(Arc::clone(&state), req)),
            );
            let _ = conn.await;
        });
    }
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// One gRPC call's request: store the spans of a decoded Export, or say why not.
async fn handle(state: Arc<Mutex<State>>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    if req.method() != hyper::Method::POST || req.uri().path() != EXPORT_PATH {
        return Ok(grpc_reply(None, 12, "unimplemented"));
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(grpc_reply(None, 13, "reading the body failed")),
    };
    lock(&state).exports += 1;
    let request = match unframe(&body) {
        Ok(m) => match ExportTraceServiceRequest::decode(m) {
            Ok(r) => r,
            Err(e) => return Ok(grpc_reply(None, 3, &format!("decode: {e}"))),
        },
        Err((status, detail)) => return Ok(grpc_reply(None, status, detail)),
    };
    let spans = flatten(&request);
    lock(&state).spans.extend(spans);
    Ok(grpc_reply(Some(ExportTraceServiceResponse::default().encode_to_vec()), 0, ""))
}

/// The one message of a unary call's body: a 5-byte prefix (compressed flag, big-endian length)
/// and exactly that many bytes. Errors are a gRPC status and its message.
fn unframe(body: &[u8]) -> Result<&[u8], (u32, &'static str)> {
    let Some((prefix, rest)) = body.split_first_chunk::<5>() else { return Err((3, "short message")) };
    match prefix[0] {
        0 => {}
        1 => return Err((12, "compressed messages are not supported")),
        _ => return Err((3, "bad compressed flag")),
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if rest.len() != len {
        return Err((3, "length prefix does not match the body"));
    }
    Ok(rest)
}

/// Every span of an Export request, with its resource's `service.name`.
fn flatten(request: &ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        let service_name = rs.resource.as_ref().and_then(|r| {
            r.attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .map(|kv| kv.value.as_ref().map(render).unwrap_or_default())
        });
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                out.push(ReceivedSpan {
                    name: span.name.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    attributes: attributes(&span.attributes),
                    attribute_kinds: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), kind(kv.value.as_ref())))
                        .collect(),
                    service_name: service_name.clone(),
                });
            }
        }
    }
    out
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), kv.value.as_ref().map(render).unwrap_or_default())).collect()
}

/// An attribute value's OTLP type.
fn kind(value: Option<&AnyValue>) -> &'static str {
    match value.and_then(|v| v.value.as_ref()) {
        None => "unset",
        Some(any_value::Value::StringValue(_)) => "string",
        Some(any_value::Value::BoolValue(_)) => "bool",
        Some(any_value::Value::IntValue(_)) => "int",
        Some(any_value::Value::DoubleValue(_)) => "double",
        Some(any_value::Value::BytesValue(_)) => "bytes",
        Some(any_value::Value::ArrayValue(_)) => "array",
        Some(any_value::Value::KvlistValue(_)) => "kvlist",
    }
}

/// An attribute value as text: strings as they are, numbers and booleans as Rust prints them,
/// bytes as lowercase hex, arrays as `[a, b]`, key-value lists as `{k=v, ...}`; unset is empty.
fn render(value: &AnyValue) -> String {
    match &value.value {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BytesValue(b)) => hex(b),
        Some(any_value::Value::ArrayValue(a)) => {
            format!("[{}]", a.values.iter().map(render).collect::<Vec<_>>().join(", "))
        }
        Some(any_value::Value::KvlistValue(l)) => format!(
            "{{{}}}",
            l.values
                .iter()
                .map(|kv| format!("{}={}", kv.key, kv.value.as_ref().map(render).unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A gRPC answer: HTTP 200, `application/grpc`, the message (if any) framed, then the status trailers.
fn grpc_reply(message: Option<Vec<u8>>, status: u32, detail: &str) -> Response<Body> {
    let mut frames: Vec<Frame<Bytes>> = Vec::new();
    if let Some(m) = message {
        let mut framed = Vec::with_capacity(m.len() + 5);
        framed.push(0);
        framed.extend_from_slice(&(m.len() as u32).to_be_bytes());
        framed.extend_from_slice(&m);
        frames.push(Frame::data(Bytes::from(framed)));
    }
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("grpc-status", hyper::header::HeaderValue::from(status));
    // grpc-message is percent-encoded in the spec; keep it to header-safe ASCII here.
    let detail: String = detail.chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    if let Ok(v) = hyper::header::HeaderValue::from_str(&detail) {
        if !detail.is_empty() {
            trailers.insert("grpc-message", v);
        }
    }
    frames.push(Frame::trailers(trailers));
    let mut response = Response::new(BodyExt::boxed(Frames(frames.into())));
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/grpc"));
    response
}

/// A body of the given frames, in order.
struct Frames(std::collections::VecDeque<Frame<Bytes>>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue { key: key.to_string(), value: Some(AnyValue { value: Some(value) }) }
    }

    fn frame(message: &[u8]) -> Vec<u8> {
        let mut framed = vec![0];
        framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
        framed.extend_from_slice(message);
        framed
    }

    /// One gRPC call over HTTP/2 (prior knowledge): the response's body bytes and its grpc-status trailer.
    async fn call(addr: SocketAddr, path: &str, body: Vec<u8>) -> (Bytes, Option<String>) {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        let req = Request::post(format!("http://{addr}{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/grpc");
        let collected = resp.into_body().collect().await.unwrap();
        let status = collected.trailers().and_then(|t| t.get("grpc-status")).map(|v| v.to_str().unwrap().to_string());
        (collected.to_bytes(), status)
    }

    fn request() -> ExportTraceServiceRequest {
        let span = Span {
            trace_id: (1..=16).collect(),
            span_id: vec![0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89],
            parent_span_id: vec![0, 0, 0, 0, 0, 0, 0, 0x0f],
            name: "switchyard upstream".to_string(),
            kind: 3,
            attributes: vec![
                kv("gen_ai.system", any_value::Value::StringValue("openai".to_string())),
                kv("gen_ai.usage.input_tokens", any_value::Value::IntValue(42)),
                kv("cached", any_value::Value::BoolValue(true)),
            ],
            ..Default::default()
        };
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", any_value::Value::StringValue("gateway".to_string()))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans { spans: vec![span], ..Default::default() }],
                ..Default::default()
            }],
        }
    }

    #[tokio::test]
    async fn export_is_decoded_and_stored() {
        let receiver = start().unwrap();
        let (body, status) = call(receiver.addr(), EXPORT_PATH, frame(&request().encode_to_vec())).await;
        assert_eq!(status.as_deref(), Some("0"));
        // One framed, empty ExportTraceServiceResponse.
        assert_eq!(&body[..5], &[0, 0, 0, 0, 0]);
        assert_eq!(ExportTraceServiceResponse::decode(&body[5..]).unwrap(), ExportTraceServiceResponse::default());
        assert_eq!(receiver.exports(), 1);
        let spans = receiver.spans();
        assert_eq!(spans.len(), 1);
        let s = &spans[0];
        assert_eq!(s.name, "switchyard upstream");
        assert_eq!(s.trace_id, "0102030405060708090a0b0c0d0e0f10");
        assert_eq!(s.span_id, "abcdef0123456789");
        assert_eq!(s.parent_span_id, "000000000000000f");
        assert_eq!(s.kind, 3);
        assert_eq!(s.service_name.as_deref(), Some("gateway"));
        let expected: BTreeMap<String, String> =
            [("cached", "true"), ("gen_ai.system", "openai"), ("gen_ai.usage.input_tokens", "42")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(s.attributes, expected);
        let kinds: Vec<(&str, &str)> = s.attribute_kinds.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(kinds, [("cached", "bool"), ("gen_ai.system", "string"), ("gen_ai.usage.input_tokens", "int")]);
    }

    #[test]
    fn works_from_sync_code_and_wait_for() {
        let receiver = start().unwrap();
        let addr = receiver.addr();
        // A client on a runtime of its own, the receiver on its thread.
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (_, status) = rt.block_on(call(addr, EXPORT_PATH, frame(&request().encode_to_vec())));
        assert_eq!(status.as_deref(), Some("0"));
        let spans = receiver.wait_for(Duration::from_secs(5), |s| s.iter().any(|s| s.name == "switchyard upstream"));
        assert_eq!(spans.len(), 1);
        // An unmet predicate returns what there is once the timeout passes.
        let spans = receiver.wait_for(Duration::from_millis(50), |s| s.len() > 1);
        assert_eq!(spans.len(), 1);
    }

    #[tokio::test]
    async fn unknown_path_is_unimplemented() {
        let receiver = start().unwrap();
        let (body, status) =
            call(receiver.addr(), "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export", frame(&[])).await;
        assert_eq!(status.as_deref(), Some("12"));
        assert!(body.is_empty());
        assert_eq!(receiver.exports(), 0);
    }

    #[tokio::test]
    async fn malformed_messages_are_invalid_argument() {
        let receiver = start().unwrap();
        for body in [vec![0, 0, 0], frame(&[0xff, 0xff, 0xff]), vec![0, 0, 0, 0, 9, 1], vec![7, 0, 0, 0, 0]] {
            let (_, status) = call(receiver.addr(), EXPORT_PATH, body.clone()).await;
            assert_eq!(status.as_deref(), Some("3"), "{body:?}");
        }
        assert_eq!(receiver.exports(), 4);
        assert!(receiver.spans().is_empty());
    }
}
