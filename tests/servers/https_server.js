// A Node.js HTTPS server for tlsprof's tests: node's TLS drives the handshake from
// SSL_read over a memory BIO, with OpenSSL linked into the node executable.
// usage: node https_server.js PORT CERT KEY [keepalive]
// Without "keepalive", every response closes its connection.
const https = require('https');
const fs = require('fs');
const [port, cert, key, mode] = process.argv.slice(2);
const server = https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, (req, res) => {
  if (mode !== 'keepalive') res.setHeader('Connection', 'close');
  res.end('hello from node\n');
});
server.listen(Number(port), '127.0.0.1', () => console.log(`listening on ${port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
