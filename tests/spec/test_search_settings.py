"""Search settings are declared once, by the searchers (search/_settings.py): the
spec's search models and the `nestor sweep` flags are made from those declarations."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from nestor.orchestrator.commands.sweep import build_spec, search_flags, spec_yaml
from nestor.orchestrator.spec import load_spec_text
from nestor.orchestrator.spec.model import ALGORITHMS, SEARCH_MODELS
from nestor.search import make_searcher, settings_class
from nestor.search._settings import Declared, declared
from nestor.search.space import FloatParam, SearchSpace

SPEC_ONLY = {"algorithm", "fidelity", "warm_start", "enqueue", "constraints",
             "wall_s"}  # the stage's


def defaults(algorithm: str) -> dict:
    return {s.name: s.default for s in declared(settings_class(algorithm), public_only=True)}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_spec_has_the_searchers_settings_and_defaults(algorithm: str) -> None:
    model = SEARCH_MODELS[algorithm]
    spec = {name: field.get_default(call_default_factory=True)
            for name, field in model.model_fields.items() if name not in SPEC_ONLY}
    assert spec == defaults(algorithm)
    for setting in declared(settings_class(algorithm), public_only=True):
        assert model.model_fields[setting.name].description == setting.info.help


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "auto"])
def test_a_searcher_built_from_the_spec_defaults_is_the_default_searcher(algorithm: str) -> None:
    space = SearchSpace([FloatParam("x", 0.0, 1.0), FloatParam("y", 1e-3, 1.0, log=True)])
    spec = SEARCH_MODELS[algorithm](algorithm=algorithm)
    from_spec = make_searcher(algorithm, space, [("loss", "min")], **spec.settings())
    plain = make_searcher(algorithm, space, [("loss", "min")])
    assert from_spec.state()["settings"] == plain.state()["settings"]


def sweep(algorithm: str, **options: object) -> dict:
    return build_spec(trainer=None, command="python3 fit.py", params=["x=float:0:1"],
                      settings=[], algorithm=algorithm, budget=None, metric=None, mode="min",
                      result_pattern=None, dp=1, mp=1, parallel=None, slots=None, seed=0,
                      checkpoints=True, **options)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_sweep_without_search_flags_runs_the_searchers_defaults(algorithm: str) -> None:
    """No flag of a search's given: its block is only algorithm and seed, so the
    spec's default (the searcher's) applies, and the flag's help names it."""
    search = sweep(algorithm)["stages"][0]["search"]
    assert search == {"algorithm": algorithm, "seed": 0}
    loaded = load_spec_text(spec_yaml(sweep(algorithm))).stage("sweep").search
    declared_defaults = defaults(algorithm)
    assert {k: getattr(loaded, k) for k in declared_defaults} == declared_defaults
    for flag in search_flags():
        default = declared_defaults.get(flag.field)
        if algorithm in flag.owners and isinstance(default, int | str) and default != "":
            assert f"(default {default})" in flag.help, (flag.flag, algorithm)


ADDED = textwrap.dedent("""
    import dataclasses
    import nestor.search._pbt as pbt
    from nestor.search._settings import setting

    @dataclasses.dataclass(frozen=True)
    class Extended(pbt.PBTSettings):
        lag_limit: int = setting(4, "intervals a member may lag before it is replaced", ge=2)

    pbt.PBTSearch.Settings = Extended  # the one edit: the searcher's declaration

    from click.testing import CliRunner
    from nestor.orchestrator.commands.cli import cli
    from nestor.orchestrator.commands.sweep import build_spec, spec_yaml
    from nestor.orchestrator.spec import SpecError, load_spec_text
    from nestor.orchestrator.spec.model import PbtSearch

    field = PbtSearch.model_fields["lag_limit"]
    print("DEFAULT", field.default, "|", field.description)
    spec = build_spec(trainer="cnn", command=None, params=["lr=float:0.01:0.1"], settings=[],
                      algorithm="pbt", budget=None, metric=None, mode=None, result_pattern=None,
                      dp=1, mp=1, parallel=None, slots=None, seed=0, lag_limit=3)
    print("SWEEP", load_spec_text(spec_yaml(spec)).stage("sweep").search.lag_limit)
    spec["stages"][0]["search"]["lag_limit"] = 1
    try:
        load_spec_text(spec_yaml(spec), "lag.yaml")
    except SpecError as exc:
        print("ERROR", exc)
    print(CliRunner().invoke(cli, ["sweep", "--help"]).output)
""")


