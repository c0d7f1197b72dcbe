"""Near-duplicate groups: pictures that are the same picture saved again,
documents that are the same text written again.

Pictures. A picture's signature (image/signatures.signature_of_pixels) is
its 64-bit DCT hash (pHash) and a 4x4 colour thumbnail, both of the picture
as it is stored. Two pictures of different content are near-duplicates
when

- their hashes differ in at most `hash_distance` bits (Hamming distance),
  and
- their thumbnails, each shifted to mean 0 and divided by its spread (its
  standard deviation plus 8 levels, so that a flat picture is not
  stretched), differ by at most `thumb_distance` on average. A brightness
  or contrast change moves neither; a picture of other colours or layout
  in the same tones as another (which pHash alone confuses, as it sees
  only grey levels) moves the thumbnail.

Candidate pairs are found by locality-sensitive hashing, as Beam
groupings: TABLES fixed samples of BITS_PER_TABLE of the hash's 64 bits;
pictures whose hashes agree on every sampled bit of one table meet in one
group, where every pair is verified with both measures. A pair at Hamming
distance d meets in at least one table with probability
1 - (1 - C(64 - d, 10) / C(64, 10))^20: 1.0000 up to d = 4, 0.9953 at
d = 8, 0.968 at the default 10, 0.890 at 12 (`candidate_probability`); a
pair that never meets is not grouped.

Documents. A document's signature (text/signatures.py) is a MinHash of
BINS values over its pairs of consecutive words; two documents agree on a
value with probability equal to the Jaccard similarity of their word-pair
sets. They are near-duplicates when the share of values they agree on,
the estimated similarity, is at least `similarity`. Candidates meet in
one of BANDS bands of ROWS_PER_BAND values (the standard MinHash LSH): a
pair of similarity J meets with probability 1 - (1 - J^4)^16: 0.64 at
0.5, 0.89 at 0.6, 0.988 at 0.7, 0.9998 at 0.8
(`text_candidate_probability`). A band carries a byte of each value for
the verification (a chance agreement of 1/256 is taken out of the
estimate).

Only the verified pairs, the edges, and what is known of their contents
are gathered in one place; the groups are their connected components
(union-find), and a group's key is its smallest content digest, so a
group lands in one split whatever the order, runner or worker count.

Exact copies (one content digest) are one node: they are grouped, and
dropped or kept, by core/contents.py as before.

The decisions taken on the groups are in core/near_duplicate_decisions.py,
the Beam steps that find them in core/near_duplicate_pipeline.py.
"""

import dataclasses
import hashlib
import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from transforms.core import bands as bands_lib


MODES = ('group', 'drop', 'off')
# The defaults, from benchmarks/near_duplicate_thresholds.py (see
# docs/splits.md).
HASH_DISTANCE = 10
THUMB_DISTANCE = 0.15
HASH_BITS = 64
PHASH_BYTES = 8
TABLES = 20
BITS_PER_TABLE = 10
# Documents: the default estimated Jaccard similarity of near-duplicates
# (benchmarks/text_near_duplicate_thresholds.py), and the bands.
SIMILARITY = 0.5
BANDS = bands_lib.BANDS
ROWS_PER_BAND = bands_lib.ROWS_PER_BAND
# Runner groups per table: a group holds the candidates of 1/8 of one
# table's buckets (at most 256: group numbers are sorted as bytes). Each
# group costs a call that reads its parts; with 64 a table, those calls
# were most of the verification of 10,000 pictures (0.26 s, 0.18 with 8).
# 160 groups for pictures, 128 for documents, still spread over a
# cluster's workers.
_GROUPS_PER_TABLE = 8
# Pairs verified at once in such a block.
_PAIRS_PER_BLOCK = 1 << 18


@dataclasses.dataclass(frozen=True)
class NearDuplicateRules:
  """How a run treats near-duplicate pictures.

  Attributes:
    mode: 'group' (every member in the group's split), 'drop' (keep the
      content of smallest digest, dead-letter the others) or 'off'.
    hash_distance: Largest Hamming distance between two pHashes (of 64
      bits) of near-duplicate pictures (None for documents).
    thumb_distance: Largest mean difference between two normalized
      thumbnails of near-duplicate pictures (None for documents).
    similarity: Smallest estimated Jaccard similarity of the word pairs of
      near-duplicate documents (None for pictures).
  """
  mode: str = 'group'
  hash_distance: Optional[int] = HASH_DISTANCE
  thumb_distance: Optional[float] = THUMB_DISTANCE
  similarity: Optional[float] = None

  @property
  def on(self) -> bool:
    return self.mode != 'off'

  @property
  def documents(self) -> bool:
    """Whether these are the rules of documents (else of pictures)."""
    return self.similarity is not None

  def to_json(self) -> dict:
    return {k: v for k, v in dataclasses.asdict(self).items()
            if v is not None}


