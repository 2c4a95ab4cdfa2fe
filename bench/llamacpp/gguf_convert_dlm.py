#!/usr/bin/python3
"""A sonde `make-model --arch dream|llada` checkpoint (Hugging Face layout: config.json,
model.safetensors, tokenizer.json, tokenizer_config.json) to a GGUF that llama.cpp's
`llama-diffusion-cli` runs, with llama.cpp's own gguf-py (PYTHONPATH=<llama.cpp>/gguf-py).
No torch, no transformers. The Qwen2 converter beside it (gguf_convert.py) supplies the
safetensors reader and the exact widening; this file adds the two diffusion architectures.

What each architecture needs in the GGUF (facts read from llama.cpp's src/llama-model.cpp and
the metadata its own converter writes for DreamModel and LLaDAModelLM):
- Dream: arch "dream", Qwen2's hyper-parameters and tensor names (q/k/v biases), causal
  attention off, the mask token; logits are shifted by one (llama.cpp's default for a GGUF without
  `diffusion.shift_logits`). RoPE is NEOX (rotate-half), as Hugging Face stores it: no permutation.
- LLaDA: arch "llada", OLMo config names (d_model, n_layers, n_heads, n_kv_heads, mlp_hidden_size,
  max_sequence_length), `rope.dimension_count` = head dim, `vocab_size`, causal attention off,
  `diffusion.shift_logits` false. llama.cpp runs LLaDA with NORM RoPE (rotation of adjacent pairs),
  while the checkpoint's q_proj / k_proj rows are in rotate-half order, so every head's rows are
  reordered: new row 2i = old row i, new row 2i + 1 = old row i + d/2 (d the head dim). That is
  the same rotation applied to the same pairs; only the storage order of the rows changes.
- Both: a gpt2 BPE vocabulary with pre-tokenizer "qwen2" (sonde's synthetic tokenizers use Qwen2's
  split regex; another regex is refused), padded with [PADn] tokens to the embedding's rows; BOS as
  tokenizer_config.json's add_bos_token says (false for sonde's Dream and LLaDA checkpoints), and
  a pass-through chat template. llama-diffusion-cli always renders the prompt with a chat template
  (the GGUF's, else ChatML) and has no switch to turn that off; the pass-through one makes it
  tokenize the prompt as given, as `sonde generate` does.

Matrices are copied bit-exactly in their stored dtype (BF16 stays BF16, F32 F32; LLaDA's q/k rows
only reordered); vectors are widened exactly to F32.

usage: gguf_convert_dlm.py MODEL_DIR OUT.gguf          write it, then --check it
       gguf_convert_dlm.py --write MODEL_DIR OUT.gguf  write it only (the 7-8B shapes: check as a second command)
       gguf_convert_dlm.py --check MODEL_DIR OUT.gguf  read OUT.gguf back: every tensor byte for byte
                                                      against the safetensors (after the documented
                                                      reordering) and the metadata above; exit 1 if any differs
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_convert import LAYER_NAMES, TOP_NAMES, import_gguf, read_safetensors, token_table, widen  # noqa: E402

# The split regex of Qwen2's tokenizer.json (and of sonde's synthetic tokenizers): llama.cpp's
# pre-tokenizer "qwen2" implements exactly this one.
QWEN2_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
               "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
PASS_THROUGH_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"

# Dream is Qwen2 with bidirectional attention: the Qwen2 converter's names.
DREAM_LAYER = LAYER_NAMES
DREAM_TOP = TOP_NAMES
# LLaDA (OLMo names): x + ff_out(silu(ff_proj(h)) * up_proj(h)), so ff_proj is the gate.
LLADA_LAYER = {
    "attn_norm.weight": "attn_norm.weight", "ff_norm.weight": "ffn_norm.weight",
    "q_proj.weight": "attn_q.weight", "k_proj.weight": "attn_k.weight", "v_proj.weight": "attn_v.weight",
    "q_proj.bias": "attn_q.bias", "k_proj.bias": "attn_k.bias", "v_proj.bias": "attn_v.bias",
    "attn_out.weight": "attn_output.weight", "attn_out.bias": "attn_output.bias",
    "ff_proj.weight": "ffn_gate.weight", "up_proj.weight": "ffn_up.weight", "ff_out.weight": "ffn_down.weight",
    "ff_proj.bias": "ffn_gate.bias", "up_proj.bias": "ffn_up.bias", "ff_out.bias": "ffn_down.bias",
}
LLADA_TOP = {"model.transformer.wte.weight": "token_embd.weight", "model.transformer.ln_f.weight": "output_norm.weight",
             "model.transformer.ff_out.weight": "output.weight"}


class Arch:
    """What differs between the two families: names, hyper-parameters, the q/k row order."""

    def __init__(self, cfg: dict, src: Path):
        self.cfg = cfg
        mt = cfg.get("model_type")
        if mt == "Dream":
            self.name, self.top, self.layer, self.prefix = "dream", DREAM_TOP, DREAM_LAYER, "model.layers"
            self.d_model, self.n_layers = cfg["hidden_size"], cfg["num_hidden_layers"]
            self.n_heads, self.n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
            self.ff, self.ctx = cfg["intermediate_size"], cfg["max_position_embeddings"]
            self.tied = bool(cfg.get("tie_word_embeddings"))
        elif mt == "llada":
            self.name, self.top, self.layer, self.prefix = "llada", LLADA_TOP, LLADA_LAYER, "model.transformer.blocks"
            self.d_model, self.n_layers, self.n_heads = cfg["d_model"], cfg["n_layers"], cfg["n_heads"]
            self.n_kv = cfg.get("n_kv_heads") or self.n_heads
            self.ff = cfg.get("mlp_hidden_size") or cfg["mlp_ratio"] * self.d_model
            self.ctx = cfg["max_sequence_length"]
            self.tied = bool(cfg.get("weight_tying"))
        else:
            raise SystemExit(f"gguf_convert_dlm: {src / 'config.json'}: field 'model_type' is {mt!r}; "
                             "only 'Dream' and 'llada' are converted")
        if "mask_token_id" not in cfg:
            raise SystemExit(f"gguf_convert_dlm: {src / 'config.json'}: field 'mask_token_id' is missing")
        self.mask = int(cfg["mask_token_id"])
        self.head_dim = self.d_model // self.n_heads

    def gguf_name(self, hf: str) -> str:
        if hf in self.top:
            return self.top[hf]
        pre = self.prefix + "."
        rest = hf[len(pre):].split(".", 1) if hf.startswith(pre) else []
        if len(rest) != 2 or rest[1] not in self.layer:
            raise SystemExit(f"gguf_convert_dlm: no GGUF name for tensor {hf}")
        return f"blk.{rest[0]}.{self.layer[rest[1]]}"

    def written(self, hf: str) -> bool:
        return not (self.tied and self.gguf_name(hf) == "output.weight")

    def stored(self, hf: str, arr: np.ndarray) -> np.ndarray:
        """The tensor as the GGUF holds it: LLaDA's q/k rows from rotate-half to adjacent pairs."""
        if self.name != "llada" or not hf.endswith(("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias")):
            return arr
        d = self.head_dim
        heads = arr.shape[0] // d
        a = np.asarray(arr).reshape(heads, 2, d // 2, *arr.shape[1:])  # [head][half][i]
        return np.ascontiguousarray(a.swapaxes(1, 2).reshape(arr.shape))  # [head][i][half]


def check_tokenizer(src: Path, tok: dict) -> None:
    pre = tok.get("pre_tokenizer") or {}
    splits = [p for p in pre.get("pretokenizers", [pre]) if p.get("type") == "Split"]
    regex = splits[0]["pattern"].get("Regex") if splits else None
    if regex != QWEN2_SPLIT:
        raise SystemExit(f"gguf_convert_dlm: {src / 'tokenizer.json'}: field 'pre_tokenizer' split regex is "
                         f"{regex!r}; only Qwen2's (llama.cpp pre-tokenizer 'qwen2') is converted")


def write_vocab(gguf, w, src: Path, n_vocab: int, mask: int) -> int:
    tok = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    check_tokenizer(src, tok)
    names, kinds = token_table(gguf, tok, n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(names)
    w.add_token_types(kinds)
    sv = gguf.SpecialVocab(src, load_merges=True, n_vocab=len(names))
    sv.special_token_ids["mask"] = mask  # config.json's mask_token_id is the one the model was trained with
    sv.chat_template = PASS_THROUGH_TEMPLATE
    sv.add_to_gguf(w, quiet=True)
    return sum(k == gguf.TokenType.UNUSED for k in kinds)


def convert(src: Path, out: Path) -> None:
    gguf = import_gguf()
    cfg = json.loads((src / "config.json").read_text())
    a = Arch(cfg, src)
    tensors = read_safetensors(src / "model.safetensors")
    emb = next(n for n in tensors if a.gguf_name(n) == "token_embd.weight")
    emb_dtype, emb_shape, _ = tensors[emb]
    n_vocab = emb_shape[0]
    if not 0 <= a.mask < n_vocab:
        raise SystemExit(f"gguf_convert_dlm: {src / 'config.json'}: field 'mask_token_id' is {a.mask}, "
                         f"outside the vocabulary of {n_vocab}")
    file_type = {"BF16": gguf.LlamaFileType.MOSTLY_BF16, "F16": gguf.LlamaFileType.MOSTLY_F16,
                 "F32": gguf.LlamaFileType.ALL_F32}[emb_dtype]

    w = gguf.GGUFWriter(out, a.name)
    w.add_name(src.name)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.d_model)
    w.add_block_count(a.n_layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.n_heads)
    w.add_head_count_kv(a.n_kv)
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_causal_attention(False)
    w.add_file_type(file_type)
    if a.name == "llada":
        w.add_vocab_size(n_vocab)
        w.add_rope_dimension_count(a.head_dim)
        w.add_diffusion_shift_logits(False)
    pads = write_vocab(gguf, w, src, n_vocab, a.mask)

    matrices = vectors = 0
    for name, (dtype, shape, arr) in tensors.items():
        if not a.written(name):
            continue
        data = a.stored(name, arr)
        if len(shape) == 1:
            w.add_tensor(a.gguf_name(name), np.ascontiguousarray(widen(dtype, data)))
            vectors += 1
        else:
            raw = gguf.GGMLQuantizationType.BF16 if dtype == "BF16" else None
            w.add_tensor(a.gguf_name(name), np.ascontiguousarray(data), raw_dtype=raw)
            matrices += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}: arch {a.name}, {matrices} matrices ({emb_dtype}, bit-exact"
          f"{', q/k rows reordered for NORM RoPE' if a.name == 'llada' else ''}), {vectors} vectors (F32), "
          f"{n_vocab} tokens ({pads} padding), mask {a.mask}")


