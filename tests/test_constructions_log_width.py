"""Seed 003's constructions on the GPT-style transformer: index lookup (Theorem 1) and equality (Theorem 6)."""

import math

import numpy as np
import pytest
import torch

from depthlab.constructions import log_width
from depthlab.draw import save
from depthlab.draw.widths import widths_figure
from depthlab.report.summaries import widths_summary


def test_lemma2_vectors():
    v = log_width.nearly_orthogonal(500, 64, seed=1)
    assert v.shape == (500, 64)
    np.testing.assert_allclose((v**2).sum(1), 1.0)
    assert set(np.unique(np.abs(v))) == {1 / 8}
    # nested families: dimension k is the first k columns of any larger one (rescaled)
    np.testing.assert_allclose(log_width.nearly_orthogonal(500, 16, seed=1) * 4, v[:, :16] * 8)
    # γ shrinks like sqrt(log N / k)
    assert log_width.max_off_diagonal(v) < 0.75
    assert log_width.max_off_diagonal(log_width.nearly_orthogonal(500, 256, seed=1)) < 0.4


@pytest.mark.parametrize("N,n_symbols", [(5, 2), (40, 4), (200, 8)])
def test_index_lookup_exact(N, n_symbols):
    found = log_width.smallest_index_lookup_width(N, n_symbols)
    built = log_width.index_lookup_model(N, found["k"], n_symbols)
    cert = log_width.certify_index_lookup(built)
    assert cert["min_margin"] > 0 and cert["key_symbol_spread"] < 1e-12
    assert log_width.run_index_lookup(built, examples=48)["accuracy"] == 1.0
    assert built.width == 2 * (max(1, math.ceil(math.log2(n_symbols))) + 2 * found["k"])
    assert built.model.layers == 1 and built.model.spec.heads == 1


def test_index_lookup_certificate_is_tight():
    """Below the certified width the adversarial input (every other position complementary) fails."""
    N = 60
    found = log_width.smallest_index_lookup_width(N)
    below = log_width.index_lookup_model(N, found["k"] - 1)
    assert log_width.certify_index_lookup(below)["min_margin"] <= 0
    assert log_width.run_index_lookup(below, examples=N * 4, seed=2)["accuracy"] < 1.0


def test_index_lookup_attention_matches_the_model():
    """The certificate's weights are the weights the model's forward pass uses."""
    built = log_width.index_lookup_model(30, 12)
    rng = np.random.default_rng(0)
    symbols = rng.integers(0, 4, size=(5, 30))
    p = np.arange(5) * 6
    with torch.no_grad():
        out = built.model(built.tokens(symbols, p)[None], capture=True)
    weights = out.attentions[0][0, :, 0, -1]  # [B, key] of the last query
    on_p = weights[torch.arange(5), torch.as_tensor(p)]
    assert float(on_p.min()) >= log_width.certify_index_lookup(built)["min_weight"] - 1e-12


@pytest.mark.parametrize("N", [2, 10, 64, 200])
def test_equality_exact(N):
    found = log_width.smallest_equality_width(N)
    assert found["exact"] and found["k_minus_1_fails"]
    built = log_width.equality_model(N, found["k"])
    assert built.model.layers == 2 and built.model.spec.mlp
    assert log_width.run_equality(built, examples=40)["accuracy"] == 1.0


def test_equality_exhaustive_small():
    """N = 10: all 1024 inputs through the forward pass, at the certified width."""
    N = 10
    built = log_width.equality_model(N, log_width.smallest_equality_width(N)["k"])
    rows = ((np.arange(2**N)[:, None] >> np.arange(N)[None, :]) & 1).astype(np.int64)
    targets = (rows[:, : N // 2] == rows[:, N // 2 :]).all(1)
    logits = built.model(torch.as_tensor(rows)[None]).outputs[0]
    assert torch.equal(logits.argmax(-1).bool(), torch.as_tensor(targets))


def test_widths_grow_like_log_n(tmp_path):
    table = log_width.widths_table([10, 100, 1000])
    for entry in table["constructions"].values():
        ks = [r["k"] for r in entry["rows"]]
        assert ks[0] <= ks[1] <= ks[2] <= 8 * math.log(1000)
        assert 0 < entry["fit_k"]["slope_per_ln_N"] < 8
    path = str(save(widths_figure(table), tmp_path / "widths.png"))
    assert (tmp_path / "widths.png").stat().st_size > 0 and path.endswith("widths.png")


def test_widths_summary_for_reproduce(tmp_path, monkeypatch):
    monkeypatch.setattr(log_width, "QUICK_NS", [10, 30])
    summary, (renderable,) = widths_summary(None, [], tmp_path / "seed003-widths-quick.png", "widths")
    assert set(summary["constructions"]) == {"index_lookup", "equality"}
    assert summary["figure"].endswith("seed003-widths-quick.png") and renderable.row_count == 4
