"""Graph data sets: synthetic power-law graphs and readers for raw files."""

from .musae import read_musae
from .power_law import power_law_graph
from .structural import structural_features

__all__ = [
    'power_law_graph',
    'read_musae',
    'structural_features',
]
