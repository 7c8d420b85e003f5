//! What the caller sees of a provider's answer: the body names the catalog model that served
//! (not the provider's internal id) and the serving provider, `usage.cost` prices the serving
//! attempt, streamed chunks get the same treatment event by event, non-JSON provider errors are
//! wrapped in the OpenAI error shape, and the attempt log explains a failover.
//!
//! Pure code: the host adapter feeds it bytes and headers.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::answer::errors::ApiError;
use crate::answer::usage::ReportedUsage;
use crate::api::Api;
use crate::config::{Catalog, Pricing};
use crate::protocol::outcome::{AttemptRecord, Outcome};
use crate::providers::Kind;
use crate::routing::request::TopLevel;

/// What the rewritten answer names: the catalog model id, the serving endpoint's slug and the
/// prices its cost is computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    pub model: String,
    pub slug: String,
    pub pricing: Pricing,
    /// The API of the answer (what its shape allows to rewrite).
    pub api: Api,
}

fn token_count(usage: &Map<String, Value>, keys: &[&str]) -> u64 {
    keys.iter().find_map(|k| usage.get(*k).and_then(Value::as_u64)).unwrap_or(0)
}

/// USD cost of one answer from its `usage` object (chat/completions `prompt_tokens` /
/// `completion_tokens`, Responses `input_tokens` / `output_tokens`). Cached prompt tokens
/// (`prompt_tokens_details.cached_tokens`, `input_tokens_details.cached_tokens`) are charged at
/// `pricing.cached_prompt` when set. Rounded to 1e-12 USD so sums print cleanly.
pub fn usage_cost(usage: &Map<String, Value>, p: &Pricing) -> f64 {
    let prompt = token_count(usage, &["prompt_tokens", "input_tokens"]);
    let completion = token_count(usage, &["completion_tokens", "output_tokens"]);
    let cached = ["prompt_tokens_details", "input_tokens_details"]
        .iter()
        .find_map(|k| usage.get(*k).and_then(Value::as_object))
        .map_or(0, |d| token_count(d, &["cached_tokens"]))
        .min(prompt);
    let cached_price = p.cached_prompt.unwrap_or(p.prompt);
    let cost = (prompt - cached) as f64 * p.prompt / 1e6
        + cached as f64 * cached_price / 1e6
        + completion as f64 * p.completion / 1e6
        + p.request;
    (cost * 1e12).round() / 1e12
}

/// USD cost of an Anthropic `usage` object: `input_tokens` excludes cache reads
/// (`cache_read_input_tokens`, charged at the cached price) and cache writes
/// (`cache_creation_input_tokens`, charged at the prompt price).
pub fn anthropic_usage_cost(usage: &Map<String, Value>, p: &Pricing) -> f64 {
    let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    let uncached = n("input_tokens").saturating_add(n("cache_creation_input_tokens"));
    let cost = uncached as f64 * p.prompt / 1e6
        + n("cache_read_input_tokens") as f64 * p.cached_prompt.unwrap_or(p.prompt) / 1e6
        + n("output_tokens") as f64 * p.completion / 1e6
        + p.request;
    (cost * 1e12).round() / 1e12
}

/// `usage` with `cost` added (or replaced); None when `raw` is not a JSON object (e.g. null).
fn usage_with_cost(raw: &str, p: &Pricing, api: Api) -> Option<Vec<u8>> {
    let Ok(Value::Object(mut usage)) = serde_json::from_str::<Value>(raw) else { return None };
    let cost = if api == Api::Anthropic { anthropic_usage_cost(&usage, p) } else { usage_cost(&usage, p) };
    usage.insert("cost".to_string(), serde_json::json!(cost));
    serde_json::to_vec(&Value::Object(usage)).ok()
}

/// A rewritten answer as pieces, in order: the few replaced members (owned) and the unchanged
/// ranges of the answer as received (borrowed). Runs shorter than [`BORROW_FROM`] are copied
/// into the current owned piece, so a small answer is one piece (one write to the host) and a
/// large one is a handful: it is never copied whole a second time.
#[derive(Debug, Default)]
pub struct Pieces<'a> {
    done: Vec<Cow<'a, [u8]>>,
    /// The owned piece new bytes are appended to (follows `done`).
    current: Vec<u8>,
}

/// Unchanged runs at least this long are handed on borrowed instead of copied.
pub const BORROW_FROM: usize = 16 << 10;

impl<'a> Pieces<'a> {
    /// Pieces for an answer of `size` bytes: the first owned piece is sized for all of it when
    /// that is small (the common answer: one allocation, as before).
    fn for_size(size: usize) -> Self {
        let first = if size <= 4 * BORROW_FROM { size } else { 1024 };
        Pieces { done: Vec::new(), current: Vec::with_capacity(first) }
    }

    fn owned(&mut self) -> &mut Vec<u8> {
        &mut self.current
    }

