"""The Beam steps that find near-duplicate groups (core/near_duplicates.py):
the signatures banded into runner groups, each group's candidate pairs
verified, the verified pairs and what is known of their contents gathered in
one place, and the decisions taken there (core/near_duplicate_decisions.py).
"""

import functools
import itertools
from typing import Dict, List, NamedTuple, Optional, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.utils.windowed_value import WindowedValue

from transforms.runtime import hold as hold_lib
from transforms.core import near_duplicate_decisions
from transforms.core import near_duplicates


# A bucket larger than this is verified a block of rows at a time.
_BLOCK = 512
# Entries the banding holds before it hands on what it has.
_FLUSH_ROWS = 1 << 16
# A content digest's bytes (128 bits).
_DIGEST_BYTES = 16


# Runner groups the contents' Infos are spread over (by digest).
_INFO_GROUPS = 64


def _info_group(digest: str) -> int:
  return int(digest[:8], 16) % _INFO_GROUPS


class NearBatch(NamedTuple):
  """Entries of GatherNearDuplicates as columns (one element for a batch
  of examples, cheaper to move than a tuple per example)."""
  ids: list
  digests: List[str]
  labels: list
  splits: List[str]
  # uint8 [n, signature bytes]; with `usable`, only what the verification
  # reads of each (the measure's `carried`).
  signatures: np.ndarray
  # uint64 [n, tables]: each row's bucket in each table, when they were
  # found where the signatures were made (documents: text/signatures.py
  # band_keys); else the banding finds them.
  keys: Optional[np.ndarray] = None
  # bool [n]: the measure's `usable` of each row, found with `keys` where
  # the signatures were made, which then sends only their carried part
  # (documents: text/ranges.batch_keys); else the banding finds it.
  usable: Optional[np.ndarray] = None


def _as_batch(entries) -> NearBatch:
  """A NearBatch of a NearBatch or of a list of (id, content digest,
  label, split, signature)."""
  if isinstance(entries, NearBatch):
    return entries
  ids, digests, labels, splits, sigs = (list(c) for c in zip(*entries))
  return NearBatch(ids, digests, labels, splits, np.frombuffer(
      b''.join(sigs), np.uint8).reshape(len(sigs), -1))


