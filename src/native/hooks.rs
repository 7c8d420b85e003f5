//! The event hooks Envoy calls (`envoy_dynamic_module_on_*`): configure, create a filter of the
//! configuration's role, deliver each HTTP event to it with `Native` as its host, and tick. The
//! filters' logic lives in `crate::filters`; this is the proxy-wasm adapter's counterpart.
//!
//! No panic crosses into Envoy: every hook runs its body under `catch_unwind` (`guard`). A hook
//! that panicked answers the request in its API's shape (the decision filter: a JSON 500; an
//! attempt's filter: a 500 that fails that attempt, which the retry policy moves past) while the
//! response has not started, counts `switchyard_native_panics_total{hook}`, and the filter does
//! nothing more for that stream. The library is built with `panic = "unwind"` (`make native`).

use crate::filters::fast_hash::FastMap;
use std::cell::RefCell;
use std::os::raw::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::abi::*;
use super::answers::{answer_of, http_answer_of};
use super::host::{now_ms, Native};
use super::{metrics, shared};
use crate::answer::errors::ApiError;
use crate::api::Api;
use crate::filters::gauges;
use crate::filters::host::{self, Host, MetricKind};
use crate::filters::mesh::Ticker;
use crate::filters::shared::{count, prune_stale_keys};
use crate::filters::tokens::TokenFetcher;
use crate::filters::{configure, downstream, first, role_of, upstream, Configured, Filter, Role, Unconfigured};
use crate::limits::Subject;
use crate::routing::policy::Matcher;
use crate::wiring;

/// How often the main thread's tick runs with mesh-wide limits (queued charges, cool-down
/// polls, detached settlements), and without (the health gauges).
const TICK_MS: u64 = 100;
const GAUGE_TICK_MS: u64 = gauges::GAUGE_INTERVAL_MS;
/// The scheduler event of the timer (a stream's wake-up for its queued calls is another).
const TIMER_EVENT: u64 = 0;

// ---------------------------------------------------------------------------------------------
// Logging: the `log` crate into Envoy's log (component `dynamic_modules`)
// ---------------------------------------------------------------------------------------------

struct EnvoyLog;

fn level_of(l: log::Level) -> LogLevel {
    match l {
        log::Level::Error => LOG_ERROR,
        log::Level::Warn => LOG_WARN,
        log::Level::Info => LOG_INFO,
        log::Level::Debug => LOG_DEBUG,
        log::Level::Trace => LOG_TRACE,
    }
}

impl log::Log for EnvoyLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        // SAFETY: a plain query without pointers.
        unsafe { envoy_dynamic_module_callback_log_enabled(level_of(m.level())) }
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            let msg = r.args().to_string();
            // SAFETY: `msg` lives for the call; Envoy copies it.
            unsafe { envoy_dynamic_module_callback_log(level_of(r.level()), ModuleBuffer::of(msg.as_bytes())) }
        }
    }
    fn flush(&self) {}
}

static LOGGER: EnvoyLog = EnvoyLog;

/// Runs `f`, catching a panic (None then: the caller answers for the hook).
fn guard<R>(hook: &'static str, f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(e) => {
            let why = e.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| e.downcast_ref::<String>().cloned());
            log::error!("switchyard: panic in {hook}: {}", why.unwrap_or_default());
            None
        }
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    let _ = guard("program_init", || {
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(log::LevelFilter::Info);
        }
    });
    ABI_VERSION.as_ptr().cast()
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// The main thread's part of a decision filter's configuration: the tick.
struct Main {
    config: Rc<Configured>,
    host: Native,
    ticker: Ticker,
    /// Keeps the providers' access tokens fresh in the shared store (one fetch for all workers).
    tokens: TokenFetcher,
    gauges_ms: u64,
}

struct Timer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    scheduler: usize,
}

/// One filter configuration (`envoy_dynamic_module_on_http_filter_config_new`): read by every
/// worker (role, bytes, fingerprint), its `main` and `timer` touched only on the main thread.
struct ModuleConfig {
    role: Role,
    envoy: ConfigEnvoyPtr,
    /// The plugin configuration and its fingerprint (workers compile their own copy once).
    bytes: Vec<u8>,
    id: u64,
    main: RefCell<Option<Main>>,
    timer: RefCell<Option<Timer>>,
}

