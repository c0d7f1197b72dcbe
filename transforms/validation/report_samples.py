"""A few example records per class, kept while validation reads a shard,
for the HTML report. What a sample holds is the modality's choice (its
`report_sample`): small JPEG thumbnails of images, the values of sensor
windows cut to a plottable size, or only the id.
"""

from typing import Dict, List

from transforms import modalities

# Per class, per shard and in the merged report.
PER_CLASS = 4
# Classes with samples in the report (the first by name).
MAX_CLASSES = 40
# Samples kept from one shard, whatever the number of classes, so that the
# shard results gathered for the report stay small with many shards.
MAX_PER_SHARD = 32


def keep(samples: Dict[str, List], info: dict, manifest: dict) -> None:
  """Adds the record described by `info` (check_record's result) to
  `samples` ({label: [sample]}) while its class has fewer than PER_CLASS.
  The sample is the modality's `report_sample` ({'id', ...})."""
  if sum(len(v) for v in samples.values()) >= MAX_PER_SHARD:
    return
  kept = samples.setdefault(info['label'], [])
  if len(kept) >= PER_CLASS:
    return
  kept.append(modalities.of_manifest(manifest).report_sample(info,
                                                             manifest))


def merge(parts) -> Dict[str, List]:
  """Merges per-shard samples, keeping PER_CLASS per class (by id order,
  so the result does not depend on the order shards were read in)."""
  out: Dict[str, List] = {}
  for part in parts:
    for label, items in part.items():
      out.setdefault(label, []).extend(items)
  return {label: sorted(items, key=lambda x: x['id'])[:PER_CLASS]
          for label, items in sorted(out.items())[:MAX_CLASSES]}
