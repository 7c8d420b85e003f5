//! The two filters Switchyard runs in Envoy, written against the `Host` seam so their logic is
//! tested natively (`mock`) and the proxy-wasm adapter (`crate::host`) stays a thin layer. One
//! module serves both roles, chosen by the plugin's `root_id`; they share one `vm_id`, so they
//! share the VM's shared data:
//!
//! - `downstream` (`switchyard`, an HTTP filter before the router): parse the body once, plan
//!   the ranked endpoints, hand the order to Envoy's retry policy, shape the response.
//! - `upstream` (`switchyard_upstream`, an upstream HTTP filter on each provider cluster):
//!   rewrite each attempt for its provider and record its outcome.
//! - `first` (`switchyard_first`, on each first-attempt cluster instead): the first attempt the
//!   decision filter prepared, with nothing internal sent and its failure noted.
//!
//! Nothing here may panic: a panic aborts the VM and fails every request on the worker.

mod attempts;
#[cfg(test)]
mod bedrock_tests;
mod caller;
#[cfg(test)]
mod converse_tests;
pub mod downstream;
pub mod fast_hash;
pub mod first;
pub mod gauges;
pub mod host;
pub(crate) mod internals;
#[cfg(test)]
mod key_file_tests;
#[cfg(test)]
mod kind_test_kit;
#[cfg(test)]
mod lease_tests;
pub mod mesh;
#[cfg(test)]
pub mod mock;
pub mod shared;
#[cfg(test)]
mod surface_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod token_tests;
pub mod tokens;
pub mod upstream;
mod usage;
#[cfg(test)]
mod vertex_tests;

use crate::answer::errors::ApiError;
use crate::config::Catalog;
use crate::limits::MeshLimits;
use crate::protocol::plan::fingerprint;
use crate::routing::policy::Policies;
use crate::routing::presets::Presets;
use crate::telemetry::Telemetry;
use host::{Action, Host};

/// The configured catalog plus its fingerprint (plans carry it so an upstream filter never
/// applies a plan made against another configuration).
pub struct Configured {
    pub catalog: Catalog,
    /// Operator policies (compliance routes) and how callers are matched to them.
    pub policies: Policies,
    /// Mesh-wide limits through the rate limit service (empty: no call is ever made).
    pub limits: MeshLimits,
    /// Named routing settings callers use as `@preset/<name>`.
    pub presets: Presets,
    /// The usage metrics' caller label and the per-request attributes for spans and logs.
    pub telemetry: Telemetry,
    pub id: u64,
}

impl Configured {
    /// What a host logs once a configuration is in place (the same line on both builds).
    pub fn summary(&self) -> String {
        format!(
            "configured {} providers, {} models, {} endpoints, {} policies",
            self.catalog.providers.len(),
            self.catalog.models.len(),
            self.catalog.endpoints.len(),
            self.policies.list.len()
        )
    }
}

/// Which filter a plugin instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Downstream,
    Upstream,
    /// Needs no configuration (see `first`).
    FirstAttempt,
}

/// The role of a plugin `root_id`. An error for a root id that no longer exists: the
/// route-cache-clearing role of the removed priority_group wiring (a configuration that still
/// names it would otherwise get a second decision filter).
pub fn role_of(root_id: &str) -> Result<Role, String> {
    match root_id {
        crate::wiring::ATTEMPT_ROOT_ID => Ok(Role::Upstream),
        crate::wiring::FIRST_ATTEMPT_ROOT_ID => Ok(Role::FirstAttempt),
        "switchyard_clear" => {
            Err("root_id switchyard_clear: removed with the priority_group wiring; remove this filter".to_string())
        }
        _ => Ok(Role::Downstream),
    }
}

/// Compiles the plugin configuration (catalog and policies); the error names the field.
pub fn configure(bytes: &[u8], env: &dyn Fn(&str) -> Option<String>) -> Result<Configured, String> {
    let catalog = Catalog::from_json(bytes, env).map_err(|e| e.to_string())?;
    let policies = Policies::from_json(bytes, &catalog).map_err(|e| e.to_string())?;
    let limits = MeshLimits::from_json(bytes, &catalog, &policies).map_err(|e| e.to_string())?;
    let presets = Presets::from_json(bytes, &catalog).map_err(|e| e.to_string())?;
    let telemetry = Telemetry::from_json(bytes).map_err(|e| e.to_string())?;
    Ok(Configured { catalog, policies, limits, presets, telemetry, id: fingerprint(bytes) })
}

/// The HTTP callbacks of a filter, as the adapter delivers them. Defaults: nothing to do.
pub trait Filter {
    fn on_request_headers(&mut self, _end_of_stream: bool) -> Action {
        Action::Continue
    }
    fn on_request_body(&mut self, _body_size: usize, _end_of_stream: bool) -> Action {
        Action::Continue
    }
    fn on_request_trailers(&mut self) -> Action {
        Action::Continue
    }
    fn on_response_headers(&mut self, _end_of_stream: bool) -> Action {
        Action::Continue
    }
    fn on_response_body(&mut self, _body_size: usize, _end_of_stream: bool) -> Action {
        Action::Continue
    }
    /// The access-log callback (downstream filters only: Envoy runs none for upstream ones).
    fn on_log(&mut self) {}
    /// The stream ended (also after a connect failure, reset or timeout).
    fn on_done(&mut self) {}
    /// The answer to a `grpc_call` this filter made: `status` 0 is OK (gRPC status codes
    /// otherwise, 14 unavailable, 4 deadline exceeded), `size` the message's.
    fn on_grpc_response(&mut self, _token: u32, _status: u32, _size: usize) {}
}

/// A context created without a valid configuration (Envoy normally refuses such a filter):
/// answers every request with a JSON 503 instead of letting it through unrouted.
pub struct Unconfigured<H: Host> {
    pub host: H,
}

impl<H: Host> Filter for Unconfigured<H> {
    fn on_request_headers(&mut self, _end_of_stream: bool) -> Action {
        let path = self.host.req_header(":path").unwrap_or_default();
        let body = ApiError::new(
            503,
            "server_error",
            "not_configured",
            "Switchyard has no valid configuration on this worker",
        )
        .for_api(crate::api::Api::of_path(&path))
        .body();
        self.host.reply(503, &[("content-type", "application/json")], body.as_bytes());
        Action::Pause
    }
}
