"""Near-duplicate pictures through real pipeline runs: a folder where some
photos have a second copy of the kinds real collections hold (saved again
as JPEG after a resize, a half-size thumbnail, a few pixels cropped, a
brighter copy, a transparent PNG and its flattened JPEG, a copy under an
NFD file name, a copy in another class folder). Every group lands in one
split and validation confirms it from the records; with grouping off the
copies straddle splits and validation fails naming them; drop and the
label-conflict policies dead-letter what they say; a folder without copies
has no group; the two-pass path and the portable runner agree."""

import dataclasses
import io
import json
import os
import unicodedata

import numpy as np
import pytest
from PIL import Image, ImageEnhance

import readback
from pipelines import preprocess
from pipelines import validate
from transforms.modalities.image import config
from transforms.modalities.image import processing

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
IMAGE = ['--image_size', '64']
CLASSES = ('cat', 'dog', 'fox')
PER_CLASS = 14


def _photo(seed: int) -> Image.Image:
  """A photo-like picture: smooth colour regions and a few edges."""
  rng = np.random.default_rng(seed)
  small = rng.integers(0, 256, (5, 7, 3), np.uint8)
  img = Image.fromarray(small).resize((210, 150), Image.BICUBIC)
  arr = np.asarray(img).copy()
  for _ in range(3):
    y, x = rng.integers(0, 120), rng.integers(0, 180)
    arr[y:y + 25, x:x + 25] = rng.integers(0, 256, 3)
  return Image.fromarray(arr)


def _save(img: Image.Image, path, **kw):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  img.save(path, **kw)


def _originals(root):
  """{id: picture} of the folder without copies."""
  out = {}
  for c, label in enumerate(CLASSES):
    for i in range(PER_CLASS):
      name = f'{label}/{label}{i:02d}.png'
      out[name] = _photo(1000 * c + i)
      _save(out[name], os.path.join(root, name))
  return out


