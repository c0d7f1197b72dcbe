"""Text with tf.Transform: tokens, a training vocabulary, padded ids.

The `preprocessing_fn` maps a raw document (`text`, a string) to what is
stored, entirely in TensorFlow, so the exported transform (`transform_fn/`)
does the same at serving time:

- normalize: lower-case (Unicode), optionally punctuation to spaces;
- tokenize on whitespace; optionally n-grams (`tf.strings.ngrams`);
- `tft.compute_and_apply_vocabulary` over the training split (top-k,
  minimum frequency, OOV buckets): vocabulary tokens get ids 1..V, OOV
  buckets V+1..V+B, and 0 is padding (with no OOV bucket, unknown tokens
  are dropped);
- `token_ids`: the first `max_tokens` ids padded with 0, `length` the
  number of ids kept, `num_tokens` the number before truncation; or, with
  `--text_output bow|tfidf`, `term_ids` and `term_weights` (counts, or
  `tft.tfidf` weights) instead of the sequence;
- `oov_tokens`: unknown tokens per document (for the manifest's OOV rate).

A label vocabulary (`tft.vocabulary`, file `labels`) is computed as well;
the dataset's label ids are the manifest's sorted `labels`.
"""

import dataclasses
import hashlib
import re
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

TEXT = 'text'
LABEL = 'label'
LABEL_TEXT = 'label_text'
ID = 'id'
WEIGHT = 'weight'
TOKEN_IDS = 'token_ids'
LENGTH = 'length'
NUM_TOKENS = 'num_tokens'
TERM_IDS = 'term_ids'
TERM_WEIGHTS = 'term_weights'
OOV_TOKENS = 'oov_tokens'
TOKENS_VOCABULARY = 'tokens'
LABELS_VOCABULARY = 'labels'
OUTPUTS = ('ids', 'bow', 'tfidf')
# Token counts above this share one bin of the length histogram.
LENGTH_BINS = 4096


@dataclasses.dataclass(frozen=True)
class TextConfig:
  """The checked text settings of a run."""
  text_column: str
  label_column: str
  lowercase: bool
  strip_punctuation: bool
  max_tokens: int
  vocab_size: int  # 0: no limit
  min_frequency: int
  oov_buckets: int
  ngrams: Tuple[int, int]  # (smallest, largest) n
  output: str  # 'ids', 'bow' or 'tfidf'
  keep_text: bool
  invalid_utf8: str

  def to_json(self) -> dict:
    d = dataclasses.asdict(self)
    d['ngrams'] = list(self.ngrams)
    return d


def parse_ngrams(text: str) -> Tuple[int, int]:
  """'1' -> (1, 1); '1,2' or '1-2' -> (1, 2).

  Raises:
    ValueError: Not one or two whole numbers from 1 to 5 in order.
  """
  parts = [p for p in str(text).replace('-', ',').split(',') if p.strip()]
  try:
    nums = [int(p) for p in parts]
  except ValueError:
    nums = []
  if len(nums) == 1:
    nums = nums * 2
  if len(nums) != 2 or not 1 <= nums[0] <= nums[1] <= 5:
    raise ValueError(f'{text!r} is not n or lo,hi with 1 <= lo <= hi <= 5')
  return nums[0], nums[1]


class _Punctuation(dict):
  """str.translate table: Unicode punctuation (category P*, the `\\pP` of
  the transform's regex) -> space, filled as characters are seen."""

  def __missing__(self, code: int):
    value = ' ' if unicodedata.category(chr(code)).startswith('P') else code
    self[code] = value
    return value


_PUNCTUATION = _Punctuation()
# The same for ASCII text, as a bytes.translate table.
_ASCII_PUNCTUATION = bytes(
    ord(' ') if unicodedata.category(chr(b)).startswith('P') else b
    for b in range(256))
# tf.strings.split's whitespace.
_WHITESPACE = re.compile(r'[ \t\n\r\v\f]+')


def normalized_tokens(text: str, tc: TextConfig) -> List[str]:
  """The tokens `tokenize` makes of one document (lower-casing, punctuation
  and whitespace as the transform does them), in plain Python."""
  if text.isascii():
    return [t.decode('ascii') for t in _ascii_tokens(text, tc)]
  return _unicode_tokens(text, tc)


def _ascii_tokens(text: str, tc: TextConfig) -> List[bytes]:
  """normalized_tokens of an ASCII text, as bytes (bytes.split() splits on
  exactly tf.strings.split's whitespace)."""
  data = text.encode('ascii')
  if tc.lowercase:
    data = data.lower()
  if tc.strip_punctuation:
    data = data.translate(_ASCII_PUNCTUATION)
  return data.split()


