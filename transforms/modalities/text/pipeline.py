"""Assembles the text preprocessing pipeline (labelled documents).

The input is read twice (three times with near-duplicate grouping, the
default, or content rules that drop documents), so no document waits in
memory for the vocabulary:

    [contents pass, with --label_conflicts drop|majority,
     --drop_duplicates or --near_duplicates group|drop (the default):
     DocumentContentsFn -> ContentGroups --(dropped)--> dead letter, and
     the documents' signatures -> NearDuplicateGroups
     (core/near_duplicates.py); the drops and the near-duplicate decisions
     are side inputs below: a near-duplicate group's documents are in its
     split, before the vocabulary is counted]
    statistics pass:  DocumentStatisticsFn --(bad documents)--> dead letter
        -> documents per split, label names, class counts, [content
           digests -> ContentGroups, for the manifest's counts]
        -> training documents (Arrow batches) -> tf.Transform
           AnalyzeDataset (token vocabulary, label vocabulary)
           -> WriteTransformFn
    example pass:     DocumentBatchesFn (good documents, in batches)
        -> the exported transform (tokenize, look up, pad) per batch
        -> [rebalance] -> tf.train.Example, grouped by shuffle bucket
        -> per split: WriteSplit, fingerprint
    FinalizeDataset (quality gate, publish, manifest last)

Documents are ids by `<file>:<row>` for table files and by their path
relative to the input folder for class folders, and split by a hash of
their content, the tokens the transform makes of them
(preprocessing.content_keys), or of their id with --split_key id.
"""

import functools
from typing import List, NamedTuple, Optional, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from transforms.core import batches
from transforms.core import contents as contents_lib
from transforms.core import metrics
from transforms.core import near_duplicate_decisions
from transforms.core import near_duplicate_pipeline
from transforms.runtime import processes
from transforms.runtime import progress
from transforms.core import shuffle
from transforms.core import splits as split_lib
from transforms.core import skeleton
from transforms.core.skeleton import records_key
from transforms.core.errors import UsageError
from transforms.sources import files as files_lib
from transforms.sources import tables
from transforms.modalities.text import documents
from transforms.modalities.text import inputs
from transforms.modalities.text import parse
from transforms.modalities.text import preprocessing
from transforms.modalities.text import ranges as text_ranges
from transforms.output import manifest as manifest_lib
from transforms.core.dead_letters import dead_letter

DEAD, COUNTS, LABELS, ANALYSIS, CLASSES, CONTENTS, NEAR, NEAR_DROPS = (
    'dead', 'counts', 'labels', 'analysis', 'classes', 'contents', 'near',
    'near_drops')
# Training documents per tf.Transform analysis batch (an Arrow record
# batch). The vocabulary analyzer sends each batch's distinct tokens to Beam,
# so larger batches mean fewer elements; text's analysis graph runs two
# batches at once (core/analysis.TwoGraphsAhead), and each batch's tokens are
# held while it runs. At 800,000 documents, two threads on batches of 25,000
# took 0.90 of the time of one thread on 50,000 with 92 MiB more at the peak;
# on batches of 50,000 they took 270 MiB more.
ANALYSIS_BATCH = 25000
# Class-folder documents per pipeline element.
_FILES_PER_ELEMENT = 500


# What the local worker processes that read CSV ranges import; and,
# when they also sign the documents (near-duplicate runs), the compiled
# loops of the signatures, loaded as the processes start rather than in
# the middle of the first range.
WORKER_MODULES = (text_ranges.__name__,)
SIGNING_MODULES = WORKER_MODULES + (
    'transforms.modalities.text.signature_kernels',)


def reader_modules(cfg):
  """The modules of the run's reading worker processes."""
  return SIGNING_MODULES if cfg.contents.near else WORKER_MODULES


def worker_modules(cfg, plan: 'TextInput'):
  """reader_modules(cfg) when the run will read a table file in ranges
  with local worker processes (a large local CSV or TSV file), else ()."""
  if cfg.local_processes <= 0 or plan.kind == 'folder':
    return ()
  return (reader_modules(cfg)
          if any(map(tables.ranges_possible, plan.files)) else ())


