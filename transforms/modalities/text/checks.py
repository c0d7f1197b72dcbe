"""The text modality's side of reading a published dataset back.

The validation pipeline and the reader call these through the plug-in (see
transforms/modalities/base.py). Records hold token ids (padded to
max_tokens) or term ids with weights (bag-of-words, tf-idf); both are
checked against the vocabulary the manifest describes.
"""

import hashlib
from typing import Dict, List, Tuple

import numpy as np

from transforms.output import manifest as manifest_lib
from transforms.validation import dataset_checks as dataset_checks_lib
from transforms.validation import html_report
from transforms.validation import report as report_lib

# Ids are not quantities: their statistics are the OOV share and lengths.
_OWN_STATS = frozenset({'token_ids', 'term_ids', 'term_weights'})


# ------------------------------------------------------------ records --


def check_values(values: Dict[str, list], manifest: dict, out: dict,
                 stats) -> None:
  """Checks a record's ids against the vocabulary and adds its statistics.

  Sets out['exact']: unknown words share OOV ids, so equal ids are equal
  texts only when every token is in the vocabulary.

  Args:
    values: Feature name -> the record's values.
    manifest: The dataset's manifest.
    out: The record's summary, completed here.
    stats: The shard's FeatureStats, or None.

  Raises:
    ValueError: The ids are wrong; the message says how.
  """
  if 'token_ids' in values:
    _check_token_ids(values, manifest)
  else:
    _check_terms(values, manifest)
  out['exact'] = not has_oov(values, manifest)
  if 'text' in values:
    # The stored text, which validation signs as the pipeline signed it
    # (text/signatures.py), a shard's records at once.
    out['signature'] = values['text'][0].decode('utf-8', 'replace')
  if stats is not None:
    _add_stats(stats, values, manifest)


def _highest_id(manifest: dict) -> int:
  vocab = manifest['text']['vocabulary']
  return vocab['size'] + vocab['oov_buckets']


def _check_token_ids(values: Dict[str, list], manifest: dict) -> None:
  """Token ids are in range and padded after `length`."""
  vocab = manifest['text']['vocabulary']
  highest = _highest_id(manifest)
  tokens = values['num_tokens'][0]
  ids = np.asarray(values['token_ids'], np.int64)
  length = values['length'][0]
  if not 0 <= length <= min(len(ids), tokens):
    raise ValueError(f'length {length} is not between 0 and '
                     f'min(max_tokens, num_tokens {tokens})')
  if vocab['oov_buckets'] and length != min(len(ids), tokens):
    raise ValueError(f'length {length} should be min(max_tokens, '
                     f'num_tokens {tokens}) with OOV buckets')
  if ids[:length].min(initial=1) < 1 or ids[:length].max(
      initial=1) > highest:
    raise ValueError(f'token ids outside 1..{highest}')
  if ids[length:].any():
    raise ValueError(f'token ids after position {length} are not padding')


def _check_terms(values: Dict[str, list], manifest: dict) -> None:
  """Term ids are in range and unique; their weights are sound."""
  highest = _highest_id(manifest)
  term_ids = np.asarray(values['term_ids'], np.int64)
  weights = np.asarray(values['term_weights'], np.float32)
  if len(term_ids) != len(weights):
    raise ValueError(f'{len(term_ids)} term ids but {len(weights)} weights')
  if len(term_ids) and (term_ids.min() < 0 or term_ids.max() > highest):
    raise ValueError(f'term ids outside 0..{highest}')
  if len(set(term_ids.tolist())) != len(term_ids):
    raise ValueError('a term id appears twice')
  if not np.all(np.isfinite(weights)) or (weights < 0).any():
    raise ValueError('term weights must be finite and not negative')


def has_oov(values: Dict[str, list], manifest: dict) -> bool:
  """Whether a text record holds an out-of-vocabulary id."""
  first_oov = manifest['text']['vocabulary']['first_oov_id']
  if 'token_ids' in values:
    ids = values['token_ids'][:int(values['length'][0])]
  else:
    ids = values['term_ids']
  return any(i >= first_oov for i in ids)


def _add_stats(stats, values: Dict[str, list], manifest: dict) -> None:
  """The plain features, the OOV share and the token count histogram."""
  dataset_checks_lib.add_record_stats(stats, values, manifest, _OWN_STATS)
  first_oov = manifest['text']['vocabulary']['first_oov_id']
  if 'token_ids' in values:
    length = int(values['length'][0])
    ids = np.asarray(values['token_ids'][:length], np.int64)
  else:
    ids = np.asarray(values['term_ids'], np.int64)
  # OOV share of the record's tokens, as a per-record statistic.
  stats.add('oov_share', [float((ids >= first_oov).mean()) if ids.size
                          else 0.0])
  tokens = int(values['num_tokens'][0])
  stats.count_in_bin('num_tokens', tokens,
                     max(manifest['text']['max_tokens'], 1))


