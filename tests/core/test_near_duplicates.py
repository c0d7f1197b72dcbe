"""Near-duplicate grouping without a pipeline: the tables that find
candidate pairs, the two measures that verify them, groups that do not
depend on the order of their edges, and what each mode decides."""

import io
import itertools
import random

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
import cv2
import imagehash
import numpy as np
from PIL import Image, ImageDraw, ImageEnhance
import pytest
import scipy.fftpack

from transforms.core import near_duplicate_decisions
from transforms.core import near_duplicate_pipeline
from transforms.core import near_duplicates
from transforms.core import splits
from transforms.modalities.image import config
from transforms.modalities.image import processing
from transforms.modalities.image import signatures

RATIOS = [('train', 0.8), ('validation', 0.1), ('test', 0.1)]


def _sig(hash_value: int, thumb=None) -> bytes:
  thumb = bytes(48) if thumb is None else bytes(thumb)
  return hash_value.to_bytes(8, 'big') + thumb


def _flip(value: int, positions) -> int:
  for p in positions:
    value ^= 1 << p
  return value


def test_tables_are_fixed_and_within_the_hash():
  assert near_duplicates.TABLE_BITS.shape == (near_duplicates.TABLES,
                                              near_duplicates.BITS_PER_TABLE)
  assert (near_duplicates.TABLE_BITS.min() >= 0
          and near_duplicates.TABLE_BITS.max() < near_duplicates.HASH_BITS)
  # Fixed forever: a change would regroup every dataset.
  assert near_duplicates.TABLE_BITS[0].tolist() == [5, 9, 21, 30, 42, 44, 49,
                                                    52, 57, 60]
  assert all(len(set(row)) == near_duplicates.BITS_PER_TABLE
             for row in near_duplicates.TABLE_BITS.tolist())


def test_candidate_probability_matches_what_the_tables_find():
  """The stated probability that a pair d bits apart meets in a table,
  against random pairs."""
  rng = random.Random(3)
  for d, expected in ((0, 1.0), (4, near_duplicates.candidate_probability(4)),
                      (10, near_duplicates.candidate_probability(10)),
                      (16, near_duplicates.candidate_probability(16))):
    met = 0
    for _ in range(2000):
      a = rng.getrandbits(64)
      b = _flip(a, rng.sample(range(64), d))
      ka, kb = near_duplicates.table_keys(np.frombuffer(
          a.to_bytes(8, 'big') + b.to_bytes(8, 'big'), np.uint8).reshape(2, 8))
      met += bool((ka == kb).any())
    assert abs(met / 2000 - expected) < 0.03, (d, met / 2000, expected)
  assert near_duplicates.candidate_probability(10) > 0.96


def test_pairs_are_verified_by_both_measures():
  rules = near_duplicates.NearDuplicateRules(hash_distance=4,
                                             thumb_distance=0.15)
  base = random.Random(1).getrandbits(64)
  thumb = list(range(0, 240, 5))
  sigs = [
      _sig(base, thumb),                                 # 0
      _sig(_flip(base, [1, 2, 3]), thumb),               # 1: 3 bits away
      _sig(_flip(base, range(5)), thumb),                # 2: 5 bits away
      _sig(base, thumb[::-1]),                           # 3: other colours
      _sig(base, [min(255, int(v * 1.1)) for v in thumb]),  # 4: brighter
  ]
  found = {(i, j): (h, t)
           for i, j, h, t in near_duplicates.verified_pairs(sigs, rules)}
  assert (0, 1) in found and found[(0, 1)][0] == 3
  assert (0, 2) not in found  # too many bits
  assert (0, 3) not in found  # same grey pattern, other thumbnail
  assert (0, 4) in found and found[(0, 4)][1] < 0.05  # brightness is free
  assert near_duplicates.distances(sigs[0], sigs[3])[1] > 1.0


def test_groups_do_not_depend_on_the_order_of_edges():
  edges = [('c', 'd'), ('a', 'b'), ('b', 'c'), ('x', 'y')]
  expected = {'a': 'a', 'b': 'a', 'c': 'a', 'd': 'a', 'x': 'x', 'y': 'x'}
  for order in itertools.permutations(edges):
    assert near_duplicate_decisions.components(order) == expected


