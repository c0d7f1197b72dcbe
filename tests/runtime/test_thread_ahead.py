"""runtime/threads.ThreadAhead: work on threads of its own, results in the
order of submission, errors where their result is handed back."""

import threading
import time

import pytest

from transforms.runtime import threads as threads_lib


def _all(ahead, items, fn):
  """Every (result, tag) of fn over items, as a DoFn would get them."""
  out = []
  ahead.start_bundle()
  for i, item in enumerate(items):
    out += ahead.submit(fn, item, i)
  out += list(ahead.drain())
  return out


def test_two_threads_run_two_pieces_at_once():
  # Each piece waits for another to reach the barrier: with one thread the
  # first piece would wait alone and time out.
  barrier = threading.Barrier(2, timeout=10)

  def meet(x):
    barrier.wait()
    return x * 10

  ahead = threads_lib.ThreadAhead('test', ahead=2, threads=2)
  try:
    assert _all(ahead, [1, 2, 3, 4], meet) == [
        (10, 0), (20, 1), (30, 2), (40, 3)]
  finally:
    ahead.close()


def test_one_thread_runs_one_piece_at_a_time():
  barrier = threading.Barrier(2, timeout=0.5)

  def meet(x):
    barrier.wait()
    return x

  ahead = threads_lib.ThreadAhead('test', ahead=2, threads=1)
  try:
    with pytest.raises(threading.BrokenBarrierError):
      _all(ahead, [1, 2], meet)
  finally:
    ahead.close()


@pytest.mark.parametrize('ahead_by,threads', [(1, 1), (1, 2), (2, 2), (3, 2)])
def test_results_come_back_in_the_order_submitted(ahead_by, threads):
  # Earlier pieces take longer, so with two threads later ones finish
  # first; the results still come back in submission order.
  def slow_first(x):
    time.sleep(0.02 * (6 - x))
    return -x

  ahead = threads_lib.ThreadAhead('test', ahead=ahead_by, threads=threads)
  try:
    assert _all(ahead, range(6), slow_first) == [
        (-x, x) for x in range(6)]
  finally:
    ahead.close()


def test_at_most_ahead_results_wait_after_a_submit():
  ahead = threads_lib.ThreadAhead('test', ahead=2, threads=2)
  try:
    ahead.start_bundle()
    assert ahead.submit(abs, -1, 'a') == []
    assert ahead.submit(abs, -2, 'b') == []
    assert ahead.submit(abs, -3, 'c') == [(1, 'a')]
    assert list(ahead.drain()) == [(2, 'b'), (3, 'c')]
  finally:
    ahead.close()


def test_an_error_is_raised_where_its_result_is_handed_back():
  def fail_on_two(x):
    if x == 2:
      raise ValueError('bad piece 2')
    return x

  ahead = threads_lib.ThreadAhead('test', ahead=2, threads=2)
  try:
    ahead.start_bundle()
    got = []
    with pytest.raises(ValueError, match='bad piece 2'):
      for i in range(5):
        got += ahead.submit(fail_on_two, i, i)
    # The pieces before the bad one were handed back first, in order.
    assert got == [(0, 0), (1, 1)]
  finally:
    ahead.close()
