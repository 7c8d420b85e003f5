//! Provider kinds: what differs in speaking to one kind of provider beyond the APIs it serves.
//! A provider's `kind` (default `standard`) names an entry of [`KINDS`]; the kind decides each
//! attempt's path, the key's header and how its stream is read. Adding a kind is one module
//! implementing [`Kind`] and one line in [`KINDS`].
//!
//! - `standard`: every API at its own path prefix (`path_prefix`, `apis.<api>.path_prefix`), the
//!   key where `credential` says (OpenAI: `authorization: Bearer`), streams as the API sends them.
//! - `azure` ([`azure`]): Azure OpenAI, resource + deployment.
//! - `bedrock` ([`bedrock`]): Amazon Bedrock (Anthropic's models by InvokeModel, every other
//!   model by Converse), signed by Envoy.
//! - `vertex` ([`vertex`]): Claude and Gemini on Google Vertex AI, project + location.

pub mod azure;
pub mod bedrock;
pub mod vertex;

use std::sync::Arc;

use crate::api::Api;
use crate::config::ConfigError;

/// How one kind of provider is spoken to. Every method runs on the request path: no panics,
/// linear time at most.
pub trait Kind: std::fmt::Debug + Send + Sync {
    /// The kind's name in the configuration (`kind`).
    fn name(&self) -> &'static str;

    /// The key's header and the text before the key when `credential` sets neither
    /// (`authorization`, `Bearer `).
    fn default_credential(&self) -> (&'static str, &'static str) {
        ("authorization", "Bearer ")
    }

    /// Whether an attempt in `api` carries the key as `credential` configures it (header and
    /// prefix). Otherwise the API's own key header with the bare key: `x-api-key` (Anthropic),
    /// `x-goog-api-key` (Google). By default only OpenAI's APIs take the configured header.
    fn key_as_configured(&self, api: Api) -> bool {
        matches!(api, Api::OpenAi | Api::Responses)
    }

    /// The APIs a provider of this kind may serve (`apis`).
    fn apis(&self) -> &'static [Api] {
        &Api::ALL
    }

    /// The whole path (with its query) of an attempt in `api`, from the path a standard provider
    /// of that API would be sent before its prefix (`/v1/chat/completions`, `/v1/responses`,
    /// `/v1/messages`, the caller's query left out; Google: the caller's path with its query
    /// (the caller's key taken out), empty when the attempt is translated), the endpoint's `upstream_model` and whether the caller asked for a
    /// stream. None: the standard path.
    fn attempt_path(&self, api: Api, standard: &str, upstream_model: &str, stream: bool) -> Option<String> {
        let _ = (api, standard, upstream_model, stream);
        None
    }

    /// What replaces the body's `{"model":"<upstream_model>"` prefix in `api` (OpenAI, Anthropic,
    /// Responses bodies; Google bodies have none). None: that prefix. A kind whose path names
    /// the model (Bedrock) puts its own first member there.
    fn body_prefix(&self, api: Api) -> Option<&'static [u8]> {
        let _ = api;
        None
    }

    /// Top-level members after the first that an attempt in `api` never sends: blanked in place
    /// (replaced by spaces with a comma next to them), so the body keeps its length and its
    /// `content-length` is known before it is read (`protocol::rewrite::blank_members`).
    fn blanked_members(&self, api: Api) -> &'static [&'static str] {
        let _ = api;
        &[]
    }

    /// How Envoy signs this provider's attempts with AWS SigV4 when it has no `credential`
    /// (`envoy.filters.http.aws_request_signing` after the per-attempt filter; the generators
    /// render it): the service name and region. None: the kind is not signed.
    fn aws_signing(&self, authority: &str) -> Option<AwsSigning> {
        let _ = authority;
        None
    }

    /// The region every attempt of this provider is served from, when the kind's options name
    /// it (Vertex's `location`): an endpoint's `region` defaults to it and must agree with it.
    fn region(&self) -> Option<&str> {
        None
    }

    /// How long an endpoint of this kind cools down after a 429 that names no delay (no
    /// `Retry-After`), in seconds (capped by `routing.max_retry_after_s`). None: it does not.
    fn rate_limit_delay_s(&self) -> Option<u32> {
        None
    }

    /// Checks the provider as a whole (`field`: its path), once its kind is compiled: what the
    /// kind needs of its `authority` and `credential`.
    fn check_provider(&self, field: &str, authority: &str, has_credential: bool) -> Result<(), ConfigError> {
        let _ = (field, authority, has_credential);
        Ok(())
    }

    /// Whether attempts must go through the per-attempt filter (which rewrites their body and
    /// answer): such a provider takes no `first_attempt_cluster`.
    fn needs_attempt_filter(&self) -> bool {
        false
    }

    /// The converter of a successful streamed answer in `api` with this `content-type` into the
    /// API's own stream, and the content type it then has. None: the answer is the API's.
    fn stream_converter(
        &self,
        api: Api,
        upstream_model: &str,
        content_type: Option<&str>,
    ) -> Option<Box<dyn StreamConverter>> {
        let _ = (api, upstream_model, content_type);
        None
    }

    /// Whether an attempt in `api` to `upstream_model` is sent in Bedrock's Converse API (an
    /// upstream-only API: the decision filter stores its body, `plan::CONVERSE_BODY_PROPERTY`),
    /// its whole answer converted back into `api` ([`Kind::convert_answer`]).
    fn converse(&self, api: Api, upstream_model: &str) -> bool {
        let _ = (api, upstream_model);
        false
    }

    /// A successful whole answer of an attempt to `upstream_model` in `api`'s shape, when the
    /// kind's answer is another API's ([`Kind::converse`]); `id` names it. None: not an answer
    /// of that API (passed on as it came).
    fn convert_answer(&self, api: Api, upstream_model: &str, id: &str, body: &[u8]) -> Option<Vec<u8>> {
        let _ = (api, upstream_model, id, body);
        None
    }

    /// An error answer in `api`: the status it is classified and answered by, from its status and
    /// headers (the body has not arrived), and whether its body is rewritten (`error_body`).
    fn error_status(&self, api: Api, status: u16, headers: &[(String, String)]) -> (u16, bool) {
        let _ = (api, headers);
        (status, false)
    }

    /// The error body in `api`'s shape, from the provider's (`status` as it answered, its
    /// headers). Only called when `error_status` said so, on at most `MAX_ERROR_BODY_BYTES`.
    fn error_body(&self, api: Api, status: u16, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
        let _ = (api, status, headers);
        body.to_vec()
    }

    /// Whether an event of this provider's stream in `api` (its `data:` JSON) is the provider's
    /// own addition, never shown to the caller nor translated. Only called for events that have
    /// an empty `choices` list (OpenAI) and no usage, so it reads little.
    fn hides_stream_event(&self, api: Api, data: &[u8]) -> bool {
        let _ = (api, data);
        false
    }
}