def _infos(*items):
  """{digest: Info} from (digest, [(id, label, split)])."""
  out = {}
  for digest, members in items:
    for m in members:
      out[digest] = near_duplicate_decisions.merge_info(
          out.get(digest), near_duplicate_decisions.new_info(*m))
  return out


def _by_example(decisions, infos):
  """{id: (split, drop reason)} of every example of the infos (the first
  of each split), as the pipeline applies the decisions."""
  out = {}
  for digest, info in infos.items():
    for split, (ex_id, label) in info['ids'].items():
      to, reason = near_duplicate_decisions.example_decision(
          decisions[digest], label)
      out[ex_id] = (to or split, reason)
  return out


def test_group_mode_moves_every_member_to_the_split_of_its_smallest_digest():
  edges = {('d1', 'd2'): (3, 0.01), ('d2', 'd3'): (5, 0.02)}
  infos = _infos(('d1', [('x/1.jpg', 'cat', 'train')]),
                 ('d2', [('x/2.jpg', 'cat', 'test'),
                         ('x/2b.jpg', 'cat', 'test')]),
                 ('d3', [('x/3.jpg', 'cat', 'validation')]))
  decisions, summary = near_duplicate_decisions.decide(
      edges, infos, near_duplicates.NearDuplicateRules(), 'keep', 'content',
      RATIOS)
  expected_split = splits.assign_split(
      splits.content_split_key('d1'), RATIOS)
  assert {d['split'] for d in decisions.values()} == {expected_split}
  assert {d['group'] for d in decisions.values()} == {'d1'}
  assert not any(d['drop'] for d in decisions.values())
  assert (summary['groups'], summary['members'], summary['contents'],
          summary['edges'], summary['largest_group']) == (1, 4, 3, 2, 4)
  assert summary['moved'] == sum(
      1 for s in ('train', 'test', 'test', 'validation')
      if s != expected_split)
  assert summary['examples'][0]['ids'] == ['x/1.jpg', 'x/2.jpg', 'x/3.jpg']
  assert summary['examples'][0]['examples'] == 4


def test_drop_mode_keeps_the_smallest_content_and_its_copies():
  edges = {('d1', 'd2'): (3, 0.01), ('d1', 'd3'): (2, 0.01)}
  infos = _infos(('d1', [('b.jpg', 'cat', 'train'),
                         ('a.jpg', 'cat', 'train')]),
                 ('d2', [('c.jpg', 'cat', 'test')]),
                 ('d3', [('d.jpg', 'cat', 'train')]))
  decisions, summary = near_duplicate_decisions.decide(
      edges, infos, near_duplicates.NearDuplicateRules(mode='drop'), 'keep',
      'content', RATIOS)
  assert decisions['d1']['drop'] is None  # exact copies: contents.py's
  assert decisions['d2']['drop'] == 'near-duplicate of a.jpg'
  assert decisions['d3']['drop'] == 'near-duplicate of a.jpg'
  assert summary['dropped'] == {'near_duplicates': 2, 'label_conflicts': 0}


@pytest.mark.parametrize('policy, dropped', [
    ('keep', set()), ('drop', {'a.jpg', 'b.jpg', 'c.jpg'}),
    ('majority', {'c.jpg'})])
def test_label_conflicts_among_near_duplicates_follow_the_policy(policy,
                                                                  dropped):
  edges = {('d1', 'd2'): (3, 0.01), ('d2', 'd3'): (1, 0.01)}
  infos = _infos(('d1', [('a.jpg', 'cat', 'train')]),
                 ('d2', [('b.jpg', 'cat', 'test')]),
                 ('d3', [('c.jpg', 'dog', 'train')]))
  decisions, summary = near_duplicate_decisions.decide(
      edges, infos, near_duplicates.NearDuplicateRules(), policy, 'content',
      RATIOS)
  examples = _by_example(decisions, infos)
  assert {i for i, (_, reason) in examples.items() if reason} == dropped
  assert summary['label_conflicts'] == 1
  assert summary['dropped']['label_conflicts'] == len(dropped)
  if dropped:
    reason = examples[sorted(dropped)[0]][1]
    assert reason.startswith('label conflict') and 'cat (2), dog (1)' in reason


