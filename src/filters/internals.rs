//! What no provider may see: Envoy's and Switchyard's own request headers (`x-envoy-*`,
//! `x-switchyard-*`: the router's attempt count and timeout hints, the decision filter's markers,
//! the first attempt's authority). Each attempt's upstream filter takes them all off before the
//! codec sends the attempt, then names the next attempt's cluster for the router's retry: in
//! filter state, or on istio-proxy in the one header a retry there needs (see `protocol::slots`).

use super::host::Host;
use crate::protocol::scope::cluster_scheme_path;
use crate::protocol::slots::{next_state_property, next_token, NEXT_CLUSTER_HEADER, SLOTS_PROPERTY};
use crate::wiring::INTERNAL_PREFIX;

/// Envoy's own request headers start so.
pub const ENVOY_PREFIX: &str = "x-envoy-";

/// A header Switchyard or Envoy put on the request for itself.
pub fn is_internal(name: &str) -> bool {
    name.starts_with(ENVOY_PREFIX) || name.starts_with(INTERNAL_PREFIX)
}

/// Removes every internal header in `headers` (the request's, as attempt `attempt` found it)
/// and names the next planned attempt's cluster for the router's retry (nothing after the last:
/// nothing follows). The handoff is the one the decision filter chose: a request that arrived
/// with `x-switchyard-next` uses the header (istio-proxy), any other filter state. Whether an
/// attempt follows.
pub fn hand_on<'a, H: Host>(host: &H, names: impl IntoIterator<Item = &'a str>, attempt: usize) -> bool {
    let slots = host.property(&[SLOTS_PROPERTY]).unwrap_or_default();
    let next = next_token(&slots, attempt);
    let mut by_header = false;
    for k in names.into_iter().filter(|k| is_internal(k)) {
        if k == NEXT_CLUSTER_HEADER {
            by_header = true;
            if next.is_some() {
                continue; // rewritten below
            }
        }
        host.set_req_header(k, None);
    }
    match next {
        Some(token) if by_header => host.set_req_header(NEXT_CLUSTER_HEADER, Some(token)),
        Some(token) => host.set_property(&[&next_state_property(attempt + 1)], token.as_bytes()),
        None => {}
    }
    next.is_some()
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
    use crate::protocol::slots::{encode_slots, next_state_property, slot_token};

    fn headers(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Attempt `k`'s request as sent, and its filter state, from a request that carried
    /// `headers` (the internal ones Envoy and the decision filter put there).
    fn attempt(k: usize, with_next_header: bool) -> (Vec<(String, String)>, MockHost) {
        let host = MockHost::new();
        let mut arrived = vec![
            (":path", "/v1/chat/completions"),
            ("x-envoy-attempt-count", "2"),
            ("x-envoy-expected-rq-timeout-ms", "300000"),
            ("x-switchyard-authority", "alpha.example"),
            ("x-switchyard-own-reply", "1"),
            ("x-test", "kept"),
        ];
        if with_next_header {
            arrived.push(("x-switchyard-next", "stale"));
        }
        host.with_request_headers(&arrived);
        host.set_prop(&[SLOTS_PROPERTY], encode_slots(&["c_a", "c_b", "c_c"], None).as_bytes());
        let found = host.req_headers();
        let _ = hand_on(&host, found.iter().map(|(k, _)| k.as_str()), k);
        let mut sent = host.req_headers();
        sent.sort();
        (sent, host)
    }

    #[test]
    fn by_filter_state_an_attempt_carries_no_internal_header_and_names_the_next_in_state() {
        let clean = headers(&[(":path", "/v1/chat/completions"), ("x-test", "kept")]);
        let (sent, host) = attempt(2, false);
        assert_eq!(sent, clean);
        assert_eq!(host.prop(&[&next_state_property(3)]), Some(slot_token("c_c").into_bytes()));
        let (sent, host) = attempt(3, false);
        assert_eq!(sent, clean, "the last attempt");
        assert_eq!(host.prop(&[&next_state_property(4)]), None, "nothing follows the last");
    }

    #[test]
    fn by_header_an_attempt_carries_only_the_next_clusters_token_and_the_last_nothing() {
        let next = slot_token("c_c");
        let (sent, host) = attempt(2, true);
        assert_eq!(
            sent,
            headers(&[(":path", "/v1/chat/completions"), ("x-switchyard-next", next.as_str()), ("x-test", "kept")])
        );
        assert_eq!(host.prop(&[&next_state_property(3)]), None, "one handoff only");
        assert_eq!(attempt(3, true).0, headers(&[(":path", "/v1/chat/completions"), ("x-test", "kept")]));
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
