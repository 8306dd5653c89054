#!/usr/bin/env bash
# The demo: a real nginx with TLS on loopback, real load from ab for about 20 s, and
# tlsprof attached to it, printing what it measured. Run as root: `make demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
TLSPROF=${TLSPROF:-target/release/tlsprof}
PORT=${PORT:-18443}
METRICS=${METRICS:-127.0.0.1:19435}
DIR=$(mktemp -d /tmp/tlsprof-demo.XXXXXX)
agent=""
cleanup() {
  [ -n "$agent" ] && kill "$agent" 2>/dev/null || true
  [ -f "$DIR/nginx.pid" ] && kill -QUIT "$(cat "$DIR/nginx.pid")" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$DIR/key.pem" \
  -out "$DIR/cert.pem" -days 7 -subj /CN=localhost 2>/dev/null
cat > "$DIR/nginx.conf" <<CONF
worker_processes 2;
pid $DIR/nginx.pid;
error_log $DIR/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $DIR; proxy_temp_path $DIR; fastcgi_temp_path $DIR; uwsgi_temp_path $DIR; scgi_temp_path $DIR;
  server {
    listen 127.0.0.1:$PORT ssl;
    ssl_certificate $DIR/cert.pem; ssl_certificate_key $DIR/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    keepalive_requests 100;
    location / { return 200 "hello from nginx\n"; }
  }
}
CONF
nginx -c "$DIR/nginx.conf"
echo "demo: nginx (2 workers, ECDSA P-256) on https://127.0.0.1:$PORT, master pid $(cat "$DIR/nginx.pid")"

"$TLSPROF" run --comm nginx --listen "$METRICS" --duration 30 --ready-file "$DIR/ready" &
agent=$!
# ready once nginx's processes are attached and their ports watched (at most 20 s)
for _ in $(seq 200); do [ -s "$DIR/ready" ] && break; sleep 0.1; done
echo "demo: tlsprof attached to: $(tr '\n' ' ' < "$DIR/ready")"

echo "demo: 10 s of new TLS connections (ab -c 8), then 10 s of keep-alive requests (ab -k -c 8)"
ab -q -t 10 -n 1000000 -c 8 "https://127.0.0.1:$PORT/" | grep -E "Complete requests|Failed requests|Requests per second"
ab -q -k -t 10 -n 1000000 -c 8 "https://127.0.0.1:$PORT/" | grep -E "Complete requests|Failed requests|Requests per second"
echo "demo: some failing handshakes (a client offering only RSA suites to an ECDSA server)"
for _ in 1 2 3; do openssl s_client -connect "127.0.0.1:$PORT" -tls1_2 -cipher AES128-SHA </dev/null >/dev/null 2>&1 || true; done

sleep 2.5  # one agent scan (every 2 s) refreshes the TIME_WAIT gauge and accepted counts
echo "demo: what http://$METRICS/metrics says now (handshake series):"
curl -s "http://$METRICS/metrics" | grep -E '^tlsprof_(handshakes_total|handshake_cpu_seconds_(sum|count)|handshake_duration_seconds_(sum|count)|attached_processes|events_lost_total)' || true
echo "demo: connection churn (keepalive_requests 100; ab without -k closes with nginx's close_notify unread: resets):"
curl -s "http://$METRICS/metrics" | grep -E '^tlsprof_(tcp_connections_accepted_total|tcp_connections_total|tcp_time_wait_total|tcp_time_wait_sockets|requests_per_connection_(sum|count))' || true
echo "demo: ss says $(ss -Htan state time-wait "( sport = :$PORT )" | wc -l) sockets in TIME_WAIT on port $PORT"
echo "demo: tlsprof's own summary at exit:"
wait "$agent"
agent=""

echo "demo: tlsprof top --once (a 3 s snapshot) under new connections (ab -c 4):"
ab -q -t 8 -n 1000000 -c 4 "https://127.0.0.1:$PORT/" >/dev/null 2>&1 &
load=$!
sleep 1
"$TLSPROF" top --once --interval 3 --comm nginx
wait "$load" || true

echo "demo: tlsprof report over 10 s of the same load: what to change, ranked by savings"
ab -q -t 12 -n 1000000 -c 4 "https://127.0.0.1:$PORT/" >/dev/null 2>&1 &
load=$!
OUT=${TLSPROF_DEMO_OUT:-/tmp}  # the reports outlive the demo's own directory
"$TLSPROF" report --comm nginx --seconds 10 -o "$OUT/tlsprof-report.md" --html "$OUT/tlsprof-report.html"
wait "$load" || true
sed -n '/^## Findings/,/^## What was measured/p' "$OUT/tlsprof-report.md" | grep -E '^### |^- Saves'
echo "demo: the whole report: $OUT/tlsprof-report.md, with charts: $OUT/tlsprof-report.html"
