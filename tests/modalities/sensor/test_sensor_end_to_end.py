"""End-to-end runs of the sensor pipeline on small generated tables.

Real Beam pipelines on the DirectRunner with a real tf.Transform analysis;
every output is read back with the reader and checked by the validation
pipeline, and the windows are compared with ones computed in memory.
"""


import numpy as np
import pandas as pd
import pytest

import readback
import sensorgen
from pipelines import outcome
from pipelines import preprocess

BASE = ['--modality', 'sensor', '--timestamp_column', 'time',
        '--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
WINDOWS = ['--entity_column', 'device', '--window_length', '20',
           '--window_stride', '10', '--splits',
           'train=0.6,validation=0.2,test=0.2']


def _run(src, out, *extra):
  return preprocess.run(['--input', str(src), '--output', str(out)] + BASE +
                        list(extra))


@pytest.fixture(scope='module')
def windows_run(tmp_path_factory):
  """CSV with bad rows of every kind, windows of 20 rows, stride 10."""
  root = tmp_path_factory.mktemp('sensor_csv')
  df = sensorgen.frame()
  src = root / 'log.csv'
  df.to_csv(src, index=False)
  good_rows = len(df)
  with open(src, 'a', encoding='utf-8') as f:
    f.write('yesterday,dev00,1,2,3,run\n')  # bad timestamp
    f.write('2026-01-01T00:00:01Z,dev01,abc,2,3,run\n')  # bad number
    f.write('2026-01-01T00:00:02Z,dev02,1,2,3,\n')  # missing label
    f.write('2026-01-01T00:00:03Z,dev03,,2,3,sit\n')  # missing value
  out = root / 'out'
  manifest = _run(src, out, *WINDOWS, '--max_bad_fraction', '0.1')
  return df, good_rows, out, manifest


def test_windows_counts_and_dead_letters(windows_run):
  df, good_rows, out, manifest = windows_run
  totals = manifest['totals']
  assert totals['inputs'] == good_rows + 4
  assert totals['dead_lettered'] == 4
  reasons = sorted(d['reason'] for d in readback.dead_letters(out))
  assert len(reasons) == 4
  assert any('timestamp' in r and 'yesterday' in r for r in reasons)
  assert any("'ch0'" in r and 'abc' in r for r in reasons)
  assert any('label' in r for r in reasons)
  assert any(r.startswith('missing value') and "'ch0'" in r for r in reasons)
  # 12 devices x 120 rows -> 11 windows each.
  sensor = manifest['sensor']
  assert sensor['windows'] == {'expected': 132, 'formed': 132,
                               'crossing_time_cutoff': 0, 'lost_to_gaps': 0,
                               'too_long': 0}
  # One row a second: no gap, and no time repeated.
  total = sensor['time']['total']
  assert (total['gaps'], total['segments'], total['duplicates_dropped'],
          total['conflicting_rows']) == (0, 12, 0, 0)
  assert {e['median_interval_ns'] for e in
          sensor['time']['entities'].values()} == {10**9}
  assert totals['examples'] == totals['records'] == 132
  assert sensor['value_shape'] == [20, 3]
  assert sensor['channels'] == ['ch0', 'ch1', 'ch2']
  for split in manifest['splits'].values():
    assert split['inputs'] == (split['rows_used'] + split['rows_dropped'] +
                               split['dead_lettered'])
    assert split['duplicates_dropped'] == 0
    assert split['rows_windowed'] == split['rows_used']
  readback.assert_valid(out)


def test_windows_match_an_in_memory_computation(windows_run):
  df, _, out, manifest = windows_run
  per = manifest['normalization']['per_channel']
  channels = manifest['sensor']['channels']
  mean = np.array([per[c]['mean'] for c in channels])
  std = np.array([per[c]['std'] for c in channels])
  # The statistics are those of the training devices' rows.
  train_devices = set()
  for split in manifest['splits']:
    data = readback.read_all(out, split)
    devices = {e.decode() for e in data['entity']}
    if split == 'train':
      train_devices = devices
    for other in manifest['splits']:
      if other != split:
        assert not devices & {e.decode() for e in readback.read_all(
            out, other)['entity']}, 'an entity is in two splits'
  train_rows = df[df['device'].isin(train_devices)]
  np.testing.assert_allclose(mean, train_rows[channels].mean(), rtol=1e-9)
  np.testing.assert_allclose(std, train_rows[channels].std(ddof=0),
                             rtol=1e-6)
  expected = sensorgen.reference_windows(df, 20, 10, channels, mean, std)
  # Values enter the transform as float32 (tf.Example's float type): a
  # channel around 300 with a std of 0.5 is exact to about 2 float32 steps
  # of 300, divided by 0.5.
  tol = 1e-6 + 2 * np.finfo(np.float32).eps * np.abs(
      df[channels].to_numpy()).max(axis=0) / std
  seen = 0
  for split in manifest['splits']:
    data = readback.read_all(out, split)
    assert data['values'].shape[1:] == (20, 3)
    for i, ex_id in enumerate(data['id']):
      values, label = expected[ex_id.decode()]
      assert np.all(np.abs(data['values'][i] - values) <= tol), ex_id
      assert data['label_text'][i].decode() == label
      assert data['end_time'][i] - data['start_time'][i] == 19 * 10**9
      seen += 1
  assert seen == len(expected) == 132


def test_shards_are_shuffled(windows_run):
  _, _, out, _ = windows_run
  data = readback.read_all(out, 'test')
  ids = [i.decode() for i in data['id']]
  assert ids != sorted(ids)


def test_chunking_and_runner_do_not_change_the_output(tmp_path):
  # Devices of 2500 rows: 3 chunks each with --chunk_rows 1000, so windows
  # cross chunk boundaries and are assembled from fragments.
  big = sensorgen.frame(devices=3, rows_per_device=2500, seed=3)
  src = tmp_path / 'big.csv'
  big.to_csv(src, index=False)
  runs = []
  for extra in (['--chunk_rows', '1000'], ['--chunk_rows', '100000']):
    target = tmp_path / f'out{len(runs)}'
    args = ['--input', str(src), '--output', str(target), '--modality',
            'sensor', '--timestamp_column', 'time'] + WINDOWS + extra + (
                ['--direct_running_mode', 'multi_threading',
                 '--direct_num_workers', '2'] if runs else
                ['--direct_running_mode', 'in_memory'])
    runs.append(preprocess.run(args))
  assert runs[0]['fingerprint'] == runs[1]['fingerprint']
  assert runs[0]['sensor']['windows']['formed'] == 3 * 249


def test_time_ordered_files_give_the_same_windows(tmp_path):
  # The same rows three ways: shuffled (every entity grouped by chunks),
  # in time order (windowed while reading), and in two time-ordered files
  # with one device in both (that device grouped, the others streamed).
  df = sensorgen.frame(devices=6, rows_per_device=250, seed=5)
  ordered = df.sort_values('time', kind='stable')
  layouts = {'shuffled': {'log.csv': df}, 'ordered': {'log.csv': ordered}}
  first = ordered[ordered['device'] <= 'dev02']
  second = ordered[ordered['device'] > 'dev02']
  moved = second['device'] == 'dev05'
  layouts['two_files'] = {
      'a.csv': pd.concat([first, second[moved].iloc[:100]]).sort_values(
          'time', kind='stable'),
      'b.csv': pd.concat([second[~moved], second[moved].iloc[100:]])}
  results = {}
  for name, files in layouts.items():
    src = tmp_path / name
    src.mkdir()
    for file_name, part in files.items():
      part.to_csv(src / file_name, index=False)
    results[name] = _run(src, tmp_path / f'out_{name}', *WINDOWS,
                         '--chunk_rows', '1000')
  assert results['shuffled']['sensor']['entities_in_time_order'] == 0
  assert results['ordered']['sensor']['entities_in_time_order'] == 6
  assert results['two_files']['sensor']['entities_in_time_order'] == 5
  assert results['ordered']['totals']['records'] == 6 * 24
  # The same windows (the statistics, summed in another order, may differ
  # in the last float32 bits, so values are compared with a tolerance).
  windows = {}
  for name in layouts:
    out = tmp_path / f'out_{name}'
    got = {}
    for split in results[name]['splits']:
      data = readback.read_all(out, split)
      for i, ex_id in enumerate(data.get('id', [])):
        got[ex_id.decode()] = (split, data['label_text'][i],
                               data['start_time'][i], data['end_time'][i],
                               data['values'][i])
    windows[name] = got
  reference = windows['shuffled']
  for name in ('ordered', 'two_files'):
    assert set(windows[name]) == set(reference)
    for ex_id, (split, label, start, end, values) in windows[name].items():
      assert (split, label, start, end) == reference[ex_id][:4]
      np.testing.assert_allclose(values, reference[ex_id][4], atol=1e-4)
  readback.assert_valid(tmp_path / 'out_two_files')


def test_rows_from_parquet_with_imputation_minmax_and_buckets(tmp_path):
  df = sensorgen.frame(devices=4, rows_per_device=100, seed=1)
  df['time'] = (pd.to_datetime(df['time'], utc=True) - pd.Timestamp(
      0, tz='UTC')) // pd.Timedelta(milliseconds=1)
  df.loc[5, 'ch1'] = np.nan
  df.loc[6, 'ch2'] = np.inf
  src = tmp_path / 'rows.parquet'
  df.to_parquet(src)
  out = tmp_path / 'out'
  manifest = _run(src, out, '--timestamp_unit', 'ms', '--missing', 'impute',
                  '--normalization', 'minmax', '--bucketize', '4',
                  '--entity_column', 'device', '--split_by', 'hash')
  assert manifest['sensor']['mode'] == 'row'
  assert manifest['totals']['records'] == 400
  assert manifest['totals']['dead_lettered'] == 0
  assert manifest['feature_spec']['values']['shape'] == [3]
  assert manifest['feature_spec']['buckets']['shape'] == [3]
  readback.assert_valid(out)
  data = readback.read_all(out, 'train')
  assert np.isfinite(data['values']).all()
  assert data['buckets'].min() >= 0 and data['buckets'].max() <= 3
  # min-max over the train split: train values lie in [0, 1].
  assert data['values'].min() >= -1e-6 and data['values'].max() <= 1 + 1e-6
  # Both damaged rows became examples with an imputed (finite) value.
  ids = {i.decode() for s in manifest['splits'] for i in readback.read_all(
      out, s)['id']}
  assert {'rows.parquet:5', 'rows.parquet:6'} <= ids
  assert data['time'].min() >= sensorgen.START


def test_time_split_without_entity_from_jsonl(tmp_path):
  df = sensorgen.frame(devices=1, rows_per_device=300, entity=False)
  df.loc[10, 'ch0'] = np.nan
  src = tmp_path / 'series.jsonl'
  df.to_json(src, orient='records', lines=True)
  out = tmp_path / 'out'
  cut = pd.Timestamp(sensorgen.START, tz='UTC') + pd.Timedelta(seconds=200)
  manifest = _run(src, out, '--window_length', '30', '--window_stride',
                  '15', '--time_cutoffs', cut.isoformat(), '--missing',
                  'drop')
  assert list(manifest['splits']) == ['train', 'test']
  w = manifest['sensor']['windows']
  # 299 rows after dropping one: 18 windows. About 200 rows lie before
  # the cut-off, so the windows starting at rows 180 and 195 cross it.
  assert w['expected'] == w['formed'] == 18
  assert w['crossing_time_cutoff'] == 2
  assert manifest['totals']['examples'] == 16
  assert manifest['sensor']['rows_dropped'] == 1
  assert manifest['totals']['dead_lettered'] == 0
  readback.assert_valid(out)
  train = readback.read_all(out, 'train')
  test = readback.read_all(out, 'test')
  assert train['end_time'].max() < cut.value <= test['start_time'].min()


def test_oversampling_windows(tmp_path):
  df = sensorgen.frame(devices=12, rows_per_device=120)
  # Make 'run' rare: relabel most of it.
  df.loc[df['label'] == 'run', 'label'] = np.where(
      np.arange((df['label'] == 'run').sum()) % 4 == 0, 'run', 'walk')
  src = tmp_path / 'log.csv'
  df.to_csv(src, index=False)
  out = tmp_path / 'out'
  manifest = _run(src, out, *WINDOWS, '--rebalance', 'oversample')
  train = manifest['splits']['train']
  before, after = (train['class_counts_before_rebalance'],
                   train['class_counts'])
  assert sum(after.values()) > sum(before.values())
  assert max(after.values()) - min(after.values()) < max(
      before.values()) - min(before.values())
  assert manifest['splits']['test']['class_counts'] == manifest['splits'][
      'test']['class_counts_before_rebalance']
  readback.assert_valid(out)


@pytest.mark.parametrize('extra,expected', [
    (['--label_column', 'activity'], "no column 'activity'|'activity'"),
    (['--channels', 'ch0,speed'], "'speed'"),
    (['--entity_column', 'devices'], "'devices'"),
    (['--channels', 'label'], 'label'),
])
def test_bad_columns_stop_with_one_sentence(tmp_path, capsys, extra,
                                            expected):
  src = tmp_path / 'log.csv'
  sensorgen.frame(devices=2, rows_per_device=10).to_csv(src, index=False)
  out = tmp_path / 'out'
  code = preprocess.main(['--input', str(src), '--output', str(out)] + BASE
                         + extra)
  err = capsys.readouterr().err.strip()
  assert code == outcome.EXIT_USAGE
  assert err.count('\n') == 0 and 'Traceback' not in err, err
  import re
  assert re.search(expected, err), err
  assert not out.exists()


def test_no_numeric_channels_and_missing_input(tmp_path, capsys):
  src = tmp_path / 'text.csv'
  src.write_text('time,device,label,note\n2026-01-01,d,a,x\n')
  code = preprocess.main(['--input', str(src), '--output',
                          str(tmp_path / 'o')] + BASE)
  err = capsys.readouterr().err.strip()
  assert code == outcome.EXIT_USAGE and 'numeric' in err, err
  code = preprocess.main(['--input', str(tmp_path / 'nothing.csv'),
                          '--output', str(tmp_path / 'o')] + BASE)
  err = capsys.readouterr().err.strip()
  assert code == outcome.EXIT_USAGE and 'does not exist' in err, err


def test_window_longer_than_every_entity(tmp_path, capsys):
  src = tmp_path / 'log.csv'
  sensorgen.frame(devices=4, rows_per_device=30).to_csv(src, index=False)
  out = tmp_path / 'out'
  code = preprocess.main(['--input', str(src), '--output', str(out)] + BASE
                         + ['--entity_column', 'device', '--window_length',
                            '50'])
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert code == outcome.EXIT_DATA_QUALITY
  assert 'no entity has the 50 rows --window_length asks for' in err
  assert 'the longest has 30' in err
  assert not (out / 'manifest.json').exists()


def test_weights_majority_labels_from_tsv(tmp_path):
  df = sensorgen.frame(devices=12, rows_per_device=120, seed=7)
  src = tmp_path / 'log.tsv'
  df.to_csv(src, sep='\t', index=False)
  out = tmp_path / 'out'
  manifest = _run(src, out, *WINDOWS, '--window_label', 'majority',
                  '--rebalance', 'weight')
  assert manifest['feature_spec']['weight'] == {'dtype': 'float32',
                                                'shape': []}
  readback.assert_valid(out)
  train = readback.read_all(out, 'train')
  counts = manifest['splits']['train']['class_counts']
  total = sum(counts.values())
  # weight = examples / (classes x examples of the class), per class.
  for label, weight in zip(train['label_text'], train['weight']):
    expected = total / (len(counts) * counts[label.decode()])
    assert weight == pytest.approx(expected, rel=1e-5)
  # Labels come in bouts of 20 rows and windows hold 20 rows starting at
  # multiples of 10: half the windows sit on one bout, the others on two
  # equal halves, where the majority tie goes to the first name in order.
  per = {'run': 0, 'sit': 1, 'walk': 2}
  for ex_id, label in zip(train['id'], train['label_text']):
    start = int(ex_id.decode().split('#')[1])
    device = int(ex_id.decode().split('#')[0][3:])
    bouts = {sensorgen.LABELS[(r // 20 + device) % 3]
             for r in (start, start + 19)}
    assert label.decode() == min(bouts, key=per.get)
  test = manifest['splits']['test']
  assert test['class_counts'] == test['class_counts_before_rebalance']


@pytest.mark.parametrize('normalization', ['zscore', 'none'])
def test_a_channel_with_no_value_is_not_published_as_nan(tmp_path, capsys,
                                                         normalization):
  # Daily weather rows whose snow column was never filled in.
  days = pd.date_range('2025-01-01', periods=240, freq='D')
  rng = np.random.default_rng(3)
  df = pd.DataFrame({
      'time': days.strftime('%Y-%m-%d'), 'station': ['oslo', 'bergen'] * 120,
      'precipitation': rng.gamma(1.0, 2.0, 240).round(1),
      'snow': [np.nan] * 240,
      'label': np.where(rng.random(240) > 0.5, 'rain', 'dry')})
  src = tmp_path / 'weather.csv'
  df.to_csv(src, index=False)
  out = tmp_path / 'out'
  code = preprocess.main(['--input', str(src), '--output', str(out)] + BASE
                         + ['--entity_column', 'station', '--channels',
                            'precipitation,snow', '--missing', 'impute',
                            '--normalization', normalization])
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert code == outcome.EXIT_DATA_QUALITY, err
  assert ('the channel snow has no value in the training split (every row '
          'is empty or NaN), so there is nothing to impute or normalize '
          'with') in err
  assert not (out / 'manifest.json').exists()
