"""sonde: run Qwen2.5 and Dream checkpoints on sonde's engine and read their activations.

    import sonde
    model = sonde.Model("models/small")
    logits, cache = model.run_with_cache("def add(a, b):", hooks="blocks.*.hook_resid_post")
    out = model.generate(["Hello"], max_new_tokens=8)
    h = model.submit("Hello", max_new_tokens=8)    # runs beside other submitted requests
    print(h.result().text)

See docs/python.md for every call.
"""

from ._sonde import BadInput, Error, HookError, RuntimeFailure
from ._model import Cache, Finished, Generation, HookPoint, Model, Step, Token, Tokenizer, ROW_KINDS
from ._batch import batch
from ._submit import Completion, Handle
from ._dump import Dump, SparseRows, open_dump
from ._report import report
from ._sae import SAE, load_sae

__all__ = ["Model", "Tokenizer", "Cache", "Generation", "Handle", "Completion", "HookPoint", "Token", "Step", "Finished", "ROW_KINDS",
           "Error", "BadInput", "RuntimeFailure", "HookError", "bf16_to_f32", "batch", "open_dump", "Dump", "SparseRows",
           "report", "SAE", "load_sae"]


def bf16_to_f32(bits):
    """Widens bf16 bits (a uint16 array, storage="bf16") to float32, exactly."""
    import numpy as np
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
