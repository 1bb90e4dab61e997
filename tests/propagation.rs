//! Writes skip `RedisModule_Replicate` only while nothing can consume the
//! effects (no AOF, no replication backlog, no replica), and never lose or
//! misrepresent a write because of it: a replica attached later, a replica
//! that resynchronises partially from the backlog, an AOF switched on at run
//! time and a promoted replica all get the effects (`SET … PXAT`, `ZADD`, …),
//! never an `RL.*` command; and every write still counts for `save` points.
//! `INFO ratelimit` counts the writes of each kind.

mod common;

use std::time::{Duration, Instant};

use common::{
    aof_contents, call, info_field, info_int, query, snapshot, wait_for_sync, wait_until, Server,
};

/// One allowed (writing) call of every command, on keys `{prefix}:0` …
/// `{prefix}:6`; returns the keys.
fn write_all(con: &mut redis::Connection, prefix: &str) -> Vec<String> {
    let commands: [(&str, &[&str]); 7] = [
        ("RL.GCRA", &["4", "3", "600"]),
        ("RL.TOKENBUCKET", &["6", "7", "900"]),
        ("CL.THROTTLE", &["3", "2", "600"]),
        ("RL.FIXEDWINDOW", &["5", "3600"]),
        ("RL.SLIDINGWINDOW", &["5", "600"]),
        ("RL.SLIDINGLOG", &["5", "600"]),
        ("RL.LEAKYBUCKET", &["5", "3", "600"]),
    ];
    commands
        .iter()
        .enumerate()
        .map(|(i, (command, params))| {
            let key = format!("{prefix}:{i}");
            let mut args = vec![*command, key.as_str()];
            args.extend_from_slice(params);
            let reply = call(con, &args);
            assert_eq!(reply[0], 0, "{args:?} was limited: {reply:?}");
            key
        })
        .collect()
}

/// `INFO commandstats` of a replica names no module command: it received
/// effects only.
fn assert_no_module_commands_ran(con: &mut redis::Connection, who: &str) {
    let stats: String = query(con, &["INFO", "commandstats"]).unwrap();
    for line in stats.lines() {
        let lower = line.to_lowercase();
        assert!(
            !lower.starts_with("cmdstat_rl.") && !lower.starts_with("cmdstat_cl."),
            "{who} ran a module command, not its effects: {line}"
        );
    }
}

/// `INFO ratelimit`: (writes that propagated effects, writes that skipped
/// it because nothing consumed them).
fn counters(con: &mut redis::Connection) -> (i64, i64) {
    (
        info_int(con, "ratelimit", "ratelimit_writes_propagated"),
        info_int(con, "ratelimit", "ratelimit_writes_unpropagated"),
    )
}

/// How many command filters the module has registered (`INFO modules`).
fn filters(con: &mut redis::Connection) -> String {
    let info: String = query(con, &["INFO", "modules"]).unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("module:name=ratelimit,"))
        .unwrap_or_else(|| panic!("the module is not in INFO modules:\n{info}"));
    line.split(',')
        .find_map(|part| part.strip_prefix("filters="))
        .unwrap_or_else(|| panic!("no filters= in {line}"))
        .to_string()
}

/// `replica` acknowledges everything written through the `master`
/// connection (`WAIT` waits for that connection's own writes) and holds the
/// same bytes and expiry for `keys`, having received effects only; lists the
/// keys that differ otherwise.
fn assert_replica_matches(
    master: &mut redis::Connection,
    replica: &mut redis::Connection,
    keys: &[String],
) {
    let acked: i64 = query(master, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge");
    let (on_master, on_replica) = (snapshot(master, keys), snapshot(replica, keys));
    let differ: Vec<_> = on_master
        .iter()
        .zip(&on_replica)
        .filter(|(m, r)| m != r)
        .map(|(m, r)| {
            let text = |d: &[u8]| String::from_utf8_lossy(d).into_owned();
            format!(
                "{}: master {:?} expiring {}, replica {:?} expiring {}",
                m.0,
                text(&m.1),
                m.2,
                text(&r.1),
                r.2
            )
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{} of {} keys differ on the replica:\n{}",
        differ.len(),
        keys.len(),
        differ.join("\n")
    );
    assert_no_module_commands_ran(replica, "the replica");
}

/// A master that starts a replica's full sync at once (no diskless delay).
fn master() -> Server {
    Server::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--repl-diskless-sync-delay",
        "0",
    ])
}

