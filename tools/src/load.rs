//! `make bench`'s own HTTP/1.1 pieces, cheap enough that the proxy under test is what gets
//! measured: a closed-loop load generator (keep-alive connections, fixed duration, the request's
//! bytes built once) and a minimal mock provider (OpenAI chat answers, JSON or SSE; on Amazon
//! Bedrock's paths Claude's answers, JSON or an AWS event stream; it keeps nothing of what it
//! received and checks no signature: the tests do). Each runs on one thread; `make bench` runs them in processes of
//! their own, pinned to the core Envoy does not use.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memchr::memmem;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An OpenAI chat request of exactly `size` bytes (a long user message), streaming or not.
pub fn chat_body(model: &str, size: usize, stream: bool) -> Vec<u8> {
    let mut body = json!({"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": ""}]});
    if stream {
        body["stream"] = json!(true);
    }
    let filler = size.saturating_sub(body.to_string().len());
    body["messages"][0]["content"] = json!("x".repeat(filler));
    body.to_string().into_bytes()
}

/// A Responses API request of about `size` bytes (`input` padded), streamed or not.
pub fn responses_body(model: &str, size: usize, stream: bool) -> Vec<u8> {
    let mut body = json!({"model": model, "max_output_tokens": 16, "input": ""});
    if stream {
        body["stream"] = json!(true);
    }
    let filler = size.saturating_sub(body.to_string().len());
    body["input"] = json!("x".repeat(filler));
    body.to_string().into_bytes()
}

/// What one load run does.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Answers must be SSE streams ending in `data: [DONE]` (chat, completions), in the
    /// Responses API's `response.completed` event or in Anthropic's `message_stop`.
    pub stream: bool,
    pub connections: usize,
    pub duration: Duration,
    /// A request without a whole answer after this long counts as an error (its connection is
    /// dropped).
    pub request_timeout: Duration,
}

/// The outcome of one run. Latencies are from the first byte written to the last byte read;
/// time to first byte (TTFB) is to the first byte of the answer's body.
#[derive(Clone, Debug, Default)]
pub struct LoadResult {
    pub requests: u64,
    pub errors: u64,
    pub elapsed: Duration,
    /// Sorted, microseconds.
    pub latencies_us: Vec<u32>,
    /// Sorted, microseconds.
    pub ttfb_us: Vec<u32>,
    /// The first error seen (status and the start of the body, or the I/O error).
    pub first_error: Option<String>,
}

impl LoadResult {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn percentile_us(&self, q: f64) -> u32 {
        percentile(&self.latencies_us, q)
    }

    pub fn ttfb_percentile_us(&self, q: f64) -> u32 {
        percentile(&self.ttfb_us, q)
    }
}

fn percentile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

fn request_bytes(spec: &LoadSpec) -> Vec<u8> {
    let mut head = format!("POST {} HTTP/1.1\r\nhost: bench.local\r\n", spec.path);
    for (k, v) in &spec.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", spec.body.len()));
    let mut out = head.into_bytes();
    out.extend_from_slice(&spec.body);
    out
}

/// Runs `spec.connections` closed-loop clients for `spec.duration` on the current tokio runtime.
pub async fn run(spec: &LoadSpec) -> LoadResult {
    let start = Instant::now();
    let until = start + spec.duration;
    let req: Arc<[u8]> = Arc::from(request_bytes(spec));
    let tasks: Vec<_> = (0..spec.connections)
        .map(|_| tokio::spawn(connection(spec.addr, Arc::clone(&req), spec.stream, until, spec.request_timeout)))
        .collect();
    let mut out = LoadResult::default();
    for t in tasks {
        if let Ok(c) = t.await {
            out.requests += c.ok;
            out.errors += c.errors;
            out.latencies_us.extend(c.latencies_us);
            out.ttfb_us.extend(c.ttfb_us);
            if out.first_error.is_none() {
                out.first_error = c.first_error;
            }
        }
    }
    out.elapsed = start.elapsed();
    out.latencies_us.sort_unstable();
    out.ttfb_us.sort_unstable();
    out
}

