// A Node.js HTTPS server for tlsprof's tests: node's TLS drives the handshake from
// SSL_read over a memory BIO, with OpenSSL linked into the node executable.
// usage: node https_server.js PORT CERT KEY [keepalive | bulk:BYTES]
// Without "keepalive", every response closes its connection; "bulk:BYTES" keeps connections
// alive and answers every request with BYTES bytes.
const https = require('https');
const fs = require('fs');
const [port, cert, key, mode] = process.argv.slice(2);
const bulk = mode && mode.startsWith('bulk:') ? Buffer.alloc(Number(mode.slice(5)), 'x') : null;
const server = https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, (req, res) => {
  if (bulk) return res.end(bulk);
  if (mode !== 'keepalive') res.setHeader('Connection', 'close');
  res.end('hello from node\n');
});
server.listen(Number(port), '127.0.0.1', () => console.log(`listening on ${port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
