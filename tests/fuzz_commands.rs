//! Random argument vectors never hurt the server: 100,000 random calls of
//! every command against keys of every Redis type, foreign string values,
//! keys written by each command and server-side policies of every kind:
//!
//! * the seven single commands with random arity, boundary numbers, junk
//!   bytes, very long strings, and the call options
//!   `[TOKENS n | REFUND n] [PEEK] [BLOCK duration]` in any order, repeated,
//!   malformed or cut short, and the window variants `ALIGN EPOCH|FIRST`
//!   (`RL.FIXEDWINDOW`) and `BUCKETS k` (`RL.SLIDINGWINDOW`), valid or not,
//!   so keys meet calls of both variants;
//! * `RL.ALL numkeys key … limit … [options]` with 1 to 64 keys (and
//!   `numkeys` out of range or not matching), every limit type, `POLICY name`
//!   (known and unknown), `LEAKYBUCKET` (refused), junk limits, duplicate
//!   keys, missing or extra limits;
//! * `RL.POLICY SET name limit [SHADOW] [SOFT percent] [BLOCK duration]`
//!   with junk names (invalid characters, empty, too long) and junk
//!   definitions; `RL.POLICY LOAD [REPLACE] text` with junk multi-line texts
//!   (comments, blank lines, `\r\n`, duplicate names, bad lines); `GET`,
//!   `DEL`, `LIST`, `DUMP`, `RESETSTATS` and unknown subcommands;
//! * `RL.LIMIT key policy [TOKENS n | REFUND n] [PEEK]` with the policies
//!   that exist at the time (each batch starts from a known set, which the
//!   calls then change) and unknown ones.
//!
//! Around every call, in the same pipeline, a script reads `RL.POLICY DUMP`
//! and the `DUMP` and `PEXPIRETIME` of each key the call names (for
//! `RL.ALL`: its declared keys and the keys the generator meant), before
//! and after, at one instant. For every call:
//! * the server answers (each batch's replies must arrive within a timeout;
//!   `PING` works at the end and the process is alive);
//! * an error is `ERR` / `WRONGTYPE`, never the module's "internal error"
//!   (a caught panic), and changes nothing: no key, no policy;
//! * a rate-limiting reply is five integers obeying the conventions of docs/commands/README.md
//!   (six for `RL.ALL`, the sixth the binding limit's 1-based position, never
//!   a `SHADOW` policy's unless every limit is one); a `SHADOW` policy never
//!   answers limited; an accepted option list is a valid one (no repeated
//!   option, no unknown word, no `BLOCK` for `RL.LIMIT`);
//! * a `PEEK` call changes no key; a limited call changes no key unless
//!   `BLOCK` (the call's, or its policy's) asked for it, and then leaves it
//!   with an expiry; a successful `REFUND` answers `limited` 0 and
//!   `retry_after` -1, and leaves a key it changed gone or with an expiry; an
//!   allowed call leaves its keys with an expiry (or already expired);
//!   `CL.THROTTLE … 0` changes nothing. A key only "changed" if it did not
//!   merely expire;
//! * a call changes no key it does not name, and only `RL.POLICY` changes the
//!   policies: a successful `SET` leaves its policy in `DUMP`, a successful
//!   `LOAD` replies how many it set (with `REPLACE`, exactly those remain).
//!
//! The generator must reach every outcome (allowed, limited, error; `PEEK`,
//! `REFUND`, a `BLOCK` write; policies set and loaded), or the test fails as
//! degenerate. The seed is fixed so a failure reproduces; `FUZZ_SEED=<n>`
//! runs another, `FUZZ_BATCHES=<n>` changes the number of batches of 1,000.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::Server;
use redis::Value;

/// xorshift64* — small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0; the tiny modulo bias does not matter here).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// The kind of a positional parameter.
#[derive(Clone, Copy)]
enum Param {
    /// A signed 64-bit integer (counts, limits, rates).
    Int,
    /// Seconds as a float (`RL.*` periods and windows).
    Secs,
    /// Whole seconds (`CL.THROTTLE`'s period).
    WholeSecs,
}

/// What may follow the parameters.
#[derive(Clone, Copy, PartialEq)]
enum Tail {
    /// `[TOKENS n]`
    Tokens,
    /// `[quantity]` (`CL.THROTTLE`)
    Quantity,
}

const COMMANDS: [(&str, &[Param], Tail); 7] = [
    (
        "RL.GCRA",
        &[Param::Int, Param::Int, Param::Secs],
        Tail::Tokens,
    ),
    (
        "RL.TOKENBUCKET",
        &[Param::Int, Param::Int, Param::Secs],
        Tail::Tokens,
    ),
    (
        "CL.THROTTLE",
        &[Param::Int, Param::Int, Param::WholeSecs],
        Tail::Quantity,
    ),
    ("RL.FIXEDWINDOW", &[Param::Int, Param::Secs], Tail::Tokens),
    ("RL.SLIDINGWINDOW", &[Param::Int, Param::Secs], Tail::Tokens),
    ("RL.SLIDINGLOG", &[Param::Int, Param::Secs], Tail::Tokens),
    (
        "RL.LEAKYBUCKET",
        &[Param::Int, Param::Int, Param::Secs],
        Tail::Tokens,
    ),
];

/// Numbers at and past every boundary the parsers and the arithmetic have,
/// and strings that are almost numbers.
const BOUNDARY: &[&[u8]] = &[
    b"0",
    b"-1",
    b"1",
    b"2",
    b"-0",
    b"00",
    b"01",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551615",
    b"18446744073709551616",
    b"4611686018427387904",
    b"4294967296",
    b"9007199254740993",
    b"1e-9",
    b"1e-6",
    b"0.000001",
    b"0.0000005",
    b"0.00000049999",
    b"0.0000015",
    b"1e300",
    b"-1e300",
    b"1e308",
    b"1e309",
    b"5e-324",
    b"2.2250738585072014e-308",
    b"NaN",
    b"nan",
    b"-nan",
    b"inf",
    b"-inf",
    b"+inf",
    b"infinity",
    b"1.",
    b"1.0",
    b".5",
    b"0.5",
    b"-0.5",
    b"+5",
    b"0x10",
    b" 1",
    b"1 ",
    b"\t1",
    b"1\n",
    b"",
    b" ",
    b"31622400",
    b"31622400.000001",
    b"31622401",
    b"9.2e12",
    b"9.2000001e12",
    b"9200000000000",
    b"9200000000001",
    b"9223372036854.775807",
    b"9223372036854775.807",
    b"100000",
    b"100001",
    b"1000000",
    b"1000001",
    b"3600",
    b"0.05",
    b"1e3",
    b"1E3",
    b"1_000",
    b"1,5",
    b"TOKENS",
    b"tokens",
    b"ToKeNs",
    b"TOKEN",
    b"TOKENSS",
    b"PEEK",
    b"peek",
    b"BLOCK",
    b"REFUND",
    b"POLICY",
    b"GCRA",
    b"SHADOW",
    b"SOFT",
    b"\0",
    b"1\0",
    b"\xff\xfe",
    b"\xc3\x28",
    b"-",
    b"+",
    b".",
    b"e",
    b"1e",
    b"1e+",
    b"--1",
    "\u{663}".as_bytes(),  // ARABIC-INDIC DIGIT THREE
    "\u{ff11}".as_bytes(), // FULLWIDTH DIGIT ONE
];

const SANE_SECS: &[&[u8]] = &[
    b"0.001",
    b"0.05",
    b"0.3",
    b"1",
    b"1.5",
    b"60",
    b"3600",
    b"0.000001",
    b"86400",
];
const SANE_WHOLE_SECS: &[&[u8]] = &[b"1", b"2", b"60", b"3600"];

/// A string of about 100 KB.
fn long_value(rng: &mut Rng) -> Vec<u8> {
    const N: usize = 100_000;
    match rng.below(7) {
        0 => vec![b'1'; N],
        1 => {
            let mut v = vec![b'0'; N - 1];
            v.push(b'1');
            v
        }
        2 => {
            let mut v = b"0.".to_vec();
            v.resize(N - 1, b'0');
            v.push(b'1');
            v
        }
        3 => vec![b'9'; N],
        4 => b"TOKENS".repeat(N / 6),
        5 => (0..N).map(|_| rng.next() as u8).collect(),
        _ => {
            let mut v = b"1e".to_vec();
            v.resize(N, b'9');
            v
        }
    }
}

fn random_case(rng: &mut Rng, s: &str) -> Vec<u8> {
    s.bytes()
        .map(|b| {
            if rng.below(2) == 0 {
                b.to_ascii_lowercase()
            } else {
                b
            }
        })
        .collect()
}

fn sane(rng: &mut Rng, p: Param) -> Vec<u8> {
    match p {
        Param::Int => {
            let v = match rng.below(10) {
                0 => 100,
                1 => 1000,
                _ => rng.below(13) as i64,
            };
            v.to_string().into_bytes()
        }
        Param::Secs => rng.pick(SANE_SECS).to_vec(),
        Param::WholeSecs => rng.pick(SANE_WHOLE_SECS).to_vec(),
    }
}

fn fuzz_value(rng: &mut Rng) -> Vec<u8> {
    match rng.below(100) {
        0..=44 => rng.pick(BOUNDARY).to_vec(),
        45..=57 => (rng.below(16) as i64 - 3).to_string().into_bytes(),
        58..=65 => (rng.next() as i64 >> rng.below(64))
            .to_string()
            .into_bytes(),
        66..=73 => {
            let x = f64::from_bits(rng.next());
            let y =
                (rng.next() as i64 >> rng.below(64)) as f64 * 10f64.powi(rng.below(40) as i32 - 30);
            let v = if rng.below(2) == 0 { x } else { y };
            if rng.below(2) == 0 {
                format!("{v}").into_bytes()
            } else {
                format!("{v:e}").into_bytes()
            }
        }
        74..=81 => (0..rng.below(17)).map(|_| rng.next() as u8).collect(),
        82..=89 => random_case(rng, "TOKENS"),
        90..=97 => {
            let p = *rng.pick(&[Param::Int, Param::Secs, Param::WholeSecs]);
            sane(rng, p)
        }
        _ => {
            if rng.below(25) == 0 {
                long_value(rng)
            } else {
                (0..20 + rng.below(40))
                    .map(|_| b'0' + rng.below(10) as u8)
                    .collect()
            }
        }
    }
}

