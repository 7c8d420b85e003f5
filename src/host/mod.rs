//! The proxy-wasm adapter: the only code that talks to the host. One Wasm module serves two
//! roles, chosen by the plugin's `root_id` (both share one `vm_id`, so they share the VM's
//! shared data):
//!
//! - `switchyard` (downstream HTTP filter): parse the body once, plan the ranked endpoints,
//!   hand the order to Envoy's retry policy, shape the response.
//! - `switchyard_upstream` (upstream HTTP filter on each provider cluster): rewrite each attempt
//!   for its provider and record its outcome.
//!
//! Nothing here may panic: a panic aborts the VM and fails every request on the worker.

mod api;
mod attempts;
mod caller;
mod downstream;
#[cfg(feature = "profile")]
mod profile;
mod shared;
mod upstream;

use std::cell::Cell;
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

use crate::config::Catalog;
use crate::failover::fingerprint;
use crate::policy::Policies;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root { role: Role::Downstream, config: None }) });
}}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// xorshift64*, seeded once per VM from the host's randomness. Only used for load balancing.
pub fn random_unit() -> f64 {
    RNG.with(|cell| {
        let mut x = cell.get();
        if x == 0 {
            let mut seed = [0u8; 8];
            if getrandom::getrandom(&mut seed).is_err() {
                seed = 0x9E37_79B9_7F4A_7C15u64.to_le_bytes();
            }
            x = u64::from_le_bytes(seed) | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        cell.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Downstream,
    Upstream,
}

/// The configured catalog plus its fingerprint (plans carry it so an upstream filter never
/// applies a plan made against another configuration).
pub struct Configured {
    pub catalog: Catalog,
    /// Operator policies (compliance routes) and how callers are matched to them.
    pub policies: Policies,
    pub id: u64,
}

struct Root {
    role: Role,
    config: Option<Rc<Configured>>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let root_id = api::property(vec!["plugin_root_id"]).and_then(|b| String::from_utf8(b).ok()).unwrap_or_default();
        self.role = match root_id.as_str() {
            "switchyard_upstream" => Role::Upstream,
            // The route-cache-clearing role of the priority_group wiring: a configuration that
            // still names it would otherwise get a second decision filter.
            "switchyard_clear" => {
                log::error!(
                    "switchyard: root_id switchyard_clear: removed with the priority_group wiring; remove this filter"
                );
                return false;
            }
            _ => Role::Downstream,
        };
        let Some(bytes) = api::plugin_configuration() else {
            log::error!("switchyard: invalid plugin configuration: <root>: configuration is empty");
            return false;
        };
        let loaded = Catalog::from_json(&bytes, &|name| std::env::var(name).ok())
            .and_then(|catalog| Policies::from_json(&bytes, &catalog).map(|policies| (catalog, policies)));
        match loaded {
            Ok((catalog, policies)) => {
                log::info!(
                    "switchyard ({root_id}): configured {} providers, {} models, {} endpoints, {} policies",
                    catalog.providers.len(),
                    catalog.models.len(),
                    catalog.endpoints.len(),
                    policies.list.len()
                );
                if self.role == Role::Downstream {
                    shared::prune_stale_keys(&catalog);
                }
                self.config = Some(Rc::new(Configured { catalog, policies, id: fingerprint(&bytes) }));
                true
            }
            Err(e) => {
                log::error!("switchyard: {e}");
                false
            }
        }
    }

    // Never None: the SDK's dispatcher panics (and the VM aborts) when no context is returned.
    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        let config = self.config.as_ref().map(Rc::clone);
        Some(match (self.role, config) {
            #[cfg(feature = "profile")]
            (Role::Downstream, Some(c)) => Box::new(profile::Timed { inner: downstream::Stream::new(c), role: 0 }),
            #[cfg(feature = "profile")]
            (Role::Upstream, Some(c)) => Box::new(profile::Timed { inner: upstream::Attempt::new(c), role: 1 }),
            #[cfg(not(feature = "profile"))]
            (Role::Downstream, Some(c)) => Box::new(downstream::Stream::new(c)),
            #[cfg(not(feature = "profile"))]
            (Role::Upstream, Some(c)) => Box::new(upstream::Attempt::new(c)),
            (_, None) => Box::new(Unconfigured),
        })
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// A context created without a valid configuration (Envoy normally refuses such a filter):
/// answers every request with a JSON 503 instead of letting it through unrouted.
struct Unconfigured;

impl Context for Unconfigured {}

impl HttpContext for Unconfigured {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let path = api::req_header(":path").unwrap_or_default();
        let body = crate::errors::ApiError::new(
            503,
            "server_error",
            "not_configured",
            "Switchyard has no valid configuration on this worker",
        )
        .for_api(crate::api::Api::of_path(&path))
        .body();
        api::reply(503, vec![("content-type", "application/json")], body.as_bytes());
        Action::Pause
    }
}