#[derive(Default)]
struct ConnStats {
    ok: u64,
    errors: u64,
    latencies_us: Vec<u32>,
    ttfb_us: Vec<u32>,
    first_error: Option<String>,
}

impl ConnStats {
    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what);
        }
    }
}

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u128::from(u32::MAX)) as u32
}

async fn connection(addr: SocketAddr, req: Arc<[u8]>, stream: bool, until: Instant, timeout: Duration) -> ConnStats {
    let mut st = ConnStats::default();
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    while Instant::now() < until {
        let mut sock = match TcpStream::connect(addr).await {
            Ok(s) => s,
            Err(e) => {
                st.error(format!("connect: {e}"));
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        while Instant::now() < until {
            let t0 = Instant::now();
            let exchange = async {
                sock.write_all(&req).await?;
                read_response(&mut sock, &mut buf, t0).await
            };
            match tokio::time::timeout(timeout, exchange).await {
                Ok(Ok(resp)) => {
                    let total = t0.elapsed();
                    let body = buf.get(resp.body_start..).unwrap_or_default();
                    let complete = !stream || resp.sse_done;
                    if resp.status == 200 && complete {
                        st.ok += 1;
                        st.latencies_us.push(micros(total));
                        st.ttfb_us.push(micros(resp.ttfb));
                    } else {
                        let head = String::from_utf8_lossy(body.get(..body.len().min(200)).unwrap_or_default());
                        st.error(format!(
                            "status {}{}: {head}",
                            resp.status,
                            if complete { "" } else { " (stream without [DONE])" }
                        ));
                    }
                    if resp.close {
                        break;
                    }
                }
                Ok(Err(e)) => {
                    st.error(format!("i/o: {e}"));
                    break;
                }
                Err(_) => {
                    st.error(format!("no whole answer after {timeout:?}"));
                    break;
                }
            }
        }
    }
    st
}

struct Response {
    status: u16,
    close: bool,
    ttfb: Duration,
    body_start: usize,
    /// A chunked body whose last data ends with `data: [DONE]` and a blank line.
    sse_done: bool,
}

fn eof() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed mid-answer")
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// Reads more bytes into `buf`; end of stream is an error.
async fn fill(sock: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.reserve(16 * 1024);
    if sock.read_buf(buf).await? == 0 {
        return Err(eof());
    }
    Ok(())
}

/// Reads until `buf` holds a whole head (`\r\n\r\n`); returns the offset just past it.
async fn read_head(sock: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    let mut scanned = 0;
    loop {
        if let Some(i) = memmem::find(buf.get(scanned..).unwrap_or_default(), b"\r\n\r\n") {
            return Ok(Some(scanned + i + 4));
        }
        scanned = buf.len().saturating_sub(3);
        if buf.len() > 64 * 1024 {
            return Err(bad("head larger than 64 KiB"));
        }
        buf.reserve(16 * 1024);
        if sock.read_buf(buf).await? == 0 {
            return if buf.is_empty() { Ok(None) } else { Err(eof()) };
        }
    }
}

/// The framing headers of a head.
struct Framing {
    content_length: Option<usize>,
    chunked: bool,
    close: bool,
    expect_continue: bool,
}

fn framing(headers: &[httparse::Header<'_>]) -> Framing {
    let mut f = Framing { content_length: None, chunked: false, close: false, expect_continue: false };
    for h in headers {
        let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
        if h.name.eq_ignore_ascii_case("content-length") {
            f.content_length = v.trim().parse().ok();
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            f.chunked = v.contains("chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            f.close = v.contains("close");
        } else if h.name.eq_ignore_ascii_case("expect") {
            f.expect_continue = v.contains("100-continue");
        }
    }
    f
}

/// Where a chunked body starting at `start` ends, if `buf` holds all of it, and the range of
/// its last non-empty chunk's data. `Err` for a malformed chunk header.
fn chunked_end(buf: &[u8], start: usize) -> Result<Option<(usize, Option<(usize, usize)>)>, std::io::Error> {
    let mut pos = start;
    let mut last = None;
    loop {
        let Some(rest) = buf.get(pos..) else { return Ok(None) };
        let Some(eol) = memmem::find(rest, b"\r\n") else { return Ok(None) };
        let line = rest.get(..eol).unwrap_or_default();
        let hex = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(hex)
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .ok_or_else(|| bad("bad chunk size"))?;
        if size == 0 {
            // Trailers (none expected) end with an empty line.
            let after = pos + eol + 2;
            if buf.get(after..after + 2) == Some(b"\r\n".as_slice()) {
                return Ok(Some((after + 2, last)));
            }
            return match memmem::find(buf.get(after..).unwrap_or_default(), b"\r\n\r\n") {
                Some(i) => Ok(Some((after + i + 4, last))),
                None => Ok(None),
            };
        }
        let data = pos + eol + 2;
        if buf.len() < data + size + 2 {
            return Ok(None);
        }
        last = Some((data, size));
        pos = data + size + 2;
    }
}

/// The Responses API's last stream event (it sends no `[DONE]`).
const COMPLETED: &[u8] = b"event: response.completed\n";
/// Anthropic's last stream event (no `[DONE]` either).
const MESSAGE_STOP: &[u8] = b"event: message_stop\n";

/// Reads one response into `buf` (cleared first). TTFB is taken when the first body byte is in.
async fn read_response(sock: &mut TcpStream, buf: &mut Vec<u8>, t0: Instant) -> std::io::Result<Response> {
    buf.clear();
    let head_end = read_head(sock, buf).await?.ok_or_else(eof)?;
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    match parsed.parse(buf.get(..head_end).unwrap_or_default()) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(bad("unparsable response head")),
    }
    let status = parsed.code.unwrap_or(0);
    let f = framing(parsed.headers);
    let mut ttfb = None;
    let mut note_first_byte = |buf: &Vec<u8>| {
        if ttfb.is_none() && buf.len() > head_end {
            ttfb = Some(t0.elapsed());
        }
    };
    note_first_byte(buf);
    let mut sse_done = false;
    if f.chunked {
        loop {
            if let Some((_, last)) = chunked_end(buf, head_end)? {
                sse_done = last.and_then(|(s, n)| buf.get(s..s + n)).is_some_and(|d| {
                    d.ends_with(b"data: [DONE]\n\n")
                        || d.ends_with(b"data: [DONE]\r\n\r\n")
                        || (d.ends_with(b"\n\n") && d.windows(COMPLETED.len()).any(|w| w == COMPLETED))
                        || (d.ends_with(b"\n\n") && d.windows(MESSAGE_STOP.len()).any(|w| w == MESSAGE_STOP))
                });
                break;
            }
            fill(sock, buf).await?;
            note_first_byte(buf);
        }
    } else if let Some(n) = f.content_length {
        while buf.len() < head_end + n {
            fill(sock, buf).await?;
            note_first_byte(buf);
        }
    } else {
        // Delimited by the end of the connection.
        loop {
            buf.reserve(16 * 1024);
            if sock.read_buf(buf).await? == 0 {
                break;
            }
            note_first_byte(buf);
        }
        return Ok(Response {
            status,
            close: true,
            ttfb: ttfb.unwrap_or_else(|| t0.elapsed()),
            body_start: head_end,
            sse_done,
        });
    }
    Ok(Response { status, close: f.close, ttfb: ttfb.unwrap_or_else(|| t0.elapsed()), body_start: head_end, sse_done })
}

/// Number of content events in a mock stream (then one with the usage, then `[DONE]`).
pub const MOCK_STREAM_EVENTS: usize = 8;

/// The mock provider: answers every POST with an OpenAI chat completion, as an SSE stream when
/// the request says `"stream": true` (the head and first event in one write, the rest in a
/// second), and keeps nothing. Runs until the runtime stops.
pub async fn serve_mock(listener: TcpListener) {
    loop {
        let Ok((sock, _)) = listener.accept().await else { continue };
        let _ = sock.set_nodelay(true);
        tokio::spawn(mock_connection(sock));
    }
}

/// Does the JSON request ask for a stream? (`"stream"` then `:` then `true`, spaces allowed.)
fn wants_stream(body: &[u8]) -> bool {
    let mut from = 0;
    while let Some(i) = memmem::find(body.get(from..).unwrap_or_default(), b"\"stream\"") {
        let rest = body.get(from + i + 8..).unwrap_or_default();
        let rest: Vec<u8> = rest.iter().take(16).copied().filter(|b| !b.is_ascii_whitespace()).collect();
        if rest.starts_with(b":true") {
            return true;
        }
        from += i + 8;
    }
    false
}

fn completion(prompt_tokens: usize) -> Vec<u8> {
    let body = json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1_700_000_000u64, "model": "bench-upstream",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from the bench mock."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 6, "total_tokens": prompt_tokens + 6}
    })
    .to_string();
    let mut out =
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len())
            .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

fn event(v: &Value) -> String {
    let data = format!("data: {v}\n\n");
    format!("{:x}\r\n{data}\r\n", data.len())
}

/// The stream's two writes: head + first event, then the rest and the chunked terminator.
fn stream(prompt_tokens: usize) -> (Vec<u8>, Vec<u8>) {
    let chunk = |content: Option<String>| -> Value {
        let delta = match content {
            Some(c) => json!({"content": c}),
            None => json!({}),
        };
        json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000u64, "model": "bench-upstream",
            "choices": [{"index": 0, "delta": delta, "finish_reason": Value::Null}]})
    };
    let mut first = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n",
    );
    let mut first_event = chunk(Some("tok0 ".into()));
    first_event["choices"][0]["delta"]["role"] = json!("assistant");
    first.push_str(&event(&first_event));
    let mut rest = String::new();
    for i in 1..MOCK_STREAM_EVENTS {
        rest.push_str(&event(&chunk(Some(format!("tok{i} ")))));
    }
    let mut last = chunk(None);
    last["choices"][0]["finish_reason"] = json!("stop");
    last["usage"] = json!({"prompt_tokens": prompt_tokens, "completion_tokens": MOCK_STREAM_EVENTS, "total_tokens": prompt_tokens + MOCK_STREAM_EVENTS});
    rest.push_str(&event(&last));
    let done = "data: [DONE]\n\n";
    rest.push_str(&format!("{:x}\r\n{done}\r\n0\r\n\r\n", done.len()));
    (first.into_bytes(), rest.into_bytes())
}

