"""docs/troubleshooting.md quotes every sentence a user can be shown when a
run goes wrong; these tests keep the page and the code in step.

The sentences are read from the source by its syntax tree, without running
anything: a message is a string constant, an f-string (each `{...}` is a
placeholder) or a `+` of them. A page entry is a list item (nested or
not) that starts with a quoted sentence ("- `...`"), written as the user
sees it, with `<name>` for the parts that vary. A sentence of the code and
an entry match when the entry is the sentence with its placeholders filled
in (any text, `<name>` included, fills a placeholder), after whitespace,
the `error: ` prefix, the capital letter `preprocess` adds and the final
full stop are set aside. Placeholders are matched loosely so that the page
may name them freely; the fixed words are matched exactly.

Both ways are checked: every sentence collected from the code has an entry
(a sentence added to the code without one fails), and every entry matches
some string of the code (an entry whose sentence was changed or removed
fails). Messages that are put together from parts the syntax tree cannot
follow (a helper's return value, a module constant, an exception's text
shown after a flag's name) are listed in EXPLICIT below; each listed
sentence must itself match a string of the code.
"""

import ast
import functools
import os
import re
from typing import Dict, Iterator, Optional, Set, Tuple

import repo

PAGE = os.path.join(repo.ROOT, 'docs', 'troubleshooting.md')
SOURCE_DIRS = ('pipelines', 'transforms')

# Exceptions whose message (first argument) a user reads: in the `error:`
# sentence (exit 2 or 3), after "the pipeline failed: <Type>:" (exit 1),
# after "validation: FAIL:", or as a dead letter's reason.
MESSAGE_CLASSES = {
    'UsageError': 'usage', 'OutputBusy': 'usage',
    'DataQualityError': 'quality',
    'ColumnError': 'column',
    'DatasetError': 'dataset',
    'LeaseLost': 'publish', 'PublishRefused': 'publish',
}
# Functions whose appended or returned strings are the quality gate's
# reasons (joined with '; ' after "error: data quality: ").
QUALITY_FUNCTIONS = ('quality_failures', 'split_failures', 'dataset_failures')
# Calls that make a validation report entry: their first argument (or the
# 'check' key of a dict) is the check's name.
CHECK_FUNCTIONS = ('entry', '_leveled')
# Calls -> their keyword argument that is a dead letter's reason (a file
# the listing cannot read: files.Listed).
REASON_KEYWORDS = {'Listed': 'problem'}

