//! The sliding window counter over sub-windows (`RL.SLIDINGWINDOW … BUCKETS k`).
//!
//! Source: the system-design notes this project grew from ("500 per minute
//! kept as 60 one-second counters; the sum of the counters of the last minute
//! must not exceed 500"); also the bucketed sliding windows of envoy's and
//! Stripe's limiters. Exact to one sub-window, where the two-window weighted
//! estimate ([`super::sliding_window`]) can be off by up to a window's worth
//! in a burst.
//!
//! The window of `window_us` is split into `k` (2 to [`MAX_BUCKETS`])
//! sub-windows of `s = ⌈window_us / k⌉` µs, aligned to the Unix epoch: the
//! sub-window of an instant `t` has index `⌊t / s⌋`. A request at `now` counts
//! the **k sub-windows ending with the current one** (indexes `j − k + 1 ..= j`
//! for `j = ⌊now / s⌋`), each whole, none weighted, and is allowed when that
//! sum plus its cost stays within `limit`. The counted sub-windows cover the
//! last `(k − 1)·s` to `k·s` µs, so over any interval of length `window` at
//! most `limit` plus the count of one sub-window (the oldest one the interval
//! touches, no longer counted) are admitted.
//!
//! A refused request is retried when enough of the oldest counted sub-windows
//! have left: sub-window `i` stops counting at `(i + k)·s`. The key expires
//! when its newest non-zero sub-window stops counting.
//!
//! **Stored value** (binary, compact): `K`, then the sub-window length `s` and
//! the newest sub-window's index as LEB128 varints (the index zig-zag encoded),
//! then the counts of the newest sub-window and those before it, 4 bytes each
//! (little-endian `u32`), newest first, the oldest zeros left out: at most
//! `1 + 10 + 10 + 4k` bytes, about `8 + 4k` for today's times. A state written
//! with another sub-window length (the `window` or `k` of the key changed) is
//! read conservatively: its counts still inside the window are summed into the
//! current sub-window. If the clock steps back (the newest index lies ahead of
//! now), the stored sub-windows are counted from the newest one.

use super::{Decision, Outcome, RefundWrite, Refunded, Update};
use crate::error::{Error, Result};

/// The most sub-windows.
pub const MAX_BUCKETS: i64 = 60;
/// The fewest sub-windows.
pub const MIN_BUCKETS: i64 = 2;
/// The longest encoded state: the tag, the sub-window length (at most
/// `i64::MAX`: 9 varint bytes), the zigzagged newest index (10), 60 counts.
pub const MAX_STATE_LEN: usize = 1 + 9 + 10 + 4 * MAX_BUCKETS as usize;

/// The counts of the newest sub-windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketCounts {
    /// The sub-window length, µs.
    pub sub_us: i64,
    /// The index (`⌊t / sub_us⌋`) of `counts[0]`'s sub-window.
    pub newest_index: i64,
    /// How many of `counts` are stored.
    pub len: usize,
    /// `counts[i]`: the count of sub-window `newest_index − i`.
    pub counts: [u32; MAX_BUCKETS as usize],
}

impl BucketCounts {
    /// The start of the newest sub-window, µs since the epoch (saturating:
    /// a foreign state may hold any index).
    pub fn latest_us(&self) -> i64 {
        self.newest_index.saturating_mul(self.sub_us)
    }

    fn stored(&self) -> &[u32] {
        &self.counts[..self.len.min(MAX_BUCKETS as usize)]
    }
}

/// Parameters, validated. Build with [`BucketWindow::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketWindow {
    limit: i64,
    window_us: i64,
    buckets: i64,
    sub_us: i64,
}

