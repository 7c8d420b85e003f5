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

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_integration::client::Reply;
use switchyard_integration::envoy::Build;
use switchyard_integration::mock::gcp_metadata::MetadataServer;
use switchyard_integration::mock::Behavior;
use switchyard_integration::token_stack::{self, until_gcloud_serves, TokenStack};

fn catalog() -> Value {
    token_stack::claude_on_vertex_catalog(json!({"google_metadata": {"cluster": "gcp_metadata", "timeout_ms": 2000}}))
}

type Stack = TokenStack<MetadataServer>;

/// A stack of its own: the metadata server (tokens living `life`, down at start if `down`), the
/// two providers and Envoy.
fn start(build: Build, life: Duration, down: bool, tag: &'static str) -> Stack {
    token_stack::start(
        tag,
        build,
        catalog(),
        "gcloud",
        move || async move {
            let metadata = MetadataServer::start(life, "vertex@proj.iam.gserviceaccount.com").await.expect("metadata");
            metadata.set_down(down);
            let behavior =
                Behavior { google_tokens: Some(std::sync::Arc::clone(&metadata.issuer)), ..Behavior::default() };
            (metadata, behavior)
        },
        |metadata, cfg| {
            cfg.metadata_server = Some(("127.0.0.1".into(), metadata.addr.port()));
            Vec::new()
        },
    )
}

async fn chat(stack: &Stack, id: &str, provider: Value) -> Reply {
    token_stack::chat_g(stack.addr, id, provider).await
}

fn order() -> Value {
    json!({"order": ["gcloud", "keyed"]})
}

/// Nothing of the token reached the caller or the other provider, nor the caller's key anyone.
fn assert_token_stayed_home(stack: &Stack, id: &str, reply: &Reply) {
    let caller_sees = format!("{:?}{}", reply.headers, reply.text());
    assert!(!caller_sees.contains("ya29."), "{caller_sees}");
    for r in stack.keyed.received_for(id) {
        assert!(r.headers.iter().all(|(_, v)| !v.contains("ya29.")), "{:?}", r.headers);
        assert_eq!(r.header("authorization"), Some("Bearer key-keyed"));
    }
    for r in stack.cloud.received_for(id) {
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
    assert_eq!(stack.source.issuer.fetches(), 1, "one fetch for both workers");
    assert_eq!(stack.stat("switchyard_access_token_fetches_total", "result=\"ok\""), 1);
    assert_eq!(stack.source.issuer.checks().1, 0, "no token refused");
    // The token expires at Google while the proxy still holds it: refused, failed over.
    stack.source.issuer.expire_all();
    let r = chat(&stack, "expired", order()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("keyed"));
    assert_eq!(stack.cloud.received_for("expired").len(), 1, "gcloud was tried and refused it");
    assert_eq!(stack.keyed.received_for("expired").len(), 1);
    assert_token_stayed_home(&stack, "expired", &r);
}

async fn a_token_expiring_under_load_fails_no_request(build: Build, tag: &'static str) {
    let stack = std::sync::Arc::new(start(build, Duration::from_secs(6), false, tag));
    until_gcloud_serves(&stack, "load-warm", Duration::from_secs(10)).await;
    let fetched_before = stack.source.issuer.fetches();
    let refused_before = stack.source.issuer.checks().1;
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
    let fetched = stack.source.issuer.fetches() - fetched_before;
    let (accepted, refused) = stack.source.issuer.checks();
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
        s.stat("switchyard_access_token_fetches_total", "result=\"unreachable\"")
            + s.stat("switchyard_access_token_fetches_total", "result=\"http_error\"")
    };
    while failed(&stack) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no fetch was tried");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = chat(&stack, "down", order()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("keyed"));
    assert!(stack.cloud.received_for("down").is_empty(), "no attempt reached gcloud without a token");
    assert_token_stayed_home(&stack, "down", &r);
    assert!(stack.stat("switchyard_access_token_missing_total", "provider=\"gcloud\"") >= 1);
    assert_eq!(stack.source.issuer.fetches(), 0);
    // Pinned to it alone, the caller gets a 503 in its shape, without waiting for a fetch.
    let r = chat(&stack, "down-only", json!({"only": ["gcloud"]})).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "credential_unavailable", "{}", r.text());
    assert!(stack.cloud.received_for("down-only").is_empty());
    stack.source.set_down(false);
    // The back-off is at most 10 s.
    until_gcloud_serves(&stack, "up", Duration::from_secs(20)).await;
    assert!(stack.source.issuer.fetches() >= 1);
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