    /// An unchanged run of the answer.
    fn keep(&mut self, run: &'a [u8]) {
        if run.len() < BORROW_FROM {
            self.current.extend_from_slice(run);
        } else {
            if !self.current.is_empty() {
                self.done.push(Cow::Owned(std::mem::take(&mut self.current)));
            }
            self.done.push(Cow::Borrowed(run));
        }
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.done.iter().map(|p| p.len()).sum::<usize>() + self.current.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces in order (empty ones skipped).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.done.iter().map(|p| p.as_ref()).chain(std::iter::once(self.current.as_slice())).filter(|p| !p.is_empty())
    }

    /// All of it in one buffer (an output of one owned piece is not copied).
    pub fn concat(self) -> Vec<u8> {
        if self.done.is_empty() {
            return self.current;
        }
        let mut out = Vec::with_capacity(self.len());
        for p in self.iter() {
            out.extend_from_slice(p);
        }
        out
    }
}

/// A non-streamed answer's body as it arrives, to be rewritten whole at its end. A VM's linear
/// memory never shrinks, so the peak this reaches stays resident: with the answer's
/// `content-length` known the chunks go into one buffer of that size (no growth by doubling);
/// without, the chunks are kept as received and joined once, into a buffer of the exact size.
#[derive(Debug, Default)]
pub struct Collected {
    chunks: Vec<Vec<u8>>,
    len: usize,
    /// The answer's announced length (0: unknown).
    expected: usize,
}

impl Collected {
    /// `expected`: the answer's `content-length`, if any (the caller bounds it).
    pub fn expecting(expected: Option<usize>) -> Collected {
        Collected { chunks: Vec::new(), len: 0, expected: expected.unwrap_or(0) }
    }

    /// Bytes collected so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, chunk: Vec<u8>) {
        self.len = self.len.saturating_add(chunk.len());
        match self.chunks.as_mut_slice() {
            // The first chunk is kept as it came (often it is the whole answer).
            [] => self.chunks.push(chunk),
            // Length known: one buffer of that size, reserved once the answer proves longer
            // than one chunk. Bytes beyond the announced length go on as further chunks.
            [first] if self.expected >= first.len().saturating_add(chunk.len()) => {
                first.reserve_exact(self.expected - first.len());
                first.extend_from_slice(&chunk);
            }
            _ => self.chunks.push(chunk),
        }
    }

    /// Whether the answer is held in more than one buffer (joining it would copy it).
    pub fn is_split(&self) -> bool {
        self.chunks.len() > 1
    }

    /// Everything collected, as the chunks it is held in (for passing it on unchanged).
    pub fn take_chunks(&mut self) -> Vec<Vec<u8>> {
        self.len = 0;
        std::mem::take(&mut self.chunks)
    }

    /// Everything collected in one buffer; each chunk is freed as soon as it is copied.
    pub fn into_whole(mut self) -> Vec<u8> {
        if self.chunks.len() == 1 {
            if let Some(only) = self.chunks.pop() {
                return only;
            }
        }
        let mut whole = Vec::with_capacity(self.len);
        for chunk in self.chunks.drain(..) {
            whole.extend_from_slice(&chunk);
        }
        whole
    }
}

/// One JSON object answer (or one streamed chunk): `provider` first, `model` replaced by the
/// catalog id, `usage.cost` added; every other member copied byte-for-byte in its order.
/// None when the body is not a JSON object (passed through untouched).
pub fn rewrite_object(body: &[u8], served: &Served) -> Option<Vec<u8>> {
    rewrite_object_pieces(body, served).map(Pieces::concat)
}

/// [`rewrite_object`] as pieces: the members' values are borrowed from `body` where long.
fn rewrite_object_pieces<'a>(body: &'a [u8], served: &Served) -> Option<Pieces<'a>> {
    let fields = TopLevel::parse(body).ok()?;
    let mut out = Pieces::for_size(body.len() + served.slug.len() + 48);
    let o = out.owned();
    o.extend_from_slice(b"{\"provider\":");
    crate::json::write(o, &served.slug);
    for (k, v) in &fields.0 {
        let value: &'a str = v.get();
        let replaced: Option<Vec<u8>> = match k.as_ref() {
            "provider" => continue,
            "model" => {
                let mut m = Vec::new();
                crate::json::write(&mut m, &served.model);
                Some(m)
            }
            "usage" => usage_with_cost(value, &served.pricing, served.api),
            _ => None,
        };
        let o = out.owned();
        o.push(b',');
        crate::json::write(o, k.as_ref());
        o.push(b':');
        match replaced {
            Some(r) => o.extend_from_slice(&r),
            None => out.keep(value.as_bytes()),
        }
    }
    out.owned().push(b'}');
    Some(out)
}

