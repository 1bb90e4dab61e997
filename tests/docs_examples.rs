//! The documentation's examples, replayed against a real server; and its links, checked.
//!
//! `replays_every_redis_cli_example` finds every fenced block of README.md and docs/**/*.md
//! that holds a `redis-cli` transcript, runs it against a redis-server with the module (the
//! real `redis-cli` binary, so that replies are compared byte for byte in its formatting), and
//! compares what it prints with what the block shows. The convention (CONTRIBUTING.md,
//! "Examples in the documentation"):
//!
//! * A line `127.0.0.1:6379> CMD …` (any host:port prompt) sends `CMD …` to the server through
//!   `redis-cli`; a `MULTI` … `EXEC` run shares one connection. A line `$ …` is run by bash,
//!   where `redis-cli` talks to the test's server; `$ sleep 0.2` waits. The lines up to the
//!   next command are its expected output.
//! * Numbers must match exactly, except:
//!   - timing fields: elements 4 and 5 of an `RL.*` reply (and each limit's under
//!     `WITHLIMITS`), and `PTTL`'s reply, in ms, may differ by the block's tolerance
//!     (default 50 ms); `-1` must stay `-1`;
//!   - timestamps (integers of 13, 16 or 19 digits: ms, µs, ns since the epoch) are compared
//!     relative to the first one of the chain of blocks: the same unit, and the same offset
//!     from it within the tolerance.
//! * An HTML comment right before a block, `<!-- replay: item; item -->`, adjusts it:
//!   `tolerance N` (ms), `varies 5` (reply elements not compared: they depend on where the
//!   clock falls in an epoch-aligned window; say so in the text), `continues` (the block goes
//!   on from the previous block of the page: same keys, same timestamp anchor), `fresh server`
//!   (the chain runs on a server of its own: `INFO` counts, `LOAD REPLACE`),
//!   `skip <reason>` (not run; for what needs a cluster, a replica or a restart), and, on a
//!   block that is not a transcript, `file NAME` (its text is written to NAME in the working
//!   directory of `$` lines).
//! * Every key a chain names must be its own: two chains on the shared server naming the same
//!   key (or policy) fail the test.
//!
//! Chains that sleep run in threads of their own, the others one after the other.
//!
//! `every_relative_link_resolves` checks that every relative link and `#anchor` of README.md,
//! CONTRIBUTING.md and docs/**/*.md points at a file and heading that exist.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::Server;

const DEFAULT_TOLERANCE_MS: i64 = 50;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, CONTRIBUTING.md and every .md under docs/, relative to the root, sorted.
fn doc_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("read docs/")
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    walk(&root.join("docs"), &mut files);
    files
        .into_iter()
        .map(|p| p.strip_prefix(&root).expect("under root").to_path_buf())
        .collect()
}

/// A fenced code block and the replay directives written right before it.
struct Block {
    file: PathBuf,
    line: usize,
    lines: Vec<String>,
    directives: Vec<String>,
}

fn blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(file)).expect("read doc");
    let mut out = Vec::new();
    let mut directives: Vec<String> = Vec::new();
    let mut current: Option<(usize, String, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some((start, fence, mut lines)) = current.take() {
            if trimmed == fence {
                out.push(Block {
                    file: file.to_path_buf(),
                    line: start + 1,
                    lines,
                    directives: std::mem::take(&mut directives),
                });
            } else {
                // An indented block (in a list) loses its indentation.
                let indent = line.len() - trimmed.len();
                lines.push(if indent > 0 && line.len() >= indent {
                    trimmed.to_string()
                } else {
                    line.to_string()
                });
                current = Some((start, fence, lines));
            }
        } else if trimmed.starts_with("```") {
            let fence: String = trimmed.chars().take_while(|c| *c == '`').collect();
            current = Some((i, fence, Vec::new()));
        } else if let Some(rest) = trimmed.strip_prefix("<!-- replay:") {
            let body = rest.trim_end().trim_end_matches("-->");
            directives = body
                .split(';')
                .map(|d| d.trim().to_string())
                .filter(|d| !d.is_empty())
                .collect();
        } else if !trimmed.is_empty() {
            directives.clear();
        }
    }
    assert!(
        current.is_none(),
        "{}: an unclosed code block",
        file.display()
    );
    out
}

