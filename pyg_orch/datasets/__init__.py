"""Graph data sets: synthetic power-law and papers100M-like graphs, and
readers for raw files."""

from .musae import read_musae
from .papers_like import (
    PAPERS100M,
    papers_like_features,
    papers_like_graph,
    papers_like_node_data,
    papers_like_topology,
)
from .power_law import power_law_graph
from .structural import structural_features

__all__ = [
    'PAPERS100M',
    'papers_like_features',
    'papers_like_graph',
    'papers_like_node_data',
    'papers_like_topology',
    'power_law_graph',
    'read_musae',
    'structural_features',
]
