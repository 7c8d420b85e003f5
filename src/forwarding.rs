//! Which caller headers may reach a provider. A provider is a third party: it gets the request
//! it needs (content type, accept, its own key set by the upstream filter) and none of the
//! caller's secrets or the mesh's internal identity and tracing headers.
//!
//! Configured by the top-level `upstream_headers` object: a default deny set always applies,
//! `deny` adds names, and `allow` (when set) turns the policy into an allow-list. Names are
//! lower-case; a `*` matches any run of characters (`x-b3-*`).

use crate::routing::wildcard;

/// Never forwarded to a provider, whatever the configuration says: caller credentials,
/// cookies, client identity, and the mesh's tracing and Envoy-internal headers.
pub const DEFAULT_DENY: [&str; 25] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "anthropic-api-key",
    "x-forwarded-client-cert",
    "x-forwarded-for",
    "x-real-ip",
    "forwarded",
    "x-client-trace-id",
    "x-request-id",
    "traceparent",
    "tracestate",
    // W3C baggage: caller key-values (user and tenant ids) that travel with the trace.
    "baggage",
    "b3",
    "x-b3-*",
    "x-ot-span-context",
    "uber-trace-id",
    "x-datadog-*",
    "x-amzn-trace-id",
    "x-cloud-trace-context",
    "x-envoy-*",
    "x-switchyard-*",
];

/// Headers an allow-list always keeps: the request cannot be served without them. (The
/// provider's credential header is set after the policy ran.)
/// `anthropic-version` (and `anthropic-beta`, which selects features of the request) are part of
/// an Anthropic Messages request.
pub const ALWAYS_ALLOWED: [&str; 8] = [
    "content-type",
    "content-length",
    "accept",
    "accept-encoding",
    "te",
    "transfer-encoding",
    "anthropic-version",
    "anthropic-beta",
];

#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeaderPolicy {
    /// When set, only these (and `ALWAYS_ALLOWED`) are forwarded.
    pub allow: Option<Vec<String>>,
    /// Added to `DEFAULT_DENY`.
    pub deny: Vec<String>,
}

impl HeaderPolicy {
    /// Whether a caller's header (lower-case name) may reach a provider. Pseudo-headers
    /// (`:path`, `:authority`, ...) are the upstream filter's business and always kept.
    pub fn forwards(&self, name: &str) -> bool {
        if name.starts_with(':') {
            return true;
        }
        if DEFAULT_DENY.iter().any(|p| wildcard::matches(p, name)) || wildcard::any_matches(&self.deny, name) {
            return false;
        }
        match &self.allow {
            None => true,
            Some(allow) => ALWAYS_ALLOWED.contains(&name) || wildcard::any_matches(allow, name),
        }
    }

    /// The names among `names` to remove before a provider sees the request.
    pub fn to_remove<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        // Envoy's header names are lower-case already: copied only when one is not.
        names
            .into_iter()
            .filter(|n| match n.bytes().any(|b| b.is_ascii_uppercase()) {
                true => !self.forwards(&n.to_ascii_lowercase()),
                false => !self.forwards(n),
            })
            .collect()
    }
}

/// A configured pattern: lower-case header characters and `*`, not a pseudo-header.
pub fn valid_pattern(p: &str) -> bool {
    !p.is_empty()
        && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.' | b'*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Regression (caller headers reaching third parties): everything the caller sent used to go
    // to the provider. The default set strips credentials, cookies, identity and tracing.
    #[test]
    fn default_policy_strips_secrets_identity_and_tracing() {
        let p = HeaderPolicy::default();
        for h in [
            "authorization",
            "proxy-authorization",
            "cookie",
            "x-api-key",
            "x-forwarded-client-cert",
            "x-forwarded-for",
            "x-b3-traceid",
            "x-b3-spanid",
            "traceparent",
            "x-request-id",
            "x-envoy-expected-rq-timeout-ms",
            "x-envoy-peer-metadata",
            "x-datadog-trace-id",
            "x-switchyard-routed",
        ] {
            assert!(!p.forwards(h), "{h} must not reach a provider");
        }
        for h in [":path", ":authority", "content-type", "accept", "user-agent", "openai-beta", "x-test-id"] {
            assert!(p.forwards(h), "{h} is forwarded by default");
        }
    }

    #[test]
    fn deny_adds_and_allow_restricts() {
        let p = HeaderPolicy { allow: None, deny: vec!["x-internal-*".into(), "x-tenant".into()] };
        assert!(!p.forwards("x-internal-user"));
        assert!(!p.forwards("x-tenant"));
        assert!(p.forwards("x-tenants"));
        assert!(!p.forwards("cookie"), "the default set still applies");

        let p =
            HeaderPolicy { allow: Some(vec!["openai-*".into(), "x-test-id".into(), "cookie".into()]), deny: vec![] };
        assert!(p.forwards("openai-beta"));
        assert!(p.forwards("x-test-id"));
        assert!(p.forwards("content-type") && p.forwards("content-length") && p.forwards(":path"));
        assert!(!p.forwards("user-agent"));
        assert!(!p.forwards("cookie"), "an allow-list cannot re-admit a default-denied header");
        let names = ["Content-Type", "User-Agent", "openai-beta", "Cookie"];
        assert_eq!(p.to_remove(names), vec!["User-Agent", "Cookie"]);
    }

    #[test]
    fn patterns_are_validated() {
        assert!(valid_pattern("x-b3-*"));
        for bad in ["", "X-Upper", ":path", "a b", "a\r\n"] {
            assert!(!valid_pattern(bad), "{bad:?}");
        }
    }
}
