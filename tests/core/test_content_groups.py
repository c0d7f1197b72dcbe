"""ContentGroups over batched digests gives what it gives per example.

Text hands its content digests over a batch at a time, spread over a few
buckets (core/contents.batched); images one per example. The fixture has
what real collections have: a quotation repeated in three batches (so in
three elements of one bucket), the same content under two labels, a 2-vs-1
labelled content, a tie, a copy in another split and an id listed twice.
"""

import collections
import hashlib

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import pytest

from transforms.core import contents


def _digest(text):
  return hashlib.sha256(text.encode()).hexdigest()[:32]


def _batches():
  """Batches of (digest, (id, label, split)), as a reader makes them."""
  rows = []
  for i in range(30):  # unique contents
    rows.append((f'unique {i}', f'a.csv:{i}', 'cat', 'train'))
  # One quotation in three files, each a different batch.
  rows += [('to be or not', 'a.csv:100', 'quote', 'train'),
           ('to be or not', 'b.csv:7', 'quote', 'train'),
           ('to be or not', 'c.csv:3', 'quote', 'train')]
  # A conflict 2 against 1 (majority keeps two), and a tie (all dropped).
  rows += [('tabby', 'a.csv:200', 'cat', 'train'),
           ('tabby', 'b.csv:200', 'cat', 'train'),
           ('tabby', 'c.csv:200', 'dog', 'train'),
           ('husky', 'a.csv:300', 'dog', 'test'),
           ('husky', 'b.csv:300', 'wolf', 'test')]
  # A copy in another split (split_key id) and an id listed twice.
  rows += [('shared', 'a.csv:400', 'cat', 'train'),
           ('shared', 'b.csv:400', 'cat', 'test'),
           ('twice', 'a.csv:500', 'cat', 'train'),
           ('twice', 'a.csv:500', 'cat', 'train')]
  # Spread so every repeated content has copies in different batches.
  batches = collections.defaultdict(list)
  for n, (text, ex_id, label, split) in enumerate(rows):
    batches[n % 7].append((_digest(text), (ex_id, label, split)))
  return list(batches.values())


def _columns(batch):
  """(digests, ids, labels, splits) of [(digest, (id, label, split))]."""
  return ([d for d, _ in batch],) + tuple(
      [m[k] for _, m in batch] for k in range(3))


def _elements(batched, buckets=3):
  """ContentGroups' input, batched or one element per example."""
  batches = _batches()
  if batched:
    elements = [group for batch in batches
                for group in contents.batched(*_columns(batch), buckets)]
  else:
    elements = [pair for batch in batches for pair in batch]
  return elements


def _expected(rules):
  """Plain Python: decide() on every repeated content."""
  groups = collections.defaultdict(list)
  for batch in _batches():
    for digest, member in batch:
      groups[digest].append(member)
  fn = contents.SummaryFn(rules)
  drops, acc = [], fn.create_accumulator()
  for digest, members in groups.items():
    if len(members) < 2:
      continue
    dropped_members, finding = contents.decide(members, rules)
    dropped = {'duplicates': 0, 'conflicts': 0}
    for (ex_id, _, _), reason in dropped_members:
      drops.append((ex_id, reason))
      dropped['duplicates' if reason.startswith('duplicate')
              else 'conflicts'] += 1
    acc = fn.add_input(acc, (digest, finding, len(members), dropped))
  return sorted(drops), fn.extract_output(acc)


RULES = [contents.ContentRules(),
         contents.ContentRules(label_conflicts='drop'),
         contents.ContentRules(label_conflicts='majority',
                               drop_duplicates=True),
         contents.ContentRules(split_key='id', drop_duplicates=True)]


@pytest.mark.parametrize('rules', RULES, ids=lambda r: f'{r.split_key}-'
                         f'{r.label_conflicts}-{r.drop_duplicates}')
