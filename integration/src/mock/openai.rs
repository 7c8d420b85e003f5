//! What the mock's OpenAI API refuses before answering, as the real API does: a request without
//! a key (401), and on the generation paths a body with a top-level field the endpoint does not
//! document (400 `Unrecognized request argument supplied: <field>`, `error.param` naming it), or
//! `stream_options` without `stream: true`, or (Responses API) `include_usage`
//! (400 `invalid_request_error`).
//!
//! Two kinds of provider speak this API. By default the mock is OpenAI itself: only the fields
//! OpenAI documents. An OpenAI-compatible host (vLLM, Together, Fireworks, DeepInfra, ...;
//! `Behavior::openai_compatible`, the `compat` token) also takes the sampling fields OpenAI
//! lacks and OpenRouter documents ([`COMPATIBLE_EXTRA_FIELDS`]) on chat completions and
//! completions. Neither takes OpenRouter's own fields (`provider`, `usage`, `transforms`, ...).

use serde_json::{json, Value};

/// Chat Completions' documented request fields (deprecated ones included).
const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// The sampling fields OpenAI-compatible hosts take beyond OpenAI's (`Behavior::openai_compatible`).
pub const COMPATIBLE_EXTRA_FIELDS: &[&str] = &["top_k", "min_p", "top_a", "repetition_penalty"];

/// The legacy Completions API's request fields.
const COMPLETIONS_FIELDS: &[&str] = &[
    "model",
    "prompt",
    "best_of",
    "echo",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "max_tokens",
    "n",
    "presence_penalty",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "suffix",
    "temperature",
    "top_p",
    "user",
];

/// The Responses API's request fields.
const RESPONSES_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "background",
    "conversation",
    "include",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt",
    "prompt_cache_key",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
];

/// The documented fields of a generation path's body (None: a path the mock does not check).
fn fields_of(path: &str) -> Option<&'static [&'static str]> {
    match path {
        "/v1/chat/completions" => Some(CHAT_FIELDS),
        "/v1/completions" => Some(COMPLETIONS_FIELDS),
        "/v1/responses" => Some(RESPONSES_FIELDS),
        _ => None,
    }
}

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`.
pub(super) fn error_json(msg: &str, param: Option<&str>, code: Option<&str>) -> Value {
    json!({"error": {"message": msg, "type": "invalid_request_error", "param": param, "code": code}})
}

/// The refusal of a request on a generation path (`path` without its query): 401 without a key
/// (`authorization: Bearer <key>`, or the `api-key` / `x-api-key` header OpenAI-compatible hosts
/// such as Azure take), 400 for a body the endpoint does not accept. `compatible`: an
/// OpenAI-compatible host, which also takes [`COMPATIBLE_EXTRA_FIELDS`] (not on `/v1/responses`).
pub(super) fn refusal(
    path: &str,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    compatible: bool,
) -> Option<(u16, Value)> {
    let fields = fields_of(path)?;
    let extra: &[&str] = if compatible && path != "/v1/responses" { COMPATIBLE_EXTRA_FIELDS } else { &[] };
    let bearer =
        header("authorization").and_then(|a| a.strip_prefix("Bearer ").map(|k| !k.trim().is_empty())).unwrap_or(false);
    let other = ["api-key", "x-api-key"].iter().any(|h| header(h).is_some_and(|k| !k.is_empty()));
    if !bearer && !other {
        let msg = "You didn't provide an API key. You need to provide your API key in an Authorization header \
                   using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).";
        return Some((401, error_json(msg, None, None)));
    }
    // Top-level members only, their values kept as raw text: a real API accepts nesting deeper
    // than serde_json's recursion limit (the hostile-input corpus sends such messages).
    type Raw = Box<serde_json::value::RawValue>;
    let Ok(raw) = serde_json::from_slice::<std::collections::BTreeMap<String, Raw>>(body) else {
        return Some((400, error_json("We could not parse the JSON body of your request.", None, None)));
    };
    // The members checked below (each small), parsed.
    let o: serde_json::Map<String, Value> = raw
        .iter()
        .filter(|(k, _)| ["stream", "stream_options"].contains(&k.as_str()))
        .filter_map(|(k, v)| serde_json::from_str(v.get()).ok().map(|v| (k.clone(), v)))
        .collect();
    if let Some(unknown) = raw.keys().find(|k| !fields.contains(&k.as_str()) && !extra.contains(&k.as_str())) {
        let msg = format!("Unrecognized request argument supplied: {unknown}");
        return Some((400, error_json(&msg, Some(unknown), None)));
    }
    let options = o.get("stream_options").filter(|v| !v.is_null());
    if options.is_some() && o.get("stream") != Some(&Value::Bool(true)) {
        let msg = "The 'stream_options' parameter is only allowed when 'stream' is enabled.";
        return Some((400, error_json(msg, Some("stream_options"), None)));
    }
    if path == "/v1/responses" && options.is_some_and(|s| s.get("include_usage").is_some()) {
        let msg = "Unknown parameter: 'stream_options.include_usage'.";
        return Some((400, error_json(msg, Some("stream_options.include_usage"), Some("unknown_parameter"))));
    }
    None
}

/// Whether a Chat Completions or Completions stream asked for its usage chunk.
pub(super) fn asks_usage(body: &Value) -> bool {
    body.get("stream_options").and_then(|o| o.get("include_usage")) == Some(&Value::Bool(true))
}
