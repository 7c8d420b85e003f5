//! The mock Bedrock's Converse and ConverseStream (`/model/{id}/converse[-stream]`), as strict as
//! AWS: every body is validated against botocore's request shapes (`testdata/converse_shapes.json`,
//! made by `testdata/make_converse_shapes.py`): an unknown member, a missing required one, a union
//! with other than one member, a value of the wrong type or outside its enum is AWS's
//! `ValidationException`; so are a conversation that does not start with a user turn or does not
//! alternate, and tool blocks without a `toolConfig`, which Bedrock refuses too. Answers follow
//! `ConverseResponse`; streams are `ConverseStreamOutput` events in AWS event stream frames with
//! valid CRCs (each payload with Bedrock's `p` padding member). When the request offers tools and
//! its last turn is not a tool result, the model calls the first tool (`toolUse`), its required
//! string arguments `"Paris"`.

use serde_json::{json, Map, Value};

/// The text a Converse answer says.
pub const TEXT: &str = "Hello from Converse";

/// The Converse method of a Bedrock path (`/model/{id}/converse[-stream]`): the model id and
/// whether it streams.
pub fn converse_of(path: &str) -> Option<(String, bool)> {
    let rest = path.strip_prefix("/model/")?;
    let (id, method) = rest.rsplit_once('/')?;
    let stream = match method {
        "converse" => false,
        "converse-stream" => true,
        _ => return None,
    };
    Some((super::bedrock::percent_decode(id), stream))
}

fn shapes() -> &'static Value {
    static SHAPES: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    SHAPES.get_or_init(|| {
        serde_json::from_str::<Value>(include_str!("testdata/converse_shapes.json"))
            .map(|v| v["shapes"].clone())
            .unwrap_or(Value::Null)
    })
}

/// Checks `v` at `path` against shape `name`; Err: AWS's validation message.
fn check(name: &str, v: &Value, path: &str) -> Result<(), String> {
    let s = &shapes()[name];
    let kind = s["type"].as_str().unwrap_or("");
    let wrong = |want: &str| {
        Err(format!(
            "1 validation error detected: Value at '{path}' failed to satisfy constraint: Member must be {want}"
        ))
    };
    if s.get("document").is_some() {
        return Ok(());
    }
    let min = s.get("min").and_then(Value::as_f64);
    match kind {
        "structure" => {
            let Some(o) = v.as_object() else { return wrong("a structure") };
            let members = s["members"].as_object().cloned().unwrap_or_default();
            for (k, x) in o {
                let Some(shape) = members.get(k).and_then(Value::as_str) else {
                    return Err(format!("Malformed input request: extraneous key [{k}] is not permitted at '{path}', please reformat your input and try again."));
                };
                check(shape, x, &format!("{path}.{k}"))?;
            }
            for r in s["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if !o.contains_key(r) {
                    return wrong(&format!("given: '{path}.{r}' is required"));
                }
            }
            if s.get("union").is_some() && o.len() != 1 {
                return wrong("a union with exactly one member set");
            }
            Ok(())
        }
        "list" => {
            let Some(a) = v.as_array() else { return wrong("a list") };
            if min.is_some_and(|m| (a.len() as f64) < m) {
                return wrong("a list of at least the minimum length");
            }
            let member = s["member"].as_str().unwrap_or("");
            a.iter().enumerate().try_for_each(|(i, x)| check(member, x, &format!("{path}.{}", i + 1)))
        }
        "map" => {
            let Some(o) = v.as_object() else { return wrong("a map") };
            let value = s["value"].as_str().unwrap_or("");
            o.iter().try_for_each(|(k, x)| check(value, x, &format!("{path}.{k}")))
        }
        "string" => {
            let Some(t) = v.as_str() else { return wrong("a string") };
            if let Some(e) = s.get("enum").and_then(Value::as_array) {
                if !e.iter().any(|x| x == v) {
                    return wrong(&format!("one of {e:?}"));
                }
            }
            if min.is_some_and(|m| (t.chars().count() as f64) < m) {
                return wrong("a string of at least the minimum length");
            }
            Ok(())
        }
        "integer" | "long" => match v.as_i64() {
            Some(n) if min.is_none_or(|m| n as f64 >= m) => Ok(()),
            _ => wrong("an integer within its range"),
        },
        "float" | "double" => match v.as_f64() {
            Some(n) if min.is_none_or(|m| n >= m) => Ok(()),
            _ => wrong("a number within its range"),
        },
        "boolean" => v.as_bool().map(|_| ()).map_or_else(|| wrong("a boolean"), Ok),
        // A blob in JSON is base64.
        "blob" => match v.as_str() {
            Some(t) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b)) => Ok(()),
            _ => wrong("base64-encoded bytes"),
        },
        _ => Ok(()),
    }
}