# ------------------------------------------------------------ dataset --


def compares_near_duplicates(manifest: dict) -> bool:
  """Whether the dataset's records keep their text (--keep_text), which
  validation compares as the pipeline did; token ids alone have lost
  punctuation, case and unknown words, and are not compared."""
  return bool((manifest.get('text') or {}).get('keep_text'))


# Documents signed at once (text/signatures.signatures works on batches).
_SIGNED_AT_ONCE = 4096


def sign_near_duplicates(near: list, manifest: dict) -> list:
  """A shard's near-duplicate entries with each document's text replaced
  by its signature (text/signatures.py), all of the shard's at once."""
  del manifest
  texts = [k for k, entry in enumerate(near) if isinstance(entry[4], str)]
  if not texts:
    return near
  from transforms.modalities.text import signatures  # pylint: disable=import-outside-toplevel
  near = list(near)
  for lo in range(0, len(texts), _SIGNED_AT_ONCE):
    chunk = texts[lo:lo + _SIGNED_AT_ONCE]
    signed = signatures.signatures([near[k][4] for k in chunk])
    for k, sig in zip(chunk, signed):
      ex_id, _, label, split, text = near[k]
      # A document is its text here: records of one token sequence may
      # hold different texts (unknown words share ids).
      near[k] = (ex_id, hashlib.sha256(text.encode(
          'utf-8', 'surrogatepass')).hexdigest()[:32], label, split,
                 sig.tobytes())
  return near


def dataset_checks(manifest: dict, by_split: Dict[str, List[dict]]
                   ) -> List[dict]:
  """Every input became an example or a dead letter.

  Args:
    manifest: The manifest.
    by_split: Split -> its shards' check_shard results (not used).

  Returns:
    The check entries, each {'check', 'status', 'detail'}.
  """
  del by_split
  return report_lib.examples_add_up(manifest)


# ------------------------------------------------------------- report --


def report_sample(info: dict, manifest: dict) -> dict:
  """A sample of the record `info` summarizes: its id."""
  del manifest
  return {'id': info['id']}


def html_sections(report: dict, manifest) -> str:
  """The report's histograms of tokens per text, one per split, with the
  mean share of unknown tokens."""
  top = (manifest or {}).get('text', {}).get('max_tokens')
  charts = []
  for split, s in report['splits'].items():
    hist = s.get('histograms', {}).get('num_tokens')
    if not hist:
      continue
    n = len(hist)
    if top:
      labels = [f'{int(i * top / n)}-{int((i + 1) * top / n) - 1}'
                for i in range(n)]
      labels[-1] = f'{int((n - 1) * top / n)}+'
    else:
      labels = [str(i) for i in range(n)]
    oov = s['statistics'].get('oov_share', {}).get('mean')
    title = (f'{split}: tokens per text' +
             (f' (mean OOV share {oov:.3f})' if oov is not None else ''))
    charts.append(html_report.bar_chart(title, labels, [('texts', hist)],
                                        width=420, bar_height=12))
  return ('<h2>Token counts</h2><p class="small">The last bin also holds '
          'texts longer than --max_tokens (they were cut).</p>'
          f'<div class="charts">{"".join(charts)}</div>' if charts else '')


# ------------------------------------------------------------- reading --


