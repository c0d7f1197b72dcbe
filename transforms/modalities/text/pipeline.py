"""Assembles the text preprocessing pipeline (labelled documents).

The input is read twice, so no document waits in memory for the
vocabulary:

    statistics pass:  DocumentStatisticsFn --(bad documents)--> dead letter
        -> documents per split, label names, class counts
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
that id.
"""

import functools
from typing import List, NamedTuple

import apache_beam as beam
import numpy as np

from transforms.core import batches as batch_examples
from transforms.core import metrics
from transforms.core import shuffle
from transforms.core import splits as split_lib
from transforms.core import skeleton
from transforms.core.skeleton import records_key
from transforms.sources import tables as tabular
from transforms.modalities.text import inputs as text_io
from transforms.modalities.text import preprocessing as tt
from transforms.core.dead_letters import dead_letter

DEAD, COUNTS, LABELS, ANALYSIS, CLASSES = ('dead', 'counts', 'labels',
                                           'analysis', 'classes')
# Training documents per tf.Transform analysis batch (an Arrow record
# batch). The vocabulary analyzer sends each batch's distinct tokens to Beam,
# so fewer, larger batches mean far fewer elements.
ANALYSIS_BATCH = 50000
# Class-folder documents per pipeline element.
_FILES_PER_ELEMENT = 500


class TextInput(NamedTuple):
  """What the launch-time input check found."""
  kind: str  # 'table' or 'folder'
  files: List[str]
  root: str
  columns: text_io.TextColumns


def check_input(cfg) -> TextInput:
  """Lists the input and checks its columns on the launching machine.

  Raises:
    UsageError: No documents, or columns that do not exist; one sentence.
  """
  tc = cfg.settings
  kind, files, root = text_io.list_inputs(cfg.input)
  columns = text_io.TextColumns(tc.text_column, tc.label_column)
  if kind == 'table':
    for path in files:
      columns = text_io.check_columns(path, tabular.format_of(path),
                                      tc.text_column, tc.label_column)
  return TextInput(kind, files, root, columns)


class _ReadDocumentsFn(beam.DoFn):
  """Reads one element (a table file, or a group of class-folder files) in
  document batches: (TextBatch of good documents, [(id, reason)] bad)."""

  def __init__(self, cfg, plan: TextInput):
    super().__init__()
    self._cfg, self._plan = cfg, plan

  def _batches(self, element):
    kind, payload = element
    tc, plan = self._cfg.settings, self._plan
    if kind == 'folder':
      return text_io.iter_folder_batches(payload, plan.root,
                                         tc.invalid_utf8)
    return text_io.iter_table_batches(
        payload, tabular.format_of(payload), plan.columns,
        batch_examples.source_name(plan.root, payload), tc.invalid_utf8)

  def _splits(self, ids):
    cfg = self._cfg
    return split_lib.hash_splits(ids, cfg.split_ratios, cfg.split_names)


class DocumentStatisticsFn(_ReadDocumentsFn):
  """The statistics pass: per element, only small tagged outputs (and the
  analysis input): dead letters, ((split, 'inputs'|'used'), n), label
  names, ((split, label), n), and the training documents as Arrow record
  batches of at most ANALYSIS_BATCH documents."""

  def __init__(self, cfg, plan: TextInput):
    super().__init__(cfg, plan)
    self._parsed = metrics.counter('text', 'parsed')

  def process(self, element):
    pending = ([], [])  # training documents not yet sent to the analysis
    for docs, bad in self._batches(element):
      yield from self._dead(bad)
      if len(docs.ids):
        self._parsed.inc(len(docs.ids))
        yield from self._summaries(docs, pending)
      if len(pending[0]) >= ANALYSIS_BATCH:
        yield self._analysis(pending)
    if pending[0]:
      yield self._analysis(pending)

  @staticmethod
  def _analysis(pending):
    batch = tt.analysis_record_batch(*pending)
    pending[0].clear()
    pending[1].clear()
    return beam.pvalue.TaggedOutput(ANALYSIS, batch)

  def _dead(self, bad):
    if not bad:
      return
    names = self._cfg.split_names
    bad_split = self._splits([i for i, _ in bad])
    for (doc_id, reason), s in zip(bad, bad_split.tolist()):
      yield beam.pvalue.TaggedOutput(DEAD, dead_letter(
          doc_id, 'parse', reason, names[s]))
    for s in np.unique(bad_split).tolist():
      yield beam.pvalue.TaggedOutput(COUNTS, ((names[s], 'inputs'), int(
          (bad_split == s).sum())))

  def _summaries(self, docs, pending):
    names = self._cfg.split_names
    split = self._splits(docs.ids)
    yield beam.pvalue.TaggedOutput(LABELS, sorted(set(docs.label)))
    labels = np.asarray(docs.label, dtype=object)
    for s in np.unique(split).tolist():
      mask = split == s
      n = int(mask.sum())
      yield beam.pvalue.TaggedOutput(COUNTS, ((names[s], 'inputs'), n))
      yield beam.pvalue.TaggedOutput(COUNTS, ((names[s], 'used'), n))
      split_labels, counts = np.unique(labels[mask].astype(str),
                                       return_counts=True)
      for label, count in zip(split_labels.tolist(), counts.tolist()):
        yield beam.pvalue.TaggedOutput(CLASSES, ((names[s], label), count))
      if names[s] == 'train':
        index = np.flatnonzero(mask)
        pending[0].extend(docs.text[i] for i in index)
        pending[1].extend(docs.label[i] for i in index)


