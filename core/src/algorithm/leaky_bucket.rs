//! The leaky bucket as a queue (traffic shaping).
//!
//! Source: J. Turner, "New directions in communications (or which way to the
//! information age?)", IEEE Communications Magazine 24(10), 1986; A. S.
//! Tanenbaum, *Computer Networks*, §5.3 (the leaky bucket as a queue). Accepted
//! requests join a queue of at most `capacity` tokens that drains at
//! `leak_tokens` per `leak_period`. Each accepted request is told how long to
//! wait before doing its work — until the tokens queued ahead of it have
//! drained — so the work leaves the queue at a steady rate, at least one
//! emission interval (`leak_period / leak_tokens`) per token apart, and no
//! request waits more than `capacity` intervals. A request that does not fit
//! is refused, and told when it would fit.
//!
//! As a meter the queue is the token bucket ([`super::token_bucket`]): the
//! queue's level is the bucket's missing tokens, and the same exact rational
//! arithmetic and state encoding apply — the stored instant is when the queue
//! is empty, and the key expires then. What differs is the reply: for an
//! accepted request, `retry_after_us` carries its queueing delay (`0` when
//! the queue was empty).

use super::token_bucket::{FullAt, TokenBucket};
use super::{Algorithm, Outcome, Refunded, Update, STATE_BUF_LEN};
use crate::error::Result;

/// Leaky bucket parameters, validated. Build with [`LeakyBucket::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    queue: TokenBucket,
}

impl LeakyBucket {
    /// Validates `RL.LEAKYBUCKET key capacity leak_tokens leak_period`: a
    /// queue of `capacity` ≥ 1 tokens draining `leak_tokens` ≥ 1 per
    /// `leak_period_us` ≥ 1 µs (at most one token per µs).
    ///
    /// ```
    /// use ratelimit_core::algorithm::{leaky_bucket::LeakyBucket, Algorithm};
    /// // A queue of 3 draining 10 per second: one token every 100 ms.
    /// let lb = LeakyBucket::new(3, 10, 1_000_000).unwrap();
    /// let first = lb.decide(None, 0, 1).unwrap();
    /// let second = lb.decide(first.update.map(|u| u.state), 0, 1).unwrap();
    /// // The second request starts after the first has drained.
    /// assert_eq!(second.decision.retry_after_us, Some(100_000));
    /// ```
    #[inline]
    pub fn new(capacity: i64, leak_tokens: i64, leak_period_us: i64) -> Result<Self> {
        let queue = TokenBucket::with_names(
            capacity,
            leak_tokens,
            leak_period_us,
            ["leak_tokens", "leak_period"],
        )?;
        Ok(Self { queue })
    }

    /// The queue's size in tokens.
    pub fn capacity(&self) -> i64 {
        self.queue.capacity()
    }
}

impl Algorithm for LeakyBucket {
    /// When the queue is empty again (see [`super::token_bucket`]).
    type State = FullAt;

    /// When the bucket is empty.
    fn latest_us(state: &FullAt) -> i64 {
        state.full_at_us
    }

    fn decode(bytes: &[u8]) -> Option<FullAt> {
        TokenBucket::decode(bytes)
    }

    fn encode(state: &FullAt, buf: &mut [u8; STATE_BUF_LEN]) -> usize {
        TokenBucket::encode(state, buf)
    }

    fn decide(&self, state: Option<FullAt>, now_us: i64, cost: i64) -> Result<Outcome<FullAt>> {
        let mut outcome = self.queue.decide(state, now_us, cost)?;
        if !outcome.decision.limited {
            // Accepted: wait until the tokens queued ahead have drained.
            outcome.decision.retry_after_us = Some(self.queue.wait_us(state, now_us)?);
        }
        Ok(outcome)
    }

    /// `tokens` fewer queued, not below empty (the key is deleted then): the
    /// queue's level is the bucket's deficit.
    fn refund(&self, state: Option<FullAt>, now_us: i64, tokens: i64) -> Result<Refunded<FullAt>> {
        self.queue.refund(state, now_us, tokens)
    }

    /// The queue goes past its capacity (`FORCE`): the bucket's deficit
    /// ([`TokenBucket`]'s charge); the key expires when it has drained.
    fn charge(&self, state: Option<FullAt>, now_us: i64, cost: i64) -> Result<Update<FullAt>> {
        self.queue.charge(state, now_us, cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::algorithm::table::{run, MS, S};

    #[test]
    fn a_refund_takes_tokens_out_of_the_queue() {
        use crate::algorithm::RefundWrite;
        let lb = LeakyBucket::new(3, 10, S).unwrap();
        let queued = lb.decide(None, 0, 3).unwrap().update.unwrap().state;
        let r = lb.refund(Some(queued), 0, 2).unwrap();
        assert_eq!(
            (
                r.decision.limited,
                r.decision.remaining,
                r.decision.retry_after_us
            ),
            (false, 2, None)
        );
        assert_eq!(r.decision.reset_after_us, 100 * MS);
        assert_eq!(
            lb.refund(Some(queued), 0, 3).unwrap().write,
            RefundWrite::Delete
        );
    }

    #[test]
    fn accepted_requests_are_delayed_to_a_steady_rate() {
        // Queue of 3, draining 10 per second (100 ms per token).
        run(
            &LeakyBucket::new(3, 10, S).unwrap(),
            &[
                (0, 1, false, 2, Some(0), 100 * MS),
                (0, 1, false, 1, Some(100 * MS), 200 * MS),
                (0, 1, false, 0, Some(200 * MS), 300 * MS),
                // Full: refused until one token has drained.
                (0, 1, true, 0, Some(100 * MS), 300 * MS),
                (50 * MS, 2, true, 0, Some(150 * MS), 250 * MS),
                // 100 ms later one place is free; the request waits 200 ms.
                (100 * MS, 1, false, 0, Some(200 * MS), 300 * MS),
                // Once drained, no wait.
                (1_000 * MS, 2, false, 1, Some(0), 200 * MS),
            ],
        );
    }

    #[test]
    fn a_forced_cost_queues_past_the_capacity() {
        use crate::algorithm::table::run_forced;
        // Queue of 3, draining 10 per second (100 ms per token).
        run_forced(
            &LeakyBucket::new(3, 10, S).unwrap(),
            &[
                (0, 2, true, false, 1, Some(0), 200 * MS),
                // 6 queued: one more fits once 4 have drained.
                (0, 4, true, true, 0, Some(400 * MS), 600 * MS),
                (0, 1, false, true, 0, Some(400 * MS), 600 * MS),
                // Then it waits for the 2 still queued ahead of it.
                (400 * MS, 1, false, false, 0, Some(200 * MS), 300 * MS),
            ],
        );
    }

    #[test]
    fn a_cost_above_the_capacity_never_fits() {
        run(
            &LeakyBucket::new(3, 10, S).unwrap(),
            &[(0, 4, true, 3, None, 0)],
        );
    }

    #[test]
    fn parameters_name_the_leak_arguments() {
        use crate::error::Error;
        assert_eq!(
            LeakyBucket::new(3, 0, S),
            Err(Error::OutOfRange {
                arg: "leak_tokens",
                bound: ">= 1"
            })
        );
        assert_eq!(
            LeakyBucket::new(3, 2, 1),
            Err(Error::RateTooHigh { arg: "leak_tokens" })
        );
        assert_eq!(
            LeakyBucket::new(0, 1, 1),
            Err(Error::OutOfRange {
                arg: "capacity",
                bound: ">= 1"
            })
        );
    }
}
