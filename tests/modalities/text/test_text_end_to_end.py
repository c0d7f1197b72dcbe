"""End-to-end runs of the text pipeline on small generated documents.

Real Beam pipelines on the DirectRunner with a real tf.Transform
vocabulary; every output is read back with the reader and checked by the
validation pipeline.
"""

import json
import re

import numpy as np
import pytest

import readback
from pipelines import outcome
from pipelines import preprocess
from pipelines import reader

BASE = ['--modality', 'text', '--direct_running_mode', 'in_memory',
        '--direct_num_workers', '1', '--max_bad_fraction', '0.2']
WORDS = ('alpha beta gamma delta epsilon zeta eta theta iota kappa lambda '
         'mu nu xi omicron pi rho sigma tau upsilon').split()


def _docs(n, seed=0):
  """n documents of 5-30 words, three classes with different word tastes."""
  rng = np.random.default_rng(seed)
  docs = []
  for i in range(n):
    label = ('pos', 'neg', 'neutral')[i % 3]
    words = rng.choice(WORDS[:12] if label == 'pos' else WORDS[6:],
                       size=rng.integers(5, 30))
    docs.append((' '.join(words), label))
  return docs


def _csv_quote(text):
  return '"' + text.replace('"', '""') + '"'


def _run(src, out, *extra):
  return preprocess.run(['--input', str(src), '--output', str(out)] + BASE +
                        list(extra))


@pytest.fixture(scope='module')
def csv_run(tmp_path_factory):
  """A CSV with a BOM, quoted newlines, empty lines and bad rows."""
  root = tmp_path_factory.mktemp('text_csv')
  docs = _docs(600)
  lines = ['text,label']
  for i, (text, label) in enumerate(docs):
    if i == 7:
      text = 'first line\nsecond, "quoted" line ' + text
    lines.append(f'{_csv_quote(text)},{label}')
    if i == 20:
      lines.append('')  # empty line: not a row
  lines.append(',pos')  # empty text
  lines.append('"some words",')  # missing label
  data = ('\ufeff' + '\n'.join(lines) + '\n').encode('utf-8')
  data += b'"bad \xff bytes here",neg\n'  # invalid UTF-8, replaced
  src = root / 'reviews.csv'
  src.write_bytes(data)
  out = root / 'out'
  manifest = _run(src, out, '--vocab_size', '15', '--max_tokens', '16')
  return docs, src, out, manifest


def test_counts_dead_letters_and_ids(csv_run):
  docs, _, out, manifest = csv_run
  totals = manifest['totals']
  assert totals['inputs'] == len(docs) + 3
  assert totals['dead_lettered'] == 2
  assert totals['records'] == totals['examples'] == len(docs) + 1
  reasons = {d['input']: d['reason'] for d in readback.dead_letters(out)}
  # Rows count records, not lines: the quoted newline and the empty line
  # do not shift them.
  assert reasons == {f'reviews.csv:{len(docs)}': 'empty text',
                     f'reviews.csv:{len(docs) + 1}': 'missing label'}
  for split in manifest['splits'].values():
    assert split['inputs'] == split['examples'] + split['dead_lettered']
  text = manifest['text']
  assert text['vocabulary']['size'] == 15
  assert text['vocabulary']['first_oov_id'] == 16
  assert manifest['labels'] == ['neg', 'neutral', 'pos']
  readback.assert_valid(out)


def test_ids_padding_lengths_and_statistics(csv_run):
  docs, _, out, manifest = csv_run
  seen = 0
  for name, split in manifest['splits'].items():
    data = readback.read_all(out, name)
    ids, length, tokens = data['token_ids'], data['length'], data['num_tokens']
    assert ids.shape[1] == 16
    assert np.array_equal(length, np.minimum(tokens, 16))
    for row, n in zip(ids, length):
      assert row[:n].min() >= 1 and row[:n].max() <= 16
      assert not row[n:].any()
    stats = split['text']
    assert stats['documents'] == len(length)
    assert stats['tokens'] == int(tokens.sum())
    assert stats['truncated_documents'] == int((tokens > 16).sum())
    assert 0 < stats['oov_rate'] < 1
    assert stats['token_length']['max'] == int(tokens.max())
    seen += len(length)
  assert seen == len(docs) + 1
  # The replaced invalid byte is a token of its own document.
  ds = reader.load_dataset(str(out), 'train', batch_size=4,
                           as_supervised=True, shuffle=False)
  x, y = next(iter(ds))
  assert x.shape == (4, 16) and y.shape == (4,)


