//! `Host` over the dynamic-module callbacks: the filters' seam, as the native build sees it.
//! A `Native` is bound to one HTTP filter instance (its Envoy pointer, valid until Envoy destroys
//! the filter, which outlives every call made through it) and to its configuration; the tick's
//! host has no filter and reaches Envoy through the configuration only.
//!
//! Where proxy-wasm names a property path, the dynamic-module ABI has a typed call: filter state
//! (`wasm.<name>`, the key the Wasm host uses, so the generated route's filter-state matcher and
//! access-log formats read the same keys), metadata, attributes, the cluster name. Shared data
//! is process memory (`shared`), metrics are families defined at configuration (`metrics`).

use crate::filters::fast_hash::FastMap;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::abi::*;
use super::grpc::{grpc_frame, grpc_headers, grpc_target_parts, grpc_timeout};
use super::{metrics, shared};
use crate::filters::host::{Host, MetricKind};
use crate::filters::internals::ENVOY_PREFIX;
use crate::wiring::INTERNAL_PREFIX;

/// The calls in flight and the answer being delivered, shared by a filter's host and the
/// adapter that delivers the answer.
#[derive(Default)]
pub struct Io {
    /// The gRPC answer being delivered (its message, without the 5-byte frame prefix).
    pub grpc_answer: RefCell<Vec<u8>>,
    /// Callout ids by the token the filters see (ids are u64, tokens u32).
    callouts: RefCell<Vec<(u32, u64)>>,
    next_token: Cell<u32>,
    /// A body hook is running (Envoy's received chunk exists only then; elsewhere, as in the
    /// trailers hook, the body is what was buffered).
    pub in_body: Cell<bool>,
    /// This request's overlay id (see `OVERLAY`).
    request: Cell<Option<u64>>,
    /// A request header changed since the route cache was last cleared (see `settle_route`).
    route_stale: Cell<bool>,
}

/// The host of one filter instance (or of the tick: no stream).
#[derive(Clone)]
pub struct Native {
    /// Null for the tick's host (no stream).
    pub filter: FilterEnvoyPtr,
    pub config: ConfigEnvoyPtr,
    pub io: Rc<Io>,
}

impl Native {
    pub fn new(filter: FilterEnvoyPtr, config: ConfigEnvoyPtr) -> Native {
        Native { filter, config, io: Rc::new(Io::default()) }
    }

    /// The token of callout `id` (and forgets it).
    pub fn token_of(&self, id: u64) -> Option<u32> {
        let mut c = self.io.callouts.borrow_mut();
        let i = c.iter().position(|(_, cid)| *cid == id)?;
        Some(c.swap_remove(i).0)
    }

    fn has_stream(&self) -> bool {
        !self.filter.is_null()
    }
}

thread_local! {
    /// Filter-state values rewritten after their first write, by request and name. A request's
    /// decision filter and its attempts' filters run on the same worker thread, so this is the
    /// worker's; the decision filter's host drops its request's entries when Envoy destroys it.
    static OVERLAY: RefCell<FastMap<(u64, String), Vec<u8>>> = RefCell::new(FastMap::default());
}

/// The filter-state key of a request's overlay id (written once, by the first writer).
const REQUEST_KEY: &str = "wasm.switchyard_native_request";
/// Ids of requests that use the overlay: unique within the process.
static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

impl Native {
    fn state(&self, key: &str) -> Option<Vec<u8>> {
        let mut out = EnvoyBuffer::empty();
        // SAFETY: `filter` is live for this hook; `out` outlives the call.
        let ok = unsafe {
            envoy_dynamic_module_callback_http_get_filter_state_bytes(
                self.filter,
                ModuleBuffer::of(key.as_bytes()),
                &mut out,
            )
        };
        if ok {
            copy(out)
        } else {
            None
        }
    }

