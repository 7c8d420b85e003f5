//! The mock's Azure OpenAI (a provider with `Behavior::azure`: every path under `/openai/`; any
//! provider: `/openai/deployments/...`), as strict as Azure where a lenient mock would hide a
//! defect.
//!
//! - Paths: `/openai/deployments/{deployment}/chat/completions` and `/completions` (which need
//!   `api-version`), `/openai/v1/chat/completions`, `/openai/v1/completions` and
//!   `/openai/v1/responses` (the v1 API, no `api-version`). Anything else under `/openai/` is
//!   Azure's 404 `Resource not found`.
//! - The key: the `api-key` header, equal to [`AZURE_KEY`]; anything else (no key, another
//!   key, an `authorization: Bearer` key) is Azure's 401 `Access denied due to invalid
//!   subscription key...`. Or, with `Behavior::azure_tokens`, no `api-key` and a Microsoft
//!   Entra token as `authorization: Bearer` that the mock IMDS (`azure_imds`) issued and that
//!   has not expired; an unknown or expired one is Azure's 401 `Unauthorized. Access token is
//!   missing, invalid, audience is incorrect ..., or have expired.`
//! - `api-version` missing on a deployments path: Azure's 400.
//! - The body: OpenAI's chat completions fields (OpenAI's own checks, `openai::refusal`).
//! - Answers as Azure dresses them: streams open with a chunk of empty `choices` and
//!   `prompt_filter_results`, every choice has its `content_filter_results`, a whole answer its
//!   `prompt_filter_results`; a streamed tool call opens with the call's id and name (empty
//!   arguments, `role: assistant`) and ends with `finish_reason: "tool_calls"`.
//! - `x-mock-behavior` tokens `filter` (the prompt is refused: Azure's 400 `content_filter`)
//!   and `filterout` (the answer is cut by the output filter: `finish_reason: "content_filter"`).

use serde_json::{json, Value};

use super::gcp_metadata::TokenIssuer;

/// The only key the mock Azure resource accepts.
pub const AZURE_KEY: &str = "azure-mock-key-0123456789";

/// Azure's 401 for a missing or wrong key.
pub const DENIED: &str = "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a \
                          valid key for an active subscription and use a correct regional API endpoint for your resource.";

/// Azure's 401 for an Entra token it does not take (unknown, expired, another audience).
pub const TOKEN_DENIED: &str = "Unauthorized. Access token is missing, invalid, audience is incorrect \
                                (https://cognitiveservices.azure.com), or have expired.";

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

/// What the Azure resource was asked: the path, its query, the key it accepts, and the issuer
/// of the Entra tokens it accepts too (None: keys only).
pub(super) struct Asked<'a> {
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub key: &'a str,
    pub tokens: Option<&'a TokenIssuer>,
}

