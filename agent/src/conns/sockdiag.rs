//! TCP sockets through the kernel's sock_diag netlink interface (what `ss` uses): the
//! listening sockets of a network namespace, and its sockets on given local ports in given
//! states, each with its value in a socket-storage BPF map where asked (5.7+). A netlink
//! socket answers for the namespace it was created in, so one is opened per namespace, from
//! a short-lived thread that enters it.
use std::{
    fs::File,
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
    path::Path,
};

pub const TCP_ESTABLISHED: u8 = 1;
pub const TCP_FIN_WAIT1: u8 = 4;
pub const TCP_FIN_WAIT2: u8 = 5;
pub const TCP_TIME_WAIT: u8 = 6;
pub const TCP_CLOSE_WAIT: u8 = 8;
pub const TCP_LAST_ACK: u8 = 9;
pub const TCP_LISTEN: u8 = 10;
pub const TCP_CLOSING: u8 = 11;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const INET_DIAG_REQ_BYTECODE: u16 = 1;
const INET_DIAG_BC_JMP: u8 = 1;
const INET_DIAG_BC_S_EQ: u8 = 11;
/// The socket's cgroup (v2) id, an attribute of every socket a dump hands over (5.10+).
const INET_DIAG_CGROUP_ID: u16 = 21;
/// A request's socket-storage maps (nested: one SK_DIAG_BPF_STORAGE_REQ_MAP_FD each), and a
/// reply's values (nested: SK_DIAG_BPF_STORAGE, in it SK_DIAG_BPF_STORAGE_MAP_VALUE).
const INET_DIAG_REQ_SK_BPF_STORAGES: u16 = 2;
const SK_DIAG_BPF_STORAGE_REQ_MAP_FD: u16 = 1;
const INET_DIAG_SK_BPF_STORAGES: u16 = 20;
const SK_DIAG_BPF_STORAGE: u16 = 1;
const SK_DIAG_BPF_STORAGE_MAP_VALUE: u16 = 3;
const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | (1 << 14));
const NLMSG_HDR: usize = 16;
const REQ_LEN: usize = 56; // struct inet_diag_req_v2
const MSG_LEN: usize = 72; // struct inet_diag_msg

/// One socket of a dump.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DiagSocket {
    pub state: u8,
    pub local: IpAddr,
    pub sport: u16,
    pub remote: IpAddr,
    pub dport: u16,
    pub inode: u32,
    /// The cgroup (v2) the socket belongs to (its creator's; an accepted connection its
    /// listener's), 0 where the kernel does not say.
    pub cgroup: u64,
    /// Its value in the socket-storage map the dump asked for; None where it has none.
    pub storage: Option<Box<[u8]>>,
}

/// A NETLINK_SOCK_DIAG socket bound to one network namespace.
pub struct SockDiag {
    fd: OwnedFd,
}

fn netlink_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the result is checked before it is owned.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Dumps of many TIME_WAIT sockets come in many datagrams: a 1 s timeout keeps a
    // confused kernel from hanging the agent.
    let tv = libc::timeval { tv_sec: 1, tv_usec: 0 };
    // SAFETY: setsockopt reads the timeval passed with its size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    Ok(fd)
}

impl SockDiag {
    /// A socket in the agent's own network namespace.
    pub fn open() -> io::Result<Self> {
        Ok(Self { fd: netlink_socket()? })
    }

