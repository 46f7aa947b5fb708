"""Attention circuits as factored matrices: ``QK`` = W_Q W_Kᵀ and ``OV`` = W_V W_O, kept as the two factors.

TransformerLens' ``FactoredMatrix`` (the part of it that circuit analysis uses), written here because
TransformerLens is an optional dependency and depthlab's models must not import it: ``A``, ``B``, ``AB``, ``BA``,
``T``, ``svd()`` (``U``, ``S``, ``V`` with ``AB = U diag(S) Vᵀ``), ``eigenvalues``, ``norm()``, ``@`` with
tensors, vectors and other factored matrices, ``*`` by a scalar, and indexing of the leading (layer, head) axes.
``transformer_lens.FactoredMatrix(m.A, m.B)`` turns one into TransformerLens' own.

:class:`Circuits` gives an attention module ``QK`` and ``OV`` from its ``W_Q``, ``W_K``, ``W_V`` and ``W_O``
(views or parameters), as TransformerLens' attention components have them.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import torch


def _linalg(x: torch.Tensor) -> torch.Tensor:
    """Half-precision factors are decomposed in float32 (LAPACK has no bf16 / fp16)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


class FactoredMatrix:
    """The matrix ``A @ B`` ([…, ldim, rdim]) kept as ``A`` […, ldim, mdim] and ``B`` […, mdim, rdim]."""

    def __init__(self, A: torch.Tensor, B: torch.Tensor) -> None:
        if A.shape[-1] != B.shape[-2]:
            raise ValueError(f"FactoredMatrix: A {list(A.shape)} and B {list(B.shape)} differ on the inner dimension")
        self.ldim, self.mdim, self.rdim = A.shape[-2], A.shape[-1], B.shape[-1]
        leading = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        self.shape = torch.Size([*leading, self.ldim, self.rdim])
        self.A = A.broadcast_to(*leading, self.ldim, self.mdim)
        self.B = B.broadcast_to(*leading, self.mdim, self.rdim)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def pair(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.A, self.B

    @property
    def AB(self) -> torch.Tensor:
        """The product, [… ldim, rdim]."""
        return self.A @ self.B

    @property
    def BA(self) -> torch.Tensor:
        """The product the other way round, [… mdim, mdim] (same non-zero eigenvalues as AB)."""
        if self.ldim != self.rdim:
            raise ValueError(f"FactoredMatrix.BA needs a square product (shape {list(self.shape)})")
        return self.B @ self.A

    @property
    def T(self) -> FactoredMatrix:
        return FactoredMatrix(self.B.transpose(-2, -1), self.A.transpose(-2, -1))

    @cached_property
    def _svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # SVD of each factor, then of the small middle matrix: never forms the ldim × rdim product
        ua, sa, vha = torch.linalg.svd(_linalg(self.A), full_matrices=False)
        ub, sb, vhb = torch.linalg.svd(_linalg(self.B), full_matrices=False)
        middle = sa[..., :, None] * (vha @ ub) * sb[..., None, :]
        um, sm, vhm = torch.linalg.svd(middle, full_matrices=False)
        return ua @ um, sm, vhb.transpose(-2, -1) @ vhm.transpose(-2, -1)

    def svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(U, S, V)`` with ``AB == U @ S.diag_embed() @ V.transpose(-2, -1)`` (V, not Vᵀ, as TransformerLens)."""
        return self._svd

    @property
    def U(self) -> torch.Tensor:
        return self._svd[0]

    @property
    def S(self) -> torch.Tensor:
        return self._svd[1]

    @property
    def V(self) -> torch.Tensor:
        return self._svd[2]

    @property
    def eigenvalues(self) -> torch.Tensor:
        """The eigenvalues of BA (those of AB but for trailing zeros), complex."""
        return torch.linalg.eigvals(_linalg(self.BA))

    def norm(self) -> torch.Tensor:
        """The Frobenius norm of AB, from the singular values."""
        return self.S.pow(2).sum(-1).sqrt()

    def __matmul__(self, other: torch.Tensor | FactoredMatrix) -> torch.Tensor | FactoredMatrix:
        if isinstance(other, FactoredMatrix):
            return (self @ other.A) @ other.B
        if other.dim() < 2:  # a vector: the product collapses to one
            return (self.A @ (self.B @ other.unsqueeze(-1))).squeeze(-1)
        if self.rdim > self.mdim:
            return FactoredMatrix(self.A, self.B @ other)
        return FactoredMatrix(self.AB, other)

    def __rmatmul__(self, other: torch.Tensor) -> torch.Tensor | FactoredMatrix:
        if other.dim() < 2:
            return ((other.unsqueeze(-2) @ self.A) @ self.B).squeeze(-2)
        if self.ldim > self.mdim:
            return FactoredMatrix(other @ self.A, self.B)
        return FactoredMatrix(other, self.AB)

    def __mul__(self, scalar: float | torch.Tensor) -> FactoredMatrix:
        return FactoredMatrix(self.A * scalar, self.B)

    __rmul__ = __mul__

    def __getitem__(self, index: Any) -> FactoredMatrix:
        """Index the leading axes (``model.QK[layer, head]``); the product's rows and columns through ``AB``."""
        index = index if isinstance(index, tuple) else (index,)
        if len([i for i in index if i is not Ellipsis and i is not None]) > self.ndim - 2:
            raise IndexError(f"FactoredMatrix of shape {list(self.shape)}: index its leading "
                             f"{self.ndim - 2} axes (rows and columns of the product through .AB)")
        return FactoredMatrix(self.A[index], self.B[index])

    def __repr__(self) -> str:
        return f"FactoredMatrix: Shape({self.shape}), Hidden Dim({self.mdim})"


class Circuits:
    """``QK`` (W_Q W_Kᵀ: scores = x_q QK x_kᵀ before any scaling) and ``OV`` (W_V W_O: what a head writes for
    the tokens it attends to), [… heads, d_model, d_model], from the module's ``W_Q``, ``W_K``, ``W_V``, ``W_O``."""

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor

    @property
    def QK(self) -> FactoredMatrix:
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        return FactoredMatrix(self.W_V, self.W_O)
