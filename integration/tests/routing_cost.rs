//! routing_cost in real Envoy (`--concurrency 2`): sticky conversations across workers, a learned
//! capacity that stops overloading a provider, and bad responses (malformed tool calls) counted
//! from non-streaming and streamed answers.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::{launch, msg, test_catalog, Stack};
use serde_json::{json, Value};
use switchyard_integration::envoy::http_get;

static STACK: OnceLock<Stack> = OnceLock::new();

fn stack() -> &'static Stack {
    STACK.get_or_init(|| {
        let mut catalog = test_catalog();
        catalog["routing"]["default_policy"] = json!("routing_cost");
        let ep = |p: &str, m: &str, price: f64| json!({"provider": p, "upstream_model": format!("{p}-{m}"), "pricing": {"prompt": price, "completion": price}});
        // Sticky routing keeps a conversation only where cache reads are cheaper than the prompt.
        let cached = |p: &str| {
            json!({"provider": p, "upstream_model": format!("{p}-sticky"),
                   "pricing": {"prompt": 1.0, "completion": 1.0, "cached_prompt": 0.1}})
        };
        catalog["models"]["rc/sticky"] = json!({"endpoints": [cached("alpha"), cached("beta")]});
        catalog["models"]["rc/cap"] = json!({"endpoints": [ep("delta", "cap", 1.0), ep("beta", "cap", 2.0)]});
        catalog["models"]["rc/tools"] = json!({"endpoints": [ep("alpha", "tools", 1.0), ep("beta", "tools", 1.0)]});
        launch("routing-cost", catalog, |cfg| cfg.per_try_idle_timeout_ms = 2_000)
    })
}

