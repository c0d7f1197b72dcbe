"""The feature keys every record has, whatever its modality.

  label           int64, index into the manifest's label names
  label_text      bytes, the label's name (UTF-8)
  id              bytes, stable example id
  weight          float, only with --rebalance weight

A modality adds its own (transforms/modalities/<m>/); the manifest records
the whole spec, and the validation pipeline and the reader parse with it
(`to_tf_feature_spec`).
"""

from typing import Any, Dict

LABEL = 'label'
LABEL_TEXT = 'label_text'
ID = 'id'
WEIGHT = 'weight'


def to_tf_feature_spec(spec: Dict[str, Dict[str, Any]]):
  """The manifest's JSON spec as a `tf.io.parse_example` feature spec
  (shape None: a variable number of values, parsed as a SparseTensor)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  dtypes = {'string': tf.string, 'int64': tf.int64, 'float32': tf.float32}
  return {
      key: (tf.io.VarLenFeature(dtypes[entry['dtype']])
            if entry['shape'] is None else
            tf.io.FixedLenFeature(entry['shape'], dtypes[entry['dtype']]))
      for key, entry in spec.items()
  }
