//! Mirror of bpf/stats.h: the kernel side's failure counters.

pub const STAT_HS_EVENTS_LOST: u32 = 0;
pub const STAT_HS_THREAD_MAP_FULL: u32 = 1;
pub const STAT_HS_SSL_MAP_FULL: u32 = 2;
pub const STAT_CONN_EVENTS_LOST: u32 = 3;
pub const STAT_CONN_STORAGE_FULL: u32 = 4;
pub const STAT_SAMPLES_LOST: u32 = 5;
pub const STAT_WIRE_EVENTS_LOST: u32 = 6;
pub const STAT_HS_HITS_FULL: u32 = 7;
pub const STAT_HS_LAST_FULL: u32 = 8;
pub const STAT_PROC_EVENTS_FULL: u32 = 9;
pub const STAT_REQ_RECV_CALLS_FULL: u32 = 10;
pub const STAT_GO_MAP_FULL: u32 = 11;
pub const STAT_HELLO_CALLS_FULL: u32 = 12;
/// The failure counters are the first STAT_FAILURES of the array; the rest count normal
/// events.
pub const STAT_FAILURES: u32 = 13;
/// A return probe without its entry: the call began before the probes were attached. Not a
/// failure: tlsprof_unmatched_returns_total.
pub const STAT_HS_UNMATCHED_RETURN: u32 = 13;
pub const STAT_MAX: u32 = 14;

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
];
