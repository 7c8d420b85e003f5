//! Failover executed by Envoy's retry policy across provider clusters (real Envoy 1.40,
//! `--concurrency 2`), per-attempt rewrites, final error shapes, shared health and metrics.
//! Providers misbehave per request through the `x-mock-behavior` header.

mod common;

use std::time::Duration;

use common::{join_all, msg, stack};
use serde_json::{json, Value};
use switchyard_integration::mock::Received;

const KEYS: [(&str, &str, &str); 5] = [
    ("alpha", "authorization", "Bearer key-alpha"),
    ("beta", "x-api-key", "key-beta-from-env"),
    ("gamma", "authorization", "Bearer key-gamma"),
    ("delta", "authorization", "Bearer key-delta"),
    ("dead", "authorization", "Bearer key-dead"),
];

/// Each provider sees its own key in its own header, and nothing else secret or internal.
fn assert_attempt_for(r: &Received, provider: &str, model: &str) {
    let (_, header, value) = KEYS.iter().find(|k| k.0 == provider).copied().unwrap();
    assert_eq!(r.header(header), Some(value), "{provider} must get its own key");
    assert_eq!(r.internal_headers(), vec![], "{provider} got internal headers");
    for (k, v) in &r.headers {
        for (other, _, secret) in KEYS {
            if other != provider {
                assert!(!v.contains(secret.trim_start_matches("Bearer ")), "{provider} got {other}'s key in {k}");
            }
        }
        assert!(!v.contains("caller-secret"), "{provider} got the caller's key");
    }
    if header != "authorization" {
        assert_eq!(r.header("authorization"), None, "{provider} must not get an Authorization header");
    }
    assert_eq!(r.header("host"), Some(format!("{provider}.example").as_str()));
    let body = r.json();
    assert_eq!(body["model"], format!("{provider}-{}", model.trim_start_matches("fo/")), "{provider} body: {body}");
    assert!(body.get("provider").is_none() && body.get("models").is_none());
    assert_eq!(
        r.header("content-length").and_then(|v| v.parse::<usize>().ok()),
        Some(r.body.len()),
        "content-length for {provider}"
    );
}

fn receivers(s: &common::Stack, id: &str) -> Vec<String> {
    s.received(id).into_iter().map(|(p, _)| p).collect()
}

fn one(s: &common::Stack, id: &str, provider: &str) -> Received {
    let got: Vec<Received> = s.received(id).into_iter().filter(|(p, _)| p == provider).map(|(_, r)| r).collect();
    assert_eq!(got.len(), 1, "{id}: {provider} should get exactly one attempt");
    got.into_iter().next().unwrap()
}

