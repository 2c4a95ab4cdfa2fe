"""Sparse autoencoders in Python (docs/sae.md): a loaded SAELens folder with encode/decode on
NumPy arrays, its training-time feature densities, and its description (a dict)."""
import json

import numpy as np

from . import _sonde


class SAE(dict):
    """A SAELens SAE or transcoder (sonde.load_sae, Model.attach_sae). As a dict: its description
    (folder, architecture, hook_name, d_in, d_sae, d_out, weights_sha256, k for TopK; once attached
    also hook, the canonical hook, and splice, error_term). `sparsity`: SAELens's log10 feature
    densities (float32 [d_sae]) from sparsity.safetensors, or None when the folder has none."""

    def __init__(self, handle, info):
        super().__init__(info)
        self._handle = handle

    @property
    def sparsity(self):
        return self._handle.sparsity

    def _rows(self, x, width, what):
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim == 0 or x.shape[-1] != width:
            raise _sonde.BadInput(f"sae.{what}: the last dimension must be {width}, got shape {x.shape}")
        return x.reshape(-1, width), x.shape[:-1]

    def encode(self, x):
        """hook_sae_acts_post of rows x [..., d_in] (float32 [..., d_sae]), by the graph's formulas."""
        rows, lead = self._rows(x, self["d_in"], "encode")
        return self._handle.encode(rows).reshape(*lead, self["d_sae"])

    def decode(self, f):
        """hook_sae_recons of feature activations f [..., d_sae]: f W_dec + b_dec (float32 [..., d_out];
        under constant_norm_rescale, before the input's norm is put back, as hook_sae_recons)."""
        rows, lead = self._rows(f, self["d_sae"], "decode")
        return self._handle.decode(rows).reshape(*lead, self["d_out"])


def load_sae(path):
    """Reads a SAELens folder (cfg.json, sae_weights.safetensors, sparsity.safetensors when present)
    without a model: an SAE. Raises sonde.BadInput for a bad folder."""
    handle = _sonde.Sae(str(path))
    return SAE(handle, json.loads(handle.describe()))