impl BucketWindow {
    /// Validates `RL.SLIDINGWINDOW key limit window BUCKETS k`: `limit` 1 to
    /// 4294967295, `window_us` ≥ 1, `k` 2 to 60. Errors: [`Error::OutOfRange`],
    /// [`Error::BadPeriod`].
    ///
    /// ```
    /// use ratelimit_core::algorithm::bucket_window::BucketWindow;
    /// // 500 per minute as 60 one-second counters.
    /// let bw = BucketWindow::new(500, 60_000_000, 60).unwrap();
    /// assert_eq!(bw.sub_window_us(), 1_000_000);
    /// ```
    #[inline]
    pub fn new(limit: i64, window_us: i64, buckets: i64) -> Result<Self> {
        super::check_limit_and_window(limit, window_us)?;
        if limit > i64::from(u32::MAX) {
            return Err(Error::OutOfRange {
                arg: "limit",
                bound: "<= 4294967295 with BUCKETS",
            });
        }
        if !(MIN_BUCKETS..=MAX_BUCKETS).contains(&buckets) {
            return Err(Error::OutOfRange {
                arg: "BUCKETS",
                bound: ">= 2 and <= 60",
            });
        }
        let sub_us = window_us.div_euclid(buckets) + i64::from(window_us.rem_euclid(buckets) != 0);
        Ok(Self {
            limit,
            window_us,
            buckets,
            sub_us,
        })
    }

    /// The sub-window length `⌈window / k⌉`, µs.
    pub fn sub_window_us(&self) -> i64 {
        self.sub_us
    }

    /// The limit.
    #[inline]
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// The start of sub-window `index`, µs.
    fn start_of(&self, index: i64) -> Result<i64> {
        index.checked_mul(self.sub_us).ok_or(Error::Overflow)
    }

    /// The state as this limiter reads it at `now_us`: the index of the
    /// current sub-window (`max(⌊now / s⌋, stored newest)`), and the counts of
    /// the counted sub-windows, `view[i]` being that of index `current − i`.
    fn view(
        &self,
        state: Option<&BucketCounts>,
        now_us: i64,
    ) -> Result<(i64, [u32; MAX_BUCKETS as usize])> {
        let k = self.buckets;
        let mut view = [0u32; MAX_BUCKETS as usize];
        let now_index = now_us.div_euclid(self.sub_us);
        let Some(s) = state else {
            return Ok((now_index, view));
        };
        if s.sub_us != self.sub_us {
            // Another sub-window length: sum what is still inside the window
            // into the sub-window of now.
            let window_start_us = now_us.checked_sub(self.window_us).ok_or(Error::Overflow)?;
            let mut sum: u64 = 0;
            for (i, &c) in s.stored().iter().enumerate() {
                let index = s
                    .newest_index
                    .checked_sub(i as i64)
                    .ok_or(Error::Overflow)?;
                let end_us = index
                    .checked_add(1)
                    .and_then(|e| e.checked_mul(s.sub_us))
                    .ok_or(Error::Overflow)?;
                if end_us > window_start_us {
                    sum += u64::from(c);
                }
            }
            view[0] = u32::try_from(sum).unwrap_or(u32::MAX);
            return Ok((now_index, view));
        }
        let current = now_index.max(s.newest_index);
        let shift = current - s.newest_index; // ≥ 0
        for (i, &c) in s.stored().iter().enumerate() {
            let at = shift.checked_add(i as i64).ok_or(Error::Overflow)?;
            if at < k {
                view[at as usize] = c;
            }
        }
        Ok((current, view))
    }

    /// The state for `view` at sub-window `current`; `None` when all is 0.
    fn state_of(&self, current: i64, view: &[u32; MAX_BUCKETS as usize]) -> Option<BucketCounts> {
        let k = self.buckets as usize;
        let first = view[..k].iter().position(|&c| c > 0)?;
        let last = view[..k].iter().rposition(|&c| c > 0)?;
        let mut counts = [0u32; MAX_BUCKETS as usize];
        counts[..=last - first].copy_from_slice(&view[first..=last]);
        Some(BucketCounts {
            sub_us: self.sub_us,
            newest_index: current - first as i64,
            len: last - first + 1,
            counts,
        })
    }

    /// When the newest non-zero sub-window of `view` stops counting (µs), or
    /// `None` when nothing is counted.
    fn empty_at(&self, current: i64, view: &[u32; MAX_BUCKETS as usize]) -> Result<Option<i64>> {
        let k = self.buckets as usize;
        match view[..k].iter().position(|&c| c > 0) {
            Some(i) => Ok(Some(self.start_of(current - i as i64 + self.buckets)?)),
            None => Ok(None),
        }
    }

    fn decision(
        &self,
        limited: bool,
        counted: u64,
        retry_after_us: Option<i64>,
        empty_at_us: Option<i64>,
        now_us: i64,
    ) -> Decision {
        let remaining = u64::try_from(self.limit)
            .unwrap_or(0)
            .saturating_sub(counted);
        Decision {
            limited,
            limit: self.limit,
            remaining: i64::try_from(remaining).unwrap_or(0),
            retry_after_us,
            reset_after_us: empty_at_us.map_or(0, |at| at.saturating_sub(now_us).max(0)),
        }
    }

