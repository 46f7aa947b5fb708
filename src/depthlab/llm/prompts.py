"""Seed 002 §4 / Appendix A: the five prompt formulations of the retrieval problem for language models.

Appendix A shows one generated example per formulation; the generators below reproduce those examples'
format line for line. The appendix's format, quoted (``…`` marks lines left out here; A.1 is quoted whole)::

    A.1 Equations formulation (D = 5)
    b = 2
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
    What is the value of s? Say directly only the numeric value, without any other words.
    Correct: 1
    Acceptable: 0, 1, 2, 3

    A.2 Lives-with formulation (D = 5)
    Charlie lives in Cairo
    David lives in Delhi
    Alice lives in Berlin
    Bob lives in Amsterdam
    Henry lives with David
    …
    Sam lives with Mary
    Where does Rose live? Say directly only the name of the city, without any other words.
    Correct: Berlin
    Acceptable: Amsterdam, Berlin, Cairo, Delhi

    A.3 Kingdoms formulation
    Bob lives in Silvania.
    …
    Silvanians believe in celestianism.
    …
    Luminists eat beef.
    …
    Beef contains Astralyte.
    …
    Zephyrium causes Chronogy.
    …
    Who has Chronogy? Say directly the name without other words.
    Correct: Alice
    Acceptable: Alice, Bob, Charlie, David

    A.4 Functions formulation (conditional retrieval)
    a(0) = 3
    a(1) = 2
    …                  (a, b, c, d: each a permutation of 0..3)
    e = b
    f = a
    …                  (aliases e..h, in letter order)
    i = 0
    …                  (variables i..l, in letter order)
    What is the value of f(i)? Say directly only the numeric value, without any other words.
    Correct: 3
    Acceptable: 0, 1, 2, 3

    A.5 Relatives formulation (conditional retrieval)
    Penny lives in Canada.
    …                  (the sixteen relatives, shuffled)
    Johns mother is Jane.
    Johns sister is Olivia.
    Johns father is Ed.
    Johns brother is Mike.
    Chriss mother is Penny.
    …
    Doctors live with their brothers.
    Lawyers live with their mothers.
    …
    John works as a doctor.
    Chris works as an engineer.
    …
    Where does Eve live? Say directly only the name, without any other words.
    Correct: Brazil
    Acceptable: Argentina, Brazil, Canada, Denmark, England, France, Germany, Hungary, Italy, Japan,
    Kenya, Laos, Mexico, Norway, Peru, Qatar

Statements are one per line; the question is the last line. The chains are interleaved level by level: all
first statements of the ``chains`` chains (in a random order), then all second statements (in a fresh
random order), and so on, so every chain is visible only by following it, and every chain ends in a
candidate of the asked type.

Choices made where the appendix is silent or ambiguous (each one matches the appendix's example):

- **Depth D** is the number of statements per chain (A.1/A.2: D = 5 gives 20 lines for 4 chains; §4
  calls D "the number of equations"). D = 1 asks for a value stated directly. ``equations`` and
  ``lives-with`` take any D ≥ 1. ``kingdoms`` has a fixed depth of 5 (its five relations: lives in,
  believe in, eat, contains, causes). ``functions`` and ``relatives`` are conditional retrieval (a DAG,
  not a chain) and have no depth (``depth`` is None).
- **Chains** (default 4, as in every appendix example): the number of interleaved chains in equations,
  lives-with and kingdoms; the number of functions (each a permutation of 0..chains-1), aliases and
  variables in functions; the number of persons (each with mother, sister, father and brother) in
  relatives, whose candidates are the 4 × chains relatives' countries.
- **Names are taken in a fixed order, as the appendix's examples show**: equations names its variables
  level by level in alphabetical order (level 1 uses a–d, level 2 e–h, …), continuing ``aa, ab, …`` after
  ``z`` (D ≥ 7 with 4 chains); lives-with names its people level by level from the list Alice, Bob,
  Charlie, … (A–T as in A.2, then 58 more names); the cities are the first ``chains`` of Amsterdam,
  Berlin, Cairo, Delhi, …; kingdoms uses the first ``chains`` people, kingdoms, religions, foods,
  elements and diseases (the appendix's four of each first, four invented ones after); relatives uses
  the persons John, Chris, Diana, Eve (then Paul, Laura, Steve, Nina), the female relatives Cathy … Penny
  and male relatives Adam … Mike of A.5, and its sixteen countries Argentina … Qatar. Which name goes
  to which chain, and every value, is random.
- **Values**: equations' chain values are a random permutation of 0..chains-1 (A.1: 2, 3, 0, 1); lives-
  with's chains live in distinct cities; functions' tables are random permutations (all four in A.4 are),
  aliases and variables are random permutations too, listed in letter order as in A.4.
- **Relatives**: "Johns mother" in the appendix has lost its apostrophe in the text conversion (§4
  writes "Alex’s mother is Jane."); we write ``John's mother is Jane.`` with an ASCII apostrophe. The
  location lines are shuffled; the relation lines go person by person (persons in list order) in the
  order mother, sister, father, brother; the profession rules are listed in profession order (doctor,
  lawyer, teacher, engineer, …) and map professions to relations by a random permutation (with more
  than four persons, relations repeat); each person has a distinct profession.
- **The question** asks about a random chain (a random person for relatives, a random alias and
  variable for functions); the acceptable answers are every candidate of the asked type, sorted
  (numerically for numbers, alphabetically for names), as the appendix lists them.
- **Seeding**: question ``i`` of a (formulation, depth) cell is drawn from
  ``numpy.random.default_rng([seed, formulation index, depth or 0, chains, i])``, so a question is the
  same whatever the number of questions asked and whichever other questions were asked with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from depthlab.errors import UserError

FORMULATIONS: tuple[str, ...] = ("equations", "lives-with", "kingdoms", "functions", "relatives")
CONDITIONAL: tuple[str, ...] = ("functions", "relatives")
DEFAULT_CHAINS = 4
DEFAULT_DEPTH = 5
KINGDOMS_DEPTH = 5
MAX_DEPTH = 100

# --------------------------------------------------------------------------------------------- pools

PEOPLE: tuple[str, ...] = (
    # A.2's twenty names (A–T), in order
    "Alice", "Bob", "Charlie", "David", "Eve", "Frank", "Grace", "Henry", "Isabelle", "Jack",
    "Kate", "Larry", "Mary", "Nick", "Olivia", "Peter", "Queen", "Rose", "Sam", "Tom",
    "Uma", "Victor", "Wendy", "Xavier", "Yara", "Zack",
    "Adam", "Bella", "Carl", "Diana", "Ethan", "Fiona", "George", "Hannah", "Ivan", "Julia",
    "Kevin", "Laura", "Mike", "Nora", "Oscar", "Paula", "Quinn", "Ryan", "Sophie", "Tim",
    "Ursula", "Vince", "Walter", "Xena", "Yusuf", "Zoe",
    "Aaron", "Beth", "Colin", "Daisy", "Edward", "Flora", "Gavin", "Helen", "Igor", "Jane",
    "Kyle", "Lucy", "Martin", "Nina", "Otto", "Pam", "Quentin", "Rita", "Simon", "Tina",
    "Ulrich", "Vera", "Wayne", "Ximena", "Yves", "Zelda",
)  # fmt: skip
CITIES: tuple[str, ...] = (
    "Amsterdam", "Berlin", "Cairo", "Delhi", "Edinburgh", "Florence", "Geneva", "Helsinki", "Istanbul",
    "Jakarta", "Kyoto", "Lisbon", "Madrid", "Nairobi", "Oslo", "Paris", "Quito", "Rome", "Sydney",
    "Tokyo", "Utrecht", "Vienna", "Warsaw", "Xiamen", "York", "Zurich",
)  # fmt: skip
# kingdoms: (kingdom, its people); (religion, its believers); food; element; disease
KINGDOMS: tuple[tuple[str, str], ...] = (
    ("Novaria", "Novarians"), ("Silvania", "Silvanians"), ("Aurora", "Aurorans"),
    ("Florinia", "Florinians"), ("Valdoria", "Valdorians"), ("Zenithia", "Zenithians"),
    ("Eldoria", "Eldorians"), ("Mistralia", "Mistralians"),
)  # fmt: skip
RELIGIONS: tuple[tuple[str, str], ...] = (
    ("harmonianism", "Harmonianists"), ("celestianism", "Celestianists"), ("elysianism", "Elysianists"),
    ("luminism", "Luminists"), ("solarism", "Solarists"), ("veritism", "Veritists"),
    ("aquarism", "Aquarists"), ("sylvanism", "Sylvanists"),
)  # fmt: skip
FOODS: tuple[str, ...] = ("lamb", "beef", "pork", "chicken", "duck", "salmon", "rabbit", "venison")
ELEMENTS: tuple[str, ...] = (
    "Zephyrium", "Astralyte", "Virellium", "Nephryon", "Lumicite", "Orichalite", "Quorvium", "Thalassine",
)  # fmt: skip
DISEASES: tuple[str, ...] = (
    "Chronogy", "Aetherflux", "Somnosis", "Synthemia", "Mnemorrhea", "Vertiglow", "Pyrexion", "Lethargia",
)  # fmt: skip
# relatives
PERSONS: tuple[str, ...] = ("John", "Chris", "Diana", "Eve", "Paul", "Laura", "Steve", "Nina")
FEMALE: tuple[str, ...] = (
    "Cathy", "Dana", "Isabelle", "Jane", "Lily", "Nancy", "Olivia", "Penny",
    "Rachel", "Sara", "Tina", "Ursula", "Vera", "Wendy", "Yvonne", "Zoe",
)  # fmt: skip
MALE: tuple[str, ...] = (
    "Adam", "Bob", "Ed", "Fred", "George", "Hank", "Kevin", "Mike",
    "Oscar", "Ralph", "Tom", "Victor", "Walter", "Xavier", "Yuri", "Zack",
)  # fmt: skip
COUNTRIES: tuple[str, ...] = (
    "Argentina", "Brazil", "Canada", "Denmark", "England", "France", "Germany", "Hungary",
    "Italy", "Japan", "Kenya", "Laos", "Mexico", "Norway", "Peru", "Qatar",
    "Russia", "Spain", "Turkey", "Uganda", "Vietnam", "Wales", "Yemen", "Zambia",
    "Austria", "Belgium", "Chile", "Egypt", "Finland", "Greece", "India", "Jordan",
)  # fmt: skip
RELATIONS: tuple[tuple[str, str, bool], ...] = (  # (relation, plural, female), in the order of A.5
    ("mother", "mothers", True), ("sister", "sisters", True),
    ("father", "fathers", False), ("brother", "brothers", False),
)  # fmt: skip
PROFESSIONS: tuple[tuple[str, str, str], ...] = (  # (profession, plural, article)
    ("doctor", "Doctors", "a"), ("lawyer", "Lawyers", "a"), ("teacher", "Teachers", "a"),
    ("engineer", "Engineers", "an"), ("nurse", "Nurses", "a"), ("pilot", "Pilots", "a"),
    ("architect", "Architects", "an"), ("farmer", "Farmers", "a"),
)  # fmt: skip

QUESTIONS = {
    "equations": "What is the value of {}? Say directly only the numeric value, without any other words.",
    "lives-with": "Where does {} live? Say directly only the name of the city, without any other words.",
    "kingdoms": "Who has {}? Say directly the name without other words.",
    "functions": "What is the value of {}? Say directly only the numeric value, without any other words.",
    "relatives": "Where does {} live? Say directly only the name, without any other words.",
}


# ---------------------------------------------------------------------------------------- the prompt


@dataclass(frozen=True)
class Prompt:
    """One question: the prompt text, its correct answer and every acceptable answer (sorted)."""

    formulation: str
    depth: int | None
    prompt: str
    correct: str
    acceptable: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "formulation": self.formulation,
            "depth": self.depth,
            "prompt": self.prompt,
            "correct": self.correct,
            "acceptable": list(self.acceptable),
        }

    @property
    def chance(self) -> float:
        """Accuracy of a uniform guess among the acceptable answers."""
        return 1.0 / len(self.acceptable)

    def appendix_text(self) -> str:
        """The prompt followed by ``Correct:`` and ``Acceptable:`` lines, as Appendix A prints them."""
        return f"{self.prompt}\nCorrect: {self.correct}\nAcceptable: {', '.join(self.acceptable)}"


def has_depth(formulation: str) -> bool:
    """Whether the formulation takes a depth parameter (equations, lives-with)."""
    return formulation in ("equations", "lives-with")


def max_chains(formulation: str, depth: int | None) -> int:
    """The largest number of chains the name pools allow."""
    if formulation == "equations":
        return 26
    if formulation == "lives-with":
        return min(len(CITIES), len(PEOPLE) // max(depth or 1, 1))
    if formulation == "kingdoms":
        return len(KINGDOMS)
    if formulation == "functions":
        return 10
    return min(len(PERSONS), len(COUNTRIES) // 4)


def check_formulation(formulation: str, option: str = "FORMULATION") -> str:
    if formulation not in FORMULATIONS:
        choices = ", ".join(FORMULATIONS)
        raise UserError(f"{option}: unknown formulation {formulation!r}; choose one of {choices}")
    return formulation


def resolve_depth(formulation: str, depth: int | None, option: str = "--depth") -> int | None:
    """The depth a question of ``formulation`` has when ``depth`` is asked (None: the default)."""
    check_formulation(formulation)
    if has_depth(formulation):
        if depth is None:
            return DEFAULT_DEPTH
        if not 1 <= depth <= MAX_DEPTH:
            raise UserError(f"{option}: must be an integer from 1 to {MAX_DEPTH} (got {depth})")
        return int(depth)
    if formulation == "kingdoms":
        if depth not in (None, KINGDOMS_DEPTH):
            raise UserError(f"{option}: kingdoms has a fixed depth of {KINGDOMS_DEPTH} (got {depth})")
        return KINGDOMS_DEPTH
    if depth is not None:
        raise UserError(f"{option}: {formulation} (conditional retrieval) has no depth; leave {option} out")
    return None


def check_chains(formulation: str, depth: int | None, chains: int, option: str = "--chains") -> int:
    top = max_chains(formulation, depth)
    if not 1 <= chains <= top:
        if has_depth(formulation):
            raise UserError(
                f"{option}: {formulation} at depth {depth} allows 1 to {top} chains (got {chains}); "
                f"lower {option} or --depth"
            )
        raise UserError(f"{option}: {formulation} allows 1 to {top} chains (got {chains})")
    return int(chains)


# --------------------------------------------------------------------------------------- generators


def letters(i: int) -> str:
    """Variable name number ``i``: a, b, …, z, aa, ab, …, az, ba, …"""
    name = ""
    i += 1
    while i > 0:
        i, r = divmod(i - 1, 26)
        name = chr(ord("a") + r) + name
    return name


def _levels(rng: np.random.Generator, chains: int, depth: int, names: list[str]) -> list[list[int]]:
    """``chain_name[k][l]``: the index into ``names`` of chain k's level-l entity (level l uses block l)."""
    out = [[0] * depth for _ in range(chains)]
    for level in range(depth):
        perm = rng.permutation(chains)
        for k in range(chains):
            out[k][level] = level * chains + int(perm[k])
    return out


