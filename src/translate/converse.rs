//! Amazon Bedrock's Converse API, an upstream-only API (no caller speaks it): the request body
//! written from the pivot, and the answer read into [`Answer`]. Member names and shapes follow
//! botocore's service model for `bedrock-runtime` (`ConverseRequest`, `ConverseResponse`). The
//! path names the model (`/model/{modelId}/converse`), so the body carries none. The streamed
//! answer (ConverseStream) is converted in `providers::bedrock::converse_stream`.
//!
//! Written: `messages` (text, image bytes, `toolUse`, `toolResult`), `system`,
//! `inferenceConfig` {maxTokens, temperature, topP, stopSequences}, `toolConfig` {tools[].toolSpec,
//! toolChoice auto / any / tool}. Dropped (named in `x-switchyard-warning`): top_k, seed, the
//! penalties, user, reasoning (Converse has no model-independent member for them: each model
//! takes its own in `additionalModelRequestFields`), one tool call at most. Refused: an image by
//! URL (Converse takes bytes or S3), media other than images, structured output.

use super::jsonm::G;
use serde_json::{Map, Value};

use super::chat::{push_merged, Chat, Choice, Msg, Part};
use super::openai::args_object;
use super::{Answer, Call, Finish, Refused, Usage};

/// An image part as a Converse `image` block: the format is the media type's subtype.
fn image_block(media: &str, data: &str, field: &str) -> Result<Value, Refused> {
    let format = match media.strip_prefix("image/") {
        Some("png") => "png",
        Some("jpeg" | "jpg") => "jpeg",
        Some("gif") => "gif",
        Some("webp") => "webp",
        _ => {
            return Err(Refused::new(
                field,
                format!("{media} content is not translated to Bedrock's Converse API (images: png, jpeg, gif, webp)"),
            ))
        }
    };
    Ok(json!({"image": {"format": format, "source": {"bytes": data}}}))
}

/// A user or tool-result part as a Converse content block (None: an empty text, left out).
fn part_block(p: &Part, field: &str) -> Result<Option<Value>, Refused> {
    match p {
        Part::Text(t) if t.is_empty() => Ok(None),
        Part::Text(t) => Ok(Some(json!({"text": t}))),
        Part::Inline { media, data } => image_block(media, data, field).map(Some),
        Part::Url(_) => Err(Refused::new(
            field,
            "an image by URL is not translated to Bedrock's Converse API (it takes the image's bytes): send it as a data URL",
        )),
    }
}

/// The Converse request body for `c`.
pub fn write_request(c: &mut Chat) -> Result<Map<String, Value>, Refused> {
    if c.format.is_some() {
        return Err(Refused::new("response_format", "structured output has no counterpart in Bedrock's Converse API"));
    }
    let mut o = Map::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut later_system = Vec::new();
    let mut history_calls = false;
    for (i, m) in c.messages.iter().enumerate() {
        let field = format!("messages[{i}].content");
        match m {
            Msg::System(t) => later_system.push(t.clone()),
            Msg::User(parts) => {
                let mut blocks = Vec::with_capacity(parts.len());
                for p in parts {
                    blocks.extend(part_block(p, &field)?);
                }
                push_merged(&mut turns, "user", blocks);
            }
            Msg::Assistant { text, calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"text": text}));
                }
                for (j, k) in calls.iter().enumerate() {
                    let input = args_object(&k.args, &format!("messages[{i}].tool_calls[{j}].function.arguments"))?;
                    blocks.push(json!({"toolUse": {"toolUseId": k.id, "name": k.name, "input": input}}));
                    history_calls = true;
                }
                push_merged(&mut turns, "assistant", blocks);
            }
            Msg::Tool { id, content, error, .. } => {
                let mut parts = Vec::with_capacity(content.len());
                for p in content {
                    parts.extend(part_block(p, &field)?);
                }
                if parts.is_empty() {
                    // Converse requires content: an empty result is an empty text.
                    parts.push(json!({"text": ""}));
                }
                let mut r = Map::new();
                r.insert("toolUseId".into(), json!(id));
                r.insert("content".into(), Value::Array(parts));
                r.insert("status".into(), json!(if *error { "error" } else { "success" }));
                push_merged(&mut turns, "user", vec![json!({"toolResult": Value::Object(r)})]);
                history_calls = true;
            }
        }
    }
    let messages: Vec<Value> =
        turns.into_iter().map(|(role, blocks)| json!({"role": role, "content": blocks})).collect();
    o.insert("messages".into(), Value::Array(messages));
    let system: Vec<Value> =
        c.system.iter().chain(&later_system).filter(|s| !s.is_empty()).map(|s| json!({"text": s})).collect();
    if !system.is_empty() {
        o.insert("system".into(), Value::Array(system));
    }
    let mut inference = Map::new();
    for (k, v) in [("maxTokens", c.max_tokens.take()), ("temperature", c.temperature.take()), ("topP", c.top_p.take())]
    {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            inference.insert(k.into(), v);
        }
    }
    if !c.stop.is_empty() {
        inference.insert("stopSequences".into(), Value::Array(std::mem::take(&mut c.stop)));
    }
    if !inference.is_empty() {
        o.insert("inferenceConfig".into(), Value::Object(inference));
    }
    for k in [
        c.top_k.take(),
        c.seed.take(),
        c.presence_penalty.take(),
        c.frequency_penalty.take(),
        c.user.take(),
        c.reasoning_budget.take(),
        c.reasoning_effort.take(),
        c.reasoning_adaptive.take(),
    ] {
        c.drop_knob(k);
    }
    if c.parallel == Some(false) && !c.tools.is_empty() {
        c.drop_field("parallel_tool_calls");
    }
    // `none`: the model is offered no tool (Converse has no such choice); a history with tool
    // blocks still needs the tools declared, and then the choice cannot be kept.
    let none = matches!(c.choice, Some(Choice::None));
    if none && history_calls && !c.tools.is_empty() {
        c.drop_field("tool_choice");
    }
    if !c.tools.is_empty() && (!none || history_calls) {
        let tools: Vec<Value> = c
            .tools
            .iter()
            .map(|t| {
                let mut spec = Map::new();
                spec.insert("name".into(), json!(t.name));
                if let Some(d) = t.description.as_ref().filter(|d| d.as_str().is_some_and(|s| !s.is_empty())) {
                    spec.insert("description".into(), d.clone());
                }
                let schema = t.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}}));
                spec.insert("inputSchema".into(), json!({"json": schema}));
                json!({"toolSpec": Value::Object(spec)})
            })
            .collect();
        let mut config = Map::new();
        config.insert("tools".into(), Value::Array(tools));
        let choice = match &c.choice {
            Some(Choice::Auto) => Some(json!({"auto": {}})),
            Some(Choice::Required) => Some(json!({"any": {}})),
            Some(Choice::Named(n)) => Some(json!({"tool": {"name": n}})),
            Some(Choice::None) | None => None,
        };
        if let Some(ch) = choice {
            config.insert("toolChoice".into(), ch);
        }
        o.insert("toolConfig".into(), Value::Object(config));
    }
    Ok(o)
}