# Sentences the syntax tree cannot follow to their call, by kind, written as
# on the page. Each must match a string of the code, and the page must have
# an entry that holds it.
EXPLICIT: Dict[str, Tuple[str, ...]] = {
    'usage': (
        # pipelines/preprocess.py: a Ctrl-C or SIGTERM, and the options only
        # Dataflow honours (_dataflow_only's refusals).
        'cancelled by <signal>; nothing was published and the run\'s folder '
        'was removed',
        '--dry_run only applies to --runner DataflowRunner (it translates '
        'the job without submitting it); other runners would run the '
        'pipeline for real.',
        '--detach only applies to --runner DataflowRunner (a local job runs '
        'inside this process and cannot outlive it).',
        # pipelines/runner_setup.py's _DASK_REFUSAL and
        # pipelines/command_line.py's _bad_value.
        "Beam 2.77's DaskRunner drops outputs emitted in finish_bundle, "
        'merges the outputs of multi-output steps and recomputes side '
        'inputs, so it would lose or mix up records',
        '<flag> needs a value',
        '<flag> must be one of <choices> (got <value>)',
        '<flag> must be a whole number (got <value>)',
        '<flag> must be a number (got <value>)',
        '<flag> has a value Beam cannot use (got <value>)',
        # transforms/core/splits.py, shown after "--splits: ".
        'no splits given',
        'split <item> is not of the form name=ratio',
        'split ratio <value> of <name> is not a number',
        'split ratio of <name> must be between 0 and 1, got <ratio>',
        'split <name> is given twice',
        'split ratios add up to <total>, not 1',
        'unknown split <name> (expected one of <splits>)',
        # transforms/modalities/sensor/config.py, after "--time_cutoffs: ".
        '<text> is not an ISO-8601 time or a number',
        # transforms/modalities/text/preprocessing.py, after "--ngrams: ".
        '<text> is not n or lo,hi with 1 <= lo <= hi <= 5',
        # transforms/modalities/sensor/modality.py: content_refusal.
        'sensor rows and windows are split by --split_by, and equal rows of '
        'different times are distinct observations, not copies.',
        # pipelines/preflight.py: why a remote path cannot be reached.
        'Beam has no file system for <scheme>:// paths in this environment'
        '<hint>',
    ),
    'publish': (
        # transforms/output/lease.py: Lease._lost_message.
        'the lease of <output> is gone (removed by hand, or taken and given '
        'back by another run)',
        'run <run_id> (host <host>) took over the output <output> after '
        'this run\'s lease expired',
        # pipelines/preprocess.py: a run that ended without its manifest.
        'the pipeline finished but did not publish a manifest',
    ),
    'dead_letter': (
        # transforms/sources/tables.py (sensor rows): cell reasons.
        'column <name> holds invalid UTF-8',
        'channel <name> value <value> is not a number',
        'missing timestamp',
        'timestamp <value> is not ISO-8601 or a number',
        'timestamp <value> is out of range',
        'missing label',
        'line is not valid UTF-8',
        'invalid JSON: <error>',
        'line is a JSON <kind>, not an object',
        # transforms/modalities/text/inputs.py: document reasons.
        'empty text',
        'invalid UTF-8 in the text',
        'text longer than <n> MiB',
        'invalid UTF-8 in the label',
        'line is not a JSON object',
        'the <role> is <kind>, not a string',
        'cannot read: <error>',
        # transforms/modalities/image/inputs.py: manifest lines.
        'manifest line is not valid JSON: <error>',
        'manifest line is not a JSON object',
        'manifest line is not valid <format>: <error>',
        'manifest line has no path',
        'manifest line for <path> has no label',
        'manifest line for <path> has no split',
        'a quote opened on this line is not closed within <n> lines',
        'a quote opened on this line is not closed on it (only columns '
        'other than path, label and split may hold line breaks)',
        'manifest line is not valid UTF-8',
        # transforms/sources/files.py: listing.
        'the path is not valid UTF-8: <path> (undecodable bytes shown as '
        '\\xNN)',
        'broken symbolic link: target <target> is a loop of symbolic links',
        'broken symbolic link: target <target> does not exist',
        # transforms/core/contents.py: --label_conflicts, --drop_duplicates.
        'label conflict: the same content is labelled <labels>',
        'label conflict with no majority label: the same content is '
        'labelled <labels>',
        'label conflict: the same content is labelled <labels>; the '
        'majority label <label> is kept',
        'duplicate of <id>',
        # transforms/runtime/processes.py: Died, dead-lettered by image decode.
        'the worker process died each time it processed this input '
        '(killed, out of memory, or a crash in a decoder)',
        # transforms/sources/files.py: read_error, of an input that is gone.
        'the file no longer exists (deleted or moved after it was listed)',
        # transforms/modalities/image/decode.py: any other read error.
        '<ExceptionType>: <message>',
    ),
}

_PLACEHOLDER = re.compile(r'<[^<>\s][^<>]*>')
_SLOT = '\x00'  # a placeholder of the code, in a template's text


# --------------------------------------------------------------- code --


def _source_files() -> Iterator[str]:
  for top in SOURCE_DIRS:
    for folder, _, names in os.walk(os.path.join(repo.ROOT, top)):
      for name in sorted(names):
        if name.endswith('.py'):
          yield os.path.join(folder, name)


@functools.lru_cache(maxsize=None)
def _trees() -> Tuple[Tuple[str, ast.Module], ...]:
  trees = []
  for path in _source_files():
    with open(path, encoding='utf-8') as f:
      trees.append((os.path.relpath(path, repo.ROOT), ast.parse(f.read())))
  return tuple(trees)