    /// A socket in the network namespace `ns` (a /proc/PID/ns/net path). Entering another
    /// namespace needs CAP_SYS_ADMIN.
    pub fn open_in(ns: &Path) -> io::Result<Self> {
        let ns = File::open(ns)?;
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: setns only changes this short-lived thread's namespace.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                netlink_socket()
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
        })
        .map(|fd| Self { fd })
    }

    /// Hands each TCP socket of one address family in any of `states` (a bit mask,
    /// 1 << state), restricted to local ports `ports` when given, with its value in the
    /// socket-storage map `storage` when given, to `each` as it is read: a dump may hold every
    /// TIME_WAIT socket of a namespace (hundreds of thousands), which is never kept whole.
    pub fn for_each(
        &self,
        family: u8,
        states: u32,
        ports: &[u16],
        storage: Option<BorrowedFd<'_>>,
        each: &mut dyn FnMut(DiagSocket),
    ) -> io::Result<()> {
        let req = request(family, states, ports, storage.map(|fd| fd.as_raw_fd() as u32));
        // SAFETY: send reads req.len() bytes of req.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: recv writes at most buf.len() bytes into buf.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if parse(&buf[..n as usize], family, each)? {
                return Ok(());
            }
        }
    }

    /// Both address families.
    pub fn for_each_all(&self, states: u32, ports: &[u16], each: &mut dyn FnMut(DiagSocket)) -> io::Result<()> {
        self.for_each(libc::AF_INET as u8, states, ports, None, each)?;
        self.for_each(libc::AF_INET6 as u8, states, ports, None, each)
    }

    /// The sockets `for_each` would hand over, kept (tests).
    #[cfg(test)]
    pub fn dump(&self, family: u8, states: u32, ports: &[u16]) -> io::Result<Vec<DiagSocket>> {
        let mut out = Vec::new();
        self.for_each(family, states, ports, None, &mut |s| out.push(s))?;
        Ok(out)
    }

    /// Both address families, kept (tests).
    #[cfg(test)]
    pub fn dump_all(&self, states: u32, ports: &[u16]) -> io::Result<Vec<DiagSocket>> {
        let mut out = Vec::new();
        self.for_each_all(states, ports, &mut |s| out.push(s))?;
        Ok(out)
    }
}

