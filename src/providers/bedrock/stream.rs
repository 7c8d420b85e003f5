//! Bedrock's streamed answer (`InvokeModelWithResponseStream`) as Anthropic's SSE stream, frame
//! by frame as the body arrives: nothing is buffered but the part of one frame a chunk ends in.
//!
//! - a `chunk` event's payload is `{"bytes": base64(event JSON), "p": padding}`: the event is
//!   sent on as `event: <its type>\ndata: <its JSON>\n\n`, byte for byte, except `message_stop`,
//!   whose `amazon-bedrock-invocationMetrics` (Bedrock's own addition) is left out;
//! - an exception (`throttlingException`, `modelStreamErrorException`, ...) or an error message
//!   becomes Anthropic's in-stream `error` event ([`super::map_exception`] names its type), and
//!   ends the stream: nothing after it is read;
//! - a frame that cannot be decoded (a CRC mismatch, a frame over the maximum, a chunk whose
//!   payload is not what Bedrock sends) ends the stream with an `api_error` event.
//!
//! Other event types are left out. Linear in the bytes fed.

use super::eventstream::{Decoder, Kind, Message};
use super::map_exception;

/// The converter of one streamed answer.
#[derive(Debug, Default)]
pub struct Converter {
    decoder: Decoder,
    /// An error event was sent: the rest of the body is ignored.
    ended: bool,
}

/// The Anthropic event in a `chunk` event's payload, and its type.
fn chunk_event(payload: &[u8]) -> Option<(String, Vec<u8>)> {
    #[derive(serde::Deserialize)]
    struct Chunk<'a> {
        #[serde(borrow)]
        bytes: std::borrow::Cow<'a, str>,
    }
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: String,
    }
    let chunk: Chunk = crate::json::from_slice(payload).ok()?;
    let event = crate::protocol::base64::decode_bytes(chunk.bytes.as_bytes())?;
    let kind = crate::json::from_slice::<Typed>(&event).ok()?.kind;
    // An event name is one line of letters and underscores.
    if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    if kind == "message_stop" {
        return Some((kind, br#"{"type":"message_stop"}"#.to_vec()));
    }
    Some((kind, event))
}

pub(super) fn push_event(out: &mut Vec<u8>, kind: &str, data: &[u8]) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // Valid JSON holds raw line breaks only as whitespace between tokens (never in a string):
    // as spaces they cannot end the SSE field early.
    out.extend(data.iter().map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b }));
    out.extend_from_slice(b"\n\n");
}

pub(super) fn push_error(out: &mut Vec<u8>, anthropic_type: &str, message: &str) {
    push_event(out, "error", &super::anthropic_error_body(anthropic_type, message));
}

/// Anthropic's in-stream `error` event for the exception (or error message) `name` that `m`
/// carries: its type by [`map_exception`], its message named. Both stream converters end there.
pub(super) fn push_exception(out: &mut Vec<u8>, name: &str, m: &Message) {
    let mapped = map_exception(name, 0);
    let message =
        super::error_message(&m.payload).or_else(|| m.string(":error-message").map(str::to_string)).unwrap_or_default();
    let message = if message.is_empty() { name.to_string() } else { format!("{name}: {message}") };
    push_error(out, mapped.anthropic_type, &message);
}

impl Converter {
    pub fn new() -> Converter {
        Converter::default()
    }

    /// Whether the stream ended on an error event (an exception, a bad frame).
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
            log::warn!("switchyard: bedrock stream: {e}");
            push_error(&mut out, "api_error", "the provider's event stream could not be decoded");
            self.ended = true;
        }
        out
    }

    fn message(&mut self, m: &Message, out: &mut Vec<u8>) {
        match m.kind() {
            Kind::Event("chunk") => match chunk_event(&m.payload) {
                Some((kind, data)) => push_event(out, &kind, &data),
                None => {
                    push_error(out, "api_error", "the provider sent a chunk that is not an Anthropic stream event");
                    self.ended = true;
                }
            },
            Kind::Event(_) | Kind::Unknown => {}
            Kind::Exception(name) | Kind::Error(name) => {
                push_exception(out, name, m);
                self.ended = true;
            }
        }
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
#[path = "stream_tests.rs"]
mod tests;