/// The kind of answer a request gets: OpenAI's, or Claude's on a Bedrock path.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    OpenAi,
    Bedrock,
}

/// A Bedrock invocation path (`/model/{id}/invoke[-with-response-stream]`) and whether it streams.
fn bedrock_path(path: &str) -> Option<bool> {
    let rest = path.strip_prefix("/model/")?;
    match rest.rsplit_once('/')?.1 {
        "invoke" => Some(false),
        "invoke-with-response-stream" => Some(true),
        _ => None,
    }
}

/// Bedrock's answers for a Claude model (`InvokeModel`'s JSON, or `InvokeModelWithResponseStream`'s
/// event stream: one `chunk` frame per Anthropic event, valid CRCs), as the mock Bedrock of the
/// tests frames them: head + first frame, then the rest.
fn bedrock_answer(stream_it: bool) -> (Vec<u8>, Vec<u8>) {
    use switchyard_integration::mock::bedrock::{message, stream_body};
    if !stream_it {
        let body = message("bench-upstream", "Hello from the bench mock.").to_string();
        let mut out =
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len())
                .into_bytes();
        out.extend_from_slice(body.as_bytes());
        return (out, Vec::new());
    }
    let frames = stream_body("bench-upstream", "Hello from the bench mock.", None);
    // A frame starts with its total length (big-endian u32).
    let first_len = frames.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()).map_or(0, u32::from_be_bytes) as usize;
    let (head_frame, rest_frames) = frames.split_at(first_len.min(frames.len()));
    let chunk = |data: &[u8]| {
        let mut c = format!("{:x}\r\n", data.len()).into_bytes();
        c.extend_from_slice(data);
        c.extend_from_slice(b"\r\n");
        c
    };
    let mut first = b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\nx-amzn-bedrock-content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    first.extend(chunk(head_frame));
    let mut rest = chunk(rest_frames);
    rest.extend_from_slice(b"0\r\n\r\n");
    (first, rest)
}

