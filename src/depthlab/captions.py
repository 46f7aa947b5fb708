"""The seeds' figures (and the theorems and results a preset reproduces instead of a figure), each with the seed's
own caption, quoted: what ``depthlab reproduce --list`` names and what ``depthlab report`` shows beside each figure.

A key is ``seed NNN <label>``: ``seed 001 Figure 2``, ``seed 002 Theorem 1``, ``seed 004 Result 1``. Figures quote
their caption verbatim (seed 001's Figure 3 caption repeats the same sequence twice in the seed; quoted as is);
theorems and lemmas quote their statement, with the seed's LaTeX written as plain text; the essay (seed 004) has
no numbered figures, so its two results are its section headings with the sentence that describes their plots.
The seeds folder does not ship with depthlab, so the text is copied here.

:func:`figures_in` reads the keys out of a preset's free-text ``reproduces`` ("seed 002 Figures 6-7 (§9)"), so a
preset file without a structured ``figures:`` list is still placed in the gallery.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class SeedItem:
    """One figure, table, theorem or result of a seed and its caption (or statement), as the seed words it."""

    key: str  # "seed 001 Figure 2"
    caption: str

    @property
    def seed(self) -> str:
        return self.key.split()[1]

    @property
    def label(self) -> str:
        return self.key.split(" ", 2)[2]


SEEDS: dict[str, str] = {
    "001": "What Can Transformer Learn with Varying Depth? Case Studies on Sequence Learning Tasks",
    "002": "Mechanism and Emergence of Stacked Attention Heads in Multi-Layer Transformers",
    "003": "Separations in the Representational Capabilities of Transformers and Recurrent Architectures",
    "004": "How induction heads work with finite capacity (essay)",
}

_ITEMS: list[tuple[str, str]] = [
    ("seed 001 Figure 2", "Performance of different layers of transformers on memorization, reasoning, generalization, "
     "and contextual generalization tasks. Far left column: A single-layer transformer can memorize sequences with "
     "distinct labels. Center left column: A single-layer transformer struggles with reasoning tasks, while a "
     "two-layer transformer can learn reasoning with enough training steps. Center right column: A single-layer "
     "transformer struggles with generalizing on template tasks, while a two-layer transformer can quickly grasp the "
     "method for generalization. Far right column: When it comes to more complex contextual generalization tasks, a "
     "1/2-layer transformer fails, but a 3-layer transformer can perform well on such tasks."),
    ("seed 001 Figure 3", "Attention maps for a trained two-layer transformer in the reasoning sequences \"A=1B=2A=\" "
     "(top row) and \"A=1B=2A=\" (bottom row)."),
    ("seed 001 §6.2", "In the template matching task, we also find evidence of our constructed parsing-mapping "
     "mechanism in [fig:attn95tmplt]. Specifically, a \"parsing\" operation that checks the similarity of tokens in "
     "other positions can be observed in the first layer: for input sequence \"AAB=\", the repeat token \"A\" in "
     "positions 0 and 1 share attention with each other, for the input \"ABB=\", the repeat token in positions 1 "
     "and 2 share the position information."),
    ("seed 001 Figure 4", "Training dynamic for different attention heads on memorization task."),
    ("seed 001 Figure 5", "Training dynamic for different attention heads on in-context learning task."),
    ("seed 001 Figure 6", "Training dynamic for different attention heads on template generalization task."),
    ("seed 001 Figure 7", "Training dynamic for different attention heads and layers on contextual generalization task "
     "on given k examples."),
    ("seed 001 Table 1", "Examples of four tasks."),
    ("seed 001 §7", "We can expand our in-context QA as \"nested in-context QA\" task, where the model must perform a "
     "chain-of-thought process to arrive at the final answer. This could involve a sequence like "
     "\"a → b b → c c → d a → d\", where we can design a transformer with 6 layers that performs \"copy-matching\" 3 "
     "times to solve this problem effectively."),
    ("seed 002 Figure 1", "Illustrative examples of retrieval and conditional retrieval questions."),
    ("seed 002 Figure 2", "Accuracy of large language models on the retrieval and conditional retrieval problems. "
     "Dashed lines indicate the accuracy of random guessing. Full prompts and benchmarking details are provided in "
     "Appendix A."),
    ("seed 002 Figure 3", "Positions that contain shared information before any transformer layers in the case of "
     "D=5. Top edges denote shared token embeddings. Bottom edges denote shared positional encodings."),
    ("seed 002 Figure 4", "Final validation loss by number of layers, averaged across multiple runs. Left: IC vs. "
     "non-IC formulations. Right: Partial validation loss for each position in the retrieval chains (IC only)."),
    ("seed 002 Figure 5", "Reverse-engineered circuits from three 12-layer transformers trained on the retrieval "
     "problem with D=3 and IC."),
    ("seed 002 Figure 6", "Loss during training of Transformer D (24 layers) with IC and D=4. Left: training and "
     "validation loss. Right: partial validation loss for each position in the retrieval chain."),
    ("seed 002 Figure 7", "Left: Reverse-engineered circuits of Transformer D. Right: the epoch when the average "
     "attention goes above 0.5 for each attention path."),
    ("seed 002 Figure 8", "Positions that contain shared information before any transformer layers in the case of "
     "D=5. Top edges denote shared token embeddings. Bottom edges denote shared positional encodings."),
    ("seed 002 Theorem 1", "The last position in the sequence cannot retrieve the embedding vector x_D of the target "
     "token with t transformer layers if t < log3(2D)."),
    ("seed 003 Figure 1", "Illustration of a few key tasks considered in our work."),
    ("seed 003 Figure 2", "Performance of models on the Index Lookup and bounded Dyck task. Labels such as TF-(1, 64) "
     "denote Transformers with 1 layer and 64 widths. See Section 6 for more details."),
    ("seed 003 Figure 3", "Performance of Mamba on the Index Lookup task across various lengths and widths. See "
     "Section H.1 for more details."),
    ("seed 003 Figure 4", "Performance of architectures on the Equality task. See Section H.2 for more details."),
    ("seed 003 Theorem 1", "For all N ∈ ℕ, there is a 1-layer Transformer with width m = O(log N) and precision "
     "p = O(log N) which performs the index lookup task for all input sequences of lengths up to N."),
    ("seed 003 Theorem 6", "For any N ∈ ℕ, there exists a 2-layer Transformer f ∈ TF²_{m,p,2} where width "
     "m = O(log N) and precision p = O(log N) such that f(x) = EQ(x) for all x ∈ {0,1}^N."),
    ("seed 003 Lemma 2", "For any N, there exists N k-dimensional vectors T_1, …, T_N where k = O((1/γ²) log N) and "
     "each entry of the vectors is in {-1/√k, 1/√k} such that ⟨T_i, T_j⟩ ≥ 1 - γ if i = j, and ≤ γ otherwise."),
    ("seed 004 Result 1", "Induction Works Much Better for Some Tokens Than for Others. For a given token, I measure "
     "it's average induction strength across 256 sequences where it is token A (\"A power\"), and it's average "
     "induction strength across 256 sequences where it is token B (\"B power\"). I plot the histogram of A and B "
     "powers across the first 10000 tokens."),
    ("seed 004 Result 2", "Induction Makes Tokens Near to B More Likely. Induction strengths of tokens near B are "
     "roughly half-way between the induction strength of B and the induction strengths of random tokens."),
    ("seed 004 Hypothesis 1", "When A is copied over to position 2, it does not overlap with B (no matter what A & B "
     "are). […] When B is copied over to the last position, it is copied over by attention heads through the OV "
     "circuit. […] Therefore, only a low-rank approximation of B is copied over to the last position."),
    ("seed 004 Hypothesis 2", "Token A is just added to B with a flipped sign. As a result, right before the "
     "induction head reads position 2, the residual stream contains B - A […] The network outputs B because "
     "B=(B - A) + A (the +A comes from the residual connection)."),
]

CAPTIONS: dict[str, SeedItem] = {key: SeedItem(key, caption) for key, caption in _ITEMS}

_KINDS = ("Figure", "Table", "Theorem", "Lemma", "Result", "Hypothesis")
_NUMBERS = r"\d+(?:\s*(?:-|–|,|and)\s*\d+)*"


def seed_items(seed: str) -> list[SeedItem]:
    """Every registered item of ``seed`` ("001"), in the seed's order."""
    return [item for item in CAPTIONS.values() if item.seed == seed]


