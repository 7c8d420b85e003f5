//! Switchyard: OpenRouter-style LLM provider routing as an Envoy proxy-wasm filter.
//!
//! The parts, in the order a request meets them. Everything except `host` is pure Rust with
//! no host calls and is tested natively.
//! - `api`, `surface`: the three APIs (OpenAI, Anthropic, Google), their paths, and what
//!   happens to a request by method and path (route, pass through, answer locally)
//! - `config`: the operator's catalog (providers, models, endpoints), policies and defaults,
//!   compiled once at load; `forwarding`: which caller headers may reach a provider
//! - `providers/`: provider kinds (Azure OpenAI, ...): paths, key header, stream quirks
//! - `routing/`: the routing brain, from request body to an ordered list of endpoints
//! - `protocol/`: what the decision filter hands the per-attempt filter through Envoy's
//!   retries (the plan, its slots, the per-attempt rewrite, the route mark)
//! - `answer/`: what the caller sees (answers, streams, usage and cost, errors, listings)
//! - `translate/`: OpenAI, Anthropic and Google requests, answers, errors and streams
//!   translated into each other (a caller reaching an endpoint of another API)
//! - `limits/`: mesh-wide budgets and provider capacity through a rate limit service
//! - `telemetry`: the usage metrics' names and labels, the span and access-log attributes
//! - `json`: how the module reads and writes JSON (one reader, one writer: module size)
//! - `wiring`: header, metadata and root-id names shared with the generated Envoy config
//! - `filters/`: the two filters over the `Host` seam, with a mock host for native tests
//! - `host/` (Wasm only): the thin proxy-wasm adapter (`Host` over the ABI, SDK callbacks)
//! - `native/` (x86_64 Linux): the same filters as an Envoy dynamic module (feature `native`)
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods))]
// ApiError is only built on the cold (rejecting) path; boxing it buys nothing.
#![allow(clippy::result_large_err)]

pub mod answer;
pub mod api;
pub mod config;
pub mod filters;
pub mod forwarding;
pub mod json;
pub mod limits;
pub mod protocol;
pub mod providers;
pub mod routing;
pub mod surface;
pub mod telemetry;
#[cfg(test)]
mod test_support;
pub mod tokens;
pub mod translate;
pub mod wiring;

#[cfg(target_arch = "wasm32")]
mod host;
#[cfg(not(target_arch = "wasm32"))]
pub mod native;
