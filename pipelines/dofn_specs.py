"""Beam's introspection of DoFns and their methods, done once.

Beam asks whether a DoFn uses state or timers (`userstate.get_dofn_specs`)
each time it applies, translates, validates or sets up a ParDo: five to
fifteen times per DoFn while one of our runs is built and run. Each time it
takes `inspect.signature` of every method the DoFn has (about 20 for a
plain DoFn): 53,520 signatures in a run of 20 images, about a second of
every run's fixed cost, and a third of the local runner's time on a tiny
input. A DoFn's answer depends only on its methods' default arguments,
which do not change once it exists, so `install()` makes Beam keep the
answer per DoFn object (weakly: a DoFn is not kept alive by it).

The same goes one level down: the local runner sets up each of a run's 70
to 80 stages from unpickled copies of its DoFns, and asks for the
arguments and defaults of every method again (`core.
get_function_args_defaults`, an `inspect.signature` each): about 18,000
calls for under 400 distinct functions in a tiny run. The copies of a DoFn
whose class is importable share its methods' functions, so the answer is
kept per function (weakly), for plain functions and methods bound to any
object; anything else (callable objects, partials, builtins) goes to Beam.

Only the launching process is changed (the DirectRunner's workers are its
threads); distributed runners' workers answer as before. What Beam gets is
what it computed the first time, as new sets or lists each call; a DoFn
Beam cannot hash or refer to weakly, and any error, is left to Beam's own
function.
"""

import threading
import types
import weakref

from apache_beam.transforms import core
from apache_beam.transforms import userstate

_PLAIN = userstate.get_dofn_specs
_SPECS = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
_PLAIN_ARGS = core.get_function_args_defaults
# (arguments, defaults) per function: of the function itself, and of the
# function bound to an object (without its first argument).
_ARGS = {False: weakref.WeakKeyDictionary(), True: weakref.WeakKeyDictionary()}


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


def get_function_args_defaults(f):
  """core.get_function_args_defaults(f), computed once per function."""
  bound = isinstance(f, types.MethodType)
  func = f.__func__ if bound else f
  if not isinstance(func, types.FunctionType):
    return _PLAIN_ARGS(f)
  with _LOCK:
    found = _ARGS[bound].get(func)
  if found is None:
    found = _PLAIN_ARGS(f)
    with _LOCK:
      _ARGS[bound][func] = found
  args, defaults = found
  return list(args), list(defaults)


def install() -> None:
  """Makes Beam's introspection of DoFns in this process go through
  get_dofn_specs and get_function_args_defaults (every caller looks them
  up on their module each time)."""
  userstate.get_dofn_specs = get_dofn_specs
  core.get_function_args_defaults = get_function_args_defaults
