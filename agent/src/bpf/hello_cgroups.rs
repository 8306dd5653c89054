//! Where the ClientHello capture's packet program runs (bpf/hello_skb.bpf.h): attached to
//! the cgroup (v2) of each traced process, it runs only for the packets that reach the
//! sockets of that cgroup's processes. A cgroup is attached once, however many traced
//! processes it holds (nginx's master and workers share one), and detached when none is
//! left in it. Cgroups are found as the host's init sees them (cgroup2_root,
//! read_cgroup_files), so an agent in a container of its own with the host's PID namespace
//! reaches every container's. A process whose cgroup cannot be told, or a cgroup the kernel
//! refuses, is said once, with what is lost; the per-read hooks, which need no cgroup, are
//! `--avoid-hook cgroup_skb`.
use std::{
    collections::{HashMap, HashSet},
    fs::File,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use aya::{
    programs::{cgroup_skb::CgroupSkbLinkId, CgroupAttachMode, CgroupSkb, CgroupSkbAttachType},
    Ebpf,
};

use crate::bounds::Dropped;

/// Cgroups attached at once, at most; a traced process in another is left out, counted:
/// tlsprof_table_full_total{table="hello_cgroups"} (its ClientHellos are not read).
pub const MAX_CGROUPS: usize = 4096;

const PROGRAM: &str = "hello_ingress";
/// The QUIC capture's programs (bpf/quic.bpf.h): the client's datagrams, the server's.
/// Attached beside PROGRAM to the cgroups that hold a traced process with a watched UDP port
/// only: they run for every packet those cgroups receive and send.
pub const QUIC: [(&str, CgroupSkbAttachType); 2] = [
    ("quic_ingress", CgroupSkbAttachType::Ingress),
    ("quic_egress", CgroupSkbAttachType::Egress),
];

/// Whether the agent is in a cgroup namespace other than the host init's, which it can
/// reach (a container with the host's PID namespace): cgroups are then found as init sees
/// them. Decided once: the hierarchy (cgroup2_root) and the processes' paths
/// (read_cgroup_files) must name cgroups the same way.
fn in_other_cgroupns() -> bool {
    static OTHER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OTHER.get_or_init(|| {
        let link = |p: &str| std::fs::read_link(p).ok();
        match (link("/proc/1/ns/cgroup"), link("/proc/self/ns/cgroup")) {
            (Some(init), Some(me)) => init != me && std::fs::read_dir("/proc/1/root").is_ok(),
            _ => false,
        }
    })
}

/// Where the cgroup v2 hierarchy is: in a container of its own with the host's PID
/// namespace (in_other_cgroupns), the host's, reached through /proc/1/root (the container's
/// own mount would not reach other containers' cgroups); else the first cgroup2 mount the
/// agent sees; on a host that mounts none (cgroup v1 alone: RHEL 8's default, where every
/// process is in v2's root cgroup), a mount of the agent's own, detached at once (the
/// directory stays open: the path is the descriptor's, and no mount is left behind). None
/// if none can be had. Decided once.
pub fn cgroup2_root() -> Option<PathBuf> {
    static ROOT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        if in_other_cgroupns() {
            let point = mount_of(&std::fs::read_to_string("/proc/1/mountinfo").ok()?, "cgroup2")?;
            return Some(Path::new("/proc/1/root").join(point.strip_prefix("/").unwrap_or(&point)));
        }
        let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        mount_of(&text, "cgroup2").or_else(|| match mount_detached() {
            Ok(p) => Some(p),
            Err(e) => {
                log::debug!("no cgroup v2 hierarchy mounted, and none could be: {e:#}");
                None
            }
        })
    })
    .clone()
}