class DocumentBatchesFn(_ReadDocumentsFn):
  """The example pass: the good documents, a batch per element:
  {'id', 'text', 'label_text', 'split'} (bad ones were dead-lettered by
  the statistics pass)."""

  def process(self, element):
    for docs, _ in self._batches(element):
      if len(docs.ids):
        yield {tt.ID: docs.ids, tt.TEXT: docs.text,
               tt.LABEL_TEXT: docs.label, 'split': self._splits(docs.ids)}


def _transform_inputs(batch, lo, hi):
  return tt.transform_inputs(batch[tt.TEXT][lo:hi],
                             batch[tt.LABEL_TEXT][lo:hi])


def _encode(batch, label_ids, weights, spec):
  return tt.to_example_records(batch, label_ids, spec, weights)


def _vocabulary_size(_, staging):
  import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
  return int(tft.TFTransformOutput(staging).vocabulary_size_by_name(
      tt.TOKENS_VOCABULARY))


def manifest_section(cfg, values, splits):
  """The manifest's text section and (no) normalization."""
  tc = cfg.settings
  per_split = tt.summarize(values['text_stats'], tc.max_tokens)
  for name, split in splits.items():
    split['text'] = per_split.get(name, tt.summarize([], tc.max_tokens))
  section = {
      'columns': {'text': tc.text_column, 'label': tc.label_column},
      'input_kind': values['input_kind'],
      'output': tc.output,
      'max_tokens': tc.max_tokens,
      'lowercase': tc.lowercase,
      'strip_punctuation': tc.strip_punctuation,
      'ngrams': list(tc.ngrams),
      'invalid_utf8': tc.invalid_utf8,
      'keep_text': tc.keep_text,
      'vocabulary': {
          'size': values['vocabulary_size'],
          'top_k': tc.vocab_size or None,
          'min_frequency': tc.min_frequency,
          'oov_buckets': tc.oov_buckets,
          # Ids: 0 padding, 1..size vocabulary, then the OOV buckets.
          'padding_id': 0,
          'first_oov_id': values['vocabulary_size'] + 1,
          'file': f'transform_fn/assets/{tt.TOKENS_VOCABULARY}',
          'statistics_split': 'train',
      },
  }
  normalization = {'method': 'none', 'applied': 'stored',
                   'statistics_split': 'train'}
  return section, normalization


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
    stats_out = (elements
                 | 'SpreadInputsA' >> beam.Reshuffle()
                 | 'ParseForStatistics' >> beam.ParDo(
                     DocumentStatisticsFn(cfg, plan)).with_outputs(
                         DEAD, COUNTS, LABELS, ANALYSIS, CLASSES))
    counts = batch_examples.sum_counts(stats_out[COUNTS], 'SumCounts')
    return {
        'dead': stats_out[DEAD],
        'inputs': batch_examples.inputs_per_split(counts, 'Inputs'),
        'labels': stats_out[LABELS],
        'analysis': stats_out[ANALYSIS],
        'skipped': pbegin | 'NothingSkipped' >> beam.Create([0]),
        'elements': elements, 'counts': counts,
        'classes': stats_out[CLASSES],
        'input_kind': pbegin | 'InputKind' >> beam.Create([plan.kind]),
    }


class BuildTextRecords(skeleton.BuildRecords):
  """The example pass: documents in batches -> the exported transform ->
  [rebalance] -> records, grouped by shuffle bucket, per split."""

  def expand(self, read):
    cfg, transform = self._cfg, self._transform
    spec = feature_spec(cfg)
    docs = (read['elements']
            | 'SpreadInputsB' >> beam.Reshuffle()
            | 'ParseForExamples' >> beam.ParDo(
                DocumentBatchesFn(cfg, self._plan)))
    transformed = docs | 'Transform' >> beam.ParDo(
        batch_examples.ApplyTransform(self._staging, _transform_inputs,
                                      tt.ID),
        beam.pvalue.AsList(transform.done))
    if cfg.rebalance != 'none':
      class_counts = batch_examples.sum_counts(read['classes'],
                                               'CountClasses')
    else:
      class_counts = read['classes'] | 'NoClassCounts' >> beam.Filter(
          lambda _: False)
    buckets = read['counts'] | 'ShuffleBuckets' >> beam.combiners.ToList() | (
        'BucketCount' >> beam.Map(lambda stats: shuffle.shuffle_buckets(
            sum(n for (_, kind), n in stats if kind == 'used'))))
    records = transformed | 'ToRecords' >> beam.ParDo(
        batch_examples.ToRecords(cfg, functools.partial(_encode, spec=spec),
                                 tt.describe),
        beam.pvalue.AsSingleton(transform.label_ids),
        beam.pvalue.AsList(class_counts),
        beam.pvalue.AsSingleton(buckets)).with_outputs(
            'formed', 'before', 'after', 'extra', main='records')
    per_split = records.records | 'ShuffleRecords' >> (
        batch_examples.ShuffleRecords(cfg.split_names))
    out = {records_key(s): r for s, r in zip(cfg.split_names, per_split)}
    out.update(
        before=batch_examples.sum_counts(records.before, 'SumBefore'),
        after=batch_examples.sum_counts(records.after, 'SumAfter'),
        vocabulary_size=transform.done | 'VocabularySize' >> beam.Map(
            _vocabulary_size, self._staging),
        text_stats=records.extra)
    return out


def analysis(cfg):
  """(the analysis input's Arrow schema, the preprocessing_fn)."""
  return tt.analysis_adapter_config(), tt.make_preprocessing_fn(cfg.settings)


def feature_spec(cfg) -> dict:
  """The stored features."""
  return tt.feature_spec(cfg.settings, cfg.rebalance == 'weight')
