"""The text preprocessing_fn with real tf.Transform, and its helpers; the
content key (what the transform reads of a text: its tokens as `tokenize`
makes them, checked on odd texts, and keys equal exactly when the stored
features would be)."""

import hashlib

import numpy as np
import pytest
import tensorflow as tf

from transforms.modalities.text import preprocessing


def _config(**overrides):
  base = dict(text_column='text', label_column='label', lowercase=True,
              strip_punctuation=False, max_tokens=6, vocab_size=0,
              min_frequency=1, oov_buckets=1, ngrams=(1, 1), output='ids',
              keep_text=False, invalid_utf8='replace')
  base.update(overrides)
  return preprocessing.TextConfig(**base)


def _analyze(tmp_path, train, probe, tc):
  """AnalyzeDataset on `train` documents, then the exported transform on
  `probe`; returns (outputs, token vocabulary)."""
  import apache_beam as beam
  import tensorflow_transform as tft
  import tensorflow_transform.beam as tft_beam
  out = str(tmp_path / 'tft')
  with beam.Pipeline() as p:
    with tft_beam.Context(temp_dir=str(tmp_path / 'tmp'),
                          force_tf_compat_v1=False):
      batches = p | beam.Create([
          preprocessing.analysis_record_batch(train[:2], ['a'] * 2),
          preprocessing.analysis_record_batch(train[2:],
                                              ['b'] * (len(train) - 2))])
      transform_fn = ((batches, preprocessing.analysis_adapter_config())
                      | tft_beam.AnalyzeDataset(
                          preprocessing.make_preprocessing_fn(tc)))
      _ = transform_fn | tft_beam.WriteTransformFn(out)
  output = tft.TFTransformOutput(out)
  result = output.transform_features_layer()(
      preprocessing.transform_inputs(probe))
  vocab = [t.decode() for t in output.vocabulary_by_name('tokens')]
  return result, vocab


TRAIN = ['the cat sat', 'The cat ran!', 'a dog sat', 'the dog, the cat']


def test_ids_vocabulary_padding_and_oov(tmp_path):
  tc = _config(vocab_size=3)
  result, vocab = _analyze(tmp_path, TRAIN, ['The cat saw a zebra', ''], tc)
  # Lower-cased counts: the 4, cat 3, sat 2, dog 2 ... top 3 kept.
  assert vocab[:2] == ['the', 'cat'] and len(vocab) == 3
  ids = result[preprocessing.TOKEN_IDS].numpy()
  assert ids.shape == (2, 6)
  assert ids[0][:2].tolist() == [1, 2]  # the, cat
  assert ids[0][2] == 4 and ids[0][4] == 4  # saw, zebra: the OOV id
  assert ids[1].tolist() == [0] * 6  # empty: all padding
  assert result[preprocessing.LENGTH].numpy().tolist() == [5, 0]
  assert result[preprocessing.NUM_TOKENS].numpy().tolist() == [5, 0]
  oov = result[preprocessing.OOV_TOKENS].numpy().tolist()
  assert oov[0] == 5 - sum(t in vocab for t in 'the cat saw a zebra'.split())


def test_truncation_min_frequency_and_no_oov_bucket(tmp_path):
  tc = _config(max_tokens=2, min_frequency=3, oov_buckets=0)
  result, vocab = _analyze(tmp_path, TRAIN, ['zebra the cat the'], tc)
  assert sorted(vocab) == ['cat', 'the']  # seen at least 3 times
  ids = result[preprocessing.TOKEN_IDS].numpy()[0].tolist()
  # The unknown word is dropped (no OOV bucket), then truncated to 2.
  assert len(ids) == 2 and 0 not in ids
  assert result[preprocessing.LENGTH].numpy()[0] == 2
  assert result[preprocessing.NUM_TOKENS].numpy()[0] == 4


def test_punctuation_ngrams_and_tfidf(tmp_path):
  tc = _config(strip_punctuation=True, ngrams=(1, 2), output='tfidf')
  result, vocab = _analyze(tmp_path, TRAIN, ['the cat, the cat'], tc)
  assert 'cat' in vocab and 'the cat' in vocab
  assert not any('!' in t or ',' in t for t in vocab)
  import tensorflow as tf
  ids = tf.sparse.to_dense(result[preprocessing.TERM_IDS]).numpy()[0]
  weights = tf.sparse.to_dense(result[preprocessing.TERM_WEIGHTS]).numpy()[0]
  present = ids[weights > 0]
  assert vocab.index('cat') + 1 in present
  assert (weights >= 0).all() and np.isfinite(weights).all()


