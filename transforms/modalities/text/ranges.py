"""What the text reader's worker processes run: a byte range of a large
CSV or TSV file parsed and checked (parse.parse_csv_range), with the
content digest and split of each of its documents (and, for the
near-duplicate search, its signature), so that neither the parse nor the
content keys (tokens and a SHA-256 per document) run on the runner's
thread.

`batch_keys` is the one definition of a batch's digests and splits; the
reader calls it in-line for documents it reads itself.

A run reads its input two or three times (text/pipeline.py), and the
digests and splits of a range are the same each time. With a `keys_folder`
(inside a local run folder), the first pass that finds them keeps them
there, 17 bytes a document, in one file per range named by a hash of
everything they depend on (the file's path, size and modification time,
the range, the columns and the key rule); the later passes read them
back instead of computing them again. A missing or unreadable file is
computed again; the run removes the folder when its shards are written.
"""

import hashlib
import os
import tempfile
import zipfile
from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from transforms.core import bands
from transforms.core import splits as split_lib
from transforms.modalities.text import documents
from transforms.modalities.text import inputs
from transforms.modalities.text import parse
from transforms.modalities.text import preprocessing
from transforms.modalities.text import signatures as text_signatures


class KeyRule(NamedTuple):
  """How a document's content digest and split are found (from the run's
  config; picklable, for the worker processes)."""
  settings: preprocessing.TextConfig
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
                          Optional[Tuple[np.ndarray, np.ndarray,
                                         np.ndarray]]]:
  """(split index per document, content digests or None, what the
  near-duplicate search needs of their signatures or None). The splits
  are None when they are keyed by id and `ids` is None (a worker does not
  know the ids of its range's rows). Signing loads the compiled loops of
  text/signature_kernels.py, so the digests of documents being signed are
  found with them too.

  What the search needs of the signatures (text/signatures.py) is, per
  document: the byte of each value its verification reads
  (core/bands.carried, uint8 [n, BINS]), whether it has words
  (core/bands.usable) and its buckets in the bands (core/bands.py). A
  worker process sends these, not the signatures, whose other 192 bytes
  a document the runner would not read."""
  digests = (preprocessing.content_keys(texts, rule.settings, signatures_needed)
             if rule.by_content or digests_needed else None)
  signatures = None
  if signatures_needed:
    values = text_signatures.signatures(texts)
    signatures = (bands.carried(values), bands.usable(values),
                  text_signatures.band_keys(values))
  if rule.by_content:
    keys = [split_lib.content_split_key(d) for d in digests]
  elif ids is None:
    return None, digests, signatures
  else:
    keys = ids
  return (split_lib.hash_splits(keys, rule.ratios, rule.names), digests,
          signatures)


def read_range(path: str, fmt: str, columns: inputs.TextColumns,
               invalid_utf8: str, header: bytes, start: int, end: int,
               rule: KeyRule, digests_needed: bool,
               signatures_needed: bool = False,
               keys_folder: Optional[str] = None,
               texts_needed: bool = True
               ) -> Tuple[Optional[parse.TextRange], list]:
  """A range's documents (parse.parse_csv_range; None when the range did
  not end between records) and, per batch, batch_keys of its good
  documents (kept in and read back from `keys_folder`, see the module
  docstring). Without `texts_needed` the documents come back without
  their texts (TextBatch.text None): a pass that needs only their keys
  does not have them sent to it. Without `digests_needed` the digests
  come back None, even where the splits were found from them."""
  found = parse.parse_csv_range(path, fmt, columns, invalid_utf8, header,
                                start, end)
  if found is None:
    return None, []
  sizes = [len(docs.text) for docs, _ in found.batches]
  name = keys_folder and _kept_name(keys_folder, path, fmt, columns,
                                    invalid_utf8, header, start, end, rule)
  keys = (_read_kept(name, sizes, digests_needed)
          if name and not signatures_needed else None)
  if keys is None:
    keys = [batch_keys(docs.text, None, rule, digests_needed,
                       signatures_needed)
            if len(docs.text) else (None, None, None)
            for docs, _ in found.batches]
    if name and any(d is not None for _, d, _ in keys):
      _keep(name, keys, sizes)
    if not digests_needed:
      keys = [(split, None, signed) for split, _, signed in keys]
  if not texts_needed:
    found = found._replace(batches=[
        (documents.TextBatch(docs.ids, None, docs.label), bad)
        for docs, bad in found.batches])
  return found, keys


def _kept_name(folder, path, fmt, columns, invalid_utf8, header, start, end,
               rule) -> Optional[str]:
  """The file a range's keys are kept in: a hash of what they depend on."""
  try:
    stat = os.stat(path)
  except OSError:
    return None
  what = repr((os.path.abspath(path), stat.st_size, stat.st_mtime_ns, fmt,
               columns, invalid_utf8, header, start, end, rule))
  return os.path.join(folder, hashlib.sha256(
      what.encode('utf-8', 'surrogatepass')).hexdigest()[:40] + '.npz')


def _keep(name: str, keys: list, sizes: List[int]) -> None:
  """Writes the keys of a range's batches (splits, when found here, and
  digests) to `name`, whole or not at all; a failure only costs the later
  passes the work."""
  with_split = all(s is not None for (s, _, _), n in zip(keys, sizes) if n)
  split = (np.concatenate([s for (s, _, _), n in zip(keys, sizes) if n])
           .astype(np.int8) if with_split else np.zeros(0, np.int8))
  digests = np.frombuffer(bytes.fromhex(''.join(
      ''.join(d) for (_, d, _), n in zip(keys, sizes) if n)), np.uint8)
  try:
    os.makedirs(os.path.dirname(name), exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(name), suffix='.tmp')
    with os.fdopen(fd, 'wb') as f:
      np.savez(f, sizes=np.asarray(sizes, np.int64), split=split,
               digests=digests, with_split=np.asarray(with_split))
    os.replace(temp, name)
  except OSError:
    pass


def _read_kept(name: str, sizes: List[int], digests_needed: bool = True
               ) -> Optional[list]:
  """The kept keys of a range whose batches have `sizes` documents: per
  batch (split or None, digests (None without `digests_needed`), None),
  as batch_keys gave them (kept only when it found digests); None when
  there are none."""
  try:
    with np.load(name, allow_pickle=False) as kept:
      if kept['sizes'].tolist() != sizes:
        return None
      split = kept['split'] if bool(kept['with_split']) else None
      digests = kept['digests'].tobytes()
  except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
    return None
  total = sum(sizes)
  if len(digests) != 16 * total or (split is not None and len(split) != total):
    return None
  digests = digests.hex() if digests_needed else None
  out, at = [], 0
  for n in sizes:
    out.append((None if split is None else split[at:at + n],
                [digests[k:k + 32] for k in range(32 * at, 32 * (at + n), 32)]
                if digests_needed else None,
                None) if n else (None, None, None))
    at += n
  return out
