"""Baseline (b): plain single-process TensorFlow ops, as most people write it.

    python benchmarks/baseline_tf.py --input CORPUS --output OUT.tfrecord

An eager Python loop over <input>/<label>/<image>: tf.io.read_file,
tf.io.decode_image(channels=3, expand_animations=False),
tf.image.resize_with_pad to 224x224 (bilinear, no antialias: the defaults),
cast to uint8, tf.io.encode_jpeg(quality=90), a tf.train.Example (image
bytes, label id, label text), one tf.io.TFRecordWriter file.

Prints one JSON line at the end: {"records": N, "seconds": S, ...}.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import tensorflow as tf  # pylint: disable=g-import-not-at-top

_EXTENSIONS = ('.jpg', '.jpeg', '.jpe', '.png', '.gif', '.bmp', '.webp')


def list_images(root):
  """Sorted (path, label) of every image at <root>/<label>/<file>."""
  out = []
  for label in sorted(os.listdir(root)):
    folder = os.path.join(root, label)
    if not os.path.isdir(folder):
      continue
    for name in sorted(os.listdir(folder)):
      path = os.path.join(folder, name)
      if name.lower().endswith(_EXTENSIONS) and os.path.isfile(path):
        out.append((path, label))
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--input', required=True)
  parser.add_argument('--output', required=True, help='One .tfrecord file.')
  parser.add_argument('--size', type=int, default=224)
  args = parser.parse_args(argv)

  start = time.perf_counter()
  files = list_images(args.input)
  label_ids = {n: i for i, n in enumerate(sorted({l for _, l in files}))}
  train = tf.train
  written = 0
  with tf.io.TFRecordWriter(args.output) as writer:
    for path, label in files:
      raw = tf.io.read_file(path)
      img = tf.io.decode_image(raw, channels=3, expand_animations=False)
      img = tf.image.resize_with_pad(img, args.size, args.size)
      img = tf.cast(img, tf.uint8)
      jpeg = tf.io.encode_jpeg(img, quality=90)
      example = train.Example(features=train.Features(feature={
          'image': train.Feature(bytes_list=train.BytesList(
              value=[jpeg.numpy()])),
          'label': train.Feature(int64_list=train.Int64List(
              value=[label_ids[label]])),
          'label_text': train.Feature(bytes_list=train.BytesList(
              value=[label.encode('utf-8')])),
      }))
      writer.write(example.SerializeToString())
      written += 1
  print(json.dumps({'baseline': 'tf', 'records': written, 'bad': 0,
                    'seconds': round(time.perf_counter() - start, 3)}))
  return 0 if written else 1


if __name__ == '__main__':
  sys.exit(main())