    fn set_state(&self, key: &str, value: &[u8]) -> bool {
        // SAFETY: as above; Envoy copies key and value.
        unsafe {
            envoy_dynamic_module_callback_http_set_filter_state_bytes(
                self.filter,
                ModuleBuffer::of(key.as_bytes()),
                ModuleBuffer::of(value),
            )
        }
    }

    /// The request's overlay id: cached, else read from filter state (the decision filter's,
    /// seen by its attempts' filters), else (`create`) made and written there.
    fn request_id(&self, create: bool) -> Option<u64> {
        if let Some(id) = self.io.request.get() {
            return Some(id);
        }
        let read = self.state(REQUEST_KEY).and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok()).map(u64::from_le_bytes);
        let id = match read {
            Some(id) => id,
            None if create => {
                let id = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed);
                if !self.set_state(REQUEST_KEY, &id.to_le_bytes()) {
                    return None;
                }
                id
            }
            None => return None,
        };
        self.io.request.set(Some(id));
        Some(id)
    }

    /// A rewritten value of property `name` for this request.
    fn rewritten(&self, name: &str) -> Option<Vec<u8>> {
        // No request on this worker rewrote anything: no need to look this one's id up (a
        // filter-state read per property read otherwise).
        if OVERLAY.with(|o| o.borrow().is_empty()) {
            return None;
        }
        let id = self.request_id(false)?;
        OVERLAY.with(|o| o.borrow().get(&(id, name.to_string())).cloned())
    }

    /// Drops the request's rewritten values (the decision filter's host, when Envoy destroys
    /// it: after every attempt's filter).
    pub fn forget_request(&self) {
        if OVERLAY.with(|o| o.borrow().is_empty()) {
            return;
        }
        if let Some(id) = self.request_id(false) {
            OVERLAY.with(|o| o.borrow_mut().retain(|(r, _), _| *r != id));
        }
    }
}

/// Copies Envoy's bytes (valid until the hook returns) into the module.
fn copy(b: EnvoyBuffer) -> Option<Vec<u8>> {
    if b.ptr.is_null() {
        return if b.length == 0 { Some(Vec::new()) } else { None };
    }
    // SAFETY: Envoy guarantees `length` readable bytes at `ptr` until the current hook returns
    // (or a setter runs); we copy them at once.
    Some(unsafe { std::slice::from_raw_parts(b.ptr, b.length) }.to_vec())
}

/// The text of a buffer Envoy lends for the current hook, copied once (headers are read on
/// every request: a copy and then a lossy conversion would allocate twice).
fn lent_text(b: EnvoyBuffer) -> Option<String> {
    if b.ptr.is_null() {
        return (b.length == 0).then(String::new);
    }
    // SAFETY: as in `copy`: `length` readable bytes at `ptr` until the hook returns; read at once.
    let bytes = unsafe { std::slice::from_raw_parts(b.ptr, b.length) };
    Some(match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    })
}

impl Native {
    /// Runs `read` on the headers Envoy lends for this hook (empty without a stream or headers).
    fn lent_headers<R: Default>(&self, kind: HeaderType, read: impl FnOnce(&[EnvoyHttpHeader]) -> R) -> R {
        if !self.has_stream() {
            return R::default();
        }
        // SAFETY: `filter` is live for this hook; the vector has room for `n` headers, whose
        // buffers Envoy lends until the hook returns (`read` copies what it keeps).
        unsafe {
            let n = envoy_dynamic_module_callback_http_get_headers_size(self.filter, kind);
            if n == 0 {
                return R::default();
            }
            let empty = EnvoyHttpHeader {
                key_ptr: std::ptr::null(),
                key_length: 0,
                value_ptr: std::ptr::null(),
                value_length: 0,
            };
            let mut v = vec![empty; n];
            if !envoy_dynamic_module_callback_http_get_headers(self.filter, kind, v.as_mut_ptr()) {
                return R::default();
            }
            read(&v)
        }
    }

