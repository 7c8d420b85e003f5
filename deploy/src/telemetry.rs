//! What the generated Envoy configuration tells observers, in one place so the bootstrap, the
//! Istio files and the tests read the same names: the `stats_tags` that turn Switchyard's
//! stats names into Prometheus labels, the per-request attributes (OpenTelemetry GenAI names)
//! that become tracing custom tags and JSON access-log fields, the tracer and its collector
//! cluster, and the two access-log formats.

use serde_json::{json, Map, Value};
use switchyard::telemetry::attribute;
use switchyard::wiring::{
    ATTEMPTS_HEADER, ATTEMPT_LOG_HEADER, MODEL_HEADER, POLICY_HEADER, PROVIDER_HEADER, STRATEGY_HEADER,
};

/// The labels Switchyard's stats carry as `.name.value` pairs (see `switchyard::telemetry::
/// label_value`), each a `stats_tags` rule of the bootstrap.
pub use switchyard::telemetry::STAT_LABELS as STAT_TAGS;

/// The `stats_tags` rule of one label: on a Switchyard stat (`switchyard.` after at most one
/// namespace, Envoy's `wasmcustom.`), the first `.name.` and its value up to the next
/// `.label.` or the name's end. Values may hold `.`, `/` and `:` (model ids, endpoint
/// variants); `label_value` keeps a label's name out of them. Envoy's `stats_tags` regexes are
/// ECMAScript (`std::regex`), which has lookahead; the first group is removed from the name,
/// the second is the value.
pub fn stat_tag_regex(name: &str) -> String {
    format!(r"^(?:[^.]+\.)?switchyard\..*?(\.{name}\.(.*?))(?=\.(?:{})\.|$)", STAT_TAGS.join("|"))
}

/// The bootstrap's `stats_config`.
pub fn stats_config() -> Value {
    let tags: Vec<Value> =
        STAT_TAGS.iter().map(|name| json!({"tag_name": name, "regex": stat_tag_regex(name)})).collect();
    json!({"stats_tags": tags})
}

/// On Istio, the bootstrap override that adds the `stats_tags` (istio-agent passes the file to
/// Envoy as `--config-yaml`, which Envoy merges into Istio's bootstrap: the rules are appended
/// to Istio's own). Istio's bootstrap already exports `wasmcustom.*` (its required stats
/// inclusion prefix `wasm`); without these rules the labels stay in the names.
pub fn istio_bootstrap_override() -> Value {
    json!({"stats_config": stats_config()})
}

