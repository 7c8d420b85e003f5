//! The mock's Google Vertex AI (every mock provider answers its paths), as strict as Vertex where
//! a lenient mock would hide a defect:
//!
//! - Paths: `/v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}:rawPredict`
//!   or `:streamRawPredict` (Claude: Anthropic's Messages API), `.../publishers/google/models/{model}:generateContent`
//!   or `:streamGenerateContent` (Gemini); `/v1beta1/` too (google-genai's default). Any other
//!   method or publisher is Vertex's 404.
//! - The token: only `authorization: Bearer <token>` with a token of the accepted set
//!   (`Behavior::vertex_tokens`, default [`TOKEN`]): anything else (none, an expired token, an
//!   API key) is Vertex's 401 `UNAUTHENTICATED`.
//! - The project (`Behavior::vertex_project`, default [`PROJECT`]): another is Vertex's 403
//!   `PERMISSION_DENIED`. The location must be the host's (`us-east5` on
//!   `us-east5-aiplatform.googleapis.com`, `global` on `aiplatform.googleapis.com`) when the host
//!   is a Vertex host (a test reaching the mock by address may name any).
//! - Claude's body: `anthropic_version: "vertex-2023-10-16"` (or an API version date, which the
//!   Anthropic Vertex SDK sends), no `model`, `stream: true` exactly on
//!   `:streamRawPredict`, then the Messages API's own checks (unknown fields, `max_tokens`);
//!   refused in Anthropic's shape, as Vertex passes on the model's own refusal.
//! - Gemini's body: Vertex's `GenerateContentRequest` fields only (`Unknown name`), every turn
//!   with a `role` (`user` or `model`: Vertex refuses a turn without one, AI Studio does not), then
//!   the Gemini API's own checks.
//! - Failures on request (`x-mock-behavior`): a status is Vertex's Google-shaped error
//!   (`429` `RESOURCE_EXHAUSTED`, `503` `UNAVAILABLE`, ...), except `529` on the Claude paths,
//!   which is the model's Anthropic `overloaded_error`.
//!
//! Answers are the APIs' own ([`super::anthropic`], [`super::google`]): Claude's message or
//! Anthropic SSE, Gemini's `GenerateContentResponse` with `usageMetadata` (events with `alt=sse`).

use serde_json::Value;

use super::Api;

/// The access token the mock accepts by default (`Behavior::vertex_tokens`).
pub const TOKEN: &str = "ya29.mock-vertex-access-token-0001";

/// The project the mock serves by default (`Behavior::vertex_project`).
pub const PROJECT: &str = "switchyard-llm";

/// The `anthropic_version` Claude on Vertex takes in the body.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// Vertex's 401 for a missing, expired or unknown token.
pub const UNAUTHENTICATED: &str =
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login \
                                   cookie or other valid authentication credential. See \
                                   https://developers.google.com/identity/sign-in/web/devconsole-project.";

/// One call on a Vertex path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub project: String,
    pub location: String,
    pub publisher: String,
    /// Percent-decoded.
    pub model: String,
    pub method: String,
}

impl Call {
    /// The API the call speaks (None: a method or publisher the mock does not serve).
    pub fn api(&self) -> Option<Api> {
        match (self.publisher.as_str(), self.method.as_str()) {
            ("anthropic", "rawPredict" | "streamRawPredict") => Some(Api::Anthropic),
            ("google", "generateContent" | "streamGenerateContent") => Some(Api::Google),
            _ => None,
        }
    }

    /// Whether the method streams.
    pub fn streams(&self) -> bool {
        self.method.starts_with("stream")
    }
}

/// Whether `path` is under Vertex's projects (`/v1/projects/...`, `/v1beta1/projects/...`).
pub fn is_vertex_path(path: &str) -> bool {
    path.starts_with("/v1/projects/") || path.starts_with("/v1beta1/projects/")
}

