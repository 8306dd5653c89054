//! Where the ClientHello capture's packet program runs (bpf/hello_skb.bpf.h): attached to
//! the cgroup (v2) of each traced process, it runs only for the packets that reach the
//! sockets of that cgroup's processes. A cgroup is attached once, however many traced
//! processes it holds (nginx's master and workers share one), and detached when none is
//! left in it. A cgroup the kernel refuses (a cgroup v1 host whose net_cls or net_prio is in
//! use, a path outside the agent's cgroup namespace) is said once, with what is lost; the
//! per-read hooks, which need no cgroup, are `--avoid-hook cgroup_skb`.
use std::{
    collections::{HashMap, HashSet},
    fs::File,
    os::unix::fs::MetadataExt as _,
    path::PathBuf,
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

/// Where the cgroup v2 hierarchy is mounted (the first such mount), if it is.
pub fn cgroup2_root() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mount_of(&text, "cgroup2")
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
fn cgroup_path(cgroup_file: &str) -> Option<&str> {
    let path = cgroup_file.lines().find_map(|l| l.strip_prefix("0::"))?;
    // outside the agent's cgroup namespace ("/../x"), or a cgroup removed: not reachable
    (!path.split('/').any(|p| p == "..") && !path.ends_with(" (deleted)")).then(|| path.trim_start_matches('/'))
}

/// A cgroup: its directory's inode (one cgroup, however its path is spelled) and path.
type Cgroup = (u64, PathBuf);

pub struct HelloCgroups {
    root: PathBuf,
    /// Each traced process's cgroup, None where it cannot be told.
    of_pid: HashMap<u32, Option<Cgroup>>,
    /// Attached cgroups: their path (for the log) and link.
    links: HashMap<u64, (PathBuf, CgroupSkbLinkId)>,
    /// Cgroups refused, said once.
    refused: HashSet<u64>,
}

impl HelloCgroups {
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            of_pid: HashMap::new(),
            links: HashMap::new(),
            refused: HashSet::new(),
        }
    }

    /// A process's cgroup, from its /proc entry.
    fn cgroup_of(&self, pid: u32) -> Option<Cgroup> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let dir = self.root.join(cgroup_path(&text)?);
        Some((std::fs::metadata(&dir).ok()?.ino(), dir))
    }

    /// Attaches the program to the cgroup of every traced process (`pids`) not attached yet,
    /// and detaches it from the cgroups none of them is in any more.
    pub fn sync(&mut self, ebpf: &mut Ebpf, pids: &[u32], full: &mut Dropped) {
        let live: HashSet<u32> = pids.iter().copied().collect();
        self.of_pid.retain(|pid, _| live.contains(pid));
        for &pid in pids {
            if !self.of_pid.contains_key(&pid) {
                let cg = self.cgroup_of(pid);
                self.of_pid.insert(pid, cg);
            }
        }
        let mut wanted: HashMap<u64, PathBuf> = HashMap::new();
        for (ino, dir) in self.of_pid.values().flatten() {
            if !self.links.contains_key(ino) {
                wanted.insert(*ino, dir.clone());
            }
        }
        let needed: HashSet<u64> = self.of_pid.values().flatten().map(|c| c.0).collect();
        let gone: Vec<u64> = self.links.keys().filter(|k| !needed.contains(k)).copied().collect();
        let Some(Ok(p)) = ebpf.program_mut(PROGRAM).map(<&mut CgroupSkb>::try_from) else {
            return;
        };
        for ino in gone {
            if let Some((dir, link)) = self.links.remove(&ino) {
                log::debug!("client hellos: {} has no traced process left: detached", dir.display());
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
        assert_eq!(cgroup_path("0::/../../other.slice\n"), None);
        assert_eq!(cgroup_path("1:cpu:/x\n"), None, "cgroup v1 only");
    }
}
