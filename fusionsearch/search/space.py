"""The candidate space: fusion options per group of pointwise/layout/indexing nodes, choices per matmul.

A group is a connected set of fusable nodes between matmuls (and graph inputs/outputs). Each group runs
standalone, as the epilogue of a matmul that produces one of its inputs, or as the prologue of a consuming
matmul's A or B operand; only options legal on their own are offered, combinations are checked per trial.
A matmul's choices are those of every registered matmul kind (fusionsearch.kinds) that accepts it, in
registration order; a kind run in PyTorch's own matmul library (KernelKind.runs_in_library) is offered only in
a space built with `library=True` (legal only where nothing is fused into it)."""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from fusionsearch.errors import GraphError, PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds import MatmulKind, get, matmul_kinds
from fusionsearch.plan import (
    FUSABLE,
    MAX_FUSED_DEPTH,
    Decision,
    MatmulKernelMaker,
    Plan,
    TileConfig,
    build_plan,
    fused_decisions,
    prologue_bytes_ok,
    template_operands,
)

__all__ = ["STANDALONE", "Choice", "Group", "Space", "enumerate_space", "fusion_groups", "kind_seed_plans",
           "random_plans", "seed_plans"]

STANDALONE = "standalone"


@dataclass(frozen=True)
class Group:
    """A connected set of fusable nodes and the fusion options legal for it (option labels are generated)."""

    key: str
    nodes: tuple[str, ...]
    options: tuple[str, ...]  # "standalone", "epilogue:<mm key>", "prologue:<mm key>:A|B"


@dataclass(frozen=True)
class Choice:
    """One way to run a matmul: choice `label` of the registered matmul kind `kind`; `value` is the config it
    stands for (MatmulKind.offers: a TileConfig, a kind's own config, or the label itself)."""

    label: str
    kind: str
    value: object