def _template(node: ast.AST) -> Optional[str]:
  """A message expression as text with _SLOT for each varying part; None
  when it holds no string literal at all."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return node.value
  if isinstance(node, ast.JoinedStr):
    return ''.join(
        part.value if isinstance(part, ast.Constant) else _SLOT
        for part in node.values)
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
    left, right = _template(node.left), _template(node.right)
    if left is None and right is None:
      return None
    return (left if left is not None else _SLOT) + (
        right if right is not None else _SLOT)
  return None


def _name(func: ast.AST) -> str:
  if isinstance(func, ast.Name):
    return func.id
  if isinstance(func, ast.Attribute):
    return func.attr
  return ''


def _module_strings(tree: ast.Module) -> Dict[str, str]:
  """Module-level NAME = 'string' constants."""
  found = {}
  for node in tree.body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and
        isinstance(node.targets[0], ast.Name)):
      text = _template(node.value)
      if text is not None:
        found[node.targets[0].id] = text
  return found


def _resolved(node: ast.AST, constants: Dict[str, str]) -> Optional[str]:
  if isinstance(node, ast.Name):
    return constants.get(node.id)
  return _template(node)


def _parents(tree: ast.Module) -> Dict[ast.AST, ast.AST]:
  return {child: node for node in ast.walk(tree)
          for child in ast.iter_child_nodes(node)}


@functools.lru_cache(maxsize=None)
def collected() -> Dict[str, Set[Tuple[str, str]]]:
  """Kind -> {(template, where)} of the user-visible sentences the syntax
  tree leads to; 'stage' holds the dead-letter stages."""
  kinds: Dict[str, Set[Tuple[str, str]]] = {}

  def add(kind, text, path, node):
    if text is not None and text.replace(_SLOT, '').strip():
      kinds.setdefault(kind, set()).add((text, f'{path}:{node.lineno}'))

  for path, tree in _trees():
    constants = _module_strings(tree)
    parents = _parents(tree)
    for node in ast.walk(tree):
      if isinstance(node, ast.Call):
        name, args = _name(node.func), node.args
        if name in MESSAGE_CLASSES and args:
          add(MESSAGE_CLASSES[name], _template(args[0]), path, node)
        elif name == 'BadImageError' and len(args) == 2:
          add('stage', _template(args[0]), path, node)
          add('dead_letter', _template(args[1]), path, node)
        elif name == 'dead_letter' and len(args) >= 3:
          add('stage', _resolved(args[1], constants), path, node)
          add('dead_letter', _template(args[2]), path, node)
        elif name in CHECK_FUNCTIONS and args:
          add('check', _template(args[0]), path, node)
        elif name in ('print', 'write') and args:
          text = _template(args[0])
          if text and text.startswith(('error: ', 'validation: FAIL')):
            add('printed', text, path, node)
        elif (name == '__init__' and args and
              isinstance(node.func.value, ast.Call) and
              _name(node.func.value.func) == 'super'):
          owner = parents.get(node)
          while owner is not None and not isinstance(owner, ast.ClassDef):
            owner = parents.get(owner)
          if owner is not None and owner.name in MESSAGE_CLASSES:
            add(MESSAGE_CLASSES[owner.name], _template(args[0]), path, node)
        for keyword in node.keywords:
          if keyword.arg == REASON_KEYWORDS.get(name):
            add('dead_letter', _template(keyword.value), path, node)
      elif isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values):
          if isinstance(key, ast.Constant) and key.value == 'check':
            add('check', _template(value), path, node)
      elif (isinstance(node, ast.FunctionDef) and
            node.name in QUALITY_FUNCTIONS):
        for inner in ast.walk(node):
          if isinstance(inner, ast.Call) and _name(inner.func) == 'append':
            add('quality', _template(inner.args[0]), path, inner)
          elif isinstance(inner, ast.Return) and isinstance(inner.value,
                                                            ast.List):
            for item in inner.value.elts:
              add('quality', _template(item), path, inner)
  return kinds


@functools.lru_cache(maxsize=None)
def code_strings() -> Tuple[str, ...]:
  """Every string literal of the code as a template: what a page entry
  (or an EXPLICIT sentence) may be an instance of."""
  found = set()
  for _, tree in _trees():
    for node in ast.walk(tree):
      text = _template(node)
      if text is not None:
        # str.format templates ('timestamp {} is out of range').
        found.add(text.replace('{}', _SLOT))
  return tuple(sorted(found))


# --------------------------------------------------------------- page --


def _normal(text: str) -> str:
  """Whitespace collapsed; `error: `, a leading capital and the final
  full stop set aside (the command line adds them to a UsageError's
  message)."""
  text = ' '.join(text.split())
  if text.startswith('error: '):
    text = text[len('error: '):]
  text = text.rstrip('.')
  return text[:1].lower() + text[1:]


@functools.lru_cache(maxsize=None)
def _pattern(template: str) -> re.Pattern:
  """A code template as a regex over normalized entries: its literal parts
  exactly, each placeholder as any text."""
  parts = _normal(template.replace(_SLOT, '\x01')).split('\x01')
  return re.compile('.*?'.join(re.escape(p) for p in parts), re.DOTALL)


# What stands before a message on the page: the validator's verdict, or
# the exception's type after "The pipeline failed:".
_SHOWN_AFTER = re.compile(r'^(validation: FAIL: |[A-Z][A-Za-z]*(Error|Refused|'
                          r'Lost): )')


def _variants(sentence: str) -> Tuple[str, ...]:
  """The entry's sentence, and it without what the page shows before the
  message, normalized."""
  return tuple(_normal(s) for s in (sentence,
                                    _SHOWN_AFTER.sub('', sentence)))


def matches(template: str, sentence: str) -> bool:
  """Whether the page's `sentence` is the code's `template` filled in
  (with or without what the page shows before the message)."""
  pattern = _pattern(template)
  return any(pattern.fullmatch(s) for s in _variants(sentence))


def _letters(text: str) -> int:
  """Letters and digits outside the placeholders."""
  text = _PLACEHOLDER.sub('', text.replace(_SLOT, ''))
  return sum(c.isalnum() for c in text)


def matches_closely(template: str, sentence: str) -> bool:
  """matches(), by a template that holds at least half of the sentence's
  fixed words: a template that is mostly placeholders ('{}: {}') would
  match any sentence."""
  pattern = _pattern(template)
  return any(pattern.fullmatch(s) and 2 * _letters(template) >= _letters(s)
             for s in _variants(sentence))


def _read_page() -> str:
  with open(PAGE, encoding='utf-8') as f:
    return f.read()


@functools.lru_cache(maxsize=None)
def entries() -> Tuple[str, ...]:
  """The sentence each entry of the page quotes: list items opening with
  a code span ("- `...`"), the span possibly over several lines."""
  found = []
  for match in re.finditer(r'^ *- `([^`]+)`', _read_page(), re.MULTILINE):
    found.append(' '.join(match.group(1).split()))
  return tuple(found)


def _placeholders_as_one(text: str) -> str:
  """Whitespace collapsed, each placeholder as <>, no final full stop,
  in small letters: for finding an EXPLICIT part inside an entry."""
  return _PLACEHOLDER.sub('<>', ' '.join(text.split())).rstrip('.').lower()


# -------------------------------------------------------------- tests --


def test_the_collection_finds_each_kind():
  """A guard for the collector itself: if a refactoring renamed the
  classes or functions it looks for, it would find nothing to check."""
  kinds = collected()
  for kind, least in (('usage', 80), ('quality', 5), ('column', 10),
                      ('dataset', 5), ('publish', 3), ('dead_letter', 8),
                      ('stage', 5), ('check', 15), ('printed', 5)):
    assert len(kinds.get(kind, ())) >= least, kind


def _undocumented(kind: str) -> str:
  """The sentences of `kind` without an entry, one a line ('' if none),
  with <> for the placeholders, for the assertion's message."""
  page = entries()
  return '\n'.join(sorted(
      f'{where}: {text.replace(_SLOT, "<>")}'
      for text, where in collected()[kind]
      if not any(matches(text, e) for e in page)) + [''])


