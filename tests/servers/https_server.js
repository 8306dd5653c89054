// A Node.js HTTPS server for tlsprof's tests: node's TLS drives the handshake from
// SSL_read over a memory BIO, with OpenSSL linked into the node executable.
// usage: [TLS_CIPHERS=...] [TLS_DHPARAM=FILE] node https_server.js PORT CERT KEY [keepalive | bulk:BYTES]
// Without "keepalive", every response closes its connection; "bulk:BYTES" keeps connections
// alive and answers every request with BYTES bytes.
const https = require('https');
const fs = require('fs');
const [port, cert, key, mode] = process.argv.slice(2);
const bulk = mode && mode.startsWith('bulk:') ? Buffer.alloc(Number(mode.slice(5)), 'x') : null;
// TLS_CIPHERS and TLS_DHPARAM (a dhparam PEM file): the server's TLS 1.2 suites and DHE prime
const options = { cert: fs.readFileSync(cert), key: fs.readFileSync(key) };
if (process.env.TLS_CIPHERS) options.ciphers = process.env.TLS_CIPHERS;
if (process.env.TLS_DHPARAM) options.dhparam = fs.readFileSync(process.env.TLS_DHPARAM);
const server = https.createServer(options, (req, res) => {
  if (bulk) return res.end(bulk);
  if (mode !== 'keepalive') res.setHeader('Connection', 'close');
  res.end('hello from node\n');
});
server.listen(Number(port), '127.0.0.1', () => console.log(`listening on ${port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
