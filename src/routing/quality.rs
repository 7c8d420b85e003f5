//! Response quality, measured from real answers: a response is bad when a tool call is malformed
//! (its `arguments` are not valid JSON, or it names a tool the request did not offer) or when
//! the answer is empty (no content and no tool call). Streams are judged from their deltas,
//! tool-call arguments accumulated per call. Feeds the routing_cost success probability,
//! `:exacto` and the tool-quality tiers. Each surface's answers are read in its own shape:
//! OpenAI `choices[0]`, Anthropic `content[]` blocks (`tool_use`), Google
//! `candidates[0].content.parts[]` (`functionCall`).

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api::Api;

/// Bytes of one tool call's arguments (or one pending SSE line) kept for judging; beyond this
/// the answer is not judged (memory stays bounded).
const MAX_ACCUMULATED: usize = 256 * 1024;
const MAX_TOOL_CALLS: usize = 64;

/// One judged answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub bad: bool,
    /// The answer carried tool calls.
    pub tool: bool,
}

/// Names of the function tools a request offers: OpenAI `tools[].function.name`, Anthropic
/// `tools[].name`, Google `tools[].functionDeclarations[].name`.
pub fn offered_tools(api: Api, tools: Option<&RawValue>) -> Vec<String> {
    #[derive(Deserialize)]
    struct Tool {
        #[serde(default)]
        function: Option<Func>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default, rename = "functionDeclarations", alias = "function_declarations")]
        declarations: Option<Vec<Func>>,
    }
    #[derive(Deserialize)]
    struct Func {
        #[serde(default)]
        name: Option<String>,
    }
    let Some(tools) = tools.and_then(|t| serde_json::from_str::<Vec<Tool>>(t.get()).ok()) else {
        return Vec::new();
    };
    match api {
        Api::OpenAi => tools.into_iter().filter_map(|t| t.function?.name).collect(),
        // Anthropic's and the Responses API's tools are flat (`{"name", ...}`).
        Api::Anthropic | Api::Responses => tools.into_iter().filter_map(|t| t.name).collect(),
        Api::Google => {
            tools.into_iter().flat_map(|t| t.declarations.unwrap_or_default()).filter_map(|f| f.name).collect()
        }
    }
}

/// An answer's text (a JSON string), judged without being copied: an answer can be megabytes
/// of text, and a copy would raise the VM's peak memory for good. Accepts exactly what a
/// `String` field would (anything else fails the parse the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Text {
    empty: bool,
    /// Only whitespace (as `str::trim` sees it).
    blank: bool,
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&'de RawValue>::deserialize(d)?;
        text_of(raw.get()).ok_or_else(|| serde::de::Error::custom("expected a string"))
    }
}

/// Emptiness and blankness of the JSON string literal `raw` (escapes decoded as needed); None
/// when it is not a string a `String` field would accept (a lone surrogate escape).
fn text_of(raw: &str) -> Option<Text> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    let mut blank = true;
    let mut chars = inner.chars();
    let hex4 = |chars: &mut std::str::Chars| -> Option<u32> {
        (0..4).try_fold(0u32, |n, _| Some(n * 16 + chars.next()?.to_digit(16)?))
    };
    while let Some(c) = chars.next() {
        let decoded = if c == '\\' {
            match chars.next()? {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                'f' => '\u{c}',
                'u' => {
                    let unit = hex4(&mut chars)?;
                    match unit {
                        0xD800..=0xDBFF => {
                            // A high surrogate must be followed by an escaped low one.
                            if chars.next()? != '\\' || chars.next()? != 'u' {
                                return None;
                            }
                            let low = hex4(&mut chars)?;
                            if !(0xDC00..=0xDFFF).contains(&low) {
                                return None;
                            }
                            // Outside the BMP: no whitespace there.
                            'x'
                        }
                        0xDC00..=0xDFFF => return None,
                        _ => char::from_u32(unit)?,
                    }
                }
                // `\"`, `\\`, `\/`, `\b`: not whitespace.
                _ => 'x',
            }
        } else {
            c
        };
        if blank && !decoded.is_whitespace() {
            blank = false;
            // The rest only needs reading on if it holds `\u` escapes to validate.
            if !chars.as_str().contains("\\u") {
                break;
            }
        }
    }
    Some(Text { empty: inner.is_empty(), blank })
}