@dataclass(frozen=True)
class Space:
    """Everything a trial chooses: one option per group, one choice of a registered matmul kind per matmul."""

    graph: OpGraph
    groups: tuple[Group, ...]
    matmuls: tuple[str, ...]  # node names; mm keys are "mm<i>"
    choices: tuple[tuple[Choice, ...], ...]  # per matmul, in registration order of the kinds; the first: default
    library: bool = False  # built with the kinds run in PyTorch's matmul library offered too

    @functools.cached_property
    def _by_label(self) -> tuple[dict[str, Choice], ...]:
        """Per matmul, its choices by label: a trial's parameter turns into its kernel by one lookup."""
        return tuple({c.label: c for c in cs} for cs in self.choices)

    @property
    def configs(self) -> tuple[tuple[TileConfig, ...], ...]:
        """Per matmul, the plan TileConfigs among its choices (the kinds whose kernels run on one)."""
        return tuple(tuple(c.value for c in cs if isinstance(c.value, TileConfig)) for cs in self.choices)

    @property
    def others(self) -> tuple[tuple[tuple[str, str], ...], ...]:
        """Per matmul, (label, kind name) of its choices that are neither TileConfigs nor run in the library
        (the decode, grouped and any outside kind's); () when no matmul has one."""
        out = tuple(self._others(i) for i in range(len(self.matmuls)))
        return out if any(out) else ()

    def _others(self, i: int) -> tuple[tuple[str, str], ...]:
        return tuple((c.label, c.kind) for c in self.choices[i]
                     if not isinstance(c.value, TileConfig) and not get(c.kind).runs_in_library)

    def mm_key(self, name: str) -> str:
        return f"mm{self.matmuls.index(name)}"

    def size(self) -> int:
        """Number of distinct (fusion, matmul choice) combinations."""
        return math.prod(len(g.options) for g in self.groups) * math.prod(len(cs) for cs in self.choices)

    def parameter_choices(self) -> dict[str, tuple[str, ...]]:
        """Each trial parameter's name and its choices: one fusion option per group, one matmul kind's choice
        per matmul."""
        out = {f"{grp.key}.fusion": tuple(grp.options) for grp in self.groups}
        out.update({f"mm{i}.config": tuple(c.label for c in cs) for i, cs in enumerate(self.choices)})
        return out

    def suggest(self, trial: Any) -> dict[str, str]:
        """One Optuna trial's parameters, drawn by its sampler."""
        return {name: trial.suggest_categorical(name, list(choices))
                for name, choices in self.parameter_choices().items()}

    def every_params(self) -> Iterator[dict[str, str]]:
        """Every combination of the parameters (size() of them): for exhaustive ground truths."""
        choices = self.parameter_choices()
        for combo in itertools.product(*choices.values()):
            yield dict(zip(choices, combo, strict=True))

    def distinct_plans(self, params: Iterable[Mapping[str, str]] | None = None) -> list[tuple[dict[str, str], Plan]]:
        """(parameters, plan) of each distinct legal plan among `params` (default: every combination), in
        order; of parameters giving one plan, the first is kept; illegal combinations are skipped. Plans of one
        graph are told apart by value (a Plan's equality and hash: kernels, recompute, options), not by their
        JSON, which took a quarter of a 10-matmul search to write."""
        plans: dict[Plan, tuple[dict[str, str], Plan]] = {}
        for p in self.every_params() if params is None else params:
            try:
                plan = self.plan(p)
            except PlanError:
                continue
            plans.setdefault(plan, (dict(p), plan))
        return list(plans.values())

    def decisions(self, choice: Mapping[str, str]) -> dict[str, Decision]:
        """Per-node decisions for one option per group."""
        out: dict[str, Decision] = {}
        for grp in self.groups:
            opt = choice.get(f"{grp.key}.fusion", STANDALONE)
            for n in grp.nodes:
                out[n] = _decision(self, opt, grp.key)
        return out

    def choice(self, i: int, label: object) -> Choice:
        """Matmul `i`'s choice named `label` (its first, the default, when None); PlanError naming an unknown one."""
        if label is None:
            return self.choices[i][0]
        found = self._by_label[i].get(str(label))
        if found is None:
            raise PlanError(f"mm{i}.config: {label!r} is not a choice for matmul {self.matmuls[i]!r} (it has "
                            f"{len(self.choices[i])}, the first {self.choices[i][0].label!r})")
        return found

    def plan(self, params: Mapping[str, object]) -> Plan:
        """The plan for a full set of trial parameters (a matmul without one: its first choice); PlanError when
        the combination is illegal or a choice is not the space's."""
        fusion = {k: str(v) for k, v in params.items() if k.endswith(".fusion")}
        makers = {}
        for i, mm in enumerate(self.matmuls):
            chosen = self.choice(i, params.get(f"mm{i}.config"))
            makers[mm] = _maker(chosen.kind, mm, chosen.label)
            fusion.update(self._required_fusion(i, mm, chosen.kind))
        return build_plan(self.graph, self.decisions(fusion), matmul_kernels=makers)

    def _required_fusion(self, i: int, mm: str, kind_name: str) -> dict[str, str]:
        """The fusion options that the matmul kind `kind_name` needs for matmul `mm` (its required prologue's
        groups as prologues of `mm`), so that a trial choosing the kind never draws an illegal plan."""
        kind = get(kind_name)
        if not isinstance(kind, MatmulKind):
            return {}
        out = {}
        for side, nodes in kind.required_prologue(self.graph, mm).items():
            option = f"prologue:mm{i}:{side}"
            for grp in self.groups:
                if option in grp.options and set(grp.nodes) & set(nodes):
                    out[f"{grp.key}.fusion"] = option
        return out

    def known_good(self, i: int) -> list[str]:
        """Labels of matmul `i`'s choices that their kinds know to run it well (MatmulKind.known_good)."""
        kinds = dict.fromkeys(c.kind for c in self.choices[i])
        mm = self.matmuls[i]
        return [label for name in kinds for label in _matmul_kind(name).known_good(self.graph, mm)
                if label in self._by_label[i]]

    def params_for(self, decisions: Mapping[str, Decision], labels: Mapping[str, str] | None = None,
                   library: bool = False) -> dict[str, str]:
        """Trial parameters reproducing whole-group decisions (used to seed the study with known plans): each
        matmul on its choice in `labels` where the space offers it, else its first; `library`: every matmul on
        the first choice of a kind run in the library (where the space offers one)."""
        params: dict[str, str] = {}
        for grp in self.groups:
            opts = {_decision(self, o, grp.key): o for o in grp.options}
            d = decisions.get(grp.nodes[0], ("standalone",))
            if d[0] == "group":
                d = ("standalone",)
            params[f"{grp.key}.fusion"] = opts.get(d, STANDALONE)
        for i, mm in enumerate(self.matmuls):
            label = (labels or {}).get(mm)
            params[f"mm{i}.config"] = label if label in self._by_label[i] else self.choices[i][0].label
            if library:
                params[f"mm{i}.config"] = next((c.label for c in self.choices[i] if get(c.kind).runs_in_library),
                                               params[f"mm{i}.config"])
        return params

    def describe(self) -> str:
        lines = [f"{len(self.groups)} fusion groups, {len(self.matmuls)} matmuls, {self.size():,} combinations"]
        for grp in self.groups:
            lines.append(f"  {grp.key} [{', '.join(grp.nodes)}]: {', '.join(grp.options)}")
        for i, mm in enumerate(self.matmuls):
            counts: dict[str, int] = {}
            for c in self.choices[i]:
                counts[c.kind] = counts.get(c.kind, 0) + 1
            lines.append(f"  mm{i} {mm}: " + ", ".join(f"{n} {kind}" for kind, n in counts.items()) + " choices")
        return "\n".join(lines)


