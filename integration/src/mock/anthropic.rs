//! The mock's Anthropic Messages API (`POST /v1/messages`), in the shapes the API documents and
//! the official SDKs parse: a `message` object, the streamed event sequence (`message_start`,
//! `content_block_start`, `ping`, `content_block_delta`…, `content_block_stop`, `message_delta`
//! with the output token count, `message_stop`) and `{"type":"error","error":{…}}` errors.

use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{answer_text, send_stream, stream_head, tool_arguments, whole_answer, Ask, Behavior, BoxError};
use super::{ChannelBody, Events, InFlight};

/// 401 without an API key in `x-api-key` (an `authorization: Bearer` API key is refused too: the
/// API takes bearer tokens only for OAuth), and 400 without `anthropic-version`, as the API
/// answers them.
pub(super) fn refusal(api_key: Option<&str>, version: Option<&str>) -> Option<(u16, &'static str)> {
    if api_key.is_none_or(str::is_empty) {
        Some((401, "x-api-key header is required"))
    } else if version.is_none_or(str::is_empty) {
        Some((400, "anthropic-version: header is required"))
    } else {
        None
    }
}

/// The Messages API's request fields, beta ones included (`cache_control`: automatic prompt
/// caching; `output_format`: the structured-outputs beta's name for `output_config.format`;
/// `inference_geo`, `speed`). OpenRouter's own fields (`provider`, `user`, `reasoning`,
/// `session_id`, `usage`, ...) are not among them: the real API refuses them.
const FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_k",
    "top_p",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
    "context_management",
    "output_config",
    "output_format",
    "cache_control",
    "inference_geo",
    "speed",
];

/// A body the Messages API refuses with 400: not a JSON object, a field it does not document
/// (`<field>: Extra inputs are not permitted`), or no `max_tokens` (`max_tokens: Field required`).
pub(super) fn invalid_body(body: &[u8]) -> Option<String> {
    let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(body) else {
        return Some("The request body is not valid JSON.".to_string());
    };
    if let Some(unknown) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Some(format!("{unknown}: Extra inputs are not permitted"));
    }
    (!o.contains_key("max_tokens")).then(|| "max_tokens: Field required".to_string())
}

/// The error `type` Anthropic sends with a status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

pub(super) fn error_json(status: u16, msg: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(status), "message": msg}, "request_id": "req_mock"})
}

/// A 200 that is not what was asked for: broken JSON, or one broken event and no `message_stop`.
pub(super) fn garbage(stream: bool) -> (&'static str, &'static str) {
    if stream {
        (
            "text/event-stream",
            "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"delta\": {\"text\": \"x\"\n\n",
        )
    } else {
        ("application/json", "{\"type\": \"message\", \"content\": [oops <html>")
    }
}

