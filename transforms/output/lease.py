"""One writer per output: a lease file with the run id and an expiry.

A run takes the lease `<output>/.lease.json` before it creates anything in
the output, renews it while it runs, checks it once more just before it
writes the manifest (output/manifest.py), and gives it back at the end. A
second run into the same output finds a live lease and refuses (or waits,
by option); a lease whose run was killed expires and is taken over, at
once when it is on local disk and its process on this machine is gone.

Every change of the lease is a compare-and-swap, so two runs that start
together cannot both take it:

  local disk  the read-compare-write happens under an exclusive `flock`
              of `<output>/.lease.json.lock` (the kernel drops the lock of
              a killed process); the new content replaces the old with a
              rename;
  gs://       writes and deletes carry a generation-match precondition
              (`if_generation_match`: 0 to create only if absent, the read
              generation to replace or delete only what was read), the
              object store's own compare-and-swap;
  other       (any other Beam file system) read, compare, then write: a
              race of a few milliseconds remains, said in the log.

The lease file (JSON): {"run_id", "host", "pid", "acquired", "expires"
(epoch seconds), "expires_utc", "seconds"}.
"""

import datetime
import json
import logging
import os
import socket
import threading
import time
from typing import Callable, Optional

from transforms.core.errors import UsageError
from transforms.output.paths import join

_LOG = logging.getLogger(__name__)

LEASE = '.lease.json'
DEFAULT_SECONDS = 600.0
# Deleting the lease (as opposed to leaving it unchanged).
_DELETE = object()


class OutputBusy(UsageError):
  """Another live run holds the output's lease (a bad invocation)."""

  def __init__(self, output: str, holder: dict):
    self.holder = holder
    super().__init__(
        f'the output {output} is being written by run {holder.get("run_id")}'
        f' (host {holder.get("host")}, pid {holder.get("pid")}, since '
        f'{holder.get("acquired")}; its lease expires at '
        f'{holder.get("expires_utc")} unless renewed); wait for it to '
        'finish, or pass --wait_for_output SECONDS to wait.')


class LeaseLost(RuntimeError):
  """This run no longer holds the output: another run took it over."""


def _utc(seconds: float) -> str:
  return datetime.datetime.fromtimestamp(
      seconds, datetime.timezone.utc).isoformat(timespec='seconds')


def _alive(pid) -> bool:
  """Whether a process with this id runs on this machine (a reused id
  looks alive: the lease then lasts until it expires)."""
  try:
    os.kill(int(pid), 0)
  except (TypeError, ValueError, ProcessLookupError):
    return False
  except PermissionError:
    return True
  return True


class _LocalStore:
  """The lease file on local disk, changed under an exclusive flock."""

  def __init__(self, path: str):
    self._path = path

  def update(self, change: Callable[[Optional[dict]], object]):
    """Reads the lease, calls change(current), writes what it returns
    (_DELETE removes the file, the same object leaves it), atomically
    with respect to every other update; returns change's result."""
    import fcntl  # pylint: disable=import-outside-toplevel
    os.makedirs(os.path.dirname(self._path) or '.', exist_ok=True)
    with open(self._path + '.lock', 'a+b') as lock:
      fcntl.flock(lock, fcntl.LOCK_EX)
      try:
        current = self.read()
        new = change(current)
        if new is _DELETE:
          if current is not None:
            os.unlink(self._path)
        elif new is not current:
          tmp = f'{self._path}.tmp-{os.getpid()}'
          with open(tmp, 'w', encoding='utf-8') as f:
            json.dump(new, f)
          os.replace(tmp, self._path)
        return new
      finally:
        fcntl.flock(lock, fcntl.LOCK_UN)

  def read(self) -> Optional[dict]:
    try:
      with open(self._path, encoding='utf-8') as f:
        return json.load(f)
    except FileNotFoundError:
      return None
    except ValueError:
      return {}  # unreadable: treated as expired


