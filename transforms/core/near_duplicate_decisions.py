"""What happens to the contents of each near-duplicate group
(core/near_duplicates.py): the groups are the connected components of the
verified pairs; each goes to one split, and its members are kept, dropped as
near-duplicates (--near_duplicates drop) or dropped for their labels
(--label_conflicts). Plain functions of what was gathered; no Beam.
"""

from typing import Dict, Iterable, List, Optional, Tuple

from transforms.core import near_duplicates
from transforms.core import splits as split_lib


# Groups listed in the manifest.
MAX_LISTED = 10
_IDS_PER_GROUP = 10


def components(edges: Iterable[Tuple[str, str]]) -> Dict[str, str]:
  """{node: the smallest node of its group} for every node that has an
  edge; nodes without one are in no group."""
  parent: Dict[str, str] = {}

  def find(x: str) -> str:
    root = x
    while parent[root] != root:
      root = parent[root]
    while parent[x] != root:
      parent[x], x = root, parent[x]
    return root

  for a, b in edges:
    parent.setdefault(a, a)
    parent.setdefault(b, b)
    ra, rb = find(a), find(b)
    if ra != rb:
      # The smaller node is the root, so the result does not depend on the
      # order of the edges.
      if rb < ra:
        ra, rb = rb, ra
      parent[rb] = ra
  return {x: find(x) for x in parent}


# What a group's decisions know of one content: {'ids': {split: (smallest
# id, its label)}, 'splits': {split: examples}, 'labels': {label: examples},
# 'count': examples}. A content's examples are counted, not listed, so that
# what is gathered stays small whatever the number of copies.
Info = Dict[str, dict]


def new_info(ex_id, label: str, split: str) -> dict:
  """The Info of one example."""
  return {'ids': {split: (ex_id, label)}, 'splits': {split: 1},
          'labels': {label: 1}, 'count': 1}


def merge_info(a: Optional[dict], b) -> dict:
  """Two Infos of one content as one (a is changed; None for none); b may
  also be one example's (id, label, split)."""
  if isinstance(b, tuple):
    b = new_info(*b)
  if a is None:
    return {'ids': dict(b['ids']), 'splits': dict(b['splits']),
            'labels': dict(b['labels']), 'count': b['count']}
  for split, first in b['ids'].items():
    if split not in a['ids'] or first < a['ids'][split]:
      a['ids'][split] = first
  for key in ('splits', 'labels'):
    for k, n in b[key].items():
      a[key][k] = a[key].get(k, 0) + n
  a['count'] += b['count']
  return a


def first_id(info: dict):
  """The smallest id of a content."""
  return min(ex_id for ex_id, _ in info['ids'].values())


def _named_labels(labels: Dict[str, int]) -> str:
  return ', '.join(f'{label} ({n})' for label, n in sorted(labels.items()))


