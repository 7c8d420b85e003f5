//! Google generateContent: its request into the pivot and out of it, its answer into and out of
//! [`Answer`]. Both JSON spellings (`systemInstruction`, `system_instruction`) are read; camelCase
//! is written.

use super::jsonm::G;
use serde_json::{Map, Value};

use super::chat::{knob, one_choice, push_merged, stops, Chat, Choice, Format, Msg, Part, Tool};
use super::openai::args_object;
use super::{get2, obj, Answer, Call, Finish, Refused, Usage};

/// `generationConfig` members read into the pivot; the others are dropped, except those in
/// `GEN_REFUSED`.
const GEN_READ: &[(&str, &str)] = &[
    ("temperature", "temperature"),
    ("topP", "top_p"),
    ("topK", "top_k"),
    ("maxOutputTokens", "max_output_tokens"),
    ("stopSequences", "stop_sequences"),
    ("candidateCount", "candidate_count"),
    ("responseMimeType", "response_mime_type"),
    ("responseSchema", "response_schema"),
    ("responseJsonSchema", "response_json_schema"),
    ("seed", "seed"),
    ("presencePenalty", "presence_penalty"),
    ("frequencyPenalty", "frequency_penalty"),
    ("thinkingConfig", "thinking_config"),
    ("responseModalities", "response_modalities"),
];
const GEN_REFUSED: &[&str] = &["speechConfig", "speech_config", "imageConfig", "image_config"];

