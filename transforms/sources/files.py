"""Paths and listings of input files, the same for every modality.

Plain functions over Beam's FileSystems, so local folders and gs:// work
alike; a listing that fails is empty rather than an exception (the callers
turn an empty input into one sentence for the user), except `list_tree`,
which lists a whole input folder for the pipeline and says what it could
not list.
"""

import errno
import os
import re
import threading
from typing import Dict, Iterator, List, NamedTuple, Optional

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from transforms.sources import stores

_SCHEME = re.compile(r'^[a-zA-Z][-a-zA-Z0-9+.]*://')
stores.use_emulator()


def exists(path: str) -> bool:
  """Whether the file or folder exists (False when it cannot be asked). In
  an object store a folder is a prefix: it exists when an object is below
  it."""
  try:
    if FileSystems.exists(path):
      return True
  except BeamIOError:
    return False
  if is_local(path):
    return False
  return bool(match(escape_glob(strip_slash(path)) + '/**', limit=1))


# The dead-letter reason of an input deleted between its listing and its
# read (on local disk or in an object store).
VANISHED = 'the file no longer exists (deleted or moved after it was listed)'


def is_not_found(e: BaseException, _depth: int = 0) -> bool:
  """Whether reading failed because the file is not there: a local
  FileNotFoundError, an object store's 404 (google.api_core's NotFound,
  Beam's S3ClientError, botocore's NoSuchKey), or Beam's wrapper of such
  errors, or an error raised while handling one."""
  if _depth > 8:
    return False
  if isinstance(e, FileNotFoundError):
    return True
  if type(e).__name__ in ('NotFound', 'NoSuchKey') or getattr(
      e, 'code', None) == 404:
    return True
  details = getattr(e, 'exception_details', None)
  if isinstance(details, dict):
    inner = [x for x in details.values() if isinstance(x, BaseException)]
    if inner:
      return all(is_not_found(x, _depth + 1) for x in inner)
  response = getattr(e, 'response', None)
  if isinstance(response, dict):  # botocore's ClientError
    return str(response.get('Error', {}).get('Code')) in ('404', 'NoSuchKey')
  cause = e.__cause__ or e.__context__
  return cause is not None and is_not_found(cause, _depth + 1)


def read_error(e: BaseException) -> str:
  """A file's read failure as a dead letter's reason: VANISHED when it is
  not there (any more), else the error's type and message."""
  return VANISHED if is_not_found(e) else f'{type(e).__name__}: {e}'


def match(pattern: str, limit: Optional[int] = None):
  """FileMetadata of the files matching a pattern (at most `limit`; [] when
  none or when the listing fails)."""
  try:
    result = FileSystems.match([pattern], [limit] if limit else None)[0]
  except BeamIOError:
    return []
  return result.metadata_list


def metadata(path: str):
  """FileMetadata of one file named literally (`[`, `*` and `?` in its
  name are not patterns); None when it does not exist or cannot be
  asked."""
  try:
    filesystem = FileSystems.get_filesystem(path)
    return filesystem.metadata(path) if filesystem.exists(path) else None
  except (BeamIOError, OSError):
    return None


def match_paths(pattern: str, limit: Optional[int] = None) -> List[str]:
  """The paths of `match`."""
  return [m.path for m in match(pattern, limit)]


def strip_slash(path: str) -> str:
  """A folder path without its trailing slashes ('/' and 'gs://' stay)."""
  stripped = path.rstrip('/')
  if not stripped or stripped.endswith(':/') or stripped.endswith(':'):
    return path
  return stripped


def relative_parts(root: str, path: str) -> List[str]:
  """Path components of `path` below `root` (all of them when it is not
  below), for local paths (either slash) and URLs alike."""
  root = strip_slash(root.replace('\\', '/'))
  path = path.replace('\\', '/')
  if root not in ('', '.') and path.startswith(root):
    rest = path[len(root):]
    if rest.startswith('/') or root.endswith('/'):
      path = rest
  elif root == '.' and path.startswith('./'):
    path = path[2:]
  return [p for p in path.split('/') if p]