    /// Decides a request of `cost` tokens at `now_us`.
    ///
    /// ```
    /// use ratelimit_core::algorithm::bucket_window::BucketWindow;
    /// // 2 per minute in 60 one-second counters: 00:50 and 01:05 pass, a
    /// // third at 01:05 does not (the sliding log's answer to the edge burst).
    /// let bw = BucketWindow::new(2, 60_000_000, 60).unwrap();
    /// let s = bw.decide(None, 50_000_000, 1).unwrap().update.unwrap().state;
    /// let s = bw.decide(Some(&s), 65_000_000, 1).unwrap().update.unwrap().state;
    /// let third = bw.decide(Some(&s), 65_000_000, 1).unwrap().decision;
    /// assert!(third.limited);
    /// // The second [00:50, 00:51) stops counting at 01:50.
    /// assert_eq!(third.retry_after_us, Some(45_000_000));
    /// ```
    pub fn decide(
        &self,
        state: Option<&BucketCounts>,
        now_us: i64,
        cost: i64,
    ) -> Result<Outcome<BucketCounts>> {
        let (current, mut view) = self.view(state, now_us)?;
        let k = self.buckets as usize;
        let counted: u64 = view[..k].iter().map(|&c| u64::from(c)).sum();
        let limit = u64::try_from(self.limit).unwrap_or(0);
        let cost_u = u64::try_from(cost.max(0)).unwrap_or(u64::MAX);
        if cost > self.limit {
            let empty = self.empty_at(current, &view)?;
            return Ok(Outcome {
                decision: self.decision(true, counted, None, empty, now_us),
                update: None,
            });
        }
        if counted.saturating_add(cost_u) <= limit {
            let mut update = None;
            if cost_u > 0 {
                // ≤ limit ≤ u32::MAX
                view[0] = u32::try_from(u64::from(view[0]) + cost_u).unwrap_or(u32::MAX);
                if let Some(state) = self.state_of(current, &view) {
                    let expire_at_us = self
                        .empty_at(current, &view)?
                        .ok_or(Error::Internal { what: "no count" })?;
                    update = Some(Update {
                        state,
                        expire_at_us,
                    });
                }
            }
            let empty = self.empty_at(current, &view)?;
            return Ok(Outcome {
                decision: self.decision(false, counted + cost_u, None, empty, now_us),
                update,
            });
        }
        // Refused: the oldest counted sub-windows leave first; sub-window
        // `current − i` stops counting at `(current − i + k)·s`.
        let empty = self.empty_at(current, &view)?;
        let mut left = counted;
        let mut retry_after_us = None;
        for i in (0..k).rev() {
            if view[i] == 0 {
                continue;
            }
            left -= u64::from(view[i]);
            if left + cost_u <= limit {
                let at = self.start_of(current - i as i64 + self.buckets)?;
                retry_after_us = Some(at.checked_sub(now_us).ok_or(Error::Overflow)?.max(1));
                break;
            }
        }
        Ok(Outcome {
            decision: self.decision(true, counted, retry_after_us, empty, now_us),
            update: None,
        })
    }

    /// `FORCE`, as [`super::forced`]: past the limit the current sub-window
    /// counts the cost all the same (debt).
    ///
    /// Errors: [`Error::ForceTooMuch`] when a sub-window would count more
    /// than `u32::MAX` tokens; those of [`BucketWindow::decide`].
    ///
    /// ```
    /// use ratelimit_core::algorithm::bucket_window::BucketWindow;
    /// let bw = BucketWindow::new(2, 60_000_000, 60).unwrap(); // 2 a minute
    /// let out = bw.force(None, 10_000_000, 5).unwrap();
    /// let d = out.decision;
    /// assert_eq!((d.limited, d.remaining), (true, 0));
    /// // The second [00:10, 00:11) stops counting at 01:10.
    /// assert_eq!((d.retry_after_us, d.reset_after_us), (Some(60_000_000), 60_000_000));
    /// ```
    pub fn force(
        &self,
        state: Option<&BucketCounts>,
        now_us: i64,
        cost: i64,
    ) -> Result<Outcome<BucketCounts>> {
        let outcome = self.decide(state, now_us, cost)?;
        if !outcome.decision.limited {
            return Ok(outcome);
        }
        let (current, mut view) = self.view(state, now_us)?;
        let counted = u64::from(view[0]).saturating_add(u64::try_from(cost).unwrap_or(u64::MAX));
        view[0] = u32::try_from(counted).map_err(|_| Error::ForceTooMuch {
            why: crate::error::FORCE_SUB_WINDOW,
        })?;
        let (Some(new_state), Some(expire_at_us)) = (
            self.state_of(current, &view),
            self.empty_at(current, &view)?,
        ) else {
            return Err(Error::Internal { what: "no count" });
        };
        let after = self.decide(Some(&new_state), now_us, 1)?.decision;
        Ok(Outcome {
            decision: super::overshoot(after)?,
            update: Some(Update {
                state: new_state,
                expire_at_us,
            }),
        })
    }

