"""Examples of equal content: the split key, label conflicts, duplicates.

An example's content is what its record holds apart from its id, label and
weight: for images the decoded pixels at the stored size, for text the
tokens the transform sees. Splitting by a hash of the content (the default
where a modality has one) puts every copy of a content in one split, so a
picture saved twice, or a quotation found in two files, cannot be in train
and test at once. `--split_key id` keeps the older keying by path or row.

Equal contents are grouped by their digest (small tuples only: digest, id,
label, split), which finds

- label conflicts: one content with more than one label. `--label_conflicts`
  keeps them all (the default; they are counted and listed), drops them all
  or keeps those of the majority label (a tie drops them all); a dropped
  example is a dead letter saying why;
- duplicates: further copies of a content with the same label in the same
  split. They are counted always, and dropped (dead-lettered "duplicate of
  <id>", the copy of smallest id kept) with `--drop_duplicates`.

The manifest's `contents` section holds the counts and a few examples.
Modalities that read examples in batches (text) hand the digests over a
batch at a time, spread over `content_buckets` groups by the digest: the
runner then moves a few elements per batch, not one per example, and a
group holds the digests of a bounded share of the input. Everything here
but `ContentGroups` is plain Python.
"""

import bisect
import collections
import dataclasses
import operator
from typing import (Dict, Iterable, Iterator, List, Optional, Sequence,
                    Tuple)

import apache_beam as beam
import numpy as np

from transforms.core import near_duplicates as near_duplicates_lib
from transforms.core import splits as split_lib
from transforms.core.dead_letters import dead_letter

SPLIT_KEYS = ('content', 'id')
CONFLICT_POLICIES = ('keep', 'drop', 'majority')
# The dead-letter stage of an example dropped for its content.
STAGE = 'content'
# Examples listed in the manifest per kind of finding.
MAX_LISTED = 10
# Ids listed per group.
_IDS_PER_GROUP = 10
# Input bytes per group of batched contents (see content_buckets).
BUCKET_INPUT_BYTES = 8 << 20


@dataclasses.dataclass(frozen=True)
class ContentRules:
  """How a run keys its splits and treats equal contents.

  Attributes:
    split_key: 'content' (a hash of the content), 'id' (a hash of the
      example id: path or file:row) or 'input' (split folders or a split
      column, --splits from_input).
    label_conflicts: 'keep', 'drop' or 'majority' (see the module
      docstring).
    drop_duplicates: Drop further copies of a content inside a split.
    near_duplicates: How near-duplicate pictures or documents are treated
      (core/near_duplicates.py); None where a modality has none.
  """
  split_key: str = 'content'
  label_conflicts: str = 'keep'
  drop_duplicates: bool = False
  near_duplicates: Optional[near_duplicates_lib.NearDuplicateRules] = None

  @property
  def drops(self) -> bool:
    """Whether the rules may drop examples (so that every content must be
    known before any example is counted or written)."""
    return self.label_conflicts != 'keep' or self.drop_duplicates

  @property
  def near(self) -> bool:
    """Whether near-duplicates are looked for."""
    return self.near_duplicates is not None and self.near_duplicates.on

  def to_json(self) -> dict:
    out = dataclasses.asdict(self)
    if self.near_duplicates is not None:
      out['near_duplicates'] = self.near_duplicates.to_json()
    return out


def split_key(digest: str) -> str:
  """What a content's split is a hash of (see core/splits.assign_split)."""
  return split_lib.content_split_key(digest)


def content_split(digest: str, ratios) -> str:
  """The split of a content (by the hash of its digest)."""
  return split_lib.assign_split(split_key(digest), list(ratios))


Member = Tuple[str, str, str]  # (example id, label, split)


