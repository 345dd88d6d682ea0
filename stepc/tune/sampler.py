"""Search spaces too large to enumerate: Optuna's TPE sampler picks which candidates go
through the analysis and the fluid screen (`pip install 'stepc[tune]'`); the best screened
ones are then confirmed as in an exhaustive search."""

from __future__ import annotations

from stepc.spelling import given
from stepc.tune.space import Candidate, TuneError


def sample(search, trials: int, seed: int, why: str) -> None:
    """Run `trials` candidates chosen by Optuna (in batches of the worker count), then
    confirm the best screened ones; `why` says why the sampler runs (for its error)."""
    try:
        import optuna
    except ImportError:
        raise TuneError(f"{why}: the sampler needs Optuna: pip install 'stepc[tune]' (or "
                        f"{given('sampler', 'grid')})") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space, declared = search.space, search.declared
    study = optuna.create_study(directions=["minimize"] * len(search.objectives),
                                sampler=optuna.samplers.TPESampler(seed=seed))
    hw_keys = sorted(space.hw_keys)
    seen: dict[Candidate, object] = {}
    asked = 0
    while asked < trials:
        batch = []
        for _ in range(min(max(1, search.jobs), trials - asked)):
            trial = study.ask()
            program = trial.suggest_categorical("program", list(space.programs))
            params = tuple((n, trial.suggest_categorical(n, space.params[n]))
                           for n in space.dims(declared[program]))
            sets = tuple(f"{k}={trial.suggest_categorical(k, space.hw_keys[k])}"
                         for k in hw_keys)
            batch.append((trial, Candidate(program, params, sets)))
            asked += 1
        new = list(dict.fromkeys(c for _, c in batch if c not in seen))
        for s in search.analyze(new):
            seen[s.candidate] = s
        for s in search.scored:
            seen.setdefault(s.candidate, s)
        search.screen([seen[c] for c in new if seen[c].status == "analyzed"])
        for trial, cand in batch:
            s = seen[cand]
            if s.status in ("screened", "confirmed"):
                study.tell(trial, list(search.cost(s.fluid)))
            else:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    search.counts["sampled_trials"] = trials
    search.log(f"sampler: {trials} trials, {len(search.scored)} distinct candidates")
    pool = search.resolve_relative_budgets([s for s in search.scored
                                            if s.status == "screened"])
    search.confirm_best([s for s in pool if s.status in ("screened", "confirmed")])
