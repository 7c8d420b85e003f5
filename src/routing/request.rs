//! Parsing an OpenAI-style request body into what routing needs, keeping every other top-level
//! field as raw bytes so the upstream body can be spliced rather than re-serialized.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::answer::errors::ApiError;
use crate::api::{Api, GoogleMethod, Surface};
use crate::config::{Quantization, MAX_MODELS};
use crate::wiring::ROUTING_HEADER;

/// Fields that steer routing and never reach a provider (`session_id` names the conversation for
/// sticky routing: OpenRouter's own field, which OpenAI's API refuses as unknown).
pub const ROUTING_FIELDS: [&str; 7] = ["model", "models", "provider", "plugins", "route", "preset", "session_id"];
/// On the Anthropic surface also `fallbacks` (OpenRouter's name for `models` there): Anthropic's
/// own server-side fallbacks must not run behind Switchyard's.
pub const ANTHROPIC_ROUTING_FIELDS: [&str; 8] =
    ["model", "models", "provider", "plugins", "route", "preset", "session_id", "fallbacks"];

/// OpenRouter's own request fields that no provider's API has and routing does not read:
/// usage accounting (`usage: {"include": true}`), `transforms`, `debug` (`echo_upstream_body`)
/// and `trace` (observability). Accepted on every surface and removed before every attempt, as
/// the routing fields are (the fields a provider's API lacks only in some APIs, such as
/// `reasoning` or `user`, are `protocol::rewrite`'s per-API rules).
pub const OPENROUTER_ONLY: [&str; 4] = ["usage", "transforms", "debug", "trace"];

/// The routing fields of `api`'s requests (removed before any attempt).
pub fn routing_fields(api: Api) -> &'static [&'static str] {
    match api {
        Api::Anthropic => &ANTHROPIC_ROUTING_FIELDS,
        Api::OpenAi | Api::Google | Api::Responses => &ROUTING_FIELDS,
    }
}

/// Top-level fields that are the request itself rather than optional parameters; everything
/// else counts for `require_parameters` (`tools`, `response_format`, `temperature`, ...).
pub const NON_PARAMETERS: [&str; 19] = [
    "model",
    "usage",
    "transforms",
    "debug",
    "trace",
    "preset",
    "models",
    "provider",
    "plugins",
    "route",
    "messages",
    "prompt",
    "input",
    "stream",
    "stream_options",
    "user",
    "session_id",
    "metadata",
    "instructions",
];

/// Up to this many members, duplicates are found by comparing keys (see `TopLevel`).
const LINEAR_KEYS: usize = 16;