class _GcsStore:
  """The lease object on GCS, changed with generation preconditions."""

  ATTEMPTS = 5

  def __init__(self, path: str, client=None):
    bucket, _, name = path[len('gs://'):].partition('/')
    if client is None:
      from google.cloud import storage  # pylint: disable=import-outside-toplevel
      client = storage.Client()
    self._blob = lambda: client.bucket(bucket).blob(name)

  def _read(self):
    """(lease or None, generation; 0 when there is none)."""
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel
    blob = self._blob()
    try:
      blob.reload()
      data = blob.download_as_bytes(if_generation_match=blob.generation)
    except exceptions.NotFound:
      return None, 0
    try:
      return json.loads(data.decode('utf-8')), blob.generation
    except ValueError:
      return {}, blob.generation

  def read(self) -> Optional[dict]:
    return self._read()[0]

  def update(self, change):
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel
    for _ in range(self.ATTEMPTS):
      try:
        current, generation = self._read()
      except exceptions.PreconditionFailed:
        continue  # changed between reload and download
      new = change(current)
      try:
        if new is _DELETE:
          if current is not None:
            self._blob().delete(if_generation_match=generation)
        elif new is not current:
          self._blob().upload_from_string(
              json.dumps(new), content_type='application/json',
              if_generation_match=generation)
        return new
      except (exceptions.PreconditionFailed, exceptions.NotFound):
        continue  # another run changed it first: decide again
    raise LeaseLost('the lease kept changing under this run')


class _FileSystemsStore:
  """Any other Beam file system: read, compare, write (not atomic)."""

  def __init__(self, path: str):
    self._path = path
    _LOG.warning('%s has no compare-and-swap that this tool knows; the '
                 'lease is checked and written in two steps', path)

  def read(self) -> Optional[dict]:
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
    if not FileSystems.exists(self._path):
      return None
    with FileSystems.open(self._path,
                          compression_type='uncompressed') as f:
      try:
        return json.loads(f.read().decode('utf-8'))
      except ValueError:
        return {}

  def update(self, change):
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
    current = self.read()
    new = change(current)
    if new is _DELETE:
      if current is not None:
        FileSystems.delete([self._path])
    elif new is not current:
      with FileSystems.create(self._path,
                              compression_type='uncompressed') as f:
        f.write(json.dumps(new).encode('utf-8'))
    return new


def store_for(path: str, gcs_client=None):
  if path.startswith('gs://'):
    return _GcsStore(path, gcs_client)
  if '://' in path:
    return _FileSystemsStore(path)
  return _LocalStore(path)