def is_local(path: str) -> bool:
  """Whether a path is on this machine's file system (no scheme://)."""
  return not _SCHEME.match(path)


def escape_glob(path: str) -> str:
  """A path as a Beam match pattern that matches only itself.

  Beam's patterns have no escape character, but a one-character class
  does: `[` becomes `[[]`, `*` `[*]` and `?` `[?]` (a lone `]` is literal
  already). So a folder named `photos [2019]` or `what?` is taken as it
  is written.
  """
  return re.sub(r'([\[*?])', r'[\1]', path)


def printable(path: str) -> str:
  """A path as text that can be written anywhere: the bytes of a local
  name that are not valid UTF-8 (which Python holds as surrogates) shown
  as \\xNN, as in 'caf\\xe9.jpg'."""
  try:
    path.encode('utf-8')
    return path
  except UnicodeEncodeError:
    return os.fsencode(path).decode('utf-8', 'backslashreplace')


class Listed(NamedTuple):
  """One entry of `list_tree`.

  Attributes:
    path: The file's path, as the listing names it: below a symbolic link
      to a folder, through the link. A local name that is not valid UTF-8
      keeps its undecodable bytes as surrogates (see `printable`).
    problem: Why the file cannot be read (a broken symbolic link, a name
      that is not valid UTF-8, a folder that cannot be listed), or None.
    skip: Why the entry is not a file to read at all (a symbolic link loop,
      a FIFO or device), or None.
  """
  path: str
  problem: Optional[str] = None
  skip: Optional[str] = None


def list_tree(root: str, limit: Optional[int] = None) -> Iterator[Listed]:
  """Every file below a folder, at any depth, the folder name taken
  literally (`[`, `*` and `?` in it are not patterns).

  On gs:// and other object stores this is Beam's listing of the prefix
  (folder placeholder objects, whose names end in '/', are not files). A
  local folder is walked here rather than by Beam, whose local listing
  drops broken symbolic links and files it cannot measure without a word,
  does not follow links to folders, and hands on names that are not
  valid UTF-8, which fail the pipeline the first time they are encoded.
  Locally:

  - a symbolic link to a file is a file, named by the link's path;
  - a symbolic link to a folder is followed, unless the folder is one the
    walk is already inside of (a loop, such as a link to `..`): the link
    is then one entry with a `skip` reason, and the files of that folder
    are listed once, through the path that reached it first;
  - a broken symbolic link (its target does not exist, or is a loop of
    links), a name that is not valid UTF-8 and a subfolder that cannot
    be listed are entries with a `problem`;
  - anything else that is not a regular file (FIFO, socket, device) is an
    entry with a `skip` reason, as reading it could block.

  Args:
    root: The folder.
    limit: Stop after this many entries (None: all of them).

  Yields:
    Listed entries, folder by folder in name order (locally).

  Raises:
    BeamIOError: A remote listing failed.
    OSError: The local root cannot be listed.
  """
  entries = _walk(root) if is_local(root) else _remote(root, limit)
  for count, entry in enumerate(entries):
    if limit is not None and count >= limit:
      return
    yield entry


def _remote(root: str, limit: Optional[int]) -> Iterator[Listed]:
  pattern = escape_glob(strip_slash(root)).rstrip('/') + '/**'
  for meta in FileSystems.match([pattern], [limit])[0].metadata_list:
    if not meta.path.endswith('/'):
      yield Listed(meta.path)


def _folder_key(path: str):
  st = os.stat(path)
  return st.st_dev, st.st_ino


def _bad_name(path: str) -> Optional[str]:
  try:
    path.encode('utf-8')
    return None
  except UnicodeEncodeError:
    return (f'the path is not valid UTF-8: {printable(path)} (undecodable '
            'bytes shown as \\xNN)')


def _broken_link(path: str) -> str:
  target = printable(os.readlink(path))
  try:
    os.stat(path)
  except OSError as e:
    if e.errno == errno.ELOOP:
      return (f'broken symbolic link: target {target} is a loop of '
              'symbolic links')
  return f'broken symbolic link: target {target} does not exist'


