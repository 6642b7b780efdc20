#!/usr/bin/env python3
"""An independent reference for slowpipe's Hugging Face checkpoints: GPT-2 and Llama-family
decoders transcribed from the published architectures (Radford et al. 2019 as Hugging Face's
GPT2LMHeadModel computes it; Touvron et al. 2023 as LlamaForCausalLM / Qwen2ForCausalLM compute
it), in plain PyTorch (Debian's python3-torch), sharing no code with slowpipe. It writes random-weight
checkpoints in the Hugging Face layout (config.json + model.safetensors, a BF16 copy, a sharded copy
with model.safetensors.index.json) and the logits it computes for three token sequences.

  hf_reference.py --out DIR                      # the checkpoints and DIR/reference.json
  hf_reference.py --verify CKPT --bin SLOWPIPE      # a folder slowpipe wrote back, read by the reference
  hf_reference.py --out DIR --check --bin SLOWPIPE
      ... and checks `slowpipe model logits` at 1, 2 and 3 stages against them (max |diff| <= 1e-5),
      and that damaged checkpoints are refused naming the file, the tensor and what was expected.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import torch

SEQUENCES = [[1, 7, 42, 99, 3, 250, 17, 8], [299, 0, 5], [12, 12, 12, 12, 64, 128, 200, 31, 77, 2, 9, 150]]


def write_safetensors(path, tensors, dtype="F32"):
    """The safetensors format: u64 LE header length, JSON header, data (offsets from the data start)."""
    header, blobs, at = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        if dtype == "BF16":
            raw = t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        elif dtype == "F16":
            raw = t.to(torch.float16).numpy().tobytes()
        else:
            raw = t.to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


# ---- GPT-2 (Conv1D weights [in, out]: y = x @ W + b; gelu_new; learned positions; tied head) ----

def gpt2_weights(cfg, g):
    C, V, P, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    F = 4 * C
    r = lambda *s: torch.randn(*s, generator=g) * 0.05
    w = {"transformer.wte.weight": r(V, C), "transformer.wpe.weight": r(P, C),
         "transformer.ln_f.weight": 1 + r(C), "transformer.ln_f.bias": r(C)}
    for i in range(L):
        p = f"transformer.h.{i}."
        w.update({p + "ln_1.weight": 1 + r(C), p + "ln_1.bias": r(C), p + "attn.c_attn.weight": r(C, 3 * C),
                  p + "attn.c_attn.bias": r(3 * C), p + "attn.c_proj.weight": r(C, C), p + "attn.c_proj.bias": r(C),
                  p + "ln_2.weight": 1 + r(C), p + "ln_2.bias": r(C), p + "mlp.c_fc.weight": r(C, F),
                  p + "mlp.c_fc.bias": r(F), p + "mlp.c_proj.weight": r(F, C), p + "mlp.c_proj.bias": r(C),
                  p + "attn.bias": torch.tril(torch.ones(P, P)).view(1, 1, P, P)})  # a buffer, ignored by loaders
    return w


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gpt2_logits(cfg, w, ids):
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    D = C // H
    T = len(ids)
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    ln = lambda h, p: torch.nn.functional.layer_norm(h, (C,), w[p + ".weight"], w[p + ".bias"], eps)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        a = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (t.view(T, H, D).transpose(0, 1) for t in a.split(C, dim=-1))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        att = torch.where(mask, att, torch.tensor(torch.finfo(att.dtype).min))
        y = (att.softmax(-1) @ v).transpose(0, 1).reshape(T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = gelu_new(ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    return ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T


# ---- Llama family (RMSNorm, RoPE with rotate_half, grouped-query attention, SwiGLU) ----

def llama_weights(cfg, g, qwen):
    C, V, L, F = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    H, K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = C // H
    r = lambda *s: torch.randn(*s, generator=g) * 0.05
    w = {"model.embed_tokens.weight": r(V, C), "model.norm.weight": 1 + r(C)}
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = r(V, C)
    for i in range(L):
        p = f"model.layers.{i}."
        w.update({p + "input_layernorm.weight": 1 + r(C), p + "post_attention_layernorm.weight": 1 + r(C),
                  p + "self_attn.q_proj.weight": r(H * D, C), p + "self_attn.k_proj.weight": r(K * D, C),
                  p + "self_attn.v_proj.weight": r(K * D, C), p + "self_attn.o_proj.weight": r(C, H * D),
                  p + "mlp.gate_proj.weight": r(F, C), p + "mlp.up_proj.weight": r(F, C), p + "mlp.down_proj.weight": r(C, F)})
        if qwen:
            w.update({p + "self_attn.q_proj.bias": r(H * D), p + "self_attn.k_proj.bias": r(K * D),
                      p + "self_attn.v_proj.bias": r(K * D)})
        w[p + "self_attn.rotary_emb.inv_freq"] = torch.zeros(D // 2)  # a buffer some checkpoints carry, ignored
    return w


def llama_logits(cfg, w, ids):
    C, H, K, eps, theta = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"],
                           cfg.get("rope_theta", 10000.0))
    D = C // H
    T = len(ids)

    def rms(h, weight):
        var = h.pow(2).mean(-1, keepdim=True)
        return weight * (h * torch.rsqrt(var + eps))

    def lin(h, name):
        y = h @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = torch.outer(torch.arange(T).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    rot = lambda t: torch.cat((-t[..., D // 2:], t[..., :D // 2]), dim=-1)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms(x, w[p + "input_layernorm.weight"])
        q = lin(a, p + "self_attn.q_proj").view(T, H, D).transpose(0, 1)
        k = lin(a, p + "self_attn.k_proj").view(T, K, D).transpose(0, 1)
        v = lin(a, p + "self_attn.v_proj").view(T, K, D).transpose(0, 1)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(H // K, dim=0), v.repeat_interleave(H // K, dim=0)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        att = torch.where(mask, att, torch.tensor(torch.finfo(att.dtype).min))
        y = (att.softmax(-1) @ v).transpose(0, 1).reshape(T, H * D)
        x = x + lin(y, p + "self_attn.o_proj")
        m = rms(x, w[p + "post_attention_layernorm.weight"])
        x = x + lin(torch.nn.functional.silu(lin(m, p + "mlp.gate_proj")) * lin(m, p + "mlp.up_proj"), p + "mlp.down_proj")
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return rms(x, w["model.norm.weight"]) @ head.T


MODELS = {
    "gpt2": ({"model_type": "gpt2", "n_layer": 3, "n_embd": 64, "n_head": 4, "vocab_size": 300, "n_positions": 32,
              "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "n_inner": None}, gpt2_weights, gpt2_logits),
    "llama": ({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
               "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 300, "rms_norm_eps": 1e-6,
               "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu"},
              lambda c, g: llama_weights(c, g, False), llama_logits),
    "qwen2": ({"model_type": "qwen2", "num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4,
               "num_key_value_heads": 1, "intermediate_size": 80, "vocab_size": 300, "rms_norm_eps": 1e-6,
               "rope_theta": 1000000.0, "tie_word_embeddings": True, "hidden_act": "silu"},
              lambda c, g: llama_weights(c, g, True), llama_logits),
}


def write_model(out, name, seed):
    cfg, make, logits = MODELS[name]
    g = torch.Generator().manual_seed(seed)
    w = make(cfg, g)
    variants = {}
    for variant in ("f32", "f16", "bf16", "sharded"):
        d = os.path.join(out, f"{name}-{variant}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        half = {"bf16": torch.bfloat16, "f16": torch.float16}.get(variant)
        ww = {k: v.to(half).to(torch.float32) for k, v in w.items()} if half else w
        if variant == "sharded":  # two shards and the index that names them
            names = sorted(w)
            half = {0: names[: len(names) // 2], 1: names[len(names) // 2:]}
            weight_map = {}
            for s, ns in half.items():
                file = f"model-0000{s + 1}-of-00002.safetensors"
                write_safetensors(os.path.join(d, file), {n: w[n] for n in ns})
                weight_map.update({n: file for n in ns})
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {}, "weight_map": weight_map}, f)
        else:
            write_safetensors(os.path.join(d, "model.safetensors"), w, variant.upper())
        with torch.no_grad():
            variants[variant] = {"dir": d, "logits": [logits(cfg, ww, ids).tolist() for ids in SEQUENCES]}
    return variants


def check(out, ref, slowpipe):
    worst, failures = 0.0, []
    for name, variants in ref.items():
        for variant, v in variants.items():
            for stages in (1, 2, 3):
                for ids, want in zip(SEQUENCES, v["logits"]):
                    r = subprocess.run([slowpipe, "model", "logits", v["dir"], "--tokens", ",".join(map(str, ids)), "--stages",
                                        str(stages), "--json"], capture_output=True, text=True)
                    if r.returncode != 0:
                        failures.append(f"{name}-{variant} stages {stages}: {r.stderr.strip()}")
                        continue
                    got = torch.tensor(json.loads(r.stdout)["logits"])
                    diff = (got - torch.tensor(want)).abs().max().item()
                    worst = max(worst, diff)
                    if diff > 1e-5:
                        failures.append(f"{name}-{variant} stages {stages} tokens {ids}: max |diff| {diff:.3g} > 1e-5")
    print(f"logits: {len(ref)} families x 4 variants x 3 splits x {len(SEQUENCES)} sequences, max |slowpipe - reference| = {worst:.3g}")
    failures += check_generate(ref, slowpipe)
    # Damaged checkpoints: each refused naming what is wrong, nothing read past the file.
    src = ref["llama"]["f32"]["dir"]
    bad = os.path.join(out, "bad")

    def damaged(tag, edit):
        d = os.path.join(bad, tag)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        edit(d)
        r = subprocess.run([slowpipe, "model", "logits", d, "--tokens", "1,2"], capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def truncate(d):
        f = os.path.join(d, "model.safetensors")
        os.truncate(f, os.path.getsize(f) - 1000)

    def big_header(d):
        f = os.path.join(d, "model.safetensors")
        with open(f, "r+b") as fh:
            fh.write(struct.pack("<Q", 1 << 40))

    def rewrite(d, fn):
        f = os.path.join(d, "model.safetensors")
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
            data = fh.read()
        fn(header)
        text = json.dumps(header).encode()
        with open(f, "wb") as fh:
            fh.write(struct.pack("<Q", len(text)) + text + data)

    def drop(h):
        del h["model.layers.1.mlp.up_proj.weight"]

    def reshape(h):
        h["model.layers.2.self_attn.k_proj.weight"]["shape"] = [64, 32]

    def family(d):
        with open(os.path.join(d, "config.json")) as fh:
            c = json.load(fh)
        c["model_type"] = "bert"
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(c, fh)

    cases = [("truncated", truncate, ["model.safetensors", "outside the", "truncated"]),
             ("header-too-large", big_header, ["model.safetensors", "its header says 1099511627776 bytes"]),
             ("missing-tensor", lambda d: rewrite(d, drop), ["has no tensor 'model.layers.1.mlp.up_proj.weight'"]),
             ("wrong-shape", lambda d: rewrite(d, reshape), ["model.layers.2.self_attn.k_proj.weight", "has shape [64, 32]", "expects [32, 64]"]),
             ("unknown-family", family, ["config.json", "model_type 'bert' is not a family"])]
    for tag, edit, words in cases:
        rc, text = damaged(tag, edit)
        if rc == 0 or not all(wd in text for wd in words):
            failures.append(f"damaged checkpoint '{tag}': exit {rc}, expected an error with {words}: {text.strip()[:300]}")
        else:
            print(f"refused {tag}: {text.strip().splitlines()[-1][:200]}")
    for f in failures:
        print("FAIL:", f)
    return not failures


def check_generate(ref, slowpipe, new=6):
    """Greedy continuation: the reference's argmax chain against `slowpipe model generate`."""
    failures = []
    for name, variants in ref.items():
        cfg, _, logits = MODELS[name]
        _, w = read_checkpoint(variants["f32"]["dir"])
        for stages in (1, 3):
            prompt = list(SEQUENCES[0])
            ids = list(prompt)
            with torch.no_grad():
                for _ in range(new):
                    ids.append(int(logits(cfg, w, ids)[-1].argmax()))
            r = subprocess.run([slowpipe, "model", "generate", variants["f32"]["dir"], "--tokens", ",".join(map(str, prompt)), "--max-new",
                                str(new), "--stages", str(stages), "--json"], capture_output=True, text=True)
            got = json.loads(r.stdout)["generated"] if r.returncode == 0 else r.stderr.strip()
            if got != ids[len(prompt):]:
                failures.append(f"{name} generate, {stages} stages: slowpipe {got}, reference {ids[len(prompt):]}")
            else:
                print(f"{name} generate, {stages} stages: {got} as the reference")
    return failures


