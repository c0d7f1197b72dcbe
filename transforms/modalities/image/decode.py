"""The parallel read-decode-resize-encode step, as a Beam transform."""

import dataclasses
import itertools
import logging

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils.windowed_value import WindowedValue

from transforms.modalities.image import config
from transforms.modalities.image import processing
from transforms.modalities.image import features
from transforms.core import contents
from transforms.core import metrics
from transforms.runtime import processes as processes_lib
from transforms.runtime import progress
from transforms.core.dead_letters import DEAD
from transforms.core.dead_letters import dead_letter
from transforms.sources import files

# What the local worker processes that decode images import.
WORKER_MODULES = (processing.__name__,)

# Progress counters (runtime/progress.py; inputs.LISTED counts the inputs
# listed): inputs looked at by the first pass (FindContentFn); decoded or
# dead-lettered by the decoding pass (copy 0); settled without a second pass
# (bad in the first pass, or dropped by the content rules).
IDENTIFIED, PROCESSED, SETTLED = 'identified', 'processed', 'settled'


# Results a head start (start_head) may hold before the pipeline takes
# them: at the default 224x224 JPEG (about 20 KB an image), more than the
# two workers decode while the pipeline starts.
HEAD_START_BYTES = 128 << 20


def start_head(cfg) -> None:
  """Starts decoding the images of the local folder cfg.input in the
  worker processes start_early started, in listing order, while this
  process imports TensorFlow and builds the pipeline (processes.HeadStart);
  DecodeImageFn takes the results. Nothing for other inputs."""
  from transforms.modalities.image import inputs  # pylint: disable=import-outside-toplevel
  if not files.is_local(cfg.input):
    return
  root = files.strip_slash(cfg.input)
  ratios = inputs.split_pairs(cfg.split_ratios)
  kernel, settings = DecodeImageFn._kernel, decode_settings(cfg)  # pylint: disable=protected-access

  def paths():  # those of the pipeline's listing (ListImageInputs)
    for listed in files.list_tree(root):
      ref, _, _ = inputs.ref_from_listed(root, listed, cfg.splits_from_input,
                                         ratios, settings.nested_folders)
      if ref is not None:
        yield ref.path

  def calls():  # the calls DecodeImageFn would make, BATCH inputs each
    listed = paths()
    while True:
      names = list(itertools.islice(listed, _PooledFn.BATCH))
      if not names:
        return
      yield names, (kernel, [(name, None) for name in names], settings)

  processes_lib.start_head(
      cfg.local_processes, WORKER_MODULES, (kernel, settings),
      processing.process_inputs, calls(),
      depth=_PooledFn.DEPTH_PER_PROCESS * cfg.local_processes,
      budget=HEAD_START_BYTES,
      weigh=lambda out: len(out[0].data) if out[0] is not None else 0)


def read_bytes(path: str) -> bytes:
  """All bytes of a file through Beam's FileSystems (local, gs://, ...)."""
  with FileSystems.open(path, compression_type='uncompressed') as f:
    return f.read()


def example_from_image(ref, out: processing.ProcessedImage, copy: int = 0,
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
      features.ID: ref.example_id,
      features.LABEL_TEXT: ref.label,
      'split': ref.split,
      'input': ref.path,
      # What the file holds (Pillow's format name), whatever its name says;
      # counted for the manifest, not stored in the record.
      'format': out.source_format,
      # The digest of its pixels at the stored size (core/contents.py).
      'content': out.content,
      # Its near-duplicate signature, when the run looks for them
      # (core/near_duplicates.py); stored in the record with JPEG storage
      # only (features.NEAR_SIGNATURE).
      'signature': out.signature,
      features.IMAGE: out.data,
      features.ORIGINAL_HEIGHT: out.original_height,
      features.ORIGINAL_WIDTH: out.original_width,
      features.CHANNEL_MEAN: [s / count / 255.0 for s in out.channel_sum],
      features.CHANNEL_MEAN_SQUARES: [
          s / count / 65025.0 for s in out.channel_sum_squares],
  }
  if weight is not None:
    example[features.WEIGHT] = float(weight)
  return example


