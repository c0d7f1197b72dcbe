"""The validation pipeline's dataset-level checks beyond "every record is
well formed": content hashes for leakage and duplicates, per-feature
statistics and their drift between splits, and shard health.

Per record (`record_content_hash`, `add_record_stats`,
`widen_time_range`) the work is done where the shard is read; per split or
dataset (`merge_stats`, `feature_drift`, `shard_health`,
`content_findings`, `recording_findings`, `merge_time_ranges`) the results
of all shards are combined.
Everything is plain data (dicts, lists, numbers) so it travels between Beam
workers and into the JSON report unchanged.
"""

import bisect
import collections
import dataclasses
import hashlib
import math
import statistics
from typing import (Collection, Dict, Iterable, List, NamedTuple, Optional,
                    Tuple)

import numpy as np

from transforms.core import features as features_lib

# Features that say which example a record is (or how it is weighted or
# labelled), not what it contains: left out of the content hash, so the
# same image, window or text under two ids is one content. A modality adds
# its own (its plug-in's identity_features).
IDENTITY_FEATURES = frozenset({
    features_lib.ID, features_lib.LABEL, features_lib.LABEL_TEXT,
    features_lib.WEIGHT})

# TFRecord frames a record with a 64-bit length, but a tf.train.Example is a
# protobuf message, and protobuf refuses messages of 2 GiB or more.
PROTOBUF_LIMIT_BYTES = 2**31 - 1
DEFAULT_RECORD_WARN_BYTES = 64 * 2**20
# A shard this many times larger (or smaller) than its split's median.
SIZE_OUTLIER_FACTOR = 3.0
# A single-class shard is reported when a shuffle would give one this
# rarely under the split's class frequencies.
SINGLE_CLASS_PROBABILITY = 1e-3
# At most this many example groups are listed per finding.
MAX_LISTED = 20


def record_content_hash(features, identity=frozenset()) -> str:
  """SHA-256 (first 128 bits, hex) of a record's content features.

  Args:
    features: The tf.train.Example's feature map.
    identity: The modality's identity features, left out besides
      IDENTITY_FEATURES.
  """
  h = hashlib.sha256()
  for key in sorted(features):
    if key in IDENTITY_FEATURES or key in identity:
      continue
    h.update(key.encode('utf-8'))
    h.update(b'\x00')
    h.update(features[key].SerializeToString(deterministic=True))
  return h.hexdigest()[:32]


# ----------------------------------------------------------- statistics --

# One statistic: [count, missing, min, max, sum, sum of squares].
_COUNT, _MISSING, _MIN, _MAX, _SUM, _SQUARES = range(6)


def _empty():
  return [0, 0, math.inf, -math.inf, 0.0, 0.0]


@dataclasses.dataclass(frozen=True)
class Thresholds:
  """When the dataset-level checks warn or fail.

  Drift is measured between the training split and each other split: for
  features, the standardized mean difference (|mean - train mean| / train
  std); for classes, the total variation distance of the class shares
  (train's shares before rebalancing). A `*_fail` of None never fails.
  `strict` turns every warning into a failure.
  """
  feature_drift_warn: float = 0.5
  feature_drift_fail: Optional[float] = None
  class_drift_warn: float = 0.2
  class_drift_fail: Optional[float] = None
  record_warn_bytes: int = DEFAULT_RECORD_WARN_BYTES
  strict: bool = False


# Token lengths are counted in this many equal bins over 0..max_tokens.
LENGTH_BINS = 16


