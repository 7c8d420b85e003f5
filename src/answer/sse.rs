//! Server-sent-event streams: telling a complete stream from one cut short, and the error
//! event a caller gets when a stream broke off after the first byte (it can no longer fail over).

use serde_json::json;

use crate::answer::errors::ApiError;
use crate::api::Api;

/// Events that end a stream normally: OpenAI chat/completions (`data: [DONE]`), the Responses
/// API's final events, Anthropic Messages' `message_stop`.
const TERMINATORS: [&[u8]; 5] =
    [b"[DONE]", b"response.completed", b"response.incomplete", b"response.failed", b"message_stop"];
/// A Google stream has no final event: its last chunk carries the candidate's `finishReason`.
const GOOGLE_TERMINATORS: [&[u8]; 1] = [b"\"finishReason\""];
/// Longest terminator minus one: bytes carried over so a terminator split between chunks is seen.
const CARRY: usize = 19;

/// Watches a stream's bytes for its terminating event. Fed the tail of each chunk (the
/// terminator is the last event, so tails suffice); constant memory.
#[derive(Debug, Default, Clone)]
pub struct StreamEnd {
    carry: Vec<u8>,
    done: bool,
    google: bool,
}

impl StreamEnd {
    /// Watches a stream of `api`'s events.
    pub fn for_api(api: Api) -> StreamEnd {
        StreamEnd { google: api == Api::Google, ..StreamEnd::default() }
    }

    pub fn feed(&mut self, tail: &[u8]) {
        let mut window = std::mem::take(&mut self.carry);
        window.extend_from_slice(tail);
        let terminators: &[&[u8]] = if self.google { &GOOGLE_TERMINATORS } else { &TERMINATORS };
        if terminators.iter().any(|t| window.windows(t.len()).any(|w| w == *t)) {
            self.done = true;
        }
        let keep = window.len().saturating_sub(CARRY);
        self.carry = window.split_off(keep);
    }

    /// The stream's terminating event was seen.
    pub fn complete(&self) -> bool {
        self.done
    }
}

/// The final SSE event for a stream that broke off: the OpenAI error shape, which the `openai`
/// SDKs raise as an API error (no `[DONE]` follows: the answer is incomplete).
pub fn interrupted_event(endpoint: &str, model: &str) -> String {
    interrupted_event_for(Api::OpenAi, endpoint, model)
}

/// The final event for a stream of `api` that broke off: OpenAI's error chunk, Anthropic's
/// `event: error` (which its SDKs raise), Google's error object as a last chunk.
pub fn interrupted_event_for(api: Api, endpoint: &str, model: &str) -> String {
    let mut e = ApiError::new(
        502,
        "server_error",
        "stream_interrupted",
        format!("the provider's stream ended before its final event ({endpoint}); the answer is incomplete"),
    );
    e.metadata.insert("endpoint".to_string(), json!(endpoint));
    e.metadata.insert("model".to_string(), json!(model));
    let e = e.for_api(api);
    match api {
        Api::Anthropic => format!("event: error\ndata: {}\n\n", e.body()),
        Api::OpenAi | Api::Responses | Api::Google => format!("data: {}\n\n", e.body()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_with_its_final_event_is_complete() {
        let mut s = StreamEnd::default();
        s.feed(b"data: {\"choices\":[]}\n\n");
        assert!(!s.complete());
        s.feed(b"data: [DONE]\n\n");
        assert!(s.complete());
        let mut r = StreamEnd::default();
        r.feed(b"event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n");
        assert!(r.complete());
    }

    #[test]
    fn a_terminator_split_between_chunks_is_seen() {
        let mut s = StreamEnd::default();
        s.feed(b"data: {\"x\":1}\n\ndata: [DO");
        assert!(!s.complete());
        s.feed(b"NE]\n\n");
        assert!(s.complete());
        let mut r = StreamEnd::default();
        for b in b"event: response.completed\n".chunks(1) {
            r.feed(b);
        }
        assert!(r.complete());
    }

    #[test]
    fn a_cut_stream_is_not_complete() {
        let mut s = StreamEnd::default();
        s.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"[DON\"}}]}\n\n");
        s.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"E\"}}]}\n\n");
        assert!(!s.complete());
    }

    #[test]
    fn interrupted_event_is_one_sse_event_in_the_openai_error_shape() {
        let ev = interrupted_event("alpha", "m/one");
        assert!(ev.starts_with("data: ") && ev.ends_with("\n\n") && ev.matches('\n').count() == 2);
        let v: serde_json::Value = serde_json::from_str(ev.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(v["error"]["code"], "stream_interrupted");
        assert_eq!(v["error"]["type"], "server_error");
        assert_eq!(v["error"]["metadata"]["endpoint"], "alpha");
        assert_eq!(v["error"]["metadata"]["model"], "m/one");
    }

    #[test]
    fn google_streams_end_with_a_finish_reason_and_errors_come_per_api() {
        let mut g = StreamEnd::for_api(Api::Google);
        g.feed(b"data: {\"candidates\":[{\"content\":{}}]}\r\n\r\n");
        g.feed(b"data: [DONE]\n\n");
        assert!(!g.complete(), "OpenAI's terminator means nothing in a Google stream");
        g.feed(b"data: {\"candidates\":[{\"finishR");
        g.feed(b"eason\": \"STOP\"}]}\r\n\r\n");
        assert!(g.complete());
        let mut a = StreamEnd::for_api(Api::Anthropic);
        a.feed(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        assert!(a.complete());

        let ev = interrupted_event_for(Api::Anthropic, "alpha", "m/one");
        let (head, data) = ev.split_once('\n').unwrap();
        assert_eq!(head, "event: error");
        let v: serde_json::Value = serde_json::from_str(data.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!((v["type"].as_str(), v["error"]["type"].as_str()), (Some("error"), Some("api_error")));
        assert_eq!(v["error"]["code"], "stream_interrupted");
        let ev = interrupted_event_for(Api::Google, "alpha", "m/one");
        let v: serde_json::Value = serde_json::from_str(ev.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!((v["error"]["code"].as_u64(), v["error"]["status"].as_str()), (Some(502), Some("UNAVAILABLE")));
    }
}
