//! Uprobes shared by every traced process that maps a file. For each (file, offset,
//! program) one tracefs uprobe event (`tlsprof_<agent pid>/<program>_<n>`), whose BPF
//! program hangs on one perf event opened on the agent itself (whose memory never maps the
//! file), and one perf event per traced process, without a program: the kernel puts a
//! uprobe's breakpoint only into the memory of the processes that have a perf event on it,
//! and runs the event's programs on every hit there. Closing a process's perf event removes
//! its breakpoints at once; the kernel waits for RCU grace periods (~0.1 s each here, one
//! at a time under a global lock) only when the last perf event of a uprobe goes. The
//! per-process uprobes of the perf uprobe PMU (uprobes.rs) pay that wait per process and
//! probe: nginx with 32 workers took 16.6 s to detach. Here it is paid once per event,
//! when it has had no process for RELEASE_AFTER, or at exit.
//!
//! Needs tracefs writable: uid 0 (or CAP_DAC_OVERRIDE) and tracefs mounted, or
//! CAP_SYS_ADMIN to make a mount of it of the agent's own, attached nowhere (fsmount).
//! Without, `open` says why and uprobes are attached per process.
use std::{
    collections::HashMap,
    ffi::CString,
    fs::File,
    io::{Read as _, Write as _},
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
        unix::fs::MetadataExt as _,
    },
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

/// An event without a process for this long is released (its uprobe removed): a process
/// whose probes the overhead budget detaches and attaches every cycle (2 s) keeps it.
pub const RELEASE_AFTER: Duration = Duration::from_secs(10);

const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// _IOW('$', 8, u32) and _IO('$', 0): the same on x86-64 and arm64.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;

/// tracefs: the directory its files are opened from.
pub struct Tracefs {
    dir: OwnedFd,
    /// Where it was found, for the log.
    pub place: String,
}

impl Tracefs {
    /// tracefs where the host mounts it, else a mount of the agent's own (CAP_SYS_ADMIN),
    /// attached to no directory and gone with the agent.
    fn open() -> Result<Self> {
        for place in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
            if Path::new(place).join("uprobe_events").exists() {
                let dir = File::open(place).with_context(|| format!("cannot open {place}"))?;
                return Ok(Self {
                    dir: dir.into(),
                    place: place.into(),
                });
            }
        }
        Ok(Self {
            dir: fsmount_tracefs().context("tracefs is not mounted, and mounting it failed")?,
            place: "tracefs (a mount of the agent's own)".into(),
        })
    }

    fn file(&self, name: &str, flags: libc::c_int) -> std::io::Result<File> {
        let c = CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        // SAFETY: a valid directory fd and NUL-terminated path; the returned fd is owned here.
        let fd = unsafe { libc::openat(self.dir.as_raw_fd(), c.as_ptr(), flags | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is not owned elsewhere.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// One command to uprobe_events, appended (opening it to truncate would remove every
    /// uprobe event of the host).
    fn command(&self, line: &str) -> std::io::Result<()> {
        let mut f = self.file("uprobe_events", libc::O_WRONLY | libc::O_APPEND)?;
        f.write_all(format!("{line}\n").as_bytes())
    }

    fn read(&self, name: &str) -> std::io::Result<String> {
        let mut s = String::new();
        self.file(name, libc::O_RDONLY)?.read_to_string(&mut s)?;
        Ok(s)
    }

    fn remove(&self, group: &str, name: &str) {
        if let Err(e) = self.command(&format!("-:{group}/{name}")) {
            log::debug!("uprobes: cannot remove tracefs event {group}/{name}: {e}");
        }
    }
}

/// fsopen("tracefs") + fsmount: a mount of tracefs attached to no directory (Linux 5.2+).
fn fsmount_tracefs() -> Result<OwnedFd> {
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    let name = c"tracefs";
    // SAFETY: plain syscalls with valid arguments; each fd returned is owned below.
    unsafe {
        let fs = libc::syscall(libc::SYS_fsopen, name.as_ptr(), FSOPEN_CLOEXEC);
        if fs < 0 {
            return Err(std::io::Error::last_os_error()).context("fsopen");
        }
        let fs = OwnedFd::from_raw_fd(fs as i32);
        let null = std::ptr::null::<libc::c_char>();
        if libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), FSCONFIG_CMD_CREATE, null, null, 0) < 0 {
            return Err(std::io::Error::last_os_error()).context("fsconfig");
        }
        let m = libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, 0);
        if m < 0 {
            return Err(std::io::Error::last_os_error()).context("fsmount");
        }
        Ok(OwnedFd::from_raw_fd(m as i32))
    }
}

