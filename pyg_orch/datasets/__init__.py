"""Graph data sets: synthetic power-law graphs and readers for raw files."""

from .musae import read_musae
from .power_law import power_law_graph

__all__ = [
    'power_law_graph',
    'read_musae',
]