    fn headers(&self, kind: HeaderType) -> Vec<(String, String)> {
        self.lent_headers(kind, |v| {
            v.iter()
                .map(|h| {
                    let k = lent_text(EnvoyBuffer { ptr: h.key_ptr, length: h.key_length }).unwrap_or_default();
                    let val = lent_text(EnvoyBuffer { ptr: h.value_ptr, length: h.value_length }).unwrap_or_default();
                    (k, val)
                })
                .collect()
        })
    }

    /// The names of the headers `keep` picks by their bytes (the values stay in Envoy; the
    /// others are never copied).
    fn header_names(&self, kind: HeaderType, keep: impl Fn(&[u8]) -> bool) -> Vec<String> {
        self.lent_headers(kind, |v| {
            v.iter()
                .filter(|h| {
                    // SAFETY: as in `lent_text`: Envoy lends `key_length` bytes for the hook.
                    !h.key_ptr.is_null() && keep(unsafe { std::slice::from_raw_parts(h.key_ptr, h.key_length) })
                })
                .map(|h| lent_text(EnvoyBuffer { ptr: h.key_ptr, length: h.key_length }).unwrap_or_default())
                .collect()
        })
    }

    fn header(&self, kind: HeaderType, name: &str) -> Option<String> {
        if !self.has_stream() {
            return None;
        }
        let mut out = EnvoyBuffer::empty();
        let mut count: usize = 0;
        // SAFETY: as above; `out` and `count` outlive the call.
        let ok = unsafe {
            envoy_dynamic_module_callback_http_get_header(
                self.filter,
                kind,
                ModuleBuffer::of(name.as_bytes()),
                &mut out,
                0,
                &mut count,
            )
        };
        if !ok || count == 0 {
            return None;
        }
        lent_text(out)
    }

    fn set_header(&self, kind: HeaderType, name: &str, value: Option<&str>) {
        if !self.has_stream() {
            return;
        }
        let v = value.map_or(ModuleBuffer::null(), |v| ModuleBuffer::of(v.as_bytes()));
        // SAFETY: as above; Envoy copies key and value.
        if !unsafe {
            envoy_dynamic_module_callback_http_set_header(self.filter, kind, ModuleBuffer::of(name.as_bytes()), v)
        } {
            log::warn!("switchyard: setting header {name} failed");
        }
        if kind == REQUEST_HEADER {
            // The route is matched again after a request header change, as Envoy's Wasm host
            // does (the routed route reads the slot header and the plan): once for all the
            // changes of a hook, before anything reads the route (`settle_route`).
            self.io.route_stale.set(true);
        }
    }

    /// Clears the route cache if a request header changed since it was last cleared: at the end
    /// of every hook (hooks.rs `run`), and before a property read, a local reply or a resumed
    /// request, which may use the route. A no-op upstream.
    pub fn settle_route(&self) {
        if self.io.route_stale.replace(false) && self.has_stream() {
            // SAFETY: `filter` is live for this hook.
            unsafe { envoy_dynamic_module_callback_http_clear_route_cache(self.filter) }
        }
    }

    /// The chunks of a body, in order.
    fn chunks(&self, kind: BodyType) -> Vec<EnvoyBuffer> {
        // SAFETY: as above; the vector has room for `n` buffers.
        unsafe {
            let n = envoy_dynamic_module_callback_http_get_body_chunks_size(self.filter, kind);
            if n == 0 {
                return Vec::new();
            }
            let mut v = vec![EnvoyBuffer::empty(); n];
            if !envoy_dynamic_module_callback_http_get_body_chunks(self.filter, kind, v.as_mut_ptr()) {
                return Vec::new();
            }
            v
        }
    }