class TextInput(NamedTuple):
  """What the launch-time input check found."""
  kind: str  # 'table' or 'folder'
  files: List[str]
  root: str
  columns: inputs.TextColumns
  # Listed files whose names are not valid UTF-8 (as files.printable shows
  # them): each is one dead letter, not read.
  bad_names: Tuple[str, ...] = ()
  # The total size of the files (None when they cannot be listed again).
  input_bytes: Optional[int] = None

  @property
  def content_buckets(self) -> int:
    """Groups the content digests are spread over (core/contents.py)."""
    return contents_lib.content_buckets(self.input_bytes)


def check_input(cfg) -> TextInput:
  """Lists the input and checks its columns on the launching machine.

  Raises:
    UsageError: No documents, or columns that do not exist; one sentence.
  """
  tc = cfg.settings
  kind, files, root = inputs.list_inputs(cfg.input)
  columns = inputs.TextColumns(tc.text_column, tc.label_column)
  bad_names = tuple(files_lib.printable(p) for p in files
                    if files_lib.printable(p) != p)
  files = [p for p in files if files_lib.printable(p) == p]
  if not files:
    raise UsageError(f'no input file in {cfg.input} has a name that is valid '
                     f'UTF-8 (such as {bad_names[0]})')
  if kind == 'table':
    for path in files:
      columns = inputs.check_columns(path, tables.format_of(path),
                                     tc.text_column, tc.label_column)
  plan = TextInput(kind, files, root, columns, bad_names)
  return plan._replace(input_bytes=input_bytes(cfg.input, plan))


def _bad_name_letters(plan: TextInput) -> List[dict]:
  """The dead letters of the listed files whose names are not valid UTF-8
  (Beam's coders and the records hold UTF-8 text only)."""
  return [dead_letter(name, 'list', f'the path is not valid UTF-8: {name} '
                      '(undecodable bytes shown as \\xNN); the file is not '
                      'read', None) for name in plan.bad_names]


