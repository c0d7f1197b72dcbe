"""runtime/processes.py: local worker processes for a DoFn's heavy step, with
real processes (spawned interpreters), real crashes and real orphans."""

import os
import subprocess
import sys
import time

import pytest

import process_calls
from transforms.runtime import processes
from transforms.modalities.image import config
from transforms.modalities.image import processing

CALLS = ('process_calls',)


def _all(ahead, fn, items, *args):
  out = []
  for x in items:
    out.extend(ahead.submit(x, fn, x, *args))
  out.extend(ahead.drain())
  return out


def test_results_come_back_in_submission_order():
  ahead = processes.Ahead(2, CALLS, depth=4)
  # Later calls finish first: the output order must not follow them.
  out = []
  for x in range(12):
    out.extend(ahead.submit(x, process_calls.square_after, x,
                            0.05 if x % 3 == 0 else 0.0))
  out.extend(ahead.drain())
  assert [key for key, _, _ in out] == list(range(12))
  assert [result for _, result, _ in out] == [x * x for x in range(12)]
  assert all(error is None for _, _, error in out)


def test_no_more_than_depth_calls_are_in_flight():
  ahead = processes.Ahead(2, CALLS, depth=3)
  for x in range(10):
    list(ahead.submit(x, process_calls.square_after, x, 0.02))
    assert len(ahead._pending) <= 3  # pylint: disable=protected-access
  assert len(list(ahead.drain())) <= 3


def test_an_error_is_returned_with_its_call_and_others_go_on():
  ahead = processes.Ahead(2, CALLS, depth=4)
  out = _all(ahead, process_calls.fail_on, range(6), 2)
  errors = {key: error for key, _, error in out if error is not None}
  assert list(errors) == [2]
  assert isinstance(errors[2], ValueError) and '2 is bad' in str(errors[2])
  assert [r for k, r, _ in out if k != 2] == [0, 1, 3, 4, 5]


def test_a_bad_image_error_keeps_its_stage_and_reason_across_processes():
  ahead = processes.Ahead(2, (processing.__name__,), depth=2)
  out = _all(ahead, processing.process_image, [b'', b'not an image'],
             config.ImageConfig(), 'x.jpg')
  for _, result, error in out:
    assert result is None
    assert isinstance(error, config.BadImageError)
    assert error.stage == 'decode' and error.reason
  assert out[0][2].reason == 'empty file (0 bytes)'


def test_a_call_that_kills_its_worker_is_died_and_no_other_is_lost():
  ahead = processes.Ahead(2, CALLS, depth=4)
  out = _all(ahead, process_calls.die_on, range(10), 5)
  assert [key for key, _, _ in out] == list(range(10))
  died = [key for key, _, error in out
          if isinstance(error, processes.Died)]
  assert died == [5]
  assert 'died each time' in str(out[5][2])
  assert [r for k, r, _ in out if k != 5] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
  # The pool was rebuilt: later calls work.
  assert [r for _, r, _ in _all(ahead, process_calls.die_on, [1, 2], 99)
          ] == [1, 2]


def test_workers_import_only_what_they_are_given():
  import apache_beam  # pylint: disable=import-outside-toplevel,unused-import
  assert 'apache_beam' in sys.modules
  ahead = processes.Ahead(2, CALLS, depth=2)
  heavy = ['apache_beam', 'tensorflow', 'tensorflow_transform', 'pytest']
  out = _all(ahead, process_calls.modules_loaded, [0, 1], heavy)
  del out
  (_, loaded, error), = list(ahead.submit(
      'x', process_calls.modules_loaded, heavy)) + list(ahead.drain())
  assert error is None and loaded == []


_ORPHANING = r'''
import os, signal, sys
sys.path[:0] = sys.argv[1:3]
import process_calls
from transforms.runtime import processes
ahead = processes.Ahead(2, ('process_calls',), depth=2)
pids = set()
for i in range(6):
  # Calls long enough for both workers to take some.
  for _, pid, _ in ahead.submit(i, process_calls.pid_after, 0.2):
    pids.add(pid)
for _, pid, _ in ahead.drain():
  pids.add(pid)
print(' '.join(map(str, sorted(pids))), flush=True)
if sys.argv[3] == 'kill':
  os.kill(os.getpid(), signal.SIGKILL)
os._exit(0)
'''


