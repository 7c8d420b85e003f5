//! The translators' tests: every direction on requests, answers, errors and streams.

use serde_json::Value;

use super::stream::StreamTranslator;
use super::*;

fn tr(from: Api, to: Api, body: Value, stream: bool) -> (Value, Vec<String>) {
    let t = request(from, to, body.to_string().as_bytes(), "up-model", stream).unwrap_or_else(|r| panic!("{r:?}"));
    (serde_json::from_slice(&t.body).unwrap(), t.dropped)
}

fn refused(from: Api, to: Api, body: Value) -> String {
    request(from, to, body.to_string().as_bytes(), "m", false).expect_err("refused").param
}

/// An OpenAI conversation with everything common: system, tools, a call and its result.
fn openai_conversation() -> Value {
    serde_json::json!({
        "model": "x", "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "stop": "END", "seed": 7,
        "logit_bias": {"1": 2},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
        "tool_choice": "required",
        "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}},
    })
}

#[test]
fn openai_to_anthropic_request() {
    let (v, dropped) = tr(Api::OpenAi, Api::Anthropic, openai_conversation(), true);
    assert_eq!(v["model"], "up-model");
    let body =
        request(Api::OpenAi, Api::Anthropic, openai_conversation().to_string().as_bytes(), "up", false).unwrap().body;
    assert!(body.starts_with(br#"{"model":"up","#), "model first: each attempt splices its own id");
    assert_eq!(v["system"], "Be brief.");
    assert_eq!(v["max_tokens"], 100);
    assert_eq!(v["stop_sequences"], serde_json::json!(["END"]));
    assert_eq!((v["temperature"].as_f64(), v["top_p"].as_f64()), (Some(0.5), Some(0.9)));
    assert_eq!(v["stream"], true);
    assert_eq!(v["tool_choice"], serde_json::json!({"type": "any"}));
    assert_eq!(v["tools"][0]["input_schema"]["properties"]["city"]["type"], "string");
    assert_eq!(
        v["output_config"],
        serde_json::json!({"format": {"type": "json_schema", "schema": {"type": "object"}}})
    );
    let m = v["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(
        m[0]["content"][1],
        serde_json::json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}})
    );
    assert_eq!(
        m[1]["content"][0],
        serde_json::json!({"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}})
    );
    assert_eq!(
        m[2],
        serde_json::json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]})
    );
    assert_eq!(dropped, vec!["logit_bias", "seed"]);
    // Anthropic needs max_tokens: a default when the caller set none.
    let (v, _) =
        tr(Api::OpenAi, Api::Anthropic, serde_json::json!({"messages": [{"role": "user", "content": "hi"}]}), false);
    assert_eq!(v["max_tokens"], anthropic::DEFAULT_MAX_TOKENS);
    assert!(v.get("stream").is_none());
}

#[test]
fn openai_to_google_request() {
    let (v, dropped) = tr(Api::OpenAi, Api::Google, openai_conversation(), true);
    assert!(v.get("model").is_none());
    assert_eq!(v["systemInstruction"], serde_json::json!({"parts": [{"text": "Be brief."}]}));
    let g = &v["generationConfig"];
    assert_eq!((g["maxOutputTokens"].as_u64(), g["seed"].as_u64()), (Some(100), Some(7)));
    assert_eq!(g["stopSequences"], serde_json::json!(["END"]));
    assert_eq!(g["responseMimeType"], "application/json");
    assert_eq!(g["responseJsonSchema"], serde_json::json!({"type": "object"}));
    assert_eq!(v["toolConfig"], serde_json::json!({"functionCallingConfig": {"mode": "ANY"}}));
    assert_eq!(v["tools"][0]["functionDeclarations"][0]["name"], "get_weather");
    let c = v["contents"].as_array().unwrap();
    assert_eq!(c[0]["parts"][1], serde_json::json!({"inlineData": {"mimeType": "image/png", "data": "AAAA"}}));
    assert_eq!(
        c[1],
        serde_json::json!({"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]})
    );
    assert_eq!(
        c[2],
        serde_json::json!({"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}}]})
    );
    assert_eq!(dropped, vec!["logit_bias"]);
}

fn anthropic_conversation() -> Value {
    serde_json::json!({
        "model": "x", "max_tokens": 50, "top_k": 5, "stop_sequences": ["Z"],
        "system": [{"type": "text", "text": "Sys", "cache_control": {"type": "ephemeral"}}],
        "metadata": {"user_id": "u1"},
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "rain"}]},
                {"type": "text", "text": "And tomorrow?"}]},
        ],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
    })
}

