//! Which kernel hook serves each capability on this kernel, chosen at start by loading and
//! attaching, cheapest first — never by kernel version. A capability that nothing serves is
//! said in one warning line, with what is lost, and in tlsprof_kernel_hook_info.
use anyhow::{Context as _, Result};
use aya::{
    programs::{
        fentry::FEntryLinkId, fexit::FExitLinkId, kprobe::KProbeLinkId, raw_trace_point::RawTracePointLinkId,
        tp_btf::BtfTracePointLinkId, BtfTracePoint, CgroupSkb, FEntry, FExit, KProbe, Program, RawTracePoint,
    },
    Btf, Ebpf,
};

/// How one program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    /// A BTF-typed tracepoint (tp_btf).
    TpBtf(&'static str),
    /// A raw tracepoint (untyped arguments).
    RawTp(&'static str),
    FEntry(&'static str),
    FExit(&'static str),
    /// A kprobe or kretprobe (the program's section says which) on a kernel function.
    KProbe(&'static str),
    /// A cgroup_skb ingress program: loaded here, attached per cgroup by the agent
    /// (hello_cgroups.rs), so it needs a cgroup v2 hierarchy.
    CgroupIngress,
}

/// One way to serve a capability: its programs, all attached or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    /// What tlsprof_kernel_hook_info and the log call it.
    pub label: &'static str,
    pub programs: &'static [(&'static str, Attach)],
    /// Walks records with a bounded loop rather than bpf_loop (send capture only).
    pub bounded: bool,
}

/// A capability and the hooks that can serve it, best first.
#[derive(Debug)]
pub struct Capability {
    pub name: &'static str,
    pub hooks: &'static [Hook],
    /// What tlsprof cannot measure without it (the warning line).
    pub lost: &'static str,
    /// tlsprof cannot run without it.
    pub required: bool,
    /// Its programs keep their state in the connection's (conn.bpf.h), so they need the
    /// connections capability and work only with the connection storage the object has.
    pub on_connections: bool,
}

const fn hook(label: &'static str, programs: &'static [(&'static str, Attach)]) -> Hook {
    Hook {
        label,
        programs,
        bounded: false,
    }
}

const fn bounded(label: &'static str, programs: &'static [(&'static str, Attach)]) -> Hook {
    Hook {
        label,
        programs,
        bounded: true,
    }
}

use Attach::*;

pub const SCHEDULER: Capability = Capability {
    name: "scheduler",
    hooks: &[hook(
        "tp_btf/sched_switch",
        &[("cpu_sched_switch", TpBtf("sched_switch"))],
    )],
    lost: "",
    required: true,
    on_connections: false,
};

pub const PROCESSES: Capability = Capability {
    name: "processes",
    hooks: &[hook(
        "tp_btf/sched_process_fork+exec+exit",
        &[
            ("proc_fork", TpBtf("sched_process_fork")),
            ("proc_exec", TpBtf("sched_process_exec")),
            ("proc_exit", TpBtf("sched_process_exit")),
        ],
    )],
    lost: "",
    required: true,
    on_connections: false,
};

/// Whether the kernel's skipped runs of program `name` (a state change in the middle of
/// one, from an interrupt) miss nothing: those of the
/// connections capability, whose hooks each have two programs, each taking the state
/// changes the other has not (bpf/conn.bpf.h conn_state_take). Not counted in
/// tlsprof_kernel_errors_total{kind="program_skipped"}; a change neither took is
/// `conn_state_missed`.
pub fn skips_taken(name: &str) -> bool {
    CONNECTIONS
        .hooks
        .iter()
        .any(|h| h.programs.iter().any(|(p, _)| *p == name))
}

/// Connection lifecycle: accepted, who closed, TIME_WAIT. Wire capture and requests keep
/// their state in the connection's, so they need it too.
pub const CONNECTIONS: Capability = Capability {
    name: "connections",
    hooks: &[
        hook(
            "tp_btf/inet_sock_set_state",
            &[
                ("conn_state_change", TpBtf("inet_sock_set_state")),
                ("conn_state_change_twin", TpBtf("inet_sock_set_state")),
            ],
        ),
        hook(
            "raw_tp/inet_sock_set_state",
            &[
                ("conn_state_change_raw", RawTp("inet_sock_set_state")),
                ("conn_state_change_twin_raw", RawTp("inet_sock_set_state")),
            ],
        ),
    ],
    lost: "no connection, TIME_WAIT, request or negotiated-parameter figures; handshakes are counted by the \
           handshake probes only",
    required: false,
    on_connections: true,
};

pub const RESETS: Capability = Capability {
    name: "resets",
    hooks: &[
        hook(
            "tp_btf/tcp_receive_reset+tcp_send_reset",
            &[
                ("conn_rcv_reset", TpBtf("tcp_receive_reset")),
                ("conn_send_reset", TpBtf("tcp_send_reset")),
            ],
        ),
        hook(
            "raw_tp/tcp_receive_reset+tcp_send_reset",
            &[
                ("conn_rcv_reset_raw", RawTp("tcp_receive_reset")),
                ("conn_send_reset_raw", RawTp("tcp_send_reset")),
            ],
        ),
    ],
    lost: "connections ended by a reset are counted as closed by the client or the server",
    required: false,
    on_connections: true,
};

/// The server's sends: what it negotiated, its handshakes and requests counted exactly.
pub const SEND_CAPTURE: Capability = Capability {
    name: "send_capture",
    hooks: &[
        hook(
            "tp_btf/tcp_sendmsg_locked",
            &[("wire_send", TpBtf("tcp_sendmsg_locked"))],
        ),
        bounded(
            "tp_btf/tcp_sendmsg_locked",
            &[("wire_send_bounded", TpBtf("tcp_sendmsg_locked"))],
        ),
        hook(
            "fentry/tcp_sendmsg_locked",
            &[("wire_send_fentry", FEntry("tcp_sendmsg_locked"))],
        ),
        bounded(
            "fentry/tcp_sendmsg_locked",
            &[("wire_send_fentry_bounded", FEntry("tcp_sendmsg_locked"))],
        ),
        hook(
            "kprobe/tcp_sendmsg_locked",
            &[("wire_send_kprobe", KProbe("tcp_sendmsg_locked"))],
        ),
        bounded(
            "kprobe/tcp_sendmsg_locked",
            &[("wire_send_kprobe_bounded", KProbe("tcp_sendmsg_locked"))],
        ),
    ],
    lost: "handshakes will not be labelled by version, cipher, group, certificate and resumption, servers \
           without handshake probes get no handshake counts, and the handshake probes stay attached (--exact)",
    required: false,
    on_connections: true,
};

/// The read side: when a server read the client's handshake messages (the kernel estimate
/// of handshake CPU); with --exact, which connections a handshake call read; without the
/// send capture, requests and the end of TLS 1.3 handshakes.
pub const READ_SIDE: Capability = Capability {
    name: "read_side",
    hooks: &[
        hook("tp_btf/sock_recv_length", &[("req_recv", TpBtf("sock_recv_length"))]),
        hook("fexit/sock_recvmsg", &[("req_recv_fexit", FExit("sock_recvmsg"))]),
        hook(
            "kretprobe/sock_recvmsg",
            &[
                ("req_recv_entry", KProbe("sock_recvmsg")),
                ("req_recv_return", KProbe("sock_recvmsg")),
            ],
        ),
    ],
    lost: NO_CONN_IO,
    required: false,
    on_connections: true,
};

/// The client's ClientHello (bpf/hello.bpf.h), attached in every mode: from its packets
/// where a cgroup v2 hierarchy lets the packet program be attached to the traced processes'
/// cgroups (bpf/hello_skb.bpf.h: it runs for their sockets' packets only), else from the
/// server's reads, its own programs beside the read side's (which readside.rs attaches and
/// detaches): those run at every socket read of the machine. The tracepoint's program finds
/// the read's buffer from the syscall's saved registers (bpf_task_pt_regs, 5.15+), fexit and
/// the kretprobe (hash mode) from the msghdr's iterator.
pub const HELLO_CAPTURE: Capability = Capability {
    name: "hello_capture",
    hooks: &[
        hook("cgroup_skb/ingress", &[("hello_ingress", CgroupIngress)]),
        hook("tp_btf/sock_recv_length", &[("hello_recv", TpBtf("sock_recv_length"))]),
        hook("fexit/sock_recvmsg", &[("hello_recv_fexit", FExit("sock_recvmsg"))]),
        hook(
            "kretprobe/sock_recvmsg",
            &[
                ("hello_recv_entry", KProbe("sock_recvmsg")),
                ("hello_recv_return", KProbe("sock_recvmsg")),
            ],
        ),
    ],
    lost: "what clients offer (their ClientHello) will not be read: no tlsprof_client_hellos_total",
    required: false,
    on_connections: true,
};

/// Without the send capture: requests from the server's writes.
pub const SEND_SIDE: Capability = Capability {
    name: "send_side",
    hooks: &[hook(
        "tp_btf/sock_send_length",
        &[("req_send", TpBtf("sock_send_length"))],
    )],
    lost: NO_CONN_IO,
    required: false,
    on_connections: true,
};

const NO_CONN_IO: &str = "requests per connection and connections without a handshake will not be counted";

/// Every capability, in the order they are resolved.
pub const ALL: [&Capability; 8] = [
    &SCHEDULER,
    &PROCESSES,
    &CONNECTIONS,
    &RESETS,
    &SEND_CAPTURE,
    &READ_SIDE,
    &HELLO_CAPTURE,
    &SEND_SIDE,
];

/// How a capability is served on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serving {
    By(Hook),
    /// Nothing works: why each hook failed.
    Unserved(Vec<String>),
    /// Not needed in this mode (another capability covers it).
    NotNeeded,
}

impl Serving {
    pub fn hook_label(&self) -> &'static str {
        match self {
            Serving::By(h) => h.label,
            Serving::Unserved(_) => "none",
            Serving::NotNeeded => "not_needed",
        }
    }
}

/// The load-time choices `--avoid-hook` can also name.
pub const BPF_LOOP: &str = "bpf_loop";
pub const SK_STORAGE: &str = "sk_storage";
/// Uprobes shared per file (bpf/shared_uprobes.rs); avoided, each process gets its own.
pub const SHARED_UPROBES: &str = "shared_uprobes";

impl Hook {
    /// `--avoid-hook` names it: a part of its label, or `bpf_loop` for a hook of a chain
    /// with bounded-loop variants (`of`) that walks with bpf_loop.
    pub fn avoided(&self, of: &Capability, avoid: &[String]) -> bool {
        let walks = of.hooks.iter().any(|h| h.bounded);
        avoid.iter().any(|a| {
            if a == BPF_LOOP {
                walks && !self.bounded
            } else {
                self.label.contains(a.as_str())
            }
        })
    }
}

/// Checks that every `--avoid-hook` name means something: a part of some hook's label, or
/// one of the load-time choices.
pub fn check_avoid(avoid: &[String]) -> Result<()> {
    for a in avoid {
        let known = a == BPF_LOOP
            || a == SK_STORAGE
            || a == SHARED_UPROBES
            || ALL.iter().any(|c| c.hooks.iter().any(|h| h.label.contains(a.as_str())));
        if a.is_empty() || !known {
            let mut names: Vec<&str> = ALL.iter().flat_map(|c| c.hooks.iter().map(|h| h.label)).collect();
            names.dedup();
            anyhow::bail!(
                "--avoid-hook {a:?} names no kernel hook (hooks: {}; or {BPF_LOOP}, {SK_STORAGE}, {SHARED_UPROBES})",
                names.join(", ")
            );
        }
    }
    Ok(())
}

/// Tries a capability's hooks in order with `try_hook`, but for those `avoid` names; the
/// first that works serves it.
pub fn resolve(c: &Capability, avoid: &[String], mut try_hook: impl FnMut(&Hook) -> Result<()>) -> Serving {
    let mut why = Vec::new();
    for h in c.hooks {
        if h.avoided(c, avoid) {
            let reason = format!("{}: avoided (--avoid-hook)", h.label);
            if why.last() != Some(&reason) {
                why.push(reason);
            }
            continue;
        }
        match try_hook(h) {
            Ok(()) => return Serving::By(*h),
            Err(e) => {
                let reason = format!("{}: {e:#}", h.label);
                // a hook's bounded-loop variant refused for the same reason says nothing new
                if why.last() != Some(&reason) {
                    why.push(
                        if h.bounded && why.iter().any(|w: &String| w.starts_with(&format!("{}: ", h.label))) {
                            format!("{} (bounded loop): {e:#}", h.label)
                        } else {
                            reason
                        },
                    );
                }
            }
        }
    }
    Serving::Unserved(why)
}

/// Why the kernel refused a program, in a few words: the verifier's last line, or what a
/// refusal without one means (the whole text goes to the -v log).
pub fn brief(text: &str) -> String {
    if text.contains("kprobe/type") {
        return "this kernel has no kprobes (CONFIG_KPROBES)".into();
    }
    if text.contains("Operation not permitted") && !text.contains("Verifier output: \n") {
        if let Some(line) = text.split("Verifier output:").nth(1).and_then(last_verifier_line) {
            return line;
        }
        return "the kernel does not permit it (EPERM)".into();
    }
    match text.split("Verifier output:").nth(1).and_then(last_verifier_line) {
        Some(line) => line,
        None => text
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .trim_end_matches(". Verifier output:")
            .to_string(),
    }
}

fn last_verifier_line(log: &str) -> Option<String> {
    log.lines()
        .rev()
        .map(str::trim)
        .find(|l| {
            !l.is_empty()
                && !l.starts_with("verification time")
                && !l.starts_with("processed")
                && !l.starts_with("stack depth")
                && !l.starts_with(':')
        })
        .map(String::from)
}

/// An attached program's link, to detach it (and attach the loaded program again later).
#[derive(Debug)]
pub enum LinkRef {
    TpBtf(BtfTracePointLinkId),
    RawTp(RawTracePointLinkId),
    FEntry(FEntryLinkId),
    FExit(FExitLinkId),
    KProbe(KProbeLinkId),
    /// Loaded, attached elsewhere (CgroupIngress: hello_cgroups.rs keeps its links).
    Loaded,
}

/// Loads and attaches every program of `h`: their links; on any failure, unloads those it
/// loaded.
pub fn attach_hook(ebpf: &mut Ebpf, btf: &Btf, h: &Hook) -> Result<Vec<(&'static str, LinkRef)>> {
    let mut done: Vec<(&'static str, LinkRef)> = Vec::new();
    for &(name, how) in h.programs {
        match attach_program(ebpf, btf, name, how) {
            Ok(link) => done.push((name, link)),
            Err(e) => {
                // the verifier's last line says why a program was refused; the whole log is for -v
                let text = format!("{e:#}");
                log::debug!("{name}: {text}");
                let e = anyhow::anyhow!("{}", brief(&text));
                for n in done.into_iter().map(|(n, _)| n).chain([name]) {
                    if let Some(p) = ebpf.program_mut(n) {
                        let _ = unload(p);
                    }
                }
                return Err(e);
            }
        }
    }
    Ok(done)
}

/// Attaches again the programs of a hook that were attached once (attach_hook) and whose
/// links were taken since (detach_links): they are loaded still.
pub fn reattach_hook(ebpf: &mut Ebpf, h: &Hook) -> Result<Vec<(&'static str, LinkRef)>> {
    let mut done = Vec::new();
    for &(name, how) in h.programs {
        let p = ebpf
            .program_mut(name)
            .with_context(|| format!("program {name} missing"))?;
        let link = match how {
            TpBtf(_) => <&mut BtfTracePoint>::try_from(p)?.attach().map(LinkRef::TpBtf),
            RawTp(tp) => <&mut RawTracePoint>::try_from(p)?.attach(tp).map(LinkRef::RawTp),
            FEntry(_) => <&mut FEntry>::try_from(p)?.attach().map(LinkRef::FEntry),
            FExit(_) => <&mut FExit>::try_from(p)?.attach().map(LinkRef::FExit),
            KProbe(f) => <&mut KProbe>::try_from(p)?.attach(f, 0).map(LinkRef::KProbe),
            CgroupIngress => Ok(LinkRef::Loaded),
        };
        match link {
            Ok(l) => done.push((name, l)),
            Err(e) => {
                // none or all: the ones attached go again
                drop(detach_links(ebpf, done));
                return Err(e).with_context(|| format!("attaching {name} again"));
            }
        }
    }
    Ok(done)
}

/// Whether the hook's programs are tracing programs (fentry/fexit): a kernel before Linux
/// 5.13 cannot attach one again once it was detached (ENOENT), only load it anew.
pub fn has_tracing_programs(h: &Hook) -> bool {
    h.programs.iter().any(|(_, how)| matches!(how, FEntry(_) | FExit(_)))
}

/// Unloads the hook's programs and loads and attaches them anew (attach_hook).
pub fn reload_hook(ebpf: &mut Ebpf, btf: &Btf, h: &Hook) -> Result<Vec<(&'static str, LinkRef)>> {
    for &(name, _) in h.programs {
        if let Some(p) = ebpf.program_mut(name) {
            let _ = unload(p);
        }
    }
    attach_hook(ebpf, btf, h)
}

/// Takes the links out of their programs: the kernel detaches each when it is dropped
/// (which may wait for a grace period: drop them off the event loop).
pub fn detach_links(ebpf: &mut Ebpf, links: Vec<(&'static str, LinkRef)>) -> Vec<Box<dyn Send>> {
    let mut owned: Vec<Box<dyn Send>> = Vec::new();
    for (name, link) in links {
        let Some(p) = ebpf.program_mut(name) else { continue };
        let taken: Option<Box<dyn Send>> = match (p, link) {
            (Program::BtfTracePoint(p), LinkRef::TpBtf(id)) => p.take_link(id).ok().map(|l| Box::new(l) as _),
            (Program::RawTracePoint(p), LinkRef::RawTp(id)) => p.take_link(id).ok().map(|l| Box::new(l) as _),
            (Program::FEntry(p), LinkRef::FEntry(id)) => p.take_link(id).ok().map(|l| Box::new(l) as _),
            (Program::FExit(p), LinkRef::FExit(id)) => p.take_link(id).ok().map(|l| Box::new(l) as _),
            (Program::KProbe(p), LinkRef::KProbe(id)) => p.take_link(id).ok().map(|l| Box::new(l) as _),
            _ => None,
        };
        owned.extend(taken);
    }
    owned
}

fn unload(p: &mut Program) -> Result<(), aya::programs::ProgramError> {
    match p {
        Program::BtfTracePoint(p) => p.unload(),
        Program::RawTracePoint(p) => p.unload(),
        Program::FEntry(p) => p.unload(),
        Program::FExit(p) => p.unload(),
        Program::KProbe(p) => p.unload(),
        Program::CgroupSkb(p) => p.unload(),
        _ => Ok(()),
    }
}

fn attach_program(ebpf: &mut Ebpf, btf: &Btf, name: &str, how: Attach) -> Result<LinkRef> {
    let p = ebpf
        .program_mut(name)
        .with_context(|| format!("program {name} missing"))?;
    Ok(match how {
        TpBtf(tp) => {
            let p: &mut BtfTracePoint = p.try_into()?;
            p.load(tp, btf)?;
            LinkRef::TpBtf(p.attach()?)
        }
        RawTp(tp) => {
            let p: &mut RawTracePoint = p.try_into()?;
            p.load()?;
            LinkRef::RawTp(p.attach(tp)?)
        }
        FEntry(f) => {
            let p: &mut FEntry = p.try_into()?;
            p.load(f, btf)?;
            LinkRef::FEntry(p.attach()?)
        }
        FExit(f) => {
            let p: &mut FExit = p.try_into()?;
            p.load(f, btf)?;
            LinkRef::FExit(p.attach()?)
        }
        KProbe(f) => {
            let p: &mut KProbe = p.try_into()?;
            p.load()?;
            LinkRef::KProbe(p.attach(f, 0)?)
        }
        CgroupIngress => {
            if super::hello_cgroups::cgroup2_root().is_none() {
                anyhow::bail!("no cgroup v2 hierarchy is mounted");
            }
            let p: &mut CgroupSkb = p.try_into()?;
            p.load()?;
            // the QUIC capture's programs go with it (hello_cgroups.rs attaches them); one the
            // kernel refuses leaves QUIC unread, not the ClientHellos
            for (quic, _) in super::hello_cgroups::QUIC {
                let loaded = ebpf
                    .program_mut(quic)
                    .context("missing")
                    .and_then(|q| <&mut CgroupSkb>::try_from(q).map_err(anyhow::Error::from))
                    .and_then(|q| q.load().map_err(anyhow::Error::from));
                if let Err(e) = loaded {
                    log::warn!("quic: {quic} does not load on this kernel ({e:#}): QUIC handshakes will not be read");
                }
            }
            LinkRef::Loaded
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_hook_that_works_serves() {
        // a 6.1-like kernel: no send tracepoint, fentry works, bpf_loop works
        let served = resolve(&SEND_CAPTURE, &[], |h| {
            if h.label.starts_with("tp_btf") {
                anyhow::bail!("no such tracepoint")
            }
            Ok(())
        });
        assert_eq!(served.hook_label(), "fentry/tcp_sendmsg_locked");
        assert_eq!(served, Serving::By(SEND_CAPTURE.hooks[2]));
        // a 5.10-like kernel: no bpf_loop either
        let served = resolve(&SEND_CAPTURE, &[], |h| {
            if h.label.starts_with("tp_btf") || !h.bounded {
                anyhow::bail!("unknown func bpf_loop")
            }
            Ok(())
        });
        assert!(matches!(served, Serving::By(h) if h.label == "fentry/tcp_sendmsg_locked" && h.bounded));
        // nothing works: every refusal is kept, in order
        let Serving::Unserved(why) = resolve(&READ_SIDE, &[], |h| anyhow::bail!("refused {}", h.programs.len())) else {
            panic!("served")
        };
        assert_eq!(why.len(), 3);
        assert!(why[2].starts_with("kretprobe/sock_recvmsg: refused 2"), "{why:?}");
    }

    #[test]
    fn only_the_connections_programs_have_their_skips_taken() {
        for name in [
            "conn_state_change",
            "conn_state_change_twin",
            "conn_state_change_twin_raw",
        ] {
            assert!(skips_taken(name), "{name}");
        }
        for name in ["wire_send", "cpu_sched_switch", "hs_exit", "conn_rcv_reset"] {
            assert!(!skips_taken(name), "{name}");
        }
    }

    #[test]
    fn refusals_in_a_few_words() {
        assert_eq!(
            brief("the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1). Verifier output: "),
            "the kernel does not permit it (EPERM)"
        );
        assert_eq!(
            brief("`/sys/bus/event_source/devices/kprobe/type`: No such file or directory (os error 2)"),
            "this kernel has no kprobes (CONFIG_KPROBES)"
        );
        let verifier = "the BPF_PROG_LOAD syscall returned Permission denied (os error 13). Verifier output: \
                        0: (79) r1 = *(u64 *)(r1 +0)\nR1 type=ctx expected=fp\nprocessed 12 insns\n";
        assert_eq!(brief(verifier), "R1 type=ctx expected=fp");
    }

    #[test]
    fn avoided_hooks_are_skipped() {
        let avoid = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // a kernel where everything works: the avoided ones are passed over, in order
        let served = resolve(
            &SEND_CAPTURE,
            &avoid(&["tp_btf/tcp_sendmsg_locked", "fentry", "bpf_loop"]),
            |_| Ok(()),
        );
        assert!(
            matches!(served, Serving::By(h) if h.label == "kprobe/tcp_sendmsg_locked" && h.bounded),
            "{served:?}"
        );
        let served = resolve(&CONNECTIONS, &avoid(&["tp_btf/inet", "bpf_loop"]), |_| Ok(()));
        assert_eq!(served.hook_label(), "raw_tp/inet_sock_set_state");
        let Serving::Unserved(why) = resolve(&SEND_SIDE, &avoid(&["sock_send_length"]), |_| Ok(())) else {
            panic!("served")
        };
        assert_eq!(why, ["tp_btf/sock_send_length: avoided (--avoid-hook)"]);
        assert!(check_avoid(&avoid(&[
            "fentry",
            "kprobe",
            "bpf_loop",
            "sk_storage",
            "raw_tp/inet_sock_set_state"
        ]))
        .is_ok());
        let e = check_avoid(&avoid(&["fentyr"])).unwrap_err().to_string();
        assert!(
            e.starts_with("--avoid-hook \"fentyr\" names no kernel hook (hooks: tp_btf/sched_switch, "),
            "{e}"
        );
        assert!(check_avoid(&avoid(&[""])).is_err());
    }

    #[test]
    fn every_program_of_a_chain_is_in_the_object() {
        use object::{Object as _, ObjectSymbol as _};
        let obj = object::File::parse(super::super::OBJECT).expect("the object parses");
        let names: Vec<&str> = obj.symbols().filter_map(|s| s.name().ok()).collect();
        for c in ALL {
            for h in c.hooks {
                for (name, _) in h.programs {
                    assert!(names.contains(name), "{}: program {name} is not in the object", c.name);
                }
            }
        }
    }
}
