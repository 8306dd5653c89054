//! Where an entry probe costs least on x86-64. A uprobe's breakpoint replaces the first
//! byte of an instruction; when it is hit the kernel runs the BPF program and then has to
//! execute the instruction it covered: a relative jump, conditional jump or call it
//! emulates (every x86-64 kernel's uprobes do), anything else it single-steps out of line,
//! which costs a second exception (#DB) — on a VM most of a hit's cost (measured with perf
//! in an nginx worker: the probes' time was almost all `exc_debug`).
//!
//! Functions often begin with a test of their first argument and a conditional jump
//! (`test rdi, rdi; je …`: SSL_free), or load a constant and jump to the real work
//! (`mov esi, 1; jmp state_machine`: ossl_statem_accept). A probe on that jump sees the
//! same call as one on the first instruction, provided the instructions it skips cannot
//! change what the programs read there: the first argument (rdi) and, for a return probe,
//! the return address at the top of the stack (rsp). So the probe moves to the first
//! emulated branch within `MAX_SKIP` instructions, past only instructions that write flags,
//! or registers other than rdi and rsp, and never memory; otherwise it stays on the entry.
//! What is not checked: code elsewhere in the function jumping back to an instruction in
//! between (a loop at the very start of a function), which would count a call twice.
use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

/// Instructions a probe may move past.
const MAX_SKIP: usize = 3;

/// How many bytes past a function's entry (`code`, its first bytes) the probe should go to
/// sit on a branch the kernel emulates (0: the first instruction is one); None when there
/// is none within reach (the probe stays on the entry and is single-stepped).
pub fn emulated_entry(code: &[u8]) -> Option<u64> {
    let mut d = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    for (i, ins) in d.iter().enumerate() {
        if ins.is_invalid() {
            return None;
        }
        if emulated(&ins, code) {
            return Some(ins.ip());
        }
        if i == MAX_SKIP || !skippable(&ins) {
            return None;
        }
    }
    None
}

/// Whether the kernel emulates this instruction rather than single-stepping it: a relative
/// jmp, jcc or call without prefixes (arch/x86/kernel/uprobes.c, branch_setup_xol_ops).
fn emulated(ins: &Instruction, code: &[u8]) -> bool {
    let at = ins.ip() as usize;
    let opcode = matches!(
        code.get(at..at + ins.len()),
        Some([0xeb | 0xe9 | 0xe8 | 0x70..=0x7f, ..] | [0x0f, 0x80..=0x8f, ..])
    );
    opcode && ins.op0_kind() == OpKind::NearBranch64
}

/// Whether a probe may move past this instruction: it writes at most flags and a register
/// that is neither the first argument nor the stack pointer, and no memory.
fn skippable(ins: &Instruction) -> bool {
    match ins.mnemonic() {
        Mnemonic::Endbr64 | Mnemonic::Nop => true,
        Mnemonic::Test | Mnemonic::Cmp => true, // flags only
        Mnemonic::Mov | Mnemonic::Movzx | Mnemonic::Movsxd | Mnemonic::Lea | Mnemonic::Xor => {
            ins.op0_kind() == OpKind::Register
                && !matches!(
                    ins.op0_register(),
                    Register::RDI
                        | Register::EDI
                        | Register::DI
                        | Register::DIL
                        | Register::RSP
                        | Register::ESP
                        | Register::SP
                        | Register::SPL
                )
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_onto_the_first_emulated_branch() {
        // SSL_free: test rdi, rdi; je …
        assert_eq!(
            emulated_entry(&[0x48, 0x85, 0xff, 0x0f, 0x84, 0x97, 0x03, 0, 0]),
            Some(3)
        );
        // ossl_statem_accept: mov esi, 1; jmp state_machine
        assert_eq!(emulated_entry(&[0xbe, 1, 0, 0, 0, 0xe9, 0x10, 0x20, 0, 0]), Some(5));
        // endbr64; test rdi, rdi; je +0x10
        assert_eq!(
            emulated_entry(&[0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x85, 0xff, 0x74, 0x10]),
            Some(7)
        );
        // a branch first: it stays, and is emulated
        assert_eq!(emulated_entry(&[0xeb, 0x00, 0xc3]), Some(0));
    }

    #[test]
    fn stays_where_skipping_would_change_what_the_probes_read() {
        // push rbx; … (the return address is no longer at the top of the stack)
        assert_eq!(emulated_entry(&[0x53, 0x74, 0x10]), None);
        // sub rsp, 0x30; je
        assert_eq!(emulated_entry(&[0x48, 0x83, 0xec, 0x30, 0x74, 0x10]), None);
        // mov rdi, rsi; je (the first argument replaced)
        assert_eq!(emulated_entry(&[0x48, 0x89, 0xf7, 0x74, 0x10]), None);
        // mov [rsp-8], rdi; je (a memory write)
        assert_eq!(emulated_entry(&[0x48, 0x89, 0x7c, 0x24, 0xf8, 0x74, 0x10]), None);
        // four skippable instructions before the branch: too far
        assert_eq!(emulated_entry(&[0x90, 0x90, 0x90, 0x90, 0x74, 0x10]), None);
        // an indirect jump is single-stepped: not a target
        assert_eq!(emulated_entry(&[0x48, 0x85, 0xff, 0xff, 0xe0]), None);
        // a 0x66-prefixed branch is single-stepped
        assert_eq!(emulated_entry(&[0x48, 0x85, 0xff, 0x66, 0xe9, 0x10, 0x00]), None);
        // truncated or undecodable code
        assert_eq!(emulated_entry(&[0x48, 0x85]), None);
        assert_eq!(emulated_entry(&[]), None);
    }
}

#[cfg(test)]
mod installed {
    use super::super::{installed, Probe};

    /// Debian's libssl.so.3 (OpenSSL 3.0): SSL_free begins `test rdi, rdi; je`, so its probe
    /// sits on the je, 3 bytes in; the state machine's entries (`mov esi, 1; jmp` and
    /// `xor esi, esi; jmp`) on their jumps; nothing of the plan is single-stepped.
    #[test]
    fn debian_libssl() {
        const LIBSSL: &str = "/usr/lib/x86_64-linux-gnu/libssl.so.3";
        let Some(found) = installed(LIBSSL) else {
            return;
        };
        let data = std::fs::read(LIBSSL).unwrap();
        let image = super::super::Image::parse(&data).unwrap();
        let [h] = found.as_slice() else { panic!("{found:?}") };
        assert!(!h.stepped, "{h:?}");
        for (probe, off) in &h.probes {
            let at = &data[*off as usize..];
            assert!(
                matches!(at[0], 0xe9 | 0xeb | 0x70..=0x7f) || (at[0] == 0x0f && (0x80..=0x8f).contains(&at[1])),
                "{probe:?} at {off:#x}: {:x?}",
                &at[..4]
            );
            if *probe == Probe::Free {
                assert_eq!(*off, image.sym_offset("SSL_free").unwrap() + 3);
            }
        }
    }
}