class _BandFn(beam.DoFn):
  """Entries (lists of tuples, or NearBatch) -> per runner group of each
  table, one element per _FLUSH_ROWS entries (and at the end of a bundle):
  ((table, group), part), the part's buckets, what the verification needs
  of the signatures and the digests, as compact arrays (the runner's cost
  is per element, and each content is in every table); and, tagged
  'info', (info group, (digests, ids, labels, splits)): the entries as
  columns, from which the Infos of the few contents with an edge are made
  later (_InfosOfFn).

  With a `folder`, each flush writes its parts and columns to one file
  there (runtime/hold.py) and the elements carry only where they are in it:
  the runner then moves a few small elements per flush whatever the size
  of the dataset (the local runner keeps a grouping's input in memory),
  and this function holds at most _FLUSH_ROWS entries.
  """

  INFO = 'info'

  def __init__(self, rules: near_duplicates.NearDuplicateRules,
               folder: Optional[str] = None):
    super().__init__()
    self._rules, self._folder = rules, folder

  def start_bundle(self):
    self._held: List[NearBatch] = []
    self._rows = 0

  def process(self, entries):
    batch = _as_batch(entries)
    if not len(batch.ids):
      return
    self._held.append(batch)
    self._rows += len(batch.ids)
    if self._rows >= _FLUSH_ROWS:
      yield from self._flush()

  def finish_bundle(self):
    window = (beam.transforms.window.GlobalWindow(),)
    for item in self._flush():
      if isinstance(item, beam.pvalue.TaggedOutput):
        yield beam.pvalue.TaggedOutput(item.tag, WindowedValue(
            item.value, 0, window))
      else:
        yield WindowedValue(item, 0, window)

  def _flush(self):
    held, self._held, self._rows = self._held, [], 0
    if not held:
      return []
    measure = near_duplicates.measure_of(self._rules)
    digests = [d for b in held for d in b.digests]
    names = np.frombuffer(bytes.fromhex(''.join(digests)),
                          np.uint8).reshape(len(digests), -1)
    # (Batch by batch: the signatures, 256 bytes a document, are not
    # copied into one array.)
    compact = [b.usable is not None for b in held]
    if any(c and b.keys is None for c, b in zip(compact, held)):
      raise ValueError('a NearBatch with `usable` (its signatures carried '
                       'only) needs its `keys`')
    usable = np.concatenate([b.usable if c else measure.usable(b.signatures)
                             for c, b in zip(compact, held)])
    keys = np.concatenate([measure.keys(b.signatures) if b.keys is None
                           else b.keys for b in held])
    # What the verification reads of a row, once per row: its carried
    # signature and its digest.
    carried = np.concatenate([b.signatures if c else
                              measure.carried(b.signatures)
                              for c, b in zip(compact, held)])
    block = np.concatenate([carried, names], axis=1)
    if not usable.all():  # (almost every row is usable: no copy then)
      keys, block = keys[usable], block[usable]
    # A table's buckets, in a row of their own (not a column strided across
    # all the rows), and their runner groups.
    keys = np.ascontiguousarray(keys.T)
    groups = measure.group_of(keys).astype(np.uint8)
    spill = hold_lib.Spill(self._folder) if self._folder else None
    block = spill.put_rows(block) if spill else block
    rows = np.arange(keys.shape[1], dtype=np.uint32)
    out = []
    for t in range(measure.tables):
      buckets, group = keys[t], groups[t]
      # (A stable sort of small numbers is a radix sort.)
      order = np.argsort(group, kind='stable')
      starts = np.flatnonzero(np.r_[True, np.diff(group[order]) != 0])
      ends = np.r_[starts[1:], len(order)]
      for lo, hi in zip(starts.tolist(), ends.tolist()):
        idx = order[lo:hi]
        part = (block, buckets[idx], rows[idx])
        out.append(((t, int(group[idx[0]])),
                    spill.put(part) if spill else part))
    group_of = (names[:, :4].copy().view('>u4').ravel()
                % _INFO_GROUPS).astype(np.int64)
    order = np.argsort(group_of, kind='stable')
    starts = np.flatnonzero(np.r_[True, np.diff(group_of[order]) != 0])
    ends = np.r_[starts[1:], len(order)]
    columns = [np.asarray(c, object) for c in (
        [i for b in held for i in b.ids],
        [x for b in held for x in b.labels],
        [x for b in held for x in b.splits])]
    for lo, hi in zip(starts.tolist(), ends.tolist()):
      idx = order[lo:hi]
      part = (names[idx], *(c[idx].tolist() for c in columns))
      out.append(beam.pvalue.TaggedOutput(
          self.INFO, (int(group_of[idx[0]]),
                      spill.put(part) if spill else part)))
    if spill:
      spill.close()
    return out


def _pairs_of(size: int) -> Tuple[np.ndarray, np.ndarray]:
  """(i, j) of every pair i < j of range(size). NumPy's triu_indices makes
  a size x size mask each time, and the small sizes come back in every
  table: those are kept (all up to 64 hold 44,000 pairs)."""
  if size <= 64:
    return _small_pairs_of(size)
  return np.triu_indices(size, 1)


@functools.lru_cache(maxsize=None)
def _small_pairs_of(size: int) -> Tuple[np.ndarray, np.ndarray]:
  i, j = np.triu_indices(size, 1)
  i.setflags(write=False)
  j.setflags(write=False)
  return i, j


def _pairs_in_runs(starts: np.ndarray, ends: np.ndarray
                   ) -> Tuple[np.ndarray, np.ndarray]:
  """(i, j) of every pair i < j inside each run [start, end)."""
  sizes = ends - starts
  firsts, seconds = [], []
  for size in np.unique(sizes[sizes > 1]).tolist():
    at = starts[sizes == size]
    i, j = _pairs_of(size)
    firsts.append((at[:, None] + i[None, :]).ravel())
    seconds.append((at[:, None] + j[None, :]).ravel())
  if not firsts:
    return np.zeros(0, np.int64), np.zeros(0, np.int64)
  return np.concatenate(firsts), np.concatenate(seconds)


class _SpillReadingFn(beam.DoFn):
  """A DoFn that takes Spill references through one hold.Reader per
  bundle (self._reader), its files closed at the bundle's end."""

  def __init__(self):
    super().__init__()
    self._reader = None

  def start_bundle(self):
    self._reader = hold_lib.Reader()

  def finish_bundle(self):
    self._reader.close()

  def teardown(self):
    if self._reader is not None:
      self._reader.close()


