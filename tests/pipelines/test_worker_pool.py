"""The project's worker pool refuses a port it cannot fully listen on."""

import socket
import subprocess
import sys


def _held_by_a_connection():
  """A port of 127.0.0.1 that an outgoing connection holds, as an engine's
  client may hold any port of the ephemeral range, and that connection."""
  server = socket.create_server(('127.0.0.1', 0))
  client = socket.socket()
  client.bind(('127.0.0.1', 0))
  client.connect(server.getsockname())
  peer, _ = server.accept()
  return client.getsockname()[1], (server, client, peer)


def _pool_on(port):
  """The finished run of `python -m pipelines.worker_pool` on `port`."""
  return subprocess.run(
      [sys.executable, '-m', 'pipelines.worker_pool', '--service_port',
       str(port)], capture_output=True, text=True, timeout=60)


def test_a_port_held_by_a_connection_is_refused_in_one_sentence():
  port, held = _held_by_a_connection()
  try:
    run = _pool_on(port)
  finally:
    for s in held:
      s.close()
  assert run.returncode != 0
  last = run.stderr.strip().splitlines()[-1]
  assert last == (f'worker pool: cannot listen on 127.0.0.1:{port} (another '
                  'socket holds the port; choose another '
                  '--service_port).'), run.stderr
  assert 'Traceback' not in run.stderr


def test_a_port_another_program_listens_on_is_refused():
  with socket.create_server(('127.0.0.1', 0)) as other:
    port = other.getsockname()[1]
    run = _pool_on(port)
  assert run.returncode != 0, run.stderr
  assert run.stderr.strip().splitlines()[-1].startswith(
      f'worker pool: cannot listen on 127.0.0.1:{port} '), run.stderr
  assert 'Traceback' not in run.stderr