def _interleave(rng: np.random.Generator, rows: list[list[str]]) -> list[str]:
    """Level by level, each level's statements (one per chain) in a fresh random order."""
    chains, depth = len(rows), len(rows[0])
    lines: list[str] = []
    for level in range(depth):
        for k in rng.permutation(chains):
            lines.append(rows[int(k)][level])
    return lines


def _numbers(chains: int) -> tuple[str, ...]:
    return tuple(str(v) for v in range(chains))


def _linked_chains(
    rng: np.random.Generator, formulation: str, names: list[str], answers: tuple[str, ...], depth: int, first: str,
    link: str,
) -> tuple[str, str]:
    """F1 and F2: chain k's first statement gives its level-0 name a distinct answer (``first``, e.g. ``b = 2``),
    each later one names the level before (``link``, e.g. ``e = b``); then the question about one chain's last
    name. Returns the text and that chain's answer."""
    chains = len(answers)
    idx = _levels(rng, chains, depth, names)
    values = rng.permutation(chains)
    rows = []
    for k in range(chains):
        row = [first.format(names[idx[k][0]], answers[int(values[k])])]
        row += [link.format(names[idx[k][level]], names[idx[k][level - 1]]) for level in range(1, depth)]
        rows.append(row)
    lines = _interleave(rng, rows)
    asked = int(rng.integers(chains))
    lines.append(QUESTIONS[formulation].format(names[idx[asked][depth - 1]]))
    return "\n".join(lines), answers[int(values[asked])]


