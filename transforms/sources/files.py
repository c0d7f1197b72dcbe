"""Paths and listings of input files, the same for every modality.

Plain functions over Beam's FileSystems, so local folders and gs:// work
alike; a listing that fails is empty rather than an exception (the callers
turn an empty input into one sentence for the user).
"""

from typing import List, Optional

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems


def exists(path: str) -> bool:
  """Whether the file or folder exists (False when it cannot be asked)."""
  try:
    return FileSystems.exists(path)
  except BeamIOError:
    return False


def match(pattern: str, limit: Optional[int] = None):
  """FileMetadata of the files matching a pattern (at most `limit`; [] when
  none or when the listing fails)."""
  try:
    result = FileSystems.match([pattern], [limit] if limit else None)[0]
  except BeamIOError:
    return []
  return result.metadata_list


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