/// One Anthropic content block (whole answers and `content_block_start`) or delta.
#[derive(Deserialize, Default)]
struct Block {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<Text>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Box<RawValue>>,
    #[serde(default)]
    partial_json: Option<String>,
}

#[derive(Deserialize)]
struct AnthropicMessage {
    content: Vec<Block>,
}

#[derive(Deserialize)]
struct AnthropicEvent {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    index: usize,
    #[serde(default)]
    content_block: Option<Block>,
    #[serde(default)]
    delta: Option<Block>,
}

#[derive(Deserialize)]
struct GooglePart {
    #[serde(default)]
    text: Option<Text>,
    #[serde(default, rename = "functionCall", alias = "function_call")]
    call: Option<GoogleCall>,
}

#[derive(Deserialize)]
struct GoogleCall {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    args: Option<Box<RawValue>>,
}

#[derive(Deserialize, Default)]
struct GoogleContent {
    #[serde(default)]
    parts: Vec<GooglePart>,
}

#[derive(Deserialize)]
struct GoogleCandidate {
    #[serde(default)]
    content: Option<GoogleContent>,
}

#[derive(Deserialize)]
struct GoogleResponse {
    candidates: Vec<GoogleCandidate>,
}

/// Anthropic `input` / Google `args` must be a JSON object (absent counts as `{}`).
fn object_is_bad(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| !r.get().trim_start().starts_with('{'))
}

fn has_text(text: Option<Text>) -> bool {
    text.is_some_and(|t| !t.blank)
}

#[derive(Deserialize, Default)]
struct Call {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    function: Option<CallFunc>,
}

#[derive(Deserialize, Default)]
struct CallFunc {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize, Default)]
struct Message {
    #[serde(default)]
    content: Option<Text>,
    #[serde(default)]
    tool_calls: Option<Vec<Call>>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<Message>,
    #[serde(default)]
    delta: Option<Message>,
}

#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    choices: Vec<Choice>,
}

/// A Responses API answer's output item (a `message` with `output_text` parts, a
/// `function_call`).
#[derive(Deserialize, Default)]
struct ResponsesItem {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    content: Vec<Block>,
}

#[derive(Deserialize)]
struct ResponsesAnswer {
    output: Vec<ResponsesItem>,
}

#[derive(Deserialize)]
struct ResponsesEvent {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    delta: Option<Text>,
    #[serde(default)]
    item: Option<ResponsesItem>,
}

fn call_is_bad(name: &str, arguments: &str, offered: &[String]) -> bool {
    let unknown = !offered.iter().any(|t| t == name);
    let args_bad =
        serde_json::from_str::<serde::de::IgnoredAny>(if arguments.trim().is_empty() { "{}" } else { arguments })
            .is_err();
    unknown || args_bad
}

/// Judges a whole (non-streamed) answer in `api`'s shape; None when it is not one.
pub fn judge_body(api: Api, body: &[u8], offered: &[String]) -> Option<Verdict> {
    let unknown = |name: Option<&str>| !offered.iter().any(|t| Some(t.as_str()) == name);
    let (tool, malformed, text) = match api {
        Api::OpenAi => return judge_openai(body, offered),
        Api::Responses => {
            let r: ResponsesAnswer = crate::json::from_slice(body).ok()?;
            let calls = || r.output.iter().filter(|i| i.kind == "function_call");
            let malformed = calls()
                .any(|i| call_is_bad(i.name.as_deref().unwrap_or(""), i.arguments.as_deref().unwrap_or(""), offered));
            let text = r.output.iter().flat_map(|i| i.content.iter()).any(|b| has_text(b.text));
            (calls().next().is_some(), malformed, text)
        }
        Api::Anthropic => {
            let m: AnthropicMessage = crate::json::from_slice(body).ok()?;
            let calls = || m.content.iter().filter(|b| b.kind == "tool_use");
            let malformed = calls().any(|b| unknown(b.name.as_deref()) || object_is_bad(b.input.as_deref()));
            (calls().next().is_some(), malformed, m.content.iter().any(|b| has_text(b.text)))
        }
        Api::Google => {
            let r: GoogleResponse = crate::json::from_slice(body).ok()?;
            let parts = r.candidates.into_iter().next()?.content.unwrap_or_default().parts;
            let calls = || parts.iter().filter_map(|p| p.call.as_ref());
            let malformed = calls().any(|c| unknown(c.name.as_deref()) || object_is_bad(c.args.as_deref()));
            (calls().next().is_some(), malformed, parts.iter().any(|p| has_text(p.text)))
        }
    };
    Some(Verdict { bad: malformed || (!tool && !text), tool })
}

