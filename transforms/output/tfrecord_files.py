"""Reading and framing TFRecord records, with CRC checks. No Beam here.

The TFRecord framing is: uint64 length, uint32 masked CRC32C of the length,
the data, uint32 masked CRC32C of the data (all little-endian). Reading it
here, instead of through TensorFlow, lets a damaged shard be reported by name
and offset instead of failing the whole job.
"""

import gzip
import hashlib
import struct
from typing import BinaryIO, Dict, Iterator, List, Optional, Tuple

import google_crc32c
import numpy as np

from apache_beam.io.filesystems import FileSystems

from transforms.output import record_index

_HEADER = struct.Struct('<QI')
_FOOTER = struct.Struct('<I')


class CorruptRecordError(ValueError):
  """A TFRecord file is truncated or fails a CRC check."""


def masked_crc32c(data: bytes) -> int:
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + 0xa282ead8) & 0xffffffff


# The length headers framed so far: data length -> its 8 bytes and their
# masked CRC. Record lengths repeat (a dataset's records are alike), so a
# header is mostly a lookup; at most this many are kept.
_LENGTH_HEADERS: Dict[int, bytes] = {}
_MAX_LENGTH_HEADERS = 1 << 16
# Records framed at a time: a few hundred KB of parts, kept in cache.
_FRAME_CHUNK = 2048


def _new_length_header(n: int) -> bytes:
  """The 12 bytes before a record of n bytes, not yet in _LENGTH_HEADERS:
  its length and that length's masked CRC (kept there while it has
  room)."""
  length = n.to_bytes(8, 'little')
  header = length + masked_crc32c(length).to_bytes(4, 'little')
  if len(_LENGTH_HEADERS) < _MAX_LENGTH_HEADERS:
    _LENGTH_HEADERS[n] = header
  return header


def _frame_chunk(records: list) -> bytes:
  n = len(records)
  crcs = np.fromiter(map(google_crc32c.value, records), np.uint32, n)
  # masked_crc32c on every CRC at once (uint32 arithmetic wraps).
  masked = ((crcs >> 15) | (crcs << 17)) + np.uint32(0xa282ead8)
  footers = memoryview(masked.astype('<u4').tobytes())
  headers = _LENGTH_HEADERS
  parts = [b''] * (3 * n)
  parts[0::3] = [headers.get(k) or _new_length_header(k)
                 for k in map(len, records)]
  parts[1::3] = records
  parts[2::3] = [footers[i:i + 4] for i in range(0, 4 * n, 4)]
  return b''.join(parts)


def frame_records(records) -> bytes:
  """The TFRecord framing of `records`, in order, as one bytes object:
  what writing them one at a time with a TFRecord writer would write.

  The data CRCs are computed in C one record each and masked together in
  NumPy; each length header is looked up once made (see _LENGTH_HEADERS).
  About twice as fast as framing one record at a time in Python for
  records of a few hundred bytes (benchmarks/record_framing.py).
  """
  if not isinstance(records, list):
    records = list(records)
  if len(records) <= _FRAME_CHUNK:
    return _frame_chunk(records) if records else b''
  return b''.join(_frame_chunk(records[i:i + _FRAME_CHUNK])
                  for i in range(0, len(records), _FRAME_CHUNK))


def iter_records(stream: BinaryIO, verify: bool = True) -> Iterator[bytes]:
  """Yields the records of an (uncompressed) TFRecord stream.

  Args:
    stream: A binary file object positioned at the start.
    verify: Check both CRCs of every record.

  Yields:
    Each record's bytes.

  Raises:
    CorruptRecordError: Truncated data or a CRC mismatch, with the record
      index and byte offset.
  """
  index = 0
  offset = 0
  while True:
    header = stream.read(_HEADER.size)
    if not header:
      return
    if len(header) < _HEADER.size:
      raise CorruptRecordError(
          f'truncated record header at record {index}, byte {offset}')
    length, length_crc = _HEADER.unpack(header)
    if verify and masked_crc32c(header[:8]) != length_crc:
      raise CorruptRecordError(
          f'length CRC mismatch at record {index}, byte {offset}')
    data = stream.read(length)
    footer = stream.read(_FOOTER.size)
    if len(data) < length or len(footer) < _FOOTER.size:
      raise CorruptRecordError(
          f'truncated record {index} at byte {offset} (expected {length} '
          'bytes of data)')
    if verify and masked_crc32c(data) != _FOOTER.unpack(footer)[0]:
      raise CorruptRecordError(
          f'data CRC mismatch at record {index}, byte {offset}')
    yield data
    index += 1
    offset += _HEADER.size + length + _FOOTER.size