class FeatureStats:
  """count, missing, min, max, sum and sum of squares per named feature
  (or feature channel), accumulated record by record, and histograms."""

  def __init__(self):
    self.stats: Dict[str, list] = {}
    self.hists: Dict[str, list] = {}

  def count_in_bin(self, name: str, value: float, top: float) -> None:
    """Counts `value` in LENGTH_BINS equal bins over [0, top]."""
    hist = self.hists.setdefault(name, [0] * LENGTH_BINS)
    i = int(value / top * LENGTH_BINS) if top > 0 else 0
    hist[min(max(i, 0), LENGTH_BINS - 1)] += 1

  def add(self, name: str, values) -> None:
    """Adds values (any shape) to the statistic `name`."""
    arr = np.asarray(values, np.float64).ravel()
    s = self.stats.setdefault(name, _empty())
    if not arr.size:
      return
    s[_COUNT] += int(arr.size)
    s[_MIN] = min(s[_MIN], float(arr.min()))
    s[_MAX] = max(s[_MAX], float(arr.max()))
    s[_SUM] += float(arr.sum())
    s[_SQUARES] += float(np.dot(arr, arr))

  def add_missing(self, name: str) -> None:
    self.stats.setdefault(name, _empty())[_MISSING] += 1

  def add_channels(self, prefix: str, arr: np.ndarray,
                   names: List[str]) -> None:
    """Adds an [n, channels] array as one statistic per channel."""
    if not arr.size:
      return
    # Channel-major and contiguous, so each reduction runs along a row.
    channels = np.ascontiguousarray(arr.T, dtype=np.float64)
    self.add_channel_sums(prefix, names, arr.shape[0], channels.min(axis=1),
                          channels.max(axis=1), channels.sum(axis=1),
                          np.einsum('ij,ij->i', channels, channels))

  def add_channel_sums(self, prefix: str, names: List[str], count: int,
                       mins, maxs, sums, squares) -> None:
    """Adds per-channel totals computed elsewhere (n values each)."""
    for i, name in enumerate(names):
      s = self.stats.setdefault(f'{prefix}/{name}', _empty())
      s[_COUNT] += int(count)
      s[_MIN] = min(s[_MIN], float(mins[i]))
      s[_MAX] = max(s[_MAX], float(maxs[i]))
      s[_SUM] += float(sums[i])
      s[_SQUARES] += float(squares[i])


def add_record_stats(stats: FeatureStats, values: Dict, manifest: dict,
                     own: Collection[str] = ()) -> None:
  """The statistics of a record's plain features.

  Every feature of the spec counts as missing when the record has no value
  for it; the numeric features that are not the label or the id add their
  values. A modality adds the rest itself (see its checks.py), such as
  per-channel statistics of the features it names in `own`.

  Args:
    stats: The shard's accumulator.
    values: Feature name -> the record's value list.
    manifest: The dataset's manifest.
    own: Features whose values the modality summarizes itself.
  """
  for key, entry in manifest['feature_spec'].items():
    vals = values.get(key)
    if vals is None or len(vals) == 0:
      stats.add_missing(key)
      continue
    if key in (features_lib.LABEL, features_lib.ID, features_lib.LABEL_TEXT):
      continue
    if entry['dtype'] == 'string' or key in own:
      continue
    stats.add(key, vals)


def merge_hists(parts: Iterable[Dict[str, list]]) -> Dict[str, list]:
  out: Dict[str, list] = {}
  for part in parts:
    for name, counts in part.items():
      o = out.setdefault(name, [0] * len(counts))
      for i, n in enumerate(counts):
        o[i] += n
  return out


def merge_stats(parts: Iterable[Dict[str, list]]) -> Dict[str, list]:
  out: Dict[str, list] = {}
  for part in parts:
    for name, s in part.items():
      o = out.setdefault(name, _empty())
      o[_COUNT] += s[_COUNT]
      o[_MISSING] += s[_MISSING]
      o[_MIN] = min(o[_MIN], s[_MIN])
      o[_MAX] = max(o[_MAX], s[_MAX])
      o[_SUM] += s[_SUM]
      o[_SQUARES] += s[_SQUARES]
  return out


def summarize_stats(stats: Dict[str, list]) -> Dict[str, dict]:
  """{name: {count, missing, min, max, mean, std}} for the report."""
  out = {}
  for name, s in sorted(stats.items()):
    n = s[_COUNT]
    mean = s[_SUM] / n if n else None
    std = math.sqrt(max(s[_SQUARES] / n - mean * mean, 0.0)) if n else None
    out[name] = {'count': n, 'missing': s[_MISSING],
                 'min': s[_MIN] if n else None,
                 'max': s[_MAX] if n else None,
                 'mean': mean, 'std': std}
  return out


def feature_drift(train: Dict[str, dict], other: Dict[str, dict],
                  not_compared=frozenset()) -> Dict[str, float]:
  """Standardized mean difference |mean - train mean| / train std per
  feature both splits have (inf when the training values are constant and
  the other split's mean differs); `not_compared` are the modality's
  statistics that differ from train by construction."""
  out = {}
  for name, t in train.items():
    if name in not_compared:
      continue
    o = other.get(name)
    if not o or t['mean'] is None or o['mean'] is None:
      continue
    diff = abs(o['mean'] - t['mean'])
    if t['std'] and t['std'] > 0:
      out[name] = diff / t['std']
    else:
      out[name] = 0.0 if diff <= 1e-12 * max(1.0, abs(t['mean'])) else (
          math.inf)
  return out


def class_drift(train_counts: Dict[str, int],
                other_counts: Dict[str, int]) -> float:
  """Total variation distance between two class distributions, 0..1."""
  nt, no = sum(train_counts.values()), sum(other_counts.values())
  if not nt or not no:
    return 0.0
  labels = set(train_counts) | set(other_counts)
  return 0.5 * sum(abs(train_counts.get(k, 0) / nt -
                       other_counts.get(k, 0) / no) for k in labels)


