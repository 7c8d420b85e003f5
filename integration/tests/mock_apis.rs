//! The mock providers speak each API (OpenAI, Anthropic Messages, Google Gemini) in its own
//! shapes, and every fault of `x-mock-behavior` answers in the shape of the request's API. These
//! tests talk to a mock directly (no Envoy): the filter's tests rely on these shapes.

use serde_json::{json, Value};
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::mock::{Api, Behavior, MockProvider};

async fn mock() -> MockProvider {
    MockProvider::start("alpha", 0, Behavior::default()).await.expect("mock starts")
}

const ANTHROPIC: &[(&str, &str)] = &[("x-api-key", "key-alpha"), ("anthropic-version", "2023-06-01")];

fn messages(stream: bool) -> Value {
    json!({"model": "claude-x", "max_tokens": 64, "stream": stream, "messages": [{"role": "user", "content": "Hi"}]})
}

fn gemini() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]})
}

/// `(event name, data)` of each SSE event (OpenAI's `[DONE]` as a string); events split on a blank line (`\n\n` or `\r\n\r\n`).
fn events(r: &Reply) -> Vec<(String, Value)> {
    let text = r.text().replace("\r\n", "\n");
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ").filter(|d| *d == "[DONE]") {
                    data = json!(d);
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap_or_else(|err| panic!("event data is not JSON ({err}): {d}"));
                }
            }
            (name, data)
        })
        .collect()
}

#[test]
fn the_api_is_told_by_the_path() {
    assert_eq!(Api::of_path("/v1/chat/completions"), Api::OpenAi);
    assert_eq!(Api::of_path("/v1/responses"), Api::OpenAi);
    assert_eq!(Api::of_path("/v1/messages"), Api::Anthropic);
    assert_eq!(Api::of_path("/v1beta/models/gemini-2.5-flash:generateContent"), Api::Google);
    assert_eq!(Api::of_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent"), Api::Google);
    assert_eq!(Api::of_path("/v1/models/gemini-2.5-flash:generateContent"), Api::Google);
    assert_eq!(Api::of_path("/v1beta/models/gemini-2.5-flash:countTokens"), Api::OpenAi);
    assert_eq!(Api::of_path("/v1/models"), Api::OpenAi);
}

#[tokio::test]
async fn anthropic_message_and_the_key_that_arrived() {
    let m = mock().await;
    let r = post_json(m.addr, "/v1/messages", ANTHROPIC, &messages(false)).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-mock-provider"), Some("alpha"));
    assert!(r.header("request-id").is_some());
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "claude-x");
    assert_eq!(v["content"], json!([{"type": "text", "text": "Hello from alpha"}]));
    assert_eq!(v["stop_reason"], "end_turn");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(v["usage"]["output_tokens"], 4);
    let got = m.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].api, Api::Anthropic);
    assert_eq!(got[0].credential(), Some("key-alpha"));
    assert_eq!(got[0].header("anthropic-version"), Some("2023-06-01"));
}