/// The keys a batch plays with: every Redis type, foreign strings, keys
/// written by each command (long-lived and about to expire), fresh names.
struct Pool {
    keys: Vec<Vec<u8>>,
}

fn setup_pool(con: &mut redis::Connection, batch: usize) -> Pool {
    let mut pipe = redis::pipe();
    pipe.cmd("FLUSHALL").arg("SYNC").ignore();
    let foreign: &[(&str, &[u8])] = &[
        ("p:abc", b"abc"),
        ("p:neg", b"-5"),
        ("p:big", b"99999999999999999999"),
        ("p:bin", b"\xff\x00\xfe:\x01"),
        ("p:1:2", b"1:2"),
        ("p:1:2:3", b"1:2:3"),
        ("p:1:2:3:4", b"1:2:3:4"),
        ("p:empty", b""),
        ("p:colon", b":"),
        ("p:int", b"12345"),
        ("p:zero", b"0"),
        ("p:0:0:0", b"0:0:0"),
        ("p:i64max", b"9223372036854775807"),
        ("p:i64max2", b"9223372036854775807:9223372036854775807"),
        (
            "p:i64max3",
            b"9223372036854775807:9223372036854775807:9223372036854775807",
        ),
        ("p:cell-ns", b"1795297604021000000"),
        ("p:neg3", b"-1:-1:-1"),
        ("p:space", b" 1"),
    ];
    for (k, v) in foreign {
        pipe.cmd("SET").arg(*k).arg(*v).ignore();
    }
    // A foreign string with an expiry: an erring call must keep both.
    pipe.cmd("SET")
        .arg("p:abc-px")
        .arg("abc")
        .arg("PX")
        .arg(600_000)
        .ignore();
    pipe.cmd("RPUSH").arg("p:list").arg("a").arg("b").ignore();
    pipe.cmd("HSET").arg("p:hash").arg("f").arg("v").ignore();
    pipe.cmd("SADD").arg("p:set").arg("a").ignore();
    pipe.cmd("ZADD").arg("p:zset").arg(1).arg("a").ignore();
    pipe.cmd("ZADD")
        .arg("p:zset-weird")
        .arg(&[
            "inf", "a", "-inf", "b", "1e300", "c", "-1e300", "d", "0", "e",
        ])
        .arg(&["9.3e18", "f", "9007199254740993", "g", "-5", "h"])
        .ignore();
    let mut big = redis::cmd("ZADD");
    big.arg("p:zset-big");
    for i in 0..200 {
        big.arg(i).arg(format!("m{i}"));
    }
    pipe.add_command(big).ignore();
    pipe.cmd("XADD")
        .arg("p:stream")
        .arg("*")
        .arg("f")
        .arg("v")
        .ignore();
    let written: &[&[&str]] = &[
        &["RL.GCRA", "w:gcra", "4", "10", "3600", "TOKENS", "3"],
        &["RL.GCRA", "w:gcra-short", "4", "10", "0.05"],
        &["RL.TOKENBUCKET", "w:tb", "5", "1", "3600", "TOKENS", "5"],
        &["RL.TOKENBUCKET", "w:tb-short", "3", "3", "0.1"],
        &["CL.THROTTLE", "w:cell", "3", "1", "60"],
        &["CL.THROTTLE", "w:cell-full", "0", "1", "3600"],
        &["RL.FIXEDWINDOW", "w:fw", "5", "3600", "TOKENS", "2"],
        &["RL.FIXEDWINDOW", "w:fw-short", "5", "0.05"],
        &["RL.SLIDINGWINDOW", "w:sw", "5", "3600", "TOKENS", "5"],
        &["RL.SLIDINGWINDOW", "w:sw-short", "5", "0.05"],
        &["RL.SLIDINGLOG", "w:log", "5", "3600", "TOKENS", "3"],
        &["RL.SLIDINGLOG", "w:log-short", "5", "0.05", "TOKENS", "2"],
        &["RL.SLIDINGLOG", "w:log-big", "300", "3600", "TOKENS", "200"],
        &["RL.LEAKYBUCKET", "w:leaky", "5", "3", "3600", "TOKENS", "4"],
        &["RL.LEAKYBUCKET", "w:leaky-short", "5", "100", "1"],
        &[
            "RL.CONCURRENCY",
            "w:conc",
            "5",
            "3600",
            "ACQUIRE",
            "a",
            "TOKENS",
            "2",
        ],
        &[
            "RL.CONCURRENCY",
            "w:conc-short",
            "5",
            "0.05",
            "ACQUIRE",
            "b",
        ],
    ];
    for args in written {
        pipe.cmd(args[0]).arg(&args[1..]);
    }
    let replies: Vec<Value> = pipe
        .ignore_errors()
        .query(con)
        .expect("set up the key pool");
    for (args, reply) in written.iter().zip(&replies) {
        assert!(
            matches!(reply, Value::Array(a) if a.len() == 5),
            "setup {args:?} → {reply:?}"
        );
    }
    let mut keys: Vec<Vec<u8>> = foreign.iter().map(|(k, _)| k.as_bytes().to_vec()).collect();
    for k in [
        "p:abc-px",
        "p:list",
        "p:hash",
        "p:set",
        "p:zset",
        "p:zset-weird",
        "p:zset-big",
        "p:stream",
    ] {
        keys.push(k.as_bytes().to_vec());
    }
    keys.extend(written.iter().map(|a| a[1].as_bytes().to_vec()));
    for i in 0..8 {
        keys.push(format!("fresh:{batch}:{i}").into_bytes());
    }
    // FLUSHALL leaves the policies: every batch starts from the same ones
    // (RESET: a batch may have changed their algorithms).
    let loaded: i64 = redis::cmd("RL.POLICY")
        .arg("LOAD")
        .arg("REPLACE")
        .arg("RESET")
        .arg(BASE_POLICIES)
        .query(con)
        .expect("load the base policies");
    assert_eq!(loaded, 8);
    Pool { keys }
}

/// The policies every batch starts from: each limit type, each mode.
const BASE_POLICIES: &str = "p1 GCRA 4 10 3600
p2 TOKENBUCKET 5 1 3600 SHADOW
p3 FIXEDWINDOW 5 3600 BLOCK 60
p4 SLIDINGWINDOW 5 3600 SOFT 50
p5 SLIDINGLOG 5 3600 SOFT 100 BLOCK 0.5
p6 LEAKYBUCKET 5 3 3600
p7 GCRA 0 1 60 SHADOW SOFT 1000 BLOCK 3600
p8 GCRA 0 1 3600 BLOCK 0.01
";

/// The policy names calls mostly use: those of [`BASE_POLICIES`], others
/// that `SET` and `LOAD` create, and one of the longest length (64).
const NAMES: &[&str] = &[
    "p1",
    "p2",
    "p3",
    "p4",
    "p5",
    "p6",
    "p7",
    // One a call refuses at once, with a block that ends within the batch:
    // RL.LIMIT's block writes stay frequent whatever the timing (valgrind).
    "p8",
    "free",
    "pro",
    "a:b-c_d.e",
    "n234567890123456789012345678901234567890123456789012345678901234",
];

/// A key for command `c`: often one of its own (so that calls meet the
/// state they wrote), else any key of the pool, else random bytes.
fn key(rng: &mut Rng, pool: &Pool, c: usize) -> Vec<u8> {
    match rng.below(100) {
        0..=34 => format!("own:{c}:{}", rng.below(4)).into_bytes(),
        35..=89 => rng.pick(&pool.keys).clone(),
        _ => fuzz_value(rng),
    }
}

/// A key for policy `name`: often one of its own, else any key.
fn policy_key(rng: &mut Rng, pool: &Pool, name: &[u8]) -> Vec<u8> {
    match rng.below(100) {
        0..=49 => {
            let name = String::from_utf8_lossy(&name[..name.len().min(16)]);
            format!("own:pol:{name}:{}", rng.below(3)).into_bytes()
        }
        50..=89 => rng.pick(&pool.keys).clone(),
        _ => {
            let c = rng.below(COMMANDS.len());
            key(rng, pool, c)
        }
    }
}

/// `word` as is, or in a random case.
fn keyword(rng: &mut Rng, word: &str) -> Vec<u8> {
    if rng.below(4) == 0 {
        random_case(rng, word)
    } else {
        word.as_bytes().to_vec()
    }
}

const OPTION_WORDS: [&str; 5] = ["TOKENS", "REFUND", "PEEK", "BLOCK", "FORCE"];

/// Words that are almost options.
const NEAR_OPTIONS: &[&[u8]] = &[
    b"PEEKS",
    b"PEE",
    b"BLOCKS",
    b"REFUNDS",
    b"REFUN",
    b"-PEEK",
    b"PEEK\0",
    b"BLOCK ",
    b"P\xc3\x89EK",
];

const BLOCK_SECS: &[&[u8]] = &[b"0.001", b"0.01", b"0.05", b"0.5", b"1", b"60", b"3600"];

/// The `n` of `TOKENS n` / `REFUND n`: mostly small, sometimes anything.
fn count_value(rng: &mut Rng) -> Vec<u8> {
    if rng.below(8) == 0 {
        fuzz_value(rng)
    } else {
        rng.pick(&[1, 1, 1, 2, 3, 5, 8, 100])
            .to_string()
            .into_bytes()
    }
}

/// A `BLOCK` duration: mostly short, sometimes anything.
fn block_value(rng: &mut Rng) -> Vec<u8> {
    if rng.below(8) == 0 {
        fuzz_value(rng)
    } else {
        rng.pick(BLOCK_SECS).to_vec()
    }
}

