//! OpenAI chat completions: its request into the pivot and out of it, its answer into and out
//! of [`Answer`].

use super::jsonm::G;
use serde_json::{Map, Value};

use super::chat::{knob, one_choice, stops, text_of, Chat, Choice, Format, Msg, Part, Tool};
use super::{obj, parse_object, Answer, Call, Finish, Refused, Usage};

/// Fields no other API has, dropped wherever the request goes.
const DROPPED: &[&str] = &[
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "store",
    "metadata",
    "service_tier",
    "prediction",
    "web_search_options",
    "verbosity",
    "prompt_cache_key",
    "safety_identifier",
];

/// Fields read into the pivot (or consumed: `stream`, `stream_options`, the model).
const READ: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "user",
    "reasoning_effort",
    "reasoning",
    "n",
    "modalities",
    "audio",
    "functions",
    "function_call",
];

pub fn parse_request(o: &Map<String, Value>) -> Result<Chat, Refused> {
    let mut c = Chat::default();
    for k in o.keys() {
        if DROPPED.contains(&k.as_str()) || !READ.contains(&k.as_str()) {
            c.drop_field(k.clone());
        }
    }
    one_choice(o.g("n"), "n")?;
    if o.g("audio").is_some_and(|a| !a.is_null()) {
        return Err(Refused::new("audio", "audio output is not translated across APIs"));
    }
    if let Some(Value::Array(m)) = o.g("modalities") {
        if m.iter().any(|x| x.as_str() != Some("text")) {
            return Err(Refused::new("modalities", "only text output is translated across APIs"));
        }
    }
    for legacy in ["functions", "function_call"] {
        if o.contains_key(legacy) {
            return Err(Refused::new(legacy, format!("{legacy} is deprecated: use tools and tool_choice")));
        }
    }
    c.max_tokens = o.g("max_completion_tokens").or_else(|| o.g("max_tokens")).filter(|v| !v.is_null()).cloned();
    c.temperature = o.g("temperature").filter(|v| !v.is_null()).cloned();
    c.top_p = o.g("top_p").filter(|v| !v.is_null()).cloned();
    c.top_k = knob(o.g("top_k"), "top_k");
    c.stop = stops(o.g("stop"));
    c.seed = knob(o.g("seed"), "seed");
    c.presence_penalty = knob(o.g("presence_penalty"), "presence_penalty");
    c.frequency_penalty = knob(o.g("frequency_penalty"), "frequency_penalty");
    c.user = knob(o.g("user"), "user");
    c.reasoning_effort = knob(o.g("reasoning_effort"), "reasoning_effort");
    if let Some(r) = o.g("reasoning").filter(|v| v.is_object()) {
        c.reasoning_effort = c.reasoning_effort.take().or(knob(r.g("effort"), "reasoning.effort"));
        c.reasoning_budget = knob(r.g("max_tokens"), "reasoning.max_tokens");
    }
    c.parallel = o.g("parallel_tool_calls").and_then(Value::as_bool);
    c.format = match o.g("response_format") {
        Some(f) => match f.g("type").and_then(Value::as_str) {
            Some("json_object") => Some(Format::JsonObject),
            Some("json_schema") => {
                let s = f.g("json_schema");
                let schema = s.and_then(|s| s.g("schema")).cloned().unwrap_or_else(|| json!({"type": "object"}));
                let name = s.and_then(|s| s.g("name")).and_then(Value::as_str).unwrap_or("output").to_string();
                Some(Format::JsonSchema { name, schema })
            }
            _ => None,
        },
        None => None,
    };
    if let Some(Value::Array(tools)) = o.g("tools") {
        for (i, t) in tools.iter().enumerate() {
            if t.g("type").and_then(Value::as_str) != Some("function") {
                return Err(Refused::new(format!("tools[{i}].type"), "only function tools are translated across APIs"));
            }
            let f = t.g("function");
            let name = f.and_then(|f| f.g("name")).and_then(Value::as_str).unwrap_or("").to_string();
            let description = f.and_then(|f| f.g("description")).cloned();
            let parameters = f.and_then(|f| f.g("parameters")).cloned();
            c.tools.push(Tool { name, description, parameters });
        }
    }
    c.choice = match o.g("tool_choice") {
        Some(Value::String(s)) => match s.as_str() {
            "none" => Some(Choice::None),
            "required" => Some(Choice::Required),
            _ => Some(Choice::Auto),
        },
        Some(v @ Value::Object(_)) => {
            let name = v.pointer("/function/name").and_then(Value::as_str).unwrap_or("");
            Some(Choice::Named(name.to_string()))
        }
        _ => None,
    };
    let Some(Value::Array(messages)) = o.g("messages") else {
        return Err(Refused::new("messages", "messages must be an array"));
    };
    for (i, m) in messages.iter().enumerate() {
        let content = m.g("content").unwrap_or(&Value::Null);
        match m.g("role").and_then(Value::as_str) {
            Some("system" | "developer") => c.system.push(text_of(content)),
            Some("user") => {
                let parts = parts(content, &format!("messages[{i}].content"))?;
                c.messages.push(Msg::User(parts));
            }
            Some("assistant") => {
                let mut calls = Vec::new();
                if let Some(Value::Array(tc)) = m.g("tool_calls") {
                    for t in tc {
                        let f = t.g("function");
                        calls.push(Call {
                            id: t.g("id").and_then(Value::as_str).unwrap_or("").to_string(),
                            name: f.and_then(|f| f.g("name")).and_then(Value::as_str).unwrap_or("").to_string(),
                            args: f.and_then(|f| f.g("arguments")).and_then(Value::as_str).unwrap_or("{}").to_string(),
                        });
                    }
                }
                c.push_assistant(text_of(content), calls);
            }
            Some("tool") => {
                let id = m.g("tool_call_id").and_then(Value::as_str).unwrap_or("").to_string();
                let name = c.call_name(&id).unwrap_or("").to_string();
                let content = parts(content, &format!("messages[{i}].content"))?;
                c.messages.push(Msg::Tool { id, name, content, error: false });
            }
            _ => return Err(Refused::new(format!("messages[{i}].role"), "unknown role")),
        }
    }
    Ok(c)
}