def document_rules(mode: str = 'group', similarity: float = SIMILARITY
                   ) -> NearDuplicateRules:
  """The NearDuplicateRules of documents."""
  return NearDuplicateRules(mode=mode, hash_distance=None,
                            thumb_distance=None, similarity=similarity)


def _table_bits() -> np.ndarray:
  """[TABLES, BITS_PER_TABLE] bit positions, fixed forever (a SHA-256
  order, not a random generator whose stream a library may change)."""
  tables = []
  for t in range(TABLES):
    order = sorted(range(HASH_BITS), key=lambda i: hashlib.sha256(
        f'near-duplicate table {t} bit {i}'.encode()).digest())
    tables.append(sorted(order[:BITS_PER_TABLE]))
  return np.asarray(tables, np.int64)


TABLE_BITS = _table_bits()


def candidate_probability(distance: int) -> float:
  """The probability that two hashes `distance` bits apart meet in at
  least one table."""
  same = math.comb(HASH_BITS - distance, BITS_PER_TABLE) / math.comb(
      HASH_BITS, BITS_PER_TABLE)
  return 1.0 - (1.0 - same) ** TABLES


def text_candidate_probability(similarity: float) -> float:
  """The probability that two documents of Jaccard similarity
  `similarity` meet in at least one band."""
  return 1.0 - (1.0 - similarity ** ROWS_PER_BAND) ** BANDS


def table_keys(hashes: np.ndarray) -> np.ndarray:
  """[n, TABLES] bucket of each hash in each table (uint8 [n, 8] hashes)."""
  bits = np.unpackbits(hashes.reshape(len(hashes), PHASH_BYTES), axis=1)
  picked = bits[:, TABLE_BITS]  # [n, TABLES, BITS_PER_TABLE]
  weights = (1 << np.arange(BITS_PER_TABLE - 1, -1, -1)).astype(np.int64)
  return picked.astype(np.int64) @ weights


def _split_signatures(sigs: Sequence[bytes]) -> Tuple[np.ndarray, np.ndarray]:
  """(uint64 hashes [n], normalized float32 thumbnails [n, k])."""
  return _split_raw(np.frombuffer(b''.join(sigs), np.uint8).reshape(
      len(sigs), -1))


