//! The surfaces a caller reaches besides routed requests, through the decision filter on the
//! mock host: model listings in each client's shape and `/v1/messages/count_tokens`.

use std::rc::Rc;

use super::downstream::Stream;
use super::mock::MockHost;
use super::tests::{configured, json};
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
