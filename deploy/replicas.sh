#!/usr/bin/env bash
# Runs N `kiln serve` replicas on localhost ports and nginx in front of them (deploy/nginx/kiln.conf with
# the addresses filled in), nginx in the foreground with its own pid file, logs and temp files in a run
# folder, not the system's service. Ctrl-C or SIGTERM stops nginx and then the replicas (SIGTERM: each
# finishes its running answers, up to --shutdown-grace seconds) and waits for them all. A replica that
# dies is left dead (nginx sends its requests to the others); nginx dying stops everything.
# docs/SERVING.md ("Replicas behind a load balancer") explains the deployment.
#
# Usage: deploy/replicas.sh [OPTIONS] -- KILN_SERVE_ARGS...     e.g.
#   deploy/replicas.sh --replicas 2 --port 8080 -- --model models/smollm2 --api-key-file keys.txt
# Options:
#   --replicas N       replicas to start [2, or as many as --devices names]
#   --devices LIST     one kiln serve --device per replica, comma-separated (gpu:0,gpu:1: one replica
#                      per GPU); without it every replica takes the options after --
#   --port PORT        nginx's port [8080]
#   --listen ADDR      nginx's address [127.0.0.1]; 0.0.0.0 opens it to the network
#   --replica-port P   replica i (from 1) listens on 127.0.0.1:P+i-1 [8081]; 0: each picks a free port
#   --dir DIR          the run folder [a new one under ${TMPDIR:-/tmp}, removed at the end]
# Environment: KILN_BIN (the kiln binary; default `kiln` on PATH, else target/release/kiln),
# NGINX (the nginx binary; default `nginx` on PATH, else /usr/sbin/nginx), KILN_START_TIMEOUT (seconds a
# replica may take to load its model and listen [600]).
# Prints one line per replica and one for nginx (pid, URL, log), then "ready".
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"

replicas="" devices="" port=8080 listen=127.0.0.1 replica_port=8081 dir="" keep_dir=0
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) replicas="$2"; shift 2 ;;
    --devices) devices="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --listen) listen="$2"; shift 2 ;;
    --replica-port) replica_port="$2"; shift 2 ;;
    --dir) dir="$2"; keep_dir=1; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "replicas.sh: unknown option $1 (kiln serve's options go after --)" >&2; exit 2 ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "replicas.sh: no kiln serve options (at least: -- --model DIR)" >&2
  exit 2
fi
IFS=, read -r -a device_list <<<"$devices"
if [ -z "$replicas" ]; then
  replicas="${#device_list[@]}"
  [ "$replicas" -gt 0 ] || replicas=2
elif [ -n "$devices" ] && [ "${#device_list[@]}" != "$replicas" ]; then
  echo "replicas.sh: --devices names ${#device_list[@]} devices for $replicas replicas" >&2
  exit 2
fi
case "$replicas" in ''|*[!0-9]*|0) echo "replicas.sh: --replicas must be a positive number" >&2; exit 2 ;; esac

kiln="${KILN_BIN:-}"
if [ -z "$kiln" ]; then
  kiln="$(command -v kiln || echo "$root/target/release/kiln")"
fi
nginx="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
for bin in "$kiln" "$nginx"; do
  if [ ! -x "$bin" ]; then
    echo "replicas.sh: $bin is not an executable (set KILN_BIN / NGINX)" >&2
    exit 2
  fi
done

if [ -z "$dir" ]; then
  dir="$(mktemp -d "${TMPDIR:-/tmp}/kiln-replicas.XXXXXX")"
fi
mkdir -p "$dir"
# nginx's workers run as an unprivileged user when nginx is started as root: they must reach the temp
# folders inside (nginx gives those to that user itself).
chmod 711 "$dir"

pids=() addrs=() nginx_pid="" stopping=0
log() { echo "replicas.sh: $*" >&2 || true; }

