//! A stream in the Responses API's shape, written from the neutral [`Ev`]s as they arrive:
//! `response.created`, `response.in_progress`, then per output item `response.output_item.added`,
//! its deltas (`response.content_part.added`, `response.output_text.delta` for a message,
//! `response.function_call_arguments.delta` for a call), its `.done` events and
//! `response.output_item.done`, and last `response.completed` (or `response.incomplete`,
//! `response.failed`) with the whole response and its usage. Every event has its
//! `sequence_number`; SSE framing is `event: <type>\ndata: <json>\n\n`, as OpenAI sends it.
//!
//! The item being written is kept until it is done (its `.done` events repeat its whole text
//! or arguments, and `response.completed` lists every item), as OpenAI does: linear in the
//! answer, and nothing waits for it.

use serde_json::{Map, Value};

use super::responses::{call_item, message_item, reasoning_item, response_id, response_object, status, usage_value};
use super::stream::Ev;
use super::{Call, Finish, Usage};

/// The output item being written.
#[derive(Debug)]
enum Open {
    /// A message: its id and its text so far.
    Message { id: String, text: String },
    /// A reasoning item (one summary part): its id and its text so far.
    Reasoning { id: String, text: String },
    /// A function call: its index among the answer's calls and the call so far.
    Call { index: usize, call: Call },
}

/// What the Responses encoder remembers between events.
#[derive(Debug, Default)]
pub struct ResponsesEncoder {
    id: String,
    model: String,
    created: u64,
    seq: u64,
    /// The done items (for `response.completed`) and the one being written.
    items: Vec<Value>,
    open: Option<Open>,
    finish: Finish,
    usage: Usage,
}

impl ResponsesEncoder {
    fn event(&mut self, out: &mut Vec<u8>, kind: &str, fields: Vec<(&str, Value)>) {
        let mut o = Map::new();
        o.insert("type".into(), json!(kind));
        o.insert("sequence_number".into(), json!(self.seq));
        self.seq += 1;
        for (k, v) in fields {
            o.insert(k.to_string(), v);
        }
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        crate::json::write(out, &Value::Object(o));
        out.extend_from_slice(b"\n\n");
    }

    fn response(&self, status: &str, output: Vec<Value>) -> Map<String, Value> {
        response_object(&self.id, &self.model, self.created, status, output)
    }

