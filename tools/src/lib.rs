//! Measurement tools (not part of `make test` but for `bench_smoke`): `make bench`'s load
//! generator and mock provider (`load`), and the binaries behind `make bench`, `make soak`,
//! `make bench-routing`, `switchyard-probe` and `switchyard-memory`. Outside the workspace's
//! default members: a plain `cargo build` does not build them.

pub mod floor;
pub mod load;