/// The object's top-level members, in order, values as raw JSON text.
pub struct TopLevel<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for TopLevel<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TopLevel<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevel<'de>, A::Error> {
                let mut out: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::with_capacity(map.size_hint().unwrap_or(8));
                // Duplicates: the few members of a usual body are compared with each other (no
                // hashing, no allocation: this runs on every request and answer); past
                // LINEAR_KEYS a hash set keeps the check linear (comparing each key with every
                // earlier one let a 1 MiB body of distinct keys stall a worker).
                let mut seen: Option<HashSet<Cow<'de, str>>> = None;
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    let duplicate = match &mut seen {
                        Some(set) => !set.insert(k.clone()),
                        None if out.len() < LINEAR_KEYS => out.iter().any(|(o, _)| *o == k),
                        None => {
                            let mut set: HashSet<Cow<'de, str>> = out.iter().map(|(o, _)| o.clone()).collect();
                            let duplicate = !set.insert(k.clone());
                            seen = Some(set);
                            duplicate
                        }
                    };
                    if duplicate {
                        return Err(de::Error::custom(format!("duplicate field `{k}`")));
                    }
                    let v: &'de RawValue = map.next_value()?;
                    out.push((k, v));
                }
                Ok(TopLevel(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl<'a> TopLevel<'a> {
    pub fn parse(body: &'a [u8]) -> Result<TopLevel<'a>, serde_json::Error> {
        crate::json::from_slice(body)
    }

    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

/// Model variant suffix (`model:nitro`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Nitro,
    Floor,
    Exacto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    Price,
    Throughput,
    Latency,
}

impl SortBy {
    pub fn name(self) -> &'static str {
        match self {
            SortBy::Price => "price",
            SortBy::Throughput => "throughput",
            SortBy::Latency => "latency",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    Model,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sort {
    pub by: SortBy,
    pub partition: Partition,
}

/// Percentile cutoffs of a soft preference (a bare number means p50): the same shape as the
/// measured percentiles they are compared with.
pub type Cutoffs = crate::routing::health::Percentiles;

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MaxPrice {
    pub prompt: Option<f64>,
    pub completion: Option<f64>,
    pub request: Option<f64>,
    pub image: Option<f64>,
}

/// The request's `provider` object, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderPrefs {
    pub order: Vec<String>,
    pub allow_fallbacks: bool,
    pub only: Option<Vec<String>>,
    pub ignore: Vec<String>,
    pub sort: Option<Sort>,
    pub quantizations: Option<Vec<Quantization>>,
    pub data_collection_deny: bool,
    pub zdr: bool,
    pub enforce_distillable_text: bool,
    pub require_parameters: bool,
    pub max_price: MaxPrice,
    pub preferred_min_throughput: Option<Cutoffs>,
    pub preferred_max_latency: Option<Cutoffs>,
}

impl Default for ProviderPrefs {
    fn default() -> Self {
        ProviderPrefs {
            order: Vec::new(),
            allow_fallbacks: true,
            only: None,
            ignore: Vec::new(),
            sort: None,
            quantizations: None,
            data_collection_deny: false,
            zdr: false,
            enforce_distillable_text: false,
            require_parameters: false,
            max_price: MaxPrice::default(),
            preferred_min_throughput: None,
            preferred_max_latency: None,
        }
    }
}

/// One routing-relevant view of a request body.
pub struct ChatRequest<'a> {
    pub fields: TopLevel<'a>,
    /// The primary model as written (suffix included).
    pub model: Option<String>,
    /// Fallback models as written.
    pub models: Vec<String>,
    /// The field that listed them: `models`, or `fallbacks` on the Anthropic surface (errors
    /// and the attempt log name it).
    pub models_field: &'static str,
    /// The `preset` field (a preset named in `model` is read from there); after
    /// `Presets::apply`, the preset that applied.
    pub preset: Option<String>,
    /// The request set `provider` (body or routing header): a preset's is then narrowed by it.
    pub provider_set: bool,
    pub provider: ProviderPrefs,
    pub stream: bool,
    /// `max_tokens` / `max_completion_tokens` / `max_output_tokens`.
    pub max_tokens: Option<u64>,
    /// `tools` or `tool_choice` present.
    pub has_tools: bool,
    /// Rough prompt size in tokens (bytes of messages/prompt/input / 4).
    pub prompt_tokens: u64,
    /// Optional parameters present, for `require_parameters` (in OpenAI's names: Anthropic's
    /// `stop_sequences` counts as `stop`, Google's `generationConfig.topP` as `top_p`, ...).
    pub parameters: Vec<String>,
    /// The API the request speaks.
    pub api: Api,
    /// A chat request (OpenAI chat completions and Responses, Anthropic Messages, Google
    /// generateContent): endpoints of the other APIs serve it translated. `/v1/completions`
    /// only reaches endpoints speaking OpenAI.
    pub translatable: bool,
}

/// The OpenAI parameter name an Anthropic top-level field counts as (None: not a parameter).
fn anthropic_parameter(key: &str) -> Option<&str> {
    match key {
        "system" | "fallbacks" => None,
        "stop_sequences" => Some("stop"),
        "thinking" => Some("reasoning"),
        k if NON_PARAMETERS.contains(&k) => None,
        k => Some(k),
    }
}

/// The OpenAI parameter name a Responses API top-level field counts as (None: not a parameter).
fn responses_parameter(key: &str) -> Option<&str> {
    match key {
        "max_output_tokens" => Some("max_tokens"),
        "text" => Some("response_format"),
        "store" | "include" | "truncation" | "background" | "previous_response_id" | "conversation" => None,
        k if NON_PARAMETERS.contains(&k) => None,
        k => Some(k),
    }
}

/// The OpenAI parameter name a Google `generationConfig` member counts as.
fn google_generation_parameter(key: &str) -> &str {
    match key {
        "maxOutputTokens" | "max_output_tokens" => "max_tokens",
        "topP" | "top_p" => "top_p",
        "topK" | "top_k" => "top_k",
        "stopSequences" | "stop_sequences" => "stop",
        "responseMimeType" | "response_mime_type" | "responseSchema" | "response_schema" | "responseJsonSchema" => {
            "response_format"
        }
        "presencePenalty" | "presence_penalty" => "presence_penalty",
        "frequencyPenalty" | "frequency_penalty" => "frequency_penalty",
        "responseLogprobs" | "response_logprobs" => "logprobs",
        "logprobs" => "top_logprobs",
        "thinkingConfig" | "thinking_config" => "reasoning",
        k => k,
    }
}

fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A JSON value whose objects, at every depth, have no duplicate keys. serde_json's `Value`
/// keeps the last of two equal keys; a routing field read that way could differ from what a
/// first-value reader (a policy engine, an audit log) saw, so duplicates are rejected instead.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Strict;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Strict, E> {
                Ok(Strict(Value::Bool(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Strict, E> {
                Ok(Strict(Value::from(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Strict, E> {
                Ok(Strict(Value::from(v)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Strict, E> {
                Ok(Strict(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Strict, E> {
                Ok(Strict(Value::String(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Strict, E> {
                Ok(Strict(Value::String(v)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Strict, E> {
                Ok(Strict(Value::Null))
            }
            fn visit_none<E: de::Error>(self) -> Result<Strict, E> {
                Ok(Strict(Value::Null))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
                let mut out = Vec::new();
                while let Some(Strict(v)) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Strict(Value::Array(out)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
                let mut out = serde_json::Map::new();
                while let Some(k) = map.next_key::<String>()? {
                    if out.contains_key(&k) {
                        return Err(de::Error::custom(format!("duplicate field `{k}`")));
                    }
                    let Strict(v) = map.next_value()?;
                    out.insert(k, v);
                }
                Ok(Strict(Value::Object(out)))
            }
        }
        d.deserialize_any(V)
    }
}

/// Decodes one routing field, rejecting duplicate keys at any depth.
fn parse_value(raw: &RawValue, param: &str) -> Result<Value, ApiError> {
    serde_json::from_str::<Strict>(raw.get())
        .map(|Strict(v)| v)
        .map_err(|e| bad(param, format!("`{param}` is not valid JSON: {e}")))
}

fn string_list(v: &Value, param: &str) -> Result<Vec<String>, ApiError> {
    let Value::Array(items) = v else {
        return Err(bad(param, format!("`{param}` must be an array of strings, got {}", type_name(v))));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, x)| match x {
            Value::String(s) if !s.is_empty() => Ok(s.clone()),
            _ => Err(bad(param, format!("`{param}[{i}]` must be a non-empty string"))),
        })
        .collect()
}

fn non_negative(v: &Value, param: &str) -> Result<f64, ApiError> {
    match v.as_f64() {
        Some(n) if n.is_finite() && n >= 0.0 => Ok(n),
        _ => Err(bad(param, format!("`{param}` must be a number >= 0, got {}", type_name(v)))),
    }
}

fn boolean(v: &Value, param: &str) -> Result<bool, ApiError> {
    v.as_bool().ok_or_else(|| bad(param, format!("`{param}` must be a boolean, got {}", type_name(v))))
}

fn cutoffs(v: &Value, param: &str) -> Result<Cutoffs, ApiError> {
    match v {
        Value::Number(_) => Ok(Cutoffs { p50: Some(non_negative(v, param)?), ..Cutoffs::default() }),
        Value::Object(map) => {
            let mut c = Cutoffs::default();
            for (k, x) in map {
                let p = format!("{param}.{k}");
                if x.is_null() {
                    continue;
                }
                let n = Some(non_negative(x, &p)?);
                match k.as_str() {
                    "p50" => c.p50 = n,
                    "p75" => c.p75 = n,
                    "p90" => c.p90 = n,
                    "p99" => c.p99 = n,
                    _ => return Err(bad(&p, format!("unknown percentile `{k}` in `{param}` (p50, p75, p90, p99)"))),
                }
            }
            Ok(c)
        }
        _ => Err(bad(param, format!("`{param}` must be a number or an object of percentiles, got {}", type_name(v)))),
    }
}

fn sort_by(s: &str, param: &str) -> Result<SortBy, ApiError> {
    match s {
        "price" => Ok(SortBy::Price),
        "throughput" => Ok(SortBy::Throughput),
        "latency" => Ok(SortBy::Latency),
        _ => Err(bad(param, format!("`{param}` must be \"price\", \"throughput\" or \"latency\", got \"{s}\""))),
    }
}

/// Validates the `provider` object. Unknown fields, wrong types and bad values name the field.
pub fn parse_provider(v: &Value) -> Result<ProviderPrefs, ApiError> {
    let mut p = ProviderPrefs::default();
    let map = match v {
        Value::Null => return Ok(p),
        Value::Object(m) => m,
        _ => return Err(bad("provider", format!("`provider` must be an object, got {}", type_name(v)))),
    };
    for (k, x) in map {
        let param = format!("provider.{k}");
        let param = param.as_str();
        let Some(field) = ProviderField::named(k) else { return Err(unknown_provider_field(k)) };
        // OpenRouter clients send explicit nulls for unset fields.
        if x.is_null() {
            continue;
        }
        match field {
            ProviderField::Order => p.order = string_list(x, param)?,
            ProviderField::AllowFallbacks => p.allow_fallbacks = boolean(x, param)?,
            ProviderField::Only => p.only = Some(string_list(x, param)?),
            ProviderField::Ignore => p.ignore = string_list(x, param)?,
            ProviderField::Sort => {
                p.sort = Some(match x {
                    Value::String(s) => Sort { by: sort_by(s, param)?, partition: Partition::Model },
                    Value::Object(m) => {
                        let mut by = None;
                        let mut partition = Partition::Model;
                        for (sk, sv) in m {
                            let sp = format!("provider.sort.{sk}");
                            match (sk.as_str(), sv) {
                                ("by", Value::String(s)) => by = Some(sort_by(s, &sp)?),
                                ("partition", Value::String(s)) => {
                                    partition = match s.as_str() {
                                        "model" => Partition::Model,
                                        "none" => Partition::None,
                                        _ => {
                                            return Err(bad(
                                                &sp,
                                                format!("`{sp}` must be \"model\" or \"none\", got \"{s}\""),
                                            ))
                                        }
                                    }
                                }
                                ("partition", Value::Null) => {}
                                ("by" | "partition", other) => {
                                    return Err(bad(&sp, format!("`{sp}` must be a string, got {}", type_name(other))));
                                }
                                _ => {
                                    return Err(bad(
                                        &sp,
                                        format!("unknown field `{sk}` in `provider.sort` (by, partition)"),
                                    ))
                                }
                            }
                        }
                        let by = by.ok_or_else(|| bad("provider.sort.by", "`provider.sort.by` is required"))?;
                        Sort { by, partition }
                    }
                    _ => {
                        return Err(bad(
                            param,
                            format!("`provider.sort` must be a string or {{by, partition}}, got {}", type_name(x)),
                        ))
                    }
                })
            }
            ProviderField::Quantizations => {
                let names = string_list(x, param)?;
                let mut qs = Vec::with_capacity(names.len());
                for (i, n) in names.iter().enumerate() {
                    qs.push(Quantization::parse(n).ok_or_else(|| {
                        bad(param, format!("`provider.quantizations[{i}]`: {}", Quantization::unknown(n)))
                    })?);
                }
                p.quantizations = Some(qs);
            }
            ProviderField::DataCollection => {
                p.data_collection_deny = match x.as_str() {
                    Some("allow") => false,
                    Some("deny") => true,
                    _ => return Err(bad(param, "`provider.data_collection` must be \"allow\" or \"deny\"")),
                }
            }
            ProviderField::Zdr => p.zdr = boolean(x, param)?,
            ProviderField::EnforceDistillableText => p.enforce_distillable_text = boolean(x, param)?,
            ProviderField::RequireParameters => p.require_parameters = boolean(x, param)?,
            ProviderField::MaxPrice => {
                let Value::Object(m) = x else {
                    return Err(bad(param, format!("`provider.max_price` must be an object, got {}", type_name(x))));
                };
                for (mk, mv) in m {
                    let mp = format!("provider.max_price.{mk}");
                    if mv.is_null() {
                        continue;
                    }
                    let n = Some(non_negative(mv, &mp)?);
                    match mk.as_str() {
                        "prompt" => p.max_price.prompt = n,
                        "completion" => p.max_price.completion = n,
                        "request" => p.max_price.request = n,
                        "image" => p.max_price.image = n,
                        _ => {
                            return Err(bad(
                                &mp,
                                format!(
                                    "unknown field `{mk}` in `provider.max_price` (prompt, completion, request, image)"
                                ),
                            ))
                        }
                    }
                }
            }
            ProviderField::PreferredMinThroughput => p.preferred_min_throughput = Some(cutoffs(x, param)?),
            ProviderField::PreferredMaxLatency => p.preferred_max_latency = Some(cutoffs(x, param)?),
        }
    }
    Ok(p)
}

/// The fields of the `provider` object, by name: the one list that parsing, the explicit-null
/// rule and the unknown-field error read.
#[derive(Clone, Copy)]
enum ProviderField {
    Order,
    AllowFallbacks,
    Only,
    Ignore,
    Sort,
    Quantizations,
    DataCollection,
    Zdr,
    EnforceDistillableText,
    RequireParameters,
    MaxPrice,
    PreferredMinThroughput,
    PreferredMaxLatency,
}

const PROVIDER_FIELDS: [(&str, ProviderField); 13] = [
    ("order", ProviderField::Order),
    ("allow_fallbacks", ProviderField::AllowFallbacks),
    ("only", ProviderField::Only),
    ("ignore", ProviderField::Ignore),
    ("sort", ProviderField::Sort),
    ("quantizations", ProviderField::Quantizations),
    ("data_collection", ProviderField::DataCollection),
    ("zdr", ProviderField::Zdr),
    ("enforce_distillable_text", ProviderField::EnforceDistillableText),
    ("require_parameters", ProviderField::RequireParameters),
    ("max_price", ProviderField::MaxPrice),
    ("preferred_min_throughput", ProviderField::PreferredMinThroughput),
    ("preferred_max_latency", ProviderField::PreferredMaxLatency),
];

impl ProviderField {
    fn named(name: &str) -> Option<ProviderField> {
        PROVIDER_FIELDS.iter().find(|(n, _)| *n == name).map(|&(_, f)| f)
    }
}

fn unknown_provider_field(k: &str) -> ApiError {
    bad(&format!("provider.{k}"), format!("unknown field `provider.{k}`"))
}

/// Splits a `vendor/name:variant` id. An id that is itself in the catalog keeps its colon.
pub fn split_variant<'s>(
    model: &'s str,
    is_known: &dyn Fn(&str) -> bool,
    param: &str,
) -> Result<(&'s str, Option<Variant>), ApiError> {
    if is_known(model) {
        return Ok((model, None));
    }
    match model.rsplit_once(':') {
        None => Ok((model, None)),
        Some((base, suffix)) => {
            let v = match suffix {
                "nitro" => Variant::Nitro,
                "floor" => Variant::Floor,
                "exacto" => Variant::Exacto,
                _ => {
                    return Err(ApiError::invalid(
                        param,
                        format!(
                            "unknown model variant suffix `:{}` in `{param}` (supported: :nitro, :floor, :exacto)",
                            crate::answer::errors::echo(suffix)
                        ),
                    ))
                }
            };
            Ok((base, Some(v)))
        }
    }
}

impl<'a> ChatRequest<'a> {
    /// An OpenAI-style body (the chat/completions, completions and responses paths).
    pub fn parse(body: &'a [u8]) -> Result<ChatRequest<'a>, ApiError> {
        ChatRequest::parse_for(body, &Surface::OPENAI, None)
    }

    /// A body of `surface`'s API, with routing fields optionally from the `x-switchyard-routing`
    /// header. Errors come in that API's shape.
    pub fn parse_for(
        body: &'a [u8],
        surface: &Surface,
        routing_header: Option<&str>,
    ) -> Result<ChatRequest<'a>, ApiError> {
        ChatRequest::parse_inner(body, surface, routing_header).map_err(|e| e.for_api(surface.api))
    }

    fn parse_inner(
        body: &'a [u8],
        surface: &Surface,
        routing_header: Option<&str>,
    ) -> Result<ChatRequest<'a>, ApiError> {
        let fields = TopLevel::parse(body)
            .map_err(|e| ApiError::invalid_json(format!("request body is not a valid JSON object: {e}")))?;
        let api = surface.api;
        let mut req = ChatRequest {
            fields: TopLevel(Vec::new()),
            model: None,
            models: Vec::new(),
            models_field: "models",
            preset: None,
            provider_set: false,
            provider: ProviderPrefs::default(),
            stream: false,
            max_tokens: None,
            has_tools: false,
            prompt_tokens: 0,
            parameters: Vec::new(),
            api,
            translatable: false,
        };
        if api == Api::Google {
            // The model is the path's; streaming is the method.
            req.model = surface.path_model.clone();
            req.stream = surface.method == Some(GoogleMethod::StreamGenerate);
        }
        let mut prompt_bytes: usize = 0;
        let mut parameters: Vec<String> = Vec::new();
        for (key, raw) in &fields.0 {
            let key: &str = key;
            match (key, api) {
                ("models" | "provider", _) => req.routing_field(key, raw)?,
                ("fallbacks", Api::Anthropic) => req.fallbacks_field(raw)?,
                ("preset", _) => match parse_value(raw, "preset")? {
                    Value::String(s) if !s.is_empty() => req.preset = Some(s),
                    Value::Null => {}
                    v => {
                        return Err(bad(
                            "preset",
                            format!("`preset` must be a non-empty string, got {}", type_name(&v)),
                        ))
                    }
                },
                ("model", Api::Google) => {
                    return Err(bad(
                        "model",
                        "`model` comes from the path (/v1beta/models/{model}:generateContent), not the body",
                    ));
                }
                ("model", _) => match parse_value(raw, "model")? {
                    Value::String(s) if !s.is_empty() => req.model = Some(s),
                    Value::Null => {}
                    v => {
                        return Err(bad("model", format!("`model` must be a non-empty string, got {}", type_name(&v))))
                    }
                },
                // The Responses API is stateless here (as on OpenRouter): nothing is stored, so
                // nothing can be continued.
                ("previous_response_id" | "conversation", Api::Responses) if raw.get() != "null" => {
                    return Err(bad(
                        key,
                        format!("`{key}` is not supported: responses are not stored; send the whole conversation in `input`"),
                    ));
                }
                ("stream", Api::OpenAi | Api::Anthropic | Api::Responses) => match parse_value(raw, "stream")? {
                    Value::Bool(b) => req.stream = b,
                    Value::Null => {}
                    v => return Err(bad("stream", format!("`stream` must be a boolean, got {}", type_name(&v)))),
                },
                ("max_tokens", _) | ("max_completion_tokens" | "max_output_tokens", Api::OpenAi | Api::Responses) => {
                    req.max_tokens_field(key, raw)?
                }
                ("tools" | "tool_choice", Api::OpenAi | Api::Anthropic | Api::Responses)
                | ("tools" | "toolConfig" | "tool_config", Api::Google) => {
                    let t = raw.get();
                    if t != "null" && t != "[]" {
                        req.has_tools = true;
                    }
                }
                (
                    "messages" | "prompt" | "input" | "instructions" | "system",
                    Api::OpenAi | Api::Anthropic | Api::Responses,
                )
                | ("contents" | "systemInstruction" | "system_instruction", Api::Google) => {
                    prompt_bytes += raw.get().len()
                }
                ("generationConfig" | "generation_config", Api::Google) => {
                    req.generation_config(raw, &mut parameters)?;
                    continue;
                }
                _ => {}
            }
            if raw.get() == "null" {
                continue;
            }
            let name = match api {
                Api::OpenAi => (!NON_PARAMETERS.contains(&key)).then_some(key),
                Api::Responses => responses_parameter(key),
                Api::Anthropic => anthropic_parameter(key),
                Api::Google => match key {
                    "tools" => Some("tools"),
                    "toolConfig" | "tool_config" => Some("tool_choice"),
                    _ => None,
                },
            };
            if let Some(n) = name {
                parameters.push(n.to_string());
            }
        }
        req.parameters = parameters;
        // OpenAI's chat completions is the OpenAI path whose body has `messages` (`/v1/completions`
        // has `prompt`, `/v1/responses` `input`; neither asks a usage chunk the same way).
        // The Responses API is translated too (into chat completions first).
        req.translatable = api != Api::OpenAi
            || (surface.usage_on_request && fields.get("messages").is_some() && fields.get("prompt").is_none());
        req.fields = fields;
        if let Some(header) = routing_header {
            req.routing_header(header)?;
        }
        if req.model.is_none() && req.models.is_empty() {
            return Err(bad("model", "`model` is required"));
        }
        if req.models.len() > MAX_MODELS {
            let field = req.models_field;
            return Err(bad(
                field,
                format!("`{field}` may list at most {MAX_MODELS} models, got {}", req.models.len()),
            ));
        }
        req.prompt_tokens = (prompt_bytes as u64).div_ceil(4);
        Ok(req)
    }

    /// Anthropic's `fallbacks`: `[{"model": "..."}, ...]`, OpenRouter's name for `models` on its
    /// Messages endpoint. Each entry names a model and nothing else (OpenRouter refuses
    /// per-attempt overrides too); `models` and `fallbacks` together are ambiguous.
    fn fallbacks_field(&mut self, raw: &RawValue) -> Result<(), ApiError> {
        let v = parse_value(raw, "fallbacks")?;
        if v.is_null() {
            return Ok(());
        }
        if !self.models.is_empty() {
            return Err(bad("fallbacks", "`models` and `fallbacks` name the same fallback list: set one of them"));
        }
        let Value::Array(entries) = v else {
            return Err(bad(
                "fallbacks",
                format!("`fallbacks` must be an array of {{\"model\": ...}} objects, got {}", type_name(&v)),
            ));
        };
        let mut models = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let Value::Object(o) = entry else {
                return Err(bad(
                    &format!("fallbacks[{i}]"),
                    format!("`fallbacks[{i}]` must be an object with a `model`, got {}", type_name(entry)),
                ));
            };
            if let Some(other) = o.keys().find(|k| *k != "model") {
                let other = crate::answer::errors::echo(other);
                return Err(bad(
                    &format!("fallbacks[{i}].{other}"),
                    format!("`fallbacks[{i}]` takes only `model`; per-attempt overrides such as `{other}` are not supported"),
                ));
            }
            match o.get("model") {
                Some(Value::String(m)) if !m.is_empty() => models.push(m.clone()),
                _ => {
                    return Err(bad(
                        &format!("fallbacks[{i}].model"),
                        format!("`fallbacks[{i}].model` must be a non-empty string"),
                    ))
                }
            }
        }
        self.models = models;
        self.models_field = "fallbacks";
        Ok(())
    }

    /// `models` or `provider`, from the body or the routing header.
    fn routing_field(&mut self, key: &str, raw: &RawValue) -> Result<(), ApiError> {
        if key == "models" && self.models_field == "fallbacks" {
            return Err(bad("models", "`models` and `fallbacks` name the same fallback list: set one of them"));
        }
        if key == "models" {
            let v = parse_value(raw, "models")?;
            if !v.is_null() {
                self.models = string_list(&v, "models")?;
            }
        } else {
            self.provider = parse_provider(&parse_value(raw, "provider")?)?;
            self.provider_set = true;
        }
        Ok(())
    }

    fn max_tokens_field(&mut self, key: &str, raw: &RawValue) -> Result<(), ApiError> {
        match parse_value(raw, key)? {
            Value::Null => {}
            v => {
                let n = v.as_u64().ok_or_else(|| bad(key, format!("`{key}` must be a non-negative integer")))?;
                self.max_tokens = Some(self.max_tokens.map_or(n, |m| m.max(n)));
            }
        }
        Ok(())
    }

    /// Google's `generationConfig`: `maxOutputTokens` and the parameters it sets.
    fn generation_config(&mut self, raw: &RawValue, parameters: &mut Vec<String>) -> Result<(), ApiError> {
        let Value::Object(map) = parse_value(raw, "generationConfig")? else {
            return Ok(());
        };
        for (k, v) in &map {
            if v.is_null() {
                continue;
            }
            if k == "maxOutputTokens" || k == "max_output_tokens" {
                let n = v.as_u64().ok_or_else(|| {
                    bad(
                        "generationConfig.maxOutputTokens",
                        "`generationConfig.maxOutputTokens` must be a non-negative integer",
                    )
                })?;
                self.max_tokens = Some(n);
            }
            let name = google_generation_parameter(k).to_string();
            if !parameters.contains(&name) {
                parameters.push(name);
            }
        }
        Ok(())
    }

    /// The `x-switchyard-routing` header: a JSON object with `models` and/or `provider`. A field
    /// set both here and in the body is ambiguous and refused.
    fn routing_header(&mut self, header: &str) -> Result<(), ApiError> {
        let fields = TopLevel::parse(header.as_bytes())
            .map_err(|e| bad(ROUTING_HEADER, format!("the {ROUTING_HEADER} header is not a JSON object: {e}")))?;
        for (key, raw) in &fields.0 {
            let key: &str = key;
            if key != "models" && key != "provider" {
                return Err(bad(
                    &format!("{ROUTING_HEADER}.{}", crate::answer::errors::echo(key)),
                    format!(
                        "unknown field `{}` in the {ROUTING_HEADER} header (models, provider)",
                        crate::answer::errors::echo(key)
                    ),
                ));
            }
            if self.fields.get(key).is_some() {
                return Err(bad(key, format!("`{key}` is set in both the body and the {ROUTING_HEADER} header")));
            }
            self.routing_field(key, raw)?;
        }
        Ok(())
    }

    /// Models in the order they are tried: `model` then `models`, duplicates removed.
    pub fn model_sequence(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        if let Some(m) = &self.model {
            out.push((m.clone(), "model".to_string()));
        }
        for (i, m) in self.models.iter().enumerate() {
            if !out.iter().any(|(x, _)| x == m) {
                out.push((m.clone(), format!("{}[{i}]", self.models_field)));
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
