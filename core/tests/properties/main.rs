//! The property tests of the algorithms: invariants every limiter keeps
//! (never over-admits, expiry equals "no key", state round-trips, refunds
//! and blocks compose), checked with proptest through the crate's public API.

mod bucket_properties;
mod cell_reference;
mod composite_properties;
mod force_properties;
mod harness;
mod strategies;
mod window_properties;