fn replicate_from(replica: &mut redis::Connection, master: &Server) {
    let _: () = query(
        replica,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(replica);
}

#[test]
fn writes_count_for_save_points_when_nothing_consumes_them() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let changes = |con: &mut redis::Connection| -> i64 {
        info_field(con, "persistence", "rdb_changes_since_last_save")
            .parse()
            .unwrap()
    };
    assert_eq!(
        info_field(&mut con, "replication", "repl_backlog_active"),
        "0"
    );
    let before = changes(&mut con);
    let keys = write_all(&mut con, "k");
    let after = changes(&mut con);
    // Nothing consumes effects here: every write skipped RedisModule_Replicate.
    assert_eq!(counters(&mut con), (0, keys.len() as i64));
    assert!(
        after - before >= keys.len() as i64,
        "{} writes counted {} changes",
        keys.len(),
        after - before
    );
    // A limited call writes nothing and counts nothing.
    call(&mut con, &["RL.GCRA", "full", "0", "1", "600"]);
    let before = changes(&mut con);
    assert_eq!(call(&mut con, &["RL.GCRA", "full", "0", "1", "600"])[0], 1);
    assert_eq!(changes(&mut con), before);
}

#[test]
fn a_replica_attached_after_unpropagated_writes_gets_every_later_effect() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    let master = master();
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    // Written while nothing consumed effects: they reach the replica in the
    // snapshot of its full sync.
    let mut keys = write_all(&mut m, "before");
    assert_eq!(counters(&mut m), (0, 7));
    replicate_from(&mut r, &master);
    // Written after the replica's PSYNC: they reach it as effects.
    keys.extend(write_all(&mut m, "before"));
    keys.extend(write_all(&mut m, "after"));
    assert_eq!(counters(&mut m), (14, 7));
    // Skipping is over for good, and the SYNC/PSYNC filter is gone.
    assert_eq!(filters(&mut m), "0");
    assert_replica_matches(&mut m, &mut r, &keys);
}

#[test]
fn writes_while_no_replica_is_connected_reach_it_through_the_backlog() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    let master = master();
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    replicate_from(&mut r, &master);
    // Freeze the replica and drop its link: the master has no replica left,
    // only the backlog, which must receive the effects of what follows.
    let pid = libc::pid_t::try_from(replica.pid()).unwrap();
    let signal = |sig: libc::c_int| {
        // SAFETY: a plain kill(2) on our own child process.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    };
    signal(libc::SIGSTOP);
    let _: i64 = query(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]).unwrap();
    assert_eq!(info_field(&mut m, "replication", "connected_slaves"), "0");
    assert_eq!(
        info_field(&mut m, "replication", "repl_backlog_active"),
        "1"
    );
    let keys = write_all(&mut m, "away");
    signal(libc::SIGCONT);
    // The replica comes back with a partial resynchronisation, from the
    // backlog alone.
    wait_until(
        "the partial resynchronisation",
        Duration::from_secs(20),
        || info_field(&mut m, "stats", "sync_partial_ok") == "1",
    );
    assert_replica_matches(&mut m, &mut r, &keys);
}

#[test]
fn an_aof_switched_on_at_run_time_records_effects() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let mut keys = write_all(&mut con, "before");
    let _: () = query(&mut con, &["CONFIG", "SET", "appendonly", "yes"]).unwrap();
    wait_until("the AOF rewrite", Duration::from_secs(20), || {
        info_field(&mut con, "persistence", "aof_rewrite_in_progress") == "0"
            && info_field(&mut con, "persistence", "aof_rewrite_scheduled") == "0"
    });
    keys.extend(write_all(&mut con, "before"));
    keys.extend(write_all(&mut con, "after"));
    let on_server = snapshot(&mut con, &keys);
    let dir = server.shutdown("NOSAVE");
    let aof = String::from_utf8_lossy(&aof_contents(dir.path())).to_uppercase();
    for forbidden in ["RL.", "CL.THROTTLE"] {
        assert!(!aof.contains(forbidden), "the AOF holds {forbidden}");
    }
    let replayed = Server::start_in(dir, &["--save", "", "--appendonly", "yes"]);
    let mut p = replayed.connect();
    assert_eq!(snapshot(&mut p, &keys), on_server, "AOF replay differs");
}

