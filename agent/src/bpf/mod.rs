//! The kernel side as the agent sees it: the embedded object (bpf/tlsprof.bpf.c), its
//! loader, and one module per shared header with the #[repr(C)] mirror of its types and
//! constants and the decoding of its events.
pub mod calib;
pub mod conn;
pub mod cpu;
pub mod handshake;
pub mod hello_cgroups;
pub mod hooks;
pub mod loader;
pub mod proc;
mod readside;
mod served;
mod shared_uprobes;
pub mod sizes;
pub mod stats;
pub mod uprobes;
pub mod wire;

/// The compiled object of bpf/tlsprof.bpf.c, 8-byte aligned as aya wants it.
pub const OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tlsprof.bpf.o"));

/// Reads a #[repr(C)] plain-old-data value from a ring buffer record.
pub fn read_record<T: Copy>(bytes: &[u8]) -> Option<T> {
    // SAFETY: T is a #[repr(C)] struct of integers (every bit pattern is valid) and the
    // length is checked; read_unaligned copes with any alignment.
    (bytes.len() >= std::mem::size_of::<T>()).then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

#[cfg(test)]
mod layout_tests {
    use std::collections::BTreeMap;

    use super::{conn::*, cpu::*, handshake::*, proc::*, stats::*, wire::*};

    const LAYOUT: &str = include_str!(concat!(env!("OUT_DIR"), "/layout.txt"));

    /// Field offsets and sizes as the C compiler lays them out (bpf/layout.c, run by build.rs).
    fn c_layout() -> BTreeMap<String, (usize, usize)> {
        LAYOUT
            .lines()
            .filter(|l| !l.starts_with("const "))
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
                estimate,
                conn_id,
                conn_start,
                end_ns
            }
        );
        rust_layout!(
            rust,
            hs_hits {
                entries,
                returns,
                prog_ns
            }
        );
        rust_layout!(
            rust,
            req_ctl {
                sends_captured,
                reads,
                reads_link
            }
        );
        rust_layout!(rust, conn_port { netns, port });
        rust_layout!(
            rust,
            conn_port_stats {
                flags,
                slot,
                accepted,
                plain
            }
        );
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
                est,
                go,
                conn_id,
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
                conn_id,
                conn_start
            }
        );
        rust_layout!(
            rust,
            conn_life {
                id,
                start_ns,
                netns,
                port,
                first_fin,
                reset,
                tls,
                late
            }
        );
        rust_layout!(
            rust,
            req_conn {
                requests,
                slot,
                dir,
                rx_mark,
                rx_tail
            }
        );
        rust_layout!(
            rust,
            wire_conn {
                seq,
                left,
                tgid,
                copied,
                state,
                flags,
                hdr,
                hdr_have,
                sealed,
                end,
                why,
                fin_len,
                pre,
                proto,
                rx_first,
                rx_flight
            }
        );
        rust_layout!(rust, quic_head { ts, hs_len, dgram, pad });
        rust_layout!(
            rust,
            hello_conn {
                start,
                seen,
                rec_left,
                msg_len,
                body,
                state,
                hdr_have,
                msg_have,
                records,
                hdr,
                msg
            }
        );
        rust_layout!(rust, conn_state { life, req, wire, hello });
        rust_layout!(
            rust,
            conn_event {
                conn_id,
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
        rust_layout!(
            rust,
            proc_notice {
                kind,
                pid,
                parent,
                comm
            }
        );
        rust_layout!(rust, proc_comm { name });
        rust_layout!(rust, wire_end { conn_start, proto });
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
        rust_layout!(
            rust,
            proc_traced {
                oncpu_ns,
                exited,
                estimate,
                probed_ns
            }
        );
        rust_layout!(
            rust,
            wire_event {
                conn_id,
                tgid,
                netns,
                port,
                kind,
                flags,
                len,
                offset,
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

    /// The constants the agent mirrors, as C has them (bpf/layout.c prints `const NAME VALUE`).
    #[test]
    fn rust_constants_match_c_headers() {
        let c: BTreeMap<&str, i64> = LAYOUT
            .lines()
            .filter_map(|l| {
                let mut f = l.strip_prefix("const ")?.split_whitespace();
                Some((f.next()?, f.next()?.parse().ok()?))
            })
            .collect();
        macro_rules! consts {
            ($($c:ident),* $(,)?) => { BTreeMap::from([$((stringify!($c), $c as i64)),*]) };
        }
        let rust: BTreeMap<&str, i64> = consts!(
            STAT_HS_EVENTS_LOST,
            STAT_HS_THREAD_MAP_FULL,
            STAT_HS_SSL_MAP_FULL,
            STAT_HS_UNMATCHED_RETURN,
            STAT_CONN_EVENTS_LOST,
            STAT_CONN_STORAGE_FULL,
            STAT_SAMPLES_LOST,
            STAT_WIRE_EVENTS_LOST,
            STAT_HS_HITS_FULL,
            STAT_HS_LAST_FULL,
            STAT_PROC_EVENTS_FULL,
            STAT_REQ_RECV_CALLS_FULL,
            STAT_GO_MAP_FULL,
            STAT_HELLO_CALLS_FULL,
            STAT_FAILURES,
            STAT_MAX,
            HS_ROLE_SERVER,
            HS_ROLE_CLIENT,
            HS_RESULT_OK,
            HS_RESULT_FAILED,
            CONN_PORT_LISTEN,
            CONN_PORT_TLS,
            CONN_PORTS_ENTRIES,
            CONN_EXCHANGE_SLOTS,
            CONN_BY_SERVER,
            CONN_BY_CLIENT,
            CONN_BY_RESET,
            CONN_TW_NO,
            CONN_TW_YES,
            CONN_TW_MAYBE,
            CPU_KSTACK_MAX,
            CPU_USTACK_MAX,
            CPU_SAMPLE_HANDSHAKE,
            CPU_SAMPLE_USER,
            WIRE_EV_DATA,
            WIRE_EV_RECORD,
            WIRE_EV_END,
            WIRE_EV_HELLO,
            WIRE_EV_QUIC,
            CONN_NUM_TCP,
            CONN_NUM_UDP,
            QUIC_F_CLIENT,
            QUIC_F_DONE,
            QUIC_F_RETRY,
            QUIC_HEAD,
            HELLO_LAST,
            HELLO_WHY_MASK,
            HELLO_UNREADABLE,
            HELLO_CUT,
            HELLO_GAP,
            HELLO_BAD,
            HELLO_MAX,
            WIRE_END_FINISHED,
            WIRE_END_ALERT,
            WIRE_END_CLOSED,
            WIRE_END_CAP,
            WIRE_END_BAD,
            WIRE_END_UNSUPPORTED,
            WIRE_END_CLIENT_ALERT,
            WIRE_CHUNK,
            WIRE_END_LEN,
            WIRE_PROTO_NONE,
            WIRE_PROTO_OTHER,
            WIRE_PROTO_SMTP,
            WIRE_PROTO_FTP,
            WIRE_PROTO_IMAP,
            WIRE_PROTO_POP3,
            WIRE_PROTO_LDAP,
            WIRE_PROTO_XMPP,
            WIRE_PROTO_NNTP,
            WIRE_PROTO_POSTGRESQL,
            WIRE_PROTO_MYSQL,
            WIRE_EVENT_HEADER,
            PROC_TRACED_ENTRIES,
            PROC_EV_FORK,
            PROC_EV_EXIT,
            PROC_EV_EXEC,
            PROC_EV_FOUND,
            PROC_EV_LISTEN,
            PROC_COMMS,
        );
        assert!(!c.is_empty(), "layout.txt has no constants");
        assert_eq!(rust, c, "Rust constants (left) differ from the C headers (right)");
        // every counter has its label, in index order
        for (i, (idx, _)) in STATS.iter().enumerate() {
            assert_eq!(*idx as usize, i);
        }
    }
}
