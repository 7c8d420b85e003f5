//! Bedrock's ConverseStream answer as Anthropic's SSE stream, frame by frame as the body
//! arrives (the Bedrock endpoint serves the Anthropic API; the decision filter translates that
//! stream into the caller's, as any Anthropic endpoint's). Only the part of one frame a chunk
//! ends in is buffered. Each event's payload is its shape of botocore's `ConverseStreamOutput`:
//!
//! | ConverseStream event | Anthropic event |
//! |---|---|
//! | `messageStart` | `message_start` (usage zero: Converse counts at the end) |
//! | `contentBlockStart` `start.toolUse` | `content_block_start` `tool_use` |
//! | `contentBlockDelta` `text` / `toolUse.input` / `reasoningContent.text` / `.signature` | `text_delta` / `input_json_delta` / `thinking_delta` / `signature_delta`, after a `content_block_start` for a text or reasoning block (Converse sends none for those) |
//! | `contentBlockStop` | `content_block_stop` |
//! | `messageStop` `stopReason` | held for the `message_delta` |
//! | `metadata` `usage` | `message_delta` (the stop reason, every count incl. cache reads and writes), then `message_stop` |
//! | an exception | an `error` event ([`super::map_exception`]); the stream ends there |
//!
//! A frame that cannot be decoded, or an event whose payload is not its shape, ends the stream
//! with an `api_error` event. Linear in the bytes fed.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::eventstream::{Decoder, Kind, Message};
use super::stream::{push_error, push_event, push_exception};
use crate::translate::jsonm::G;

/// The converter of one ConverseStream answer.
#[derive(Debug, Default)]
pub struct Converter {
    decoder: Decoder,
    /// The model id and message id the `message_start` names (Converse names neither).
    model: String,
    id: String,
    started: bool,
    /// Content blocks opened and not yet stopped, by Converse's `contentBlockIndex`.
    open: BTreeSet<u64>,
    /// `messageStop`'s reason, sent with the usage in `message_delta`.
    stop_reason: Option<&'static str>,
    /// An error event or `message_stop` was sent: the rest of the body is ignored.
    ended: bool,
}

/// Converse's stop reason in Anthropic's words.
fn anthropic_stop(reason: &str) -> &'static str {
    match reason {
        "tool_use" => "tool_use",
        "max_tokens" => "max_tokens",
        "stop_sequence" => "stop_sequence",
        "guardrail_intervened" | "content_filtered" => "refusal",
        _ => "end_turn",
    }
}

fn data(out: &mut Vec<u8>, kind: &str, v: &Value) {
    push_event(out, kind, crate::json::to_text(v).as_bytes());
}

impl Converter {
    /// A converter for an answer of `model` (the endpoint's upstream id); `id` names the message.
    pub fn new(model: &str, id: &str) -> Converter {
        Converter { model: model.to_string(), id: id.to_string(), ..Converter::default() }
    }

