"""The README and the guide in docs/ cannot drift from the code.

- Every fenced block marked `tested` (```` ```bash tested ```` or
  ```` ```python tested ````) is run, in the page's order, in a fresh folder
  per page (a page's later blocks see what its earlier ones wrote), with
  the project's Python first on PATH; it must exit 0.
- The option groups of `--help` are the groups of docs/command-line.md, and
  every option is documented in its group's section (or the page it links
  to).
- Every relative link points at a file that exists, and at a heading in it.
- The README stays a front page.
"""

import argparse
import os
import re
import subprocess
import sys

import pytest

from pipelines import command_line
from pipelines import validate
from repo import ROOT

DOCS = os.path.join(ROOT, 'docs')
PAGES = sorted(
    [os.path.join(ROOT, 'README.md'), os.path.join(ROOT, 'CONTRIBUTING.md')]
    + [os.path.join(DOCS, n) for n in os.listdir(DOCS) if n.endswith('.md')])
_FENCE = re.compile(r'^```(\w+) tested\n(.*?)^```$', re.M | re.S)


def _rel(path):
  return os.path.relpath(path, ROOT)


def _tested_blocks(path):
  with open(path, encoding='utf-8') as f:
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(f.read())]


PAGES_WITH_COMMANDS = [p for p in PAGES if _tested_blocks(p)]


def test_the_front_page_and_the_guide_carry_tested_commands():
  names = {_rel(p) for p in PAGES_WITH_COMMANDS}
  assert 'README.md' in names
  assert len(names) >= 4, names


@pytest.mark.parametrize('page', PAGES_WITH_COMMANDS, ids=_rel)
def test_the_pages_commands_run(page, tmp_path):
  env = dict(os.environ)
  env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + env['PATH']
  env['PYTHONPATH'] = ROOT
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  for i, (language, code) in enumerate(_tested_blocks(page)):
    if language == 'python':
      script = tmp_path / f'block_{i}.py'
      script.write_text(code)
      argv = [sys.executable, str(script)]
    else:
      argv = ['bash', '-euo', 'pipefail', '-c', code]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, (
        f'{_rel(page)}, block {i + 1}:\n{code}\n--- stdout:\n'
        f'{proc.stdout[-2000:]}\n--- stderr:\n{proc.stderr[-3000:]}')
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]


# --- --help and the option tables ------------------------------------------

def _groups(parser):
  """{group title: [option, ...]} of an argparse parser, as --help lists
  them (without --help itself, and without Beam's flags, which it leaves
  out)."""
  out = {}
  for group in parser._action_groups:  # pylint: disable=protected-access
    names = [a.option_strings[0] for a in group._group_actions  # pylint: disable=protected-access
             if a.option_strings and a.option_strings[0] != '-h'
             and a.help != argparse.SUPPRESS]
    if names:
      out[group.title] = names
  return out


def _sections(text, level):
  """{heading: body} of the headings of one level in a markdown text (a
  body runs to the next heading of that level or above)."""
  out, title, body = {}, None, []
  for line in re.sub(r'^```.*?^```', '', text, flags=re.M | re.S).split(
      '\n'):
    heading = re.match(r'^(#+) (.*)$', line)
    if heading and len(heading.group(1)) <= level:
      if title is not None:
        out[title] = '\n'.join(body)
      title = heading.group(2) if len(heading.group(1)) == level else None
      body = []
    elif title is not None:
      body.append(line)
  if title is not None:
    out[title] = '\n'.join(body)
  return out


def _documented(section):
  """Options named in a section's tables, and in the tables of the pages
  it links to (a modality's own page)."""
  names = set(re.findall(r'^\| `(--[a-z_0-9]+)`', section, re.M))
  for page, anchor in re.findall(r'\]\(([a-z-]+\.md)#([a-z-]+)\)', section):
    with open(os.path.join(DOCS, page), encoding='utf-8') as f:
      linked = _sections(f.read(), 2)
    body = next(b for t, b in linked.items() if _anchor(t) == anchor)
    names |= set(re.findall(r'^\| `(--[a-z_0-9]+)`', body, re.M))
  return names


def _command_line_groups(command):
  with open(os.path.join(DOCS, 'command-line.md'), encoding='utf-8') as f:
    text = f.read()
  return _sections(_sections(text, 2)[command], 3)


@pytest.mark.parametrize('command', ['preprocess', 'validate'])
def test_help_lists_the_options_in_the_guides_groups(command):
  if command == 'preprocess':
    parser = command_line.preprocess_parser()
  else:
    parser = command_line.validate_parser(validate.__doc__.split('\n')[0])
  groups = _groups(parser)
  documented = _command_line_groups(command)
  assert list(groups) == list(documented)
  for title, names in groups.items():
    in_guide = _documented(documented[title])
    assert set(names) <= in_guide, (title, set(names) - in_guide)
    # A table in the command-line page lists only its group's options.
    here = set(re.findall(r'^\| `(--[a-z_0-9]+)`', documented[title], re.M))
    assert here <= set(names), (title, here - set(names))


# --- Links -----------------------------------------------------------------

def _anchor(heading):
  """GitHub's anchor of a heading."""
  text = re.sub(r'[`*_]', '', heading.strip().lower())
  text = re.sub(r'[^\w\- ]', '', text)
  return text.replace(' ', '-')


def _anchors(path):
  with open(path, encoding='utf-8') as f:
    text = re.sub(r'^```.*?^```', '', f.read(), flags=re.M | re.S)
  return {_anchor(m) for m in re.findall(r'^#+ (.*)$', text, re.M)}


@pytest.mark.parametrize('page', PAGES, ids=_rel)
def test_relative_links_lead_somewhere(page):
  with open(page, encoding='utf-8') as f:
    text = re.sub(r'^```.*?^```', '', f.read(), flags=re.M | re.S)
  broken = []
  for target in re.findall(r'\]\(([^)\s]+)\)', text):
    if re.match(r'[a-z]+:', target):
      continue
    path, _, anchor = target.partition('#')
    full = os.path.normpath(os.path.join(os.path.dirname(page), path)
                            if path else page)
    if not os.path.exists(full):
      broken.append(target)
    elif anchor and full.endswith('.md') and anchor not in _anchors(full):
      broken.append(target)
  assert not broken, broken


def test_the_readme_is_a_front_page():
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  assert len(text.split('\n')) <= 200
  # The README's test command, which CI runs.
  assert './run_tests.sh' in text
  # Dated measurement logs live in benchmarks/RESULTS.md and git history.
  assert not re.search(r'^#+ .*\(20\d\d-\d\d-\d\d', text, re.M)