def _matmul_kind(kind_name: str) -> MatmulKind:
    kind = get(kind_name)
    if not isinstance(kind, MatmulKind):
        raise PlanError(f"kernel kind {kind_name!r} cannot run a matmul")
    return kind


def _maker(kind_name: str, mm: str, label: str) -> MatmulKernelMaker:
    """What builds matmul `mm`'s kernel as choice `label` of the registered matmul kind `kind_name`."""
    return functools.partial(_matmul_kind(kind_name).kernel, mm, label)


def _decision(space: Space, option: str, group_key: str) -> Decision:
    if option == STANDALONE:
        return ("group", group_key)
    parts = option.split(":")
    mm = space.matmuls[int(parts[1].removeprefix("mm"))]
    return ("epilogue", mm) if parts[0] == "epilogue" else ("prologue", mm, parts[2])


def fusion_groups(g: OpGraph) -> list[tuple[str, ...]]:
    """Connected components of the fusable nodes, in topological order of their first node; a component that
    feeds a node outside it whose value comes back into it (a residual add feeding a norm whose mean PyTorch
    runs, then the norm's scale) is cut where it comes back, so that every group can run as one kernel."""
    order = g.topo_order()
    fusable = [n for n in order if g.node(n).kind in FUSABLE]
    sub = g.nx.subgraph(fusable).to_undirected()
    groups: list[tuple[str, ...]] = []
    for comp in nx.connected_components(sub):
        stage = _stages(g, order, comp)
        for level in sorted(set(stage.values())):
            members = [n for n in comp if stage[n] == level]
            for part in nx.connected_components(g.nx.subgraph(members).to_undirected()):
                groups.append(tuple(n for n in order if n in part))
    return sorted(groups, key=lambda c: order.index(c[0]))


def _stages(g: OpGraph, order: list[str], comp: set[str]) -> dict[str, int]:
    """Per member of `comp`, how many times the longest path from the component to it leaves the component
    and comes back: members of one stage never reach one another through a node outside the component."""
    depth: dict[str, int] = {}
    positions = [g.position(n) for n in comp]
    for n in order[min(positions):max(positions) + 1]:  # nothing outside can lead back into the component
        ins = [depth[s] + (1 if n in comp and s not in comp else 0) for s in g.node(n).inputs if s in depth]
        if n in comp or ins:
            depth[n] = max(ins, default=0)
    return {n: depth[n] for n in comp}


def _legal_groups(g: OpGraph, groups_nodes: Sequence[Sequence[str]], matmuls: tuple[str, ...],
                  choices: tuple[tuple[Choice, ...], ...]) -> list[Group]:
    """Each group of fusable nodes with the fusion options legal for it on its own (standalone, the epilogue of
    a matmul it reads, a prologue of a matmul whose operand it makes)."""
    probe = Space(g, tuple(Group(f"g{i}", tuple(nodes), (STANDALONE,)) for i, nodes in enumerate(groups_nodes)),
                  matmuls, choices)
    groups = []
    window = _Window(g, [tuple(nodes) for nodes in groups_nodes])
    for i, nodes in enumerate(groups_nodes):
        key = f"g{i}"
        candidates = [STANDALONE]
        members = set(nodes)
        read = {src for n in nodes for src in g.node(n).inputs}
        for j, mm in enumerate(matmuls):
            if mm in read:
                candidates.append(f"epilogue:mm{j}")
            for side, root in template_operands(g, mm).items():
                if side in ("A", "B") and root in members:
                    candidates.append(f"prologue:mm{j}:{side}")
        legal = [opt for opt in candidates if window.legal(i, _decision(probe, opt, key))]
        groups.append(Group(key, tuple(nodes), tuple(legal)))
    return groups


