//! Connection churn: the kernel's per-connection close events turned into metrics
//! (churn.rs), with TIME_WAIT sockets and listening ports read through sock_diag
//! (sockdiag.rs).
pub mod churn;
pub mod sockdiag;

pub use churn::Churn;
