"""Elements that wait on disk (runtime/hold.py): what a bundle holds comes
back whole and in order, a cut file says so, and spilled values (and rows
of an array) come back by their reference."""

import os

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
import numpy as np
import pytest

from transforms.runtime import hold


def _take(ref):
  reader = hold.Reader()
  try:
    return reader.take(ref)
  finally:
    reader.close()


def _take_rows(ref, wanted):
  reader = hold.Reader()
  try:
    return reader.take_rows(ref, wanted)
  finally:
    reader.close()


def test_held_elements_come_back_whole(tmp_path):
  elements = [[{'id': f'{i}.jpg', 'image': bytes([i]) * 50000}]
              for i in range(20)]
  with TestPipeline() as p:
    names = p | beam.Create(elements) | hold.Hold(str(tmp_path))
    back = names | beam.FlatMap(hold.read_held)
    assert_that(back | beam.Map(lambda e: (e[0]['id'], len(e[0]['image']),
                                           e[0]['image'][:1])),
                equal_to([(f'{i}.jpg', 50000, bytes([i])) for i in range(20)]))
  assert list(tmp_path.glob('*.hold'))


def test_a_cut_hold_file_is_an_error_not_fewer_elements(tmp_path):
  fn = hold.HoldFn(str(tmp_path))
  fn.start_bundle()
  for i in range(3):
    fn.process({'n': i, 'data': os.urandom(10000)})
  (name,) = [w.value for w in fn.finish_bundle()]
  assert [e['n'] for e in hold.read_held(name)] == [0, 1, 2]
  with open(name, 'rb') as f:
    data = f.read()
  with open(name, 'wb') as f:
    f.write(data[:15000])
  with pytest.raises(IOError, match='cut short'):
    list(hold.read_held(name))


def test_spilled_values_come_back_by_reference(tmp_path):
  spill = hold.Spill(str(tmp_path))
  refs = [spill.put(('part', i, list(range(i)))) for i in range(5)]
  spill.close()
  assert [_take(r) for r in reversed(refs)] == [
      ('part', i, list(range(i))) for i in reversed(range(5))]
  assert _take(('not', 'a', 'reference')) == ('not', 'a', 'reference')


def test_spilled_rows_come_back_a_few_or_all_at_once(tmp_path):
  rows = np.arange(1000 * 24, dtype=np.int64).astype(np.uint8).reshape(
      1000, 24)
  rows[:, 0] = np.arange(1000) % 251
  spill = hold.Spill(str(tmp_path))
  before = spill.put({'a value': 1})
  ref = spill.put_rows(rows)
  spill.close()
  few = np.array([3, 500, 999])
  assert (_take_rows(ref, few) == rows[few]).all()
  many = np.arange(0, 1000, 2)
  assert (_take_rows(ref, many) == rows[many]).all()
  assert _take_rows(rows, few).tolist() == rows[few].tolist()
  assert _take(before) == {'a value': 1}
  # A file cut short is an error, whichever way it is read.
  name = ref[1]
  with open(name, 'r+b') as f:
    f.truncate(os.path.getsize(name) - 24 * 100)
  with pytest.raises(IOError, match='cut short'):
    _take_rows(ref, np.array([950]))
  with pytest.raises(IOError, match='cut short'):
    _take_rows(ref, many)


def test_spilled_rows_far_apart_come_back_in_order(tmp_path):
  big = np.random.default_rng(0).integers(0, 256, (20000, 40), np.uint8)
  spill = hold.Spill(str(tmp_path))
  spill.put('something before')
  ref = spill.put_rows(big)
  spill.put_rows(big[::-1])
  spill.close()
  # Runs of near rows (read at once) and rows 120 KB and more apart.
  wanted = np.array([0, 1, 5, 3000, 3001, 3002, 12000, 19999])
  assert (_take_rows(ref, wanted) == big[wanted]).all()
  assert _take_rows(ref, np.array([], np.int64)).shape == (0, 40)
  everything = np.arange(20000)
  assert (_take_rows(ref, everything) == big).all()
  with pytest.raises(IndexError):
    _take_rows(ref, np.array([20000]))


def test_a_reader_opens_each_spill_file_once_and_keeps_a_few_open(
    tmp_path, monkeypatch):
  """A bundle takes the parts of many groups, which sit in a few files:
  each file is opened once while it is among the last Reader.KEEP used
  (on an object store an open costs three requests)."""
  spills = [hold.Spill(str(tmp_path)) for _ in range(hold.Reader.KEEP + 2)]
  refs = [(s, spill.put((s, i))) for i in range(30)
          for s, spill in enumerate(spills)]
  for spill in spills:
    spill.close()
  opened = []
  real_open = hold.FileSystems.open

  def counting_open(name, *args, **kwargs):
    opened.append(name)
    return real_open(name, *args, **kwargs)

  monkeypatch.setattr(hold.FileSystems, 'open', counting_open)
  reader = hold.Reader()
  # Parts of the first KEEP files, over and over: each opened once.
  few = [(s, r) for s, r in refs if s < hold.Reader.KEEP]
  assert [reader.take(r) for _, r in few] == [
      (s, i) for i in range(30) for s in range(hold.Reader.KEEP)]
  assert len(opened) == hold.Reader.KEEP == len(set(opened))
  # All of them, round and round: more files than are kept open, and
  # every value still right.
  assert [reader.take(r) for _, r in refs] == [
      (s, i) for i in range(30) for s in range(len(spills))]
  reader.close()
  assert not reader._files  # pylint: disable=protected-access