/// A user or tool message's content parts.
fn parts(content: &Value, param: &str) -> Result<Vec<Part>, Refused> {
    let Value::Array(items) = content else {
        return Ok(vec![Part::Text(text_of(content))]);
    };
    let mut out = Vec::new();
    for (j, p) in items.iter().enumerate() {
        match p.g("type").and_then(Value::as_str) {
            Some("text") => out.push(Part::Text(p.g("text").and_then(Value::as_str).unwrap_or("").to_string())),
            Some("image_url") => {
                let url = p.pointer("/image_url/url").and_then(Value::as_str).unwrap_or("");
                out.push(match super::data_url(url) {
                    Some((media, data)) => Part::Inline { media: media.to_string(), data: data.to_string() },
                    None => Part::Url(url.to_string()),
                });
            }
            other => {
                let t = other.unwrap_or("?");
                return Err(Refused::new(
                    format!("{param}[{j}].type"),
                    format!("{t} parts are not translated across APIs"),
                ));
            }
        }
    }
    Ok(out)
}

fn part_value(p: &Part) -> Value {
    match p {
        Part::Text(t) => json!({"type": "text", "text": t}),
        Part::Inline { media, data } => {
            json!({"type": "image_url", "image_url": {"url": format!("data:{media};base64,{data}")}})
        }
        Part::Url(u) => json!({"type": "image_url", "image_url": {"url": u}}),
    }
}

fn content_value(parts: &[Part]) -> Value {
    match parts {
        [Part::Text(t)] => Value::String(t.clone()),
        _ => Value::Array(parts.iter().map(part_value).collect()),
    }
}

