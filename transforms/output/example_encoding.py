"""Columns of examples -> deterministic serialized tf.train.Examples.

The one serializer of every modality. A batch is described as columns,
{feature name: (dtype, values)}; `encode` turns n examples into records.

A batch is written straight in protobuf's wire format with NumPy: a few
array operations per feature for the whole batch, giving the bytes that
protobuf's deterministic serialization gives (map entries in its order of
names, packed int64 and float lists, an empty list kept as an empty
list), so equal examples are equal bytes (the fingerprint relies on it),
at about a third of the cost of building each Example with tfx_bsl and
serializing it again with sorted keys (benchmarks/TRIED.md, "Text").
Fewer than BATCH_MIN_EXAMPLES examples
are built as protos, which costs less than the arrays' set-up, and so are
examples of more than LARGE_EXAMPLE_BYTES (pictures), whose bytes protobuf
copies faster than the grid lays them out. Both ways give the same bytes
for the same columns, and the tests hold the batch way to protobuf's
own.
"""

from typing import Dict, List, Optional, Tuple

import numpy as np

DTYPES = ('bytes', 'int64', 'float32')
# Fewer examples than this are built as protos directly (see above).
BATCH_MIN_EXAMPLES = 64
# Larger batches are laid out this many examples at a time: the arrays stay
# small enough to be fast to allocate and to stay in the CPU's caches.
BATCH_CHUNK = 1024
_KINDS = {'bytes': 'bytes_list', 'int64': 'int64_list',
          'float32': 'float_list'}
# Field tags (field number << 3 | wire type 2, length-delimited) of
# Example.features, Features.feature (a map entry), the entry's key and
# value, Feature's three lists, and a list's values.
_FEATURES = _ENTRY = _KEY = _VALUES = 0x0a
_VALUE = 0x12
_LIST_TAGS = {'bytes': 0x0a, 'float32': 0x12, 'int64': 0x1a}
_U8 = np.uint8
# By a varint's size s (0 to 10 bytes): which of its bytes are used
# (_USED[s, j] = j < s) and which carry the "more bytes follow" bit.
_USED = np.arange(10) < np.arange(11)[:, None]
_MORE = np.where(np.arange(10) < np.arange(11)[:, None] - 1, 0x80,
                 0).astype(_U8)
# The same rows for the first 4 and 8 bytes, each row one word.
_USED4 = _USED[:, :4].copy().view(np.uint32).ravel()
_MORE4 = _MORE[:, :4].copy().view(np.uint32).ravel()
_USED8 = _USED[:, :8].copy().view(np.uint64).ravel()
_MORE8 = _MORE[:, :8].copy().view(np.uint64).ravel()
# Examples of more bytes than this on average (pictures) are built as
# protos however many there are: the byte grid and its scatters cost more
# per byte than protobuf's copies. 256 pictures of about 9 KB: 35 us each
# in the grid, 14 as protos; documents of 4 KB of text and 128 token ids
# cost about 17 either way (of 1.5 KB: 11 in the grid, 16 as protos).
LARGE_EXAMPLE_BYTES = 4096
# A bytes feature is padded into the grid (see _encode_batch) unless that
# would take more than 4 times its bytes plus this much per example.
_PAD_SLACK = 64


def encode(columns: Dict[str, tuple], n: int) -> List[bytes]:
  """Serializes n examples.

  Args:
    columns: {feature name: (dtype, values)} with dtype in DTYPES. `values`
      is a 1-D array or a list of str/bytes (one value per example), an
      array of 2 or more dimensions (a fixed number of values per example),
      or a list of 1-D arrays (a variable number).
    n: Number of examples.

  Returns:
    Deterministically serialized tf.train.Example records.
  """
  if not n:
    return []
  if n < BATCH_MIN_EXAMPLES or _bytes_of(columns) > LARGE_EXAMPLE_BYTES * n:
    return _encode_protos(columns, n)
  if n <= BATCH_CHUNK + BATCH_MIN_EXAMPLES:
    return _encode_batch(columns, n)
  out = []
  for lo in range(0, n, BATCH_CHUNK):
    hi = n if n - lo <= BATCH_CHUNK + BATCH_MIN_EXAMPLES else lo + BATCH_CHUNK
    out += _encode_batch({name: (dtype, values[lo:hi])
                          for name, (dtype, values) in columns.items()},
                         hi - lo)
    if hi == n:
      break
  return out


