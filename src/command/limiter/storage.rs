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

pub(super) fn plan_string<'a, A: Algorithm>(
    key: Key<'a>,
    name: Arg<'a>,
    algorithm: &A,
    command: &'static str,
    at: &At,
) -> Result<(Key<'a>, Planned<'a>)> {
    let now_us = at.now_us;
    let invalid = Error::InvalidState { command };
    let stored = if at.fresh { None } else { key.string()? };
    let old_len = stored.map(<[u8]>::len);
    let (blocked_until_us, inner_bytes) = match stored {
        None => (None, &[][..]),
        Some(bytes) => block::split(bytes).ok_or(invalid)?,
    };
    let state = if stored.is_none() || (blocked_until_us.is_some() && inner_bytes.is_empty()) {
        None
    } else {
        Some(A::decode(inner_bytes).ok_or_else(|| A::mismatch(inner_bytes).unwrap_or(invalid))?)
    };
    let p = plan_change(
        at.options.op,
        |cost| {
            let outcome = algorithm.decide(state, now_us, cost)?;
            Ok((outcome.decision, outcome.update))
        },
        |tokens| {
            let refunded = algorithm.refund(state, now_us, tokens)?;
            Ok((refunded.decision, refund_write(refunded.write)))
        },
        stored.is_some(),
        blocked_until_us,
        now_us,
        at.block_us(),
    )?;
    let encode = |s: &A::State| {
        let mut buf = [0u8; STATE_BUF_LEN];
        let len = A::encode(s, &mut buf);
        (buf, len)
    };
    let write = match p.change {
        Change::Nothing => Write::Nothing,
        Change::Take(u) => {
            let (buf, len) = encode(&u.state);
            string_write(None, &buf[..len], old_len, u.expire_at_us)
        }
        Change::Refund(RefundWrite::Set(u)) => {
            let (buf, len) = encode(&u.state);
            string_write(
                p.block_in_force_until_us,
                &buf[..len],
                old_len,
                u.expire_at_us,
            )
        }
        Change::Refund(_) => match p.block_in_force_until_us {
            None => Write::Delete,
            Some(until) => string_write(Some(until), b"", old_len, until),
        },
        Change::Block { until_us } => {
            let current_us = key
                .abs_expire_ms()?
                .map_or(0, |ms| ms.saturating_mul(1_000));
            string_write(Some(until_us), inner_bytes, old_len, current_us)
        }
    };
    Ok((key, planned(name, at.modes, p.decision, p.blocked, write)))
}