pub fn write_request(c: &mut Chat, model: &str) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("model".into(), json!(model));
    let mut messages = Vec::new();
    if !c.system.is_empty() {
        messages.push(json!({"role": "system", "content": c.system.join("\n\n")}));
    }
    for m in &c.messages {
        messages.push(match m {
            Msg::User(parts) => json!({"role": "user", "content": content_value(parts)}),
            // Chat Completions takes a system message anywhere: kept in its place.
            Msg::System(t) => json!({"role": "system", "content": t}),
            Msg::Assistant { text, calls } => {
                let mut a = Map::new();
                a.insert("role".into(), json!("assistant"));
                a.insert("content".into(), if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) });
                if !calls.is_empty() {
                    let calls: Vec<Value> = calls
                        .iter()
                        .map(|k| json!({"id": k.id, "type": "function", "function": {"name": k.name, "arguments": k.args}}))
                        .collect();
                    a.insert("tool_calls".into(), Value::Array(calls));
                }
                Value::Object(a)
            }
            Msg::Tool { id, content, .. } => {
                let text: String = content.iter().map(|p| if let Part::Text(t) = p { t.as_str() } else { "" }).collect();
                json!({"role": "tool", "tool_call_id": id, "content": text})
            }
        });
    }
    o.insert("messages".into(), Value::Array(messages));
    // Before the cap is taken: a budget's effort is its share of it.
    if let Some(e) = super::reasoning::openai(c) {
        o.insert("reasoning_effort".into(), e);
    }
    if let Some(v) = c.max_tokens.take() {
        o.insert("max_completion_tokens".into(), v);
    }
    for (k, v) in [("temperature", c.temperature.take()), ("top_p", c.top_p.take())] {
        if let Some(v) = v {
            o.insert(k.into(), v);
        }
    }
    if !c.stop.is_empty() {
        o.insert("stop".into(), Value::Array(std::mem::take(&mut c.stop)));
    }
    for (k, v) in [
        ("seed", c.seed.take()),
        ("presence_penalty", c.presence_penalty.take()),
        ("frequency_penalty", c.frequency_penalty.take()),
        ("user", c.user.take()),
    ] {
        if let Some(k2) = v {
            o.insert(k.into(), k2.value);
        }
    }
    let top_k = c.top_k.take();
    c.drop_knob(top_k);
    if !c.tools.is_empty() {
        let tools: Vec<Value> = c
            .tools
            .iter()
            .map(|t| {
                let mut f = Map::new();
                f.insert("name".into(), json!(t.name));
                if let Some(d) = &t.description {
                    f.insert("description".into(), d.clone());
                }
                f.insert("parameters".into(), t.parameters.clone().unwrap_or_else(|| json!({"type": "object"})));
                json!({"type": "function", "function": Value::Object(f)})
            })
            .collect();
        o.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &c.choice {
        o.insert(
            "tool_choice".into(),
            match choice {
                Choice::Auto => json!("auto"),
                Choice::None => json!("none"),
                Choice::Required => json!("required"),
                Choice::Named(n) => json!({"type": "function", "function": {"name": n}}),
            },
        );
    }
    if let Some(p) = c.parallel.filter(|_| !c.tools.is_empty()) {
        o.insert("parallel_tool_calls".into(), json!(p));
    }
    match &c.format {
        Some(Format::JsonObject) => {
            o.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Some(Format::JsonSchema { name, schema }) => {
            o.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema}}),
            );
        }
        None => {}
    }
    if c.stream {
        o.insert("stream".into(), json!(true));
        o.insert("stream_options".into(), json!({"include_usage": true}));
    }
    o
}

pub fn finish_of(reason: &str) -> Finish {
    match reason {
        "length" => Finish::Length,
        "tool_calls" | "function_call" => Finish::ToolCalls,
        "content_filter" => Finish::ContentFilter,
        _ => Finish::Stop,
    }
}

