"""The dataset side of the modality plug-ins: each modality's record checks
(`check_values`), reached through the registry, and the order of the
validation report's checks."""

import io

import numpy as np
import pytest
from PIL import Image

from transforms import modalities
from transforms.validation import dataset_checks
from transforms.validation import report


def _check(manifest, values, ex_id='x'):
  """Runs the modality's check_values on a record of id `ex_id`; returns
  (record summary, stats)."""
  out = {'id': ex_id, 'label': 'a', 'exact': True, 'pixels': 0, 'image': None,
         'values': None, 'channel_sum': None, 'channel_sum_squares': None}
  stats = dataset_checks.FeatureStats()
  modalities.of_manifest(manifest).check_values(values, manifest, out,
                                                stats)
  return out, stats


# -------------------------------------------------------------- image --


def _image_manifest(storage, method='scale'):
  return {'modality': 'image',
          'feature_spec': {'image': {'dtype': 'string', 'shape': []}},
          'image': {'height': 4, 'width': 6, 'channels': 3,
                    'storage': storage},
          'normalization': {'method': method, 'mean': [0.5] * 3,
                            'std': [0.25] * 3}}


def _png(arr):
  buf = io.BytesIO()
  Image.fromarray(arr).save(buf, format='PNG')
  return buf.getvalue()


def test_image_decodes_and_keeps_pixel_sums():
  arr = np.full((4, 6, 3), 10, np.uint8)
  arr[..., 2] = 30
  out, stats = _check(_image_manifest('png'), {'image': [_png(arr)]})
  assert out['pixels'] == 24
  assert out['channel_sum'] == [240.0, 240.0, 720.0]
  assert out['channel_sum_squares'] == [2400.0, 2400.0, 21600.0]
  assert out['image'].shape == (4, 6, 3)
  assert stats.stats['image/blue'][:4] == [24, 0, 30.0, 30.0]


def test_image_of_another_shape_is_refused():
  arr = np.zeros((5, 6, 3), np.uint8)
  with pytest.raises(ValueError, match=r'shape \(5, 6, 3\), expected'):
    _check(_image_manifest('png'), {'image': [_png(arr)]})
  with pytest.raises(ValueError, match='does not decode'):
    _check(_image_manifest('jpeg'), {'image': [b'not an image']})


def test_float32_image_in_range_passes_and_keeps_channel_stats():
  values = {'image': [0.5] * 72}
  out, stats = _check(_image_manifest('float32'), values)
  assert out['pixels'] == 0 and out['image'] is None
  assert stats.stats['image/red'][:4] == [24, 0, 0.5, 0.5]


@pytest.mark.parametrize('value, problem', [
    (float('nan'), 'NaN or infinite'),
    (1.5, r'outside the plausible range \[0.000, 1.000\] for scale'),
])
def test_float32_image_out_of_range_is_refused(value, problem):
  values = {'image': [0.5] * 71 + [value]}
  with pytest.raises(ValueError, match=problem):
    _check(_image_manifest('float32'), values)


def _fit_manifest(storage, width, height):
  manifest = _image_manifest(storage)
  manifest['image'].update(width=width, height=height, resize_mode='fit')
  return manifest


def _encoded(arr, storage):
  buf = io.BytesIO()
  Image.fromarray(arr).save(buf, format=storage.upper(), quality=90)
  return buf.getvalue()


def test_image_of_one_colour_is_flagged_blank():
  arr = np.full((4, 6, 3), (10, 20, 30), np.uint8)
  out, _ = _check(_image_manifest('png'), {'image': [_png(arr)]})
  assert out['flags'] == ('blank',)
  arr[3, 5, 2] = 31
  out, _ = _check(_image_manifest('png'), {'image': [_png(arr)]})
  assert 'flags' not in out
  out, _ = _check(_image_manifest('float32'), {'image': [0.25] * 72})
  assert out['flags'] == ('blank',)
  out, _ = _check(_image_manifest('float32'),
                  {'image': [0.25] * 71 + [0.5]})
  assert 'flags' not in out


