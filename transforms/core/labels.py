"""Label names and ids, the same way for every modality.

A label's id is its index in the sorted list of distinct label names seen
in the input (every split), so ids do not depend on the order inputs
arrive in.
"""

import apache_beam as beam


def _distinct_sorted(lists):
  return sorted(set().union(*map(set, lists)))


class LabelNames(beam.PTransform):
  """Lists of label names -> (sorted distinct names, {name: id}).

  Both outputs hold one element (use them as singleton side inputs).
  """

  def expand(self, name_lists):
    names = name_lists | 'Distinct' >> beam.CombineGlobally(_distinct_sorted)
    ids = names | 'Ids' >> beam.Map(
        lambda ls: {n: i for i, n in enumerate(ls)})
    return names, ids
