"""Document signatures for near-duplicates (text/signatures.py) and the
banding and verification of documents (core/near_duplicates.py)."""

import hashlib
import importlib
import logging

from numba.core import caching as numba_caching
import numpy as np
import pytest

from transforms.core import bands
from transforms.core import near_duplicate_pipeline
from transforms.core import near_duplicates
from transforms.modalities.text import signature_kernels
from transforms.modalities.text import signatures

WORDS = [f'w{i}' for i in range(3000)]


def _doc(rng, n):
  return ' '.join(rng.choice(WORDS, size=n))


def _pairs(words):
  if len(words) == 1:
    return {tuple(words)}
  return {(a, b) for a, b in zip(words, words[1:])}


def _jaccard(a: str, b: str) -> float:
  pa, pb = _pairs(signatures.words(a)), _pairs(signatures.words(b))
  return len(pa & pb) / len(pa | pb)


def test_case_punctuation_and_spacing_do_not_change_a_signature():
  same = ['Hope is the thing with feathers, that perches in the soul.',
          'HOPE IS THE THING WITH FEATHERS THAT PERCHES IN THE SOUL',
          'hope  is the\tthing with\nfeathers -- that perches in the soul!',
          '"Hope" is the thing with feathers; that perches in the soul...']
  sigs = signatures.signatures(same)
  assert (sigs == sigs[0]).all()
  # Unicode punctuation and capitals too.
  accents = signatures.signatures(['Ça va, MONDE\u00a0! \u00ab oui \u00bb',
                                   'ça va monde oui'])
  assert (accents[0] == accents[1]).all()
  other = signatures.signatures(['Hope is the thing without feathers'])[0]
  assert (other != sigs[0]).any()


def test_the_batch_finds_the_words_plain_python_finds():
  rng = np.random.default_rng(0)
  texts = ['', '   ', '!!!', 'one', 'A, b; C. d!', 'tab\there\nnew line',
           'nul\x00inside the text', 'caf\u00e9 na\u00efve \u2014 r\u00e9sum\u00e9',
           'x' * 300] + [_doc(rng, int(n)) for n in rng.integers(1, 40, 50)]
  hashes, counts = signatures._word_hashes(texts)  # pylint: disable=protected-access
  assert counts.tolist() == [len(signatures.words(t)) for t in texts]
  assert signatures.words('nul\x00inside') == [b'nul', b'inside']
  # Equal words hash equally, wherever they are; different ones do not.
  flat = [w for t in texts for w in signatures.words(t)]
  by_word = {}
  for word, h in zip(flat, hashes.tolist()):
    assert by_word.setdefault(word, h) == h
  assert len(set(by_word.values())) == len(by_word)


def test_a_signature_does_not_depend_on_its_batch():
  rng = np.random.default_rng(1)
  texts = [_doc(rng, int(n)) for n in rng.integers(1, 80, 2500)]
  together = signatures.signatures(texts)  # signed in chunks of 1,000
  for k in (0, 7, 999, 1000, 2499):
    assert (signatures.signatures([texts[k]])[0] == together[k]).all()
  assert (signatures.signatures(texts[50:1120]) == together[50:1120]).all()



def test_signatures_are_the_recorded_ones():
  """The signature is a fixed function: these documents' signatures were
  recorded (their SHA-256) when it was defined, and faster ways of
  computing it must give the same bytes, or groups found before would
  change."""
  rng = np.random.default_rng(7)
  words = ['the', 'Hope', "don't", 'caf\u00e9', 'x' * 25, '\u6570\u636e', 'a.b',
           '']
  seps = [' ', '  ', ', ', '\n', '\u00a0', '!', '\t']
  texts = [''.join(str(rng.choice(words)) + str(rng.choice(seps))
                   for _ in range(int(n))) for n in rng.integers(0, 90, 200)]
  texts += ['', 'one', 'nul\x00inside', '...']
  assert hashlib.sha256(signatures.signatures(texts).tobytes()).hexdigest() == (
      'c81cd15eec6f39455e81f5a70af60d47820513b02464a8082f8754301aba71d8')

def test_documents_without_words_are_never_candidates():
  sigs = signatures.signatures(['', '...', 'a b'])
  assert (sigs[:2] == signatures.EMPTY).all()
  measure = near_duplicates.measure_of(near_duplicates.document_rules())
  raw = np.ascontiguousarray(sigs).view(np.uint8)
  assert measure.usable(raw).tolist() == [False, False, True]


