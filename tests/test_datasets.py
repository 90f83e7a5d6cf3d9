import math

import pytest
import torch

from pyg_orch.datasets import power_law_graph, read_musae, structural_features
from pyg_orch.evaluation import random_split

from conftest import DATASETS

MUSAE_ROOT = DATASETS / 'musae'


def _in_degree(data):
    return torch.bincount(data.edge_index[1], minlength=data.num_nodes)


def _same_class_fraction(data):
    row, col = data.edge_index
    return (data.y[row] == data.y[col]).double().mean().item()


def _expected_homophily(data, homophily):
    # Non-homophilous sources are uniform, so they hit the same class with
    # probability `sum_c q_c^2`:
    q = torch.bincount(data.y).double() / data.num_nodes
    return homophily + (1.0 - homophily) * (q**2).sum().item()


# power_law_graph #############################################################


def test_power_law_shapes_and_dtypes():
    data = power_law_graph(2000, 30000, num_features=16, num_classes=7)
    N = 2000
    assert data.num_nodes == N
    assert data.edge_index.shape == (2, 30000)
    assert data.edge_index.dtype == torch.int64
    assert int(data.edge_index.min()) >= 0
    assert int(data.edge_index.max()) < N
    assert data.x.shape == (N, 16) and data.x.dtype == torch.float32
    assert data.y.shape == (N, ) and data.y.dtype == torch.int64
    assert int(data.y.min()) >= 0 and int(data.y.max()) < 7
    assert torch.bincount(data.y).numel() == 7  # All classes are used.

    masks = [data.train_mask, data.val_mask, data.test_mask]
    for mask in masks:
        assert mask.shape == (N, ) and mask.dtype == torch.bool
    assert int(sum(m.long() for m in masks).max()) == 1  # Disjoint + cover.
    assert int(sum(m.long() for m in masks).min()) == 1
    assert int(data.train_mask.sum()) == 1200
    assert int(data.val_mask.sum()) == 400
    assert int(data.test_mask.sum()) == 400
    data.validate()


def test_power_law_custom_dtypes_and_no_features():
    data = power_law_graph(500, 4000, num_features=0, seed=3,
                           index_dtype=torch.int32)
    assert data.edge_index.dtype == torch.int32
    assert data.x is None and 'x' not in data
    assert data.num_nodes == 500

    data = power_law_graph(500, 4000, num_features=8, seed=3,
                           feature_dtype=torch.float64)
    assert data.x.dtype == torch.float64 and data.x.shape == (500, 8)


def test_power_law_edge_cases():
    data = power_law_graph(10, 0, num_features=4)
    assert data.edge_index.shape == (2, 0)
    assert data.num_nodes == 10

    data = power_law_graph(1, 50, num_features=2, num_classes=1)
    assert data.edge_index.shape == (2, 50)
    assert int(data.edge_index.abs().sum()) == 0  # Only node 0 exists.

    data = power_law_graph(300, 3000, num_classes=1, homophily=0.7)
    assert _same_class_fraction(data) == 1.0


def test_power_law_reproducible():
    kwargs = dict(num_features=8, num_classes=5)
    a = power_law_graph(1000, 10000, seed=42, **kwargs)
    b = power_law_graph(1000, 10000, seed=42, **kwargs)
    c = power_law_graph(1000, 10000, seed=43, **kwargs)
    for key in ['edge_index', 'x', 'y', 'train_mask', 'val_mask', 'test_mask']:
        assert torch.equal(a[key], b[key]), key
    assert not torch.equal(a.edge_index, c.edge_index)
    assert not torch.equal(a.y, c.y)

    # The topology does not depend on the number of features:
    d = power_law_graph(1000, 10000, seed=42, num_classes=5, num_features=0)
    assert torch.equal(a.edge_index, d.edge_index)
    assert torch.equal(a.y, d.y)

    # `seed=None` draws a fresh graph:
    e = power_law_graph(1000, 10000, seed=None, **kwargs)
    assert e.edge_index.shape == (2, 10000)


