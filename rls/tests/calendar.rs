//! Calendar rules (`calendar: true`, `time_zone:`): windows from one local
//! calendar boundary to the next, on every engine (the Functions library
//! takes UTC and fixed offsets, which these rules use).

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::*;

const CALENDAR: &str = "domain: quota
descriptors:
  - key: day_kolkata
    rate_limit: {unit: day, requests_per_unit: 2, calendar: true, time_zone: '+05:30'}
  - key: month_utc
    rate_limit: {unit: month, requests_per_unit: 3, calendar: true}
  - key: month_fixed
    rate_limit: {unit: month, requests_per_unit: 3}
";

/// Seconds from now to the next local midnight at `offset_s` east of UTC.
fn to_next_local_day(offset_s: i64) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let local = now + offset_s;
    (local.div_euclid(86_400) + 1) * 86_400 - local
}

/// Seconds from now to the first of next month, 00:00 UTC.
fn to_next_utc_month() -> i64 {
    let now = jiff::Timestamp::now();
    let today = now.to_zoned(jiff::tz::TimeZone::UTC).date();
    let first = today
        .first_of_month()
        .checked_add(jiff::Span::new().months(1))
        .unwrap();
    let boundary = first.to_zoned(jiff::tz::TimeZone::UTC).unwrap().timestamp();
    boundary.as_second() - now.as_second()
}

#[tokio::test]
async fn calendar_rules_reset_at_the_next_local_boundary() {
    let redis = Redis::start();
    let rls = Rls::start(&redis.url(), CALENDAR, &[]).await;
    let mut client = rls.client().await;
    let one = |k: &str| request("quota", vec![desc(&[(k, "u1")])]);

    // A day in +05:30: two admitted, the third refused until local midnight.
    for left in [1, 0] {
        let r = call(&mut client, one("day_kolkata")).await;
        assert_eq!(statuses(&r), vec![(OK, Some(2), left)]);
    }
    let r = call(&mut client, one("day_kolkata")).await;
    assert_eq!(statuses(&r), vec![(OVER_LIMIT, Some(2), 0)]);
    let reset = r.statuses[0].duration_until_reset.as_ref().unwrap().seconds;
    let want = to_next_local_day(19_800);
    assert!(
        (reset - want).abs() <= 2,
        "day +05:30: reset {reset} s, want {want} s"
    );

    // A calendar month in UTC: reset on the 1st at 00:00, not 30 days on.
    let r = call(&mut client, one("month_utc")).await;
    assert_eq!(statuses(&r), vec![(OK, Some(3), 2)]);
    let reset = r.statuses[0].duration_until_reset.as_ref().unwrap().seconds;
    let want = to_next_utc_month();
    assert!(
        (reset - want).abs() <= 2,
        "month UTC: reset {reset} s, want {want} s"
    );

    // Without calendar: envoy's 30-day month from the epoch, as before.
    let r = call(&mut client, one("month_fixed")).await;
    assert_eq!(statuses(&r), vec![(OK, Some(3), 2)]);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let want = 2_592_000 - now.rem_euclid(2_592_000);
    let reset = r.statuses[0].duration_until_reset.as_ref().unwrap().seconds;
    assert!(
        (reset - want).abs() <= 2,
        "30-day month: reset {reset} s, want {want} s"
    );
}
