//! The only module that talks to the proxy-wasm host. It reads headers and the body, asks the
//! pure routing code for a decision, and applies it. Nothing here may panic: a panic aborts the
//! VM and fails every request on the worker.

use std::cell::Cell;
use std::rc::Rc;

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

use crate::config::Catalog;
use crate::decision::{candidates_json, decide, Decision};
use crate::errors::ApiError;
use crate::health::NoHealthData;
use crate::rewrite::with_provider_field;

/// Header the route's `cluster_header` reads; removed by the route before the request leaves.
const CLUSTER_HEADER: &str = "x-switchyard-cluster";
const DEBUG_HEADER: &str = "x-switchyard-debug";
/// Paths whose POST bodies are routed. Everything else passes through untouched.
const ROUTED_PATHS: [&str; 3] = ["/v1/chat/completions", "/v1/completions", "/v1/responses"];

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root { catalog: None }) });
}}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// xorshift64*, seeded once per VM from the host's randomness. Only used for load balancing.
fn random_unit() -> f64 {
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
    catalog: Option<Rc<Catalog>>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let Some(bytes) = self.get_plugin_configuration() else {
            log::error!("switchyard: invalid plugin configuration: <root>: configuration is empty");
            return false;
        };
        match Catalog::from_json(&bytes, &|name| std::env::var(name).ok()) {
            Ok(catalog) => {
                log::info!(
                    "switchyard: configured {} providers, {} models, {} endpoints",
                    catalog.providers.len(),
                    catalog.models.len(),
                    catalog.endpoints.len()
                );
                self.catalog = Some(Rc::new(catalog));
                true
            }
            Err(e) => {
                log::error!("switchyard: {e}");
                false
            }
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        let catalog = self.catalog.clone()?;
        Some(Box::new(Stream { catalog, routed: false, path: String::new(), debug: false, served: None, inject_provider: false }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Stream {
    catalog: Rc<Catalog>,
    /// This request's body is being routed by us.
    routed: bool,
    path: String,
    debug: bool,
    served: Option<Decision>,
    /// Non-streaming JSON response: add `"provider"` to the body.
    inject_provider: bool,
}

impl Stream {
    fn reject(&self, e: &ApiError) -> Action {
        let body = e.body();
        let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
        for (k, v) in &e.headers {
            headers.push((k.as_str(), v.as_str()));
        }
        self.send_http_response(e.status, headers, Some(body.as_bytes()));
        Action::Pause
    }

    fn apply(&mut self, d: Decision) {
        let up = &d.first;
        // Credentials: drop the caller's and any other provider's, then set this provider's.
        for h in &self.catalog.credential_headers {
            self.set_http_request_header(h, None);
        }
        if let Some((h, v)) = &up.credential {
            self.set_http_request_header(h, Some(v));
        }
        self.set_http_request_header(CLUSTER_HEADER, Some(&up.cluster));
        self.set_http_request_header(":authority", Some(&up.authority));
        if up.path != self.path {
            self.set_http_request_header(":path", Some(&up.path));
        }
        self.set_http_request_header("content-length", Some(&up.body.len().to_string()));
        self.set_http_request_body(0, usize::MAX, &up.body);
        if let Err(status) = hostcalls::call_foreign_function("clear_route_cache", Some(&[])) {
            log::warn!("switchyard: clear_route_cache failed: {status:?}");
        }
        self.served = Some(d);
    }
}

impl Context for Stream {}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let method = self.get_http_request_header(":method").unwrap_or_default();
        let path = self.get_http_request_header(":path").unwrap_or_default();
        let bare = path.split('?').next().unwrap_or("");
        if method != "POST" || !ROUTED_PATHS.contains(&bare) {
            return Action::Continue;
        }
        self.routed = true;
        self.path = path;
        // The caller cannot steer the cluster directly.
        self.set_http_request_header(CLUSTER_HEADER, None);
        if let Some(v) = self.get_http_request_header(DEBUG_HEADER) {
            self.debug = self.catalog.routing.debug_header && matches!(v.as_str(), "1" | "true" | "yes");
            self.set_http_request_header(DEBUG_HEADER, None);
        }
        let limit = self.catalog.routing.max_body_bytes;
        if let Some(len) = self.get_http_request_header("content-length").and_then(|v| v.parse::<u64>().ok()) {
            if len > limit {
                return self.reject(&ApiError::too_large(limit));
            }
        }
        if end_of_stream {
            return self.reject(&ApiError::invalid_json("request body is empty; expected a JSON object"));
        }
        // Wait for the whole body before routing (needs allow_on_headers_stop_iteration).
        Action::Pause
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !self.routed || self.served.is_some() {
            return Action::Continue;
        }
        let limit = self.catalog.routing.max_body_bytes;
        if body_size as u64 > limit {
            return self.reject(&ApiError::too_large(limit));
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let body = self.get_http_request_body(0, body_size).unwrap_or_default();
        let catalog = Rc::clone(&self.catalog);
        let bare_path = self.path.split('?').next().unwrap_or("").to_string();
        match decide(&catalog, &body, &bare_path, &NoHealthData, &mut random_unit) {
            Ok(mut d) => {
                // Keep the query string the caller sent.
                if let Some((_, q)) = self.path.split_once('?') {
                    d.first.path = format!("{}?{q}", d.first.path);
                }
                self.apply(d);
                Action::Continue
            }
            Err(e) => self.reject(&e),
        }
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let Some(d) = &self.served else { return Action::Continue };
        let (slug, model, strategy) = (d.first.slug.clone(), d.first.model.clone(), d.plan.strategy.clone());
        let candidates = self.debug.then(|| candidates_json(&self.catalog, &d.plan));
        let stream = d.stream;
        self.set_http_response_header("x-switchyard-provider", Some(&slug));
        self.set_http_response_header("x-switchyard-model", Some(&model));
        self.set_http_response_header("x-switchyard-strategy", Some(&strategy));
        self.set_http_response_header("x-switchyard-attempts", Some("1"));
        if let Some(c) = candidates {
            self.set_http_response_header("x-switchyard-candidates", Some(&c));
        }
        let json = self.get_http_response_header("content-type").map(|c| c.contains("application/json")).unwrap_or(false);
        let encoded = self.get_http_response_header("content-encoding").map(|e| e != "identity").unwrap_or(false);
        if !stream && json && !encoded {
            self.inject_provider = true;
            // The body grows; let Envoy frame it.
            self.set_http_response_header("content-length", None);
        }
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !self.inject_provider {
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let Some(d) = &self.served else { return Action::Continue };
        let slug = d.first.slug.clone();
        if let Some(body) = self.get_http_response_body(0, body_size) {
            if let Some(out) = with_provider_field(&body, &slug) {
                self.set_http_response_body(0, body_size, &out);
            }
        }
        Action::Continue
    }
}
