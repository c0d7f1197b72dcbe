"""The text flags and their checks (--label_column is shared with sensor
rows and declared in pipelines/options.py)."""

from transforms.core import flags
from transforms.core.errors import UsageError
from transforms.modalities.text import preprocessing


def add_arguments(add) -> None:
  """Declares the text flags (`add` is argparse's add_argument)."""
  add('--text_column', default='text',
      help='Text: the column holding the document (CSV/TSV/JSONL). '
      'Default: text.')
  add('--lowercase', default='true',
      help='Text: lower-case before tokenizing (true or false). '
      'Default: true.')
  add('--strip_punctuation', default=False, action='store_true',
      help='Text: turn punctuation into spaces before tokenizing.')
  add('--max_tokens', default='128',
      help='Text: token ids kept per document (padded with 0 up to it). '
      'Default: 128.')
  add('--vocab_size', default='20000',
      help='Text: the most frequent training tokens kept (top-k); 0 keeps '
      'all. Default: 20000.')
  add('--min_frequency', default='1',
      help='Text: tokens seen fewer times in the training split are '
      'out of vocabulary. Default: 1.')
  add('--oov_buckets', default='1',
      help='Text: hash buckets for out-of-vocabulary tokens; 0 drops them. '
      'Default: 1.')
  add('--ngrams', default='1',
      help='Text: n-gram sizes as n or lo,hi (such as 1,2 for words and '
      'word pairs). Default: 1.')
  add('--text_output', default='ids',
      help='Text: ids (padded token id sequences), bow (term ids and '
      'counts) or tfidf (term ids and tf-idf weights). Default: ids.')
  add('--keep_text', default=False, action='store_true',
      help='Text: also store the raw text.')
  add('--invalid_utf8', default='replace',
      help='Text: documents with invalid UTF-8: replace (U+FFFD) or '
      'dead_letter. Default: replace.')


def settings(o) -> preprocessing.TextConfig:
  """The checked text settings from the parsed flags."""
  try:
    ngrams = preprocessing.parse_ngrams(o.ngrams)
  except ValueError as e:
    raise UsageError(f'--ngrams: {e}.') from None
  return preprocessing.TextConfig(
      text_column=str(o.text_column).strip(),
      label_column=str(o.label_column).strip(),
      lowercase=flags.boolean('lowercase', o.lowercase),
      strip_punctuation=bool(o.strip_punctuation),
      max_tokens=flags.whole_number('max_tokens', o.max_tokens, 1, 100000),
      vocab_size=flags.whole_number('vocab_size', o.vocab_size, 0,
                                    10_000_000),
      min_frequency=flags.whole_number('min_frequency', o.min_frequency, 1),
      oov_buckets=flags.whole_number('oov_buckets', o.oov_buckets, 0,
                                     100000),
      ngrams=ngrams,
      output=flags.choice('text_output', o.text_output,
                          preprocessing.OUTPUTS),
      keep_text=bool(o.keep_text),
      invalid_utf8=flags.choice('invalid_utf8', o.invalid_utf8,
                                ('replace', 'dead_letter')))


def near_duplicate_rules(mode: str, o):
  """The NearDuplicateRules of a run: --near_duplicates (`mode`) and
  --near_duplicate_similarity."""
  from transforms.core import near_duplicates as near_lib  # pylint: disable=import-outside-toplevel
  similarity = near_lib.SIMILARITY
  if o.near_duplicate_similarity is not None:
    similarity = flags.number('near_duplicate_similarity',
                              o.near_duplicate_similarity, 0.3, 1.0)
  return near_lib.document_rules(mode, similarity)


def near_duplicate_rules_of(given: dict):
  """The NearDuplicateRules a dataset's config names (defaults for what it
  does not)."""
  from transforms.core import near_duplicates as near_lib  # pylint: disable=import-outside-toplevel
  return near_lib.document_rules(
      mode=given.get('mode', 'group'),
      similarity=float(given.get('similarity', near_lib.SIMILARITY)))
