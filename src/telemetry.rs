//! What a platform team watches, worked out without host calls: the `telemetry` configuration
//! (the bounded `caller` label, the per-request attributes for spans and access logs), the
//! usage metrics' names, and the attributes' filter-state names the generated Envoy
//! configuration reads (tracing custom tags and the JSON access log).
//!
//! Names follow OpenTelemetry's GenAI semantic conventions where one exists
//! (`gen_ai.client.token.usage` with `gen_ai.token.type`, `gen_ai.request.model`, ...); the
//! Prometheus names are the conventional rendering (`_total` on counters, the unit in the name).

use crate::config::ConfigError;
use serde::Deserialize;

/// Most values an operator may list for the `caller` label (its cardinality bound, with
/// `other` and `none`).
pub const MAX_CALLER_VALUES: usize = 100;

/// The `caller` label of a request whose header is absent.
pub const CALLER_NONE: &str = "none";
/// The `caller` label of a request whose header names a value not listed.
pub const CALLER_OTHER: &str = "other";

#[derive(Deserialize)]
struct RawRoot {
    #[serde(default)]
    telemetry: Option<RawTelemetry>,
}

/// `telemetry`: what the filter tells the metrics, traces and access logs beyond the defaults.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTelemetry {
    /// The usage metrics' `caller` label: a request header and the values it may take.
    #[serde(default)]
    caller: Option<RawCaller>,
    /// Write each routed request's GenAI attributes (operation, request model, provider, tokens,
    /// cost, caller) into filter state at the end of its answer, for the tracing custom tags and the
    /// JSON access log the generator renders. Off by default: up to eleven host calls per request.
    #[serde(default)]
    request_attributes: bool,
}

/// `telemetry.caller`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCaller {
    /// The request header naming the caller (a team, a tenant), lowercase.
    header: String,
    /// The values that become labels; any other value counts as `other`, no header as `none`.
    values: Vec<String>,
}

/// The compiled `telemetry` section.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Telemetry {
    pub caller: Option<CallerLabel>,
    pub request_attributes: bool,
}

/// The bounded `caller` label: a header and the values it may take.
#[derive(Debug, Clone, PartialEq)]
pub struct CallerLabel {
    pub header: String,
    pub values: Vec<String>,
}

impl CallerLabel {
    /// The label's index for a header value: a listed value's position, then `other`, then
    /// `none` (no header). Linear in the list, which is bounded.
    pub fn index(&self, value: Option<&str>) -> usize {
        match value {
            None => self.values.len() + 1,
            Some(v) => self.values.iter().position(|x| x == v.trim()).unwrap_or(self.values.len()),
        }
    }

    /// The label of an index from [`CallerLabel::index`].
    pub fn name(&self, index: usize) -> &str {
        match self.values.get(index) {
            Some(v) => v,
            None if index == self.values.len() => CALLER_OTHER,
            None => CALLER_NONE,
        }
    }
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), reason: reason.into() }
}