pub fn parse_request(o: &Map<String, Value>) -> Result<Chat, Refused> {
    let mut c = Chat::default();
    for k in o.keys() {
        match k.as_str() {
            "cachedContent" | "cached_content" => {
                return Err(Refused::new(k.clone(), "cached content lives at Google: not translated across APIs"))
            }
            "safetySettings" | "safety_settings" | "labels" => c.drop_field(k.clone()),
            _ => {}
        }
    }
    if let Some(si) = get2(o, "systemInstruction", "system_instruction") {
        let texts: Vec<&str> = si
            .g("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.g("text").and_then(Value::as_str))
            .collect();
        c.system.push(texts.concat());
    }
    if let Some(Value::Object(g)) = get2(o, "generationConfig", "generation_config") {
        generation_config(&mut c, g)?;
    }
    for (i, t) in get2(o, "tools", "tools").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let Some(t) = t.as_object() else { continue };
        for (k, v) in t {
            if k != "functionDeclarations" && k != "function_declarations" {
                return Err(Refused::new(
                    format!("tools[{i}].{k}"),
                    "only function declarations are translated across APIs",
                ));
            }
            for d in v.as_array().into_iter().flatten() {
                let Some(d) = d.as_object() else { continue };
                let params = get2(d, "parametersJsonSchema", "parameters_json_schema")
                    .cloned()
                    .or_else(|| d.g("parameters").map(openapi_to_json_schema));
                c.tools.push(Tool {
                    name: d.g("name").and_then(Value::as_str).unwrap_or("").to_string(),
                    description: d.g("description").cloned(),
                    parameters: params,
                });
            }
        }
    }
    if let Some(Value::Object(tc)) = get2(o, "toolConfig", "tool_config") {
        if let Some(Value::Object(f)) = get2(tc, "functionCallingConfig", "function_calling_config") {
            let names: Vec<&str> = get2(f, "allowedFunctionNames", "allowed_function_names")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            c.choice = match f.g("mode").and_then(Value::as_str) {
                Some("NONE") => Some(Choice::None),
                Some("ANY") if names.len() == 1 => names.first().map(|n| Choice::Named(n.to_string())),
                Some("ANY") => Some(Choice::Required),
                Some(_) => Some(Choice::Auto),
                None => None,
            };
            if names.len() > 1 {
                c.drop_field("toolConfig.functionCallingConfig.allowedFunctionNames");
            }
        }
    }
    let Some(Value::Array(contents)) = o.g("contents") else {
        return Err(Refused::new("contents", "contents must be an array"));
    };
    // Calls without an id get `call_<n>`; a response without one answers the oldest open call
    // of its name.
    // (Linear: open calls by name in order, answered ones skipped when met.)
    let mut next_id = 0usize;
    let mut open: std::collections::HashMap<String, std::collections::VecDeque<String>> = Default::default();
    let mut answered: std::collections::HashSet<String> = Default::default();
    for (i, m) in contents.iter().enumerate() {
        let model = m.g("role").and_then(Value::as_str) == Some("model");
        let (mut parts, mut text, mut calls) = (Vec::new(), String::new(), Vec::new());
        for (j, p) in m.g("parts").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let Some(p) = p.as_object() else { continue };
            let param = format!("contents[{i}].parts[{j}]");
            if get2(p, "thoughtSignature", "thought_signature").is_some() {
                c.drop_field("thoughtSignature");
            }
            if let Some(t) = p.g("text").and_then(Value::as_str) {
                if p.g("thought").and_then(Value::as_bool) == Some(true) {
                    c.drop_field("thought parts");
                } else if model {
                    text.push_str(t);
                } else {
                    parts.push(Part::Text(t.to_string()));
                }
            } else if let Some(d) = get2(p, "inlineData", "inline_data") {
                let media = d.g("mimeType").or_else(|| d.g("mime_type")).and_then(Value::as_str).unwrap_or("");
                if !media.starts_with("image/") {
                    return Err(Refused::new(param, format!("{media} data is not translated across APIs")));
                }
                let data = d.g("data").and_then(Value::as_str).unwrap_or("").to_string();
                parts.push(Part::Inline { media: media.to_string(), data });
            } else if let Some(d) = get2(p, "fileData", "file_data") {
                let uri = d.g("fileUri").or_else(|| d.g("file_uri")).and_then(Value::as_str).unwrap_or("");
                if !uri.starts_with("https://") && !uri.starts_with("http://") {
                    return Err(Refused::new(param, "files stored at Google are not translated across APIs"));
                }
                parts.push(Part::Url(uri.to_string()));
            } else if let Some(f) = get2(p, "functionCall", "function_call") {
                let name = f.g("name").and_then(Value::as_str).unwrap_or("").to_string();
                let id = match f.g("id").and_then(Value::as_str) {
                    Some(id) if !id.is_empty() => id.to_string(),
                    _ => {
                        next_id += 1;
                        format!("call_{next_id}")
                    }
                };
                open.entry(name.clone()).or_default().push_back(id.clone());
                calls.push(Call {
                    id,
                    name,
                    args: f.g("args").map(crate::json::to_text).unwrap_or_else(|| "{}".into()),
                });
            } else if let Some(f) = get2(p, "functionResponse", "function_response") {
                let name = f.g("name").and_then(Value::as_str).unwrap_or("").to_string();
                let id = match f.g("id").and_then(Value::as_str) {
                    Some(id) if !id.is_empty() => id.to_string(),
                    _ => {
                        let queue = open.get_mut(&name);
                        let mut found = String::new();
                        if let Some(q) = queue {
                            while let Some(x) = q.pop_front() {
                                if !answered.contains(&x) {
                                    found = x;
                                    break;
                                }
                            }
                        }
                        found
                    }
                };
                answered.insert(id.clone());
                let content = vec![Part::Text(response_text(f.g("response")))];
                c.messages.push(Msg::Tool { id, name, content, error: false });
            } else {
                return Err(Refused::new(param, "this part is not translated across APIs"));
            }
        }
        if model {
            c.push_assistant(text, calls);
        } else if !parts.is_empty() {
            c.messages.push(Msg::User(parts));
        }
    }
    Ok(c)
}

