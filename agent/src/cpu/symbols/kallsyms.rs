//! Kernel addresses: /proc/kallsyms, each function classed once (networking, kernel TLS,
//! tlsprof's own probes and their traps, other).
use crate::discovery::prim::{classify_name, Prim};

/// Kernel function classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KClass {
    Other,
    Net,
    /// Kernel TLS (the tls module).
    Ktls,
    /// BPF programs: what tlsprof's kernel side costs.
    Probe,
    /// uprobe and uretprobe traps (their BPF programs run inside): what the handshake
    /// probes cost the process they trap.
    Trap,
}

const NET_PREFIXES: &[&str] = &[
    "tcp",
    "__tcp",
    "inet",
    "__inet",
    "ip_",
    "ip6",
    "__ip",
    "ipv4",
    "ipv6",
    "udp",
    "__udp",
    "raw_",
    "sock_",
    "__sock",
    "sk_",
    "__sk_",
    "skb_",
    "__skb",
    "kfree_skb",
    "consume_skb",
    "alloc_skb",
    "__alloc_skb",
    "__sys_accept",
    "__sys_send",
    "__sys_recv",
    "__sys_connect",
    "__sys_shutdown",
    "__sys_socket",
    "__sys_bind",
    "__sys_listen",
    "__sys_setsockopt",
    "__sys_getsockopt",
    "__sys_getsockname",
    "__sys_getpeername",
    "do_accept",
    "move_addr_to",
    "ep_",
    "do_epoll",
    "__x64_sys_epoll",
    "__do_sys_epoll",
    "__se_sys_epoll",
    "net_",
    "__net",
    "netif_",
    "__netif",
    "napi_",
    "__napi",
    "dev_queue_xmit",
    "__dev_queue_xmit",
    "dev_hard_start_xmit",
    "loopback_xmit",
    "process_backlog",
    "validate_xmit",
    "nf_",
    "__nf_",
    "nft_",
    "ipt_",
    "unix_",
    "security_socket",
    "security_sock",
    "lock_sock",
    "release_sock",
    "__release_sock",
    "__lock_sock",
    "sockfd_",
    "__x64_sys_accept",
    "__x64_sys_send",
    "__x64_sys_recv",
    "__x64_sys_connect",
    "__x64_sys_shutdown",
    "__x64_sys_socket",
    "__x64_sys_setsockopt",
    "__x64_sys_getsockopt",
    "__x64_sys_listen",
    "__x64_sys_bind",
];

pub fn kernel_class(name: &str, module: Option<&str>) -> KClass {
    if module == Some("tls") {
        return KClass::Ktls;
    }
    if name.contains("uprobe") || name.contains("uretprobe") || name.starts_with("handle_swbp") {
        return KClass::Trap;
    }
    if module == Some("bpf")
        || name.starts_with("bpf_prog_")
        || name.starts_with("bpf_trace_run")
        || name.starts_with("__bpf_trace_run")
        || name.starts_with("__bpf_prog_run")
    {
        return KClass::Probe;
    }
    if NET_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return KClass::Net;
    }
    KClass::Other
}

/// /proc/kallsyms, sorted, each function classed.
pub struct Kallsyms {
    addrs: Vec<u64>,
    class: Vec<KClass>,
    prim: Vec<Prim>,
    names: Vec<String>,
}

impl Kallsyms {
    pub fn load(keep_names: bool) -> Option<Kallsyms> {
        let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
        Self::parse(&text, keep_names)
    }

    pub fn parse(text: &str, keep_names: bool) -> Option<Kallsyms> {
        let mut all: Vec<(u64, KClass, Prim, String)> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let kind = it.next()?;
                let name = it.next()?;
                let module = it.next().map(|m| m.trim_matches(|c| c == '[' || c == ']'));
                if addr == 0 || !matches!(kind, "T" | "t" | "W" | "w") {
                    return None;
                }
                let class = kernel_class(name, module);
                let prim = if class == KClass::Ktls || module == Some("tls") {
                    Prim::Other
                } else {
                    classify_name(name)
                };
                Some((
                    addr,
                    class,
                    prim,
                    if keep_names { name.to_string() } else { String::new() },
                ))
            })
            .collect();
        if all.is_empty() {
            return None; // kptr_restrict: addresses hidden
        }
        all.sort_unstable_by_key(|s| s.0);
        Some(Kallsyms {
            addrs: all.iter().map(|s| s.0).collect(),
            class: all.iter().map(|s| s.1).collect(),
            prim: all.iter().map(|s| s.2).collect(),
            names: if keep_names {
                all.into_iter().map(|s| s.3).collect()
            } else {
                Vec::new()
            },
        })
    }

    fn index(&self, addr: u64) -> Option<usize> {
        self.addrs.partition_point(|a| *a <= addr).checked_sub(1)
    }

    pub fn class(&self, addr: u64) -> KClass {
        self.index(addr).map_or(KClass::Other, |i| self.class[i])
    }

    /// The crypto primitive a kernel function's name says (aesni_gcm_*, chacha20_*, …).
    pub fn prim(&self, addr: u64) -> Prim {
        self.index(addr).map_or(Prim::Other, |i| self.prim[i])
    }

    pub fn name(&self, addr: u64) -> Option<&str> {
        self.index(addr).and_then(|i| self.names.get(i)).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_classes() {
        let text = "ffffffff81000000 T _text\n\
                    ffffffff81100000 T tcp_sendmsg\n\
                    ffffffff81100400 t do_epoll_wait\n\
                    ffffffff81200000 T uprobe_notify_resume\n\
                    ffffffff81300000 T aesni_gcm_enc_update\n\
                    ffffffff81400000 T filemap_read\n\
                    ffffffff81500000 T __x64_sys_uretprobe\n\
                    ffffffff81600000 T bpf_trace_run2\n\
                    ffffffffc0000000 t tls_sw_sendmsg\t[tls]\n\
                    0000000000000000 A fixed_percpu_data\n";
        let k = Kallsyms::parse(text, true).unwrap();
        assert_eq!(k.class(0xffffffff81100010), KClass::Net);
        assert_eq!(k.class(0xffffffff81100410), KClass::Net);
        assert_eq!(k.class(0xffffffff81200010), KClass::Trap);
        assert_eq!(k.class(0xffffffff81500010), KClass::Trap);
        assert_eq!(k.class(0xffffffff81600010), KClass::Probe);
        assert_eq!(k.class(0xffffffff81400010), KClass::Other);
        assert_eq!(k.class(0xffffffffc0000010), KClass::Ktls);
        assert_eq!(k.prim(0xffffffff81300010), Prim::AesGcm);
        assert_eq!(k.name(0xffffffff81100010), Some("tcp_sendmsg"));
        assert!(Kallsyms::parse("0000000000000000 T tcp_sendmsg\n", false).is_none());
    }
}
