//! Anthropic Messages: its request into the pivot and out of it, its answer into and out of
//! [`Answer`].

use super::jsonm::G;
use serde_json::{Map, Value};

use super::chat::{knob, push_merged, stops, text_of, Chat, Choice, Format, Msg, Part, Tool};
use super::openai::args_object;
use super::{obj, Answer, Call, Finish, Refused, Usage};

/// Anthropic requires `max_tokens`; a caller of another API that set none gets this many.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Fields with no counterpart elsewhere that only tune delivery: dropped.
const DROPPED: &[&str] = &["service_tier", "context_management", "cache_control", "inference_geo", "speed"];
/// Fields whose loss would change what the model can do: refused.
const REFUSED: &[&str] = &["container", "mcp_servers"];

pub fn parse_request(o: &Map<String, Value>) -> Result<Chat, Refused> {
    let mut c = Chat::default();
    for k in o.keys() {
        if REFUSED.contains(&k.as_str()) {
            return Err(Refused::new(k.clone(), format!("{k} is not translated across APIs")));
        }
        if DROPPED.contains(&k.as_str()) {
            c.drop_field(k.clone());
        }
    }
    match o.g("system") {
        Some(Value::String(s)) => c.system.push(s.clone()),
        Some(Value::Array(blocks)) => {
            if blocks.iter().any(|b| b.g("cache_control").is_some()) {
                c.drop_field("cache_control");
            }
            c.system.push(text_of(&Value::Array(blocks.clone())));
        }
        _ => {}
    }
    c.max_tokens = o.g("max_tokens").cloned();
    c.temperature = o.g("temperature").filter(|v| !v.is_null()).cloned();
    c.top_p = o.g("top_p").filter(|v| !v.is_null()).cloned();
    c.top_k = knob(o.g("top_k"), "top_k");
    c.stop = stops(o.g("stop_sequences"));
    c.user = knob(o.g("metadata").and_then(|m| m.g("user_id")), "metadata.user_id");
    if let Some(t) = o.g("thinking") {
        match t.g("type").and_then(Value::as_str) {
            Some("enabled") => c.reasoning_budget = knob(t.g("budget_tokens"), "thinking.budget_tokens"),
            // The model picks its own budget (Claude Code's default): Google's dynamic thinking,
            // a reasoning model's default elsewhere (`reasoning::openai`).
            Some("adaptive") => c.reasoning_adaptive = knob(Some(t), "thinking"),
            _ => {}
        }
    }
    if let Some(oc) = o.g("output_config") {
        c.reasoning_effort = knob(oc.g("effort"), "output_config.effort");
        if let Some(f) = oc.g("format").filter(|f| f.g("type").and_then(Value::as_str) == Some("json_schema")) {
            let schema = f.g("schema").cloned().unwrap_or_else(|| json!({"type": "object"}));
            c.format = Some(Format::JsonSchema { name: "output".into(), schema });
        }
    }
    if let Some(Value::Array(tools)) = o.g("tools") {
        for (i, t) in tools.iter().enumerate() {
            if t.g("type").and_then(Value::as_str).is_some_and(|ty| ty != "custom") {
                return Err(Refused::new(format!("tools[{i}].type"), "server tools are not translated across APIs"));
            }
            if t.g("cache_control").is_some() {
                c.drop_field("cache_control");
            }
            c.tools.push(Tool {
                name: t.g("name").and_then(Value::as_str).unwrap_or("").to_string(),
                description: t.g("description").cloned(),
                parameters: t.g("input_schema").cloned(),
            });
        }
    }
    if let Some(tc) = o.g("tool_choice") {
        c.choice = match tc.g("type").and_then(Value::as_str) {
            Some("any") => Some(Choice::Required),
            Some("none") => Some(Choice::None),
            Some("tool") => Some(Choice::Named(tc.g("name").and_then(Value::as_str).unwrap_or("").to_string())),
            _ => Some(Choice::Auto),
        };
        if tc.g("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
            c.parallel = Some(false);
        }
    }
    let Some(Value::Array(messages)) = o.g("messages") else {
        return Err(Refused::new("messages", "messages must be an array"));
    };
    for (i, m) in messages.iter().enumerate() {
        if m.g("role").and_then(Value::as_str) == Some("system") {
            let text = system_message(&mut c, m, i)?;
            if !text.is_empty() {
                c.messages.push(Msg::System(text));
            }
            continue;
        }
        let assistant = m.g("role").and_then(Value::as_str) == Some("assistant");
        let blocks = match m.g("content") {
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            Some(Value::Array(b)) => b.clone(),
            _ => Vec::new(),
        };
        let (mut parts, mut text, mut calls) = (Vec::new(), String::new(), Vec::new());
        for (j, b) in blocks.iter().enumerate() {
            let param = format!("messages[{i}].content[{j}]");
            if b.g("cache_control").is_some() {
                c.drop_field("cache_control");
            }
            match b.g("type").and_then(Value::as_str) {
                Some("text") => {
                    let t = b.g("text").and_then(Value::as_str).unwrap_or("");
                    if assistant {
                        text.push_str(t);
                    } else {
                        parts.push(Part::Text(t.to_string()));
                    }
                }
                Some("image") if !assistant => parts.push(image_part(b, &param)?),
                Some("tool_use") if assistant => calls.push(Call {
                    id: b.g("id").and_then(Value::as_str).unwrap_or("").to_string(),
                    name: b.g("name").and_then(Value::as_str).unwrap_or("").to_string(),
                    args: b.g("input").map(crate::json::to_text).unwrap_or_else(|| "{}".into()),
                }),
                Some("tool_result") if !assistant => {
                    let id = b.g("tool_use_id").and_then(Value::as_str).unwrap_or("").to_string();
                    let content = match b.g("content") {
                        Some(Value::Array(inner)) => {
                            let mut ps = Vec::new();
                            for (k, x) in inner.iter().enumerate() {
                                match x.g("type").and_then(Value::as_str) {
                                    Some("text") => ps.push(Part::Text(text_of(&Value::Array(vec![x.clone()])))),
                                    Some("image") => ps.push(image_part(x, &format!("{param}.content[{k}]"))?),
                                    _ => return Err(Refused::new(format!("{param}.content[{k}]"), "not translated")),
                                }
                            }
                            ps
                        }
                        Some(v) => vec![Part::Text(text_of(v))],
                        None => vec![Part::Text(String::new())],
                    };
                    let error = b.g("is_error").and_then(Value::as_bool).unwrap_or(false);
                    let name = c.call_name(&id).unwrap_or("").to_string();
                    c.messages.push(Msg::Tool { id, name, content, error });
                }
                // The model's own reasoning from an earlier turn: no other API takes it back.
                Some("thinking" | "redacted_thinking") if assistant => c.drop_field("thinking blocks"),
                other => {
                    let t = other.unwrap_or("?");
                    return Err(Refused::new(
                        format!("{param}.type"),
                        format!("{t} blocks are not translated across APIs"),
                    ));
                }
            }
        }
        if assistant {
            c.push_assistant(text, calls);
        } else if !parts.is_empty() {
            c.messages.push(Msg::User(parts));
        }
    }
    Ok(c)
}

