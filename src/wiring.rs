//! Names the filters share with the Envoy configuration around them and with callers: root
//! ids, every `x-switchyard-*` header, metadata keys. The generators and the test kit import
//! them, so a rename lands everywhere at once; `docs/metrics.md` documents each header (a test
//! below keeps it so). The route mark and its metadata namespace are in `protocol::scope`.

/// The plugin `root_id` of the decision filter (the downstream HTTP filter).
pub const DECISION_ROOT_ID: &str = "switchyard";
/// The plugin `root_id` of the per-attempt filter (each provider cluster's upstream filter).
pub const ATTEMPT_ROOT_ID: &str = "switchyard_upstream";
/// The plugin `root_id` of the first-attempt filter (each first-attempt cluster's upstream
/// filter, in place of the per-attempt filter): it takes Envoy's and Switchyard's headers off the
/// attempt, names attempt 1 on the answer and notes a failure for the next attempt's filter.
pub const FIRST_ATTEMPT_ROOT_ID: &str = "switchyard_first";
/// The `vm_id` both roles share: one VM per worker, hence one set of shared data (statistics,
/// cool-downs) for the decision and the attempts.
pub const VM_ID: &str = "switchyard";

// Request headers a caller may send (removed before any provider sees them).

/// Asks for the ranked candidates and the auto router's reasoning, when the operator allows it.
pub const DEBUG_HEADER: &str = "x-switchyard-debug";
/// Routing fields (`provider`, `models`) as a JSON object, for callers whose SDK cannot add
/// body fields (Google's above all). Accepted on every surface.
pub const ROUTING_HEADER: &str = "x-switchyard-routing";
/// Every header of Switchyard's starts so; a caller's are removed on Switchyard's routes.
pub const INTERNAL_PREFIX: &str = "x-switchyard-";

// Request headers Switchyard writes for the Envoy configuration around it.

/// Names the next attempt's cluster by its token, read by the route's matcher before each
/// attempt (see `protocol::slots`): the decision filter writes the first, each attempt the next.
pub const NEXT_CLUSTER_HEADER: &str = "x-switchyard-next";

// Response headers the caller sees.

/// How the order was decided (`routing::router::Strategy`).
pub const STRATEGY_HEADER: &str = "x-switchyard-strategy";
/// Each attempt in order as `slug:status`.
pub const ATTEMPT_LOG_HEADER: &str = "x-switchyard-attempt-log";
/// Problems with the request that did not stop it, `; `-separated.
pub const WARNING_HEADER: &str = "x-switchyard-warning";
/// The ranked candidates with their scores and health (debug only).
pub const CANDIDATES_HEADER: &str = "x-switchyard-candidates";
/// The auto router's classification and ranking (debug only).
pub const AUTO_HEADER: &str = "x-switchyard-auto";
/// The mesh-wide limits a request was admitted under, whose counters and how (debug only).
pub const LIMITS_HEADER: &str = "x-switchyard-limits";
/// The operator policy a routed request ran under.
pub const POLICY_HEADER: &str = "x-switchyard-policy";
/// The provider endpoint (slug) that served.
pub const PROVIDER_HEADER: &str = "x-switchyard-provider";
/// The catalog model that served.
pub const MODEL_HEADER: &str = "x-switchyard-model";
/// `true` on an answer computed from the filter's own estimate, not a provider's count
/// (`/v1/messages/count_tokens`).
pub const ESTIMATE_HEADER: &str = "x-switchyard-estimate";
/// Set by the per-attempt filter when it turned a non-retryable failure into a retry because a
/// fallback model remains (its value: the provider's status).
pub const MODEL_FAILURE_HEADER: &str = "x-switchyard-model-failure";

/// Response header: the attempt that answered (set by the per-attempt filter, or by the
/// first-attempt cluster's hook for attempt 1); the decision filter reads it.
pub const ATTEMPTS_HEADER: &str = "x-switchyard-attempts";
/// Request header marking a local reply Switchyard already shaped: the listener's
/// `local_reply_config` leaves such replies alone.
pub const OWN_REPLY_HEADER: &str = "x-switchyard-own-reply";
/// Request header naming the provider host of a first attempt the decision filter prepared: the
/// routed route's `host_rewrite_header` makes it that attempt's `:authority` once the route is
/// chosen (changing `:authority` earlier would change the virtual host). The attempt's filter
/// takes it off with every other internal header.
pub const AUTHORITY_HEADER: &str = "x-switchyard-authority";
/// Request header set to `routing.passthrough_cluster` on unrouted requests; the generated route
/// sends a request carrying exactly that value to that cluster (and removes the header).
pub const PASSTHROUGH_HEADER: &str = "x-switchyard-passthrough";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_header_is_documented() {
        let doc = include_str!("../docs/metrics.md");
        for h in [
            DEBUG_HEADER,
            ROUTING_HEADER,
            NEXT_CLUSTER_HEADER,
            STRATEGY_HEADER,
            ATTEMPT_LOG_HEADER,
            WARNING_HEADER,
            CANDIDATES_HEADER,
            AUTO_HEADER,
            POLICY_HEADER,
            LIMITS_HEADER,
            PROVIDER_HEADER,
            MODEL_HEADER,
            ESTIMATE_HEADER,
            MODEL_FAILURE_HEADER,
            ATTEMPTS_HEADER,
            OWN_REPLY_HEADER,
            PASSTHROUGH_HEADER,
            AUTHORITY_HEADER,
        ] {
            assert!(h.starts_with(INTERNAL_PREFIX), "{h}");
            assert!(doc.contains(&format!("`{h}")), "{h} is not in docs/metrics.md");
        }
    }
}
