//! Response quality, measured from real answers: a response is bad when a tool call is malformed
//! (its `arguments` are not valid JSON, or it names a tool the request did not offer) or when
//! the answer is empty (no content and no tool call). Streams are judged from their deltas,
//! tool-call arguments accumulated per call. Feeds the routing_cost success probability,
//! `:exacto` and the tool-quality tiers.

use serde::Deserialize;
use serde_json::value::RawValue;

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

/// Names of the function tools a request offers (`tools[].function.name`).
pub fn offered_tools(tools: Option<&RawValue>) -> Vec<String> {
    #[derive(Deserialize)]
    struct Tool {
        #[serde(default)]
        function: Option<Func>,
    }
    #[derive(Deserialize)]
    struct Func {
        #[serde(default)]
        name: Option<String>,
    }
    tools
        .and_then(|t| serde_json::from_str::<Vec<Tool>>(t.get()).ok())
        .map(|v| v.into_iter().filter_map(|t| t.function?.name).collect())
        .unwrap_or_default()
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
    content: Option<String>,
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

fn call_is_bad(name: &str, arguments: &str, offered: &[String]) -> bool {
    let unknown = !offered.iter().any(|t| t == name);
    let args_bad =
        serde_json::from_str::<serde::de::IgnoredAny>(if arguments.trim().is_empty() { "{}" } else { arguments })
            .is_err();
    unknown || args_bad
}

/// Judges a whole (non-streamed) chat completion; None when it is not one.
pub fn judge_body(body: &[u8], offered: &[String]) -> Option<Verdict> {
    let c: Completion = serde_json::from_slice(body).ok()?;
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
    let empty = !tool && m.content.as_deref().is_none_or(|c| c.trim().is_empty());
    Some(Verdict { bad: malformed || empty, tool })
}

/// Judges a streamed chat completion from its SSE bytes, fed chunk by chunk.
#[derive(Debug, Default)]
pub struct StreamJudge {
    pending: Vec<u8>,
    content: bool,
    /// (name, arguments) per tool-call index.
    calls: Vec<(String, String)>,
    events: usize,
    overflow: bool,
}

impl StreamJudge {
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
        let Ok(chunk) = serde_json::from_slice::<Completion>(data) else { return };
        self.events += 1;
        let Some(delta) = chunk.choices.into_iter().next().and_then(|c| c.delta) else { return };
        if delta.content.as_deref().is_some_and(|c| !c.is_empty()) {
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
        offered_tools(Some(&raw))
    }

    #[test]
    fn offered_tool_names_are_read() {
        assert_eq!(tools(), vec!["get_weather", "search"]);
        assert!(offered_tools(None).is_empty());
    }

    #[test]
    fn non_streamed_tool_calls_are_judged() {
        let good = br#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}}]}"#;
        assert_eq!(judge_body(good, &tools()), Some(Verdict { bad: false, tool: true }));
        let bad_args = br#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"get_weather","arguments":"{\"city\": Paris"}}]}}]}"#;
        assert_eq!(judge_body(bad_args, &tools()), Some(Verdict { bad: true, tool: true }));
        let unknown = br#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"rm_rf","arguments":"{}"}}]}}]}"#;
        assert_eq!(judge_body(unknown, &tools()), Some(Verdict { bad: true, tool: true }));
        let text = br#"{"choices":[{"message":{"content":"It is sunny."}}]}"#;
        assert_eq!(judge_body(text, &tools()), Some(Verdict { bad: false, tool: false }));
        let empty = br#"{"choices":[{"message":{"content":"  "}}]}"#;
        assert_eq!(judge_body(empty, &[]), Some(Verdict { bad: true, tool: false }));
        assert_eq!(judge_body(b"not json", &[]), None);
    }

    #[test]
    fn streamed_tool_calls_are_accumulated_per_call_and_judged() {
        let mut j = StreamJudge::default();
        // Arguments arrive in pieces, split across chunks mid-line.
        j.feed(b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"ci\"}}]}}]}\n\nda");
        j.feed(b"ta: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ty\\\":\\\"Paris\\\"}\"}}]}}]}\n\n");
        j.feed(b"data: [DONE]\n\n");
        assert_eq!(j.verdict(&tools()), Some(Verdict { bad: false, tool: true }));
        let mut bad = StreamJudge::default();
        bad.feed(b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"search\",\"arguments\":\"{\\\"q\\\":\"}}]}}]}\n\n");
        bad.feed(b"data: [DONE]\n\n");
        assert_eq!(bad.verdict(&tools()), Some(Verdict { bad: true, tool: true }));
        let mut text = StreamJudge::default();
        text.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n");
        assert_eq!(text.verdict(&[]), Some(Verdict { bad: false, tool: false }));
        let mut empty = StreamJudge::default();
        empty.feed(b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: [DONE]\n\n");
        assert_eq!(empty.verdict(&[]), Some(Verdict { bad: true, tool: false }));
        assert_eq!(StreamJudge::default().verdict(&[]), None);
    }

    #[test]
    fn judging_memory_is_bounded() {
        let mut j = StreamJudge::default();
        let line = vec![b'x'; 300 * 1024];
        j.feed(&line);
        assert_eq!(j.verdict(&[]), None);
        assert!(j.pending.is_empty());
    }
}
