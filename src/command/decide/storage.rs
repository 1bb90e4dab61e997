//! Planning one limiter over its storage: a string state (with its block),
//! a bucketed sliding window's longer string, or a sliding log's sorted
//! set. Each reads its state, runs the one plan
//! ([`crate::algorithm::plan::plan`]) and turns its change into a
//! [`Write`].

#[allow(clippy::wildcard_imports)]
use super::*;

/// A string write of `inner` (an algorithm's encoding), behind a block
/// until `block_until_us` when one is given.
pub(super) fn string_write(
    block_until_us: Option<i64>,
    inner: &[u8],
    old_len: Option<usize>,
    expire_at_us: i64,
) -> Write {
    let mut buf = [0u8; BLOCKED_BUF_LEN];
    let (len, expire_at_us) = match block_until_us {
        Some(until) => (
            block::encode(until, inner, &mut buf),
            expire_at_us.max(until),
        ),
        None => {
            let len = inner.len().min(STATE_BUF_LEN);
            buf[..len].copy_from_slice(&inner[..len]);
            (len, expire_at_us)
        }
    };
    Write::String {
        buf,
        len,
        old_len,
        expire_at_ms: ceil_ms(expire_at_us),
    }
}

/// A state to write and its expiry (µs); `None`: nothing.
pub(super) type Written<P> = Option<(P, i64)>;

/// A limiter whose state is one string value (behind its block, if any):
/// how to read its state, decide, and write.
pub(super) trait StringState {
    /// The decoded state.
    type State;
    /// A new state as the decision leaves it, until written: the state
    /// itself when small, else its encoding.
    type Pending;
    /// Decodes the bytes after the block; `invalid` for bytes that no
    /// variant of this command wrote.
    fn decode(&self, inner: &[u8], invalid: Error) -> Result<Self::State>;
    /// The latest instant `state` records ([`Algorithm::latest_us`]).
    fn latest_us(&self, state: &Self::State) -> i64;
    /// How far after the call an expiry this limiter writes may lie
    /// ([`Algorithm::EXPIRY_HORIZON_US`]).
    fn expiry_horizon_us(&self) -> i64;
    /// Decides a take: the decision and, when allowed (or `force`d), the
    /// new state with its expiry.
    fn take(
        &self,
        state: Option<&Self::State>,
        now_us: i64,
        cost: i64,
        force: bool,
    ) -> Result<(Decision, Written<Self::Pending>)>;
    /// Decides a refund: the decision and its write (`Some(None)`: the
    /// limiter is full again, delete the key).
    fn refund(
        &self,
        state: Option<&Self::State>,
        now_us: i64,
        tokens: i64,
    ) -> Result<(Decision, Option<Written<Self::Pending>>)>;
    /// The write of a new state, behind a block until `block_until_us`
    /// when given.
    fn write_state(
        block_until_us: Option<i64>,
        state: &Self::Pending,
        old_len: Option<usize>,
        expire_at_us: i64,
    ) -> Write;
    /// The write of stored bytes `inner` behind a block (kept as they are).
    fn write_bytes(
        block_until_us: Option<i64>,
        inner: &[u8],
        old_len: Option<usize>,
        expire_at_us: i64,
    ) -> Write;
}

/// An algorithm whose state fits [`STATE_BUF_LEN`] bytes.
pub(super) struct Fixed<'l, A>(pub &'l A);

impl<A: Algorithm> StringState for Fixed<'_, A> {
    type State = A::State;
    type Pending = A::State;

    #[inline]
    fn decode(&self, inner: &[u8], invalid: Error) -> Result<A::State> {
        A::decode(inner).ok_or_else(|| A::mismatch(inner).unwrap_or(invalid))
    }

    #[inline]
    fn latest_us(&self, state: &A::State) -> i64 {
        A::latest_us(state)
    }

    #[inline]
    fn expiry_horizon_us(&self) -> i64 {
        A::EXPIRY_HORIZON_US
    }

    #[inline(always)] // its FORCE branch out of line: the plain path as before
    fn take(
        &self,
        state: Option<&A::State>,
        now_us: i64,
        cost: i64,
        force: bool,
    ) -> Result<(Decision, Written<A::State>)> {
        if force {
            // The plain decision first: a FORCE that fits costs what a
            // plain call costs; only the overshoot goes out of line.
            let outcome = self.0.decide(state.copied(), now_us, cost)?;
            if outcome.decision.limited {
                return forced_take(self.0, state.copied(), now_us, cost);
            }
            let update = outcome.update.map(|u| (u.state, u.expire_at_us));
            return Ok((outcome.decision, update));
        }
        let outcome = self.0.decide(state.copied(), now_us, cost)?;
        let update = outcome.update.map(|u| (u.state, u.expire_at_us));
        Ok((outcome.decision, update))
    }

    #[inline]
    fn refund(
        &self,
        state: Option<&A::State>,
        now_us: i64,
        tokens: i64,
    ) -> Result<(Decision, Option<Written<A::State>>)> {
        let refunded = self.0.refund(state.copied(), now_us, tokens)?;
        Ok((refunded.decision, refund_write(refunded.write, |s| s)))
    }

    #[inline]
    fn write_state(
        block_until_us: Option<i64>,
        state: &A::State,
        old_len: Option<usize>,
        expire_at_us: i64,
    ) -> Write {
        if block_until_us.is_some() {
            let mut inner = [0u8; STATE_BUF_LEN];
            let len = A::encode(state, &mut inner);
            return string_write(block_until_us, &inner[..len], old_len, expire_at_us);
        }
        // Encoded straight into the write's buffer, whose head always
        // holds a state (so the `None` arm below is never taken).
        const _: () = assert!(BLOCKED_BUF_LEN >= STATE_BUF_LEN);
        let mut buf = [0u8; BLOCKED_BUF_LEN];
        let len = match buf.first_chunk_mut::<STATE_BUF_LEN>() {
            Some(head) => A::encode(state, head),
            None => 0,
        };
        Write::String {
            buf,
            len,
            old_len,
            expire_at_ms: ceil_ms(expire_at_us),
        }
    }

    #[inline]
    fn write_bytes(
        block: Option<i64>,
        inner: &[u8],
        old_len: Option<usize>,
        expire_at_us: i64,
    ) -> Write {
        string_write(block, inner, old_len, expire_at_us)
    }
}

