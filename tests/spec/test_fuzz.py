"""Random mutations of valid specs end in a Workflow or a SpecError, never a crash."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nestor.orchestrator.spec import SpecError, Workflow, load_spec_text

# Raise for a long hunt: NESTOR_FUZZ_EXAMPLES=10000 pytest tests/spec/test_fuzz.py
EXAMPLES = int(os.environ.get("NESTOR_FUZZ_EXAMPLES", "400"))
CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.yaml"))
SOURCES = [p.read_text() for p in CONFIGS]
DOCUMENTS = [yaml.safe_load(text) for text in SOURCES]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["hpo", "ensemble", "genetic", "float", "int", "cnn", "tune", "from"]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            found.extend(_paths(child, (*prefix, key)))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found.extend(_paths(child, (*prefix, index)))
    return found


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    document = copy.deepcopy(draw(st.sampled_from(DOCUMENTS)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(document)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "add", "rename"]))
        if not path:
            if action == "replace":
                document = draw(values)
            continue
        parent = document
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        if action == "replace":
            parent[last] = draw(values)
        elif action == "delete":
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(values)
        elif action == "add" and isinstance(parent, list):
            parent.append(draw(values))
        elif action == "rename" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = parent.pop(last)
    return document


def _outcome(text: str) -> None:
    try:
        result = load_spec_text(text, "fuzz.yaml")
    except SpecError as exc:
        assert exc.problems, "a SpecError must carry at least one problem"
        for problem in exc.problems:
            assert str(problem).startswith("fuzz.yaml")
            assert problem.message
    else:
        assert isinstance(result, Workflow)


def test_the_fuzzed_sources_are_valid() -> None:
    assert SOURCES
    for text in SOURCES:
        assert isinstance(load_spec_text(text), Workflow)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_documents())
def test_structural_mutations_never_crash(document: Any) -> None:
    _outcome(yaml.safe_dump(document, allow_unicode=True))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SOURCES),
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=1), st.integers(0, 8), st.text(max_size=6)),
        min_size=1,
        max_size=4,
    ),
)
def test_text_mutations_never_crash(source: str, edits: list[tuple[float, int, str]]) -> None:
    text = source
    for where, cut, insert in edits:
        at = int(where * len(text))
        text = text[:at] + insert + text[at + cut :]
    _outcome(text)
