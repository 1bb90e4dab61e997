//! Parsing and matching, with envoyproxy/ratelimit's README examples.

use super::*;

fn load(yaml: &str) -> Config {
    Config::from_yaml(&[("test.yaml".to_string(), yaml.to_string())]).unwrap()
}

fn load_err(yaml: &str) -> String {
    Config::from_yaml(&[("test.yaml".to_string(), yaml.to_string())])
        .unwrap_err()
        .to_string()
}

/// (requests_per_unit, unit, stat key) of the rule a descriptor matches.
fn limit(c: &Config, domain: &str, entries: &[(&str, &str)]) -> Option<(u32, Unit, String)> {
    c.get_limit(domain, entries).map(|m| {
        (
            m.rule.requests_per_unit,
            m.rule.unit.unwrap_or(Unit::Second),
            m.stat_key(),
        )
    })
}

#[test]
fn example_1_key_value() {
    let c = load(
        "domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
",
    );
    assert_eq!(
        limit(&c, "mongo_cps", &[("database", "users")]),
        Some((500, Unit::Second, "mongo_cps.database_users".into()))
    );
    assert_eq!(limit(&c, "mongo_cps", &[("database", "other")]), None);
    assert_eq!(limit(&c, "other_domain", &[("database", "users")]), None);
}

const EXAMPLE_2: &str = "domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";

#[test]
fn example_2_nested_and_key_only() {
    let c = load(EXAMPLE_2);
    assert_eq!(
        limit(
            &c,
            "messaging",
            &[("message_type", "marketing"), ("to_number", "2061111111")]
        ),
        Some((
            5,
            Unit::Day,
            "messaging.message_type_marketing.to_number".into()
        ))
    );
    assert_eq!(
        limit(&c, "messaging", &[("to_number", "2061111111")]),
        Some((100, Unit::Day, "messaging.to_number".into()))
    );
    // A placeholder without a limit limits nothing.
    assert_eq!(
        limit(&c, "messaging", &[("message_type", "marketing")]),
        None
    );
    assert_eq!(
        limit(
            &c,
            "messaging",
            &[("message_type", "transactional"), ("to_number", "1")]
        ),
        None
    );
}

#[test]
fn example_3_value_before_key() {
    let c = load(
        "domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
",
    );
    assert_eq!(
        limit(&c, "edge_proxy_per_ip", &[("remote_address", "50.0.0.1")]),
        Some((10, Unit::Second, "edge_proxy_per_ip.remote_address".into()))
    );
    let m = c
        .get_limit("edge_proxy_per_ip", &[("remote_address", "50.0.0.5")])
        .unwrap();
    assert_eq!(m.rule.requests_per_unit, 0);
    assert_eq!(m.rule.module_limit(), None, "0 per unit admits nothing");
}

#[test]
fn example_4_depth_must_match() {
    let flat = load(
        "domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
",
    );
    assert_eq!(
        limit(
            &flat,
            "example4",
            &[("key", "value"), ("subkey", "subvalue")]
        ),
        None
    );
    let nested = load(
        "domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
",
    );
    assert_eq!(
        limit(
            &nested,
            "example4",
            &[("key", "value"), ("subkey", "subvalue")]
        ),
        Some((300, Unit::Second, "example4.key_value.subkey".into()))
    );
    // Shorter than the tree: no limit either.
    assert_eq!(limit(&nested, "example4", &[("key", "value")]), None);
}

#[test]
fn example_5_unlimited() {
    let c = load(
        "domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
",
    );
    let m = c.get_limit("internal", &[("ldap", "x")]).unwrap();
    assert!(m.rule.unlimited);
    assert_eq!(m.rule.unit, None);
    assert_eq!(
        limit(&c, "internal", &[("azure", "x")]),
        Some((100, Unit::Minute, "internal.azure".into()))
    );
    assert!(load_err(
        "domain: d
descriptors:
  - key: k
    rate_limit:
      unlimited: true
      unit: second
"
    )
    .contains("should not specify rate limit unit when unlimited"));
}

#[test]
fn example_6_shadow_mode() {
    let c = load(
        "domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
",
    );
    let a = c
        .get_limit(
            "example6",
            &[("service", "auth-service"), ("user", "user-a")],
        )
        .unwrap();
    assert!(a.rule.shadow_mode);
    assert_eq!(a.rule.requests_per_unit, 10);
    let b = c
        .get_limit(
            "example6",
            &[("service", "auth-service"), ("user", "user-b")],
        )
        .unwrap();
    assert!(!b.rule.shadow_mode);
    assert_eq!(b.rule.requests_per_unit, 20);
}

#[test]
fn example_7_replaces_parsed() {
    let c = load(
        "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
",
    );
    let one = c
        .get_limit("example7", &[("key_1", "value_1"), ("user", "bkthomps")])
        .unwrap();
    assert_eq!(one.rule.name, "specific_limit");
    let two = c
        .get_limit("example7", &[("key_2", "value_2"), ("user", "bkthomps")])
        .unwrap();
    assert_eq!(two.rule.replaces, vec!["specific_limit".to_string()]);
    assert!(load_err(
        "domain: d
descriptors:
  - key: k
    rate_limit:
      name: a
      replaces:
        - name: a
      unit: second
      requests_per_unit: 1
"
    )
    .contains("replaces should not contain name of same descriptor"));
}