def _expand(numbers: str) -> list[int]:
    """"6-7" → [6, 7]; "2 and 4" → [2, 4]; "1, 3" → [1, 3]."""
    out: list[int] = []
    for part in re.split(r"\s*(?:,|and)\s*", numbers):
        ends = [int(x) for x in re.split(r"\s*[-–]\s*", part) if x]
        out += list(range(ends[0], ends[-1] + 1)) if len(ends) == 2 and ends[0] < ends[1] else ends
    return out


def figures_in(text: str) -> list[str]:
    """The registered keys a free-text ``reproduces`` names: "seed 003 Theorems 1 and 6 (width O(log N), Lemma 2)"
    → seed 003 Theorem 1, Theorem 6, Lemma 2. A "§N" is kept only when no figure is named (seed 001 §7)."""
    found: list[str] = []
    for match in re.finditer(r"seed (\d{3})(.*?)(?=seed \d{3}|$)", text):
        seed, rest = match.groups()
        mentions = re.findall(rf"({'|'.join(_KINDS)})s?\s+({_NUMBERS})", rest)
        named = [f"seed {seed} {kind} {n}" for kind, numbers in mentions for n in _expand(numbers)]
        found += named or [f"seed {seed} §{s}" for s in re.findall(r"§(\d+)(?!\.\d)", rest)]
    return [key for key in dict.fromkeys(found) if key in CAPTIONS]


