#!/usr/bin/env bash
# A Spark standalone cluster on this machine that runs this project's Beam
# Python pipelines, for CI and for trying the portable Spark path by hand.
#
#   scripts/spark_cluster.sh start    # master, 2 workers, job server, SDK pool
#   scripts/spark_cluster.sh status   # what runs; the workers the master sees
#   scripts/spark_cluster.sh stop     # stops all that start started
#
# then submit with Beam's PortableRunner:
#
#   --runner PortableRunner --job_endpoint localhost:8199 \
#   --environment_type EXTERNAL --environment_config localhost:8196 \
#   --environment_cache_millis=86400000
#
# Why the last one: with the default (0) a Spark executor releases its SDK
# worker after every task and asks the pool for a new one, a Python start
# each time (the image sample took 250 s instead of 46 s); a cache longer
# than any job keeps one worker per executor for the whole application
# (executors end with their application, and their workers with them).
# run_spark.sh sets it. The pool is the project's (pipelines/worker_pool.py),
# safe to share between the two executors, which name their workers alike.
# scripts/engines/spark_smoke.py is a quick check.
#
# Everything comes from package registries, nothing from a download site:
#   - Spark: the pyspark package from PyPI (it carries Spark's jars and
#     launch scripts), installed into a cache folder, not into the venv;
#   - Beam's Spark job server: Maven Central does not serve the ready-made
#     beam-runners-spark-3-job-server jar here, so Maven resolves the runner
#     library that holds its main class, SparkJobServerDriver, with its
#     dependencies (scripts/engines/spark-job-server/pom.xml says which
#     versions and why);
#   - the Python SDK workers: Beam's worker pool, run from the project's
#     venv (no Docker), which the Spark executors ask for workers.
#
# Processes:      ports (all on localhost)
#   master        7077 (cluster), 8080 (web UI and /json/)
#   worker 1, 2   8082, 8083 (web UIs); 1 core and 2 GiB each
#   job server    8199 (jobs), 8198 (artifacts), 8197 (expansion); it is the
#                 Spark driver of each job: application UI on 4040
#   worker pool   8196
# These avoid Flink's 8081 and a Flink job server's 8099/8098/8097, so both
# clusters can run side by side. All are below Linux's ephemeral range
# (32768-60999), where any outgoing connection may hold a port: Beam's
# customary 50000 there once left the worker pool unable to listen.
#
# Environment:
#   TFRP_ENGINES  download cache (default ~/.cache/tfrecord-pipelines/engines);
#                 after the first start, start needs no network
#   TFRP_RUN      pids, logs and Spark's work folders
#                 (default /tmp/tfrecord-pipelines-spark)
#
# Each step prints one line on stderr; a failure prints one sentence and
# exits non-zero. start and stop are idempotent.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENGINES="${TFRP_ENGINES:-$HOME/.cache/tfrecord-pipelines/engines}"
RUN="${TFRP_RUN:-/tmp/tfrecord-pipelines-spark}"

# Beam 2.70.0 is the newest beam-runners-spark-3 on Maven Central here; it
# is built against Spark 3.5.0 for Scala 2.12, so the cluster runs exactly
# that Spark (pyspark 3.5.0 bundles Spark 3.5.0's Scala 2.12 jars).
BEAM_SPARK_VERSION=2.70.0
SPARK_VERSION=3.5.0

HOST=localhost
MASTER_PORT=7077
MASTER_UI_PORT=8080
WORKER_UI_PORTS=(8082 8083)
WORKER_CORES=1
WORKER_MEMORY=2g
JOB_PORT=8199
ARTIFACT_PORT=8198
EXPANSION_PORT=8197
POOL_PORT=8196
MASTER_URL="spark://$HOST:$MASTER_PORT"

PYSPARK_DIR="$ENGINES/pyspark-$SPARK_VERSION"
export SPARK_HOME="$PYSPARK_DIR/pyspark"
# Spark binds to the machine's outward address unless told otherwise; the
# whole cluster is on this machine, so keep all of it on loopback.
export SPARK_LOCAL_IP=127.0.0.1
# Master and workers fail rather than take the next free port when theirs
# is taken (launch checks first; this covers a race).
export SPARK_DAEMON_JAVA_OPTS="-Dspark.port.maxRetries=0 ${SPARK_DAEMON_JAVA_OPTS:-}"
JOB_SERVER_DIR="$ENGINES/spark-job-server-$BEAM_SPARK_VERSION"
JOB_SERVER_LIB="$JOB_SERVER_DIR/lib"
POM="$ROOT/scripts/engines/spark-job-server/pom.xml"
VENV="${VENV:-$ROOT/.venv}"

