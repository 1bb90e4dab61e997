//! `BLOCK duration`: locking a limiter out after it refused a request.
//!
//! Source: the "block duration" of login and OTP limiters (e.g.
//! rate-limiter-flexible's `blockDuration`, fail2ban's ban time): once a
//! limit is exceeded, every request is refused until the block ends, however
//! much the limiter itself would have refilled by then.
//!
//! A block lives in the limiter's own state, so the key's expiry covers it and
//! replication carries it like any other write. In a string state it is a
//! prefix: `B<blocked_until_us>;` followed by the algorithm's own encoding
//! (empty when the limiter is full). No algorithm's encoding starts with `B`
//! (they are decimal digits and colons), so a state written before blocks
//! existed reads the same, and a blocked state is never read as another one.
//!
//! Rules (applied by [`crate::algorithm::plan::plan`]):
//! * while `now < blocked_until`, every request is limited with `remaining` 0
//!   and `retry_after` at least the time left in the block (longer when the
//!   limiter would still refuse then);
//! * a request refused while `BLOCK d` was asked for blocks the limiter until
//!   `max(blocked_until, now + d)`: a block never shortens one in force, and
//!   refused attempts during a block extend it. That refusal is answered as
//!   one made during the new block ([`blocked_decision`]), so its
//!   `retry_after` already covers the block;
//! * a request whose cost can never be allowed (cost > limit) blocks nothing;
//! * when the block ends the limiter goes on from its state, which the block
//!   left untouched.

use super::{parse_decimal, write_decimal, Decision, STATE_BUF_LEN};
use crate::error::{Error, Result};

/// The byte a blocked string state starts with.
pub const PREFIX: u8 = b'B';

/// Room for the longest blocked state: `B`, the 19 digits of `i64::MAX`,
/// `;` and the algorithm's own encoding.
pub const BLOCKED_BUF_LEN: usize = STATE_BUF_LEN + 21;

/// Splits a stored string into its block (`blocked_until_us`, if any) and
/// the algorithm's own bytes; `None` when a `B` prefix is malformed.
///
/// ```
/// use ratelimit_core::algorithm::block::split;
/// assert_eq!(split(b"1763700000000000"), Some((None, &b"1763700000000000"[..])));
/// assert_eq!(split(b"B1763700060000000;17"), Some((Some(1_763_700_060_000_000), &b"17"[..])));
/// assert_eq!(split(b"B17;"), Some((Some(17), &b""[..])));
/// assert_eq!(split(b"B17"), None);
/// ```
#[inline]
pub fn split(bytes: &[u8]) -> Option<(Option<i64>, &[u8])> {
    match bytes.split_first() {
        Some((&PREFIX, rest)) => {
            let semicolon = rest.iter().position(|&b| b == b';')?;
            let until = parse_decimal(&rest[..semicolon])?;
            Some((Some(until), &rest[semicolon + 1..]))
        }
        _ => Some((None, bytes)),
    }
}

/// Writes `B<blocked_until_us>;` followed by `inner` into `buf`; returns the
/// length. `inner` is at most [`STATE_BUF_LEN`] bytes.
pub fn encode(blocked_until_us: i64, inner: &[u8], buf: &mut [u8; BLOCKED_BUF_LEN]) -> usize {
    let mut digits = [0u8; STATE_BUF_LEN];
    let n = write_decimal(blocked_until_us.max(0), &mut digits, 0);
    buf[0] = PREFIX;
    buf[1..1 + n].copy_from_slice(&digits[..n]);
    buf[1 + n] = b';';
    let inner = &inner[..inner.len().min(STATE_BUF_LEN)];
    let end = 2 + n + inner.len();
    buf[2 + n..end].copy_from_slice(inner);
    end
}

/// Whether a block until `blocked_until_us` is in force at `now_us`.
#[inline]
pub fn in_force(blocked_until_us: Option<i64>, now_us: i64) -> bool {
    blocked_until_us.is_some_and(|until| until > now_us)
}

/// The decision of a request made while a block is in force (or refused
/// and starting or extending one, with the new end): limited,
/// nothing remaining, retry no earlier than the block's end (nor than the
/// limiter itself would allow it; never, when it never would), full again no
/// earlier than the block's end.
#[inline]
pub fn blocked_decision(d: Decision, blocked_until_us: i64, now_us: i64) -> Result<Decision> {
    let left_us = blocked_until_us
        .checked_sub(now_us)
        .ok_or(Error::Overflow)?;
    let never = d.limited && d.retry_after_us.is_none();
    Ok(Decision {
        limited: true,
        limit: d.limit,
        remaining: 0,
        retry_after_us: if never {
            None
        } else {
            Some(left_us.max(d.retry_after_us.unwrap_or(0)))
        },
        reset_after_us: d.reset_after_us.max(left_us),
    })
}

