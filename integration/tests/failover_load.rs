//! Failover that holds under load: concurrent failovers are not refused by Envoy's retry
//! circuit breaker, a failover Envoy cuts short says so, and answers that break off after the
//! first byte count as failures and end the caller's stream with an error event.

mod common;

use std::sync::OnceLock;

use common::{join_all, launch, msg, stack, test_catalog, Stack};
use serde_json::{json, Value};
use switchyard_integration::client::Reply;
use switchyard_integration::envoy::http_get;

fn prometheus(s: &Stack) -> String {
    http_get(s.admin, "/stats/prometheus").map(|r| r.1).unwrap_or_default()
}

/// A Switchyard counter by its labels (`None` when absent).
fn counter(s: &Stack, name: &str, labels: &[(&str, &str)]) -> Option<u64> {
    prometheus(s)
        .lines()
        .find(|l| {
            l.starts_with(&format!("{name}{{")) && labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Envoy's `upstream_rq_retry_overflow`, summed over the provider clusters.
fn retry_overflows(s: &Stack) -> u64 {
    let (_, stats) = http_get(s.admin, "/stats?filter=upstream_rq_retry_overflow").unwrap();
    stats
        .lines()
        .filter(|l| l.starts_with("cluster.c_"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

// 64 requests at once all start on the cheapest provider, which fails slowly; the failover to
// the next one also takes a while, so the retries overlap. Envoy's default retry breaker (3
// concurrent retries per cluster) would refuse most of them; the generated configuration must
// let every one fail over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_requests_starting_on_one_failing_cluster_all_fail_over() {
    let s = stack();
    let before = retry_overflows(s);
    let tasks: Vec<_> = (0..64)
        .map(|i| async move {
            let id = format!("load-{i}");
            let r = s
                .chat_with(
                    &id,
                    &[("x-mock-behavior", "alpha=503+ttft300,beta=ttft200")],
                    json!({"model": "fo/load", "messages": msg("x"), "provider": {"sort": "price"}}),
                )
                .await;
            (id, r)
        })
        .collect();
    for (id, r) in join_all(tasks).await {
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("beta"), "{id}");
        assert_eq!(r.header("x-switchyard-attempts"), Some("2"), "{id}");
        let got: Vec<String> = s.received(&id).into_iter().map(|(p, _)| p).collect();
        assert_eq!(got, vec!["alpha", "beta"], "{id}");
    }
    assert_eq!(retry_overflows(s) - before, 0, "Envoy refused failovers");
}

// An Envoy whose provider clusters allow no concurrent retry at all: every failover is refused.
static NO_RETRIES: OnceLock<Stack> = OnceLock::new();

#[tokio::test]
async fn a_failover_envoy_refuses_is_reported_as_cut_short_not_as_all_endpoints_failed() {
    let s = NO_RETRIES.get_or_init(|| launch("no-retries", test_catalog(), |cfg| cfg.max_concurrent_failovers = 0));
    let r = s
        .chat_with(
            "short-overflow",
            &[("x-mock-behavior", "alpha=429/7")],
            json!({"model": "fo/short", "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["code"], "failover_incomplete", "{e}");
    assert_eq!(e["metadata"]["reason"], "retry_limit", "{e}");
    assert_eq!(e["metadata"]["planned_attempts"], 3, "{e}");
    assert!(e["message"].as_str().unwrap().contains("1 of 3 planned attempts"), "{e}");
    assert!(!e["message"].as_str().unwrap().contains("every allowed endpoint"), "{e}");
    assert_eq!(e["metadata"]["attempts"].as_array().map(Vec::len), Some(1), "{e}");
    assert_eq!(r.header("x-switchyard-attempts"), Some("1"));
    assert_eq!(r.header("retry-after"), Some("7"));
    let got: Vec<String> = s.received("short-overflow").into_iter().map(|(p, _)| p).collect();
    assert_eq!(got, vec!["alpha"]);
    assert!(retry_overflows(s) >= 1);
    assert_eq!(counter(s, "switchyard_failover_incomplete_total", &[("reason", "retry_limit")]), Some(1));
}

// An Envoy whose route timeout (1.5 s) ends the request while the second of three attempts runs.
static SHORT_TIMEOUT: OnceLock<Stack> = OnceLock::new();

#[tokio::test]
async fn a_failover_cut_short_by_the_route_timeout_says_so() {
    let s = SHORT_TIMEOUT.get_or_init(|| {
        launch("short-timeout", test_catalog(), |cfg| {
            cfg.route_timeout_ms = 1_500;
            cfg.per_try_idle_timeout_ms = 1_000;
        })
    });
    let r = s
        .chat_with(
            "short-timeout",
            &[("x-mock-behavior", "alpha=ttft1300,beta=ttft1300")],
            json!({"model": "fo/short", "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    assert_eq!(r.status, 504, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["code"], "failover_incomplete", "{e}");
    assert_eq!(e["metadata"]["reason"], "timeout", "{e}");
    assert_eq!(e["metadata"]["attempts"].as_array().map(Vec::len), Some(2), "{e}");
    assert_eq!(counter(s, "switchyard_failover_incomplete_total", &[("reason", "timeout")]), Some(1));
}

fn sse_events(r: &Reply) -> Vec<String> {
    r.text().split("\n\n").map(str::trim).filter(|e| !e.is_empty()).map(str::to_string).collect()
}

// A stream that ends after two chunks without `[DONE]`: the caller gets the two chunks and then
// one error event in the OpenAI shape; the attempt counts as a failure.
#[tokio::test]
async fn a_stream_that_ends_without_its_final_event_gets_an_error_event_and_counts_as_failed() {
    let s = stack();
    let r = s
        .chat_with(
            "cut-clean",
            &[("x-mock-behavior", "alpha=cut2+chunks5")],
            json!({"model": "fo/cut", "stream": true, "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body_error, None);
    let events = sse_events(&r);
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(events[0].contains("tok0") && events[1].contains("tok1"), "{events:?}");
    let last: Value = serde_json::from_str(events[2].trim_start_matches("data: ")).unwrap();
    assert_eq!(last["error"]["code"], "stream_interrupted", "{last}");
    assert_eq!(last["error"]["metadata"]["endpoint"], "alpha");
    assert!(!r.text().contains("[DONE]"));
    let labels = [("model", "fo/cut"), ("endpoint", "alpha"), ("outcome", "interrupted")];
    assert_eq!(counter(s, "switchyard_attempts_total", &labels), Some(1));
    assert_eq!(counter(s, "switchyard_attempts_total", &[("model", "fo/cut"), ("outcome", "success")]), None);
    assert!(counter(s, "switchyard_requests_total", &[("result", "interrupted")]).unwrap_or(0) >= 1);
    // The health record saw a failure, not a success.
    let r = s
        .chat_with(
            "cut-clean-read",
            &[("x-switchyard-debug", "1")],
            json!({"model": "fo/cut", "messages": msg("x"), "provider": {"order": ["beta"]}}),
        )
        .await;
    let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
    let alpha = c.as_array().unwrap().iter().find(|x| x["endpoint"] == "alpha").unwrap();
    assert_eq!(alpha["health"]["recent_failures"], 1, "{alpha}");
    assert_eq!(alpha["health"]["uptime"], 0.0, "{alpha}");
}

// A provider that resets the connection mid-stream: Envoy resets the caller's stream too (a
// transport error, never a clean end that looks complete), and the attempt counts as failed.
#[tokio::test]
async fn a_stream_reset_mid_way_reaches_the_caller_as_an_error_and_counts_as_failed() {
    let s = stack();
    let r = s
        .chat_with(
            "cut-abort",
            &[("x-mock-behavior", "alpha=abort2+chunks5")],
            json!({"model": "fo/abort", "stream": true, "messages": msg("x"), "provider": {"sort": "price"}}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.body_error.is_some(), "the caller must see the stream break: {}", r.text());
    assert!(r.text().contains("tok1") && !r.text().contains("[DONE]"), "{}", r.text());
    let labels = [("model", "fo/abort"), ("endpoint", "alpha"), ("outcome", "interrupted")];
    // on_done runs when Envoy tears the attempt down; give it a moment.
    let mut seen = None;
    for _ in 0..50 {
        seen = counter(s, "switchyard_attempts_total", &labels);
        if seen.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(seen, Some(1));
    assert_eq!(counter(s, "switchyard_attempts_total", &[("model", "fo/abort"), ("outcome", "success")]), None);
}