# -------------------------------------------------------- shard health --


def single_class_probability(records: int, split_counts: Dict[str, int]
                             ) -> float:
  """How likely a shuffled shard of `records` holds one class only."""
  total = sum(split_counts.values())
  if not total:
    return 1.0
  return sum((n / total) ** records for n in split_counts.values())


def shard_health(shards: List[dict], split_counts: Dict[str, int],
                 record_warn_bytes: int) -> Tuple[List[str], List[str]]:
  """Problems of one split's shards.

  Args:
    shards: The split's shard results ({'file', 'records', 'bytes',
      'class_counts', 'largest_record'}).
    split_counts: The split's class counts.
    record_warn_bytes: Records larger than this are reported.

  Returns:
    (warnings, failures), each a list of sentences naming the file.
  """
  warnings, failures = [], []
  sizes = [s['bytes'] for s in shards if s.get('bytes') is not None]
  median = statistics.median(sizes) if sizes else 0
  for s in shards:
    name = s['file']
    if s['records'] == 0:
      warnings.append(f'{name} is empty')
      continue
    if len(sizes) >= 3 and median > 0 and s.get('bytes') is not None:
      ratio = s['bytes'] / median
      if ratio > SIZE_OUTLIER_FACTOR or ratio < 1 / SIZE_OUTLIER_FACTOR:
        warnings.append(f'{name} holds {s["bytes"]} bytes, {ratio:.2f}x the '
                        f'median shard of its split ({median:.0f} bytes)')
    largest = s.get('largest_record') or 0
    if largest >= PROTOBUF_LIMIT_BYTES:
      failures.append(f'{name} has a record of {largest} bytes, past '
                      'protobuf\'s 2 GiB limit: no reader can parse it')
    elif largest > record_warn_bytes:
      warnings.append(f'{name} has a record of {largest} bytes, over the '
                      f'warning size of {record_warn_bytes} bytes (protobuf '
                      'refuses 2 GiB)')
    counts = s.get('class_counts') or {}
    if len(split_counts) >= 2 and len(counts) == 1:
      p = single_class_probability(s['records'], split_counts)
      if p < SINGLE_CLASS_PROBABILITY:
        (label,) = counts
        warnings.append(
            f'{name} holds only class {label!r} ({s["records"]} records); '
            f'a shuffled shard would do that with probability {p:.1e}')
  return warnings, failures


# ----------------------------------------------------- leakage, copies --


class Member(NamedTuple):
  """A record in a group of records with equal content."""
  split: str
  id: str
  # Equal hashes mean equal inputs (False for texts whose unknown words all
  # became the same OOV ids).
  exact: bool
  label: str = ''
  # Which observation the record is, where equal content can be two
  # observations (sensor: its entity and time); '' where the content alone
  # says which example a record is (images, texts).
  observation: str = ''


def _keep_first(kept: List[dict], entry: dict) -> None:
  """Keeps the MAX_LISTED entries of smallest content hash (so the list
  does not depend on the order groups arrive in)."""
  bisect.insort(kept, entry,
                key=lambda x: (x['content'], x.get('observation', '')))
  del kept[MAX_LISTED:]


def _ids_by(members: List[Member], key: str) -> Dict[str, List[str]]:
  """{split or label: its members' ids}, sorted and cut to 10 each."""
  out: Dict[str, List[str]] = {}
  for m in members:
    out.setdefault(getattr(m, key), []).append(m.id)
  return {k: sorted(v)[:10] for k, v in sorted(out.items())}


