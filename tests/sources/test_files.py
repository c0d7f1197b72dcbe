"""Unit tests for transforms/sources/files.py: literal patterns, printable
names and list_tree on real folders (symbolic links, loops, names that are
not valid UTF-8). No pipeline runs."""

import os
import re

import pytest
from apache_beam.io.filesystem import FileSystem

from transforms.sources import files


def _touch(*parts):
  path = os.path.join(*parts)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(b'x')
  return path


def _listed(root):
  """{path below root: (problem, skip)} of list_tree(root)."""
  return {os.path.relpath(e.path, root): (e.problem, e.skip)
          for e in files.list_tree(str(root))}


# ---------------------------------------------------------------- patterns


@pytest.mark.parametrize('path,lookalike', [
    ('/data/photos [2019]/cat/a.jpg', '/data/photos 2/cat/a.jpg'),
    ('/data/what?/cat/a.jpg', '/data/whatX/cat/a.jpg'),
    ('gs://b/x*y/[a]/c.jpg', 'gs://b/xzzy/a/c.jpg'),
    ('/data/only]/a.jpg', '/data/only/a.jpg'),
])
def test_escape_glob_matches_only_itself(path, lookalike):
  regex = re.compile(FileSystem.translate_pattern(files.escape_glob(path)))
  assert regex.match(path)
  assert not regex.match(lookalike)


def test_escape_glob_leaves_plain_paths_alone():
  assert files.escape_glob('/data/photos/cat') == '/data/photos/cat'
  assert files.escape_glob('a[b]*?') == 'a[[]b][*][?]'


def test_printable_escapes_only_undecodable_bytes():
  assert files.printable('/in/chat noir é/1.jpg') == '/in/chat noir é/1.jpg'
  name = os.fsdecode(b'/in/caf\xe9/\xff.jpg')
  assert files.printable(name) == '/in/caf\\xe9/\\xff.jpg'


def test_metadata_takes_the_name_literally(tmp_path):
  path = _touch(str(tmp_path), 'what? [1]', 'm.csv')
  _touch(str(tmp_path), 'whatX 1', 'm.csv')
  meta = files.metadata(path)
  assert (meta.path, meta.size_in_bytes) == (path, 1)
  assert files.metadata(str(tmp_path / 'what? [2]' / 'm.csv')) is None


# --------------------------------------------------------------- list_tree


def test_list_tree_lists_every_depth_in_name_order(tmp_path):
  for parts in [('b', '2.jpg'), ('a', '1.jpg'), ('a', 'x', 'y', '3.jpg'),
                ('top.txt',)]:
    _touch(str(tmp_path), *parts)
  entries = list(files.list_tree(str(tmp_path)))
  assert [os.path.relpath(e.path, tmp_path) for e in entries] == [
      'top.txt', 'a/1.jpg', 'a/x/y/3.jpg', 'b/2.jpg']
  assert all(e.problem is None and e.skip is None for e in entries)
  assert len(list(files.list_tree(str(tmp_path), limit=2))) == 2


def test_list_tree_takes_folder_names_literally(tmp_path):
  for name in ('photos [2019]', 'photos 2', 'what?', 'whatX', 'a*b', 'azb'):
    _touch(str(tmp_path), name, 'cat', 'a.jpg')
  for name in ('photos [2019]', 'what?', 'a*b'):
    assert _listed(tmp_path / name) == {'cat/a.jpg': (None, None)}


def test_list_tree_symbolic_links_to_files(tmp_path):
  outside = _touch(str(tmp_path), 'elsewhere', 'real.jpg')
  root = tmp_path / 'in'
  _touch(str(root), 'cat', 'a.jpg')
  os.symlink(outside, root / 'cat' / 'link.jpg')
  os.symlink(str(tmp_path / 'gone.jpg'), root / 'cat' / 'dangling.jpg')
  os.symlink('loop2.jpg', root / 'cat' / 'loop1.jpg')
  os.symlink('loop1.jpg', root / 'cat' / 'loop2.jpg')
  assert _listed(root) == {
      'cat/a.jpg': (None, None),
      'cat/link.jpg': (None, None),
      'cat/dangling.jpg': (
          f'broken symbolic link: target {tmp_path}/gone.jpg does not exist',
          None),
      'cat/loop1.jpg': ('broken symbolic link: target loop2.jpg is a loop '
                        'of symbolic links', None),
      'cat/loop2.jpg': ('broken symbolic link: target loop1.jpg is a loop '
                        'of symbolic links', None),
  }