class _ReadDocumentsFn(beam.DoFn):
  """Reads one element (a table file, or a group of class-folder files) in
  document batches: (TextBatch of good documents, [(id, reason)] bad,
  their keys or None), counting the bytes read for the progress line
  (every pass). The keys, (split per document, content digests or None),
  come with the batches the worker processes read (see `_keys`)."""

  def __init__(self, cfg, plan: TextInput, keys_folder=None):
    super().__init__()
    self._cfg, self._plan = cfg, plan
    self._keys_folder = keys_folder
    self._rule = text_ranges.key_rule(cfg)
    workers = cfg.local_processes
    self._workers = processes.MaybeAhead(
        workers, reader_modules(cfg), 2 * workers, 'read CSV ranges')
    self._bytes_read = progress.counter('text', 'bytes_read')

  def _batches(self, element, digests_needed: bool,
               signatures_needed: bool = False, texts_needed: bool = True):
    """The element's batches in file order. A large local CSV or TSV file
    is read in byte ranges by the local worker processes
    (--local_processes), which also find the documents' content digests
    (when `digests_needed` or splits are keyed by content), splits and
    (when `signatures_needed`) near-duplicate signatures, while this
    thread works on the documents before. Without `texts_needed`, the
    batches the workers read come without their texts (text None)."""
    kind, payload = element
    ranges = ahead = None
    if kind != 'folder' and self._cfg.local_processes > 0:
      ranges = tables.csv_ranges(payload, tables.format_of(payload),
                                 quotes=True)
    if ranges is not None:
      ahead = self._workers.start()
    if ahead is not None:
      yield from self._range_batches(payload, ranges, ahead, digests_needed,
                                     signatures_needed, texts_needed)
      return
    reads = files_lib.ReadCount()
    for docs, bad in self._read(element, reads):
      self._bytes_read.inc(reads.take())
      yield docs, bad, None
    self._bytes_read.inc(reads.take())

  def _read(self, element, reads, start=None):
    kind, payload = element
    tc, plan = self._cfg.settings, self._plan
    if kind == 'folder':
      return parse.iter_folder_batches(payload, plan.root,
                                       tc.invalid_utf8, reads=reads)
    return parse.iter_table_batches(
        payload, tables.format_of(payload), plan.columns,
        batches.source_name(plan.root, payload), tc.invalid_utf8,
        reads=reads, start=start)

  def _range_batches(self, path, ranges, ahead, digests_needed,
                     signatures_needed, texts_needed):
    """The file's ranges, read by worker processes, results in order; from
    the first range that did not end between records (or failed) on, the
    rest of the file in one piece, here (tables.csv_ranges)."""
    fmt, plan = tables.format_of(path), self._plan
    make_ids = documents.table_ids(batches.source_name(plan.root, path))
    offset = 0  # records of the ranges before
    rest_from = None

    def results():
      for start, end in ranges.spans:
        yield from ahead.submit(
            (start, end), text_ranges.read_range, path, fmt, plan.columns,
            self._cfg.settings.invalid_utf8, ranges.header, start, end,
            self._rule, digests_needed, signatures_needed, self._keys_folder,
            texts_needed)
      yield from ahead.drain()

    def ids(rows):  # a range's row numbers -> the file's ids (-1: unknown)
      return make_ids([r + offset if r >= 0 else r for r in rows])

    for (start, end), result, error in results():
      if error is not None or result[0] is None:
        rest_from = start
        ahead.discard()
        break
      found, keys = result
      for (docs, bad), known in zip(found.batches, keys):
        bad_ids = ids([row for row, _ in bad])
        yield (documents.TextBatch(ids=ids(docs.ids), text=docs.text,
                                   label=docs.label),
               [(i, reason) for i, (_, reason) in zip(bad_ids, bad)], known)
      offset += found.records
      self._bytes_read.inc(end - start)
    if rest_from is None:
      return
    reads = files_lib.ReadCount()
    for docs, bad in self._read(('table', path), reads,
                                (ranges.header, rest_from, offset)):
      self._bytes_read.inc(reads.take())
      yield docs, bad, None
    self._bytes_read.inc(reads.take())

  def _keys(self, docs, digests_needed: bool = True, known=None,
            signatures_needed: bool = False):
    """(split index per document, content digests or None, what the
    near-duplicate search needs of the signatures (text_ranges.batch_keys)
    or None): `known` (what a worker found for the batch), with
    the splits found here from the ids when they are keyed by id; else
    text_ranges.batch_keys here."""
    if known is None:
      return text_ranges.batch_keys(docs.text, docs.ids, self._rule,
                                    digests_needed, signatures_needed)
    split, digests, signatures = known
    if split is None:
      split = split_lib.hash_splits(docs.ids, self._rule.ratios,
                                    self._rule.names)
    return split, digests, signatures

  def _content_groups(self, docs, split, digests):
    """A batch's contents as ContentGroups' batched input
    (core/contents.batched)."""
    return contents_lib.batched(
        digests, docs.ids, docs.label,
        np.array(self._cfg.split_names, object)[split].tolist(),
        self._plan.content_buckets)


def _subset(docs, keep: np.ndarray):
  """The documents where `keep` is true."""
  if keep.all():
    return docs
  index = np.flatnonzero(keep).tolist()
  return documents.TextBatch(ids=[docs.ids[i] for i in index],
                             text=[docs.text[i] for i in index],
                             label=[docs.label[i] for i in index])


def _decided(docs, split, digests, dropped, near, names):
  """What the content rules decided for a batch: (the documents the exact
  rules drop (a mask; their dead letters come from the contents pass),
  the split of each document once near-duplicate groups moved it, {index:
  reason} of those the near-duplicate rules drop, which stay in their own
  split)."""
  n = len(docs.ids)
  exact = (np.fromiter((i in dropped for i in docs.ids), bool, n)
           if dropped else np.zeros(n, bool))
  near_dropped = {}
  if near:
    index_of = {name: k for k, name in enumerate(names)}
    moved = split.copy()
    for k in [k for k, d in enumerate(digests) if d in near]:
      if exact[k]:
        continue
      to, reason = near_duplicate_decisions.example_decision(near[digests[k]],
                                                             docs.label[k])
      if reason is not None:
        near_dropped[k] = reason
      elif to is not None:
        moved[k] = index_of[to]
    split = moved
  return exact, split, near_dropped


