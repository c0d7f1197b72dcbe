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
"""

import dataclasses
import functools
import hashlib
import itertools
import math
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.utils.windowed_value import WindowedValue

from transforms.core import bands as bands_lib
from transforms.core import hold as hold_lib
from transforms.core import splits as split_lib

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
# Groups listed in the manifest.
MAX_LISTED = 10
_IDS_PER_GROUP = 10
# A bucket larger than this is verified a block of rows at a time.
_BLOCK = 512
# Pairs verified at once in such a block.
_PAIRS_PER_BLOCK = 1 << 18
# Entries the banding holds before it hands on what it has.
_FLUSH_ROWS = 1 << 16
# A content digest's bytes (128 bits).
_DIGEST_BYTES = 16


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
  return [(a, b, *values) for a, b, values in _verified(
      measure, state, len(sigs))]


def _verified(measure, state, n: int, lo: int = 0
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


def components(edges: Iterable[Tuple[str, str]]) -> Dict[str, str]:
  """{node: the smallest node of its group} for every node that has an
  edge; nodes without one are in no group."""
  parent: Dict[str, str] = {}

  def find(x: str) -> str:
    root = x
    while parent[root] != root:
      root = parent[root]
    while parent[x] != root:
      parent[x], x = root, parent[x]
    return root

  for a, b in edges:
    parent.setdefault(a, a)
    parent.setdefault(b, b)
    ra, rb = find(a), find(b)
    if ra != rb:
      # The smaller node is the root, so the result does not depend on the
      # order of the edges.
      if rb < ra:
        ra, rb = rb, ra
      parent[rb] = ra
  return {x: find(x) for x in parent}


# ------------------------------------------------------------ decisions --

# What a group's decisions know of one content: {'ids': {split: (smallest
# id, its label)}, 'splits': {split: examples}, 'labels': {label: examples},
# 'count': examples}. A content's examples are counted, not listed, so that
# what is gathered stays small whatever the number of copies.
Info = Dict[str, dict]


def new_info(ex_id, label: str, split: str) -> dict:
  """The Info of one example."""
  return {'ids': {split: (ex_id, label)}, 'splits': {split: 1},
          'labels': {label: 1}, 'count': 1}


def merge_info(a: Optional[dict], b) -> dict:
  """Two Infos of one content as one (a is changed; None for none); b may
  also be one example's (id, label, split)."""
  if isinstance(b, tuple):
    b = new_info(*b)
  if a is None:
    return {'ids': dict(b['ids']), 'splits': dict(b['splits']),
            'labels': dict(b['labels']), 'count': b['count']}
  for split, first in b['ids'].items():
    if split not in a['ids'] or first < a['ids'][split]:
      a['ids'][split] = first
  for key in ('splits', 'labels'):
    for k, n in b[key].items():
      a[key][k] = a[key].get(k, 0) + n
  a['count'] += b['count']
  return a


def first_id(info: dict):
  """The smallest id of a content."""
  return min(ex_id for ex_id, _ in info['ids'].values())


def _named_labels(labels: Dict[str, int]) -> str:
  return ', '.join(f'{label} ({n})' for label, n in sorted(labels.items()))


