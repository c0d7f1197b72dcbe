"""The validation pipeline's dataset-level checks: leakage and duplicates by
content hash, feature and class drift against the training split with
thresholds, and shard health."""

import json
import math
import re
import shutil

import pytest
from tensorflow.core.example import example_pb2

from pipelines import preprocess
from pipelines import validate
from transforms.validation import dataset_checks

TEXT = ['--modality', 'text', '--direct_running_mode', 'in_memory',
        '--direct_num_workers', '1']


def _example(**features):
  ex = example_pb2.Example()
  for key, value in features.items():
    if isinstance(value, bytes):
      ex.features.feature[key].bytes_list.value.append(value)
    else:
      ex.features.feature[key].int64_list.value.extend(value)
  return ex.features.feature


def test_content_hash_ignores_identity_and_sees_content():
  a = dataset_checks.record_content_hash(
      _example(image=b'pixels', id=b'a', label=[0], label_text=b'cat'))
  b = dataset_checks.record_content_hash(
      _example(image=b'pixels', id=b'b', label=[1], label_text=b'dog'))
  c = dataset_checks.record_content_hash(
      _example(image=b'pixelz', id=b'a', label=[0], label_text=b'cat'))
  assert a == b != c
  assert len(a) == 32


def test_content_findings_leaks_and_duplicates():
  # Members as (split, id, exact): no labels, no observations.
  findings = dataset_checks.content_findings([
      ('h3', [('validation', 'f', True), ('validation', 'g', True),
              ('test', 'h', True)]),
      ('h1', [('train', 'a', True), ('test', 'b', True)]),
      ('h2', [('train', 'c', True), ('train', 'd', True),
              ('train', 'e', True)]),
      # Equal OOV-laden token ids in two splits: maybe different texts.
      ('h4', [('train', 'i', False), ('test', 'j', False),
              ('test', 'k', False)]),
  ])
  assert findings['leaked_contents'] == 2
  assert findings['leaked_records'] == 5
  assert findings['leaks'][0] == {'content': 'h1',
                                  'ids': {'test': ['b'], 'train': ['a']}}
  assert [x['content'] for x in findings['leaks']] == ['h1', 'h3']
  assert findings['possible_leaks'] == 1
  assert findings['possible_leak_examples'][0]['ids'] == {
      'test': ['j', 'k'], 'train': ['i']}
  assert findings['duplicates'] == {'train': 2, 'validation': 1}
  assert findings['duplicate_examples']['train'] == [['c', 'd', 'e']]


def test_feature_and_class_drift():
  train = dataset_checks.summarize_stats(
      {'x': [4, 0, 0, 4, 8.0, 24.0]})  # mean 2, std 1.41
  other = dataset_checks.summarize_stats(
      {'x': [2, 0, 4, 4, 8.0, 32.0]})  # mean 4
  drift = dataset_checks.feature_drift(train, other)
  assert drift['x'] == pytest.approx(2 / math.sqrt(2))
  constant = dataset_checks.summarize_stats({'x': [3, 0, 1, 1, 3.0, 3.0]})
  assert dataset_checks.feature_drift(constant, constant) == {'x': 0.0}
  assert math.isinf(dataset_checks.feature_drift(constant, other)['x'])
  assert dataset_checks.class_drift({'a': 50, 'b': 50}, {'a': 5, 'b': 5}) == 0.0
  assert dataset_checks.class_drift({'a': 50, 'b': 50},
                                    {'a': 10}) == pytest.approx(0.5)


def _shard(name, records, size, counts, largest=100):
  return {'file': name, 'records': records, 'bytes': size,
          'class_counts': counts, 'largest_record': largest}


def test_shard_health():
  split = {'a': 500, 'b': 500}
  warnings, failures = dataset_checks.shard_health([
      _shard('s0', 100, 1000, {'a': 50, 'b': 50}),
      _shard('s1', 100, 1100, {'a': 45, 'b': 55}),
      _shard('s2', 0, 0, {}),
      _shard('s3', 400, 4000, {'a': 400}),          # 4x the median, 1 class
      _shard('s4', 2, 20, {'b': 2}, largest=5000),  # 1 class by chance
  ], split, record_warn_bytes=1000)
  text = '\n'.join(warnings)
  assert 's2 is empty' in text
  assert 's3 holds 4000 bytes' in text
  assert "s3 holds only class 'a' (400 records)" in text
  assert 's4 holds only' not in text  # 2 records of one class: likely
  assert 's4 has a record of 5000 bytes, over the warning size of 1000' in (
      text)
  assert 's4 holds 20 bytes' in text
  assert failures == []
  _, failures = dataset_checks.shard_health(
      [_shard('huge', 1, 2**31, {'a': 1}, largest=2**31)], split, 1000)
  assert failures == ['huge has a record of 2147483648 bytes, past '
                      "protobuf's 2 GiB limit: no reader can parse it"]


