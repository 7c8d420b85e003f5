//! The Responses API (`/v1/responses`) as a caller's API in real Envoy: translated for endpoints
//! of chat completions, Anthropic Messages and generateContent, native only where the endpoint
//! serves it. Plain and streamed answers, a tool call and its result over two turns, structured
//! output, errors and refusals, a failover from an Anthropic endpoint to a chat completions one.
//! The mock providers check what they receive as strictly as the real APIs (`mock/strict.rs`,
//! `mock/responses.rs`), so a translation mistake is a 400 here.

mod common;

use common::{launch, Stack};
use serde_json::{json, Value};
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::mock::received_in_order;

/// alpha is OpenAI (chat completions and Responses), beta only Anthropic, gamma only Google,
/// delta only chat completions (an OpenAI-compatible host).
fn catalog() -> Value {
    let models: [(&str, &[(&str, f64)]); 10] = [
        ("r/claude", &[("beta", 3.0)]),
        ("r/claude-stream", &[("beta", 3.0)]),
        ("r/gemini", &[("gamma", 1.0)]),
        ("r/llama", &[("delta", 2.0)]),
        ("r/gpt", &[("alpha", 2.0)]),
        ("r/tools", &[("beta", 3.0)]),
        ("r/fo", &[("beta", 1.0), ("delta", 2.0)]),
        ("r/fo-stream", &[("beta", 1.0), ("delta", 2.0)]),
        ("r/err", &[("gamma", 1.0)]),
        ("r/hosted", &[("delta", 1.0), ("alpha", 2.0)]),
    ];
    common::one_api_per_provider(&models, |price| json!({"prompt": price, "completion": price * 5.0}))
}

fn stack() -> &'static Stack {
    static STACK: std::sync::OnceLock<Stack> = std::sync::OnceLock::new();
    STACK.get_or_init(|| launch("responses", catalog(), |cfg| cfg.per_try_idle_timeout_ms = 2_000))
}

async fn responses(s: &Stack, id: &str, extra: &[(&str, &str)], body: Value) -> Reply {
    let mut h = vec![("x-test-id", id), ("authorization", "Bearer caller-key")];
    h.extend_from_slice(extra);
    post_json(s.addr, "/v1/responses", &h, &body).await.unwrap_or_else(|e| panic!("{id}: {e}"))
}

/// `(event, data)` of a Responses SSE body.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .filter_map(|e| {
            let kind = e.lines().find_map(|l| l.strip_prefix("event: "))?.to_string();
            let data = e.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((kind, serde_json::from_str(data).unwrap_or(Value::Null)))
        })
        .collect()
}

fn sent(s: &Stack, id: &str) -> Vec<(String, String, Value)> {
    received_in_order(&s.providers, id).into_iter().map(|(p, r)| (p, r.path.clone(), r.json())).collect()
}

#[tokio::test]
async fn a_plain_answer_from_every_api() {
    let s = stack();
    for (model, provider, path) in [
        ("r/claude", "beta", "/v1/messages"),
        ("r/gemini", "gamma", "/v1beta/models/gamma-r-gemini:generateContent"),
        ("r/llama", "delta", "/v1/chat/completions"),
        ("r/gpt", "alpha", "/v1/responses"),
    ] {
        let id = format!("plain-{model}");
        let body = json!({"model": model, "instructions": "Be brief.", "input": "Hello", "max_output_tokens": 64,
            "metadata": {"k": "v"}});
        let r = responses(s, &id, &[], body).await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        let v = r.json();
        assert_eq!((v["object"].as_str(), v["status"].as_str()), (Some("response"), Some("completed")), "{v}");
        assert_eq!((v["model"].as_str(), v["provider"].as_str()), (Some(model), Some(provider)), "{v}");
        assert_eq!(v["output"][0]["content"][0]["text"], format!("Hello from {provider}"), "{v}");
        let u = &v["usage"];
        let expected = (u["input_tokens"].as_f64().unwrap() * 1.0 + u["output_tokens"].as_f64().unwrap() * 5.0)
            * [("beta", 3.0), ("gamma", 1.0), ("delta", 2.0), ("alpha", 2.0)]
                .iter()
                .find(|(p, _)| *p == provider)
                .unwrap()
                .1
            / 1e6;
        assert!((u["cost"].as_f64().unwrap() - expected).abs() < 1e-12, "{u}");
        let got = sent(s, &id);
        assert_eq!((got[0].0.as_str(), got[0].1.as_str()), (provider, path), "{id}");
        if provider == "alpha" {
            // Native: the caller's body, less nothing but the model's id.
            assert_eq!(
                (got[0].2["input"].as_str(), got[0].2["instructions"].as_str()),
                (Some("Hello"), Some("Be brief."))
            );
        } else {
            assert!(r.header("x-switchyard-warning").is_some_and(|w| w.contains("metadata")), "{id}");
        }
    }
}