def decide(edges: Dict[Tuple[str, str], Tuple[int, float]],
           infos: Dict[str, dict], rules: NearDuplicateRules,
           label_conflicts: str, split_key: str, ratios
           ) -> Tuple[Dict[str, dict], dict]:
  """What to do with the contents of every near-duplicate group.

  Args:
    edges: {(digest a, digest b): values}, a < b: the verified pairs of
      contents, with their distances (fields_of(rules)).
    infos: {digest: Info} of every content with an edge.
    rules: The near-duplicate rules.
    label_conflicts: 'keep', 'drop' or 'majority' (core/contents.py).
    split_key: 'content', 'id' or 'input' (core/contents.py): how the
      group's split is chosen (a hash of its smallest digest or smallest
      id); with 'input' the input names the splits and nothing moves.
    ratios: The split ratios, [(name, ratio)] (unused with 'input').

  Returns:
    ({digest: {'group': key, 'split': split or None (where the input names
    it), 'drop': reason or None, 'drop_labels': {label: reason}}} of every
    content in a group: its examples go to `split`, and are dropped with
    `drop`, or those of a label in `drop_labels` with that reason; the
    summary for the manifest's contents section).
  """
  root_of = components(edges)
  groups: Dict[str, List[str]] = {}
  for digest, root in root_of.items():
    groups.setdefault(root, []).append(digest)
  edges_of: Dict[str, List[Tuple[str, str, int, float]]] = {}
  for (a, b), values in edges.items():
    edges_of.setdefault(root_of[a], []).append((a, b, values))
  measure = measure_of(rules)
  fields, noun = measure.fields, measure.noun
  decisions: Dict[str, dict] = {}
  listed = []
  summary = {'groups': 0, 'members': 0, 'contents': 0, 'edges': len(edges),
             'largest_group': 0, 'label_conflicts': 0,
             'conflicting_examples': 0, 'groups_across_splits': 0,
             'moved': 0, 'dropped': {'near_duplicates': 0,
                                     'label_conflicts': 0}}
  for root in sorted(groups):
    digests = sorted(groups[root])
    key = digests[0]
    size = sum(infos[d]['count'] for d in digests)
    if split_key == 'content':
      split = split_lib.assign_split(split_lib.content_split_key(key),
                                     list(ratios))
    elif split_key == 'id':
      split = split_lib.assign_split(min(first_id(infos[d]) for d in digests),
                                     list(ratios))
    else:
      split = None
    summary['groups'] += 1
    summary['members'] += size
    summary['contents'] += len(digests)
    summary['largest_group'] = max(summary['largest_group'], size)
    splits = {s for d in digests for s in infos[d]['splits']}
    if split is None and len(splits) > 1:
      summary['groups_across_splits'] += 1
    labels: Dict[str, int] = {}
    for d in digests:
      for label, n in infos[d]['labels'].items():
        labels[label] = labels.get(label, 0) + n
    whole: Dict[str, str] = {}  # digest -> reason
    by_label: Dict[str, str] = {}  # label -> reason
    if len(labels) > 1:
      summary['label_conflicts'] += 1
      summary['conflicting_examples'] += size
      named = _named_labels(labels)
      if label_conflicts == 'drop':
        reason = (f'label conflict: near-duplicate {noun} are labelled '
                  f'{named}')
        whole = {d: reason for d in digests}
      elif label_conflicts == 'majority':
        top = max(labels.values())
        winners = [label for label, n in labels.items() if n == top]
        if len(winners) > 1:
          reason = (f'label conflict with no majority label: near-duplicate '
                    f'{noun} are labelled {named}')
          whole = {d: reason for d in digests}
        else:
          reason = (f'label conflict: near-duplicate {noun} are labelled '
                    f'{named}; the majority label {winners[0]} is kept')
          by_label = {label: reason for label in labels
                      if label != winners[0]}
    for d in digests:
      info = infos[d]
      summary['dropped']['label_conflicts'] += info['count'] if d in whole \
          else sum(n for label, n in info['labels'].items()
                   if label in by_label)
    if rules.mode == 'drop':
      # The smallest content with an example left keeps its examples.
      alive = [d for d in digests if d not in whole and any(
          label not in by_label for label in infos[d]['labels'])]
      if alive:
        kept = alive[0]
        keeper = min(ex_id for ex_id, label in infos[kept]['ids'].values())
        for d in alive[1:]:
          whole[d] = f'near-duplicate of {keeper}'
          summary['dropped']['near_duplicates'] += sum(
              n for label, n in infos[d]['labels'].items()
              if label not in by_label)
    for d in digests:
      info = infos[d]
      if split is not None:
        summary['moved'] += sum(n for s, n in info['splits'].items()
                                if s != split)
      decisions[d] = {'group': key, 'split': split, 'drop': whole.get(d),
                      'drop_labels': {label: r for label, r in
                                      by_label.items()
                                      if label in info['labels']}}
    if len(listed) < MAX_LISTED:
      pairs = sorted(edges_of.get(root, []))
      firsts = sorted((first_id(infos[d]), d) for d in digests)
      listed.append({
          'key': key, 'split': split, 'examples': size,
          'ids': [ex_id for ex_id, _ in firsts][:_IDS_PER_GROUP],
          'labels': dict(sorted(labels.items())),
          'pairs': [{'a': first_id(infos[a]), 'b': first_id(infos[b]),
                     **dict(zip(fields, values))}
                    for a, b, values in pairs[:_IDS_PER_GROUP]]})
  summary['examples'] = listed
  return decisions, summary


