//! The mock's OpenAI Responses API (`/v1/responses`), for the native path: as strict as OpenAI
//! on the items it receives (top-level fields are checked in `openai::refusal`: unknown ones are
//! a 400 `Unrecognized request argument supplied: <field>`), and answering in the Responses
//! shape: a `response` object, or its stream event by event (`response.created` ...
//! `response.completed`, each with its `sequence_number`).

use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{answer_text, send_stream, stream_head, tool_arguments, whole_answer, Ask, Behavior, BoxError};
use super::{ChannelBody, Events, InFlight};

fn str_of<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// The input items, tools, tool choice and text format as OpenAI checks them (None: accepted).
pub fn check(body: &Value) -> Option<String> {
    match body.get("input") {
        Some(Value::String(_)) => {}
        Some(Value::Array(items)) => {
            let mut calls: Vec<&str> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let kind = str_of(item, "type").unwrap_or(if item.get("role").is_some() { "message" } else { "" });
                match kind {
                    "message" => {
                        let role = str_of(item, "role").unwrap_or("");
                        if !["user", "assistant", "system", "developer"].contains(&role) {
                            return Some(format!("Invalid value: '{role}'. input[{i}].role"));
                        }
                        if let Some(parts) = item.get("content").and_then(Value::as_array) {
                            for (j, p) in parts.iter().enumerate() {
                                let t = str_of(p, "type").unwrap_or("");
                                let ok = match (t, role) {
                                    ("output_text" | "refusal", "assistant") => true,
                                    ("input_text", r) => {
                                        r != "assistant" && p.get("text").is_some_and(Value::is_string)
                                    }
                                    ("input_image" | "input_file" | "input_audio", "user") => true,
                                    _ => false,
                                };
                                if !ok {
                                    return Some(format!("Invalid value: '{t}'. input[{i}].content[{j}]"));
                                }
                            }
                        } else if !item.get("content").is_some_and(Value::is_string) {
                            return Some(format!("Invalid type for 'input[{i}].content'"));
                        }
                    }
                    "function_call" => {
                        let Some(id) = str_of(item, "call_id") else {
                            return Some(format!("Missing required parameter: 'input[{i}].call_id'."));
                        };
                        if str_of(item, "name").is_none() || str_of(item, "arguments").is_none() {
                            return Some(format!("Invalid 'input[{i}]': function_call needs name and arguments"));
                        }
                        calls.push(id);
                    }
                    "function_call_output" => {
                        let id = str_of(item, "call_id").unwrap_or("");
                        if !calls.contains(&id) {
                            return Some(format!("No tool call found for function call output with call_id {id}."));
                        }
                    }
                    "reasoning" | "item_reference" => {}
                    other => return Some(format!("Invalid value: '{other}'. input[{i}].type")),
                }
            }
        }
        _ => return Some("Missing required parameter: 'input'.".into()),
    }
    for (i, t) in body.get("tools").and_then(Value::as_array).map_or(&[][..], Vec::as_slice).iter().enumerate() {
        // Function tools are flat: `{"type": "function", "name", "parameters"}`.
        if str_of(t, "type") == Some("function") && (str_of(t, "name").is_none() || t.get("function").is_some()) {
            return Some(format!("Missing required parameter: 'tools[{i}].name'."));
        }
    }
    match body.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if ["none", "auto", "required"].contains(&s.as_str()) => {}
        Some(c) if str_of(c, "type") == Some("function") && str_of(c, "name").is_some() => {}
        Some(c) if str_of(c, "type").is_some_and(|t| t != "function") => {}
        Some(_) => return Some("Invalid value for 'tool_choice'".into()),
    }
    if let Some(f) = body.pointer("/text/format").filter(|f| !f.is_null()) {
        match str_of(f, "type") {
            Some("text" | "json_object") => {}
            Some("json_schema") if str_of(f, "name").is_some() && f.get("schema").is_some_and(Value::is_object) => {}
            _ => return Some("Invalid 'text.format'".into()),
        }
    }
    None
}

