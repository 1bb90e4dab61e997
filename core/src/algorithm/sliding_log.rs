//! The sliding window log.
//!
//! Source: the sliding log of API rate limiting (Alex Xu, *System Design
//! Interview*, ch. 4; the Redis sorted-set pattern ZREMRANGEBYSCORE / ZCARD /
//! ZADD). The timestamp of every accepted token is logged; a request of `n`
//! tokens at `now` is allowed when the entries inside the window `(now −
//! window, now]` plus `n` do not exceed `limit`. An entry exactly one window
//! old is outside. Exact for any interval of length `window`, at the cost of
//! one entry per token.
//!
//! The log is read through [`TimestampLog`] and never changed here: the
//! decision says what to remove and add ([`LogUpdate`]), and the command layer
//! applies it to a sorted set (scores = µs timestamps) and propagates it.
//!
//! Entries are logged at `max(now, newest entry)`: if the clock steps back,
//! new entries are logged as late as the newest, so the log stays ordered by
//! insertion and nothing leaves the window early.

use super::{sub, Decision};
use crate::error::{Error, Result};

/// Read access to a log of timestamps (µs since the epoch), ascending.
///
/// Every method is bounded by its arguments, not by the log's length: a log
/// may hold any number of stale entries (older than the window) that later
/// calls remove a few at a time.
pub trait TimestampLog {
    /// The newest timestamp, or `None` for an empty log.
    fn newest_us(&self) -> Result<Option<i64>>;
    /// How many entries have a timestamp `> after_us`, counting at most
    /// `at_most` (the newest ones).
    fn count_after(&self, after_us: i64, at_most: i64) -> Result<i64>;
    /// The timestamp of the `k`-th (0-based) newest entry.
    fn nth_newest(&self, k: i64) -> Result<Option<i64>>;
}

/// An ascending slice of timestamps is a log (used by tests and tools).
impl TimestampLog for [i64] {
    fn newest_us(&self) -> Result<Option<i64>> {
        Ok(self.last().copied())
    }
    fn count_after(&self, after_us: i64, at_most: i64) -> Result<i64> {
        let first = self.partition_point(|&t| t <= after_us);
        Ok(((self.len() - first) as i64).min(at_most))
    }
    fn nth_newest(&self, k: i64) -> Result<Option<i64>> {
        Ok(usize::try_from(k)
            .ok()
            .and_then(|k| self.len().checked_sub(k + 1))
            .map(|i| self[i]))
    }
}

/// The change an allowed request makes to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogUpdate {
    /// Remove the oldest entries with a timestamp `≤ remove_through_us`
    /// (outside the window), at most `remove_at_most` of them: the rest
    /// stays for later calls (decisions count only entries inside the
    /// window) or goes with the key's expiry.
    pub remove_through_us: i64,
    pub remove_at_most: i64,
    /// Add `add_count` entries with timestamp `add_at_us`.
    pub add_at_us: i64,
    pub add_count: i64,
    /// When the newest entry leaves the window: the key expires then.
    pub expire_at_us: i64,
}

impl LogUpdate {
    /// Applies this update to `log` (timestamps in µs, oldest first), the
    /// way the module applies it to the sorted set: the reference of what
    /// the update means, for tests and for any other storage.
    pub fn apply_to(&self, log: &mut Vec<i64>) {
        let stale = log.partition_point(|&t| t <= self.remove_through_us);
        log.drain(..stale.min(usize::try_from(self.remove_at_most).unwrap_or(0)));
        let added = usize::try_from(self.add_count).unwrap_or(0);
        log.resize(log.len() + added, self.add_at_us);
    }
}

/// A decision and, for an allowed request, the change to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOutcome {
    pub decision: Decision,
    pub update: Option<LogUpdate>,
}

/// What a refund does to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRefund {
    pub decision: Decision,
    /// Remove this many of the newest entries (0: nothing changes).
    pub remove_newest: i64,
    /// True when no entry is left inside the window afterwards: delete the key.
    pub delete: bool,
    /// Otherwise the key's new expiry: when the newest entry left leaves the window.
    pub expire_at_us: i64,
}