def equations(rng: np.random.Generator, depth: int = DEFAULT_DEPTH, chains: int = DEFAULT_CHAINS) -> Prompt:
    """F1: ``b = 2`` … ``e = b`` … ``What is the value of s?`` (A.1)."""
    names = [letters(i) for i in range(chains * depth)]
    text, answer = _linked_chains(rng, "equations", names, _numbers(chains), depth, "{} = {}", "{} = {}")
    return Prompt("equations", depth, text, answer, _numbers(chains))


def lives_with(rng: np.random.Generator, depth: int = DEFAULT_DEPTH, chains: int = DEFAULT_CHAINS) -> Prompt:
    """F2: ``Charlie lives in Cairo`` … ``Henry lives with David`` … ``Where does Rose live?`` (A.2)."""
    names, cities = list(PEOPLE[: chains * depth]), CITIES[:chains]
    text, answer = _linked_chains(rng, "lives-with", names, cities, depth, "{} lives in {}", "{} lives with {}")
    return Prompt("lives-with", depth, text, answer, tuple(sorted(cities)))


def kingdoms(rng: np.random.Generator, chains: int = DEFAULT_CHAINS) -> Prompt:
    """F3: person → kingdom → religion → food → element → disease; ``Who has Chronogy?`` (A.3)."""
    people = PEOPLE[:chains]
    perms = [rng.permutation(chains) for _ in range(5)]  # which kingdom, religion, … each chain gets
    rows = []
    for k in range(chains):
        kingdom, folk = KINGDOMS[int(perms[0][k])]
        religion, believers = RELIGIONS[int(perms[1][k])]
        food = FOODS[int(perms[2][k])]
        element = ELEMENTS[int(perms[3][k])]
        disease = DISEASES[int(perms[4][k])]
        rows.append([
            f"{people[k]} lives in {kingdom}.",
            f"{folk} believe in {religion}.",
            f"{believers} eat {food}.",
            f"{food.capitalize()} contains {element}.",
            f"{element} causes {disease}.",
        ])  # fmt: skip
    lines = _interleave(rng, rows)
    asked = int(rng.integers(chains))
    lines.append(QUESTIONS["kingdoms"].format(DISEASES[int(perms[4][asked])]))
    return Prompt("kingdoms", KINGDOMS_DEPTH, "\n".join(lines), people[asked], tuple(sorted(people)))


