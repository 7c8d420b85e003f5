//! The routing brain: from a request body to the ordered endpoints to try.
//! - `request`: OpenAI-style bodies and the `provider` object
//! - `policy`: operator policies (compliance routes): selection and narrowing
//! - `router`: hard filters, orderings, soft preferences, BYOK, fallback truncation
//! - `auto`: the auto router (`model: "auto"`): classification and model ranking
//! - `routing_cost`: default policy B, the expected cost of a good answer and traffic shares
//! - `health`, `stats`, `outage`, `quality`: live per-endpoint statistics, outages judged
//!   against peers, and bad answers judged from real responses
//! - `decision`: one request from body bytes to the first attempt's rewrite
//! - `wildcard`: `allowed_models`-style `*` patterns; `sorting`: the crate's one stable sort

pub mod auto;
pub mod decision;
pub mod health;
pub mod outage;
pub mod policy;
pub mod presets;
pub mod quality;
pub mod request;
pub mod router;
pub mod routing_cost;
pub mod sorting;
pub mod stats;
pub mod wildcard;