/// Sliding log parameters, validated. Build with [`SlidingLog::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    limit: i64,
    window_us: i64,
}

impl SlidingLog {
    /// The largest `limit` any setting can allow: one call walks at most
    /// `limit + 1` entries, adds at most `limit` and removes at most
    /// `limit + STALE_REMOVED_PER_CALL`. (The module's own bound,
    /// `sliding-log-max-limit`, is lower by default.)
    pub const MAX_LIMIT: i64 = 100_000;

    /// Stale entries an allowed call removes beyond its cost: the log sheds
    /// old entries faster than calls add them, without one call doing
    /// unbounded work.
    pub const STALE_REMOVED_PER_CALL: i64 = 128;

    /// The most entries a sliding log can hold: its members are distinct
    /// integers below `max(2 × limit, 128)` ≤ `2 × MAX_LIMIT`, plus the block
    /// member. A longer sorted set is not a log (and freeing it could block
    /// the server).
    pub const MAX_ENTRIES: i64 = 2 * Self::MAX_LIMIT + 1;

    /// Every member a log's entry can have is below this (the block's is `B`).
    pub const MEMBER_BOUND: i64 = 2 * Self::MAX_LIMIT;

    /// How far after the call the key's expiry may lie: one window (the
    /// command layer caps every expiry it writes there).
    pub const EXPIRY_HORIZON_US: i64 = crate::time::MAX_PERIOD_US;

    /// Validates `RL.SLIDINGLOG key limit window`: `1 ≤ limit ≤ MAX_LIMIT`
    /// tokens in any window of `window_us` ≥ 1 µs.
    #[inline]
    pub fn new(limit: i64, window_us: i64) -> Result<Self> {
        if limit < 1 {
            return Err(Error::OutOfRange {
                arg: "limit",
                bound: ">= 1",
            });
        }
        // The setting's own maximum: the same refusal as a limit above the
        // setting, so a too-large limit reads one way wherever it is caught.
        if limit > Self::MAX_LIMIT {
            return Err(Error::LimitAboveSetting {
                max: Self::MAX_LIMIT,
            });
        }
        if !(1..=crate::time::MAX_PERIOD_US).contains(&window_us) {
            return Err(Error::BadPeriod { arg: "window" });
        }
        Ok(Self { limit, window_us })
    }

    /// Gives `tokens` back at `now_us`: the `tokens` newest entries inside
    /// the window go (at most `limit + 1`, which bounds the work); none left
    /// inside the window means a full limiter (the key is deleted). The
    /// reply is the log after the refund, `limited` false.
    ///
    /// Errors: those of `log`; [`Error::Overflow`] at the clock's extremes.
    ///
    /// ```
    /// use ratelimit_core::algorithm::sliding_log::SlidingLog;
    /// let sl = SlidingLog::new(3, 1_000_000).unwrap();
    /// let log: &[i64] = &[100_000, 200_000, 300_000];
    /// let r = sl.refund(log, 500_000, 1).unwrap();
    /// assert_eq!((r.remove_newest, r.delete, r.expire_at_us), (1, false, 1_200_000));
    /// assert_eq!(r.decision.remaining, 1);
    /// ```
    pub fn refund<L: TimestampLog + ?Sized>(
        &self,
        log: &L,
        now_us: i64,
        tokens: i64,
    ) -> Result<LogRefund> {
        let newest = log.newest_us()?;
        let t = newest.map_or(now_us, |n| n.max(now_us));
        let cutoff = sub(t, self.window_us)?;
        let live = log.count_after(cutoff, self.limit.saturating_add(1))?;
        let remove_newest = tokens.max(0).min(live);
        let left = live - remove_newest;
        let newest_left = if left > 0 {
            log.nth_newest(remove_newest)?
        } else {
            None
        };
        let expire_at_us = match newest_left {
            Some(ts) => ts.checked_add(self.window_us).ok_or(Error::Overflow)?,
            None => now_us,
        };
        Ok(LogRefund {
            decision: Decision {
                limited: false,
                limit: self.limit,
                remaining: (self.limit - left).max(0),
                retry_after_us: None,
                reset_after_us: if newest_left.is_some() {
                    sub(expire_at_us, now_us)?.max(0)
                } else {
                    0
                },
            },
            remove_newest,
            delete: left == 0 && remove_newest > 0,
            expire_at_us,
        })
    }