/// The variant option of command `c` (`COMMANDS[c]`): `ALIGN` for the fixed
/// window, `BUCKETS` for the sliding window.
fn variant_word(c: usize) -> Option<&'static str> {
    match COMMANDS[c].0 {
        "RL.FIXEDWINDOW" => Some("ALIGN"),
        "RL.SLIDINGWINDOW" => Some("BUCKETS"),
        _ => None,
    }
}

/// Sometimes the command's variant option (`ALIGN EPOCH|FIRST`,
/// `BUCKETS k`), with a valid, near or random value; a key then meets
/// calls of both variants (an `ERR` that writes nothing).
fn variant(rng: &mut Rng, c: usize) -> Vec<Vec<u8>> {
    let Some(word) = variant_word(c) else {
        return Vec::new();
    };
    if rng.below(3) != 0 {
        return Vec::new();
    }
    let value = match (word, rng.below(8)) {
        (_, 0) => fuzz_value(rng),
        ("ALIGN", 1) => b"SECOND".to_vec(),
        ("ALIGN", n) => random_case(rng, if n % 2 == 0 { "FIRST" } else { "EPOCH" }),
        (_, 1) => rng.pick(&[&b"1"[..], b"61", b"0", b"-2", b"2.5"]).to_vec(),
        _ => rng.pick(&[2, 3, 10, 60]).to_string().into_bytes(),
    };
    vec![keyword(rng, word), value]
}

/// One option with its value: `OPTION_WORDS[which]`.
fn option(rng: &mut Rng, which: usize) -> Vec<Vec<u8>> {
    match which {
        0 => vec![keyword(rng, "TOKENS"), count_value(rng)],
        1 => vec![keyword(rng, "REFUND"), count_value(rng)],
        2 => vec![keyword(rng, "PEEK")],
        3 => vec![keyword(rng, "BLOCK"), block_value(rng)],
        _ => vec![keyword(rng, "FORCE")],
    }
}

/// The options after a limit: none, a valid set in any order (`BLOCK` only
/// when `block`), repeated ones, or junk (keywords without values, near
/// misses, random values).
fn options(rng: &mut Rng, block: bool) -> Vec<Vec<u8>> {
    let mut items: Vec<Vec<Vec<u8>>> = Vec::new();
    match rng.below(100) {
        0..=24 => {}
        25..=84 => {
            match rng.below(5) {
                0 | 1 => {}
                2 | 3 => items.push(option(rng, 0)),
                _ => items.push(option(rng, 1)),
            }
            if rng.below(3) == 0 {
                items.push(option(rng, 2));
            }
            if block && rng.below(3) == 0 {
                items.push(option(rng, 3));
            }
            if rng.below(6) == 0 {
                items.push(option(rng, 4));
            }
        }
        85..=94 => {
            for _ in 0..2 + rng.below(3) {
                let which = rng.below(OPTION_WORDS.len());
                items.push(option(rng, which));
            }
        }
        _ => {
            for _ in 0..1 + rng.below(3) {
                let word = *rng.pick(&OPTION_WORDS);
                items.push(match rng.below(4) {
                    0 => vec![keyword(rng, word)],
                    1 => vec![fuzz_value(rng)],
                    2 => vec![keyword(rng, word), fuzz_value(rng)],
                    _ => vec![rng.pick(NEAR_OPTIONS).to_vec()],
                });
            }
        }
    }
    rng.shuffle(&mut items);
    items.concat()
}

/// What a generated call is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// One of [`COMMANDS`].
    Single(usize),
    All,
    Limit,
    PolicySet,
    PolicyLoad,
    /// `RL.POLICY GET / DEL / LIST / DUMP / RESETSTATS`, unknown ones.
    PolicyOther,
}

const LABELS: [&str; 12] = [
    "RL.GCRA",
    "RL.TOKENBUCKET",
    "CL.THROTTLE",
    "RL.FIXEDWINDOW",
    "RL.SLIDINGWINDOW",
    "RL.SLIDINGLOG",
    "RL.LEAKYBUCKET",
    "RL.ALL",
    "RL.LIMIT",
    "RL.POLICY SET",
    "RL.POLICY LOAD",
    "RL.POLICY other",
];

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Single(c) => COMMANDS[c].0,
            Kind::All => LABELS[7],
            Kind::Limit => LABELS[8],
            Kind::PolicySet => LABELS[9],
            Kind::PolicyLoad => LABELS[10],
            Kind::PolicyOther => LABELS[11],
        }
    }
}

/// One call: `args[0]` is the command name; `keys` are the keys read
/// before and after it.
struct Call {
    kind: Kind,
    args: Vec<Vec<u8>>,
    keys: Vec<Vec<u8>>,
}

/// One random call: mostly the single commands, then `RL.ALL`, `RL.LIMIT`
/// and `RL.POLICY`.
fn gen_call(rng: &mut Rng, pool: &Pool) -> Call {
    match rng.below(100) {
        0..=61 => gen_single(rng, pool),
        62..=79 => gen_all(rng, pool),
        80..=91 => gen_limit(rng, pool),
        92..=96 => gen_policy_set(rng),
        97..=98 => gen_policy_load(rng),
        _ => gen_policy_other(rng),
    }
}

/// Parameters small enough that a few calls on one key reach the limit, as
/// a client calling with fixed parameters does (one set per command).
const STEADY: [&[&str]; 7] = [
    &["2", "1", "3600"],
    &["3", "1", "3600"],
    &["2", "1", "3600"],
    &["3", "3600"],
    &["3", "3600"],
    &["3", "3600"],
    &["3", "1", "3600"],
];

/// A single command: mostly well-formed with some parameters fuzzed (so the
/// algorithms and the writes run) and random options, sometimes with
/// steady parameters on a few keys (so that limits and blocks are reached),
/// otherwise a wild vector of 0..=10 arguments.
fn gen_single(rng: &mut Rng, pool: &Pool) -> Call {
    let c = rng.below(COMMANDS.len());
    let (name, params, tail) = COMMANDS[c];
    let mut args = vec![keyword(rng, name)];
    let shape = rng.below(100);
    if shape < 20 {
        args.push(format!("own:{c}:{}", rng.below(2)).into_bytes());
        args.extend(STEADY[c].iter().map(|p| p.as_bytes().to_vec()));
        if tail == Tail::Tokens {
            args.extend(options(rng, true));
            args.extend(variant(rng, c));
        } else if rng.below(3) == 0 {
            args.push(rng.below(3).to_string().into_bytes());
        }
    } else if shape < 75 {
        args.push(key(rng, pool, c));
        for &p in params {
            args.push(if rng.below(100) < 85 {
                sane(rng, p)
            } else {
                fuzz_value(rng)
            });
        }
        match (tail, rng.below(10)) {
            (Tail::Tokens, 0..=6) => {
                args.extend(options(rng, true));
                args.extend(variant(rng, c));
            }
            (Tail::Quantity, 0..=2) => {}
            (_, 0..=7) => {
                if tail == Tail::Tokens {
                    args.push(random_case(rng, "TOKENS"));
                }
                args.push(if rng.below(4) == 0 {
                    fuzz_value(rng)
                } else {
                    rng.below(8).to_string().into_bytes()
                });
            }
            (_, 8) => {
                if tail == Tail::Tokens {
                    args.push(fuzz_value(rng));
                }
                args.push(fuzz_value(rng));
            }
            _ => {
                for _ in 0..1 + rng.below(4) {
                    args.push(fuzz_value(rng));
                }
            }
        }
        args.truncate(14);
    } else {
        for i in 0..rng.below(11) {
            args.push(if rng.below(7) == 0 {
                let word = *rng.pick(&OPTION_WORDS);
                random_case(rng, word)
            } else if i == 0 && rng.below(10) < 8 {
                key(rng, pool, c)
            } else if rng.below(3) == 0 {
                let p = *rng.pick(params);
                sane(rng, p)
            } else {
                fuzz_value(rng)
            });
        }
    }
    let keys = args.get(1).cloned().into_iter().collect();
    Call {
        kind: Kind::Single(c),
        args,
        keys,
    }
}

/// The limit types of `RL.ALL` and of policies, with the command whose
/// parameters (and own keys) they share.
const LIMIT_KINDS: [(&str, usize); 6] = [
    ("GCRA", 0),
    ("TOKENBUCKET", 1),
    ("FIXEDWINDOW", 3),
    ("SLIDINGWINDOW", 4),
    ("SLIDINGLOG", 5),
    ("LEAKYBUCKET", 6),
];

/// Parameters of command `c` that its limit accepts (for limits of policies
/// and of wide `RL.ALL` calls, where one bad limit fails the whole).
fn valid_params(rng: &mut Rng, c: usize) -> Vec<Vec<u8>> {
    let n = COMMANDS[c].1.len();
    (0..n)
        .map(|i| {
            if i + 1 == n {
                valid_secs(rng)
            } else {
                valid_count(rng)
            }
        })
        .collect()
}

/// The parameters of command `c`, each fuzzed with `fuzz_percent` %.
fn limit_params(rng: &mut Rng, c: usize, fuzz_percent: usize) -> Vec<Vec<u8>> {
    COMMANDS[c]
        .1
        .iter()
        .map(|&p| {
            if rng.below(100) < fuzz_percent {
                fuzz_value(rng)
            } else {
                sane(rng, p)
            }
        })
        .collect()
}