    /// The body as proxy-wasm presents it in a body callback: what was buffered so far, then the
    /// chunk that just arrived (one buffer when an earlier filter handed the buffered body on).
    fn body_parts(&self, request: bool) -> Vec<EnvoyBuffer> {
        if !self.has_stream() {
            return Vec::new();
        }
        let (received, buffered) = if request {
            (RECEIVED_REQUEST_BODY, BUFFERED_REQUEST_BODY)
        } else {
            (RECEIVED_RESPONSE_BODY, BUFFERED_RESPONSE_BODY)
        };
        // SAFETY: as above.
        let same = unsafe {
            if request {
                envoy_dynamic_module_callback_http_received_buffered_request_body(self.filter)
            } else {
                envoy_dynamic_module_callback_http_received_buffered_response_body(self.filter)
            }
        };
        if !self.io.in_body.get() {
            return self.chunks(buffered);
        }
        let mut parts = if same { Vec::new() } else { self.chunks(buffered) };
        parts.extend(self.chunks(received));
        parts
    }

    /// The body's size as the filters see it in a body callback (as `body_parts` presents it),
    /// from the buffers' lengths: no chunk list is fetched (a body hook asks on every call).
    pub fn body_len(&self, request: bool) -> usize {
        if !self.has_stream() {
            return 0;
        }
        let (received, buffered) = if request {
            (RECEIVED_REQUEST_BODY, BUFFERED_REQUEST_BODY)
        } else {
            (RECEIVED_RESPONSE_BODY, BUFFERED_RESPONSE_BODY)
        };
        // SAFETY: `filter` is live for this hook; plain queries.
        unsafe {
            let size = |kind| envoy_dynamic_module_callback_http_get_body_size(self.filter, kind);
            if !self.io.in_body.get() {
                return size(buffered);
            }
            let same = if request {
                envoy_dynamic_module_callback_http_received_buffered_request_body(self.filter)
            } else {
                envoy_dynamic_module_callback_http_received_buffered_response_body(self.filter)
            };
            if same {
                size(received)
            } else {
                size(buffered).saturating_add(size(received))
            }
        }
    }

    fn body(&self, request: bool, start: usize, size: usize) -> Option<Vec<u8>> {
        let end = start.saturating_add(size);
        let mut out = Vec::new();
        let mut at = 0usize;
        for part in self.body_parts(request) {
            let (lo, hi) = (at, at.saturating_add(part.length));
            at = hi;
            if hi <= start || lo >= end || part.ptr.is_null() {
                continue;
            }
            let from = start.max(lo) - lo;
            let to = end.min(hi) - lo;
            // SAFETY: Envoy's chunk has `length` readable bytes; `from..to` lies within it.
            let bytes = unsafe { std::slice::from_raw_parts(part.ptr, part.length) };
            out.extend_from_slice(bytes.get(from..to).unwrap_or_default());
        }
        Some(out)
    }

    /// proxy-wasm's `set_buffer_bytes` on a body, as Envoy's Wasm host does it: start 0 drains
    /// `size` bytes from the front and prepends `value` (replacing a prefix, or all of it); a
    /// start at or past the end appends; anything else is refused.
    fn set_body(&self, request: bool, start: usize, size: usize, value: &[u8]) {
        if !self.has_stream() {
            return;
        }
        let (received, buffered) = if request {
            (RECEIVED_REQUEST_BODY, BUFFERED_REQUEST_BODY)
        } else {
            (RECEIVED_RESPONSE_BODY, BUFFERED_RESPONSE_BODY)
        };
        let len = self.body_len(request);
        if start != 0 && start < len {
            log::warn!("switchyard: body write at {start}+{size} of {len} bytes refused");
            return;
        }
        // A prefix replaced keeps the rest of the body after the new bytes.
        let rest = if start == 0 && size < len { self.body(request, size, len - size) } else { None };
        // SAFETY: as above; Envoy copies the appended bytes.
        unsafe {
            // Outside a body hook only the buffered body exists: written there.
            let to = if self.io.in_body.get() { received } else { buffered };
            // Nothing to drain from an empty body (the first piece of a rewritten answer).
            if start == 0 && len > 0 {
                envoy_dynamic_module_callback_http_drain_body(self.filter, buffered, usize::MAX);
                if self.io.in_body.get() {
                    envoy_dynamic_module_callback_http_drain_body(self.filter, received, usize::MAX);
                }
            }
            match rest {
                Some(rest) => {
                    let mut all = Vec::with_capacity(value.len() + rest.len());
                    all.extend_from_slice(value);
                    all.extend_from_slice(&rest);
                    envoy_dynamic_module_callback_http_append_body(self.filter, to, ModuleBuffer::of(&all));
                }
                // Appending nothing changes nothing (a moved-out chunk, an emptied body).
                None if value.is_empty() => {}
                None => {
                    envoy_dynamic_module_callback_http_append_body(self.filter, to, ModuleBuffer::of(value));
                }
            }
        }
    }

