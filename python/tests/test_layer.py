"""sgk.Layer against a float64 numpy transcription of SPEC section 1, the
Python-side checks of bad input, and where libsgk is loaded from. numpy only."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import sgk


def reference(w, nodes, pair_feats, edge_mask, eps=1e-5):
    """SPEC section 1 in float64, straight from its formulas."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    nodes = nodes.astype(np.float64)
    B, N, D = nodes.shape
    H = w["rel_mlp.2.weight"].shape[0]
    hd = D // H
    mean = nodes.mean(-1, keepdims=True)
    var = ((nodes - mean) ** 2).mean(-1, keepdims=True)
    x = (nodes - mean) / np.sqrt(var + eps) * w["norm.weight"] + w["norm.bias"]
    q, k, v = (x @ w[n + "_proj.weight"].T for n in "qkv")
    split = lambda t: t.reshape(B, N, H, hd).transpose(0, 2, 1, 3)  # (B, H, N, hd)
    q, k, v = split(q), split(k), split(v)
    t = pair_feats.astype(np.float64) @ w["rel_mlp.0.weight"].T + w["rel_mlp.0.bias"]
    bias = (t / (1 + np.exp(-t))) @ w["rel_mlp.2.weight"].T + w["rel_mlp.2.bias"]
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd) + bias.transpose(0, 3, 1, 2)
    edge = (edge_mask != 0)[:, None]
    s = np.where(edge, s, -np.inf)
    any_edge = edge.any(-1, keepdims=True)
    m = np.where(any_edge, s.max(-1, keepdims=True), 0.0)
    e = np.where(edge, np.exp(s - m), 0.0)
    a = np.where(any_edge, e / np.where(any_edge, e.sum(-1, keepdims=True), 1.0), 0.0)
    ctx = (a @ v).transpose(0, 2, 1, 3).reshape(B, N, D)
    return nodes + ctx @ w["out_proj.weight"].T


def make_weights(rng, D, P, H):
    shapes = {"norm.weight": (D,), "norm.bias": (D,), "q_proj.weight": (D, D),
              "k_proj.weight": (D, D), "v_proj.weight": (D, D), "out_proj.weight": (D, D),
              "rel_mlp.0.weight": (P, P), "rel_mlp.0.bias": (P,),
              "rel_mlp.2.weight": (H, P), "rel_mlp.2.bias": (H,)}
    w = {k: rng.standard_normal(s).astype(np.float32) * (0.5 if len(s) == 2 else 0.2)
         for k, s in shapes.items()}
    w["norm.weight"] += 1.0
    return w


def make_inputs(rng, B, N, D, P):
    nodes = rng.standard_normal((B, N, D)).astype(np.float32)
    pair = rng.standard_normal((B, N, N, P)).astype(np.float32)
    mask = (rng.random((B, N, N)) < 0.5).astype(np.float32)
    mask[:, np.arange(N), np.arange(N)] = 1.0
    return nodes, pair, mask