#[tokio::test]
async fn anthropic_turns_away_a_request_without_key_or_version() {
    let m = mock().await;
    let r = post_json(m.addr, "/v1/messages", &[("anthropic-version", "2023-06-01")], &messages(false)).await.unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    let r = post_json(m.addr, "/v1/messages", &[("x-api-key", "k")], &messages(false)).await.unwrap();
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    // A missing credential is refused even when a fault was asked for.
    let r = post_json(m.addr, "/v1/messages", &[("x-mock-behavior", "alpha=429/7")], &messages(false)).await.unwrap();
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn anthropic_stream_is_the_documented_event_sequence() {
    let m = mock().await;
    let mut h = ANTHROPIC.to_vec();
    h.push(("x-mock-behavior", "alpha=chunks4"));
    let r = post_json(m.addr, "/v1/messages", &h, &messages(true)).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let ev = events(&r);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &ev {
        assert_eq!(data["type"], name.as_str(), "an event's name is its data's type");
    }
    assert_eq!(ev[0].1["message"]["model"], "claude-x");
    assert!(ev[0].1["message"]["usage"]["input_tokens"].as_u64().unwrap() > 0);
    let text: String = ev.iter().filter_map(|(_, d)| d["delta"]["text"].as_str()).collect();
    assert_eq!(text, "tok0 tok1 tok2 tok3 ");
    assert_eq!(ev[8].1["usage"]["output_tokens"], 4);
    assert_eq!(ev[8].1["delta"]["stop_reason"], "end_turn");
}

#[tokio::test]
async fn anthropic_faults_in_anthropic_shapes() {
    let m = mock().await;
    let with = |b: &'static str| {
        let mut h = ANTHROPIC.to_vec();
        h.push(("x-mock-behavior", b));
        h
    };
    for (fault, status, kind) in [
        ("alpha=429/7", 429, "rate_limit_error"),
        ("alpha=529", 529, "overloaded_error"),
        ("alpha=500", 500, "api_error"),
        ("alpha=503", 503, "api_error"),
        ("alpha=400", 400, "invalid_request_error"),
    ] {
        let r = post_json(m.addr, "/v1/messages", &with(fault), &messages(false)).await.unwrap();
        assert_eq!(r.status, status, "{fault}");
        assert_eq!(r.json()["type"], "error", "{fault}");
        assert_eq!(r.json()["error"]["type"], kind, "{fault}");
        assert!(r.json()["error"]["message"].as_str().unwrap().starts_with("alpha: "));
        assert_eq!(r.header("retry-after"), (status == 429).then_some("7"), "{fault}");
    }
    // Cut after two deltas: no content_block_stop, message_delta or message_stop.
    let r = post_json(m.addr, "/v1/messages", &with("alpha=cut2"), &messages(true)).await.unwrap();
    let names: Vec<String> = events(&r).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta"]);
    let r = post_json(m.addr, "/v1/messages", &with("alpha=abort1"), &messages(true)).await.unwrap();
    assert!(r.body_error.is_some(), "aborted mid-body");
    let r = post_json(m.addr, "/v1/messages", &with("alpha=garbage"), &messages(false)).await.unwrap();
    assert_eq!(r.status, 200);
    assert!(serde_json::from_slice::<Value>(&r.body).is_err());
    let r = post_json(m.addr, "/v1/messages", &with("alpha=503+html"), &messages(false)).await.unwrap();
    assert_eq!((r.status, r.header("content-type")), (503, Some("text/html")));
    let r = post_json(m.addr, "/v1/messages", &with("alpha=tool"), &messages(false)).await.unwrap();
    assert_eq!(r.json()["stop_reason"], "tool_use");
    assert_eq!(r.json()["content"][0]["input"], json!({"city": "Paris"}));
    let r = post_json(m.addr, "/v1/messages", &with("alpha=badtool"), &messages(true)).await.unwrap();
    let partial: String = events(&r).iter().filter_map(|(_, d)| d["delta"]["partial_json"].as_str()).collect();
    assert!(serde_json::from_str::<Value>(&partial).is_err(), "malformed tool input: {partial}");
    let r = post_json(m.addr, "/v1/messages", &with("alpha=cached3"), &messages(false)).await.unwrap();
    assert_eq!(r.json()["usage"]["cache_read_input_tokens"], 3);
}

#[tokio::test]
async fn google_generate_content_and_the_key_that_arrived() {
    let m = mock().await;
    let path = "/v1beta/models/gemini-x:generateContent";
    let r = post_json(m.addr, path, &[("x-goog-api-key", "key-alpha")], &gemini()).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["candidates"][0]["content"], json!({"role": "model", "parts": [{"text": "Hello from alpha"}]}));
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert_eq!(v["candidates"][0]["index"], 0);
    assert_eq!(v["modelVersion"], "gemini-x");
    let u = &v["usageMetadata"];
    assert_eq!(u["candidatesTokenCount"], 4);
    assert_eq!(u["totalTokenCount"].as_u64().unwrap(), u["promptTokenCount"].as_u64().unwrap() + 4);
    // The key as a query parameter is recorded too.
    let r = post_json(m.addr, "/v1beta/models/gemini-x:generateContent?key=query-key", &[], &gemini()).await.unwrap();
    assert_eq!(r.status, 200);
    let got = m.received();
    assert_eq!(got[0].api, Api::Google);
    assert_eq!(got[0].credential(), Some("key-alpha"));
    assert_eq!(got[1].credential(), Some("query-key"));
    // No key: Google's 403.
    let r = post_json(m.addr, path, &[], &gemini()).await.unwrap();
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["status"], "PERMISSION_DENIED");
    assert_eq!(r.json()["error"]["code"], 403);
}