/// `RL.ALL numkeys key … limit … [options]`: mostly 1 to 4 keys, sometimes
/// up to 16 or 64; limits of every type and `POLICY name`; sometimes a
/// refused or unknown limit, a duplicate key, a `numkeys` that does not
/// match, an argument dropped or added; otherwise a wild vector.
fn gen_all(rng: &mut Rng, pool: &Pool) -> Call {
    let mut args = vec![keyword(rng, "RL.ALL")];
    if rng.below(100) < 8 {
        for _ in 0..rng.below(13) {
            args.push(match rng.below(6) {
                0 => (1 + rng.below(3)).to_string().into_bytes(),
                1 => {
                    let c = rng.below(COMMANDS.len());
                    key(rng, pool, c)
                }
                2 => {
                    let (word, _) = *rng.pick(&LIMIT_KINDS);
                    keyword(rng, word)
                }
                3 => {
                    let word = *rng.pick(&OPTION_WORDS);
                    keyword(rng, word)
                }
                4 => keyword(rng, "POLICY"),
                _ => fuzz_value(rng),
            });
        }
        let keys = all_keys(&args, &[]);
        return Call {
            kind: Kind::All,
            args,
            keys,
        };
    }
    let n = match rng.below(100) {
        0..=39 => 1,
        40..=69 => 2,
        70..=86 => 3 + rng.below(2),
        87..=97 => 5 + rng.below(12),
        _ => 64,
    };
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(n);
    let mut limits: Vec<Vec<Vec<u8>>> = Vec::with_capacity(n);
    for i in 0..n {
        let (k, limit) = match rng.below(100) {
            0..=83 => {
                let (word, c) = LIMIT_KINDS[rng.below(5)];
                let mut limit = vec![keyword(rng, word)];
                if n > 4 {
                    limit.extend(valid_params(rng, c));
                } else {
                    limit.extend(limit_params(rng, c, 10));
                }
                if rng.below(8) == 0 {
                    limit.push(keyword(rng, "FORCE"));
                }
                let k = if n > 8 {
                    format!("wide:{c}:{i}").into_bytes()
                } else if n > 1 && rng.below(2) == 0 {
                    format!("own:{c}:{}", rng.below(4)).into_bytes()
                } else {
                    key(rng, pool, c)
                };
                (k, limit)
            }
            84..=95 => {
                let name = policy_name(rng);
                let k = if n > 8 {
                    format!("wide:pol:{i}").into_bytes()
                } else {
                    policy_key(rng, pool, &name)
                };
                (k, vec![keyword(rng, "POLICY"), name])
            }
            96..=97 => {
                let mut limit = vec![keyword(rng, "LEAKYBUCKET")];
                limit.extend(limit_params(rng, 6, 10));
                (key(rng, pool, 6), limit)
            }
            _ => {
                let mut limit = vec![match rng.below(3) {
                    0 => fuzz_value(rng),
                    1 => {
                        let word = *rng.pick(&OPTION_WORDS);
                        keyword(rng, word)
                    }
                    _ => rng
                        .pick(&[&b"GCRA2"[..], b"LEAKY", b"POLICIES", b"ALL"])
                        .to_vec(),
                }];
                let c = rng.below(COMMANDS.len());
                limit.extend(limit_params(rng, c, 10));
                (rng.pick(&pool.keys).clone(), limit)
            }
        };
        let k = if keys.contains(&k) {
            format!("other:{i}").into_bytes()
        } else {
            k
        };
        keys.push(k);
        limits.push(limit);
    }
    // A key named twice, now and then.
    if n > 1 && rng.below(100) < 4 {
        let j = 1 + rng.below(n - 1);
        keys[j] = keys[rng.below(j)].clone();
    }
    args.push(match rng.below(100) {
        0..=89 => n.to_string().into_bytes(),
        90..=93 => (n + 1).to_string().into_bytes(),
        94..=96 => (n - 1).to_string().into_bytes(),
        _ => fuzz_value(rng),
    });
    args.extend(keys.iter().cloned());
    args.extend(limits.into_iter().flatten());
    args.extend(options(rng, true));
    if rng.below(20) == 0 {
        let at = 2 + rng.below(args.len() - 1);
        if rng.below(2) == 0 && at < args.len() {
            args.remove(at);
        } else {
            args.insert(at, fuzz_value(rng));
        }
    }
    let keys = all_keys(&args, &keys);
    Call {
        kind: Kind::All,
        args,
        keys,
    }
}

/// The keys to read around an `RL.ALL` call: those the generator meant, and
/// those `numkeys` declares (if it reads as a number), each once.
fn all_keys(args: &[Vec<u8>], meant: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let numkeys = args
        .get(1)
        .and_then(|a| std::str::from_utf8(a).ok())
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(0)
        .min(64);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for k in meant.iter().chain(args.iter().skip(2).take(numkeys)) {
        if !keys.contains(k) {
            keys.push(k.clone());
        }
    }
    keys
}

/// Random characters of policy names.
fn name_chars(rng: &mut Rng, len: usize) -> Vec<u8> {
    const CHARS: &[u8] = b"ABCXYZabcxyz0189_.:-";
    (0..len).map(|_| *rng.pick(CHARS)).collect()
}

/// A name `RL.POLICY` refuses.
fn bad_name(rng: &mut Rng) -> Vec<u8> {
    match rng.below(9) {
        0 => Vec::new(),
        1 => {
            let len = 65 + rng.below(100);
            name_chars(rng, len)
        }
        2 => b"a b".to_vec(),
        3 => "\u{e9}t\u{e9}".as_bytes().to_vec(),
        4 => b"p1\n".to_vec(),
        5 => b"p1\0".to_vec(),
        6 => vec![*rng.pick(b"*/#\\\"'{}$\r\t ")],
        7 => b"p1\r\nSET x".to_vec(),
        _ => fuzz_value(rng),
    }
}

/// A policy name: mostly one of [`NAMES`], else another case of one (a
/// different name), a random valid name or an invalid one.
fn policy_name(rng: &mut Rng) -> Vec<u8> {
    match rng.below(100) {
        0..=79 => rng.pick(NAMES).as_bytes().to_vec(),
        80..=84 => {
            let name = *rng.pick(NAMES);
            random_case(rng, &name.to_ascii_uppercase())
        }
        85..=91 => {
            let len = 1 + rng.below(64);
            name_chars(rng, len)
        }
        _ => bad_name(rng),
    }
}

/// A count a policy accepts whatever its type (and `SOFT`).
fn valid_count(rng: &mut Rng) -> Vec<u8> {
    rng.pick(&[1, 2, 3, 4, 5, 8, 10, 12])
        .to_string()
        .into_bytes()
}

fn valid_secs(rng: &mut Rng) -> Vec<u8> {
    rng.pick(&[&b"0.05"[..], b"0.5", b"1", b"60", b"3600"])
        .to_vec()
}

fn soft_value(rng: &mut Rng, valid: bool) -> Vec<u8> {
    if valid || rng.below(5) > 0 {
        rng.pick(&[&b"1"[..], b"10", b"50", b"100", b"1000"])
            .to_vec()
    } else if rng.below(2) == 0 {
        rng.pick(&[&b"0"[..], b"1001", b"-1", b"10.5", b"+10"])
            .to_vec()
    } else {
        fuzz_value(rng)
    }
}

/// `limit [SHADOW] [SOFT percent] [BLOCK duration]`, the modes in any order:
/// valid when `valid`, else mostly valid with some junk.
fn policy_definition(rng: &mut Rng, valid: bool) -> Vec<Vec<u8>> {
    let (kind, c) = LIMIT_KINDS[rng.below(LIMIT_KINDS.len())];
    let mut words = vec![if valid || rng.below(100) < 88 {
        keyword(rng, kind)
    } else {
        match rng.below(3) {
            0 => fuzz_value(rng),
            1 => rng
                .pick(&[&b"POLICY"[..], b"LEAKY", b"GCRA2", b"SHADOW"])
                .to_vec(),
            _ => Vec::new(),
        }
    }];
    let params = COMMANDS[c].1;
    for (i, &p) in params.iter().enumerate() {
        let duration = i + 1 == params.len();
        words.push(if valid || rng.below(100) < 80 {
            if duration {
                valid_secs(rng)
            } else {
                valid_count(rng)
            }
        } else if rng.below(2) == 0 {
            sane(rng, p)
        } else {
            fuzz_value(rng)
        });
    }
    if !valid && rng.below(15) == 0 {
        if rng.below(2) == 0 {
            words.pop();
        } else {
            words.push(fuzz_value(rng));
        }
    }
    let mut modes: Vec<Vec<Vec<u8>>> = Vec::new();
    if rng.below(3) == 0 {
        modes.push(vec![keyword(rng, "SHADOW")]);
    }
    if rng.below(3) == 0 {
        modes.push(vec![keyword(rng, "SOFT"), soft_value(rng, valid)]);
    }
    if rng.below(3) == 0 {
        let d = if valid {
            valid_secs(rng)
        } else {
            block_value(rng)
        };
        modes.push(vec![keyword(rng, "BLOCK"), d]);
    }
    if !valid && rng.below(8) == 0 {
        for _ in 0..1 + rng.below(2) {
            modes.push(match rng.below(5) {
                0 => vec![keyword(rng, "SHADOW")],
                1 => vec![keyword(rng, "SOFT"), soft_value(rng, false)],
                2 => vec![keyword(rng, "BLOCK"), block_value(rng)],
                3 => {
                    let word = *rng.pick(&["SOFT", "BLOCK"]);
                    vec![keyword(rng, word)]
                }
                _ => vec![fuzz_value(rng)],
            });
        }
    }
    rng.shuffle(&mut modes);
    words.extend(modes.into_iter().flatten());
    words
}

/// `RL.POLICY SET name definition`, or a wild vector.
fn gen_policy_set(rng: &mut Rng) -> Call {
    let mut args = vec![keyword(rng, "RL.POLICY"), keyword(rng, "SET")];
    if rng.below(100) < 6 {
        for _ in 0..rng.below(6) {
            args.push(fuzz_value(rng));
        }
    } else {
        args.push(if rng.below(100) < 85 {
            policy_name(rng)
        } else {
            bad_name(rng)
        });
        let valid = rng.below(3) == 0;
        args.extend(policy_definition(rng, valid));
    }
    Call {
        kind: Kind::PolicySet,
        args,
        keys: Vec::new(),
    }
}

