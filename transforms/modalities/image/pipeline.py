"""The image modality's two stages of the skeleton (core/skeleton.py).

    ReadImages
      ListImageInputs --(bad lines, unknown split folders)--> dead letter
      [first pass, only for runs that must know every split or content
       before planning: rebalancing with content splits, or content rules
       that drop (core/contents.py)]
        FindContents (decode and resize, no encoding; the split of each
        image from its pixels; its near-duplicate signature)
        --(bad)--> dead letter
        -> NearDuplicates (core/near_duplicates.py): each group's members
           to the group's split --(dropped by its rules)--> dead letter
        -> ContentGroups --(dropped by the rules)--> dead letter
      -> PlanCopies (rebalancing decided per input, from the class counts
         of the inputs whose split is known, core/rebalance.Plan), or one
         copy each when the split is still to come from the pixels
      -> SeededShuffle of the input references (core/shuffle.py)
      -> DecodeImages (the split from the pixels where it is still to
         come; the near-duplicate signature) --(bad)--> dead letter; the
         examples leave in lists, those of one call to a decoding worker
      -> [single pass: NearDuplicates of the signatures, while the
         examples wait on disk (runtime/hold.py); then each is read back, in
         its group's split --(dropped by the near-duplicate rules)--> dead
         letter]
      -> [single pass: ContentGroups of the decoded digests, for the
         manifest's counts]
      -> per split (each list cut by split); the training split's first
         copies are the analysis input (per-image channel statistics, not
         the pixels)
    BuildImageRecords, per split
      [float32 storage: TransformDataset, one example at a time]
      -> serialize (a list of records per list of examples)

Only input references and content digests are ever grouped; decoded
images flow from the decoder to the shard writer without being collected
anywhere, so memory does not grow with the dataset. Two options trade that
away: float32 storage (TransformDataset waits for the analysis, so the
runner keeps the examples until then) and a fixed --num_shards (Beam's
writer groups the records by shard). Because the references are shuffled
before decoding, every shard receives examples in a seeded random order,
whatever the runner does with bundles.

Decoded examples flow a list at a time (a list keeps their order, so the
shards' bytes are those of one example per element): the runner's work
per element, in each step and each count, is then done once for a few
images instead of once for each, in the process that also feeds the
decoding workers and writes the shards.
"""

import collections
import logging
import posixpath

import apache_beam as beam
import numpy as np

from transforms.modalities.image import features
from transforms.core import contents as contents_lib
from transforms.runtime import hold as hold_lib
from transforms.core import near_duplicate_decisions
from transforms.core import near_duplicate_pipeline
from transforms.runtime import progress
from transforms.core import rebalance as rebalance_lib
from transforms.core import shuffle
from transforms.core.dead_letters import DEAD
from transforms.core.dead_letters import SKIPPED
from transforms.core.dead_letters import dead_letter
from transforms.core import skeleton
from transforms.core.skeleton import records_key
from transforms.modalities.image import inputs as image_inputs
from transforms.modalities.image import preprocessing
from transforms.modalities.image import file_formats
from transforms.modalities.image import records as image_records
from transforms.modalities.image import decode
from transforms.modalities.image.decode import DecodeImages
from transforms.modalities.image.decode import FindContentAndSignatureFn
from transforms.modalities.image.decode import FindContentFn