fn usage(prompt_tokens: u64, output_tokens: u64, b: &Behavior) -> Value {
    json!({"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": b.cached_tokens.unwrap_or(0)},
        "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_tokens + output_tokens})
}

fn response(id: &str, model: &str, status: &str, output: Value, usage: Value) -> Value {
    json!({"id": id, "object": "response", "created_at": 1_700_000_000u64, "status": status, "error": null,
        "incomplete_details": null, "model": model, "output": output, "parallel_tool_calls": true,
        "tool_choice": "auto", "tools": [], "usage": usage})
}

/// The answer: text, or (a tool-call behaviour) one `get_weather` call.
pub(super) fn answer(ask: Ask<'_>, b: Behavior, guard: InFlight) -> Result<Response<ChannelBody>, BoxError> {
    let id = format!("resp_{}_{}", ask.provider, ask.id);
    let msg_id = format!("msg_{}_{}", ask.provider, ask.id);
    let call = |args: &str| {
        json!({"type": "function_call", "id": "fc_mock_1", "call_id": "call_mock_1", "name": "get_weather",
            "arguments": args, "status": "completed"})
    };
    let message = |text: &str| {
        json!({"type": "message", "id": msg_id, "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]})
    };
    if !ask.stream {
        drop(guard);
        let item = match b.tool_call {
            Some(valid) => call(tool_arguments(valid)),
            None => message(&answer_text(ask.provider, &b)),
        };
        let r = response(&id, &ask.model, "completed", json!([item]), usage(ask.prompt_tokens, 4, &b));
        let (resp, body) = whole_answer(ask.provider, r.to_string(), ask.gzip, b.big_body.map(|_| b.big_sized));
        return Ok(resp.body(body)?);
    }
    // Sequence numbers are assigned as the events are made (head, content, tail in order).
    let created = response(&id, &ask.model, "in_progress", json!([]), Value::Null);
    let head_events = vec![
        ("response.created", json!({"response": created})),
        ("response.in_progress", json!({"response": created})),
    ];
    let (added, pieces, done_events): (Value, Vec<(&str, Value)>, Vec<(&str, Value)>) = match b.tool_call {
        Some(valid) => {
            let args = tool_arguments(valid);
            let (x, y) = args.split_at(args.len() / 2);
            let piece = |p: &str| {
                (
                    "response.function_call_arguments.delta",
                    json!({"item_id": "fc_mock_1", "output_index": 0, "delta": p}),
                )
            };
            (
                json!({"type": "function_call", "id": "fc_mock_1", "call_id": "call_mock_1", "name": "get_weather",
                    "arguments": "", "status": "in_progress"}),
                vec![piece(x), piece(y)],
                vec![
                    (
                        "response.function_call_arguments.done",
                        json!({"item_id": "fc_mock_1", "output_index": 0, "arguments": args}),
                    ),
                    ("response.output_item.done", json!({"output_index": 0, "item": call(args)})),
                ],
            )
        }
        None => {
            let text: String = (0..b.chunks).map(|i| format!("tok{i} ")).collect();
            let part = |t: &str| json!({"type": "output_text", "text": t, "annotations": []});
            (
                json!({"type": "message", "id": msg_id, "status": "in_progress", "role": "assistant", "content": []}),
                (0..b.chunks)
                    .map(|i| {
                        (
                            "response.output_text.delta",
                            json!({"item_id": msg_id, "output_index": 0, "content_index": 0,
                            "delta": format!("tok{i} ")}),
                        )
                    })
                    .collect(),
                vec![
                    (
                        "response.output_text.done",
                        json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "text": text}),
                    ),
                    (
                        "response.content_part.done",
                        json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "part": part(&text)}),
                    ),
                    ("response.output_item.done", json!({"output_index": 0, "item": message(&text)})),
                ],
            )
        }
    };
    let mut head = head_events;
    head.push(("response.output_item.added", json!({"output_index": 0, "item": added})));
    if b.tool_call.is_none() {
        head.push((
            "response.content_part.added",
            json!({"item_id": msg_id, "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}),
        ));
    }
    let output_tokens = pieces.len() as u64;
    let final_item = done_events.last().and_then(|(_, v)| v.get("item").cloned()).unwrap_or(Value::Null);
    let mut tail = done_events;
    let completed =
        response(&id, &ask.model, "completed", json!([final_item]), usage(ask.prompt_tokens, output_tokens, &b));
    tail.push(("response.completed", json!({"response": completed})));
    let head_len = head.len() as u64;
    let count = pieces.len();
    let seq_event = |seq: u64, (kind, mut v): (&str, Value)| {
        if let Some(o) = v.as_object_mut() {
            o.insert("type".into(), json!(kind));
            o.insert("sequence_number".into(), json!(seq));
        }
        Bytes::from(format!("event: {kind}\ndata: {v}\n\n"))
    };
    let head: Vec<Bytes> = head.into_iter().enumerate().map(|(i, e)| seq_event(i as u64, e)).collect();
    let pieces: Vec<Bytes> = pieces.into_iter().enumerate().map(|(i, e)| seq_event(head_len + i as u64, e)).collect();
    let tail: Vec<Bytes> =
        tail.into_iter().enumerate().map(|(i, e)| seq_event(head_len + count as u64 + i as u64, e)).collect();
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let gzip = ask.gzip;
    tokio::spawn(async move {
        let _guard = guard;
        let content = |i: usize| pieces.get(i).cloned().unwrap_or_default();
        let error = || {
            let e = json!({"type": "error", "code": "server_error", "message": "overloaded mid-stream", "param": null});
            Bytes::from(format!("event: error\ndata: {e}\n\n"))
        };
        send_stream(tx, &b, gzip, Events { head, count, content, tail, error }).await;
    });
    Ok(stream_head(ask.provider, "text/event-stream", ask.gzip).body(ChannelBody(rx))?)
}
