//! The real-provider configuration rendered from `catalog/switchyard.json`, pointed at local
//! HTTPS mock providers that present certificates for the real host names signed by a test CA
//! (Envoy trusts only that CA here instead of the system bundle). Shows: TLS with SNI and name
//! validation, HTTP/2 by ALPN where the provider offers it and HTTP/1.1 where it does not, each
//! provider's key and path prefix; a wrong certificate (wrong name, untrusted CA) fails the
//! attempt and the request fails over; nothing is ever sent in clear text; Vertex AI takes an
//! access token from a (mock) metadata server, as the catalog's `google_metadata` says.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};
use switchyard_integration::catalog::{default_catalog_path, Catalog};
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::{wasm_path, Envoy};
use switchyard_integration::mock::gcp_metadata::{MetadataServer, TokenIssuer};
use switchyard_integration::mock::{Behavior, MockProvider, RawListener};
use switchyard_integration::tls::TestCa;

struct Stack {
    addr: SocketAddr,
    admin: SocketAddr,
    providers: BTreeMap<String, MockProvider>,
    /// groq's address: a listener that only records bytes.
    sniffer: RawListener,
    /// The tokens the mock metadata server issued (Vertex takes only those).
    tokens: Arc<TokenIssuer>,
    hosts: BTreeMap<String, String>,
}

static STACK: OnceLock<Stack> = OnceLock::new();

fn stack() -> &'static Stack {
    STACK.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let catalog = Catalog::load(&default_catalog_path()).unwrap();
            let dir = switchyard_integration::envoy::repo_root().join(".work");
            std::fs::create_dir_all(&dir).unwrap();
            let ca = TestCa::new("Switchyard test CA").unwrap();
            let ca_file = dir.join(format!("tls-test-ca-{}.pem", std::process::id()));
            ca.write_pem(&ca_file).unwrap();
            let rogue = TestCa::new("Untrusted CA").unwrap();
            let (providers, sniffer, metadata) = rt.block_on(async {
                let metadata = MetadataServer::start(Duration::from_secs(3600), "default").await.unwrap();
                let mut providers = BTreeMap::new();
                for p in &catalog.providers {
                    let (identity, h2) = match p.slug.as_str() {
                        // Only HTTP/1.1 offered: Envoy must fall back by ALPN.
                        "anthropic" => (ca.issue(&p.host).unwrap(), false),
                        // A valid chain for another name.
                        "together" => (ca.issue("api.not-together.test").unwrap(), true),
                        // The right name from a CA Envoy does not trust.
                        "fireworks" => (rogue.issue(&p.host).unwrap(), true),
                        "groq" => continue,
                        _ => (ca.issue(&p.host).unwrap(), true),
                    };
                    // Azure accepts only its own key (the test's, for its credential env).
                    let azure_key =
                        (p.slug == "azure").then(|| format!("key-for-{}", p.credential_env.clone().unwrap()));
                    let mut behavior = Behavior { azure: azure_key.is_some(), azure_key, ..Behavior::default() };
                    if p.slug == "google-vertex" {
                        // Only the mock metadata server's live tokens, for the catalog's project.
                        behavior.google_tokens = Some(Arc::clone(&metadata.issuer));
                        behavior.vertex_project = Some("switchyard-llm".into());
                    }
                    let m = MockProvider::start_tls(&p.slug, 0, behavior, &identity, h2).await.unwrap();
                    providers.insert(p.slug.clone(), m);
                }
                (providers, RawListener::start().await.unwrap(), metadata)
            });
            let mut ports = BTreeMap::new();
            for p in &catalog.providers {
                let port = providers.get(&p.slug).map_or(sniffer.addr.port(), |m| m.addr.port());
                ports.insert(p.slug.clone(), (p.host.clone(), port));
            }
            let mut local = catalog.with_hosts(&ports).with_metadata_server(("127.0.0.1".into(), metadata.addr.port()));
            local.envoy.ca_file = ca_file.to_string_lossy().into_owned();
            let connect_to = local.providers.iter().map(|p| (p.slug.clone(), "127.0.0.1".to_string())).collect();
            let mut cfg = local.envoy_stack(wasm_path(), &connect_to);
            cfg.listener_address = "127.0.0.1".into();
            cfg.listener_port = 0;
            cfg.admin_port = 0;
            cfg.per_try_idle_timeout_ms = 2_000;
            let keys: Vec<(String, String)> =
                local.env_keys().into_iter().map(|k| (k.clone(), format!("key-for-{k}"))).collect();
            let env: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let envoy = Envoy::start_with_env(&cfg, "tls-providers", &env).unwrap();
            let hosts = local.providers.iter().map(|p| (p.slug.clone(), p.host.clone())).collect();
            let tokens = Arc::clone(&metadata.issuer);
            tx.send(Stack { addr: envoy.addr(), admin: envoy.admin, providers, sniffer, tokens, hosts }).unwrap();
            let _keep = (envoy, rt);
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("TLS test stack failed to start (see panic above)")
    })
}

