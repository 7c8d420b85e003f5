//! Amazon Bedrock: Anthropic's models through `InvokeModel` and `InvokeModelWithResponseStream`,
//! every other model (a model id that is not `anthropic.` nor `<profile>.anthropic.`) through
//! `Converse` and `ConverseStream` ([`is_anthropic`]): the endpoint serves the Anthropic API
//! either way; a Converse attempt's body is the Converse body the decision filter stored
//! (`translate::converse`), its answer turned into Anthropic's ([`converse_stream`] for streams).
//! Requests are signed by Envoy (`envoy.filters.http.aws_request_signing` on the provider's
//! cluster, after the per-attempt filter), or carry a Bedrock API key (`credential`, sent as
//! `authorization: Bearer`): the module holds no AWS secret. What differs from Anthropic's own
//! Messages API:
//!
//! - paths: `/model/{modelId}/invoke` and `/model/{modelId}/invoke-with-response-stream`, the
//!   model id or inference profile id percent-encoded as one segment (`:` as `%3A`, as SigV4's
//!   canonical URI wants it) ([`invoke_path`]);
//! - the body: the Messages body with `anthropic_version: "bedrock-2023-05-31"` in place of
//!   `model` ([`BODY_PREFIX`]) and `stream` blanked out ([`BLANKED`]): the path says both, and
//!   the body keeps its length;
//! - streams: AWS event stream frames ([`eventstream`]) whose `chunk` events carry a base64
//!   Anthropic stream event, turned back into Anthropic's SSE stream frame by frame
//!   ([`stream::Converter`]); exceptions inside the stream become an Anthropic `error` event;
//! - errors: `{"message": ...}` with the exception's name in `x-amzn-ErrorType`, turned into
//!   Anthropic's error body with a status that classifies it like any provider's
//!   ([`http_error`]).

pub mod converse_stream;
pub mod eventstream;
pub mod stream;

use std::sync::Arc;

use super::{AwsSigning, Kind, StreamConverter};
use crate::api::Api;
use crate::config::ConfigError;
use crate::protocol::bytes::push_json_string;

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

/// Whether a Bedrock model id, inference profile id or ARN names an Anthropic model (served by
/// InvokeModel with Anthropic's body): `anthropic.…`, or a profile's `<geo>.anthropic.…`.
pub fn is_anthropic(model_id: &str) -> bool {
    let id = model_id.rsplit('/').next().unwrap_or(model_id);
    id.starts_with("anthropic.") || id.split_once('.').is_some_and(|(_, rest)| rest.starts_with("anthropic."))
}

/// The path of a Converse call to `model_id`: `/model/{id}/converse`, or `/converse-stream`.
pub fn converse_path(model_id: &str, stream: bool) -> String {
    let invoke = invoke_path(model_id, false);
    let base = invoke.strip_suffix("/invoke").unwrap_or(&invoke);
    format!("{base}{}", if stream { "/converse-stream" } else { "/converse" })
}

/// What replaces the body's `{"model":"..."` prefix: Bedrock's version (the path names the model).
pub const BODY_PREFIX: &[u8] = b"{\"anthropic_version\":\"bedrock-2023-05-31\"";

/// The members after the first a Bedrock body never carries: the path says whether it streams,
/// and the version is Bedrock's (the prefix's).
pub const BLANKED: &[&str] = &["stream", "anthropic_version"];

/// The event stream's content type.
pub const EVENTSTREAM: &str = "application/vnd.amazon.eventstream";

/// `kind_options` of a `bedrock` provider.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBedrockOptions {
    /// The AWS region Envoy signs the provider's requests for (SigV4); default: the one the
    /// `authority` names (`bedrock-runtime.<region>.amazonaws.com`).
    #[serde(default)]
    region: Option<String>,
}

/// A `bedrock` provider.
#[derive(Debug)]
pub struct Bedrock {
    /// `kind_options.region`.
    region: Option<String>,
}

