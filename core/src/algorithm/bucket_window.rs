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

use super::{Decision, RefundWrite, Update};
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
    fn stored(&self) -> &[u32] {
        &self.counts[..self.len.min(MAX_BUCKETS as usize)]
    }
}

/// A decision and, for an allowed request or a refund, the state to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketOutcome {
    pub decision: Decision,
    pub update: Option<Update<BucketCounts>>,
}

/// A refund's decision and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketRefund {
    pub decision: Decision,
    pub write: RefundWrite<BucketCounts>,
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
    ) -> Result<BucketOutcome> {
        let (current, mut view) = self.view(state, now_us)?;
        let k = self.buckets as usize;
        let counted: u64 = view[..k].iter().map(|&c| u64::from(c)).sum();
        let limit = u64::try_from(self.limit).unwrap_or(0);
        let cost_u = u64::try_from(cost.max(0)).unwrap_or(u64::MAX);
        if cost > self.limit {
            let empty = self.empty_at(current, &view)?;
            return Ok(BucketOutcome {
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
            return Ok(BucketOutcome {
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
        Ok(BucketOutcome {
            decision: self.decision(true, counted, retry_after_us, empty, now_us),
            update: None,
        })
    }

    /// Gives `tokens` back: the newest counted sub-windows lose them first,
    /// none below 0; with nothing left counted the key is deleted.
    pub fn refund(
        &self,
        state: Option<&BucketCounts>,
        now_us: i64,
        tokens: i64,
    ) -> Result<BucketRefund> {
        let Some(s) = state else {
            let d = self.decide(None, now_us, 0)?.decision;
            return Ok(BucketRefund {
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
        Ok(BucketRefund { decision, write })
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
pub fn is_bucket_state(bytes: &[u8]) -> bool {
    bytes.first() == Some(&b'K')
}

/// Reads a stored value; `None` when it is not one [`encode`] writes.
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
mod tests {
    use super::*;
    use crate::algorithm::table::{MS, S, T0};
    use proptest::prelude::*;

    /// Runs `(at_us, cost)` requests from no key; the decisions and the
    /// state after each.
    fn run(bw: &BucketWindow, requests: &[(i64, i64)]) -> Vec<(Decision, Option<BucketCounts>)> {
        let mut state: Option<(BucketCounts, i64)> = None;
        let mut out = Vec::new();
        for &(at, cost) in requests {
            if state.is_some_and(|(_, expire)| at >= expire) {
                state = None;
            }
            let o = bw.decide(state.as_ref().map(|(s, _)| s), at, cost).unwrap();
            if let Some(u) = o.update {
                state = Some((u.state, u.expire_at_us));
            }
            out.push((o.decision, state.map(|(s, _)| s)));
        }
        out
    }

    #[test]
    fn parameters() {
        assert_eq!(BucketWindow::new(5, 60 * S, 60).unwrap().sub_window_us(), S);
        // ⌈1 s / 7⌉.
        assert_eq!(BucketWindow::new(5, S, 7).unwrap().sub_window_us(), 142_858);
        for (limit, window, k) in [(0, S, 2), (5, 0, 2), (5, S, 1), (5, S, 61), (1 << 32, S, 2)] {
            assert!(
                BucketWindow::new(limit, window, k).is_err(),
                "{limit} {window} {k}"
            );
        }
        assert!(BucketWindow::new(u32::MAX.into(), S, 2).is_ok());
    }

    #[test]
    fn the_seeds_edge_burst_is_refused_as_the_sliding_log_refuses_it() {
        // 2 per minute, 60 one-second counters: 00:50 and 01:05 pass, the
        // third at 01:05 does not; at 01:50 (00:50's second has left) it does.
        let bw = BucketWindow::new(2, 60 * S, 60).unwrap();
        let minute = T0 - T0.rem_euclid(60 * S);
        let got = run(
            &bw,
            &[
                (minute + 50 * S, 1),
                (minute + 65 * S, 1),
                (minute + 65 * S, 1),
                (minute + 110 * S - 1, 1),
                (minute + 110 * S, 1),
            ],
        );
        let limited: Vec<bool> = got.iter().map(|(d, _)| d.limited).collect();
        assert_eq!(limited, [false, false, true, true, false]);
        assert_eq!(got[2].0.retry_after_us, Some(45 * S));
        assert_eq!(got[2].0.reset_after_us, 60 * S); // 01:05's second leaves at 02:05
                                                     // The fixed window admits that burst, and 4 in 15 s with 2 more.
    }

    #[test]
    fn counts_are_kept_per_sub_window_and_leave_one_by_one() {
        // 10 per second in 10 sub-windows of 100 ms.
        let bw = BucketWindow::new(10, S, 10).unwrap();
        let base = T0; // T0 is a whole second
        let got = run(
            &bw,
            &[
                (base, 4),               // sub-window 0: 4
                (base + 250 * MS, 3),    // sub-window 2: 3
                (base + 900 * MS, 3),    // sub-window 9: 3 → 10
                (base + 950 * MS, 1),    // refused: retry when sub-window 0 leaves (at 1.0 s)
                (base + S, 4),           // sub-window 0 left: 6 + 4 = 10
                (base + S + 50 * MS, 1), // refused until sub-window 2 leaves (1.2 s)
            ],
        );
        let summary: Vec<(bool, i64, Option<i64>, i64)> = got
            .iter()
            .map(|(d, _)| (d.limited, d.remaining, d.retry_after_us, d.reset_after_us))
            .collect();
        assert_eq!(
            summary,
            [
                // The newest count leaves k sub-windows after its own.
                (false, 6, None, S),
                (false, 3, None, 950 * MS),
                (false, 0, None, S),
                (true, 0, Some(50 * MS), 950 * MS),
                (false, 0, None, S),
                (true, 0, Some(150 * MS), 950 * MS),
            ]
        );
        // Newest first: 1.0 s (4), 0.9 s (3), then 0.2 s (3).
        let state = got[4].1.unwrap();
        assert_eq!(&state.counts[..state.len], &[4, 3, 0, 0, 0, 0, 0, 0, 3]);
    }

    #[test]
    fn the_whole_limit_at_once_on_an_empty_limiter_and_no_write_for_nothing() {
        let bw = BucketWindow::new(5, S, 10).unwrap();
        assert_eq!(bw.limit(), 5);
        let first = bw.decide(None, T0, 5).unwrap();
        assert!(!first.decision.limited);
        assert_eq!(first.decision.remaining, 0);
        let state = first.update.expect("a write").state;
        // A call of cost 0 decides without writing.
        let zero = bw.decide(Some(&state), T0 + 10 * MS, 0).unwrap();
        assert!(!zero.decision.limited);
        assert_eq!(zero.update, None);
        assert_eq!(bw.decide(None, T0, 0).unwrap().update, None);
    }

    #[test]
    fn a_refund_gives_back_from_the_newest_sub_windows() {
        let bw = BucketWindow::new(10, S, 10).unwrap();
        let s = run(&bw, &[(T0, 3), (T0 + 500 * MS, 2)])[1].1.unwrap();
        let r = bw.refund(Some(&s), T0 + 500 * MS, 3).unwrap();
        let RefundWrite::Set(u) = r.write else {
            panic!("{:?}", r.write)
        };
        assert_eq!(&u.state.counts[..u.state.len], &[2]);
        assert_eq!(u.state.newest_index, s.newest_index - 5);
        assert_eq!(u.expire_at_us, T0 + S);
        assert_eq!((r.decision.remaining, r.decision.limited), (8, false));
        assert_eq!(
            bw.refund(Some(&s), T0 + 500 * MS, 99).unwrap().write,
            RefundWrite::Delete
        );
        assert_eq!(bw.refund(None, T0, 1).unwrap().write, RefundWrite::Nothing);
    }

    #[test]
    fn another_sub_window_length_is_read_conservatively() {
        let ten = BucketWindow::new(10, S, 10).unwrap();
        let s = run(&ten, &[(T0, 6), (T0 + 600 * MS, 3)])[1].1.unwrap();
        // Read with 4 sub-windows of 250 ms at 0.7 s: all 9 still count.
        let four = BucketWindow::new(10, S, 4).unwrap();
        let d = four.decide(Some(&s), T0 + 700 * MS, 2).unwrap().decision;
        assert!(d.limited);
        assert_eq!(d.remaining, 1);
        // At 1.1 s the window is [0.1 s, 1.1 s): the sub-window [0, 0.1 s)
        // has just left it, only the 3 of 0.6 s count.
        let d = four.decide(Some(&s), T0 + 1_100 * MS, 7).unwrap().decision;
        assert!(!d.limited);
        assert_eq!(d.remaining, 0);
        let d = four
            .decide(Some(&s), T0 + 1_100 * MS - 1, 7)
            .unwrap()
            .decision;
        assert!(d.limited, "a µs earlier the 6 of [0, 0.1 s) still count");
    }

    #[test]
    fn codec_round_trips_and_refuses_foreign_values() {
        let bw = BucketWindow::new(1000, 60 * S, 60).unwrap();
        let s = run(&bw, &[(T0, 7), (T0 + 3 * S, 900)])[1].1.unwrap();
        let mut out = Vec::new();
        encode(&s, &mut out);
        assert_eq!(out.len(), 1 + 3 + 5 + 4 * 4);
        assert!(is_bucket_state(&out));
        assert_eq!(decode(&out), Some(s));
        for bad in [
            &b""[..],
            b"K",
            b"K\x01",
            b"K\x01\x02",
            b"K\x01\x02\x01\x02\x03",
            b"K\x00\x02\x01\x00\x00\x00",
            b"K\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
            b"1763700000000000:1:2",
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
        let mut many = vec![b'K', 1, 2];
        many.extend(std::iter::repeat_n(1u8, 4 * 61));
        assert_eq!(decode(&many), None);
        // The extremes: every varint length, the 10th byte's one bit, and
        // the longest state, which MAX_STATE_LEN holds exactly.
        for (sub_us, newest_index) in [
            (1, 0),
            (127, 63),
            (128, 64),
            (255, -65),
            (16_384, 1 << 40),
            (i64::MAX, i64::MIN),
            (i64::MAX, i64::MAX),
        ] {
            let longest = BucketCounts {
                sub_us,
                newest_index,
                len: MAX_BUCKETS as usize,
                counts: [u32::MAX; MAX_BUCKETS as usize],
            };
            out.clear();
            encode(&longest, &mut out);
            assert_eq!(decode(&out), Some(longest), "{sub_us} {newest_index}");
            if newest_index == i64::MIN {
                assert_eq!(out.len(), MAX_STATE_LEN);
            }
        }
        // A 10th byte above 1 is past 64 bits.
        let mut past = vec![b'K', 1];
        past.extend([0xff; 9]);
        past.push(0x02);
        past.extend([0; 4]);
        assert_eq!(decode(&past), None);
        past[11] = 0x01;
        assert!(decode(&past).is_some());
    }

    fn timeline() -> impl Strategy<Value = (i64, i64, i64, Vec<(i64, i64)>)> {
        (1i64..12, 1i64..5_000, 2i64..=12).prop_flat_map(|(limit, window_ms, k)| {
            let window_us = window_ms * 1_000 + 7;
            (
                Just(limit),
                Just(window_us),
                Just(k),
                prop::collection::vec((0..window_us / 3 + 2, 0..=limit + 1), 1..40),
            )
        })
    }

    proptest! {
        /// Over any interval of length `window`, at most `limit` plus the
        /// count of the one sub-window the interval starts in are admitted.
        #[test]
        fn admits_at_most_limit_plus_one_sub_window_per_window((limit, window_us, k, reqs) in timeline()) {
            let bw = BucketWindow::new(limit, window_us, k).unwrap();
            let s = bw.sub_window_us();
            let mut now = T0;
            let mut state: Option<(BucketCounts, i64)> = None;
            let mut admitted: Vec<(i64, i64)> = Vec::new();
            for (dt, cost) in reqs {
                now += dt;
                if state.is_some_and(|(_, e)| now >= e) {
                    state = None;
                }
                let o = bw.decide(state.as_ref().map(|(s, _)| s), now, cost).unwrap();
                if !o.decision.limited && cost > 0 {
                    admitted.push((now, cost));
                }
                if let Some(u) = o.update {
                    state = Some((u.state, u.expire_at_us));
                }
            }
            for &(t, _) in &admitted {
                let in_window: i64 = admitted.iter().filter(|(a, _)| *a >= t && *a < t + window_us).map(|(_, c)| c).sum();
                let first_sub: i64 = admitted.iter().filter(|(a, _)| a.div_euclid(s) == t.div_euclid(s) && *a >= t).map(|(_, c)| c).sum();
                prop_assert!(in_window <= limit + first_sub, "{} in [{}, +{}) with {} in its first sub-window", in_window, t, window_us, first_sub);
            }
        }

        /// A refused request is allowed at `now + retry_after` and refused
        /// 1 µs (and 1 ms, the replies' unit) earlier; the key expires exactly
        /// when it reads as no key.
        #[test]
        fn retry_is_tight_and_expiry_exact((limit, window_us, k, reqs) in timeline()) {
            let bw = BucketWindow::new(limit, window_us, k).unwrap();
            let mut now = T0;
            let mut state: Option<(BucketCounts, i64)> = None;
            for (dt, cost) in reqs {
                now += dt;
                if state.is_some_and(|(_, e)| now >= e) {
                    state = None;
                }
                let before = state.as_ref().map(|(s, _)| *s);
                let o = bw.decide(before.as_ref(), now, cost).unwrap();
                if let (true, Some(retry)) = (o.decision.limited, o.decision.retry_after_us) {
                    prop_assert!(retry >= 1);
                    prop_assert!(!bw.decide(before.as_ref(), now + retry, cost).unwrap().decision.limited);
                    prop_assert!(bw.decide(before.as_ref(), now + retry - 1, cost).unwrap().decision.limited);
                    let ms = crate::time::ceil_ms(retry) * 1_000;
                    prop_assert!(!bw.decide(before.as_ref(), now + ms, cost).unwrap().decision.limited);
                    prop_assert!(bw.decide(before.as_ref(), now + ms - 1_000, cost).unwrap().decision.limited);
                }
                if let Some(u) = o.update {
                    prop_assert_eq!(u.expire_at_us - now, o.decision.reset_after_us);
                    for c in [0, 1, limit, limit + 1] {
                        prop_assert_eq!(
                            bw.decide(Some(&u.state), u.expire_at_us, c).unwrap().decision,
                            bw.decide(None, u.expire_at_us, c).unwrap().decision
                        );
                    }
                    prop_assert!(bw.decide(Some(&u.state), u.expire_at_us - 1, 0).unwrap().decision.remaining < limit);
                    let mut bytes = Vec::new();
                    encode(&u.state, &mut bytes);
                    prop_assert_eq!(decode(&bytes), Some(u.state));
                    prop_assert!(bytes.len() <= 1 + 10 + 10 + 4 * k as usize);
                    state = Some((u.state, u.expire_at_us));
                }
                // A refund never leaves more than the limit.
                if let Some((s, _)) = state {
                    let r = bw.refund(Some(&s), now, 1 + cost).unwrap();
                    prop_assert!(r.decision.remaining <= limit && !r.decision.limited);
                }
            }
        }
    }
}
