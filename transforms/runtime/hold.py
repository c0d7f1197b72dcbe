"""Elements that wait on disk for a decision about all of them.

Some decisions need every example first (which split a near-duplicate
group goes to needs every picture's signature), but the examples are
already made (decoded, encoded) by then. Held in the runner, they would
stay in memory until the decision: the local runner keeps a step's whole
output before a step that waits for a side input. So each bundle writes
its elements to one file in the run's folder (through Beam's FileSystems:
local disk, or the object store a cluster's workers share), and only the
file's name travels; once the decision is there, each file is read back,
an element at a time. Memory stays that of one element.

`Spill` does the same for a DoFn whose outputs the runner groups: values
(or rows of an array, a few of which can be read back alone) go to a file,
and only references to them are grouped.

A bundle the runner retries writes a new file under a new name; the
failed attempt's file is named by no element and is removed with the
folder when the shards are written (output/manifest.py).
"""

import collections
import pickle
import uuid

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

# A hold file is the pickles of its elements, one after the other.


class HoldFn(beam.DoFn):
  """Elements -> the name of the file each bundle wrote them to (one
  element per bundle that had any)."""

  def __init__(self, folder: str):
    super().__init__()
    self._folder = folder

  def start_bundle(self):
    self._file, self._name = None, None

  def process(self, element):
    if self._file is None:
      self._name = FileSystems.join(self._folder, f'{uuid.uuid4().hex}.hold')
      self._file = FileSystems.create(self._name)
    # Straight into the file: large values (pictures) are written where
    # they are, not copied into one pickle first.
    pickle.dump(element, self._file, protocol=pickle.HIGHEST_PROTOCOL)

  def finish_bundle(self):
    if self._file is None:
      return
    self._file.close()
    name, self._file, self._name = self._name, None, None
    yield WindowedValue(name, 0, (GlobalWindow(),))


def read_held(name: str):
  """The elements of one hold file, in the order they were written.

  Raises:
    IOError: The file ends inside an element (it was cut).
  """
  size = FileSystems.match([name])[0].metadata_list[0].size_in_bytes
  with FileSystems.open(name, compression_type='uncompressed') as f:
    while f.tell() < size:
      try:
        yield pickle.load(f)
      except (EOFError, pickle.UnpicklingError) as e:
        raise IOError(f'hold file {name} is cut short: {e}') from None


class Hold(beam.PTransform):
  """Writes elements to files in `folder`; returns the files' names (read
  them back with read_held, after the decision)."""

  def __init__(self, folder: str):
    super().__init__()
    self._folder = folder

  def expand(self, elements):
    return elements | 'HoldOnDisk' >> beam.ParDo(HoldFn(self._folder))


# A reference to a value a Spill wrote: (file name, offset, length).
_REF = 'spilled'
_ROWS = 'spilled rows'


class Spill:
  """Values written to one new file in `folder`, each read back alone by
  the reference `put` returns (`take`): for a DoFn whose outputs the
  runner groups, so that only the references are grouped."""

  def __init__(self, folder: str):
    self._name = FileSystems.join(folder, f'{uuid.uuid4().hex}.spill')
    self._file = FileSystems.create(self._name)
    self._offset = 0

  def put(self, value) -> tuple:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    self._file.write(data)
    ref = (_REF, self._name, self._offset, len(data))
    self._offset += len(data)
    return ref

  def put_rows(self, rows: np.ndarray) -> tuple:
    """A reference to the rows of a uint8 array, written as they are, so
    that `take_rows` can read a few of them without the rest."""
    rows = np.ascontiguousarray(rows, np.uint8)
    self._file.write(rows.tobytes())
    ref = (_ROWS, self._name, self._offset, rows.shape[0], rows.shape[1])
    self._offset += rows.size
    return ref

  def close(self) -> None:
    self._file.close()


# Wanted rows closer than this many bytes are read in one read: a seek and a
# read of a file cost about as much as reading this much more of it. (At
# 12.5% of a block or more read whole, and row by row below that, 20,000
# pictures' verification made 2 reads per wanted row and spent 0.7 s there.)
_GAP_BYTES = 1 << 16


class Reader:
  """Reads Spill references through files it keeps open (the last few),
  for a DoFn that takes many references in a bundle: a spill file holds
  the parts of every group of its flush, so the same file comes back again
  and again. Opening it anew for each part costs three requests on an
  object store (Beam's GCS file system asks for the bucket, the object's
  metadata, then the bytes); an open file is read once and then served
  from its buffer. Close it at the end of the bundle."""

  KEEP = 8

  def __init__(self):
    self._files = collections.OrderedDict()

  def _file(self, name: str):
    f = self._files.pop(name, None)
    if f is None:
      f = FileSystems.open(name, compression_type='uncompressed')
      while len(self._files) >= self.KEEP:
        self._files.popitem(last=False)[1].close()
    self._files[name] = f
    return f

  def _read(self, name: str, at: int, length: int) -> bytes:
    f = self._file(name)
    f.seek(at)
    data = f.read(length)
    if len(data) != length:
      raise IOError(f'spill file {name} is cut short')
    return data

  def take(self, value):
    """The value a Spill reference names, or `value` itself when it is
    not one."""
    if not (isinstance(value, tuple) and len(value) == 4 and
            isinstance(value[0], str) and value[0] == _REF):
      return value
    _, name, offset, length = value
    return pickle.loads(self._read(name, offset, length))

  def take_rows(self, block, wanted: np.ndarray) -> np.ndarray:
    """Rows `wanted` (sorted indices) of a block of rows: a put_rows
    reference (read from its file, rows close to each other in one read),
    or the uint8 array itself."""
    if isinstance(block, np.ndarray):
      return block[wanted]
    _, name, offset, count, width = block
    wanted = np.asarray(wanted, np.int64)
    out = np.empty((len(wanted), width), np.uint8)
    if not len(wanted):
      return out
    if wanted[-1] >= count:
      raise IndexError(f'row {int(wanted[-1])} of a block of {count}')
    # Runs of wanted rows: a new run where the gap is too wide to read
    # over.
    cut = np.flatnonzero(np.diff(wanted) * width > _GAP_BYTES) + 1
    firsts = np.r_[0, cut]
    lasts = np.r_[cut, len(wanted)]
    for a, b in zip(firsts.tolist(), lasts.tolist()):
      lo, hi = int(wanted[a]), int(wanted[b - 1]) + 1
      data = self._read(name, offset + lo * width, (hi - lo) * width)
      out[a:b] = np.frombuffer(data, np.uint8).reshape(
          hi - lo, width)[wanted[a:b] - lo]
    return out

  def close(self) -> None:
    while self._files:
      self._files.popitem()[1].close()
