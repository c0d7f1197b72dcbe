"""A quotations corpus where the same quotation is in several source files,
through real pipeline runs: splits keyed by the normalized text keep every
copy of a quotation in one split, label conflicts and duplicates are
counted, dropped on request, and validation passes."""

import csv

import numpy as np
import pytest

import readback
from pipelines import preprocess
from pipelines import reader
from pipelines import validate

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
WORDS = ('light dark river stone wind fire heart road night dawn silence '
         'courage patience friend enemy truth doubt hope fear time').split()
TOPICS = ('life', 'love', 'war')


def _quotation(rng) -> str:
  words = rng.choice(WORDS, size=rng.integers(5, 12))
  return ' '.join(words).capitalize() + '.'


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """Three source files of quotations; 12 quotations are in more than one
  file, written in other case or spacing ("Hope fear." and "HOPE  FEAR."),
  and one under another topic. (Punctuation stays part of a token unless
  --strip_punctuation, so "fear." and "fear!" are different contents.)"""
  root = tmp_path_factory.mktemp('quotes')
  rng = np.random.default_rng(3)
  quotes = [(_quotation(rng), TOPICS[i % 3]) for i in range(90)]
  files = {name: [] for name in ('anthology', 'calendar', 'sayings')}
  for i, (text, topic) in enumerate(quotes):
    files[list(files)[i % 3]].append((text, topic))
  repeated = quotes[:12]
  for i, (text, topic) in enumerate(repeated):
    variant = text.upper() if i % 2 else text.lower().replace(' ', '  ')
    files['calendar' if i % 3 != 1 else 'sayings'].append((variant, topic))
  # The same words under another topic: a label conflict.
  files['sayings'].append((quotes[20][0], 'war' if quotes[20][1] != 'war'
                           else 'life'))
  for name, rows in files.items():
    with open(root / f'{name}.csv', 'w', newline='', encoding='utf-8') as f:
      writer = csv.writer(f)
      writer.writerow(['text', 'label'])
      writer.writerows(rows)
  groups = {}
  for name, rows in files.items():
    for row, (text, _) in enumerate(rows):
      key = ' '.join(text.lower().split())
      groups.setdefault(key, []).append(f'{name}.csv:{row}')
  return root, [ids for ids in groups.values() if len(ids) > 1]


def _run(src, out, *flags):
  code = preprocess.main(['--modality', 'text', '--input', str(src / '*.csv'),
                          '--output', str(out), '--vocab_size', '50',
                          '--max_tokens', '16', *flags, *LOCAL])
  assert code == 0


def _splits_of(out):
  manifest = reader.load_manifest(str(out))
  where = {}
  for split in manifest['splits']:
    for ex_id in readback.read_all(out, split).get('id', []):
      where[ex_id.decode()] = split
  return manifest, where


@pytest.fixture(scope='module')
def default_run(corpus, tmp_path_factory):
  src, groups = corpus
  out = tmp_path_factory.mktemp('default') / 'ds'
  _run(src, out)
  return out, groups


def test_copies_of_a_quotation_are_in_one_split(default_run):
  out, groups = default_run
  assert len(groups) == 13
  manifest, where = _splits_of(out)
  assert manifest['contents']['split_key'] == 'content'
  for ids in groups:
    assert len({where[i] for i in ids}) == 1, ids
  readback.assert_valid(out)


def test_conflicts_and_duplicates_are_counted(default_run):
  out, _ = default_run
  contents = reader.load_manifest(str(out))['contents']
  assert contents['conflicting_contents'] == 1
  assert contents['conflicting_examples'] == 2
  [conflict] = contents['conflict_examples']
  assert len(conflict['ids']) == 2 and len(set(conflict['labels'])) == 2
  assert sum(contents['duplicates'].values()) == 12


def test_drop_duplicates_keeps_one_copy(corpus, tmp_path):
  src, groups = corpus
  out = tmp_path / 'ds'
  _run(src, out, '--drop_duplicates', '--label_conflicts', 'drop')
  dead = readback.dead_letters(out)
  reasons = sorted(d['reason'].split(' of ')[0].split(':')[0] for d in dead)
  assert reasons == ['duplicate'] * 12 + ['label conflict'] * 2
  manifest, where = _splits_of(out)
  assert manifest['totals']['dropped_by_content_rules'] == 14
  assert manifest['totals']['bad_fraction'] == 0
  for ids in groups:
    assert len([i for i in ids if i in where]) <= 1, ids
  report = readback.assert_valid(out)
  dup = next(c for c in report['checks']
             if c['check'] == 'exact duplicates inside a split')
  assert dup['status'] == 'pass', dup


def test_split_key_id_leaks_and_validation_says_so(corpus, tmp_path):
  src, _ = corpus
  out = tmp_path / 'ds'
  _run(src, out, '--split_key', 'id')
  report = validate.run(['--output', str(out)])
  leak = next(c for c in report['checks'] if 'leakage' in c['check'])
  assert leak['status'] == 'fail', leak