def _bytes_of(columns: Dict[str, tuple]) -> int:
  """The bytes of the columns' strings (the bulk of large examples)."""
  return sum(sum(map(len, values)) for dtype, values in columns.values()
             if dtype == 'bytes')


def _sizes(u: np.ndarray) -> Tuple[np.ndarray, int]:
  """Each unsigned value's varint size in bytes (1 to 10), and the
  largest."""
  sizes = np.ones(u.shape, _U8)
  top = int(u.max()) if u.size else 0
  width = 1
  while width < 10 and top >> (7 * width):
    sizes += u >= (1 << (7 * width))
    width += 1
  return sizes, width


def _size_of(lengths: np.ndarray) -> np.ndarray:
  """Bytes of the fields holding `lengths` bytes: tag, length, bytes."""
  return 1 + _sizes(lengths.astype(np.uint64))[0] + lengths


def _varints(values: np.ndarray,
             sizes: Tuple[np.ndarray, int]) -> Tuple[np.ndarray, np.ndarray]:
  """The varints of values (n, k), whose sizes are `sizes` (_sizes), as
  bytes (n, k * w) and which of those bytes are used.

  Below 2**56 each varint is made in one machine word (w = 4 or 8), 7
  bits a byte with the "more" bits set; whole words keep the copies
  contiguous. Larger values (a negative one takes 10 bytes) go through a
  grid of w = 10 bytes each.
  """
  u = values.view(np.uint64)
  sizes, width = sizes
  if width > 8:
    shifts = np.arange(0, 70, 7, dtype=np.uint64)
    data = ((u[..., None] >> shifts) & np.uint64(0x7f)).astype(_U8)
    data |= _MORE[sizes]
    return data.reshape(len(u), -1), _USED[sizes].reshape(len(u), -1)
  word_type, used, more = ((np.uint32, _USED4, _MORE4) if width <= 4 else
                           (np.uint64, _USED8, _MORE8))
  word = _varint_words(u.astype(word_type), sizes, width, more)
  return word.view(_U8), used[sizes].view(bool)


def _varint_words(u: np.ndarray, sizes: np.ndarray, width: int,
                  more: np.ndarray) -> np.ndarray:
  """Each value's varint in one machine word of u's type (its bytes in
  memory order), 7 bits a byte, with the "more" bits of its size (`more`:
  _MORE4 or _MORE8)."""
  word = u & 0x7f
  part = np.empty_like(u)
  for j in range(1, width):
    np.right_shift(u, 7 * j, out=part)
    part &= 0x7f
    part <<= 8 * j
    word |= part
  return word | more[sizes]


