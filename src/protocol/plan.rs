//! The attempt plan: what the decision filter hands every attempt's filter through the
//! request's filter state (Envoy's retries run the per-attempt filter once per attempt), the
//! per-attempt record keys, and the configuration fingerprint that tells a plan made under
//! another configuration.
//!
//! Failover itself is Envoy's retry policy: the decision filter names each attempt's cluster
//! in a slot header (`slots`), the route's cluster specifier reads it before every attempt,
//! and the per-attempt filter rewrites the attempt (`rewrite`) and records its outcome
//! (`outcome`).

use crate::api::Api;
use crate::config::Catalog;
use crate::protocol::bytes::Reader;
/// Filter-state keys (Envoy stores them as `wasm.<key>` on the request's stream info, which the
/// upstream filters of every attempt share).
pub const PLAN_PROPERTY: &str = "switchyard_plan";
/// The plan's key in Envoy's filter state: the routed route matches only requests that carry it
/// (`plan_state_prefix`), so a request the decision filter did not plan (the filter absent from
/// the chain, skipped on that route, or failed open) matches no route to a provider, whatever
/// slot headers it forges. Only a filter can write filter state; a caller cannot.
pub const PLAN_STATE_KEY: &str = "wasm.switchyard_plan";

/// What every encoded plan starts with (its version byte), as the route's filter-state string
/// matcher reads it: a prefix match is the cheapest presence check Envoy's `StringMatcher` has.
pub fn plan_state_prefix() -> String {
    char::from(PLAN_VERSION).to_string()
}
/// Attempt k's record is `switchyard_attempt_<k>`: one key per attempt, so an attempt writes its
/// record without reading the others first.
pub const ATTEMPT_PROPERTY_PREFIX: &str = "switchyard_attempt_";

pub fn attempt_property(attempt: usize) -> String {
    format!("{ATTEMPT_PROPERTY_PREFIX}{attempt}")
}
/// Set by the first-attempt filter when the first attempt's answer is a failure Envoy may
/// retry: `<status>,<retry-after>`, which the second attempt's filter records (that attempt ran
/// without the per-attempt filter).
pub const FIRST_ATTEMPT_PROPERTY: &str = "switchyard_first_attempt";
/// Set by the serving attempt when its answer broke off after the first byte: the downstream
/// filter ends the caller's stream with an error event (value: the SSE event to append).
pub const INTERRUPTED_PROPERTY: &str = "switchyard_interrupted";

/// What every attempt's upstream filter needs to know about the request.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptPlan {
    /// Fingerprint of the catalog `endpoints` index into. Another value means the configuration
    /// was reloaded between the decision and this attempt: `refs` then name the endpoints.
    pub catalog_id: u64,
    pub stream: bool,
    /// Length of the body the downstream filter produced.
    pub body_len: u32,
    /// Length of its `{"model":"<id>"` prefix, replaced per attempt.
    pub prefix_len: u32,
    /// Original request path (header changes persist across attempts: never derive from them).
    pub path: String,
    /// Catalog endpoint index per attempt (in the planner's catalog).
    pub endpoints: Vec<u16>,
    /// The same endpoints by name, valid in any configuration, so a plan survives a reload.
    pub refs: Vec<EndpointRef>,
    /// The downstream filter prepared attempt 1 itself and sent it to the provider's
    /// `first_attempt_cluster`, where no per-attempt Wasm runs: the second attempt's filter
    /// records the first one's failure (from the hook's dynamic metadata).
    pub first_prepared: bool,
    /// The API of the body the decision filter wrote, when it is not the caller's (the first
    /// attempt's endpoint serves the request translated). An attempt in another API than the
    /// written body's takes its body from `body_property(api)`.
    pub body_api: Option<Api>,
}

/// Filter-state key of the request body translated for `api` (`[prefix_len u32 LE][body]`),
/// written by the decision filter for every API of the plan other than the written body's.
pub fn body_property(api: Api) -> String {
    format!("switchyard_body_{}", api.name())
}

/// Filter-state key of the request body in Bedrock's Converse API (an upstream-only API: the
/// body carries no model), written by the decision filter when the plan has an endpoint that
/// takes it (`Kind::converse`).
pub const CONVERSE_BODY_PROPERTY: &str = "switchyard_body_converse";

