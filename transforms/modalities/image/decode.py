"""The parallel read-decode-resize-encode step, as a Beam transform."""

import logging
import os
import threading
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils.windowed_value import WindowedValue

from transforms.modalities.image import processing as images
from transforms.modalities.image import features as schema
from transforms.core import contents
from transforms.core import metrics
from transforms.core import processes as processes_lib
from transforms.core import progress
from transforms.core.dead_letters import DEAD
from transforms.core.dead_letters import dead_letter
from transforms.sources import files

# Progress counters (core/progress.py; inputs.LISTED counts the inputs
# listed): inputs looked at by the first pass (FindContentFn); decoded or
# dead-lettered by the decoding pass (copy 0); settled without a second pass
# (bad in the first pass, or dropped by the content rules).
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


# ------------------------------------------------------------ early work --
#
# On the local runner the launching process spends its first seconds
# importing TensorFlow and tf.Transform and building the pipeline, on one
# core, before the first image is decoded. `start_early` hands the first
# images of a folder to the worker processes right away, in that time; the
# decoding DoFn then takes their results (`early_result`) instead of
# decoding them again, in its own order, so the output is the same. A
# result is used only for the same options and while the file's size and
# modification time are those it had when it was listed; anything else is
# decoded as usual.


class _Early(NamedTuple):
  cfg: images.ImageConfig
  stat: Tuple[int, int]  # size, modification time (ns) when listed
  future: Any  # of process_inputs' list of (result, error)
  index: int  # this file's place in that list


_EARLY: Dict[str, _Early] = {}
_EARLY_LOCK = threading.Lock()
_EARLY_COUNTS = {'started': 0, 'used': 0}
# Memory the results decoded ahead may take at most, counted at the size
# of the stored pixels uncompressed (a JPEG or PNG result at a quarter).
EARLY_BYTES = 192 << 20


