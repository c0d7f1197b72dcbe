"""The numbers modality's side of reading a published dataset back (see
transforms/modalities/base.py): each record's z-scored value, and the
exported transform against the training statistics of the manifest."""

import math
from typing import Dict, List

from transforms.output import manifest as manifest_lib
from transforms.validation import dataset_checks as dataset_checks_lib
from transforms.validation import report as report_lib


def check_values(values: Dict[str, list], manifest: dict, out: dict,
                 stats) -> None:
  """The value is a finite number; its statistics join the shard's."""
  del out
  value = values['value'][0]
  if not math.isfinite(value):
    raise ValueError(f'value {value} is not a finite number')
  if stats is not None:
    dataset_checks_lib.add_record_stats(stats, values, manifest)


def dataset_checks(manifest: dict, by_split: Dict[str, List[dict]]
                   ) -> List[dict]:
  """Every row became an example or a dead letter."""
  del by_split
  return report_lib.examples_add_up(manifest)


def report_sample(info: dict, manifest: dict) -> dict:
  del manifest
  return {'id': info['id']}


def html_sections(report: dict, manifest) -> str:
  del report, manifest
  return ''


def check_transform(output: str, manifest: dict) -> dict:
  """The exported transform maps the training mean to 0 and the mean plus
  one standard deviation to 1 (when the deviation is not 0)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
  norm = manifest['normalization']
  mean, std = norm['mean'], norm['std']
  try:
    layer = tft.TFTransformOutput(manifest_lib.transform_path(
        output, manifest)).transform_features_layer()
    got = layer({'value': tf.constant([mean, mean + std], tf.float32)}
                )['value'].numpy().tolist()
  except Exception as e:  # pylint: disable=broad-except
    return {'ok': False, 'detail': f'the transform does not run: '
                                   f'{type(e).__name__}: {e}'}
  want = [0.0, 1.0 if std > 0 else std]
  ok = all(abs(a - b) <= 1e-4 * max(1.0, abs(mean) / max(std, 1e-12))
           for a, b in zip(got, want))
  return {'ok': ok, 'detail': f'mean {mean:g} -> {got[0]:g}, mean + std '
                              f'-> {got[1]:g} (expected {want})'}


def supervised_feature(manifest: dict):
  del manifest
  return 'value'


def read_transform(output: str, manifest: dict):
  """None: values are stored z-scored."""
  del output, manifest
  return None
