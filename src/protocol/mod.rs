//! What the decision filter hands the per-attempt filter through Envoy's retries.
//! - `plan`: the attempt plan both filters read (its codec, the per-attempt record keys)
//! - `outcome`: each attempt's record and outcome class, why Envoy stopped, the final error
//! - `slots`: one slot header per attempt (the plan as Envoy's retries see it)
//! - `rewrite`: the upstream body and path of one attempt, shared by the first and retries
//! - `scope`: which requests are Switchyard's (the route mark); all others pass untouched
//! - `bytes`: little-endian reading without panics, for every decoder above and below
//! - `wire`: proxy-wasm ABI encodings (header maps, property paths), decoded without panics

pub mod base64;
pub mod bytes;
pub mod outcome;
pub mod plan;
pub mod rewrite;
pub mod scope;
pub mod slots;
pub mod wire;

#[cfg(test)]
mod tests;