def enumerate_space(g: OpGraph, fits: object = None, max_configs: int = 48,
                    configs: Mapping[str, tuple[TileConfig, ...]] | None = None, library: bool = False) -> Space:
    """Build the candidate space of a graph: legal options per group, per matmul the choices of every
    registered matmul kind that accepts it (at most `max_configs` a kind; with `library`, those of the kinds
    run in PyTorch's matmul library too). `configs`: per matmul, the tile configs offered instead of the
    candidates of the kinds whose kernels run on one (plan kernels' `has_tile_config`)."""
    matmuls = tuple(g.nodes_of_kind("template"))
    groups_nodes = fusion_groups(g)
    choices = tuple(_choices(g, mm, fits, max_configs, (configs or {}).get(mm), library) for mm in matmuls)
    groups = _legal_groups(g, groups_nodes, matmuls, choices)
    # No kernel can hold such a group whole: first cut it into bands of dependent nodes a kernel can hold (a chain
    # longer than MAX_FUSED_DEPTH), then, for what is still homeless (values of several shapes), its nodes one by one
    for split in (_depth_bands, lambda _, nodes: [(n,) for n in nodes]):
        if all(grp.options for grp in groups):
            break
        groups_nodes = [part for grp in groups for part in ([grp.nodes] if grp.options else split(g, grp.nodes))]
        groups = _legal_groups(g, groups_nodes, matmuls, choices)
    if empty := [grp for grp in groups if not grp.options]:
        raise GraphError(f"no kernel can run node {empty[0].nodes[0]!r} ({g.node(empty[0].nodes[0]).op}) as the "
                         "search builds kernels")
    return Space(g, tuple(groups), matmuls, choices, library)


def _choices(g: OpGraph, mm: str, fits: object, limit: int, tiles: tuple[TileConfig, ...] | None,
             library: bool) -> tuple[Choice, ...]:
    """Matmul `mm`'s choices: each registered matmul kind's offers, in registration order; a label offered by
    two kinds is a PlanError (a trial's label must name one kernel)."""
    out: dict[str, Choice] = {}
    for kind in matmul_kinds():
        if (kind.runs_in_library and not library) or not kind.accepts(g, mm):
            continue
        if tiles and getattr(kind.kernel_type, "has_tile_config", False):
            offers: Iterable[tuple[str, object]] = ((c.short(), c) for c in tiles)
        else:
            offers = kind.offers(g, mm, fits, limit)  # type: ignore[arg-type]
        for label, value in offers:
            if label in out and out[label].kind != kind.name:
                raise PlanError(f"kernel kinds {out[label].kind!r} and {kind.name!r} both offer choice {label!r} "
                                f"for matmul {mm!r}; prefix a kind's labels with its name")
            out.setdefault(label, Choice(label, kind.name, value))
    if not out:
        raise GraphError(f"no registered matmul kind can run matmul {mm!r} ({g.node(mm).op})")
    return tuple(out.values())


