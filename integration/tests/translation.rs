//! Cross-API translation in real Envoy (`docs/translation.md`): each caller's API reaching
//! models served only by another API, plain and streamed, tool calls over two turns, errors,
//! refusals, a plan failing over between endpoints of different APIs, and usage.cost from the
//! serving endpoint's prices. The mock providers check what they receive as strictly as the real
//! APIs (`mock/strict.rs`), so a translation mistake is a 400 here.

mod common;

use common::{launch, Stack};
use serde_json::{json, Value};
use switchyard_integration::mock::received_in_order;

/// alpha speaks only OpenAI (chat completions and Responses, as OpenAI), beta only Anthropic,
/// gamma only Google (`common::one_api_per_provider`; its delta is not used here).
fn catalog() -> Value {
    // One model per test (live statistics stay apart). Prices per million tokens.
    let models: [(&str, &[(&str, f64)]); 15] = [
        ("t/claude", &[("beta", 3.0)]),
        ("t/claude-stream", &[("beta", 3.0)]),
        ("t/claude-tools", &[("beta", 3.0)]),
        ("t/claude-err", &[("beta", 3.0)]),
        ("t/gemini", &[("gamma", 1.0)]),
        ("t/gemini-stream", &[("gamma", 1.0)]),
        ("t/gpt", &[("alpha", 2.0)]),
        ("t/gpt-stream", &[("alpha", 2.0)]),
        ("t/fo", &[("beta", 1.0), ("alpha", 2.0)]),
        ("t/fo-stream", &[("beta", 1.0), ("alpha", 2.0)]),
        ("t/fo-anthropic", &[("beta", 1.0), ("alpha", 2.0)]),
        ("t/fo-google", &[("gamma", 1.0), ("beta", 2.0), ("alpha", 3.0)]),
        ("t/or-gpt", &[("alpha", 1.0)]),
        ("t/or-claude", &[("beta", 1.0)]),
        ("t/or-gemini", &[("gamma", 1.0)]),
    ];
    common::one_api_per_provider(
        &models,
        |price| json!({"prompt": price, "completion": price * 5.0, "cached_prompt": price / 10.0}),
    )
}

fn stack() -> &'static Stack {
    static STACK: std::sync::OnceLock<Stack> = std::sync::OnceLock::new();
    STACK.get_or_init(|| launch("translation", catalog(), |cfg| cfg.per_try_idle_timeout_ms = 2_000))
}

/// Who received this test's attempts, in the order they arrived.
fn receivers(s: &Stack, id: &str) -> Vec<String> {
    received_in_order(&s.providers, id).into_iter().map(|(p, _)| p).collect()
}

/// `data:` payloads of an SSE body (`[DONE]` as a string).
fn data(text: &str) -> Vec<Value> {
    text.replace("\r\n", "\n")
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.to_string())))
        .collect()
}

fn events(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.strip_prefix("event: ")).map(str::to_string).collect()
}

/// usage.cost of `prompt` (of which `cached`) and `completion` tokens at `price` (the catalog's
/// prompt price; completion 5x, cached 1/10).
fn cost(price: f64, prompt: f64, cached: f64, completion: f64) -> f64 {
    ((prompt - cached) * price + cached * price / 10.0 + completion * price * 5.0) / 1e6
}

