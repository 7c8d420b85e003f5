//! How the decision filter hands its plan to Envoy's retries: one slot header per attempt.
//!
//! The route's cluster specifier is Envoy's matcher (`envoy.router.cluster_specifier_plugin.matcher`,
//! built by Envoy 1.38+ and istio-proxy 1.30+) and its retry policy sets
//! `refresh_cluster_on_retry` (Envoy 1.39+), so the specifier runs again before every retry. It
//! reads the router's own `x-envoy-attempt-count` (the virtual host sets
//! `include_request_attempt_count`): none yet for the first attempt, resolved with the route, so
//! slot 1; on a refresh the count of the attempt that just failed, `k`, so slot `k + 1`. Slot `k`
//! names attempt `k`'s cluster by its token (`x-switchyard-slot-<k>: <token>`); the matcher maps
//! the token of each cluster the configuration knows to that cluster, so any other value matches
//! nothing. The per-attempt filter still refuses an attempt whose cluster is not the plan's.
//!
//! Header changes in upstream filters persist into later attempts, so no attempt may remove what
//! a later retry reads: the count and the slots after its own. Slot 1 is removed by the route
//! (the first cluster is chosen by then); an attempt removes its own slot and earlier ones. A
//! provider therefore sees the attempt count and the later slots: tokens, not cluster names, so
//! it learns nothing of which other providers the plan holds.

use crate::wiring::SLOT_HEADER_PREFIX;

/// The router's attempt counter on the request (`include_request_attempt_count`).
pub const ATTEMPT_COUNT_HEADER: &str = "x-envoy-attempt-count";

/// The opaque value naming `cluster` in a slot header (FNV-1a 64 of the name, hex): the same for
/// the decision filter and the generated matcher, whatever order the configuration lists
/// clusters in (a reload never shifts it).
pub fn slot_token(cluster: &str) -> String {
    format!("{:016x}", crate::protocol::plan::fingerprint(cluster.as_bytes()))
}

/// The header naming attempt `k`'s cluster (1-based).
pub fn slot_header(k: usize) -> String {
    format!("{SLOT_HEADER_PREFIX}{k}")
}

/// The attempt number of a slot header name, if it is one.
pub fn slot_of(name: &str) -> Option<usize> {
    name.strip_prefix(SLOT_HEADER_PREFIX)?.parse().ok().filter(|k| *k > 0)
}

/// A header a later retry of attempt `attempt` still needs, which that attempt's filter must leave
/// on the request: the attempt count, and the slots after `attempt`.
pub fn needed_by_later_attempts(name: &str, attempt: usize) -> bool {
    name == ATTEMPT_COUNT_HEADER || slot_of(name).is_some_and(|k| k > attempt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_headers_round_trip() {
        assert_eq!(slot_header(1), "x-switchyard-slot-1");
        assert_eq!(slot_of("x-switchyard-slot-3"), Some(3));
        for other in ["x-switchyard-slot-0", "x-switchyard-slot-", "x-switchyard-slot-x", "x-switchyard-routed"] {
            assert_eq!(slot_of(other), None, "{other}");
        }
    }

    #[test]
    fn tokens_are_stable_opaque_and_distinct() {
        let t = slot_token("outbound|443||api.together.xyz");
        assert_eq!(t.len(), 16);
        assert!(!t.contains("together"));
        assert_eq!(t, slot_token("outbound|443||api.together.xyz"));
        assert_ne!(t, slot_token("outbound|443|first|api.together.xyz"));
    }

    #[test]
    fn an_attempt_keeps_only_what_later_retries_read() {
        assert!(needed_by_later_attempts("x-envoy-attempt-count", 1));
        assert!(needed_by_later_attempts("x-switchyard-slot-3", 2));
        assert!(!needed_by_later_attempts("x-switchyard-slot-2", 2));
        assert!(!needed_by_later_attempts("x-switchyard-slot-1", 2));
        assert!(!needed_by_later_attempts("x-envoy-expected-rq-timeout-ms", 1));
        assert!(!needed_by_later_attempts("x-switchyard-debug", 1));
    }
}