@pytest.mark.parametrize('storage', ['png', 'jpeg'])
def test_blank_input_between_the_bars_of_fit_is_flagged(storage):
  # A 64x64 input stored at 96x64 with --resize_mode fit: 16 black columns
  # each side (resize.resize_pixels), white content between them.
  arr = np.zeros((64, 96, 3), np.uint8)
  arr[:, 16:80] = 255
  values = {'image': [_encoded(arr, storage)], 'original_height': [64],
            'original_width': [64]}
  out, _ = _check(_fit_manifest(storage, 96, 64), values)
  assert out['flags'] == ('blank',)
  arr[20:40, 30:60] = 90  # something in the picture
  values['image'] = [_encoded(arr, storage)]
  out, _ = _check(_fit_manifest(storage, 96, 64), values)
  assert 'flags' not in out


def test_report_counts_blank_images_and_lists_their_first_ids():
  shards = [{'flagged': {'blank': {'count': 3, 'ids': ['b', 'c']}}},
            {'flagged': {}}, {'flagged': {'blank': {'count': 1,
                                                    'ids': ['a']}}}]
  assert report.flagged(shards, 'blank') == (4, ['a', 'b', 'c'])
  assert report.flagged(shards, 'blank', listed=2) == (4, ['a', 'b'])
  assert report.flagged([{}], 'blank') == (0, [])


# --------------------------------------------------------------- text --


def _text_manifest(output='ids'):
  spec = {'num_tokens': {'dtype': 'int64', 'shape': []}}
  if output == 'ids':
    spec.update(token_ids={'dtype': 'int64', 'shape': [8]},
                length={'dtype': 'int64', 'shape': []})
  else:
    spec.update(term_ids={'dtype': 'int64', 'shape': None},
                term_weights={'dtype': 'float32', 'shape': None})
  return {'modality': 'text', 'feature_spec': spec,
          'text': {'max_tokens': 8, 'vocabulary': {
              'size': 10, 'oov_buckets': 1, 'first_oov_id': 11}}}


def test_token_ids_pass_and_oov_makes_the_content_inexact():
  manifest = _text_manifest()
  out, stats = _check(manifest, {'token_ids': [3, 4, 5, 0, 0, 0, 0, 0],
                                 'length': [3], 'num_tokens': [3]})
  assert out['exact']
  assert stats.stats['oov_share'][:4] == [1, 0, 0.0, 0.0]
  assert 'token_ids' not in stats.stats  # ids are not quantities
  out, _ = _check(manifest, {'token_ids': [3, 11, 0, 0, 0, 0, 0, 0],
                             'length': [2], 'num_tokens': [2]})
  assert not out['exact']


@pytest.mark.parametrize('ids, length, problem', [
    ([3, 12, 0, 0, 0, 0, 0, 0], 2, r'token ids outside 1\.\.11'),
    ([3, 4, 0, 0, 5, 0, 0, 0], 2, 'after position 2 are not padding'),
    ([3, 4, 0, 0, 0, 0, 0, 0], 1, 'should be min'),
])
def test_bad_token_ids_are_refused(ids, length, problem):
  with pytest.raises(ValueError, match=problem):
    _check(_text_manifest(), {'token_ids': ids, 'length': [length],
                              'num_tokens': [2]})


def test_terms_pass_and_bad_terms_are_refused():
  manifest = _text_manifest('tfidf')
  out, _ = _check(manifest, {'term_ids': [1, 4], 'term_weights': [0.5, 0.2],
                             'num_tokens': [5]})
  assert out['exact']
  for ids, weights, problem in [
      ([1, 1], [0.5, 0.2], 'a term id appears twice'),
      ([1, 4], [0.5, -0.2], 'finite and not negative'),
      ([1, 40], [0.5, 0.2], r'term ids outside 0\.\.11'),
      ([1, 4], [0.5], '2 term ids but 1 weights')]:
    with pytest.raises(ValueError, match=problem):
      _check(manifest, {'term_ids': ids, 'term_weights': weights,
                        'num_tokens': [5]})


# ------------------------------------------------------------- sensor --


def _sensor_manifest():
  return {'modality': 'sensor',
          'feature_spec': {'values': {'dtype': 'float32', 'shape': [2, 2]},
                           'buckets': {'dtype': 'int64', 'shape': [2, 2]},
                           'start_time': {'dtype': 'int64', 'shape': []},
                           'end_time': {'dtype': 'int64', 'shape': []}},
          'sensor': {'channels': ['a', 'b'], 'bucketize': 4}}


