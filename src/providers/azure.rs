//! Azure OpenAI (`kind: "azure"`): a resource (the provider's `authority`,
//! `<resource>.openai.azure.com`) serving deployments (an endpoint's `upstream_model` is the
//! deployment's name). What differs from OpenAI's own API:
//!
//! - paths: `/openai/deployments/{deployment}/chat/completions?api-version=<api_version>` (and
//!   `/completions`), or with `kind_options.path: "v1"` the v1 API, `/openai/v1/chat/completions`
//!   with the deployment as `model` (which the body carries either way). The Responses API is
//!   only in the v1 API, so `/v1/responses` always goes to `/openai/v1/responses`. The caller's
//!   query is never sent (Switchyard owns `api-version`).
//! - the key: the `api-key` header, the bare key (not `authorization: Bearer`);
//! - streams: a first chunk with empty `choices` and the prompt's `prompt_filter_results` (no
//!   usage), which is left out, so callers of every API get the stream a provider of their API
//!   would have sent. Content-filter refusals (a 400 `content_filter` error,
//!   `finish_reason: "content_filter"`) are answers, not provider failures: passed on in the
//!   caller's API's shape like any other, never failed over to another provider of the model.
//!
//! Only the OpenAI API is served (`apis` may name only `openai`).

use std::sync::Arc;

use serde::Deserialize;

use super::Kind;
use crate::api::Api;
use crate::config::{err, ConfigError};

/// The `api-version` of the deployments paths when `kind_options.api_version` is not set: the
/// newest GA version of the inference API.
pub const DEFAULT_API_VERSION: &str = "2024-10-21";

/// Azure's key header.
pub const KEY_HEADER: &str = "api-key";

/// `kind_options` of an `azure` provider.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAzureOptions {
    /// `deployments` (default): `/openai/deployments/{deployment}/...?api-version=`; `v1`: the v1
    /// API, `/openai/v1/...`, the deployment as `model`.
    #[serde(default)]
    path: Option<String>,
    /// The `api-version` query of the deployments paths (default `2024-10-21`); refused with
    /// `path: "v1"`, which takes none.
    #[serde(default)]
    api_version: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Azure {
    /// The `api-version` of the deployments paths; None: the v1 API.
    api_version: Option<String>,
}

pub(super) fn compile(field: &str, options: Option<&serde_json::Value>) -> Result<Arc<dyn Kind>, ConfigError> {
    let of = format!("{field}.kind_options");
    let raw: RawAzureOptions = match options {
        None => RawAzureOptions::default(),
        Some(v) => RawAzureOptions::deserialize(v).map_err(|e| err(&of, e.to_string()))?,
    };
    let api_version = match (raw.path.as_deref(), raw.api_version) {
        (None | Some("deployments"), v) => {
            let v = v.unwrap_or_else(|| DEFAULT_API_VERSION.to_string());
            let ok = !v.is_empty()
                && v.len() <= 64
                && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if !ok {
                return Err(err(format!("{of}.api_version"), "must be an Azure api-version such as 2024-10-21"));
            }
            Some(v)
        }
        (Some("v1"), None) => None,
        (Some("v1"), Some(_)) => {
            return Err(err(format!("{of}.api_version"), "the v1 API (path: v1) takes no api-version"));
        }
        (Some(other), _) => {
            return Err(err(format!("{of}.path"), format!("unknown path {other:?} (deployments or v1)")));
        }
    };
    Ok(Arc::new(Azure { api_version }))
}