def test_every_usage_sentence_has_an_entry():
  missing = _undocumented('usage')
  assert not missing, missing


def test_every_column_sentence_has_an_entry():
  missing = _undocumented('column')
  assert not missing, missing


def test_every_quality_failure_has_an_entry():
  missing = _undocumented('quality')
  assert not missing, missing


def test_every_dataset_and_publish_sentence_has_an_entry():
  missing = _undocumented('dataset') + _undocumented('publish')
  assert not missing, missing


def test_every_printed_error_has_an_entry():
  missing = _undocumented('printed')
  assert not missing, missing


def test_printed_sentences_keep_their_small_letter():
  """Only a UsageError's sentence gets a capital letter (from preprocess
  and the launchers); "error: the pipeline failed: ...", "error: cancelled
  by ..." and "error: data quality: ..." are printed as written."""
  wrong = []
  for text, _ in collected()['printed']:
    start = text.split(_SLOT)[0]
    if len(start) > len('error: '):
      wrong += [e for e in entries()
                if matches(text, e) and not e.startswith(start)]
  assert not wrong


def test_every_dead_letter_reason_has_an_entry():
  missing = _undocumented('dead_letter')
  assert not missing, missing


def test_every_validation_check_has_an_entry():
  missing = _undocumented('check')
  assert not missing, missing


