"""The text modality's section of the manifest: the columns, the
tokenizer's settings, the vocabulary and each split's token statistics
(text has no normalization)."""

from transforms.modalities.text import preprocessing


def manifest_section(cfg, values, splits):
  """The manifest's text section and (no) normalization."""
  tc = cfg.settings
  per_split = preprocessing.summarize(values['text_stats'], tc.max_tokens)
  for name, split in splits.items():
    split['text'] = per_split.get(
        name, preprocessing.summarize([], tc.max_tokens))
  section = {
      'columns': {'text': tc.text_column, 'label': tc.label_column},
      'input_kind': values['input_kind'],
      'output': tc.output,
      'max_tokens': tc.max_tokens,
      'lowercase': tc.lowercase,
      'strip_punctuation': tc.strip_punctuation,
      'ngrams': list(tc.ngrams),
      'invalid_utf8': tc.invalid_utf8,
      'keep_text': tc.keep_text,
      'vocabulary': {
          'size': values['vocabulary_size'],
          'top_k': tc.vocab_size or None,
          'min_frequency': tc.min_frequency,
          'oov_buckets': tc.oov_buckets,
          # Ids: 0 padding, 1..size vocabulary, then the OOV buckets.
          'padding_id': 0,
          'first_oov_id': values['vocabulary_size'] + 1,
          'file': f'transform_fn/assets/{preprocessing.TOKENS_VOCABULARY}',
          'statistics_split': 'train',
      },
  }
  normalization = {'method': 'none', 'applied': 'stored',
                   'statistics_split': 'train'}
  return section, normalization
