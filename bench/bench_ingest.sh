#!/usr/bin/env bash
# bench_ingest.sh BUILD_DIR: `scripts/bench ingest`. One mosquitto on loopback (bounded
# max_inflight_messages), small JSON telemetry at QoS1 from bench_publisher as fast as the
# broker takes it (at most BENCH_INGEST_WINDOW unacknowledged publishes per publisher, so no
# backlog builds up). In the same run, measured alternately, RUNS times each:
#   (a) bench_bare_subscriber: a Paho subscriber that only counts (the floor);
#   (b) tidemark with one tumbling pipeline and fsync=interval.
# tidemark's rate comes from its health snapshots (every 100 ms: ingest.messages and time_ms,
# two snapshots strictly inside the run); its CPU from /proc/PID/stat (utime+stime) from just
# before the publisher starts to the snapshot that shows the last message; RssAnon from
# /proc/PID/status at the end, and once connected before the first message (idle). Then one more
# tidemark run with 10,000 devices (keys) for its RssAnon with 10k keys live. Figures are
# medians over the runs, printed last as `name: value unit`.
# Environment: BENCH_INGEST_COUNT (messages per run, 40000), BENCH_INGEST_RUNS (3),
# BENCH_INGEST_PUBLISHERS (publisher processes, 1), BENCH_INGEST_WINDOW (in-flight window per
# publisher, 1000), BENCH_INGEST_KEEP=1 keeps the work directory, BENCH_INGEST_COMPRESSION
# (storage.log_compression: none or zstd; the config's default when unset).
set -euo pipefail

build=${1:?usage: bench_ingest.sh BUILD_DIR}
build=$(cd "$build" && pwd)
count=${BENCH_INGEST_COUNT:-40000}
runs=${BENCH_INGEST_RUNS:-3}
publishers=${BENCH_INGEST_PUBLISHERS:-1}
window=${BENCH_INGEST_WINDOW:-1000}
devices=10
broker_inflight=100
compression=""
[ -n "${BENCH_INGEST_COMPRESSION:-}" ] && compression=", \"log_compression\": \"$BENCH_INGEST_COMPRESSION\""

tidemark=$build/firmware/tidemark
publisher=$build/bench/bench_publisher
bare=$build/bench/bench_bare_subscriber
for exe in "$tidemark" "$publisher" "$bare"; do
  [ -x "$exe" ] || { echo "bench_ingest: $exe is missing: build it first" >&2; exit 1; }
done
command -v mosquitto_sub >/dev/null || { echo "bench_ingest: mosquitto-clients is missing" >&2; exit 1; }
mosquitto=$(command -v mosquitto || echo /usr/sbin/mosquitto)

work=$(mktemp -d /tmp/tidemark-bench-ingest.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "${BENCH_INGEST_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

# A port that is free now: bash cannot bind, so try ports until nothing listens on one.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  echo "bench_ingest: no free port found" >&2
  exit 1
}

