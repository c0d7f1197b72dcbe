"""benchmarks/RESULTS.md sections (benchmarks/harness.py): a benchmark
rewrites its own section and nothing else, adds it when missing, and
writes the published file only from a run at the published settings.
No benchmark runs here and nothing is timed."""

import argparse
import os
import subprocess
import sys

import pytest

import repo

sys.path.insert(0, os.path.join(repo.ROOT, 'benchmarks'))
# pylint: disable=g-import-not-at-top,wrong-import-position
import all_modalities
import fixed_cost_floor
import harness
# pylint: enable=g-import-not-at-top,wrong-import-position

INFO = {'date_utc': '2026-11-27 10:00 UTC', 'commit': 'abc1234',
        'command': '.venv/bin/python benchmarks/x.py',
        'machine': {'cpus': 2, 'cpu_model': 'AMD EPYC', 'memory_gib': 23.5,
                    'python_version': '3.11.7', 'apache_beam': '2.77.0',
                    'tensorflow': '2.21.0',
                    'tensorflow_transform': '1.21.0'}}

TEXT = ('# Results\n\nIntro.\n\n'
        '<!-- BEGIN one -->\n## One\n\nold one\n<!-- END one -->\n\n'
        'Between.\n\n'
        '<!-- BEGIN one_more -->\n## One more\n\nold\n<!-- END one_more -->\n'
        '\nTail.\n')


def _section(name, body):
  return harness.results_section(name, name.title(), INFO, body)


def test_replaces_its_own_section_and_keeps_the_rest():
  new = _section('one', 'new figures')

  text = harness.replace_section(TEXT, 'one', new)

  head, _, rest = TEXT.partition('<!-- BEGIN one -->')
  tail = rest.partition('<!-- END one -->\n')[2]
  assert text == head + new + tail
  assert 'old one' not in text
  # The section whose name begins with 'one' is untouched.
  assert '<!-- BEGIN one_more -->\n## One more\n\nold\n' in text


def test_replacing_twice_gives_the_same_file():
  new = _section('one_more', 'x')

  once = harness.replace_section(TEXT, 'one_more', new)

  assert harness.replace_section(once, 'one_more', new) == once
  assert once.endswith('\nTail.\n')


def test_a_missing_section_is_added_at_the_end():
  new = _section('two', 'figures of two')

  text = harness.replace_section(TEXT, 'two', new)

  assert text == TEXT.rstrip('\n') + '\n\n' + new
  assert harness.replace_section('', 'two', new) == new


@pytest.mark.parametrize('text', [
    '<!-- BEGIN one -->\nno end\n',
    '<!-- END one -->\n<!-- BEGIN one -->\n',
    TEXT + '<!-- BEGIN one -->\n<!-- END one -->\n',
])
def test_broken_markers_are_an_error(tmp_path, text):
  path = tmp_path / 'RESULTS.md'
  path.write_text(text)

  with pytest.raises(ValueError, match="'one'"):
    harness.write_section(str(path), 'one', _section('one', 'x'))
  assert path.read_text() == text


def test_write_section_creates_the_file_then_keeps_other_sections(tmp_path):
  path = str(tmp_path / 'RESULTS.md')

  harness.write_section(path, 'a', _section('a', 'first a'))
  harness.write_section(path, 'b', _section('b', 'first b'))
  harness.write_section(path, 'a', _section('a', 'second a'))

  with open(path) as f:
    text = f.read()
  assert text == _section('a', 'second a') + '\n' + _section('b', 'first b')
  assert os.listdir(tmp_path) == ['RESULTS.md']  # no temporary file left


def test_section_says_when_where_and_how():
  text = _section('floor', '| a | b |\n')

  assert text.startswith('<!-- BEGIN floor -->\n## Floor\n\n')
  assert text.endswith('| a | b |\n<!-- END floor -->\n')
  assert '- Measured: 2026-11-27 10:00 UTC\n' in text
  assert '- Commit: abc1234\n' in text
  assert ('- Machine: 2 cores (AMD EPYC), 23.5 GiB memory, Python 3.11.7; '
          'Apache Beam 2.77.0, TensorFlow 2.21.0, tf.Transform 1.21.0\n'
          in text)
  assert '`.venv/bin/python benchmarks/x.py`' in text


def _args(*argv):
  parser = argparse.ArgumentParser()
  harness.add_results_flags(parser)
  return parser.parse_args(list(argv))


@pytest.mark.parametrize('argv, published, where', [
    ([], True, 'published'),
    ([], False, None),
    (['--no-results'], True, None),
    (['--results', 'OTHER'], False, 'other'),
    (['--results', 'OTHER'], True, 'other'),
])
def test_where_a_run_writes(tmp_path, monkeypatch, argv, published, where):
  paths = {'published': str(tmp_path / 'RESULTS.md'),
           'other': str(tmp_path / 'other.md')}
  monkeypatch.setattr(harness, 'RESULTS_PATH', paths['published'])
  argv = [paths['other'] if a == 'OTHER' else a for a in argv]

  written = harness.write_results(_args(*argv), published, 'x', 'X', INFO,
                                  'figures')

  assert written == (where and paths[where])
  assert sorted(os.listdir(tmp_path)) == ([] if where is None else
                                          [os.path.basename(paths[where])])


