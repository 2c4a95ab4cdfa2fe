"""Independent PyTorch reference for the Qwen2 / Dream decoder forward pass.

Written from the model spec (docs: HF Qwen2ForCausalLM and Dream's DreamModel), not from sonde's
C++ sources, so that agreement between the two means something.

Everything is computed in the dtype passed to `forward` (float64 for the goldens, float32 for
the "f32 path" error estimate). Weights stored as bf16 are widened exactly to float32 first
(bf16 is the top 16 bits of an IEEE float32), then to the compute dtype.
"""
import json
import struct

import numpy as np
import torch


# ----------------------------------------------------------------------------- checkpoint I/O
def read_safetensors(path):
    """Parse a .safetensors file without the safetensors package.

    Layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape,
    data_offsets: [begin, end]}} (offsets relative to the byte after the header), then the data.
    Returns {name: float32 numpy array}.
    """
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = blob[base + begin : base + end]
        shape = info["shape"]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif dt == "BF16":
            # bf16 bits are the high half of a float32: widen by shifting into the top 16 bits.
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)
            a = u.view(np.float32)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dt}")
        out[name] = a.reshape(shape)
    return out


class Config:
    def __init__(self, cfg):
        self.raw = cfg
        self.H = cfg["hidden_size"]
        self.L = cfg["num_hidden_layers"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg["num_key_value_heads"]
        self.I = cfg["intermediate_size"]
        self.V = cfg["vocab_size"]
        self.eps = cfg["rms_norm_eps"]
        self.theta = cfg["rope_theta"]
        self.d = cfg.get("head_dim") or self.H // self.nh
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        mt = cfg.get("model_type", "")
        archs = cfg.get("architectures") or []
        # Dream: hard-coded is_causal=False and no mask without padding -> bidirectional.
        self.causal = not (mt.lower() == "dream" or "DreamModel" in archs)
        assert cfg.get("rope_scaling") in (None, {}), "only the default rope is implemented"
        assert not cfg.get("use_sliding_window", False)
        assert cfg.get("hidden_act", "silu") == "silu"


# ----------------------------------------------------------------------------- math
def rms_norm(x, w, eps):
    """y = w * (x / sqrt(mean_H(x^2) + eps)); no bias, no (1 + w) offset.

    HF computes the normalisation in float32 and casts back to the input dtype before the
    weight multiply; in float64/float32 compute that cast is the identity.
    """
    var = (x * x).mean(dim=-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rope_cos_sin(T, d, theta, dtype):
    """cos/sin tables [T, d] for the rotate_half (GPT-NeoX) layout.

    inv_freq[i] = 1 / theta^(2i/d), i < d/2, evaluated in float64 and rounded to float32
    (HF evaluates it in float32; the two can differ by 1 ulp). angle[t, i] = fl32(t) * inv_freq[i]
    multiplied in float32, as HF does with autocast disabled. emb = cat(angle, angle); the
    cos/sin are then taken in the compute dtype (exact f64 of the f32 angle for the f64 path).
    """
    i = torch.arange(0, d, 2, dtype=torch.float64)
    inv_freq = (1.0 / (theta ** (i / d))).to(torch.float32)
    pos = torch.arange(T, dtype=torch.float32)
    angle = pos[:, None] * inv_freq[None, :]  # float32 product
    emb = torch.cat([angle, angle], dim=-1).to(dtype)
    return torch.cos(emb), torch.sin(emb)


def apply_rope(x, cos, sin):
    """x [T, heads, d]: x*cos + rotate_half(x)*sin with rotate_half(x) = cat(-x[d/2:], x[:d/2])."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def forward(weights, cfg, ids, dtype=torch.float64):
    """One unpadded sequence, positions 0..T-1. Returns a dict of numpy arrays:

    logits [T, V]; hidden_states [L+1, T, H] (HF convention: embeddings, layer 0..L-2 outputs,
    final-norm(layer L-1 output)); resid_post [L, T, H] (raw layer outputs); attn_z_0
    [T, nh, d] (input of layer 0's o_proj); mlp_post_0 [T, I] (silu(gate)*up of layer 0);
    rot_q_0 [T, nh, d] (layer 0's q after RoPE).
    """
    W = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dtype) for k, v in weights.items()}
    T = len(ids)
    H, nh, nkv, d = cfg.H, cfg.nh, cfg.nkv, cfg.d
    group = nh // nkv
    ids_t = torch.tensor(ids, dtype=torch.long)
    E = W["model.embed_tokens.weight"]
    x = E[ids_t]  # x0 = E[ids]; no special-casing of any id
    cos, sin = rope_cos_sin(T, d, cfg.theta, dtype)
    if cfg.causal:
        # key u is visible from query t iff u <= t
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))
    else:
        allowed = None  # Dream: no mask at all
    scale = d ** -0.5

    hidden = [x]
    resid = []
    extras = {}
    for layer in range(cfg.L):
        p = f"model.layers.{layer}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], cfg.eps)
        # nn.Linear: y = h W^T + b; q/k/v carry biases, o_proj and the MLP do not.
        q = (h @ W[p + "self_attn.q_proj.weight"].T + W[p + "self_attn.q_proj.bias"]).view(T, nh, d)
        k = (h @ W[p + "self_attn.k_proj.weight"].T + W[p + "self_attn.k_proj.bias"]).view(T, nkv, d)
        v = (h @ W[p + "self_attn.v_proj.weight"].T + W[p + "self_attn.v_proj.bias"]).view(T, nkv, d)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        # GQA: query head j reads kv head j // (nh / nkv) (contiguous blocks of query heads).
        kv_of = torch.arange(nh) // group
        kj = k[:, kv_of, :]  # [T, nh, d]
        vj = v[:, kv_of, :]
        s = torch.einsum("thd,uhd->htu", q, kj) * scale  # [nh, T, T]
        if allowed is not None:
            s = s.masked_fill(~allowed[None], float("-inf"))
        prob = torch.softmax(s, dim=-1)
        z = torch.einsum("htu,uhd->thd", prob, vj)  # [T, nh, d]
        x = x + z.reshape(T, nh * d) @ W[p + "self_attn.o_proj.weight"].T
        h2 = rms_norm(x, W[p + "post_attention_layernorm.weight"], cfg.eps)
        gate = h2 @ W[p + "mlp.gate_proj.weight"].T
        up = h2 @ W[p + "mlp.up_proj.weight"].T
        post = gate * torch.sigmoid(gate) * up  # silu(g) * u, silu(z) = z * sigmoid(z)
        x = x + post @ W[p + "mlp.down_proj.weight"].T
        if layer == 0:
            extras = {"attn_z_0": z, "mlp_post_0": post, "rot_q_0": q}
        resid.append(x)
        if layer < cfg.L - 1:
            hidden.append(x)
    xf = rms_norm(x, W["model.norm.weight"], cfg.eps)
    hidden.append(xf)
    # Tied: the embedding matrix is the head (lm_head.weight ignored even if present).
    head = E if cfg.tied else W["lm_head.weight"]
    logits = xf @ head.T
    out = {
        "logits": logits,
        "hidden_states": torch.stack(hidden),
        "resid_post": torch.stack(resid),
        **extras,
    }
    return {k: v.numpy() for k, v in out.items()}


def load_model(model_dir):
    with open(f"{model_dir}/config.json") as f:
        cfg = Config(json.load(f))
    return cfg, read_safetensors(f"{model_dir}/model.safetensors")
