//! `allowed_models`-style wildcard patterns: `*` matches any run of characters (including `/`
//! and none at all); every other character matches itself, case-sensitively. `anthropic/*`
//! matches every Anthropic model, `openai/gpt-*` the GPT family, `*` everything.
//!
//! Shared by the auto router's `allowed_models` and operator policies. Matching is greedy with
//! one backtrack point (the last `*`), so it runs in O(pattern x text) at worst and in linear
//! time for the usual one-star patterns; nothing recurses.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0usize, 0usize);
    // Position of the last `*` seen and the text position it was tried at.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if Some(&c) == t.get(ti) => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                // Let the last `*` swallow one more character and retry from there.
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p.get(pi..).is_some_and(|rest| rest.iter().all(|&c| c == b'*'))
}

/// Whether any of `patterns` matches `text`.
pub fn any_matches<S: AsRef<str>>(patterns: &[S], text: &str) -> bool {
    patterns.iter().any(|p| matches(p.as_ref(), text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_and_family_patterns() {
        assert!(matches("anthropic/*", "anthropic/claude-sonnet-4-6"));
        assert!(!matches("anthropic/*", "openai/gpt-5"));
        assert!(!matches("anthropic/*", "anthropic"));
        assert!(matches("anthropic/*", "anthropic/"));
        assert!(matches("openai/gpt-*", "openai/gpt-5-mini"));
        assert!(!matches("openai/gpt-*", "openai/o3"));
        assert!(matches("*", "anything/at:all"));
        assert!(matches("*", ""));
        assert!(matches("*/llama-*", "meta-llama/llama-4-maverick"));
        assert!(matches("*-mini", "openai/gpt-5-mini"));
        assert!(!matches("*-mini", "openai/gpt-5-mini-2"));
        assert!(matches("a*b*c", "aXXbYYbZZc"));
        assert!(!matches("a*b*c", "aXXbYYbZZ"));
        assert!(matches("exact/id", "exact/id"));
        assert!(!matches("exact/id", "exact/id2"));
        assert!(!matches("Exact/id", "exact/id"), "case-sensitive");
        assert!(matches("a**", "abc"));
        assert!(!matches("", "a"));
        assert!(matches("", ""));
    }

    #[test]
    fn any_of_a_list() {
        let allowed = ["anthropic/*".to_string(), "openai/gpt-*".to_string()];
        assert!(any_matches(&allowed, "openai/gpt-5"));
        assert!(!any_matches(&allowed, "google/gemini-2.5-pro"));
        assert!(!any_matches::<String>(&[], "x"));
    }

    #[test]
    fn adversarial_pattern_stays_fast() {
        // Many stars against a long near-miss: bounded by pattern x text, no exponential blowup.
        let pattern = "*a".repeat(50) + "b";
        let text = "a".repeat(10_000);
        assert!(!matches(&pattern, &text));
    }
}
