"""How often the pipeline's near-duplicate rule finds real copies of a
picture, and how often it joins unrelated pictures of the same class: the
measurement behind the default distances for images.

    python benchmarks/near_duplicate_thresholds.py
        [--results PATH | --no-results]

Pictures (benchmarks/real_images.py): the 1,911 Twemoji clip-art PNGs
(64x64, transparent), labelled by emoji category, and scikit-image's 26
sample photographs. Every picture, and every copy of it, goes through the
pipeline's own decoder at the default settings (224x224, fit, flattened
onto white) and gets the signature the pipeline gives it
(signatures.signature_of_pixels: a 64-bit pHash and a 4x4 colour
thumbnail). The copies are those real collections hold:

  jpeg80           saved again as JPEG, quality 80
  resize85         resized to 85% (Lanczos)
  resize85+jpeg80  both: a second download of the same picture
  resize50         a thumbnail at half size
  crop3            3% cut off every edge
  brighter, darker brightness times 1.15 and 0.85
  mirrored         flipped left to right (a different picture for pHash;
                   reported, not aimed at)

A copy is found when the pipeline would find it: the two hashes meet in
one of the locality-sensitive tables (core/near_duplicates.py) and both
distances are within the rule's (hash distance T bits, thumbnail distance
D). For each (T, D) the table gives the share of copies found per kind, and
two error rates among unrelated pictures of one class: the share of pairs
found, and the share of pictures with at least one unrelated picture found
(those would be grouped, and split, with it). Skin-tone variants of one
emoji (one drawing in five colours) are reported apart.

Takes about two minutes on one core. A run at the defaults rewrites its
section of benchmarks/RESULTS.md (--results PATH writes it; --no-results
nothing).
"""

import argparse
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
from transforms.core import near_duplicates  # pylint: disable=wrong-import-position,wrong-import-order
from transforms.modalities.image import config  # pylint: disable=wrong-import-position,wrong-import-order
from transforms.modalities.image import processing  # pylint: disable=wrong-import-position,wrong-import-order

HASH_DISTANCES = (6, 8, 10, 12, 14)
THUMB_DISTANCES = (0.1, 0.15, 0.2)
CONFIG = config.ImageConfig(signature=True)


def flattened(path: str) -> Image.Image:
  """A picture at its own size, flattened onto white as the pipeline
  flattens it (the copies are made from this)."""
  with open(path, 'rb') as f:
    data = f.read()
  with Image.open(io.BytesIO(data)) as img:
    width, height = img.size
  img, _, _ = processing.decode_and_resize(
      data, config.ImageConfig(height=height, width=width), path)
  return img


def _encoded(img: Image.Image, fmt: str = 'PNG', quality: int = 95) -> bytes:
  buf = io.BytesIO()
  img.save(buf, fmt, **({'quality': quality} if fmt == 'JPEG' else {}))
  return buf.getvalue()


def _resize(img: Image.Image, scale: float) -> Image.Image:
  w, h = img.size
  return img.resize((max(1, round(w * scale)), max(1, round(h * scale))),
                    Image.LANCZOS)


def _crop(img: Image.Image, share: float) -> Image.Image:
  w, h = img.size
  dx, dy = max(1, round(w * share)), max(1, round(h * share))
  return img.crop((dx, dy, w - dx, h - dy))


# Each copy as the bytes of a file.
VARIANTS = {
    'jpeg80': lambda im: _encoded(im, 'JPEG', 80),
    'resize85': lambda im: _encoded(_resize(im, 0.85)),
    'resize85+jpeg80': lambda im: _encoded(_resize(im, 0.85), 'JPEG', 80),
    'resize50': lambda im: _encoded(_resize(im, 0.5)),
    'crop3': lambda im: _encoded(_crop(im, 0.03)),
    'brighter': lambda im: _encoded(
        ImageEnhance.Brightness(im).enhance(1.15)),
    'darker': lambda im: _encoded(ImageEnhance.Brightness(im).enhance(0.85)),
    'mirrored': lambda im: _encoded(ImageOps.mirror(im)),
}


def signature(data: bytes) -> bytes:
  return processing.process_image(data, CONFIG).signature


