//! Presets in real Envoy: `@preset/<name>` as the model, a `preset` field beside the request's
//! own settings (the request narrows the preset), the preset's parameters reaching the provider,
//! an unknown preset named in the error, and presets in `GET /v1/models`.

mod common;

use common::msg;
use serde_json::{json, Value};
use switchyard_integration::client::send;

fn stack() -> &'static common::Stack {
    static STACK: std::sync::OnceLock<common::Stack> = std::sync::OnceLock::new();
    STACK.get_or_init(|| {
        let endpoint = |provider: &str, price: f64| {
            json!({"provider": provider, "upstream_model": format!("{provider}-one"), "pricing": {"prompt": price, "completion": price}})
        };
        let catalog = json!({
            "providers": {
                "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}},
                "gamma": {"cluster": "c_gamma", "authority": "gamma.example", "credential": {"value": "key-gamma"}},
                "delta": {"cluster": "c_delta", "authority": "delta.example", "credential": {"value": "key-delta"}}
            },
            "models": {"p/one": {"endpoints": [endpoint("alpha", 0.1), endpoint("gamma", 0.5), endpoint("delta", 1.0)]}},
            "presets": {
                "careful": {"model": "p/one", "provider": {"only": ["gamma", "delta"], "sort": "price"},
                            "parameters": {"temperature": 0.3, "max_tokens": 64}}
            }
        });
        common::launch("presets", catalog, |cfg| cfg.per_try_idle_timeout_ms = 1_000)
    })
}

#[tokio::test]
async fn a_preset_routes_and_sets_what_the_request_leaves_out() {
    let s = stack();
    let r =
        s.chat("preset-model", json!({"model": "@preset/careful", "messages": msg("hi"), "temperature": 0.9})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "p/one");
    // The preset's `only` excludes alpha (the cheapest); its sort picks gamma.
    let (who, got) = s.only_receiver("preset-model");
    assert_eq!(who, "gamma");
    let sent = got.json();
    assert_eq!(sent["model"], "gamma-one");
    assert_eq!(sent["temperature"], 0.9, "the request's own parameter wins: {sent}");
    assert_eq!(sent["max_tokens"], 64, "the preset adds what the request does not set: {sent}");
    assert!(sent.get("preset").is_none() && sent.get("provider").is_none(), "{sent}");

    // A `preset` field beside the request's own provider: the request narrows the preset.
    let body =
        json!({"model": "p/one", "preset": "careful", "provider": {"only": ["alpha", "delta"]}, "messages": msg("hi")});
    let r = s.chat("preset-field", body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.only_receiver("preset-field").0, "delta", "only alpha∩{{gamma, delta}} = delta");
}

#[tokio::test]
async fn an_unknown_preset_is_named_and_presets_are_listed() {
    let s = stack();
    let r = s.chat("preset-unknown", json!({"model": "@preset/nope", "messages": msg("hi")})).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["code"], "preset_not_found", "{e}");
    assert_eq!(e["param"], "model");
    assert!(e["message"].as_str().unwrap_or_default().contains("\"nope\""), "{e}");
    assert!(s.received("preset-unknown").is_empty());

    let r = send(s.addr, "GET", "/v1/models", &[("x-test-id", "preset-list")], b"").await.unwrap();
    assert_eq!(r.status, 200);
    let v: Value = r.json();
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, vec!["p/one", "@preset/careful"], "{v}");
}
