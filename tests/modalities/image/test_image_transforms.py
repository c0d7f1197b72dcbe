"""Transform tests: each composite transform in a TestPipeline, and the
tf.Transform preprocessing_fn through a real analyze-and-transform run."""

import os

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np
import pytest

import imagegen
from pipelines import options as options_lib
from transforms.modalities.image.pipeline import PlanCopies
from transforms.modalities.image import decode
from transforms.modalities.image import config
from transforms.modalities.image import encoding
from transforms.modalities.image import preprocessing
from transforms.modalities.image import features
from transforms.core import shuffle
from transforms.output import shards
from transforms.modalities.image import inputs
from transforms.output import tfrecord_files


def test_list_and_decode_images(tmp_path):
  good = imagegen.write_good_images(str(tmp_path))
  bad = imagegen.write_bad_images(str(tmp_path))
  ratios = (('train', 0.5), ('test', 0.5))
  cfg = config.ImageConfig(height=32, width=48, max_pixels=1_000_000)
  with TestPipeline() as p:
    listed = p | inputs.ListImageInputs(str(tmp_path), False, ratios, None)
    decoded = (listed.refs
               | beam.Map(lambda r: (r, 0, True, None))
               | decode.DecodeImages(cfg))
    examples = decoded.examples | 'OneEach' >> beam.FlatMap(lambda xs: xs)
    assert_that(listed[inputs.SKIPPED]
                | 'SkippedName' >> beam.Map(
                    lambda s: os.path.basename(s['input'])),
                equal_to(['README.txt']), label='Skipped')
    assert_that(examples
                | beam.Map(lambda e: e[features.LABEL_TEXT])
                | beam.combiners.Count.PerElement(),
                equal_to(list(good.items())), label='Labels')
    assert_that(decoded[inputs.DEAD]
                | beam.Map(lambda d: (os.path.basename(d['input']),
                                      d['stage'])),
                equal_to([(name, 'decode') for name in bad]), label='Dead')

    def check_example(examples):
      for e in examples:
        img = encoding.decode_stored(e[features.IMAGE], 'jpeg', 32, 48, 3)
        assert img.shape == (32, 48, 3)
        assert e['split'] in ('train', 'test')
        assert len(e[features.CHANNEL_MEAN]) == 3
        assert all(0 <= m <= 1 for m in e[features.CHANNEL_MEAN])
    assert_that(examples, check_example, label='Shapes')


def test_shuffle_keeps_every_record_and_mixes_the_written_order(tmp_path):
  keyed = [(f'id{i}#0', f'rec{i:04d}'.encode()) for i in range(2000)]
  orders = []
  for run in range(2):
    prefix = str(tmp_path / f'run{run}')
    with TestPipeline() as p:
      shuffled = (p | beam.Create(keyed, reshuffle=False)
                  | shuffle.SeededShuffle(seed=7, buckets=20))
      assert_that(shuffled, equal_to([r for _, r in keyed]))
      _ = shuffled | beam.io.WriteToTFRecord(prefix, num_shards=1)
    [path] = tmp_path.glob(f'run{run}-*')
    with open(path, 'rb') as f:
      orders.append([int(r[3:]) for r in tfrecord_files.iter_records(f)])
  order = orders[0]
  assert sorted(order) == list(range(2000))
  # Input order (grouped by id, as folder listings are) is broken up.
  ascending = sum(1 for a, b in zip(order, order[1:]) if a < b)
  assert 700 < ascending < 1300
  # The first tenth written holds records from all over the input.
  assert max(order[:200]) - min(order[:200]) > 1500


def test_fingerprint_does_not_depend_on_order_or_sharding():
  records = [f'r{i}'.encode() for i in range(100)] + [b'r1']  # a duplicate
  expected = format(sum(shards.record_digest(r) for r in records) % (1 << 128),
                    '032x')
  with TestPipeline() as p:
    fp = (p | beam.Create(list(reversed(records)))
          | beam.CombineGlobally(shards.FingerprintFn()))
    assert_that(fp, equal_to([{'fingerprint': expected, 'records': 101}]))
  # A duplicate changes the fingerprint (a sum, not an XOR).
  without = format(sum(shards.record_digest(r) for r in records[:-1]) %
                   (1 << 128), '032x')
  assert without != expected


def _config(**flags):
  argv = ['--input', 'in', '--output', 'out']
  for k, v in flags.items():
    argv += [f'--{k}', str(v)]
  return options_lib.resolve_config(
      options_lib.PipelineOptions(argv))


