//! The seam between the filters and Envoy: everything the two filters ask of the host, as one
//! small trait. The proxy-wasm implementation (`crate::host`, Wasm only) is a thin layer over
//! the ABI; `mock::MockHost` implements it natively for unit tests of the filters' logic.
//!
//! Every method is infallible for the caller: a host error is logged by the implementation
//! and reads as "absent", so no filter code has a host failure path to get wrong (or panic on).

/// What a filter callback tells the host to do with the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    /// Stop iteration (wait for more body, or a local reply was sent).
    Pause,
}

/// The two kinds of Envoy stats the filters define.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    /// Set with `record_metric` (the last value recorded is the value).
    Gauge,
    Histogram,
}

/// `set_shared_data`'s status when another worker wrote the key since it was read.
pub const CAS_MISMATCH: u32 = 8;

pub trait Host {
    /// All request headers in one call (cheaper than several single lookups).
    fn req_headers(&self) -> Vec<(String, String)>;
    fn req_header(&self, name: &str) -> Option<String>;
    /// Replaces a request header, or removes it (`None`).
    fn set_req_header(&self, name: &str, value: Option<&str>);
    fn resp_headers(&self) -> Vec<(String, String)>;
    /// The names of the request headers Envoy and Switchyard put there for themselves
    /// (`internals::is_internal`). By default from `req_headers` (one host call, where calls are
    /// dear: Wasm); a host that lends its headers copies only those names.
    fn internal_req_header_names(&self) -> Vec<String> {
        self.req_headers().into_iter().map(|(k, _)| k).filter(|k| super::internals::is_internal(k)).collect()
    }
    /// The values of a few response headers, in the order asked. By default from
    /// `resp_headers` (one host call); a host with cheap lookups looks each one up instead of
    /// copying every header.
    fn resp_headers_named(&self, names: &[&str]) -> Vec<Option<String>> {
        let all = self.resp_headers();
        names.iter().map(|n| find(&all, n).map(str::to_string)).collect()
    }
    fn set_resp_header(&self, name: &str, value: Option<&str>);
    /// An Envoy attribute or filter-state value by path (`["xds", "cluster_name"]`).
    fn property(&self, path: &[&str]) -> Option<Vec<u8>>;
    fn set_property(&self, path: &[&str], value: &[u8]);
    fn request_body(&self, start: usize, size: usize) -> Option<Vec<u8>>;
    /// proxy-wasm `set_buffer_bytes`: replaces `size` bytes at `start` (a start at or past the
    /// end appends; start 0 and size 0 prepends).
    fn set_request_body(&self, start: usize, size: usize, value: &[u8]);
    fn response_body(&self, start: usize, size: usize) -> Option<Vec<u8>>;
    fn set_response_body(&self, start: usize, size: usize, value: &[u8]);
    /// A local reply: the request goes no further.
    fn reply(&self, status: u32, headers: &[(&str, &str)], body: &[u8]);
    /// Wall clock, milliseconds since the epoch (0 if the host cannot tell).
    fn now_ms(&self) -> u64;
    /// A shared-data value and its CAS token.
    fn shared_data(&self, key: &str) -> (Option<Vec<u8>>, u32);
    /// Reads a shared-data value (None when absent) where it is: `read` gets the bytes without
    /// a copy when the host can lend them (natively: under the store's lock, so `read` must not
    /// call the host). By default a copy from `shared_data`.
    fn read_shared_data(&self, key: &str, read: &mut dyn FnMut(Option<&[u8]>)) {
        read(self.shared_data(key).0.as_deref())
    }
    /// Writes a shared-data value (empty clears it); `cas` 0 writes unconditionally. Returns the
    /// host status (0, or `CAS_MISMATCH` when another worker wrote first).
    fn set_shared_data(&self, key: &str, value: &[u8], cas: u32) -> u32;
    fn define_metric(&self, kind: MetricKind, name: &str) -> Option<u32>;
    fn increment_metric(&self, id: u32, by: i64);
    fn record_metric(&self, id: u32, value: u64);
    /// A uniform draw in [0, 1), for load balancing only.
    fn random_unit(&self) -> f64;
    /// A unary gRPC call to `cluster`, answered through `Filter::on_grpc_response` (or the
    /// root's) with the returned token; None when the host refused it (an unknown cluster).
    fn grpc_call(&self, cluster: &str, service: &str, method: &str, message: &[u8], timeout_ms: u32) -> Option<u32>;
    /// A gRPC call whose answer nobody waits for, made on the root context's behalf so it
    /// survives the stream that makes it (settlements at the access log). False if not sent.
    fn grpc_call_detached(&self, cluster: &str, service: &str, method: &str, message: &[u8], timeout_ms: u32) -> bool;
    /// A plain HTTP call to `cluster` on the root context's behalf (the tick's token fetches):
    /// `headers` carry `:method`, `:path` and `:authority`; `body` is sent when not empty. Answered through the root's HTTP
    /// answer callback with the returned token; None when the host refused it (an unknown
    /// cluster). The filters' streams never make one.
    fn http_call(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout_ms: u32) -> Option<u32> {
        let _ = (cluster, headers, body, timeout_ms);
        None
    }
    /// The message of the gRPC answer being delivered (`size` from the callback).
    fn grpc_response(&self, size: usize) -> Option<Vec<u8>>;
    /// Lets a request the filter paused go on.
    fn resume_request(&self);
    /// Whether the filter's own local reply passes through its response callbacks (proxy-wasm:
    /// yes; Envoy's dynamic modules skip a module's encode hooks for its own reply), so a reply
    /// can be sent with one status and corrected on the way out.
    fn reply_reaches_filter(&self) -> bool {
        true
    }
}

/// Looks a header up in a list from `req_headers`/`resp_headers` (names are lower-case).
pub fn find<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The `:status` of a header list (0 when absent or not a number).
pub fn status_of(headers: &[(String, String)]) -> u16 {
    find(headers, ":status").and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// Times a section under the measurement build (`make profile`: reported with the host calls);
/// elsewhere it only runs `f`.
#[inline(always)]
pub fn span<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    #[cfg(all(feature = "profile", target_arch = "wasm32"))]
    return crate::host::profile::span(name, f);
    #[cfg(not(all(feature = "profile", target_arch = "wasm32")))]
    {
        let _ = name;
        f()
    }
}
