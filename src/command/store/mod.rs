//! Storage: the sorted sets the commands keep, read and written. The
//! checked walks both kinds share ([`checked_zset`]), the sliding log
//! ([`sliding_log`]) and the lease set of a concurrency limit
//! ([`lease_set`]). Below `decide/`, which plans over them; it imports
//! nothing above it (`scripts/check-layers.sh` checks): handlers → decide →
//! store → stats.

mod checked_zset;
pub mod lease_set;
pub mod sliding_log;