fn counter(s: &Stack, name: &str, labels: &[(&str, &str)]) -> u64 {
    let (_, prom) = http_get(s.admin, "/stats/prometheus").unwrap();
    prom.lines()
        .find(|l| {
            l.starts_with(&format!("{name}{{")) && labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn conversation(turns: usize) -> Value {
    let mut m = vec![
        json!({"role": "system", "content": "sticky test: be brief"}),
        json!({"role": "user", "content": "first question"}),
    ];
    for i in 1..turns {
        m.push(json!({"role": "assistant", "content": format!("answer {i}")}));
        m.push(json!({"role": "user", "content": format!("follow-up {i}")}));
    }
    json!({"model": "rc/sticky", "messages": m})
}

// Later turns of a conversation stay on the endpoint that served its first turn, whichever
// worker gets them (each request is a new connection); when that endpoint fails the turn fails
// over and the conversation re-sticks where it was served.
#[tokio::test]
async fn conversations_stick_to_their_endpoint_across_workers_and_move_when_it_fails() {
    let s = stack();
    let first = s.chat("sticky-0", conversation(1)).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.header("x-switchyard-strategy"), Some("routing_cost"));
    let home = first.header("x-switchyard-provider").unwrap().to_string();
    for t in 2..10 {
        let r = s.chat(&format!("sticky-{t}"), conversation(t)).await;
        assert_eq!(r.header("x-switchyard-provider"), Some(home.as_str()), "turn {t}");
        assert_eq!(r.header("x-switchyard-strategy"), Some("routing_cost+sticky"), "turn {t}");
    }
    let other = if home == "alpha" { "beta" } else { "alpha" };
    let r = s.chat_with("sticky-fail", &[("x-mock-behavior", &format!("{home}=503"))], conversation(10)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-switchyard-provider"), Some(other));
    for t in 11..14 {
        let r = s.chat(&format!("sticky-{t}"), conversation(t)).await;
        assert_eq!(r.header("x-switchyard-provider"), Some(other), "turn {t} re-stuck");
        assert_eq!(r.header("x-switchyard-strategy"), Some("routing_cost+sticky"));
    }
    // An explicit session id sticks too, whatever the messages.
    let a = s
        .chat_with("sticky-sid-0", &[("x-session-id", "sid-42")], json!({"model": "rc/sticky", "messages": msg("one")}))
        .await;
    let home = a.header("x-switchyard-provider").unwrap().to_string();
    for i in 1..5 {
        let r = s
            .chat_with(
                &format!("sticky-sid-{i}"),
                &[("x-session-id", "sid-42")],
                json!({"model": "rc/sticky", "messages": msg(&format!("q{i}"))}),
            )
            .await;
        assert_eq!(r.header("x-switchyard-provider"), Some(home.as_str()));
    }
}

async fn wave(s: &'static Stack, tag: &str, n: usize, gap: Duration) -> Vec<u16> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let id = format!("{tag}-{i}");
        tasks.push(tokio::spawn(async move {
            // Distinct prompts: separate conversations, none sticky.
            let body = json!({"model": "rc/cap", "messages": msg(&format!("question {id}"))});
            s.chat_with(&id, &[("x-mock-behavior", "delta=cap3+ttft300,beta=ttft300")], body).await.status
        }));
        tokio::time::sleep(gap).await;
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

// A provider that takes 3 requests at a time answers 429 beyond that. The first burst teaches
// Switchyard its capacity (failing over the excess); afterwards traffic that would exceed it
// spills to the other provider instead of meeting 429s.
#[tokio::test]
async fn a_learned_capacity_stops_overloading_a_provider() {
    let s = stack();
    let limited = [("model", "rc/cap"), ("endpoint", "delta"), ("outcome", "rate_limited")];
    let statuses = wave(s, "cap-learn", 16, Duration::ZERO).await;
    assert!(statuses.iter().all(|&c| c == 200), "{statuses:?}");
    let learned_429 = counter(s, "switchyard_attempts_total", &limited);
    assert!(learned_429 >= 1, "the burst should exceed the capacity: {learned_429}");
    // Let the 429s' Retry-After cool-down (1 s) pass: from here on only the learned cap holds
    // the provider back.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let before_429 = learned_429;
    let statuses = wave(s, "cap-steady", 24, Duration::from_millis(30)).await;
    assert!(statuses.iter().all(|&c| c == 200), "{statuses:?}");
    let new_429 = counter(s, "switchyard_attempts_total", &limited) - before_429;
    // (How much it still serves is random: its recent 429s also back it off for a while.)
    assert!(new_429 <= 2, "after learning its capacity, 429s from it: {new_429} (burst had {learned_429})");
    let r = s
        .chat_with("cap-debug", &[("x-switchyard-debug", "1")], json!({"model": "rc/cap", "messages": msg("x")}))
        .await;
    let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
    let delta = c.as_array().unwrap().iter().find(|x| x["endpoint"] == "delta").unwrap();
    assert!(delta["health"]["capacity"].as_u64().is_some_and(|cap| (3..=6).contains(&cap)), "{delta}");
}

// Malformed tool calls (arguments that are not JSON) are counted from whole and streamed
// answers, per endpoint; they feed the bad-response rate, the tool error rate and :exacto.
#[tokio::test]
async fn malformed_tool_calls_are_counted_from_whole_and_streamed_answers() {
    let s = stack();
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    for (provider, mode) in [("alpha", "badtool"), ("beta", "tool")] {
        for stream in [false, true] {
            for i in 0..3 {
                let id = format!("tools-{provider}-{stream}-{i}");
                let body = json!({"model": "rc/tools", "stream": stream, "tools": tools, "messages": msg("weather?"),
                    "provider": {"order": [provider], "allow_fallbacks": false}});
                let r = s.chat_with(&id, &[("x-mock-behavior", &format!("{provider}={mode}"))], body).await;
                assert_eq!(r.status, 200, "{id}: {}", r.text());
                if stream {
                    assert!(r.text().contains("[DONE]"), "{id}: streamed whole");
                } else {
                    assert!(r.json()["choices"][0]["message"]["tool_calls"].is_array(), "{id}");
                }
            }
        }
    }
    assert_eq!(counter(s, "switchyard_bad_responses_total", &[("model", "rc/tools"), ("endpoint", "alpha")]), 6);
    assert_eq!(counter(s, "switchyard_bad_responses_total", &[("model", "rc/tools"), ("endpoint", "beta")]), 0);
    let r = s
        .chat_with("tools-debug", &[("x-switchyard-debug", "1")], json!({"model": "rc/tools", "messages": msg("x")}))
        .await;
    let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
    let health = |slug: &str| c.as_array().unwrap().iter().find(|x| x["endpoint"] == slug).unwrap()["health"].clone();
    assert_eq!(health("alpha")["tool_error_rate"], 1.0, "{c}");
    assert_eq!(health("alpha")["bad_response_rate"], 1.0, "{c}");
    assert_eq!(health("beta")["tool_error_rate"], 0.0, "{c}");
    // :exacto (quality first) now prefers beta; routing_cost gives alpha only a small share.
    let r = s
        .chat_with(
            "tools-exacto",
            &[("x-switchyard-debug", "1")],
            json!({"model": "rc/tools:exacto", "messages": msg("x")}),
        )
        .await;
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    let alpha_cost = c.as_array().unwrap().iter().find(|x| x["endpoint"] == "alpha").unwrap()["routing_cost"].clone();
    assert!(alpha_cost["success_p"].as_f64().unwrap() < 0.1, "{alpha_cost}");
    assert!(alpha_cost["share"].as_f64().unwrap() < 0.05, "{alpha_cost}");
}

// The market of `make bench-routing` stays what its README promises: at least six endpoints
// of one model, a price-gaming one, an outage mid-run and a recovery, and a catalog the filter
// accepts for both policies.
#[test]
fn the_benchmark_market_file_is_valid() {
    use switchyard_integration::market::Market;
    let path = switchyard_integration::envoy::repo_root().join("integration/market/default.json");
    let m = Market::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(m.endpoints.len() >= 6);
    assert!(m.endpoints.iter().any(|e| e.cached_prompt > e.prompt && e.completion > 5.0 * e.prompt), "a price gamer");
    assert!(m.endpoints.iter().any(|e| e.outage.is_some()), "an outage mid-run");
    assert!(m.endpoints.iter().any(|e| e.degraded_until_s.is_some()), "a recovery");
    assert!(m.endpoints.iter().all(|e| e.capacity < 1000), "every endpoint has a capacity");
    for policy in ["price_weighted", "routing_cost"] {
        let catalog = m.catalog(policy).to_string();
        switchyard::config::Catalog::from_json(catalog.as_bytes(), &|_| None).unwrap();
    }
}