    /// Whether the stream ended (an error event, a bad frame, or `message_stop` sent).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The SSE bytes the chunk completes (empty while a frame is incomplete).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        let mut messages = Vec::new();
        let failed = self.decoder.feed(chunk, &mut messages).err();
        for m in &messages {
            self.message(m, &mut out);
            if self.ended {
                return out;
            }
        }
        if let Some(e) = failed {
            log::warn!("switchyard: bedrock converse stream: {e}");
            self.fail(&mut out, "api_error", "the provider's event stream could not be decoded");
        }
        out
    }

    fn fail(&mut self, out: &mut Vec<u8>, kind: &str, message: &str) {
        push_error(out, kind, message);
        self.ended = true;
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let id = if self.id.starts_with("msg_") { self.id.clone() } else { format!("msg_{}", self.id) };
        data(
            out,
            "message_start",
            &json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
                "model": self.model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}}}),
        );
    }

    /// Opens block `index` as `block` unless it is open.
    fn open(&mut self, index: u64, block: Value, out: &mut Vec<u8>) {
        self.start(out);
        if self.open.insert(index) {
            data(
                out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": index, "content_block": block}),
            );
        }
    }

    fn delta(&mut self, index: u64, block: Value, delta: Value, out: &mut Vec<u8>) {
        self.open(index, block, out);
        data(out, "content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": delta}));
    }

    fn message(&mut self, m: &Message, out: &mut Vec<u8>) {
        match m.kind() {
            Kind::Event(name) => {
                let Ok(v) = crate::json::from_slice::<Value>(&m.payload) else {
                    return self.fail(out, "api_error", "the provider sent an event that is not JSON");
                };
                if !self.event(name, &v, out) {
                    let message = format!("the provider sent a {name} event that is not ConverseStream's");
                    self.fail(out, "api_error", &message);
                }
            }
            Kind::Unknown => {}
            Kind::Exception(name) | Kind::Error(name) => {
                push_exception(out, name, m);
                self.ended = true;
            }
        }
    }

    /// One event; false when its payload is not its shape.
    fn event(&mut self, name: &str, v: &Value, out: &mut Vec<u8>) -> bool {
        let index = || v.g("contentBlockIndex").and_then(Value::as_u64);
        match name {
            "messageStart" => self.start(out),
            "contentBlockStart" => {
                let (Some(i), Some(tool)) = (index(), v.pointer("/start/toolUse")) else {
                    // A start of another kind of block: opened by its first delta.
                    return index().is_some();
                };
                let (id, name) =
                    (crate::translate::str_at(tool, "/toolUseId"), crate::translate::str_at(tool, "/name"));
                self.open(i, json!({"type": "tool_use", "id": id, "name": name, "input": {}}), out);
            }
            "contentBlockDelta" => {
                let (Some(i), Some(d)) = (index(), v.g("delta")) else { return false };
                if let Some(t) = d.g("text").and_then(Value::as_str) {
                    self.delta(i, json!({"type": "text", "text": ""}), json!({"type": "text_delta", "text": t}), out);
                } else if let Some(args) = d.pointer("/toolUse/input").and_then(Value::as_str) {
                    // Converse always starts a tool block first; a stray delta still has a block.
                    let block = json!({"type": "tool_use", "id": "", "name": "", "input": {}});
                    self.delta(i, block, json!({"type": "input_json_delta", "partial_json": args}), out);
                } else if let Some(r) = d.g("reasoningContent") {
                    let block = json!({"type": "thinking", "thinking": ""});
                    if let Some(t) = r.g("text").and_then(Value::as_str) {
                        self.delta(i, block, json!({"type": "thinking_delta", "thinking": t}), out);
                    } else if let Some(s) = r.g("signature").and_then(Value::as_str) {
                        self.delta(i, block, json!({"type": "signature_delta", "signature": s}), out);
                    }
                    // redactedContent: encrypted reasoning no other API can show.
                } else {
                    return d.is_object();
                }
            }
            "contentBlockStop" => {
                let Some(i) = index() else { return false };
                if self.open.remove(&i) {
                    data(out, "content_block_stop", &json!({"type": "content_block_stop", "index": i}));
                }
            }
            "messageStop" => {
                let Some(r) = v.g("stopReason").and_then(Value::as_str) else { return false };
                self.stop_reason = Some(anthropic_stop(r));
            }
            "metadata" => {
                let Some(u) = v.g("usage").filter(|u| u.is_object()) else { return false };
                self.start(out);
                // Blocks a stream left open are closed before the message ends.
                for i in std::mem::take(&mut self.open) {
                    data(out, "content_block_stop", &json!({"type": "content_block_stop", "index": i}));
                }
                let usage = crate::translate::anthropic::usage_value(&crate::translate::converse::usage_of(u));
                let stop = self.stop_reason.unwrap_or("end_turn");
                data(
                    out,
                    "message_delta",
                    &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": usage}),
                );
                data(out, "message_stop", &json!({"type": "message_stop"}));
                self.ended = true;
            }
            // Events a later service model adds: left out.
            _ => {}
        }
        true
    }
}

impl crate::providers::StreamConverter for Converter {
    fn content_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        Converter::feed(self, chunk)
    }
}

#[cfg(test)]
#[path = "converse_stream_tests.rs"]
mod tests;
