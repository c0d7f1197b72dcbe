"""The bands in which document signatures meet (core/near_duplicates.py):
BANDS bands of ROWS_PER_BAND consecutive values of a signature
(text/signatures.py, BINS = BANDS * ROWS_PER_BAND uint32 values), and the
bucket of a signature in each band, a mix of the band's values; and what
the verification of a pair reads of a signature (`carried`: a byte of
each value) and which signatures are of documents with words (`usable`).

NumPy only, so that the text reader's worker processes, which make the
signatures, can find their buckets there too (in compiled loops,
text/signature_kernels.py, held equal to `keys` by a test) and the runner
does not, and send the runner only what it reads of them.
"""

import numpy as np

from transforms.core import mix

BANDS = 16
ROWS_PER_BAND = 4
# A band is two 64-bit words (two values each): its bucket is
# mix((first * PAIR + band) ^ mix(second)).
WORDS_PER_BAND = ROWS_PER_BAND // 2
assert WORDS_PER_BAND == 2
PAIR = np.uint64(0x9E3779B97F4A7C15)
# Every value of the signature of a document without words (defined here
# for text/signatures.py, which signs such documents so).
EMPTY = np.uint32(0xFFFFFFFF)


def words(raw: np.ndarray) -> np.ndarray:
  """uint64 [n, BANDS * WORDS_PER_BAND]: the signatures' bytes (uint8 [n,
  4 * BINS], little-endian uint32 values) as 64-bit words, two values a
  word (a view when `raw` is contiguous)."""
  return np.ascontiguousarray(raw).view('<u8')


def keys(raw: np.ndarray) -> np.ndarray:
  """uint64 [n, BANDS]: each signature's bucket in each band (`raw` as
  `words` takes it)."""
  w = words(raw)
  out = np.empty((len(w), BANDS), np.uint64)
  for b in range(BANDS):
    first = w[:, b * WORDS_PER_BAND]
    second = w[:, b * WORDS_PER_BAND + 1]
    out[:, b] = mix.fmix64((first * PAIR + np.uint64(b)) ^
                           mix.fmix64(second))
  return out


def usable(raw: np.ndarray) -> np.ndarray:
  """bool [n]: the signatures (`raw` as `words` takes it) of documents
  with words (one without has every value EMPTY)."""
  return ~(np.ascontiguousarray(raw).view('<u4') == EMPTY).all(axis=1)


def carried(raw: np.ndarray) -> np.ndarray:
  """uint8 [n, values]: the low byte of each value of the signatures
  (`raw` as `words` takes it), from which the verification estimates a
  pair's similarity."""
  return np.ascontiguousarray(raw).view('<u4').astype(np.uint8)
