"""The output's lease: one writer at a time, on local disk (real
processes racing for it) and on GCS (generation-match preconditions,
against an in-memory stand-in for the storage client: no bucket is
reachable here)."""

import json
import multiprocessing
import os
import pickle
import socket
import threading
import time

import pytest
from google.api_core import exceptions as gexc

from transforms.output import lease as lease_lib


class Clock:

  def __init__(self, now=1_800_000_000.0):
    self.now = now

  def __call__(self):
    return self.now


def _race(output, run_id, start, results):
  """One contender: waits for the start time, then tries once. Making the
  new lease's content takes 50 ms here (between reading the lease and
  writing it), so that without the lock every contender would win."""
  make = lease_lib.Lease._content  # pylint: disable=protected-access

  def slow(self):
    time.sleep(0.05)
    return make(self)

  lease_lib.Lease._content = slow  # pylint: disable=protected-access
  lease = lease_lib.Lease(output, run_id, seconds=600)
  while time.time() < start:
    pass
  holder = lease.try_acquire()
  results.put((run_id, None if holder is None else holder['run_id']))


def test_processes_racing_for_a_local_lease_one_wins(tmp_path):
  ctx = multiprocessing.get_context('spawn')
  results = ctx.Queue()
  start = time.time() + 4.0  # every process is started by then
  procs = [ctx.Process(target=_race, args=(str(tmp_path / 'out'), f'run{i}',
                                           start, results))
           for i in range(6)]
  for p in procs:
    p.start()
  outcomes = dict(results.get(timeout=60) for _ in procs)
  for p in procs:
    p.join(timeout=30)
  winners = [r for r, holder in outcomes.items() if holder is None]
  assert len(winners) == 1, outcomes
  # Every loser was told who holds it.
  assert {h for h in outcomes.values() if h is not None} == set(winners)
  on_disk = json.loads((tmp_path / 'out' / '.lease.json').read_text())
  assert on_disk['run_id'] == winners[0]


def test_a_live_lease_refuses_then_expires_and_is_taken_over(tmp_path):
  clock = Clock()
  out = str(tmp_path / 'out')
  first = lease_lib.Lease(out, 'first', seconds=60, clock=clock)
  second = lease_lib.Lease(out, 'second', seconds=60, clock=clock)
  first.acquire()
  with pytest.raises(lease_lib.OutputBusy) as busy:
    second.acquire()
  message = str(busy.value)
  assert 'being written by run first' in message
  assert f'pid {os.getpid()}' in message and '--wait_for_output' in message
  first.renew()
  clock.now += 59
  assert second.try_acquire()['run_id'] == 'first'  # renewed: still live
  clock.now += 2
  assert second.try_acquire() is None  # expired: taken over
  with pytest.raises(lease_lib.LeaseLost, match='second .*took over'):
    first.check_held()
  with pytest.raises(lease_lib.LeaseLost):
    first.renew()
  first.release()  # gives back only its own lease
  assert json.loads((tmp_path / 'out' / '.lease.json').read_text())[
      'run_id'] == 'second'
  second.release()
  assert not (tmp_path / 'out' / '.lease.json').exists()


def test_a_local_lease_of_a_dead_process_is_taken_over_at_once(tmp_path):
  out = tmp_path / 'out'
  out.mkdir()
  gone = multiprocessing.get_context('spawn').Process(target=time.sleep,
                                                      args=(0,))
  gone.start()
  gone.join()
  far = time.time() + 3600
  for host, taken in ((socket.gethostname(), True), ('another-host', False)):
    (out / '.lease.json').write_text(json.dumps(
        {'run_id': 'killed', 'host': host, 'pid': gone.pid,
         'expires': far}))
    holder = lease_lib.Lease(str(out), 'next').try_acquire()
    # Another machine's process cannot be looked at: its lease holds
    # until it expires.
    assert (holder is None) == taken, host


def test_waiting_for_the_other_run(tmp_path):
  out = str(tmp_path / 'out')
  first = lease_lib.Lease(out, 'first', seconds=60)
  first.acquire()
  threading.Timer(0.5, first.release).start()
  second = lease_lib.Lease(out, 'second', seconds=60)
  began = time.monotonic()
  second.acquire(wait=30, poll=0.1)
  assert time.monotonic() - began < 10
  with pytest.raises(lease_lib.OutputBusy):
    lease_lib.Lease(out, 'third').acquire(wait=0.3, poll=0.1)