def test_plan_copies_oversample_undersample_and_weight():
  refs = ([inputs.InputRef(f'/a{i}', f'a{i}', 'a', 'train')
           for i in range(40)] +
          [inputs.InputRef(f'/b{i}', f'b{i}', 'b', 'train')
           for i in range(10)] +
          [inputs.InputRef(f'/t{i}', f't{i}', 'b', 'test') for i in range(5)])
  counts = [(('train', 'a'), 40), (('train', 'b'), 10), (('test', 'b'), 5)]

  def written_per_class(plans):
    return plans | beam.FlatMap(
        lambda kv: [(kv[1][0].split, kv[1][0].label)] if kv[1][2] else []) | (
            beam.combiners.Count.PerElement())

  with TestPipeline() as p:
    r = p | 'Refs' >> beam.Create(refs)
    c = p | 'Counts' >> beam.Create(counts)
    over = (r, c) | 'Over' >> PlanCopies(_config(rebalance='oversample'),
                                         False)
    assert_that(written_per_class(over), equal_to(
        [(('train', 'a'), 40), (('train', 'b'), 40), (('test', 'b'), 5)]),
                label='Oversampled')
    assert_that(over | 'Keys' >> beam.Keys() | beam.Distinct()
                | 'NKeys' >> beam.combiners.Count.Globally(),
                equal_to([85]), label='UniqueKeys')
    under = (r, c) | 'Under' >> PlanCopies(_config(rebalance='undersample'),
                                           False)
    # Every input is still decoded once; dropped ones have write=False.
    assert_that(under | 'Firsts' >> beam.Filter(lambda kv: kv[1][1] == 0)
                | 'NFirst' >> beam.combiners.Count.Globally(),
                equal_to([55]), label='AllDecodedOnce')
    weighted = (r, c) | 'Weight' >> PlanCopies(_config(rebalance='weight'),
                                               True)
    assert_that(weighted
                | 'W' >> beam.Map(lambda kv: ((kv[1][0].split, kv[1][0].label),
                                              kv[1][3]))
                | 'SumW' >> beam.CombinePerKey(sum),
                equal_to([(('train', 'a'), 25.0), (('train', 'b'), 25.0),
                          (('test', 'b'), 5.0)]), label='Weights')


def test_preprocessing_fn_zscore_uses_full_pass_statistics(tmp_path):
  import tensorflow_transform.beam as tft_beam  # pylint: disable=import-outside-toplevel
  from tensorflow_transform.tf_metadata import dataset_metadata  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  h, w, c = 4, 5, 3
  pixels = [rng.integers(0, 256, (h, w, c), dtype=np.uint8) for _ in range(6)]
  rows = []
  for i, px in enumerate(pixels):
    flat = px.reshape(-1, c).astype(np.float64) / 255.0
    rows.append({
        features.IMAGE: px.tobytes(),
        features.CHANNEL_MEAN: flat.mean(axis=0).astype(np.float32),
        features.CHANNEL_MEAN_SQUARES: (flat**2).mean(axis=0).astype(
            np.float32),
        features.ID: f'id{i}'.encode(), features.LABEL_TEXT: b'x',
        features.ORIGINAL_HEIGHT: h, features.ORIGINAL_WIDTH: w,
    })
  everything = np.stack(pixels).reshape(-1, c).astype(np.float64) / 255.0
  mean, std = everything.mean(axis=0), everything.std(axis=0)
  metadata = dataset_metadata.DatasetMetadata.from_feature_spec(
      preprocessing.raw_feature_spec(c))
  fn = preprocessing.make_preprocessing_fn('uint8', h, w, c, 'zscore')
  def check(results):
    assert len(results) == len(rows)
    by_id = {r[features.ID]: r for r in results}
    for i, px in enumerate(pixels):
      got = np.asarray(by_id[f'id{i}'.encode()][features.IMAGE])
      want = (px.astype(np.float64) / 255.0 - mean) / std
      assert got.shape == (h, w, c)
      np.testing.assert_allclose(got, want, atol=1e-4)
      assert by_id[f'id{i}'.encode()][features.LABEL_TEXT] == b'x'

  with TestPipeline() as p:
    with tft_beam.Context(temp_dir=str(tmp_path)):
      data = p | beam.Create(rows)
      (out, _), _ = ((data, metadata)
                     | tft_beam.AnalyzeAndTransformDataset(fn))
      assert_that(out, check)


@pytest.mark.parametrize('method,low,high', [('scale', 0.0, 1.0),
                                             ('none', 0, 255)])