def test_a_setting_added_to_a_searcher_is_in_the_spec_and_the_flags() -> None:
    result = subprocess.run([sys.executable, "-c", ADDED], capture_output=True, text=True,
                            check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "DEFAULT 4 | intervals a member may lag before it is replaced" in out
    assert "SWEEP 3" in out
    assert re.search(r"^ERROR lag\.yaml:\d+:\d+: stages\[0\]\.search\.lag_limit: must be an"
                     r" integer of at least 2, but got 1$", out, re.MULTILINE), out
    help_text = " ".join(out.split())
    assert "--lag-limit INTEGER RANGE pbt: intervals a member may lag before it is replaced" \
        " (default 4)." in help_text


BOUND = textwrap.dedent("""
    import dataclasses, json, sys
    import nestor.search._pbt as pbt
    from nestor.search._settings import setting

    @dataclasses.dataclass(frozen=True)
    class Extended(pbt.PBTSettings):
        lag_limit: int = setting(4, "intervals a member may lag", **json.loads(sys.argv[1]))

    pbt.PBTSearch.Settings = Extended  # the one edit: the searcher's declaration

    from nestor.orchestrator.commands.sweep import build_spec, spec_yaml
    from nestor.orchestrator.spec import SpecError, load_spec_text
    from nestor.search.space import FloatParam, SearchSpace

    try:
        pbt.PBTSearch(SearchSpace([FloatParam("lr", 0.01, 0.1)]), [("loss", "min")],
                      lag_limit=1)
        print("SEARCHER accepted")
    except ValueError as exc:
        print("SEARCHER", exc)
    spec = build_spec(trainer="cnn", command=None, params=["lr=float:0.01:0.1"], settings=[],
                      algorithm="pbt", budget=None, metric=None, mode=None, result_pattern=None,
                      dp=1, mp=1, parallel=None, slots=None, seed=0)
    spec["stages"][0]["search"]["lag_limit"] = 1
    try:
        load_spec_text(spec_yaml(spec), "lag.yaml")
        print("SPEC accepted")
    except SpecError as exc:
        print("SPEC", exc)
""")


def lag_limit_of_1(bounds: dict) -> dict[str, str]:
    """What a searcher built directly and the spec say to ``lag_limit: 1``, where the
    searcher declares ``lag_limit`` with ``bounds`` (and nothing else anywhere)."""
    result = subprocess.run([sys.executable, "-c", BOUND, json.dumps(bounds)],
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


def test_a_bound_declared_once_is_enforced_by_the_spec_and_the_searcher_alike() -> None:
    said = lag_limit_of_1({"ge": 2})
    assert said["SEARCHER"] == "lag_limit must be an integer of at least 2, but got 1"
    assert re.fullmatch(r"lag\.yaml:\d+:\d+: stages\[0\]\.search\.lag_limit: must be an"
                        r" integer of at least 2, but got 1", said["SPEC"]), said
    # The same bound in the same words: the spec's names the field by its path.
    assert said["SPEC"].endswith(": " + said["SEARCHER"].removeprefix("lag_limit "))


def test_a_bound_taken_out_of_the_declaration_is_enforced_nowhere() -> None:
    """No other copy of the bound: without it in setting(), both take the value."""
    assert lag_limit_of_1({}) == {"SEARCHER": "accepted", "SPEC": "accepted"}


def test_a_rule_across_settings_is_written_once_for_the_searcher_and_the_spec(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec's genetic model runs the searcher's own ``Settings.check``: a rule
    added there (and only there) refuses the same spec and the same searcher, in the
    same words, as do the rules already there."""
    from nestor.orchestrator.spec import SpecError
    from nestor.search._genetic import GeneticSettings

    def refused(**settings: object) -> tuple[str, str]:
        with pytest.raises(ValueError) as searcher:
            make_searcher("genetic", SearchSpace([FloatParam("x", 0.0, 1.0)]),
                          [("loss", "min")], **settings)
        spec = sweep("genetic")
        spec["stages"][0]["search"].update(settings)
        with pytest.raises(SpecError) as loaded:
            load_spec_text(spec_yaml(spec), "g.yaml")
        return str(searcher.value), str(loaded.value)

    searcher, spec = refused(population=4, elitism=4)
    assert searcher == "elitism must be less than population (4), but got 4"
    assert re.fullmatch(r"g\.yaml:\d+:\d+: stages\[0\]\.search: " + re.escape(searcher), spec)

    rules = GeneticSettings.check

    def demes_divide_population(self: GeneticSettings) -> None:
        rules(self)
        if self.population % self.demes:
            raise ValueError(f"population must split evenly into {self.demes} demes,"
                             f" but got {self.population}")

    monkeypatch.setattr(GeneticSettings, "check", demes_divide_population)
    searcher, spec = refused(population=7, demes=2)
    assert searcher == "population must split evenly into 2 demes, but got 7"
    assert spec.endswith(": " + searcher)


def outside(setting: Declared) -> list[object]:
    """A value just outside each of the setting's bounds (in a list for its items)."""
    step = {"ge": -1, "gt": 0, "le": 1, "lt": 0}
    return [bound + step[k] for k, bound in setting.info.bounds.items()] + \
        [[bound + step[k]] for k, bound in setting.info.items.items()]


BOUNDED = [(algorithm, setting.name, value) for algorithm in ALGORITHMS
           for setting in declared(settings_class(algorithm), public_only=True)
           if setting.info.check is None for value in outside(setting)]


@pytest.mark.parametrize(("algorithm", "name", "value"), BOUNDED,
                         ids=[f"{a}-{n}-{v}" for a, n, v in BOUNDED])
def test_a_broken_bound_reads_alike_from_the_spec_and_the_searcher(
        algorithm: str, name: str, value: object) -> None:
    """Every declared bound, broken: the searcher and the spec refuse the value in the
    same words (one function words both), the spec's at the field's file and line."""
    from nestor.orchestrator.spec import SpecError

    with pytest.raises(ValueError) as searcher:
        settings_class(algorithm)(**{name: value})
    spec = sweep(algorithm)
    spec["stages"][0]["search"][name] = value
    with pytest.raises(SpecError) as loaded:
        load_spec_text(spec_yaml(spec), "b.yaml")
    said = str(searcher.value).removeprefix(f"{name} ")
    at = re.escape(f"stages[0].search.{name}") + (r"\[0\]" if isinstance(value, list) else "")
    assert re.fullmatch(rf"b\.yaml:\d+:\d+: {at}: " + re.escape(said), str(loaded.value))


def test_population_without_cmaes_is_one_rule_in_one_text() -> None:
    """Bayesian's ``population`` is CMA-ES's: the rule is the searcher's Settings.check,
    which the spec runs on the field, so both say it alike."""
    from nestor.orchestrator.spec import SpecError

    with pytest.raises(ValueError) as searcher:
        make_searcher("bayesian", SearchSpace([FloatParam("x", 0.0, 1.0)]), [("loss", "min")],
                      sampler="gp", population=8)
    assert str(searcher.value) == ("population applies to samplers cmaes and lq-cmaes only,"
                                   " but sampler is gp")
    spec = sweep("bayesian")
    spec["stages"][0]["search"].update(sampler="gp", population=8)
    with pytest.raises(SpecError) as loaded:
        load_spec_text(spec_yaml(spec), "p.yaml")
    assert re.fullmatch(r"p\.yaml:\d+:\d+: stages\[0\]\.search\.population: "
                        + re.escape(str(searcher.value)), str(loaded.value))
    spec["stages"][0]["space"]["y"] = {"type": "float", "low": 0.0, "high": 1.0}  # lq-cmaes: 2+
    for sampler in ("cmaes", "lq-cmaes"):
        spec["stages"][0]["search"].update(sampler=sampler)
        assert load_spec_text(spec_yaml(spec)).stage("sweep").search.population == 8
