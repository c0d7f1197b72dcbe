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
(both with core/batches.ThreadAhead). The outputs are the same, in the
same order; a graph error still fails the bundle.

`graph_ahead(2)` (`TwoGraphsAhead`) runs two batches at once on two
threads. Only for a graph whose outputs are exact whatever the order in
which TensorFlow sums (counts, as text's vocabularies are): with two graphs
running at once, TensorFlow's float reductions came out different in the
last bits from run to run (the images' channel means, so the normalized
pixels and the fingerprints changed between two runs of the same input).
"""

import contextlib

from apache_beam.transforms.window import GlobalWindows
from tensorflow_transform.beam import impl as tft_impl

from transforms.core import batches


class GraphAhead(tft_impl._RunMetaGraphDoFn):  # pylint: disable=protected-access
  """tf.Transform's _RunMetaGraphDoFn, one batch ahead (see above)."""

  # Batches handed to the graph threads and not yet handed on, and the
  # threads that run the graph.
  AHEAD = 1
  THREADS = 1

  def setup(self):
    super().setup()
    self._ahead = batches.ThreadAhead('analysis-graph', self.AHEAD,
                                      self.THREADS)

  def start_bundle(self):
    self._ahead.start_bundle()

  def process(self, batch, saved_model_dir):
    if not hasattr(self, '_graph_state'):
      self._graph_state = self._shared_graph_state_handle.acquire(
          lambda: self._make_graph_state(saved_model_dir))
    assert self._graph_state.saved_model_dir == saved_model_dir
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


_BY_THREADS = {1: GraphAhead, 2: TwoGraphsAhead}


@contextlib.contextmanager
def graph_ahead(threads: int = 1):
  """While building AnalyzeDataset: its analysis graph runs in GraphAhead,
  or with threads=2 in TwoGraphsAhead."""
  dofn = _BY_THREADS[threads]
  original = tft_impl._RunMetaGraphDoFn  # pylint: disable=protected-access
  tft_impl._RunMetaGraphDoFn = dofn  # pylint: disable=protected-access
  try:
    yield
  finally:
    tft_impl._RunMetaGraphDoFn = original  # pylint: disable=protected-access