def functions(rng: np.random.Generator, chains: int = DEFAULT_CHAINS) -> Prompt:
    """F4: tables ``a(0) = 3`` …, aliases ``e = b`` …, variables ``i = 0`` …; ``f(i)?`` (A.4)."""
    funcs = [letters(i) for i in range(chains)]
    aliases = [letters(chains + i) for i in range(chains)]
    variables = [letters(2 * chains + i) for i in range(chains)]
    tables = [rng.permutation(chains) for _ in range(chains)]
    alias_of = rng.permutation(chains)
    value_of = rng.permutation(chains)
    lines = [f"{funcs[f]}({x}) = {int(tables[f][x])}" for f in range(chains) for x in range(chains)]
    lines += [f"{aliases[j]} = {funcs[int(alias_of[j])]}" for j in range(chains)]
    lines += [f"{variables[j]} = {int(value_of[j])}" for j in range(chains)]
    j, v = int(rng.integers(chains)), int(rng.integers(chains))
    lines.append(QUESTIONS["functions"].format(f"{aliases[j]}({variables[v]})"))
    correct = int(tables[int(alias_of[j])][int(value_of[v])])
    return Prompt("functions", None, "\n".join(lines), str(correct), _numbers(chains))


def relatives(rng: np.random.Generator, chains: int = DEFAULT_CHAINS) -> Prompt:
    """F5: relatives' countries, persons' relatives, profession rules, persons' professions (A.5)."""
    persons = PERSONS[:chains]
    female = [FEMALE[int(i)] for i in rng.permutation(2 * chains)]
    male = [MALE[int(i)] for i in rng.permutation(2 * chains)]
    countries = COUNTRIES[: 4 * chains]
    relative: dict[tuple[int, int], str] = {}  # (person, relation) -> name
    for p in range(chains):
        for r, (_, _, is_female) in enumerate(RELATIONS):
            pool = female if is_female else male
            relative[(p, r)] = pool.pop()
    names = list(relative.values())
    country_of = {name: countries[int(i)] for name, i in zip(names, rng.permutation(len(names)), strict=True)}
    professions = PROFESSIONS[:chains]
    if chains <= len(RELATIONS):
        rel_of = [int(r) for r in rng.choice(len(RELATIONS), size=chains, replace=False)]
    else:
        rel_of = [int(r) for r in rng.permutation(np.resize(np.arange(len(RELATIONS)), chains))]
    works_as = [int(i) for i in rng.permutation(chains)]  # person p works as professions[works_as[p]]

    lines = [f"{names[int(i)]} lives in {country_of[names[int(i)]]}." for i in rng.permutation(len(names))]
    for p, person in enumerate(persons):
        for r, (relation, _, _) in enumerate(RELATIONS):
            lines.append(f"{person}'s {relation} is {relative[(p, r)]}.")
    for q, (_, plural, _) in enumerate(professions):
        lines.append(f"{plural} live with their {RELATIONS[rel_of[q]][1]}.")
    for p, person in enumerate(persons):
        profession, _, article = professions[works_as[p]]
        lines.append(f"{person} works as {article} {profession}.")
    asked = int(rng.integers(chains))
    lines.append(QUESTIONS["relatives"].format(persons[asked]))
    correct = country_of[relative[(asked, rel_of[works_as[asked]])]]
    return Prompt("relatives", None, "\n".join(lines), correct, tuple(sorted(countries)))


