//! What the caller sees of an answer.
//! - `response`: catalog model id, `provider`, `usage.cost`, wrapped non-JSON errors
//! - `usage`: token usage from the tail of an answer, priced at the endpoint's prices
//! - `sse`, `watch`: complete versus cut streams; what one attempt's answer showed
//! - `ending`: how a routed request ends when every attempt failed
//! - `errors`: error bodies in the caller's API shape
//! - `listing`: `GET /v1/models` and the per-model endpoints listing, from the catalog

pub mod ending;
pub mod errors;
pub mod listing;
pub mod response;
pub mod sse;
pub mod usage;
pub mod watch;