/// Mounts the cgroup v2 hierarchy on a new directory, opens it, and detaches the mount:
/// the open directory's path (/proc/self/fd/N), valid while the agent runs.
fn mount_detached() -> anyhow::Result<PathBuf> {
    use std::{ffi::CString, os::fd::IntoRawFd as _, os::unix::ffi::OsStrExt as _};
    let dir = std::env::temp_dir().join(format!("tlsprof-cgroup2-{}", std::process::id()));
    std::fs::create_dir(&dir)?;
    let c = CString::new(dir.as_os_str().as_bytes())?;
    let kind = CString::new("cgroup2")?;
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe { libc::mount(kind.as_ptr(), c.as_ptr(), kind.as_ptr(), 0, std::ptr::null()) };
    let opened = if rc == 0 {
        File::open(&dir).map_err(anyhow::Error::from)
    } else {
        Err(std::io::Error::last_os_error().into())
    };
    if rc == 0 {
        // SAFETY: a valid path; the open directory keeps the hierarchy reachable.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
    let _ = std::fs::remove_dir(&dir);
    let fd = opened?.into_raw_fd(); // kept open for the agent's life
    Ok(PathBuf::from(format!("/proc/self/fd/{fd}")))
}

/// The /proc/PID/cgroup files of `pids`, read as cgroup2_root's hierarchy names them: a
/// process's cgroup path is relative to the reader's cgroup namespace, so in a container
/// of its own (Kubernetes', Docker's on cgroup v2) the reading thread joins the host
/// init's first (setns on that thread alone).
fn read_cgroup_files(pids: &[u32]) -> Vec<(u32, Option<String>)> {
    let read = || {
        pids.iter()
            .map(|&p| (p, std::fs::read_to_string(format!("/proc/{p}/cgroup")).ok()))
            .collect()
    };
    if !in_other_cgroupns() {
        return read();
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            use std::os::fd::AsRawFd as _;
            match File::open("/proc/1/ns/cgroup") {
                // SAFETY: a namespace file descriptor; only this thread changes namespace.
                Ok(ns) if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWCGROUP) } == 0 => {}
                _ => log::debug!(
                    "client hellos: cannot join the host's cgroup namespace: {}",
                    std::io::Error::last_os_error()
                ),
            }
            read()
        })
        .join()
        .unwrap_or_default()
    })
}

/// The mount point of the first mount of `fstype` in a mountinfo text.
fn mount_of(mountinfo: &str, fstype: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next()? == fstype).then(|| PathBuf::from(point))
    })
}

/// A process's cgroup v2 path (the `0::` line of /proc/PID/cgroup), relative to the root.
pub(crate) fn cgroup_path(cgroup_file: &str) -> Option<&str> {
    let path = cgroup_file.lines().find_map(|l| l.strip_prefix("0::"))?;
    // outside the agent's cgroup namespace ("/../x"), or a cgroup removed: not reachable
    (!path.split('/').any(|p| p == "..") && !path.ends_with(" (deleted)")).then(|| path.trim_start_matches('/'))
}

/// Most directories of the hierarchy walked to find a socket's cgroup.
const MAX_WALK: usize = 100_000;

/// The directories under `root` whose inodes (cgroup ids) are in `ids`: a walk of the
/// hierarchy, breadth first, that stops once all are found or after MAX_WALK directories.
fn find_cgroups(root: &Path, ids: &HashSet<u64>) -> HashMap<u64, PathBuf> {
    let mut found = HashMap::new();
    let mut queue = std::collections::VecDeque::from([root.to_path_buf()]);
    let mut walked = 0;
    while let Some(dir) = queue.pop_front() {
        if let Ok(m) = std::fs::metadata(&dir) {
            if ids.contains(&m.ino()) {
                found.insert(m.ino(), dir.clone());
                if found.len() == ids.len() {
                    break;
                }
            }
        }
        walked += 1;
        if walked >= MAX_WALK {
            break;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                queue.push_back(e.path());
            }
        }
    }
    found
}

/// A cgroup: its directory's inode (one cgroup, however its path is spelled) and path.
type Cgroup = (u64, PathBuf);

pub struct HelloCgroups {
    root: PathBuf,
    /// Each traced process's cgroup, None where it cannot be told.
    of_pid: HashMap<u32, Option<Cgroup>>,
    /// The cgroups of the traced processes' listening sockets (sock_diag's cgroup ids: a
    /// directory's inode), found in the hierarchy; None where none has that inode.
    of_socket: HashMap<u64, Option<PathBuf>>,
    /// Attached cgroups: their path (for the log) and link.
    links: HashMap<u64, (PathBuf, CgroupSkbLinkId)>,
    /// Cgroups the QUIC programs are attached to, and their links (QUIC's order).
    egress: HashMap<u64, Vec<CgroupSkbLinkId>>,
    /// Cgroups refused while a traced process is in them, said once.
    refused: HashSet<u64>,
    /// When each attached cgroup last had a traced process: it stays attached LINGER after
    /// (a server that starts a process per connection has none between two connections,
    /// and the next one's ClientHello comes before its process).
    last_needed: HashMap<u64, Instant>,
}

/// How long a cgroup stays attached after its last traced process left.
const LINGER: Duration = Duration::from_secs(60);

