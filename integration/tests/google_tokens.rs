//! Google OAuth2 access tokens (`credential.google_metadata`) in real Envoy, on the Wasm and the
//! native build (`--concurrency 2`): a mock metadata server issues short-lived tokens and counts
//! its fetches (`mock/gcp_metadata.rs`); the mock provider `gcloud` is Claude on Vertex AI
//! (`kind: vertex`, OpenAI callers translated to `:rawPredict`) and accepts only a live token
//! that server issued; `keyed` is an ordinary keyed provider to fail over to.
//!
//! - one fetch serves both workers, and an expired token the provider refuses is failed over;
//! - 6-second tokens under a steady stream of requests for 20 s: no request fails, every one
//!   carries a live token, and the refreshes come from one worker at a time;
//! - the metadata server down at start: `gcloud` is skipped at once (counted), then used once
//!   the server is up.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::{prometheus_sum, Build, ClusterSpec, Envoy, StackConfig};
use switchyard_integration::mock::gcp_metadata::MetadataServer;
use switchyard_integration::mock::{Behavior, MockProvider};

fn catalog() -> Value {
    json!({
        "providers": {
            // Claude on Vertex AI: the mock's Vertex takes only a live token the metadata
            // server issued (and checks Vertex's path, project and body as well).
            "gcloud": {"cluster": "c_gcloud", "authority": "us-east5-aiplatform.googleapis.com", "kind": "vertex",
                       "kind_options": {"project": switchyard_integration::mock::vertex::PROJECT, "location": "us-east5"},
                       "apis": {"anthropic": {}},
                       "credential": {"google_metadata": {"cluster": "gcp_metadata", "timeout_ms": 2000}}},
            "keyed": {"cluster": "c_keyed", "authority": "keyed.example", "credential": {"value": "key-keyed"}}
        },
        "models": {"g/chat": {"endpoints": [
            {"provider": "gcloud", "upstream_model": "claude-sonnet-4-5@20250929", "apis": ["anthropic"],
             "pricing": {"prompt": 1, "completion": 1}},
            {"provider": "keyed", "upstream_model": "k-chat", "pricing": {"prompt": 2, "completion": 2}}
        ]}},
        "routing": {"default_policy": "price_weighted"}
    })
}

struct Stack {
    addr: SocketAddr,
    admin: SocketAddr,
    metadata: MetadataServer,
    gcloud: MockProvider,
    keyed: MockProvider,
}

/// A stack of its own: the metadata server (tokens living `life`, down at start if `down`), the
/// two providers and Envoy, on a thread that lives as long as the test binary.
fn start(build: Build, life: Duration, down: bool, tag: &'static str) -> Stack {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let (metadata, gcloud, keyed) = rt.block_on(async {
            let metadata = MetadataServer::start(life, "vertex@proj.iam.gserviceaccount.com").await.expect("metadata");
            metadata.set_down(down);
            let behavior =
                Behavior { google_tokens: Some(std::sync::Arc::clone(&metadata.issuer)), ..Behavior::default() };
            let gcloud = MockProvider::start("gcloud", 0, behavior).await.expect("gcloud");
            let keyed = MockProvider::start("keyed", 0, Behavior::default()).await.expect("keyed");
            (metadata, gcloud, keyed)
        });
        let clusters = vec![
            ClusterSpec { name: "c_gcloud".into(), port: gcloud.addr.port() },
            ClusterSpec { name: "c_keyed".into(), port: keyed.addr.port() },
        ];
        let mut cfg = StackConfig::new(catalog(), clusters, None);
        cfg.build = build;
        cfg.metadata_server = Some(("127.0.0.1".into(), metadata.addr.port()));
        let envoy = Envoy::start(&cfg, tag).unwrap_or_else(|e| panic!("envoy: {e}"));
        let _ = tx.send(Stack { addr: envoy.addr(), admin: envoy.admin, metadata, gcloud, keyed });
        let _keep = (envoy, rt);
        loop {
            std::thread::park();
        }
    });
    rx.recv().expect("stack started")
}