#[test]
fn anthropic_to_openai_and_google_requests() {
    let (v, dropped) = tr(Api::Anthropic, Api::OpenAi, anthropic_conversation(), true);
    assert_eq!(v["messages"][0], serde_json::json!({"role": "system", "content": "Sys"}));
    assert_eq!(
        v["messages"][2]["tool_calls"][0]["function"],
        serde_json::json!({"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"})
    );
    assert_eq!(v["messages"][2]["content"], "Checking.");
    assert_eq!(v["messages"][3], serde_json::json!({"role": "tool", "tool_call_id": "toolu_1", "content": "rain"}));
    assert_eq!(v["messages"][4], serde_json::json!({"role": "user", "content": "And tomorrow?"}));
    assert_eq!(v["tool_choice"], serde_json::json!({"type": "function", "function": {"name": "get_weather"}}));
    assert_eq!(v["parallel_tool_calls"], false);
    assert_eq!((v["max_completion_tokens"].as_u64(), v["user"].as_str()), (Some(50), Some("u1")));
    assert_eq!(v["stream_options"], serde_json::json!({"include_usage": true}));
    assert_eq!(dropped, vec!["cache_control", "top_k"]);

    let (v, dropped) = tr(Api::Anthropic, Api::Google, anthropic_conversation(), false);
    assert_eq!(v["generationConfig"]["topK"], 5);
    let c = v["contents"].as_array().unwrap();
    assert_eq!(c.len(), 3, "{v}");
    assert_eq!(
        c[2]["parts"][0]["functionResponse"],
        serde_json::json!({"name": "get_weather", "response": {"result": "rain"}})
    );
    assert_eq!(c[2]["parts"][1], serde_json::json!({"text": "And tomorrow?"}));
    assert_eq!(
        v["toolConfig"]["functionCallingConfig"],
        serde_json::json!({"mode": "ANY", "allowedFunctionNames": ["get_weather"]})
    );
    assert_eq!(dropped, vec!["cache_control", "metadata.user_id", "parallel_tool_calls"]);
}

/// What Claude Code 2.1 sends on every turn (captured): a system message after the first user
/// turn, adaptive thinking, `context_management`, `output_config.effort`, `cache_control` on
/// blocks and tool results.
fn claude_code_turn() -> Value {
    serde_json::json!({
        "model": "x", "max_tokens": 32000, "stream": true,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Read note.txt", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": "Available agent types: Explore."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/t/note.txt"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "1\tPINEAPPLE",
                "cache_control": {"type": "ephemeral"}}]},
        ],
        "tools": [{"name": "Read", "description": "Reads a file", "input_schema": {"type": "object"}}],
        "metadata": {"user_id": "{\"session_id\":\"s\"}"},
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
    })
}