def test_preprocessing_fn_scale_and_none_decode_jpeg(tmp_path, method, low,
                                                     high):
  import tensorflow_transform.beam as tft_beam  # pylint: disable=import-outside-toplevel
  from tensorflow_transform.tf_metadata import dataset_metadata  # pylint: disable=import-outside-toplevel
  from PIL import Image  # pylint: disable=import-outside-toplevel
  arr = np.zeros((8, 8, 3), np.uint8)
  arr[:, 4:] = 255
  row = {features.IMAGE: imagegen.jpeg_bytes(Image.fromarray(arr), quality=95),
         features.CHANNEL_MEAN: np.full(3, 0.5, np.float32),
         features.CHANNEL_MEAN_SQUARES: np.full(3, 0.5, np.float32),
         features.ID: b'i', features.LABEL_TEXT: b'x',
         features.ORIGINAL_HEIGHT: 8, features.ORIGINAL_WIDTH: 8}
  metadata = dataset_metadata.DatasetMetadata.from_feature_spec(
      preprocessing.raw_feature_spec(3))
  fn = preprocessing.make_preprocessing_fn('jpeg', 8, 8, 3, method)
  def check(results):
    [result] = results
    img = np.asarray(result[features.IMAGE])
    assert img.shape == (8, 8, 3)
    assert img.dtype == np.float32
    assert abs(float(img[:, :2].mean()) - low) < 0.02 * (high - low)
    assert abs(float(img[:, -2:].mean()) - high) < 0.02 * (high - low)

  with TestPipeline() as p:
    with tft_beam.Context(temp_dir=str(tmp_path)):
      (out, _), _ = ((p | beam.Create([row]), metadata)
                     | tft_beam.AnalyzeAndTransformDataset(fn))
      assert_that(out, check)


def test_count_records_matches_the_records_in_any_block_size():
  import io
  import struct
  rng = np.random.default_rng(0)

  def frame(data):
    header = struct.pack('<Q', len(data))
    return (header + struct.pack('<I', tfrecord_files.masked_crc32c(header)) +
            data + struct.pack('<I', tfrecord_files.masked_crc32c(data)))

  for _ in range(50):
    records = [rng.bytes(int(rng.integers(0, 3000)))
               for _ in range(int(rng.integers(0, 40)))]
    blob = b''.join(frame(r) for r in records)
    assert list(tfrecord_files.iter_records(io.BytesIO(blob))) == records
    for block in (1, 13, 4096, 1 << 20):
      assert tfrecord_files.count_records(io.BytesIO(blob),
                                          block) == len(records)
    if blob:
      with pytest.raises(tfrecord_files.CorruptRecordError):
        tfrecord_files.count_records(io.BytesIO(blob[:-1]), 64)


@pytest.mark.parametrize('storage', ['jpeg', 'float32'])
@pytest.mark.parametrize('weighted', [False, True])
def test_records_of_a_list_are_those_of_each_example_alone(storage, weighted):
  # The serializer takes the decoder's lists: each record must be the bytes
  # of its example serialized alone, with the values it holds.
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from transforms.modalities.image import records  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(5)
  label_ids = {'cat': 0, 'chat noir \u00e9': 1, 'dog': 2}
  examples = []
  for i in range(11):
    image = (rng.bytes(int(rng.integers(0, 300))) if storage == 'jpeg' else
             rng.normal(size=(4, 3, 3)).astype(np.float32))
    example = {features.ID: f'train/{i} (copy).jpg',
               features.LABEL_TEXT: list(label_ids)[i % 3],
               features.IMAGE: image,
               features.ORIGINAL_HEIGHT: 2**33 + i, features.ORIGINAL_WIDTH: i,
               'split': 'train', 'copy': 0}
    if weighted:
      example[features.WEIGHT] = 0.1 * (i + 1)
    examples.append(example)
  together = records.to_records(examples, label_ids)
  assert together == [records.to_records([ex], label_ids)[0]
                      for ex in examples]
  assert records.to_records([], label_ids) == []
  for example, record in zip(examples, together):
    parsed = tf.train.Example.FromString(record).features.feature
    assert sorted(parsed) == sorted(
        [features.IMAGE, features.LABEL, features.LABEL_TEXT, features.ID,
         features.ORIGINAL_HEIGHT, features.ORIGINAL_WIDTH] +
        ([features.WEIGHT] if weighted else []))
    if storage == 'jpeg':
      assert parsed[features.IMAGE].bytes_list.value == [
          example[features.IMAGE]]
    else:
      assert parsed[features.IMAGE].float_list.value == pytest.approx(
          example[features.IMAGE].ravel().tolist())
    assert parsed[features.LABEL].int64_list.value == [
        label_ids[example[features.LABEL_TEXT]]]
    assert parsed[features.LABEL_TEXT].bytes_list.value == [
        example[features.LABEL_TEXT].encode()]
    assert parsed[features.ID].bytes_list.value == [
        example[features.ID].encode()]
    assert parsed[features.ORIGINAL_HEIGHT].int64_list.value == [
        example[features.ORIGINAL_HEIGHT]]
    if weighted:
      assert parsed[features.WEIGHT].float_list.value == pytest.approx(
          [example[features.WEIGHT]])
