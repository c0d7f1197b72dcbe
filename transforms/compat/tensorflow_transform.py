"""Where the project reaches into tf.Transform's internals, in one place.

tf.Transform's AnalyzeDataset and TransformDataset run the graph of a saved
model on each batch with a DoFn they name as a module global,
`tensorflow_transform.beam.impl._RunMetaGraphDoFn`, and offer no option
(its `Context` has none) to run it otherwise. transforms/core/analysis.py
subclasses it (`RunMetaGraphDoFn` here) and has the expansions use the
subclass (`run_meta_graph_dofn`): the upstream DoFn keeps whichever graph
its worker process loaded first and asserts that it is the one each batch
names (impl.py, `_RunMetaGraphDoFn.process`: `Shared.acquire` without a
tag, then `assert self._graph_state.saved_model_dir == saved_model_dir`),
which fails every retry of a region on a reused SDK worker.

Written for tf.Transform PINNED; tests/compat/test_pins.py fails when
another version is installed and an object in FINGERPRINTS changed.
"""

import contextlib

import tensorflow_transform
from tensorflow_transform.beam import impl as tft_impl

from transforms import compat

# The tf.Transform release (major.minor) this module was written for.
PINNED = '1.21'
# The objects it relies on, by dotted name, and the SHA-256 of their source
# at PINNED (see tests/compat/test_pins.py).
FINGERPRINTS = {
    'tensorflow_transform.beam.impl._RunMetaGraphDoFn':
        'a21b3b0bd13655eb58c4d48b75ba29d2e5de17a3197d9c40f233cee3efa159a1',
    # Look the DoFn up as a module global when they expand.
    'tensorflow_transform.beam.impl._ApplySavedModelImpl':
        'c87ec283adc29d853a014cb6475ab9bbc26e9ca5d2c2121211eb018b5c404953',
    'tensorflow_transform.beam.impl.TransformDataset':
        'd19aaa0f5f550be3576940171d542741f70b82ff275ac189eb84beb47fabd0a6',
}


def pinned() -> bool:
  """Whether the installed tf.Transform is the one this module was written
  for (logs a warning once if not)."""
  return compat.check_release(
      'tf.Transform', tensorflow_transform.__version__, PINNED,
      'transforms/compat/tensorflow_transform.py')


# tf.Transform's DoFn that runs a saved model's graph on batches; its
# _make_graph_state, _handle_batch, _graph_state and
# _shared_graph_state_handle are what a subclass uses.
RunMetaGraphDoFn = tft_impl._RunMetaGraphDoFn  # pylint: disable=protected-access


@contextlib.contextmanager
def run_meta_graph_dofn(dofn):
  """While tf.Transform's AnalyzeDataset or TransformDataset is expanded
  (applied to a PCollection), they run batches through `dofn`, a subclass
  of RunMetaGraphDoFn, instead of RunMetaGraphDoFn."""
  pinned()
  original = tft_impl._RunMetaGraphDoFn  # pylint: disable=protected-access
  tft_impl._RunMetaGraphDoFn = dofn  # pylint: disable=protected-access
  try:
    yield
  finally:
    tft_impl._RunMetaGraphDoFn = original  # pylint: disable=protected-access
