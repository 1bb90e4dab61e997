//! Unit tests of `command`.

use super::*;

#[test]
fn replies_round_durations_up_and_mark_never_with_minus_one() {
    let d = Decision {
        limited: true,
        limit: 16,
        remaining: 0,
        retry_after_us: Some(1_000_001),
        reset_after_us: 31_999_999,
    };
    assert_eq!(
        reply_fields(&d, ReplyUnit::Millis),
        [1, 16, 0, 1_001, 32_000]
    );
    // redis-cell's seconds: up only for a non-zero millisecond part.
    assert_eq!(reply_fields(&d, ReplyUnit::Seconds), [1, 16, 0, 1, 32]);
    let soon = Decision {
        retry_after_us: Some(400),
        reset_after_us: 400,
        ..d
    };
    assert_eq!(reply_fields(&soon, ReplyUnit::Seconds), [1, 16, 0, 1, 0]);
    let allowed = Decision {
        limited: false,
        limit: 5,
        remaining: 4,
        retry_after_us: None,
        reset_after_us: 0,
    };
    assert_eq!(reply_fields(&allowed, ReplyUnit::Millis), [0, 5, 4, -1, 0]);
}

#[test]
fn lease_slot_members() {
    use super::store::lease_set::split_member;
    assert_eq!(split_member(b"1:job"), Some((1, &b"job"[..])));
    assert_eq!(split_member(b"12:a:b"), Some((12, &b"a:b"[..])));
    assert_eq!(split_member(b"100000:x"), Some((100_000, &b"x"[..])));
    for bad in [
        &b"B"[..],
        b"0:x",
        b"01:x",
        b"1:",
        b":x",
        b"100001:x",
        b"x:1",
        b"1",
        b"-1:x",
        b"1234567:x",
    ] {
        assert_eq!(split_member(bad), None, "{bad:?}");
    }
}
