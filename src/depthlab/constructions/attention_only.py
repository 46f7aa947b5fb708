"""Seed 001's constructions with hand-set weights, in the attention-only model's coordinates.

Coordinates (``models.attention_only``): token one-hot in [0, d), position one-hot in [d, d + n), then free
dimensions. Weights use the model's row convention: score(query q, key k) = x_q W_QK x_kᵀ and value = x W_V,
so the paper's α[i, j] (key i, query j; Lemma 1) lands at W_QK[d + j, d + i].

§10's two lemmas (instructive and constrained attention) and the constructed first layers of §13.2, §14.2 and
§15, which §9.1 also uses to initialise training, live with the model (``depthlab.models.init``); the whole
models of the theorems are built here from them.
"""

from __future__ import annotations

import numpy as np
import torch

from ..models import TaskShapes
from ..models.attention_only import AttentionOnlySpec
from ..models.init import (
    MASK,
    FirstLayer,
    blank_model,
    block_parse_layer,
    constrained_attention,
    copy_layer,
    instructive_attention,
    token_match,
)
from ..tasks import Task

# =====================================================================================================
# The theorems' constructions (seed 001 §12–§15): whole models with every weight set by hand.
#
# Each function returns an ``AttentionOnly`` model for one run (run axis of size 1) in float64, ReLU
# attention, every parameter zero except the construction. Scores, values and logits are small integers (or
# sums of powers of 3), so the forward pass is exact in float64 and accuracy 1.0 is not a rounding accident:
# ``margin`` (target logit minus the best other logit) is reported by ``registry.evaluate`` and is ≥ 1.
# =====================================================================================================


def _blank_model(task: Task, heads: list[int], width: int):
    """An attention-only model for ``task`` with these heads per layer and this width, all weights zero, float64."""
    spec = AttentionOnlySpec(layers=len(heads), heads=list(heads), width=width, attention="relu", init="random")
    return blank_model(spec, TaskShapes(len(task.vocab), task.seq_len, len(task.labels)))


def _put(model, layer: int, head: int, w_qk: torch.Tensor | None = None, w_v: torch.Tensor | None = None) -> None:
    attn = model.blocks[layer].attn
    with torch.no_grad():
        if w_qk is not None:
            attn.W_QK[0, head] = w_qk.to(torch.float64)
        if w_v is not None:
            attn.W_V[0, head] = w_v.to(torch.float64)


def memorization_model(task: Task):
    """Theorem 1 (§12): one layer, n heads, d' = max(n·d, d + n), memorises every sequence of ``task``.

    ``task`` is a ``memorization`` task: n = length + 1 positions (the last is the CLS token), d = n_words + 1.
    Lemma 4: head i < n-1 makes the last position attend only to position i (instructive attention, Lemma 1)
    and its value writes the token x_i into slot [i·d, (i+1)·d), scaled by n to undo the average over heads;
    head n-1 attends the last position to itself with value -n·I, cancelling the residual. The last position
    then holds v = Σ_i e_{i·d + x_i}: the sequence written out as n-1 one-hots.

    Classifier (Lemma 3, made explicit): every v has exactly n-1 ones, so the matched filter W_U[:, y_s] = v_s
    gives logit n-1 to the sequence's own label and at most n-2 (the number of positions where two distinct
    sequences agree) to any other. Margin ≥ 1; no iterative construction is needed.
    """
    d, n = len(task.vocab), task.seq_len
    width = max(n * d, d + n)
    model = _blank_model(task, [n], width)
    for i in range(n - 1):
        alpha = np.zeros((n, n))
        alpha[i, n - 1] = 1.0  # key i, query n-1
        w_v = torch.zeros(width, width)
        w_v[torch.arange(d), i * d + torch.arange(d)] = float(n)
        _put(model, 0, i, instructive_attention(alpha, d, width), w_v)
    _put(model, 0, n - 1, instructive_attention(np.eye(n), d, width), -float(n) * torch.eye(width))
    data = task.dataset
    words = torch.as_tensor(data.inputs[:, : n - 1])
    reps = torch.zeros(len(data), width, dtype=torch.float64)
    reps[torch.arange(len(data))[:, None], torch.arange(n - 1) * d + words] = 1.0
    with torch.no_grad():
        model.param("unembed.W_U")[0, :, torch.as_tensor(data.targets)] = reps.T
    return model


