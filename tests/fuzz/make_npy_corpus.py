#!/usr/bin/env python3
"""Writes the seed corpus of npy_file_fuzzer into corpus/npy_file/: small valid .npy files of
every kind the reader accepts (float32 and float16, format versions 1.0, 2.0 and 3.0, a scalar,
an empty array, several ranks), from which libFuzzer mutates. Needs numpy."""
import io
import pathlib

import numpy as np
from numpy.lib import format as npy_format

corpus = pathlib.Path(__file__).resolve().parent / "corpus" / "npy_file"
corpus.mkdir(parents=True, exist_ok=True)
values = np.arange(24, dtype=np.float32) / 7 - 1

arrays = {
    "f4_2x3.npy": values[:6].reshape(2, 3),
    "f2_5.npy": values[:5].astype(np.float16),
    "f4_scalar.npy": np.float32(1.5).reshape(()),
    "f4_empty_0x4.npy": np.zeros((0, 4), dtype=np.float32),
    "f4_2x3x4.npy": values.reshape(2, 3, 4),
    "f2_1x2x3x2.npy": values[:12].reshape(1, 2, 3, 2).astype(np.float16),
}
for name, array in arrays.items():
    np.save(corpus / name, array)

# Versions 2.0 (32-bit header length) and 3.0 (UTF-8 header), which np.save writes only for
# headers too long for 1.0.
for version in ((2, 0), (3, 0)):
    buffer = io.BytesIO()
    npy_format.write_array(buffer, values[:4].reshape(2, 2), version=version)
    (corpus / f"f4_2x2_v{version[0]}.npy").write_bytes(buffer.getvalue())
