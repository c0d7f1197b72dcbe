"""What near-duplicate documents are found by (core/near_duplicates.py): a
MinHash signature of each document's word pairs.

A document's words are its text lower-cased, with apostrophes left out
and every other Unicode punctuation character and every kind of space made
a space, split on spaces, whatever the run's own tokenizer settings: a
copy with other punctuation, case or spacing (non-breaking spaces
included) has the same words, and "don't" is "dont". Its shingles are its
pairs of consecutive words (a one-word document: that word).

The signature is a one-permutation MinHash (Li, Owen and Zhang, 2012)
with optimal densification (Shrivastava, 2017): each shingle's 64-bit
hash picks one of BINS bins by its top bits and offers the next 32 bits
there; a bin keeps the smallest value offered. An empty bin (a document
with fewer shingles than bins) takes the value of the first non-empty bin
along a probe sequence fixed per bin, the same for every document. Two
documents agree on a bin with probability equal to the Jaccard similarity
of their shingle sets, as with BINS independent permutations, for the
cost of one hash per shingle rather than BINS. (Measured here on the text
benchmark's documents, a k-permutation MinHash, the kind datasketch
computes one document at a time, took 0.5 to 0.9 s of one core per
100,000 documents for 32 values even batched in NumPy; this takes 0.05 to
0.1 s for 64, and 0.4 s with the words found and hashed.)

A word's hash is the polynomial sum of its UTF-8 bytes (plus one) in
powers of a fixed odd base, modulo 2^64, mixed by MurmurHash3's 64-bit
finalizer; a pair's is the mix of its words' hashes. The words of a whole
batch are found and hashed at once in NumPy, with no Python object per
word. Fixed functions: signatures are equal on every machine and in every
process.
"""

import hashlib
import unicodedata
from typing import List, Sequence

import numpy as np

from transforms.core import mix


BINS = 64
# A bin no shingle reached (before densification), and every bin of a
# document without words (which is never a near-duplicate).
EMPTY = np.uint32(0xFFFFFFFF)
_BIN_SHIFT = np.uint64(64 - 6)  # log2(BINS) top bits pick the bin
_VALUE_SHIFT = np.uint64(64 - 6 - 32)
_MASK32 = np.uint64(0xFFFFFFFF)
# Documents signed at once: the batch's arrays (8 bytes a character)
# stay in the processor's cache. Measured on the text benchmark's
# documents, batches of 1,000 took 0.73 of the time of batches of 10,000.
_CHUNK = 1000
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


def words(text: str) -> List[bytes]:
  """A document's words (UTF-8), as the module docstring says: what
  `signatures` hashes, one document in plain Python (for tests and
  explanations)."""
  return [w for w in _normalized([text]).split(b' ') if w]


class _Separators(dict):
  """str.translate table: Unicode punctuation (category P*) and spaces
  (category Z*, and what str.isspace calls whitespace) -> space, filled
  as characters are seen."""

  def __missing__(self, code: int):
    char = chr(code)
    if char in _APOSTROPHES:
      value = None
    elif unicodedata.category(char)[0] in 'PZ' or char.isspace():
      value = ' '
    else:
      value = code
    self[code] = value
    return value


# Left out rather than made spaces: "don't" and "dont" are one word.
_APOSTROPHES = "'\u2019\u02bc"
_SEPARATORS = _Separators({0: 0})  # (the document separator stays)


def _byte_table() -> bytes:
  """bytes.translate table: ASCII capitals -> lower case, ASCII
  punctuation and whitespace -> space, every other byte (the document
  separator 0 and UTF-8's bytes above 127 among them) unchanged."""
  table = bytearray(range(256))
  for c in range(128):
    if unicodedata.category(chr(c)).startswith('P') or chr(c) in _SPACES:
      table[c] = ord(' ')
    elif 'A' <= chr(c) <= 'Z':
      table[c] = c + 32
  return bytes(table)


# ASCII apostrophes, which the byte table's translate deletes.
_DELETED = b"'"


# ASCII whitespace (and the separators str.isspace counts) made spaces.
_SPACES = ' \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f'
_TABLE = _byte_table()
# The word hash: sum of (byte + 1) * BASE^position, modulo 2^64.
_BASE = np.uint64(0x100000001B3)
_BASE_INVERSE = np.uint64(pow(0x100000001B3, -1, 1 << 64))
_POWERS = [np.ones(1, np.uint64), np.ones(1, np.uint64)]