fn generation_config(c: &mut Chat, g: &Map<String, Value>) -> Result<(), Refused> {
    for k in g.keys() {
        if GEN_REFUSED.contains(&k.as_str()) {
            return Err(Refused::new(format!("generationConfig.{k}"), "not translated across APIs"));
        }
        if !GEN_READ.iter().any(|(a, b)| a == k || b == k) {
            c.drop_field(format!("generationConfig.{k}"));
        }
    }
    let get = |a: &str, b: &str| get2(g, a, b);
    one_choice(get("candidateCount", "candidate_count"), "generationConfig.candidateCount")?;
    if let Some(Value::Array(m)) = get("responseModalities", "response_modalities") {
        if m.iter().any(|x| !matches!(x.as_str(), Some("TEXT" | "text"))) {
            return Err(Refused::new("generationConfig.responseModalities", "only text output is translated"));
        }
    }
    c.temperature = get("temperature", "temperature").cloned();
    c.top_p = get("topP", "top_p").cloned();
    c.top_k = knob(get("topK", "top_k"), "generationConfig.topK");
    c.max_tokens = get("maxOutputTokens", "max_output_tokens").cloned();
    c.stop = stops(get("stopSequences", "stop_sequences"));
    c.seed = knob(get("seed", "seed"), "generationConfig.seed");
    c.presence_penalty = knob(get("presencePenalty", "presence_penalty"), "generationConfig.presencePenalty");
    c.frequency_penalty = knob(get("frequencyPenalty", "frequency_penalty"), "generationConfig.frequencyPenalty");
    if let Some(Value::Object(t)) = get("thinkingConfig", "thinking_config") {
        let budget = get2(t, "thinkingBudget", "thinking_budget");
        let name = "generationConfig.thinkingConfig.thinkingBudget";
        // -1: dynamic thinking, the model sets its own budget.
        if budget.and_then(Value::as_i64) == Some(-1) {
            c.reasoning_adaptive = knob(budget, name);
        } else {
            c.reasoning_budget = knob(budget, name);
        }
        c.reasoning_effort =
            knob(get2(t, "thinkingLevel", "thinking_level"), "generationConfig.thinkingConfig.thinkingLevel");
        if let Some(e) = c.reasoning_effort.as_mut() {
            e.value = Value::String(e.value.as_str().unwrap_or("").to_ascii_lowercase());
        }
    }
    let json = get("responseMimeType", "response_mime_type").and_then(Value::as_str) == Some("application/json");
    let schema = get("responseJsonSchema", "response_json_schema")
        .cloned()
        .or_else(|| get("responseSchema", "response_schema").map(openapi_to_json_schema));
    c.format = match schema {
        Some(schema) => Some(Format::JsonSchema { name: "output".into(), schema }),
        None if json => Some(Format::JsonObject),
        None => None,
    };
    Ok(())
}

/// Google's OpenAPI-subset `Schema` (`"type": "OBJECT"`, `nullable`) as JSON Schema.
fn openapi_to_json_schema(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, x) in o {
                match (k.as_str(), x) {
                    ("type", Value::String(t)) => {
                        out.insert(k.clone(), json!(t.to_ascii_lowercase()));
                    }
                    ("nullable" | "propertyOrdering" | "property_ordering", _) => {}
                    ("properties", Value::Object(p)) => {
                        let p: Map<String, Value> =
                            p.iter().map(|(n, s)| (n.clone(), openapi_to_json_schema(s))).collect();
                        out.insert(k.clone(), Value::Object(p));
                    }
                    _ => {
                        out.insert(k.clone(), openapi_to_json_schema(x));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(openapi_to_json_schema).collect()),
        other => other.clone(),
    }
}

/// A function response as tool-result text: `{"result": "<text>"}` (how the writer wraps text)
/// is its text, any other object its JSON.
fn response_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Object(o)) if o.len() == 1 => match o.g("result").or_else(|| o.g("content")) {
            Some(Value::String(s)) => s.clone(),
            _ => crate::json::to_text(&Value::Object(o.clone())),
        },
        Some(Value::String(s)) => s.clone(),
        Some(v) => crate::json::to_text(v),
        None => String::new(),
    }
}

fn part_value(p: &Part, param: &str) -> Result<Value, Refused> {
    match p {
        Part::Text(t) => Ok(json!({"text": t})),
        Part::Inline { media, data } => Ok(json!({"inlineData": {"mimeType": media, "data": data}})),
        Part::Url(_) => {
            Err(Refused::new(param, "image URLs are not translated to the Google API: send the image as base64 data"))
        }
    }
}