/// Azure's refusal of a request under `/openai/` (None: it is answered). `header`: the
/// request's headers; `filter`: the `filter` token (the prompt trips the filter).
pub(super) fn refusal(
    asked: &Asked<'_>,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    filter: bool,
) -> Option<(u16, Value)> {
    let Asked { path, query, key, tokens } = *asked;
    let api_key = header("api-key");
    if api_key.as_deref() != Some(key) {
        let bearer = header("authorization").filter(|a| a.starts_with("Bearer "));
        match (api_key, bearer, tokens) {
            (None, Some(bearer), Some(issuer)) => {
                if issuer.check(Some(&bearer)).is_err() {
                    return Some((401, error("401", TOKEN_DENIED)));
                }
            }
            _ => return Some((401, error("401", DENIED))),
        }
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

/// A choice's filter results as Azure sends them with generated content.
fn content_filter_results() -> Value {
    let safe = json!({"filtered": false, "severity": "safe"});
    json!({"hate": safe, "self_harm": safe, "sexual": safe, "violence": safe})
}

/// A whole chat completion dressed as Azure answers: `prompt_filter_results` and each choice's
/// `content_filter_results`.
pub(super) fn dress_completion(v: &mut Value) {
    if let Some(choices) = v["choices"].as_array_mut() {
        for c in choices {
            c["content_filter_results"] = content_filter_results();
            c["logprobs"] = Value::Null;
        }
    }
    let safe = json!({"filtered": false, "severity": "safe"});
    v["prompt_filter_results"] = json!([{"prompt_index": 0, "content_filter_results": {
        "hate": safe, "jailbreak": {"filtered": false, "detected": false}, "self_harm": safe,
        "sexual": safe, "violence": safe}}]);
    v["system_fingerprint"] = json!("fp_azure_mock");
}

/// A streamed tool call as Azure sends it (after the prompt filter chunk): the call's id and
/// name with empty arguments, the arguments in two pieces, the `tool_calls` finish; each choice
/// with empty `content_filter_results`.
pub(super) fn tool_chunks(provider: &str, model: &str, id: u64, args: &str) -> Vec<String> {
    let (a, b) = args.split_at(args.len() / 2);
    let chunk = |delta: Value, finish: Value| {
        let v = json!({"choices": [{"content_filter_results": {}, "delta": delta, "finish_reason": finish,
                "index": 0, "logprobs": null}],
            "created": 1_700_000_000u64, "id": format!("chatcmpl-{provider}-{id}"), "model": model,
            "object": "chat.completion.chunk", "system_fingerprint": "fp_azure_mock"});
        format!("data: {v}\n\n")
    };
    let piece = |p: &str| json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]});
    vec![
        chunk(
            json!({"content": null, "refusal": null, "role": "assistant", "tool_calls": [{"index": 0, "id": "call_1",
                "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(piece(a), Value::Null),
        chunk(piece(b), Value::Null),
        chunk(json!({}), json!("tool_calls")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at<'a>(path: &'a str, query: Option<&'a str>) -> Asked<'a> {
        Asked { path, query, key: AZURE_KEY, tokens: None }
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entra_token_the_imds_issued_is_taken_until_it_expires() {
        let imds = crate::mock::azure_imds::start(std::time::Duration::from_secs(3_600)).await.unwrap();
        let path = format!(
            "/metadata/identity/oauth2/token?api-version=2018-02-01&resource={}",
            crate::mock::azure_imds::RESOURCE
        );
        let (status, text) = crate::envoy::http_get_with(imds.addr, &path, &[("metadata", "true")]).unwrap();
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["expires_in"].is_string() && v["expires_on"].is_string(), "{v}");
        let token = v["access_token"].as_str().unwrap().to_string();
        let issuer = &imds.issuer;
        let asked = Asked { path: "/openai/v1/chat/completions", query: None, key: AZURE_KEY, tokens: Some(issuer) };
        let body = br#"{"model":"gpt-41","messages":[]}"#;
        let bearer = |t: String| move |h: &str| (h == "authorization").then(|| format!("Bearer {t}"));
        assert_eq!(refusal(&asked, &bearer(token.clone()), body, false), None);
        let unknown = refusal(&asked, &bearer("eyJ0.forged".into()), body, false).unwrap();
        assert_eq!((unknown.0, unknown.1["error"]["message"].as_str()), (401, Some(TOKEN_DENIED)));
        // A wrong api-key beside a good token is still refused (the key is judged first).
        let both = |h: &str| match h {
            "authorization" => Some(format!("Bearer {token}")),
            "api-key" => Some("nope".into()),
            _ => None,
        };
        assert_eq!(refusal(&asked, &both, body, false).map(|(s, _)| s), Some(401));
        issuer.expire_all();
        assert_eq!(refusal(&asked, &bearer(token.clone()), body, false).map(|(s, _)| s), Some(401));
        // Without the metadata header IMDS refuses, and issues nothing.
        let fetched = issuer.fetches();
        let (status, _) = crate::envoy::http_get_with(imds.addr, &path, &[]).unwrap();
        assert_eq!(status, 400);
        let (status, _) = crate::envoy::http_get_with(
            imds.addr,
            &format!("{path}&client_id=00000000-0000-0000-0000-000000000000"),
            &[("metadata", "true")],
        )
        .unwrap();
        assert_eq!(status, 400);
        assert_eq!(issuer.fetches(), fetched);
    }
}
