//! Request rewrites, done by splicing raw JSON rather than re-serializing the whole document
//! (the answer's rewrite is in `response`): the decision's body, and each attempt's body and
//! path for its provider (`attempt_rewrite`, which the first attempt's preparation shares).

use crate::api::Api;
use crate::config::Catalog;
use crate::protocol::plan::AttemptPlan;
use crate::routing::request::{routing_fields, TopLevel, OPENROUTER_ONLY, ROUTING_FIELDS};
use serde_json::value::RawValue;

use crate::protocol::bytes::push_json_string;

/// The request body a caller's endpoints take when they speak its API: which of OpenRouter's
/// fields the provider's API lacks (OpenAI's three request bodies differ there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `/v1/chat/completions`.
    OpenAiChat,
    /// `/v1/completions`.
    OpenAiCompletions,
    /// `/v1/responses`.
    OpenAiResponses,
    Anthropic,
    Google,
}

impl Dialect {
    pub fn api(self) -> Api {
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiCompletions => Api::OpenAi,
            Dialect::OpenAiResponses => Api::Responses,
            Dialect::Anthropic => Api::Anthropic,
            Dialect::Google => Api::Google,
        }
    }

    /// A request of `api`: for OpenAI, `chat` (a chat completions body) or `responses` (the
    /// Responses API) or else the legacy completions.
    pub fn of(api: Api, chat: bool, responses: bool) -> Dialect {
        match api {
            Api::Anthropic => Dialect::Anthropic,
            Api::Google => Dialect::Google,
            Api::Responses => Dialect::OpenAiResponses,
            Api::OpenAi if responses => Dialect::OpenAiResponses,
            Api::OpenAi if chat => Dialect::OpenAiChat,
            Api::OpenAi => Dialect::OpenAiCompletions,
        }
    }
}