/// Why Bedrock would refuse this Converse body (`ValidationException`), if it would.
pub fn invalid_body(body: &[u8], stream: bool) -> Option<String> {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Some("Malformed input request, please reformat your input and try again.".into());
    };
    let root = if stream { "ConverseStreamRequest" } else { "ConverseRequest" };
    if let Err(e) = check(root, &v, "") {
        return Some(e);
    }
    let messages = v["messages"].as_array().cloned().unwrap_or_default();
    if messages.is_empty() {
        return Some("A conversation must start with a user message. Try again with a conversation that starts with a user message.".into());
    }
    let mut last = "";
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if (i == 0 && role != "user") || role == last {
            return Some(
                "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.".into(),
            );
        }
        last = role;
        if m["content"].as_array().is_none_or(Vec::is_empty) {
            return Some(format!("The content field in the Message object at messages.{i} is empty. Add a ContentBlock object to the content field and try again."));
        }
    }
    let tool_blocks = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some());
    if tool_blocks && v.get("toolConfig").is_none() {
        return Some("The toolConfig field must be defined when using toolUse and toolResult content blocks.".into());
    }
    None
}

/// The tool call the model answers with, if the request offers tools and its last turn is not a
/// tool result: the first tool, with its required string arguments set to "Paris".
fn tool_call(request: &Value) -> Option<(String, Value)> {
    let spec = request.pointer("/toolConfig/tools/0/toolSpec")?;
    let last = request["messages"].as_array()?.last()?;
    if last["content"].as_array()?.iter().any(|b| b.get("toolResult").is_some()) {
        return None;
    }
    let schema = &spec["inputSchema"]["json"];
    let mut input = Map::new();
    for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        if schema["properties"][r]["type"] == "string" {
            input.insert(r.to_string(), json!("Paris"));
        }
    }
    Some((spec["name"].as_str()?.to_string(), Value::Object(input)))
}

const USAGE: (u64, u64) = (12, 3);

/// A `ConverseResponse` for `request`.
pub fn answer_json(request: &Value) -> Value {
    let (content, stop) = match tool_call(request) {
        Some((name, input)) => {
            (json!([{"toolUse": {"toolUseId": "tooluse_mock01", "name": name, "input": input}}]), "tool_use")
        }
        None => (json!([{"text": TEXT}]), "end_turn"),
    };
    json!({"output": {"message": {"role": "assistant", "content": content}}, "stopReason": stop,
           "usage": {"inputTokens": USAGE.0, "outputTokens": USAGE.1, "totalTokens": USAGE.0 + USAGE.1},
           "metrics": {"latencyMs": 42}})
}

