//! A host for the filters' unit tests: header maps, properties, bodies, shared data, a clock
//! and metrics held in memory, with every call logged in order (`calls`), so a test can assert
//! what a filter asked of the host as well as what it left behind. Buffer writes follow
//! Envoy's rules for `set_buffer_bytes` (replace all from 0, prepend at 0 with length 0, append
//! at or past the end); anything else is a test failure, as Envoy would refuse it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::host::{Host, MetricKind, CAS_MISMATCH};

#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u32,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

#[derive(Debug, Default)]
pub struct State {
    pub request_headers: Vec<(String, String)>,
    pub response_headers: Vec<(String, String)>,
    /// By path joined with `/` (`xds/cluster_name`, `switchyard_plan`).
    pub properties: HashMap<String, Vec<u8>>,
    pub request_body: Vec<u8>,
    pub response_body: Vec<u8>,
    /// Shared data: value and CAS token (bumped on every write).
    pub shared: HashMap<String, (Vec<u8>, u32)>,
    pub now_ms: u64,
    /// Metrics by id (a hash of the name, so the filters' per-thread id cache stays right
    /// across tests): counter total and histogram samples.
    pub metrics: HashMap<u32, (i64, Vec<u64>)>,
    pub reply: Option<Reply>,
    /// gRPC calls made: cluster, service/method, message (the token is the index + 1).
    pub grpc_calls: Vec<(String, String, Vec<u8>)>,
    /// The answer `grpc_response` hands out.
    pub grpc_answer: Vec<u8>,
    /// `grpc_call` refuses when set (an unknown cluster).
    pub grpc_refused: bool,
    /// HTTP calls made: cluster and headers (the token is the index + 1).
    pub http_calls: Vec<(String, Vec<(String, String)>)>,
    /// The body of each of `http_calls` (empty for a GET).
    pub http_bodies: Vec<Vec<u8>>,
    pub resumed: u32,
    /// Every host call, in order, with its arguments (`set_req_header x-a=1`).
    pub calls: Vec<String>,
    /// Buffer writes Envoy would refuse.
    pub refused_writes: Vec<String>,
    /// The filter's own replies skip its response callbacks (the native host's behaviour).
    pub reply_skips_filter: bool,
}

/// Cloning shares the state: the filter holds one handle, the test the other.
#[derive(Debug, Clone, Default)]
pub struct MockHost(pub Rc<RefCell<State>>);

fn get<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn set(headers: &mut Vec<(String, String)>, name: &str, value: Option<&str>) {
    headers.retain(|(k, _)| k != name);
    if let Some(v) = value {
        headers.push((name.to_string(), v.to_string()));
    }
}

/// Envoy's `set_buffer_bytes` on a body buffer.
fn write(buffer: &mut Vec<u8>, start: usize, size: usize, value: &[u8]) -> Result<(), String> {
    if start == 0 && size == 0 {
        buffer.splice(0..0, value.iter().copied());
    } else if start == 0 && size >= buffer.len() {
        *buffer = value.to_vec();
    } else if start >= buffer.len() {
        buffer.extend_from_slice(value);
    } else {
        return Err(format!("start {start} size {size} on {} bytes", buffer.len()));
    }
    Ok(())
}

fn slice(buffer: &[u8], start: usize, size: usize) -> Option<Vec<u8>> {
    let end = start.saturating_add(size).min(buffer.len());
    buffer.get(start..end).map(<[u8]>::to_vec)
}

/// FNV-1a 32 of a metric name.
fn metric_id(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

impl MockHost {
    pub fn new() -> MockHost {
        MockHost::default()
    }

    pub fn state(&self) -> std::cell::RefMut<'_, State> {
        self.0.borrow_mut()
    }

    fn log(&self, call: String) {
        self.0.borrow_mut().calls.push(call);
    }

    pub fn with_request_headers(&self, headers: &[(&str, &str)]) {
        self.state().request_headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    }

    pub fn with_response_headers(&self, headers: &[(&str, &str)]) {
        self.state().response_headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    }

    pub fn set_prop(&self, path: &[&str], value: &[u8]) {
        self.state().properties.insert(path.join("/"), value.to_vec());
    }

    pub fn prop(&self, path: &[&str]) -> Option<Vec<u8>> {
        self.0.borrow().properties.get(&path.join("/")).cloned()
    }

    pub fn request_header_value(&self, name: &str) -> Option<String> {
        get(&self.0.borrow().request_headers, name).map(str::to_string)
    }

    pub fn response_header_value(&self, name: &str) -> Option<String> {
        get(&self.0.borrow().response_headers, name).map(str::to_string)
    }

    /// The calls logged since the last `take_calls`.
    pub fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut self.state().calls)
    }

    /// The counter total of the metric named `name` (0 if never incremented).
    pub fn counter(&self, name: &str) -> i64 {
        self.0.borrow().metrics.get(&metric_id(name)).map_or(0, |m| m.0)
    }

    /// The values recorded into the metric named `name` (histogram samples, gauge settings).
    pub fn recorded(&self, name: &str) -> Vec<u64> {
        self.0.borrow().metrics.get(&metric_id(name)).map(|m| m.1.clone()).unwrap_or_default()
    }
}

