"""The image modality: labelled image files -> resized, encoded images."""

from transforms.modalities.base import Modality


class ImageModality(Modality):
  """Folders of class folders, or a manifest file, of images."""

  name = 'image'
  default_dataset_name = 'images'
  input_help = 'a folder of class folders or a manifest file.'
  normalizations = ('zscore', 'scale', 'none')
  checks_module = 'transforms.modalities.image.checks'

  def add_arguments(self, add) -> None:
    from transforms.modalities.image import options  # pylint: disable=import-outside-toplevel
    options.add_arguments(add)

  def settings(self, options):
    from transforms.modalities.image import options as image_options  # pylint: disable=import-outside-toplevel
    return image_options.settings(options)

  def default_compression(self, settings) -> str:
    # Raw pixels compress; JPEG/PNG bytes and normalized floats hardly do.
    return 'gzip' if settings.storage in ('uint8', 'float32') else 'none'

  def default_workers(self, cpus: int) -> int:
    # Pillow releases the GIL while decoding: one thread per core.
    return cpus

  def check_input(self, cfg):
    from transforms.modalities.image import inputs  # pylint: disable=import-outside-toplevel
    return inputs.check_input(cfg.input, cfg.splits_from_input)

  def build(self, pipeline, cfg, run, staging, plan) -> None:
    from transforms.modalities.image import pipeline as image_pipeline  # pylint: disable=import-outside-toplevel
    image_pipeline.build(pipeline, cfg, run, staging, plan)

  def manifest_section(self, cfg, values, splits):
    from transforms.modalities.image import pipeline as image_pipeline  # pylint: disable=import-outside-toplevel
    return image_pipeline.manifest_section(cfg, values, splits)

  def statistics_analyzed(self, manifest: dict) -> int:
    return manifest['normalization'].get('images_analyzed', 0)


MODALITY = ImageModality()
