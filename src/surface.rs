//! The endpoint surface: what the downstream filter does with a request, decided from its
//! method and path before any body is read. Only routed requests may reach a provider (with
//! the provider's key, never the caller's); everything else is answered here or sent to the
//! operator's pass-through cluster.
//!
//! Three APIs are routed, each without translating its schema: OpenAI (`/v1/chat/completions`,
//! `/v1/completions`, `/v1/responses`), Anthropic Messages (`/v1/messages`) and Google
//! generateContent (`/{v1beta|v1}/models/{model}:generateContent` / `:streamGenerateContent`).

use crate::answer::errors::ApiError;
use crate::answer::listing::{self, Listing};
use crate::api::{
    google_path, Api, Surface, COUNT_TOKENS_PATH, GOOGLE_MODELS_PREFIX, GOOGLE_V1_MODELS_PREFIX, MESSAGES_PATH,
    RESPONSES_PATH, ROUTED_PATHS,
};
use crate::config::{Catalog, Routing};

/// The path as the plan keeps it: a Google caller's `key` query parameter (its API key) removed,
/// so no attempt ever carries it to a provider. Other paths are returned unchanged.
pub fn without_caller_key(path: &str) -> std::borrow::Cow<'_, str> {
    let Some((bare, query)) = path.split_once('?') else { return path.into() };
    if !query.split('&').any(|p| p == "key" || p.starts_with("key=")) {
        return path.into();
    }
    let kept: Vec<&str> = query.split('&').filter(|p| *p != "key" && !p.starts_with("key=")).collect();
    if kept.is_empty() {
        bare.to_string().into()
    } else {
        format!("{bare}?{}", kept.join("&")).into()
    }
}

#[derive(Debug, PartialEq)]
pub enum Disposition {
    /// Parse the body and route it to a provider.
    Route(Surface),
    /// `GET /v1/models[/{id}[/endpoints]]`: answered from the catalog.
    Listing(Listing),
    /// Send it unchanged to the operator's pass-through cluster (`routing.passthrough_cluster`).
    PassThrough(String),
    /// Answer locally with this error.
    Local(ApiError),
}

/// The single place that decides about requests Switchyard does not route. Endpoints answered
/// from the catalog (`GET /v1/models`) belong here, before the pass-through/404 fallback.
pub fn disposition(method: &str, path: &str, catalog: &Catalog) -> Disposition {
    let routing = &catalog.routing;
    let bare = path.split('?').next().unwrap_or("");
    let surface = if bare == RESPONSES_PATH {
        Some(Surface::OPENAI_RESPONSES)
    } else if ROUTED_PATHS.contains(&bare) {
        Some(Surface::OPENAI)
    } else if bare == MESSAGES_PATH {
        Some(Surface::of(Api::Anthropic))
    } else if bare == COUNT_TOKENS_PATH {
        Some(Surface::COUNT_TOKENS)
    } else if bare.starts_with(GOOGLE_MODELS_PREFIX) || bare.starts_with(GOOGLE_V1_MODELS_PREFIX) {
        google_path(bare).map(|(model, m)| Surface {
            path_model: Some(model),
            method: Some(m),
            ..Surface::of(Api::Google)
        })
    } else {
        None
    };
    let api = Api::of_path(bare);
    let routed_path = surface.is_some();
    if let (Some(surface), "POST") = (surface, method) {
        return Disposition::Route(surface);
    }
    if method == "GET" {
        if let Some(l) = listing::parse_path(catalog, path) {
            return Disposition::Listing(l);
        }
    }
    if let Some(cluster) = &routing.passthrough_cluster {
        return Disposition::PassThrough(cluster.clone());
    }
    if routed_path {
        let mut e = ApiError::new(
            405,
            "invalid_request_error",
            "method_not_allowed",
            format!("{method} is not supported on {bare}; use POST"),
        );
        e.headers.push(("allow".to_string(), "POST".to_string()));
        e.api = api;
        return Disposition::Local(e);
    }
    let mut e = ApiError::new(
        404,
        "invalid_request_error",
        "not_found",
        format!("no such endpoint: {method} {}", printable(bare)),
    );
    // Errors on an API's own paths come in that API's shape.
    e.api = api;
    Disposition::Local(e)
}

