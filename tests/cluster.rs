//! Redis Cluster: a 3-master cluster on loopback, every node with the module.
//! Commands are routed by their key (position 1), decisions hold across the
//! cluster, a node that does not own a key answers MOVED, and moving a slot
//! that holds limiter keys keeps each limiter's state and expiry.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{call_err, query, Server};

/// Every command with its limit, for keys of the form `{prefix}N`.
const COMMANDS: [(&str, &[&str], i64); 7] = [
    ("gcra", &["RL.GCRA", "KEY", "4", "1", "600"], 5),
    ("tb", &["RL.TOKENBUCKET", "KEY", "5", "1", "600"], 5),
    ("cell", &["CL.THROTTLE", "KEY", "4", "1", "600"], 5),
    ("fw", &["RL.FIXEDWINDOW", "KEY", "5", "3600"], 5),
    ("sw", &["RL.SLIDINGWINDOW", "KEY", "5", "600"], 5),
    ("log", &["RL.SLIDINGLOG", "KEY", "5", "600"], 5),
    ("lb", &["RL.LEAKYBUCKET", "KEY", "5", "1", "600"], 5),
];

struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    /// Three masters, slots split evenly, joined with CLUSTER MEET.
    fn start() -> Cluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| {
                Server::start_with(&[
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
            let mut con = node.connect();
            let _: () = query(
                &mut con,
                &["CLUSTER", "ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()],
            )
            .unwrap();
        }
        let mut first = nodes[0].connect();
        for node in &nodes[1..] {
            let _: () = query(
                &mut first,
                &["CLUSTER", "MEET", "127.0.0.1", &node.port.to_string()],
            )
            .unwrap();
        }
        let cluster = Cluster { nodes };
        cluster.wait_ok();
        cluster
    }

    fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        'nodes: for node in &self.nodes {
            let mut con = node.connect();
            loop {
                let info: String = query(&mut con, &["CLUSTER", "INFO"]).unwrap();
                if info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3") {
                    continue 'nodes;
                }
                assert!(Instant::now() < deadline, "cluster not ready:\n{info}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    fn client(&self) -> redis::cluster::ClusterConnection {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect();
        redis::cluster::ClusterClient::new(urls)
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn node_id(&self, i: usize) -> String {
        query(&mut self.nodes[i].connect(), &["CLUSTER", "MYID"]).unwrap()
    }

    /// The index of the node that owns `key`.
    fn owner(&self, key: &str) -> usize {
        let slot: i64 = query(&mut self.nodes[0].connect(), &["CLUSTER", "KEYSLOT", key]).unwrap();
        [5460, 10922, 16383]
            .iter()
            .position(|&hi| slot <= hi)
            .unwrap()
    }
}

fn with_key(cmd: &[&str], key: &str) -> Vec<String> {
    cmd.iter()
        .map(|&a| {
            if a == "KEY" {
                key.to_string()
            } else {
                a.to_string()
            }
        })
        .collect()
}

fn cluster_call(con: &mut redis::cluster::ClusterConnection, args: &[String]) -> [i64; 5] {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let v: Vec<i64> = common::cmd(&words)
        .query(con)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    v.try_into().unwrap()
}

#[test]
fn commands_route_by_key_and_decide_across_the_cluster() {
    let cluster = Cluster::start();
    let mut con = cluster.client();
    for (prefix, cmd, limit) in COMMANDS {
        for i in 0..100 {
            let key = format!("{prefix}:{i}");
            let args = with_key(cmd, &key);
            for taken in 1..=limit {
                let r = cluster_call(&mut con, &args);
                assert_eq!(r[..3], [0, limit, limit - taken], "{args:?}");
            }
            assert_eq!(
                cluster_call(&mut con, &args)[0],
                1,
                "{args:?}: the limit holds"
            );
        }
    }
    // Keys landed on every master.
    for node in &cluster.nodes {
        let n: i64 = query(&mut node.connect(), &["DBSIZE"]).unwrap();
        assert!(n > 100, "a master holds only {n} keys");
    }
    // A node that does not own a key redirects: the key position is declared.
    let key = "gcra:0";
    let wrong = (cluster.owner(key) + 1) % 3;
    let err = call_err(
        &mut cluster.nodes[wrong].connect(),
        &["RL.GCRA", key, "4", "1", "600"],
    );
    assert!(err.starts_with("MOVED"), "{err}");
}

#[test]
fn moving_a_slot_keeps_each_limiters_state_and_expiry() {
    let cluster = Cluster::start();
    let mut con = cluster.client();
    // Limiter keys that share one slot through a hash tag, each used twice.
    let keys: Vec<(String, Vec<String>)> = COMMANDS
        .iter()
        .map(|(prefix, cmd, _)| {
            let key = format!("{{tenant:7}}:{prefix}");
            (key.clone(), with_key(cmd, &key))
        })
        .collect();
    for (_, args) in &keys {
        cluster_call(&mut con, args);
        cluster_call(&mut con, args);
    }
    let from = cluster.owner("{tenant:7}");
    let to = (from + 1) % 3;
    let mut src = cluster.nodes[from].connect();
    let mut dst = cluster.nodes[to].connect();
    let before: HashMap<String, (Vec<u8>, i64)> = keys
        .iter()
        .map(|(k, _)| {
            let dump: Vec<u8> = query(&mut src, &["DUMP", k]).unwrap();
            let expire: i64 = query(&mut src, &["PEXPIRETIME", k]).unwrap();
            assert!(!dump.is_empty() && expire > 0, "{k}");
            (k.clone(), (dump, expire))
        })
        .collect();

    // Move the slot: IMPORTING / MIGRATING, MIGRATE the keys, then NODE.
    let slot: i64 = query(&mut src, &["CLUSTER", "KEYSLOT", "{tenant:7}"]).unwrap();
    let slot = slot.to_string();
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    let _: () = query(
        &mut dst,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id],
    )
    .unwrap();
    let _: () = query(
        &mut src,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id],
    )
    .unwrap();
    let in_slot: Vec<String> =
        query(&mut src, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]).unwrap();
    assert_eq!(in_slot.len(), keys.len());
    let port = cluster.nodes[to].port.to_string();
    let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    migrate.extend(in_slot.iter().map(String::as_str));
    let _: () = query(&mut src, &migrate).unwrap();
    for node in &cluster.nodes {
        let _: () = query(
            &mut node.connect(),
            &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id],
        )
        .unwrap();
    }

    // Same bytes on the new owner, and the same expiry up to what MIGRATE
    // itself does: it sends the TTL relative (expire − now on the source) and
    // RESTORE adds the destination's now, so the expiry can only move later
    // by the milliseconds the transfer took. The state holds absolute times,
    // so a key that lingers that long is equivalent to no key.
    for (k, (dump, expire)) in &before {
        let moved: Vec<u8> = query(&mut dst, &["DUMP", k]).unwrap();
        assert_eq!(&moved, dump, "{k}: state changed in the move");
        let moved_expire: i64 = query(&mut dst, &["PEXPIRETIME", k]).unwrap();
        assert!(
            (0..=100).contains(&(moved_expire - expire)),
            "{k}: expiry {expire} became {moved_expire}"
        );
    }
    // And the limiters carry on from where they were, through the cluster client.
    let mut con = cluster.client();
    for ((_, args), (_, _, limit)) in keys.iter().zip(COMMANDS) {
        let r = cluster_call(&mut con, args);
        assert_eq!(r[..3], [0, limit, limit - 3], "{args:?}");
    }
    // The old owner redirects.
    let err = call_err(&mut src, &["RL.GCRA", "{tenant:7}:gcra", "4", "1", "600"]);
    assert!(err.starts_with("MOVED"), "{err}");
}

