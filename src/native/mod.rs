//! The native adapter: the same filters as the proxy-wasm build (`crate::host`), as an Envoy
//! dynamic module (a shared library Envoy `dlopen`s; `make native`). Envoy's HTTP filter
//! `envoy.filters.http.dynamic_modules` names the role in `filter_name` (`switchyard`,
//! `switchyard_upstream`, `switchyard_first`, as the Wasm plugin's `root_id`) and passes the
//! plugin configuration JSON as `filter_config`.
//!
//! - `abi`: the ABI's types and callbacks, declared from Envoy's header (layout-tested)
//! - `hooks` (feature `native`): the exported event hooks, each under `catch_unwind`
//! - `host` (feature `native`): `filters::host::Host` over the callbacks
//! - `shared`: state shared by the workers, in process memory; `metrics`: the stats families
//! - `grpc`: the rate limit service's unary calls over the ABI's HTTP callout; `answers`
//!   (feature `native`): what a callout brought back

pub mod abi;
#[cfg(feature = "native")]
mod answers;
pub mod grpc;
#[cfg(feature = "native")]
mod hooks;
#[cfg(feature = "native")]
mod host;
pub mod metrics;
pub mod shared;

/// The filter-state key of a one-segment property: the key Envoy's Wasm host uses (`wasm.`),
/// so the generated route's filter-state matcher and the access-log formats are the same.
pub fn state_key(name: &str) -> String {
    // Built by hand: every filter-state read and write names its key (no formatting machinery).
    const PREFIX: &str = "wasm.";
    let mut key = String::with_capacity(PREFIX.len() + name.len());
    key.push_str(PREFIX);
    key.push_str(name);
    key
}

#[cfg(test)]
mod tests {
    #[test]
    fn properties_live_under_the_wasm_prefix() {
        assert_eq!(super::state_key("switchyard_plan"), "wasm.switchyard_plan");
    }
}
