"""The template tasks' sequences on stream 2 (``tasks.counter``): :meth:`TemplateSpace.sample` of the training split,
its redraw loop as one tensor operation.

Seed 001 §4.3, Definition 1: "A substitution map is an injection function s : W → X that maps wildcards to real word
symbols X." ``TemplateSpace.sample`` draws a template's sequence uniformly among those in the split: from the
template's table of training sequences where it has one, else as a uniformly random injection, redrawn while it is
invalid (independent symbols that are not distinct) or held out. Here ``TemplateSpace.max_rounds`` candidates per
sequence are drawn at once, each as ``sample`` draws one, and the first accepted is kept (accepted: a valid
injection whose sequence is not held out, ``counter.split_mask``, and not ``exclude``). The first accepted of
independent candidates is uniform over the accepted ones, as the loop's result is. Where ``sample`` would run out of
rounds and raise (probability below 10⁻¹² per batch) this keeps the first candidate.
"""

from __future__ import annotations

import math

import torch

from depthlab.tasks.counter import Counter, encode_rows, first_true, split_mask, take_rows
from depthlab.tasks.templates_common import TemplateSpace


def sample_sequences(space: TemplateSpace, counter: Counter, tmpl: torch.Tensor, draw: int,
                     exclude: torch.Tensor | None = None) -> torch.Tensor:
    """A training sequence [R, B, *S, l] of template ``tmpl[…]`` ([R, B, *S]) for each, different from ``exclude``
    [R, B, *S, l] when given; draws ``draw`` and ``draw + 1``.

    Off a graph (``counter.capturable`` False) with one sequence per example (no S), one candidate each is drawn,
    and the whole budget only for the examples whose candidate is rejected: candidate t takes the same lanes of
    each draw at any budget then, so the values are the fixed budget's."""
    tries = space.max_rounds(counter.batch, "train", exclude is not None)
    if counter.capturable or tries == 1 or tmpl.dim() > 2:
        return first_accepted(space, counter, tmpl, draw, exclude, tries)[0]
    sequences, accepted = first_accepted(space, counter, tmpl, draw, exclude, 1)
    again = ~accepted
    if again.any():
        sequences[again] = first_accepted(space, counter.rows(again), tmpl[again][None], draw,
                                          None if exclude is None else exclude[again][None], tries)[0][0]
    return sequences


def first_accepted(space: TemplateSpace, counter: Counter, tmpl: torch.Tensor, draw: int,
                   exclude: torch.Tensor | None, tries: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first accepted of ``tries`` candidates of each (the first candidate where none is), [R, B, *S, l], and
    whether it was accepted, [R, B, *S]."""
    table = space.device_tables.get("table", counter.device)
    if space.tabled.all():  # every template's training sequences listed: no injection to draw
        picks, tabled = table_picks(space, counter, tmpl, draw, tries)
        ok = tabled.expand(picks.shape)
        if exclude is not None:  # the table's rows are sequences, each one code: compare codes, copy the pick only
            codes = encode_rows(table, space.n_symbols)
            ok = ok & (codes[picks] != encode_rows(exclude, space.n_symbols)[..., None])
        first = first_true(ok)
        return take_rows(table, picks.gather(-1, first)[..., 0]), ok.gather(-1, first)[..., 0]
    candidates, ok = injected_candidates(space, counter, tmpl, draw + 1, tries)
    if space.tabled.any():
        picks, tabled = table_picks(space, counter, tmpl, draw, tries)
        candidates, ok = torch.where(tabled[..., None], take_rows(table, picks), candidates), ok | tabled
    if exclude is not None:
        ok = ok & (candidates != exclude[..., None, :]).any(-1)
    first = first_true(ok)
    return (candidates.gather(-2, first[..., None].expand(*tmpl.shape, 1, space.l))[..., 0, :],
            ok.gather(-1, first)[..., 0])


def injected_candidates(space: TemplateSpace, counter: Counter, tmpl: torch.Tensor, draw: int,
                        tries: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``tries`` candidate sequences [R, B, *S, T, l] of templates ``tmpl`` by uniformly random injections, and
    whether each is accepted: a valid injection whose sequence is in the training split. As ``sample`` draws them:
    independent symbols (valid when distinct) where they are distinct with probability at least 1/2, else distinct
    symbols."""
    lead, jmax = tmpl.shape, space.jmax
    size = math.prod(lead[2:]) * tries
    if space.distinct_prob >= 0.5:
        injections = counter.below(space.n_symbols, draw, size * jmax).view(*lead, tries, jmax)
        ordered = injections.sort(-1).values
        valid = (ordered[..., 1:] != ordered[..., :-1]).all(-1)
    else:
        injections = counter.distinct(space.n_symbols, jmax, draw, rows=size).view(*lead, tries, jmax)
        valid = torch.ones_like(injections[..., 0], dtype=torch.bool)
    rows = space.device_tables.get("rows", counter.device)[tmpl][..., None, :]  # [R, B, *S, 1, l]
    candidates = injections.gather(-1, rows.expand(*lead, tries, space.l))
    held = split_mask(encode_rows(candidates, space.n_symbols), space.eval_fraction, space.split_seed)
    return candidates, valid & ~held


def table_picks(space: TemplateSpace, counter: Counter, tmpl: torch.Tensor, draw: int,
                tries: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``tries`` candidates [R, B, *S, T] drawn uniformly from each template's table of training sequences, as
    rows of the table (meaningless where a template has no table), and whether it has one, [R, B, *S, 1]."""
    tables, device = space.device_tables, counter.device
    counts = tables.get("counts", device)[tmpl][..., None]  # -1: not tabled
    local = counter.below(counts.clamp(min=1).expand(*tmpl.shape, tries).flatten(2), draw,
                          math.prod(tmpl.shape[2:]) * tries)
    pick = local.view(*tmpl.shape, tries) + tables.get("offsets", device)[tmpl][..., None]
    return pick.clamp(max=len(tables.arrays["table"]) - 1), counts >= 0
