//! What one sample was doing: its category and, in TLS code, its crypto primitive.
use super::{
    symbols::{self, KClass, Kallsyms, Mapping, Prim},
    Category, Verdict,
};
use crate::bpf::cpu as pc;

/// Address -> (mapping, file virtual address).
fn locate(maps: &[Mapping], addr: u64) -> Option<(&Mapping, Option<u64>)> {
    let m = symbols::find(maps, addr)?;
    Some((m, m.vaddr(addr)))
}

/// The validated user frames of a sample: the leaf (the interrupted instruction) and then
/// return addresses that follow a call instruction in a mapped file, or lie in anonymous
/// executable memory (JIT code, which keeps frame pointers). The walk stops at the first
/// frame that is neither: past it, a frame-pointer walk through code without frame
/// pointers reads garbage. The bool says whether the stack was cut.
pub fn user_frames<'m>(s: &pc::cpu_sample, maps: &'m [Mapping]) -> (Vec<(u64, Option<&'m Mapping>)>, bool) {
    let frames = s.user_frames();
    let mut out = Vec::with_capacity(frames.len());
    for (i, &addr) in frames.iter().enumerate() {
        let m = symbols::find(maps, addr);
        if i == 0 {
            out.push((addr, m));
            continue;
        }
        let ok = match m {
            Some(m) if m.anon => true,
            Some(m) => match (&m.file, m.vaddr(addr)) {
                (Some(f), Some(va)) => f.follows_call(va),
                _ => false,
            },
            None => false,
        };
        if !ok {
            return (out, true);
        }
        out.push((addr, m));
    }
    (out, false)
}

/// Whether the sample was taken in a uprobe trap, outside the probe's program: what a
/// handshake probe's trap costs the process it traps, as the process pays it
/// (agent/trap_cost.rs). The programs time themselves; a sample inside one (a BPF program
/// frame under the trap's) is theirs. From 6.0 on the kernel samples inside a uprobe's
/// program (it runs them without `bpf_prog_active`), before it skips those samples.
pub fn in_trap(s: &pc::cpu_sample, ks: Option<&Kallsyms>) -> bool {
    let Some(k) = ks else { return false };
    let (mut trap, mut program) = (false, false);
    for a in s.kernel_frames() {
        match k.class(*a) {
            KClass::Trap => trap = true,
            KClass::Probe => program = true,
            _ => {}
        }
    }
    trap && !program
}

/// The category and primitive of one sample.
pub fn classify(s: &pc::cpu_sample, probed: bool, maps: &[Mapping], ks: Option<&Kallsyms>) -> Verdict {
    let kframes = s.kernel_frames();
    let kclasses: Vec<KClass> = match ks {
        Some(k) => kframes.iter().map(|a| k.class(*a)).collect(),
        None => Vec::new(),
    };
    let in_hs = s.flags & pc::CPU_SAMPLE_HANDSHAKE != 0;
    let user = s.flags & pc::CPU_SAMPLE_USER != 0;
    let tls_cat = if probed { Category::Crypto } else { Category::TlsLibrary };

    if kclasses.iter().any(|c| matches!(c, KClass::Probe | KClass::Trap)) {
        return Verdict {
            category: Category::Probes,
            prim: Prim::None,
        };
    }
    if !user {
        // Kernel TLS: its crypto is record crypto (the handshake is always in user space).
        if kclasses.contains(&KClass::Ktls) {
            let prim = ks
                .and_then(|k| {
                    kframes
                        .iter()
                        .map(|a| k.prim(*a))
                        .find(|p| !p.generic() && *p != Prim::None)
                })
                .unwrap_or(Prim::Other);
            let category = if in_hs { Category::Handshake } else { tls_cat };
            return Verdict { category, prim };
        }
        if in_hs {
            return Verdict {
                category: Category::Handshake,
                prim: Prim::None,
            };
        }
        if kclasses.contains(&KClass::Net) {
            return Verdict {
                category: Category::KernelNet,
                prim: Prim::None,
            };
        }
        // Other kernel work the TLS library caused (page faults on its buffers, getrandom).
        let category = if user_prim(s, maps) != Prim::None {
            tls_cat
        } else {
            Category::Other
        };
        return Verdict {
            category,
            prim: Prim::None,
        };
    }
    let prim = user_prim(s, maps);
    let category = if in_hs {
        Category::Handshake
    } else if prim != Prim::None {
        tls_cat
    } else {
        Category::Other
    };
    Verdict { category, prim }
}

/// A validated return address in TLS code just above a leaf that is not: the TLS library
/// called a helper (memcpy, memset from its buffer code). From the first frame-pointer
/// frame, or from the word at the stack pointer (a leaf that pushed nothing), each checked
/// to follow a call instruction.
fn tls_caller(s: &pc::cpu_sample, maps: &[Mapping]) -> Option<Prim> {
    let frames = s.user_frames();
    let candidates = [frames.get(1).copied(), (s.sp_word != 0).then_some(s.sp_word)];
    candidates.into_iter().flatten().find_map(|ra| {
        let m = symbols::find(maps, ra)?;
        let f = m.file.as_ref()?;
        let va = m.vaddr(ra)?;
        if !f.follows_call(va) {
            return None;
        }
        let p = f.prim(m.vaddr(ra - 1)?);
        (p != Prim::None).then_some(p)
    })
}

/// The primitive of a user-mode sample: its leaf's, or — for a generic leaf (bignum or
/// curve arithmetic, helpers) — that of the nearest validated caller in TLS code that names
/// one (ECDSA signing, ECDH, RSA). `Prim::None` when the leaf is not TLS code.
fn user_prim(s: &pc::cpu_sample, maps: &[Mapping]) -> Prim {
    let Some(&ip) = s.user_frames().first() else {
        return Prim::None;
    };
    let Some((m, Some(va))) = locate(maps, ip) else {
        return Prim::None;
    };
    let Some(f) = &m.file else { return Prim::None };
    let leaf = f.prim(va);
    if leaf == Prim::None {
        return tls_caller(s, maps).unwrap_or(Prim::None);
    }
    if !leaf.generic() {
        return leaf;
    }
    let (frames, _) = user_frames(s, maps);
    for (addr, m) in frames.iter().skip(1) {
        let Some(m) = m else { break };
        let (Some(f), Some(va)) = (&m.file, m.vaddr(addr.saturating_sub(1))) else {
            break;
        };
        let p = f.prim(va);
        if p == Prim::None {
            break; // back in the application
        }
        if !p.generic() {
            return p;
        }
    }
    leaf
}