#[tokio::test]
async fn ordered_failover_across_clusters_rewrites_each_attempt() {
    let s = stack();
    let r = s
        .chat_with("fo-order", &[("authorization", "Bearer caller-secret"), ("x-mock-behavior", "alpha=429,beta=503")],
            json!({"model": "fo/order", "messages": msg("hello"), "temperature": 0.5, "provider": {"order": ["alpha", "beta", "delta"]}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("delta"));
    assert_eq!(r.header("x-switchyard-model"), Some("fo/order"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("3"));
    assert_eq!(r.json()["provider"], "delta");
    // Attempts in order, each rewritten for its own provider.
    let mut got = receivers(s, "fo-order");
    got.sort();
    assert_eq!(got, vec!["alpha", "beta", "delta"]);
    for p in ["alpha", "beta", "delta"] {
        let req = one(s, "fo-order", p);
        assert_attempt_for(&req, p, "fo/order");
        assert_eq!(req.json()["temperature"], 0.5);
        assert!(req.header("x-envoy-max-retries").is_none(), "{p} saw x-envoy-max-retries");
    }
}

#[tokio::test]
async fn reset_and_connect_failure_fail_over() {
    let s = stack();
    let r = s
        .chat_with(
            "fo-reset",
            &[("x-mock-behavior", "alpha=reset")],
            json!({"model": "fo/reset", "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    assert_attempt_for(&one(s, "fo-reset", "beta"), "beta", "fo/reset");
    one(s, "fo-reset", "alpha");
    // `dead` has no listener: connect failure, then alpha.
    let r = s
        .chat("fo-dead", json!({"model": "fo/dead", "messages": msg("x"), "provider": {"order": ["dead", "alpha"]}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("alpha"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("2"));
}

#[tokio::test]
async fn client_errors_go_back_to_the_caller() {
    let s = stack();
    let r = s
        .chat_with(
            "fo-4xx",
            &[("x-mock-behavior", "alpha=400")],
            json!({"model": "fo/4xx", "messages": msg("x"), "provider": {"order": ["alpha", "beta"]}}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("alpha: mock failure"), "the provider's own error: {}", r.text());
    assert_eq!(receivers(s, "fo-4xx"), vec!["alpha"], "beta must not be tried for a caller error");
}

#[tokio::test]
async fn allow_fallbacks_false_never_touches_unapproved_providers() {
    let s = stack();
    let r = s
        .chat_with("fo-nofb", &[("x-mock-behavior", "alpha=503,beta=503")],
            json!({"model": "fo/nofb", "messages": msg("x"), "provider": {"order": ["alpha", "beta"], "allow_fallbacks": false}}))
        .await;
    assert_eq!(r.status, 503, "{}", r.text());
    let attempts = r.json()["error"]["metadata"]["attempts"].clone();
    assert_eq!(attempts.as_array().map(|a| a.len()), Some(2), "{attempts}");
    assert_eq!(attempts[0]["endpoint"], "alpha");
    assert_eq!(attempts[1]["endpoint"], "beta");
    let mut got = receivers(s, "fo-nofb");
    got.sort();
    assert_eq!(got, vec!["alpha", "beta"], "delta (not approved) must receive nothing");
    // Without `order`: only the first choice.
    let r = s
        .chat_with(
            "fo-nofb1",
            &[("x-mock-behavior", "alpha=503,beta=503,delta=503")],
            json!({"model": "fo/nofb", "messages": msg("x"), "provider": {"sort": "price", "allow_fallbacks": false}}),
        )
        .await;
    assert_eq!(r.status, 503);
    assert_eq!(receivers(s, "fo-nofb1"), vec!["alpha"]);
}

#[tokio::test]
async fn all_rate_limited_is_429_with_the_smallest_retry_after() {
    let s = stack();
    let r = s
        .chat_with(
            "fo-429",
            &[("x-mock-behavior", "alpha=429/40,beta=429/3,delta=429")],
            json!({"model": "fo/429", "messages": msg("x"), "provider": {"order": ["alpha", "beta", "delta"]}}),
        )
        .await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("3"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let e = r.json();
    assert_eq!(e["error"]["code"], "capacity_exhausted");
    assert_eq!(e["error"]["metadata"]["attempts"].as_array().map(|a| a.len()), Some(3));
    assert!(r.header("x-switchyard-provider").is_none());
}

#[tokio::test]
async fn all_failed_lists_every_attempt() {
    let s = stack();
    let r = s
        .chat_with(
            "fo-mixed",
            &[("x-mock-behavior", "alpha=500,beta=429/1,delta=502")],
            json!({"model": "fo/mixed", "messages": msg("x"), "provider": {"order": ["alpha", "beta", "delta"]}}),
        )
        .await;
    assert_eq!(r.status, 502, "{}", r.text());
    let e = r.json();
    assert_eq!(e["error"]["code"], "all_endpoints_failed");
    let list: Vec<(String, Value)> = e["error"]["metadata"]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["endpoint"].as_str().unwrap_or("").to_string(), a["status"].clone()))
        .collect();
    assert_eq!(list, vec![("alpha".into(), json!(500)), ("beta".into(), json!(429)), ("delta".into(), json!(502))]);
    assert_eq!(r.header("x-switchyard-attempts"), Some("3"));
}

#[tokio::test]
async fn streams_fail_over_before_the_first_byte_and_stay_unbuffered() {
    let s = stack();
    let r = s
        .chat_with("fo-stream", &[("x-mock-behavior", "alpha=503,beta=ttft20+interval250+chunks5")],
            json!({"model": "fo/stream", "stream": true, "messages": msg("x"), "provider": {"order": ["alpha", "beta"]}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    let text = r.text();
    assert!(text.contains("Hello") || text.contains("tok4"), "{text}");
    let pos = |needle: &str| r.chunks.iter().position(|(_, c)| String::from_utf8_lossy(c).contains(needle)).unwrap();
    let (first, last) = (pos("tok0"), pos("tok4"));
    assert!(last > first, "stream arrived in one piece");
    assert!(
        r.chunks[last].0 >= r.chunks[first].0 + Duration::from_millis(700),
        "{:?}",
        r.chunks.iter().map(|c| c.0).collect::<Vec<_>>()
    );
    assert_attempt_for(&one(s, "fo-stream", "beta"), "beta", "fo/stream");
}

#[tokio::test]
async fn model_fallback_on_any_failure_of_the_model() {
    let s = stack();
    // A context-length/moderation-style refusal (400) from every endpoint of fo/m1: the next
    // model serves. The caller's model keeps its other endpoints first.
    let r = s
        .chat_with(
            "fo-mfb",
            &[("x-mock-behavior", "alpha=400,delta=400")],
            json!({"model": "fo/m1", "models": ["fo/m2"], "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-model"), Some("fo/m2"));
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    assert_eq!(r.json()["provider"], "beta");
    assert_attempt_for(&one(s, "fo-mfb", "beta"), "beta", "fo/m2");
    let mut got = receivers(s, "fo-mfb");
    got.sort();
    assert_eq!(got, vec!["alpha", "beta", "delta"]);
    // Only the first endpoint refuses: the model's next endpoint serves it.
    let r = s
        .chat_with(
            "fo-mfb1",
            &[("x-mock-behavior", "alpha=400")],
            json!({"model": "fo/m1", "models": ["fo/m2"], "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!((r.header("x-switchyard-model"), r.header("x-switchyard-provider")), (Some("fo/m1"), Some("delta")));
    // Retryable failures: provider failover inside fo/m1 first, then fo/m2.
    let r = s
        .chat_with(
            "fo-mfb5",
            &[("x-mock-behavior", "alpha=503,delta=500")],
            json!({"model": "fo/m1", "models": ["fo/m2"], "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-switchyard-model"), Some("fo/m2"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("3"));
    // The last model's refusal goes back to the caller as the provider sent it.
    let r = s
        .chat_with(
            "fo-mfb-last",
            &[("x-mock-behavior", "alpha=400,delta=400,beta=400")],
            json!({"model": "fo/m1", "models": ["fo/m2"], "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("beta: mock failure"), "{}", r.text());
}

#[tokio::test]
async fn partition_none_sorts_endpoints_of_all_models_together() {
    let s = stack();
    let r = s.chat_with("fo-part", &[("x-switchyard-debug", "1")],
        json!({"model": "fo/p1", "models": ["fo/p2"], "messages": msg("x"), "provider": {"sort": {"by": "price", "partition": "none"}}})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-switchyard-model"), Some("fo/p2"), "the cheaper model's endpoint first");
    let r = s
        .chat(
            "fo-part-m",
            json!({"model": "fo/p1", "models": ["fo/p2"], "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    assert_eq!(r.header("x-switchyard-model"), Some("fo/p1"), "partition model keeps model priority");
}

#[tokio::test]
async fn retry_after_cools_the_endpoint_down_for_every_worker() {
    let s = stack();
    let r = s
        .chat_with(
            "fo-cd0",
            &[("x-mock-behavior", "alpha=429/30")],
            json!({"model": "fo/cd", "messages": msg("x"), "provider": {"order": ["alpha", "beta"]}}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    // alpha is cheaper, but cooling down: new connections (spread over both workers) go to beta.
    for i in 0..20 {
        let id = format!("fo-cd{}", i + 1);
        let r = s.chat_with(&id, &[("x-switchyard-debug", "1")], json!({"model": "fo/cd", "messages": msg("x")})).await;
        assert_eq!(r.status, 200);
        assert_eq!(receivers(s, &id), vec!["beta"], "request {i}");
        let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
        assert_eq!(c[1]["endpoint"], "alpha");
        assert_eq!(c[1]["health"]["cooling_down"], true);
    }
}

#[tokio::test]
async fn outage_sends_an_endpoint_to_the_back_of_price_weighted() {
    let s = stack();
    // Three failures in a row while its peer answers: a significant outage.
    for i in 0..3 {
        let id = format!("fo-out{i}");
        let r = s
            .chat_with(
                &id,
                &[("x-mock-behavior", "alpha=503")],
                json!({"model": "fo/out", "messages": msg("x"), "provider": {"order": ["alpha", "beta"]}}),
            )
            .await;
        assert_eq!(r.status, 200);
    }
    for i in 0..10 {
        let id = format!("fo-out-after{i}");
        let r =
            s.chat_with(&id, &[("x-switchyard-debug", "1")], json!({"model": "fo/out", "messages": msg("x")})).await;
        let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
        assert_eq!(c[0]["endpoint"], "beta", "{c}");
        assert_eq!(c[1]["health"]["recent_outage"], true);
        assert_eq!(receivers(s, &id), vec!["beta"]);
    }
}

#[tokio::test]
async fn health_counters_are_exact_across_workers() {
    let s = stack();
    // 30 successes and 10 failures on fo/stats@alpha, each on a new connection (both workers).
    let mut tasks = Vec::new();
    for i in 0..40 {
        tasks.push(async move {
            let behavior = if i % 4 == 0 { "alpha=500" } else { "alpha=ok" };
            let id = format!("fo-stats{i}");
            s.chat_with(&id, &[("x-mock-behavior", behavior)], json!({"model": "fo/stats", "messages": msg("x"), "provider": {"order": ["alpha"], "allow_fallbacks": false}})).await
        });
    }
    let replies = join_all(tasks).await;
    assert_eq!(replies.iter().filter(|r| r.status == 200).count(), 30);
    let r = s
        .chat_with(
            "fo-stats-read",
            &[("x-switchyard-debug", "1")],
            json!({"model": "fo/stats", "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
    let alpha = c.as_array().unwrap().iter().find(|x| x["endpoint"] == "alpha").unwrap();
    assert_eq!(alpha["health"]["attempts"], 40, "{alpha}");
    assert_eq!(alpha["health"]["error_rate"], 0.25);
    assert_eq!(alpha["health"]["uptime"], 0.75);
    // The same counts in Envoy's stats, with labels.
    let (_, prom) = switchyard_integration::envoy::http_get(s.admin, "/stats/prometheus").unwrap();
    let line = |outcome: &str| {
        prom.lines()
            .find(|l| {
                l.contains("switchyard_attempts_total{")
                    && l.contains("model=\"fo/stats\"")
                    && l.contains("endpoint=\"alpha\"")
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap_or("").to_string())
    };
    // 30 successes plus the read request itself (served by alpha, the cheapest).
    assert_eq!(
        line("success").as_deref(),
        Some("31"),
        "{}",
        prom.lines().filter(|l| l.contains("switchyard_")).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(line("server_error").as_deref(), Some("10"));
    assert!(
        prom.contains("switchyard_gen_ai_server_time_to_first_token_milliseconds_bucket{"),
        "TTFT histogram missing"
    );
    assert!(prom.contains("switchyard_attempt_duration_milliseconds_bucket{"), "latency histogram missing");
}

#[tokio::test]
async fn latency_sort_uses_measured_ttft() {
    let s = stack();
    // alpha is slow to first token, beta fast.
    for i in 0..3 {
        s.chat_with(
            &format!("fo-lat-a{i}"),
            &[("x-mock-behavior", "alpha=ttft300")],
            json!({"model": "fo/lat", "messages": msg("x"), "provider": {"order": ["alpha"]}}),
        )
        .await;
        s.chat_with(
            &format!("fo-lat-b{i}"),
            &[("x-mock-behavior", "beta=ttft5")],
            json!({"model": "fo/lat", "messages": msg("x"), "provider": {"order": ["beta"]}}),
        )
        .await;
    }
    let r = s
        .chat_with(
            "fo-lat",
            &[("x-switchyard-debug", "1")],
            json!({"model": "fo/lat", "messages": msg("x"), "provider": {"sort": "latency"}}),
        )
        .await;
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"), "{:?}", r.header("x-switchyard-candidates"));
    let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
    assert!(c[0]["health"]["ttft_p50_ms"].as_f64().unwrap() < c[1]["health"]["ttft_p50_ms"].as_f64().unwrap(), "{c}");
    // The cheaper but slow endpoint misses a 0.2 s latency preference and moves back.
    let r = s.chat("fo-lat-pref", json!({"model": "fo/lat", "messages": msg("x"), "provider": {"sort": "price", "preferred_max_latency": 0.2}})).await;
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
}

#[tokio::test]
async fn throughput_sort_uses_measured_output_speed() {
    let s = stack();
    // Streams of 5 chunks (usage: 3 completion tokens): alpha slow (100 ms apart), beta fast.
    for i in 0..3 {
        for (p, interval) in [("alpha", 100), ("beta", 5)] {
            let r = s
                .chat_with(
                    &format!("fo-tps-{p}{i}"),
                    &[("x-mock-behavior", &format!("{p}=interval{interval}+chunks5"))],
                    json!({"model": "fo/tps", "stream": true, "messages": msg("x"), "provider": {"order": [p]}}),
                )
                .await;
            assert_eq!(r.status, 200);
        }
    }
    let r = s
        .chat_with("fo-tps", &[("x-switchyard-debug", "1")], json!({"model": "fo/tps:nitro", "messages": msg("x")}))
        .await;
    let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"), "{c}");
    assert!(c[0]["score"].as_f64().unwrap() > c[1]["score"].as_f64().unwrap(), "{c}");
    // The cheaper alpha misses a 20 tokens/s preference and moves back under a price sort.
    let r = s.chat("fo-tps-pref", json!({"model": "fo/tps", "messages": msg("x"), "provider": {"sort": "price", "preferred_min_throughput": 20}})).await;
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
}

#[tokio::test]
async fn a_provider_silent_past_the_idle_timeout_fails_over() {
    let s = stack();
    // The test stack's per-try idle timeout is 1 s; alpha would answer after 3 s.
    let r = s
        .chat_with(
            "fo-timeout",
            &[("x-mock-behavior", "alpha=ttft3000")],
            json!({"model": "fo/reset", "messages": msg("x"), "provider": {"order": ["alpha", "beta"]}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("2"));
}

#[tokio::test]
async fn no_response_from_any_endpoint_is_503_listing_the_attempts() {
    let s = stack();
    // `dead` refuses connections, alpha resets: nothing answers.
    let r = s
        .chat_with(
            "fo-allreset",
            &[("x-mock-behavior", "alpha=reset")],
            json!({"model": "fo/dead", "messages": msg("x"), "provider": {"order": ["dead", "alpha"]}}),
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let e = r.json();
    assert_eq!(e["error"]["code"], "no_endpoint_available", "{e}");
    let attempts = e["error"]["metadata"]["attempts"].as_array().cloned().unwrap_or_default();
    assert_eq!(attempts.len(), 2, "{e}");
    assert_eq!(attempts[0]["endpoint"], "dead");
    assert_eq!(attempts[0]["outcome"], "no_response");
    assert!(attempts[0]["status"].is_null());
    assert_eq!(attempts[1]["endpoint"], "alpha");
    // The failed connections count in dead's shared health too.
    let r = s
        .chat_with(
            "fo-allreset-read",
            &[("x-switchyard-debug", "1"), ("x-mock-behavior", "alpha=ok")],
            json!({"model": "fo/dead", "messages": msg("x"), "provider": {"order": ["alpha"]}}),
        )
        .await;
    let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
    let dead = c.as_array().unwrap().iter().find(|x| x["endpoint"] == "dead").cloned().unwrap_or(Value::Null);
    assert!(dead["health"]["attempts"].as_u64().unwrap_or(0) >= 1, "{c}");
    assert_eq!(dead["health"]["uptime"], 0.0, "{c}");
}

#[tokio::test]
async fn body_less_failures_still_get_the_json_error() {
    let s = stack();
    let r = s
        .chat_with("fo-empty", &[("x-mock-behavior", "alpha=503+empty,beta=429/2+empty")],
            json!({"model": "fo/4xx", "messages": msg("x"), "provider": {"order": ["alpha", "beta"], "allow_fallbacks": false}}))
        .await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let e = r.json();
    assert_eq!(e["error"]["code"], "no_endpoint_available", "{}", r.text());
    assert_eq!(e["error"]["metadata"]["attempts"].as_array().map(|a| a.len()), Some(2));
}

#[tokio::test]
async fn in_flight_attempts_are_counted_across_workers() {
    let s = stack();
    let in_flight = |r: &switchyard_integration::client::Reply| -> u64 {
        let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap_or("[]")).unwrap();
        c[0]["health"]["in_flight"].as_u64().unwrap_or(99)
    };
    let body = json!({"model": "fo/inflight", "stream": true, "messages": msg("x")});
    let slow = tokio::spawn(async move {
        stack().chat_with("fo-inflight-slow", &[("x-mock-behavior", "alpha=interval300+chunks5")], body).await
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = s
        .chat_with(
            "fo-inflight-during",
            &[("x-switchyard-debug", "1")],
            json!({"model": "fo/inflight", "messages": msg("x")}),
        )
        .await;
    assert_eq!(in_flight(&r), 1, "{:?}", r.header("x-switchyard-candidates"));
    assert_eq!(slow.await.unwrap().status, 200);
    let r = s
        .chat_with(
            "fo-inflight-after",
            &[("x-switchyard-debug", "1")],
            json!({"model": "fo/inflight", "messages": msg("x")}),
        )
        .await;
    assert_eq!(in_flight(&r), 0, "{:?}", r.header("x-switchyard-candidates"));
}