/// A `LOAD` text: up to 8 lines of definitions, comments, blank lines and
/// junk, ended by `\n` or `\r\n`; a third of the texts are valid.
fn load_text(rng: &mut Rng) -> Vec<u8> {
    let valid = rng.below(3) == 0;
    let mut used: Vec<Vec<u8>> = Vec::new();
    let mut text = Vec::new();
    for _ in 0..rng.below(9) {
        let mut line = Vec::new();
        if rng.below(6) == 0 {
            line.extend_from_slice(rng.pick::<&[u8]>(&[&b" "[..], b"\t", b"  \t "]));
        }
        let choice = if valid { rng.below(10) } else { rng.below(15) };
        match choice {
            0..=6 => {
                let name = if valid {
                    let fresh: Vec<&&str> = NAMES
                        .iter()
                        .filter(|n| !used.iter().any(|u| u == n.as_bytes()))
                        .collect();
                    if fresh.is_empty() || rng.below(5) == 0 {
                        let len = 1 + rng.below(64);
                        name_chars(rng, len)
                    } else {
                        rng.pick(&fresh).as_bytes().to_vec()
                    }
                } else {
                    policy_name(rng)
                };
                if valid && used.contains(&name) {
                    continue;
                }
                used.push(name.clone());
                let mut words = vec![name];
                words.extend(policy_definition(rng, valid));
                for (i, w) in words.iter().enumerate() {
                    if i > 0 {
                        line.extend_from_slice(rng.pick::<&[u8]>(&[
                            &b" "[..],
                            b" ",
                            b"\t",
                            b"   ",
                        ]));
                    }
                    line.extend_from_slice(w);
                }
            }
            7 => {
                line.extend_from_slice(rng.pick::<&[u8]>(&[
                    &b"# a comment"[..],
                    b"#p1 GCRA x",
                    b"#",
                ]));
            }
            8 => line.extend_from_slice(rng.pick::<&[u8]>(&[&b""[..], b" ", b"\t\t"])),
            9 => {
                line.extend_from_slice(b"#");
                line.extend(
                    (0..rng.below(30))
                        .map(|_| rng.next() as u8)
                        .filter(|&b| b != b'\n'),
                );
            }
            10 => {
                // A name defined twice.
                let name = match used.first() {
                    Some(n) => n.clone(),
                    None => b"p1".to_vec(),
                };
                line.extend_from_slice(&name);
                line.extend_from_slice(b" FIXEDWINDOW 5 60");
            }
            11 => line.extend((0..rng.below(40)).map(|_| rng.next() as u8)),
            12 => line.extend_from_slice(&policy_name(rng)),
            13 => line.extend_from_slice(&long_value(rng)),
            _ => {
                for _ in 0..1 + rng.below(5) {
                    line.extend_from_slice(&fuzz_value(rng));
                    line.push(b' ');
                }
            }
        }
        text.extend_from_slice(&line);
        text.extend_from_slice(if rng.below(4) == 0 { b"\r\n" } else { b"\n" });
    }
    if rng.below(2) == 0 && text.last() == Some(&b'\n') {
        text.pop();
    }
    text
}

/// `RL.POLICY LOAD [REPLACE] text`, sometimes with a wrong word or arity.
fn gen_policy_load(rng: &mut Rng) -> Call {
    let mut args = vec![keyword(rng, "RL.POLICY"), keyword(rng, "LOAD")];
    let text = load_text(rng);
    match rng.below(100) {
        0..=74 => args.push(text),
        75..=89 => {
            args.push(keyword(rng, "REPLACE"));
            args.push(text);
        }
        90..=94 => {
            args.push(
                rng.pick(&[&b"REPLACES"[..], b"REPLAC", b"", b"NX"])
                    .to_vec(),
            );
            args.push(text);
        }
        _ => {
            for _ in 0..rng.below(4) {
                args.push(fuzz_value(rng));
            }
        }
    }
    Call {
        kind: Kind::PolicyLoad,
        args,
        keys: Vec::new(),
    }
}

/// The other subcommands of `RL.POLICY`, right or wrong.
fn gen_policy_other(rng: &mut Rng) -> Call {
    let mut args = vec![keyword(rng, "RL.POLICY")];
    match rng.below(8) {
        0 => {
            args.push(keyword(rng, "GET"));
            args.push(policy_name(rng));
        }
        1 => {
            args.push(keyword(rng, "DEL"));
            args.push(policy_name(rng));
        }
        2 => args.push(keyword(rng, "LIST")),
        3 => args.push(keyword(rng, "DUMP")),
        4 => args.push(keyword(rng, "RESETSTATS")),
        // The server's "unknown subcommand" error quotes it: valid UTF-8,
        // or the client cannot read the reply.
        5 => {
            let junk = fuzz_value(rng);
            args.push(String::from_utf8_lossy(&junk).into_owned().into_bytes());
        }
        _ => {
            let sub = *rng.pick(&["GET", "DEL", "LIST", "DUMP", "RESETSTATS", "SET", "LOAD"]);
            args.push(keyword(rng, sub));
            for _ in 0..rng.below(4) {
                args.push(fuzz_value(rng));
            }
        }
    }
    Call {
        kind: Kind::PolicyOther,
        args,
        keys: Vec::new(),
    }
}

/// `RL.LIMIT key policy [options]` with a known policy, mostly, or a wild
/// vector; `BLOCK` (refused) now and then.
fn gen_limit(rng: &mut Rng, pool: &Pool) -> Call {
    let mut args = vec![keyword(rng, "RL.LIMIT")];
    if rng.below(100) < 8 {
        for i in 0..rng.below(6) {
            args.push(match rng.below(4) {
                0 => policy_name(rng),
                1 if i == 0 => rng.pick(&pool.keys).clone(),
                2 => {
                    let word = *rng.pick(&OPTION_WORDS);
                    keyword(rng, word)
                }
                _ => fuzz_value(rng),
            });
        }
    } else {
        let name = policy_name(rng);
        args.push(policy_key(rng, pool, &name));
        args.push(name);
        let block = rng.below(20) == 0;
        args.extend(options(rng, block));
    }
    let keys = args.get(1).cloned().into_iter().collect();
    Call {
        kind: Kind::Limit,
        args,
        keys,
    }
}

fn show(args: &[Vec<u8>]) -> String {
    let parts: Vec<String> = args
        .iter()
        .map(|a| {
            let s = String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned();
            if a.len() > 40 {
                format!("{s:?}…({} bytes)", a.len())
            } else {
                format!("{s:?}")
            }
        })
        .collect();
    parts.join(" ")
}

fn short(v: &Value) -> String {
    let s = format!("{v:?}");
    if s.len() > 200 {
        let mut end = 200;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    } else {
        s
    }
}

/// `[dump, pexpiretime]` of a key.
type Pair<'a> = (&'a Value, &'a Value);

/// What the snapshot script read: `RL.POLICY DUMP`, then each key's pair.
struct Snap<'a> {
    policies: &'a Value,
    keys: Vec<Pair<'a>>,
}

fn snap(v: &Value, keys: usize) -> Snap<'_> {
    match v {
        Value::Array(a) if a.len() == 1 + 2 * keys => Snap {
            policies: &a[0],
            keys: a[1..].chunks(2).map(|p| (&p[0], &p[1])).collect(),
        },
        other => panic!("snapshot of {keys} keys → {}", short(other)),
    }
}

/// A policy as `RL.POLICY DUMP` shows it: its limit type and modes.
struct PolicyDef {
    kind: Vec<u8>,
    shadow: bool,
    block: bool,
}

/// The policies of a `DUMP` text, by name.
fn policies(dump: &Value) -> Result<HashMap<Vec<u8>, PolicyDef>, String> {
    let Value::BulkString(text) = dump else {
        return Err(format!("RL.POLICY DUMP → {}", short(dump)));
    };
    let mut map = HashMap::new();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let words: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        if words.len() < 3 {
            return Err(format!(
                "RL.POLICY DUMP line {:?}",
                String::from_utf8_lossy(line)
            ));
        }
        let def = PolicyDef {
            kind: words[1].to_vec(),
            shadow: words[2..].contains(&&b"SHADOW"[..]),
            block: words[2..].contains(&&b"BLOCK"[..]),
        };
        map.insert(words[0].to_vec(), def);
    }
    Ok(map)
}

/// Whether a key changed between two reads: not if it merely expired (its
/// own expiry passed before the batch ended).
fn changed(before: Pair, after: Pair, batch_end_ms: i64) -> bool {
    if before == after {
        return false;
    }
    let expired =
        *after.0 == Value::Nil && matches!(before.1, Value::Int(e) if *e > 0 && *e <= batch_end_ms);
    !expired
}

fn exists(p: Pair) -> bool {
    *p.0 != Value::Nil
}

fn has_expiry(p: Pair) -> bool {
    matches!(p.1, Value::Int(e) if *e > 0)
}

fn describe(before: Pair, after: Pair) -> String {
    format!(
        "before {} / {:?}, after {} / {:?}",
        short(before.0),
        before.1,
        short(after.0),
        after.1
    )
}

/// What a call that did not err may do to one of its keys.
#[derive(Default, Clone, Copy)]
struct May {
    /// `PEEK` (or `CL.THROTTLE … 0`): nothing.
    peek: bool,
    /// `REFUND n`: give tokens back (or delete a full limiter).
    refund: bool,
    /// A `BLOCK` (the call's or its policy's): a limited call may write.
    block: bool,
    /// A `SHADOW` policy: an allowed call may have written nothing.
    shadow: bool,
    /// `FORCE` (this limit's, or in `RL.ALL` another's): a limited call
    /// may have written (its cost past the limit, or the other limits'
    /// tokens), with an expiry.
    force: bool,
}

/// Checks one key of a call that did not err; returns whether a limited
/// call wrote its block.
fn check_key(
    limited: bool,
    may: May,
    before: Pair,
    after: Pair,
    end_ms: i64,
) -> Result<bool, String> {
    let changed = changed(before, after, end_ms);
    let what = || describe(before, after);
    if may.peek {
        if changed {
            return Err(format!("a PEEK call changed its key: {}", what()));
        }
        return Ok(false);
    }
    if may.refund {
        if changed && exists(after) && !has_expiry(after) {
            return Err(format!("a refund left its key without expiry: {}", what()));
        }
        return Ok(false);
    }
    if limited {
        if !changed {
            return Ok(false);
        }
        if may.force {
            // Written past the limit (or, in RL.ALL, another limit's take):
            // with an expiry (a short one may have passed already).
            if exists(after) && !has_expiry(after) {
                return Err(format!(
                    "a forced call left its key without expiry: {}",
                    what()
                ));
            }
            return Ok(false);
        }
        if !may.block {
            return Err(format!("a limited call without BLOCK wrote: {}", what()));
        }
        if !exists(after) || !has_expiry(after) {
            return Err(format!(
                "a limited call's block left no key with an expiry: {}",
                what()
            ));
        }
        return Ok(true);
    }
    if exists(after) && !has_expiry(after) && (changed || !may.shadow) {
        return Err(format!("allowed, but the key has no expiry: {}", what()));
    }
    Ok(false)
}

