"""Reading TFRecord files record by record, with CRC checks. No Beam here.

The TFRecord framing is: uint64 length, uint32 masked CRC32C of the length,
the data, uint32 masked CRC32C of the data (all little-endian). Reading it
here, instead of through TensorFlow, lets a damaged shard be reported by name
and offset instead of failing the whole job.
"""

import gzip
import hashlib
import struct
from typing import BinaryIO, Iterator

import google_crc32c

from apache_beam.io.filesystems import FileSystems

_HEADER = struct.Struct('<QI')
_FOOTER = struct.Struct('<I')


class CorruptRecordError(ValueError):
  """A TFRecord file is truncated or fails a CRC check."""


def masked_crc32c(data: bytes) -> int:
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + 0xa282ead8) & 0xffffffff


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


def open_records(path: str, compressed: bool) -> BinaryIO:
  """Opens a TFRecord file for `iter_records` (gunzipping if compressed)."""
  raw = FileSystems.open(path, compression_type='uncompressed')
  return gzip.GzipFile(fileobj=raw, mode='rb') if compressed else raw


def file_sha256(path: str, chunk: int = 1 << 20) -> str:
  """SHA-256 of a file's bytes as stored (compressed or not)."""
  digest = hashlib.sha256()
  with FileSystems.open(path, compression_type='uncompressed') as f:
    while True:
      block = f.read(chunk)
      if not block:
        break
      digest.update(block)
  return digest.hexdigest()


def shard_summary(path: str, compressed: bool) -> dict:
  """Record count, size and checksum of one written shard.

  Args:
    path: The shard's path.
    compressed: Whether it is GZIP-compressed.

  Returns:
    {'path', 'records', 'bytes', 'sha256'}.
  """
  with open_records(path, compressed) as stream:
    records = sum(1 for _ in iter_records(stream, verify=False))
  size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
  return {'path': path, 'records': records, 'bytes': size,
          'sha256': file_sha256(path)}