class _PairsFn(_SpillReadingFn):
  """(runner group, parts) -> the verified pairs of its buckets: (digest a,
  digest b, values), a < b, the values being the pair's distances
  (fields_of). A part is (block of rows, buckets, row of each in the
  block); only the rows of buckets with more than one row are read from
  their blocks. A pair may come more than once (a content in several
  flushes); gathering keeps one."""

  def __init__(self, rules: near_duplicates.NearDuplicateRules):
    super().__init__()
    self._rules = rules

  def process(self, group):
    _, parts = group
    measure = near_duplicates.measure_of(self._rules)
    parts = [self._reader.take(p) for p in parts]
    buckets = np.concatenate([p[1] for p in parts])
    part_of = np.concatenate([np.full(len(p[1]), k, np.int64)
                              for k, p in enumerate(parts)])
    row_of = np.concatenate([p[2] for p in parts]).astype(np.int64)
    # (Any order within a bucket finds its pairs; NumPy's quicksort of
    # 64-bit keys is six times faster than its stable sort.)
    order = np.argsort(buckets)
    buckets = buckets[order]
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    ends = np.r_[starts[1:], len(buckets)]
    crowded = (ends - starts) > 1
    starts, ends = starts[crowded], ends[crowded]
    if not len(starts):
      return
    # The rows of buckets with a pair, read from their blocks.
    wanted = np.concatenate([np.arange(lo, hi) for lo, hi in zip(
        starts.tolist(), ends.tolist())])
    rows = self._rows(parts, part_of[order[wanted]], row_of[order[wanted]])
    width = rows.shape[1] - _DIGEST_BYTES
    carried, names = rows[:, :width], rows[:, width:]
    at = np.zeros(len(buckets), np.int64)
    at[wanted] = np.arange(len(wanted))
    starts, ends = at[starts], at[ends - 1] + 1
    state = measure.prepared(carried)
    # Small buckets (almost all) at once; a crowded one (many pictures
    # with one look: blank frames, one template; documents of one
    # boilerplate) a block of rows at a time, so that memory stays bounded.
    small = (ends - starts) <= _BLOCK
    found = []
    i, j = _pairs_in_runs(starts[small], ends[small])
    if len(i):
      i, j, values = measure.check(state, i, j)
      found.append(zip(i.tolist(), j.tolist(),
                       zip(*(v.tolist() for v in values))))
    for lo, hi in zip(starts[~small].tolist(), ends[~small].tolist()):
      run = measure.prepared(carried[lo:hi])
      # (A list now: a generator would read `lo` when it is consumed,
      # after the loop, and place every crowded bucket's pairs at the
      # last one's rows.)
      found.append([(lo + a, lo + b, v)
                    for a, b, v in near_duplicates.verified(
                        measure, run, hi - lo)])
    for a, b, values in itertools.chain.from_iterable(found):
      da, db = names[a].tobytes().hex(), names[b].tobytes().hex()
      if da == db:
        continue  # one content from two flushes
      yield (da, db, tuple(values)) if da < db else (db, da, tuple(values))

  def _rows(self, parts, part_of: np.ndarray, row_of: np.ndarray
            ) -> np.ndarray:
    """The rows (part_of[k], row_of[k]) of the parts' blocks, in order;
    each block read once."""
    out = None
    for k in np.unique(part_of).tolist():
      here = np.flatnonzero(part_of == k)
      wanted, back = np.unique(row_of[here], return_inverse=True)
      got = self._reader.take_rows(parts[k][0], wanted)[back]
      if out is None:
        out = np.empty((len(part_of), got.shape[1]), np.uint8)
      out[here] = got
    return out


class _InfosOfFn(_SpillReadingFn):
  """(info group, [('edge', digests) and ('info', columns)]) -> (digest,
  Info) of each content of the group that has an edge."""

  def process(self, group):
    _, items = group
    wanted, parts = set(), []
    for kind, value in items:
      if kind == 'edge':
        wanted.update(value)
      else:
        parts.append(value)
    if not wanted:
      return
    infos: Dict[str, dict] = {}
    for part in parts:
      names, ids, labels, splits = self._reader.take(part)
      for k, raw in enumerate(names):
        digest = raw.tobytes().hex()
        if digest in wanted:
          infos[digest] = near_duplicate_decisions.merge_info(
              infos.get(digest), (ids[k], labels[k], splits[k]))
    for digest in sorted(infos):
      yield digest, infos[digest]


