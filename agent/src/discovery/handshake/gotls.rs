//! Go's crypto/tls, compiled into a Go executable (no shared library, no C symbols):
//! `crypto/tls.(*Conn).serverHandshake` and `clientHandshake` each run a whole handshake on
//! the connection's goroutine and return its error (nil: done; anything else: failed); so do
//! those of quic-go's copies of the package (qtls), for QUIC.
//! Found by their symbols (.symtab), or in a stripped binary (`-ldflags="-s -w"`) in the Go
//! runtime's own function table (`discovery/gopclntab.rs`). Go code takes no return probes (uretprobes rewrite the return
//! address on a stack Go may move), so each of the function's return instructions gets a
//! probe of its own, found by decoding its code. The probes read Go's register ABI (1.17+
//! on x86-64, 1.18+ on arm64; checked in the function's prologue, which loads the goroutine's
//! stack bound through the g register); older Go builds get the estimate. How the kernel
//! side follows a goroutine across threads: bpf/gotls.bpf.h.
use iced_x86::{Decoder, DecoderOptions, Mnemonic, Register};
use object::Architecture;

use super::{HandshakeHooks, HookMode, Image, Library, Probe, Role};

/// The handshake functions: crypto/tls's, and those of quic-go's copies of it (qtls: the
/// QUIC handshakes of quic-go before Go 1.21 gave crypto/tls a QUIC API, e.g. Debian 12's
/// Caddy), each package's server and client in turn: a QUIC server has both packages, TLS
/// over TCP in the one and QUIC in the other.
const FUNCTIONS: &[&str] = &[
    "crypto/tls.(*Conn).serverHandshake",
    "crypto/tls.(*Conn).clientHandshake",
    "github.com/quic-go/qtls-go1-20.(*Conn).serverHandshake",
    "github.com/quic-go/qtls-go1-20.(*Conn).clientHandshake",
    "github.com/quic-go/qtls-go1-19.(*Conn).serverHandshake",
    "github.com/quic-go/qtls-go1-19.(*Conn).clientHandshake",
    "github.com/marten-seemann/qtls-go1-19.(*Conn).serverHandshake",
    "github.com/marten-seemann/qtls-go1-19.(*Conn).clientHandshake",
    "github.com/marten-seemann/qtls-go1-18.(*Conn).serverHandshake",
    "github.com/marten-seemann/qtls-go1-18.(*Conn).clientHandshake",
    "github.com/marten-seemann/qtls-go1-17.(*Conn).serverHandshake",
    "github.com/marten-seemann/qtls-go1-17.(*Conn).clientHandshake",
];

pub const LIBRARY: Library = Library {
    name: "crypto/tls",
    files: &[],
    symbols: FUNCTIONS,
    find,
};

fn find(image: &Image, _: HookMode) -> Option<HandshakeHooks> {
    let mut probes = Vec::new();
    let roles = FUNCTIONS
        .chunks(2)
        .flat_map(|f| [(f[0], Role::Server), (f[1], Role::Client)]);
    for (sym, role) in roles {
        let Some((addr, code)) = image.sym_code(sym) else {
            continue;
        };
        let Some(rets) = returns(image.architecture(), addr, code) else {
            continue;
        };
        let (Some(entry), Some(rets)) = (
            image.file_offset(addr),
            rets.iter().map(|r| image.file_offset(*r)).collect::<Option<Vec<_>>>(),
        ) else {
            continue;
        };
        probes.push((Probe::GoCall(role), entry));
        probes.extend(rets.into_iter().map(|r| (Probe::GoReturn, r)));
    }
    (!probes.is_empty()).then_some(HandshakeHooks {
        library: LIBRARY.name,
        source: if image.from_go_pclntab { "go-pclntab" } else { "symbols" },
        probes,
        stepped: true,
    })
}

/// The addresses of a Go function's return instructions, None when it does not follow the
/// register ABI (or has none, or its code cannot be read whole).
pub fn returns(arch: Architecture, addr: u64, code: &[u8]) -> Option<Vec<u64>> {
    let rets = match arch {
        Architecture::X86_64 => {
            let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
            let mut rets = Vec::new();
            let mut regabi = false;
            for (i, ins) in d.iter().enumerate() {
                if ins.is_invalid() {
                    return None;
                }
                // the stack check in the first instructions: CMPQ SP|R12, 16(R14)
                regabi |= i < 4 && ins.memory_base() == Register::R14 && ins.memory_displacement64() == 16;
                if ins.mnemonic() == Mnemonic::Ret {
                    rets.push(ins.ip());
                }
            }
            regabi.then_some(rets)?
        }
        Architecture::Aarch64 => {
            const RET: u32 = 0xd65f_03c0; // RET (x30)
            const LOAD_STACK_BOUND: u32 = 0xf940_0b90; // MOVD 16(g), R16: ldr x16, [x28, #16]
            let words: Vec<u32> = code
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            if !words.iter().take(4).any(|w| *w == LOAD_STACK_BOUND) {
                return None;
            }
            (0u64..)
                .zip(&words)
                .filter(|(_, w)| **w == RET)
                .map(|(i, _)| addr + 4 * i)
                .collect()
        }
        _ => return None,
    };
    (!rets.is_empty()).then_some(rets)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `func f() error { return nil }` with a stack check, as Go 1.17+ compiles it on
    /// x86-64: its one RET found; the same code reading g from TLS (Go 1.16) refused.
    #[test]
    fn returns_x86_64() {
        let code = [
            0x49, 0x3b, 0x66, 0x10, // cmp rsp, [r14+0x10]
            0x76, 0x06, // jbe +6
            0x31, 0xc0, // xor eax, eax
            0x31, 0xdb, // xor ebx, ebx
            0xc3, // ret
            0x90, // nop
            0xe8, 0, 0, 0, 0, // call runtime.morestack_noctxt
            0xeb, 0xec, // jmp to the entry
        ];
        assert_eq!(returns(Architecture::X86_64, 0x1000, &code), Some(vec![0x100a]));
        let old = [
            0x64, 0x48, 0x8b, 0x0c, 0x25, 0xf8, 0xff, 0xff, 0xff, // mov rcx, fs:[-8]
            0x48, 0x3b, 0x61, 0x10, // cmp rsp, [rcx+0x10]
            0xc3,
        ];
        assert_eq!(returns(Architecture::X86_64, 0x1000, &old), None);
        assert_eq!(
            returns(Architecture::X86_64, 0x1000, &[0x49, 0x3b, 0x66, 0x10, 0x90]),
            None
        );
    }

    #[test]
    fn returns_aarch64() {
        let words: [u32; 4] = [0xf940_0b90, 0xeb10_03ff, 0xd65f_03c0, 0xd65f_03c0];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(
            returns(Architecture::Aarch64, 0x2000, &code),
            Some(vec![0x2008, 0x200c])
        );
        assert_eq!(returns(Architecture::Aarch64, 0x2000, &code[4..]), None);
    }
}
