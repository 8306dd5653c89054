//! What crosses the kernel boundary: every struct, constant and enum of the headers the
//! kernel side shares with the agent (bpf/*.h but *.bpf.h, iface.h and vmlinux*.h),
//! generated from them at build time (build.rs, bindgen), so no hand-written twin can
//! drift from the C. Structs are aya `Pod` (read from ring records and map values as they
//! are); a C enum is a Rust enum, read from a raw field only through `TryFrom`, which
//! refuses a value the header does not name: `decode` counts such a value
//! (tlsprof_kernel_errors_total{kind="unknown_value"}) and the event is not used.
#![allow(non_camel_case_types, non_upper_case_globals, dead_code, clippy::all)]

use std::sync::atomic::{AtomicU64, Ordering};

include!(concat!(env!("OUT_DIR"), "/kernel_types.rs"));

/// A raw field held a value its C enum does not name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownValue {
    /// The C enum.
    pub what: &'static str,
    pub value: u64,
}

impl std::fmt::Display for UnknownValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the kernel sent {} {}, a value bpf/*.h does not name",
            self.what, self.value
        )
    }
}

impl std::error::Error for UnknownValue {}

/// Values of kernel enums that named no variant, since the start.
static UNKNOWN: AtomicU64 = AtomicU64::new(0);

/// A raw enum field decoded; a value the header does not name is counted (and said once
/// in the log) and gives None.
pub fn decode<T, R>(raw: R) -> Option<T>
where
    T: TryFrom<R, Error = UnknownValue>,
{
    match T::try_from(raw) {
        Ok(v) => Some(v),
        Err(e) => {
            if UNKNOWN.fetch_add(1, Ordering::Relaxed) == 0 {
                log::warn!("{e}: that event is not used (tlsprof_kernel_errors_total{{kind=\"unknown_value\"}})");
            }
            None
        }
    }
}

/// Unknown values seen so far: tlsprof_kernel_errors_total{kind="unknown_value"}.
pub fn unknown_values() -> u64 {
    UNKNOWN.load(Ordering::Relaxed)
}