#[tokio::test]
async fn google_streams_sse_chunks_with_cumulative_usage() {
    let m = mock().await;
    let h = [("x-goog-api-key", "k"), ("x-mock-behavior", "alpha=chunks3")];
    let r = post_json(m.addr, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", &h, &gemini()).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(r.text().contains("\r\n\r\n"), "Google separates events with CRLF CRLF");
    let ev = events(&r);
    assert_eq!(ev.len(), 4);
    let text: String =
        ev.iter().filter_map(|(_, d)| d["candidates"][0]["content"]["parts"][0]["text"].as_str()).collect();
    assert_eq!(text, "tok0 tok1 tok2 ");
    for (i, (_, d)) in ev.iter().enumerate() {
        assert_eq!(d["modelVersion"], "gemini-x");
        assert_eq!(d["usageMetadata"]["candidatesTokenCount"], (i as u64 + 1).min(3));
        assert_eq!(d["candidates"][0]["finishReason"].as_str(), (i == 3).then_some("STOP"));
    }
    // Without alt=sse: one JSON array of the same responses.
    let r = post_json(m.addr, "/v1beta/models/gemini-x:streamGenerateContent", &h, &gemini()).await.unwrap();
    let arr = r.json();
    assert_eq!(arr.as_array().map(Vec::len), Some(4), "{}", r.text());
    assert_eq!(arr[3]["candidates"][0]["finishReason"], "STOP");
    // Cut after one chunk: no finishReason ever arrives.
    let h = [("x-goog-api-key", "k"), ("x-mock-behavior", "alpha=cut1")];
    let r = post_json(m.addr, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", &h, &gemini()).await.unwrap();
    let ev = events(&r);
    assert_eq!(ev.len(), 1);
    assert!(ev[0].1["candidates"][0].get("finishReason").is_none());
}

#[tokio::test]
async fn google_faults_in_google_shapes() {
    let m = mock().await;
    let path = "/v1beta/models/gemini-x:generateContent";
    for (fault, status, kind) in [
        ("alpha=429/7", 429, "RESOURCE_EXHAUSTED"),
        ("alpha=503", 503, "UNAVAILABLE"),
        ("alpha=500", 500, "INTERNAL"),
        ("alpha=400", 400, "INVALID_ARGUMENT"),
    ] {
        let r =
            post_json(m.addr, path, &[("x-goog-api-key", "k"), ("x-mock-behavior", fault)], &gemini()).await.unwrap();
        assert_eq!(r.status, status, "{fault}");
        let e = &r.json()["error"];
        assert_eq!((e["code"].as_u64(), e["status"].as_str()), (Some(status as u64), Some(kind)), "{fault}");
        if status == 429 {
            // As Gemini: the delay only in the body.
            assert_eq!(r.header("retry-after"), None);
            assert_eq!(e["details"][0]["@type"], "type.googleapis.com/google.rpc.RetryInfo");
            assert_eq!(e["details"][0]["retryDelay"], "7s");
        }
    }
    let h = [("x-goog-api-key", "k"), ("x-mock-behavior", "alpha=cap0")];
    let r = post_json(m.addr, path, &h, &gemini()).await.unwrap();
    assert_eq!((r.status, r.json()["error"]["status"].as_str()), (429, Some("RESOURCE_EXHAUSTED")));
    let h = [("x-goog-api-key", "k"), ("x-mock-behavior", "alpha=tool")];
    let r = post_json(m.addr, path, &h, &gemini()).await.unwrap();
    assert_eq!(r.json()["candidates"][0]["content"]["parts"][0]["functionCall"]["args"], json!({"city": "Paris"}));
    let h = [("x-goog-api-key", "k"), ("x-mock-behavior", "alpha=cached2")];
    let r = post_json(m.addr, path, &h, &gemini()).await.unwrap();
    assert_eq!(r.json()["usageMetadata"]["cachedContentTokenCount"], 2);
}

const OPENAI: &[(&str, &str)] = &[("authorization", "Bearer key-alpha")];

#[tokio::test]
async fn openai_answers_and_streams_its_usage_only_when_asked() {
    let m = mock().await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    let r = post_json(m.addr, "/v1/chat/completions", OPENAI, &body).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "Hello from alpha");
    let with = |b: &'static str| [OPENAI[0], ("x-mock-behavior", b)];
    let r = post_json(m.addr, "/v1/chat/completions", &with("alpha=429/3"), &body).await.unwrap();
    assert_eq!((r.status, r.header("retry-after")), (429, Some("3")));
    assert_eq!(r.json()["error"]["type"], "provider_error");
    // A stream ends with its finish reason and [DONE]; no usage unless asked.
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let r = post_json(m.addr, "/v1/chat/completions", &with("alpha=chunks2"), &sbody).await.unwrap();
    let ev = events(&r);
    assert_eq!(ev.len(), 4, "two content chunks, the finish chunk and [DONE]: {}", r.text());
    assert!(!r.text().contains("usage"), "usage only when asked: {}", r.text());
    assert_eq!(ev[2].1["choices"][0]["finish_reason"], "stop");
    assert!(r.text().ends_with("data: [DONE]\n\n"));
    // Asked: every chunk says `usage: null` but the last, which has no choices and only the usage.
    sbody["stream_options"] = json!({"include_usage": true});
    let r = post_json(m.addr, "/v1/chat/completions", &with("alpha=chunks2"), &sbody).await.unwrap();
    let ev = events(&r);
    assert_eq!(ev.len(), 5, "{}", r.text());
    for (_, chunk) in &ev[..3] {
        assert!(chunk["usage"].is_null() && chunk["choices"][0].is_object(), "{chunk}");
    }
    assert_eq!(ev[3].1["choices"], json!([]));
    assert_eq!(ev[3].1["usage"]["completion_tokens"], 3);
    assert_eq!(m.received()[0].api, Api::OpenAi);
}

#[tokio::test]
async fn each_api_refuses_a_missing_key_and_undocumented_fields_as_the_real_one_does() {
    let m = mock().await;
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    // OpenAI: a key in `authorization: Bearer` (or the api-key header of compatible hosts).
    for (h, status) in [
        (vec![], 401),
        (vec![("authorization", "Bearer ")], 401),
        (vec![("authorization", "Basic a2V5")], 401),
        (vec![("api-key", "k")], 200),
        (vec![("x-api-key", "k")], 200),
    ] {
        let r = post_json(m.addr, "/v1/chat/completions", &h, &chat).await.unwrap();
        assert_eq!(r.status, status, "{h:?}: {}", r.text());
        if status == 401 {
            assert_eq!(r.json()["error"]["type"], "invalid_request_error");
        }
    }
    let mut odd = chat.clone();
    odd["provider"] = json!({"sort": "price"});
    let r = post_json(m.addr, "/v1/chat/completions", OPENAI, &odd).await.unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["message"], "Unrecognized request argument supplied: provider");
    let mut unstreamed = chat.clone();
    unstreamed["stream_options"] = json!({"include_usage": true});
    let r = post_json(m.addr, "/v1/chat/completions", OPENAI, &unstreamed).await.unwrap();
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("stream_options")));
    let responses = json!({"model": "m", "input": "Hi", "stream": true, "stream_options": {"include_usage": true}});
    let r = post_json(m.addr, "/v1/responses", OPENAI, &responses).await.unwrap();
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("unknown_parameter")));
    let r = post_json(m.addr, "/v1/completions", OPENAI, &json!({"model": "m", "messages": []})).await.unwrap();
    assert_eq!(r.status, 400, "completions take a prompt, not messages");
    // Anthropic: the key only in x-api-key (a bearer API key is refused), max_tokens required.
    let bearer = [("authorization", "Bearer key-alpha"), ("anthropic-version", "2023-06-01")];
    let r = post_json(m.addr, "/v1/messages", &bearer, &messages(false)).await.unwrap();
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (401, Some("authentication_error")));
    let mut no_max = messages(false);
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let r = post_json(m.addr, "/v1/messages", ANTHROPIC, &no_max).await.unwrap();
    assert_eq!((r.status, r.json()["error"]["message"].as_str()), (400, Some("max_tokens: Field required")));
    let mut extra = messages(false);
    extra["provider"] = json!({});
    let r = post_json(m.addr, "/v1/messages", ANTHROPIC, &extra).await.unwrap();
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (400, Some("invalid_request_error")));
    // Google: unknown names are INVALID_ARGUMENT; both spellings of a known one pass.
    let path = "/v1beta/models/gemini-x:generateContent";
    let key = [("x-goog-api-key", "k")];
    let mut g = gemini();
    g["generation_config"] = json!({"maxOutputTokens": 8});
    g["systemInstruction"] = json!({"parts": [{"text": "be brief"}]});
    assert_eq!(post_json(m.addr, path, &key, &g).await.unwrap().status, 200);
    g["stream"] = json!(true);
    let r = post_json(m.addr, path, &key, &g).await.unwrap();
    assert_eq!((r.status, r.json()["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")));
    // Other paths (the mock also plays non-LLM services) are not checked.
    let r = post_json(m.addr, "/generate", &[], &json!({"anything": 1})).await.unwrap();
    assert_eq!(r.status, 200);
}