/// A whole answer of the served API, rewritten as that API's shape allows, as pieces to hand
/// on in order (see [`Pieces`]):
/// - OpenAI and Anthropic messages: [`rewrite_object`] (`provider`, catalog `model`,
///   `usage.cost`);
/// - Google: `modelVersion` names the catalog model; nothing is added (Google's schema has no
///   place for the provider or a cost: the response headers carry them).
pub fn rewrite_answer<'a>(body: &'a [u8], served: &Served) -> Option<Pieces<'a>> {
    match served.api {
        Api::OpenAi | Api::Anthropic | Api::Responses => rewrite_object_pieces(body, served),
        Api::Google => replace_member_pieces(body, "modelVersion", &served.model),
    }
}

/// One streamed event's JSON: OpenAI chunks as whole answers; Google chunks as whole Google
/// answers; Anthropic's `message_start` carries the message (rewritten as a whole answer, its
/// usage remembered in `start_usage`), the final `message_delta`'s usage gets the stream's
/// `cost` (prompt side from `message_start`, output from the delta), other events pass unchanged.
fn rewrite_streamed(json: &[u8], served: &Served, start_usage: &Cell<ReportedUsage>) -> Option<Vec<u8>> {
    match served.api {
        Api::OpenAi => rewrite_object(json, served),
        // The Responses API's events carrying the response object (`response.created`, ...,
        // `response.completed`): that object is rewritten as a whole answer (its `usage` gets
        // the cost on the final one); the other events pass unchanged.
        Api::Responses => {
            let fields = TopLevel::parse(json).ok()?;
            let raw = fields.get("response")?.get().as_bytes();
            let response = rewrite_object(raw, served)?;
            Some(splice_member(&fields, "response", &response))
        }
        Api::Google => replace_member(json, "modelVersion", &served.model),
        Api::Anthropic => {
            let fields = TopLevel::parse(json).ok()?;
            match fields.get("type").map(|t| t.get()) {
                Some("\"message_start\"") => {
                    let raw = fields.get("message")?.get().as_bytes();
                    let mut usage = ReportedUsage::default();
                    usage.scan_for(Api::Anthropic, raw);
                    start_usage.set(usage);
                    let message = rewrite_object(raw, served)?;
                    Some(splice_member(&fields, "message", &message))
                }
                Some("\"message_delta\"") => {
                    let raw = fields.get("usage")?.get();
                    let mut whole = start_usage.get();
                    whole.scan_for(Api::Anthropic, raw.as_bytes());
                    let cost = whole.priced(&served.pricing)?.cost_usd;
                    let mut value = Vec::new();
                    crate::json::write(&mut value, &((cost * 1e12).round() / 1e12));
                    let usage = with_member(raw, "cost", &value)?;
                    Some(splice_member(&fields, "usage", &usage))
                }
                _ => None,
            }
        }
    }
}

/// A JSON object's text with one more member appended (no re-serialization); None when `raw`
/// is not an object.
fn with_member(raw: &str, key: &str, value: &[u8]) -> Option<Vec<u8>> {
    let body = raw.trim_end().strip_suffix('}')?;
    if !raw.trim_start().starts_with('{') {
        return None;
    }
    let mut out = Vec::with_capacity(raw.len() + key.len() + 32);
    out.extend_from_slice(body.as_bytes());
    if !body.trim_start().trim_start_matches('{').trim().is_empty() {
        out.push(b',');
    }
    crate::json::write(&mut out, key);
    out.push(b':');
    out.extend_from_slice(value);
    out.push(b'}');
    Some(out)
}

/// `body` with member `key`'s value replaced by the string `value` (only if present); every
/// other member copied byte-for-byte.
fn replace_member(body: &[u8], key: &str, value: &str) -> Option<Vec<u8>> {
    replace_member_pieces(body, key, value).map(Pieces::concat)
}

fn replace_member_pieces<'a>(body: &'a [u8], key: &str, value: &str) -> Option<Pieces<'a>> {
    let fields = TopLevel::parse(body).ok()?;
    fields.get(key)?;
    let mut v = Vec::new();
    crate::json::write(&mut v, value);
    Some(splice_member_pieces(&fields, key, &v))
}

fn splice_member(fields: &TopLevel, key: &str, value: &[u8]) -> Vec<u8> {
    splice_member_pieces(fields, key, value).concat()
}

fn splice_member_pieces<'a>(fields: &TopLevel<'a>, key: &str, value: &[u8]) -> Pieces<'a> {
    let size: usize = fields.0.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum();
    let mut out = Pieces::for_size(size + value.len() + 2);
    out.owned().push(b'{');
    for (i, (k, v)) in fields.0.iter().enumerate() {
        let o = out.owned();
        if i > 0 {
            o.push(b',');
        }
        crate::json::write(o, k.as_ref());
        o.push(b':');
        if k == key {
            o.extend_from_slice(value);
        } else {
            let raw: &'a RawValue = v;
            out.keep(raw.get().as_bytes());
        }
    }
    out.owned().push(b'}');
    out
}

