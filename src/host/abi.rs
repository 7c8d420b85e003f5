//! The host calls Switchyard uses, declared against the proxy-wasm ABI directly. The SDK's own
//! wrappers panic on any status they do not expect (and on non-UTF-8 header values), which
//! would abort the VM and fail every request on the worker; these return errors instead, and
//! callers log and carry on. `ProxyWasm` is the filters' `Host` over these calls.

use std::ptr::null_mut;

use crate::filters::host::{Host, MetricKind};
use crate::protocol::wire::{deserialize_map, property_path, serialize_map};

/// Under `--features profile`, accumulates the time of each kind of host call.
macro_rules! timed {
    ($name:expr, $e:expr) => {{
        #[cfg(feature = "profile")]
        let t0 = super::profile::now_ns();
        let r = $e;
        #[cfg(feature = "profile")]
        super::profile::host_call($name, super::profile::now_ns().saturating_sub(t0));
        r
    }};
}

const OK: u32 = 0;
const NOT_FOUND: u32 = 1;

const REQUEST_BODY: u32 = 0;
const RESPONSE_BODY: u32 = 1;
const PLUGIN_CONFIGURATION: u32 = 7;
const REQUEST_HEADERS: u32 = 0;
const RESPONSE_HEADERS: u32 = 2;
const HTTP_CALL_RESPONSE_HEADERS: u32 = 6;
const HTTP_CALL_RESPONSE_BODY: u32 = 4;
const COUNTER: u32 = 0;
const GAUGE: u32 = 1;
const HISTOGRAM: u32 = 2;

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_get_buffer_bytes(
        buffer_type: u32,
        start: usize,
        max_size: usize,
        data: *mut *mut u8,
        size: *mut usize,
    ) -> u32;
    fn proxy_set_buffer_bytes(buffer_type: u32, start: usize, size: usize, data: *const u8, data_size: usize) -> u32;
    fn proxy_get_header_map_pairs(map_type: u32, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_get_header_map_value(
        map_type: u32,
        key: *const u8,
        key_size: usize,
        data: *mut *mut u8,
        size: *mut usize,
    ) -> u32;
    fn proxy_replace_header_map_value(
        map_type: u32,
        key: *const u8,
        key_size: usize,
        value: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_remove_header_map_value(map_type: u32, key: *const u8, key_size: usize) -> u32;
    fn proxy_get_property(path: *const u8, path_size: usize, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_set_property(path: *const u8, path_size: usize, value: *const u8, value_size: usize) -> u32;
    fn proxy_get_shared_data(
        key: *const u8,
        key_size: usize,
        data: *mut *mut u8,
        size: *mut usize,
        cas: *mut u32,
    ) -> u32;
    fn proxy_set_shared_data(key: *const u8, key_size: usize, value: *const u8, value_size: usize, cas: u32) -> u32;
    #[allow(clippy::too_many_arguments)]
    fn proxy_send_local_response(
        status: u32,
        details: *const u8,
        details_size: usize,
        body: *const u8,
        body_size: usize,
        headers: *const u8,
        headers_size: usize,
        grpc_status: i32,
    ) -> u32;
    fn proxy_get_current_time_nanoseconds(time: *mut u64) -> u32;
    fn proxy_define_metric(metric_type: u32, name: *const u8, name_size: usize, id: *mut u32) -> u32;
    fn proxy_increment_metric(id: u32, offset: i64) -> u32;
    fn proxy_record_metric(id: u32, value: u64) -> u32;
    fn proxy_continue_stream(stream_type: u32) -> u32;
    fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
    fn proxy_set_effective_context(context_id: u32) -> u32;
}

thread_local! {
    /// The first root context's id: detached calls are made on its behalf.
    static ROOT_CONTEXT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// The stream context of the callback running now (set where a detached call can happen).
    static CURRENT_CONTEXT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

pub fn set_root_context(id: u32) {
    ROOT_CONTEXT.with(|c| {
        if c.get() == 0 {
            c.set(id)
        }
    });
}

pub fn set_current_context(id: u32) {
    CURRENT_CONTEXT.with(|c| c.set(id));
}

/// Takes ownership of a buffer the host allocated through the SDK's `proxy_on_memory_allocate`
/// (a boxed slice of exactly `size` bytes).
fn take(data: *mut u8, size: usize) -> Option<Vec<u8>> {
    if data.is_null() {
        return None;
    }
    // SAFETY: the host filled `size` bytes at `data`, allocated by our allocator export as a
    // Box<[u8]> of that length; we are its only owner.
    Some(unsafe { Vec::from_raw_parts(data, size, size) })
}

fn get_bytes(call: impl FnOnce(*mut *mut u8, *mut usize) -> u32) -> Result<Option<Vec<u8>>, u32> {
    let mut data: *mut u8 = null_mut();
    let mut size: usize = 0;
    match call(&mut data, &mut size) {
        OK => Ok(take(data, size)),
        NOT_FOUND => Ok(None),
        status => Err(status),
    }
}

fn check(what: &str, status: u32) {
    if status != OK {
        log::warn!("switchyard: {what} failed (status {status})");
    }
}

fn header(map: u32, name: &str) -> Option<String> {
    // SAFETY: pointers and lengths describe live buffers for the duration of the call.
    let v = timed!(
        "get_header",
        get_bytes(|d, s| unsafe { proxy_get_header_map_value(map, name.as_ptr(), name.len(), d, s) }).ok().flatten()
    )?;
    Some(String::from_utf8_lossy(&v).into_owned())
}

fn set_header(map: u32, name: &str, value: Option<&str>) {
    // SAFETY: as above.
    let status = timed!("set_header", unsafe {
        match value {
            Some(v) => proxy_replace_header_map_value(map, name.as_ptr(), name.len(), v.as_ptr(), v.len()),
            None => proxy_remove_header_map_value(map, name.as_ptr(), name.len()),
        }
    });
    if status != OK {
        log::warn!("switchyard: setting header {name} failed (status {status})");
    }
}

fn headers(map: u32) -> Vec<(String, String)> {
    // SAFETY: as above.
    timed!("header_pairs", {
        let bytes = get_bytes(|d, s| unsafe { proxy_get_header_map_pairs(map, d, s) }).ok().flatten();
        bytes.map(|b| deserialize_map(&b)).unwrap_or_default()
    })
}

/// All request headers in one host call (cheaper than several single lookups).
pub fn req_headers() -> Vec<(String, String)> {
    headers(REQUEST_HEADERS)
}

/// All response headers in one host call.
pub fn resp_headers() -> Vec<(String, String)> {
    headers(RESPONSE_HEADERS)
}

pub fn req_header(name: &str) -> Option<String> {
    header(REQUEST_HEADERS, name)
}

pub fn set_req_header(name: &str, value: Option<&str>) {
    set_header(REQUEST_HEADERS, name, value)
}

pub fn set_resp_header(name: &str, value: Option<&str>) {
    set_header(RESPONSE_HEADERS, name, value)
}

pub fn property(path: &[&str]) -> Option<Vec<u8>> {
    let p = property_path(path);
    // SAFETY: as above.
    timed!("get_property", get_bytes(|d, s| unsafe { proxy_get_property(p.as_ptr(), p.len(), d, s) }).ok().flatten())
}

pub fn set_property(path: &[&str], value: &[u8]) {
    let p = property_path(path);
    // SAFETY: as above.
    check(
        "set_property",
        timed!("set_property", unsafe { proxy_set_property(p.as_ptr(), p.len(), value.as_ptr(), value.len()) }),
    );
}

fn buffer(kind: u32, start: usize, size: usize) -> Option<Vec<u8>> {
    // SAFETY: as above.
    timed!("get_buffer", get_bytes(|d, s| unsafe { proxy_get_buffer_bytes(kind, start, size, d, s) }).ok().flatten())
}

fn set_buffer(kind: u32, start: usize, size: usize, value: &[u8]) {
    // SAFETY: as above.
    check(
        "replacing a body",
        timed!("set_buffer", unsafe { proxy_set_buffer_bytes(kind, start, size, value.as_ptr(), value.len()) }),
    );
}

pub fn request_body(start: usize, size: usize) -> Option<Vec<u8>> {
    buffer(REQUEST_BODY, start, size)
}

pub fn set_request_body(start: usize, size: usize, value: &[u8]) {
    set_buffer(REQUEST_BODY, start, size, value)
}

pub fn response_body(start: usize, size: usize) -> Option<Vec<u8>> {
    buffer(RESPONSE_BODY, start, size)
}

pub fn set_response_body(start: usize, size: usize, value: &[u8]) {
    set_buffer(RESPONSE_BODY, start, size, value)
}

pub fn plugin_configuration() -> Option<Vec<u8>> {
    buffer(PLUGIN_CONFIGURATION, 0, usize::MAX)
}

/// A local reply (the request goes no further).
pub fn reply(status: u32, headers: &[(&str, &str)], body: &[u8]) {
    let h = serialize_map(headers);
    // SAFETY: as above.
    let st =
        unsafe { proxy_send_local_response(status, null_mut(), 0, body.as_ptr(), body.len(), h.as_ptr(), h.len(), -1) };
    check("sending a local reply", st);
}

/// The root context's `on_tick` period.
/// The answer of the HTTP call being delivered: its status (0 when it has none: no answer came)
/// and at most `max` bytes of its body.
pub fn http_call_answer(body_size: usize, max: usize) -> (u16, Vec<u8>) {
    let status = header(HTTP_CALL_RESPONSE_HEADERS, ":status").and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let body = if body_size > 0 { buffer(HTTP_CALL_RESPONSE_BODY, 0, body_size.min(max)) } else { None };
    (status, body.unwrap_or_default())
}

pub fn set_tick_period_ms(period: u32) {
    // SAFETY: a plain host call without pointers.
    check("set_tick_period", unsafe { proxy_set_tick_period_milliseconds(period) });
}

pub fn now_ms() -> u64 {
    let mut ns: u64 = 0;
    // SAFETY: `ns` outlives the call.
    if unsafe { proxy_get_current_time_nanoseconds(&mut ns) } != OK {
        return 0;
    }
    ns / 1_000_000
}

pub fn shared_data(key: &str) -> (Option<Vec<u8>>, u32) {
    let mut data: *mut u8 = null_mut();
    let mut size: usize = 0;
    let mut cas: u32 = 0;
    // SAFETY: as above.
    match timed!("get_shared", unsafe {
        proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas)
    }) {
        OK => (take(data, size), cas),
        _ => (None, 0),
    }
}

/// Writes a shared-data value (empty clears it); `cas` 0 writes unconditionally. Returns the
/// host status (`CAS_MISMATCH` when another worker wrote first).
pub fn set_shared_data(key: &str, value: &[u8], cas: u32) -> u32 {
    // SAFETY: as above.
    timed!("set_shared", unsafe { proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), cas) })
}

