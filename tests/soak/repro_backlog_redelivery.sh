#!/usr/bin/env bash
# Reproduces what scripts/soak-kill found (issue 14): a message logged twice after kill -9.
#
# mosquitto 2.0.11 (Debian 12) sends a resumed persistent session its whole queued backlog at
# once, whatever max_inflight_messages says (here 100; its log showed 22431 PUBLISHes sent with
# 22207 unacknowledged). tidemark logs thousands of them within a few hundred ms, but the broker
# has read only a few hundred PUBACKs when kill -9 ends the connection (224 of 11487 logged in
# the run below), so it redelivers all the rest (DUP) on the next connection.
# adapters/mqtt/redelivery_filter.h recognises at most 128 (candidates_max, seeded from the
# log's last records after a restart): the rest are appended to the log a second time and
# counted twice by every pipeline. Seen: 30000 published, 41134 message records in the log
# (the defaults).
#
#   tests/soak/repro_backlog_redelivery.sh TIDEMARK_BINARY [MESSAGES] [KILL_AFTER_S]
#
# Prints the log's message records against the messages published; exit 1 when they differ.
set -euo pipefail
tidemark=${1:?usage: repro_backlog_redelivery.sh TIDEMARK_BINARY [MESSAGES] [KILL_AFTER_S]}
messages=${2:-30000}
kill_after_s=${3:-0}
dir=$(mktemp -d /tmp/tidemark-repro.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_broker() {  # NAME PORT: the settings of tests/support/broker.cpp
  cat >"$dir/$1.conf" <<EOF
listener $2 127.0.0.1
allow_anonymous true
max_inflight_messages 100
max_queued_messages 100000
persistence false
log_dest file $dir/$1.log
log_type all
user root
EOF
  mosquitto -c "$dir/$1.conf" & pids+=("$!")
}
gateway_port=$(free_port); upstream_port=$(free_port)
start_broker gateway "$gateway_port"
start_broker upstream "$upstream_port"
sleep 0.5

cat >"$dir/tidemark.json" <<EOF
{"node_id": "repro", "data_dir": "$dir/data", "checkpoint": {"interval": "1s"},
 "storage": {"map_size": "64MiB", "fsync": "interval", "fsync_interval": "200ms"},
 "source": {"uri": "tcp://127.0.0.1:$gateway_port", "client_id": "tidemark-repro", "clock": "always"},
 "upstream": {"uri": "tcp://127.0.0.1:$upstream_port", "client_id": "repro-up",
              "outbox": {"max_bytes": "16MiB"}},
 "pipelines": [{"name": "n", "topic": "sensors/+/telemetry", "key": "topic:1",
   "timestamp": {"pointer": "/ts", "format": "epoch_ms"},
   "window": {"type": "tumbling", "size": "5s"},
   "watermark": {"delay": "1s", "idle_timeout": "4s"},
   "late": {"allowed_lateness": "1m"},
   "aggregates": {"n": {"fn": "count"}}, "limits": {"max_keys": 10, "max_open_windows": 1000}}]}
EOF
run() {  # starts tidemark; its pid in $tm
  echo "==== start" >>"$dir/tidemark.log"
  "$tidemark" run --config "$dir/tidemark.json" >>"$dir/tidemark.log" 2>&1 & tm=$!; pids+=("$tm")
}
wait_connected() {  # N: until the Nth "source: connected" line
  for _ in $(seq 1 1000); do
    [ "$(grep -c 'source: connected' "$dir/tidemark.log" || true)" -ge "$1" ] && return 0
    kill -0 "$tm" 2>/dev/null || { cat "$dir/tidemark.log" >&2; exit 2; }
    sleep 0.01
  done
  echo "tidemark never connected to the gateway" >&2; exit 2
}

run; wait_connected 1                        # the session and its subscription exist
kill -TERM "$tm"; wait "$tm" || true
now=$(date +%s%3N)
seq 1 "$messages" | awk -v now="$now" '{printf "{\"ts\":%d,\"seq\":%d}\n", now, $1}' |
  mosquitto_pub -p "$gateway_port" -q 1 -l -t sensors/dev-0/telemetry   # the backlog, queued
run; wait_connected 2; sleep "$kill_after_s"
kill -9 "$tm"; wait "$tm" || true             # while the broker still sends the backlog
run; wait_connected 3; sleep 5
kill -TERM "$tm"; wait "$tm" || true

logged=$("$tidemark" inspect --config "$dir/tidemark.json" | sed -n 's/.*records: [0-9]* (\([0-9]*\) message.*/\1/p')
sent=$(grep -c "Sending PUBLISH to tidemark-repro (d1" "$dir/gateway.log" || true)
echo "published $messages, log holds $logged message records; the broker redelivered $sent (DUP)"
echo "kept $dir (gateway.log has every packet)"
[ "$logged" = "$messages" ]
