"""What the text reader's worker processes run: a byte range of a large
CSV or TSV file parsed and checked (inputs.parse_csv_range), with the
content digest and split of each of its documents (and, for the
near-duplicate search, its signature), so that neither the parse nor the
content keys (tokens and a SHA-256 per document) run on the runner's
thread.

`batch_keys` is the one definition of a batch's digests and splits; the
reader calls it in-line for documents it reads itself.
"""

from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from transforms.core import splits as split_lib
from transforms.modalities.text import inputs as text_io
from transforms.modalities.text import preprocessing as tt
from transforms.modalities.text import signatures as text_signatures


class KeyRule(NamedTuple):
  """How a document's content digest and split are found (from the run's
  config; picklable, for the worker processes)."""
  settings: tt.TextConfig
  by_content: bool  # splits keyed by content (else by document id)
  ratios: Tuple[Tuple[str, float], ...]
  names: Tuple[str, ...]


def key_rule(cfg) -> KeyRule:
  return KeyRule(cfg.settings, cfg.contents.split_key == 'content',
                 tuple(tuple(r) for r in cfg.split_ratios),
                 tuple(cfg.split_names))


def batch_keys(texts: Sequence[str], ids: Sequence[str], rule: KeyRule,
               digests_needed: bool, signatures_needed: bool = False
               ) -> Tuple[Optional[np.ndarray], Optional[List[str]],
                          Optional[np.ndarray]]:
  """(split index per document, content digests or None, near-duplicate
  signatures (text/signatures.py) or None). The splits are None when they
  are keyed by id and `ids` is None (a worker does not know the ids of its
  range's rows)."""
  digests = (tt.content_keys(texts, rule.settings)
             if rule.by_content or digests_needed else None)
  signatures = (text_signatures.signatures(texts) if signatures_needed
                else None)
  if rule.by_content:
    keys = [split_lib.content_split_key(d) for d in digests]
  elif ids is None:
    return None, digests, signatures
  else:
    keys = ids
  return (split_lib.hash_splits(keys, rule.ratios, rule.names), digests,
          signatures)


def read_range(path: str, fmt: str, columns: text_io.TextColumns,
               invalid_utf8: str, header: bytes, start: int, end: int,
               rule: KeyRule, digests_needed: bool,
               signatures_needed: bool = False
               ) -> Tuple[Optional[text_io.TextRange], list]:
  """A range's documents (inputs.parse_csv_range; None when the range did
  not end between records) and, per batch, batch_keys of its good
  documents."""
  found = text_io.parse_csv_range(path, fmt, columns, invalid_utf8, header,
                                  start, end)
  if found is None:
    return None, []
  return found, [batch_keys(docs.text, None, rule, digests_needed,
                            signatures_needed)
                 if len(docs.text) else (None, None, None)
                 for docs, _ in found.batches]
