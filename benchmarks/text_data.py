"""Generates a labelled corpus of short English-like documents (CSV).

Nothing is downloaded: every word and document comes from seeded random
number generators, so the same arguments always give the same file.

    python benchmarks/text_data.py --docs 200000 --out /tmp/text.csv

writes one CSV with the columns

    text,label
    "Voskilmet trel fastwon. Kealdasmiend o. ... Wind, ou a zo ke ...",sports

- text: 20..120 words (about 60 on average), drawn from a fixed vocabulary
  of 50,000 made-up lowercase words (syllables such as 'tre', 'lan', 'stou')
  with Zipf-like frequencies; the most frequent words are the shortest, as
  in English. Words are separated by single spaces; some carry a comma or a
  period (about every 12th word ends a sentence, the last word of every text
  does), the word after a period is capitalized and a few words are all
  upper case. About 0.5% of the texts also hold a quoted phrase ('"Word
  word word,"') and a line break, so a reader must honour CSV quoting (most
  texts need quotes anyway because of their commas).
- label: one of news / sports / tech / health / arts, drawn so that about
  40 / 25 / 15 / 12 / 8% of the texts get each. Every label has its own
  2,000 "topic" words (from the vocabulary's ranks 50..10,000) that make up
  about 10% of its texts' words, so the classes differ a little.

With a 20,000-word vocabulary built from these texts some words stay out of
it: about 9.5% of the word occurrences belong to words ranked past 20,000,
and the punctuated forms ('word,', 'word.') take room too; with
`text.lower().split()` the 20,000 most frequent tokens of 160,000 texts
cover about 86% of the tokens.

The vocabulary and the topics are fixed (the same for every seed); the seed
decides labels, lengths, words, punctuation and the quoted texts. Texts are
made and written in chunks, so memory stays at one chunk's words and text
(plus the 450,000 written forms of the vocabulary's words).
"""

import argparse
import csv
import os
import sys
import time
from typing import Dict, List

import numpy as np

LABELS = ('news', 'sports', 'tech', 'health', 'arts')
# Share of the texts each label gets, in the order above (imbalanced).
LABEL_WEIGHTS = (0.40, 0.25, 0.15, 0.12, 0.08)
VOCAB_WORDS = 50_000
MIN_WORDS, MAX_WORDS = 20, 120
# Words per text: MIN_WORDS + Gamma(shape, scale), clipped to MAX_WORDS
# (mean about 20 + 40 = 60).
_LENGTH_SHAPE, _LENGTH_SCALE = 4.0, 10.0
# Zipf-Mandelbrot weights 1 / (rank + offset) ** exponent.
_ZIPF_EXPONENT, _ZIPF_OFFSET = 1.0, 2.7
TOPIC_WORDS = 2_000
TOPIC_RANKS = (50, 10_000)  # topic words come from these vocabulary ranks
TOPIC_SHARE = 0.10  # share of a text's words drawn from its label's topic
PERIOD_SHARE = 1 / 12  # words that end a sentence (besides the last one)
COMMA_SHARE = 0.06
UPPER_SHARE = 0.005  # words written all in upper case
QUOTED_SHARE = 0.005  # texts with a quoted phrase and a line break
CHUNK_DOCS = 20_000
_VOCAB_SEED = 20260102  # fixed: words and topics are the same for every seed

_ONSETS = ('', 'b', 'c', 'd', 'f', 'g', 'h', 'j', 'k', 'l', 'm', 'n', 'p',
           'r', 's', 't', 'v', 'w', 'y', 'z', 'br', 'ch', 'cl', 'dr', 'fl',
           'gr', 'pl', 'sh', 'st', 'th', 'tr')
_VOWELS = ('a', 'e', 'i', 'o', 'u', 'ai', 'ea', 'ou', 'ie')
_CODAS = ('', '', '', 'n', 'r', 's', 't', 'l', 'm', 'nd', 'st', 'ck')
# Syllables per candidate word (1..4).
_SYLLABLE_WEIGHTS = (0.04, 0.36, 0.40, 0.20)
_PERIOD, _COMMA = 2, 1  # punctuation codes; 0 = none
_LOWER, _CAPITAL, _UPPER = 0, 1, 2  # case codes