/// Where a request attribute's value comes from in Envoy's substitution format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A response header Switchyard sets on every routed answer.
    ResponseHeader(&'static str),
    /// A filter-state value the filter writes at the answer's end (`telemetry.request_attributes`).
    FilterState(&'static str),
    /// A fixed value.
    Literal(&'static str),
}

impl Source {
    /// The substitution format string that reads it.
    pub fn format(&self) -> String {
        match self {
            Source::ResponseHeader(h) => format!("%RESP({h})%"),
            Source::FilterState(key) => format!("%FILTER_STATE(wasm.{key}:PLAIN)%"),
            Source::Literal(v) => (*v).to_string(),
        }
    }
}

/// The JSON type of an access-log field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogType {
    /// A string, as the source has it.
    Text,
    /// A JSON integer (`"attempts": 2`).
    Integer,
    /// A JSON number with a fraction (`"cost_usd": 8e-06`).
    Decimal,
}

/// The dynamic-metadata namespace where the JSON access log reads numbers
/// (`typed_numbers_filter` writes them).
pub const LOG_METADATA_NAMESPACE: &str = "switchyard.log";

impl Source {
    /// The substitution format string of its access-log field. `json_format` writes
    /// `%FILTER_STATE(...)%` and `%RESP(...)%` as JSON strings, and on Envoy 1.39/1.40 a Wasm
    /// filter-state value is bytes everywhere else (`:TYPED` is a base64 `BytesValue`; CEL has
    /// `int(string)` but no `string(bytes)`: `enable_string_conversion` is off and the
    /// bootstrap's `envoy.bootstrap.cel` that turns it on is newer); all measured. So numbers
    /// come from where Envoy holds them as numbers: a header through `%TYPED_CEL(int(...))%`,
    /// a filter-state number through the dynamic metadata `typed_numbers_filter` writes.
    /// Absent: `null`.
    pub fn log_format(&self, ty: LogType) -> String {
        match (ty, self) {
            (LogType::Text, _) | (_, Source::Literal(_)) => self.format(),
            (LogType::Integer, Source::ResponseHeader(h)) => format!("%TYPED_CEL(int(response.headers['{h}']))%"),
            (LogType::Decimal, Source::ResponseHeader(h)) => {
                format!("%TYPED_CEL(double(response.headers['{h}']))%")
            }
            (_, Source::FilterState(key)) => {
                format!("%DYNAMIC_METADATA({LOG_METADATA_NAMESPACE}:{})%", metadata_key(key))
            }
        }
    }
}

/// The dynamic-metadata key of a filter-state number (`switchyard.input_tokens` -> `input_tokens`).
fn metadata_key(key: &str) -> &str {
    key.strip_prefix("switchyard.").unwrap_or(key)
}

/// With the JSON access log: a Lua filter, before the decision filter (so it sees the response
/// after it), that copies the numeric filter-state attributes into the dynamic metadata
/// `switchyard.log` as numbers, once the answer has ended (the filter writes them at its end;
/// the body passes through chunk by chunk, unbuffered).
pub fn typed_numbers_filter() -> Value {
    let keys: Vec<String> = REQUEST_ATTRIBUTES
        .iter()
        .filter_map(|a| match (a.log_type, a.source) {
            (LogType::Integer | LogType::Decimal, Source::FilterState(k)) => Some(format!("\"{}\"", metadata_key(k))),
            _ => None,
        })
        .collect();
    let code = format!(
        "local KEYS = {{{}}}\n\
         function envoy_on_response(handle)\n\
         \x20 for _ in handle:bodyChunks() do end\n\
         \x20 local info = handle:streamInfo()\n\
         \x20 local state = info:filterState()\n\
         \x20 for _, key in ipairs(KEYS) do\n\
         \x20   local value = tonumber(state:get(\"wasm.switchyard.\" .. key) or \"\")\n\
         \x20   if value then info:dynamicMetadata():set(\"{LOG_METADATA_NAMESPACE}\", key, value) end\n\
         \x20 end\n\
         end\n",
        keys.join(", ")
    );
    // Disabled but on Switchyard's marked routes (`typed_numbers_enabled`), which name its code.
    json!({"name": TYPED_NUMBERS_FILTER, "disabled": true, "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
        "source_codes": {TYPED_NUMBERS_FILTER: {"inline_string": code}}
    }})
}

/// The name of the JSON access log's Lua filter (`typed_numbers_filter`).
pub const TYPED_NUMBERS_FILTER: &str = "switchyard.typed_log_numbers";

/// What enables `typed_numbers_filter` on a route (the filter is held disabled): its per-route
/// configuration naming the code the filter holds.
pub fn typed_numbers_enabled() -> Value {
    json!({"@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute", "name": TYPED_NUMBERS_FILTER})
}

/// One per-request attribute: its span attribute (OpenTelemetry GenAI name where one exists),
/// its access-log field and that field's JSON type, and its source.
#[derive(Clone, Copy, Debug)]
pub struct RequestAttribute {
    pub span: &'static str,
    pub log: &'static str,
    pub source: Source,
    pub log_type: LogType,
}

const fn attr(span: &'static str, log: &'static str, source: Source) -> RequestAttribute {
    RequestAttribute { span, log, source, log_type: LogType::Text }
}

const fn int(span: &'static str, log: &'static str, source: Source) -> RequestAttribute {
    RequestAttribute { span, log, source, log_type: LogType::Integer }
}