#[test]
fn claude_code_requests_reach_openai_and_google_endpoints() {
    let (v, dropped) = tr(Api::Anthropic, Api::OpenAi, claude_code_turn(), true);
    let m = v["messages"].as_array().unwrap();
    assert_eq!(m[0], serde_json::json!({"role": "system", "content": "You are Claude Code."}));
    assert_eq!(m[1], serde_json::json!({"role": "user", "content": "Read note.txt"}));
    assert_eq!(
        m[2],
        serde_json::json!({"role": "system", "content": "Available agent types: Explore."}),
        "in its place"
    );
    assert_eq!(m[3]["tool_calls"][0]["function"]["name"], "Read");
    assert_eq!(m[4], serde_json::json!({"role": "tool", "tool_call_id": "toolu_1", "content": "1\tPINEAPPLE"}));
    assert_eq!(m.len(), 5);
    assert_eq!(v["reasoning_effort"], "high");
    assert_eq!(v["max_completion_tokens"], 32000);
    assert!(v.get("thinking").is_none() && v.get("context_management").is_none(), "{v}");
    // Adaptive thinking is a reasoning model's default: consumed, the effort sent.
    assert_eq!(dropped, vec!["context_management", "cache_control"]);

    let (v, dropped) = tr(Api::Anthropic, Api::Google, claude_code_turn(), true);
    assert_eq!(
        v["systemInstruction"],
        serde_json::json!({"parts": [{"text": "You are Claude Code.\n\nAvailable agent types: Explore."}]}),
        "generateContent has no system turn"
    );
    let roles: Vec<&str> = v["contents"].as_array().unwrap().iter().map(|c| c["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "model", "user"]);
    // The effort's share of max_tokens (0.8 x 32000), thoughts asked for.
    assert_eq!(
        v["generationConfig"]["thinkingConfig"],
        serde_json::json!({"thinkingBudget": 25600, "includeThoughts": true})
    );
    assert_eq!(dropped, vec!["context_management", "cache_control", "metadata.user_id"]);

    let mut image = claude_code_turn();
    image["messages"][1]["content"] =
        serde_json::json!([{"type": "image", "source": {"type": "url", "url": "https://x"}}]);
    assert_eq!(refused(Api::Anthropic, Api::OpenAi, image), "messages[1].content[0].type");
}

#[test]
fn google_to_openai_and_anthropic_requests_pair_calls_without_ids() {
    let body = serde_json::json!({
        "systemInstruction": {"parts": [{"text": "S"}]},
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}, {"functionCall": {"name": "g", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "g", "response": {"ok": true}}},
                {"functionResponse": {"name": "f", "response": {"result": "done"}}}]},
        ],
        "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "OBJECT", "properties": {"a": {"type": "INTEGER"}}}}]}],
        "generationConfig": {"maxOutputTokens": 9, "responseMimeType": "application/json", "thinkingConfig": {"thinkingBudget": 512}},
        "safetySettings": [],
    });
    let (v, dropped) = tr(Api::Google, Api::OpenAi, body.clone(), false);
    let m = v["messages"].as_array().unwrap();
    assert_eq!(m[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(m[2]["tool_calls"][1]["id"], "call_2");
    assert_eq!(m[3], serde_json::json!({"role": "tool", "tool_call_id": "call_2", "content": "{\"ok\":true}"}));
    assert_eq!(m[4], serde_json::json!({"role": "tool", "tool_call_id": "call_1", "content": "done"}));
    assert_eq!(
        v["tools"][0]["function"]["parameters"],
        serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}})
    );
    assert_eq!(v["response_format"], serde_json::json!({"type": "json_object"}));
    assert_eq!(dropped, vec!["safetySettings"]);
    assert_eq!(v["reasoning_effort"], "high", "512 of 9 tokens");
    // json_object has no Anthropic counterpart: refused, naming the field.
    assert_eq!(refused(Api::Google, Api::Anthropic, body.clone()), "response_format");
    let mut b = body;
    b["generationConfig"] = serde_json::json!({"thinkingConfig": {"thinkingBudget": 512}});
    let (v, _) = tr(Api::Google, Api::Anthropic, b, false);
    // Raised to Anthropic's minimum; without a cap the answer keeps the default room.
    assert_eq!(v["thinking"], serde_json::json!({"type": "enabled", "budget_tokens": 1024}));
    assert_eq!(v["max_tokens"], 4096 + 1024);
    assert_eq!(v["messages"][2]["content"][0]["tool_use_id"], "call_2");
}

