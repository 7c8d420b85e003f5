//! What a callout brought back, as the filters read it: a plain HTTP answer's status and body
//! (the tick's token fetches), a gRPC answer's status and message (the rate limit service).
//! Envoy lends the headers and body chunks for the duration of the hook; both are copied.

use super::abi::*;
use super::grpc::grpc_answer;
use super::hooks::envoy_bytes;
use crate::tokens::MAX_ANSWER_BYTES;

/// A plain HTTP callout's status (0: no answer) and body (at most `MAX_ANSWER_BYTES`).
pub fn http_answer_of(
    result: CalloutResult,
    headers: *const EnvoyHttpHeader,
    headers_size: usize,
    body: *const EnvoyBuffer,
    body_size: usize,
) -> (u16, Vec<u8>) {
    if result != CALLOUT_SUCCESS {
        return (0, Vec::new());
    }
    let mut status = 0;
    if !headers.is_null() {
        // SAFETY: Envoy passes `headers_size` headers valid for the hook.
        for h in unsafe { std::slice::from_raw_parts(headers, headers_size) } {
            if envoy_bytes(EnvoyBuffer { ptr: h.key_ptr, length: h.key_length }) == b":status" {
                let v = envoy_bytes(EnvoyBuffer { ptr: h.value_ptr, length: h.value_length });
                status = std::str::from_utf8(&v).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
            }
        }
    }
    let mut bytes = Vec::new();
    if !body.is_null() {
        // SAFETY: Envoy passes `body_size` chunks valid for the hook.
        for c in unsafe { std::slice::from_raw_parts(body, body_size) } {
            if bytes.len() < MAX_ANSWER_BYTES {
                bytes.extend(envoy_bytes(*c));
            }
        }
    }
    bytes.truncate(MAX_ANSWER_BYTES);
    (status, bytes)
}

/// The gRPC status and message of a callout's answer.
pub fn answer_of(
    result: CalloutResult,
    headers: *const EnvoyHttpHeader,
    headers_size: usize,
    body: *const EnvoyBuffer,
    body_size: usize,
) -> (u32, Vec<u8>) {
    let mut status = None;
    let mut grpc = None;
    if !headers.is_null() {
        // SAFETY: Envoy passes `headers_size` headers valid for the hook.
        for h in unsafe { std::slice::from_raw_parts(headers, headers_size) } {
            let k = envoy_bytes(EnvoyBuffer { ptr: h.key_ptr, length: h.key_length });
            let v = String::from_utf8_lossy(&envoy_bytes(EnvoyBuffer { ptr: h.value_ptr, length: h.value_length }))
                .into_owned();
            match k.as_slice() {
                b":status" => status = Some(v),
                b"grpc-status" => grpc = Some(v),
                _ => {}
            }
        }
    }
    let mut bytes = Vec::new();
    if !body.is_null() {
        // SAFETY: Envoy passes `body_size` chunks valid for the hook.
        for c in unsafe { std::slice::from_raw_parts(body, body_size) } {
            bytes.extend(envoy_bytes(*c));
        }
    }
    grpc_answer(result == CALLOUT_SUCCESS, status.as_deref(), grpc.as_deref(), &bytes)
}
