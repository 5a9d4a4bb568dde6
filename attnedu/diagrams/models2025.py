"""Lesson 13's diagrams (13a, 13b): what 2025's models changed in attention, each figure computed by the package.

    sink_and_gate_diagram()      13a: one query's softmax row without and with a sink logit s_h
                                 (``attnedu.sinks_gates.softmax_with_sink`` and ``sink_weight``), and where Qiu et al.'s
                                 output gate sits (after attention, before W_o)
    sparse_selection_diagram()   13b: the causal (query, key) grid of a sliding window, MoBA's block top-k and
                                 DeepSeek's indexer token top-k, the cells read being ``keys_read`` of
                                 ``attnedu.sparse_attention`` run on small inputs built here
    delta_rule_diagram()         13b: the memory S (d_v x d_k) written additively (S + v k^T) and by the delta rule
                                 (read S k, correct v - S k, scale by beta, write), and a key written twice: the sum
                                 against the overwrite (``attnedu.delta_rule.additive_memory`` and ``delta_step``)

Each returns its Figure. Positions, keys and blocks count from 0, as in the code. Colours: the house palette of
``_draw`` (blue for what is read, orange for what is always kept or taken away), matrices on one diverging scale
(red-blue, readable with the common colour-vision deficiencies) with their values written in the cells, so that no
colour carries a number alone.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from .._validate import check_int, check_number
from ._draw import COLOURS, arrow, box

READ, KEPT = COLOURS["encoder"], COLOURS["decoder"]  # a score computed; the own block / the sink
NOT_READ, FUTURE = "#e6e6e6", "white"  # allowed but not read; after the query (never read)
MATRIX_CMAP = "RdBu_r"


# --------------------------------------------------------------------------------------------
# 13a: the sink logit and the output gate
# --------------------------------------------------------------------------------------------

IDLE_SCORES = (0.3, -0.2, 0.4, 0.0, -0.3, 0.1)
"""One query's scores q . k_j / sqrt(d) over six keys when its head has nothing to read: all small, none stands out."""