impl HelloCgroups {
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            of_pid: HashMap::new(),
            of_socket: HashMap::new(),
            links: HashMap::new(),
            egress: HashMap::new(),
            refused: HashSet::new(),
            last_needed: HashMap::new(),
        }
    }

    /// A process's cgroup, from its /proc/PID/cgroup file.
    fn cgroup_of(&self, file: Option<&str>) -> Option<Cgroup> {
        let dir = self.root.join(cgroup_path(file?)?);
        Some((std::fs::metadata(&dir).ok()?.ino(), dir))
    }

    /// Attaches the program to the cgroup of every traced process (`pids`) not attached yet,
    /// and detaches it from the cgroups none of them is in any more; the QUIC egress program
    /// to the attached cgroups that hold one of `quic` (traced processes with a watched UDP
    /// port), and detaches it from the others.
    ///
    /// `sockets`: the cgroup ids of the traced processes' listening sockets. A connection
    /// belongs to its listener's cgroup, which is the cgroup of whoever created the
    /// listener: another than the server's where a service manager created it (systemd's
    /// socket activation) or the server moved after it listened. Those are attached too.
    pub fn sync(&mut self, ebpf: &mut Ebpf, pids: &[u32], sockets: &[u64], quic: &[u32], full: &mut Dropped) {
        let live: HashSet<u32> = pids.iter().copied().collect();
        self.of_pid.retain(|pid, _| live.contains(pid));
        let new: Vec<u32> = pids.iter().filter(|p| !self.of_pid.contains_key(p)).copied().collect();
        if !new.is_empty() {
            for (pid, file) in read_cgroup_files(&new) {
                let cg = self.cgroup_of(file.as_deref());
                if cg.is_none() {
                    if crate::discovery::procfs::stat(pid).is_err() {
                        // gone before it was read (a process per connection): nothing to read
                        log::debug!("client hellos: process {pid} exited before its cgroup was read");
                    } else {
                        log::warn!(
                            "client hellos: cannot tell the cgroup (v2) of process {pid}: its ClientHellos will not \
                             be read (--avoid-hook cgroup_skb reads them from the server's reads instead)"
                        );
                    }
                }
                self.of_pid.insert(pid, cg);
            }
        }
        // A cgroup's program runs for its descendants' sockets too: one whose ancestor is
        // needed is not attached (its packets would be walked twice).
        let mut all: HashMap<u64, PathBuf> = self.of_pid.values().flatten().cloned().collect();
        self.of_socket.retain(|id, _| sockets.contains(id));
        let unknown: HashSet<u64> = sockets
            .iter()
            .filter(|id| **id != 0 && !all.contains_key(id) && !self.of_socket.contains_key(id))
            .copied()
            .collect();
        if !unknown.is_empty() {
            let found = find_cgroups(&self.root, &unknown);
            for id in unknown {
                let dir = found.get(&id).cloned();
                if dir.is_none() {
                    log::debug!("client hellos: no cgroup directory has the id {id} of a listening socket");
                }
                self.of_socket.insert(id, dir);
            }
        }
        for (id, dir) in &self.of_socket {
            if let Some(dir) = dir {
                all.entry(*id).or_insert_with(|| dir.clone());
            }
        }
        let needed: HashMap<u64, PathBuf> = all
            .iter()
            .filter(|(_, dir)| !all.values().any(|other| other != *dir && dir.starts_with(other)))
            .map(|(ino, dir)| (*ino, dir.clone()))
            .collect();
        let wanted: Vec<(u64, PathBuf)> = needed
            .iter()
            .filter(|(ino, _)| !self.links.contains_key(ino))
            .map(|(ino, dir)| (*ino, dir.clone()))
            .collect();
        let now = Instant::now();
        for ino in needed.keys() {
            self.last_needed.insert(*ino, now);
        }
        let lingering = |ino: &u64| {
            self.last_needed
                .get(ino)
                .is_some_and(|t| now.duration_since(*t) < LINGER)
        };
        // an attached cgroup's ancestor attached since is needed instead
        let under_needed = |dir: &PathBuf| needed.values().any(|other| other != dir && dir.starts_with(other));
        let gone: Vec<u64> = self
            .links
            .iter()
            .filter(|(ino, (dir, _))| !needed.contains_key(*ino) && (!lingering(ino) || under_needed(dir)))
            .map(|(ino, _)| *ino)
            .collect();
        self.last_needed
            .retain(|ino, _| needed.contains_key(ino) || (self.links.contains_key(ino) && !gone.contains(ino)));
        // bounded by the cgroups needed now (containers come and go)
        self.refused.retain(|ino| needed.contains_key(ino));
        for ino in &gone {
            if let Some(links) = self.egress.remove(ino) {
                detach_quic(ebpf, links);
            }
        }
        let Some(Ok(p)) = ebpf.program_mut(PROGRAM).map(<&mut CgroupSkb>::try_from) else {
            return;
        };
        for ino in gone {
            if let Some((dir, link)) = self.links.remove(&ino) {
                log::debug!(
                    "client hellos: {}: no traced process left, or an ancestor attached: detached",
                    dir.display()
                );
                let _ = p.detach(link);
            }
        }
        for (ino, dir) in wanted {
            if self.refused.contains(&ino) {
                continue;
            }
            if self.links.len() >= MAX_CGROUPS {
                full.add("hello_cgroups", 1);
                continue;
            }
            match File::open(&dir).map_err(anyhow::Error::from).and_then(|f| {
                // as a link (5.7+): one program among the cgroup's others whatever the mode,
                // which the kernel wants 0 (Single) there
                p.attach(f, CgroupSkbAttachType::Ingress, CgroupAttachMode::Single)
                    .map_err(anyhow::Error::from)
            }) {
                Ok(link) => {
                    log::debug!("client hellos: read from the packets of cgroup {}", dir.display());
                    self.links.insert(ino, (dir, link));
                }
                Err(e) => {
                    log::warn!(
                        "client hellos: cannot attach to cgroup {} ({e:#}): the ClientHellos of its processes \
                         will not be read (--avoid-hook cgroup_skb reads them from the server's reads instead)",
                        dir.display()
                    );
                    self.refused.insert(ino);
                }
            }
        }
        self.sync_egress(ebpf, quic);
    }
}