def read_checkpoint(d):
    """A Hugging Face folder's config and tensors (by name, fp32), read as a user's own tools would."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    w = {}
    for file in files:
        with open(os.path.join(d, file), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
            data = fh.read()
        for name, t in header.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            raw = bytearray(data[b:e])
            if t["dtype"] == "BF16":
                x = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16).to(torch.float32)
            elif t["dtype"] == "F16":
                x = torch.frombuffer(raw, dtype=torch.float16).to(torch.float32)
            else:
                x = torch.frombuffer(raw, dtype=torch.float32).clone()
            w[name] = x.reshape(t["shape"])
    return cfg, w


def verify(d, slowpipe):
    """The reference's logits of a folder (e.g. one slowpipe wrote back) against slowpipe's."""
    cfg, w = read_checkpoint(d)
    family = "gpt2" if cfg["model_type"] == "gpt2" else "llama"
    if family == "gpt2" and "transformer.wte.weight" not in w:
        w = {"transformer." + k: v for k, v in w.items()}
    logits = gpt2_logits if family == "gpt2" else llama_logits
    worst = 0.0
    for ids in SEQUENCES:
        with torch.no_grad():
            want = logits(cfg, w, ids)
        r = subprocess.run([slowpipe, "model", "logits", d, "--tokens", ",".join(map(str, ids)), "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL:", r.stderr.strip())
            return False
        worst = max(worst, (torch.tensor(json.loads(r.stdout)["logits"]) - want).abs().max().item())
    print(f"{d}: {len(w)} tensors, max |slowpipe - reference| = {worst:.3g}")
    return worst <= 1e-5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bin", default="build/slowpipe")
    ap.add_argument("--verify", help="instead: compare the reference's and slowpipe's logits of this checkpoint folder")
    a = ap.parse_args()
    if a.verify:
        sys.exit(0 if verify(a.verify, a.bin) else 1)
    if not a.out:
        ap.error("--out DIR is needed (or --verify CKPT)")
    torch.set_default_dtype(torch.float32)
    os.makedirs(a.out, exist_ok=True)
    ref = {name: write_model(a.out, name, a.seed + i) for i, name in enumerate(MODELS)}
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump({"sequences": SEQUENCES, "models": ref}, f)
    if a.check and not check(a.out, ref, a.bin):
        sys.exit(1)


if __name__ == "__main__":
    main()
