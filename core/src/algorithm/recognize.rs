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
use super::{block, bucket_window, Algorithm};

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
