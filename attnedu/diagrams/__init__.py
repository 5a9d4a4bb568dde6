"""Diagrams of the course's models, drawn with Matplotlib so they render offline in JupyterLab and
in the book, from code kept with the course. One visual vocabulary for every lesson:

    encoder state  h_j   blue box, source word below
    decoder state  s_t   orange box, target word above
    context        c     purple box
    attentional    h~_t  green box (Luong's decoder)
    recurrence           grey arrow from one state to the next
    attention weight     purple line from h_j to the context, as thick as alpha_tj

Positions, decoder steps and heads count from 0, as in code and in the lessons' text (h_0 is the first
source word's state; before step 0 the decoder holds its initial state s_{-1}). tiling_diagram counts blocks
from 1, as lesson 08 does.

One module per group of lessons: ``encoder_decoder`` (01-03), ``queries_to_positions`` (04-07), ``transformers``
(08-11), ``devices`` (12: ranks, each with its colour in ``RANK_COLOURS``), ``models2025`` (13a, 13b: sinks and
gates, sparse selection, the delta rule; each returns its Figure); the shared vocabulary (colours, boxes, arrows) in
``_draw``.
"""

from ._draw import COLOURS, arrow, box
from .devices import RANK_COLOURS, layout_diagram, layouts_diagram, ring_diagram, ulysses_diagram
from .encoder_decoder import luong_diagram, seq2seq_diagram
from .models2025 import delta_rule_diagram, sink_and_gate_diagram, sparse_selection_diagram
from .queries_to_positions import (
    lookup_diagram,
    mask_gallery,
    multihead_diagram,
    positions_diagram,
    rope_rotation_diagram,
)
from .transformers import (
    induction_circuit_diagram,
    kv_sharing_diagram,
    memory_hierarchy_diagram,
    tiling_diagram,
    transformer_blocks_diagram,
)

__all__ = [
    "COLOURS",
    "arrow",
    "box",
    "seq2seq_diagram",
    "luong_diagram",
    "lookup_diagram",
    "multihead_diagram",
    "mask_gallery",
    "rope_rotation_diagram",
    "positions_diagram",
    "tiling_diagram",
    "memory_hierarchy_diagram",
    "transformer_blocks_diagram",
    "kv_sharing_diagram",
    "induction_circuit_diagram",
    "RANK_COLOURS",
    "ring_diagram",
    "layout_diagram",
    "layouts_diagram",
    "ulysses_diagram",
    "sink_and_gate_diagram",
    "sparse_selection_diagram",
    "delta_rule_diagram",
]
