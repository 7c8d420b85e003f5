//! Provider kinds: what differs in speaking to one kind of provider beyond the APIs it serves.
//! A provider's `kind` (default `standard`) names an entry of [`KINDS`]; the kind decides each
//! attempt's path, the key's header and how its stream is read. Adding a kind is one module
//! implementing [`Kind`] and one line in [`KINDS`].
//!
//! - `standard`: every API at its own path prefix (`path_prefix`, `apis.<api>.path_prefix`), the
//!   key where `credential` says (OpenAI: `authorization: Bearer`), streams as the API sends them.
//! - `azure` ([`azure`]): Azure OpenAI, resource + deployment.

pub mod azure;
pub mod bedrock;

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

    /// The APIs a provider of this kind may serve (`apis`).
    fn apis(&self) -> &'static [Api] {
        &Api::ALL
    }

    /// The whole path (with its query) of an attempt in `api`, from the path a standard provider
    /// of that API would be sent before its prefix (`/v1/chat/completions`, `/v1/responses`,
    /// `/v1/messages`, the caller's query left out; Google: the caller's path, empty when the
    /// attempt is translated) and the endpoint's `upstream_model`. None: the standard path.
    fn attempt_path(&self, api: Api, standard: &str, upstream_model: &str) -> Option<String> {
        let _ = (api, standard, upstream_model);
        None
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

pub const KINDS: &[(&str, CompileKind)] = &[("standard", standard), ("azure", azure::compile)];

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
