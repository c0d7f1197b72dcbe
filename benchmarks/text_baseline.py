"""Baseline: a plain single-process script that tokenizes a text CSV.

    python benchmarks/text_baseline.py --input docs.csv --output OUT_DIR \
        [--vocab_size 20000] [--max_tokens 128]

What an engineer would write by hand with the csv module, a
collections.Counter and tf.io.TFRecordWriter, for the CSV of
benchmarks/text_data.py (columns text and label; other columns are ignored):

1. Reads the whole file with csv.reader (quoted fields may hold commas,
   quotes and line breaks).
2. Gives row r (0-based, header not counted) the id '<file name>:<r>' and
   puts it in train / validation / test (80/10/10) with
   transforms.core.splits.assign_split, i.e. by the SHA-256 of the id.
3. Tokenizes with text.lower().split() (whitespace; punctuation stays on
   the words) and counts the tokens of the train rows with a Counter; the
   --vocab_size most frequent get the ids 1..V (ties in the order the
   Counter first saw them), every other token the out-of-vocabulary id V+1,
   and 0 is padding.
4. Writes one tf.train.Example per row to <output>/<split>.tfrecord:
   token_ids (the first --max_tokens ids, padded with 0 to exactly
   --max_tokens), length (the ids before padding, at most --max_tokens),
   label (index in the sorted label names), label_text and id.

No dead-letter output, no manifest, no vocabulary file, no input validation
(a row without a text or label column makes it fail), and the whole file is
held in memory. Prints one JSON line at the end: {"records": N, "splits":
{...}, "docs": D, "seconds": S}, S being the wall time since the script
started (its imports included).
"""

import time

_START = time.perf_counter()

# pylint: disable=g-import-not-at-top,wrong-import-position
import argparse
import collections
import csv
import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

import tensorflow as tf

from transforms.core.splits import assign_split
# pylint: enable=g-import-not-at-top,wrong-import-position

TEXT, LABEL = 'text', 'label'
SPLITS = [('train', 0.8), ('validation', 0.1), ('test', 0.1)]


def _bytes(value):
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int64(value):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def read_rows(path):
  """[(text, label)] of every data row of the CSV at `path`."""
  with open(path, newline='', encoding='utf-8') as f:
    reader = csv.reader(f)
    header = next(reader)
    text_col, label_col = header.index(TEXT), header.index(LABEL)
    return [(row[text_col], row[label_col]) for row in reader]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--input', required=True, help='Text CSV file.')
  parser.add_argument('--output', required=True,
                      help='Folder for <split>.tfrecord files.')
  parser.add_argument('--vocab_size', type=int, default=20000,
                      help='Tokens in the vocabulary (default 20000).')
  parser.add_argument('--max_tokens', type=int, default=128,
                      help='Token ids per record (default 128).')
  args = parser.parse_args(argv)
  if args.vocab_size < 1 or args.max_tokens < 1:
    parser.error('--vocab_size and --max_tokens must be at least 1')

  rows = read_rows(args.input)
  base = os.path.basename(args.input)
  splits = [assign_split(f'{base}:{r}', SPLITS) for r in range(len(rows))]
  label_names = sorted({label for _, label in rows})
  label_ids = {name: i for i, name in enumerate(label_names)}

  # Vocabulary from the train rows only.
  counter = collections.Counter()
  for (text, _), split in zip(rows, splits):
    if split == 'train':
      counter.update(text.lower().split())
  vocab = {token: i + 1
           for i, (token, _) in enumerate(counter.most_common(args.vocab_size))}
  oov = args.vocab_size + 1
  del counter

  os.makedirs(args.output, exist_ok=True)
  writers = {name: tf.io.TFRecordWriter(
      os.path.join(args.output, f'{name}.tfrecord')) for name, _ in SPLITS}
  counts = {name: 0 for name, _ in SPLITS}
  max_tokens = args.max_tokens
  for r, ((text, label), split) in enumerate(zip(rows, splits)):
    ids = [vocab.get(t, oov) for t in text.lower().split()[:max_tokens]]
    length = len(ids)
    ids.extend([0] * (max_tokens - length))
    example = tf.train.Example(features=tf.train.Features(feature={
        'token_ids': tf.train.Feature(
            int64_list=tf.train.Int64List(value=ids)),
        'length': _int64(length),
        'label': _int64(label_ids[label]),
        'label_text': _bytes(label.encode('utf-8')),
        'id': _bytes(f'{base}:{r}'.encode('utf-8')),
    }))
    writers[split].write(example.SerializeToString())
    counts[split] += 1
  for writer in writers.values():
    writer.close()

  print(json.dumps({'records': sum(counts.values()), 'splits': counts,
                    'docs': len(rows),
                    'seconds': round(time.perf_counter() - _START, 3)}))
  return 0


if __name__ == '__main__':
  sys.exit(main())