/// perf_event_attr as Linux 2.6.31 defined it (PERF_ATTR_SIZE_VER0): every later field zero.
#[repr(C)]
struct PerfAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

/// A perf event on tracepoint `id`, for process `pid` (any of its threads).
fn perf_event_open(id: u64, pid: u32) -> std::io::Result<OwnedFd> {
    let attr = PerfAttr {
        kind: PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<PerfAttr>() as u32,
        config: id,
        sample_period: 0,
        sample_type: 0,
        read_format: 0,
        flags: 0,
        wakeup_events: 1,
        bp_type: 0,
        config1: 0,
    };
    // SAFETY: attr lives through the call; the fd returned is owned below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfAttr,
            pid as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn ioctl(fd: BorrowedFd, request: libc::c_ulong, arg: libc::c_int) -> std::io::Result<()> {
    // SAFETY: a perf event fd and an integer argument, as both requests take.
    if unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// One shared uprobe: a file (device, inode), an offset in it and the program run there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    dev: u64,
    ino: u64,
    offset: u64,
    program: &'static str,
}

struct Event {
    name: String,
    id: u64,
    /// The perf event on the agent that holds the program.
    carrier: OwnedFd,
    /// Processes with a perf event on it.
    users: usize,
    idle_since: Option<Instant>,
}

/// An event taken out of use: dropping it (on the detacher thread: ~0.1 s) closes its
/// carrier, which removes the uprobe, then deletes the tracefs event.
pub struct Released {
    carrier: Option<OwnedFd>,
    tracefs: Arc<Tracefs>,
    group: String,
    name: String,
}

impl Drop for Released {
    fn drop(&mut self) {
        drop(self.carrier.take());
        self.tracefs.remove(&self.group, &self.name);
    }
}

pub struct SharedUprobes {
    tracefs: Arc<Tracefs>,
    group: String,
    events: HashMap<Key, Event>,
    made: u64,
}

impl SharedUprobes {
    /// tracefs found (or mounted) and writable, and the events of agents that died
    /// without removing theirs removed; else why not.
    pub fn open() -> Result<Self> {
        let tracefs = Tracefs::open()?;
        tracefs
            .file("uprobe_events", libc::O_WRONLY | libc::O_APPEND)
            .with_context(|| format!("cannot write uprobe_events in {}", tracefs.place))?;
        let me = std::process::id();
        let s = Self {
            tracefs: Arc::new(tracefs),
            group: format!("tlsprof_{me}"),
            events: HashMap::new(),
            made: 0,
        };
        s.remove_stale(me);
        Ok(s)
    }

    pub fn place(&self) -> &str {
        &self.tracefs.place
    }

    /// Events of a tlsprof that is no longer running (killed before it could remove them).
    fn remove_stale(&self, me: u32) {
        let Ok(list) = self.tracefs.read("uprobe_events") else {
            return;
        };
        for line in list.lines() {
            // "p:tlsprof_1234/hs_exit_7 /usr/lib/...:0x..."
            let Some((group, name)) = line
                .split_whitespace()
                .next()
                .and_then(|e| e.split_once(':'))
                .and_then(|(_, e)| e.split_once('/'))
            else {
                continue;
            };
            let Some(pid) = group.strip_prefix("tlsprof_").and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            let alive = std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "tlsprof");
            if pid != me && !alive {
                log::debug!("uprobes: removing {group}/{name}, left by a tlsprof that is gone");
                self.tracefs.remove(group, name);
            }
        }
    }

    /// Puts `program` at `offset` of `target` into process `pid`: the event made on first
    /// use. The returned fd is the process's: closing it removes the process's breakpoint.
    pub fn attach(
        &mut self,
        program: &'static str,
        prog_fd: BorrowedFd,
        ret: bool,
        offset: u64,
        target: &Path,
        pid: u32,
    ) -> Result<(Key, OwnedFd)> {
        let meta = std::fs::metadata(target).with_context(|| format!("cannot stat {}", target.display()))?;
        let key = Key {
            dev: meta.dev(),
            ino: meta.ino(),
            offset,
            program,
        };
        if !self.events.contains_key(&key) {
            let e = self.make(program, prog_fd, ret, offset, target)?;
            self.events.insert(key, e);
        }
        let e = self.events.get_mut(&key).expect("inserted above");
        let fd = perf_event_open(e.id, pid)
            .with_context(|| format!("perf_event_open on {}/{} for {pid}", self.group, e.name))?;
        e.users += 1;
        e.idle_since = None;
        Ok((key, fd))
    }

    fn make(
        &mut self,
        program: &'static str,
        prog_fd: BorrowedFd,
        ret: bool,
        offset: u64,
        target: &Path,
    ) -> Result<Event> {
        let path = target.to_str().filter(|p| !p.contains(char::is_whitespace));
        let Some(path) = path else {
            bail!("{} cannot be named to tracefs", target.display());
        };
        self.made += 1;
        let name = format!("{program}_{}", self.made);
        let kind = if ret { 'r' } else { 'p' };
        self.tracefs
            .command(&format!("{kind}:{}/{name} {path}:{offset:#x}", self.group))
            .with_context(|| format!("tracefs refused a uprobe at {path}:{offset:#x}"))?;
        let made = (|| -> Result<Event> {
            let id: u64 = self
                .tracefs
                .read(&format!("events/{}/{name}/id", self.group))?
                .trim()
                .parse()
                .context("event id")?;
            let carrier = perf_event_open(id, std::process::id()).context("perf_event_open on the agent")?;
            ioctl(carrier.as_fd(), PERF_EVENT_IOC_SET_BPF, prog_fd.as_raw_fd()).context("PERF_EVENT_IOC_SET_BPF")?;
            ioctl(carrier.as_fd(), PERF_EVENT_IOC_ENABLE, 0).context("PERF_EVENT_IOC_ENABLE")?;
            Ok(Event {
                name: name.clone(),
                id,
                carrier,
                users: 0,
                idle_since: Some(Instant::now()),
            })
        })();
        if made.is_err() {
            self.tracefs.remove(&self.group, &name);
        }
        made
    }

    /// A process's perf event on `key` is being closed.
    pub fn put(&mut self, key: &Key) {
        if let Some(e) = self.events.get_mut(key) {
            e.users = e.users.saturating_sub(1);
            if e.users == 0 {
                e.idle_since = Some(Instant::now());
            }
        }
    }

    /// Events without a process for RELEASE_AFTER (or all of them: shutting down), taken
    /// out of use: to be dropped, which removes them.
    pub fn release(&mut self, all: bool) -> Vec<Released> {
        let now = Instant::now();
        let gone: Vec<Key> = self
            .events
            .iter()
            .filter(|(_, e)| all || e.idle_since.is_some_and(|t| now.duration_since(t) >= RELEASE_AFTER))
            .map(|(k, _)| *k)
            .collect();
        gone.into_iter()
            .filter_map(|k| self.events.remove(&k))
            .map(|e| Released {
                carrier: Some(e.carrier),
                tracefs: self.tracefs.clone(),
                group: self.group.clone(),
                name: e.name,
            })
            .collect()
    }
}
