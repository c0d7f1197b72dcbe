#!/usr/bin/env bash
# A real Flink cluster on this machine for run_flink.sh, CI and users:
#
#   scripts/flink_cluster.sh start    # JobManager, 2 TaskManagers, Beam's
#                                     # Flink job server, Python worker pool
#   scripts/flink_cluster.sh status   # what runs; Flink's REST view of it
#   scripts/flink_cluster.sh stop     # stops all of that, waits for the ports
#
# Then submit with
#   ./run_flink.sh ... --job_endpoint localhost:8099 \
#       --environment EXTERNAL --environment_config localhost:50000
#
# Everything comes from package registries (no Docker, no Apache mirrors):
#   - Flink itself from PyPI: the apache-flink / apache-flink-libraries wheels
#     carry a complete Flink distribution (bin/, conf/, lib/flink-dist) inside
#     the pyflink package. They are installed with --target into a cache
#     folder, never into the project's venv (their pins would replace Beam).
#   - Beam's Flink job server from Maven Central, as a classpath
#     (scripts/engines/flink-job-server/pom.xml says why not the usual jar).
#   - The SDK workers from the project's venv, started by a worker pool
#     (python -m pipelines.worker_pool), so no container is needed.
# Downloads are cached under $TFRP_ENGINES; a start with a warm cache needs
# no network. Logs, pids, Flink's configuration and staged artifacts are in
# $TFRP_RUN.
#
# Every step prints one line to stderr; failures print one sentence and exit
# non-zero. start and stop are idempotent: start only starts what is not
# running (so it also replaces a TaskManager that died), stop only stops
# processes whose pid files this script wrote.
#
# Ports (all on localhost): Flink REST 8081, JobManager RPC 6123, job server
# 8099 (jobs) / 8098 (artifacts) / 8097 (expansion), worker pool 50000.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENGINES="${TFRP_ENGINES:-$HOME/.cache/tfrecord-pipelines/engines}"
RUN="${TFRP_RUN:-/tmp/tfrecord-pipelines-flink}"
VENV="${VENV:-$ROOT/.venv}"

# Beam's newest Flink runner that Maven Central serves to us, as pinned in
# the pom; its flink-* dependencies decide which Flink the cluster runs (read
# from the resolved jars).
JOB_SERVER_POM="$ROOT/scripts/engines/flink-job-server/pom.xml"
BEAM_RUNNER_VERSION=$(sed -n 's:.*<beam.version>\(.*\)</beam.version>.*:\1:p' "$JOB_SERVER_POM")
JOB_SERVER_DIR="$ENGINES/flink-job-server-$BEAM_RUNNER_VERSION"

TASKMANAGERS=2
REST_PORT=8081
JM_RPC_PORT=6123
JOB_PORT=8099
ARTIFACT_PORT=8098
EXPANSION_PORT=8097
WORKER_POOL_PORT=50000

CONF_DIR="$RUN/conf"
LOG_DIR="$RUN/log"
PID_DIR="$RUN/pid"
# Flink's daemon scripts name their pid files flink-<ident>-<daemon>.pid.
export FLINK_IDENT_STRING=tfrp
JM_PIDS="$PID_DIR/flink-$FLINK_IDENT_STRING-standalonesession.pid"
TM_PIDS="$PID_DIR/flink-$FLINK_IDENT_STRING-taskexecutor.pid"
JOB_SERVER_PID="$PID_DIR/job-server.pid"
WORKER_POOL_PID="$PID_DIR/worker-pool.pid"

step() { echo "flink_cluster: $*" >&2; }
die() { echo "flink_cluster: error: $*" >&2; exit 1; }

# --- processes and ports ----------------------------------------------------

port_open() {  # port_open PORT: something accepts connections on it
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# is_ours PID PATTERN: PID is alive and its command line contains PATTERN.
# Guards against a stale pid file naming a pid reused by another program.
is_ours() {
  [ -n "$1" ] && [ -r "/proc/$1/cmdline" ] &&
    tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"
}

# live_pids FILE PATTERN: the pids in FILE that are still ours.
live_pids() {
  local p
  [ -f "$1" ] || return 0
  while read -r p; do
    if is_ours "$p" "$2"; then echo "$p"; fi
  done <"$1"
}

count_lines() { grep -c . || true; }

# wait_for SECONDS WHAT COMMAND...: polls COMMAND once a second; WHAT only
# names the wait for the reader.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift 2
  until "$@"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      return 1
    fi
    sleep 1
  done
}