/// The kinds, by name: `(kind, its compile function)`. A compile function reads the provider's
/// `kind_options` (None when absent); `field` is the provider's path for errors.
pub type CompileKind = fn(field: &str, options: Option<&serde_json::Value>) -> Result<Arc<dyn Kind>, ConfigError>;

pub const KINDS: &[(&str, CompileKind)] =
    &[("standard", standard), ("azure", azure::compile), ("bedrock", bedrock::compile), ("vertex", vertex::compile)];

/// AWS SigV4 signing of a provider's attempts by Envoy (`Kind::aws_signing`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsSigning {
    /// SigV4's service name (`bedrock`).
    pub service: &'static str,
    pub region: String,
}

/// Turns a provider's streamed answer into its API's stream, chunk by chunk (`Kind::stream_converter`).
pub trait StreamConverter {
    /// The content type of the converted stream.
    fn content_type(&self) -> &'static str;
    /// The converted bytes of one chunk (linear in it; only a partial frame is kept).
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8>;
}

/// The default kind.
#[derive(Debug)]
pub struct Standard;

impl Kind for Standard {
    fn name(&self) -> &'static str {
        "standard"
    }
}

fn standard(field: &str, options: Option<&serde_json::Value>) -> Result<Arc<dyn Kind>, ConfigError> {
    if options.is_some() {
        return Err(crate::config::err(format!("{field}.kind_options"), "kind standard takes no options"));
    }
    Ok(Arc::new(Standard))
}

/// The kind named `name` with its options compiled (`field`: the provider's path).
pub fn compile(
    field: &str,
    name: Option<&str>,
    options: Option<&serde_json::Value>,
) -> Result<Arc<dyn Kind>, ConfigError> {
    let name = name.unwrap_or("standard");
    let Some((_, compile)) = KINDS.iter().find(|(n, _)| *n == name) else {
        let known: Vec<&str> = KINDS.iter().map(|(n, _)| *n).collect();
        return Err(crate::config::err(
            format!("{field}.kind"),
            format!("unknown provider kind {name:?} (one of: {})", known.join(", ")),
        ));
    };
    compile(field, options)
}

/// Whether an OpenAI stream event's JSON has an empty `choices` list and no usage: the only
/// chunks a kind may hide (`Kind::hides_stream_event`). Linear in the event.
pub fn choiceless_without_usage(data: &[u8]) -> bool {
    let Ok(fields) = crate::routing::request::TopLevel::parse(data) else { return false };
    let no_choices = fields
        .get("choices")
        .is_some_and(|c| serde_json::from_str::<Vec<serde::de::IgnoredAny>>(c.get()).is_ok_and(|v| v.is_empty()));
    no_choices && fields.get("usage").is_none_or(|u| u.get().trim() == "null")
}