def test_results_flags_exclude_each_other():
  with pytest.raises(SystemExit):
    _args('--results', 'x.md', '--no-results')


def test_defaults_and_repeats_decide_what_is_published():
  parser = argparse.ArgumentParser()
  parser.add_argument('--rows', type=int, default=1000)
  parser.add_argument('--repeats', type=int, default=3)

  def published(*argv):
    return harness.at_defaults(parser, parser.parse_args(argv), ['rows'])

  assert published()
  assert published('--repeats', '5')
  assert not published('--repeats', '1')
  assert not published('--rows', '10')


def _all_modalities_args(*argv):
  parser = argparse.ArgumentParser()
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--no-warmup', dest='warmup', action='store_false')
  sizes = all_modalities._sizes  # pylint: disable=protected-access
  for m in all_modalities.MODALITIES.values():
    parser.add_argument(f'--{m.name}-sizes', type=sizes,
                        default=m.default_sizes)
    parser.add_argument(f'--{m.name}-tiny', type=int, default=m.default_tiny)
  return parser.parse_args(list(argv))


@pytest.mark.parametrize('argv, names, want', [
    ([], ('image', 'sensor', 'text'), True),
    (['--repeats', '4'], ('image', 'sensor', 'text'), True),
    (['--repeats', '1'], ('image', 'sensor', 'text'), False),
    ([], ('sensor', 'text'), False),
    (['--no-warmup'], ('image', 'sensor', 'text'), False),
    (['--text-sizes', '2000,4000'], ('image', 'sensor', 'text'), False),
    (['--image-tiny', '10'], ('image', 'sensor', 'text'), False),
])
def test_all_modalities_publishes_only_its_default_run(argv, names, want):
  args = _all_modalities_args(*argv)

  assert all_modalities.published(args, names) == want


def _git(repo_dir, *args):
  subprocess.run(['git', '-C', str(repo_dir), '-c', 'user.name=t', '-c',
                  'user.email=t@example.com'] + list(args), check=True,
                 capture_output=True)


def test_commit_says_when_tracked_files_changed(tmp_path):
  _git(tmp_path, 'init', '-q')
  (tmp_path / 'code.py').write_text('x = 1\n')
  (tmp_path / 'RESULTS.md').write_text('old\n')
  _git(tmp_path, 'add', '.')
  _git(tmp_path, 'commit', '-q', '-m', 'one')
  ignore = [str(tmp_path / 'RESULTS.md')]

  clean = harness.git_commit(str(tmp_path), ignore)
  assert clean and ' ' not in clean
  # The results file itself and untracked files do not count.
  (tmp_path / 'RESULTS.md').write_text('new\n')
  (tmp_path / 'notes.txt').write_text('untracked\n')
  assert harness.git_commit(str(tmp_path), ignore) == clean
  (tmp_path / 'code.py').write_text('x = 2\n')
  assert harness.git_commit(str(tmp_path), ignore) == (
      clean + ' + uncommitted changes')


def test_no_commit_outside_a_checkout(tmp_path):
  assert harness.git_commit(str(tmp_path), []) is None


def test_printed_keeps_a_copy(capsys):
  with harness.printed() as kept:
    print('a table')

  assert kept.getvalue() == 'a table\n'
  assert capsys.readouterr().out == 'a table\n'


def test_floor_benchmark_writes_its_section(tmp_path, monkeypatch):
  # fixed_cost_floor.main end to end with the measuring left out.
  seconds = {'python': [0.1], 'imports': [4.0], 'minimal-z': [8.0],
             'minimal-vocab': [9.0], 'minimal-z-plain': [10.0],
             'ours-image': [7.0], 'ours-sensor': [6.0], 'ours-text': [8.0]}
  monkeypatch.setattr(fixed_cost_floor, 'jobs_for', lambda workdir: {})
  monkeypatch.setattr(fixed_cost_floor, 'run',
                      lambda jobs, repeats, logdir: seconds)
  published = tmp_path / 'RESULTS.md'
  published.write_text(TEXT)
  monkeypatch.setattr(harness, 'RESULTS_PATH', str(published))
  workdir = str(tmp_path / 'work')

  assert fixed_cost_floor.main(['--workdir', workdir, '--repeats', '1']) == 0
  assert published.read_text() == TEXT  # a quick run publishes nothing
  assert fixed_cost_floor.main(['--workdir', workdir]) == 0

  text = published.read_text()
  assert text.startswith(TEXT.rstrip('\n') + '\n\n<!-- BEGIN '
                         'fixed_cost_floor -->\n')
  section = text[len(TEXT):]
  assert 'benchmarks/fixed_cost_floor.py --workdir ' in section
  assert '| sensor | minimal pipeline, z-score | 0.75x |' in section
  assert section.endswith('<!-- END fixed_cost_floor -->\n')