class PlanCopies(beam.PTransform):
  """Decides, per input, how many copies rebalancing writes.

  Input: (InputRef, ((split, label), listed inputs)). Output: (shuffle key,
  (InputRef, copy index, write, weight)). Every input is decoded at least
  once (copy 0), so bad inputs are dead-lettered and counted even when
  undersampling drops them; copy 0 of a dropped input has write=False.
  Class counts are those of the listed inputs of each split.
  """

  def __init__(self, cfg, with_weight_feature: bool):
    super().__init__()
    self._cfg = cfg
    self._with_weight = with_weight_feature

  def expand(self, refs_and_counts):
    refs, counts = refs_and_counts
    cfg, with_weight = self._cfg, self._with_weight
    if cfg.rebalance == 'none':
      # Nothing to decide: skip the wait for the class counts.
      return refs | 'OneCopyEach' >> beam.Map(
          lambda ref: (f'{ref.example_id}#0', (ref, 0, True, None)))

    def plan(ref, counts):
      rebalancing = rebalance_lib.Plan(cfg.rebalance, cfg.rebalance_splits,
                                       cfg.seed, counts)
      n = rebalancing.copies(ref.split, ref.example_id, ref.label)
      weight = (rebalancing.weight(ref.split, ref.label) if with_weight else
                None)
      for k in range(max(n, 1)):
        yield f'{ref.example_id}#{k}', (ref, k, k < n, weight)

    return refs | 'PlanCopy' >> beam.FlatMap(
        plan, counts=beam.pvalue.AsList(counts))


def _count_per_key(pcoll, label: str):
  return pcoll | label >> beam.CombinePerKey(sum)