class DocumentContentsFn(_ReadDocumentsFn):
  """The contents pass, for runs whose content rules drop documents or
  look for near-duplicates: the (content digest, (id, label, split)) of
  every good document, a few elements per batch (core/contents.batched),
  and, tagged NEAR, a NearBatch per batch
  (core/near_duplicate_pipeline.py)."""

  def process(self, element):
    near = self._cfg.contents.near
    names = self._cfg.split_names
    # (Only the documents' keys and labels are used here: the workers do
    # not send their texts.)
    for docs, _, known in self._batches(element, True, near, False):
      if len(docs.ids):
        split, digests, signed = self._keys(docs, True, known, near)
        yield from self._content_groups(docs, split, digests)
        if near:
          carried, usable, keys = signed
          yield beam.pvalue.TaggedOutput(
              NEAR, near_duplicate_pipeline.NearBatch(
                  list(docs.ids), digests, list(docs.label),
                  np.asarray(names, object)[split].tolist(), carried, keys,
                  usable))


class DocumentStatisticsFn(_ReadDocumentsFn):
  """The statistics pass: per element, only small tagged outputs (and the
  analysis input): dead letters, ((split, 'inputs'|'used'), n), label
  names, ((split, label), n), the training documents as Arrow record
  batches of at most ANALYSIS_BATCH documents, (without a contents
  pass) each document's (content digest, (id, label, split)), a few
  elements per batch (core/contents.batched), and (with near-duplicate
  decisions) (kind, n) of the documents they drop."""

  def __init__(self, cfg, plan: TextInput, keys_folder=None):
    super().__init__(cfg, plan, keys_folder)
    self._parsed = metrics.counter('text', 'parsed')
    self._documents = progress.counter('text', 'documents')

  def process(self, element, dropped=None, near=None):
    pending = ([], [])  # training documents not yet sent to the analysis
    contents_here = not _contents_pass(self._cfg)
    # (The digests are needed for the near-duplicate decisions only when
    # there are some.)
    for docs, bad, known in self._batches(element, contents_here or
                                          bool(near)):
      self._documents.inc(len(docs.ids) + len(bad))
      yield from self._dead(bad)
      if len(docs.ids):
        self._parsed.inc(len(docs.ids))
        yield from self._summaries(docs, pending, dropped, near, known,
                                   contents_here)
      if len(pending[0]) >= ANALYSIS_BATCH:
        yield self._analysis(pending)
    if pending[0]:
      yield self._analysis(pending)

  @staticmethod
  def _analysis(pending):
    batch = preprocessing.analysis_record_batch(*pending)
    pending[0].clear()
    pending[1].clear()
    return beam.pvalue.TaggedOutput(ANALYSIS, batch)

  def _dead(self, bad):
    """Unreadable documents; without a content they have a split only when
    splits are keyed by id."""
    if not bad:
      return
    names = self._cfg.split_names
    if self._cfg.contents.split_key == 'content':
      for doc_id, reason in bad:
        yield beam.pvalue.TaggedOutput(DEAD, dead_letter(
            doc_id, 'parse', reason, None))
      yield beam.pvalue.TaggedOutput(COUNTS, (('', 'inputs'), len(bad)))
      return
    bad_split = split_lib.hash_splits([i for i, _ in bad],
                                      self._cfg.split_ratios, names)
    for (doc_id, reason), s in zip(bad, bad_split.tolist()):
      yield beam.pvalue.TaggedOutput(DEAD, dead_letter(
          doc_id, 'parse', reason, names[s]))
    for s in np.unique(bad_split).tolist():
      yield beam.pvalue.TaggedOutput(COUNTS, ((names[s], 'inputs'), int(
          (bad_split == s).sum())))

  def _summaries(self, docs, pending, dropped, near, known, contents_here):
    names = self._cfg.split_names
    split, digests, _ = self._keys(docs, contents_here or bool(near), known)
    yield beam.pvalue.TaggedOutput(LABELS, sorted(set(docs.label)))
    if contents_here:
      for group in self._content_groups(docs, split, digests):
        yield beam.pvalue.TaggedOutput(CONTENTS, group)
    exact, moved, near_dropped = _decided(docs, split, digests, dropped,
                                          near, names)
    # Dropped documents are inputs of their own split; the exact rules'
    # dead letters come from the contents pass, the near-duplicate rules'
    # from here.
    removed = exact.copy()
    for k, reason in sorted(near_dropped.items()):
      removed[k] = True
      yield beam.pvalue.TaggedOutput(DEAD, dead_letter(
          docs.ids[k], contents_lib.STAGE, reason, names[split[k]]))
      yield beam.pvalue.TaggedOutput(NEAR_DROPS, (
          'near_duplicates' if reason.startswith('near-duplicate')
          else 'label_conflicts', 1))
    for s in np.unique(split[removed]).tolist():
      yield beam.pvalue.TaggedOutput(COUNTS, ((names[s], 'inputs'), int(
          (split[removed] == s).sum())))
    docs, split = _subset(docs, ~removed), moved[~removed]
    labels = np.asarray(docs.label, dtype=object)
    for s in np.unique(split).tolist():
      in_split = split == s
      n = int(in_split.sum())
      yield beam.pvalue.TaggedOutput(COUNTS, ((names[s], 'inputs'), n))
      yield beam.pvalue.TaggedOutput(COUNTS, ((names[s], 'used'), n))
      split_labels, counts = np.unique(labels[in_split].astype(str),
                                       return_counts=True)
      for label, count in zip(split_labels.tolist(), counts.tolist()):
        yield beam.pvalue.TaggedOutput(CLASSES, ((names[s], label), count))
      if names[s] == 'train':
        index = np.flatnonzero(in_split)
        pending[0].extend(docs.text[i] for i in index)
        pending[1].extend(docs.label[i] for i in index)