/// An answer's bytes (one or two writes), built once per prompt size and kind: a bench sends
/// the same body over and over, and the mock should cost as little as possible.
type Answer = std::sync::Arc<(Vec<u8>, Vec<u8>)>;

fn cached_answer(prompt_tokens: usize, stream_it: bool, kind: Kind) -> Answer {
    thread_local! {
        static ANSWERS: std::cell::RefCell<std::collections::HashMap<(usize, bool, Kind), Answer>> = Default::default();
    }
    ANSWERS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.len() > 1024 {
            cache.clear();
        }
        std::sync::Arc::clone(cache.entry((prompt_tokens, stream_it, kind)).or_insert_with(|| {
            std::sync::Arc::new(match kind {
                Kind::Bedrock => bedrock_answer(stream_it),
                Kind::OpenAi if stream_it => stream(prompt_tokens),
                Kind::OpenAi => (completion(prompt_tokens), Vec::new()),
            })
        }))
    })
}

async fn mock_connection(mut sock: TcpStream) {
    let mut buf: Vec<u8> = Vec::with_capacity(128 * 1024);
    let mut body: Vec<u8> = Vec::with_capacity(128 * 1024);
    loop {
        let Ok(Some(head_end)) = read_head(&mut sock, &mut buf).await else { return };
        let (f, bedrock) = {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(buf.get(..head_end).unwrap_or_default()) {
                Ok(httparse::Status::Complete(_)) => (framing(req.headers), req.path.and_then(bedrock_path)),
                _ => return,
            }
        };
        if f.expect_continue && sock.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err() {
            return;
        }
        body.clear();
        let consumed = if f.chunked {
            loop {
                match chunked_end(&buf, head_end) {
                    Ok(Some((end, _))) => break end,
                    Ok(None) => {
                        if fill(&mut sock, &mut buf).await.is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        } else {
            let n = f.content_length.unwrap_or(0);
            while buf.len() < head_end + n {
                if fill(&mut sock, &mut buf).await.is_err() {
                    return;
                }
            }
            head_end + n
        };
        if f.chunked {
            dechunk_into(buf.get(head_end..consumed).unwrap_or_default(), &mut body);
        } else {
            body.extend_from_slice(buf.get(head_end..consumed).unwrap_or_default());
        }
        buf.drain(..consumed);
        let prompt_tokens = body.len().div_ceil(4);
        let answer = match bedrock {
            // Bedrock: the path says whether it streams (the body carries no `stream`).
            Some(stream_it) => cached_answer(0, stream_it, Kind::Bedrock),
            None => cached_answer(prompt_tokens, wants_stream(&body), Kind::OpenAi),
        };
        let written = match sock.write_all(&answer.0).await {
            Ok(()) if !answer.1.is_empty() => sock.write_all(&answer.1).await,
            other => other,
        };
        if written.is_err() || f.close {
            return;
        }
    }
}

/// Appends the data of a whole chunked body to `out`.
fn dechunk_into(mut raw: &[u8], out: &mut Vec<u8>) {
    while let Some(eol) = memmem::find(raw, b"\r\n") {
        let line = raw.get(..eol).unwrap_or_default();
        let hex = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(hex).ok().and_then(|s| usize::from_str_radix(s.trim(), 16).ok()).unwrap_or(0);
        if size == 0 {
            return;
        }
        out.extend_from_slice(raw.get(eol + 2..eol + 2 + size).unwrap_or_default());
        raw = raw.get(eol + 2 + size + 2..).unwrap_or_default();
    }
}

/// Starts the mock on 127.0.0.1:`port` (0 = any) on the current runtime; returns its address.
pub async fn start_mock(port: u16) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve_mock(listener));
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_body_has_the_asked_size_and_stream_flag() {
        for (size, stream) in [(1024, false), (10 * 1024, true)] {
            let b = chat_body("m", size, stream);
            assert_eq!(b.len(), size);
            assert_eq!(wants_stream(&b), stream);
        }
        assert!(wants_stream(br#"{"stream" : true}"#));
        assert!(!wants_stream(br#"{"content":"\"stream\" is a word","stream":false}"#));
    }

    #[test]
    fn chunked_bodies_are_framed_and_decoded() {
        let raw = b"5\r\nhello\r\n6;x=1\r\n world\r\n0\r\n\r\nNEXT";
        let (end, last) = chunked_end(raw, 0).ok().flatten().unwrap_or((0, None));
        assert_eq!(&raw[end..], b"NEXT");
        assert_eq!(last.map(|(s, n)| &raw[s..s + n]), Some(b" world".as_slice()));
        let mut out = Vec::new();
        dechunk_into(&raw[..end], &mut out);
        assert_eq!(out, b"hello world");
        assert!(chunked_end(b"5\r\nhel", 0).ok().flatten().is_none());
        assert!(chunked_end(b"zz\r\n", 0).is_err());
    }

    #[test]
    fn bedrock_paths_get_an_event_stream_of_whole_frames() {
        use switchyard::providers::bedrock::eventstream::Decoder;
        assert_eq!(bedrock_path("/model/us.anthropic.claude-x-v1%3A0/invoke-with-response-stream"), Some(true));
        assert_eq!(bedrock_path("/model/a/invoke"), Some(false));
        assert_eq!(bedrock_path("/v1/chat/completions"), None);
        let (first, rest) = bedrock_answer(true);
        let mut all = first.clone();
        all.extend_from_slice(&rest);
        let head_end = memmem::find(&all, b"\r\n\r\n").map(|i| i + 4).unwrap_or(0);
        assert!(all.starts_with(b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream"));
        let (end, _) = chunked_end(&all, head_end).ok().flatten().unwrap_or((0, None));
        assert_eq!(end, all.len());
        let mut body = Vec::new();
        dechunk_into(&all[head_end..], &mut body);
        let decode = |bytes: &[u8]| {
            let mut out = Vec::new();
            let mut decoder = Decoder::new();
            decoder.feed(bytes, &mut out).unwrap();
            assert_eq!(decoder.pending(), 0, "whole frames only");
            out
        };
        let frames = decode(&body);
        assert_eq!(frames.len(), 6, "one chunk frame per Anthropic event");
        assert!(frames.iter().all(|m| m.string(":event-type") == Some("chunk")));
        // The first write carries exactly the first frame.
        let mut first_body = Vec::new();
        dechunk_into(&first[head_end..], &mut first_body);
        assert_eq!(decode(&first_body).len(), 1);
    }

    #[test]
    fn the_mock_stream_is_well_framed_and_ends_with_done() {
        let (first, rest) = stream(10);
        let mut all = first.clone();
        all.extend_from_slice(&rest);
        let head_end = memmem::find(&all, b"\r\n\r\n").map(|i| i + 4).unwrap_or(0);
        let (end, last) = chunked_end(&all, head_end).ok().flatten().unwrap_or((0, None));
        assert_eq!(end, all.len());
        assert_eq!(last.map(|(s, n)| &all[s..s + n]), Some(b"data: [DONE]\n\n".as_slice()));
    }
}