def content_findings(
    groups: Iterable[Tuple[str, List[Tuple]]]) -> dict:
  """Leakage across splits, duplicates inside a split and label conflicts.

  Records of equal content are one example where the content says which
  example a record is (images, texts). Where equal content can be two
  observations (sensor rows of two days with equal values), the members'
  `observation` tells them apart: duplicates and label conflicts are
  counted per observation, and an observation in two splits is counted
  besides the content in two splits.

  Args:
    groups: (content hash, members) for every content that occurs more
      than once; each member a Member or a tuple of its fields (split, id,
      exact[, label[, observation]]).

  Returns:
    {'leaked_contents', 'leaked_records', 'leaks': [{'content', 'ids':
    {split: [ids]}}] (exact contents in several splits),
    'possible_leaks' (contents in several splits whose records are not all
    exact), 'possible_leak_examples', 'leaked_observations',
    'leaked_observation_records', 'observation_leaks': [{'content',
    'observation', 'ids'}] (one observation in several splits),
    'duplicates': {split: extra copies of an observation},
    'duplicate_examples': {split: [[ids]]}, 'equal_in_split': {split:
    extra records of equal content, whatever the observation},
    'label_conflicts' (observations whose records have different labels),
    'label_conflict_records', 'label_conflict_examples': [{'content',
    'observation', 'labels': {label: [ids]}}]}, the lists cut at
    MAX_LISTED.
  """
  leaks, possible, observation_leaks, conflicts = [], [], [], []
  counts = dict.fromkeys(
      ('leaked_contents', 'leaked_records', 'possible_leaks',
       'leaked_observations', 'leaked_observation_records',
       'label_conflicts', 'label_conflict_records'), 0)
  duplicates: Dict[str, int] = {}
  equal_in_split: Dict[str, int] = {}
  duplicate_examples: Dict[str, List[List[str]]] = {}
  for content, members in groups:
    members = [Member(*m) for m in members]
    exact = all(m.exact for m in members)
    by_split = _ids_by(members, 'split')
    if exact:
      for split, n in collections.Counter(m.split for m in members).items():
        if n > 1:
          equal_in_split[split] = equal_in_split.get(split, 0) + n - 1
    if len(by_split) > 1:
      entry = {'content': content, 'ids': by_split}
      if exact:
        counts['leaked_contents'] += 1
        counts['leaked_records'] += len(members)
        _keep_first(leaks, entry)
      else:
        counts['possible_leaks'] += 1
        _keep_first(possible, entry)
    if not exact:
      continue
    observations: Dict[str, List[Member]] = {}
    for m in members:
      observations.setdefault(m.observation, []).append(m)
    for observation, same in sorted(observations.items()):
      _observation_findings(content, observation, same, counts, duplicates,
                            duplicate_examples, observation_leaks,
                            conflicts)
  return dict(
      counts, leaks=leaks, possible_leak_examples=possible,
      observation_leaks=observation_leaks,
      label_conflict_examples=conflicts,
      duplicates=dict(sorted(duplicates.items())),
      duplicate_examples={k: sorted(v) for k, v in
                          sorted(duplicate_examples.items())},
      equal_in_split=dict(sorted(equal_in_split.items())))


def _observation_findings(content: str, observation: str,
                          same: List[Member], counts: dict,
                          duplicates: Dict[str, int],
                          duplicate_examples: Dict[str, List[List[str]]],
                          observation_leaks: List[dict],
                          conflicts: List[dict]) -> None:
  """Adds what the records `same` of one observation show: copies inside a
  split, the observation in several splits, different labels."""
  if len(same) < 2:
    return
  by_split: Dict[str, List[str]] = {}
  for m in same:
    by_split.setdefault(m.split, []).append(m.id)
  for split, ids in by_split.items():
    if len(ids) > 1:
      duplicates[split] = duplicates.get(split, 0) + len(ids) - 1
      examples = duplicate_examples.setdefault(split, [])
      if len(examples) < MAX_LISTED:
        examples.append(sorted(ids)[:10])
  if len(by_split) > 1:
    counts['leaked_observations'] += 1
    counts['leaked_observation_records'] += len(same)
    _keep_first(observation_leaks, {
        'content': content, 'observation': observation,
        'ids': _ids_by(same, 'split')})
  if len({m.label for m in same}) > 1:
    counts['label_conflicts'] += 1
    counts['label_conflict_records'] += len(same)
    _keep_first(conflicts, {'content': content, 'observation': observation,
                            'labels': _ids_by(same, 'label')})


def recording_findings(
    recordings: Iterable[Tuple[str, Dict[str, int]]]) -> dict:
  """Recordings (such as a sensor's entity) with records in several splits.

  Args:
    recordings: (recording, {split: its records there}) for every
      recording found in more than one split.

  Returns:
    {'recordings_in_splits', 'records', 'examples': [{'recording',
    'records': {split: n}}]}, the list cut at MAX_LISTED (the first
    recordings by name).
  """
  found, records, examples = 0, 0, []
  for recording, splits in recordings:
    found += 1
    records += sum(splits.values())
    bisect.insort(examples, {'recording': recording,
                             'records': dict(sorted(splits.items()))},
                  key=lambda x: x['recording'])
    del examples[MAX_LISTED:]
  return {'recordings_in_splits': found, 'records': records,
          'examples': examples}


def widen_time_range(span: Optional[dict], start: int, end: int,
                     ex_id: str) -> dict:
  """The time range `span` ({'first': [time, id], 'last': [time, id]}: the
  earliest start and the latest end with their records' ids, or None)
  widened to a record from `start` to `end`; ties go to the smaller id, so
  the result does not depend on the order records come in."""
  return merge_time_ranges([span, {'first': [start, ex_id],
                                   'last': [end, ex_id]}])


