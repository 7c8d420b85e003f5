//! The mock's Azure OpenAI (a provider with `Behavior::azure`: every path under `/openai/`; any
//! provider: `/openai/deployments/...`), as strict as Azure where a lenient mock would hide a
//! defect.
//!
//! - Paths: `/openai/deployments/{deployment}/chat/completions` and `/completions` (which need
//!   `api-version`), `/openai/v1/chat/completions`, `/openai/v1/completions` and
//!   `/openai/v1/responses` (the v1 API, no `api-version`). Anything else under `/openai/` is
//!   Azure's 404 `Resource not found`.
//! - The key: only the `api-key` header, equal to [`AZURE_KEY`]; anything else (no key, another
//!   key, an `authorization: Bearer` key) is Azure's 401 `Access denied due to invalid
//!   subscription key...`.
//! - `api-version` missing on a deployments path: Azure's 400.
//! - The body: OpenAI's chat completions fields (OpenAI's own checks, `openai::refusal`).
//! - Streams open with Azure's chunk of empty `choices` and `prompt_filter_results`.
//! - `x-mock-behavior` tokens `filter` (the prompt is refused: Azure's 400 `content_filter`)
//!   and `filterout` (the answer is cut by the output filter: `finish_reason: "content_filter"`).

use serde_json::{json, Value};

/// The only key the mock Azure resource accepts.
pub const AZURE_KEY: &str = "azure-mock-key-0123456789";

/// Azure's 401 for a missing or wrong key.
pub const DENIED: &str = "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a \
                          valid key for an active subscription and use a correct regional API endpoint for your resource.";

/// Azure's error body: `{"error": {"code", "message"}}`.
fn error(code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message}})
}

/// The OpenAI path an Azure path stands for (`/v1/chat/completions`), and whether it is a
/// deployments path (which needs `api-version`). None: not a path Azure serves.
fn openai_path(path: &str) -> Option<(&'static str, bool)> {
    let of = |rest: &str| match rest {
        "/chat/completions" => Some("/v1/chat/completions"),
        "/completions" => Some("/v1/completions"),
        _ => None,
    };
    if let Some(rest) = path.strip_prefix("/openai/v1") {
        return match rest {
            "/responses" => Some(("/v1/responses", false)),
            _ => of(rest).map(|p| (p, false)),
        };
    }
    let rest = path.strip_prefix("/openai/deployments/")?;
    let (deployment, rest) = rest.split_once('/')?;
    if deployment.is_empty() {
        return None;
    }
    of(&format!("/{rest}")).map(|p| (p, true))
}

/// What the Azure resource was asked: the path, its query, and the key it accepts.
pub(super) struct Asked<'a> {
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub key: &'a str,
}

/// Azure's refusal of a request under `/openai/` (None: it is answered). `header`: the
/// request's headers; `filter`: the `filter` token (the prompt trips the filter).
pub(super) fn refusal(
    asked: &Asked<'_>,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    filter: bool,
) -> Option<(u16, Value)> {
    let Asked { path, query, key } = *asked;
    if header("api-key").as_deref() != Some(key) {
        return Some((401, error("401", DENIED)));
    }
    let Some((openai, deployments)) = openai_path(path) else {
        return Some((404, error("404", "Resource not found")));
    };
    let version = query.and_then(|q| super::query_param(q, "api-version")).filter(|v| !v.is_empty());
    if deployments && version.is_none() {
        let msg = "Missing required query parameter: api-version";
        return Some((400, error("BadRequest", msg)));
    }
    // The body as OpenAI's own chat completions would judge it (the key is already checked).
    let with_key = |h: &str| if h == "api-key" { Some(key.to_string()) } else { None };
    if let Some(refused) = super::openai::refusal(openai, &with_key, body, false) {
        return Some(refused);
    }
    if let Some(msg) = super::strict::check(super::Api::OpenAi, openai, body) {
        return Some((400, super::openai::error_json(&msg, None, None)));
    }
    if filter {
        let filtered = json!({"filtered": true, "severity": "high"});
        let safe = json!({"filtered": false, "severity": "safe"});
        let body = json!({"error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. \
                        Please modify your prompt and retry.",
            "type": null, "param": "prompt", "code": "content_filter", "status": 400,
            "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {
                "hate": safe, "jailbreak": {"filtered": false, "detected": false}, "self_harm": safe,
                "sexual": safe, "violence": filtered}}}});
        return Some((400, body));
    }
    None
}

/// The first chunk of every Azure stream: no choices, the prompt's filter results.
pub(super) fn prompt_filter_chunk() -> String {
    let safe = json!({"filtered": false, "severity": "safe"});
    let v = json!({"choices": [], "created": 0, "id": "", "model": "", "object": "",
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {
            "hate": safe, "self_harm": safe, "sexual": safe, "violence": safe}}]});
    format!("data: {v}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at<'a>(path: &'a str, query: Option<&'a str>) -> Asked<'a> {
        Asked { path, query, key: AZURE_KEY }
    }

    #[test]
    fn paths_keys_and_versions_are_checked_as_azure_does() {
        let key = |h: &str| (h == "api-key").then(|| AZURE_KEY.to_string());
        let body = br#"{"model":"gpt-41","messages":[]}"#;
        let deployments = at("/openai/deployments/gpt-41/chat/completions", Some("api-version=2024-10-21"));
        assert_eq!(refusal(&deployments, &key, body, false), None);
        assert_eq!(refusal(&at("/openai/v1/chat/completions", None), &key, body, false), None);
        let status = |path: &str, q: Option<&str>, h: &dyn Fn(&str) -> Option<String>| {
            refusal(&at(path, q), h, body, false).map(|(s, _)| s)
        };
        assert_eq!(status("/openai/deployments/gpt-41/chat/completions", None, &key), Some(400));
        assert_eq!(status("/openai/deployments/gpt-41/embeddings", Some("api-version=1"), &key), Some(404));
        assert_eq!(status("/v1/chat/completions", None, &key), Some(404));
        let bearer = |h: &str| (h == "authorization").then(|| format!("Bearer {AZURE_KEY}"));
        assert_eq!(status("/openai/v1/chat/completions", None, &bearer), Some(401));
        let wrong = |h: &str| (h == "api-key").then(|| "nope".to_string());
        assert_eq!(status("/openai/v1/chat/completions", None, &wrong), Some(401));
        let (s, b) = refusal(&at("/openai/v1/chat/completions", None), &key, body, true).unwrap();
        assert_eq!((s, b["error"]["code"].as_str()), (400, Some("content_filter")));
        let leak = br#"{"model":"gpt-41","messages":[],"provider":{}}"#;
        assert_eq!(refusal(&at("/openai/v1/chat/completions", None), &key, leak, false).map(|(s, _)| s), Some(400));
    }
}
