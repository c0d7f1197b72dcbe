"""A default run over a real clip-art collection, Tux Paint's stamps
(tests/debian_stamps.py, from Debian's package), and its validation.

Validation signed the stored pictures; the run grouped the pictures it
signed. They were not the same pixels: the run signs a picture before
its JPEG encoding, and that JPEG's noise moved the pHash of symmetric
drawings by many bits, so validation found near-duplicates the run had
never met (an 'l' and an 'I' stamp, 19 bits apart as resized and 6 as
stored), found them in two splits, and failed the run's own dataset.
JPEG records now carry the signature the run grouped them by, and
validation compares those.
"""

import dataclasses
import os

import numpy as np

import debian_stamps
import readback
from pipelines import preprocess
from pipelines import reader
from transforms.core import near_duplicates as near_lib
from transforms.modalities.image import config
from transforms.modalities.image import encoding
from transforms.modalities.image import processing
from transforms.modalities.image import signatures

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']


def test_every_near_duplicate_pair_validation_finds_is_a_group_of_the_run(
    tmp_path):
  stamps = debian_stamps.stamps()
  out = tmp_path / 'out'
  with readback.near_duplicates_listed_whole():
    manifest = preprocess.run(['--input', stamps, '--output', str(out)] +
                              LOCAL)
    report = readback.assert_valid(out)
  assert manifest['totals']['records'] == debian_stamps.PICTURES
  assert len(manifest['labels']) == debian_stamps.CLASSES
  # The run's content digest of a picture (of its pixels as resized).
  cfg = config.ImageConfig()
  digests = {}

  def content_of(ex_id):
    if ex_id not in digests:
      with open(os.path.join(stamps, ex_id), 'rb') as f:
        digests[ex_id] = processing.identify_content(f.read(), cfg, ex_id)
    return digests[ex_id]

  grouped, validated = readback.assert_near_duplicates_grouped(
      out, report, content_of)
  assert len(validated) >= 10
  assert len(grouped) >= 10

  # The stored 'l' is not the picture the run signed: its recorded
  # signature is the run's, many bits from the stored JPEG's.
  found = {}
  for split in manifest['splits']:
    stored = reader.load_dataset(str(out), split, batch_size=1000,
                                 shuffle=False, apply_transform=False)
    for batch in stored.as_numpy_iterator():
      for ex_id, image, signature in zip(
          batch['id'], batch['image'], batch['near_duplicate_signature']):
        if ex_id.decode('utf-8') in L_AND_I:
          found[ex_id.decode('utf-8')] = (image, signature)
  assert sorted(found) == sorted(L_AND_I)
  size = manifest['image']
  bits = {}
  for ex_id, (image, signature) in found.items():
    with open(os.path.join(stamps, ex_id), 'rb') as f:
      assert signature == processing.process_image(
          f.read(), dataclasses.replace(cfg, signature=True),
          ex_id).signature
    if isinstance(image, bytes):
      image = encoding.decode_stored(image, 'jpeg', size['height'],
                                     size['width'], size['channels'])
    bits[ex_id] = hash_bits(signature, signatures.signature_of_pixels(
        image.astype(np.uint8)))
  assert bits['symbols/l_filled.png'] >= 8, bits


L_AND_I = ('symbols/l_filled.png', 'symbols/I_filled.png')


def hash_bits(a: bytes, b: bytes) -> int:
  """Bits in which the pHashes of two signatures differ."""
  return near_lib.distances(a, b)[0]