    fn attribute_int(&self, id: AttributeId) -> Option<Vec<u8>> {
        let mut v: u64 = 0;
        // SAFETY: as above; `v` outlives the call.
        unsafe { envoy_dynamic_module_callback_http_filter_get_attribute_int(self.filter, id, &mut v) }
            .then(|| v.to_le_bytes().to_vec())
    }

    fn attribute_string(&self, id: AttributeId) -> Option<Vec<u8>> {
        let mut out = EnvoyBuffer::empty();
        // SAFETY: as above.
        if unsafe { envoy_dynamic_module_callback_http_filter_get_attribute_string(self.filter, id, &mut out) } {
            copy(out)
        } else {
            None
        }
    }

    fn metadata(&self, source: MetadataSource, ns: &str, key: &str) -> Option<Vec<u8>> {
        let mut out = EnvoyBuffer::empty();
        // SAFETY: as above.
        let ok = unsafe {
            envoy_dynamic_module_callback_http_get_metadata_string(
                self.filter,
                source,
                ModuleBuffer::of(ns.as_bytes()),
                ModuleBuffer::of(key.as_bytes()),
                &mut out,
            )
        };
        if ok {
            copy(out)
        } else {
            None
        }
    }
}

impl Native {
    /// A plain HTTP callout on the configuration's behalf (the tick: no stream); the answer
    /// comes to `on_http_filter_config_http_callout_done`.
    fn http_callout(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout_ms: u32) -> Option<u64> {
        if self.has_stream() {
            return None;
        }
        // Envoy's callout takes the authority as `host`, as the gRPC calls send it.
        let headers: Vec<ModuleHttpHeader> =
            headers.iter().map(|(k, v)| ModuleHttpHeader::of(if *k == ":authority" { "host" } else { k }, v)).collect();
        self.start_callout(false, cluster, &headers, body, timeout_ms, "HTTP")
    }

    fn callout(&self, target: &str, service: &str, method: &str, message: &[u8], timeout_ms: u32) -> Option<u64> {
        let (cluster, authority) = grpc_target_parts(target);
        let cluster = cluster.as_str();
        let path = format!("/{service}/{method}");
        let timeout = grpc_timeout(timeout_ms);
        let headers: Vec<ModuleHttpHeader> =
            grpc_headers(&authority, &path, &timeout).iter().map(|(k, v)| ModuleHttpHeader::of(k, v)).collect();
        let body = grpc_frame(message);
        self.start_callout(self.has_stream(), cluster, &headers, &body, timeout_ms, "gRPC")
    }