class ReadImages(skeleton.ReadInputs):
  """Lists, plans, shuffles and decodes the images (see the module
  docstring); returns the skeleton's ReadInputs dict, plus
  'examples[<split>]' (lists of decoded examples, every copy),
  'first[<split>]' (lists of each input's first copy), 'channel_stats'
  (exact training-split channel statistics for the manifest) and 'formats'
  (the decoded inputs per content format, see FormatCountsFn)."""

  def expand(self, pbegin):
    # The plan: the manifest file's format, None for folders.
    cfg, manifest_format = self._cfg, self._plan
    names, rules = cfg.split_names, cfg.contents
    # Split ratios when each example's split comes from its content.
    by_content = cfg.split_ratios if rules.split_key == 'content' else None
    listed = pbegin | 'ListInputs' >> image_inputs.ListImageInputs(
        cfg.input, cfg.splits_from_input, cfg.split_ratios, manifest_format,
        cfg.settings.nested_folders)
    # -> InputRef per image (split by its id, replaced when by content)
    dead = [listed[DEAD]]
    settings = decode.decode_settings(cfg)
    if contents_pass(cfg):
      passes = self._two_passes(listed, by_content, settings, dead)
    else:
      passes = self._one_pass(listed, by_content, settings, dead)
    decoded, examples, split_counts, out_contents, near_summary = passes
    if rules.near:
      out_contents = out_contents | 'WithNearDuplicates' >> beam.Map(
          lambda c, n: {**c, 'near_duplicates': n},
          beam.pvalue.AsSingleton(near_summary))
    dead.append(decoded[DEAD])
    all_dead = tuple(dead) | 'AllDeadLetters' >> beam.Flatten()
    # Inputs per split: those with a split, and the dead letters without.
    unassigned = _count_per_key(
        all_dead
        | 'SplitOfDead' >> beam.Map(lambda d: (d['split'] or '', 1))
        | 'UnassignedOnly' >> beam.Filter(lambda kv: kv[0] == ''),
        'CountUnassigned')
    inputs = _count_per_key(split_counts, 'CountInputsPerSplit')
    by_split = examples | 'PartitionBySplit' >> beam.ParDo(
        _BySplitFn(names)).with_outputs(*names)
    out = {
        'dead': all_dead,
        'inputs': (inputs, unassigned) | 'AllInputs' >> beam.Flatten(),
        'labels': listed.refs | 'LabelOf' >> beam.Map(lambda r: [r.label]),
        'skipped': (listed[SKIPPED]
                    | 'CountSkipped' >> beam.combiners.Count.Globally()),
        skeleton.CONTENTS: out_contents,
    }
    for split in names:
      out[f'examples[{split}]'] = by_split[split]
      out[f'first[{split}]'] = by_split[split] | (
          f'FirstCopies[{split}]' >> beam.FlatMap(_only_first_copies))
    _add_first_copy_outputs(out, names, pbegin)
    return out

  def _two_passes(self, listed, by_content, settings, dead):
    """The first pass of a run that reads the images twice: every split
    and content (and near-duplicate signature) is found before anything
    is planned; what the content rules drop goes to the dead letters; the
    rest is planned and decoded (the second pass).

    Args:
      listed: ListImageInputs' outputs.
      by_content: The split ratios when a split comes from the content.
      settings: The decoding kernels' ImageConfig.
      dead: The dead letters so far; this pass's are appended.

    Returns:
      (DecodeImages' outputs, the decoded examples, (split, 1) per input
      with a split, ContentGroups' summary, the near-duplicate summary or
      None).
    """
    rules = self._cfg.contents
    near = rules.near
    near_summary = None
    finder = FindContentAndSignatureFn if near else FindContentFn
    found = listed.refs | 'FindContents' >> beam.ParDo(
        finder(settings, by_content, self._cfg.local_processes)).with_outputs(
            DEAD, main='refs')
    # -> (InputRef with its split, content digest[, signature])
    refs_found = found.refs
    if near:
      decisions, near_summary = (
          found.refs
          | 'SignatureOf' >> beam.Map(lambda rds: [(
              rds[0].example_id, rds[1], rds[0].label, rds[0].split,
              rds[2])])
          | 'NearDuplicates' >> self._near_duplicate_groups())
      refs_found = found.refs | 'GroupSplits' >> beam.Map(
          _with_group_split, beam.pvalue.AsSingleton(decisions))
    drops, out_contents = (
        refs_found
        | 'ContentOf' >> beam.Map(lambda rd: (
            rd[1], (rd[0].example_id, rd[0].label, rd[0].split)))
        | 'ContentGroups' >> contents_lib.ContentGroups(rules))
    if near:
      # An example both rules drop is one dead letter, counted once (by
      # the exact rules).
      near_drops = refs_found | 'NearDuplicateDrops' >> beam.FlatMap(
          _near_duplicate_drops, beam.pvalue.AsSingleton(decisions),
          beam.pvalue.AsDict(drops))
      near_summary = near_summary | 'RecountNearDrops' >> beam.Map(
          _recount_near_drops, beam.pvalue.AsList(near_drops))
      drops = (drops, near_drops) | 'AllDrops' >> beam.Flatten()
    assigned = refs_found | 'Refs' >> beam.Map(lambda rd: rd[0])
    kept = assigned | 'DropByContent' >> beam.ParDo(
        _DropFn(), beam.pvalue.AsDict(drops)).with_outputs(
            DEAD, main='refs')
    dead += [found[DEAD], kept[DEAD]]
    decoded = self._decode(kept.refs, None, settings)
    # Inputs with a split: every one the first pass found.
    split_counts = assigned | 'SplitOfInput' >> beam.Map(_split_of)
    return decoded, decoded.examples, split_counts, out_contents, near_summary

  def _one_pass(self, listed, by_content, settings, dead):
    """A run that reads the images once: they are planned and decoded;
    near-duplicates, when the rules look for them, are found from the
    decoded signatures while the examples wait on disk.

    Args and Returns: as _two_passes.
    """
    rules = self._cfg.contents
    near_summary = None
    decoded = self._decode(listed.refs, by_content, settings)
    examples = decoded.examples
    released_dead = None
    if rules.near:
      # Which split a near-duplicate goes to needs every picture's
      # signature: the decoded examples wait on disk meanwhile.
      decisions, near_summary = (
          examples
          | 'SignatureOf' >> beam.Map(_entries_of_first_copies)
          | 'NearDuplicates' >> self._near_duplicate_groups())
      released = (
          examples
          | 'Hold' >> hold_lib.Hold(self.hold_folder())
          | 'Release' >> beam.ParDo(
              _ReleaseFn(), beam.pvalue.AsSingleton(decisions)
          ).with_outputs(DEAD, main='examples'))
      examples, released_dead = released.examples, released[DEAD]
      dead.append(released_dead)
    _, out_contents = (
        examples
        | 'ContentOf' >> beam.FlatMap(_contents_of_first_copies)
        | 'ContentGroups' >> contents_lib.ContentGroups(rules))
    if by_content:
      # Inputs with a split: those decoded (a bad one has none, its split
      # was to come from its content), dropped ones included.
      split_counts = examples | 'SplitOfInput' >> beam.FlatMap(
          _first_copies_per_split)
      if released_dead is not None:
        split_counts = (split_counts, released_dead
                        | 'SplitOfDropped' >> beam.Map(
                            lambda d: (d['split'], 1))
                        ) | 'AllWithSplit' >> beam.Flatten()
    else:
      # Inputs with a split: every one listed.
      split_counts = listed.refs | 'SplitOfInput' >> beam.Map(_split_of)
    return decoded, examples, split_counts, out_contents, near_summary

  def _near_duplicate_groups(self):
    cfg, rules = self._cfg, self._cfg.contents
    return near_duplicate_pipeline.NearDuplicateGroups(
        rules.near_duplicates, rules.label_conflicts, rules.split_key,
        cfg.split_ratios, self.hold_folder())

  def _decode(self, refs, by_content, settings):
    """Plans the copies of refs whose split is known (or, `by_content`,
    one copy of each), shuffles and decodes them."""
    cfg = self._cfg
    if by_content:
      tasks = refs | 'OneCopyEach' >> beam.Map(
          lambda ref: (f'{ref.example_id}#0', (ref, 0, True, None)))
    else:
      listed_classes = _count_per_key(
          refs | 'SplitAndLabel' >> beam.Map(lambda r: ((r.split, r.label),
                                                        1)),
          'CountListedClasses')
      # -> ((split, label), inputs)
      tasks = ((refs, listed_classes)
               | 'PlanCopies' >> PlanCopies(cfg, cfg.rebalance == 'weight'))
    tasks = tasks | 'ShuffleInputs' >> shuffle.SeededShuffle(cfg.seed)
    # -> (InputRef, copy index, write, weight), in seeded random order
    return tasks | 'DecodeImages' >> DecodeImages(settings, by_content,
                                                  cfg.local_processes)


