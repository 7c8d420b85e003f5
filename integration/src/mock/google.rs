//! The mock's Google Gemini API (`POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent`), in the shapes the API documents and the `google-genai` SDK parses:
//! a `GenerateContentResponse` (`candidates`, `usageMetadata`, `modelVersion`); streamed with
//! `?alt=sse` as `data: {GenerateContentResponse}` events separated by CRLF CRLF as Google sends
//! them (cumulative usage in every chunk, `finishReason` in the last), without it as one JSON
//! array; errors as `{"error":{"code","message","status"}}`.

use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{answer_text, send_stream, stream_head, tool_arguments, whole_answer, Ask, Behavior, BoxError};
use super::{ChannelBody, Events, InFlight};

/// `(model, method)` of a Gemini generate path (`/v1beta/models/gemini-2.5-flash:generateContent`),
/// for the methods `generateContent` and `streamGenerateContent`. Allocation-free.
pub fn model_and_method(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, method) = rest.rsplit_once(':')?;
    (!model.is_empty() && matches!(method, "generateContent" | "streamGenerateContent")).then_some((model, method))
}

/// 403 without an API key (`x-goog-api-key` or the `key` query parameter), as Google answers.
pub(super) fn refusal(api_key: Option<&str>, query: Option<&str>) -> Option<(u16, &'static str)> {
    let in_query = query.and_then(|q| super::query_param(q, "key")).is_some_and(|k| !k.is_empty());
    if api_key.is_some_and(|k| !k.is_empty()) || in_query {
        None
    } else {
        Some((
            403,
            "Method doesn't allow unregistered callers (callers without established identity). \
             Please use API Key or other form of API consumer identity to call this API.",
        ))
    }
}

/// `GenerateContentRequest`'s fields (the Gemini API's: Vertex AI's `labels` is not one), in both
/// spellings the JSON mapping accepts. OpenRouter's fields (`user`, `reasoning`, `usage`, ...)
/// are unknown names to it.
const FIELDS: &[&str] = &[
    "model",
    "contents",
    "tools",
    "toolConfig",
    "tool_config",
    "safetySettings",
    "safety_settings",
    "systemInstruction",
    "system_instruction",
    "generationConfig",
    "generation_config",
    "cachedContent",
    "cached_content",
];

/// A body Google refuses with 400 `INVALID_ARGUMENT`: not a JSON object, or a field the request
/// does not have.
pub(super) fn invalid_body(body: &[u8]) -> Option<String> {
    let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(body) else {
        return Some("Invalid JSON payload received.".to_string());
    };
    o.keys()
        .find(|k| !FIELDS.contains(&k.as_str()))
        .map(|k| format!("Invalid JSON payload received. Unknown name \"{k}\": Cannot find field."))
}

/// The canonical `status` Google sends with an HTTP status.
pub fn error_status(status: u16) -> &'static str {
    match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        500 => "INTERNAL",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNKNOWN",
    }
}

/// Google's error body. A retry delay travels only in a `RetryInfo` detail (`"retryDelay": "7s"`):
/// Gemini sends no `retry-after` header.
pub(super) fn error_json(status: u16, msg: &str, retry_after: Option<u32>) -> Value {
    let mut e = json!({"error": {"code": status, "message": msg, "status": error_status(status)}});
    if let Some(s) = retry_after {
        e["error"]["details"] =
            json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{s}s")}]);
    }
    e
}

/// A 200 that is not what was asked for: broken JSON, or one broken event.
pub(super) fn garbage(stream: bool) -> (&'static str, &'static str) {
    if stream {
        ("text/event-stream", "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"x\"\r\n\r\n")
    } else {
        ("application/json", "{\"candidates\": [oops <html>")
    }
}

/// `usageMetadata`: `promptTokenCount` includes the cached tokens (`cachedContentTokenCount`).
fn usage(prompt_tokens: u64, candidates_tokens: u64, b: &Behavior) -> Value {
    let mut u = json!({"promptTokenCount": prompt_tokens, "candidatesTokenCount": candidates_tokens,
        "totalTokenCount": prompt_tokens + candidates_tokens});
    if let Some(c) = b.cached_tokens {
        u["cachedContentTokenCount"] = json!(c.min(prompt_tokens));
    }
    u
}

/// The thoughts of an answer to a request asking for them (`thinkingConfig.includeThoughts` and
/// a budget other than 0): they name the budget received, so a test through the filter reads
/// what the request became.
pub fn thought_text(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let g = v.get("generationConfig").or_else(|| v.get("generation_config"))?;
    let t = g.get("thinkingConfig").or_else(|| g.get("thinking_config"))?;
    let include = t.get("includeThoughts").or_else(|| t.get("include_thoughts")).and_then(Value::as_bool);
    let budget = t.get("thinkingBudget").or_else(|| t.get("thinking_budget")).and_then(Value::as_i64);
    match (include, budget) {
        (Some(true), Some(-1) | None) => Some("Thinking dynamically.".to_string()),
        (Some(true), Some(b)) if b > 0 => Some(format!("Thinking within a budget of {b} tokens.")),
        _ => None,
    }
}

