// A TLS server on Go's crypto/tls (no OpenSSL, no SSL_* symbols), for tlsprof's tests of
// servers whose TLS stack it cannot probe: every HTTP/1.1 request gets a BODY_BYTES
// response on a keep-alive connection, closed after a "Connection: close" request.
// usage: gotls PORT CERT KEY BODY_BYTES [resume]
// With "resume", the server issues session tickets (Go's default); without, it does not.
// gotls reject PORT N: a client instead, N TLS 1.3 connections that check the server's
// certificate against the system's CAs and reject it (Go sends its alert encrypted, under the
// handshake keys); prints how many were rejected.
package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

func serve(c net.Conn, body []byte) {
	defer c.Close()
	r := bufio.NewReader(c)
	head := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body)))
	for {
		// one request: lines up to the empty one
		closing := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.ToLower(strings.TrimRight(line, "\r\n"))
			if line == "" {
				break
			}
			closing = closing || line == "connection: close"
		}
		if _, err := c.Write(append(append([]byte{}, head...), body...)); err != nil || closing {
			return
		}
	}
}

// reject dials port n times as a TLS 1.3 client that rejects the server's certificate.
func reject(port string, n int) {
	rejected := 0
	for i := 0; i < n; i++ {
		raw, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 10*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		c := tls.Client(raw, &tls.Config{ServerName: "localhost", MinVersion: tls.VersionTLS13})
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := c.Handshake(); err != nil {
			rejected++
		}
		c.Close()
	}
	fmt.Println(rejected)
}

func main() {
	if len(os.Args) == 4 && os.Args[1] == "reject" {
		n, _ := strconv.Atoi(os.Args[3])
		reject(os.Args[2], n)
		return
	}
	if len(os.Args) != 5 && len(os.Args) != 6 {
		log.Fatal("usage: gotls PORT CERT KEY BODY_BYTES [resume]")
	}
	resume := len(os.Args) == 6 && os.Args[5] == "resume"
	cert, err := tls.LoadX509KeyPair(os.Args[2], os.Args[3])
	if err != nil {
		log.Fatal(err)
	}
	n, _ := strconv.Atoi(os.Args[4])
	body := make([]byte, n)
	for i := range body {
		body[i] = 'x'
	}
	l, err := tls.Listen("tcp", "127.0.0.1:"+os.Args[1], &tls.Config{Certificates: []tls.Certificate{cert}, SessionTicketsDisabled: !resume})
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, body)
	}
}
