"""The parallel read-decode-resize-encode step, as a Beam transform."""

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.modalities.image import processing as images
from transforms.modalities.image import features as schema
from transforms.core import contents
from transforms.core import metrics
from transforms.core import progress
from transforms.core.dead_letters import DEAD
from transforms.core.dead_letters import dead_letter

# Progress counters (core/progress.py; inputs.LISTED counts the inputs
# listed): inputs looked at by the first pass (FindContentFn); decoded or dead-lettered by the decoding pass
# (copy 0); settled without a second pass (bad in the first pass, or dropped
# by the content rules).
IDENTIFIED, PROCESSED, SETTLED = 'identified', 'processed', 'settled'


def read_bytes(path: str) -> bytes:
  """All bytes of a file through Beam's FileSystems (local, gs://, ...)."""
  with FileSystems.open(path, compression_type='uncompressed') as f:
    return f.read()


def example_from_image(ref, out: images.ProcessedImage, copy: int = 0,
                       write: bool = True, weight=None) -> dict:
  """The pipeline's per-example dict for a decoded image.

  Args:
    ref: The InputRef.
    out: The processed image.
    copy: Which copy of the input this is (rebalancing may write several).
    write: False for an input that rebalancing drops (decoded only so that
      a bad input is still dead-lettered and counted).
    weight: The example weight, or None when examples carry no weight.
  """
  count = float(out.pixel_count)
  example = {
      'copy': copy,
      'write': write,
      schema.ID: ref.example_id,
      schema.LABEL_TEXT: ref.label,
      'split': ref.split,
      'input': ref.path,
      # What the file holds (Pillow's format name), whatever its name says;
      # counted for the manifest, not stored in the record.
      'format': out.source_format,
      # The digest of its pixels at the stored size (core/contents.py).
      'content': out.content,
      schema.IMAGE: out.data,
      schema.ORIGINAL_HEIGHT: out.original_height,
      schema.ORIGINAL_WIDTH: out.original_width,
      schema.CHANNEL_MEAN: [s / count / 255.0 for s in out.channel_sum],
      schema.CHANNEL_MEAN_SQUARES: [
          s / count / 65025.0 for s in out.channel_sum_squares],
  }
  if weight is not None:
    example[schema.WEIGHT] = float(weight)
  return example


class DecodeImageFn(beam.DoFn):
  """Decode task -> example dict; bad inputs go to the 'dead' output.

  A task is (InputRef, copy index, write, weight). Only copy 0 of a bad
  input is dead-lettered; further copies of it are dropped and counted.
  With `ratios`, each example's split is that of its content (a bad input
  then has no split). The progress line counts inputs (copy 0), good or
  bad.
  """

  def __init__(self, cfg: images.ImageConfig, ratios=None):
    super().__init__()
    self._cfg, self._ratios = cfg, ratios
    self._decoded = metrics.counter('image', 'decoded')
    self._processed = progress.counter('image', PROCESSED)

  def process(self, task):
    ref, copy, write, weight = task
    try:
      out = images.process_image(read_bytes(ref.path), self._cfg, ref.path)
    except Exception as e:  # pylint: disable=broad-except
      if copy == 0:
        self._processed.inc()
        yield beam.pvalue.TaggedOutput(DEAD, _dead_letter(
            ref, e, None if self._ratios else ref.split))
      return
    self._decoded.inc()
    if copy == 0:
      self._processed.inc()
    if self._ratios:
      ref = ref._replace(split=contents.content_split(out.content,
                                                      self._ratios))
    yield example_from_image(ref, out, copy, write, weight)


def _dead_letter(ref, e: Exception, split: str) -> dict:
  """The dead letter of an input that could not be read or processed."""
  if isinstance(e, images.BadImageError):
    return dead_letter(ref.path, e.stage, e.reason, split)
  # Any storage error (missing, permission, network) is this input's
  # problem, not the job's: record it and go on.
  return dead_letter(ref.path, 'read', f'{type(e).__name__}: {e}', split)


class FindContentFn(beam.DoFn):
  """InputRef -> (InputRef, content digest), the split set from the content
  when `ratios` are given; bad inputs go to the 'dead' output (without a
  split when it was to come from the content).

  The first of two passes over the images, for runs that must know every
  example's split or content before deciding what to write (rebalancing
  with content splits, or dropping duplicates or label conflicts): it
  decodes and resizes but does not encode, and keeps no pixels. For the
  progress line, a bad input also counts as settled: the second pass does
  not see it.
  """

  def __init__(self, cfg: images.ImageConfig, ratios=None):
    super().__init__()
    self._cfg, self._ratios = cfg, ratios
    self._identified = progress.counter('image', IDENTIFIED)
    self._settled = progress.counter('image', SETTLED)

  def process(self, ref):
    try:
      digest = images.identify_content(read_bytes(ref.path), self._cfg,
                                       ref.path)
    except Exception as e:  # pylint: disable=broad-except
      self._identified.inc()
      self._settled.inc()
      yield beam.pvalue.TaggedOutput(DEAD, _dead_letter(
          ref, e, None if self._ratios else ref.split))
      return
    self._identified.inc()
    if self._ratios:
      ref = ref._replace(split=contents.content_split(digest, self._ratios))
    yield ref, digest


class DecodeImages(beam.PTransform):
  """Reads and processes every image in parallel.

  Input: decode tasks, already spread over workers (see
  core/shuffle.SeededShuffle). With `ratios`, each example's split is that
  of its content. Returns a DoOutputsTuple: `.examples` (dicts) and `.dead` (dead letters).
  """

  def __init__(self, cfg: images.ImageConfig, ratios=None):
    super().__init__()
    self._cfg, self._ratios = cfg, ratios

  def expand(self, tasks):
    return tasks | 'DecodeResizeEncode' >> beam.ParDo(
        DecodeImageFn(self._cfg, self._ratios)).with_outputs(
            DEAD, main='examples')
