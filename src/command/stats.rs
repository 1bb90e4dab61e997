//! Statistics since load (or `RL.POLICY RESETSTATS`), per command and per
//! policy, shown by `INFO ratelimit` in the shape of `INFO commandstats`:
//! `ratelimit_cmdstat_rl.gcra:calls_allowed=…,calls_limited=…,tokens_allowed=…,shadow_limited=…,soft_over=…,blocked=…`
//! and `ratelimit_policy_<name>:…` with the same fields.
//! Counting is a few relaxed atomic additions per call: no allocation, no
//! lookup by name.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

use super::answer::Answer;
use crate::algorithm::concurrency::LeaseOp;
use crate::server::info::InfoWriter;

/// What one limit of a call did, as its policy's line counts it.
#[derive(Debug, Clone, Copy)]
pub struct LimitOutcome {
    /// This limit refused the call.
    pub limited: bool,
    /// Refused by a block in force.
    pub blocked: bool,
    /// A `SHADOW` limit that would have refused the call.
    pub shadow_limited: bool,
    /// A `SOFT` limit that admits it beyond its nominal limit.
    pub soft_over: bool,
}

/// The counters of one command or one policy.
pub struct CommandStats {
    /// Allowed calls (refunds and allowed `PEEK`s included).
    allowed: AtomicU64,
    /// Limited calls (blocked ones included).
    limited: AtomicU64,
    /// Tokens taken by allowed calls.
    tokens: AtomicU64,
    /// Calls refused by a block in force.
    blocked: AtomicU64,
    /// Calls a `SHADOW` policy would have refused.
    shadow_limited: AtomicU64,
    /// Calls a `SOFT` policy admitted beyond its nominal limit.
    soft_over: AtomicU64,
}

impl CommandStats {
    pub const fn new() -> Self {
        Self {
            allowed: AtomicU64::new(0),
            limited: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            blocked: AtomicU64::new(0),
            shadow_limited: AtomicU64::new(0),
            soft_over: AtomicU64::new(0),
        }
    }

    fn count(counter: &AtomicU64, yes: bool) {
        if yes {
            counter.fetch_add(1, Ordering::Relaxed);
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
            // A shadow limiter that would have refused took nothing (an
            // `RL.ALL` call's other limits did: `position` is set there).
            if !answer.shadow_limited || answer.position.is_some() {
                let taken = u64::try_from(answer.taken).unwrap_or(0);
                self.tokens.fetch_add(taken, Ordering::Relaxed);
            }
        }
        Self::count(&self.shadow_limited, answer.shadow_limited);
        Self::count(&self.soft_over, answer.soft_over);
    }

    /// Counts what one limit of an `RL.ALL` call did (a policy's line): the
    /// call allowed (it took `taken` tokens), or refused by this limit; a
    /// call refused by another limit only counts here as `shadow_limited`
    /// when this limit is a shadow that would have refused it too.
    pub fn record_limit(&self, limit: LimitOutcome, call_allowed: bool, taken: i64) {
        if call_allowed {
            self.allowed.fetch_add(1, Ordering::Relaxed);
            // A shadow limit that would have refused took nothing.
            if !limit.shadow_limited {
                let taken = u64::try_from(taken).unwrap_or(0);
                self.tokens.fetch_add(taken, Ordering::Relaxed);
            }
        } else if limit.limited {
            self.limited.fetch_add(1, Ordering::Relaxed);
            Self::count(&self.blocked, limit.blocked);
        }
        Self::count(&self.shadow_limited, limit.shadow_limited);
        Self::count(&self.soft_over, call_allowed && limit.soft_over);
    }

    /// Zeroes every counter (`RL.POLICY RESETSTATS`).
    pub fn reset(&self) {
        for counter in [
            &self.allowed,
            &self.limited,
            &self.tokens,
            &self.blocked,
            &self.shadow_limited,
            &self.soft_over,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// The counters by field name, in the order of the `INFO` line.
    pub fn fields(&self) -> [(&'static CStr, u64); 6] {
        [
            (c"calls_allowed", self.allowed.load(Ordering::Relaxed)),
            (c"calls_limited", self.limited.load(Ordering::Relaxed)),
            (c"tokens_allowed", self.tokens.load(Ordering::Relaxed)),
            (
                c"shadow_limited",
                self.shadow_limited.load(Ordering::Relaxed),
            ),
            (c"soft_over", self.soft_over.load(Ordering::Relaxed)),
            (c"blocked", self.blocked.load(Ordering::Relaxed)),
        ]
    }

    /// Writes this command's line.
    pub fn write(&self, out: &mut InfoWriter, name: &CStr) {
        out.dict(name, &self.fields());
    }
}

impl Default for CommandStats {
    fn default() -> Self {
        Self::new()
    }
}

// ---- statistics: INFO ratelimit's `ratelimit_concurrency` line ----

/// Leases acquired (`ACQUIRE` allowed, renewals by `ACQUIRE` included),
/// renewed (`RENEW` allowed), refused (`ACQUIRE` or `RENEW`), released (a
/// `RELEASE` that found a lease), and expired (leases found expired and
/// removed by a call).
pub struct LeaseStats {
    acquired: AtomicU64,
    renewed: AtomicU64,
    refused: AtomicU64,
    released: AtomicU64,
    expired: AtomicU64,
}

/// The counters since load (or `RL.POLICY RESETSTATS`).
pub static LEASE_STATS: LeaseStats = LeaseStats {
    acquired: AtomicU64::new(0),
    renewed: AtomicU64::new(0),
    refused: AtomicU64::new(0),
    released: AtomicU64::new(0),
    expired: AtomicU64::new(0),
};

impl LeaseStats {
    /// Counts a lease operation that wrote (`op` done) and the expired
    /// leases it removed.
    pub fn record_write(&self, op: LeaseOp, expired_leases: u64) {
        let counter = match op {
            LeaseOp::Acquire => &self.acquired,
            LeaseOp::Renew => &self.renewed,
            LeaseOp::Release => &self.released,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.expired.fetch_add(expired_leases, Ordering::Relaxed);
    }

    /// Counts a refused `ACQUIRE` or `RENEW`.
    pub fn record_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Zeroes every counter.
    pub fn reset(&self) {
        for c in [
            &self.acquired,
            &self.renewed,
            &self.refused,
            &self.released,
            &self.expired,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// Writes the `ratelimit_concurrency` line.
    pub fn write(&self, out: &mut InfoWriter) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        out.dict(
            c"concurrency",
            &[
                (c"acquired", load(&self.acquired)),
                (c"renewed", load(&self.renewed)),
                (c"refused", load(&self.refused)),
                (c"released", load(&self.released)),
                (c"expired", load(&self.expired)),
            ],
        );
    }
}
