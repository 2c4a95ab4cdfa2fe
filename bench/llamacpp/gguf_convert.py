#!/usr/bin/python3
"""A sonde `make-model --arch qwen2` checkpoint (or any plain Qwen2 directory in Hugging Face layout)
to GGUF, with llama.cpp's own gguf-py (PYTHONPATH=<llama.cpp>/gguf-py). No torch, no transformers:
model.safetensors, config.json and tokenizer.json are read directly.

- Matrices (2-D) are copied bit-exactly in their stored dtype: BF16 stays BF16, F16 F16, F32 F32.
- Vectors (norms, biases) are widened exactly to F32, as llama.cpp's convert_hf_to_gguf.py does.
- The tokenizer is written as gpt2 / pre "qwen2", padded with [PADn] (UNUSED) tokens up to the
  embedding's rows; merges and special ids through gguf.SpecialVocab.
- Tied embeddings write no output.weight (llama.cpp then uses token_embd for the LM head).

usage: gguf_convert.py MODEL_DIR OUT.gguf            write it, then verify it
       gguf_convert.py --verify MODEL_DIR OUT.gguf   read OUT.gguf back and compare every tensor
                                                     with the safetensors byte for byte (exit 1 if any differs)
"""
from __future__ import annotations

import json
import struct
import sys
import types
from pathlib import Path

import numpy as np


def import_gguf():
    """gguf-py of some llama.cpp versions imports sentencepiece at module level although nothing
    here uses it; Debian's python3 may not have it, so stand in for it when it is absent."""
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        stub = types.ModuleType("sentencepiece")

        class SentencePieceProcessor:  # never used by this converter
            def __init__(self, *a, **k):
                raise RuntimeError("sentencepiece is not installed")

        stub.SentencePieceProcessor = SentencePieceProcessor
        sys.modules["sentencepiece"] = stub
    import gguf
    return gguf


# safetensors dtype -> numpy view of its bytes
ST_NUMPY = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}


def read_safetensors(path: Path) -> dict[str, tuple[str, list[int], np.ndarray]]:
    """name -> (dtype, shape, array viewing the file's bytes, no copy)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"],
                     data[begin:end].view(ST_NUMPY[info["dtype"]]).reshape(info["shape"]))
    return out


def widen(dtype: str, a: np.ndarray) -> np.ndarray:
    """A stored tensor as float32, exactly (bf16 is the top half of an f32)."""
    if dtype == "BF16":
        return (np.asarray(a).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(a, dtype=np.float32)


LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}


def gguf_name(hf: str) -> str:
    if hf in TOP_NAMES:
        return TOP_NAMES[hf]
    parts = hf.split(".")
    if parts[:2] != ["model", "layers"] or ".".join(parts[3:]) not in LAYER_NAMES:
        raise SystemExit(f"gguf_convert: no GGUF name for tensor {hf}")
    return f"blk.{parts[2]}.{LAYER_NAMES['.'.join(parts[3:])]}"


def written(name: str, cfg: dict) -> bool:
    return not (name == "lm_head.weight" and cfg.get("tie_word_embeddings"))


def token_table(gguf, tok: dict, n_vocab: int) -> tuple[list[str], list]:
    """Token strings and GGUF token types for ids 0..n_vocab-1 from a tokenizer.json: added tokens
    (special ones as CONTROL), the BPE vocabulary, and "[PADi]" (UNUSED) for the embedding rows
    past the tokenizer's ids."""
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    names, kinds = [], []
    for i in range(n_vocab):
        if i in added:
            names.append(added[i]["content"])
            kinds.append(gguf.TokenType.CONTROL if added[i].get("special") else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            names.append(by_id[i])
            kinds.append(gguf.TokenType.NORMAL)
        else:
            names.append(f"[PAD{i}]")
            kinds.append(gguf.TokenType.UNUSED)
    return names, kinds


def convert(src: Path, out: Path) -> None:
    gguf = import_gguf()
    cfg = json.loads((src / "config.json").read_text())
    if cfg.get("model_type") not in (None, "qwen2"):
        raise SystemExit(f"gguf_convert: {src} is a {cfg.get('model_type')} checkpoint; only qwen2 is converted")
    tensors = read_safetensors(src / "model.safetensors")
    emb_dtype, emb_shape, _ = tensors["model.embed_tokens.weight"]
    n_vocab = emb_shape[0]
    file_type = {"BF16": gguf.LlamaFileType.MOSTLY_BF16, "F16": gguf.LlamaFileType.MOSTLY_F16,
                 "F32": gguf.LlamaFileType.ALL_F32}[emb_dtype]

    w = gguf.GGUFWriter(out, "qwen2")
    w.add_name(src.name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_file_type(file_type)

    tok = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    names, kinds = token_table(gguf, tok, n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(names)
    w.add_token_types(kinds)
    gguf.SpecialVocab(src, load_merges=True, n_vocab=len(names)).add_to_gguf(w, quiet=True)

    matrices = vectors = 0
    for name, (dtype, shape, arr) in tensors.items():
        if not written(name, cfg):
            continue
        if len(shape) == 1:
            w.add_tensor(gguf_name(name), np.ascontiguousarray(widen(dtype, arr)))
            vectors += 1
        else:
            raw = gguf.GGMLQuantizationType.BF16 if dtype == "BF16" else None
            w.add_tensor(gguf_name(name), np.ascontiguousarray(arr), raw_dtype=raw)
            matrices += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    pads = sum(k == gguf.TokenType.UNUSED for k in kinds)
    print(f"wrote {out}: {matrices} matrices ({emb_dtype}, bit-exact), {vectors} vectors (F32), "
          f"{len(names)} tokens ({pads} padding)")


def verify(src: Path, out: Path) -> bool:
    gguf = import_gguf()
    cfg = json.loads((src / "config.json").read_text())
    tensors = read_safetensors(src / "model.safetensors")
    got = {t.name: t for t in gguf.GGUFReader(out).tensors}
    want_names = {gguf_name(n) for n in tensors if written(n, cfg)}
    bad = sorted(set(got) ^ want_names)  # missing on either side
    compared = 0
    for name, (dtype, shape, arr) in tensors.items():
        g = got.get(gguf_name(name))
        if not written(name, cfg) or g is None:
            continue
        if len(shape) == 1:
            ok = (g.tensor_type == gguf.GGMLQuantizationType.F32
                  and np.asarray(g.data).reshape(-1).tobytes() == widen(dtype, arr).tobytes())
        else:
            want_type = {"BF16": gguf.GGMLQuantizationType.BF16, "F16": gguf.GGMLQuantizationType.F16,
                         "F32": gguf.GGMLQuantizationType.F32}[dtype]
            ok = (g.tensor_type == want_type and list(g.shape) == shape[::-1]
                  and np.asarray(g.data).tobytes() == np.asarray(arr).tobytes())
        compared += 1
        if not ok:
            bad.append(name)
    tied = " (lm_head tied: no output.weight)" if cfg.get("tie_word_embeddings") else ""
    print(f"verify: {compared} tensors compared byte for byte with {src / 'model.safetensors'}{tied}: "
          + ("all equal" if not bad else f"{len(bad)} differ or are missing: {bad[:5]}"))
    return not bad


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--verify" and len(args) == 3:
        sys.exit(0 if verify(Path(args[1]), Path(args[2])) else 1)
    if len(args) != 2:
        raise SystemExit(__doc__)
    convert(Path(args[0]), Path(args[1]))
    sys.exit(0 if verify(Path(args[0]), Path(args[1])) else 1)


if __name__ == "__main__":
    main()
