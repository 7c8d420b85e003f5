//! Microsoft Entra tokens for Azure OpenAI (`credential.azure_managed_identity`) in real Envoy,
//! on the Wasm and the native build (`--concurrency 2`): a mock IMDS issues tokens for the VM's
//! user-assigned identity and counts its fetches (`mock/azure_imds.rs`); the mock provider
//! `azure` is GPT on an Azure OpenAI deployment that takes only a live token that IMDS issued
//! (`mock/azure.rs`: no `api-key` is sent, an unknown or expired token is Azure's 401); `keyed`
//! is an ordinary keyed provider to fail over to.
//!
//! - GPT on Azure by token, plain and streamed; one fetch serves both workers; an expired token
//!   Azure refuses is failed over;
//! - IMDS down at start: `azure` is skipped at once (counted), then used once IMDS is up.
//!
//! The lease, the refresh under load and the back-off are the same code as Google's tokens
//! (`google_tokens.rs` runs them under load).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::Build;
use switchyard_integration::mock::azure_imds::{self, CLIENT_ID};
use switchyard_integration::mock::gcp_metadata::MetadataServer;
use switchyard_integration::mock::Behavior;
use switchyard_integration::token_stack::{self, TokenStack};

const DEPLOYMENT: &str = "gpt-41";

fn catalog() -> Value {
    json!({
        "providers": {
            "azure": {"cluster": "c_azure", "authority": "switchyard-eastus2.openai.azure.com", "kind": "azure",
                      "credential": {"azure_managed_identity": {"cluster": "azure_imds", "client_id": CLIENT_ID,
                                                                "timeout_ms": 2000}}},
            "keyed": {"cluster": "c_keyed", "authority": "keyed.example", "credential": {"value": "key-keyed"}}
        },
        "models": {"openai/gpt-4.1": {"endpoints": [
            {"provider": "azure", "upstream_model": DEPLOYMENT, "pricing": {"prompt": 1, "completion": 4}},
            {"provider": "keyed", "upstream_model": "k-gpt", "pricing": {"prompt": 2, "completion": 8}}
        ]}},
        "routing": {"default_policy": "price_weighted"}
    })
}

type Stack = TokenStack<MetadataServer>;

/// A stack of its own: IMDS (down at start if `down`), the two providers and Envoy.
fn start(build: Build, down: bool, tag: &'static str) -> Stack {
    token_stack::start(
        tag,
        build,
        catalog(),
        "azure",
        move || async move {
            let imds = azure_imds::start(Duration::from_secs(3_600)).await.expect("imds");
            imds.set_down(down);
            let behavior = Behavior {
                azure: true,
                azure_tokens: Some(std::sync::Arc::clone(&imds.issuer)),
                ..Behavior::default()
            };
            (imds, behavior)
        },
        |imds, cfg| {
            cfg.metadata_server = Some(("127.0.0.1".into(), imds.addr.port()));
            Vec::new()
        },
    )
}

async fn chat(stack: &Stack, id: &str, provider: Value, stream: bool) -> Reply {
    let body = json!({"model": "openai/gpt-4.1", "messages": [{"role": "user", "content": "hi"}],
                      "provider": provider, "stream": stream});
    // The caller's own keys (an OpenAI key, and an Azure one) never reach a provider.
    let headers = [("x-test-id", id), ("authorization", "Bearer caller-key"), ("api-key", "caller-azure-key")];
    post_json(stack.addr, "/v1/chat/completions", &headers, &body).await.unwrap_or_else(|e| panic!("{id}: {e}"))
}

fn order() -> Value {
    json!({"order": ["azure", "keyed"]})
}

/// Waits (up to `within`) until a request ordered azure-first is served by azure.
async fn until_azure_serves(stack: &Stack, id: &str, within: Duration) {
    stack.until_served_by("azure", within, || chat(stack, id, order(), false)).await;
}

/// Azure got the token as a bearer on its deployments path and no key; nothing of the token
/// reached the caller or the other provider, nor the caller's keys anyone.
fn assert_token_stayed_home(stack: &Stack, id: &str, reply: &Reply) {
    let caller_sees = format!("{:?}{}", reply.headers, reply.text());
    assert!(!caller_sees.contains("eyJ0eXAi"), "{caller_sees}");
    for r in stack.keyed.received_for(id) {
        assert!(r.headers.iter().all(|(_, v)| !v.contains("eyJ0eXAi")), "{:?}", r.headers);
        assert_eq!(r.header("authorization"), Some("Bearer key-keyed"));
        assert_eq!(r.header("api-key"), None);
    }
    for r in stack.cloud.received_for(id) {
        let auth = r.header("authorization").unwrap_or_default();
        assert!(auth.starts_with("Bearer eyJ0eXAi") && auth.contains("mock-"), "{auth}");
        assert_eq!(r.header("api-key"), None, "no api-key beside the token");
        assert_eq!(r.path, format!("/openai/deployments/{DEPLOYMENT}/chat/completions?api-version=2024-10-21"));
        assert!(r.headers.iter().all(|(_, v)| !v.contains("key-keyed") && !v.contains("caller-")), "{:?}", r.headers);
    }
}