def test_vocabulary_comes_from_the_training_split(csv_run, tmp_path):
  _, _, out, manifest = csv_run
  import tensorflow_transform as tft
  vocab = tft.TFTransformOutput(
      reader.transform_dir(str(out))).vocabulary_by_name('tokens')
  assert len(vocab) == 15
  # A token seen only outside the training split gets an OOV id.
  lines = ['text,label']
  for i in range(300):
    if i % 50 == 0:
      lines.append(f'onlyhere{i} alpha,pos')
    else:
      lines.append(f'alpha beta,{("pos", "neg")[i % 2]}')
  src = tmp_path / 'small.csv'
  src.write_text('\n'.join(lines) + '\n')
  small = _run(src, tmp_path / 'out', '--vocab_size', '100')
  test_ids = {}
  for name in small['splits']:
    data = readback.read_all(tmp_path / 'out', name)
    for doc_id, ids in zip(data.get('id', []), data.get('token_ids', [])):
      test_ids[doc_id.decode()] = (name, ids)
  vocab = [t.decode() for t in tft.TFTransformOutput(reader.transform_dir(
      str(tmp_path / 'out'))).vocabulary_by_name('tokens')]
  for i in range(0, 300, 50):
    split, ids = test_ids[f'small.csv:{i}']
    word = f'onlyhere{i}'
    if split == 'train':
      assert word in vocab
    else:
      assert word not in vocab
      assert ids[0] == len(vocab) + 1  # the OOV id


def test_rerun_gives_the_same_fingerprint(csv_run, tmp_path):
  _, src, _, manifest = csv_run
  again = _run(src, tmp_path / 'again', '--vocab_size', '15',
               '--max_tokens', '16')
  assert again['fingerprint'] == manifest['fingerprint']


def test_class_folders_tfidf_ngrams_and_punctuation(tmp_path):
  root = tmp_path / 'docs'
  for i, (text, label) in enumerate(_docs(240, seed=1)):
    folder = root / label
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f'{i:03d}.txt').write_text(text.upper() + '!!', encoding='utf-8')
  (root / 'pos' / 'empty.txt').write_text('   \n')
  (root / 'neg' / 'bad.txt').write_bytes(b'alpha \xfe beta')
  (root / 'notes.md').write_text('ignored')
  out = tmp_path / 'out'
  manifest = _run(root, out, '--text_output', 'tfidf', '--ngrams', '1,2',
                  '--strip_punctuation', '--invalid_utf8', 'dead_letter')
  assert manifest['text']['input_kind'] == 'folder'
  assert manifest['totals']['records'] == 240
  reasons = sorted(d['reason'] for d in readback.dead_letters(out))
  assert reasons == ['empty text', 'invalid UTF-8 in the text']
  assert manifest['feature_spec']['term_ids']['shape'] is None
  import tensorflow_transform as tft
  vocab = tft.TFTransformOutput(
      reader.transform_dir(str(out))).vocabulary_by_name('tokens')
  # Lower-cased, punctuation gone, word pairs present.
  assert all(t == t.lower() and b'!' not in t for t in vocab)
  assert any(b' ' in t for t in vocab)
  readback.assert_valid(out)
  ds = reader.load_dataset(str(out), 'train', batch_size=8,
                           as_supervised=True, shuffle=False)
  terms, label = next(iter(ds))
  assert terms['term_ids'].dense_shape[0] == 8 and label.shape == (8,)
  weights = terms['term_weights'].values.numpy()
  assert (weights > 0).all()


