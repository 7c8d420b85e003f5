//! Streaming passes through unbuffered, and an invalid plugin configuration stops Envoy from
//! serving with a log line naming the field.

mod common;

use std::time::Duration;

use common::{msg, stack, test_catalog};
use serde_json::json;
use switchyard_integration::envoy::{ClusterSpec, Envoy, StackConfig};
use switchyard_integration::mock::Behavior;

#[tokio::test]
async fn sse_chunks_reach_the_client_as_the_provider_sends_them() {
    let s = stack();
    // delta sends its first chunk after 50 ms, then one every 300 ms.
    s.provider("delta").set_behavior(Behavior {
        ttft: Duration::from_millis(50),
        chunk_interval: Duration::from_millis(300),
        chunks: 5,
        ..Behavior::default()
    });
    let r = s
        .chat(
            "stream",
            json!({"model": "test/basic", "stream": true, "messages": msg("x"),
        "provider": {"order": ["delta"], "allow_fallbacks": false}}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("x-switchyard-provider"), Some("delta"));
    let text = r.text();
    assert!(text.contains("tok0") && text.contains("tok4") && text.trim_end().ends_with("data: [DONE]"), "{text}");
    // Each event is rewritten as it passes: the catalog model id and the provider, never the
    // provider's own model id.
    assert!(text.contains(r#"data: {"provider":"delta","#) && text.contains(r#""model":"test/basic""#), "{text}");
    assert!(!text.contains("delta-basic"), "{text}");
    // Unbuffered: the client saw several separate chunks, the first long before the last
    // (the provider spreads 5 chunks over 1.2 s; a buffering proxy would deliver one lump).
    let first_tok = r.chunks.iter().position(|(_, c)| String::from_utf8_lossy(c).contains("tok0")).unwrap();
    let last_tok = r.chunks.iter().position(|(_, c)| String::from_utf8_lossy(c).contains("tok4")).unwrap();
    assert!(last_tok > first_tok, "tok0 and tok4 arrived in one chunk: {:?}", r.chunks);
    let (t_first, t_last) = (r.chunks[first_tok].0, r.chunks[last_tok].0);
    assert!(t_last >= t_first + Duration::from_millis(900), "first {t_first:?} last {t_last:?}");
    let (who, got) = s.only_receiver("stream");
    assert_eq!(who, "delta");
    assert_eq!(got.json()["stream"], true);
}

#[test]
fn invalid_configuration_is_rejected_naming_the_field() {
    let mut catalog = test_catalog();
    catalog["models"]["test/basic"]["endpoints"][0]["quantization"] = json!("fp9");
    let mut cfg = StackConfig::new(catalog, vec![ClusterSpec { name: "c_alpha".into(), port: 9 }], None);
    cfg.env_keys = vec!["SY_TEST_BETA_KEY".into()];
    let err = match Envoy::start_with_env(&cfg, "bad-config", &[("SY_TEST_BETA_KEY", "k")]) {
        Ok(_) => panic!("Envoy must not serve with an invalid Switchyard configuration"),
        Err(e) => e,
    };
    assert!(
        err.contains("models[\\\"test/basic\\\"].endpoints[0].quantization")
            || err.contains("models[\"test/basic\"].endpoints[0].quantization"),
        "{err}"
    );
    assert!(err.contains("fp9"), "{err}");
}