class Lease:
  """The lease of one run on one output.

  Args:
    output: The output folder.
    run_id: This run's id.
    seconds: How long the lease lasts without renewal.
    store: Where the lease lives (default: by the output's scheme).
    clock: time.time, or a stand-in for tests.
  """

  def __init__(self, output: str, run_id: str,
               seconds: float = DEFAULT_SECONDS, store=None,
               clock: Callable[[], float] = time.time):
    self.output, self.run_id, self.seconds = output, run_id, float(seconds)
    self.path = join(output, LEASE)
    self._store = store
    self._clock = clock
    self._stop = threading.Event()
    self._thread = None
    self.lost: Optional[str] = None

  def __getstate__(self):
    # Shipped to the workers for the check before publishing: the store
    # (a client, a lock) is made again there.
    state = dict(self.__dict__)
    state.update(_store=None, _stop=None, _thread=None)
    if state['_clock'] is not time.time:
      state['_clock'] = time.time
    return state

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._stop = threading.Event()

  @property
  def store(self):
    if self._store is None:
      self._store = store_for(self.path)
    return self._store

  def _content(self) -> dict:
    now = self._clock()
    return {'run_id': self.run_id, 'host': socket.gethostname(),
            'pid': os.getpid(), 'acquired': _utc(now),
            'expires': now + self.seconds,
            'expires_utc': _utc(now + self.seconds),
            'seconds': self.seconds}

  def _live_other(self, current: Optional[dict]) -> bool:
    """Whether `current` is another run's lease that still holds: not
    expired, and (for a lease on local disk taken on this machine) its
    process is still alive."""
    if not current or current.get('run_id') == self.run_id:
      return False
    if float(current.get('expires', 0)) <= self._clock():
      return False
    if isinstance(self.store, _LocalStore) and current.get(
        'host') == socket.gethostname():
      return _alive(current.get('pid'))
    return True

  def try_acquire(self) -> Optional[dict]:
    """Takes the lease if it is free, expired or ours; returns None when
    taken, else the other run's lease."""
    seen = {}

    def take(current):
      if self._live_other(current):
        seen['holder'] = current
        return current
      if current and current.get('run_id') != self.run_id:
        _LOG.warning('taking over the lease of run %s on %s (it expired at '
                     '%s, or its process on this machine is gone: a run '
                     'that was killed)', current.get('run_id'), self.output,
                     current.get('expires_utc'))
      return self._content()

    self.store.update(take)
    return seen.get('holder')

  def acquire(self, wait: float = 0.0, poll: float = 5.0) -> None:
    """Takes the lease, waiting up to `wait` seconds for another run.

    Raises:
      OutputBusy: Another live run still holds it.
    """
    deadline = time.monotonic() + max(0.0, wait)
    announced = False
    while True:
      holder = self.try_acquire()
      if holder is None:
        return
      if time.monotonic() >= deadline:
        raise OutputBusy(self.output, holder)
      if not announced:
        _LOG.info('waiting up to %.0f s for run %s to finish writing %s',
                  wait, holder.get('run_id'), self.output)
        announced = True
      time.sleep(min(poll, max(0.05, deadline - time.monotonic())))

  def renew(self) -> None:
    """Extends the lease.

    Raises:
      LeaseLost: Another run holds it now.
    """
    def extend(current):
      if current and current.get('run_id') == self.run_id:
        return self._content()
      raise LeaseLost(self._lost_message(current))

    self.store.update(extend)

  def _lost_message(self, current) -> str:
    if not current:
      return (f'the lease of {self.output} is gone (removed by hand, or '
              'taken and given back by another run)')
    return (f'run {current.get("run_id")} (host {current.get("host")}) took '
            f'over the output {self.output} after this run\'s lease expired')

  def check_held(self) -> None:
    """Raises LeaseLost unless this run still holds the lease (renewing
    it), or nobody does (taking it back); called just before publishing.
    A lease marked cancelled (the run was told to stop) is not held."""
    def check(current):
      if current is None:
        return self._content()
      if current.get('run_id') == self.run_id and not current.get(
          'cancelled'):
        return self._content()
      if current.get('run_id') == self.run_id:
        raise LeaseLost(f'the run was cancelled; {self.output} was not '
                        'published')
      raise LeaseLost(self._lost_message(current))

    self.store.update(check)

  def cancel(self) -> None:
    """Marks the lease cancelled, so that no worker of this run publishes
    any more (check_held refuses); release() then removes it."""
    def mark(current):
      if current and current.get('run_id') == self.run_id:
        return dict(current, cancelled=True)
      return current

    try:
      self.store.update(mark)
    except Exception as e:  # pylint: disable=broad-except
      _LOG.warning('could not mark the lease %s cancelled (%s: %s)',
                   self.path, type(e).__name__, e)

  def release(self) -> None:
    """Gives the lease back (only if it is still this run's)."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join(timeout=5)

    def give_back(current):
      if current and current.get('run_id') == self.run_id:
        return _DELETE
      return current

    try:
      self.store.update(give_back)
    except Exception as e:  # pylint: disable=broad-except
      _LOG.warning('could not give back the lease %s (%s: %s); it expires '
                   'by itself', self.path, type(e).__name__, e)

  def keep_alive(self) -> None:
    """Renews the lease every third of its length, on a daemon thread,
    until release(); a renewal that fails is logged and kept in `lost`
    (the check before publishing then refuses)."""
    def loop():
      while not self._stop.wait(self.seconds / 3):
        try:
          self.renew()
        except LeaseLost as e:
          self.lost = str(e)
          _LOG.error('%s', e)
          return
        except Exception as e:  # pylint: disable=broad-except
          _LOG.warning('could not renew the lease %s (%s: %s); trying '
                       'again', self.path, type(e).__name__, e)

    self._thread = threading.Thread(target=loop, name='lease-renewal',
                                    daemon=True)
    self._thread.start()
