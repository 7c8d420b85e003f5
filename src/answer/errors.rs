//! Errors returned to callers, in the shape of the API the caller speaks, with a matching HTTP
//! status:
//! - OpenAI: `{"error": {"message", "type", "code", "param", "metadata"}}`
//! - Anthropic: `{"type": "error", "error": {"type", "message", "code", "param", "metadata"}}`
//!   (`type` from the status, as Anthropic names it; Switchyard's `code`, `param` and `metadata`
//!   ride along in the error object)
//! - Google: `{"error": {"code", "message", "status", "details": [ErrorInfo]}}` (`code` the HTTP
//!   status, `status` its google.rpc name; Switchyard's code, param and metadata in a
//!   `google.rpc.ErrorInfo` detail with domain `switchyard`)

use serde_json::{json, Map, Value};

use crate::api::Api;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u32,
    pub message: String,
    /// OpenAI error type: `invalid_request_error`, `not_found_error`, `server_error`, ...
    pub kind: &'static str,
    pub code: &'static str,
    pub param: Option<String>,
    pub metadata: Map<String, Value>,
    /// Extra response headers (e.g. `retry-after`).
    pub headers: Vec<(String, String)>,
    /// The API whose shape the body takes.
    pub api: Api,
}

/// Caller text quoted in an error message: at most `ECHO_CHARS` characters, so a megabyte model
/// id does not come back as a megabyte error.
pub const ECHO_CHARS: usize = 200;

pub fn echo(text: &str) -> String {
    match text.char_indices().nth(ECHO_CHARS) {
        Some((cut, _)) => format!("{}...", text.get(..cut).unwrap_or(text)),
        None => text.to_string(),
    }
}

impl ApiError {
    pub fn new(status: u32, kind: &'static str, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            code,
            param: None,
            metadata: Map::new(),
            headers: Vec::new(),
            api: Api::OpenAi,
        }
    }

    /// The same error in `api`'s shape.
    pub fn for_api(mut self, api: Api) -> ApiError {
        self.api = api;
        self
    }

    /// 400 for a field with a wrong type, bad value or unknown name.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(400, "invalid_request_error", "invalid_parameter", message);
        e.param = Some(param.to_string());
        e
    }

    pub fn invalid_json(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "invalid_request_error", "invalid_json", message)
    }

    pub fn model_not_found(param: &str, model: &str) -> ApiError {
        let mut e = ApiError::new(
            400,
            "invalid_request_error",
            "model_not_found",
            format!("`{param}`: \"{}\" is not a model configured on this router", echo(model)),
        );
        e.param = Some(param.to_string());
        e
    }

    /// 404 when hard filters leave no endpoint; `constraint` names the field that emptied the set.
    /// 429 when every endpoint that could serve is on a provider over its mesh-wide capacity.
    pub fn capacity_exhausted(model: &str, retry_after_s: u64) -> ApiError {
        let mut e = ApiError::new(
            429,
            "rate_limit_error",
            "capacity_exhausted",
            format!("Every provider that serves {model} is at its capacity; retry in {retry_after_s} s"),
        );
        e.metadata.insert("model".to_string(), Value::String(model.to_string()));
        e.headers.push(("retry-after".to_string(), retry_after_s.max(1).to_string()));
        e
    }

    /// Every provider left for `model` takes an access token that is not there yet (startup,
    /// the metadata server down): a 503 the caller may retry shortly.
    pub fn credential_unavailable(model: &str) -> ApiError {
        let mut e = ApiError::new(
            503,
            "server_error",
            "credential_unavailable",
            format!("Every provider left for {model} needs an access token that is not available yet; retry shortly"),
        );
        e.metadata.insert("model".to_string(), Value::String(model.to_string()));
        e.headers.push(("retry-after".to_string(), "1".to_string()));
        e
    }

    pub fn no_endpoints(model: &str, constraint: &str) -> ApiError {
        let mut e = ApiError::new(
            404,
            "not_found_error",
            "no_endpoints",
            format!("No endpoints found for {model} that satisfy `{constraint}`"),
        );
        e.metadata.insert("constraint".to_string(), Value::String(constraint.to_string()));
        e.metadata.insert("model".to_string(), Value::String(model.to_string()));
        e
    }

    /// 403 when the operator's policy does not allow the requested model (`allowed_models`).
    pub fn policy_denied(policy: &str, param: &str, model: &str) -> ApiError {
        let mut e = ApiError::new(
            403,
            "permission_error",
            "policy_denied",
            format!("`{param}`: model \"{model}\" is not allowed by the operator policy \"{policy}\""),
        );
        e.param = Some(param.to_string());
        e.metadata.insert("constraint".to_string(), Value::String(format!("policy:{policy}.allowed_models")));
        e.metadata.insert("policy".to_string(), Value::String(policy.to_string()));
        e.metadata.insert("model".to_string(), Value::String(model.to_string()));
        e
    }

    pub fn too_large(limit: u64) -> ApiError {
        ApiError::new(
            413,
            "invalid_request_error",
            "request_too_large",
            format!("request body exceeds the {limit}-byte limit of this router"),
        )
    }

    /// The error body in the shape of `self.api`.
    pub fn body(&self) -> String {
        match self.api {
            Api::OpenAi | Api::Responses => self.openai_body(),
            Api::Anthropic => self.anthropic_body(),
            Api::Google => self.google_body(),
        }
    }

    fn anthropic_body(&self) -> String {
        let mut inner = Map::new();
        inner.insert("type".into(), Value::String(anthropic_type(self.status).to_string()));
        inner.insert("message".into(), Value::String(self.message.clone()));
        inner.insert("code".into(), Value::String(self.code.to_string()));
        if let Some(p) = &self.param {
            inner.insert("param".into(), Value::String(p.clone()));
        }
        if !self.metadata.is_empty() {
            inner.insert("metadata".into(), Value::Object(self.metadata.clone()));
        }
        crate::json::to_text(&json!({"type": "error", "error": Value::Object(inner)}))
    }

    fn google_body(&self) -> String {
        let mut meta = Map::new();
        meta.insert("code".into(), Value::String(self.code.to_string()));
        if let Some(p) = &self.param {
            meta.insert("param".into(), Value::String(p.clone()));
        }
        // ErrorInfo.metadata is a map of strings.
        for (k, v) in &self.metadata {
            let text = match v {
                Value::String(s) => s.clone(),
                other => crate::json::to_text(other),
            };
            meta.insert(k.clone(), Value::String(text));
        }
        crate::json::to_text(&json!({"error": {
            "code": self.status,
            "message": self.message,
            "status": google_status(self.status),
            "details": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": self.code.to_ascii_uppercase(),
                "domain": "switchyard",
                "metadata": Value::Object(meta),
            }],
        }}))
    }

    fn openai_body(&self) -> String {
        let mut inner = Map::new();
        inner.insert("message".into(), Value::String(self.message.clone()));
        inner.insert("type".into(), Value::String(self.kind.to_string()));
        inner.insert("code".into(), Value::String(self.code.to_string()));
        inner.insert("param".into(), self.param.clone().map_or(Value::Null, Value::String));
        inner.insert("metadata".into(), Value::Object(self.metadata.clone()));
        crate::json::to_text(&json!({ "error": Value::Object(inner) }))
    }
}

