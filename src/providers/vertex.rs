//! Google Vertex AI (`kind: "vertex"`): Claude and Gemini served from a Google Cloud project in
//! one location (`kind_options.project`, `kind_options.location`). What differs from Anthropic's
//! and Google's own APIs:
//!
//! - paths: `/v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}:rawPredict`
//!   (`:streamRawPredict` when streaming) for Claude, `.../publishers/google/models/{model}:generateContent`
//!   (`:streamGenerateContent`, `?alt=sse` when translated; a Google caller's own query kept) for
//!   Gemini ([`Vertex::model_path`]);
//! - the Anthropic body: `"anthropic_version":"vertex-2023-10-16"` in place of `model` (the path
//!   names it; [`BODY_PREFIX`]) and a caller's `anthropic_version` blanked out, so the body keeps
//!   its length; `stream` stays (Vertex reads it as Anthropic does);
//! - the key: an OAuth2 access token as `authorization: Bearer` in both APIs, from `credential`
//!   (however the token reaches it: the kind does not fetch tokens);
//! - errors: Vertex's own (quota, token, IAM, unknown model) are Google's
//!   `{"error":{"code","message","status"}}` on the Claude paths too: turned into Anthropic's error
//!   body there ([`anthropic_error`]); the model's own errors (Anthropic's shape) pass unchanged.
//!   Statuses are kept: 429 cools the endpoint down (for [`RATE_LIMIT_DELAY_S`] on the Claude
//!   paths, which name no delay), 401/403 (the operator's token or IAM) fail over to the next
//!   provider, 5xx are retried.
//!
//! The host is `<location>-aiplatform.googleapis.com` (`aiplatform.googleapis.com` for `global`);
//! a provider whose `authority` is another Google API host than its location's is refused.

use std::sync::Arc;

use serde::Deserialize;

use super::Kind;
use crate::api::Api;
use crate::config::{err, ConfigError};
use crate::protocol::bytes::push_json_string;

/// The `anthropic_version` Vertex's Claude models take in the body.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// What replaces the body's `{"model":"..."` prefix on the Claude paths (the path names the model).
pub const BODY_PREFIX: &[u8] = b"{\"anthropic_version\":\"vertex-2023-10-16\"";

/// A caller's own `anthropic_version` member: Vertex's is the prefix's.
pub const BLANKED: &[&str] = &["anthropic_version"];

/// How long a Vertex endpoint cools down after a 429 on a Claude path: Vertex sends neither
/// `Retry-After` nor (for Claude) a `RetryInfo` delay, and its quotas are per minute.
pub const RATE_LIMIT_DELAY_S: u32 = 10;

/// `kind_options` of a `vertex` provider.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVertexOptions {
    /// The Google Cloud project id (or number) whose Vertex AI serves the models.
    project: String,
    /// The Vertex AI location: a region (`us-east5`, `europe-west1`) or `global`.
    location: String,
}

/// A `vertex` provider.
#[derive(Debug)]
pub struct Vertex {
    location: String,
    /// `/v1/projects/{project}/locations/{location}/publishers/`.
    base: String,
}

/// A project id (`my-project-123`), a project number, or a domain-scoped id (`example.com:proj`).
fn is_project(p: &str) -> bool {
    (1..=100).contains(&p.len())
        && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.:".contains(&b))
        && !p.starts_with(['-', '.', ':'])
}