#[test]
fn fields_without_a_counterpart_that_change_the_answer_are_refused() {
    let user = serde_json::json!([{"role": "user", "content": "hi"}]);
    assert_eq!(refused(Api::OpenAi, Api::Anthropic, serde_json::json!({"messages": user, "n": 2})), "n");
    let audio = serde_json::json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]);
    assert_eq!(
        refused(Api::OpenAi, Api::Google, serde_json::json!({"messages": audio})),
        "messages[0].content[0].type"
    );
    let url = serde_json::json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]);
    assert_eq!(refused(Api::OpenAi, Api::Google, serde_json::json!({"messages": url})), "messages[0].content[0]");
    assert!(request(
        Api::OpenAi,
        Api::Anthropic,
        serde_json::json!({"messages": url}).to_string().as_bytes(),
        "m",
        false
    )
    .is_ok());
    let web = serde_json::json!({"messages": user, "tools": [{"type": "web_search_20250305", "name": "web_search"}], "max_tokens": 5});
    assert_eq!(refused(Api::Anthropic, Api::OpenAi, web), "tools[0].type");
    assert_eq!(
        refused(Api::Google, Api::OpenAi, serde_json::json!({"contents": [], "cachedContent": "c/1"})),
        "cachedContent"
    );
    let gen = serde_json::json!({"contents": [], "generationConfig": {"candidateCount": 3}});
    assert_eq!(refused(Api::Google, Api::OpenAi, gen), "generationConfig.candidateCount");
    let search = serde_json::json!({"contents": [], "tools": [{"googleSearch": {}}]});
    assert_eq!(refused(Api::Google, Api::Anthropic, search), "tools[0].googleSearch");
    let bad_args = serde_json::json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "f", "arguments": "not json"}}]}]});
    assert_eq!(refused(Api::OpenAi, Api::Anthropic, bad_args), "messages[0].tool_calls[0].function.arguments");
    assert_eq!(refused(Api::OpenAi, Api::Anthropic, serde_json::json!([1])), "body");
}

pub(super) fn answers() -> [(Api, Value); 3] {
    [
        (
            Api::OpenAi,
            serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "ok",
                "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                "prompt_tokens_details": {"cached_tokens": 40}, "completion_tokens_details": {"reasoning_tokens": 0}}}),
        ),
        (
            Api::Anthropic,
            serde_json::json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "call_9", "name": "f", "input": {"a": 1}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 60, "output_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 40}}),
        ),
        (
            Api::Google,
            serde_json::json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"},
                {"functionCall": {"id": "call_9", "name": "f", "args": {"a": 1}}}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120, "cachedContentTokenCount": 40},
            "modelVersion": "m", "responseId": "1"}),
        ),
    ]
}

#[test]
fn answers_keep_content_calls_finish_and_usage_in_every_direction() {
    for (from, body) in answers() {
        for (to, _) in answers() {
            if from == to {
                continue;
            }
            let out = answer(from, to, body.to_string().as_bytes(), 5).unwrap();
            let o = match serde_json::from_slice::<Value>(&out).unwrap() {
                Value::Object(o) => o,
                _ => panic!(),
            };
            let a = match to {
                Api::OpenAi => openai::parse_answer(&o),
                Api::Anthropic => anthropic::parse_answer(&o),
                Api::Google => google::parse_answer(&o),
                Api::Responses => unreachable!("not among the answers"),
            }
            .unwrap();
            let what = format!("{from:?} -> {to:?}");
            assert_eq!((a.text.as_str(), a.finish), ("ok", Finish::ToolCalls), "{what}");
            assert_eq!(
                a.calls,
                vec![Call { id: "call_9".into(), name: "f".into(), args: "{\"a\":1}".into() }],
                "{what}"
            );
            assert_eq!(a.usage, Usage { prompt: 100, completion: 20, cached: 40, ..Usage::default() }, "{what}");
            assert_eq!(a.model, "m", "{what}");
        }
    }
    assert_eq!(answer(Api::Anthropic, Api::OpenAi, b"{\"type\":\"error\"}", 0), None);
}