say() { echo "spark_cluster: $*" >&2; }
die() { echo "spark_cluster: error: $*" >&2; exit 1; }

# --- small helpers -----------------------------------------------------------

# Is something listening on localhost:PORT? (bash's /dev/tcp, no extra tool)
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# What each process's command line contains: a pid file left from before a
# reboot may name a pid that some other program has now.
marker() {
  case "$1" in
    master) echo org.apache.spark.deploy.master.Master ;;
    worker-pool) echo pipelines.worker_pool ;;
    worker-*) echo org.apache.spark.deploy.worker.Worker ;;
    job-server) echo SparkJobServerDriver ;;
  esac
}

is_ours() {
  tr '\0' ' ' < "/proc/$2/cmdline" 2>/dev/null | grep -qF -- "$(marker "$1")"
}

# The pid in RUN/NAME.pid if that process is still alive and is ours.
live_pid() {
  local f="$RUN/$1.pid" pid
  [ -f "$f" ] || return 1
  pid="$(cat "$f")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  # Checked twice: while a launch script turns into java, its command line
  # is briefly unreadable.
  is_ours "$1" "$pid" || { sleep 1; is_ours "$1" "$pid"; } || return 1
  echo "$pid"
}

# wait_for SECONDS WHAT COMMAND...: retry COMMAND until it succeeds.
wait_for() {
  local secs="$1" what="$2"; shift 2
  local end=$((SECONDS + secs))
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 1
  done
}

# The master's JSON (http://localhost:8080/json/), or nothing.
master_json() { curl -fsS --max-time 5 "http://$HOST:$MASTER_UI_PORT/json/" 2>/dev/null; }

# How many workers the master lists as ALIVE.
alive_workers() {
  master_json | "$VENV/bin/python" -c '
import json, sys
print(sum(w["state"] == "ALIVE" for w in json.load(sys.stdin)["workers"]))' \
    2>/dev/null || echo 0
}

