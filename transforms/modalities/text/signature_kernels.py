"""The loops of text/signatures.py, compiled (Numba): a batch's word
hashes, its MinHash signatures from them, and their buckets in the
near-duplicate bands (core/bands.py). The definitions are those of
text/signatures.py's docstring and core/bands.py; these give the same
bytes as the NumPy array steps they replace
(tests/modalities/text/test_text_signatures.py holds them to recorded
signatures and to core/bands.keys), about 2.5 times as fast, with no
array per step. And, for the content digests the same processes find,
the token runs text/preprocessing._ascii_keys hashes (token_runs;
tests/modalities/text/test_text_preprocessing.py holds its digests to
the NumPy steps' and to each document's own tokens).

Compiled when this module is imported (for the argument types below), and
kept in Numba's cache next to it (or in the user's cache folder, or in
NUMBA_CACHE_DIR), so a process loads them in a fraction of a second after
the first; where Numba may write none of these, each process compiles
them (about 2 s). The text reader's worker processes import it
when they start (text/pipeline.py worker_modules), the launching process
only when it signs (text/signatures.py).
"""

import logging

import numba
import numpy as np

from transforms.core import bands
from transforms.core import mix


def _compiled(signature):
  """numba.njit for `signature`, kept in Numba's cache; compiled in each
  process instead when Numba finds no folder it may write its cache to
  (a read-only installation and home folder: NUMBA_CACHE_DIR names one)."""
  def compile_(fn):
    try:
      return numba.njit(signature, cache=True, nogil=True)(fn)
    except RuntimeError as e:
      if 'no locator available' not in str(e):
        raise
      logging.getLogger(__name__).info(
          'Numba has no folder to keep %s compiled in; it is compiled in '
          'each process (NUMBA_CACHE_DIR names a writable one)',
          fn.__name__)
      return numba.njit(signature, nogil=True)(fn)
  return compile_


# The polynomial base of a word's hash (text/signatures.py).
_BASE = np.uint64(0x100000001B3)
# A pair's hash: mix(first * _PAIR ^ second); a lone word's: mix(w ^ _ALONE).
_PAIR = np.uint64(0x9E3779B97F4A7C15)
_ALONE = np.uint64(0xD6E8FEB86659FD93)
_ONE = np.uint64(1)
# A document's signature has one bin per row of its bands (core/bands.py;
# text/signatures.BINS, which imports this module on first use). A
# shingle's top log2(bins) bits pick its bin, the next 32 are its value.
_BINS = bands.BANDS * bands.ROWS_PER_BAND
_BIN_BITS = _BINS.bit_length() - 1
assert 1 << _BIN_BITS == _BINS
_BIN_SHIFT = np.uint64(64 - _BIN_BITS)
_VALUE_SHIFT = np.uint64(64 - _BIN_BITS - 32)
_MASK32 = np.uint64(0xFFFFFFFF)
_EMPTY = bands.EMPTY
_SPACE = np.uint8(32)
_END = np.uint8(0)
# MurmurHash3's 64-bit finalizer: core/mix.py's, compiled for one value
# and inlined where it is called. (Numba's cache is keyed by this file
# only; the finalizer is fixed, as the recorded signatures test holds.)
_fmix64 = numba.njit(inline='always')(mix.fmix64)


# The normalized bytes, as np.frombuffer gives them (read-only).
_BYTES = numba.types.Array(numba.uint8, 1, 'C', readonly=True)


@_compiled(numba.types.Tuple((numba.uint64[::1], numba.int64[::1]))(
    _BYTES, numba.int64))
