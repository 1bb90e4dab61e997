//! Redis key names and Redis Cluster slots.
//!
//! A rule's key is
//! `<prefix>[{<tag>}:]<domain>_<key>_<value>_…_<key>_<value>_<algorithm><window_s>`:
//! envoyproxy/ratelimit's `<domain>_<key>_<value>_…` without its window
//! timestamp (the module keeps the window inside the key), plus the algorithm
//! and the unit, so that changing either in the configuration starts a new
//! limiter instead of reading another's state. `{<tag>}` is
//! `{<key>=<value>}` of the first entry whose key is one of the configured
//! hash-tag keys (e.g. `user`): all of one user's limiters then share a Redis
//! Cluster slot, and one `RL.ALL` decides them together.

use crate::config::Match;

/// The Redis key of a matched rule for one descriptor.
pub fn key(
    prefix: &str,
    hash_tag_keys: &[String],
    domain: &str,
    entries: &[(&str, &str)],
    m: &Match,
) -> String {
    let mut key = String::with_capacity(64);
    key.push_str(prefix);
    if let Some((k, v)) = entries
        .iter()
        .find(|(k, _)| hash_tag_keys.iter().any(|t| t == k))
    {
        key.push('{');
        key.push_str(k);
        key.push('=');
        key.push_str(v);
        key.push_str("}:");
    }
    key.push_str(domain);
    key.push('_');
    for (i, (k, v)) in entries.iter().enumerate() {
        key.push_str(k);
        key.push('_');
        match m.shared_values.get(i) {
            Some(Some(pattern)) => key.push_str(pattern),
            _ => key.push_str(v),
        }
        key.push('_');
    }
    key.push_str(m.rule.algorithm.name());
    if let Some(unit) = m.rule.unit {
        key.push_str(&unit.seconds().to_string());
    }
    // A calendar window keeps other keys than envoy's fixed length of the
    // same unit: its zone is part of the key (`…_fw2592000@Europe/Paris`).
    if let Some(zone) = &m.rule.calendar {
        key.push('@');
        key.push_str(zone);
    }
    key
}

/// The Redis Cluster slot of a key (CRC16 of its hash tag, or of the whole
/// key, modulo 16384), as the server (and the redis crate, with the same
/// `crc16` crate) computes it.
pub fn slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(0) | None => key,
            Some(len) => &key[open + 1..open + 1 + len],
        },
        None => key,
    };
    crc16::State::<crc16::XMODEM>::calculate(hashed) % 16384
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn slots_agree_with_redis_cluster() {
        // CLUSTER KEYSLOT on a real server.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(slot(b"{user1000}x"), slot(b"user1000"));
        assert_ne!(
            slot(b"foo{}{bar}"),
            slot(b"bar"),
            "an empty tag hashes the whole key"
        );
    }

    #[test]
    fn keys_name_domain_entries_algorithm_and_unit_with_an_optional_tag() {
        let c = Config::from_yaml(&[(
            "t.yaml".into(),
            "domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: path
        value: files/*
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}
"
            .into(),
        )])
        .unwrap();
        let entries = [("user", "alice")];
        let m = c.get_limit("api", &entries).unwrap();
        assert_eq!(
            key("rls:", &[], "api", &entries, &m),
            "rls:api_user_alice_fw60"
        );
        let tags = vec!["user".to_string()];
        assert_eq!(
            key("rls:", &tags, "api", &entries, &m),
            "rls:{user=alice}:api_user_alice_fw60"
        );
        let entries = [("user", "alice"), ("path", "files/a.pdf")];
        let m2 = c.get_limit("api", &entries).unwrap();
        let k2 = key("rls:", &tags, "api", &entries, &m2);
        assert_eq!(k2, "rls:{user=alice}:api_user_alice_path_files/*_gcra1");
        assert_eq!(
            slot(k2.as_bytes()),
            slot(key("rls:", &tags, "api", &[("user", "alice")], &m).as_bytes())
        );
    }
}
