//! The kernel side's failure counters (bpf/stats.h; generated: abi.rs) and their labels.

pub use super::abi::{
    STAT_CONN_EVENTS_LOST, STAT_CONN_STATE_MISSED, STAT_CONN_STORAGE_FULL, STAT_FAILURES, STAT_GO_MAP_FULL,
    STAT_HELLO_CALLS_FULL, STAT_HS_EVENTS_LOST, STAT_HS_HITS_FULL, STAT_HS_LAST_FULL, STAT_HS_SSL_MAP_FULL,
    STAT_HS_THREAD_MAP_FULL, STAT_HS_UNMATCHED_RETURN, STAT_MAX, STAT_PROC_EVENTS_FULL, STAT_REQ_RECV_CALLS_FULL,
    STAT_SAMPLES_LOST, STAT_WIRE_EVENTS_LOST,
};

/// Each failure counter and the `kind` label it is exported under
/// (tlsprof_kernel_errors_total). The first seven keep the names dashboards and alerts
/// know; a map added since is `<map>_full`.
pub const STATS: [(u32, &str); STAT_FAILURES as usize] = [
    (STAT_HS_EVENTS_LOST, "events_lost"),
    (STAT_HS_THREAD_MAP_FULL, "thread_map_full"),
    (STAT_HS_SSL_MAP_FULL, "ssl_map_full"),
    (STAT_CONN_EVENTS_LOST, "conn_events_lost"),
    (STAT_CONN_STORAGE_FULL, "conn_storage_full"),
    (STAT_SAMPLES_LOST, "samples_lost"),
    (STAT_WIRE_EVENTS_LOST, "wire_events_lost"),
    (STAT_HS_HITS_FULL, "hs_hits_full"),
    (STAT_HS_LAST_FULL, "hs_last_full"),
    (STAT_PROC_EVENTS_FULL, "proc_events_full"),
    (STAT_REQ_RECV_CALLS_FULL, "req_recv_calls_full"),
    (STAT_GO_MAP_FULL, "go_map_full"),
    (STAT_HELLO_CALLS_FULL, "hello_calls_full"),
    (STAT_CONN_STATE_MISSED, "conn_state_missed"),
];

/// The failure counters that are no map's bound (docs/metrics.md, "Bounds", lists the rest).
#[cfg(test)]
pub const NOT_BOUNDS: [&str; 1] = ["conn_state_missed"];