/// An event larger than this without its terminating blank line is passed on unrewritten, so a
/// misbehaving stream cannot make the filter buffer without bound.
const MAX_EVENT_BYTES: usize = 1 << 20;

/// Rewrites a server-sent-event stream chunk by chunk: each `data: {...}` event goes through
/// [`rewrite_object`]; `data: [DONE]`, comments and other lines pass unchanged. An event split
/// across chunks is held until its end arrives (only the incomplete tail is ever held).
#[derive(Debug)]
pub struct SseRewriter {
    served: Served,
    pending: Vec<u8>,
    /// Bytes of `pending` already searched for an event end.
    scanned: usize,
    /// Anthropic: the usage `message_start` reported, for the cost on the final `message_delta`.
    start_usage: Cell<ReportedUsage>,
    /// OpenAI: the usage-only chunk (`choices: []`) is left out (the caller did not ask for it).
    hide_usage_chunk: bool,
    /// The serving provider's kind, whose own events are left out (Azure's prompt filter chunk).
    kind: Option<Arc<dyn Kind>>,
}

impl SseRewriter {
    pub fn new(served: Served) -> SseRewriter {
        SseRewriter {
            served,
            pending: Vec::new(),
            scanned: 0,
            start_usage: Cell::new(ReportedUsage::default()),
            hide_usage_chunk: false,
            kind: None,
        }
    }

    /// Leaves out the events `kind` says are its provider's own (`Kind::hides_stream_event`):
    /// only for a stream passed on in the provider's API, never after a translation.
    pub fn hiding_events_of(mut self, kind: Arc<dyn Kind>) -> SseRewriter {
        self.kind = Some(kind);
        self
    }

    /// Leaves out an OpenAI stream's usage-only chunk (`"choices": []` with `usage`): the
    /// provider sent it because Switchyard asked (`stream_options.include_usage`), the caller did
    /// not ask, and a chunk without choices breaks callers that read `choices[0]` of every chunk.
    pub fn hiding_usage_chunk(mut self, hide: bool) -> SseRewriter {
        self.hide_usage_chunk = hide && self.served.api == Api::OpenAi;
        self
    }

    /// Feeds one chunk; returns what to send on now. With `end`, everything held is flushed.
    pub fn feed(&mut self, chunk: &[u8], end: bool) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.pending.len() + 64);
        let mut start = 0;
        // Search from just before the unscanned part: a "\n\n" or "\n\r\n" may straddle the
        // boundary.
        let mut i = self.scanned.saturating_sub(2).max(start);
        while let Some(end_of_event) = self.pending.get(i..).and_then(blank_line_end).map(|rel| i + rel) {
            if let Some(event) = self.pending.get(start..end_of_event) {
                self.rewrite_event(event, &mut out);
            }
            start = end_of_event;
            i = start;
        }
        let tail_len = self.pending.len() - start.min(self.pending.len());
        if end || tail_len > MAX_EVENT_BYTES {
            out.extend_from_slice(self.pending.get(start..).unwrap_or(&[]));
            self.pending.clear();
        } else {
            self.pending.drain(..start.min(self.pending.len()));
        }
        self.scanned = self.pending.len();
        out
    }

    fn rewrite_event(&self, event: &[u8], out: &mut Vec<u8>) {
        if self.hide_usage_chunk && is_usage_only_chunk(event) {
            return;
        }
        if let (Some(kind), Some(data)) = (&self.kind, event_data(event)) {
            if kind.hides_stream_event(self.served.api, data) {
                return;
            }
        }
        for line in event.split_inclusive(|&b| b == b'\n') {
            let (content, eol): (&[u8], &[u8]) = match line.strip_suffix(b"\r\n") {
                Some(c) => (c, b"\r\n"),
                None => match line.strip_suffix(b"\n") {
                    Some(c) => (c, b"\n"),
                    None => (line, b""),
                },
            };
            let rewritten = content.strip_prefix(b"data:").and_then(|data| {
                let json = data.strip_prefix(b" ").unwrap_or(data);
                if json.first() != Some(&b'{') {
                    return None;
                }
                rewrite_streamed(json, &self.served, &self.start_usage)
            });
            match rewritten {
                Some(json) => {
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(&json);
                    out.extend_from_slice(eol);
                }
                None => out.extend_from_slice(line),
            }
        }
    }
}

/// The `data:` of an event of one data line (the JSON of an OpenAI chunk).
fn event_data(event: &[u8]) -> Option<&[u8]> {
    let data = event.split(|&b| b == b'\n').find_map(|l| l.strip_prefix(b"data:"))?;
    let json = data.strip_prefix(b" ").unwrap_or(data);
    Some(json.strip_suffix(b"\r").unwrap_or(json))
}