/// `RL.SLIDINGWINDOW … BUCKETS k`, whose counts are longer than a fixed
/// buffer.
pub(super) struct Buckets<'l>(pub &'l BucketWindow);

impl Buckets<'_> {
    /// Encoded at once: the counts are too large to carry through the plan.
    #[inline]
    fn encode(counts: bucket_window::BucketCounts) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(bucket_window::MAX_STATE_LEN);
        bucket_window::encode(&counts, &mut bytes);
        bytes
    }
}

impl StringState for Buckets<'_> {
    type State = bucket_window::BucketCounts;
    type Pending = Vec<u8>;

    #[inline]
    fn decode(&self, inner: &[u8], invalid: Error) -> Result<Self::State> {
        if bucket_window::is_bucket_state(inner) {
            bucket_window::decode(inner).ok_or(invalid)
        } else if SlidingWindow::decode(inner).is_some() {
            Err(Error::BucketsMismatch {
                stored: "without BUCKETS",
            })
        } else {
            Err(invalid)
        }
    }

    #[inline]
    fn latest_us(&self, state: &Self::State) -> i64 {
        state.latest_us()
    }

    #[inline]
    fn expiry_horizon_us(&self) -> i64 {
        // Two windows, as an unbucketed sliding window.
        SlidingWindow::EXPIRY_HORIZON_US
    }

    #[inline]
    fn take(
        &self,
        state: Option<&Self::State>,
        now_us: i64,
        cost: i64,
        force: bool,
    ) -> Result<(Decision, Written<Vec<u8>>)> {
        let outcome = if force {
            forced_buckets(self.0, state, now_us, cost)?
        } else {
            self.0.decide(state, now_us, cost)?
        };
        let update = outcome
            .update
            .map(|u| (Self::encode(u.state), u.expire_at_us));
        Ok((outcome.decision, update))
    }

    #[inline]
    fn refund(
        &self,
        state: Option<&Self::State>,
        now_us: i64,
        tokens: i64,
    ) -> Result<(Decision, Option<Written<Vec<u8>>>)> {
        let refunded = self.0.refund(state, now_us, tokens)?;
        Ok((
            refunded.decision,
            refund_write(refunded.write, Self::encode),
        ))
    }

    #[inline]
    fn write_state(
        block: Option<i64>,
        bytes: &Vec<u8>,
        old_len: Option<usize>,
        expire_at_us: i64,
    ) -> Write {
        bytes_write(block, bytes, old_len, expire_at_us)
    }

    #[inline]
    fn write_bytes(
        block: Option<i64>,
        inner: &[u8],
        old_len: Option<usize>,
        expire_at_us: i64,
    ) -> Write {
        bytes_write(block, inner, old_len, expire_at_us)
    }
}

/// `FORCE`'s state behind a block, out of the plain path.
#[cold]
#[inline(never)]
fn blocked_write<L: StringState>(
    until_us: i64,
    state: &L::Pending,
    old_len: Option<usize>,
    expire_at_us: i64,
) -> Write {
    L::write_state(Some(until_us), state, old_len, expire_at_us)
}

/// `FORCE`'s take past the limit ([`crate::algorithm::forced_past_limit`]),
/// out of the plain path: the plain decision has refused `cost`.
#[cold]
#[inline(never)]
fn forced_take<A: Algorithm>(
    algorithm: &A,
    state: Option<A::State>,
    now_us: i64,
    cost: i64,
) -> Result<(Decision, Written<A::State>)> {
    let outcome = crate::algorithm::forced_past_limit(algorithm, state, now_us, cost)?;
    let update = outcome.update.map(|u| (u.state, u.expire_at_us));
    Ok((outcome.decision, update))
}