async fn chat(stack: &Stack, id: &str, provider: Value) -> Reply {
    let body = json!({"model": "g/chat", "messages": [{"role": "user", "content": "hi"}], "provider": provider});
    post_json(stack.addr, "/v1/chat/completions", &[("x-test-id", id), ("authorization", "Bearer caller-key")], &body)
        .await
        .unwrap_or_else(|e| panic!("{id}: {e}"))
}

fn order() -> Value {
    json!({"order": ["gcloud", "keyed"]})
}

fn stat(stack: &Stack, metric: &str, label: &str) -> u64 {
    prometheus_sum(stack.admin, metric, label)
}

/// Waits (up to `within`) until a request ordered gcloud-first is served by gcloud.
async fn until_gcloud_serves(stack: &Stack, id: &str, within: Duration) {
    let t0 = Instant::now();
    loop {
        let r = chat(stack, id, order()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        if r.header("x-switchyard-provider") == Some("gcloud") {
            return;
        }
        assert!(t0.elapsed() < within, "gcloud never served: no token after {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Nothing of the token reached the caller or the other provider, nor the caller's key anyone.
fn assert_token_stayed_home(stack: &Stack, id: &str, reply: &Reply) {
    let caller_sees = format!("{:?}{}", reply.headers, reply.text());
    assert!(!caller_sees.contains("ya29."), "{caller_sees}");
    for r in stack.keyed.received_for(id) {
        assert!(r.headers.iter().all(|(_, v)| !v.contains("ya29.")), "{:?}", r.headers);
        assert_eq!(r.header("authorization"), Some("Bearer key-keyed"));
    }
    for r in stack.gcloud.received_for(id) {
        let auth = r.header("authorization").unwrap_or_default();
        assert!(auth.starts_with("Bearer ya29.mock-"), "{auth}");
        assert!(r.path.ends_with("/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"), "{}", r.path);
        assert!(
            r.headers.iter().all(|(_, v)| !v.contains("key-keyed") && !v.contains("caller-key")),
            "{:?}",
            r.headers
        );
    }
}

async fn fetched_once_then_an_expired_token_is_failed_over(build: Build, tag: &'static str) {
    let stack = start(build, Duration::from_secs(3_600), false, tag);
    until_gcloud_serves(&stack, "once-warm", Duration::from_secs(10)).await;
    // Both workers tick every 100 ms; give them many ticks, and traffic on both.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for i in 0..20 {
        let id = format!("once-{i}");
        let r = chat(&stack, &id, json!({"only": ["gcloud"]})).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_token_stayed_home(&stack, &id, &r);
    }
    assert_eq!(stack.metadata.issuer.fetches(), 1, "one fetch for both workers");
    assert_eq!(stat(&stack, "switchyard_access_token_fetches_total", "result=\"ok\""), 1);
    assert_eq!(stack.metadata.issuer.checks().1, 0, "no token refused");
    // The token expires at Google while the proxy still holds it: refused, failed over.
    stack.metadata.issuer.expire_all();
    let r = chat(&stack, "expired", order()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("keyed"));
    assert_eq!(stack.gcloud.received_for("expired").len(), 1, "gcloud was tried and refused it");
    assert_eq!(stack.keyed.received_for("expired").len(), 1);
    assert_token_stayed_home(&stack, "expired", &r);
}

async fn a_token_expiring_under_load_fails_no_request(build: Build, tag: &'static str) {
    let stack = std::sync::Arc::new(start(build, Duration::from_secs(6), false, tag));
    until_gcloud_serves(&stack, "load-warm", Duration::from_secs(10)).await;
    let fetched_before = stack.metadata.issuer.fetches();
    let refused_before = stack.metadata.issuer.checks().1;
    let t0 = Instant::now();
    let mut loops = Vec::new();
    for w in 0..4 {
        let stack = std::sync::Arc::clone(&stack);
        loops.push(tokio::spawn(async move {
            let mut n = 0u32;
            while t0.elapsed() < Duration::from_secs(20) {
                let id = format!("load-{w}-{n}");
                let r = chat(&stack, &id, json!({"only": ["gcloud"]})).await;
                assert_eq!(r.status, 200, "{id}: {}", r.text());
                assert_eq!(r.header("x-switchyard-provider"), Some("gcloud"));
                n += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            n
        }));
    }
    let mut sent = 0;
    for l in loops {
        sent += l.await.expect("load loop");
    }
    let elapsed_ms = t0.elapsed().as_millis() as u64;
    let fetched = stack.metadata.issuer.fetches() - fetched_before;
    let (accepted, refused) = stack.metadata.issuer.checks();
    assert_eq!(refused - refused_before, 0, "every request carried a live token");
    assert!(accepted >= u64::from(sent));
    // Refreshed at half of each 6 s life: about one fetch per 3 s, from one worker at a time
    // (two workers fetching each would double it).
    assert!(fetched >= 4, "the token was refreshed under load: {fetched} fetches in {elapsed_ms} ms");
    assert!(fetched <= 3 + elapsed_ms / 2_500, "{fetched} fetches in {elapsed_ms} ms: more than one fetcher");
    println!("{tag}: {sent} requests in {elapsed_ms} ms, {fetched} token fetches, none refused");
}

async fn the_metadata_server_down_at_start_fails_the_provider_over_until_it_is_up(build: Build, tag: &'static str) {
    let stack = start(build, Duration::from_secs(3_600), true, tag);
    // The workers try and fail (each failure backs off).
    let t0 = Instant::now();
    // A closed connection is Envoy's 503 to the module (`http_error`); no answer `unreachable`.
    let failed = |s: &Stack| {
        stat(s, "switchyard_access_token_fetches_total", "result=\"unreachable\"")
            + stat(s, "switchyard_access_token_fetches_total", "result=\"http_error\"")
    };
    while failed(&stack) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no fetch was tried");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = chat(&stack, "down", order()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("keyed"));
    assert!(stack.gcloud.received_for("down").is_empty(), "no attempt reached gcloud without a token");
    assert_token_stayed_home(&stack, "down", &r);
    assert!(stat(&stack, "switchyard_access_token_missing_total", "provider=\"gcloud\"") >= 1);
    assert_eq!(stack.metadata.issuer.fetches(), 0);
    // Pinned to it alone, the caller gets a 503 in its shape, without waiting for a fetch.
    let r = chat(&stack, "down-only", json!({"only": ["gcloud"]})).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "credential_unavailable", "{}", r.text());
    assert!(stack.gcloud.received_for("down-only").is_empty());
    stack.metadata.set_down(false);
    // The back-off is at most 10 s.
    until_gcloud_serves(&stack, "up", Duration::from_secs(20)).await;
    assert!(stack.metadata.issuer.fetches() >= 1);
}

#[tokio::test]
async fn wasm_fetched_once_then_an_expired_token_is_failed_over() {
    fetched_once_then_an_expired_token_is_failed_over(Build::Wasm, "gtoken-once-wasm").await;
}

#[tokio::test]
async fn native_fetched_once_then_an_expired_token_is_failed_over() {
    fetched_once_then_an_expired_token_is_failed_over(Build::Native, "gtoken-once-native").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_a_token_expiring_under_load_fails_no_request() {
    a_token_expiring_under_load_fails_no_request(Build::Wasm, "gtoken-load-wasm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_a_token_expiring_under_load_fails_no_request() {
    a_token_expiring_under_load_fails_no_request(Build::Native, "gtoken-load-native").await;
}

#[tokio::test]
async fn wasm_the_metadata_server_down_at_start_fails_the_provider_over_until_it_is_up() {
    the_metadata_server_down_at_start_fails_the_provider_over_until_it_is_up(Build::Wasm, "gtoken-down-wasm").await;
}

#[tokio::test]
async fn native_the_metadata_server_down_at_start_fails_the_provider_over_until_it_is_up() {
    the_metadata_server_down_at_start_fails_the_provider_over_until_it_is_up(Build::Native, "gtoken-down-native").await;
}