/// `s` as one path segment: every byte but letters, digits, `-`, `_`, `.` and `~` percent-encoded.
fn push_segment(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

impl Kind for Azure {
    fn name(&self) -> &'static str {
        "azure"
    }

    fn default_credential(&self) -> (&'static str, &'static str) {
        (KEY_HEADER, "")
    }

    fn apis(&self) -> &'static [Api] {
        &[Api::OpenAi]
    }

    fn attempt_path(&self, api: Api, standard: &str, upstream_model: &str, _stream: bool) -> Option<String> {
        if api != Api::OpenAi {
            return None;
        }
        let rest = standard.strip_prefix("/v1").unwrap_or(standard);
        match &self.api_version {
            Some(version) if rest != "/responses" => {
                let mut path = String::with_capacity(40 + upstream_model.len() + rest.len() + version.len());
                path.push_str("/openai/deployments/");
                push_segment(&mut path, upstream_model);
                path.push_str(rest);
                path.push_str("?api-version=");
                path.push_str(version);
                Some(path)
            }
            _ => Some(format!("/openai/v1{rest}")),
        }
    }

    fn hides_stream_event(&self, api: Api, data: &[u8]) -> bool {
        const MARK: &[u8] = b"\"prompt_filter_results\"";
        api == Api::OpenAi && data.windows(MARK.len()).any(|w| w == MARK) && super::choiceless_without_usage(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::compile as kind;
    use serde_json::json;

    fn azure(options: serde_json::Value) -> Arc<dyn Kind> {
        kind("providers[\"azure\"]", Some("azure"), Some(&options)).unwrap()
    }

    #[test]
    fn paths_name_the_deployment_and_the_api_version() {
        let k = kind("p", Some("azure"), None).unwrap();
        let path = |standard: &str, model: &str| k.attempt_path(Api::OpenAi, standard, model, false);
        assert_eq!(
            path("/v1/chat/completions", "gpt-4.1").as_deref(),
            Some("/openai/deployments/gpt-4.1/chat/completions?api-version=2024-10-21")
        );
        assert_eq!(
            path("/v1/completions", "my dep/x").as_deref(),
            Some("/openai/deployments/my%20dep%2Fx/completions?api-version=2024-10-21")
        );
        // The Responses API is only in the v1 API.
        assert_eq!(path("/v1/responses", "gpt-4.1").as_deref(), Some("/openai/v1/responses"));
        let k = azure(json!({"api_version": "2025-04-01-preview"}));
        assert_eq!(
            k.attempt_path(Api::OpenAi, "/v1/chat/completions", "d", false).as_deref(),
            Some("/openai/deployments/d/chat/completions?api-version=2025-04-01-preview")
        );
        let v1 = azure(json!({"path": "v1"}));
        assert_eq!(
            v1.attempt_path(Api::OpenAi, "/v1/chat/completions", "d", true).as_deref(),
            Some("/openai/v1/chat/completions")
        );
        assert_eq!(v1.attempt_path(Api::Anthropic, "/v1/messages", "d", false), None);
        assert_eq!(k.default_credential(), ("api-key", ""));
        assert_eq!(k.apis(), &[Api::OpenAi]);
    }

    #[test]
    fn options_are_checked_naming_the_field() {
        for (options, field) in [
            (json!({"path": "v2"}), "providers[\"azure\"].kind_options.path"),
            (json!({"path": "v1", "api_version": "2024-10-21"}), "providers[\"azure\"].kind_options.api_version"),
            (json!({"api_version": "2024-10-21&x=1"}), "providers[\"azure\"].kind_options.api_version"),
            (json!({"api_version": ""}), "providers[\"azure\"].kind_options.api_version"),
            (json!({"region": "eastus"}), "providers[\"azure\"].kind_options"),
        ] {
            let e = kind("providers[\"azure\"]", Some("azure"), Some(&options)).unwrap_err();
            assert_eq!(e.field, field, "{options}: {e}");
        }
        let e = kind("providers[\"x\"]", Some("watsonx"), None).unwrap_err();
        assert_eq!(e.field, "providers[\"x\"].kind");
        let e = kind("providers[\"x\"]", None, Some(&json!({}))).unwrap_err();
        assert_eq!(e.field, "providers[\"x\"].kind_options");
    }

    #[test]
    fn only_the_prompt_filter_chunk_is_hidden() {
        let k = kind("p", Some("azure"), None).unwrap();
        let first = br#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}"#;
        assert!(k.hides_stream_event(Api::OpenAi, first));
        // Content, the usage chunk, and anything that is not a choiceless chunk pass.
        for kept in [
            &br#"{"choices":[{"index":0,"delta":{"content":"hi"},"content_filter_results":{}}],"prompt_filter_results":[]}"#[..],
            br#"{"choices":[],"usage":{"prompt_tokens":1},"prompt_filter_results":[]}"#,
            br#"{"choices":[],"id":"x"}"#,
            br#"{"prompt_filter_results":[]"#,
        ] {
            assert!(!k.hides_stream_event(Api::OpenAi, kept), "{}", String::from_utf8_lossy(kept));
        }
        assert!(!crate::providers::Standard.hides_stream_event(Api::OpenAi, first));
    }

    /// Azure's stream: the prompt filter chunk first, content with `content_filter_results`, a
    /// finish, the usage chunk, `[DONE]`.
    const STREAM: &str = concat!(
        "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{}}]}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{\"content\":\"Hi\",\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4.1-2025-04-14\",\"object\":\"chat.completion.chunk\",\"usage\":null}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{},\"finish_reason\":\"content_filter\",\"index\":0}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4.1-2025-04-14\",\"object\":\"chat.completion.chunk\",\"usage\":null}\n\n",
        "data: {\"choices\":[],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4.1-2025-04-14\",\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,\"total_tokens\":10}}\n\n",
        "data: [DONE]\n\n"
    );

    #[test]
    fn an_openai_caller_gets_the_stream_without_the_prompt_filter_chunk() {
        use crate::answer::response::{Served, SseRewriter};
        let served = Served {
            model: "openai/gpt-4.1".into(),
            slug: "azure".into(),
            pricing: crate::config::Pricing {
                prompt: 2.0,
                completion: 8.0,
                request: 0.0,
                image: 0.0,
                cached_prompt: None,
            },
            api: Api::OpenAi,
        };
        let k = kind("p", Some("azure"), None).unwrap();
        // Fed byte by byte: an event split across reads is still recognized.
        let mut r = SseRewriter::new(served).hiding_events_of(k);
        let mut out: Vec<u8> = STREAM.as_bytes().chunks(7).flat_map(|c| r.feed(c, false)).collect();
        out.extend(r.feed(b"", true));
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("prompt_filter_results"), "{out}");
        let chunks: Vec<serde_json::Value> = out
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(chunks.len(), 3, "{out}");
        assert!(chunks.iter().all(|c| c["model"] == "openai/gpt-4.1" && c["provider"] == "azure"), "{out}");
        assert_eq!(chunks[1]["choices"][0]["finish_reason"], "content_filter");
        assert!(chunks[2]["usage"]["cost"].is_number(), "{out}");
        assert!(out.ends_with("data: [DONE]\n\n"));
    }

    #[test]
    fn a_translated_caller_gets_a_whole_stream_and_the_refusal_in_its_shape() {
        use crate::translate::stream::StreamTranslator;
        let k = kind("p", Some("azure"), None).unwrap();
        let mut t = StreamTranslator::new(Api::OpenAi, Api::Anthropic, 1, false).hiding_events_of(k);
        let out: Vec<u8> = STREAM.as_bytes().chunks(5).flat_map(|c| t.feed(c)).collect();
        let out = String::from_utf8(out).unwrap();
        assert!(t.ended(), "{out}");
        // message_start names the answer's id (not the prompt filter chunk's empty one).
        assert!(out.contains("\"id\":\"msg_chatcmpl-1\""), "{out}");
        assert!(out.contains("\"stop_reason\":\"refusal\""), "{out}");
        assert!(out.contains("\"output_tokens\":1"), "{out}");
        assert!(!out.contains("prompt_filter"), "{out}");
    }
}