def field_value(reader, key: str):
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    return bytes(v).decode("utf-8") if f.types and f.types[0].name == "STRING" else v.tolist()[0]


def check(src: Path, out: Path) -> bool:
    gguf = import_gguf()
    cfg = json.loads((src / "config.json").read_text())
    a = Arch(cfg, src)
    tensors = read_safetensors(src / "model.safetensors")
    reader = gguf.GGUFReader(out)
    got = {t.name: t for t in reader.tensors}
    bad = sorted(set(got) ^ {a.gguf_name(n) for n in tensors if a.written(n)})  # missing on either side
    compared = 0
    for name, (dtype, shape, arr) in tensors.items():
        g = got.get(a.gguf_name(name))
        if not a.written(name) or g is None:
            continue
        want = a.stored(name, arr)
        if len(shape) == 1:
            ok = (g.tensor_type == gguf.GGMLQuantizationType.F32
                  and np.asarray(g.data).reshape(-1).tobytes() == widen(dtype, want).tobytes())
        else:
            want_type = {"BF16": gguf.GGMLQuantizationType.BF16, "F16": gguf.GGMLQuantizationType.F16,
                         "F32": gguf.GGMLQuantizationType.F32}[dtype]
            ok = (g.tensor_type == want_type and list(g.shape) == shape[::-1]
                  and np.asarray(g.data).tobytes() == np.asarray(want).tobytes())
        compared += 1
        if not ok:
            bad.append(name)
    expect = {"general.architecture": a.name, f"{a.name}.attention.causal": False,
              "tokenizer.ggml.mask_token_id": a.mask, f"{a.name}.block_count": a.n_layers,
              f"{a.name}.attention.head_count_kv": a.n_kv, "tokenizer.ggml.pre": "qwen2",
              "tokenizer.chat_template": PASS_THROUGH_TEMPLATE}
    if a.name == "llada":
        expect.update({"diffusion.shift_logits": False, "llada.rope.dimension_count": a.head_dim})
    for key, value in expect.items():
        if field_value(reader, key) != value:
            bad.append(f"{key}={field_value(reader, key)!r} (want {value!r})")
    print(f"check: {compared} tensors compared byte for byte with {src / 'model.safetensors'}"
          f"{' (q/k rows in NORM-RoPE order)' if a.name == 'llada' else ''}, {len(expect)} metadata keys: "
          + ("all equal" if not bad else f"{len(bad)} differ or are missing: {bad[:5]}"))
    return not bad


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--check" and len(args) == 3:
        sys.exit(0 if check(Path(args[1]), Path(args[2])) else 1)
    if args and args[0] == "--write" and len(args) == 3:
        return convert(Path(args[1]), Path(args[2]))
    if len(args) != 2:
        raise SystemExit(__doc__)
    convert(Path(args[0]), Path(args[1]))
    sys.exit(0 if check(Path(args[0]), Path(args[1])) else 1)


if __name__ == "__main__":
    main()
