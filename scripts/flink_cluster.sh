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
#       --environment EXTERNAL --environment_config localhost:8096
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
# running, stop only stops processes whose pid files this script wrote.
#
# Each TaskManager runs under a small supervisor (this script, run as
# `flink_cluster.sh supervise-taskmanager N`), as a resource manager
# (Kubernetes, YARN, systemd) would keep it: when the JVM exits without
# stop having asked for it, the supervisor starts a new one after a short
# back-off, so a job that lost a TaskManager gets its slot back without a
# human. A TaskManager that keeps dying is given up on (see
# TM_RESTART_LIMIT); start supervises it again. status shows the restarts.
#
# Ports (all on localhost): Flink REST 8081, JobManager RPC 6123, job server
# 8099 (jobs) / 8098 (artifacts) / 8097 (expansion), worker pool 8096. All
# are below Linux's ephemeral range (32768-60999), where any outgoing
# connection may hold a port (Beam's customary 50000 is in it).
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
WORKER_POOL_PORT=8096

CONF_DIR="$RUN/conf"
LOG_DIR="$RUN/log"
PID_DIR="$RUN/pid"
# Flink's working files (each TaskManager's tm_* folder with the jobs' jars,
# spill and shuffle files): here, not loose in /tmp, so stop can remove them.
TMP_DIR="$RUN/tmp"
# Flink's daemon scripts name their pid files flink-<ident>-<daemon>.pid.
export FLINK_IDENT_STRING=tfrp
JM_PIDS="$PID_DIR/flink-$FLINK_IDENT_STRING-standalonesession.pid"
# TaskManagers started by Flink's daemon script, as earlier versions of this
# script did; still counted and stopped, but nothing restarts them.
TM_PIDS="$PID_DIR/flink-$FLINK_IDENT_STRING-taskexecutor.pid"
# Supervised TaskManager N: its supervisor's pid, the JVM's pid file (which
# Flink's console script writes; the ident gives each TaskManager its own
# pid file and log, flink-tfrp-tmN-taskexecutor-0-HOST.log) and the count of
# restarts so far ("COUNT EPOCH EXIT_CODE" of the last one).
tm_supervisor_pid() { echo "$PID_DIR/taskmanager-$1-supervisor.pid"; }
tm_ident() { echo "$FLINK_IDENT_STRING-tm$1"; }
tm_jvm_pid() { echo "$PID_DIR/flink-$(tm_ident "$1")-taskexecutor.pid"; }
tm_restarts() { echo "$PID_DIR/taskmanager-$1.restarts"; }
# The trailing space keeps "... 1 " from matching "... 10 ".
tm_pattern() { echo "flink_cluster.sh supervise-taskmanager $1 "; }
# Its JVM's log (named by Flink's console script; log4j starts a new file
# at each start when the last one holds anything).
tm_log() { echo "$LOG_DIR/flink-$(tm_ident "$1")-taskexecutor-0-$HOSTNAME.log"; }

# log_position FILE: "INODE SIZE" of FILE now ("- 0" when absent).
log_position() {
  stat -c '%i %s' "$1" 2>/dev/null || echo "- 0"
}

# logged_since FILE "INODE SIZE" TEXT: whether TEXT was written to FILE
# since log_position gave "INODE SIZE": in all of it if it is a new file,
# else in what was appended.
logged_since() {
  local inode size
  read -r inode size <<<"$2"
  [ -f "$1" ] || return 1
  if [ "$(stat -c %i "$1")" = "$inode" ]; then
    tail -c "+$((size + 1))" "$1" | grep -qF -- "$3"
  else
    grep -qF -- "$3" "$1"
  fi
}

