"""Decode speed of a transformers model on humming layers against the same model in 16 bits: tokens per second of
greedy generate() at several batch sizes, on the GPU.

The model is built from a config with the layer sizes of a real model but few layers (random weights, nothing
downloaded): Llama-3-8B (hidden 4096, intermediate 14336, 32 heads, 8 KV heads) or Qwen3-30B-A3B (hidden 2048,
128 experts of 768, top-8); ``humming.nn.quantize_model`` quantizes its linear and experts modules (lm_head kept).
Two measurements, each ``--new`` tokens after an 8-token prompt, the two models alternated over ``--rounds`` rounds
after a warm-up, the median per model: greedy generate() with transformers' dynamic cache (eager: the host's launch
work, the same Python for both models, is most of a small model's step), and the decode steps on a static KV cache
replayed as one CUDA graph per model (DecodeSteps: the GPU's own step time, as a serving engine runs it; a model
whose step does not capture is timed eagerly and the row says why). Writes OUT/bench_model.json naming the GPU.

    python bench/bench_model.py --out OUT [--arch llama,qwen3_moe] [--layers 4] [--batches 1,8,64] [--scheme w4a16]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402


def config_of(arch: str, layers: int):
    import transformers

    if arch == "llama":
        return transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                        num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8)
    if arch == "qwen3_moe":
        return transformers.Qwen3MoeConfig(vocab_size=32000, hidden_size=2048, moe_intermediate_size=768,
                                           num_experts=128, num_experts_per_tok=8, num_hidden_layers=layers,
                                           num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                                           decoder_sparse_step=1, intermediate_size=6144)
    raise ValueError(arch)


def tokens_per_second(models: dict, batch: int, new: int, rounds: int) -> dict:
    """Tokens per second of each model's greedy generate(), the models alternated round by round."""
    ids = torch.randint(0, 32000, (batch, 8), device="cuda")

    def run(model):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    samples: dict = {name: [] for name in models}
    for model in models.values():
        run(model)
        run(model)
    for r in range(rounds):
        for name in (list(models) if r % 2 == 0 else list(reversed(models))):
            samples[name].append(run(models[name]))
    return {name: batch * new / statistics.median(v) for name, v in samples.items()}


class DecodeSteps:
    """Greedy decode one token per sequence per step on a static KV cache (transformers' StaticCache): the step's
    inputs (the token, its cache position) live in fixed tensors, so the step can be captured once in a CUDA graph
    and replayed: what a serving engine runs, without the host's per-step launch work that dominates eager
    generate() on a few layers."""

    def __init__(self, model, ids: torch.Tensor, steps: int):
        from transformers import StaticCache

        self.model, self.ids, self.prompt, self.steps = model, ids, ids.shape[1], steps
        self.cache = StaticCache(config=model.config, max_cache_len=self.prompt + steps + 1)
        # the step's inputs, updated in place (a captured graph reads them where they are)
        self.token = torch.zeros(ids.shape[0], 1, dtype=torch.long, device=ids.device)
        self.position = torch.tensor([self.prompt], device=ids.device)
        self.graph = None
        self.reset()

    def reset(self) -> None:
        """The cache emptied in place and filled with the prompt (eager); the prompt's next token chosen."""
        self.cache.reset()
        with torch.no_grad():
            logits = self.model(self.ids, past_key_values=self.cache, use_cache=True,
                                cache_position=torch.arange(self.prompt, device=self.ids.device)).logits
        self.token.copy_(logits[:, -1:].argmax(-1))

    def _forward(self) -> torch.Tensor:
        with torch.no_grad():
            return self.model(self.token, past_key_values=self.cache, cache_position=self.position,
                              use_cache=True).logits

    def capture(self) -> None:
        """The step as a CUDA graph (warmed up on a side stream first, as torch's capture wants); the cache reset
        after, as the capture wrote to it."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.logits = self._forward()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self._forward()
        self.reset()

    def run(self, steps: int | None = None) -> list[torch.Tensor]:
        """``steps`` greedy steps after the prompt (reset() first to run them again); the tokens chosen."""
        out = []
        for i in range(self.steps if steps is None else steps):
            self.position.fill_(self.prompt + i)
            if self.graph is None:
                self.logits = self._forward()
            else:
                self.graph.replay()
            self.token.copy_(self.logits[:, -1:].argmax(-1))
            out.append(self.token.clone())
        return out


def graph_tokens_per_second(models: dict, batch: int, new: int, rounds: int) -> tuple[dict, dict]:
    """Tokens per second of each model's decode steps replayed as one CUDA graph each (DecodeSteps), the models
    alternated round by round; a model whose step cannot be captured is timed eagerly (the reason in ``why``)."""
    ids = torch.randint(0, 32000, (batch, 8), device="cuda")
    steppers, why = {}, {}
    for name, model in models.items():
        steppers[name] = DecodeSteps(model, ids, new)
        try:
            steppers[name].capture()
        except Exception as exc:  # noqa: BLE001 - the eager number is still a number; the reason is reported
            steppers[name] = DecodeSteps(model, ids, new)
            why[name] = f"eager (capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]})"

    def run(name):
        steppers[name].reset()  # (the prompt again, not timed)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        steppers[name].run()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    samples: dict = {name: [] for name in models}
    for name in models:
        run(name)
    for r in range(rounds):
        for name in (list(models) if r % 2 == 0 else list(reversed(models))):
            samples[name].append(run(name))
    return {name: batch * new / statistics.median(v) for name, v in samples.items()}, why


def main() -> None:
    import transformers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", default="llama,qwen3_moe")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scheme", default="w4a16")
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    gpu = torch.cuda.get_device_name()
    rows = []
    for arch in args.arch.split(","):
        torch.manual_seed(0)
        base = transformers.AutoModelForCausalLM.from_config(config_of(arch, args.layers), dtype=dtype).eval()
        base = base.to("cuda")
        quant = humming.nn.quantize_model(copy.deepcopy(base), args.scheme)  # (quantized on the GPU)
        for batch in (int(b) for b in args.batches.split(",")):
            with torch.no_grad():
                tps = tokens_per_second({"16bit": base, "humming": quant}, batch, args.new, args.rounds)
            gps, why = graph_tokens_per_second({"16bit": base, "humming": quant}, batch, args.new, args.rounds)
            t16, tq, g16, gq = tps["16bit"], tps["humming"], gps["16bit"], gps["humming"]
            rows.append({"arch": arch, "layers": args.layers, "batch": batch, "scheme": args.scheme,
                         "dtype": args.dtype, "tokens_per_s_16bit": t16, "tokens_per_s_humming": tq,
                         "speedup": tq / t16, "graph_tokens_per_s_16bit": g16, "graph_tokens_per_s_humming": gq,
                         "graph_speedup": gq / g16, **({"graph_note": why} if why else {})})
            print(f"{arch:10} layers={args.layers} batch={batch:3}  generate(): {args.dtype} {t16:9.1f} tok/s  "
                  f"humming {args.scheme} {tq:9.1f} tok/s  x{tq / t16:.2f}   CUDA-graph steps: {g16:9.1f} / "
                  f"{gq:9.1f} tok/s  x{gq / g16:.2f}" + (f"  ({why})" if why else ""), flush=True)
            _write(args.out, gpu, transformers.__version__, rows)  # (after every row: a later failure keeps them)
        base = quant = None
        torch.cuda.empty_cache()


def _write(out: str, gpu: str, transformers_version: str, rows: list) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "bench_model.json"), "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "transformers": transformers_version, "rows": rows}, f,
                  indent=1)


if __name__ == "__main__":
    main()
