"""Near-duplicate groups from perceptual hashes, without Beam.

Two examples are near-duplicates when the Hamming distance between their
hashes is at most a threshold T. Candidates are found by bands: the hash's
bits are cut into T + 1 bands, and by the pigeonhole principle two hashes
within distance T agree exactly on at least one band, so grouping examples
by (band, band value) finds every pair within T (and some further apart,
which the full distance then rejects). Only the pairs found, the edges,
are gathered; the groups are their connected components (union-find).

A group's key is the smallest content key among its members, so a group,
like an exact copy, lands in one split whatever the order, runner or
worker count.
"""

from typing import Dict, Iterable, List, Sequence, Tuple

Edge = Tuple[str, str, int]  # (id a, id b, distance), a < b


def band_bounds(bits: int, threshold: int) -> List[Tuple[int, int]]:
  """[start, end) bit ranges of the threshold + 1 bands of a hash of
  `bits` bits, as even as they can be.

  Raises:
    ValueError: The threshold leaves bands of no bits.
  """
  bands = threshold + 1
  if threshold < 0 or bands > bits:
    raise ValueError(f'a Hamming threshold of {threshold} needs at most '
                     f'{bits - 1} for a {bits}-bit hash')
  bounds, start = [], 0
  for i in range(bands):
    size = bits // bands + (1 if i < bits % bands else 0)
    bounds.append((start, start + size))
    start += size
  return bounds


def band_keys(digest: bytes, bounds: Sequence[Tuple[int, int]]
              ) -> List[Tuple[int, int]]:
  """(band index, band value) of each band of a hash."""
  value = int.from_bytes(digest, 'big')
  bits = len(digest) * 8
  out = []
  for i, (start, end) in enumerate(bounds):
    out.append((i, (value >> (bits - end)) & ((1 << (end - start)) - 1)))
  return out


def hamming(a: bytes, b: bytes) -> int:
  """Bits that differ between two hashes of one length."""
  return (int.from_bytes(a, 'big') ^ int.from_bytes(b, 'big')).bit_count()


def pairs_within(members: Sequence[Tuple[str, bytes]], threshold: int
                 ) -> List[Edge]:
  """The pairs of one band bucket within the threshold, as edges (a < b)."""
  out = []
  members = sorted(set(members))
  for i, (a, ha) in enumerate(members):
    for b, hb in members[i + 1:]:
      if a == b:
        continue
      d = hamming(ha, hb)
      if d <= threshold:
        out.append((a, b, d))
  return out


def components(edges: Iterable[Edge]) -> Dict[str, str]:
  """{member: the smallest member of its group} for every id that has an
  edge; ids without one are in no group."""
  parent: Dict[str, str] = {}

  def find(x: str) -> str:
    root = x
    while parent[root] != root:
      root = parent[root]
    while parent[x] != root:
      parent[x], x = root, parent[x]
    return root

  for a, b, _ in edges:
    parent.setdefault(a, a)
    parent.setdefault(b, b)
    ra, rb = find(a), find(b)
    if ra != rb:
      # The smaller id is the root, so the result does not depend on the
      # order of the edges.
      if rb < ra:
        ra, rb = rb, ra
      parent[rb] = ra
  return {x: find(x) for x in parent}


def group_keys(edges: Iterable[Edge], content_keys: Dict[str, str]
               ) -> Dict[str, str]:
  """{member id: its group's key}: the smallest content key among the
  group's members (content_keys: {member id: content key})."""
  root_of = components(edges)
  smallest: Dict[str, str] = {}
  for member, root in root_of.items():
    key = content_keys[member]
    if root not in smallest or key < smallest[root]:
      smallest[root] = key
  return {member: smallest[root] for member, root in root_of.items()}