def rel_l2(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def available(name):
    return any(b.name == name and b.available for b in sgk.backends())


BACKENDS = [pytest.param("cpu"),
            pytest.param("opencl", marks=pytest.mark.skipif(
                "not available('opencl')", reason="opencl backend unavailable here"))]


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_backends_lists_cpu():
    found = {b.name: b for b in sgk.backends()}
    assert found["cpu"].available and found["cpu"].device_count >= 1
    assert found["cpu"].reason == ""
    for b in found.values():
        assert b.available or b.reason, f"{b.name} unavailable without a reason"
    assert sgk.version().count(".") == 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("B,N,D,P,H", [(2, 7, 16, 4, 4), (1, 33, 64, 8, 2), (3, 1, 8, 3, 8)])
def test_forward_matches_reference(backend, rng, B, N, D, P, H):
    w = make_weights(rng, D, P, H)
    nodes, pair, mask = make_inputs(rng, B, N, D, P)
    mask[0, 0, :] = 0.0  # one fully masked row
    with sgk.Layer(backend, w) as layer:
        assert (layer.dim, layer.pair_dim, layer.heads) == (D, P, H)
        out = layer.forward(nodes, pair, mask)
        assert out.dtype == np.float32 and out.shape == (B, N, D)
        assert rel_l2(out, reference(w, nodes, pair, mask)) <= 1e-5
        np.testing.assert_array_equal(out[0, 0], nodes[0, 0])
        # uint8 and bool masks, and non-contiguous inputs, give the same result.
        np.testing.assert_array_equal(layer.forward(nodes, pair, (mask != 0).astype(np.uint8)), out)
        np.testing.assert_array_equal(layer.forward(nodes, pair, mask != 0), out)
        wide = np.zeros((B, N, 2 * D), np.float32)
        wide[..., ::2] = nodes
        np.testing.assert_array_equal(layer.forward(wide[..., ::2], pair, mask), out)


def test_weights_converted(rng):
    """float64, Fortran-ordered and list weights are copied to float32."""
    D, P, H = 8, 3, 2
    w = make_weights(rng, D, P, H)
    mixed = dict(w)
    mixed["q_proj.weight"] = np.asfortranarray(w["q_proj.weight"])
    mixed["k_proj.weight"] = w["k_proj.weight"].astype(np.float64)
    mixed["norm.bias"] = w["norm.bias"].tolist()
    nodes, pair, mask = make_inputs(rng, 2, 5, D, P)
    with sgk.Layer("cpu", w) as a, sgk.Layer("cpu", mixed) as b:
        np.testing.assert_array_equal(a.forward(nodes, pair, mask), b.forward(nodes, pair, mask))


def test_variants_and_set_variant(rng):
    w = make_weights(rng, 8, 3, 2)
    nodes, pair, mask = make_inputs(rng, 1, 4, 8, 3)
    with sgk.Layer("cpu", w) as layer:
        vs = layer.variants(1, 4)
        assert vs and all(isinstance(v.name, str) for v in vs)
        assert layer.variant_for(1, 4) in [v.name for v in vs if v.supported]
        want = layer.forward(nodes, pair, mask)
        for v in vs:
            if v.supported:
                layer.set_variant(v.name)
                assert rel_l2(layer.forward(nodes, pair, mask), want) <= 1e-5
        layer.set_variant(None)
        with pytest.raises(sgk.Error) as e:
            layer.set_variant("no-such-variant")
        assert e.value.status == "SGK_ERR_UNKNOWN_VARIANT"


def test_close_once(rng):
    layer = sgk.Layer("cpu", make_weights(rng, 8, 3, 2))
    layer.close()
    layer.close()
    assert layer.closed
    with pytest.raises(ValueError, match="closed"):
        layer.forward(*make_inputs(rng, 1, 2, 8, 3))
    del layer


B, N, D, P, H = 2, 3, 8, 4, 2
GOOD = dict(nodes=((B, N, D), np.float32), pair_feats=((B, N, N, P), np.float32),
            edge_mask=((B, N, N), np.float32))
BAD_INPUTS = [
    ("nodes", (N, D), np.float32, ValueError, "nodes must have 3 dimensions"),
    ("nodes", (B, N, D + 1), np.float32, ValueError, "nodes must be"),
    ("nodes", (B, N, D), np.float64, TypeError, "nodes has dtype float64"),
    ("pair_feats", (B, N, N), np.float32, ValueError, "pair_feats must have 4 dimensions"),
    ("pair_feats", (B, N, N, P + 1), np.float32, ValueError, "pair_feats must be"),
    ("pair_feats", (B, N, N + 1, P), np.float32, ValueError, "pair_feats must be"),
    ("pair_feats", (B, N, N, P), np.float16, TypeError, "pair_feats has dtype float16"),
    ("edge_mask", (B, N, N, 1), np.float32, ValueError, "edge_mask must have 3 dimensions"),
    ("edge_mask", (B, N + 1, N), np.float32, ValueError, "edge_mask must be"),
    ("edge_mask", (B, N, N), np.int32, TypeError, "edge_mask has dtype int32"),
]


@pytest.mark.parametrize("arg,shape,dtype,exc,text", BAD_INPUTS)
def test_bad_input_refused(rng, arg, shape, dtype, exc, text):
    with sgk.Layer("cpu", make_weights(rng, D, P, H)) as layer:
        args = {k: np.ones(s, t) for k, (s, t) in GOOD.items()}
        args[arg] = np.ones(shape, dtype)
        with pytest.raises(exc, match=text):
            layer.forward(**args)


@pytest.mark.parametrize("change,text", [
    (lambda w: w.pop("rel_mlp.0.bias"), "lacks 'rel_mlp.0.bias'"),
    (lambda w: w.update({"rel_mlp.1.weight": w["rel_mlp.0.weight"]}), "unknown keys"),
    (lambda w: w.update({"q_proj.weight": np.ones((D, D + 1), np.float32)}),
     r"weights\['q_proj.weight'\] must have shape \(D=8, D=8\) = \(8, 8\), got \(8, 9\)"),
    (lambda w: w.update({"rel_mlp.2.bias": np.ones((H + 1,), np.float32)}),
     r"weights\['rel_mlp.2.bias'\] must have shape"),
    (lambda w: w.update({"norm.weight": np.ones((D, 1), np.float32)}),
     r"weights\['norm.weight'\] must have 1 dimensions"),
])
def test_bad_weights_refused(rng, change, text):
    w = make_weights(rng, D, P, H)
    change(w)
    with pytest.raises(ValueError, match=text):
        sgk.Layer("cpu", w)


def test_heads_not_dividing_dim_is_a_c_error(rng):
    with pytest.raises(sgk.Error) as e:
        sgk.Layer("cpu", make_weights(rng, 8, 3, 3))
    assert e.value.status == "SGK_ERR_INVALID_ARGUMENT"
    assert e.value.code == 2
    assert e.value.description == "invalid argument"
    assert "heads" in e.value.message
    assert e.value.status in str(e.value)


def test_unknown_backend_is_a_c_error(rng):
    with pytest.raises(sgk.Error) as e:
        sgk.Layer("no-such-backend", make_weights(rng, D, P, H))
    assert e.value.status == "SGK_ERR_UNKNOWN_BACKEND"
    assert "no-such-backend" in e.value.message


def test_bad_eps_is_a_c_error(rng):
    with pytest.raises(sgk.Error) as e:
        sgk.Layer("cpu", make_weights(rng, D, P, H), eps=-1.0)
    assert e.value.status == "SGK_ERR_INVALID_ARGUMENT" and "eps" in e.value.message


# Where libsgk comes from: a fresh interpreter each time, since the library
# is loaded once per process. These need the libsgk meson test names in
# SGK_LIBRARY.
PACKAGE = os.path.dirname(os.path.abspath(sgk.__file__))
PROBE = """
import ctypes.util, sgk, sgk._lib
try:
    print("loaded", sgk._lib.lib()._name)
    print("version", sgk.version())
    print("opencl", [b.reason for b in sgk.backends() if b.name == "opencl"][0])
except sgk.Error as e:
    print("error", e.message)
print("system", ctypes.util.find_library("sgk"))
"""


def probe(package_parent, library=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("SGK_LIBRARY", "LD_LIBRARY_PATH", "SGK_BACKEND_PATH")}
    env["PYTHONPATH"] = package_parent
    if library is not None:
        env["SGK_LIBRARY"] = library
    # cwd: python -c puts it first on sys.path, where another sgk may sit.
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, check=True, cwd=package_parent,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def built_library():
    path = os.environ.get("SGK_LIBRARY")
    if not path or not os.path.exists(path):
        pytest.skip("SGK_LIBRARY does not name the libsgk built (meson test sets it)")
    return path


def test_sgk_library_set_is_the_only_place(tmp_path):
    missing = str(tmp_path / "nowhere" / "libsgk.so")
    got = probe(os.path.dirname(PACKAGE), missing)
    assert "loaded" not in got
    assert f"SGK_LIBRARY: {missing} (not there)" in got["error"]
    assert "find_library" not in got["error"]


def test_bundled_library_before_the_system_one(tmp_path):
    """A copy of the package with libsgk in _native/, as pip installs it:
    that libsgk loads, and it looks for its plugins in _native/sgk."""
    shutil.copytree(PACKAGE, tmp_path / "sgk", ignore=shutil.ignore_patterns("__pycache__"))
    native = tmp_path / "sgk" / "_native"
    native.mkdir()
    shutil.copy(built_library(), native / "libsgk.so")
    got = probe(str(tmp_path))
    assert got["loaded"] == str(native / "libsgk.so")
    assert got["version"] == sgk.version()
    assert str(native / "sgk") in got["opencl"] and "not found" in got["opencl"]


def test_without_a_bundled_library_the_system_one(tmp_path):
    """This clone's package has no _native/: the system's libsgk next, and
    failing that an error naming both places."""
    shutil.copytree(PACKAGE, tmp_path / "sgk", ignore=shutil.ignore_patterns("__pycache__"))
    got = probe(str(tmp_path))
    bundled = str(tmp_path / "sgk" / "_native" / "libsgk.so")
    if got["system"] != "None":
        assert got["loaded"] == got["system"]
    else:
        assert "loaded" not in got
        assert f"inside the package: {bundled} (not there)" in got["error"]
        assert "ctypes.util.find_library('sgk') (found nothing)" in got["error"]
        assert "SGK_LIBRARY" in got["error"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_weights(backend, rng):
    """New weights reach the layer: bit for bit what a layer made with them
    gives; eps may change; a refused call keeps the old weights."""
    D, P, H = 16, 4, 4
    first, second = make_weights(rng, D, P, H), make_weights(rng, D, P, H)
    nodes, pair, mask = make_inputs(rng, 2, 6, D, P)
    with sgk.Layer(backend, first) as layer:
        before = layer.forward(nodes, pair, mask)
        layer.set_weights(second)
        with sgk.Layer(backend, second) as fresh:
            np.testing.assert_array_equal(layer.forward(nodes, pair, mask),
                                          fresh.forward(nodes, pair, mask))
        layer.set_weights(first, eps=1e-3)
        assert layer.eps == 1e-3
        out = layer.forward(nodes, pair, mask)
        assert rel_l2(out, reference(first, nodes, pair, mask, eps=1e-3)) <= 1e-5
        with sgk.Layer(backend, first, eps=1e-3) as fresh:
            np.testing.assert_array_equal(out, fresh.forward(nodes, pair, mask))
        layer.set_weights(first)  # eps stays 1e-3
        np.testing.assert_array_equal(layer.forward(nodes, pair, mask), out)
        layer.set_weights(first, eps=1e-5)
        np.testing.assert_array_equal(layer.forward(nodes, pair, mask), before)

        with pytest.raises(sgk.Error) as e:
            layer.set_weights(make_weights(rng, 2 * D, P, H))
        assert e.value.status == "SGK_ERR_INVALID_ARGUMENT"
        assert f"desc->dim ({2 * D}) differs from the layer's dim ({D})" in e.value.message
        with pytest.raises(sgk.Error, match="eps"):
            layer.set_weights(second, eps=-1.0)
        bad = dict(second)
        bad["q_proj.weight"] = np.ones((D, D + 1), np.float32)
        with pytest.raises(ValueError, match=r"weights\['q_proj.weight'\] must have shape"):
            layer.set_weights(bad)
        np.testing.assert_array_equal(layer.forward(nodes, pair, mask), before)
        assert layer.eps == 1e-5


def test_backward_matches_finite_differences(rng):
    """Layer.backward (cpu) against central differences of the float64
    reference along a random direction of each input and weight."""
    B, N, D, P, H = 2, 5, 8, 3, 2
    w = make_weights(rng, D, P, H)
    nodes, pair, mask = make_inputs(rng, B, N, D, P)
    mask[0, 1, :] = 0.0  # a row with no edge
    d_out = rng.standard_normal((B, N, D)).astype(np.float32)
    with sgk.Layer("cpu", w) as layer:
        grads = layer.backward(nodes, pair, mask, d_out)
    inputs = {"nodes": nodes, "pair_feats": pair}
    h = 1e-4
    for key in ["nodes", "pair_feats"] + list(w):
        assert grads[key].shape == (inputs[key] if key in inputs else w[key]).shape, key
        base = inputs[key] if key in inputs else w[key]
        v = rng.standard_normal(base.shape)

        def loss(t):
            ww = {k: np.asarray(a, np.float64) for k, a in w.items()}
            xs = {"nodes": nodes.astype(np.float64), "pair_feats": pair.astype(np.float64)}
            (xs if key in xs else ww)[key] = base.astype(np.float64) + t * v
            return float((reference(ww, xs["nodes"], xs["pair_feats"], mask) * d_out).sum())

        want = (loss(h) - loss(-h)) / (2 * h)
        got = float((grads[key].astype(np.float64) * v).sum())
        assert abs(got - want) <= 1e-3 * max(1.0, abs(want)), (key, got, want)
    # the row with no edge passes d_out straight through to nodes
    np.testing.assert_allclose(grads["pair_feats"][0, 1], 0.0)


def test_backward_refused_where_unsupported_and_bad_d_out(rng):
    D, P, H = 8, 3, 2
    w = make_weights(rng, D, P, H)
    nodes, pair, mask = make_inputs(rng, 1, 4, D, P)
    with sgk.Layer("cpu", w) as layer:
        with pytest.raises(ValueError, match="d_out must have the shape of nodes"):
            layer.backward(nodes, pair, mask, np.zeros((1, 4, D + 1), np.float32))
        with pytest.raises(TypeError, match="d_out has dtype float64"):
            layer.backward(nodes, pair, mask, np.zeros((1, 4, D)))
    with sgk.Layer("cpu", w, dtype="bfloat16") as layer:
        with pytest.raises(TypeError, match="d_out has dtype float32"):
            layer.backward(sgk.to_bfloat16_bits(nodes), sgk.to_bfloat16_bits(pair), mask,
                           np.zeros((1, 4, D), np.float32))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_backward_near_float32(rng, dtype):
    """A 16-bit layer's gradients, in its dtype, within the 16-bit contract
    (relative L2 <= 1e-2) of a float32 layer's on the same rounded values."""
    B, N, D, H, P = 2, 6, 16, 2, 5
    w = make_weights(rng, D, P, H)
    w16 = {k: _round(v, dtype)[0] for k, v in w.items()}
    nodes, pair, mask = make_inputs(rng, B, N, D, P)
    d_out = rng.standard_normal((B, N, D)).astype(np.float32)
    (n32, n16), (p32, p16), (d32, d16) = (_round(a, dtype) for a in (nodes, pair, d_out))
    with sgk.Layer("cpu", w16) as layer:
        want = layer.backward(n32, p32, mask, d32)
    with sgk.Layer("cpu", w16, dtype=dtype) as layer:
        got = layer.backward(n16, p16, mask, d16)
    for name, g in got.items():
        assert g.dtype == (np.float16 if dtype == "float16" else np.uint16), name
        g32 = _widen(g, dtype)
        ref = want[name].astype(np.float64)
        err = np.linalg.norm(g32 - ref) / max(np.linalg.norm(ref), 1e-3 * np.sqrt(ref.size))
        assert err <= 1e-2, (name, err)


@pytest.mark.skipif(not available("opencl"), reason="no OpenCL device")
def test_backward_on_opencl_matches_cpu(rng):
    """The same generated kernels on both backends: every gradient within
    fp32 rounding of the cpu backend's."""
    B, N, D, H, P = 2, 7, 16, 2, 5
    w = make_weights(rng, D, P, H)
    nodes, pair, mask = make_inputs(rng, B, N, D, P)
    d_out = rng.standard_normal((B, N, D)).astype(np.float32)
    with sgk.Layer("cpu", w) as layer:
        want = layer.backward(nodes, pair, mask, d_out)
    with sgk.Layer("opencl", w) as layer:
        got = layer.backward(nodes, pair, mask, d_out)
    assert sorted(got) == sorted(want)
    for name, g in got.items():
        scale = max(1.0, float(np.abs(want[name]).max()))
        np.testing.assert_allclose(g, want[name], rtol=0, atol=1e-5 * scale, err_msg=name)


# ---- bf16 and f16 layers ----------------------------------------------------

def _round(a, dtype):
    """a's values as the 16-bit dtype holds them (float32), and its array."""
    if dtype == "float16":
        h = np.asarray(a, np.float32).astype(np.float16)
        return h.astype(np.float32), h
    h = sgk.to_bfloat16_bits(a)
    return sgk.from_bfloat16_bits(h), h


def _widen(out, dtype):
    return out.astype(np.float32) if dtype == "float16" else sgk.from_bfloat16_bits(out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_layer_against_reference_on_rounded_values(rng, backend, dtype):
    """SPEC section 6: rel L2 <= 1e-2 against float64 on the same rounded
    weights and inputs; out in the layer's dtype; a row with no edge gives
    its nodes back bit for bit."""
    B, N, D, H, P = 2, 9, 16, 2, 5
    w = make_weights(rng, D, P, H)
    nodes, pair, mask = make_inputs(rng, B, N, D, P)
    mask[1, 3, :] = 0.0
    wr = {k: _round(v, dtype)[0] for k, v in w.items()}
    n32, n16 = _round(nodes, dtype)
    p32, p16 = _round(pair, dtype)
    with sgk.Layer(backend, w, dtype=dtype) as layer:
        assert layer.dtype == dtype and "dtype=" + dtype in repr(layer)
        out = layer.forward(n16, p16, mask)
    assert out.dtype == (np.float16 if dtype == "float16" else np.uint16) and out.shape == (B, N, D)
    want = reference(wr, n32, p32, mask)
    assert rel_l2(_widen(out, dtype), want) <= 1e-2
    assert np.array_equal(out[1, 3], n16[1, 3])


def test_16bit_layer_refuses_other_dtypes(rng):
    w = make_weights(rng, 16, 5, 2)
    nodes, pair, mask = make_inputs(rng, 1, 4, 16, 5)
    with sgk.Layer("cpu", w, dtype="float16") as layer:
        with pytest.raises(TypeError, match="nodes has dtype float32: must be float16"):
            layer.forward(nodes, pair.astype(np.float16), mask)
        with pytest.raises(TypeError, match="d_out has dtype float32: must be float16"):
            layer.backward(nodes.astype(np.float16), pair.astype(np.float16), mask, nodes)
    with pytest.raises(ValueError, match="dtype 'int8'"):
        sgk.Layer("cpu", w, dtype="int8")


def test_bfloat16_bits_round_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.005859375, -2.5, np.inf, -np.inf, np.nan, 3.0e38], np.float32)
    h = sgk.to_bfloat16_bits(x)
    assert h.dtype == np.uint16
    # 1 + 2^-8 is a tie: to the even 1.0; 1 + 3 * 2^-9 rounds up to 1 + 2^-7
    assert list(h[:4]) == [0x3F80, 0x3F80, 0x3F81, 0xC020]
    assert list(h[4:6]) == [0x7F80, 0xFF80] and (h[6] & 0x7FC0) == 0x7FC0
    # any float: the nearer of the two bfloat16 values around it
    v = np.random.default_rng(3).standard_normal(10000).astype(np.float32) * 1e3
    got = sgk.from_bfloat16_bits(sgk.to_bfloat16_bits(v)).astype(np.float64)
    down = sgk.from_bfloat16_bits((v.view(np.uint32) >> 16).astype(np.uint16)).astype(np.float64)
    up = sgk.from_bfloat16_bits(((v.view(np.uint32) >> 16) + 1).astype(np.uint16)).astype(np.float64)
    assert np.all(np.abs(got - v) <= np.minimum(np.abs(down - v), np.abs(up - v)))