class _PooledFn(beam.DoFn):
  """A DoFn whose per-input kernel (a function of processing.py) runs in
  local worker processes when `processes` > 0 (runtime/processes.py), else
  in-line; either way through `processing.process_inputs`, so that reading
  and its errors are the same in both. A local file is read where the
  kernel runs (a worker reads its own inputs: only the path crosses
  processes); a remote one is read here, through Beam's FileSystems, and
  its bytes are sent. The kernel returns a compact result (encoded pixels,
  or a digest).

  Inputs are processed `BATCH` at a time (a call), in a worker or in-line.
  A call to a worker that fails as a whole (its worker died on one of its
  inputs, or a result could not be sent back) is split: each of its inputs
  runs again alone, so that only the input at fault is dead-lettered.

  Subclasses define `_kernel` (a module-level function of processing.py),
  `_ref(element)` (the element's InputRef) and `_results(element, result,
  error)`, which yields the outputs of one element. Outputs leave as
  WindowedValues of their own element, also when they are yielded while a
  later element is processed or at the end of the bundle. With `LISTS`, the
  main outputs of one call leave together, as one list per window and
  timestamp (in the global window of a batch run: one list), so that the
  steps after see one element per call instead of one per input; tagged
  outputs still leave one by one.
  """

  # Inputs per call to a worker process. Each call costs this process
  # about a quarter of a millisecond of interpreter time whatever it
  # carries (pickling, the executor's two threads): a tenth of an image's
  # decoding, in the process that also runs every other step.
  BATCH = 8
  # Calls in flight per DoFn instance and worker process: enough to keep
  # the workers busy while this thread writes results.
  DEPTH_PER_PROCESS = 3
  # Whether the main outputs of a call leave as lists (see above).
  LISTS = False

  def __init__(self, cfg: config.ImageConfig, ratios, processes: int):
    super().__init__()
    self._cfg, self._ratios, self._processes = cfg, ratios, processes
    self._ahead = None
    self._batch = []  # ((element, window, timestamp), (path, data))

  def setup(self):
    if self._processes <= 0:
      return
    try:
      self._ahead = processes_lib.Ahead(
          self._processes, WORKER_MODULES,
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
        yield from self._call_outputs([(element, window, timestamp)],
                                      [(path, None)], [(None, e)], None)
        return
    self._batch.append(((element, window, timestamp), (path, data)))
    if len(self._batch) >= self.BATCH:
      yield from self._flush()

  def finish_bundle(self):
    yield from self._flush()
    if self._ahead is not None:
      for (keys, inputs, taken), results, error in self._ahead.drain():
        yield from self._call_outputs(keys, inputs, results, error, taken)

  def _flush(self):
    if not self._batch:
      return
    keys, inputs = zip(*self._batch)
    self._batch = []
    kernel = type(self)._kernel
    # Results a head start (processes.HeadStart) already has; the call
    # carries the other inputs, and its outputs keep the batch's order.
    taken, rest = None, inputs
    head = processes_lib.head_start()
    if head is not None:
      taken = [head.take((kernel, self._cfg), path) if data is None
               else None for path, data in inputs]
      rest = [one for one, result in zip(inputs, taken) if result is None]
    if self._ahead is None:
      yield from self._call_outputs(
          keys, inputs, processing.process_inputs(kernel, rest, self._cfg),
          None, taken)
      return
    if rest:
      due = self._ahead.submit((keys, inputs, taken), processing.process_inputs,
                               kernel, rest, self._cfg)
    else:
      due = self._ahead.put((keys, inputs, taken), [])
    for (done, sent, was_taken), results, error in due:
      yield from self._call_outputs(done, sent, results, error, was_taken)

  def _call_outputs(self, keys, inputs, results, error, taken=None):
    """The outputs of one call: `results` per input, or, when the call
    failed as a whole (`error`), those of each input run again alone.
    With `taken` (per input, its result when a head start had it, else
    None), the call carried only the inputs whose `taken` is None."""
    if taken is not None:
      inputs = [one for one, result in zip(inputs, taken) if result is None]
    if error is not None:
      results = [self._alone(one) for one in inputs]
    if taken is not None:
      made = iter(results)
      results = [next(made) if result is None else result
                 for result in taken]
    if not self.LISTS:
      for (element, window, timestamp), (result, failed) in zip(keys,
                                                                results):
        yield from self._windowed(element, result, failed, window, timestamp)
      return
    listed, at = [], None  # main outputs of the same window and timestamp
    for (element, window, timestamp), (result, failed) in zip(keys, results):
      for out in self._results(element, result, failed):
        if isinstance(out, beam.pvalue.TaggedOutput):
          yield beam.pvalue.TaggedOutput(out.tag, WindowedValue(
              out.value, timestamp, (window,)))
          continue
        if listed and at != (window, timestamp):
          yield WindowedValue(listed, at[1], (at[0],))
          listed = []
        listed.append(out)
        at = (window, timestamp)
    if listed:
      yield WindowedValue(listed, at[1], (at[0],))

  def _alone(self, one):
    results, error = self._ahead.alone(
        processing.process_inputs, type(self)._kernel, [one], self._cfg)
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
  """Decode tasks -> lists of example dicts (those of one call to a worker,
  see _PooledFn); bad inputs go to the 'dead' output, one by one.

  A task is (InputRef, copy index, write, weight). Only copy 0 of a bad
  input is dead-lettered; further copies of it are dropped and counted.
  With `ratios`, each example's split is that of its content (a bad input
  then has no split). With `processes` > 0, images are decoded by that many
  local worker processes. The progress line counts inputs (copy 0), good or
  bad.
  """

  _kernel = staticmethod(processing.process_image)
  LISTS = True

  def __init__(self, cfg: config.ImageConfig, ratios=None,
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


def decode_settings(cfg) -> config.ImageConfig:
  """The image settings the decoding kernels run with: the run's, asking
  for near-duplicate signatures when the run looks for them (start_head
  and the pipeline must use the same, or the head start is not used)."""
  rules = cfg.contents
  if rules is not None and rules.near:
    return dataclasses.replace(cfg.settings, signature=True)
  return cfg.settings


def _dead_letter(ref, e: Exception, split: str) -> dict:
  """The dead letter of an input that could not be read or processed."""
  if isinstance(e, config.BadImageError):
    return dead_letter(ref.path, e.stage, e.reason, split)
  if isinstance(e, processes_lib.Died):
    return dead_letter(ref.path, 'decode', str(e), split)
  # Any storage error (missing, permission, network) is this input's
  # problem, not the job's: record it and go on.
  return dead_letter(ref.path, 'read', files.read_error(e), split)


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

  _kernel = staticmethod(processing.identify_content)

  def __init__(self, cfg: config.ImageConfig, ratios=None,
               processes: int = 0):
    super().__init__(cfg, ratios, processes)
    self._identified = progress.counter('image', IDENTIFIED)
    self._settled = progress.counter('image', SETTLED)

  def _ref(self, ref):
    return ref

  def _results(self, ref, digest, error):
    yield from self._found(ref, digest, error, ())

  def _found(self, ref, digest, error, extra):
    """(InputRef with its split, digest, *extra), or the dead letter."""
    self._identified.inc()
    if error is not None:
      self._settled.inc()
      yield beam.pvalue.TaggedOutput(DEAD, _dead_letter(
          ref, error, None if self._ratios else ref.split))
      return
    if self._ratios:
      ref = ref._replace(split=contents.content_split(digest, self._ratios))
    yield (ref, digest, *extra)


class FindContentAndSignatureFn(FindContentFn):
  """FindContentFn that also computes each image's near-duplicate
  signature from the same decode: InputRef -> (InputRef, digest,
  signature)."""

  _kernel = staticmethod(processing.identify_content_and_signature)

  def _results(self, ref, result, error):
    digest, signature = result if error is None else (None, None)
    yield from self._found(ref, digest, error, (signature,))


class DecodeImages(beam.PTransform):
  """Reads and processes every image in parallel.

  Input: decode tasks, already spread over workers (see
  core/shuffle.SeededShuffle). With `ratios`, each example's split is that
  of its content; with `processes` > 0, local worker processes decode.
  Returns a DoOutputsTuple: `.examples` (lists of example dicts, in the
  order of their tasks; a list holds up to DecodeImageFn.BATCH) and `.dead`
  (dead letters).
  """

  def __init__(self, cfg: config.ImageConfig, ratios=None,
               processes: int = 0):
    super().__init__()
    self._cfg, self._ratios, self._processes = cfg, ratios, processes

  def expand(self, tasks):
    return tasks | 'DecodeResizeEncode' >> beam.ParDo(
        DecodeImageFn(self._cfg, self._ratios, self._processes)).with_outputs(
            DEAD, main='examples')