ports_closed() {
  local p
  for p in "$@"; do
    if port_open "$p"; then return 1; fi
  done
}

rest() { curl -fsS --max-time 5 "http://localhost:$REST_PORT$1"; }

# taskmanagers_registered: how many TaskManagers the JobManager knows.
taskmanagers_registered() {
  rest /overview 2>/dev/null |
    "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["taskmanagers"])' 2>/dev/null ||
    echo 0
}

# --- downloads (cached) -----------------------------------------------------

ensure_job_server() {
  if [ -f "$JOB_SERVER_DIR/.complete" ]; then
    step "job server: Beam $BEAM_RUNNER_VERSION Flink runner cached in $JOB_SERVER_DIR"
    return
  fi
  command -v mvn >/dev/null || die "Maven (mvn) is needed once to download Beam's Flink job server and is not on PATH."
  step "job server: resolving org.apache.beam:beam-runners-flink-1.19:$BEAM_RUNNER_VERSION and its dependencies with Maven"
  local tmp="$JOB_SERVER_DIR.partial"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  if ! mvn -B -q -f "$JOB_SERVER_POM" \
      dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$tmp" >"$tmp.log" 2>&1; then
    die "Maven could not download Beam's Flink job server $BEAM_RUNNER_VERSION (see $tmp.log: $(grep -m1 -o 'Could not [^[]*' "$tmp.log" | sed 's/ *-> *$//' || echo 'no reason given'))."
  fi
  touch "$tmp/.complete"
  rm -rf "$JOB_SERVER_DIR"
  mv "$tmp" "$JOB_SERVER_DIR"
  rm -f "$tmp.log"
}