def test_majority_within_one_content_drops_only_the_minority_label():
  """A content whose copies carry two labels, near another: the minority
  label's copies go, the content's other copies stay."""
  edges = {('d1', 'd2'): (3, 0.01)}
  infos = _infos(('d1', [('a.jpg', 'cat', 'train'), ('z.jpg', 'dog', 'train')]),
                 ('d2', [('b.jpg', 'cat', 'train')]))
  decisions, summary = near_duplicate_decisions.decide(
      edges, infos, near_duplicates.NearDuplicateRules(), 'majority', 'content',
      RATIOS)
  assert near_duplicate_decisions.example_decision(
      decisions['d1'], 'cat')[1] is None
  assert 'majority label cat' in near_duplicate_decisions.example_decision(
      decisions['d1'], 'dog')[1]
  assert summary['dropped']['label_conflicts'] == 1


def test_splits_named_by_the_input_do_not_move_and_are_counted():
  edges = {('d1', 'd2'): (3, 0.01)}
  infos = _infos(('d1', [('a.jpg', 'cat', 'train')]),
                 ('d2', [('b.jpg', 'cat', 'test')]))
  decisions, summary = near_duplicate_decisions.decide(
      edges, infos, near_duplicates.NearDuplicateRules(), 'keep', 'input',
      RATIOS)
  assert _by_example(decisions, infos) == {'a.jpg': ('train', None),
                                           'b.jpg': ('test', None)}
  assert summary['groups_across_splits'] == 1 and summary['moved'] == 0


def _png(img: Image.Image) -> bytes:
  buf = io.BytesIO()
  img.save(buf, 'PNG')
  return buf.getvalue()


def _jpeg(img: Image.Image, quality=80) -> bytes:
  buf = io.BytesIO()
  img.save(buf, 'JPEG', quality=quality)
  return buf.getvalue()


def _photo(seed: int, size=(160, 120)) -> Image.Image:
  """A smooth picture with structure (pHash of noise is meaningless)."""
  rng = np.random.default_rng(seed)
  small = rng.integers(0, 256, (6, 8, 3), np.uint8)
  return Image.fromarray(small).resize(size, Image.BICUBIC)


def test_signatures_of_real_copies_are_near_and_of_others_far():
  cfg = config.ImageConfig(height=64, width=64)

  def sig(data):
    return processing.process_image(
        data, config.ImageConfig(height=64, width=64,
                                 signature=True)).signature

  rules = near_duplicates.NearDuplicateRules()
  original = _photo(5)
  w, h = original.size
  copies = {
      'jpeg80': _jpeg(original),
      'resized': _jpeg(original.resize((int(w * .85), int(h * .85)),
                                       Image.LANCZOS)),
      'brighter': _png(ImageEnhance.Brightness(original).enhance(1.15)),
      'cropped': _png(original.crop((3, 2, w - 3, h - 2))),
  }
  base = sig(_png(original))
  assert len(base) == signatures.SIGNATURE_BYTES
  for kind, data in copies.items():
    hd, td = near_duplicates.distances(base, sig(data))
    assert hd <= rules.hash_distance and td <= rules.thumb_distance, kind
  others = [near_duplicates.distances(base, sig(_png(_photo(seed))))
            for seed in range(10, 30)]
  assert not any(hd <= rules.hash_distance and td <= rules.thumb_distance
                 for hd, td in others)
  # The signature is that of the stored pixels: the pipeline's first pass
  # computes the same one.
  _, from_pass = processing.identify_content_and_signature(
      _png(original), config.ImageConfig(height=64, width=64))
  assert from_pass == base
  assert not processing.process_image(_png(original), cfg).signature