_GENERATORS: dict[str, Callable[..., Prompt]] = {
    "equations": equations,
    "lives-with": lives_with,
    "kingdoms": kingdoms,
    "functions": functions,
    "relatives": relatives,
}


def generate(
    formulation: str, rng: np.random.Generator, depth: int | None = None, chains: int = DEFAULT_CHAINS
) -> Prompt:
    """One question of ``formulation`` drawn with ``rng`` (depth: see :func:`resolve_depth`)."""
    d = resolve_depth(formulation, depth)
    check_chains(formulation, d, chains)
    if has_depth(formulation):
        return _GENERATORS[formulation](rng, depth=d, chains=chains)
    return _GENERATORS[formulation](rng, chains=chains)


def question_rng(seed: int, formulation: str, depth: int | None, chains: int, index: int) -> np.random.Generator:
    """The generator of question ``index`` of a (formulation, depth, chains) cell under ``seed``."""
    entropy = [int(seed), FORMULATIONS.index(formulation), int(depth or 0), int(chains), int(index)]
    return np.random.default_rng(entropy)


def question(
    formulation: str, index: int, seed: int = 0, depth: int | None = None, chains: int = DEFAULT_CHAINS
) -> Prompt:
    """Question ``index`` of the (formulation, depth, chains) cell under ``seed`` (stable, see module doc)."""
    d = resolve_depth(formulation, depth)
    return generate(formulation, question_rng(seed, formulation, d, chains, index), d, chains)


def generate_many(
    formulation: str, n: int, seed: int = 0, depth: int | None = None, chains: int = DEFAULT_CHAINS
) -> list[Prompt]:
    """Questions 0..n-1 of the (formulation, depth, chains) cell under ``seed``."""
    return [question(formulation, i, seed, depth, chains) for i in range(n)]
