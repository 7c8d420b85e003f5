//! `agent` (`Behavior::agent`): the model behind a coding agent such as Claude Code or Codex, on
//! the OpenAI chat API or Anthropic's Messages API, scripted so a test can watch the agent's
//! whole loop through the filter. Given a tool's result (the last message is `role: tool`, or a
//! user turn holding a `tool_result` block) it answers with that result's text; offered a tool
//! that reads a file (Claude Code's `Read`, Codex's `exec_command` or `shell`, running `cat`, or
//! a `read_file(path)` function such as the Agents SDK test defines), it
//! calls it on the first absolute path in the last user message's text; otherwise it answers as
//! usual. `onresult` (`Behavior::fault_on_result`) makes a fault token apply only to
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

/// The `tool_result` block of an Anthropic body's last message.
fn anthropic_result(body: &Value) -> Option<&Value> {
    let last = body.get("messages")?.as_array()?.last()?;
    let blocks = last.get("content")?.as_array()?;
    blocks.iter().find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
}

/// Whether the request answers a tool call (the agent's later turns), in either API.
pub(super) fn carries_tool_result(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|v| tool_result(&v).is_some() || anthropic_result(&v).is_some())
}

/// The call reading `path` with the first file-reading tool offered (by name).
fn read_call<'a>(mut names: impl Iterator<Item = &'a str>, path: &str) -> Option<Turn> {
    names.find_map(|name| {
        let args = match name {
            "Read" => json!({"file_path": path}),
            "exec_command" => json!({"cmd": format!("cat {path}")}),
            "shell" => json!({"command": ["cat", path]}),
            // A plain function tool, as an SDK's agent defines one (integration/python).
            "read_file" => json!({"path": path}),
            _ => return None,
        };
        Some(Turn::Call { name: name.to_string(), args: args.to_string() })
    })
}

/// The first absolute path in these texts (the last text first).
fn path_in<'a>(texts: &[&'a str]) -> Option<&'a str> {
    texts.iter().rev().find_map(|t| {
        t.split_whitespace()
            .map(|w| w.trim_end_matches(['.', ',', ';', ':', '"', '\'', '`', '?']))
            .find(|w| w.starts_with('/'))
    })
}

fn said(text: &str) -> Turn {
    let cut: String = text.chars().take(2000).collect();
    Turn::Say(format!("The tool said: {cut}"))
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
        return Some(said(&text_of(result.get("content").unwrap_or(&Value::Null)).concat()));
    }
    let tools = v.get("tools").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let names = tools.iter().filter_map(|t| t.pointer("/function/name").and_then(Value::as_str));
    let messages = v.get("messages")?.as_array()?;
    let user = messages.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    let path = path_in(&text_of(user.get("content").unwrap_or(&Value::Null)));
    Some(path.and_then(|p| read_call(names, p)).unwrap_or_else(|| Turn::Say("I have nothing to read.".into())))
}

/// The turn for an Anthropic Messages body (None: not a Messages body, answer as usual).
pub(super) fn anthropic_turn(body: &[u8]) -> Option<Turn> {
    let v: Value = serde_json::from_slice(body).ok()?;
    if let Some(result) = anthropic_result(&v) {
        return Some(said(&text_of(result.get("content").unwrap_or(&Value::Null)).concat()));
    }
    let tools = v.get("tools").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let names = tools.iter().filter_map(|t| t.get("name").and_then(Value::as_str));
    let messages = v.get("messages")?.as_array()?;
    let user = messages.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    let path = path_in(&text_of(user.get("content").unwrap_or(&Value::Null)));
    Some(path.and_then(|p| read_call(names, p)).unwrap_or_else(|| Turn::Say("I have nothing to read.".into())))
}

/// The Anthropic content block for `turn`, and its stop reason.
fn anthropic_block(id: u64, turn: &Turn) -> (Value, &'static str) {
    match turn {
        Turn::Call { name, args } => {
            let input: Value = serde_json::from_str(args).unwrap_or(Value::Null);
            (json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": name, "input": input}), "tool_use")
        }
        Turn::Say(text) => (json!({"type": "text", "text": text}), "end_turn"),
    }
}

/// The whole Anthropic `message` for `turn`.
pub(super) fn anthropic_message(provider: &str, model: &str, id: u64, turn: &Turn) -> Value {
    let (block, stop) = anthropic_block(id, turn);
    json!({"id": format!("msg_{provider}_{id}"), "type": "message", "role": "assistant", "model": model,
        "content": [block], "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 8}})
}

/// The streamed Anthropic answer for `turn`: the block (a call's input in two pieces), its stop.
pub(super) fn anthropic_events(provider: &str, model: &str, id: u64, turn: &Turn) -> Vec<Bytes> {
    let event = |v: Value| Bytes::from(format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap_or("")));
    let (block, stop) = anthropic_block(id, turn);
    let mut out = vec![event(json!({"type": "message_start", "message": {"id": format!("msg_{provider}_{id}"),
        "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null,
        "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}))];
    let deltas = match turn {
        Turn::Call { args, .. } => {
            let (a, b) = args.split_at(args.len() / 2);
            let mut start = block.clone();
            start["input"] = json!({});
            out.push(event(json!({"type": "content_block_start", "index": 0, "content_block": start})));
            vec![
                json!({"type": "input_json_delta", "partial_json": a}),
                json!({"type": "input_json_delta", "partial_json": b}),
            ]
        }
        Turn::Say(text) => {
            out.push(event(
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ));
            vec![json!({"type": "text_delta", "text": text})]
        }
    };
    for d in deltas {
        out.push(event(json!({"type": "content_block_delta", "index": 0, "delta": d})));
    }
    out.push(event(json!({"type": "content_block_stop", "index": 0})));
    out.push(event(json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": 8}})));
    out.push(event(json!({"type": "message_stop"})));
    out
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
