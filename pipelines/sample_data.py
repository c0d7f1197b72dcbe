"""Generates labelled sample inputs for demos, tests and benchmarks.

Nothing is downloaded: every file is made here from a seeded random number
generator, so the same arguments always give the same files.

    python -m pipelines.sample_data --output /tmp/images --count 200

writes ``/tmp/images/<class>/<class>_00000.jpg`` ... with imbalanced classes
and sizes between 300x200 and 640x480. ``--oddities`` adds what real
folders hold: PNGs with transparency, a JPEG cut short (a dead letter) and
two near-duplicates of one photo (a smaller JPEG, a brighter PNG).

    python -m pipelines.sample_data --modality text --output /tmp/text
    python -m pipelines.sample_data --modality sensor --output /tmp/sensor

write ``quotes.csv`` (short documents in four topics, with exact and
near repeats, a quoted line break and an empty text) and ``logs/`` (three
accelerometer log files of eight devices, rotated by time, each repeating
the last 5 rows of the one before, with a 5 s dropout of one device and one
row whose timestamp cannot be read).
"""

import argparse
import csv
import io
import os
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageEnhance

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


def add_oddities(output: str, seed: int = 0) -> List[str]:
  """Adds what real image folders hold to a generated one: three PNGs with
  transparency (a shape on a transparent background, opaque or
  half-transparent colour), a JPEG cut short, which the pipeline
  dead-letters, and two near-duplicates of the first class's first picture (downloaded again:
  resized to 85% and saved as JPEG quality 80; and brightened, as a PNG),
  which the pipeline keeps in that picture's split. Returns the files
  written, relative to `output`."""
  rng = np.random.default_rng(seed + 1)
  classes = sorted(d for d in os.listdir(output)
                   if os.path.isdir(os.path.join(output, d)))
  written = []
  for i, name in enumerate(classes[:3]):
    # A shape of its own in each (one outline in other colours would be
    # near-duplicates across classes: a label conflict the sample does
    # not mean to show).
    img = Image.new('RGBA', (200, 160), (0, 0, 0, 0))
    colour = tuple((rng.random(3) * 255).astype(int).tolist()) + (
        255 if i == 0 else 128,)
    draw = ImageDraw.Draw(img)
    if i == 0:
      draw.rectangle((50, 40, 150, 120), fill=colour)
    elif i == 1:
      draw.ellipse((20, 20, 110, 140), fill=colour)
    else:
      draw.polygon([(100, 10), (190, 150), (10, 150)], fill=colour)
    rel = os.path.join(name, f'{name}_transparent_{i}.png')
    img.save(os.path.join(output, rel))
    written.append(rel)
  whole = io.BytesIO()
  photo_like(rng, 320, 240, _TINTS[0]).save(whole, 'JPEG', quality=90)
  rel = os.path.join(classes[0], f'{classes[0]}_cut_short.jpg')
  with open(os.path.join(output, rel), 'wb') as f:
    f.write(whole.getvalue()[:len(whole.getvalue()) // 2])
  written.append(rel)
  first = sorted(n for n in os.listdir(os.path.join(output, classes[0]))
                 if n.endswith('.jpg') and 'cut_short' not in n)[0]
  with Image.open(os.path.join(output, classes[0], first)) as img:
    original = img.convert('RGB')
  stem = os.path.splitext(first)[0]
  w, h = original.size
  rel = os.path.join(classes[0], f'{stem}_downloaded_again.jpg')
  original.resize((w * 85 // 100, h * 85 // 100), Image.LANCZOS).save(
      os.path.join(output, rel), 'JPEG', quality=80)
  written.append(rel)
  rel = os.path.join(classes[0], f'{stem}_brighter.png')
  ImageEnhance.Brightness(original).enhance(1.15).save(
      os.path.join(output, rel))
  written.append(rel)
  return written


_TOPICS = {
    'weather': ('rain', 'cloud', 'wind', 'storm', 'sun', 'snow', 'cold',
                'warm', 'sky', 'fog'),
    'sport': ('goal', 'match', 'team', 'ball', 'run', 'score', 'coach',
              'field', 'win', 'race'),
    'food': ('bread', 'soup', 'salt', 'cook', 'taste', 'apple', 'cheese',
             'bake', 'meal', 'spice'),
    'music': ('song', 'drum', 'tune', 'sing', 'band', 'note', 'piano',
              'beat', 'voice', 'choir'),
}
_COMMON = ('the', 'a', 'is', 'and', 'of', 'to', 'in', 'we', 'it', 'all')


def generate_text(output: str, count: int = 400, seed: int = 0) -> str:
  """Writes `output/quotes.csv` (columns text, label): `count` short
  documents in four topics, with repeats as real collections have them
  (exact copies; a copy in capitals with other punctuation, whose tokens
  differ but whose words do: a near-duplicate), one text with
  a quoted line break and one empty text (a dead letter). Returns the
  file's path."""
  rng = np.random.default_rng(seed)
  topics = sorted(_TOPICS)
  rows = []
  for _ in range(count):
    label = topics[int(rng.integers(len(topics)))]
    words = [(_TOPICS[label] if rng.random() < 0.5 else _COMMON)[
        int(rng.integers(10))] for _ in range(int(rng.integers(4, 16)))]
    rows.append((' '.join(words).capitalize() + '.', label))
  for i in range(0, count // 10):  # exact repeats
    rows.append(rows[i * 7 % count])
  for i in range(0, count // 20):  # the same words, other case and marks
    text, label = rows[i * 11 % count]
    rows.append((text.upper().rstrip('.') + '!', label))
  rows.append(('Rain and wind,\nthen sun.', 'weather'))
  rows.append(('', 'music'))
  order = rng.permutation(len(rows))
  os.makedirs(output, exist_ok=True)
  path = os.path.join(output, 'quotes.csv')
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.writer(f)
    writer.writerow(['text', 'label'])
    for i in order:
      writer.writerow(rows[i])
  return path


def generate_sensor(output: str, seconds: int = 60, hz: int = 20,
                    devices: int = 8, seed: int = 0) -> List[str]:
  """Writes `output/logs/accel-<n>.csv`: `seconds` of 3-axis accelerometer
  rows at `hz` from `devices` devices, interleaved in time order as one
  logger writes them, rotated into three files, each of which starts by
  repeating the last 5 rows of the one before; the second device drops out
  for 5 s in the middle; the activity label changes every 20 s; one row's
  timestamp cannot be read (a dead letter). Returns the files' paths."""
  rng = np.random.default_rng(seed)
  start = np.datetime64('2026-11-02T08:00:00', 'ms')
  rows = []
  dropout = range((seconds // 2 - 2) * hz, (seconds // 2 + 3) * hz)
  for step in range(seconds * hz):
    for device in (f'unit-{d + 1:02d}' for d in range(devices)):
      if device == 'unit-02' and step in dropout:
        continue
      label = ('walk', 'sit', 'run')[(step // (20 * hz)) % 3]
      amp = {'walk': 1.0, 'sit': 0.1, 'run': 2.5}[label]
      t = step / hz
      ax, ay, az = (amp * np.sin(2 * np.pi * 1.5 * t + k) +
                    rng.normal(0, 0.05) for k in range(3))
      stamp = str(start + np.timedelta64(int(t * 1000), 'ms')) + 'Z'
      rows.append((stamp, device, f'{ax:.4f}', f'{ay:.4f}',
                   f'{az + 9.81:.4f}', label))
  rows[len(rows) // 2] = ('not a time',) + rows[len(rows) // 2][1:]
  folder = os.path.join(output, 'logs')
  os.makedirs(folder, exist_ok=True)
  paths = []
  per_file = -(-len(rows) // 3)
  for n in range(3):
    path = os.path.join(folder, f'accel-{n + 1}.csv')
    with open(path, 'w', newline='', encoding='utf-8') as f:
      writer = csv.writer(f)
      writer.writerow(['time', 'device', 'ax', 'ay', 'az', 'activity'])
      # A rotated log starts by repeating the last rows of the one before.
      writer.writerows(rows[max(0, n * per_file - 5):(n + 1) * per_file])
    paths.append(path)
  return paths


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--modality', default='image',
                      choices=('image', 'text', 'sensor'),
                      help='What to generate (default: image).')
  parser.add_argument('--output', required=True, help='Folder to write into.')
  parser.add_argument('--count', type=int, default=200,
                      help='Number of images or documents (default: 200).')
  parser.add_argument('--seed', type=int, default=0,
                      help='Random seed (default: 0).')
  parser.add_argument('--oddities', action='store_true',
                      help='Images: also PNGs with transparency and a JPEG '
                      'cut short.')
  args = parser.parse_args(argv)
  if args.count < 1:
    print('--count must be at least 1.', file=sys.stderr)
    return 2
  if args.modality == 'text':
    path = generate_text(args.output, args.count, seed=args.seed)
    print(f'wrote {path}')
    return 0
  if args.modality == 'sensor':
    paths = generate_sensor(args.output, seed=args.seed)
    print(f'wrote {len(paths)} log files to {os.path.dirname(paths[0])}')
    return 0
  written = generate(args.output, args.count, seed=args.seed)
  extra = add_oddities(args.output, args.seed) if args.oddities else []
  print(f'wrote {sum(written.values()) + len(extra)} images to '
        f'{args.output}: {written}' +
        (f', and {len(extra)} odd ones' if extra else ''))
  return 0


if __name__ == '__main__':
  sys.exit(main())