def _unicode_tokens(text: str, tc: TextConfig) -> List[str]:
  if tc.lowercase:
    text = text.lower()
  if tc.strip_punctuation:
    text = text.translate(_PUNCTUATION)
  return [t for t in _WHITESPACE.split(text) if t]


def _ngrams(tokens: list, lo: int, hi: int) -> list:
  """tf.strings.ngrams with widths lo..hi: all n-grams of each width in
  turn, joined by spaces (of str or bytes tokens)."""
  space = b' ' if tokens and isinstance(tokens[0], bytes) else ' '
  out = []
  for n in range(lo, hi + 1):
    out += [space.join(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
  return out


def content_keys(texts: Sequence[str], tc: TextConfig,
                 compiled: bool = False) -> List[str]:
  """The content digest of each document (core/contents.py): equal for
  documents whose stored features are equal, because the key is what the
  transform reads of the text: its tokens (n-grams), the first max_tokens
  of them for `ids` output, their multiset for `bow` and `tfidf`.

  The digest is a SHA-256 of the tokens' UTF-8 bytes joined by 0x1f.
  Without n-grams, the ASCII documents of a batch (most) are normalized
  together and never split into token objects (`_ascii_keys`); the rest
  take `_keys_one_by_one`. Both give the same digests.

  With `compiled`, `_ascii_keys` finds the tokens in a compiled loop
  (text/signature_kernels.token_runs) instead of NumPy array steps, for
  the processes that have Numba's loops loaded anyway: those that sign
  documents for the near-duplicate search. The same digests, in 2.2 µs a
  document of the text benchmark instead of 3.3 (one core, SHA-256
  included).
  """
  if tc.ngrams != (1, 1) or not texts:
    return _keys_one_by_one(texts, tc)
  joined = '\x00'.join(texts)
  if joined.isascii():
    return (_ascii_keys(joined, len(texts), tc, compiled) or
            _keys_one_by_one(texts, tc))
  keys = [None] * len(texts)
  ascii_ones = [k for k, text in enumerate(texts) if text.isascii()]
  found = (_ascii_keys('\x00'.join(texts[k] for k in ascii_ones),
                       len(ascii_ones), tc, compiled) if ascii_ones else [])
  if found is None:
    return _keys_one_by_one(texts, tc)
  for k, key in zip(ascii_ones, found):
    keys[k] = key
  rest = [k for k, key in enumerate(keys) if key is None]
  for k, key in zip(rest, _keys_one_by_one([texts[k] for k in rest], tc)):
    keys[k] = key
  return keys


def _keys_one_by_one(texts: Sequence[str], tc: TextConfig) -> List[str]:
  """content_keys, a document at a time. ASCII texts stay bytes
  throughout, which is several times faster than decoding every token."""
  keys = []
  lo, hi = tc.ngrams
  sha256 = hashlib.sha256
  for text in texts:
    if text.isascii():
      grams = _ascii_tokens(text, tc)
    else:
      grams = [t.encode('utf-8', 'surrogatepass')
               for t in _unicode_tokens(text, tc)]
    if (lo, hi) != (1, 1):
      grams = _ngrams(grams, lo, hi)
    if tc.output == 'ids':
      grams = grams[:tc.max_tokens]
    else:
      grams.sort()
    keys.append(sha256(b'\x1f'.join(grams)).hexdigest()[:32])
  return keys


def _joining_table(lowercase: bool, strip_punctuation: bool) -> bytes:
  """bytes.translate table of `_ascii_keys`: what `_ascii_tokens` does to
  a byte (lower case, punctuation a space), with every whitespace byte
  (bytes.split's) made the digest's separator 0x1f."""
  table = bytearray(range(256))
  for c in range(128):
    byte = bytes([c])
    if lowercase:
      byte = byte.lower()
    if strip_punctuation:
      byte = byte.translate(_ASCII_PUNCTUATION)
    table[c] = 0x1f if byte.isspace() else byte[0]
  return bytes(table)


_JOINING = {(lower, strip): _joining_table(lower, strip)
            for lower in (False, True) for strip in (False, True)}


def _ascii_keys(joined: str, n: int, tc: TextConfig, compiled: bool = False
                ) -> Optional[List[str]]:
  """content_keys (without n-grams) of n ASCII documents joined by 0:
  what `_keys_one_by_one` hashes, each document's tokens joined by 0x1f,
  found for the whole batch at once with no object per token. The batch
  is lower-cased and its punctuation and whitespace made 0x1f by one
  translate; the tokens (runs of other bytes) are found in NumPy (or, with
  `compiled`, in a compiled loop); the bytes kept are the tokens' and,
  after each token but the last of its document, one 0x1f. None when a
  document holds a 0 or 0x1f character (which this joining would confuse
  with its own)."""
  raw = joined.encode('ascii')
  if raw.find(b'\x1f') >= 0:
    return None
  table = _JOINING[tc.lowercase, tc.strip_punctuation]
  if compiled:
    # pylint: disable=import-outside-toplevel
    from transforms.modalities.text import signature_kernels
    if raw.count(0) != n - 1:
      return None
    data = raw.translate(table)
    kept, begin, stop = signature_kernels.token_runs(
        np.frombuffer(data, np.uint8), n,
        tc.max_tokens if tc.output == 'ids' else len(data) + 1)
    return _hashed(memoryview(kept), begin, stop, tc.output == 'ids')
  # (The documents' bounds, which the array steps need, are found once,
  # and tell whether a document holds a 0.)
  bounds = np.flatnonzero(np.frombuffer(raw, np.uint8) == 0)
  if len(bounds) != n - 1:
    return None
  b = np.frombuffer(raw.translate(table), np.uint8)
  token = b != 0x1f
  token &= b != 0
  edges = np.diff(np.r_[False, token, False].view(np.int8))
  starts = np.flatnonzero(edges == 1)
  ends = np.flatnonzero(edges == -1)
  # Tokens per document, and the index of each document's first.
  first = np.searchsorted(starts, np.r_[0, bounds])
  count = np.diff(np.r_[first, len(starts)])
  inner = np.ones(len(starts), bool)
  inner[(first + count - 1)[count > 0]] = False  # its document's last
  keep = token
  keep[ends[inner]] = True
  view = memoryview(b[keep])
  # A document's kept bytes: its tokens' and a 0x1f between two.
  sizes = np.zeros(len(starts) + 1, np.int64)
  np.cumsum(ends - starts, out=sizes[1:])
  length = sizes[first + count] - sizes[first] + np.maximum(count - 1, 0)
  begin = np.zeros(n, np.int64)
  np.cumsum(length[:-1], out=begin[1:])
  stop = begin + length
  if tc.output == 'ids':
    # Documents of more tokens than max_tokens end at the last one kept.
    limit = tc.max_tokens
    long = np.flatnonzero(count > limit)
    stop[long] = (begin[long] + sizes[first[long] + limit]
                  - sizes[first[long]] + limit - 1)
  return _hashed(view, begin, stop, tc.output == 'ids')


def _hashed(view: memoryview, begin: np.ndarray, stop: np.ndarray,
            in_order: bool) -> List[str]:
  """The digest of each document's kept bytes view[begin:stop] (tokens
  joined by 0x1f): of the tokens in order (`in_order`, ids output), else
  sorted."""
  sha256 = hashlib.sha256
  if not in_order:
    out = []
    for a, e in zip(begin.tolist(), stop.tolist()):
      tokens = sorted(view[a:e].tobytes().split(b'\x1f')) if e > a else []
      out.append(sha256(b'\x1f'.join(tokens)).hexdigest()[:32])
    return out
  return [sha256(view[a:e]).hexdigest()[:32]
          for a, e in zip(begin.tolist(), stop.tolist())]


def feature_spec(tc: TextConfig, with_weight: bool) -> Dict[str, dict]:
  """The stored features as a JSON-able spec (shape None: variable)."""
  spec = {
      LABEL: {'dtype': 'int64', 'shape': []},
      LABEL_TEXT: {'dtype': 'string', 'shape': []},
      ID: {'dtype': 'string', 'shape': []},
      NUM_TOKENS: {'dtype': 'int64', 'shape': []},
  }
  if tc.output == 'ids':
    spec[TOKEN_IDS] = {'dtype': 'int64', 'shape': [tc.max_tokens]}
    spec[LENGTH] = {'dtype': 'int64', 'shape': []}
  else:
    spec[TERM_IDS] = {'dtype': 'int64', 'shape': None}
    spec[TERM_WEIGHTS] = {'dtype': 'float32', 'shape': None}
  if tc.keep_text:
    spec[TEXT] = {'dtype': 'string', 'shape': []}
  if with_weight:
    spec[WEIGHT] = {'dtype': 'float32', 'shape': []}
  return spec


def tokenize(text, tc: TextConfig):
  """Strings [batch] -> tokens (RaggedTensor [batch, None])."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  if tc.lowercase:
    text = tf.strings.lower(text, encoding='utf-8')
  if tc.strip_punctuation:
    text = tf.strings.regex_replace(text, r'\pP', ' ')
  tokens = tf.strings.split(text)
  if tc.ngrams != (1, 1):
    lo, hi = tc.ngrams
    tokens = tf.strings.ngrams(tokens, ngram_width=tuple(range(lo, hi + 1)),
                               separator=' ')
  return tokens


def _count_per_row(flags, row_splits):
  """How many of each row's flags are true, as int64 (flags: the flat
  values of a ragged tensor with these row splits): a running sum read at
  the row boundaries."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  total = tf.concat([tf.zeros([1], tf.int64),
                     tf.cumsum(tf.cast(flags, tf.int64))], 0)
  return tf.gather(total, row_splits[1:]) - tf.gather(total, row_splits[:-1])