#[tokio::test]
async fn a_stream_event_by_event_from_anthropic_and_native() {
    let s = stack();
    for (model, provider) in [("r/claude-stream", "beta"), ("r/gpt", "alpha")] {
        let id = format!("stream-{model}");
        let r = responses(s, &id, &[], json!({"model": model, "input": "Hello", "stream": true})).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let evs = events(&r.text());
        let kinds: Vec<&str> = evs.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds.first(), Some(&"response.created"), "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"response.completed"), "{kinds:?}");
        for k in [
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.done",
            "response.output_item.done",
        ] {
            assert!(kinds.contains(&k), "{model}: no {k}: {kinds:?}");
        }
        let text: String = evs
            .iter()
            .filter(|(k, _)| k == "response.output_text.delta")
            .map(|(_, v)| v["delta"].as_str().unwrap_or("").to_string())
            .collect();
        assert!(text.starts_with("tok0 tok1 "), "{text}");
        for (i, (_, v)) in evs.iter().enumerate() {
            assert_eq!(v["sequence_number"].as_u64(), Some(i as u64), "{model}");
        }
        let done = &evs.last().unwrap().1["response"];
        assert_eq!((done["model"].as_str(), done["provider"].as_str()), (Some(model), Some(provider)), "{done}");
        assert!(done["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{done}");
    }
}

#[tokio::test]
async fn a_tool_call_and_its_result_over_two_turns() {
    let s = stack();
    let tools = json!([{"type": "function", "name": "get_weather", "description": "The weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let first = responses(
        s,
        "tool-1",
        &[("x-mock-behavior", "beta=tool")],
        json!({"model": "r/tools",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}],
        "tools": tools, "tool_choice": "required"}),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.text());
    let v = first.json();
    let call = v["output"].as_array().unwrap().iter().find(|i| i["type"] == "function_call").cloned().unwrap();
    assert_eq!(call["name"], "get_weather", "{v}");
    assert_eq!(serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(), json!({"city": "Paris"}));
    let second = responses(
        s,
        "tool-2",
        &[],
        json!({"model": "r/tools", "tools": tools, "input": [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call["call_id"], "name": "get_weather", "arguments": call["arguments"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]}),
    )
    .await;
    assert_eq!(second.status, 200, "{}", second.text());
    assert_eq!(second.json()["output"][0]["content"][0]["text"], "Hello from beta");
    let got = &sent(s, "tool-2")[0].2;
    assert_eq!(got["messages"][1]["content"][0]["type"], "tool_use", "{got}");
    assert_eq!(got["messages"][2]["content"][0]["tool_use_id"], call["call_id"], "{got}");
}

#[tokio::test]
async fn structured_output_reaches_google_as_a_json_schema() {
    let s = stack();
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    let r = responses(
        s,
        "schema",
        &[],
        json!({"model": "r/gemini", "input": "Paris?",
        "text": {"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": true}}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = &sent(s, "schema")[0].2;
    assert_eq!(got["generationConfig"]["responseMimeType"], "application/json", "{got}");
    assert_eq!(got["generationConfig"]["responseJsonSchema"], schema, "{got}");
}

#[tokio::test]
async fn errors_and_refusals_in_openais_shape() {
    let s = stack();
    let r = responses(s, "err", &[("x-mock-behavior", "gamma=400")], json!({"model": "r/err", "input": "x"})).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert!(v["error"]["message"].is_string() && v["error"]["type"] == "invalid_request_error", "{v}");
    for (body, param) in [
        (json!({"model": "r/err", "input": "x", "previous_response_id": "resp_1"}), "previous_response_id"),
        (json!({"model": "r/err", "input": "x", "tools": [{"type": "web_search"}]}), "tools[0].type"),
    ] {
        let r = responses(s, "refused", &[], body).await;
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(r.json()["error"]["param"], param, "{}", r.text());
    }
    // A hosted tool leaves the chat-only host out; the native endpoint serves it.
    let r = responses(s, "hosted", &[], json!({"model": "r/hosted", "input": "x", "tools": [{"type": "web_search"}]}))
        .await;
    assert_eq!((r.status, r.json()["provider"].as_str()), (200, Some("alpha")), "{}", r.text());
    assert_eq!(sent(s, "hosted")[0].2["tools"], json!([{"type": "web_search"}]));
}

#[tokio::test]
async fn an_anthropic_endpoint_fails_over_to_a_chat_completions_one() {
    let s = stack();
    for stream in [false, true] {
        let id = format!("fo-{stream}");
        // One model each (a 503 cools beta down for the model's next request); the cheapest
        // first, not a price-weighted draw.
        let model = if stream { "r/fo-stream" } else { "r/fo" };
        let body = json!({"model": model, "input": "Hi", "stream": stream, "provider": {"sort": "price"}});
        let r = responses(s, &id, &[("x-mock-behavior", "beta=503")], body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let got = sent(s, &id);
        let paths: Vec<(&str, &str)> = got.iter().map(|(p, path, _)| (p.as_str(), path.as_str())).collect();
        assert_eq!(paths, [("beta", "/v1/messages"), ("delta", "/v1/chat/completions")], "{id}");
        if stream {
            let evs = events(&r.text());
            assert_eq!(evs.last().map(|(k, _)| k.as_str()), Some("response.completed"), "{}", r.text());
            assert_eq!(evs.last().unwrap().1["response"]["provider"], "delta");
        } else {
            assert_eq!(r.json()["provider"], "delta");
            assert_eq!(r.json()["output"][0]["content"][0]["text"], "Hello from delta");
        }
    }
}

/// `reasoning` on a Claude and a Gemini model: the effort becomes a thinking budget (0.8 of
/// `max_output_tokens` for `high`), the temperature Anthropic refuses beside thinking is dropped
/// and named, and the model's thinking (naming the budget the mock received) comes back as a
/// `reasoning` item before the message, whole and streamed as summary events.
#[tokio::test]
async fn reasoning_becomes_a_thinking_budget_and_comes_back_as_a_summary() {
    let s = stack();
    for (model, provider) in [("r/claude", "beta"), ("r/gemini", "gamma")] {
        for stream in [false, true] {
            let id = format!("reasoning-{model}-{stream}");
            let body = json!({"model": model, "input": "Why?", "max_output_tokens": 10000, "temperature": 0.5,
                "stream": stream, "reasoning": {"effort": "high", "summary": "auto"}});
            let r = responses(s, &id, &[], body).await;
            assert_eq!(r.status, 200, "{id}: {}", r.text());
            let got = &sent(s, &id)[0].2;
            let warning = r.header("x-switchyard-warning").unwrap_or("").to_string();
            if provider == "beta" {
                assert_eq!(got["thinking"], json!({"type": "enabled", "budget_tokens": 8000}), "{got}");
                assert_eq!(got["max_tokens"], 10000);
                assert!(got.get("temperature").is_none(), "{got}");
                assert!(warning.contains("temperature"), "{id}: {warning}");
            } else {
                let config = &got["generationConfig"];
                assert_eq!(config["thinkingConfig"], json!({"thinkingBudget": 8000, "includeThoughts": true}));
                assert_eq!(config["temperature"], 0.5, "Gemini takes both");
                assert!(!warning.contains("reasoning"), "{id}: {warning}");
            }
            let thought = "Thinking within a budget of 8000 tokens.";
            let response = if stream {
                let evs = events(&r.text());
                let kinds: Vec<&str> = evs.iter().map(|(k, _)| k.as_str()).collect();
                let at =
                    |k: &str| kinds.iter().position(|x| *x == k).unwrap_or_else(|| panic!("{id}: no {k}: {kinds:?}"));
                assert!(at("response.reasoning_summary_part.added") < at("response.reasoning_summary_text.delta"));
                assert!(at("response.reasoning_summary_part.done") < at("response.output_text.delta"), "{kinds:?}");
                let summary: String = evs
                    .iter()
                    .filter(|(k, _)| k == "response.reasoning_summary_text.delta")
                    .map(|(_, v)| v["delta"].as_str().unwrap_or("").to_string())
                    .collect();
                assert_eq!(summary, thought, "{id}");
                assert_eq!(evs[at("response.reasoning_summary_text.done")].1["text"], thought);
                for (i, (_, v)) in evs.iter().enumerate() {
                    assert_eq!(v["sequence_number"].as_u64(), Some(i as u64), "{id}");
                }
                evs.last().unwrap().1["response"].clone()
            } else {
                r.json()
            };
            let output = &response["output"];
            assert_eq!(output[0]["type"], "reasoning", "{id}: {response}");
            assert!(output[0]["id"].as_str().is_some_and(|i| i.starts_with("rs_")), "{output}");
            assert_eq!(output[0]["summary"], json!([{"type": "summary_text", "text": thought}]), "{id}");
            assert_eq!(output[1]["type"], "message", "{id}");
            if provider == "gamma" {
                assert_eq!(response["usage"]["output_tokens_details"]["reasoning_tokens"], 7, "{id}: {response}");
            }
        }
    }
    // A forced tool choice: Anthropic gets no thinking (the call is what was asked); the effort
    // is named dropped and the strict mock, which refuses the two together, answers.
    let tools = json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]);
    let r = responses(
        s,
        "reasoning-forced",
        &[("x-mock-behavior", "beta=tool")],
        json!({"model": "r/claude", "input": "Weather?", "tools": tools, "tool_choice": "required",
            "reasoning": {"effort": "high"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(sent(s, "reasoning-forced")[0].2.get("thinking").is_none());
    assert!(r.header("x-switchyard-warning").is_some_and(|w| w.contains("reasoning.effort")), "{:?}", r.headers);
}