# ------------------------------------------------------------- vocabulary --


def vocabulary(size: int = VOCAB_WORDS) -> List[str]:
  """`size` distinct made-up lowercase words, shortest (most frequent) first.

  Args:
    size: Number of words.

  Returns:
    The words by frequency rank: the same list for every call.
  """
  rng = np.random.default_rng(_VOCAB_SEED)
  syllables = [o + v + c for o in _ONSETS for v in _VOWELS for c in _CODAS]
  words, seen = [], set()
  while len(words) < size:
    n = 2 * (size - len(words)) + 1000
    counts = rng.choice(len(_SYLLABLE_WEIGHTS), n, p=_SYLLABLE_WEIGHTS) + 1
    parts = rng.integers(0, len(syllables), (n, len(_SYLLABLE_WEIGHTS)))
    for k, row in zip(counts.tolist(), parts.tolist()):
      word = ''.join(syllables[s] for s in row[:k])
      if word not in seen:
        seen.add(word)
        words.append(word)
  # Stable: among equally long words the order of generation stays.
  return sorted(words[:size], key=len)


def _zipf_cdf(n: int) -> np.ndarray:
  weights = 1.0 / (np.arange(n) + 1.0 + _ZIPF_OFFSET) ** _ZIPF_EXPONENT
  cdf = np.cumsum(weights)
  cdf /= cdf[-1]
  cdf[-1] = 1.0
  return cdf


def _topics() -> np.ndarray:
  """(labels, TOPIC_WORDS) vocabulary ranks of every label's topic words.

  A label's first topic word is its most frequent one.
  """
  rng = np.random.default_rng([_VOCAB_SEED, 1])
  lo, hi = TOPIC_RANKS
  return np.stack([rng.choice(np.arange(lo, hi), TOPIC_WORDS, replace=False)
                   for _ in LABELS])


def _form_table(words: List[str]) -> np.ndarray:
  """Every written form of every word, as an object array.

  Index (case * 3 + punctuation) * len(words) + rank.
  """
  forms = []
  for case in (_LOWER, _CAPITAL, _UPPER):
    if case == _LOWER:
      cased = words
    elif case == _CAPITAL:
      cased = [w.capitalize() for w in words]
    else:
      cased = [w.upper() for w in words]
    for suffix in ('', ',', '.'):  # punctuation codes 0, 1, 2
      forms.extend(w + suffix for w in cased)
  return np.array(forms, dtype=object)


# ------------------------------------------------------------------ texts --


def _chunk_texts(rng: np.random.Generator, labels: np.ndarray,
                 lengths: np.ndarray, forms: np.ndarray, cdf: np.ndarray,
                 topics: np.ndarray, topic_cdf: np.ndarray) -> List[str]:
  """The texts of one chunk of documents (labels and lengths given)."""
  vocab = len(cdf)
  total = int(lengths.sum())
  ends = np.cumsum(lengths)
  starts = ends - lengths
  doc = np.repeat(np.arange(len(lengths)), lengths)

  u = rng.random(total)
  ranks = np.searchsorted(cdf, u, side='right')
  topical = rng.random(total) < TOPIC_SHARE
  picks = np.searchsorted(topic_cdf, u[topical], side='right')
  ranks[topical] = topics[labels[doc[topical]], picks]

  p = rng.random(total)
  punct = np.where(p < PERIOD_SHARE, _PERIOD,
                   np.where(p < PERIOD_SHARE + COMMA_SHARE, _COMMA, 0))
  punct[ends - 1] = _PERIOD
  case = np.full(total, _LOWER)
  case[starts] = _CAPITAL
  case[1:][punct[:-1] == _PERIOD] = _CAPITAL
  case[rng.random(total) < UPPER_SHARE] = _UPPER

  tokens = forms[(case * 3 + punct) * vocab + ranks].tolist()
  return [' '.join(tokens[a:b])
          for a, b in zip(starts.tolist(), ends.tolist())]


