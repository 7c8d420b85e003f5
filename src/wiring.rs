//! Names the filters share with the Envoy configuration around them (the generators import
//! them, so a rename lands everywhere at once). The route mark is in `scope`, the slot headers
//! in `slots`.

/// The plugin `root_id` of the decision filter (the downstream HTTP filter).
pub const DECISION_ROOT_ID: &str = "switchyard";
/// The plugin `root_id` of the per-attempt filter (each provider cluster's upstream filter).
pub const ATTEMPT_ROOT_ID: &str = "switchyard_upstream";
/// The `vm_id` both roles share: one VM per worker, hence one set of shared data (statistics,
/// cool-downs) for the decision and the attempts.
pub const VM_ID: &str = "switchyard";

/// Response header: the attempt that answered (set by the per-attempt filter, or by the
/// first-attempt cluster's hook for attempt 1); the decision filter reads it.
pub const ATTEMPTS_HEADER: &str = "x-switchyard-attempts";
/// Request header marking a local reply Switchyard already shaped: the listener's
/// `local_reply_config` leaves such replies alone.
pub const OWN_REPLY_HEADER: &str = "x-switchyard-own-reply";
/// Request header set to `routing.passthrough_cluster` on unrouted requests; the generated route
/// sends a request carrying exactly that value to that cluster (and removes the header).
pub const PASSTHROUGH_HEADER: &str = "x-switchyard-passthrough";
/// Dynamic metadata key (namespace `switchyard`) where the first-attempt hook notes a failed
/// answer's `<status>,<retry-after>` for the next attempt's filter.
pub const FIRST_ATTEMPT_METADATA: &str = "first_attempt";