fn label_safe(v: &str) -> bool {
    !v.is_empty() && v.len() <= 64 && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Telemetry {
    /// Compiles the `telemetry` section of the plugin configuration (absent: defaults).
    pub fn from_json(bytes: &[u8]) -> Result<Telemetry, ConfigError> {
        let raw: RawRoot = crate::json::from_slice(bytes).map_err(|e| err("telemetry", e.to_string()))?;
        let Some(raw) = raw.telemetry else { return Ok(Telemetry::default()) };
        let caller = match raw.caller {
            None => None,
            Some(c) => {
                let header = c.header;
                if header.is_empty()
                    || !header
                        .chars()
                        .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-' || ch == '_')
                {
                    return Err(err("telemetry.caller.header", "a lowercase header name (letters, digits, `-`, `_`)"));
                }
                if c.values.is_empty() || c.values.len() > MAX_CALLER_VALUES {
                    return Err(err(
                        "telemetry.caller.values",
                        format!(
                            "1 to {MAX_CALLER_VALUES} values: each is a metric label, so the list bounds its series"
                        ),
                    ));
                }
                for (i, v) in c.values.iter().enumerate() {
                    let field = format!("telemetry.caller.values[{i}]");
                    if !label_safe(v) {
                        return Err(err(field, "1 to 64 letters, digits, `-` or `_` (it becomes a label value as is)"));
                    }
                    if v == CALLER_OTHER || v == CALLER_NONE {
                        return Err(err(field, format!("\"{v}\" is the label of unlisted or absent callers")));
                    }
                    if c.values.iter().take(i).any(|x| x == v) {
                        return Err(err(field, format!("\"{v}\" is listed twice")));
                    }
                }
                Some(CallerLabel { header, values: c.values })
            }
        };
        Ok(Telemetry { caller, request_attributes: raw.request_attributes })
    }
}

/// Filter-state names (under Envoy's `wasm.` prefix) of the per-request attributes the filter
/// writes when `telemetry.request_attributes` is on. The generator reads the same names for
/// the tracing custom tags and the JSON access log.
pub mod attribute {
    /// The model the caller asked for: the first planned catalog model, or `auto`.
    pub const REQUEST_MODEL: &str = "switchyard.request_model";
    /// The serving provider's slug.
    pub const PROVIDER: &str = "switchyard.provider";
    /// Prompt tokens of the served answer, cached ones included.
    pub const INPUT_TOKENS: &str = "switchyard.input_tokens";
    /// Completion tokens of the served answer.
    pub const OUTPUT_TOKENS: &str = "switchyard.output_tokens";
    /// Prompt tokens served from the provider's cache.
    pub const CACHE_READ_TOKENS: &str = "switchyard.cache_read_tokens";
    /// What the served answer cost, USD (the body's `usage.cost`).
    pub const COST_USD: &str = "switchyard.cost_usd";
    /// The `caller` label.
    pub const CALLER: &str = "switchyard.caller";
    /// The caller's request path (the per-attempt rewrite changes `:path` for the provider).
    pub const PATH: &str = "switchyard.path";
    /// The error code of a request Switchyard answered with an error (`no_endpoints`, ...).
    pub const ERROR: &str = "switchyard.error";
    /// The caller's `x-request-id` (removed from the request before providers see it).
    pub const REQUEST_ID: &str = "switchyard.request_id";
    /// OpenTelemetry's `gen_ai.operation.name` of the caller's API (`super::operation_name`).
    pub const OPERATION: &str = "switchyard.operation";

    /// Every attribute, in the order they are written.
    pub const ALL: [&str; 11] = [
        OPERATION,
        REQUEST_MODEL,
        PROVIDER,
        INPUT_TOKENS,
        OUTPUT_TOKENS,
        CACHE_READ_TOKENS,
        COST_USD,
        CALLER,
        PATH,
        ERROR,
        REQUEST_ID,
    ];
}

/// OpenTelemetry's `gen_ai.operation.name` of a request on `path` (query ignored): `chat` for
/// OpenAI's chat completions and Responses and Anthropic's Messages, `text_completion` for
/// OpenAI's `/v1/completions`, `generate_content` for Google's generateContent and
/// streamGenerateContent. None for a path Switchyard does not route (listings).
pub fn operation_name(path: &str) -> Option<&'static str> {
    let bare = path.split('?').next().unwrap_or("");
    match bare {
        "/v1/chat/completions" | crate::api::RESPONSES_PATH | crate::api::MESSAGES_PATH => Some("chat"),
        "/v1/completions" => Some("text_completion"),
        _ if crate::api::google_path(bare).is_some() => Some("generate_content"),
        _ => None,
    }
}

/// The labels Switchyard's stats names carry as `.label.value` pairs after the metric's name;
/// the generated bootstrap has one `stats_tags` rule per label (`switchyard_deploy::telemetry`).
pub const STAT_LABELS: [&str; 18] = [
    "model",
    "endpoint",
    "outcome",
    "kind",
    "code",
    "result",
    "reason",
    "policy",
    "limit",
    "provider",
    "gen_ai_provider_name",
    "gen_ai_request_model",
    "gen_ai_response_model",
    "gen_ai_token_type",
    "caller",
    "strategy",
    "per",
    "window",
];