def measures(sigs_a, sigs_b):
  """(hash distances, thumbnail distances, meet in a table) of pairs of
  signatures a[i], b[i]."""
  ha, ta = near_duplicates._split_signatures(sigs_a)  # pylint: disable=protected-access
  hb, tb = near_duplicates._split_signatures(sigs_b)  # pylint: disable=protected-access
  hd = np.bitwise_count(ha ^ hb)
  td = np.abs(ta - tb).mean(axis=1)
  raw = lambda sigs: np.frombuffer(  # pylint: disable=unnecessary-lambda-assignment
      b''.join(s[:8] for s in sigs), np.uint8).reshape(len(sigs), 8)
  meet = (near_duplicates.table_keys(raw(sigs_a))
          == near_duplicates.table_keys(raw(sigs_b))).any(1)
  return hd, td, meet


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  t0 = time.time()
  pictures = real_images.emoji() + real_images.photos()
  tones = real_images.emoji(skin_tones=True)
  labels = [p.label for p in pictures]
  base = [flattened(p.path) for p in pictures]
  sigs = [signature(_encoded(im)) for im in base]
  copies = {}
  for kind, make in VARIANTS.items():
    copies[kind] = measures(sigs, [signature(make(im)) for im in base])
  ia, ib = harness.same_label_pairs(labels)
  negatives = measures([sigs[i] for i in ia], [sigs[i] for i in ib])
  by_name = {p.name: i for i, p in enumerate(pictures)}
  tone_pairs = [(by_name[t.variant_of], t) for t in tones
                if t.variant_of in by_name]
  tone = measures([sigs[i] for i, _ in tone_pairs],
                  [signature(_encoded(flattened(t.path)))
                   for _, t in tone_pairs])
  seconds = time.time() - t0

  def found(m, t, d):
    hd, td, meet = m
    return meet & (hd <= t) & (td <= d)

  head = (['T', 'D'] + list(VARIANTS) +
          ['skin tones', 'unrelated pairs found',
           'pictures with an unrelated one found'])
  lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for t in HASH_DISTANCES:
    for d in THUMB_DISTANCES:
      hit = found(negatives, t, d)
      pics = len(set(ia[hit].tolist()) | set(ib[hit].tolist()))
      row = [str(t), f'{d:g}']
      row += [f'{found(copies[k], t, d).mean():.1%}' for k in VARIANTS]
      row += [f'{found(tone, t, d).mean():.1%}',
              f'{hit.mean():.3%}', f'{pics / len(pictures):.2%}']
      if (t, d) == (near_duplicates.HASH_DISTANCE,
                    near_duplicates.THUMB_DISTANCE):
        row = [f'**{c}**' for c in row]
      lines.append('| ' + ' | '.join(row) + ' |')
  medians = ', '.join(
      f'{k} {int(np.median(copies[k][0]))} / {np.median(copies[k][1]):.3f}'
      for k in VARIANTS)
  photo_idx = [i for i, p in enumerate(pictures) if p.label == 'photo']
  def photos_found(k):
    return found(tuple(x[photo_idx] for x in copies[k]),
                 near_duplicates.HASH_DISTANCE,
                 near_duplicates.THUMB_DISTANCE).mean()
  photo_found = ', '.join(f'{k} {photos_found(k):.0%}' for k in VARIANTS)
  body = (
      f'{len(pictures):,} pictures ({len(pictures) - len(photo_idx)} Twemoji '
      f'in {len(set(labels)) - 1} categories, {len(photo_idx)} photos), '
      f'{len(tone_pairs):,} skin-tone variants, {len(ia):,} unrelated '
      f'same-class pairs; signatures as the pipeline computes them at '
      f'224x224. A copy is found when its hash meets the original\'s in one '
      f'of the {near_duplicates.TABLES} tables and both distances are within '
      f'(T bits, thumbnail D); the default is in bold.\n\n' +
      '\n'.join(lines) +
      f'\n\nMedian hash / thumbnail distance of each kind of copy: '
      f'{medians}.\n\nThe 26 photos alone, at the default: {photo_found}.\n')
  print(body)
  print(f'({seconds:.0f} s)')
  harness.write_results(
      args, True, 'near_duplicate_thresholds',
      'Near-duplicate distances for images (near_duplicate_thresholds.py)',
      info, body)
  return 0


if __name__ == '__main__':
  sys.exit(main())
