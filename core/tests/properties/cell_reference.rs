//! `CL.THROTTLE` against redis-cell 0.5.0, with an injected clock.
//!
//! [`RedisCell`] is a model of redis-cell's published arithmetic, written
//! from its `src/cell/mod.rs` (`Rate::per_period`, `RateLimiter::new`,
//! `rate_limit`) and `src/lib.rs` (the reply's seconds): nanosecond
//! `time::Duration`s, `f64` where redis-cell uses `f64`. The table holds
//! redis-cell's replies for call sequences; each is checked against the model
//! and against [`CellGcra`] through the reply conversion the command uses.
//!
//! Our replies equal redis-cell's except where redis-cell's is not honest:
//! * a limited reply's `retry_after` of 0 (a wait under 1 ms): we say 1;
//! * a `remaining` above `limit`, or of `quantity` or more in a reply that
//!   refuses `quantity` (redis-cell divides µs-truncated values): we cap it.

use ratelimit_core::algorithm::cell::{reply_secs, retry_after_secs, CellGcra};
use ratelimit_core::algorithm::Algorithm;

/// One second, in µs.
const S: i64 = 1_000_000;
/// The table tests' instant (src/algorithm/table.rs): on a whole minute.
const T0: i64 = 1_763_700_000 * S;

/// redis-cell's `time::Duration::seconds(-1)`, its "no retry" marker.
const MINUS_ONE_SEC_NS: i128 = -1_000_000_000;

/// The model of redis-cell 0.5.0's `CL.THROTTLE` (one key).
struct RedisCell {
    emission_interval_ns: i128,
    dvt_ns: i128,
    limit: i64,
    /// The stored TAT (ns) and when the key expires (ns).
    key: Option<(i128, i128)>,
}

/// redis-cell's reply seconds of a `time::Duration` of `ns`:
/// `as_seconds_f64() as i64`, plus one if `subsec_milliseconds() > 0`.
fn cell_secs(ns: i128) -> i64 {
    let secs = ns / 1_000_000_000; // time::Duration keeps the sign in both parts
    let nanos = ns % 1_000_000_000;
    let f = secs as f64 + nanos as f64 / 1_000_000_000_f64;
    f as i64 + i64::from(nanos / 1_000_000 > 0)
}

impl RedisCell {
    fn new(max_burst: i64, count: i64, period_secs: i64) -> Self {
        let period_ns = i128::from(period_secs) * 1_000_000_000;
        let t = ((period_ns as f64) / (count as f64)) as i64;
        Self {
            emission_interval_ns: i128::from(t),
            dvt_ns: i128::from(t) * i128::from(max_burst + 1),
            limit: max_burst + 1,
            key: None,
        }
    }

    /// One call at `now_ns`: `[limited, limit, remaining, retry_after,
    /// reset_after]`.
    fn call(&mut self, now: i128, quantity: i64) -> [i64; 5] {
        if matches!(self.key, Some((_, expires)) if expires <= now) {
            self.key = None;
        }
        let increment = self.emission_interval_ns * i128::from(quantity);
        let tat = self.key.map_or(now, |(tat, _)| tat);
        let new_tat = if now > tat {
            now + increment
        } else {
            tat + increment
        };
        let allow_at = new_tat - self.dvt_ns;
        let diff = now - allow_at;
        let mut retry_after = MINUS_ONE_SEC_NS;
        let (limited, ttl) = if diff < 0 {
            if increment <= self.dvt_ns {
                retry_after = -diff;
            }
            (true, tat - now)
        } else {
            let ttl = new_tat - now;
            // redis-cell then sets `PEXPIRE` to the ttl's whole ms, from the
            // server's own ms clock: the key may vanish up to ~1 ms before
            // its TAT, depending on when each clock was read. The model
            // keeps it to the TAT (ours: the TAT rounded up to the ms).
            self.key = Some((new_tat, new_tat));
            (false, ttl)
        };
        let next = self.dvt_ns - ttl;
        let remaining = if next > -self.emission_interval_ns {
            // whole_microseconds() truncates toward zero.
            ((next / 1_000) as f64 / (self.emission_interval_ns / 1_000) as f64) as i64
        } else {
            0
        };
        [
            i64::from(limited),
            self.limit,
            remaining,
            cell_secs(retry_after),
            cell_secs(ttl),
        ]
    }
}

/// Ours: the decision of [`CellGcra`] and the state it would store.
struct Ours {
    gcra: CellGcra,
    state: Option<i128>,
}

impl Ours {
    fn call(&mut self, now_us: i64, quantity: i64) -> [i64; 5] {
        let outcome = self.gcra.decide(self.state, now_us, quantity).unwrap();
        if let Some(u) = outcome.update {
            // Through the stored string, as the command does.
            let mut buf = [0u8; ratelimit_core::algorithm::STATE_BUF_LEN];
            let len = CellGcra::encode(&u.state, &mut buf);
            self.state = CellGcra::decode(&buf[..len]);
        }
        let d = outcome.decision;
        [
            i64::from(d.limited),
            d.limit,
            d.remaining,
            retry_after_secs(d.limited, d.retry_after_us),
            reply_secs(d.reset_after_us),
        ]
    }
}

/// `(µs after T0, quantity, redis-cell's reply, ours where it differs)`.
type Step = (i64, i64, [i64; 5], Option<[i64; 5]>);