/// `127.0.0.1:6379> CMD` → `CMD`.
fn prompt_command(line: &str) -> Option<&str> {
    let (head, rest) = line.split_once("> ")?;
    let (host, port) = head.rsplit_once(':')?;
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    (host_ok && !port.is_empty() && port.chars().all(|c| c.is_ascii_digit())).then_some(rest)
}

fn is_transcript(block: &Block) -> bool {
    block
        .lines
        .iter()
        .any(|l| l.starts_with("$ ") || prompt_command(l).is_some())
}

/// Splits arguments as a shell (and redis-cli) would for the simple cases the docs use:
/// quotes, and a stop at shell operators.
fn split_args(s: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None | Some(';' | '|' | '>' | '<' | '&' | ')') => return args,
            _ => {}
        }
        let mut arg = String::new();
        while let Some(&c) = chars.peek() {
            match c {
                '\'' | '"' => {
                    chars.next();
                    for q in chars.by_ref() {
                        if q == c {
                            break;
                        }
                        arg.push(q);
                    }
                }
                c if c.is_whitespace() || matches!(c, ';' | '|' | '>' | '<' | '&') => break,
                _ => {
                    arg.push(c);
                    chars.next();
                }
            }
        }
        args.push(arg);
    }
}

/// The redis-cli commands a `$` line runs (each `redis-cli …` in it, options left out).
fn shell_commands(line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("redis-cli ") {
        rest = &rest[at + "redis-cli ".len()..];
        let mut args = split_args(rest);
        while args.first().is_some_and(|a| a.starts_with('-')) {
            let opt = args.remove(0);
            if matches!(opt.as_str(), "-p" | "-h" | "-n" | "-a" | "-r" | "-i") && !args.is_empty() {
                args.remove(0);
            }
        }
        if !args.is_empty() {
            out.push(args);
        }
    }
    out
}

/// The keys (and policy names, prefixed `policy:`) a command names.
fn names(args: &[String]) -> Vec<String> {
    let cmd = args[0].to_ascii_uppercase();
    let arg = |i: usize| args.get(i).cloned().into_iter().collect::<Vec<_>>();
    match cmd.as_str() {
        "RL.ALL" => {
            let n: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(0);
            let mut out: Vec<String> = args.iter().skip(2).take(n).cloned().collect();
            let mut i = 2 + n;
            while i < args.len() {
                if args[i].eq_ignore_ascii_case("POLICY") {
                    out.extend(arg(i + 1).into_iter().map(|p| format!("policy:{p}")));
                }
                i += 1;
            }
            out
        }
        "RL.LIMIT" => {
            let mut out = arg(1);
            out.extend(arg(2).into_iter().map(|p| format!("policy:{p}")));
            out
        }
        "RL.POLICY" => match args.get(1).map(|s| s.to_ascii_uppercase()).as_deref() {
            Some("SET" | "DEL") => arg(2).into_iter().map(|p| format!("policy:{p}")).collect(),
            _ => Vec::new(),
        },
        c if c.starts_with("RL.") || c == "CL.THROTTLE" => arg(1),
        "GET" | "SET" | "SETEX" | "DEL" | "EXISTS" | "PEXPIRETIME" | "PTTL" | "TTL" | "ZRANGE"
        | "ZADD" | "STRLEN" | "RPUSH" | "LPUSH" | "TYPE" => arg(1),
        _ => Vec::new(),
    }
}

/// One step of a transcript: what runs, its commands, and what it shows (each expected line
/// with the index of the command that prints it).
struct Step {
    line: usize,
    kind: StepKind,
    commands: Vec<Vec<String>>,
    expected: Vec<(usize, String)>,
}

enum StepKind {
    /// Consecutive prompt lines: one redis-cli session (its stdin), so that the calls follow
    /// each other as closely as they do when typed, and MULTI … EXEC shares a connection.
    Session(Vec<String>),
    /// One bash line.
    Shell(String),
}

