//! Streams translated event by event as they arrive: a provider's SSE bytes in one API's shape
//! become the caller's API's SSE bytes, chunk by chunk, never buffering the answer (only a
//! partial line across reads, and a Google tool call until it is whole: Google sends a call's
//! arguments in one piece). A decoder turns the provider's events into [`Ev`]s, an encoder
//! writes them in the caller's shape. The translated stream is what a provider of the caller's
//! API would have sent (OpenAI: with its usage chunk), so the filter's usual stream rewriting
//! (model, provider, cost, the hidden usage chunk) applies after it unchanged.

use super::jsonm::G;
use serde_json::Value;

use super::{anthropic, google, openai, Finish, Usage};
use crate::api::Api;

/// One stream event in neutral terms.
#[derive(Debug, Clone, PartialEq)]
pub enum Ev {
    Start {
        id: String,
        model: String,
        usage: Usage,
    },
    Text(String),
    /// A piece of the model's reasoning text.
    Reasoning(String),
    /// A tool call begins (`index`: 0-based among the answer's calls).
    ToolStart {
        index: usize,
        id: String,
        name: String,
    },
    /// A piece of a call's arguments (JSON text).
    ToolArgs {
        index: usize,
        args: String,
    },
    Finish(Finish),
    Usage(Usage),
    Error {
        status: u16,
        message: String,
    },
    End,
}

/// SSE framing: complete lines only; an event ends at an empty line (`\n\n` or `\r\n\r\n`).
#[derive(Debug, Default)]
struct Lines {
    buf: Vec<u8>,
    /// How far `buf` has been searched for a newline (a long line over many reads is searched once).
    scanned: usize,
    event: String,
    data: Vec<u8>,
}

impl Lines {
    /// Appends `chunk`; returns the events it completed, `(event name, data)`.
    fn feed(&mut self, chunk: &[u8]) -> Vec<(String, Vec<u8>)> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(nl) = self.buf.get(self.scanned..).and_then(|rest| rest.iter().position(|&b| b == b'\n')) {
            let end = self.scanned + nl;
            let line = self.buf.get(start..end).unwrap_or(&[]);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                if !self.data.is_empty() || !self.event.is_empty() {
                    out.push((std::mem::take(&mut self.event), std::mem::take(&mut self.data)));
                }
            } else if let Some(d) = line.strip_prefix(b"data:") {
                if !self.data.is_empty() {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(d.strip_prefix(b" ").unwrap_or(d));
            } else if let Some(e) = line.strip_prefix(b"event:") {
                self.event = String::from_utf8_lossy(e).trim().to_string();
            }
            start = end + 1;
            self.scanned = start;
        }
        self.buf.drain(..start.min(self.buf.len()));
        self.scanned = self.buf.len();
        out
    }
}

/// What a decoder remembers between events.
#[derive(Debug, Default)]
struct Decoder {
    started: bool,
    /// Anthropic: the prompt side from `message_start`; block index -> tool index.
    usage: Usage,
    blocks: std::collections::HashMap<u64, usize>,
    tools: usize,
}

impl Decoder {
    fn decode(&mut self, api: Api, event: &str, data: &[u8], out: &mut Vec<Ev>) {
        if data == b"[DONE]" {
            out.push(Ev::End);
            return;
        }
        let Ok(v) = crate::json::from_slice::<Value>(data) else { return };
        if let Some(e) = v.g("error").filter(|_| event == "error" || v.g("type").is_none() || api != Api::Anthropic) {
            let status = e.g("code").and_then(Value::as_u64).unwrap_or(500) as u16;
            let status = if (400..600).contains(&status) { status } else { 500 };
            out.push(Ev::Error { status, message: super::str_at(e, "/message").to_string() });
            return;
        }
        match api {
            Api::OpenAi => self.openai(&v, out),
            Api::Anthropic => self.anthropic(&v, out),
            Api::Google => self.google(&v, out),
            // Never asked: a Responses endpoint only serves Responses callers.
            Api::Responses => {}
        }
    }