/// Every attribute a routed request's span and access-log line carry.
pub const REQUEST_ATTRIBUTES: [RequestAttribute; 15] = [
    attr("gen_ai.operation.name", "operation", Source::FilterState(attribute::OPERATION)),
    attr("gen_ai.request.model", "request_model", Source::FilterState(attribute::REQUEST_MODEL)),
    attr("gen_ai.response.model", "response_model", Source::ResponseHeader(MODEL_HEADER)),
    attr("gen_ai.provider.name", "provider", Source::FilterState(attribute::PROVIDER)),
    attr("switchyard.endpoint", "endpoint", Source::ResponseHeader(PROVIDER_HEADER)),
    attr("switchyard.strategy", "strategy", Source::ResponseHeader(STRATEGY_HEADER)),
    attr("switchyard.policy", "policy", Source::ResponseHeader(POLICY_HEADER)),
    int("switchyard.attempts", "attempts", Source::ResponseHeader(ATTEMPTS_HEADER)),
    attr("switchyard.attempt_log", "attempt_log", Source::ResponseHeader(ATTEMPT_LOG_HEADER)),
    int("gen_ai.usage.input_tokens", "input_tokens", Source::FilterState(attribute::INPUT_TOKENS)),
    int("gen_ai.usage.output_tokens", "output_tokens", Source::FilterState(attribute::OUTPUT_TOKENS)),
    int("gen_ai.usage.cache_read.input_tokens", "cache_read_tokens", Source::FilterState(attribute::CACHE_READ_TOKENS)),
    RequestAttribute {
        span: "switchyard.cost_usd",
        log: "cost_usd",
        source: Source::FilterState(attribute::COST_USD),
        log_type: LogType::Decimal,
    },
    attr("switchyard.caller", "caller", Source::FilterState(attribute::CALLER)),
    attr("error.type", "error", Source::FilterState(attribute::ERROR)),
];

/// The HCM's `tracing.custom_tags`: one tag per request attribute.
pub fn custom_tags() -> Vec<Value> {
    REQUEST_ATTRIBUTES
        .iter()
        .map(|a| match a.source {
            Source::Literal(v) => json!({"tag": a.span, "literal": {"value": v}}),
            s => json!({"tag": a.span, "value": s.format()}),
        })
        .collect()
}

/// The JSON access log's fields: Envoy's own facts, then every request attribute.
pub fn json_log_format() -> Value {
    let mut fields = Map::new();
    for (k, v) in [
        ("start_time", "%START_TIME%"),
        ("method", "%REQ(:METHOD)%"),
        ("path", &Source::FilterState(attribute::PATH).format()),
        ("status", "%RESPONSE_CODE%"),
        ("duration_ms", "%DURATION%"),
        ("bytes_received", "%BYTES_RECEIVED%"),
        ("bytes_sent", "%BYTES_SENT%"),
        ("response_flags", "%RESPONSE_FLAGS%"),
        ("trace_id", "%TRACE_ID%"),
        // The caller's `x-request-id` as the filter saw it (it is removed before providers, so
        // `%REQ(X-REQUEST-ID)%` is empty by the time the line is written).
        ("request_id", &Source::FilterState(attribute::REQUEST_ID).format()),
    ] {
        fields.insert(k.to_string(), json!(v));
    }
    for a in REQUEST_ATTRIBUTES.iter().filter(|a| !matches!(a.source, Source::Literal(_))) {
        fields.insert(a.log.to_string(), json!(a.source.log_format(a.log_type)));
    }
    Value::Object(fields)
}

/// The text access-log line: request, status, and Switchyard's audit record of the decision.
/// (Not `%REQ(:PATH)%`: the per-attempt filter rewrites the path for the provider; the record
/// carries the caller's path.)
pub const TEXT_LOG_FORMAT: &str =
    "[%START_TIME%] %REQ(:METHOD)% %RESPONSE_CODE% %DURATION%ms switchyard=%FILTER_STATE(wasm.switchyard_decision:PLAIN)%\n";

/// The access log the listener writes (to Envoy's stdout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AccessLog {
    #[default]
    Off,
    /// One text line with the decision's audit record (`TEXT_LOG_FORMAT`).
    Text,
    /// One JSON object per line (`json_log_format`).
    Json,
}

/// The HCM's `access_log`, or None when off. Only the requests of Switchyard's marked routes (`envoy::route_mark_filter`): another host of
/// the listener is not written to Switchyard's log.
pub fn access_log(kind: AccessLog) -> Option<Value> {
    let format = match kind {
        AccessLog::Off => return None,
        AccessLog::Text => json!({"text_format_source": {"inline_string": TEXT_LOG_FORMAT}}),
        AccessLog::Json => json!({"json_format": json_log_format()}),
    };
    Some(json!([{
        "name": "envoy.access_loggers.stdout",
        "filter": crate::envoy::route_mark_filter(),
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
            "log_format": format
        }
    }]))
}

/// Traces with Envoy's OpenTelemetry tracer to an OTLP/gRPC collector.
#[derive(Clone, Debug, PartialEq)]
pub struct Tracing {
    /// The collector's host (an IP or a DNS name) and port (OTLP/gRPC, usually 4317).
    pub collector: (String, u16),
    /// `service.name` of the spans.
    pub service_name: String,
    /// Requests traced without a sampled parent, percent (a caller's sampled `traceparent` is
    /// always continued).
    pub sampling_percent: f64,
}