#[test]
fn errors_take_the_callers_shape_and_status() {
    let (s, b) = error(
        Api::Anthropic,
        Api::OpenAi,
        529,
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    );
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        (s, v["error"]["message"].as_str(), v["error"]["type"].as_str()),
        (503, Some("Overloaded"), Some("server_error"))
    );
    let (s, b) = error(Api::OpenAi, Api::Google, 400, br#"{"error":{"message":"bad","type":"invalid_request_error"}}"#);
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        (s, &v),
        (400, &serde_json::json!({"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}))
    );
    let (s, b) = error(Api::Google, Api::Anthropic, 429, b"<html>slow down</html>");
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        (s, v["error"]["type"].as_str(), v["error"]["message"].as_str()),
        (429, Some("rate_limit_error"), Some("<html>slow down</html>"))
    );
}

pub(super) fn streams() -> [(Api, String); 3] {
    let openai = [
        serde_json::json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
        serde_json::json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
        serde_json::json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": "lo é"}}]}),
        serde_json::json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_9", "type": "function", "function": {"name": "f", "arguments": ""}}]}}]}),
        serde_json::json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]}}]}),
        serde_json::json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}}]}),
        serde_json::json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        serde_json::json!({"id": "c1", "model": "m", "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 40}}}),
    ]
    .iter()
    .map(|v| format!("data: {v}\n\n"))
    .collect::<String>()
        + "data: [DONE]\n\n";
    let ev = |name: &str, v: Value| format!("event: {name}\ndata: {v}\n\n");
    let anthropic = [
        ev("message_start", serde_json::json!({"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {"input_tokens": 60, "cache_read_input_tokens": 40, "output_tokens": 1}}})),
        ev("content_block_start", serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        ev("ping", serde_json::json!({"type": "ping"})),
        ev("content_block_delta", serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}})),
        ev("content_block_delta", serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo é"}})),
        ev("content_block_stop", serde_json::json!({"type": "content_block_stop", "index": 0})),
        ev("content_block_start", serde_json::json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "call_9", "name": "f", "input": {}}})),
        ev("content_block_delta", serde_json::json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"a\""}})),
        ev("content_block_delta", serde_json::json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ":1}"}})),
        ev("content_block_stop", serde_json::json!({"type": "content_block_stop", "index": 1})),
        ev("message_delta", serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}})),
        ev("message_stop", serde_json::json!({"type": "message_stop"})),
    ]
    .concat();
    let google = [
        serde_json::json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}, "index": 0}], "usageMetadata": {"promptTokenCount": 100}, "modelVersion": "m", "responseId": "r1"}),
        serde_json::json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "lo é"}]}, "index": 0}], "modelVersion": "m", "responseId": "r1"}),
        serde_json::json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"id": "call_9", "name": "f", "args": {"a": 1}}}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "cachedContentTokenCount": 40}, "modelVersion": "m", "responseId": "r1"}),
    ]
    .iter()
    .map(|v| format!("data: {v}\r\n\r\n"))
    .collect::<String>();
    [(Api::OpenAi, openai), (Api::Anthropic, anthropic), (Api::Google, google)]
}

/// What a stream said, read back through a translator into OpenAI's answer.
fn summary(api: Api, bytes: &[u8]) -> Answer {
    // Reading a stream of `api` back: decode its events with the same decoder the translator uses.
    let mut t = StreamTranslator::new(api, Api::OpenAi, 0, false);
    let out = if api == Api::OpenAi { bytes.to_vec() } else { t.feed(bytes) };
    let mut a = Answer::default();
    let mut args = String::new();
    for line in String::from_utf8(out).unwrap().lines() {
        let Some(d) = line.strip_prefix("data: ") else { continue };
        if d == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(d).unwrap();
        a.model = v["model"].as_str().unwrap_or("").to_string();
        if let Some(t) = v.pointer("/choices/0/delta/content").and_then(Value::as_str) {
            a.text.push_str(t);
        }
        if let Some(tc) = v.pointer("/choices/0/delta/tool_calls/0") {
            if let Some(id) = tc["id"].as_str() {
                a.calls.push(Call {
                    id: id.into(),
                    name: tc["function"]["name"].as_str().unwrap().into(),
                    args: String::new(),
                });
            }
            args.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
        }
        if let Some(f) = v.pointer("/choices/0/finish_reason").and_then(Value::as_str) {
            a.finish = openai::finish_of(f);
        }
        if v["usage"].is_object() {
            a.usage = openai::usage_of(&v["usage"]);
        }
    }
    if let Some(c) = a.calls.first_mut() {
        c.args = serde_json::from_str::<Value>(&args).unwrap().to_string();
    }
    a
}

