"""Baseline (a): a plain single-process loop around our per-image function.

    python benchmarks/baseline_loop.py --input CORPUS --output OUT.tfrecord

Lists <input>/<label>/<image>, calls
transforms.modalities.image.processing.process_image with ImageConfig() defaults (224x224 fit, JPEG q90) on each file, and writes one
tf.train.Example per image (image bytes, label id, label text) to a single
file with tf.io.TFRecordWriter. No Beam, no threads, no statistics pass:
the per-image work our pipeline does, and nothing else.

Prints one JSON line at the end: {"records": N, "seconds": S, ...}.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from transforms.modalities.image import config  # pylint: disable=g-import-not-at-top
from transforms.modalities.image import processing  # pylint: disable=g-import-not-at-top


def list_images(root):
  """Sorted (path, label) of every image at <root>/<label>/<file>."""
  out = []
  for label in sorted(os.listdir(root)):
    folder = os.path.join(root, label)
    if not os.path.isdir(folder):
      continue
    for name in sorted(os.listdir(folder)):
      path = os.path.join(folder, name)
      if config.is_image_path(name) and os.path.isfile(path):
        out.append((path, label))
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--input', required=True)
  parser.add_argument('--output', required=True, help='One .tfrecord file.')
  args = parser.parse_args(argv)

  start = time.perf_counter()
  files = list_images(args.input)
  label_ids = {n: i for i, n in enumerate(sorted({l for _, l in files}))}
  cfg = config.ImageConfig()
  train = tf.train
  written = bad = 0
  with tf.io.TFRecordWriter(args.output) as writer:
    for path, label in files:
      with open(path, 'rb') as f:
        data = f.read()
      try:
        out = processing.process_image(data, cfg)
      except config.BadImageError:
        bad += 1
        continue
      example = train.Example(features=train.Features(feature={
          'image': train.Feature(bytes_list=train.BytesList(value=[out.data])),
          'label': train.Feature(int64_list=train.Int64List(
              value=[label_ids[label]])),
          'label_text': train.Feature(bytes_list=train.BytesList(
              value=[label.encode('utf-8')])),
      }))
      writer.write(example.SerializeToString())
      written += 1
  print(json.dumps({'baseline': 'loop', 'records': written, 'bad': bad,
                    'seconds': round(time.perf_counter() - start, 3)}))
  return 0 if written else 1


if __name__ == '__main__':
  sys.exit(main())