/// Reads the buffer Envoy passes for the duration of a hook.
pub(super) fn envoy_bytes(b: EnvoyBuffer) -> Vec<u8> {
    if b.ptr.is_null() {
        return Vec::new();
    }
    // SAFETY: Envoy passes `length` readable bytes for the duration of the hook.
    unsafe { std::slice::from_raw_parts(b.ptr, b.length) }.to_vec()
}

fn define_metrics(envoy: ConfigEnvoyPtr) {
    for (index, family) in metrics::to_define() {
        let full = format!("{}.{}", metrics::NAMESPACE, family.name);
        let labels: Vec<ModuleBuffer> = family.labels.iter().map(|l| ModuleBuffer::of(l.as_bytes())).collect();
        let mut id: usize = 0;
        // SAFETY: `envoy` is the configuration being created (definition is allowed now); the
        // name and label buffers live for the call.
        let status = unsafe {
            let define = match family.kind {
                MetricKind::Counter => envoy_dynamic_module_callback_http_filter_config_define_counter,
                MetricKind::Gauge => envoy_dynamic_module_callback_http_filter_config_define_gauge,
                MetricKind::Histogram => envoy_dynamic_module_callback_http_filter_config_define_histogram,
            };
            define(envoy, ModuleBuffer::of(full.as_bytes()), labels.as_ptr(), labels.len(), &mut id)
        };
        if status == METRICS_SUCCESS {
            metrics::defined(index, id);
        } else {
            log::warn!("switchyard: defining metric {full} failed (status {status})");
        }
    }
}

fn config_new(envoy: ConfigEnvoyPtr, name: &[u8], bytes: Vec<u8>) -> Option<Box<ModuleConfig>> {
    let name = String::from_utf8_lossy(name).into_owned();
    let role = match role_of(&name) {
        Ok(r) => r,
        Err(e) => {
            log::error!("switchyard: {e}");
            return None;
        }
    };
    define_metrics(envoy);
    let mut config = ModuleConfig { role, envoy, bytes, id: 0, main: RefCell::new(None), timer: RefCell::new(None) };
    if role == Role::FirstAttempt {
        // Configuration-free: the decision filter prepared the attempt.
        return Some(Box::new(config));
    }
    let configured = match configure(&config.bytes, &|n| std::env::var(n).ok()) {
        Ok(c) => c,
        Err(e) => {
            log::error!("switchyard: invalid plugin configuration: {e}");
            return None;
        }
    };
    if let Some(what) = unreadable_here(&configured) {
        // Failing closed: a request would otherwise get the default policy or an uncharged
        // subject where the Wasm build would match the caller's claim.
        log::error!(
            "switchyard: invalid plugin configuration for the native build: {what} reads a JWT claim \
             (nested dynamic metadata), which Envoy's dynamic-module ABI cannot read; use the Wasm build"
        );
        return None;
    }
    log::info!("switchyard ({name}, native): {}", configured.summary());
    config.id = configured.id;
    if role == Role::Downstream {
        let host = Native::new(std::ptr::null_mut(), envoy);
        prune_stale_keys(&host, &configured.catalog);
        let short = configured.limits.service.is_some() || !configured.catalog.token_sources.is_empty();
        let period = if short { TICK_MS } else { GAUGE_TICK_MS };
        *config.main.borrow_mut() = Some(Main {
            config: Rc::new(configured),
            host,
            ticker: Ticker::default(),
            tokens: TokenFetcher::default(),
            gauges_ms: 0,
        });
        *config.timer.borrow_mut() = start_timer(envoy, period);
        metrics::add_root(envoy as usize);
    }
    Some(Box::new(config))
}

/// What in a configuration the native host cannot read: JWT claims are nested in dynamic
/// metadata (`jwt_payload.<claim>`), and the ABI reads only a namespace's top-level strings.
fn unreadable_here(c: &Configured) -> Option<String> {
    let rule = c.policies.rules.iter().position(|r| matches!(r.matcher, Matcher::JwtClaim { .. }));
    if let Some(i) = rule {
        return Some(format!("policy_selection.rules[{i}]"));
    }
    let limit = c.limits.limits.iter().find(|l| matches!(l.per, Subject::JwtClaim { .. }))?;
    Some(format!("rate limit {}", limit.name))
}