/// A mid-conversation system message's text (a string or text blocks; any other block is refused).
fn system_message(c: &mut Chat, m: &Value, i: usize) -> Result<String, Refused> {
    match m.g("content") {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            for (j, b) in blocks.iter().enumerate() {
                if b.g("type").and_then(Value::as_str) != Some("text") {
                    return Err(Refused::new(
                        format!("messages[{i}].content[{j}].type"),
                        "a system message takes only text",
                    ));
                }
                if b.g("cache_control").is_some() {
                    c.drop_field("cache_control");
                }
                text.push_str(b.g("text").and_then(Value::as_str).unwrap_or(""));
            }
            Ok(text)
        }
        _ => Ok(String::new()),
    }
}

fn image_part(b: &Value, param: &str) -> Result<Part, Refused> {
    let s = b.g("source");
    match s.and_then(|s| s.g("type")).and_then(Value::as_str) {
        Some("base64") => Ok(Part::Inline {
            media: super::str_at(b, "/source/media_type").to_string(),
            data: super::str_at(b, "/source/data").to_string(),
        }),
        Some("url") => Ok(Part::Url(super::str_at(b, "/source/url").to_string())),
        _ => Err(Refused::new(format!("{param}.source"), "only base64 and url images are translated")),
    }
}

fn part_block(p: &Part) -> Value {
    match p {
        Part::Text(t) => json!({"type": "text", "text": t}),
        Part::Inline { media, data } => {
            json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
        }
        Part::Url(u) => json!({"type": "image", "source": {"type": "url", "url": u}}),
    }
}

