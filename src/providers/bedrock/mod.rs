//! Amazon Bedrock: Anthropic's models through `InvokeModel` and `InvokeModelWithResponseStream`.
//! What differs from Anthropic's own Messages API, as pure functions the `bedrock` kind is built
//! from (it is not in `KINDS` yet: the per-attempt filter does not call these yet):
//!
//! - paths: `/model/{modelId}/invoke` and `/model/{modelId}/invoke-with-response-stream`, the
//!   model id or inference profile id percent-encoded as one segment (`:` as `%3A`, as SigV4's
//!   canonical URI wants it) ([`invoke_path`]);
//! - the body: the Messages body with `anthropic_version: "bedrock-2023-05-31"` first and no
//!   `model` or `stream` (the path says both) ([`invoke_body`]);
//! - streams: AWS event stream frames ([`eventstream`]) whose `chunk` events carry a base64
//!   Anthropic stream event, turned back into Anthropic's SSE stream frame by frame
//!   ([`stream::Converter`]); exceptions inside the stream become an Anthropic `error` event;
//! - errors: `{"message": ...}` with the exception's name in `x-amzn-ErrorType`, turned into
//!   Anthropic's error body with a status that classifies it like any provider's
//!   ([`http_error`]).

pub mod eventstream;
pub mod stream;

use crate::protocol::bytes::push_json_string;
use crate::routing::request::TopLevel;

/// The `anthropic_version` Bedrock's Anthropic models take in the body.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The header naming a Bedrock error's exception (`ThrottlingException:http://...`).
pub const ERROR_TYPE_HEADER: &str = "x-amzn-errortype";

/// The path of an invocation of `model_id` (a model id, an inference profile id or an ARN):
/// every byte but letters, digits, `-`, `_`, `.` and `~` percent-encoded. Linear in the id.
pub fn invoke_path(model_id: &str, stream: bool) -> String {
    let mut path = String::with_capacity(model_id.len() * 3 + 40);
    path.push_str("/model/");
    for b in model_id.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            path.push(char::from(b));
        } else {
            path.push_str(&format!("%{b:02X}"));
        }
    }
    path.push_str(if stream { "/invoke-with-response-stream" } else { "/invoke" });
    path
}

/// The members a Bedrock body never carries: the path names the model and whether it streams,
/// and the version is Bedrock's.
const NOT_SENT: [&str; 3] = ["model", "stream", "anthropic_version"];

/// A Messages body (the caller's, or one translated into Messages) as Bedrock takes it:
/// `anthropic_version` first, then every member but `model`, `stream` and the caller's own
/// `anthropic_version` byte for byte in order. None if the body is not a JSON object. Linear.
pub fn invoke_body(body: &[u8]) -> Option<Vec<u8>> {
    let fields = TopLevel::parse(body).ok()?;
    let mut out = Vec::with_capacity(body.len() + ANTHROPIC_VERSION.len() + 24);
    out.extend_from_slice(b"{\"anthropic_version\":");
    push_json_string(&mut out, ANTHROPIC_VERSION);
    for (k, v) in fields.0.iter().filter(|(k, _)| !NOT_SENT.contains(&k.as_ref())) {
        out.push(b',');
        push_json_string(&mut out, k);
        out.push(b':');
        out.extend_from_slice(v.get().as_bytes());
    }
    out.push(b'}');
    Some(out)
}

/// What a Bedrock exception is to a caller and to the router: Anthropic's error type and the
/// status the attempt is classified by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapped {
    pub anthropic_type: &'static str,
    pub status: u16,
}

/// A Bedrock exception by name (HTTP errors' `x-amzn-ErrorType`, PascalCase; stream exceptions'
/// `:exception-type`, camelCase: compared without the case of the first letter), with the status
/// it came with (0 inside a stream). Statuses follow what the router does with them: throttling
/// and a model not ready are 429 (retried, cool-down), a service or model failure is a 5xx
/// (retried), the operator's credentials or IAM refused (signature, unknown key, access denied)
/// stay 403 (the next provider is tried), the caller's request refused stays 400.
pub fn map_exception(name: &str, status: u16) -> Mapped {
    let bare = name.split(':').next().unwrap_or("");
    let is = |n: &str| {
        bare.len() == n.len()
            && bare.get(..1).is_some_and(|f| f.eq_ignore_ascii_case(n.get(..1).unwrap_or("")))
            && bare.get(1..) == n.get(1..)
    };
    let (anthropic_type, mapped) = if is("ThrottlingException") || is("ServiceQuotaExceededException") {
        ("rate_limit_error", 429)
    } else if is("ModelNotReadyException") || is("ServiceUnavailableException") {
        ("overloaded_error", if is("ModelNotReadyException") { 429 } else { 503 })
    } else if is("ModelTimeoutException") {
        ("timeout_error", 408)
    } else if is("ModelStreamErrorException") || is("ModelErrorException") || is("InternalServerException") {
        ("api_error", if status >= 500 { status } else { 502 })
    } else if is("InvalidSignatureException")
        || is("UnrecognizedClientException")
        || is("ExpiredTokenException")
        || is("IncompleteSignatureException")
    {
        ("authentication_error", 403)
    } else if is("AccessDeniedException") {
        ("permission_error", 403)
    } else if is("ResourceNotFoundException") {
        ("not_found_error", 404)
    } else if is("ValidationException") {
        ("invalid_request_error", 400)
    } else {
        // Unknown: the status decides (a stream exception without one is the provider's failure).
        let s = if status == 0 { 502 } else { status };
        (crate::answer::errors::anthropic_type(u32::from(s)), s)
    };
    Mapped { anthropic_type, status: mapped }
}

