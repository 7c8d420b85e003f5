//! The mock's checks below the top level, as strict as the real APIs on what a translated
//! request carries (messages, content parts, tools, tool calls and their results, generation
//! settings): a body the real API refuses, the mock refuses with that API's 400, so a
//! translation mistake fails a test. A body too deep to parse is not checked here (the real APIs
//! take nesting deeper than serde_json's recursion limit; the hostile-input tests send such).

use serde_json::Value;

fn str_of<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn array<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    v.get(k).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// Chat Completions: roles, content parts, tool calls answered by tool messages, tools, tool
/// choice, response format.
pub fn openai_chat(body: &Value) -> Option<String> {
    // A body without messages is left to the top-level checks (the other services the mock
    // plays take such bodies).
    let Some(messages) = body.get("messages").and_then(Value::as_array) else { return None };
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = str_of(m, "role").unwrap_or("");
        if role != "tool" && !open.is_empty() {
            return Some(format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each \
                 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                open.join(", ")
            ));
        }
        match role {
            "system" | "developer" | "user" => {
                if let Some(parts) = m.get("content").and_then(Value::as_array) {
                    for (j, p) in parts.iter().enumerate() {
                        let t = str_of(p, "type").unwrap_or("");
                        let ok = match t {
                            "text" => p.get("text").is_some_and(Value::is_string),
                            "image_url" => role == "user" && p.pointer("/image_url/url").is_some_and(Value::is_string),
                            "input_audio" | "file" => role == "user",
                            _ => false,
                        };
                        if !ok {
                            return Some(format!("Invalid value: '{t}'. messages[{i}].content[{j}]"));
                        }
                    }
                } else if !m.get("content").is_some_and(Value::is_string) {
                    return Some(format!("Invalid type for 'messages[{i}].content'"));
                }
            }
            "assistant" => {
                for (j, c) in array(m, "tool_calls").iter().enumerate() {
                    let id = str_of(c, "id").unwrap_or("");
                    let args = c.pointer("/function/arguments").and_then(Value::as_str);
                    if id.is_empty() || str_of(c, "type") != Some("function") || args.is_none() {
                        return Some(format!("Invalid 'messages[{i}].tool_calls[{j}]'"));
                    }
                    open.push(id.to_string());
                }
                let content = m.get("content").unwrap_or(&Value::Null);
                if content.is_null() && open.is_empty() {
                    return Some(format!("Invalid value for 'messages[{i}].content': expected a string, got null."));
                }
            }
            "tool" => {
                let id = str_of(m, "tool_call_id").unwrap_or("");
                let Some(k) = open.iter().position(|x| x == id) else {
                    return Some(format!(
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message \
                         with 'tool_calls'. (messages[{i}])"
                    ));
                };
                open.remove(k);
            }
            other => return Some(format!("Invalid value: '{other}'. Supported values are: 'system', 'assistant', 'user', 'tool', and 'developer'.")),
        }
    }
    for (i, t) in array(body, "tools").iter().enumerate() {
        if str_of(t, "type") != Some("function") || t.pointer("/function/name").and_then(Value::as_str).is_none() {
            return Some(format!("Invalid 'tools[{i}]'"));
        }
    }
    match body.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if ["none", "auto", "required"].contains(&s.as_str()) => {}
        Some(c) if c.pointer("/function/name").is_some_and(Value::is_string) => {}
        Some(_) => return Some("Invalid value for 'tool_choice'".into()),
    }
    if let Some(f) = body.get("response_format").filter(|f| !f.is_null()) {
        match str_of(f, "type") {
            Some("text" | "json_object") => {}
            Some("json_schema") if f.pointer("/json_schema/name").is_some_and(Value::is_string) => {}
            _ => return Some("Invalid 'response_format'".into()),
        }
    }
    None
}