# The Flink version the runner was compiled against, e.g. 1.19.0; the
# cluster must run the same minor version, and we take the same patch.
runner_flink_version() {
  local jar
  jar=$(ls "$JOB_SERVER_DIR"/flink-runtime-*.jar 2>/dev/null | head -n1)
  [ -n "$jar" ] || die "no flink-runtime jar in $JOB_SERVER_DIR; delete that folder and start again."
  jar=${jar##*/flink-runtime-}
  echo "${jar%.jar}"
}

ensure_flink() {
  FLINK_VERSION=$(runner_flink_version)
  local dir="$ENGINES/flink-$FLINK_VERSION"
  FLINK_HOME="$dir/pyflink"
  if [ -f "$dir/.complete" ]; then
    step "flink: Flink $FLINK_VERSION cached in $FLINK_HOME"
    return
  fi
  [ -x "$VENV/bin/python" ] || die "the project's virtualenv $VENV is missing; run ./run_local.sh --help once to create it."
  step "flink: installing Flink $FLINK_VERSION from PyPI (apache-flink, apache-flink-libraries) into $dir"
  local tmp="$dir.partial"
  rm -rf "$tmp"
  # --no-deps --target: only the two wheels, outside the venv, so pyflink's
  # pins never touch the project's Beam.
  if ! "$VENV/bin/python" -m pip install -q --no-deps --target "$tmp" \
      "apache-flink==$FLINK_VERSION" "apache-flink-libraries==$FLINK_VERSION" \
      >"$tmp.log" 2>&1; then
    die "pip could not install apache-flink==$FLINK_VERSION from PyPI (see $tmp.log)."
  fi
  [ -f "$tmp/pyflink/bin/jobmanager.sh" ] && ls "$tmp"/pyflink/lib/flink-dist-*.jar >/dev/null 2>&1 ||
    die "the apache-flink $FLINK_VERSION wheels hold no Flink distribution (pyflink/bin, pyflink/lib/flink-dist)."
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  rm -f "$tmp.log"
}

# --- configuration ----------------------------------------------------------

# Our own FLINK_CONF_DIR; the one inside pyflink stays untouched. Rewritten
# on every start (running processes keep what they read).
write_conf() {
  mkdir -p "$CONF_DIR" "$LOG_DIR" "$PID_DIR" "$RUN/artifacts"
  cp "$FLINK_HOME"/conf/log4j*.properties "$FLINK_HOME"/conf/logback*.xml "$CONF_DIR/"
  # Java 17 needs Flink's --add-opens/--add-exports list, which Flink ships
  # in its own config.yaml; reuse it rather than copy it here.
  JAVA_OPTS_ALL=$(sed -n 's/^ *all: *//p' "$FLINK_HOME/conf/config.yaml" | head -n1)
  [ -n "$JAVA_OPTS_ALL" ] || die "could not read env.java.opts.all from $FLINK_HOME/conf/config.yaml."
  cat >"$CONF_DIR/config.yaml" <<EOF
# Written by scripts/flink_cluster.sh; edits are lost on the next start.
env.java.opts.all: $JAVA_OPTS_ALL
env.log.dir: $LOG_DIR
env.pid.dir: $PID_DIR

# Everything on localhost: a cluster for this machine only.
jobmanager.rpc.address: localhost
jobmanager.rpc.port: $JM_RPC_PORT
jobmanager.bind-host: localhost
taskmanager.host: localhost
taskmanager.bind-host: localhost
rest.address: localhost
rest.bind-address: localhost
rest.port: $REST_PORT

# One JobManager and $TASKMANAGERS TaskManagers, each its own JVM with one
# slot, so a job with parallelism $TASKMANAGERS spreads over both.
jobmanager.memory.process.size: 1024m
taskmanager.memory.process.size: 2048m
taskmanager.numberOfTaskSlots: 1
parallelism.default: $TASKMANAGERS

# Beam's batch (DataSet) translation of a real pipeline has ~200 operators,
# many running at once in a slot, and Flink 1.19 reserves 512 network
# buffers (16 MiB) for every blocking result (sort shuffle). With Flink's
# default network memory (~115 MiB here) the preprocessing job failed with
# "Insufficient number of network buffers: required 512, but only 49
# available". So: more network memory, and a smaller reservation per result.
taskmanager.memory.network.min: 256m
taskmanager.memory.network.max: 256m
taskmanager.network.sort-shuffle.min-buffers: 64

# Survive a lost TaskManager: notice it within ~10 s (a killed JVM is
# usually noticed sooner, when its RPC connection fails), then restart the
# failed region a few times. The restart waits for free slots, so start
# this script again to replace the dead TaskManager.
heartbeat.interval: 2000
heartbeat.timeout: 10000
jobmanager.execution.failover-strategy: region
restart-strategy.type: fixed-delay
restart-strategy.fixed-delay.attempts: 3
restart-strategy.fixed-delay.delay: 10 s
EOF
}

# --- start ------------------------------------------------------------------

flink_env() {  # runs one of Flink's bin/ scripts with our configuration
  FLINK_CONF_DIR="$CONF_DIR" FLINK_LOG_DIR="$LOG_DIR" FLINK_PID_DIR="$PID_DIR" \
    "$@" >>"$LOG_DIR/flink-scripts.log" 2>&1
}

start_jobmanager() {
  if [ -n "$(live_pids "$JM_PIDS" StandaloneSessionClusterEntrypoint)" ]; then
    step "jobmanager: already running (pid $(live_pids "$JM_PIDS" StandaloneSessionClusterEntrypoint | head -n1))"
  else
    rm -f "$JM_PIDS"
    step "jobmanager: starting (REST on localhost:$REST_PORT, log in $LOG_DIR)"
    flink_env "$FLINK_HOME/bin/jobmanager.sh" start ||
      die "Flink's jobmanager.sh failed to start (see $LOG_DIR/flink-scripts.log)."
  fi
}

start_taskmanagers() {
  local live missing i
  live=$(live_pids "$TM_PIDS" TaskManagerRunner | count_lines)
  # Forget dead TaskManagers so the pid file lists only live ones.
  if [ -f "$TM_PIDS" ]; then
    live_pids "$TM_PIDS" TaskManagerRunner >"$TM_PIDS.live"
    mv "$TM_PIDS.live" "$TM_PIDS"
  fi
  missing=$((TASKMANAGERS - live))
  if [ "$missing" -le 0 ]; then
    step "taskmanagers: $live already running"
  fi
  for ((i = 0; i < missing; i++)); do
    step "taskmanagers: starting TaskManager $((live + i + 1)) of $TASKMANAGERS"
    flink_env "$FLINK_HOME/bin/taskmanager.sh" start ||
      die "Flink's taskmanager.sh failed to start (see $LOG_DIR/flink-scripts.log)."
  done
}

# The Python SDK worker pool: the TaskManagers ask it (EXTERNAL environment)
# for SDK workers, which run from the project's venv. It is Beam's pool with
# one fix, pipelines/worker_pool.py (Beam's own worker_pool_main kills the
# wrong worker when two TaskManagers share a pool; that file says how). PATH has the venv first for anything that runs
# `python`. setsid gives the pool its own process group, so stop also ends
# the workers it started.
start_worker_pool() {
  local pid
  pid=$(live_pids "$WORKER_POOL_PID" pipelines.worker_pool)
  if [ -n "$pid" ]; then
    step "worker pool: already running (pid $pid)"
    return
  fi
  step "worker pool: starting the Python SDK worker pool from $VENV on localhost:$WORKER_POOL_PORT"
  # cd: the workers must not import modules from the caller's folder.
  (cd "$RUN" && PATH="$VENV/bin:$PATH" exec setsid "$VENV/bin/python" \
    -m pipelines.worker_pool --service_port "$WORKER_POOL_PORT" \
    </dev/null >>"$LOG_DIR/worker-pool.log" 2>&1) &
  echo $! >"$WORKER_POOL_PID"
}

start_job_server() {
  local pid
  pid=$(live_pids "$JOB_SERVER_PID" FlinkJobServerDriver)
  if [ -n "$pid" ]; then
    step "job server: already running (pid $pid)"
    return
  fi
  step "job server: starting Beam's FlinkJobServerDriver on localhost:$JOB_PORT for Flink at localhost:$REST_PORT"
  # Same JVM options as Flink (Java 17 module opens for Flink's client);
  # --flink-conf-dir makes it submit with our configuration; its own
  # artifacts folder keeps clear of other Beam job servers on this machine.
  # shellcheck disable=SC2086  # JAVA_OPTS_ALL is a list of options
  (cd "$RUN" && exec setsid java $JAVA_OPTS_ALL -Xmx1g \
    -cp "$JOB_SERVER_DIR/*" org.apache.beam.runners.flink.FlinkJobServerDriver \
    --flink-master "localhost:$REST_PORT" \
    --flink-conf-dir "$CONF_DIR" \
    --job-host localhost \
    --job-port "$JOB_PORT" \
    --artifact-port "$ARTIFACT_PORT" \
    --expansion-port "$EXPANSION_PORT" \
    --artifacts-dir "$RUN/artifacts" \
    </dev/null >"$LOG_DIR/job-server.log" 2>&1) &
  echo $! >"$JOB_SERVER_PID"
}

# The processes above start in the background and at once (the TaskManagers
# retry until the JobManager is up), which saves a good part of the start
# time on a small machine; here we wait for each to answer.
wait_ready() {
  up_or_die 90 jobmanager "$JM_PIDS" StandaloneSessionClusterEntrypoint \
    "$LOG_DIR/flink-$FLINK_IDENT_STRING-standalonesession-*.log" rest_up ||
    die "the JobManager's REST endpoint localhost:$REST_PORT did not answer within 90 s (see $LOG_DIR/flink-$FLINK_IDENT_STRING-standalonesession-*.log)."
  step "jobmanager: REST answers on http://localhost:$REST_PORT"
  wait_for 90 "taskmanagers" tm_ready ||
    die "only $(taskmanagers_registered) of $TASKMANAGERS TaskManagers registered with the JobManager within 90 s (see $LOG_DIR/flink-$FLINK_IDENT_STRING-taskexecutor-*.log)."
  step "taskmanagers: $TASKMANAGERS registered with the JobManager"
  up_or_die 60 "worker pool" "$WORKER_POOL_PID" pipelines.worker_pool \
    "$LOG_DIR/worker-pool.log" port_open "$WORKER_POOL_PORT" ||
    die "the worker pool did not listen on port $WORKER_POOL_PORT within 60 s (see $LOG_DIR/worker-pool.log)."
  step "worker pool: listening on localhost:$WORKER_POOL_PORT"
  up_or_die 90 "job server" "$JOB_SERVER_PID" FlinkJobServerDriver \
    "$LOG_DIR/job-server.log" port_open "$JOB_PORT" ||
    die "Beam's Flink job server did not listen on port $JOB_PORT within 90 s (see $LOG_DIR/job-server.log)."
  step "job server: listening on localhost:$JOB_PORT"
}

rest_up() { rest /overview >/dev/null 2>&1; }
tm_ready() { [ "$(taskmanagers_registered)" -ge "$TASKMANAGERS" ]; }

# up_or_die SECONDS NAME PIDFILE PATTERN LOG CHECK...: waits until CHECK
# passes; fails at once, rather than at the timeout, if the process exited.
up_or_die() {
  local seconds=$1 name=$2 file=$3 pattern=$4 log=$5
  shift 5
  up() {
    if "$@"; then return 0; fi
    [ -n "$(live_pids "$file" "$pattern")" ] ||
      die "the $name exited during start (see $log)."
    return 1
  }
  wait_for "$seconds" "$name" up "$@"
}

# Before starting anything: every port a not-yet-running part needs must be
# free, so a clash stops the start before it leaves half a cluster behind.
check_ports() {
  local p busy=()
  if [ -z "$(live_pids "$JM_PIDS" StandaloneSessionClusterEntrypoint)" ]; then
    for p in "$REST_PORT" "$JM_RPC_PORT"; do
      if port_open "$p"; then busy+=("$p"); fi
    done
  fi
  if [ -z "$(live_pids "$WORKER_POOL_PID" pipelines.worker_pool)" ] &&
      port_open "$WORKER_POOL_PORT"; then
    busy+=("$WORKER_POOL_PORT")
  fi
  if [ -z "$(live_pids "$JOB_SERVER_PID" FlinkJobServerDriver)" ]; then
    for p in "$JOB_PORT" "$ARTIFACT_PORT" "$EXPANSION_PORT"; do
      if port_open "$p"; then busy+=("$p"); fi
    done
  fi
  if [ "${#busy[@]}" -gt 0 ]; then
    die "port(s) ${busy[*]} are in use by processes this script did not start; free them (or stop the other cluster) and start again."
  fi
}

start() {
  command -v java >/dev/null || die "Java is needed to run Flink and is not on PATH."
  command -v curl >/dev/null || die "curl is needed to talk to Flink's REST API and is not on PATH."
  [ -x "$VENV/bin/python" ] || die "the project's virtualenv $VENV is missing; run ./run_local.sh --help once to create it."
  mkdir -p "$ENGINES" "$RUN"
  ensure_job_server
  ensure_flink
  write_conf
  check_ports
  step "ports: $REST_PORT $JM_RPC_PORT $JOB_PORT $ARTIFACT_PORT $EXPANSION_PORT $WORKER_POOL_PORT are free or ours"
  start_jobmanager
  start_taskmanagers
  start_worker_pool
  start_job_server
  wait_ready
  step "ready: submit with --job_endpoint localhost:$JOB_PORT --environment EXTERNAL --environment_config localhost:$WORKER_POOL_PORT (Flink UI http://localhost:$REST_PORT)"
}

# --- stop -------------------------------------------------------------------

# stop_group NAME PIDFILE PATTERN: TERM, then KILL after 15 s, the process
# group each live pid in PIDFILE leads (setsid made it a group leader).
stop_group() {
  local name=$1 file=$2 pattern=$3 pid
  pid=$(live_pids "$file" "$pattern")
  if [ -z "$pid" ]; then
    step "$name: not running"
    rm -f "$file"
    return
  fi
  step "$name: stopping (pid $pid)"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  gone() { ! is_ours "$pid" "$pattern"; }
  if ! wait_for 15 "$name" gone; then
    step "$name: still running after 15 s, killing it"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

stop() {
  local flink_home
  stop_group "job server" "$JOB_SERVER_PID" FlinkJobServerDriver
  stop_group "worker pool" "$WORKER_POOL_PID" pipelines.worker_pool
  # Flink's own stop-all stops exactly the pids its start wrote into our
  # pid dir (TERM, then KILL after 10 s).
  flink_home=$(ls -d "$ENGINES"/flink-*/pyflink 2>/dev/null | head -n1 || true)
  if [ -n "$(live_pids "$TM_PIDS" TaskManagerRunner)" ]; then
    step "taskmanagers: stopping $(live_pids "$TM_PIDS" TaskManagerRunner | count_lines)"
    flink_env "$flink_home/bin/taskmanager.sh" stop-all || true
  else
    step "taskmanagers: not running"
  fi
  rm -f "$TM_PIDS"
  if [ -n "$(live_pids "$JM_PIDS" StandaloneSessionClusterEntrypoint)" ]; then
    step "jobmanager: stopping"
    flink_env "$flink_home/bin/jobmanager.sh" stop-all || true
  else
    step "jobmanager: not running"
  fi
  rm -f "$JM_PIDS"
  if ! wait_for 30 "ports" ports_closed "$REST_PORT" "$JM_RPC_PORT" "$JOB_PORT" \
      "$ARTIFACT_PORT" "$EXPANSION_PORT" "$WORKER_POOL_PORT"; then
    die "stopped everything this script started, but a port among $REST_PORT $JM_RPC_PORT $JOB_PORT $ARTIFACT_PORT $EXPANSION_PORT $WORKER_POOL_PORT is still open (another program uses it)."
  fi
  step "stopped: ports $REST_PORT $JM_RPC_PORT $JOB_PORT $ARTIFACT_PORT $EXPANSION_PORT $WORKER_POOL_PORT are closed"
}

# --- status -----------------------------------------------------------------

say_running() {  # say_running NAME PIDS WHERE
  if [ -n "$2" ]; then
    step "$1: running (pid ${2% })$3"
  else
    step "$1: not running"
  fi
}

# Exit 0 when everything runs, 1 otherwise.
status() {
  local ok=0 jm tms js wp tm_lines
  jm=$(live_pids "$JM_PIDS" StandaloneSessionClusterEntrypoint | tr '\n' ' ')
  tms=$(live_pids "$TM_PIDS" TaskManagerRunner | tr '\n' ' ')
  js=$(live_pids "$JOB_SERVER_PID" FlinkJobServerDriver)
  wp=$(live_pids "$WORKER_POOL_PID" pipelines.worker_pool)
  say_running jobmanager "$jm" ""
  step "taskmanagers: $(echo "$tms" | wc -w) of $TASKMANAGERS running${tms:+ (pids ${tms% })}"
  say_running "job server" "$js" ", localhost:$JOB_PORT"
  say_running "worker pool" "$wp" ", localhost:$WORKER_POOL_PORT"
  [ -n "$jm" ] && [ "$(echo "$tms" | wc -w)" -ge "$TASKMANAGERS" ] && [ -n "$js" ] && [ -n "$wp" ] || ok=1
  port_open "$JOB_PORT" || ok=1
  port_open "$WORKER_POOL_PORT" || ok=1
  if overview=$(rest /overview 2>/dev/null); then
    step "rest /overview: $overview"
    tm_lines=$(rest /taskmanagers 2>/dev/null | "$VENV/bin/python" -c '
import json, sys, time
for tm in json.load(sys.stdin)["taskmanagers"]:
    # timeSinceLastHeartbeat is in fact the epoch millis of the last heartbeat.
    print("rest /taskmanagers: %s, %d of %d slots free, last heartbeat %.1f s ago" % (
        tm["id"], tm["freeSlots"], tm["slotsNumber"],
        time.time() - tm["timeSinceLastHeartbeat"] / 1000))
' 2>/dev/null) || tm_lines=""
    [ -n "$tm_lines" ] && echo "$tm_lines" | while read -r line; do step "$line"; done
    [ "$(taskmanagers_registered)" -ge "$TASKMANAGERS" ] || ok=1
  else
    step "rest /overview: no answer on http://localhost:$REST_PORT"
    ok=1
  fi
  if [ "$ok" -eq 0 ]; then
    step "status: running"
  else
    step "status: not (fully) running"
  fi
  return "$ok"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
