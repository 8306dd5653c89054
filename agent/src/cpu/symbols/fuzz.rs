//! Property tests of the kernel symbol reader on what it is handed: /proc/kallsyms, any
//! text. (The ELF readers' are discovery/elf_fuzz.rs.)
use proptest::{collection::vec, prelude::*};

use super::{kallsyms::kernel_class, Kallsyms};
use crate::wire::tls::fuzz::{config, run_case};

/// Kernel symbol lines: real shapes with arbitrary parts, or any text.
fn kallsyms_text() -> impl Strategy<Value = String> {
    let line = (
        prop_oneof![Just("ffffffff81000000".to_string()), "[0-9a-f]{0,17}", any::<String>()],
        prop_oneof![Just("T"), Just("t"), Just("W"), Just("A"), Just("")],
        prop_oneof![
            Just("tcp_sendmsg".to_string()),
            Just("aesni_gcm_enc".to_string()),
            any::<String>()
        ],
        prop_oneof![
            Just(String::new()),
            Just("\t[tls]".to_string()),
            Just(" [bpf]".to_string()),
            any::<String>()
        ],
    )
        .prop_map(|(a, k, n, m)| format!("{a} {k} {n}{m}"));
    prop_oneof![vec(line, 0..32).prop_map(|l| l.join("\n")), any::<String>()]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn kernel_symbols(text in kallsyms_text(), keep_names: bool, addrs in vec(any::<u64>(), 0..8)) {
        let (k, peak) = {
            let t = text.clone();
            run_case(move || format!("{t:?}"), || Kallsyms::parse(&text, keep_names))
        };
        prop_assert!(peak <= 64 * text.len() + 4096, "{} bytes of heap for {} of text", peak, text.len());
        if let Some(k) = k {
            for a in addrs.into_iter().chain([0, u64::MAX]) {
                let _ = (k.class(a), k.prim(a), k.name(a));
            }
        }
        for line in text.lines() {
            let _ = kernel_class(line, Some(line));
        }
    }
}