    /// Gives `tokens` back: the newest counted sub-windows lose them first,
    /// none below 0; with nothing left counted the key is deleted.
    pub fn refund(
        &self,
        state: Option<&BucketCounts>,
        now_us: i64,
        tokens: i64,
    ) -> Result<Refunded<BucketCounts>> {
        let Some(s) = state else {
            let d = self.decide(None, now_us, 0)?.decision;
            return Ok(Refunded {
                decision: d,
                write: RefundWrite::Nothing,
            });
        };
        let (current, mut view) = self.view(Some(s), now_us)?;
        let mut give = u64::try_from(tokens.max(0)).unwrap_or(u64::MAX);
        for c in view[..self.buckets as usize].iter_mut() {
            let take = give.min(u64::from(*c));
            *c -= take as u32; // take ≤ *c
            give -= take;
        }
        let new_state = self.state_of(current, &view);
        let decision = self.decide(new_state.as_ref(), now_us, 0)?.decision;
        let write = match new_state {
            None => RefundWrite::Delete,
            Some(state) => RefundWrite::Set(Update {
                state,
                expire_at_us: self
                    .empty_at(current, &view)?
                    .ok_or(Error::Internal { what: "no count" })?,
            }),
        };
        Ok(Refunded { decision, write })
    }
}

/// Writes `value` as a LEB128 varint.
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    loop {
        if value < 0x80 {
            out.push(value as u8);
            return;
        }
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
}

/// Reads a LEB128 varint at the front of `bytes`: the value and the rest.
fn take_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        let part = u64::from(b & 0x7f);
        let shifted = part.checked_shl(7 * i as u32)?;
        if i == 9 && part > 1 {
            return None; // past 64 bits
        }
        value |= shifted;
        if b & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

/// The stored value of `s` (see the module documentation).
pub fn encode(s: &BucketCounts, out: &mut Vec<u8>) {
    out.push(b'K');
    put_varint(out, s.sub_us as u64);
    let zigzag = ((s.newest_index << 1) ^ (s.newest_index >> 63)) as u64;
    put_varint(out, zigzag);
    for &c in s.stored() {
        out.extend_from_slice(&c.to_le_bytes());
    }
}

/// Whether `bytes` looks like a bucketed state (its first byte is `K`):
/// decimal states of the weighted sliding window never start so.
#[inline]
pub fn is_bucket_state(bytes: &[u8]) -> bool {
    bytes.first() == Some(&b'K')
}

/// Reads a stored value; `None` when it is not one [`encode`] writes.
#[inline]
pub fn decode(bytes: &[u8]) -> Option<BucketCounts> {
    let rest = bytes.strip_prefix(b"K")?;
    let (sub_us, rest) = take_varint(rest)?;
    let (zigzag, rest) = take_varint(rest)?;
    let sub_us = i64::try_from(sub_us).ok().filter(|&s| s >= 1)?;
    let newest_index = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
    if rest.is_empty() || rest.len() % 4 != 0 || rest.len() / 4 > MAX_BUCKETS as usize {
        return None;
    }
    let mut counts = [0u32; MAX_BUCKETS as usize];
    for (slot, chunk) in counts.iter_mut().zip(rest.chunks_exact(4)) {
        *slot = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    Some(BucketCounts {
        sub_us,
        newest_index,
        len: rest.len() / 4,
        counts,
    })
}

#[cfg(test)]
mod tests;