/// The call a Vertex model path names (None: not one).
pub fn call_of(path: &str) -> Option<Call> {
    let rest = path.strip_prefix("/v1/projects/").or_else(|| path.strip_prefix("/v1beta1/projects/"))?;
    let mut parts = rest.splitn(7, '/');
    let project = parts.next()?;
    let (Some("locations"), Some(location), Some("publishers"), Some(publisher), Some("models"), Some(tail)) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let (model, method) = tail.rsplit_once(':')?;
    if project.is_empty() || location.is_empty() || model.is_empty() || model.contains('/') {
        return None;
    }
    Some(Call {
        project: project.to_string(),
        location: location.to_string(),
        publisher: publisher.to_string(),
        model: percent_decode(model),
        method: method.to_string(),
    })
}

/// `%XX` decoded (the Anthropic Vertex SDK sends `@` as `%40`).
fn percent_decode(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex: Vec<u8> = bytes.clone().take(2).collect();
            if let Some(v) = std::str::from_utf8(&hex).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                bytes.nth(1);
                continue;
            }
        }
        out.push(b);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Vertex's host for `location`.
pub fn host_of(location: &str) -> String {
    match location {
        "global" => "aiplatform.googleapis.com".to_string(),
        _ => format!("{location}-aiplatform.googleapis.com"),
    }
}

/// Vertex's own (Google-shaped) error.
pub fn error(status: u16, message: &str) -> Value {
    super::google::error_json(status, message, None)
}

/// What Vertex answers a failure `status` with on `api`'s paths: Google's shape, except the
/// model's own overload on Claude's (Anthropic's `overloaded_error`).
pub fn failure(api: Api, status: u16, model: &str) -> Value {
    if api == Api::Anthropic && status == 529 {
        return super::anthropic::error_json(529, "Overloaded");
    }
    let message = match status {
        429 => format!(
            "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: \
             {model}. Please submit a quota increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai."
        ),
        503 => "The service is currently unavailable.".to_string(),
        500 => "Internal error encountered.".to_string(),
        404 => format!("Publisher Model `{model}` was not found or your project does not have access to it."),
        403 => "Permission 'aiplatform.endpoints.predict' denied on resource (or it may not exist).".to_string(),
        401 => UNAUTHENTICATED.to_string(),
        _ => "Request contains an invalid argument.".to_string(),
    };
    error(status, &message)
}

/// Vertex's `GenerateContentRequest` fields, in both spellings (no `model`: the path names it).
const GEMINI_FIELDS: &[&str] = &[
    "contents",
    "systemInstruction",
    "system_instruction",
    "cachedContent",
    "cached_content",
    "tools",
    "toolConfig",
    "tool_config",
    "labels",
    "safetySettings",
    "safety_settings",
    "generationConfig",
    "generation_config",
];

/// What the mock's Vertex serves: the tokens it accepts and its project.
pub struct Served<'a> {
    pub tokens: &'a [String],
    pub project: &'a str,
}