class DocumentBatchesFn(_ReadDocumentsFn):
  """The example pass: the good documents, a batch per element:
  {'id', 'text', 'label_text', 'split'} (bad ones were dead-lettered by
  the statistics pass, and so were those the content rules drop), each in
  the split of its near-duplicate group."""

  def process(self, element, dropped=None, near=None):
    names = self._cfg.split_names
    for docs, _, known in self._batches(element, bool(near)):
      if not len(docs.ids):
        continue
      split, digests, _ = self._keys(docs, bool(near), known)
      exact, moved, near_dropped = _decided(docs, split, digests, dropped,
                                            near, names)
      keep = ~exact
      keep[list(near_dropped)] = False
      docs, split = _subset(docs, keep), moved[keep]
      if len(docs.ids):
        yield {preprocessing.ID: docs.ids, preprocessing.TEXT: docs.text,
               preprocessing.LABEL_TEXT: docs.label, 'split': split}


def _contents_pass(cfg) -> bool:
  """Whether every content must be known before documents are counted: a
  contents pass reads the input once more, first."""
  return cfg.contents.drops or cfg.contents.near


def _transform_inputs(batch, lo, hi):
  return preprocessing.transform_inputs(batch[preprocessing.TEXT][lo:hi],
                                        batch[preprocessing.LABEL_TEXT][lo:hi])


def _encode(batch, label_ids, weights, spec):
  return preprocessing.to_example_records(batch, label_ids, spec, weights)


def _vocabulary_size(_, staging):
  import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
  return int(tft.TFTransformOutput(staging).vocabulary_size_by_name(
      preprocessing.TOKENS_VOCABULARY))


def progress_measure(cfg, plan: TextInput) -> progress.BytesMeasure:
  """The progress line's measure: bytes of the input read, over the
  statistics and example passes (and the contents pass, when there is
  one)."""
  return progress.BytesMeasure('text', plan.input_bytes,
                               3 if _contents_pass(cfg) else 2,
                               ('documents', 'documents'))


def input_bytes(input_path: str, plan: TextInput) -> Optional[int]:
  """The total size of the input files (None when it cannot be listed):
  listed as check_input listed them, once more."""
  if plan.kind == 'table' and len(plan.files) == 1:
    found = [files_lib.metadata(plan.files[0])]
  elif plan.kind == 'table':
    found = files_lib.match(input_path)
  else:
    found = files_lib.match(FileSystems.join(plan.root, '*', '*'))
  wanted = set(plan.files)
  total = sum(m.size_in_bytes for m in found
              if m is not None and m.path in wanted)
  return total or None


