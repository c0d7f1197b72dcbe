"""The table reader's file formats, and how a table file is opened.

Part of the table reader (`sources/tables.py`): the format of a file from
its extension, and its bytes opened through Beam's file systems.

Decisions:

- Files are opened with Beam's `FileSystems.open` (so `gs://` works). CSV,
  TSV and JSON lines are read as a stream; memory is bounded by about one
  batch (plus one read-ahead block).
- Beam is imported on first use (opening a file through FileSystems), not
  with this module: the worker processes that parse CSV ranges open local
  files themselves and start without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

if TYPE_CHECKING:
  from transforms.sources import files

FORMATS = ('csv', 'tsv', 'jsonl', 'parquet')

_EXTENSIONS = {
    '.csv': 'csv',
    '.tsv': 'tsv', '.tab': 'tsv',
    '.jsonl': 'jsonl', '.ndjson': 'jsonl', '.json': 'jsonl',
    '.parquet': 'parquet', '.pq': 'parquet',
}
# How much of a file read_header samples: data rows, and bytes of a CSV or
# TSV file.
SAMPLE_ROWS = 1000
SAMPLE_BYTES = 4 << 20
# The UTF-8 byte-order mark some tools write at the start of a text file;
# the readers skip it.
BOM = b'\xef\xbb\xbf'


def format_of(path: str) -> Optional[str]:
  """The format of a file from its extension (case-insensitive), or None."""
  name = path.replace('\\', '/').rsplit('/', 1)[-1].lower()
  dot = name.rfind('.')
  return _EXTENSIONS.get(name[dot:]) if dot >= 0 else None


def open_file(path: str, reads: Optional[files.ReadCount] = None):
  """Opens a file for reading, as bytes.

  Args:
    path: Any path Beam's FileSystems opens (local, gs://...).
    reads: Told how far the file has been read (for progress reports), or
      None.

  Returns:
    A binary file object (a context manager).
  """
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  from transforms.sources import files  # pylint: disable=import-outside-toplevel,redefined-outer-name
  f = FileSystems.open(path, compression_type='uncompressed')
  return f if reads is None else files.CountingFile(f, path, reads)


def read_prefix(path: str, limit: int) -> Tuple[bytes, bool]:
  """The start of a file.

  Args:
    path: Any path Beam's FileSystems opens.
    limit: How many bytes to read at most.

  Returns:
    (the first `limit` bytes, whether that is all of the file).
  """
  with open_file(path) as f:
    data = f.read(limit)
    at_end = len(data) < limit or not f.read(1)
  return data, at_end


def check_format(fmt: str):
  """Raises ValueError when `fmt` is not one of FORMATS."""
  if fmt not in FORMATS:
    raise ValueError(f'format {fmt!r} is not one of {", ".join(FORMATS)}')