fn judge_openai(body: &[u8], offered: &[String]) -> Option<Verdict> {
    let c: Completion = crate::json::from_slice(body).ok()?;
    let m = c.choices.into_iter().next()?.message?;
    let calls = m.tool_calls.unwrap_or_default();
    let tool = !calls.is_empty();
    let malformed = calls.iter().any(|call| {
        let f = call.function.as_ref();
        call_is_bad(
            f.and_then(|f| f.name.as_deref()).unwrap_or(""),
            f.and_then(|f| f.arguments.as_deref()).unwrap_or(""),
            offered,
        )
    });
    let empty = !tool && m.content.is_none_or(|c| c.blank);
    Some(Verdict { bad: malformed || empty, tool })
}

/// Judges a streamed answer from its SSE bytes (in `api`'s shape), fed chunk by chunk.
#[derive(Debug)]
pub struct StreamJudge {
    api: Api,
    pending: Vec<u8>,
    content: bool,
    /// (name, arguments) per tool-call index (OpenAI), per `tool_use` block (Anthropic, the
    /// block's index kept in `blocks`), per `functionCall` part (Google).
    calls: Vec<(String, String)>,
    /// Anthropic: content-block index of each entry of `calls`.
    blocks: Vec<usize>,
    events: usize,
    overflow: bool,
}

/// Stands for a Google call's `args` that are not a JSON object (never parses as JSON).
const NOT_AN_OBJECT: &str = "!";

impl StreamJudge {
    pub fn new(api: Api) -> Self {
        StreamJudge {
            api,
            pending: Vec::new(),
            content: false,
            calls: Vec::new(),
            blocks: Vec::new(),
            events: 0,
            overflow: false,
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        if self.overflow {
            return;
        }
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.line(&line);
        }
        if self.pending.len() > MAX_ACCUMULATED {
            self.overflow = true;
            self.pending.clear();
        }
    }

