"""The image script a user would write instead of our pipeline: a
multiprocessing.Pool with one process per core.

    python benchmarks/baseline_pool.py CORPUS OUTPUT.tfrecord [--processes N]

The workers read each file, decode it with Pillow (draft() asks libjpeg for a
DCT-scaled decode no smaller than the fitted size), fit it into 224x224 with
black padding and encode JPEG at quality 90; the parent builds one
tf.train.Example per image and writes one TFRecord file. No splits,
statistics, shuffle, manifest or dead letters: a bad image is skipped.
Prints one JSON line: {"written": N, "skipped": M, "seconds": S}.
"""

import argparse
import io
import json
import multiprocessing
import os
import time

from PIL import Image

SIZE = 224


def _files(root):
  for label in sorted(os.listdir(root)):
    folder = os.path.join(root, label)
    if os.path.isdir(folder):
      for name in sorted(os.listdir(folder)):
        yield os.path.join(folder, name), label


def _process(task):
  path, label = task
  try:
    img = Image.open(path)
    img.draft('RGB', (SIZE, SIZE))
    img = img.convert('RGB')
    img.thumbnail((SIZE, SIZE), Image.Resampling.BILINEAR)
    canvas = Image.new('RGB', (SIZE, SIZE))
    canvas.paste(img, ((SIZE - img.width) // 2, (SIZE - img.height) // 2))
    buf = io.BytesIO()
    canvas.save(buf, format='JPEG', quality=90)
    return path, label, buf.getvalue()
  except OSError:
    return path, label, None


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('corpus')
  parser.add_argument('output')
  parser.add_argument('--processes', type=int, default=os.cpu_count())
  args = parser.parse_args()
  start = time.time()
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  labels = sorted(d for d in os.listdir(args.corpus)
                  if os.path.isdir(os.path.join(args.corpus, d)))
  ids = {label: i for i, label in enumerate(labels)}
  written = skipped = 0
  with multiprocessing.Pool(args.processes) as pool, \
      tf.io.TFRecordWriter(args.output) as writer:
    for path, label, data in pool.imap_unordered(
        _process, _files(args.corpus), chunksize=16):
      if data is None:
        skipped += 1
        continue
      feature = {
          'image': tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[data])),
          'label': tf.train.Feature(int64_list=tf.train.Int64List(
              value=[ids[label]])),
          'id': tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[path.encode()])),
      }
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())
      written += 1
  print(json.dumps({'written': written, 'skipped': skipped,
                    'seconds': round(time.time() - start, 2)}))


if __name__ == '__main__':
  main()