def test_every_dead_letter_stage_has_a_section():
  """Stages are headed "### Stage `name`" and no other stage is."""
  stages = {text for text, _ in collected()['stage']}
  headed = set(re.findall(r'^### Stage `([^`]+)`', _read_page(),
                          re.MULTILINE))
  assert headed == stages


def test_every_explicit_sentence_is_in_the_code_and_on_the_page():
  strings = code_strings()
  page = [_placeholders_as_one(e) for e in entries()]
  for kind, sentences in EXPLICIT.items():
    for sentence in sentences:
      assert any(matches_closely(s, sentence) for s in strings), (
          kind, sentence)
      assert any(_placeholders_as_one(sentence) in e for e in page), (
          kind, sentence)


def _composed(entry: str) -> bool:
  """Whether the entry is a collected sentence with an EXPLICIT part in
  one of its placeholders ("--runner <name> is refused: Beam 2.77's
  DaskRunner ...")."""
  shown = _placeholders_as_one(entry)
  return any(matches(text, entry) for kind in collected().values()
             for text, _ in kind) and any(
                 _placeholders_as_one(part) in shown
                 for parts in EXPLICIT.values() for part in parts)


def test_every_entry_is_a_string_of_the_code():
  """Each entry is an instance of one string of the code that holds at
  least half its fixed words, or is put together from a collected
  sentence and an EXPLICIT part."""
  strings = code_strings()
  stale = [e for e in entries()
           if not any(matches_closely(s, e) for s in strings) and
           not _composed(e)]
  assert not stale


def _exit_codes(module) -> Dict[str, int]:
  """A command module's EXIT_* codes."""
  return {name: value for name, value in vars(module).items()
          if name.startswith('EXIT_')}


def test_the_exit_code_table_has_every_code():
  """The table's rows ("| 2 | ...") are the codes of both commands and of
  the two stopping signals (128 + SIGINT 2, 128 + SIGTERM 15)."""
  import signal  # pylint: disable=import-outside-toplevel
  from pipelines import outcome  # pylint: disable=import-outside-toplevel
  from pipelines import validate  # pylint: disable=import-outside-toplevel
  codes = set(_exit_codes(outcome).values())
  codes |= set(_exit_codes(validate).values())
  codes |= {128 + signal.SIGINT, 128 + signal.SIGTERM}
  rows = {int(n) for n in re.findall(r'^\| (\d+) \|', _read_page(),
                                     re.MULTILINE)}
  assert rows == codes