def example_decision(decision: Optional[dict], label: str
                     ) -> Tuple[Optional[str], Optional[str]]:
  """(the split an example goes to, or None to keep its own; the reason
  it is dropped, or None) from its content's decision."""
  if decision is None:
    return None, None
  reason = decision['drop_labels'].get(label) or decision['drop']
  return decision['split'], reason


# ----------------------------------------------------------------- Beam --

# Runner groups the contents' Infos are spread over (by digest).
_INFO_GROUPS = 64


def _info_group(digest: str) -> int:
  return int(digest[:8], 16) % _INFO_GROUPS


class NearBatch(NamedTuple):
  """Entries of GatherNearDuplicates as columns (one element for a batch
  of examples, cheaper to move than a tuple per example)."""
  ids: list
  digests: List[str]
  labels: list
  splits: List[str]
  # uint8 [n, signature bytes]; with `usable`, only what the verification
  # reads of each (the measure's `carried`).
  signatures: np.ndarray
  # uint64 [n, tables]: each row's bucket in each table, when they were
  # found where the signatures were made (documents: text/signatures.py
  # band_keys); else the banding finds them.
  keys: Optional[np.ndarray] = None
  # bool [n]: the measure's `usable` of each row, found with `keys` where
  # the signatures were made, which then sends only their carried part
  # (documents: text/ranges.batch_keys); else the banding finds it.
  usable: Optional[np.ndarray] = None


def _as_batch(entries) -> NearBatch:
  """A NearBatch of a NearBatch or of a list of (id, content digest,
  label, split, signature)."""
  if isinstance(entries, NearBatch):
    return entries
  ids, digests, labels, splits, sigs = (list(c) for c in zip(*entries))
  return NearBatch(ids, digests, labels, splits, np.frombuffer(
      b''.join(sigs), np.uint8).reshape(len(sigs), -1))


