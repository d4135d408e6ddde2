#!/usr/bin/env bash
# bench_recovery.sh BUILD_DIR: `scripts/bench recovery`. How long tidemark takes to drain the
# backlog its persistent session collected at the gateway broker while it was stopped.
# One mosquitto on loopback, configured as docs/OPERATIONS.md recommends (persistence on,
# bounded max_inflight_messages, max_queued_messages large enough for the outage). For each N:
# start tidemark once (so its session and subscription exist), stop it (SIGTERM), publish N
# QoS1 messages with bench_publisher (they queue at the broker), start tidemark again and time
# from its start to the health snapshot (retained, every 100 ms) whose ingest.messages shows all
# N. The live rate comes from the same publisher with tidemark running (as bench_ingest.sh
# measures it), in the same run, once per round. The drain rate is N / backlog time, startup
# included (what an operator waits for); ratio = drain rate / median live rate. Broker and
# tidemark CPU over the drain come from /proc/PID/stat (share of one core).
# Figures are medians over the runs, printed last as `name: value unit`.
# Environment: BENCH_RECOVERY_COUNTS ("10000 50000 100000 500000"), BENCH_RECOVERY_RUNS (runs
# for every N; default 3 for N <= 50000, 1 above), BENCH_RECOVERY_LIVE_COUNT (50000),
# BENCH_RECOVERY_TIMEOUT_S (per drain, 300), BENCH_RECOVERY_INFLIGHT (broker
# max_inflight_messages, 100: at most tidemark's RedeliveryFilter::candidates_max = 128, and
# never 0, see docs/OPERATIONS.md), BENCH_RECOVERY_QUEUED (max_queued_messages, 1000000),
# BENCH_RECOVERY_BROKER_EXTRA (extra mosquitto.conf lines, `;`-separated, for experiments),
# BENCH_RECOVERY_KEEP=1 keeps the work directory.
set -euo pipefail

build=${1:?usage: bench_recovery.sh BUILD_DIR}
build=$(cd "$build" && pwd)
counts=${BENCH_RECOVERY_COUNTS:-"10000 50000 100000 500000"}
live_count=${BENCH_RECOVERY_LIVE_COUNT:-50000}
timeout_s=${BENCH_RECOVERY_TIMEOUT_S:-300}
broker_inflight=${BENCH_RECOVERY_INFLIGHT:-100}
broker_queued=${BENCH_RECOVERY_QUEUED:-1000000}
window=1000

tidemark=$build/firmware/tidemark
publisher=$build/bench/bench_publisher
for exe in "$tidemark" "$publisher"; do
  [ -x "$exe" ] || { echo "bench_recovery: $exe is missing: build it first" >&2; exit 1; }
done
command -v mosquitto_sub >/dev/null || { echo "bench_recovery: mosquitto-clients is missing" >&2; exit 1; }
mosquitto=$(command -v mosquitto || echo /usr/sbin/mosquitto)
[ "$broker_inflight" -gt 0 ] || { echo "bench_recovery: max_inflight_messages 0 (unlimited) is what this bench warns against" >&2; exit 2; }

runs_for() {
  if [ -n "${BENCH_RECOVERY_RUNS:-}" ]; then echo "$BENCH_RECOVERY_RUNS"
  elif [ "$1" -le 50000 ]; then echo 3
  else echo 1; fi
}

work=$(mktemp -d /tmp/tidemark-bench-recovery.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "${BENCH_RECOVERY_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

# A port that is free now: bash cannot bind, so try ports until nothing listens on one.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  echo "bench_recovery: no free port found" >&2
  exit 1
}