/// What a refused request with `BLOCK block_us` does: the new end of the
/// block, or `None` when it blocks nothing (the cost can never be allowed,
/// or the request was not refused).
#[inline]
pub fn extend(
    d: &Decision,
    blocked_until_us: Option<i64>,
    now_us: i64,
    block_us: i64,
) -> Result<Option<i64>> {
    if !d.limited || d.retry_after_us.is_none() {
        return Ok(None);
    }
    let until = now_us.checked_add(block_us).ok_or(Error::Overflow)?;
    Ok(Some(blocked_until_us.map_or(until, |old| old.max(until))))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::algorithm::table::{decision, S, T0};

    #[test]
    fn a_blocked_state_round_trips_and_old_states_read_unchanged() {
        let mut buf = [0u8; BLOCKED_BUF_LEN];
        let n = encode(T0 + 900 * S, b"1763700000000000:7", &mut buf);
        assert_eq!(&buf[..n], b"B1763700900000000;1763700000000000:7");
        assert_eq!(
            split(&buf[..n]),
            Some((Some(T0 + 900 * S), &b"1763700000000000:7"[..]))
        );
        let n = encode(T0, b"", &mut buf);
        assert_eq!(split(&buf[..n]), Some((Some(T0), &b""[..])));
        for old in [&b"1763700000000000"[..], b"17:3", b"17:3:4", b""] {
            assert_eq!(split(old), Some((None, old)));
        }
        for bad in [&b"B"[..], b"B;", b"Bx;1", b"B-1;", b"B12"] {
            assert_eq!(split(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_longest_blocked_state_fills_the_buffer_exactly() {
        let mut buf = [0u8; BLOCKED_BUF_LEN];
        let inner = [b'9'; STATE_BUF_LEN];
        let n = encode(i64::MAX, &inner, &mut buf);
        assert_eq!(n, BLOCKED_BUF_LEN);
        assert_eq!(split(&buf[..n]), Some((Some(i64::MAX), &inner[..])));
        // A longer inner state is cut to STATE_BUF_LEN bytes.
        let mut long = [b'7'; STATE_BUF_LEN + 5].to_vec();
        long[0] = b'1';
        let n = encode(0, &long, &mut buf);
        assert_eq!(split(&buf[..n]), Some((Some(0), &long[..STATE_BUF_LEN])));
    }

    #[test]
    fn a_block_in_force_refuses_with_at_least_the_time_left() {
        // The limiter would allow: refused anyway, retry when the block ends.
        let allowed = decision(false, 3, None, 2 * S);
        assert_eq!(
            blocked_decision(allowed, T0 + 10 * S, T0).unwrap(),
            decision(true, 0, Some(10 * S), 10 * S)
        );
        // The limiter would still refuse after the block: its retry wins.
        let refused = decision(true, 0, Some(12 * S), 20 * S);
        assert_eq!(
            blocked_decision(refused, T0 + 10 * S, T0).unwrap(),
            decision(true, 0, Some(12 * S), 20 * S)
        );
        // Never allowed stays never.
        let never = decision(true, 5, None, 0);
        assert_eq!(
            blocked_decision(never, T0 + 10 * S, T0).unwrap(),
            decision(true, 0, None, 10 * S)
        );
        assert!(in_force(Some(T0 + 1), T0));
        assert!(!in_force(Some(T0), T0), "a block ends at its instant");
        assert!(!in_force(None, T0));
    }

    #[test]
    fn only_a_refusal_that_could_pass_later_blocks_and_never_for_less() {
        let refused = decision(true, 0, Some(S), S);
        assert_eq!(
            extend(&refused, None, T0, 60 * S).unwrap(),
            Some(T0 + 60 * S)
        );
        // A longer block in force is kept; a shorter one is extended.
        assert_eq!(
            extend(&refused, Some(T0 + 900 * S), T0, 60 * S).unwrap(),
            Some(T0 + 900 * S)
        );
        assert_eq!(
            extend(&refused, Some(T0 + 10 * S), T0, 60 * S).unwrap(),
            Some(T0 + 60 * S)
        );
        let allowed = decision(false, 4, None, S);
        assert_eq!(extend(&allowed, None, T0, 60 * S).unwrap(), None);
        let never = decision(true, 5, None, 0);
        assert_eq!(extend(&never, None, T0, 60 * S).unwrap(), None);
        assert_eq!(extend(&refused, None, i64::MAX, 1), Err(Error::Overflow));
    }
}