pub fn write_request(c: &mut Chat, model: &str) -> Result<Map<String, Value>, Refused> {
    let mut o = Map::new();
    o.insert("model".into(), json!(model));
    let (thinking, max_tokens) = super::reasoning::anthropic(c, DEFAULT_MAX_TOKENS);
    o.insert("max_tokens".into(), max_tokens);
    if let Some(t) = thinking {
        o.insert("thinking".into(), t);
    }
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut later_system = Vec::new();
    for (i, m) in c.messages.iter().enumerate() {
        match m {
            // Not every model behind the Messages API takes a system message mid-conversation:
            // its text joins the top-level system.
            Msg::System(t) => later_system.push(t.clone()),
            Msg::User(parts) => {
                let blocks = parts.iter().filter(|p| !matches!(p, Part::Text(t) if t.is_empty())).map(part_block);
                push_merged(&mut turns, "user", blocks.collect());
            }
            Msg::Assistant { text, calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for (j, k) in calls.iter().enumerate() {
                    let input = args_object(&k.args, &format!("messages[{i}].tool_calls[{j}].function.arguments"))?;
                    blocks.push(json!({"type": "tool_use", "id": k.id, "name": k.name, "input": input}));
                }
                push_merged(&mut turns, "assistant", blocks);
            }
            Msg::Tool { id, content, error, .. } => {
                let mut r = Map::new();
                r.insert("type".into(), json!("tool_result"));
                r.insert("tool_use_id".into(), json!(id));
                r.insert(
                    "content".into(),
                    match content.as_slice() {
                        [Part::Text(t)] => json!(t),
                        _ => Value::Array(content.iter().map(part_block).collect()),
                    },
                );
                if *error {
                    r.insert("is_error".into(), json!(true));
                }
                push_merged(&mut turns, "user", vec![Value::Object(r)]);
            }
        }
    }
    let messages: Vec<Value> =
        turns.into_iter().map(|(role, blocks)| json!({"role": role, "content": blocks})).collect();
    o.insert("messages".into(), Value::Array(messages));
    let system: Vec<&String> = c.system.iter().chain(&later_system).filter(|s| !s.is_empty()).collect();
    if !system.is_empty() {
        o.insert("system".into(), json!(system.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n\n")));
    }
    for (k, v) in [("temperature", c.temperature.take()), ("top_p", c.top_p.take())] {
        if let Some(v) = v {
            o.insert(k.into(), v);
        }
    }
    if let Some(k) = c.top_k.take() {
        o.insert("top_k".into(), k.value);
    }
    if !c.stop.is_empty() {
        o.insert("stop_sequences".into(), Value::Array(std::mem::take(&mut c.stop)));
    }
    if c.stream {
        o.insert("stream".into(), json!(true));
    }
    if let Some(u) = c.user.take() {
        o.insert("metadata".into(), json!({"user_id": u.value}));
    }
    for k in [c.seed.take(), c.presence_penalty.take(), c.frequency_penalty.take()] {
        c.drop_knob(k);
    }
    if !c.tools.is_empty() {
        let tools: Vec<Value> = c
            .tools
            .iter()
            .map(|t| {
                let mut x = Map::new();
                x.insert("name".into(), json!(t.name));
                if let Some(d) = &t.description {
                    x.insert("description".into(), d.clone());
                }
                x.insert("input_schema".into(), t.parameters.clone().unwrap_or_else(|| json!({"type": "object"})));
                Value::Object(x)
            })
            .collect();
        o.insert("tools".into(), Value::Array(tools));
    }
    let mut choice = match &c.choice {
        Some(Choice::Auto) => Some(json!({"type": "auto"})),
        Some(Choice::None) => Some(json!({"type": "none"})),
        Some(Choice::Required) => Some(json!({"type": "any"})),
        Some(Choice::Named(n)) => Some(json!({"type": "tool", "name": n})),
        None => None,
    };
    if c.parallel == Some(false) && !c.tools.is_empty() && !matches!(c.choice, Some(Choice::None)) {
        let mut ch = choice.take().unwrap_or_else(|| json!({"type": "auto"}));
        if let Some(m) = ch.as_object_mut() {
            m.insert("disable_parallel_tool_use".into(), json!(true));
        }
        choice = Some(ch);
    }
    if let Some(ch) = choice.filter(|_| !c.tools.is_empty()) {
        o.insert("tool_choice".into(), ch);
    }
    match &c.format {
        Some(Format::JsonSchema { schema, .. }) => {
            o.insert("output_config".into(), json!({"format": {"type": "json_schema", "schema": schema}}));
        }
        Some(Format::JsonObject) => {
            return Err(Refused::new(
                "response_format",
                "json_object has no counterpart in the Anthropic API: use json_schema",
            ))
        }
        None => {}
    }
    Ok(o)
}

pub fn finish_of(reason: &str) -> Finish {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => Finish::Length,
        "tool_use" => Finish::ToolCalls,
        "refusal" => Finish::ContentFilter,
        _ => Finish::Stop,
    }
}

pub fn stop_reason(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::ToolCalls => "tool_use",
        Finish::ContentFilter => "refusal",
    }
}

