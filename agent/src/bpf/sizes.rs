//! The sizes of the kernel maps that grow with the host, chosen at start from what the host
//! allows instead of fixed in the object: the per-connection maps from its memory (a host
//! holds about as many connections as it has memory for them), the event rings from its
//! CPUs (the events a second scale with the CPUs producing them; the agent drains the rings
//! when a quarter of the object's declared size is waiting, or every 200 ms).
//! docs/metrics.md, "Bounds", gives the rule; `-v` logs the sizes chosen.

/// Memory a host spends per TCP connection at the least that these maps count on: socket
/// buffers, the TLS library's state (a TLS keep-alive connection costs a server tens of KiB).
const BYTES_PER_CONNECTION: u64 = 128 * 1024;
/// Connections the per-connection maps hold, at least and at most: 16,384 up to 2 GiB of
/// memory, 65,536 at 8 GiB, 262,144 from 32 GiB (hs_conns is preallocated: ~28 MiB there;
/// memory cgroups charge it to the agent, whose systemd unit allows 256 MiB).
const MIN_CONNECTIONS: u64 = 16 * 1024;
const MAX_CONNECTIONS: u64 = 256 * 1024;
/// The event rings as the object declares them (bpf/handshake.bpf.h, conn.bpf.h,
/// wire.bpf.h): for up to 4 CPUs; times the CPUs / 4 beyond, up to 16 times.
pub const RINGS: &[(&str, u32)] = &[
    ("hs_events", 256 * 1024),
    ("conn_events", 512 * 1024),
    ("wire_events", 2 * 1024 * 1024),
];
const MAX_RING_SCALE: u32 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapSizes {
    /// hs_conns and conn_hash_store entries.
    pub connections: u32,
    /// Each event ring's declared size times this.
    pub ring_scale: u32,
}

impl MapSizes {
    pub fn for_host(cpus: usize, mem_total: u64) -> Self {
        let connections = (mem_total / BYTES_PER_CONNECTION)
            .clamp(MIN_CONNECTIONS, MAX_CONNECTIONS)
            .next_power_of_two()
            .min(MAX_CONNECTIONS) as u32;
        let ring_scale = ((cpus as u32) / 4).max(1).next_power_of_two().min(MAX_RING_SCALE);
        Self {
            connections,
            ring_scale,
        }
    }

    /// This host's: online CPUs, and MemTotal from /proc/meminfo (the least sizes without it).
    pub fn here(cpus: usize) -> Self {
        Self::for_host(cpus, mem_total().unwrap_or(0))
    }
}

fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn connections_follow_memory_within_bounds() {
        let c = |gib: u64| MapSizes::for_host(2, gib * GIB).connections;
        assert_eq!(c(0), 16384, "no /proc/meminfo: the least");
        assert_eq!(c(1), 16384);
        assert_eq!(c(8), 65536);
        assert_eq!(c(24), 262144, "196,608 rounded up to a power of two");
        assert_eq!(c(32), 262144);
        assert_eq!(c(1024), 262144);
    }

    #[test]
    fn rings_follow_cpus_within_bounds() {
        let s = |cpus: usize| MapSizes::for_host(cpus, 8 * GIB).ring_scale;
        assert_eq!(
            (s(1), s(2), s(4), s(7), s(8), s(12), s(64), s(512)),
            (1, 1, 1, 1, 2, 4, 16, 16)
        );
    }

    #[test]
    fn this_host_reads_its_memory() {
        assert!(mem_total().is_some_and(|m| m > 0));
    }
}