/// The per-worker tick proxy-wasm offers has no equivalent in the ABI: a module thread commits
/// an event to the configuration's scheduler every `period_ms`, and Envoy runs the tick on its
/// main thread (`on_http_filter_config_scheduled`) for every worker at once.
fn start_timer(envoy: ConfigEnvoyPtr, period_ms: u64) -> Option<Timer> {
    // SAFETY: `envoy` is the live configuration; the scheduler is deleted in `config_destroy`
    // after the thread that commits to it has stopped.
    let scheduler = unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_new(envoy) };
    if scheduler.is_null() {
        log::warn!("switchyard: no configuration scheduler: no tick");
        return None;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, addr) = (Arc::clone(&stop), scheduler as usize);
    let thread = std::thread::Builder::new()
        .name("switchyard-tick".into())
        .spawn(move || {
            while !flag.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(period_ms));
                if !flag.load(Ordering::Acquire) {
                    // SAFETY: committing is safe from any thread; the scheduler outlives this thread.
                    unsafe {
                        envoy_dynamic_module_callback_http_filter_config_scheduler_commit(addr as ConfigSchedulerPtr, 0)
                    }
                }
            }
        })
        .ok();
    shared::add_waker(addr);
    Some(Timer { stop, thread, scheduler: addr })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    envoy: ConfigEnvoyPtr,
    name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> ConfigModulePtr {
    let made = guard("config_new", || config_new(envoy, &envoy_bytes(name), envoy_bytes(config)));
    match made.flatten() {
        Some(b) => Box::into_raw(b) as ConfigModulePtr,
        None => std::ptr::null(),
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: ConfigModulePtr) {
    if config.is_null() {
        return;
    }
    let _ = guard("config_destroy", || {
        // SAFETY: Envoy hands back the pointer `config_new` leaked, once, on the main thread.
        let config = unsafe { Box::from_raw(config as *mut ModuleConfig) };
        metrics::remove_root(config.envoy as usize);
        if config.role == Role::Downstream {
            log::info!("switchyard (native): a decision filter configuration was removed");
        }
        let timer = config.timer.borrow_mut().take();
        if let Some(mut t) = timer {
            t.stop.store(true, Ordering::Release);
            shared::remove_waker(t.scheduler);
            if let Some(th) = t.thread.take() {
                let _ = th.join();
            }
            // SAFETY: the only thread committing to it has stopped.
            unsafe {
                envoy_dynamic_module_callback_http_filter_config_scheduler_delete(t.scheduler as ConfigSchedulerPtr)
            }
        }
    });
}

/// The main thread's tick: queued charges and cool-down polls (`Ticker`), the calls streams
/// left behind (settlements; a stream that queues one wakes this at once), the health gauges.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    _envoy: ConfigEnvoyPtr,
    config: ConfigModulePtr,
    event: u64,
) {
    if config.is_null() {
        return;
    }
    let _ = guard("tick", || {
        // SAFETY: a live configuration; `main` is only touched on the main thread.
        let config = unsafe { &*(config as *const ModuleConfig) };
        let mut main = config.main.borrow_mut();
        let Some(m) = main.as_mut() else { return };
        let now = now_ms();
        for d in shared::take_detached() {
            if !m.host.send_detached(&d) {
                count(&m.host, &crate::filters::mesh::failure_metric("settlement"));
            }
        }
        if event != TIMER_EVENT {
            // A stream's wake-up: only its queued calls.
            return;
        }
        m.ticker.tick(&m.host, &m.config, now);
        m.tokens.tick(&m.host, &m.config.catalog, now);
        if now.saturating_sub(m.gauges_ms) >= gauges::GAUGE_INTERVAL_MS {
            m.gauges_ms = now;
            gauges::publish(&m.host, &m.config, now);
        }
    });
}