    fn start(&mut self, v: &Value, id: &str, model: &str, usage: Usage, out: &mut Vec<Ev>) {
        if !self.started {
            self.started = true;
            let id = v.pointer(id).and_then(Value::as_str).unwrap_or("").to_string();
            let model = v.pointer(model).and_then(Value::as_str).unwrap_or("").to_string();
            out.push(Ev::Start { id, model, usage });
        }
    }

    fn openai(&mut self, v: &Value, out: &mut Vec<Ev>) {
        self.start(v, "/id", "/model", Usage::default(), out);
        if let Some(choice) = v.pointer("/choices/0") {
            let delta = choice.g("delta");
            if let Some(r) = delta.map(openai::reasoning_of).filter(|r| !r.is_empty()) {
                out.push(Ev::Reasoning(r.to_string()));
            }
            if let Some(t) = delta.and_then(|d| d.g("content")).and_then(Value::as_str).filter(|t| !t.is_empty()) {
                out.push(Ev::Text(t.to_string()));
            }
            for tc in delta.and_then(|d| d.g("tool_calls")).and_then(Value::as_array).into_iter().flatten() {
                let index = tc.g("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if let Some(name) = tc.pointer("/function/name").and_then(Value::as_str) {
                    let id = super::str_at(tc, "/id").to_string();
                    out.push(Ev::ToolStart { index, id, name: name.to_string() });
                }
                if let Some(a) = tc.pointer("/function/arguments").and_then(Value::as_str).filter(|a| !a.is_empty()) {
                    out.push(Ev::ToolArgs { index, args: a.to_string() });
                }
            }
            if let Some(r) = choice.g("finish_reason").and_then(Value::as_str) {
                out.push(Ev::Finish(openai::finish_of(r)));
            }
        }
        if let Some(u) = v.g("usage").filter(|u| u.is_object()) {
            out.push(Ev::Usage(openai::usage_of(u)));
        }
    }

    fn anthropic(&mut self, v: &Value, out: &mut Vec<Ev>) {
        match v.g("type").and_then(Value::as_str) {
            Some("message_start") => {
                self.usage = v.pointer("/message/usage").map(anthropic::usage_of).unwrap_or_default();
                self.start(v, "/message/id", "/message/model", self.usage, out);
            }
            Some("content_block_start") => {
                let block = v.g("index").and_then(Value::as_u64).unwrap_or(0);
                let b = v.g("content_block");
                match b.and_then(|b| b.g("type")).and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = b.and_then(|b| b.g("text")).and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            out.push(Ev::Text(t.to_string()));
                        }
                    }
                    Some("thinking") => {
                        let t = super::str_at(v, "/content_block/thinking");
                        if !t.is_empty() {
                            out.push(Ev::Reasoning(t.to_string()));
                        }
                    }
                    Some("tool_use") => {
                        let index = self.tools;
                        self.tools += 1;
                        self.blocks.insert(block, index);
                        let (id, name) =
                            (super::str_at(v, "/content_block/id"), super::str_at(v, "/content_block/name"));
                        out.push(Ev::ToolStart { index, id: id.to_string(), name: name.to_string() });
                    }
                    _ => {}
                }
            }
            Some("content_block_delta") => {
                let block = v.g("index").and_then(Value::as_u64).unwrap_or(0);
                match v.pointer("/delta/type").and_then(Value::as_str) {
                    Some("text_delta") => out.push(Ev::Text(super::str_at(v, "/delta/text").to_string())),
                    Some("thinking_delta") => {
                        let t = super::str_at(v, "/delta/thinking");
                        if !t.is_empty() {
                            out.push(Ev::Reasoning(t.to_string()));
                        }
                    }
                    Some("input_json_delta") => {
                        let args = super::str_at(v, "/delta/partial_json");
                        if let Some(&index) = self.blocks.get(&block) {
                            if !args.is_empty() {
                                out.push(Ev::ToolArgs { index, args: args.to_string() });
                            }
                        }
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    out.push(Ev::Finish(anthropic::finish_of(r)));
                }
                if let Some(u) = v.g("usage") {
                    // The delta's counts are cumulative; the prompt side may be missing from it.
                    let d = anthropic::usage_of(u);
                    let mut total = self.usage;
                    total.completion = d.completion;
                    if u.g("input_tokens").is_some() {
                        (total.prompt, total.cached, total.cache_write) = (d.prompt, d.cached, d.cache_write);
                    }
                    out.push(Ev::Usage(total));
                }
            }
            Some("message_stop") => out.push(Ev::End),
            _ => {}
        }
    }

    fn google(&mut self, v: &Value, out: &mut Vec<Ev>) {
        let usage = v.g("usageMetadata").map(google::usage_of);
        self.start(v, "/responseId", "/modelVersion", usage.unwrap_or_default(), out);
        let cand = v.pointer("/candidates/0");
        if let Some(parts) = cand.and_then(|c| c.pointer("/content/parts")) {
            let (mut text, mut thoughts, mut calls) = (String::new(), String::new(), Vec::new());
            google::read_parts(parts, &mut text, &mut thoughts, &mut calls);
            if !thoughts.is_empty() {
                out.push(Ev::Reasoning(thoughts));
            }
            if !text.is_empty() {
                out.push(Ev::Text(text));
            }
            for mut k in calls {
                let index = self.tools;
                self.tools += 1;
                if k.id.is_empty() {
                    k.id = format!("call_{}", index + 1);
                }
                out.push(Ev::ToolStart { index, id: k.id, name: k.name });
                out.push(Ev::ToolArgs { index, args: k.args });
            }
        }
        let blocked = v.pointer("/promptFeedback/blockReason").is_some() && cand.is_none();
        let reason = cand.and_then(|c| c.g("finishReason")).and_then(Value::as_str);
        if reason.is_some() || blocked {
            let mut f = if blocked { Finish::ContentFilter } else { google::finish_of(reason.unwrap_or("STOP")) };
            if f == Finish::Stop && self.tools > 0 {
                f = Finish::ToolCalls;
            }
            out.push(Ev::Finish(f));
            out.push(Ev::Usage(usage.unwrap_or_default()));
            out.push(Ev::End);
        }
    }
}

