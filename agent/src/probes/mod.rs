//! One module per kernel-side probe: the #[repr(C)] mirror of its shared header
//! and the embedded object.
pub mod conn;
pub mod cpu;
pub mod handshake;
pub mod proc;
pub mod wire;

/// The compiled object of `bpf/<name>.bpf.c`, 8-byte aligned as aya wants it.
macro_rules! bpf_object {
    ($name:literal) => {
        aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/", $name, ".bpf.o"))
    };
}
pub(crate) use bpf_object;

/// Reads a #[repr(C)] plain-old-data value from a ring buffer record.
pub fn read_record<T: Copy>(bytes: &[u8]) -> Option<T> {
    // SAFETY: T is a #[repr(C)] struct of integers (every bit pattern is valid) and the
    // length is checked; read_unaligned copes with any alignment.
    (bytes.len() >= std::mem::size_of::<T>()).then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

#[cfg(test)]
mod layout_tests {
    use std::collections::BTreeMap;

    use super::{conn::*, cpu::*, handshake::*, proc::*, wire::*};

    /// Field offsets and sizes as the C compiler lays them out (bpf/layout.c, run by build.rs).
    fn c_layout() -> BTreeMap<String, (usize, usize)> {
        include_str!(concat!(env!("OUT_DIR"), "/layout.txt"))
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                match f.as_slice() {
                    [name, "size", n] => (name.to_string(), (0, n.parse().unwrap())),
                    [name, off, size] => (name.to_string(), (off.parse().unwrap(), size.parse().unwrap())),
                    _ => panic!("bad layout line {l:?}"),
                }
            })
            .collect()
    }

    macro_rules! rust_layout {
        ($map:ident, $t:ident { $($f:ident),* }) => {
            $map.insert(stringify!($t).to_string(), (0, std::mem::size_of::<$t>()));
            $(
                $map.insert(
                    format!("{}.{}", stringify!($t), stringify!($f)),
                    (std::mem::offset_of!($t, $f), {
                        let v: $t = unsafe { std::mem::zeroed() };
                        std::mem::size_of_val(&v.$f)
                    }),
                );
            )*
        };
    }

    #[test]
    fn rust_mirrors_match_c_headers() {
        let mut rust = BTreeMap::new();
        rust_layout!(
            rust,
            hs_event {
                duration_ns,
                cpu_ns,
                tgid,
                calls,
                role,
                result,
                conn_sk,
                conn_start
            }
        );
        rust_layout!(rust, hs_ctl { wire_counts });
        rust_layout!(rust, hs_hits { entries, returns });
        rust_layout!(rust, hs_port { netns, port });
        rust_layout!(rust, hs_port_stats { flags, accepted });
        rust_layout!(
            rust,
            hs_thread {
                ssl,
                enter_ns,
                oncpu_ns,
                cpu_ns,
                tgid,
                depth,
                role,
                io,
                conn_sk,
                conn_start
            }
        );
        rust_layout!(rust, hs_key { ssl, tgid });
        rust_layout!(
            rust,
            hs_state {
                first_ns,
                last_ns,
                cpu_ns,
                calls,
                role,
                done,
                conn_sk,
                conn_start
            }
        );
        rust_layout!(
            rust,
            conn_state {
                start_ns,
                netns,
                port,
                first_fin,
                reset,
                requests,
                tls,
                dir,
                wire_seq,
                wire_left,
                wire_tgid,
                wire_copied,
                wire,
                wire_flags,
                wire_hdr,
                wire_hdr_have,
                wire_sealed,
                wire_end,
                wire_why,
                fin_len,
                rx_first,
                rx_flight,
                rx_mark,
                rx_tail
            }
        );
        rust_layout!(
            rust,
            conn_event {
                duration_ns,
                saddr,
                daddr,
                netns,
                requests,
                port,
                dport,
                family,
                closed_by,
                time_wait,
                tls
            }
        );
        rust_layout!(rust, proc_notice { kind, pid, parent });
        rust_layout!(
            rust,
            cpu_sample {
                tgid,
                tid,
                flags,
                kdepth,
                udepth,
                sp_word,
                kstack,
                ustack
            }
        );
        rust_layout!(rust, cpu_proc { oncpu_ns });
        rust_layout!(
            rust,
            wire_event {
                sk,
                conn_start,
                tgid,
                netns,
                port,
                kind,
                flags,
                len,
                data
            }
        );
        let c = c_layout();
        assert!(!c.is_empty(), "layout.txt is empty");
        for (name, layout) in &c {
            assert_eq!(
                rust.get(name),
                Some(layout),
                "{name}: C says (offset, size) = {layout:?}, Rust {:?}",
                rust.get(name)
            );
        }
        assert_eq!(
            rust.len(),
            c.len(),
            "Rust mirrors describe fields layout.c does not: {:?}",
            rust.keys().filter(|k| !c.contains_key(*k)).collect::<Vec<_>>()
        );
    }
}