port=$(free_port)
uri="tcp://127.0.0.1:$port"
mkdir -p "$work/broker"
{
  echo "listener $port 127.0.0.1"
  echo "allow_anonymous true"
  echo "persistence true"
  echo "persistence_location $work/broker/"
  echo "max_inflight_messages $broker_inflight"
  echo "max_queued_messages $broker_queued"
  echo "max_queued_bytes 0"
  echo "set_tcp_nodelay true"
  echo "log_dest stderr"
  echo "log_type error"
  echo "log_type warning"
  echo "log_type notice"
  [ -n "${BENCH_RECOVERY_BROKER_EXTRA:-}" ] && tr ';' '\n' <<<"$BENCH_RECOVERY_BROKER_EXTRA"
  [ "$(id -u)" -eq 0 ] && echo "user root"
} >"$work/mosquitto.conf"
"$mosquitto" -c "$work/mosquitto.conf" 2>"$work/mosquitto.log" &
broker_pid=$!
pids+=("$broker_pid")
for _ in $(seq 1 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done

now_ms() { date +%s%3N; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
hz=$(getconf CLK_TCK)

# "time_ms messages" of each health snapshot.
health_points() {
  sed -n 's/.*"ingest":{[^}]*"messages":\([0-9]*\).*"time_ms":\([0-9]*\).*/\2 \1/p' "$1"
}

publish() {
  local n=$1 out=$2
  "$publisher" --uri "$uri" --devices 10 --count "$n" --qos 1 --max-inflight "$window" >"$out" 2>&1 ||
    { echo "bench_recovery: publisher failed:" >&2; cat "$out" >&2; exit 1; }
}

write_config() {
  local dir=$1 id=$2
  mkdir -p "$dir"
  cat >"$dir/tidemark.json" <<EOF
{
  "node_id": "$id",
  "data_dir": "$dir/data",
  "storage": {"map_size": "1GiB", "fsync": "interval", "fsync_interval": "1s"},
  "checkpoint": {"interval": "5s"},
  "source": {"uri": "$uri", "client_id": "tidemark-$id"},
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
}

# Starts tidemark and its health watcher (a fresh file each start); sets tm, hs.
start_tidemark() {
  local dir=$1 id=$2 health=$3
  "$tidemark" run --config "$dir/tidemark.json" 2>>"$dir/tidemark.log" &
  tm=$!
  pids+=("$tm")
  mosquitto_sub -h 127.0.0.1 -p "$port" -t "tidemark/$id/health" -F '%p' >"$health" &
  hs=$!
  pids+=("$hs")
}

stop_tidemark() {
  kill -TERM "$tm"
  wait "$tm" || echo "bench_recovery: tidemark exited with $? (see $1/tidemark.log)" >&2
  kill "$hs" 2>/dev/null || true
  wait "$hs" 2>/dev/null || true
}

# Ends a stopped tidemark's persistent session (a clean-session connect with its client id):
# left alone, it would queue every later run's messages too.
forget_session() {
  mosquitto_pub -h 127.0.0.1 -p "$port" -i "tidemark-$1" -t bench/forget -m x -q 0 ||
    echo "bench_recovery: could not end the session of tidemark-$1" >&2
}

wait_connected() {
  local dir=$1 health=$2
  for _ in $(seq 1 100); do
    tail -n1 "$health" 2>/dev/null | grep -q '"ingest":{[^}]*"connected":true' && return 0
    sleep 0.1
  done
  echo "bench_recovery: tidemark did not connect:" >&2
  cat "$dir/tidemark.log" >&2
  exit 1
}

# Waits until the health file shows at least $2 messages; echoes that snapshot's time_ms, or 0.
wait_messages() {
  local health=$1 n=$2 limit_ms=$3 last
  while [ "$(now_ms)" -lt "$limit_ms" ]; do
    last=$(health_points "$health" | awk -v n="$n" '$2 >= n {print $1; exit}')
    [ -n "$last" ] && { echo "$last"; return; }
    sleep 0.05
  done
  echo 0
}

run_live() {
  local r=$1
  local id=live-$r dir=$work/live-$r
  write_config "$dir" "$id"
  start_tidemark "$dir" "$id" "$dir/health.txt"
  wait_connected "$dir" "$dir/health.txt"
  publish "$live_count" "$dir/pub.txt"
  local at
  at=$(wait_messages "$dir/health.txt" "$live_count" $(($(now_ms) + timeout_s * 1000)))
  [ "$at" != 0 ] || { echo "bench_recovery: live run $r did not see all $live_count messages" >&2; exit 1; }
  stop_tidemark "$dir"
  forget_session "$id"
  # Between the first snapshot that shows messages and the last one before all had arrived.
  live_rate+=("$(health_points "$dir/health.txt" | awk -v n="$live_count" '
    $2 > 0 && !t1 {t1 = $1; m1 = $2}
    $2 > 0 && $2 < n {t2 = $1; m2 = $2}
    END {print (t2 > t1) ? (m2 - m1) * 1000 / (t2 - t1) : 0}')")
}

# One drain of N: prints "seconds broker_cores tidemark_cores broker_rss_growth_kib" (seconds 0
# on a timeout; growth = the broker's RssAnon after the backlog was queued minus before: glibc
# keeps what a larger earlier backlog freed, so only the largest over the runs means much).
run_drain() {
  local n=$1 r=$2 id=drain-$1-$2 dir=$work/drain-$1-$2
  write_config "$dir" "$id"
  start_tidemark "$dir" "$id" "$dir/health-first.txt"
  wait_connected "$dir" "$dir/health-first.txt"
  stop_tidemark "$dir"
  local b0 t0 start rss rss0
  rss0=$(awk '/^RssAnon:/ {print $2}' "/proc/$broker_pid/status")
  publish "$n" "$dir/pub.txt"
  rss=$(($(awk '/^RssAnon:/ {print $2}' "/proc/$broker_pid/status") - rss0))
  b0=$(cpu_ticks "$broker_pid")
  start=$(now_ms)
  start_tidemark "$dir" "$id" "$dir/health.txt"
  t0=$(cpu_ticks "$tm")
  local at b1 t1
  at=$(wait_messages "$dir/health.txt" "$n" $((start + timeout_s * 1000)))
  b1=$(cpu_ticks "$broker_pid")
  t1=$(cpu_ticks "$tm")
  local seen
  seen=$(health_points "$dir/health.txt" | tail -n1 | awk '{print $2}')
  stop_tidemark "$dir"
  forget_session "$id"
  local end=$at
  if [ "$at" = 0 ]; then
    end=$(now_ms)
    echo "bench_recovery: N=$n run $r: only ${seen:-0} of $n ingested after ${timeout_s} s" >&2
  fi
  awk -v s="$start" -v e="$end" -v at="$at" -v b="$((b1 - b0))" -v t="$((t1 - t0))" -v hz="$hz" \
    -v rss="$rss" 'BEGIN {d = (e - s) / 1000
      printf "%.3f %.2f %.2f %d\n", (at == 0) ? 0 : d, b / hz / d, t / hz / d, rss}'
}

echo "recovery: N in {$counts}, live $live_count messages per round, mosquitto $("$mosquitto" -h | sed -n '1s/.*version //p') persistence on, max_inflight_messages $broker_inflight, max_queued_messages $broker_queued${BENCH_RECOVERY_BROKER_EXTRA:+, $BENCH_RECOVERY_BROKER_EXTRA}"
bench_start=$(now_ms)
rounds=0
for n in $counts; do
  r=$(runs_for "$n")
  [ "$r" -gt "$rounds" ] && rounds=$r
done
live_rate=()
declare -A secs=() bcpu=() tcpu=() brss=()
for r in $(seq 1 "$rounds"); do
  run_live "$r"
  printf 'round %d: live %.0f msgs/s\n' "$r" "${live_rate[-1]}"
  for n in $counts; do
    [ "$r" -le "$(runs_for "$n")" ] || continue
    read -r s b t k < <(run_drain "$n" "$r")
    secs[$n]+="$s " bcpu[$n]+="$b " tcpu[$n]+="$t " brss[$n]+="$k "
    printf '  N=%d: %s s (%s msgs/s), broker %s cores, tidemark %s cores, broker RssAnon +%s KiB with it queued\n' \
      "$n" "$s" "$(awk -v n="$n" -v s="$s" 'BEGIN {printf "%.0f", (s > 0) ? n / s : 0}')" "$b" "$t" "$k"
  done
done

live=$(median "${live_rate[@]}")
printf 'recovery.live_msgs_per_s: %.0f msgs/s\n' "$live"
for n in $counts; do
  # shellcheck disable=SC2086
  s=$(median ${secs[$n]})
  # shellcheck disable=SC2086
  printf 'recovery.broker_cpu_%d: %.2f cores\n' "$n" "$(median ${bcpu[$n]})"
  # shellcheck disable=SC2086
  printf 'recovery.tidemark_cpu_%d: %.2f cores\n' "$n" "$(median ${tcpu[$n]})"
  # shellcheck disable=SC2086
  printf 'recovery.broker_rss_growth_%d_kib: %d KiB\n' "$n" "$(printf '%s\n' ${brss[$n]} | sort -g | tail -n1)"
  case " ${secs[$n]} " in *" 0.000 "*) echo "bench_recovery: N=$n timed out at least once (0 s counts as a failure)" >&2 ;; esac
  printf 'recovery.backlog_%d_s: %.2f s\n' "$n" "$s"
  awk -v n="$n" -v s="$s" -v l="$live" 'BEGIN {printf "recovery.ratio_%d: %.3f ratio\n", n, (s > 0 && l > 0) ? n / s / l : 0}'
done
printf 'recovery.bench_wall_s: %.0f s\n' "$((($(now_ms) - bench_start) / 1000))"
