"""Local worker processes for the CPU-heavy step of a DoFn.

Beam's local runner runs a pipeline's DoFns on threads of one process, so
pure-Python work and everything else that holds the GIL uses about one and
a half of two cores. A DoFn whose per-element work is a plain function of
compact inputs (image decoding: a file name in, about 20 KB of encoded
pixels out) can hand that function to a few processes of its own instead:

    ahead = processes.Ahead(2, ['transforms.modalities.image.processing'],
                            depth=8)                        # setup()
    for key, result, error in ahead.submit(key, fn, *args): # process()
      ...
    for key, result, error in ahead.drain():                # finish_bundle()
      ...

The processes are fresh interpreters that import only the modules named (no
Beam, no TensorFlow: a worker starts in a fraction of a second and holds
tens of megabytes, not hundreds), shared by every DoFn instance of the
launching process, and end with it, however it ends. Results come back in the order the
elements were submitted, at most `depth` elements ahead, so the output
order of a bundle does not depend on which process finished first.

A worker that dies (killed, out of memory, a crash in a C decoder) breaks
the pool: the pool is rebuilt and the elements that were in flight are run
again, one at a time, so the one that kills a worker again is identified
and returned with a `Died` error for its DoFn to dead-letter, and the others
are not lost.

A command that runs its pipeline in this process can start the pool early
(start_early) and begin a DoFn's first calls there before the pipeline
runs (start_head, HeadStart): the DoFn then takes those results instead of
making the calls, in its own order, so its outputs are the same.

Distributed runners already run one SDK process per core; there the
pipeline passes 0 processes and the DoFn calls the function in-line.
"""

import collections
import concurrent.futures
import contextlib
import importlib
import logging
import multiprocessing
import os
import select
import sys
import threading
import time
import types
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple

_POOLS = {}
# Warm-up calls of the pools start_early started, until shared_pool has
# seen them finish.
_STARTING = {}
_LOCK = threading.Lock()
# The file descriptor workers get as their stderr; None: this process's.
WORKER_STDERR = None


class Died(RuntimeError):
  """The error of a call whose worker process died each time it ran it."""


def default_processes() -> int:
  """One worker process per core this process may use."""
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except (AttributeError, OSError):
    return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def _starting():
  """The state in which worker processes are started.

  - `__main__` is a module with neither a file nor a spec: multiprocessing
    re-imports the parent's main module in every child (for `python -m
    pipelines.preprocess`, Beam and TensorFlow: seconds and hundreds of
    megabytes per worker), and a worker needs only the modules it is given.
  - File descriptor 2 is WORKER_STDERR when set: a command that filters its
    own stderr through a pipe (pipelines/quiet.py) would otherwise wait at
    its end for the workers' copies of the pipe.
  """
  main = sys.modules['__main__']
  saved = None
  if WORKER_STDERR is not None:
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(WORKER_STDERR, 2)
  sys.modules['__main__'] = types.ModuleType('__main__')
  try:
    yield
  finally:
    sys.modules['__main__'] = main
    if saved is not None:
      os.dup2(saved, 2)
      os.close(saved)


def _watch_parent(parent: int) -> None:
  """Ends this worker when the process that started it ends, whatever way
  it ends (an exit without teardown, SIGKILL): a worker otherwise waits
  for work forever."""
  try:
    fd = os.pidfd_open(parent)
  except (AttributeError, OSError):
    fd = None
  if fd is not None:
    select.select([fd], [], [])
  else:
    while os.getppid() == parent:
      time.sleep(1.0)
  os._exit(0)  # pylint: disable=protected-access


def _init_worker(modules: Tuple[str, ...], parent: int) -> None:
  for name in modules:
    importlib.import_module(name)
  threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                   name='watch-parent').start()