def test_bag_of_words_without_oov_buckets_and_raw_text(tmp_path):
  src = tmp_path / 'docs.jsonl'
  with open(src, 'w', encoding='utf-8') as f:
    for text, label in _docs(150, seed=2):
      f.write(json.dumps({'body': text + ' rareword', 'label': label}) + '\n')
    f.write('{"body": "not closed\n')  # invalid JSON
  out = tmp_path / 'out'
  manifest = _run(src, out, '--text_column', 'body', '--text_output', 'bow',
                  '--oov_buckets', '0', '--vocab_size', '5', '--keep_text')
  assert manifest['totals']['dead_lettered'] == 1
  assert 'invalid JSON' in readback.dead_letters(out)[0]['reason']
  readback.assert_valid(out)
  batch = next(iter(reader.load_dataset(str(out), 'train', batch_size=1000,
                                        shuffle=False)))
  ids = batch['term_ids'].values.numpy()
  assert ids.min() >= 1 and ids.max() <= 5  # unknown tokens dropped
  counts = batch['term_weights'].values.numpy()
  assert (counts >= 1).all() and (counts == np.round(counts)).all()
  texts = [t.decode() for t in batch['text'].numpy()]
  assert all(t.endswith(' rareword') for t in texts)


@pytest.mark.parametrize('extra,expected', [
    (['--text_column', 'body'], r"'body'"),
    (['--normalization', 'zscore'], '--normalization does not apply to text'),
    (['--ngrams', '3,1'], '--ngrams'),
    (['--text_output', 'embeddings'], '--text_output must be one of'),
    (['--invalid_utf8', 'ignore'], '--invalid_utf8 must be one of'),
    (['--max_tokens', '0'], '--max_tokens must be between'),
    (['--lowercase', 'maybe'], '--lowercase must be true or false'),
    (['--splits', 'validation=0.5,test=0.5'], 'needs a train split'),
])
def test_bad_invocations_stop_with_one_sentence(tmp_path, capsys, extra,
                                                expected):
  src = tmp_path / 'docs.csv'
  src.write_text('text,label\nhello world,pos\n')
  out = tmp_path / 'out'
  code = preprocess.main(['--input', str(src), '--output', str(out)] + BASE +
                         extra)
  err = capsys.readouterr().err.strip()
  assert code == outcome.EXIT_USAGE, err
  assert err.count('\n') == 0 and 'Traceback' not in err, err
  assert re.search(expected, err), err
  assert not out.exists()


def test_missing_input_stops_with_one_sentence(tmp_path, capsys):
  code = preprocess.main(['--input', str(tmp_path / 'nope.csv'), '--output',
                          str(tmp_path / 'out')] + BASE)
  err = capsys.readouterr().err.strip()
  assert code == outcome.EXIT_USAGE and 'does not exist' in err, err


@pytest.mark.parametrize('workers', ['0', '2'])
def test_one_enormous_text_field_is_one_dead_letter(tmp_path, caplog,
                                                    workers):
  # A 50 MB field is larger than the CSV reader's block: it reads the file
  # again with larger blocks, skipping the rows it already gave; the text
  # is longer than a document may be, so it is a dead letter. With worker
  # processes the 52 MB file is read in byte ranges instead, each in one
  # block: the same documents and dead letter.
  rows = ['text,label'] + [f'"doc {i} alpha beta",{("a", "b")[i % 2]}'
                           for i in range(300)]
  huge = 'gamma delta ' * (50 * 1024 * 1024 // 12)
  rows.insert(251, f'"{huge}",a')  # data row 250, after the first batch
  src = tmp_path / 'docs.csv'
  src.write_text('\n'.join(rows) + '\n')
  caplog.set_level('INFO')
  manifest = _run(src, tmp_path / 'out', '--max_tokens', '8',
                  '--local_processes', workers)
  assert manifest['totals']['inputs'] == 301
  assert manifest['totals']['records'] == 300
  if workers == '0':
    assert 'holds a field larger than' in caplog.text
  [dead] = readback.dead_letters(tmp_path / 'out')
  assert dead['input'] == 'docs.csv:250'
  assert dead['reason'] == 'text longer than 1 MiB'
  ids = set()
  for split in manifest['splits']:
    data = readback.read_all(tmp_path / 'out', split)
    ids.update(i.decode() for i in data.get('id', []))
  assert ids == {f'docs.csv:{i}' for i in range(301) if i != 250}