/// Detaches a cgroup's QUIC programs (QUIC's order).
fn detach_quic(ebpf: &mut Ebpf, links: Vec<CgroupSkbLinkId>) {
    for ((name, _), link) in QUIC.iter().zip(links) {
        if let Some(Ok(p)) = ebpf.program_mut(name).map(<&mut CgroupSkb>::try_from) {
            let _ = p.detach(link);
        }
    }
}

impl HelloCgroups {
    /// The QUIC programs on the attached cgroups that hold a process of `quic`.
    fn sync_egress(&mut self, ebpf: &mut Ebpf, quic: &[u32]) {
        let dirs: Vec<&PathBuf> = quic
            .iter()
            .filter_map(|pid| self.of_pid.get(pid)?.as_ref().map(|(_, d)| d))
            .collect();
        let wanted: HashMap<u64, PathBuf> = self
            .links
            .iter()
            .filter(|(_, (dir, _))| dirs.iter().any(|d| d.starts_with(dir)))
            .map(|(ino, (dir, _))| (*ino, dir.clone()))
            .collect();
        let gone: Vec<u64> = self
            .egress
            .keys()
            .filter(|i| !wanted.contains_key(i))
            .copied()
            .collect();
        for ino in gone {
            if let Some(links) = self.egress.remove(&ino) {
                detach_quic(ebpf, links);
            }
        }
        for (ino, dir) in wanted {
            if self.egress.contains_key(&ino) || self.refused.contains(&ino) {
                continue;
            }
            let mut links = Vec::new();
            let mut failed = None;
            for (name, how) in QUIC {
                let Some(Ok(p)) = ebpf.program_mut(name).map(<&mut CgroupSkb>::try_from) else {
                    return;
                };
                match File::open(&dir)
                    .map_err(anyhow::Error::from)
                    .and_then(|f| p.attach(f, how, CgroupAttachMode::Single).map_err(anyhow::Error::from))
                {
                    Ok(link) => links.push(link),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            match failed {
                None => {
                    log::debug!("quic: the datagrams of cgroup {} read", dir.display());
                    self.egress.insert(ino, links);
                }
                Some(e) => {
                    detach_quic(ebpf, links);
                    log::warn!(
                        "quic: cannot attach to cgroup {} ({e:#}): the QUIC handshakes of its processes are not \
                         read",
                        dir.display()
                    );
                    self.refused.insert(ino);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_and_a_process_path() {
        let info = "24 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n\
                    31 24 0:27 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n\
                    32 24 0:28 / /sys/fs/cgroup/systemd rw shared:11 - cgroup cgroup rw,name=systemd\n";
        assert_eq!(mount_of(info, "cgroup2"), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(mount_of(info, "bpf"), None);
        assert_eq!(
            cgroup_path("12:net_cls:/\n1:name=systemd:/system.slice/nginx.service\n0::/system.slice/nginx.service\n"),
            Some("system.slice/nginx.service")
        );
        assert_eq!(cgroup_path("0::/\n"), Some(""));
        // the root joined with the empty path is the root, an ancestor of every other
        let root = PathBuf::from("/sys/fs/cgroup");
        assert!(root.join("system.slice/nginx.service").starts_with(root.join("")));
        assert_eq!(cgroup_path("0::/../../other.slice\n"), None);
        assert_eq!(cgroup_path("1:cpu:/x\n"), None, "cgroup v1 only");
    }
}
