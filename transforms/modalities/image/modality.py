"""The image modality: labelled image files -> resized, encoded images."""

from transforms.modalities.base import Modality


class ImageModality(Modality):
  """Folders of class folders, or a manifest file, of images."""

  name = 'image'
  config_section_always = True
  default_dataset_name = 'images'
  input_help = 'a folder of class folders or a manifest file.'
  normalizations = ('zscore', 'scale', 'none')
  checks_module = 'transforms.modalities.image.checks'
  content_keyed = True
  groups_near_duplicates = True
  data_noun = 'images'
  near_duplicate_flags = frozenset({'--near_duplicate_hash_distance',
                                   '--near_duplicate_thumb_distance'})
  identity_features = frozenset({'original_height', 'original_width'})
  # What its manifest_section reads (True: one value; False: a list).
  manifest_values = {'channel_stats': True, 'formats': True}

  def add_arguments(self, add) -> None:
    from transforms.modalities.image import options  # pylint: disable=import-outside-toplevel
    options.add_arguments(add)

  def settings(self, options):
    from transforms.modalities.image import options as image_options  # pylint: disable=import-outside-toplevel
    return image_options.settings(options)

  def near_duplicate_rules(self, mode, options):
    from transforms.modalities.image import options as image_options  # pylint: disable=import-outside-toplevel
    return image_options.near_duplicate_rules(mode, options)

  def near_duplicate_rules_of(self, given):
    from transforms.modalities.image import options as image_options  # pylint: disable=import-outside-toplevel
    return image_options.near_duplicate_rules_of(given)

  def input_is_table(self, path):
    from transforms.modalities.image import inputs  # pylint: disable=import-outside-toplevel
    return inputs.is_manifest(path)

  def default_compression(self, settings) -> str:
    # Raw pixels compress; JPEG/PNG bytes and normalized floats hardly do.
    return 'gzip' if settings.storage in ('uint8', 'float32') else 'none'

  def default_workers(self, cpus: int, cfg) -> int:
    # With worker processes decoding (--local_processes), one runner thread
    # feeds them and writes what they return, without the data plane
    # between threads (10,000 images: 38 s against 39-47 s with two
    # threads). Decoding in-line, one thread per core: the decoders release
    # the GIL.
    return 1 if cfg.local_processes > 0 else cpus

  def check_input(self, cfg):
    from transforms.modalities.image import inputs  # pylint: disable=import-outside-toplevel
    return inputs.check_input(cfg.input, cfg.splits_from_input,
                              cfg.settings.nested_folders)

  def worker_modules(self, cfg, plan):
    # Every run decodes its images in the local worker processes, when it
    # has them.
    del plan
    from transforms.modalities.image import decode  # pylint: disable=import-outside-toplevel
    return decode.WORKER_MODULES if cfg.local_processes > 0 else ()

  def head_start(self, cfg, plan):
    from transforms.modalities.image import decode  # pylint: disable=import-outside-toplevel
    from transforms.modalities.image import pipeline  # pylint: disable=import-outside-toplevel
    # The images of a local folder, when the first pass decodes them (the
    # two-pass path's first pass only identifies contents).
    if plan is None and not pipeline.contents_pass(cfg):
      decode.start_head(cfg)

  def progress(self, cfg, plan):
    from transforms.modalities.image import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.progress_measure(cfg)

  def read_inputs(self, cfg, plan):
    from transforms.modalities.image import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.ReadImages(cfg, plan)

  def analysis(self, cfg, plan):
    from transforms.modalities.image import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.analysis_metadata(cfg), pipeline.preprocessing_fn(cfg)

  def build_records(self, cfg, plan, staging, transform):
    from transforms.modalities.image import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.BuildImageRecords(cfg, plan, staging, transform)

  def feature_spec(self, cfg, plan) -> dict:
    from transforms.modalities.image import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.feature_spec(cfg)

  def manifest_section(self, cfg, values, splits):
    from transforms.modalities.image import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.manifest_section(cfg, values, splits)

  def tfds_feature(self, key, entry, manifest):
    if key != 'image' or entry['dtype'] != 'string':
      return None
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    image = manifest['image']
    hwc = (image['height'], image['width'], image['channels'])
    if image['storage'] in ('jpeg', 'png'):
      return tfds.features.Image(shape=hwc, encoding_format=image['storage'])
    # uint8: the raw pixels as bytes
    return tfds.features.Tensor(shape=hwc, dtype=np.uint8,
                                encoding=tfds.features.Encoding.BYTES)

  def tfds_input_features(self, manifest):
    return 'image'

  def statistics_analyzed(self, manifest: dict) -> int:
    return manifest['normalization'].get('images_analyzed', 0)


MODALITY = ImageModality()