/// `usage` as Anthropic reports it: `input_tokens` excludes the prompt tokens read from cache.
fn usage(prompt_tokens: u64, output_tokens: u64, b: &Behavior) -> Value {
    let cached = b.cached_tokens.unwrap_or(0).min(prompt_tokens);
    json!({"input_tokens": prompt_tokens - cached, "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached})
}

fn event(kind: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

/// The thinking text of an answer to a request with `thinking` (none without): it names the
/// budget received, so a test through the filter reads what the request became.
pub fn thinking_text(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match v.pointer("/thinking/type")?.as_str()? {
        "enabled" => Some(format!("Thinking within a budget of {} tokens.", v.pointer("/thinking/budget_tokens")?)),
        "adaptive" => Some("Thinking adaptively.".to_string()),
        _ => None,
    }
}

/// A thinking block's signature, as Anthropic sends one (opaque to a client).
const SIGNATURE: &str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds";

/// The thinking block's events: its start, its text in two deltas, its signature, its stop.
fn thinking_events(text: &str) -> Vec<Bytes> {
    let (x, y) = text.split_at(text.len() / 2);
    let delta =
        |d: Value| event("content_block_delta", &json!({"type": "content_block_delta", "index": 0, "delta": d}));
    vec![
        event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        delta(json!({"type": "thinking_delta", "thinking": x})),
        delta(json!({"type": "thinking_delta", "thinking": y})),
        delta(json!({"type": "signature_delta", "signature": SIGNATURE})),
        event("content_block_stop", &json!({"type": "content_block_stop", "index": 0})),
    ]
}

pub(super) fn answer(ask: Ask<'_>, b: Behavior, guard: InFlight) -> Result<Response<ChannelBody>, BoxError> {
    let msg_id = format!("msg_{}_{}", ask.provider, ask.id);
    if let Some(turn) = b.agent.then(|| super::agent::anthropic_turn(ask.body)).flatten() {
        drop(guard);
        if ask.stream {
            let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
            for e in super::agent::anthropic_events(ask.provider, &ask.model, ask.id, &turn) {
                let _ = tx.try_send(Ok(e));
            }
            return Ok(stream_head(ask.provider, "text/event-stream", false).body(ChannelBody(rx))?);
        }
        let message = super::agent::anthropic_message(ask.provider, &ask.model, ask.id, &turn);
        let (resp, body) = whole_answer(ask.provider, message.to_string(), false, None);
        return Ok(resp.header("request-id", format!("req_{msg_id}")).body(body)?);
    }
    let thinking = thinking_text(ask.body);
    if !ask.stream {
        drop(guard);
        let (mut content, stop_reason) = match b.tool_call {
            Some(valid) => {
                // A malformed tool call: its input is not a JSON object (a broken JSON string).
                let input = if valid {
                    serde_json::from_str(tool_arguments(true)).unwrap_or(Value::Null)
                } else {
                    json!(tool_arguments(false))
                };
                (json!([{"type": "tool_use", "id": "toolu_mock_1", "name": "get_weather", "input": input}]), "tool_use")
            }
            None => (json!([{"type": "text", "text": answer_text(ask.provider, &b)}]), "end_turn"),
        };
        if let (Some(t), Some(blocks)) = (&thinking, content.as_array_mut()) {
            blocks.insert(0, json!({"type": "thinking", "thinking": t, "signature": SIGNATURE}));
        }
        let message = json!({"id": msg_id, "type": "message", "role": "assistant", "model": ask.model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": usage(ask.prompt_tokens, 4, &b)});
        let (resp, body) = whole_answer(ask.provider, message.to_string(), ask.gzip, b.big_body.map(|_| b.big_sized));
        return Ok(resp.header("request-id", format!("req_{msg_id}")).body(body)?);
    }

    let start = json!({"type": "message_start", "message": {"id": msg_id, "type": "message", "role": "assistant",
        "model": ask.model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": usage(ask.prompt_tokens, 1, &b)}});
    // Tool calls stream their input as two `input_json_delta` pieces; text as `chunks` deltas.
    let (block, deltas, stop_reason): (Value, Vec<Value>, &str) = match b.tool_call {
        Some(valid) => {
            let args = tool_arguments(valid);
            let (x, y) = args.split_at(args.len() / 2);
            let piece = |p: &str| json!({"type": "input_json_delta", "partial_json": p});
            (
                json!({"type": "tool_use", "id": "toolu_mock_1", "name": "get_weather", "input": {}}),
                vec![piece(x), piece(y)],
                "tool_use",
            )
        }
        None => (
            json!({"type": "text", "text": ""}),
            (0..b.chunks).map(|i| json!({"type": "text_delta", "text": format!("tok{i} ")})).collect(),
            "end_turn",
        ),
    };
    let output_tokens = deltas.len() as u64;
    // A thinking block first (index 0) when the request asked for thinking.
    let index = usize::from(thinking.is_some());
    let mut head = vec![event("message_start", &start)];
    head.extend(thinking.as_deref().map(thinking_events).unwrap_or_default());
    head.push(event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": block}),
    ));
    head.push(event("ping", &json!({"type": "ping"})));
    let deltas: Vec<Bytes> = deltas
        .into_iter()
        .map(|d| event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": d})))
        .collect();
    let tail = [
        event("content_block_stop", &json!({"type": "content_block_stop", "index": index})),
        event(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                "usage": {"output_tokens": output_tokens}}),
        ),
        event("message_stop", &json!({"type": "message_stop"})),
    ];
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let gzip = ask.gzip;
    tokio::spawn(async move {
        let _guard = guard;
        let count = deltas.len();
        let content = |i: usize| deltas.get(i).cloned().unwrap_or_default();
        let error = || {
            let e = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
            event("error", &e)
        };
        send_stream(tx, &b, gzip, Events { head, count, content, tail, error }).await;
    });
    Ok(stream_head(ask.provider, "text/event-stream", ask.gzip)
        .header("request-id", format!("req_{msg_id}"))
        .body(ChannelBody(rx))?)
}