def icqa_model(task: Task):
    """Theorem 3 (§13.2): two layers, one head each, d' = d + n, copy–matching for in-context QA.

    ``task`` is an ``icqa`` task (questions 0..n_q-1, sign n_q, answers after). Layer 1 is the §13.2 copying
    layer (``copy_layer``: α(1) = blockdiag(A_3×3 × k, A_2×2), W_V = I), so every position of block b holds
    q_b + r + a_b and both final positions hold q_c + r. Layer 2 is the induction (matching) head: W_QK = I on
    the question coordinates only, W_V = I; the last position attends with score 1 to the three positions of
    the block whose question is q_c (and to the two final positions, which carry no answer), so it gains
    3·a_c. The classifier reads the answer coordinates (W_U = I there): logit 3 for a_c, 0 for every other
    class. As in the paper; the only reading needed is that "I_{d_1}" in W_QK(2) covers the questions, not
    the sign (with the sign included every position would match and all answers would tie).
    """
    d, n = len(task.vocab), task.seq_len
    width = d + n
    model = _blank_model(task, [1, 1], width)
    w_qk, w_v = copy_layer(task.k).build(d, n, width)
    _put(model, 0, 0, w_qk, w_v)
    match = torch.zeros(width, width)
    match[: task.n_q, : task.n_q] = torch.eye(task.n_q)
    _put(model, 1, 0, match, torch.eye(width))
    answers = torch.arange(task.answer_offset, task.answer_offset + task.n_a)
    with torch.no_grad():
        model.param("unembed.W_U")[0, answers, answers] = 1.0
    return model


