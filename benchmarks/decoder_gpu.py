"""A small decoder-only model end to end on the GPU (issue 8): eager, torch.compile, max-autotune and the
fusionsearch backend at decode (batch 1 and 16, one token) and prefill (one sequence of 512) shapes, bf16,
weights built here (no download). The backend's first call (search + compile) is reported as its tuning time;
every output is checked against eager. Writes decoder.json and decoder.md under --out, the table last.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/decoder_gpu.py --out $OUT [--trials 16] [--cache DIR]"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch
import torch.nn.functional as F

import fusionsearch as fs
from fusionsearch.measure import rel_error, time_callable

SHAPES = {"decode b1": (1, 1), "decode b16": (16, 1), "prefill 512": (1, 512)}


class Layer(torch.nn.Module):
    """RMSNorm, attention (fused qkv, SDPA), RMSNorm, SwiGLU MLP, both with residuals."""

    def __init__(self, d: int, h: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.ones(d))
        self.qkv, self.o = torch.nn.Linear(d, 3 * d, bias=False), torch.nn.Linear(d, d, bias=False)
        self.w1, self.w3 = torch.nn.Linear(d, h, bias=False), torch.nn.Linear(d, h, bias=False)
        self.w2 = torch.nn.Linear(h, d, bias=False)

    @staticmethod
    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x, self.n1)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(a)
        y = self.norm(x, self.n2)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


def decoder(d: int = 2048, h: int = 5632, heads: int = 16, layers: int = 4) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Layer(d, h, heads) for _ in range(layers)])
    for p in model.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=d ** -0.5)
    return model.to("cuda", torch.bfloat16).eval()


def variant(model: torch.nn.Module, x: torch.Tensor, ref: torch.Tensor, make: object) -> dict:
    """First-call time (compile or search), error against eager, then the steady time."""
    torch._dynamo.reset()
    try:
        fn = make(model)  # type: ignore[operator]
        start = time.time()
        out = fn(x)
        torch.cuda.synchronize()
        rec = {"first_call_s": time.time() - start, "rel_err": rel_error(out, ref)}
        rec["us"] = time_callable(lambda: fn(x)).median_us
        return rec
    except Exception as e:  # one variant's failure is reported, the run goes on
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--skip-max-autotune", action="store_true")
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help=f"comma-separated subset of: {', '.join(SHAPES)} (default all)")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "fusionsearch-decoder-plans"),
                    help="the backend's plan cache (default: a temporary folder, so --out holds only the report)")
    args = ap.parse_args()
    shapes = [name.strip() for name in args.shapes.split(",") if name.strip()]
    if unknown := [name for name in shapes if name not in SHAPES]:
        ap.error(f"--shapes: unknown {unknown}; choose from {list(SHAPES)}")
    os.makedirs(args.out, exist_ok=True)
    model = decoder()
    rows = []
    with torch.no_grad():
        for name in shapes:
            b, s = SHAPES[name]
            x = torch.randn(b, s, 2048, device="cuda", dtype=torch.bfloat16)
            ref = model(x)
            backend = fs.backend(trials=args.trials, fallback="inductor", cache=args.cache)
            makers = {"eager": lambda m: m,
                      "torch.compile": lambda m: torch.compile(m, dynamic=False),
                      "max-autotune": lambda m: torch.compile(m, mode="max-autotune-no-cudagraphs", dynamic=False),
                      "fusionsearch": lambda m, be=backend: torch.compile(m, backend=be, dynamic=False)}
            if args.skip_max_autotune:
                makers.pop("max-autotune")
            row = {"shape": name, **{k: variant(model, x, ref, mk) for k, mk in makers.items()},
                   "backend_stats": backend.stats.__dict__}
            rows.append(row)
            with open(os.path.join(args.out, "decoder.json"), "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f,
                          indent=1)
            print(name, {k: v.get("us", v.get("error")) for k, v in row.items() if isinstance(v, dict)}, flush=True)
    cols = [k for k in rows[0] if k not in ("shape", "backend_stats")]
    lines = ["| shape | " + " | ".join(f"{c} us" for c in cols) + " | fusionsearch tuning s | regions "
             "(searched / cached) |", "|---|" + "---|" * (len(cols) + 2)]
    for r in rows:
        cells = [f"{r[c]['us']:.1f}" if "us" in r[c] else "failed" for c in cols]
        st = r["backend_stats"]
        tuning = r["fusionsearch"].get("first_call_s")
        lines.append(f"| {r['shape']} | " + " | ".join(cells) + f" | {tuning or 0:.0f} | {st['regions']} "
                     f"({st['searched']} / {st['cached']}) |")
    table = "\n".join(lines)
    with open(os.path.join(args.out, "decoder.md"), "w") as f:
        f.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
