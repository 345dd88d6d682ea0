"""The multi-fidelity search behind `stepc tune`.

Stages, each cheaper than the next (what they decide is in stepc/tune/pruning.py):
  1. analyze: compile, check and analyze every candidate; budgets on analysis metrics
     (on-chip bytes, off-chip bytes, FLOPs, allocated compute) prune with exact numbers.
  2. roofline: a candidate whose lower bound on cycles exceeds the incumbent (the best
     schedule the confirming model simulated so far) cannot win and is pruned. Sound: the
     bound is below the confirming model's cycle counts (fluid's may dip under it), and
     mean, max and percentiles only grow with their values.
  3. fluid: the fluid memory model simulates the remaining candidates and ranks them; a
     candidate it puts more than `margin` behind the incumbent is screened out (a model's
     judgement, not a bound: the report gives the rank agreement with the confirming model).
  4. confirm: the chosen model (`ref` by default) simulates the candidates left, best
     by fluid first; the winner is the best confirmed schedule. With the `adaptive` policy
     (the default) a candidate is confirmed only if it could still win once fluid's error
     is taken into account: the ratio of the confirming model to fluid observed on the
     confirmed points of the same program scales its fluid value at its most favourable; a
     program without a confirmed point is judged by the margin alone. Candidates within the
     margin that this rules out are reported as not confirmed (policy `margin` confirms
     them all).
With one objective, cycles, fluid screens in order of the lower bound while the next bound
is within the margin of the best fluid cycles, then the fluid best is confirmed and the
roofline prunes the rest before their fluid runs; other objectives screen every candidate
within budget first. With a probe (`probe=N`), the N candidates with the lowest bounds are
screened first and the best of them confirmed.
A relative budget (`cycles=1.05*min`) first searches for the fastest schedule, then for the
best in the objective among those within the factor of it.
"""

from __future__ import annotations

import itertools
import math
import os
import tempfile
import time
from collections import Counter

from stepc.explore.runner import ResultsFileError, compile_cached, read_results
from stepc.measure import METRICS as MEASURED
from stepc.outputs import OutputPathError, check_output_path
from stepc.spelling import given, label, switch
from stepc.tune.evaluate import AnalysisJob, analyze_candidate, hardware, sim_command, sim_points
from stepc.tune.pruning import Pruning
from stepc.tune.result import RUNNERS_UP, Scored, TuneResult, kendall_tau, pareto_front
from stepc.tune.space import (
    ANALYSIS_METRICS,
    SIM_METRICS,
    Budget,
    Candidate,
    Objective,
    Space,
    TuneError,
    aggregate,
    percentile,
)
from stepc.tune.workers import CandidatePool, can_fork


