//! Measurement only (`--features profile`): the time spent inside each HTTP callback of each
//! role, and the time and count of each kind of host call per request, logged (warn) every
//! 10,000 contexts. Wall-clock, so only the proportions mean something on a shared machine.
//! Never in a release build.

use std::cell::RefCell;

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

const SLOTS: usize = 8;
const NAMES: [&str; SLOTS] =
    ["req_headers", "req_body", "req_trailers", "resp_headers", "resp_body", "log", "done", "calls"];

thread_local! {
    static HOST: RefCell<Vec<(&'static str, u64, u64)>> = const { RefCell::new(Vec::new()) };
    static ACC: RefCell<[[u64; SLOTS]; 3]> = const { RefCell::new([[0; SLOTS]; 3]) };
    static COUNT: RefCell<[u64; 3]> = const { RefCell::new([0; 3]) };
}

/// One host call of kind `name` took `ns`.
pub fn host_call(name: &'static str, ns: u64) {
    HOST.with(|h| {
        let mut h = h.borrow_mut();
        if let Some(e) = h.iter_mut().find(|e| e.0 == name) {
            e.1 += ns;
            e.2 += 1;
        } else {
            h.push((name, ns, 1));
        }
    });
}

/// Times a section of code, reported with the host calls (the filters call it through
/// `filters::host::span`, which is only `f()` outside this build).
pub fn span<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    let t0 = now_ns();
    let r = f();
    host_call(name, now_ns().saturating_sub(t0));
    r
}

pub struct Timed<T> {
    pub inner: T,
    pub role: usize,
}

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_get_current_time_nanoseconds(time: *mut u64) -> u32;
}

/// The host's clock in nanoseconds (0 if it cannot tell).
pub fn now_ns() -> u64 {
    let mut ns: u64 = 0;
    // SAFETY: `ns` outlives the call.
    unsafe { proxy_get_current_time_nanoseconds(&mut ns) };
    ns
}

impl<T> Timed<T> {
    fn time<R>(&mut self, slot: usize, f: impl FnOnce(&mut T) -> R) -> R {
        let t0 = now_ns();
        let r = f(&mut self.inner);
        let dt = now_ns().saturating_sub(t0);
        let role = self.role;
        ACC.with(|a| {
            let mut a = a.borrow_mut();
            if let Some(row) = a.get_mut(role) {
                if let Some(s) = row.get_mut(slot) {
                    *s += dt;
                }
                if let Some(s) = row.get_mut(7) {
                    *s += 1;
                }
            }
        });
        r
    }
}

impl<T: Context> Context for Timed<T> {
    fn on_grpc_call_response(&mut self, token_id: u32, status_code: u32, response_size: usize) {
        self.inner.on_grpc_call_response(token_id, status_code, response_size)
    }
    fn on_done(&mut self) -> bool {
        let r = self.time(6, |i| i.on_done());
        let role = self.role;
        let n = COUNT.with(|c| {
            let mut c = c.borrow_mut();
            c.get_mut(role).map(|x| {
                *x += 1;
                *x
            })
        });
        if n.is_some_and(|n| n % 10_000 == 0) {
            ACC.with(|a| {
                let a = a.borrow();
                if let Some(row) = a.get(role) {
                    let per: Vec<String> = NAMES
                        .iter()
                        .zip(row.iter())
                        .map(|(name, v)| {
                            format!("{name}={:.2}", *v as f64 / 10_000.0 / if *name == "calls" { 1.0 } else { 1000.0 })
                        })
                        .collect();
                    log::warn!("profile role {role}: per context (us): {}", per.join(" "));
                }
            });
            if role == 0 {
                HOST.with(|h| {
                    let mut h = h.borrow_mut();
                    let per: Vec<String> = h
                        .iter()
                        .map(|(n, ns, c)| format!("{n}={:.2}us/{:.1}", *ns as f64 / 10_000_000.0, *c as f64 / 10_000.0))
                        .collect();
                    log::warn!("profile host calls per request (both roles): {}", per.join(" "));
                    h.clear();
                });
            }
            ACC.with(|a| {
                if let Some(row) = a.borrow_mut().get_mut(role) {
                    *row = [0; SLOTS];
                }
            });
        }
        r
    }
}

impl<T: HttpContext> HttpContext for Timed<T> {
    fn on_http_request_headers(&mut self, n: usize, eos: bool) -> Action {
        self.time(0, |i| i.on_http_request_headers(n, eos))
    }
    fn on_http_request_body(&mut self, n: usize, eos: bool) -> Action {
        self.time(1, |i| i.on_http_request_body(n, eos))
    }
    fn on_http_request_trailers(&mut self, n: usize) -> Action {
        self.time(2, |i| i.on_http_request_trailers(n))
    }
    fn on_http_response_headers(&mut self, n: usize, eos: bool) -> Action {
        self.time(3, |i| i.on_http_response_headers(n, eos))
    }
    fn on_http_response_body(&mut self, n: usize, eos: bool) -> Action {
        self.time(4, |i| i.on_http_response_body(n, eos))
    }
    fn on_log(&mut self) {
        self.time(5, |i| i.on_log())
    }
}