    /// The log entries a `FORCE` call of `tokens` may touch, as
    /// `sliding-log-call-budget` counts them: `2 × limit + min(tokens, 2 ×
    /// limit)`. It walks at most `2 × limit + 1` entries (a log in debt
    /// holds up to twice its limit in its window) and adds `tokens`.
    ///
    /// ```
    /// use ratelimit_core::algorithm::sliding_log::SlidingLog;
    /// let sl = SlidingLog::new(1000, 60_000_000).unwrap();
    /// assert_eq!(sl.forced_call_entries(600), 2600);
    /// ```
    #[inline]
    pub fn forced_call_entries(&self, tokens: i64) -> i64 {
        let most = self.limit.saturating_mul(2);
        most.saturating_add(tokens.clamp(0, most))
    }

    /// `FORCE`: decides `cost` tokens at `now_us` and logs them whatever
    /// the limit says (as [`super::forced`]). Past the limit the entries
    /// are logged all the same, at most twice the limit in the window (the
    /// log's members and its call budget hold no more); the reply is
    /// limited, `remaining` 0, `retry_after` until one more token fits (when
    /// the `limit − 1`-th newest entry leaves the window), `reset_after`
    /// until the newest entry leaves it (when the key expires).
    ///
    /// Errors: [`Error::ForceTooMuch`] ([`crate::error::FORCE_LOG_FULL`])
    /// past twice the limit, nothing logged; those of [`SlidingLog::decide`].
    ///
    /// ```
    /// use ratelimit_core::algorithm::sliding_log::SlidingLog;
    /// let sl = SlidingLog::new(2, 1_000_000).unwrap();
    /// let log: &[i64] = &[800_000];
    /// let out = sl.force(log, 1_100_000, 2).unwrap();
    /// let d = out.decision;
    /// assert_eq!((d.limited, d.remaining), (true, 0));
    /// // One more fits once at most one entry is left: not at 1.8 s (when
    /// // 0.8 s leaves, the two logged at 1.1 s stay), at 2.1 s.
    /// assert_eq!((d.retry_after_us, d.reset_after_us), (Some(1_000_000), 1_000_000));
    /// assert_eq!(out.update.unwrap().add_count, 2);
    /// ```
    pub fn force<L: TimestampLog + ?Sized>(
        &self,
        log: &L,
        now_us: i64,
        cost: i64,
    ) -> Result<LogOutcome> {
        let outcome = self.decide(log, now_us, cost)?;
        if !outcome.decision.limited {
            return Ok(outcome);
        }
        let most = self.limit.saturating_mul(2);
        let newest = log.newest_us()?;
        let t = newest.map_or(now_us, |n| n.max(now_us));
        let cutoff = sub(t, self.window_us)?;
        let live = log.count_after(cutoff, most.saturating_add(1))?;
        if cost > most.saturating_sub(live) {
            return Err(Error::ForceTooMuch {
                why: crate::error::FORCE_LOG_FULL,
            });
        }
        let expire_at_us = t.checked_add(self.window_us).ok_or(Error::Overflow)?;
        let until_out = |ts: i64| {
            sub(
                ts.checked_add(self.window_us).ok_or(Error::Overflow)?,
                now_us,
            )
        };
        // One more token fits once `limit − 1` entries are left: when the
        // `limit − 1`-th newest (0-based) of the new log leaves. The `cost`
        // newest are at `t`; before them, the old log's.
        let k = self.limit - 1;
        let retry_after_us = if k < cost {
            until_out(t)?
        } else {
            match log.nth_newest(k - cost)? {
                Some(ts) => until_out(ts)?,
                None => 0, // unreachable: live + cost > limit
            }
        };
        Ok(LogOutcome {
            decision: Decision {
                limited: true,
                limit: self.limit,
                remaining: 0,
                retry_after_us: Some(retry_after_us.max(1)),
                reset_after_us: sub(expire_at_us, now_us)?,
            },
            update: Some(LogUpdate {
                remove_through_us: cutoff,
                remove_at_most: cost.saturating_add(Self::STALE_REMOVED_PER_CALL),
                add_at_us: t,
                add_count: cost,
                expire_at_us,
            }),
        })
    }

