//! What a decision becomes on the wire: the IETF RateLimit headers and the
//! protobuf durations.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;

use super::calls::Active;
use crate::config::Unit;

/// The IETF `RateLimit-Policy` and `RateLimit` headers
/// (draft-ietf-httpapi-ratelimit-headers) of one descriptor's status.
pub(super) fn ietf_headers(
    status: &DescriptorStatus,
    active: &[Active],
    index: usize,
) -> Vec<HeaderValue> {
    let Some(limit) = &status.current_limit else {
        return Vec::new();
    };
    let Some(a) = active.iter().find(|a| a.index == index) else {
        return Vec::new();
    };
    let stat_key;
    let name = if a.m.rule.name.is_empty() {
        stat_key = a.m.stat_key();
        stat_key.as_str()
    } else {
        a.m.rule.name.as_str()
    };
    let name = name.replace('\\', "\\\\").replace('"', "\\\"");
    let window = a.m.rule.unit.map_or(0, Unit::seconds);
    let reset_s = status
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds + i64::from(d.nanos > 0));
    vec![
        HeaderValue {
            key: "RateLimit-Policy".into(),
            value: format!("\"{name}\";q={};w={window}", limit.requests_per_unit),
            ..Default::default()
        },
        HeaderValue {
            key: "RateLimit".into(),
            value: format!("\"{name}\";r={};t={reset_s}", status.limit_remaining),
            ..Default::default()
        },
    ]
}

pub(super) fn duration_ms(ms: i64) -> envoy_types::pb::google::protobuf::Duration {
    envoy_types::pb::google::protobuf::Duration {
        seconds: ms / 1000,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}
