"""Label names that are the same word are one class in every modality."""

import os
import unicodedata

from transforms.core import label_text
from transforms.modalities.image import inputs as image_inputs
from transforms.modalities.text import inputs as text_inputs
from transforms.modalities.text import parse as text_parse
from transforms.sources import tables

NFC = 'café'
NFD = unicodedata.normalize('NFD', NFC)


def test_canonical_merges_normal_forms_and_surrounding_whitespace():
  assert NFD != NFC
  assert label_text.canonical(NFD) == NFC
  assert label_text.canonical(f' {NFD}\t') == NFC
  assert label_text.canonical('Café') == 'Café'  # case is kept
  assert label_text.canonical_words([NFD, NFC, ' dog']) == [NFC, NFC, 'dog']


def test_case_variants_are_found_not_merged():
  assert label_text.case_variants(['Cat', 'cat', 'dog', 'CAT', 'cat']) == [
      ['CAT', 'Cat', 'cat']]
  assert label_text.case_variants(['cat', 'dog']) == []


def test_image_class_folders_in_either_normal_form_are_one_class():
  ratios = (('train', 0.8), ('validation', 0.1), ('test', 0.1))
  refs = [image_inputs.ref_from_path('/in', f'/in/{name}/a.png', False,
                                     ratios)[0]
          for name in (NFC, NFD)]
  assert [r.label for r in refs] == [NFC, NFC]
  # The id keeps the path as listed: the two files are different inputs.
  assert refs[0].example_id != refs[1].example_id


def test_text_labels_in_either_normal_form_are_one_class(tmp_path):
  path = tmp_path / 'docs.csv'
  path.write_text(f'text,label\none,{NFC}\ntwo,{NFD}\nthree, {NFD} \n',
                  encoding='utf-8')
  columns = text_inputs.check_columns(str(path), 'csv', 'text', 'label')
  labels = [label
            for batch, _ in text_parse.iter_table_batches(
                str(path), 'csv', columns, 'docs.csv')
            for label in batch.label]
  assert labels == [NFC, NFC, NFC]


def test_sensor_labels_and_entities_in_either_normal_form_are_one(tmp_path):
  path = tmp_path / 'rows.csv'
  path.write_text(f'time,device,label,x\n1,{NFC},{NFC},0.5\n'
                  f'2,{NFD},{NFD},0.25\n', encoding='utf-8')
  columns = tables.Columns('time', 'device', 'label', ('x',))
  batches = [batch for batch, _ in tables.iter_batches(str(path), 'csv',
                                                       columns)]
  assert [v for b in batches for v in b.label] == [NFC, NFC]
  assert [v for b in batches for v in b.entity] == [NFC, NFC]


def test_a_run_merges_normal_forms_and_reports_case_variants(tmp_path):
  """Class folders café (NFC) and café (NFD, as macOS names files), Cat and
  cat: one café class; Cat and cat stay two classes, listed in the
  manifest; the dataset validates, and validation warns of Cat and cat
  from the labels it reads back."""
  import numpy as np
  from PIL import Image

  import readback
  from pipelines import preprocess
  from pipelines import reader
  src = tmp_path / 'in'
  rng = np.random.default_rng(7)
  for folder in (NFC, NFD, 'Cat', 'cat'):
    os.makedirs(src / folder, exist_ok=True)
    for i in range(12):
      pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
      Image.fromarray(pixels).save(src / folder / f'{i}.png')
  assert len(os.listdir(src)) == 4  # the file system keeps both forms
  out = tmp_path / 'out'
  assert preprocess.main([
      '--input', str(src), '--output', str(out), '--image_size', '16x16',
      '--storage', 'png', '--direct_running_mode', 'in_memory',
      '--direct_num_workers', '1']) == 0
  report = readback.assert_valid(out)
  case = next(c for c in report['checks']
              if c['check'] == 'label names that differ only by case')
  assert case['status'] == 'warn' and 'Cat, cat' in case['detail']
  manifest = reader.load_manifest(str(out))
  assert manifest['labels'] == ['Cat', NFC, 'cat']
  assert manifest['label_case_variants'] == [['Cat', 'cat']]
  assert manifest['totals']['examples'] == 48
