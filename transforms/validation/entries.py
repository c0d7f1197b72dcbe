"""Check entries for the validation report, and the leakage checks of the
modalities whose content says which example a record is (images, texts).

Here, not in report.py, so that the modality base class can use them
without importing the report, which imports the modality registry.
"""

from typing import List


def entry(name: str, ok: bool, detail: str, problem: str = 'fail') -> dict:
  """A check entry: 'pass' when `ok`, else `problem` ('fail' or 'warn')."""
  return {'check': name, 'status': 'pass' if ok else problem,
          'detail': detail}


def listed_ids(leaks: List[dict], key: str = 'ids') -> str:
  """The ids of the first five findings, per split (or per label), for a
  check's detail."""
  return '; '.join(
      ' vs '.join(f'{group} {", ".join(ids)}' for group, ids in
                  leak[key].items()) for leak in leaks[:5])


def content_leakage(content: dict) -> List[dict]:
  """Leakage where the content says which example a record is (images,
  texts): a content in two splits fails; a text whose unknown words make
  its content uncertain warns.

  Args:
    content: dataset_checks.content_findings of all records.

  Returns:
    The check entries.
  """
  checks = [entry(
      'no example content in two splits (leakage)',
      not content['leaked_contents'],
      f'{content["leaked_contents"]} contents ({content["leaked_records"]} '
      'records) occur in more than one split, e.g. '
      f'{listed_ids(content["leaks"])}' if content['leaked_contents'] else
      'every content hash occurs in one split only')]
  if content.get('possible_leaks'):
    checks.append({
        'check': 'texts with unknown words in two splits (possible leakage)',
        'status': 'warn',
        'detail': f'{content["possible_leaks"]} token sequences with '
                  'out-of-vocabulary ids occur in more than one split; '
                  'unknown words share ids, so the texts may differ, e.g. '
                  f'{listed_ids(content["possible_leak_examples"])}'})
  return checks


def near_duplicate_leakage(near: dict) -> List[dict]:
  """Near-duplicate pictures (or documents) in two splits fail (naming
  pairs and their distances); near-duplicates with different labels warn.

  Args:
    near: dataset_checks.near_duplicate_findings of all records.
  """
  noun = near.get('kind', 'pictures')
  if noun == 'documents':
    def distance(p):
      return f'estimated similarity {p["similarity"]}'
    rule = f'word pairs estimated at least {near["similarity"]} similar'
  else:
    def distance(p):
      return (f'hash distance {p["hash_distance"]}, thumbnail distance '
              f'{p["thumb_distance"]}')
    rule = (f'pHash within {near["hash_distance"]} bits and thumbnail '
            f'within {near["thumb_distance"]}')
  pairs = '; '.join(
      f'{p["a"]} ({p["splits"][0]}) and {p["b"]} ({p["splits"][1]}): '
      f'{distance(p)}' for p in near['across'][:5])
  checks = [entry(
      f'no near-duplicate {noun} in two splits (leakage)',
      not near['pairs_across_splits'],
      f'{near["pairs_across_splits"]} pairs of near-duplicate {noun} '
      f'({rule}) are in different splits, e.g. {pairs}'
      if near['pairs_across_splits'] else
      f'{near["groups"]} near-duplicate groups ({near["members"]} records, '
      f'{rule}), each in one split')]
  conflicts = near['label_conflict_groups']
  checks.append(entry(
      f'near-duplicate {noun} with different labels', not conflicts,
      f'{conflicts} near-duplicate groups have more than one label, e.g. '
      f'{listed_ids(near["label_conflicts"], "labels")}' if conflicts else
      'every near-duplicate group has one label', problem='warn'))
  return checks
