//! Reading the provider's token usage from the end of a response without parsing it: usage sits
//! at the end of a JSON body and in the last SSE events, so the upstream filter hands over only
//! the last `USAGE_TAIL_BYTES` of each body chunk (512: room for `prompt_tokens_details`).
//! Linear in the tail, never allocates.

use crate::api::Api;

/// How much of each response chunk's end is scanned.
pub const USAGE_TAIL_BYTES: usize = 512;

/// The last `"completion_tokens": N` (OpenAI) or else `"output_tokens": N` (Responses API,
/// Anthropic) in `tail`. Numbers that do not fit a u64 count as absent.
pub fn completion_tokens(tail: &[u8]) -> Option<u64> {
    [&b"\"completion_tokens\":"[..], &b"\"output_tokens\":"[..]]
        .into_iter()
        .find_map(|key| last_number_after(tail, key))
}

/// Output speed of a successful attempt, tokens per second: usage when the provider reported
/// it, else one token per body chunk; over the time after the first byte for streams (the
/// generation), over the whole attempt for whole answers. None without tokens or time.
pub fn tokens_per_s(
    stream: bool,
    started_ms: u64,
    first_byte_ms: u64,
    now_ms: u64,
    reported_tokens: Option<u64>,
    chunks: u32,
) -> Option<f64> {
    let since = if stream { first_byte_ms } else { started_ms };
    let secs = now_ms.saturating_sub(since) as f64 / 1000.0;
    let tokens = reported_tokens.unwrap_or(u64::from(chunks)) as f64;
    (secs > 0.0 && tokens > 0.0).then(|| tokens / secs)
}

/// Where `key` last occurs in `text`. Each candidate position is tested on its first two bytes
/// before the whole key: comparing every window whole calls `memcmp` once per byte of the
/// answer, for each key (the answer's tail is scanned on every attempt's end).
fn rfind(text: &[u8], key: &[u8]) -> Option<usize> {
    let (&a, rest) = key.split_first()?;
    let b = rest.first().copied();
    let last = text.len().checked_sub(key.len())?;
    (0..=last).rev().find(|&i| {
        text.get(i) == Some(&a)
            && b.is_none_or(|b| text.get(i + 1) == Some(&b))
            && text.get(i..i + key.len()) == Some(key)
    })
}

fn last_number_after(text: &[u8], key: &[u8]) -> Option<u64> {
    let pos = rfind(text, key)?;
    let rest = text.get(pos + key.len()..)?;
    let digits = rest.iter().skip_while(|b| b.is_ascii_whitespace()).take_while(|b| b.is_ascii_digit());
    let mut n: u64 = 0;
    let mut any = false;
    for d in digits {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        any = true;
    }
    any.then_some(n)
}

/// The last value seen for each usage field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportedUsage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Prompt tokens served from the provider's prompt cache.
    pub cached_tokens: Option<u64>,
}

impl ReportedUsage {
    /// Reads the usage fields of `api`'s answers in one chunk's tail; later chunks override
    /// earlier values.
    /// - Anthropic (`usage` of a message, `message_start` and `message_delta`): prompt =
    ///   `input_tokens` + `cache_read_input_tokens` + `cache_creation_input_tokens` (Anthropic's
    ///   `input_tokens` excludes both), cached = `cache_read_input_tokens`.
    /// - Google (`usageMetadata`): prompt = `promptTokenCount` (cache hits included), cached =
    ///   `cachedContentTokenCount`, completion = `candidatesTokenCount` + `thoughtsTokenCount`
    ///   (thinking is billed as output).
    pub fn scan_for(&mut self, api: Api, tail: &[u8]) {
        let last = |k: &[u8]| last_number_after(tail, k);
        match api {
            Api::OpenAi | Api::Responses => self.scan(tail),
            Api::Anthropic => {
                let cache_read = last(b"\"cache_read_input_tokens\":");
                if let Some(n) = last(b"\"input_tokens\":") {
                    let created = last(b"\"cache_creation_input_tokens\":").unwrap_or(0);
                    self.prompt_tokens = Some(n.saturating_add(cache_read.unwrap_or(0)).saturating_add(created));
                    if cache_read.is_some() {
                        self.cached_tokens = cache_read;
                    }
                }
                if let Some(n) = last(b"\"output_tokens\":") {
                    self.completion_tokens = Some(n);
                }
            }
            Api::Google => {
                if let Some(n) = last(b"\"promptTokenCount\":") {
                    self.prompt_tokens = Some(n);
                }
                if let Some(n) = last(b"\"cachedContentTokenCount\":") {
                    self.cached_tokens = Some(n);
                }
                let candidates = last(b"\"candidatesTokenCount\":");
                let thoughts = last(b"\"thoughtsTokenCount\":");
                if candidates.is_some() || thoughts.is_some() {
                    self.completion_tokens = Some(candidates.unwrap_or(0).saturating_add(thoughts.unwrap_or(0)));
                }
            }
        }
    }