#[test]
fn a_promoted_replica_feeds_its_backlog_with_effects() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    // B writes as a standalone master first (nothing consumes its effects),
    // then replicates A beside C, then is promoted, and C resynchronises
    // partially from B's backlog: what B wrote after the promotion reaches C
    // from that backlog, as effects.
    let (a, b) = (master(), master());
    let c = Server::start();
    let (mut a_con, mut b_con, mut c_con) = (a.connect(), b.connect(), c.connect());
    write_all(&mut b_con, "standalone");
    replicate_from(&mut b_con, &a);
    replicate_from(&mut c_con, &a);
    write_all(&mut a_con, "from-a");
    let acked: i64 = query(&mut a_con, &["WAIT", "2", "5000"]).unwrap();
    assert_eq!(acked, 2);

    let _: () = query(&mut b_con, &["REPLICAOF", "NO", "ONE"]).unwrap();
    let keys = write_all(&mut b_con, "promoted");
    replicate_from(&mut c_con, &b);
    assert_eq!(info_field(&mut b_con, "stats", "sync_partial_ok"), "1");
    assert_replica_matches(&mut b_con, &mut c_con, &keys);
}

#[test]
fn a_reloaded_module_starts_over_and_still_sees_replicas_arrive() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    // `policies unloadable`: a module with a data type cannot be unloaded.
    let master = Server::start_with_module_args(
        &["policies", "unloadable"],
        &[
            "--save",
            "",
            "--repl-diskless-sync-delay",
            "0",
            "--enable-module-command",
            "yes",
        ],
    );
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    write_all(&mut m, "first"); // the SYNC/PSYNC filter is registered now
    assert_eq!(counters(&mut m), (0, 7));
    let _: () = query(&mut m, &["MODULE", "UNLOAD", "ratelimit"]).unwrap();
    let path = common::module_path();
    let _: () = query(
        &mut m,
        &[
            "MODULE",
            "LOAD",
            path.to_str().unwrap(),
            "policies",
            "unloadable",
        ],
    )
    .unwrap();
    assert_eq!(counters(&mut m), (0, 0));
    let mut keys = write_all(&mut m, "second");
    assert_eq!(counters(&mut m), (0, 7));
    replicate_from(&mut r, &master);
    keys.extend(write_all(&mut m, "third"));
    assert_eq!(counters(&mut m), (7, 7));
    assert_replica_matches(&mut m, &mut r, &keys);
}

/// A raw RESP connection: commands written without waiting for a reply (the
/// server may hold them back), and everything the server sends read back.
struct Raw(std::net::TcpStream);

impl Raw {
    fn connect(server: &Server) -> Raw {
        let stream = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        Raw(stream)
    }

    fn send(&mut self, args: &[&str]) {
        use std::io::Write;
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.0.write_all(out.as_bytes()).unwrap();
    }

    /// Reads until `until` appears in what was read (or 10 s pass).
    fn read_until(&mut self, until: &[u8]) -> Vec<u8> {
        use std::io::Read;
        let mut all = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && !all.windows(until.len()).any(|w| w == until) {
            let mut buf = [0u8; 65536];
            match self.0.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
                Err(_) => {} // timeout: read again
            }
        }
        all
    }
}

#[test]
fn a_psync_held_back_by_client_pause_still_ends_the_skipping() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    // The write W and the PSYNC are both held back by CLIENT PAUSE, W first.
    // After the pause W runs first and finds no backlog and no replica; the
    // PSYNC then runs (on Redis 7.2+ and Valkey without command filters) and
    // creates both. Later writes must reach that replica as effects.
    let server = master();
    let mut admin = server.connect();
    let _: () = query(&mut admin, &["CLIENT", "PAUSE", "300", "ALL"]).unwrap();
    let mut writer = Raw::connect(&server);
    writer.send(&["RL.GCRA", "held", "4", "3", "600"]);
    std::thread::sleep(Duration::from_millis(50));
    let mut replica = Raw::connect(&server);
    replica.send(&["PSYNC", "?", "-1"]);
    writer.read_until(b"\r\n:-1\r\n"); // its reply, after the pause
    wait_until("the PSYNC to run", Duration::from_secs(20), || {
        info_field(&mut admin, "replication", "connected_slaves") == "1"
    });
    call(&mut admin, &["RL.GCRA", "after-the-psync", "4", "3", "600"]);
    let stream = replica.read_until(b"after-the-psync");
    let stream = String::from_utf8_lossy(&stream).to_uppercase();
    assert!(
        stream.contains("AFTER-THE-PSYNC"),
        "the write did not reach the replica: {stream:?}"
    );
    assert!(
        !stream.contains("RL.GCRA"),
        "the replica got the command, not its effect"
    );
    assert!(stream.contains("PXAT"), "no SET … PXAT in {stream:?}");
}

