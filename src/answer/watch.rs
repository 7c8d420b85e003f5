//! What one attempt's answer showed, gathered as it passes: status, `Retry-After`, first byte,
//! reported usage, and whether an event stream ended with its final event. Both filters feed it:
//! the per-attempt filter for the attempts it runs on, the decision filter for a first attempt
//! it prepared itself (that attempt has no per-attempt filter). Pure: the caller reads the bytes.

use crate::answer::sse::StreamEnd;
use crate::answer::usage::{tokens_per_s, ReportedUsage, USAGE_TAIL_BYTES};
use crate::api::Api;
use crate::protocol::outcome::{parse_google_retry_delay, parse_retry_after, Outcome};

/// How much of an Anthropic stream's first chunk is read for `message_start`'s usage.
pub const ANTHROPIC_HEAD_BYTES: usize = 1024;
/// The longest Gemini 429 body held for its retry delay (Google's errors are a few hundred bytes).
pub const MAX_ERROR_BODY_BYTES: usize = 16 << 10;

#[derive(Debug, Clone)]
pub struct AttemptWatch {
    pub api: Api,
    pub stream: bool,
    pub started_ms: u64,
    pub first_byte_ms: Option<u64>,
    pub status: Option<u16>,
    pub retry_after_s: Option<u32>,
    pub body_chunks: u32,
    pub usage: ReportedUsage,
    /// A successful SSE answer: watched for its terminating event.
    pub sse: Option<StreamEnd>,
    /// The answer started successfully but broke off (reset, or a stream without its final
    /// event): a failed attempt, though the caller already has the first bytes.
    pub interrupted: bool,
}

/// The figures of a finished attempt, ready for the statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub outcome: Outcome,
    pub status: u16,
    pub ttft_ms: Option<u32>,
    pub tokens_per_s: Option<f64>,
    pub retry_after_s: Option<u32>,
    pub latency_ms: u64,
}

impl AttemptWatch {
    pub fn new(api: Api, stream: bool, started_ms: u64) -> AttemptWatch {
        AttemptWatch {
            api,
            stream,
            started_ms,
            first_byte_ms: None,
            status: None,
            retry_after_s: None,
            body_chunks: 0,
            usage: ReportedUsage::default(),
            sse: None,
            interrupted: false,
        }
    }

    /// The response headers: status, `Retry-After` (capped at `max_retry_after_s`), and whether a
    /// successful answer is an event stream.
    pub fn headers(
        &mut self,
        status: u16,
        retry_after: Option<&str>,
        content_type: Option<&str>,
        max_retry_after_s: u32,
    ) {
        self.status = Some(status);
        self.retry_after_s = retry_after.and_then(|v| parse_retry_after(v, max_retry_after_s));
        if (200..300).contains(&status) && content_type.is_some_and(|c| c.starts_with("text/event-stream")) {
            self.sse = Some(StreamEnd::for_api(self.api));
        }
    }

    /// Whether the answer's delay is in its body: a Gemini 429 without `Retry-After` reports it
    /// as `google.rpc.RetryInfo` (see [`AttemptWatch::error_body`]).
    pub fn reads_error_body(&self) -> bool {
        self.api == Api::Google && self.status == Some(429) && self.retry_after_s.is_none()
    }

    /// The whole body of an answer [`AttemptWatch::reads_error_body`] named: its retry delay,
    /// capped at `max_retry_after_s`.
    pub fn error_body(&mut self, body: &[u8], max_retry_after_s: u32) {
        if self.reads_error_body() {
            self.retry_after_s = parse_google_retry_delay(body, max_retry_after_s);
        }
    }

    /// Whether a chunk of `body_size` bytes needs its head read too (see [`AttemptWatch::chunk`]):
    /// an Anthropic stream reports its prompt tokens in its first event (`message_start`).
    pub fn wants_head(&self, body_size: usize) -> bool {
        self.body_chunks == 0 && self.sse.is_some() && self.api == Api::Anthropic && body_size > USAGE_TAIL_BYTES
    }

    /// One body chunk of `body_size` bytes arrived at `now_ms`: `head` is its first
    /// `ANTHROPIC_HEAD_BYTES` when [`AttemptWatch::wants_head`] said so, `tail` its last
    /// `USAGE_TAIL_BYTES` (or all of it).
    pub fn chunk(&mut self, now_ms: u64, body_size: usize, head: Option<&[u8]>, tail: &[u8]) {
        if self.first_byte_ms.is_none() {
            self.first_byte_ms = Some(now_ms);
        }
        if body_size == 0 {
            return;
        }
        self.body_chunks += 1;
        // The head before the tail: the tail's later values win.
        if let Some(h) = head {
            self.usage.scan_for(self.api, h);
        }
        self.usage.scan_for(self.api, tail);
        if let Some(sse) = self.sse.as_mut() {
            sse.feed(tail);
        }
    }

    /// The same for a chunk whose bytes are all at hand.
    pub fn whole_chunk(&mut self, now_ms: u64, chunk: &[u8]) {
        let n = chunk.len();
        let head = self.wants_head(n).then(|| chunk.get(..n.min(ANTHROPIC_HEAD_BYTES)).unwrap_or(&[]));
        let tail = chunk.get(n.saturating_sub(USAGE_TAIL_BYTES)..).unwrap_or(&[]);
        self.chunk(now_ms, n, head, tail);
    }

