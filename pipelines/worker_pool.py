"""Beam's Python SDK worker pool, made safe to share between task managers.

    python -m pipelines.worker_pool --service_port 8096

A pipeline with `--environment_type EXTERNAL --environment_config
HOST:8096` has each Flink TaskManager (or Spark executor) ask the pool at
that address for SDK workers. Start it from an environment with this
project installed; it starts each worker with its own Python.

Beam's pool (`python -m apache_beam.runners.worker.worker_pool_main`) is
not safe to share: each task manager numbers its workers on its own ("1-1",
"4-1", ...), so two task managers on one machine ask one pool for workers
with the same id, and Beam's pool keeps its processes in a dict by id and
kills the process under that id on StopWorker. When one task manager
released its environment, the pool killed the *other* one's worker, whose
tasks then failed ("No client connected within timeout" after 3 minutes on
Flink, "CANCELLED: call already cancelled" on Spark).

Here StopWorker kills nothing: a worker ends by itself when its task
manager closes the control channel (SdkHarness.run returns), and exited
workers are reaped. The pool leads its process group (start it with
setsid), so ending the group ends the workers that are left. Workers write
to the pool's stdout and stderr.

--end_task_manager_of_lost_workers: a worker that dies in the middle of a
bundle (killed, out of memory, a crash in native code) leaves Beam 2.70's
Flink runner waiting for ever: measured, the TaskManager logs
"FnApiControlClient closed, clearing outstanding requests" and its tasks
stay RUNNING with no failure and no new worker. With this flag the pool
ends (SIGKILL) the process that listens on a lost worker's control
endpoint, the task manager it served, so that the engine recovers as from
a lost task manager (Flink fails over the regions it ran; a supervisor or
resource manager starts a new one). Lost means killed by a signal; a
worker that exits with a code (0, or 1 after an error on a channel its
task manager closed, which is common) is not. scripts/flink_cluster.sh
turns it on.
"""

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_fn_api_pb2_grpc

_LOGGER = logging.getLogger('pipelines.worker_pool')

# Runs one SDK harness connected to the TaskManager's control endpoint; the
# same entry point Beam's own pool uses in process mode.
_HARNESS = ('from apache_beam.runners.worker.sdk_worker import SdkHarness; '
            'SdkHarness({url!r}, worker_id={worker_id!r}, '
            'state_cache_size={cache}, '
            'data_buffer_time_limit_ms={buffer_ms}).run()')


class SharedWorkerPool(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
  """Starts one SDK harness process per StartWorker; never kills on
  StopWorker, since worker ids from different task managers collide."""

  def __init__(self, state_cache_size=0, data_buffer_time_limit_ms=-1,
               end_task_manager_of_lost_workers=False):
    self._state_cache_size = state_cache_size
    self._data_buffer_time_limit_ms = data_buffer_time_limit_ms
    self._end_owner = end_task_manager_of_lost_workers
    self._lock = threading.Lock()
    self._workers = []  # [(worker_id, Popen, control endpoint URL)]

  def StartWorker(self, request, context):
    command = [
        sys.executable, '-c',
        _HARNESS.format(url=request.control_endpoint.url,
                        worker_id=request.worker_id,
                        cache=self._state_cache_size,
                        buffer_ms=self._data_buffer_time_limit_ms)]
    try:
      process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                 close_fds=True)
    except OSError as e:
      return beam_fn_api_pb2.StartWorkerResponse(error=str(e))
    with self._lock:
      self._workers.append((request.worker_id, process,
                            request.control_endpoint.url))
    _LOGGER.info('started worker %s (pid %d) for %s', request.worker_id,
                 process.pid, request.control_endpoint.url)
    return beam_fn_api_pb2.StartWorkerResponse()

  def StopWorker(self, request, context):
    _LOGGER.info('stop requested for worker %s; it exits when its '
                 'TaskManager closes the control channel', request.worker_id)
    self.reap()
    return beam_fn_api_pb2.StopWorkerResponse()

  def reap(self):
    with self._lock:
      running, lost = [], []
      for worker_id, process, url in self._workers:
        if process.poll() is None:
          running.append((worker_id, process, url))
          continue
        _LOGGER.info('worker %s (pid %d) exited with %s', worker_id,
                     process.pid, process.returncode)
        # Killed by a signal (SIGKILL, the kernel's OOM killer, SIGSEGV):
        # lost. A worker whose task manager closed its channels exits with
        # 0 or, as often, 1 (an error on the closed stream): not lost.
        if process.returncode < 0:
          lost.append((worker_id, process.pid, url))
      self._workers = running
    if self._end_owner:
      for worker_id, pid, url in lost:
        end_listener(url, f'worker {worker_id} (pid {pid}) was lost')