def count_records(stream: BinaryIO, block: int = 1 << 20,
                  entries: Optional[List[Tuple[int, int]]] = None) -> int:
  """Counts the records of an (uncompressed) TFRecord stream, reading it in
  large blocks and walking the length headers (no CRC checks).

  Args:
    stream: A binary file object positioned at the start.
    block: Bytes read at a time.
    entries: When given, (offset, full length) of every record is appended
      to it: the byte offset of its length header in the stream, and 8 + 4
      + data + 4 bytes (the index of transforms/output/record_index.py).

  Raises:
    CorruptRecordError: The stream ends inside a record.
  """
  count, pending, pos = 0, b'', 0
  start = 0  # offset in the stream of pending[0]
  record_overhead = _HEADER.size + _FOOTER.size
  while True:
    chunk = stream.read(block)
    if chunk:
      start += pos
      pending = pending[pos:] + chunk
      pos = 0
    end = len(pending)
    while end - pos >= _HEADER.size:
      length = _HEADER.unpack_from(pending, pos)[0]
      if end - pos < length + record_overhead:
        break
      if entries is not None:
        entries.append((start + pos, length + record_overhead))
      pos += length + record_overhead
      count += 1
    if not chunk:
      if pos != end:
        raise CorruptRecordError(
            f'truncated record {count} ({end - pos} bytes left over)')
      return count


class HashingReader:
  """File-like wrapper that SHA-256-hashes every byte read through it."""

  def __init__(self, raw: BinaryIO):
    self._raw = raw
    self.digest = hashlib.sha256()

  def read(self, n: int = -1) -> bytes:
    data = self._raw.read(n)
    self.digest.update(data)
    return data

  def drain(self) -> None:
    """Reads (and hashes) whatever is left, e.g. gzip's trailer."""
    while self.read(1 << 20):
      pass

  def close(self) -> None:
    self._raw.close()


def open_records(path: str, compressed: bool,
                 hashing: Optional[HashingReader] = None) -> BinaryIO:
  """Opens a TFRecord file for `iter_records` (gunzipping if compressed).

  Args:
    path: The file.
    compressed: Whether it is GZIP-compressed.
    hashing: Pass `open_hashing(path)` to checksum the stored bytes in the
      same pass that reads the records.
  """
  raw = hashing if hashing is not None else FileSystems.open(
      path, compression_type='uncompressed')
  return gzip.GzipFile(fileobj=raw, mode='rb') if compressed else raw


def open_hashing(path: str) -> HashingReader:
  """The file's stored bytes, hashed as they are read."""
  return HashingReader(FileSystems.open(path,
                                        compression_type='uncompressed'))


def shard_summary(path: str, compressed: bool, index: bool = False) -> dict:
  """Record count, size and checksum of one written shard, in one read.

  Args:
    path: The shard's path.
    compressed: Whether it is GZIP-compressed.
    index: Also write the shard's index (`<path>.idx`, DALI's tfrecord2idx
      format; see transforms/output/record_index.py) beside it, from the same
      read. Only for uncompressed shards, whose offsets a reader can seek
      to.

  Returns:
    {'path', 'records', 'bytes', 'sha256'}, and 'index' (the index file's
    path) when one was written.
  """
  if index and compressed:
    raise ValueError('an index of a gzip-compressed shard would hold offsets '
                     'no reader can seek to')
  entries: Optional[List[Tuple[int, int]]] = [] if index else None
  hashing = open_hashing(path)
  try:
    stream = open_records(path, compressed, hashing)
    records = count_records(stream, entries=entries)
    hashing.drain()
  finally:
    hashing.close()
  size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
  summary = {'path': path, 'records': records, 'bytes': size,
             'sha256': hashing.digest.hexdigest()}
  if entries is not None:
    summary['index'] = record_index.index_path(path)
    record_index.write_index(summary['index'], entries)
  return summary