/// The answer to one of the tick's calls (detached calls' answers are nobody's).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _envoy: ConfigEnvoyPtr,
    config: ConfigModulePtr,
    callout_id: u64,
    result: CalloutResult,
    headers: *const EnvoyHttpHeader,
    headers_size: usize,
    body: *const EnvoyBuffer,
    body_size: usize,
) {
    if config.is_null() {
        return;
    }
    let _ = guard("tick_answer", || {
        // SAFETY: as above.
        let config = unsafe { &*(config as *const ModuleConfig) };
        let mut main = config.main.borrow_mut();
        let Some(m) = main.as_mut() else { return };
        let Some(token) = m.host.token_of(callout_id) else { return };
        if m.tokens.owns(token) {
            let (status, answer) = http_answer_of(result, headers, headers_size, body, body_size);
            m.tokens.answered(&m.host, token, status, &answer, now_ms());
            return;
        }
        let (status, message) = answer_of(result, headers, headers_size, body, body_size);
        let size = message.len();
        *m.host.io.grpc_answer.borrow_mut() = message;
        m.ticker.answered(&m.host, &m.config, token, status, size, now_ms());
    });
}

// ---------------------------------------------------------------------------------------------
// Filters
// ---------------------------------------------------------------------------------------------

thread_local! {
    /// Each worker's compiled configurations by fingerprint (the decision filter and every
    /// cluster's per-attempt filter share one): compiled on the worker's first stream.
    static COMPILED: RefCell<FastMap<u64, Rc<Configured>>> = RefCell::new(FastMap::default());
}

/// Configurations kept per worker before the cache starts over (hot reloads).
const MAX_COMPILED: usize = 8;

fn compiled(config: &ModuleConfig) -> Option<Rc<Configured>> {
    if let Some(c) = COMPILED.with(|m| m.borrow().get(&config.id).cloned()) {
        return Some(c);
    }
    let c = Rc::new(configure(&config.bytes, &|n| std::env::var(n).ok()).ok()?);
    COMPILED.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= MAX_COMPILED {
            m.clear();
        }
        m.insert(config.id, Rc::clone(&c));
    });
    Some(c)
}

struct ModuleFilter {
    filter: Box<dyn Filter>,
    host: Native,
    role: Role,
    /// A hook panicked: the filter does nothing more on this stream.
    failed: bool,
    /// The response has started (a local reply can no longer replace it).
    responding: bool,
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: ConfigModulePtr,
    envoy: FilterEnvoyPtr,
) -> FilterModulePtr {
    if config.is_null() {
        return std::ptr::null();
    }
    let made = guard("filter_new", || {
        // SAFETY: a live configuration (Envoy destroys it after its last filter).
        let config = unsafe { &*(config as *const ModuleConfig) };
        let host = Native::new(envoy, config.envoy);
        let filter: Box<dyn Filter> = match (config.role, config.role == Role::FirstAttempt) {
            (_, true) => Box::new(first::FirstAttempt::new(host.clone())),
            (role, false) => match (role, compiled(config)) {
                (Role::Upstream, Some(c)) => Box::new(upstream::Attempt::new(host.clone(), c)),
                (_, Some(c)) => Box::new(downstream::Stream::new(host.clone(), c)),
                (_, None) => Box::new(Unconfigured { host: host.clone() }),
            },
        };
        Box::new(ModuleFilter { filter, host, role: config.role, failed: false, responding: false })
    });
    match made {
        Some(b) => Box::into_raw(b) as FilterModulePtr,
        None => std::ptr::null(),
    }
}

/// Runs one HTTP event on the filter; on a panic, answers for it (see the module's comment).
fn run<R: Copy>(
    filter: FilterModulePtr,
    hook: &'static str,
    idle: R,
    stopped: R,
    f: impl FnOnce(&mut dyn Filter) -> R,
) -> R {
    if filter.is_null() {
        return idle;
    }
    // SAFETY: the pointer `filter_new` leaked, live until `filter_destroy`; Envoy calls a
    // filter's hooks on its worker thread, one at a time.
    let m = unsafe { &mut *(filter as *mut ModuleFilter) };
    if m.failed {
        return idle;
    }
    let result = guard(hook, || f(m.filter.as_mut()));
    // The hook's request header changes, all at once, before Envoy goes on with the request.
    m.host.settle_route();
    match result {
        Some(r) => r,
        None => {
            m.failed = true;
            failed(m, hook);
            if m.responding {
                idle
            } else {
                stopped
            }
        }
    }
}

