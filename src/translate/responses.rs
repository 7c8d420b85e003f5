//! OpenAI's Responses API as a caller's API: its request into the pivot ([`Chat`]), and an
//! [`Answer`] out as a `response` object. Only this direction exists: an endpoint serving the
//! Responses API serves chat completions too (`Api::Responses`), so no other caller is ever
//! sent a Responses body or answered from one. Stateless, as on OpenRouter: nothing is stored,
//! so `previous_response_id` and `conversation` are refused before routing (`routing::request`).

use super::jsonm::G;
use serde_json::{Map, Value};

use super::chat::{knob, text_of, Chat, Choice, Format, Msg, Part, Tool};
use super::{Answer, Call, Finish, Refused, Usage};

/// Fields with no counterpart in a chat request that leave the answer as asked: dropped.
const DROPPED: &[&str] = &[
    "metadata",
    "service_tier",
    "truncation",
    "top_logprobs",
    "max_tool_calls",
    "prompt_cache_key",
    "safety_identifier",
];

/// Fields read into the pivot (or consumed: `stream`, `stream_options`, the model, `store`,
/// `include` when it asks for nothing translated answers lack).
const READ: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "max_output_tokens",
    "temperature",
    "top_p",
    "top_k",
    "user",
    "stream",
    "stream_options",
    "store",
    "include",
    "background",
    "prompt",
    "previous_response_id",
    "conversation",
];

pub fn parse_request(o: &Map<String, Value>) -> Result<Chat, Refused> {
    let mut c = Chat::default();
    for k in o.keys() {
        if DROPPED.contains(&k.as_str()) || !READ.contains(&k.as_str()) {
            c.drop_field(k.clone());
        }
    }
    for stored in ["previous_response_id", "conversation", "prompt"] {
        if o.g(stored).is_some_and(|v| !v.is_null()) {
            return Err(Refused::new(stored, format!("{stored} refers to content stored at OpenAI")));
        }
    }
    if o.g("background").and_then(Value::as_bool) == Some(true) {
        return Err(Refused::new("background", "background responses are not translated across APIs"));
    }
    // Nothing is stored; `store: true` (OpenAI's default) is named so the caller knows.
    if o.g("store").and_then(Value::as_bool) == Some(true) {
        c.drop_field("store");
    }
    if let Some(Value::Array(inc)) = o.g("include") {
        if !inc.is_empty() {
            c.drop_field("include");
        }
    }
    c.max_tokens = o.g("max_output_tokens").filter(|v| !v.is_null()).cloned();
    c.temperature = o.g("temperature").filter(|v| !v.is_null()).cloned();
    c.top_p = o.g("top_p").filter(|v| !v.is_null()).cloned();
    c.top_k = knob(o.g("top_k"), "top_k");
    c.user = knob(o.g("user"), "user");
    if let Some(r) = o.g("reasoning").filter(|v| v.is_object()) {
        c.reasoning_effort = knob(r.g("effort"), "reasoning.effort");
        // OpenRouter's budget, on its Responses endpoint too.
        c.reasoning_budget = knob(r.g("max_tokens"), "reasoning.max_tokens");
        // `summary` / `generate_summary`: consumed; the model's reasoning text, when its
        // endpoint returns any, comes back as a `reasoning` item's summary whatever is asked.
    }
    c.parallel = o.g("parallel_tool_calls").and_then(Value::as_bool);
    if let Some(t) = o.g("text").filter(|t| t.is_object()) {
        c.format = format(t.g("format"))?;
        if t.g("verbosity").is_some_and(|v| !v.is_null()) {
            c.drop_field("text.verbosity");
        }
    }
    if let Some(Value::Array(tools)) = o.g("tools") {
        for (i, t) in tools.iter().enumerate() {
            match t.g("type").and_then(Value::as_str) {
                Some("function") => c.tools.push(Tool {
                    name: t.g("name").and_then(Value::as_str).unwrap_or("").to_string(),
                    description: t.g("description").cloned(),
                    parameters: t.g("parameters").cloned(),
                }),
                // Codex's sub-agent tools: their calls come back naming the namespace too, which
                // no other API can say (a bare name reaches Codex as an unsupported call).
                Some("namespace") => {
                    return Err(Refused::new(
                        format!("tools[{i}].type"),
                        "namespace tools are called by namespace: only function tools are translated across APIs",
                    ));
                }
                other => {
                    let kind = super::header_text(other.unwrap_or("?"));
                    return Err(Refused::new(
                        format!("tools[{i}].type"),
                        format!("{kind} is a hosted tool: only function tools are translated across APIs"),
                    ));
                }
            }
        }
    }
    c.choice = match o.g("tool_choice") {
        Some(Value::String(s)) => match s.as_str() {
            "none" => Some(Choice::None),
            "required" => Some(Choice::Required),
            _ => Some(Choice::Auto),
        },
        Some(v @ Value::Object(_)) => match v.g("type").and_then(Value::as_str) {
            Some("function") => Some(Choice::Named(v.g("name").and_then(Value::as_str).unwrap_or("").to_string())),
            other => {
                let kind = super::header_text(other.unwrap_or("?"));
                return Err(Refused::new("tool_choice", format!("tool_choice {kind} is not translated across APIs")));
            }
        },
        _ => None,
    };
    if let Some(i) = o.g("instructions").filter(|v| !v.is_null()) {
        c.system.push(text_of(i));
    }
    match o.g("input") {
        Some(Value::String(s)) => c.messages.push(Msg::User(vec![Part::Text(s.clone())])),
        Some(Value::Array(items)) => read_items(&mut c, items)?,
        _ => return Err(Refused::new("input", "input must be a string or an array of items")),
    }
    Ok(c)
}