def _add_first_copy_outputs(out: dict, names, pbegin) -> None:
  """Adds to ReadImages' outputs what is read from the first copies
  (out['first[<split>]']): 'formats' (the inputs per content format),
  'analysis' (the training split's analysis input) and 'channel_stats'."""
  # Only what the count reads crosses the Flatten: the local runner holds
  # a Flatten's input in memory, image bytes included (memory then grew
  # with the number of images).
  out['formats'] = (
      tuple(out[f'first[{split}]'] | f'FormatOf[{split}]' >> beam.Map(
          lambda examples: [(ex['format'], ex['input']) for ex in examples])
            for split in names)
      | 'AllFirstCopies' >> beam.Flatten()
      | 'CountFormats' >> beam.CombineGlobally(FormatCountsFn()))
  train = (out['first[train]'] if 'train' in names else
           pbegin | 'NoTrainSplit' >> beam.Create([]))
  # The analyzers read only the per-image statistics, so the image bytes
  # are left out of the analysis input.
  out['analysis'] = train | 'ToAnalysisInput' >> beam.FlatMap(
      lambda examples: [preprocessing.tft_input(ex, with_image=False)
                        for ex in examples])
  out['channel_stats'] = train | 'ChannelStats' >> beam.CombineGlobally(
      preprocessing.PixelStatsFn())


def contents_pass(cfg) -> bool:
  """Whether the images are read twice: a first pass finds every content
  (to drop some, or to know the content splits before rebalancing)."""
  rules = cfg.contents
  by_content = rules.split_key == 'content' and cfg.split_ratios
  # Near-duplicate groups move examples to other splits: rebalancing must
  # count them where they end up.
  moved = rules.near and rules.split_key != 'input'
  return bool(rules.drops or ((by_content or moved)
                              and cfg.rebalance != 'none'))


def progress_measure(cfg) -> progress.ItemMeasure:
  """The progress line's measure: inputs done of inputs listed, per pass."""
  return progress.ItemMeasure(
      'image', 'images', image_inputs.LISTED,
      (decode.IDENTIFIED, decode.PROCESSED, decode.SETTLED),
      passes=2 if contents_pass(cfg) else 1)