    /// The log entries a call of `tokens` (taken or refunded) may touch,
    /// as `sliding-log-call-budget` counts them: `limit + min(tokens,
    /// limit)`. A call walks at most about `limit + 1` entries, adds or
    /// removes at most `tokens` (none when `tokens > limit`: never allowed),
    /// and removes at most [`Self::STALE_REMOVED_PER_CALL`] more that left
    /// the window.
    ///
    /// ```
    /// use ratelimit_core::algorithm::sliding_log::SlidingLog;
    /// let sl = SlidingLog::new(1000, 60_000_000).unwrap();
    /// assert_eq!(sl.call_entries(1), 1001);
    /// assert_eq!(sl.call_entries(5000), 2000);
    /// ```
    #[inline]
    pub fn call_entries(&self, tokens: i64) -> i64 {
        self.limit + tokens.clamp(0, self.limit)
    }

    /// The most tokens that can be taken at once (`limit`).
    #[inline]
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// Decides `cost` tokens at `now_us` against `log`.
    ///
    /// Errors: those of `log`; [`Error::Overflow`] at the clock's extremes.
    ///
    /// ```
    /// use ratelimit_core::algorithm::sliding_log::SlidingLog;
    /// let sl = SlidingLog::new(2, 1_000_000).unwrap();
    /// // Two tokens logged at 0.8 s; at 1.1 s both are still in the window.
    /// let log: &[i64] = &[800_000, 800_000];
    /// let d = sl.decide(log, 1_100_000, 1).unwrap().decision;
    /// assert_eq!((d.limited, d.retry_after_us), (true, Some(700_000)));
    /// ```
    pub fn decide<L: TimestampLog + ?Sized>(
        &self,
        log: &L,
        now_us: i64,
        cost: i64,
    ) -> Result<LogOutcome> {
        let newest = log.newest_us()?;
        let t = newest.map_or(now_us, |n| n.max(now_us));
        let cutoff = sub(t, self.window_us)?;
        // Counting one past the limit is enough to decide exactly.
        let live = log.count_after(cutoff, self.limit.saturating_add(1))?;
        let until_out = |ts: i64| -> Result<i64> {
            ts.checked_add(self.window_us)
                .ok_or(Error::Overflow)
                .and_then(|end| sub(end, now_us))
        };
        let reset_after_us = match newest {
            Some(n) if live > 0 => until_out(n)?,
            _ => 0,
        };
        let refuse = |retry_after_us| LogOutcome {
            decision: Decision {
                limited: true,
                limit: self.limit,
                remaining: (self.limit - live).max(0),
                retry_after_us,
                reset_after_us,
            },
            update: None,
        };
        if cost > self.limit {
            return Ok(refuse(None));
        }
        let cost = cost.max(0);
        if live.saturating_add(cost) > self.limit {
            // Allowed once at most `limit − cost` entries are left in the
            // window: when the (limit − cost)-th newest (0-based) leaves.
            let retry = match log.nth_newest(self.limit - cost)? {
                Some(ts) => until_out(ts)?,
                None => reset_after_us, // unreachable: live > limit − cost
            };
            return Ok(refuse(Some(retry.max(1))));
        }
        let expire_at_us = t.checked_add(self.window_us).ok_or(Error::Overflow)?;
        Ok(LogOutcome {
            decision: Decision {
                limited: false,
                limit: self.limit,
                remaining: self.limit - live - cost,
                retry_after_us: None,
                reset_after_us: if cost > 0 {
                    sub(expire_at_us, now_us)?
                } else {
                    reset_after_us
                },
            },
            update: (cost > 0).then_some(LogUpdate {
                remove_through_us: cutoff,
                remove_at_most: cost.saturating_add(Self::STALE_REMOVED_PER_CALL),
                add_at_us: t,
                add_count: cost,
                expire_at_us,
            }),
        })
    }
}

#[cfg(test)]
mod tests;
