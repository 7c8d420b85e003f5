//! The APIs Switchyard speaks (OpenAI chat completions, Anthropic Messages, Google
//! generateContent, OpenAI Responses): their paths, which API a path is, and what a provider or
//! endpoint speaks. The bottom layer: every
//! other module may import it, it imports nothing of the crate.

/// OpenAI paths whose POST bodies are routed.
pub const ROUTED_PATHS: [&str; 3] = ["/v1/chat/completions", "/v1/completions", RESPONSES_PATH];
/// OpenAI's Responses API.
pub const RESPONSES_PATH: &str = "/v1/responses";
/// The Anthropic Messages path.
pub const MESSAGES_PATH: &str = "/v1/messages";
/// Anthropic's token counting: answered with the filter's own estimate (`count_tokens`).
pub const COUNT_TOKENS_PATH: &str = "/v1/messages/count_tokens";
/// Prefixes of Google's model methods (`/{version}/models/{model}:{method}`): the version the
/// caller chose is kept (google-genai calls `v1beta` or `v1`). Every `/v1beta` path is Google's;
/// under `/v1/models/` only the generateContent methods are (GETs there are OpenAI listings).
pub const GOOGLE_MODELS_PREFIX: &str = "/v1beta/models/";
pub const GOOGLE_V1_MODELS_PREFIX: &str = "/v1/models/";

/// The API a request speaks (and an endpoint must speak to serve it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI chat completions (and the legacy completions).
    OpenAi,
    Anthropic,
    Google,
    /// OpenAI's Responses API (`/v1/responses`). A catalog lists it as `openai_responses`, only
    /// beside `openai` (every host serving it serves chat completions too): so an endpoint never
    /// serves another API's caller in it, and a Responses caller elsewhere is served translated.
    Responses,
}

impl Api {
    pub const ALL: [Api; 4] = [Api::OpenAi, Api::Anthropic, Api::Google, Api::Responses];

    pub fn name(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
            Api::Google => "google",
            Api::Responses => "openai_responses",
        }
    }

    pub fn parse(s: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.name() == s)
    }

    pub fn index(self) -> usize {
        match self {
            Api::OpenAi => 0,
            Api::Anthropic => 1,
            Api::Google => 2,
            Api::Responses => 3,
        }
    }

    fn bit(self) -> u8 {
        1 << self.index()
    }

    /// The API of a routed request path (query ignored); OpenAI for anything else.
    pub fn of_path(path: &str) -> Api {
        let bare = path.split('?').next().unwrap_or("");
        if bare == MESSAGES_PATH || bare == COUNT_TOKENS_PATH {
            Api::Anthropic
        } else if bare == RESPONSES_PATH {
            Api::Responses
        } else if bare.starts_with("/v1beta/")
            || (bare.starts_with(GOOGLE_V1_MODELS_PREFIX)
                && (bare.ends_with(":generateContent") || bare.ends_with(":streamGenerateContent")))
        {
            Api::Google
        } else {
            Api::OpenAi
        }
    }
}

/// A set of APIs (what a provider or endpoint speaks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApiSet(u8);

impl ApiSet {
    pub const OPENAI: ApiSet = ApiSet(1);

    pub fn with(self, api: Api) -> ApiSet {
        ApiSet(self.0 | api.bit())
    }

    pub fn has(self, api: Api) -> bool {
        self.0 & api.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The API an endpoint speaking this set serves a `caller` in: the caller's own when it has
    /// it, else (the request translated) OpenAI's, then Anthropic's, then Google's (never
    /// Responses: a set with it has OpenAI's too). Decided the
    /// same way by the planner, every attempt and the answer's translation back.
    pub fn serving(self, caller: Api) -> Api {
        if self.has(caller) {
            return caller;
        }
        self.iter().next().unwrap_or(caller)
    }

    /// The APIs of the set that carry their own key header: all but the Responses API, which
    /// shares OpenAI's host, header and key (a set with it has OpenAI's too).
    pub fn keyed(self) -> impl Iterator<Item = Api> {
        self.iter().filter(|a| *a != Api::Responses)
    }

    /// The APIs in the set, in `Api::ALL` order.
    pub fn iter(self) -> impl Iterator<Item = Api> {
        Api::ALL.into_iter().filter(move |a| self.has(*a))
    }
}

/// Google's generateContent methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoogleMethod {
    Generate,
    StreamGenerate,
}

impl GoogleMethod {
    pub fn name(self) -> &'static str {
        match self {
            GoogleMethod::Generate => "generateContent",
            GoogleMethod::StreamGenerate => "streamGenerateContent",
        }
    }
}

/// A routed request's surface: its API and, for Google, the model and method from the path.
#[derive(Debug, Clone, PartialEq)]
pub struct Surface {
    pub api: Api,
    /// Google: the model named in the path (percent-decoded).
    pub path_model: Option<String>,
    /// Google: which method the path calls (streaming is the method, not a body field).
    pub method: Option<GoogleMethod>,
    /// OpenAI's chat completions and completions: a stream reports its usage only when the
    /// body asks (`stream_options.include_usage`), so Switchyard asks on the caller's behalf.
    pub usage_on_request: bool,
    /// Anthropic's `/v1/messages/count_tokens`: the body is a Messages request to count, not to
    /// run.
    pub count_tokens: bool,
}

impl Surface {
    /// OpenAI's `/v1/chat/completions` and `/v1/completions`.
    pub const OPENAI: Surface =
        Surface { api: Api::OpenAi, path_model: None, method: None, usage_on_request: true, count_tokens: false };
    /// OpenAI's `/v1/responses` (its streams always end with their usage).
    pub const OPENAI_RESPONSES: Surface =
        Surface { api: Api::Responses, path_model: None, method: None, usage_on_request: false, count_tokens: false };
    /// Anthropic's `/v1/messages/count_tokens`.
    pub const COUNT_TOKENS: Surface =
        Surface { api: Api::Anthropic, path_model: None, method: None, usage_on_request: false, count_tokens: true };

    pub fn of(api: Api) -> Surface {
        Surface { api, path_model: None, method: None, usage_on_request: api == Api::OpenAi, count_tokens: false }
    }
}

/// Splits `/{v1beta|v1}/models/{model}:{method}` (query ignored) into the percent-decoded model
/// and the method. None for anything else (other methods, `tunedModels`, an empty model).
pub fn google_path(path: &str) -> Option<(String, GoogleMethod)> {
    let bare = path.split('?').next().unwrap_or("");
    let rest = bare.strip_prefix(GOOGLE_MODELS_PREFIX).or_else(|| bare.strip_prefix(GOOGLE_V1_MODELS_PREFIX))?;
    let (model, method) = rest.rsplit_once(':')?;
    let method = match method {
        "generateContent" => GoogleMethod::Generate,
        "streamGenerateContent" => GoogleMethod::StreamGenerate,
        _ => return None,
    };
    let model = percent_decode(model)?;
    if model.is_empty() {
        return None;
    }
    Some((model, method))
}

/// `%XX` decoding of a path segment (Google model paths, `/v1/models/{id}` listings); None for a
/// bad escape or non-UTF-8 result.
pub fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
