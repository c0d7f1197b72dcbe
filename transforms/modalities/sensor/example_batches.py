"""The example batches of the example pass: the windows of a sorted series
(`window_batch`, for the streamed and the chunked entities alike) and
rows as examples.
"""

import numpy as np

from transforms.modalities.sensor import preprocessing
from transforms.modalities.sensor import windows


def span_bound(sc, median, max_gap):
  """The longest time a window may span: window_length rows at the
  entity's sampling interval (the grid's period with --resample) and one
  gap."""
  return windows.span_bound(sc.window_length, sc.resample or median, max_gap)


def window_batch(entity, global_starts, starts, time, values, label, split,
                 sc, label_names=None, bound=None):
  """The windows starting at `starts` of a sorted series, as a batch, and
  how many were left out for spanning more than `bound` ns (None: no
  bound) -> (batch or None, left out). `label` holds the rows' label names,
  or with `label_names` their codes (windows.LabelCodes)."""
  length = sc.window_length
  lost = 0
  if bound is not None:
    fits = time[starts + length - 1] - time[starts] <= bound
    if not fits.all():
      lost = int(np.count_nonzero(~fits))
      global_starts, starts = global_starts[fits], starts[fits]
      if not len(starts):
        return None, lost
  index = starts[:, None] + np.arange(length)
  if label_names is None:
    names, codes = np.unique(label, return_inverse=True)
  else:
    names, codes = windows.sorted_labels(label, label_names)
  label_codes = windows.window_labels(codes, starts, length, sc.window_label,
                                      len(names))
  first, last = split[starts], split[starts + length - 1]
  return {
      preprocessing.ID: [f'{entity}#{s}' for s in global_starts.tolist()],
      preprocessing.ENTITY: [entity] * len(starts),
      preprocessing.LABEL_TEXT: names[label_codes].tolist(),
      preprocessing.START_TIME: time[starts],
      preprocessing.END_TIME: time[starts + length - 1],
      preprocessing.VALUES: values[index],
      'split': np.where(first == last, first, -1).astype(np.int8),
  }, lost


def chunk_rows(item, with_entity):
  """A chunk's observations as row examples."""
  (entity, _), (c, _, _) = item
  return {
      preprocessing.ID: c['id'].tolist(),
      preprocessing.ENTITY: [entity if with_entity else ''] * len(c['time']),
      preprocessing.LABEL_TEXT: c['label'].tolist(),
      preprocessing.TIME: c['time'], preprocessing.VALUES: c['values'],
      'split': c['split'],
  }


def row_examples(batch, with_entity):
  """RowExamplesFn's rows (of the entities in time order in one file)
  as row examples."""
  ids = [f'{batch["source"]}:{r}' for r in batch['row'].tolist()]
  return {
      preprocessing.ID: ids,
      preprocessing.ENTITY: (batch['entity'].astype(str).tolist()
                             if with_entity else [''] * len(ids)),
      preprocessing.LABEL_TEXT: batch['label'].astype(str).tolist(),
      preprocessing.TIME: batch['time'], preprocessing.VALUES: batch['values'],
      'split': batch['split'],
  }
