"""What near-duplicate documents are found by (core/near_duplicates.py): a
MinHash signature of each document's word pairs.

A document's words are its text lower-cased, with every Unicode
punctuation character made a space, split on whitespace, whatever the
run's own tokenizer settings: a copy with other punctuation, case or
spacing has the same words. Its shingles are its pairs of consecutive
words (a one-word document: that word).

The signature is a one-permutation MinHash (Li, Owen and Zhang, 2012)
with optimal densification (Shrivastava, 2017): each shingle's 64-bit
hash picks one of BINS bins by its top bits and offers the next 32 bits
there; a bin keeps the smallest value offered. An empty bin (a document
with fewer shingles than bins) takes the value of the first non-empty bin
along a probe sequence fixed per bin, the same for every document. Two
documents agree on a bin with probability equal to the Jaccard similarity
of their shingle sets, as with BINS independent permutations, for the
cost of one hash per shingle rather than BINS (a k-permutation MinHash,
datasketch's, costs about 30 times as much per document here).

Words are hashed with CRC-32 (zlib) and pairs mixed to 64 bits with
MurmurHash3's finalizer: fixed functions, so signatures are equal on every
machine and in every process.
"""

import hashlib
import itertools
import zlib
from typing import List, Sequence

import numpy as np

from transforms.modalities.text import preprocessing as tt

BINS = 64
# Shingles: runs of this many consecutive words.
SHINGLE_WORDS = 2
# A bin no shingle reached (before densification), and every bin of a
# document without words (which is never a near-duplicate).
EMPTY = np.uint32(0xFFFFFFFF)
_BIN_SHIFT = np.uint64(64 - 6)  # log2(BINS) top bits pick the bin
_VALUE_SHIFT = np.uint64(64 - 6 - 32)
_MASK32 = np.uint64(0xFFFFFFFF)
# Probes per bin before the rest of the empty bins (documents of one or
# two shingles) take the first non-empty bin's value.
_PROBES = 256


def _probe_table() -> np.ndarray:
  """[BINS, _PROBES] the bins an empty bin looks at in turn, fixed forever
  (a SHA-256 order, not a random generator's stream)."""
  out = np.empty((BINS, _PROBES), np.int64)
  for j in range(BINS):
    stream = b''.join(hashlib.sha256(f'densify bin {j} block {k}'.encode())
                      .digest() for k in range(_PROBES // 32))
    out[j] = np.frombuffer(stream, np.uint8)[:_PROBES] % BINS
  return out


PROBES = _probe_table()


def _fmix64(x: np.ndarray) -> np.ndarray:
  """MurmurHash3's 64-bit finalizer (uint64 in, uint64 out)."""
  x = x ^ (x >> np.uint64(33))
  x = x * np.uint64(0xFF51AFD7ED558CCD)
  x = x ^ (x >> np.uint64(33))
  x = x * np.uint64(0xC4CEB9FE1A85EC53)
  return x ^ (x >> np.uint64(33))


def words(text: str) -> List[bytes]:
  """A document's words (UTF-8), as the module docstring says."""
  settings = _WORD_SETTINGS
  if text.isascii():
    return tt._ascii_tokens(text, settings)  # pylint: disable=protected-access
  return [t.encode('utf-8', 'surrogatepass')
          for t in tt._unicode_tokens(text, settings)]  # pylint: disable=protected-access


_WORD_SETTINGS = tt.TextConfig(
    text_column='', label_column='', lowercase=True, strip_punctuation=True,
    max_tokens=1, vocab_size=0, min_frequency=1, oov_buckets=0,
    ngrams=(1, 1), output='ids', keep_text=False, invalid_utf8='error')


def signatures(texts: Sequence[str]) -> np.ndarray:
  """uint32 [len(texts), BINS]: each document's signature."""
  return signatures_of_words([words(t) for t in texts])


def signatures_of_words(per_doc: Sequence[List[bytes]]) -> np.ndarray:
  """signatures() of documents given as their words."""
  n = len(per_doc)
  lengths = np.fromiter(map(len, per_doc), np.int64, n)
  h = np.fromiter(map(zlib.crc32, itertools.chain.from_iterable(per_doc)),
                  np.uint64, int(lengths.sum()))
  ends = np.cumsum(lengths)
  starts = ends - lengths
  # Pairs (i, i + 1) inside one document; a one-word document's word alone
  # (its low half all ones, which no pair's CRC makes with a 1 in front).
  pair_ok = np.ones(max(len(h) - 1, 0), bool)
  last = ends[lengths > 0] - 1
  pair_ok[last[last < len(h) - 1]] = False
  pairs = (h[:-1] << np.uint64(32)) | h[1:]
  pair_doc = np.repeat(np.arange(n), np.maximum(lengths - 1, 0))
  single = np.flatnonzero(lengths == 1)
  shingles = np.concatenate([pairs[pair_ok],
                             (h[starts[single]] << np.uint64(32)) | _MASK32])
  doc = np.concatenate([pair_doc, single])
  mixed = _fmix64(shingles)
  cell = doc * BINS + (mixed >> _BIN_SHIFT).astype(np.int64)
  sig = np.full(n * BINS, EMPTY, np.uint32)
  np.minimum.at(sig, cell, ((mixed >> _VALUE_SHIFT) & _MASK32).astype(
      np.uint32))
  return _densified(sig.reshape(n, BINS))


def _densified(sig: np.ndarray) -> np.ndarray:
  """Empty bins filled along their probe sequences (module docstring)."""
  rows, cols = np.nonzero(sig == EMPTY)
  if not len(rows):
    return sig
  filled = sig.copy()
  for k in range(_PROBES):
    values = sig[rows, PROBES[cols, k]]
    found = values != EMPTY
    filled[rows[found], cols[found]] = values[found]
    rows, cols = rows[~found], cols[~found]
    if not len(rows):
      return filled
  # Documents of very few shingles: the first non-empty bin's value (none
  # for a document without words).
  first = np.argmax(sig != EMPTY, axis=1)
  filled[rows, cols] = sig[rows, first[rows]]
  return filled