def decide(members: Iterable[Member], rules: ContentRules
           ) -> Tuple[List[Tuple[Member, str]], dict]:
  """What to do with the examples of one content.

  Args:
    members: (id, label, split) of every example with this content.
    rules: The run's rules.

  Returns:
    ([(member, reason)] to drop, the finding: {'duplicates': {split: extra
    copies}, 'duplicate_ids': [ids] or None, 'conflict': {'ids', 'labels'}
    or None, 'splits': number of splits the content is in}).
  """
  members = sorted(members)
  drops: List[Tuple[Member, str]] = []
  labels: Dict[str, int] = {}
  for _, label, _ in members:
    labels[label] = labels.get(label, 0) + 1
  conflict = None
  kept = members
  if len(labels) > 1:
    conflict = {'ids': [m[0] for m in members][:_IDS_PER_GROUP],
                'labels': [m[1] for m in members][:_IDS_PER_GROUP]}
    named = ', '.join(f'{label} ({n})' for label, n in sorted(labels.items()))
    if rules.label_conflicts == 'drop':
      reason = f'label conflict: the same content is labelled {named}'
      drops += [(m, reason) for m in members]
      kept = []
    elif rules.label_conflicts == 'majority':
      top = max(labels.values())
      winners = [label for label, n in labels.items() if n == top]
      if len(winners) > 1:
        reason = (f'label conflict with no majority label: the same content '
                  f'is labelled {named}')
        drops += [(m, reason) for m in members]
        kept = []
      else:
        reason = (f'label conflict: the same content is labelled {named}; '
                  f'the majority label {winners[0]} is kept')
        drops += [(m, reason) for m in members if m[1] != winners[0]]
        kept = [m for m in members if m[1] == winners[0]]
  duplicates: Dict[str, int] = {}
  duplicate_ids = None
  first: Dict[Tuple[str, str], str] = {}
  for member in members:
    ex_id, label, split = member
    key = (split, label)
    if key not in first:
      first[key] = ex_id
      continue
    duplicates[split] = duplicates.get(split, 0) + 1
    if duplicate_ids is None:
      duplicate_ids = [m[0] for m in members
                       if (m[2], m[1]) == key][:_IDS_PER_GROUP]
    # (An id listed twice, as a manifest may, cannot be told apart from
    # itself: both stay.)
    if rules.drop_duplicates and member in kept and ex_id != first[key]:
      drops.append((member, f'duplicate of {first[key]}'))
  return drops, {'duplicates': duplicates, 'duplicate_ids': duplicate_ids,
                 'conflict': conflict,
                 'splits': len({m[2] for m in members})}


def _keep_smallest(kept: List[Tuple[str, object]], digest: str, item,
                   ) -> None:
  """Keeps the MAX_LISTED items of smallest digest, whatever the order in
  which they come."""
  bisect.insort(kept, (digest, item), key=lambda x: x[0])
  del kept[MAX_LISTED:]


class SummaryFn(beam.CombineFn):
  """(digest, finding, drops by kind) of every repeated content -> the
  manifest's `contents` counts (see `summary`)."""

  def __init__(self, rules: ContentRules):
    super().__init__()
    self._rules = rules

  def create_accumulator(self):
    return {'duplicates': {}, 'duplicate_examples': [], 'conflicts': 0,
            'conflicting_examples': 0, 'conflict_examples': [],
            'in_several_splits': 0, 'dropped_duplicates': 0,
            'dropped_conflicts': 0}

  def add_input(self, acc, item):
    digest, finding, members, dropped = item
    for split, n in finding['duplicates'].items():
      acc['duplicates'][split] = acc['duplicates'].get(split, 0) + n
    if finding['duplicate_ids']:
      _keep_smallest(acc['duplicate_examples'], digest,
                     finding['duplicate_ids'])
    if finding['conflict']:
      acc['conflicts'] += 1
      acc['conflicting_examples'] += members
      _keep_smallest(acc['conflict_examples'], digest, finding['conflict'])
    if finding['splits'] > 1:
      acc['in_several_splits'] += 1
    acc['dropped_duplicates'] += dropped['duplicates']
    acc['dropped_conflicts'] += dropped['conflicts']
    return acc

  def merge_accumulators(self, accs):
    out = self.create_accumulator()
    for acc in accs:
      for split, n in acc['duplicates'].items():
        out['duplicates'][split] = out['duplicates'].get(split, 0) + n
      for key in ('duplicate_examples', 'conflict_examples'):
        for digest, item in acc[key]:
          _keep_smallest(out[key], digest, item)
      for key in ('conflicts', 'conflicting_examples', 'in_several_splits',
                  'dropped_duplicates', 'dropped_conflicts'):
        out[key] += acc[key]
    return out

  def extract_output(self, acc):
    return summary(self._rules, acc)


def summary(rules: ContentRules, acc: Optional[dict] = None) -> dict:
  """The manifest's `contents` section from SummaryFn's accumulator."""
  acc = acc or SummaryFn(rules).create_accumulator()
  return {
      **rules.to_json(),
      # Further copies of a content with the same label in the same split.
      'duplicates': dict(sorted(acc['duplicates'].items())),
      'duplicate_examples': [ids for _, ids in acc['duplicate_examples']],
      # Contents with more than one label, and their examples.
      'conflicting_contents': acc['conflicts'],
      'conflicting_examples': acc['conflicting_examples'],
      'conflict_examples': [c for _, c in acc['conflict_examples']],
      # Contents in more than one split (none when splits are keyed by
      # content).
      'in_several_splits': acc['in_several_splits'],
      'dropped': {'duplicates': acc['dropped_duplicates'],
                  'label_conflicts': acc['dropped_conflicts']},
  }


