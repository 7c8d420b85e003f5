//! The first attempt without the per-attempt Wasm (real Envoy 1.40, `--concurrency 2`): a
//! single-model plan's first attempt goes to its provider's first-attempt cluster, prepared by
//! the decision filter; what the provider receives is what the per-attempt filter would have
//! sent; its outcome reaches the statistics and metrics whether it serves or fails.

mod common;

use std::sync::OnceLock;

use common::{launch, msg, test_catalog, Stack};
use serde_json::{json, Value};
use switchyard_integration::envoy::http_get;

static STACK: OnceLock<Stack> = OnceLock::new();

/// A stack of its own: the cluster counters below start at zero.
fn stack() -> &'static Stack {
    STACK.get_or_init(|| launch("first-attempt", test_catalog(), |cfg| cfg.per_try_idle_timeout_ms = 1_000))
}

fn stat(s: &Stack, name: &str) -> u64 {
    let (_, body) = http_get(s.admin, &format!("/stats?filter=^{}$", name.replace('.', "\\."))).unwrap();
    body.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

fn attempts_metric(s: &Stack, model: &str, endpoint: &str, outcome: &str) -> u64 {
    let (_, prom) = http_get(s.admin, "/stats/prometheus").unwrap();
    prom.lines()
        .find(|l| {
            l.starts_with("switchyard_attempts_total{")
                && l.contains(&format!("model=\"{model}\""))
                && l.contains(&format!("endpoint=\"{endpoint}\""))
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

fn candidates(r: &switchyard_integration::client::Reply) -> Value {
    serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap()
}

#[tokio::test]
async fn a_served_first_attempt_skips_the_per_attempt_filter_and_is_recorded() {
    let s = stack();
    // Only this test sends to delta's first-attempt cluster.
    let body = json!({"model": "test/basic", "messages": msg("hi"), "provider": {"order": ["delta", "beta"]}});
    for i in 0..3 {
        let id = format!("fa-ok{i}");
        let r = s
            .chat_with(
                &id,
                &[("authorization", "Bearer caller-secret"), ("x-request-id", "caller-rid"), ("cookie", "c=1")],
                body.clone(),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("delta"));
        assert_eq!(r.header("x-switchyard-model"), Some("test/basic"));
        assert_eq!(r.header("x-switchyard-attempts"), Some("1"));
        let answer = r.json();
        assert_eq!(answer["provider"], "delta");
        assert_eq!(answer["model"], "test/basic");
        assert!(answer["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{answer}");
        // What delta received is what the per-attempt filter sends: its own key and host, the
        // provider's model id and length, nothing of the caller's secrets, identity or tracing,
        // no Envoy or Switchyard headers.
        let (p, got) = s.only_receiver(&id);
        assert_eq!(p, "delta");
        assert_eq!(got.header("authorization"), Some("Bearer key-delta"));
        assert_eq!(got.header("host"), Some("delta.example"));
        assert_eq!(got.path, "/v1/chat/completions");
        assert_eq!(got.json()["model"], "delta-basic");
        assert_eq!(got.header("content-length").and_then(|v| v.parse::<usize>().ok()), Some(got.body.len()));
        assert_eq!(got.internal_headers(), vec![], "delta got internal headers");
        for (k, v) in &got.headers {
            assert!(!["cookie", "x-request-id", "x-forwarded-for"].contains(&k.as_str()), "delta got {k}");
            assert!(!v.contains("caller-secret") && !v.contains("caller-rid"), "delta got {k}: {v}");
        }
    }
    // Every one of them went to the first-attempt cluster, none through the per-attempt filter.
    assert_eq!(stat(s, "cluster.c_delta-first.upstream_rq_total"), 3);
    // The decision filter recorded them: metrics and the endpoint's shared statistics.
    assert_eq!(attempts_metric(s, "test/basic", "delta", "success"), 3);
    let r = s.chat_with("fa-ok-read", &[("x-switchyard-debug", "1")], body.clone()).await;
    let c = candidates(&r);
    let delta = c.as_array().unwrap().iter().find(|x| x["endpoint"] == "delta").unwrap().clone();
    assert_eq!(delta["health"]["attempts"], 3, "{delta}");
    assert_eq!(delta["health"]["uptime"], 1.0, "{delta}");
}

#[tokio::test]
async fn a_failed_first_attempt_is_recorded_by_the_retry_with_its_retry_after() {
    let s = stack();
    // test/nodata: no other test here touches it.
    let r = s
        .chat_with(
            "fa-429",
            &[("x-mock-behavior", "alpha=429/30")],
            json!({"model": "test/nodata", "messages": msg("x"), "provider": {"order": ["alpha", "beta"]}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("2"));
    let log = r.header("x-switchyard-attempt-log").unwrap_or_default().to_string();
    assert!(log.contains("alpha") && log.contains("429"), "the attempt log names the refused first attempt: {log}");
    let mut got: Vec<String> = s.received("fa-429").into_iter().map(|(p, _)| p).collect();
    got.sort();
    assert_eq!(got, vec!["alpha", "beta"]);
    // No test here sends to alpha's regular cluster: the first attempt went to its twin, the
    // retry to beta's regular cluster (with the per-attempt filter).
    assert_eq!(stat(s, "cluster.c_alpha.upstream_rq_total"), 0);
    assert!(stat(s, "cluster.c_alpha-first.upstream_rq_total") >= 1);
    assert!(stat(s, "cluster.c_beta.upstream_rq_total") >= 1);
    // The retry's filter recorded alpha's refusal and its Retry-After: alpha cools down.
    assert_eq!(attempts_metric(s, "test/nodata", "alpha", "rate_limited"), 1);
    let r = s
        .chat_with("fa-429-read", &[("x-switchyard-debug", "1")], json!({"model": "test/nodata", "messages": msg("x")}))
        .await;
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"), "alpha is cooling down");
    let c = candidates(&r);
    let alpha = c.as_array().unwrap().iter().find(|x| x["endpoint"] == "alpha").unwrap().clone();
    assert_eq!(alpha["health"]["cooling_down"], true, "{alpha}");
}

#[tokio::test]
async fn a_first_attempt_that_fails_without_a_retry_is_recorded_by_the_decision_filter() {
    let s = stack();
    let body = json!({"model": "vendor/colon:8b", "messages": msg("x")});
    let r = s.chat_with("fa-500", &[("x-mock-behavior", "alpha=500")], body.clone()).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(attempts_metric(s, "vendor/colon:8b", "alpha", "server_error"), 1);
    // No answer at all (a reset before the headers), and nothing after it.
    let r = s.chat_with("fa-reset", &[("x-mock-behavior", "alpha=reset")], body).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "no_endpoint_available", "{}", r.text());
    let failures: u64 =
        ["server_error", "no_response"].iter().map(|o| attempts_metric(s, "vendor/colon:8b", "alpha", o)).sum();
    assert_eq!(failures, 2, "both failures counted on alpha");
}

#[tokio::test]
async fn a_plan_with_a_fallback_model_keeps_the_per_attempt_filter_on_its_first_attempt() {
    let s = stack();
    // Only this test sends to delta's regular cluster.
    let r = s
        .chat(
            "fa-models",
            json!({"model": "fo/m1", "models": ["fo/m2"], "messages": msg("x"), "provider": {"order": ["delta"]}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("delta"));
    assert_eq!(stat(s, "cluster.c_delta.upstream_rq_total"), 1);
}

#[tokio::test]
async fn a_bad_answer_on_a_first_attempt_counts_with_its_outcome() {
    let s = stack();
    // gamma (BYOK, so first) serves test/byok; only this test uses it. One malformed tool call,
    // one good answer: both served by a first attempt without the per-attempt filter.
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    for (i, behavior) in ["gamma=badtool", "gamma=ok"].iter().enumerate() {
        let id = format!("fa-bad{i}");
        let r = s
            .chat_with(
                &id,
                &[("x-mock-behavior", behavior)],
                json!({"model": "test/byok", "messages": msg("x"), "tools": tools}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("gamma"));
    }
    assert_eq!(stat(s, "cluster.c_gamma-first.upstream_rq_total"), 2);
    let r = s
        .chat_with("fa-bad-read", &[("x-switchyard-debug", "1")], json!({"model": "test/byok", "messages": msg("x")}))
        .await;
    let c = candidates(&r);
    let gamma = c.as_array().unwrap().iter().find(|x| x["endpoint"] == "gamma").unwrap().clone();
    assert_eq!(gamma["health"]["attempts"], 2, "{gamma}");
    assert_eq!(gamma["health"]["bad_response_rate"], 0.5, "{gamma}");
}
