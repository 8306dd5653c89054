//! CPU attribution: where a traced process's CPU goes.
//!
//! The kernel sums each traced process's on-CPU time exactly (its `traced` entry, at every
//! context switch: bpf/sched.bpf.h) and a per-CPU perf event samples what it runs (bpf/sampler.bpf.h). Once a second the
//! agent splits each process's new on-CPU time by the categories of that second's samples:
//!
//! 1. `probes`: in a uprobe trap or a BPF program (tlsprof's own cost);
//! 2. `handshake`: the thread was inside a TLS handshake call (user and kernel);
//! 3. `crypto`: kernel TLS (the tls module), or user code in the TLS library outside a
//!    handshake — `tls_library` instead for processes without handshake probes (a TLS
//!    stack other than OpenSSL), where handshakes cannot be told apart;
//! 4. `kernel_net`: kernel socket and TCP work (send/recv, accept, close, epoll, softirq);
//! 5. `other`: the rest of the kernel and the application.
//!
//! TLS-library samples are also split by crypto primitive where the library has names.
//!
//! profiler.rs does the split, classify.rs decides each sample's category and primitive,
//! flame.rs folds stacks into flame graphs, symbols/ maps addresses to code.
mod classify;
pub mod flame;
mod profiler;
pub mod symbols;

pub use profiler::{Profiler, TrapTime};
use symbols::Prim;

use crate::metrics::{label_enum, label_text};

label_enum!(
    /// Where a CPU sample's time goes (the `category` label), in the order the views show
    /// them.
    Category {
        Handshake = "handshake",
        Crypto = "crypto",
        TlsLibrary = "tls_library",
        KernelNet = "kernel_net",
        Probes = "probes",
        Other = "other",
    }
);
label_text!(Category => Category::Other);

/// What one sample was doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub category: Category,
    /// The crypto primitive, when the sample ran TLS code (`Prim::None` otherwise).
    pub prim: Prim,
}
