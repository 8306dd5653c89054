/*
 * Prints the size and field offsets of every type shared with the agent, as the
 * C compiler lays them out, and the value of every constant the agent mirrors. build.rs
 * compiles and runs it; the agent's layout test compares the result with its #[repr(C)]
 * mirrors and its constants.
 */
#include <stddef.h>
#include <stdio.h>
#include <linux/types.h>
#include "stats.h"
#include "handshake.h"
#include "requests.h"
#include "conn.h"
#include "proc.h"
#include "cpu.h"
#include "wire.h"
#include "hello.h"
#include "quic.h"

#define S(T) printf(#T " size %zu\n", sizeof(struct T))
#define F(T, f) printf(#T "." #f " %zu %zu\n", offsetof(struct T, f), sizeof(((struct T *)0)->f))
#define C(name) printf("const " #name " %lld\n", (long long)(name))

int main(void)
{
	S(hs_event);
	F(hs_event, duration_ns);
	F(hs_event, cpu_ns);
	F(hs_event, tgid);
	F(hs_event, calls);
	F(hs_event, role);
	F(hs_event, result);
	F(hs_event, conn_id);
	F(hs_event, conn_start);
	F(hs_event, estimate);
	F(hs_event, end_ns);
	S(hs_hits);
	F(hs_hits, entries);
	F(hs_hits, returns);
	F(hs_hits, prog_ns);
	S(hs_thread);
	F(hs_thread, ssl);
	F(hs_thread, enter_ns);
	F(hs_thread, oncpu_ns);
	F(hs_thread, cpu_ns);
	F(hs_thread, tgid);
	F(hs_thread, depth);
	F(hs_thread, role);
	F(hs_thread, io);
	F(hs_thread, est);
	F(hs_thread, go);
	F(hs_thread, conn_id);
	F(hs_thread, conn_start);
	S(hs_key);
	F(hs_key, ssl);
	F(hs_key, tgid);
	S(hs_state);
	F(hs_state, first_ns);
	F(hs_state, last_ns);
	F(hs_state, cpu_ns);
	F(hs_state, calls);
	F(hs_state, role);
	F(hs_state, done);
	F(hs_state, conn_id);
	F(hs_state, conn_start);
	S(req_ctl);
	F(req_ctl, sends_captured);
	F(req_ctl, reads);
	F(req_ctl, reads_link);
	S(conn_port);
	F(conn_port, netns);
	F(conn_port, port);
	S(conn_port_stats);
	F(conn_port_stats, flags);
	F(conn_port_stats, slot);
	F(conn_port_stats, accepted);
	F(conn_port_stats, plain);
	S(conn_life);
	F(conn_life, id);
	F(conn_life, start_ns);
	F(conn_life, netns);
	F(conn_life, port);
	F(conn_life, first_fin);
	F(conn_life, reset);
	F(conn_life, tls);
	F(conn_life, late);
	S(req_conn);
	F(req_conn, requests);
	F(req_conn, slot);
	F(req_conn, dir);
	F(req_conn, rx_mark);
	F(req_conn, rx_tail);
	S(wire_conn);
	F(wire_conn, seq);
	F(wire_conn, left);
	F(wire_conn, tgid);
	F(wire_conn, copied);
	F(wire_conn, state);
	F(wire_conn, flags);
	F(wire_conn, hdr);
	F(wire_conn, hdr_have);
	F(wire_conn, sealed);
	F(wire_conn, end);
	F(wire_conn, why);
	F(wire_conn, fin_len);
	F(wire_conn, pre);
	F(wire_conn, proto);
	S(wire_end);
	F(wire_end, conn_start);
	F(wire_end, proto);
	F(wire_conn, rx_first);
	F(wire_conn, rx_flight);
	S(conn_state);
	F(conn_state, life);
	F(conn_state, req);
	F(conn_state, wire);
	F(conn_state, hello);
	S(quic_head);
	F(quic_head, ts);
	F(quic_head, hs_len);
	F(quic_head, dgram);
	F(quic_head, pad);
	C(WIRE_EV_QUIC);
	C(CONN_NUM_TCP);
	C(CONN_NUM_UDP);
	C(QUIC_F_CLIENT);
	C(QUIC_F_DONE);
	C(QUIC_F_RETRY);
	C(QUIC_HEAD);
	S(hello_conn);
	F(hello_conn, start);
	F(hello_conn, seen);
	F(hello_conn, rec_left);
	F(hello_conn, msg_len);
	F(hello_conn, body);
	F(hello_conn, state);
	F(hello_conn, hdr_have);
	F(hello_conn, msg_have);
	F(hello_conn, records);
	F(hello_conn, hdr);
	F(hello_conn, msg);
	S(conn_event);
	F(conn_event, conn_id);
	F(conn_event, duration_ns);
	F(conn_event, saddr);
	F(conn_event, daddr);
	F(conn_event, netns);
	F(conn_event, requests);
	F(conn_event, port);
	F(conn_event, dport);
	F(conn_event, family);
	F(conn_event, closed_by);
	F(conn_event, time_wait);
	F(conn_event, tls);
	S(proc_notice);
	F(proc_notice, kind);
	F(proc_notice, pid);
	F(proc_notice, parent);
	F(proc_notice, comm);
	S(cpu_sample);
	F(cpu_sample, tgid);
	F(cpu_sample, tid);
	F(cpu_sample, flags);
	F(cpu_sample, kdepth);
	F(cpu_sample, udepth);
	F(cpu_sample, sp_word);
	F(cpu_sample, kstack);
	F(cpu_sample, ustack);
	S(proc_traced);
	F(proc_traced, oncpu_ns);
	F(proc_traced, exited);
	F(proc_traced, estimate);
	F(proc_traced, probed_ns);
	S(wire_event);
	F(wire_event, conn_id);
	F(wire_event, tgid);
	F(wire_event, netns);
	F(wire_event, port);
	F(wire_event, kind);
	F(wire_event, flags);
	F(wire_event, len);
	F(wire_event, offset);
	F(wire_event, data);

	/* constants the agent mirrors */
	C(STAT_HS_EVENTS_LOST);
	C(STAT_HS_THREAD_MAP_FULL);
	C(STAT_HS_SSL_MAP_FULL);
	C(STAT_HS_UNMATCHED_RETURN);
	C(STAT_CONN_EVENTS_LOST);
	C(STAT_CONN_STORAGE_FULL);
	C(STAT_SAMPLES_LOST);
	C(STAT_WIRE_EVENTS_LOST);
	C(STAT_HS_HITS_FULL);
	C(STAT_HS_LAST_FULL);
	C(STAT_PROC_EVENTS_FULL);
	C(STAT_REQ_RECV_CALLS_FULL);
	C(STAT_GO_MAP_FULL);
	C(STAT_HELLO_CALLS_FULL);
	C(STAT_FAILURES);
	C(STAT_MAX);
	C(HS_ROLE_SERVER);
	C(HS_ROLE_CLIENT);
	C(HS_RESULT_OK);
	C(HS_RESULT_FAILED);
	C(CONN_PORT_LISTEN);
	C(CONN_PORT_TLS);
	C(CONN_PORTS_ENTRIES);
	C(CONN_EXCHANGE_SLOTS);
	C(CONN_BY_SERVER);
	C(CONN_BY_CLIENT);
	C(CONN_BY_RESET);
	C(CONN_TW_NO);
	C(CONN_TW_YES);
	C(CONN_TW_MAYBE);
	C(CPU_KSTACK_MAX);
	C(CPU_USTACK_MAX);
	C(CPU_SAMPLE_HANDSHAKE);
	C(CPU_SAMPLE_USER);
	C(WIRE_EV_DATA);
	C(WIRE_EV_RECORD);
	C(WIRE_EV_END);
	C(WIRE_EV_HELLO);
	C(HELLO_LAST);
	C(HELLO_WHY_MASK);
	C(HELLO_UNREADABLE);
	C(HELLO_CUT);
	C(HELLO_GAP);
	C(HELLO_BAD);
	C(HELLO_MAX);
	C(WIRE_END_FINISHED);
	C(WIRE_END_ALERT);
	C(WIRE_END_CLOSED);
	C(WIRE_END_CAP);
	C(WIRE_END_BAD);
	C(WIRE_END_UNSUPPORTED);
	C(WIRE_END_CLIENT_ALERT);
	C(WIRE_CHUNK);
	C(WIRE_END_LEN);
	C(WIRE_PROTO_NONE);
	C(WIRE_PROTO_OTHER);
	C(WIRE_PROTO_SMTP);
	C(WIRE_PROTO_FTP);
	C(WIRE_PROTO_IMAP);
	C(WIRE_PROTO_POP3);
	C(WIRE_PROTO_LDAP);
	C(WIRE_PROTO_XMPP);
	C(WIRE_PROTO_NNTP);
	C(WIRE_PROTO_POSTGRESQL);
	C(WIRE_PROTO_MYSQL);
	C(WIRE_EVENT_HEADER);
	C(PROC_TRACED_ENTRIES);
	C(PROC_EV_FORK);
	C(PROC_EV_EXIT);
	C(PROC_EV_EXEC);
	C(PROC_EV_FOUND);
	C(PROC_EV_LISTEN);
	C(PROC_COMMS);
	S(proc_comm);
	F(proc_comm, name);
	return 0;
}