def make_preprocessing_fn(tc: TextConfig):
  """Builds the preprocessing_fn (see the module docstring)."""

  def preprocessing_fn(inputs):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel

    tokens = tokenize(inputs[TEXT], tc)
    # Unit weights make tf.Transform count tokens per batch inside the
    # graph (distinct tokens and their sums) instead of sending every token
    # occurrence to Beam to be counted; the counts are the same.
    ids = tft.compute_and_apply_vocabulary(
        tokens, weights=tf.ones_like(tokens, tf.float32),
        top_k=tc.vocab_size or None,
        frequency_threshold=tc.min_frequency if tc.min_frequency > 1
        else None,
        num_oov_buckets=tc.oov_buckets, vocab_filename=TOKENS_VOCABULARY)
    # The same for the labels: a few distinct labels per batch reach Beam,
    # not one label per document.
    labels = inputs[LABEL]
    _ = tft.vocabulary(labels, weights=tf.ones_like(labels, tf.float32),
                       vocab_filename=LABELS_VOCABULARY)
    known = tft.experimental.get_vocabulary_size_by_name(TOKENS_VOCABULARY)
    # The rest works on the ids' flat values and row splits: tf.Transform
    # traces this function five times a run, and the ragged reduce_sum and
    # boolean_mask this replaces made 194 of its 444 graph ops (0.17 ->
    # 0.10 s a trace; same values).
    flat, splits = ids.flat_values, ids.row_splits
    outputs = {
        OOV_TOKENS: _count_per_row(
            tf.logical_or(flat < 0, flat >= known), splits),
        NUM_TOKENS: tf.cast(splits[1:] - splits[:-1], tf.int64),
    }
    # 0 is padding: shift the ids, and drop unknown tokens when there is no
    # OOV bucket (their id would be -1).
    found = flat >= 0
    lengths = _count_per_row(found, splits)
    ids = tf.RaggedTensor.from_row_lengths(
        tf.gather(flat, tf.where(found)[:, 0]) + 1, lengths, validate=False)
    if tc.output == 'ids':
      outputs[LENGTH] = tf.minimum(lengths, tc.max_tokens)
      # A shape narrower than a row cuts the row to its first max_tokens.
      outputs[TOKEN_IDS] = ids.to_tensor(default_value=0,
                                         shape=[None, tc.max_tokens])
      return outputs
    sparse = ids.to_sparse()
    if tc.output == 'tfidf':
      size = (tc.vocab_size or 1 << 24) + tc.oov_buckets + 1
      term_ids, weights = tft.tfidf(sparse, size)
      outputs[TERM_IDS] = term_ids
      outputs[TERM_WEIGHTS] = weights
    else:
      counts = tf.sparse.bincount(ids, axis=-1)
      outputs[TERM_IDS] = tf.SparseTensor(
          counts.indices, counts.indices[:, 1], counts.dense_shape)
      outputs[TERM_WEIGHTS] = tf.SparseTensor(
          counts.indices, tf.cast(counts.values, tf.float32),
          counts.dense_shape)
    return outputs

  return preprocessing_fn


