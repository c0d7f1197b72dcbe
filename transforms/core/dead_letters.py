"""Dead letters: every input that could not become an example, with why.

A dead letter is a dict {'input', 'stage', 'reason', 'split'}: the input
(path, `file:row`, manifest line), the stage that refused it (list, read,
parse, decode, ...), the reason in words, and its split when it has one.
Every run writes them to `dead_letter-*.jsonl` and counts them per split
in the manifest, so inputs = examples + dead letters adds up.
"""

import json
from typing import Optional

import apache_beam as beam

from transforms.core import metrics
from transforms.output import paths

DEAD = 'dead'
SKIPPED = 'skipped'
DEAD_LETTER_PREFIX = 'dead_letter'


def dead_letter(input_path: str, stage: str, reason: str,
                split: Optional[str] = None) -> dict:
  """A dead-letter record: what failed, where, and why."""
  return {'input': input_path, 'stage': stage, 'reason': reason,
          'split': split}


class _SplitOfDead(beam.DoFn):
  """Dead letter -> (split or '', 1), counted."""

  def __init__(self, modality: str):
    super().__init__()
    self._dead = metrics.counter(modality, 'dead_lettered')

  def process(self, dead):
    self._dead.inc()
    yield dead['split'] or '', 1


class DeadLetters(beam.PTransform):
  """Writes the dead letters (one JSON line each) and counts them per split.

  Input: dead-letter dicts. Output: (counts, files): (split or '' when it
  has none, dead letters) and the written file paths, both as
  FinalizeDataset reads them.
  """

  def __init__(self, staging: str, modality: str):
    super().__init__()
    self._staging, self._modality = staging, modality

  def expand(self, dead):
    per_split = (dead
                 | 'SplitOfDead' >> beam.ParDo(_SplitOfDead(self._modality))
                 | 'CountDeadPerSplit' >> beam.CombinePerKey(sum))
    files = (dead
             | 'DeadLetterToJson' >> beam.Map(
                 lambda d: json.dumps(d, ensure_ascii=False))
             | 'WriteDeadLetters' >> beam.io.WriteToText(
                 paths.join(self._staging, DEAD_LETTER_PREFIX),
                 file_name_suffix='.jsonl', num_shards=1))
    return per_split, files
