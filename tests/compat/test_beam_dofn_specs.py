"""transforms/compat/beam.cache_dofn_introspection: Beam's state-and-timer
introspection of a DoFn kept per DoFn object, and the arguments of a
function or method kept per function. It must give Beam exactly what Beam computes, for plain and
stateful DoFns, in real pipelines; compute once per DoFn or function; and
keep neither alive."""

import functools
import gc
import pickle
import weakref

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
import pytest

from transforms.compat import beam as compat_beam

BAG = userstate.BagStateSpec('seen', VarIntCoder())
TOTAL = userstate.ReadModifyWriteStateSpec('total', VarIntCoder())
FLUSH = userstate.TimerSpec('flush', TimeDomain.WATERMARK)
# Beam's own functions, whether or not cache_dofn_introspection() has
# replaced them.
_BEAM = compat_beam._PLAIN  # pylint: disable=protected-access
_BEAM_ARGS = compat_beam._PLAIN_ARGS  # pylint: disable=protected-access


class _Plain(beam.DoFn):

  def process(self, x):
    yield x


class _SumPerKey(beam.DoFn):
  """A stateful DoFn: sums each key's values in state, emits at the end
  of the window through a timer."""

  def process(self, kv, total=beam.DoFn.StateParam(TOTAL),
              seen=beam.DoFn.StateParam(BAG), flush=beam.DoFn.TimerParam(FLUSH),
              window=beam.DoFn.WindowParam):
    total.write((total.read() or 0) + kv[1])
    seen.add(kv[1])
    flush.set(window.max_timestamp())

  @userstate.on_timer(FLUSH)
  def on_flush(self, key=beam.DoFn.KeyParam,
               total=beam.DoFn.StateParam(TOTAL),
               seen=beam.DoFn.StateParam(BAG)):
    yield key, total.read(), len(list(seen.read()))


class _SameParamTwice(beam.DoFn):

  def process(self, x, a=beam.DoFn.StateParam(BAG),
              b=beam.DoFn.StateParam(BAG)):
    yield x


class _Unhashable(_SumPerKey):
  __hash__ = None

  def __eq__(self, other):
    return isinstance(other, _Unhashable)


def test_the_same_answers_as_beam():
  for fn in (_Plain(), _SumPerKey(), _Unhashable(),
             beam.core.CallableWrapperDoFn(lambda x: x)):
    assert compat_beam.get_dofn_specs(fn) == _BEAM(fn)
  assert compat_beam.get_dofn_specs(_SumPerKey()) == ({BAG, TOTAL}, {FLUSH})
  assert compat_beam.get_dofn_specs(_Plain()) == (set(), set())
  with pytest.raises(ValueError, match='duplicate'):
    compat_beam.get_dofn_specs(_SameParamTwice())


def _recording(monkeypatch, name, beams):
  """Replaces compat_beam.<name> (Beam's function) with one that records
  what it is asked; returns that record."""
  computed = []

  def plain(x):
    computed.append(x)
    return beams(x)

  monkeypatch.setattr(compat_beam, name, plain)
  return computed


def test_computed_once_per_dofn_as_new_sets(monkeypatch):
  computed = _recording(monkeypatch, '_PLAIN', _BEAM)
  fn = _SumPerKey()
  first = compat_beam.get_dofn_specs(fn)
  first[0].clear()  # a caller that changes what it got changes nothing
  for _ in range(4):
    assert compat_beam.get_dofn_specs(fn) == ({BAG, TOTAL}, {FLUSH})
  assert computed == [fn]
  # A DoFn that cannot be a weak dictionary's key is computed each time.
  odd = _Unhashable()
  for _ in range(3):
    assert compat_beam.get_dofn_specs(odd) == ({BAG, TOTAL}, {FLUSH})
  assert computed[1:] == [odd] * 3


def test_keeps_no_dofn_alive():
  fn = _Plain()
  gone = weakref.ref(fn)
  compat_beam.get_dofn_specs(fn)
  assert fn in compat_beam._SPECS  # pylint: disable=protected-access
  del fn
  gc.collect()
  assert gone() is None


