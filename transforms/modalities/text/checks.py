"""The text modality's side of reading a published dataset back.

The validation pipeline and the reader call these through the plug-in (see
transforms/modalities/base.py). Records hold token ids (padded to
max_tokens) or term ids with weights (bag-of-words, tf-idf); both are
checked against the vocabulary the manifest describes.
"""

from typing import Dict

import numpy as np

from transforms.validation import dataset_checks as quality_checks
from transforms.validation import html_report

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
  quality_checks.add_record_stats(stats, values, manifest, _OWN_STATS)
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