def _split_raw(raw: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """_split_signatures of signatures as the rows of a uint8 array."""
  hashes = raw[:, :PHASH_BYTES].copy().view('>u8').ravel().astype(np.uint64)
  return hashes, normalized_thumbs(raw[:, PHASH_BYTES:])


def normalized_thumbs(thumbs: np.ndarray) -> np.ndarray:
  """Thumbnails (uint8 [n, k]) shifted to mean 0 and divided by their
  spread (standard deviation + 8)."""
  t = thumbs.astype(np.float32)
  mean = t.mean(axis=1, keepdims=True)
  spread = t.std(axis=1, keepdims=True) + 8.0
  return (t - mean) / spread


def distances(sig_a: bytes, sig_b: bytes) -> Tuple[int, float]:
  """(hash distance, thumbnail distance) between two signatures."""
  hashes, thumbs = _split_signatures([sig_a, sig_b])
  return (int(np.bitwise_count(hashes[0] ^ hashes[1])),
          float(np.abs(thumbs[0] - thumbs[1]).mean()))


def verified_pairs(sigs: Sequence[bytes], rules: NearDuplicateRules
                   ) -> List[Tuple[int, int, int, float]]:
  """(i, j, hash distance, thumbnail distance), i < j, of every pair of
  picture signatures `sigs` within both of the rules' distances (for
  documents: (i, j, estimated similarity))."""
  if len(sigs) < 2:
    return []
  measure = measure_of(rules)
  raw = np.frombuffer(b''.join(sigs), np.uint8).reshape(len(sigs), -1)
  state = measure.prepared(measure.carried(raw))
  return [(a, b, *values) for a, b, values in verified(
      measure, state, len(sigs))]


def verified(measure, state, n: int, lo: int = 0
             ) -> List[Tuple[int, int, tuple]]:
  """(i, j, values), i < j, of every verified pair of rows lo..n-1 of
  `state`, a block of rows at a time (memory: rows x n)."""
  out = []
  rows_per_block = max(1, _PAIRS_PER_BLOCK // max(n - lo, 1))
  cols = np.arange(lo, n)
  for first in range(lo, n - 1, rows_per_block):
    rows = np.arange(first, min(n - 1, first + rows_per_block))
    i = np.repeat(rows, len(cols))
    j = np.tile(cols, len(rows))
    keep = j > i
    i, j, values = measure.check(state, i[keep], j[keep])
    out.extend(zip(i.tolist(), j.tolist(), zip(*(v.tolist()
                                                 for v in values))))
  return out


class _Pictures:
  """How picture signatures meet (TABLES tables of sampled pHash bits) and
  are verified (both distances)."""

  noun = 'pictures'
  fields = ('hash_distance', 'thumb_distance')
  tables = TABLES

  def __init__(self, rules: NearDuplicateRules):
    self.rules = rules

  @staticmethod
  def keys(raw: np.ndarray) -> np.ndarray:
    """uint64 [n, tables]: each signature's bucket in each table."""
    return table_keys(raw[:, :PHASH_BYTES]).astype(np.uint64)

  @staticmethod
  def group_of(keys: np.ndarray) -> np.ndarray:
    return (keys >> np.uint64(max(0, BITS_PER_TABLE - int(math.log2(
        _GROUPS_PER_TABLE))))).astype(np.int64)

  @staticmethod
  def usable(raw: np.ndarray) -> np.ndarray:
    return np.ones(len(raw), bool)

  @staticmethod
  def carried(raw: np.ndarray) -> np.ndarray:
    return raw

  @staticmethod
  def prepared(carried: np.ndarray):
    return _split_raw(carried)

  def check(self, state, i: np.ndarray, j: np.ndarray):
    """(i, j, [hash distances, thumbnail distances]) of the pairs (i[k],
    j[k]) within both distances."""
    hashes, thumbs = state
    hd = np.bitwise_count(hashes[i] ^ hashes[j])
    near = hd <= self.rules.hash_distance
    i, j, hd = i[near], j[near], hd[near]
    td = np.abs(thumbs[i] - thumbs[j]).mean(axis=1)
    ok = td <= self.rules.thumb_distance
    return i[ok], j[ok], [hd[ok].astype(np.int64),
                          np.round(td[ok].astype(np.float64), 4)]


class _Documents:
  """How document signatures (text/signatures.py: uint32 values) meet
  (BANDS bands of ROWS_PER_BAND values) and are verified (the estimated
  similarity, from a byte of each value)."""

  noun = 'documents'
  fields = ('similarity',)
  tables = BANDS
  # A chance agreement of two bytes of different values.
  _CHANCE = 1.0 / 256

  def __init__(self, rules: NearDuplicateRules):
    self.rules = rules

  @staticmethod
  def keys(raw: np.ndarray) -> np.ndarray:
    """uint64 [n, BANDS]: each signature's bucket in each band, a mix of
    the band's ROWS_PER_BAND values (core/bands.py)."""
    return bands_lib.keys(raw)

  @staticmethod
  def group_of(keys: np.ndarray) -> np.ndarray:
    return (keys >> np.uint64(64 - int(math.log2(_GROUPS_PER_TABLE)))
            ).astype(np.int64)

  @staticmethod
  def usable(raw: np.ndarray) -> np.ndarray:
    """Documents with words (one without has every value empty)."""
    return bands_lib.usable(raw)

  @staticmethod
  def carried(raw: np.ndarray) -> np.ndarray:
    return bands_lib.carried(raw)

  @staticmethod
  def prepared(carried: np.ndarray):
    return carried

  def check(self, state, i: np.ndarray, j: np.ndarray):
    """(i, j, [estimated similarities]) of the pairs at least as similar
    as the rules ask."""
    agree = (state[i] == state[j]).mean(axis=1)
    estimate = np.clip((agree - self._CHANCE) / (1 - self._CHANCE), 0, 1)
    ok = estimate >= self.rules.similarity - 1e-9
    return i[ok], j[ok], [np.round(estimate[ok], 4)]


def measure_of(rules: NearDuplicateRules):
  """How the signatures of the rules' kind meet and are verified."""
  return _Documents(rules) if rules.documents else _Pictures(rules)


def fields_of(rules: NearDuplicateRules) -> Tuple[str, ...]:
  """The names of an edge's values (what a pair's distance is)."""
  return measure_of(rules).fields