/// Messages: roles (a `system` message mid-conversation, as the API takes it today, only right
/// after a user turn), block types, tool results answering the previous turn's tool uses, system,
/// tools, tool choice, sampling ranges, output format.
pub fn anthropic(body: &Value) -> Option<String> {
    if !body.get("max_tokens").and_then(Value::as_u64).is_some_and(|n| n >= 1) {
        return Some("max_tokens: Input should be greater than or equal to 1".into());
    }
    if body.get("temperature").and_then(Value::as_f64).is_some_and(|t| !(0.0..=1.0).contains(&t)) {
        return Some("temperature: Input should be less than or equal to 1".into());
    }
    if let Some(refused) = anthropic_thinking(body) {
        return Some(refused);
    }
    match body.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(b)) if b.iter().all(|x| str_of(x, "type") == Some("text")) => {}
        Some(_) => return Some("system: Input should be a valid string or a list of text blocks".into()),
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Some("messages: Field required".into());
    };
    let mut uses: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = str_of(m, "role").unwrap_or("");
        if role == "system" {
            // A mid-conversation system message (no beta header needed; Claude Code sends one
            // after its first user turn): text only, and only right after a user turn.
            let after_user = i > 0 && messages.get(i - 1).and_then(|p| str_of(p, "role")) == Some("user");
            let text = match m.get("content") {
                Some(Value::String(s)) => !s.is_empty(),
                Some(Value::Array(b)) => !b.is_empty() && b.iter().all(|x| str_of(x, "type") == Some("text")),
                _ => false,
            };
            if !after_user {
                return Some(format!("messages.{i}: a system message must immediately follow a user message"));
            }
            if !text {
                return Some(format!("messages.{i}.content: a system message takes only text"));
            }
            continue;
        }
        if role != "user" && role != "assistant" {
            return Some(format!("messages.{i}.role: Input should be 'user', 'assistant' or 'system'"));
        }
        let blocks: Vec<Value> = match m.get("content") {
            Some(Value::String(s)) if !s.is_empty() => Vec::new(),
            Some(Value::Array(b)) if !b.is_empty() => b.clone(),
            _ => return Some(format!("messages.{i}: all messages must have non-empty content")),
        };
        let mut answered: Vec<String> = Vec::new();
        let mut new_uses = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            let t = str_of(b, "type").unwrap_or("");
            let ok = match (t, role) {
                ("text", _) => str_of(b, "text").is_some_and(|x| !x.is_empty()),
                ("image", "user") => match b.pointer("/source/type").and_then(Value::as_str) {
                    Some("base64") => b.pointer("/source/media_type").is_some() && b.pointer("/source/data").is_some(),
                    Some("url") => b.pointer("/source/url").is_some(),
                    _ => false,
                },
                ("tool_use", "assistant") => {
                    new_uses.push(str_of(b, "id").unwrap_or("").to_string());
                    str_of(b, "name").is_some() && b.get("input").is_some_and(Value::is_object)
                }
                ("tool_result", "user") => {
                    answered.push(str_of(b, "tool_use_id").unwrap_or("").to_string());
                    true
                }
                ("thinking" | "redacted_thinking", "assistant") | ("document", "user") => true,
                _ => false,
            };
            if !ok {
                return Some(format!("messages.{i}.content.{j}: invalid {t} block"));
            }
        }
        if let Some(id) = answered.iter().find(|id| !uses.contains(id)) {
            return Some(format!(
                "messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each \
                 `tool_result` block must have a corresponding `tool_use` block in the previous message."
            ));
        }
        if let Some(id) = uses.iter().find(|id| !answered.contains(id)) {
            return Some(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {id}"
            ));
        }
        uses = new_uses;
    }
    for (i, t) in array(body, "tools").iter().enumerate() {
        let custom = t.get("type").is_none() || str_of(t, "type") == Some("custom");
        if custom && (str_of(t, "name").is_none() || !t.get("input_schema").is_some_and(Value::is_object)) {
            return Some(format!("tools.{i}.custom.input_schema: Field required"));
        }
    }
    if let Some(c) = body.get("tool_choice") {
        match str_of(c, "type") {
            Some("auto" | "any" | "none") => {}
            Some("tool") if str_of(c, "name").is_some() => {}
            _ => return Some("tool_choice: Input tag does not match any of the expected tags".into()),
        }
    }
    if let Some(f) = body.pointer("/output_config/format") {
        if str_of(f, "type") != Some("json_schema") || !f.get("schema").is_some_and(Value::is_object) {
            return Some("output_config.format: invalid format".into());
        }
    }
    None
}

/// Extended thinking as the Messages API takes it: `enabled` with a budget of at least 1024 below
/// `max_tokens`, or `adaptive`; and, with it, no `temperature` but 1, no `top_k`, no `top_p`
/// below 0.95, no forced tool use. The messages are Anthropic's.
fn anthropic_thinking(body: &Value) -> Option<String> {
    const DOC: &str = "Please consult our documentation at \
        https://docs.claude.com/en/docs/build-with-claude/extended-thinking#important-considerations-when-using-extended-thinking";
    let t = body.get("thinking")?;
    match str_of(t, "type") {
        Some("disabled") => return None,
        Some("adaptive") => {}
        Some("enabled") => {
            let Some(b) = t.get("budget_tokens").and_then(Value::as_u64).filter(|b| *b >= 1024) else {
                return Some("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024".into());
            };
            if body.get("max_tokens").and_then(Value::as_u64).is_some_and(|m| m <= b) {
                return Some(format!("`max_tokens` must be greater than `thinking.budget_tokens`. {DOC}"));
            }
        }
        _ => {
            return Some(
                "thinking: Input tag does not match any of the expected tags: 'disabled', 'enabled', 'adaptive'".into(),
            )
        }
    }
    if body.get("temperature").is_some_and(|v| v.as_f64() != Some(1.0)) {
        return Some(format!("`temperature` may only be set to 1 when thinking is enabled. {DOC}"));
    }
    if body.get("top_k").is_some() {
        return Some(format!("`top_k` may not be set when thinking is enabled. {DOC}"));
    }
    if body.get("top_p").and_then(Value::as_f64).is_some_and(|p| p < 0.95) {
        return Some(format!("`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled. {DOC}"));
    }
    if matches!(body.pointer("/tool_choice/type").and_then(Value::as_str), Some("any" | "tool")) {
        return Some("Thinking may not be enabled when tool_choice forces tool use.".into());
    }
    None
}

