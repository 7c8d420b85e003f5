//! Cross-API translation between OpenAI chat completions, Anthropic Messages and Google
//! generateContent: requests, answers, errors and streams; and from OpenAI's Responses API (a
//! caller's API only: its requests in, answers, errors and streams out). Pure functions over bytes and
//! `serde_json::Value`, no host calls; every direction goes through one pivot (`chat::Chat` for
//! requests, `Answer` for answers, `stream::Ev` for stream events), so each API has one reader
//! and one writer per kind. `docs/translation.md` has the field tables.
//!
//! A field with no counterpart in the target API is either dropped (its caller-side name goes to
//! [`Translated::dropped`], which the filter reports in `x-switchyard-warning`) or refused with a
//! [`Refused`] (a 400 naming it): dropped when the answer stays what the caller asked for
//! (sampling knobs, metadata, cache hints), refused when the model would not see what the caller
//! sent or the answer could not have the asked shape (audio, files, several choices, a tool the
//! target cannot call).

#[macro_use]
pub mod jsonm;
pub mod anthropic;
pub mod chat;
pub mod converse;
pub mod google;
pub mod openai;
pub mod reasoning;
#[cfg(test)]
mod reasoning_tests;
pub mod responses;
pub mod responses_stream;
#[cfg(test)]
mod responses_tests;
pub mod stream;
#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

use jsonm::G;

use crate::api::Api;

/// A translated request body and the caller-side names of the fields it had to drop.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    pub body: Vec<u8>,
    pub dropped: Vec<String>,
}

impl Translated {
    /// The `x-switchyard-warning` value for the dropped fields (None when nothing was dropped).
    /// The names are the caller's (an unknown field's too): header-safe, at most 8 named.
    pub fn warning(&self, to: Api) -> Option<String> {
        self.warning_for(to.name())
    }

    /// As [`Translated::warning`], for the API named `to` (an upstream-only one: [`CONVERSE`]).
    pub fn warning_for(&self, to: &str) -> Option<String> {
        if self.dropped.is_empty() {
            return None;
        }
        let mut names: Vec<String> = self.dropped.iter().take(8).map(|n| header_text(n)).collect();
        if self.dropped.len() > 8 {
            names.push(format!("{} more", self.dropped.len() - 8));
        }
        Some(format!("dropped {} (no counterpart in the {to} API)", names.join(", ")))
    }
}

/// A request the target API cannot take as asked: a 400 naming the caller's field.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub param: String,
    pub message: String,
}

impl Refused {
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> Refused {
        Refused { param: param.into(), message: message.into() }
    }

    /// The 400 the caller gets, in its API's shape.
    pub fn error(&self, caller: Api) -> crate::answer::errors::ApiError {
        crate::answer::errors::ApiError::invalid(&self.param, self.message.clone()).for_api(caller)
    }
}

/// Why an answer ended, in OpenAI's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Finish {
    #[default]
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
}

impl Finish {
    pub fn openai(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::ToolCalls => "tool_calls",
            Finish::ContentFilter => "content_filter",
        }
    }
}

/// An answer's token counts. `prompt` includes the cached and cache-written tokens,
/// `completion` the reasoning tokens (OpenAI's convention).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub prompt: u64,
    pub completion: u64,
    pub cached: u64,
    pub cache_write: u64,
    pub reasoning: u64,
}

/// A tool call of an answer or of the history: `args` is its arguments as JSON text.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub args: String,
}

/// A whole (non-streamed) answer, whichever API it came from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answer {
    pub id: String,
    pub model: String,
    pub text: String,
    /// The model's reasoning text, where its API returns it (Anthropic `thinking` blocks,
    /// Google `thought` parts, chat completions' `reasoning` / `reasoning_content`).
    pub reasoning: String,
    pub calls: Vec<Call>,
    pub finish: Finish,
    pub usage: Usage,
}

/// The provider's request body for `to` from the caller's body in `from` (routing fields
/// already removed). `model` is the endpoint's upstream id (Google's goes in the path);
/// `stream` the caller's choice (Google's is its method). An OpenAI stream asks for its usage.
pub fn request(from: Api, to: Api, body: &[u8], model: &str, stream: bool) -> Result<Translated, Refused> {
    let mut chat = parse(from, body)?;
    chat.stream = stream;
    let out = match to {
        Api::OpenAi => openai::write_request(&mut chat, model),
        Api::Anthropic => anthropic::write_request(&mut chat, model)?,
        Api::Google => google::write_request(&mut chat)?,
        // Never asked: an endpoint serving Responses serves chat completions too.
        Api::Responses => return Err(Refused::new("input", "no endpoint is sent a translated Responses body")),
    };
    Ok(Translated { body: model_first(out), dropped: chat.dropped })
}

/// The caller's body in `from` (routing fields already removed) in the pivot.
fn parse(from: Api, body: &[u8]) -> Result<chat::Chat, Refused> {
    let Ok(Value::Object(o)) = crate::json::from_slice::<Value>(body) else {
        return Err(Refused::new("body", "the request body is not a JSON object"));
    };
    match from {
        Api::OpenAi => openai::parse_request(&o),
        Api::Anthropic => anthropic::parse_request(&o),
        Api::Google => google::parse_request(&o),
        Api::Responses => responses::parse_request(&o),
    }
}