pub fn usage_of(u: &Value) -> Usage {
    let n = |p: &str| super::u64_at(u, p);
    Usage {
        prompt: n("/prompt_tokens"),
        completion: n("/completion_tokens"),
        cached: n("/prompt_tokens_details/cached_tokens"),
        cache_write: n("/prompt_tokens_details/cache_write_tokens"),
        reasoning: n("/completion_tokens_details/reasoning_tokens"),
    }
}

pub fn usage_value(u: &Usage) -> Value {
    json!({"prompt_tokens": u.prompt, "completion_tokens": u.completion,
        "total_tokens": u.prompt.saturating_add(u.completion),
        "prompt_tokens_details": {"cached_tokens": u.cached},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning}})
}

pub fn parse_answer(o: &Map<String, Value>) -> Option<Answer> {
    let choice = o.g("choices")?.get(0)?;
    let msg = choice.g("message")?;
    let calls = match msg.g("tool_calls") {
        Some(Value::Array(tc)) => tc
            .iter()
            .map(|t| Call {
                id: super::str_at(t, "/id").to_string(),
                name: super::str_at(t, "/function/name").to_string(),
                args: super::str_at(t, "/function/arguments").to_string(),
            })
            .collect(),
        _ => Vec::new(),
    };
    let text = msg.g("content").map(text_of).unwrap_or_default();
    let text = if text.is_empty() { msg.g("refusal").and_then(Value::as_str).unwrap_or("").to_string() } else { text };
    Some(Answer {
        id: o.g("id").and_then(Value::as_str).unwrap_or("").to_string(),
        model: o.g("model").and_then(Value::as_str).unwrap_or("").to_string(),
        text,
        reasoning: reasoning_of(msg).to_string(),
        calls,
        finish: finish_of(choice.g("finish_reason").and_then(Value::as_str).unwrap_or("stop")),
        usage: o.g("usage").map(usage_of).unwrap_or_default(),
    })
}

/// A message's (or a delta's) reasoning text: OpenRouter's and vLLM's `reasoning`, DeepSeek's
/// `reasoning_content`.
pub fn reasoning_of(msg: &Value) -> &str {
    // Either may be null beside the other.
    let text = |k: &str| msg.g(k).and_then(Value::as_str).filter(|t| !t.is_empty());
    text("reasoning").or_else(|| text("reasoning_content")).unwrap_or("")
}

pub fn write_answer(a: &Answer, created: u64) -> Value {
    let mut msg = Map::new();
    msg.insert("role".into(), json!("assistant"));
    msg.insert("content".into(), if a.text.is_empty() && !a.calls.is_empty() { Value::Null } else { json!(a.text) });
    msg.insert("refusal".into(), Value::Null);
    // OpenRouter's field for the model's reasoning text.
    if !a.reasoning.is_empty() {
        msg.insert("reasoning".into(), json!(a.reasoning));
    }
    if !a.calls.is_empty() {
        let calls: Vec<Value> = a
            .calls
            .iter()
            .map(|k| json!({"id": k.id, "type": "function", "function": {"name": k.name, "arguments": k.args}}))
            .collect();
        msg.insert("tool_calls".into(), Value::Array(calls));
    }
    let id = if a.id.starts_with("chatcmpl") { a.id.clone() } else { format!("chatcmpl-{}", a.id) };
    obj(vec![
        ("id", json!(id)),
        ("object", json!("chat.completion")),
        ("created", json!(created)),
        ("model", json!(a.model)),
        (
            "choices",
            json!([{"index": 0, "message": Value::Object(msg), "logprobs": null, "finish_reason": a.finish.openai()}]),
        ),
        ("usage", usage_value(&a.usage)),
    ])
}

/// Tool-call arguments as an object, for APIs that take them parsed (`param` names the field).
pub fn args_object(args: &str, param: &str) -> Result<Value, Refused> {
    parse_object(args).ok_or_else(|| Refused::new(param, "tool call arguments are not a JSON object"))
}