def _spawn(key: Tuple[int, Tuple[str, ...]]):
  """(pool, its warm-up calls): a pool of key = (processes, modules to
  import) whose workers are starting; each warm-up call's result comes
  once a worker has started."""
  processes, modules = key
  pool = concurrent.futures.ProcessPoolExecutor(
      processes, mp_context=multiprocessing.get_context('spawn'),
      initializer=_init_worker, initargs=(modules, os.getpid()))
  # The executor starts a worker for each call submitted while none is
  # idle; these are submitted together, long before a worker can have
  # started and finished one, so each starts a worker, now.
  with _starting():
    calls = [pool.submit(time.sleep, 0.01) for _ in range(processes)]
  return pool, calls


def _new_pool(key: Tuple[int, Tuple[str, ...]]):
  """A started pool of key = (processes, modules to import)."""
  pool, calls = _spawn(key)
  for call in calls:
    call.result()
  return pool


def stop_all() -> None:
  """Stops every pool's workers and waits for them (before a command ends
  without interpreter teardown)."""
  stop_head()
  with _LOCK:
    pools = list(_POOLS.values())
    _POOLS.clear()
    _STARTING.clear()
  for pool in pools:
    pool.shutdown(wait=True, cancel_futures=True)


def shared_pool(processes: int, preload: Sequence[str]
                ) -> concurrent.futures.ProcessPoolExecutor:
  """The process pool of this process for `preload`, started on first use.

  Args:
    processes: Worker processes (at least 1).
    preload: Modules the workers import when they start (those that hold
      the functions they will run), and nothing else.
  """
  key = (processes, tuple(preload))
  with _LOCK:
    if key in _STARTING:
      # Started early: in use once its workers have started, as a pool
      # started here would be; else replaced by one started here (which
      # raises what stops it from starting).
      try:
        for call in _STARTING.pop(key):
          call.result()
      except Exception:  # pylint: disable=broad-except
        _POOLS.pop(key).shutdown(wait=False, cancel_futures=True)
    if key not in _POOLS:
      _POOLS[key] = _new_pool(key)
    return _POOLS[key]


def start_early(processes: int, preload: Sequence[str]) -> bool:
  """Starts the pool shared_pool(processes, preload) will return, without
  waiting for its workers to start; True when it is starting (or was
  already started).

  For a command that knows, before it imports TensorFlow and builds its
  pipeline (several seconds on one core), that its DoFns will use the
  pool: the workers start meanwhile, on the other cores, instead of when
  the first DoFn is set up. A pool that does not start (its processes
  cannot be made, or a worker fails to import `preload`) is not used:
  shared_pool then starts one as it would have without this call, and
  raises what stops it.
  """
  key = (processes, tuple(preload))
  with _LOCK:
    if key not in _POOLS:
      try:
        _POOLS[key], _STARTING[key] = _spawn(key)
      except Exception:  # pylint: disable=broad-except
        return False
  return True


