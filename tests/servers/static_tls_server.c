/*
 * A minimal TLS server linked statically against OpenSSL (libssl.a/libcrypto.a), for
 * tlsprof's tests: OpenSSL inside an executable that exports nothing, found through its
 * .symtab — and, once stripped, not found at all.
 * usage: static_tls_server PORT CERT KEY MAX_SECONDS
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s PORT CERT KEY MAX_SECONDS\n", argv[0]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, argv[2]) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, argv[3], SSL_FILETYPE_PEM) != 1) {
		fprintf(stderr, "cannot set up TLS\n");
		return 1;
	}
	int srv = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(srv, (struct sockaddr *)&addr, sizeof(addr)) || listen(srv, 64)) {
		perror("bind/listen");
		return 1;
	}
	struct timeval tv = { .tv_sec = 1 };
	setsockopt(srv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	time_t end = time(NULL) + atoi(argv[4]);
	static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nstatic\n";
	while (time(NULL) < end) {
		int c = accept(srv, NULL, NULL);
		if (c < 0)
			continue;
		struct timeval ctv = { .tv_sec = 5 };
		setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &ctv, sizeof(ctv));
		SSL *ssl = SSL_new(ctx);
		SSL_set_fd(ssl, c);
		if (SSL_accept(ssl) == 1) {
			char buf[4096];
			if (SSL_read(ssl, buf, sizeof(buf)) > 0)
				SSL_write(ssl, resp, sizeof(resp) - 1);
			SSL_shutdown(ssl);
		}
		SSL_free(ssl);
		close(c);
	}
	SSL_CTX_free(ctx);
	return 0;
}
