//! The proxy-wasm adapter (Wasm only): the only code that talks to Envoy. It creates the root
//! context, hands the plugin configuration to `filters::configure`, and delivers each HTTP
//! callback to the filter of the plugin's role, with `abi::ProxyWasm` as its `Host`. The
//! filters' logic lives in `crate::filters` and is tested natively against a mock host.
//!
//! Nothing here may panic: a panic aborts the VM and fails every request on the worker.

mod abi;
#[cfg(feature = "profile")]
pub(crate) mod profile;

use std::cell::Cell;
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

use crate::filters::gauges;
use crate::filters::mesh::Ticker;
use crate::filters::shared::prune_stale_keys;
use crate::filters::tokens::TokenFetcher;
use crate::filters::{configure, downstream, first, host, role_of, upstream, Configured, Filter, Role, Unconfigured};
use crate::tokens::MAX_ANSWER_BYTES;
use abi::ProxyWasm;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|context_id| -> Box<dyn RootContext> {
        abi::set_root_context(context_id); Box::new(Root { role: Role::Downstream, config: None, ticker: Ticker::default(), tokens: TokenFetcher::default(), gauges_ms: 0 }) });
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

struct Root {
    role: Role,
    config: Option<Rc<Configured>>,
    /// Sends the worker's queued mesh-wide charges and polls shared cool-downs.
    ticker: Ticker,
    /// Keeps the providers' access tokens fresh in shared data (`credential.google_metadata`).
    tokens: TokenFetcher,
    /// When the health gauges were last published (ms).
    gauges_ms: u64,
}

/// How often queued charges go to the rate limit service (and cool-downs are polled): the
/// delay a mesh-wide cap or cool-down takes to reach the other pods, at most.
const TICK_MS: u32 = 100;
/// The tick without mesh-wide limits: the health gauges' interval.
const GAUGE_TICK_MS: u32 = gauges::GAUGE_INTERVAL_MS as u32;

impl Context for Root {
    fn on_grpc_call_response(&mut self, token_id: u32, status_code: u32, response_size: usize) {
        if let Some(config) = &self.config {
            self.ticker.answered(&ProxyWasm, config, token_id, status_code, response_size, abi::now_ms());
        }
    }

    fn on_http_call_response(&mut self, token_id: u32, _num_headers: usize, body_size: usize, _num_trailers: usize) {
        // Stored for the source that asked, whatever the configuration is now.
        let (status, body) = abi::http_call_answer(body_size, MAX_ANSWER_BYTES);
        self.tokens.answered(&ProxyWasm, token_id, status, &body, abi::now_ms());
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let root_id = abi::property(&["plugin_root_id"]).and_then(|b| String::from_utf8(b).ok()).unwrap_or_default();
        self.role = match role_of(&root_id) {
            Ok(role) => role,
            Err(e) => {
                log::error!("switchyard: {e}");
                return false;
            }
        };
        if self.role == Role::FirstAttempt {
            // Configuration-free: the decision filter prepared the attempt.
            return true;
        }
        let Some(bytes) = abi::plugin_configuration() else {
            log::error!("switchyard: invalid plugin configuration: <root>: configuration is empty");
            return false;
        };
        match configure(&bytes, &|name| std::env::var(name).ok()) {
            Ok(configured) => {
                log::info!("switchyard ({root_id}): {}", configured.summary());
                if self.role == Role::Downstream {
                    prune_stale_keys(&ProxyWasm, &configured.catalog);
                    // The mesh-wide charges and the access tokens need the short tick; the health
                    // gauges the long one.
                    let short = configured.limits.service.is_some() || !configured.catalog.token_sources.is_empty();
                    let tick = if short { TICK_MS } else { GAUGE_TICK_MS };
                    abi::set_tick_period_ms(tick);
                }
                self.config = Some(Rc::new(configured));
                true
            }
            Err(e) => {
                log::error!("switchyard: {e}");
                false
            }
        }
    }

    // Never None: the SDK's dispatcher panics (and the VM aborts) when no context is returned.
    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        let config = self.config.as_ref().map(Rc::clone);
        Some(match (self.role, config) {
            (Role::Downstream, Some(c)) => {
                boxed(Adapter { filter: downstream::Stream::new(ProxyWasm, c), id: context_id }, 0)
            }
            (Role::Upstream, Some(c)) => {
                boxed(Adapter { filter: upstream::Attempt::new(ProxyWasm, c), id: context_id }, 1)
            }
            (Role::FirstAttempt, _) => {
                boxed(Adapter { filter: first::FirstAttempt::new(ProxyWasm), id: context_id }, 1)
            }
            (_, None) => boxed(Adapter { filter: Unconfigured { host: ProxyWasm }, id: context_id }, 0),
        })
    }

    fn on_tick(&mut self) {
        if let Some(config) = &self.config {
            let now = abi::now_ms();
            self.ticker.tick(&ProxyWasm, config, now);
            self.tokens.tick(&ProxyWasm, &config.catalog, now);
            if now.saturating_sub(self.gauges_ms) >= gauges::GAUGE_INTERVAL_MS {
                self.gauges_ms = now;
                gauges::publish(&ProxyWasm, config, now);
            }
        }
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

#[cfg(not(feature = "profile"))]
fn boxed<F: Filter + 'static>(filter: Adapter<F>, _role: usize) -> Box<dyn HttpContext> {
    Box::new(filter)
}

#[cfg(feature = "profile")]
fn boxed<F: Filter + 'static>(filter: Adapter<F>, role: usize) -> Box<dyn HttpContext> {
    Box::new(profile::Timed { inner: filter, role })
}

/// Delivers the SDK's callbacks to a filter.
struct Adapter<F> {
    filter: F,
    /// The stream's context id (a detached call hands the effective context back to it).
    id: u32,
}

fn action(a: host::Action) -> Action {
    match a {
        host::Action::Continue => Action::Continue,
        host::Action::Pause => Action::Pause,
    }
}

impl<F: Filter> Context for Adapter<F> {
    fn on_done(&mut self) -> bool {
        self.filter.on_done();
        true
    }
    fn on_grpc_call_response(&mut self, token_id: u32, status_code: u32, response_size: usize) {
        self.filter.on_grpc_response(token_id, status_code, response_size)
    }
}

impl<F: Filter> HttpContext for Adapter<F> {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        action(self.filter.on_request_headers(end_of_stream))
    }
    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        action(self.filter.on_request_body(body_size, end_of_stream))
    }
    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        action(self.filter.on_request_trailers())
    }
    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        action(self.filter.on_response_headers(end_of_stream))
    }
    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        // The answer's end settles the mesh-wide limits (a detached call).
        abi::set_current_context(self.id);
        action(self.filter.on_response_body(body_size, end_of_stream))
    }
    fn on_log(&mut self) {
        abi::set_current_context(self.id);
        self.filter.on_log()
    }
}