/// OpenRouter's request fields: no provider's real API takes any of them.
const OPENROUTER_FIELDS: &[&str] = &[
    "provider",
    "models",
    "plugins",
    "route",
    "preset",
    "session_id",
    "transforms",
    "usage",
    "debug",
    "trace",
    "image_config",
];

// Each API's strict mock refuses every OpenRouter field with the real API's own 400, and takes
// each API's own fields that the filter maps them onto; an OpenAI-compatible host (`compat`)
// takes the sampling fields OpenAI lacks, OpenAI itself does not.
#[tokio::test]
async fn each_api_refuses_openrouters_fields_in_its_own_words() {
    let m = mock().await;
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    let with = |body: &Value, field: &str| {
        let mut b = body.clone();
        b[field] = json!({});
        b
    };
    let (path, key) = ("/v1beta/models/gemini-x:generateContent", [("x-goog-api-key", "k")]);
    for f in OPENROUTER_FIELDS.iter().chain(&["reasoning"]) {
        let r = post_json(m.addr, "/v1/chat/completions", OPENAI, &with(&chat, f)).await.unwrap();
        let e = &r.json()["error"];
        assert_eq!(r.status, 400, "{f}: {}", r.text());
        assert_eq!(e["message"].as_str(), Some(format!("Unrecognized request argument supplied: {f}").as_str()));
        assert_eq!((e["type"].as_str(), e["param"].as_str()), (Some("invalid_request_error"), Some(*f)));
        let r = post_json(m.addr, "/v1/messages", ANTHROPIC, &with(&messages(false), f)).await.unwrap();
        assert_eq!(r.status, 400, "{f}: {}", r.text());
        assert_eq!(r.json()["error"]["type"], "invalid_request_error");
        assert_eq!(r.json()["error"]["message"], format!("{f}: Extra inputs are not permitted"));
        let r = post_json(m.addr, path, &key, &with(&gemini(), f)).await.unwrap();
        assert_eq!((r.status, r.json()["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")), "{f}");
        let want = format!("Invalid JSON payload received. Unknown name \"{f}\": Cannot find field.");
        assert_eq!(r.json()["error"]["message"], want);
    }
    // Fields only some APIs have: `user`, `prompt_cache_key` (OpenAI's), `cache_control`
    // (Anthropic's automatic caching).
    for (f, openai, anthropic, google) in
        [("user", 200, 400, 400), ("prompt_cache_key", 200, 400, 400), ("cache_control", 400, 200, 400)]
    {
        let value = if f == "cache_control" { json!({"type": "ephemeral"}) } else { json!("u") };
        let set = |body: &Value| {
            let mut b = body.clone();
            b[f] = value.clone();
            b
        };
        let r = post_json(m.addr, "/v1/chat/completions", OPENAI, &set(&chat)).await.unwrap();
        assert_eq!(r.status, openai, "{f}: {}", r.text());
        let r = post_json(m.addr, "/v1/messages", ANTHROPIC, &set(&messages(false))).await.unwrap();
        assert_eq!(r.status, anthropic, "{f}: {}", r.text());
        assert_eq!(post_json(m.addr, path, &key, &set(&gemini())).await.unwrap().status, google, "{f}");
    }
    // The fields the filter maps OpenRouter's onto pass.
    let mut mapped = chat.clone();
    mapped["reasoning_effort"] = json!("low");
    assert_eq!(post_json(m.addr, "/v1/chat/completions", OPENAI, &mapped).await.unwrap().status, 200);
    let mut mapped = messages(false);
    mapped["max_tokens"] = json!(4096);
    mapped["metadata"] = json!({"user_id": "u"});
    mapped["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    assert_eq!(post_json(m.addr, "/v1/messages", ANTHROPIC, &mapped).await.unwrap().status, 200);
    // OpenAI refuses `top_k`; an OpenAI-compatible host takes it (not on the Responses API).
    let mut sampled = chat.clone();
    sampled["top_k"] = json!(40);
    let r = post_json(m.addr, "/v1/chat/completions", OPENAI, &sampled).await.unwrap();
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("top_k")));
    sampled["min_p"] = json!(0.1);
    sampled["repetition_penalty"] = json!(1.1);
    let compat: Vec<(&str, &str)> = OPENAI.iter().copied().chain([("x-mock-behavior", "alpha=compat")]).collect();
    assert_eq!(post_json(m.addr, "/v1/chat/completions", &compat, &sampled).await.unwrap().status, 200);
    let responses = json!({"model": "m", "input": "Hi", "top_k": 40});
    assert_eq!(post_json(m.addr, "/v1/responses", &compat, &responses).await.unwrap().status, 400);
    assert_eq!(post_json(m.addr, "/v1/chat/completions", &compat, &with(&chat, "usage")).await.unwrap().status, 400);
}