def sink_and_gate_diagram(sink: float = 3.0, first_token_score: float = 3.0, fig: Figure | None = None) -> Figure:
    """Where a head with nothing to read puts its softmax mass (lesson 13a), and Qiu et al.'s output gate.

    Left, top: the plain softmax of one query's row, the first token's score raised to ``first_token_score`` (what
    a trained head learns, so that the spare mass has a place): the row sums to 1, most of it on key 0, and the
    output still mixes in v_0. Left, bottom: the same row (key 0 at its ordinary score, ``IDLE_SCORES``) with a sink
    logit s_h = ``sink`` in the denominator (``softmax_with_sink``): the sink's column (``sink_weight``) takes the
    mass and brings no value, so the real keys sum to less than 1 and the output shrinks. Right: the output gate,
    g = sigmoid(x W_g) from the layer input x, multiplying the head's output after attention and before W_o.
    -> the Figure (axes "plain", "sink", "gate")."""
    from ..sinks_gates import sink_weight, softmax_with_sink

    sink = check_number("sink", sink, "the sink logit s_h of the drawn head")
    first = check_number("first_token_score", first_token_score, "the score the plain head gives the first token")
    idle = torch.tensor(IDLE_SCORES, dtype=torch.float64)
    plain_scores = idle.clone()
    plain_scores[0] = first
    plain = torch.softmax(plain_scores, dim=-1)
    row, logit = idle[None, None, :], torch.tensor([sink], dtype=torch.float64)  # (H=1, n=1, m), (H,)
    with_sink = softmax_with_sink(row, logit)[0, 0]
    taken = float(sink_weight(row, logit)[0, 0])

    fig = fig or plt.figure(figsize=(10.5, 4.4), layout="constrained")
    axes = fig.subplot_mosaic([["plain", "gate"], ["sink", "gate"]], width_ratios=[1, 1.35])
    m = len(IDLE_SCORES)
    labels = ["0\nfirst"] + [str(j) for j in range(1, m)]
    for name, weights, extra in (("plain", plain, None), ("sink", with_sink, taken)):
        ax = axes[name]
        bars = ax.bar(range(m), weights.tolist(), color=READ, width=0.7, gid=f"{name}:keys")
        for b, w in zip(bars, weights.tolist()):
            ax.text(b.get_x() + b.get_width() / 2, w + 0.03, f"{w:.2f}", ha="center", va="bottom", fontsize=7)
        ticks = list(range(m))
        if extra is not None:
            bar = ax.bar([m + 0.4], [extra], color=KEPT, hatch="//", edgecolor="white", width=0.7, gid="sink:sink")[0]
            ax.text(bar.get_x() + bar.get_width() / 2, extra + 0.03, f"{extra:.2f}", ha="center", va="bottom",
                    fontsize=7)  # fmt: skip
            ax.axvline(m - 0.3, color=COLOURS["edge"], linewidth=0.8, linestyle=":")
            ticks.append(m + 0.4)
        ax.set_xticks(ticks, labels=labels + ([r"sink $s_h$" + "\n(dropped)"] if extra is not None else []),
                      fontsize=8)  # fmt: skip
        ax.set_xlim(-0.6, m + 1.0)
        ax.set_ylim(0, 1.15)
        ax.set_ylabel("weight", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes["plain"].set_title(f"plain softmax: the row must sum to 1, so the head parks its mass on the first token\n"
                            f"(its score raised to {first:g}); the output still mixes in that token's value",
                            fontsize=8.5)  # fmt: skip
    axes["sink"].set_title(f"with a sink logit $s_h$ = {sink:g} in the denominator: the keys get "
                           f"{float(with_sink.sum()):.2f} in all,\nthe sink takes {taken:.2f}, a weight with no value: "
                           "that mass is dropped", fontsize=8.5)  # fmt: skip
    axes["sink"].set_xlabel("keys of one query (its head has nothing to read)", fontsize=8)
    axes["sink"].legend(handles=[Patch(facecolor=READ, label="a key's weight (multiplies its value)"),
                                 Patch(facecolor=KEPT, hatch="//", edgecolor="white",
                                       label="the sink's weight (no value: dropped)")],
                        loc="upper center", fontsize=7, frameon=False)  # fmt: skip
    _gate_panel(axes["gate"])
    return fig


def _gate_panel(ax) -> None:
    """Qiu et al.'s G1 gate drawn as a data flow: x -> attention -> (x gate) -> W_o, the gate from x."""
    y_top, y_low = 2.2, 0.5
    box(ax, 0.0, 1.35, "x", "encoder", width=0.7)
    ax.text(0.0, 0.95, "layer input", ha="center", va="top", fontsize=8)
    box(ax, 2.35, y_top, "attention\nhead h", "context", width=1.5)
    box(ax, 2.35, y_low, r"gate $g = \sigma(x W_g)$", "decoder", width=2.3)
    ax.add_patch(plt.Circle((4.4, y_top), 0.28, facecolor="white", edgecolor="black", linewidth=1.2))
    ax.text(4.4, y_top, r"$\times$", ha="center", va="center", fontsize=13)
    box(ax, 5.9, y_top, "$W_o$", "attentional", width=0.9)
    arrow(ax, (0.3, 1.55), (1.6, y_top))
    ax.text(0.55, 2.3, "queries, keys,\nvalues from x", ha="center", va="bottom", fontsize=7)
    arrow(ax, (0.3, 1.15), (1.4, y_low))
    arrow(ax, (3.1, y_top), (4.12, y_top))
    ax.text(3.62, y_top + 0.12, "$o_h$", ha="center", va="bottom", fontsize=9)
    arrow(ax, (3.5, y_low), (4.4, y_top - 0.28))
    ax.text(4.45, 1.05, "g in (0, 1)", ha="left", va="center", fontsize=7)
    arrow(ax, (4.68, y_top), (5.45, y_top))
    arrow(ax, (6.35, y_top), (7.25, y_top))
    ax.text(7.3, y_top, "output", ha="left", va="center", fontsize=9)
    ax.text(4.9, 3.15, "after attention, before $W_o$", ha="center", va="center", fontsize=8.5,
            color=COLOURS["decoder"], fontweight="bold")  # fmt: skip
    ax.text(3.6, -0.1, "one gate per head (headwise) or per feature (elementwise), computed\nfor each query "
            "from its own input: g near 0 switches the head off for that\nquery, so its softmax need not park "
            "mass on a sink", ha="center", va="top", fontsize=7.5)  # fmt: skip
    ax.set_title("the output gate (Qiu et al. 2025): $g \\odot o_h$ goes to $W_o$", fontsize=9)
    kinds = {"the layer's input": "encoder", "attention (softmax over keys)": "context",
             "the gate (its own weights $W_g$)": "decoder", "output projection": "attentional"}  # fmt: skip
    ax.legend(handles=[Patch(facecolor=COLOURS[k], label=name) for name, k in kinds.items()], loc="lower center",
              ncol=2, fontsize=7, frameon=False)  # fmt: skip
    ax.set_xlim(-0.7, 8.1)
    ax.set_ylim(-2.2, 3.4)
    ax.set_aspect("equal")
    ax.axis("off")


# --------------------------------------------------------------------------------------------
# 13b: which (query, key) scores sparse selection computes
# --------------------------------------------------------------------------------------------


def selection_inputs(length: int = 16, needle: int = 2, block_size: int = 4, dim: int = 8, seed: int = 0):
    """Small inputs for ``sparse_selection_diagram``: q, k (1, 1, length, dim) with random features 1.. (seeded), and
    one needle: key ``needle`` carries 4 along feature 0, which no other key has, and the queries of the last block
    (positions length - block_size .. length - 1, "late queries") carry 3 along it, so that their best key is the
    needle. -> q, k, v (1, 1, length, dim), the late queries' positions."""
    g = torch.Generator().manual_seed(seed)
    q = 0.5 * torch.randn(1, 1, length, dim, generator=g, dtype=torch.float64)
    k = 0.5 * torch.randn(1, 1, length, dim, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, length, dim, generator=g, dtype=torch.float64)
    q[..., 0] = 0.0
    k[..., 0] = 0.0
    late = range(length - block_size, length)
    k[..., needle, 0] = 4.0
    q[..., late.start :, 0] = 3.0
    return q, k, v, late


def sparse_selection_diagram(
    length: int = 16,
    block_size: int = 4,
    window: int = 3,
    top_k_blocks: int = 2,
    top_k_tokens: int = 4,
    needle: int = 2,
    seed: int = 0,
    fig: Figure | None = None,
) -> Figure:
    """The causal (query, key) grid of one sequence of ``length`` positions, cut into blocks of ``block_size``, for
    three ways of choosing the keys each query reads (lesson 13b); a shaded cell is a score q_i . k_j computed.

    sliding window: keys i - ``window`` .. i (``sliding_window_attention``), the same whatever the data.
    MoBA block top-k: the query's own block always (orange, the causal mask inside it), plus the earlier blocks of
    largest q . mean key, ``top_k_blocks`` in all (``moba_attention``); a block after the query's is never read.
    DeepSeek's indexer token top-k: the ``top_k_tokens`` earlier tokens of largest indexer score (``dsa_attention``,
    with an indexer of one head that reads q and k themselves, so it ranks tokens by ReLU(q . k)).

    The inputs come from ``selection_inputs``: random, plus one needle, key ``needle``, that the queries of the
    last block look for. Each title counts the scores computed against dense causal attention's. -> the Figure
    (one axes per rule, in that order)."""
    from ..sparse_attention import dsa_attention, moba_attention, sliding_window_attention

    length = check_int("length", length, "positions drawn", 4, 32)
    block_size = check_int("block_size", block_size, "keys per block", 1, length // 2)
    window = check_int("window", window, "earlier keys each query reads in the window", 0, length - 1)
    top_k_blocks = check_int("top_k_blocks", top_k_blocks, "blocks read per query, its own included", 1)
    top_k_tokens = check_int("top_k_tokens", top_k_tokens, "tokens read per query", 1)
    needle = check_int("needle", needle, "the key the last block's queries look for", 0, length - block_size - 1)
    seed = check_int("seed", seed, "the seed of the random features")
    q, k, v, late = selection_inputs(length, needle, block_size, seed=seed)
    index_q = q[:, 0, :, None, :]  # (B, N, H_I = 1, d): the indexer's queries are q
    panels = [
        (f"sliding window: {window} earlier keys\nand the query's own", sliding_window_attention(q, k, v, window)),
        (f"MoBA: top {top_k_blocks} blocks of {block_size}, its own always,\nthe others by q . (block's mean key)",
         moba_attention(q, k, v, block_size, top_k_blocks)),
        (f"DeepSeek indexer: top {top_k_tokens} tokens\nby ReLU(q . k) (an indexer of one head)",
         dsa_attention(q, k, v, index_q, k[:, 0], torch.ones(1, length, 1, dtype=q.dtype), top_k_tokens)),
    ]  # fmt: skip
    fig = fig or plt.figure(figsize=(10.5, 4.3), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (name, result), rule in zip(axes, panels, ("window", "moba", "dsa")):
        read = result.keys_read[0, 0]
        for i in range(length):
            for j in range(length):
                own = rule == "moba" and i // block_size == j // block_size
                colour = FUTURE if j > i else (KEPT if own else READ) if read[i, j] else NOT_READ
                ax.add_patch(Rectangle((j, length - 1 - i), 1, 1, facecolor=colour, edgecolor="white",
                                       linewidth=0.5, gid=f"{rule}:{i},{j}"))  # fmt: skip
        for b in range(block_size, length, block_size):  # block boundaries
            ax.axvline(b, color="#555555", linewidth=0.6)
            ax.axhline(length - b, color="#555555", linewidth=0.6)
        ax.annotate(f"key {needle}", xy=(needle + 0.5, length), xytext=(needle + 0.5, length + 1.6),
                    ha="center", va="bottom", fontsize=7, arrowprops={"arrowstyle": "-|>", "color": "black",
                                                                      "linewidth": 0.8})  # fmt: skip
        ax.annotate("", xy=(-0.2, 0), xytext=(-0.2, block_size), annotation_clip=False,
                    arrowprops={"arrowstyle": "-", "color": "black", "linewidth": 2.5})  # fmt: skip
        counts = result.counts
        ax.set_title(f"{name}\n{counts.scores} of {counts.dense_scores} scores computed", fontsize=8.5)
        ax.set_xlim(-0.4, length)
        ax.set_ylim(0, length + 2.6)
        ax.set_aspect("equal")
        starts = list(range(0, length, block_size))
        ax.set_xticks([s + 0.5 for s in starts], labels=[str(s) for s in starts], fontsize=7)
        ax.set_yticks([length - s - 0.5 for s in starts], labels=[str(s) for s in starts], fontsize=7)
        ax.set_xlabel("key position", fontsize=8)
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
    axes[0].set_ylabel("query position", fontsize=8)
    handles = [Patch(facecolor=READ, label="score computed (key read)"),
               Patch(facecolor=KEPT, label="MoBA: the query's own block (always read)"),
               Patch(facecolor=NOT_READ, label="allowed, not read"),
               Patch(facecolor=FUTURE, edgecolor="#bbbbbb", label="future key (never read)")]  # fmt: skip
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"the queries of the last block (bar on the left) look for key {needle}; lines mark blocks of "
                 f"{block_size}", fontsize=9)  # fmt: skip
    return fig


# --------------------------------------------------------------------------------------------
# 13b: the delta rule against the additive memory
# --------------------------------------------------------------------------------------------

STORED_KEYS = ((1.0, 0.0, 0.0, 0.0), (0.0, 1.0, 0.0, 0.0))
STORED_VALUES = ((1.0, 0.0, 0.5), (0.0, 1.0, -0.5))
NEW_KEY = (0.0, 0.6, 0.8, 0.0)  # a unit key that overlaps the second stored key
NEW_VALUE = (-1.0, 0.5, 1.0)
REWRITE_VALUE = (1.0, -1.0, 0.0)  # the second value written with the second stored key


def delta_rule_example(beta: float = 1.0) -> dict[str, torch.Tensor]:
    """The numbers ``delta_rule_diagram`` draws (float64): the memory S (d_v = 3 x d_k = 4) holding two pairs with
    orthogonal unit keys, a new unit pair (k, v) whose key overlaps the second stored key, and the second key written
    again with another value. -> dict: S, k, v; additive: vk (v k^T), S_add, read_add ((S + v k^T) k); delta: Sk,
    correction (v - S k), write (beta (v - S k) k^T), S_delta, read_delta; twice: first, second (the two values),
    twice_add, twice_delta (what each memory returns for that key after both writes)."""
    from ..delta_rule import additive_memory, delta_step

    beta = check_number("beta", beta, "the delta rule's write strength", 0.0, strict=True)
    if beta > 2.0:
        raise ValueError(f"beta (the delta rule's write strength) should be in (0, 2] for a unit key, got {beta!r}: "
                         "a larger beta makes the update diverge")  # fmt: skip
    f64 = torch.float64
    keys, values = torch.tensor(STORED_KEYS, dtype=f64), torch.tensor(STORED_VALUES, dtype=f64)
    _, S = additive_memory(keys, keys, values)  # orthogonal keys: either rule stores them alike
    k, v = torch.tensor(NEW_KEY, dtype=f64), torch.tensor(NEW_VALUE, dtype=f64)
    _, S_add = additive_memory(k[None], k[None], v[None], initial_state=S)
    Sk = S @ k
    correction = v - Sk
    S_delta = delta_step(S, k, v, beta)
    first, second = values[1], torch.tensor(REWRITE_VALUE, dtype=f64)
    _, S_twice_add = additive_memory(keys[1:], keys[1:], second[None], initial_state=S)
    S_twice_delta = delta_step(S, keys[1], second, beta)
    return {
        "S": S, "k": k, "v": v,
        "vk": torch.outer(v, k), "S_add": S_add, "read_add": S_add @ k,
        "Sk": Sk, "correction": correction, "write": beta * torch.outer(correction, k), "S_delta": S_delta,
        "read_delta": S_delta @ k,
        "first": first, "second": second, "twice_add": S_twice_add @ keys[1], "twice_delta": S_twice_delta @ keys[1],
    }  # fmt: skip


def delta_rule_diagram(beta: float = 1.0, fig: Figure | None = None) -> Figure:
    """The memory of linear attention, S (d_v x d_k), and two ways of writing a pair (k, v) into it (lesson 13b).

    Top: S holding two pairs, and the new unit key k and value v. Middle: the additive write S + v k^T, read back
    with k: v plus what S already held for k (interference). Below it: the delta rule's read (S k), correction
    (v - S k), scaled write beta (v - S k) k^T and new S, read back with k: v exactly when beta = 1. Bottom: a key
    written twice, v_1 then v_2: the additive memory returns their sum, the delta rule the second value (when beta
    = 1). Every matrix and vector is drawn cell by cell on one colour scale, its values written in it; the numbers
    are ``delta_rule_example(beta)``. -> the Figure."""
    ex = delta_rule_example(beta)
    beta = float(beta)
    vmax = max(float(t.abs().max()) for t in ex.values())
    norm, cmap = Normalize(-vmax, vmax), plt.get_cmap(MATRIX_CMAP)
    fig = fig or plt.figure(figsize=(9.5, 7.6), layout="constrained")
    ax = fig.add_subplot()
    col = lambda t: t[:, None]  # noqa: E731  a vector drawn as a column
    row = lambda t: t[None, :]  # noqa: E731  a key drawn as a row, k^T

    def draw(name, values, x, y_top, label):
        _cells(ax, name, values, x, y_top, label, norm, cmap)
        return x + values.shape[1]

    def step(x0, x1, y, text=""):
        arrow(ax, (x0 + 0.1, y), (x1 - 0.1, y))
        if text:
            ax.text((x0 + x1) / 2, y + 0.25, text, ha="center", va="bottom", fontsize=8)

    # the memory and the new pair
    y = 0.0
    ax.text(-0.6, y + 1.2, "the memory and the pair to write", fontsize=9.5, fontweight="bold", va="bottom")
    end = draw("S", ex["S"], 0, y, "memory S ($d_v$ x $d_k$):\ntwo pairs stored")
    end = draw("k", row(ex["k"]), end + 1.8, y - 1, "new key $k^T$ (unit)")
    draw("v", col(ex["v"]), end + 1.8, y, "new value v")
    # additive
    y = -5.2
    ax.text(-0.6, y + 1.2, "additive (linear attention): S + v $k^T$", fontsize=9.5, fontweight="bold", va="bottom")
    end = draw("vk", ex["vk"], 0, y, "v $k^T$")
    step(end, end + 2.0, y - 1.5, "S +")
    end = draw("S_add", ex["S_add"], end + 2.0, y, "new S")
    step(end, end + 2.4, y - 1.5, "read\nwith k")
    end = draw("read_add", col(ex["read_add"]), end + 2.4, y, "S k: v plus\nwhat S held")
    # delta
    y = -10.4
    ax.text(-0.6, y + 1.2, r"delta rule: read, correct, write ($\beta$ = " + f"{beta:g})", fontsize=9.5,
            fontweight="bold", va="bottom")  # fmt: skip
    end = draw("Sk", col(ex["Sk"]), 0, y, "read S k")
    step(end, end + 1.6, y - 1.5, "v -")
    end = draw("correction", col(ex["correction"]), end + 1.6, y, "correct\nv - S k")
    step(end, end + 1.8, y - 1.5, r"$\beta\,(\cdot)\,k^T$")
    end = draw("write", ex["write"], end + 1.8, y, r"write $\beta$(v - S k)$k^T$")
    step(end, end + 1.6, y - 1.5, "S +")
    end = draw("S_delta", ex["S_delta"], end + 1.6, y, "new S")
    step(end, end + 2.4, y - 1.5, "read\nwith k")
    draw("read_delta", col(ex["read_delta"]), end + 2.4, y, "S k" + (": v" if beta == 1.0 else ""))
    # a key written twice
    y = -15.6
    ax.text(-0.6, y + 1.2, "the second stored key written again, with $v_2$ after $v_1$, then read: the sum "
            "against the overwrite", fontsize=9.5, fontweight="bold", va="bottom")  # fmt: skip
    end = draw("first", col(ex["first"]), 0, y, "first\nvalue $v_1$")
    end = draw("second", col(ex["second"]), end + 1.6, y, "second\nvalue $v_2$")
    end = draw("twice_add", col(ex["twice_add"]), end + 3.2, y, "additive reads\n$v_1 + v_2$")
    draw("twice_delta", col(ex["twice_delta"]), end + 3.2, y,
         "delta rule reads\n" + ("$v_2$" if beta == 1.0 else r"$v_1 + \beta(v_2 - v_1)$"))  # fmt: skip
    ax.set_xlim(-0.8, 19.0)
    ax.set_ylim(-19.0, 2.6)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=0.4, label="value of an entry")
    return fig


def _cells(ax, name, values, x, y_top, label, norm, cmap) -> None:
    """A matrix drawn cell by cell, top-left corner at (x, y_top), one unit per cell, its values written in; each
    cell's value text carries gid ``name`` (row-major), for the tests."""
    rows, columns = values.shape
    for r in range(rows):
        for c in range(columns):
            value = float(values[r, c]) + 0.0  # no "-0.00"
            ax.add_patch(Rectangle((x + c, y_top - r - 1), 1, 1, facecolor=cmap(norm(value)), edgecolor="white",
                                   linewidth=0.8))  # fmt: skip
            ax.text(x + c + 0.5, y_top - r - 0.5, f"{value:.2f}".replace("-0.00", "0.00"), ha="center", va="center",
                    fontsize=6.5, color="white" if abs(norm(value) - 0.5) > 0.3 else "black", gid=name)  # fmt: skip
    ax.text(x + columns / 2, y_top + 0.15, label, ha="center", va="bottom", fontsize=7.5)
