//! The pure core of redis-ratelimit: everything that decides, nothing that
//! touches a server.
//!
//! * [`algorithm`] — the rate-limiting algorithms as pure state transitions
//!   `(previous state, now, parameters, cost) → (decision, new state)`, one
//!   per file, with their state codecs;
//! * [`limit`] — the limit grammar (the algorithms' parameters and the
//!   options as commands, `RL.ALL` and policies spell them) and its parse;
//! * [`definition`] — policy definitions and their `DUMP` / `LOAD` text;
//! * [`error`] — every error a command can reply with, in one place;
//! * [`keyword`] — the grammar's keywords, compared without regard to case;
//! * [`time`] — the units (`i64` µs) and their conversions;
//! * [`calendar`] — calendar windows (`DAY` … `YEAR`) in a time zone.
//!
//! The Redis module (`redis-ratelimit`) is the glue around it: it reads the
//! state from a key, reads the server clock once, calls into this crate,
//! writes and replicates the effect. This crate has no `unsafe` code and no
//! `redis-module` in its dependency tree (CI checks both).

#![forbid(unsafe_code)]

pub mod algorithm;
pub mod calendar;
pub mod definition;
pub mod error;
pub mod keyword;
pub mod limit;
pub mod time;
