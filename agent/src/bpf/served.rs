//! What serves each kernel capability on this kernel: the hooks attached at start (chains in
//! hooks.rs) and where connection state lives; loader.rs tries socket storage, then a hash.
use anyhow::Result;
use aya::{Btf, Ebpf};

use super::hooks::{
    self, Capability, CONNECTIONS, HELLO_CAPTURE, PROCESSES, READ_SIDE, RESETS, SCHEDULER, SEND_CAPTURE, SEND_SIDE,
};

/// Where each connection's state lives (bpf/conn.bpf.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// Socket-local storage, freed with the socket (tracing programs may use it since 5.11).
    Socket,
    /// A hash keyed by the socket's address, deleted at close.
    Hash,
}

impl Storage {
    pub fn label(self) -> &'static str {
        match self {
            Storage::Socket => hooks::SK_STORAGE,
            Storage::Hash => "hash_map",
        }
    }
}

/// What serves each capability on this kernel.
pub struct Served {
    pub storage: Storage,
    pub capabilities: Vec<(&'static Capability, hooks::Serving)>,
    /// The read side's links, as attached at start (the Kernel takes them: ReadSide).
    pub(super) read_side_links: Vec<(&'static str, hooks::LinkRef)>,
}

impl Served {
    /// The server's sends are captured: server handshakes and requests are counted from
    /// what servers send.
    pub fn sends_captured(&self) -> bool {
        matches!(self.of(SEND_CAPTURE.name), Some(hooks::Serving::By(_)))
    }

    pub fn of(&self, name: &str) -> Option<&hooks::Serving> {
        self.capabilities.iter().find(|(c, _)| c.name == name).map(|(_, s)| s)
    }

    /// (capability, hook) pairs for tlsprof_kernel_hook_info and the log, with the two
    /// load-time choices: where connections live and how records are walked.
    pub fn info(&self) -> Vec<(&'static str, &'static str)> {
        let mut out: Vec<(&str, &str)> = self
            .capabilities
            .iter()
            .map(|(c, s)| (c.name, s.hook_label()))
            .collect();
        let uses_conns = !matches!(self.of(CONNECTIONS.name), Some(hooks::Serving::Unserved(_)));
        out.push((
            "connection_storage",
            if uses_conns { self.storage.label() } else { "none" },
        ));
        out.push((
            "capture_loop",
            match self.of(SEND_CAPTURE.name) {
                Some(hooks::Serving::By(h)) if h.bounded => "bounded_loop",
                Some(hooks::Serving::By(_)) => "bpf_loop",
                _ => "none",
            },
        ));
        out
    }

    /// How many of the capabilities that keep connection state are served.
    pub(super) fn connection_score(&self) -> usize {
        self.capabilities
            .iter()
            .filter(|(c, s)| c.on_connections && matches!(s, hooks::Serving::By(_)))
            .count()
    }

    /// Some capability that keeps connection state and is needed has no hook.
    pub(super) fn connections_short(&self) -> bool {
        self.capabilities
            .iter()
            .any(|(c, s)| c.on_connections && matches!(s, hooks::Serving::Unserved(_)))
    }
}

/// Attaches a hook for every capability this run needs, with connection state kept as
/// `storage`. The required ones failing is an error.
pub(super) fn attach_capabilities(
    ebpf: &mut Ebpf,
    btf: &Btf,
    storage: Storage,
    avoid: &[String],
    client_hellos: bool,
) -> Result<Served> {
    let mut caps = Vec::new();
    for c in [&SCHEDULER, &PROCESSES] {
        match hooks::resolve(c, avoid, |h| hooks::attach_hook(ebpf, btf, h).map(drop)) {
            hooks::Serving::Unserved(why) => anyhow::bail!(
                "this kernel refused the BTF tracepoints tlsprof needs ({}): {} (tp_btf, Linux 5.5+, with BTF)",
                c.name,
                why.join("; ")
            ),
            s => caps.push((c, s)),
        }
    }
    let conns = hooks::resolve(&CONNECTIONS, avoid, |h| hooks::attach_hook(ebpf, btf, h).map(drop));
    let have_conns = matches!(conns, hooks::Serving::By(_));
    caps.push((&CONNECTIONS, conns));
    let mut read_side_links = Vec::new();
    let mut on_conns = |c: &'static Capability, needed: bool, ebpf: &mut Ebpf| {
        let s = if !needed {
            hooks::Serving::NotNeeded
        } else if !have_conns {
            hooks::Serving::Unserved(vec![format!(
                "it keeps its state in the connection's, and {} has no hook",
                CONNECTIONS.name
            )])
        } else {
            hooks::resolve(c, avoid, |h| {
                let links = hooks::attach_hook(ebpf, btf, h)?;
                if c.name == READ_SIDE.name {
                    read_side_links = links;
                }
                Ok(())
            })
        };
        (c, s)
    };
    caps.push(on_conns(&RESETS, true, ebpf));
    let send = on_conns(&SEND_CAPTURE, true, ebpf);
    let wire = matches!(send.1, hooks::Serving::By(_));
    caps.push(send);
    // The read side in every mode: the kernel estimate of handshake CPU opens its windows
    // at reads (bpf/estimate.bpf.h); with --exact it links handshake calls to connections
    // (Kernel::configure detaches it where nothing needs it).
    caps.push(on_conns(&READ_SIDE, true, ebpf));
    // The ClientHello capture in every mode (it gates itself on the socket:
    // bpf/hello.bpf.h), unless --no-client-hellos.
    caps.push(on_conns(&HELLO_CAPTURE, client_hellos, ebpf));
    caps.push(on_conns(&SEND_SIDE, !wire, ebpf));
    Ok(Served {
        storage,
        capabilities: caps,
        read_side_links,
    })
}
