use super::*;
use crate::api::Api;

fn converse(from: Api, body: Value) -> crate::translate::Translated {
    crate::translate::converse_request(from, body.to_string().as_bytes()).unwrap()
}

#[test]
fn an_openai_request_becomes_a_converse_body() {
    let body = serde_json::json!({
        "model": "meta-llama/llama-3.3-70b-instruct",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture, and the weather?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        ],
        "max_tokens": 64, "temperature": 0.2, "top_p": 0.9, "stop": ["END"],
        "seed": 7, "presence_penalty": 0.1, "user": "u1", "parallel_tool_calls": false,
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    });
    let t = converse(Api::OpenAi, body);
    let v: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "messages": [
                {"role": "user", "content": [
                    {"text": "What is in this picture, and the weather?"},
                    {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}}]},
                {"role": "assistant", "content": [
                    {"toolUse": {"toolUseId": "call_1", "name": "get_weather", "input": {"city": "Paris"}}}]},
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "call_1", "content": [{"text": "18C"}], "status": "success"}}]},
            ],
            "system": [{"text": "Be brief."}],
            "inferenceConfig": {"maxTokens": 64, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]},
            "toolConfig": {
                "tools": [{"toolSpec": {"name": "get_weather", "description": "Weather by city",
                    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}}],
                "toolChoice": {"tool": {"name": "get_weather"}}},
        })
    );
    // No model (the path names it), no stream (the path says it).
    assert!(v.get("modelId").is_none() && v.get("stream").is_none());
    let mut dropped = t.dropped.clone();
    dropped.sort();
    assert_eq!(dropped, ["parallel_tool_calls", "presence_penalty", "seed", "user"]);
    let w = t.warning_for(crate::translate::CONVERSE).unwrap();
    assert!(w.starts_with("dropped ") && w.ends_with("(no counterpart in the bedrock_converse API)"), "{w}");
}

#[test]
fn anthropic_and_google_requests_and_tool_choices() {
    let body = serde_json::json!({"model": "m", "max_tokens": 10, "system": "S", "stream": true, "top_k": 5,
        "messages": [{"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": true,
                        "content": [{"type": "text", "text": "boom"}]}]}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"}});
    let t = converse(Api::Anthropic, body);
    let v: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(v["system"], serde_json::json!([{"text": "S"}]));
    assert_eq!(v["inferenceConfig"], serde_json::json!({"maxTokens": 10}));
    assert_eq!(v["toolConfig"]["toolChoice"], serde_json::json!({"any": {}}));
    assert_eq!(v["messages"][2]["content"][0]["toolResult"]["status"], "error");
    assert_eq!(t.dropped, ["top_k"]);
    for (choice, want) in [
        (serde_json::json!("auto"), Some(serde_json::json!({"auto": {}}))),
        (serde_json::json!("required"), Some(serde_json::json!({"any": {}}))),
    ] {
        let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "tool_choice": choice,
            "tools": [{"type": "function", "function": {"name": "f"}}]});
        let v: Value = serde_json::from_slice(&converse(Api::OpenAi, body).body).unwrap();
        assert_eq!(v["toolConfig"].get("toolChoice").cloned(), want);
        assert_eq!(v["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"]["type"], "object");
    }
    // `none` without tool blocks in the history: no tool is offered.
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "tool_choice": "none",
        "tools": [{"type": "function", "function": {"name": "f"}}]});
    let t = converse(Api::OpenAi, body);
    let v: Value = serde_json::from_slice(&t.body).unwrap();
    assert!(v.get("toolConfig").is_none() && t.dropped.is_empty(), "{v}");
    // Google.
    let body = serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "systemInstruction": {"parts": [{"text": "S"}]},
        "generationConfig": {"maxOutputTokens": 9, "temperature": 1, "stopSequences": ["x"]}});
    let v: Value = serde_json::from_slice(&converse(Api::Google, body).body).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"messages": [{"role": "user", "content": [{"text": "Hi"}]}], "system": [{"text": "S"}],
               "inferenceConfig": {"maxTokens": 9, "temperature": 1, "stopSequences": ["x"]}})
    );
}

#[test]
fn what_converse_cannot_take_is_refused_naming_the_field() {
    let url = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]});
    let e = crate::translate::converse_request(Api::OpenAi, url.to_string().as_bytes()).unwrap_err();
    assert_eq!(e.param, "messages[0].content");
    assert!(e.message.contains("data URL"), "{}", e.message);
    let pdf = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:application/pdf;base64,JVBERi0="}}]}]});
    let e = crate::translate::converse_request(Api::OpenAi, pdf.to_string().as_bytes()).unwrap_err();
    assert!(e.message.contains("application/pdf"), "{}", e.message);
    let schema = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}});
    let e = crate::translate::converse_request(Api::OpenAi, schema.to_string().as_bytes()).unwrap_err();
    assert_eq!(e.param, "response_format");
}

#[test]
fn a_converse_answer_is_read_with_its_stop_reason_and_usage() {
    let body = serde_json::json!({
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "Hmm.", "signature": "sig"}}},
            {"text": "Let me check."},
            {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}}]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 10, "outputTokens": 7, "totalTokens": 1117,
                  "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 100},
        "metrics": {"latencyMs": 300}});
    let Value::Object(o) = body.clone() else { unreachable!() };
    let (a, signature) = parse_answer(&o, "req1", "us.amazon.nova-pro-v1:0").unwrap();
    assert_eq!((a.text.as_str(), a.reasoning.as_str(), signature.as_str()), ("Let me check.", "Hmm.", "sig"));
    assert_eq!(
        a.calls,
        [Call { id: "tooluse_1".into(), name: "get_weather".into(), args: r#"{"city":"Paris"}"#.into() }]
    );
    assert_eq!(a.finish, Finish::ToolCalls);
    assert_eq!(a.usage, Usage { prompt: 1110, completion: 7, cached: 1000, cache_write: 100, reasoning: 0 });
    for (reason, finish) in [
        ("end_turn", Finish::Stop),
        ("stop_sequence", Finish::Stop),
        ("max_tokens", Finish::Length),
        ("guardrail_intervened", Finish::ContentFilter),
        ("content_filtered", Finish::ContentFilter),
    ] {
        assert_eq!(finish_of(reason), finish);
    }
    // As the Anthropic answer the endpoint serves: reasoning first, the call, every count.
    let out = anthropic_answer(body.to_string().as_bytes(), "req1", "us.amazon.nova-pro-v1:0").unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"id": "msg_req1", "type": "message", "role": "assistant", "model": "us.amazon.nova-pro-v1:0",
            "content": [{"type": "thinking", "thinking": "Hmm.", "signature": "sig"},
                        {"type": "text", "text": "Let me check."},
                        {"type": "tool_use", "id": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 7, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000}})
    );
    // Then into an OpenAI caller's answer, as any Anthropic endpoint's.
    let openai: Value =
        serde_json::from_slice(&crate::translate::answer(Api::Anthropic, Api::OpenAi, &out, 1).unwrap()).unwrap();
    assert_eq!(openai["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(openai["usage"]["prompt_tokens"], 1110);
    // Not a Converse answer.
    assert!(anthropic_answer(br#"{"type":"message"}"#, "x", "m").is_none());
    assert!(anthropic_answer(br#"{"output":{"message":{"content":[]}}}"#, "x", "m").is_none(), "no stopReason");
    assert!(anthropic_answer(b"[1]", "x", "m").is_none());
}