def test_power_law_in_degree_is_skewed():
    N, E = 10000, 200000
    data = power_law_graph(N, E, num_features=0, exponent=2.1)
    deg = _in_degree(data).double()
    assert deg.max() > 100 * deg.mean()
    top = deg.sort(descending=True).values
    assert top[:N // 100].sum() > 0.3 * E  # Top 1% get > 30% of the edges.

    # Hubs are spread over the node ids, not simply nodes `0, ..., k`:
    hubs = deg.topk(N // 100).indices.double()
    assert 0.3 * N < hubs.mean() < 0.7 * N

    # Sources are not skewed nearly as much:
    out_deg = torch.bincount(data.edge_index[0], minlength=N).double()
    assert out_deg.max() < 0.1 * deg.max()

    # A smaller exponent gives a heavier tail:
    shares = []
    for exponent in [3.0, 2.1, 1.5]:
        data = power_law_graph(N, E, num_features=0, exponent=exponent)
        top = _in_degree(data).sort(descending=True).values
        shares.append(top[:N // 100].sum().item() / E)
    assert shares[0] < shares[1] < shares[2]


def test_power_law_in_degree_matches_zipf():
    N, E, exponent = 1000, 400000, 2.1
    data = power_law_graph(N, E, num_features=0, exponent=exponent, seed=5)
    deg = _in_degree(data).double().sort(descending=True).values
    p = torch.arange(1, N + 1, dtype=torch.float64).pow(-1 / (exponent - 1))
    expected = E * p / p.sum()
    # Compare the degrees of the most popular ranks with their expectation:
    assert torch.allclose(deg[:10], expected[:10], rtol=0.05)
    assert abs(deg[:100].sum() / expected[:100].sum() - 1) < 0.02


@pytest.mark.parametrize('homophily', [0.0, 0.3, 0.5, 0.9, 1.0])
def test_power_law_homophily(homophily):
    data = power_law_graph(5000, 100000, num_features=0, num_classes=10,
                           homophily=homophily)
    expected = _expected_homophily(data, homophily)
    assert abs(_same_class_fraction(data) - expected) < 0.01


def test_power_law_features_are_informative():
    data = power_law_graph(3000, 1000, num_features=16, num_classes=5)
    x, y = data.x, data.y
    train = data.train_mask
    centroids = torch.stack([x[train & (y == c)].mean(0) for c in range(5)])
    pred = torch.cdist(x[data.test_mask], centroids).argmin(dim=-1)
    acc = (pred == y[data.test_mask]).double().mean().item()
    assert acc > 0.6  # Far above chance (0.2).
    # ... but noisy, i.e., the features are not the centroids themselves:
    assert (x[train] - centroids[y[train]]).std() > 0.5


def _full_batch_test_accuracy(model, data, use_graph, epochs=100):
    import torch.nn.functional as F
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01,
                                 weight_decay=5e-4)

    def forward():
        return model(data.x, data.edge_index) if use_graph else model(data.x)

    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        out = forward()
        F.cross_entropy(out[data.train_mask],
                        data.y[data.train_mask]).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = forward().argmax(dim=-1)
    mask = data.test_mask
    return (pred[mask] == data.y[mask]).double().mean().item()


def test_power_law_defaults_pose_a_graph_learning_task():
    # With the default `feature_snr` and `homophily`, the features alone are
    # only partly informative and the neighbors carry signal too: GraphSAGE
    # beats an MLP on the features by a wide margin, and neither is near
    # 100%. Measured over seeds 0-4: MLP 0.19-0.23, GraphSAGE 0.52-0.57.
    from torch_geometric.nn import MLP, GraphSAGE

    data = power_law_graph(3000, 30000, seed=0)
    num_features, num_classes = data.num_features, int(data.y.max()) + 1
    assert (num_features, num_classes) == (100, 47)  # The defaults.
    torch.manual_seed(0)
    mlp = MLP([num_features, 64, num_classes], dropout=0.5)
    sage = GraphSAGE(num_features, 64, num_layers=2, out_channels=num_classes,
                     dropout=0.5)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # Tiny tensors: one thread is fastest.
    try:
        mlp_acc = _full_batch_test_accuracy(mlp, data, use_graph=False)
        sage_acc = _full_batch_test_accuracy(sage, data, use_graph=True)
    finally:
        torch.set_num_threads(threads)
    assert 0.08 < mlp_acc  # Informative: chance is 1 / 47.
    assert mlp_acc + 0.2 <= sage_acc < 0.8, (mlp_acc, sage_acc)


def test_power_law_feature_snr():
    # `feature_snr` only scales the centroids: same topology, labels, noise.
    a = power_law_graph(2000, 1000, num_features=32, num_classes=4, seed=1)
    b = power_law_graph(2000, 1000, num_features=32, num_classes=4, seed=1,
                        feature_snr=6.0)
    assert torch.equal(a.edge_index, b.edge_index)
    assert torch.equal(a.y, b.y)

    def centroid_distance(data):
        centroids = torch.stack(
            [data.x[data.y == c].mean(0) for c in range(4)])
        return torch.pdist(centroids).mean().item()

    assert abs(centroid_distance(a) - 3.0) < 1.0
    assert abs(centroid_distance(b) - 6.0) < 2.0
    # The noise is the same: only the centroids moved.
    diff = b.x - a.x
    for c in range(4):
        rows = diff[a.y == c]
        assert torch.allclose(rows, rows[:1].expand_as(rows), atol=1e-5)
    c = power_law_graph(2000, 1000, num_features=32, num_classes=4, seed=1,
                        feature_snr=0)
    assert centroid_distance(c) < 0.5  # Uninformative.


@pytest.mark.parametrize('kwargs, name', [
    (dict(num_nodes=0), 'num_nodes'),
    (dict(num_nodes=-5), 'num_nodes'),
    (dict(num_nodes=2.5), 'num_nodes'),
    (dict(num_edges=-1), 'num_edges'),
    (dict(num_features=-1), 'num_features'),
    (dict(num_classes=0), 'num_classes'),
    (dict(exponent=1.0), 'exponent'),
    (dict(exponent=0.5), 'exponent'),
    (dict(exponent=float('nan')), 'exponent'),
    (dict(homophily=-0.1), 'homophily'),
    (dict(homophily=1.5), 'homophily'),
    (dict(homophily=float('nan')), 'homophily'),
    (dict(feature_snr=-1.0), 'feature_snr'),
    (dict(feature_snr=float('inf')), 'feature_snr'),
    (dict(feature_snr='high'), 'feature_snr'),
    (dict(index_dtype=torch.float32), 'index_dtype'),
    (dict(feature_dtype=torch.int64), 'feature_dtype'),
])
def test_power_law_argument_validation(kwargs, name):
    args = dict(num_nodes=100, num_edges=1000)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        power_law_graph(**args)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_power_law_cuda():
    data = power_law_graph(10000, 200000, num_features=8, device='cuda')
    assert data.edge_index.is_cuda and data.x.is_cuda and data.y.is_cuda
    assert data.train_mask.is_cuda
    assert data.edge_index.shape == (2, 200000)
    deg = _in_degree(data).double()
    assert deg.max() > 100 * deg.mean()
    expected = _expected_homophily(data, 0.5)
    assert abs(_same_class_fraction(data) - expected) < 0.01
    other = power_law_graph(10000, 200000, num_features=8, device='cuda')
    assert torch.equal(data.edge_index, other.edge_index)
    assert torch.equal(data.x, other.x)


# read_musae ##################################################################


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_read_musae_string_labels(tmp_path):
    root = tmp_path / 'musae'
    _write(root / 'facebook' / 'edges.csv', 'id_1,id_2\n0,1\n1,2\n3,3\n')
    _write(
        root / 'facebook' / 'target.csv',
        'id,facebook_id,page_name,page_type\n'
        '2,111,"Page, with comma",tvshow\n'
        '0,222,Some page,politician\n'
        '3,333,Other,company\n'
        '1,444,Another,government\n',
    )
    data = read_musae(str(root), 'facebook')
    assert data.num_nodes == 4
    assert 'x' not in data
    # Sorted: company=0, government=1, politician=2, tvshow=3.
    assert data.y.tolist() == [2, 1, 3, 0]
    assert data.edge_index.tolist() == [
        [0, 1, 3, 1, 2, 3],
        [1, 2, 3, 0, 1, 3],
    ]

    # `root` may also point to the data set directory itself:
    other = read_musae(root / 'facebook')
    assert torch.equal(data.edge_index, other.edge_index)


def test_read_musae_int_labels(tmp_path):
    _write(tmp_path / 'edges.csv', 'id_1,id_2\n0,2\n')
    _write(tmp_path / 'target.csv', 'id,name,ml_target\n0,a,1\n1,b,0\n2,c,1\n')
    data = read_musae(str(tmp_path))
    assert data.y.tolist() == [1, 0, 1]
    assert data.y.dtype == torch.int64
    assert data.edge_index.dtype == torch.int64
    assert data.edge_index.tolist() == [[0, 2], [2, 0]]


def test_read_musae_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match='does_not_exist'):
        read_musae(str(tmp_path), 'does_not_exist')
    _write(tmp_path / 'edges.csv', 'id_1,id_2\n0,1\n')
    with pytest.raises(FileNotFoundError, match='target.csv'):
        read_musae(str(tmp_path))
    (tmp_path / 'edges.csv').unlink()
    _write(tmp_path / 'target.csv', 'id,target\n0,1\n1,0\n')
    with pytest.raises(FileNotFoundError, match='edges.csv'):
        read_musae(str(tmp_path))


@pytest.mark.parametrize('name, num_nodes, num_edges, num_classes', [
    ('facebook', 22470, 171002, 4),
    ('github', 37700, 289003, 2),
])
def test_read_musae_shared(name, num_nodes, num_edges, num_classes):
    if not (MUSAE_ROOT / name).is_dir():
        pytest.skip(f"MUSAE data not found in '{MUSAE_ROOT}'")
    data = read_musae(str(MUSAE_ROOT), name)
    assert data.num_nodes == num_nodes
    assert data.edge_index.shape == (2, 2 * num_edges)
    assert data.edge_index.dtype == torch.int64
    assert int(data.edge_index.min()) >= 0
    assert int(data.edge_index.max()) < num_nodes
    assert data.y.shape == (num_nodes, ) and data.y.dtype == torch.int64
    assert torch.bincount(data.y).numel() == num_classes
    assert data.x is None
    # Both directions of every edge are present:
    row, col = data.edge_index
    assert torch.equal(row[:num_edges], col[num_edges:])
    assert torch.equal(col[:num_edges], row[num_edges:])


# structural_features, random_split ##########################################


def test_structural_features():
    # A star (hub 0, leaves 1-4, undirected) and an isolated node 5:
    row = torch.tensor([0, 0, 0, 0, 1, 2, 3, 4])
    col = torch.tensor([1, 2, 3, 4, 0, 0, 0, 0])
    x = structural_features(torch.stack([row, col]), 6, num_buckets=3)
    assert x.shape == (6, 5) and x.dtype == torch.float32
    # Buckets floor(log2(1 + deg)): deg 4 -> 2, deg 1 -> 1, deg 0 -> 0.
    assert x[:, :3].argmax(dim=1).tolist() == [2, 1, 1, 1, 1, 0]
    assert x[:, :3].sum(dim=1).tolist() == [1.0] * 6
    log_deg = torch.log1p(torch.tensor([4., 1, 1, 1, 1, 0])) / math.log(5)
    assert torch.allclose(x[:, 3], log_deg)
    # The hub's neighbors all have log-degree log(2) / log(5), the leaves'
    # only neighbor is the hub (1.0), the isolated node has none:
    assert torch.allclose(x[:, 4], torch.tensor(
        [math.log(2) / math.log(5), 1, 1, 1, 1, 0]))
    # Degrees past the last bucket share it; bad input is refused:
    x = structural_features(torch.stack([row, col]), 6, num_buckets=2)
    assert x[:, :2].argmax(dim=1).tolist() == [1, 1, 1, 1, 1, 0]
    with pytest.raises(ValueError, match=r'node ids in \[0, 4\)'):
        structural_features(torch.stack([row, col]), 4)
    with pytest.raises(ValueError, match='edge_index'):
        structural_features(torch.stack([row, col]).float(), 6)


def test_random_split():
    train, val, test = random_split(1000, 0.1, 0.2, seed=3)
    assert train.sum() == 100 and val.sum() == 200 and test.sum() == 700
    assert torch.equal(train.int() + val.int() + test.int(),
                       torch.ones(1000, dtype=torch.int))
    torch.manual_seed(0)  # The global RNG does not matter, the seed does:
    again = random_split(1000, 0.1, 0.2, seed=3)
    assert all(torch.equal(a, b) for a, b in zip((train, val, test), again))
    other = random_split(1000, 0.1, 0.2, seed=4)
    assert not torch.equal(train, other[0])
    with pytest.raises(ValueError, match='train_ratio'):
        random_split(1000, 0.9, 0.2)
