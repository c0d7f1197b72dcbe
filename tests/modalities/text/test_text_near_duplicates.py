"""Near-duplicate documents through real pipeline runs: a quotations
corpus written as collections are, where some quotations come again with
other punctuation, in capitals, with other spacing, with one word
changed, with an attribution line added, and one under another topic.
Every copy lands in its original's split (none straddles), a corpus
without copies has no group, `off` lets copies straddle and validation
names them, `drop` keeps one document per group, near-duplicates with
different labels follow --label_conflicts, and the portable runner writes
the same dataset."""

import csv
import json
import logging

import numpy as np
import pytest

import readback
from pipelines import preprocess
from pipelines import validate
from transforms.modalities.text import preprocessing
from transforms.modalities.text import signatures

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
TOPICS = ('life', 'love', 'war')
AUTHORS = ('Mark Twain', 'Emily Dickinson', 'Unknown', 'Seneca')


def _vocabulary(rng, n=2500):
  """Made-up words of two to four syllables."""
  syllables = [a + b for a in 'bdfgklmnprstvz' for b in 'aeiou']
  return sorted({''.join(rng.choice(syllables, size=rng.integers(2, 5)))
                 for _ in range(n)})


def _quotation(rng, words) -> str:
  chosen = list(rng.choice(words, size=rng.integers(12, 30)))
  # Punctuation as people write it: a comma or two, a full stop.
  for at in rng.choice(len(chosen) - 1, size=2, replace=False):
    chosen[at] += ','
  return ' '.join(chosen).capitalize() + '.'