def test_the_estimate_follows_the_jaccard_similarity():
  rng = np.random.default_rng(2)
  errors = []
  for _ in range(1500):
    a = _doc(rng, int(rng.integers(5, 60))).split()
    b = list(a)
    for _ in range(int(rng.integers(0, len(a) // 2 + 1))):
      b[int(rng.integers(len(b)))] = str(rng.choice(WORDS))
    sa, sb = signatures.signatures([' '.join(a), ' '.join(b)])
    errors.append((sa == sb).mean() - _jaccard(' '.join(a), ' '.join(b)))
  errors = np.asarray(errors)
  # 64 values: the standard error of a share is at most 1/16.
  assert abs(errors.mean()) < 0.01
  assert errors.std() < 0.07


@pytest.mark.parametrize('similarity', [0.3, 0.5, 0.7, 0.9])
def test_bands_meet_as_often_as_the_formula_says(similarity):
  """Pairs of signatures agreeing on each value independently with
  probability `similarity` (as a MinHash does) meet in some band as often
  as text_candidate_probability says."""
  rng = np.random.default_rng(3)
  n = 4000
  a = rng.integers(0, 2**32, size=(n, signatures.BINS), dtype=np.uint64)
  b = rng.integers(0, 2**32, size=(n, signatures.BINS), dtype=np.uint64)
  agree = rng.random((n, signatures.BINS)) < similarity
  b[agree] = a[agree]
  measure = near_duplicates.measure_of(near_duplicates.document_rules())
  ka = measure.keys(a.astype(np.uint32).view(np.uint8))
  kb = measure.keys(b.astype(np.uint32).view(np.uint8))
  met = (ka == kb).any(axis=1).mean()
  expected = near_duplicates.text_candidate_probability(similarity)
  assert abs(met - expected) < 4 * np.sqrt(expected * (1 - expected) / n) + 0.005


def test_the_readers_band_keys_are_the_bandings():
  """The buckets the reading workers find in compiled loops
  (signatures.band_keys) are core/bands.keys, which the banding uses for
  signatures without them; both are those recorded when the bands were
  defined (random values, documents without words, zeros)."""
  rng = np.random.default_rng(11)
  sigs = rng.integers(0, 2**32, size=(300, signatures.BINS),
                      dtype=np.uint64).astype(np.uint32)
  sigs[::9] = signatures.EMPTY
  sigs[5] = 0
  compiled = signatures.band_keys(sigs)
  plain = near_duplicates.measure_of(near_duplicates.document_rules()).keys(
      np.ascontiguousarray(sigs).view(np.uint8))
  assert compiled.shape == (300, near_duplicates.BANDS)
  assert np.array_equal(compiled, plain)
  assert hashlib.sha256(compiled.astype('<u8').tobytes()).hexdigest() == (
      '836c5fa76a7a7a1f6446ba1e83109895929400b03a110a0a0ed8933e94f33770')
  texts = [_doc(rng, int(n)) for n in rng.integers(1, 90, size=200)]
  real = signatures.signatures(texts)
  assert np.array_equal(
      signatures.band_keys(real),
      near_duplicates.measure_of(near_duplicates.document_rules()).keys(
          np.ascontiguousarray(real).view(np.uint8)))


def test_verification_keeps_pairs_at_the_similarity_and_no_others():
  rng = np.random.default_rng(4)
  base = _doc(rng, 40).split()
  one_word = list(base)
  one_word[20] = 'changed'
  attributed = base + ['--', 'Mark', 'Twain']
  other = _doc(rng, 40)
  texts = [' '.join(base), ' '.join(one_word), ' '.join(attributed), other]
  sigs = [s.tobytes() for s in signatures.signatures(texts)]
  found = near_duplicates.verified_pairs(
      sigs, near_duplicates.document_rules(similarity=0.5))
  assert {(i, j) for i, j, _ in found} == {(0, 1), (0, 2), (1, 2)}
  for i, j, estimate in found:
    assert abs(estimate - _jaccard(texts[i], texts[j])) < 0.2
  # At 0.99 only the copy with an attribution added (similarity 39/42) may
  # still pass; the others differ in too many values.
  strict = near_duplicates.verified_pairs(
      sigs, near_duplicates.document_rules(similarity=0.99))
  assert {(i, j) for i, j, _ in strict} <= {(0, 2)}


def test_a_batch_of_carried_bytes_without_its_band_keys_is_refused():
  """The carried bytes of a signature cannot be banded again: a batch that
  sends only them must send its band keys too."""
  sigs = signatures.signatures(['one two three', 'four five six'])
  raw = np.ascontiguousarray(sigs).view(np.uint8)
  batch = near_duplicate_pipeline.NearBatch(
      ['a', 'b'], [f'{1:032x}', f'{2:032x}'], ['x', 'x'], ['train', 'train'],
      bands.carried(raw), None, bands.usable(raw))
  fn = near_duplicate_pipeline._BandFn(near_duplicates.document_rules())  # pylint: disable=protected-access
  fn.start_bundle()
  list(fn.process(batch))
  with pytest.raises(ValueError, match='needs its `keys`'):
    list(fn.finish_bundle())


@pytest.mark.parametrize('with_keys', ['none', 'all', 'some', 'compact'])
def test_gathering_documents_across_flushes_finds_what_comparing_all_finds(
    tmp_path, monkeypatch, with_keys):
  """400 documents, most of them variants of four boilerplate texts (so the
  bands' buckets are crowded), some exact copies of one content, banded in
  flushes of 32 entries through files in a folder: the gathered pairs are
  those comparing every two finds, and each content's Info counts all of
  its copies. Batches come with their band keys, without, or some with;
  or some as the text reader's workers send them (the carried bytes,
  usable rows and band keys, not the signatures) among others without
  keys."""
  # pylint: disable=import-outside-toplevel
  import itertools
  import apache_beam as beam
  from apache_beam.testing.test_pipeline import TestPipeline
  from apache_beam.testing.util import assert_that, equal_to
  # pylint: enable=import-outside-toplevel
  monkeypatch.setattr(near_duplicate_pipeline, '_FLUSH_ROWS', 32)
  monkeypatch.setattr(near_duplicate_pipeline, '_BLOCK', 16)
  rng = np.random.default_rng(5)
  plates = [_doc(rng, 30).split() for _ in range(4)]
  texts, digests = [], []
  for k in range(400):
    words = list(plates[k % 4])
    for _ in range(int(rng.integers(0, 12))):
      words[int(rng.integers(len(words)))] = str(rng.choice(WORDS))
    if k % 50 == 7:
      words = plates[0]  # an exact copy of the first plate, again and again
    if k % 97 == 3:
      words = ['...', '!' * k]  # no words: never a candidate
    texts.append(' '.join(words))
    digests.append(f'{hash(" ".join(words)) & (2**128 - 1):032x}'
                   if k % 50 != 7 else f'{7:032x}')
  sigs = signatures.signatures(texts)
  rules = near_duplicates.document_rules()
  batches = [near_duplicate_pipeline.NearBatch(
                 [f'd{k:03d}' for k in range(lo, lo + 20)],
                 digests[lo:lo + 20], ['x'] * 20, ['train'] * 20,
                 np.ascontiguousarray(sigs[lo:lo + 20]).view(np.uint8),
                 signatures.band_keys(sigs[lo:lo + 20])
                 if with_keys == 'all' or (
                     with_keys == 'some' and lo % 40) else None)
             for lo in range(0, 400, 20)]
  if with_keys == 'compact':
    batches = [b._replace(signatures=bands.carried(b.signatures),
                          keys=signatures.band_keys(sigs[lo:lo + 20]),
                          usable=bands.usable(b.signatures))
               if lo % 40 else b
               for lo, b in zip(range(0, 400, 20), batches)]
  measure = near_duplicates.measure_of(rules)
  carried = measure.carried(np.ascontiguousarray(sigs).view(np.uint8))
  keys = measure.keys(np.ascontiguousarray(sigs).view(np.uint8))
  expected = set()
  usable = measure.usable(np.ascontiguousarray(sigs).view(np.uint8))
  assert (~usable).sum() == 5
  for a, b in itertools.combinations(range(400), 2):
    if (digests[a] == digests[b] or not (keys[a] == keys[b]).any() or
        not usable[a] or not usable[b]):
      continue
    _, _, values = measure.check(carried, np.array([a]), np.array([b]))
    if len(values[0]):
      expected.add(tuple(sorted((digests[a], digests[b]))))
  assert len(expected) > 200
  copies = sum(1 for d in digests if d == f'{7:032x}')
  with TestPipeline() as p:
    gathered = (p | beam.Create(batches)
                | near_duplicate_pipeline.GatherNearDuplicates(
                    rules, str(tmp_path)))
    assert_that(gathered | beam.Map(lambda g: set(g[0])),
                equal_to([expected]), label='pairs')
    assert_that(gathered | beam.Map(
        lambda g: g[1].get(f'{7:032x}', {}).get('count')),
                equal_to([copies]), label='copies')
  assert list(tmp_path.glob('*.spill'))


def test_without_a_writable_cache_folder_the_loops_are_compiled_each_time(
    monkeypatch, caplog):
  """Numba keeps the compiled loops next to the module or in the user's
  cache folder; where it may write to neither, it refuses to cache. The
  loops are then compiled in the process, and sign as before."""
  texts = ['The quick brown fox', 'the quick, brown fox!', 'one', '',
           'caf\u00e9 na\u00efve \u2014 r\u00e9sum\u00e9'] * 3
  cached = signatures.signatures(texts)
  monkeypatch.setattr(numba_caching.CacheImpl, '_locator_classes', [])  # pylint: disable=protected-access
  try:
    with caplog.at_level(logging.INFO, signature_kernels.__name__):
      importlib.reload(signature_kernels)
    for name in ('word_hashes', 'signed'):
      kernel = getattr(signature_kernels, name)
      assert isinstance(kernel._cache, numba_caching.NullCache)  # pylint: disable=protected-access
    assert 'compiled in each process' in caplog.text
    assert (signatures.signatures(texts) == cached).all()
  finally:
    monkeypatch.undo()
    importlib.reload(signature_kernels)