def _fields(tags: list, lengths: np.ndarray,
            keep: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """The start of length-delimited fields: per example (row of lengths)
  and field (column), its tag and the varint of its length, as 8 bytes
  (n, f, 8) and which of them are used (none where keep is False)."""
  u = lengths.astype(np.uint64)
  sizes, width = _sizes(u)
  if width > 7:
    raise ValueError('an example of 2**49 bytes or more')
  word = _varint_words(u, sizes, width, _MORE8) << 8
  word |= np.array(tags, np.uint64)
  used = _USED8[sizes + 1] * keep
  n = len(u)
  return word.view(_U8).reshape(n, -1, 8), used.view(bool).reshape(n, -1, 8)


def _padded(flat: np.ndarray, counts: np.ndarray):
  """Values of variable counts as rows padded with zeros, and which
  places hold a value."""
  places = np.arange(int(counts.max())) < counts[:, None]
  rows = np.zeros(places.shape, flat.dtype)
  rows[places] = flat
  return rows, places


def _value_lists(values, dtype: str, n: int) -> tuple:
  """A feature's values: (lengths, data) for strings (one per example),
  else (counts, rows, places): the values as rows, padded where counts
  vary (places: which hold a value; None when counts do not vary)."""
  if dtype == 'bytes':
    flat = [v.encode('utf-8') if isinstance(v, str) else bytes(v)
            for v in values]
    return (np.fromiter(map(len, flat), np.int64, n),
            np.frombuffer(b''.join(flat), _U8))
  numpy_type = np.int64 if dtype == 'int64' else np.float32
  if isinstance(values, np.ndarray):
    rows = np.ascontiguousarray(values, numpy_type).reshape(n, -1)
    return np.full(n, rows.shape[1], np.int64), rows, None
  parts = [np.asarray(v, numpy_type).reshape(-1) for v in values]
  counts = np.fromiter(map(len, parts), np.int64, n)
  flat = np.concatenate(parts) if parts else np.zeros(0, numpy_type)
  return (counts,) + _padded(flat, counts)


class _Grid:
  """Records as the rows of a byte grid, left to right, with the bytes
  each row does not use marked. A block is some columns of every row."""

  def __init__(self, n: int):
    self.n = n
    self.blocks: List[tuple] = []
    self.width = 0

  def add(self, data: np.ndarray, used: Optional[np.ndarray] = None):
    """Columns: data and used (n, w); used None: all used."""
    self.blocks.append((data, used))
    self.width += data.shape[1]

  def bytes(self, lengths: bool = False):
    """The used bytes, one record after another (and each record's
    length, if asked)."""
    grid = np.empty((self.n, self.width), _U8)
    used = np.ones((self.n, self.width), bool)
    at = 0
    for data, mask in self.blocks:
      w = data.shape[1]
      grid[:, at:at + w] = data
      if mask is not None:
        used[:, at:at + w] = mask
      at += w
    data = np.compress(used.ravel(), grid.ravel())
    return (data, used.sum(axis=1)) if lengths else data


def _join(pieces: list, n: int) -> np.ndarray:
  """The records' bytes, each the concatenation of every piece's part for
  it in order. A piece is (data, lengths): the records' parts one after
  another, and their lengths."""
  total = np.zeros(n, np.int64)
  for _, lengths in pieces:
    total += lengths
  buf = np.empty(int(total.sum()), _U8)
  at = np.cumsum(total) - total
  for data, lengths in pieces:
    if data.size:
      first = np.cumsum(lengths) - lengths
      buf[np.repeat(at - first, lengths) + np.arange(data.size)] = data
    at = at + lengths
  return buf


def _map_order(name: str) -> tuple:
  """Sorts feature names as protobuf's deterministic serialization (upb)
  sorts map keys: bytes compared over the shorter length, and where one
  name begins the other, the longer first ('label_text' before 'label')."""
  return tuple(name.encode('utf-8')) + (256,)


def _encode_batch(columns: Dict[str, tuple], n: int) -> List[bytes]:
  """`encode` for a batch: the wire format laid out with NumPy.

  Example{features: Features{feature: map entries}}; an entry is
  {key: name, value: Feature{kind list: {values}}}, each field a tag and
  a length before its bytes. Every example is a row of a byte grid
  (_Grid): the starts of its fields (_fields, made together), the names,
  and the values; a string too long to pad into the grid goes between
  two grids (_join).
  """
  names = sorted(columns, key=_map_order)
  lists, tags, lengths, keep = [], [_FEATURES], [], []
  entries = np.zeros(n, np.int64)
  for name in names:
    dtype, values = columns[name]
    values = _value_lists(values, dtype, n)
    if dtype == 'bytes':
      count = values[0]
      kept = np.ones(n, bool)  # one string each, empty or not
    elif dtype == 'int64':
      counts, rows, places = values
      sizes = _sizes(rows.view(np.uint64))
      count = (sizes[0] if places is None else sizes[0] * places).sum(
          axis=1, dtype=np.int64)
      kept = counts > 0  # an empty packed list is left out
      values += (sizes,)
    else:
      counts = values[0]
      count, kept = counts * 4, counts > 0
    key = name.encode('utf-8')
    key = bytes([_KEY]) + _varint(len(key)) + key
    list_length = np.where(kept, _size_of(count), 0)
    feature_length = _size_of(list_length)
    entry_length = len(key) + _size_of(feature_length)
    entries += _size_of(entry_length)
    lists.append((dtype, key, values))
    tags += [_ENTRY, _VALUE, _LIST_TAGS[dtype], _VALUES]
    lengths += [entry_length, feature_length, list_length, count]
    keep += [True, True, True, kept]
  heads, head_used = _fields(
      tags, np.stack([entries] + lengths, axis=1),
      np.stack([np.ones(n, bool)] + [np.broadcast_to(k, n) for k in keep],
               axis=1))
  grid, pieces = _Grid(n), []
  grid.add(heads[:, 0], head_used[:, 0])
  for i, (dtype, key, values) in enumerate(lists):
    for f in range(1 + 4 * i, 5 + 4 * i):
      grid.add(heads[:, f], head_used[:, f])
      if f == 1 + 4 * i:  # after the entry's start, its key
        grid.add(np.broadcast_to(np.frombuffer(key, _U8), (n, len(key))))
    if dtype == 'bytes':
      count, data = values
      if int(count.max()) * n <= 4 * data.size + _PAD_SLACK * n:
        grid.add(*_padded(data, count))
      else:
        pieces += [grid.bytes(lengths=True), (data, count)]
        grid = _Grid(n)
    elif dtype == 'int64':
      _, rows, places, sizes = values
      data, used = _varints(rows, sizes)
      if places is not None:  # each value's bytes, where it is one
        per_value = used.shape[1] // max(places.shape[1], 1)
        used = used & np.repeat(places, per_value, axis=1)
      grid.add(data, used)
    else:
      _, rows, places = values
      grid.add(rows.astype('<f4', copy=False).view(_U8),
               None if places is None else np.repeat(places, 4, axis=1))
  if pieces:
    buf = _join(pieces + [grid.bytes(lengths=True)], n)
  else:
    buf = grid.bytes()
  ends = np.cumsum(_size_of(entries)).tolist()
  raw = buf.tobytes()
  return [raw[a:b] for a, b in zip([0] + ends[:-1], ends)]


def _varint(value: int) -> bytes:
  """One non-negative int's varint."""
  out = bytearray()
  while value >= 0x80:
    out.append(value & 0x7f | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def _rows(values, dtype: str, n: int) -> list:
  """One feature column as n value sequences (the layouts `encode` takes)."""
  if dtype == 'bytes':
    return [[v.encode('utf-8') if isinstance(v, str) else bytes(v)]
            for v in values]
  numpy_type = np.int64 if dtype == 'int64' else np.float32
  if isinstance(values, np.ndarray):
    return list(np.ascontiguousarray(values, numpy_type).reshape(n, -1))
  return [np.asarray(v, numpy_type).reshape(-1) for v in values]


def _encode_protos(columns: Dict[str, tuple], n: int) -> List[bytes]:
  """`encode` for a few examples, building each proto directly."""
  from tensorflow.core.example import example_pb2  # pylint: disable=import-outside-toplevel
  rows = {name: (_KINDS[dtype], _rows(values, dtype, n))
          for name, (dtype, values) in columns.items()}
  out = []
  for i in range(n):
    example = example_pb2.Example()
    for name, (kind, values) in rows.items():
      value_list = getattr(example.features.feature[name], kind)
      value_list.SetInParent()  # an empty list is still this feature
      value_list.value.extend(values[i])
    out.append(example.SerializeToString(deterministic=True))
  return out
