//! Processes as /proc shows them: their stat, names, ancestry, network namespace and
//! sockets, and the agent's own usage.
use std::{collections::HashSet, fs, io, os::unix::fs::MetadataExt as _};

use super::basename;

/// What /proc/PID/stat says that discovery needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub comm: String,
    pub ppid: u32,
    /// Start time in clock ticks since boot: tells a reused pid from the old process.
    pub start_time: u64,
    /// Virtual memory size: changes when a library is mapped late (dlopen).
    pub vsize: u64,
}

/// Parses /proc/PID/stat; comm may hold spaces and parentheses, so split at the last ')'.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state): field N is rest[N - 3].
    Some(ProcStat {
        comm,
        ppid: rest.get(1)?.parse().ok()?,
        start_time: rest.get(19)?.parse().ok()?,
        vsize: rest.get(20)?.parse().ok()?,
    })
}

/// Whether the process that started at `start_time` is gone (its pid free or reused).
pub fn exited(pid: u32, start_time: u64) -> bool {
    stat(pid).map_or(true, |s| s.start_time != start_time)
}

/// A live process's stat; a zombie (exited, not yet reaped by its parent: no memory, no
/// files) is gone.
pub fn stat(pid: u32) -> io::Result<ProcStat> {
    // comm is bytes: one that is not UTF-8 must not hide the process
    let text = String::from_utf8_lossy(&fs::read(format!("/proc/{pid}/stat"))?).into_owned();
    let state = text
        .rfind(')')
        .and_then(|c| text.get(c + 1..)?.split_whitespace().next());
    if matches!(state, Some("Z" | "X")) {
        return Err(io::Error::new(io::ErrorKind::NotFound, "exited (a zombie)"));
    }
    parse_stat(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable /proc/PID/stat"))
}

/// A process and its ancestors, itself first, up to (not including) init: at most 64.
/// `parent_of` gives a process's parent (from /proc, or from a table read before).
pub fn ancestry(pid: u32, parent_of: impl Fn(u32) -> Option<u32>) -> impl Iterator<Item = u32> {
    let mut next = Some(pid);
    std::iter::from_fn(move || {
        let cur = next?;
        next = parent_of(cur).filter(|p| *p > 1 && *p != cur);
        Some(cur)
    })
    .take(64)
}

/// The basename of the process's executable (/proc/PID/exe).
pub fn exe_name(pid: u32) -> Option<String> {
    let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let exe = exe.to_string_lossy();
    Some(basename(exe.trim_end_matches(" (deleted)")).to_string())
}

/// The name a process is reported under (the `comm` label): its comm, unless the program
/// renamed its main thread to something unrelated to what it runs as (node 24 calls
/// it "MainThread"): then the executable's name. nginx rewrites argv[0] to "nginx: worker
/// process" and keeps comm "nginx", which starts it: comm is kept.
pub fn process_name(pid: u32, comm: &str) -> String {
    let exe = exe_name(pid);
    let argv0 = fs::read(format!("/proc/{pid}/cmdline")).ok().map(|b| {
        let first = b.split(|c| *c == 0).next().unwrap_or_default();
        basename(&String::from_utf8_lossy(first)).to_string()
    });
    choose_name(comm, argv0.as_deref(), exe.as_deref())
}

fn choose_name(comm: &str, argv0: Option<&str>, exe: Option<&str>) -> String {
    let starts = |n: Option<&str>| n.is_some_and(|n| !comm.is_empty() && n.starts_with(comm));
    match exe {
        Some(exe) if !starts(argv0) && !starts(Some(exe)) => exe.chars().take(15).collect(),
        _ => comm.to_string(),
    }
}

/// The network namespace of a process: the inode of /proc/PID/ns/net.
pub fn netns(pid: u32) -> io::Result<u32> {
    Ok(fs::metadata(format!("/proc/{pid}/ns/net"))?.ino() as u32)
}

/// The inodes of the sockets a process holds open (its /proc/PID/fd links "socket:[N]").
pub fn socket_inodes(pid: u32) -> io::Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(fd) = fd else { continue };
        if let Ok(target) = fs::read_link(fd.path()) {
            if let Some(ino) = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok())
            {
                inodes.insert(ino);
            }
        }
    }
    Ok(inodes)
}

/// The LISTEN sockets (port, inode) of a process's network namespace, from
/// /proc/PID/net/tcp{,6}: the fallback where sock_diag cannot be used. These tables list
/// every socket of the namespace, TIME_WAIT ones included, so they can be large.
pub fn proc_listeners(pid: u32) -> Vec<(u16, u64)> {
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|t| fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
        .flat_map(|text| parse_listeners(&text).collect::<Vec<_>>())
        .collect()
}