/// An OpenAI stream event whose chunk has no choices and carries `usage` (what a provider asked
/// for `stream_options.include_usage` sends last). Only events naming `"usage"` are parsed.
fn is_usage_only_chunk(event: &[u8]) -> bool {
    if !event.windows(7).any(|w| w == b"\"usage\"") {
        return false;
    }
    let Some(data) = event.split(|&b| b == b'\n').find_map(|l| l.strip_prefix(b"data:")) else { return false };
    let json = data.strip_prefix(b" ").unwrap_or(data);
    let json = json.strip_suffix(b"\r").unwrap_or(json);
    let Ok(fields) = TopLevel::parse(json) else { return false };
    let no_choices = fields
        .get("choices")
        .is_some_and(|c| serde_json::from_str::<Vec<serde::de::IgnoredAny>>(c.get()).is_ok_and(|v| v.is_empty()));
    no_choices && fields.get("usage").is_some_and(|u| u.get().trim() != "null")
}

/// The end (exclusive) of the first blank line that ends an event: "\n\n" or "\n\r\n".
fn blank_line_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(rel) = buf.get(from..)?.iter().position(|&b| b == b'\n') {
        let nl = from + rel;
        match (buf.get(nl + 1), buf.get(nl + 2)) {
            (Some(b'\n'), _) => return Some(nl + 2),
            (Some(b'\r'), Some(b'\n')) => return Some(nl + 3),
            _ => from = nl + 1,
        }
    }
    None
}

/// A provider's error answer whose body is not JSON (an HTML page from a gateway, plain text),
/// in the OpenAI error shape with the provider's status. The raw text (at most 1 KB) stays in
/// `metadata.raw`.
pub fn wrap_provider_error(status: u16, body: &[u8], slug: &str) -> ApiError {
    let kind = match status {
        400 | 404 | 405 | 409 | 413 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_error",
        _ if status >= 500 => "server_error",
        _ => "invalid_request_error",
    };
    let mut e = ApiError::new(
        u32::from(status),
        kind,
        "provider_error",
        format!("provider {slug} answered {status} without a JSON error body"),
    );
    let raw = String::from_utf8_lossy(body.get(..1024).unwrap_or(body)).into_owned();
    e.metadata.insert("provider".to_string(), Value::String(slug.to_string()));
    e.metadata.insert("raw".to_string(), Value::String(raw));
    e
}

/// Whether an error body already has the OpenAI shape's outer object (any JSON object counts:
/// providers' own JSON errors are returned as they sent them).
pub fn is_json_object(body: &[u8]) -> bool {
    TopLevel::parse(body).is_ok()
}

