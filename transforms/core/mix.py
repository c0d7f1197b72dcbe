"""MurmurHash3's 64-bit finalizer on NumPy arrays: the mix of the
near-duplicate band keys (core/bands.py), and, compiled for one value by
Numba, of text signatures' word hashes and band keys
(text/signature_kernels.py).
"""

import numpy as np


def fmix64(x: np.ndarray) -> np.ndarray:
  """MurmurHash3's 64-bit finalizer (uint64 in, uint64 out)."""
  x = x ^ (x >> np.uint64(33))
  x = x * np.uint64(0xFF51AFD7ED558CCD)
  x = x ^ (x >> np.uint64(33))
  x = x * np.uint64(0xC4CEB9FE1A85EC53)
  return x ^ (x >> np.uint64(33))