def _split_of(ref):
  """(split, 1) of an InputRef."""
  return ref.split, 1


def _first_copies_per_split(examples):
  """(split, first copies of that split) of a list of examples."""
  counts = collections.Counter(ex['split'] for ex in examples
                               if ex['copy'] == 0)
  return list(counts.items())


def _contents_of_first_copies(examples):
  """(content, (id, label, split)) of each first copy of a list of
  examples: what core/contents.ContentGroups reads."""
  return [(ex['content'],
           (ex[features.ID], ex[features.LABEL_TEXT], ex['split']))
          for ex in examples if ex['copy'] == 0]


def _entries_of_first_copies(examples):
  """(id, content, label, split, signature) of each first copy of a list of
  examples: what core/near_duplicate_pipeline.NearDuplicateGroups reads."""
  return [(ex[features.ID], ex['content'], ex[features.LABEL_TEXT], ex['split'],
           ex['signature']) for ex in examples if ex['copy'] == 0]


def _with_group_split(found, decisions):
  """(InputRef, digest, signature) -> (InputRef in the split of its
  near-duplicate group, if it is in one, digest)."""
  ref, digest = found[0], found[1]
  split, _ = near_duplicate_decisions.example_decision(decisions.get(digest),
                                                       ref.label)
  if split is not None and split != ref.split:
    ref = ref._replace(split=split)
  return ref, digest


def _near_duplicate_drops(found, decisions, exact_drops):
  """(id, dead letter) of an (InputRef, digest) the near-duplicate
  decisions drop (unless the exact content rules drop it already)."""
  ref, digest = found
  _, reason = near_duplicate_decisions.example_decision(decisions.get(digest),
                                                        ref.label)
  if reason is not None and ref.example_id not in exact_drops:
    yield ref.example_id, dead_letter(ref.example_id, contents_lib.STAGE,
                                      reason, ref.split)


def _recount_near_drops(summary, drops):
  """The near-duplicate summary with its drops counted from the dead
  letters made (an example the exact rules drop is theirs)."""
  counts = {'near_duplicates': 0, 'label_conflicts': 0}
  for _, letter in drops:
    counts['near_duplicates' if letter['reason'].startswith('near-duplicate')
           else 'label_conflicts'] += 1
  return {**summary, 'dropped': counts}


# Examples per list the release hands on. Decoded lists hold those of one
# call to a decoding worker (decode.BATCH); after the release nothing else
# is left to overlap with, so the runner's work per element in each step
# that follows (splits, counts, the analysis input, serializing, writing)
# is the run's own time: in lists of up to 256 examples it is done once
# for all of them (256 JPEGs of 224x224 are about 2.3 MiB). A list also
# ends when it reaches 4 MiB of stored pictures (28 raw 224x224 RGB ones),
# so that an element stays small whatever the storage. The records and
# their order are the same.
_RELEASED = 256
_RELEASED_BYTES = 4 << 20


class _ReleaseFn(beam.DoFn):
  """The name of a hold file -> its examples in lists of up to _RELEASED
  (or _RELEASED_BYTES of pictures), each example in the split of its
  near-duplicate group (side input: {content digest: decision}); an
  example the decisions drop goes to the dead letters (its first
  copy)."""

  def process(self, name, decisions):
    kept, size = [], 0
    for examples in hold_lib.read_held(name):
      for ex in examples:
        decision = decisions.get(ex['content'])
        if decision is not None:
          split, reason = near_duplicate_decisions.example_decision(
              decision, ex[features.LABEL_TEXT])
          split = split or ex['split']
          if reason is not None:
            if ex['copy'] == 0:
              yield beam.pvalue.TaggedOutput(DEAD, dead_letter(
                  ex['input'], contents_lib.STAGE, reason, split))
            continue
          if split != ex['split']:
            ex = {**ex, 'split': split}
        kept.append(ex)
        size += len(ex[features.IMAGE])
        if len(kept) >= _RELEASED or size >= _RELEASED_BYTES:
          yield kept
          kept, size = [], 0
    if kept:
      yield kept