def free_parse_layer(l: int) -> FirstLayer:
    """§14.2 "check position with the same token", written into l free coordinates.

    W_QK = I on the tokens (a position attends to every position holding its token, itself included) and the
    value of position i < l is e_{d+n+i}: after the layer, free coordinate c of position j (j < l) is
    [x_c = x_j], row j of the template's equality matrix. Unlike ``parse_layer`` (which adds these rows onto
    the one-hot positions, as the paper writes) the positional one-hots stay intact, so a second layer can
    still use instructive attention (Lemma 1); see ``template_model``.
    """

    def build(d: int, n: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        w_v = torch.zeros(width, width)
        w_v[d + torch.arange(l), d + n + torch.arange(l)] = 1.0
        return token_match(d, width), w_v

    return FirstLayer(l, build)


def template_codes(template_rows: np.ndarray) -> np.ndarray:
    """u_t for every template: u_t[c] = Σ_{i<l} 3^(l-1-i) [t_c = t_i], row c of the equality matrix in base 3."""
    rows = np.asarray(template_rows)
    l = rows.shape[1]
    equal = (rows[:, :, None] == rows[:, None, :]).astype(np.int64)  # [T, c, i]
    return equal @ (3 ** np.arange(l - 1, -1, -1, dtype=np.int64))


def template_model(task: Task):
    """Theorem 5 (§14.2): two layers, one head each, parse–mapping for template matching; d' = d + n + l.

    ``task`` is a ``template`` task with a distinct label per template (``n_classes=None``, the theorem's
    setting). Layer 1 (``free_parse_layer``) parses: free coordinate c of position j becomes [x_c = x_j].
    Layer 2 is the paper's single "inductive head" with the ternary weights: the last position attends to
    position i < l with weight 3^(l-1-i) (instructive attention), W_V = I, so free coordinate c of the last
    position becomes u[c] = Σ_i 3^(l-1-i) [x_c = x_i] — row c of the template's equality matrix read as a
    base-3 number. u depends only on the template and determines it (its digits are the matrix).

    Classifier, solved exactly: nearest template code. Column t of W_U is 2·u_t on the l free coordinates and
    -|u_t|² on the sign coordinate (which is exactly 1 at the last position), so the logit of template t is
    2 u·u_t - |u_t|² = |u|² - |u - u_t|²: the own template scores |u|², every other at least 1 less (codes are
    distinct integer vectors). This replaces the paper's iterative Lemma 3, whose perturbation margins shrink
    geometrically; a least-squares / pseudo-inverse fit cannot work here because the ≤ l-dimensional codes of
    Bell(l) templates are not linearly independent.

    Fixes to §14.2 as printed: (1) the paper's layer-1 W_V subtracts the tokens, but a token repeated m times
    receives m copies of itself, so no linear W_V cancels it; here the tokens simply stay (the classifier
    gives them weight 0). (2) The paper adds the template rows onto the positional one-hots (d' = d + n), after
    which the second layer's attention to "position i" is no longer position-only: the key of position i is
    p_i plus the other positions holding its token, so Lemma 1 fails. Writing the rows into l free
    coordinates (d' = d + n + l instead of d + n) keeps Lemma 1 exact. The digits are 0/1 (the paper's 2 on the
    diagonal came from the residual p_j, which here stays in the positional block); base 3 is kept.
    """
    if task.n_classes is not None:
        raise ValueError(
            "n_classes: Theorem 5 gives every template its own label (n_classes=None); a linear classifier on "
            "the template codes cannot merge arbitrary templates into shared classes"
        )
    d, n, l = len(task.vocab), task.seq_len, task.l
    width = d + n + l
    model = _blank_model(task, [1, 1], width)
    _put(model, 0, 0, *free_parse_layer(l).build(d, n, width))
    alpha = np.zeros((n, n))
    alpha[:l, n - 1] = 3.0 ** np.arange(l - 1, -1, -1)
    _put(model, 1, 0, instructive_attention(alpha, d, width), torch.eye(width))
    codes = torch.as_tensor(template_codes(task.template_rows), dtype=torch.float64)  # [T, l]
    labels = torch.as_tensor(task.template_labels)
    with torch.no_grad():
        w_u = model.param("unembed.W_U")[0]
        w_u[d + n : d + n + l, labels] = 2.0 * codes.T
        w_u[task.sign_id, labels] = -(codes**2).sum(1)
    return model


def ictm_model(task: Task):
    """Theorem 6 (§15): three layers with 1, 1 and 2l heads, d' = d + n + l + 2, parsing–copying–matching.

    ``task`` is an ``ictm`` task: k blocks (x_0 … x_{l-1}, r, a), then the query (x_0 … x_{l-1}, r); F denotes
    the l + 2 free coordinates d + n + o (o = offset inside a block), F0 = k(l+2) the query block's start.

    Layer 1 (parse) is ``block_parse_layer(k, l)``, the layer the trainer uses as the IC-TM initialisation:
    token matching constrained to each block (Lemma 2) with values writing the key's block offset into F.
    Symbol position o of a block then holds E[o, :] in F[0:l], row o of that block's template equality matrix
    E[o, o'] = [x_o = x_o']; E is the same for two blocks iff their questions follow the same template.

    Layer 2 (copy and pre-match), one head, instructive attention (the positional one-hots are intact):
    every position of context block b attends to its answer position, and its symbol position o also to
    the query's position o; W_V copies the answer coordinates and negates F. Symbol position (b, o) then
    holds a_b and E_b[o, :] - E_q[o, :]; the last position attends to every answer position and holds Σ_b a_b.

    Layer 3 (match), 2l heads: head i scores a key by +F_i (read against the last position's own positional
    one-hot, so the score depends on the key only), head l+i by -F_i; the query block is masked (Lemma 2).
    ReLU makes the two heads together weigh key (b, o) by Σ_i |E_b[o, i] - E_q[o, i]|. W_V = -2l on the answer
    coordinates (2l undoes the average over heads), so the last position ends with
    Σ_b (1 - |E_b - E_q|₁) a_b: coefficient 1 for the block with the query's template, ≤ -1 for every other
    (two different templates' equality matrices differ in at least two symmetric entries). The classifier reads
    the answer coordinates: logit 1 for the right answer, ≤ 0 for every other class.

    Fixes to §15 as printed: W_QK(1)'s extra block "I_{(d'-d_1)×d_1}" is dropped (it would make positional
    coordinates match tokens); α(2)'s "B" part (comparing each row with the last template) is realised by
    attending context position o to query position o with W_V = diag(I on answers, -I on F), which is what the
    text describes; layer 3 reads the key's F against the query's positional one-hot instead of the query's
    own template rows (which are not all 1, as the paper's picture assumes), masks the query block, and scales
    W_V by 2l for the head average the paper omits.
    """
    d, n, k, l = len(task.vocab), task.seq_len, task.k, task.l
    width = d + n + l + 2
    free = d + n
    model = _blank_model(task, [1, 1, 2 * l], width)
    _put(model, 0, 0, *block_parse_layer(k, l).build(d, n, width))
    # layer 2: copy answers, pre-match each context row against the query's row
    q0 = k * (l + 2)
    alpha = np.zeros((n, n))  # key i, query j
    for b in range(k):
        start, answer = b * (l + 2), b * (l + 2) + l + 1
        alpha[answer, start : start + l + 2] = 1.0
        alpha[q0 + np.arange(l), start + np.arange(l)] = 1.0
        alpha[answer, n - 1] = 1.0
    answers = torch.arange(task.answer_offset, task.answer_offset + task.n_a)
    w_v2 = torch.zeros(width, width)
    w_v2[answers, answers] = 1.0
    w_v2[free + torch.arange(l + 2), free + torch.arange(l + 2)] = -1.0
    _put(model, 1, 0, instructive_attention(alpha, d, width), w_v2)
    # layer 3: subtract every answer whose template differs from the query's
    w_v3 = torch.zeros(width, width)
    w_v3[answers, answers] = -2.0 * l
    for head in range(2 * l):
        w = torch.zeros(width, width)
        w[d + n - 1, free + head % l] = 1.0 if head < l else -1.0
        w[d + n - 1, d + q0 : d + n] = MASK
        _put(model, 2, head, w, w_v3)
    with torch.no_grad():
        model.param("unembed.W_U")[0, answers, answers] = 1.0
    return model


NESTED_DEPTHS = ("paper", "compact")


def nested_icqa_model(task: Task, depth: str = "paper"):
    """Seed 001 §7: nested in-context QA by copy–matching once per hop; ``depth`` "paper" gives §7's 2·hops layers.

    §7: "a sequence like 'a → b b → c c → d a → _d', where we can design a transformer with 6 layers that performs
    'copy-matching' 3 times". ``task`` is a ``nested_icqa`` task: K = k·hops links (x r y) at positions 3j, 3j+1,
    3j+2, then the query symbol (n-2) and r (n-1); symbols and the sign share the token block [0, d). One head
    per layer. Free coordinates hold S-dimensional symbol slots (S = n_symbols): a pointer slot PTR and, per hop t,
    a destination slot DST_t.

    Copy (hop t's first layer, §13.2's instructive attention, Lemma 1): the source position 3j of every link
    attends to its destination 3j+2 and W_V writes that token into DST_t, so the source holds x_j in its token
    and y_j in DST_t; hop 1's copy also makes the last position attend to the query symbol, which lands in its
    DST_1 (the pointer of the first hop).

    Match (hop t's second layer, §13.2's induction head): W_QK scores a key by [pointer of the last position =
    key's token] (the pointer is read from DST_1 in hop 1, from PTR after); Lemma 2's mask keeps only the last
    position as a query and only the K source positions as keys (a chain's inner symbol is also the destination of
    the link before it, and the query symbol equals the first source). Exactly one key scores 1 (all symbols are
    distinct). W_V maps DST_t to PTR and the token to minus the pointer's slot, so the last position's pointer
    p = x_j becomes y_j: after hop t it is the symbol t links down the chain. The classifier reads PTR: logit 1
    for the answer, 0 for every other token (margin 1).

    ``depth="compact"`` copies once and matches ``hops`` times (hops + 1 layers, one DST slot): the copied
    destinations never change, so one copy serves every hop. §7 does not claim 2·hops is the least depth; this
    variant shows it is not (the trained minimum depth is in the ``seed001-nested`` preset). Reading of §7: the
    seed gives no weights; the two roles a symbol can have (source, destination) are kept apart by writing the
    destination into its own slot, as §15 keeps templates apart in free coordinates.
    """
    if depth not in NESTED_DEPTHS:
        raise ValueError(f"depth: must be one of {', '.join(NESTED_DEPTHS)} (got {depth!r})")
    d, n, s, hops, links = len(task.vocab), task.seq_len, task.n_symbols, task.hops, task.n_links
    copies = hops if depth == "paper" else 1
    free = d + n
    ptr = free + torch.arange(s)

    def dst(t: int) -> torch.Tensor:  # hop t's destination slot (t = 1 … hops)
        return free + s * min(t, copies) + torch.arange(s)

    width = free + s * (copies + 1)
    layers = [2] * copies + [1] * (hops - copies)  # each hop: copy then match, or match alone
    model = _blank_model(task, [1] * sum(layers), width)
    sources, symbols = 3 * np.arange(links), torch.arange(s)
    layer = 0
    for t in range(1, hops + 1):
        if t <= copies:
            alpha = np.zeros((n, n))  # key i, query j
            alpha[sources + 2, sources] = 1.0
            if t == 1:
                alpha[n - 2, n - 1] = 1.0
            w_v = torch.zeros(width, width)
            w_v[symbols, dst(t)] = 1.0
            _put(model, layer, 0, instructive_attention(alpha, d, width), w_v)
            layer += 1
        pointer = dst(1) if t == 1 else ptr
        w_qk = torch.zeros(width, width)
        w_qk[pointer, symbols] = 1.0  # query's pointer slot against the key's token
        allowed = np.zeros((n, n), dtype=bool)  # key i, query j
        allowed[sources, n - 1] = True
        w_qk = constrained_attention(w_qk, allowed, d)
        w_v = torch.zeros(width, width)
        w_v[dst(t), ptr] = 1.0
        w_v[symbols, pointer] = -1.0
        _put(model, layer, 0, w_qk, w_v)
        layer += 1
    with torch.no_grad():
        model.param("unembed.W_U")[0, ptr, symbols] = 1.0
    return model
