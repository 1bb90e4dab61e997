//! Per-command statistics since load, shown by `INFO ratelimit` in the shape
//! of `INFO commandstats`:
//! `ratelimit_cmdstat_rl.gcra:calls_allowed=…,calls_limited=…,tokens_allowed=…,blocked=…`.
//! Counting is a few relaxed atomic additions per call: no allocation, no
//! lookup by name.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Answer;
use crate::server::info::InfoWriter;

/// The counters of one command.
pub struct CommandStats {
    /// Allowed calls (refunds and allowed `PEEK`s included).
    allowed: AtomicU64,
    /// Limited calls (blocked ones included).
    limited: AtomicU64,
    /// Tokens taken by allowed calls.
    tokens: AtomicU64,
    /// Calls refused by a block in force.
    blocked: AtomicU64,
}

impl CommandStats {
    pub const fn new() -> Self {
        Self {
            allowed: AtomicU64::new(0),
            limited: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            blocked: AtomicU64::new(0),
        }
    }

    /// Counts one answered call.
    pub fn record(&self, answer: &Answer) {
        if answer.decision.limited {
            self.limited.fetch_add(1, Ordering::Relaxed);
            if answer.blocked {
                self.blocked.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            self.allowed.fetch_add(1, Ordering::Relaxed);
            let taken = u64::try_from(answer.taken).unwrap_or(0);
            self.tokens.fetch_add(taken, Ordering::Relaxed);
        }
    }

    /// Writes this command's line.
    pub fn write(&self, out: &mut InfoWriter, name: &CStr) {
        out.dict(
            name,
            &[
                (c"calls_allowed", self.allowed.load(Ordering::Relaxed)),
                (c"calls_limited", self.limited.load(Ordering::Relaxed)),
                (c"tokens_allowed", self.tokens.load(Ordering::Relaxed)),
                (c"blocked", self.blocked.load(Ordering::Relaxed)),
            ],
        );
    }
}

impl Default for CommandStats {
    fn default() -> Self {
        Self::new()
    }
}
