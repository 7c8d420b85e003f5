//! The surfaces a caller reaches besides routed requests, through the decision filter on the
//! mock host: model listings in each client's shape and `/v1/messages/count_tokens`.

use std::rc::Rc;

use super::downstream::Stream;
use super::host::Action;
use super::mock::{MockHost, Reply};
use super::tests::{configured, json};
use super::Configured;
use super::Filter;
use crate::protocol::scope::route_mark_path;

// An Anthropic client (`anthropic-version` sent) gets the model list, a model and a missing
// model's error in Anthropic's shape; without the header, OpenAI's.
#[test]
fn anthropic_clients_get_the_model_listing_in_anthropics_shape() {
    let config = configured(
        r#"{"providers": {"a": {"cluster": "c_a", "authority": "a.example", "credential": {"value": "k"}}},
            "models": {"v/m": {"endpoints": [{"provider": "a", "pricing": {"prompt": 1, "completion": 1}}]}}}"#,
    );
    let get = |path: &str, anthropic: bool| {
        let host = MockHost::new();
        host.set_prop(&route_mark_path(), b"llm");
        let mut headers = vec![(":method", "GET"), (":path", path), (":authority", "gateway")];
        if anthropic {
            headers.push(("anthropic-version", "2023-06-01"));
        }
        host.with_request_headers(&headers);
        let mut stream = Stream::new(host.clone(), Rc::clone(&config));
        stream.on_request_headers(true);
        let reply = host.state().reply.clone().expect("answered locally");
        (reply.status, json(&reply.body))
    };
    let (status, list) = get("/v1/models?limit=20", true);
    assert_eq!(status, 200);
    assert_eq!(
        list["data"][0],
        serde_json::json!({"type": "model", "id": "v/m", "display_name": "v/m",
        "created_at": "1970-01-01T00:00:00Z"})
    );
    assert_eq!((list["has_more"].as_bool(), list["first_id"].as_str()), (Some(false), Some("v/m")), "{list}");
    assert_eq!(get("/v1/models/v/m", true).1["type"], "model");
    let (status, missing) = get("/v1/models/nope", true);
    assert_eq!(
        (status, missing["type"].as_str(), missing["error"]["type"].as_str()),
        (404, Some("error"), Some("not_found_error"))
    );
    let (_, openai) = get("/v1/models", false);
    assert_eq!((openai["object"].as_str(), openai["data"][0]["object"].as_str()), (Some("list"), Some("model")));
}

/// `POST /v1/messages/count_tokens`: the estimate in Anthropic's shape, marked as one.
fn count(config: &Rc<Configured>, body: &str) -> Reply {
    let host = MockHost::new();
    host.set_prop(&route_mark_path(), b"llm");
    host.with_request_headers(&[
        (":method", "POST"),
        (":path", "/v1/messages/count_tokens"),
        (":authority", "gateway"),
        ("anthropic-version", "2023-06-01"),
        ("content-type", "application/json"),
    ]);
    host.state().request_body = body.as_bytes().to_vec();
    let mut stream = Stream::new(host.clone(), Rc::clone(config));
    assert_eq!(stream.on_request_headers(false), Action::Pause, "waits for the body");
    assert_eq!(stream.on_request_body(body.len(), true), Action::Pause, "answered here");
    let reply = host.state().reply.clone().expect("answered locally");
    assert!(host.state().request_headers.iter().all(|(k, _)| k != "x-envoy-max-retries"), "nothing routed");
    reply
}

#[test]
fn count_tokens_answers_the_filters_estimate_in_anthropics_shape() {
    let config = configured(
        r#"{"providers": {"a": {"cluster": "c_a", "authority": "a.example", "credential": {"value": "k"}}},
            "models": {"v/m": {"endpoints": [{"provider": "a", "pricing": {"prompt": 1, "completion": 1}}]}}}"#,
    );
    // 40 bytes of messages and 10 of system (its quotes included): 13 tokens; 22 of tools: 6.
    let messages = r#"[{"role":"user","content":"0123456789"}]"#;
    let body =
        format!(r#"{{"model":"v/m","system":"abcdefg.","messages":{messages},"tools":[{{"name":"t","x":"0"}}]}}"#);
    let reply = count(&config, &body);
    assert_eq!(reply.status, 200);
    assert_eq!(json(&reply.body), serde_json::json!({"input_tokens": 19}));
    assert!(reply.headers.iter().any(|(k, v)| k == "x-switchyard-estimate" && v == "true"), "{:?}", reply.headers);
    // An unknown model and a body without one are refused as /v1/messages refuses them.
    let missing = count(&config, r#"{"model":"no/such","messages":[{"role":"user","content":"x"}]}"#);
    let e = json(&missing.body);
    assert_eq!((e["type"].as_str(), e["error"]["code"].as_str()), (Some("error"), Some("model_not_found")), "{e}");
    let bad = count(&config, r#"{"messages":[{"role":"user","content":"x"}]}"#);
    assert_eq!((bad.status / 100, json(&bad.body)["type"].as_str()), (4, Some("error")));
}