def analysis_record_batch(texts: List[str], labels: List[str]):
  """tf.Transform analysis input: one Arrow row per training document."""
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  n = len(texts)
  offsets = np.arange(n + 1, dtype=np.int32)

  def column(values):
    try:  # Arrow encodes the strings itself, five times faster
      data = pa.array(values, pa.string()).view(pa.binary())
    except UnicodeEncodeError:  # undecodable bytes kept as surrogates
      data = pa.array([v.encode('utf-8', 'surrogateescape') for v in values],
                      pa.binary())
    return pa.ListArray.from_arrays(offsets, data)

  return pa.RecordBatch.from_arrays([column(texts), column(labels)],
                                    [TEXT, LABEL])


def analysis_adapter_config():
  """How tf.Transform turns analysis_record_batch columns into tensors."""
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=import-outside-toplevel
  from tfx_bsl.public import tfxio  # pylint: disable=import-outside-toplevel
  rep = schema_pb2.TensorRepresentation
  scalar = schema_pb2.FixedShape()
  reps = {name: rep(dense_tensor=rep.DenseTensor(column_name=name,
                                                 shape=scalar))
          for name in (TEXT, LABEL)}
  schema = pa.schema([pa.field(TEXT, pa.list_(pa.binary())),
                      pa.field(LABEL, pa.list_(pa.binary()))])
  return tfxio.TensorAdapterConfig(schema, reps)


