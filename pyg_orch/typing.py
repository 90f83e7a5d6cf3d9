"""Type aliases shared across :mod:`pyg_orch`, following PyG's."""
from typing import Tuple

NodeType = str
EdgeType = Tuple[str, str, str]
