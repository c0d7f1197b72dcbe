"""Index files of TFRecord shards, in the format of DALI's `tfrecord2idx`.

One text line per record, in file order: the byte offset where the record
starts and the record's full length in bytes, "<offset> <length>\\n". The
full length counts the framing: 8 (length) + 4 (length CRC) + data + 4
(data CRC), so the next record starts at offset + length. DALI's
`fn.readers.tfrecord(path=..., index_path=...)` needs such a file per
shard, and the `tfrecord` package's PyTorch reader uses it to split a shard
between workers. Offsets are those of the stored bytes, so an index only
means something for an uncompressed shard.

`shard_summary` (transforms/output/tfrecord_files.py) collects the entries in the
same read that counts and checksums a written shard; `check_index` is the
validation pipeline's check of an index against the records it read.
"""

from typing import List, Optional, Sequence, Tuple

from apache_beam.io.filesystems import FileSystems

SUFFIX = '.idx'
# Length header, its CRC, and the data CRC around every record's data.
FRAMING = 8 + 4 + 4

Entry = Tuple[int, int]  # (offset, full length)


def index_path(shard_path: str) -> str:
  """The index file written beside a shard."""
  return shard_path + SUFFIX


def entries_from_sizes(data_sizes: Sequence[int]) -> List[Entry]:
  """(offset, full length) of consecutive records with these data sizes."""
  entries, offset = [], 0
  for size in data_sizes:
    entries.append((offset, size + FRAMING))
    offset += size + FRAMING
  return entries


def format_index(entries: Sequence[Entry]) -> bytes:
  return ''.join(f'{offset} {length}\n' for offset, length in entries
                 ).encode('ascii')


def write_index(path: str, entries: Sequence[Entry]) -> None:
  with FileSystems.create(path, compression_type='uncompressed') as f:
    f.write(format_index(entries))


def parse_index(data: bytes) -> List[Entry]:
  """The entries of an index file's bytes.

  Raises:
    ValueError: A line that is not two whole numbers, or a last line
      without its newline (a cut file); the message names the line.
  """
  if data and not data.endswith(b'\n'):
    raise ValueError('the last line has no newline (the file was cut)')
  entries = []
  for number, line in enumerate(data.split(b'\n')[:-1], start=1):
    parts = line.split(b' ')
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
      raise ValueError(f'line {number} is not "<offset> <length>": '
                       f'{line[:40]!r}')
    entries.append((int(parts[0]), int(parts[1])))
  return entries


def check_index(path: str, shard: dict, data_sizes: Sequence[int],
                compressed: bool) -> Optional[str]:
  """Compares a shard's index file with the records read from the shard.

  Args:
    path: The index file.
    shard: The manifest's shard entry ({'file', 'index', ...}).
    data_sizes: Data bytes of each record, in file order, as read.
    compressed: Whether the shard is GZIP-compressed.

  Returns:
    None when the index lists every record at its offset with its length,
    else one problem naming the index file.
  """
  name = shard['index']
  if compressed:
    return (f'{name}: an index of a gzip-compressed shard cannot hold '
            'usable offsets')
  if not FileSystems.exists(path):
    return f'{name}: index file is missing'
  with FileSystems.open(path, compression_type='uncompressed') as f:
    data = f.read()
  try:
    listed = parse_index(data)
  except ValueError as e:
    return f'{name}: not a tfrecord2idx index: {e}'
  actual = entries_from_sizes(data_sizes)
  if len(listed) != len(actual):
    return (f'{name}: lists {len(listed)} records but {shard["file"]} has '
            f'{len(actual)}')
  for number, (got, want) in enumerate(zip(listed, actual)):
    if got != want:
      return (f'{name}: record {number} is listed at byte {got[0]} with '
              f'{got[1]} bytes, but {shard["file"]} has it at byte '
              f'{want[0]} with {want[1]} bytes')
  return None