fn is_region(r: &str) -> bool {
    (1..=32).contains(&r.len())
        && r.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !r.starts_with('-')
        && !r.ends_with('-')
}

/// The region of a Bedrock runtime host (`bedrock-runtime[-fips].<region>.amazonaws.com[.cn]`).
pub fn region_of(authority: &str) -> Option<&str> {
    let host = authority.rsplit_once(':').filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()));
    let host = host.map_or(authority, |(h, _)| h);
    let rest = host.strip_prefix("bedrock-runtime.").or_else(|| host.strip_prefix("bedrock-runtime-fips."))?;
    let region = rest.strip_suffix(".amazonaws.com").or_else(|| rest.strip_suffix(".amazonaws.com.cn"))?;
    is_region(region).then_some(region)
}

pub(super) fn compile(field: &str, options: Option<&serde_json::Value>) -> Result<Arc<dyn Kind>, ConfigError> {
    let of = format!("{field}.kind_options");
    let raw = match options {
        None => RawBedrockOptions::default(),
        Some(v) => {
            use serde::Deserialize;
            RawBedrockOptions::deserialize(v).map_err(|e| crate::config::err(&of, e.to_string()))?
        }
    };
    if let Some(r) = raw.region.as_deref().filter(|r| !is_region(r)) {
        return Err(crate::config::err(
            format!("{of}.region"),
            format!("{r:?} is not an AWS region such as us-east-1"),
        ));
    }
    Ok(Arc::new(Bedrock { region: raw.region }))
}

fn error_type(headers: &[(String, String)]) -> Option<&str> {
    crate::filters::host::find(headers, ERROR_TYPE_HEADER)
}

