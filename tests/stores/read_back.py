"""Reads a published dataset back as a training job would, and prints
what it read as one JSON line: for each split, the ids our reader gives
(every shard verified first) and those TFDS's builder_from_directory
gives, and how many examples come out with the exported transform applied.

  python tests/stores/read_back.py OUTPUT      (local folder or gs://...)
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

import tensorflow_datasets as tfds  # pylint: disable=wrong-import-position

from pipelines import reader  # pylint: disable=wrong-import-position


def _count(dataset) -> int:
  total = 0
  for batch in dataset:
    total += int(next(iter(batch.values())).shape[0])
  return total


def main(output: str) -> dict:
  manifest = reader.load_manifest(output)
  builder = tfds.builder_from_directory(output)
  result = {}
  for split in sorted(manifest['splits']):
    ids = []
    for batch in reader.load_dataset(output, split, batch_size=64,
                                     shuffle=False, verify=True,
                                     apply_transform=False):
      ids += [i.decode('utf-8') for i in batch['id'].numpy()]
    theirs = [ex['id'].decode('utf-8')
              for ex in tfds.as_numpy(builder.as_dataset(split=split))]
    transformed = _count(reader.load_dataset(output, split, batch_size=64,
                                             shuffle=False))
    result[split] = {'reader': sorted(ids), 'tfds': sorted(theirs),
                     'transformed': transformed}
  return result


if __name__ == '__main__':
  print(json.dumps(main(sys.argv[1])))
