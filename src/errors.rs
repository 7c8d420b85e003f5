//! Errors returned to callers, shaped like OpenAI's:
//! `{"error": {"message", "type", "code", "param", "metadata"}}` with a matching HTTP status.

use serde_json::{json, Map, Value};

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
        ApiError { status, message: message.into(), kind, code, param: None, metadata: Map::new(), headers: Vec::new() }
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

    pub fn body(&self) -> String {
        let mut inner = Map::new();
        inner.insert("message".into(), Value::String(self.message.clone()));
        inner.insert("type".into(), Value::String(self.kind.to_string()));
        inner.insert("code".into(), Value::String(self.code.to_string()));
        inner.insert("param".into(), self.param.clone().map_or(Value::Null, Value::String));
        inner.insert("metadata".into(), Value::Object(self.metadata.clone()));
        json!({ "error": Value::Object(inner) }).to_string()
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
}
