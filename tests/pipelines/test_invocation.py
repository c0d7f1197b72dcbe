"""Bad invocations stop at once with one plain sentence and exit code 2."""

import os

import pytest

import imagegen
from pipelines import options as options_lib
from pipelines import outcome
from pipelines import preprocess
from pipelines import runner_setup
from pipelines.options import UsageError
from transforms import modalities
from pipelines import validate


@pytest.fixture(scope='module')
def images_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('imgs')
  imagegen.write_good_images(str(root))
  return root


def _run(capsys, argv, code=outcome.EXIT_USAGE, main=preprocess.main):
  assert main(argv) == code
  err = capsys.readouterr().err.strip()
  assert err.count('\n') == 0, err  # one sentence, no traceback
  assert 'Traceback' not in err
  return err.lower()


@pytest.mark.parametrize('extra,expected', [
    (['--storage', 'tiff'], '--storage must be one of jpeg, png, uint8, '
     'float32'),
    (['--resize_mode', 'zoom'], '--resize_mode must be one of'),
    (['--normalization', 'l2'], '--normalization must be one of'),
    (['--rebalance', 'smote'], '--rebalance must be one of'),
    (['--compression', 'zstd'], '--compression must be one of'),
    (['--splits', 'train=0.8,test=0.1'], 'add up to 0.9, not 1'),
    (['--splits', 'train'], 'not of the form name=ratio'),
    (['--splits', 'train=0.8;test=0.2'], 'is not a number'),
    (['--image_size', 'big'], '--image_size must be WIDTHxHEIGHT'),
    (['--num_shards', '-1'], '--num_shards must be between'),
    (['--max_bad_fraction', '2'], '--max_bad_fraction must be a number'),
    (['--modality', 'text'], 'folder of .txt documents'),
    (['--modality', 'audio'], '--modality must be one of'),
    (['--storag', 'jpeg'], 'unknown option --storag'),
])
def test_bad_option_values(images_dir, tmp_path, capsys, extra, expected):
  out = tmp_path / 'out'
  err = _run(capsys, ['--input', str(images_dir), '--output', str(out)] +
             extra)
  assert expected.lower() in err
  assert not out.exists()  # nothing created for a bad invocation


def test_missing_input(tmp_path, capsys):
  err = _run(capsys, ['--input', str(tmp_path / 'nope'), '--output',
                      str(tmp_path / 'out')])
  assert 'does not exist' in err


def test_missing_required_flags(tmp_path, capsys):
  assert '--input is required' in _run(capsys, ['--output', str(tmp_path)])
  assert '--output is required' in _run(capsys, ['--input', str(tmp_path)])


def test_empty_input(tmp_path, capsys):
  (tmp_path / 'empty').mkdir()
  err = _run(capsys, ['--input', str(tmp_path / 'empty'), '--output',
                      str(tmp_path / 'out')])
  assert 'is empty' in err


def test_no_labels(tmp_path, capsys):
  flat = tmp_path / 'flat'
  flat.mkdir()
  (flat / 'a.jpg').write_bytes(imagegen.jpeg_bytes(
      __import__('PIL.Image', fromlist=['Image']).new('RGB', (8, 8))))
  err = _run(capsys, ['--input', str(flat), '--output', str(tmp_path / 'o')])
  assert 'no labels found' in err


def test_empty_manifest_and_missing_columns(tmp_path, capsys):
  (tmp_path / 'empty.csv').write_text('')
  err = _run(capsys, ['--input', str(tmp_path / 'empty.csv'), '--output',
                      str(tmp_path / 'o')])
  assert 'is empty' in err
  (tmp_path / 'cols.csv').write_text('file,class\na.jpg,cat\n')
  err = _run(capsys, ['--input', str(tmp_path / 'cols.csv'), '--output',
                      str(tmp_path / 'o')])
  assert 'no path or label column' in err


def test_output_holding_leftover_shards(images_dir, tmp_path, capsys):
  out = tmp_path / 'out'
  out.mkdir()
  (out / 'images-train.tfrecord-00000-of-00001').write_bytes(b'')
  err = _run(capsys, ['--input', str(images_dir), '--output', str(out)])
  assert 'no manifest' in err and '--overwrite' in err


def test_unwritable_output(images_dir, tmp_path, capsys):
  blocker = tmp_path / 'file'
  blocker.write_text('x')
  err = _run(capsys, ['--input', str(images_dir), '--output',
                      str(blocker / 'out')])
  assert 'cannot write to the output' in err


def test_validate_bad_invocations(tmp_path, capsys):
  err = _run(capsys, ['--output', str(tmp_path / 'nope')],
             main=validate.main)
  assert 'does not exist' in err
  err = _run(capsys, ['--output', str(tmp_path)], code=validate.EXIT_UNSOUND,
             main=validate.main)
  assert 'not a published dataset' in err
  (tmp_path / 'manifest.json').write_text('{not json')
  err = _run(capsys, ['--output', str(tmp_path)], code=validate.EXIT_UNSOUND,
             main=validate.main)
  assert f'the manifest {tmp_path / "manifest.json"} does not parse'.lower(
  ) in err
  os.remove(tmp_path / 'manifest.json')


