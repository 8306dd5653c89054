//! What an operator reads besides /metrics: `tlsprof top` (top.rs) and `tlsprof report`
//! (report/), both over windows of the agent's own metrics (snapshot.rs), from an agent
//! started in this process or a running one's endpoint (live.rs).
pub mod live;
pub mod report;
pub mod snapshot;
pub mod top;