    /// Starts a callout on the stream's behalf (`on_stream`) or the configuration's (the
    /// main thread's tick: no stream); its id, or None (logged) when Envoy refuses it.
    fn start_callout(
        &self,
        on_stream: bool,
        cluster: &str,
        headers: &[ModuleHttpHeader],
        body: &[u8],
        timeout_ms: u32,
        what: &str,
    ) -> Option<u64> {
        let mut id: u64 = 0;
        // SAFETY: the pointers describe live buffers for the call; Envoy copies them. The
        // configuration-level callout is only made from the main thread (the tick).
        let init = unsafe {
            if on_stream {
                envoy_dynamic_module_callback_http_filter_http_callout(
                    self.filter,
                    &mut id,
                    ModuleBuffer::of(cluster.as_bytes()),
                    headers.as_ptr(),
                    headers.len(),
                    ModuleBuffer::of(body),
                    u64::from(timeout_ms),
                )
            } else {
                envoy_dynamic_module_callback_http_filter_config_http_callout(
                    self.config,
                    &mut id,
                    ModuleBuffer::of(cluster.as_bytes()),
                    headers.as_ptr(),
                    headers.len(),
                    ModuleBuffer::of(body),
                    u64::from(timeout_ms),
                )
            }
        };
        if init != CALLOUT_INIT_SUCCESS {
            log::warn!("switchyard: {what} call to cluster {cluster} refused (callout init {init})");
            return None;
        }
        Some(id)
    }
}