/// A dump request: struct nlmsghdr + struct inet_diag_req_v2 (+ a bytecode filter that
/// accepts a socket whose local port is one of `ports`, + the socket-storage map whose
/// values to hand over, by its descriptor in the agent).
fn request(family: u8, states: u32, ports: &[u16], storage: Option<u32>) -> Vec<u8> {
    let bytecode = port_filter(ports);
    let attr_len = if bytecode.is_empty() { 0 } else { 4 + bytecode.len() };
    let storage_len = if storage.is_some() { 4 + 8 } else { 0 };
    let len = NLMSG_HDR + REQ_LEN + attr_len + storage_len;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
    m.extend_from_slice(&[family, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend_from_slice(&states.to_ne_bytes());
    m.extend_from_slice(&[0u8; 48]); // inet_diag_sockid: unused in a dump
    if attr_len > 0 {
        m.extend_from_slice(&(attr_len as u16).to_ne_bytes());
        m.extend_from_slice(&INET_DIAG_REQ_BYTECODE.to_ne_bytes());
        m.extend_from_slice(&bytecode);
    }
    if let Some(fd) = storage {
        m.extend_from_slice(&(storage_len as u16).to_ne_bytes());
        m.extend_from_slice(&(INET_DIAG_REQ_SK_BPF_STORAGES | NLA_F_NESTED).to_ne_bytes());
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&SK_DIAG_BPF_STORAGE_REQ_MAP_FD.to_ne_bytes());
        m.extend_from_slice(&fd.to_ne_bytes());
    }
    m
}

/// inet_diag bytecode for "local port is one of `ports`", shaped as `ss` shapes an OR:
/// per port an S_EQ test (8 bytes: the op, then an op whose `no` holds the port) whose
/// "yes" goes on to a JMP (4 bytes) to the end (accept) and whose "no" skips that JMP to the
/// next test; the last test has no JMP, and its "no" lands 4 bytes past the end (reject).
/// The kernel's audit wants every jump target on the chain of "yes" steps, which this is.
/// With no ports, or too many for 16-bit jumps, no filter: the caller filters.
fn port_filter(ports: &[u16]) -> Vec<u8> {
    if ports.is_empty() || ports.len() > 4096 {
        return Vec::new();
    }
    let total = ports.len() * 12 - 4;
    let mut bc = Vec::with_capacity(total);
    for (i, port) in ports.iter().enumerate() {
        bc.extend_from_slice(&[INET_DIAG_BC_S_EQ, 8]);
        bc.extend_from_slice(&12u16.to_ne_bytes());
        bc.extend_from_slice(&[0, 0]);
        bc.extend_from_slice(&port.to_ne_bytes());
        if i + 1 < ports.len() {
            // from here, `rest` bytes remain including this JMP: jumping that far accepts
            let rest = (total - bc.len()) as u16;
            bc.extend_from_slice(&[INET_DIAG_BC_JMP, 4]);
            bc.extend_from_slice(&rest.to_ne_bytes());
        }
    }
    bc
}

fn u16_ne(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}
fn u32_ne(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn address(family: u8, raw: &[u8]) -> IpAddr {
    if family == libc::AF_INET as u8 {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    } else {
        let mut a = [0u8; 16];
        a.copy_from_slice(&raw[..16]);
        IpAddr::V6(Ipv6Addr::from(a))
    }
}

/// The payload of the first attribute of type `want` among `attrs` (struct rtattr/nlattr:
/// length, type, 4-byte aligned; the nested and byte-order flags ignored).
fn attr(mut attrs: &[u8], want: u16) -> Option<&[u8]> {
    while attrs.len() >= 4 {
        let (len, kind) = (u16_ne(attrs, 0) as usize, u16_ne(attrs, 2) & NLA_TYPE_MASK);
        if len < 4 || len > attrs.len() {
            break;
        }
        if kind == want {
            return Some(&attrs[4..len]);
        }
        attrs = attrs.get((len + 3) & !3..).unwrap_or_default();
    }
    None
}

/// The cgroup id among a socket's attributes, 0 if none.
fn cgroup_attr(attrs: &[u8]) -> u64 {
    attr(attrs, INET_DIAG_CGROUP_ID)
        .and_then(|v| v.get(..8))
        .map_or(0, |v| u64::from_ne_bytes(v.try_into().unwrap_or_default()))
}

/// The socket's value in the one socket-storage map the dump asked for, if it has one.
fn storage_attr(attrs: &[u8]) -> Option<Box<[u8]>> {
    let all = attr(attrs, INET_DIAG_SK_BPF_STORAGES)?;
    let one = attr(all, SK_DIAG_BPF_STORAGE)?;
    attr(one, SK_DIAG_BPF_STORAGE_MAP_VALUE).map(Box::from)
}

/// Parses one datagram of a dump, each socket to `out`; true once the dump is complete.
fn parse(mut buf: &[u8], family: u8, out: &mut dyn FnMut(DiagSocket)) -> io::Result<bool> {
    while buf.len() >= NLMSG_HDR {
        let len = u32_ne(buf, 0) as usize;
        let kind = u16_ne(buf, 4);
        if len < NLMSG_HDR || len > buf.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "truncated netlink message"));
        }
        let body = &buf[NLMSG_HDR..len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = if body.len() >= 4 {
                    -(u32_ne(body, 0) as i32)
                } else {
                    libc::EIO
                };
                // an error with errno 0 is an acknowledgement
                if errno != 0 {
                    return Err(io::Error::from_raw_os_error(errno));
                }
            }
            SOCK_DIAG_BY_FAMILY if body.len() >= MSG_LEN => {
                let f = if body[0] == 0 { family } else { body[0] };
                // inet_diag_sockid: sport, dport (big endian), src[16], dst[16]
                out(DiagSocket {
                    state: body[1],
                    sport: u16::from_be_bytes([body[4], body[5]]),
                    dport: u16::from_be_bytes([body[6], body[7]]),
                    local: address(f, &body[8..24]),
                    remote: address(f, &body[24..40]),
                    inode: u32_ne(body, 68),
                    cgroup: cgroup_attr(&body[MSG_LEN..]),
                    storage: storage_attr(&body[MSG_LEN..]),
                });
            }
            _ => {}
        }
        // messages are 4-byte aligned
        let step = (len + 3) & !3;
        buf = buf.get(step..).unwrap_or_default();
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(payload);
        a.resize((a.len() + 3) & !3, 0);
        a
    }

    /// A socket's attributes as the kernel lays them out (bpf_sk_storage_diag_put): the
    /// cgroup id, then the storages, nested twice, the map's id, a pad attribute that aligns
    /// the value to 8 bytes, and the value.
    #[test]
    fn storage_and_cgroup_attributes() {
        let value: Vec<u8> = (1..=20).collect();
        let mut one = nla(2, &7u32.to_ne_bytes()); // SK_DIAG_BPF_STORAGE_MAP_ID
        one.extend(nla(1, &[])); // SK_DIAG_BPF_STORAGE_PAD
        one.extend(nla(SK_DIAG_BPF_STORAGE_MAP_VALUE, &value));
        let stg = nla(SK_DIAG_BPF_STORAGE | NLA_F_NESTED, &one);
        let mut attrs = nla(INET_DIAG_CGROUP_ID, &42u64.to_ne_bytes());
        attrs.extend(nla(INET_DIAG_SK_BPF_STORAGES | NLA_F_NESTED, &stg));
        assert_eq!(cgroup_attr(&attrs), 42);
        assert_eq!(storage_attr(&attrs).as_deref(), Some(&value[..]));
        // none, or cut short: nothing, no panic
        assert_eq!(storage_attr(&attrs[..12]), None);
        assert_eq!(storage_attr(&attrs[..attrs.len() - 8]), None);
        assert_eq!(cgroup_attr(&[]), 0);
        // the request carries the map's descriptor, nested
        let req = request(libc::AF_INET as u8, 1 << TCP_ESTABLISHED, &[], Some(9));
        assert_eq!(u32_ne(&req, 0) as usize, req.len());
        let tail = &req[NLMSG_HDR + REQ_LEN..];
        let maps = attr(tail, INET_DIAG_REQ_SK_BPF_STORAGES).unwrap();
        assert_eq!(
            attr(maps, SK_DIAG_BPF_STORAGE_REQ_MAP_FD),
            Some(&9u32.to_ne_bytes()[..])
        );
    }

    #[test]
    fn filter_layout() {
        let bc = port_filter(&[443, 8443]);
        assert_eq!(bc.len(), 20);
        // first test: yes to its JMP, no over the JMP to the next test
        assert_eq!(&bc[..2], &[INET_DIAG_BC_S_EQ, 8]);
        assert_eq!((u16_ne(&bc, 2), u16_ne(&bc, 6)), (12, 443));
        // the JMP lands exactly at the end: 12 bytes remain from it
        assert_eq!(&bc[8..10], &[INET_DIAG_BC_JMP, 4]);
        assert_eq!(u16_ne(&bc, 10), 12);
        // last test: no lands past the end
        assert_eq!(&bc[12..14], &[INET_DIAG_BC_S_EQ, 8]);
        assert_eq!((u16_ne(&bc, 14), u16_ne(&bc, 18)), (12, 8443));
        assert!(port_filter(&[]).is_empty());
        assert_eq!(port_filter(&[1]).len(), 8);
    }

    /// Against the kernel: our own listening socket and an established connection, found
    /// with and without the port filter, with the inode /proc shows.
    #[test]
    fn dumps_this_namespace() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (_s, _) = l.accept().unwrap();
        let d = SockDiag::open().unwrap();

        let listening = d.dump(libc::AF_INET as u8, 1 << TCP_LISTEN, &[port]).unwrap();
        assert_eq!(listening.len(), 1, "{listening:?}");
        assert_eq!(listening[0].sport, port);
        assert_eq!(listening[0].local, IpAddr::V4(Ipv4Addr::LOCALHOST));
        let ino = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&l))).unwrap();
        assert_eq!(ino.to_string_lossy(), format!("socket:[{}]", listening[0].inode));
        // its cgroup: this process's, as the cgroup v2 hierarchy names it (its directory's inode)
        if let Some(root) = crate::bpf::hello_cgroups::cgroup2_root() {
            let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
            let dir = root.join(crate::bpf::hello_cgroups::cgroup_path(&own).unwrap());
            assert_eq!(
                listening[0].cgroup,
                std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(dir).unwrap())
            );
        }

        let all = d.dump_all(1 << TCP_LISTEN, &[]).unwrap();
        let other_port = other.local_addr().unwrap().port();
        assert!(all.iter().any(|s| s.sport == port) && all.iter().any(|s| s.sport == other_port));

        let third = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let est = d
            .dump(libc::AF_INET as u8, 1 << TCP_ESTABLISHED, &[other_port, port, third])
            .unwrap();
        let client_port = c.local_addr().unwrap().port();
        assert_eq!(est.len(), 1, "{est:?}");
        assert_eq!((est[0].sport, est[0].dport), (port, client_port));
    }
}
