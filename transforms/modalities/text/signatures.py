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
cost of one hash per shingle rather than BINS (the comparison with a
k-permutation MinHash: benchmarks/TRIED.md, "Text").

A word's hash is the polynomial sum of its UTF-8 bytes (plus one) in
powers of a fixed odd base, modulo 2^64, mixed by MurmurHash3's 64-bit
finalizer; a pair's is the mix of its words' hashes. A batch's text is
normalized in a few str and bytes calls, then its words are found and
hashed and its signatures made by compiled loops
(text/signature_kernels.py), with no Python object per word. Fixed
functions: signatures are equal on every machine and in every process.
"""

import hashlib
import unicodedata
from typing import List, Sequence

import numpy as np

from transforms.core import bands

BINS = 64  # a power of two (a hash's top bits pick a bin)
# One bin per row of the bands (text/signature_kernels.py counts on it).
assert BINS == bands.BANDS * bands.ROWS_PER_BAND
# A bin no shingle reached (before densification), and every bin of a
# document without words (which is never a near-duplicate): the bands'
# value, which tells the search such documents apart (core/bands.usable).
EMPTY = bands.EMPTY
# Documents signed at once, which bounds the working arrays (the word
# hashes take up to 4 bytes a byte of text) whatever the batch.
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


def _kernels():
  """text/signature_kernels.py, imported on first use (Numba and the
  compiled loops load in a fraction of a second; a launching process that
  never signs does without them)."""
  # pylint: disable=import-outside-toplevel
  from transforms.modalities.text import signature_kernels
  return signature_kernels


def _word_hashes(texts: Sequence[str]):
  """(uint64 hash of each word, the number of words of each document):
  the words of `words`, in order, over the whole batch at once."""
  return _kernels().word_hashes(
      np.frombuffer(_normalized(texts), np.uint8), len(texts))


def signatures(texts: Sequence[str]) -> np.ndarray:
  """uint32 [len(texts), BINS]: each document's signature."""
  n = len(texts)
  if not n:
    return np.zeros((0, BINS), np.uint32)
  if n > _CHUNK:
    return np.concatenate([signatures(texts[k:k + _CHUNK])
                           for k in range(0, n, _CHUNK)])
  hashes, counts = _word_hashes(texts)
  return _kernels().signed(hashes, counts, PROBES)


def band_keys(sigs: np.ndarray) -> np.ndarray:
  """uint64 [n, BANDS]: core/bands.keys of `sigs` (what `signatures`
  returned), in a compiled loop."""
  return _kernels().band_keys(bands.words(
      np.ascontiguousarray(sigs).view(np.uint8)))