/// The options of a call that succeeded (`words` follow the parameters): a
/// valid option list, or the module accepted what it should refuse.
fn read_options(words: &[Vec<u8>], variant: Option<&str>) -> Result<May, String> {
    let mut may = May::default();
    let (mut op, mut block, mut varied) = (false, false, false);
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let has_value = i + 1 < words.len();
        if w.eq_ignore_ascii_case(b"TOKENS") || w.eq_ignore_ascii_case(b"REFUND") {
            if op || !has_value {
                return Err("accepted a second TOKENS / REFUND or one without its n".into());
            }
            op = true;
            may.refund = w.eq_ignore_ascii_case(b"REFUND");
            i += 2;
        } else if w.eq_ignore_ascii_case(b"PEEK") {
            if may.peek {
                return Err("accepted PEEK twice".into());
            }
            may.peek = true;
            i += 1;
        } else if w.eq_ignore_ascii_case(b"BLOCK") {
            if block || !has_value {
                return Err("accepted a second BLOCK or one without its duration".into());
            }
            block = true;
            i += 2;
        } else if w.eq_ignore_ascii_case(b"FORCE") {
            if may.force {
                return Err("accepted FORCE twice".into());
            }
            may.force = true;
            i += 1;
        } else if variant.is_some_and(|v| w.eq_ignore_ascii_case(v.as_bytes())) {
            if varied || !has_value {
                return Err(format!(
                    "accepted a second {variant:?} or one without its value"
                ));
            }
            varied = true;
            i += 2;
        } else {
            return Err(format!(
                "accepted the option word {:?}",
                String::from_utf8_lossy(w)
            ));
        }
    }
    may.block = block;
    if may.force && (may.peek || may.refund) {
        return Err("accepted FORCE with PEEK or REFUND".into());
    }
    Ok(may)
}

/// The five integers obey the conventions of docs/commands/README.md; `delay`: an allowed
/// call may have a `retry_after` ≥ 0 (the leaky bucket's delay).
fn conventions(r: &[i64], delay: bool) -> Result<(), String> {
    let [limited, limit, remaining, retry, reset] = [r[0], r[1], r[2], r[3], r[4]];
    let ok = (limited == 0 || limited == 1)
        && limit >= 1
        && (0..=limit).contains(&remaining)
        && retry >= -1
        && reset >= 0
        && (limited == 1 || delay || retry == -1);
    if ok {
        Ok(())
    } else {
        Err(format!("reply breaks the conventions: {r:?}"))
    }
}

/// A refund that succeeded is allowed and has nothing to wait for.
fn refund_reply(r: &[i64]) -> Result<(), String> {
    if r[0] != 0 || r[3] != -1 {
        return Err(format!(
            "a refund must answer limited 0 and retry_after -1: {r:?}"
        ));
    }
    Ok(())
}