/// Anthropic's error body for `message` of `kind`.
pub fn anthropic_error_body(kind: &str, message: &str) -> Vec<u8> {
    let mut out = b"{\"type\":\"error\",\"error\":{\"type\":".to_vec();
    push_json_string(&mut out, kind);
    out.extend_from_slice(b",\"message\":");
    push_json_string(&mut out, message);
    out.extend_from_slice(b"}}");
    out
}

/// The `message` of a Bedrock error body (`{"message": ...}`, or `Message`), if it has one.
pub fn error_message(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(default, alias = "Message")]
        message: Option<String>,
    }
    serde_json::from_slice::<Body>(body).ok()?.message
}

/// A Bedrock HTTP error (`status`, its `x-amzn-ErrorType` header if any, its body) as the status
/// to classify and answer it by and Anthropic's error body. The body's message is kept (AWS's
/// messages name no secret: the signature mismatch message names the canonical request's shape,
/// which is cut off here, never the key).
pub fn http_error(status: u16, error_type: Option<&str>, body: &[u8]) -> (u16, Vec<u8>) {
    let name = error_type.unwrap_or("");
    let mapped = map_exception(name, status);
    let mut message = error_message(body).unwrap_or_else(|| format!("Bedrock answered {status}"));
    // InvalidSignatureException's message goes on to quote the canonical request and the string
    // to sign: only its first sentence is passed on.
    if let Some(i) = message.find("\n").or_else(|| message.find("The Canonical String")) {
        message.truncate(i);
    }
    let bare = name.split(':').next().unwrap_or("");
    if !bare.is_empty() {
        message = format!("{bare}: {}", message.trim_end());
    }
    (mapped.status, anthropic_error_body(mapped.anthropic_type, &message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn paths_encode_the_model_id_as_one_segment() {
        assert_eq!(
            invoke_path("us.anthropic.claude-sonnet-4-20250514-v1:0", false),
            "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke"
        );
        assert_eq!(
            invoke_path("anthropic.claude-3-5-haiku-20241022-v1:0", true),
            "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke-with-response-stream"
        );
        assert_eq!(
            invoke_path("arn:aws:bedrock:us-east-1:1:inference-profile/us.x", false),
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x/invoke"
        );
        assert_eq!(invoke_path("a b?é", false), "/model/a%20b%3F%C3%A9/invoke");
    }

    #[test]
    fn the_body_names_bedrocks_version_and_neither_model_nor_stream() {
        let body = br#"{"model":"us.anthropic.claude","max_tokens":5,"stream":true,"anthropic_version":"x","messages":[{"role":"user","content":"h\u00e9"}],"temperature":0.50}"#;
        let out = invoke_body(body).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":5,"messages":[{"role":"user","content":"h\u00e9"}],"temperature":0.50}"#
        );
        assert_eq!(invoke_body(b"{}").unwrap(), br#"{"anthropic_version":"bedrock-2023-05-31"}"#);
        assert_eq!(invoke_body(b"[1]"), None);
        assert_eq!(invoke_body(b"{\"model\":"), None);
    }

    #[test]
    fn http_errors_are_anthropics_classified_for_failover() {
        let cases = [
            (429, "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/", 429, "rate_limit_error"),
            (503, "ServiceUnavailableException", 503, "overloaded_error"),
            (429, "ModelNotReadyException", 429, "overloaded_error"),
            (400, "ValidationException", 400, "invalid_request_error"),
            (403, "AccessDeniedException", 403, "permission_error"),
            (403, "InvalidSignatureException", 403, "authentication_error"),
            (403, "UnrecognizedClientException", 403, "authentication_error"),
            (408, "ModelTimeoutException", 408, "timeout_error"),
            (424, "ModelErrorException", 502, "api_error"),
            (500, "InternalServerException", 500, "api_error"),
            (404, "ResourceNotFoundException", 404, "not_found_error"),
            (400, "ServiceQuotaExceededException", 429, "rate_limit_error"),
            (418, "SomethingNewException", 418, "invalid_request_error"),
        ];
        for (status, name, want_status, want_type) in cases {
            let (s, body) = http_error(status, Some(name), br#"{"message":"Too many requests."}"#);
            let v: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!((s, v["error"]["type"].as_str()), (want_status, Some(want_type)), "{name}");
            assert_eq!(v["type"], "error");
            let bare = name.split(':').next().unwrap();
            assert_eq!(v["error"]["message"], format!("{bare}: Too many requests."));
        }
        // Stream exceptions are camelCase and come without a status.
        assert_eq!(map_exception("throttlingException", 0), Mapped { anthropic_type: "rate_limit_error", status: 429 });
        assert_eq!(map_exception("modelStreamErrorException", 0).status, 502);
        assert_eq!(map_exception("internalServerException", 0).status, 502);
        assert_eq!(map_exception("somethingElse", 0).status, 502);
        assert_eq!(map_exception("", 0).anthropic_type, "api_error");
    }

    #[test]
    fn a_signature_mismatch_keeps_only_its_first_sentence() {
        let body = json!({"message": "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.\n\nThe Canonical String for this request should have been\n'POST\n/model/x/invoke\n\nhost:bedrock-runtime...'"});
        let (s, out) = http_error(403, Some("InvalidSignatureException"), body.to_string().as_bytes());
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(s, 403);
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.starts_with("InvalidSignatureException: The request signature"), "{m}");
        assert!(!m.contains("Canonical") && !m.contains("host:"), "{m}");
        // No type header, no JSON body.
        let (s, out) = http_error(503, None, b"<html>");
        assert_eq!(s, 503);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["error"], json!({"type": "api_error", "message": "Bedrock answered 503"}));
    }
}