/// The members `generationConfig` has (either spelling).
const GENERATION_CONFIG: &[&str] = &[
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "candidateCount",
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseLogprobs",
    "logprobs",
    "enableEnhancedCivicAnswers",
    "speechConfig",
    "thinkingConfig",
    "imageConfig",
    "mediaResolution",
    "stop_sequences",
    "response_mime_type",
    "response_schema",
    "response_json_schema",
    "response_modalities",
    "candidate_count",
    "max_output_tokens",
    "top_p",
    "top_k",
    "presence_penalty",
    "frequency_penalty",
    "response_logprobs",
    "thinking_config",
    "media_resolution",
];

/// generateContent: roles, one kind of data per part, function responses named, generation
/// settings, tools, function calling mode.
pub fn google(body: &Value) -> Option<String> {
    let bad = |what: String| Some(format!("Invalid JSON payload received. {what}"));
    for (i, c) in array(body, "contents").iter().enumerate() {
        match c.get("role").and_then(Value::as_str) {
            None | Some("user" | "model") => {}
            Some(r) => return Some(format!("Please use a valid role: user, model. (contents[{i}].role: {r})")),
        }
        let parts = array(c, "parts");
        if parts.is_empty() {
            return Some(format!("contents[{i}].parts must not be empty"));
        }
        for (j, p) in parts.iter().enumerate() {
            let Some(o) = p.as_object() else { return bad(format!("contents[{i}].parts[{j}]")) };
            const DATA: &[&str] = &[
                "text",
                "inlineData",
                "inline_data",
                "fileData",
                "file_data",
                "functionCall",
                "function_call",
                "functionResponse",
                "function_response",
                "executableCode",
                "codeExecutionResult",
            ];
            let kinds = o.keys().filter(|k| DATA.contains(&k.as_str())).count();
            if kinds != 1 {
                return Some(format!("contents[{i}].parts[{j}]: a part must have exactly one kind of data"));
            }
            let named = |k: &str| o.get(k).is_some_and(|f| f.get("name").is_some_and(Value::is_string));
            if o.contains_key("functionResponse")
                && !(named("functionResponse")
                    && o.get("functionResponse").and_then(|f| f.get("response")).is_some_and(Value::is_object))
            {
                return Some(format!("contents[{i}].parts[{j}].functionResponse: name and response required"));
            }
            if o.contains_key("functionCall") && !named("functionCall") {
                return Some(format!("contents[{i}].parts[{j}].functionCall.name: required"));
            }
        }
    }
    let g = body.get("generationConfig").or_else(|| body.get("generation_config"));
    if let Some(k) =
        g.and_then(Value::as_object).and_then(|g| g.keys().find(|k| !GENERATION_CONFIG.contains(&k.as_str())))
    {
        return bad(format!("Unknown name \"{k}\" at 'generation_config': Cannot find field."));
    }
    for (i, t) in array(body, "tools").iter().enumerate() {
        for d in array(t, "functionDeclarations") {
            if str_of(d, "name").is_none() || (d.get("parameters").is_some() && d.get("parametersJsonSchema").is_some())
            {
                return Some(format!("tools[{i}].function_declarations: invalid declaration"));
            }
        }
    }
    if let Some(t) = g.and_then(|g| g.get("thinkingConfig").or_else(|| g.get("thinking_config"))) {
        let Some(t) = t.as_object() else { return bad("Invalid value at 'generation_config.thinking_config'".into()) };
        const THINKING: &[&str] = &[
            "thinkingBudget",
            "includeThoughts",
            "thinkingLevel",
            "thinking_budget",
            "include_thoughts",
            "thinking_level",
        ];
        if let Some(k) = t.keys().find(|k| !THINKING.contains(&k.as_str())) {
            return bad(format!("Unknown name \"{k}\" at 'generation_config.thinking_config': Cannot find field."));
        }
        let budget = t.get("thinkingBudget").or_else(|| t.get("thinking_budget"));
        if budget.is_some_and(|b| b.as_i64().is_none_or(|b| !(-1..=32_768).contains(&b))) {
            return Some("The thinking budget is invalid: it must be -1 (dynamic), 0 or at most 32768.".into());
        }
        if budget.is_some() && (t.contains_key("thinkingLevel") || t.contains_key("thinking_level")) {
            return Some("Thinking budget and thinking level cannot both be set.".into());
        }
    }
    let mode = body.pointer("/toolConfig/functionCallingConfig/mode").and_then(Value::as_str);
    if mode.is_some_and(|m| !["AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"].contains(&m)) {
        return bad("Invalid value at 'tool_config.function_calling_config.mode'".into());
    }
    None
}

/// The check for a body of `api` on `path`, when the body parses (None: accepted).
pub fn check(api: crate::mock::Api, path: &str, body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match api {
        crate::mock::Api::OpenAi if path == "/v1/chat/completions" => openai_chat(&v),
        crate::mock::Api::OpenAi if path == "/v1/responses" => super::responses::check(&v),
        crate::mock::Api::OpenAi => None,
        crate::mock::Api::Anthropic => anthropic(&v),
        crate::mock::Api::Google => google(&v),
    }
}