def decide(edges: Dict[Tuple[str, str], Tuple[int, float]],
           infos: Dict[str, dict], rules: near_duplicates.NearDuplicateRules,
           label_conflicts: str, split_key: str, ratios
           ) -> Tuple[Dict[str, dict], dict]:
  """What to do with the contents of every near-duplicate group.

  Args:
    edges: {(digest a, digest b): values}, a < b: the verified pairs of
      contents, with their distances (fields_of(rules)).
    infos: {digest: Info} of every content with an edge.
    rules: The near-duplicate rules.
    label_conflicts: 'keep', 'drop' or 'majority' (core/contents.py).
    split_key: 'content', 'id' or 'input' (core/contents.py): how the
      group's split is chosen (a hash of its smallest digest or smallest
      id); with 'input' the input names the splits and nothing moves.
    ratios: The split ratios, [(name, ratio)] (unused with 'input').

  Returns:
    ({digest: {'group': key, 'split': split or None (where the input names
    it), 'drop': reason or None, 'drop_labels': {label: reason}}} of every
    content in a group: its examples go to `split`, and are dropped with
    `drop`, or those of a label in `drop_labels` with that reason; the
    summary for the manifest's contents section).
  """
  groups, edges_of = _groups_of(edges)
  measure = near_duplicates.measure_of(rules)
  fields, noun = measure.fields, measure.noun
  decisions: Dict[str, dict] = {}
  listed = []
  summary = {'groups': 0, 'members': 0, 'contents': 0, 'edges': len(edges),
             'largest_group': 0, 'label_conflicts': 0,
             'conflicting_examples': 0, 'groups_across_splits': 0,
             'moved': 0, 'dropped': {'near_duplicates': 0,
                                     'label_conflicts': 0}}
  for root in sorted(groups):
    digests = sorted(groups[root])
    key = digests[0]
    size = sum(infos[d]['count'] for d in digests)
    split = _group_split(digests, infos, split_key, ratios)
    summary['groups'] += 1
    summary['members'] += size
    summary['contents'] += len(digests)
    summary['largest_group'] = max(summary['largest_group'], size)
    splits = {s for d in digests for s in infos[d]['splits']}
    if split is None and len(splits) > 1:
      summary['groups_across_splits'] += 1
    labels = _labels_of(digests, infos)
    whole: Dict[str, str] = {}  # digest -> reason
    by_label: Dict[str, str] = {}  # label -> reason
    if len(labels) > 1:
      summary['label_conflicts'] += 1
      summary['conflicting_examples'] += size
      whole, by_label = _label_conflict_reasons(digests, labels,
                                                label_conflicts, noun)
    summary['dropped']['label_conflicts'] += _examples_dropped(
        digests, infos, whole, by_label)
    if rules.mode == 'drop':
      near, dropped = _near_duplicate_reasons(digests, infos, whole,
                                              by_label)
      whole.update(near)
      summary['dropped']['near_duplicates'] += dropped
    for d in digests:
      info = infos[d]
      if split is not None:
        summary['moved'] += sum(n for s, n in info['splits'].items()
                                if s != split)
      decisions[d] = {'group': key, 'split': split, 'drop': whole.get(d),
                      'drop_labels': {label: r for label, r in
                                      by_label.items()
                                      if label in info['labels']}}
    if len(listed) < MAX_LISTED:
      listed.append(_listed_group(digests, split, size, labels,
                                  edges_of.get(root, []), infos, fields))
  summary['examples'] = listed
  return decisions, summary


def _groups_of(edges: Dict[Tuple[str, str], tuple]
               ) -> Tuple[Dict[str, List[str]], Dict[str, list]]:
  """The groups the verified pairs make, and each group's pairs.

  Returns:
    ({root: the digests of its group}, {root: [(digest a, digest b,
    values)] of its pairs}), the root being a group's smallest digest
    (components).
  """
  root_of = components(edges)
  groups: Dict[str, List[str]] = {}
  for digest, root in root_of.items():
    groups.setdefault(root, []).append(digest)
  edges_of: Dict[str, List[Tuple[str, str, int, float]]] = {}
  for (a, b), values in edges.items():
    edges_of.setdefault(root_of[a], []).append((a, b, values))
  return groups, edges_of


def _group_split(digests: List[str], infos: Dict[str, dict],
                 split_key: str, ratios) -> Optional[str]:
  """The split every member of a group goes to: by a hash of its smallest
  digest (split_key 'content') or of its smallest id ('id'); None with
  'input', where the input names each example's split."""
  if split_key == 'content':
    return split_lib.assign_split(split_lib.content_split_key(digests[0]),
                                  list(ratios))
  if split_key == 'id':
    return split_lib.assign_split(min(first_id(infos[d]) for d in digests),
                                  list(ratios))
  return None


def _labels_of(digests: List[str], infos: Dict[str, dict]) -> Dict[str, int]:
  """{label: examples} of the members of a group."""
  labels: Dict[str, int] = {}
  for d in digests:
    for label, n in infos[d]['labels'].items():
      labels[label] = labels.get(label, 0) + n
  return labels