def _loop_reason(path: str, is_link: bool) -> str:
  if is_link:
    return (f'symbolic link loop: it points to {printable(os.readlink(path))}'
            ', a folder it is inside of, whose files are listed once, '
            'through that folder')
  return (f'symbolic link loop: this is the folder '
          f'{printable(os.path.realpath(path))} again, reached through a '
          'symbolic link inside it, and its files are listed once, through '
          'that folder')


def _walk(root: str) -> Iterator[Listed]:
  # Depth first, with the (device, inode) of every folder on the way down,
  # so that a link back to one of them is seen as a loop.
  pending = [(root, frozenset([_folder_key(root)]))]
  first = True
  while pending:
    folder, inside = pending.pop()
    try:
      with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    except OSError as e:
      if first:
        raise
      yield Listed(folder, problem=f'cannot list the folder: {e.strerror}')
      continue
    first = False
    folders = []
    for entry in entries:
      path = entry.path
      try:
        is_link = entry.is_symlink()
        is_dir = entry.is_dir()
        is_file = not is_dir and entry.is_file()
      except OSError as e:
        # A loop of links to files (a.jpg -> b.jpg -> a.jpg) lands here.
        yield Listed(path, problem=_bad_name(path) or (
            _broken_link(path) if is_link else
            f'cannot read: {e.strerror}'))
        continue
      if is_dir:
        try:
          key = _folder_key(path)
        except OSError as e:
          yield Listed(path, problem=f'cannot list the folder: {e.strerror}')
          continue
        if key in inside:
          yield Listed(path, skip=_loop_reason(path, is_link))
        else:
          folders.append((path, inside | {key}))
      elif is_file:
        yield Listed(path, problem=_bad_name(path))
      elif is_link:
        yield Listed(path, problem=_bad_name(path) or _broken_link(path))
      else:
        yield Listed(path, skip='not a regular file (a FIFO, socket or '
                     'device)')
    pending.extend(reversed(folders))


class ReadCount:
  """Bytes of input files read so far, for progress reports.

  A file read as a stream counts the furthest offset read in it
  (`reached`), so that a file read again from its start (the CSV reader's
  retry with larger blocks) counts once; a file read whole counts its
  length (`add`). Safe to feed from any thread (pyarrow may read ahead on
  its own); `take` is called on the thread that reports the bytes.
  """

  def __init__(self):
    self._lock = threading.Lock()
    self._furthest: Dict[str, int] = {}
    self._new = 0

  def reached(self, path: str, offset: int) -> None:
    """`path` has been read up to `offset`."""
    with self._lock:
      before = self._furthest.get(path, 0)
      if offset > before:
        self._furthest[path] = offset
        self._new += offset - before

  def add(self, n: int) -> None:
    """`n` more bytes were read."""
    with self._lock:
      self._new += n

  def take(self) -> int:
    """The bytes read since the last take."""
    with self._lock:
      n, self._new = self._new, 0
      return n


class CountingFile:
  """A binary file object (from FileSystems.open) that tells a ReadCount
  how far it has been read; everything else is the file's own."""

  def __init__(self, f, path: str, count: ReadCount):
    self._f, self._path, self._count = f, path, count
    self._pos = 0

  def _moved(self, n: int) -> None:
    self._pos += n
    self._count.reached(self._path, self._pos)

  def read(self, size: int = -1) -> bytes:
    data = self._f.read(size)
    self._moved(len(data))
    return data

  def read1(self, size: int = -1) -> bytes:
    data = self._f.read1(size)
    self._moved(len(data))
    return data

  def readinto(self, buffer) -> int:
    n = self._f.readinto(buffer) or 0
    self._moved(n)
    return n

  def readline(self, size: int = -1) -> bytes:
    data = self._f.readline(size)
    self._moved(len(data))
    return data

  def seek(self, offset: int, whence: int = 0) -> int:
    self._pos = self._f.seek(offset, whence)
    return self._pos

  def tell(self) -> int:
    return self._f.tell()

  def __iter__(self):
    return self

  def __next__(self) -> bytes:
    line = self.readline()
    if not line:
      raise StopIteration
    return line

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self._f.close()

  def __getattr__(self, name):
    return getattr(self._f, name)