# Restarting a TaskManager: wait TM_BACKOFF_FIRST seconds after the first
# exit (short, as the job waits for the slot meanwhile), doubling up to
# TM_BACKOFF_MAX for one that dies again soon; a JVM that ran
# TM_STABLE_SECONDS resets the back-off. A TaskManager that exits before it
# has registered at the ResourceManager is in a crash loop (a port taken,
# a broken config, a machine out of memory) that restarting does not fix:
# more than TM_RESTART_LIMIT of those within TM_RESTART_WINDOW seconds and
# the supervisor gives up and says so in its log and in status. One that
# registered and was then lost (killed, out of memory in a job, its SDK
# worker gone) is always restarted, with the back-off, as Kubernetes
# restarts a pod: Flink's restart strategy decides when the job gives up.
TM_BACKOFF_FIRST=2
TM_BACKOFF_MAX=30
TM_STABLE_SECONDS=60
TM_RESTART_LIMIT=5
TM_RESTART_WINDOW=600
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
  mkdir -p "$CONF_DIR" "$LOG_DIR" "$PID_DIR" "$RUN/artifacts" "$TMP_DIR"
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
taskmanager.numberOfTaskSlots: 1
parallelism.default: $TASKMANAGERS

# Memory, sized for how Beam's Flink runner (batch) moves data. It runs a
# task's whole partition as one bundle, and each direction of its gRPC data
# stream to the SDK worker holds up to 100 messages of up to about 10 MB,
# about 1 GB per running task:
# - what the SDK worker sends back waits in the task heap until the bundle
#   ends (a queue of 100 messages in Beam's BeamFnDataInboundObserver);
# - what the task sends to the SDK worker sits in gRPC's buffers, JVM direct
#   memory counted as task off-heap memory (Beam's DirectStreamObserver asks
#   whether the stream is ready once every 100 messages).
# With Flink's default split of a 3 GiB TaskManager (40% managed memory,
# 481 MiB task heap) and 512 MiB task off-heap, an 800,000-document text run
# first ran out of heap in Beam's gRPC thread with 540 MB of output buffered
# (and hung: see cluster.uncaught-exception-handling below), then, with more
# heap, out of direct memory sending 10 MB batches to an SDK worker. With 2
# GiB and no task off-heap memory (Flink's default), a 20,000-image run ran
# out of direct memory the same way. Beam's batch translation sorts little
# in managed memory, so it gets less than Flink's default share.
taskmanager.memory.task.heap.size: 1536m
taskmanager.memory.task.off-heap.size: 1280m
taskmanager.memory.managed.size: 512m

# An error outside a task's own thread (an OutOfMemoryError in Beam's gRPC
# threads, above) ends the TaskManager, so its tasks fail over and the job
# recovers or fails, instead of waiting for ever on a dead data stream
# (Flink's default only logs it).
cluster.uncaught-exception-handling: FAIL

# Working files in the run folder. A TaskManager keeps each job's jars
# (about 150 MB for a Beam job) until blob.service.cleanup.interval after
# the job ends (an hour by default), and one that is killed never removes
# its folder: in /tmp, test runs left 31 GB there.
io.tmp.dirs: $TMP_DIR
blob.service.cleanup.interval: 60

# Beam's batch (DataSet) translation of a real pipeline has ~200 operators,
# many running at once in a slot, and Flink 1.19 reserves 512 network
# buffers (16 MiB) for every blocking result (sort shuffle). With Flink's
# default network memory (~115 MiB here) the preprocessing job failed with
# "Insufficient number of network buffers: required 512, but only 49
# available". So: more network memory, and a smaller reservation per result.
taskmanager.memory.network.min: 256m
taskmanager.memory.network.max: 256m
taskmanager.network.sort-shuffle.min-buffers: 64

# Beam's runner is on the cluster's own classpath (see beam_classpath in
# scripts/flink_cluster.sh); parent-first makes jobs use that copy rather
# than the one in the jars each job ships. This cluster runs Beam jobs only.
classloader.resolve-order: parent-first