def _window(**changes):
  values = {'values': [0.0, 1.0, 2.0, 3.0], 'buckets': [0, 1, 2, 3],
            'start_time': [10], 'end_time': [20]}
  values.update(changes)
  return values


def test_sensor_window_passes_with_per_channel_statistics():
  out, stats = _check(_sensor_manifest(), _window(), 'dev#0')
  assert out['values'] == [0.0, 1.0, 2.0, 3.0]
  assert stats.stats['values/a'][:4] == [2, 0, 0.0, 2.0]
  assert stats.stats['values/b'][:4] == [2, 0, 1.0, 3.0]
  assert 'values' not in stats.stats


@pytest.mark.parametrize('changes, problem', [
    ({'values': [0.0, float('inf'), 2.0, float('nan')]},
     'values hold 2 NaN or infinite numbers'),
    ({'buckets': [0, 1, 2, 4]}, r'bucket ids \[0, 4\] are outside 0\.\.3'),
    ({'start_time': [30]}, 'start_time is after end_time'),
])
def test_bad_sensor_windows_are_refused(changes, problem):
  with pytest.raises(ValueError, match=problem):
    _check(_sensor_manifest(), _window(**changes), 'dev#0')


# ------------------------------------------------------------- report --

# The report's checks, as the validation pipeline listed them for a
# dataset of sensor windows in three splits (split by entity) before the
# report was split into one function per check, with the sensor's own
# leakage checks, the label-conflict check and the label-case check added
# since.
SENSOR_WINDOW_CHECKS = [
    'train: record count', 'train: records parse and match the spec',
    'train: class counts', 'train: fingerprint',
    'validation: record count',
    'validation: records parse and match the spec',
    'validation: class counts', 'validation: fingerprint',
    'test: record count', 'test: records parse and match the spec',
    'test: class counts', 'test: fingerprint',
    'shards readable, complete and unchanged', 'no unlisted shard files',
    'rows read = rows used + dropped + dead letters',
    'every window of every entity was formed', 'exported transform',
    'train: shard health', 'validation: shard health', 'test: shard health',
    'no recording (entity) in two splits (leakage)',
    'equal windows in two splits (distinct observations, not leakage)',
    'same content with different labels (label conflicts)',
    'exact duplicates inside a split',
    'label names that differ only by case',
    'validation: feature drift from train',
    'validation: class drift from train',
    'test: feature drift from train', 'test: class drift from train']


def _shard_result(split, records, counts):
  return {'split': split, 'file': f'sensor-{split}.tfrecord-00000-of-00001',
          'records': records, 'bad_records': 0, 'shard_errors': [],
          'record_errors': [], 'class_counts': counts,
          'fingerprint': format(records, '032x'), 'pixels': 0,
          'stats': {'values/a': [records, 0, 0.0, 1.0, records * 0.5,
                                 records * 0.5]},
          'hists': {}, 'samples': {}, 'bytes': 100 * records,
          'largest_record': 100, 'readable': True, 'sha256': 'x'}


def test_report_lists_the_sensor_checks_in_their_order():
  sizes = {'train': 6, 'validation': 2, 'test': 2}
  results = [_shard_result(split, n, {'run': n // 2, 'sit': n - n // 2})
             for split, n in sizes.items()]
  manifest = {
      'modality': 'sensor', 'name': 'sensor', 'run_id': 'r',
      'normalization': {'method': 'zscore'},
      'totals': {'inputs': 100, 'examples': 10, 'dead_lettered': 0},
      'sensor': {'mode': 'window', 'split_by': 'entity', 'windows': {
          'expected': 10, 'formed': 10, 'crossing_time_cutoff': 0}},
      'splits': {split: {
          'records': n, 'class_counts': r['class_counts'],
          'fingerprint': r['fingerprint'], 'inputs': n * 10,
          'rows_used': n * 10, 'rows_dropped': 0, 'dead_lettered': 0}
                 for (split, n), r in zip(sizes.items(), results)}}
  got = report.build_report(
      manifest, results, extra_files=[],
      transform_check={'ok': True, 'detail': 'probes pass'},
      content=dataset_checks.content_findings([]),
      recordings=dataset_checks.recording_findings([]))
  assert [c['check'] for c in got['checks']] == SENSOR_WINDOW_CHECKS
  assert got['verdict'] == 'pass', got['checks']
  assert got['modality'] == 'sensor'
