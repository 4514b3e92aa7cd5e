"""TuneResult: the best plan of a search, every trial, and the ways to read them (explain, report)."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fusionsearch.codegen.runtime import compile_plan, export_plan
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan import FusedMatmulKernel, LibraryKernel, Plan


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the search saw it: status (measured, pruned reasons, failed), predicted and measured µs."""

    number: int
    state: str
    status: str
    params: dict[str, Any]
    value_us: float | None
    predicted_us: float | None
    measured_us: float | None
    reason: str
    kernel_us: list[float] | None = None  # each kernel alone (µs), when the search refits its learned model
    refit: str = ""  # what this trial's measurement did to the learned model
    worker: str = ""  # which worker process ran it, when several did (search/workers.py: 'gpu0', 'cpu1', 'main')

    @staticmethod
    def from_trial(t: Any) -> TrialRecord:
        ua = t.user_attrs
        return TrialRecord(t.number, t.state.name.lower(), ua.get("status", t.state.name.lower()), dict(t.params),
                           t.value, ua.get("predicted_us"), ua.get("measured_us"), ua.get("reason", ""),
                           ua.get("kernel_us"), ua.get("refit", ""), str(ua.get("worker", "")))


@dataclass(frozen=True)
class BoundPlan:
    """A compiled plan called as the function it was tuned from: `plan(*args, **kwargs)`."""

    compiled: Any
    signature: Any

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        outs = self.compiled(*self.signature.inputs(args, kwargs))
        return self.signature.outputs(outs)