/// `text.format`: `json_schema` (with `name`, `schema`) or `json_object`; `text` is no format.
fn format(f: Option<&Value>) -> Result<Option<Format>, Refused> {
    let Some(f) = f.filter(|f| !f.is_null()) else { return Ok(None) };
    Ok(match f.g("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let schema = f.g("schema").cloned().unwrap_or_else(|| json!({"type": "object"}));
            let name = f.g("name").and_then(Value::as_str).unwrap_or("output").to_string();
            Some(Format::JsonSchema { name, schema })
        }
        Some("json_object") => Some(Format::JsonObject),
        Some("text") | None => None,
        Some(other) => {
            let kind = super::header_text(other);
            return Err(Refused::new("text.format.type", format!("text format {kind} is not translated across APIs")));
        }
    })
}

/// The input items, in order: messages, function calls (joined with the assistant text before
/// them into one assistant turn), function call outputs; reasoning items dropped.
fn read_items(c: &mut Chat, items: &[Value]) -> Result<(), Refused> {
    // The assistant turn being gathered (its text and calls).
    let mut turn: Option<(String, Vec<Call>)> = None;
    for (i, item) in items.iter().enumerate() {
        let role = item.g("role").and_then(Value::as_str);
        let kind = item.g("type").and_then(Value::as_str).unwrap_or(if role.is_some() { "message" } else { "" });
        let assistant_part = match kind {
            "message" => role == Some("assistant"),
            "function_call" => true,
            _ => false,
        };
        if !assistant_part {
            if let Some((text, calls)) = turn.take() {
                c.push_assistant(text, calls);
            }
        }
        match kind {
            "message" => {
                let content = item.g("content").unwrap_or(&Value::Null);
                let param = format!("input[{i}].content");
                match role {
                    Some("system" | "developer") => c.system.push(text_of(content)),
                    Some("user") => c.messages.push(Msg::User(parts(content, &param)?)),
                    Some("assistant") => turn.get_or_insert_with(Default::default).0.push_str(&text_of(content)),
                    _ => return Err(Refused::new(format!("input[{i}].role"), "unknown role")),
                }
            }
            "function_call" => {
                let s = |k: &str| item.g(k).and_then(Value::as_str).unwrap_or("").to_string();
                let args = item.g("arguments").and_then(Value::as_str).unwrap_or("{}").to_string();
                turn.get_or_insert_with(Default::default).1.push(Call { id: s("call_id"), name: s("name"), args });
            }
            "function_call_output" => {
                let id = item.g("call_id").and_then(Value::as_str).unwrap_or("").to_string();
                let name = c.call_name(&id).unwrap_or("").to_string();
                let content = parts(item.g("output").unwrap_or(&Value::Null), &format!("input[{i}].output"))?;
                c.messages.push(Msg::Tool { id, name, content, error: false });
            }
            // The model's own earlier reasoning: the other APIs take none of OpenAI's.
            "reasoning" => c.drop_field("input[].reasoning"),
            other => {
                let kind = super::header_text(other);
                return Err(Refused::new(
                    format!("input[{i}].type"),
                    format!("{kind} items are not translated across APIs"),
                ));
            }
        }
    }
    if let Some((text, calls)) = turn {
        c.push_assistant(text, calls);
    }
    Ok(())
}

