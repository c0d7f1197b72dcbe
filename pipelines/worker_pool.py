"""Beam's Python SDK worker pool, made safe to share between task managers.

    python -m pipelines.worker_pool --service_port 50000

A pipeline with `--environment_type EXTERNAL --environment_config
HOST:50000` has each Flink TaskManager (or Spark executor) ask the pool at
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
"""

import argparse
import logging
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

  def __init__(self, state_cache_size=0, data_buffer_time_limit_ms=-1):
    self._state_cache_size = state_cache_size
    self._data_buffer_time_limit_ms = data_buffer_time_limit_ms
    self._lock = threading.Lock()
    self._workers = []  # [(worker_id, Popen)]

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
      self._workers.append((request.worker_id, process))
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
      running = []
      for worker_id, process in self._workers:
        if process.poll() is None:
          running.append((worker_id, process))
        else:
          _LOGGER.info('worker %s (pid %d) exited with %s', worker_id,
                       process.pid, process.returncode)
      self._workers = running


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--service_port', type=int, required=True)
  parser.add_argument('--state_cache_size', type=int, default=0)
  parser.add_argument('--data_buffer_time_limit_ms', type=int, default=-1)
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO,
                      format='%(asctime)s %(levelname)s %(name)s: %(message)s')
  pool = SharedWorkerPool(args.state_cache_size,
                          args.data_buffer_time_limit_ms)
  server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
  beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(
      pool, server)
  server.add_insecure_port('localhost:%d' % args.service_port)
  server.start()
  _LOGGER.info('worker pool listening on port %d (workers run %s)',
               args.service_port, sys.executable)
  try:
    while True:
      time.sleep(30)
      pool.reap()
  except KeyboardInterrupt:
    server.stop(0)


if __name__ == '__main__':
  main()
