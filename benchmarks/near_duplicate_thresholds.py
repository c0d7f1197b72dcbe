"""How far apart perceptual hashes of real near-duplicate pictures are, and
how close those of unrelated pictures of the same class come: the
measurement behind the default near-duplicate threshold for images.

    python benchmarks/near_duplicate_thresholds.py [--hash-size 8]
        [--max-distance 24] [--results PATH | --no-results]

Pictures (benchmarks/real_images.py): the 1,911 Twemoji clip-art PNGs
(64x64, transparent), labelled by emoji category, and scikit-image's 26
sample photographs. Every picture is decoded by the pipeline's own decoder
at its own size (transforms/modalities/image/processing.decode_and_resize:
transparency composited onto white, the default background), as the pipeline
stores it, and hashed with imagehash's DCT hash (pHash) of `--hash-size`
squared bits. Then, per picture, the copies real collections hold:

  jpeg80           saved again as JPEG, quality 80
  resize85         resized to 85% (Lanczos)
  resize85+jpeg80  both: a second download of the same picture
  resize50         a thumbnail at half size
  crop3            3% cut off every edge
  brighter, darker brightness times 1.15 and 0.85
  mirrored         flipped left to right (a different picture for pHash;
                   reported, not aimed at)

For each threshold T (Hamming distance <= T is "near-duplicate") the table
gives the share of copies found (per kind) and two error rates among
unrelated pictures: the share of same-class pairs within T, and the share
of pictures that have at least one unrelated same-class picture within T
(those would be grouped, and split, with it). Skin-tone variants of one
emoji (one drawing in five colours) are reported apart: within T they are
grouped, which is arguably right.

Takes about a minute on one core. A run at the defaults rewrites its
section of benchmarks/RESULTS.md (--results PATH writes it whatever the
settings; --no-results nothing).
"""

import argparse
import collections
import io
import os
import sys
import time

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # pylint: disable=wrong-import-position
import real_images  # pylint: disable=wrong-import-position

sys.path.insert(0, harness.REPO)
from transforms.modalities.image import processing  # pylint: disable=wrong-import-position,wrong-import-order

THRESHOLDS_SHOWN = (0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24)


def decoded(path: str) -> Image.Image:
  """A picture as the pipeline decodes it (flattened onto the default
  background), at its own size."""
  with open(path, 'rb') as f:
    data = f.read()
  with Image.open(io.BytesIO(data)) as img:
    width, height = img.size
  arr, _, _ = processing.decode_and_resize(
      data, processing.ImageConfig(height=height, width=width), path)
  return arr if isinstance(arr, Image.Image) else Image.fromarray(arr)


def _jpeg(img: Image.Image, quality: int) -> Image.Image:
  buf = io.BytesIO()
  img.save(buf, 'JPEG', quality=quality)
  buf.seek(0)
  return Image.open(buf).convert('RGB')


def _resize(img: Image.Image, scale: float) -> Image.Image:
  w, h = img.size
  return img.resize((max(1, round(w * scale)), max(1, round(h * scale))),
                    Image.LANCZOS)


def _crop(img: Image.Image, share: float) -> Image.Image:
  w, h = img.size
  dx, dy = max(1, round(w * share)), max(1, round(h * share))
  return img.crop((dx, dy, w - dx, h - dy))


VARIANTS = {
    'jpeg80': lambda im: _jpeg(im, 80),
    'resize85': lambda im: _resize(im, 0.85),
    'resize85+jpeg80': lambda im: _jpeg(_resize(im, 0.85), 80),
    'resize50': lambda im: _resize(im, 0.5),
    'crop3': lambda im: _crop(im, 0.03),
    'brighter': lambda im: ImageEnhance.Brightness(im).enhance(1.15),
    'darker': lambda im: ImageEnhance.Brightness(im).enhance(0.85),
    'mirrored': ImageOps.mirror,
}
AIMED = tuple(k for k in VARIANTS if k != 'mirrored')


def _bits(h) -> np.ndarray:
  return np.packbits(h.hash.flatten())


def hash_picture(img: Image.Image, hash_size: int) -> np.ndarray:
  import imagehash  # pylint: disable=import-outside-toplevel
  return _bits(imagehash.phash(img, hash_size=hash_size))


def distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Hamming distances between rows of packed bits a[i] and b[i]."""
  return np.unpackbits(np.bitwise_xor(a, b), axis=-1).sum(axis=-1)


def pairwise_within(hashes: np.ndarray, labels: list):
  """Distances of every same-label pair (i < j), and per picture its
  smallest distance to another picture of its label."""
  nearest = np.full(len(hashes), 10**6)
  all_d = []
  by_label = collections.defaultdict(list)
  for i, label in enumerate(labels):
    by_label[label].append(i)
  for idx in by_label.values():
    idx = np.asarray(idx)
    h = hashes[idx]
    for k in range(len(idx) - 1):
      d = distances(h[k + 1:], h[k][None, :])
      all_d.append(d)
      if len(d):
        nearest[idx[k]] = min(nearest[idx[k]], int(d.min()))
        np.minimum.at(nearest, idx[k + 1:], d)
  return (np.concatenate(all_d) if all_d else np.zeros(0, int)), nearest


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--hash-size', type=int, default=8,
                      help='pHash side: hash_size squared bits (default 8: '
                      '64 bits).')
  parser.add_argument('--max-distance', type=int, default=24,
                      help='Largest threshold in the table (default 24).')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  t0 = time.time()
  pictures = real_images.emoji() + real_images.photos()
  tones = real_images.emoji(skin_tones=True)
  base = [decoded(p.path) for p in pictures]
  labels = [p.label for p in pictures]
  hashes = np.stack([hash_picture(im, args.hash_size) for im in base])
  copies = {}
  for kind, make in VARIANTS.items():
    copy_hashes = np.stack([hash_picture(make(im), args.hash_size)
                            for im in base])
    copies[kind] = distances(hashes, copy_hashes)
  negatives, nearest = pairwise_within(hashes, labels)
  # Skin tones: each variant against the emoji it is a variant of.
  by_name = {p.name: i for i, p in enumerate(pictures)}
  tone_d = []
  for t in tones:
    if t.variant_of in by_name:
      h = hash_picture(decoded(t.path), args.hash_size)
      tone_d.append(int(distances(hashes[by_name[t.variant_of]][None, :],
                                  h[None, :])[0]))
  tone_d = np.asarray(tone_d)
  seconds = time.time() - t0

  bits = args.hash_size ** 2
  shown = [t for t in THRESHOLDS_SHOWN if t <= args.max_distance]
  head = ['T'] + list(VARIANTS) + ['skin tones', 'unrelated pairs within T',
                                   'pictures with an unrelated one within T']
  rows = []
  for t in shown:
    row = [str(t)]
    row += [f'{(copies[k] <= t).mean():.1%}' for k in VARIANTS]
    row += [f'{(tone_d <= t).mean():.1%}' if len(tone_d) else 'n/a']
    row += [f'{(negatives <= t).mean():.3%}',
            f'{(nearest <= t).mean():.2%}']
    rows.append(row)
  lines = ['| ' + ' | '.join(head) + ' |',
           '|' + '---|' * len(head)]
  lines += ['| ' + ' | '.join(r) + ' |' for r in rows]
  table = '\n'.join(lines)
  medians = ', '.join(f'{k} {int(np.median(copies[k]))}' for k in VARIANTS)
  body = (
      f'{len(pictures):,} pictures ({len(pictures) - len(real_images.photos())}'
      f' Twemoji in {len(set(labels)) - 1} categories, '
      f'{len(real_images.photos())} photos), {len(tone_d):,} skin-tone '
      f'variants, {len(negatives):,} unrelated same-class pairs; pHash of '
      f'{bits} bits (imagehash, hash_size {args.hash_size}). Share of copies '
      f'found at Hamming distance <= T, per kind of copy; the last two '
      f'columns are the errors among unrelated pictures.\n\n{table}\n\n'
      f'Median distance of each kind of copy: {medians}.\n')
  print(body)
  print(f'({seconds:.0f} s)')
  harness.write_results(
      args, all(getattr(args, k) == parser.get_default(k)
                for k in ('hash_size', 'max_distance')),
      'near_duplicate_thresholds',
      'Near-duplicate threshold for images (near_duplicate_thresholds.py)',
      info, body)
  return 0


if __name__ == '__main__':
  sys.exit(main())