def _quote(text: str, where: float, newline_at: float) -> str:
  """Puts three words of a text in quotes and one line break after them.

  Args:
    text: A text of at least 5 words separated by single spaces.
    where: In [0, 1): where the quoted words start.
    newline_at: In [0, 1): where, after the quoted words, the break goes.

  Returns:
    E.g. 'a b "Word c," d\ne f.' (the word count stays the same).
  """
  words = text.split(' ')
  n = len(words)
  i = int(where * (n - 4))
  words[i] = '"' + words[i][:1].upper() + words[i][1:]
  words[i + 2] = words[i + 2].rstrip(',.') + ',"'
  k = i + 3 + int(newline_at * (n - i - 3))  # break before word k
  return ' '.join(words[:k]) + '\n' + ' '.join(words[k:])


# --------------------------------------------------------------- generate --


def generate(path: str, docs: int = 200_000, seed: int = 0) -> Dict[str, int]:
  """Writes the text corpus CSV described in the module docstring.

  The file is written under a temporary name next to `path` and renamed
  when complete, so `path` never holds a partial file.

  Args:
    path: CSV file to write (its folder must exist).
    docs: Number of documents (data rows).
    seed: Random seed; equal arguments give equal files.

  Returns:
    {label: number of documents} over the whole file.

  Raises:
    ValueError: docs is not positive.
  """
  if docs < 1:
    raise ValueError('docs must be at least 1')
  forms = _form_table(vocabulary())
  cdf = _zipf_cdf(VOCAB_WORDS)
  topics = _topics()
  topic_cdf = _zipf_cdf(TOPIC_WORDS)

  rng = np.random.default_rng(seed)
  labels = rng.choice(len(LABELS), docs, p=LABEL_WEIGHTS)
  lengths = np.minimum(
      MIN_WORDS + np.rint(rng.gamma(_LENGTH_SHAPE, _LENGTH_SCALE, docs)),
      MAX_WORDS).astype(np.int64)
  quoted = np.flatnonzero(rng.random(docs) < QUOTED_SHARE)
  quote_at = rng.random((len(quoted), 2))
  word_rng = np.random.default_rng([seed, 1])
  names = np.array(LABELS, dtype=object)

  tmp = f'{path}.tmp-{os.getpid()}'
  try:
    with open(tmp, 'w', newline='', encoding='utf-8') as f:
      writer = csv.writer(f, lineterminator='\n')
      writer.writerow(('text', 'label'))
      for lo in range(0, docs, CHUNK_DOCS):
        hi = min(lo + CHUNK_DOCS, docs)
        texts = _chunk_texts(word_rng, labels[lo:hi], lengths[lo:hi], forms,
                             cdf, topics, topic_cdf)
        first, last = np.searchsorted(quoted, (lo, hi))
        for q in range(first, last):
          texts[quoted[q] - lo] = _quote(texts[quoted[q] - lo],
                                         *quote_at[q].tolist())
        writer.writerows(zip(texts, names[labels[lo:hi]].tolist()))
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)
  per_label = np.bincount(labels, minlength=len(LABELS))
  return {name: int(c) for name, c in zip(LABELS, per_label)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--docs', type=int, default=200_000,
                      help='Documents (data rows, default 200000).')
  parser.add_argument('--seed', type=int, default=0,
                      help='Random seed (default 0).')
  parser.add_argument('--out', required=True, help='CSV file to write.')
  args = parser.parse_args(argv)
  start = time.perf_counter()
  try:
    per_label = generate(args.out, args.docs, args.seed)
  except ValueError as e:
    parser.error(str(e))
  shares = ', '.join(f'{k} {v / args.docs:.1%}' for k, v in per_label.items())
  print(f'wrote {args.docs} documents ({os.path.getsize(args.out) / 2**20:.1f}'
        f' MiB) to {args.out} in {time.perf_counter() - start:.1f} s; '
        f'labels: {shares}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