class HeadStart:
  """Calls of one DoFn's work started in the shared pool before the
  pipeline asks for them, while the launching process still imports
  TensorFlow and builds the pipeline (seconds on one core, the workers
  idle); the DoFn then takes their results (`take`) instead of making
  those calls.

  A thread of this process reads `calls` lazily, each (names, args): the
  call fn(*args) returns one result per name, in their order. It keeps
  `depth` calls in the pool until `stop()` (the pipeline wants the pool),
  the calls run out, a call fails, or the results weigh `budget` (by
  `weigh(result)`, in bytes). A DoFn takes the result of a name only with
  the same `tag` (what the results depend on besides the name: the kernel
  and its settings), each name once; a call that failed as a whole gives
  nothing, and the DoFn makes its own calls as it would have. So the
  outputs are those of a run without it.
  """

  def __init__(self, key: Tuple[int, Tuple[str, ...]], tag: Any,
               fn: Callable, calls: Iterator[Tuple[Sequence[Any], tuple]],
               depth: int, budget: int, weigh: Callable[[Any], int]):
    self._key, self._tag, self._fn, self._calls = key, tag, fn, calls
    self._depth, self._budget, self._weigh = depth, budget, weigh
    self._lock = threading.Lock()
    self._started = {}  # name -> (future, index in its call's results)
    self._stopped = threading.Event()
    self.submitted = 0  # names sent to the pool
    self.taken = 0  # names whose results a DoFn took
    self._thread = threading.Thread(target=self._feed, daemon=True,
                                    name='head-start')

  def start(self) -> 'HeadStart':
    self._thread.start()
    return self

  def stop(self) -> None:
    """No more calls from now on (those in flight finish)."""
    self._stopped.set()

  def take(self, tag: Any, name: Any) -> Optional[Any]:
    """The result for `name`, waited for, when a call started here had it
    with this `tag`; else None."""
    if tag != self._tag:
      return None
    with self._lock:
      started = self._started.pop(name, None)
    if started is None:
      return None
    future, index = started
    try:
      results = future.result()
    except Exception:  # pylint: disable=broad-except
      return None  # the call failed as a whole: the DoFn makes its own
    with self._lock:
      self.taken += 1
      result, results[index] = results[index], None
    return result

  def _feed(self) -> None:
    try:
      with _LOCK:
        pool = _POOLS.get(self._key)
        warming = list(_STARTING.get(self._key, ()))
      for call in warming:
        call.result()
      flying, weight, calls = set(), 0, iter(self._calls)
      while not self._stopped.is_set():
        while len(flying) < self._depth and not self._stopped.is_set():
          names, args = next(calls, ((), ()))
          if not names:
            break
          future = pool.submit(self._fn, *args)
          with self._lock:
            for index, name in enumerate(names):
              self._started[name] = (future, index)
            self.submitted += len(names)
          flying.add(future)
        if not flying:
          return
        done, flying = concurrent.futures.wait(
            flying, return_when=concurrent.futures.FIRST_COMPLETED)
        for future in done:
          weight += sum(self._weigh(result) for result in future.result())
        if weight >= self._budget:
          return
    except Exception:  # pylint: disable=broad-except
      return  # a failed listing or call: the DoFns do the rest themselves
    finally:
      self._stopped.set()


_HEAD = []  # the HeadStart of this process, if one was started


def start_head(processes: int, preload: Sequence[str], tag: Any,
               fn: Callable, calls: Iterator[Tuple[Sequence[Any], tuple]],
               depth: int, budget: int, weigh: Callable[[Any], int]
               ) -> Optional[HeadStart]:
  """Starts a HeadStart in the pool start_early(processes, preload)
  started (None without one), replacing any earlier one."""
  key = (processes, tuple(preload))
  with _LOCK:
    if key not in _POOLS:
      return None
  stop_head()
  head = HeadStart(key, tag, fn, calls, depth, budget, weigh)
  _HEAD.append(head)
  return head.start()


def head_start() -> Optional[HeadStart]:
  """The HeadStart started in this process, if any."""
  return _HEAD[-1] if _HEAD else None


def stop_head() -> None:
  """Stops and forgets this process's HeadStart (its results unclaimed)."""
  while _HEAD:
    _HEAD.pop().stop()


def _replaced(key, broken) -> concurrent.futures.ProcessPoolExecutor:
  """The pool of `key` after `broken` broke: a new one, or the one another
  thread has already put in its place."""
  with _LOCK:
    if _POOLS.get(key) is broken:
      broken.shutdown(wait=False, cancel_futures=True)
      _POOLS[key] = _new_pool(key)
    return _POOLS[key]


