//! Reading the provider's token usage from the end of a response without parsing it: usage sits
//! at the end of a JSON body and in the last SSE events, so the upstream filter hands over only
//! the last `USAGE_TAIL_BYTES` of each body chunk. Linear in the tail, never allocates.

/// How much of each response chunk's end is scanned.
pub const USAGE_TAIL_BYTES: usize = 256;

/// The last `"completion_tokens": N` (OpenAI) or else `"output_tokens": N` (Responses API,
/// Anthropic) in `tail`. Numbers that do not fit a u64 count as absent.
pub fn completion_tokens(tail: &[u8]) -> Option<u64> {
    [&b"\"completion_tokens\":"[..], &b"\"output_tokens\":"[..]]
        .into_iter()
        .find_map(|key| last_number_after(tail, key))
}

fn last_number_after(text: &[u8], key: &[u8]) -> Option<u64> {
    let pos = text.windows(key.len()).rposition(|w| w == key)?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
