//! `ratelimit-rls`: an Envoy rate limit service (`envoy.service.ratelimit.v3`)
//! whose decisions are made by the redis-ratelimit module, one `RL.ALL` per
//! request. See `rls/README.md`.

pub mod config;