/// A user message's (or a function call output's) content: a string, or `input_text` /
/// `input_image` parts (assistant-side `output_text` read as text too).
fn parts(content: &Value, param: &str) -> Result<Vec<Part>, Refused> {
    let Value::Array(items) = content else {
        return Ok(vec![Part::Text(text_of(content))]);
    };
    let mut out = Vec::new();
    for (j, p) in items.iter().enumerate() {
        match p.g("type").and_then(Value::as_str) {
            Some("input_text" | "output_text" | "text") => {
                out.push(Part::Text(p.g("text").and_then(Value::as_str).unwrap_or("").to_string()))
            }
            Some("input_image") => match p.g("image_url").and_then(Value::as_str) {
                Some(url) => out.push(match super::data_url(url) {
                    Some((media, data)) => Part::Inline { media: media.to_string(), data: data.to_string() },
                    None => Part::Url(url.to_string()),
                }),
                None => {
                    return Err(Refused::new(
                        format!("{param}[{j}].file_id"),
                        "images by file_id refer to content stored at OpenAI",
                    ))
                }
            },
            other => {
                let t = super::header_text(other.unwrap_or("?"));
                return Err(Refused::new(
                    format!("{param}[{j}].type"),
                    format!("{t} parts are not translated across APIs"),
                ));
            }
        }
    }
    Ok(out)
}

/// A Responses API `usage` object.
pub fn usage_value(u: &Usage) -> Value {
    json!({"input_tokens": u.prompt, "input_tokens_details": {"cached_tokens": u.cached},
        "output_tokens": u.completion, "output_tokens_details": {"reasoning_tokens": u.reasoning},
        "total_tokens": u.prompt.saturating_add(u.completion)})
}

/// The response id for a provider's answer id (`resp_` prefixed, as OpenAI's are).
pub fn response_id(id: &str) -> String {
    if id.starts_with("resp_") {
        id.to_string()
    } else {
        format!("resp_{id}")
    }
}

/// `status` and `incomplete_details` for how the answer ended.
pub fn status(f: Finish) -> (&'static str, Value) {
    match f {
        Finish::Length => ("incomplete", json!({"reason": "max_output_tokens"})),
        Finish::ContentFilter => ("incomplete", json!({"reason": "content_filter"})),
        Finish::Stop | Finish::ToolCalls => ("completed", Value::Null),
    }
}

/// An assistant `message` output item with one `output_text` part.
pub fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
}

/// A `function_call` output item.
pub fn call_item(k: &Call, status: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{}", k.id), "call_id": k.id, "name": k.name,
        "arguments": k.args, "status": status})
}

/// The `response` object (`output`, `status`, `usage`; no echo of the request's parameters).
pub fn response_object(id: &str, model: &str, created: u64, status: &str, output: Vec<Value>) -> Map<String, Value> {
    let mut o = Map::new();
    for (k, v) in [
        ("id", json!(id)),
        ("object", json!("response")),
        ("created_at", json!(created)),
        ("status", json!(status)),
        ("error", Value::Null),
        ("incomplete_details", Value::Null),
        ("model", json!(model)),
        ("output", Value::Array(output)),
        ("usage", Value::Null),
    ] {
        o.insert(k.to_string(), v);
    }
    o
}

/// A `reasoning` output item whose summary is the model's reasoning text (other APIs' reasoning
/// is not OpenAI's summary, but it is what the caller can read of it; no `encrypted_content`).
pub fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}]})
}

pub fn write_answer(a: &Answer, created: u64) -> Value {
    let id = response_id(&a.id);
    let mut output = Vec::new();
    if !a.reasoning.is_empty() {
        output.push(reasoning_item(&format!("rs_{}", a.id), &a.reasoning));
    }
    if !a.text.is_empty() || a.calls.is_empty() {
        output.push(message_item(&format!("msg_{}", a.id), &a.text, "completed"));
    }
    for k in &a.calls {
        output.push(call_item(k, "completed"));
    }
    let (status, details) = status(a.finish);
    let mut o = response_object(&id, &a.model, created, status, output);
    o.insert("incomplete_details".into(), details);
    o.insert("usage".into(), usage_value(&a.usage));
    Value::Object(o)
}
