//! Usage at the end of every stream, through real Envoy 1.40 (`routing.stream_usage`). By
//! default, as on OpenRouter, every stream's last chunk carries its usage with `usage.cost`,
//! whether the caller asked (`stream_options.include_usage`) or not, on each caller API: OpenAI
//! chat completions and completions (a last chunk with `"choices": []`, also when translated
//! from an Anthropic endpoint), Anthropic Messages (the final `message_delta`), Google (the last
//! chunk's `usageMetadata`, no cost: Google's schema has none). With `"when_asked"` (OpenAI's
//! rule) an OpenAI caller gets the usage chunk only when it asked. Providers are asked for their
//! usage either way, and the metrics count it either way.

mod common;

use std::time::{Duration, Instant};

use common::{launch, Stack};
use serde_json::{json, Value};
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::http_get;

/// alpha speaks OpenAI, beta Anthropic, gamma Google; every endpoint at $2 / $10 per million
/// prompt / completion tokens and $0.001 per request.
fn catalog(stream_usage: Option<&str>) -> Value {
    let pricing = json!({"prompt": 2, "completion": 10, "request": 0.001});
    let mut c = json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}},
            "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"value": "key-beta"},
                     "apis": {"anthropic": {}}},
            "gamma": {"cluster": "c_gamma", "authority": "gamma.example", "credential": {"value": "key-gamma"},
                      "apis": {"google": {}}}
        },
        "models": {
            "su/openai": {"endpoints": [{"provider": "alpha", "upstream_model": "alpha-su", "pricing": pricing}]},
            "su/anthropic": {"endpoints": [{"provider": "beta", "upstream_model": "beta-su", "pricing": pricing}]},
            "su/google": {"endpoints": [{"provider": "gamma", "upstream_model": "gamma-su", "pricing": pricing}]}
        },
        "routing": {"default_policy": "price_weighted"}
    });
    if let Some(mode) = stream_usage {
        c["routing"]["stream_usage"] = json!(mode);
    }
    c
}

/// USD for `prompt` and `completion` tokens at the catalog's prices, as `usage.cost` rounds it.
fn cost(prompt: u64, completion: u64) -> f64 {
    ((prompt as f64 * 2.0 / 1e6 + completion as f64 * 10.0 / 1e6 + 0.001) * 1e12).round() / 1e12
}