def _text_dataset(root, lines, *flags):
  """Preprocesses the CSV `lines` into root/out; returns that folder."""
  (root / 'docs.csv').write_text('\n'.join(lines) + '\n')
  out = root / 'out'
  preprocess.run(['--input', str(root / 'docs.csv'), '--output', str(out)] +
                 TEXT + list(flags))
  return out


@pytest.fixture(scope='module')
def leaky(tmp_path_factory):
  """A text dataset whose input repeats 12 texts 6 times each, so the
  same content lands in several splits (split by row, --split_key id: by
  content every copy would be in one split), and 3 texts twice with two
  labels."""
  root = tmp_path_factory.mktemp('leaky')
  lines = ['text,label']
  for i in range(150):
    lines.append(f'"unique text {i} word{i % 7} word{i % 11}",'
                 f'{("a", "b")[i % 2]}')
  for copy in range(6):
    for i in range(12):
      lines.append(f'"repeated text number {i} again",{("a", "b")[i % 2]}')
  for i in range(3):
    lines += [f'"labelled twice {i}",a', f'"labelled twice {i}",b']
  return _text_dataset(root, lines, '--split_key', 'id')


def _report(out):
  return json.loads((out / 'validation_report.json').read_text())


def test_leakage_fails_with_the_ids_and_duplicates_are_counted(leaky,
                                                               capsys):
  assert validate.main(['--output', str(leaky)]) == validate.EXIT_UNSOUND
  report = _report(leaky)
  checks = {c['check']: c for c in report['checks']}
  leak = checks['no example content in two splits (leakage)']
  assert leak['status'] == 'fail'
  content = report['content']
  assert 1 <= content['leaked_contents'] <= 15
  some = content['leaks'][0]['ids']
  assert len(some) >= 2  # one content, ids in two or more splits
  assert all(re.fullmatch(r'docs\.csv:\d+', i) for ids in some.values()
             for i in ids)
  listed = {i for ids in some.values() for i in ids}
  assert any(i in leak['detail'] for i in listed)
  # 72 repeated rows, 12 contents: every copy beyond the first in a split
  # is a duplicate there.
  dups = content['duplicates']
  assert sum(dups.values()) >= 72 - 12 * 3
  assert checks['exact duplicates inside a split']['status'] == 'warn'
  out = capsys.readouterr().out
  assert 'FAILED no example content in two splits' in out


def test_label_conflicts_warn_with_ids_and_labels(leaky):
  report = _report(leaky)
  content = report['content']
  # The 3 texts labelled twice; the repeated texts keep their label.
  assert content['label_conflicts'] == 3
  assert content['label_conflict_records'] == 6
  listed = content['label_conflict_examples']
  assert len(listed) == 3
  for found in listed:
    assert set(found['labels']) == {'a', 'b'}
    (a,), (b,) = found['labels']['a'], found['labels']['b']
    assert int(b.split(':')[1]) == int(a.split(':')[1]) + 1  # next line
  check = {c['check']: c for c in report['checks']}[
      'same content with different labels (label conflicts)']
  assert check['status'] == 'warn'
  assert check['detail'].startswith(
      '3 examples (6 records with the same content) have different labels, '
      'e.g. a docs.csv:')
  first = listed[0]['labels']
  assert (f'a {first["a"][0]} vs b {first["b"][0]}' in check['detail'])


@pytest.fixture(scope='module')
def clean(tmp_path_factory):
  root = tmp_path_factory.mktemp('clean')
  lines = ['text,label'] + [
      f'"word{i % 7} word{i % 11} more{i % 3}{" extra" * (i % 5)}",'
      f'{("a", "b")[i % 2]}' for i in range(300)]
  return _text_dataset(root, lines)


