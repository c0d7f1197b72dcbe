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

A bundle the runner retries writes a new file under a new name; the
failed attempt's file is named by no element and is removed with the
folder when the shards are written (output/manifest.py).
"""

import pickle
import struct
import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

# Each element in a hold file: its pickle's length (uint64), then the pickle.
_LENGTH = struct.Struct('<Q')


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
    data = pickle.dumps(element, protocol=pickle.HIGHEST_PROTOCOL)
    self._file.write(_LENGTH.pack(len(data)))
    self._file.write(data)

  def finish_bundle(self):
    if self._file is None:
      return
    self._file.close()
    name, self._file, self._name = self._name, None, None
    yield WindowedValue(name, 0, (GlobalWindow(),))


def read_held(name: str):
  """The elements of one hold file, in the order they were written."""
  with FileSystems.open(name, compression_type='uncompressed') as f:
    while True:
      head = f.read(_LENGTH.size)
      if not head:
        return
      if len(head) != _LENGTH.size:
        raise IOError(f'hold file {name} is cut short')
      size = _LENGTH.unpack(head)[0]
      data = f.read(size)
      if len(data) != size:
        raise IOError(f'hold file {name} is cut short')
      yield pickle.loads(data)


class Hold(beam.PTransform):
  """Writes elements to files in `folder`; returns the files' names (read
  them back with read_held, after the decision)."""

  def __init__(self, folder: str):
    super().__init__()
    self._folder = folder

  def expand(self, elements):
    return elements | 'HoldOnDisk' >> beam.ParDo(HoldFn(self._folder))