def _only_first_copies(examples):
  """The first copies of a list of examples, as a list (none if empty)."""
  first = [ex for ex in examples if ex['copy'] == 0]
  if first:
    yield first


def _only_written(examples):
  """The examples of a list that rebalancing writes, as a list (none if
  empty)."""
  written = [ex for ex in examples if ex['write']]
  if written:
    yield written


class _BySplitFn(beam.DoFn):
  """A list of examples -> a list per split, each to the output named by
  its split, in their order."""

  def __init__(self, names):
    super().__init__()
    self._names = frozenset(names)

  def process(self, examples):
    parts = {}
    for ex in examples:
      parts.setdefault(ex['split'], []).append(ex)
    for split, part in parts.items():
      if split not in self._names:
        raise ValueError(f'an example of the split {split!r}, which is not '
                         f'one of {sorted(self._names)}')
      yield beam.pvalue.TaggedOutput(split, part)


class _DropFn(beam.DoFn):
  """InputRef -> itself, or its dead letter when the content rules drop
  it (side input: {id: dead letter}); a dropped input is settled for the
  progress line (the decoding pass does not see it)."""

  def __init__(self):
    super().__init__()
    self._settled = progress.counter('image', decode.SETTLED)

  def process(self, ref, drops):
    if ref.example_id in drops:
      self._settled.inc()
      yield beam.pvalue.TaggedOutput(
          DEAD, {**drops[ref.example_id], 'input': ref.path})
    else:
      yield ref


class FormatCountsFn(beam.CombineFn):
  """Decoded inputs per content format, and per content format that is not
  the one the file's extension names ('TIFF in .jpg'), from lists of
  (content format, input path)."""

  def create_accumulator(self):
    return {}, {}

  def add_input(self, acc, inputs):
    formats, mismatches = acc
    for found, path in inputs:
      found = found or 'unknown'
      formats[found] = formats.get(found, 0) + 1
      expected = file_formats.extension_format(path)
      if expected is not None and found != expected:
        ext = posixpath.splitext(path)[1].lower()
        key = f'{found} in {ext}'
        mismatches[key] = mismatches.get(key, 0) + 1
    return formats, mismatches

  def merge_accumulators(self, accs):
    formats, mismatches = {}, {}
    for f, m in accs:
      for out, part in ((formats, f), (mismatches, m)):
        for k, v in part.items():
          out[k] = out.get(k, 0) + v
    return formats, mismatches

  def extract_output(self, acc):
    formats, mismatches = acc
    return {'formats': dict(sorted(formats.items())),
            'format_mismatches': dict(sorted(mismatches.items()))}


def _from_transformed(row, split):
  """A tf.Transform output row back into the pipeline's example dict."""
  return {
      features.ID: row[features.ID].decode('utf-8'),
      features.LABEL_TEXT: row[features.LABEL_TEXT].decode('utf-8'),
      'split': split,
      features.IMAGE: np.asarray(row[features.IMAGE], np.float32),
      features.ORIGINAL_HEIGHT: int(row[features.ORIGINAL_HEIGHT]),
      features.ORIGINAL_WIDTH: int(row[features.ORIGINAL_WIDTH]),
      **({features.WEIGHT: float(row[features.WEIGHT])}
         if features.WEIGHT in row else {}),
  }