/// `((max_burst, count_per_period, period), steps)`.
type Sequence = ((i64, i64, i64), &'static [Step]);

const SEQUENCES: &[Sequence] = &[
    // redis-cell's README example: T = 2 s, τ = 32 s.
    (
        (15, 30, 60),
        &[
            (0, 1, [0, 16, 15, -1, 2], None),
            (0, 15, [0, 16, 0, -1, 32], None),
            (0, 1, [1, 16, 0, 2, 32], None),
            (0, 0, [0, 16, 0, -1, 32], None),
            (2 * S, 1, [0, 16, 0, -1, 32], None),
            (2 * S + 1, 1, [1, 16, 0, 2, 32], None),
            (40 * S, 0, [0, 16, 16, -1, 0], None),
            (40 * S, 17, [1, 16, 16, -1, 0], None),
        ],
    ),
    // Issue 14: 7 per 61 s, T = 8 714 285 714 ns. 14 tokens take
    // 121.999999996 s: 122 (a µs T, 8 714 286 µs, made it 122.000004 s and
    // rounded to 123).
    (
        (100, 7, 61),
        &[
            (0, 14, [0, 101, 87, -1, 122], None),
            (0, 0, [0, 101, 87, -1, 122], None),
            (0, 1, [0, 101, 86, -1, 131], None),
            (500_000, 86, [0, 101, 0, -1, 880], None),
            (500_000, 1, [1, 101, 0, 9, 880], None),
            (8_714_285 * 15 + 500_000, 1, [0, 101, 14, -1, 758], None),
        ],
    ),
    // One token (limit 1) every 8.714285714 s: a call 714 ns early is
    // refused. redis-cell says retry in 0 s with 1 remaining, which would
    // send the client straight back: we say retry in 1 s, 0 remaining.
    (
        (0, 7, 61),
        &[
            (0, 1, [0, 1, 0, -1, 9], None),
            (8_714_285, 1, [1, 1, 1, 0, 0], Some([1, 1, 0, 1, 0])),
            (8_714_286, 1, [0, 1, 0, -1, 9], None),
            (17_428_571, 1, [1, 1, 1, 0, 0], Some([1, 1, 0, 1, 0])),
        ],
    ),
    // 3 per second, T = 333 333 333 ns, τ = 999 999 999 ns.
    (
        (2, 3, 1),
        &[
            (0, 2, [0, 3, 1, -1, 1], None),
            (0, 1, [0, 3, 0, -1, 1], None),
            (1, 1, [1, 3, 0, 1, 1], None),
            (333_334, 1, [0, 3, 0, -1, 1], None),
            (2 * S, 3, [0, 3, 0, -1, 1], None),
        ],
    ),
    // T = 1.0000004 s: a µs part alone does not round up.
    (
        (1, 2_500_000, 2_500_001),
        &[
            (0, 1, [0, 2, 1, -1, 1], None),
            (0, 1, [0, 2, 0, -1, 2], None),
            (0, 1, [1, 2, 0, 1, 2], None),
        ],
    ),
];

#[test]
fn cl_throttle_replies_what_redis_cell_replies() {
    for &((max_burst, count, period), steps) in SEQUENCES {
        let mut cell = RedisCell::new(max_burst, count, period);
        let mut ours = Ours {
            gcra: CellGcra::new(max_burst, count, period).unwrap(),
            state: None,
        };
        for (i, &(at_us, quantity, cell_reply, our_reply)) in steps.iter().enumerate() {
            let now_us = T0 + at_us;
            let what =
                format!("({max_burst} {count} {period}) step {i}: at {at_us} µs, {quantity}");
            assert_eq!(
                cell.call(i128::from(now_us) * 1_000, quantity),
                cell_reply,
                "redis-cell model, {what}"
            );
            assert_eq!(
                ours.call(now_us, quantity),
                our_reply.unwrap_or(cell_reply),
                "ours, {what}"
            );
        }
    }
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn differential_against_the_redis_cell_model() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut differing = 0;
    let mut calls = 0;
    for _ in 0..3_000 {
        let max_burst = rng.below(120) as i64;
        let count = 1 + rng.below(1_000) as i64;
        let period = 1 + rng.below(3_700) as i64;
        let Ok(gcra) = CellGcra::new(max_burst, count, period) else {
            continue;
        };
        let mut cell = RedisCell::new(max_burst, count, period);
        let mut ours = Ours { gcra, state: None };
        let t_us = (gcra.emission_interval_ns() / 1_000) as u64;
        let mut now_us = T0;
        for _ in 0..40 {
            // Steps around multiples of T, with µs jitter.
            now_us += match rng.below(4) {
                0 => 0,
                1 => rng.below(3) as i64,
                2 => (t_us * rng.below(3) + rng.below(3)) as i64 - 1,
                _ => rng.below(t_us * (max_burst as u64 + 2) + 1) as i64,
            }
            .max(0);
            let quantity = match rng.below(5) {
                0 => 0,
                1 => rng.below(max_burst as u64 + 3) as i64,
                _ => 1,
            };
            let c = cell.call(i128::from(now_us) * 1_000, quantity);
            let o = ours.call(now_us, quantity);
            calls += 1;
            let what = format!("({max_burst} {count} {period}) at {now_us} q {quantity}");
            assert_eq!(
                (o[0], o[1], o[4]),
                (c[0], c[1], c[4]),
                "{what}: {c:?} {o:?}"
            );
            if c[3] == 0 && c[0] == 1 {
                assert_eq!(o[3], 1, "{what}");
            } else {
                assert_eq!(o[3], c[3], "{what}");
            }
            let mut cap = c[1];
            if c[0] == 1 && c[3] >= 0 {
                cap = cap.min(quantity - 1);
            }
            assert_eq!(o[2], c[2].min(cap).max(0), "{what}: remaining {c:?} {o:?}");
            if o != c {
                differing += 1;
                if differing < 15 {
                    eprintln!("{what}: cell {c:?} ours {o:?}");
                }
            }
        }
    }
    // The exceptions are rare.
    assert!(
        calls > 50_000 && differing * 200 < calls,
        "{differing} of {calls}"
    );
}
