//! Panic-free wrappers over the proxy-wasm host calls. The SDK's trait methods unwrap host
//! errors (a panic would abort the VM); these log and carry on instead.

use std::time::UNIX_EPOCH;

use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType};

fn get(map: MapType, name: &str) -> Option<String> {
    hostcalls::get_map_value(map, name).ok().flatten()
}

fn set(map: MapType, name: &str, value: Option<&str>) {
    if let Err(e) = hostcalls::set_map_value(map, name, value) {
        log::warn!("switchyard: setting header {name} failed: {e:?}");
    }
}

/// All request headers in one host call (cheaper than several single lookups).
pub fn req_headers() -> Vec<(String, String)> {
    hostcalls::get_map(MapType::HttpRequestHeaders).unwrap_or_default()
}

/// All response headers in one host call.
pub fn resp_headers() -> Vec<(String, String)> {
    hostcalls::get_map(MapType::HttpResponseHeaders).unwrap_or_default()
}

/// Looks a header up in a list from `req_headers`/`resp_headers` (names are lower-case).
pub fn find<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

pub fn req_header(name: &str) -> Option<String> {
    get(MapType::HttpRequestHeaders, name)
}

pub fn set_req_header(name: &str, value: Option<&str>) {
    set(MapType::HttpRequestHeaders, name, value)
}

pub fn resp_header(name: &str) -> Option<String> {
    get(MapType::HttpResponseHeaders, name)
}

pub fn set_resp_header(name: &str, value: Option<&str>) {
    set(MapType::HttpResponseHeaders, name, value)
}

pub fn property(path: Vec<&str>) -> Option<Vec<u8>> {
    hostcalls::get_property(path).ok().flatten()
}

pub fn set_property(path: Vec<&str>, value: &[u8]) {
    if let Err(e) = hostcalls::set_property(path, Some(value)) {
        log::warn!("switchyard: set_property failed: {e:?}");
    }
}

pub fn request_body(start: usize, size: usize) -> Option<Vec<u8>> {
    hostcalls::get_buffer(BufferType::HttpRequestBody, start, size).ok().flatten()
}

pub fn set_request_body(start: usize, size: usize, value: &[u8]) {
    if let Err(e) = hostcalls::set_buffer(BufferType::HttpRequestBody, start, size, value) {
        log::warn!("switchyard: replacing the request body failed: {e:?}");
    }
}

pub fn response_body(start: usize, size: usize) -> Option<Vec<u8>> {
    hostcalls::get_buffer(BufferType::HttpResponseBody, start, size).ok().flatten()
}

pub fn set_response_body(start: usize, size: usize, value: &[u8]) {
    if let Err(e) = hostcalls::set_buffer(BufferType::HttpResponseBody, start, size, value) {
        log::warn!("switchyard: replacing the response body failed: {e:?}");
    }
}

/// A local reply (the request goes no further).
pub fn reply(status: u32, headers: Vec<(&str, &str)>, body: &[u8]) {
    if let Err(e) = hostcalls::send_http_response(status, headers, Some(body)) {
        log::error!("switchyard: sending a local reply failed: {e:?}");
    }
}

pub fn now_ms() -> u64 {
    hostcalls::get_current_time()
        .unwrap_or(UNIX_EPOCH)
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
