"""One name for one thing (issue 39): `nestor sweep`'s flags are the spec keys they set
(--algorithm, --command, --reduction-factor, --replacement, --result-pattern, --param
NAME=categorical:...), a genetic search's ``mode`` is ``replacement`` in the spec; the
old spellings still work, each with a one-line notice naming the new one. `sweep
--help` groups the search settings by algorithm, and run, resume, sweep and submit
take -q/-v. Constraints name a Python function as ``"package.module:function"``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.spec import SpecError, load_spec_text, renamed


@pytest.fixture(autouse=True)
def _fresh_notices() -> None:
    renamed._said.clear()  # a notice is said once a process: each test hears its own


def sweep_params(args: list[str]) -> dict:
    command = cli.commands["sweep"]
    return command.make_context("sweep", list(args)).params


NEW = ["--command", "python3 fit.py", "--mode", "min", "--param", "x=float:0:1",
       "--param", "act=categorical:relu,tanh", "--result-pattern", "loss=(\\S+)", "--checkpoints"]
OLD = ["--cmd", "python3 fit.py", "--mode", "min", "--param", "x=float:0:1",
       "--param", "act=choice:relu,tanh", "--fom-pattern", "loss=(\\S+)", "--checkpoints"]


@pytest.mark.parametrize(("old", "new"), [
    (["--algo", "asha", "--eta=2"], ["--algorithm", "asha", "--reduction-factor", "2"]),
    (["--algo=genetic", "--genetic-mode", "mu_plus_lambda"],
     ["--algorithm=genetic", "--replacement", "mu_plus_lambda"]),
])
def test_deprecated_flags_read_as_the_new_ones_with_a_notice(
        old: list[str], new: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    wanted = sweep_params(NEW + new)
    assert capsys.readouterr().err == ""  # the new names say nothing
    given = sweep_params(OLD + old)
    notices = capsys.readouterr().err.splitlines()
    assert {k: v for k, v in given.items() if k != "params"} == \
        {k: v for k, v in wanted.items() if k != "params"}
    for flag in ["--cmd", "--fom-pattern", *(a.split("=")[0] for a in old if a[:2] == "--")]:
        assert any(line.startswith(f"nestor: {flag} is deprecated; use --") for line in notices)
    new_spec = _spec(wanted)
    assert capsys.readouterr().err == ""
    spec = _spec(given)
    assert "nestor: --param NAME=choice:A,B is deprecated; use --param NAME=categorical:A,B" \
        in capsys.readouterr().err
    assert spec == new_spec
    stage = spec["stages"][0]
    assert stage["trainer"]["result_pattern"] == "loss=(\\S+)"
    assert stage["space"]["act"] == {"type": "categorical", "values": ["relu", "tanh"]}
    search = stage["search"]
    assert search.get("reduction_factor") == 2 or search.get("replacement") == "mu_plus_lambda"
    assert "mode" not in search and "eta" not in search
    load_spec_text(_yaml(spec), "<sweep>")  # the spec it writes validates


def _spec(params: dict) -> dict:
    from nestor.orchestrator.commands.sweep import build_spec

    return build_spec(**{k: list(v) if isinstance(v, tuple) else v for k, v in params.items()
                         if k not in ("budget", "wall", "run_dir", "address", "quiet", "verbose")},
                      budget=None)


def _yaml(spec: dict) -> str:
    import yaml

    return yaml.safe_dump(spec, sort_keys=False)


GENETIC = textwrap.dedent("""
    name: g
    stages:
      - name: s
        kind: hpo
        trainer: {{command: "python3 fit.py"}}
        objective: {{metric: fom, mode: min}}
        search: {{algorithm: genetic, population: 4, budget: 8, {key}: {value}}}
        space: {{a: {{type: float, low: 0, high: 1}}}}
    """)


def test_genetic_replacement_is_the_spec_key_and_mode_its_deprecated_alias(
        capsys: pytest.CaptureFixture[str]) -> None:
    new = load_spec_text(GENETIC.format(key="replacement", value="mu_plus_lambda"), "new.yaml")
    assert capsys.readouterr().err == ""
    old = load_spec_text(GENETIC.format(key="mode", value="mu_plus_lambda"), "old.yaml")
    assert capsys.readouterr().err == ("nestor: search.mode (algorithm genetic) is deprecated;"
                                       " use search.replacement (same meaning)\n")
    assert old.stages[0].search == new.stages[0].search
    assert new.stages[0].search.settings()["mode"] == "mu_plus_lambda"  # the searcher's word
    assert new.stages[0].search.model_dump(by_alias=True)["replacement"] == "mu_plus_lambda"
    with pytest.raises(SpecError) as bad:
        load_spec_text(GENETIC.format(key="replacement", value="steady"), "bad.yaml")
    assert "search.replacement" in str(bad.value.problems[0])
    # the objective's mode is untouched: it is the direction
    assert new.stages[0].objectives[0].mode == "min"


def test_sweep_help_groups_the_search_settings_by_algorithm() -> None:
    text = CliRunner().invoke(cli, ["sweep", "--help"], terminal_width=100).output
    sections = {}
    title = ""
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
        elif line.strip().startswith("-"):
            sections.setdefault(title, []).append(line.split()[0].rstrip(","))
    assert "--replacement" in sections["genetic settings (--algorithm genetic)"]
    assert "--explore" in sections["pbt settings (--algorithm pbt)"]
    assert "--reduction-factor" in sections["Settings of --algorithm asha, hyperband"]
    assert "--enqueue" in sections["Settings of every --algorithm"]
    common = sections["Options"]
    assert {"--algorithm", "--command", "--result-pattern", "-q", "-v"} <= set(common)
    assert not {"--replacement", "--population", "--reduction-factor"} & set(common)
    assert "--eta" not in text and "--genetic-mode" not in text and "choice:" not in text


@pytest.mark.parametrize("command", ["run", "resume", "sweep", "submit"])
def test_every_command_that_runs_something_takes_quiet_and_verbose(command: str) -> None:
    text = CliRunner().invoke(cli, [command, "--help"]).output
    assert "-q, --quiet" in text and "-v, --verbose" in text


def test_quiet_and_verbose_together_are_refused() -> None:
    result = CliRunner().invoke(cli, ["resume", ".", "-q", "-v"])
    assert result.exit_code == 2 and "at most one of -q/--quiet and -v/--verbose" in \
        result.output


CONSTRAINED = textwrap.dedent("""
    name: c
    stages:
      - name: s
        kind: hpo
        trainer: {command: "python3 fit.py"}
        objective: {metric: fom, mode: min}
        search: {algorithm: random, budget: 40, seed: 2,
                 constraints: ["ordered_rule:ordered", "a + b <= 1.5"]}
        space: {a: {type: float, low: 0, high: 1}, b: {type: float, low: 0, high: 1}}
    """)


def test_a_module_function_constraint_in_yaml_is_called_by_every_ask(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nestor.search import make_searcher

    (tmp_path / "ordered_rule.py").write_text("def ordered(c):\n    return c['a'] < c['b']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    workflow = load_spec_text(CONSTRAINED, "c.yaml")
    stage = workflow.stages[0]
    assert stage.search.constraints[0].function == "ordered_rule:ordered"
    for algorithm, settings in (("random", {}), ("bayesian", {"startup_trials": 3}),
                                ("genetic", {"population": 4})):
        searcher = make_searcher(algorithm, stage.search_space(), [("fom", "min")],
                                 seed=1, budget=12, **settings)
        for round_ in range(3):
            trials = searcher.ask(4)
            assert trials
            for trial in trials:
                c = trial.config
                assert c["a"] < c["b"] and c["a"] + c["b"] <= 1.5, (algorithm, c)
                searcher.tell(trial.id, (c["a"] - 0.2) ** 2 + round_)
    with pytest.raises(SpecError) as bad:
        load_spec_text(CONSTRAINED.replace("ordered_rule:ordered", "ordered_rule:sorted"),
                       "c.yaml", imports=True)  # as `nestor validate` and `run` load a file
    assert "defines no 'sorted'" in str(bad.value.problems[0])


@pytest.mark.parametrize(("talk", "passed"), [(-1, ["--quiet"]), (0, []), (1, ["--verbose"])])
def test_submit_passes_quiet_and_verbose_to_the_jobs_driver(
        tmp_path: Path, talk: int, passed: list[str]) -> None:
    import re
    import subprocess

    from nestor.orchestrator.slurm import SubmitOptions, render_script

    script = render_script(SubmitOptions(run_dir=tmp_path / "r", spec=tmp_path / "s.yaml",
                                         python="/p", nestor="/n", verbosity=talk))
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    declared = re.search(r"^verbosity=\(.*\).*$", script, re.M)
    assert declared is not None
    runs = [line for line in script.splitlines() if '"$nestor" r' in line]
    assert runs and all("verbosity" in line or line.endswith("\\") for line in runs)
    probe = ("set -u\n" + declared.group(0) +
             '\nprintf "%s\\n" run ${verbosity[@]+"${verbosity[@]}"}')
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["run", *passed]