/// The thought tokens the mock reports for an answer with thoughts.
const THOUGHT_TOKENS: u64 = 7;

/// A `GenerateContentResponse` with one candidate.
fn response(ask: &Ask<'_>, parts: Value, finish: bool, usage: Value) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if finish {
        candidate["finishReason"] = json!("STOP");
    }
    json!({"candidates": [candidate], "usageMetadata": usage, "modelVersion": ask.model,
        "responseId": format!("mock-{}-{}", ask.provider, ask.id)})
}

fn tool_part(valid: bool) -> Value {
    // A malformed call: its args are not a JSON object (a broken JSON string).
    let args = if valid {
        serde_json::from_str(tool_arguments(true)).unwrap_or(Value::Null)
    } else {
        json!(tool_arguments(false))
    };
    json!({"functionCall": {"name": "get_weather", "args": args}})
}

/// `sse`: `streamGenerateContent?alt=sse` (events); without it a stream is one JSON array.
pub(super) fn answer(ask: Ask<'_>, sse: bool, b: Behavior, guard: InFlight) -> Result<Response<ChannelBody>, BoxError> {
    let p = ask.prompt_tokens;
    let thoughts = thought_text(ask.body);
    // Thought tokens counted apart, as Gemini reports them.
    let with_thoughts = |mut u: Value| {
        if thoughts.is_some() {
            u["thoughtsTokenCount"] = json!(THOUGHT_TOKENS);
            u["totalTokenCount"] = json!(u["totalTokenCount"].as_u64().unwrap_or(0) + THOUGHT_TOKENS);
        }
        u
    };
    if !ask.stream {
        drop(guard);
        let mut parts = match b.tool_call {
            Some(valid) => json!([tool_part(valid)]),
            None => json!([{"text": answer_text(ask.provider, &b)}]),
        };
        if let (Some(t), Some(list)) = (&thoughts, parts.as_array_mut()) {
            list.insert(0, json!({"text": t, "thought": true}));
        }
        let body = response(&ask, parts, true, with_thoughts(usage(p, 4, &b))).to_string();
        let (resp, body) = whole_answer(ask.provider, body, ask.gzip, b.big_body.map(|_| b.big_sized));
        return Ok(resp.body(body)?);
    }
    // Content chunks (a tool call arrives whole, in one), then a last chunk with the finish reason.
    let mut parts: Vec<Value> = match b.tool_call {
        Some(valid) => vec![json!([tool_part(valid)])],
        None => (0..b.chunks).map(|i| json!([{"text": format!("tok{i} ")}])).collect(),
    };
    // Thoughts come first, in two chunks of their own.
    if let Some(t) = &thoughts {
        let (x, y) = t.split_at(t.len() / 2);
        parts.splice(0..0, [json!([{"text": x, "thought": true}]), json!([{"text": y, "thought": true}])]);
    }
    let count = parts.len();
    let frame = |i: usize, v: &Value| -> Bytes {
        Bytes::from(match (sse, i) {
            (true, _) => format!("data: {v}\r\n\r\n"),
            (false, 0) => format!("[{v}"),
            (false, _) => format!(",\r\n{v}"),
        })
    };
    let chunks: Vec<Bytes> = parts
        .into_iter()
        .enumerate()
        .map(|(i, part)| frame(i, &response(&ask, part, false, with_thoughts(usage(p, i as u64 + 1, &b)))))
        .collect();
    let last = frame(count, &response(&ask, json!([{"text": ""}]), true, with_thoughts(usage(p, count as u64, &b))));
    let tail: Vec<Bytes> = if sse { vec![last] } else { vec![last, Bytes::from_static(b"]")] };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let gzip = ask.gzip;
    tokio::spawn(async move {
        let _guard = guard;
        let content = |i: usize| chunks.get(i).cloned().unwrap_or_default();
        // Google reports a failure mid-stream as one more chunk holding an error.
        let error = || {
            let e = error_json(503, "The model is overloaded. Please try again later.", None);
            let first = b.cut_after.is_some_and(|(n, _)| n == 0);
            Bytes::from(match (sse, first) {
                (true, _) => format!("data: {e}\r\n\r\n"),
                (false, true) => format!("[{e}]"),
                (false, false) => format!(",\r\n{e}]"),
            })
        };
        send_stream(tx, &b, gzip, Events { head: [], count, content, tail, error }).await;
    });
    let content_type = if sse { "text/event-stream" } else { "application/json" };
    Ok(stream_head(ask.provider, content_type, ask.gzip).body(ChannelBody(rx))?)
}