    /// Writes the events for `ev`; true once the stream's final event is written.
    pub fn encode(&mut self, ev: Ev, created: u64, out: &mut Vec<u8>) -> bool {
        match ev {
            Ev::Start { id, model, usage } => {
                (self.id, self.model, self.created, self.usage) = (response_id(&id), model, created, usage);
                let r = Value::Object(self.response("in_progress", Vec::new()));
                self.event(out, "response.created", vec![("response", r.clone())]);
                self.event(out, "response.in_progress", vec![("response", r)]);
            }
            Ev::Text(t) => {
                if !matches!(self.open, Some(Open::Message { .. })) {
                    self.close(out);
                    let index = self.items.len();
                    let id = format!("msg_{}_{index}", self.id.trim_start_matches("resp_"));
                    let item = json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant",
                        "content": []});
                    self.event(out, "response.output_item.added", vec![("output_index", json!(index)), ("item", item)]);
                    let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
                    self.event(
                        out,
                        "response.content_part.added",
                        vec![
                            ("item_id", json!(id)),
                            ("output_index", json!(index)),
                            ("content_index", json!(0u64)),
                            ("part", part),
                        ],
                    );
                    self.open = Some(Open::Message { id, text: String::new() });
                }
                let index = self.items.len();
                let Some(Open::Message { id, text }) = self.open.as_mut() else { return false };
                text.push_str(&t);
                let id = id.clone();
                self.event(
                    out,
                    "response.output_text.delta",
                    vec![
                        ("item_id", json!(id)),
                        ("output_index", json!(index)),
                        ("content_index", json!(0u64)),
                        ("delta", json!(t)),
                        ("logprobs", json!([])),
                    ],
                );
            }
            Ev::Reasoning(t) => self.reasoning(t, out),
            Ev::ToolStart { index, id, name } => {
                self.close(out);
                let call = Call { id, name, args: String::new() };
                let item = call_item(&call, "in_progress");
                self.event(
                    out,
                    "response.output_item.added",
                    vec![("output_index", json!(self.items.len())), ("item", item)],
                );
                self.open = Some(Open::Call { index, call });
            }
            Ev::ToolArgs { index, args } => {
                let output_index = self.items.len();
                // Arguments of a call already done (never sent so by the providers) are lost.
                let Some(Open::Call { index: open, call }) = self.open.as_mut() else { return false };
                if *open != index {
                    return false;
                }
                call.args.push_str(&args);
                let item_id = format!("fc_{}", call.id);
                self.event(
                    out,
                    "response.function_call_arguments.delta",
                    vec![("item_id", json!(item_id)), ("output_index", json!(output_index)), ("delta", json!(args))],
                );
            }
            Ev::Finish(f) => {
                self.close(out);
                self.finish = f;
            }
            Ev::Usage(u) => self.usage = u,
            Ev::Error { status, message } => {
                self.close(out);
                let code = if status >= 500 { "server_error" } else { "invalid_request_error" };
                self.event(
                    out,
                    "error",
                    vec![("code", json!(code)), ("message", json!(message)), ("param", Value::Null)],
                );
                let items = std::mem::take(&mut self.items);
                let mut r = self.response("failed", items);
                r.insert("error".into(), json!({"code": code, "message": message}));
                r.insert("usage".into(), usage_value(&self.usage));
                self.event(out, "response.failed", vec![("response", Value::Object(r))]);
                return true;
            }
            Ev::End => {
                self.close(out);
                let (status, details) = status(self.finish);
                let kind = if status == "completed" { "response.completed" } else { "response.incomplete" };
                let items = std::mem::take(&mut self.items);
                let mut r = self.response(status, items);
                r.insert("incomplete_details".into(), details);
                r.insert("usage".into(), usage_value(&self.usage));
                self.event(out, kind, vec![("response", Value::Object(r))]);
                return true;
            }
        }
        false
    }

    /// A piece of reasoning text: a `reasoning` item opened (with its one summary part) unless
    /// one is being written, then a `response.reasoning_summary_text.delta`.
    fn reasoning(&mut self, t: String, out: &mut Vec<u8>) {
        let index = self.items.len();
        if !matches!(self.open, Some(Open::Reasoning { .. })) {
            self.close(out);
            let index = self.items.len();
            let id = format!("rs_{}_{index}", self.id.trim_start_matches("resp_"));
            let item = json!({"type": "reasoning", "id": id, "summary": []});
            self.event(out, "response.output_item.added", vec![("output_index", json!(index)), ("item", item)]);
            self.event(
                out,
                "response.reasoning_summary_part.added",
                vec![
                    ("item_id", json!(id)),
                    ("output_index", json!(index)),
                    ("summary_index", json!(0u64)),
                    ("part", json!({"type": "summary_text", "text": ""})),
                ],
            );
            self.open = Some(Open::Reasoning { id, text: String::new() });
        }
        let Some(Open::Reasoning { id, text }) = self.open.as_mut() else { return };
        text.push_str(&t);
        let id = id.clone();
        self.event(
            out,
            "response.reasoning_summary_text.delta",
            vec![
                ("item_id", json!(id)),
                ("output_index", json!(index)),
                ("summary_index", json!(0u64)),
                ("delta", json!(t)),
            ],
        );
    }

    /// Ends the item being written: its `.done` events and `response.output_item.done`.
    fn close(&mut self, out: &mut Vec<u8>) {
        let index = self.items.len();
        let item = match self.open.take() {
            None => return,
            Some(Open::Reasoning { id, text }) => {
                let at =
                    || vec![("item_id", json!(id)), ("output_index", json!(index)), ("summary_index", json!(0u64))];
                let mut f = at();
                f.push(("text", json!(text)));
                self.event(out, "response.reasoning_summary_text.done", f);
                let mut f = at();
                f.push(("part", json!({"type": "summary_text", "text": text})));
                self.event(out, "response.reasoning_summary_part.done", f);
                reasoning_item(&id, &text)
            }
            Some(Open::Message { id, text }) => {
                self.event(
                    out,
                    "response.output_text.done",
                    vec![
                        ("item_id", json!(id)),
                        ("output_index", json!(index)),
                        ("content_index", json!(0u64)),
                        ("text", json!(text)),
                        ("logprobs", json!([])),
                    ],
                );
                let part = json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                self.event(
                    out,
                    "response.content_part.done",
                    vec![
                        ("item_id", json!(id)),
                        ("output_index", json!(index)),
                        ("content_index", json!(0u64)),
                        ("part", part),
                    ],
                );
                message_item(&id, &text, "completed")
            }
            Some(Open::Call { call, .. }) => {
                self.event(
                    out,
                    "response.function_call_arguments.done",
                    vec![
                        ("item_id", json!(format!("fc_{}", call.id))),
                        ("output_index", json!(index)),
                        ("name", json!(call.name)),
                        ("arguments", json!(call.args)),
                    ],
                );
                call_item(&call, "completed")
            }
        };
        self.event(out, "response.output_item.done", vec![("output_index", json!(index)), ("item", item.clone())]);
        self.items.push(item);
    }
}
