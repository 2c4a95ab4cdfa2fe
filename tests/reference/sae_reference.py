"""Independent float64 reference of SAELens's SAE encode/decode, written from SAELens's published
definitions (sae_lens/saes/{sae,standard_sae,jumprelu_sae,topk_sae,gated_sae,transcoder}.py),
not from sonde's sources. Reads a SAELens folder (cfg.json + sae_weights.safetensors) with
qwen2_reference.read_safetensors (no safetensors package).

Per row x [.., d_in]:
  norm_in      constant_norm_rescale: c = sqrt(d_in) / |x|, x <- c x; otherwise identity
               (expected_average_only_in is folded into the weights by SAELens before saving)
  sae_in       x - b_dec if apply_b_dec_to_input (never for transcoders)
  acts_pre     sae_in @ W_enc + b_enc        gated: sae_in @ (W_enc * exp(r_mag)) + b_mag
  acts_post    standard: relu(pre); jumprelu: relu(pre) * (pre > threshold);
               topk: the k largest of pre, relu'd, the rest 0;
               gated: (sae_in @ W_enc + b_gate > 0) * relu(pre)
  recons       acts_post @ W_dec + b_dec  (hook_sae_recons: before norm_out)
  output       recons / c under constant_norm_rescale (not for transcoders)
  error        x_out - output, x_out the value of the output hook (the input hook for an SAE)
"""
import json
import os

import numpy as np
import torch

import qwen2_reference as ref


class Sae:
    def __init__(self, folder):
        with open(os.path.join(folder, "cfg.json")) as f:
            cfg = json.load(f)
        meta = cfg.get("metadata") or {}
        self.arch = cfg["architecture"]
        if self.arch == "standard" and cfg.get("activation_fn_str") == "topk":
            self.arch = "topk"
        self.k = cfg.get("k") or (cfg.get("activation_fn_kwargs") or {}).get("k")
        self.hook = meta.get("hook_name", cfg.get("hook_name"))
        self.hook_out = cfg.get("hook_name_out") or self.hook
        self.transcoder = self.arch.endswith("transcoder")
        self.apply_b_dec = bool(cfg.get("apply_b_dec_to_input", True)) and not self.transcoder
        self.norm = cfg.get("normalize_activations", "none")
        w = ref.read_safetensors(os.path.join(folder, "sae_weights.safetensors"))
        self.w = {k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.float64) for k, v in w.items()}

    def encode(self, x):
        """x [..., d_in] float64 -> (acts_pre, acts_post, c) with c the norm_in coefficient."""
        w = self.w
        c = None
        if self.norm == "constant_norm_rescale":
            c = x.shape[-1] ** 0.5 / torch.linalg.norm(x, dim=-1, keepdim=True)
            x = x * c
        sae_in = x - w["b_dec"] if self.apply_b_dec else x
        if self.arch == "gated":
            pre = sae_in @ (w["W_enc"] * torch.exp(w["r_mag"])) + w["b_mag"]
            gate = sae_in @ w["W_enc"] + w["b_gate"]
            return pre, (gate > 0).to(pre.dtype) * torch.relu(pre), c, gate
        pre = sae_in @ w["W_enc"] + w["b_enc"]
        if self.arch in ("standard", "transcoder"):
            post = torch.relu(pre)
        elif self.arch in ("jumprelu", "jumprelu_transcoder"):
            post = torch.relu(pre) * (pre > w["threshold"]).to(pre.dtype)
        elif self.arch == "topk":
            top = torch.topk(pre, self.k, dim=-1)
            post = torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))
        else:
            raise ValueError(f"unknown architecture {self.arch}")
        return pre, post, c, None

    def decode(self, post, c):
        recons = post @ self.w["W_dec"] + self.w["b_dec"]
        out = recons / c if c is not None and not self.transcoder else recons
        return recons, out

    def run(self, x_in, x_out):
        """Every hook_sae_* value for input-hook rows x_in and output-hook rows x_out."""
        pre, post, c, gate = self.encode(x_in)
        recons, out = self.decode(post, c)
        return {"sae_input": x_in, "acts_pre": pre, "acts_post": post, "recons": recons,
                "output": out, "error": x_out - out, "gate": gate}

    def margin(self, x_in):
        """The smallest distance of a discontinuity's decision from its boundary, relative to the
        pre-activations' scale: TopK's k-th vs (k+1)-th, JumpReLU's pre vs threshold, gated's gate
        vs 0. An f32 engine decides every row as the reference does when this is well above 1e-5."""
        pre, _, _, gate = self.encode(x_in)
        scale = float(pre.abs().max())
        if self.arch == "topk":
            v = torch.sort(pre, dim=-1, descending=True).values
            return float((v[..., self.k - 1] - v[..., self.k]).min()) / scale
        if self.arch.startswith("jumprelu"):
            return float((pre - self.w["threshold"]).abs().min()) / scale
        if self.arch == "gated":
            return float(gate.abs().min()) / float(gate.abs().max())
        return float("inf")