def _with_defaults(a, b=2, *rest, c=3, **more):
  return a, b, rest, c, more


def _arguments_cases():
  stateful, plain = _SumPerKey(), _Plain()
  return [_with_defaults, lambda x, y=1: x, stateful.process,
          stateful.on_flush, _SumPerKey().process, plain.process,
          # Not plain functions or methods: left to Beam.
          functools.partial(_with_defaults, 1), str.strip, len]


def test_arguments_are_beams():
  for f in _arguments_cases():
    assert compat_beam.get_function_args_defaults(f) == _BEAM_ARGS(f), f
  args, defaults = compat_beam.get_function_args_defaults(
      _SumPerKey().process)
  assert args == ['kv', 'total', 'seen', 'flush', 'window']
  assert [type(d) for d in defaults] == [
      beam.DoFn.StateParam, beam.DoFn.StateParam, beam.DoFn.TimerParam,
      type(beam.DoFn.WindowParam)]


def test_arguments_computed_once_per_function_as_new_lists(monkeypatch):
  computed = _recording(monkeypatch, '_PLAIN_ARGS', _BEAM_ARGS)
  monkeypatch.setattr(compat_beam, '_ARGS', {
      False: weakref.WeakKeyDictionary(), True: weakref.WeakKeyDictionary()})
  # Unpickled copies of a DoFn (one per stage of the local runner) share
  # their methods' functions: one computation for all of them.
  copies = [pickle.loads(pickle.dumps(_SumPerKey())) for _ in range(4)]
  for fn in copies:
    args, defaults = compat_beam.get_function_args_defaults(fn.process)
    args.clear()  # a caller that changes what it got changes nothing
    defaults.clear()
  assert len(computed) == 1
  assert compat_beam.get_function_args_defaults(copies[0].process) == (
      _BEAM_ARGS(copies[0].process))
  # The function itself (with self) and bound (without): two answers.
  assert compat_beam.get_function_args_defaults(_SumPerKey.process)[0][0] == (
      'self')
  assert len(computed) == 2
  # Not a plain function or method: Beam's answer each time.
  partial = functools.partial(_with_defaults, 1)
  for _ in range(3):
    compat_beam.get_function_args_defaults(partial)
  assert computed[2:] == [partial] * 3


def test_arguments_keep_no_function_alive():
  f = eval('lambda x, y=1: x')  # pylint: disable=eval-used
  gone = weakref.ref(f)
  compat_beam.get_function_args_defaults(f)
  assert f in compat_beam._ARGS[False]  # pylint: disable=protected-access
  del f
  gc.collect()
  assert gone() is None


def test_stateful_and_plain_dofns_run_as_before_once_installed(monkeypatch):
  monkeypatch.setattr(userstate, 'get_dofn_specs', _BEAM)
  monkeypatch.setattr(beam.transforms.core, 'get_function_args_defaults',
                      _BEAM_ARGS)
  compat_beam.cache_dofn_introspection()
  assert userstate.get_dofn_specs is compat_beam.get_dofn_specs
  assert beam.transforms.core.get_function_args_defaults is (
      compat_beam.get_function_args_defaults)
  data = [('a', 1), ('b', 5), ('a', 2), ('a', 4), ('b', 5)]
  with TestPipeline() as p:
    kvs = p | beam.Create(data)
    assert_that(kvs | beam.ParDo(_SumPerKey()),
                equal_to([('a', 7, 3), ('b', 10, 2)]), label='Stateful')
    assert_that(kvs | beam.ParDo(_Plain()) | beam.Map(lambda kv: kv[1]),
                equal_to([1, 5, 2, 4, 5]), label='Plain')
  with pytest.raises(ValueError, match='duplicate'):
    with TestPipeline() as p:
      _ = p | beam.Create(data) | beam.ParDo(_SameParamTwice())