/// Anthropic's `usage`: `input_tokens` excludes both cache counts.
pub fn usage_of(u: &Value) -> Usage {
    let n = |p: &str| super::u64_at(u, p);
    let (read, write) = (n("/cache_read_input_tokens"), n("/cache_creation_input_tokens"));
    Usage {
        prompt: n("/input_tokens").saturating_add(read).saturating_add(write),
        completion: n("/output_tokens"),
        cached: read,
        cache_write: write,
        reasoning: 0,
    }
}

pub fn usage_value(u: &Usage) -> Value {
    let input = u.prompt.saturating_sub(u.cached).saturating_sub(u.cache_write);
    json!({"input_tokens": input, "output_tokens": u.completion,
        "cache_creation_input_tokens": u.cache_write, "cache_read_input_tokens": u.cached})
}

pub fn parse_answer(o: &Map<String, Value>) -> Option<Answer> {
    if o.g("type").and_then(Value::as_str) != Some("message") {
        return None;
    }
    let mut a = Answer {
        id: o.g("id").and_then(Value::as_str).unwrap_or("").to_string(),
        model: o.g("model").and_then(Value::as_str).unwrap_or("").to_string(),
        finish: finish_of(o.g("stop_reason").and_then(Value::as_str).unwrap_or("end_turn")),
        usage: o.g("usage").map(usage_of).unwrap_or_default(),
        ..Answer::default()
    };
    for b in o.g("content").and_then(Value::as_array).into_iter().flatten() {
        match b.g("type").and_then(Value::as_str) {
            Some("text") => a.text.push_str(b.g("text").and_then(Value::as_str).unwrap_or("")),
            Some("thinking") => a.reasoning.push_str(b.g("thinking").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => a.calls.push(Call {
                id: super::str_at(b, "/id").to_string(),
                name: super::str_at(b, "/name").to_string(),
                args: b.g("input").map(crate::json::to_text).unwrap_or_else(|| "{}".into()),
            }),
            _ => {}
        }
    }
    Some(a)
}

/// No `thinking` block is written from another API's reasoning: Anthropic signs its own, and a
/// client sending an unsigned one back to an Anthropic endpoint would get a 400.
pub fn write_answer(a: &Answer) -> Value {
    let mut content = Vec::new();
    if !a.text.is_empty() || a.calls.is_empty() {
        content.push(json!({"type": "text", "text": a.text}));
    }
    for k in &a.calls {
        let input = super::parse_object(&k.args).unwrap_or_else(|| json!({}));
        content.push(json!({"type": "tool_use", "id": k.id, "name": k.name, "input": input}));
    }
    let id = if a.id.starts_with("msg_") { a.id.clone() } else { format!("msg_{}", a.id) };
    obj(vec![
        ("id", json!(id)),
        ("type", json!("message")),
        ("role", json!("assistant")),
        ("model", json!(a.model)),
        ("content", Value::Array(content)),
        ("stop_reason", json!(stop_reason(a.finish))),
        ("stop_sequence", Value::Null),
        ("usage", usage_value(&a.usage)),
    ])
}