def content_buckets(input_bytes: Optional[int]) -> int:
  """How many groups batched contents are spread over (`ContentGroups`
  with `batched=True`): one per BUCKET_INPUT_BYTES of input, so a group
  holds the digests of about that much input whatever the size of the
  dataset, and memory per worker stays flat."""
  if not input_bytes:
    return 1
  return max(1, -(-input_bytes // BUCKET_INPUT_BYTES))


def content_bucket(digest: str, buckets: int) -> int:
  """The group of a content's digest (a hex string) among `buckets`."""
  return int(digest[:15], 16) % buckets


# Hex digit values by ASCII code (16: not a hex digit).
_HEX = np.full(256, 16, np.uint8)
_HEX[np.frombuffer(b'0123456789', np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b'abcdef', np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b'ABCDEF', np.uint8)] = np.arange(10, 16)


def _buckets_of(digests: List[str], buckets: int) -> np.ndarray:
  """content_bucket of each digest: with NumPy when every digest begins
  with 15 hex digits (ours always do), else one at a time."""
  n = len(digests)
  heads = ''.join([d[:15] for d in digests])
  if len(heads) == 15 * n and heads.isascii():
    nibbles = _HEX[np.frombuffer(heads.encode('ascii'), np.uint8)]
    if (nibbles < 16).all():
      value = np.zeros(n, np.uint64)
      for column in nibbles.reshape(n, 15).T:
        value = (value << np.uint64(4)) | column
      return (value % np.uint64(buckets)).astype(np.int64)
  return np.fromiter((content_bucket(d, buckets) for d in digests),
                     np.int64, n)


def batched(digests: Sequence[str], ids: Sequence[str],
            labels: Sequence[str], splits: Sequence[str],
            buckets: int) -> Iterator[Tuple[int, tuple]]:
  """A batch's contents as ContentGroups' batched input: (bucket,
  (digests, ids, labels, splits)) per bucket the batch has contents in
  (in the order the buckets first appear), four lists of one value per
  example, in the batch's order. Lists of strings cost the runner's coder
  (and _DecideFn) less than a tuple per example."""
  columns = (list(digests), list(ids), list(labels), list(splits))
  if not columns[0]:
    return iter(())
  if buckets == 1:
    return iter(((0, columns),))
  bucket = _buckets_of(columns[0], buckets)
  order = np.argsort(bucket, kind='stable')
  ordered = bucket[order]
  starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
  ends = np.r_[starts[1:], len(order)]
  groups = sorted(zip(order[starts].tolist(), ordered[starts].tolist(),
                      starts.tolist(), ends.tolist()))
  out = []
  for _, b, lo, hi in groups:
    take = operator.itemgetter(*order[lo:hi].tolist())
    out.append((b, tuple(list(take(c)) if hi - lo > 1 else [take(c)]
                         for c in columns)))
  return iter(out)


class _DecideFn(beam.DoFn):
  """(digest, members), or with `batched` (bucket, [(digests, ids, labels,
  splits)]), -> drops (main: (id, dead letter)) and the finding
  ('finding') of every repeated content."""

  def __init__(self, rules: ContentRules, batched_input: bool = False):
    super().__init__()
    self._rules, self._batched = rules, batched_input

  def process(self, group):
    if not self._batched:
      yield from self._decide(*group)
      return
    _, column_lists = group
    # Most contents appear once: count the digests (in C), then gather the
    # members of the repeated ones only, in the order they came.
    counts = collections.Counter()
    for digests, *_ in column_lists:
      counts.update(digests)
    by_digest: Dict[str, List[Member]] = {
        digest: [] for digest, n in counts.items() if n > 1}
    if not by_digest:
      return
    for digests, ids, labels, splits in column_lists:
      for i, digest in enumerate(digests):
        members = by_digest.get(digest)
        if members is not None:
          members.append((ids[i], labels[i], splits[i]))
    for digest, members in by_digest.items():
      yield from self._decide(digest, members)

  def _decide(self, digest, members):
    members = list(members)
    if len(members) < 2:
      return
    drops, finding = decide(members, self._rules)
    dropped = {'duplicates': 0, 'conflicts': 0}
    for (ex_id, _, split), reason in drops:
      dropped['duplicates' if reason.startswith('duplicate')
              else 'conflicts'] += 1
      yield ex_id, dead_letter(ex_id, STAGE, reason, split)
    yield beam.pvalue.TaggedOutput(
        'finding', (digest, finding, len(members), dropped))


class ContentGroups(beam.PTransform):
  """Groups examples by content and applies the rules.

  Input: (content digest, (id, label, split)) for every example; with
  `batched=True`, `batched()`'s (bucket, (digests, ids, labels, splits))
  elements, a few per batch of examples instead of one per example (the
  runner's cost is per element).
  Output: (drops, summary): (id, dead letter) of every example the rules
  drop, and one manifest `contents` dict; the same for both inputs.
  """

  def __init__(self, rules: ContentRules, batched_input: bool = False):
    super().__init__()
    self._rules, self._batched = rules, batched_input

  def expand(self, contents):
    decided = (contents
               | 'GroupByContent' >> beam.GroupByKey()
               | 'Decide' >> beam.ParDo(_DecideFn(
                   self._rules, self._batched)).with_outputs(
                       'finding', main='drops'))
    summary_ = decided.finding | 'Summarize' >> beam.CombineGlobally(
        SummaryFn(self._rules))
    return decided.drops, summary_
