"""Generates photo-like labelled image folders for demos, tests and benchmarks.

Nothing is downloaded: every image is made here from a seeded random number
generator, so the same arguments always give the same files.

    python -m pipelines.sample_data --output /tmp/images --count 200

writes ``/tmp/images/<class>/<class>_00000.jpg`` ... with imbalanced classes
and sizes between 300x200 and 640x480.
"""

import argparse
import os
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np
from PIL import Image

DEFAULT_CLASSES = ('cat', 'dog', 'bird', 'horse')
# Share of the images each class gets, in the order above (imbalanced).
DEFAULT_WEIGHTS = (0.5, 0.25, 0.15, 0.10)
_TINTS = np.array([[1.0, 0.8, 0.6], [0.6, 0.8, 1.0], [0.7, 1.0, 0.7],
                   [1.0, 1.0, 0.6], [0.9, 0.6, 0.9], [0.6, 1.0, 1.0]])


def class_counts(count: int, weights: Sequence[float]) -> List[int]:
  """Splits `count` images over classes by weight; every class gets >= 1."""
  weights = np.asarray(weights, np.float64) / np.sum(weights)
  counts = np.maximum(1, np.floor(weights * count).astype(int))
  counts[0] += count - counts.sum()
  return [int(c) for c in counts]


def photo_like(rng: np.random.Generator, width: int, height: int,
               tint: np.ndarray) -> Image.Image:
  """A smooth random scene with texture: compresses like a photograph."""
  coarse = rng.random((rng.integers(3, 7), rng.integers(3, 7), 3)) * 255
  base = Image.fromarray(coarse.astype(np.uint8), 'RGB').resize(
      (width, height), Image.Resampling.BICUBIC)
  arr = np.asarray(base, np.float32) * tint
  # Fine texture, generated small and tiled so big images stay cheap to make.
  tile = rng.normal(0, 12, (64, 64, 3)).astype(np.float32)
  reps = (height // 64 + 1, width // 64 + 1, 1)
  arr += np.tile(tile, reps)[:height, :width]
  return Image.fromarray(arr.clip(0, 255).astype(np.uint8), 'RGB')


def generate(output: str, count: int, classes: Sequence[str] = DEFAULT_CLASSES,
             weights: Optional[Sequence[float]] = None, seed: int = 0,
             min_size=(300, 200), max_size=(640, 480),
             quality: int = 90) -> Dict[str, int]:
  """Writes `count` JPEG images into `output/<class>/`.

  Args:
    output: Root folder (created if missing).
    count: Total number of images.
    classes: Class folder names.
    weights: Relative class frequencies (default: imbalanced 50/25/15/10).
    seed: Random seed; equal arguments give equal files.
    min_size: Smallest (width, height).
    max_size: Largest (width, height).
    quality: JPEG quality.

  Returns:
    Images written per class.
  """
  if weights is None:
    weights = (DEFAULT_WEIGHTS if len(classes) == len(DEFAULT_WEIGHTS) else
               [1.0] * len(classes))
  counts = class_counts(count, weights)
  rng = np.random.default_rng(seed)
  written = {}
  for ci, (name, n) in enumerate(zip(classes, counts)):
    folder = os.path.join(output, name)
    os.makedirs(folder, exist_ok=True)
    for i in range(n):
      w = int(rng.integers(min_size[0], max_size[0] + 1))
      h = int(rng.integers(min_size[1], max_size[1] + 1))
      img = photo_like(rng, w, h, _TINTS[ci % len(_TINTS)])
      img.save(os.path.join(folder, f'{name}_{i:05d}.jpg'), quality=quality)
    written[name] = n
  return written


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--output', required=True, help='Folder to write into.')
  parser.add_argument('--count', type=int, default=200,
                      help='Number of images (default: 200).')
  parser.add_argument('--seed', type=int, default=0,
                      help='Random seed (default: 0).')
  args = parser.parse_args(argv)
  if args.count < 1:
    print('--count must be at least 1.', file=sys.stderr)
    return 2
  written = generate(args.output, args.count, seed=args.seed)
  print(f'wrote {sum(written.values())} images to {args.output}: {written}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
