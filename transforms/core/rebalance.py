"""Class rebalancing: how many copies of each example to keep. No Beam here.

Decisions depend only on the seed, the example id and the class counts, so
they are the same on every runner and every rerun.

- oversample: every class grows to the size of the largest. Each example is
  kept floor(target / n) times, plus once more with probability
  (target mod n) / n, decided by a seeded hash of its id.
- undersample: every class shrinks to the size of the smallest; each example
  is kept with probability target / n, decided the same way.
- weight: nothing is resampled; each example carries the weight
  total / (classes * n), so every class weighs the same in the loss.

Resampling by hash keeps memory flat (no class is ever collected in one
place); the price is that counts after resampling are equal in expectation,
not to the example. The manifest records the counts actually written.
"""

from typing import Dict, Iterable, Tuple

from transforms.core.splits import unit_hash

MODES = ('none', 'oversample', 'undersample', 'weight')


def copies(mode: str, example_id: str, label: str, counts: Dict[str, int],
           seed: int) -> int:
  """How many times an example is written (0 drops it).

  Args:
    mode: One of MODES.
    example_id: The example's stable id.
    label: Its class.
    counts: Examples per class in this split before rebalancing.
    seed: Rebalancing seed.

  Returns:
    The number of copies.
  """
  if mode in ('none', 'weight') or not counts:
    return 1
  n = counts[label]
  target = max(counts.values()) if mode == 'oversample' else min(
      counts.values())
  whole, rest = divmod(target, n)
  u = unit_hash('rebalance', str(seed), example_id)
  return whole + (1 if u < rest / n else 0)


def class_weight(label: str, counts: Dict[str, int]) -> float:
  """Weight that makes every class weigh the same (total / (k * n_label))."""
  total = sum(counts.values())
  return total / (len(counts) * counts[label]) if counts[label] else 0.0


def expected_after(mode: str, counts: Dict[str, int]) -> Dict[str, float]:
  """Expected class counts after rebalancing (for tests and reports)."""
  if mode in ('none', 'weight') or not counts:
    return {k: float(v) for k, v in counts.items()}
  target = max(counts.values()) if mode == 'oversample' else min(
      counts.values())
  return {k: float(target) if v else 0.0 for k, v in counts.items()}



class Plan:
  """The rebalancing decisions of one run, the same for every modality.

  Args:
    mode: One of MODES.
    splits: The splits to rebalance (the others keep every example once).
    seed: Rebalancing seed.
    class_counts: ((split, label), examples before rebalancing) pairs.
  """

  def __init__(self, mode: str, splits: Iterable[str], seed: int,
               class_counts: Iterable[Tuple[Tuple[str, str], int]]):
    self._mode, self._splits, self._seed = mode, set(splits), seed
    self._counts: Dict[str, Dict[str, int]] = {}
    for (split, label), n in class_counts:
      self._counts.setdefault(split, {})[label] = n

  def mode(self, split: str) -> str:
    """The mode that applies to `split`."""
    return self._mode if split in self._splits else 'none'

  def copies(self, split: str, example_id: str, label: str) -> int:
    """How many times the example is written (0 drops it)."""
    return copies(self.mode(split), example_id, label,
                  self._counts.get(split, {}), self._seed)

  def weight(self, split: str, label: str) -> float:
    """The example's weight (1.0 unless the split is rebalanced by
    weight)."""
    if self.mode(split) != 'weight':
      return 1.0
    return class_weight(label, self._counts.get(split, {}))
