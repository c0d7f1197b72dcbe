"""How often the pipeline's near-duplicate rule finds real quotations
written again, and how often it joins unrelated quotations of one file:
the measurement behind the default similarity for text.

    python benchmarks/text_near_duplicate_thresholds.py
        [--results PATH | --no-results]

Quotations (benchmarks/real_texts.py): the 14,531 fortune cookies of
Debian's fortunes packages, labelled by their file. Every quotation, and
every copy of it, gets the signature the pipeline gives it
(text/signatures.py: a 64-value MinHash of its word pairs). The copies are
those real collections hold:

  punctuation   every punctuation mark removed
  other marks   full stops made exclamation marks, commas semicolons
  capitals      in capitals
  spacing       the line breaks and indentation made single spaces
  one word      one word replaced by another word of the collection
  two words     two words replaced
  attribution   an attribution line ("-- Name") added, or removed where
                there is one
  cut           the last fifth of the words left out (reported, not aimed
                at)

A copy is found when the pipeline would find it: the two signatures meet
in one of the bands (core/near_duplicates.py) and their estimated
similarity (from a byte of each value, as the pipeline verifies) is at
least the rule's. For each similarity the table gives the share of copies
found per kind, and two error rates among quotations of one file: the
share of pairs found, and the share of quotations with at least one other
found. The collection holds true variants of its own (one joke told with
another ending, one quotation in two files), so some of those pairs are
real near-duplicates; the run prints the first pairs it finds at the
default for a look.

Takes about a minute on one core. A run rewrites its section of
benchmarks/RESULTS.md (--results PATH writes it; --no-results nothing).
"""

import argparse
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # pylint: disable=wrong-import-position
import real_texts  # pylint: disable=wrong-import-position

sys.path.insert(0, harness.REPO)
from transforms.core import near_duplicates  # pylint: disable=wrong-import-position,wrong-import-order
from transforms.modalities.text import signatures  # pylint: disable=wrong-import-position,wrong-import-order

SIMILARITIES = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
_ATTRIBUTION = re.compile(r'\n\s*--\s*[^\n]+$')


def _replace_words(rng, text, words, n):
  tokens = text.split(' ')
  for at in rng.choice(len(tokens), size=min(n, len(tokens)), replace=False):
    tokens[at] = str(rng.choice(words))
  return ' '.join(tokens)


def _attribution(rng, text, authors):
  if _ATTRIBUTION.search(text):
    return _ATTRIBUTION.sub('', text)
  return f'{text}\n\t\t-- {rng.choice(authors)}'


def variants(rng, text, words, authors):
  """{kind: the quotation written again}."""
  tokens = text.split()
  return {
      'punctuation': re.sub(r'[^\w\s]', '', text),
      'other marks': text.replace('.', '!').replace(',', ';'),
      'capitals': text.upper(),
      'spacing': ' '.join(tokens),
      'one word': _replace_words(rng, text, words, 1),
      'two words': _replace_words(rng, text, words, 2),
      'attribution': _attribution(rng, text, authors),
      'cut': ' '.join(tokens[:max(1, int(len(tokens) * 0.8))]),
  }


def _raw(sigs):
  return np.ascontiguousarray(sigs).view(np.uint8)


def measures(measure, sigs_a, sigs_b):
  """(estimated similarity, meet in a band) of pairs a[i], b[i]."""
  ra, rb = _raw(sigs_a), _raw(sigs_b)
  meet = (measure.keys(ra) == measure.keys(rb)).any(axis=1)
  ca, cb = measure.carried(ra), measure.carried(rb)
  agree = (ca == cb).mean(axis=1)
  chance = 1.0 / 256
  estimate = np.clip((agree - chance) / (1 - chance), 0, 1)
  return estimate, meet


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  t0 = time.time()
  quotes = real_texts.quotations()
  texts = [q.text for q in quotes]
  labels = [q.label for q in quotes]
  rng = np.random.default_rng(0)
  words = sorted({w for t in texts for w in t.split() if w.isalpha()})
  authors = sorted({m.group(0).split('--', 1)[1].strip() for t in texts
                    for m in [_ATTRIBUTION.search(t)] if m})
  measure = near_duplicates.measure_of(near_duplicates.document_rules())
  sigs = signatures.signatures(texts)
  made = [variants(rng, t, words, authors) for t in texts]
  kinds = list(made[0])
  copies = {k: measures(measure, sigs,
                        signatures.signatures([m[k] for m in made]))
            for k in kinds}
  ia, ib = harness.same_label_pairs(labels)
  negatives = measures(measure, sigs[ia], sigs[ib])
  seconds = time.time() - t0

  def found(m, t):
    estimate, meet = m
    return meet & (estimate >= t - 1e-9)

  head = ['similarity'] + kinds + ['pairs of one file found',
                                   'quotations with another found']
  lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for t in SIMILARITIES:
    hit = found(negatives, t)
    docs = len(set(ia[hit].tolist()) | set(ib[hit].tolist()))
    row = [f'{t:g}'] + [f'{found(copies[k], t).mean():.1%}' for k in kinds]
    row += [f'{hit.mean():.4%}', f'{docs / len(texts):.2%}']
    if t == near_duplicates.SIMILARITY:
      row = [f'**{c}**' for c in row]
    lines.append('| ' + ' | '.join(row) + ' |')
  counts = np.asarray([len(signatures.words(t)) for t in texts])
  medians = ', '.join(f'{k} {np.median(copies[k][0]):.2f}' for k in kinds)
  body = (
      f'{len(texts):,} quotations in {len(set(labels))} files (words per '
      f'quotation: median {int(np.median(counts))}, 90th percentile '
      f'{int(np.percentile(counts, 90))}), {len(ia):,} pairs of one file; '
      f'signatures as the pipeline computes them ({signatures.BINS} values). '
      f'A copy is found when it meets its original in one of the '
      f'{near_duplicates.BANDS} bands '
      f'and the estimated similarity is at least the one given; the default '
      f'is in bold.\n\n' + '\n'.join(lines) +
      f'\n\nMedian estimated similarity of each kind of copy: {medians}.\n')
  print(body)
  hit = np.flatnonzero(found(negatives, near_duplicates.SIMILARITY))
  for k in hit[:8].tolist():
    i, j = int(ia[k]), int(ib[k])
    print('---', labels[i], f'{negatives[0][k]:.2f}')
    print(texts[i][:160].replace('\n', ' '))
    print(texts[j][:160].replace('\n', ' '))
  print(f'({seconds:.0f} s)')
  harness.write_results(
      args, True, 'text_near_duplicate_thresholds',
      'Near-duplicate similarity for text (text_near_duplicate_thresholds.py)',
      info, body)
  return 0


if __name__ == '__main__':
  sys.exit(main())