#[tokio::test]
async fn a_provider_overloaded_mid_stream_sends_its_apis_error_event() {
    let m = mock().await;
    let mut h = ANTHROPIC.to_vec();
    h.push(("x-mock-behavior", "alpha=sserror1"));
    let r = post_json(m.addr, "/v1/messages", &h, &messages(true)).await.unwrap();
    assert_eq!(r.status, 200);
    let ev = events(&r);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["message_start", "content_block_start", "ping", "content_block_delta", "error"]);
    assert_eq!(ev[4].1["error"]["type"], "overloaded_error");

    let h = [("x-goog-api-key", "k"), ("x-mock-behavior", "alpha=sserror1")];
    let r = post_json(m.addr, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", &h, &gemini()).await.unwrap();
    let ev = events(&r);
    assert_eq!(ev.len(), 2);
    assert_eq!(ev[1].1["error"]["status"], "UNAVAILABLE");
    let r = post_json(m.addr, "/v1beta/models/gemini-x:streamGenerateContent", &h, &gemini()).await.unwrap();
    assert_eq!(r.json()[1]["error"]["code"], 503, "{}", r.text());

    let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "Hi"}]});
    let h = [OPENAI[0], ("x-mock-behavior", "alpha=sserror2")];
    let r = post_json(m.addr, "/v1/chat/completions", &h, &body).await.unwrap();
    let ev = events(&r);
    assert_eq!(ev.len(), 3, "{}", r.text());
    assert_eq!(ev[2].1["error"]["type"], "server_error");
    assert!(!r.text().contains("[DONE]"));
}