def _elements(plan: TextInput):
  """The first pass's elements: one table file, or a group of
  class-folder files."""
  if plan.kind == 'folder':
    return [('folder', plan.files[i:i + _FILES_PER_ELEMENT])
            for i in range(0, len(plan.files), _FILES_PER_ELEMENT)]
  return [('table', path) for path in plan.files]


class ReadDocuments(skeleton.ReadInputs):
  """The statistics pass (see the module docstring); returns the
  skeleton's ReadInputs dict plus 'elements' (the input files, read again
  by BuildTextRecords), 'counts' ((split, 'inputs'|'used'), documents),
  'classes' ((split, label), documents) and 'input_kind'."""

  def expand(self, pbegin):
    cfg, plan = self._cfg, self._plan
    elements = pbegin | 'InputFiles' >> beam.Create(_elements(plan))
    keys = _keys_folder(self.staging)
    dead, side = [], {}
    rules = cfg.contents
    if _contents_pass(cfg):
      # Every content must be known before documents are counted: a
      # contents pass reads the input once more, first.
      found = (elements
               | 'SpreadInputsC' >> beam.Reshuffle()
               | 'ReadContents' >> beam.ParDo(
                   DocumentContentsFn(cfg, plan, keys)).with_outputs(
                       NEAR, main='contents'))
      drops, summary = found.contents | 'ContentGroups' >> (
          contents_lib.ContentGroups(rules, batched_input=True))
      if rules.drops:
        dead.append(drops | 'DroppedDeadLetters' >> beam.Values())
      if rules.near:
        decisions, near_summary = found[NEAR] | 'NearDuplicates' >> (
            near_duplicate_pipeline.NearDuplicateGroups(
                rules.near_duplicates, rules.label_conflicts,
                rules.split_key, cfg.split_ratios, self.hold_folder()))
      side = _side_inputs(cfg, drops, decisions if rules.near else None)
    stats_out = (elements
                 | 'SpreadInputsA' >> beam.Reshuffle()
                 | 'ParseForStatistics' >> beam.ParDo(
                     DocumentStatisticsFn(cfg, plan, keys),
                     **side).with_outputs(
                         DEAD, COUNTS, LABELS, ANALYSIS, CLASSES, CONTENTS,
                         NEAR_DROPS))
    if not _contents_pass(cfg):
      _, summary = stats_out[CONTENTS] | 'ContentGroups' >> (
          contents_lib.ContentGroups(rules, batched_input=True))
    if rules.near:
      # The drops counted from the documents dropped (one the exact rules
      # drop is theirs), as the images' are.
      near_summary = near_summary | 'RecountNearDrops' >> beam.Map(
          _recounted, beam.pvalue.AsList(
              stats_out[NEAR_DROPS] | 'SumNearDrops' >> beam.CombinePerKey(
                  sum)))
      summary = summary | 'WithNearDuplicates' >> beam.Map(
          lambda c, n: {**c, 'near_duplicates': n},
          beam.pvalue.AsSingleton(near_summary))
    if plan.bad_names:
      dead.append(pbegin | 'BadNames' >> beam.Create(_bad_name_letters(plan)))
      counted = ((stats_out[COUNTS], pbegin | 'BadNameCounts' >> beam.Create(
          [(('', 'inputs'), len(plan.bad_names))]))
                 | 'AllCounts' >> beam.Flatten())
    else:
      counted = stats_out[COUNTS]
    counts = batches.sum_counts(counted, 'SumCounts')
    return {
        'dead': (tuple(dead) + (stats_out[DEAD],)
                 | 'AllDeadLetters' >> beam.Flatten()),
        'inputs': batches.inputs_per_split(counts, 'Inputs'),
        'labels': stats_out[LABELS],
        'analysis': stats_out[ANALYSIS],
        'skipped': pbegin | 'NothingSkipped' >> beam.Create([0]),
        'elements': elements, 'counts': counts,
        'classes': stats_out[CLASSES],
        'input_kind': pbegin | 'InputKind' >> beam.Create([plan.kind]),
        skeleton.CONTENTS: summary,
        # What the content rules drop ((id, dead letter)) and the
        # near-duplicate decisions, for the example pass.
        'drops': (drops if rules.drops else
                  pbegin | 'NoDrops' >> beam.Create([])),
        'near': (decisions if rules.near else
                 pbegin | 'NoNear' >> beam.Create([{}])),
    }


