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
  """Split index per id from the SHA-256 split hash (each distinct id is
  hashed once)."""
  index = {n: i for i, n in enumerate(names)}
  distinct, inverse = np.unique(np.asarray(ids, dtype=object).astype(str),
                                return_inverse=True)
  per_id = np.array([index[assign_split(key, list(ratios))]
                     for key in distinct.tolist()], np.int8)
  return per_id[inverse] if len(per_id) else np.zeros(0, np.int8)