class _BandFn(beam.DoFn):
  """Entries (lists of tuples, or NearBatch) -> per runner group of each
  table, one element per _FLUSH_ROWS entries (and at the end of a bundle):
  ((table, group), part), the part's buckets, what the verification needs
  of the signatures and the digests, as compact arrays (the runner's cost
  is per element, and each content is in every table); and, tagged
  'info', (info group, (digests, ids, labels, splits)): the entries as
  columns, from which the Infos of the few contents with an edge are made
  later (core/near_duplicates._InfosOfFn).

  With a `folder`, each flush writes its parts and columns to one file
  there (core/hold.py) and the elements carry only where they are in it:
  the runner then moves a few small elements per flush whatever the size
  of the dataset (the local runner keeps a grouping's input in memory),
  and this function holds at most _FLUSH_ROWS entries.
  """

  INFO = 'info'

  def __init__(self, rules: NearDuplicateRules,
               folder: Optional[str] = None):
    super().__init__()
    self._rules, self._folder = rules, folder

  def start_bundle(self):
    self._held: List[NearBatch] = []
    self._rows = 0

  def process(self, entries):
    batch = _as_batch(entries)
    if not len(batch.ids):
      return
    self._held.append(batch)
    self._rows += len(batch.ids)
    if self._rows >= _FLUSH_ROWS:
      yield from self._flush()

  def finish_bundle(self):
    window = (beam.transforms.window.GlobalWindow(),)
    for item in self._flush():
      if isinstance(item, beam.pvalue.TaggedOutput):
        yield beam.pvalue.TaggedOutput(item.tag, WindowedValue(
            item.value, 0, window))
      else:
        yield WindowedValue(item, 0, window)

  def _flush(self):
    held, self._held, self._rows = self._held, [], 0
    if not held:
      return []
    measure = measure_of(self._rules)
    digests = [d for b in held for d in b.digests]
    names = np.frombuffer(bytes.fromhex(''.join(digests)),
                          np.uint8).reshape(len(digests), -1)
    # (Batch by batch: the signatures, 256 bytes a document, are not
    # copied into one array.)
    compact = [b.usable is not None for b in held]
    if any(c and b.keys is None for c, b in zip(compact, held)):
      raise ValueError('a NearBatch with `usable` (its signatures carried '
                       'only) needs its `keys`')
    usable = np.concatenate([b.usable if c else measure.usable(b.signatures)
                             for c, b in zip(compact, held)])
    keys = np.concatenate([measure.keys(b.signatures) if b.keys is None
                           else b.keys for b in held])
    # What the verification reads of a row, once per row: its carried
    # signature and its digest.
    carried = np.concatenate([b.signatures if c else
                              measure.carried(b.signatures)
                              for c, b in zip(compact, held)])
    block = np.concatenate([carried, names], axis=1)
    if not usable.all():  # (almost every row is usable: no copy then)
      keys, block = keys[usable], block[usable]
    # A table's buckets, in a row of their own (not a column strided across
    # all the rows), and their runner groups.
    keys = np.ascontiguousarray(keys.T)
    groups = measure.group_of(keys).astype(np.uint8)
    spill = hold_lib.Spill(self._folder) if self._folder else None
    block = spill.put_rows(block) if spill else block
    rows = np.arange(keys.shape[1], dtype=np.uint32)
    out = []
    for t in range(measure.tables):
      buckets, group = keys[t], groups[t]
      # (A stable sort of small numbers is a radix sort.)
      order = np.argsort(group, kind='stable')
      starts = np.flatnonzero(np.r_[True, np.diff(group[order]) != 0])
      ends = np.r_[starts[1:], len(order)]
      for lo, hi in zip(starts.tolist(), ends.tolist()):
        idx = order[lo:hi]
        part = (block, buckets[idx], rows[idx])
        out.append(((t, int(group[idx[0]])),
                    spill.put(part) if spill else part))
    group_of = (names[:, :4].copy().view('>u4').ravel()
                % _INFO_GROUPS).astype(np.int64)
    order = np.argsort(group_of, kind='stable')
    starts = np.flatnonzero(np.r_[True, np.diff(group_of[order]) != 0])
    ends = np.r_[starts[1:], len(order)]
    columns = [np.asarray(c, object) for c in (
        [i for b in held for i in b.ids],
        [x for b in held for x in b.labels],
        [x for b in held for x in b.splits])]
    for lo, hi in zip(starts.tolist(), ends.tolist()):
      idx = order[lo:hi]
      part = (names[idx], *(c[idx].tolist() for c in columns))
      out.append(beam.pvalue.TaggedOutput(
          self.INFO, (int(group_of[idx[0]]),
                      spill.put(part) if spill else part)))
    if spill:
      spill.close()
    return out


def _pairs_of(size: int) -> Tuple[np.ndarray, np.ndarray]:
  """(i, j) of every pair i < j of range(size). NumPy's triu_indices makes
  a size x size mask each time, and the small sizes come back in every
  table: those are kept (all up to 64 hold 44,000 pairs)."""
  if size <= 64:
    return _small_pairs_of(size)
  return np.triu_indices(size, 1)


@functools.lru_cache(maxsize=None)
def _small_pairs_of(size: int) -> Tuple[np.ndarray, np.ndarray]:
  i, j = np.triu_indices(size, 1)
  i.setflags(write=False)
  j.setflags(write=False)
  return i, j


def _pairs_in_runs(starts: np.ndarray, ends: np.ndarray
                   ) -> Tuple[np.ndarray, np.ndarray]:
  """(i, j) of every pair i < j inside each run [start, end)."""
  sizes = ends - starts
  firsts, seconds = [], []
  for size in np.unique(sizes[sizes > 1]).tolist():
    at = starts[sizes == size]
    i, j = _pairs_of(size)
    firsts.append((at[:, None] + i[None, :]).ravel())
    seconds.append((at[:, None] + j[None, :]).ravel())
  if not firsts:
    return np.zeros(0, np.int64), np.zeros(0, np.int64)
  return np.concatenate(firsts), np.concatenate(seconds)


