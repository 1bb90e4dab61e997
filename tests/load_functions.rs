//! `make load-functions` (scripts/load-functions.sh) against servers without
//! the module: a password-protected server reached by `REDIS_URL` (user and
//! password, percent-encoded), and every primary of a 3-primary cluster
//! (`CLUSTER=1`). It loads the library only where it is absent or older than
//! the checkout's, keeps a newer one, and fails (exit status, a line that says
//! why) on a wrong password or a refused `FUNCTION`.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{library_source, Server};

/// The checkout's library version (`local VERSION = n`).
fn checkout_version() -> i64 {
    library_source()
        .lines()
        .find_map(|l| l.strip_prefix("local VERSION = "))
        .and_then(|v| v.trim().parse().ok())
        .expect("functions/ratelimit.lua has a 'local VERSION = n' line")
}

/// The library's source with another `VERSION`.
fn library_at(version: i64) -> String {
    library_source().replace(
        &format!("local VERSION = {}\n", checkout_version()),
        &format!("local VERSION = {version}\n"),
    )
}

/// `make -s load-functions` with these variables; (exit ok, stdout + stderr).
fn make_load(vars: &[(&str, &str)]) -> (bool, String) {
    let mut make = Command::new("make");
    make.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "-s",
        "--no-print-directory",
        "load-functions",
    ]);
    for (name, value) in vars {
        make.arg(format!("{name}={value}"));
    }
    let Output {
        status,
        stdout,
        stderr,
    } = make.output().expect("run make");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    (status.success(), text)
}

/// A connection authenticated as `user` / `password`.
fn connect_as(port: u16, user: &str, password: &str) -> redis::Connection {
    redis::Client::open(format!("redis://{user}:{password}@127.0.0.1:{port}/"))
        .expect("client")
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect")
}

/// `FCALL_RO rl_version 0`, or 0 when the library is absent.
fn server_version(con: &mut redis::Connection) -> i64 {
    redis::cmd("FCALL_RO")
        .arg("rl_version")
        .arg(0)
        .query(con)
        .unwrap_or(0)
}

fn load(con: &mut redis::Connection, code: &str) {
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(code)
        .query(con)
        .expect("FUNCTION LOAD REPLACE");
}

#[test]
fn a_password_protected_server_by_redis_url_loads_only_when_absent_or_older() {
    let server = Server::start_without_module(&["--save", "", "--appendonly", "no"]);
    let mut admin = server.connect();
    // An ACL user with a password that needs percent-encoding in a URL, the default user off.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "ops", "on", ">p@ss:w/rd", "~*", "+@all"])
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "off"])
        .query(&mut admin)
        .unwrap();
    let mut con = connect_as(server.port, "ops", "p%40ss%3Aw%2Frd");
    let url = format!("redis://ops:p%40ss%3Aw%2Frd@127.0.0.1:{}", server.port);
    let want = checkout_version();
    let name = format!("127.0.0.1:{}", server.port);

    let (ok, out) = make_load(&[("REDIS_URL", &url)]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("{name}: loaded version {want} (none before)")),
        "{out}"
    );
    assert_eq!(server_version(&mut con), want);

    // The same version: left alone.
    let (ok, out) = make_load(&[("REDIS_URL", &url)]);
    assert!(
        ok && out.contains(&format!("{name}: kept version {want}")),
        "{out}"
    );

    // An older library is replaced; a newer one is kept.
    load(&mut con, &library_at(1));
    let (ok, out) = make_load(&[("REDIS_URL", &url)]);
    assert!(
        ok && out.contains(&format!("loaded version {want} (replaced version 1)")),
        "{out}"
    );
    assert_eq!(server_version(&mut con), want);
    load(&mut con, &library_at(want + 1000));
    let (ok, out) = make_load(&[("REDIS_URL", &url)]);
    assert!(
        ok && out.contains(&format!("kept version {}", want + 1000)),
        "{out}"
    );
    assert_eq!(server_version(&mut con), want + 1000);

    // A wrong password, and a user without FUNCTION: a failure that says why.
    let (ok, out) = make_load(&[(
        "REDIS_URL",
        &format!("redis://ops:wrong@127.0.0.1:{}", server.port),
    )]);
    assert!(
        !ok && out.contains("FAILED") && out.contains("WRONGPASS"),
        "{out}"
    );
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "app", "on", ">pw", "~*", "+@all", "-function"])
        .query(&mut con)
        .unwrap();
    load(&mut con, &library_at(1));
    let (ok, out) = make_load(&[(
        "REDIS_URL",
        &format!("redis://app:pw@127.0.0.1:{}", server.port),
    )]);
    assert!(!ok && out.contains("an administrator loads it"), "{out}");
    assert_eq!(server_version(&mut con), 1);
}

