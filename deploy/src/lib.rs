//! What Switchyard ships besides the filter: the Envoy and Istio configuration generator
//! (`envoy`, `istio`; what observers get in `telemetry`), the deployment catalog (`catalog`), `make render` (`render`) and the OCI
//! image writer (`oci`). Only what writing configuration needs: no async runtime, no HTTP or TLS.
#![recursion_limit = "256"]

pub mod catalog;
pub mod envoy;
pub mod gcp;
pub mod istio;
pub mod istio_native;
pub mod istio_variant;
pub mod oci;
pub mod ratelimit;
pub mod render;
pub mod telemetry;
pub mod workload_identity;