pub fn write_request(c: &mut Chat) -> Result<Map<String, Value>, Refused> {
    let mut o = Map::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut later_system = Vec::new();
    for (i, m) in c.messages.iter().enumerate() {
        match m {
            // generateContent has no system turn: the text joins `systemInstruction`.
            Msg::System(t) => later_system.push(t.clone()),
            Msg::User(parts) => {
                let mut out = Vec::new();
                for (j, p) in parts.iter().enumerate() {
                    if !matches!(p, Part::Text(t) if t.is_empty()) {
                        out.push(part_value(p, &format!("messages[{i}].content[{j}]"))?);
                    }
                }
                push_merged(&mut turns, "user", out);
            }
            Msg::Assistant { text, calls } => {
                let mut out = Vec::new();
                if !text.is_empty() {
                    out.push(json!({"text": text}));
                }
                for (j, k) in calls.iter().enumerate() {
                    let args = args_object(&k.args, &format!("messages[{i}].tool_calls[{j}].function.arguments"))?;
                    out.push(json!({"functionCall": {"name": k.name, "args": args}}));
                }
                push_merged(&mut turns, "model", out);
            }
            Msg::Tool { id, name, content, .. } => {
                let name = if name.is_empty() { c.call_name(id).unwrap_or("") } else { name };
                let text: String =
                    content.iter().map(|p| if let Part::Text(t) = p { t.as_str() } else { "" }).collect();
                let response = super::parse_object(&text)
                    .filter(|_| !text.trim().is_empty())
                    .unwrap_or_else(|| json!({"result": text}));
                push_merged(
                    &mut turns,
                    "user",
                    vec![json!({"functionResponse": {"name": name, "response": response}})],
                );
            }
        }
    }
    let contents: Vec<Value> = turns.into_iter().map(|(role, parts)| json!({"role": role, "parts": parts})).collect();
    o.insert("contents".into(), Value::Array(contents));
    let system: Vec<&String> = c.system.iter().chain(&later_system).filter(|s| !s.is_empty()).collect();
    if !system.is_empty() {
        let text = system.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n\n");
        o.insert("systemInstruction".into(), json!({"parts": [{"text": text}]}));
    }
    let mut g = Map::new();
    // Before `maxOutputTokens` is taken: an effort's budget is a share of it.
    let thinking = super::reasoning::google(c);
    for (k, v) in
        [("temperature", c.temperature.take()), ("topP", c.top_p.take()), ("maxOutputTokens", c.max_tokens.take())]
    {
        if let Some(v) = v {
            g.insert(k.into(), v);
        }
    }
    for (k, v) in [
        ("topK", c.top_k.take()),
        ("seed", c.seed.take()),
        ("presencePenalty", c.presence_penalty.take()),
        ("frequencyPenalty", c.frequency_penalty.take()),
    ] {
        if let Some(v) = v {
            g.insert(k.into(), v.value);
        }
    }
    if !c.stop.is_empty() {
        g.insert("stopSequences".into(), Value::Array(std::mem::take(&mut c.stop)));
    }
    if let Some(t) = thinking {
        g.insert("thinkingConfig".into(), t);
    }
    match &c.format {
        Some(Format::JsonObject) => {
            g.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(Format::JsonSchema { schema, .. }) => {
            g.insert("responseMimeType".into(), json!("application/json"));
            g.insert("responseJsonSchema".into(), schema.clone());
        }
        None => {}
    }
    if !g.is_empty() {
        o.insert("generationConfig".into(), Value::Object(g));
    }
    let user = c.user.take();
    c.drop_knob(user);
    if c.parallel == Some(false) && !c.tools.is_empty() {
        c.drop_field("parallel_tool_calls");
    }
    if !c.tools.is_empty() {
        let decls: Vec<Value> = c
            .tools
            .iter()
            .map(|t| {
                let mut d = Map::new();
                d.insert("name".into(), json!(t.name));
                if let Some(x) = &t.description {
                    d.insert("description".into(), x.clone());
                }
                if let Some(p) = &t.parameters {
                    d.insert("parametersJsonSchema".into(), p.clone());
                }
                Value::Object(d)
            })
            .collect();
        o.insert("tools".into(), json!([{"functionDeclarations": decls}]));
        let config = match &c.choice {
            Some(Choice::Auto) => Some(json!({"mode": "AUTO"})),
            Some(Choice::None) => Some(json!({"mode": "NONE"})),
            Some(Choice::Required) => Some(json!({"mode": "ANY"})),
            Some(Choice::Named(n)) => Some(json!({"mode": "ANY", "allowedFunctionNames": [n]})),
            None => None,
        };
        if let Some(f) = config {
            o.insert("toolConfig".into(), json!({"functionCallingConfig": f}));
        }
    }
    Ok(o)
}

pub fn finish_of(reason: &str) -> Finish {
    match reason {
        "MAX_TOKENS" => Finish::Length,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => Finish::ContentFilter,
        _ => Finish::Stop,
    }
}

pub fn finish_reason(f: Finish) -> &'static str {
    match f {
        Finish::Stop | Finish::ToolCalls => "STOP",
        Finish::Length => "MAX_TOKENS",
        Finish::ContentFilter => "SAFETY",
    }
}