/// A hook panicked: count it and, before the response started, answer in the API's shape.
fn failed(m: &ModuleFilter, hook: &'static str) {
    let _ = guard("panic_answer", || {
        count(&m.host, &format!("switchyard.native_panics_total.hook.{hook}"));
        if m.responding {
            return;
        }
        let path = m.host.req_header(":path").unwrap_or_default();
        let message = match m.role {
            Role::Downstream => "Switchyard failed on this request (internal error)",
            _ => "Switchyard failed on this attempt (internal error)",
        };
        let body = ApiError::new(500, "server_error", "internal_error", message).for_api(Api::of_path(&path)).body();
        if m.role == Role::Downstream {
            // Already in the API's shape: the listener's local-reply mappers leave it alone.
            m.host.set_req_header(wiring::OWN_REPLY_HEADER, Some("1"));
        }
        m.host.reply(500, &[("content-type", "application/json")], body.as_bytes());
    });
}

fn headers_status(a: host::Action) -> HeadersStatus {
    match a {
        host::Action::Continue => HEADERS_CONTINUE,
        host::Action::Pause => HEADERS_STOP_ITERATION,
    }
}

fn body_status(a: host::Action) -> BodyStatus {
    match a {
        host::Action::Continue => BODY_CONTINUE,
        host::Action::Pause => BODY_STOP_ITERATION_AND_BUFFER,
    }
}

fn trailers_status(a: host::Action) -> TrailersStatus {
    match a {
        host::Action::Continue => TRAILERS_CONTINUE,
        host::Action::Pause => TRAILERS_STOP_ITERATION,
    }
}

/// The size of the body as the filters see it in a body callback (buffered so far plus the chunk).
fn body_size(filter: FilterModulePtr, request: bool) -> usize {
    if filter.is_null() {
        return 0;
    }
    // SAFETY: as in `run`.
    let m = unsafe { &*(filter as *const ModuleFilter) };
    // Summed from the chunks' lengths: a buffered body is never copied just to be measured.
    m.host.body_len(request)
}

/// Marks the body hook running (see `host::Io::in_body`).
fn in_body(filter: FilterModulePtr, on: bool) {
    if !filter.is_null() {
        // SAFETY: as in `run`.
        let m = unsafe { &*(filter as *const ModuleFilter) };
        m.host.io.in_body.set(on);
    }
}