#[test]
fn example_8_detailed_metric() {
    let c = load(
        "domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    assert_eq!(
        limit(&c, "example8", &[("key1", "unspecified_value")]),
        Some((10, Unit::Minute, "example8.key1_unspecified_value".into()))
    );
    assert_eq!(
        limit(&c, "example8", &[("key1", "value1")]),
        Some((20, Unit::Minute, "example8.key1_value1".into()))
    );
}

#[test]
fn example_9_wildcards() {
    let c = load(
        "domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 21
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 22
",
    );
    for v in ["value1", "value2", "valueXYZ", "value"] {
        assert_eq!(
            limit(&c, "example9", &[("key1", v)]).map(|l| l.0),
            Some(20),
            "{v}"
        );
    }
    assert_eq!(limit(&c, "example9", &[("key1", "valu")]), None);
    assert_eq!(
        limit(&c, "example9", &[("path", "/api/123/action")]).map(|l| l.0),
        Some(21)
    );
    assert_eq!(limit(&c, "example9", &[("path", "/api/123/other")]), None);
    assert_eq!(
        limit(&c, "example9", &[("route", "/api/v1/resource/123/action")]).map(|l| l.0),
        Some(22)
    );
    assert_eq!(
        limit(&c, "example9", &[("route", "/api/v1/other/123/action")]),
        None
    );
    // Without share_threshold each value has its own counter.
    let m = c.get_limit("example9", &[("key1", "value1")]).unwrap();
    assert_eq!(m.shared_values, vec![None]);
    assert_eq!(m.stat_key(), "example9.key1_value*");
}

#[test]
fn example_10_value_to_metric() {
    let c = load(
        "domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
",
    );
    assert_eq!(
        limit(
            &c,
            "example10",
            &[
                ("route", "api"),
                ("http_method", "GET"),
                ("subject_id", "123")
            ]
        )
        .map(|l| l.2),
        Some("example10.route_api.http_method_GET.subject_id".into())
    );
}

#[test]
fn example_11_share_threshold() {
    let c = load(
        "domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
",
    );
    let m = c
        .get_limit("example11", &[("files", "files/a.pdf")])
        .unwrap();
    assert_eq!(m.shared_values, vec![Some("files/*".to_string())]);
    let m = c
        .get_limit("example11", &[("files_no_share", "files_no_share/a.pdf")])
        .unwrap();
    assert_eq!(m.shared_values, vec![None]);
    assert!(load_err(
        "domain: d
descriptors:
  - key: k
    value: v
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
"
    )
    .contains("share_threshold can only be used with wildcard values"));
}

#[test]
fn algorithm_and_burst() {
    let c = load(
        "domain: api
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 10
      algorithm: gcra
      burst: 20
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: token_bucket}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window}
  - key: login
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_log}
  - key: plain
    rate_limit: {unit: day, requests_per_unit: 7}
",
    );
    let args = |k: &str| c.get_limit("api", &[(k, "x")]).unwrap().rule.module_limit();
    assert_eq!(
        args("user"),
        Some(vec!["GCRA".into(), "19".into(), "10".into(), "1".into()])
    );
    assert_eq!(
        args("ip"),
        Some(vec![
            "TOKENBUCKET".into(),
            "100".into(),
            "100".into(),
            "60".into()
        ])
    );
    assert_eq!(
        args("path"),
        Some(vec!["SLIDINGWINDOW".into(), "100".into(), "60".into()])
    );
    assert_eq!(
        args("login"),
        Some(vec!["SLIDINGLOG".into(), "5".into(), "3600".into()])
    );
    assert_eq!(
        args("plain"),
        Some(vec!["FIXEDWINDOW".into(), "7".into(), "86400".into()])
    );
    assert!(load_err(
        "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}
"
    )
    .contains("algorithm"));
    assert!(load_err(
        "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}
"
    )
    .contains("burst applies to token_bucket and gcra only"));
    // The module's bounds fail the load, not every request.
    assert!(load_err(
        "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 2000000, algorithm: gcra}
"
    )
    .contains("at most one request per microsecond"));
    assert!(load_err(
        "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 100001, algorithm: sliding_log}
"
    )
    .contains("sliding_log takes at most 100000"));
    assert!(load_err(
        "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, burst: 0}
"
    )
    .contains("burst must be >= 1"));
}

