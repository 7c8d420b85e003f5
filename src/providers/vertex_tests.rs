use super::*;
use crate::providers::compile as kind;
use serde_json::{json, Value};

fn vertex(location: &str) -> Arc<dyn Kind> {
    kind("p", Some("vertex"), Some(&json!({"project": "my-proj", "location": location}))).unwrap()
}

const BASE: &str = "/v1/projects/my-proj/locations/us-east5/publishers";

#[test]
fn claude_paths_name_the_project_location_and_model_version() {
    let k = vertex("us-east5");
    assert_eq!((k.name(), k.apis()), ("vertex", &[Api::Anthropic, Api::Google][..]));
    let path = |model: &str, stream: bool| k.attempt_path(Api::Anthropic, "/v1/messages", model, stream).unwrap();
    assert_eq!(
        path("claude-sonnet-4-5@20250929", false),
        format!("{BASE}/anthropic/models/claude-sonnet-4-5@20250929:rawPredict")
    );
    assert_eq!(
        path("claude-haiku-4-5@20251001", true),
        format!("{BASE}/anthropic/models/claude-haiku-4-5@20251001:streamRawPredict")
    );
    // One segment whatever the id holds.
    assert_eq!(path("a/b:c d", false), format!("{BASE}/anthropic/models/a%2Fb%3Ac%20d:rawPredict"));
    assert_eq!(k.attempt_path(Api::OpenAi, "/v1/chat/completions", "m", false), None);
    let global = vertex("global");
    assert_eq!(
        global.attempt_path(Api::Anthropic, "/v1/messages", "claude-x@1", false).as_deref(),
        Some("/v1/projects/my-proj/locations/global/publishers/anthropic/models/claude-x@1:rawPredict")
    );
}

#[test]
fn gemini_paths_keep_a_google_callers_framing_and_stream_translated_attempts_as_events() {
    let k = vertex("us-east5");
    let path = |standard: &str, stream: bool| k.attempt_path(Api::Google, standard, "gemini-2.5-pro", stream).unwrap();
    let models = format!("{BASE}/google/models/gemini-2.5-pro");
    // Translated (no caller path): events when streaming.
    assert_eq!(path("", false), format!("{models}:generateContent"));
    assert_eq!(path("", true), format!("{models}:streamGenerateContent?alt=sse"));
    // A Google caller's query is its own: with alt=sse events, without it one JSON array.
    let caller = "/v1beta/models/google/gemini-2.5-pro:streamGenerateContent?alt=sse";
    assert_eq!(path(caller, true), format!("{models}:streamGenerateContent?alt=sse"));
    assert_eq!(
        path("/v1beta/models/google/gemini-2.5-pro:streamGenerateContent", true),
        format!("{models}:streamGenerateContent")
    );
    assert_eq!(path("/v1/models/g:generateContent", false), format!("{models}:generateContent"));
}

#[test]
fn the_claude_body_names_vertexs_version_not_the_model_and_keeps_stream() {
    use crate::protocol::rewrite::{kind_body, model_prefix};
    let k = vertex("us-east5");
    assert_eq!(k.body_prefix(Api::Anthropic), Some(BODY_PREFIX));
    assert_eq!(k.body_prefix(Api::Google), None);
    assert!(k.blanked_members(Api::Google).is_empty());
    let body = br#"{"model":"claude-sonnet-4-5@20250929","max_tokens":5,"stream":true,"anthropic_version":"bedrock-2023-05-31","messages":[{"role":"user","content":"hi"}]}"#;
    let prefix_len = model_prefix("claude-sonnet-4-5@20250929").len();
    let out = kind_body(body, prefix_len, BODY_PREFIX, k.blanked_members(Api::Anthropic));
    assert_eq!(out.len(), body.len() - prefix_len + BODY_PREFIX.len(), "the length set before the body is read");
    let v: Value = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
    assert_eq!(
        v,
        json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 5, "stream": true,
               "messages": [{"role": "user", "content": "hi"}]})
    );
}

#[test]
fn options_are_required_and_checked_naming_the_field() {
    let of = "providers[\"v\"].kind_options";
    for (options, field) in [
        (None, of.to_string()),
        (Some(json!({"project": "p"})), of.to_string()),
        (Some(json!({"location": "global"})), of.to_string()),
        (Some(json!({"project": "p", "location": "global", "region": "x"})), of.to_string()),
        (Some(json!({"project": "My Project", "location": "global"})), format!("{of}.project")),
        (Some(json!({"project": "", "location": "global"})), format!("{of}.project")),
        (Some(json!({"project": "p", "location": "US East"})), format!("{of}.location")),
        (Some(json!({"project": "p", "location": "us-east5/x"})), format!("{of}.location")),
    ] {
        let e = kind("providers[\"v\"]", Some("vertex"), options.as_ref()).unwrap_err();
        assert_eq!(e.field, field, "{options:?}: {e}");
    }
    kind("p", Some("vertex"), Some(&json!({"project": "123456789012", "location": "europe-west1"}))).unwrap();
    assert_eq!(host_of("us-east5"), "us-east5-aiplatform.googleapis.com");
    assert_eq!(host_of("global"), "aiplatform.googleapis.com");
    assert_eq!(host_of("eu"), "aiplatform.eu.rep.googleapis.com");
}