class Ahead:
  """Runs calls in the shared process pool, at most `depth` ahead of their
  results, and returns the results in submission order.

  Not thread-safe: one per DoFn instance (Beam calls a DoFn instance from
  one thread at a time).
  """

  # A call whose worker died is run again alone this many times before it
  # is given up as Died (another DoFn's call may have killed the worker).
  ATTEMPTS_ALONE = 2

  def __init__(self, processes: int, preload: Sequence[str], depth: int):
    self._key = (processes, tuple(preload))
    head = head_start()
    if head is not None:
      head.stop()  # the pool is the DoFns' from now on
    self._pool = shared_pool(processes, preload)
    self._depth = max(1, depth)
    self._pending = collections.deque()  # (key, fn, args, future)

  def submit(self, key: Any, fn: Callable, *args
             ) -> Iterator[Tuple[Any, Any, Optional[BaseException]]]:
    """Starts fn(*args); yields the (key, result, error) triples now due,
    oldest first: while more than `depth` calls are in flight, and any
    finished ones at the head. `error` is what fn raised (result None), or
    a Died when its worker died; else None."""
    self._pending.append((key, fn, args, self._start(fn, args)))
    yield from self._due()

  def put(self, key: Any, result: Any
          ) -> Iterator[Tuple[Any, Any, Optional[BaseException]]]:
    """Queues a result already at hand, to come back in its turn among the
    calls' (a call that needed no worker); yields as submit does."""
    done = concurrent.futures.Future()
    done.set_result(result)
    self._pending.append((key, None, None, done))
    yield from self._due()

  def _due(self):
    while self._pending and (len(self._pending) > self._depth or
                             self._pending[0][3].done()):
      yield from self._pop()

  def discard(self) -> None:
    """Forgets the calls in flight (their results are not wanted)."""
    for _, _, _, future in self._pending:
      future.cancel()
    self._pending.clear()

  def drain(self) -> Iterator[Tuple[Any, Any, Optional[BaseException]]]:
    """Yields every remaining (key, result, error), oldest first."""
    while self._pending:
      yield from self._pop()

  def alone(self, fn: Callable, *args) -> Tuple[Any, Optional[BaseException]]:
    """(result, error) of fn(*args) run now, by itself, and waited for; a
    call that kills its worker each time it runs comes back as Died. For a
    caller that splits a failed call into smaller ones to find which part
    failed."""
    return self._alone(fn, args)

  def _start(self, fn, args):
    try:
      return self._pool.submit(fn, *args)
    except concurrent.futures.process.BrokenProcessPool:
      self._pool = _replaced(self._key, self._pool)
      return self._pool.submit(fn, *args)

  def _pop(self):
    key, _, _, future = self._pending[0]
    try:
      result = future.result()
    except concurrent.futures.process.BrokenProcessPool:
      yield from self._recover()
      return
    except Exception as e:  # pylint: disable=broad-except
      self._pending.popleft()
      yield key, None, e
      return
    self._pending.popleft()
    yield key, result, None

  def _recover(self):
    """After a worker died: runs every call that was in flight and had not
    finished again, alone, in a new pool, so that the one that kills a
    worker again comes back as Died and the others are not lost."""
    pending, self._pending = list(self._pending), collections.deque()
    self._pool = _replaced(self._key, self._pool)
    for key, fn, args, future in pending:
      if future.done() and not isinstance(
          future.exception(), concurrent.futures.process.BrokenProcessPool):
        error = future.exception()
        yield key, (None if error else future.result()), error
        continue
      yield (key,) + self._alone(fn, args)

  def _alone(self, fn, args):
    for _ in range(self.ATTEMPTS_ALONE):
      try:
        return self._start(fn, args).result(), None
      except concurrent.futures.process.BrokenProcessPool:
        self._pool = _replaced(self._key, self._pool)
      except Exception as e:  # pylint: disable=broad-except
        return None, e
    return None, Died(
        'the worker process died each time it processed this input (killed, '
        'out of memory, or a crash in a decoder)')


class MaybeAhead:
  """Ahead queues for a DoFn that can also do its work in-line: `start()`
  gives a new Ahead, or None once the processes could not start (then a
  warning, once per DoFn instance, and None from then on: the same work,
  only slower, in the runner's own workers)."""

  def __init__(self, processes: int, preload: Sequence[str], depth: int,
               work: str):
    self._args = (processes, tuple(preload), depth)
    self._work = work  # what the processes would do, for the warning
    self._failed = False

  def start(self) -> Optional[Ahead]:
    if self._failed:
      return None
    processes, preload, depth = self._args
    try:
      return Ahead(processes, preload, depth=depth)
    except Exception as e:  # pylint: disable=broad-except
      self._failed = True
      logging.getLogger(__name__).warning(
          'could not start %d processes to %s (%s: %s); doing it in the '
          'runner\'s own workers', processes, self._work, type(e).__name__,
          e)
      return None
