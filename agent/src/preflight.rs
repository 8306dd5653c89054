//! Checks made before anything is loaded, each failing with one clear line.
use std::{fs, net::SocketAddr, net::TcpListener, path::Path};

use anyhow::{bail, Context as _, Result};

const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process, from /proc/self/status.
fn effective_caps() -> Result<u64> {
    let status = fs::read_to_string("/proc/self/status").context("cannot read /proc/self/status")?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .context("no CapEff in /proc/self/status")?;
    u64::from_str_radix(hex.trim(), 16).context("bad CapEff in /proc/self/status")
}

/// What each capability is for (deploy/systemd/tlsprof.service says the same, and
/// tests/test_deploy.py checks each is needed):
/// - CAP_BPF + CAP_PERFMON: load the BPF programs, attach tracepoints, open the sampling
///   perf events (or CAP_SYS_ADMIN, which implies both);
/// - CAP_SYS_ADMIN: the kernel opens per-process uprobe perf events only for it, and only it
///   mounts a tracefs of the agent's own: where the host mounts none, the handshake probes
///   need it (bpf/loader.rs says the line); /proc/PID/map_files (a chrooted process's
///   library, one replaced on disk);
/// - CAP_SYS_PTRACE: read other users' /proc/PID/maps, /proc/PID/root, /proc/PID/fd links;
/// - CAP_DAC_OVERRIDE: list other users' /proc/PID/fd (their listening sockets; or
///   CAP_DAC_READ_SEARCH), write tracefs's uprobe_events (bpf/shared_uprobes.rs says the
///   line without it).
pub fn privileges() -> Result<()> {
    let caps = effective_caps()?;
    let has = |c: u32| holds(caps, c);
    if !(has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))) {
        bail!(
            "insufficient privileges: tlsprof needs root, or CAP_BPF and CAP_PERFMON \
             (and CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_DAC_OVERRIDE for all it measures); \
             run it with sudo or see deploy/"
        );
    }
    if !has(CAP_SYS_PTRACE) {
        log::warn!("without CAP_SYS_PTRACE, processes of other users cannot be traced");
    }
    if !has(CAP_DAC_READ_SEARCH) && !has(CAP_DAC_OVERRIDE) {
        log::warn!(
            "without CAP_DAC_OVERRIDE (or CAP_DAC_READ_SEARCH), the listening sockets of other users' processes cannot be read: no \
             connection, TIME_WAIT or negotiated-parameter figures for them"
        );
    }
    Ok(())
}

fn holds(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// Whether this process has CAP_SYS_ADMIN.
pub fn has_sys_admin() -> bool {
    effective_caps().is_ok_and(|caps| holds(caps, CAP_SYS_ADMIN))
}

pub const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";

/// tlsprof's programs are CO-RE and use BTF-typed tracepoints: the kernel must carry BTF.
pub fn btf() -> Result<aya::Btf> {
    if !Path::new(BTF_PATH).exists() {
        bail!(
            "this kernel exposes no BTF ({BTF_PATH} is missing); tlsprof needs a kernel built \
             with CONFIG_DEBUG_INFO_BTF=y"
        );
    }
    aya::Btf::from_sys_fs().with_context(|| format!("cannot parse the kernel's BTF at {BTF_PATH}"))
}

/// Binds the metrics endpoint first, so a busy port fails before any probe is attached.
pub fn listen(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))
}

/// The kernel's BPF run statistics (`kernel.bpf_stats_enabled`, left on by a profiling
/// session, `bpftool prog profile`, or a benchmark that was interrupted) add two clock reads
/// to every BPF program run of the machine: tlsprof's ~50 runs per new connection included.
pub fn bpf_stats() {
    let on = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|s| s.trim() != "0");
    if on {
        log::info!(
            "kernel.bpf_stats_enabled is on: every BPF program run costs two clock reads more \
             (tlsprof's overhead figures are for 0: sysctl -w kernel.bpf_stats_enabled=0)"
        );
    }
}

/// Every attached probe holds a file descriptor (one perf event per function and process):
/// tracing hundreds of processes needs more than the usual soft limit of 1024.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