# launch NAME PORTS COMMAND...: start COMMAND in its own session (so that
# stop can end it with everything it spawned, and nothing else), output to
# RUN/NAME.log, pid to RUN/NAME.pid. Skips it if it already runs; refuses
# if one of PORTS (comma-separated) belongs to some other program, since
# Spark would otherwise quietly move to the next port (onto a worker's or
# Flink's).
launch() {
  local name="$1" ports="$2"; shift 2
  local pid port
  if pid="$(live_pid "$name")"; then
    say "$name already running (pid $pid)"
    return 0
  fi
  for port in ${ports//,/ }; do
    if port_open "$port"; then
      die "port $port, needed by the $name, is taken by a process this script did not start; stop it or free the port."
    fi
  done
  setsid "$@" >"$RUN/$name.log" 2>&1 < /dev/null &
  echo $! > "$RUN/$name.pid"
  say "$name started (pid $!), log $RUN/$name.log"
}

# The last lines of a log, for an error message.
log_tail() { tail -n 5 "$RUN/$1.log" 2>/dev/null | sed 's/^/    /' >&2 || true; }

# failed NAME PORT MESSAGE: a process did not come up; show its log's end,
# stop it (so that no half-started process holds ports) and fail.
failed() {
  log_tail "$1"
  stop_one "$1" "$2" || true
  die "$3"
}

# --- the downloads (once; cached) ---------------------------------------------

ensure_python() {
  # The worker pool runs the pipelines' Python code, so it needs the
  # project installed in the venv; ensure_venv.sh makes sure of that (and
  # is quick when it already is).
  VENV="$VENV" source "$ROOT/scripts/ensure_venv.sh"
  [ -x "$VENV/bin/python" ] || die "the project's venv $VENV has no python."
  say "python environment ready: $VENV"
}

ensure_spark() {
  if [ -x "$SPARK_HOME/bin/spark-class" ] && [ -f "$PYSPARK_DIR/.complete" ]; then
    say "Spark $SPARK_VERSION cached in $PYSPARK_DIR"
    return 0
  fi
  say "installing Spark $SPARK_VERSION (PyPI package pyspark, ~300 MB) into $PYSPARK_DIR"
  rm -rf "$PYSPARK_DIR"
  # --target keeps it out of the project venv: only its jars and launch
  # scripts are used, by Java processes.
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
      --target "$PYSPARK_DIR" "pyspark==$SPARK_VERSION" \
    || die "pip could not install pyspark==$SPARK_VERSION from PyPI."
  [ -x "$SPARK_HOME/bin/spark-class" ] \
    || die "the pyspark package has no bin/spark-class under $SPARK_HOME."
  touch "$PYSPARK_DIR/.complete"
}

ensure_job_server() {
  # The stamp names the pom's hash: editing the pom re-resolves.
  local stamp="$JOB_SERVER_DIR/.complete-$(sha256sum "$POM" | cut -c1-16)"
  if [ -f "$stamp" ]; then
    say "Beam Spark job server $BEAM_SPARK_VERSION cached in $JOB_SERVER_LIB"
    return 0
  fi
  command -v mvn >/dev/null || die "Maven (mvn) is needed once to fetch the Beam Spark job server."
  say "resolving Beam Spark job server $BEAM_SPARK_VERSION and its dependencies with Maven into $JOB_SERVER_LIB"
  rm -rf "$JOB_SERVER_DIR"
  mkdir -p "$JOB_SERVER_LIB"
  if ! mvn -B -q -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$JOB_SERVER_LIB" \
        >"$JOB_SERVER_DIR/mvn.log" 2>&1; then
    grep -m1 'ERROR' "$JOB_SERVER_DIR/mvn.log" >&2 || true
    die "Maven could not resolve the Beam Spark job server (full log: $JOB_SERVER_DIR/mvn.log)."
  fi
  [ -f "$JOB_SERVER_LIB/beam-runners-spark-3-$BEAM_SPARK_VERSION.jar" ] \
    || die "Maven finished but beam-runners-spark-3-$BEAM_SPARK_VERSION.jar is not in $JOB_SERVER_LIB."
  touch "$stamp"
}

# --- the processes -----------------------------------------------------------

start_master() {
  launch master "$MASTER_PORT,$MASTER_UI_PORT" "$SPARK_HOME/bin/spark-class" \
      org.apache.spark.deploy.master.Master \
      --host "$HOST" --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT"
  wait_for 60 "master" master_json >/dev/null \
    || failed master "$MASTER_PORT" "the Spark master did not answer on http://$HOST:$MASTER_UI_PORT/json/ within 60 s (log: $RUN/master.log)."
  say "master up: $MASTER_URL, UI http://$HOST:$MASTER_UI_PORT"
}

start_workers() {
  local i port
  for i in "${!WORKER_UI_PORTS[@]}"; do
    port="${WORKER_UI_PORTS[$i]}"
    mkdir -p "$RUN/work/worker-$((i + 1))"
    # Each worker its own work folder (executor logs and files land there).
    # Every application copies the job server's jars there, about 430 MB a
    # worker: the worker deletes the folders of applications that ended
    # more than 10 minutes ago (checked every 2 minutes), long enough for
    # their executor logs to be read, and stop deletes what is left.
    SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=true \
-Dspark.worker.cleanup.interval=120 -Dspark.worker.cleanup.appDataTtl=600" \
    launch "worker-$((i + 1))" "$port" "$SPARK_HOME/bin/spark-class" \
        org.apache.spark.deploy.worker.Worker "$MASTER_URL" \
        --host "$HOST" --cores "$WORKER_CORES" --memory "$WORKER_MEMORY" \
        --webui-port "$port" --work-dir "$RUN/work/worker-$((i + 1))"
  done
  local want="${#WORKER_UI_PORTS[@]}"
  wait_for 90 "workers" test_workers "$want" \
    || { log_tail worker-1; log_tail worker-2; die "the master lists $(alive_workers) of $want workers alive after 90 s (logs: $RUN/worker-*.log)."; }
  say "$want workers registered with the master"
}
test_workers() { [ "$(alive_workers)" -ge "$1" ]; }

start_worker_pool() {
  # The project's worker pool (pipelines/worker_pool.py): Beam's own kills
  # the wrong SDK worker when two executors share one pool. Its workers run
  # the venv's Python; PATH has the venv first for anything that runs
  # `python`. From $RUN: workers must not import from the caller's folder.
  # --end_task_manager_of_lost_workers: when an SDK worker is killed (the
  # OOM killer, a crash), the pool ends the executor it served, within
  # half a second; its worker starts a new one. Without it that executor
  # fails every task it is given for the rest of the job (it keeps the
  # dead worker's environment) and Spark aborts the job once a task has
  # failed spark.task.maxFailures times, all on it (seen: 4 in a second).
  (cd "$RUN" && PATH="$VENV/bin:$PATH" launch worker-pool "$POOL_PORT" \
      "$VENV/bin/python" -m pipelines.worker_pool --service_port "$POOL_PORT" \
      --end_task_manager_of_lost_workers)
  wait_for 60 "worker pool" port_open "$POOL_PORT" \
    || failed worker-pool "$POOL_PORT" "Beam's Python worker pool did not listen on port $POOL_PORT within 60 s (log: $RUN/worker-pool.log)."
  say "Python SDK worker pool up: $HOST:$POOL_PORT"
}

start_job_server() {
  # spark-submit runs the job server as a Spark driver program in client
  # mode: it sets up the JVM for Spark on Java 17 and passes the spark.*
  # settings below as system properties, which the SparkContext that Beam
  # creates for each job reads.
  #   - driver class path: Beam's jars first, then Spark's own;
  #   - executor class path: the same Beam jars, read from this machine's
  #     cache (every worker is on this machine), so executors load Beam's
  #     classes from where the driver does. (Beam also hands Spark its whole
  #     class path to ship, as the job gives no --files_to_stage: 384 jars
  #     that each executor fetches from the driver, ~7 s per job.);
  #   - spark.ui.port 4040 with retries: a job's UI; 4041... if taken;
  #   - 2 GiB executors: with Spark's default, 1 GiB, the 4,000,000-row
  #     sensor benchmark failed: its executors exited with code 52 (out of
  #     memory) in Beam's GroupByKey (GroupNonMergingWindowsFunctions), 4
  #     times, and Spark aborted the job;
  #   - 32 attempts per task instead of Spark's 4: an executor whose SDK
  #     worker died keeps the dead worker's environment (Beam caches it,
  #     --environment_cache_millis) and fails every task it is given at
  #     once ("CANCELLED: call already cancelled"), about 25 a second here,
  #     until the worker pool ends it (start_worker_pool). Measured: a task
  #     failed 10 times in that half second while the other executor was
  #     still starting (tests/engines/test_spark_faults.py); with 4 Spark
  #     aborted the job. The cost: a task that fails for good is tried 32
  #     times before the job fails.
  local cp="$JOB_SERVER_LIB/*"
  launch job-server "$JOB_PORT,$ARTIFACT_PORT,$EXPANSION_PORT" \
      "$SPARK_HOME/bin/spark-submit" \
      --master "$MASTER_URL" --deploy-mode client \
      --name beam-spark-job-server \
      --class org.apache.beam.runners.spark.SparkJobServerDriver \
      --driver-memory 1g \
      --driver-class-path "$cp" \
      --conf "spark.executor.extraClassPath=$cp" \
      --conf "spark.executor.memory=2g" \
      --conf "spark.local.dir=$RUN/local" \
      --conf "spark.ui.port=4040" \
      --conf "spark.task.maxFailures=32" \
      "$JOB_SERVER_LIB/beam-runners-spark-3-$BEAM_SPARK_VERSION.jar" \
      --spark-master-url "$MASTER_URL" --job-host "$HOST" \
      --job-port "$JOB_PORT" --artifact-port "$ARTIFACT_PORT" \
      --expansion-port "$EXPANSION_PORT" \
      --artifacts-dir "$RUN/artifacts"
  wait_for 120 "job server" job_server_ready \
    || failed job-server "$JOB_PORT" "Beam's Spark job server did not listen on port $JOB_PORT within 120 s (log: $RUN/job-server.log)."
  say "Beam Spark job server up: $HOST:$JOB_PORT (artifacts $ARTIFACT_PORT, expansion $EXPANSION_PORT)"
}
job_server_ready() {
  # Only whether it is alive: while spark-submit turns into java, its
  # command line is briefly unreadable, so no marker check here.
  kill -0 "$(cat "$RUN/job-server.pid")" 2>/dev/null \
    || { log_tail job-server; die "Beam's Spark job server exited at start (log: $RUN/job-server.log)."; }
  port_open "$JOB_PORT"
}

# --- the commands ------------------------------------------------------------

cmd_start() {
  local t0=$SECONDS
  command -v java >/dev/null || die "Java is needed (Spark and the job server are Java programs); install a JDK 17."
  command -v curl >/dev/null || die "curl is needed to read the Spark master's status."
  command -v setsid >/dev/null || die "setsid (util-linux) is needed to start each process in its own process group."
  mkdir -p "$RUN" "$RUN/local" "$RUN/artifacts" "$ENGINES"
  ensure_python
  ensure_spark
  ensure_job_server
  start_master
  start_workers
  start_worker_pool
  start_job_server
  # --environment_cache_millis: see the top of this file.
  say "cluster ready in $((SECONDS - t0)) s; submit with --runner PortableRunner --job_endpoint $HOST:$JOB_PORT --environment_type EXTERNAL --environment_config $HOST:$POOL_PORT --environment_cache_millis=86400000"
}

# stop_one NAME PORT: end the process group started as NAME, then wait
# until PORT is closed.
stop_one() {
  local name="$1" port="$2" pid
  if ! pid="$(live_pid "$name")"; then
    rm -f "$RUN/$name.pid"
    say "$name not running"
    return 0
  fi
  # Its own session and process group (see launch): this reaches the
  # processes it spawned (executors, SDK workers) and nothing else.
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  if ! wait_for 30 "$name" not_alive "$pid"; then
    say "$name did not stop within 30 s; killing it"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    wait_for 10 "$name" not_alive "$pid" || die "could not stop the $name (pid $pid)."
  fi
  wait_for 30 "port $port" port_closed "$port" \
    || die "the $name stopped but port $port is still open."
  rm -f "$RUN/$name.pid"
  say "$name stopped (pid $pid)"
}
not_alive() { ! kill -0 "$1" 2>/dev/null; }
port_closed() { ! port_open "$1"; }

cmd_stop() {
  # Clients first, the master last.
  stop_one job-server "$JOB_PORT"
  stop_one worker-pool "$POOL_PORT"
  local i
  for i in "${!WORKER_UI_PORTS[@]}"; do
    stop_one "worker-$((i + 1))" "${WORKER_UI_PORTS[$i]}"
  done
  stop_one master "$MASTER_PORT"
  # The applications' copies of the jars and their logs (see start_workers).
  rm -rf "$RUN/work"
  say "all stopped"
}

cmd_status() {
  local bad=0 name pid
  for name in master worker-1 worker-2 worker-pool job-server; do
    if pid="$(live_pid "$name")"; then
      say "$name running (pid $pid)"
    else
      say "$name not running"; bad=1
    fi
  done
  local json
  if json="$(master_json)"; then
    # One line per worker and per application the master knows.
    "$VENV/bin/python" - "$json" >&2 <<'EOF'
import json, sys
m = json.loads(sys.argv[1])
alive = [w for w in m["workers"] if w["state"] == "ALIVE"]
print("spark_cluster: master %s %s: %d worker(s) alive, %d running and %d "
      "completed application(s)" % (m["url"], m["status"], len(alive),
                                    len(m["activeapps"]),
                                    len(m["completedapps"])))
for w in m["workers"]:
    print("spark_cluster:   worker %s %s, %d/%d cores used"
          % (w["id"], w["state"], w["coresused"], w["cores"]))
EOF
    [ "$(alive_workers)" -ge "${#WORKER_UI_PORTS[@]}" ] || bad=1
  else
    say "master does not answer on http://$HOST:$MASTER_UI_PORT/json/"; bad=1
  fi
  if port_open "$JOB_PORT"; then say "job server listening on $HOST:$JOB_PORT"; else say "nothing listens on job port $JOB_PORT"; bad=1; fi
  if port_open "$POOL_PORT"; then say "worker pool listening on $HOST:$POOL_PORT"; else say "nothing listens on worker pool port $POOL_PORT"; bad=1; fi
  [ "$bad" -eq 0 ] || die "the cluster is not fully up."
  say "cluster up"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
