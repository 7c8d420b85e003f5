//! The auto router in real Envoy: `model: "auto"` / `"openrouter/auto"` lands code, chat and
//! long-context prompts on the models the catalog's `auto` section configures (see
//! `add_auto_router` in common/mod.rs), `allowed_models` and `cost_tier` restrict the choice,
//! image requests never reach a text-only model, and a failing pick falls back to the next.

mod common;

use common::{msg, stack};
use serde_json::{json, Value};

const CODE: &str =
    "Why does this panic?\n```rust\nfn main() {\n    let v: Vec<u8> = vec![];\n    println!(\"{}\", v[0]);\n}\n```";
const SMALL_TALK: &str = "Hey! How was your weekend? We went hiking and the weather was lovely.";

fn plugin(cost_tier: Option<&str>, allowed: &[&str]) -> Value {
    let mut p = json!({"id": "auto-router"});
    if let Some(t) = cost_tier {
        p["cost_tier"] = json!(t);
    }
    if !allowed.is_empty() {
        p["allowed_models"] = json!(allowed);
    }
    json!([p])
}

/// Asserts the request was served by `provider` with `model`, and that provider alone saw it.
fn assert_served(s: &common::Stack, id: &str, r: &switchyard_integration::client::Reply, provider: &str, model: &str) {
    assert_eq!(r.status, 200, "{id}: {}", r.text());
    assert_eq!(r.header("x-switchyard-model"), Some(model), "{id}");
    assert_eq!(r.header("x-switchyard-provider"), Some(provider), "{id}");
    // The answer names the chosen catalog model, not the provider's id for it.
    assert_eq!(r.json()["model"], model, "{id}");
    let (who, got) = s.only_receiver(id);
    assert_eq!(who, provider, "{id}");
    let sent = got.json();
    // The provider sees its own upstream id and no routing fields.
    assert!(sent["model"].as_str().is_some_and(|m| m.starts_with(provider)), "{id}: {sent}");
    assert!(sent.get("plugins").is_none() && sent.get("models").is_none(), "{id}: {sent}");
}

#[tokio::test]
async fn code_chat_and_long_context_land_on_the_configured_models() {
    let s = stack();
    let r = s.chat("auto-code", json!({"model": "auto", "messages": msg(CODE)})).await;
    assert_served(s, "auto-code", &r, "alpha", "auto/coder");
    assert_eq!(r.header("x-switchyard-strategy"), Some("auto:code"));

    let r = s.chat("auto-chat", json!({"model": "openrouter/auto", "messages": msg(SMALL_TALK)})).await;
    assert_served(s, "auto-chat", &r, "beta", "auto/chat-mini");
    assert_eq!(r.header("x-switchyard-strategy"), Some("auto:chat"));
    assert_eq!(r.json()["provider"], "beta");

    // ~10k tokens (the test catalog's long_context_tokens is 8000): only auto/long holds it.
    let doc = "The committee reviewed the quarterly figures and found nothing unusual. ".repeat(560);
    let r =
        s.chat("auto-long", json!({"model": "auto", "messages": msg(&format!("Summarise this report:\n{doc}"))})).await;
    assert_served(s, "auto-long", &r, "gamma", "auto/long");
    assert_eq!(r.header("x-switchyard-strategy"), Some("auto:long_context"));
    assert_eq!(s.only_receiver("auto-long").1.path, "/openai/v1/chat/completions");
}

#[tokio::test]
async fn allowed_models_and_cost_tier_restrict_the_choice() {
    let s = stack();
    // The code task's best model is auto/coder; patterns leave only auto/chat-pro.
    let r = s
        .chat(
            "auto-allowed",
            json!({"model": "auto", "messages": msg(CODE), "plugins": plugin(None, &["auto/chat-*"])}),
        )
        .await;
    assert_served(s, "auto-allowed", &r, "delta", "auto/chat-pro");
    // A medium ceiling excludes auto/coder (high).
    let r = s
        .chat("auto-medium", json!({"model": "auto", "messages": msg(CODE), "plugins": plugin(Some("medium"), &[])}))
        .await;
    assert_served(s, "auto-medium", &r, "delta", "auto/chat-pro");
    // Nothing within both: 404 naming the constraint that emptied the set; nothing was sent.
    let r = s
        .chat(
            "auto-none-tier",
            json!({"model": "auto", "messages": msg(CODE), "plugins": plugin(Some("low"), &["auto/coder"])}),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text());
    let e = r.json();
    assert_eq!(e["error"]["code"], "no_endpoints");
    assert_eq!(e["error"]["metadata"]["constraint"], "cost_tier");
    assert!(s.received("auto-none-tier").is_empty());
    let r = s
        .chat(
            "auto-none-pattern",
            json!({"model": "auto", "messages": msg(CODE), "plugins": plugin(None, &["x-ai/*"])}),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["metadata"]["constraint"], "allowed_models");
    assert!(r.json()["error"]["message"].as_str().unwrap_or("").contains("x-ai/*"));
    // A bad plugin value is a 400 naming it.
    let r = s
        .chat("auto-bad-tier", json!({"model": "auto", "messages": msg(CODE), "plugins": plugin(Some("cheap"), &[])}))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "plugins[0].cost_tier");
}

