//! Which requests are Switchyard's: only those whose matched route carries the route mark.
//!
//! The decision filter runs on every request of its listener, and a listener is often shared
//! (an Istio sidecar's port-80 outbound listener, a gateway, an operator's own virtual hosts).
//! A request whose route is not marked is none of Switchyard's business: the filter leaves it
//! untouched (no header written or removed, no body read, no local reply). The generators mark
//! every route of Switchyard's own virtual hosts; a hand-written Envoy configuration marks its
//! Switchyard routes the same way:
//!
//! ```yaml
//! metadata: {filter_metadata: {switchyard: {route: llm}}}
//! ```

/// The route metadata namespace Switchyard reads (`filter_metadata.<namespace>`); route-selected
/// operator policies (`switchyard.policy`) live there too.
pub const METADATA_NAMESPACE: &str = "switchyard";
/// The route metadata key naming the operator policy for requests on that route.
pub const ROUTE_POLICY_KEY: &str = "policy";
/// The key that marks a route as Switchyard's; any non-empty string value counts.
pub const ROUTE_MARK_KEY: &str = "route";
/// The value the generated configurations write.
pub const ROUTE_MARK_VALUE: &str = "llm";

/// The cluster metadata key (same namespace) naming the scheme a provider cluster's attempts
/// carry (`https` over the TLS the cluster originates): each attempt's filter sets `:scheme`
/// from it, so no listener-wide `scheme_header_transformation` is needed.
pub const CLUSTER_SCHEME_KEY: &str = "scheme";

/// The proxy-wasm property path of a provider cluster's scheme.
pub fn cluster_scheme_path() -> [&'static str; 5] {
    ["xds", "cluster_metadata", "filter_metadata", METADATA_NAMESPACE, CLUSTER_SCHEME_KEY]
}

/// The proxy-wasm property path of the route mark.
pub fn route_mark_path() -> [&'static str; 5] {
    ["xds", "route_metadata", "filter_metadata", METADATA_NAMESPACE, ROUTE_MARK_KEY]
}

/// Whether the property read at `route_mark_path` (None when the route has no such key, or no
/// route matched) marks the request as Switchyard's.
pub fn is_marked(value: Option<&[u8]>) -> bool {
    value.is_some_and(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_non_empty_mark_counts() {
        assert!(is_marked(Some(b"llm")));
        assert!(is_marked(Some(b"anything")));
        assert!(!is_marked(Some(b"")));
        assert!(!is_marked(None));
    }

    #[test]
    fn the_path_is_the_route_metadata_key_in_the_switchyard_namespace() {
        assert_eq!(route_mark_path(), ["xds", "route_metadata", "filter_metadata", "switchyard", "route"]);
    }
}