def _depth_bands(g: OpGraph, nodes: Sequence[str]) -> list[tuple[str, ...]]:
    """`nodes` (one group, in topological order) cut into bands of dependent nodes one short of MAX_FUSED_DEPTH,
    so that each band fits a kernel beside its matmul; each band's connected parts, in topological order."""
    members, depth = set(nodes), {}
    for n in nodes:
        depth[n] = 1 + max((depth[s] for s in g.node(n).inputs if s in members), default=0)
    bands: dict[int, list[str]] = {}
    for n in nodes:
        bands.setdefault((depth[n] - 1) // (MAX_FUSED_DEPTH - 1), []).append(n)
    order = {n: i for i, n in enumerate(nodes)}
    parts = [tuple(sorted(part, key=order.__getitem__)) for band in bands.values()
             for part in nx.connected_components(g.nx.subgraph(band).to_undirected())]
    return sorted(parts, key=lambda part: order[part[0]])


class _Window:
    """Whether one group's option is legal with every other node in its own kernel, decided on the small
    sub-graph where it can matter: the kernel it forms (the group, and its matmul when fused) and every node on
    a path from that kernel back into it (through which a cycle would run); the rest of the graph cannot make
    the choice illegal. Building the whole plan for each option instead costs O(nodes) an option, O(nodes^2) a
    space (100 chained matmuls: 5 s)."""

    def __init__(self, g: OpGraph, groups: list[tuple[str, ...]]) -> None:
        self.g, self.groups = g, groups
        self.position = {n: i for i, n in enumerate(g.topo_order())}

    def legal(self, gi: int, decision: Decision) -> bool:
        kernel = set(self.groups[gi]) | ({decision[1]} if decision[0] in ("epilogue", "prologue") else set())
        inside = self._closure(kernel)
        try:
            build_plan(self._subgraph(inside), {n: decision for n in self.groups[gi]})
        except PlanError:
            return False
        return True

    def _closure(self, kernel: set[str]) -> set[str]:
        """`kernel` with every node on a path leaving it and coming back."""
        lo, hi = min(self.position[n] for n in kernel), max(self.position[n] for n in kernel)
        down = self._reach(kernel, forward=True, bound=hi)
        up = self._reach(kernel, forward=False, bound=lo)
        return kernel | (down & up)

    def _reach(self, start: set[str], forward: bool, bound: int) -> set[str]:
        """Nodes reachable from `start` (not counting it) along edges (or against them), staying within the
        topological positions that can still lead back to it."""
        step = self.g.nx.successors if forward else self.g.nx.predecessors
        seen: set[str] = set()
        frontier = list(start)
        while frontier:
            n = frontier.pop()
            for m in step(n):
                if m in seen or m in start:
                    continue
                if (self.position[m] > bound) if forward else (self.position[m] < bound):
                    continue
                seen.add(m)
                frontier.append(m)
        return seen

    def _subgraph(self, inside: set[str]) -> OpGraph:
        """The nodes `inside`, under their own names, reading what they need from outside as inputs; their
        values read outside (or returned by the graph) are its outputs."""
        g, sub = self.g, OpGraph()
        order = sorted(inside, key=self.position.__getitem__)
        for n in order:
            for src in g.node(n).inputs:
                if src not in inside and src not in sub:
                    node = g.node(src)
                    sub.input(src, node.shape, node.dtype, node.strides if node.op == "input" else None)
        for n in order:
            node = g.node(n)
            sub.add_op(node.op, list(node.inputs), dict(node.attrs), name=n)
        outputs = set(g.outputs)
        sub.set_outputs([n for n in order if n in outputs or any(c not in inside for c in g.consumers(n))]
                        or order[-1:])
        return sub


def random_plans(space: Space, count: int, rng: random.Random, plans: dict[str, Plan] | None = None
                 ) -> list[Plan]:
    """Up to `count` distinct legal plans drawn uniformly (one option per group, one config per matmul),
    added to `plans` (keyed by plan JSON) when given; illegal draws are skipped, 20 draws a plan at most."""
    plans = {} if plans is None else plans
    config_choices = {name: c for name, c in space.parameter_choices().items() if name.endswith(".config")}
    for _ in range(20 * count):
        if len(plans) >= count:
            break
        params = {f"{grp.key}.fusion": rng.choice(grp.options) for grp in space.groups}
        params |= {name: rng.choice(choices) for name, choices in config_choices.items()}
        try:
            plan = space.plan(params)
        except PlanError:
            continue
        plans.setdefault(plan.to_json(), plan)
    return list(plans.values())[:count]


def seed_plans(space: Space) -> list[dict[str, str]]:
    """Parameters of the plans every study starts from: all unfused, and the heuristic (epilogues fused,
    prologues by the bytes rule), each with the default and the first two known-good choices
    (MatmulKind.known_good); where the space offers the library, also all unfused with every matmul in it (what
    eager PyTorch runs); where it offers other matmul kinds, the heuristic on their first choices."""
    g = space.graph
    fused = fused_decisions(g, prologue_bytes_ok)
    seeds = [space.params_for({}), space.params_for(fused)]
    for j in range(2):  # the heuristic and the unfused plan with the first known-good choices
        labels = {}
        for i, mm in enumerate(space.matmuls):
            good = space.known_good(i)
            if good:
                labels[mm] = good[j % len(good)]
        seeds += [space.params_for(fused, labels), space.params_for({}, labels)]
    if space.library:
        seeds.append(space.params_for({}, library=True))
    seeds += kind_seed_plans(space)
    return [dict(s) for s in {tuple(sorted(s.items())): s for s in seeds}.values()]


def kind_seed_plans(space: Space) -> list[dict[str, str]]:
    """Per other matmul kind the space offers (decode: M <= 16; grouped: mixture-of-experts bmms), the
    heuristic plan with every matmul that kind accepts on its first choice (its known-good config first). The
    ranked sampler measures these too: a known-good config of a form the learned model's features cannot tell
    apart (the decode kind's `rows`) would otherwise wait behind its twins."""
    fused = fused_decisions(space.graph, prologue_bytes_ok)
    seeds = []
    for kind in dict.fromkeys(name for i in range(len(space.matmuls)) for _, name in space._others(i)):
        other = {f"mm{i}.config": next(label for label, name in space._others(i) if name == kind)
                 for i in range(len(space.matmuls)) if any(name == kind for _, name in space._others(i))}
        seeds.append({**space.params_for(fused), **other})
    return seeds