/// What becomes of one top-level member on its way to a provider.
enum Member {
    /// Copied byte for byte.
    Keep,
    /// Left out.
    Drop,
    /// Replaced by this member (name, raw JSON value), in its place.
    Put(&'static str, Vec<u8>),
}

/// The members every body leaves out: `api`'s routing fields and OpenRouter's own fields.
fn never_forwarded(api: Api, key: &str) -> bool {
    routing_fields(api).contains(&key) || OPENROUTER_ONLY.contains(&key)
}

/// OpenRouter's `reasoning` object, as far as a provider's own field can say it.
#[derive(serde::Deserialize, Default)]
struct Reasoning {
    #[serde(default)]
    effort: Option<String>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    enabled: Option<bool>,
}

fn reasoning(raw: &RawValue) -> Reasoning {
    serde_json::from_str::<Option<Reasoning>>(raw.get()).ok().flatten().unwrap_or_default()
}

/// The members of the Responses API's `reasoning` object.
const RESPONSES_REASONING: [&str; 3] = ["effort", "summary", "generate_summary"];

/// OpenRouter's `reasoning` on the Responses API: its members OpenAI has kept (byte for byte
/// when that is all of them), OpenRouter's own (`max_tokens`, `exclude`, `enabled`) left out;
/// dropped when disabled or nothing is left. Anything but an object is the API's to judge.
fn responses_reasoning(raw: &RawValue) -> Member {
    let Ok(Some(mut o)) = serde_json::from_str::<Option<serde_json::Map<String, serde_json::Value>>>(raw.get()) else {
        return Member::Keep;
    };
    if o.get("enabled") == Some(&serde_json::Value::Bool(false)) {
        return Member::Drop;
    }
    let all = o.len();
    o.retain(|k, _| RESPONSES_REASONING.contains(&k.as_str()));
    match o.len() {
        0 => Member::Drop,
        n if n == all => Member::Keep,
        _ => serde_json::to_vec(&o).map_or(Member::Drop, |v| Member::Put("reasoning", v)),
    }
}

/// A member of a body of `dialect` as the provider's API takes it: OpenRouter's fields the API
/// lacks mapped onto its own field when it has one (and the caller did not set that too), else
/// dropped. Each rule looks at a bounded number of other members: linear in the body.
fn member(dialect: Dialect, fields: &TopLevel, key: &str, raw: &RawValue) -> Member {
    if never_forwarded(dialect.api(), key) {
        return Member::Drop;
    }
    // Present at all, even as null: a second member of the same name would be a duplicate.
    let absent = |k: &str| fields.get(k).is_none();
    match (dialect, key) {
        // Chat completions takes the effort alone (no budget, no `exclude`).
        (Dialect::OpenAiChat, "reasoning") => match reasoning(raw) {
            Reasoning { effort: Some(e), enabled, .. } if enabled != Some(false) && absent("reasoning_effort") => {
                let mut v = Vec::with_capacity(e.len() + 2);
                push_json_string(&mut v, &e);
                Member::Put("reasoning_effort", v)
            }
            _ => Member::Drop,
        },
        // The Responses API has `reasoning`, with fewer members than OpenRouter's.
        (Dialect::OpenAiResponses, "reasoning") => responses_reasoning(raw),
        // OpenRouter's top-level `cache_control` (Anthropic's automatic caching) and
        // `image_config`: no OpenAI body has them.
        (Dialect::OpenAiChat | Dialect::OpenAiResponses, "cache_control" | "image_config") => Member::Drop,
        // Codex's `client_metadata` (its installation, session and turn ids, for OpenAI's logs):
        // it only tunes logging, and a Responses host other than OpenAI refuses it as unknown.
        (Dialect::OpenAiResponses, "client_metadata") => Member::Drop,
        (Dialect::OpenAiCompletions, "reasoning" | "cache_control" | "image_config" | "prompt_cache_key") => {
            Member::Drop
        }
        // Messages names the end user in `metadata.user_id`.
        (Dialect::Anthropic, "user") if raw.get().starts_with('"') && absent("metadata") => {
            let mut v = b"{\"user_id\":".to_vec();
            v.extend_from_slice(raw.get().as_bytes());
            v.push(b'}');
            Member::Put("metadata", v)
        }
        // A reasoning budget is Messages' `thinking`; an effort alone has no counterpart.
        (Dialect::Anthropic, "reasoning") => match reasoning(raw) {
            Reasoning { max_tokens: Some(n), enabled, .. } if enabled != Some(false) && absent("thinking") => {
                Member::Put("thinking", format!("{{\"type\":\"enabled\",\"budget_tokens\":{n}}}").into_bytes())
            }
            _ => Member::Drop,
        },
        (Dialect::Anthropic, "user" | "prompt_cache_key" | "image_config") => Member::Drop,
        (Dialect::Google, "user" | "reasoning" | "prompt_cache_key" | "image_config" | "cache_control") => Member::Drop,
        _ => Member::Keep,
    }
}

/// `{"<first_key>":"<first_value>"` (when given) followed by the members of `fields` as `edit`
/// says, each kept one copied byte-for-byte in its original order.
fn splice(fields: &TopLevel, first: Option<(&str, &str)>, edit: &dyn Fn(&str, &RawValue) -> Member) -> Vec<u8> {
    let size: usize = fields.0.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum();
    let mut out = Vec::with_capacity(size + first.map_or(0, |(k, v)| k.len() + v.len()) + 8);
    out.push(b'{');
    let mut empty = true;
    if let Some((first_key, first_value)) = first {
        push_json_string(&mut out, first_key);
        out.push(b':');
        push_json_string(&mut out, first_value);
        empty = false;
    }
    for (k, v) in &fields.0 {
        let put;
        let (key, value): (&str, &[u8]) = match edit(k, v) {
            Member::Drop => continue,
            Member::Keep => (k, v.get().as_bytes()),
            Member::Put(key, value) => {
                put = value;
                (key, &put)
            }
        };
        if !empty {
            out.push(b',');
        }
        empty = false;
        push_json_string(&mut out, key);
        out.push(b':');
        out.extend_from_slice(value);
    }
    out.push(b'}');
    out
}

/// The body a provider receives: `model` first (the endpoint's upstream id), routing fields
/// removed, every other member copied byte-for-byte in its original order.
pub fn upstream_body(fields: &TopLevel, upstream_model: &str) -> Vec<u8> {
    splice(fields, Some(("model", upstream_model)), &|k, _| {
        if ROUTING_FIELDS.contains(&k) {
            Member::Drop
        } else {
            Member::Keep
        }
    })
}

/// The caller's body as the translators read it: routing fields and OpenRouter's own fields
/// removed (never reported as dropped: no API has them), every other member kept for the
/// translation to map (`reasoning`, `user`, ...). No model.
pub fn translation_source(api: Api, fields: &TopLevel) -> Vec<u8> {
    let first = (api != Api::Google).then_some(("model", ""));
    splice(fields, first, &|k, _| if never_forwarded(api, k) { Member::Drop } else { Member::Keep })
}

/// The body a provider of the caller's own API receives (`dialect`). OpenAI and Anthropic:
/// `model` first (the endpoint's upstream id); Google: no model (the path names it). Routing
/// fields (Anthropic's `fallbacks` too) and OpenRouter's own fields removed, OpenRouter's
/// fields the API lacks mapped or removed (`member`); every other member copied byte for byte.
///
/// `ask_usage` (an OpenAI chat completions or completions stream): `stream_options` is moved to
/// the end with `include_usage: true` (the caller's other options kept), so the provider ends the
/// stream with its usage whatever the caller asked.
pub fn upstream_body_for(dialect: Dialect, fields: &TopLevel, upstream_model: &str, ask_usage: bool) -> Vec<u8> {
    let edit = |k: &str, v: &RawValue| member(dialect, fields, k, v);
    match dialect.api() {
        Api::Google => splice(fields, None, &edit),
        Api::Anthropic | Api::Responses => splice(fields, Some(("model", upstream_model)), &edit),
        Api::OpenAi if !ask_usage => splice(fields, Some(("model", upstream_model)), &edit),
        Api::OpenAi => {
            let edit = |k: &str, v: &RawValue| if k == STREAM_OPTIONS { Member::Drop } else { edit(k, v) };
            let mut out = splice(fields, Some(("model", upstream_model)), &edit);
            out.pop();
            out.extend_from_slice(b",\"stream_options\":");
            out.extend_from_slice(&stream_options_with_usage(fields.get(STREAM_OPTIONS).map(|v| v.get())));
            out.push(b'}');
            out
        }
    }
}

const STREAM_OPTIONS: &str = "stream_options";

/// The caller's `stream_options` object with `include_usage: true` (anything but an object is
/// replaced).
fn stream_options_with_usage(raw: Option<&str>) -> Vec<u8> {
    let mut options: serde_json::Map<String, serde_json::Value> =
        raw.and_then(|r| serde_json::from_str(r).ok()).unwrap_or_default();
    options.insert("include_usage".to_string(), serde_json::Value::Bool(true));
    serde_json::to_vec(&options).unwrap_or_else(|_| br#"{"include_usage":true}"#.to_vec())
}

/// Whether the caller's own `stream_options` asked for the usage chunk (`include_usage: true`).
pub fn asks_usage(fields: &TopLevel) -> bool {
    #[derive(serde::Deserialize)]
    struct Options {
        #[serde(default)]
        include_usage: Option<bool>,
    }
    fields
        .get(STREAM_OPTIONS)
        .and_then(|r| serde_json::from_str::<Options>(r.get()).ok())
        .and_then(|o| o.include_usage)
        .unwrap_or(false)
}

/// The path of one Google attempt: `{prefix}/{version}/models/{upstream model}:{method}`, the
/// caller's API version (`v1beta`, `v1`) and query kept. None when `request_path` is not a
/// Google model method.
pub fn google_upstream_path(request_path: &str, path_prefix: &str, upstream_model: &str) -> Option<String> {
    let (_, method) = crate::api::google_path(request_path)?;
    let version = if request_path.starts_with(crate::api::GOOGLE_MODELS_PREFIX) { "v1beta" } else { "v1" };
    let mut path = format!("{path_prefix}/{version}/models/{upstream_model}:{}", method.name());
    if let Some((_, q)) = request_path.split_once('?') {
        path.push('?');
        path.push_str(q);
    }
    Some(path)
}

/// Path sent upstream: the request's `/v1` prefix replaced by the provider's `path_prefix`.
pub fn upstream_path(request_path: &str, path_prefix: &str) -> String {
    match request_path.strip_prefix("/v1") {
        Some(rest) if path_prefix != "/v1" => format!("{path_prefix}{rest}"),
        _ => request_path.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Per-attempt rewrite
// ---------------------------------------------------------------------------------------------

/// What one attempt's upstream filter sets.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRewrite {
    /// This configuration's endpoint, if it still has it.
    pub endpoint: Option<usize>,
    /// Model id and endpoint slug of the attempt (statistics, metrics).
    pub model: String,
    pub slug: String,
    /// The planner's endpoint index (attempt records, read by the filter that made the plan).
    pub planned: u16,
    pub authority: String,
    pub path: String,
    pub credential: Option<(String, String)>,
    /// The header the provider's cluster injected the key in (`credential.injected`): kept.
    pub injected_header: Option<String>,
    /// The provider's attempts carry an access token from this source (in `authorization`,
    /// read from shared data by the per-attempt filter).
    pub token: Option<std::sync::Arc<crate::tokens::TokenSource>>,
    pub content_length: usize,
    /// Replacement for the body's first `prefix_len` bytes; None when already right.
    pub new_prefix: Option<Vec<u8>>,
    /// The API this attempt speaks to its endpoint (`ApiSet::serving`).
    pub api: Api,
    /// The attempt's API is not the written body's: its body is the one stored for its API
    /// (`plan::body_property`), with `upstream_model` spliced in (`foreign_body`).
    pub foreign_body: bool,
    pub upstream_model: String,
}

/// The body of an attempt in another API than the written body's, from the body stored for
/// its API: `upstream_model` spliced over the stored body's model prefix (Google bodies have
/// none).
pub fn foreign_body(api: Api, stored: &[u8], upstream_model: &str) -> Option<Vec<u8>> {
    let (prefix_len, body) = crate::protocol::plan::decode_body(stored)?;
    if api == Api::Google {
        return Some(body.to_vec());
    }
    let mut out = model_prefix(upstream_model);
    out.extend_from_slice(body.get(prefix_len..)?);
    Some(out)
}

/// Blanks the top-level members of `body` named in `names`, except the first member: each is
/// replaced, with the comma before it, by spaces, so the body stays valid JSON of the same
/// length (`Kind::blanked_members`). A body that is not a JSON object (or has a duplicate
/// member) is left alone. Linear.
pub fn blank_members(body: &mut [u8], names: &[&str]) {
    if names.is_empty() {
        return;
    }
    let ranges: Vec<(usize, usize)> = {
        let Ok(fields) = TopLevel::parse(body) else { return };
        let base = body.as_ptr() as usize;
        let mut prev_end: Option<usize> = None;
        let mut ranges = Vec::new();
        for (k, v) in &fields.0 {
            // The raw value borrows from `body`: its offset is where it starts there.
            let Some(start) = (v.get().as_ptr() as usize).checked_sub(base) else { return };
            let end = start + v.get().len();
            if let Some(from) = prev_end.filter(|_| names.contains(&k.as_ref())) {
                ranges.push((from, end));
            }
            prev_end = Some(end);
        }
        ranges
    };
    for (from, to) in ranges {
        if let Some(span) = body.get_mut(from..to) {
            span.fill(b' ');
        }
    }
}

/// The body of an attempt to a kind with its own prefix (`Kind::body_prefix`): `body`, whose
/// first `prefix_len` bytes are its model prefix, with `blanked` members blanked (before the
/// prefix is replaced: the kind's prefix may name a member the body has too) and `prefix` in
/// place of the model prefix. Linear.
pub fn kind_body(body: &[u8], prefix_len: usize, prefix: &[u8], blanked: &[&str]) -> Vec<u8> {
    let mut body = body.to_vec();
    blank_members(&mut body, blanked);
    let mut out = Vec::with_capacity(body.len() + prefix.len());
    out.extend_from_slice(prefix);
    out.extend_from_slice(body.get(prefix_len..).unwrap_or_default());
    out
}

/// Anthropic's API version header, which every Messages request must carry.
pub const ANTHROPIC_VERSION: &str = "anthropic-version";
/// The version a translated Anthropic attempt asks for (the caller spoke another API).
pub const ANTHROPIC_VERSION_VALUE: &str = "2023-06-01";

/// The API-specific headers of an attempt in `api` (header changes persist across attempts, so
/// each attempt sets them): an Anthropic attempt carries `anthropic-version` (the caller's own,
/// else 2023-06-01), any other attempt neither it nor `anthropic-beta` (an Anthropic caller's,
/// or an earlier translated attempt's). `has_version`: the request carries `anthropic-version`.
pub fn api_headers(api: Api, has_version: bool) -> Vec<(&'static str, Option<&'static str>)> {
    match api {
        Api::Anthropic if !has_version => vec![(ANTHROPIC_VERSION, Some(ANTHROPIC_VERSION_VALUE))],
        Api::Anthropic => Vec::new(),
        _ if has_version => vec![(ANTHROPIC_VERSION, None), ("anthropic-beta", None)],
        _ => Vec::new(),
    }
}

/// The path of an attempt translated into `api` (the caller's path is another API's):
/// chat completions, messages, or the Google model method (`alt=sse` for a stream).
pub fn translated_path(api: Api, path_prefix: &str, upstream_model: &str, stream: bool) -> String {
    match api {
        Api::OpenAi => upstream_path("/v1/chat/completions", path_prefix),
        Api::Responses => upstream_path(crate::api::RESPONSES_PATH, path_prefix),
        Api::Anthropic => upstream_path(crate::api::MESSAGES_PATH, path_prefix),
        Api::Google if stream => format!("{path_prefix}/v1beta/models/{upstream_model}:streamGenerateContent?alt=sse"),
        Api::Google => format!("{path_prefix}/v1beta/models/{upstream_model}:generateContent"),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum AttemptError {
    /// The planned endpoint's provider is not in this configuration (removed by a reload, so its
    /// key is gone too), or the plan is corrupt.
    StalePlan,
    /// Envoy sent this attempt to a cluster the plan did not choose.
    WrongCluster { expected: String, got: String },
    /// More attempts than planned endpoints.
    PlanExhausted,
}

pub fn model_prefix(upstream_model: &str) -> Vec<u8> {
    let mut p = b"{\"model\":".to_vec();
    p.extend_from_slice(&serde_json::to_vec(upstream_model).unwrap_or_else(|_| b"\"\"".to_vec()));
    p
}

/// The rewrite for attempt `attempt` (1-based) that Envoy sent to `cluster`.
pub fn attempt_rewrite(
    catalog: &Catalog,
    catalog_id: u64,
    plan: &AttemptPlan,
    attempt: usize,
    cluster: &str,
) -> Result<AttemptRewrite, AttemptError> {
    let k = attempt.saturating_sub(1);
    let planned = *plan.endpoints.get(k).ok_or(AttemptError::PlanExhausted)?;
    let same_config = plan.catalog_id == catalog_id;
    // After a reload the plan's endpoints are found by name. An endpoint the new catalog no
    // longer lists is still tried through its provider (the plan approved it before the
    // change); a provider the new catalog removed cannot be: its cluster and key are gone.
    let (idx, provider, upstream_model, model, slug) = if same_config {
        let ep = catalog.endpoint(planned as usize).ok_or(AttemptError::StalePlan)?;
        let provider = catalog.provider_of(ep).ok_or(AttemptError::StalePlan)?;
        let model = catalog.models.get(ep.model).map(|m| m.id.clone()).unwrap_or_default();
        (Some(planned as usize), provider, ep.upstream_model.clone(), model, ep.slug.clone())
    } else {
        let r = plan.refs.get(k).ok_or(AttemptError::StalePlan)?;
        match catalog.find_endpoint(&r.model, &r.slug) {
            Some(i) => {
                let ep = catalog.endpoint(i).ok_or(AttemptError::StalePlan)?;
                let provider = catalog.provider_of(ep).ok_or(AttemptError::StalePlan)?;
                (Some(i), provider, ep.upstream_model.clone(), r.model.clone(), r.slug.clone())
            }
            None => {
                let provider = catalog.provider_for_slug(&r.slug).ok_or(AttemptError::StalePlan)?;
                (None, provider, r.upstream_model.clone(), r.model.clone(), r.slug.clone())
            }
        }
    };
    if provider.cluster != cluster {
        return Err(AttemptError::WrongCluster { expected: provider.cluster.clone(), got: cluster.to_string() });
    }
    // The plan's path is the caller's: it says which API the request speaks. The endpoint
    // serves it in its own API when it has it, else translated (`ApiSet::serving`).
    let caller = Api::of_path(&plan.path);
    let apis = idx.and_then(|i| catalog.endpoint(i)).map_or(provider.apis, |e| e.apis);
    let api = apis.serving(caller);
    if !provider.apis.has(api) {
        return Err(AttemptError::StalePlan);
    }
    let foreign_body = api != plan.body_api.unwrap_or(caller);
    let (content_length, new_prefix) = if foreign_body {
        // Sized by the filter from the stored body.
        (0, None)
    } else if api == Api::Google {
        // Google bodies carry no model: the path names it.
        (plan.body_len as usize, None)
    } else {
        let own = provider.kind.body_prefix(api);
        let prefix = own.map_or_else(|| model_prefix(&upstream_model), <[u8]>::to_vec);
        let content_length = (plan.body_len as usize).saturating_sub(plan.prefix_len as usize) + prefix.len();
        let first =
            plan.endpoints.first().and_then(|&i| catalog.endpoint(i as usize)).map(|e| e.upstream_model.as_str());
        // Under another configuration the body's model may differ from this one's: always splice.
        // A kind's own prefix replaces the model prefix the decision filter wrote: always.
        let keep = same_config && own.is_none() && (attempt <= 1 || first == Some(upstream_model.as_str()));
        (content_length, (!keep).then_some(prefix))
    };
    let bare = plan.path.split('?').next().unwrap_or("");
    let prefix = provider.prefix(api);
    // The path a standard provider of `api` would get before its prefix, for the kind.
    let standard = match api {
        // A Google caller's query says how its stream is framed (`alt=sse`).
        Api::Google if api == caller => plan.path.as_str(),
        _ if api == caller => bare,
        Api::OpenAi => "/v1/chat/completions",
        Api::Anthropic => crate::api::MESSAGES_PATH,
        Api::Google => "",
        Api::Responses => "/v1/responses",
    };
    let path = match provider.kind.attempt_path(api, standard, &upstream_model, plan.stream) {
        Some(path) => path,
        None if api != caller => translated_path(api, prefix, &upstream_model, plan.stream),
        None if api == Api::Google => {
            crate::protocol::rewrite::google_upstream_path(&plan.path, prefix, &upstream_model)
                .ok_or(AttemptError::StalePlan)?
        }
        None => {
            let mut path = crate::protocol::rewrite::upstream_path(bare, prefix);
            if let Some((_, q)) = plan.path.split_once('?') {
                path = format!("{path}?{q}");
            }
            path
        }
    };
    Ok(AttemptRewrite {
        endpoint: idx,
        model,
        slug,
        planned,
        authority: provider.authority.clone(),
        path,
        credential: provider.credential_for(api).map(|(h, v)| (h.to_string(), v.to_string())),
        injected_header: provider.injected_header(api).map(str::to_string),
        token: provider.token_source().cloned(),
        content_length,
        new_prefix,
        api,
        foreign_body,
        upstream_model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_chat_stream_asks_for_its_usage_keeping_the_callers_options() {
        let cases = [
            (r#"{"model":"m","stream":true,"messages":[]}"#, false, serde_json::json!({"include_usage": true})),
            (
                r#"{"model":"m","stream_options":{"include_usage":false,"x":1},"stream":true}"#,
                false,
                serde_json::json!({"include_usage": true, "x": 1}),
            ),
            (
                r#"{"model":"m","stream_options":{"include_usage":true},"stream":true}"#,
                true,
                serde_json::json!({"include_usage": true}),
            ),
            (r#"{"model":"m","stream_options":null,"stream":true}"#, false, serde_json::json!({"include_usage": true})),
        ];
        for (body, asked, options) in cases {
            let t = TopLevel::parse(body.as_bytes()).unwrap();
            assert_eq!(asks_usage(&t), asked, "{body}");
            let out = upstream_body_for(Dialect::OpenAiChat, &t, "up", true);
            let v: Value =
                serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
            assert_eq!(v["stream_options"], options, "{body}");
            assert_eq!((v["model"].as_str(), v["stream"].as_bool()), (Some("up"), Some(true)));
            assert!(out.starts_with(br#"{"model":"up","#));
            // Not asked: the body is the caller's.
            let plain = upstream_body_for(Dialect::OpenAiChat, &t, "up", false);
            assert_eq!(
                serde_json::from_slice::<Value>(&plain).unwrap()["stream_options"],
                serde_json::from_str::<Value>(body).unwrap()["stream_options"]
            );
        }
    }

    #[test]
    fn strips_routing_fields_and_replaces_model() {
        let body = br#"{"model":"a/b:nitro","messages":[{"role":"user","content":"h\u00e9 \"q\""}],"provider":{"sort":"price"},"models":["x"],"plugins":[],"route":"fallback","temperature":0.50,"stream":true}"#;
        let t = TopLevel::parse(body).unwrap();
        let out = upstream_body(&t, "up-id");
        let s = String::from_utf8(out.clone()).unwrap();
        assert!(s.starts_with(r#"{"model":"up-id","#), "{s}");
        // raw values are copied byte-for-byte (escapes and number formatting kept)
        assert!(s.contains(r#""content":"h\u00e9 \"q\"""#), "{s}");
        assert!(s.contains(r#""temperature":0.50"#), "{s}");
        let v: Value = serde_json::from_slice(&out).unwrap();
        let o = v.as_object().unwrap();
        for f in ROUTING_FIELDS.iter().filter(|f| **f != "model") {
            assert!(!o.contains_key(*f), "{f} leaked");
        }
        assert_eq!(o["stream"], true);
        assert_eq!(o.len(), 4);
    }

    /// Every OpenRouter field a caller may send, once, with one plain field around them.
    const OPENROUTER_BODY: &str = r#"{"model":"a/b","temperature":0.50,"provider":{"sort":"price"},"models":["x"],"plugins":[],"route":"fallback","preset":"p","session_id":"s","transforms":["middle-out"],"usage":{"include":true},"debug":{"echo_upstream_body":true},"trace":{"trace_id":"t"},"reasoning":{"effort":"high","max_tokens":2048,"exclude":true},"user":"u-1","prompt_cache_key":"k","cache_control":{"type":"ephemeral"},"image_config":{"aspect_ratio":"16:9"},"stream":false}"#;

    fn body_of(dialect: Dialect, body: &str) -> String {
        let t = TopLevel::parse(body.as_bytes()).unwrap();
        let out = String::from_utf8(upstream_body_for(dialect, &t, "up", false)).unwrap();
        let parsed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert!(parsed.is_object(), "{out}");
        out
    }

    #[test]
    fn openrouter_only_fields_are_removed_or_mapped_per_api() {
        // Kept byte for byte, in order, around the removed and mapped members.
        let cases = [
            (
                Dialect::OpenAiChat,
                r#"{"model":"up","temperature":0.50,"reasoning_effort":"high","user":"u-1","prompt_cache_key":"k","stream":false}"#,
            ),
            (Dialect::OpenAiCompletions, r#"{"model":"up","temperature":0.50,"user":"u-1","stream":false}"#),
            (
                Dialect::OpenAiResponses,
                r#"{"model":"up","temperature":0.50,"reasoning":{"effort":"high"},"user":"u-1","prompt_cache_key":"k","stream":false}"#,
            ),
            (
                Dialect::Anthropic,
                r#"{"model":"up","temperature":0.50,"thinking":{"type":"enabled","budget_tokens":2048},"metadata":{"user_id":"u-1"},"cache_control":{"type":"ephemeral"},"stream":false}"#,
            ),
            (Dialect::Google, r#"{"temperature":0.50,"stream":false}"#),
        ];
        for (dialect, want) in cases {
            assert_eq!(body_of(dialect, OPENROUTER_BODY), want, "{dialect:?}");
        }
    }

    #[test]
    fn codex_client_metadata_never_reaches_a_responses_host() {
        let codex = r#"{"store":false,"client_metadata":{"session_id":"s"},"prompt_cache_key":"k"}"#;
        assert_eq!(body_of(Dialect::OpenAiResponses, codex), r#"{"model":"up","store":false,"prompt_cache_key":"k"}"#);
    }

    #[test]
    fn the_callers_own_field_wins_over_a_mapped_one() {
        let chat = r#"{"reasoning_effort":null,"reasoning":{"effort":"low"}}"#;
        assert_eq!(body_of(Dialect::OpenAiChat, chat), r#"{"model":"up","reasoning_effort":null}"#);
        let anthropic =
            r#"{"metadata":{"user_id":"mine"},"user":"u","thinking":{"type":"disabled"},"reasoning":{"max_tokens":9}}"#;
        assert_eq!(
            body_of(Dialect::Anthropic, anthropic),
            r#"{"model":"up","metadata":{"user_id":"mine"},"thinking":{"type":"disabled"}}"#
        );
        // Nothing to map: a disabled or budget-less reasoning, a user that is not a string.
        for body in [
            r#"{"reasoning":{"enabled":false,"effort":"high","max_tokens":9}}"#,
            r#"{"reasoning":{"effort":"high"},"user":null}"#,
            r#"{"reasoning":"high","user":7}"#,
            r#"{"reasoning":null}"#,
        ] {
            assert_eq!(body_of(Dialect::Anthropic, body), r#"{"model":"up"}"#, "{body}");
        }
        assert_eq!(
            body_of(Dialect::OpenAiChat, r#"{"reasoning":{"enabled":false,"effort":"high"}}"#),
            r#"{"model":"up"}"#
        );
        assert_eq!(body_of(Dialect::OpenAiChat, r#"{"reasoning":{"max_tokens":9}}"#), r#"{"model":"up"}"#);
        // The Responses API's own reasoning passes byte for byte; OpenRouter's members do not.
        let responses = r#"{"reasoning":{"effort": "low","summary":"auto"}}"#;
        assert_eq!(
            body_of(Dialect::OpenAiResponses, responses),
            r#"{"model":"up","reasoning":{"effort": "low","summary":"auto"}}"#
        );
        for body in [r#"{"reasoning":{"max_tokens":9}}"#, r#"{"reasoning":{"enabled":false,"effort":"low"}}"#] {
            assert_eq!(body_of(Dialect::OpenAiResponses, body), r#"{"model":"up"}"#, "{body}");
        }
        // A body of nothing else.
        assert_eq!(body_of(Dialect::Google, r#"{"usage":{"include":true}}"#), "{}");
    }

    #[test]
    fn translators_read_the_fields_they_map_but_never_openrouters_own() {
        let t = TopLevel::parse(OPENROUTER_BODY.as_bytes()).unwrap();
        for api in Api::ALL {
            let src: Value = serde_json::from_slice(&translation_source(api, &t)).unwrap();
            let keys: Vec<&str> = src.as_object().unwrap().keys().map(String::as_str).collect();
            for f in OPENROUTER_ONLY.iter().chain(routing_fields(api).iter().filter(|f| **f != "model")) {
                assert!(!keys.contains(f), "{f} reaches the {api:?} translator");
            }
            for f in ["reasoning", "user", "prompt_cache_key", "cache_control", "temperature"] {
                assert!(keys.contains(&f), "{f} hidden from the {api:?} translator");
            }
        }
    }

    #[test]
    fn anthropic_fallbacks_never_reach_a_provider_but_openai_ones_pass() {
        let body = br#"{"model":"a","max_tokens":5,"messages":[],"fallbacks":[{"model":"c"}]}"#;
        let t = TopLevel::parse(body).unwrap();
        let out = String::from_utf8(upstream_body_for(Dialect::Anthropic, &t, "claude-x", false)).unwrap();
        assert_eq!(out, r#"{"model":"claude-x","max_tokens":5,"messages":[]}"#);
        let out = String::from_utf8(upstream_body_for(Dialect::OpenAiChat, &t, "gpt-x", false)).unwrap();
        assert!(out.contains(r#""fallbacks":[{"model":"c"}]"#), "{out}");
    }

    #[test]
    fn google_bodies_lose_only_routing_fields_and_paths_name_the_upstream_model() {
        let body = br#"{"contents":[{"parts":[{"text":"hi"}]}],"provider":{"sort":"price"},"models":["x"],"generationConfig":{"maxOutputTokens":5}}"#;
        let t = TopLevel::parse(body).unwrap();
        let out = String::from_utf8(upstream_body_for(Dialect::Google, &t, "gemini-x", false)).unwrap();
        assert_eq!(out, r#"{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":5}}"#);
        let only_routing = TopLevel::parse(br#"{"provider":{}}"#).unwrap();
        assert_eq!(upstream_body_for(Dialect::Google, &only_routing, "m", false), b"{}");
        let anthropic = String::from_utf8(upstream_body_for(Dialect::Anthropic, &t, "claude-x", false)).unwrap();
        assert!(anthropic.starts_with(r#"{"model":"claude-x","contents""#), "{anthropic}");
        assert_eq!(
            google_upstream_path("/v1beta/models/google/gemini:streamGenerateContent?alt=sse", "", "gemini-2.5"),
            Some("/v1beta/models/gemini-2.5:streamGenerateContent?alt=sse".to_string())
        );
        assert_eq!(
            google_upstream_path("/v1beta/models/a%2Fb:nitro:generateContent", "/gemini", "g"),
            Some("/gemini/v1beta/models/g:generateContent".to_string())
        );
        // The caller's API version is kept.
        assert_eq!(
            google_upstream_path("/v1/models/google/gemini:generateContent", "", "gemini-2.5"),
            Some("/v1/models/gemini-2.5:generateContent".to_string())
        );
        assert_eq!(google_upstream_path("/v1/chat/completions", "", "g"), None);
        assert_eq!(google_upstream_path("/v1/models/g", "", "g"), None);
    }

    #[test]
    fn path_prefix_rewrite() {
        assert_eq!(upstream_path("/v1/chat/completions", "/v1"), "/v1/chat/completions");
        assert_eq!(upstream_path("/v1/chat/completions", "/openai/v1"), "/openai/v1/chat/completions");
        assert_eq!(upstream_path("/v1/chat/completions", ""), "/chat/completions");
    }
}