class _GatherFn(beam.CombineFn):
  """Verified pairs ((a, b, values)) and Infos ((digest, Info)) -> ({(a,
  b): values}, {digest: Info}): each pair once (it may meet in several
  tables)."""

  def create_accumulator(self):
    return {}, {}

  def add_input(self, acc, item):
    edges, infos = acc
    if len(item) == 3:
      a, b, values = item
      edges[(a, b)] = values
    else:
      digest, info = item
      infos[digest] = near_duplicate_decisions.merge_info(infos.get(digest),
                                                          info)
    return acc

  def merge_accumulators(self, accs):
    edges, infos = {}, {}
    for e, i in accs:
      edges.update(e)
      for digest, info in i.items():
        infos[digest] = near_duplicate_decisions.merge_info(
            infos.get(digest), info)
    return edges, infos

  def extract_output(self, acc):
    return acc


class GatherNearDuplicates(beam.PTransform):
  """Lists of (id, content digest, label, split, signature) -> one element:
  ({(digest a, digest b): values}, {digest: Info}), the verified pairs
  with their distances (fields_of) and what is known of their contents.
  The signatures are of pictures or of documents, as the rules are. Ids may
  be any sortable value. With a `folder`, what is grouped waits there
  (see _BandFn)."""

  def __init__(self, rules: near_duplicates.NearDuplicateRules,
               folder: Optional[str] = None):
    super().__init__()
    self._rules, self._folder = rules, folder

  def expand(self, entries):
    banded = entries | 'Bands' >> beam.ParDo(
        _BandFn(self._rules, self._folder)).with_outputs(
        _BandFn.INFO, main='bands')
    pairs = (banded.bands
             | 'GroupByBucket' >> beam.GroupByKey()
             | 'VerifyPairs' >> beam.ParDo(_PairsFn(self._rules)))
    wanted = pairs | 'DigestsOfPairs' >> beam.FlatMap(
        lambda p: [(_info_group(p[0]), ('edge', [p[0]])),
                   (_info_group(p[1]), ('edge', [p[1]]))])
    infos = banded[_BandFn.INFO] | 'Tagged' >> beam.Map(
        lambda kv: (kv[0], ('info', kv[1])))
    found = ((wanted, infos)
             | 'AllByDigest' >> beam.Flatten()
             | 'GroupByDigest' >> beam.GroupByKey()
             | 'InfosOfPairs' >> beam.ParDo(_InfosOfFn()))
    return ((pairs, found)
            | 'PairsAndInfos' >> beam.Flatten()
            | 'Gather' >> beam.CombineGlobally(_GatherFn()))


class NearDuplicateGroups(beam.PTransform):
  """Finds near-duplicate groups and decides what happens to their members.

  Input: lists of (id, content digest, label, split, signature), one entry
  per example (its first copy). Output: (decisions, summary), each one
  element: decide()'s {digest: decision} of every content in a group, and
  the manifest's near-duplicate counts.
  """

  def __init__(self, rules: near_duplicates.NearDuplicateRules,
               label_conflicts: str, split_key: str, ratios,
               folder: Optional[str] = None):
    super().__init__()
    self._rules, self._conflicts = rules, label_conflicts
    self._split_key, self._ratios = split_key, list(ratios or [])
    self._folder = folder

  def expand(self, entries):
    rules, conflicts = self._rules, self._conflicts
    split_key, ratios = self._split_key, self._ratios
    gathered = entries | 'Gather' >> GatherNearDuplicates(rules, self._folder)

    def decided(acc):
      edges, infos = acc
      decisions, summary = near_duplicate_decisions.decide(
          edges, infos, rules, conflicts, split_key, ratios)
      return decisions, {**rules.to_json(), **summary}

    both = gathered | 'Decide' >> beam.Map(decided)
    return (both | 'Decisions' >> beam.Map(lambda d: d[0]),
            both | 'Summary' >> beam.Map(lambda d: d[1]))