/// Anthropic's error `type` for an HTTP status.
pub fn anthropic_type(status: u32) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// Google's `status` (google.rpc.Code name) for an HTTP status.
pub fn google_status(status: u32) -> &'static str {
    match status {
        400 | 413 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        502 | 503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        s if s >= 500 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_caller_text_is_bounded() {
        let e = ApiError::model_not_found("model", &"\u{e9}".repeat(100_000));
        assert!(e.message.chars().count() < ECHO_CHARS + 100, "{}", e.message.len());
        assert_eq!(echo("short"), "short");
    }

    #[test]
    fn openai_shape() {
        let e = ApiError::no_endpoints("a/b", "zdr");
        let v: Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(e.status, 404);
        assert_eq!(v["error"]["code"], "no_endpoints");
        assert_eq!(v["error"]["metadata"]["constraint"], "zdr");
        assert_eq!(v["error"]["type"], "not_found_error");
        assert!(v["error"]["param"].is_null());
        let e = ApiError::invalid("provider.sort", "bad");
        let v: Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(v["error"]["param"], "provider.sort");
        assert_eq!(ApiError::too_large(10).status, 413);
    }

    #[test]
    fn anthropic_shape() {
        let e = ApiError::no_endpoints("a/b", "api:anthropic").for_api(Api::Anthropic);
        let v: Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "not_found_error");
        assert_eq!(v["error"]["code"], "no_endpoints");
        assert_eq!(v["error"]["metadata"]["constraint"], "api:anthropic");
        assert!(v["error"]["message"].as_str().unwrap().contains("api:anthropic"));
        assert!(v.get("param").is_none() && v["error"].get("param").is_none());
        let v: Value =
            serde_json::from_str(&ApiError::invalid("provider.sort", "bad").for_api(Api::Anthropic).body()).unwrap();
        assert_eq!(
            (v["error"]["type"].as_str(), v["error"]["param"].as_str()),
            (Some("invalid_request_error"), Some("provider.sort"))
        );
        for (status, t) in [
            (403, "permission_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (502, "api_error"),
            (529, "overloaded_error"),
        ] {
            assert_eq!(anthropic_type(status), t);
        }
    }

    #[test]
    fn google_shape() {
        let e = ApiError::no_endpoints("a/b", "api:google").for_api(Api::Google);
        let v: Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(v["error"]["code"], 404);
        assert_eq!(v["error"]["status"], "NOT_FOUND");
        let info = &v["error"]["details"][0];
        assert_eq!(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
        assert_eq!(info["reason"], "NO_ENDPOINTS");
        assert_eq!(info["metadata"]["constraint"], "api:google");
        assert_eq!(info["metadata"]["code"], "no_endpoints");
        let mut e = ApiError::policy_denied("fin", "model", "m").for_api(Api::Google);
        e.metadata.insert("n".into(), json!(3));
        let v: Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(
            (v["error"]["code"].as_u64(), v["error"]["status"].as_str()),
            (Some(403), Some("PERMISSION_DENIED"))
        );
        // ErrorInfo metadata values are strings.
        assert_eq!(v["error"]["details"][0]["metadata"]["n"], "3");
        for (status, s) in [
            (400, "INVALID_ARGUMENT"),
            (429, "RESOURCE_EXHAUSTED"),
            (503, "UNAVAILABLE"),
            (504, "DEADLINE_EXCEEDED"),
            (500, "INTERNAL"),
        ] {
            assert_eq!(google_status(status), s);
        }
    }
}