/// A refund's write, `None` when it changes nothing.
pub(super) fn refund_write<S>(write: RefundWrite<S>) -> Option<RefundWrite<S>> {
    match write {
        RefundWrite::Nothing => None,
        w => Some(w),
    }
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
            value.push(block::PREFIX);
            value.extend_from_slice(until.to_string().as_bytes());
            value.push(b';');
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

/// [`plan_string`] for `RL.SLIDINGWINDOW … BUCKETS k`, whose state is longer
/// than a string state's buffer.
pub(super) fn plan_buckets<'a>(
    key: Key<'a>,
    name: Arg<'a>,
    window: &BucketWindow,
    at: &At,
) -> Result<(Key<'a>, Planned<'a>)> {
    let now_us = at.now_us;
    let invalid = Error::InvalidState {
        command: "RL.SLIDINGWINDOW",
    };
    let stored = if at.fresh { None } else { key.string()? };
    let old_len = stored.map(<[u8]>::len);
    let (blocked_until_us, inner_bytes) = match stored {
        None => (None, &[][..]),
        Some(bytes) => block::split(bytes).ok_or(invalid)?,
    };
    let state = if stored.is_none() || (blocked_until_us.is_some() && inner_bytes.is_empty()) {
        None
    } else if bucket_window::is_bucket_state(inner_bytes) {
        Some(bucket_window::decode(inner_bytes).ok_or(invalid)?)
    } else if SlidingWindow::decode(inner_bytes).is_some() {
        return Err(Error::BucketsMismatch {
            stored: "without BUCKETS",
        });
    } else {
        return Err(invalid);
    };
    let encode = |s: &bucket_window::BucketCounts| {
        let mut bytes = Vec::with_capacity(bucket_window::MAX_STATE_LEN);
        bucket_window::encode(s, &mut bytes);
        bytes
    };
    let p = plan_change(
        at.options.op,
        // Encoded at once: the counts are too large to carry through the plan.
        |cost| {
            let outcome = window.decide(state.as_ref(), now_us, cost)?;
            let update = outcome.update.map(|u| (encode(&u.state), u.expire_at_us));
            Ok((outcome.decision, update))
        },
        |tokens| {
            let refunded = window.refund(state.as_ref(), now_us, tokens)?;
            let write = match refunded.write {
                RefundWrite::Nothing => None,
                RefundWrite::Set(u) => Some(Some((encode(&u.state), u.expire_at_us))),
                RefundWrite::Delete => Some(None),
            };
            Ok((refunded.decision, write))
        },
        stored.is_some(),
        blocked_until_us,
        now_us,
        at.block_us(),
    )?;
    let write = match p.change {
        Change::Nothing => Write::Nothing,
        Change::Take((bytes, expire_at_us)) => bytes_write(None, &bytes, old_len, expire_at_us),
        Change::Refund(Some((bytes, expire_at_us))) => {
            bytes_write(p.block_in_force_until_us, &bytes, old_len, expire_at_us)
        }
        Change::Refund(None) => match p.block_in_force_until_us {
            None => Write::Delete,
            Some(until) => bytes_write(Some(until), b"", old_len, until),
        },
        Change::Block { until_us } => {
            let current_us = key
                .abs_expire_ms()?
                .map_or(0, |ms| ms.saturating_mul(1_000));
            bytes_write(Some(until_us), inner_bytes, old_len, current_us)
        }
    };
    Ok((key, planned(name, at.modes, p.decision, p.blocked, write)))
}

pub(super) fn plan_log<'a>(
    ctx: Ctx,
    key: Key<'a>,
    name: Arg<'a>,
    log: &SlidingLog,
    at: &At,
) -> Result<(Key<'a>, Planned<'a>)> {
    let now_us = at.now_us;
    let zset = if at.fresh {
        None
    } else {
        ZsetLog::open(ctx, &key)?
    };
    let blocked_until_us = zset.as_ref().and_then(ZsetLog::blocked_until_us);
    let next_member = zset
        .as_ref()
        .and_then(ZsetLog::newest_member)
        .map_or(0, |m| m.wrapping_add(1));
    let p = plan_change(
        at.options.op,
        |cost| {
            let outcome = match &zset {
                Some(z) => log.decide(z, now_us, cost)?,
                None => log.decide(&[][..], now_us, cost)?,
            };
            Ok((outcome.decision, outcome.update))
        },
        |tokens| {
            let refunded = match &zset {
                Some(z) => log.refund(z, now_us, tokens)?,
                None => log.refund(&[][..], now_us, tokens)?,
            };
            let removes = refunded.remove_newest > 0;
            let write = (
                refunded.remove_newest,
                refunded.delete,
                refunded.expire_at_us,
            );
            Ok((refunded.decision, removes.then_some(write)))
        },
        zset.is_some(),
        blocked_until_us,
        now_us,
        at.block_us(),
    )?;
    let write = match p.change {
        Change::Nothing => Write::Nothing,
        Change::Take(update) => Write::LogTake {
            update,
            next_member,
            limit: log.limit(),
        },
        Change::Refund((remove_newest, delete, expire_at_us)) => {
            let in_force = p.block_in_force_until_us;
            Write::LogRefund {
                remove_newest,
                // A block in force keeps the key.
                delete: delete && in_force.is_none(),
                expire_at_us: in_force.map_or(expire_at_us, |until| until.max(expire_at_us)),
            }
        }
        Change::Block { until_us } => Write::LogBlock { until_us },
    };
    Ok((key, planned(name, at.modes, p.decision, p.blocked, write)))
}