@pytest.mark.parametrize('batched', [False, True], ids=['each', 'batched'])
def test_batched_and_per_example_contents_give_the_same_drops_and_summary(
    rules, batched):
  want_drops, want_summary = _expected(rules)
  with TestPipeline() as p:
    drops, summary = (p | beam.Create(_elements(batched))
                      | contents.ContentGroups(rules, batched_input=batched))
    assert_that(drops | beam.Map(lambda kv: (kv[0], kv[1]['reason'])),
                equal_to(want_drops), label='Drops')
    assert_that(summary, equal_to([want_summary]), label='Summary')


def test_the_fixture_has_what_the_test_is_about():
  """The oracle itself finds the repeats (so equal outputs mean
  something): 2 conflicts, the repeated quotation's duplicates, the copy
  in two splits."""
  drops, summary = _expected(contents.ContentRules(label_conflicts='drop'))
  assert summary['conflicting_contents'] == 2
  assert summary['conflicting_examples'] == 5
  # quote x2, 'twice' x1, the two cats of 'tabby' x1
  assert summary['duplicates'] == {'train': 4}
  assert summary['in_several_splits'] == 1
  assert len(drops) == 5
  assert all(r.startswith('label conflict') for _, r in drops)


def test_buckets_follow_the_input_size():
  assert contents.content_buckets(None) == 1
  assert contents.content_buckets(0) == 1
  assert contents.content_buckets(1) == 1
  assert contents.content_buckets(contents.BUCKET_INPUT_BYTES) == 1
  assert contents.content_buckets(contents.BUCKET_INPUT_BYTES + 1) == 2
  assert contents.content_buckets(100 * contents.BUCKET_INPUT_BYTES) == 100


def test_a_batch_goes_to_one_element_per_bucket_it_touches():
  batch = _batches()[0]
  groups = list(contents.batched(*_columns(batch), 3))
  assert 1 < len(groups) <= 3
  pairs = [(d, (i, lab, s)) for _, columns in groups
           for d, i, lab, s in zip(*columns)]
  assert sorted(pairs) == sorted(batch)
  for bucket, (digests, *others) in groups:
    assert {contents.content_bucket(d, 3) for d in digests} == {bucket}
    assert all(len(column) == len(digests) for column in others)
  # In the batch's order within each bucket; one bucket: the whole batch.
  for bucket, columns in groups:
    assert [(d, (i, lab, s)) for d, i, lab, s in zip(*columns)] == [
        p for p in batch if contents.content_bucket(p[0], 3) == bucket]
  [(only, whole)] = contents.batched(*_columns(batch), 1)
  assert only == 0
  assert [(d, (i, lab, s)) for d, i, lab, s in zip(*whole)] == batch
  assert not list(contents.batched([], [], [], [], 3))


@pytest.mark.parametrize('extra', [
    [], ['ABCDEF0123456789'], ['0' * 15, 'f' * 15], ['abc'],
    ['12345678901234g'], ['1234567890123é4'], [' 1234567890abcde']],
                         ids=['ours', 'upper', 'edges', 'short', 'not-hex',
                              'non-ascii', 'space'])
def test_batched_buckets_are_content_bucket_of_each_digest(extra):
  # Our digests (32 hex digits), plus odd ones that take the slow path.
  digests = [hashlib.sha256(str(i).encode()).hexdigest()[:32]
             for i in range(3000)] + extra
  n = len(digests)
  ids = [f'f.csv:{i}' for i in range(n)]
  labels = [f'l{i % 5}' for i in range(n)]
  splits = [('train', 'test')[i % 2] for i in range(n)]
  for buckets in (2, 7, 34, 1000):
    want = collections.defaultdict(list)  # first appearance order
    try:
      for i, d in enumerate(digests):
        want[contents.content_bucket(d, buckets)].append(i)
    except ValueError:  # not a number: batched refuses it as before
      with pytest.raises(ValueError, match='invalid literal'):
        list(contents.batched(digests, ids, labels, splits, buckets))
      continue
    groups = list(contents.batched(digests, ids, labels, splits, buckets))
    assert [b for b, _ in groups] == list(want)
    for b, columns in groups:
      at = want[b]
      assert columns == ([digests[i] for i in at], [ids[i] for i in at],
                         [labels[i] for i in at], [splits[i] for i in at])
      assert all(isinstance(c, list) for c in columns)