fn is_location(l: &str) -> bool {
    (1..=32).contains(&l.len())
        && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

/// The Vertex AI host of `location`: `aiplatform.googleapis.com` for `global`, the multi-region
/// endpoints `aiplatform.{us,eu}.rep.googleapis.com`, else `{location}-aiplatform.googleapis.com`.
pub fn host_of(location: &str) -> String {
    match location {
        "global" => "aiplatform.googleapis.com".to_string(),
        "us" | "eu" => format!("aiplatform.{location}.rep.googleapis.com"),
        _ => format!("{location}-aiplatform.googleapis.com"),
    }
}

pub(super) fn compile(field: &str, options: Option<&serde_json::Value>) -> Result<Arc<dyn Kind>, ConfigError> {
    let of = format!("{field}.kind_options");
    let Some(options) = options else {
        return Err(err(&of, "kind vertex needs `project` and `location` (e.g. us-east5, global)"));
    };
    let raw = RawVertexOptions::deserialize(options).map_err(|e| err(&of, e.to_string()))?;
    if !is_project(&raw.project) {
        return Err(err(
            format!("{of}.project"),
            format!("{:?} is not a Google Cloud project id (lower-case letters, digits, -)", raw.project),
        ));
    }
    if !is_location(&raw.location) {
        return Err(err(
            format!("{of}.location"),
            format!("{:?} is not a Vertex AI location such as us-east5 or global", raw.location),
        ));
    }
    let base = format!("/v1/projects/{}/locations/{}/publishers/", raw.project, raw.location);
    Ok(Arc::new(Vertex { location: raw.location, base }))
}

/// `s` as one path segment: every byte but letters, digits, `-`, `_`, `.`, `~` and `@` (Vertex's
/// model versions: `claude-sonnet-4-5@20250929`) percent-encoded.
fn push_segment(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

impl Vertex {
    /// `{base}{publisher}/models/{model}:{method}`.
    pub fn model_path(&self, publisher: &str, model: &str, method: &str) -> String {
        let mut path = String::with_capacity(self.base.len() + publisher.len() + model.len() * 3 + method.len() + 24);
        path.push_str(&self.base);
        path.push_str(publisher);
        path.push_str("/models/");
        push_segment(&mut path, model);
        path.push(':');
        path.push_str(method);
        path
    }
}

impl Kind for Vertex {
    fn name(&self) -> &'static str {
        "vertex"
    }

    fn apis(&self) -> &'static [Api] {
        &[Api::Anthropic, Api::Google]
    }

    /// The access token goes as `credential` says (default `authorization: Bearer`) in both
    /// APIs, never in `x-api-key` or `x-goog-api-key`.
    fn key_as_configured(&self, _api: Api) -> bool {
        true
    }

    fn attempt_path(&self, api: Api, standard: &str, upstream_model: &str, stream: bool) -> Option<String> {
        match api {
            Api::Anthropic => Some(self.model_path(
                "anthropic",
                upstream_model,
                if stream { "streamRawPredict" } else { "rawPredict" },
            )),
            Api::Google => {
                let method = if stream { "streamGenerateContent" } else { "generateContent" };
                let mut path = self.model_path("google", upstream_model, method);
                // A Google caller chose its stream's framing (`alt=sse` or one JSON array); a
                // translated attempt is read as events.
                match standard.split_once('?') {
                    Some((_, q)) if !q.is_empty() => {
                        path.push('?');
                        path.push_str(q);
                    }
                    _ if standard.is_empty() && stream => path.push_str("?alt=sse"),
                    _ => {}
                }
                Some(path)
            }
            Api::OpenAi | Api::Responses => None,
        }
    }

    fn body_prefix(&self, api: Api) -> Option<&'static [u8]> {
        (api == Api::Anthropic).then_some(BODY_PREFIX)
    }

    fn blanked_members(&self, api: Api) -> &'static [&'static str] {
        if api == Api::Anthropic {
            BLANKED
        } else {
            &[]
        }
    }

    fn needs_attempt_filter(&self) -> bool {
        true
    }

    /// Vertex names no delay on its 429 (its quotas are per minute).
    fn rate_limit_delay_s(&self) -> Option<u32> {
        Some(RATE_LIMIT_DELAY_S)
    }

    fn region(&self) -> Option<&str> {
        Some(&self.location)
    }

    fn check_provider(&self, field: &str, authority: &str, has_credential: bool) -> Result<(), ConfigError> {
        if !has_credential {
            return Err(err(
                format!("{field}.credential"),
                "Vertex AI takes an OAuth2 access token (authorization: Bearer): set `credential` to where the token is",
            ));
        }
        let host = authority.rsplit_once(':').filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()));
        let host = host.map_or(authority, |(h, _)| h);
        let expected = host_of(&self.location);
        // Another host (a mock, a proxy, a Private Service Connect endpoint) is the operator's call.
        if host.ends_with(".googleapis.com") && !host.eq_ignore_ascii_case(&expected) {
            return Err(err(
                format!("{field}.authority"),
                format!(
                    "location {} is served at {expected}, not {host} (kind_options.location and the host must agree)",
                    self.location
                ),
            ));
        }
        Ok(())
    }

    fn error_status(&self, api: Api, status: u16, _headers: &[(String, String)]) -> (u16, bool) {
        (status, api == Api::Anthropic && status >= 400)
    }

    fn error_body(&self, api: Api, status: u16, _headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
        if api != Api::Anthropic {
            return body.to_vec();
        }
        anthropic_error(status, body).unwrap_or_else(|| body.to_vec())
    }
}

/// Anthropic's error `type` for a google.rpc status name (the HTTP `status` when it names none).
pub fn anthropic_type(rpc: &str, status: u16) -> &'static str {
    match rpc {
        "RESOURCE_EXHAUSTED" => "rate_limit_error",
        "UNAUTHENTICATED" => "authentication_error",
        "PERMISSION_DENIED" => "permission_error",
        "NOT_FOUND" => "not_found_error",
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => "invalid_request_error",
        "UNAVAILABLE" => "overloaded_error",
        "DEADLINE_EXCEEDED" => "timeout_error",
        "INTERNAL" | "UNKNOWN" | "ABORTED" | "UNIMPLEMENTED" => "api_error",
        _ => crate::answer::errors::anthropic_type(u32::from(status)),
    }
}

/// Vertex's own error on a Claude path (Google's shape) as Anthropic's error body, its message
/// prefixed with the status name. None: not Google's shape (the model's own Anthropic error,
/// or a body that is not JSON), passed on as it is.
pub fn anthropic_error(status: u16, body: &[u8]) -> Option<Vec<u8>> {
    use serde_json::Value;
    // Google's shape: `{"error": {"code", "message", "status"}}`; Anthropic's has `"type":"error"`.
    let v: Value = crate::json::from_slice(body).ok()?;
    let e = v.get("error").filter(|e| e.is_object() && v.get("type").is_none())?;
    let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (rpc, message) = (text("status"), text("message"));
    let message = match (rpc.is_empty(), message.is_empty()) {
        (false, false) => format!("{rpc}: {message}"),
        (false, true) => rpc.clone(),
        (true, false) => message,
        (true, true) => format!("Vertex AI answered {status}"),
    };
    let mut out = b"{\"type\":\"error\",\"error\":{\"type\":".to_vec();
    push_json_string(&mut out, anthropic_type(&rpc, status));
    out.extend_from_slice(b",\"message\":");
    push_json_string(&mut out, &message);
    out.extend_from_slice(b"}}");
    Some(out)
}

#[cfg(test)]
#[path = "vertex_tests.rs"]
mod tests;