class Search(Pruning):
    """The state of one search; `run` goes through the stages."""

    def __init__(self, space: Space, budgets: list[Budget], objectives: list[Objective],
                 traces: dict[str, list[str]], how: str, hw: str, sets: tuple[str, ...],
                 model: str, out: str, resume: bool, executor, margin: float,
                 max_confirm: int | None, jobs: int, log, probe: int = 0,
                 policy: str = "adaptive", fifo_bytes: bool = False):
        self.space, self.budgets, self.objectives = space, budgets, objectives
        self.how, self.hw, self.sets, self.model = how, hw, tuple(sets), model
        self.out, self.resume, self.executor = out, resume, executor
        self.margin, self.max_confirm, self.jobs, self.log = margin, max_confirm, jobs, log
        self.probe, self.policy, self.fifo_bytes = probe, policy, fifo_bytes
        self.counts: Counter = Counter()
        self.seconds: Counter = Counter()  # wall time per stage: analyze, screen, confirm
        self.traces = traces
        self.cases = [tuple(zip(sorted(traces), paths)) for paths in
                      itertools.product(*(traces[n] for n in sorted(traces)))]
        self._arrays: dict[str, object] = {}
        self._files: dict[str, dict[str, bytes]] = {}
        self._digests: dict[str, str] = {}  # program -> digest of its files
        self._hw: dict[tuple, object] = {}
        self._same_analysis: dict[tuple, tuple[str, ...]] = {}  # see `load`
        self.declared: dict[str, set[str]] = {}
        self.scored: list[Scored] = []
        self.incumbent: Scored | None = None

    # ------------------------------------------------------------ setup
    def load(self) -> None:
        """Read programs, traces and hardware; refuse names no program declares."""
        from stepc.explore.runner import program_digest
        from stepc.frontend import compile_file, program_files
        from stepc.hw import ConfigError
        from stepc.traces import TraceError, load_array

        for program in self.space.programs:
            self._files[program] = program_files(program)
            result = compile_cached(self._files[program], program, {})  # parsed for the workers
            if result.typed is None or not result.ok:
                result = compile_file(program, {})  # its diagnostics, as `stepc check` words them
                errs = result.diagnostics.errors
                msg = f"{errs[0].span}: {errs[0].message}" if errs and errs[0].span else \
                    (errs[0].message if errs else "does not compile")
                raise TuneError(f"{program}: {msg}")
            self.declared[program] = set(result.typed.program.params)
            self._digests[program] = program_digest(self._files[program])
        every = set().union(*self.declared.values())
        for name in list(self.space.params) + list(self.space.fixed):
            if name not in every:
                raise TuneError(f"{name}: no program of the search declares a param "
                                f"`{name}`")
        for c in self.space.where:
            unknown = sorted(c.names - every)
            if unknown:
                raise TuneError(f"--where {c.text}: no program declares `{unknown[0]}`")
        for stream, paths in self.traces.items():
            if not paths:
                raise TuneError(f"{given('traces', stream)}: no trace file given")
        for case in self.cases:
            for stream, path in case:
                if path not in self._arrays:
                    try:
                        self._arrays[path] = load_array(path)
                    except (OSError, TraceError) as e:
                        raise TuneError(f"{given('traces', stream)}: {e}") from None
        for values in itertools.product(*(self.space.hw_keys[k]
                                          for k in sorted(self.space.hw_keys))):
            extra = tuple(f"{k}={v}" for k, v in zip(sorted(self.space.hw_keys), values))
            try:
                self._hw[extra], self._same_analysis[extra] = \
                    hardware(self.hw, self.sets + extra, self.model)
            except ConfigError as e:
                raise TuneError(str(e)) from None

    def overrides(self, cand: Candidate) -> dict[str, int]:
        declared = self.declared[cand.program]
        return {**{k: v for k, v in self.space.fixed.items() if k in declared},
                **dict(cand.params)}

    # ------------------------------------------------------------ stage 1: analyze
    def analyze(self, cands: list[Candidate]) -> list[Scored]:
        """Stage 1 for a batch: where-conditions, check, exact analysis, budgets."""
        t0 = time.perf_counter()
        batch = [Scored(c, self.overrides(c)) for c in cands]
        self.scored += batch
        jobs = {}
        for s in batch:
            # conditions on the point's own values are decided before compiling
            early = [w for w in self.space.where if w.names <= s.overrides.keys()]
            failed = next((w for w in early if not w.holds(s.overrides)), None)
            if failed is not None:
                s.status, s.reason = "excluded", f"--where {failed.text}"
                continue
            program = s.candidate.program
            shared = isinstance(self.executor, CandidatePool)
            key = (self._digests[program], program, tuple(sorted(s.overrides.items()))) \
                if shared else None
            job = AnalysisJob(s.candidate, self._files[program], s.overrides,
                              self._hw[s.candidate.sets],
                              [{st: self._arrays[p] for st, p in case}
                               for case in self.cases],
                              [w for w in self.space.where if w not in early], key,
                              self._same_analysis[s.candidate.sets] if shared else (),
                              self.fifo_bytes)
            jobs[self.executor.submit(analyze_candidate, job)] = s
        for fut, s in jobs.items():
            rec = fut.result()
            s.status, s.reason = rec["status"], rec.get("reason", "")
            if s.status == "ok":
                s.analysis = rec["cases"]
                s.status = "analyzed"
                self._apply_analysis_budgets(s)
        for s in batch:
            self.counts[{"excluded": "excluded_by_where", "infeasible": "infeasible",
                         "over_budget": "over_budget_analysis"}.get(s.status, "analyzed")] += 1
        self.seconds["analyze"] += time.perf_counter() - t0
        return [s for s in batch if s.status == "analyzed"]

    def _apply_analysis_budgets(self, s: Scored) -> None:
        for b in self.budgets:
            if b.exact_before_simulation:
                values = [c[b.metric] for c in s.analysis]
                if None in values:
                    s.status = "infeasible"
                    s.reason = f"{b.metric} stays symbolic under the traces"
                    return
                worst = max(values)
            elif b.metric == "cycles":  # the bound on cycles is exact as a bound
                worst = max(c["lower_bound_cycles"] or 0 for c in s.analysis)
            else:
                continue
            if worst > b.limit:
                s.status, s.reason = "over_budget", f"{b.metric} {worst:,.0f} > {b.limit:,.0f}"
                return

    # ------------------------------------------------------------ stages 3 and 4: simulate
    def _simulate(self, batch: list[Scored], model: str | None, path: str, tag: str) -> None:
        from stepc.explore.runner import Sweep

        points, owner = [], []
        for s in batch:
            for p in sim_points(s.candidate, s.overrides, self.hw, self.sets, self.cases,
                                model, tag):
                points.append(p)
                owner.append(s)
        if not points:
            return
        sweep = Sweep(points, path, self.jobs, self.executor)
        t0 = time.perf_counter()
        outcome = sweep.submit(self.executor, resume=True).collect()
        self.seconds[tag] += time.perf_counter() - t0
        self.counts[f"{tag}_points_reused"] += outcome.reused
        self.counts[f"{tag}_points_simulated"] += outcome.ran
        by_cand: dict[int, list[dict]] = {}
        for rec, s in zip(outcome.records, owner):
            by_cand.setdefault(id(s), []).append(rec)
        for s in batch:
            recs = by_cand[id(s)]
            bad = next((r for r in recs if r["status"] != "ok"), None)
            target = s.fluid if tag == "screen" else s.confirmed
            if bad is not None:
                s.status, s.reason = "failed", f"{tag}: {bad['status']} {bad.get('error', '')}"
                continue
            for m in SIM_METRICS:
                vals = [r.get(m) for r in recs]
                if None not in vals:
                    target[m] = aggregate(vals, self.how)
                    if tag == "confirm":
                        s.worst[m] = max(vals)
            for m in ANALYSIS_METRICS:
                vals = [c[m] for c in s.analysis]
                if None not in vals:
                    target[m] = aggregate(vals, self.how)

    def screen(self, batch: list[Scored]) -> None:
        """Stage 3: the fluid model."""
        todo = [s for s in batch if s.status == "analyzed"]
        self._simulate(todo, "fluid", os.path.join(self.out, "screen.jsonl"), "screen")
        for s in todo:
            if s.status != "failed":
                s.status = "screened"

    def confirm(self, s: Scored) -> None:
        """Stage 4: the confirming model; the candidate may become the incumbent."""
        self._simulate([s], self.model, os.path.join(self.out, "results.jsonl"), "confirm")
        if s.status == "failed":
            return
        s.status = "confirmed"
        self._check_simulated_budgets(s)
        if s.status == "confirmed" and (self.incumbent is None or self.cost(s.confirmed) <
                                        self.cost(self.incumbent.confirmed)):
            self.incumbent = s

    def _check_simulated_budgets(self, s: Scored) -> None:
        for b in self.budgets:
            if not b.exact_before_simulation and s.worst.get(b.metric, 0) > b.limit:
                s.status = "over_budget"
                s.reason = f"{b.metric} {s.worst[b.metric]:,.0f} > {b.limit:,.0f}"
                return

    # ------------------------------------------------------------ the search
    def run(self, cands: list[Candidate]) -> None:
        """Stages 1 to 4 over the given candidates (all of the space, or a sampler's)."""
        alive = self.analyze(cands)
        self.log(f"analyze: {len(alive)} of {len(cands)} candidates within budget")
        alive = self.resolve_relative_budgets(alive)
        self.search(alive)

    def resolve_relative_budgets(self, alive: list[Scored]) -> list[Scored]:
        """Give relative budgets (`F*min`, `F*max`) their limits: over the analyzed
        candidates for an analysis metric (exact); for cycles, by a search for the fastest
        schedule first. Returns the candidates still in play."""
        for i, b in enumerate(self.budgets):
            if b.factor is None or not b.exact_before_simulation:
                continue
            values = [self._exact(s, b.metric) for s in alive]
            known = [v for v in values if v is not None]
            if known:
                self.budgets[i] = b.resolved(max(known) if b.relative_to == "max"
                                             else min(known))
                for s in alive:
                    self._apply_analysis_budgets(s)
        alive = [s for s in alive if s.status in ("analyzed", "screened")]
        relative = [i for i, b in enumerate(self.budgets) if b.factor is not None and
                    math.isnan(b.limit)]
        if not relative:
            return alive
        if len(relative) > 1 or self.budgets[relative[0]].metric != "cycles":
            raise TuneError("a relative budget on a simulated metric must be on cycles, "
                            "and only one")
        goal, budgets = self.objectives, self.budgets
        self.objectives = [Objective("cycles")]
        self.budgets = [b for b in budgets if b.factor is None or not math.isnan(b.limit)]
        self.search(alive)
        fastest = self.incumbent
        self.objectives, self.budgets, self.incumbent = goal, budgets, None
        if fastest is None:
            return []
        self.budgets[relative[0]] = budgets[relative[0]].resolved(fastest.confirmed["cycles"])
        self.log(f"fastest schedule: {fastest.candidate.label()}; budget "
                 f"{self.budgets[relative[0]].text()}")
        for s in alive:  # what the fastest search left undecided is in play again
            if s.status in ("pruned", "screened_out", "unconfirmed"):
                s.status, s.reason = ("screened" if s.fluid else "analyzed"), ""
            if s.status == "confirmed":
                self._check_simulated_budgets(s)
            elif s.status in ("analyzed", "screened"):
                self._apply_analysis_budgets(s)
        done = [s for s in alive if s.status == "confirmed"]
        self.incumbent = min(done, key=lambda s: self.cost(s.confirmed)) if done else None
        return [s for s in alive if s.status in ("analyzed", "screened", "confirmed")]

    def search(self, alive: list[Scored]) -> None:
        """Stages 2 to 4 over analyzed candidates."""
        alive.sort(key=lambda s: s.lower_bound(self.how))
        if self.probe:
            probe = [s for s in alive[:self.probe] if s.status == "analyzed"]
            self.screen(probe)
            screened = [s for s in probe if s.status == "screened"]
            if screened and self.incumbent is None:
                self.confirm(min(screened, key=lambda s: self.cost(s.fluid)))
        if self.bounded() and self.incumbent is None:
            self.screen_up_to_bound(alive)
        rest = []
        for s in alive:
            if s.status in ("analyzed", "screened") and self.beaten_by_bound(s):
                s.status, s.reason = "pruned", "lower bound above the incumbent"
            elif s.status == "analyzed":
                rest.append(s)
        self.screen(rest)
        self.log(f"roofline and fluid: {sum(s.status == 'pruned' for s in alive)} pruned by the "
                 f"bound, {sum(bool(s.fluid) for s in alive)} simulated with the fluid model")
        self.confirm_best([s for s in alive if s.status in ("screened", "confirmed")])

    def screen_up_to_bound(self, alive: list[Scored]) -> None:
        """Screen in order of the lower bound, a batch of worker-count candidates at a
        time, while the next bound is within the margin of the best fluid cycles so far;
        then confirm the fluid best, so the roofline prunes the rest (soundly, against
        its confirmed cycles) before their fluid runs. A candidate left unscreened here
        that fluid would rank first costs one more confirming run later, never a wrong
        winner: it could only be one whose fluid cycles fall below its own bound by more
        than the margin."""
        todo = [s for s in alive if s.status == "analyzed"]  # sorted by bound
        best = math.inf
        step = max(1, self.jobs)
        while todo and todo[0].lower_bound(self.how) <= best * (1 + self.margin):
            batch, todo = todo[:step], todo[step:]
            self.screen(batch)
            best = min([best] + [s.fluid.get("cycles", math.inf) for s in batch
                                 if s.status == "screened"])
        screened = [s for s in alive if s.status == "screened"]
        if screened and todo:
            self.confirm(min(screened, key=lambda s: self.cost(s.fluid)))

    def confirm_best(self, pool: list[Scored]) -> None:
        """Stage 4 in fluid order. Before each run: the bound, the margin, and (policy
        `adaptive`) whether fluid's error observed on the confirmed points leaves the
        candidate a chance to win; candidates within the margin that it rules out are
        reported as not confirmed."""
        pool.sort(key=lambda s: self.cost(s.fluid))
        for s in pool:
            if s.status != "screened":
                continue
            if self.beaten_by_bound(s):
                s.status, s.reason = "pruned", "lower bound above the incumbent"
                continue
            if len(self.objectives) == 1:  # the best confirmed point within budget
                reference = [self.incumbent] if self.incumbent is not None else []
            else:  # the fluid front of the points not known to break a budget
                usable = [q for q in pool if q.status in ("screened", "confirmed")]
                reference = [usable[i] for i in pareto_front(usable,
                                                             lambda q: self.cost(q.fluid))]
            if not self.close_enough(s, [q for q in reference if q is not s]):
                s.status, s.reason = "screened_out", \
                    f"fluid puts it more than {self.margin:.0%} behind"
                continue
            if self.policy == "adaptive":
                over = self.over_budget_by_fluid(s)
                if over:
                    s.status, s.reason = "screened_out", over
                    continue
                if self.cannot_win_by_fluid(s):
                    s.status, s.reason = "unconfirmed", self._gap_text(s) + \
                        "; cannot win after fluid's error on its program's confirmed points"
                    continue
            if self.max_confirm is not None and self.ref_runs() >= self.max_confirm:
                s.status, s.reason = "unconfirmed", self._gap_text(s) + \
                    "; --max-confirm reached"
                continue
            self.confirm(s)

    def ref_runs(self) -> int:
        return sum(bool(s.confirmed) for s in self.scored)

    def _gap_text(self, s: Scored) -> str:
        """How far fluid puts `s` from the incumbent, in its first simulated objective."""
        o = next((o for o in self.objectives if o.metric not in ANALYSIS_METRICS), None)
        inc = self.incumbent
        if o is None or inc is None or not inc.fluid.get(o.metric):
            return "within the margin per fluid"
        gap = s.fluid.get(o.metric, math.inf) / inc.fluid[o.metric] - 1
        return f"{gap:+.2%} {o.metric} from the winner per fluid"

    # ------------------------------------------------------------ the result
    def stage_counts(self, space_size: int) -> dict[str, int]:
        """What each stage removed, from the candidates' final states."""
        st = Counter(s.status for s in self.scored)
        over_sim = sum(s.status == "over_budget" and bool(s.confirmed) for s in self.scored)
        stages = {"space": space_size, "candidates": len(self.scored),
                  "excluded_by_where": st["excluded"], "infeasible": st["infeasible"],
                  "over_budget_analysis": st["over_budget"] - over_sim,
                  "analyzed": self.counts["analyzed"],
                  "pruned_by_roofline": st["pruned"],
                  "screened": sum(bool(s.fluid) for s in self.scored),
                  "screened_out_by_fluid": st["screened_out"],
                  "not_confirmed": st["unconfirmed"],
                  "confirmed": self.ref_runs(),
                  "over_budget_simulated": over_sim, "failed": st["failed"]}
        for name in ("screen_points_simulated", "screen_points_reused",
                     "confirm_points_simulated", "confirm_points_reused", "sampled_trials"):
            if name in self.counts or not name.startswith("sampled"):
                stages[name] = self.counts[name]
        return stages

    def result(self, t0: float, space_size: int) -> TuneResult:
        done = [s for s in self.scored if s.status == "confirmed"]
        done.sort(key=lambda s: self.cost(s.confirmed))
        winner = done[0] if done else None
        if len(self.objectives) == 2:
            pareto = [done[i] for i in pareto_front(done, lambda s: self.cost(s.confirmed))]
        else:
            o = self.objectives[0]
            second = Objective("on_chip_bytes")
            pareto = [done[i] for i in pareto_front(
                done, lambda s: (o.key(s.confirmed.get(o.metric, math.inf)),
                                 second.key(s.confirmed.get("on_chip_bytes", math.inf))))]
        sim = next((o for o in self.objectives if o.metric not in ANALYSIS_METRICS),
                   Objective("cycles"))
        both = [s for s in self.scored if s.confirmed and sim.metric in s.fluid and
                sim.metric in s.confirmed]
        agree = {"points": len(both), "metric": sim.metric,
                 "kendall_tau": kendall_tau([s.fluid[sim.metric] for s in both],
                                            [s.confirmed[sim.metric] for s in both])}
        command = sim_command(winner.candidate, winner.overrides, self.hw, self.sets,
                              self.cases[0], self.model) if winner else ""
        runners = done[1:1 + RUNNERS_UP]
        if len(runners) < RUNNERS_UP:  # then the best that only the fluid model ran
            fluid_only = sorted((s for s in self.scored if s.fluid and not s.confirmed and
                                 s.status in ("screened_out", "pruned", "unconfirmed")),
                                key=lambda s: self.cost(s.fluid))
            runners += fluid_only[:RUNNERS_UP - len(runners)]
        unconfirmed = sorted((s for s in self.scored if s.status == "unconfirmed"),
                             key=lambda s: self.cost(s.fluid))
        return TuneResult(winner, runners, pareto, self.stage_counts(space_size), agree,
                          self.objectives, self.budgets, self.how, self.model,
                          time.perf_counter() - t0, command, space_size, self.scored,
                          unconfirmed, self.policy, self.margin,
                          {k: round(v, 3) for k, v in self.seconds.items()}, self.fifo_bytes)