#[test]
fn streams_translate_event_by_event_in_every_direction_however_split() {
    let expected = Answer {
        id: String::new(),
        model: "m".into(),
        text: "Hello é".into(),
        reasoning: String::new(),
        calls: vec![Call { id: "call_9".into(), name: "f".into(), args: "{\"a\":1}".into() }],
        finish: Finish::ToolCalls,
        usage: Usage { prompt: 100, completion: 20, cached: 40, ..Usage::default() },
    };
    for (from, body) in streams() {
        assert_eq!(summary(from, body.as_bytes()), expected, "{from:?} itself");
        for (to, _) in streams() {
            if from == to {
                continue;
            }
            let mut whole = StreamTranslator::new(from, to, 9, false);
            let out = whole.feed(body.as_bytes());
            assert!(whole.ended(), "{from:?} -> {to:?}");
            assert_eq!(summary(to, &out), expected, "{from:?} -> {to:?}: {}", String::from_utf8_lossy(&out));
            // Byte by byte (a UTF-8 character split too): the same bytes come out.
            let mut split = StreamTranslator::new(from, to, 9, false);
            let mut piecewise = Vec::new();
            for b in body.as_bytes() {
                piecewise.extend(split.feed(&[*b]));
            }
            assert_eq!(piecewise, out, "{from:?} -> {to:?} split");
        }
    }
}