def merge_time_ranges(spans: Iterable[Optional[dict]]) -> Optional[dict]:
  """The time range covering `spans` (see widen_time_range), or None."""
  spans = [s for s in spans if s]
  if not spans:
    return None
  first = min(tuple(s['first']) for s in spans)
  last = min((-s['last'][0], s['last'][1]) for s in spans)
  return {'first': list(first), 'last': [-last[0], last[1]]}


# ------------------------------------------------------- near-duplicates --

# Pairs across splits and groups listed in the report.
MAX_NEAR_LISTED = 10


def near_duplicate_rules(manifest: dict):
  """The near-duplicate distances the dataset was written with (its
  config), or the defaults for a dataset whose config has none."""
  from transforms import modalities  # pylint: disable=import-outside-toplevel
  given = ((manifest.get('config') or {}).get('contents') or {}).get(
      'near_duplicates') or {}
  return modalities.of_manifest(manifest).near_duplicate_rules_of(given)


def near_duplicate_findings(gathered, rules) -> dict:
  """Near-duplicate groups among the records read back, and the pairs of
  them in two splits (leakage).

  Args:
    gathered: core/near_duplicate_pipeline's gathered pairs: ({(content a,
      content b): values}, {content: Info}), the ids being (id, shard file,
      record number).
    rules: The NearDuplicateRules whose distances were applied.

  Returns:
    {'kind': 'pictures' or 'documents', the rules' distances
    ('hash_distance' and 'thumb_distance', or 'similarity'), 'groups',
    'members', 'edges', 'pairs_across_splits', 'across': [{'a', 'b',
    'splits', and the pair's distances}], 'label_conflict_groups',
    'label_conflicts':
    [{'labels': {label: [ids]}}], 'listed_groups': [{'members': [{'id',
    'label', 'split', 'file', 'record'}]}] (a record per content and
    split)}, the lists cut at MAX_NEAR_LISTED.
  """
  from transforms.core import near_duplicate_decisions  # pylint: disable=import-outside-toplevel
  from transforms.core import near_duplicates as near_lib  # pylint: disable=import-outside-toplevel
  edges, infos = gathered
  root_of = near_duplicate_decisions.components(edges)
  groups: Dict[str, List[str]] = {}
  for content, root in root_of.items():
    groups.setdefault(root, []).append(content)
  across, conflicts, listed = [], [], []
  crossing = 0
  measure = near_lib.measure_of(rules)
  for (a, b), values in sorted(edges.items()):
    pairs = sorted((ia[0], sa, ib[0], sb)
                   for sa, ia in infos[a]['ids'].items()
                   for sb, ib in infos[b]['ids'].items() if sa != sb)
    if not pairs:
      continue
    crossing += 1
    if len(across) < MAX_NEAR_LISTED:
      id_a, split_a, id_b, split_b = pairs[0]
      across.append({'a': id_a[0], 'b': id_b[0], 'splits': [split_a, split_b],
                     **dict(zip(measure.fields, values))})
  conflict_groups = 0
  member_count = 0
  for root in sorted(groups):
    contents = sorted(groups[root])
    member_count += sum(infos[c]['count'] for c in contents)
    shown = sorted((ex_id, label, split) for c in contents
                   for split, (ex_id, label) in infos[c]['ids'].items())
    labels: Dict[str, int] = {}
    for c in contents:
      for label, n in infos[c]['labels'].items():
        labels[label] = labels.get(label, 0) + n
    if len(labels) > 1:
      conflict_groups += 1
      if len(conflicts) < MAX_NEAR_LISTED:
        named: Dict[str, List[str]] = {label: [] for label in labels}
        for (ex_id, _, _), label, _ in shown:
          named[label].append(ex_id)
        conflicts.append({'labels': {k: sorted(v)[:10]
                                     for k, v in sorted(named.items())}})
    if len(listed) < MAX_NEAR_LISTED:
      listed.append({'members': [
          {'id': ex_id, 'label': label, 'split': split, 'file': file,
           'record': number}
          for (ex_id, file, number), label, split in shown[:10]]})
  distances = {k: v for k, v in rules.to_json().items() if k != 'mode'}
  return {'kind': measure.noun, **distances,
          'groups': len(groups), 'members': member_count,
          'edges': len(edges), 'pairs_across_splits': crossing,
          'across': across, 'label_conflict_groups': conflict_groups,
          'label_conflicts': conflicts, 'listed_groups': listed}
