"""A task's vocabulary as TransformerLens' tokenizer calls: ``to_tokens``, ``to_str_tokens``, ``to_string``,
``to_single_token``.

depthlab's tasks write an input as its tokens separated by spaces, as ``depthlab sample`` prints it
(``d → 4 c → 5 b → 2 b``; ``->`` may stand for ``→``). A piece that is not a token of the vocabulary is read as
tokens written together, longest first (``()[]`` in Dyck, ``a1b`` as ``a1 b``); anything else is refused, naming
the piece and the vocabulary. There is no beginning-of-sequence token to prepend (``prepend_bos``): a task whose
inputs start with one (``induction``: ``<bos>``) has it in its vocabulary, written like any other token.

Logits are over the task's *labels* (``task.labels``; the output classes), not its vocabulary: :meth:`label_id`
reads a label as the task writes it (what ``logit_attrs`` takes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

ARROW, ASCII_ARROW = "→", "->"
SHOWN = 24  # tokens of the vocabulary listed in an error


class Vocabulary:
    """The tokens of a task (``vocab``) and its output classes (``labels``); ``name`` names it in errors."""

    def __init__(self, vocab: Sequence[str], labels: Sequence[str], name: str = "task") -> None:
        self.vocab, self.labels, self.name = list(vocab), list(labels), name
        self.index = {token: i for i, token in enumerate(self.vocab)}
        self.label_index = {label: i for i, label in enumerate(self.labels)}
        self.longest_first = sorted(self.vocab, key=len, reverse=True)

    def _listing(self, tokens: list[str]) -> str:
        more = f" … ({len(tokens)} in all)" if len(tokens) > SHOWN else ""
        return " ".join(tokens[:SHOWN]) + more

    def split(self, text: str) -> list[str]:
        """``text`` as the vocabulary's tokens (see the module's docstring)."""
        if ARROW in self.index and ASCII_ARROW not in self.index:
            text = text.replace(ASCII_ARROW, ARROW)
        tokens: list[str] = []
        for piece in text.split():
            tokens += [piece] if piece in self.index else self._run_together(piece)
        return tokens

    def _run_together(self, piece: str) -> list[str]:
        out, i = [], 0
        while i < len(piece):
            token = next((t for t in self.longest_first if t and piece.startswith(t, i)), None)
            if token is None:
                raise ValueError(f"unknown token {piece!r}; the {self.name} vocabulary is {self._listing(self.vocab)}")
            out.append(token)
            i += len(token)
        return out

    def to_tokens(self, text: str | Sequence[str], prepend_bos: bool | None = None) -> torch.Tensor:
        """Token ids [batch, n] of one input (a string) or several of the same length (a list of strings)."""
        if prepend_bos:
            raise ValueError(f"to_tokens: the {self.name} vocabulary has no beginning-of-sequence token to prepend "
                             "(write it in the input where the task has one)")
        texts = [text] if isinstance(text, str) else list(text)
        rows = [[self.index[t] for t in self.split(one)] for one in texts]
        if len({len(row) for row in rows}) > 1:
            raise ValueError(f"to_tokens: the inputs have different lengths ({sorted({len(r) for r in rows})} "
                             "tokens); depthlab's tasks have no padding token: give inputs of one length")
        return torch.tensor(rows, dtype=torch.long).reshape(len(rows), -1)

    def to_str_tokens(self, tokens: Any, prepend_bos: bool | None = None) -> list[str] | list[list[str]]:
        """The tokens as strings: of a string, of each string of a list, or of token ids ([n] or [1, n])."""
        if isinstance(tokens, str):
            return [self.vocab[i] for i in self.to_tokens(tokens, prepend_bos)[0].tolist()]
        if isinstance(tokens, list) and tokens and isinstance(tokens[0], str):
            return [self.to_str_tokens(one, prepend_bos) for one in tokens]  # type: ignore[misc]
        ids = torch.as_tensor(np.asarray(tokens)).squeeze()
        if ids.dim() > 1:
            raise ValueError(f"to_str_tokens: one input at a time (got token ids of shape {list(ids.shape)}); "
                             "pass tokens[i]")
        return [self.vocab[i] for i in ids.reshape(-1).tolist()]

    def to_string(self, tokens: Any) -> str | list[str]:
        """Token ids as text ([n] -> one string, [batch, n] -> a list), tokens separated by spaces."""
        ids = torch.as_tensor(np.asarray(tokens))
        if ids.dim() > 2:
            raise ValueError(f"to_string: token ids [n] or [batch, n] (got shape {list(ids.shape)})")
        if ids.dim() == 2:
            return [" ".join(self.vocab[i] for i in row) for row in ids.tolist()]
        return " ".join(self.vocab[i] for i in ids.reshape(-1).tolist())

    def to_single_token(self, string: str) -> int:
        """The id of a string that is one token."""
        tokens = self.split(string)
        if len(tokens) != 1:
            raise ValueError(f"to_single_token: {string!r} is {len(tokens)} tokens, not one")
        return self.index[tokens[0]]

    def label_id(self, label: str) -> int:
        """The class of a label as the task writes it (``task.labels``)."""
        if label not in self.label_index:
            raise ValueError(f"{label!r} is not a label of {self.name} ({self._listing(self.labels)})")
        return self.label_index[label]