def manifest_section(cfg, values: dict, splits: dict):
  """The image section and normalization of the manifest."""
  del splits  # nothing per split
  image = cfg.settings
  channel_stats = values['channel_stats']
  formats = values['formats']
  if formats['format_mismatches']:
    logging.getLogger(__name__).warning(
        'decoded %d inputs whose content is not what their extension says: '
        '%s', sum(formats['format_mismatches'].values()),
        ', '.join(f'{k}: {v}' for k, v in
                  formats['format_mismatches'].items()))
  return {
      'height': image.height, 'width': image.width,
      'channels': image.channels, 'storage': image.storage,
      'resize_mode': image.resize_mode, 'color': image.color,
      'background': image.background,
      # Decoded inputs per format of their content (Pillow's names), and
      # those whose content is not what their extension says.
      'formats': formats['formats'],
      'format_mismatches': formats['format_mismatches'],
  }, {
      'method': cfg.normalization,
      # Where the exported transform is applied: by the reader at
      # training time, or already in the stored records.
      'applied': 'stored' if image.storage == 'float32' else 'at_read',
      'statistics_split': 'train',
      'mean': channel_stats.get('mean'),
      'std': channel_stats.get('std'),
      'images_analyzed': channel_stats.get('count', 0),
  }


def _label_counts(lists, split: str, label: str):
  """((split, label), examples) of one split's lists of examples."""
  return (lists
          | f'Label{label}[{split}]' >> beam.FlatMap(_labels_of, split)
          | f'Count{label}[{split}]' >> beam.CombinePerKey(sum))


def _labels_of(examples, split: str):
  """((split, label), examples) of a list of examples."""
  counts = collections.Counter(ex[features.LABEL_TEXT] for ex in examples)
  return [((split, label), n) for label, n in counts.items()]


class BuildImageRecords(skeleton.BuildRecords):
  """The skeleton's BuildRecords for images: per split, the examples that
  rebalancing writes, [float32: normalized by the transform, one at a
  time], serialized a list of records per list of examples."""

  def expand(self, read):
    import tensorflow_transform.beam as tft_beam  # pylint: disable=import-outside-toplevel
    cfg = self._cfg
    float32 = cfg.settings.storage == 'float32'
    with_signature = features.signature_stored(cfg.settings.storage,
                                               cfg.contents.near)
    out, before_all, after_all = {}, [], []
    for split in cfg.split_names:
      before_all.append(_label_counts(read[f'first[{split}]'], split,
                                      'Before'))
      written = read[f'examples[{split}]'] | f'Written[{split}]' >> (
          beam.FlatMap(_only_written))
      if float32:
        rows = written | f'ToTransformInput[{split}]' >> beam.FlatMap(
            lambda examples: [preprocessing.tft_input(ex) for ex in examples])
        transformed = (((rows, analysis_metadata(cfg)), self._transform.fn)
                       | f'TransformDataset[{split}]' >> (
                           tft_beam.TransformDataset()))
        written = transformed[0] | f'FromTransformOutput[{split}]' >> (
            beam.Map(lambda row, s: [_from_transformed(row, s)], s=split))
      after_all.append(_label_counts(written, split, 'After'))
      out[records_key(split)] = written | f'Serialize[{split}]' >> beam.Map(
          image_records.to_records,
          beam.pvalue.AsSingleton(self._transform.label_ids),
          with_signature=with_signature)
      # -> [tf.train.Example bytes], one list per list of examples
    out['before'] = tuple(before_all) | 'AllCountsBefore' >> beam.Flatten()
    out['after'] = tuple(after_all) | 'AllCountsAfter' >> beam.Flatten()
    return out


def analysis_metadata(cfg):
  """The tf.Transform input schema of the image examples."""
  from tensorflow_transform.tf_metadata import dataset_metadata  # pylint: disable=import-outside-toplevel
  return dataset_metadata.DatasetMetadata.from_feature_spec(
      preprocessing.raw_feature_spec(cfg.settings.channels,
                                     cfg.rebalance == 'weight'))


def preprocessing_fn(cfg):
  """The image preprocessing_fn: decode the stored image, normalize."""
  image = cfg.settings
  stored_format = 'uint8' if image.storage == 'float32' else image.storage
  return preprocessing.make_preprocessing_fn(
      stored_format, image.height, image.width, image.channels,
      cfg.normalization)


def feature_spec(cfg) -> dict:
  """The stored features."""
  image = cfg.settings
  return features.feature_spec(
      image.storage, image.height, image.width, image.channels,
      cfg.rebalance == 'weight',
      features.signature_stored(image.storage, cfg.contents.near))
