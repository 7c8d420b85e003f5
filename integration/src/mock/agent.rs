//! `agent` (`Behavior::agent`): the OpenAI chat model behind a coding agent such as Claude Code,
//! scripted so a test can watch the agent's whole loop through the filter. Given a tool's result
//! (the last message is `role: tool`) it answers with that result's text; asked with a `Read`
//! tool, it calls it on the first absolute path in the last user message's text; otherwise it
//! answers as usual. `onresult` (`Behavior::fault_on_result`) makes a fault token apply only to
//! requests carrying a tool result: the provider fails mid-session, on the agent's second turn.

use bytes::Bytes;
use serde_json::{json, Value};

/// What the scripted model says this turn.
pub(super) enum Turn {
    Call { name: String, args: String },
    Say(String),
}

/// The last message, when it is a tool's result.
fn tool_result(body: &Value) -> Option<&Value> {
    let last = body.get("messages")?.as_array()?.last()?;
    (last.get("role").and_then(Value::as_str) == Some("tool")).then_some(last)
}

/// Whether the request answers a tool call (the agent's later turns).
pub(super) fn carries_tool_result(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|v| tool_result(&v).is_some())
}

fn text_of(content: &Value) -> Vec<&str> {
    match content {
        Value::String(s) => vec![s.as_str()],
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => Vec::new(),
    }
}

/// The turn for a Chat Completions body (None: not a chat body, answer as usual).
pub(super) fn turn(body: &[u8]) -> Option<Turn> {
    let v: Value = serde_json::from_slice(body).ok()?;
    if let Some(result) = tool_result(&v) {
        let text: String = text_of(result.get("content").unwrap_or(&Value::Null)).concat();
        let cut: String = text.chars().take(2000).collect();
        return Some(Turn::Say(format!("The tool said: {cut}")));
    }
    let has_read = v
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| tools.iter().any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some("Read")));
    let messages = v.get("messages")?.as_array()?;
    let user = messages.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    let texts = text_of(user.get("content").unwrap_or(&Value::Null));
    let path = texts.iter().rev().find_map(|t| {
        t.split_whitespace().map(|w| w.trim_end_matches(['.', ',', ';', ':', '"', '\''])).find(|w| w.starts_with('/'))
    });
    match path {
        Some(p) if has_read => Some(Turn::Call { name: "Read".into(), args: json!({"file_path": p}).to_string() }),
        _ => Some(Turn::Say("I have nothing to read.".into())),
    }
}

/// The whole answer for `turn`.
pub(super) fn completion(provider: &str, model: &str, id: u64, turn: &Turn) -> Value {
    let (message, finish) = match turn {
        Turn::Call { name, args } => (
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": format!("call_{id}"), "type": "function", "function": {"name": name, "arguments": args}}]}),
            "tool_calls",
        ),
        Turn::Say(text) => (json!({"role": "assistant", "content": text}), "stop"),
    };
    json!({"id": format!("chatcmpl-{provider}-{id}"), "object": "chat.completion", "created": 1_700_000_000u64,
        "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18}})
}

/// The streamed answer for `turn`: the content or the call (its arguments in two pieces), the
/// finish chunk, the usage chunk when asked, `[DONE]`.
pub(super) fn chunks(provider: &str, model: &str, id: u64, turn: &Turn, usage: bool) -> Vec<Bytes> {
    let chunk = |delta: Value, finish: Value| {
        let v = json!({"id": format!("chatcmpl-{provider}-{id}"), "object": "chat.completion.chunk",
            "created": 1_700_000_000u64, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        Bytes::from(format!("data: {v}\n\n"))
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    let finish = match turn {
        Turn::Call { name, args } => {
            let (a, b) = args.split_at(args.len() / 2);
            out.push(chunk(
                json!({"tool_calls": [{"index": 0, "id": format!("call_{id}"), "type": "function",
                    "function": {"name": name, "arguments": a}}]}),
                Value::Null,
            ));
            out.push(chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}), Value::Null));
            "tool_calls"
        }
        Turn::Say(text) => {
            out.push(chunk(json!({"content": text}), Value::Null));
            "stop"
        }
    };
    out.push(chunk(json!({}), json!(finish)));
    if usage {
        let v = json!({"id": format!("chatcmpl-{provider}-{id}"), "object": "chat.completion.chunk",
            "created": 1_700_000_000u64, "model": model, "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18}});
        out.push(Bytes::from(format!("data: {v}\n\n")));
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}