def _label_conflict_reasons(digests: List[str], labels: Dict[str, int],
                            label_conflicts: str, noun: str
                            ) -> Tuple[Dict[str, str], Dict[str, str]]:
  """Why the members of a group of several labels are dropped.

  Args:
    digests: The group's contents.
    labels: {label: examples} of the group (more than one label).
    label_conflicts: 'keep' (nothing dropped), 'drop' (every member) or
      'majority' (the members of the other labels; every member when no
      label has more examples than all others).
    noun: What the members are ('pictures', 'documents').

  Returns:
    ({digest: reason} of the contents dropped whole, {label: reason} of
    the labels whose examples are dropped).
  """
  named = _named_labels(labels)
  if label_conflicts == 'drop':
    reason = (f'label conflict: near-duplicate {noun} are labelled '
              f'{named}')
    return {d: reason for d in digests}, {}
  if label_conflicts == 'majority':
    top = max(labels.values())
    winners = [label for label, n in labels.items() if n == top]
    if len(winners) > 1:
      reason = (f'label conflict with no majority label: near-duplicate '
                f'{noun} are labelled {named}')
      return {d: reason for d in digests}, {}
    reason = (f'label conflict: near-duplicate {noun} are labelled '
              f'{named}; the majority label {winners[0]} is kept')
    return {}, {label: reason for label in labels if label != winners[0]}
  return {}, {}


def _examples_dropped(digests: List[str], infos: Dict[str, dict],
                      whole: Dict[str, str], by_label: Dict[str, str]) -> int:
  """How many examples of a group the label-conflict reasons drop: every
  example of a content in `whole`, else those of a label in `by_label`."""
  dropped = 0
  for d in digests:
    info = infos[d]
    dropped += info['count'] if d in whole else sum(
        n for label, n in info['labels'].items() if label in by_label)
  return dropped


def _near_duplicate_reasons(digests: List[str], infos: Dict[str, dict],
                            whole: Dict[str, str], by_label: Dict[str, str]
                            ) -> Tuple[Dict[str, str], int]:
  """What --near_duplicates drop drops of a group: the smallest content
  with an example left (after the label-conflict reasons `whole` and
  `by_label`) keeps its examples, the others are dropped as its
  near-duplicates.

  Returns:
    ({digest: reason} of the contents dropped, the examples they hold
    that were not dropped for their labels already).
  """
  alive = [d for d in digests if d not in whole and any(
      label not in by_label for label in infos[d]['labels'])]
  if not alive:
    return {}, 0
  kept = alive[0]
  keeper = min(ex_id for ex_id, label in infos[kept]['ids'].values())
  reasons, dropped = {}, 0
  for d in alive[1:]:
    reasons[d] = f'near-duplicate of {keeper}'
    dropped += sum(n for label, n in infos[d]['labels'].items()
                   if label not in by_label)
  return reasons, dropped


def _listed_group(digests: List[str], split: Optional[str], size: int,
                  labels: Dict[str, int], pairs: list,
                  infos: Dict[str, dict], fields: Tuple[str, ...]) -> dict:
  """A group as the manifest lists it: its key, split, examples, first
  ids, labels and first pairs (with their distances, named by `fields`),
  at most _IDS_PER_GROUP of each."""
  pairs = sorted(pairs)
  firsts = sorted((first_id(infos[d]), d) for d in digests)
  return {
      'key': digests[0], 'split': split, 'examples': size,
      'ids': [ex_id for ex_id, _ in firsts][:_IDS_PER_GROUP],
      'labels': dict(sorted(labels.items())),
      'pairs': [{'a': first_id(infos[a]), 'b': first_id(infos[b]),
                 **dict(zip(fields, values))}
                for a, b, values in pairs[:_IDS_PER_GROUP]]}


def example_decision(decision: Optional[dict], label: str
                     ) -> Tuple[Optional[str], Optional[str]]:
  """(the split an example goes to, or None to keep its own; the reason
  it is dropped, or None) from its content's decision."""
  if decision is None:
    return None, None
  reason = decision['drop_labels'].get(label) or decision['drop']
  return decision['split'], reason
