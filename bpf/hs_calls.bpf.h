/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Handshake probes, the calls (handshake.bpf.h holds their state and bodies): one entry
 * probe per role a library's handshake function has, one return probe per way its return
 * value reads (agent/src/discovery/handshake/ says which library uses which).
 */
#ifndef TLSPROF_HS_CALLS_BPF_H
#define TLSPROF_HS_CALLS_BPF_H

SEC("uprobe")
int BPF_KPROBE(hs_enter_server, void *ssl)
{
	return hs_enter(ssl, HS_ROLE_SERVER);
}

SEC("uprobe")
int BPF_KPROBE(hs_enter_client, void *ssl)
{
	return hs_enter(ssl, HS_ROLE_CLIENT);
}

/* SSL_do_handshake: the role comes from SSL_set_accept_state/SSL_set_connect_state. */
SEC("uprobe")
int BPF_KPROBE(hs_enter_any, void *ssl)
{
	return hs_enter(ssl, HS_ROLE_UNKNOWN);
}

/* OpenSSL's SSL_do_handshake/SSL_accept/ossl_statem_*: 1 done, 0 "not successful but shut
 * down controlled", < 0 WANT_READ/WANT_WRITE or an error (SSL_free tells which). */
SEC("uretprobe")
int BPF_KRETPROBE(hs_exit, int ret)
{
	return hs_return(ret == 1 ? HS_CALL_DONE : ret == 0 ? HS_CALL_FAILED : HS_CALL_AGAIN);
}

/* 0 done, anything else call again or an error the free probe tells apart:
 * gnutls_handshake (GNUTLS_E_AGAIN, GNUTLS_E_INTERRUPTED, non-fatal alerts),
 * mbedtls_ssl_handshake (MBEDTLS_ERR_SSL_WANT_READ/WANT_WRITE/ASYNC_IN_PROGRESS…). */
SEC("uretprobe")
int BPF_KRETPROBE(hs_exit_zero_ok, int ret)
{
	return hs_return(ret == 0 ? HS_CALL_DONE : HS_CALL_AGAIN);
}

/* 1 (WOLFSSL_SUCCESS) done, WOLFSSL_FATAL_ERROR (-1) both for "would block" and for a
 * failure: wolfSSL_accept/wolfSSL_connect/wolfSSL_negotiate/wolfSSL_SSL_do_handshake. */
SEC("uretprobe")
int BPF_KRETPROBE(hs_exit_one_ok, int ret)
{
	return hs_return(ret == 1 ? HS_CALL_DONE : HS_CALL_AGAIN);
}

#endif