# Survive a lost TaskManager or SDK worker. A killed TaskManager is noticed
# within seconds: its heartbeat requests (every 2 s) fail to connect, and
# heartbeat.rpc-failure-threshold such failures in a row mark it lost. One
# that is alive but does not answer (a JVM starved of CPU on a loaded
# machine, a long GC pause) is declared lost only after heartbeat.timeout,
# Flink's default 50 s: 10 s was tripped by a busy 2-core machine, and the
# job failed over for nothing. The price: a TaskManager that hangs for good
# holds its tasks up to 50 s before they are restarted elsewhere. Its
# supervisor starts a new one meanwhile.
# Region failover restarts only the regions that failed, plus the producers
# of the blocking results that were stored on the lost TaskManager, not the
# whole job; a restarted region waits for free slots (up to
# slot.request.timeout, 5 min), which the replacement TaskManager offers.
# Flink counts every failed task as one restart attempt, and Beam's batch
# job runs many small regions at once in a slot: losing one TaskManager
# failed 11 tasks within 0.2 s, so 10 attempts (3 in the first version)
# failed the job on the spot ("Recovery is suppressed by
# FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts=10...)").
# 100 attempts survive a few such faults in one job; the price is that a job
# broken for good (a failing step) retries for some minutes before it
# fails. A short delay: the failed tasks of one fault all wait it out at
# once, and it only postpones recovery.
heartbeat.interval: 2000
heartbeat.timeout: 50000
heartbeat.rpc-failure-threshold: 2
jobmanager.execution.failover-strategy: region
restart-strategy.type: fixed-delay
restart-strategy.fixed-delay.attempts: 100
restart-strategy.fixed-delay.delay: 2 s
EOF
}

# --- start ------------------------------------------------------------------

# beam_classpath: Beam's Flink runner and its own dependencies (the job
# server's jars without Flink's, which flink-dist holds, and without logging
# bindings) for the JobManager's and TaskManagers' own classpath. Flink's
# scripts append HADOOP_CLASSPATH after flink-dist, so where both hold a
# class, Flink's copy wins.
#
# Why the runner must be there and not only in the jars the job server
# ships with each job: Beam's Flink runner keeps a task's Python SDK
# workers for the next task of the job (--environment_cache_millis) only
# when its own classes come from Flink's parent classloader
# (FlinkExecutableStageContextFactory releases them at once otherwise).
# Loaded from the job's jars, every task of a 200-operator batch job
# started two new SDK workers, each importing TensorFlow: about a minute of
# a small run. With classloader.resolve-order parent-first (config.yaml)
# the cluster's copy is the one used.
beam_classpath() {
  local jar cp=""
  for jar in "$JOB_SERVER_DIR"/*.jar; do
    case "${jar##*/}" in
      flink-* | slf4j-* | log4j-*) continue ;;
    esac
    cp="$cp${cp:+:}$jar"
  done
  echo "$cp"
}

