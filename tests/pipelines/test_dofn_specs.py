"""pipelines/dofn_specs.py: Beam's state-and-timer introspection of a DoFn
kept per DoFn object. It must give Beam exactly what Beam computes, for
plain and stateful DoFns, in real pipelines; compute once per DoFn; and
keep no DoFn alive."""

import gc
import weakref

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
import pytest

from pipelines import dofn_specs

BAG = userstate.BagStateSpec('seen', VarIntCoder())
TOTAL = userstate.ReadModifyWriteStateSpec('total', VarIntCoder())
FLUSH = userstate.TimerSpec('flush', TimeDomain.WATERMARK)
# Beam's own function, whether or not install() has replaced it.
_BEAM = dofn_specs._PLAIN  # pylint: disable=protected-access


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
    assert dofn_specs.get_dofn_specs(fn) == _BEAM(fn)
  assert dofn_specs.get_dofn_specs(_SumPerKey()) == ({BAG, TOTAL}, {FLUSH})
  assert dofn_specs.get_dofn_specs(_Plain()) == (set(), set())
  with pytest.raises(ValueError, match='duplicate'):
    dofn_specs.get_dofn_specs(_SameParamTwice())


def test_computed_once_per_dofn_as_new_sets(monkeypatch):
  computed = []

  def plain(fn):
    computed.append(fn)
    return _BEAM(fn)

  monkeypatch.setattr(dofn_specs, '_PLAIN', plain)
  fn = _SumPerKey()
  first = dofn_specs.get_dofn_specs(fn)
  first[0].clear()  # a caller that changes what it got changes nothing
  for _ in range(4):
    assert dofn_specs.get_dofn_specs(fn) == ({BAG, TOTAL}, {FLUSH})
  assert computed == [fn]
  # A DoFn that cannot be a weak dictionary's key is computed each time.
  odd = _Unhashable()
  for _ in range(3):
    assert dofn_specs.get_dofn_specs(odd) == ({BAG, TOTAL}, {FLUSH})
  assert computed[1:] == [odd] * 3


def test_keeps_no_dofn_alive():
  fn = _Plain()
  gone = weakref.ref(fn)
  dofn_specs.get_dofn_specs(fn)
  assert fn in dofn_specs._SPECS  # pylint: disable=protected-access
  del fn
  gc.collect()
  assert gone() is None


def test_stateful_and_plain_dofns_run_as_before_once_installed(monkeypatch):
  monkeypatch.setattr(userstate, 'get_dofn_specs', _BEAM)
  dofn_specs.install()
  assert userstate.get_dofn_specs is dofn_specs.get_dofn_specs
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