def _variants(rng, text, words):
  """(kind, the text written again) of each kind a collection shows."""
  tokens = text.split(' ')
  changed = list(tokens)
  changed[len(tokens) // 2] = str(rng.choice(words))
  return [
      ('punctuation', text.replace(',', '').replace('.', '!')),
      ('capitals', text.upper()),
      ('spacing', '  '.join(tokens[:5]) + '\n' + ' '.join(tokens[5:])),
      ('one word', ' '.join(changed)),
      ('attribution', f'{text}\n\t\t-- {rng.choice(AUTHORS)}'),
  ]


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """'plain': 150 quotations in three files. 'copied': the same, and 30 of
  them again (six of each kind of variant) in a fourth file, one of them
  under another topic. Returns the folders and [(original id, copy id,
  kind)]."""
  rng = np.random.default_rng(7)
  words = _vocabulary(rng)
  quotes = [(_quotation(rng, words), TOPICS[i % 3]) for i in range(150)]
  files = {name: [] for name in ('anthology', 'calendar', 'sayings')}
  where = {}
  for i, (text, topic) in enumerate(quotes):
    name = list(files)[i % 3]
    where[i] = f'{name}.csv:{len(files[name])}'
    files[name].append((text, topic))
  roots = {}
  for kind in ('plain', 'copied'):
    root = tmp_path_factory.mktemp(kind)
    for name, rows in files.items():
      _write(root / f'{name}.csv', rows)
    roots[kind] = root
  pairs, again = [], []
  for k, i in enumerate(range(0, 150, 5)):
    text, topic = quotes[i]
    kind, variant = _variants(rng, text, words)[k % 5]
    if k == 3:  # one word changed, and filed under another topic
      topic = TOPICS[(TOPICS.index(topic) + 1) % 3]
      kind = 'one word, other topic'
    pairs.append((where[i], f'later.csv:{len(again)}', kind))
    again.append((variant, topic))
  _write(roots['copied'] / 'later.csv', again)
  return {**roots, 'pairs': pairs}


def _write(path, rows):
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.writer(f)
    writer.writerow(['text', 'label'])
    writer.writerows(rows)


def _run(src, out, *flags):
  """Runs the pipeline (it raises unless the dataset is published);
  returns the manifest."""
  return preprocess.run(['--modality', 'text', '--input', str(src / '*.csv'),
                         '--output', str(out), '--keep_text', *LOCAL,
                         *flags])


def _near(out):
  manifest = json.loads((out / 'manifest.json').read_text())
  return manifest['contents']['near_duplicates']


def _checks(report):
  return {c['check']: c for c in report['checks']}


@pytest.fixture(scope='module')
def grouped(corpus, tmp_path_factory):
  """A default run (keeping its texts) over the copied corpus, its
  manifest listing every near-duplicate group whole."""
  out = tmp_path_factory.mktemp('grouped') / 'out'
  with readback.near_duplicates_listed_whole():
    _run(corpus['copied'], out)
  return out


@pytest.fixture(scope='module')
def validated(grouped):
  """The passing validation report of `grouped`, listing every
  near-duplicate group whole."""
  with readback.near_duplicates_listed_whole():
    return readback.assert_valid(grouped)


def test_every_copy_lands_in_the_split_of_its_original(corpus, grouped,
                                                      validated):
  splits = readback.splits_of(grouped)
  assert len(splits) == 150 + len(corpus['pairs'])
  for original, copy, kind in corpus['pairs']:
    assert splits[copy] == splits[original], (original, copy, kind)
  near = _near(grouped)
  assert near['mode'] == 'group' and near['similarity'] == 0.5
  # Copies in capitals or other spacing are the same tokens (exact copies,
  # one content); the others are near-duplicates, each group two
  # contents, and nothing else is grouped.
  exact = sum(kind in ('capitals', 'spacing') for _, _, kind in
              corpus['pairs'])
  near_pairs = len(corpus['pairs']) - exact
  assert (near['groups'], near['edges'], near['contents']) == (
      near_pairs, near_pairs, 2 * near_pairs)
  assert near['label_conflicts'] == 1 and near['conflicting_examples'] == 2
  assert near['largest_group'] == 2
  listed = near['examples'][0]
  assert set(listed) >= {'key', 'split', 'ids', 'labels', 'pairs'}
  assert 0.5 <= listed['pairs'][0]['similarity'] <= 1.0
  checks = _checks(validated)
  leak = checks['no near-duplicate documents in two splits (leakage)']
  assert leak['status'] == 'pass', leak
  # Validation compares the stored texts: a copy in capitals is another
  # text there (of the same words), so every pair is a group.
  assert f'{len(corpus["pairs"])} near-duplicate groups' in leak['detail']
  conflict = checks['near-duplicate documents with different labels']
  assert conflict['status'] == 'warn', conflict
  other_topic = next(p for p in corpus['pairs'] if 'other topic' in p[2])
  assert other_topic[1] in conflict['detail']
  assert not list(grouped.glob('**/hold_tmp'))


def test_every_pair_validation_finds_is_grouped_by_the_run(grouped,
                                                          validated):
  """Validation signs the stored texts as the run signed the documents it
  read (the same strings: invalid UTF-8 was replaced before either), so
  each pair it finds is one the run grouped, or one content (a copy in
  capitals or other spacing, which the run keeps as one)."""
  manifest = json.loads((grouped / 'manifest.json').read_text())
  settings = preprocessing.TextConfig(**{
      **manifest['config']['text'],
      'ngrams': tuple(manifest['config']['text']['ngrams'])})
  content = {}
  for split in manifest['splits']:
    records = readback.read_all(grouped, split)
    texts = [t.decode('utf-8') for t in records['text']]
    content.update(zip((i.decode('utf-8') for i in records['id']),
                       preprocessing.content_keys(texts, settings)))
  run_groups, found = readback.assert_near_duplicates_grouped(
      grouped, validated, content.__getitem__)
  # Copies of one content are pairs to validation, not groups of the run.
  assert len(found) > len(run_groups) > 0


def test_a_corpus_without_copies_has_no_group(corpus, tmp_path):
  out = tmp_path / 'out'
  _run(corpus['plain'], out)
  near = _near(out)
  assert (near['groups'], near['members'], near['edges']) == (0, 0, 0)


def test_without_grouping_copies_straddle_and_validation_names_them(
    corpus, tmp_path):
  out = tmp_path / 'out'
  _run(corpus['copied'], out, '--near_duplicates', 'off')
  assert _near(out) == {'mode': 'off', 'similarity': 0.5}
  splits = readback.splits_of(out)
  straddling = [(a, b) for a, b, kind in corpus['pairs']
                if splits[a] != splits[b]]
  assert straddling  # else the fixture proves nothing
  report = validate.run(['--output', str(out)])
  leak = _checks(report)['no near-duplicate documents in two splits '
                         '(leakage)']
  assert leak['status'] == 'fail'
  assert f'{len(straddling)} pairs of near-duplicate documents' in (
      leak['detail'])
  a, b = straddling[0]
  assert (a in leak['detail'] or b in leak['detail']), leak['detail']
  assert 'estimated similarity' in leak['detail']


def test_drop_keeps_one_document_per_group(corpus, tmp_path):
  out = tmp_path / 'out'
  _run(corpus['copied'], out, '--near_duplicates', 'drop')
  dead = readback.dead_letters(out)
  near_dead = [d for d in dead if d['reason'].startswith('near-duplicate of')]
  near = _near(out)
  assert len(near_dead) == near['groups'] == near['dropped'][
      'near_duplicates']
  kept = readback.splits_of(out)
  for original, copy, kind in corpus['pairs']:
    if kind in ('capitals', 'spacing'):
      continue  # exact copies are kept (no --drop_duplicates)
    assert (original in kept) != (copy in kept), (original, copy)
  manifest = json.loads((out / 'manifest.json').read_text())
  assert manifest['totals']['dropped_by_content_rules'] == len(near_dead)
  assert manifest['totals']['bad_fraction'] == 0
  readback.assert_valid(out)


def test_near_duplicates_with_different_labels_follow_label_conflicts(
    corpus, tmp_path, caplog):
  out = tmp_path / 'out'
  with caplog.at_level(logging.WARNING):
    _run(corpus['copied'], out, '--label_conflicts', 'drop')
  original, copy, _ = next(p for p in corpus['pairs'] if 'other topic' in p[2])
  # The run says so, naming them, as it does for one content's labels.
  warned = [r.getMessage() for r in caplog.records
            if 'near-duplicate groups have more than one label' in
            r.getMessage()]
  assert len(warned) == 1 and '--label_conflicts drop' in warned[0]
  assert original in warned[0] and copy in warned[0]
  dead = {d['input']: d['reason'] for d in readback.dead_letters(out)}
  for ex_id in (original, copy):
    assert dead[ex_id].startswith('label conflict: near-duplicate documents '
                                  'are labelled'), dead
  assert _near(out)['dropped']['label_conflicts'] == 2
  readback.assert_valid(out)


def test_the_signature_rule_is_the_one_the_corpus_was_made_for(corpus):
  """Each near copy of the fixture is similar enough by construction, and
  no two originals are (so the assertions above are about the rule)."""
  texts = {}
  for path in corpus['copied'].glob('*.csv'):
    with open(path, newline='', encoding='utf-8') as f:
      for row, (text, _) in enumerate(list(csv.reader(f))[1:]):
        texts[f'{path.name}:{row}'] = text
  ids = list(texts)
  sigs = signatures.signatures([texts[i] for i in ids])
  agree = (sigs[:, None, :] == sigs[None, :, :]).mean(axis=2)
  at = {i: k for k, i in enumerate(ids)}
  for original, copy, _ in corpus['pairs']:
    assert agree[at[original], at[copy]] >= 0.5
  originals = [k for k, i in enumerate(ids) if not i.startswith('later')]
  sub = agree[np.ix_(originals, originals)]
  np.fill_diagonal(sub, 0)
  assert sub.max() < 0.2


@pytest.mark.parametrize('flags, message', [
    (['--near_duplicates', 'maybe'], '--near_duplicates'),
    (['--near_duplicate_similarity', '0.1'],
     '--near_duplicate_similarity must be a number from 0.3 to 1'),
    (['--near_duplicate_similarity', 'high'],
     '--near_duplicate_similarity must be a number from 0.3 to 1'),
])
def test_bad_near_duplicate_flags_are_one_sentence(corpus, tmp_path, flags,
                                                   message):
  with pytest.raises(preprocess.UsageError, match=message):
    _run(corpus['plain'], tmp_path / 'out', *flags)


def test_the_portable_runner_writes_the_same_dataset(corpus, grouped,
                                                     tmp_path):
  out = tmp_path / 'out'
  preprocess.run(
      ['--modality', 'text', '--input', str(corpus['copied'] / '*.csv'),
       '--output', str(out), '--keep_text', '--runner', 'PortableRunner',
       '--job_endpoint', 'embed', '--environment_type', 'LOOPBACK'])
  ours = json.loads((grouped / 'manifest.json').read_text())
  theirs = json.loads((out / 'manifest.json').read_text())
  assert theirs['fingerprint'] == ours['fingerprint']
  assert theirs['contents']['near_duplicates']['groups'] == (
      ours['contents']['near_duplicates']['groups'])