/// `x-switchyard-attempt-log`: `slug:status` per attempt in order (`deepinfra:429,together:503,
/// fireworks:200`); `none` when an attempt got no answer (connect failure, reset, timeout).
/// `final_status` fills in the last attempt when its record is still open (its answer is the
/// response being sent).
pub fn attempt_log(catalog: &Catalog, records: &[AttemptRecord], final_status: u16) -> String {
    let last = records.len().saturating_sub(1);
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let slug = catalog.endpoint(r.endpoint as usize).map_or("?", |e| e.slug.as_str());
            let status = if r.status == 0 && i == last { final_status } else { r.status };
            match Outcome::of(status) {
                Outcome::NoResponse => format!("{slug}:none"),
                _ => format!("{slug}:{status}"),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served() -> Served {
        Served {
            model: "meta-llama/llama-4".into(),
            slug: "deepinfra/turbo".into(),
            pricing: Pricing { prompt: 2.0, completion: 10.0, request: 0.001, image: 0.0, cached_prompt: Some(0.5) },
            api: Api::OpenAi,
        }
    }

    fn served_for(api: Api) -> Served {
        Served { api, ..served() }
    }

    #[test]
    fn large_answers_are_handed_on_as_pieces_of_the_received_bytes() {
        let text = "x".repeat(3 * BORROW_FROM);
        let body = format!(
            r#"{{ "id" : "x", "model":"up","choices":[{{"message":{{"content":"{text}"}}}}], "provider":"Other", "usage":{{"prompt_tokens":1}}, "extra":"{text}"}}"#
        );
        let out = rewrite_answer(body.as_bytes(), &served()).unwrap();
        let whole = out.iter().flat_map(|p| p.iter().copied()).collect::<Vec<u8>>();
        assert_eq!(whole.len(), out.len());
        let expected = format!(
            r#"{{"provider":"deepinfra/turbo","id":"x","model":"meta-llama/llama-4","choices":[{{"message":{{"content":"{text}"}}}}],"usage":{{"cost":0.001002,"prompt_tokens":1}},"extra":"{text}"}}"#
        );
        let short = |s: String| s.replace(&text, "T");
        assert_eq!(short(String::from_utf8(whole).unwrap()), short(expected));
        // The two long values are borrowed from the received bytes, not copied.
        let borrowed: Vec<&[u8]> =
            out.iter().filter(|p| body.as_bytes().as_ptr_range().contains(&p.as_ptr())).collect();
        assert_eq!(borrowed.len(), 2);
        assert!(out.iter().count() <= 5);
        // Google: the same, `modelVersion` replaced.
        let g = format!(r#"{{"candidates":[{{"text":"{text}"}}],"modelVersion":"g"}}"#);
        let out = rewrite_answer(g.as_bytes(), &served_for(Api::Google)).unwrap();
        assert_eq!(out.iter().count(), 3);
        assert_eq!(
            short(String::from_utf8(out.concat()).unwrap()),
            short(g.replace(r#""g""#, r#""meta-llama/llama-4""#))
        );
        // Small answers stay one piece.
        let out = rewrite_answer(br#"{"model":"up"}"#, &served()).unwrap();
        assert_eq!(out.iter().count(), 1);
    }

    #[test]
    fn collected_answers_join_to_what_arrived() {
        let chunks: Vec<Vec<u8>> = (0..5u8).map(|i| vec![b'a' + i; 1000 + usize::from(i)]).collect();
        let all: Vec<u8> = chunks.concat();
        // Unknown length, the exact length, a length too short, a length too long.
        for expected in [None, Some(all.len()), Some(1500), Some(all.len() * 2)] {
            let mut c = Collected::expecting(expected);
            for ch in &chunks {
                c.push(ch.clone());
            }
            assert_eq!(c.len(), all.len());
            assert_eq!(c.into_whole(), all, "{expected:?}");
        }
        // With the length known, one buffer of exactly that size.
        let mut c = Collected::expecting(Some(all.len()));
        for ch in &chunks {
            c.push(ch.clone());
        }
        assert_eq!(c.chunks.len(), 1);
        assert_eq!(c.chunks[0].capacity(), all.len());
        let mut c = Collected::expecting(None);
        c.push(b"ab".to_vec());
        c.push(b"cd".to_vec());
        assert_eq!(c.take_chunks(), vec![b"ab".to_vec(), b"cd".to_vec()]);
        assert!(c.is_empty() && c.into_whole().is_empty());
    }

    #[test]
    fn anthropic_message_names_catalog_model_provider_and_cost() {
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-internal","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":10}}"#;
        let out = rewrite_answer(body, &served_for(Api::Anthropic)).unwrap();
        let v: Value = serde_json::from_slice(&out.concat()).unwrap();
        assert_eq!(
            (v["model"].as_str(), v["provider"].as_str()),
            (Some("meta-llama/llama-4"), Some("deepinfra/turbo"))
        );
        assert_eq!(v["type"], "message");
        // 100 * 2 + 1000 * 0.5 + 10 * 10, per million, + 0.001 per request.
        assert_eq!(v["usage"]["cost"].as_f64(), Some((200.0 + 500.0 + 100.0) / 1e6 + 0.001));
    }

    #[test]
    fn anthropic_stream_rewrites_message_start_only() {
        let input = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-internal\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"model\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let mut r = SseRewriter::new(served_for(Api::Anthropic));
        let out = String::from_utf8(r.feed(input, true)).unwrap();
        let events: Vec<&str> = out.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 3, "{out}");
        let start: Value = serde_json::from_str(events[0].split("data: ").nth(1).unwrap()).unwrap();
        assert_eq!(start["type"], "message_start");
        assert_eq!(start["message"]["model"], "meta-llama/llama-4");
        assert_eq!(start["message"]["provider"], "deepinfra/turbo");
        assert!(events[0].starts_with("event: message_start\n"));
        // Other events pass byte-for-byte.
        let rest = &input[input.windows(2).position(|w| w == b"\n\n").unwrap() + 2..];
        assert!(out.ends_with(std::str::from_utf8(rest).unwrap()));
    }

    #[test]
    fn a_member_is_appended_without_reserializing() {
        assert_eq!(with_member(r#"{"a": 1.50 }"#, "cost", b"2").unwrap(), br#"{"a": 1.50 ,"cost":2}"#.to_vec());
        assert_eq!(with_member(" { } ", "cost", b"2").unwrap(), br#" { "cost":2}"#.to_vec());
        assert!(with_member("[1]", "cost", b"2").is_none() && with_member("null", "cost", b"2").is_none());
    }

    #[test]
    fn anthropic_stream_cost_lands_on_the_final_message_delta() {
        let input = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":100,\"cache_read_input_tokens\":1000,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":10}}\n\n";
        let mut expected = None;
        for cut in [0, 40, 200, input.len()] {
            let mut r = SseRewriter::new(served_for(Api::Anthropic));
            let mut out = r.feed(&input[..cut], false);
            out.extend(r.feed(&input[cut..], true));
            let text = String::from_utf8(out).unwrap();
            let ev: Vec<Value> = text
                .split("\n\n")
                .filter_map(|e| e.split("data: ").nth(1))
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            // 100 * 2 + 1000 * 0.5 + 10 * 10 per million + 0.001 per request.
            assert_eq!(ev[1]["usage"]["cost"].as_f64(), Some((200.0 + 500.0 + 100.0) / 1e6 + 0.001), "{text}");
            assert_eq!(ev[1]["usage"]["output_tokens"], 10);
            assert!(ev[1]["usage"].get("input_tokens").is_none(), "the delta keeps its own fields");
            assert_eq!(expected.get_or_insert_with(|| text.clone()), &text, "chunking changes nothing");
        }
    }

    #[test]
    fn google_answers_name_the_catalog_model_and_add_nothing() {
        let body = br#"{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3},"modelVersion":"gemini-2.5-flash-001"}"#;
        let out = rewrite_answer(body, &served_for(Api::Google)).unwrap();
        let expected = String::from_utf8(body.to_vec()).unwrap().replace("gemini-2.5-flash-001", "meta-llama/llama-4");
        assert_eq!(String::from_utf8(out.concat()).unwrap(), expected);
        // No modelVersion: nothing to rewrite.
        assert!(rewrite_answer(br#"{"candidates":[]}"#, &served_for(Api::Google)).is_none());
        let mut r = SseRewriter::new(served_for(Api::Google));
        let out = r.feed(b"data: {\"candidates\":[],\"modelVersion\":\"g\"}\r\n\r\n", true);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "data: {\"candidates\":[],\"modelVersion\":\"meta-llama/llama-4\"}\r\n\r\n"
        );
    }

    #[test]
    fn completion_names_catalog_model_provider_and_cost() {
        let body = br#"{"id":"x","model":"Llama-4-Turbo-Internal","choices":[{"message":{"content":"h\u00e9"}}],"usage":{"prompt_tokens":1000,"completion_tokens":100,"total_tokens":1100}}"#;
        let out = rewrite_object(body, &served()).unwrap();
        let s = String::from_utf8(out.clone()).unwrap();
        assert!(s.starts_with(r#"{"provider":"deepinfra/turbo","id":"x","model":"meta-llama/llama-4","choices":[{"message":{"content":"h\u00e9"}}]"#), "{s}");
        let v: Value = serde_json::from_slice(&out).unwrap();
        // 1000 * 2/1e6 + 100 * 10/1e6 + 0.001 = 0.002 + 0.001 + 0.001
        assert_eq!(v["usage"]["cost"].as_f64(), Some(0.004));
        assert_eq!(v["usage"]["total_tokens"], 1100);
    }

    #[test]
    fn cached_prompt_tokens_use_the_cached_price() {
        let usage = serde_json::json!({"prompt_tokens": 1000, "completion_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 800}});
        let p = served().pricing;
        // 200 * 2/1e6 + 800 * 0.5/1e6 + 0.001
        assert_eq!(usage_cost(usage.as_object().unwrap(), &p), 0.0018);
        let no_cached_price = Pricing { cached_prompt: None, ..p };
        assert_eq!(usage_cost(usage.as_object().unwrap(), &no_cached_price), 0.003);
        // Responses API names; cached never exceeds prompt.
        let usage = serde_json::json!({"input_tokens": 10, "output_tokens": 5,
            "input_tokens_details": {"cached_tokens": 50}});
        assert_eq!(usage_cost(usage.as_object().unwrap(), &p), 10.0 * 0.5 / 1e6 + 5.0 * 10.0 / 1e6 + 0.001);
    }

    #[test]
    fn non_objects_pass_and_null_usage_stays() {
        assert!(rewrite_object(b"[1]", &served()).is_none());
        assert!(rewrite_object(b"<html>", &served()).is_none());
        let out = rewrite_object(br#"{"provider":"Other","usage":null}"#, &served()).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), r#"{"provider":"deepinfra/turbo","usage":null}"#);
    }

    fn sse(events: &[&str]) -> Vec<u8> {
        events.iter().map(|e| format!("data: {e}\n\n")).collect::<String>().into_bytes()
    }

    #[test]
    fn sse_rewrites_each_event_whatever_the_chunking() {
        let input = sse(&[
            r#"{"id":"c","model":"up","choices":[{"delta":{"content":"a"}}]}"#,
            r#"{"id":"c","model":"up","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3}}"#,
            "[DONE]",
        ]);
        let mut expected = Vec::new();
        {
            let mut r = SseRewriter::new(served());
            expected.extend(r.feed(&input, true));
        }
        let text = String::from_utf8(expected.clone()).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 3, "{text}");
        for e in &events[..2] {
            let v: Value = serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(v["model"], "meta-llama/llama-4");
            assert_eq!(v["provider"], "deepinfra/turbo");
        }
        let last: Value = serde_json::from_str(events[1].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(last["usage"]["cost"].as_f64(), Some(10.0 * 2.0 / 1e6 + 3.0 * 10.0 / 1e6 + 0.001));
        assert_eq!(events[2], "data: [DONE]");
        // Every split point (including inside "\n\n") gives the same bytes, and nothing of a
        // complete event is held back.
        for cut in 0..input.len() {
            let mut r = SseRewriter::new(served());
            let mut got = r.feed(&input[..cut], false);
            got.extend(r.feed(&input[cut..], false));
            assert_eq!(got, expected, "cut at {cut}");
            assert!(r.feed(b"", true).is_empty());
        }
    }

    #[test]
    fn a_usage_chunk_the_caller_did_not_ask_for_is_left_out() {
        let input = b"data: {\"model\":\"up\",\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: {\"model\":\"up\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
        let shown = String::from_utf8(SseRewriter::new(served()).feed(input, true)).unwrap();
        assert_eq!(shown.matches("data: ").count(), 3, "{shown}");
        assert!(shown.contains("\"cost\":"), "asked for: passed on with its cost: {shown}");
        let hidden = String::from_utf8(SseRewriter::new(served()).hiding_usage_chunk(true).feed(input, true)).unwrap();
        let events: Vec<&str> = hidden.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 2, "{hidden}");
        assert!(events[0].contains("\"finish_reason\":\"stop\"") && events[1] == "data: [DONE]", "{hidden}");
        // A chunk with choices keeps its usage; other APIs are never touched.
        let with_choices = b"data: {\"choices\":[{\"delta\":{}}],\"usage\":{\"prompt_tokens\":1}}\n\n";
        let out = SseRewriter::new(served()).hiding_usage_chunk(true).feed(with_choices, true);
        assert!(String::from_utf8(out).unwrap().contains("prompt_tokens"));
        let google = b"data: {\"choices\":[],\"usage\":{}}\r\n\r\n";
        assert!(!SseRewriter::new(served_for(Api::Google)).hiding_usage_chunk(true).feed(google, true).is_empty());
    }

    #[test]
    fn sse_keeps_other_lines_and_crlf() {
        let input = b": keepalive\r\n\r\nevent: x\r\ndata: {\"model\":\"up\"}\r\n\r\ndata:{\"model\":\"up\"}\n\n";
        let mut r = SseRewriter::new(served());
        let out = String::from_utf8(r.feed(input, false)).unwrap();
        assert_eq!(
            out,
            ": keepalive\r\n\r\nevent: x\r\ndata: {\"provider\":\"deepinfra/turbo\",\"model\":\"meta-llama/llama-4\"}\r\n\r\ndata: {\"provider\":\"deepinfra/turbo\",\"model\":\"meta-llama/llama-4\"}\n\n"
        );
    }

    #[test]
    fn sse_incomplete_tail_is_flushed_at_end_and_bounded() {
        let mut r = SseRewriter::new(served());
        assert!(r.feed(b"data: {\"model\":\"up\"", false).is_empty());
        assert_eq!(r.feed(b"}", true), b"data: {\"model\":\"up\"}".to_vec());
        let big = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert_eq!(r.feed(&big, false).len(), big.len());
    }

    #[test]
    fn non_json_errors_are_wrapped() {
        let e = wrap_provider_error(403, b"<html><body>Forbidden</body></html>", "together");
        assert_eq!((e.status, e.kind, e.code), (403, "permission_error", "provider_error"));
        let v: Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(v["error"]["metadata"]["provider"], "together");
        assert_eq!(v["error"]["metadata"]["raw"], "<html><body>Forbidden</body></html>");
        let long = vec![b'a'; 5000];
        let v: Value = serde_json::from_str(&wrap_provider_error(400, &long, "x").body()).unwrap();
        assert_eq!(v["error"]["metadata"]["raw"].as_str().unwrap().len(), 1024);
        assert!(is_json_object(br#"{"error":{}}"#));
        assert!(!is_json_object(b"Bad Request"));
    }

    #[test]
    fn attempt_log_lists_each_attempt() {
        let c = Catalog::from_json(
            br#"{"providers": {"a": {"cluster": "ca", "authority": "a"}, "b": {"cluster": "cb", "authority": "b"}},
                "models": {"m": {"endpoints": [{"provider": "a", "pricing": {"prompt": 1, "completion": 1}},
                                               {"provider": "b/x", "pricing": {"prompt": 1, "completion": 1}}]}}}"#,
            &|_| None,
        )
        .unwrap();
        let r = |endpoint, status| AttemptRecord { endpoint, status, retry_after_s: None };
        assert_eq!(attempt_log(&c, &[r(0, 429), r(1, 0), r(0, 0)], 200), "a:429,b/x:none,a:200");
        assert_eq!(attempt_log(&c, &[r(0, 503)], 503), "a:503");
        assert_eq!(attempt_log(&c, &[], 200), "");
    }
}
