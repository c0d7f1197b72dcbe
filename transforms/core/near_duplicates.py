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
pair that never meets is not grouped. Only the verified pairs, the edges, are gathered in one
place; the groups are their connected components (union-find), and a
group's key is its smallest content digest, so a group lands in one split
whatever the order, runner or worker count.

Exact copies (one content digest) are one node: they are grouped, and
dropped or kept, by core/contents.py as before.
"""

import dataclasses
import hashlib
import math
from typing import Dict, Iterable, List, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.utils.windowed_value import WindowedValue

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

Member = Tuple[str, str, str]  # (example id, label, split)


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


def hamming(a: bytes, b: bytes) -> int:
  """Bits that differ between two hashes of one length."""
  return (int.from_bytes(a, 'big') ^ int.from_bytes(b, 'big')).bit_count()


def _split_signatures(sigs: Sequence[bytes]) -> Tuple[np.ndarray, np.ndarray]:
  """(uint64 hashes [n], normalized float32 thumbnails [n, k])."""
  raw = np.frombuffer(b''.join(sigs), np.uint8).reshape(len(sigs), -1)
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
  n = len(sigs)
  if n < 2:
    return []
  hashes, thumbs = _split_signatures(sigs)
  out = []
  for lo in range(0, n - 1, _BLOCK):
    hi = min(n, lo + _BLOCK)
    hd = np.bitwise_count(hashes[lo:hi, None] ^ hashes[None, :])
    close = hd <= rules.hash_distance
    rows, cols = np.nonzero(close)
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


def _named_labels(labels: Dict[str, int]) -> str:
  return ', '.join(f'{label} ({n})' for label, n in sorted(labels.items()))


def decide(edges: Dict[Tuple[str, str], Tuple[int, float]],
           members: Dict[str, Sequence[Member]], rules: NearDuplicateRules,
           label_conflicts: str, split_key: str, ratios
           ) -> Tuple[Dict[str, dict], dict]:
  """What to do with the members of every near-duplicate group.

  Args:
    edges: {(digest a, digest b): (hash distance, thumbnail distance)},
      a < b: the verified pairs of contents.
    members: {digest: [(id, label, split)]} of every content with an edge.
    rules: The near-duplicate rules.
    label_conflicts: 'keep', 'drop' or 'majority' (core/contents.py).
    split_key: 'content', 'id' or 'input' (core/contents.py): how the
      group's split is chosen (a hash of its smallest digest or smallest
      id); with 'input' the input names the splits and nothing moves.
    ratios: The split ratios, [(name, ratio)] (unused with 'input').

  Returns:
    ({id: {'group': key, 'split': split, 'drop': reason or None}} of every
    member, the summary for the manifest's contents section).
  """
  root_of = components(edges)
  groups: Dict[str, List[str]] = {}
  for digest, root in root_of.items():
    groups.setdefault(root, []).append(digest)
  decisions: Dict[str, dict] = {}
  listed = []
  summary = {'groups': 0, 'members': 0, 'contents': 0, 'edges': len(edges),
             'largest_group': 0, 'label_conflicts': 0,
             'conflicting_examples': 0, 'groups_across_splits': 0,
             'moved': 0, 'dropped': {'near_duplicates': 0,
                                     'label_conflicts': 0}}
  edges_of: Dict[str, List[Tuple[str, str, int, float]]] = {}
  for (a, b), (hd, td) in edges.items():
    edges_of.setdefault(root_of[a], []).append((a, b, hd, td))
  for root in sorted(groups):
    digests = sorted(groups[root])
    group_members = sorted((m, d) for d in digests for m in set(members[d]))
    ids = [m[0] for m, _ in group_members]
    key = digests[0]
    if split_key == 'content':
      split = split_lib.assign_split(split_lib.content_split_key(key),
                                     list(ratios))
    elif split_key == 'id':
      split = split_lib.assign_split(min(ids), list(ratios))
    else:
      split = None
    summary['groups'] += 1
    summary['members'] += len(group_members)
    summary['contents'] += len(digests)
    summary['largest_group'] = max(summary['largest_group'],
                                   len(group_members))
    if len({m[2] for m, _ in group_members}) > 1 and split is None:
      summary['groups_across_splits'] += 1
    labels: Dict[str, int] = {}
    for (_, label, _), _ in group_members:
      labels[label] = labels.get(label, 0) + 1
    dropped: Dict[str, str] = {}
    keep_labels = set(labels)
    if len(labels) > 1:
      summary['label_conflicts'] += 1
      summary['conflicting_examples'] += len(group_members)
      named = _named_labels(labels)
      if label_conflicts == 'drop':
        keep_labels = set()
        reason = (f'label conflict: near-duplicate pictures are labelled '
                  f'{named}')
      elif label_conflicts == 'majority':
        top = max(labels.values())
        winners = [label for label, n in labels.items() if n == top]
        if len(winners) > 1:
          keep_labels = set()
          reason = (f'label conflict with no majority label: near-duplicate '
                    f'pictures are labelled {named}')
        else:
          keep_labels = {winners[0]}
          reason = (f'label conflict: near-duplicate pictures are labelled '
                    f'{named}; the majority label {winners[0]} is kept')
      for (ex_id, label, _), _ in group_members:
        if label not in keep_labels:
          dropped[ex_id] = reason
      summary['dropped']['label_conflicts'] += len(dropped)
    if rules.mode == 'drop':
      survivors = [(d, m) for m, d in group_members if m[0] not in dropped]
      if survivors:
        kept_digest = min(d for d, _ in survivors)
        keeper = min(m[0] for d, m in survivors if d == kept_digest)
        for d, m in survivors:
          if d != kept_digest:
            dropped[m[0]] = f'near-duplicate of {keeper}'
            summary['dropped']['near_duplicates'] += 1
    for (ex_id, _, member_split), _ in group_members:
      final = member_split if split is None else split
      if final != member_split:
        summary['moved'] += 1
      decisions[ex_id] = {'group': key, 'split': final,
                          'drop': dropped.get(ex_id)}
    if len(listed) < MAX_LISTED:
      pairs = sorted(edges_of.get(root, []))
      listed.append({
          'key': key, 'split': split,
          'ids': ids[:_IDS_PER_GROUP],
          'labels': [m[1] for m, _ in group_members][:_IDS_PER_GROUP],
          'pairs': [{'a': members[a][0][0], 'b': members[b][0][0],
                     'hash_distance': hd, 'thumb_distance': td}
                    for a, b, hd, td in pairs[:_IDS_PER_GROUP]]})
  summary['examples'] = listed
  return decisions, summary


def empty_summary(rules: NearDuplicateRules) -> dict:
  """The manifest's near-duplicate counts of a run that found none."""
  _, summary = decide({}, {}, rules, 'keep', 'input', [])
  return {**rules.to_json(), **summary}


# ----------------------------------------------------------------- Beam --

Entry = Tuple[str, str, str, str, bytes]  # (id, digest, label, split, sig)


class _BandFn(beam.DoFn):
  """Lists of entries -> (runner group, (table buckets, digests, sigs,
  members)), one element per runner group a bundle has entries for (the
  runner's cost is per element). Copies of one content in a bundle are one
  entry with all their members."""

  def start_bundle(self):
    self._by_digest: Dict[str, Tuple[bytes, List[Member]]] = {}

  def process(self, entries):
    for ex_id, digest, label, split, sig in entries:
      known = self._by_digest.get(digest)
      if known is None:
        self._by_digest[digest] = (sig, [(ex_id, label, split)])
      else:
        known[1].append((ex_id, label, split))

  def finish_bundle(self):
    if not self._by_digest:
      return
    digests = list(self._by_digest)
    sigs = [self._by_digest[d][0] for d in digests]
    raw = np.frombuffer(b''.join(s[:PHASH_BYTES] for s in sigs), np.uint8)
    keys = table_keys(raw.reshape(len(digests), PHASH_BYTES))
    shift = max(0, BITS_PER_TABLE - int(math.log2(_GROUPS_PER_TABLE)))
    out: Dict[Tuple[int, int], list] = {}
    for t in range(TABLES):
      for i, bucket in enumerate(keys[:, t].tolist()):
        part = out.setdefault((t, bucket >> shift), [])
        part.append((bucket, digests[i], sigs[i], self._by_digest[digests[i]][1]))
    self._by_digest = {}
    for key, part in out.items():
      yield WindowedValue((key, part), 0, (beam.transforms.window.GlobalWindow(),))


class _PairsFn(beam.DoFn):
  """(runner group, parts) -> the verified pairs of its buckets: (digest a,
  digest b, hash distance, thumbnail distance, members a, members b)."""

  def __init__(self, rules: NearDuplicateRules):
    super().__init__()
    self._rules = rules

  def process(self, group):
    _, parts = group
    buckets: Dict[int, Dict[str, Tuple[bytes, set]]] = {}
    for part in parts:
      for bucket, digest, sig, members in part:
        entries = buckets.setdefault(bucket, {})
        if digest in entries:
          entries[digest][1].update(members)
        else:
          entries[digest] = (sig, set(members))
    for entries in buckets.values():
      if len(entries) < 2:
        continue
      digests = sorted(entries)
      for i, j, hd, td in verified_pairs(
          [entries[d][0] for d in digests], self._rules):
        a, b = digests[i], digests[j]
        yield (a, b, hd, td, sorted(entries[a][1]), sorted(entries[b][1]))


class _EdgesFn(beam.CombineFn):
  """Verified pairs -> ({(a, b): (hash d, thumb d)}, {digest: members}):
  each pair once (it may meet in several tables)."""

  def create_accumulator(self):
    return {}, {}

  def add_input(self, acc, pair):
    edges, members = acc
    a, b, hd, td, ma, mb = pair
    edges[(a, b)] = (hd, td)
    for d, m in ((a, ma), (b, mb)):
      members.setdefault(d, set()).update(m)
    return acc

  def merge_accumulators(self, accs):
    edges, members = {}, {}
    for e, m in accs:
      edges.update(e)
      for d, ms in m.items():
        members.setdefault(d, set()).update(ms)
    return edges, members

  def extract_output(self, acc):
    edges, members = acc
    return edges, {d: sorted(m) for d, m in members.items()}


class GatherNearDuplicates(beam.PTransform):
  """Lists of (id, content digest, label, split, signature) -> one element:
  ({(digest a, digest b): (hash distance, thumbnail distance)}, {digest:
  [(id, label, split)]}), the verified pairs and the members of their
  contents. Ids may be any sortable value."""

  def __init__(self, rules: NearDuplicateRules):
    super().__init__()
    self._rules = rules

  def expand(self, entries):
    return (entries
            | 'Bands' >> beam.ParDo(_BandFn())
            | 'GroupByBucket' >> beam.GroupByKey()
            | 'VerifyPairs' >> beam.ParDo(_PairsFn(self._rules))
            | 'GatherEdges' >> beam.CombineGlobally(_EdgesFn()))


class NearDuplicateGroups(beam.PTransform):
  """Finds near-duplicate groups and decides what happens to their members.

  Input: lists of (id, content digest, label, split, signature), one entry
  per example (its first copy). Output: (decisions, summary), each one
  element: {id: {'group', 'split', 'drop'}} of every member of a group
  (the split it goes to, and the dead-letter reason when it is dropped),
  and the manifest's near-duplicate counts.
  """

  def __init__(self, rules: NearDuplicateRules, label_conflicts: str,
               split_key: str, ratios):
    super().__init__()
    self._rules, self._conflicts = rules, label_conflicts
    self._split_key, self._ratios = split_key, list(ratios or [])

  def expand(self, entries):
    rules, conflicts = self._rules, self._conflicts
    split_key, ratios = self._split_key, self._ratios
    gathered = entries | 'Gather' >> GatherNearDuplicates(rules)

    def decided(acc):
      edges, members = acc
      decisions, summary = decide(edges, members, rules, conflicts,
                                  split_key, ratios)
      return decisions, {**rules.to_json(), **summary}

    both = gathered | 'Decide' >> beam.Map(decided)
    return (both | 'Decisions' >> beam.Map(lambda d: d[0]),
            both | 'Summary' >> beam.Map(lambda d: d[1]))