flink_env() {  # runs one of Flink's bin/ scripts with our configuration
  HADOOP_CLASSPATH=$(beam_classpath) \
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

# start_taskmanagers: a supervisor for each of the TASKMANAGERS places
# that has none. A TaskManager an earlier version of this script started
# (unsupervised) still fills a place, so start never runs more than
# TASKMANAGERS; stop and start again to supervise it.
start_taskmanagers() {
  local legacy i pid
  if [ -f "$TM_PIDS" ]; then
    # Forget dead ones so the pid file lists only live TaskManagers.
    live_pids "$TM_PIDS" TaskManagerRunner >"$TM_PIDS.live"
    mv "$TM_PIDS.live" "$TM_PIDS"
    [ -s "$TM_PIDS" ] || rm -f "$TM_PIDS"
  fi
  legacy=$(live_pids "$TM_PIDS" TaskManagerRunner | count_lines)
  for ((i = 1; i <= TASKMANAGERS; i++)); do
    pid=$(live_pids "$(tm_supervisor_pid "$i")" "$(tm_pattern "$i")")
    if [ -n "$pid" ]; then
      step "taskmanager $i: already running under its supervisor (pid $pid)"
    elif [ "$legacy" -gt 0 ]; then
      legacy=$((legacy - 1))
      step "taskmanager $i: an unsupervised TaskManager started by an older version of this script runs in its place; stop and start to supervise it"
    else
      step "taskmanager $i: starting it under a supervisor that restarts it if it exits (log in $LOG_DIR/taskmanager-$i-supervisor.log)"
      rm -f "$(tm_restarts "$i")"
      # setsid: the supervisor leads its own process group, which its JVM
      # joins, so stop can end both even if the supervisor hangs.
      setsid "$BASH" "$ROOT/scripts/flink_cluster.sh" supervise-taskmanager \
        "$i" </dev/null >>"$LOG_DIR/taskmanager-$i-supervisor.log" 2>&1 &
      echo $! >"$(tm_supervisor_pid "$i")"
    fi
  done
}

# supervise_taskmanager N: runs TaskManager N in the foreground and starts
# it again whenever it exits, until this process gets TERM or INT (stop
# sends TERM, which it passes on to the JVM, and then exits without
# restarting). Runs detached, from start_taskmanagers; its output is its
# log.
supervise_taskmanager() {
  local i=$1 jvm="" stopping=0 rc started ran backoff=$TM_BACKOFF_FIRST
  local restarts=0 recent=() t kept log_mark how
  [[ "$i" =~ ^[0-9]+$ ]] || die "supervise-taskmanager needs a TaskManager number."
  FLINK_HOME=$(ls -d "$ENGINES/flink-$(runner_flink_version)/pyflink")
  say() { echo "$(date '+%F %T') taskmanager $i supervisor: $*"; }
  # Not `die`/errexit from here on: a supervisor that stops on a failed
  # command would leave its TaskManager unreplaced.
  set +e
  trap 'stopping=1; if [ -n "$jvm" ]; then kill -TERM "$jvm" 2>/dev/null; fi' TERM INT
  say "supervising (pid $$)"
  while :; do
    # The dead JVM's pid file line would otherwise number the next log
    # file -1-, -2-, ... (Flink's console script counts the lines).
    rm -f "$(tm_jvm_pid "$i")"
    log_mark=$(log_position "$(tm_log "$i")")
    started=$SECONDS
    # start-foreground execs the JVM, so $! is the TaskManager itself.
    # STD_REDIRECT_TO_FILE: its stdout and stderr go to its .out and .err
    # files, not a second copy of its log in ours.
    FLINK_IDENT_STRING=$(tm_ident "$i") STD_REDIRECT_TO_FILE=true \
      HADOOP_CLASSPATH=$(beam_classpath) \
      FLINK_CONF_DIR="$CONF_DIR" FLINK_LOG_DIR="$LOG_DIR" \
      FLINK_PID_DIR="$PID_DIR" \
      "$FLINK_HOME/bin/taskmanager.sh" start-foreground </dev/null &
    jvm=$!
    say "started the TaskManager (pid $jvm)"
    # TERM may have come while the JVM started, before the trap knew it.
    if [ "$stopping" -eq 1 ]; then kill -TERM "$jvm" 2>/dev/null; fi
    # wait returns early when a trapped signal arrives; wait again until
    # the JVM has really exited (then wait returns its exit code).
    while :; do
      wait "$jvm"
      rc=$?
      kill -0 "$jvm" 2>/dev/null || break
    done
    jvm=""
    ran=$((SECONDS - started))
    if [ "$stopping" -eq 1 ]; then
      say "stopped: the TaskManager exited with code $rc after stop asked"
      exit 0
    fi
    restarts=$((restarts + 1))
    echo "$restarts $(date +%s) $rc" >"$(tm_restarts "$i")"
    # Exits before registering within the window, this one included.
    kept=()
    if logged_since "$(tm_log "$i")" "$log_mark" \
        'Successful registration at resource manager'; then
      how="after registering"
    else
      how="before registering at the ResourceManager"
      recent+=("$SECONDS")
    fi
    for t in "${recent[@]}"; do
      if [ $((SECONDS - t)) -lt "$TM_RESTART_WINDOW" ]; then kept+=("$t"); fi
    done
    recent=("${kept[@]}")
    if [ "${#recent[@]}" -gt "$TM_RESTART_LIMIT" ]; then
      say "gave up: the TaskManager exited before registering at the ResourceManager $((TM_RESTART_LIMIT + 1)) times within $TM_RESTART_WINDOW s, last with code $rc after $ran s; see $(tm_log "$i"), then run start again"
      echo "$restarts $(date +%s) $rc gave-up" >"$(tm_restarts "$i")"
      rm -f "$(tm_supervisor_pid "$i")"
      exit 1
    fi
    if [ "$ran" -ge "$TM_STABLE_SECONDS" ]; then backoff=$TM_BACKOFF_FIRST; fi
    say "the TaskManager exited unexpectedly with code $rc after $ran s, $how; restart $restarts in $backoff s"
    # sleep in the background: a trapped TERM interrupts wait, not sleep.
    sleep "$backoff" &
    wait $!
    if [ "$stopping" -eq 1 ]; then
      kill $! 2>/dev/null
      say "stopped before restarting"
      exit 0
    fi
    backoff=$((backoff * 2 > TM_BACKOFF_MAX ? TM_BACKOFF_MAX : backoff * 2))
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
  # A worker lost in the middle of a bundle leaves Beam's Flink runner
  # waiting for ever; the pool then ends that worker's TaskManager, which
  # its supervisor replaces and Flink recovers from (pipelines/worker_pool.py).
  (cd "$RUN" && PATH="$VENV/bin:$PATH" exec setsid "$VENV/bin/python" \
    -m pipelines.worker_pool --service_port "$WORKER_POOL_PORT" \
    --end_task_manager_of_lost_workers \
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
    die "only $(taskmanagers_registered) of $TASKMANAGERS TaskManagers registered with the JobManager within 90 s (see $LOG_DIR/flink-$FLINK_IDENT_STRING-tm*-taskexecutor-*.log and $LOG_DIR/taskmanager-*-supervisor.log)."
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
  if [ -z "$(live_pids "$JM_PIDS" StandaloneSessionClusterEntrypoint)" ] &&
      [ -z "$(live_pids "$TM_PIDS" TaskManagerRunner)" ]; then
    # What Flink processes killed before left behind.
    rm -rf "${TMP_DIR:?}"/*
  fi
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

# stop_supervised_taskmanagers: each supervisor first, so that it restarts
# nothing: TERM makes it pass TERM on to its JVM (Flink shuts down in a few
# seconds) and exit once the JVM has. What is left after 30 s (a hung JVM)
# is killed, the whole process group and the JVM named in its pid file.
stop_supervised_taskmanagers() {
  local i sup jvm any=0
  for ((i = 1; i <= TASKMANAGERS; i++)); do
    sup=$(live_pids "$(tm_supervisor_pid "$i")" "$(tm_pattern "$i")")
    jvm=$(live_pids "$(tm_jvm_pid "$i")" TaskManagerRunner)
    if [ -z "$sup$jvm" ]; then
      rm -f "$(tm_supervisor_pid "$i")" "$(tm_jvm_pid "$i")"
      continue
    fi
    any=1
    step "taskmanager $i: stopping${sup:+ its supervisor (pid $sup) and}${jvm:+ the TaskManager (pid $jvm)}"
    if [ -n "$sup" ]; then
      kill -TERM "$sup" 2>/dev/null || true
    else
      # A supervisor that gave up or was killed left its JVM (if any).
      kill -TERM "$jvm" 2>/dev/null || true
    fi
    tm_gone() {
      ! is_ours "$sup" "$(tm_pattern "$i")" && ! is_ours "$jvm" TaskManagerRunner
    }
    if ! wait_for 30 "taskmanager $i" tm_gone; then
      step "taskmanager $i: still running after 30 s, killing it"
      if [ -n "$sup" ]; then kill -KILL -- "-$sup" 2>/dev/null || true; fi
      if [ -n "$jvm" ]; then kill -KILL "$jvm" 2>/dev/null || true; fi
    fi
    rm -f "$(tm_supervisor_pid "$i")" "$(tm_jvm_pid "$i")"
  done
  if [ "$any" -eq 0 ] && [ -z "$(live_pids "$TM_PIDS" TaskManagerRunner)" ]; then
    step "taskmanagers: not running"
  fi
}

stop() {
  local flink_home
  stop_group "job server" "$JOB_SERVER_PID" FlinkJobServerDriver
  stop_group "worker pool" "$WORKER_POOL_PID" pipelines.worker_pool
  # Flink's own stop-all stops exactly the pids its start wrote into our
  # pid dir (TERM, then KILL after 10 s).
  flink_home=$(ls -d "$ENGINES"/flink-*/pyflink 2>/dev/null | head -n1 || true)
  stop_supervised_taskmanagers
  if [ -n "$(live_pids "$TM_PIDS" TaskManagerRunner)" ]; then
    step "taskmanagers: stopping $(live_pids "$TM_PIDS" TaskManagerRunner | count_lines) unsupervised"
    flink_env "$flink_home/bin/taskmanager.sh" stop-all || true
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
  rm -rf "${TMP_DIR:?}"
  step "stopped: ports $REST_PORT $JM_RPC_PORT $JOB_PORT $ARTIFACT_PORT $EXPANSION_PORT $WORKER_POOL_PORT are closed; working files removed"
}

# --- status -----------------------------------------------------------------

say_running() {  # say_running NAME PIDS WHERE
  if [ -n "$2" ]; then
    step "$1: running (pid ${2% })$3"
  else
    step "$1: not running"
  fi
}

# all_taskmanager_pids: the live TaskManager JVMs, supervised or not.
all_taskmanager_pids() {
  local i
  live_pids "$TM_PIDS" TaskManagerRunner
  for ((i = 1; i <= TASKMANAGERS; i++)); do
    live_pids "$(tm_jvm_pid "$i")" TaskManagerRunner
  done
}

# taskmanager_status: one line per supervised TaskManager, with its
# restarts (a restart is a fault someone may want to look into).
taskmanager_status() {
  local i sup jvm count when rc gave line
  for ((i = 1; i <= TASKMANAGERS; i++)); do
    sup=$(live_pids "$(tm_supervisor_pid "$i")" "$(tm_pattern "$i")")
    jvm=$(live_pids "$(tm_jvm_pid "$i")" TaskManagerRunner)
    count=0 when="" rc="" gave=""
    if [ -f "$(tm_restarts "$i")" ]; then
      read -r count when rc gave <"$(tm_restarts "$i")" || true
    fi
    if [ -n "$sup" ]; then
      line="supervised (supervisor pid $sup), ${jvm:+TaskManager pid $jvm}"
      [ -n "$jvm" ] || line+="TaskManager restarting"
    elif [ -n "$gave" ]; then
      line="not running: its supervisor gave up after $count restarts (see $LOG_DIR/taskmanager-$i-supervisor.log)"
    elif [ -n "$jvm" ]; then
      line="TaskManager pid $jvm without its supervisor"
    else
      continue  # not started by a supervisor (or stopped)
    fi
    if [ "${count:-0}" -gt 0 ]; then
      line+=", restarted $count time(s), last at $(date -d "@$when" '+%F %T') after an exit with code $rc"
    else
      line+=", no restarts"
    fi
    step "taskmanager $i: $line"
  done
}

# Exit 0 when everything runs, 1 otherwise.
status() {
  local ok=0 jm tms js wp tm_lines
  jm=$(live_pids "$JM_PIDS" StandaloneSessionClusterEntrypoint | tr '\n' ' ')
  tms=$(all_taskmanager_pids | tr '\n' ' ')
  js=$(live_pids "$JOB_SERVER_PID" FlinkJobServerDriver)
  wp=$(live_pids "$WORKER_POOL_PID" pipelines.worker_pool)
  say_running jobmanager "$jm" ""
  step "taskmanagers: $(echo "$tms" | wc -w) of $TASKMANAGERS running${tms:+ (pids ${tms% })}"
  taskmanager_status
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
  supervise-taskmanager) supervise_taskmanager "${2:-}" ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