/// Whether a request's `x-switchyard-debug` value turns on the candidates header. Off unless
/// `routing.debug_header`; with `routing.debug_token` the value must be that secret (compared
/// in constant time), otherwise `1`, `true` or `yes`.
pub fn debug_allowed(value: &str, routing: &Routing) -> bool {
    if !routing.debug_header {
        return false;
    }
    match &routing.debug_token {
        Some(token) => constant_time_eq(value.as_bytes(), token.as_bytes()),
        None => matches!(value, "1" | "true" | "yes"),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Envoy router controls a caller could send (Envoy honours them from internal callers, as
/// mesh clients are): removed from routed requests so the failover policy Switchyard hands to
/// Envoy (retry conditions, retry count, timeouts, hedging) is the operator's, not the caller's.
pub fn is_caller_router_control(name: &str) -> bool {
    const CONTROLS: [&str; 10] = [
        "x-envoy-max-retries",
        "x-envoy-retry-on",
        "x-envoy-retry-grpc-on",
        "x-envoy-retriable-status-codes",
        "x-envoy-retriable-header-names",
        "x-envoy-upstream-rq-timeout-ms",
        "x-envoy-upstream-rq-per-try-timeout-ms",
        "x-envoy-upstream-rq-timeout-alt-response",
        "x-envoy-hedge-on-per-try-timeout",
        "x-envoy-is-timeout-retry",
    ];
    CONTROLS.iter().any(|c| name.eq_ignore_ascii_case(c))
}

/// The path as shown in an error message: bounded and without control characters.
fn printable(path: &str) -> String {
    path.chars().take(200).map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::GoogleMethod;
    use crate::config::Catalog;

    fn routing(extra: &str) -> Routing {
        catalog(extra).routing
    }

    fn catalog(extra: &str) -> Catalog {
        let json = format!(
            r#"{{"providers": {{"p": {{"cluster": "c_p", "authority": "p.example"}}}},
                "models": {{"m": {{"endpoints": [{{"provider": "p", "pricing": {{"prompt": 1, "completion": 1}}}}]}}}},
                "routing": {{{extra}}}}}"#
        );
        match Catalog::from_json(json.as_bytes(), &|_| None) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    // Regression (unrouted paths): `/`, `/v1/models`, `/v1/embeddings` and GET on the chat
    // path went to a provider cluster with the caller's Authorization. Without a pass-through
    // cluster they are answered locally.
    #[test]
    fn unrouted_requests_are_answered_locally_by_default() {
        let r = catalog("");
        for (method, path, status, code) in [
            ("GET", "/", 404, "not_found"),
            ("POST", "/v1/models", 404, "not_found"),
            ("POST", "/v1/embeddings", 404, "not_found"),
            ("POST", "/v1/chat/completions/extra", 404, "not_found"),
            ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
            ("PUT", "/v1/responses?x=1", 405, "method_not_allowed"),
        ] {
            match disposition(method, path, &r) {
                Disposition::Local(e) => assert_eq!((e.status, e.code), (status, code), "{method} {path}"),
                other => panic!("{method} {path}: {other:?}"),
            }
        }
        match disposition("GET", "/v1/chat/completions", &r) {
            Disposition::Local(e) => assert_eq!(e.headers, vec![("allow".to_string(), "POST".to_string())]),
            other => panic!("{other:?}"),
        }
        for path in ["/v1/chat/completions", "/v1/completions", "/v1/chat/completions?a=b"] {
            assert_eq!(disposition("POST", path, &r), Disposition::Route(Surface::OPENAI), "{path}");
        }
        assert_eq!(disposition("POST", "/v1/responses", &r), Disposition::Route(Surface::OPENAI_RESPONSES));
        // The model listings are answered from the catalog.
        assert_eq!(disposition("GET", "/v1/models", &r), Disposition::Listing(Listing::Models));
        assert_eq!(
            disposition("GET", "/v1/models/m/endpoints", &r),
            Disposition::Listing(Listing::Endpoints("m".into()))
        );
    }

    #[test]
    fn pass_through_cluster_takes_every_unrouted_request() {
        let r = catalog(r#""passthrough_cluster": "c_origin""#);
        for (method, path) in [("GET", "/v1/files"), ("GET", "/v1/chat/completions"), ("POST", "/v2/x")] {
            assert_eq!(disposition(method, path, &r), Disposition::PassThrough("c_origin".into()), "{method} {path}");
        }
        assert_eq!(disposition("POST", "/v1/chat/completions", &r), Disposition::Route(Surface::OPENAI));
        // The catalog's own listings are never sent to the pass-through cluster.
        assert_eq!(disposition("GET", "/v1/models", &r), Disposition::Listing(Listing::Models));
    }

    // Regression (debug header on by default): any caller could read every candidate's live
    // error rate and in-flight count.
    #[test]
    fn debug_header_is_off_by_default_and_can_require_a_token() {
        assert!(!debug_allowed("1", &routing("")));
        let on = routing(r#""debug_header": true"#);
        assert!(debug_allowed("1", &on) && debug_allowed("yes", &on));
        assert!(!debug_allowed("0", &on));
        let gated = routing(r#""debug_header": true, "debug_token": "s3cret-debug-token-42""#);
        assert!(debug_allowed("s3cret-debug-token-42", &gated));
        for v in ["1", "true", "s3cret-debug-token-4", "s3cret-debug-token-421", ""] {
            assert!(!debug_allowed(v, &gated), "{v}");
        }
        let token_but_off = routing(r#""debug_token": "s3cret-debug-token-42""#);
        assert!(!debug_allowed("s3cret-debug-token-42", &token_but_off));
    }

    #[test]
    fn pass_through_to_a_provider_cluster_or_weak_tokens_are_config_errors() {
        let json = r#"{"providers": {"p": {"cluster": "c_p", "authority": "p.example"}},
            "models": {"m": {"endpoints": [{"provider": "p", "pricing": {"prompt": 1, "completion": 1}}]}},
            "routing": {"passthrough_cluster": "c_p"}}"#;
        match Catalog::from_json(json.as_bytes(), &|_| None) {
            Err(e) => assert_eq!(e.field, "routing.passthrough_cluster"),
            Ok(_) => panic!("a provider cluster as pass-through must be rejected"),
        }
        let weak = json.replace(r#""passthrough_cluster": "c_p""#, r#""debug_token": "short""#);
        match Catalog::from_json(weak.as_bytes(), &|_| None) {
            Err(e) => assert_eq!(e.field, "routing.debug_token"),
            Ok(_) => panic!("a short debug token must be rejected"),
        }
    }

    #[test]
    fn caller_router_controls_are_recognised() {
        for h in ["x-envoy-retry-on", "X-Envoy-Upstream-Rq-Timeout-Ms", "x-envoy-max-retries"] {
            assert!(is_caller_router_control(h), "{h}");
        }
        for h in ["x-envoy-attempt-count", "x-request-id", "retry-after"] {
            assert!(!is_caller_router_control(h), "{h}");
        }
    }

    #[test]
    fn error_message_shows_a_bounded_printable_path() {
        let long = format!("/{}\u{7}", "a".repeat(500));
        match disposition("GET", &long, &catalog("")) {
            Disposition::Local(e) => {
                assert!(e.message.len() < 300, "{}", e.message.len());
                assert!(!e.message.contains('\u{7}'));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn anthropic_and_google_paths_are_routed_with_their_surface() {
        let r = catalog("");
        assert_eq!(disposition("POST", "/v1/messages", &r), Disposition::Route(Surface::of(Api::Anthropic)));
        assert_eq!(
            disposition("POST", "/v1beta/models/google/gemini-2.5:nitro:streamGenerateContent?alt=sse", &r),
            Disposition::Route(Surface {
                path_model: Some("google/gemini-2.5:nitro".into()),
                method: Some(GoogleMethod::StreamGenerate),
                ..Surface::of(Api::Google)
            })
        );
        assert_eq!(
            disposition("POST", "/v1beta/models/google%2Fgemini:generateContent", &r),
            Disposition::Route(Surface {
                path_model: Some("google/gemini".into()),
                method: Some(GoogleMethod::Generate),
                ..Surface::of(Api::Google)
            })
        );
        // Not routed: other methods, no model, GET. Answered in the path's API shape.
        for (method, path, status, api) in [
            ("POST", "/v1beta/models/g:countTokens", 404, Api::Google),
            ("POST", "/v1beta/models/:generateContent", 404, Api::Google),
            ("POST", "/v1beta/models/a%zz:generateContent", 404, Api::Google),
            ("GET", "/v1/messages", 405, Api::Anthropic),
            ("GET", "/v1/messages/count_tokens", 405, Api::Anthropic),
        ] {
            match disposition(method, path, &r) {
                Disposition::Local(e) => assert_eq!((e.status, e.api), (status, api), "{method} {path}"),
                other => panic!("{method} {path}: {other:?}"),
            }
        }
        // google-genai's default API version is v1: routed too, the version kept.
        assert_eq!(
            disposition("POST", "/v1/models/google/gemini:generateContent", &r),
            Disposition::Route(Surface {
                path_model: Some("google/gemini".into()),
                method: Some(GoogleMethod::Generate),
                ..Surface::of(Api::Google)
            })
        );
        assert_eq!(Api::of_path("/v1/models/g:streamGenerateContent?alt=sse"), Api::Google);
        assert_eq!(Api::of_path("/v1/models/m/endpoints"), Api::OpenAi);
        assert_eq!(Api::of_path("/v1beta/models"), Api::Google);
        assert_eq!(Api::of_path("/v1/messages?beta=true"), Api::Anthropic);
        assert_eq!(Api::of_path("/v1beta/models/x:generateContent"), Api::Google);
        assert_eq!(Api::of_path("/v1/chat/completions"), Api::OpenAi);
    }

    #[test]
    fn a_google_callers_key_parameter_is_dropped_from_the_path() {
        assert_eq!(
            without_caller_key("/v1beta/models/g:generateContent?key=SECRET"),
            "/v1beta/models/g:generateContent"
        );
        assert_eq!(
            without_caller_key("/v1beta/models/g:streamGenerateContent?alt=sse&key=SECRET&x=1"),
            "/v1beta/models/g:streamGenerateContent?alt=sse&x=1"
        );
        assert_eq!(without_caller_key("/v1/chat/completions?monkey=1"), "/v1/chat/completions?monkey=1");
        assert_eq!(without_caller_key("/v1/messages"), "/v1/messages");
    }
}