/// The integers of an array of `n` integers.
fn integers(v: &Value, n: usize) -> Option<Vec<i64>> {
    match v {
        Value::Array(items) if items.len() == n => items
            .iter()
            .map(|v| match v {
                Value::Int(i) => Some(*i),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// What one call did, for the tally.
#[derive(Default)]
struct Seen {
    error: bool,
    limited: bool,
    peek: bool,
    refund: bool,
    block_wrote: bool,
    variant: bool,
}

/// One call with what was read around it.
struct Checked<'a> {
    call: &'a Call,
    before: Snap<'a>,
    reply: &'a Value,
    after: Snap<'a>,
    end_ms: i64,
}

impl Checked<'_> {
    fn args(&self) -> &[Vec<u8>] {
        &self.call.args
    }

    /// The read of `key` before and after (it must have been read).
    fn pairs(&self, key: &[u8]) -> (Pair<'_>, Pair<'_>) {
        let i = self
            .call
            .keys
            .iter()
            .position(|k| k == key)
            .expect("the call's keys were read");
        (self.before.keys[i], self.after.keys[i])
    }

    /// No key read but `keys` changed.
    fn others_unchanged(&self, keys: &[&[u8]]) -> Result<(), String> {
        for (i, k) in self.call.keys.iter().enumerate() {
            if keys.contains(&k.as_slice()) {
                continue;
            }
            let (b, a) = (self.before.keys[i], self.after.keys[i]);
            if changed(b, a, self.end_ms) {
                return Err(format!(
                    "key {:?} changed: {}",
                    String::from_utf8_lossy(&k[..k.len().min(40)]),
                    describe(b, a)
                ));
            }
        }
        Ok(())
    }

    fn policies_unchanged(&self) -> Result<(), String> {
        if self.before.policies != self.after.policies {
            return Err(format!(
                "the policies changed: before {}, after {}",
                short(self.before.policies),
                short(self.after.policies)
            ));
        }
        Ok(())
    }

    /// `Some` for an error reply: a proper one, and nothing changed.
    fn error(&self) -> Option<Result<Seen, String>> {
        let Value::ServerError(e) = self.reply else {
            return None;
        };
        let (code, detail) = (e.code(), e.details().unwrap_or(""));
        let checked = if code != "ERR" && code != "WRONGTYPE" {
            Err(format!("unexpected error code {code} {detail}"))
        } else if detail.contains("internal error") {
            Err(format!("internal error (a caught panic?): {code} {detail}"))
        } else {
            self.others_unchanged(&[])
                .and_then(|()| self.policies_unchanged())
                .map_err(|m| format!("erring call ({code} {detail}) changed something: {m}"))
                .map(|()| Seen {
                    error: true,
                    ..Seen::default()
                })
        };
        Some(checked)
    }
}

fn check(cx: &Checked) -> Result<Seen, String> {
    if let Some(result) = cx.error() {
        return result;
    }
    match cx.call.kind {
        Kind::Single(c) => check_single(cx, c),
        Kind::Limit => check_limit(cx),
        Kind::All => check_all(cx),
        Kind::PolicySet | Kind::PolicyLoad | Kind::PolicyOther => check_policy(cx),
    }
}

fn check_single(cx: &Checked, c: usize) -> Result<Seen, String> {
    let (name, params, _) = COMMANDS[c];
    let args = cx.args();
    let r = integers(cx.reply, 5)
        .ok_or_else(|| format!("neither five integers nor an error: {}", short(cx.reply)))?;
    conventions(&r, name == "RL.LEAKYBUCKET")?;
    let may = if name == "CL.THROTTLE" {
        May {
            peek: args.len() == 6 && args[5] == b"0",
            ..May::default()
        }
    } else {
        read_options(&args[2 + params.len()..], variant_word(c))?
    };
    if may.refund {
        refund_reply(&r)?;
    }
    let limited = r[0] == 1;
    let (b, a) = cx.pairs(&args[1]);
    let block_wrote = check_key(limited, may, b, a, cx.end_ms)?;
    cx.policies_unchanged()?;
    Ok(Seen {
        limited,
        peek: may.peek,
        refund: may.refund,
        block_wrote,
        variant: variant_word(c)
            .is_some_and(|v| args.iter().any(|a| a.eq_ignore_ascii_case(v.as_bytes()))),
        ..Seen::default()
    })
}

fn check_limit(cx: &Checked) -> Result<Seen, String> {
    let args = cx.args();
    let r = integers(cx.reply, 5)
        .ok_or_else(|| format!("neither five integers nor an error: {}", short(cx.reply)))?;
    let known = policies(cx.before.policies)?;
    let def = known
        .get(&args[2])
        .ok_or("answered for a policy that does not exist")?;
    conventions(&r, def.kind == b"LEAKYBUCKET")?;
    let mut may = read_options(&args[3..], None)?;
    if may.block {
        return Err("RL.LIMIT accepted BLOCK".into());
    }
    may.block = def.block;
    may.shadow = def.shadow;
    let limited = r[0] == 1;
    if def.shadow && limited {
        return Err(format!("a SHADOW policy answered limited: {r:?}"));
    }
    if may.refund {
        refund_reply(&r)?;
    }
    let (b, a) = cx.pairs(&args[1]);
    let block_wrote = check_key(limited, may, b, a, cx.end_ms)?;
    cx.policies_unchanged()?;
    Ok(Seen {
        limited,
        peek: may.peek,
        refund: may.refund,
        block_wrote,
        ..Seen::default()
    })
}

fn check_all(cx: &Checked) -> Result<Seen, String> {
    let args = cx.args();
    let r = integers(cx.reply, 6)
        .ok_or_else(|| format!("neither six integers nor an error: {}", short(cx.reply)))?;
    let numkeys: usize = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| (1..=64).contains(n))
        .ok_or("accepted a numkeys out of 1..=64")?;
    let keys: Vec<&[u8]> = args[2..2 + numkeys].iter().map(Vec::as_slice).collect();
    // The limits, as the module must have read them: (shadow, block) per key.
    let known = policies(cx.before.policies)?;
    let mut modes: Vec<(bool, bool)> = Vec::with_capacity(numkeys);
    let mut forced = false;
    let mut at = 2 + numkeys;
    for _ in 0..numkeys {
        let word = args.get(at).ok_or("accepted too few limits")?;
        let upper = word.to_ascii_uppercase();
        let params = match upper.as_slice() {
            b"GCRA" | b"TOKENBUCKET" => 3,
            b"FIXEDWINDOW" | b"SLIDINGWINDOW" | b"SLIDINGLOG" => 2,
            b"POLICY" => 1,
            _ => {
                return Err(format!(
                    "accepted the limit {:?}",
                    String::from_utf8_lossy(word)
                ))
            }
        };
        if upper == b"POLICY" {
            let name = args.get(at + 1).ok_or("accepted POLICY without a name")?;
            let def = known
                .get(name)
                .ok_or("answered for a policy that does not exist")?;
            if def.kind == b"LEAKYBUCKET" {
                return Err("accepted a LEAKYBUCKET policy".into());
            }
            modes.push((def.shadow, def.block));
        } else {
            modes.push((false, false));
        }
        at += 1 + params;
        if args
            .get(at)
            .is_some_and(|w| w.eq_ignore_ascii_case(b"FORCE"))
        {
            forced = true;
            at += 1;
        }
    }
    let options = read_options(args.get(at..).unwrap_or(&[]), None)?;
    if options.force {
        return Err("RL.ALL accepted FORCE among its options".into());
    }
    if forced && (options.peek || options.refund) {
        return Err("RL.ALL accepted a forced limit with PEEK or REFUND".into());
    }
    conventions(&r[..5], false)?;
    let (limited, position) = (r[0] == 1, r[5]);
    if !(1..=numkeys as i64).contains(&position) {
        return Err(format!("position {position} of {numkeys} limits: {r:?}"));
    }
    let all_shadow = modes.iter().all(|&(shadow, _)| shadow);
    if all_shadow && limited {
        return Err(format!("only SHADOW policies, yet limited: {r:?}"));
    }
    if !all_shadow && modes[position as usize - 1].0 {
        return Err(format!("a SHADOW policy binds: {r:?}"));
    }
    if options.refund {
        refund_reply(&r)?;
    }
    let mut block_wrote = false;
    for (k, &(shadow, block)) in keys.iter().zip(&modes) {
        let may = May {
            block: options.block || block,
            shadow,
            force: forced,
            ..options
        };
        let (b, a) = cx.pairs(k);
        block_wrote |= check_key(limited, may, b, a, cx.end_ms)
            .map_err(|m| format!("key {:?}: {m}", String::from_utf8_lossy(k)))?;
    }
    cx.others_unchanged(&keys)?;
    cx.policies_unchanged()?;
    Ok(Seen {
        limited,
        peek: options.peek,
        refund: options.refund,
        block_wrote,
        ..Seen::default()
    })
}

/// `RL.POLICY …` that did not err.
fn check_policy(cx: &Checked) -> Result<Seen, String> {
    let args = cx.args();
    let after = policies(cx.after.policies)?;
    match cx.call.kind {
        Kind::PolicySet => {
            if *cx.reply != Value::Okay {
                return Err(format!("SET → {}", short(cx.reply)));
            }
            if !after.contains_key(&args[2]) {
                return Err("SET answered OK, but DUMP does not show the policy".into());
            }
        }
        Kind::PolicyLoad => {
            let Value::Int(n) = *cx.reply else {
                return Err(format!("LOAD → {}", short(cx.reply)));
            };
            let before = policies(cx.before.policies)?;
            let replace = args.len() == 4;
            let expected = if replace {
                after.len() as i64 == n
            } else {
                after.len() as i64 >= n.max(before.len() as i64)
            };
            if n < 0 || !expected {
                return Err(format!(
                    "LOAD{} set {n}, but {} policies before and {} after",
                    if replace { " REPLACE" } else { "" },
                    before.len(),
                    after.len()
                ));
            }
        }
        _ => {
            if !args[1].eq_ignore_ascii_case(b"DEL") {
                cx.policies_unchanged()?;
            }
        }
    }
    Ok(Seen::default())
}

#[derive(Default, Debug)]
struct Tally {
    allowed: u64,
    limited: u64,
    errors: u64,
    peeks: u64,
    refunds: u64,
    block_writes: u64,
    /// Answered calls with the command's variant option (`ALIGN`, `BUCKETS`).
    variants: u64,
}

fn fuzz(seed: u64, batches: usize, calls_per_batch: usize) {
    let mut server = Server::start();
    let mut con = server.connect();
    let timeout = Some(Duration::from_secs(300));
    con.set_read_timeout(timeout).unwrap();
    con.set_write_timeout(timeout).unwrap();
    // The policies and the DUMP and PEXPIRETIME of each key at one instant:
    // a script runs with the clock frozen, so no key can expire in between.
    let snapshot: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(
            "local r = {redis.call('RL.POLICY', 'DUMP')}
             for _, k in ipairs(KEYS) do
               r[#r + 1] = redis.call('DUMP', k)
               r[#r + 1] = redis.call('PEXPIRETIME', k)
             end
             return r",
        )
        .query(&mut con)
        .unwrap();
    let mut rng = Rng::new(seed);
    let mut tally: HashMap<&str, Tally> = HashMap::new();
    let mut total = 0usize;
    let started = Instant::now();
    for batch in 0..batches {
        let pool = setup_pool(&mut con, batch);
        let calls: Vec<Call> = (0..calls_per_batch)
            .map(|_| gen_call(&mut rng, &pool))
            .collect();
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for call in &calls {
            pipe.cmd("EVALSHA")
                .arg(&snapshot)
                .arg(call.keys.len())
                .arg(&call.keys);
            pipe.cmd(std::str::from_utf8(&call.args[0]).unwrap());
            for a in &call.args[1..] {
                pipe.arg(a.as_slice());
            }
            pipe.cmd("EVALSHA")
                .arg(&snapshot)
                .arg(call.keys.len())
                .arg(&call.keys);
        }
        pipe.cmd("TIME");
        let replies: Vec<Value> = pipe.query(&mut con).unwrap_or_else(|e| {
            let alive = server.is_alive();
            panic!(
                "seed {seed} batch {batch}: no answer ({e}); server alive: {alive}\n{}",
                server.log()
            )
        });
        let time = match replies.last() {
            Some(Value::Array(t)) => t.clone(),
            other => panic!("TIME → {other:?}"),
        };
        let secs: i64 = redis::from_redis_value(time[0].clone()).unwrap();
        let micros: i64 = redis::from_redis_value(time[1].clone()).unwrap();
        let end_ms = secs * 1000 + micros / 1000;
        for (call, replies) in calls.iter().zip(replies.chunks(3)) {
            let cx = Checked {
                call,
                before: snap(&replies[0], call.keys.len()),
                reply: &replies[1],
                after: snap(&replies[2], call.keys.len()),
                end_ms,
            };
            match check(&cx) {
                Ok(seen) => {
                    let t = tally.entry(call.kind.label()).or_default();
                    if seen.error {
                        t.errors += 1;
                    } else if seen.limited {
                        t.limited += 1;
                    } else {
                        t.allowed += 1;
                    }
                    t.peeks += u64::from(seen.peek);
                    t.refunds += u64::from(seen.refund);
                    t.block_writes += u64::from(seen.block_wrote);
                    t.variants += u64::from(seen.variant);
                }
                Err(why) => panic!("seed {seed} batch {batch}: {}\n  → {why}", show(&call.args)),
            }
        }
        total += calls.len();
    }
    assert!(total >= batches * calls_per_batch);
    let mut pong: String = redis::cmd("PING").query(&mut con).expect("PING at the end");
    assert_eq!(pong, "PONG");
    // A fresh connection works too, and the process is still the same one.
    pong = redis::cmd("PING").query(&mut server.connect()).unwrap();
    assert_eq!(pong, "PONG");
    assert!(server.is_alive(), "the server died:\n{}", server.log());
    eprintln!(
        "fuzzed {total} calls (seed {seed}) in {:.1?}:",
        started.elapsed()
    );
    for label in LABELS {
        eprintln!("  {label:18} {:?}", tally.get(label));
    }
    // The generator must reach every outcome of every command, or the
    // checks above prove little. Per 1,000 calls of the run:
    let n = (batches * calls_per_batch / 1000) as u64;
    for label in LABELS {
        let t = tally
            .get(label)
            .unwrap_or_else(|| panic!("{label} never called"));
        // allowed (for RL.POLICY: succeeded), limited, errors
        let (allowed, limited, errors) = match label {
            "RL.POLICY SET" => (5, 0, 5),
            "RL.POLICY LOAD" => (1, 0, 2),
            "RL.POLICY other" => (1, 0, 1),
            "RL.ALL" | "RL.LIMIT" => (5, 1, 5),
            _ => (5, 1, 10),
        };
        assert!(
            t.allowed >= allowed * n && t.limited >= limited * n && t.errors >= errors * n,
            "{label}: the fuzzer is degenerate: {t:?}"
        );
        if label.starts_with("RL.") && !label.starts_with("RL.POLICY") {
            assert!(
                t.peeks >= n && t.refunds >= n && t.block_writes >= (n / 20).max(1),
                "{label}: the fuzzer rarely reaches PEEK, REFUND or a BLOCK write: {t:?}"
            );
        }
        if matches!(label, "RL.FIXEDWINDOW" | "RL.SLIDINGWINDOW") {
            assert!(
                t.variants >= 2 * n,
                "{label}: the fuzzer rarely answers ALIGN / BUCKETS calls: {t:?}"
            );
        }
    }
}

fn seed() -> u64 {
    std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0006)
}

/// Batches of 1,000 calls: 100 unless `FUZZ_BATCHES` says otherwise
/// (`make test-memcheck` runs fewer under valgrind).
fn batches() -> usize {
    std::env::var("FUZZ_BATCHES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

#[test]
fn a_hundred_thousand_random_calls_never_hurt_the_server() {
    if !common::module_only(
        "the module's fuzz test with policies; tests/differential.rs drives the library",
    ) {
        return;
    }
    fuzz(seed(), batches(), 1_000);
}

/// `τ = T × (max_burst + 1)` of `CL.THROTTLE` once passed i128 (found by this
/// fuzz test): a debug build panicked (caught: "internal error") and a release
/// build wrapped to a negative τ and refused every call. It is an error (the
/// period's bound, 366 days, now refuses it first), and nothing is written.
#[test]
fn cl_throttle_tolerance_overflow_is_refused() {
    if !common::module_only(
        "the module's fuzz test with policies; tests/differential.rs drives the library",
    ) {
        return;
    }
    let mut server = Server::start();
    let mut con = server.connect();
    let args = [
        "CL.THROTTLE",
        "k",
        "9200000000001",
        "1",
        "922337203685477580",
    ];
    let err = common::query::<Value>(&mut con, &args).expect_err("accepted");
    let text = common::error_text(&err);
    assert!(
        text.starts_with("ERR period must be >= 1 and <= 31622400"),
        "{args:?} → {text}"
    );
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut con).unwrap();
    assert_eq!(exists, 0, "the call wrote");
    assert!(server.is_alive());
}

#[test]
#[ignore = "long: run with --ignored"]
fn two_million_random_calls_never_hurt_the_server() {
    if !common::module_only(
        "the module's fuzz test with policies; tests/differential.rs drives the library",
    ) {
        return;
    }
    for i in 0..10 {
        fuzz(seed().wrapping_add(i), 200, 1_000);
    }
}

// ---- RL.CONCURRENCY (issue 32) ----

/// A lease id: mostly a few short ones (so calls meet held leases), else
/// empty, too long, binary, with colons, or a keyword.
fn lease_id(rng: &mut Rng) -> Vec<u8> {
    match rng.below(100) {
        0..=69 => format!("id{}", rng.below(5)).into_bytes(),
        70..=74 => Vec::new(),
        75..=79 => vec![b'x'; 120 + rng.below(20)],
        80..=84 => (0..1 + rng.below(12)).map(|_| rng.next() as u8).collect(),
        85..=89 => b"1:2:B".to_vec(),
        90..=94 => {
            let word = *rng.pick(&["ACQUIRE", "PEEK", "B", "TOKENS"]);
            random_case(rng, word)
        }
        _ => fuzz_value(rng),
    }
}

/// `ACQUIRE|RENEW|RELEASE id` and options, well-formed or not.
fn lease_tail(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut t = Vec::new();
    match rng.below(20) {
        0 => {}
        1 => t.push(fuzz_value(rng)),
        _ => {
            let word = *rng.pick(&["ACQUIRE", "ACQUIRE", "RENEW", "RELEASE"]);
            t.push(random_case(rng, word))
        }
    }
    if rng.below(30) != 0 {
        t.push(lease_id(rng));
    }
    for _ in 0..rng.below(4) {
        match rng.below(10) {
            0..=2 => {
                t.push(random_case(rng, "TOKENS"));
                t.push(if rng.below(4) == 0 {
                    fuzz_value(rng)
                } else {
                    (1 + rng.below(6)).to_string().into_bytes()
                });
            }
            3..=4 => t.push(random_case(rng, "PEEK")),
            5..=6 => {
                t.push(random_case(rng, "BLOCK"));
                t.push(if rng.below(4) == 0 {
                    fuzz_value(rng)
                } else {
                    b"0.05".to_vec()
                });
            }
            7 => {
                t.push(random_case(rng, "REFUND"));
                t.push(b"1".to_vec());
            }
            _ => t.push(fuzz_value(rng)),
        }
    }
    t
}

/// One call: the command's words and the keys it names.
fn gen_concurrency(rng: &mut Rng, pool: &Pool) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let key = match rng.below(10) {
        0..=5 => format!("c:{}", rng.below(3)).into_bytes(),
        _ => rng.pick(&pool.keys).clone(),
    };
    let (limit, lease) = if rng.below(10) < 8 {
        (
            (1 + rng.below(4)).to_string().into_bytes(),
            rng.pick(&[&b"0.02"[..], b"0.2", b"60"]).to_vec(),
        )
    } else {
        (fuzz_value(rng), fuzz_value(rng))
    };
    match rng.below(10) {
        0..=6 => {
            let mut args = vec![
                random_case(rng, "RL.CONCURRENCY"),
                key.clone(),
                limit,
                lease,
            ];
            args.extend(lease_tail(rng));
            if rng.below(20) == 0 {
                args.truncate(1 + rng.below(args.len()));
            }
            (args, vec![key])
        }
        7..=8 => {
            let other = format!("c:g{}", rng.below(2)).into_bytes();
            let mut args = vec![
                b"RL.ALL".to_vec(),
                b"2".to_vec(),
                other.clone(),
                key.clone(),
                b"GCRA".to_vec(),
                b"5".to_vec(),
                b"1".to_vec(),
                b"0.2".to_vec(),
                random_case(rng, "CONCURRENCY"),
                limit,
                lease,
            ];
            args.extend(lease_tail(rng));
            (args, vec![other, key])
        }
        _ => {
            let mut args = vec![b"RL.LIMIT".to_vec(), key.clone(), b"pc".to_vec()];
            args.extend(lease_tail(rng));
            (args, vec![key])
        }
    }
}

/// Random `RL.CONCURRENCY` calls (alone, in `RL.ALL`, through a policy)
/// against keys of every type: the server answers; an error is `ERR` /
/// `WRONGTYPE`, never an internal error, and changes nothing; a reply obeys
/// the conventions (and `remaining ≤ limit`); `PEEK` and a refusal without
/// `BLOCK` change nothing; an allowed call leaves its keys with an expiry
/// (or gone).
#[test]
fn random_concurrency_calls_never_hurt_the_server() {
    if !common::module_only("the module's commands, raw (tests/differential.rs covers the library)")
    {
        return;
    }
    let mut server = Server::start();
    let mut con = server.connect();
    let mut rng = Rng::new(seed() ^ 32);
    let (mut allowed, mut limited, mut errors, mut blocks) = (0, 0, 0, 0);
    for batch in 0..batches().min(20) {
        let pool = setup_pool(&mut con, batch);
        let _: () = redis::cmd("RL.POLICY")
            .arg(&["SET", "pc", "CONCURRENCY", "3", "0.2", "BLOCK", "0.05"])
            .query(&mut con)
            .unwrap();
        for _ in 0..1_000 {
            let (args, keys) = gen_concurrency(&mut rng, &pool);
            let arity = match args[0].to_ascii_uppercase().as_slice() {
                b"RL.CONCURRENCY" => 6,
                b"RL.ALL" => 4,
                _ => 3,
            };
            if args.len() < arity {
                // Refused when queued: outside a transaction.
                let name = String::from_utf8_lossy(&args[0]).to_string();
                let r: redis::RedisResult<Value> =
                    redis::cmd(&name).arg(&args[1..]).query(&mut con);
                let e = r.expect_err("a call below the arity");
                assert!(
                    common::error_text(&e).contains("wrong number of arguments"),
                    "{e:?}"
                );
                errors += 1;
                continue;
            }
            let mut pipe = redis::pipe();
            pipe.atomic().ignore_errors();
            for k in &keys {
                pipe.cmd("DUMP").arg(k).cmd("PEXPIRETIME").arg(k);
            }
            pipe.cmd(std::str::from_utf8(&args[0]).unwrap_or("RL.CONCURRENCY"))
                .arg(&args[1..]);
            for k in &keys {
                pipe.cmd("DUMP").arg(k).cmd("PEXPIRETIME").arg(k);
            }
            let r: Vec<Value> = pipe.query(&mut con).expect("the server answers");
            let n = keys.len();
            let (before, reply, after) = (&r[..2 * n], &r[2 * n], &r[2 * n + 1..]);
            let call = show(&args);
            let unchanged = before == after;
            let upper: Vec<String> = args
                .iter()
                .map(|a| String::from_utf8_lossy(a).to_uppercase())
                .collect();
            match reply {
                Value::ServerError(e) => {
                    errors += 1;
                    let code = e.code();
                    assert!(code == "ERR" || code == "WRONGTYPE", "{call} → {e:?}");
                    assert!(
                        !e.details().unwrap_or("").contains("internal error"),
                        "{call} → {e:?}"
                    );
                    assert!(unchanged, "{call} failed and changed its keys");
                }
                Value::Array(items) => {
                    let ints: Vec<i64> = items
                        .iter()
                        .map(|v| match v {
                            Value::Int(i) => *i,
                            _ => i64::MIN,
                        })
                        .collect();
                    assert!(
                        ints.len() == 5 || (ints.len() == 6 && upper[0] == "RL.ALL"),
                        "{call} → {ints:?}"
                    );
                    let [lim, limit, remaining, retry, reset] =
                        [ints[0], ints[1], ints[2], ints[3], ints[4]];
                    assert!(lim == 0 || lim == 1, "{call} → {ints:?}");
                    assert!(
                        limit >= 1 && (0..=limit).contains(&remaining),
                        "{call} → {ints:?}"
                    );
                    assert!(reset >= 0, "{call} → {ints:?}");
                    if lim == 0 {
                        allowed += 1;
                        assert_eq!(retry, -1, "{call} → {ints:?}");
                    } else {
                        limited += 1;
                        assert!(retry == -1 || retry >= 1, "{call} → {ints:?}");
                    }
                    // The options follow the operation and its id.
                    let from = match upper[0].as_str() {
                        "RL.CONCURRENCY" => 6,
                        "RL.ALL" => 13,
                        _ => 5,
                    };
                    let options = upper.get(from..).unwrap_or_default();
                    let peek = options.iter().any(|w| w == "PEEK");
                    let block = options.iter().any(|w| w == "BLOCK") || upper[0] == "RL.LIMIT";
                    if peek {
                        assert!(unchanged, "{call} peeked and changed its keys");
                    } else if lim == 1 && !block {
                        assert!(unchanged, "{call} was refused and changed its keys");
                    } else if lim == 1 && !unchanged {
                        blocks += 1;
                    }
                    for i in 0..n {
                        let exists = !matches!(after[2 * i], Value::Nil);
                        if exists && !unchanged {
                            assert!(
                                matches!(after[2 * i + 1], Value::Int(t) if t > 0),
                                "{call} left a key without expiry"
                            );
                        }
                    }
                }
                other => panic!("{call} → {other:?}"),
            }
        }
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert!(server.is_alive());
    assert!(
        allowed > 100 && limited > 100 && errors > 100 && blocks > 0,
        "degenerate: {allowed} allowed, {limited} limited, {errors} errors, {blocks} blocks"
    );
}