/// As the Messages API takes it today (Claude Code 2.1 sends one after its first user turn): a
/// `role: system` message of text right after a user turn; anywhere else it is refused.
#[test]
fn anthropic_takes_a_system_message_only_right_after_a_user_turn() {
    use switchyard_integration::mock::strict::anthropic;
    let body = |messages: Value| json!({"model": "claude-x", "max_tokens": 64, "messages": messages});
    let user = json!({"role": "user", "content": "Hi"});
    let system = json!({"role": "system", "content": "Agents: Explore, Plan."});
    let assistant = json!({"role": "assistant", "content": "Hello"});
    assert_eq!(anthropic(&body(json!([user, system, assistant]))), None);
    let blocks =
        json!({"role": "system", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]});
    assert_eq!(anthropic(&body(json!([user, blocks]))), None);
    let first = anthropic(&body(json!([system, user]))).expect("a system message first is refused");
    assert!(first.starts_with("messages.0"), "{first}");
    let after_assistant = anthropic(&body(json!([user, assistant, system]))).expect("after an assistant turn");
    assert!(after_assistant.starts_with("messages.2"), "{after_assistant}");
    let image =
        json!({"role": "system", "content": [{"type": "image", "source": {"type": "url", "url": "https://x"}}]});
    assert!(anthropic(&body(json!([user, image]))).is_some(), "a system message takes only text");
    let other = anthropic(&body(json!([user, {"role": "developer", "content": "x"}]))).expect("another role");
    assert!(other.contains("messages.1.role"), "{other}");
}

