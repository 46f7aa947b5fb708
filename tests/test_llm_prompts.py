"""Seed 002 Appendix A prompts: an independent solver reads every prompt's text and checks its answers.

The solver below knows only the English of the prompts (who lives with whom, what equals what, what
a demonym or a believer is called): it never calls into the generator. It is first checked on the five
examples printed in Appendix A, then run over thousands of generated prompts at every depth 1..10.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("depthlab") is None:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import typer
from typer.testing import CliRunner

from depthlab.errors import UserError
from depthlab.llm.prompts import FORMULATIONS, generate_many, question

# ----------------------------------------------------------------------- Appendix A, as printed

A1 = """b = 2
c = 3
d = 0
a = 1
e = b
g = a
h = d
f = c
k = e
i = f
l = g
j = h
n = k
p = l
o = i
m = j
q = n
s = p
r = o
t = m
What is the value of s? Say directly only the numeric value, without any other words."""

A2 = """Charlie lives in Cairo
David lives in Delhi
Alice lives in Berlin
Bob lives in Amsterdam
Henry lives with David
Eve lives with Charlie
Frank lives with Alice
Grace lives with Bob
Kate lives with Grace
Larry lives with Frank
Jack lives with Eve
Isabelle lives with Henry
Mary lives with Jack
Olivia lives with Isabelle
Nick lives with Kate
Peter lives with Larry
Rose lives with Peter
Queen lives with Nick
Tom lives with Olivia
Sam lives with Mary
Where does Rose live? Say directly only the name of the city, without any other words."""

A3 = """Bob lives in Silvania.
Alice lives in Novaria.
Charlie lives in Aurora.
David lives in Florinia.
Silvanians believe in celestianism.
Novarians believe in harmonianism.
Aurorans believe in elysianism.
Florinians believe in luminism.
Luminists eat beef.
Elysianists eat pork.
Harmonianists eat lamb.
Celestianists eat chicken.
Beef contains Astralyte.
Chicken contains Nephryon.
Lamb contains Zephyrium.
Pork contains Virellium.
Zephyrium causes Chronogy.
Astralyte causes Aetherflux.
Virellium causes Somnosis.
Nephryon causes Synthemia.
Who has Chronogy? Say directly the name without other words."""

A4 = """a(0) = 3
a(1) = 2
a(2) = 0
a(3) = 1
b(0) = 1
b(1) = 3
b(2) = 2
b(3) = 0
c(0) = 1
c(1) = 0
c(2) = 3
c(3) = 2
d(0) = 1
d(1) = 0
d(2) = 2
d(3) = 3
e = b
f = a
g = c
h = d
i = 0
j = 2
k = 3
l = 1
What is the value of f(i)? Say directly only the numeric value, without any other words."""

A5 = """Penny lives in Canada.
Lily lives in Brazil.
Isabelle lives in France.
Cathy lives in Kenya.
George lives in Italy.
Adam lives in Mexico.
Kevin lives in Peru.
Ed lives in Laos.
Hank lives in Germany.
Mike lives in Japan.
Jane lives in England.
Fred lives in Hungary.
Dana lives in Norway.
Olivia lives in Qatar.
Bob lives in Denmark.
Nancy lives in Argentina.
Johns mother is Jane.
Johns sister is Olivia.
Johns father is Ed.
Johns brother is Mike.
Chriss mother is Penny.
Chriss sister is Dana.
Chriss father is Adam.
Chriss brother is George.
Dianas mother is Nancy.
Dianas sister is Isabelle.
Dianas father is Hank.
Dianas brother is Bob.
Eves mother is Lily.
Eves sister is Cathy.
Eves father is Fred.
Eves brother is Kevin.
Doctors live with their brothers.
Lawyers live with their mothers.
Teachers live with their sisters.
Engineers live with their fathers.
John works as a doctor.
Chris works as an engineer.
Diana works as a teacher.
Eve works as a lawyer.
Where does Eve live? Say directly only the name, without any other words."""

COUNTRIES_16 = ["Argentina", "Brazil", "Canada", "Denmark", "England", "France", "Germany", "Hungary",
                "Italy", "Japan", "Kenya", "Laos", "Mexico", "Norway", "Peru", "Qatar"]  # fmt: skip
APPENDIX = {  # formulation: (prompt, correct, acceptable, depth)
    "equations": (A1, "1", ["0", "1", "2", "3"], 5),
    "lives-with": (A2, "Berlin", ["Amsterdam", "Berlin", "Cairo", "Delhi"], 5),
    "kingdoms": (A3, "Alice", ["Alice", "Bob", "Charlie", "David"], 5),
    "functions": (A4, "3", ["0", "1", "2", "3"], None),
    "relatives": (A5, "Brazil", COUNTRIES_16, None),
}


# ------------------------------------------------------------------------- the independent solver


class Solved:
    def __init__(self, answer: str, candidates: set[str], depth: int | None) -> None:
        self.answer, self.candidates, self.depth = answer, candidates, depth


def _lines(prompt: str) -> tuple[list[str], str]:
    lines = prompt.split("\n")
    assert all(line == line.strip() and line for line in lines), "blank or padded line"
    return lines[:-1], lines[-1]


def _unique(pairs: list[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in pairs:
        assert k not in out, f"{k} stated twice"
        out[k] = v
    return out


def solve_equations(prompt: str) -> Solved:
    statements, q = _lines(prompt)
    m = re.fullmatch(
        r"What is the value of ([a-z]+)\? Say directly only the numeric value, without any other words\.", q
    )
    assert m, q
    rhs = _unique([tuple(re.fullmatch(r"([a-z]+) = ([a-z]+|\d+)", s).groups()) for s in statements])
    seen: set[str] = set()
    for s in statements:  # every name is defined before it is used
        name, value = s.split(" = ")
        assert value.isdigit() or value in seen, f"{value} used before it is defined"
        seen.add(name)
    var, steps = m.group(1), 0
    while not rhs[var].isdigit():
        var, steps = rhs[var], steps + 1
    return Solved(rhs[var], {v for v in rhs.values() if v.isdigit()}, steps + 1)


def solve_lives_with(prompt: str) -> Solved:
    statements, q = _lines(prompt)
    m = re.fullmatch(r"Where does (\w+) live\? Say directly only the name of the city, without any other words\.", q)
    assert m, q
    where: list[tuple[str, str]] = []
    with_: list[tuple[str, str]] = []
    for s in statements:
        a = re.fullmatch(r"(\w+) lives in (\w+)", s)
        b = re.fullmatch(r"(\w+) lives with (\w+)", s)
        assert a or b, s
        (where if a else with_).append((a or b).groups())
    city, host = _unique(where), _unique(with_)
    assert not set(city) & set(host)
    person, steps = m.group(1), 0
    while person not in city:
        person, steps = host[person], steps + 1
    return Solved(city[person], set(city.values()), steps + 1)


def _the_one(name: str, options: set[str], same: callable) -> str:
    hits = [o for o in options if same(name, o)]
    assert len(hits) == 1, f"{name}: {hits}"
    return hits[0]


def solve_kingdoms(prompt: str) -> Solved:
    statements, q = _lines(prompt)
    m = re.fullmatch(r"Who has (\w+)\? Say directly the name without other words\.", q)
    assert m, q
    kinds = {
        "lives": r"(\w+) lives in (\w+)\.",
        "believe": r"(\w+) believe in (\w+)\.",
        "eat": r"(\w+) eat (\w+)\.",
        "contains": r"(\w+) contains (\w+)\.",
        "causes": r"(\w+) causes (\w+)\.",
    }
    facts: dict[str, list[tuple[str, str]]] = {k: [] for k in kinds}
    for s in statements:
        hits = [k for k, pattern in kinds.items() if re.fullmatch(pattern, s)]
        assert len(hits) == 1, s
        facts[hits[0]].append(re.fullmatch(kinds[hits[0]], s).groups())
    # walk back from the disease: element → food → believers → religion → demonym → kingdom → person
    element = _the_one(m.group(1), {e for e, d in facts["causes"]}, lambda d, e: (e, d) in facts["causes"])
    food = _the_one(element, {f for f, _ in facts["contains"]}, lambda e, f: (f, e) in facts["contains"])
    believers = _the_one(food, {b for b, _ in facts["eat"]}, lambda f, b: (b, f.lower()) in facts["eat"])
    # "Harmonianists" are the believers in "harmonianism"
    religion = _the_one(believers, {r for _, r in facts["believe"]},
                        lambda b, r: r.endswith("ism") and b.lower() == r[:-3] + "ists")  # fmt: skip
    folk = _the_one(religion, {p for p, _ in facts["believe"]}, lambda r, p: (p, r) in facts["believe"])
    # "Novarians" are the people of "Novaria"
    kingdom = _the_one(folk, {k for _, k in facts["lives"]}, lambda p, k: p.startswith(k) and p in (k + "ns",))
    person = _the_one(kingdom, {p for p, _ in facts["lives"]}, lambda k, p: (p, k) in facts["lives"])
    return Solved(person, {p for p, _ in facts["lives"]}, 5)


def solve_functions(prompt: str) -> Solved:
    statements, q = _lines(prompt)
    m = re.fullmatch(
        r"What is the value of ([a-z]+)\(([a-z]+)\)\? Say directly only the numeric value, without any other words\.",
        q,
    )
    assert m, q
    table: dict[tuple[str, str], str] = {}
    assign: dict[str, str] = {}
    for s in statements:
        t = re.fullmatch(r"([a-z]+)\((\d+)\) = (\d+)", s)
        a = re.fullmatch(r"([a-z]+) = ([a-z]+|\d+)", s)
        assert t or a, s
        if t:
            assert (t.group(1), t.group(2)) not in table
            table[(t.group(1), t.group(2))] = t.group(3)
        else:
            assert a.group(1) not in assign
            assign[a.group(1)] = a.group(2)
    func = m.group(1)
    while (func, "0") not in table:  # follow aliases to a function with a table
        func = assign[func]
    x = m.group(2)
    while not x.isdigit():
        x = assign[x]
    numbers = {v for v in table.values()} | {k[1] for k in table}
    return Solved(table[(func, x)], numbers, None)


def solve_relatives(prompt: str) -> Solved:
    statements, q = _lines(prompt)
    m = re.fullmatch(r"Where does (\w+) live\? Say directly only the name, without any other words\.", q)
    assert m, q
    lives: list[tuple[str, str]] = []
    kin: list[tuple[tuple[str, str], str]] = []
    rules: list[tuple[str, str]] = []
    jobs: list[tuple[str, str]] = []
    for s in statements:
        if r := re.fullmatch(r"(\w+) lives in (\w+)\.", s):
            lives.append(r.groups())
        elif r := re.fullmatch(r"(\w+?)'?s (\w+) is (\w+)\.", s):  # "John's mother is Jane." (A.5: "Johns")
            kin.append(((r.group(1), r.group(2)), r.group(3)))
        elif r := re.fullmatch(r"(\w+)s live with their (\w+)s\.", s):
            rules.append((r.group(1).lower(), r.group(2)))
        elif r := re.fullmatch(r"(\w+) works as an? (\w+)\.", s):
            jobs.append(r.groups())
        else:
            raise AssertionError(s)
    country, relative, rule, job = _unique(lives), _unique(kin), _unique(rules), _unique(jobs)
    person = m.group(1)
    assert person not in country
    name = relative[(person, rule[job[person]])]
    return Solved(country[name], set(country.values()), None)


SOLVERS = {
    "equations": solve_equations,
    "lives-with": solve_lives_with,
    "kingdoms": solve_kingdoms,
    "functions": solve_functions,
    "relatives": solve_relatives,
}


def _numeric_sorted(values: set[str]) -> list[str]:
    return sorted(values, key=lambda v: (int(v), v)) if all(v.isdigit() for v in values) else sorted(values)


def check(p, chains: int) -> None:
    solved = SOLVERS[p.formulation](p.prompt)
    assert solved.answer == p.correct, p.prompt
    assert list(p.acceptable) == _numeric_sorted(solved.candidates)  # every candidate of the asked type
    assert p.correct in p.acceptable
    assert len(p.acceptable) == (4 * chains if p.formulation == "relatives" else chains)
    assert solved.depth == p.depth


# ----------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_solver_reads_the_appendix_examples(formulation: str) -> None:
    prompt, correct, acceptable, depth = APPENDIX[formulation]
    solved = SOLVERS[formulation](prompt)
    assert solved.answer == correct
    assert _numeric_sorted(solved.candidates) == acceptable
    assert solved.depth == depth


KINGDOM_WORDS = {"lives", "in", "believe", "eat", "contains", "causes", "has", "directly", "the", "name",
                 "without", "other", "words", "Who", "Say"}  # fmt: skip


def _skeleton(formulation: str, prompt: str) -> list[str]:
    """Each line with its names and values replaced by placeholders (the 'manner' of the line)."""
    out = []
    for line in prompt.split("\n"):
        if formulation in ("equations", "functions"):
            line = re.sub(r"\d+", "N", re.sub(r"\b[a-z]+\b(?= =|\(|\)| *$)", "v", line))
            line = re.sub(r"(?<== )[a-z]+$", "v", line)
            line = re.sub(r"value of [a-z]+", "value of v", line)
        elif formulation == "relatives":
            line = re.sub(r"^(\w+?)'?s (?=(mother|sister|father|brother) is )", "W's ", line)
            line = re.sub(r"\b(mothers|sisters|fathers|brothers)\b", "R", line)
            line = re.sub(r"works as an? \w+", "works as A P", line)
            line = re.sub(r"\b[A-Z][a-z]+\b", "W", line)
        elif formulation == "kingdoms":
            line = re.sub(r"\b\w+\b", lambda w: w.group(0) if w.group(0) in KINGDOM_WORDS else "W", line)
        else:
            line = re.sub(r"\b[A-Z][a-z]+\b", "W", line)
        out.append(line)
    return out


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_generated_prompts_have_the_appendix_manner(formulation: str) -> None:
    prompt, _, acceptable, depth = APPENDIX[formulation]
    for p in generate_many(formulation, 20, seed=3, depth=depth):
        assert _skeleton(formulation, p.prompt) == _skeleton(formulation, prompt)
        assert list(p.acceptable) == acceptable  # the same candidates as the appendix's example
        assert p.depth == depth


@pytest.mark.parametrize("formulation", ["equations", "lives-with"])
def test_chain_formulations_at_every_depth_over_thousands_of_seeds(formulation: str) -> None:
    answers: dict[int, set[str]] = {}
    for seed in range(1500):
        for depth in range(1, 11):
            chains = 4 if seed % 3 else 2 + seed % 5  # mostly the default, sometimes 2..6
            p = question(formulation, 0, seed=seed, depth=depth, chains=chains)
            check(p, chains)
            if chains == 4:
                answers.setdefault(depth, set()).add(p.correct)
    assert all(len(a) == 4 for a in answers.values())  # every candidate is sometimes the answer


@pytest.mark.parametrize("formulation", ["kingdoms", "functions", "relatives"])
def test_fixed_formulations_over_thousands_of_seeds(formulation: str) -> None:
    answers = set()
    for seed in range(2000):
        chains = 4 if seed % 3 else 1 + seed % 8
        p = question(formulation, seed % 7, seed=seed, chains=chains)
        check(p, chains)
        if chains == 4:
            answers.add(p.correct)
    assert len(answers) == (16 if formulation == "relatives" else 4)


def test_questions_are_reproducible_and_varied() -> None:
    a = generate_many("equations", 5, seed=11, depth=3)
    b = generate_many("equations", 7, seed=11, depth=3)
    assert a == b[:5]  # question i does not depend on how many are asked
    assert len({p.prompt for p in b}) == 7
    assert generate_many("equations", 5, seed=12, depth=3) != a


def test_parameter_errors_name_the_option() -> None:
    with pytest.raises(UserError, match="--depth"):
        question("kingdoms", 0, depth=3)
    with pytest.raises(UserError, match="--depth"):
        question("functions", 0, depth=2)
    with pytest.raises(UserError, match="--depth"):
        question("equations", 0, depth=0)
    with pytest.raises(UserError, match="--chains"):
        question("kingdoms", 0, chains=9)
    with pytest.raises(UserError, match="FORMULATION"):
        question("sums", 0)


# ------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def app() -> typer.Typer:
    from depthlab.cli import app

    return app


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_cli_llm_prompts_json_shape(app: typer.Typer, formulation: str) -> None:
    result = CliRunner().invoke(app, ["llm-prompts", formulation, "-n", "3", "--seed", "5", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data) == ["prompts"] and len(data["prompts"]) == 3
    for item in data["prompts"]:
        assert list(item) == ["formulation", "depth", "prompt", "correct", "acceptable"]
        assert item["formulation"] == formulation
        assert item["depth"] == (None if formulation in ("functions", "relatives") else 5)
        assert isinstance(item["prompt"], str) and item["correct"] in item["acceptable"]
        assert SOLVERS[formulation](item["prompt"]).answer == item["correct"]
    expected = [p.to_dict() for p in generate_many(formulation, 3, seed=5)]
    assert data["prompts"] == expected


def test_cli_llm_prompts_text_and_options(app: typer.Typer) -> None:
    result = CliRunner().invoke(app, ["llm-prompts", "lives-with", "--depth", "2", "--chains", "3"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().split("\n")
    assert len(lines) == 3 * 2 + 1 + 2
    assert lines[-2].startswith("Correct: ") and lines[-1] == "Acceptable: Amsterdam, Berlin, Cairo"
    bad = CliRunner().invoke(app, ["llm-prompts", "relatives", "--depth", "3", "--json"])
    assert isinstance(bad.exception, UserError) and "--depth" in str(bad.exception)
    assert bad.stdout == ""
