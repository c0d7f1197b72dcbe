"""tf.Transform's analysis graph ahead on one or two threads
(core/analysis.py): the same transform as tf.Transform's own DoFn, on many
batches with repeated, empty and non-ASCII texts; a graph error still fails
the run; tf.Transform is left as it was."""

import apache_beam as beam
import pytest

from transforms.core import analysis
from transforms.modalities.text import preprocessing

TEXTS = ['the cat sat', 'The cat ran!', '', 'a dog sat', 'the dog, the cat',
         'the cat sat', '\u00e9t\u00e9 \u00e0 Paris', 'x ' * 40, 'the the',
         'dog']


def _config():
  return preprocessing.TextConfig(
      text_column='text', label_column='label', lowercase=True,
      strip_punctuation=True, max_tokens=6, vocab_size=5, min_frequency=1,
      oov_buckets=1, ngrams=(1, 1), output='ids', keep_text=False,
      invalid_utf8='replace')


class _Graphs(beam.pipeline.PipelineVisitor):
  """The DoFn classes of a pipeline's ParDos."""

  def __init__(self):
    self.classes = []

  def visit_transform(self, applied):
    fn = getattr(applied.transform, 'fn', None)
    if fn is not None:
      self.classes.append(type(fn))


def _analyze(tmp_path, name, ahead, preprocessing_fn, batches):
  """Runs AnalyzeDataset on `batches` of (texts, labels), with the graph
  ahead on `ahead` threads (0: tf.Transform's own DoFn); returns (token
  vocabulary, label vocabulary, DoFn classes)."""
  import tensorflow_transform as tft
  import tensorflow_transform.beam as tft_beam
  out = str(tmp_path / name)
  graphs = _Graphs()
  p = beam.Pipeline()
  with tft_beam.Context(temp_dir=str(tmp_path / f'{name}_tmp'),
                        force_tf_compat_v1=False):
    inputs = p | beam.Create([preprocessing.analysis_record_batch(texts, labels)
                              for texts, labels in batches])
    analyze = tft_beam.AnalyzeDataset(preprocessing_fn)
    if ahead:
      with analysis.graph_ahead(ahead):
        transform_fn = (inputs,
                        preprocessing.analysis_adapter_config()) | analyze
    else:
      transform_fn = (inputs, preprocessing.analysis_adapter_config()) | analyze
    _ = transform_fn | tft_beam.WriteTransformFn(out)
  p.visit(graphs)
  p.run().wait_until_finish()
  output = tft.TFTransformOutput(out)
  return (output.vocabulary_by_name('tokens'),
          output.vocabulary_by_name('labels'), graphs.classes)


@pytest.mark.parametrize('threads,dofn', [
    (1, analysis.GraphAhead), (2, analysis.TwoGraphsAhead)])
def test_graph_ahead_gives_the_same_transform(tmp_path, threads, dofn):
  from tensorflow_transform.beam import impl as tft_impl
  original = tft_impl._RunMetaGraphDoFn  # pylint: disable=protected-access
  # 12 batches of 1 to 10 documents each, a label of its own each (a
  # batch lost would be a label missing).
  batches = [(TEXTS[:k], [f'batch {i}'] * k)
             for i, k in enumerate([1, 10, 3, 7, 2, 9, 10, 1, 5, 4, 6, 8])]
  fn = preprocessing.make_preprocessing_fn(_config())
  ahead = _analyze(tmp_path, 'ahead', threads, fn, batches)
  plain = _analyze(tmp_path, 'plain', 0, fn, batches)
  assert ahead[:2] == plain[:2]
  # 'x' 40 times in each batch of 8 or more, 'the' 48 times in all.
  assert ahead[0][:2] == [b'x', b'the'] and len(ahead[0]) == 5
  assert sorted(ahead[1]) == sorted(f'batch {i}'.encode() for i in range(12))
  assert dofn in ahead[2]
  assert not {analysis.GraphAhead, analysis.TwoGraphsAhead} & set(plain[2])
  assert tft_impl._RunMetaGraphDoFn is original  # pylint: disable=protected-access


