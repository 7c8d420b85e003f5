//! The pivot every request goes through: a chat request in neutral terms. Each API's reader
//! (`parse_request`) fills it from the caller's body, each API's writer (`write_request`) builds
//! the provider's body from it. Knobs remember the caller's name for them, so a writer that has
//! no counterpart drops them under the name the caller used.

use super::jsonm::G;
use serde_json::Value;

use super::{Call, Refused};

/// A content part of a user message (or of a tool result).
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    /// Base64 data with its media type.
    Inline {
        media: String,
        data: String,
    },
    /// An image by URL (`http(s)`).
    Url(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    User(Vec<Part>),
    /// A system instruction at its place in the conversation (Anthropic's mid-conversation
    /// `role: system` message); the leading ones are [`Chat::system`].
    System(String),
    Assistant {
        text: String,
        calls: Vec<Call>,
    },
    /// A tool's result: the call's id and (Google needs it) name, and its content.
    Tool {
        id: String,
        name: String,
        content: Vec<Part>,
        error: bool,
    },
}

/// How a tool may be chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    Auto,
    None,
    Required,
    Named(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<Value>,
    /// JSON Schema of the arguments.
    pub parameters: Option<Value>,
}

/// The structured output asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Format {
    JsonObject,
    JsonSchema { name: String, schema: Value },
}

/// A value with the caller's name for it (for the warning when a writer drops it).
#[derive(Debug, Clone, PartialEq)]
pub struct Knob {
    pub value: Value,
    pub name: &'static str,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chat {
    pub system: Vec<String>,
    pub messages: Vec<Msg>,
    pub max_tokens: Option<Value>,
    pub temperature: Option<Value>,
    pub top_p: Option<Value>,
    pub top_k: Option<Knob>,
    pub stop: Vec<Value>,
    pub stream: bool,
    pub tools: Vec<Tool>,
    pub choice: Option<Choice>,
    /// `Some(false)`: one tool call at most.
    pub parallel: Option<bool>,
    pub format: Option<Format>,
    pub seed: Option<Knob>,
    pub presence_penalty: Option<Knob>,
    pub frequency_penalty: Option<Knob>,
    pub user: Option<Knob>,
    /// Reasoning by token budget (Anthropic `thinking.budget_tokens`, Google `thinkingBudget`).
    pub reasoning_budget: Option<Knob>,
    /// Reasoning by effort (`low` / `medium` / `high`).
    pub reasoning_effort: Option<Knob>,
    /// The model picks its own budget (Anthropic `thinking.type: adaptive`, Google
    /// `thinkingBudget: -1`); a budget or an effort, when given too, wins.
    pub reasoning_adaptive: Option<Knob>,
    /// Caller-side names of the fields dropped so far (`seen`: the same, for a lookup in
    /// logarithmic time: a body may name thousands of unknown fields).
    pub dropped: Vec<String>,
    seen: std::collections::BTreeSet<String>,
    /// Tool call id -> name, of the history's calls (a tool result names its call by id; Google
    /// needs the name): one lookup per result, never a scan of the history.
    names: std::collections::HashMap<String, String>,
}

impl Chat {
    pub fn drop_field(&mut self, name: impl Into<String>) {
        let name = name.into();
        if self.seen.insert(name.clone()) {
            self.dropped.push(name);
        }
    }

    /// Appends an assistant turn, remembering its calls' names by id.
    pub fn push_assistant(&mut self, text: String, calls: Vec<Call>) {
        for k in &calls {
            self.names.insert(k.id.clone(), k.name.clone());
        }
        self.messages.push(Msg::Assistant { text, calls });
    }

    /// Drops a knob the target has no counterpart for.
    pub fn drop_knob(&mut self, knob: Option<Knob>) {
        if let Some(k) = knob {
            self.drop_field(k.name);
        }
    }

    /// The name of the tool call `id` of an earlier assistant message.
    pub fn call_name(&self, id: &str) -> Option<&str> {
        self.names.get(id).map(String::as_str)
    }
}

/// The text of a content value: a string, or the `text` of its text parts (others skipped).
pub fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                if let Some(t) = p.g("text").and_then(Value::as_str) {
                    out.push_str(t);
                }
            }
            out
        }
        _ => String::new(),
    }
}

/// A knob from a field of the caller's body.
pub fn knob(v: Option<&Value>, name: &'static str) -> Option<Knob> {
    v.filter(|v| !v.is_null()).map(|v| Knob { value: v.clone(), name })
}

/// `n` / `candidateCount` above 1: several answers, which no translated answer carries.
pub fn one_choice(v: Option<&Value>, param: &str) -> Result<(), Refused> {
    match v.and_then(Value::as_u64) {
        Some(n) if n > 1 => Err(Refused::new(param, format!("{param} > 1 is not translated across APIs"))),
        _ => Ok(()),
    }
}

/// The stop sequences of a string-or-array value.
pub fn stops(v: Option<&Value>) -> Vec<Value> {
    match v {
        Some(Value::String(s)) => vec![Value::String(s.clone())],
        Some(Value::Array(a)) => a.iter().filter(|s| s.is_string()).cloned().collect(),
        _ => Vec::new(),
    }
}

/// Merges `parts` into the last entry when it has the same role, else pushes a new one
/// (Anthropic and Google want the tool results of one turn in one message).
pub fn push_merged(out: &mut Vec<(&'static str, Vec<Value>)>, role: &'static str, parts: Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    match out.last_mut() {
        Some((r, p)) if *r == role => p.extend(parts),
        _ => out.push((role, parts)),
    }
}
