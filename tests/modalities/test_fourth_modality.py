"""A fourth modality is one folder and one registry line (CONTRIBUTING.md,
Adding a modality): the numbers modality of tests/modalities/fourth/,
registered here by one line, runs end to end in this process, through the
skeleton, the manifest and the quality gate, the reader and the validation
pipeline, with no other change."""

import json

import numpy as np
import pytest

import readback
from pipelines import command_line
from pipelines import outcome
from pipelines import preprocess
from pipelines import validate
from transforms import modalities
from transforms.core import splits as split_lib

RATIOS = [('train', 0.8), ('validation', 0.1), ('test', 0.1)]
BEAM = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
# Rows that cannot be examples: (row, id, what their dead letter says).
BAD_ROWS = [('n900,abc,low', 'n900', "value 'abc' in column 'value' is not "
             'a number'),
            ('n901,inf,high', 'n901', "value 'inf' in column 'value' is not "
             'a finite number'),
            (',3.5,low', '', "no id in column 'id'")]


@pytest.fixture(scope='module')
def numbers():
  """Meanwhile, --modality numbers is the fourth modality (one line)."""
  with pytest.MonkeyPatch.context() as patch:
    patch.setitem(modalities._REGISTRY, 'numbers',  # pylint: disable=protected-access
                  'modalities.fourth.modality')
    yield


@pytest.fixture(scope='module')
def numbers_run(numbers, tmp_path_factory):
  """(good rows {id: (value, label)}, the output, the returned manifest,
  the JSON summary, the validation report) of one run on a CSV file of 80
  good rows and the bad rows above, in the middle of the file."""
  del numbers
  root = tmp_path_factory.mktemp('numbers')
  rng = np.random.default_rng(7)
  values = np.round(rng.normal(50.0, 10.0, 80), 3)
  good = {f'n{i:03d}': (float(v), 'high' if v > 50 else 'low')
          for i, v in enumerate(values)}
  lines = [f'{i},{v},{label}' for i, (v, label) in good.items()]
  lines[40:40] = [row for row, _, _ in BAD_ROWS]
  src = root / 'numbers.csv'
  src.write_text('id,value,label\n' + '\n'.join(lines) + '\n',
                 encoding='utf-8')
  out = root / 'out'
  progress = {}
  manifest = preprocess.run(['--modality', 'numbers', '--input', str(src),
                             '--output', str(out)] + BEAM, progress)
  summary = json.loads(outcome.summary_json(outcome.EXIT_OK, progress,
                                            manifest, None))
  report = validate.run(['--output', str(out)] + BEAM)
  return good, out, manifest, summary, report


def test_the_run_publishes_every_row_as_an_example_or_dead_letter(numbers_run):
  good, out, manifest, summary, _ = numbers_run
  with open(out / 'manifest.json', encoding='utf-8') as f:
    assert json.load(f) == manifest
  assert manifest['modality'] == 'numbers'
  assert manifest['numbers'] == {
      'columns': {'id': 'id', 'value': 'value', 'label': 'label'}}
  totals = manifest['totals']
  assert (totals['inputs'], totals['examples'], totals['records'],
          totals['dead_lettered']) == (83, 80, 80, 3)
  assert manifest['labels'] == ['high', 'low']
  assert summary['status'] == 'published' and summary['published']
  assert (summary['modality'], summary['inputs'], summary['records'],
          summary['dead_lettered']) == ('numbers', 83, 80, 3)
  assert summary['splits'] == {name: s['records'] for name, s in
                               manifest['splits'].items()}
  split_of = {i: split_lib.assign_split(i, RATIOS) for i in good}
  for name, split in manifest['splits'].items():
    rows = [i for i in good if split_of[i] == name]
    bad = [i for _, i, _ in BAD_ROWS if i and
           split_lib.assign_split(i, RATIOS) == name]
    assert split['examples'] == split['records'] == len(rows), name
    assert split['inputs'] == len(rows) + len(bad), name
    assert split['dead_lettered'] == len(bad), name


def test_bad_rows_are_dead_letters_with_their_reason(numbers_run):
  _, out, _, _, _ = numbers_run
  letters = sorted(readback.dead_letters(out), key=lambda d: d['input'])
  assert [(d['input'], d['stage'], d['reason'], d['split'])
          for d in letters] == [
              (f'numbers.csv:{40 + k}', 'parse', reason,
               split_lib.assign_split(i, RATIOS) if i else None)
              for k, (_, i, reason) in enumerate(BAD_ROWS)]


def test_records_hold_the_rows_z_scored_by_the_training_split(numbers_run):
  good, out, manifest, _, _ = numbers_run
  train = np.array([v for i, (v, _) in good.items()
                    if split_lib.assign_split(i, RATIOS) == 'train'],
                   np.float32).astype(np.float64)
  norm = manifest['normalization']
  assert norm['rows_analyzed'] == len(train)
  np.testing.assert_allclose([norm['mean'], norm['std']],
                             [train.mean(), train.std()], rtol=1e-9)
  labels = manifest['labels']
  seen = {}
  for split in manifest['splits']:
    data = readback.read_all(out, split)
    for k, ex_id in enumerate(data['id'].tolist()):
      ex_id = ex_id.decode()
      assert split_lib.assign_split(ex_id, RATIOS) == split, ex_id
      assert ex_id not in seen, ex_id
      seen[ex_id] = (float(data['value'][k]),
                     labels[data['label'][k]],
                     data['label_text'][k].decode())
  assert set(seen) == set(good)
  for ex_id, (value, label) in good.items():
    stored, named, text = seen[ex_id]
    assert named == text == label, ex_id
    assert stored == pytest.approx((value - train.mean()) / train.std(),
                                   abs=1e-5), ex_id


def test_validation_finds_the_dataset_sound(numbers_run):
  _, _, manifest, _, report = numbers_run
  failed = [c for c in report['checks'] if c['status'] == 'fail']
  assert report['verdict'] == 'pass', failed
  assert report['modality'] == 'numbers'
  status = {c['check']: c['status'] for c in report['checks']}
  # The modality's own checks ran: its transform probe and its dataset
  # check, and every split's records parsed.
  assert status['exported transform'] == 'pass'
  assert status['inputs = examples + dead letters'] == 'pass'
  for split, info in manifest['splits'].items():
    assert status[f'{split}: records parse and match the spec'] == 'pass'
    assert report['splits'][split]['records'] == info['records']


def test_help_lists_it_and_its_flags_only_while_registered(numbers, capsys):
  del numbers
  command_line.print_help()
  shown = ' '.join(capsys.readouterr().out.split())
  assert 'Kind of input: image, text, sensor or numbers.' in shown
  assert '--value_column' in shown
  with pytest.MonkeyPatch.context() as patch:
    patch.delitem(modalities._REGISTRY, 'numbers')  # pylint: disable=protected-access
    command_line.print_help()
    shown = ' '.join(capsys.readouterr().out.split())
  assert 'Kind of input: image, text or sensor.' in shown
  assert '--value_column' not in shown