def check_transform(output: str, manifest: dict) -> dict:
  """Feeds the exported transform two probe documents.

  One holds a single token that is in no vocabulary: with unigrams it must
  count as one unknown token and get the first OOV id (or be dropped
  without OOV buckets), followed by padding. The other holds the
  vocabulary's first three single-word tokens: they must get ids 1, 2, 3
  (0 is padding) in that order, or be among the term ids for bag-of-words
  and tf-idf. The vocabulary file must have the manifest's size.

  Returns:
    {'ok': bool, 'detail': str}.
  """
  import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
  from transforms.modalities.text import preprocessing  # pylint: disable=import-outside-toplevel
  text = manifest['text']
  vocab = text['vocabulary']
  try:
    out = tft.TFTransformOutput(
        manifest_lib.transform_path(output, manifest))
    tokens = out.vocabulary_by_name(preprocessing.TOKENS_VOCABULARY)
    layer = out.transform_features_layer()
  except Exception as e:  # pylint: disable=broad-except
    return {'ok': False, 'detail': f'the transform does not load: '
                                   f'{type(e).__name__}: {e}'}
  if len(tokens) != vocab['size']:
    return {'ok': False, 'detail': f'the vocabulary file has {len(tokens)} '
                                   f'tokens, the manifest says '
                                   f'{vocab["size"]}'}
  unigrams = text['ngrams'][0] == 1
  known = [t.decode('utf-8') for t in tokens[:3]
           if b' ' not in t and (not text['lowercase'] or t.lower() == t)]
  known = known if unigrams and len(known) == min(3, len(tokens)) else []
  unknown = 'qq' + 'x' * 40 + 'notatoken'
  try:
    result = layer(preprocessing.transform_inputs([unknown, ' '.join(known)]))
  except Exception as e:  # pylint: disable=broad-except
    return {'ok': False, 'detail': f'the transform does not run: '
                                   f'{type(e).__name__}: {e}'}
  problems, detail = _probe_problems(result, text, known, unigrams)
  if problems:
    return {'ok': False, 'detail': '; '.join(problems)}
  return {'ok': True, 'detail': f'vocabulary of {len(tokens)} tokens; '
                                f'{detail}'}


def _probe_problems(result: dict, text: dict, known: List[str],
                    unigrams: bool) -> Tuple[List[str], str]:
  """(what is wrong with the transform's output for the two probes, what
  it gave them)."""
  from transforms.modalities.text import preprocessing  # pylint: disable=import-outside-toplevel
  problems = []
  oov = result[preprocessing.OOV_TOKENS].numpy().tolist()
  if oov[0] != (1 if unigrams else 0):
    problems.append(f'an unknown word counted {oov[0]} unknown tokens')
  expected = list(range(1, len(known) + 1))
  if text['output'] == 'ids':
    more, detail = _token_id_problems(result[preprocessing.TOKEN_IDS], text,
                                      known, expected, unigrams)
  else:
    more, detail = _term_problems(result[preprocessing.TERM_IDS],
                                  result[preprocessing.TERM_WEIGHTS], known,
                                  expected)
  return problems + more, detail


def _token_id_problems(token_ids, text: dict, known: List[str],
                       expected: List[int], unigrams: bool
                       ) -> Tuple[List[str], str]:
  """(what is wrong with the probes' token ids, what they got): the
  unknown word gets an OOV id and padding, the known words `expected`."""
  vocab = text['vocabulary']
  first_oov, buckets = vocab['size'] + 1, vocab['oov_buckets']
  ids = np.asarray(token_ids.numpy()).tolist()
  problems = []
  if len(ids[0]) != text['max_tokens']:
    problems.append(f'{len(ids[0])} ids per document, not '
                    f'{text["max_tokens"]}')
  if unigrams and buckets and not first_oov <= ids[0][0] < (
      first_oov + buckets):
    problems.append(f'the unknown word got id {ids[0][0]}, not an OOV id '
                    f'from {first_oov}')
  if any(ids[0][1 if unigrams and buckets else 0:]):
    problems.append('no padding after the unknown word')
  if ids[1][:len(known)] != expected:
    problems.append(f'{known} got ids {ids[1][:len(known)]}, not '
                    f'{expected}')
  return problems, f'unknown word -> {ids[0][:2]}, {known} -> {ids[1][:4]}'


def _term_problems(term_ids, term_weights, known: List[str],
                   expected: List[int]) -> Tuple[List[str], str]:
  """(what is wrong with the known words' term ids, what they got): the
  ids `expected` are among them."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  terms = tf.sparse.to_dense(term_ids).numpy()
  weights = tf.sparse.to_dense(term_weights).numpy()
  got = set(terms[1][weights[1] > 0].tolist())
  problems = []
  if not set(expected) <= got:
    problems.append(f'{known} did not give term ids {expected} ({sorted(got)})')
  return problems, f'{known} -> term ids {sorted(got)}'


def supervised_feature(manifest: dict):
  """The token ids, or for bag-of-words and tf-idf the term ids and
  weights (sparse) as a dict."""
  if 'token_ids' in manifest['feature_spec']:
    return 'token_ids'
  return _terms


def _terms(features: dict) -> dict:
  return {k: features[k] for k in ('term_ids', 'term_weights')}


def read_transform(output: str, manifest: dict):
  """None: token and term ids are stored transformed."""
  del output, manifest
  return None