def figures_text(keys: list[str]) -> str:
    """Registered keys said once per seed and kind, as a figure's title names them: [seed 001 Figure 4, …,
    seed 001 Figure 7] → "seed 001 Figures 4-7"; [seed 002 Figure 3, seed 002 Figure 8, seed 002 Theorem 1] →
    "seed 002 Figures 3 and 8, Theorem 1"."""
    seeds: dict[str, dict[str, list[str]]] = {}
    for key in keys:
        match = re.fullmatch(r"seed (\d{3}) (?:(§)|(\S+) )(.+)", key)
        if match is None:
            continue
        seed, section, kind, number = match.groups()
        kind = section or kind
        seeds.setdefault(seed, {}).setdefault(kind, []).append(number)
    parts = []
    for seed, kinds in seeds.items():
        said = []
        for kind, numbers in kinds.items():
            plural = {"Hypothesis": "Hypotheses"}.get(kind, f"{kind}s") if len(numbers) > 1 else kind
            said.append(f"{plural} {_numbers_text(numbers)}" if kind != "§" else "§" + ", §".join(numbers))
        parts.append(f"seed {seed} " + ", ".join(said))
    return "; ".join(parts)


def _numbers_text(numbers: list[str]) -> str:
    """["4", "5", "6", "7"] → "4-7"; ["3", "8"] → "3 and 8"; ["1"] → "1"."""
    ints = [int(n) for n in numbers] if all(n.isdigit() for n in numbers) else None
    if ints and len(ints) > 2 and ints == list(range(ints[0], ints[-1] + 1)):
        return f"{ints[0]}-{ints[-1]}"
    return " and ".join([", ".join(numbers[:-1]), numbers[-1]]) if len(numbers) > 1 else numbers[0]
