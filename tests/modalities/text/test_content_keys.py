"""The text content key is what the transform reads of a text: its tokens as
`tokenize` (TensorFlow) makes them, checked on odd texts, and keys equal
exactly when the stored features would be."""

import pytest
import tensorflow as tf

from transforms.modalities.text import preprocessing as tt

ODD = ["Hello, World! It's  a test\u00a0ok.",
       'Ça va? «Très» bien—merci… İstanbul',
       'a_b c-d (e) $5 +x',
       'tab\there\nnew\x0bline x\x1cy\x0cz\r',
       'ÀÉÎ ß ǅ',
       'plain ascii words here',
       '',
       '   ']


def _config(**kw):
  base = dict(text_column='text', label_column='label', lowercase=True,
              strip_punctuation=False, max_tokens=4, vocab_size=0,
              min_frequency=1, oov_buckets=1, ngrams=(1, 1), output='ids',
              keep_text=False, invalid_utf8='replace')
  base.update(kw)
  return tt.TextConfig(**base)


@pytest.mark.parametrize('ngrams', [(1, 1), (1, 2), (2, 3)])
@pytest.mark.parametrize('strip', [False, True])
@pytest.mark.parametrize('lower', [False, True])
def test_tokens_are_those_of_the_transform(ngrams, strip, lower):
  tc = _config(ngrams=ngrams, strip_punctuation=strip, lowercase=lower)
  expected = [[t.decode() for t in row] for row in
              tt.tokenize(tf.constant(ODD), tc).to_list()]
  for text, want in zip(ODD, expected):
    got = tt.normalized_tokens(text, tc)
    if ngrams != (1, 1):
      got = tt._ngrams(got, *ngrams)  # pylint: disable=protected-access
    assert got == want, text


def test_keys_are_equal_exactly_when_the_records_are():
  ids = _config()
  a, b, c, d, e = tt.content_keys(
      ['Hope fear.', 'HOPE  FEAR.', 'hope fear!', 'a b c d e', 'a b c d f'],
      ids)
  assert a == b            # case and spacing are normalized away
  assert a != c            # punctuation stays part of the token
  assert d == e            # only the first max_tokens (4) tokens are stored
  [p, q] = tt.content_keys(['hope fear.', 'hope fear!'],
                           _config(strip_punctuation=True))
  assert p == q
  bag = _config(output='bow')
  [x, y, z] = tt.content_keys(['b a a', 'a b a', 'a b'], bag)
  assert x == y != z       # a bag of words has no order
  bigrams = _config(output='bow', ngrams=(1, 2))
  [x, y] = tt.content_keys(['b a a', 'a b a'], bigrams)
  assert x != y            # but its bigrams differ
  [u, v] = tt.content_keys(['Ça va', 'ÇA  VA'], ids)
  assert u == v
