"""Near-duplicate groups: pictures that are the same picture saved again.

A picture's signature (image/processing.signature_of_pixels) is its 64-bit
DCT hash (pHash) and a 4x4 colour thumbnail, both of the picture as it is
stored. Two pictures of different content are near-duplicates when

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
pair that never meets is not grouped. Only the verified pairs, the edges,
and what is known of their contents are gathered in one place; the groups
are their connected components (union-find), and a group's key is its
smallest content digest, so a group lands in one split whatever the
order, runner or worker count.

Exact copies (one content digest) are one node: they are grouped, and
dropped or kept, by core/contents.py as before.
"""

import dataclasses
import hashlib
import itertools
import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.utils.windowed_value import WindowedValue

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
# Runner groups per table: a group holds the candidates of 1/64 of one
# table's buckets.
_GROUPS_PER_TABLE = 64
# Groups listed in the manifest.
MAX_LISTED = 10
_IDS_PER_GROUP = 10
# Rows of a bucket verified at once (memory: rows x bucket size).
_BLOCK = 512


@dataclasses.dataclass(frozen=True)
class NearDuplicateRules:
  """How a run treats near-duplicate pictures.

  Attributes:
    mode: 'group' (every member in the group's split), 'drop' (keep the
      content of smallest digest, dead-letter the others) or 'off'.
    hash_distance: Largest Hamming distance between two pHashes (of 64
      bits) of near-duplicates.
    thumb_distance: Largest mean difference between two normalized
      thumbnails of near-duplicates.
  """
  mode: str = 'group'
  hash_distance: int = HASH_DISTANCE
  thumb_distance: float = THUMB_DISTANCE

  @property
  def on(self) -> bool:
    return self.mode != 'off'

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


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
  `sigs` within both of the rules' distances."""
  if len(sigs) < 2:
    return []
  return _verified(*_split_signatures(sigs), rules)


def _verified(hashes: np.ndarray, thumbs: np.ndarray,
              rules: NearDuplicateRules) -> List[Tuple[int, int, int, float]]:
  """verified_pairs of uint64 hashes and normalized thumbnails."""
  n = len(hashes)
  out = []
  for lo in range(0, n - 1, _BLOCK):
    hi = min(n, lo + _BLOCK)
    hd = np.bitwise_count(hashes[lo:hi, None] ^ hashes[None, :])
    rows, cols = np.nonzero(hd <= rules.hash_distance)
    keep = cols > rows + lo
    rows, cols = rows[keep], cols[keep]
    if not len(rows):
      continue
    td = np.abs(thumbs[rows + lo] - thumbs[cols]).mean(axis=1)
    ok = td <= rules.thumb_distance
    for r, c, h, t in zip((rows + lo)[ok].tolist(), cols[ok].tolist(),
                          hd[rows[ok], cols[ok]].tolist(), td[ok].tolist()):
      out.append((r, c, int(h), round(float(t), 4)))
  return out


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
    edges: {(digest a, digest b): (hash distance, thumbnail distance)},
      a < b: the verified pairs of contents.
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
  for (a, b), (hd, td) in edges.items():
    edges_of.setdefault(root_of[a], []).append((a, b, hd, td))
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
        reason = (f'label conflict: near-duplicate pictures are labelled '
                  f'{named}')
        whole = {d: reason for d in digests}
      elif label_conflicts == 'majority':
        top = max(labels.values())
        winners = [label for label, n in labels.items() if n == top]
        if len(winners) > 1:
          reason = (f'label conflict with no majority label: near-duplicate '
                    f'pictures are labelled {named}')
          whole = {d: reason for d in digests}
        else:
          reason = (f'label conflict: near-duplicate pictures are labelled '
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
                     'hash_distance': hd, 'thumb_distance': td}
                    for a, b, hd, td in pairs[:_IDS_PER_GROUP]]})
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


class _BandFn(beam.DoFn):
  """Lists of entries -> per runner group of each table, one element per
  bundle: ((table, group), part), the part's buckets, signatures and
  digests as compact arrays (the runner's cost is per element, and each
  content is in every table); and, tagged 'info', (info group, [(digest,
  Info)]). Copies of one content in a bundle are one entry.

  With a `folder`, each bundle writes its parts and Infos to one file
  there (core/hold.py) and the elements carry only where they are in it:
  the runner then moves a few small elements per bundle whatever the size
  of the dataset (the local runner keeps a grouping's input in memory).
  """

  INFO = 'info'

  def __init__(self, folder: Optional[str] = None):
    super().__init__()
    self._folder = folder

  def start_bundle(self):
    self._by_digest: Dict[str, list] = {}

  def process(self, entries):
    for ex_id, digest, label, split, sig in entries:
      known = self._by_digest.get(digest)
      if known is None:
        # One example's Info as a tuple: most contents have one example,
        # and a bundle holds one per content until it ends.
        self._by_digest[digest] = [sig, (ex_id, label, split)]
        continue
      if isinstance(known[1], tuple):
        known[1] = new_info(*known[1])
      merge_info(known[1], (ex_id, label, split))

  def finish_bundle(self):
    if not self._by_digest:
      return
    window = (beam.transforms.window.GlobalWindow(),)
    digests = list(self._by_digest)
    raw = np.frombuffer(b''.join(self._by_digest[d][0] for d in digests),
                        np.uint8).reshape(len(digests), -1)
    keys = table_keys(raw[:, :PHASH_BYTES])
    shift = max(0, BITS_PER_TABLE - int(math.log2(_GROUPS_PER_TABLE)))
    names = np.frombuffer(b''.join(bytes.fromhex(d) for d in digests),
                          np.uint8).reshape(len(digests), -1)
    spill = hold_lib.Spill(self._folder) if self._folder else None
    out = []
    for t in range(TABLES):
      buckets = keys[:, t]
      groups = buckets >> shift
      order = np.argsort(groups, kind='stable')
      starts = np.flatnonzero(np.r_[True, np.diff(groups[order]) != 0])
      ends = np.r_[starts[1:], len(order)]
      for lo, hi in zip(starts.tolist(), ends.tolist()):
        idx = order[lo:hi]
        part = (buckets[idx].astype(np.uint16), raw[idx], names[idx])
        out.append(((t, int(groups[idx[0]])),
                    spill.put(part) if spill else part))
    infos: Dict[int, list] = {}
    for d in digests:
      infos.setdefault(_info_group(d), []).append((d, self._by_digest[d][1]))
    self._by_digest = {}
    info_out = [(group, spill.put(part) if spill else part)
                for group, part in infos.items()]
    if spill:
      spill.close()
    for item in out:
      yield WindowedValue(item, 0, window)
    for item in info_out:
      yield beam.pvalue.TaggedOutput(self.INFO, WindowedValue(item, 0,
                                                              window))