def early_limit(cfg: images.ImageConfig) -> int:
  """How many images may be decoded ahead within EARLY_BYTES."""
  raw = cfg.height * cfg.width * (1 if cfg.color == 'grey' else 3)
  if cfg.storage in ('jpeg', 'png'):
    raw = max(1, raw // 4)
  return max(0, EARLY_BYTES // raw)


def start_early(paths: Sequence[str], cfg: images.ImageConfig,
                processes: int, batch: int = 8) -> int:
  """Starts decoding `paths` (local files) in the shared worker processes;
  returns how many were started. Replaces what an earlier call started."""
  stop_early(log=False)
  try:
    pool = processes_lib.shared_pool(processes, (images.__name__,))
  except Exception:  # pylint: disable=broad-except
    # The decoding DoFn tries again, and says so when it cannot either.
    return 0
  started = {}
  for first in range(0, len(paths), batch):
    group = []
    for path in paths[first:first + batch]:
      try:
        st = os.stat(path)
      except OSError:
        continue  # decoded (and dead-lettered) in the pipeline as usual
      group.append((path, (st.st_size, st.st_mtime_ns)))
    if not group:
      continue
    future = pool.submit(images.process_inputs, images.process_image,
                         [(path, None) for path, _ in group], cfg)
    for index, (path, stat) in enumerate(group):
      started[path] = _Early(cfg, stat, future, index)
  with _EARLY_LOCK:
    _EARLY.update(started)
    _EARLY_COUNTS.update(started=len(started), used=0)
  return len(started)


def early_result(path: str, cfg: images.ImageConfig) -> Optional[_Early]:
  """The early decoding of `path` if it can stand for decoding it now: the
  same options, the file as it was listed, and a call that did not fail as
  a whole (its worker died). Taken once: a further copy of the input (an
  oversampled one) is decoded as usual, and the result's memory goes with
  the call that takes it."""
  with _EARLY_LOCK:
    entry = _EARLY.pop(path, None)
  if entry is None or entry.cfg != cfg:
    return None
  if entry.future.done() and entry.future.exception() is not None:
    return None
  try:
    st = os.stat(path)
  except OSError:
    return None
  if (st.st_size, st.st_mtime_ns) != entry.stat:
    return None
  with _EARLY_LOCK:
    _EARLY_COUNTS['used'] += 1
  return entry


def stop_early(log: bool = True) -> None:
  """Forgets every early decoding (those not started are cancelled) and
  logs how many were used."""
  with _EARLY_LOCK:
    entries = list(_EARLY.values())
    _EARLY.clear()
    counts = dict(_EARLY_COUNTS)
    _EARLY_COUNTS.update(started=0, used=0)
  for entry in entries:
    entry.future.cancel()
  if log and counts['started']:
    logging.getLogger(__name__).info(
        'used %d of the %d images decoded while the pipeline was built',
        counts['used'], counts['started'])


class _Joined:
  """The future of one call's results when some of its inputs were decoded
  early: `parts` has, per input, (early future, index) or None for an
  input of `rest` (a future of the others' results, in order, or None)."""

  def __init__(self, parts, rest):
    self._parts, self._rest = parts, rest

  def _futures(self):
    found = [part[0] for part in self._parts if part is not None]
    return found + ([self._rest] if self._rest is not None else [])

  def done(self) -> bool:
    return all(f.done() for f in self._futures())

  def exception(self):
    for f in self._futures():
      error = f.exception()
      if error is not None:
        return error
    return None

  def cancel(self) -> bool:
    # Early futures may serve other calls too: only this call's own part.
    return self._rest.cancel() if self._rest is not None else False

  def result(self) -> list:
    rest = iter(self._rest.result() if self._rest is not None else ())
    return [part[0].result()[part[1]] if part is not None else next(rest)
            for part in self._parts]


class _PooledFn(beam.DoFn):
  """A DoFn whose per-input kernel (a function of processing.py) runs in
  local worker processes when `processes` > 0 (core/processes.py), else
  in-line; either way through `processing.process_inputs`, so that reading
  and its errors are the same in both. A local file is read where the
  kernel runs (a worker reads its own inputs: only the path crosses
  processes); a remote one is read here, through Beam's FileSystems, and
  its bytes are sent. The kernel returns a compact result (encoded pixels,
  or a digest).

  Inputs go to the workers `BATCH` at a time. A call that fails as a whole
  (its worker died on one of its inputs, or a result could not be sent
  back) is split: each of its inputs runs again alone, so that only the
  input at fault is dead-lettered.

  Subclasses define `_kernel` (a module-level function of processing.py),
  `_ref(element)` (the element's InputRef) and `_results(element, result,
  error)`, which yields the outputs of one element. Outputs leave as
  WindowedValues of their own element, also when they are yielded while a
  later element is processed or at the end of the bundle.
  """

  # Inputs per call to a worker process. Each call costs this process
  # about a quarter of a millisecond of interpreter time whatever it
  # carries (pickling, the executor's two threads): a tenth of an image's
  # decoding, in the process that also runs every other step.
  BATCH = 8
  # Calls in flight per DoFn instance and worker process: enough to keep
  # the workers busy while this thread writes results.
  DEPTH_PER_PROCESS = 3

  def __init__(self, cfg: images.ImageConfig, ratios, processes: int):
    super().__init__()
    self._cfg, self._ratios, self._processes = cfg, ratios, processes
    self._ahead = None
    self._batch = []  # ((element, window, timestamp), (path, data))

  def setup(self):
    if self._processes <= 0:
      return
    try:
      self._ahead = processes_lib.Ahead(
          self._processes, (images.__name__,),
          depth=self.DEPTH_PER_PROCESS * self._processes)
    except Exception as e:  # pylint: disable=broad-except
      # The same work, only slower: say so and go on in-line.
      logging.getLogger(__name__).warning(
          'could not start %d image decoding processes (%s: %s); decoding '
          'in the runner\'s own workers', self._processes, type(e).__name__,
          e)

  def start_bundle(self):
    # What a failed bundle left buffered or in flight belongs to that
    # bundle, which the runner retries as a whole.
    self._batch = []
    if self._ahead is not None:
      self._ahead.discard()

  def process(self, element, window=beam.DoFn.WindowParam,
              timestamp=beam.DoFn.TimestampParam):
    path = self._ref(element).path
    data = None
    if not files.is_local(path):
      try:
        data = read_bytes(path)
      except Exception as e:  # pylint: disable=broad-except
        yield from self._windowed(element, None, e, window, timestamp)
        return
    self._batch.append(((element, window, timestamp), (path, data)))
    if self._ahead is None or len(self._batch) >= self.BATCH:
      yield from self._flush()

  def finish_bundle(self):
    yield from self._flush()
    if self._ahead is not None:
      for (keys, inputs), results, error in self._ahead.drain():
        yield from self._call_outputs(keys, inputs, results, error)

  def _flush(self):
    if not self._batch:
      return
    keys, inputs = zip(*self._batch)
    self._batch = []
    kernel = type(self)._kernel
    if self._ahead is None:
      yield from self._call_outputs(
          keys, inputs, images.process_inputs(kernel, inputs, self._cfg),
          None)
      return
    early = ([early_result(path, self._cfg) for path, _ in inputs]
             if kernel is images.process_image and _EARLY else [])
    if any(early):
      misses = [one for one, e in zip(inputs, early) if e is None]
      due = self._ahead.submit_started(
          (keys, inputs),
          _Joined([(e.future, e.index) if e else None for e in early],
                  self._ahead.start(images.process_inputs, kernel, misses,
                                    self._cfg) if misses else None),
          images.process_inputs, kernel, inputs, self._cfg)
    else:
      due = self._ahead.submit((keys, inputs), images.process_inputs, kernel,
                               inputs, self._cfg)
    for (done, sent), results, error in due:
      yield from self._call_outputs(done, sent, results, error)

  def _call_outputs(self, keys, inputs, results, error):
    """The outputs of one call: `results` per input, or, when the call
    failed as a whole (`error`), those of each input run again alone."""
    if error is not None:
      results = [self._alone(one) for one in inputs]
    for (element, window, timestamp), (result, failed) in zip(keys, results):
      yield from self._windowed(element, result, failed, window, timestamp)

  def _alone(self, one):
    results, error = self._ahead.alone(
        images.process_inputs, type(self)._kernel, [one], self._cfg)
    return (None, error) if error is not None else results[0]

  def _windowed(self, element, result, error, window, timestamp):
    for out in self._results(element, result, error):
      if isinstance(out, beam.pvalue.TaggedOutput):
        yield beam.pvalue.TaggedOutput(out.tag, WindowedValue(
            out.value, timestamp, (window,)))
      else:
        yield WindowedValue(out, timestamp, (window,))

  def _ref(self, element):
    """The InputRef of an element."""
    raise NotImplementedError

  def _results(self, element, result, error):
    raise NotImplementedError


class DecodeImageFn(_PooledFn):
  """Decode task -> example dict; bad inputs go to the 'dead' output.

  A task is (InputRef, copy index, write, weight). Only copy 0 of a bad
  input is dead-lettered; further copies of it are dropped and counted.
  With `ratios`, each example's split is that of its content (a bad input
  then has no split). With `processes` > 0, images are decoded by that many
  local worker processes. The progress line counts inputs (copy 0), good or
  bad.
  """

  _kernel = staticmethod(images.process_image)

  def __init__(self, cfg: images.ImageConfig, ratios=None,
               processes: int = 0):
    super().__init__(cfg, ratios, processes)
    self._decoded = metrics.counter('image', 'decoded')
    self._processed = progress.counter('image', PROCESSED)

  def _ref(self, task):
    return task[0]

  def _results(self, task, out, error):
    ref, copy, write, weight = task
    if error is not None:
      if copy == 0:
        self._processed.inc()
        yield beam.pvalue.TaggedOutput(DEAD, _dead_letter(
            ref, error, None if self._ratios else ref.split))
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
  if isinstance(e, processes_lib.Died):
    return dead_letter(ref.path, 'decode', str(e), split)
  # Any storage error (missing, permission, network) is this input's
  # problem, not the job's: record it and go on.
  return dead_letter(ref.path, 'read', f'{type(e).__name__}: {e}', split)


class FindContentFn(_PooledFn):
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

  _kernel = staticmethod(images.identify_content)

  def __init__(self, cfg: images.ImageConfig, ratios=None,
               processes: int = 0):
    super().__init__(cfg, ratios, processes)
    self._identified = progress.counter('image', IDENTIFIED)
    self._settled = progress.counter('image', SETTLED)

  def _ref(self, ref):
    return ref

  def _results(self, ref, digest, error):
    self._identified.inc()
    if error is not None:
      self._settled.inc()
      yield beam.pvalue.TaggedOutput(DEAD, _dead_letter(
          ref, error, None if self._ratios else ref.split))
      return
    if self._ratios:
      ref = ref._replace(split=contents.content_split(digest, self._ratios))
    yield ref, digest


class DecodeImages(beam.PTransform):
  """Reads and processes every image in parallel.

  Input: decode tasks, already spread over workers (see
  core/shuffle.SeededShuffle). With `ratios`, each example's split is that
  of its content; with `processes` > 0, local worker processes decode.
  Returns a DoOutputsTuple: `.examples` (dicts) and `.dead` (dead letters).
  """

  def __init__(self, cfg: images.ImageConfig, ratios=None,
               processes: int = 0):
    super().__init__()
    self._cfg, self._ratios, self._processes = cfg, ratios, processes

  def expand(self, tasks):
    return tasks | 'DecodeResizeEncode' >> beam.ParDo(
        DecodeImageFn(self._cfg, self._ratios, self._processes)).with_outputs(
            DEAD, main='examples')