/// The JSON `data:` payloads of an SSE body (LF or CRLF separated), `[DONE]` left out.
fn data(r: &Reply) -> Vec<Value> {
    r.text()
        .replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

async fn post(s: &Stack, path: &str, id: &str, headers: &[(&str, &str)], body: Value) -> Reply {
    let mut h = vec![("x-test-id", id)];
    h.extend_from_slice(headers);
    let r = post_json(s.addr, path, &h, &body).await.unwrap_or_else(|e| panic!("{id}: {e}"));
    assert_eq!(r.status, 200, "{id}: {}", r.text());
    r
}

/// An OpenAI chat completions (or, with `completions`, completions) stream of `model`, with the
/// caller's `stream_options` if any.
async fn openai(s: &Stack, id: &str, model: &str, completions: bool, options: Option<Value>) -> Reply {
    let (path, mut body) = if completions {
        ("/v1/completions", json!({"model": model, "stream": true, "prompt": "hi"}))
    } else {
        (
            "/v1/chat/completions",
            json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
        )
    };
    if let Some(o) = options {
        body["stream_options"] = o;
    }
    let r = post(s, path, id, &[], body).await;
    assert!(r.text().ends_with("data: [DONE]\n\n"), "{id}: {}", r.text());
    r
}

/// The OpenAI stream's usage chunk, if it has one: the last chunk, without choices, with usage.
fn usage_chunk(r: &Reply) -> Option<Value> {
    let chunks = data(r);
    let last = chunks.last()?;
    let shown = chunks.iter().filter(|c| c["usage"].is_object()).count();
    if last["usage"].is_object() {
        assert_eq!(last["choices"], json!([]), "the usage alone, as OpenAI sends it: {}", r.text());
        assert_eq!(shown, 1, "one usage chunk: {}", r.text());
        Some(last.clone())
    } else {
        assert_eq!(shown, 0, "usage only in the last chunk: {}", r.text());
        assert!(chunks.iter().all(|c| c["choices"][0].is_object()), "every chunk has a choice: {}", r.text());
        None
    }
}

/// The usage chunk's `cost` is the catalog price of the tokens it reports.
fn assert_priced(id: &str, chunk: &Value) {
    let u = &chunk["usage"];
    let (p, c) = (u["prompt_tokens"].as_u64().unwrap_or(0), u["completion_tokens"].as_u64().unwrap_or(0));
    assert!(p > 0 && c > 0, "{id}: {u}");
    assert_eq!(u["cost"].as_f64(), Some(cost(p, c)), "{id}: {u}");
}

/// The provider was asked for its usage whatever the caller asked.
fn assert_provider_asked(s: &Stack, id: &str) {
    let got = s.received(id);
    assert_eq!(got.len(), 1, "{id}: one attempt");
    assert_eq!(got[0].1.json()["stream_options"]["include_usage"], true, "{id}: {}", got[0].1.json());
}

/// An Anthropic Messages stream of `su/anthropic`: the final `message_delta`'s `usage` has the
/// whole answer's `cost` (prompt side from `message_start`).
async fn assert_anthropic_stream_is_priced(s: &Stack, id: &str) {
    let body = json!({"model": "su/anthropic", "max_tokens": 16, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r =
        post(s, "/v1/messages", id, &[("x-api-key", "caller-key"), ("anthropic-version", "2023-06-01")], body).await;
    let events = data(&r);
    let start = events.iter().find(|e| e["type"] == "message_start").unwrap_or_else(|| panic!("{}", r.text()));
    let delta = events.iter().rev().find(|e| e["type"] == "message_delta").unwrap_or_else(|| panic!("{}", r.text()));
    let prompt = start["message"]["usage"]["input_tokens"].as_u64().unwrap_or(0);
    let completion = delta["usage"]["output_tokens"].as_u64().unwrap_or(0);
    assert!(prompt > 0 && completion > 0, "{}", r.text());
    assert_eq!(delta["usage"]["cost"].as_f64(), Some(cost(prompt, completion)), "{}", r.text());
    assert_eq!(events.last().map(|e| &e["type"]), Some(&json!("message_stop")), "{}", r.text());
}

/// The summed value of a Prometheus counter's series with these labels.
fn counter(s: &Stack, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, prom) = http_get(s.admin, "/stats/prometheus").unwrap_or_default();
    prom.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

#[tokio::test]
async fn every_stream_ends_with_its_usage_and_cost_by_default() {
    let s = launch("stream-usage-always", catalog(None), |cfg| cfg.per_try_idle_timeout_ms = 1_000);
    // OpenAI chat completions and completions: not asked, refused (`include_usage: false`, which
    // OpenRouter ignores), asked: the same priced usage chunk last.
    for (id, completions, options) in [
        ("su-chat", false, None),
        ("su-chat-refused", false, Some(json!({"include_usage": false}))),
        ("su-chat-asked", false, Some(json!({"include_usage": true}))),
        ("su-completions", true, None),
    ] {
        let r = openai(&s, id, "su/openai", completions, options).await;
        let chunk = usage_chunk(&r).unwrap_or_else(|| panic!("{id}: no usage chunk: {}", r.text()));
        assert_eq!((chunk["model"].as_str(), chunk["provider"].as_str()), (Some("su/openai"), Some("alpha")));
        assert_priced(id, &chunk);
        assert_provider_asked(&s, id);
    }
    // An OpenAI caller served by the Anthropic endpoint (translated): the same last chunk.
    let r = openai(&s, "su-chat-translated", "su/anthropic", false, None).await;
    let chunk = usage_chunk(&r).unwrap_or_else(|| panic!("no usage chunk: {}", r.text()));
    assert_eq!(chunk["provider"], "beta");
    assert_priced("su-chat-translated", &chunk);
    // Anthropic Messages: `cost` in the final `message_delta`, as in a whole message.
    assert_anthropic_stream_is_priced(&s, "su-anthropic").await;
    // Google: `usageMetadata` on the last chunk (no cost, as in a whole answer).
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let r = post(
        &s,
        "/v1beta/models/su/google:streamGenerateContent?alt=sse",
        "su-google",
        &[("x-goog-api-key", "caller-key")],
        body,
    )
    .await;
    let last = data(&r).pop().unwrap_or_else(|| panic!("{}", r.text()));
    assert!(last["candidates"][0]["finishReason"].is_string(), "{}", r.text());
    let u = &last["usageMetadata"];
    assert!(u["promptTokenCount"].as_u64() > Some(0) && u["candidatesTokenCount"].as_u64() > Some(0), "{u}");
}

#[tokio::test]
async fn when_asked_keeps_openais_rule_and_still_counts_the_usage() {
    let s = launch("stream-usage-when-asked", catalog(Some("when_asked")), |cfg| cfg.per_try_idle_timeout_ms = 1_000);
    for (id, model, completions, options) in [
        ("wa-chat", "su/openai", false, None),
        ("wa-chat-refused", "su/openai", false, Some(json!({"include_usage": false}))),
        ("wa-completions", "su/openai", true, None),
    ] {
        let r = openai(&s, id, model, completions, options).await;
        assert_eq!(usage_chunk(&r), None, "{id}: the caller did not ask: {}", r.text());
        assert!(!r.text().contains("\"usage\":{"), "{id}: {}", r.text());
        assert_provider_asked(&s, id);
    }
    let r = openai(&s, "wa-translated", "su/anthropic", false, None).await;
    assert_eq!(usage_chunk(&r), None, "translated, not asked: {}", r.text());
    // A caller who asks still gets it, priced.
    let r = openai(&s, "wa-chat-asked", "su/openai", false, Some(json!({"include_usage": true}))).await;
    let chunk = usage_chunk(&r).unwrap_or_else(|| panic!("asked, no usage chunk: {}", r.text()));
    assert_priced("wa-chat-asked", &chunk);
    // Anthropic streams keep their usage and cost (the setting is OpenAI's usage chunk only).
    assert_anthropic_stream_is_priced(&s, "wa-anthropic").await;
    // The hidden usage is counted: the mock reports 5 prompt and 3 completion tokens per OpenAI
    // stream, for the three unasked streams and the asked one at alpha.
    let labels = |t: &'static str| [("endpoint", "alpha"), ("gen_ai_token_type", t)];
    let tokens = "switchyard_gen_ai_client_token_usage_tokens_total";
    let deadline = Instant::now() + Duration::from_secs(10);
    while counter(&s, tokens, &labels("output")) < 12.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counter(&s, tokens, &labels("input")), 4.0 * 5.0, "input tokens of the four streams at alpha");
    assert_eq!(counter(&s, tokens, &labels("output")), 4.0 * 3.0, "output tokens of the four streams at alpha");
    let nano_usd = counter(&s, "switchyard_gen_ai_usage_cost_nano_usd_total", &[("endpoint", "alpha")]);
    assert_eq!(nano_usd, (4.0 * cost(5, 3) * 1e9).round(), "the four streams' cost in nano-USD");
}
