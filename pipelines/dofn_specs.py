"""Beam's state-and-timer introspection of a DoFn, done once per DoFn.

Beam asks whether a DoFn uses state or timers (`userstate.get_dofn_specs`)
each time it applies, translates, validates or sets up a ParDo: five to
fifteen times per DoFn while one of our runs is built and run. Each time it
takes `inspect.signature` of every method the DoFn has (about 20 for a
plain DoFn): 53,520 signatures in a run of 20 images, about a second of
every run's fixed cost, and a third of the local runner's time on a tiny
input. A DoFn's answer depends only on its methods' default arguments,
which do not change once it exists, so `install()` makes Beam keep the
answer per DoFn object (weakly: a DoFn is not kept alive by it).

Only the launching process is changed (the DirectRunner's workers are its
threads); distributed runners' workers answer as before. What Beam gets is
what it computed the first time, as new sets each call; a DoFn Beam cannot
hash or refer to weakly, and any error, is left to Beam's own function.
"""

import threading
import weakref

from apache_beam.transforms import userstate

_PLAIN = userstate.get_dofn_specs
_SPECS = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def get_dofn_specs(dofn):
  """userstate.get_dofn_specs(dofn), computed once per DoFn object."""
  try:
    with _LOCK:
      found = _SPECS.get(dofn)
  except TypeError:  # not hashable, or not weakly referenceable
    return _PLAIN(dofn)
  if found is None:
    found = _PLAIN(dofn)
    try:
      with _LOCK:
        _SPECS[dofn] = found
    except TypeError:
      pass
  states, timers = found
  return set(states), set(timers)


def install() -> None:
  """Makes Beam's introspection of DoFns in this process go through
  get_dofn_specs (every caller looks it up on the module each time)."""
  userstate.get_dofn_specs = get_dofn_specs