/// A label value as it goes into a stats name: exactly the id (`meta-llama/llama-4-maverick`,
/// `google/gemini-2.5-pro`, `deepinfra/turbo`, `vendor/llama3:8b`), so Prometheus shows what
/// the catalog and the callers write. A label's value ends where the next `.label.` begins (the
/// `stats_tags` rules), so two things are percent-encoded, reversibly: `%` itself (`%25`), and
/// the first character of a `.`-separated part that is a label's name (a policy named `model`
/// is `%6Dodel`; `a.code.b` is `a.%63ode.b`). Decoding `%XX` gives the id back. Linear time.
pub fn label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, part) in v.split('.').enumerate() {
        if i > 0 {
            out.push('.');
        }
        let mut chars = part.chars();
        if STAT_LABELS.contains(&part) {
            // Label names are ASCII: their first character is one byte.
            if let Some(c) = chars.next() {
                out.push_str(&format!("%{:02X}", c as u32));
            }
        }
        for c in chars {
            if c == '%' {
                out.push_str("%25");
            } else {
                out.push(c);
            }
        }
    }
    out
}

/// The id a [`label_value`] encodes (`%XX` decoded); None for a malformed escape.
pub fn label_id(v: &str) -> Option<String> {
    crate::api::percent_decode(v)
}

/// The usage series kept per (request model, endpoint, policy, caller).
pub const USAGE_SERIES: usize = 5;
/// Series indices in [`usage_metric_names`].
pub const INPUT_SERIES: usize = 0;
pub const OUTPUT_SERIES: usize = 1;
pub const CACHE_READ_SERIES: usize = 2;
pub const COST_SERIES: usize = 3;
pub const DURATION_SERIES: usize = 4;

/// Cost counters count nano-USD: Envoy counters are integers, and a cheap request costs a few
/// micro-dollars.
pub const NANO_USD: f64 = 1e9;

/// The labels of one request's usage series. Values are encoded by the caller (`label_value`).
pub struct UsageLabels<'a> {
    pub request_model: &'a str,
    pub response_model: &'a str,
    pub provider: &'a str,
    pub endpoint: &'a str,
    pub policy: Option<&'a str>,
    pub caller: Option<&'a str>,
}

/// The Envoy stats names of the usage series (the bootstrap's `stats_tags` turn each
/// `.name.value` pair into a label): tokens by type, cache reads, cost, operation duration.
pub fn usage_metric_names(l: &UsageLabels) -> [String; USAGE_SERIES] {
    let mut labels = format!(
        "gen_ai_request_model.{}.gen_ai_response_model.{}.gen_ai_provider_name.{}.endpoint.{}",
        l.request_model, l.response_model, l.provider, l.endpoint
    );
    if let Some(p) = l.policy {
        labels.push_str(".policy.");
        labels.push_str(p);
    }
    if let Some(c) = l.caller {
        labels.push_str(".caller.");
        labels.push_str(c);
    }
    [
        format!("switchyard.gen_ai_client_token_usage_tokens_total.gen_ai_token_type.input.{labels}"),
        format!("switchyard.gen_ai_client_token_usage_tokens_total.gen_ai_token_type.output.{labels}"),
        format!("switchyard.gen_ai_usage_cache_read_input_tokens_total.{labels}"),
        format!("switchyard.gen_ai_usage_cost_nano_usd_total.{labels}"),
        format!("switchyard.gen_ai_client_operation_duration_milliseconds.{labels}"),
    ]
}

