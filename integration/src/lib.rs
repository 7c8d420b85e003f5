//! Test and demo support for Switchyard: mock providers, an Envoy runner, an HTTP client,
//! and the demo catalog shared by `make run` and the integration tests.
#![recursion_limit = "256"]

// The generator and the catalog live in the deploy crate (what ships); the tests use them here.
pub use switchyard_deploy::{catalog, istio, istio_native, oci, ratelimit, render};

pub mod azure_stack;
pub mod catalog_mocks;
pub mod client;
pub mod demo;
pub mod envoy;
pub mod istio_sim;
pub mod market;
pub mod memory;
pub mod mesh;
pub mod mock;
pub mod otlp;
pub mod procfs;
pub mod prometheus;
pub mod rng;
pub mod soak;
pub mod tls;
pub mod token_stack;
pub mod wasm_host;