/// Three primaries without the module, slots split evenly, every node
/// protected by `requirepass`.
fn start_cluster(password: &str) -> Vec<Server> {
    let nodes: Vec<Server> = (0..3)
        .map(|_| {
            Server::start_without_module(&[
                "--save",
                "",
                "--appendonly",
                "no",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
            ])
        })
        .collect();
    let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
    for (node, (lo, hi)) in nodes.iter().zip(ranges) {
        let _: () = redis::cmd("CLUSTER")
            .arg(&["ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()])
            .query(&mut node.connect())
            .unwrap();
    }
    for node in &nodes[1..] {
        let _: () = redis::cmd("CLUSTER")
            .arg(&["MEET", "127.0.0.1", &node.port.to_string()])
            .query(&mut nodes[0].connect())
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        let mut con = node.connect();
        loop {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
            if info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3") {
                break;
            }
            assert!(Instant::now() < deadline, "cluster not ready:\n{info}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "requirepass", password])
            .query(&mut con)
            .unwrap();
    }
    nodes
}

#[test]
fn cluster_1_loads_on_every_primary_where_absent_or_older() {
    let nodes = start_cluster("s3cret");
    let want = checkout_version();
    let mut cons: Vec<redis::Connection> = nodes
        .iter()
        .map(|n| connect_as(n.port, "default", "s3cret"))
        .collect();
    // The third primary already has a newer library: it keeps it.
    load(&mut cons[2], &library_at(want + 1000));

    let url = format!("redis://default:s3cret@127.0.0.1:{}", nodes[1].port);
    let (ok, out) = make_load(&[("REDIS_URL", &url), ("CLUSTER", "1")]);
    assert!(ok, "{out}");
    for (i, node) in nodes.iter().enumerate() {
        let line = if i == 2 {
            format!("127.0.0.1:{}: kept version {}", node.port, want + 1000)
        } else {
            format!(
                "127.0.0.1:{}: loaded version {want} (none before)",
                node.port
            )
        };
        assert!(out.contains(&line), "no '{line}' in:\n{out}");
    }
    let versions: Vec<i64> = cons.iter_mut().map(server_version).collect();
    assert_eq!(versions, [want, want, want + 1000]);

    // Without CLUSTER=1 only the node of the URL: a cluster's other primaries are not reached.
    load(&mut cons[0], &library_at(1));
    load(&mut cons[1], &library_at(1));
    let (ok, out) = make_load(&[("REDIS_URL", &url)]);
    assert!(ok && out.lines().count() == 1, "{out}");
    let versions: Vec<i64> = cons.iter_mut().map(server_version).collect();
    assert_eq!(versions, [1, want, want + 1000]);

    // CLUSTER=1 on a server that is not in a cluster: a failure that says why.
    let single = Server::start_without_module(&["--save", "", "--appendonly", "no"]);
    let (ok, out) = make_load(&[
        ("REDIS_URL", &format!("redis://127.0.0.1:{}", single.port)),
        ("CLUSTER", "1"),
    ]);
    assert!(!ok && out.contains("cluster support disabled"), "{out}");
}
