//! A Responses API caller (`/v1/responses`) over every endpoint: natively where the endpoint
//! serves the Responses API, translated elsewhere; stateless fields refused before routing.

use serde_json::Value;

use super::*;
use crate::protocol::rewrite::attempt_rewrite;
use crate::routing::health::NoHealthData;

fn catalog() -> Catalog {
    let json = r#"{"providers": {
        "oai": {"cluster": "c_oai", "authority": "oai", "credential": {"value": "k0"},
                "apis": {"openai": {}, "openai_responses": {}}},
        "compat": {"cluster": "c_compat", "authority": "compat", "credential": {"value": "k1"}},
        "an": {"cluster": "c_an", "authority": "an", "credential": {"value": "k2"}, "apis": {"anthropic": {}}},
        "go": {"cluster": "c_go", "authority": "go", "credential": {"value": "k3"}, "apis": {"google": {}}}},
      "models": {
        "m/any": {"endpoints": [
            {"provider": "an", "upstream_model": "claude", "pricing": {"prompt": 1, "completion": 1}},
            {"provider": "compat", "upstream_model": "llama", "pricing": {"prompt": 2, "completion": 2}},
            {"provider": "go", "upstream_model": "gemini", "pricing": {"prompt": 3, "completion": 3}},
            {"provider": "oai", "upstream_model": "gpt", "pricing": {"prompt": 4, "completion": 4}}]}},
      "routing": {"default_policy": "price_weighted"}}"#;
    Catalog::from_json(json.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("{e}"))
}

fn decide_responses(c: &Catalog, body: &str) -> Result<Decision, ApiError> {
    decide_for(c, None, &NO_PRESETS, &Surface::OPENAI_RESPONSES, None, body.as_bytes(), &NoHealthData, &mut || 0.0)
}

#[test]
fn a_responses_request_reaches_every_api_natively_only_where_served() {
    let c = catalog();
    let body = r#"{"model": "m/any", "input": "hi", "provider": {"sort": "price"}, "stream": true,
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}"#;
    let d = decide_responses(&c, body).unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(d.api, Api::Responses);
    // Every endpoint is planned; the first (an) is Anthropic: its body is Anthropic's.
    assert_eq!(d.plan.attempts.len(), 4);
    assert_eq!(d.body_api, Api::Anthropic);
    let v: Value = serde_json::from_slice(&d.body).unwrap_or_default();
    assert_eq!((v["model"].as_str(), v["messages"][0]["role"].as_str()), (Some("claude"), Some("user")));
    let mut stored: Vec<Api> = d.bodies.iter().map(|(a, _)| *a).collect();
    stored.sort_by_key(|a| a.index());
    assert_eq!(stored, vec![Api::OpenAi, Api::Google, Api::Responses]);
    // The chat completions host gets a chat body on its chat path; the Responses host the
    // caller's own body (routing fields removed) on `/v1/responses`.
    let plan = hand_off(&c, 1, &d, "/v1/responses").plan;
    let compat = attempt_rewrite(&c, 1, &plan, 2, "c_compat").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!((compat.api, compat.path.as_str()), (Api::OpenAi, "/v1/chat/completions"));
    let oai = attempt_rewrite(&c, 1, &plan, 4, "c_oai").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!((oai.api, oai.path.as_str()), (Api::Responses, "/v1/responses"));
    assert_eq!(oai.credential, Some(("authorization".to_string(), "Bearer k0".to_string())));
    let native = d.bodies.iter().find(|(a, _)| *a == Api::Responses).map(|(_, b)| b.clone()).unwrap_or_default();
    let (_, native) = crate::protocol::plan::decode_body(&native).unwrap_or_default();
    let native: Value = serde_json::from_slice(&native).unwrap_or_default();
    assert_eq!((native["input"].as_str(), native.get("provider")), (Some("hi"), None));
}

#[test]
fn hosted_tools_leave_only_native_endpoints_and_stored_state_is_refused() {
    let c = catalog();
    let d = decide_responses(&c, r#"{"model": "m/any", "input": "hi", "tools": [{"type": "web_search"}]}"#)
        .unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!((d.plan.attempts.len(), d.body_api), (1, Api::Responses));
    assert!(d.plan.warnings.iter().any(|w| w.contains("tools[0].type")), "{:?}", d.plan.warnings);
    let only =
        r#"{"model": "m/any", "input": "hi", "tools": [{"type": "web_search"}], "provider": {"ignore": ["oai"]}}"#;
    let e = decide_responses(&c, only).map(|_| ()).unwrap_err();
    assert_eq!((e.status, e.param.as_deref(), e.api), (400, Some("tools[0].type"), Api::Responses));
    assert!(e.message.contains("web_search"), "{}", e.message);
    for field in ["previous_response_id", "conversation"] {
        let body = format!(r#"{{"model": "m/any", "input": "hi", "{field}": "x"}}"#);
        let e = decide_responses(&c, &body).map(|_| ()).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some(field)));
        let v: Value = serde_json::from_str(&e.body()).unwrap_or_default();
        assert_eq!(v["error"]["param"], field, "OpenAI's error shape");
    }
}