async fn chat(test_id: &str, body: Value) -> Reply {
    post_json(
        stack().addr,
        "/v1/chat/completions",
        &[("x-test-id", test_id), ("authorization", "Bearer caller-secret")],
        &body,
    )
    .await
    .unwrap()
}

fn msg() -> Value {
    json!([{"role": "user", "content": "hello"}])
}

fn received(slug: &str, test_id: &str) -> Vec<switchyard_integration::mock::Received> {
    stack().providers.get(slug).map(|m| m.received_for(test_id)).unwrap_or_default()
}

fn stat(name_suffix: &str, host: &str) -> u64 {
    let (_, body) = switchyard_integration::envoy::http_get(stack().admin, "/stats").unwrap();
    body.lines()
        .filter(|l| l.contains(host) && l.contains(name_suffix))
        .filter_map(|l| l.rsplit(": ").next().and_then(|v| v.trim().parse::<u64>().ok()))
        .sum()
}

#[tokio::test]
async fn h2_provider_gets_the_request_over_tls_and_http2_with_its_own_key() {
    let r = chat("h2", json!({"model": "openai/gpt-4.1", "messages": msg(), "provider": {"order": ["openai"]}})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("openai"));
    let got = received("openai", "h2");
    assert_eq!(got.len(), 1);
    let g = &got[0];
    assert!(g.tls);
    assert_eq!(g.version, "HTTP/2.0");
    assert_eq!(g.header(":authority"), Some("api.openai.com"));
    assert_eq!(g.header(":scheme"), Some("https"));
    assert_eq!(g.path, "/v1/chat/completions");
    assert_eq!(g.header("authorization"), Some("Bearer key-for-OPENAI_API_KEY"));
    assert_eq!(g.json()["model"], "gpt-4.1");

    // Google's OpenAI-compatible endpoint: its own path prefix and key.
    // (Vertex serves Gemini at the same price: pinned, as the price split would pick either.)
    let r = chat(
        "gemini",
        json!({"model": "google/gemini-2.5-flash", "messages": msg(), "provider": {"only": ["google-ai-studio"]}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = received("google-ai-studio", "gemini");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/v1beta/openai/chat/completions");
    assert_eq!(got[0].version, "HTTP/2.0");
    assert_eq!(got[0].header("authorization"), Some("Bearer key-for-GEMINI_API_KEY"));
}

// Azure OpenAI (`kind: azure`): the deployment's path with its api-version, the key in
// `api-key`, the resource's host, over TLS and HTTP/2.
#[tokio::test]
async fn azure_gets_gpt_on_its_deployment_path_with_its_api_key() {
    let r =
        chat("azure", json!({"model": "openai/gpt-4.1", "messages": msg(), "provider": {"order": ["azure"]}})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("azure"));
    let got = received("azure", "azure");
    assert_eq!(got.len(), 1);
    let g = &got[0];
    assert!(g.tls);
    assert_eq!(g.version, "HTTP/2.0");
    assert_eq!(g.header(":authority"), Some(stack().hosts["azure"].as_str()));
    assert_eq!(g.path, "/openai/deployments/gpt-4.1/chat/completions?api-version=2024-10-21");
    assert_eq!(g.header("api-key"), Some("key-for-AZURE_OPENAI_API_KEY"));
    assert_eq!(g.header("authorization"), None);
    assert_eq!(g.json()["model"], "gpt-4.1");
}

#[tokio::test]
async fn provider_without_h2_is_reached_over_http1_by_alpn() {
    let r = chat(
        "h1",
        json!({"model": "anthropic/claude-haiku-4.5", "messages": msg(), "provider": {"only": ["anthropic"]}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = received("anthropic", "h1");
    assert_eq!(got.len(), 1);
    assert!(got[0].tls);
    assert_eq!(got[0].version, "HTTP/1.1");
    assert_eq!(got[0].header("host"), Some("api.anthropic.com"));
    assert_eq!(got[0].header("authorization"), Some("Bearer key-for-ANTHROPIC_API_KEY"));
    assert_eq!(got[0].json()["model"], "claude-haiku-4-5");
}

/// The catalog's Amazon Bedrock provider: Claude over TLS to bedrock-runtime's real name, the
/// attempt signed by Envoy's SigV4 filter with the test kit's keys (the mock recomputes the
/// signature and answers 403 to any other), the inference profile id in the path, Bedrock's
/// body, no key of anyone's; the answer translated back for the OpenAI caller and priced.
#[tokio::test]
async fn claude_on_bedrock_is_signed_by_envoy_over_tls() {
    let r = chat(
        "bedrock",
        json!({"model": "anthropic/claude-sonnet-4.5", "messages": msg(), "provider": {"only": ["amazon-bedrock"]}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("amazon-bedrock"));
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from Bedrock", "{v}");
    assert!(v["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{v}");
    let got = received("amazon-bedrock", "bedrock");
    assert_eq!(got.len(), 1);
    let g = &got[0];
    assert!(g.tls);
    assert_eq!(g.version, "HTTP/2.0");
    assert_eq!(g.header(":authority"), Some(stack().hosts["amazon-bedrock"].as_str()));
    assert_eq!(g.path, "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke");
    let auth = g.header("authorization").unwrap_or_default();
    let key = switchyard_integration::mock::bedrock::ACCESS_KEY;
    assert!(auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={key}/")), "{auth}");
    assert!(auth.contains("/us-east-1/bedrock/aws4_request"), "{auth}");
    assert!(!g.headers.iter().any(|(_, v)| v.contains("key-for-")), "another provider's key: {:?}", g.headers);
    assert_eq!(g.json()["anthropic_version"], "bedrock-2023-05-31");
    assert!(g.json().get("model").is_none());
}

/// The catalog's Vertex AI provider over TLS with a token from the metadata server: until the
/// first fetch lands the provider is skipped (`credential_unavailable` with no fallback), then
/// every attempt carries a live token of that server, for the catalog's project and location.
#[tokio::test]
async fn claude_on_vertex_takes_the_metadata_servers_token_over_tls() {
    let body = json!({"model": "anthropic/claude-sonnet-4.5", "messages": msg(),
                      "provider": {"only": ["google-vertex"], "allow_fallbacks": false}});
    let mut r = chat("vertex", body.clone()).await;
    for _ in 0..100 {
        if r.status == 200 {
            break;
        }
        assert_eq!(r.json()["error"]["code"], "credential_unavailable", "{}", r.text());
        tokio::time::sleep(Duration::from_millis(100)).await;
        r = chat("vertex", body.clone()).await;
    }
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("google-vertex"));
    let got = received("google-vertex", "vertex");
    let g = got.last().expect("Vertex saw the request");
    assert!(g.tls);
    assert_eq!(g.header(":authority"), Some(stack().hosts["google-vertex"].as_str()));
    assert_eq!(
        g.path,
        "/v1/projects/switchyard-llm/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
    );
    assert_eq!(stack().tokens.check(g.header("authorization")), Ok(()), "a live token of the metadata server");
    assert!(stack().tokens.fetches() >= 1);
    assert!(!g.headers.iter().any(|(_, v)| v.contains("key-for-")), "another provider's key: {:?}", g.headers);
}

#[tokio::test]
async fn certificate_for_another_name_fails_the_attempt_and_fails_over() {
    let before = stat("ssl.fail_verify_san", &stack().hosts["together"]);
    let r = chat(
        "wrong-name",
        json!({"model": "meta-llama/llama-3.3-70b-instruct", "messages": msg(),
               "provider": {"order": ["together", "deepinfra"]}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("deepinfra"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("2"));
    assert!(received("together", "wrong-name").is_empty(), "no request may follow a rejected certificate");
    assert_eq!(received("deepinfra", "wrong-name").len(), 1);
    assert!(stat("ssl.fail_verify_san", &stack().hosts["together"]) > before, "Envoy rejected the SAN");
}

#[tokio::test]
async fn certificate_from_an_untrusted_ca_fails_the_attempt_and_fails_over() {
    let r = chat(
        "untrusted",
        json!({"model": "meta-llama/llama-4-maverick", "messages": msg(),
               "provider": {"order": ["fireworks", "deepinfra"]}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("deepinfra"));
    assert!(received("fireworks", "untrusted").is_empty(), "no request may follow an untrusted certificate");
    assert!(stat("ssl.fail_verify_error", &stack().hosts["fireworks"]) > 0);
}

#[tokio::test]
async fn nothing_is_sent_in_clear_text() {
    let r = chat(
        "clear",
        json!({"model": "meta-llama/llama-3.3-70b-instruct", "messages": msg(),
               "provider": {"order": ["groq", "deepinfra"]}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("deepinfra"));
    let conns = stack().sniffer.connections();
    assert!(!conns.is_empty(), "Envoy never connected to groq's address");
    for bytes in conns {
        // A TLS handshake record (ClientHello) carrying the provider's name as SNI ...
        assert!(
            bytes.len() > 5 && bytes[0] == 0x16 && bytes[1] == 0x03,
            "not a TLS record: {:?}",
            &bytes[..bytes.len().min(16)]
        );
        assert!(bytes.windows(12).any(|w| w == b"api.groq.com"), "SNI missing");
        // ... and nothing of the request.
        for secret in [&b"POST"[..], b"chat/completions", b"key-for-GROQ_API_KEY", b"caller-secret", b"llama"] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret),
                "{} sent in clear",
                String::from_utf8_lossy(secret)
            );
        }
    }
}
