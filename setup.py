"""Packaging for the TFRecord preprocessing pipelines.

The same file is what Beam ships to remote workers: pass it as
``--setup_file ./setup.py`` when submitting to Dataflow or a portable runner.
Only what the workers need at run time is in ``install_requires``; test tools
are in the ``test`` extra.
"""

import setuptools

setuptools.setup(
    name='tfrecord-pipelines',
    version='0.1.0',
    description=('Apache Beam pipelines that turn labelled images, documents '
                 'and sensor rows into sharded, validated TFRecord '
                 'datasets.'),
    python_requires='>=3.10,<3.13',
    packages=setuptools.find_packages(include=['pipelines', 'pipelines.*',
                                               'transforms', 'transforms.*']),
    install_requires=[
        'apache-beam[gcp]>=2.77,<2.78',
        'tensorflow>=2.21,<2.22',
        'tensorflow-transform>=1.21,<1.22',
        'pillow>=11,<14',
        'simplejpeg>=1.7,<2',
        # Image resizes: antialiased shrinking (INTER_AREA), GIL released.
        'opencv-python-headless>=4.8,<6',
        'google-crc32c>=1.5',
        # 2.0 for bitwise_count (near-duplicate hash distances).
        'numpy>=2.0',
        # The compiled loops of text near-duplicate signatures
        # (transforms/modalities/text/signature_kernels.py).
        'numba>=0.68',
        # Used directly (they also come with Beam and tf.Transform): Arrow
        # for reading tables and feeding tf.Transform, pandas for ISO-8601
        # timestamps, tfx-bsl's TFXIO tensor representations
        # (tensorflow-metadata).
        'pyarrow>=14',
        'pandas>=2.0',
        'tfx-bsl>=1.21,<1.22',
        'tensorflow-metadata>=1.21,<1.22',
        # dataset_info.json / features.json for TFDS readers, written by
        # FinalizeDataset (transforms/output/tfds_metadata.py uses TFDS's own
        # classes, some from tensorflow_datasets.core).
        'tensorflow-datasets>=4.9.10,<4.10',
        # Beam packages this project for remote workers (Dataflow, Flink,
        # Spark: --setup_file) with `python -m build --no-isolation`;
        # without it Beam prints "No module named build" and falls back to
        # the deprecated `setup.py sdist`.
        'build>=1.2',
        # The --progress bar on a terminal (pipelines/progress.py).
        'tqdm>=4.66,<5',
    ],
    extras_require={
        # Inputs on s3:// (Beam's S3 file system, boto3); see
        # docs/object-stores.md for why outputs cannot be there.
        'aws': ['apache-beam[aws]>=2.77,<2.78'],
        # tfrecord: tests/output/test_index_files.py reads the shards with
        # the tfrecord package's reader through their index files.
        # moto[server]: the S3 server tests/stores runs on loopback (with
        # Beam's S3 file system). Not torch: PyPI's Linux build of it pulls
        # gigabytes of CUDA libraries. (The GCS server of tests/stores is
        # built from the Go module proxy by scripts/fake_gcs_server.sh.)
        # imagehash: the pHash near-duplicate pictures are found by is its
        # pHash, computed with OpenCV's DCT; the tests compare the bits.
        # psutil: the benchmarks' process-tree memory and machine load.
        # pytest-xdist: run_tests.sh runs the suite in two processes. Its
        # groups (--dist loadgroup) rename the tests, which pytest 9.2's
        # test ids no longer allow (tests/conftest.py checks it).
        'test': ['pytest>=8,<9.1', 'pytest-xdist>=3.5,<4', 'tfrecord>=1.14',
                 'moto[server]>=5.1,<6', 'apache-beam[aws]>=2.77,<2.78',
                 'imagehash>=4.3,<5', 'psutil>=5.9,<8'],
    },
    entry_points={
        'console_scripts': [
            'tfrecord-preprocess=pipelines.commands:preprocess',
            'tfrecord-validate=pipelines.commands:validate',
        ],
    },
)