    fn line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else { return };
        match self.api {
            Api::OpenAi => self.openai(data),
            Api::Responses => self.responses(data),
            Api::Anthropic => self.anthropic(data),
            Api::Google => self.google(data),
        }
    }

    /// Appends to a call's arguments within the bound.
    fn push_call(&mut self, name: &str, args: &str) -> Option<usize> {
        if self.calls.len() >= MAX_TOOL_CALLS {
            self.overflow = true;
            return None;
        }
        self.calls.push((name.to_string(), args.to_string()));
        Some(self.calls.len() - 1)
    }

    fn anthropic(&mut self, data: &[u8]) {
        let Ok(ev) = crate::json::from_slice::<AnthropicEvent>(data) else { return };
        self.events += 1;
        match ev.kind.as_str() {
            "content_block_start" => {
                let Some(b) = ev.content_block else { return };
                if b.kind == "tool_use" {
                    // The start's `input` is `{}`; the arguments follow as input_json_delta.
                    if self.push_call(b.name.as_deref().unwrap_or(""), "").is_some() {
                        self.blocks.push(ev.index);
                    }
                } else if has_text(b.text) {
                    self.content = true;
                }
            }
            "content_block_delta" => {
                let Some(d) = ev.delta else { return };
                if let Some(piece) = d.partial_json {
                    // At most MAX_TOOL_CALLS blocks: the lookup is bounded.
                    let slot = self.blocks.iter().rposition(|&i| i == ev.index);
                    if let Some(call) = slot.and_then(|k| self.calls.get_mut(k)) {
                        call.1.push_str(&piece);
                        if call.1.len() > MAX_ACCUMULATED {
                            self.overflow = true;
                        }
                    }
                } else if d.text.is_some_and(|t| !t.empty) {
                    self.content = true;
                }
            }
            _ => {}
        }
    }

    fn google(&mut self, data: &[u8]) {
        let Ok(r) = crate::json::from_slice::<GoogleResponse>(data) else { return };
        self.events += 1;
        let Some(parts) = r.candidates.into_iter().next().and_then(|c| c.content).map(|c| c.parts) else { return };
        for p in parts {
            if p.text.is_some_and(|t| !t.empty) {
                self.content = true;
            }
            if let Some(c) = p.call {
                let args = if object_is_bad(c.args.as_deref()) { NOT_AN_OBJECT } else { "" };
                if self.push_call(c.name.as_deref().unwrap_or(""), args).is_none() {
                    return;
                }
            }
        }
    }

    fn openai(&mut self, data: &[u8]) {
        let Ok(chunk) = crate::json::from_slice::<Completion>(data) else { return };
        self.events += 1;
        let Some(delta) = chunk.choices.into_iter().next().and_then(|c| c.delta) else { return };
        if delta.content.is_some_and(|c| !c.empty) {
            self.content = true;
        }
        for (k, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let i = call.index.unwrap_or(k);
            if i >= MAX_TOOL_CALLS {
                self.overflow = true;
                return;
            }
            if self.calls.len() <= i {
                self.calls.resize(i + 1, (String::new(), String::new()));
            }
            if let (Some(slot), Some(f)) = (self.calls.get_mut(i), call.function) {
                slot.0.push_str(f.name.as_deref().unwrap_or(""));
                slot.1.push_str(f.arguments.as_deref().unwrap_or(""));
                if slot.1.len() > MAX_ACCUMULATED {
                    self.overflow = true;
                }
            }
        }
    }

    /// The Responses API's events: text deltas, and each function call once whole
    /// (`response.output_item.done`).
    fn responses(&mut self, data: &[u8]) {
        let Ok(ev) = crate::json::from_slice::<ResponsesEvent>(data) else { return };
        self.events += 1;
        match ev.kind.as_str() {
            "response.output_text.delta" if ev.delta.is_some_and(|t| !t.empty) => self.content = true,
            "response.output_item.done" => {
                if let Some(i) = ev.item.filter(|i| i.kind == "function_call") {
                    self.push_call(i.name.as_deref().unwrap_or(""), i.arguments.as_deref().unwrap_or(""));
                }
            }
            _ => {}
        }
    }

    /// The verdict once the stream ended; None when nothing could be judged.
    pub fn verdict(&self, offered: &[String]) -> Option<Verdict> {
        if self.overflow || self.events == 0 {
            return None;
        }
        let tool = !self.calls.is_empty();
        let malformed = self.calls.iter().any(|(name, args)| call_is_bad(name, args, offered));
        Some(Verdict { bad: malformed || (!tool && !self.content), tool })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<String> {
        let raw: Box<RawValue> = serde_json::from_str(
            r#"[{"type":"function","function":{"name":"get_weather","parameters":{}}},{"type":"function","function":{"name":"search"}}]"#,
        )
        .unwrap();
        offered_tools(Api::OpenAi, Some(&raw))
    }

    #[test]
    fn text_is_judged_as_a_string_field_would_see_it() {
        for raw in [
            r#""""#,
            r#"" ""#,
            r#""\n\t \r\f""#,
            r#""\u0020\u00a0\u3000""#,
            r#"" \u2028x""#,
            r#""\b""#,
            r#""\"""#,
            r#"" \ud83d\ude00 ""#,
            r#""hi \n""#,
            r#""\u0041""#,
            r#""x \ud800""#,
            r#""\udc00""#,
            r#""\ud800\u0041""#,
            r#""é""#,
            "\"\u{a0}\"",
            "1",
            "null",
            "[]",
        ] {
            let as_string = serde_json::from_str::<String>(raw).ok();
            let text = serde_json::from_str::<Text>(raw).ok();
            let expected = as_string.map(|s| Text { empty: s.is_empty(), blank: s.trim().is_empty() });
            assert_eq!(text, expected, "{raw}");
        }
    }

    #[test]
    fn offered_tool_names_are_read() {
        assert_eq!(tools(), vec!["get_weather", "search"]);
        assert!(offered_tools(Api::OpenAi, None).is_empty());
    }

    #[test]
    fn non_streamed_tool_calls_are_judged() {
        let good = br#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}}]}"#;
        assert_eq!(judge_body(Api::OpenAi, good, &tools()), Some(Verdict { bad: false, tool: true }));
        let bad_args = br#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"get_weather","arguments":"{\"city\": Paris"}}]}}]}"#;
        assert_eq!(judge_body(Api::OpenAi, bad_args, &tools()), Some(Verdict { bad: true, tool: true }));
        let unknown = br#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"rm_rf","arguments":"{}"}}]}}]}"#;
        assert_eq!(judge_body(Api::OpenAi, unknown, &tools()), Some(Verdict { bad: true, tool: true }));
        let text = br#"{"choices":[{"message":{"content":"It is sunny."}}]}"#;
        assert_eq!(judge_body(Api::OpenAi, text, &tools()), Some(Verdict { bad: false, tool: false }));
        let empty = br#"{"choices":[{"message":{"content":"  "}}]}"#;
        assert_eq!(judge_body(Api::OpenAi, empty, &[]), Some(Verdict { bad: true, tool: false }));
        assert_eq!(judge_body(Api::OpenAi, b"not json", &[]), None);
    }

    #[test]
    fn streamed_tool_calls_are_accumulated_per_call_and_judged() {
        let mut j = StreamJudge::new(Api::OpenAi);
        // Arguments arrive in pieces, split across chunks mid-line.
        j.feed(b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"ci\"}}]}}]}\n\nda");
        j.feed(b"ta: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ty\\\":\\\"Paris\\\"}\"}}]}}]}\n\n");
        j.feed(b"data: [DONE]\n\n");
        assert_eq!(j.verdict(&tools()), Some(Verdict { bad: false, tool: true }));
        let mut bad = StreamJudge::new(Api::OpenAi);
        bad.feed(b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"search\",\"arguments\":\"{\\\"q\\\":\"}}]}}]}\n\n");
        bad.feed(b"data: [DONE]\n\n");
        assert_eq!(bad.verdict(&tools()), Some(Verdict { bad: true, tool: true }));
        let mut text = StreamJudge::new(Api::OpenAi);
        text.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n");
        assert_eq!(text.verdict(&[]), Some(Verdict { bad: false, tool: false }));
        let mut empty = StreamJudge::new(Api::OpenAi);
        empty.feed(b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: [DONE]\n\n");
        assert_eq!(empty.verdict(&[]), Some(Verdict { bad: true, tool: false }));
        assert_eq!(StreamJudge::new(Api::OpenAi).verdict(&[]), None);
    }

    fn raw(s: &str) -> Box<RawValue> {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn anthropic_answers_are_judged() {
        let offered = offered_tools(
            Api::Anthropic,
            Some(&raw(r#"[{"name":"get_weather","input_schema":{}},{"name":"search"}]"#)),
        );
        assert_eq!(offered, vec!["get_weather", "search"]);
        let j = |b: &[u8]| judge_body(Api::Anthropic, b, &offered);
        let good = br#"{"type":"message","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"t","name":"get_weather","input":{"city":"Paris"}}]}"#;
        assert_eq!(j(good), Some(Verdict { bad: false, tool: true }));
        let unknown = br#"{"content":[{"type":"tool_use","name":"rm_rf","input":{}}]}"#;
        assert_eq!(j(unknown), Some(Verdict { bad: true, tool: true }));
        let not_object = br#"{"content":[{"type":"tool_use","name":"search","input":"{\"q\": x"}]}"#;
        assert_eq!(j(not_object), Some(Verdict { bad: true, tool: true }));
        assert_eq!(j(br#"{"content":[{"type":"text","text":"Sunny."}]}"#), Some(Verdict { bad: false, tool: false }));
        assert_eq!(j(br#"{"content":[{"type":"text","text":" "}]}"#), Some(Verdict { bad: true, tool: false }));
        assert_eq!(j(br#"{"content":[]}"#), Some(Verdict { bad: true, tool: false }));
        assert_eq!(j(br#"{"type":"error","error":{"type":"overloaded_error"}}"#), None);

        // Streamed: the tool name from content_block_start, the input from input_json_delta pieces
        // (split across chunks mid-line), judged once the stream ended.
        let start = |i: usize, block: &str| {
            format!("event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":{i},\"content_block\":{block}}}\n\n")
        };
        let piece = |i: usize, p: &str| {
            format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{i},\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":{}}}}}\n\n", serde_json::to_string(p).unwrap())
        };
        let stream = |name: &str, pieces: [&str; 2]| {
            let mut s = String::from(
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[]}}\n\n",
            );
            s += &start(0, r#"{"type":"text","text":""}"#);
            s += "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\"}}\n\n";
            s += &start(1, &format!(r#"{{"type":"tool_use","id":"t","name":"{name}","input":{{}}}}"#));
            s += &piece(1, pieces[0]);
            s += &piece(1, pieces[1]);
            s += "data: {\"type\":\"content_block_stop\",\"index\":1}\n\ndata: {\"type\":\"message_stop\"}\n\n";
            s
        };
        let judge = |s: String| {
            let mut j = StreamJudge::new(Api::Anthropic);
            let (a, b) = s.as_bytes().split_at(s.find("partial_json").unwrap() + 5);
            j.feed(a);
            j.feed(b);
            j.verdict(&offered)
        };
        assert_eq!(
            judge(stream("get_weather", ["{\"ci", "ty\":\"Paris\"}"])),
            Some(Verdict { bad: false, tool: true })
        );
        assert_eq!(judge(stream("get_weather", ["{\"city\": ", "Paris"])), Some(Verdict { bad: true, tool: true }));
        assert_eq!(judge(stream("rm_rf", ["{", "}"])), Some(Verdict { bad: true, tool: true }));
        let text = "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n";
        let mut t = StreamJudge::new(Api::Anthropic);
        t.feed(text.as_bytes());
        assert_eq!(t.verdict(&[]), Some(Verdict { bad: false, tool: false }));
        let mut empty = StreamJudge::new(Api::Anthropic);
        empty.feed(text.replace("hi", "").as_bytes());
        assert_eq!(empty.verdict(&[]), Some(Verdict { bad: true, tool: false }));
    }

    #[test]
    fn google_answers_are_judged() {
        let offered = offered_tools(
            Api::Google,
            Some(&raw(r#"[{"functionDeclarations":[{"name":"get_weather"},{"name":"search"}]},{"googleSearch":{}}]"#)),
        );
        assert_eq!(offered, vec!["get_weather", "search"]);
        let j = |b: &[u8]| judge_body(Api::Google, b, &offered);
        let good = br#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}]}}]}"#;
        assert_eq!(j(good), Some(Verdict { bad: false, tool: true }));
        let unknown = br#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"rm_rf","args":{}}}]}}]}"#;
        assert_eq!(j(unknown), Some(Verdict { bad: true, tool: true }));
        let not_object =
            br#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"search","args":"{\"q\": x"}}]}}]}"#;
        assert_eq!(j(not_object), Some(Verdict { bad: true, tool: true }));
        let text = br#"{"candidates":[{"content":{"parts":[{"text":"Sunny."}]}}]}"#;
        assert_eq!(j(text), Some(Verdict { bad: false, tool: false }));
        assert_eq!(j(br#"{"candidates":[{"finishReason":"SAFETY"}]}"#), Some(Verdict { bad: true, tool: false }));
        assert_eq!(j(br#"{"error":{"code":429}}"#), None);

        // Streamed (`alt=sse`, CRLF-separated), an event split across chunks.
        let ev = |part: &str| format!("data: {{\"candidates\":[{{\"content\":{{\"parts\":[{part}]}}}}]}}\r\n\r\n");
        let judge = |s: String| {
            let mut j = StreamJudge::new(Api::Google);
            let (a, b) = s.as_bytes().split_at(s.len() / 2);
            j.feed(a);
            j.feed(b);
            j.verdict(&offered)
        };
        let call = |name: &str, args: &str| ev(&format!(r#"{{"functionCall":{{"name":"{name}","args":{args}}}}}"#));
        let text = ev(r#"{"text":"hi"}"#);
        assert_eq!(judge(text.clone() + &call("search", r#"{"q":"x"}"#)), Some(Verdict { bad: false, tool: true }));
        assert_eq!(judge(call("rm_rf", "{}")), Some(Verdict { bad: true, tool: true }));
        assert_eq!(judge(text.clone() + &call("search", r#""{\"q\": x""#)), Some(Verdict { bad: true, tool: true }));
        assert_eq!(judge(text), Some(Verdict { bad: false, tool: false }));
        assert_eq!(judge(ev(r#"{"text":""}"#)), Some(Verdict { bad: true, tool: false }));
    }

    #[test]
    fn judging_memory_is_bounded() {
        let mut j = StreamJudge::new(Api::OpenAi);
        let line = vec![b'x'; 300 * 1024];
        j.feed(&line);
        assert_eq!(j.verdict(&[]), None);
        assert!(j.pending.is_empty());
    }
}