def test_a_graph_error_fails_the_run_and_tft_is_restored(tmp_path):
  import tensorflow as tf
  from tensorflow_transform.beam import impl as tft_impl
  original = tft_impl._RunMetaGraphDoFn  # pylint: disable=protected-access
  inner = preprocessing.make_preprocessing_fn(_config())

  def failing_fn(inputs):
    # A text longer than 60 bytes fails the graph, in the fourth batch of
    # five: its error surfaces while later batches are on their way.
    check = tf.debugging.assert_less(
        tf.strings.length(inputs[preprocessing.TEXT]), 60,
        message='a text of 60 bytes or more')
    with tf.control_dependencies([check]):
      inputs = {k: tf.identity(v) for k, v in inputs.items()}
    return inner(inputs)

  batches = [(TEXTS[:3], ['a'] * 3)] * 3 + [(TEXTS, ['b'] * 10),
                                             (TEXTS[:2], ['c'] * 2)]
  with pytest.raises(Exception, match='a text of 60 bytes or more'):
    _analyze(tmp_path, 'failing', 2, failing_fn, batches)
  assert tft_impl._RunMetaGraphDoFn is original  # pylint: disable=protected-access
  # Built inside graph_ahead() and failing there: restored as well.
  with pytest.raises(RuntimeError, match='building failed'):
    with analysis.graph_ahead():
      assert tft_impl._RunMetaGraphDoFn is analysis.GraphAhead  # pylint: disable=protected-access
      raise RuntimeError('building failed')
  assert tft_impl._RunMetaGraphDoFn is original  # pylint: disable=protected-access


def test_a_reused_worker_runs_the_graph_of_the_saved_model_it_is_given(
    tmp_path):
  """Two attempts of one step in one worker process (a region retried on
  a reused SDK worker): the DoFn is unpickled twice from the same bytes,
  so both share one Shared handle, and the retry names the saved model of
  its own attempt. tf.Transform's own DoFn keeps the first attempt's
  graph and fails its assertion; TaggedGraph runs the retry's model."""
  from apache_beam.internal import pickler
  from apache_beam.utils import shared
  from tensorflow_transform.beam import impl as tft_impl
  fn = preprocessing.make_preprocessing_fn(_config())
  _analyze(tmp_path, 'cats', 0, fn, [(['cat cat cat'], ['a'])])
  _analyze(tmp_path, 'dogs', 0, fn, [(['dog dog dog'], ['a'])])
  cats, dogs = (str(tmp_path / name / 'transform_fn')
                for name in ('cats', 'dogs'))
  batch = preprocessing.analysis_record_batch(['cat', 'dog'], ['a', 'a'])

  def attempt(pickled, saved_model_dir):
    dofn = pickler.loads(pickled)
    dofn.setup()
    [out] = list(dofn.process(batch, saved_model_dir))
    return dofn, out

  def ids(out):
    return out['token_ids'].numpy().tolist()

  for cls in (tft_impl._RunMetaGraphDoFn, analysis.TaggedGraph):  # pylint: disable=protected-access
    pickled = pickler.dumps(cls(None, shared.Shared(), set(), False,
                                preprocessing.analysis_adapter_config()))
    first, on_cats = attempt(pickled, cats)
    if cls is analysis.TaggedGraph:
      retry, on_dogs = attempt(pickled, dogs)
      # The same graph a worker that never ran the first attempt loads.
      fresh = pickler.dumps(cls(None, shared.Shared(), set(), False,
                                preprocessing.analysis_adapter_config()))
      assert ids(on_dogs) == ids(attempt(fresh, dogs)[1])
      assert ids(on_dogs) != ids(on_cats)
      # And the first attempt's instance, still alive, keeps its own.
      assert ids(list(first.process(batch, cats))[0]) == ids(on_cats)
      del retry
    else:
      with pytest.raises(AssertionError):
        attempt(pickled, dogs)
    del first