fn mark_responding(filter: FilterModulePtr) {
    if !filter.is_null() {
        // SAFETY: as in `run`.
        unsafe { (*(filter as *mut ModuleFilter)).responding = true };
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    _envoy: FilterEnvoyPtr,
    filter: FilterModulePtr,
    end_of_stream: bool,
) -> HeadersStatus {
    run(filter, "request_headers", HEADERS_CONTINUE, HEADERS_STOP_ITERATION, |f| {
        headers_status(f.on_request_headers(end_of_stream))
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    _envoy: FilterEnvoyPtr,
    filter: FilterModulePtr,
    end_of_stream: bool,
) -> BodyStatus {
    in_body(filter, true);
    let size = guard("request_body_size", || body_size(filter, true)).unwrap_or(0);
    let status = run(filter, "request_body", BODY_CONTINUE, BODY_STOP_ITERATION_AND_BUFFER, |f| {
        body_status(f.on_request_body(size, end_of_stream))
    });
    in_body(filter, false);
    status
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _envoy: FilterEnvoyPtr,
    filter: FilterModulePtr,
) -> TrailersStatus {
    run(filter, "request_trailers", TRAILERS_CONTINUE, TRAILERS_STOP_ITERATION, |f| {
        trailers_status(f.on_request_trailers())
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    _envoy: FilterEnvoyPtr,
    filter: FilterModulePtr,
    end_of_stream: bool,
) -> HeadersStatus {
    let status = run(filter, "response_headers", HEADERS_CONTINUE, HEADERS_CONTINUE, |f| {
        headers_status(f.on_response_headers(end_of_stream))
    });
    mark_responding(filter);
    status
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    _envoy: FilterEnvoyPtr,
    filter: FilterModulePtr,
    end_of_stream: bool,
) -> BodyStatus {
    mark_responding(filter);
    in_body(filter, true);
    let size = guard("response_body_size", || body_size(filter, false)).unwrap_or(0);
    let status = run(filter, "response_body", BODY_CONTINUE, BODY_CONTINUE, |f| {
        body_status(f.on_response_body(size, end_of_stream))
    });
    in_body(filter, false);
    status
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    _envoy: FilterEnvoyPtr,
    _filter: FilterModulePtr,
) -> TrailersStatus {
    TRAILERS_CONTINUE
}

/// Before the access log: the decision filter's `on_log` (Envoy runs no access log for an
/// upstream filter, so neither does this).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(_envoy: FilterEnvoyPtr, filter: FilterModulePtr) {
    mark_responding(filter);
    run(filter, "stream_complete", (), (), |f| f.on_log());
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(filter: FilterModulePtr) {
    if filter.is_null() {
        return;
    }
    mark_responding(filter);
    run(filter, "done", (), (), |f| f.on_done());
    let _ = guard("filter_destroy", || {
        // SAFETY: the pointer `filter_new` leaked; Envoy destroys each filter once.
        let m = unsafe { Box::from_raw(filter as *mut ModuleFilter) };
        if m.role == Role::Downstream {
            m.host.forget_request();
        }
        drop(m);
    });
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    _envoy: FilterEnvoyPtr,
    filter: FilterModulePtr,
    callout_id: u64,
    result: CalloutResult,
    headers: *const EnvoyHttpHeader,
    headers_size: usize,
    body: *const EnvoyBuffer,
    body_size: usize,
) {
    if filter.is_null() {
        return;
    }
    // SAFETY: as in `run`.
    let host = unsafe { &(*(filter as *const ModuleFilter)).host }.clone();
    let Some(token) = host.token_of(callout_id) else { return };
    let Some((status, message)) = guard("callout_answer", || answer_of(result, headers, headers_size, body, body_size))
    else {
        return;
    };
    let size = message.len();
    *host.io.grpc_answer.borrow_mut() = message;
    run(filter, "grpc_answer", (), (), |f| f.on_grpc_response(token, status, size));
}

// Hooks Envoy requires of every HTTP filter module; Switchyard starts no streams, schedules
// nothing per stream and is never a terminal filter.

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(
    _envoy: FilterEnvoyPtr,
    _filter: FilterModulePtr,
    _stream: u64,
    _headers: *const EnvoyHttpHeader,
    _headers_size: usize,
    _end_stream: bool,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(
    _envoy: FilterEnvoyPtr,
    _filter: FilterModulePtr,
    _stream: u64,
    _data: *const EnvoyBuffer,
    _data_count: usize,
    _end_stream: bool,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(
    _envoy: FilterEnvoyPtr,
    _filter: FilterModulePtr,
    _stream: u64,
    _trailers: *const EnvoyHttpHeader,
    _trailers_size: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(
    _envoy: FilterEnvoyPtr,
    _filter: FilterModulePtr,
    _stream: u64,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(
    _envoy: FilterEnvoyPtr,
    _filter: FilterModulePtr,
    _stream: u64,
    _reason: StreamResetReason,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    _envoy: FilterEnvoyPtr,
    _filter: FilterModulePtr,
    _event: u64,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
    _envoy: FilterEnvoyPtr,
    _filter: FilterModulePtr,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
    _envoy: FilterEnvoyPtr,
    _filter: FilterModulePtr,
) {
}

/// Per-route configuration: Switchyard reads none (the routes' `typed_per_filter_config` for the
/// decision filter is RBAC's, parsed by RBAC); a non-null answer keeps any such config valid.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_new(
    _name: EnvoyBuffer,
    _config: EnvoyBuffer,
) -> *const c_void {
    static NONE: u8 = 0;
    std::ptr::addr_of!(NONE).cast()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_destroy(_config: *const c_void) {}
