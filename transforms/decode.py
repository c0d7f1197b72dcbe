"""The parallel read-decode-resize-encode step, as a Beam transform."""

import logging
import threading
import time

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms import images
from transforms import schema
from transforms.sources import DEAD
from transforms.sources import dead_letter

_LOG = logging.getLogger(__name__)


def read_bytes(path: str) -> bytes:
  """All bytes of a file through Beam's FileSystems (local, gs://, ...)."""
  with FileSystems.open(path, compression_type='uncompressed') as f:
    return f.read()


class _Progress:
  """Logs count and rate at most every `interval` seconds, per process."""

  def __init__(self, interval: float = 10.0):
    self._interval = interval
    self._lock = threading.Lock()
    self._count = 0
    self._start = None
    self._last = 0.0

  def tick(self):
    with self._lock:
      now = time.monotonic()
      if self._start is None:
        self._start = self._last = now
      self._count += 1
      if now - self._last >= self._interval:
        self._last = now
        rate = self._count / max(now - self._start, 1e-9)
        _LOG.info('decoded %d images (%.0f images/s in this worker)',
                  self._count, rate)


_PROGRESS = _Progress()


def example_from_image(ref, out: images.ProcessedImage) -> dict:
  """The pipeline's per-example dict for a decoded image."""
  count = float(out.pixel_count)
  return {
      schema.ID: ref.example_id,
      schema.LABEL_TEXT: ref.label,
      'split': ref.split,
      'input': ref.path,
      schema.IMAGE: out.data,
      schema.ORIGINAL_HEIGHT: out.original_height,
      schema.ORIGINAL_WIDTH: out.original_width,
      schema.CHANNEL_MEAN: [s / count / 255.0 for s in out.channel_sum],
      schema.CHANNEL_MEAN_SQUARES: [
          s / count / 65025.0 for s in out.channel_sum_squares],
  }


class DecodeImageFn(beam.DoFn):
  """InputRef -> example dict; bad inputs go to the 'dead' output."""

  def __init__(self, cfg: images.ImageConfig):
    self._cfg = cfg
    self._decoded = beam.metrics.Metrics.counter('images', 'images_decoded')
    self._bad = beam.metrics.Metrics.counter('images', 'images_dead_lettered')

  def process(self, ref):
    try:
      data = read_bytes(ref.path)
    except Exception as e:  # pylint: disable=broad-except
      # Any storage error (missing, permission, network) is this input's
      # problem, not the job's: record it and go on.
      self._bad.inc()
      yield beam.pvalue.TaggedOutput(
          DEAD, dead_letter(ref.path, 'read', f'{type(e).__name__}: {e}',
                            ref.split))
      return
    try:
      out = images.process_image(data, self._cfg)
    except images.BadImageError as e:
      self._bad.inc()
      yield beam.pvalue.TaggedOutput(
          DEAD, dead_letter(ref.path, e.stage, e.reason, ref.split))
      return
    self._decoded.inc()
    _PROGRESS.tick()
    yield example_from_image(ref, out)


class DecodeImages(beam.PTransform):
  """Reads and processes every image in parallel.

  Returns a DoOutputsTuple: `.examples` (dicts) and `.dead` (dead letters).
  """

  def __init__(self, cfg: images.ImageConfig):
    super().__init__()
    self._cfg = cfg

  def expand(self, refs):
    return (refs
            # Spread the listing over all workers before the costly step.
            | 'SpreadInputs' >> beam.Reshuffle()
            | 'DecodeResizeEncode' >> beam.ParDo(
                DecodeImageFn(self._cfg)).with_outputs(DEAD, main='examples'))