def _alive(pid):
  try:
    with open(f'/proc/{pid}/stat', encoding='ascii') as f:
      return f.read().split(') ')[1][0] != 'Z'
  except FileNotFoundError:
    return False


@pytest.mark.parametrize('how', ['exit', 'kill'])
def test_workers_end_with_the_process_that_started_them(how):
  here = os.path.dirname(os.path.abspath(__file__))
  repo = os.path.dirname(os.path.dirname(here))
  done = subprocess.run(
      [sys.executable, '-c', _ORPHANING, repo, os.path.dirname(here), how],
      capture_output=True, text=True, timeout=60, check=False)
  pids = [int(p) for p in done.stdout.split()]
  assert len(pids) == 2, done.stderr
  deadline = time.time() + 10
  while time.time() < deadline and any(_alive(p) for p in pids):
    time.sleep(0.1)
  assert not any(_alive(p) for p in pids)


def test_discarded_calls_do_not_come_back():
  ahead = processes.Ahead(2, CALLS, depth=8)
  for x in range(4):
    list(ahead.submit(x, process_calls.square_after, x, 0.05))
  ahead.discard()
  out = _all(ahead, process_calls.square_after, [7, 8], 0.0)
  assert [(k, r) for k, r, _ in out] == [(7, 49), (8, 64)]


def test_a_pool_started_early_is_the_one_its_dofns_share():
  preload = ('process_calls', 'colorsys')  # a key no other test uses
  assert processes.start_early(2, preload)
  early = processes._POOLS[(2, preload)]  # pylint: disable=protected-access
  assert processes.start_early(2, preload)  # a second call: the same pool
  assert processes._POOLS[(2, preload)] is early  # pylint: disable=protected-access
  ahead = processes.Ahead(2, preload, depth=4)
  assert processes.shared_pool(2, preload) is early
  out = _all(ahead, process_calls.square_after, range(6), 0.0)
  assert [(k, r, e) for k, r, e in out] == [(x, x * x, None)
                                            for x in range(6)]


def test_a_pool_that_fails_to_start_early_fails_as_a_late_one_would():
  # Its workers cannot import what they are given: the pool breaks while
  # this process goes on; the first DoFn that wants it gets the error a
  # pool started then would give, and the DoFn's fallback (in-line work,
  # with a warning) follows as before.
  preload = ('no_such_module_for_workers',)
  assert processes.start_early(2, preload)
  with pytest.raises(Exception) as raised:
    processes.Ahead(2, preload, depth=2)
  assert type(raised.value).__name__ == 'BrokenProcessPool'
  assert (2, preload) not in processes._POOLS  # pylint: disable=protected-access
  assert processes.MaybeAhead(2, preload, 2, 'test').start() is None


def test_a_result_put_in_comes_back_in_its_turn():
  ahead = processes.Ahead(2, CALLS, depth=4)
  out = list(ahead.submit(0, process_calls.square_after, 3, 0.05))
  out += list(ahead.put(1, 'at hand'))
  out += list(ahead.submit(2, process_calls.square_after, 4, 0.0))
  out += list(ahead.drain())
  assert out == [(0, 9, None), (1, 'at hand', None), (2, 16, None)]