def test_list_tree_follows_links_to_folders_and_cuts_loops(tmp_path):
  _touch(str(tmp_path), 'elsewhere', 'dogs', 'd.jpg')
  root = tmp_path / 'in'
  _touch(str(root), 'cat', 'a.jpg')
  os.symlink(str(tmp_path / 'elsewhere' / 'dogs'), root / 'dog')
  os.symlink('..', root / 'cat' / 'up')  # a loop back to the root
  os.symlink('.', root / 'cat' / 'here')  # a loop to its own folder
  assert _listed(root) == {
      'cat/a.jpg': (None, None),
      'cat/here': (None, 'symbolic link loop: it points to ., a folder it '
                   'is inside of, whose files are listed once, through '
                   'that folder'),
      'cat/up': (None, 'symbolic link loop: it points to .., a folder it is '
                 'inside of, whose files are listed once, through that '
                 'folder'),
      'dog/d.jpg': (None, None),
  }


def test_list_tree_loop_reached_through_a_link_out_of_the_root(tmp_path):
  # in/cat/all -> tmp_path, which holds in/cat again: the second time
  # in/cat is reached, it is a folder on the way down, not a link.
  root = tmp_path / 'in'
  _touch(str(root), 'cat', 'a.jpg')
  os.symlink(str(tmp_path), root / 'cat' / 'all')
  listed = _listed(root / 'cat')
  assert listed == {
      'a.jpg': (None, None),
      'all/in/cat': (None, f'symbolic link loop: this is the folder '
                     f'{os.path.realpath(root / "cat")} again, reached '
                     'through a symbolic link inside it, and its files are '
                     'listed once, through that folder'),
  }


def test_list_tree_names_that_are_not_utf8(tmp_path):
  root = os.fsencode(str(tmp_path))
  os.makedirs(root + b'/cat')
  with open(root + b'/cat/caf\xe9.jpg', 'wb') as f:
    f.write(b'x')
  [entry] = files.list_tree(str(tmp_path))
  assert entry.path == os.fsdecode(root + b'/cat/caf\xe9.jpg')
  assert entry.problem == (f'the path is not valid UTF-8: {tmp_path}/cat/'
                           'caf\\xe9.jpg (undecodable bytes shown as \\xNN)')


def test_list_tree_skips_what_is_not_a_regular_file(tmp_path):
  _touch(str(tmp_path), 'cat', 'a.jpg')
  os.mkfifo(tmp_path / 'cat' / 'pipe.jpg')
  assert _listed(tmp_path)['cat/pipe.jpg'] == (
      None, 'not a regular file (a FIFO, socket or device)')


def test_list_tree_names_a_folder_it_cannot_list(tmp_path, monkeypatch):
  _touch(str(tmp_path), 'cat', 'a.jpg')
  _touch(str(tmp_path), 'dog', 'b.jpg')
  real = os.scandir

  def scandir(path):
    if str(path).endswith('/dog'):
      raise PermissionError(13, 'Permission denied')
    return real(path)

  monkeypatch.setattr(files.os, 'scandir', scandir)
  assert _listed(tmp_path) == {
      'cat/a.jpg': (None, None),
      'dog': ('cannot list the folder: Permission denied', None)}


def test_list_tree_root_that_cannot_be_listed_raises(tmp_path):
  with pytest.raises(OSError):
    list(files.list_tree(str(tmp_path / 'missing')))


def test_a_file_that_is_not_there_reads_as_vanished(tmp_path):
  from apache_beam.io.filesystem import BeamIOError  # pylint: disable=import-outside-toplevel
  from google.api_core import exceptions  # pylint: disable=import-outside-toplevel
  try:
    files.FileSystems.open(str(tmp_path / 'gone.png')).read()
  except Exception as e:  # pylint: disable=broad-except
    local = e
  gone = exceptions.NotFound('GET .../o/in%2Fgone.png: No such object')
  wrapped = BeamIOError('Delete operation failed', {'gs://b/in/gone.png': gone})
  try:
    try:
      raise gone
    except exceptions.NotFound as inner:
      raise OSError('read failed') from inner
  except OSError as e:
    chained = e
  from apache_beam.io.aws.clients.s3.messages import S3ClientError  # pylint: disable=import-outside-toplevel
  s3_gone = S3ClientError('Not Found', 404)
  for error in (local, gone, wrapped, chained, s3_gone):
    assert files.is_not_found(error), error
    assert files.read_error(error) == files.VANISHED
  for error in (PermissionError('denied'), exceptions.Forbidden('no'),
                BeamIOError('failed', {'gs://b/x': PermissionError('no')}),
                BeamIOError('failed', {'gs://b/x': 'not an exception'}),
                S3ClientError('Access Denied', 403),
                ValueError('bad')):
    assert not files.is_not_found(error), error
    assert files.read_error(error) == f'{type(error).__name__}: {error}'