@pytest.mark.parametrize('content, problem', [
    ('[1, 2]', 'it holds a json list, not an object'),
    ('{"labels": [], "splits": {}, "totals": {}, "normalization": {}}',
     '"feature_spec" is missing or not a json dict'),
    ('{"feature_spec": {}, "labels": [], "totals": {}, "normalization": {},'
     ' "splits": {"train": {"records": 1, "class_counts": {}, '
     '"fingerprint": "0"}}}', 'split "train" has no valid "shards"'),
    ('{"feature_spec": {}, "labels": [], "totals": {}, "normalization": {},'
     ' "splits": {"train": {"records": 1, "class_counts": {}, '
     '"fingerprint": "0", "shards": [{"file": "a"}]}}}',
     'shard 0 of split "train" needs "file", "records" and "sha256"'),
])
def test_validate_names_a_manifest_that_is_not_one(tmp_path, capsys, content,
                                                   problem):
  (tmp_path / 'manifest.json').write_text(content)
  err = _run(capsys, ['--output', str(tmp_path)], code=validate.EXIT_UNSOUND,
             main=validate.main)
  assert (f'the manifest {tmp_path / "manifest.json"} is not a dataset '
          f'manifest: {problem}').lower() in err


def test_help_lists_every_option(capsys):
  assert preprocess.main(['--help']) == outcome.EXIT_OK
  out = capsys.readouterr().out
  for flag in ('--input', '--output', '--image_size', '--resize_mode',
               '--storage', '--normalization', '--splits', '--rebalance',
               '--num_shards', '--compression', '--max_bad_fraction',
               '--overwrite'):
    assert flag in out


@pytest.mark.parametrize('argv,modality,expected', [
    # Worker processes decode the images: one runner thread feeds them.
    ([], 'image', (1, 'in_memory')),
    # Decoding in-line: a thread per core.
    (['--local_processes', '0'], 'image',
     (os.cpu_count() or 1, 'multi_threading')),
    ([], 'text', (1, 'in_memory')),
    (['--workers', '3'], 'sensor', (3, 'multi_threading')),
    (['--workers', '1'], 'image', (1, 'in_memory')),
    (['--workers', '4', '--direct_running_mode', 'multi_processing'], 'text',
     (4, 'multi_processing')),
    (['--workers', '4', '--direct_num_workers', '2'], 'image',
     (2, 'multi_threading')),
])
def test_local_runner_defaults(argv, modality, expected):
  from apache_beam.options.pipeline_options import DirectOptions
  from apache_beam.options.pipeline_options import PipelineOptions
  import types  # pylint: disable=import-outside-toplevel
  from pipelines import options as options_lib  # pylint: disable=import-outside-toplevel
  options = PipelineOptions(argv)
  cfg = types.SimpleNamespace(
      local_processes=options_lib.local_processes(options))
  runner_setup.apply_local_defaults(
      options, argv,
      modalities.get(modality).default_workers(os.cpu_count() or 1, cfg))
  direct = options.view_as(DirectOptions)
  if expected[0] == 1 and expected[1] == 'multi_threading':
    pytest.skip('one core')
  assert (direct.direct_num_workers, direct.direct_running_mode) == expected


@pytest.mark.parametrize('argv,checked', [
    # The DirectRunner builds without Beam's type checks unless asked.
    ([], False),
    (['--runner', 'DirectRunner'], False),
    (['--pipeline_type_check'], True),
    (['--runtime_type_check'], True),
    (['--performance_runtime_type_check'], True),
    # Other runners keep Beam's default.
    (['--runner', 'PortableRunner'], True),
    (['--runner', 'PortableRunner', '--no_pipeline_type_check'], False),
])
def test_type_checks_while_building(argv, checked):
  from apache_beam.options.pipeline_options import PipelineOptions
  from apache_beam.options.pipeline_options import TypeOptions
  options = PipelineOptions(argv)
  runner_setup.apply_local_defaults(options, argv)
  assert options.view_as(TypeOptions).pipeline_type_check is checked
  # What the runner is given (the proto of every option) says the same.
  assert options.get_all_options()['pipeline_type_check'] is checked


def test_bad_workers_is_a_usage_error(tmp_path, capsys):
  src = tmp_path / 'docs.csv'
  src.write_text('text,label\nhello,a\n')
  err = _run(capsys, ['--modality', 'text', '--input', str(src), '--output',
                      str(tmp_path / 'out'), '--workers', '0'])
  assert '--workers must be between 1 and 256' in err


@pytest.mark.parametrize('where', ['.', 'out', 'a/b/out'])
def test_output_inside_the_input_folder_is_refused(tmp_path, capsys, where):
  photos = tmp_path / 'photos'
  imagegen.write_good_images(str(photos))
  out = (photos / where).resolve()
  code = preprocess.main(['--input', str(photos), '--output', str(out)])
  assert code == outcome.EXIT_USAGE
  err = capsys.readouterr().err.strip()
  assert err.count('\n') == 0
  assert f'--output {out} is inside --input {photos}' in err
  assert not (photos / 'out').exists() and not (photos / 'a').exists()


def test_output_beside_the_input_or_a_file_input_is_fine():
  options_lib.check_output_outside_input('/data/photos', '/data/photos-out')
  options_lib.check_output_outside_input('/data/*.csv', '/data/out')
  options_lib.check_output_outside_input('gs://b/raw/x.csv', 'gs://b/raw/o')
  with pytest.raises(UsageError):
    options_lib.check_output_outside_input('gs://b/photos', 'gs://b/photos/o')
