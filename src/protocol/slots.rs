//! How the decision filter hands its order to Envoy's retries: one header naming the next
//! attempt's cluster, rewritten by each attempt.
//!
//! The route's cluster specifier is Envoy's matcher (`envoy.router.cluster_specifier_plugin.matcher`,
//! built by Envoy 1.38+ and istio-proxy 1.30+) on the request header `x-switchyard-next`, whose
//! value is a cluster's token; its retry policy sets `refresh_cluster_on_retry` (Envoy 1.39+), so
//! the specifier reads the header again before every retry. The decision filter writes the first
//! attempt's token, and the whole order (`SLOTS_PROPERTY`, filter state) for the attempts'
//! filters. Each attempt's upstream filter takes every internal header off the request and writes
//! the next attempt's token (none after the last): header changes in upstream filters persist
//! into later attempts, so that is what the router reads if this attempt fails.
//!
//! Why a provider still sees that one header: the matcher can only read request headers (istio-
//! proxy builds neither the filter-state nor the metadata matcher input), a header the retry
//! reads must be on the request while the attempt is sent (an upstream filter can change request
//! headers only before then: proxy-wasm refuses request-header writes after the headers phase,
//! measured on Envoy 1.39.3 and 1.40.0), and every attempt but the last may be retried. So
//! attempt k carries the token of attempt k + 1's cluster, nothing else of Switchyard's or
//! Envoy's: no attempt count, no other slot.
//!
//! The matcher maps the token of each cluster the configuration knows to that cluster, so any
//! other value matches nothing. The routed route also requires the plan in filter state
//! (`plan::PLAN_STATE_KEY`), which only the decision filter writes: a forged header without a
//! plan matches no route to a provider.

/// The request header naming the next attempt's cluster by its token.
pub use crate::wiring::NEXT_CLUSTER_HEADER;

/// Filter-state key (`wasm.<key>`) of the planned clusters' tokens in attempt order,
/// comma-separated: the attempts' filters write the next one from it.
pub const SLOTS_PROPERTY: &str = "switchyard_slots";

/// The opaque value naming `cluster` (FNV-1a 64 of the name, hex): the same for the decision
/// filter and the generated matcher, whatever order the configuration lists clusters in (a reload
/// never shifts it).
pub fn slot_token(cluster: &str) -> String {
    format!("{:016x}", crate::protocol::plan::fingerprint(cluster.as_bytes()))
}

/// The tokens of `clusters` in attempt order, as `SLOTS_PROPERTY` holds them.
pub fn encode_slots(clusters: &[&str]) -> String {
    clusters.iter().map(|c| slot_token(c)).collect::<Vec<_>>().join(",")
}

/// The token of the cluster after attempt `attempt` (1-based), if the plan has one.
pub fn next_token(slots: &[u8], attempt: usize) -> Option<&str> {
    let text = std::str::from_utf8(slots).ok()?;
    text.split(',').nth(attempt).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attempt_finds_the_next_token_and_the_last_none() {
        let slots = encode_slots(&["c_a", "c_b", "c_c"]);
        assert_eq!(next_token(slots.as_bytes(), 1), Some(slot_token("c_b").as_str()));
        assert_eq!(next_token(slots.as_bytes(), 2), Some(slot_token("c_c").as_str()));
        assert_eq!(next_token(slots.as_bytes(), 3), None);
        assert_eq!(next_token(b"", 1), None);
        assert_eq!(next_token(&[0xff, b',', 0xfe], 1), None);
    }

    #[test]
    fn tokens_are_stable_opaque_and_distinct() {
        let t = slot_token("outbound|443||api.together.xyz");
        assert_eq!(t.len(), 16);
        assert!(!t.contains("together"));
        assert_eq!(t, slot_token("outbound|443||api.together.xyz"));
        assert_ne!(t, slot_token("outbound|443|first|api.together.xyz"));
    }
}