def _copies(root, originals):
  """Writes the copies; returns [(original id, copy id)]."""
  pairs = []

  def put(original, name, img, **kw):
    _save(img, os.path.join(root, name), **kw)
    pairs.append((original, name))

  for i in range(4):  # the copy: resized to 85%, JPEG q80
    o = f'cat/cat{i:02d}.png'
    w, h = originals[o].size
    put(o, f'cat/cat{i:02d}_download.jpg',
        originals[o].resize((int(w * .85), int(h * .85)), Image.LANCZOS),
        quality=80)
  for i in range(4, 7):  # half-size thumbnails
    o = f'dog/dog{i:02d}.png'
    w, h = originals[o].size
    put(o, f'dog/dog{i:02d}_thumb.png', originals[o].resize((w // 2, h // 2)))
  for i in range(7, 10):  # 3 pixels cut off each edge
    o = f'fox/fox{i:02d}.png'
    w, h = originals[o].size
    put(o, f'fox/fox{i:02d}_cropped.png',
        originals[o].crop((3, 3, w - 3, h - 3)))
  for i in range(10, 13):  # brighter
    o = f'cat/cat{i:02d}.png'
    put(o, f'cat/cat{i:02d}_bright.png',
        ImageEnhance.Brightness(originals[o]).enhance(1.15))
  # A transparent PNG (the picture inside a transparent frame) and the same
  # picture flattened onto white, saved as JPEG.
  o = 'dog/dog13.png'
  rgba = originals[o].convert('RGBA')
  alpha = np.full(rgba.size[::-1], 255, np.uint8)
  alpha[:6, :] = alpha[-6:, :] = 0
  alpha[:, :6] = alpha[:, -6:] = 0
  rgba.putalpha(Image.fromarray(alpha))
  _save(rgba, os.path.join(root, o))
  flat = Image.new('RGB', rgba.size, 'white')
  flat.paste(rgba, mask=rgba.getchannel('A'))
  put(o, 'dog/dog13_flat.jpg', flat, quality=85)
  # A copy under an NFD name (as macOS writes it).
  o = 'fox/fox00.png'
  put(o, unicodedata.normalize('NFD', 'fox/fox00_café.jpg'), originals[o],
      quality=88)
  # The same photo in another class folder: a label conflict.
  o = 'fox/fox01.png'
  put(o, 'dog/fox01_mislabelled.jpg', originals[o], quality=80)
  return pairs


@pytest.fixture(scope='module')
def folders(tmp_path_factory):
  plain = tmp_path_factory.mktemp('plain')
  originals = _originals(str(plain))
  copied = tmp_path_factory.mktemp('copied')
  _originals(str(copied))
  pairs = _copies(str(copied), originals)
  # Ids are the file names as written (the NFD one too).
  return {'plain': plain, 'copied': copied, 'pairs': pairs}


def _run(src, out, *flags):
  return preprocess.run(['--input', str(src), '--output', str(out)] + IMAGE +
                        LOCAL + list(flags))


def _near(out):
  manifest = json.loads((out / 'manifest.json').read_text())
  return manifest['contents']['near_duplicates']


@pytest.fixture(scope='module')
def grouped(folders, tmp_path_factory):
  out = tmp_path_factory.mktemp('grouped') / 'out'
  _run(folders['copied'], out)
  return out


def test_every_copy_lands_in_the_split_of_its_original(folders, grouped):
  splits = readback.splits_of(grouped)
  assert len(splits) == 3 * PER_CLASS + len(folders['pairs'])
  for original, copy in folders['pairs']:
    assert splits[copy] == splits[original], (original, copy)
  near = _near(grouped)
  assert near['mode'] == 'group'
  # Every copy made is found, and nothing else is grouped.
  assert near['groups'] == len(folders['pairs'])
  assert near['members'] == 2 * len(folders['pairs'])
  assert near['edges'] == len(folders['pairs'])
  assert near['label_conflicts'] == 1
  assert near['moved'] >= 1
  report = readback.assert_valid(grouped)
  checks = {c['check']: c for c in report['checks']}
  leak = checks['no near-duplicate pictures in two splits (leakage)']
  assert leak['status'] == 'pass'
  assert f'{len(folders["pairs"])} near-duplicate groups' in leak['detail']
  conflict = checks['near-duplicate pictures with different labels']
  assert conflict['status'] == 'warn'
  assert 'fox01_mislabelled.jpg' in conflict['detail']
  html = (grouped / 'validation_report.html').read_text()
  assert '<h2>Near-duplicate groups' in html
  assert html.count('data:image/jpeg;base64') >= 10
  # The examples wait on disk during the run, and validation's pairs
  # beside its report; both folders go.
  assert not list(grouped.glob('**/hold_tmp'))
  assert not list(grouped.glob('.validation-*'))


def test_jpeg_records_carry_the_signature_the_run_grouped_them_by(
    folders, grouped):
  """Each JPEG record holds the run's signature of its picture, made from
  the resized pixels before encoding (the stored JPEG would give another:
  validation compares these); the manifest's feature spec lists it."""
  manifest = json.loads((grouped / 'manifest.json').read_text())
  assert manifest['feature_spec']['near_duplicate_signature'] == {
      'dtype': 'string', 'shape': []}
  cfg = dataclasses.replace(config.ImageConfig(height=64, width=64),
                            signature=True)
  checked = 0
  for split in manifest['splits']:
    records = readback.read_all(grouped, split)
    for ex_id, signature in zip(records['id'],
                                records['near_duplicate_signature']):
      path = os.path.join(folders['copied'], ex_id.decode('utf-8'))
      with open(path, 'rb') as f:
        assert signature == processing.process_image(
            f.read(), cfg, path).signature, ex_id
      checked += 1
  assert checked == manifest['totals']['records']


def test_a_folder_without_copies_has_no_group(folders, tmp_path):
  out = tmp_path / 'out'
  _run(folders['plain'], out)
  near = _near(out)
  assert (near['groups'], near['members'], near['edges']) == (0, 0, 0)


def test_without_grouping_copies_straddle_and_validation_names_them(
    folders, tmp_path):
  out = tmp_path / 'out'
  _run(folders['copied'], out, '--near_duplicates', 'off')
  manifest = json.loads((out / 'manifest.json').read_text())
  assert manifest['contents']['near_duplicates'] == {
      'mode': 'off', 'hash_distance': 10, 'thumb_distance': 0.15}
  splits = readback.splits_of(out)
  straddling = [(a, b) for a, b in folders['pairs'] if splits[a] != splits[b]]
  assert straddling  # else the fixture proves nothing
  report = validate.run(['--output', str(out)])
  assert report['verdict'] == 'fail'
  leak = next(c for c in report['checks'] if c['check'] ==
              'no near-duplicate pictures in two splits (leakage)')
  assert leak['status'] == 'fail'
  assert leak['detail'].startswith(f'{len(straddling)} pairs of near-dup')
  named = report['content']['near_duplicates']['across']
  assert {frozenset((p['a'], p['b'])) for p in named} == {
      frozenset(p) for p in straddling}
  assert all(p['hash_distance'] <= 10 and p['thumb_distance'] <= 0.15
             for p in named)


def test_drop_keeps_one_content_per_group(folders, tmp_path):
  out = tmp_path / 'out'
  pairs = folders['pairs']
  summary = _run(folders['copied'], out, '--near_duplicates', 'drop')
  assert summary['totals']['records'] == 3 * PER_CLASS
  assert summary['totals']['dropped_by_content_rules'] == len(pairs)
  dead = readback.dead_letters(out)
  assert len(dead) == len(pairs)
  assert all(d['stage'] == 'content' and
             d['reason'].startswith('near-duplicate of ') for d in dead)
  kept = readback.splits_of(out)
  for a, b in pairs:
    assert (a in kept) != (b in kept), (a, b)
  for d in dead:
    keeper = d['reason'][len('near-duplicate of '):]
    assert keeper in kept
  near = _near(out)
  assert near['dropped'] == {'near_duplicates': len(pairs),
                             'label_conflicts': 0}
  readback.assert_valid(out)


def test_label_conflicts_among_near_duplicates_follow_the_policy(folders,
                                                                 tmp_path):
  out = tmp_path / 'out'
  _run(folders['copied'], out, '--label_conflicts', 'drop')
  dead = readback.dead_letters(out)
  reasons = {os.path.relpath(d['input'], folders['copied']): d['reason']
             for d in dead}
  assert set(reasons) == {'fox/fox01.png', 'dog/fox01_mislabelled.jpg'}
  assert all(r == 'label conflict: near-duplicate pictures are labelled '
             'dog (1), fox (1)' for r in reasons.values())
  assert _near(out)['dropped']['label_conflicts'] == 2


def test_the_two_pass_path_groups_before_it_plans(folders, grouped,
                                                  tmp_path):
  """Rebalancing needs every split first: the first pass computes the
  signatures, and the groups' splits are those of the one-pass run."""
  out = tmp_path / 'out'
  _run(folders['copied'], out, '--rebalance', 'oversample')
  splits = readback.splits_of(out)
  for original, copy in folders['pairs']:
    assert splits[copy] == splits[original]
  one_pass = readback.splits_of(grouped)
  assert {k: v for k, v in splits.items() if v != 'train'} == {
      k: v for k, v in one_pass.items() if v != 'train'}
  assert _near(out)['groups'] == len(folders['pairs'])


def test_the_portable_runner_writes_the_same_dataset(folders, grouped,
                                                     tmp_path):
  direct = json.loads((grouped / 'manifest.json').read_text())
  out = tmp_path / 'out'
  manifest = preprocess.run(
      ['--input', str(folders['copied']), '--output', str(out)] + IMAGE +
      ['--runner', 'PortableRunner', '--job_endpoint', 'embed',
       '--environment_type', 'LOOPBACK'])
  assert manifest['fingerprint'] == direct['fingerprint']
  assert _near(out)['groups'] == len(folders['pairs'])


@pytest.mark.parametrize('flags, message', [
    (['--near_duplicates', 'maybe'], '--near_duplicates'),
    (['--near_duplicate_hash_distance', '40'],
     '--near_duplicate_hash_distance'),
    (['--near_duplicate_thumb_distance', 'x'],
     '--near_duplicate_thumb_distance must be a number from 0 to 2'),
])
def test_bad_near_duplicate_flags_are_one_sentence(folders, tmp_path, flags,
                                                   message):
  with pytest.raises(preprocess.UsageError, match=message):
    _run(folders['plain'], tmp_path / 'out', *flags)


def test_other_modalities_refuse_near_duplicate_flags_in_one_sentence(
    folders, tmp_path):
  src = tmp_path / 'docs.csv'
  src.write_text('text,label\nhope is a thing,a\nwith feathers,b\n')
  with pytest.raises(preprocess.UsageError,
                     match=r'^--near_duplicate_hash_distance applies to images '
                     r'only\.$'):
    preprocess.run(['--modality', 'text', '--input', str(src), '--output',
                    str(tmp_path / 'out'), '--near_duplicate_hash_distance',
                    '4'])
  with pytest.raises(preprocess.UsageError,
                     match=r'^--near_duplicate_similarity applies to text '
                     r'only\.$'):
    _run(folders['plain'], tmp_path / 'out2', '--near_duplicate_similarity',
         '0.5')
  rows = tmp_path / 'rows.csv'
  rows.write_text('timestamp,device,x,label\n1,a,0.5,up\n2,a,0.7,up\n')
  with pytest.raises(preprocess.UsageError,
                     match=r'^--near_duplicates applies to images and text '
                     r'only: near-duplicate sensor data is not grouped yet\.$'):
    preprocess.run(['--modality', 'sensor', '--input', str(rows), '--output',
                    str(tmp_path / 'out3'), '--near_duplicates', 'group'])


def test_the_release_hands_on_long_lists_in_order(tmp_path):
  """Held lists of 8 come back in lists of up to 256 examples and 4 MiB
  of pictures, in their order; a moved example is in its group's split, a
  dropped one is a dead letter (its first copy only)."""
  # pylint: disable=import-outside-toplevel,protected-access
  import pickle
  from apache_beam import pvalue
  from transforms.modalities.image import pipeline as image_pipeline
  # pylint: enable=import-outside-toplevel

  def example(k, size):
    return {'copy': k % 2, 'content': f'c{k}', 'label_text': 'cat',
            'split': 'train', 'input': f'in/{k}.png', 'image': bytes(size)}

  def release(examples, decisions):
    name = str(tmp_path / f'{len(examples)}-{len(decisions)}.hold')
    with open(name, 'wb') as f:
      for lo in range(0, len(examples), 8):
        pickle.dump(examples[lo:lo + 8], f)
    out = list(image_pipeline._ReleaseFn().process(name, decisions))
    lists = [o for o in out if not isinstance(o, pvalue.TaggedOutput)]
    dead = [o.value for o in out if isinstance(o, pvalue.TaggedOutput)]
    return lists, dead

  small = [example(k, 100) for k in range(600)]
  lists, dead = release(small, {
      'c3': {'split': 'test', 'drop': None, 'drop_labels': {}},
      'c4': {'split': 'train', 'drop': 'near-duplicate of x',
             'drop_labels': {}},
      'c5': {'split': 'test', 'drop': 'near-duplicate of x',
             'drop_labels': {}}})
  assert [len(x) for x in lists] == [256, 256, 86]
  released = [ex for x in lists for ex in x]
  assert [ex['content'] for ex in released] == [
      f'c{k}' for k in range(600) if k not in (4, 5)]
  assert [ex['split'] for ex in released if ex['content'] == 'c3'] == [
      'test']
  # c4 is a first copy (copy 0): one dead letter; c5 (copy 1) none.
  assert [(d['input'], d['split']) for d in dead] == [('in/4.png', 'train')]
  raw = [example(k, 224 * 224 * 3) for k in range(60)]
  lists, _ = release(raw, {})
  assert [len(x) for x in lists] == [28, 28, 4]
  assert [ex['content'] for x in lists for ex in x] == [
      f'c{k}' for k in range(60)]
