"""A default run over a real clip-art collection, Tux Paint's stamps
(tests/debian_stamps.py, from Debian's package), and its validation.

Validation signs the stored pictures; the run grouped the pictures it
signed. They were not the same pixels: the run signed a picture before
its JPEG encoding, and that JPEG's noise moved the pHash of symmetric
drawings by many bits, so validation found near-duplicates the run had
never met (an 'l' and an 'I' stamp, 19 bits apart as resized and 6 as
stored), put them in two splits, and failed the run's own dataset.
"""

import os

import debian_stamps
import readback
from pipelines import preprocess
from transforms.modalities.image import processing

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
  cfg = processing.ImageConfig()
  digests = {}

  def content_of(ex_id):
    if ex_id not in digests:
      with open(os.path.join(stamps, ex_id), 'rb') as f:
        digests[ex_id] = processing.identify_content(f.read(), cfg, ex_id)
    return digests[ex_id]

  grouped, validated = readback.assert_near_duplicates_grouped(
      out, report, content_of)
  assert len(validated) >= 10
  assert any({'symbols/l_filled.png', 'symbols/I_filled.png'} <= g
             for g in grouped)