    /// The body ended: an event stream without its final event broke off.
    pub fn body_ended(&mut self) {
        if self.sse.as_ref().is_some_and(|s| !s.complete()) {
            self.interrupted = true;
        }
    }

    /// The attempt ended without a complete answer (connect failure, reset, timeout, or a body
    /// that never ended): a successful answer cut short is interrupted.
    pub fn unanswered(&mut self) {
        if self.status.is_some_and(|s| (200..400).contains(&s)) {
            self.interrupted = true;
        }
    }

    /// The figures to record, at `now_ms`.
    pub fn summary(&self, now_ms: u64) -> Summary {
        let status = self.status.unwrap_or(0);
        let outcome = if self.interrupted { Outcome::Interrupted } else { Outcome::of(status) };
        let tokens_per_s = match (self.first_byte_ms, outcome) {
            (Some(first), Outcome::Success) => tokens_per_s(
                self.stream,
                self.started_ms,
                first,
                now_ms,
                self.usage.completion_tokens,
                self.body_chunks,
            ),
            _ => None,
        };
        Summary {
            outcome,
            status,
            ttft_ms: self.first_byte_ms.map(|t| t.saturating_sub(self.started_ms) as u32),
            tokens_per_s,
            retry_after_s: self.retry_after_s,
            latency_ms: now_ms.saturating_sub(self.started_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_served_json_answer_with_usage() {
        let mut w = AttemptWatch::new(Api::OpenAi, false, 1000);
        w.headers(200, None, Some("application/json"), 300);
        w.whole_chunk(1040, br#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30}}"#);
        w.body_ended();
        let s = w.summary(1100);
        assert_eq!((s.outcome, s.status, s.ttft_ms, s.latency_ms), (Outcome::Success, 200, Some(40), 100));
        assert_eq!((w.usage.prompt_tokens, w.usage.completion_tokens), (Some(12), Some(30)));
    }

    #[test]
    fn a_stream_without_its_final_event_is_interrupted() {
        let mut w = AttemptWatch::new(Api::OpenAi, true, 0);
        w.headers(200, None, Some("text/event-stream"), 300);
        w.whole_chunk(5, b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n");
        w.body_ended();
        assert_eq!(w.summary(10).outcome, Outcome::Interrupted);
        let mut done = AttemptWatch::new(Api::OpenAi, true, 0);
        done.headers(200, None, Some("text/event-stream"), 300);
        done.whole_chunk(5, b"data: {}\n\ndata: [DO");
        done.whole_chunk(6, b"NE]\n\n");
        done.body_ended();
        assert_eq!(done.summary(10).outcome, Outcome::Success, "a terminator split between chunks");
    }

    #[test]
    fn a_refusal_keeps_its_retry_after_and_a_cut_answer_is_interrupted() {
        let mut w = AttemptWatch::new(Api::OpenAi, false, 0);
        w.headers(429, Some("7"), Some("application/json"), 300);
        let s = w.summary(3);
        assert_eq!((s.outcome, s.retry_after_s), (Outcome::of(429), Some(7)));
        let mut cut = AttemptWatch::new(Api::OpenAi, false, 0);
        cut.headers(200, None, None, 300);
        cut.unanswered();
        assert_eq!(cut.summary(3).outcome, Outcome::Interrupted);
        let mut none = AttemptWatch::new(Api::OpenAi, false, 0);
        none.unanswered();
        assert_eq!(none.summary(3).status, 0);
        assert_ne!(none.summary(3).outcome, Outcome::Interrupted);
    }

    #[test]
    fn a_gemini_429_takes_its_delay_from_the_body() {
        let body = br#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7s"}]}}"#;
        let mut w = AttemptWatch::new(Api::Google, false, 0);
        w.headers(429, None, Some("application/json"), 300);
        assert!(w.reads_error_body());
        w.error_body(body, 300);
        assert_eq!(w.summary(3).retry_after_s, Some(7));
        // Retry-After, when a Google answer has one, is read as everywhere; other APIs and
        // statuses never hold a body.
        let mut header = AttemptWatch::new(Api::Google, false, 0);
        header.headers(429, Some("2"), None, 300);
        assert!(!header.reads_error_body());
        header.error_body(body, 300);
        assert_eq!(header.retry_after_s, Some(2));
        for (api, status) in [(Api::OpenAi, 429), (Api::Anthropic, 429), (Api::Google, 503)] {
            let mut w = AttemptWatch::new(api, false, 0);
            w.headers(status, None, None, 300);
            assert!(!w.reads_error_body(), "{api:?} {status}");
        }
    }

    #[test]
    fn anthropic_prompt_tokens_from_a_long_first_chunk_head() {
        let mut w = AttemptWatch::new(Api::Anthropic, true, 0);
        w.headers(200, None, Some("text/event-stream"), 300);
        let mut chunk = br#"event: message_start
data: {"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}

"#
        .to_vec();
        chunk.extend(std::iter::repeat_n(b' ', 2000));
        chunk.extend_from_slice(b"event: message_delta\ndata: {\"usage\":{\"output_tokens\":15}}\n\n");
        assert!(w.wants_head(chunk.len()));
        w.whole_chunk(1, &chunk);
        assert_eq!((w.usage.prompt_tokens, w.usage.completion_tokens), (Some(25), Some(15)));
    }
}