/// What an encoder remembers between events.
#[derive(Debug, Default)]
struct Encoder {
    id: String,
    model: String,
    created: u64,
    started: bool,
    finish: Finish,
    usage: Usage,
    /// Anthropic: the open content block (`index`, tool index when a tool block) and the next.
    open: Option<(usize, Option<usize>)>,
    next_block: usize,
    /// Google: the call being collected (name, id, arguments so far), and whether the stream is
    /// one JSON array (no `alt=sse`) and has written its first element.
    call: Option<(String, String, String)>,
    array: bool,
    wrote: bool,
    ended: bool,
    /// The Responses API's stream (items, sequence numbers).
    responses: super::responses_stream::ResponsesEncoder,
}

fn sse(out: &mut Vec<u8>, event: Option<&str>, v: &Value) {
    if let Some(e) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(e.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    crate::json::write(out, v);
    out.extend_from_slice(b"\n\n");
}

impl Encoder {
    fn encode(&mut self, api: Api, ev: Ev, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        if let Ev::Start { id, model, usage } = &ev {
            if self.started {
                return;
            }
            (self.id, self.model, self.usage) = (id.clone(), model.clone(), *usage);
        } else if !self.started && !matches!(ev, Ev::Error { .. }) {
            self.encode(api, Ev::Start { id: String::new(), model: String::new(), usage: Usage::default() }, out);
        }
        match api {
            Api::OpenAi => self.openai(ev, out),
            Api::Anthropic => self.anthropic(ev, out),
            Api::Google => self.google(ev, out),
            Api::Responses => {
                self.started = true;
                self.ended = self.responses.encode(ev, self.created, out);
            }
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    }

    fn openai(&mut self, ev: Ev, out: &mut Vec<u8>) {
        match ev {
            Ev::Start { .. } => {
                self.started = true;
                if !self.id.starts_with("chatcmpl") {
                    self.id = format!("chatcmpl-{}", self.id);
                }
                sse(out, None, &self.chunk(json!({"role": "assistant", "content": ""}), None));
            }
            Ev::Text(t) => sse(out, None, &self.chunk(json!({"content": t}), None)),
            // OpenRouter's delta field for reasoning text.
            Ev::Reasoning(t) => sse(out, None, &self.chunk(json!({"reasoning": t}), None)),
            Ev::ToolStart { index, id, name } => {
                let d = json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""}}]});
                sse(out, None, &self.chunk(d, None));
            }
            Ev::ToolArgs { index, args } => {
                sse(
                    out,
                    None,
                    &self.chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": args}}]}), None),
                );
            }
            Ev::Finish(f) => sse(out, None, &self.chunk(json!({}), Some(f.openai()))),
            Ev::Usage(u) => {
                let v = json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "choices": [], "usage": openai::usage_value(&u)});
                sse(out, None, &v);
            }
            Ev::Error { status, message } => {
                let kind = if status >= 500 { "server_error" } else { "invalid_request_error" };
                sse(out, None, &json!({"error": {"message": message, "type": kind, "param": null, "code": null}}));
            }
            Ev::End => {
                self.ended = true;
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
        }
    }

    fn close_block(&mut self, out: &mut Vec<u8>) {
        if let Some((index, _)) = self.open.take() {
            sse(out, Some("content_block_stop"), &json!({"type": "content_block_stop", "index": index}));
        }
    }

    fn open_block(&mut self, block: Value, tool: Option<usize>, out: &mut Vec<u8>) {
        self.close_block(out);
        let index = self.next_block;
        self.next_block += 1;
        self.open = Some((index, tool));
        sse(
            out,
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
    }

    fn anthropic(&mut self, ev: Ev, out: &mut Vec<u8>) {
        match ev {
            Ev::Start { .. } => {
                self.started = true;
                if !self.id.starts_with("msg_") {
                    self.id = format!("msg_{}", self.id);
                }
                let m = json!({"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": anthropic::usage_value(&self.usage)});
                sse(out, Some("message_start"), &json!({"type": "message_start", "message": m}));
            }
            Ev::Text(t) => {
                if !matches!(self.open, Some((_, None))) {
                    self.open_block(json!({"type": "text", "text": ""}), None, out);
                }
                let index = self.open.map_or(0, |(i, _)| i);
                let d =
                    json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}});
                sse(out, Some("content_block_delta"), &d);
            }
            // Not written: a `thinking` block needs Anthropic's signature (`anthropic::write_answer`).
            Ev::Reasoning(_) => {}
            Ev::ToolStart { index, id, name } => {
                self.open_block(json!({"type": "tool_use", "id": id, "name": name, "input": {}}), Some(index), out);
            }
            Ev::ToolArgs { index, args } => {
                if let Some((block, Some(tool))) = self.open {
                    if tool == index {
                        let d = json!({"type": "content_block_delta", "index": block,
                            "delta": {"type": "input_json_delta", "partial_json": args}});
                        sse(out, Some("content_block_delta"), &d);
                    }
                }
            }
            Ev::Finish(f) => {
                self.close_block(out);
                self.finish = f;
            }
            Ev::Usage(u) => self.usage = u,
            Ev::Error { status, message } => {
                let e = json!({"type": "error", "error": {"type": crate::answer::errors::anthropic_type(u32::from(status)), "message": message}});
                sse(out, Some("error"), &e);
            }
            Ev::End => {
                self.close_block(out);
                self.ended = true;
                let d = json!({"type": "message_delta",
                    "delta": {"stop_reason": anthropic::stop_reason(self.finish), "stop_sequence": null},
                    "usage": anthropic::usage_value(&self.usage)});
                sse(out, Some("message_delta"), &d);
                sse(out, Some("message_stop"), &json!({"type": "message_stop"}));
            }
        }
    }

    fn google_chunk(&mut self, mut v: Value, out: &mut Vec<u8>) {
        if let Some(o) = v.as_object_mut() {
            o.insert("modelVersion".into(), json!(self.model));
            o.insert("responseId".into(), json!(self.id));
        }
        if self.array {
            out.extend_from_slice(if self.wrote { b",\r\n" } else { b"[" });
            crate::json::write(out, &v);
        } else {
            out.extend_from_slice(b"data: ");
            crate::json::write(out, &v);
            out.extend_from_slice(b"\r\n\r\n");
        }
        self.wrote = true;
    }

    fn flush_call(&mut self, out: &mut Vec<u8>) {
        if let Some((name, id, args)) = self.call.take() {
            let args = super::parse_object(&args).unwrap_or_else(|| json!({}));
            let part = json!({"functionCall": {"id": id, "name": name, "args": args}});
            self.google_chunk(
                json!({"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}]}),
                out,
            );
        }
    }

    fn google(&mut self, ev: Ev, out: &mut Vec<u8>) {
        match ev {
            Ev::Start { .. } => self.started = true,
            Ev::Text(t) => {
                self.flush_call(out);
                self.google_chunk(
                    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": t}]}, "index": 0}]}),
                    out,
                );
            }
            Ev::Reasoning(t) => {
                self.flush_call(out);
                self.google_chunk(
                    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": t, "thought": true}]},
                        "index": 0}]}),
                    out,
                );
            }
            Ev::ToolStart { id, name, .. } => {
                self.flush_call(out);
                self.call = Some((name, id, String::new()));
            }
            Ev::ToolArgs { args, .. } => {
                if let Some((_, _, a)) = self.call.as_mut() {
                    a.push_str(&args);
                }
            }
            Ev::Finish(f) => {
                self.flush_call(out);
                self.finish = f;
            }
            Ev::Usage(u) => self.usage = u,
            Ev::Error { status, message } => {
                let status_name = crate::answer::errors::google_status(u32::from(status));
                let e = json!({"error": {"code": status, "message": message, "status": status_name}});
                self.google_chunk(e, out);
            }
            Ev::End => {
                self.flush_call(out);
                self.ended = true;
                let last = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]},
                    "finishReason": google::finish_reason(self.finish), "index": 0}],
                    "usageMetadata": google::usage_value(&self.usage)});
                self.google_chunk(last, out);
                if self.array {
                    out.push(b']');
                }
            }
        }
    }
}