/// A ConverseStream body for `request`: its events as frames, then `exception` (a stream
/// exception's type and message) after the first delta if given, instead of the end.
pub fn stream_body(request: &Value, exception: Option<(&str, &str)>) -> Vec<u8> {
    use switchyard::providers::bedrock::eventstream;
    let mut events: Vec<(&str, Value)> = vec![("messageStart", json!({"role": "assistant"}))];
    let stop = match tool_call(request) {
        Some((name, input)) => {
            let args = input.to_string();
            let (a, b) = args.split_at(args.len() / 2);
            events.push((
                "contentBlockStart",
                json!({"contentBlockIndex": 0,
                "start": {"toolUse": {"toolUseId": "tooluse_mock01", "name": name}}}),
            ));
            for piece in [a, b] {
                events.push((
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": piece}}}),
                ));
            }
            "tool_use"
        }
        None => {
            for piece in ["Hello", " from", " Converse"] {
                events.push(("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": piece}})));
            }
            "end_turn"
        }
    };
    let mut out = Vec::new();
    let frame = |i: usize, name: &str, mut payload: Value| {
        // Bedrock pads each event's payload with a `p` member of varying length.
        payload["p"] = json!("abcdefghijklmnopqrstuvwxyz"[..i % 26].to_string());
        eventstream::event(name, payload.to_string().as_bytes())
    };
    if let Some((kind, message)) = exception {
        for (i, (name, payload)) in events.into_iter().take(2).enumerate() {
            out.extend(frame(i, name, payload));
        }
        out.extend(eventstream::exception(kind, json!({"message": message}).to_string().as_bytes()));
        return out;
    }
    events.extend([
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        ("messageStop", json!({"stopReason": stop})),
        (
            "metadata",
            json!({"usage": {"inputTokens": USAGE.0, "outputTokens": USAGE.1, "totalTokens": USAGE.0 + USAGE.1},
            "metrics": {"latencyMs": 42}}),
        ),
    ]);
    for (i, (name, payload)) in events.into_iter().enumerate() {
        out.extend(frame(i, name, payload));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shapes_are_botocores_and_bodies_are_checked_against_them() {
        let ok = json!({"messages": [{"role": "user", "content": [{"text": "hi"},
                {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}}]}],
            "system": [{"text": "S"}], "inferenceConfig": {"maxTokens": 5, "temperature": 0.5, "topP": 1, "stopSequences": ["x"]},
            "toolConfig": {"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}}],
                           "toolChoice": {"auto": {}}}});
        assert_eq!(invalid_body(ok.to_string().as_bytes(), false), None);
        assert_eq!(invalid_body(ok.to_string().as_bytes(), true), None);
        let bad = [
            json!({"modelId": "x", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}),
            json!({"model": "x", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}),
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "stream": true}),
            json!({"messages": [{"role": "user", "content": "hi"}]}),
            json!({"messages": [{"role": "system", "content": [{"text": "hi"}]}]}),
            json!({"messages": [{"role": "user", "content": [{"text": "hi", "image": {}}]}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "inferenceConfig": {"max_tokens": 5}}),
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "inferenceConfig": {"maxTokens": 0}}),
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "system": [{"text": ""}]}),
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "toolConfig": {"tools": [{"toolSpec": {"name": "f"}}]}}),
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "toolConfig": {"tools": [], "toolChoice": {"none": {}}}}),
            json!({"messages": [{"role": "user", "content": [{"text": "a"}]}, {"role": "user", "content": [{"text": "b"}]}]}),
            json!({"messages": [{"role": "user", "content": [{"toolResult": {"toolUseId": "t", "content": [{"text": "x"}]}}]}]}),
            json!({"messages": []}),
        ];
        for b in bad {
            assert!(invalid_body(b.to_string().as_bytes(), false).is_some(), "accepted {b}");
        }
    }

    #[test]
    fn tools_offered_are_called_and_the_stream_decodes() {
        let req = json!({"messages": [{"role": "user", "content": [{"text": "Weather?"}]}],
            "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object",
                "properties": {"city": {"type": "string"}}, "required": ["city"]}}}}]}});
        let a = answer_json(&req);
        assert_eq!(a["stopReason"], "tool_use");
        assert_eq!(a["output"]["message"]["content"][0]["toolUse"]["input"], json!({"city": "Paris"}));
        let mut d = switchyard::providers::bedrock::eventstream::Decoder::new();
        let mut messages = Vec::new();
        d.feed(&stream_body(&req, None), &mut messages).unwrap();
        let names: Vec<String> =
            messages.iter().map(|m| m.string(":event-type").unwrap_or_default().to_string()).collect();
        assert_eq!(
            names,
            [
                "messageStart",
                "contentBlockStart",
                "contentBlockDelta",
                "contentBlockDelta",
                "contentBlockStop",
                "messageStop",
                "metadata"
            ]
        );
        // Answered with the tool's result: text.
        let mut after = req.clone();
        after["messages"] = json!([{"role": "user", "content": [{"text": "Weather?"}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t", "name": "get_weather", "input": {}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t", "content": [{"text": "18C"}]}}]}]);
        assert_eq!(invalid_body(after.to_string().as_bytes(), false), None);
        assert_eq!(answer_json(&after)["output"]["message"]["content"][0]["text"], TEXT);
    }
}