#[tokio::test]
async fn an_image_request_never_lands_on_a_text_only_model() {
    let s = stack();
    let image = json!([{"role": "user", "content": [
        {"type": "text", "text": "What breed is this dog?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    ]}]);
    // Without the image the chat task's first pick is the text-only auto/chat-mini (beta).
    let r = s.chat("auto-img", json!({"model": "auto", "messages": image.clone()})).await;
    assert_served(s, "auto-img", &r, "delta", "auto/chat-pro");
    // The image-capable model failing does not send the image to the text-only one.
    let r = s
        .chat_with(
            "auto-img-fail",
            &[("x-mock-behavior", "delta=503")],
            json!({"model": "auto", "messages": image.clone()}),
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.text());
    let got: Vec<String> = s.received("auto-img-fail").into_iter().map(|(p, _)| p).collect();
    assert_eq!(got, vec!["delta"]);
    // Only text-only models allowed: 404 naming the unmet need.
    let r = s
        .chat(
            "auto-img-none",
            json!({"model": "auto", "messages": image, "plugins": plugin(None, &["auto/chat-mini"])}),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["metadata"]["constraint"], "input_modalities:image");
    assert!(s.received("auto-img-none").is_empty());
}

#[tokio::test]
async fn a_failing_chosen_model_falls_back_to_the_next_pick() {
    let s = stack();
    let body = json!({"model": "auto", "messages": msg(CODE), "plugins": plugin(Some("max"), &["fail/*"])});
    let r = s.chat_with("auto-fo", &[("x-mock-behavior", "alpha=503")], body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-model"), Some("fail/second"));
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("2"));
    assert_eq!(r.header("x-switchyard-strategy"), Some("auto:code"));
    let mut got: Vec<(String, Value)> = s.received("auto-fo").into_iter().map(|(p, r)| (p, r.json())).collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].0.as_str(), &got[0].1["model"]), ("alpha", &json!("alpha-fail-primary")));
    assert_eq!((got[1].0.as_str(), &got[1].1["model"]), ("beta", &json!("beta-fail-second")));
    // A refusal (400, e.g. context length) of the first pick also moves on to the next.
    let r = s.chat_with("auto-fo-400", &[("x-mock-behavior", "alpha=400")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-model"), Some("fail/second"));
}

#[tokio::test]
async fn the_debug_header_explains_the_choice() {
    let s = stack();
    let r = s
        .chat_with(
            "auto-debug",
            &[("x-switchyard-debug", "1")],
            json!({"model": "auto", "messages": msg(CODE), "plugins": plugin(None, &["auto/*"])}),
        )
        .await;
    assert_eq!(r.status, 200);
    let explain: Value = serde_json::from_str(r.header("x-switchyard-auto").unwrap_or("null")).unwrap_or(Value::Null);
    assert_eq!(explain["task"], "code", "{explain}");
    assert_eq!(explain["cost_tier"], "high");
    assert!(explain["signals"].as_array().is_some_and(|s| s.iter().any(|x| x == "code_fences:1")), "{explain}");
    let c = explain["candidates"].as_array().cloned().unwrap_or_default();
    let status = |m: &str| c.iter().find(|x| x["model"] == m).map(|x| x["status"].clone()).unwrap_or(Value::Null);
    assert_eq!(status("auto/coder"), "planned");
    assert_eq!(status("auto/chat-pro"), "planned");
    assert_eq!(status("fail/primary"), "excluded:allowed_models");
    assert_eq!(c[0]["model"], "auto/coder");
    // The endpoint candidates list the planned models' endpoints in order.
    let eps: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap_or("[]")).unwrap_or(Value::Null);
    let models: Vec<&str> =
        eps.as_array().map(|a| a.iter().filter_map(|e| e["model"].as_str()).collect()).unwrap_or_default();
    assert_eq!(models, vec!["auto/coder", "auto/chat-pro"]);
    // Without the debug request header there is no explanation.
    let r = s.chat("auto-nodebug", json!({"model": "auto", "messages": msg(CODE)})).await;
    assert!(r.header("x-switchyard-auto").is_none());
}

#[tokio::test]
async fn a_model_in_outage_ranks_after_healthy_ones() {
    let s = stack();
    let body = json!({"model": "auto", "messages": msg(CODE), "plugins": plugin(Some("max"), &["health/*"])});
    // Two failing first picks: health/a's only endpoint is in a significant outage (a run of
    // failures its peers make improbable; with no peers, two in a row).
    for i in 0..2 {
        let id = format!("auto-health-{i}");
        let r = s.chat_with(&id, &[("x-mock-behavior", "alpha=503")], body.clone()).await;
        assert_eq!(r.header("x-switchyard-model"), Some("health/b"), "{id}: {}", r.text());
        assert_eq!(r.header("x-switchyard-attempts"), Some("2"), "{id}");
    }
    // Now health/b is tried first, without touching the model in outage.
    let r = s.chat_with("auto-health-after", &[("x-switchyard-debug", "1")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-model"), Some("health/b"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("1"));
    assert_eq!(s.only_receiver("auto-health-after").0, "beta");
    let explain: Value = serde_json::from_str(r.header("x-switchyard-auto").unwrap_or("null")).unwrap_or(Value::Null);
    let c = explain["candidates"].as_array().cloned().unwrap_or_default();
    assert_eq!(c.first().map(|x| x["model"].clone()), Some(json!("health/b")), "{explain}");
    let a = c.iter().find(|x| x["model"] == "health/a").cloned().unwrap_or(Value::Null);
    assert_eq!((a["healthy"].clone(), a["status"].clone()), (json!(false), json!("planned")), "{explain}");
}

#[tokio::test]
async fn a_streamed_auto_request_is_routed_and_streams() {
    let s = stack();
    let r = s.chat("auto-stream", json!({"model": "auto", "stream": true, "messages": msg(SMALL_TALK)})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("x-switchyard-model"), Some("auto/chat-mini"));
    assert_eq!(r.header("x-switchyard-strategy"), Some("auto:chat"));
    let text = r.text();
    assert!(text.contains("data: ") && text.contains("[DONE]"), "{text}");
    // Every chunk names the chosen catalog model, never the provider's id for it.
    assert!(text.contains("\"model\":\"auto/chat-mini\"") && !text.contains("beta-chat-mini"), "{text}");
    let (who, got) = s.only_receiver("auto-stream");
    assert_eq!(who, "beta");
    assert_eq!(got.json()["stream"], true);
}

/// A catalog with no `auto` section: `model: "auto"` still routes, by the default ranking.
fn unconfigured() -> &'static common::Stack {
    static STACK: std::sync::OnceLock<common::Stack> = std::sync::OnceLock::new();
    STACK.get_or_init(|| {
        let endpoint = |provider: &str, name: &str, price: f64| {
            json!({"endpoints": [{"provider": provider, "upstream_model": format!("{provider}-{name}"),
                                  "pricing": {"prompt": price, "completion": price}}]})
        };
        let catalog = json!({
            "providers": {
                "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}},
                "gamma": {"cluster": "c_gamma", "authority": "gamma.example", "credential": {"value": "key-gamma"}},
                "delta": {"cluster": "c_delta", "authority": "delta.example", "credential": {"value": "key-delta"}}
            },
            "models": {
                "plain/cheap": endpoint("alpha", "cheap", 0.1),
                "plain/mid": endpoint("delta", "mid", 1.0),
                "plain/dear": endpoint("gamma", "dear", 10.0)
            }
        });
        common::launch("auto-default", catalog, |cfg| cfg.per_try_idle_timeout_ms = 1_000)
    })
}

#[tokio::test]
async fn auto_without_an_auto_section_ranks_the_catalog_by_the_default_rules() {
    let s = unconfigured();
    // Chat: the cheapest model first.
    let r = s.chat("auto-default-chat", json!({"model": "openrouter/auto", "messages": msg(SMALL_TALK)})).await;
    assert_served(s, "auto-default-chat", &r, "alpha", "plain/cheap");
    assert_eq!(r.header("x-switchyard-strategy"), Some("auto:chat"));
    // Code: the dearest first.
    let r = s.chat("auto-default-code", json!({"model": "auto", "messages": msg(CODE)})).await;
    assert_served(s, "auto-default-code", &r, "gamma", "plain/dear");
    assert_eq!(r.header("x-switchyard-strategy"), Some("auto:code"));
    // excluded_models wins over allowed_models; the next of the default list serves.
    let plugins = json!([{"id": "auto-router", "allowed_models": ["plain/*"], "excluded_models": ["plain/dear"]}]);
    let r = s.chat("auto-default-excluded", json!({"model": "auto", "messages": msg(CODE), "plugins": plugins})).await;
    assert_served(s, "auto-default-excluded", &r, "delta", "plain/mid");
    // A failing pick falls back to the next model of the default list.
    let r = s
        .chat_with(
            "auto-default-fo",
            &[("x-mock-behavior", "alpha=503")],
            json!({"model": "auto", "messages": msg(SMALL_TALK)}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "plain/mid", "{}", r.text());
}