#[tokio::test]
async fn openai_caller_reaches_an_anthropic_only_model() {
    let s = stack();
    let body = json!({"model": "t/claude", "max_tokens": 32, "temperature": 0.5, "seed": 7, "stop": "END",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]});
    let r = s.openai("oa-an", &[("x-mock-behavior", "beta=cached6")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion", "{v}");
    assert_eq!(v["model"], "t/claude");
    assert_eq!(v["provider"], "beta");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from beta");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 6, "{u}");
    let (p, c) = (u["prompt_tokens"].as_f64().unwrap(), u["completion_tokens"].as_f64().unwrap());
    assert!((u["cost"].as_f64().unwrap() - cost(3.0, p, 6.0, c)).abs() < 1e-12, "{u}");
    // seed has no Anthropic counterpart: dropped, and said so.
    assert!(
        r.header("x-switchyard-warning").is_some_and(|w| w.contains("seed")),
        "{:?}",
        r.header("x-switchyard-warning")
    );
    let (who, got) = s.only_receiver("oa-an");
    assert_eq!(who, "beta");
    assert_eq!(got.path, "/v1/messages");
    assert_eq!(got.header("x-api-key"), Some("key-beta"));
    assert_eq!(got.header("authorization"), None);
    assert_eq!(got.header("anthropic-version"), Some("2023-06-01"));
    let sent = got.json();
    assert_eq!(sent["model"], "beta-t-claude");
    assert_eq!(sent["system"], "Be brief.");
    assert_eq!(sent["stop_sequences"], json!(["END"]));
    assert_eq!(sent["max_tokens"], 32);
    assert!(sent.get("seed").is_none(), "{sent}");
}

#[tokio::test]
async fn openai_stream_from_anthropic_is_translated_chunk_by_chunk() {
    let s = stack();
    let body = json!({"model": "t/claude-stream", "stream": true, "stream_options": {"include_usage": true},
        "max_tokens": 32, "messages": [{"role": "user", "content": "Hello"}]});
    let r = s.openai("oa-an-s", &[("x-mock-behavior", "beta=chunks4")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")));
    let chunks = data(&r.text());
    assert_eq!(chunks.last(), Some(&json!("[DONE]")), "{}", r.text());
    let text: String =
        chunks.iter().filter_map(|c| c.pointer("/choices/0/delta/content").and_then(Value::as_str)).collect();
    assert_eq!(text, "tok0 tok1 tok2 tok3 ");
    assert!(chunks.iter().all(|c| !c.is_object() || (c["model"] == "t/claude-stream" && c["provider"] == "beta")));
    let finish: Vec<&Value> =
        chunks.iter().filter_map(|c| c.pointer("/choices/0/finish_reason")).filter(|f| !f.is_null()).collect();
    assert_eq!(finish, vec![&json!("stop")]);
    let usage = chunks.iter().find_map(|c| c.get("usage").filter(|u| u.is_object())).expect("usage chunk");
    let (p, c) = (usage["prompt_tokens"].as_f64().unwrap(), usage["completion_tokens"].as_f64().unwrap());
    assert_eq!(c, 4.0);
    assert!((usage["cost"].as_f64().unwrap() - cost(3.0, p, 0.0, c)).abs() < 1e-12, "{usage}");
    // Not asked: the same usage chunk last (as on OpenRouter; `routing.stream_usage` can keep
    // OpenAI's rule, tests/stream_usage.rs).
    let body = json!({"model": "t/claude-stream", "stream": true, "max_tokens": 32, "messages": [{"role": "user", "content": "Hi"}]});
    let r = s.openai("oa-an-s2", &[], body).await;
    let chunks = data(&r.text());
    let last = chunks.iter().rev().find(|c| c.is_object()).unwrap_or_else(|| panic!("{}", r.text()));
    assert_eq!(last["choices"], json!([]), "{}", r.text());
    let usage = &last["usage"];
    let (p, c) = (usage["prompt_tokens"].as_f64().unwrap(), usage["completion_tokens"].as_f64().unwrap());
    assert!((usage["cost"].as_f64().unwrap() - cost(3.0, p, 0.0, c)).abs() < 1e-12, "{usage}");
    let (_, got) = s.only_receiver("oa-an-s2");
    assert_eq!(got.json()["stream"], true);
}

#[tokio::test]
async fn a_tool_call_and_its_result_cross_apis_over_two_turns() {
    let s = stack();
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let body = json!({"model": "t/claude-tools", "tools": tools, "tool_choice": "required",
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let r = s.openai("oa-tool-1", &[("x-mock-behavior", "beta=tool")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(
        serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Paris"})
    );
    let sent = s.only_receiver("oa-tool-1").1.json();
    assert_eq!(sent["tool_choice"], json!({"type": "any"}));
    assert_eq!(sent["tools"][0]["input_schema"]["required"], json!(["city"]));
    // Turn two: the call and its result in the history (the strict mock refuses a result
    // without its call).
    let body = json!({"model": "t/claude-tools", "tools": tools, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]});
    let r = s.openai("oa-tool-2", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = s.only_receiver("oa-tool-2").1.json();
    assert_eq!(sent["messages"][2]["content"][0]["type"], "tool_result", "{sent}");
    // Streamed: the call's arguments arrive as deltas.
    let body = json!({"model": "t/claude-tools", "stream": true, "tools": tools,
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let r = s.openai("oa-tool-3", &[("x-mock-behavior", "beta=tool")], body).await;
    let chunks = data(&r.text());
    let args: String = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0/function/arguments").and_then(Value::as_str))
        .collect();
    assert_eq!(args, r#"{"city":"Paris"}"#, "{}", r.text());
}

#[tokio::test]
async fn anthropic_and_google_callers_reach_models_of_the_other_apis() {
    let s = stack();
    // Anthropic caller, Google-only model.
    let body = json!({"model": "t/gemini", "max_tokens": 16, "system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]});
    let r = s.anthropic("an-go", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["type"].as_str(), v["content"][0]["text"].as_str()),
        (Some("message"), Some("Hello from gamma")),
        "{v}"
    );
    assert_eq!(
        (v["model"].as_str(), v["provider"].as_str(), v["stop_reason"].as_str()),
        (Some("t/gemini"), Some("gamma"), Some("end_turn"))
    );
    let u = &v["usage"];
    let (i, o) = (u["input_tokens"].as_f64().unwrap(), u["output_tokens"].as_f64().unwrap());
    assert!((u["cost"].as_f64().unwrap() - cost(1.0, i, 0.0, o)).abs() < 1e-12, "{u}");
    let (who, got) = s.only_receiver("an-go");
    assert_eq!((who.as_str(), got.path.as_str()), ("gamma", "/v1beta/models/gamma-t-gemini:generateContent"));
    assert_eq!(got.header("x-goog-api-key"), Some("key-gamma"));
    assert_eq!((got.header("x-api-key"), got.header("anthropic-version")), (None, None));
    assert_eq!(got.json()["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));
    // Anthropic caller, OpenAI-only model, streamed: Anthropic's event sequence.
    let body = json!({"model": "t/gpt-stream", "max_tokens": 16, "stream": true, "messages": [{"role": "user", "content": "Hi"}]});
    let r = s.anthropic("an-oa-s", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let names = events(&r.text());
    assert_eq!(names.first().map(String::as_str), Some("message_start"), "{}", r.text());
    assert_eq!(names.last().map(String::as_str), Some("message_stop"));
    let payloads = data(&r.text());
    let delta = payloads.iter().find(|d| d["type"] == "message_delta").unwrap();
    assert!(delta["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{delta}");
    let got = s.only_receiver("an-oa-s").1;
    assert_eq!(got.path, "/v1/chat/completions");
    assert_eq!(got.json()["stream_options"], json!({"include_usage": true}));
    // Google caller, OpenAI-only model, plain and streamed.
    let path = "/v1beta/models/t/gpt:generateContent";
    let body =
        json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}], "generationConfig": {"maxOutputTokens": 8}});
    let r = s.post(path, "go-oa", &[("x-goog-api-key", "caller-key")], body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["candidates"][0]["content"]["parts"][0]["text"], "Hello from alpha", "{v}");
    assert_eq!(
        (v["modelVersion"].as_str(), v["candidates"][0]["finishReason"].as_str()),
        (Some("t/gpt"), Some("STOP"))
    );
    assert!(v["usageMetadata"]["promptTokenCount"].as_u64().is_some_and(|n| n > 0), "{v}");
    assert_eq!(s.only_receiver("go-oa").1.json()["max_completion_tokens"], 8);
    let path = "/v1beta/models/t/gemini-stream:streamGenerateContent?alt=sse";
    let r = s.post(path, "an-go-s", &[("x-goog-api-key", "caller-key")], body).await;
    // (the Google caller on a Google model: untranslated, for comparison of shapes)
    assert_eq!(r.status, 200);
    let r = s.anthropic("an-go-s2",
        &[],
        json!({"model": "t/gemini-stream", "max_tokens": 16, "stream": true, "messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    let text: String =
        data(&r.text()).iter().filter_map(|d| d.pointer("/delta/text").and_then(Value::as_str)).collect();
    assert!(text.starts_with("tok0 "), "{}", r.text());
    assert_eq!(
        s.only_receiver("an-go-s2").1.path,
        "/v1beta/models/gamma-t-gemini-stream:streamGenerateContent?alt=sse"
    );
    // A Google caller streaming without alt=sse gets one JSON array, as from Google.
    let path = "/v1beta/models/t/gpt-stream:streamGenerateContent";
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]});
    let r = s.post(path, "go-oa-array", &[("x-goog-api-key", "caller-key")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")));
    let chunks: Vec<Value> = serde_json::from_str(&r.text()).unwrap_or_else(|e| panic!("{e}: {}", r.text()));
    let text: String =
        chunks.iter().filter_map(|c| c.pointer("/candidates/0/content/parts/0/text").and_then(Value::as_str)).collect();
    assert!(text.starts_with("tok0 "), "{}", r.text());
    assert_eq!(chunks.last().and_then(|c| c.pointer("/candidates/0/finishReason")), Some(&json!("STOP")));
}

/// Every request field of OpenRouter's that some provider API lacks (routing, accounting,
/// observability, and the unified `reasoning`, `user`, `prompt_cache_key`, `cache_control`,
/// `image_config`), as a caller of `model` sends them.
fn openrouter_fields(model: &str) -> Value {
    json!({"provider": {"sort": "price"}, "models": [model], "plugins": [], "route": "fallback", "preset": null,
        "session_id": "conv-1", "transforms": ["middle-out"], "usage": {"include": true},
        "debug": {"echo_upstream_body": true}, "trace": {"trace_id": "t-1"},
        "reasoning": {"effort": "low", "max_tokens": 1024}, "user": "user-1", "prompt_cache_key": "pk",
        "cache_control": {"type": "ephemeral"}, "image_config": {"aspect_ratio": "1:1"}})
}

fn merged(mut body: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
    body
}

// Each caller's API sends every OpenRouter field to a model of each API (same API: the body
// passed through; another: translated). The strict mocks refuse any field their real API
// does not have, so each answer being a 200 is the proof that none leaked; the fields a
// provider's own API has a name for arrive under it.
#[tokio::test]
async fn openrouter_fields_never_reach_a_provider_that_refuses_them() {
    let s = stack();
    let goog = [("x-goog-api-key", "caller-key")];
    for (model, provider) in [("t/or-gpt", "alpha"), ("t/or-claude", "beta"), ("t/or-gemini", "gamma")] {
        for stream in [false, true] {
            let chat = json!({"model": model, "max_tokens": 2048, "stream": stream, "messages": [{"role": "user", "content": "Hi"}]});
            let id = format!("or-oa-{model}-{stream}");
            let r = s.openai(&id, &[], merged(chat, openrouter_fields(model))).await;
            assert_eq!(r.status, 200, "{id}: {}", r.text());
            assert_eq!(s.only_receiver(&id).0, provider);
            let messages = json!({"model": model, "max_tokens": 2048, "stream": stream, "messages": [{"role": "user", "content": "Hi"}]});
            let id = format!("or-an-{model}-{stream}");
            let r = s.anthropic(&id, &[], merged(messages, openrouter_fields(model))).await;
            assert_eq!(r.status, 200, "{id}: {}", r.text());
            assert_eq!(s.only_receiver(&id).0, provider);
            let method = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
            let path = format!("/v1beta/models/{model}:{method}");
            let contents = json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]});
            let mut fields = openrouter_fields(model);
            fields.as_object_mut().unwrap().remove("preset");
            let id = format!("or-go-{model}-{stream}");
            let r = s.post(&path, &id, &goog, merged(contents, fields)).await;
            assert_eq!(r.status, 200, "{id}: {}", r.text());
            assert_eq!(s.only_receiver(&id).0, provider);
        }
    }
    // What the fields became where the provider's API has a name for them.
    let sent = |id: &str| s.only_receiver(id).1.json();
    let chat = sent("or-oa-t/or-gpt-false");
    assert_eq!((chat["reasoning_effort"].as_str(), chat["user"].as_str()), (Some("low"), Some("user-1")), "{chat}");
    assert_eq!(chat["prompt_cache_key"], "pk");
    let messages = sent("or-an-t/or-claude-false");
    assert_eq!(messages["metadata"], json!({"user_id": "user-1"}), "{messages}");
    assert_eq!(messages["thinking"], json!({"type": "enabled", "budget_tokens": 1024}));
    assert_eq!(messages["cache_control"], json!({"type": "ephemeral"}));
    let translated = sent("or-oa-t/or-claude-false");
    assert_eq!(translated["metadata"], json!({"user_id": "user-1"}), "{translated}");
    assert_eq!(translated["thinking"]["budget_tokens"], 1024);
    // The Responses API takes `reasoning` less OpenRouter's own members; the legacy completions
    // neither it nor a prompt cache key.
    let oa = [("authorization", "Bearer caller-key")];
    let input = json!({"model": "t/or-gpt", "input": "Hi"});
    let r = s.post("/v1/responses", "or-responses", &oa, merged(input, openrouter_fields("t/or-gpt"))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(sent("or-responses")["reasoning"], json!({"effort": "low"}));
    let prompt = json!({"model": "t/or-gpt", "prompt": "Hi"});
    let r = s.post("/v1/completions", "or-completions", &oa, merged(prompt, openrouter_fields("t/or-gpt"))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(sent("or-completions")["user"], "user-1");
}

#[tokio::test]
async fn errors_and_refusals_come_in_the_callers_shape() {
    let s = stack();
    let r = s
        .openai(
            "oa-err",
            &[("x-mock-behavior", "beta=400")],
            json!({"model": "t/claude-err", "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(v["error"]["message"].is_string() && v.get("type").is_none(), "{v}");
    let r = s
        .openai("oa-n", &[], json!({"model": "t/claude-err", "n": 2, "messages": [{"role": "user", "content": "x"}]}))
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "n");
    assert!(receivers(s, "oa-n").is_empty());
}

#[tokio::test]
async fn a_plan_fails_over_from_an_anthropic_endpoint_to_an_openai_one() {
    let s = stack();
    let body = json!({"model": "t/fo", "max_tokens": 16, "provider": {"sort": "price"}, "messages": [{"role": "user", "content": "Hi"}]});
    let r = s.openai("fo", &[("x-mock-behavior", "beta=529")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "fo"), vec!["beta", "alpha"]);
    assert_eq!(r.header("x-switchyard-attempt-log"), Some("beta:529,alpha:200"));
    let v = r.json();
    assert_eq!(
        (v["provider"].as_str(), v["choices"][0]["message"]["content"].as_str()),
        (Some("alpha"), Some("Hello from alpha"))
    );
    let u = &v["usage"];
    let (p, c) = (u["prompt_tokens"].as_f64().unwrap(), u["completion_tokens"].as_f64().unwrap());
    assert!((u["cost"].as_f64().unwrap() - cost(2.0, p, 0.0, c)).abs() < 1e-12, "alpha's prices: {u}");
    let got = received_in_order(&s.providers, "fo");
    let (beta, alpha) = (&got[0].1, &got[1].1);
    assert_eq!((beta.path.as_str(), beta.header("x-api-key")), ("/v1/messages", Some("key-beta")));
    assert_eq!(
        (alpha.path.as_str(), alpha.header("authorization")),
        ("/v1/chat/completions", Some("Bearer key-alpha"))
    );
    assert_eq!((alpha.header("x-api-key"), alpha.header("anthropic-version")), (None, None));
    assert_eq!(alpha.json()["model"], "alpha-t-fo");
    assert!(alpha.json()["messages"].is_array() && alpha.json().get("max_tokens").is_some());
    // Streamed.
    let body = json!({"model": "t/fo-stream", "stream": true, "provider": {"sort": "price"}, "messages": [{"role": "user", "content": "Hi"}]});
    let r = s.openai("fo-s", &[("x-mock-behavior", "beta=529")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "fo-s"), vec!["beta", "alpha"]);
    let chunks = data(&r.text());
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    assert!(chunks.iter().filter(|c| c.is_object()).all(|c| c["provider"] == "alpha"), "{}", r.text());
    // An Anthropic caller: its own API first, then the OpenAI endpoint translated.
    let body = json!({"model": "t/fo-anthropic", "max_tokens": 16, "stream": true, "provider": {"sort": "price"},
        "messages": [{"role": "user", "content": "Hi"}]});
    let r = s.anthropic("fo-an", &[("x-mock-behavior", "beta=529")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "fo-an"), vec!["beta", "alpha"]);
    assert_eq!(events(&r.text()).last().map(String::as_str), Some("message_stop"), "{}", r.text());
    // A Google caller over all three APIs.
    let path = "/v1beta/models/t/fo-google:generateContent";
    let r = s
        .post(
            path,
            "fo-go",
            &[
                ("x-goog-api-key", "caller-key"),
                ("x-mock-behavior", "gamma=503,beta=529"),
                ("x-switchyard-routing", r#"{"provider": {"sort": "price"}}"#),
            ],
            json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "fo-go"), vec!["gamma", "beta", "alpha"]);
    assert_eq!(r.json()["candidates"][0]["content"]["parts"][0]["text"], "Hello from alpha");
}