def _drawing(seed: int, size=64) -> Image.Image:
  """Clip art: flat shapes, some centred (a symmetric picture has DCT
  coefficients that are exactly equal, the ties a median meets)."""
  rng = random.Random(seed)
  img = Image.new('RGB', (size, size), tuple(rng.randrange(256)
                                             for _ in range(3)))
  draw = ImageDraw.Draw(img)
  for k in range(rng.randrange(1, 4)):
    inset = rng.randrange(2, size // 3)
    box = ((inset, inset, size - inset, size - inset) if k == 0 else
           sorted(rng.sample(range(size), 2)) + sorted(rng.sample(
               range(size), 2)))
    if k:
      box = (box[0], box[2], box[1], box[3])
    fill = tuple(rng.randrange(256) for _ in range(3))
    (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=fill)
  return img


def test_the_phash_is_imagehashs_phash():
  """The signature's pHash (OpenCV's DCT) has the bits of imagehash's
  pHash of the same grey picture (photos, their JPEG copies, drawings,
  flat pictures, ramps, noise), but where a coefficient equals the median
  within rounding: there imagehash's bit is rounding noise, and equal
  coefficients are not above the median."""
  pictures = []
  for seed in range(60):
    photo = _photo(seed)
    pictures += [photo, Image.open(io.BytesIO(_jpeg(photo, 60))),
                 _drawing(seed)]
  pictures += [Image.new('RGB', (40, 30), (v, v, v)) for v in (0, 1, 128, 255)]
  ramp = np.tile(np.arange(0, 256, 4, dtype=np.uint8), (48, 1))
  pictures += [Image.fromarray(ramp), Image.fromarray(ramp.T.copy())]
  rng = np.random.default_rng(3)
  pictures += [Image.fromarray(rng.integers(0, 256, (50, 70, 3), np.uint8))
               for _ in range(20)]
  side = signatures.SIGNATURE_SIDE
  ties = 0
  for img in pictures:
    arr = np.asarray(img.convert('RGB'))
    small = cv2.resize(arr, (side, side), interpolation=cv2.INTER_AREA)
    grey = cv2.cvtColor(small, cv2.COLOR_RGB2GRAY)
    theirs = imagehash.phash(Image.fromarray(grey), hash_size=8).hash
    ours = np.unpackbits(np.frombuffer(signatures.phash_of_grey(grey),
                                       np.uint8)).astype(bool)
    # imagehash's coefficients (its own steps), to find the ties.
    coeffs = scipy.fftpack.dct(scipy.fftpack.dct(
        grey.astype(np.float64), axis=0), axis=1)[:8, :8].ravel()
    tie = np.abs(coeffs - np.median(coeffs)) < 1e-9
    ties += int(tie.any())
    assert (ours == theirs.ravel())[~tie].all()
    # A tie is not above the median.
    assert not ours[tie].any()
    # And the signature starts with it.
    assert signatures.signature_of_pixels(arr)[:8] == (
        signatures.phash_of_grey(grey))
  # Drawings and flat pictures do tie.
  assert ties >= 5


def test_a_grey_picture_has_the_signature_of_its_rgb_copy():
  for seed in range(10):
    grey = np.asarray(_photo(seed).convert('L'))
    rgb = np.repeat(grey[:, :, None], 3, axis=2)
    assert signatures.signature_of_pixels(grey) == (
        signatures.signature_of_pixels(rgb))
    assert signatures.signature_of_pixels(Image.fromarray(grey)) == (
        signatures.signature_of_pixels(rgb))


def test_the_beam_transform_groups_across_bundles():
  """Entries of one group arriving in different elements (bundles) meet,
  and exact copies are one content."""
  base = random.Random(2).getrandbits(64)
  thumb = list(range(0, 240, 5))
  d1, d2, d9 = 'a1' * 16, 'b2' * 16, 'c3' * 16
  entries = [
      [('a.jpg', d1, 'cat', 'train', _sig(base, thumb))],
      [('b.jpg', d2, 'cat', 'test', _sig(_flip(base, [7, 40]), thumb)),
       ('b2.jpg', d2, 'cat', 'train', _sig(_flip(base, [7, 40]), thumb))],
      [('z.jpg', d9, 'cat', 'train',
        _sig(random.Random(9).getrandbits(64), thumb[::-1]))],
  ]
  with TestPipeline() as p:
    decisions, summary = (
        p | beam.Create(entries)
        | near_duplicate_pipeline.NearDuplicateGroups(
            near_duplicates.NearDuplicateRules(), 'keep', 'content', RATIOS))
    split = splits.assign_split(
        splits.content_split_key(d1), RATIOS)
    assert_that(decisions | beam.Map(lambda d: sorted(
        (k, v['split'], v['group']) for k, v in d.items())),
                equal_to([[(d1, split, d1), (d2, split, d1)]]),
                label='decisions')
    assert_that(summary | beam.Map(lambda s: (s['groups'], s['members'],
                                              s['contents'], s['edges'],
                                              s['moved'])),
                equal_to([(1, 3, 2, 1, sum(
                    1 for s in ('train', 'test', 'train') if s != split))]),
                label='summary')


def test_a_crowded_bucket_finds_the_pairs_a_full_comparison_finds(tmp_path):
  """600 pictures of one hash (one template), some of one thumbnail: the
  bucket is verified a block at a time, through files in a folder, and
  finds exactly the pairs that comparing every two finds."""
  rng = np.random.default_rng(4)
  base = random.Random(5).getrandbits(64)
  thumbs = [rng.integers(0, 256, 48).tolist() for _ in range(40)]
  _assert_gathers_what_comparing_all_finds(
      [_sig(_flip(base, [k % 3]), thumbs[k % 40]) for k in range(600)],
      tmp_path)
  assert list(tmp_path.glob('*.spill'))


def _assert_gathers_what_comparing_all_finds(sigs, folder):
  """GatherNearDuplicates of one picture per signature (digest k for the
  k-th) finds exactly the pairs comparing every two finds (over 1,000)."""
  rules = near_duplicates.NearDuplicateRules()
  digests = [f'{k:032x}' for k in range(len(sigs))]
  expected = set()
  for (da, sa), (db, sb) in itertools.combinations(zip(digests, sigs), 2):
    hd, td = near_duplicates.distances(sa, sb)
    if hd <= rules.hash_distance and td <= rules.thumb_distance:
      expected.add((min(da, db), max(da, db)))
  assert len(expected) > 1000
  with TestPipeline() as p:
    gathered = (p | beam.Create([[(f'{k:04d}.png', digest, 'cat', 'train',
                                   sig)]
                                 for k, (digest, sig) in enumerate(
                                     zip(digests, sigs))])
                | near_duplicate_pipeline.GatherNearDuplicates(rules,
                                                               str(folder)))
    assert_that(gathered | beam.Map(lambda g: set(g[0])),
                equal_to([expected]))


def test_crowded_buckets_of_one_runner_group_keep_their_own_pairs(
    tmp_path, monkeypatch):
  """Eight templates of 60 pictures each, every template's bucket crowded
  (verified a block at a time): where two crowded buckets share a runner
  group, each keeps its own pairs (their rows were once mixed up), and
  the pairs are those comparing every two finds."""
  monkeypatch.setattr(near_duplicate_pipeline, '_BLOCK', 16)
  rng = np.random.default_rng(6)
  bases = [random.Random(10 + t).getrandbits(64) for t in range(8)]
  thumbs = [rng.integers(0, 256, 48).tolist() for _ in range(6)]
  # Some table puts two templates' buckets in one runner group.
  keys = near_duplicates.table_keys(np.frombuffer(b''.join(
      bases[t].to_bytes(8, 'big') for t in range(8)), np.uint8).reshape(8, 8))
  groups = near_duplicates._Pictures.group_of(keys.astype(np.uint64))  # pylint: disable=protected-access
  assert any(len(set(groups[:, t].tolist())) < 8
             for t in range(near_duplicates.TABLES))
  _assert_gathers_what_comparing_all_finds(
      [_sig(_flip(bases[k % 8], [k % 3]), thumbs[k % 6]) for k in range(480)],
      tmp_path)