#[test]
fn translated_streams_have_each_apis_framing() {
    let [openai, anthropic, google] = streams();
    let out = String::from_utf8(StreamTranslator::new(Api::OpenAi, Api::Anthropic, 0, false).feed(openai.1.as_bytes()))
        .unwrap();
    let names: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert!(out.contains(r#""usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":40,"input_tokens":60,"output_tokens":20}"#), "{out}");
    let out =
        String::from_utf8(StreamTranslator::new(Api::Anthropic, Api::Google, 0, false).feed(anthropic.1.as_bytes()))
            .unwrap();
    assert!(out.ends_with("\r\n\r\n") && out.matches("finishReason").count() == 1, "{out}");
    assert!(out.contains(r#"{"functionCall":{"args":{"a":1},"id":"call_9","name":"f"}}"#), "{out}");
    // Without alt=sse a Google caller gets one JSON array.
    let out = StreamTranslator::new(Api::Anthropic, Api::Google, 0, true).feed(anthropic.1.as_bytes());
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(4));
    let out =
        String::from_utf8(StreamTranslator::new(Api::Google, Api::OpenAi, 0, false).feed(google.1.as_bytes())).unwrap();
    assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
    // A stream cut before its end does not pretend to be complete.
    let mut t = StreamTranslator::new(Api::OpenAi, Api::Anthropic, 0, false);
    let cut = openai.1.len() / 2;
    let out = String::from_utf8(t.feed(&openai.1.as_bytes()[..cut])).unwrap();
    assert!(!t.ended() && !out.contains("message_stop"), "{out}");
}

#[test]
fn stream_errors_take_the_callers_shape() {
    let e = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let out =
        String::from_utf8(StreamTranslator::new(Api::Anthropic, Api::OpenAi, 0, false).feed(e.as_bytes())).unwrap();
    assert_eq!(
        out,
        "data: {\"error\":{\"code\":null,\"message\":\"Overloaded\",\"param\":null,\"type\":\"server_error\"}}\n\n"
    );
    let out = String::from_utf8(
        StreamTranslator::new(Api::OpenAi, Api::Google, 0, false).feed(b"data: {\"error\":{\"message\":\"x\"}}\n\n"),
    )
    .unwrap();
    assert!(out.starts_with("data: {\"error\":{\"code\":500"), "{out}");
}

#[test]
fn the_warning_names_the_dropped_fields() {
    let t = Translated { body: vec![], dropped: vec!["seed".into(), "logit_bias".into()] };
    assert_eq!(
        t.warning(Api::Anthropic).as_deref(),
        Some("dropped seed, logit_bias (no counterpart in the anthropic API)")
    );
    assert_eq!(Translated { body: vec![], dropped: vec![] }.warning(Api::Google), None);
    // An unknown field's name is the caller's: never a header break or non-ASCII.
    let hostile = Translated { body: vec![], dropped: vec!["a\r\nx-evil: 1".into(), "é".repeat(100)] };
    let w = hostile.warning(Api::Google).unwrap();
    assert!(w.chars().all(|c| c.is_ascii_graphic() || c == ' '), "{w}");
    let many = Translated { body: vec![], dropped: (0..20).map(|i| format!("f{i}")).collect() };
    assert!(many.warning(Api::OpenAi).unwrap().contains("f7, 12 more"));
}

/// A cheap stand-in for the fuzz targets in `cargo test`: every truncation and a byte flip at
/// every position of the sample requests, answers and streams, in every direction, never panics.
#[test]
fn truncated_and_corrupted_inputs_never_panic() {
    let mut bodies: Vec<Vec<u8>> =
        vec![openai_conversation(), anthropic_conversation()].into_iter().map(|v| v.to_string().into_bytes()).collect();
    bodies.extend(answers().into_iter().map(|(_, v)| v.to_string().into_bytes()));
    let streams: Vec<Vec<u8>> = streams().into_iter().map(|(_, s)| s.into_bytes()).collect();
    for from in Api::ALL {
        for to in Api::ALL {
            for b in bodies.iter().chain(&streams) {
                for cut in (0..b.len()).step_by(7) {
                    let mut m = b.clone();
                    m.truncate(cut);
                    let _ = request(from, to, &m, "m", true);
                    let _ = answer(from, to, &m, 0);
                    let _ = StreamTranslator::new(from, to, 0, cut % 2 == 0).feed(&m);
                    let mut flipped = b.clone();
                    if let Some(x) = flipped.get_mut(cut) {
                        *x = b"{}[]\":,0\n"[cut % 9];
                    }
                    let _ = request(from, to, &flipped, "m", false);
                    let _ = answer(from, to, &flipped, 0);
                    let _ = error(from, to, 500, &flipped);
                    let _ = StreamTranslator::new(from, to, 0, false).feed(&flipped);
                }
            }
        }
    }
}

/// Thousands of calls of one name without ids, answered in order, and thousands of unknown
/// fields: each result pairs with its own call (and the translation is linear: one map lookup
/// per result, one set insert per dropped name).
#[test]
fn many_calls_of_one_name_pair_in_order_and_many_unknown_fields_are_named_once() {
    let n = 3000;
    let call = serde_json::json!({"functionCall": {"name": "f", "args": {}}});
    let answer = serde_json::json!({"functionResponse": {"name": "f", "response": {"result": "r"}}});
    let body = serde_json::json!({"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": vec![call; n]},
        {"role": "user", "parts": vec![answer; n]},
    ]});
    let (v, _) = tr(Api::Google, Api::OpenAi, body, false);
    let m = v["messages"].as_array().unwrap();
    assert_eq!(m.len(), 2 + n);
    for (i, tool) in m[2..].iter().enumerate() {
        assert_eq!(tool["tool_call_id"], format!("call_{}", i + 1));
    }
    let mut o = serde_json::Map::new();
    o.insert("messages".into(), serde_json::json!([{"role": "user", "content": "x"}]));
    for i in 0..n {
        o.insert(format!("x{i}"), Value::Null);
    }
    let t = request(Api::OpenAi, Api::Anthropic, Value::Object(o).to_string().as_bytes(), "m", false).unwrap();
    assert_eq!(t.dropped.len(), n);
}
