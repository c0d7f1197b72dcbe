"""Work on threads of a DoFn's own, results handed back in order.

A DoFn that waits on work which releases the GIL (TensorFlow's graphs)
keeps the next batch going on a thread meanwhile: core/batches.py (the
exported transform) and core/analysis.py (tf.Transform's analysis graph).
"""

import collections
from concurrent import futures
from typing import Callable, List


class ThreadAhead:
  """A DoFn's work on `threads` threads of its own, results handed back in
  the order of submission: `submit` hands the work over and returns the
  results now due (once more than `ahead` wait), `drain` the rest at the
  end of a bundle. With more than one thread, that many pieces of work run
  at once; their results still come back in the order they were submitted.
  An error in the work is raised where its result is handed back. Made in
  setup()."""

  def __init__(self, name: str, ahead: int = 1, threads: int = 1):
    self._name, self._ahead, self._threads = name, ahead, threads
    self._pool = None
    self._pending = collections.deque()

  def start_bundle(self):
    self._pending = collections.deque()

  def submit(self, fn: Callable, arg, tag=None) -> List[tuple]:
    """Hands fn(arg) to the thread; returns [(result, tag)] of the work
    now due, oldest first."""
    if self._pool is None:
      self._pool = futures.ThreadPoolExecutor(
          self._threads, thread_name_prefix=self._name)
    self._pending.append((self._pool.submit(fn, arg), tag))
    due = []
    while len(self._pending) > self._ahead:
      future, due_tag = self._pending.popleft()
      due.append((future.result(), due_tag))
    return due

  def drain(self):
    """(result, tag) of all the work still pending, oldest first."""
    while self._pending:
      future, tag = self._pending.popleft()
      yield future.result(), tag

  def close(self):
    if self._pool is not None:
      self._pool.shutdown(wait=False, cancel_futures=True)
      self._pool = None