    /// Reads the usage fields in one chunk's tail; later chunks override earlier values.
    pub fn scan(&mut self, tail: &[u8]) {
        let first = |keys: [&[u8]; 2]| keys.into_iter().find_map(|k| last_number_after(tail, k));
        if let Some(n) = first([b"\"prompt_tokens\":", b"\"input_tokens\":"]) {
            self.prompt_tokens = Some(n);
        }
        if let Some(n) = completion_tokens(tail) {
            self.completion_tokens = Some(n);
        }
        if let Some(n) = first([b"\"cached_tokens\":", b"\"cache_read_input_tokens\":"]) {
            self.cached_tokens = Some(n);
        }
    }

    /// Complete enough to price: prompt and completion tokens both reported.
    pub fn priced(&self, pricing: &crate::config::Pricing) -> Option<crate::routing::stats::Usage> {
        let (prompt, completion) = (self.prompt_tokens?, self.completion_tokens?);
        Some(crate::routing::stats::Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cost_usd: pricing.cost_usd(prompt, self.cached_tokens.unwrap_or(0), completion),
        })
    }
}

#[cfg(test)]
mod rfind_tests {
    use super::rfind;

    #[test]
    fn rfind_finds_the_last_occurrence_as_windows_would() {
        let cases: [(&[u8], &[u8]); 8] = [
            (b"\"a\":1,\"a\":2", b"\"a\":"),
            (b"xx", b"xxx"),
            (b"", b"\""),
            (b"abc", b""),
            (b"\"", b"\""),
            (b"\"\"\"", b"\"\""),
            (b"\"input_tokens\":3,\"output_tokens\":4", b"\"output_tokens\":"),
            (b"\"ou\"out\"output_tokens", b"\"output_tokens"),
        ];
        for (text, key) in cases {
            let naive = if key.is_empty() { None } else { text.windows(key.len()).rposition(|w| w == key) };
            assert_eq!(
                rfind(text, key),
                naive,
                "{:?} in {:?}",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(text)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Pricing;

    #[test]
    fn reads_usage_from_json_and_sse_tails() {
        let json = br#"{"choices":[],"usage":{"prompt_tokens":17,"completion_tokens":42,"total_tokens":59}}"#;
        assert_eq!(completion_tokens(json), Some(42));
        let sse = b"data: {\"choices\":[],\"usage\":{\"completion_tokens\": 7}}\n\ndata: [DONE]\n\n";
        assert_eq!(completion_tokens(sse), Some(7));
        let responses = br#"{"usage":{"input_tokens":3,"output_tokens":9}}"#;
        assert_eq!(completion_tokens(responses), Some(9));
        // The last occurrence wins (a later event updates the count).
        assert_eq!(completion_tokens(br#""completion_tokens":1 ... "completion_tokens":2"#), Some(2));
    }

    #[test]
    fn throughput_over_generation_for_streams_and_the_attempt_otherwise() {
        // Stream: 100 tokens reported, first byte at 1 s, done at 3 s -> 50 tok/s.
        assert_eq!(tokens_per_s(true, 0, 1000, 3000, Some(100), 7), Some(50.0));
        // Whole answer: the same over the whole 4 s attempt -> 25 tok/s.
        assert_eq!(tokens_per_s(false, 0, 1000, 4000, Some(100), 1), Some(25.0));
        // No usage: one token per chunk.
        assert_eq!(tokens_per_s(true, 0, 1000, 2000, None, 30), Some(30.0));
        // No time or no tokens: unknown, never infinite.
        assert_eq!(tokens_per_s(true, 0, 1000, 1000, Some(5), 1), None);
        assert_eq!(tokens_per_s(false, 5000, 5000, 4000, Some(5), 1), None);
        assert_eq!(tokens_per_s(true, 0, 10, 20, Some(0), 0), None);
    }

    #[test]
    fn absent_truncated_or_huge_numbers_are_none() {
        for tail in [
            &b""[..],
            b"no usage here",
            b"\"completion_tokens\":",
            b"\"completion_tokens\":\"12\"",
            b"\"completion_tokens\":-3",
            b"\"completion_tokens\":99999999999999999999999",
            b"\xff\xfe\"completion_tokens\"",
        ] {
            assert_eq!(completion_tokens(tail), None, "{}", String::from_utf8_lossy(tail));
        }
        assert_eq!(completion_tokens(b"\"completion_tokens\":18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn openai_usage_with_cached_tokens_is_read_and_priced() {
        let mut u = ReportedUsage::default();
        u.scan(br#"..."usage":{"prompt_tokens":1200,"completion_tokens":300,"total_tokens":1500,"prompt_tokens_details":{"cached_tokens":1000}}}"#);
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.cached_tokens), (Some(1200), Some(300), Some(1000)));
        let pricing = Pricing { prompt: 1.0, completion: 4.0, cached_prompt: Some(10.0), ..Pricing::default() };
        let p = u.priced(&pricing).unwrap();
        // 200 uncached at $1 + 1000 cached at $10 + 300 completion at $4, per million.
        assert!((p.cost_usd - (200.0 + 10_000.0 + 1_200.0) / 1e6).abs() < 1e-12);
    }

    #[test]
    fn streamed_usage_split_over_chunks_and_other_spellings() {
        let mut u = ReportedUsage::default();
        u.scan(br#"data: {"usage":{"input_tokens":"#);
        u.scan(br#"50,"output_tokens": 7}}"#);
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens),
            (None, Some(7)),
            "a number split from its key is not guessed"
        );
        u.scan(br#"{"usage":{"input_tokens":50,"output_tokens":7,"cache_read_input_tokens":20}}"#);
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.cached_tokens), (Some(50), Some(7), Some(20)));
        assert!(ReportedUsage::default().priced(&Pricing::default()).is_none());
        let mut huge = ReportedUsage::default();
        huge.scan(br#""prompt_tokens":99999999999999999999999999,"completion_tokens":1"#);
        assert_eq!(huge.prompt_tokens, None, "an overlong number is not a count");
    }

    #[test]
    fn anthropic_usage_counts_cache_reads_and_writes_as_prompt() {
        let mut u = ReportedUsage::default();
        u.scan_for(Api::Anthropic, br#"{"type":"message","usage":{"input_tokens":20,"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":9}}"#);
        assert_eq!((u.prompt_tokens, u.cached_tokens, u.completion_tokens), (Some(125), Some(100), Some(9)));
        // Streaming: message_start has the prompt, the last message_delta the output count.
        let mut s = ReportedUsage::default();
        s.scan_for(Api::Anthropic, b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n");
        s.scan_for(Api::Anthropic, b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n");
        s.scan_for(Api::Anthropic, b"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":30}}\n\nevent: message_stop\ndata: {}\n\n");
        assert_eq!((s.prompt_tokens, s.completion_tokens), (Some(12), Some(30)));
        let pricing = Pricing { prompt: 1.0, completion: 2.0, ..Pricing::default() };
        assert!((s.priced(&pricing).unwrap().cost_usd - (12.0 + 60.0) / 1e6).abs() < 1e-15);
    }

    #[test]
    fn google_usage_metadata_incl_thoughts_and_streamed_chunks() {
        let mut u = ReportedUsage::default();
        u.scan_for(Api::Google, b"{\n  \"usageMetadata\": {\n    \"promptTokenCount\": 40,\n    \"candidatesTokenCount\": 7,\n    \"totalTokenCount\": 60,\n    \"thoughtsTokenCount\": 13,\n    \"cachedContentTokenCount\": 30\n  }\n}");
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.cached_tokens), (Some(40), Some(20), Some(30)));
        let mut s = ReportedUsage::default();
        s.scan_for(
            Api::Google,
            b"data: {\"candidates\":[],\"usageMetadata\":{\"promptTokenCount\":8,\"candidatesTokenCount\":2}}\r\n\r\n",
        );
        s.scan_for(Api::Google, b"data: {\"candidates\":[{\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":8,\"candidatesTokenCount\":11}}\r\n\r\n");
        assert_eq!((s.prompt_tokens, s.completion_tokens), (Some(8), Some(11)));
        // OpenAI names mean nothing on the Google surface.
        let mut n = ReportedUsage::default();
        n.scan_for(Api::Google, br#"{"usage":{"prompt_tokens":3,"completion_tokens":4}}"#);
        assert_eq!(n, ReportedUsage::default());
    }
}
