"""The command-line entry points (preprocess, validate, ...)."""

import os

# tf.Transform works with Keras 2 only: importing it sets
# TF_USE_LEGACY_KERAS=1 (tensorflow_transform/keras_lib.py) and imports the
# tf_keras package. By then TensorFlow has been imported without it, and
# TensorFlow's import has loaded Keras 3's optimizers as well (about 0.2 s
# of every run's start, for nothing). Set before TensorFlow is first
# imported, the variable makes TensorFlow load the Keras 2 that
# tf.Transform uses anyway. A value the user set is kept (tf.Transform
# warns about it, as before).
os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')