def test_bag_of_words_counts(tmp_path):
  tc = _config(output='bow')
  result, vocab = _analyze(tmp_path, TRAIN, ['cat cat the'], tc)
  import tensorflow as tf
  ids = tf.sparse.to_dense(result[preprocessing.TERM_IDS]).numpy()[0]
  counts = tf.sparse.to_dense(result[preprocessing.TERM_WEIGHTS]).numpy()[0]
  by_id = {int(i): float(c) for i, c in zip(ids, counts) if c}
  assert by_id == {vocab.index('cat') + 1: 2.0, vocab.index('the') + 1: 1.0}


@pytest.mark.parametrize('oov_buckets', [0, 1])
def test_per_document_outputs_of_a_mixed_batch(tmp_path, oov_buckets):
  """Every output of every row against the same thing worked out in
  Python, on a batch whose rows are empty, all unknown, longer than
  max_tokens, or mixed: the per-row counts and the dropping of unknown
  tokens must stay with their own row."""
  tc = _config(vocab_size=3, max_tokens=3, oov_buckets=oov_buckets)
  probe = ['', 'zebra yak zebra', 'the cat saw a zebra the', 'cat', '',
           'yak the yak cat yak dog the', 'Cat']
  result, vocab = _analyze(tmp_path, TRAIN, probe, tc)
  oov_id = len(vocab) + 1 if oov_buckets else None
  for row, text in enumerate(probe):
    tokens = text.lower().split()
    ids = [vocab.index(t) + 1 if t in vocab else oov_id for t in tokens]
    ids = [i for i in ids if i is not None]
    assert result[preprocessing.NUM_TOKENS].numpy()[row] == len(tokens), text
    assert result[preprocessing.OOV_TOKENS].numpy()[row] == sum(
        t not in vocab for t in tokens), text
    assert result[preprocessing.LENGTH].numpy()[row] == min(len(ids), 3), text
    assert result[preprocessing.TOKEN_IDS].numpy()[row].tolist() == (
        ids[:3] + [0] * 3)[:3], text
  bags = _analyze(tmp_path / 'bow', TRAIN, probe, _config(
      vocab_size=3, output='bow', oov_buckets=oov_buckets))[0]
  term_ids = tf.sparse.to_dense(bags[preprocessing.TERM_IDS]).numpy()
  counts = tf.sparse.to_dense(bags[preprocessing.TERM_WEIGHTS]).numpy()
  for row, text in enumerate(probe):
    ids = [vocab.index(t) + 1 if t in vocab else oov_id
           for t in text.lower().split()]
    want = {i: float(ids.count(i)) for i in ids if i is not None}
    got = {int(i): float(c) for i, c in zip(term_ids[row], counts[row]) if c}
    assert got == want, text


def test_ngram_parsing_and_summary():
  assert preprocessing.parse_ngrams('1') == (1, 1)
  assert preprocessing.parse_ngrams('1,3') == (1, 3)
  assert preprocessing.parse_ngrams('2-2') == (2, 2)
  for bad in ('0', '3,1', 'x', '1,9'):
    with pytest.raises(ValueError):
      preprocessing.parse_ngrams(bad)
  batch = {'split': np.array([0, 0, 1]),
           preprocessing.NUM_TOKENS: np.array([3, 10, 5]),
           preprocessing.OOV_TOKENS: np.array([1, 0, 5])}
  stats = preprocessing.summarize(
      preprocessing.describe(batch, ['train', 'test']), max_tokens=4)
  assert stats['train']['tokens'] == 13 and stats['train']['oov_tokens'] == 1
  assert stats['train']['truncated_documents'] == 1
  assert stats['train']['token_length']['max'] == 10
  assert stats['test']['oov_rate'] == 1.0


# ----------------------------------------------------------- content keys --

ODD = ["Hello, World! It's  a test\u00a0ok.",
       'Ça va? «Très» bien—merci… İstanbul',
       'a_b c-d (e) $5 +x',
       'tab\there\nnew\x0bline x\x1cy\x0cz\r',
       'ÀÉÎ ß ǅ',
       'plain ascii words here',
       '',
       '   ']


@pytest.mark.parametrize('ngrams', [(1, 1), (1, 2), (2, 3)])
@pytest.mark.parametrize('strip', [False, True])
@pytest.mark.parametrize('lower', [False, True])
def test_tokens_are_those_of_the_transform(ngrams, strip, lower):
  tc = _config(max_tokens=4, ngrams=ngrams, strip_punctuation=strip,
               lowercase=lower)
  expected = [[t.decode() for t in row] for row in
              preprocessing.tokenize(tf.constant(ODD), tc).to_list()]
  for text, want in zip(ODD, expected):
    got = preprocessing.normalized_tokens(text, tc)
    if ngrams != (1, 1):
      got = preprocessing._ngrams(got, *ngrams)  # pylint: disable=protected-access
    assert got == want, text