impl Host for MockHost {
    fn req_headers(&self) -> Vec<(String, String)> {
        self.log("req_headers".into());
        self.0.borrow().request_headers.clone()
    }
    fn req_header(&self, name: &str) -> Option<String> {
        self.log(format!("req_header {name}"));
        self.request_header_value(name)
    }
    fn set_req_header(&self, name: &str, value: Option<&str>) {
        self.log(match value {
            Some(v) => format!("set_req_header {name}={v}"),
            None => format!("remove_req_header {name}"),
        });
        set(&mut self.state().request_headers, name, value);
    }
    fn resp_headers(&self) -> Vec<(String, String)> {
        self.log("resp_headers".into());
        self.0.borrow().response_headers.clone()
    }
    fn set_resp_header(&self, name: &str, value: Option<&str>) {
        self.log(match value {
            Some(v) => format!("set_resp_header {name}={v}"),
            None => format!("remove_resp_header {name}"),
        });
        set(&mut self.state().response_headers, name, value);
    }
    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        self.log(format!("property {}", path.join("/")));
        self.prop(path)
    }
    fn set_property(&self, path: &[&str], value: &[u8]) {
        self.log(format!("set_property {}", path.join("/")));
        self.set_prop(path, value);
    }
    fn request_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        self.log(format!("request_body {start} {size}"));
        slice(&self.0.borrow().request_body, start, size)
    }
    fn set_request_body(&self, start: usize, size: usize, value: &[u8]) {
        self.log(format!("set_request_body {start} {size}"));
        let mut s = self.state();
        if let Err(e) = write(&mut s.request_body, start, size, value) {
            s.refused_writes.push(format!("request body: {e}"));
        }
    }
    fn response_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        self.log(format!("response_body {start} {size}"));
        slice(&self.0.borrow().response_body, start, size)
    }
    fn set_response_body(&self, start: usize, size: usize, value: &[u8]) {
        self.log(format!("set_response_body {start} {size}"));
        let mut s = self.state();
        if let Err(e) = write(&mut s.response_body, start, size, value) {
            s.refused_writes.push(format!("response body: {e}"));
        }
    }
    fn reply(&self, status: u32, headers: &[(&str, &str)], body: &[u8]) {
        self.log(format!("reply {status}"));
        let headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.state().reply = Some(Reply { status, headers, body: body.to_vec() });
    }
    fn now_ms(&self) -> u64 {
        self.log("now_ms".into());
        self.0.borrow().now_ms
    }
    fn shared_data(&self, key: &str) -> (Option<Vec<u8>>, u32) {
        self.log(format!("shared_data {key}"));
        match self.0.borrow().shared.get(key) {
            Some((v, cas)) => (Some(v.clone()), *cas),
            None => (None, 0),
        }
    }
    fn set_shared_data(&self, key: &str, value: &[u8], cas: u32) -> u32 {
        self.log(format!("set_shared_data {key}"));
        let mut s = self.state();
        let current = s.shared.get(key).map_or(0, |e| e.1);
        if cas != 0 && cas != current {
            return CAS_MISMATCH;
        }
        s.shared.insert(key.to_string(), (value.to_vec(), current + 1));
        0
    }
    fn define_metric(&self, _kind: MetricKind, name: &str) -> Option<u32> {
        self.log(format!("define_metric {name}"));
        Some(metric_id(name))
    }
    fn increment_metric(&self, id: u32, by: i64) {
        self.log(format!("increment_metric {id}"));
        self.state().metrics.entry(id).or_default().0 += by;
    }
    fn record_metric(&self, id: u32, value: u64) {
        self.log(format!("record_metric {id}"));
        self.state().metrics.entry(id).or_default().1.push(value);
    }
    fn random_unit(&self) -> f64 {
        0.5
    }
    fn http_call(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout_ms: u32) -> Option<u32> {
        self.log(format!("http_call {cluster} {timeout_ms}ms"));
        let mut s = self.state();
        if s.grpc_refused {
            return None;
        }
        s.http_calls.push((cluster.to_string(), headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()));
        s.http_bodies.push(body.to_vec());
        u32::try_from(s.http_calls.len()).ok()
    }
    fn grpc_call(&self, cluster: &str, service: &str, method: &str, message: &[u8], timeout_ms: u32) -> Option<u32> {
        self.log(format!("grpc_call {cluster} {method} {timeout_ms}ms"));
        let mut s = self.state();
        if s.grpc_refused {
            return None;
        }
        s.grpc_calls.push((cluster.to_string(), format!("{service}/{method}"), message.to_vec()));
        u32::try_from(s.grpc_calls.len()).ok()
    }
    fn grpc_call_detached(&self, cluster: &str, service: &str, method: &str, message: &[u8], timeout_ms: u32) -> bool {
        self.log("detached".into());
        self.grpc_call(cluster, service, method, message, timeout_ms).is_some()
    }
    fn grpc_response(&self, size: usize) -> Option<Vec<u8>> {
        self.log(format!("grpc_response {size}"));
        let a = &self.0.borrow().grpc_answer;
        Some(a.get(..size.min(a.len())).unwrap_or_default().to_vec())
    }
    fn resume_request(&self) {
        self.log("resume_request".into());
        self.state().resumed += 1;
    }
    fn reply_reaches_filter(&self) -> bool {
        !self.0.borrow().reply_skips_filter
    }
}