/// Vertex's refusal of `call` (None: it is answered): the token, the project and location, then
/// the body as the API behind it judges it. `header`: the request's headers (`host` or
/// `:authority` for the location's host).
pub fn refusal(
    call: &Call,
    served: &Served<'_>,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Option<(u16, Value)> {
    let bearer = header("authorization");
    let token = bearer.as_deref().and_then(|a| a.strip_prefix("Bearer "));
    if !token.is_some_and(|t| served.tokens.iter().any(|k| k == t)) {
        return Some((401, error(401, UNAUTHENTICATED)));
    }
    let Some(api) = call.api() else {
        return Some((404, error(404, &format!("Method {}:{} not found.", call.publisher, call.method))));
    };
    if call.project != served.project {
        let resource = format!(
            "//aiplatform.googleapis.com/projects/{}/locations/{}/publishers/{}/models/{}",
            call.project, call.location, call.publisher, call.model
        );
        let message =
            format!("Permission 'aiplatform.endpoints.predict' denied on resource '{resource}' (or it may not exist).");
        return Some((403, error(403, &message)));
    }
    let host = header(":authority").or_else(|| header("host")).unwrap_or_default();
    let host = host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h).to_string();
    if host.ends_with("aiplatform.googleapis.com") && host != host_of(&call.location) {
        let message = format!("Location {} is not served at {host}.", call.location);
        return Some((400, error(400, &message)));
    }
    let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(body) else {
        return Some((400, error(400, "Invalid JSON payload received.")));
    };
    match api {
        Api::Anthropic => {
            let refuse = |m: String| Some((400, super::anthropic::error_json(400, &m)));
            if o.contains_key("model") {
                return refuse("model: Extra inputs are not permitted".into());
            }
            // Vertex's own version, or an API version date (`anthropic`'s AnthropicVertex 2.10
            // sends its API version, 2026-10-21); never another cloud's (`bedrock-2023-05-31`).
            let dated = |v: &str| {
                v.len() == 10
                    && v.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() })
            };
            match o.remove("anthropic_version") {
                Some(Value::String(v)) if v == ANTHROPIC_VERSION || dated(&v) => {}
                _ => return refuse(format!("anthropic_version: Input should be '{ANTHROPIC_VERSION}'")),
            }
            let stream = o.get("stream").and_then(Value::as_bool).unwrap_or(false);
            if stream != call.streams() {
                let message = format!("stream: {stream} does not match the method {}", call.method);
                return Some((400, error(400, &message)));
            }
            let rest = serde_json::to_vec(&o).unwrap_or_default();
            super::anthropic::invalid_body(&rest)
                .or_else(|| super::strict::check(Api::Anthropic, "/v1/messages", &rest))
                .and_then(refuse)
        }
        Api::Google => {
            if let Some(k) = o.keys().find(|k| !GEMINI_FIELDS.contains(&k.as_str())) {
                let message = format!("Invalid JSON payload received. Unknown name \"{k}\": Cannot find field.");
                return Some((400, error(400, &message)));
            }
            let contents = o.get("contents").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            if contents.is_empty() {
                return Some((400, error(400, "Unable to submit request because it has an empty contents field.")));
            }
            if contents.iter().any(|c| !matches!(c.get("role").and_then(Value::as_str), Some("user" | "model"))) {
                return Some((400, error(400, "Please use a valid role: user, model.")));
            }
            super::strict::check(Api::Google, "", body).map(|m| (400, error(400, &m)))
        }
        Api::OpenAi => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CLAUDE: &str =
        "/v1/projects/switchyard-llm/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929";

    fn headers(auth: Option<&str>, host: &str) -> impl Fn(&str) -> Option<String> {
        let auth = auth.map(str::to_string);
        let host = host.to_string();
        move |h: &str| match h {
            "authorization" => auth.clone(),
            "host" => Some(host.clone()),
            _ => None,
        }
    }

    fn status(path: &str, auth: Option<&str>, host: &str, body: Value) -> Option<u16> {
        let tokens = [TOKEN.to_string()];
        let served = Served { tokens: &tokens, project: PROJECT };
        let call = call_of(path).expect("a Vertex path");
        refusal(&call, &served, &headers(auth, host), body.to_string().as_bytes()).map(|(s, _)| s)
    }

    #[test]
    fn paths_tokens_projects_locations_and_bodies_are_checked_as_vertex_does() {
        let bearer = format!("Bearer {TOKEN}");
        let ok = Some(bearer.as_str());
        let host = "us-east5-aiplatform.googleapis.com";
        let claude = json!({"anthropic_version": ANTHROPIC_VERSION, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(status(&format!("{CLAUDE}:rawPredict"), ok, host, claude.clone()), None);
        let mut streamed = claude.clone();
        streamed["stream"] = json!(true);
        assert_eq!(status(&format!("{CLAUDE}:streamRawPredict"), ok, host, streamed.clone()), None);
        assert_eq!(status(&format!("{CLAUDE}:rawPredict"), ok, host, streamed), Some(400), "stream on rawPredict");
        assert_eq!(status(&format!("{CLAUDE}:streamRawPredict"), ok, host, claude.clone()), Some(400));
        // The token: none, another, an API key.
        assert_eq!(status(&format!("{CLAUDE}:rawPredict"), None, host, claude.clone()), Some(401));
        assert_eq!(
            status(&format!("{CLAUDE}:rawPredict"), Some("Bearer ya29.expired"), host, claude.clone()),
            Some(401)
        );
        assert_eq!(status(&format!("{CLAUDE}:rawPredict"), Some(TOKEN), host, claude.clone()), Some(401));
        // Another project, another location's host, an unknown method.
        let other = CLAUDE.replace("switchyard-llm", "someone-else");
        assert_eq!(status(&format!("{other}:rawPredict"), ok, host, claude.clone()), Some(403));
        assert_eq!(status(&format!("{CLAUDE}:rawPredict"), ok, "aiplatform.googleapis.com", claude.clone()), Some(400));
        assert_eq!(status(&format!("{CLAUDE}:rawPredict"), ok, "127.0.0.1:8080", claude.clone()), None);
        assert_eq!(status(&format!("{CLAUDE}:predict"), ok, host, claude.clone()), Some(404));
        // Claude's body: Vertex's version, no model, the Messages API's fields.
        let mut with_model = claude.clone();
        with_model["model"] = json!("claude-sonnet-4-5");
        assert_eq!(status(&format!("{CLAUDE}:rawPredict"), ok, host, with_model), Some(400));
        let mut bedrock = claude.clone();
        bedrock["anthropic_version"] = json!("bedrock-2023-05-31");
        assert_eq!(status(&format!("{CLAUDE}:rawPredict"), ok, host, bedrock), Some(400));
        let mut leak = claude.clone();
        leak["provider"] = json!({"sort": "price"});
        assert_eq!(status(&format!("{CLAUDE}:rawPredict"), ok, host, leak), Some(400));
        // Gemini: roles required, Vertex's fields only.
        let gemini = CLAUDE.replace("anthropic/models/claude-sonnet-4-5@20250929", "google/models/gemini-2.5-pro");
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "labels": {"team": "a"}});
        assert_eq!(status(&format!("{gemini}:generateContent"), ok, host, body), None);
        let no_role = json!({"contents": [{"parts": [{"text": "hi"}]}]});
        assert_eq!(status(&format!("{gemini}:generateContent"), ok, host, no_role), Some(400));
        let unknown = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "model": "x"});
        assert_eq!(status(&format!("{gemini}:streamGenerateContent"), ok, host, unknown), Some(400));
        let v1beta1 = gemini.replacen("/v1/", "/v1beta1/", 1);
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        assert_eq!(status(&format!("{v1beta1}:generateContent"), ok, host, body), None);
    }

    #[test]
    fn calls_are_read_from_the_path() {
        let c =
            call_of("/v1/projects/p/locations/global/publishers/anthropic/models/claude-x%4020250929:streamRawPredict")
                .unwrap();
        assert_eq!((c.model.as_str(), c.api(), c.streams()), ("claude-x@20250929", Some(Api::Anthropic), true));
        assert_eq!(call_of("/v1/projects/p/locations/global/publishers/anthropic/models/a/b:rawPredict"), None);
        assert_eq!(call_of("/v1/models/gemini:generateContent"), None);
        assert!(is_vertex_path("/v1/projects/p/whatever"));
        assert_eq!(failure(Api::Anthropic, 529, "m")["error"]["type"], "overloaded_error");
        assert_eq!(failure(Api::Anthropic, 429, "m")["error"]["status"], "RESOURCE_EXHAUSTED");
        assert_eq!(failure(Api::Google, 429, "m")["error"]["code"], 429);
    }
}