def test_keys_are_equal_exactly_when_the_records_are():
  ids = _config(max_tokens=4)
  a, b, c, d, e = preprocessing.content_keys(
      ['Hope fear.', 'HOPE  FEAR.', 'hope fear!', 'a b c d e', 'a b c d f'],
      ids)
  assert a == b            # case and spacing are normalized away
  assert a != c            # punctuation stays part of the token
  assert d == e            # only the first max_tokens (4) tokens are stored
  [p, q] = preprocessing.content_keys(['hope fear.', 'hope fear!'],
                                      _config(max_tokens=4,
                                              strip_punctuation=True))
  assert p == q
  bag = _config(max_tokens=4, output='bow')
  [x, y, z] = preprocessing.content_keys(['b a a', 'a b a', 'a b'], bag)
  assert x == y != z       # a bag of words has no order
  bigrams = _config(max_tokens=4, output='bow', ngrams=(1, 2))
  [x, y] = preprocessing.content_keys(['b a a', 'a b a'], bigrams)
  assert x != y            # but its bigrams differ
  [u, v] = preprocessing.content_keys(['Ça va', 'ÇA  VA'], ids)
  assert u == v



def _odd_documents(seed: int, n: int):
  """Documents of the oddities the batch digest must get right: runs of
  every kind of whitespace, punctuation, NUL and 0x1f, control bytes that
  are not whitespace, accents, long and empty documents."""
  rng = np.random.default_rng(seed)
  pieces = ['a', 'Bc', 'DEF', ' ', '  ', '\t', '\n', '\r\n', '\x0b', '\x0c',
            '\x1c', '\x1e', '.', ', ', "'", '!?', '-', 'caf\u00e9', '\u00a0',
            'x' * 30, '7']
  docs = [''.join(rng.choice(pieces, size=int(rng.integers(0, 40))))
          for _ in range(n)]
  return docs + ['', ' ', '\t\n', 'one', ' one ', 'w ' * 6, ' '.join('w' * 7),
                 'a\x00b c', 'a\x1fb c', 'y ' * 300]


@pytest.mark.parametrize('compiled', [False, True],
                         ids=['numpy', 'compiled'])
@pytest.mark.parametrize('output', ['ids', 'bow'])
@pytest.mark.parametrize('strip', [False, True])
@pytest.mark.parametrize('lower', [False, True])
def test_keys_of_a_batch_hash_the_tokens_of_each_document(lower, strip,
                                                          output, compiled):
  """The whole-batch digest (every ASCII document of a batch at once) is
  the SHA-256 of each document's own tokens (normalized_tokens, which the
  test above holds to the transform's) joined by 0x1f: the first
  max_tokens for ids, sorted for a bag of words; in any batch; with the
  tokens found in NumPy steps or in the compiled loop."""
  tc = _config(lowercase=lower, strip_punctuation=strip, output=output)
  docs = _odd_documents(0, 300)
  ascii_only = [d for d in docs if d.isascii() and '\x00' not in d
                and '\x1f' not in d]

  def expected(text, tc=tc):
    tokens = [t.encode('utf-8')
              for t in preprocessing.normalized_tokens(text, tc)]
    tokens = tokens[:tc.max_tokens] if output == 'ids' else sorted(tokens)
    return hashlib.sha256(b'\x1f'.join(tokens)).hexdigest()[:32]

  for batch in (docs, ascii_only, docs[:1], ['a\x00b', 'a b']):
    assert preprocessing.content_keys(batch, tc, compiled) == [
        expected(d) for d in batch]
  # For ids, the max_tokens-th (6th) token ends what is hashed.
  seven, six = preprocessing.content_keys(['a a a a a b c', ' a a a a a\tb '],
                                          tc, compiled)
  assert (seven == six) == (output == 'ids')
  # At most one token, or more than any document has.
  for most in (1, 1000):
    other = _config(lowercase=lower, strip_punctuation=strip, output=output,
                    max_tokens=most)
    assert preprocessing.content_keys(ascii_only, other, compiled) == [
        expected(d, other) for d in ascii_only]


@pytest.mark.parametrize('texts', [
    ['plain', '', 'été – 数据 🙂', 'a\nb\x00c'],
    ['ok', b'caf\xe9 latin-1'.decode('utf-8', 'surrogateescape')]],
                         ids=['utf-8', 'undecodable-bytes'])
def test_analysis_batch_holds_each_documents_bytes(texts):
  batch = preprocessing.analysis_record_batch(texts, ['x'] * len(texts))
  assert batch.column(preprocessing.TEXT).to_pylist() == [
      [t.encode('utf-8', 'surrogateescape')] for t in texts]
  assert batch.column(preprocessing.LABEL).to_pylist() == [[b'x']] * len(texts)
  assert batch.schema == preprocessing.analysis_adapter_config().arrow_schema