def word_hashes(data, documents):
  """(each word's hash, each document's number of words) of `documents`
  documents' normalized bytes (words split by spaces, documents by 0).

  A word's polynomial sum is carried byte by byte and zeroed, and its
  power reset to 1, by multiplying with whether the byte is a word's
  (0 or 1) rather than by a branch (words end where a branch cannot
  predict); the sum so far is written at the next word's place at every
  byte, and that place moves on after a word's last byte. Only a
  document's end branches. The sums are mixed in a loop of their own."""
  hashes = np.empty(data.shape[0] // 2 + 2, np.uint64)
  counts = np.zeros(documents, np.int64)
  words = 0  # words so far, all documents
  before = 0  # words of the documents before this one
  row = 0
  h = np.uint64(0)
  power = _ONE
  inside = 0  # whether the byte before was a word's
  for i in range(data.shape[0]):
    c = data[i]
    word = np.int64((c != _SPACE) & (c != _END))
    hashes[words] = h
    words += inside & (1 - word)
    kept = np.uint64(word)
    h = (h + (np.uint64(c) + _ONE) * power) * kept
    power = power * _BASE * kept + (_ONE - kept)
    inside = word
    if c == _END:
      counts[row] = words - before
      before = words
      row += 1
  hashes[words] = h
  words += inside
  counts[row] = words - before
  out = hashes[:words]
  for k in range(words):
    out[k] = _fmix64(out[k])
  return out, counts


@_compiled('uint32[:, ::1](uint64[::1], int64[::1], int64[:, ::1])')
def signed(hashes, counts, probes):
  """uint32 [documents, bins] signatures of the documents whose words
  hash to `hashes` (`counts` of them each, in order); `probes` [bins,
  probes] is each bin's probe sequence (text/signatures.PROBES). A
  document's bins are made in a row of their own, then densified: each
  empty bin takes the value of the first non-empty bin along its probe
  sequence, else of the row's first non-empty bin (a document without
  words stays empty)."""
  bins = probes.shape[0]
  sig = np.empty((counts.shape[0], bins), np.uint32)
  own = np.empty(bins, np.uint32)
  gaps = np.empty(bins, np.int64)  # the row's empty bins
  at = 0
  for row in range(counts.shape[0]):
    for j in range(bins):
      own[j] = _EMPTY
    n = counts[row]
    if n == 1:  # a lone word: one shingle
      mixed = _fmix64(hashes[at] ^ _ALONE)
      own[np.int64(mixed >> _BIN_SHIFT)] = np.uint32(
          (mixed >> _VALUE_SHIFT) & _MASK32)
    for k in range(n - 1):
      mixed = _fmix64((hashes[at + k] * _PAIR) ^ hashes[at + k + 1])
      b = np.int64(mixed >> _BIN_SHIFT)
      own[b] = min(own[b], np.uint32((mixed >> _VALUE_SHIFT) & _MASK32))
    at += n
    # The empty bins are listed (their count added, not branched on: a
    # bin is empty at random), then only they probe.
    empty = 0
    for j in range(bins):
      gaps[empty] = j
      empty += np.int64(own[j] == _EMPTY)
    for j in range(bins):
      sig[row, j] = own[j]
    if empty == 0 or empty == bins:
      continue
    first = 0
    while own[first] == _EMPTY:
      first += 1
    for e in range(empty):
      j = gaps[e]
      value = own[first]
      for k in range(probes.shape[1]):
        seen = own[probes[j, k]]
        if seen != _EMPTY:
          value = seen
          break
      sig[row, j] = value
  return sig


# The band layout (core/bands.py), as constants of the compiled loop,
# which reads every value of a signature and no more (Numba does not
# check its indices).
_BANDS = bands.BANDS
_WORDS_PER_BAND = bands.WORDS_PER_BAND
_BAND_PAIR = bands.PAIR


@_compiled('uint64[:, ::1](uint64[:, ::1])')
def band_keys(words):
  """uint64 [n, BANDS]: core/bands.keys of the signatures whose 64-bit
  words (core/bands.words) are `words`."""
  out = np.empty((words.shape[0], _BANDS), np.uint64)
  for row in range(words.shape[0]):
    for b in range(_BANDS):
      first = words[row, b * _WORDS_PER_BAND]
      second = words[row, b * _WORDS_PER_BAND + 1]
      out[row, b] = _fmix64((first * _BAND_PAIR + np.uint64(b)) ^
                            _fmix64(second))
  return out


# The separator of a content digest's tokens (text/preprocessing
# ._ascii_keys); documents end at _END.
_TOKEN_END = np.uint8(0x1F)


@_compiled(numba.types.Tuple((numba.uint8[::1], numba.int64[::1],
                              numba.int64[::1]))(_BYTES, numba.int64,
                                                 numba.int64))
def token_runs(data, documents, limit):
  """(kept bytes, begin, stop): the tokens of `documents` documents
  (`data`: their bytes, documents split by 0, tokens by runs of 0x1f),
  each document's first `limit` tokens joined by one 0x1f in
  kept[begin[d]:stop[d]]; what text/preprocessing._ascii_keys hashes.
  Whether a byte is kept, and a separator written before it, is added to
  the write position rather than branched on (where a token begins is
  not predictable); only a document's end and its (limit + 1)-th token
  branch."""
  kept = np.empty(data.shape[0] + 1, np.uint8)
  begin = np.zeros(documents, np.int64)
  stop = np.zeros(documents, np.int64)
  at = 0  # the write position in kept
  doc = 0
  count = 0  # tokens of the document so far
  inside = 0  # whether the byte before was a token's
  for i in range(data.shape[0]):
    c = data[i]
    if c == _END:
      if count <= limit:
        stop[doc] = at
      doc += 1
      begin[doc] = at
      count = 0
      inside = 0
      continue
    token = np.int64(c != _TOKEN_END)
    first = token & (1 - inside)  # a token's first byte
    count += first
    if first and count == limit + 1:
      stop[doc] = at  # the document's limit-th token ended here
    within = np.int64(count <= limit)
    kept[at] = _TOKEN_END
    at += first & np.int64(count > 1) & within
    kept[at] = c
    at += token & within
    inside = token
  if count <= limit:
    stop[doc] = at
  return kept, begin, stop