fn steps(block: &Block) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    for (i, line) in block.lines.iter().enumerate() {
        let line_no = block.line + 1 + i;
        if let Some(cmd) = prompt_command(line) {
            let args = split_args(cmd);
            if let Some(Step {
                kind: StepKind::Session(lines),
                commands,
                ..
            }) = out.last_mut()
            {
                lines.push(cmd.to_string());
                commands.push(args);
                continue;
            }
            out.push(Step {
                line: line_no,
                kind: StepKind::Session(vec![cmd.to_string()]),
                commands: vec![args],
                expected: Vec::new(),
            });
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            out.push(Step {
                line: line_no,
                kind: StepKind::Shell(cmd.to_string()),
                commands: shell_commands(cmd),
                expected: Vec::new(),
            });
        } else {
            let step = out.last_mut().unwrap_or_else(|| {
                panic!(
                    "{}:{}: output before any command",
                    block.file.display(),
                    line_no
                )
            });
            let command = step.commands.len().saturating_sub(1);
            step.expected.push((command, line.clone()));
        }
    }
    out
}

/// A chain: a block and the blocks that continue it.
struct Chain {
    blocks: Vec<Block>,
    fresh_server: bool,
}

impl Chain {
    fn sleeps(&self) -> bool {
        self.blocks
            .iter()
            .any(|b| b.lines.iter().any(|l| l.starts_with("$ sleep")))
    }

    fn location(&self) -> String {
        format!("{}:{}", self.blocks[0].file.display(), self.blocks[0].line)
    }
}

fn directive<'a>(block: &'a Block, name: &str) -> Option<&'a str> {
    block.directives.iter().find_map(|d| {
        let rest = d.strip_prefix(name)?;
        (rest.is_empty() || rest.starts_with([' ', ':']))
            .then(|| rest.trim_start_matches(':').trim())
    })
}

/// Compares one command's output. `timing`: which reply elements are durations in ms
/// (`None`: none; for `PTTL`, element 0 is the bare integer).
struct Compare<'a> {
    tolerance_ms: i64,
    varies: &'a BTreeSet<usize>,
    /// The chain's first timestamp: (expected, actual) in µs.
    anchor: &'a mut Option<(i128, i128)>,
}

fn timing_elements(command: &[String]) -> fn(usize) -> bool {
    let name = command
        .first()
        .map(|c| c.to_ascii_uppercase())
        .unwrap_or_default();
    if name == "PTTL" {
        |i| i == 0
    } else if name.starts_with("RL.") && name != "RL.POLICY" {
        |i| i == 4 || i == 5 || (i > 6 && matches!((i - 6) % 5, 4 | 0))
    } else {
        |_| false
    }
}

/// Splits a line into text and unsigned digit runs (a `-` stays in the text before a number).
fn tokens(line: &str) -> Vec<(bool, &str)> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        let digit = bytes[start].is_ascii_digit();
        let mut end = start;
        while end < bytes.len() && bytes[end].is_ascii_digit() == digit {
            end += 1;
        }
        out.push((digit, &line[start..end]));
        start = end;
    }
    out
}

/// The µs a timestamp of this many digits stands for, or None when it is not one.
fn timestamp_us(digits: &str) -> Option<i128> {
    let v: i128 = digits.parse().ok()?;
    match digits.len() {
        13 => Some(v * 1000),
        16 => Some(v),
        19 => Some(v / 1000),
        _ => None,
    }
}