port=$(free_port)
uri="tcp://127.0.0.1:$port"
{
  echo "listener $port 127.0.0.1"
  echo "allow_anonymous true"
  echo "max_inflight_messages $broker_inflight"
  echo "max_queued_messages 100000"
  echo "persistence false"
  echo "log_dest stderr"
  echo "log_type error"
  [ "$(id -u)" -eq 0 ] && echo "user root"
} >"$work/mosquitto.conf"
"$mosquitto" -c "$work/mosquitto.conf" 2>"$work/mosquitto.log" &
broker_pid=$!
pids+=("$broker_pid")
for _ in $(seq 1 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done

# Runs the publishers (count split between them) and waits for them.
publish() {
  local tag=$1 each=$((count / publishers)) rest=$((count % publishers)) ps=() i n
  for i in $(seq 1 "$publishers"); do
    n=$each
    [ "$i" -eq 1 ] && n=$((each + rest))
    "$publisher" --uri "$uri" --devices "$devices" --count "$n" --qos 1 --max-inflight "$window" \
      >"$work/pub-$tag-$i.txt" 2>&1 &
    ps+=($!)
  done
  for p in "${ps[@]}"; do wait "$p" || { echo "bench_ingest: publisher failed:" >&2; cat "$work"/pub-"$tag"-*.txt >&2; exit 1; }; done
}

figure() { sed -n "s/^$1: \([0-9.]*\).*/\1/p" "$2" | tail -n1; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

# Extracts "time_ms messages" from each health snapshot.
health_points() {
  sed -n 's/.*"ingest":{[^}]*"messages":\([0-9]*\).*"time_ms":\([0-9]*\).*/\2 \1/p' "$1"
}

run_bare() {
  local r=$1 out=$work/bare-$r.txt
  "$bare" --uri "$uri" --filter 'sensors/+/telemetry' --count "$count" --client-id "bench-bare-$r" \
    --timeout-s 600 >"$out" 2>&1 &
  local sub=$!
  for _ in $(seq 1 100); do grep -q '^subscribed' "$out" && break; sleep 0.1; done
  publish "bare-$r"
  wait "$sub" || { echo "bench_ingest: bare subscriber failed:" >&2; cat "$out" >&2; exit 1; }
  bare_rate+=("$(figure msgs_per_s "$out")")
  bare_cpu+=("$(figure cpu_us_per_msg "$out")")
  bare_rss+=("$(figure rss_anon_kib "$out")")
}

run_tidemark() {
  local r=$1 dir=$work/tm-$r
  mkdir -p "$dir"
  cat >"$dir/tidemark.json" <<EOF
{
  "node_id": "bench-$r",
  "data_dir": "$dir/data",
  "storage": {"map_size": "512MiB", "fsync": "interval", "fsync_interval": "1s"$compression},
  "checkpoint": {"interval": "5s"},
  "source": {"uri": "$uri", "client_id": "tidemark-bench-$r"},
  "health": {"topic": "tidemark/{node_id}/health", "interval": "100ms"},
  "log_level": "warn",
  "pipelines": [{
    "name": "temp_10s",
    "topic": "sensors/+/telemetry",
    "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"},
    "fields": {"temp": "/temp"},
    "window": {"type": "tumbling", "size": "10s"},
    "watermark": {"delay": "2s"},
    "aggregates": {"n": {"fn": "count"}, "avg": {"fn": "mean", "field": "temp"},
                   "max": {"fn": "max", "field": "temp"}}
  }]
}
EOF
  "$tidemark" run --config "$dir/tidemark.json" 2>"$dir/tidemark.log" &
  local tm=$!
  pids+=("$tm")
  mosquitto_sub -h 127.0.0.1 -p "$port" -t "tidemark/bench-$r/health" -F '%p' >"$dir/health.txt" &
  local hs=$!
  pids+=("$hs")
  # Ready: subscribed to the gateway broker (a health snapshot with ingest connected).
  local ready=0
  for _ in $(seq 1 100); do
    if tail -n1 "$dir/health.txt" 2>/dev/null | grep -q '"ingest":{[^}]*"connected":true'; then ready=1; break; fi
    sleep 0.1
  done
  [ "$ready" = 1 ] || { echo "bench_ingest: tidemark did not connect:" >&2; cat "$dir/tidemark.log" >&2; exit 1; }
  local cpu0 done_at=0 last
  tm_idle_rss+=("$(awk '/^RssAnon:/ {print $2}' "/proc/$tm/status")")
  cpu0=$(cpu_ticks "$tm")
  publish "tm-$r"
  local published_at
  published_at=$(date +%s%3N)
  for _ in $(seq 1 1200); do
    last=$(health_points "$dir/health.txt" | tail -n1 | awk '{print $2}')
    if [ "${last:-0}" -ge "$count" ]; then done_at=$(date +%s%3N); break; fi
    sleep 0.05
  done
  [ "$done_at" != 0 ] || { echo "bench_ingest: tidemark saw ${last:-0} of $count messages" >&2; exit 1; }
  local cpu1 rss
  cpu1=$(cpu_ticks "$tm")
  rss=$(awk '/^RssAnon:/ {print $2}' "/proc/$tm/status")
  kill -TERM "$tm"
  wait "$tm" || echo "bench_ingest: tidemark exited with $? (see $dir/tidemark.log)" >&2
  kill "$hs" 2>/dev/null || true
  wait "$hs" 2>/dev/null || true
  # The rate between the first snapshot that shows messages and the last one before all had
  # arrived: both strictly inside the run.
  local rate
  rate=$(health_points "$dir/health.txt" | awk -v n="$count" '
    $2 > 0 && !t1 {t1 = $1; m1 = $2}
    $2 > 0 && $2 < n {t2 = $1; m2 = $2}
    END {print (t2 > t1) ? (m2 - m1) * 1000 / (t2 - t1) : 0}')
  local hz
  hz=$(getconf CLK_TCK)
  tm_rate+=("$rate")
  tm_cpu+=("$(awk -v a="$cpu0" -v b="$cpu1" -v hz="$hz" -v n="$count" 'BEGIN {print (b - a) * 1e6 / hz / n}')")
  tm_rss+=("$rss")
  tm_lag+=("$((done_at - published_at))")
}

bare_rate=() bare_cpu=() bare_rss=() tm_rate=() tm_cpu=() tm_rss=() tm_lag=() tm_idle_rss=()
echo "ingest: $count messages per run, $runs runs, $publishers publisher(s) with a window of $window, mosquitto max_inflight_messages $broker_inflight"
for r in $(seq 1 "$runs"); do
  run_bare "$r"
  run_tidemark "$r"
  printf 'run %d: bare %s msgs/s %s us/msg | tidemark %s msgs/s %s us/msg, RssAnon %s KiB, last message seen %s ms after the publisher finished\n' \
    "$r" "${bare_rate[-1]}" "${bare_cpu[-1]}" "${tm_rate[-1]}" "${tm_cpu[-1]}" "${tm_rss[-1]}" "${tm_lag[-1]}"
  grep -h publish_rate "$work"/pub-tm-"$r"-*.txt | sed 's/^/  publisher /'
done

idle_rss=$(median "${tm_idle_rss[@]}")
# 10k keys live: the same stream spread over 10,000 devices, one run.
devices=10000
run_tidemark keys
keys_rss=${tm_rss[-1]}
unset 'tm_rate[-1]' 'tm_cpu[-1]' 'tm_rss[-1]' 'tm_lag[-1]'
echo "10k keys: RssAnon ${keys_rss} KiB at the end of the run"

b_rate=$(median "${bare_rate[@]}")
t_rate=$(median "${tm_rate[@]}")
b_cpu=$(median "${bare_cpu[@]}")
t_cpu=$(median "${tm_cpu[@]}")
t_rss=$(median "${tm_rss[@]}")
printf 'ingest.bare_msgs_per_s: %.0f msgs/s\n' "$b_rate"
printf 'ingest.tidemark_msgs_per_s: %.0f msgs/s\n' "$t_rate"
awk -v a="$b_rate" -v b="$t_rate" 'BEGIN {printf "ingest.ratio: %.3f ratio\n", (a > 0) ? b / a : 0}'
printf 'ingest.bare_cpu_us_per_msg: %.2f us\n' "$b_cpu"
printf 'ingest.tidemark_cpu_us_per_msg: %.2f us\n' "$t_cpu"
awk -v a="$b_cpu" -v b="$t_cpu" 'BEGIN {printf "ingest.cpu_ratio: %.3f ratio\n", (a > 0) ? b / a : 0}'
printf 'ingest.rss_anon_kib: %d KiB\n' "$t_rss"
printf 'ingest.rss_anon_kib_idle: %d KiB\n' "$idle_rss"
printf 'ingest.rss_anon_kib_10k_keys: %d KiB\n' "$keys_rss"