#[test]
fn a_refused_load_leaves_nothing_behind_that_server_events_could_call() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    // With ZADD renamed away the module refuses to load; a role change
    // afterwards must not call into the unloaded module (Redis 7.0 keeps a
    // failed load's event subscriptions).
    let server = Server::start_without_module(&[
        "--save",
        "",
        "--enable-module-command",
        "yes",
        "--rename-command",
        "ZADD",
        "",
    ]);
    let mut con = server.connect();
    let path = common::module_path();
    let refused: redis::RedisResult<()> =
        query(&mut con, &["MODULE", "LOAD", path.to_str().unwrap()]);
    assert!(refused.is_err(), "the module loaded without ZADD");
    let unused_port = common::free_port().to_string();
    let _: () = query(&mut con, &["REPLICAOF", "127.0.0.1", &unused_port]).unwrap();
    let _: () = query(&mut con, &["REPLICAOF", "NO", "ONE"]).unwrap();
    let pong: String = query(&mut con, &["PING"]).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn a_replica_attached_during_a_write_storm_ends_up_identical() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    // Writers run without pause while the replica syncs: writes before the
    // PSYNC travel in its snapshot, writes after it as effects, and none is
    // lost or sent as a command in between.
    let master = master();
    let replica = Server::start();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (mut con, stop) = (master.connect(), stop.clone());
            std::thread::spawn(move || {
                let mut keys = std::collections::BTreeSet::new();
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let key = format!("storm:{w}:{}", i % 50);
                    call(&mut con, &["RL.GCRA", &key, "1000", "1", "600"]);
                    call(
                        &mut con,
                        &["RL.SLIDINGLOG", &format!("{key}:log"), "1000", "600"],
                    );
                    keys.insert(key.clone());
                    keys.insert(format!("{key}:log"));
                    i += 1;
                }
                keys
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let mut r = replica.connect();
    replicate_from(&mut r, &master);
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let keys: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let mut m = master.connect();
    // WAIT waits for this connection's own writes: one write here, after all
    // of the writers', makes it wait for theirs too.
    let _: () = query(&mut m, &["SET", "storm:marker", "1"]).unwrap();
    let (propagated, unpropagated) = counters(&mut m);
    assert!(
        propagated > 0 && unpropagated > 0,
        "the storm did not span the PSYNC: {propagated} propagated, {unpropagated} not"
    );
    assert_replica_matches(&mut m, &mut r, &keys);
}

#[test]
fn the_filter_watches_only_while_writes_skip() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    // Standalone: the SYNC/PSYNC filter is there from the load on.
    let standalone = Server::start();
    let mut con = standalone.connect();
    assert_eq!(filters(&mut con), "1");
    write_all(&mut con, "k");
    assert_eq!(filters(&mut con), "1");
    // With an AOF the first write propagates, and removes the filter: a
    // server that persists does not pay for it on every command.
    let persisting = Server::start_with(&["--save", "", "--appendonly", "yes"]);
    let mut con = persisting.connect();
    assert_eq!(filters(&mut con), "1");
    write_all(&mut con, "k");
    assert_eq!(counters(&mut con), (7, 0));
    assert_eq!(filters(&mut con), "0");
}

#[test]
fn the_propagate_always_argument_hands_every_write_over() {
    if !common::module_only("the module's own propagation of effects (filter, backlog, events)") {
        return;
    }
    // `loadmodule <path> propagate-always`: no filter, no skipping.
    let path = common::module_path();
    let server = Server::start_without_module(&[
        "--save",
        "",
        "--loadmodule",
        path.to_str().unwrap(),
        "propagate-always",
    ]);
    let mut con = server.connect();
    assert_eq!(filters(&mut con), "0");
    write_all(&mut con, "k");
    assert_eq!(counters(&mut con), (7, 0));
    // An unknown argument refuses the load, saying why.
    let admin = Server::start_without_module(&["--save", "", "--enable-module-command", "yes"]);
    let mut con = admin.connect();
    let refused: redis::RedisResult<()> = query(
        &mut con,
        &["MODULE", "LOAD", path.to_str().unwrap(), "bogus"],
    );
    assert!(refused.is_err(), "loaded with an unknown argument");
    assert!(
        admin.log().contains("unknown module argument 'bogus'"),
        "{}",
        admin.log()
    );
}