impl Host for Native {
    fn req_headers(&self) -> Vec<(String, String)> {
        self.headers(REQUEST_HEADER)
    }
    fn req_header(&self, name: &str) -> Option<String> {
        self.header(REQUEST_HEADER, name)
    }
    fn set_req_header(&self, name: &str, value: Option<&str>) {
        self.set_header(REQUEST_HEADER, name, value)
    }
    fn resp_headers(&self) -> Vec<(String, String)> {
        self.headers(RESPONSE_HEADER)
    }
    fn internal_req_header_names(&self) -> Vec<String> {
        // By the bytes' prefix (both are ASCII): what `is_internal` reads of the copied name.
        self.header_names(REQUEST_HEADER, |k| {
            k.starts_with(ENVOY_PREFIX.as_bytes()) || k.starts_with(INTERNAL_PREFIX.as_bytes())
        })
    }
    fn resp_headers_named(&self, names: &[&str]) -> Vec<Option<String>> {
        // One pass over the headers Envoy lends: a lookup by name is a call each, and Envoy
        // makes a lower-case copy of the name for every one. The first value of a name, as
        // `get_header` at index 0 gives it.
        let mut found: Vec<Option<String>> = vec![None; names.len()];
        self.lent_headers(RESPONSE_HEADER, |v| {
            for h in v {
                // SAFETY: as in `lent_text`: Envoy lends `key_length` bytes for the hook.
                let key = if h.key_ptr.is_null() {
                    &[][..]
                } else {
                    unsafe { std::slice::from_raw_parts(h.key_ptr, h.key_length) }
                };
                for (name, slot) in names.iter().zip(found.iter_mut()) {
                    if slot.is_none() && name.as_bytes() == key {
                        *slot = lent_text(EnvoyBuffer { ptr: h.value_ptr, length: h.value_length });
                    }
                }
            }
        });
        found
    }
    fn set_resp_header(&self, name: &str, value: Option<&str>) {
        self.set_header(RESPONSE_HEADER, name, value)
    }
    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        if !self.has_stream() {
            return None;
        }
        if path.len() > 1 {
            // Route and cluster metadata, attributes: read from the current route.
            self.settle_route();
        }
        match path {
            [name] => {
                if let Some(v) = self.rewritten(name) {
                    return Some(v);
                }
                self.state(&super::state_key(name))
            }
            ["xds", "cluster_name"] => {
                let mut out = EnvoyBuffer::empty();
                // SAFETY: as above.
                if unsafe { envoy_dynamic_module_callback_http_get_cluster_name(self.filter, &mut out) } {
                    copy(out)
                } else {
                    self.attribute_string(ATTRIBUTE_XDS_CLUSTER_NAME)
                }
            }
            ["upstream", "request_attempt_count"] => self.attribute_int(ATTRIBUTE_UPSTREAM_REQUEST_ATTEMPT_COUNT),
            ["response", "flags"] => self.attribute_int(ATTRIBUTE_RESPONSE_FLAGS),
            ["connection", "uri_san_peer_certificate"] => {
                self.attribute_string(ATTRIBUTE_CONNECTION_URI_SAN_PEER_CERTIFICATE)
            }
            ["xds", "route_metadata", "filter_metadata", ns, key] => self.metadata(METADATA_ROUTE, ns, key),
            ["xds", "cluster_metadata", "filter_metadata", ns, key] => self.metadata(METADATA_CLUSTER, ns, key),
            ["metadata", "filter_metadata", ns, key] => self.metadata(METADATA_DYNAMIC, ns, key),
            _ => {
                log::debug!("switchyard: property {} has no native equivalent", path.join("."));
                None
            }
        }
    }
    fn set_property(&self, path: &[&str], value: &[u8]) {
        let ([name], true) = (path, self.has_stream()) else {
            log::warn!("switchyard: property {} cannot be written natively", path.join("."));
            return;
        };
        let key = super::state_key(name);
        // Envoy keeps the first write of a key (the ABI stores it read-only): that one is what
        // Envoy reads (the route's plan matcher, access logs); a rewrite (an attempt's record,
        // started then finished) is kept for the request's filters in the overlay.
        if !self.set_state(&key, value) {
            match self.request_id(true) {
                Some(id) => OVERLAY.with(|o| {
                    o.borrow_mut().insert((id, name.to_string()), value.to_vec());
                }),
                None => log::warn!("switchyard: writing filter state {key} failed"),
            }
        }
    }
    fn request_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        self.body(true, start, size)
    }
    fn set_request_body(&self, start: usize, size: usize, value: &[u8]) {
        self.set_body(true, start, size, value)
    }
    fn response_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        self.body(false, start, size)
    }
    fn set_response_body(&self, start: usize, size: usize, value: &[u8]) {
        self.set_body(false, start, size, value)
    }
    fn reply(&self, status: u32, headers: &[(&str, &str)], body: &[u8]) {
        if !self.has_stream() {
            return;
        }
        self.settle_route();
        let h: Vec<ModuleHttpHeader> = headers.iter().map(|(k, v)| ModuleHttpHeader::of(k, v)).collect();
        // SAFETY: as above; Envoy copies headers and body.
        unsafe {
            envoy_dynamic_module_callback_http_send_response(
                self.filter,
                status,
                h.as_ptr(),
                h.len(),
                ModuleBuffer::of(body),
                ModuleBuffer::of(b"switchyard"),
            )
        }
    }
    fn now_ms(&self) -> u64 {
        now_ms()
    }
    fn shared_data(&self, key: &str) -> (Option<Vec<u8>>, u32) {
        shared::get(key)
    }
    fn read_shared_data(&self, key: &str, read: &mut dyn FnMut(Option<&[u8]>)) {
        shared::read(key, read)
    }
    fn set_shared_data(&self, key: &str, value: &[u8], cas: u32) -> u32 {
        shared::set(key, value, cas)
    }
    fn define_metric(&self, kind: MetricKind, name: &str) -> Option<u32> {
        metrics::resolve(kind, name)
    }
    fn increment_metric(&self, id: u32, by: i64) {
        self.metric(id, u64::try_from(by).unwrap_or(0))
    }
    fn record_metric(&self, id: u32, value: u64) {
        self.metric(id, value)
    }
    fn random_unit(&self) -> f64 {
        random_unit()
    }
    fn grpc_call(&self, cluster: &str, service: &str, method: &str, message: &[u8], timeout_ms: u32) -> Option<u32> {
        let id = self.callout(cluster, service, method, message, timeout_ms)?;
        let token = self.io.next_token.get().wrapping_add(1).max(1);
        self.io.next_token.set(token);
        self.io.callouts.borrow_mut().push((token, id));
        Some(token)
    }
    fn http_call(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout_ms: u32) -> Option<u32> {
        let id = self.http_callout(cluster, headers, body, timeout_ms)?;
        let token = self.io.next_token.get().wrapping_add(1).max(1);
        self.io.next_token.set(token);
        self.io.callouts.borrow_mut().push((token, id));
        Some(token)
    }
    fn grpc_call_detached(&self, cluster: &str, service: &str, method: &str, message: &[u8], timeout_ms: u32) -> bool {
        // A stream's callouts end with it: the call is queued and the main thread's tick, woken
        // at once, makes it on the configuration's behalf (answer ignored).
        let queued = shared::detach(shared::Detached {
            cluster: cluster.to_string(),
            service: service.to_string(),
            method: method.to_string(),
            message: message.to_vec(),
            timeout_ms,
        });
        if queued {
            // SAFETY: committing is safe from any thread; the scheduler is not deleted while
            // `with_waker` holds its lock.
            shared::with_waker(|w| {
                if let Some(s) = w {
                    unsafe {
                        envoy_dynamic_module_callback_http_filter_config_scheduler_commit(s as ConfigSchedulerPtr, 1)
                    }
                }
            });
        }
        queued
    }
    fn grpc_response(&self, size: usize) -> Option<Vec<u8>> {
        let a = self.io.grpc_answer.borrow();
        Some(a.get(..size.min(a.len())).unwrap_or_default().to_vec())
    }
    fn reply_reaches_filter(&self) -> bool {
        false
    }
    fn resume_request(&self) {
        self.settle_route();
        if self.has_stream() {
            // SAFETY: `filter` is live for this hook.
            unsafe { envoy_dynamic_module_callback_http_filter_continue_decoding(self.filter) }
        }
    }
}