/// (local port, inode) of the UDP sockets bound and not connected (a server's, QUIC's)
/// in a process's network namespace; None when neither table can be read (the process is
/// gone), which is not a namespace without such sockets.
pub fn proc_udp_bound(pid: u32) -> Option<Vec<(u16, u64)>> {
    let tables: Vec<String> = ["udp", "udp6"]
        .iter()
        .filter_map(|t| fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
        .collect();
    if tables.is_empty() {
        return None;
    }
    Some(
        tables
            .iter()
            .flat_map(|text| parse_sockets(text, "07").collect::<Vec<_>>())
            .filter(|(port, _)| *port != 0)
            .collect(),
    )
}

/// (local port, inode) of the LISTEN sockets in a /proc/net/tcp{,6} table.
fn parse_listeners(text: &str) -> impl Iterator<Item = (u16, u64)> + '_ {
    parse_sockets(text, "0A")
}

/// (local port, inode) of the sockets in state `st` (hex, as the table writes it) of a
/// /proc/net/{tcp,udp}{,6} table.
fn parse_sockets<'a>(text: &'a str, st: &'a str) -> impl Iterator<Item = (u16, u64)> + 'a {
    text.lines().skip(1).filter_map(move |line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(3) != Some(&st) {
            return None;
        }
        let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
        Some((port, f.get(9)?.parse().ok()?))
    })
}

/// This process's CPU seconds (user + system) and resident bytes.
pub fn self_usage() -> Option<(f64, u64)> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let rest: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    // fields 14 and 15 (utime, stime) are rest[11], rest[12]; field 24 (rss pages) rest[21]
    let ticks: u64 = rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
    let rss_pages: u64 = rest.get(21)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let (hz, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
    Some((ticks as f64 / hz.max(1) as f64, rss_pages * page.max(1) as u64))
}

/// All process ids now in /proc.
pub fn pids() -> io::Result<Vec<u32>> {
    Ok(fs::read_dir("/proc")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_awkward_comm() {
        let text = "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 12345678 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let s = parse_stat(text).unwrap();
        assert_eq!(s.comm, "a) b (c)");
        assert_eq!(s.ppid, 1);
        assert_eq!(s.start_time, 987654);
        assert_eq!(s.vsize, 12345678);
    }

    #[test]
    fn listeners() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:20FB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 43117 1 0000000000000000 100 0 0 10 0
   1: 0100007F:20FB 0100007F:C350 01 00000000:00000000 00:00000000 00000000    33        0 53117 1 0000000000000000 20 4 30 10 -1
";
        let v: Vec<(u16, u64)> = parse_listeners(text).collect();
        assert_eq!(v, [(8443, 43117)]);
        let text6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:01BB 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(parse_listeners(text6).collect::<Vec<_>>(), [(443, 99)]);
    }

    #[test]
    fn listening_socket_of_self() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id();
        assert!(netns(me).unwrap() > 0);
        let inodes = socket_inodes(me).unwrap();
        let ours: Vec<(u16, u64)> = proc_listeners(me)
            .into_iter()
            .filter(|(_, i)| inodes.contains(i))
            .collect();
        assert!(ours.iter().any(|(p, _)| *p == port), "{port} not in {ours:?}");
    }

    #[test]
    fn names() {
        // node 24 renames its main thread
        assert_eq!(choose_name("MainThread", Some("node"), Some("node")), "node");
        // nginx rewrites argv[0] but keeps comm
        assert_eq!(
            choose_name("nginx", Some("nginx: worker process"), Some("nginx")),
            "nginx"
        );
        // started through a symlink: comm and argv[0] are the link's name
        assert_eq!(choose_name("latetls", Some("latetls"), Some("python3.11")), "latetls");
        // comm truncated to 15 characters
        assert_eq!(
            choose_name(
                "a-very-long-ser",
                Some("a-very-long-server"),
                Some("a-very-long-server")
            ),
            "a-very-long-ser"
        );
        assert_eq!(choose_name("x", None, None), "x");
    }

    #[test]
    fn self_usage_is_plausible() {
        let (cpu, rss) = self_usage().unwrap();
        assert!(cpu >= 0.0 && rss > 1 << 20, "cpu {cpu} rss {rss}");
    }

    /// Issue 19 (found writing fuzz::stat_lines): comm is bytes (prctl(PR_SET_NAME) sets
    /// any), and read_to_string refused a stat whose comm is not UTF-8, hiding the process
    /// and cutting ancestry walks through it.
    #[test]
    fn stat_with_comm_not_utf8() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
            unsafe { libc::prctl(libc::PR_SET_NAME, c"tls\xffprof".as_ptr()) };
            // SAFETY: no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = wait.recv();
        });
        let tid = rx.recv().unwrap();
        let s = stat(tid);
        drop(done);
        t.join().unwrap();
        assert_eq!(s.unwrap().comm, "tls\u{fffd}prof");
    }

    #[test]
    fn stat_of_self() {
        let s = stat(std::process::id()).unwrap();
        assert!(s.start_time > 0 && s.vsize > 0);
    }

    #[test]
    fn ancestry_walks_up_to_init() {
        let parents = std::collections::HashMap::from([(102, 100), (100, 1), (7, 7)]);
        let up = |pid| ancestry(pid, |p| parents.get(&p).copied()).collect::<Vec<u32>>();
        assert_eq!(up(102), [102, 100]);
        assert_eq!(up(100), [100]);
        assert_eq!(up(5), [5], "unknown parent");
        assert_eq!(up(7), [7], "its own parent");
    }
}