class _SpillReadingFn(beam.DoFn):
  """A DoFn that takes Spill references through one hold.Reader per
  bundle (self._reader), its files closed at the bundle's end."""

  def __init__(self):
    super().__init__()
    self._reader = None

  def start_bundle(self):
    self._reader = hold_lib.Reader()

  def finish_bundle(self):
    self._reader.close()

  def teardown(self):
    if self._reader is not None:
      self._reader.close()


class _PairsFn(_SpillReadingFn):
  """(runner group, parts) -> the verified pairs of its buckets: (digest a,
  digest b, values), a < b, the values being the pair's distances
  (fields_of). A part is (block of rows, buckets, row of each in the
  block); only the rows of buckets with more than one row are read from
  their blocks. A pair may come more than once (a content in several
  flushes); gathering keeps one."""

  def __init__(self, rules: NearDuplicateRules):
    super().__init__()
    self._rules = rules

  def process(self, group):
    _, parts = group
    measure = measure_of(self._rules)
    parts = [self._reader.take(p) for p in parts]
    buckets = np.concatenate([p[1] for p in parts])
    part_of = np.concatenate([np.full(len(p[1]), k, np.int64)
                              for k, p in enumerate(parts)])
    row_of = np.concatenate([p[2] for p in parts]).astype(np.int64)
    # (Any order within a bucket finds its pairs; NumPy's quicksort of
    # 64-bit keys is six times faster than its stable sort.)
    order = np.argsort(buckets)
    buckets = buckets[order]
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    ends = np.r_[starts[1:], len(buckets)]
    crowded = (ends - starts) > 1
    starts, ends = starts[crowded], ends[crowded]
    if not len(starts):
      return
    # The rows of buckets with a pair, read from their blocks.
    wanted = np.concatenate([np.arange(lo, hi) for lo, hi in zip(
        starts.tolist(), ends.tolist())])
    rows = self._rows(parts, part_of[order[wanted]], row_of[order[wanted]])
    width = rows.shape[1] - _DIGEST_BYTES
    carried, names = rows[:, :width], rows[:, width:]
    at = np.zeros(len(buckets), np.int64)
    at[wanted] = np.arange(len(wanted))
    starts, ends = at[starts], at[ends - 1] + 1
    state = measure.prepared(carried)
    # Small buckets (almost all) at once; a crowded one (many pictures
    # with one look: blank frames, one template; documents of one
    # boilerplate) a block of rows at a time, so that memory stays bounded.
    small = (ends - starts) <= _BLOCK
    found = []
    i, j = _pairs_in_runs(starts[small], ends[small])
    if len(i):
      i, j, values = measure.check(state, i, j)
      found.append(zip(i.tolist(), j.tolist(),
                       zip(*(v.tolist() for v in values))))
    for lo, hi in zip(starts[~small].tolist(), ends[~small].tolist()):
      run = measure.prepared(carried[lo:hi])
      # (A list now: a generator would read `lo` when it is consumed,
      # after the loop, and place every crowded bucket's pairs at the
      # last one's rows.)
      found.append([(lo + a, lo + b, v) for a, b, v in _verified(
          measure, run, hi - lo)])
    for a, b, values in itertools.chain.from_iterable(found):
      da, db = names[a].tobytes().hex(), names[b].tobytes().hex()
      if da == db:
        continue  # one content from two flushes
      yield (da, db, tuple(values)) if da < db else (db, da, tuple(values))

  def _rows(self, parts, part_of: np.ndarray, row_of: np.ndarray
            ) -> np.ndarray:
    """The rows (part_of[k], row_of[k]) of the parts' blocks, in order;
    each block read once."""
    out = None
    for k in np.unique(part_of).tolist():
      here = np.flatnonzero(part_of == k)
      wanted, back = np.unique(row_of[here], return_inverse=True)
      got = self._reader.take_rows(parts[k][0], wanted)[back]
      if out is None:
        out = np.empty((len(part_of), got.shape[1]), np.uint8)
      out[here] = got
    return out


