"""Label names as every modality stores them (no Beam here: the readers'
worker processes import it).

A class is one class however the bytes of its name were written: Unicode
NFC, without surrounding whitespace. Names that differ only by case stay
separate classes ('US' and 'us' may be different things), and are
reported.
"""

import unicodedata
from typing import Iterable, List


def canonical(name: str) -> str:
  """'café' typed on one machine (NFC) and read from a macOS file name on
  another (NFD: 'cafe' and a combining accent), or with a stray space, is
  one name."""
  return unicodedata.normalize('NFC', name).strip()


def canonical_words(words: Iterable[str]) -> List[str]:
  """canonical() of each name of a list (an Arrow dictionary's words)."""
  return [canonical(w) for w in words]


def case_variants(names: Iterable[str]) -> List[List[str]]:
  """Groups of distinct names that differ only by case ('Cat', 'cat'),
  each sorted, the groups sorted."""
  groups = {}
  for name in set(names):
    groups.setdefault(name.casefold(), []).append(name)
  return sorted(sorted(g) for g in groups.values() if len(g) > 1)