impl Kind for Bedrock {
    fn name(&self) -> &'static str {
        "bedrock"
    }

    fn apis(&self) -> &'static [Api] {
        &[Api::Anthropic]
    }

    /// A Bedrock API key goes as `credential` says (default `authorization: Bearer`), not in
    /// Anthropic's `x-api-key`.
    fn key_as_configured(&self, _api: Api) -> bool {
        true
    }

    fn attempt_path(&self, api: Api, _standard: &str, upstream_model: &str, stream: bool) -> Option<String> {
        if self.converse(api, upstream_model) {
            return Some(converse_path(upstream_model, stream));
        }
        (api == Api::Anthropic).then(|| invoke_path(upstream_model, stream))
    }

    fn converse(&self, api: Api, upstream_model: &str) -> bool {
        api == Api::Anthropic && !is_anthropic(upstream_model)
    }

    fn convert_answer(&self, api: Api, upstream_model: &str, id: &str, body: &[u8]) -> Option<Vec<u8>> {
        if !self.converse(api, upstream_model) {
            return None;
        }
        crate::translate::converse::anthropic_answer(body, id, upstream_model)
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

    fn aws_signing(&self, authority: &str) -> Option<AwsSigning> {
        let region = self.region.as_deref().or_else(|| region_of(authority))?;
        Some(AwsSigning { service: "bedrock", region: region.to_string() })
    }

    fn check_provider(&self, field: &str, authority: &str, has_credential: bool) -> Result<(), ConfigError> {
        if has_credential || self.aws_signing(authority).is_some() {
            return Ok(());
        }
        Err(crate::config::err(
            format!("{field}.kind_options.region"),
            format!("Envoy signs this provider's requests: name their region (the authority {authority:?} names none), or set a Bedrock API key as `credential`"),
        ))
    }

    fn stream_converter(
        &self,
        api: Api,
        upstream_model: &str,
        content_type: Option<&str>,
    ) -> Option<Box<dyn StreamConverter>> {
        let eventstream = content_type.is_some_and(|c| c.trim_start().starts_with(EVENTSTREAM));
        if !(api == Api::Anthropic && eventstream) {
            return None;
        }
        if self.converse(api, upstream_model) {
            return Some(Box::new(converse_stream::Converter::new(upstream_model, "bdrk_converse")));
        }
        Some(Box::new(stream::Converter::new()))
    }

    fn error_status(&self, _api: Api, status: u16, headers: &[(String, String)]) -> (u16, bool) {
        if status < 400 {
            return (status, false);
        }
        (map_exception(error_type(headers).unwrap_or(""), status).status, true)
    }

    fn error_body(&self, _api: Api, status: u16, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
        http_error(status, error_type(headers), body).1
    }
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
    crate::json::from_slice::<Body>(body).ok()?.message
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
    fn anthropic_models_take_invoke_model_every_other_converse() {
        for id in [
            "anthropic.claude-3-5-haiku-20241022-v1:0",
            "us.anthropic.claude-sonnet-4-20250514-v1:0",
            "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.claude-x",
        ] {
            assert!(is_anthropic(id), "{id}");
        }
        for id in [
            "us.meta.llama3-3-70b-instruct-v1:0",
            "amazon.nova-pro-v1:0",
            "us.amazon.nova-pro-v1:0",
            "mistral.x",
            "anthropic",
        ] {
            assert!(!is_anthropic(id), "{id}");
        }
        let k = crate::providers::compile("p", Some("bedrock"), None).unwrap();
        assert_eq!(
            k.attempt_path(Api::Anthropic, "/v1/messages", "us.meta.llama3-3-70b-instruct-v1:0", false).as_deref(),
            Some("/model/us.meta.llama3-3-70b-instruct-v1%3A0/converse")
        );
        assert_eq!(
            k.attempt_path(Api::Anthropic, "/v1/messages", "us.amazon.nova-pro-v1:0", true).as_deref(),
            Some("/model/us.amazon.nova-pro-v1%3A0/converse-stream")
        );
        assert!(k.converse(Api::Anthropic, "us.amazon.nova-pro-v1:0"));
        assert!(!k.converse(Api::Anthropic, "us.anthropic.claude-x"));
        assert!(k.convert_answer(Api::Anthropic, "us.anthropic.claude-x", "i", b"{}").is_none());
    }

    #[test]
    fn the_body_names_bedrocks_version_and_neither_model_nor_stream() {
        use crate::protocol::rewrite::{kind_body, model_prefix};
        let body = br#"{"model":"us.anthropic.claude-x-v1:0","max_tokens":5, "stream" : true,"anthropic_version":"x","messages":[{"role":"user","content":"h\u00e9, \"stream\":1"}],"temperature":0.50}"#;
        let prefix_len = model_prefix("us.anthropic.claude-x-v1:0").len();
        let out = kind_body(body, prefix_len, BODY_PREFIX, BLANKED);
        // The length the attempt's content-length was set to before the body was read.
        assert_eq!(out.len(), body.len() - prefix_len + BODY_PREFIX.len());
        let v: Value =
            serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
        assert_eq!(
            v,
            json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5,
                   "messages": [{"role": "user", "content": "h\u{e9}, \"stream\":1"}], "temperature": 0.5})
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(r#""temperature":0.50}"#), "{text}");
        // Not an object: left alone.
        let mut bad = b"[1,{\"stream\":true}]".to_vec();
        crate::protocol::rewrite::blank_members(&mut bad, BLANKED);
        assert_eq!(bad, b"[1,{\"stream\":true}]");
    }

    #[test]
    fn the_kind_takes_a_region_and_no_first_attempt_cluster() {
        let k = crate::providers::compile("p", Some("bedrock"), None).unwrap();
        assert_eq!((k.name(), k.apis()), ("bedrock", &[Api::Anthropic][..]));
        assert_eq!(k.default_credential(), ("authorization", "Bearer "), "a Bedrock API key");
        assert_eq!(
            k.attempt_path(Api::Anthropic, "/v1/messages", "anthropic.a:b", true).as_deref(),
            Some("/model/anthropic.a%3Ab/invoke-with-response-stream")
        );
        assert!(k.stream_converter(Api::Anthropic, "a:b", Some("application/vnd.amazon.eventstream")).is_some());
        assert!(k.stream_converter(Api::Anthropic, "a:b", Some("application/json")).is_none());
        for (options, field) in [
            (json!({"zone": "us-east-1"}), "providers[\"b\"].kind_options"),
            (json!({"region": "US East"}), "providers[\"b\"].kind_options.region"),
            (json!({"region": ""}), "providers[\"b\"].kind_options.region"),
        ] {
            let e = crate::providers::compile("providers[\"b\"]", Some("bedrock"), Some(&options)).unwrap_err();
            assert_eq!(e.field, field, "{options}");
        }
        // Signed for the region the authority names, or the one given.
        let signing = |k: &Arc<dyn Kind>, a: &str| k.aws_signing(a).map(|s| (s.service, s.region));
        assert_eq!(signing(&k, "bedrock-runtime.us-east-1.amazonaws.com"), Some(("bedrock", "us-east-1".into())));
        assert_eq!(
            signing(&k, "bedrock-runtime-fips.us-gov-west-1.amazonaws.com:443"),
            Some(("bedrock", "us-gov-west-1".into()))
        );
        assert_eq!(signing(&k, "bedrock.example"), None);
        let eu = crate::providers::compile("p", Some("bedrock"), Some(&json!({"region": "eu-west-3"}))).unwrap();
        assert_eq!(signing(&eu, "bedrock.example"), Some(("bedrock", "eu-west-3".into())));
        // Without a region or a key it cannot be signed: refused.
        let provider = |authority: &str, extra: serde_json::Value| {
            let mut p = json!({"kind": "bedrock", "cluster": "c_b", "authority": authority, "apis": {"anthropic": {}}});
            p.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let config = json!({"providers": {"b": p},
                "models": {"m": {"endpoints": [{"provider": "b", "pricing": {"prompt": 1, "completion": 1}}]}}});
            crate::config::Catalog::from_json(config.to_string().as_bytes(), &|_| None).map(|_| ())
        };
        assert_eq!(provider("mock.example", json!({})).unwrap_err().field, "providers[\"b\"].kind_options.region");
        provider("mock.example", json!({"kind_options": {"region": "us-east-1"}})).unwrap();
        provider("mock.example", json!({"credential": {"value": "bedrock-api-key"}})).unwrap();
        provider("bedrock-runtime.us-west-2.amazonaws.com", json!({})).unwrap();
        // A Bedrock API key: `authorization: Bearer`, not Anthropic's `x-api-key`.
        let config = json!({"providers": {"b": {"kind": "bedrock", "cluster": "c_b", "authority": "mock.example",
                "apis": {"anthropic": {}}, "credential": {"value": "bedrock-api-key"}}},
            "models": {"m": {"endpoints": [{"provider": "b", "pricing": {"prompt": 1, "completion": 1}}]}}});
        let catalog = crate::config::Catalog::from_json(config.to_string().as_bytes(), &|_| None).unwrap();
        let b = catalog.provider_for_slug("b").unwrap();
        assert_eq!(b.credential_for(Api::Anthropic), Some(("authorization", "Bearer bedrock-api-key")));
        let config = json!({
            "providers": {"b": {"kind": "bedrock", "cluster": "c_b", "first_attempt_cluster": "c_b_first",
                                "authority": "bedrock-runtime.us-east-1.amazonaws.com", "apis": {"anthropic": {}}}},
            "models": {"m": {"endpoints": [{"provider": "b", "pricing": {"prompt": 1, "completion": 1}}]}}
        });
        let e = crate::config::Catalog::from_json(config.to_string().as_bytes(), &|_| None).unwrap_err();
        assert_eq!(e.field, "providers[\"b\"].first_attempt_cluster", "{e}");
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