def _keys_folder(staging: str) -> Optional[str]:
  """Where the reader's worker processes keep each range's content
  digests and splits for the later passes (text/ranges.py): inside a run
  folder on the local file system; None for one on an object store."""
  if not files_lib.is_local(staging):
    return None
  return manifest_lib.join(staging, manifest_lib.KEYS_TEMP)


def _side_inputs(cfg, drops, decisions) -> dict:
  """The side inputs of the statistics and example passes: 'dropped' (id
  -> dead letter) when the exact content rules drop, 'near' (digest ->
  decision) when near-duplicates are looked for."""
  side = {}
  if cfg.contents.drops:
    side['dropped'] = beam.pvalue.AsDict(drops)
  if cfg.contents.near:
    side['near'] = beam.pvalue.AsSingleton(decisions)
  return side


def _recounted(summary, counts):
  """The near-duplicate summary with its drops as counted."""
  dropped = {'near_duplicates': 0, 'label_conflicts': 0}
  dropped.update(dict(counts))
  return {**summary, 'dropped': dropped}


class BuildTextRecords(skeleton.BuildRecords):
  """The example pass: documents in batches -> the exported transform ->
  [rebalance] -> records, grouped by shuffle bucket, per split."""

  def expand(self, read):
    cfg, transform = self._cfg, self._transform
    spec = feature_spec(cfg)
    docs = (read['elements']
            | 'SpreadInputsB' >> beam.Reshuffle()
            | 'ParseForExamples' >> beam.ParDo(
                DocumentBatchesFn(cfg, self._plan, _keys_folder(self._staging)),
                **_side_inputs(
                    cfg, read['drops'], read['near'])))
    transformed = docs | 'Transform' >> beam.ParDo(
        batches.ApplyTransform(self._staging, _transform_inputs,
                               preprocessing.ID),
        beam.pvalue.AsList(transform.done))
    if cfg.rebalance != 'none':
      class_counts = batches.sum_counts(read['classes'],
                                        'CountClasses')
    else:
      class_counts = read['classes'] | 'NoClassCounts' >> beam.Filter(
          lambda _: False)
    buckets = read['counts'] | 'ShuffleBuckets' >> beam.combiners.ToList() | (
        'BucketCount' >> beam.Map(lambda stats: shuffle.shuffle_buckets(
            sum(n for (_, kind), n in stats if kind == 'used'))))
    records = transformed | 'ToRecords' >> beam.ParDo(
        batches.ToRecords(cfg, functools.partial(_encode, spec=spec),
                          preprocessing.describe),
        beam.pvalue.AsSingleton(transform.label_ids),
        beam.pvalue.AsList(class_counts),
        beam.pvalue.AsSingleton(buckets)).with_outputs(
            'formed', 'before', 'after', 'extra', main='records')
    per_split = records.records | 'ShuffleRecords' >> (
        batches.ShuffleRecords(cfg.split_names,
                               self.spill_folder()))
    out = {records_key(s): r for s, r in zip(cfg.split_names, per_split)}
    out.update(
        before=batches.sum_counts(records.before, 'SumBefore'),
        after=batches.sum_counts(records.after, 'SumAfter'),
        vocabulary_size=transform.done | 'VocabularySize' >> beam.Map(
            _vocabulary_size, self._staging),
        text_stats=records.extra)
    return out


def analysis(cfg):
  """(the analysis input's Arrow schema, the preprocessing_fn)."""
  return (preprocessing.analysis_adapter_config(),
          preprocessing.make_preprocessing_fn(cfg.settings))


def feature_spec(cfg) -> dict:
  """The stored features."""
  return preprocessing.feature_spec(cfg.settings, cfg.rebalance == 'weight')
