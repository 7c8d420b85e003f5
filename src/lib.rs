//! Switchyard: OpenRouter-style LLM provider routing as an Envoy proxy-wasm filter.
//!
//! Everything except `host` is pure Rust with no host calls and is tested natively:
//! - `api`: the three APIs (OpenAI, Anthropic, Google), their paths and API sets
//! - `outage`: which endpoints are in a significant outage, judged against their peers
//! - `auto`: the auto router (`model: "auto"`): classification and model ranking
//! - `config`: the operator's catalog (providers, models, endpoints) and routing defaults
//! - `quality`: bad responses (malformed tool calls, empty answers) judged from real answers
//! - `request`: parsing OpenAI-style bodies and the `provider` object
//! - `router`: hard filters, orderings, soft preferences, BYOK, fallback truncation
//! - `health`: the live-statistics view the orderings read
//! - `policy`: operator policies (compliance routes): selection and narrowing
//! - `rewrite`: upstream body/path rewrites and the response `provider` field
//! - `ending`: how a routed request ends (the all-attempts-failed decision)
//! - `errors`: OpenAI-style error bodies
//! - `response`: what the caller sees of an answer (catalog model id, `provider`, `usage.cost`,
//!   streamed chunks, wrapped non-JSON errors, the attempt log)
//! - `listing`: `GET /v1/models` and the per-model endpoints listing, from the catalog
//! - `decision`: one request from body bytes to the first attempt's rewrite
//! - `failover`: the per-attempt plan, rewrite, outcome records and final error
//! - `forwarding`: which caller headers may reach a provider
//! - `surface`: what happens to a request by method and path (route, pass through, answer)
//! - `scope`: which requests are Switchyard's (the route mark); all others pass untouched
//! - `routing_cost`: default policy B, the expected cost of a good answer and traffic shares
//! - `slots`: the plan handed to Envoy's retries (one slot header per attempt)
//! - `stats`: rolling per-endpoint statistics kept in shared data
//! - `usage`: token usage read from the tail of a provider's response
//! - `wildcard`: `allowed_models`-style `*` patterns
//! - `sorting`: the crate's one stable sort (one compiled copy instead of one per call site)
//! - `sse`: telling complete streams from cut ones, and the error event for a cut stream
//! - `usage`: token usage reported at the end of answers, priced at the endpoint's prices
//! - `watch`: what one attempt's answer showed (status, first byte, usage, a cut stream)
//! - `wire`: proxy-wasm ABI encodings (header maps, property paths), decoded without panics
//! - `wiring`: header and metadata names shared with the generated Envoy configuration
//! - `filters`: the two filters (decision, per-attempt) over the `Host` seam, tested natively
//! - `host` (Wasm only): the thin proxy-wasm adapter (`Host` over the ABI, the SDK callbacks)
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]
// ApiError is only built on the cold (rejecting) path; boxing it buys nothing.
#![allow(clippy::result_large_err)]

pub mod api;
pub mod auto;
pub mod config;
pub mod decision;
pub mod ending;
pub mod errors;
pub mod failover;
pub mod filters;
pub mod forwarding;
pub mod health;
pub mod listing;
pub mod outage;
pub mod policy;
pub mod quality;
pub mod request;
pub mod response;
pub mod rewrite;
pub mod router;
pub mod routing_cost;
pub mod scope;
pub mod slots;
pub mod sorting;
pub mod sse;
pub mod stats;
pub mod surface;
#[cfg(test)]
mod test_support;
pub mod usage;
pub mod watch;
pub mod wildcard;
pub mod wire;
pub mod wiring;

#[cfg(target_arch = "wasm32")]
mod host;
