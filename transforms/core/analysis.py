"""tf.Transform's analysis graph, run ahead on threads of its own.

`AnalyzeDataset` runs the preprocessing_fn's analysis graph on each batch
of the training split with tf.Transform's own DoFn, on the runner's
thread: the thread waits while TensorFlow tokenizes (or whatever the
modality's graph does), and the runner's other work in the same stage
(reading, keys, statistics) waits with it. `graph_ahead()` has
`AnalyzeDataset` use `GraphAhead` instead, tf.Transform's DoFn with one
change: each batch goes to a thread of its own, and its outputs are handed
on in the batches' order when later batches arrive or at the end of the
bundle, as core/batches.ApplyTransform does for the exported transform
(both with runtime/threads.ThreadAhead). The outputs are the same, in the
same order; a graph error still fails the bundle.

`graph_ahead(2)` (`TwoGraphsAhead`) runs two batches at once on two
threads. Only for a graph whose outputs are exact whatever the order in
which TensorFlow sums (counts, as text's vocabularies are): with two graphs
running at once, TensorFlow's float reductions came out different in the
last bits from run to run (the images' channel means, so the normalized
pixels and the fingerprints changed between two runs of the same input).

Both, and `tagged_graphs()` for tf.Transform's TransformDataset, load the
graph of the saved model each batch names (`TaggedGraph`): tf.Transform's
own DoFn keeps whichever graph its worker process holds.
"""

import contextlib

from apache_beam.transforms.window import GlobalWindows

from transforms.compat import tensorflow_transform as compat_tft
from transforms.runtime import threads


class TaggedGraph(compat_tft.RunMetaGraphDoFn):
  """tf.Transform's _RunMetaGraphDoFn, running the graph of the saved model
  it is given, always.

  tf.Transform's DoFn takes the graph that `Shared` holds in the worker
  process, loaded from whichever saved model came first, and asserts that
  it is the one the batch names. A retried region brings the saved model
  of its own attempt, while a reused SDK worker (cluster launchers keep
  them: --environment_cache_millis) still holds the graph of the failed
  attempt: on Flink every retry failed on that assertion, and so did the
  job. Tagged with its directory, the graph is loaded again when the
  directory differs (Beam's Shared.acquire(tag=...)), and still loaded
  once per worker process otherwise.
  """

  def _graph_of(self, saved_model_dir):
    state = getattr(self, '_graph_state', None)
    if state is None or state.saved_model_dir != saved_model_dir:
      self._graph_state = self._shared_graph_state_handle.acquire(
          lambda: self._make_graph_state(saved_model_dir),
          tag=saved_model_dir)
    assert self._graph_state.saved_model_dir == saved_model_dir

  def process(self, batch, saved_model_dir):
    self._graph_of(saved_model_dir)
    yield self._handle_batch(batch)


class GraphAhead(TaggedGraph):
  """TaggedGraph, one batch ahead (see above)."""

  # Batches handed to the graph threads and not yet handed on, and the
  # threads that run the graph.
  AHEAD = 1
  THREADS = 1

  def setup(self):
    super().setup()
    self._ahead = threads.ThreadAhead('analysis-graph', self.AHEAD,
                                      self.THREADS)

  def start_bundle(self):
    self._ahead.start_bundle()

  def process(self, batch, saved_model_dir):
    self._graph_of(saved_model_dir)
    for result, _ in self._ahead.submit(self._handle_batch, batch):
      yield result

  def finish_bundle(self):
    # tf.Transform analyzes in the global window only.
    for result, _ in self._ahead.drain():
      yield GlobalWindows.windowed_value(result)

  def teardown(self):
    self._ahead.close()


class TwoGraphsAhead(GraphAhead):
  """GraphAhead with two batches running the graph at once, on two threads
  (see above: for exact outputs only). The graph's work is TensorFlow's,
  which releases the interpreter lock: text's tokenizing and counting kept
  one graph thread about one core busy while the runner's thread waited."""

  AHEAD = 2
  THREADS = 2


_BY_THREADS = {0: TaggedGraph, 1: GraphAhead, 2: TwoGraphsAhead}


@contextlib.contextmanager
def graph_ahead(threads: int = 1):
  """While building AnalyzeDataset: its analysis graph runs in GraphAhead,
  or with threads=2 in TwoGraphsAhead (threads=0: TaggedGraph, on the
  runner's thread)."""
  with compat_tft.run_meta_graph_dofn(_BY_THREADS[threads]):
    yield


def tagged_graphs():
  """While building tf.Transform's TransformDataset: it runs TaggedGraph."""
  return graph_ahead(0)