fn define_metric(kind: u32, name: &str) -> Option<u32> {
    let mut id: u32 = 0;
    // SAFETY: as above.
    (unsafe { proxy_define_metric(kind, name.as_ptr(), name.len(), &mut id) } == OK).then_some(id)
}

pub fn increment_metric(id: u32, by: i64) {
    // SAFETY: no pointers.
    timed!("metric", unsafe { proxy_increment_metric(id, by) });
}

pub fn record_metric(id: u32, value: u64) {
    // SAFETY: no pointers.
    timed!("metric", unsafe { proxy_record_metric(id, value) });
}

/// The filters' host: Envoy, through the calls above.
pub struct ProxyWasm;

impl Host for ProxyWasm {
    fn req_headers(&self) -> Vec<(String, String)> {
        req_headers()
    }
    fn req_header(&self, name: &str) -> Option<String> {
        req_header(name)
    }
    fn set_req_header(&self, name: &str, value: Option<&str>) {
        set_req_header(name, value)
    }
    fn resp_headers(&self) -> Vec<(String, String)> {
        resp_headers()
    }
    fn set_resp_header(&self, name: &str, value: Option<&str>) {
        set_resp_header(name, value)
    }
    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        property(path)
    }
    fn set_property(&self, path: &[&str], value: &[u8]) {
        set_property(path, value)
    }
    fn request_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        request_body(start, size)
    }
    fn set_request_body(&self, start: usize, size: usize, value: &[u8]) {
        set_request_body(start, size, value)
    }
    fn response_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        response_body(start, size)
    }
    fn set_response_body(&self, start: usize, size: usize, value: &[u8]) {
        set_response_body(start, size, value)
    }
    fn reply(&self, status: u32, headers: &[(&str, &str)], body: &[u8]) {
        reply(status, headers, body)
    }
    fn now_ms(&self) -> u64 {
        now_ms()
    }
    fn shared_data(&self, key: &str) -> (Option<Vec<u8>>, u32) {
        shared_data(key)
    }
    fn set_shared_data(&self, key: &str, value: &[u8], cas: u32) -> u32 {
        set_shared_data(key, value, cas)
    }
    fn define_metric(&self, kind: MetricKind, name: &str) -> Option<u32> {
        define_metric(
            match kind {
                MetricKind::Counter => COUNTER,
                MetricKind::Gauge => GAUGE,
                MetricKind::Histogram => HISTOGRAM,
            },
            name,
        )
    }
    fn increment_metric(&self, id: u32, by: i64) {
        increment_metric(id, by)
    }
    fn record_metric(&self, id: u32, value: u64) {
        record_metric(id, value)
    }
    fn random_unit(&self) -> f64 {
        super::random_unit()
    }
    fn grpc_call(&self, cluster: &str, service: &str, method: &str, message: &[u8], timeout_ms: u32) -> Option<u32> {
        // Through the SDK: it must register the token to deliver the answer to this context.
        // Envoy answers an unknown cluster with ParseFailure, which the SDK returns as an error.
        let timeout = std::time::Duration::from_millis(u64::from(timeout_ms));
        match proxy_wasm::hostcalls::dispatch_grpc_call(cluster, service, method, Vec::new(), Some(message), timeout) {
            Ok(token) => Some(token),
            Err(status) => {
                log::warn!("switchyard: gRPC call to cluster {cluster} refused: {status:?}");
                None
            }
        }
    }
    fn http_call(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout_ms: u32) -> Option<u32> {
        // Through the SDK, which registers the token to deliver the answer to the root.
        let timeout = std::time::Duration::from_millis(u64::from(timeout_ms));
        let body = (!body.is_empty()).then_some(body);
        match proxy_wasm::hostcalls::dispatch_http_call(cluster, headers.to_vec(), body, Vec::new(), timeout) {
            Ok(token) => Some(token),
            Err(status) => {
                log::warn!("switchyard: HTTP call to cluster {cluster} refused: {status:?}");
                None
            }
        }
    }
    fn grpc_call_detached(&self, cluster: &str, service: &str, method: &str, message: &[u8], timeout_ms: u32) -> bool {
        // On the root context's behalf, so the call outlives this stream (Envoy cancels a
        // context's calls when it is destroyed); its answer is not delivered to anyone.
        let (root, current) = (ROOT_CONTEXT.with(|c| c.get()), CURRENT_CONTEXT.with(|c| c.get()));
        if root == 0 || current == 0 {
            return false;
        }
        // SAFETY: plain host calls without pointers.
        if unsafe { proxy_set_effective_context(root) } != OK {
            return false;
        }
        let sent = self.grpc_call(cluster, service, method, message, timeout_ms).is_some();
        // SAFETY: as above; back to the stream for the rest of this callback.
        check("set_effective_context", unsafe { proxy_set_effective_context(current) });
        sent
    }
    fn grpc_response(&self, size: usize) -> Option<Vec<u8>> {
        // BufferType::GrpcReceiveBuffer.
        buffer(5, 0, size)
    }
    fn resume_request(&self) {
        // SAFETY: a plain host call without pointers; 0 is the HTTP request stream.
        check("continue_stream", unsafe { proxy_continue_stream(0) });
    }
}