/// The counter of routed requests by how their order was decided.
pub fn strategy_metric_name(strategy_tag: &str) -> String {
    format!("switchyard.requests_by_strategy_total.strategy.{strategy_tag}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Telemetry, String> {
        Telemetry::from_json(json.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn absent_section_is_the_default() {
        assert_eq!(parse(r#"{"providers":{}}"#), Ok(Telemetry::default()));
    }

    #[test]
    fn caller_label_is_bounded_by_its_list() {
        let t = parse(
            r#"{"telemetry":{"caller":{"header":"x-team","values":["search","ads"]},"request_attributes":true}}"#,
        )
        .unwrap();
        assert!(t.request_attributes);
        let c = t.caller.unwrap();
        assert_eq!(c.name(c.index(Some("ads"))), "ads");
        assert_eq!(c.name(c.index(Some(" search "))), "search");
        assert_eq!(c.name(c.index(Some("billing"))), "other");
        assert_eq!(c.name(c.index(None)), "none");
        // Every index names one of values + other + none: the series bound.
        let names: std::collections::BTreeSet<_> =
            [Some("ads"), Some("search"), Some("x"), Some("y"), None].iter().map(|v| c.name(c.index(*v))).collect();
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn config_errors_name_the_field() {
        for (json, field) in [
            (r#"{"telemetry":{"caller":{"header":"X-Team","values":["a"]}}}"#, "telemetry.caller.header"),
            (r#"{"telemetry":{"caller":{"header":"x-team","values":[]}}}"#, "telemetry.caller.values"),
            (r#"{"telemetry":{"caller":{"header":"x-team","values":["a b"]}}}"#, "telemetry.caller.values[0]"),
            (r#"{"telemetry":{"caller":{"header":"x-team","values":["a","other"]}}}"#, "telemetry.caller.values[1]"),
            (r#"{"telemetry":{"caller":{"header":"x-team","values":["a","a"]}}}"#, "telemetry.caller.values[1]"),
            (r#"{"telemetry":{"callers":{}}}"#, "telemetry"),
        ] {
            let e = parse(json).unwrap_err();
            assert!(e.contains(&format!("{field}:")), "{json}: {e}");
        }
        let many: Vec<String> = (0..=MAX_CALLER_VALUES).map(|i| format!("\"t{i}\"")).collect();
        let json = format!(r#"{{"telemetry":{{"caller":{{"header":"x-team","values":[{}]}}}}}}"#, many.join(","));
        assert!(parse(&json).unwrap_err().contains("telemetry.caller.values:"));
    }

    #[test]
    fn label_values_are_the_ids_and_decode_back_exactly() {
        for (id, label) in [
            ("meta-llama/llama-4-maverick", "meta-llama/llama-4-maverick"),
            ("deepinfra/turbo", "deepinfra/turbo"),
            ("google/gemini-2.5-pro", "google/gemini-2.5-pro"),
            ("anthropic/claude-3.5-sonnet", "anthropic/claude-3.5-sonnet"),
            ("vendor/llama3:8b", "vendor/llama3:8b"),
            ("sort:price", "sort:price"),
            ("routing_cost+sticky", "routing_cost+sticky"),
            // Only what would end a label early, or `%` itself, is encoded.
            ("model", "%6Dodel"),
            ("acme/chat.kind.v1", "acme/chat.%6Bind.v1"),
            ("a.gen_ai_token_type", "a.%67en_ai_token_type"),
            ("x.modelx.code", "x.modelx.%63ode"),
            ("100%", "100%25"),
            ("%6Dodel", "%256Dodel"),
            ("weird..id.", "weird..id."),
            ("ünï/cödé", "ünï/cödé"),
        ] {
            assert_eq!(label_value(id), label, "{id}");
            assert_eq!(label_id(&label_value(id)).as_deref(), Some(id), "{id}");
            // No `.`-part of a value is a label's name: the next `.label.` ends it.
            assert!(label_value(id).split('.').all(|p| !STAT_LABELS.contains(&p)), "{id}");
        }
    }

    #[test]
    fn the_operation_is_the_callers_api() {
        for (path, op) in [
            ("/v1/chat/completions", Some("chat")),
            ("/v1/chat/completions?x=1", Some("chat")),
            ("/v1/responses", Some("chat")),
            ("/v1/messages", Some("chat")),
            ("/v1/completions", Some("text_completion")),
            ("/v1beta/models/gemini-2.5-pro:generateContent", Some("generate_content")),
            ("/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse", Some("generate_content")),
            ("/v1/models", None),
            ("/v1beta/models", None),
            ("/v1/embeddings", None),
        ] {
            assert_eq!(operation_name(path), op, "{path}");
        }
    }

    #[test]
    fn usage_names_carry_every_label_once() {
        let l = UsageLabels {
            request_model: "auto",
            response_model: "m/a",
            provider: "deepinfra",
            endpoint: "deepinfra/turbo",
            policy: Some("finance"),
            caller: Some("search"),
        };
        let names = usage_metric_names(&l);
        assert!(names[INPUT_SERIES]
            .starts_with("switchyard.gen_ai_client_token_usage_tokens_total.gen_ai_token_type.input."));
        assert!(names[OUTPUT_SERIES].contains(".gen_ai_token_type.output."));
        for n in &names {
            assert!(n.ends_with(".policy.finance.caller.search"), "{n}");
            assert_eq!(n.matches(".gen_ai_provider_name.deepinfra.").count(), 1);
        }
        let bare = usage_metric_names(&UsageLabels { policy: None, caller: None, ..l });
        assert!(bare[COST_SERIES].ends_with(".endpoint.deepinfra/turbo"));
    }
}