/// One attempt's stream from a provider speaking `from`, rewritten for a caller speaking `to`.
#[derive(Debug)]
pub struct StreamTranslator {
    from: Api,
    to: Api,
    lines: Lines,
    dec: Decoder,
    enc: Encoder,
    /// The serving provider's kind, whose own events are never decoded.
    kind: Option<std::sync::Arc<dyn crate::providers::Kind>>,
}

impl StreamTranslator {
    /// `created`: OpenAI's chunk timestamp (Unix seconds). `google_array`: the Google caller
    /// asked without `alt=sse`, so the stream is one JSON array.
    pub fn new(from: Api, to: Api, created: u64, google_array: bool) -> StreamTranslator {
        let enc = Encoder { created, array: google_array && to == Api::Google, ..Encoder::default() };
        StreamTranslator { from, to, lines: Lines::default(), dec: Decoder::default(), enc, kind: None }
    }

    /// Leaves out the provider's own events `kind` names (`Kind::hides_stream_event`, Azure's
    /// prompt filter chunk) before they are decoded.
    pub fn hiding_events_of(mut self, kind: std::sync::Arc<dyn crate::providers::Kind>) -> StreamTranslator {
        self.kind = Some(kind);
        self
    }

    /// The caller's bytes for the provider's next `chunk` (possibly empty: a partial event).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut evs = Vec::new();
        for (event, data) in self.lines.feed(chunk) {
            if self.kind.as_ref().is_some_and(|k| k.hides_stream_event(self.from, &data)) {
                continue;
            }
            self.dec.decode(self.from, &event, &data, &mut evs);
        }
        for ev in evs {
            self.enc.encode(self.to, ev, &mut out);
        }
        out
    }

    /// Whether the caller's stream got its final event.
    pub fn ended(&self) -> bool {
        self.enc.ended
    }
}