// The Responses API as OpenAI serves it: a `response` object or its events with sequence
// numbers, and OpenAI's refusals of what it does not take (an undocumented field, a function
// call output without its call, a chat-shaped function tool).
#[tokio::test]
async fn responses_answers_in_its_shape_and_refuses_what_openai_refuses() {
    let m = mock().await;
    let ok = json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]});
    let r = post_json(m.addr, "/v1/responses", OPENAI, &ok).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["object"].as_str(), v["output"][0]["content"][0]["text"].as_str()),
        (Some("response"), Some("Hello from alpha"))
    );
    assert!(v["usage"]["input_tokens"].as_u64().is_some(), "{v}");
    let mut streamed = ok.clone();
    streamed["stream"] = json!(true);
    let r = post_json(m.addr, "/v1/responses", OPENAI, &streamed).await.unwrap();
    let kinds: Vec<String> = r.text().lines().filter_map(|l| l.strip_prefix("event: ")).map(str::to_string).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("response.created"));
    assert_eq!(kinds.last().map(String::as_str), Some("response.completed"));
    for (field, value, expect) in [
        ("provider", json!({"sort": "price"}), "Unrecognized request argument supplied: provider"),
        ("input", json!([{"type": "function_call_output", "call_id": "c", "output": "x"}]), "No tool call found"),
        ("tools", json!([{"type": "function", "function": {"name": "f"}}]), "tools[0].name"),
        ("text", json!({"format": {"type": "json_schema"}}), "text.format"),
    ] {
        let mut bad = ok.clone();
        bad[field] = value;
        let r = post_json(m.addr, "/v1/responses", OPENAI, &bad).await.unwrap();
        assert_eq!(r.status, 400, "{field}: {}", r.text());
        assert!(r.json()["error"]["message"].as_str().unwrap_or("").contains(expect), "{field}: {}", r.text());
    }
}

