//! What no provider may see: Envoy's and Switchyard's own request headers (`x-envoy-*`,
//! `x-switchyard-*`: the router's attempt count and timeout hints, the decision filter's markers,
//! the first attempt's authority). Each attempt's upstream filter takes them all off before the
//! codec sends the attempt, then writes the one a retry needs: the next attempt's cluster token
//! (see `protocol::slots` for why that one must stay on the request).

use super::host::Host;
use crate::protocol::scope::cluster_scheme_path;
use crate::protocol::slots::{next_token, NEXT_CLUSTER_HEADER, SLOTS_PROPERTY};
use crate::wiring::INTERNAL_PREFIX;

/// Envoy's own request headers start so.
pub const ENVOY_PREFIX: &str = "x-envoy-";

/// A header Switchyard or Envoy put on the request for itself.
pub fn is_internal(name: &str) -> bool {
    name.starts_with(ENVOY_PREFIX) || name.starts_with(INTERNAL_PREFIX)
}

/// Removes every internal header in `headers` (the request's, as attempt `attempt` found it)
/// and names the next planned attempt's cluster for the router's retry (no header after the
/// last: nothing follows).
pub fn hand_on<'a, H: Host>(host: &H, names: impl IntoIterator<Item = &'a str>, attempt: usize) {
    let slots = host.property(&[SLOTS_PROPERTY]).unwrap_or_default();
    let next = next_token(&slots, attempt);
    for k in names.into_iter().filter(|k| is_internal(k)) {
        if next.is_none() || k != NEXT_CLUSTER_HEADER {
            host.set_req_header(k, None);
        }
    }
    if let Some(token) = next {
        host.set_req_header(NEXT_CLUSTER_HEADER, Some(token));
    }
}

/// Gives the attempt the `:scheme` its cluster names (its metadata `switchyard.scheme`: `https`
/// on a cluster that originates TLS; HTTP/2 sends it, and Envoy would otherwise forward the
/// caller's `http`). Nothing on a cluster that names none.
pub fn set_scheme<H: Host>(host: &H) {
    if let Some(scheme) = host.property(&cluster_scheme_path()).filter(|s| s == b"https" || s == b"http") {
        host.set_req_header(":scheme", std::str::from_utf8(&scheme).ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::mock::MockHost;
    use crate::protocol::slots::{encode_slots, slot_token};

    fn headers(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn attempt(k: usize) -> Vec<(String, String)> {
        let host = MockHost::new();
        host.with_request_headers(&[
            (":path", "/v1/chat/completions"),
            ("x-envoy-attempt-count", "2"),
            ("x-envoy-expected-rq-timeout-ms", "300000"),
            ("x-switchyard-next", "stale"),
            ("x-switchyard-authority", "alpha.example"),
            ("x-switchyard-own-reply", "1"),
            ("x-test", "kept"),
        ]);
        host.set_prop(&[SLOTS_PROPERTY], encode_slots(&["c_a", "c_b", "c_c"]).as_bytes());
        let found = host.req_headers();
        hand_on(&host, found.iter().map(|(k, _)| k.as_str()), k);
        let mut sent = host.req_headers();
        sent.sort();
        sent
    }

    #[test]
    fn an_attempt_carries_only_the_next_clusters_token_and_the_last_nothing() {
        let next = slot_token("c_c");
        assert_eq!(
            attempt(2),
            headers(&[(":path", "/v1/chat/completions"), ("x-switchyard-next", next.as_str()), ("x-test", "kept")])
        );
        assert_eq!(attempt(3), headers(&[(":path", "/v1/chat/completions"), ("x-test", "kept")]));
    }

    #[test]
    fn the_scheme_comes_from_the_clusters_metadata_and_only_a_known_one() {
        let host = MockHost::new();
        host.with_request_headers(&[(":scheme", "http")]);
        set_scheme(&host);
        assert_eq!(host.request_header_value(":scheme").as_deref(), Some("http"), "no metadata: untouched");
        host.set_prop(&cluster_scheme_path(), b"ftp");
        set_scheme(&host);
        assert_eq!(host.request_header_value(":scheme").as_deref(), Some("http"), "unknown: untouched");
        host.set_prop(&cluster_scheme_path(), b"https");
        set_scheme(&host);
        assert_eq!(host.request_header_value(":scheme").as_deref(), Some("https"));
    }

    #[test]
    fn internal_means_envoys_and_switchyards_own_prefixes() {
        for name in ["x-envoy-attempt-count", "x-envoy-peer-metadata", "x-switchyard-next", "x-switchyard-debug"] {
            assert!(is_internal(name), "{name}");
        }
        for name in ["x-request-id", "x-forwarded-proto", "authorization", "x-envoyish", "x-switchyardx"] {
            assert!(!is_internal(name), "{name}");
        }
    }
}