def tune(space: Space, *, objectives: list[Objective], budgets: list[Budget] = (),
         traces: dict[str, list[str]] | None = None, aggregate: str = "max",
         hw: str = "paper-eval", sets: tuple[str, ...] = (), model: str = "ref",
         out: str | None = None, resume: bool = False, jobs: int | None = None,
         executor=None, margin: float = 0.05, max_confirm: int | None = None,
         sampler: str = "auto", trials: int | None = None, max_exhaustive: int = 512,
         seed: int = 0, probe: int = 0, confirm: str = "adaptive",
         fifo_bytes: bool = False, log=None) -> TuneResult:
    """The best schedule of `space` under `budgets` for `objectives` (one, or two for a
    Pareto front), aggregated over `traces` by `aggregate` (mean, max or pNN).

    Results go to `out` (a directory: `screen.jsonl` holds the fluid runs, `results.jsonl`
    the confirmed ones, both in `stepc sweep`'s format); `resume` reuses their records.
    `sampler` is `grid` (every point), `optuna` (`trials` points chosen by Optuna's TPE
    sampler) or `auto` (grid up to `max_exhaustive` points). `margin`: confirm what the
    fluid screen puts within this fraction of the best; `confirm`: `adaptive` (skip those
    that fluid's error observed on confirmed points rules out) or `margin` (confirm them
    all); `probe`: see the module doc; `fifo_bytes`: the on-chip bytes (budgets, objectives,
    reports) count every FIFO at its depth (`stepc analyze --fifo-bytes`)."""
    from stepc.explore.runner import LocalPool

    t0 = time.perf_counter()
    if not 1 <= len(objectives) <= 2:
        raise TuneError("give one objective, or two for a Pareto front")
    if not isinstance(margin, (int, float)) or not math.isfinite(margin) or margin < 0:
        raise TuneError(f"--margin {margin}: expected a finite fraction >= 0, e.g. 0.05")
    percentile(aggregate)
    if sampler not in ("auto", "grid", "optuna"):
        raise TuneError(f"--sampler {sampler}: expected auto, grid or optuna")
    if confirm not in ("adaptive", "margin"):
        raise TuneError(f"--confirm {confirm}: expected adaptive or margin")
    for m in dict.fromkeys(x.metric for x in (*objectives, *budgets)):
        only = MEASURED[m].memory_model
        if only is not None and model != only:
            raise TuneError(f"{m}: only the {only} memory model measures it (--model {only})")
    log = log or (lambda msg: None)
    own_dir = tempfile.TemporaryDirectory(prefix="stepc-tune-") if out is None else None
    out = own_dir.name if own_dir else out
    try:
        check_output_path(label("out"), out, directory=True)
    except OutputPathError as e:
        raise TuneError(str(e)) from None
    os.makedirs(out, exist_ok=True)
    for name in ("screen.jsonl", "results.jsonl"):
        path = os.path.join(out, name)
        if os.path.exists(path) and not resume:
            raise TuneError(f"{path} exists: add {switch('resume')} to continue that search, "
                            f"or choose another {label('out')}")
        if os.path.exists(path):
            try:
                read_results(path)
            except ResultsFileError as e:
                raise TuneError(f"--resume: {e}") from None
    jobs = jobs or os.cpu_count() or 1
    search = Search(space, list(budgets), list(objectives), traces or {}, aggregate,
                    hw, tuple(sets), model, out, resume, executor, margin, max_confirm, jobs,
                    log, probe, confirm, fifo_bytes)
    try:
        search.load()
        if executor is None:  # forked now, the workers start with the parsed programs
            search.executor = CandidatePool(jobs) if can_fork() else LocalPool(jobs)
        size = space.size(search.declared)
        use_sampler = sampler == "optuna" or (sampler == "auto" and size > max_exhaustive)
        if use_sampler:
            from stepc.tune.sampler import sample
            why = given("sampler", "optuna") if sampler == "optuna" else \
                f"the space has {size:,} candidates, more than {max_exhaustive:,} to enumerate"
            sample(search, trials or min(size, max(64, size // 10)), seed, why)
        else:
            search.run(list(space.candidates(search.declared)))
        return search.result(t0, size)
    finally:
        if executor is None and search.executor is not None:
            search.executor.shutdown()
        if own_dir is not None:
            own_dir.cleanup()