/// Extended thinking as Anthropic answers it: a signed `thinking` block first (streamed as
/// `thinking_delta`s and a `signature_delta`) when the request asks, naming the budget it got;
/// refused with what thinking cannot take, in Anthropic's words. Gemini's thoughts likewise.
#[tokio::test]
async fn the_mocks_think_when_asked_and_refuse_what_thinking_refuses() {
    let m = mock().await;
    let mut ask = messages(false);
    ask["max_tokens"] = json!(4096);
    ask["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
    let r = post_json(m.addr, "/v1/messages", ANTHROPIC, &ask).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let content = &r.json()["content"];
    assert_eq!(content[0]["type"], "thinking");
    assert_eq!(content[0]["thinking"], "Thinking within a budget of 2048 tokens.");
    assert!(content[0]["signature"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(content[1], json!({"type": "text", "text": "Hello from alpha"}));
    // Without `thinking`: no thinking block.
    let r = post_json(m.addr, "/v1/messages", ANTHROPIC, &messages(false)).await.unwrap();
    assert_eq!(r.json()["content"][0]["type"], "text");
    // Streamed: the thinking block at index 0, the text at index 1.
    ask["stream"] = json!(true);
    let r = post_json(m.addr, "/v1/messages", ANTHROPIC, &ask).await.unwrap();
    let ev = events(&r);
    let thinking: String = ev.iter().filter_map(|(_, d)| d.pointer("/delta/thinking")?.as_str()).collect();
    assert_eq!(thinking, "Thinking within a budget of 2048 tokens.");
    let starts: Vec<(&Value, &Value)> = ev
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| (&d["index"], &d["content_block"]["type"]))
        .collect();
    assert_eq!(starts, [(&json!(0), &json!("thinking")), (&json!(1), &json!("text"))]);
    assert!(ev.iter().any(|(_, d)| d.pointer("/delta/type") == Some(&json!("signature_delta"))));
    assert_eq!(ev.last().unwrap().0, "message_stop");
    // What thinking refuses, as Anthropic refuses it.
    ask["stream"] = json!(false);
    let refused = |field: &str, value: Value| {
        let mut b = ask.clone();
        b[field] = value;
        b
    };
    for (body, says) in [
        (refused("temperature", json!(0.5)), "`temperature` may only be set to 1"),
        (refused("top_k", json!(5)), "`top_k`"),
        (refused("top_p", json!(0.9)), "`top_p` must be greater than or equal to 0.95"),
        (refused("max_tokens", json!(2048)), "`max_tokens` must be greater than `thinking.budget_tokens`"),
        (refused("thinking", json!({"type": "enabled", "budget_tokens": 512})), "greater than or equal to 1024"),
        (
            {
                let mut b = refused("tools", json!([{"name": "f", "input_schema": {"type": "object"}}]));
                b["tool_choice"] = json!({"type": "any"});
                b
            },
            "forces tool use",
        ),
    ] {
        let r = post_json(m.addr, "/v1/messages", ANTHROPIC, &body).await.unwrap();
        assert_eq!(r.status, 400, "{says}");
        assert_eq!(r.json()["error"]["type"], "invalid_request_error");
        assert!(r.json()["error"]["message"].as_str().unwrap().contains(says), "{}", r.text());
    }
    // What it takes: temperature 1, top_p from 0.95.
    let mut ok = refused("temperature", json!(1.0));
    ok["top_p"] = json!(0.95);
    assert_eq!(post_json(m.addr, "/v1/messages", ANTHROPIC, &ok).await.unwrap().status, 200);

    // Gemini: thoughts first when asked for (`includeThoughts`), counted apart.
    let key = [("x-goog-api-key", "k")];
    let mut g = gemini();
    g["generationConfig"] = json!({"thinkingConfig": {"thinkingBudget": 3000, "includeThoughts": true}});
    let r = post_json(m.addr, "/v1beta/models/gemini-x:generateContent", &key, &g).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        v["candidates"][0]["content"]["parts"],
        json!([{"text": "Thinking within a budget of 3000 tokens.", "thought": true}, {"text": "Hello from alpha"}])
    );
    assert_eq!(v["usageMetadata"]["thoughtsTokenCount"], 7);
    let r = post_json(m.addr, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", &key, &g).await.unwrap();
    let thoughts: String = events(&r)
        .iter()
        .filter_map(|(_, d)| d.pointer("/candidates/0/content/parts/0"))
        .filter(|p| p["thought"] == true)
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(thoughts, "Thinking within a budget of 3000 tokens.");
    // Not asked for: none. A budget out of range or beside a level: Google's 400.
    g["generationConfig"]["thinkingConfig"] = json!({"thinkingBudget": 3000});
    let r = post_json(m.addr, "/v1beta/models/gemini-x:generateContent", &key, &g).await.unwrap();
    assert_eq!(r.json()["candidates"][0]["content"]["parts"].as_array().map(Vec::len), Some(1));
    for bad in [json!({"thinkingBudget": 99999}), json!({"thinkingBudget": 1024, "thinkingLevel": "high"})] {
        g["generationConfig"]["thinkingConfig"] = bad;
        let r = post_json(m.addr, "/v1beta/models/gemini-x:generateContent", &key, &g).await.unwrap();
        assert_eq!(r.status, 400, "{}", r.text());
    }
}