impl Compare<'_> {
    fn line(
        &mut self,
        timing: fn(usize) -> bool,
        expected: &str,
        actual: &str,
    ) -> Result<(), String> {
        // A reply element: `N) (integer) V`, or a bare `(integer) V`.
        let element = |s: &str| -> Option<(usize, i64)> {
            let (n, rest) = match s.split_once(") (integer) ") {
                Some((n, v)) => (n.trim().parse().ok()?, v),
                None => (0, s.strip_prefix("(integer) ")?),
            };
            Some((n, rest.trim().parse().ok()?))
        };
        if let (Some((i, e)), Some((j, a))) = (element(expected), element(actual)) {
            if i == j && timing(i) {
                if self.varies.contains(&i) {
                    return Ok(());
                }
                let ok = if e == -1 || a == -1 {
                    e == a
                } else {
                    (e - a).abs() <= self.tolerance_ms
                };
                return if ok {
                    Ok(())
                } else {
                    Err(format!("{TIMING_MISS} of {} ms", self.tolerance_ms))
                };
            }
        }
        let (te, ta) = (tokens(expected), tokens(actual));
        if te.len() != ta.len() {
            return Err("the line differs".into());
        }
        for ((de, se), (da, sa)) in te.iter().zip(&ta) {
            if de != da {
                return Err("the line differs".into());
            }
            if !de || se == sa {
                if se != sa {
                    return Err("the line differs".into());
                }
                continue;
            }
            let (Some(ue), Some(ua)) = (timestamp_us(se), timestamp_us(sa)) else {
                return Err(format!("{se} differs"));
            };
            if se.len() != sa.len() {
                return Err(format!("{sa}: not a timestamp in the unit of {se}"));
            }
            match *self.anchor {
                None => *self.anchor = Some((ue, ua)),
                Some((e0, a0)) => {
                    let off = (ua - a0) - (ue - e0);
                    // A ms timestamp is rounded: one more ms of slack.
                    let slack = i128::from(self.tolerance_ms) * 1000
                        + if se.len() == 13 { 1000 } else { 0 };
                    if off.abs() > slack {
                        return Err(format!(
                            "{TIMING_MISS}: timestamp {sa} is {off} µs off the expected offset from the chain's first"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn redis_cli() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string())
}

fn run_step(step: &Step, port: u16, workdir: &Path) -> String {
    let output = match &step.kind {
        StepKind::Session(lines) => {
            let mut child = Command::new(redis_cli())
                .args(["-p", &port.to_string(), "--no-raw"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run redis-cli (is redis-tools installed?)");
            let mut stdin = child.stdin.take().expect("stdin");
            for line in lines {
                writeln!(stdin, "{line}").expect("write to redis-cli");
            }
            drop(stdin);
            child.wait_with_output().expect("redis-cli output")
        }
        StepKind::Shell(line) => {
            let script = format!(
                "redis-cli() {{ command {} -p {port} --no-raw \"$@\"; }}\n{line}",
                redis_cli()
            );
            Command::new("bash")
                .args(["-c", &script])
                .current_dir(workdir)
                .stdin(Stdio::null())
                .output()
                .expect("run bash")
        }
    };
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    text
}

/// Replays a chain; returns its failures.
fn replay(chain: &Chain, port: u16, workdir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let mut anchor = None;
    for block in &chain.blocks {
        let tolerance_ms = directive(block, "tolerance")
            .map(|t| t.parse().expect("tolerance N (ms)"))
            .unwrap_or(DEFAULT_TOLERANCE_MS);
        let varies: BTreeSet<usize> = directive(block, "varies")
            .map(|v| {
                v.split(|c: char| !c.is_ascii_digit())
                    .take_while(|n| !n.is_empty())
                    .map(|n| n.parse().expect("varies N"))
                    .collect()
            })
            .unwrap_or_default();
        let mut compare = Compare {
            tolerance_ms,
            varies: &varies,
            anchor: &mut anchor,
        };
        for step in steps(block) {
            let actual = run_step(&step, port, workdir);
            let actual: Vec<&str> = actual.lines().map(|l| l.trim_end_matches('\r')).collect();
            let where_ = format!("{}:{}", block.file.display(), step.line);
            let expected: Vec<&str> = step.expected.iter().map(|(_, l)| l.as_str()).collect();
            let report = |why: &str| {
                format!(
                    "{where_}: {why}\n--- expected\n{}\n--- printed\n{}",
                    expected.join("\n"),
                    actual.join("\n")
                )
            };
            if actual.len() != expected.len() {
                failures.push(report(&format!(
                    "{} lines expected, {} printed",
                    expected.len(),
                    actual.len()
                )));
                continue;
            }
            for ((command, e), a) in step.expected.iter().zip(&actual) {
                let timing = step
                    .commands
                    .get(*command)
                    .map(|c| timing_elements(c))
                    .unwrap_or(|_| false);
                if let Err(why) = compare.line(timing, e, a) {
                    failures.push(report(&format!("{why} (in `{e}`)")));
                    break;
                }
            }
        }
    }
    failures
}

/// The words of a failure that is a duration outside its tolerance.
const TIMING_MISS: &str = "a duration outside the tolerance";

#[test]
fn replays_every_redis_cli_example() {
    if !common::module_only("the docs' redis-cli examples are module commands") {
        return;
    }
    let mut chains: Vec<Chain> = Vec::new();
    let mut skipped = Vec::new();
    let workdir = tempfile::tempdir().expect("temp dir");
    for file in doc_files() {
        if file.starts_with("CONTRIBUTING.md") {
            continue;
        }
        let mut previous_in_file: Option<usize> = None;
        for block in blocks(&file) {
            if let Some(name) = directive(&block, "file") {
                std::fs::write(workdir.path().join(name), block.lines.join("\n") + "\n")
                    .expect("write the block's file");
                continue;
            }
            if let Some(reason) = directive(&block, "skip") {
                assert!(
                    !reason.is_empty(),
                    "{}:{}: skip needs a reason",
                    file.display(),
                    block.line
                );
                skipped.push(format!("{}:{}: {reason}", file.display(), block.line));
                continue;
            }
            if !is_transcript(&block) {
                continue;
            }
            if directive(&block, "continues").is_some() {
                let i = previous_in_file.unwrap_or_else(|| {
                    panic!("{}:{}: continues nothing", file.display(), block.line)
                });
                chains[i].blocks.push(block);
            } else {
                let fresh_server = directive(&block, "fresh server").is_some();
                chains.push(Chain {
                    blocks: vec![block],
                    fresh_server,
                });
                previous_in_file = Some(chains.len() - 1);
            }
        }
    }

    // Every key or policy on the shared server belongs to one chain.
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    let mut clashes = Vec::new();
    for chain in chains.iter().filter(|c| !c.fresh_server) {
        let mut mine = BTreeSet::new();
        for block in &chain.blocks {
            for step in steps(block) {
                for command in &step.commands {
                    mine.extend(names(command));
                }
            }
        }
        for name in mine {
            if let Some(other) = owner.insert(name.clone(), chain.location()) {
                clashes.push(format!("{name}: used by {other} and {}", chain.location()));
            }
        }
    }
    assert!(
        clashes.is_empty(),
        "examples share keys (give each its own):\n{}",
        clashes.join("\n")
    );

    let shared = Server::start();
    let run = |chain: &Chain| -> Vec<String> {
        let failures = if chain.fresh_server {
            let own = Server::start();
            replay(chain, own.port, workdir.path())
        } else {
            replay(chain, shared.port, workdir.path())
        };
        // A chain that sleeps can miss its tolerance when the machine is
        // busy (a sleep that overslept): replayed once more, on a server of
        // its own, when every miss is a duration; a wrong value never is.
        if !failures.is_empty()
            && chain.sleeps()
            && failures.iter().all(|f| f.contains(TIMING_MISS))
        {
            eprintln!(
                "docs_examples: {}: a duration missed (busy machine?), replayed once",
                chain.location()
            );
            let own = Server::start();
            return replay(chain, own.port, workdir.path());
        }
        failures
    };
    let (sleepy, quick): (Vec<&Chain>, Vec<&Chain>) = chains.iter().partition(|c| c.sleeps());
    let mut failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = sleepy.iter().map(|c| s.spawn(|| run(c))).collect();
        let mut failures: Vec<String> = quick.iter().flat_map(|c| run(c)).collect();
        for h in handles {
            failures.extend(h.join().expect("a replay thread"));
        }
        failures
    });
    failures.sort();
    let blocks: usize = chains.iter().map(|c| c.blocks.len()).sum();
    eprintln!(
        "docs_examples: {blocks} blocks replayed in {} chains, {} skipped:",
        chains.len(),
        skipped.len()
    );
    for s in &skipped {
        eprintln!("  skipped {s}");
    }
    assert!(
        failures.is_empty(),
        "{} example(s) do not reproduce:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        blocks >= 20,
        "only {blocks} blocks found: is the parser broken?"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(file: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let s = slug(&line[hashes..].replace('`', ""));
            let n = seen.entry(s.clone()).or_insert(0);
            out.insert(if *n == 0 {
                s.clone()
            } else {
                format!("{s}-{n}")
            });
            *n += 1;
        }
        let mut rest = line;
        while let Some(at) = rest.find("<a id=\"") {
            rest = &rest[at + 7..];
            if let Some(end) = rest.find('"') {
                out.insert(rest[..end].to_string());
            }
        }
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let root = root();
    let mut broken = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(root.join(&file)).expect("read doc");
        let dir = file.parent().unwrap_or(Path::new(""));
        let mut fence = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fence = !fence;
            }
            if fence {
                continue;
            }
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                rest = &rest[at + 2..];
                let Some(end) = rest.find(')') else { break };
                let target = &rest[..end];
                rest = &rest[end..];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let resolved = if path.is_empty() {
                    root.join(&file)
                } else {
                    root.join(dir).join(path)
                };
                let here = format!("{}:{}: {target}", file.display(), n + 1);
                if !resolved.exists() {
                    broken.push(format!("{here}: no such file"));
                } else if !anchor.is_empty()
                    && resolved.extension().is_some_and(|e| e == "md")
                    && !anchors(&resolved).contains(anchor)
                {
                    broken.push(format!("{here}: no such anchor"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The convention's own checks: a wrong count fails, a drifting duration within the
/// tolerance passes, and timestamps compare relative to the chain's first.
#[test]
fn the_comparison_tells_counts_from_timings() {
    let varies = BTreeSet::new();
    let mut anchor = None;
    let mut c = Compare {
        tolerance_ms: 50,
        varies: &varies,
        anchor: &mut anchor,
    };
    let rl = timing_elements(&["RL.GCRA".to_string()]);
    assert!(c.line(rl, "3) (integer) 4", "3) (integer) 4").is_ok());
    assert!(c.line(rl, "3) (integer) 4", "3) (integer) 3").is_err());
    assert!(c.line(rl, "5) (integer) 100", "5) (integer) 140").is_ok());
    assert!(c.line(rl, "5) (integer) 100", "5) (integer) 151").is_err());
    assert!(c.line(rl, "4) (integer) -1", "4) (integer) 10").is_err());
    assert!(c.line(rl, "(error) ERR x", "(error) ERR y").is_err());
    let none = timing_elements(&["GET".to_string()]);
    assert!(c
        .line(none, "\"1795297569629333:1\"", "\"1800000000000000:1\"")
        .is_ok());
    assert!(c
        .line(none, "\"1795297569729333:1\"", "\"1800000000100000:1\"")
        .is_ok());
    assert!(c
        .line(none, "\"1795297569729333:1\"", "\"1800000000300000:1\"")
        .is_err());
    assert!(c
        .line(none, "\"1795297569729333:1\"", "\"1800000000100000:2\"")
        .is_err());
    assert!(c
        .line(none, "(integer) 1795297569730", "(integer) 1800000000101")
        .is_ok());
    assert!(c
        .line(
            none,
            "(integer) 1795297569730",
            "(integer) 1800000000100000"
        )
        .is_err());
}

/// No file of the repository points users at a home the project does not
/// own (issue 41): the organisation `redis-ratelimit` on GitHub (or GitLab)
/// is someone else's, and a user following such a link may land on their
/// code. Every tracked text file is read (the packages' metadata too).
#[test]
fn no_url_points_at_a_home_the_project_does_not_own() {
    let root = root();
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output();
    let Some(listed) = listed.ok().filter(|o| o.status.success()) else {
        eprintln!("skipped: not a git checkout");
        return;
    };
    // Spelled in pieces, so that this file does not match itself.
    let homes = [
        ["github.com", "/redis-ratelimit"].concat(),
        ["gitlab.com", "/redis-ratelimit"].concat(),
        ["redis-ratelimit", ".github.io"].concat(),
    ];
    let mut found = Vec::new();
    for name in listed.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let file = root.join(String::from_utf8_lossy(name).as_ref());
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // binary, or removed from the work tree
        };
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            if homes.iter().any(|h| lower.contains(h.as_str())) {
                found.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "URLs the project does not own:\n{}",
        found.join("\n")
    );
}
