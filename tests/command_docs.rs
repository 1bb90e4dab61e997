//! `COMMAND DOCS`, `COMMAND INFO` and `RL.POLICY HELP` stay byte-identical
//! across refactors: they are compared with the golden files under
//! `tests/golden/command-docs/`, one per server line (what the server shows
//! depends on its version: ACL categories, doc fields). The goldens were
//! written by the module as it was before the core crate moved out (issue
//! 25); `RATELIMIT_BLESS=1` writes them again, for a deliberate change.
//! Subcommands are compared sorted by name: the server keeps them in a hash
//! table, in an order that changes from one process to the next.

mod common;

use std::fmt::Write as _;
use std::path::PathBuf;

use common::{query, Server};
use redis::Value;

/// Renders a reply one element a line, nested by indentation: stable and
/// readable in a diff.
fn render(value: &Value, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    match value {
        Value::Array(items) | Value::Set(items) => {
            let _ = writeln!(out, "{pad}array ({})", items.len());
            for item in items {
                render(item, depth + 1, out);
            }
        }
        Value::Map(pairs) => {
            let _ = writeln!(out, "{pad}map ({})", pairs.len());
            for (k, v) in pairs {
                render(k, depth + 1, out);
                render(v, depth + 2, out);
            }
        }
        Value::BulkString(bytes) => {
            let _ = writeln!(out, "{pad}{:?}", String::from_utf8_lossy(bytes));
        }
        Value::SimpleString(s) => {
            let _ = writeln!(out, "{pad}+{s}");
        }
        Value::Int(i) => {
            let _ = writeln!(out, "{pad}{i}");
        }
        Value::Nil => {
            let _ = writeln!(out, "{pad}nil");
        }
        other => {
            let _ = writeln!(out, "{pad}{other:?}");
        }
    }
}

/// A subcommand's name (`rl.policy|set`).
fn subcommand_name(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) if b.contains(&b'|') => Some(b),
        Value::Array(items) => items.first().and_then(subcommand_name),
        _ => None,
    }
}

/// Sorts the subcommands of a container by name: the server keeps them in a
/// hash table, so their order changes from one process to the next.
fn normalize(v: Value) -> Value {
    match v {
        Value::Array(items) => {
            let mut items: Vec<Value> = items.into_iter().map(normalize).collect();
            // COMMAND INFO: an array of subcommands, each an array.
            if !items.is_empty()
                && items
                    .iter()
                    .all(|i| matches!(i, Value::Array(_)) && subcommand_name(i).is_some())
            {
                items.sort_by(|a, b| subcommand_name(a).cmp(&subcommand_name(b)));
                return Value::Array(items);
            }
            // COMMAND DOCS: name, docs, name, docs, … (RESP2's flat map).
            if !items.is_empty()
                && items.len() % 2 == 0
                && items
                    .iter()
                    .step_by(2)
                    .all(|i| matches!(i, Value::BulkString(_)) && subcommand_name(i).is_some())
            {
                let mut pairs: Vec<(Value, Value)> = Vec::new();
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                pairs.sort_by(|a, b| subcommand_name(&a.0).cmp(&subcommand_name(&b.0)));
                items = pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
            }
            Value::Array(items)
        }
        other => other,
    }
}

/// The server line the golden belongs to: `redis-7.0`, `valkey-8.0`, ….
fn server_line(con: &mut redis::Connection) -> String {
    let info: String = query(con, &["INFO", "server"]).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .map(|v| v.trim().to_string())
    };
    let version = field("valkey_version")
        .map(|v| ("valkey", v))
        .or_else(|| field("redis_version").map(|v| ("redis", v)))
        .expect("INFO server names a version");
    // Valkey also says redis_version (7.2.4, for compatibility): its own
    // version decides.
    let (name, version) = if field("server_name").as_deref() == Some("valkey") {
        ("valkey", field("valkey_version").unwrap_or(version.1))
    } else {
        version
    };
    let minor: Vec<&str> = version.split('.').take(2).collect();
    format!("{name}-{}", minor.join("."))
}

#[test]
fn command_docs_info_and_help_are_unchanged() {
    if !common::module_only("COMMAND DOCS/INFO of the module's commands") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let mut names: Vec<String> = query(
        &mut con,
        &["COMMAND", "LIST", "FILTERBY", "MODULE", "ratelimit"],
    )
    .unwrap();
    // RL.DEBUGPANIC and RL.DEBUGCLOCK exist in debug builds only.
    names.retain(|n| n != "rl.debugpanic" && n != "rl.debugclock");
    names.sort();
    assert!(names.len() >= 10, "the module's commands: {names:?}");
    let mut out = String::new();
    for name in &names {
        for what in ["DOCS", "INFO"] {
            let v = normalize(query(&mut con, &["COMMAND", what, name]).unwrap());
            let _ = writeln!(out, "== COMMAND {what} {name}");
            render(&v, 0, &mut out);
        }
    }
    let help: Value = query(&mut con, &["RL.POLICY", "HELP"]).unwrap();
    let _ = writeln!(out, "== RL.POLICY HELP");
    render(&help, 0, &mut out);

    let line = server_line(&mut con);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/command-docs")
        .join(format!("{line}.txt"));
    if std::env::var_os("RATELIMIT_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &out).unwrap();
        return;
    }
    let Ok(golden) = std::fs::read_to_string(&path) else {
        // A server line without a golden (a newer server than CI runs):
        // nothing to compare with; the lines CI runs all have one.
        eprintln!(
            "no golden for {line} at {}: write one with RATELIMIT_BLESS=1",
            path.display()
        );
        return;
    };
    if golden != out {
        let first = golden
            .lines()
            .zip(out.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(golden.lines().count().min(out.lines().count()));
        panic!(
            "COMMAND DOCS/INFO or RL.POLICY HELP changed on {line}: first difference at line {} of {}:\n  golden: {:?}\n  now:    {:?}",
            first + 1,
            path.display(),
            golden.lines().nth(first),
            out.lines().nth(first)
        );
    }
}
