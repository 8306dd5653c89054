/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Handshake probes, the connection objects (handshake.bpf.h holds their state): the role
 * an object is given before its handshake, its reset for a new connection, and its free,
 * where a handshake still unfinished has failed.
 */
#ifndef TLSPROF_HS_OBJECTS_BPF_H
#define TLSPROF_HS_OBJECTS_BPF_H

SEC("uprobe")
int BPF_KPROBE(ssl_set_accept_state, void *ssl)
{
	return hs_set_role(ssl, HS_ROLE_SERVER);
}

SEC("uprobe")
int BPF_KPROBE(ssl_set_connect_state, void *ssl)
{
	return hs_set_role(ssl, HS_ROLE_CLIENT);
}

/* A connection object made ready for a new connection without a role of its own
 * (mbedtls_ssl_session_reset, wolfSSL_clear): its next handshake starts afresh. */
SEC("uprobe")
int BPF_KPROBE(ssl_reset, void *ssl)
{
	return hs_set_role(ssl, HS_ROLE_UNKNOWN);
}

/* The connection object is freed (SSL_free, gnutls_deinit, mbedtls_ssl_free, wolfSSL_free):
 * a handshake still unfinished there has failed, unless the probes were away since its
 * last call, or are being removed (the overhead budget's off part): its end, ok or failed,
 * may have gone unseen. */
SEC("uprobe")
int BPF_KPROBE(ssl_free, void *ssl)
{
	struct hs_key key = { .ssl = (__u64)ssl, .tgid = bpf_get_current_pid_tgid() >> 32 };
	HS_HIT(key.tgid, false);
	struct hs_state *st = bpf_map_lookup_elem(&hs_conns, &key);

	if (!st)
		return 0;
	if (!st->done && st->calls > 0 && !hs_end_unseen(key.tgid, st->last_ns))
		hs_emit(key.tgid, st, HS_RESULT_FAILED, 0);
	bpf_map_delete_elem(&hs_conns, &key);
	return 0;
}

#endif