def _powers(n: int):
  """(BASE^k, BASE^-k) for k < n, modulo 2^64 (kept and grown)."""
  if len(_POWERS[0]) < n:
    size = max(n, 2 * len(_POWERS[0]))
    for k, base in enumerate((_BASE, _BASE_INVERSE)):
      steps = np.full(size, base, np.uint64)
      steps[0] = 1
      _POWERS[k] = np.cumprod(steps, dtype=np.uint64)
  return _POWERS[0][:n], _POWERS[1][:n]


def _normalized(texts: Sequence[str]) -> bytes:
  """The documents' text, lower-cased, punctuation and whitespace made
  spaces, as UTF-8, joined by a 0 byte (a document's own 0 characters made
  spaces)."""
  joined = '\x00'.join(texts)
  if joined.count('\x00') != len(texts) - 1:
    joined = '\x00'.join(t.replace('\x00', ' ') for t in texts)
  if joined.isascii():
    data = joined.encode('ascii')
  else:
    data = joined.lower().translate(_SEPARATORS).encode(
        'utf-8', 'surrogatepass')
  return data.translate(_TABLE, _DELETED)


def _word_hashes(texts: Sequence[str]):
  """(uint64 hash of each word, the number of words of each document):
  the words of `words`, in order, found and hashed over the whole batch
  at once."""
  b = np.frombuffer(_normalized(texts), np.uint8)
  in_word = (b != ord(' ')) & (b != 0)
  edges = np.diff(np.r_[False, in_word, False].view(np.int8))
  starts = np.flatnonzero(edges == 1)
  ends = np.flatnonzero(edges == -1)
  counts = np.diff(np.searchsorted(
      starts, np.r_[0, np.flatnonzero(b == 0), len(b)]))
  power, inverse = _powers(len(b))
  terms = np.add(b, np.uint64(1), dtype=np.uint64)
  terms *= power
  prefix = np.empty(len(b) + 1, np.uint64)
  prefix[0] = 0
  np.cumsum(terms, out=prefix[1:])
  return mix.fmix64((prefix[ends] - prefix[starts]) * inverse[starts]), counts


def signatures(texts: Sequence[str]) -> np.ndarray:
  """uint32 [len(texts), BINS]: each document's signature."""
  n = len(texts)
  if not n:
    return np.zeros((0, BINS), np.uint32)
  if n > _CHUNK:
    return np.concatenate([signatures(texts[k:k + _CHUNK])
                           for k in range(0, n, _CHUNK)])
  h, counts = _word_hashes(texts)
  doc = np.repeat(np.arange(n), counts)
  same = doc[1:] == doc[:-1]
  pairs = mix.fmix64(h[:-1][same] * np.uint64(0x9E3779B97F4A7C15)
                     ^ h[1:][same])
  single = np.flatnonzero(counts == 1)
  first = np.r_[0, np.cumsum(counts)[:-1]]
  alone = mix.fmix64(h[first[single]] ^ np.uint64(0xD6E8FEB86659FD93))
  mixed = np.concatenate([pairs, alone])
  owner = np.concatenate([doc[1:][same], single])
  cell = owner * BINS + (mixed >> _BIN_SHIFT).astype(np.int64)
  sig = np.full(n * BINS, EMPTY, np.uint32)
  np.minimum.at(sig, cell, ((mixed >> _VALUE_SHIFT) & _MASK32).astype(
      np.uint32))
  return _densified(sig.reshape(n, BINS))


# PROBES as steps: the cell an empty bin looks at in its k-th probe is
# its own plus _STEPS[k][its bin] (the same document's row).
_STEPS = np.ascontiguousarray((PROBES - np.arange(BINS)[:, None]).T)


def _densified(sig: np.ndarray) -> np.ndarray:
  """Empty bins filled along their probe sequences (module docstring)."""
  flat = sig.ravel()
  cells = np.flatnonzero(flat == EMPTY)
  if not len(cells):
    return sig
  filled = flat.copy()
  column = cells % BINS
  for steps in _STEPS:
    values = flat[cells + steps[column]]
    found = values != EMPTY
    filled[cells[found]] = values[found]
    keep = ~found
    cells, column = cells[keep], column[keep]
    if not len(cells):
      return filled.reshape(sig.shape)
  # Documents of very few shingles: the first non-empty bin's value (none
  # for a document without words).
  rows = cells // BINS
  first = np.argmax(sig[rows] != EMPTY, axis=1)
  filled[cells] = sig[rows, first]
  return filled.reshape(sig.shape)