def transform_inputs(texts: List[str], labels: Optional[List[str]] = None):
  """The exported transform's inputs for a list of documents (the label
  input only feeds the label vocabulary; any value will do)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  text = tf.constant([t.encode('utf-8', 'surrogateescape') for t in texts],
                     tf.string)
  label = tf.constant([l.encode('utf-8') for l in labels], tf.string) if (
      labels is not None) else tf.fill(tf.shape(text), '')
  return {TEXT: text, LABEL: label}


def to_example_records(batch: dict, label_ids: dict, spec: dict,
                       weights: Optional[np.ndarray] = None) -> List[bytes]:
  """Serializes a transformed batch as deterministic tf.train.Examples."""
  from transforms.output import example_encoding  # pylint: disable=import-outside-toplevel
  labels = batch[LABEL_TEXT]
  columns = {
      LABEL: ('int64', np.array([label_ids[l] for l in labels], np.int64)),
      LABEL_TEXT: ('bytes', labels),
      ID: ('bytes', batch[ID]),
      NUM_TOKENS: ('int64', np.asarray(batch[NUM_TOKENS], np.int64)),
  }
  if TOKEN_IDS in spec:
    columns[TOKEN_IDS] = ('int64', np.asarray(batch[TOKEN_IDS], np.int64))
    columns[LENGTH] = ('int64', np.asarray(batch[LENGTH], np.int64))
  else:
    columns[TERM_IDS] = ('int64', batch[TERM_IDS])
    columns[TERM_WEIGHTS] = ('float32', batch[TERM_WEIGHTS])
  if TEXT in spec:
    columns[TEXT] = ('bytes', [t.encode('utf-8', 'surrogateescape')
                               for t in batch[TEXT]])
  if WEIGHT in spec:
    columns[WEIGHT] = ('float32', np.asarray(weights, np.float32))
  return example_encoding.encode(columns, len(labels))


def describe(batch: dict, split_names) -> List[tuple]:
  """Per split of a batch: (split, [tokens, oov tokens, length histogram])
  for the manifest's OOV rate and token-length distribution."""
  split = np.asarray(batch['split'])
  tokens = np.asarray(batch[NUM_TOKENS], np.int64)
  oov = np.asarray(batch[OOV_TOKENS], np.int64)
  out = []
  for s in np.unique(split).tolist():
    mask = split == s
    hist = np.bincount(np.minimum(tokens[mask], LENGTH_BINS),
                       minlength=LENGTH_BINS + 1)
    out.append((split_names[s], (int(tokens[mask].sum()),
                                 int(oov[mask].sum()), hist)))
  return out


def summarize(stats, max_tokens: int) -> Dict[str, dict]:
  """describe() outputs, summed per split -> the manifest's text stats."""
  sums: Dict[str, list] = {}
  for split, (tokens, oov, hist) in stats:
    if split not in sums:
      sums[split] = [0, 0, np.zeros(LENGTH_BINS + 1, np.int64)]
    sums[split][0] += tokens
    sums[split][1] += oov
    sums[split][2] += hist
  out = {}
  for split, (tokens, oov, hist) in sums.items():
    docs = int(hist.sum())
    cum = np.cumsum(hist)

    def pct(q, cum=cum, docs=docs):
      return int(np.searchsorted(cum, q * docs, side='left')) if docs else 0

    out[split] = {
        'documents': docs, 'tokens': tokens, 'oov_tokens': oov,
        'oov_rate': oov / tokens if tokens else 0.0,
        'truncated_documents': int(hist[max_tokens + 1:].sum()),
        'token_length': {
            'mean': tokens / docs if docs else 0.0, 'p50': pct(0.5),
            'p90': pct(0.9), 'p99': pct(0.99),
            'max': int(np.flatnonzero(hist).max()) if docs else 0,
            'capped_at': LENGTH_BINS},
    }
  return out
