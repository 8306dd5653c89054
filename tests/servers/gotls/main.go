// A TLS server on Go's crypto/tls (no OpenSSL, no SSL_* symbols), for tlsprof's tests of
// servers whose TLS stack it cannot probe: every HTTP/1.1 request gets a BODY_BYTES
// response on a keep-alive connection, closed after a "Connection: close" request.
// usage: gotls PORT CERT KEY BODY_BYTES [resume]
// With "resume", the server issues session tickets (Go's default); without, it does not.
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

func main() {
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
