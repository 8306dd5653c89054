// An HTTP/2 client that reuses its connections the way a browser does: on each connection,
// BURSTS bursts of STREAMS concurrent requests, PAUSE_MS apart, then it closes.
// usage: node h2_bursts.js PORT CONNECTIONS BURSTS STREAMS PAUSE_MS
// Prints its own counts as JSON: {"connections": N, "requests": N, "failed": N}.
const http2 = require('http2');
const [port, conns, bursts, streams, pause] = process.argv.slice(2).map(Number);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function get(session) {
  return new Promise((resolve) => {
    const req = session.request({ ':path': '/' });
    req.on('response', (h) => { req.on('data', () => {}); req.on('end', () => resolve(h[':status'] === 200)); });
    req.on('error', () => resolve(false));
    req.end();
  });
}

async function connection(counts) {
  const session = http2.connect(`https://127.0.0.1:${port}`, { rejectUnauthorized: false });
  session.on('error', () => {});
  counts.connections++;
  for (let b = 0; b < bursts; b++) {
    if (b) await sleep(pause);
    const ok = await Promise.all(Array.from({ length: streams }, () => get(session)));
    for (const o of ok) o ? counts.requests++ : counts.failed++;
  }
  await new Promise((r) => session.close(r));
}

(async () => {
  const counts = { connections: 0, requests: 0, failed: 0 };
  await Promise.all(Array.from({ length: conns }, () => connection(counts)));
  console.log(JSON.stringify(counts));
})();