/// The generated collector cluster's name.
pub const OTLP_CLUSTER: &str = "switchyard_otlp";

/// The HCM's `tracing`: the tracer, the sampling, one span per upstream attempt (named after
/// its provider's cluster), and the request attributes as custom tags.
pub fn hcm_tracing(t: &Tracing) -> Value {
    json!({
        "provider": {
            "name": "envoy.tracers.opentelemetry",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
                "grpc_service": {"envoy_grpc": {"cluster_name": OTLP_CLUSTER}, "timeout": "1s"},
                "service_name": t.service_name
            }
        },
        "random_sampling": {"value": t.sampling_percent},
        "spawn_upstream_span": true,
        "custom_tags": custom_tags()
    })
}

/// The collector's cluster (HTTP/2, as OTLP/gRPC needs).
pub fn otlp_cluster(t: &Tracing) -> Value {
    crate::ratelimit::grpc_cluster(OTLP_CLUSTER, &t.collector.0, t.collector.1)
}

/// The plugin configuration with `telemetry.request_attributes` on (what the custom tags and
/// the JSON log read), unless the operator set it.
pub fn with_request_attributes(config: &mut Value) {
    if let Some(obj) = config.as_object_mut() {
        let t = obj.entry("telemetry").or_insert_with(|| json!({}));
        if let Some(t) = t.as_object_mut() {
            t.entry("request_attributes").or_insert(json!(true));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_filter_state_attribute_is_read_and_every_read_is_written() {
        let read: Vec<&str> = REQUEST_ATTRIBUTES
            .iter()
            .filter_map(|a| match a.source {
                Source::FilterState(k) => Some(k),
                _ => None,
            })
            .chain([attribute::PATH, attribute::REQUEST_ID])
            .collect();
        for k in attribute::ALL {
            assert!(read.contains(&k), "{k} is written but no tag or log field reads it");
        }
        for k in &read {
            assert!(attribute::ALL.contains(k), "{k} is read but the filter never writes it");
        }
    }

    #[test]
    fn the_json_log_has_one_field_per_attribute_and_tags_one_per_attribute() {
        let log = json_log_format();
        let fields = log.as_object().unwrap();
        for a in REQUEST_ATTRIBUTES.iter().filter(|a| !matches!(a.source, Source::Literal(_))) {
            assert_eq!(fields[a.log], json!(a.source.log_format(a.log_type)), "{}", a.log);
        }
        assert_eq!(custom_tags().len(), REQUEST_ATTRIBUTES.len());
        assert_eq!(fields["path"], "%FILTER_STATE(wasm.switchyard.path:PLAIN)%");
        assert_eq!(fields["operation"], "%FILTER_STATE(wasm.switchyard.operation:PLAIN)%");
        // Numbers are JSON numbers (integration/tests/observability.rs checks the types).
        assert_eq!(fields["attempts"], "%TYPED_CEL(int(response.headers['x-switchyard-attempts']))%");
        assert_eq!(fields["input_tokens"], "%DYNAMIC_METADATA(switchyard.log:input_tokens)%");
        assert_eq!(fields["cost_usd"], "%DYNAMIC_METADATA(switchyard.log:cost_usd)%");
        let lua = typed_numbers_filter().to_string();
        for key in ["input_tokens", "output_tokens", "cache_read_tokens", "cost_usd"] {
            assert!(lua.contains(&format!("\\\"{key}\\\"")), "{key}: {lua}");
        }
    }

    #[test]
    fn stats_tags_cover_every_label_the_filter_writes() {
        let tags = stats_config();
        let names: Vec<&str> =
            tags["stats_tags"].as_array().unwrap().iter().map(|t| t["tag_name"].as_str().unwrap()).collect();
        let usage = switchyard::telemetry::usage_metric_names(&switchyard::telemetry::UsageLabels {
            request_model: "a",
            response_model: "b",
            provider: "c",
            endpoint: "d",
            policy: Some("e"),
            caller: Some("f"),
        });
        for name in usage.iter().chain([&switchyard::telemetry::strategy_metric_name("s")]) {
            let segments: Vec<&str> = name.split('.').skip(2).collect();
            for pair in segments.chunks(2) {
                assert!(names.contains(&pair[0]), "{name}: label {} has no stats_tags rule", pair[0]);
            }
        }
    }
}