/// `FORCE`'s take of a bucketed window, out of the plain path.
#[cold]
#[inline(never)]
fn forced_buckets(
    window: &BucketWindow,
    state: Option<&bucket_window::BucketCounts>,
    now_us: i64,
    cost: i64,
) -> Result<crate::algorithm::Outcome<bucket_window::BucketCounts>> {
    window.force(state, now_us, cost)
}

/// A refund's write: `None` when it changes nothing, `Some(None)` to
/// delete, else the encoded state.
fn refund_write<S, P>(write: RefundWrite<S>, pending: impl FnOnce(S) -> P) -> Option<Written<P>> {
    match write {
        RefundWrite::Nothing => None,
        RefundWrite::Set(u) => Some(Some((pending(u.state), u.expire_at_us))),
        RefundWrite::Delete => Some(None),
    }
}

/// Plans a limiter whose state is one string: reads it (and its block),
/// runs the plan, and turns its change into the write.
pub(super) fn plan_string<'a, L: StringState, P: Put<'a>>(
    key: Key<'a>,
    name: Arg<'a>,
    limiter: &L,
    command: &'static str,
    at: &At,
    out: &mut P,
) -> Result<P::Out> {
    let now_us = at.now_us;
    let invalid = Error::InvalidState { command };
    let stored = if at.fresh { None } else { key.string()? };
    // Longer than any state: not one (read no further).
    if stored.is_some_and(|bytes| bytes.len() > MAX_STATE_BYTES) {
        return Err(invalid);
    }
    let old_len = stored.map(<[u8]>::len);
    let (blocked_until_us, inner_bytes) = match stored {
        None => (None, &[][..]),
        Some(bytes) => block::split(bytes).ok_or(invalid)?,
    };
    let state = if stored.is_none() || (blocked_until_us.is_some() && inner_bytes.is_empty()) {
        None
    } else {
        Some(limiter.decode(inner_bytes, invalid)?)
    };
    let latest_us = state
        .as_ref()
        .map(|s| limiter.latest_us(s))
        .max(blocked_until_us);
    if latest_us.is_some_and(|t| t > now_us.saturating_add(STATE_HORIZON_US)) {
        return Err(Error::ForeignState {
            key: KeyName::new(name.bytes()?),
            command,
            why: NOT_OURS_AHEAD,
        });
    }
    // Every expiry written is at most the horizon ahead: a cap that binds
    // only on a state whose times lie ahead (the clock stepped back).
    let cap_us = now_us.saturating_add(limiter.expiry_horizon_us());
    let force = at.force;
    let p = plan_change(
        at.options.op,
        force,
        |cost| limiter.take(state.as_ref(), now_us, cost, force),
        |tokens| limiter.refund(state.as_ref(), now_us, tokens),
        stored.is_some(),
        blocked_until_us,
        now_us,
        at.block_us(),
    )?;
    let write = match p.change {
        Change::Nothing => Write::Nothing,
        Change::Take((state, expire_at_us)) => {
            L::write_state(None, &state, old_len, expire_at_us.min(cap_us))
        }
        Change::Refund(Some((state, expire_at_us))) => L::write_state(
            p.block_in_force_until_us,
            &state,
            old_len,
            expire_at_us.min(cap_us),
        ),
        Change::Refund(None) => match p.block_in_force_until_us {
            None => Write::Delete,
            Some(until) => L::write_bytes(Some(until), b"", old_len, until),
        },
        Change::TakeBlocked {
            take: (state, expire_at_us),
            until_us,
        } => blocked_write::<L>(until_us, &state, old_len, expire_at_us.min(cap_us)),
        Change::Block { until_us } => {
            let current_us = key
                .abs_expire_ms()?
                .map_or(0, |ms| ms.saturating_mul(1_000))
                .min(cap_us);
            L::write_bytes(Some(until_us), inner_bytes, old_len, current_us)
        }
    };
    Ok(out.put(
        key,
        planned(name, at.modes, at.force, p.decision, p.blocked, write),
    ))
}

/// A bucketed sliding window's value behind a block until `block_until_us`
/// when one is given.
pub(super) fn bytes_write(
    block_until_us: Option<i64>,
    inner: &[u8],
    old_len: Option<usize>,
    expire_at_us: i64,
) -> Write {
    let mut value = Vec::with_capacity(inner.len() + 24);
    let expire_at_us = match block_until_us {
        Some(until) => {
            // The block's prefix, as every string state writes it.
            let mut prefix = [0u8; BLOCKED_BUF_LEN];
            let len = block::encode(until, b"", &mut prefix);
            value.extend_from_slice(&prefix[..len]);
            expire_at_us.max(until)
        }
        None => expire_at_us,
    };
    value.extend_from_slice(inner);
    Write::Bytes {
        value,
        old_len,
        expire_at_ms: ceil_ms(expire_at_us),
    }
}