class _InfosOfFn(_SpillReadingFn):
  """(info group, [('edge', digests) and ('info', columns)]) -> (digest,
  Info) of each content of the group that has an edge."""

  def process(self, group):
    _, items = group
    wanted, parts = set(), []
    for kind, value in items:
      if kind == 'edge':
        wanted.update(value)
      else:
        parts.append(value)
    if not wanted:
      return
    infos: Dict[str, dict] = {}
    for part in parts:
      names, ids, labels, splits = self._reader.take(part)
      for k, raw in enumerate(names):
        digest = raw.tobytes().hex()
        if digest in wanted:
          infos[digest] = merge_info(infos.get(digest),
                                     (ids[k], labels[k], splits[k]))
    for digest in sorted(infos):
      yield digest, infos[digest]


class _GatherFn(beam.CombineFn):
  """Verified pairs ((a, b, values)) and Infos ((digest, Info)) -> ({(a,
  b): values}, {digest: Info}): each pair once (it may meet in several
  tables)."""

  def create_accumulator(self):
    return {}, {}

  def add_input(self, acc, item):
    edges, infos = acc
    if len(item) == 3:
      a, b, values = item
      edges[(a, b)] = values
    else:
      digest, info = item
      infos[digest] = merge_info(infos.get(digest), info)
    return acc

  def merge_accumulators(self, accs):
    edges, infos = {}, {}
    for e, i in accs:
      edges.update(e)
      for digest, info in i.items():
        infos[digest] = merge_info(infos.get(digest), info)
    return edges, infos

  def extract_output(self, acc):
    return acc


class GatherNearDuplicates(beam.PTransform):
  """Lists of (id, content digest, label, split, signature) -> one element:
  ({(digest a, digest b): values}, {digest: Info}), the verified pairs
  with their distances (fields_of) and what is known of their contents.
  The signatures are of pictures or of documents, as the rules are. Ids may
  be any sortable value. With a `folder`, what is grouped waits there
  (see _BandFn)."""

  def __init__(self, rules: NearDuplicateRules,
               folder: Optional[str] = None):
    super().__init__()
    self._rules, self._folder = rules, folder

  def expand(self, entries):
    banded = entries | 'Bands' >> beam.ParDo(
        _BandFn(self._rules, self._folder)).with_outputs(
        _BandFn.INFO, main='bands')
    pairs = (banded.bands
             | 'GroupByBucket' >> beam.GroupByKey()
             | 'VerifyPairs' >> beam.ParDo(_PairsFn(self._rules)))
    wanted = pairs | 'DigestsOfPairs' >> beam.FlatMap(
        lambda p: [(_info_group(p[0]), ('edge', [p[0]])),
                   (_info_group(p[1]), ('edge', [p[1]]))])
    infos = banded[_BandFn.INFO] | 'Tagged' >> beam.Map(
        lambda kv: (kv[0], ('info', kv[1])))
    found = ((wanted, infos)
             | 'AllByDigest' >> beam.Flatten()
             | 'GroupByDigest' >> beam.GroupByKey()
             | 'InfosOfPairs' >> beam.ParDo(_InfosOfFn()))
    return ((pairs, found)
            | 'PairsAndInfos' >> beam.Flatten()
            | 'Gather' >> beam.CombineGlobally(_GatherFn()))


class NearDuplicateGroups(beam.PTransform):
  """Finds near-duplicate groups and decides what happens to their members.

  Input: lists of (id, content digest, label, split, signature), one entry
  per example (its first copy). Output: (decisions, summary), each one
  element: decide()'s {digest: decision} of every content in a group, and
  the manifest's near-duplicate counts.
  """

  def __init__(self, rules: NearDuplicateRules, label_conflicts: str,
               split_key: str, ratios, folder: Optional[str] = None):
    super().__init__()
    self._rules, self._conflicts = rules, label_conflicts
    self._split_key, self._ratios = split_key, list(ratios or [])
    self._folder = folder

  def expand(self, entries):
    rules, conflicts = self._rules, self._conflicts
    split_key, ratios = self._split_key, self._ratios
    gathered = entries | 'Gather' >> GatherNearDuplicates(rules, self._folder)

    def decided(acc):
      edges, infos = acc
      decisions, summary = decide(edges, infos, rules, conflicts,
                                  split_key, ratios)
      return decisions, {**rules.to_json(), **summary}

    both = gathered | 'Decide' >> beam.Map(decided)
    return (both | 'Decisions' >> beam.Map(lambda d: d[0]),
            both | 'Summary' >> beam.Map(lambda d: d[1]))