/// `usageMetadata`: `promptTokenCount` includes the cached tokens, thinking is output.
pub fn usage_of(u: &Value) -> Usage {
    let n = |p: &str| super::u64_at(u, p);
    let thoughts = n("/thoughtsTokenCount");
    Usage {
        prompt: n("/promptTokenCount"),
        completion: n("/candidatesTokenCount").saturating_add(thoughts),
        cached: n("/cachedContentTokenCount"),
        cache_write: 0,
        reasoning: thoughts,
    }
}

pub fn usage_value(u: &Usage) -> Value {
    let mut m = Map::new();
    m.insert("promptTokenCount".into(), json!(u.prompt));
    m.insert("candidatesTokenCount".into(), json!(u.completion.saturating_sub(u.reasoning)));
    m.insert("totalTokenCount".into(), json!(u.prompt.saturating_add(u.completion)));
    if u.cached > 0 {
        m.insert("cachedContentTokenCount".into(), json!(u.cached));
    }
    if u.reasoning > 0 {
        m.insert("thoughtsTokenCount".into(), json!(u.reasoning));
    }
    Value::Object(m)
}

/// The parts of one candidate into text, thoughts and calls (a call without an id gets an
/// empty one).
pub fn read_parts(parts: &Value, text: &mut String, thoughts: &mut String, calls: &mut Vec<Call>) {
    for p in parts.as_array().into_iter().flatten() {
        if let Some(t) = p.g("text").and_then(Value::as_str) {
            if p.g("thought").and_then(Value::as_bool) == Some(true) {
                thoughts.push_str(t);
            } else {
                text.push_str(t);
            }
        } else if let Some(f) = p.g("functionCall").or_else(|| p.g("function_call")) {
            // Without an id: empty here, the caller numbers it (`call_<n>`).
            let id = f.g("id").and_then(Value::as_str).unwrap_or("").to_string();
            let name = f.g("name").and_then(Value::as_str).unwrap_or("").to_string();
            calls.push(Call { id, name, args: f.g("args").map(crate::json::to_text).unwrap_or_else(|| "{}".into()) });
        }
    }
}

pub fn parse_answer(o: &Map<String, Value>) -> Option<Answer> {
    let candidates = o.g("candidates");
    if candidates.is_none() && o.g("promptFeedback").is_none() {
        return None;
    }
    let cand = candidates.and_then(|c| c.get(0));
    let mut a = Answer {
        id: o.g("responseId").and_then(Value::as_str).unwrap_or("").to_string(),
        model: o.g("modelVersion").and_then(Value::as_str).unwrap_or("").to_string(),
        usage: o.g("usageMetadata").map(usage_of).unwrap_or_default(),
        ..Answer::default()
    };
    match cand {
        Some(cand) => {
            if let Some(parts) = cand.pointer("/content/parts") {
                read_parts(parts, &mut a.text, &mut a.reasoning, &mut a.calls);
            }
            for (i, k) in a.calls.iter_mut().enumerate().filter(|(_, k)| k.id.is_empty()) {
                k.id = format!("call_{}", i + 1);
            }
            a.finish = finish_of(cand.g("finishReason").and_then(Value::as_str).unwrap_or("STOP"));
            if a.finish == Finish::Stop && !a.calls.is_empty() {
                a.finish = Finish::ToolCalls;
            }
        }
        None => a.finish = Finish::ContentFilter,
    }
    Some(a)
}

pub fn write_answer(a: &Answer) -> Value {
    let mut parts = Vec::new();
    if !a.reasoning.is_empty() {
        parts.push(json!({"text": a.reasoning, "thought": true}));
    }
    if !a.text.is_empty() || a.calls.is_empty() {
        parts.push(json!({"text": a.text}));
    }
    for k in &a.calls {
        let args = super::parse_object(&k.args).unwrap_or_else(|| json!({}));
        parts.push(json!({"functionCall": {"id": k.id, "name": k.name, "args": args}}));
    }
    obj(vec![
        (
            "candidates",
            json!([{"content": {"role": "model", "parts": parts}, "finishReason": finish_reason(a.finish), "index": 0}]),
        ),
        ("usageMetadata", usage_value(&a.usage)),
        ("modelVersion", json!(a.model)),
        ("responseId", json!(a.id)),
    ])
}