def test_a_clean_dataset_passes_with_statistics(clean):
  assert validate.main(['--output', str(clean)]) == validate.EXIT_SOUND
  report = _report(clean)
  assert report['verdict'] == 'pass'
  assert report['content']['leaked_contents'] == 0
  train = report['splits']['train']
  stats = train['statistics']
  assert stats['num_tokens']['count'] == train['records']
  assert stats['num_tokens']['min'] == 3 and stats['num_tokens']['max'] == 7
  assert 0 <= stats['oov_share']['mean'] <= 1
  hist = train['histograms']['num_tokens']
  assert sum(hist) == train['records']
  assert 'num_tokens' in report['splits']['test']['feature_drift']
  assert 0 <= report['splits']['test']['class_drift'] <= 1


def test_drift_thresholds_warn_or_fail_by_option(clean):
  args = ['--output', str(clean)]
  assert validate.main(args + ['--feature_drift_warn', '0']) == 0
  report = _report(clean)
  warned = [c['check'] for c in report['checks'] if c['status'] == 'warn']
  assert 'test: feature drift from train' in warned
  assert report['warnings'] >= 1 and report['verdict'] == 'pass'
  assert validate.main(args + ['--feature_drift_warn', '0',
                               '--strict']) == validate.EXIT_UNSOUND
  assert validate.main(args + ['--class_drift_fail', '0']) == (
      validate.EXIT_UNSOUND)
  report = _report(clean)
  failed = [c['check'] for c in report['checks'] if c['status'] == 'fail']
  assert 'test: class drift from train' in failed or (
      report['splits']['test']['class_drift'] == 0)


def test_oversized_records_warn_naming_the_shard(clean):
  assert validate.main(['--output', str(clean), '--record_warn_mib',
                        '0.0001']) == validate.EXIT_SOUND
  report = _report(clean)
  health = [c for c in report['checks'] if c['check'] == 'train: shard health']
  assert health[0]['status'] == 'warn'
  assert 'text-train.tfrecord-00000-of-' in health[0]['detail']
  assert 'over the warning size of 104 bytes' in health[0]['detail']


@pytest.mark.parametrize('flag, value', [
    ('--feature_drift_warn', 'high'), ('--class_drift_fail', '-1'),
    ('--record_warn_mib', 'none')])
def test_bad_threshold_is_a_bad_invocation(clean, capsys, flag, value):
  assert validate.main(['--output', str(clean), flag, value]) == (
      validate.EXIT_USAGE)
  assert f'{flag} must be a number' in capsys.readouterr().err


@pytest.fixture(scope='module')
def with_dead_letters(tmp_path_factory):
  """A text dataset with 3 dead letters (empty texts)."""
  root = tmp_path_factory.mktemp('dead')
  lines = ['text,label'] + [
      f'"word{i % 7} word{i % 11} n{i}",{("a", "b")[i % 2]}'
      for i in range(200)] + [',a'] * 3
  return _text_dataset(root, lines)


@pytest.mark.parametrize('damage', ['none', 'emptied', 'deleted', 'line'])
def test_dead_letter_files_are_checked_against_the_manifest(
    with_dead_letters, tmp_path, damage):
  out = tmp_path / 'out'
  shutil.copytree(with_dead_letters, out)
  manifest = json.loads((out / 'manifest.json').read_text())
  [name] = manifest['dead_letter']['files']
  assert manifest['dead_letter']['count'] == 3
  assert set(manifest['dead_letter']['sha256']) == {name}
  path = out / name
  if damage == 'emptied':
    path.write_text('')
  elif damage == 'deleted':
    path.unlink()
  elif damage == 'line':  # one dead letter removed by hand
    path.write_text(''.join(path.read_text().splitlines(True)[1:]))
  code = validate.main(['--output', str(out)])
  check = {c['check']: c for c in _report(out)['checks']}[
      'dead-letter files complete and unchanged']
  if damage == 'none':
    assert code == validate.EXIT_SOUND and check['status'] == 'pass'
    assert check['detail'].startswith('3 dead letters in 1 file(s)')
    return
  assert code == validate.EXIT_UNSOUND and check['status'] == 'fail'
  expected = {'emptied': f'{name} was changed',
              'deleted': f'{name} is missing',
              'line': f'{name} was changed'}[damage]
  assert expected in check['detail']
  if damage != 'deleted':
    held = 0 if damage == 'emptied' else 2
    assert (f'the files hold {held} dead letters, the manifest counts 3'
            in check['detail'])