stop() {
  # nginx first (no new requests reach the replicas), then the replicas, which finish their answers.
  stopping=1
  trap '' INT TERM PIPE   # a closed stderr (a reader gone) must not stop the stopping
  if [ -n "$nginx_pid" ] && kill -0 "$nginx_pid" 2>/dev/null; then
    kill -QUIT "$nginx_pid" 2>/dev/null || true   # graceful: running requests finish
  fi
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "$nginx_pid" ]; then
    wait "$nginx_pid" 2>/dev/null || true
  fi
  if [ "$keep_dir" = 0 ]; then
    rm -rf "$dir"
  fi
  log "stopped"
}
on_signal() {
  log "$1: stopping"
  stop
  exit 0
}
trap 'on_signal SIGINT' INT
trap 'on_signal SIGTERM' TERM
trap '[ "$stopping" = 1 ] || stop' EXIT

# The replicas, started together (each loads its own copy of the model), then each waited for.
for i in $(seq 1 "$replicas"); do
  p=0
  if [ "$replica_port" != 0 ]; then
    p=$((replica_port + i - 1))
  fi
  device=()
  if [ -n "$devices" ]; then
    device=(--device "${device_list[$((i - 1))]}")
  fi
  : >"$dir/replica-$i.log"   # now: the child opens it only once forked
  "$kiln" serve --host 127.0.0.1 --port "$p" "${device[@]}" "$@" >>"$dir/replica-$i.log" 2>&1 &
  pids+=("$!")
done
deadline=$(( $(date +%s) + ${KILN_START_TIMEOUT:-600} ))
for i in $(seq 1 "$replicas"); do
  pid="${pids[$((i - 1))]}" f="$dir/replica-$i.log" addr=""
  while [ -z "$addr" ]; do
    addr="$(sed -n 's|.*listening on http://\(127\.0\.0\.1:[0-9]*\).*|\1|p;T;q' "$f")"
    if [ -z "$addr" ]; then
      if ! kill -0 "$pid" 2>/dev/null || [ "$(date +%s)" -ge "$deadline" ]; then
        log "replica $i did not start; its log ($f):"
        tail -n 20 "$f" >&2
        exit 1
      fi
      sleep 0.1
    fi
  done
  addrs+=("$addr")
  log "replica $i pid $pid on http://$addr (log $f)"
done

# nginx's config: the template with the run folder, the listen address and one `server` line per replica.
conf="$dir/nginx.conf"
rm -f "$dir/nginx.pid"
while IFS= read -r line || [ -n "$line" ]; do
  line="${line//@DIR@/"$dir"}"
  line="${line//@LISTEN@/"$listen:$port"}"
  if [[ "$line" == *@REPLICA@* ]]; then
    for a in "${addrs[@]}"; do
      printf '%s\n' "${line//@REPLICA@/"$a"}"
    done
  else
    printf '%s\n' "$line"
  fi
done <"$here/nginx/kiln.conf" >"$conf"
# -p: nginx's prefix is the run folder; -e: its startup errors go there too; daemon off: it stays this
# script's child.
"$nginx" -p "$dir" -e "$dir/nginx-error.log" -c "$conf" -g "daemon off;" &
nginx_pid=$!
for _ in $(seq 1 100); do
  if [ -s "$dir/nginx.pid" ] || ! kill -0 "$nginx_pid" 2>/dev/null; then
    break
  fi
  sleep 0.1
done
if ! kill -0 "$nginx_pid" 2>/dev/null || [ ! -s "$dir/nginx.pid" ]; then
  log "nginx did not start; its log ($dir/nginx-error.log):"
  tail -n 20 "$dir/nginx-error.log" >&2 || true
  exit 1
fi
log "nginx pid $nginx_pid on http://$listen:$port (config $conf, access log $dir/access.log)"
log "ready"

# Until a signal, or until nginx exits (then the replicas are stopped too).
set +e
wait "$nginx_pid"
status=$?
set -e
nginx_pid=""
log "nginx exited with status $status: stopping the replicas"
stop
exit 1