def _head_images(tmp_path):
  """(paths, cfg, expected (result, error) per path) of a few real inputs:
  good images, a file that is not an image, a missing file."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from PIL import Image  # pylint: disable=import-outside-toplevel
  paths = []
  for i in range(11):
    path = str(tmp_path / f'im {i}.png')
    Image.fromarray(np.full((20 + i, 30, 3), i * 20, np.uint8)).save(path)
    paths.append(path)
  (tmp_path / 'notes.png').write_bytes(b'not an image')
  paths += [str(tmp_path / 'notes.png'), str(tmp_path / 'gone.png')]
  cfg = config.ImageConfig(height=16, width=16)
  expected = processing.process_inputs(
      processing.process_image, [(p, None) for p in paths], cfg)
  return paths, cfg, expected


def _calls(kernel, paths, cfg, batch):
  """The calls of `kernel` on `paths`, `batch` paths a call (as
  processing.process_inputs takes them)."""
  for i in range(0, len(paths), batch):
    names = paths[i:i + batch]
    yield names, (kernel, [(name, None) for name in names], cfg)


def _start(preload, paths, cfg, batch, depth, budget, weigh,
           kernel=processing.process_image):
  return processes.start_head(2, preload, (kernel, cfg),
                              processing.process_inputs,
                              _calls(kernel, paths, cfg, batch), depth=depth,
                              budget=budget, weigh=weigh)


def _finished(head):
  head._thread.join(30)  # pylint: disable=protected-access
  assert not head._thread.is_alive()  # pylint: disable=protected-access


def test_a_head_start_gives_what_the_calls_would_have(tmp_path):
  paths, cfg, expected = _head_images(tmp_path)
  preload = (processing.__name__, 'process_calls', 'colorsys')
  assert _start(preload, paths, cfg, 4, 2, 1 << 30, len) is None  # no pool
  assert processes.start_early(2, preload)
  head = _start(preload, paths, cfg, 4, 2, 1 << 30,
                lambda out: len(out[0].data) if out[0] else 0)
  try:
    assert processes.head_start() is head
    _finished(head)
    assert head.submitted == len(paths)
    kernel = processing.process_image
    # Another kernel, other settings, a name it did not list: not its own.
    assert head.take((processing.identify_content, cfg), paths[0]) is None
    other = config.ImageConfig(height=8, width=8)
    assert head.take((kernel, other), paths[0]) is None
    assert head.take((kernel, cfg), 'elsewhere.png') is None
    for path, (want, error) in zip(paths, expected):
      got, got_error = head.take((kernel, cfg), path)
      if error is None:
        assert got_error is None and got == want, path
      else:
        assert got is None and type(got_error) is type(error), path
        assert str(got_error) == str(error), path
      assert head.take((kernel, cfg), path) is None  # once
    assert head.taken == len(paths)
  finally:
    processes.stop_head()
  assert processes.head_start() is None


def test_a_head_start_stops_at_its_budget_or_when_a_dofn_claims_the_pool(
    tmp_path):
  paths, cfg, _ = _head_images(tmp_path)
  preload = (processing.__name__, 'process_calls', 'audioop')
  assert processes.start_early(2, preload)
  try:
    # Results weigh 1 each, the budget is 2: it stops after the first call
    # it sees finish (2 inputs a call, 1 call in flight).
    head = _start(preload, paths, cfg, 2, 1, 2, lambda out: 1)
    _finished(head)
    assert head.submitted == 2
    # Slow calls of one name each; a DoFn's Ahead then claims the pool.
    calls = (([x], ([x], 0.05)) for x in range(40))
    stopped = processes.start_head(2, preload, 'squares',
                                   process_calls.squares_after, calls,
                                   depth=2, budget=1 << 30,
                                   weigh=lambda out: 1)
    assert processes.head_start() is stopped  # it replaced the first
    # Its thread may not have run yet on a busy machine (it would then
    # stop before its first call): claim the pool once it has started.
    deadline = time.monotonic() + 30
    while stopped.submitted == 0 and time.monotonic() < deadline:
      time.sleep(0.005)
    processes.Ahead(2, preload, depth=2)
    _finished(stopped)
    assert 0 < stopped.submitted < 40
    taken = [stopped.take('squares', x) for x in range(40)]
    assert taken[:stopped.submitted] == [x * x for x in
                                         range(stopped.submitted)]
    assert taken[stopped.submitted:] == [None] * (40 - stopped.submitted)
  finally:
    processes.stop_head()


def test_a_head_start_call_whose_worker_dies_gives_nothing(tmp_path):
  # Its inputs are then the DoFn's to decode (and to dead-letter the one
  # that kills a worker, as without a head start).
  paths, cfg, _ = _head_images(tmp_path)
  (tmp_path / 'kill.png').write_bytes(open(paths[0], 'rb').read())
  listed = paths[:3] + [str(tmp_path / 'kill.png')] + paths[3:6]
  preload = (processing.__name__, 'process_calls', 'bisect')
  assert processes.start_early(2, preload)
  kernel = process_calls.process_image_or_die
  try:
    head = _start(preload, listed, cfg, 4, 1, 1 << 30, lambda out: 0,
                  kernel=kernel)
    _finished(head)
    assert head.submitted == 4  # the call with kill.png broke the pool
    for path in listed:
      assert head.take((kernel, cfg), path) is None
  finally:
    processes.stop_head()
    processes.stop_all()