#[test]
fn envoy_errors() {
    assert!(load_err("descriptors: []").contains("config file cannot have empty domain"));
    assert!(
        load_err("domain: d\ndescriptors:\n  - value: v\n").contains("descriptor has empty key")
    );
    assert!(load_err(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"
    )
    .contains("invalid rate limit unit 'fortnight'"));
    assert!(
        load_err("domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n").contains("ratelimit")
    );
    assert!(load_err(
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n"
    )
    .contains("duplicate descriptor composite key 'd.k_v'"));
    assert!(load_err("domain: [").contains("error loading config file"));
    let two = Config::from_yaml(&[
        ("a.yaml".into(), "domain: d\n".into()),
        ("b.yaml".into(), "domain: d\n".into()),
    ])
    .unwrap_err()
    .to_string();
    assert_eq!(two, "b.yaml: duplicate domain 'd' in config file");
    // Numbers are read as strings, as Go's yaml does for a string field.
    let c = load("domain: d\ndescriptors:\n  - key: port\n    value: 8080\n    rate_limit: {unit: SECOND, requests_per_unit: 3}\n");
    assert_eq!(limit(&c, "d", &[("port", "8080")]).map(|l| l.0), Some(3));
}

#[test]
fn the_example_configuration_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config.yaml");
    let c = Config::load(&path).unwrap();
    assert_eq!(c.rules().len(), 4);
    let m = c
        .get_limit("edge", &[("user", "u"), ("path", "/api/orders")])
        .unwrap();
    assert_eq!(m.rule.algorithm, Algorithm::SlidingWindow);
}

#[test]
fn calendar_rules_send_the_modules_calendar_window() {
    let c = load(
        "domain: api
descriptors:
  - key: month
    rate_limit: {unit: month, requests_per_unit: 1000, calendar: true, time_zone: Europe/Paris}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 500, calendar: true}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 5, calendar: true, time_zone: '+05:30'}
  - key: fixed
    rate_limit: {unit: month, requests_per_unit: 1000}
",
    );
    let args = |k: &str| c.get_limit("api", &[(k, "x")]).unwrap().rule.module_limit();
    let v = |s: &[&str]| Some(s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    assert_eq!(
        args("month"),
        v(&["FIXEDWINDOW", "1000", "MONTH", "TZ", "Europe/Paris"])
    );
    assert_eq!(args("day"), v(&["FIXEDWINDOW", "500", "DAY", "TZ", "UTC"]));
    assert_eq!(
        args("week"),
        v(&["FIXEDWINDOW", "5", "WEEK", "TZ", "+05:30"])
    );
    // Without calendar: envoy's fixed lengths keep their meaning (a month is 30 days).
    assert_eq!(args("fixed"), v(&["FIXEDWINDOW", "1000", "2592000"]));
}

#[test]
fn calendar_rules_are_checked_at_load() {
    let rule = |r: &str| format!("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {r}\n");
    let cases = [
        (
            "{unit: hour, requests_per_unit: 1, calendar: true}",
            "calendar takes unit day, week, month or year",
        ),
        (
            "{unit: day, requests_per_unit: 1, algorithm: gcra, calendar: true}",
            "calendar applies to fixed_window rules only",
        ),
        (
            "{unit: day, requests_per_unit: 1, time_zone: UTC}",
            "time_zone applies to calendar: true rules only",
        ),
        (
            "{unit: day, requests_per_unit: 1, calendar: true, time_zone: Mars/Olympus}",
            "unknown time zone 'Mars/Olympus'",
        ),
        (
            "{unit: day, requests_per_unit: 1, calendar: true, time_zone: '+24:00'}",
            "unknown time zone '+24:00'",
        ),
    ];
    for (r, want) in cases {
        let e = load_err(&rule(r));
        assert!(e.contains(want), "{r}: {e}");
    }
}

/// `charge:` per rule, the service's `--charge` / `RLS_CHARGE` for the
/// others; a bad value is refused at load, naming the file and the values.
#[test]
fn charge_per_rule_and_bad_values() {
    let rule = |r: &str| format!("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {r}\n");
    let c = load(&rule("{unit: hour, requests_per_unit: 1, charge: always}"));
    assert_eq!(c.rules()[0].charge, Some(Charge::Always));
    assert_eq!(
        c.rules()[0].force_args.as_deref().map(|a| a.join(" ")),
        Some("FIXEDWINDOW 1 3600 FORCE".to_string())
    );
    let c = load(&rule(
        "{unit: hour, requests_per_unit: 1, charge: admitted}",
    ));
    assert_eq!(c.rules()[0].charge, Some(Charge::Admitted));
    let c = load(&rule("{unit: hour, requests_per_unit: 1}"));
    assert_eq!(c.rules()[0].charge, None);
    let e = load_err(&rule(
        "{unit: hour, requests_per_unit: 1, charge: sometimes}",
    ));
    assert!(
        e.contains("unknown variant `sometimes`, expected `admitted` or `always`"),
        "{e}"
    );
    use clap::Parser;
    let args = |charge: &str| {
        crate::settings::Settings::try_parse_from([
            "ratelimit-rls",
            "--config",
            "c.yaml",
            "--charge",
            charge,
        ])
    };
    assert_eq!(args("always").unwrap().charge, Charge::Always);
    let e = args("sometimes").unwrap_err().to_string();
    assert!(
        e.contains("invalid value 'sometimes' for '--charge <CHARGE>'")
            && e.contains("[possible values: admitted, always]"),
        "{e}"
    );
}
