"""Exceptions shared by the samplers and loaders of :mod:`pyg_orch`."""


class GraphTypeError(TypeError, ValueError):
    r"""Raised when :obj:`data` is not a :class:`~torch_geometric.data.Data`,
    a :class:`~torch_geometric.data.HeteroData` or a
    (:class:`~torch_geometric.data.FeatureStore`,
    :class:`~torch_geometric.data.GraphStore`) pair. A :class:`TypeError`, and
    also a :class:`ValueError`, which PyG raises for the same input."""


class ArgumentTypeError(TypeError, ValueError):
    r"""Raised when an argument has the wrong type (e.g. the string
    :obj:`'no'` for a boolean flag). A :class:`TypeError`, and also a
    :class:`ValueError`, which these checks raised before."""


def graph_type_message(data) -> str:
    r"""The message of :class:`GraphTypeError`, with PyG's wording."""
    return (f"'data' must be a Data, HeteroData or a (FeatureStore, "
            f"GraphStore) tuple (got {type(data).__name__}): Expected a "
            f"'Data', 'HeteroData', or a tuple of 'FeatureStore' and "
            f"'GraphStore'")
