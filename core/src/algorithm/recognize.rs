//! Whether stored bytes are some limiter's state, whichever algorithm wrote
//! them: under a policy whose algorithm changed, another algorithm's state
//! reads as no key (a new limiter), while a value the module never wrote
//! (an application's own string) still gets an error and is never
//! overwritten.

use super::fixed_window::FixedWindow;
use super::gcra::Gcra;
use super::leaky_bucket::LeakyBucket;
use super::sliding_window::SlidingWindow;
use super::token_bucket::TokenBucket;
use super::{block, bucket_window, Algorithm, STATE_BUF_LEN};

/// The longest string state any command writes: a block's prefix (`B`, 19
/// digits, `;`) and the longest encoding (a bucketed sliding window's). A
/// longer value is no state, known without reading it.
pub const MAX_STATE_BYTES: usize = block::BLOCKED_BUF_LEN - STATE_BUF_LEN + {
    if bucket_window::MAX_STATE_LEN > STATE_BUF_LEN {
        bucket_window::MAX_STATE_LEN
    } else {
        STATE_BUF_LEN
    }
};

/// Whether `bytes` is a string state some command of the module writes
/// (any algorithm or variant, blocked or not; `CL.THROTTLE`'s nanosecond TAT
/// is an integer as GCRA's).
///
/// ```
/// use ratelimit_core::algorithm::recognize::is_limiter_state;
/// assert!(is_limiter_state(b"1795297568062000"));          // GCRA, token bucket
/// assert!(is_limiter_state(b"F1795477676977000:3"));       // FIXEDWINDOW ALIGN FIRST
/// assert!(is_limiter_state(b"B1795306452307000;"));        // a block alone
/// assert!(!is_limiter_state(b"hello") && !is_limiter_state(b""));
/// ```
pub fn is_limiter_state(bytes: &[u8]) -> bool {
    if bytes.len() > MAX_STATE_BYTES {
        return false;
    }
    let Some((blocked_until_us, inner)) = block::split(bytes) else {
        return false;
    };
    if inner.is_empty() {
        return blocked_until_us.is_some();
    }
    Gcra::decode(inner).is_some()
        || TokenBucket::decode(inner).is_some()
        || LeakyBucket::decode(inner).is_some()
        || FixedWindow::decode(inner).is_some()
        || SlidingWindow::decode(inner).is_some()
        || (bucket_window::is_bucket_state(inner) && bucket_window::decode(inner).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_state_is_longer_than_max_state_bytes() {
        // The longest: a block before a bucketed window of every bucket.
        let mut longest = b"B9223372036854775807;".to_vec();
        longest.extend_from_slice(b"K");
        longest.extend_from_slice(&[0xff; 9]);
        longest.extend_from_slice(&[0xff; 9]);
        assert!(longest.len() + 4 * bucket_window::MAX_BUCKETS as usize <= MAX_STATE_BYTES);
        // A long value is refused before it is read.
        let mut digits = vec![b'1'; MAX_STATE_BYTES + 1];
        assert!(!is_limiter_state(&digits));
        digits.truncate(16);
        assert!(is_limiter_state(&digits));
    }
}
