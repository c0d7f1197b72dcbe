"""Deterministic split assignment from a stable key. No Beam in here.

An example's split depends only on its key and the ratios: by default the
digest of its content (core/contents.py), with --split_key id its id (the
relative input path, or file:row); for sensor rows its entity and time. So
reruns, other runners and other worker counts always put it in the same
split. The hash is SHA-256, not Python's `hash()`, which is salted
per process.
"""

import hashlib
from typing import List, Sequence, Tuple

import numpy as np

# Split names accepted from split folders or a manifest's split column.
SPLIT_ALIASES = {
    'train': 'train', 'training': 'train',
    'validation': 'validation', 'valid': 'validation', 'val': 'validation',
    'dev': 'validation',
    'test': 'test', 'testing': 'test',
}
KNOWN_SPLITS = ('train', 'validation', 'test')


def unit_hash(*parts: str) -> float:
  """A uniform number in [0, 1) from the SHA-256 of the joined parts."""
  digest = hashlib.sha256('\x1f'.join(parts).encode('utf-8')).digest()
  return int.from_bytes(digest[:8], 'big') / 2.0**64


def parse_ratios(text: str) -> List[Tuple[str, float]]:
  """Parses 'train=0.8,validation=0.1,test=0.1'.

  Args:
    text: Comma-separated name=ratio pairs.

  Returns:
    [(name, ratio)] in the order given.

  Raises:
    ValueError: With one sentence saying what is wrong.
  """
  pairs = []
  for item in text.split(','):
    item = item.strip()
    if not item:
      continue
    name, sep, value = item.partition('=')
    name = name.strip()
    if not sep or not name:
      raise ValueError(f'split {item!r} is not of the form name=ratio')
    try:
      ratio = float(value)
    except ValueError:
      raise ValueError(f'split ratio {value!r} of {name!r} is not a number'
                       ) from None
    if not 0 <= ratio <= 1:
      raise ValueError(f'split ratio of {name!r} must be between 0 and 1, '
                       f'got {ratio}')
    if name in dict(pairs):
      raise ValueError(f'split {name!r} is given twice')
    pairs.append((name, ratio))
  if not pairs:
    raise ValueError('no splits given')
  total = sum(r for _, r in pairs)
  if abs(total - 1.0) > 1e-6:
    raise ValueError(f'split ratios add up to {total:g}, not 1')
  return pairs


def content_split_key(digest: str) -> str:
  """What a content's split is a hash of (core/contents.py; here, without
  Beam, for worker processes)."""
  return 'content:' + digest


def assign_split(example_id: str, ratios: List[Tuple[str, float]]) -> str:
  """The split of an example, from the hash of its id."""
  u = unit_hash('split', example_id)
  cumulative = 0.0
  for name, ratio in ratios:
    cumulative += ratio
    if u < cumulative:
      return name
  # Rounding can leave u just above the last cumulative sum.
  return next(name for name, ratio in reversed(ratios) if ratio > 0)


def canonical_split(name: str) -> str:
  """Maps a split folder or column value to train/validation/test.

  Raises:
    ValueError: The name is not a known split.
  """
  key = name.strip().lower()
  if key not in SPLIT_ALIASES:
    raise ValueError(f'unknown split {name!r} (expected one of '
                     f'{", ".join(KNOWN_SPLITS)})')
  return SPLIT_ALIASES[key]


def hash_splits(ids: Sequence[str], ratios, names: Sequence[str]
                ) -> np.ndarray:
  """Split index per id, as assign_split gives it (each distinct id is
  hashed once). The bounds are searched with NumPy and repeated ids are
  found with a dict, not by sorting the ids: at a million rows per pass
  that sort cost more than the hashing."""
  ratios = list(ratios)
  index = {n: i for i, n in enumerate(names)}
  bounds, cumulative = [], 0.0
  for _, ratio in ratios:
    cumulative += ratio  # summed as assign_split sums them
    bounds.append(cumulative)
  # u below bounds[i] and not below the bounds before: split i; past the
  # last bound (rounding): the last split with a share, as assign_split.
  last = next(name for name, ratio in reversed(ratios) if ratio > 0)
  codes = np.array([index[name] for name, _ in ratios] + [index[last]],
                   np.int8)
  distinct = dict.fromkeys(ids)
  sha256, scale = hashlib.sha256, 2.0**64
  u = np.fromiter(
      (int.from_bytes(sha256(('split\x1f' + key).encode('utf-8')).digest()[:8],
                      'big') / scale for key in distinct),
      np.float64, len(distinct))
  per_id = codes[np.searchsorted(np.asarray(bounds), u, side='right')]
  if len(distinct) == len(ids):
    return per_id
  position = dict(zip(distinct, range(len(distinct))))
  return per_id[np.fromiter((position[key] for key in ids), np.int64,
                            len(ids))]
