"""The table reader's large local CSV and TSV files, in byte ranges.

Part of the table reader (`sources/tables.py`): what the sensor and text
readers' worker processes read, each a range on its own.

Decisions:

- Large local CSV/TSV files can be read in byte ranges, each on its own and
  by several processes at once (`csv_ranges`, `parse_range`): exact as long
  as no range holds a double quote; from the first that does, the rest of
  the file is read in one piece (`iter_csv_from`).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
from typing import TYPE_CHECKING, List, NamedTuple, Optional, Tuple

import pyarrow as pa

from transforms.sources import table_columns
from transforms.sources import table_csv
from transforms.sources import table_formats
from transforms.sources import table_rows

if TYPE_CHECKING:
  from transforms.sources import files

# A file without a double quote has one record per line, so a range that
# starts after a newline starts at a record: each range is read on its own,
# with the header line put in front, and its rows are numbered from 0; the
# reader adds the records of the ranges before it. The first range that
# holds a quote (a quoted field may hold a newline), or that fails, ends
# the ranges: the rest of the file is read in one piece from that range's
# start, as it would be without ranges (a failure then names the file's own
# row number).

# Ranges of about this many bytes; smaller files are read in one piece.
RANGE_BYTES = 16 << 20


class Ranges(NamedTuple):
  """A CSV or TSV file cut at newlines: its header line (with a BOM, if
  any) and [(start, end)) byte ranges of the rest."""
  header: bytes
  spans: List[Tuple[int, int]]


# With quotes=True, how far past a range's nominal end a newline outside
# quotes (by the count of quotes) is looked for before the range is cut at
# the next newline anyway (the reader then finds out, and reads on in one
# piece).
_QUOTED_LINE_SEARCH = 4 << 20


def _local_table_stat(path: str, fmt: str) -> Optional[os.stat_result]:
  """The os.stat of a local CSV or TSV file; None for another format, a
  remote path or a path that cannot be read."""
  if fmt not in ('csv', 'tsv') or '://' in path:
    return None
  try:
    return os.stat(path)
  except OSError:
    return None


def ranges_possible(path: str) -> bool:
  """Whether csv_ranges may cut the file into ranges (with the default
  range size), from its name and size alone: a local CSV or TSV file of
  at least two ranges."""
  stat = _local_table_stat(path, table_formats.format_of(path))
  return stat is not None and stat.st_size >= 2 * RANGE_BYTES


def csv_ranges(path: str, fmt: str, range_bytes: Optional[int] = None,
               quotes: bool = False) -> Optional[Ranges]:
  """The file's ranges of about `range_bytes` (default RANGE_BYTES), or
  None when it is read in one piece: not a local CSV or TSV file, smaller
  than two ranges, or a header with a quote.

  With `quotes`, quotes are allowed (not in an odd number in the header)
  and each range ends at the first newline after its nominal end where the
  number of quotes since the range's start (itself such a place) is even:
  outside any quoted field in a file whose quotes open and close fields (a
  doubled quote counts twice). A quote inside an unquoted field breaks
  that rule, and so does a range cut after _QUOTED_LINE_SEARCH bytes
  without such a place, so the reader must check that each range ended
  outside a quoted field (see modalities/text/parse.parse_csv_range)."""
  range_bytes = range_bytes or RANGE_BYTES
  stat = _local_table_stat(path, fmt)
  if stat is None:
    return None
  # Each pass of a run asks again; with quotes the whole file is read.
  found = _cut_ranges(path, range_bytes, quotes, _QUOTED_LINE_SEARCH,
                      stat.st_size, stat.st_mtime_ns)
  return found and Ranges(found.header, list(found.spans))


@functools.lru_cache(maxsize=16)
def _cut_ranges(path: str, range_bytes: int, quotes: bool, search: int,
                size: int, unused_mtime_ns: int) -> Optional[Ranges]:
  """csv_ranges for one state of the file (its size and modification
  time), with spans as a tuple (the cached value is shared)."""
  try:
    if size < 2 * range_bytes:
      return None
    spans = []
    with open(path, 'rb') as f:
      header = f.readline()
      if not header.endswith(b'\n'):
        return None
      if b'"' in header and (not quotes or header.count(b'"') % 2):
        return None
      start = f.tell()
      while start < size:
        if quotes:
          odd = f.read(range_bytes - 1).count(b'"') % 2
          line = f.readline()  # to the end of the line the range ends in
          odd ^= line.count(b'"') % 2
          searched = 0
          while odd and line and searched < search:
            line = f.readline()
            odd ^= line.count(b'"') % 2
            searched += len(line)
        else:
          f.seek(start + range_bytes - 1)
          f.readline()  # to the end of the line the range ends in
        end = min(f.tell(), size)
        spans.append((start, end))
        start = end
        f.seek(start)
  except OSError:
    return None
  return Ranges(header, tuple(spans))


class RangeRows(NamedTuple):
  """What parse_range found: [(good rows, bad rows)] with rows numbered
  from 0 in the range, and how many records the range holds (good and
  bad); or quoted=True and nothing else when the range holds a quote."""
  batches: List[Tuple[table_rows.RowBatch, List[Tuple[int, str]]]]
  records: int
  quoted: bool = False


def parse_range(path: str, fmt: str, columns: table_columns.Columns,
                unit: str, header: bytes, start: int, end: int,
                batch_rows: int = 65536) -> RangeRows:
  """Reads bytes [start, end) of a CSV or TSV file (see csv_ranges): what
  a worker process runs."""
  with open(path, 'rb') as f:
    f.seek(start)
    data = f.read(end - start)
  if b'"' in data:
    return RangeRows([], 0, quoted=True)
  # The range in one block: the block size is then not sampled from the
  # file through Beam, and rows are batched the same whatever the block.
  block = min(max(len(header) + len(data), table_csv.MIN_BLOCK_BYTES),
              table_csv.LARGEST_BLOCK_BYTES)
  batches = list(table_csv.iter_stream_batches(
      pa.BufferReader(header + data), path, fmt, columns, unit, batch_rows,
      block=block))
  records = sum(len(rows.row) + len(bad) for rows, bad in batches)
  return RangeRows(batches, records)


class HeaderThenRest(io.RawIOBase):
  """The header line, then the file from byte `start` on, as one stream:
  what pyarrow's CSV reader reads to read a file from a range's start.

  Args:
    f: The open file (seekable).
    header: The file's header line (from csv_ranges).
    start: Where the rest begins (a range's start).
  """

  def __init__(self, f, header: bytes, start: int):
    super().__init__()
    self._f, self._head = f, header
    f.seek(start)

  def readable(self):
    return True

  def readinto(self, buffer):
    if self._head:
      n = min(len(buffer), len(self._head))
      buffer[:n] = self._head[:n]
      self._head = self._head[n:]
      return n
    data = self._f.read(len(buffer))
    buffer[:len(data)] = data
    return len(data)


def iter_csv_from(path: str, fmt: str, columns: table_columns.Columns,
                  unit: str, header: bytes, start: int, first_row: int,
                  batch_rows: int = 65536,
                  reads: Optional[files.ReadCount] = None):
  """iter_batches over the file from byte `start` (a range's start, where
  data row `first_row` begins) to its end, in one piece."""
  with table_formats.open_file(path, reads) as f:
    stream = io.BufferedReader(HeaderThenRest(f, header, start), 1 << 20)
    yield from table_csv.iter_stream_batches(stream, path, fmt, columns,
                                             unit, batch_rows, first_row)


def shift_rows(rows: table_rows.RowBatch, bad: List[Tuple[int, str]],
               offset: int
               ) -> Tuple[table_rows.RowBatch, List[Tuple[int, str]]]:
  """A range's rows numbered in the whole file (row -1, not known, stays)."""
  if not offset:
    return rows, bad
  return (dataclasses.replace(rows, row=rows.row + offset),
          [(r + offset if r >= 0 else r, reason) for r, reason in bad])
