"""Python's cyclic garbage collector around a command-line run.

Starting a run imports Apache Beam, TensorFlow and tf.Transform and traces
the preprocessing function: hundreds of thousands of objects, most of them
still alive when the pipeline runs. With the collector's default
thresholds those imports set off several full collections, each walking
every object made so far, and every later full collection walks the
long-lived ones again (the figures: benchmarks/TRIED.md, "Whole runs and
fixed cost").

So the command lines (pipelines/preprocess.py and pipelines/validate.py,
only when run as commands: a program or test that imports them keeps its
collector as it is):

- `pause()` the collector before their first large import;
- `resume()` it just before the pipeline runs: what has been made so far
  moves to the permanent generation (gc.freeze), which later collections
  skip, and the first generation is collected every 50,000 new container
  objects instead of every 700 (a run makes lists and tuples by the
  million, and each young collection has a fixed cost).

The garbage of the start (cycles among the imports' temporary objects) is
frozen with the rest instead of being collected, which costs small runs a
little memory. Nothing else changes: every object made during the run is
collected as before. Local worker processes keep Python's defaults: their
heaps are small, and the same treatment measured no faster there.
"""

import gc

# Container objects allocated, less those freed, between young
# collections while the pipeline runs (Python's default: 700).
RUN_THRESHOLD = 50000

_paused = False


def pause() -> None:
  """Stops automatic collection until `resume`."""
  global _paused
  if gc.isenabled():
    gc.disable()
    _paused = True


def resume() -> None:
  """Freezes every object made so far and restarts collection with the run's
  threshold; nothing when `pause` did not stop the collector."""
  global _paused
  if not _paused:
    return
  _paused = False
  gc.freeze()
  gc.set_threshold(RUN_THRESHOLD, *gc.get_threshold()[1:])
  gc.enable()