#[test]
fn all_needs_its_keys_in_one_slot_and_hash_tags_put_them_there() {
    let cluster = Cluster::start();
    let all = |a: &str, b: &str| -> Vec<String> {
        [
            "RL.ALL",
            "2",
            a,
            b,
            "GCRA",
            "4",
            "1",
            "60",
            "FIXEDWINDOW",
            "10",
            "60",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let owner = cluster.owner("{user:1}:min");
    let mut con = cluster.nodes[owner].connect();
    let tagged = all("{user:1}:min", "{user:1}:day");
    let refs: Vec<&str> = tagged.iter().map(String::as_str).collect();
    let reply: Vec<i64> = query(&mut con, &refs).unwrap();
    assert_eq!((reply[0], reply[5]), (0, 1), "{reply:?}");
    // Keys of different slots: refused, nothing written.
    let other_key = (0..100)
        .map(|i| format!("other:{i}"))
        .find(|k| cluster.owner(k) == owner)
        .unwrap();
    let spread = all("{user:1}:min", &other_key);
    let refs: Vec<&str> = spread.iter().map(String::as_str).collect();
    let err = call_err(&mut con, &refs);
    assert!(err.starts_with("CROSSSLOT"), "{err}");
    assert_eq!(query::<i64>(&mut con, &["EXISTS", &other_key]).unwrap(), 0);
    // Another node redirects the call to the keys' owner.
    let mut elsewhere = cluster.nodes[(owner + 1) % 3].connect();
    let refs: Vec<&str> = tagged.iter().map(String::as_str).collect();
    let err = call_err(&mut elsewhere, &refs);
    assert!(err.starts_with("MOVED"), "{err}");
}