/// Converse's `stopReason` as the pivot's finish.
pub fn finish_of(reason: &str) -> Finish {
    match reason {
        "tool_use" => Finish::ToolCalls,
        "max_tokens" => Finish::Length,
        "guardrail_intervened" | "content_filtered" => Finish::ContentFilter,
        // end_turn, stop_sequence, and any later reason.
        _ => Finish::Stop,
    }
}

/// Converse's `usage` (`TokenUsage`): `inputTokens` excludes both cache counts, as Anthropic's.
pub fn usage_of(u: &Value) -> Usage {
    let n = |p: &str| super::u64_at(u, p);
    let (read, write) = (n("/cacheReadInputTokens"), n("/cacheWriteInputTokens"));
    Usage {
        prompt: n("/inputTokens").saturating_add(read).saturating_add(write),
        completion: n("/outputTokens"),
        cached: read,
        cache_write: write,
        reasoning: 0,
    }
}

/// A `ConverseResponse` (`output.message.content`, `stopReason`, `usage`) as an answer, with
/// `id` and `model` (Converse names neither) and the last reasoning signature, if any. None when
/// the body is not a Converse answer.
pub fn parse_answer(o: &Map<String, Value>, id: &str, model: &str) -> Option<(Answer, String)> {
    let content = o.g("output")?.g("message")?.g("content")?.as_array()?;
    let mut a = Answer {
        id: id.to_string(),
        model: model.to_string(),
        finish: finish_of(o.g("stopReason").and_then(Value::as_str)?),
        usage: o.g("usage").map(usage_of).unwrap_or_default(),
        ..Answer::default()
    };
    let mut signature = String::new();
    for b in content {
        if let Some(t) = b.g("text").and_then(Value::as_str) {
            a.text.push_str(t);
        } else if let Some(u) = b.g("toolUse") {
            a.calls.push(Call {
                id: super::str_at(u, "/toolUseId").to_string(),
                name: super::str_at(u, "/name").to_string(),
                args: u.g("input").map(crate::json::to_text).unwrap_or_else(|| "{}".into()),
            });
        } else if let Some(r) = b.g("reasoningContent").and_then(|r| r.g("reasoningText")) {
            a.reasoning.push_str(super::str_at(r, "/text"));
            signature = super::str_at(r, "/signature").to_string();
        }
    }
    Some((a, signature))
}

/// A Converse answer body as the Anthropic Messages answer the router and the caller's
/// translation read (the Bedrock endpoint serves the Anthropic API): the model's reasoning as a
/// `thinking` block first. None when it is not a Converse answer.
pub fn anthropic_answer(body: &[u8], id: &str, model: &str) -> Option<Vec<u8>> {
    let Ok(Value::Object(o)) = crate::json::from_slice::<Value>(body) else { return None };
    let (a, signature) = parse_answer(&o, id, model)?;
    let mut v = super::anthropic::write_answer(&a);
    if !a.reasoning.is_empty() {
        if let Some(content) = v.get_mut("content").and_then(Value::as_array_mut) {
            content.insert(0, json!({"type": "thinking", "thinking": a.reasoning, "signature": signature}));
        }
    }
    serde_json::to_vec(&v).ok()
}

#[cfg(test)]
#[path = "converse_tests.rs"]
mod tests;