def listening_inodes(port):
  """Socket inodes listening on TCP `port` (IPv4 or IPv6)."""
  inodes = set()
  for table in ('/proc/net/tcp', '/proc/net/tcp6'):
    try:
      with open(table) as f:
        rows = f.read().splitlines()[1:]
    except OSError:
      continue
    for row in rows:
      fields = row.split()
      # local address "HEX_IP:HEX_PORT", state 0A is LISTEN.
      if fields[3] == '0A' and int(fields[1].rsplit(':', 1)[1], 16) == port:
        inodes.add(fields[9])
  return inodes


def pid_listening_on(port, pids):
  """The one of `pids` that holds a socket listening on TCP `port`, or
  None."""
  inodes = {f'socket:[{i}]' for i in listening_inodes(port)}
  if not inodes:
    return None
  for pid in pids:
    if any(target in inodes for target in open_targets(pid)):
      return int(pid)
  return None


def open_targets(pid):
  """What process pid's open file descriptors point to (paths, or
  'socket:[INODE]' and the like), one at a time; nothing once it is
  gone."""
  try:
    fds = os.listdir(f'/proc/{pid}/fd')
  except OSError:
    return
  for fd in fds:
    try:
      yield os.readlink(f'/proc/{pid}/fd/{fd}')
    except OSError:
      continue


def listener_pid(url):
  """The pid of the process on this machine that listens on the port of
  `url` (HOST:PORT), or None."""
  try:
    port = int(url.rsplit(':', 1)[1])
  except (IndexError, ValueError):
    return None
  return pid_listening_on(port, filter(str.isdigit, os.listdir('/proc')))


def end_listener(url, why):
  """SIGKILLs the task manager listening on `url`, whose bundles wait for
  a worker that is gone (see the module's docstring)."""
  pid = listener_pid(url)
  if pid is None or pid == os.getpid():
    _LOGGER.warning('%s; no process of this machine listens on %s', why,
                    url)
    return
  _LOGGER.warning('%s; ending the task manager it served (pid %d, %s) so '
                  'that the engine recovers its tasks', why, pid, url)
  try:
    os.kill(pid, signal.SIGKILL)
  except OSError as e:
    _LOGGER.warning('could not end pid %d: %s', pid, e)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--service_port', type=int, required=True)
  parser.add_argument('--state_cache_size', type=int, default=0)
  parser.add_argument('--data_buffer_time_limit_ms', type=int, default=-1)
  parser.add_argument('--end_task_manager_of_lost_workers',
                      action='store_true',
                      help='End the task manager a worker served when the '
                      'worker dies (see the module\'s docstring).')
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO,
                      format='%(asctime)s %(levelname)s %(name)s: %(message)s')
  pool = SharedWorkerPool(args.state_cache_size,
                          args.data_buffer_time_limit_ms,
                          args.end_task_manager_of_lost_workers)
  # On 127.0.0.1 only, and alone: with "localhost" gRPC listens if any of
  # its addresses binds (::1 while an outgoing connection holds the port
  # on 127.0.0.1, where the engines connect), and with SO_REUSEPORT it
  # shares a port with a pool left running.
  server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                       options=[('grpc.so_reuseport', 0)])
  beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(
      pool, server)
  try:
    bound = server.add_insecure_port('127.0.0.1:%d' % args.service_port)
  except RuntimeError:
    bound = 0
  if not bound:
    sys.exit(f'worker pool: cannot listen on 127.0.0.1:{args.service_port} '
             '(another socket holds the port; choose another '
             '--service_port).')
  server.start()
  _LOGGER.info('worker pool listening on port %d (workers run %s)',
               args.service_port, sys.executable)
  try:
    while True:
      # Often enough that a lost worker's task manager ends within a
      # second; a look at a few processes.
      time.sleep(0.5)
      pool.reap()
  except KeyboardInterrupt:
    server.stop(0)


if __name__ == '__main__':
  main()