def test_a_cancelled_lease_is_not_held(tmp_path):
  out = str(tmp_path / 'out')
  lease = lease_lib.Lease(out, 'run', seconds=60)
  lease.acquire()
  lease.check_held()
  lease.cancel()
  with pytest.raises(lease_lib.LeaseLost, match='cancelled'):
    lease.check_held()
  lease.release()
  assert not (tmp_path / 'out' / '.lease.json').exists()


def test_keep_alive_renews_and_the_lease_travels_to_workers(tmp_path):
  out = str(tmp_path / 'out')
  lease = lease_lib.Lease(out, 'run', seconds=0.6)
  lease.acquire()
  lease.keep_alive()
  time.sleep(1.5)
  on_disk = json.loads((tmp_path / 'out' / '.lease.json').read_text())
  assert on_disk['expires'] > time.time()  # renewed more than once
  copy = pickle.loads(pickle.dumps(lease))  # as a worker gets it
  copy.check_held()
  lease.release()
  assert lease.lost is None


class FakeGcs:
  """The part of google.cloud.storage the lease uses, in memory, with
  the service's generation-match semantics."""

  def __init__(self):
    self.objects = {}  # name -> (data, generation)
    self.lock = threading.Lock()
    self.next_generation = 1000

  def bucket(self, bucket):
    return _Bucket(self, bucket)


class _Bucket:

  def __init__(self, gcs, name):
    self.gcs, self.name = gcs, name

  def blob(self, name):
    return _Blob(self.gcs, f'{self.name}/{name}')


class _Blob:

  def __init__(self, gcs, key):
    self.gcs, self.key, self.generation = gcs, key, None

  def _check(self, if_generation_match):
    current = self.gcs.objects.get(self.key, (None, 0))[1]
    if if_generation_match is not None and current != if_generation_match:
      raise gexc.PreconditionFailed('generation mismatch')

  def reload(self):
    with self.gcs.lock:
      if self.key not in self.gcs.objects:
        raise gexc.NotFound('no such object')
      self.generation = self.gcs.objects[self.key][1]

  def download_as_bytes(self, if_generation_match=None):
    with self.gcs.lock:
      if self.key not in self.gcs.objects:
        raise gexc.NotFound('no such object')
      self._check(if_generation_match)
      return self.gcs.objects[self.key][0]

  def upload_from_string(self, data, content_type=None,
                         if_generation_match=None):
    del content_type
    time.sleep(0.001)  # let other threads interleave
    with self.gcs.lock:
      self._check(if_generation_match)
      self.gcs.next_generation += 1
      self.gcs.objects[self.key] = (data.encode() if isinstance(
          data, str) else data, self.gcs.next_generation)

  def delete(self, if_generation_match=None):
    with self.gcs.lock:
      if self.key not in self.gcs.objects:
        raise gexc.NotFound('no such object')
      self._check(if_generation_match)
      del self.gcs.objects[self.key]


def _gcs_lease(gcs, run_id, clock=time.time):
  path = 'gs://bucket/datasets/nightly/.lease.json'
  return lease_lib.Lease('gs://bucket/datasets/nightly', run_id, seconds=60,
                         store=lease_lib.store_for(path, gcs_client=gcs),
                         clock=clock)


def test_threads_racing_for_a_gcs_lease_one_wins():
  gcs = FakeGcs()
  barrier = threading.Barrier(8)
  outcomes = {}

  def contend(i):
    lease = _gcs_lease(gcs, f'run{i}')
    barrier.wait()
    outcomes[i] = lease.try_acquire()

  threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  winners = [i for i, holder in outcomes.items() if holder is None]
  assert len(winners) == 1, outcomes
  [(key, (data, _))] = gcs.objects.items()
  assert key == 'bucket/datasets/nightly/.lease.json'
  assert json.loads(data)['run_id'] == f'run{winners[0]}'


def test_a_gcs_lease_expires_is_taken_over_and_given_back():
  gcs, clock = FakeGcs(), Clock()
  first, second = _gcs_lease(gcs, 'first', clock), _gcs_lease(
      gcs, 'second', clock)
  first.acquire()
  with pytest.raises(lease_lib.OutputBusy, match='run first'):
    second.acquire()
  clock.now += 61
  second.acquire()
  with pytest.raises(lease_lib.LeaseLost):
    first.check_held()
  first.release()
  assert gcs.objects  # the second run's lease is left alone
  second.release()
  assert not gcs.objects
