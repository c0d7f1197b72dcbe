"""Image decoding in local worker processes, a few inputs per call
(decode.py _PooledFn): real Beam pipelines, real spawned workers, real
files and a real crash.

A worker reads its own local inputs, so reading errors must be the same
as in-line; a worker that dies on one input of a call must cost only that
input, not the others sent with it.
"""

import os

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np
from PIL import Image

import process_calls
from transforms.core.dead_letters import DEAD
from transforms.modalities.image import decode
from transforms.modalities.image import inputs
from transforms.modalities.image import config

CFG = config.ImageConfig(height=16, width=16)


def _tasks(paths):
  return [(inputs.InputRef(path, os.path.basename(path), 'cat', 'train'),
           0, True, None) for path in paths]


def _pngs(folder, names):
  rng = np.random.default_rng(0)
  paths = []
  for name in names:
    path = os.path.join(folder, name)
    Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(
        path, format='PNG')
    paths.append(path)
  return paths


def _check(fn, tasks, ids, dead):
  """Runs `fn` over `tasks` in a real pipeline and checks the example ids
  and the dead letters, as (input, stage, reason), it gave."""
  with TestPipeline() as p:
    out = (p | beam.Create(tasks)
           | beam.ParDo(fn).with_outputs(DEAD, main='examples'))
    assert_that(out.examples | 'Ids' >> beam.FlatMap(
        lambda examples: [ex['id'] for ex in examples]),
                equal_to(ids), label='Ids')
    assert_that(out[DEAD] | 'Why' >> beam.Map(
        lambda d: (d['input'], d['stage'], d['reason'])), equal_to(dead),
                label='Dead')


def test_reading_errors_are_the_same_in_a_worker_and_in_line(tmp_path):
  good = _pngs(str(tmp_path), [f'{i:02d}.png' for i in range(10)])
  missing = str(tmp_path / 'gone [1].png')
  folder = tmp_path / 'a folder.png'
  folder.mkdir()
  tasks = _tasks(good[:5] + [missing, str(folder)] + good[5:])
  ids = [os.path.basename(p) for p in good]
  dead = [
      (missing, 'read', 'the file no longer exists (deleted or moved after '
                        'it was listed)'),
      (str(folder), 'read', f"IsADirectoryError: [Errno 21] Is a directory: "
                            f"'{folder}'")]
  for processes in (0, 2):
    _check(decode.DecodeImageFn(CFG, processes=processes), tasks, ids, dead)


class _DiesOnKillFn(decode.DecodeImageFn):
  """DecodeImageFn whose kernel crashes its worker on kill.png."""
  _kernel = staticmethod(process_calls.process_image_or_die)


def test_a_worker_dying_on_one_input_costs_only_that_input(tmp_path):
  # 20 inputs, 8 a call: kill.png shares its call with 7 others, which
  # must come back decoded; only kill.png is a dead letter.
  names = [f'{i:02d}.png' for i in range(20)]
  names[10] = 'kill.png'
  paths = _pngs(str(tmp_path), names)
  assert decode.DecodeImageFn.BATCH == 8
  _check(_DiesOnKillFn(CFG, processes=2), _tasks(paths),
         [n for n in names if n != 'kill.png'],
         [(paths[10], 'decode',
           'the worker process died each time it processed this input '
           '(killed, out of memory, or a crash in a decoder)')])


def test_examples_leave_in_lists_of_one_call_in_task_order(tmp_path):
  # 20 inputs, 8 a call, in one bundle: lists of 8, 8 and 4 in the order of
  # the tasks, in-line and in workers; a bad input leaves its list shorter
  # and goes to the dead letters alone.
  names = [f'{i:02d}.png' for i in range(20)]
  paths = _pngs(str(tmp_path), names)
  (tmp_path / '09.png').write_bytes(b'not a png')
  want = [names[:8], [n for n in names[8:16] if n != '09.png'], names[16:]]
  for processes in (0, 2):
    with TestPipeline() as p:
      out = (p | beam.Create(_tasks(paths), reshuffle=False)
             | beam.ParDo(decode.DecodeImageFn(CFG, processes=processes))
             .with_outputs(DEAD, main='examples'))
      assert_that(out.examples | 'Ids' >> beam.Map(
          lambda examples: [ex['id'] for ex in examples]),
                  equal_to(want), label='Lists')
      assert_that(out[DEAD] | 'Input' >> beam.Map(lambda d: d['input']),
                  equal_to([paths[9]]), label='Dead')
