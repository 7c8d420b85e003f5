//! What the caller sees of a provider's answer: the body names the catalog model that served
//! (not the provider's internal id) and the serving provider, `usage.cost` prices the serving
//! attempt, streamed chunks get the same treatment event by event, non-JSON provider errors are
//! wrapped in the OpenAI error shape, and the attempt log explains a failover.
//!
//! Pure code: the host adapter feeds it bytes and headers.

use serde_json::{Map, Value};

use crate::config::{Catalog, Pricing};
use crate::errors::ApiError;
use crate::failover::{AttemptRecord, Outcome};
use crate::request::TopLevel;

/// What the rewritten answer names: the catalog model id, the serving endpoint's slug and the
/// prices its cost is computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    pub model: String,
    pub slug: String,
    pub pricing: Pricing,
}

fn push_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    match serde_json::to_vec(v) {
        Ok(b) => out.extend_from_slice(&b),
        Err(_) => out.extend_from_slice(b"null"),
    }
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

/// `usage` with `cost` added (or replaced); None when `raw` is not a JSON object (e.g. null).
fn usage_with_cost(raw: &str, p: &Pricing) -> Option<Vec<u8>> {
    let Ok(Value::Object(mut usage)) = serde_json::from_str::<Value>(raw) else { return None };
    let cost = usage_cost(&usage, p);
    usage.insert("cost".to_string(), serde_json::json!(cost));
    serde_json::to_vec(&Value::Object(usage)).ok()
}

/// One JSON object answer (or one streamed chunk): `provider` first, `model` replaced by the
/// catalog id, `usage.cost` added; every other member copied byte-for-byte in its order.
/// None when the body is not a JSON object (passed through untouched).
pub fn rewrite_object(body: &[u8], served: &Served) -> Option<Vec<u8>> {
    let fields = TopLevel::parse(body).ok()?;
    let mut out = Vec::with_capacity(body.len() + served.slug.len() + 48);
    out.extend_from_slice(b"{\"provider\":");
    push_json(&mut out, &served.slug);
    for (k, v) in &fields.0 {
        let value = v.get();
        let replaced: Option<Vec<u8>> = match k.as_ref() {
            "provider" => continue,
            "model" => {
                let mut m = Vec::new();
                push_json(&mut m, &served.model);
                Some(m)
            }
            "usage" => usage_with_cost(value, &served.pricing),
            _ => None,
        };
        out.push(b',');
        push_json(&mut out, k.as_ref());
        out.push(b':');
        match replaced {
            Some(r) => out.extend_from_slice(&r),
            None => out.extend_from_slice(value.as_bytes()),
        }
    }
    out.push(b'}');
    Some(out)
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
}

impl SseRewriter {
    pub fn new(served: Served) -> SseRewriter {
        SseRewriter { served, pending: Vec::new(), scanned: 0 }
    }

    /// Feeds one chunk; returns what to send on now. With `end`, everything held is flushed.
    pub fn feed(&mut self, chunk: &[u8], end: bool) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.pending.len() + 64);
        let mut start = 0;
        // Search from just before the unscanned part: a "\n\n" may straddle the boundary.
        let mut i = self.scanned.saturating_sub(1).max(start);
        while let Some(rel) = self.pending.get(i..).and_then(|rest| rest.windows(2).position(|w| w == b"\n\n")) {
            let end_of_event = i + rel + 2;
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
                rewrite_object(json, &self.served)
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
        }
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