async fn gpt_on_azure_by_token_fetched_once_and_an_expired_token_failed_over(build: Build, tag: &'static str) {
    let stack = start(build, false, tag);
    until_azure_serves(&stack, "once-warm", Duration::from_secs(10)).await;
    // Both workers tick every 100 ms; give them many ticks, and traffic on both.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for i in 0..20 {
        let id = format!("once-{i}");
        let streamed = i % 2 == 1;
        let r = chat(&stack, &id, json!({"only": ["azure"]}), streamed).await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("azure"));
        if streamed {
            let text = r.text();
            assert!(!text.contains("prompt_filter_results"), "{text}");
            assert!(text.contains("tok0") && text.trim_end().ends_with("data: [DONE]"), "{text}");
        } else {
            assert_eq!(r.json()["choices"][0]["message"]["content"], "Hello from azure");
        }
        assert_token_stayed_home(&stack, &id, &r);
    }
    assert_eq!(stack.source.issuer.fetches(), 1, "one fetch for both workers");
    assert_eq!(stack.stat("switchyard_access_token_fetches_total", "result=\"ok\""), 1);
    assert_eq!(stack.source.issuer.checks().1, 0, "no token refused");
    // The token expires at Entra while the proxy still holds it: Azure's 401, failed over.
    stack.source.issuer.expire_all();
    let r = chat(&stack, "expired", order(), false).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("keyed"));
    assert_eq!(stack.cloud.received_for("expired").len(), 1, "azure was tried and refused it");
    assert_eq!(stack.keyed.received_for("expired").len(), 1);
    assert!(r.header("x-switchyard-attempt-log").is_some_and(|l| l.contains("azure") && l.contains("401")));
    assert_eq!(stack.source.issuer.checks().1, 1, "the expired token was refused once");
    assert_token_stayed_home(&stack, "expired", &r);
}

async fn imds_down_at_start_fails_azure_over_until_it_is_up(build: Build, tag: &'static str) {
    let stack = start(build, true, tag);
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
    let r = chat(&stack, "down", order(), true).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("keyed"));
    assert!(stack.cloud.received_for("down").is_empty(), "no attempt reached azure without a token");
    assert_token_stayed_home(&stack, "down", &r);
    assert!(stack.stat("switchyard_access_token_missing_total", "provider=\"azure\"") >= 1);
    assert_eq!(stack.source.issuer.fetches(), 0);
    // Pinned to it alone, the caller gets a 503 in its shape, without waiting for a fetch.
    let r = chat(&stack, "down-only", json!({"only": ["azure"]}), false).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "credential_unavailable", "{}", r.text());
    assert!(stack.cloud.received_for("down-only").is_empty());
    stack.source.set_down(false);
    // The back-off is at most 10 s.
    until_azure_serves(&stack, "up", Duration::from_secs(20)).await;
    assert!(stack.source.issuer.fetches() >= 1);
    let r = chat(&stack, "up-check", order(), false).await;
    assert_token_stayed_home(&stack, "up-check", &r);
}

#[tokio::test]
async fn wasm_gpt_on_azure_by_token_fetched_once_and_an_expired_token_failed_over() {
    gpt_on_azure_by_token_fetched_once_and_an_expired_token_failed_over(Build::Wasm, "aztoken-once-wasm").await;
}

#[tokio::test]
async fn native_gpt_on_azure_by_token_fetched_once_and_an_expired_token_failed_over() {
    gpt_on_azure_by_token_fetched_once_and_an_expired_token_failed_over(Build::Native, "aztoken-once-native").await;
}

#[tokio::test]
async fn wasm_imds_down_at_start_fails_azure_over_until_it_is_up() {
    imds_down_at_start_fails_azure_over_until_it_is_up(Build::Wasm, "aztoken-down-wasm").await;
}

#[tokio::test]
async fn native_imds_down_at_start_fails_azure_over_until_it_is_up() {
    imds_down_at_start_fails_azure_over_until_it_is_up(Build::Native, "aztoken-down-native").await;
}