/// The body of a Bedrock Converse / ConverseStream request from the caller's body in `from`:
/// no model (the path names it) and no stream flag (the path says it). Converse is an
/// upstream-only API: what the writer drops is reported as for any translation
/// ([`Translated::warning`] with [`CONVERSE`]).
pub fn converse_request(from: Api, body: &[u8]) -> Result<Translated, Refused> {
    let mut chat = parse(from, body)?;
    let out = converse::write_request(&mut chat)?;
    Ok(Translated { body: serde_json::to_vec(&Value::Object(out)).unwrap_or_default(), dropped: chat.dropped })
}

/// The Converse API's name in warnings.
pub const CONVERSE: &str = "bedrock_converse";

/// A provider's whole answer in `from`'s shape, rewritten in the caller's `to` shape. None when
/// it is not an answer of `from` (the caller then gets it wrapped as a provider error).
/// `created` (Unix seconds) is OpenAI's `created`.
pub fn answer(from: Api, to: Api, body: &[u8], created: u64) -> Option<Vec<u8>> {
    let Ok(Value::Object(o)) = crate::json::from_slice::<Value>(body) else {
        return None;
    };
    let a = match from {
        Api::OpenAi => openai::parse_answer(&o)?,
        Api::Anthropic => anthropic::parse_answer(&o)?,
        Api::Google => google::parse_answer(&o)?,
        // Never asked (see `request`).
        Api::Responses => return None,
    };
    let v = match to {
        Api::OpenAi => openai::write_answer(&a, created),
        Api::Anthropic => anthropic::write_answer(&a),
        Api::Google => google::write_answer(&a),
        Api::Responses => responses::write_answer(&a, created),
    };
    serde_json::to_vec(&v).ok()
}

/// A provider's error (`status`, body in `from`'s shape) in the caller's `to` shape, with the
/// status the caller's API would use (Anthropic's 529 `overloaded_error` is a 503 elsewhere).
/// A body that is not a JSON error keeps its text as the message. (Every API's error carries
/// `error.message`; `_from` is the provider's API, for symmetry with the other entry points.)
pub fn error(_from: Api, to: Api, status: u16, body: &[u8]) -> (u16, Vec<u8>) {
    let v: Value = crate::json::from_slice(body).unwrap_or(Value::Null);
    let inner = v.g("error");
    let message = inner
        .and_then(|e| e.g("message"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| crate::answer::errors::echo(&String::from_utf8_lossy(body)));
    let status = match (to, status) {
        (Api::Anthropic, s) => s,
        (_, 529) => 503,
        (_, s) => s,
    };
    let s32 = u32::from(status);
    let out = match to {
        Api::OpenAi | Api::Responses => {
            let kind = match status {
                401 => "authentication_error",
                403 => "permission_error",
                404 => "not_found_error",
                429 => "rate_limit_error",
                s if s >= 500 => "server_error",
                _ => "invalid_request_error",
            };
            let code = v.pointer("/error/code").filter(|c| c.is_string()).cloned().unwrap_or(Value::Null);
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
        Api::Anthropic => json!({"type": "error", "error": {
            "type": crate::answer::errors::anthropic_type(s32), "message": message}}),
        Api::Google => json!({"error": {
            "code": status, "message": message, "status": crate::answer::errors::google_status(s32)}}),
    };
    (status, serde_json::to_vec(&out).unwrap_or_default())
}

/// The body with `model` first (`{"model":"<id>"`, the prefix each attempt splices its own
/// upstream id over), then the other members.
fn model_first(mut o: Map<String, Value>) -> Vec<u8> {
    let Some(model) = o.remove("model") else {
        return serde_json::to_vec(&Value::Object(o)).unwrap_or_default();
    };
    let mut out = crate::protocol::rewrite::model_prefix(model.as_str().unwrap_or(""));
    let rest = serde_json::to_vec(&Value::Object(o)).unwrap_or_default();
    match rest.get(1..) {
        Some(tail) if tail != b"}" => {
            out.push(b',');
            out.extend_from_slice(tail);
        }
        _ => out.push(b'}'),
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Small JSON helpers shared by the readers and writers
// ---------------------------------------------------------------------------------------------

/// Caller text fit for a response header: printable ASCII only (others as `?`), at most 64
/// characters.
pub fn header_text(s: &str) -> String {
    let mut out: String = s.chars().take(64).map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    if s.chars().nth(64).is_some() {
        out.push_str("...");
    }
    out
}

/// `o[a]`, else `o[b]` (Google's JSON accepts camelCase and snake_case).
pub(crate) fn get2<'a>(o: &'a Map<String, Value>, a: &str, b: &str) -> Option<&'a Value> {
    o.get(a).or_else(|| o.get(b)).filter(|v| !v.is_null())
}

pub(crate) fn u64_at(v: &Value, path: &str) -> u64 {
    v.pointer(path).and_then(Value::as_u64).unwrap_or(0)
}

pub(crate) fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    v.pointer(path).and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn obj(pairs: Vec<(&str, Value)>) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// JSON text parsed as an object (tool-call arguments); None when it is not one.
pub(crate) fn parse_object(text: &str) -> Option<Value> {
    let text = if text.trim().is_empty() { "{}" } else { text };
    serde_json::from_str::<Value>(text).ok().filter(Value::is_object)
}

/// A `data:` URL's media type and base64 payload.
pub(crate) fn data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media = meta.strip_suffix(";base64")?;
    Some((media, data))
}
