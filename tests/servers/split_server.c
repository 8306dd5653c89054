/*
 * A TLS server whose CPU split is known, for checking tlsprof's attribution: it runs
 * OpenSSL over memory BIOs and does all socket I/O itself, and measures its own thread CPU
 * time (CLOCK_THREAD_CPUTIME_ID) in handshake calls (SSL_do_handshake) and in the other
 * TLS library calls (SSL_new, SSL_read, SSL_write, SSL_shutdown, SSL_free: record crypto;
 * and BIO_read, BIO_write: the library's copies between its buffers and the server's).
 *
 * usage: split_server PORT CERT KEY BODY_BYTES MAX_SECONDS
 * Single-threaded, one connection at a time. Every HTTP request ("...\r\n\r\n") gets a
 * BODY_BYTES response with Content-Length (and the connection closes after one that says
 * "Connection: close"); "GET /stats" answers "handshake_ns lib_ns" of
 * what was measured before it, in plaintext over TLS, without counting itself.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static unsigned long long hs_ns, lib_ns;

static unsigned long long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* A TLS library call on a memory BIO, its CPU time counted in lib_ns: the copy is the
 * library's code (a CI run on a busy host spent 0.15 s of 0.75 in BIO_read's memcpy, which
 * tlsprof rightly counts as the library's). */
static int bio_read(BIO *b, char *buf, int len)
{
	unsigned long long t = now();
	int n = BIO_read(b, buf, len);
	lib_ns += now() - t;
	return n;
}

static void bio_write(BIO *b, const char *buf, int len)
{
	unsigned long long t = now();
	BIO_write(b, buf, len);
	lib_ns += now() - t;
}

/* Sends what OpenSSL wrote into the memory BIO. */
static int flush(int fd, BIO *wbio)
{
	char buf[65536];
	int n;
	while ((n = bio_read(wbio, buf, sizeof(buf))) > 0) {
		for (int off = 0; off < n;) {
			ssize_t w = write(fd, buf + off, n - off);
			if (w <= 0)
				return -1;
			off += w;
		}
	}
	return 0;
}

/* Reads from the socket into the memory BIO; 0 at EOF. */
static int feed(int fd, BIO *rbio)
{
	char buf[65536];
	ssize_t n = read(fd, buf, sizeof(buf));
	if (n > 0)
		bio_write(rbio, buf, n);
	return n > 0;
}

static void serve(SSL_CTX *ctx, int fd, const char *body, size_t body_len)
{
	unsigned long long t = now();
	SSL *ssl = SSL_new(ctx);
	BIO *rbio = BIO_new(BIO_s_mem()), *wbio = BIO_new(BIO_s_mem());
	SSL_set_bio(ssl, rbio, wbio);
	SSL_set_accept_state(ssl);
	lib_ns += now() - t;

	for (;;) {
		t = now();
		int r = SSL_do_handshake(ssl);
		hs_ns += now() - t;
		if (flush(fd, wbio) < 0)
			goto out;
		if (r == 1)
			break;
		if (SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ || !feed(fd, rbio))
			goto out;
	}

	char req[8192];
	size_t have = 0;
	for (;;) {
		t = now();
		int n = SSL_read(ssl, req + have, sizeof(req) - 1 - have);
		lib_ns += now() - t;
		if (n <= 0) {
			if (SSL_get_error(ssl, n) == SSL_ERROR_WANT_READ && feed(fd, rbio))
				continue;
			break;
		}
		have += n;
		req[have] = 0;
		char *end;
		while ((end = strstr(req, "\r\n\r\n"))) {
			char head[128];
			int stats = strncmp(req, "GET /stats", 10) == 0;
			*end = 0;
			int closing = strcasestr(req, "connection: close") != NULL;
			if (stats) {
				char msg[64];
				int m = snprintf(msg, sizeof(msg), "%llu %llu\n", hs_ns, lib_ns);
				int h = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", m);
				SSL_write(ssl, head, h);
				SSL_write(ssl, msg, m);
			} else {
				int h = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", body_len);
				t = now();
				SSL_write(ssl, head, h);
				SSL_write(ssl, body, body_len);
				lib_ns += now() - t;
			}
			if (flush(fd, wbio) < 0 || closing)
				goto out;
			size_t used = end + 4 - req;
			memmove(req, end + 4, have - used + 1);
			have -= used;
		}
		if (have >= sizeof(req) - 1)
			break;
	}
out:
	t = now();
	SSL_shutdown(ssl);
	lib_ns += now() - t;
	flush(fd, wbio);
	t = now();
	SSL_free(ssl);
	lib_ns += now() - t;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s PORT CERT KEY BODY_BYTES MAX_SECONDS\n", argv[0]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	alarm(atoi(argv[5]));
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, argv[2]) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, argv[3], SSL_FILETYPE_PEM) != 1) {
		fprintf(stderr, "cannot set up TLS\n");
		return 1;
	}
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_num_tickets(ctx, 0);
	size_t body_len = strtoul(argv[4], NULL, 10);
	char *body = malloc(body_len + 1);
	memset(body, 'x', body_len);

	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 128)) {
		perror("bind/listen");
		return 1;
	}
	for (;;) {
		int fd = accept(ls, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		/* each flight in one go, as servers do: without it, delayed ACKs hold every
		 * handshake for tens of milliseconds and the load takes minutes */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		serve(ctx, fd, body, body_len);
		close(fd);
	}
}