impl Native {
    /// Adds to a counter, sets a gauge or records a histogram sample: the series' family and
    /// label values, through the stream when there is one (else the configuration).
    fn metric(&self, id: u32, value: u64) {
        let Some(series) = metrics::recorded(id) else { return };
        let (kind, family) = (series.kind, series.envoy_id);
        let labels = series.labels();
        let (l, n) = (labels.as_ptr(), labels.len());
        // SAFETY: the label buffers live for the call; a root configuration stays alive while
        // `with_root` holds its lock, `filter` (or `config`) for the hook.
        let status = metrics::with_root(|root| unsafe {
            match (kind, root) {
                (MetricKind::Counter, Some(r)) => envoy_dynamic_module_callback_http_filter_config_increment_counter(
                    r as ConfigEnvoyPtr,
                    family,
                    l,
                    n,
                    value,
                ),
                (MetricKind::Gauge, Some(r)) => {
                    envoy_dynamic_module_callback_http_filter_config_set_gauge(r as ConfigEnvoyPtr, family, l, n, value)
                }
                (MetricKind::Histogram, Some(r)) => {
                    envoy_dynamic_module_callback_http_filter_config_record_histogram_value(
                        r as ConfigEnvoyPtr,
                        family,
                        l,
                        n,
                        value,
                    )
                }
                (MetricKind::Counter, None) => {
                    envoy_dynamic_module_callback_http_filter_config_increment_counter(self.config, family, l, n, value)
                }
                (MetricKind::Gauge, None) => {
                    envoy_dynamic_module_callback_http_filter_config_set_gauge(self.config, family, l, n, value)
                }
                (MetricKind::Histogram, None) => {
                    envoy_dynamic_module_callback_http_filter_config_record_histogram_value(
                        self.config,
                        family,
                        l,
                        n,
                        value,
                    )
                }
            }
        });
        if status != METRICS_SUCCESS {
            log::debug!("switchyard: metric {id} not recorded (status {status})");
        }
    }

    /// Sends a detached call now (the tick's host, on the main thread).
    pub fn send_detached(&self, d: &shared::Detached) -> bool {
        self.callout(&d.cluster, &d.service, &d.method, &d.message, d.timeout_ms).is_some()
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// xorshift64*, seeded per thread from the standard library's per-process random hash keys.
/// Only used for load balancing.
pub fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    RNG.with(|cell| {
        let mut x = cell.get();
        if x == 0 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(now_ms());
            x = h.finish() | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        cell.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    })
}