/// A configuration with one Vertex provider (its `authority`, `location`, extra members) and
/// one endpoint (extra members).
fn catalog(
    authority: &str,
    location: &str,
    provider: Value,
    endpoint: Value,
) -> Result<crate::config::Catalog, ConfigError> {
    let mut p = json!({"kind": "vertex", "cluster": "c_v", "authority": authority,
        "kind_options": {"project": "my-proj", "location": location},
        "apis": {"anthropic": {}, "google": {}}, "credential": {"value": "ya29.token"}});
    p.as_object_mut().unwrap().extend(provider.as_object().unwrap().clone());
    let mut e = json!({"provider": "v", "upstream_model": "claude-x@1", "pricing": {"prompt": 3, "completion": 15}});
    e.as_object_mut().unwrap().extend(endpoint.as_object().unwrap().clone());
    let config = json!({"providers": {"v": p}, "models": {"m": {"endpoints": [e]}}});
    crate::config::Catalog::from_json(config.to_string().as_bytes(), &|_| None)
}

#[test]
fn the_host_must_be_the_locations_and_a_token_is_required() {
    catalog("us-east5-aiplatform.googleapis.com", "us-east5", json!({}), json!({})).unwrap();
    catalog("us-east5-aiplatform.googleapis.com:443", "us-east5", json!({}), json!({})).unwrap();
    catalog("aiplatform.googleapis.com", "global", json!({}), json!({})).unwrap();
    // A mock or a Private Service Connect endpoint: the operator's call.
    catalog("vertex.mock.example", "us-east5", json!({}), json!({})).unwrap();
    for (authority, location) in
        [("us-east5-aiplatform.googleapis.com", "europe-west1"), ("us-east5-aiplatform.googleapis.com", "global")]
    {
        let e = catalog(authority, location, json!({}), json!({})).unwrap_err();
        assert_eq!(e.field, "providers[\"v\"].authority", "{authority} {location}: {e}");
        assert!(e.to_string().contains(&host_of(location)), "{e}");
    }
    let e = catalog("aiplatform.googleapis.com", "global", json!({"credential": null}), json!({})).unwrap_err();
    assert_eq!(e.field, "providers[\"v\"].credential", "{e}");
    // No OpenAI API, and no first-attempt cluster (every attempt is rewritten).
    let e = catalog("aiplatform.googleapis.com", "global", json!({"apis": {"openai": {}}}), json!({})).unwrap_err();
    assert_eq!(e.field, "providers[\"v\"].apis.openai", "{e}");
    let e = catalog("aiplatform.googleapis.com", "global", json!({"first_attempt_cluster": "c_v2"}), json!({}))
        .unwrap_err();
    assert_eq!(e.field, "providers[\"v\"].first_attempt_cluster", "{e}");
}

#[test]
fn the_token_is_a_bearer_in_both_apis() {
    let c = catalog("aiplatform.googleapis.com", "global", json!({}), json!({})).unwrap();
    let v = c.provider_for_slug("v").unwrap();
    for api in [Api::Anthropic, Api::Google] {
        assert_eq!(v.credential_for(api), Some(("authorization", "Bearer ya29.token")), "{api:?}");
    }
}

#[test]
fn an_endpoints_region_is_the_location() {
    let c = catalog("aiplatform.googleapis.com", "global", json!({}), json!({})).unwrap();
    assert_eq!(c.endpoint(0).unwrap().region.as_deref(), Some("global"));
    let c =
        catalog("us-east5-aiplatform.googleapis.com", "us-east5", json!({}), json!({"region": "US-EAST5"})).unwrap();
    assert_eq!(c.endpoint(0).unwrap().region.as_deref(), Some("us-east5"));
    let e = catalog("us-east5-aiplatform.googleapis.com", "us-east5", json!({}), json!({"region": "europe-west1"}))
        .unwrap_err();
    assert_eq!(e.field, "models[\"m\"].endpoints[0].region", "{e}");
}

#[test]
fn vertexs_own_errors_on_claude_paths_are_anthropics_and_keep_their_status() {
    let k = vertex("us-east5");
    let cases = [
        (
            429,
            "RESOURCE_EXHAUSTED",
            "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model",
            "rate_limit_error",
        ),
        (
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials. Expected OAuth 2 access token.",
            "authentication_error",
        ),
        (403, "PERMISSION_DENIED", "Permission 'aiplatform.endpoints.predict' denied on resource", "permission_error"),
        (
            404,
            "NOT_FOUND",
            "Publisher Model `claude-x@1` was not found or your project does not have access to it.",
            "not_found_error",
        ),
        (400, "INVALID_ARGUMENT", "Invalid JSON payload received.", "invalid_request_error"),
        (503, "UNAVAILABLE", "The service is currently unavailable.", "overloaded_error"),
        (500, "INTERNAL", "Internal error encountered.", "api_error"),
    ];
    for (status, rpc, message, want) in cases {
        assert_eq!(k.error_status(Api::Anthropic, status, &[]), (status, true), "{rpc}: the status is kept");
        let body = json!({"error": {"code": status, "message": message, "status": rpc}}).to_string();
        let out = k.error_body(Api::Anthropic, status, &[], body.as_bytes());
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v, json!({"type": "error", "error": {"type": want, "message": format!("{rpc}: {message}")}}));
    }
    // The model's own error (Anthropic's shape) and a page that is not JSON pass unchanged.
    let overloaded = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert_eq!(k.error_body(Api::Anthropic, 529, &[], overloaded), overloaded.to_vec());
    assert_eq!(k.error_body(Api::Anthropic, 502, &[], b"<html>"), b"<html>".to_vec());
    // Gemini's errors are Google's already.
    assert_eq!(k.error_status(Api::Google, 429, &[]), (429, false));
    assert_eq!(k.error_status(Api::Anthropic, 200, &[]), (200, false));
    let g = br#"{"error":{"code":429,"message":"q","status":"RESOURCE_EXHAUSTED"}}"#;
    assert_eq!(k.error_body(Api::Google, 429, &[], g), g.to_vec());
    // Without a status name, the HTTP status decides.
    let out = anthropic_error(429, br#"{"error":{"code":429,"message":"slow down"}}"#).unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&out).unwrap(),
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    );
}