/// `[prefix_len u32 LE][body]`: a stored body and the length of its `{"model":"..."` prefix.
pub fn encode_body(prefix_len: usize, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&u32::try_from(prefix_len).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(body);
    out
}

pub fn decode_body(b: &[u8]) -> Option<(usize, &[u8])> {
    let (len, body) = b.split_first_chunk::<4>()?;
    let prefix_len = u32::from_le_bytes(*len) as usize;
    (prefix_len <= body.len()).then_some((prefix_len, body))
}

/// An endpoint by name: what an attempt needs from the configuration that planned it.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRef {
    pub model: String,
    pub slug: String,
    pub upstream_model: String,
}

const PLAN_VERSION: u8 = 3;
/// Plans of the previous version (no `first_prepared` flag) still decode.
pub(crate) const PLAN_VERSION_2: u8 = 2;

fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    let n = b.len().min(u16::MAX as usize);
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.extend_from_slice(b.get(..n).unwrap_or(&[]));
}

impl AttemptPlan {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.path.len() + 2 * self.endpoints.len());
        out.push(PLAN_VERSION);
        out.extend_from_slice(&self.catalog_id.to_le_bytes());
        let body_api = self.body_api.map_or(0, |a| a.index() as u8 + 1);
        out.push(u8::from(self.stream) | (u8::from(self.first_prepared) << 1) | (body_api << 2));
        out.extend_from_slice(&self.body_len.to_le_bytes());
        out.extend_from_slice(&self.prefix_len.to_le_bytes());
        let path = self.path.as_bytes();
        let plen = path.len().min(u16::MAX as usize);
        out.extend_from_slice(&(plen as u16).to_le_bytes());
        out.extend_from_slice(path.get(..plen).unwrap_or(&[]));
        out.push(self.endpoints.len().min(255) as u8);
        for e in self.endpoints.iter().take(255) {
            out.extend_from_slice(&e.to_le_bytes());
        }
        out.push(self.refs.len().min(255) as u8);
        for r in self.refs.iter().take(255) {
            put_str(&mut out, &r.model);
            put_str(&mut out, &r.slug);
            put_str(&mut out, &r.upstream_model);
        }
        out
    }

    /// This configuration's endpoint index for each attempt (None: not in this configuration).
    pub fn local_endpoints(&self, catalog: &Catalog, catalog_id: u64) -> Vec<Option<usize>> {
        if self.catalog_id == catalog_id {
            return self.endpoints.iter().map(|&i| Some(i as usize)).collect();
        }
        self.refs.iter().map(|r| catalog.find_endpoint(&r.model, &r.slug)).collect()
    }

    pub fn decode(b: &[u8]) -> Option<AttemptPlan> {
        let mut r = Reader::new(b);
        let version = r.u8()?;
        if version != PLAN_VERSION && version != PLAN_VERSION_2 {
            return None;
        }
        let catalog_id = r.u64()?;
        let flags = r.u8()?;
        let stream = flags & 1 != 0;
        let first_prepared = version == PLAN_VERSION && flags & 2 != 0;
        let body_api = Api::ALL.get(usize::from((flags >> 2) & 7).wrapping_sub(1)).copied();
        let body_len = r.u32()?;
        let prefix_len = r.u32()?;
        let plen = r.u16()? as usize;
        let path = String::from_utf8(r.take(plen)?.to_vec()).ok()?;
        let n = r.u8()? as usize;
        let mut endpoints = Vec::with_capacity(n);
        for _ in 0..n {
            endpoints.push(r.u16()?);
        }
        let n = r.u8()? as usize;
        let mut refs = Vec::with_capacity(n);
        for _ in 0..n {
            let model = r.string()?;
            let slug = r.string()?;
            let upstream_model = r.string()?;
            refs.push(EndpointRef { model, slug, upstream_model });
        }
        Some(AttemptPlan { catalog_id, stream, body_len, prefix_len, path, endpoints, refs, first_prepared, body_api })
    }
}

/// FNV-1a, used to fingerprint the configuration bytes.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