@dataclass(repr=False)
class TuneResult:
    """What `fusionsearch.tune` returns: `.best` (a Plan) and its time `.best_us` (measured on the gpu
    backend, predicted otherwise), `.trials`, `.study` (the Optuna study, in memory or on the storage: what
    optuna.visualization reads), and compile/export/explain/report."""

    graph: OpGraph
    space: Any
    best: Plan
    best_us: float
    trials: list[TrialRecord]
    backend: str
    hardware: Any
    study_name: str
    elapsed_s: float
    storage: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    cost_model: str = "analytic"  # which model priced the trials: "analytic" or "learned (<GPU it was trained on>)"
    sampler: str = ""
    signature: Any = None  # graph.capture.CallSignature of a tuned function or module: compile() takes its call
    study: Any = None  # the optuna.Study the trials ran in (optuna.visualization.plot_optimization_history(res.study))
    graph_name: str = ""  # what the graph is called in the study's records (the workload, the file, its ops)

    def __repr__(self) -> str:
        """One line (the dataclass's would print the graph, the space, every trial): name, best, trials."""
        return (f"TuneResult({self.graph_name or 'graph'}: best {self.best_us:.1f} us on backend {self.backend}, "
                f"{len(self.trials)} trials, study {self.study_name!r})")

    def workers(self) -> dict[str, int]:
        """Trials by the worker process that ran them (empty for a search of one process)."""
        return dict(Counter(t.worker for t in self.trials if t.worker))

    def counts(self) -> dict[str, int]:
        """Trials by status: measured, pruned (cost model, bytes rule, illegal), invalid, failed."""
        out: dict[str, int] = {}
        for t in self.trials:
            out[t.status] = out.get(t.status, 0) + 1
        return out

    def compile(self, **options: Any) -> Any:
        """The best plan ready to run. Tuned from a function or module, it is called as that function (the
        module's parameters and buffers bound) and returns what the function returns; tuned from a graph, it
        takes the graph's inputs and returns the list of its outputs."""
        compiled = compile_plan(self.best, **options)
        return compiled if self.signature is None else BoundPlan(compiled, self.signature)

    def export(self, directory: str) -> str:
        """Write the best plan's standalone module, plan.json, graph.json and report.md into `directory` (a new or
        an empty one: SpecError, as the CLI's --out, for a file, a link, a directory holding files, a place no file
        can be created in)."""
        path = export_plan(self.best, directory)
        self.graph.save(os.path.join(directory, "graph.json"))
        self.report(os.path.join(directory, "report.md"))
        return path

    def explain(self) -> str:
        """Per kernel of the best plan: what is fused and why, bytes, predicted time; then the trial counts."""
        from fusionsearch.costmodel.analytic import estimate
        from fusionsearch.search.facts import unfused_operands

        est = estimate(self.best, self.hardware)
        g = self.graph
        how = "measured" if self.backend == "gpu" else f"predicted by the {self.cost_model} cost model"
        how += self._finalists_words()
        lines = [f"best plan: {self.best_us:.1f} us ({how}, backend {self.backend}); analytic model "
                 f"{est.time_us:.1f} us; {est.bytes_read / 1e6:.2f} MB read, {est.bytes_written / 1e6:.2f} MB written"]
        for k, ke in zip(self.best.kernels, est.per_kernel, strict=True):
            head = f"  kernel {ke.index}: {k.kind}"
            if isinstance(k, FusedMatmulKernel):
                head += f" {g.node(k.matmul).op} {k.matmul} [{k.config.short()}]"
                unfused = {u["side"]: u for u in unfused_operands(self.best, k, self.backend)}
                for side, nodes in (("A", k.prologue_a), ("B", k.prologue_b)):
                    if nodes:
                        head += f"\n      prologue {side}: {', '.join(nodes)} fused (reads the inputs in the K loop)"
                    elif side in unfused:
                        head += f"\n      prologue {side}: {unfused[side]['node']} not fused ({unfused[side]['why']})"
                if k.epilogue:
                    head += f"\n      epilogue: {', '.join(k.epilogue)} fused"
            elif isinstance(k, LibraryKernel):
                head += f" {g.node(k.matmul).op} {k.matmul} [PyTorch's matmul: cuBLAS; nothing fused]"
            else:
                head += f" [{', '.join(k.nodes)}]"
            figure = "library figure (cuBLAS's measured rates)" if isinstance(k, LibraryKernel) else "roofline model"
            head += (f"\n      {ke.bytes_read / 1e6:.2f} MB read, {ke.bytes_written / 1e6:.2f} MB written, "
                     f"{ke.flops / 1e9:.2f} GFLOP, {figure} {ke.time_us:.1f} us")
            lines.append(head)
        counts = ", ".join(f"{v} {k}" for k, v in sorted(self.counts().items()))
        lines.append(f"trials: {len(self.trials)} ({counts}); search took {self.elapsed_s:.1f} s")
        workers = self.workers()
        if len(workers) > 1:
            lines.append("workers: " + ", ".join(f"{k} ran {v}" for k, v in sorted(workers.items())))
        if self.storage:  # already redacted: a password never reaches a report
            lines.append(f"study {self.study_name} on {self.storage}")
        return "\n".join(lines)

    def _finalists_words(self) -> str:
        """How the best was chosen when the finalists were timed again side by side (gpu backend)."""
        finals = [f for f in self.extra.get("finalists", []) if f.get("final_us") is not None]
        if len(finals) < 2:
            return ""
        figures = ", ".join(f"trial {f['trial']} {f['first_us']:.1f} -> {f['final_us']:.1f}" for f in finals)
        return f" (the {len(finals)} fastest timed again side by side, first -> final us: {figures})"

    def _hardware_words(self) -> str:
        from fusionsearch.search.facts import hardware_words

        return hardware_words(self.backend, getattr(self.hardware, "name", "?"))

    def report(self, path: str) -> str:
        """A markdown report (best plan, explain, trial table) with the study history as a PNG beside it
        when matplotlib is installed."""
        lines = [f"# fusionsearch report: study {self.study_name}", "",
                 f"- backend: {self.backend}; {self._hardware_words()}; cost model: "
                 f"{self.cost_model}; sampler: {self.sampler or '?'}",
                 f"- best: {self.best_us:.2f} us{self._finalists_words()}",
                 f"- trials: {len(self.trials)} {self.counts()}", "",
                 "## Best plan", "", "```", self.best.describe(), "```", "", "## Explain", "", "```",
                 self.explain(), "```", ""]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)  # the PNG is written first
        png = _plot_history(self, os.path.splitext(path)[0] + "_history.png")
        if png:
            lines += [f"![history]({os.path.basename(png)})", ""]
        lines += ["## Trials", "", "| # | status | predicted us | value us | reason |", "|---|---|---|---|---|"]
        for t in self.trials:
            fmt = lambda v: "" if v is None else f"{v:.2f}"  # noqa: E731
            lines.append(f"| {t.number} | {t.status} | {fmt(t.predicted_us)} | {fmt(t.value_us)} | "
                         f"{t.reason.replace('|', '/')[:120]} |")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def to_dict(self) -> dict[str, Any]:
        return {"study": self.study_name, "backend": self.backend, "cost_model": self.cost_model,
                "sampler": self.sampler, "best_us": self.best_us,
                "best_plan": json.loads(self.best.to_json()), "counts": self.counts(), "elapsed_s": self.elapsed_s,
                "finalists": self.extra.get("finalists", []),
                "trials": [t.__dict__ for t in self.trials]}


def _plot_history(result: TuneResult, path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    xs = [t.number for t in result.trials if t.value_us is not None]
    ys = [t.value_us for t in result.trials if t.value_us is not None]
    if not xs:
        return None
    best, run = [], float("inf")
    for y in ys:
        run = min(run, y)
        best.append(run)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.scatter(xs, ys, s=10, label="trial")
    ax.step(xs, best, where="post", color="C1", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel("time (us)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