def _pairs_in_runs(starts: np.ndarray, ends: np.ndarray
                   ) -> Tuple[np.ndarray, np.ndarray]:
  """(i, j) of every pair i < j inside each run [start, end)."""
  sizes = ends - starts
  firsts, seconds = [], []
  for size in np.unique(sizes[sizes > 1]).tolist():
    at = starts[sizes == size]
    i, j = np.triu_indices(size, 1)
    firsts.append((at[:, None] + i[None, :]).ravel())
    seconds.append((at[:, None] + j[None, :]).ravel())
  if not firsts:
    return np.zeros(0, np.int64), np.zeros(0, np.int64)
  return np.concatenate(firsts), np.concatenate(seconds)


class _PairsFn(beam.DoFn):
  """(runner group, parts) -> the verified pairs of its buckets: (digest a,
  digest b, hash distance, thumbnail distance), a < b. A pair may come
  more than once (a content in several bundles); gathering keeps one."""

  def __init__(self, rules: NearDuplicateRules):
    super().__init__()
    self._rules = rules

  def process(self, group):
    _, parts = group
    parts = [hold_lib.take(p) for p in parts]
    buckets = np.concatenate([p[0] for p in parts])
    raw = np.concatenate([p[1] for p in parts])
    names = np.concatenate([p[2] for p in parts])
    order = np.argsort(buckets, kind='stable')
    buckets, raw, names = buckets[order], raw[order], names[order]
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    ends = np.r_[starts[1:], len(buckets)]
    hashes, thumbs = _split_raw(raw)
    # Small buckets (almost all) at once; a crowded one (many pictures
    # with one look: blank frames, one template) a block of rows at a
    # time, so that memory stays bounded.
    small = (ends - starts) <= _BLOCK
    found = []
    i, j = _pairs_in_runs(starts[small], ends[small])
    if len(i):
      hd = np.bitwise_count(hashes[i] ^ hashes[j])
      near = hd <= self._rules.hash_distance
      i, j, hd = i[near], j[near], hd[near]
      td = np.abs(thumbs[i] - thumbs[j]).mean(axis=1)
      ok = td <= self._rules.thumb_distance
      found.append(zip(i[ok].tolist(), j[ok].tolist(), hd[ok].tolist(),
                       td[ok].tolist()))
    for lo, hi in zip(starts[~small].tolist(), ends[~small].tolist()):
      found.append((lo + a, lo + b, h, t) for a, b, h, t in _verified(
          hashes[lo:hi], thumbs[lo:hi], self._rules))
    for a, b, h, t in itertools.chain.from_iterable(found):
      da, db = names[a].tobytes().hex(), names[b].tobytes().hex()
      if da == db:
        continue  # one content from two bundles
      t = round(float(t), 4)
      yield (da, db, int(h), t) if da < db else (db, da, int(h), t)


class _InfosOfFn(beam.DoFn):
  """(info group, [('edge', digests) and ('info', [(digest, Info)])]) ->
  (digest, Info) of each content of the group that has an edge."""

  def process(self, group):
    _, items = group
    wanted, infos = set(), {}
    for kind, value in items:
      if kind == 'edge':
        wanted.update(value)
      else:
        for digest, info in hold_lib.take(value):
          infos.setdefault(digest, []).append(info)
    for digest in sorted(wanted):
      merged = None
      for info in infos.get(digest, ()):
        merged = merge_info(merged, info)
      if merged is not None:
        yield digest, merged


class _GatherFn(beam.CombineFn):
  """Verified pairs ((a, b, hash d, thumb d)) and Infos ((digest, Info))
  -> ({(a, b): (hash d, thumb d)}, {digest: Info}): each pair once (it may
  meet in several tables)."""

  def create_accumulator(self):
    return {}, {}

  def add_input(self, acc, item):
    edges, infos = acc
    if len(item) == 4:
      a, b, hd, td = item
      edges[(a, b)] = (hd, td)
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
  ({(digest a, digest b): (hash distance, thumbnail distance)}, {digest:
  Info}), the verified pairs and what is known of their contents. Ids may
  be any sortable value. With a `folder`, what is grouped waits there
  (see _BandFn)."""

  def __init__(self, rules: NearDuplicateRules,
               folder: Optional[str] = None):
    super().__init__()
    self._rules, self._folder = rules, folder

  def expand(self, entries):
    banded = entries | 'Bands' >> beam.ParDo(_BandFn(self._folder)).with_outputs(
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
