"""The tests of tinygrad_lite: every name of API.md, checked by finite differences and against PyTorch.

    python test_all.py            run every test
    python test_all.py PATTERN    run the tests whose name contains PATTERN
    python test_all.py -v ...     also print each test's name, result and time

Plain Python, no pytest: every module-level callable named `test_*` runs in definition order (the
table-driven ones are registered in loops, one per op / layer / optimizer / dtype). One line and a
traceback per failure, then `N passed, N failed, N skipped`; the exit code is 1 if any failed.
Comparisons with PyTorch are skipped where `import torch` fails, GPU tests where
`tl.cuda_is_available()` is False.
"""
import collections
import contextlib
import copy
import gc
import hashlib
import inspect
import io
import itertools
import json
import math
import re
import os
import pickle
import tarfile
import subprocess
import sys
import tempfile
import warnings
import weakref
import time
import traceback
import types
import urllib.error
import urllib.request
import zlib
from unittest import mock

import numpy as np

import tinygrad_lite as tl
import train_cifar as tc

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = F = None
# PyTorch's note that an even window with padding='same' copies the input (so does tinygrad_lite's, quietly)
warnings.filterwarnings('ignore', "Using padding='same' with even kernel lengths")

# float32 GPU results are compared at float32 tolerance, so the convolutions and GRUs run exact float32
# here; the *_tf32 tests check tinygrad_lite's default (TF32 allowed) at TF32's tolerance
tl.allow_tf32 = False


# ===== harness =====

class Skip(Exception):
    """Raised by a test that cannot run on this machine."""


def need_torch():
    if torch is None:
        raise Skip('torch is not importable')


def torch_at_least(major, minor):
    """Whether the installed PyTorch is at least version major.minor (tests that need a later one's behavior)."""
    return tuple(int(part) for part in torch.__version__.split('.')[:2]) >= (major, minor)


def need_cuda():
    if not tl.cuda_is_available():
        raise Skip('no CuPy or no GPU')


def register(name, fn):
    """Add a generated test; it runs where it was registered in the file."""
    assert name not in globals(), f'duplicate test {name}'
    globals()[name] = fn


def rng(key):
    """A generator seeded from any key, so a test's data does not depend on which tests ran before."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


KINKS = (-0.5, 0.0, 0.3, 0.5)  # where abs/relu/clamp are not differentiable: sampled inputs stay off them


def sample(r, shape, dom='any'):
    """float64 data: 'pos' in [0.5, 2], else standard normal at least 0.05 away from every kink."""
    if dom == 'pos':
        return r.uniform(0.5, 2.0, shape)
    x = np.asarray(r.standard_normal(shape))
    while True:
        bad = np.min([np.abs(x - k) for k in KINKS], axis=0) < 0.05
        if not bad.any():
            return x
        x[bad] = r.standard_normal(int(bad.sum()))


def upstream(k, shape, dtype=np.float64):
    """The weight w of the k-th output in (out * w).sum(): multiples of 1/8, exact in every float dtype."""
    w = np.round(rng(('w', k, tuple(shape))).standard_normal(tuple(shape)) * 8) / 8
    return np.where(w == 0, 0.125, w).astype(dtype)


def to_np(x):
    if isinstance(x, tl.Tensor):
        return x.numpy()
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def same_dtype(ours, theirs):
    """A tinygrad_lite tensor's dtype is a torch tensor's (torch.float16 is NumPy's float16, torch.bool its bool)."""
    return ours.dtype.name == str(theirs.dtype).split('.')[-1]


def assert_close(a, b, rtol=1e-5, atol=1e-6, msg=''):
    """a and b (tl, torch or NumPy) have one shape and agree elementwise within atol + rtol * |b|."""
    a, b = to_np(a), to_np(b)
    assert a.shape == b.shape, f'{msg}: shape {a.shape} != {b.shape}'
    a, b = a.astype(np.float64), b.astype(np.float64)
    bad = ~np.isclose(a, b, rtol=rtol, atol=atol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.abs(a - b), -1.0)), a.shape)
        raise AssertionError(f'{msg}: {bad.sum()}/{bad.size} differ (rtol {rtol}, atol {atol}); '
                             f'worst at {i}: {a[i]!r} vs {b[i]!r}')


def raises(exc, fn, *needles):
    """fn() raises exc whose message contains every needle (case-insensitive); returns the message."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        for n in needles:
            assert n.lower() in msg.lower(), f'{type(e).__name__} message {msg!r} lacks {n!r}'
        return msg
    raise AssertionError(f'no {getattr(exc, "__name__", exc)} raised')


def assert_names_shapes(msg, *shapes):
    """The message names every shape, written as a tuple or a list, spaces ignored."""
    flat = msg.replace(' ', '')
    for s in shapes:
        forms = (str(tuple(s)), str(list(s)))
        assert any(f.replace(' ', '') in flat for f in forms), f'message {msg!r} does not name shape {s}'


class _TorchAPI:
    """tl's module-level names, looked up in torch.nn.functional, then in torch."""
    def __getattr__(self, name):
        if name in ('sigmoid', 'tanh'):  # the torch.nn.functional versions are deprecated
            return getattr(torch, name)
        return getattr(F, name, None) or getattr(torch, name)


TH = _TorchAPI()


def make(m, a, requires_grad=False, device=None):
    """The array a as a tensor of library m (tl, or TH for torch)."""
    if m is tl:
        return tl.Tensor(a, requires_grad=requires_grad, device=device)
    return torch.tensor(a, requires_grad=requires_grad)


def const(m, arr, like):
    """arr as a constant of library m on like's device; a float array takes like's dtype."""
    if m is tl:
        t = tl.Tensor(arr.copy(), device=like.device)
        return t.to(like.dtype) if arr.dtype.kind == 'f' else t
    t = torch.tensor(arr)
    return t.to(like.dtype) if t.is_floating_point() else t


def run_op(m, f, arrays, device=None):
    """out = f(m, *tensors) (a tensor or a tuple), then backward of sum_k (out_k * w_k).sum().
    Returns the outputs and the gradients of the float inputs (None where none came), as NumPy."""
    ts = [make(m, a, a.dtype.kind == 'f', device) for a in arrays]
    outs = f(m, *ts)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = None
    for k, o in enumerate(outs):
        term = (o * make(m, upstream(k, o.shape, to_np(o).dtype), device=device)).sum()
        loss = term if loss is None else loss + term
    loss.backward()
    return [to_np(o) for o in outs], [None if t.grad is None else to_np(t.grad) for t in ts]


def compare_runs(got, want, rtol, atol, what='output'):
    (outs_a, grads_a), (outs_b, grads_b) = got, want
    assert len(outs_a) == len(outs_b), f'{len(outs_a)} outputs, expected {len(outs_b)}'
    for k, (a, b) in enumerate(zip(outs_a, outs_b)):
        assert_close(a, b, rtol, atol, f'{what} {k}')
    for k, (a, b) in enumerate(zip(grads_a, grads_b)):
        assert (a is None) == (b is None), f'grad of input {k}: {a is None=}, {b is None=}'
        if a is not None:
            assert_close(a, b, rtol, atol, f'grad of input {k}')


def scalar_loss(f, ws):
    with tl.no_grad():
        outs = f()
        outs = outs if isinstance(outs, tuple) else (outs,)
        return sum(float((o.numpy().astype(np.float64) * w).sum()) for o, w in zip(outs, ws))


def gradcheck(f, leaves, eps=1e-6, rtol=1e-4, atol=1e-5):
    """Every leaf's .grad from backward of (f() * w).sum() (random w) against central differences.
    f() returns a tensor or a tuple; leaves are float64 tensors with requires_grad, their .data perturbed
    in place (works for module parameters too)."""
    outs = f()
    outs = outs if isinstance(outs, tuple) else (outs,)
    ws = [upstream(k, o.shape) for k, o in enumerate(outs)]
    loss = None
    for o, w in zip(outs, ws):
        term = (o * tl.Tensor(w)).sum()
        loss = term if loss is None else loss + term
    loss.backward()
    for n, t in enumerate(leaves):
        assert t.dtype == np.float64, f'leaf {n} is {t.dtype}'
        assert t.grad is not None, f'leaf {n} {t.shape} got no gradient'
        num = np.zeros(t.shape)
        for i in np.ndindex(*t.shape):
            old = t.data[i]
            t.data[i] = old + eps
            hi = scalar_loss(f, ws)
            t.data[i] = old - eps
            lo = scalar_loss(f, ws)
            t.data[i] = old
            num[i] = (hi - lo) / (2 * eps)
        assert_close(t.grad, num, rtol, atol, f'grad of leaf {n} {t.shape}')


# ===== the op table: one finite-difference test, one PyTorch test, one GPU test per op =====

class Op:
    """f(m, *tensors) with m = tl or TH; tf(*torch_tensors) where torch spells it differently."""
    def __init__(self, name, f, shapes, dom='any', tf=None):
        self.name, self.f, self.shapes = name, f, shapes
        self.doms = dom if isinstance(dom, tuple) else (dom,) * len(shapes)
        self.tf = f if tf is None else (lambda m, *xs: tf(*xs))

    def inputs(self, dtype=np.float64):
        r = rng(self.name)
        return [sample(r, s, d).astype(dtype) for s, d in zip(self.shapes, self.doms)]


OPS = []


def op(name, f, *shapes, dom='any', tf=None):
    OPS.append(Op(name, f, shapes, dom, tf))


def red(name, axis=None, keepdim=False, **kw):
    """A reduction in tl's spelling (axis=) and torch's (dim=, amax/amin)."""
    def tl_f(m, x):
        return getattr(x, name)(axis=axis, keepdim=keepdim, **kw)

    def torch_f(x):
        if name in ('max', 'min'):  # amax/amin spell "every axis" as ()
            return getattr(x, 'a' + name)(dim=() if axis is None else axis, keepdim=keepdim)
        return getattr(x, name)(dim=axis, keepdim=keepdim, **kw)
    return tl_f, torch_f


def ix(m, arr):
    """An index array as library m takes it."""
    return arr if m is tl else torch.from_numpy(arr)


U, R = (3, 4), (3, 4, 2)
COND = rng('cond').random((3, 1)) > 0.5
COND[0] = True  # both branches of where are taken
MASK = rng('mask').random((3, 4)) > 0.5
ROWS = np.array([True, False, True])
IDX = np.array([0, 2, 0, 0])  # repeated: the gradient must scatter-add
IDX2 = np.array([[1, 0], [2, 1]])
TARGET = np.array([3, 0, 1, 3, 2])
RUN_MEAN, RUN_VAR = rng('rm').standard_normal(3) * 0.5, rng('rv').uniform(0.5, 2.0, 3)

# elementwise
op('exp', lambda m, x: x.exp(), U)
op('log', lambda m, x: x.log(), U, dom='pos')
op('sqrt', lambda m, x: x.sqrt(), U, dom='pos')
op('abs', lambda m, x: x.abs(), U)
op('tanh', lambda m, x: x.tanh(), U)
op('sigmoid', lambda m, x: x.sigmoid(), U)
op('relu', lambda m, x: x.relu(), U)
op('gelu', lambda m, x: x.gelu(), U, tf=lambda x: F.gelu(x))
op('gelu_tanh', lambda m, x: x.gelu(approximate='tanh'), U, tf=lambda x: F.gelu(x, approximate='tanh'))
op('fn_relu', lambda m, x: m.relu(x), (2, 3, 2))
op('fn_sigmoid', lambda m, x: m.sigmoid(x), (2, 3, 2))
op('fn_tanh', lambda m, x: m.tanh(x), (2, 3, 2))
op('fn_gelu', lambda m, x: m.gelu(x), (2, 3, 2))
op('fn_gelu_tanh', lambda m, x: m.gelu(x, approximate='tanh'), (2, 3, 2))
op('fn_silu', lambda m, x: m.silu(x), U)
op('fn_leaky_relu', lambda m, x: m.leaky_relu(x), U)
op('fn_leaky_relu_slope', lambda m, x: m.leaky_relu(x, 0.2), (2, 3, 2))
op('fn_leaky_relu_slope_negative', lambda m, x: m.leaky_relu(x, negative_slope=-0.5), U)
op('fn_leaky_relu_slope_above_1', lambda m, x: m.leaky_relu(x, 1.5), U)
op('clamp', lambda m, x: x.clamp(-0.5, 0.5), (4, 5))
op('clamp_min', lambda m, x: x.clamp(min=0.0), (4, 5))
op('clamp_max', lambda m, x: x.clamp(max=0.3), (4, 5))
op('clamp_tensors', lambda m, x, low, high: x.clamp(low, high), (4, 5), (5,), (4, 1))
op('neg', lambda m, x: -x, U)
op('pow2', lambda m, x: x ** 2, U)
op('pow3', lambda m, x: x ** 3, U)
op('pow_half', lambda m, x: x ** 0.5, U, dom='pos')
op('pow_neg', lambda m, x: x ** -1.5, U, dom='pos')
op('rpow', lambda m, x: 2.0 ** x, U)
op('add_scalar', lambda m, x: x + 1.5, U)
op('radd', lambda m, x: 1.5 + x, U)
op('sub_scalar', lambda m, x: x - 2, U)
op('rsub', lambda m, x: 2 - x, U)
op('mul_scalar', lambda m, x: x * 3, U)
op('rmul', lambda m, x: 3 * x, U)
op('div_scalar', lambda m, x: x / 4, U)
op('rdiv', lambda m, x: 1 / x, U, dom='pos')
op('sin', lambda m, x: x.sin(), U)
op('cos', lambda m, x: x.cos(), U)
op('log1p', lambda m, x: (x - 1.4).log1p(), U, dom='pos')   # on (-0.9, 0.6)
op('expm1', lambda m, x: x.expm1(), U)
op('erf', lambda m, x: x.erf(), (4, 5))
op('reciprocal', lambda m, x: x.reciprocal(), U)
op('rsqrt', lambda m, x: x.rsqrt(), U, dom='pos')
op('square', lambda m, x: x.square(), U)
op('floor_ceil_trunc', lambda m, x: x * x.floor() + x.ceil() * x.trunc() + x.floor(), (4, 5))   # 0 gradient in each
op('round_sign', lambda m, x: x * x.round() + (3 * x).round() * x.sign() + x.sign(), (4, 5))
op('round_decimals', lambda m, x: x * (10 * x).round(decimals=1) + x.round(decimals=-1) * x, (4, 5))
SPECIALS = np.array([np.nan, np.inf, -np.inf, 1.0, np.nan, -2.0, np.inf, 3.0, -np.inf, 0.5, 0.25, np.nan])
op('nan_to_num', lambda m, x: m.where(const(m, np.isfinite(SPECIALS).reshape(U), x), x, const(
    m, SPECIALS.reshape(U), x)).nan_to_num(nan=1.5, posinf=2.0, neginf=-3.0) * x, U)
op('lerp', lambda m, a, b: a.lerp(b, 0.3), U, U)
op('lerp_weight_above_half', lambda m, a, b: a.lerp(b, 0.75), U, (4,))
op('lerp_tensor_weight', lambda m, a, b, w: a.lerp(b, w), (3, 4), (3, 4), (3, 4))   # |w| on both sides of 0.5
op('lerp_bcast', lambda m, a, b, w: a.lerp(b, w), (4,), (2, 3, 4), (3, 1))
op('addcmul', lambda m, a, b, c: a.addcmul(b, c, value=0.5), (3, 4), (4,), (3, 1))
op('addcdiv', lambda m, a, b, c: a.addcdiv(b, c, value=-2), (3, 4), (3, 4), (4,), dom=('any', 'any', 'pos'))
op('fn_softplus', lambda m, x: m.softplus(x), U)
op('fn_softplus_beta_threshold', lambda m, x: m.softplus(x, beta=2.0, threshold=1.0), (4, 5))   # kink at 0.5
op('fn_softplus_negative_beta', lambda m, x: m.softplus(x, -1.5), U)
op('fn_elu', lambda m, x: m.elu(x), U)
op('fn_elu_alpha', lambda m, x: m.elu(x, alpha=0.3), (2, 3, 2))
op('fn_math', lambda m, x: m.sin(x) * m.cos(x) + m.erf(x) - m.expm1(m.neg(x)) + m.log1p(m.square(x)) + m.rsqrt(
    m.exp(x)) * m.reciprocal(m.sqrt(m.abs(x))) + m.log(m.abs(x)) + m.clamp(x, -0.5, 0.5), (4, 5))
op('fn_rounding', lambda m, x: x * (m.floor(x) + m.ceil(x) - m.trunc(x) + m.round(x) + m.round(x, decimals=1)
                                    + m.sign(x)), (4, 5))
op('fn_lerp_nan_to_num_addc', lambda m, a, b: m.nan_to_num(m.lerp(a, b, 0.6)) + m.addcmul(a, a, b, value=2)
   + m.addcdiv(a, b, a), (3, 4), (4,))
# binary, with broadcasting
op('add', lambda m, a, b: a + b, (3, 4), (4,))
op('add_bcast', lambda m, a, b: a + b, (2, 1, 4), (3, 1))
op('add_0d', lambda m, a, b: a + b, (2, 3), ())
op('sub', lambda m, a, b: a - b, (2, 3), (2, 1))
op('sub_bcast', lambda m, a, b: a - b, (1, 3), (2, 1))
op('mul', lambda m, a, b: a * b, (3, 4), (3, 4))
op('mul_bcast', lambda m, a, b: a * b, (2, 1, 3), (4, 1))
op('div', lambda m, a, b: a / b, (3, 4), (4,), dom=('any', 'pos'))
op('div_bcast', lambda m, a, b: a / b, (2, 1), (1, 3), dom=('any', 'pos'))
op('pow', lambda m, a, b: a ** b, (3, 4), (3, 4), dom=('pos', 'any'))
op('pow_bcast', lambda m, a, b: a ** b, (3, 1), (4,), dom=('pos', 'any'))
op('remainder', lambda m, a, b: a % b, (3, 4), (4,), dom=('any', 'pos'))
op('rremainder', lambda m, a, b: 2.5 % b + a % 0.75, (3, 4), (4,), dom=('any', 'pos'),
   tf=lambda a, b: 2.5 - (2.5 / b).floor() * b + a % 0.75)   # PyTorch has no gradient of number % tensor
op('maximum', lambda m, a, b: a.maximum(b), (3, 4), (4,))
op('fn_maximum', lambda m, a, b: m.maximum(a, b), (2, 1, 3), (2, 3))
op('minimum', lambda m, a, b: a.minimum(b), (3, 4), (4,))
op('fn_minimum', lambda m, a, b: m.minimum(a, b), (2, 1, 3), (2, 3))
op('where', lambda m, a, b: m.where(const(m, COND, a), a, b), (3, 4), (4,))
op('matmul', lambda m, a, b: a @ b, (3, 4), (4, 5))
op('matmul_batched', lambda m, a, b: a @ b, (2, 3, 4), (4, 2))
op('matmul_bcast', lambda m, a, b: a @ b, (2, 1, 3, 4), (3, 4, 2))
op('matmul_vec_mat', lambda m, a, b: a @ b, (4,), (4, 3))
op('matmul_mat_vec', lambda m, a, b: a @ b, (3, 4), (4,))
op('matmul_method', lambda m, a, b: a.matmul(b), (2, 2, 3), (2, 3, 2))
# reductions
for _name, _axis, _keep, _kw in [
        ('sum', None, False, {}), ('sum', 1, False, {}), ('sum', (0, 2), True, {}), ('sum', -1, True, {}),
        ('mean', None, False, {}), ('mean', 0, False, {}), ('mean', (-1, -3), False, {}), ('mean', 1, True, {}),
        ('max', None, False, {}), ('max', 1, False, {}), ('max', -1, True, {}), ('max', (0, 2), False, {}),
        ('min', None, False, {}), ('min', 0, False, {}), ('min', -2, True, {}),
        ('var', None, False, {}), ('var', 1, False, {'correction': 0}), ('var', (0, 2), True, {'correction': 1}),
        ('var', -2, False, {'correction': 2})]:
    _f, _tf = red(_name, _axis, _keep, **_kw)
    _tag = 'all' if _axis is None else str(_axis).replace('-', 'm').replace(', ', '_').strip('()')
    op(f'{_name}_{_tag}{"_keep" if _keep else ""}{"_c" + str(_kw["correction"]) if _kw else ""}', _f, R, tf=_tf)
op('sum_size1_axis', red('sum', 1)[0], (3, 1, 4), tf=red('sum', 1)[1])
op('max_size1_axis_keep', red('max', 1, True)[0], (3, 1, 4), tf=red('max', 1, True)[1])


def random_pair(key):
    """Two broadcastable shapes: rank 1-4, sizes 2-3, some axes 1 on either side, the second maybe of lower rank."""
    r = rng(key)
    full = r.integers(2, 4, r.integers(2, 5))
    a, b = ([1 if r.random() < 0.3 else int(n) for n in full] for _ in range(2))
    return tuple(a), tuple(b[r.integers(0, len(b)):])


def random_reduction(key, min_count):
    """A shape with some size-1 axes, and axis (None, an int or a tuple, some negative) and keepdim for it,
    reducing at least min_count elements."""
    r = rng(key)
    while True:
        shape = tuple(1 if r.random() < 0.25 else int(n) for n in r.integers(2, 4, r.integers(2, 5)))
        axes = sorted(r.choice(len(shape), r.integers(1, len(shape) + 1), replace=False).tolist())
        axes = [a - len(shape) if r.random() < 0.5 else a for a in axes]
        axis = None if r.random() < 0.15 else axes[0] if len(axes) == 1 and r.random() < 0.5 else tuple(axes)
        count = np.prod([shape[a] for a in (range(len(shape)) if axis is None else np.atleast_1d(axis))])
        if count >= min_count:
            return shape, axis, bool(r.random() < 0.5)


for _name, _f, _dom in [('add', lambda m, a, b: a + b, 'any'), ('sub', lambda m, a, b: a - b, 'any'),
                        ('mul', lambda m, a, b: a * b, 'any'), ('div', lambda m, a, b: a / b, ('any', 'pos')),
                        ('pow', lambda m, a, b: a ** b, ('pos', 'any')),
                        ('maximum', lambda m, a, b: a.maximum(b), 'any'),
                        ('minimum', lambda m, a, b: m.minimum(a, b), 'any'),
                        ('where', lambda m, a, b: m.where(a > 0, a, b), 'any')]:
    for _k in range(3):
        op(f'rand_bcast_{_name}_{_k}', _f, *random_pair((_name, _k)), dom=_dom)
for _name, _kw in [('sum', {}), ('mean', {}), ('max', {}), ('min', {}), ('var', {'correction': 1}),
                   ('var', {'correction': 0})]:
    for _k in range(2):
        _shape, _axis, _keep = random_reduction((_name, _kw, _k), 2 if _kw.get('correction') else 1)
        _f, _tf = red(_name, _axis, _keep, **_kw)
        op(f'rand_{_name}{"_c" + str(_kw["correction"]) if _kw else ""}_{_k}', _f, _shape, tf=_tf)
op('softmax', lambda m, x: x.softmax(-1), (3, 5))
op('softmax_axis1', lambda m, x: x.softmax(1), (2, 3, 4))
op('log_softmax', lambda m, x: x.log_softmax(-1), (3, 5))
op('log_softmax_axis0', lambda m, x: x.log_softmax(0), (3, 4))
op('fn_softmax', lambda m, x: m.softmax(x, 1), (2, 3, 4))
op('fn_log_softmax', lambda m, x: m.log_softmax(x, -1), (3, 5))
# indexing and reductions as PyTorch's: gather, scatter, sort, ... (random inputs: no ties for sort and topk; src as
# large as the index: PyTorch's backward of scatter refuses a larger one, test_scatter_src_larger_than_index checks it)
GATHER = np.array([[0, 2, 2, 1], [2, 0, 2, 0]])   # repeats: the gradient scatter-adds
SCATTER = np.array([[1, 0, 2, 1], [2, 1, 0, 0]])   # no position twice down a column: scatter's result is defined
MASK4 = np.array([True, False, True, True])
op('gather_0', lambda m, x: x.gather(0, const(m, GATHER, x)), (3, 4))
op('gather_neg_wide', lambda m, x: x.gather(-1, const(m, np.array([[3, 0, 3, 3, 1], [1, 1, 0, 2, 2]]), x)), (3, 4))
op('fn_gather', lambda m, x: m.gather(x, dim=1, index=const(m, GATHER[:, :3], x)), (2, 5))
op('scatter', lambda m, x, s: x.scatter(0, const(m, SCATTER, x), s), (3, 4), (2, 4))
op('scatter_value', lambda m, x: x.scatter(1, const(m, SCATTER[:, :3], x), 1.5), (2, 4))
op('scatter_add', lambda m, x, s: x.scatter_add(0, const(m, GATHER, x), s), (3, 4), (2, 4))
op('fn_scatter_add_neg', lambda m, x, s: m.scatter_add(x, -1, const(m, GATHER.T, x), s), (4, 3), (4, 2))
op('index_select', lambda m, x: x.index_select(1, const(m, np.array([3, 0, 3]), x)), (3, 4))
op('fn_index_select_neg', lambda m, x: m.index_select(x, -3, const(m, np.array([1, 1]), x)), (2, 3, 2))
op('masked_fill', lambda m, x: x.masked_fill(const(m, MASK, x), -1.5), (3, 4))
op('masked_fill_bcast_tensor', lambda m, x, v: x.masked_fill(const(m, MASK4, x), v), (2, 4), ())
op('masked_select', lambda m, x: x.masked_select(const(m, MASK, x)), (3, 4))
op('fn_masked_select_bcast', lambda m, x: m.masked_select(x, const(m, MASK4, x)), (3, 1))
op('repeat', lambda m, x: x.repeat(2, 1, 3), (3, 2))
op('repeat_tuple', lambda m, x: x.repeat((1, 2)), (3,))
op('repeat_interleave', lambda m, x: x.repeat_interleave(2, dim=1), (2, 3))
op('repeat_interleave_flat', lambda m, x: x.repeat_interleave(3), (2, 2))
op('fn_repeat_interleave_tensor', lambda m, x: m.repeat_interleave(x, const(m, np.array([1, 0, 3]), x), 0), (3, 2))
op('chunk', lambda m, x: x.chunk(3, 1), (2, 5))
op('fn_chunk', lambda m, x: m.chunk(x, 2), (3, 2))
op('split', lambda m, x: x.split(2, -1), (2, 5))
op('split_sizes', lambda m, x: x.split([1, 0, 3], dim=1), (2, 4))
op('fn_split', lambda m, x: m.split(x, (2, 1)), (3, 2))
op('unbind', lambda m, x: x.unbind(1), (2, 3))
op('fn_unbind', lambda m, x: m.unbind(x), (2, 3))
op('narrow', lambda m, x: x.narrow(1, -3, 2), (2, 4))
op('fn_narrow', lambda m, x: m.narrow(x, 0, 1, 2), (3, 2))
op('roll', lambda m, x: x.roll(1), (3, 4))
op('roll_dims', lambda m, x: x.roll((1, -2), (0, 1)), (3, 4))
op('fn_roll', lambda m, x: m.roll(x, 5, -1), (2, 3))
op('tril', lambda m, x: x.tril(), (3, 4))
op('triu_batched', lambda m, x: x.triu(1), (2, 3, 4))
op('fn_tril_neg', lambda m, x: m.tril(x, -1), (4, 3))
op('fn_triu', lambda m, x: m.triu(x, diagonal=-1), (3, 3))
op('cumsum', lambda m, x: x.cumsum(0), (3, 4))
op('cumsum_neg', lambda m, x: x.cumsum(dim=-1), (2, 3, 4))
op('fn_cumsum', lambda m, x: m.cumsum(x, 1), (2, 3, 2))
op('prod_all', lambda m, x: x.prod(), (2, 3))
op('prod_1', lambda m, x: x.prod(1), (3, 4))
op('prod_neg_keep', lambda m, x: x.prod(dim=-1, keepdim=True), (2, 3, 2))
op('fn_prod', lambda m, x: m.prod(x, 0), (3, 2))
op('logsumexp', lambda m, x: x.logsumexp(1), (3, 4))
op('logsumexp_two_keep', lambda m, x: x.logsumexp((0, 2), keepdim=True), (2, 3, 2))
op('fn_logsumexp', lambda m, x: m.logsumexp(x, dim=-1), (2, 5))
op('norm', lambda m, x: x.norm(), (3, 4))
op('norm_2_dim', lambda m, x: x.norm(2, 1), (3, 4))
op('norm_fro_keep', lambda m, x: x.norm('fro', dim=(0, 2), keepdim=True), (2, 3, 2))
op('norm_1', lambda m, x: x.norm(1, -1), (3, 4))
op('norm_inf', lambda m, x: x.norm(float('inf'), 1), (3, 4))
op('norm_neg_inf', lambda m, x: x.norm(-float('inf'), 0), (3, 4))
op('norm_3', lambda m, x: x.norm(3, (0, 1)), (3, 4))
op('norm_half', lambda m, x: x.norm(0.5, 1), (3, 4))
op('norm_neg_1', lambda m, x: x.norm(-1, 1), (3, 4))
op('fn_norm', lambda m, x: m.norm(x, p=2, dim=0), (3, 4))
op('sort', lambda m, x: x.sort(), (3, 4))
op('sort_descending_0', lambda m, x: x.sort(0, descending=True), (3, 4))
op('fn_sort', lambda m, x: m.sort(x, dim=1, descending=True), (2, 3, 2))
op('topk', lambda m, x: x.topk(2), (3, 4))
op('topk_smallest_0', lambda m, x: x.topk(2, dim=0, largest=False), (3, 4))
op('fn_topk', lambda m, x: m.topk(x, 3, 1), (2, 4, 2))
# movement
S = (2, 3, 4)
op('reshape', lambda m, x: x.reshape(6, 4), S)
op('reshape_neg', lambda m, x: x.reshape(-1, 2), S)
op('reshape_tuple', lambda m, x: x.reshape((4, 6)), S)
op('view', lambda m, x: x.view(4, -1), S)
op('flatten', lambda m, x: x.flatten(), S)
op('flatten_1', lambda m, x: x.flatten(1), S)
op('flatten_0_1', lambda m, x: x.flatten(0, 1), S)
op('flatten_neg', lambda m, x: x.flatten(-2, -1), S)
op('transpose', lambda m, x: x.transpose(0, 2), S)
op('transpose_neg', lambda m, x: x.transpose(-1, -2), S)
op('permute', lambda m, x: x.permute(2, 0, 1), S)
op('permute_neg', lambda m, x: x.permute(-1, 0, 1), S)
op('T', lambda m, x: x.T, (3, 4))
op('unsqueeze_0', lambda m, x: x.unsqueeze(0), (3, 4))
op('unsqueeze_neg', lambda m, x: x.unsqueeze(-1), (3, 4))
op('unsqueeze_1', lambda m, x: x.unsqueeze(1), (3, 4))
op('squeeze_all', lambda m, x: x.squeeze(), (1, 3, 1, 2))
op('squeeze_2', lambda m, x: x.squeeze(2), (1, 3, 1, 2))
op('squeeze_neg', lambda m, x: x.squeeze(-4), (1, 3, 1, 2))
op('squeeze_not_size1', lambda m, x: x.squeeze(1), (1, 3, 1, 2))
op('expand', lambda m, x: x.expand(2, 3, 4), (3, 1))
op('expand_keep', lambda m, x: x.expand(4, -1, 3), (1, 2, 1))
op('flip_0', lambda m, x: x.flip(0), S)
op('flip_two_neg', lambda m, x: x.flip((-1, 0)), S)
op('flip_all_list', lambda m, x: x.flip([1, 2, 0]), S)
op('fn_flip', lambda m, x: m.flip(x, (1,)), S)
op('flip_0d', lambda m, x: x.flip(-1), ())
op('pad_last', lambda m, x: x.pad((1, 2)), S, tf=lambda x: F.pad(x, (1, 2)))
op('pad_two', lambda m, x: x.pad((1, 0, 2, 1)), S, tf=lambda x: F.pad(x, (1, 0, 2, 1)))
op('clone', lambda m, x: x.clone(), U)
op('idx_int', lambda m, x: x[1], U)
op('idx_neg_slice', lambda m, x: x[-1, 1:3], U)
op('idx_step', lambda m, x: x[:, ::2], U)
op('idx_none', lambda m, x: x[:, None, 1:], U)
op('idx_ellipsis', lambda m, x: x[..., 1], R)
op('idx_none_ellipsis', lambda m, x: x[None, ..., -1:], R)
op('idx_mask', lambda m, x: x[ix(m, MASK)], U)
op('idx_mask_rows', lambda m, x: x[ix(m, ROWS)], U)
op('idx_array', lambda m, x: x[ix(m, IDX)], U)
op('idx_array_cols', lambda m, x: x[:, ix(m, np.array([1, 1, 3]))], U)
op('idx_array_2d', lambda m, x: x[ix(m, IDX2)], R)
op('idx_array_pair', lambda m, x: x[ix(m, np.array([0, 2, 2])), ix(m, np.array([1, 3, 3]))], U)
op('idx_tensor', lambda m, x: x[const(m, IDX, x)], U)
op('idx_list', lambda m, x: x[[0, 2, 0]], U)
op('cat', lambda m, a, b: m.cat([a, b], 0), (2, 3), (4, 3))
op('cat_neg', lambda m, a, b, c: m.cat([a, b, c], -1), (2, 3), (2, 1), (2, 2))
op('stack', lambda m, a, b: m.stack([a, b], 0), (2, 3), (2, 3))
op('stack_mid', lambda m, a, b: m.stack([a, b], 1), (2, 3), (2, 3))
op('stack_neg', lambda m, a, b, c: m.stack([a, b, c], -1), (3,), (3,), (3,))
op('expand_as', lambda m, x: x.expand_as(const(m, np.zeros((2, 3, 4)), x)), (3, 1))
op('view_as', lambda m, x: x.view_as(const(m, np.zeros((4, 6)), x)), S)
op('reshape_as', lambda m, x: x.transpose(0, 1).reshape_as(const(m, np.zeros(24), x)), S)
op('swapaxes', lambda m, x: x.swapaxes(0, 2), S)
op('swapdims', lambda m, x: x.swapdims(-1, 1), S)
op('movedim', lambda m, x: x.movedim(0, -1), S)
op('movedim_pairs', lambda m, x: x.movedim((0, 1), (2, 0)), S)
op('moveaxis', lambda m, x: x.moveaxis(-1, 0), S)
op('unflatten', lambda m, x: x.unflatten(1, (3, 1)), S)
op('unflatten_neg', lambda m, x: x.unflatten(-1, (2, -1)), S)
op('bmm', lambda m, a, b: a.bmm(b), (2, 3, 4), (2, 4, 5))
op('fn_bmm', lambda m, a, b: m.bmm(a, b), (3, 1, 2), (3, 2, 4))
op('outer', lambda m, a, b: a.outer(b), (3,), (4,))
op('fn_outer', lambda m, a, b: m.outer(a, b), (2,), (5,))
op('dot', lambda m, a, b: a.dot(b), (4,), (4,))
op('fn_dot', lambda m, a, b: m.dot(a, b), (3,), (3,))
for _name, _eq, *_shapes in [
        ('matmul', 'ij,jk->ik', (3, 4), (4, 5)), ('batched', 'bij,bjk->bik', (2, 3, 4), (2, 4, 2)),
        ('attention', 'bhqd,bhkd->bhqk', (2, 2, 3, 4), (2, 2, 5, 4)), ('diagonal', 'ii->i', (3, 3)),
        ('trace', 'ii->', (3, 3)), ('trace_implicit', 'ii', (3, 3)), ('inner', 'i,i->', (4,), (4,)),
        ('transpose', 'ij->ji', (2, 3)), ('sum', 'ij->', (2, 3)), ('row_sums', 'ij->i', (3, 4)),
        ('outer', 'i,j->ij', (3,), (2,)), ('implicit', 'ij,jk', (3, 4), (4, 2)), ('implicit_order', 'ba', (2, 3)),
        ('ellipsis', '...ij,...jk->...ik', (2, 1, 3, 4), (5, 4, 2)), ('ellipsis_mid', 'i...j,j...->...', (3, 1, 2, 4), (4, 5, 2)),
        ('broadcast_letter', 'ij,ij->i', (3, 1), (3, 4)), ('repeated_free', 'iij->ji', (2, 2, 3)),
        ('three', 'bn,anm,bm->ba', (2, 3), (4, 3, 5), (2, 5)), ('chain', 'ij,jk,kl->il', (2, 3), (3, 4), (4, 2))]:
    op(f'einsum_{_name}', lambda m, *xs, _eq=_eq: m.einsum(_eq, *xs), *_shapes)
# functions
op('linear', lambda m, x, w, b: m.linear(x, w, b), (2, 4), (3, 4), (3,))
op('linear_nobias', lambda m, x, w: m.linear(x, w), (2, 5, 4), (3, 4))
op('conv3x3_pad1', lambda m, x, w, b: m.conv2d(x, w, b, 1, 1), (2, 2, 5, 5), (3, 2, 3, 3), (3,))
op('conv1x1', lambda m, x, w: m.conv2d(x, w), (2, 3, 4, 4), (2, 3, 1, 1))
op('conv2x2_stride2', lambda m, x, w, b: m.conv2d(x, w, b, 2), (1, 2, 6, 6), (4, 2, 2, 2), (4,))
op('conv3x3_stride2_pad1', lambda m, x, w, b: m.conv2d(x, w, b, 2, 1), (1, 2, 7, 7), (2, 2, 3, 3), (2,))
op('conv_pairs', lambda m, x, w, b: m.conv2d(x, w, b, (2, 1), (0, 1)), (1, 2, 5, 6), (2, 2, 3, 2), (2,))
op('conv_valid', lambda m, x, w, b: m.conv2d(x, w, b), (2, 1, 5, 5), (2, 1, 3, 3), (2,))
op('conv_pad_past_kernel', lambda m, x, w: m.conv2d(x, w, None, 1, 2), (1, 2, 4, 5), (3, 2, 2, 3))   # ph >= kh
op('conv_rect_pads', lambda m, x, w: m.conv2d(x, w, None, 1, (1, 2)), (1, 2, 5, 6), (3, 2, 2, 3))   # the CPU's flipped-kernel dx
op('conv_same_odd', lambda m, x, w, b: m.conv2d(x, w, b, 1, 'same'), (2, 2, 5, 6), (3, 2, 3, 3), (3,))
op('conv_same_even', lambda m, x, w, b: m.conv2d(x, w, b, padding='same'), (1, 2, 5, 6), (3, 2, 2, 4), (3,))
op('conv_same_mixed_unbatched', lambda m, x, w: m.conv2d(x, w, None, (1, 1), 'same'), (2, 4, 7), (2, 2, 4, 3))
op('conv_valid_string', lambda m, x, w, b: m.conv2d(x, w, b, 2, 'valid'), (1, 2, 5, 6), (3, 2, 2, 3), (3,))
op('conv_unbatched', lambda m, x, w, b: m.conv2d(x, w, b, (2, 1), 1), (2, 5, 6), (3, 2, 3, 2), (3,))   # (C, H, W)
op('max_pool2', lambda m, x: m.max_pool2d(x, 2), (2, 2, 4, 4))
op('max_pool2_floor', lambda m, x: m.max_pool2d(x, 2), (1, 2, 5, 5))
op('max_pool3_stride2', lambda m, x: m.max_pool2d(x, 3, 2), (1, 2, 7, 7))
op('max_pool2_overlap', lambda m, x: m.max_pool2d(x, 2, 1), (1, 2, 4, 4))
op('avg_pool2', lambda m, x: m.avg_pool2d(x, 2), (2, 2, 4, 4))
op('avg_pool2_floor', lambda m, x: m.avg_pool2d(x, 2), (1, 2, 5, 5))
op('avg_pool3_stride2', lambda m, x: m.avg_pool2d(x, 3, 2), (1, 2, 7, 7))
op('max_pool_rect', lambda m, x: m.max_pool2d(x, (2, 3), (1, 2)), (1, 2, 4, 7))
op('avg_pool_rect', lambda m, x: m.avg_pool2d(x, (2, 3), (1, 2)), (1, 2, 4, 7))
op('max_pool_unbatched', lambda m, x: m.max_pool2d(x, (2, 3), (1, 2)), (2, 4, 7))   # (C, H, W)
op('avg_pool_unbatched', lambda m, x: m.avg_pool2d(x, 3, 2), (2, 7, 6))
op('batch_norm_train', lambda m, x, w, b: m.batch_norm(
    x, const(m, RUN_MEAN, x), const(m, RUN_VAR, x), w, b, True, 0.1, 1e-5), (5, 3), (3,), (3,))
op('batch_norm_train_4d', lambda m, x, w, b: m.batch_norm(
    x, const(m, RUN_MEAN, x), const(m, RUN_VAR, x), w, b, True, 0.1, 1e-5), (2, 3, 2, 2), (3,), (3,))
op('batch_norm_noaffine', lambda m, x: m.batch_norm(
    x, const(m, RUN_MEAN, x), const(m, RUN_VAR, x), None, None, True), (4, 3))
op('batch_norm_eval', lambda m, x, w, b: m.batch_norm(
    x, const(m, RUN_MEAN, x), const(m, RUN_VAR, x), w, b, False), (2, 3, 2, 2), (3,), (3,))
op('layer_norm', lambda m, x, w, b: m.layer_norm(x, (4,), w, b), (3, 4), (4,), (4,))
op('layer_norm_2d', lambda m, x, w, b: m.layer_norm(x, (3, 4), w, b, 1e-3), (2, 3, 4), (3, 4), (3, 4))
op('layer_norm_noaffine', lambda m, x: m.layer_norm(x, [5]), (2, 3, 5))
op('layer_norm_weight_only', lambda m, x, w: m.layer_norm(x, (2, 3), w), (4, 2, 3), (2, 3))
op('layer_norm_bias_only', lambda m, x, b: m.layer_norm(x, (4,), bias=b, eps=0.1), (3, 4), (4,))
op('layer_norm_batch1', lambda m, x, w, b: m.layer_norm(x, (6,), w, b), (1, 6), (6,), (6,))
op('layer_norm_whole', lambda m, x, w, b: m.layer_norm(x, (3, 4), w, b), (3, 4), (3, 4), (3, 4))
for _red in ('mean', 'sum', 'none'):
    for _ls in (0.0, 0.1):
        op(f'cross_entropy_{_red}{"_smooth" if _ls else ""}', lambda m, x, _red=_red, _ls=_ls: m.cross_entropy(
            x, const(m, TARGET, x), label_smoothing=_ls, reduction=_red), (5, 4))
    op(f'mse_loss_{_red}', lambda m, a, b, _red=_red: m.mse_loss(a, b, reduction=_red), (3, 4), (3, 4))
# the other losses (the targets of nll_loss and weighted cross_entropy with an ignored row; probabilities through
# sigmoid and softmax), each reduction
CLASS_WEIGHT = np.array([0.5, 1.5, 2.0, 0.75])   # one per class of TARGET's logits (5, 4)
TARGET_IGNORED = np.array([3, -100, 1, 3, 2])
POS_WEIGHT = np.array([2.0, 0.5, 1.0, 3.0])
for _red in ('mean', 'sum', 'none'):
    op(f'nll_loss_{_red}', lambda m, x, _red=_red: m.nll_loss(
        x, const(m, TARGET_IGNORED, x), const(m, CLASS_WEIGHT, x), reduction=_red), (5, 4))
    op(f'nll_loss_3d_{_red}', lambda m, x, _red=_red: m.nll_loss(x, const(m, TARGET[:4].reshape(2, 2), x),
                                                                 reduction=_red), (2, 4, 2))
    op(f'cross_entropy_weight_{_red}_smooth', lambda m, x, _red=_red: m.cross_entropy(
        x, const(m, TARGET_IGNORED, x), weight=const(m, CLASS_WEIGHT, x), label_smoothing=0.1, reduction=_red), (5, 4))
    op(f'binary_cross_entropy_{_red}', lambda m, x, t, _red=_red: m.binary_cross_entropy(
        m.sigmoid(x), m.sigmoid(t), const(m, CLASS_WEIGHT, x), reduction=_red), (3, 4), (3, 4))
    op(f'bce_with_logits_pos_weight_{_red}', lambda m, x, t, _red=_red: m.binary_cross_entropy_with_logits(
        x, m.sigmoid(t), const(m, CLASS_WEIGHT[:, None], x), reduction=_red, pos_weight=const(m, POS_WEIGHT, x)),
       (4, 4), (4, 4))
    op(f'l1_loss_{_red}', lambda m, a, b, _red=_red: m.l1_loss(a, b, reduction=_red), (3, 4), (3, 4))
    op(f'smooth_l1_loss_{_red}', lambda m, a, b, _red=_red: m.smooth_l1_loss(a, b, reduction=_red, beta=0.5),
       (3, 4), (3, 4))
    op(f'huber_loss_{_red}', lambda m, a, b, _red=_red: m.huber_loss(a, b, reduction=_red, delta=0.5), (3, 4), (3, 4))
for _red in ('batchmean', 'sum', 'none'):
    op(f'kl_div_{_red}', lambda m, x, t, _red=_red: m.kl_div(m.log_softmax(x, -1), m.softmax(t, -1), reduction=_red),
       (3, 4), (3, 4))
    op(f'kl_div_log_target_{_red}', lambda m, x, t, _red=_red: m.kl_div(x, m.log_softmax(t, -1), reduction=_red,
                                                                         log_target=True), (3, 4), (3, 4))
op('bce_with_logits_plain', lambda m, x, t: m.binary_cross_entropy_with_logits(x, m.sigmoid(t)), (3, 4), (3, 4))
op('normalize', lambda m, x: m.normalize(x), (3, 4))
op('normalize_p1_dim0', lambda m, x: m.normalize(x, 1.0, 0), (3, 4))
op('cosine_similarity', lambda m, a, b: m.cosine_similarity(a, b), (3, 4), (3, 4))
op('cosine_similarity_broadcast', lambda m, a, b: m.cosine_similarity(a, b, dim=-1), (4, 1, 3), (5, 3))


def check_op_grad(o):
    leaves = [tl.Tensor(a, requires_grad=True) for a in o.inputs()]
    gradcheck(lambda: o.f(tl, *leaves), leaves)


def check_op_torch(o):
    need_torch()
    arrays = o.inputs(np.float32)
    compare_runs(run_op(tl, o.f, arrays), run_op(TH, o.tf, arrays), 1e-4, 1e-5)


def check_op_gpu(o):
    need_cuda()
    arrays = o.inputs(np.float32)
    compare_runs(run_op(tl, o.f, arrays, device='cuda'), run_op(tl, o.f, arrays), 1e-4, 1e-5)


for _o in OPS:
    register(f'test_grad_{_o.name}', lambda o=_o: check_op_grad(o))
    register(f'test_torch_{_o.name}', lambda o=_o: check_op_torch(o))

# float16 / float32 / float64 in, the same dtype out (values and gradients), against float64 PyTorch
DTYPE_OPS = ['exp', 'log', 'sqrt', 'sigmoid', 'tanh', 'relu', 'gelu', 'gelu_tanh', 'add_bcast', 'rsub',
             'mul_scalar', 'div', 'pow2', 'matmul_batched', 'sum_all', 'mean_0', 'max_1', 'var_all',
             'softmax', 'log_softmax', 'idx_array', 'cat', 'pad_two', 'linear', 'conv3x3_pad1', 'max_pool2',
             'avg_pool2', 'batch_norm_train_4d', 'cross_entropy_mean_smooth', 'mse_loss_mean', 'layer_norm',
             'layer_norm_2d', 'layer_norm_noaffine', 'fn_silu', 'fn_leaky_relu_slope']
DTYPE_OPS += ['sin', 'cos', 'log1p', 'expm1', 'erf', 'reciprocal', 'rsqrt', 'square', 'round_decimals', 'nan_to_num',
              'lerp', 'lerp_tensor_weight', 'addcmul', 'addcdiv', 'fn_softplus', 'fn_softplus_beta_threshold',
              'fn_elu_alpha']
DTYPE_OPS += ['nll_loss_mean', 'cross_entropy_weight_mean_smooth', 'binary_cross_entropy_mean',
              'bce_with_logits_pos_weight_mean', 'l1_loss_mean', 'smooth_l1_loss_mean', 'huber_loss_mean',
              'kl_div_batchmean', 'kl_div_log_target_sum', 'normalize', 'cosine_similarity']
DTYPE_TOL = {np.float16: (1e-2, 1e-2), np.float32: (1e-4, 1e-5), np.float64: (1e-7, 1e-8)}


def check_dtype(o, dtype, device=None):
    """Inputs of dtype in, outputs and gradients of dtype out, close to float64 on the same values."""
    if device:
        need_cuda()
    else:
        need_torch()
    arrays = o.inputs(dtype)
    outs, grads = run_op(tl, o.f, arrays, device=device)
    for k, a in enumerate(outs + grads):
        assert a.dtype == dtype, f'result {k} is {a.dtype}, not {np.dtype(dtype)}'
    wide = [a.astype(np.float64) for a in arrays]
    ref = run_op(tl, o.f, wide) if device else run_op(TH, o.tf, wide)
    compare_runs((outs, grads), ref, *DTYPE_TOL[dtype])


for _name in DTYPE_OPS:
    _o = next(o for o in OPS if o.name == _name)
    for _dt in (np.float16, np.float32, np.float64):
        register(f'test_dtype_{_name}_{np.dtype(_dt).name}', lambda o=_o, dt=_dt: check_dtype(o, dt))


# comparisons and argmax: no gradient, checked against NumPy
NOGRAD = [('gt', lambda a, b: a > b), ('ge_scalar', lambda a, b: a >= 0.1), ('lt_bcast', lambda a, b: a < b[0]),
          ('le', lambda a, b: a <= b), ('eq', lambda a, b: a == a[:, :1]), ('ne', lambda a, b: a != b),
          ('argmax_all', lambda a, b: a.argmax()), ('argmax_1', lambda a, b: a.argmax(axis=1)),
          ('argmax_neg', lambda a, b: a.argmax(axis=-1))]


def check_nograd(name, f):
    r = rng(name)
    a, b = sample(r, (3, 4)).astype(np.float32), sample(r, (3, 4)).astype(np.float32)
    out = f(tl.Tensor(a, requires_grad=True), tl.Tensor(b, requires_grad=True))
    want = np.asarray(f(a, b))
    assert not out.requires_grad, 'a comparison / argmax must not require grad'
    assert out.numpy().dtype.kind == want.dtype.kind, f'{out.numpy().dtype} vs {want.dtype}'
    assert_close(out, want, 0, 0)


for _name, _f in NOGRAD:
    register(f'test_nograd_{_name}', lambda n=_name, f=_f: check_nograd(n, f))


# ===== Tensor basics =====

def test_tensor_from_python_float_and_lists():
    assert tl.Tensor(2.5).dtype == np.float32 and tl.Tensor(2.5).shape == ()
    t = tl.Tensor([[1.5, 2.0], [3.25, -4.0]])
    assert t.dtype == np.float32 and t.shape == (2, 2) and t.ndim == 2
    assert t.tolist() == [[1.5, 2.0], [3.25, -4.0]]
    assert tl.tensor([0.5, 1.5]).dtype == np.float32


def test_tensor_python_floats_with_dtype_float64_not_rounded():
    need_torch()
    for data in ([0.1], [2.0 ** 40 + 1], 0.1):
        t, p = tl.tensor(data, dtype=tl.float64), torch.tensor(data, dtype=torch.float64)
        assert t.dtype == np.float64 and t.tolist() == p.tolist(), (data, t.tolist(), p.tolist())


def test_tensor_data_that_does_not_fit_raises_as_pytorch():
    """tensor() of Python numbers as PyTorch's: an int beyond int64 (alone, or among ints: NumPy would make it uint64,
    an object or float64) raises ValueError unless a float dtype (or a float among the data) takes it; a value an
    integer dtype cannot hold (out of range, NaN, inf; a NumPy scalar too) raises RuntimeError naming the dtype; what
    fits converts as PyTorch's (fractions truncate, NumPy arrays wrap as PyTorch's do)."""
    need_torch()
    too_big = [2 ** 63, [2 ** 63, 1], [[1, 3 * 2 ** 62]], 2 ** 64, [2 ** 64, 1], [-2 ** 63 - 1, 5], [True, 2 ** 63]]
    for data in too_big:
        raises(ValueError, lambda: torch.tensor(data))
        raises(ValueError, lambda: tl.tensor(data), 'int64', 'overflow')
        raises(ValueError, lambda: tl.tensor(data, dtype=tl.int32), 'int64')
    # NumPy's integers among them (NumPy makes a uint64 array, which wrapped into int64, or float64); PyTorch raises
    for data in ([np.uint64(2 ** 64 - 1)], [np.uint64(5), 2 ** 63], [np.int64(5), 2 ** 63], [np.uint64(2 ** 63)]):
        raises((TypeError, ValueError, RuntimeError), lambda: torch.tensor(data))
        raises(ValueError, lambda: tl.tensor(data), 'int64', 'overflow')
    assert tl.tensor([np.uint64(3), 4]).tolist() == [3, 4]   # (PyTorch refuses any uint64 scalar: fits, so taken)
    unfit = [([300], 'uint8'), (300, 'uint8'), ([1e20], 'int64'), (math.nan, 'int64'), ([2 ** 40], 'int32'),
             (np.float64(1e20), 'int64'), ([np.int64(300)], 'uint8'), (math.inf, 'int32'), ([255.9], 'uint8'),
             ([-129, 0], 'int8'), ([1.0, math.nan], 'int16')]
    for data, dtype in unfit:
        raises(RuntimeError, lambda: torch.tensor(data, dtype=getattr(torch, dtype)))
        raises(RuntimeError, lambda: tl.tensor(data, dtype=np.dtype(dtype)), dtype, 'overflow')
    fits = [(-2 ** 63, None), ([2 ** 63, 1.5], None), ([2 ** 63, 1], 'float64'), (2 ** 64, 'float32'),
            ([1.5, -2.7], 'int32'), ([True, 2], 'uint8'), ([[-128, 127]], 'int8'), ([], 'int32'),
            (np.array([300, -1]), 'uint8'), ([1e19, 2], None)]
    for data, dtype in fits:
        t, p = tl.tensor(data, dtype=dtype and np.dtype(dtype)), torch.tensor(data, dtype=dtype and getattr(torch, dtype))
        assert t.dtype == np.dtype(str(p.dtype)[6:]) and t.tolist() == p.tolist(), (data, dtype, t, p)


def test_zero_dim_tensors_hold_arrays():
    """0-d data and op results are 0-d arrays, never immutable NumPy scalars: in-place ops and optimizer
    steps update them."""
    need_torch()
    for t in (tl.tensor(np.float32(2)), tl.Parameter(np.float64(2.0)), tl.tensor(1.5).exp(), tl.tensor(3.).sum(),
              tl.tensor(2.) > 1, tl.tensor([1., 2.]).sum() * 2):
        assert isinstance(t.data, np.ndarray) and t.shape == (), (type(t.data), t.shape)
    y = tl.tensor(2.).exp()
    y += 1
    assert_close(y, torch.tensor(2.).exp() + 1, 1e-6, 0)
    assert tl.tensor(np.float32(2)).zero_().item() == 0
    for tl_opt, pt_opt, kw in ((tl.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9)), (tl.Adam, torch.optim.Adam, dict(lr=0.1))):
        p, q = tl.Parameter(tl.tensor(1.5).exp()), torch.nn.Parameter(torch.tensor(1.5).exp())
        opt, ref = tl_opt([p], **kw), pt_opt([q], **kw)
        for _ in range(3):
            opt.zero_grad(), ref.zero_grad()
            (p * p).backward(), (q * q).backward()
            opt.step(), ref.step()
        assert isinstance(p.data, np.ndarray) and isinstance(p.grad.data, np.ndarray)
        assert_close(p, q, 1e-6, 0, tl_opt.__name__)
    x = tl.tensor(1.5, requires_grad=True)
    (x * x).backward()
    (x * x).backward()   # accumulated 0-d gradients stay arrays
    assert isinstance(x.grad.data, np.ndarray) and x.grad.item() == 6.0


def test_python_number_promotion_like_torch():
    """A Python number takes the tensor's dtype unless it is of a higher kind (bool < int < float: then int64
    or float32); integers out of range wrap; float16 computes with the number in float32."""
    need_torch()
    cases = [(np.array([True, False]), lambda x: x + 1), (np.array([True, False]), lambda x: x * 2),
             (np.array([True, False]), lambda x: 3 + x), (np.array([True, False]), lambda x: x + True),
             (np.array([True, False]), lambda x: x * 2.5), (np.array([1, 2], np.int32), lambda x: x + 1),
             (np.array([1, 2], np.int32), lambda x: x * 1.5), (np.array([1, 2]), lambda x: x / 2),
             (np.array([1, 200], np.uint8), lambda x: x + 300), (np.array([1, 200], np.uint8), lambda x: x + (-1)),
             (np.array([1, 200], np.uint8), lambda x: x * 3), (np.array([1, 200], np.uint8), lambda x: x / 300),
             (np.array([1, 200], np.uint8), lambda x: x == 257), (np.array([0.1, 3.]), lambda x: x * 1.5),
             (np.array([1000., 3.], np.float16), lambda x: x * 1e-8), (np.array([1000., 3.], np.float16), lambda x: x / 3),
             (np.array([1000., 3.], np.float16), lambda x: 1e-3 - x)]
    for k, (a, f) in enumerate(cases):
        got, want = f(tl.tensor(a)), f(torch.tensor(a))
        assert same_dtype(got, want), (k, got.dtype, want.dtype)
        assert_close(got, want, 0, 0, f'case {k}')


def test_result_dtypes_like_torch():
    need_torch()
    i, f, mask = np.array([1, 2]), np.array([0.5, 1.5], np.float32), np.array([True, False])
    cases = [lambda m: m.cat([m.tensor(i), m.tensor(f)]), lambda m: m.where(m.tensor(mask), m.tensor(i), m.tensor(f)),
             lambda m: m.where(m.tensor(mask), 1.5, m.tensor(i)), lambda m: m.tensor(i).exp(), lambda m: m.tensor(i).log(),
             lambda m: m.tensor(i).sqrt(), lambda m: m.tensor(i).tanh(), lambda m: m.tensor(i).sigmoid(),
             lambda m: m.tensor(mask).exp(), lambda m: m.tensor(i).abs(), lambda m: m.full((2,), 3),
             lambda m: m.full((2,), 3.5), lambda m: m.full((2,), True), lambda m: m.full((2,), 3, dtype=m.float64),
             lambda m: m.tensor(np.array([200, 100], np.uint8)).sum(), lambda m: m.tensor(mask).sum(),
             lambda m: m.tensor(np.array([[200, 100]], np.uint8)).sum(1), lambda m: m.tensor(np.array([3, 4], np.int32)).sum()]
    for k, c in enumerate(cases):
        got, want = c(tl), c(torch)
        assert same_dtype(got, want), (k, got.dtype, want.dtype)
        assert_close(got, want, 1e-6, 0, f'case {k}')
    x = tl.ones(2, requires_grad=True)
    assert not x.to(tl.int64).requires_grad and not x.to(tl.bool_).requires_grad and x.to(tl.float64).requires_grad


def test_iteration_as_pytorch():
    """Iterating a tensor gives its rows (views, with gradients flowing back); a 0-d tensor raises TypeError."""
    need_torch()
    a, w = sample(rng('iterate'), (3, 2)), upstream(0, (3, 2))
    outs = []
    for m in (tl, torch):
        x = m.tensor(a, requires_grad=True)
        rows = list(x)
        assert len(rows) == 3 and all(tuple(r.shape) == (2,) for r in rows), m.__name__
        sum(row * m.tensor(w[i]) for i, row in enumerate(rows)).sum().backward()
        outs.append(([r.detach().numpy() for r in rows], x.grad.numpy()))
        for f in (list, sum, lambda t: [v for v in t]):
            raises(TypeError, lambda: f(m.tensor(2.5)), 'iteration over a 0-d tensor')
    assert all(np.array_equal(u, v) for u, v in zip(outs[0][0], outs[1][0])) and np.array_equal(outs[0][1], outs[1][1])
    b = tl.tensor(a.copy())
    for row in b:
        row *= 2
    assert np.array_equal(b.numpy(), 2 * a), 'rows are views'


def test_tensor_numpy_keeps_dtype():
    r = rng('keep')
    for dt in (np.float16, np.float32, np.float64, np.int64):
        a = (r.standard_normal((2, 3)) * 10).astype(dt)
        t = tl.Tensor(a)
        assert t.dtype == dt and isinstance(t.data, np.ndarray), (dt, t.dtype)
        assert_close(t.numpy(), a, 0, 0)
    assert tl.Tensor(np.ones(3), dtype=np.float16).dtype == np.float16


def test_tensor_attributes():
    a = sample(rng('attr'), (2, 3, 4)).astype(np.float32)
    t = tl.Tensor(a, requires_grad=True)
    assert t.shape == (2, 3, 4) and isinstance(t.shape, tuple) and t.ndim == 3 and t.numel() == 24
    assert t.device == 'cpu' and t.requires_grad and t.is_leaf and t.grad is None
    assert isinstance(t.numpy(), np.ndarray) and t.tolist() == a.tolist()
    assert tl.Tensor(np.array([[3.5]])).item() == 3.5
    assert tl.Tensor(t).shape == t.shape and np.array_equal(tl.Tensor(t).numpy(), a)


def test_creation_functions():
    for fn, want in [(tl.zeros, 0.0), (tl.ones, 1.0)]:
        t = fn(2, 3)
        assert t.shape == (2, 3) and t.dtype == np.float32 and np.all(t.numpy() == want)
        assert fn((4,)).shape == (4,)
    f = tl.full((2, 2), 3.5)
    assert f.shape == (2, 2) and np.all(f.numpy() == 3.5)
    x = tl.randn(3, 2, dtype=np.float64, requires_grad=True)
    assert x.dtype == np.float64 and x.requires_grad and x.is_leaf
    assert tl.zeros_like(x).shape == (3, 2) and np.all(tl.ones_like(x).numpy() == 1)
    assert tl.zeros_like(x).dtype == np.float64
    assert tl.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert_close(tl.arange(1, 7, 2), np.array([1, 3, 5]), 0, 0)
    assert_close(tl.arange(0.0, 1.0, 0.25), np.array([0, 0.25, 0.5, 0.75]), 0, 0)


def test_random_generators():
    tl.manual_seed(3)
    a = tl.randn(20000)
    tl.manual_seed(3)
    assert np.array_equal(a.numpy(), tl.randn(20000).numpy()), 'manual_seed does not reproduce randn'
    assert abs(a.numpy().mean()) < 0.03 and abs(a.numpy().std() - 1) < 0.03
    u = tl.rand(20000).numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01 and u.dtype == np.float32


def test_rand_below_one_in_every_dtype_as_pytorch():
    """rand draws [0, 1) in float16 and float32 too, as PyTorch's (float64 draws rounded to float16 gave 1.0 about once
    in 4096), on each device: multiples of 2^-11 and 2^-24 with the largest below 1 drawn."""
    tl.manual_seed(5)
    for device in ('cpu',) + (('cuda',) if tl.cuda_is_available() else ()):
        for dtype, bits in ((tl.float16, 11), (tl.float32, 24)):
            u = tl.rand(2 ** 18 if dtype == tl.float16 else 2 ** 20, dtype=dtype, device=device).numpy()
            steps = u.astype(np.float64) * 2 ** bits
            assert u.dtype == dtype and u.min() >= 0 and u.max() < 1 and np.array_equal(steps, np.floor(steps))
            assert dtype == tl.float32 or u.max() == 1 - 2 ** -11, (device, u.max())
            assert abs(u.mean() - 0.5) < 0.01


def test_conversions_dtype_and_clone():
    a = sample(rng('conv'), (2, 3)).astype(np.float32)
    t = tl.Tensor(a)
    for fn, dt in [(t.double, np.float64), (t.half, np.float16), (lambda: t.to(np.float64).float(), np.float32),
                   (lambda: t.to(np.float16), np.float16), (lambda: t.to('cpu'), np.float32), (t.cpu, np.float32)]:
        out = fn()
        assert out.dtype == dt and out.device == 'cpu'
        assert_close(out, a, 1e-3, 1e-3)
    c = t.clone()
    c.data[0, 0] += 1
    assert t.data[0, 0] == a[0, 0], 'clone shares memory'


def test_comparisons_give_bool():
    x = tl.Tensor(sample(rng('cmp'), (3,)).astype(np.float32))
    assert (x > 0).dtype == np.bool_ and (x == x).numpy().all() and not (x != x).numpy().any()


def test_comparisons_promote_as_pytorch():
    """Comparisons of tensors of two dtypes compare in PyTorch's common dtype (a 0-d tensor does not widen one with
    dimensions within its kind), not NumPy's: int64 16777217 == float32 16777216 (both float32), int32 2049 ==
    float16 2048, float16 0.1 == 0-d float32 0.1 (in float16), int8 44 == 0-d int64 300 (in int8)."""
    need_torch()
    r = rng('compare promotion')
    big = r.integers(2 ** 24, 2 ** 25, 8)
    near = r.integers(2000, 4000, 8).astype(np.int32)
    tenths = r.uniform(0.1, 1, 8)
    small = np.append(r.integers(1, 100, 7), 44).astype(np.int8)
    bytes_ = r.integers(0, 255, 8).astype(np.uint8)   # as int8, those above 127 wrap
    cases = [(big, big.astype(np.float32)), (near, near.astype(np.float16)), (near.astype(np.float16), near),
             (tenths.astype(np.float16), np.array(tenths[3], np.float32)),
             (tenths.astype(np.float32), np.array(tenths[5])), (small, np.array(300)),
             (np.array(tenths[2], np.float16), tenths.astype(np.float16).astype(np.float32)),
             (bytes_, bytes_.astype(np.int8))]
    for a, b in cases:
        for op in ('__eq__', '__ne__', '__lt__', '__le__', '__gt__', '__ge__'):
            got = getattr(tl.tensor(a), op)(tl.tensor(b))
            want = getattr(torch.from_numpy(np.asarray(a)), op)(torch.from_numpy(np.asarray(b)))
            assert got.dtype == np.bool_ and np.array_equal(got.numpy(), want.numpy()), (a.dtype, b.dtype, op)
        assert (tl.tensor(a) == tl.tensor(b)).numpy().any(), (a.dtype, b.dtype)   # some equal in the common dtype


def test_comparisons_with_other_objects_as_pytorch():
    """As PyTorch: == and != with an object that is neither a tensor nor a number (None, a str, a list, a tuple, a
    dict, a dtype) are False and True, either side, and < and >= raise TypeError; numbers (Python's and NumPy's) and
    tensors compare elementwise, as do NumPy arrays (tinygrad_lite's data: PyTorch gives == elementwise, != True)."""
    need_torch()
    for other in ('a', '1', None, [1.0, 2.0], [1.0, 5.0], (1.0, 2.0), {1: 2}, [], object(), np.float64):
        for m in (tl, torch):
            t = m.tensor([1.0, 2.0])
            assert (t == other) is False and (other == t) is False and (t != other) is True and (other != t) is True
            for f in (lambda: t < other, lambda: other < t, lambda: t >= other, lambda: other > t):
                raises(TypeError, f, 'not supported')
    for other in (2.0, 2, True, np.float32(2.0), np.int64(1)):
        for op in ('__eq__', '__ne__', '__lt__', '__ge__'):
            ours, theirs = getattr(tl.tensor([1.0, 2.0]), op)(other), getattr(torch.tensor([1.0, 2.0]), op)(other)
            assert same_dtype(ours, theirs) and ours.tolist() == theirs.tolist(), (other, op)
    assert (tl.tensor([1.0, 2.0]) == np.array([1.0, 5.0])).tolist() == [True, False]
    assert (np.array([1.0, 5.0]) > tl.tensor([1.0, 2.0])).tolist() == [False, True]
    assert tl.tensor([1.0]) in [None, 'a', tl.tensor([1.0])]


def test_remainder_and_floor_division_as_pytorch():
    """% (PyTorch's remainder: the divisor's sign) and // (floor division) on tensors and numbers, both orders,
    integers and floats, broadcasting, against PyTorch's values and dtypes (%'s gradients: the op table); //'s
    backward refused and an integer divisor of 0 refused, as PyTorch does; a float one gives inf and NaN."""
    need_torch()
    r = rng('remainder')
    a, b = sample(r, (3, 4)) * 5, sample(r, (4,)) * 2
    ints, int_divisors = r.integers(-20, 20, (3, 4)), np.array([3, -4, 5, -7])
    for x0, y0 in ((a, b), (ints, int_divisors), (a, int_divisors), (ints, b), (a.astype(np.float16), b)):
        for op in (lambda x, y: x % y, lambda x, y: x // y, lambda x, y: x % 1.75, lambda x, y: -3.5 // y,
                   lambda x, y: 7 % y, lambda x, y: x // 3):
            ours, theirs = op(tl.tensor(x0), tl.tensor(y0)), op(torch.tensor(x0), torch.tensor(y0))
            assert str(ours.dtype) == str(theirs.dtype).replace('torch.', ''), (ours.dtype, theirs.dtype)
            assert_close(ours.numpy(), theirs.numpy(), 1e-6, 1e-3 if x0.dtype == np.float16 else 1e-9)
    # PyTorch rounds a number or a 0-d float32 divisor to float16 first for %, not for // (2048 // 2049 is 0, not 1)
    half = np.concatenate([(np.abs(r.standard_normal(2000)) * 30 + 0.1), [2048.0]]).astype(np.float16)
    point = lambda x, v: (torch if isinstance(x, torch.Tensor) else tl).tensor(np.float32(v))   # 0-d float32
    for op in (lambda x: x % 0.3, lambda x: 0.3 % x, lambda x: x // 0.1, lambda x: x // 2049,
               lambda x: x % point(x, 0.3), lambda x: x // point(x, 0.1)):
        assert np.array_equal(op(tl.tensor(half)).numpy(), op(torch.tensor(half)).numpy())
    raises(TypeError, lambda: tl.tensor([True, False]) % tl.tensor([True, True]), 'bool')
    floored = tl.tensor(a, requires_grad=True) // 2
    raises(RuntimeError, lambda: floored.sum().backward(), 'floor_divide')
    raises(RuntimeError, lambda: tl.tensor(ints) % tl.tensor([1, 0, 2, 3]), 'by zero')
    raises(RuntimeError, lambda: tl.tensor(ints) // 0, 'by zero')
    for m in (tl, torch):   # an empty result divides by nothing
        empty = m.zeros(0, 4, dtype=m.int64) % m.tensor([0, 1, 1, 2]), m.zeros(0, 4, dtype=m.int64) // 0
        assert [tuple(e.shape) for e in empty] == [(0, 4), (0, 4)]
    assert (tl.tensor([5.0, -5.0]) // 0).tolist() == (torch.tensor([5.0, -5.0]) // 0).tolist()
    assert np.isnan((tl.tensor([5.0]) % 0).item()) and np.isnan((torch.tensor([5.0]) % 0).item())

def test_inplace_remainder_floor_division_and_power_as_pytorch():
    """%=, //= and **= as PyTorch's: the same tensor updated, its version counter advanced, PyTorch's values in the
    tensor's own dtype, for tensors of each dtype with tensors of each dtype (broadcast, 0-d) and numbers; where
    PyTorch refuses (a result type of a higher kind: an integer tensor **= 2.5, a bool one %= 2; two bool operands;
    integers % or // 0; integers to a negative integer power) ours raises and changes nothing."""
    need_torch()
    r = rng('inplace mod floordiv pow')
    targets = [r.integers(-9, 9, (2, 3)), r.integers(1, 9, (2, 3)).astype(np.uint8), r.random((2, 3)) > 0.5,
               sample(r, (2, 3)) * 4, (sample(r, (2, 3)) * 4).astype(np.float16), sample(r, (2, 3)).astype(np.float32)]
    operands = [3, -2, True, False, 2.5, 0.3, 0, np.array([2, -3, 4]), np.array([1.5, -0.7, 2.2], np.float32),
                np.array([True, True, False]), np.array(1.7), np.array([[1], [2]], np.int32), np.array([0, 1, 2])]
    refused = 0
    for a in targets:
        for b in operands:
            for op in ('__imod__', '__ifloordiv__', '__ipow__'):
                t, p = tl.tensor(a.copy()), torch.tensor(a.copy())
                arg = lambda m: m.tensor(b) if isinstance(b, np.ndarray) else b
                version = t._version[0]
                try:
                    want = getattr(p, op)(arg(torch))
                except (RuntimeError, NotImplementedError) as e:
                    raises((TypeError, RuntimeError), lambda: getattr(t, op)(arg(tl)))
                    assert np.array_equal(t.numpy(), a) and t.dtype == a.dtype and t._version[0] == version, (e, op)
                    refused += 1
                    continue
                with np.errstate(invalid='ignore'):   # (negative numbers to fractional powers: NaN, as PyTorch's)
                    got = getattr(t, op)(arg(tl))
                assert got is t and want is p and same_dtype(t, p) and t._version[0] == version + 1, (a.dtype, b, op)
                assert np.allclose(t.numpy(), p.numpy(), 1e-6, 0, equal_nan=True), (a.dtype, b, op, t, p)
    assert refused > 50, refused
    raises(TypeError, lambda: tl.tensor([1, 2]).__ipow__(2.5), "can't be cast", 'int64')
    raises(RuntimeError, lambda: torch.tensor([1, 2]).__ipow__(2.5), "can't be cast")
    raises(RuntimeError, lambda: tl.tensor([1, 2]).__ipow__(-1), 'negative')
    raises(RuntimeError, lambda: tl.tensor([1, 2]).__imod__(tl.tensor([1, 0])), 'by zero')
    raises(TypeError, lambda: tl.tensor([True]).__ifloordiv__(True), 'bool')
    b = tl.tensor([True, False])
    b **= True
    assert b.dtype == np.bool_ and b.tolist() == [True, False]


def test_inplace_remainder_floor_division_and_power_recorded_as_pytorch():
    """%=, //= and **= recorded as +=, -=, *=, /= are: on a non-leaf with numbers and tensors requiring grad (float64
    gradients against PyTorch's), into a tensor that required none; //='s backward raises (PyTorch has no derivative
    for it); a leaf that requires grad is refused in grad mode and updated in place under no_grad (a leaf still); a
    tensor that a backward saved, changed by one, makes that backward raise as in PyTorch."""
    need_torch()
    x0, y0, b0 = _inplace_inputs('inplace mod pow recorded')

    def chain(m, x, y, b):
        h = x * 3
        h %= y + 0.5
        h **= 1.5   # (its output kept for no backward: the next update may take it)
        h %= 0.4
        h **= b
        acc = m.zeros((2, 3), dtype=m.float64)
        acc += y
        acc **= x
        return [(h * acc).sum()]

    def floored(m, x, y, b):
        h = x * 3
        h //= y
        return [h.sum()]
    for name, build in (('chain', chain), ('floor division', floored)):
        got, want = (outcome(m, lambda m: _backward_of(build, m, x0, y0, b0)) for m in (tl, torch))
        assert_same_outcome(name, got, want, 1e-12, ('floor_divide',))
    for op in ('__imod__', '__ifloordiv__', '__ipow__'):
        for m in (tl, torch):
            x = m.tensor(x0, requires_grad=True)
            raises(RuntimeError, lambda: getattr(x, op)(2.0), 'leaf', 'in-place')
            assert np.array_equal(x.detach().numpy(), x0)
            with m.no_grad():
                getattr(x, op)(1.5)
            assert x.is_leaf and x.requires_grad and x.grad is None
        p = tl.Parameter(x0.copy())
        with tl.no_grad():
            getattr(p, op)(tl.tensor(b0))
        assert_close(p, getattr(torch.tensor(x0), op)(torch.tensor(b0)), 1e-12, 1e-12, op)

    def bump(op):
        return lambda m, w, x, y: getattr(x, op)(0.7)

    def under_no_grad(op):
        def change(m, w, x, y):
            with m.no_grad():
                getattr(w, op)(2)
        return change
    for op in ('__imod__', '__ifloordiv__', '__ipow__'):
        for name, build, change in (('x saved by a product', lambda m, w, x: w * x, bump(op)),
                                    ('w saved by its square', lambda m, w, x: w * w, under_no_grad(op)),
                                    ('a sum saves nothing', lambda m, w, x: w + x, bump(op))):
            assert_same_outcome(f'{op}: {name}', check_version_case(build, change, tl),
                                check_version_case(build, change, torch), 1e-12,
                                ('modified by an in-place operation', 'expected version'))


def test_bitwise_abs_and_pos_operators_as_pytorch():
    """&, |, ^ (with reflected forms and Python numbers) and ~ on bool and integer tensors, in PyTorch's result dtype,
    no gradient; a float operand raises TypeError. abs(x) is x.abs() and +x is x (gradients as PyTorch's, abs's 0 at
    NaN and at 0); +x of a bool tensor raises."""
    need_torch()
    r = rng('bitwise')
    arrays = [r.integers(-100, 100, 6), r.integers(0, 255, 6).astype(np.uint8), r.integers(-9, 9, 6).astype(np.int32),
              r.random(6) > 0.5, np.array(r.random() > 0.5), np.array(r.integers(1, 60), np.int16)]
    for a in arrays:
        for b in arrays + [3, True, -7]:
            for op in ('__and__', '__or__', '__xor__', '__rand__', '__ror__', '__rxor__'):
                ours = getattr(tl.tensor(a), op)(tl.tensor(b) if isinstance(b, np.ndarray) else b)
                theirs = getattr(torch.tensor(a), op)(torch.tensor(b) if isinstance(b, np.ndarray) else b)
                assert same_dtype(ours, theirs) and np.array_equal(ours.numpy(), theirs.numpy()), (a.dtype, b, op)
                assert not ours.requires_grad
        assert same_dtype(~tl.tensor(a), ~torch.tensor(a)) and np.array_equal((~tl.tensor(a)).numpy(), ~torch.tensor(a))
    x, i = sample(r, (6,)), r.integers(1, 9, 6)
    for f in (lambda m, t: t & t, lambda m, t: m.tensor(i) | t, lambda m, t: t ^ True, lambda m, t: ~t,
              lambda m, t: 2 | t):
        raises((TypeError, NotImplementedError), lambda: f(torch, torch.tensor(x)))
        raises(TypeError, lambda: f(tl, tl.tensor(x)), 'integer and bool')
    raises(TypeError, lambda: tl.tensor(i) & 2.5, 'integer and bool')
    grads = []
    x[1:4] = math.nan, 0.0, -0.0   # abs's gradient 0 at NaN and at 0, as PyTorch's
    for m in (tl, torch):
        t = m.tensor(x, requires_grad=True)
        (abs(t) * m.tensor(upstream(0, (6,))) + (+t) * 3).sum().backward()
        grads.append(t.grad.numpy())
        assert np.array_equal(abs(m.tensor(i)).numpy(), np.abs(i)) and (+m.tensor(i)).tolist() == i.tolist()
    assert_close(grads[0], grads[1], 1e-12, 0)
    raises(RuntimeError, lambda: +torch.tensor([True]))
    raises(TypeError, lambda: +tl.tensor([True]), 'bool')


def test_bool_subtraction_and_negation_refused_as_pytorch():
    """As PyTorch: - with a bool tensor or a Python bool on either side (out of place or -=), and -x of a bool tensor,
    raise (TypeError here, RuntimeError in PyTorch) with PyTorch's message pointing to ~ or ^, changing nothing; +, *
    and / of bools, and - of a NumPy bool with a float tensor, give PyTorch's values and dtypes."""
    need_torch()
    r = rng('bool subtraction')
    arrays = {'bool': r.random(4) > 0.5, 'int': r.integers(-5, 5, 4), 'float': sample(r, (4,)).astype(np.float32),
              'bool 0-d': np.array(True)}
    arg = lambda m, b: m.tensor(b) if isinstance(b, np.ndarray) else b
    for a in arrays.values():
        for b in list(arrays.values()) + [True, False, 2, 1.5]:
            b_bool = isinstance(b, bool) or isinstance(b, np.ndarray) and b.dtype == np.bool_
            if a.dtype != np.bool_ and not b_bool:
                continue
            two = a.dtype == np.bool_ and b_bool
            needle = 'two bool tensors' if two else 'with a bool tensor'
            for f in (lambda m, t: t - arg(m, b), lambda m, t: arg(m, b) - t, lambda m, t: t.__isub__(arg(m, b))):
                raises(RuntimeError, lambda: f(torch, torch.tensor(a)), needle)
                t = tl.tensor(a.copy())
                raises(TypeError, lambda: f(tl, t), needle, '`~`' if not two else '`^`')
                assert np.array_equal(t.numpy(), a) and t._version[0] == 0
        for f in (lambda t: -t, lambda t: t.neg()):
            if a.dtype == np.bool_:
                raises(RuntimeError, lambda: f(torch.tensor(a)), 'Negation')
                raises(TypeError, lambda: f(tl.tensor(a)), 'Negation', 'bool tensor', '`~`')
    for f in (lambda m, t: t + t, lambda m, t: t + True, lambda m, t: t * t, lambda m, t: t * True, lambda m, t: t * 2,
              lambda m, t: t / 2, lambda m, t: m.tensor([1.5, 2.5, 3.5, 4.5]) - np.bool_(True)):
        ours, theirs = f(tl, tl.tensor(arrays['bool'])), f(torch, torch.tensor(arrays['bool']))
        assert same_dtype(ours, theirs) and ours.tolist() == theirs.tolist(), (ours, theirs)


def test_inplace_ops_under_no_grad():
    r = rng('inplace')
    a, b = sample(r, (2, 3)), sample(r, (3,))
    p = tl.Parameter(a.copy())
    with tl.no_grad():
        p += tl.Tensor(b)
        p -= 0.5
        p *= tl.Tensor(b)
        p /= 2.0
    assert_close(p, (a + b - 0.5) * b / 2.0, 1e-12, 1e-12)
    assert p.requires_grad and p.is_leaf and p.grad is None


def test_inplace_op_refusals_name_the_problem():
    """In-place arithmetic that PyTorch refuses raises here too, leaving the tensor as it was: an operand that does not
    broadcast names both shapes; an expanded tensor (elements sharing memory) asks for a clone; on every device."""
    devices = ['cpu'] + (['cuda'] if tl.cuda_is_available() else [])
    for device in devices:
        a = sample(rng('inplace refusals'), (2, 3))
        t = tl.Tensor(a.copy(), device=device)
        raises(ValueError, lambda: t.__iadd__(tl.ones(4, device=device)), '(2, 3)', '(4,)')
        raises(ValueError, lambda: t.__imul__(tl.ones(2, device=device)), '(2, 3)', '(2,)')
        base = tl.Tensor(a[0].copy(), device=device)
        wide = base.expand(2, 3)
        raises(RuntimeError, lambda: wide.__iadd__(1.0), 'single memory location', 'clone()')
        assert np.array_equal(t.numpy(), a) and np.array_equal(base.numpy(), a[0]), device
        if torch is not None:
            raises(RuntimeError, lambda: torch.tensor(a[0]).expand(2, 3).add_(1.0), 'single memory location')
        wide_copy = wide.clone()
        wide_copy += 1.0
        assert np.array_equal(wide_copy.numpy(), np.broadcast_to(a[0], (2, 3)) + 1), device


def test_abs_of_bool_and_complex_numbers_refused():
    """As PyTorch: abs() of a bool tensor raises TypeError; a complex number is refused (TypeError), not made 0."""
    raises(TypeError, lambda: tl.tensor([True, False]).abs(), 'bool')
    raises(TypeError, lambda: abs(tl.tensor([True])), 'bool')
    raises(TypeError, lambda: tl.full((2,), 1j), 'complex')
    raises(TypeError, lambda: tl.ones(2) * 1j, 'complex')
    assert abs(tl.tensor([-3, 2])).tolist() == [3, 2]


def test_inplace_ops_on_empty_tensors():
    """An empty tensor (NumPy gives it zero strides) is no expanded one: zero_(), item assignment and in-place
    arithmetic run on it, as PyTorch's."""
    for t in (tl.zeros(0, 4), tl.zeros(3, 0), tl.zeros(0)):
        t.zero_()
        t[:] = 1.5
        t += 2
        t *= tl.ones(*t.shape)
        assert t.numel() == 0 and t._version[0] == 4, t.shape

def test_expanded_views_write_through_as_pytorch():
    """expand() gives a writable view, as PyTorch's: where no two elements share memory (the same shape, or size-1
    axes added in front) in-place ops, item assignment and zero_() write through to the base, whose version counter
    they advance (a backward that saved the base raises); a slice of a real broadcast writes through too, as do a
    row of one and zero_(). Where the written elements share memory, item assignment is refused as in-place
    arithmetic is, changing nothing."""
    need_torch()
    r = rng('expand views')
    b0, v0 = sample(r, (2, 3)), sample(r, (3,))
    writes = [lambda m, x: x.__iadd__(m.tensor(v0[:x.shape[-1]])), lambda m, x: x.__imul__(2.5),
              lambda m, x: x.__setitem__(0, 1.25), lambda m, x: x.zero_(),
              lambda m, x: x.__setitem__((Ellipsis, slice(1, None)), m.tensor(v0[:x.shape[-1] - 1]))]
    expands = [lambda b: b.expand(2, 3), lambda b: b.expand(-1, -1), lambda b: b.expand(1, 2, 3),
               lambda b: b[0].expand(1, 1, -1), lambda b: b[:, 1:].expand(1, 2, 2)]
    for i, expand in enumerate(expands):
        for k, write in enumerate(writes):
            results = []
            for m in (tl, torch):
                b = m.tensor(b0.copy())
                x = expand(b)
                write(m, x)
                results.append((x.numpy().copy(), b.numpy().copy()))
            for ours, theirs in zip(*results):
                assert np.array_equal(ours, theirs), (i, k, ours, theirs)
    for m in (tl, torch):
        w, b = m.tensor(v0, requires_grad=True), m.tensor(b0[0].copy())
        y = (w * b).sum()   # saves b
        x = b.expand(1, 3)
        x += 1.0
        raises(RuntimeError, y.backward, 'modified by an in')
    for m in (tl, torch):   # a slice of a broadcast: its elements are apart
        b = m.tensor(b0[:1].copy())
        row = b.expand(3, 3)[1]
        row += m.tensor(v0)
        assert np.array_equal(b.numpy(), b0[:1] + v0), m.__name__
    for m in (tl, torch):   # a real broadcast: one row of it, and zero_() (a fill), write through
        b = m.tensor(b0[:1].copy())
        wide = b.expand(2, 3)
        wide[0] = 1.25
        assert np.array_equal(b.numpy(), np.full((1, 3), 1.25)), m.__name__
        wide.zero_()
        assert not b.numpy().any(), m.__name__
    for write in (lambda w: w.__setitem__(slice(None), 1.25), lambda w: w.__setitem__((slice(None), 0), 4.0),
                  lambda w: w.__iadd__(1.0)):   # writes whose own elements share memory: refused, as PyTorch's
        for m in (tl, torch):
            b = m.tensor(b0[:1].copy())
            wide = b.expand(2, 3)
            raises(RuntimeError, lambda: write(wide), *(('single memory location', 'clone()') if m is tl else ()))
            assert np.array_equal(b.numpy(), b0[:1]) and wide.shape == (2, 3)


def test_zero_and_requires_grad_():
    t = tl.Tensor(sample(rng('z'), (3,)))
    t.zero_()
    assert np.all(t.numpy() == 0)
    assert t.requires_grad_() is t and t.requires_grad
    t.requires_grad_(False)
    assert not t.requires_grad


def test_zero_recorded_and_where_condition_as_pytorch():
    """zero_ is fill_(0): recorded on a tensor that requires grad (its gradient 0 there), a leaf refused, as PyTorch's;
    where's condition must be bool (TypeError naming the dtype; PyTorch: RuntimeError), uint8 with PyTorch's
    deprecation warning."""
    need_torch()
    grads = []
    for m in (tl, torch):
        leaf = m.tensor([1.0, 2.0, 3.0], requires_grad=True)
        raises(RuntimeError, lambda: leaf.zero_())
        y = leaf * 2
        assert y.zero_() is y and not y.detach().numpy().any()
        (y * 5 + leaf * m.tensor([1.0, 2.0, 3.0])).sum().backward()
        grads.append(leaf.grad.numpy())
    assert np.array_equal(grads[0], grads[1]) and grads[0].tolist() == [1, 2, 3], grads
    a, b = tl.ones(2), tl.zeros(2)
    for dtype in (np.int64, np.float32):
        raises(RuntimeError, lambda: torch.where(torch.tensor(np.array([1, 0], dtype)), torch.ones(2), torch.zeros(2)))
        raises(TypeError, lambda: tl.where(tl.tensor(np.array([1, 0], dtype)), a, b), 'where', 'bool',
               np.dtype(dtype).name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        got = tl.where(tl.tensor(np.array([1, 0], np.uint8)), a, b)
    assert got.tolist() == [1.0, 0.0] and any('uint8' in str(w.message) for w in caught)


def test_float16_sum_accumulates_in_float32():
    x = tl.Tensor(np.full(4096, 0.1, np.float16))
    s = x.sum()
    assert s.dtype == np.float16
    want = 4096 * float(np.float16(0.1))  # 409.5: exact in float16; a float16 running sum stalls near 256
    assert abs(float(s.item()) - want) <= 0.25, s.item()
    assert abs(float(x.mean().item()) - float(np.float16(0.1))) < 1e-4
    m = tl.Tensor(np.full((1, 4096), 0.1, np.float16)) @ tl.Tensor(np.ones((4096, 1), np.float16))
    assert m.dtype == np.float16 and abs(float(m.item()) - want) <= 0.25, m.item()
    cols = tl.Tensor(np.full((4096, 3), 0.1, np.float16))  # down axis 0 NumPy's own float16 sum stalls at 256
    assert_close(cols.sum(axis=0), np.full(3, want), 0, 0.25)
    assert_close(cols.mean(axis=0), np.full(3, 0.1), 1e-3, 0)
    assert_close(cols.T @ tl.Tensor(np.ones((4096, 1), np.float16)), np.full((3, 1), want), 0, 0.25)


def test_float16_var_accumulates_in_float32():
    need_torch()
    a = np.zeros((2, 100), np.float16)
    a[:, 0] = 300   # the centred squares (297^2) overflow float16; the variance (900) does not
    x, p = tl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    for f in (lambda t: t.var(), lambda t: t.var(1) if t is x else t.var(dim=1)):
        got, want = f(x), f(p)
        assert got.dtype == np.float16
        assert_close(got, want, 1e-3, 0)
    x.var().backward(), p.var().backward()
    assert x.grad.dtype == np.float16
    assert_close(x.grad, p.grad, 1e-3, 1e-6)


def test_float32_var_of_offset_values_keeps_its_precision():
    """float32 var of values near 1e4 (unit variance) over 1000 rows: within 1e-5 of the float64 variance (the mean
    corrected by the centred values' mean takes out its float32 rounding, 1e-4 of the variance before); its gradient
    is still PyTorch's in float64; constant values give a variance and std of 0 or more (never NaN), their
    gradients finite, in float16, float32 and float64."""
    need_torch()
    r = rng('var offset')
    x0 = r.standard_normal((1000, 64)) + 1e4
    for axis in (0, 1, None):
        got = tl.tensor(x0.astype(np.float32)).var(axis).numpy()
        want = np.var(x0.astype(np.float32).astype(np.float64), axis=axis, ddof=1)
        assert np.abs(got / want - 1).max() < 1e-5, (axis, np.abs(got / want - 1).max())
    x, x_t = tl.tensor(x0[:50, :6], requires_grad=True), torch.tensor(x0[:50, :6], requires_grad=True)
    g = r.standard_normal(6)
    (x.var(0) * tl.tensor(g)).sum().backward()
    (x_t.var(0) * torch.tensor(g)).sum().backward()
    assert_close(x.grad, x_t.grad.numpy(), 1e-9, 1e-12, 'var gradient')
    for dtype in (np.float16, np.float32, np.float64):
        for n in (2, 7, 33, 100, 1000, 4097):
            for value in (0.1, 1 / 3, 7.7, 1e4 + 0.3):
                x = tl.tensor(np.full(n, value, dtype), requires_grad=True)
                v, s = x.var(), x.std()
                s.backward()
                assert v.item() >= 0 and s.item() >= 0 and np.isfinite(x.grad.numpy()).all(), (dtype, n, value)


def test_reductions_refuse_a_keepdim_not_bool_as_pytorch():
    """keepdim must be a bool (PyTorch's TypeError; a string or 2, truthy, passed as True before) in every reduction
    taking it; var's correction must be a number."""
    need_torch()
    x, x_t = tl.tensor(rng('keepdim').standard_normal((3, 4))), torch.randn(3, 4)
    for name in ('sum', 'mean', 'max', 'min', 'amax', 'amin', 'var', 'std', 'argmax', 'argmin', 'all', 'any', 'prod',
                 'logsumexp'):
        for bad in ('yes', 1, np.True_):
            raises(TypeError, lambda: getattr(x_t, name)(0, keepdim=bad))
            raises(TypeError, lambda: getattr(x, name)(0, keepdim=bad), 'keepdim', 'bool', type(bad).__name__)
        assert getattr(x, name)(0, keepdim=True).shape == (1, 4), name
    raises(TypeError, lambda: x.norm(axis=0, keepdim='x'), 'keepdim')
    raises(TypeError, lambda: x.var(0, correction='a'), 'correction', 'number')


def test_var_std_unbiased_as_pytorch():
    """PyTorch's unbiased (True: correction 1, False: 0) by keyword, with dim= and keepdim=, and alone as the first
    argument (var(False): PyTorch's var(unbiased) overload; a bool was read as axis 0 or 1): values and float64
    gradients against PyTorch; unbiased with correction, or not a bool, raises TypeError as PyTorch does. A second
    positional argument stays keepdim (the interface's order), where PyTorch's var(dim, unbiased) reads unbiased."""
    need_torch()
    x0 = sample(rng('var unbiased'), (3, 4))
    for f in (lambda t: t.var(False), lambda t: t.std(True), lambda t: t.var(unbiased=False),
              lambda t: t.std(dim=1, unbiased=False, keepdim=True), lambda t: t.var(0, unbiased=True),
              lambda t: t.std(None, unbiased=False), lambda t: t.var(dim=(0, 1), unbiased=False)):
        outs = []
        for m in (tl, torch):
            x = m.tensor(x0, requires_grad=True)
            out = f(x)
            (out * m.tensor(upstream(0, tuple(out.shape)))).sum().backward()
            outs.append((out, x.grad))
        (got, grad), (want, grad_t) = outs
        assert got.shape == tuple(want.shape)
        assert_close(got, want, 1e-12, 1e-12)
        assert_close(grad, grad_t, 1e-12, 1e-12)
    for f in (lambda t: t.var(0, unbiased=True, correction=0), lambda t: t.std(unbiased=1),
              lambda t: t.var(True, unbiased=False)):
        raises(TypeError, lambda: f(torch.tensor(x0)))
        raises(TypeError, lambda: f(tl.tensor(x0)), 'unbiased')
    assert tl.tensor(x0).var(0, True).shape == (1, 4) and torch.tensor(x0).var(0, True).shape == (4,)


def test_maximum_minimum_gradient_at_nan_and_ties_as_pytorch():
    """maximum and minimum give each operand the whole gradient where it wins and where either is NaN (neither loses,
    as PyTorch's), half at ties, none where it loses (0 even where the gradient is inf or NaN, as PyTorch's, also for
    max() and min()); broadcast operands sum theirs: float64 against PyTorch."""
    need_torch()
    nan = math.nan
    a0, b0 = np.array([[3., nan, 2., 1., nan], [0., 5., -1., 2., 4.]]), np.array([nan, 1., 2., 5., nan])
    g = sample(rng('max nan'), (2, 5))
    for name in ('maximum', 'minimum'):
        grads = []
        for m in (tl, torch):
            a, b = m.tensor(a0, requires_grad=True), m.tensor(b0, requires_grad=True)
            getattr(m, name)(a, b).backward(m.tensor(g))
            grads.append((a.grad.numpy(), b.grad.numpy()))
        for ours, theirs, which in zip(*grads, 'ab'):
            assert np.array_equal(ours, theirs), (name, which, ours, theirs)
    # an inf or NaN gradient reaches the winners alone (the losers' 0 is selected, not a product: PyTorch's), for
    # maximum and minimum and for max() and min() of all elements (PyTorch's amax over an axis multiplies its mask in,
    # so there a NaN reaches the whole row; ours, max(axis), selects as its max() does)
    x0, y0 = np.array([[1., 5., 2.], [3., 3., -1.]]), np.array([2., 3., 2.])
    upstream_grads = (np.array([nan, 1., math.inf, 2., -math.inf, nan]),)
    ops = [lambda m, x, y: m.maximum(x, y), lambda m, x, y: m.minimum(x, y), lambda m, x, y: x.max(),
           lambda m, x, y: x.min()]
    for k, op in enumerate(ops):
        grads = []
        for m in (tl, torch):
            x, y = m.tensor(x0, requires_grad=True), m.tensor(y0, requires_grad=True)
            out = op(m, x, y)
            w = upstream_grads[0].ravel()[:int(np.prod(out.shape))] if out.ndim else np.array(math.inf)
            out.backward(m.tensor(w.reshape(tuple(out.shape))))
            grads.append([t.grad.numpy() if t.grad is not None else np.zeros_like(t.detach().numpy()) for t in (x, y)])
        for ours, theirs in zip(*grads):
            assert np.array_equal(ours, theirs, equal_nan=True), (k, ours, theirs)
    a = tl.tensor([-1., 2.], requires_grad=True)   # an inf from the forward (0 ** -0.5) stops at the loser too
    (tl.maximum(a, tl.zeros(2)) ** 0.5).sum().backward()
    assert a.grad.numpy()[0] == 0 and np.isfinite(a.grad.numpy()).all(), a.grad


def test_min_minimum_integer_and_bool_like_torch():
    """min and minimum without negation, which wraps unsigned and the smallest signed integers and fails on bool."""
    need_torch()
    for a, b in [(np.array([0, 1, 5], np.uint8), np.array([1, 1, 1], np.uint8)),
                 (np.array([-128, 5, 0], np.int8), np.array([127, -128, 0], np.int8)),
                 (np.array([True, False, True]), np.array([True, True, False]))]:
        x, y, px, py = tl.tensor(a), tl.tensor(b), torch.tensor(a), torch.tensor(b)
        for got, want in ((x.min(), px.min()), (x.max(), px.max()), (tl.minimum(x, y), torch.minimum(px, py)),
                          (x.minimum(y), px.minimum(py)), (tl.maximum(x, y), torch.maximum(px, py)),
                          (x.reshape(1, 3).min(1), px.reshape(1, 3).amin(1))):
            assert got.dtype == a.dtype and np.array_equal(got.numpy(), want.numpy()), (a.dtype, got, want)


def test_pow_grad_at_zero_base_and_exponent():
    """PyTorch's masks: d/da is 0 where b == 0, d/db is 0 where a == 0 and b >= 0."""
    need_torch()
    a, b = np.array([0., 0., 2., 0., 3., 0.]), np.array([0., 2., 0., 0.5, -1., -1.])
    outs = []
    for m in (tl, torch):
        x, y = m.tensor(a, requires_grad=True), m.tensor(b, requires_grad=True)
        with np.errstate(divide='ignore'):   # 0 ** -1 = inf, as in PyTorch
            (x ** y).sum().backward()
        z = m.tensor(a[:3], requires_grad=True)
        (z ** 0).sum().backward()
        w = m.tensor(b[:3], requires_grad=True)
        (0.0 ** w).sum().backward()
        outs.append([x.grad, y.grad, z.grad, w.grad])
    for k, (got, want) in enumerate(zip(*outs)):
        assert_close(got, want, 1e-12, 0, f'grad {k}')


def float_bits(t):
    """A float tensor's (or array's) bits, every NaN made one."""
    a = to_np(t)
    return np.where(np.isnan(a), np.nan, a).view(f'u{a.itemsize}')


POW_BASES = np.concatenate([[-np.inf, -0.0, 0.0, np.inf, -1.0, 4.0, np.nan, 1e-30, -3.0, 300.0, 65504.0],
                            rng('pow bases').standard_normal(1500) * 3, rng('pow bases').uniform(0, 50, 1500)])
POW_FORMS = (0.5, -0.5, -1, 2, 3, -2, 3.0, 2.0)   # PyTorch's exact forms of x ** number (sqrt, products, 1 / ...)


def pow_cases():
    """(dtype, exponent, bases): POW_FORMS in float64 and float32, more exponents in float16 (pow in float32), some
    that float16 does not hold (the gradient's factor is the number itself: 1e-8 is not 0 there)."""
    for dtype, exponents in ((np.float64, POW_FORMS), (np.float32, POW_FORMS),
                             (np.float16, POW_FORMS + (1.5, -3, 2.5, 0.25, 1.1, 0.1, -0.1, 1 / 3, 1e-8))):
        with np.errstate(over='ignore'):
            x0 = POW_BASES.astype(dtype)
        for e in exponents:
            yield dtype, e, x0


def pow_results(x0, exponent, device=None):
    """x ** exponent and its gradient (of a fixed random upstream) on device, as NumPy arrays."""
    x = tl.tensor(x0, requires_grad=True, device=device)
    with np.errstate(all='ignore'):
        y = x ** exponent
        y.backward(tl.tensor(rng('pow upstream').standard_normal(x0.shape).astype(x0.dtype), device=device))
    return [y.numpy(), x.grad.numpy()]


def test_pow_number_exponents_bits_as_pytorch():
    """x ** number as PyTorch's, bit for bit in value and gradient (float32, float64; float16 at other exponents too):
    1 / sqrt at -0.5 (-0 gives -inf, -inf NaN: pow gives inf and 0), products at 2, 3 and -2, 1 / x at -1, and the
    gradient as g (b x^(b-1)), its power by the same forms (where b - 1 has none, pow: within 4 ulps, libm's against
    PyTorch's). At 0.5 the correctly rounded sqrt (PyTorch's CPU sqrt errs by an ulp on some hosts, MKL's)."""
    need_torch()
    for dtype, e, x0 in pow_cases():
        x_t = torch.tensor(x0, requires_grad=True)
        y_t = x_t ** e
        y_t.backward(torch.tensor(rng('pow upstream').standard_normal(x0.shape).astype(dtype)))
        if e == 0.5 and dtype != np.float16:
            with np.errstate(invalid='ignore'):
                y_t = np.sqrt(x0)
        for k, (ours, theirs) in enumerate(zip(pow_results(x0, e), (y_t, x_t.grad))):
            theirs = to_np(theirs)
            differ = float_bits(ours) != float_bits(theirs)
            if k == 1 and dtype != np.float16 and e - 1 not in POW_FORMS + (1,):   # x^(b-1) by pow: libm's
                differ &= ~np.isclose(ours, theirs, 4 * np.finfo(dtype).eps, 0)   # and PyTorch's differ
            assert not differ.any(), f'{np.dtype(dtype).name} x ** {e}: {("value", "gradient")[k]} differs at ' \
                f'{x0[differ][:3]}: {ours[differ][:3]} vs {theirs[differ][:3]}'


def test_pow_numpy_scalar_exponent_is_its_number():
    """x ** a NumPy scalar is x ** its Python number (as PyTorch reads it), value and gradient bit for bit: not
    computed in the scalar's type (np.int8(-128) - 1 wrapped to 127; np.float32(0.1) - 1 rounded to float32)."""
    for dtype in (np.float64, np.float32, np.float16):
        x0 = np.abs(POW_BASES[11:200]).astype(dtype) + dtype(0.5)
        for scalar in (np.int8(-128), np.float32(0.1), np.float64(2.0), np.int64(3), np.float16(1.5)):
            got, want = pow_results(x0, scalar), pow_results(x0, scalar.item())
            for k in range(2):
                assert (float_bits(got[k]) == float_bits(want[k])).all(), f'{np.dtype(dtype).name} ** {scalar!r}: ' \
                    f'result {k}'


def test_pow_float16_with_numbers_and_bools_as_pytorch():
    """As PyTorch's **: a float16 tensor meets a number or a 0-d float tensor, either side, rounded to float16 first
    (then in float32, the result rounded once), bit for bit; a bool tensor ** True is itself and ** False all True,
    bools (not int8); two bool operands raise TypeError; an integer or float exponent promotes as PyTorch."""
    need_torch()
    r = rng('pow float16')
    half = np.concatenate([r.uniform(0.01, 60, 500), -r.uniform(0.01, 60, 200), [0.0]]).astype(np.float16)
    for f in (lambda m, x: x ** 1.7, lambda m, x: x ** 0.33, lambda m, x: x ** -1.1, lambda m, x: 1.3 ** x,
              lambda m, x: x ** m.tensor(1.1, dtype=m.float64), lambda m, x: m.tensor(2.3) ** x, lambda m, x: x ** 3,
              lambda m, x: x ** m.tensor(np.int64(2))):
        with np.errstate(all='ignore'):
            ours, theirs = f(tl, tl.tensor(half)), f(torch, torch.tensor(half))
        assert same_dtype(ours, theirs) and np.array_equal(ours.numpy(), theirs.numpy(), equal_nan=True)
    b, bt = tl.tensor([True, False]), torch.tensor([True, False])
    for e in (True, False, 1, 0, 2, 1.5, tl.tensor([2, 3])):
        ours = b ** e
        theirs = bt ** (torch.tensor(e.numpy()) if isinstance(e, tl.Tensor) else e)
        assert same_dtype(ours, theirs) and ours.tolist() == theirs.tolist(), (e, ours, theirs)
    for f in (lambda m, b: b ** m.tensor([True, True]), lambda m, b: True ** b):
        raises(NotImplementedError, lambda: f(torch, bt))
        raises(TypeError, lambda: f(tl, b), 'bool')


def test_reductions_on_empty_and_zero_dim_like_torch():
    """A reduction over non-empty axes of an empty tensor, and dim 0 / -1 of a 0-d tensor, as PyTorch."""
    need_torch()
    e, pe = tl.zeros(0, 3), torch.zeros(0, 3)
    for got, want in ((e.max(1), pe.amax(1)), (e.min(-1, keepdim=True), pe.amin(-1, keepdim=True)), (e.sum(0), pe.sum(0))):
        assert got.shape == tuple(want.shape), (got.shape, want.shape)
    raises(ValueError, lambda: e.max(0), 'empty', '(0, 3)')
    raises(ValueError, lambda: e.min(), 'empty', '(0, 3)')
    x, p = tl.tensor(3., requires_grad=True), torch.tensor(3., requires_grad=True)
    for f in (lambda t: t.sum(0), lambda t: t.max(-1) if t is x else t.amax(-1), lambda t: t.mean(0),
              lambda t: t.min(0) if t is x else t.amin(0), lambda t: t.squeeze(0), lambda t: t.softmax(0)):
        got, want = f(x), f(p)
        assert got.shape == () and isinstance(got.data, np.ndarray)
        assert_close(got, want, 1e-6, 0)
        x.grad = p.grad = None
        got.backward(), want.backward()
        assert_close(x.grad, p.grad, 1e-6, 0)
    raises(IndexError, lambda: x.sum(1), 'dim 1')


def test_float16_scalars_keep_float16():
    x = tl.Tensor(sample(rng('h'), (4,)).astype(np.float16), requires_grad=True)
    for y in (x * 2.5, 2 - x, x ** 2, x / 3, 1.5 + x, x.exp().sum()):
        assert y.dtype == np.float16, y.dtype
    (x * 2.5).sum().backward()
    assert x.grad.dtype == np.float16 and np.all(x.grad.numpy() == 2.5)



def test_flip_as_pytorch():
    """Tensor.flip and tl.flip as torch.flip in float64: values and gradients for dims as an int, several ints, a tuple
    or a list, negative ones, none and a 0-d tensor's; the result is a copy (writing it leaves x as it was); a dim out
    of range raises IndexError, a dim named twice (as -1 and its positive twin too) ValueError (PyTorch:
    RuntimeError), a float or bool dim TypeError, each message naming the dims."""
    need_torch()
    r = rng('flip')
    x0 = r.standard_normal((2, 3, 4))
    for dims in (0, 2, -1, (0, 2), [-3, -1], (1, 0, 2), (-2,), ()):
        listed = [dims] if isinstance(dims, int) else dims   # torch.flip takes no int (Tensor.flip does)
        for flip, flip_t in ((lambda t: t.flip(dims), lambda t: t.flip(dims)),
                             (lambda t: tl.flip(t, dims), lambda t: torch.flip(t, listed))):
            x, x_t = tl.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
            y, y_t = flip(x), flip_t(x_t)
            assert_close(y, y_t, 0, 0, f'flip {dims}')
            w = upstream(0, y.shape)
            (y * tl.tensor(w)).sum().backward()
            (y_t * torch.tensor(w)).sum().backward()
            assert_close(x.grad, x_t.grad, 0, 0, f'flip {dims} gradient')
    x = tl.tensor(x0.copy())
    assert_close(x.flip(0, 2), torch.tensor(x0).flip(0, 2), 0, 0, 'flip(0, 2)')
    for dims in ((), (1,)):
        x.flip(dims)[0, 0, 0] = 99.0
        assert np.array_equal(x.numpy(), x0), f'flip({dims}) wrote through to its input'
    for dims in (0, -1):
        assert tl.tensor(2.5).flip(dims).item() == torch.tensor(2.5).flip(dims).item() == 2.5
    for dims in ((3,), (-4,), (0, 5)):
        raises(IndexError, lambda: torch.tensor(x0).flip(dims))
        raises(IndexError, lambda: x.flip(dims), str(max(dims, key=abs)))
    for dims in ((0, 0), (2, -1), (1, 0, -2)):
        raises(RuntimeError, lambda: torch.tensor(x0).flip(dims), 'multiple times')
        assert str(dims) in raises(ValueError, lambda: x.flip(dims), 'more than once')
    for dims in ((1.0,), (True,), 0.5):
        raises(TypeError, lambda: torch.tensor(x0).flip(dims))
        raises(TypeError, lambda: x.flip(dims), 'flip', 'ints')

# ===== indexing and reductions as PyTorch's: gather, scatter, masks, splits, cumsum, prod, norm, sort =====

def cases_of(*texts, args='m, x'):
    """(text, f) pairs, f = lambda args: text, for m = tl or torch: cases that name themselves in a failure."""
    return [(t, eval(f'lambda {args}: {t}')) for t in texts]


def run_both(f, *arrays, grad=False):
    """f(m, *tensors) for tl and torch on the same arrays: ((ours, theirs), (our tensors, torch's))."""
    ours = [tl.tensor(a, requires_grad=grad and a.dtype.kind == 'f') for a in arrays]
    theirs = [torch.tensor(a, requires_grad=grad and a.dtype.kind == 'f') for a in arrays]
    return (f(tl, *ours), f(torch, *theirs)), (ours, theirs)


def same_as_torch(got, want, msg='', rtol=0, atol=0):
    """A tensor, or a tuple of them, equal to torch's in shape, dtype and values (NaN where NaN)."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), f'{msg}: {len(got)} results, want {len(want)}'
        for k, (a, b) in enumerate(zip(got, want)):
            same_as_torch(a, b, f'{msg} [{k}]', rtol, atol)
        return
    assert same_dtype(got, want), f'{msg}: dtype {got.dtype}, torch {want.dtype}'
    a, b = to_np(got), to_np(want)
    assert a.shape == b.shape, f'{msg}: shape {a.shape}, torch {b.shape}'
    if a.dtype.kind == 'f':
        assert np.array_equal(np.isnan(a), np.isnan(b)), f'{msg}: NaNs at other places'
        a, b = np.where(np.isnan(a), 0, a), np.where(np.isnan(b), 0, b)
    assert_close(a, b, rtol, atol, msg)


def check_against_torch(cases, *arrays, dtypes=(None,), skip=(), rtol=0):
    """Each case on the arrays (cast to each dtype) against PyTorch; the inputs are left as they were."""
    for dtype in dtypes:
        given = [a if dtype is None else a.astype(dtype) for a in arrays]
        for text, f in cases:
            if (np.dtype(dtype) if dtype else None, text) not in skip:
                (got, want), (ours, _) = run_both(f, *given)
                same_as_torch(got, want, f'{given[0].dtype}: {text}', rtol)
                for t, a in zip(ours, given):
                    assert np.array_equal(t.numpy(), a, equal_nan=a.dtype.kind == 'f'), f'{text} changed its input'


def check_refusals_like_torch(cases, theirs, ours):
    """Each (text, f, exception) raises some error in PyTorch and `exception` in tinygrad_lite."""
    for text, f, exc in cases:
        try:
            raises((RuntimeError, IndexError, TypeError, ValueError), lambda: f(torch, theirs))
            raises(exc, lambda: f(tl, ours))
        except AssertionError as e:
            raise AssertionError(f'{text}: {e}') from None


def test_gather_scatter_index_select_as_pytorch():
    """gather, scatter (src or a number), scatter_add and index_select as PyTorch's for float, integer and bool
    tensors, int32 and int64 indices, negative dims, 0-d tensors and empty indices; the input is left as it was."""
    need_torch()
    r = rng('gather-scatter')
    I = 'm.tensor(np.array([[0, 2, 2, 1], [2, 0, 0, 0]]))'
    cases = cases_of(f'x.gather(0, {I})', f'x.gather(-1, {I}[:, :3].T)', f'm.gather(x, 1, {I}.int())',
                     'x.gather(0, m.tensor(np.zeros((0, 4), np.int64)))', f'x.scatter(0, {I}[:1], s[:1, :4])',
                     f'x.scatter(1, {I}[:, :1], 2.5)', f'x.scatter(-1, {I}[:, :1], value=-1)',
                     f'm.scatter(x, 0, {I}[:1].int(), s[:1, :4])', f'x.scatter_add(0, {I}, s[:2, :4])',
                     f'm.scatter_add(x, 1, {I}[:, :3], s[:2, :3])', f'x.scatter_add(0, {I}[:0], s[:0])',
                     'x.index_select(1, m.tensor([3, 0, 3]))', 'm.index_select(x, -2, m.tensor([2]).int())',
                     'x.index_select(0, m.tensor(1))', f'x.index_select(1, {I}[0, :0])', args='m, x, s')
    skip = {(np.dtype(bool), t) for t, _ in cases if 'scatter_add' in t}   # (PyTorch's bool sum: an or; ours too)
    check_against_torch(cases, r.standard_normal((3, 4)) * 3, r.standard_normal((3, 5)) * 3, skip=skip,
                        dtypes=(np.float64, np.float32, np.float16, np.int64, np.int32, np.bool_))
    check_against_torch(cases_of('x.scatter(0, m.tensor([[1, 0]]), 2.7)', 'x.scatter(1, m.tensor([[2]]), -2.7)'),
                        np.arange(6).reshape(2, 3) * 1)   # a float number into integers, truncated
    counts = tl.zeros(5, dtype=np.int64).scatter_add(0, tl.tensor([4, 1, 4, 4]), tl.ones(4, dtype=np.int64))
    assert counts.tolist() == [0, 1, 0, 0, 3], counts   # the histogram idiom: repeated indices add up
    check_against_torch(cases_of(
        'x.gather(0, m.tensor(0))', 'x.gather(0, m.tensor([0, 0]))', 'x.index_select(0, m.tensor([0]))',
        'x.scatter(0, m.tensor(0), m.tensor(7., dtype=m.float64))', 'x.index_select(-1, m.tensor(0))',
        'x.scatter_add(0, m.tensor([0, 0]), m.tensor([1., 2.], dtype=m.float64))'), np.array(5.))
    check_against_torch(cases_of('x.gather(0, m.tensor(2))', 'x.index_select(0, m.tensor(2))'), np.arange(3.))


def test_error_gather_scatter_index_select_as_pytorch():
    """Bad indices raise where PyTorch raises, naming the index, shapes, dim and dtypes: an index out of range
    (negative ones too: no counting from the end) RuntimeError as PyTorch's (IndexError for index_select, as PyTorch's
    for dim 0: "index out of range in self"), an index of another dtype TypeError (PyTorch: RuntimeError), index
    shapes PyTorch refuses ValueError (PyTorch: RuntimeError), src of another dtype TypeError; nothing changes."""
    need_torch()
    x0 = np.arange(12.).reshape(3, 4)
    x, p = tl.tensor(x0), torch.tensor(x0)
    for index, dim, size in (([[3, 0]], 0, 3), ([[-1, 0]], 0, 3), ([[0, 4]], 1, 4)):
        bad = min(np.ravel(index)) if min(np.ravel(index)) < 0 else max(np.ravel(index))
        for m, t, exc in ((torch, p, (RuntimeError, IndexError)), (tl, x, None)):
            i, ones = m.tensor(index), m.ones(3, 4, dtype=m.float64)
            for what, f in (('gather', lambda: t.gather(dim, i)), ('scatter', lambda: t.scatter(dim, i, 1.0)),
                            ('scatter_add', lambda: t.scatter_add(dim, i, ones)),
                            ('index_select', lambda: t.index_select(dim, m.tensor([bad])))):
                if m is torch:
                    raises(exc, f)
                else:
                    raises(IndexError if what == 'index_select' else RuntimeError, f, what, f'index {bad}',
                           f'dimension {dim}', f'size {size}')
    i = np.array([[0, 1], [2, 0]])
    for bad in (i.astype(np.float32), i.astype(np.int16), i.astype(bool)):
        raises(RuntimeError, lambda: p.gather(0, torch.tensor(bad)))
        raises(TypeError, lambda: x.gather(0, tl.tensor(bad)), 'gather', 'int64', str(bad.dtype))
        raises(TypeError, lambda: x.scatter_add(0, tl.tensor(bad), x), 'scatter_add', str(bad.dtype))
        raises(TypeError, lambda: x.index_select(0, tl.tensor(bad[0])), 'index_select', str(bad.dtype))
    for shape in ((2,), (2, 2, 2), (2, 5)):
        index = np.zeros(shape, np.int64)
        raises(RuntimeError, lambda: p.gather(0, torch.tensor(index)))
        assert_names_shapes(raises(ValueError, lambda: x.gather(0, tl.tensor(index)), 'gather'), shape, x0.shape)
    for src in (np.ones((1, 2)), np.ones(4)):
        raises((RuntimeError, IndexError), lambda: p.scatter(0, torch.tensor(i), torch.tensor(src)))
        assert_names_shapes(raises(ValueError, lambda: x.scatter(0, tl.tensor(i), tl.tensor(src))), i.shape, src.shape)
    raises(IndexError, lambda: p.index_select(0, torch.tensor([[0]])))
    assert_names_shapes(raises(IndexError, lambda: x.index_select(0, tl.tensor([[0]])), 'vector'), (1, 1))
    raises(IndexError, lambda: x.gather(2, tl.tensor(i)), 'dim 2')
    raises(RuntimeError, lambda: p.scatter(0, torch.tensor(i), torch.ones(2, 2)))
    raises(TypeError, lambda: x.scatter(0, tl.tensor(i), tl.ones(2, 2)), 'float32', 'float64')
    raises(TypeError, lambda: p.scatter_add(0, torch.tensor(i), 1.0))
    raises(TypeError, lambda: x.scatter_add(0, tl.tensor(i), 1.0), 'scatter_add', 'tensor')
    raises(RuntimeError, lambda: tl.zeros(3, dtype=np.int64).scatter(0, tl.tensor([0]), 2 ** 70), 'overflow')
    assert np.array_equal(x.numpy(), x0)


def test_scatter_src_larger_than_index():
    """scatter and scatter_add read src's first elements where src is larger than the index, as PyTorch's forward;
    the gradient (which PyTorch's backward refuses there) by finite differences: 0 for the unread elements."""
    need_torch()
    r = rng('scatter-large-src')
    x0, s0, i0 = r.standard_normal((3, 4)), r.standard_normal((3, 5)), np.array([[1, 0, 2, 1], [2, 1, 0, 0]])
    for name in ('scatter', 'scatter_add'):
        f = lambda m, x, s: getattr(x, name)(0, m.tensor(i0), s)
        same_as_torch(*run_both(f, x0, s0)[0], name)
        x, s = tl.tensor(x0, requires_grad=True), tl.tensor(s0, requires_grad=True)
        gradcheck(lambda: f(tl, x, s), [x, s])
        assert np.all(s.grad.numpy()[2:] == 0) and np.all(s.grad.numpy()[:, 4:] == 0)


def test_where_and_item_assignment_refuse_a_number_beyond_the_dtype_as_pytorch():
    """tl.where(condition, int tensor, number) and the number first: one the tensor's integer dtype cannot hold
    raises RuntimeError naming it (as PyTorch's; NumPy would wrap 300 to 44 in int8), one it holds gives PyTorch's
    values, and a float number still promotes to float32. A float beyond float32's range raises too, in where and
    item assignment, as PyTorch's (not inf), and float16 takes one beyond its range as inf, as PyTorch's."""
    need_torch()
    r = rng('where numbers')
    x0, c0 = r.integers(-50, 50, 12).astype(np.int8), r.random(12) < 0.5
    for v in (300, -129, 2 ** 40):
        for args in ((tl.tensor(c0), tl.tensor(x0), v), (tl.tensor(c0), v, tl.tensor(x0))):
            raises(RuntimeError, lambda: tl.where(*args), 'where', str(v), 'int8')
        raises(RuntimeError, lambda: torch.where(torch.tensor(c0), torch.tensor(x0), v))
    f0 = sample(r, (12,))
    for lib in (tl, torch):
        for dtype, v, refused in ((lib.float32, 1e300, True), (lib.float32, -1e39, True), (lib.float16, 1e5, False),
                                  (lib.float32, float('inf'), False), (lib.float64, 1e300, False)):
            x, c = lib.tensor(f0.copy()).to(dtype), lib.tensor(c0)   # (tl.tensor keeps the array's memory)
            for f in (lambda: lib.where(c, x, v), lambda: lib.where(c, v, x), lambda: x.__setitem__(3, v),
                      lambda: x.__setitem__(c, v)):
                if refused:
                    raises(RuntimeError, f, 'overflow')
                    assert np.array_equal(x.numpy(), f0.astype(np.float32)), 'changed by a refused assignment'
                else:
                    f()
            if not refused:
                assert np.isinf(x.numpy()[3]) == (abs(v) > float(np.finfo(x.numpy().dtype).max)), (dtype, v)
    for v in (100, -128, 2.5):
        for first in (False, True):
            ours = tl.where(tl.tensor(c0), *[tl.tensor(x0), v][::-1 if first else 1])
            theirs = torch.where(torch.tensor(c0), *[torch.tensor(x0), v][::-1 if first else 1])
            assert same_dtype(ours, theirs) and np.array_equal(ours.numpy(), theirs.numpy()), (v, first)


def test_tensor_of_numpy_scalars_keeps_their_dtypes_as_pytorch():
    """tl.tensor of a (nested) list holding NumPy scalars types it as PyTorch's: each scalar's dtype, promoted with
    the Python numbers' (int64, float32, bool), so that a float64 one keeps its digits."""
    need_torch()
    for data in ([np.float64(0.1), 2], [np.uint8(3), np.uint8(4)], [np.uint8(3), 4], [np.float32(1.5), 2.5],
                 [np.float16(1), 2.0], [np.float16(1), 2], [np.bool_(True), True], [[np.int32(1)], [np.int8(2)]],
                 [np.int16(5), np.float16(2)], [[0.1, 2], [3, 4]], [True, 2], [], [np.int8(1), 5]):
        ours, theirs = tl.tensor(data), torch.tensor(data)
        same_as_torch(ours, theirs, repr(data))


def test_masked_fill_masked_select_as_pytorch():
    """masked_fill (a number or a 0-d tensor, cast to the tensor's dtype; the mask broadcast, the result of the
    broadcast shape) and masked_select as PyTorch's over dtypes; a value tensor's gradient is the filled elements'
    sum. A mask that is not bool, a value tensor with dimensions and a number the dtype cannot hold are refused."""
    need_torch()
    x0, m0 = np.arange(12.).reshape(3, 4) - 5, np.array([True, False, True, False])
    M = 'm.tensor(np.array([True, False, True, False]))'
    check_against_torch(cases_of(
        f'x.masked_fill({M}, -1.5)', f'x.masked_fill({M}, 2.7)', f'x.masked_fill({M}, m.tensor(3.5))',
        'x[0].masked_fill(m.ones(3, 4) > 0, 1)', 'm.masked_fill(x, m.tensor(True), 0)', f'x.masked_select({M})',
        f'm.masked_select(x[:, :1], {M})', 'x[0, 0].masked_select(m.tensor(False))'),
        x0, dtypes=(np.float64, np.float16, np.int64, np.int32, np.bool_))
    (got, want), ((x, v), (p, q)) = run_both(lambda m, x, v: x.masked_fill(m.tensor(m0), v), x0, np.array(2.),
                                             grad=True)
    same_as_torch(got, want)
    (got * tl.tensor(upstream(0, (3, 4)))).sum().backward(), (want * torch.tensor(upstream(0, (3, 4)))).sum().backward()
    same_as_torch(v.grad, q.grad, 'value gradient'), same_as_torch(x.grad, p.grad, 'x gradient')
    x = tl.tensor(x0)
    raises(RuntimeError, lambda: torch.tensor(x0).masked_fill(torch.tensor(m0).int(), 1.0))
    raises(TypeError, lambda: x.masked_fill(tl.tensor(m0).int(), 1.0), 'bool', 'int32')
    raises(TypeError, lambda: x.masked_select(tl.tensor(m0).int()), 'bool', 'int32')
    assert_names_shapes(raises(ValueError, lambda: x.masked_fill(tl.tensor(m0), tl.tensor([1.0])), '0-d'), (1,))
    assert_names_shapes(raises(ValueError, lambda: x.masked_fill(tl.tensor(m0[:3]), 1.0)), (3, 4), (3,))
    raises(RuntimeError, lambda: x.half().masked_fill(tl.tensor(m0), 1e6), 'overflow')
    raises(RuntimeError, lambda: x.long().masked_fill(tl.tensor(m0), math.inf), 'overflow')


def test_repeat_split_chunk_narrow_roll_tril_as_pytorch():
    """repeat, repeat_interleave (int or tensor repeats), split (a size or sizes), chunk, unbind, narrow, roll, tril
    and triu as PyTorch's over dtypes and edge cases (empty dims, sizes of 0, shifts past the size, diagonals past the
    matrix); split, chunk, unbind and narrow give views, roll and repeat a copy even where nothing moves; what PyTorch
    refuses raises."""
    need_torch()
    x0 = np.arange(24.).reshape(2, 3, 4) - 7
    check_against_torch(cases_of(
        'x.repeat(2, 1, 1, 2)', 'x.repeat([1, 0, 2])', 'x[0, 0, 0].repeat(3)', 'x.repeat_interleave(2)',
        'x.repeat_interleave(3, dim=-1)', 'x.repeat_interleave(m.tensor([2, 0, 1]), 1)',
        'x.repeat_interleave(m.tensor([3]), dim=0)', 'm.repeat_interleave(x, m.tensor(2).int(), 2, output_size=8)',
        'x.split(2, -1)', 'x.split([1, 0, 2], 1)', 'x.split(5, 0)', 'x[:, :0].split(2, 1)', 'x[:, :0].split(0, 1)',
        'm.split(x, [1, 3], dim=2)', 'x.chunk(3, -1)', 'x.chunk(5)', 'x[:, :0].chunk(3, 1)', 'm.chunk(x, 2, 2)',
        'x.unbind()', 'm.unbind(x, -1)', 'x.narrow(2, 1, 2)', 'x.narrow(-1, -4, 4)', 'x.narrow(1, 3, 0)',
        'x.narrow(1, m.tensor(1), 1)', 'm.narrow(x, 0, 1, 1)', 'x.roll(3)', 'x.roll(-5, 2)', 'x.roll((1, 2), (0, 0))',
        'x.roll([1, 7], [-1, 1])', 'x.roll(0, 1)', 'x[:, :0].roll(1, 1)', 'x[0, 0, 0].roll(1)', 'm.roll(x, 1, dims=1)',
        'x.tril()', 'x.tril(2)', 'x.triu(-1)', 'x[0].triu(9)', 'x.tril(-9)', 'm.tril(x[0], diagonal=1)',
        'm.triu(x, 1)'),
        x0, dtypes=(np.float64, np.float16, np.int64, np.int32, np.bool_))
    x = tl.tensor(x0)
    for pieces in (x.split(2, -1), x.chunk(2, 1), x.unbind(1), (x.narrow(2, 1, 2),)):
        for piece in pieces:
            assert np.shares_memory(piece.data, x.data), 'not a view'
    rolled = x.roll(0, 1)
    rolled[0, 0, 0] = 99.0
    assert x[0, 0, 0].item() == -7, 'roll(0) gave x itself, not a copy'
    for sizes in ((1, 1, 1), (1, 1, 1, 1), (2, 1, 1)):   # repeat always copies, as PyTorch's (no size tiling included)
        for source in (x, x[:1, :1]):
            tiled = source.repeat(*sizes)
            assert not np.shares_memory(tiled.data, x.data) and tiled.data.strides[-1] != 0, sizes
    check_refusals_like_torch([(t, f, exc) for exc, texts in (
        (ValueError, ('x.repeat(2, 2)', 'x.repeat(2, -1, 1)', 'x.repeat_interleave(-1, 0)',
                      'x.repeat_interleave(m.tensor([1, -1]), 0)', 'x.repeat_interleave(m.tensor([1, 2]), 1)',
                      'x.repeat_interleave(2, 0, output_size=5)', 'x.split(0, 1)', 'x.split(-1)', 'x.split([1, 1], 1)',
                      'x.split([2, -1, 2], 1)', 'x[0, 0, 0].split(1)', 'x.chunk(0)', 'x[0, 0, 0].chunk(1)',
                      'x.narrow(2, 3, 2)', 'x.narrow(2, 1, -1)', 'x[0, 0, 0].narrow(0, 0, 1)', 'x.roll(1, (0, 1))',
                      'x.roll((1, 2))', 'x.roll((), ())', 'x[0, 0].tril()')),
        (TypeError, ('x.repeat_interleave(m.tensor([1., 2.]), 0)', 'x.chunk(2.0)', 'x.narrow(2, 1.0, 1)',
                     'x.roll(1.5)', 'x.triu(1.0)', 'x.tril(True)')),
        (IndexError, ('x[0, 0, 0].repeat_interleave(2, 0)', 'x[0, 0, 0].unbind()', 'x.unbind(3)', 'x.narrow(2, 5, 0)',
                      'x.narrow(2, -5, 1)', 'x.roll(1, 3)', 'x[0, 0, 0].roll(1, 0)')))
        for t, f in cases_of(*texts)], torch.tensor(x0), x)
    assert np.array_equal(x.numpy(), x0)


def test_cumsum_prod_dtypes_as_pytorch():
    """cumsum and prod as PyTorch's: integers and bools in int64, float16 kept (accumulated in float32: 3000 running
    sums of 1e-4 reach 0.3, where float16 steps would stop at 0.25), dtype=, 0-d tensors, empty products (1); prod takes
    one int dim (a tuple is refused as by PyTorch)."""
    need_torch()
    cases = cases_of('x.cumsum(0)', 'x.cumsum(dim=-1)', 'm.cumsum(x, 1, dtype=m.float64)', 'x[0, 0].cumsum(0)',
                     'x[:0].cumsum(0)', 'x.prod()', 'x.prod(1)', 'x.prod(-2, keepdim=True)',
                     'm.prod(x, 0, dtype=m.float64)', 'x[0, 0].prod(0)', 'x[:0].prod(0)', 'x[:0].prod()')
    x0 = np.arange(1., 13.).reshape(3, 4) - 4
    check_against_torch(cases, x0, dtypes=(np.float64, np.float32, np.int64, np.int32, np.uint8))
    check_against_torch(cases, x0 > 0)
    check_against_torch(cases, x0 / 4, dtypes=(np.float16,), rtol=1e-3)   # (PyTorch rounds float16 products as it goes)
    small = np.full(3000, 1e-4, np.float16)
    assert_close(tl.tensor(small).cumsum(0)[-1], torch.tensor(small).cumsum(0)[-1], 1e-3, 0, 'float16 running sum')
    raises(TypeError, lambda: torch.ones(2, 2).prod((0, 1)))
    raises(TypeError, lambda: tl.ones(2, 2).prod((0, 1)), 'prod', 'int')
    raises(IndexError, lambda: tl.ones(2).cumsum(1), 'dim 1')


def test_prod_gradient_with_zeros_as_pytorch():
    """prod's gradient where products hold no zero, one zero (the zero gets the product of the others, the rest 0) or
    two (0 throughout), in float64 (against PyTorch and by finite differences, exact for a product) and float32;
    over one dim, every dim and a 0-d tensor; and where zeros meet infinities and NaNs, PyTorch's bit for bit."""
    need_torch()
    x0 = np.array([[1.5, 0., 2., -3.], [0., 4., 0., 0.5], [-2., 0.5, 3., 1.25], [0., 0., 0., 0.]])
    for dtype in (np.float64, np.float32):
        for text, f in cases_of('x.prod(1)', 'x.prod(0, keepdim=True)', 'x.prod()', 'x[0:1, 1:3].prod()',
                                'x[1, 2].prod()', 'x[2].prod()'):
            (got, want), ((x,), (p,)) = run_both(f, x0.astype(dtype), grad=True)
            same_as_torch(got, want, text)
            w = upstream(0, got.shape, dtype)
            (got * tl.tensor(w)).sum().backward(), (want * torch.tensor(w)).sum().backward()
            same_as_torch(x.grad, p.grad, f'{text} gradient', 1e-6)
    x = tl.tensor(x0, requires_grad=True)
    gradcheck(lambda: x.prod(1), [x])
    x.grad = None
    gradcheck(lambda: x[:3].prod(0), [x])
    # infinities and NaNs beside zeros: PyTorch's exact products of the others (NaN where 0 meets inf), and its rules
    inf, nan = math.inf, math.nan
    x1 = np.array([[0., inf, 2.], [0., 0., inf], [inf, 2., 1.], [nan, 0., 1.]])
    for text in ('x.prod(1)', 'x.prod(0)', 'x.prod()', 'x[0].prod()', 'x[1].prod()', 'x[2].prod()', 'x[3].prod()'):
        x, p = tl.tensor(x1, requires_grad=True), torch.tensor(x1, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter('error')   # (and silently, as PyTorch's)
            eval(text).sum().backward()
        eval(text.replace('x', 'p')).sum().backward()
        assert np.array_equal(x.grad.numpy(), p.grad.numpy(), equal_nan=True), (text, x.grad.numpy(), p.grad.numpy())


def test_logsumexp_extremes_as_pytorch():
    """logsumexp as PyTorch's, shifted by the maximum: large values (1e30 in float32, 1e4 where exp overflows), rows
    of -inf (-inf), +inf (inf), NaN, an empty dim (-inf), integers (float32 out); its gradient is the softmax, finite
    for large values (also where PyTorch's exp(x - result) rounds to 1 beside a 1e30 tie)."""
    need_torch()
    inf = math.inf
    x0 = np.array([[-inf, -inf, -inf], [inf, 1., 2.], [1e30, 1e30, -1e30], [-inf, 0., 1.], [1e4, 1e4 + 1, -1e4],
                   [np.nan, 1., 2.], [-3., 0.5, 2.]])
    cases = cases_of('x.logsumexp(1)', 'x.logsumexp(dim=-1, keepdim=True)', 'm.logsumexp(x[4:], (0, 1))',
                     'x[:, :0].logsumexp(1)', 'x[6, 0].logsumexp(0)')
    check_against_torch(cases, x0, dtypes=(np.float64, np.float32), rtol=1e-6)
    check_against_torch(cases, np.clip(x0, -6e4, 6e4), dtypes=(np.float16,), rtol=1e-3)
    check_against_torch(cases_of('x.logsumexp(0)'), np.array([[1, 2], [3, 4]]))
    for rows in (slice(3, 5), slice(6, 7)):
        (got, want), ((x,), (p,)) = run_both(lambda m, x: x[rows].logsumexp(1), x0, grad=True)
        got.sum().backward(), want.sum().backward()
        same_as_torch(x.grad, p.grad, 'gradient', 1e-9)
        assert_close(x.grad[rows], tl.tensor(x0[rows]).softmax(1), 1e-12, 0, 'the softmax')
    x = tl.tensor(x0[2:3], requires_grad=True)   # PyTorch's: 1, 1, 0 (its result rounds to 1e30)
    x.logsumexp(1).sum().backward()
    assert x.grad.tolist() == [[0.5, 0.5, 0]], x.grad


def test_norm_as_pytorch():
    """norm as PyTorch's for p = 'fro', 2, 1, inf, -inf, 0, 3, 0.5, -1 over all dims, one, two and keepdim: values and
    gradients, at 0 too (p = 2 and every other p: the subgradient 0, never NaN; inf's ties share it); float16 runs in
    float32 (300 does not overflow to inf); integers, narrowing dtype= and matrix norms are refused."""
    need_torch()
    x0 = np.array([[3., -1., 2., 0.5], [-4., 0., 7., 1.], [0., 0., 0., 0.], [-2., 2., 1., 0.]])
    for p in ('fro', 2, 1, math.inf, -math.inf, 3, 0.5, -1, 0):
        for dim, keep in ((None, False), (1, False), (-1, True), ((0, 1), False), (0, True)):
            (got, want), ((x,), (q,)) = run_both(lambda m, x: x.norm(p, dim, keep), x0, grad=True)
            with np.errstate(divide='ignore'):
                same_as_torch(got, want, f'p={p} dim={dim}', 1e-12)
            if p == 0:   # a count, recorded with the gradient 0 (PyTorch's stays None: it leaves it undefined)
                got.sum().backward()
                assert got.requires_grad and not x.grad.numpy().any(), f'p=0 dim={dim}'
                continue
            w = upstream(0, got.shape)
            (got * tl.tensor(w)).sum().backward(), (want * torch.tensor(w)).sum().backward()
            same_as_torch(x.grad, q.grad, f'p={p} dim={dim} gradient', 1e-9, 1e-12)
    check_against_torch(cases_of('m.norm(x, p=2, dim=1, dtype=m.float64)'), x0.astype(np.float32))
    nan_row = np.array([[math.nan, 3.0, 4.0], [0.0, 3.0, 4.0]])   # a NaN makes the norm NaN (it gave 0), and normalize's
    for p in ('fro', 2, 3, 0.5, -1, 1, math.inf, 0):
        same_as_torch(tl.tensor(nan_row).norm(p, 1), torch.tensor(nan_row).norm(p, 1), f'p={p} with a NaN', 0)
    same_as_torch(tl.normalize(tl.tensor(nan_row)), F.normalize(torch.tensor(nan_row)), 'normalize with a NaN', 1e-15)
    check_against_torch(cases_of('x.norm()', 'x.norm(1)'), np.array([300., 400.], np.float16))
    raises(RuntimeError, lambda: torch.tensor(x0).norm(dtype=torch.float32))
    raises(TypeError, lambda: tl.tensor(x0).norm(dtype=tl.float32), 'float64', 'float32')
    raises(RuntimeError, lambda: torch.tensor([1, 2]).norm())
    raises(TypeError, lambda: tl.tensor([1, 2]).norm(), 'norm', 'int64')
    raises(ValueError, lambda: tl.tensor(x0).norm('nuc'), 'nuc')


def test_sort_argsort_topk_as_pytorch():
    """sort (stable, as PyTorch's stable=True: ties keep their order, also descending), argsort and topk as PyTorch's
    over dtypes, dims, NaN (the largest) and 0-d tensors; (values, indices) pairs with PyTorch's field names; the
    values' gradient goes to the elements they came from, each its own (ties too). k out of range, bool topk and a
    non-int k raise."""
    need_torch()
    nan = math.nan
    x0 = np.array([[3., 1., 3., 2., nan, 1.], [-0., 0., 5., -1., 5., -0.], [2., 2., 2., 2., 2., 2.]])
    ints = np.array([[1, 0, 1, 0, 1, 3], [2, 2, -1, 0, 2, -1], [0, 0, 0, 0, 0, 0]])
    stable = cases_of('x.sort(stable=True)', 'x.sort(dim=0, descending=True, stable=True)',
                      'm.sort(x, dim=-1, descending=True, stable=True)', 'x.argsort(stable=True)',
                      'm.argsort(x, dim=1, descending=True, stable=True)', 'x.argsort(dim=0, stable=True)',
                      'x[0, 0].sort()', 'x[0, 0].argsort()', 'x[:, :0].sort()')
    check_against_torch(stable, x0, dtypes=(np.float64, np.float32, np.float16))
    check_against_torch(stable, ints, dtypes=(np.int64, np.int32, np.bool_))
    check_against_torch(cases_of(
        'x.topk(2)', 'x.topk(3, dim=1, largest=False)', 'm.topk(x, 0, -1)', 'm.topk(x, k=2, dim=0)',
        'x.topk(4, 2, True, False).values.sort(2).values',   # (unsorted: PyTorch's order is open)
        'x[0, 0, 0].topk(1)', 'x.sort()', 'x.argsort(1, True)'),
        rng('topk').permutation(24).reshape(2, 3, 4) - 10., dtypes=(np.float64, np.float16, np.int64))
    check_against_torch(cases_of('x.topk(3).values'), x0[0])   # NaN the largest (PyTorch's topk: ties in any order)
    out = tl.tensor(x0).sort()
    assert out.values is out[0] and out.indices is out[1] and out.indices.dtype == np.int64
    (got, want), ((x,), (p,)) = run_both(lambda m, x: x.sort(dim=1, descending=True, stable=True).values, x0[1:],
                                         grad=True)
    w = upstream(0, got.shape)
    (got * tl.tensor(w)).sum().backward(), (want * torch.tensor(w)).sum().backward()
    same_as_torch(x.grad, p.grad, 'gradient through ties')
    x, p = tl.tensor(x0), torch.tensor(x0)
    for k in (7, -1):
        raises(RuntimeError, lambda: p.topk(k))
        raises(ValueError, lambda: x.topk(k), f'k {k}', 'size 6')
    raises(RuntimeError, lambda: torch.tensor([True, False]).topk(1))
    raises(TypeError, lambda: tl.tensor([True, False]).topk(1), 'bool')
    raises(TypeError, lambda: x.topk(2.0), 'int')
    raises(IndexError, lambda: x.sort(2), 'dim 2')


def test_gpu_integer_index_out_of_range_raises_as_cpu():
    """An integer array index past an axis's ends (a tensor, a list or a NumPy array; after a slice, an Ellipsis or a
    None) raises the CPU's IndexError on the GPU too, where CuPy would wrap it (x[[3]] of 3 rows: row 0), reading and
    writing (recorded or not), naming the first such index, and the tensor is left as it was; indices in range, or
    arrays that select no element, give the CPU's values."""
    need_cuda()
    x0 = rng('gpu index range').standard_normal((3, 4, 5))
    bad = [lambda d: tl.tensor(np.array([0, 6]), device=d), lambda d: [-6], lambda d: np.array([1, -7, 2, 7])]
    places = [lambda i: (i,), lambda i: (slice(None), i), lambda i: (Ellipsis, i), lambda i: (None, 1, i)]
    for make_index in bad:
        for place in places:
            messages = []
            for d in ('cpu', 'cuda'):
                x = tl.tensor(x0, device=d)
                messages.append(raises(IndexError, lambda: x[place(make_index(d))]))
                for grad in (False, True):
                    y = tl.tensor(x0, device=d, requires_grad=grad) * 1
                    version = y._version[0]
                    messages.append(raises(IndexError, lambda: y.__setitem__(place(make_index(d)), 5.0)))
                    assert np.array_equal(y.numpy(), x0) and y._version[0] == version, f'{d}: changed by a failed write'
            reasons = [m.split(': ')[-1] for m in messages]   # (the index's repr names its device)
            assert reasons[:3] == reasons[3:], f'{place(make_index("cpu"))}: {messages}'
    for index in ((np.array([-3, 2, 0]),), (slice(None), [-4, 3]), (Ellipsis, tl.tensor(np.array([4, -5]))),
                  (np.array([3]), np.array([], np.int64))):   # (no element selected: no index read, as NumPy's)
        on = tuple(tl.tensor(i.numpy(), device='cuda') if isinstance(i, tl.Tensor) else i for i in index)
        assert np.array_equal(tl.tensor(x0, device='cuda')[on].numpy(), tl.tensor(x0)[index].numpy()), index


def test_gpu_index_reduce_ops_match_cpu():
    """On the GPU, the paths the op table's float32 runs leave out: scatter_add of integer and bool tensors (CuPy's
    atomics lack int64: added as uint64), float16 and float64 gather gradients, sorts with ties and NaN (stable, NaN
    last), cumsum and prod of each dtype, as on the CPU."""
    need_cuda()
    i = np.array([4, 1, 4, 4, 0])
    cases = cases_of('x.scatter_add(0, m.tensor(i, device=x.device), s)', 'x.cumsum(0)', 'x.prod()',
                     'x.sort(stable=True)[1]', 'x.scatter(0, m.tensor([1], device=x.device), s[:1])', args='m, x, s, i')
    for dtype in (np.int64, np.int32, np.int16, np.uint8, np.bool_, np.float16, np.float64):
        x, s = np.arange(5).astype(dtype), np.array([3, -2, 1, 5, 7]).astype(dtype)
        for text, f in cases:
            got = f(tl, tl.tensor(x, device='cuda'), tl.tensor(s, device='cuda'), i)
            want = f(tl, tl.tensor(x), tl.tensor(s), i)
            assert got.dtype == want.dtype and np.array_equal(got.numpy(), want.numpy()), (dtype, text, got, want)
    x0 = np.array([[3., 1., 3., np.nan, 1., 2.], [2., 2., 2., 2., 2., 2.]])
    for dtype in (np.float64, np.float32, np.float16):
        for text, f in cases_of('x.sort(1, descending=True)', 'x.sort(0)', '(x.argsort(1),)', 'x.topk(2, 1)'):
            got, want = f(tl, tl.tensor(x0.astype(dtype), device='cuda')), f(tl, tl.tensor(x0.astype(dtype)))
            for a, b in zip(got, want):
                assert np.array_equal(a.numpy(), b.numpy(), equal_nan=True), (np.dtype(dtype), text, a, b)
        for device in ('cuda', 'cpu'):
            x = tl.tensor(x0[:, :3].astype(dtype), device=device, requires_grad=True)
            x.gather(1, tl.tensor([[0, 0, 2], [1, 1, 1]], device=device)).sum().backward()
            assert x.grad.numpy().tolist() == [[2, 0, 1], [0, 3, 0]], (device, x.grad)


# ===== autograd core =====

def test_long_chain_backward_no_recursion():
    x = tl.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    y.sum().backward()
    assert_close(x.grad, np.full(2, 1.0001 ** 10_000), 1e-9, 0)


def test_grads_accumulate_across_backward_calls():
    a = sample(rng('acc'), (3,))
    x = tl.Tensor(a, requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    assert_close(x.grad, 2 * a + 3, 1e-12, 0)


def test_shared_subexpressions():
    a = sample(rng('diamond'), (4,))
    x = tl.Tensor(a, requires_grad=True)
    h = x * 2
    ((h * h + h) * x).sum().backward()  # f = 4x^3 + 2x^2
    assert_close(x.grad, 12 * a ** 2 + 4 * a, 1e-12, 1e-12)


def test_backward_with_explicit_grad_and_one_element():
    a, g = sample(rng('eg'), (2, 3)), sample(rng('eg2'), (2, 3))
    x = tl.Tensor(a, requires_grad=True)
    (x * 2).backward(tl.Tensor(g))
    assert_close(x.grad, 2 * g, 1e-12, 0)
    y = tl.Tensor(a, requires_grad=True)
    (y * y).sum(axis=(0, 1), keepdim=True).backward()  # shape (1, 1): one element, no grad needed
    assert_close(y.grad, 2 * a, 1e-12, 0)


def test_no_grad_records_nothing():
    x = tl.Tensor(sample(rng('ng'), (3,)), requires_grad=True)
    with tl.no_grad():
        y = (x * 2).exp().sum()
    assert not y.requires_grad and y.is_leaf
    raises(RuntimeError, y.backward)
    try:
        with tl.no_grad():
            raise KeyError('inside')
    except KeyError:
        pass
    assert (x * 2).requires_grad, 'grad mode not restored after an exception in no_grad'


def test_no_grad_decorator_recursion_restores_grad_mode():
    """One no_grad instance entered again before it exits (a decorated function calling itself)."""
    @tl.no_grad()
    def depth(n):
        assert not (tl.ones(1, requires_grad=True) * 2).requires_grad
        return 0 if n == 0 else 1 + depth(n - 1)
    assert depth(3) == 3
    assert (tl.ones(1, requires_grad=True) * 2).requires_grad, 'grad mode left off after a recursive no_grad function'


def test_grad_mode_decorators_on_generators():
    """As PyTorch's: a decorated generator function runs in the decorator's mode each time it resumes, while its
    caller keeps its own between the steps; send, throw, close and the return value pass through."""
    x = tl.ones(2, requires_grad=True)
    seen = []

    @tl.no_grad()
    def quiet(n):
        try:
            for _ in range(n):
                try:
                    sent = yield (x * 2).requires_grad
                    seen.append(sent)
                except KeyError:
                    seen.append('caught')
        finally:
            seen.append(('closed', (x * 2).requires_grad))
        return 'done'

    gen = quiet(3)
    assert next(gen) is False and (x * 2).requires_grad, 'mode leaked out of or not into the generator'
    assert gen.send('a') is False and gen.throw(KeyError('k')) is False and seen == ['a', 'caught']
    try:
        next(gen)
        raise AssertionError('the generator did not end')
    except StopIteration as stop:
        assert stop.value == 'done' and seen[-1] == ('closed', False)
    gen = quiet(5)
    next(gen)
    gen.close()
    assert seen[-1] == ('closed', False) and (x * 2).requires_grad

    @tl.enable_grad
    def loud():
        yield (x * 2).requires_grad

    with tl.no_grad():
        assert list(loud()) == [True] and not (x * 2).requires_grad

def test_detach():
    a = sample(rng('det'), (3,))
    x = tl.Tensor(a, requires_grad=True)
    d = (x * 2).detach()
    assert not d.requires_grad and d.is_leaf
    (d * x).sum().backward()
    assert_close(x.grad, 2 * a, 1e-12, 0)


def test_graph_freed_after_backward():
    x = tl.Tensor(sample(rng('free'), (3,)), requires_grad=True)
    y = (x * x).exp().sum()
    y.backward()
    raises(RuntimeError, y.backward)


def test_grads_only_where_needed():
    a, b = sample(rng('need'), (3,)), sample(rng('need2'), (3,))
    x, c = tl.Tensor(a, requires_grad=True), tl.Tensor(b)
    z = x * c
    assert z.requires_grad and not z.is_leaf and c.is_leaf
    (z * c).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')   # (a non-leaf's .grad read warns, as PyTorch's)
        assert c.grad is None and z.grad is None
    assert_close(x.grad, b * b, 1e-12, 0)
    assert not (c * 2).requires_grad and (c * 2).is_leaf


def test_dtype_and_device_moves_keep_autograd_link():
    a, w = sample(rng('move'), (2, 3)), upstream(0, (2, 3))
    x = tl.Tensor(a, requires_grad=True)
    for move in (lambda t: t.to('cpu'), lambda t: t.float(), lambda t: t.to(np.float32).double(), lambda t: t.cpu()):
        x.grad = None
        (move(x) * tl.Tensor(w).to(move(x).dtype)).sum().backward()
        assert x.grad is not None and x.grad.dtype == np.float64
        assert_close(x.grad, w, 1e-6, 1e-6)


def test_leaf_gradient_taken_or_copied():
    """As PyTorch's AccumulateGrad: a gradient nothing else holds becomes the leaf's .grad itself (no copy);
    the caller's gradient, a view, a value a Function keeps, or one array reaching two leaves is copied."""
    class Fresh(tl.Function):   # backward returns a new array, remembered only weakly
        def forward(self, x):
            return x * 2

        def backward(self, g):
            out = g * 2
            Fresh.made = weakref.ref(out)
            return out

    class FreshView(tl.Function):   # backward returns a view of the whole of a new array
        def forward(self, x):
            return x.reshape(-1) * 2

        def backward(self, g):
            out = (g * 2).reshape(self.inputs[0].shape)
            FreshView.made = weakref.ref(out)
            return out

    class Halves(tl.Function):   # backward returns two views of one new array
        def forward(self, x, y):
            return x + 2 * y

        def backward(self, g):
            both = np.stack([g, 2 * g])
            return both[0], both[1]

    class Repeats(tl.Function):   # backward returns a view of a new array that repeats one element
        def forward(self, x):
            return x * 2

        def backward(self, g):
            return np.ndarray(g.shape, g.dtype, np.full(g.size, 2.0), strides=(0, 0))

    class Borrowed(tl.Function):   # backward returns an array on memory that is not an array's
        def forward(self, x):
            return x * 2

        def backward(self, g):
            return np.frombuffer(bytearray((g * 2).tobytes()), g.dtype)   # 1-d: its base is the bytearray

    class Keeps(tl.Function):   # backward returns an array it also keeps
        def forward(self, x):
            self.kept = np.ones_like(x)
            return x.copy()

        def backward(self, g):
            return self.kept

    a, g = sample(rng('steal'), (3, 4)), sample(rng('steal2'), (3, 4))
    x = tl.Tensor(a, requires_grad=True)
    Fresh.apply(x).backward(tl.Tensor(g))
    assert x.grad.data is Fresh.made(), 'a gradient nobody else holds was copied'
    assert_close(x.grad, 2 * g, 1e-12, 0)
    x.grad = None
    FreshView.apply(x).backward(tl.Tensor(g.reshape(-1)))
    assert x.grad.data is FreshView.made(), 'a view of the whole of a new array, nobody else holding either, was copied'
    assert_close(x.grad, 2 * g, 1e-12, 0)
    x.grad = None
    Repeats.apply(x).backward(tl.Tensor(g))
    assert x.grad.data.base is None and x.grad.data.strides == (32, 8), 'a view repeating one element became .grad'
    row = tl.Tensor(a.reshape(-1), requires_grad=True)
    Borrowed.apply(row).backward(tl.Tensor(g.reshape(-1)))
    assert row.grad.data.base is None, 'an array on a bytearray became .grad'
    assert_close(row.grad, 2 * g.reshape(-1), 1e-12, 0)
    column = tl.Tensor(a[:, :1], requires_grad=True)
    (column.sum(axis=1) ** 2).sum().backward()   # Sum's gradient: a read-only broadcast of a fresh array
    column.grad.zero_()
    x.grad, y = None, tl.Tensor(a, requires_grad=True)
    Halves.apply(x, y).backward(tl.Tensor(g))
    assert not np.shares_memory(x.grad.data, y.grad.data), 'two views of one array became two leaves\' .grad'
    assert_close(y.grad, 2 * g, 1e-12, 0)
    x.grad, gt = None, tl.Tensor(g.copy())
    x.backward(gt)   # the caller's array
    x.reshape(12).backward(tl.Tensor(g.reshape(12)))   # a view of the caller's array, added to the first
    assert not np.shares_memory(x.grad.data, gt.data)
    gt.data[...] = 0
    assert_close(x.grad, 2 * g, 1e-12, 0)
    x.grad = y.grad = None
    ((x + y) * 1.0).backward(tl.Tensor(g))   # Add gives both leaves one array
    assert not np.shares_memory(x.grad.data, y.grad.data)
    x.grad = None
    k = Keeps.apply(x)
    ctx = k._ctx
    k.backward(tl.Tensor(g), retain_graph=True)
    assert not np.shares_memory(x.grad.data, ctx.kept), 'a value the Function keeps became .grad'


def test_grad_assignment_checked_as_pytorch():
    """Assigning .grad checks it as PyTorch does: a non-tensor raises TypeError, another shape, dtype (or device)
    RuntimeError, leaving .grad as it was; a good one is kept, and a backward adds to it."""
    need_torch()
    r = rng('grad assignment')
    a, g = sample(r, (2, 3)), sample(r, (2, 3))
    for m in (tl, torch):
        x = m.tensor(a, requires_grad=True)
        x.grad = m.tensor(g.copy())   # (tl.tensor keeps an array's memory, and .grad accumulates in place)
        for bad, exc, needle in ((m.tensor(g[0]), RuntimeError, 'shape' if m is tl else 'size'),
                                 (m.tensor(g.T.copy()), RuntimeError, 'shape' if m is tl else 'size'),
                                 (m.tensor(g.astype(np.float32)), RuntimeError, 'dtype'),
                                 (g.tolist(), TypeError, 'Tensor')):
            raises(exc, lambda: setattr(x, 'grad', bad), needle)
            assert np.array_equal(x.grad.numpy(), g), m.__name__
        (x * x).sum().backward()
        assert_close(x.grad, g + 2 * a, 1e-12, 0, m.__name__)
        x.grad = None
        assert x.grad is None
    y = tl.tensor(a, requires_grad=True) * 2   # a non-leaf takes one too, as in PyTorch
    y.grad = tl.tensor(g)
    assert np.array_equal(y.grad.numpy(), g)


def test_backward_requires_grad():
    raises(RuntimeError, lambda: tl.Tensor(sample(rng('nrg'), (3,))).sum().backward())


# ===== dropout =====

def test_dropout_statistics():
    tl.manual_seed(0)
    y = tl.dropout(tl.ones(20000), p=0.3, training=True).numpy()
    kept = y != 0
    assert abs(1 - kept.mean() - 0.3) < 0.015
    assert_close(y[kept], np.full(kept.sum(), 1 / 0.7), 1e-6, 0)


def test_linear_float16_bias_rounded_once_as_pytorch():
    """float16 linear with a bias adds it to the unrounded float32 product and rounds once, as PyTorch's addmm (rounding
    the product first was off by up to hundreds of ulp where product and bias nearly cancel, at about 30% of these
    outputs): outputs and gradients as PyTorch's on the CPU (float16_as_pytorch), 1-d and 3-d inputs too, and the
    Linear module's; with a 1-d weight, PyTorch's two roundings."""
    need_torch()
    r = rng('linear float16')
    w, b = (r.standard_normal((96, 80)) / 9).astype(np.float16), r.standard_normal(96).astype(np.float16)
    for shape in ((64, 80), (80,), (2, 5, 80)):
        x, g = r.standard_normal(shape).astype(np.float16), r.standard_normal(shape[:-1] + (96,)).astype(np.float16)
        outs = []
        # ours, PyTorch's, the float64 results and the terms' magnitudes (the same products of |x|, |w|, |b| and |g|)
        for m, f, cast in ((tl, tl.linear, np.copy), (torch, F.linear, np.copy), (torch, F.linear, np.float64),
                           (torch, F.linear, lambda a: np.abs(a).astype(np.float64))):
            ts = [m.tensor(cast(a), requires_grad=True) for a in (x, w, b)]
            y = f(*ts)
            y.backward(m.tensor(cast(g)))
            outs.append([y.detach().numpy()] + [t.grad.numpy() for t in ts])
        for k, (ours, theirs, exact, size) in enumerate(zip(*outs)):
            assert ours.dtype == np.float16 and float16_as_pytorch(ours, theirs, exact, size), (shape, k)
    layer = tl.Linear(80, 96).half()
    layer.weight.data[...], layer.bias.data[...] = w, b
    # on the last shape's x: its PyTorch, float64 and magnitude outputs from the loop
    assert float16_as_pytorch(layer(tl.tensor(x)).numpy(), outs[1][0], outs[2][0], outs[3][0])
    # a 1-d weight: x @ weight, then the bias added, each rounded, as PyTorch's (rounded once, a quarter differed);
    # the products' float32 sums are not always PyTorch's, and the weight's gradient, a float16 sum of per-batch
    # products, is not PyTorch's one product: left out
    x, g = r.standard_normal((4, 50, 80)).astype(np.float16), r.standard_normal((4, 50)).astype(np.float16)
    outs = []
    for m, f in ((tl, tl.linear), (torch, F.linear)):
        ts = [m.tensor(a.copy(), requires_grad=True) for a in (x, w[0], b[0])]
        y = f(*ts)
        y.backward(m.tensor(g))
        outs.append([y.detach().numpy(), ts[0].grad.numpy(), ts[2].grad.numpy()])
    for k, (ours, theirs) in enumerate(zip(*outs)):
        assert ours.dtype == np.float16 and (ours != theirs).sum() <= ours.size // 100, ('1-d weight', k)


def test_dropout_scale_as_pytorch():
    """The kept values' scale 1 / (1 - p) bit for bit PyTorch's for p = 0.01 .. 0.99 in float16 (computed in
    float32, rounded once), float32 and float64."""
    need_torch()
    for dtype in (np.float16, np.float32, np.float64):
        for p in np.arange(1, 100) / 100:
            torch.manual_seed(0)
            tl.manual_seed(0)   # (2000 elements: some kept at p = 0.99)
            want = F.dropout(torch.ones(2000, dtype=getattr(torch, np.dtype(dtype).name)), float(p)).max().item()
            got = tl.dropout(tl.ones(2000, dtype=dtype), float(p)).numpy().max()
            assert got == want, (np.dtype(dtype).name, p, got, want)


def test_dropout_float16_p_near_one_as_pytorch():
    """float16 dropout where the scale 1 / (1 - p) overflows float16 (p past about 0.99998): dropped elements are 0,
    as torch's, not NaN (0 times the infinite scale), and so are their gradients."""
    need_torch()
    for p in (0.99999, 0.9999999):
        x = tl.ones(1000, dtype=np.float16, requires_grad=True)
        y = tl.dropout(x, p)
        y.sum().backward()
        want = F.dropout(torch.ones(1000, dtype=torch.float16), p)
        got, grad = y.numpy(), x.grad.numpy()
        assert not np.isnan(got).any() and not np.isnan(grad).any(), p
        assert (got == 0).sum() >= 990 and (want == 0).sum().item() >= 990, p
        assert np.array_equal(got == 0, grad == 0) and set(got[got != 0]) <= {np.inf}, p


def test_dropout_gradient_uses_the_mask():
    a = sample(rng('dg'), (50,))
    x = tl.Tensor(a, requires_grad=True)
    tl.manual_seed(1)
    y = tl.dropout(x, 0.5)
    w = upstream(0, (50,))
    (y * tl.Tensor(w)).sum().backward()
    kept = y.numpy() != 0
    assert 0 < kept.sum() < 50
    assert_close(y.numpy(), np.where(kept, 2 * a, 0), 1e-12, 0)
    assert_close(x.grad, np.where(kept, 2 * w, 0), 1e-12, 0)


def test_grad_dropout_function_and_layer():
    x = tl.Tensor(sample(rng('dropgrad'), (4, 5)), requires_grad=True)
    layer = tl.Dropout(0.3)

    def f():
        tl.manual_seed(3)  # the same mask on every call
        return tl.dropout(x, 0.4) + layer(x)
    gradcheck(f, [x])


def test_dropout_off_is_identity():
    a = sample(rng('doff'), (4, 5)).astype(np.float32)
    assert_close(tl.dropout(tl.Tensor(a), 0.5, training=False), a, 0, 0)
    assert_close(tl.dropout(tl.Tensor(a), 0.0), a, 0, 0)
    m = tl.Dropout(0.5).eval()
    assert_close(m(tl.Tensor(a)), a, 0, 0)
    tl.manual_seed(2)
    assert (m.train()(tl.Tensor(a)).numpy() == 0).any()


def test_manual_seed_takes_pytorchs_range():
    """manual_seed takes what torch.manual_seed takes: negative seeds (-1 is 2**64 - 1), seeds of 32 to 64 bits, and
    what int() takes, each reproducing its draws (32-bit seeds NumPy's own stream); others raise ValueError."""
    need_torch()
    draws = {}
    for seed in (-1, 2 ** 64 - 1, 2 ** 32, 2 ** 63, 7, 1.5):
        torch.manual_seed(seed)   # PyTorch accepts each
        tl.manual_seed(seed)
        first = tl.randn(5).numpy()
        tl.manual_seed(seed)
        assert np.array_equal(first, tl.randn(5).numpy()), f'seed {seed} does not reproduce'
        draws[seed] = first
    assert np.array_equal(draws[-1], draws[2 ** 64 - 1]) and not np.array_equal(draws[2 ** 32], draws[2 ** 63])
    np.random.seed(7)
    assert np.array_equal(draws[7], np.random.standard_normal(5).astype(np.float32)), "a 32-bit seed: NumPy's stream"
    for seed in (2 ** 64, -2 ** 63 - 1):
        raises((ValueError, RuntimeError), lambda: torch.manual_seed(seed))
        raises(ValueError, lambda: tl.manual_seed(seed), 'seed', str(seed))


def test_dropout_reproducible_with_seed():
    a = sample(rng('dseed'), (100,))
    outs = []
    for _ in range(2):
        tl.manual_seed(7)
        outs.append(tl.dropout(tl.Tensor(a), 0.5).numpy())
    assert np.array_equal(*outs)


# ===== layers: PyTorch parameter names, weights copied both ways, outputs and all gradients =====

class Layer:
    """make(nn) builds the layer with nn = tl or torch.nn; inputs(r) the input arrays (float64)."""
    def __init__(self, name, make, inputs, eval_mode=False):
        self.name, self.make, self.inputs, self.eval_mode = name, make, inputs, eval_mode


def shapes_in(*shapes):
    return lambda r: [sample(r, s) for s in shapes]


LAYERS = [
    Layer('linear', lambda nn: nn.Linear(4, 3), shapes_in((2, 4))),
    Layer('linear_nobias_3d', lambda nn: nn.Linear(4, 3, bias=False), shapes_in((2, 5, 4))),
    Layer('conv3x3', lambda nn: nn.Conv2d(2, 3, 3, padding=1), shapes_in((2, 2, 5, 5))),
    Layer('conv2x2_s2_nobias', lambda nn: nn.Conv2d(2, 4, 2, stride=2, bias=False), shapes_in((1, 2, 6, 6))),
    Layer('conv1x1', lambda nn: nn.Conv2d(3, 2, 1), shapes_in((2, 3, 3, 3))),
    Layer('conv_same_even', lambda nn: nn.Conv2d(2, 3, (2, 3), padding='same'), shapes_in((2, 2, 5, 4))),
    Layer('conv_valid', lambda nn: nn.Conv2d(2, 3, 2, stride=(1, 2), padding='valid'), shapes_in((1, 2, 4, 5))),
    Layer('conv_stride_pairs', lambda nn: nn.Conv2d(2, 2, 3, stride=(2, 1), padding=(1, 0)), shapes_in((1, 2, 5, 5))),
    Layer('batchnorm1d', lambda nn: nn.BatchNorm1d(3), shapes_in((6, 3))),
    Layer('batchnorm1d_3d', lambda nn: nn.BatchNorm1d(3, momentum=0.2), shapes_in((4, 3, 2))),
    Layer('batchnorm2d', lambda nn: nn.BatchNorm2d(3, eps=1e-3), shapes_in((4, 3, 2, 2))),
    Layer('batchnorm2d_eval', lambda nn: nn.BatchNorm2d(3), shapes_in((2, 3, 2, 2)), eval_mode=True),
    Layer('batchnorm2d_noaffine', lambda nn: nn.BatchNorm2d(2, affine=False), shapes_in((3, 2, 2, 2))),
    Layer('relu', lambda nn: nn.ReLU(), shapes_in((2, 5))),
    Layer('gelu', lambda nn: nn.GELU(), shapes_in((2, 5))),
    Layer('gelu_tanh', lambda nn: nn.GELU(approximate='tanh'), shapes_in((2, 5))),
    Layer('tanh', lambda nn: nn.Tanh(), shapes_in((2, 5))),
    Layer('sigmoid', lambda nn: nn.Sigmoid(), shapes_in((2, 5))),
    Layer('silu', lambda nn: nn.SiLU(), shapes_in((2, 5))),
    Layer('leakyrelu', lambda nn: nn.LeakyReLU(), shapes_in((2, 5))),
    Layer('leakyrelu_slope', lambda nn: nn.LeakyReLU(0.2), shapes_in((2, 3, 2))),
    Layer('elu', lambda nn: nn.ELU(), shapes_in((2, 5))),
    Layer('elu_alpha', lambda nn: nn.ELU(alpha=0.4), shapes_in((2, 3, 2))),
    Layer('softplus', lambda nn: nn.Softplus(), shapes_in((2, 5))),
    Layer('softplus_beta_threshold', lambda nn: nn.Softplus(2.0, 1.0), shapes_in((3, 4))),   # linear beyond 0.5
    Layer('softmax', lambda nn: nn.Softmax(dim=1), shapes_in((2, 3, 4))),
    Layer('logsoftmax', lambda nn: nn.LogSoftmax(dim=-1), shapes_in((3, 5))),
    Layer('layernorm', lambda nn: nn.LayerNorm(4), shapes_in((3, 4))),
    Layer('layernorm_2d_eps', lambda nn: nn.LayerNorm((3, 4), eps=1e-3), shapes_in((2, 3, 4))),
    Layer('layernorm_noaffine', lambda nn: nn.LayerNorm([2, 3], elementwise_affine=False), shapes_in((4, 2, 3))),
    Layer('layernorm_nobias', lambda nn: nn.LayerNorm(5, bias=False), shapes_in((2, 3, 5))),
    Layer('layernorm_batch1', lambda nn: nn.LayerNorm(6), shapes_in((1, 6))),
    Layer('layernorm_unbatched', lambda nn: nn.LayerNorm(6), shapes_in((6,))),
    Layer('maxpool', lambda nn: nn.MaxPool2d(2), shapes_in((1, 2, 4, 4))),
    Layer('maxpool_stride', lambda nn: nn.MaxPool2d(3, stride=2), shapes_in((1, 1, 7, 7))),
    Layer('avgpool', lambda nn: nn.AvgPool2d(2), shapes_in((1, 2, 4, 4))),
    Layer('conv_maxpool_avgpool_unbatched', lambda nn: nn.Sequential(   # (C, H, W) in and out of each, as PyTorch's
        nn.Conv2d(2, 3, 3, stride=(1, 2), padding=1), nn.MaxPool2d(2, stride=1), nn.AvgPool2d((2, 1))),
          shapes_in((2, 6, 7))),
    Layer('flatten', lambda nn: nn.Flatten(), shapes_in((2, 3, 2, 2))),
    Layer('dropout_eval', lambda nn: nn.Dropout(0.5), shapes_in((3, 4)), eval_mode=True),
    Layer('embedding', lambda nn: nn.Embedding(10, 4), lambda r: [np.array([[1, 7, 1], [3, 1, 9]])]),
    # the loss modules: (input, target); weights as buffers (float32 here, float64 after .double())
    Layer('cross_entropy_loss_weighted', lambda nn: nn.CrossEntropyLoss(loss_weight(nn, CLASS_WEIGHT), ignore_index=1,
                                                                        label_smoothing=0.1),
          lambda r: [sample(r, (5, 4)), TARGET]),
    Layer('nll_loss_weighted_sum', lambda nn: nn.NLLLoss(weight=loss_weight(nn, CLASS_WEIGHT), reduction='sum'),
          lambda r: [sample(r, (2, 4, 3)), np.array([[0, 3, -100], [2, 1, 1]])]),
    Layer('mse_loss', lambda nn: nn.MSELoss(), shapes_in((3, 4), (3, 4))),
    Layer('l1_loss_sum', lambda nn: nn.L1Loss(reduction='sum'), shapes_in((3, 4), (3, 4))),
    Layer('smooth_l1_loss_beta', lambda nn: nn.SmoothL1Loss(beta=0.5), shapes_in((3, 4), (3, 4))),
    Layer('huber_loss_delta_none', lambda nn: nn.HuberLoss('none', 0.5), shapes_in((3, 4), (3, 4))),
    Layer('bce_loss_weighted', lambda nn: nn.BCELoss(loss_weight(nn, CLASS_WEIGHT)),
          lambda r: [r.uniform(0.05, 0.95, (3, 4)), r.uniform(0.05, 0.95, (3, 4))]),
    Layer('bce_with_logits_loss_weights', lambda nn: nn.BCEWithLogitsLoss(loss_weight(nn, CLASS_WEIGHT),
                                                                          pos_weight=loss_weight(nn, POS_WEIGHT)),
          lambda r: [3 * sample(r, (3, 4)), r.uniform(0.05, 0.95, (3, 4))]),
    Layer('kl_div_loss_batchmean', lambda nn: nn.KLDivLoss(reduction='batchmean'),
          lambda r: [sample(r, (3, 4)), r.uniform(0.1, 1.0, (3, 4))]),
    Layer('kl_div_loss_log_target', lambda nn: nn.KLDivLoss(reduction='sum', log_target=True),
          shapes_in((3, 4), (3, 4))),
    Layer('sequential', lambda nn: nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3)), shapes_in((5, 4))),
    Layer('sequential_conv', lambda nn: nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.GELU(),
                                                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8, 2)),
          shapes_in((3, 1, 4, 4))),
    Layer('sequential_layernorm_activations', lambda nn: nn.Sequential(
        nn.Linear(4, 6), nn.LayerNorm(6), nn.SiLU(), nn.Linear(6, 5), nn.LeakyReLU(0.1), nn.Sigmoid(), nn.Linear(5, 5),
        nn.Tanh(), nn.Linear(5, 3), nn.LogSoftmax(dim=1)), shapes_in((3, 4))),
    Layer('grucell', lambda nn: nn.GRUCell(3, 4), shapes_in((2, 3), (2, 4))),
    Layer('grucell_no_h', lambda nn: nn.GRUCell(3, 4), shapes_in((2, 3))),
    Layer('grucell_nobias', lambda nn: nn.GRUCell(3, 4, bias=False), shapes_in((2, 3), (2, 4))),
    Layer('gru', lambda nn: nn.GRU(3, 4), shapes_in((5, 2, 3))),
    Layer('gru_2layers_h0', lambda nn: nn.GRU(3, 4, num_layers=2), shapes_in((3, 2, 3), (2, 2, 4))),
    Layer('gru_batch_first_h0', lambda nn: nn.GRU(3, 4, 2, batch_first=True), shapes_in((2, 3, 3), (2, 2, 4))),
    Layer('gru_nobias', lambda nn: nn.GRU(2, 3, bias=False), shapes_in((4, 1, 2))),
    Layer('gru_bidir', lambda nn: nn.GRU(3, 4, bidirectional=True), shapes_in((5, 2, 3))),
    Layer('gru_bidir_2layers_batch_first_h0', lambda nn: nn.GRU(3, 4, 2, batch_first=True, bidirectional=True),
          shapes_in((2, 3, 3), (4, 2, 4))),
    Layer('gru_bidir_2layers_dropout_eval_nobias', lambda nn: nn.GRU(3, 4, 2, bias=False, dropout=0.5,
                                                                     bidirectional=True), shapes_in((3, 2, 3)),
          eval_mode=True),
]


def loss_weight(nn, weight):
    """A loss module's weight as library nn's float32 tensor."""
    return (tl.tensor if nn is tl else torch.tensor)(weight.astype(np.float32))


def torch_state(tm):
    return {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}


def perturb_torch(tm, r):
    """Move parameters off their defaults and running statistics off 0/1, so every path is exercised."""
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(torch.from_numpy(0.2 * r.standard_normal(tuple(p.shape))).to(p.dtype))
        for n, b in tm.named_buffers():
            if n.endswith('running_mean'):
                b.copy_(torch.from_numpy(0.5 * r.standard_normal(tuple(b.shape))))
            elif n.endswith('running_var'):
                b.copy_(torch.from_numpy(r.uniform(0.5, 2.0, tuple(b.shape))))


def param_shapes(module):
    return [(n, tuple(p.shape)) for n, p in module.named_parameters()]


def check_layer_torch(spec):
    need_torch()
    r = rng(spec.name)
    tl.manual_seed(0)
    torch.manual_seed(0)
    lm, tm = spec.make(tl).double(), spec.make(torch.nn).double()
    assert param_shapes(lm) == param_shapes(tm), f'{param_shapes(lm)} != {param_shapes(tm)}'
    perturb_torch(tm, r)
    lm.load_state_dict(torch_state(tm))
    if spec.eval_mode:
        lm.eval(), tm.eval()
    arrays = spec.inputs(r)
    compare_runs(run_op(tl, lambda m, *xs: lm(*xs), arrays), run_op(TH, lambda m, *xs: tm(*xs), arrays), 1e-9, 1e-10)
    tgrads = {n: p.grad for n, p in tm.named_parameters()}
    for n, p in lm.named_parameters():
        assert p.grad is not None, f'no gradient for {n}'
        assert_close(p.grad, tgrads[n], 1e-9, 1e-10, f'grad of {n}')
    want = torch_state(tm)
    got = lm.state_dict()
    assert sorted(got) == sorted(want), f'state_dict keys {sorted(got)} != {sorted(want)}'
    for k in want:
        assert_close(got[k], want[k], 1e-9, 1e-10, f'state {k} after forward')
    # the other way: a fresh tl layer's weights loaded into torch give torch's output
    fresh, tm2 = spec.make(tl), spec.make(torch.nn)
    tm2.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in fresh.state_dict().items()})
    if spec.eval_mode:
        fresh.eval(), tm2.eval()
    xs = [a.astype(np.float32) if a.dtype.kind == 'f' else a for a in arrays]
    with tl.no_grad(), torch.no_grad():
        got_out, want_out = fresh(*[tl.Tensor(a) for a in xs]), tm2(*[torch.from_numpy(a) for a in xs])
    for g, w in zip(*(o if isinstance(o, tuple) else (o,) for o in (got_out, want_out))):
        assert g.dtype == np.float32
        assert_close(g, w, 1e-4, 1e-5, 'tl weights in torch')


def check_layer_grad(spec):
    r = rng(spec.name)
    tl.manual_seed(0)
    lm = spec.make(tl).double()
    for p in lm.parameters():
        p.data[...] = p.data + 0.2 * r.standard_normal(p.shape)
    if spec.eval_mode:
        lm.eval()
    xs = [tl.Tensor(a, requires_grad=a.dtype.kind == 'f') for a in spec.inputs(r)]
    gradcheck(lambda: lm(*xs), [x for x in xs if x.requires_grad] + list(lm.parameters()))


def check_layer_gpu(spec):
    need_cuda()
    tl.manual_seed(0)
    cpu, gpu = spec.make(tl), spec.make(tl)
    gpu.load_state_dict(cpu.state_dict())
    gpu = gpu.cuda()
    if spec.eval_mode:
        cpu.eval(), gpu.eval()
    arrays = [a.astype(np.float32) if a.dtype.kind == 'f' else a for a in spec.inputs(rng(spec.name))]
    compare_runs(run_op(tl, lambda m, *xs: gpu(*xs), arrays, device='cuda'),
                 run_op(tl, lambda m, *xs: cpu(*xs), arrays), 1e-4, 1e-5)
    gp = dict(gpu.named_parameters())
    for n, p in cpu.named_parameters():
        assert gp[n].device.startswith('cuda')
        assert_close(gp[n].grad, p.grad, 1e-4, 1e-5, f'grad of {n}')
    want = cpu.state_dict()
    for k, v in gpu.state_dict().items():
        assert_close(v, want[k], 1e-4, 1e-5, f'state {k}')


for _l in LAYERS:
    register(f'test_layer_torch_{_l.name}', lambda s=_l: check_layer_torch(s))
    register(f'test_layer_grad_{_l.name}', lambda s=_l: check_layer_grad(s))


def test_batchnorm2d_running_stats_over_steps():
    need_torch()
    tl.manual_seed(0)
    lm, tm = tl.BatchNorm2d(3, momentum=0.3), torch.nn.BatchNorm2d(3, momentum=0.3)
    for step in range(3):
        a = (sample(rng(('bn', step)), (4, 3, 3, 3)) * 2 + step).astype(np.float32)
        lm(tl.Tensor(a)), tm(torch.from_numpy(a))
    want = torch_state(tm)
    for k, v in lm.state_dict().items():
        assert_close(v, want[k], 1e-5, 1e-6, k)
    assert int(np.asarray(lm.state_dict()['num_batches_tracked'])) == 3
    lm.eval(), tm.eval()
    a = sample(rng('bn_eval'), (2, 3, 3, 3)).astype(np.float32)
    assert_close(lm(tl.Tensor(a)), tm(torch.from_numpy(a)), 1e-5, 1e-5, 'eval output')


def test_batchnorm_without_tracked_statistics_as_pytorch():
    """BatchNorm1d/2d(track_running_stats=False) as PyTorch's: None buffers (none in the state dict), the batch's
    statistics in training and in evaluation alike (outputs and float64 gradients), its repr; and a tracking module
    whose track_running_stats is switched off after training reads its running statistics in evaluation, updates
    none in training and counts no batch."""
    need_torch()
    r = rng('bn untracked')
    pairs = ((tl.BatchNorm1d(3, 0.1, None, True, False), torch.nn.BatchNorm1d(3, 0.1, None, True, False), (6, 3)),
             (tl.BatchNorm2d(3, track_running_stats=False), torch.nn.BatchNorm2d(3, track_running_stats=False),
              (4, 3, 2, 2)))
    for ours, theirs, shape in pairs:
        ours, theirs = ours.double(), theirs.double()
        assert (ours.running_mean, ours.running_var, ours.num_batches_tracked) == (None, None, None)
        assert list(ours.state_dict()) == list(theirs.state_dict()) == ['weight', 'bias']
        assert as_torch_prints(ours, theirs) == repr(theirs), (repr(ours), repr(theirs))
        for training in (True, False):
            ours.train(training), theirs.train(training)
            x = sample(r, shape) * 3 + 1
            xs, xt = tl.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
            out, want = ours(xs), theirs(xt)
            assert_close(out, want, 1e-12, 1e-12, f'output, training={training}')
            w = upstream(0, shape)
            (out * tl.Tensor(w)).sum().backward(), (want * torch.tensor(w)).sum().backward()
            assert_close(xs.grad, xt.grad, 1e-12, 1e-12, f'dx, training={training}')
    ours, theirs = tl.BatchNorm1d(3).double(), torch.nn.BatchNorm1d(3).double()
    x = sample(r, (5, 3))
    ours(tl.Tensor(x)), theirs(torch.tensor(x))
    ours.track_running_stats = theirs.track_running_stats = False
    x = sample(r, (5, 3))
    assert_close(ours(tl.Tensor(x)), theirs(torch.tensor(x)), 1e-12, 1e-12, 'training, not tracking')
    want = torch_state(theirs)
    for k, v in ours.state_dict().items():
        assert_close(v, want[k], 1e-12, 1e-12, k)
    assert int(ours.num_batches_tracked.item()) == 1
    ours.eval(), theirs.eval()
    assert_close(ours(tl.Tensor(x)), theirs(torch.tensor(x)), 1e-12, 1e-12, 'evaluation on the running statistics')


def test_batchnorm_failed_forward_counts_no_batch():
    """A rejected input (a wrong shape, one value a channel, an eps PyTorch refuses: not positive in training, negative
    in evaluation) changes no buffer, so momentum=None (the cumulative average) stays right; PyTorch itself counts the
    failed call, so it is compared with a module that never saw one."""
    need_torch()
    lm, tm = tl.BatchNorm1d(3, momentum=None), torch.nn.BatchNorm1d(3, momentum=None)
    before = lm.state_dict()
    for bad in ((4, 5), (1, 3)):
        raises(ValueError, lambda: lm(tl.Tensor(np.ones(bad, np.float32))))
    x = sample(rng('bn eps'), (4, 3)).astype(np.float32)
    for training, eps, words in ((True, 0.0, 'positive'), (True, -1e-5, 'positive'), (False, -1e-5, 'non-negative')):
        raises(ValueError, lambda: F.batch_norm(torch.tensor(x), torch.zeros(3), torch.ones(3), training=training,
                                                eps=eps))
        raises(ValueError, lambda: tl.batch_norm(tl.tensor(x), lm.running_mean, lm.running_var, training=training,
                                                 eps=eps), 'eps', words, str(eps))
    assert tl.batch_norm(tl.tensor(x), lm.running_mean, lm.running_var, eps=0.0).shape == (4, 3)   # evaluation: 0
    stats = tl.zeros(3, dtype=np.int64), tl.ones(3, dtype=np.int64)   # integer statistics: refused, not truncated
    raises(RuntimeError, lambda: F.batch_norm(torch.tensor(x), torch.zeros(3, dtype=torch.int64),
                                              torch.ones(3, dtype=torch.int64), training=True))
    raises(TypeError, lambda: tl.batch_norm(tl.tensor(x), *stats, training=True), 'running_mean', 'int64')
    assert stats[0].tolist() == [0, 0, 0] and stats[1].tolist() == [1, 1, 1]
    for k, v in lm.state_dict().items():
        assert np.array_equal(v, before[k]), f'{k} changed by a failed forward'
    a = (sample(rng('bn_none'), (6, 3)) + [1, 2, 3]).astype(np.float32)
    lm(tl.Tensor(a)), tm(torch.from_numpy(a))
    want = torch_state(tm)
    for k, v in lm.state_dict().items():
        assert_close(v, want[k], 1e-6, 1e-6, k)


def test_batch_norm_function_updates_running_stats():
    need_torch()
    rm_l, rv_l = tl.Tensor(RUN_MEAN.astype(np.float32)), tl.Tensor(RUN_VAR.astype(np.float32))
    rm_t, rv_t = torch.tensor(RUN_MEAN, dtype=torch.float32), torch.tensor(RUN_VAR, dtype=torch.float32)
    for step in range(3):
        a = sample(rng(('bnf', step)), (5, 3, 2)).astype(np.float32)
        y = tl.batch_norm(tl.Tensor(a), rm_l, rv_l, training=True, momentum=0.2)
        want = F.batch_norm(torch.from_numpy(a), rm_t, rv_t, training=True, momentum=0.2)
        assert_close(y, want, 1e-5, 1e-5, 'output')
    assert_close(rm_l, rm_t, 1e-6, 1e-6, 'running_mean')
    assert_close(rv_l, rv_t, 1e-6, 1e-6, 'running_var (unbiased batch variance)')


def test_batch_norm_parameter_dtypes_and_arguments_as_pytorch():
    """batch_norm takes weight and bias of one dtype, x's or float32 for a float16 x, as PyTorch (it refuses the
    rest; an integer or bool weight was used as it was), and floating-point running statistics of any precision
    (PyTorch's must be the parameters' dtype; the GPU tests' stats_dtype family checks them); it refuses running
    statistics that require grad while grad mode records (PyTorch: not differentiable with respect to them), and a
    momentum that is not a number; the statistics unchanged by every refusal."""
    need_torch()
    r = rng('bn dtypes')
    x = r.standard_normal((6, 3))
    mean, var, w, b = r.standard_normal(3), r.uniform(0.5, 2, 3), r.standard_normal(3), r.standard_normal(3)
    names = ('float16', 'float32', 'float64', 'int64')
    for xd, sd, wd in itertools.product(names[:3], names, names):
        args = lambda lib, make: (make(x, xd), make(mean, sd), make(var, sd), make(w, wd), make(b, wd))
        ours = args(tl, lambda a, d: tl.tensor(a.astype(d)))
        theirs = args(torch, lambda a, d: torch.tensor(a.astype(d)))
        what = f'x {xd}, statistics {sd}, weight and bias {wd}'
        if sd == 'int64':
            raises(TypeError, lambda: tl.batch_norm(*ours[:3], *ours[3:], training=True), 'int64')
            continue
        if sd != wd and wd in names[:3]:   # statistics of another precision than PyTorch takes: in PyTorch's dtype
            theirs = theirs[:1] + tuple(t.to(theirs[3].dtype) for t in theirs[1:3]) + theirs[3:]
        try:
            want = F.batch_norm(*theirs[:3], *theirs[3:], training=True)
        except RuntimeError:
            raises(TypeError, lambda: tl.batch_norm(*ours[:3], *ours[3:], training=True), xd, wd, 'weight and bias')
            assert np.array_equal(ours[1].numpy(), mean.astype(sd)) and np.array_equal(ours[2].numpy(), var.astype(sd))
            continue
        y = tl.batch_norm(*ours[:3], *ours[3:], training=True)
        assert same_dtype(y, want), what
        tol = 1e-2 if 'float16' in (xd, sd) else 1e-5
        for got, ref, name in ((y, want, 'output'), (ours[1], theirs[1], 'running_mean'),
                               (ours[2], theirs[2], 'running_var')):
            assert_close(got, ref.numpy(), tol, tol, f'{what}: {name}')
    stats = [tl.tensor(mean.astype(np.float32), requires_grad=True), tl.tensor(var.astype(np.float32))]
    xt = tl.tensor(x.astype(np.float32))
    for training in (True, False):
        raises(RuntimeError, lambda: tl.batch_norm(xt, *stats, training=training), 'running_mean', 'requires grad')
        raises(RuntimeError, lambda: F.batch_norm(torch.tensor(x.astype(np.float32)), torch.zeros(3, requires_grad=True),
                                                  torch.ones(3), training=training), 'running_mean')
    with tl.no_grad():
        tl.batch_norm(xt, *stats, training=True)   # as PyTorch's under no_grad: updated
    assert not np.array_equal(stats[0].numpy(), mean.astype(np.float32))
    stats = [tl.tensor(mean.astype(np.float32)), tl.tensor(var.astype(np.float32))]
    for momentum in (None, 'a'):
        raises(TypeError, lambda: tl.batch_norm(xt, *stats, training=True, momentum=momentum), 'momentum')
        raises(TypeError, lambda: F.batch_norm(torch.tensor(x), torch.zeros(3, dtype=torch.float64),
                                               torch.ones(3, dtype=torch.float64), training=True, momentum=momentum))
    assert np.array_equal(stats[0].numpy(), mean.astype(np.float32))
    bn = tl.BatchNorm1d(3, momentum=None).eval()   # evaluation with a cumulative average: momentum unused
    assert_close(bn(xt), torch.nn.BatchNorm1d(3, momentum=None).eval()(torch.tensor(x.astype(np.float32))).detach(),
                 1e-6, 1e-6)


def test_batch_norm_empty_input_as_pytorch():
    """batch_norm of no values, training or not: as PyTorch, an empty output of x's shape and dtype, the running
    statistics unchanged, an empty dx and zero gradients for weight and bias, with each activation; no channels
    (C = 0) too (it failed in NumPy's reshape, refused training, or divided by zero). BatchNorm1d/2d count such a
    training batch in num_batches_tracked as PyTorch does. One value per channel (N * H * W = 1) still raises in
    training, as PyTorch's, leaving the statistics as they were."""
    need_torch()
    r = rng('bn_empty')
    for shape in [(0, 3), (0, 3, 2, 2), (2, 3, 0), (2, 0), (0, 0), (2, 0, 2, 2)]:
        c = shape[1]
        for training, act, dtype in ((False, None, np.float32), (True, None, np.float32), (True, 'relu', np.float16),
                                     (False, 'gelu', np.float64)):
            what = f'{shape} training={training} act={act} {np.dtype(dtype).name}'
            w, b, rm, rv = r.standard_normal(c), r.standard_normal(c), r.standard_normal(c), r.uniform(0.5, 2, c)
            x = tl.Tensor(np.zeros(shape, dtype), requires_grad=True)
            pd = np.float64 if dtype == np.float64 else np.float32   # the parameters' and statistics' dtype
            ours = [tl.Tensor(a.astype(pd), requires_grad=True) for a in (w, b)]
            stats = [tl.Tensor(a.astype(pd)) for a in (rm, rv)]
            y = tl.batch_norm(x, *stats, *ours, training=training, activation=act)
            y.backward(tl.Tensor(np.zeros(shape, dtype)))
            xt = torch.zeros(shape, dtype=getattr(torch, np.dtype(dtype).name), requires_grad=True)
            theirs = [torch.tensor(a, dtype=getattr(torch, np.dtype(pd).name), requires_grad=True) for a in (w, b)]
            tstats = [torch.tensor(a, dtype=getattr(torch, np.dtype(pd).name)) for a in (rm, rv)]
            # PyTorch raises IndexError (an internal select) for weights of no channels: C = 0 is compared without
            want = F.batch_norm(xt, *tstats, *(theirs if c else (None, None)), training=training)
            want.backward(torch.zeros(shape, dtype=want.dtype))
            assert y.shape == tuple(want.shape) and same_dtype(y, want), f'{what}: output {y.shape} {y.dtype}'
            assert x.grad.shape == x.shape and x.grad.dtype == x.dtype, f'{what}: dx {x.grad.shape} {x.grad.dtype}'
            wanted = tstats + [p.grad if c else torch.zeros(0, dtype=p.dtype) for p in theirs]
            for got, tt, name in zip(stats + [p.grad for p in ours], wanted, ('running_mean', 'running_var', 'dweight',
                                                                           'dbias')):
                assert same_dtype(got, tt) and np.array_equal(got.numpy(), tt.numpy()), f'{what}: {name}'
    for cls, shape in ((tl.BatchNorm1d, (0, 3)), (tl.BatchNorm2d, (0, 3, 4, 4))):
        ours, theirs = cls(3), getattr(torch.nn, cls.__name__)(3)
        for training in (True, False):
            ours.train(training), theirs.train(training)
            y, want = ours(tl.Tensor(np.zeros(shape, np.float32))), theirs(torch.zeros(shape))
            assert y.shape == tuple(want.shape), f'{cls.__name__} training={training}: {y.shape}'
            for k, v in ours.state_dict().items():
                assert np.array_equal(v, theirs.state_dict()[k].numpy()), f'{cls.__name__} training={training}: {k}'
        assert int(ours.num_batches_tracked.item()) == 1, cls.__name__
    for shape in [(1, 3), (1, 3, 1), (1, 0)]:
        stats = [tl.Tensor(a[:shape[1]].astype(np.float32)) for a in (RUN_MEAN, RUN_VAR)]
        raises(ValueError, lambda: tl.batch_norm(tl.zeros(*shape), *stats, training=True), 'more than one value')
        raises(ValueError, lambda: F.batch_norm(torch.zeros(shape), None, None, training=True), 'more than 1 value')
        for t, a in zip(stats, (RUN_MEAN, RUN_VAR)):
            assert np.array_equal(t.numpy(), a[:shape[1]].astype(np.float32)), f'{shape}: statistics changed'


def test_channels_last_by_strides():
    """_channels_last reads the layout from shape and strides as NumPy's flags would from a transposed view (axes of
    length 1 count for nothing), and BatchNorm's _bn_layout calls channels-last only memory that is not also NCHW."""
    r = rng('channels_last')
    for shape in [(2, 3, 4, 5), (1, 3, 4, 5), (2, 1, 4, 5), (2, 3, 1, 1), (1, 1, 1, 1), (2, 3, 1, 5), (3, 4, 2, 1)]:
        nchw = r.standard_normal(shape).astype(np.float32)
        nhwc = np.ascontiguousarray(nchw.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        stepped = np.ascontiguousarray(np.repeat(nchw, 2, axis=3))[..., ::2]
        permuted = np.ascontiguousarray(nchw.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)   # (N, W, C, H) memory
        for name, a in (('nchw', nchw), ('nhwc', nhwc), ('stepped', stepped), ('permuted', permuted)):
            want = a.transpose(0, 2, 3, 1).flags.c_contiguous
            assert tl._channels_last(a) == want, (shape, name)
            rows, channels_last = tl._bn_layout(a.shape, a.strides, a.itemsize)
            assert channels_last == (want and not a.flags.c_contiguous), (shape, name)
            n, c = shape[:2]
            assert rows == ((n * shape[2] * shape[3], c, 1) if channels_last else (n, c, shape[2] * shape[3])), (shape, name)
    assert not tl._channels_last(np.zeros((2, 3, 4)))


def test_batch_norm_cpu_blocks():
    """The CPU BatchNorm runs in blocks of images on several threads (_bn_blocks): blocks of 3, 3 and 1 images (the
    blocks' moments merged, on data with a mean 50 times its spread) give the one-block results, and PyTorch's in
    float64, for the output, the running statistics and every gradient: training with each activation, float16,
    channels-last x (whose layout the output and dx keep) and evaluation."""
    need_torch()
    r = rng('bn_blocks')
    x = 50 + r.standard_normal((7, 5, 6, 4))
    g, w, b = r.standard_normal(x.shape), r.uniform(0.5, 1.5, 5), r.standard_normal(5)
    running = r.uniform(40, 60, 5), r.uniform(0.5, 2, 5)

    def run(xs, dtype, act, training, block_bytes):
        saved, tl._BN_CPU_BLOCK_BYTES = tl._BN_CPU_BLOCK_BYTES, block_bytes
        try:
            ts = [tl.Tensor(xs.astype(dtype), requires_grad=True)] + [tl.Tensor(a.astype(np.float32), requires_grad=True) for a in (w, b)]
            rm, rv = (tl.Tensor(a.astype(np.float32)) for a in running)
            y = tl.batch_norm(ts[0], rm, rv, ts[1], ts[2], training=training, activation=act)
            y.backward(tl.Tensor(g.astype(dtype)))
            if xs.flags.c_contiguous is False:
                assert tl._channels_last(y.data) and tl._channels_last(ts[0].grad.data), 'y and dx keep the layout of x'
            return [y.numpy(), rm.numpy(), rv.numpy()] + [t.grad.numpy() for t in ts]
        finally:
            tl._BN_CPU_BLOCK_BYTES = saved
    names = ('output', 'running_mean', 'running_var', 'dx', 'dweight', 'dbias')
    channels_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for xs, dtype, act, training in ((x, np.float32, None, True), (x, np.float32, 'gelu', True),
                                     (channels_last, np.float32, 'relu', True), (x, np.float16, None, True),
                                     (x, np.float32, 'relu', False)):
        what = f'{np.dtype(dtype).name}, activation {act}, {"training" if training else "eval"}'
        blocks, whole = (run(xs, dtype, act, training, size) for size in (3 * 5 * 6 * 4 * 4, 1 << 30))
        ts = [torch.tensor(a.astype(dtype).astype(np.float64), requires_grad=True) for a in (x, w.astype(np.float32), b.astype(np.float32))]
        rm, rv = (torch.tensor(a.astype(np.float32).astype(np.float64)) for a in running)
        y = F.batch_norm(ts[0], rm, rv, ts[1], ts[2], training=training)
        y = {None: y, 'gelu': F.gelu(y), 'relu': F.relu(y)}[act]
        y.backward(torch.tensor(g.astype(dtype).astype(np.float64)))
        want = [y.detach().numpy(), rm.numpy(), rv.numpy()] + [t.grad.numpy() for t in ts]
        tol = 1e-2 if dtype == np.float16 else 1e-4
        for name, got, one, ref in zip(names, blocks, whole, want):
            assert_close(got, one, tol, tol * np.abs(ref).max(), f'{name}, {what}: 3 blocks vs 1')
            assert_close(got, ref, tol, tol * np.abs(ref).max(), f'{name}, {what}: vs PyTorch in float64')


def test_layer_norm_module_as_pytorch():
    """LayerNorm as torch.nn's: the constructor's argument names, reprs (normalized_shape a tuple from an int or a
    list), settings, parameter names, shapes, dtypes and initial values (weight ones, bias zeros) and state_dict keys;
    LayerNorm(()) builds, as PyTorch's (its forward refuses)."""
    need_torch()
    def build(nn):
        return nn.Sequential(
            nn.LayerNorm(4), nn.LayerNorm((3, 4), eps=1e-3), nn.LayerNorm([2, 3], elementwise_affine=False),
            nn.LayerNorm(5, bias=False), nn.LayerNorm(6, 0.5, False, False), nn.LayerNorm(()))
    ours, theirs = build(tl), build(torch.nn)
    assert as_torch_prints(ours, theirs) == repr(theirs), f'{ours}\n-- PyTorch --\n{theirs}'
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (n, p), (n_t, p_t) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        assert n == n_t and isinstance(p, tl.Parameter) and p.requires_grad and same_dtype(p, p_t), n
        assert_close(p, p_t, 0, 0, n)
    for a, b in zip(ours, theirs, strict=True):
        for setting in ('normalized_shape', 'eps', 'elementwise_affine'):
            assert getattr(a, setting) == getattr(b, setting), (a, setting)
    names = lambda cls: list(inspect.signature(cls).parameters)   # (device and dtype too)
    assert names(tl.LayerNorm) == names(torch.nn.LayerNorm)
    assert not hasattr(tl.Tensor, 'layer_norm') and not hasattr(torch.Tensor, 'layer_norm')


def check_layer_norm_float16(device):
    """float16 layer_norm on `device` computes in float32 and rounds once, as PyTorch's: outputs within one float16
    step of PyTorch's float16 ones, or nearer the exact ones (near 0, where float32's rounding is more than a step);
    gradients close to PyTorch's and within 2^-10 of the largest exact one (PyTorch's CPU float16 backward rounds
    more: its dweight errs up to 2^-8). Rows of values about 300 (whose squares overflow float16), of 2048 elements,
    and a float32 weight and bias with float16 x (PyTorch's mixed case)."""
    need_torch()
    r = rng('layer_norm float16')
    for shape, normalized, affine in [((4, 6), (6,), np.float16), ((2, 3, 2048), (2048,), np.float32),
                                      ((3, 2, 5), (2, 5), np.float16), ((2, 64), (64,), None),
                                      ((1, 8), (8,), np.float16)]:
        x = (300 + 50 * r.standard_normal(shape)).astype(np.float16)
        arrays = [x] + ([r.standard_normal(normalized).astype(affine) for _ in range(2)] if affine else [])
        f = lambda m, x, *wb: m.layer_norm(x, normalized, *wb)
        (outs, grads), (outs_t, grads_t) = run_op(tl, f, arrays, device), run_op(TH, f, arrays)
        exact = run_op(TH, f, [a.astype(np.float64) for a in arrays])
        assert float16_as_pytorch(outs[0], outs_t[0], exact[0][0]), f'{shape}: output'
        for k, (a, b, c) in enumerate(zip(outs + grads, outs_t + grads_t, exact[0] + exact[1])):
            assert a.dtype == b.dtype, f'{shape}: result {k} is {a.dtype}, PyTorch gives {b.dtype}'
            assert_close(a, b, *DTYPE_TOL[np.float16], f'{shape}: result {k} against PyTorch in float16')
            assert np.abs(a - c).max() <= 2 ** -10 * np.abs(c).max(), f'{shape}: result {k} against float64'


def test_layer_norm_float16_as_pytorch():
    check_layer_norm_float16(None)


def test_gpu_layer_norm_float16_as_pytorch():
    need_cuda()
    check_layer_norm_float16('cuda')


def test_layer_norm_keeps_its_input_alone():
    """For its backward LayerNorm keeps x itself (float16 too: no float32 copy), the weight and a mean and 1/std per
    row, no other array (a composition of ops kept four more arrays of x's size, six float32 ones for float16 x)."""
    for dtype in (np.float32, np.float16):
        x = tl.tensor(sample(rng('layer_norm keeps'), (16, 32)).astype(dtype), requires_grad=True)
        ln = tl.LayerNorm(32).to(dtype)
        y = ln(x)
        kept = [v for v in vars(y._ctx).values() if isinstance(v, np.ndarray)]
        assert kept[0] is x.data and kept[1] is ln.weight.data, [v.shape for v in kept]
        assert [v.shape for v in kept[2:]] == [(16, 1), (16, 1)], [v.shape for v in kept]


def test_layer_norm_edges_as_pytorch():
    """As PyTorch: a normalized_shape of one element gives the bias (x-hat 0) and a zero gradient of x and weight (exact
    here; PyTorch's float64 within 1e-12); empty inputs give empty outputs and zero (or empty) gradients; gradients
    only for the tensors that ask (x without, weight with: weight's and bias's alone)."""
    need_torch()
    r = rng('layer_norm edges')
    arrays = [sample(r, (3, 1)), sample(r, (1,)), sample(r, (1,))]
    f = lambda m, x, w, b: m.layer_norm(x, (1,), w, b)
    (outs, grads), want = run_op(tl, f, arrays), run_op(TH, f, arrays)
    compare_runs((outs, grads), want, 1e-12, 1e-12)
    assert (outs[0] == arrays[2]).all() and not grads[0].any() and not grads[1].any()
    for shape, normalized in (((0, 3), (3,)), ((2, 0), (0,)), ((0, 2, 3), (2, 3))):
        arrays = [np.zeros(shape), np.ones(normalized), np.zeros(normalized)]
        f = lambda m, x, w, b: m.layer_norm(x, normalized, w, b)
        compare_runs(run_op(tl, f, arrays), run_op(TH, f, arrays), 0, 0)
    ours, theirs = tl.LayerNorm(4).double(), torch.nn.LayerNorm(4).double()
    perturb_torch(theirs, r)
    ours.load_state_dict(theirs.state_dict())
    x = sample(r, (2, 3, 4))
    w = upstream(0, x.shape)
    (ours(tl.tensor(x)) * tl.tensor(w)).sum().backward()
    (theirs(torch.tensor(x)) * torch.tensor(w)).sum().backward()
    for (n, p), p_t in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert_close(p.grad, p_t.grad, 1e-12, 1e-12, n)


def test_error_arrays_and_lists_for_tensors_named():
    """A NumPy array or a list where a function or layer takes a tensor: a TypeError naming the op and what it got
    (not an AttributeError from inside), as PyTorch's functions refuse them."""
    a, x = np.ones((2, 3), np.float32), tl.ones(2, 3)
    calls = [('linear', lambda: tl.linear(a, tl.ones(4, 3))), ('linear', lambda: tl.Linear(3, 4)(a)),
             ('conv2d', lambda: tl.Conv2d(3, 4, 1)(np.ones((1, 3, 2, 2), np.float32))),
             ('mm', lambda: x.mm(a)), ('mv', lambda: x.mv(a[0])),
             ('batch_norm', lambda: tl.BatchNorm1d(3)(a)),
             ('cross_entropy', lambda: tl.cross_entropy(a, tl.tensor([0, 1]))),
             ('softmax', lambda: tl.softmax(a, 1)), ('mse_loss', lambda: tl.mse_loss(a, x)),
             ('cosine_similarity', lambda: tl.cosine_similarity(a, x)),
             ('GRULayer', lambda: tl.GRU(3, 4)(np.ones((2, 1, 3), np.float32)))]
    for name, call in calls:
        raises(TypeError, call, name, 'tensor', 'ndarray')
    for name, call in (('layer_norm', lambda: tl.LayerNorm(3)([1.0, 2.0, 3.0])),
                       ('one_hot', lambda: tl.one_hot([0, 1])), ('relu', lambda: tl.relu([1.0, 2.0]))):
        raises(TypeError, call, name, 'tensor', 'list')
    if torch is not None:
        raises(TypeError, lambda: F.linear(a, torch.ones(4, 3)))
        raises(TypeError, lambda: torch.relu([1.0, 2.0]))


def test_error_layer_norm_as_pytorch():
    """Input PyTorch refuses: a ValueError naming both shapes where normalized_shape is not the input's last dimensions
    (layer_norm and LayerNorm) or a weight or bias has another shape, and for an empty normalized_shape; a TypeError
    for a normalized_shape of floats, for an integer or bool input (naming the dtype) and for a weight of another
    dtype than the input's (but float32 with float16 x, which PyTorch takes)."""
    need_torch()
    a = sample(rng('layer_norm errors'), (2, 3))
    x, x_t = tl.tensor(a), torch.tensor(a)
    for normalized, w in (((4,), None), ((2, 3, 1), None), ((3,), np.ones(4)), ((2, 3), np.ones((3, 2)))):
        raises(RuntimeError, lambda: F.layer_norm(x_t, normalized, None if w is None else torch.tensor(w)))
        msg = raises(ValueError, lambda: tl.layer_norm(x, normalized, None if w is None else tl.tensor(w)))
        assert_names_shapes(msg, normalized, x.shape if w is None else w.shape)
    msg = raises(ValueError, lambda: tl.layer_norm(x, (3,), bias=tl.ones(2, dtype=x.dtype)), 'bias')
    assert_names_shapes(msg, (2,), (3,))
    raises(RuntimeError, lambda: torch.nn.LayerNorm(4)(x_t))
    assert_names_shapes(raises(ValueError, lambda: tl.LayerNorm(4)(x)), (4,), (2, 3))
    raises(RuntimeError, lambda: F.layer_norm(x_t, ()), 'normalized_shape')
    raises(ValueError, lambda: tl.layer_norm(x, ()), 'normalized_shape')
    raises(ValueError, lambda: tl.LayerNorm(())(x), 'normalized_shape')
    raises(TypeError, lambda: F.layer_norm(x_t, (3.0,)))
    raises(TypeError, lambda: tl.layer_norm(x, (3.0,)), 'normalized_shape', '3.0')
    raises(TypeError, lambda: tl.LayerNorm(2.5), 'normalized_shape', '2.5')
    raises(RuntimeError, lambda: F.layer_norm(x_t.float(), (3,), torch.ones(3, dtype=torch.float64)))
    raises(TypeError, lambda: tl.layer_norm(x.float(), (3,), tl.ones(3, dtype=tl.float64)), 'float64', 'float32')
    raises(TypeError, lambda: tl.layer_norm(x.half(), (3,), None, tl.ones(3, dtype=tl.float64)), 'float64', 'float16')
    ints = np.arange(6).reshape(2, 3)
    raises((RuntimeError, NotImplementedError), lambda: F.layer_norm(torch.tensor(ints), (3,)))
    raises(TypeError, lambda: tl.layer_norm(tl.tensor(ints), (3,)), 'layer_norm', 'int64')
    raises(TypeError, lambda: tl.layer_norm(tl.tensor(ints > 2), (3,)), 'layer_norm', 'bool')


def test_activation_modules_as_pytorch():
    """Tanh, Sigmoid, SiLU, LeakyReLU, Softmax and LogSoftmax as torch.nn's: the constructors' argument names, reprs,
    settings, no parameters nor state; a LogSoftmax is no Softmax; silu and leaky_relu are functions alone (PyTorch
    has no such Tensor methods)."""
    need_torch()
    def build(nn):
        return nn.Sequential(nn.Tanh(), nn.Sigmoid(), nn.SiLU(), nn.LeakyReLU(), nn.LeakyReLU(0.2),
                             nn.LeakyReLU(negative_slope=-1), nn.Softmax(), nn.Softmax(dim=1), nn.LogSoftmax(),
                             nn.LogSoftmax(-1))
    ours, theirs = build(tl), build(torch.nn)
    assert repr(ours) == repr(theirs), f'{ours}\n-- PyTorch --\n{theirs}'
    assert not list(ours.parameters()) and ours.state_dict() == {} and not theirs.state_dict()
    for a, b in zip(ours, theirs, strict=True):
        for setting in ('negative_slope', 'dim'):
            assert getattr(a, setting, None) == getattr(b, setting, None), (a, setting)
    for name in ('LeakyReLU', 'Softmax', 'LogSoftmax', 'ReLU', 'SiLU', 'ELU', 'Dropout'):
        names = lambda cls: list(inspect.signature(cls).parameters)
        assert names(getattr(tl, name)) == names(getattr(torch.nn, name)), name
    assert not isinstance(tl.LogSoftmax(), tl.Softmax) and not isinstance(torch.nn.LogSoftmax(), torch.nn.Softmax)
    assert not any(hasattr(t, f) for t in (tl.Tensor, torch.Tensor) for f in ('silu', 'leaky_relu'))


def test_inplace_activations_and_dropout_as_pytorch():
    """ReLU, SiLU, LeakyReLU and ELU with inplace=True, Dropout(inplace=True), tl.dropout(inplace=True) and relu_() as
    PyTorch's: the input itself returned with the values written into it, their reprs, and float64 gradients through
    the in-place op on a non-leaf; on a leaf that requires grad a RuntimeError that changes nothing. Dropout in place
    drops what it drops out of place, from the same seed."""
    need_torch()
    r = rng('inplace activations')
    for name, args in (('ReLU', ()), ('SiLU', ()), ('LeakyReLU', (0.2,)), ('ELU', (0.7,))):
        ours, theirs = getattr(tl, name)(*args, inplace=True), getattr(torch.nn, name)(*args, inplace=True)
        assert repr(ours) == repr(theirs), (repr(ours), repr(theirs))
        x, w = sample(r, (4, 5)), upstream(0, (4, 5))
        xs, xt = tl.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        hs, ht = xs * 2, xt * 2
        out, want = ours(hs), theirs(ht)
        assert out is hs and want is ht
        assert_close(hs, ht, 1e-12, 1e-12, f'{name} values')
        (out * tl.Tensor(w)).sum().backward(), (want * torch.tensor(w)).sum().backward()
        assert_close(xs.grad, xt.grad, 1e-12, 1e-12, f'{name} gradient')
        raises(RuntimeError, lambda: theirs(torch.tensor(x, requires_grad=True)), 'leaf')
        raises(RuntimeError, lambda: ours(xs), 'leaf')
        assert np.array_equal(xs.numpy(), x)
    x = tl.Tensor(sample(r, (6, 7)))
    assert x.relu_() is x and np.array_equal(x.numpy(), np.maximum(x.numpy(), 0))
    x = sample(r, (6, 7))
    tl.manual_seed(3)
    want = tl.dropout(tl.Tensor(x), 0.4).numpy()
    for drop in (lambda t: tl.dropout(t, 0.4, inplace=True), tl.Dropout(0.4, inplace=True)):
        tl.manual_seed(3)
        t = tl.Tensor(x.copy())
        assert drop(t) is t and np.array_equal(t.numpy(), want)
    assert repr(tl.Dropout(0.4, inplace=True)) == repr(torch.nn.Dropout(0.4, inplace=True))


def test_activations_at_zero_and_specials_as_pytorch():
    """leaky_relu (slopes 0.01, 0.2, 0, -0.5, 1.5) and silu at 0, -0, +-1e-30, +-1e-3, +-30, +-inf and NaN, in
    float64, float32 and float16, against PyTorch in the same dtype: values and gradients, NaN where PyTorch's;
    leaky_relu's gradient at 0 is the slope (x > 0 takes the identity), and its values are PyTorch's exactly. Integer
    and bool input raise TypeError naming the dtype (PyTorch raises too)."""
    need_torch()
    x0 = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-3, -1e-3, 30.0, -30.0, np.inf, -np.inf, np.nan])
    tols = {np.float64: (1e-12, 1e-14), np.float32: (1e-6, 1e-7), np.float16: (2e-3, 1e-4)}   # silu's
    for dtype, tol in tols.items():
        for name, args in [('leaky_relu', (s,)) for s in (0.01, 0.2, 0.0, -0.5, 1.5)] + [('silu', ())]:
            x, x_t = tl.tensor(x0.astype(dtype), requires_grad=True), torch.tensor(x0.astype(dtype), requires_grad=True)
            with np.errstate(invalid='ignore'):   # NumPy warns of the inf * 0 that makes silu's NaN (PyTorch's too)
                y = getattr(tl, name)(x, *args)
                y.backward(tl.ones_like(y))
            y_t = getattr(F, name)(x_t, *args)
            y_t.backward(torch.ones_like(y_t))
            for ours, theirs, what in ((y, y_t, 'value'), (x.grad, x_t.grad, 'gradient')):
                assert same_dtype(ours, theirs), f'{name}{args} {what}: {ours.dtype}'
                a, b = to_np(ours).astype(np.float64), to_np(theirs).astype(np.float64)
                rtol, atol = (0, 0) if name == 'leaky_relu' else tol
                assert np.isclose(a, b, rtol, atol, equal_nan=True).all(), f'{name}{args} {what} {dtype}: {a} vs {b}'
    ints = np.arange(-3, 3)
    for name in ('silu', 'leaky_relu'):   # as PyTorch's, floating-point input alone
        raises((RuntimeError, NotImplementedError), lambda: getattr(F, name)(torch.tensor(ints)))
        raises(TypeError, lambda: getattr(tl, name)(tl.tensor(ints)), name, 'int64')
        raises(TypeError, lambda: getattr(tl, name)(tl.tensor(ints > 0)), name, 'bool')


def test_sigmoid_keeps_small_values_as_pytorch():
    """sigmoid far into the negatives keeps its small values (a relative error, not 0: the form (tanh(x / 2) + 1) / 2
    gave 0 at -20 in float32 and log(sigmoid(-100)) = -inf), values and gradients against PyTorch relatively, in
    float64, float32 and float16, with 0, +-inf and NaN (within the normal range)."""
    need_torch()
    x0 = np.array([-100.0, -30.0, -20.0, -9.0, -5.0, -0.5, 0.0, 0.5, 5.0, 9.0, 20.0, 30.0, 100.0, np.inf, -np.inf, np.nan])
    for dtype, rtol in ((np.float64, 1e-15), (np.float32, 2e-7), (np.float16, 2e-3)):
        x, x_t = tl.tensor(x0.astype(dtype), requires_grad=True), torch.tensor(x0.astype(dtype), requires_grad=True)
        y, y_t = x.sigmoid(), x_t.sigmoid()
        y.backward(tl.ones_like(y))
        y_t.backward(torch.ones_like(y_t))
        for ours, theirs, what in ((y, y_t, 'value'), (x.grad, x_t.grad, 'gradient')):
            assert same_dtype(ours, theirs), f'sigmoid {what}: {ours.dtype}'
            a, b = to_np(ours).astype(np.float64), to_np(theirs).astype(np.float64)
            # (below the normal range PyTorch's float32 gives 0 at -100, ours the subnormal e^-100)
            assert np.isclose(a, b, rtol, np.finfo(dtype).tiny, equal_nan=True).all(), f'sigmoid {what} {dtype}: {a} vs {b}'
    log_sigmoid = tl.tensor(np.array([-100.0, -30.0])).sigmoid().log().numpy()
    assert np.allclose(log_sigmoid, [-100.0, -30.0], rtol=1e-12), log_sigmoid


def test_float16_sigmoid_silu_rsqrt_round_once_as_pytorch():
    """float16 sigmoid, silu and rsqrt compute in float32 and round once, as PyTorch's: on every float16 in [-12, 12]
    the values are PyTorch's (bar one or two at a tie of the float32 approximations), and sigmoid's gradient, in float16
    arithmetic as PyTorch's CPU kernel, is PyTorch's bit for bit. Computed in float16 (rounding e^-|x|, then 1 + e,
    ...), about a quarter of the values were off by an ulp or two."""
    need_torch()
    x0 = np.unique(np.linspace(-12, 12, 8001).astype(np.float16))
    g0 = np.linspace(-2, 2, x0.size).astype(np.float16)
    for name in ('sigmoid', 'silu', 'rsqrt'):
        x, x_t = tl.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        with np.errstate(invalid='ignore', divide='ignore'):
            y = getattr(tl, name)(x)
        y_t = getattr(torch.nn.functional if name == 'silu' else torch, name)(x_t)
        a, b = to_np(y), to_np(y_t)
        differ = (a != b) & ~(np.isnan(a) & np.isnan(b))
        assert y.dtype == np.float16 and differ.sum() <= 2, f'{name}: {differ.sum()} values differ, at {x0[differ][:5]}'
        if name == 'sigmoid':
            y.backward(tl.tensor(g0))
            y_t.backward(torch.tensor(g0))
            assert np.array_equal(to_np(x.grad), to_np(x_t.grad)), 'sigmoid gradient'


def test_addcmul_addcdiv_dtype_and_float16_rounding_as_pytorch():
    """addcmul and addcdiv give the three tensors' result dtype, the value taking no part (float16 self with int64
    tensors and value=0.5: float16, not the float32 that value * an int64 tensor made), and float16 computes in
    float32, rounded once (rounded after each product, a quarter of the values were off, some by far more than an
    ulp where the sum cancels); gradients reach all three tensors. addcdiv of two integer tensors and a bool matmul
    raise, as PyTorch's."""
    need_torch()
    f16, i64, f64, f32 = [(np.dtype(d).type, getattr(torch, d)) for d in ('float16', 'int64', 'float64', 'float32')]
    for what, kinds in (('addcmul', (f16, i64, i64)), ('addcmul', (f64, i64, i64)), ('addcdiv', (f16, i64, f16)),
                        ('addcdiv', (f64, i64, f32)), ('addcdiv', (f32, f32, i64))):
        ours = getattr(tl, what)(*[tl.ones(3, dtype=d) for d, _ in kinds], value=0.5)
        theirs = getattr(torch, what)(*[torch.ones(3, dtype=d) for _, d in kinds], value=0.5)
        assert same_dtype(ours, theirs), f'{what} of {[d.__name__ for d, _ in kinds]}: {ours.dtype}'
    rng = np.random.default_rng(0)
    x, y, z = [(rng.standard_normal((64, 50)) * 3).astype(np.float16) for _ in range(3)]
    z = np.abs(z) + np.float16(0.5)
    for what in ('addcmul', 'addcdiv'):
        leaves = [tl.tensor(a, requires_grad=True) for a in (x, y, z)]
        got = getattr(tl, what)(*leaves, value=0.3)
        want = to_np(getattr(torch, what)(*map(torch.tensor, (x, y, z)), value=0.3))
        assert got.dtype == np.float16 and (to_np(got) != want).sum() <= 2, f'{what}: {(to_np(got) != want).sum()} differ'
        got.sum().backward()
        assert all(t.grad is not None and t.grad.dtype == np.float16 for t in leaves), what
    for ours, theirs in (f64, i64):   # two integer tensors divided: refused whatever self is, as PyTorch's
        raises(RuntimeError, lambda: torch.addcdiv(torch.ones(2, dtype=theirs), *[torch.ones(2, dtype=torch.int64)] * 2))
        raises(TypeError, lambda: tl.addcdiv(tl.ones(2, dtype=ours), *[tl.ones(2, dtype=np.int64)] * 2), 'addcdiv',
               'integer division')
    raises(NotImplementedError, lambda: torch.ones(2, 2).bool() @ torch.ones(2, 2).bool())
    raises(TypeError, lambda: tl.ones(2, 2).bool() @ tl.ones(2, 2).bool(), 'matmul', 'bool')


def test_module_functions_forward_to_methods_by_name():
    """tl.X(input, ...) for the tensor methods torch.X mirrors is made one way (_method): named X (not '<lambda>'),
    taking torch's keyword name input= for the tensor, and passing the rest on as the method takes it."""
    need_torch()
    x = tl.tensor([0.5, -2.0, 3.0])
    for name in ('exp', 'sigmoid', 'tanh', 'relu', 'sin', 'erf', 'rsqrt', 'sign', 'isnan', 'neg', 'flip', 'gather',
                 'clamp', 'lerp', 'addcmul', 'maximum', 'dot'):
        assert getattr(tl, name).__name__ == name, f'tl.{name} is named {getattr(tl, name).__name__!r}'
    assert np.array_equal(to_np(tl.exp(input=x)), to_np(torch.exp(input=torch.tensor([0.5, -2.0, 3.0]))))
    assert np.array_equal(to_np(tl.clamp(x, max=1.0)), [0.5, -2.0, 1.0])
    assert np.array_equal(to_np(tl.addcmul(x, x, x, value=2)), to_np(x + 2 * x * x))
    for name in ('clone', 't', 'detach', 'clamp_', 'fill_', 'zero_', 'detach_'):   # torch.X's of these too
        assert hasattr(torch, name) and getattr(tl, name).__name__ == name, name
    y = tl.tensor([[1.0, 5.0], [-3.0, 2.0]])
    assert tl.clone(y) is not y and np.array_equal(tl.clone(y).numpy(), y.numpy()) and tl.t(y).shape == (2, 2)
    assert tl.clamp_(y, -1.0, 2.0) is y and np.array_equal(y.numpy(), [[1.0, 2.0], [-1.0, 2.0]])
    assert tl.fill_(y, 3.0) is y and tl.zero_(y) is y and not y.numpy().any()
    assert tl.detach(y).data is y.data and tl.detach_(y) is y
    missing = [n for n in dir(tl.Tensor) if not n.startswith('_') and callable(getattr(tl.Tensor, n)) and
               callable(getattr(torch, n, None)) and not hasattr(tl, n)]
    assert not missing, f'methods whose torch.X has no tl.X: {missing}'
    z = rng('forms').standard_normal((2, 3, 4))
    for name, args in (('tile', [(2, 1)]), ('moveaxis', [0, 2]), ('swapdims', [0, 2]), ('relu_', []),
                       ('clip_', [-0.5, 0.5])):
        assert np.array_equal(getattr(tl, name)(tl.tensor(z), *args).numpy(),
                              getattr(torch, name)(torch.tensor(z), *args).numpy()), name
    assert tl.numel(tl.tensor(z)) == 24


def test_float16_std_rounds_once_as_pytorch():
    """float16 std is the float32 std rounded once, as PyTorch's (the root of the variance rounded to float16 was off
    by an ulp in about one row in eight)."""
    need_torch()
    x = (np.random.default_rng(0).standard_normal((2000, 50)) * 3).astype(np.float16)
    for call in (lambda t: t.std(1), lambda t: t.std(1, keepdim=True, correction=0), lambda t: t.std()):
        ours, theirs = to_np(call(tl.tensor(x))), to_np(call(torch.tensor(x)))
        assert ours.dtype == np.float16 and np.array_equal(ours, theirs), f'{(ours != theirs).sum()} differ'


def test_remainder_saves_only_what_its_backward_reads():
    """x % y: x's gradient is g, read from neither operand, so x changed in place (under no_grad) after the op does not
    stop the backward, as in PyTorch; where y needs a gradient (which reads x and y), it does."""
    need_torch()
    for m in (tl, torch):
        w = m.tensor([0.5, 2.5], requires_grad=True)
        z = w % 3.0
        with m.no_grad():
            w.add_(1.0)
        z.sum().backward()
        assert np.array_equal(to_np(w.grad), [1.0, 1.0]), m.__name__
    x, y = tl.tensor([5.0, 7.0]), tl.tensor([2.0, 3.0], requires_grad=True)
    z = x % y
    x += 1
    raises(RuntimeError, lambda: z.sum().backward(), 'modified by an in-place operation')


def test_scheduler_writing_a_tensor_rate_advances_its_version():
    """A scheduler that writes a group's tensor lr in place advances its version, as PyTorch's fill_ does: a backward
    that saved the rate raises (it used the new rate silently: a wrong gradient); so does ReduceLROnPlateau's."""
    need_torch()
    for m, sched in ((tl, tl), (torch, torch.optim.lr_scheduler)):
        for make, step in ((lambda o: sched.ExponentialLR(o, 0.5), lambda s: s.step()),
                           (lambda o: sched.ReduceLROnPlateau(o, patience=0), lambda s: [s.step(1.0), s.step(1.0)])):
            w, lr = m.tensor([1.0, 2.0], requires_grad=True), m.tensor(0.1)
            opt = (tl.SGD if m is tl else torch.optim.SGD)([w], lr=lr)
            scheduler = make(opt)
            y = (w * lr).sum()
            opt.step()
            step(scheduler)
            raises(RuntimeError, lambda: y.backward(), 'modified by an in')


MATH_SPECIALS = np.array([0.0, -0.0, 1e-300, -1e-300, 1e-30, -1e-30, 1e-10, -1e-10, 1e-4, -1e-4, 0.3, -0.7, 0.5, -0.5,
                          1.0, 1.5, -2.5, 3.0, -3.0, 10.0, -10.0, 20.0, -20.0, 30.0, 100.0, -100.0, 1e4, -1e4, 1e30,
                          -1e30, 1e300, np.inf, -np.inf, np.nan])
MATH_CALLS = [   # (name, f(m, x)), m tl or TH
    ('sin', lambda m, x: m.sin(x)), ('cos', lambda m, x: m.cos(x)), ('log1p', lambda m, x: m.log1p(x)),
    ('expm1', lambda m, x: m.expm1(x)), ('erf', lambda m, x: m.erf(x)), ('floor', lambda m, x: m.floor(x)),
    ('ceil', lambda m, x: m.ceil(x)), ('trunc', lambda m, x: m.trunc(x)), ('round', lambda m, x: m.round(x)),
    ('round_2', lambda m, x: m.round(x, decimals=2)), ('round_-1', lambda m, x: m.round(x, decimals=-1)),
    ('sign', lambda m, x: m.sign(x)), ('reciprocal', lambda m, x: m.reciprocal(x)), ('rsqrt', lambda m, x: m.rsqrt(x)),
    ('square', lambda m, x: m.square(x)), ('isnan', lambda m, x: m.isnan(x)), ('isinf', lambda m, x: m.isinf(x)),
    ('isfinite', lambda m, x: m.isfinite(x)), ('nan_to_num', lambda m, x: m.nan_to_num(x)),
    ('nan_to_num_given', lambda m, x: m.nan_to_num(x, 1.0, 2.0, neginf=-3.0)),
    ('nan_to_num_1e10', lambda m, x: m.nan_to_num(x, posinf=1e10, neginf=-1e10)),   # inf in float16
    ('softplus', lambda m, x: m.softplus(x)), ('softplus_2_5', lambda m, x: m.softplus(x, 2.0, 5.0)),
    ('softplus_half_1000', lambda m, x: m.softplus(x, beta=0.5, threshold=1000.0)),
    ('softplus_-1', lambda m, x: m.softplus(x, -1.0)), ('elu', lambda m, x: m.elu(x)),
    ('elu_0.3', lambda m, x: m.elu(x, alpha=0.3)),
    ('lerp_0.3', lambda m, x: m.lerp(x, m.flip(x, [0]), 0.3)),
    ('lerp_0.5', lambda m, x: m.lerp(x, m.flip(x, [0]), 0.5)),
    ('lerp_1', lambda m, x: m.lerp(x, m.flip(x, [0]), 1.0)),   # end exactly: -1e30 + (1e-30 + 1e30) would be 0
    ('lerp_tensor', lambda m, x: m.lerp(m.flip(x, [0]), m.flip(x, [0]) * 0 + 2.0, x)),
    ('addcmul', lambda m, x: m.addcmul(x, x, m.flip(x, [0]), value=0.5)),
    ('addcdiv', lambda m, x: m.addcdiv(x, x, m.flip(x, [0]), value=-3)),
]


def test_elementwise_math_special_values_as_pytorch():
    """Each of MATH_CALLS at 0, -0, tiny, 1e-10, the kinks, large, huge, +-inf and NaN, in float64, float32 and float16,
    against PyTorch in the same dtype: dtypes, values and gradients within a few units in the last place (relatively,
    down to the smallest normal number), NaN where PyTorch's, the sign of a zero value as PyTorch's. The naive forms
    fail: log(1 + x) and e^x - 1 at 1e-10, erf's A&S 7.1.26 near 0, log(1 + e^x) at -100 (0) and at 100 in float32
    (inf), e^x - 1 in elu at -1e-10, a + w (b - a) at w = 1. expm1's gradient is e^x (PyTorch's y + 1 cancels to 0 at
    -20 in float32): against torch.exp."""
    need_torch()
    for dtype, rtol in ((np.float64, 2e-15), (np.float32, 4e-7), (np.float16, 1e-3)):
        with np.errstate(over='ignore'):   # (1e300 is inf in float32 and float16)
            x0 = MATH_SPECIALS.astype(dtype)
        for name, f in MATH_CALLS:
            x, x_t = tl.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
            with np.errstate(all='ignore'):   # (1 / 0 and inf - inf of / and - warn in NumPy)
                y = f(tl, x)
                if y.requires_grad:
                    y.backward(tl.ones_like(y))
            y_t = f(TH, x_t)
            if y_t.requires_grad:
                y_t.backward(torch.ones_like(y_t))
            grad_t = torch.exp(x_t.detach()) if name == 'expm1' else x_t.grad
            for ours, theirs, what in ((y, y_t, 'value'), (x.grad, grad_t, 'gradient')):
                msg = f'{name} {what} in {np.dtype(dtype).name}'
                assert (ours is None) == (theirs is None), msg
                if ours is not None:
                    assert same_dtype(ours, theirs), f'{msg}: {ours.dtype}'
                    a, b = to_np(ours).astype(np.float64), to_np(theirs).astype(np.float64)
                    close = np.isclose(a, b, rtol, np.finfo(dtype).tiny, equal_nan=True)
                    assert close.all(), f'{msg} at {x0[~close]}: {a[~close]} vs {b[~close]}'
                    zeros = (a == 0) & (b == 0)
                    assert what != 'value' or (np.signbit(a) == np.signbit(b))[zeros].all(), f'{msg}: signs of 0'


def test_gpu_elementwise_math_special_values_as_cpu():
    """Each of MATH_CALLS on the GPU at MATH_SPECIALS and at values halfway between those of 1 and 2 decimals (where
    CuPy's own round, scaling float32 in float64, rounds the other way: 0.015 to 0.01), in float64, float32 and float16:
    the CPU's dtypes, NaNs and signs of zero; the same bits for the ops IEEE arithmetic rounds exactly (rounding, sign,
    the tests, nan_to_num, 1 / x, x * x, sqrt's reciprocal; but CuPy's float32 kernels flush a subnormal result to
    zero: 1 / 3.4e38), within MATH_CALLS's tolerance for the others; gradients alike."""
    need_cuda()
    exact = ('floor', 'ceil', 'trunc', 'round', 'round_2', 'round_-1', 'sign', 'reciprocal', 'rsqrt', 'square', 'isnan',
             'isinf', 'isfinite', 'nan_to_num', 'nan_to_num_given', 'nan_to_num_1e10')
    halfway = np.array([0.015, -0.015, 0.025, 0.35, -0.45, 2.675, 0.125, 1.005, 15.0, -25.0, 3.4e38, -3.4e38])
    for dtype, rtol in ((np.float64, 2e-15), (np.float32, 4e-7), (np.float16, 1e-3)):
        with np.errstate(over='ignore'):
            x0 = np.concatenate([MATH_SPECIALS, halfway]).astype(dtype)
        for name, f in MATH_CALLS:
            results = []
            for device in ('cuda', 'cpu'):
                x = tl.tensor(x0, requires_grad=True, device=device)
                with np.errstate(all='ignore'):
                    y = f(tl, x)
                    if y.requires_grad:
                        y.backward(tl.ones_like(y))
                results.append((y, x.grad))
            for (gpu, cpu), what in zip(zip(*results), ('value', 'gradient')):
                msg = f'{name} {what} in {np.dtype(dtype).name}'
                assert (gpu is None) == (cpu is None), msg
                if cpu is None:
                    continue
                a, b = gpu.numpy(), cpu.numpy()
                assert a.dtype == b.dtype, f'{msg}: {a.dtype} on the GPU, {b.dtype} on the CPU'
                if name in exact and what == 'value':
                    same = (a == b) & (np.signbit(a) == np.signbit(b)) | np.isnan(a) & np.isnan(b) \
                        if a.dtype.kind == 'f' else a == b
                    if a.dtype == np.float32:   # CuPy's float32 kernels flush subnormal results to zero
                        same |= (a == 0) & (np.abs(b) < np.finfo(np.float32).tiny) & (np.signbit(a) == np.signbit(b))
                else:
                    a, b = a.astype(np.float64), b.astype(np.float64)
                    same = np.isclose(a, b, rtol, np.finfo(dtype).tiny, equal_nan=True)
                    same &= (np.signbit(a) == np.signbit(b)) | (a != 0) | (what != 'value')
                assert same.all(), f'{msg} at {x0[~same]}: {a[~same]} (GPU) vs {b[~same]} (CPU)'


def test_elementwise_math_functions_warn_nothing():
    """sin, cos, log1p, expm1 and erf give inf and NaN (at inf, -1, -2, 1000) without NumPy's warnings, as PyTorch."""
    x = tl.tensor([np.inf, -np.inf, -1.0, -2.0, 1000.0, np.nan], dtype=np.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        for name in ('sin', 'cos', 'log1p', 'expm1', 'erf'):
            getattr(x, name)().sum().backward()


def test_special_values_warn_nothing():
    """Division by 0, log 0, sqrt and pow at 0, exp and products past the range, inf - inf, a number past float16's
    or float32's range, the same in place, and an optimizer step on an overflowing gradient: inf and NaN, forward
    and backward, without NumPy's warnings (as PyTorch), and (where it is installed) PyTorch's values."""
    calls = [('x / 0', lambda x: x / 0), ('0 / x', lambda x: 0 / x), ('x ** -1', lambda x: x ** -1),
             ('log', lambda x: x.log()), ('sqrt', lambda x: x.sqrt()), ('rsqrt', lambda x: x.rsqrt()),
             ('exp', lambda x: (x * 100).exp()), ('x * 1e39', lambda x: x * 1e39),
             ('x - x * inf', lambda x: x - x * math.inf),
             ('softmax', lambda x: (x * 1e39).softmax(0)), ('logsumexp', lambda x: (x * 1e39).logsumexp(0)),
             ('prod', lambda x: (x * 1e30).prod()), ('sigmoid', lambda x: (x * -1e30).sigmoid())]
    for dtype in (np.float16, np.float32, np.float64):
        a = np.array([0.0, 2.5, -3.0, 7.0], dtype)
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            for name, f in calls:
                x = tl.tensor(a, requires_grad=True)
                out = f(x)
                out.sum().backward()
                if torch is not None:
                    xt = torch.tensor(a, requires_grad=True)
                    want = f(xt)
                    want.sum().backward()
                    for got, ref, what in ((out.data, want, 'value'), (x.grad.data, xt.grad, 'gradient')):
                        assert np.allclose(got, ref.detach().numpy(), 1e-3, equal_nan=True), \
                            f'{name} {np.dtype(dtype).name} {what}: {got} vs {ref}'
            assert np.isinf(tl.tensor([70000.0], dtype=np.float16).item())   # (NumPy warned of the cast)
            y = tl.tensor(a)
            y /= 0
            y *= 1e39
            assert np.array_equal(np.isnan(y.numpy()), [True, False, False, False]), y
            p = tl.Parameter(a[1:] + 1)
            p.grad = tl.tensor(a[1:] * float(np.finfo(dtype).max))
            tl.Adam([p]).step()
            assert np.isnan(p.numpy()).all(), p   # inf / inf


def test_elementwise_math_integer_and_bool_inputs_as_pytorch():
    """MATH_CALLS (and more) on int64, int32, int16, int8, uint8 and bool tensors as PyTorch's: float32 results, but
    floor, ceil, round, trunc, sign, square and nan_to_num keep the dtype (square of bools: int64); where PyTorch raises
    (floor of bools, softplus, elu, lerp and addcdiv of integers, round with decimals), a TypeError naming the op."""
    need_torch()
    calls = MATH_CALLS + [('addcmul_2', lambda m, x: m.addcmul(x, x, m.flip(x, [0]), value=2)),
                          ('exp', lambda m, x: m.exp(x)), ('abs', lambda m, x: m.abs(x))]
    for dtype in (np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_):
        a = np.array([-3, -1, 0, 1, 2, 5, 7]).astype(dtype)
        for name, f in calls:
            msg = f'{name} of {np.dtype(dtype).name}'
            try:
                want = f(TH, torch.tensor(a))
            except (RuntimeError, NotImplementedError, TypeError):
                raises(TypeError, lambda: f(tl, tl.tensor(a)), name.split('_')[0])
                continue
            if name == 'addcmul':   # PyTorch truncates the value 0.5 to 0; refused here
                assert torch.equal(want, torch.tensor(a)), msg
                raises(TypeError, lambda: f(tl, tl.tensor(a)), 'addcmul', 'value=0.5', 'truncates')
                continue
            with np.errstate(all='ignore'):
                got = f(tl, tl.tensor(a))
            assert same_dtype(got, want), f'{msg}: {got.dtype}, not {want.dtype}'
            assert np.allclose(to_np(got).astype(np.float64), to_np(want).astype(np.float64), 1e-6, 0,
                               equal_nan=True), f'{msg}: {to_np(got)} vs {to_np(want)}'


def test_elementwise_math_errors_as_pytorch():
    """As PyTorch refuses (RuntimeError or NotImplementedError there): floor, ceil, round and trunc of bool tensors,
    round with decimals of integers, softplus, elu and lerp of integers, addcdiv of integers, lerp's end of another
    dtype and a weight tensor of another dtype with dimensions (a 0-d one is taken, as PyTorch's); lerp's shapes
    that do not broadcast: ValueError naming them."""
    need_torch()
    ints, bools, x = np.arange(-2, 3), np.arange(-2, 3) > 0, np.linspace(-1, 1, 3).astype(np.float32)
    for name in ('floor', 'ceil', 'round', 'trunc'):
        raises((RuntimeError, NotImplementedError), lambda: getattr(torch, name)(torch.tensor(bools)))
        raises(TypeError, lambda: getattr(tl, name)(tl.tensor(bools)), name, 'bool')
    raises((RuntimeError, NotImplementedError), lambda: torch.round(torch.tensor(ints), decimals=1))
    raises(TypeError, lambda: tl.tensor(ints).round(decimals=1), 'round', 'decimals=1', 'int64')
    for f in (lambda m, t: m.softplus(t), lambda m, t: m.elu(t), lambda m, t: m.lerp(t, t, 0.5)):
        raises((RuntimeError, NotImplementedError), lambda: f(TH, torch.tensor(ints)))
        raises(TypeError, lambda: f(tl, tl.tensor(ints)), 'int64')
    raises(RuntimeError, lambda: torch.addcdiv(*[torch.tensor(ints)] * 3), 'integer division')
    raises(TypeError, lambda: tl.addcdiv(*[tl.tensor(ints)] * 3), 'addcdiv', 'int64', 'integer division')
    for end, weight in ((x.astype(np.float64), 0.5), (x, x.astype(np.float64)), (x, x.astype(np.float16))):
        raises(RuntimeError, lambda: torch.lerp(torch.tensor(x), torch.tensor(end), torch.tensor(weight)), 'dtype')
        raises(TypeError, lambda: tl.lerp(tl.tensor(x), tl.tensor(end), tl.tensor(weight)), 'lerp', 'float32')
    for weight in (np.float64(0.25), np.int64(1)):   # 0-d weights of another dtype
        want = torch.lerp(torch.tensor(x), torch.tensor(x[::-1].copy()), torch.tensor(weight))
        got = tl.lerp(tl.tensor(x), tl.tensor(x[::-1].copy()), tl.tensor(weight))
        assert same_dtype(got, want) and np.allclose(to_np(got), to_np(want), 1e-6, 1e-7), weight
    raises(RuntimeError, lambda: torch.lerp(torch.tensor(x), torch.zeros(4), 0.5))
    assert_names_shapes(raises(ValueError, lambda: tl.lerp(tl.tensor(x), tl.zeros(4), 0.5), 'lerp'), (3,), (4,))


def test_elementwise_math_names_and_builtins():
    """The module-level names are PyTorch's torch.X (elu, softplus: torch.nn.functional's, not Tensor methods, as in
    PyTorch); those named as Python's builtins (tl.sum, tl.max, tl.abs, ...) come from the module's __getattr__, so
    that tinygrad_lite's own sum(), max(), ... stay Python's: values against torch.X, tl.max(a, b) as torch.max(a, b),
    tl.pow(number, tensor)."""
    need_torch()
    for name in ('exp', 'log', 'sqrt', 'abs', 'neg', 'clamp', 'sin', 'cos', 'log1p', 'expm1', 'erf', 'reciprocal',
                 'rsqrt', 'square', 'floor', 'ceil', 'trunc', 'round', 'sign', 'isnan', 'isinf', 'isfinite',
                 'nan_to_num', 'lerp', 'addcmul', 'addcdiv', 'mean', 'var', 'std', 'argmax', 'argmin', 'reshape',
                 'flatten', 'unflatten', 'transpose', 'swapaxes', 'permute', 'movedim', 'unsqueeze', 'squeeze',
                 'matmul', 'sum', 'max', 'min', 'all', 'any', 'pow'):
        assert callable(getattr(tl, name)) and hasattr(torch, name) and hasattr(tl.Tensor, name), name
    for name in ('elu', 'softplus'):
        assert callable(getattr(tl, name)) and hasattr(F, name), name
        assert not hasattr(tl.Tensor, name) and not hasattr(torch.Tensor, name), name
    assert not {'sum', 'max', 'min', 'all', 'any', 'pow', 'abs', 'round'} & set(vars(tl)), 'a builtin shadowed'
    raises(AttributeError, lambda: tl.no_such_name)
    a0, b0 = sample(rng('builtin names a'), (3, 4)), sample(rng('builtin names b'), (3, 4))
    a, b, a_t, b_t = tl.tensor(a0), tl.tensor(b0), torch.tensor(a0), torch.tensor(b0)
    for ours, theirs in ((tl.sum(a), torch.sum(a_t)), (tl.sum(a, 1), torch.sum(a_t, 1)), (tl.max(a), torch.max(a_t)),
                         (tl.max(a, b), torch.max(a_t, b_t)), (tl.min(a, b), torch.min(a_t, b_t)),
                         (tl.max(a, dim=1).values, torch.max(a_t, dim=1).values), (tl.abs(a), torch.abs(a_t)),
                         (tl.pow(a.abs(), b), torch.pow(a_t.abs(), b_t)), (tl.pow(2.0, a), torch.pow(2.0, a_t)),
                         (tl.all(a > -1), torch.all(a_t > -1)), (tl.any(a > 1), torch.any(a_t > 1)),
                         (tl.round(a, decimals=1), torch.round(a_t, decimals=1)), (tl.mean(a, 0), torch.mean(a_t, 0)),
                         (tl.transpose(a, 0, 1), torch.transpose(a_t, 0, 1)), (tl.matmul(a, b.T), torch.matmul(a_t, b_t.T))):
        assert same_dtype(ours, theirs) and np.allclose(to_np(ours), to_np(theirs), 1e-12, 1e-12), (ours, theirs)
    raises(TypeError, lambda: torch.round(torch.tensor([1.25]), 1))   # decimals keyword-only, not ignored
    for decimals in (1.5, True, '1'):   # (1.5 rounded at 10^1.5 and True at 1 place before)
        raises(TypeError, lambda: torch.round(torch.tensor([1.25]), decimals=decimals))
        raises(TypeError, lambda: tl.round(tl.tensor([1.25]), decimals=decimals), 'decimals', type(decimals).__name__)
    raises(TypeError, lambda: tl.round(tl.tensor([1.25]), 1))
    assert tl.round(tl.tensor([1.25]), decimals=1).item() == np.float32(1.2)


def test_dtype_names_as_pytorch():
    """tl's dtype names are torch's, the ones named as Python's builtins (tl.float, tl.int, tl.bool, ...) through the
    module's __getattr__ (this file's own float(), int(), bool() stay Python's), in dir(tl), each usable as dtype=."""
    need_torch()
    for name in ('float16', 'float32', 'float64', 'uint8', 'int8', 'int16', 'int32', 'int64', 'half', 'float',
                 'double', 'short', 'int', 'long', 'bool'):
        theirs = str(getattr(torch, name)).replace('torch.', '')
        assert np.dtype(getattr(tl, name)).name == theirs, (name, getattr(tl, name), theirs)
        assert tl.zeros(2, dtype=getattr(tl, name)).dtype == np.dtype(theirs) and name in dir(tl), name
    assert not {'float', 'int', 'bool'} & set(vars(tl)), 'a builtin shadowed'


def test_builtin_named_forms_listed_named_and_built_once():
    """tl.sum, tl.max, ... (the module's __getattr__) are in dir(tl), named as torch's (not '<lambda>'), built once
    (tl.max is tl.max); tl.pow of two numbers raises TypeError as torch.pow (it gave int.__rpow__'s number)."""
    need_torch()
    for name in ('abs', 'all', 'any', 'max', 'min', 'pow', 'round', 'sum'):
        assert name in dir(tl), name
        assert getattr(tl, name) is getattr(tl, name) and getattr(tl, name).__name__ == name, name
    assert 'Tensor' in dir(tl) and 'cross_entropy' in dir(tl)
    raises(TypeError, lambda: torch.pow(2, 3))
    raises(TypeError, lambda: tl.pow(2, 3))


def test_mse_loss_checks_as_the_other_pair_losses():
    """mse_loss goes through the pair losses' checks (_pair_loss) as l1_loss: a target given as a list or array is made
    a tensor on input's device (it raised AttributeError), a bad reduction raises ValueError."""
    x = tl.tensor([1.0, 2.0])
    for fn in (tl.mse_loss, tl.l1_loss):
        assert np.isclose(fn(x, [0.0, 0.0], reduction='sum').item(), {tl.mse_loss: 5.0, tl.l1_loss: 3.0}[fn])
        raises(ValueError, lambda: fn(x, [0.0, 0.0], reduction='batchmean'))
        raises(ValueError, lambda: fn(x, [0.0, 0.0, 0.0]))


def test_elu_softplus_modules_as_pytorch():
    """ELU and Softplus as torch.nn's: reprs, argument names (but inplace), settings, no parameters nor state."""
    need_torch()
    build = lambda nn: nn.Sequential(nn.ELU(), nn.ELU(0.5), nn.ELU(alpha=2), nn.Softplus(), nn.Softplus(2, 10),
                                     nn.Softplus(beta=0.5, threshold=5.0))
    ours, theirs = build(tl), build(torch.nn)
    assert repr(ours) == repr(theirs), f'{ours}\n-- PyTorch --\n{theirs}'
    assert not list(ours.parameters()) and ours.state_dict() == {}
    for a, b in zip(ours, theirs, strict=True):
        for setting in ('alpha', 'beta', 'threshold'):
            assert getattr(a, setting, None) == getattr(b, setting, None), (a, setting)
    for name in ('ELU', 'Softplus'):
        names = lambda cls: [p for p in inspect.signature(cls).parameters if p != 'inplace']
        assert names(getattr(tl, name)) == names(getattr(torch.nn, name)), name


def test_copies_are_row_major_and_flatten_empty_as_pytorch():
    """An advanced index's result, cat and stack of transposed inputs and masked_fill of one are row-major, as
    PyTorch's: view(-1) works (it raised) and a reshape of the result is a view of it; flatten keeps a size-0 axis
    outside the flattened range (it raised: reshape's -1 is ambiguous with no elements), the Flatten module too. cat of
    channels-last tensors stays channels-last, as PyTorch's; cat of one tensor (a copy of it, not concatenate) too, and
    its result shares no memory with its input."""
    need_torch()
    x0, m0 = np.arange(24.).reshape(2, 3, 4), np.arange(12.).reshape(3, 4)
    cases = [lambda m, x, w: x[:, [2, 0]], lambda m, x, w: m.cat([w.T, w.T]), lambda m, x, w: m.stack([w.T, w.T], 1),
             lambda m, x, w: w.T.masked_fill(w.T > 3, 0.0), lambda m, x, w: x[[1, 0], :, 1:],
             lambda m, x, w: m.cat([w.T]), lambda m, x, w: m.cat([x[:, ::2]], 2)]
    for k, f in enumerate(cases):
        results = []
        for m in (tl, torch):
            y = f(m, m.tensor(x0), m.tensor(m0))
            flat = y.reshape(-1)
            flat[0] = 100.0   # a view of y (row-major y)
            results.append((y.view(-1).shape[0], y[(0,) * y.ndim].item()))
        assert results[0] == (results[1][0], results[1][1]) and results[0][1] == 100.0, (k, results)
    for shape, start, end in (((0, 3, 4), 1, -1), ((2, 0, 4), 0, 1), ((0, 2), 0, -1), ((3, 0, 2, 5), 2, 3)):
        got, want = tl.zeros(*shape).flatten(start, end), torch.zeros(*shape).flatten(start, end)
        assert got.shape == tuple(want.shape), (shape, start, end, got.shape)
    assert tl.Flatten()(tl.zeros(0, 3, 4)).shape == tuple(torch.nn.Flatten()(torch.zeros(0, 3, 4)).shape) == (0, 12)
    nhwc = [sample(rng(('cat channels-last', k)), (2, 4, 5, 3)) for k in range(2)]
    for m, inputs in ((m, inputs) for m in (tl, torch) for inputs in (nhwc, nhwc[:1])):   # but channels-last stays so,
        c = m.cat([m.tensor(a).permute(0, 3, 1, 2) for a in inputs], 1)   # as PyTorch's: view(2, -1) raises
        assert tl._channels_last(c.data) if m is tl else c.is_contiguous(memory_format=torch.channels_last)
        assert np.array_equal(to_np(c), np.concatenate(inputs, 3).transpose(0, 3, 1, 2)), m.__name__
        raises(RuntimeError, lambda: c.view(2, -1))
    for x in (tl.tensor(x0), tl.tensor(x0).transpose(0, 2), tl.tensor(nhwc[0]).permute(0, 3, 1, 2)):
        assert not np.shares_memory(tl.cat([x]).data, x.data), x.shape


def test_functions_at_edges_as_pytorch():
    """Against PyTorch (float64, values and gradients): linear with a bias broadcast over the leading axes;
    smooth_l1_loss and huber_loss at infinite differences and huber's delta=inf (no NaN gradient from the branch not
    taken); cross_entropy with weights and label smoothing where every kept row's weight is 0 (NaN, each part over the
    weights); cosine_similarity where a norm overflows (0, not NaN); softmax and log_softmax with dtype= (the input
    converted first, its gradient in its own dtype)."""
    need_torch()
    r = rng('function edges')

    def check(f, arrays, what, tol=1e-12):   # values, and the gradients of their sum
        (got, want), (ours, theirs) = run_both(f, *arrays, grad=True)
        same_as_torch(got, want, what, tol, tol)
        got.sum().backward(), want.sum().backward()
        for k, (a, b) in enumerate(zip(ours, theirs)):
            same_as_torch(a.grad, b.grad, f'{what}: gradient {k}', tol, tol)

    x, w = sample(r, (2, 3, 4)), sample(r, (5, 4))
    for shape in ((3, 5), (2, 1, 5), (1,), ()):
        check(lambda m, x, w, b: F.linear(x, w, b) if m is torch else m.linear(x, w, b), [x, w, sample(r, shape)],
              f'linear, bias {shape}')
    a, t = np.array([np.inf, 3.0, -np.inf, 0.2, -0.7, np.nan]), sample(r, (6,))   # (NaN: a NaN gradient)
    for name, kwargs in (('smooth_l1_loss', {}), ('huber_loss', {}), ('huber_loss', {'delta': 2.5}),
                         ('smooth_l1_loss', {'beta': 0.5}), ('huber_loss', {'delta': math.inf})):
        finite = [1, 3, 4, 5] if kwargs == {'delta': math.inf} else slice(None)   # (an inf d: NaN there, inf here)
        check(lambda m, a: getattr(F if m is torch else m, name)(a, m.tensor(t[finite]), reduction='none', **kwargs),
              [a[finite]], f'{name} {kwargs}')
    logits, target = sample(r, (3, 4)), np.array([0, 0, 1])
    got = tl.cross_entropy(tl.tensor(logits), tl.tensor(target), weight=tl.tensor([0., 0, 1, 1]).double(),
                           label_smoothing=0.3)
    want = F.cross_entropy(torch.tensor(logits), torch.tensor(target), weight=torch.tensor([0., 0, 1, 1]).double(),
                           label_smoothing=0.3)
    assert np.isnan(got.item()) and np.isnan(want.item()), (got, want)
    big, other = np.array([[3e19, 4e19], [1e-12, 0.0]], np.float32), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    check(lambda m, a, b: (F if m is torch else m).cosine_similarity(a, b), [big, other],
          'cosine_similarity, overflowing norm', 1e-6)
    half = sample(r, (3, 5)).astype(np.float16)
    for name in ('softmax', 'log_softmax'):
        check(lambda m, h: getattr(m, name)(h, 1, dtype=m.float32) * m.tensor(w[:3, :1]), [half], f'{name}(dtype=)',
              1e-3)


def test_float16_tanh_mean_division_gradients_as_pytorch():
    """float16 gradients of tanh (in float32, rounded once), mean (the scale in float32, rounded once) and division (the
    divisor's -g (a / b) / b, PyTorch's order) equal PyTorch's CPU ones bit for bit (20,000 random elements; they
    differed in 30-57% of elements by a few float16 steps)."""
    need_torch()
    r = rng('float16 gradients')
    x, b = (sample(r, (100, 200)) * 2).astype(np.float16), (sample(r, (100, 200)) + 3).astype(np.float16)
    calls = (('tanh', lambda a, b: a.tanh(), (100, 200)), ('mean', lambda a, b: a.mean(1), (100,)),
             ('division', lambda a, b: a / b, (100, 200)))
    for name, f, shape in calls:
        g = (upstream(0, shape) * 5).astype(np.float16)
        (xs, bs), (xt, bt) = [[lib.tensor(v, requires_grad=True) for v in (x, b)] for lib in (tl, torch)]
        f(xs, bs).backward(tl.tensor(g)), f(xt, bt).backward(torch.tensor(g))
        for ours, theirs in ((xs, xt), (bs, bt)):
            assert (ours.grad is None) == (theirs.grad is None), name
            if ours.grad is not None:
                same = ours.grad.numpy() == theirs.grad.numpy()
                assert same.all(), f'{name}: {(~same).mean():.1%} of the gradient differs'


def test_cross_entropy_class_probabilities_as_pytorch():
    """cross_entropy (and CrossEntropyLoss) with a floating-point target of the input's shape (class probabilities) as
    PyTorch's at (N, C), (N, C, d) and (C,), with label smoothing, class weights and each reduction: values and
    float64 gradients of the input and the target; ignore_index refused (ValueError; PyTorch's RuntimeError); on a GPU
    as on the CPU."""
    need_torch()
    r = rng('soft targets')
    for shape in ((3, 4), (2, 4, 5), (4,)):
        x, t, w = sample(r, shape), r.random(shape), r.random(4)
        for kwargs in ({}, {'label_smoothing': 0.2}, {'reduction': 'none'}, {'reduction': 'sum'}, {'weight': w},
                       {'weight': w, 'label_smoothing': 0.3, 'reduction': 'none'}):
            ours_kw = {k: tl.tensor(v) if k == 'weight' else v for k, v in kwargs.items()}
            theirs_kw = {k: torch.tensor(v) if k == 'weight' else v for k, v in kwargs.items()}
            (xs, ts), (xt, tt) = [[lib.tensor(v, requires_grad=True) for v in (x, t)] for lib in (tl, torch)]
            got, want = tl.cross_entropy(xs, ts, **ours_kw), F.cross_entropy(xt, tt, **theirs_kw)
            what = f'{shape} {list(kwargs)}'
            assert_close(got, want, 1e-12, 1e-12, what)
            got.sum().backward(), want.sum().backward()
            assert_close(xs.grad, xt.grad, 1e-12, 1e-12, f'{what}: input gradient')
            assert_close(ts.grad, tt.grad, 1e-12, 1e-12, f'{what}: target gradient')
            assert_close(tl.CrossEntropyLoss(**ours_kw)(tl.tensor(x), tl.tensor(t)), want, 1e-12, 1e-12, what)
            if tl.cuda_is_available():
                on_gpu = {k: v.to('cuda') if isinstance(v, tl.Tensor) else v for k, v in ours_kw.items()}
                xg, tg = (tl.tensor(v, device='cuda', requires_grad=True) for v in (x, t))
                got = tl.cross_entropy(xg, tg, **on_gpu)
                assert_close(got, want, 1e-12, 1e-12, f'{what} on the GPU')
                got.sum().backward()
                assert_close(xg.grad, xt.grad, 1e-12, 1e-12, f'{what}: input gradient on the GPU')
                assert_close(tg.grad, tt.grad, 1e-12, 1e-12, f'{what}: target gradient on the GPU')
    raises((RuntimeError, ValueError), lambda: F.cross_entropy(torch.randn(3, 4), torch.rand(3, 4), ignore_index=1))
    raises(ValueError, lambda: tl.cross_entropy(tl.randn(3, 4), tl.rand(3, 4), ignore_index=1), 'ignore_index')
    raises(TypeError, lambda: tl.cross_entropy(tl.randn(2, 4, 5), tl.rand(2, 5)), 'class indices', 'probabilities')


def test_softmax_log_softmax_float16_gradients_rounded_once():
    """float16 softmax and log_softmax backward compute in float32 and round once, as PyTorch's: against float64 from
    the same float16 inputs, no element further off than PyTorch's worst (rounding g * out to float16 first was 1.6x
    it), over shapes and axes."""
    need_torch()
    r = rng('softmax float16 backward')
    for shape, axis in (((40, 30), 1), ((7, 5, 9), 0), ((6, 50), -1)):
        x, g = (r.standard_normal(shape).astype(np.float16) for _ in range(2))
        for name in ('softmax', 'log_softmax'):
            grads = []
            for m, dtype in ((tl, np.float16), (torch, np.float16), (torch, np.float64)):
                t = m.tensor(x.astype(dtype), requires_grad=True)
                getattr(t, name)(axis).backward(m.tensor(g.astype(dtype)))
                grads.append(t.grad.numpy().astype(np.float64))
            ours, theirs, want = grads
            assert np.abs(ours - want).max() <= np.abs(theirs - want).max(), (name, shape, axis)


def test_float16_matmul_gradient_of_a_broadcast_operand_rounds_once():
    """The gradient of a float16 matmul operand broadcast over the other's batch sums the batch's products in float32
    and rounds once, as PyTorch's one folded product (it summed float16 products: the weight's gradient of (2, 5, 80)
    @ (80, 7) was off torch's in 201 of 560 elements, 3.5x its error against float64). Where both operands broadcast
    ((3, 1, 4, 40) @ (2, 40, 6)) PyTorch sums float16 products itself: ours is nearer float64 there."""
    need_torch()
    r = rng('f16 matmul broadcast')
    for xs, ws in (((2, 5, 80), (80, 7)), ((2, 5, 80), (80,)), ((80,), (2, 80, 5)), ((3, 1, 4, 40), (2, 40, 6))):
        folded = len(xs) < 3 or len(ws) < 3   # one operand 1-d or 2-d: PyTorch folds the other's batch
        x, w = (r.standard_normal(s).astype(np.float16) for s in (xs, ws))
        g = r.standard_normal(np.matmul(x, w).shape).astype(np.float16)
        grads = {}
        for name, make, dtype in (('tl', tl.tensor, np.float16), ('torch', torch.tensor, np.float16),
                                  ('float64', torch.tensor, np.float64)):
            a, b = make(x.astype(dtype), requires_grad=True), make(w.astype(dtype), requires_grad=True)
            (a @ b).backward(make(g.astype(dtype)))
            grads[name] = [to_np(t.grad).astype(np.float64) for t in (a, b)]
        for ours, theirs, exact in zip(grads['tl'], grads['torch'], grads['float64']):
            assert np.abs(ours - exact).max() <= np.abs(theirs - exact).max() * 1.01 + 1e-3, (xs, ws)
            assert not folded or np.mean(ours != theirs) <= 0.01, (xs, ws, np.mean(ours != theirs))


def test_float16_backward_hands_float16_upstream():
    """softmax, log_softmax and linear with a bias compute their float16 backward in float32 and hand the op before
    them a float16 gradient, as PyTorch's autograd does (a float32 one made every float16 op before them compute its
    backward in float32: x.grad then differed from PyTorch's in up to a fifth of its elements), seen by an identity op
    in front of each."""
    need_torch()

    class Seen(tl.Function):   # the identity, noting the dtype of the gradient it is handed
        def forward(self, x):
            return x.copy()

        def backward(self, g):
            Seen.dtype = g.dtype
            return g

    class TorchSeen(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            TorchSeen.dtype = g.dtype
            return g
    r = rng('float16 backward upstream')
    x, w, b = (sample(r, shape).astype(np.float16) for shape in ((2, 8, 40), (30, 40), (30,)))
    for m, op, linear in ((tl, Seen, tl.linear), (torch, TorchSeen, F.linear)):
        for name, f in (('softmax', lambda h: h.softmax(-1)), ('log_softmax', lambda h: h.log_softmax(-1)),
                        ('linear', lambda h: linear(h, m.tensor(w), m.tensor(b)))):
            op.dtype, y = None, f(op.apply(m.tensor(x, requires_grad=True)))
            (y * m.tensor(upstream(name, y.shape, np.float16))).sum().backward()
            assert str(op.dtype).split('.')[-1] == 'float16', (m.__name__, name, op.dtype)


def test_softmax_modules_implicit_dim_as_pytorch():
    """Softmax() and LogSoftmax() (dim=None) take PyTorch's legacy dim (0 for a 0-, 1- or 3-D input, else 1) with its
    UserWarning, pointing at the caller's line: values and gradients as PyTorch's; a given dim warns nothing."""
    need_torch()
    for ndim in range(5):
        a = sample(rng(('implicit dim', ndim)), (2, 3, 4, 5)[:ndim])
        for name in ('Softmax', 'LogSoftmax'):
            ours, theirs = getattr(tl, name)(), getattr(torch.nn, name)()
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter('always')
                result = run_op(tl, lambda m, x: ours(x), [a])
            with warnings.catch_warnings(record=True) as want:
                warnings.simplefilter('always')
                expected = run_op(TH, lambda m, x: theirs(x), [a])
            compare_runs(result, expected, 1e-12, 1e-12)
            assert [str(w.message) for w in got] == [str(w.message) for w in want], (got, want)
            assert got[0].category is UserWarning and got[0].filename == __file__, (got[0].category, got[0].filename)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        tl.Softmax(dim=0)(tl.ones(2, 3)), tl.LogSoftmax(-1)(tl.ones(2, 3))
    for name in ('softmax', 'log_softmax'):   # the functions given dim=None: the same rule and warning
        a = sample(rng(('implicit dim function', name)), (2, 3))
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter('always')
            ours = getattr(tl, name)(tl.tensor(a), dim=None)
        with warnings.catch_warnings(record=True) as want:
            warnings.simplefilter('always')
            theirs = getattr(F, name)(torch.tensor(a), dim=None)
        assert np.allclose(ours.numpy(), theirs.numpy(), 1e-12, 1e-12), name
        assert [str(w.message) for w in got] == [str(w.message) for w in want] and got[0].filename == __file__, got


def test_embedding_repeated_indices_scatter_add():
    emb = tl.Embedding(5, 3)
    w = upstream(0, (4, 3))
    (emb(tl.Tensor(np.array([2, 4, 2, 2]))) * tl.Tensor(w.astype(np.float32))).sum().backward()
    g = emb.weight.grad.numpy()
    assert_close(g[2], w[0] + w[2] + w[3], 1e-6, 0)
    assert_close(g[[0, 1, 3]], np.zeros((3, 3)), 0, 0)


def test_embedding_index_out_of_range():
    """Indices outside [0, num_embeddings) raise IndexError, and indices of a dtype other than int32 and int64
    TypeError, as PyTorch's (Tensor._index_tensor's and _check_range's checks, as index_select's)."""
    need_torch()
    emb, te = tl.Embedding(5, 3), torch.nn.Embedding(5, 3)
    for index in ([-1], [0, 5], [[1, 2], [7, 0]]):
        raises(IndexError, lambda: te(torch.tensor(index)))
        raises(IndexError, lambda: emb(tl.Tensor(np.array(index))), 'Embedding', 'out of bounds', 'size 5')
    for dtype in (np.uint8, np.int16):
        raises((RuntimeError, IndexError), lambda: te(torch.tensor(np.array([1, 2], dtype))))
        raises(TypeError, lambda: emb(tl.tensor(np.array([1, 2], dtype))), 'Embedding', 'int32 or int64')
    assert emb(tl.Tensor(np.array([0, 4]))).shape == (2, 3) and emb(tl.Tensor(np.zeros(0, np.int64))).shape == (0, 3)


def test_embedding_padding_idx_as_pytorch():
    """Embedding(padding_idx=) as PyTorch's (negative from the end): that row starts as zeros, keeps whatever it is
    set to, and gets no gradient (float64, against PyTorch's with copied weights); the repr; an index outside
    num_embeddings raises ValueError naming it, with PyTorch's AssertionError."""
    need_torch()
    r = rng('embedding padding')
    for padding in (3, -2, 0):
        ours, theirs = tl.Embedding(5, 3, padding).double(), torch.nn.Embedding(5, 3, padding).double()
        assert ours.padding_idx == theirs.padding_idx and repr(ours) == repr(theirs), (repr(ours), repr(theirs))
        assert not ours.weight.numpy()[ours.padding_idx].any()
        theirs.weight.data[...] = torch.tensor(sample(r, (5, 3)))
        ours.load_state_dict(theirs.state_dict())
        index = np.array([[3, 1, 0], [3, 4, 3]])
        w = upstream(0, (2, 3, 3))
        out, want = ours(tl.tensor(index)), theirs(torch.tensor(index))
        assert_close(out, want, 0, 0, f'padding_idx={padding} output')
        (out * tl.Tensor(w)).sum().backward(), (want * torch.tensor(w)).sum().backward()
        assert_close(ours.weight.grad, theirs.weight.grad, 1e-12, 1e-12, f'padding_idx={padding} gradient')
    for bad in (5, -6):
        raises(AssertionError, lambda: torch.nn.Embedding(5, 3, bad))
        raises(ValueError, lambda: tl.Embedding(5, 3, bad), 'padding_idx', str(bad))


def test_layer_attributes_and_reset_parameters_as_pytorch():
    """Linear, Conv2d, BatchNorm, LayerNorm, Embedding, GRUCell, GRU and the pools keep PyTorch's attributes (sizes,
    Conv2d's stride and padding as pairs, a pool's stride its kernel_size where not given); reset_parameters() draws
    what the constructor drew (the same values from the same seed) and BatchNorm's reset_running_stats() restores the
    statistics; a negative or non-int size raises (ValueError, TypeError) naming it, as PyTorch refuses it; an
    AvgPool2d is no MaxPool2d."""
    need_torch()
    builders = [lambda nn: nn.Linear(3, 4), lambda nn: nn.Conv2d(2, 5, (3, 1), stride=2, padding=1),
                lambda nn: nn.BatchNorm1d(4), lambda nn: nn.LayerNorm((2, 3)), lambda nn: nn.Embedding(6, 2),
                lambda nn: nn.GRUCell(3, 4), lambda nn: nn.GRU(3, 4, 2), lambda nn: nn.MaxPool2d(3),
                lambda nn: nn.AvgPool2d(2, 1)]
    names = ('in_features', 'out_features', 'in_channels', 'out_channels', 'kernel_size', 'stride', 'padding',
             'num_features', 'affine', 'track_running_stats', 'normalized_shape', 'num_embeddings', 'embedding_dim',
             'padding_idx', 'input_size', 'hidden_size', 'num_layers')
    for build in builders:
        ours, theirs = build(tl), build(torch.nn)
        for name in names:
            if hasattr(theirs, name):
                assert getattr(ours, name) == getattr(theirs, name), (ours, name, getattr(ours, name))
        if hasattr(theirs, 'reset_parameters'):
            tl.manual_seed(5)
            built = build(tl).state_dict()
            with tl.no_grad():
                for p in ours.parameters():
                    p.fill_(7.0)
            tl.manual_seed(5)
            ours.reset_parameters()
            for k, v in ours.state_dict().items():
                assert np.array_equal(v, built[k]), (ours, k)
    class Scaled(tl.Linear):   # a subclass's own parameter: Linear's reset_parameters leaves it (PyTorch's too)
        def __init__(self, *args):
            super().__init__(*args)
            self.scale = tl.Parameter(np.ones(1, np.float32))
    scaled = Scaled(4, 3)
    scaled.reset_parameters()
    assert scaled.scale.item() == 1.0
    norm = tl.BatchNorm1d(4)
    norm(tl.Tensor((sample(rng('reset stats'), (5, 4)) + 2).astype(np.float32)))
    assert norm.num_batches_tracked.item() == 1 and norm.running_mean.numpy().any()
    norm.reset_running_stats()
    for k, v in norm.state_dict().items():
        assert np.array_equal(v, tl.BatchNorm1d(4).state_dict()[k]), k
    for build, size in ((lambda nn: nn.Linear(-1, 3), '-1'), (lambda nn: nn.Conv2d(3, -3, 3), '-3'),
                        (lambda nn: nn.BatchNorm1d(-2), '-2'), (lambda nn: nn.Embedding(-4, 2), '-4'),
                        (lambda nn: nn.LayerNorm((3, -5)), '-5'), (lambda nn: nn.GRUCell(-6, 2), '-6')):
        raises(RuntimeError, lambda: build(torch.nn))
        raises(ValueError, lambda: build(tl), size)
    raises(TypeError, lambda: torch.nn.Linear(2.0, 3))
    raises(TypeError, lambda: tl.Linear(2.0, 3), 'in_features', 'int')
    assert not isinstance(tl.AvgPool2d(2), tl.MaxPool2d) and not isinstance(torch.nn.AvgPool2d(2), torch.nn.MaxPool2d)


def test_gru_matches_the_gate_equations():
    """GRUCell against r, z, n, h' written out from API.md with NumPy."""
    r = rng('gru_eq')
    tl.manual_seed(0)
    cell = tl.GRUCell(3, 2).double()
    x, h = sample(r, (4, 3)), sample(r, (4, 2))
    p = {n: v.numpy() for n, v in cell.named_parameters()}
    gi, gh = x @ p['weight_ih'].T + p['bias_ih'], h @ p['weight_hh'].T + p['bias_hh']
    sig = lambda v: 1 / (1 + np.exp(-v))
    rg, zg = sig(gi[:, :2] + gh[:, :2]), sig(gi[:, 2:4] + gh[:, 2:4])
    n = np.tanh(gi[:, 4:] + rg * gh[:, 4:])
    assert_close(cell(tl.Tensor(x), tl.Tensor(h)), (1 - zg) * n + zg * h, 1e-12, 1e-12)
    assert_close(cell(tl.Tensor(x)), cell(tl.Tensor(x), tl.Tensor(np.zeros((4, 2)))), 0, 0)


def test_layer_constructors_and_grucell_input_as_pytorch():
    """As PyTorch: GRU with a hidden_size of 0 or less raises ValueError; GRUCell(3, 0), Conv2d(0, 4, 3), Linear(0, 2)
    build (no ZeroDivisionError) with PyTorch's parameter shapes and a zero-fan-in bias of zeros; GRUCell(3, 0) maps a
    batch to (B, 0) with a zero gradient of x. GRUCell takes a 1-D (unbatched) x with a 1-D h, giving PyTorch's
    output and float64 gradients (weights copied), and refuses a 0-d or 3-D x with ValueError naming its shape."""
    need_torch()
    raises(ValueError, lambda: torch.nn.GRU(3, 0), 'hidden_size must be greater than zero')
    for size in (0, -2):
        raises(ValueError, lambda: tl.GRU(3, size), 'hidden_size must be greater than zero', str(size))
    for make_layer in (lambda nn: nn.GRUCell(3, 0), lambda nn: nn.Conv2d(0, 4, 3), lambda nn: nn.Linear(0, 2)):
        with warnings.catch_warnings():   # PyTorch's: initialising a zero-element tensor is a no-op
            warnings.simplefilter('ignore')
            ours, theirs = make_layer(tl), make_layer(torch.nn)
        assert param_shapes(ours) == param_shapes(theirs)
        assert not any(p.numpy().any() for n, p in ours.named_parameters() if 'bias' in n)
    x = tl.Tensor(sample(rng('grucell0'), (2, 3)), requires_grad=True)
    out = tl.GRUCell(3, 0).double()(x)
    out.sum().backward()
    assert out.shape == (2, 0) and x.grad.shape == (2, 3) and not x.grad.numpy().any()
    r = rng('grucell_1d')
    ours, theirs = tl.GRUCell(3, 4).double(), torch.nn.GRUCell(3, 4).double()
    perturb_torch(theirs, r)
    ours.load_state_dict(theirs.state_dict())
    x, h = sample(r, (3,)), sample(r, (4,))
    args = [tl.Tensor(x, requires_grad=True), tl.Tensor(h, requires_grad=True)]
    args_t = [torch.tensor(x, requires_grad=True), torch.tensor(h, requires_grad=True)]
    out, out_t = ours(*args), theirs(*args_t)
    assert out.shape == tuple(out_t.shape) == (4,)
    assert_close(out, out_t, 1e-12, 1e-12)
    w = upstream(0, out.shape)
    (out * tl.Tensor(w)).sum().backward()
    (out_t * torch.tensor(w)).sum().backward()
    names = ['x', 'h'] + [n for n, _ in ours.named_parameters()]
    for a, b, name in zip(args + list(ours.parameters()), args_t + list(theirs.parameters()), names, strict=True):
        assert_close(a.grad, b.grad, 1e-12, 1e-12, name)
    for shape in ((), (2, 2, 3)):
        raises(ValueError, lambda: theirs(torch.zeros(shape, dtype=torch.float64)), '1D or 2D')
        msg = raises(ValueError, lambda: ours(tl.Tensor(np.zeros(shape))), 'GRUCell')
        assert_names_shapes(msg, shape)


def test_conv2d_bias_is_keyword_only():
    """PyTorch's Conv2d takes dilation as its 6th positional argument: tl.Conv2d(3, 8, 3, 1, 1, 2), which read 2 as
    bias, raises TypeError; stride and padding positionally with bias by keyword give PyTorch's output and float64
    gradients (weights copied, random input)."""
    need_torch()
    raises(TypeError, lambda: tl.Conv2d(3, 8, 3, 1, 1, 2), 'positional')
    assert tuple(torch.nn.Conv2d(3, 8, 3, 1, 1, 2)(torch.ones(1, 3, 8, 8)).shape) == (1, 8, 6, 6)   # dilated
    r = rng('conv2d positional')
    for bias in (True, False):
        ours, theirs = tl.Conv2d(3, 4, 3, 2, 1, bias=bias).double(), torch.nn.Conv2d(3, 4, 3, 2, 1, bias=bias).double()
        perturb_torch(theirs, r)
        ours.load_state_dict(theirs.state_dict())
        x = sample(r, (2, 3, 7, 7))
        xs, xs_t = tl.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, out_t = ours(xs), theirs(xs_t)
        assert_close(out, out_t, 1e-12, 1e-12)
        w = upstream(0, out.shape)
        (out * tl.Tensor(w)).sum().backward()
        (out_t * torch.tensor(w)).sum().backward()
        assert_close(xs.grad, xs_t.grad, 1e-12, 1e-12, 'x')
        for (n, p), p_t in zip(ours.named_parameters(), theirs.parameters(), strict=True):
            assert_close(p.grad, p_t.grad, 1e-12, 1e-12, n)


def test_gru_output_shapes():
    out, h = tl.GRU(3, 5, num_layers=2, batch_first=True)(tl.Tensor(sample(rng('gs'), (2, 7, 3)).astype(np.float32)))
    assert out.shape == (2, 7, 5) and h.shape == (2, 2, 5)
    assert_close(out[:, -1], h[-1], 0, 0)


def test_gru_h_n_has_its_own_memory_as_pytorch():
    """h_n of one layer and direction is a copy of the output's last step, as PyTorch's: writing the output in place
    under no_grad leaves h_n as it was, and in grad mode h_n's in-place update is recorded, the output unchanged."""
    x0 = sample(rng('h_n memory'), (4, 2, 3)).astype(np.float32)
    for batch_first in (False, True):
        gru = tl.GRU(3, 5, batch_first=batch_first)
        with tl.no_grad():
            out, h = gru(tl.tensor(x0))
            before = h.numpy().copy()
            out *= 0
            assert np.array_equal(h.numpy(), before) and not np.shares_memory(out.data, h.data), batch_first
        out, h = gru(tl.tensor(x0))
        before = out.detach().numpy().copy()
        h += 1   # recorded (h_n no view of the output, which the op taking its last step still holds)
        (out.sum() + h.sum()).backward()
        assert np.array_equal(out.detach().numpy(), before), batch_first
        assert all(p.grad is not None for p in gru.parameters()), batch_first


def test_gru_unbatched_input_as_pytorch():
    """GRU on an unbatched (T, in) input (batch_first or not) with h0 (num_layers, H) or none: PyTorch's output (T, H),
    h_n (num_layers, H) and float64 gradients of x, h0 and every parameter (weights copied, random data, 1 and 2
    layers). A 3-D h0 with a 2-D input, or a 1-D input, raises ValueError naming the shape."""
    need_torch()
    r = rng('gru unbatched')
    for layers, batch_first, with_h0 in ((1, False, True), (2, True, True), (2, False, False)):
        ours = tl.GRU(3, 4, num_layers=layers, batch_first=batch_first).double()
        theirs = torch.nn.GRU(3, 4, num_layers=layers, batch_first=batch_first).double()
        perturb_torch(theirs, r)
        ours.load_state_dict(theirs.state_dict())
        x, h0 = sample(r, (5, 3)), sample(r, (layers, 4))
        args = [tl.Tensor(x, requires_grad=True)] + ([tl.Tensor(h0, requires_grad=True)] if with_h0 else [])
        args_t = [torch.tensor(x, requires_grad=True)] + ([torch.tensor(h0, requires_grad=True)] if with_h0 else [])
        (out, h_n), (out_t, h_n_t) = ours(*args), theirs(*args_t)
        assert out.shape == tuple(out_t.shape) == (5, 4) and h_n.shape == tuple(h_n_t.shape) == (layers, 4)
        assert_close(out, out_t, 1e-12, 1e-12, 'output')
        assert_close(h_n, h_n_t, 1e-12, 1e-12, 'h_n')
        w, wh = upstream(0, out.shape), upstream(1, h_n.shape)
        ((out * tl.Tensor(w)).sum() + (h_n * tl.Tensor(wh)).sum()).backward()
        ((out_t * torch.tensor(w)).sum() + (h_n_t * torch.tensor(wh)).sum()).backward()
        names = ['x', 'h0'][:len(args)] + [n for n, _ in ours.named_parameters()]
        for a, b, name in zip(args + list(ours.parameters()), args_t + list(theirs.parameters()), names, strict=True):
            assert_close(a.grad, b.grad, 1e-12, 1e-12, name)
    gru, gru_t = tl.GRU(3, 4).double(), torch.nn.GRU(3, 4).double()
    raises(RuntimeError, lambda: gru_t(torch.zeros(5, 3).double(), torch.zeros(1, 1, 4).double()), 'unbatched')
    msg = raises(ValueError, lambda: gru(tl.Tensor(np.zeros((5, 3))), tl.Tensor(np.zeros((1, 1, 4)))), 'h0')
    assert_names_shapes(msg, (1, 1, 4), (1, 4))
    msg = raises(ValueError, lambda: gru(tl.Tensor(np.zeros(3))), 'unbatched')
    assert_names_shapes(msg, (3,))


def test_gru_and_gru_cell_take_pytorchs_keyword_hx():
    """GRU(x, hx=h0) and GRUCell(x, hx=h) as PyTorch's keyword: the same output as h0 given by position, and as
    PyTorch's with copied weights (float64); giving both names raises TypeError naming them."""
    r = rng('gru hx')
    for ours, theirs, shape in ((tl.GRU(3, 4), torch and torch.nn.GRU(3, 4), (1, 2, 4)),
                                (tl.GRUCell(3, 4), torch and torch.nn.GRUCell(3, 4), (2, 4))):
        ours = ours.double()
        x, h = sample(r, (5, 2, 3)[-len(shape):]), sample(r, shape)
        got = ours(tl.Tensor(x), hx=tl.Tensor(h))
        got = got[0] if isinstance(got, tuple) else got
        by_position = ours(tl.Tensor(x), tl.Tensor(h))
        assert_close(got, by_position[0] if isinstance(by_position, tuple) else by_position, 0, 0, 'hx=')
        name = 'h0' if isinstance(ours, tl.GRU) else 'h'
        raises(TypeError, lambda: ours(tl.Tensor(x), **{name: tl.Tensor(h), 'hx': tl.Tensor(h)}), 'hx', name)
        if torch is not None:
            theirs = theirs.double()
            ours.load_state_dict(theirs.state_dict())
            want = theirs(torch.tensor(x), hx=torch.tensor(h))
            got = ours(tl.Tensor(x), hx=tl.Tensor(h))
            assert_close(got[0] if isinstance(got, tuple) else got, want[0] if isinstance(want, tuple) else want,
                         1e-12, 1e-12, f'{type(ours).__name__} hx= against PyTorch')


def gru_against_torch(ours, theirs, x, h0=None, tol=1e-9):
    """ours and theirs (weights copied) on float64 x [and h0]: the same output and h_n, and the same gradients of x, h0
    and every parameter for a loss weighting both."""
    args = [tl.Tensor(a, requires_grad=True) for a in (x, h0) if a is not None]
    args_t = [torch.tensor(a, requires_grad=True) for a in (x, h0) if a is not None]
    (out, h_n), (out_t, h_n_t) = ours(*args), theirs(*args_t)
    assert (out.shape, h_n.shape) == (tuple(out_t.shape), tuple(h_n_t.shape)), (out.shape, h_n.shape)
    assert_close(out, out_t, tol, tol, 'output')
    assert_close(h_n, h_n_t, tol, tol, 'h_n')
    w, wh = upstream(0, out.shape), upstream(1, h_n.shape)
    ((out * tl.Tensor(w)).sum() + (h_n * tl.Tensor(wh)).sum()).backward()
    ((out_t * torch.tensor(w)).sum() + (h_n_t * torch.tensor(wh)).sum()).backward()
    names = ['x', 'h0'][:len(args)] + [n for n, _ in ours.named_parameters()]
    for a, b, name in zip(args + list(ours.parameters()), args_t + list(theirs.parameters()), names, strict=True):
        assert_close(a.grad, b.grad, tol, tol, f'grad of {name}')
    return out


def test_gru_bidirectional_as_pytorch():
    """Bidirectional GRUs (and a one-way one with dropout) against torch.nn.GRU, weights copied, float64: output
    (T, B, 2H), h_n (2 * num_layers, B, H) and the gradients of x, h0 and every parameter, for 1 to 3 layers,
    batch_first or not, with and without bias and h0, hidden sizes not a multiple of 32, batch 1, T = 1, unbatched
    (T, in) inputs, and dropout > 0 in eval mode (off, as PyTorch's)."""
    need_torch()
    r = rng('gru bidirectional')
    for layers, batch_first, bias, with_h0, shape, hidden, p, bidir in (
            (1, False, True, True, (5, 3, 4), 33, 0.0, True), (2, True, True, True, (3, 6, 4), 33, 0.0, True),
            (2, False, False, False, (6, 2, 4), 7, 0.0, True), (1, True, False, True, (1, 1, 4), 5, 0.0, True),
            (2, False, True, True, (1, 1, 4), 33, 0.0, True), (2, True, True, True, (4, 4), 6, 0.0, True),
            (1, False, True, False, (5, 4), 6, 0.0, True), (3, True, True, True, (2, 5, 4), 9, 0.5, True),
            (2, False, False, True, (4, 3, 4), 5, 0.3, False)):
        kw = dict(num_layers=layers, bias=bias, batch_first=batch_first, dropout=p, bidirectional=bidir)
        ours, theirs = tl.GRU(4, hidden, **kw).double(), torch.nn.GRU(4, hidden, **kw).double()
        assert param_shapes(ours) == param_shapes(theirs), (param_shapes(ours), param_shapes(theirs))
        perturb_torch(theirs, r)
        ours.load_state_dict(theirs.state_dict())
        if p:
            ours.eval(), theirs.eval()
        batch = () if len(shape) == 2 else (shape[0 if batch_first else 1],)
        h0 = sample(r, ((1 + bidir) * layers, *batch, hidden)) if with_h0 else None
        out = gru_against_torch(ours, theirs, sample(r, shape), h0)
        assert out.shape == shape[:-1] + ((1 + bidir) * hidden,), (kw, out.shape)


def test_gru_dropout_in_training_between_layers():
    """In training, a 3-layer bidirectional GRU with dropout 0.4 gives exactly the output, h_n and gradients (of x, h0
    and every parameter) of its layers run one by one as 1-layer GRUs with tl.dropout(0.4) on the output of each but
    the last, from the same seed; its output differs from the eval-mode one and from another seed's. One layer with
    dropout 0.9 in training (no layer after it to drop for) gives torch's training-mode results."""
    need_torch()
    r = rng('gru dropout training')
    gru = tl.GRU(3, 5, num_layers=3, batch_first=True, dropout=0.4, bidirectional=True).double()
    layers = [tl.GRU(3 if k == 0 else 10, 5, bidirectional=True).double() for k in range(3)]

    def own_parameter(name):   # gru's parameter `name` (weight_ih_l1_reverse, ...) in its layer's 1-layer GRU
        k = int(name.rsplit('_l', 1)[1].split('_')[0])
        return getattr(layers[k], name.replace(f'_l{k}', '_l0'))

    for n, p in gru.named_parameters():
        own_parameter(n).data[...] = p.data
    x, h0 = sample(r, (2, 4, 3)), sample(r, (6, 2, 5))

    def by_hand(x, h0):
        y, finals = x.transpose(0, 1), []
        for k, layer in enumerate(layers):
            y, h = layer(tl.dropout(y, 0.4) if k else y, h0[2 * k:2 * k + 2])
            finals.append(h)
        return y.transpose(0, 1), tl.cat(finals)

    results = []
    for run, seed in ((gru, 5), (by_hand, 5), (gru, 6)):
        tl.manual_seed(seed)
        gru.zero_grad()
        xs = [tl.Tensor(x, requires_grad=True), tl.Tensor(h0, requires_grad=True)]
        out, h_n = run(*xs)
        ((out * tl.Tensor(upstream(0, out.shape))).sum() + (h_n * tl.Tensor(upstream(1, h_n.shape))).sum()).backward()
        grads = [(p if run is gru else own_parameter(n)).grad for n, p in gru.named_parameters()]
        results.append([out, h_n] + [t.grad for t in xs] + grads)
    for k, (a, b) in enumerate(zip(*results[:2])):
        assert_close(a, b, 0, 0, f'result {k}')
    with tl.no_grad():
        evaluated = gru.eval()(tl.Tensor(x), tl.Tensor(h0))[0].numpy()
    assert np.abs(evaluated - results[0][0].numpy()).max() > 0.01, 'dropout did nothing in training'
    assert np.abs(results[2][0].numpy() - results[0][0].numpy()).max() > 0.01, 'the mask did not change with the seed'
    with warnings.catch_warnings():   # dropout with one layer: PyTorch's warning
        warnings.simplefilter('ignore')
        ours, theirs = (nn.GRU(3, 5, dropout=0.9, bidirectional=True).double() for nn in (tl, torch.nn))
    ours.load_state_dict(theirs.state_dict())
    gru_against_torch(ours, theirs, sample(r, (4, 2, 3)), sample(r, (2, 2, 5)))


def test_gru_dropout_one_in_training_as_pytorch():
    """dropout=1.0 in training zeroes every layer's input but the first's, as PyTorch's: a 2-layer bidirectional GRU
    (and a 3-layer one-way one, batch_first) give torch's training-mode output, h_n and every gradient (layer 0's
    parameters through h_n alone)."""
    need_torch()
    r = rng('gru dropout 1')
    for kw, shape, h0_shape in ((dict(num_layers=2, bidirectional=True), (4, 3, 3), (4, 3, 6)),
                                (dict(num_layers=3, batch_first=True), (2, 5, 3), (3, 2, 6))):
        ours, theirs = tl.GRU(3, 6, dropout=1.0, **kw).double(), torch.nn.GRU(3, 6, dropout=1.0, **kw).double()
        perturb_torch(theirs, r)
        ours.load_state_dict(theirs.state_dict())
        assert ours.training and theirs.training
        gru_against_torch(ours, theirs, sample(r, shape), sample(r, h0_shape))


def test_gru_dropout_bidirectional_arguments_as_pytorch():
    """GRU's dropout and bidirectional as torch.nn.GRU's: parameters in PyTorch's order and shapes; a torch state dict
    loads (and ours loads into torch) with the same results; repr as PyTorch's; flatten_parameters() a no-op returning
    None; a dropout that is not a number in [0, 1] raises ValueError naming it; dropout > 0 with one layer warns
    PyTorch's UserWarning (and nothing else warns); h0 of a one-way shape for a bidirectional GRU raises ValueError
    naming both shapes; a one-way state dict into a bidirectional GRU raises naming the missing keys."""
    need_torch()
    for args, kw in (((3, 5), dict(num_layers=2, bias=False, batch_first=True, dropout=0.2, bidirectional=True)),
                     ((3, 5), dict(bidirectional=True)), ((3, 5, 2), dict(dropout=1)), ((3, 5), dict(dropout=0.0)),
                     ((4, 2, 3), dict(dropout=np.float32(0.25), bidirectional=True))):
        ours, theirs = tl.GRU(*args, **kw), torch.nn.GRU(*args, **kw)
        assert repr(ours) == repr(theirs), (repr(ours), repr(theirs))
        assert param_shapes(ours) == param_shapes(theirs), (param_shapes(ours), param_shapes(theirs))
        assert ours.flatten_parameters() is None and theirs.flatten_parameters() is None
    r = rng('gru bidirectional state')
    theirs = torch.nn.GRU(3, 4, num_layers=2, dropout=0.5, bidirectional=True).double()
    perturb_torch(theirs, r)
    ours = tl.GRU(3, 4, num_layers=2, dropout=0.5, bidirectional=True).double()
    ours.load_state_dict(theirs.state_dict())
    want = torch_state(theirs)
    assert list(ours.state_dict()) == list(want)
    for k, v in ours.state_dict().items():
        assert_close(v, want[k], 0, 0, k)
    fresh, back = (nn.GRU(3, 4, 2, dropout=0.5, bidirectional=True) for nn in (tl, torch.nn))
    back.load_state_dict({k: torch.from_numpy(v) for k, v in fresh.state_dict().items()})
    x = sample(r, (5, 2, 3)).astype(np.float32)
    with tl.no_grad(), torch.no_grad():
        fresh.eval(), back.eval()
        for got, want in zip(fresh(tl.Tensor(x)), back(torch.tensor(x))):
            assert_close(got, want, 1e-5, 1e-6, 'our weights in torch')
    for bad in (-0.1, 1.5, float('nan'), '0.2', True, None):
        raises(ValueError, lambda: tl.GRU(3, 4, 2, dropout=bad), 'dropout', repr(bad))
        raises(TypeError if bad is None else ValueError, lambda: torch.nn.GRU(3, 4, 2, dropout=bad))   # float(None)
    for layers, p in ((1, 0.2), (1, 1), (2, 0.2), (1, 0.0), (2, 1.0)):
        caught = []
        for nn in (tl, torch.nn):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter('always')
                nn.GRU(3, 4, layers, dropout=p, bidirectional=True)
            caught.append([(x.category, str(x.message)) for x in w])
        assert caught[0] == caught[1], caught
        assert len(caught[0]) == (layers == 1 and p > 0) and all(c is UserWarning for c, _ in caught[0]), caught
    gru, gru_t = tl.GRU(3, 4, 2, bidirectional=True).double(), torch.nn.GRU(3, 4, 2, bidirectional=True).double()
    raises(RuntimeError, lambda: gru_t(torch.zeros(5, 2, 3).double(), torch.zeros(2, 2, 4).double()), 'hidden size')
    msg = raises(ValueError, lambda: gru(tl.Tensor(np.zeros((5, 2, 3))), tl.Tensor(np.zeros((2, 2, 4)))), 'h0')
    assert_names_shapes(msg, (2, 2, 4), (4, 2, 4))
    raises(RuntimeError, lambda: gru.load_state_dict(tl.GRU(3, 4, 2).state_dict()), 'weight_ih_l0_reverse')


def test_error_gru_dtype_mismatch_named():
    """A GRU's or GRUCell's input of one dtype with a hidden state or a parameter of another: a TypeError naming the
    module, the tensor (h0 for GRU, h for GRUCell, or the parameter) and both dtypes; nothing is computed, so no
    gradient appears."""
    tl.manual_seed(0)
    gru, cell = tl.GRU(3, 4), tl.GRUCell(3, 4)
    x, h = tl.ones(2, 1, 3), tl.zeros(1, 4, dtype=np.float64)
    h0 = tl.zeros(1, 1, 4, dtype=np.float64, requires_grad=True)
    raises(TypeError, lambda: gru(x, h0), 'GRU:', 'h0 of dtype float64', 'input of dtype float32')
    assert h0.grad is None
    raises(TypeError, lambda: cell(x[0], h), 'GRUCell:', 'h of dtype float64', 'input of dtype float32')
    raises(TypeError, lambda: gru(x.double()), 'GRU:', 'weight_ih of dtype float32', 'input of dtype float64')
    raises(TypeError, lambda: cell(x[0].double()), 'GRUCell:', 'weight_ih of dtype float32')
    assert all(p.grad is None for p in (*gru.parameters(), *cell.parameters()))


def check_gru_empty_batch(device):
    """GRU and GRUCell over a batch of 0 on `device`: empty outputs and h_n, every gradient there with its shape and
    zero (PyTorch's result); a GRU input of sequence length 0 is refused naming its shape (PyTorch refuses it)."""
    for batch_first in (False, True):
        gru = tl.GRU(3, 5, num_layers=2, batch_first=batch_first).to(device)
        shape, no_steps = ((0, 4, 3), (4, 0, 3)) if batch_first else ((4, 0, 3), (0, 4, 3))
        x = tl.Tensor(np.zeros(shape, np.float32), requires_grad=True, device=device)
        out, h = gru(x, tl.Tensor(np.zeros((2, 0, 5), np.float32), device=device))
        assert out.shape == shape[:2] + (5,) and h.shape == (2, 0, 5), (out.shape, h.shape)
        (out.sum() + h.sum()).backward()
        assert x.grad.shape == shape and x.grad.device == x.device
        for name, p in gru.named_parameters():
            assert p.grad is not None and p.grad.shape == p.shape and not p.grad.numpy().any(), name
        msg = raises(ValueError, lambda: gru(tl.Tensor(np.zeros(no_steps, np.float32), device=device)), 'sequence length')
        assert_names_shapes(msg, no_steps)
    cell = tl.GRUCell(3, 5).to(device)
    x = tl.Tensor(np.zeros((0, 3), np.float32), requires_grad=True, device=device)
    h = cell(x, tl.Tensor(np.zeros((0, 5), np.float32), device=device))
    h.sum().backward()
    assert h.shape == (0, 5) and x.grad.shape == (0, 3) and not cell.weight_hh.grad.numpy().any()
    if torch is not None:   # the same shapes from PyTorch
        out_t, h_t = torch.nn.GRU(3, 5, num_layers=2)(torch.zeros(4, 0, 3))
        assert tuple(out_t.shape) == (4, 0, 5) and tuple(h_t.shape) == (2, 0, 5)
        raises(RuntimeError, lambda: torch.nn.GRU(3, 5)(torch.zeros(0, 4, 3)), 'sequence length')


def test_gru_empty_batch():
    check_gru_empty_batch('cpu')


def test_gpu_gru_empty_batch():
    need_cuda()
    check_gru_empty_batch('cuda')


def test_gru_split_layouts_fit_their_kernels():
    """_gru_plan's k-split layouts (mma.sync and wgmma, whole and k-chunked) over many sizes, with the H200's figures
    (232448 bytes of shared memory, 66 / 30 / 15 resident clusters of 2 / 4 / 8, and 132 blocks alone for the f16
    forward's P = 1, which some layouts take): each covers the batch, the hidden units and (its k-slices) K, keeps its
    blocks resident and at most 4 cells a thread, and asks for the shared memory kernels.cu's Split addresses (W's rows,
    the operand's one or two buffers, the partial sums; wgmma: 1024 bytes of alignment slack, W's tail rows to an m-tile
    of 64, the operand's rows padded to WN; the float32 forward's f16 operands, _gru_half_operands: 2-byte values and N
    floats of scales), within the limit; a wgmma layout keeps to its tiles (KP and KC multiples of 128 bytes, at most 4
    m-tiles, batch rows at most WN). The forward on f16 wgmma (float16, or float32's f16 operands) also offers a batch
    group as one cluster of 8 or 16 blocks (15 and 7 of them resident, the H100's count): then nu is the cluster's size,
    the groups resident and at most 5 cells a thread; float32's take the operand in one chunk, in two buffers (pushed
    between the blocks), within 16 bytes less (the kernel's two mbarriers, static)."""
    up = lambda a, b: -(-a // b) * b
    smem_max, resident, seen = 232448, {1: 132, 2: 66, 4: 30, 8: 15}, collections.Counter()
    group_resident = {8: 15, 16: 7}
    for batch, hidden, forward, itemsize, wgmma, cap, half in itertools.product(
            (1, 5, 16, 33, 64, 100, 256), (8, 50, 128, 300, 512, 1024), (True, False), (4, 2), (False, True, 'only'),
            (None, 32), (True, False)):
        splits = tuple((p, n, tl._GRU_WG if wgmma and itemsize == 4 else ()) for p, n in resident.items()
                       if p > 1 or (half and wgmma and itemsize == 4 and forward))   # P = 1: the f16 forward's
        if wgmma and forward and (half or itemsize == 2):   # f16 wgmma's batch groups as one cluster of 8 or 16
            splits += tuple((1, n, tl._GRU_GROUP_WG, g) for g, n in group_resident.items())
        with mock.patch.object(tl, '_gru_wgmma', wgmma), mock.patch.object(tl, '_gru_chunk_cap', cap), \
                mock.patch.object(tl, '_gru_half_operands', half):
            layout = tl._gru_plan(forward, 0, smem_max, batch, hidden, itemsize, 1, False, splits)
        if layout is None:
            continue
        groups, slices, units, rows, kp, smem, size, kc, wn, group, regs = layout
        what = (f'B {batch} H {hidden} {("bwd", "fwd")[forward]} itemsize {itemsize} wgmma {wgmma} cap {cap} half '
                f'{half}: {layout}')
        (k, nq), jp, mtp = (hidden, 3) if forward else (3 * hidden, 1), up(units, 8), up(rows, 16)
        pushed = group and itemsize == 4   # float32's groups push the operand between their blocks: two buffers
        bufs = 1 + (kc < kp or pushed)
        assert groups * rows >= batch and slices * units >= hidden and size * kp >= k, what
        if group:   # clusters of a batch group each: up to 5 cells a thread
            assert size == 1 and slices == group and groups <= group_resident[group] and wn, what
            assert -(-rows * units // 256) <= 5, what
        else:
            assert groups * slices <= resident[size] and -(-(-(-rows * units // 256)) // size) <= 4, what
        ob = 2 if wn and forward and half else itemsize   # bytes an operand value
        assert 0 < kc <= kp and kc % (128 // ob if wn else 16) == 0, what
        if wn:
            n = nq * jp
            assert (itemsize == 4 or group) and rows <= wn and up(n, 64) <= 256 and kp % (128 // ob) == 0, what
            kernel = 1024 + ob * (n * kp + 128 // ob * (up(n, 64) - n) + bufs * wn * kc) + 4 * wn * (up(n, 32) + 4) \
                + (4 * n if ob < itemsize else 0)
            # float32's groups push the operand in one chunk, beside 16 bytes of static shared memory
            assert not (pushed and (kc < kp or kernel > smem_max - 16)), what
        else:
            n, ld = up(nq * jp, 24 if forward else 32), lambda c: up(c, 128 // itemsize) + 16 // itemsize   # smem_ld
            kernel = itemsize * (n * ld(kp) + bufs * mtp * ld(kc)) + 4 * mtp * (n + 8)
        assert smem == kernel <= smem_max, f'{what}: the kernel addresses {kernel} bytes'
        seen[wn and ob, bufs] += 1
        seen['alone'] += size == 1
        seen['group', group, itemsize] += 1
    assert all(seen[w, b] for w in (False, 2, 4) for b in (1, 2)) and seen['alone'], \
        f'layouts (wgmma operand bytes, buffers; P = 1): {dict(seen)}'
    assert all(seen['group', g, i] for g in (8, 16) for i in (2, 4)), f'layouts (groups as one cluster): {dict(seen)}'


# _gru_splits' answer on the H200 (every kernel loaded): its k-split clusters of 2, 4 and 8 resident, and its batch
# groups as one cluster of 8 or 16
GRU_H200_SPLITS = tuple((p, n, tl._GRU_WG) for p, n in ((2, 66), (4, 30), (8, 15))) + \
    tuple((1, n, tl._GRU_GROUP_WG, g) for g, n in ((8, 15), (16, 7)))


def test_gru_choice_lists_candidates_to_time():
    """With tl.gru_autotune (the default) _gru_plans keeps, for each direction, the layouts _gru_candidates picks from
    _gru_plan's ranking, each once and each a layout the ranking holds: the model's choice first, then its near-ties
    (within 2% of its cost, at most _GRU_TUNE_TIES, the most blocks first), then for each other kind until
    _GRU_TUNE_KINDS kinds are in, its cheapest layouts of the fewest, the most and the median blocks; untimed, a run
    launches the choice (_gru_used). A single candidate is kept as the layout itself, and without tl.gru_autotune it
    is the model's choice. Each family's cheapest kind (unsplit, k-split, the forward's batch group as one cluster)
    is among them."""
    family = lambda layout: (layout[7] > 0) + (layout[9] > 0)
    kind = lambda layout: (layout[6], layout[7] > 0, layout[8], layout[1], layout[9])   # cluster, split, WN, nu, G
    lists = 0
    for batch, hidden, forward, itemsize in itertools.product((1, 16, 256), (8, 128, 512), (True, False), (4, 2)):
        key = (132, 232448, batch, hidden, itemsize, 1, True)
        ranked, what = [], f'B {batch} H {hidden} {("bwd", "fwd")[forward]} itemsize {itemsize}'
        chosen = tl._gru_plan(forward, *key, GRU_H200_SPLITS, ranked=ranked)
        with mock.patch.object(tl, '_gru_splits', lambda *args: GRU_H200_SPLITS), \
                mock.patch.object(tl, '_gru_regs', lambda *args: ()):
            tuned = tl._gru_choice(forward, key, np.float32 if itemsize == 4 else np.float16)
            with mock.patch.object(tl, 'gru_autotune', False):
                assert tl._gru_choice(forward, key, np.float32) == chosen, what
        assert tl._gru_used(tuned) == chosen, what   # what a run launches before (or without) the timing
        if not isinstance(tuned, list):
            assert tuned == chosen, what
            continue
        lists += 1
        cost = {e[3]: e[0] + e[1] for e in ranked}
        ties = [e[3] for e in sorted(ranked, key=lambda e: (e[0] + e[1], -e[2]))
                if e[0] + e[1] <= 1.02 * cost[chosen] and e[3] != chosen][:tl._GRU_TUNE_TIES]
        assert tuned[0] == chosen and len(set(tuned)) == len(tuned) > 1 and set(tuned) <= set(cost), what
        assert tuned[1:1 + len(ties)] == ties, what
        kinds = {kind(layout) for layout in tuned}
        assert len(kinds) == min(tl._GRU_TUNE_KINDS, len({kind(e[3]) for e in ranked})), what
        first = {kind(layout) for layout in tuned[:1 + len(ties)]}
        assert not first & {kind(layout) for layout in tuned[1 + len(ties):]}, what
        fewest = sorted(ranked, key=lambda e: (e[0] + e[1], e[2]))
        for f in {family(e[3]) for e in ranked}:   # each family's leader's kind
            assert kind(next(e[3] for e in fewest if family(e[3]) == f)) in kinds, (what, f)
        for k in kinds - first:   # each other kind's cheapest layouts of the fewest, the median and the most blocks
            least = min(cost[e[3]] for e in ranked if kind(e[3]) == k)
            cheapest = [e for e in ranked if kind(e[3]) == k and cost[e[3]] == least]
            counts = sorted(e[2] for e in cheapest)
            fewest = min(cheapest, key=lambda e: e[2])
            for blocks in (counts[-1], counts[len(counts) // 2]):
                assert any(e[2] == blocks and e[3] in tuned for e in cheapest), (what, k, blocks)
            assert fewest[3] in tuned and sum(kind(layout) == k for layout in tuned) <= 3, (what, k)
    assert lists > 20, lists
    key = (132, 232448, 16, 128, 4, 1, True)   # one candidate (the choice alone): the layout itself, not a list
    chosen = tl._gru_plan(True, *key, GRU_H200_SPLITS)
    alone = lambda ranked, choice, *args: [e for e in ranked if e[3] == choice]
    with mock.patch.object(tl, '_gru_splits', lambda *args: GRU_H200_SPLITS), \
            mock.patch.object(tl, '_gru_regs', lambda *args: ()), mock.patch.object(tl, '_gru_candidates', alone):
        assert tl._gru_choice(True, key, np.float32) == chosen


def test_gru_plan_ranks_its_choice():
    """_gru_plan's `ranked` list (bench.py's gru_parts table times it) holds the layouts it chose among: with the
    H200's figures, over batches, hidden sizes, both directions and dtypes, with and without the k-split kernels, the
    choice is the least clocks of the eligible unsplit layouts (fewer blocks on a tie) unless the least of the k-split
    ones beats it plus its L2 reads (an exact tie, B 145 H 224, keeps the unsplit one); a cooperative layout's L2 read
    is its operand rows at 2800 bytes a clock, the others' none; ranking leaves the choice as it was; the backward's
    clusters past 4 blocks are ranked, never chosen; and every ranked layout fits the shared memory."""
    resident, smem_max, shapes = {2: 66, 4: 30, 8: 15}, 232448, collections.Counter()
    for batch, hidden, forward, itemsize, with_splits in [*itertools.product(
            (1, 16, 64, 256), (8, 128, 256, 512), (True, False), (4, 2), (False, True)), (145, 224, True, 2, True)]:
        splits = tuple((p, n, tl._GRU_WG if itemsize == 4 else ()) for p, n in resident.items()) if with_splits else ()
        args, ranked = (forward, 132, smem_max, batch, hidden, itemsize, 1, True, splits), []
        chosen = tl._gru_plan(*args, ranked=ranked)
        what = f'B {batch} H {hidden} {("bwd", "fwd")[forward]} itemsize {itemsize} splits {with_splits}: {chosen}'
        assert chosen == tl._gru_plan(*args), what
        unsplit, split = (min((e for e in ranked if e[4] and bool(e[3][7]) == s), key=lambda e: (e[0], e[2]),
                              default=None) for s in (False, True))   # the first of the least (clocks, blocks)
        want = split if split and not (unsplit and unsplit[0] + unsplit[1] <= split[0]) else unsplit
        assert chosen == (want and want[3]), what
        for _, read, _, layout, eligible in ranked:
            groups, slices, _, rows, _, _, cluster, split, _, _, _ = layout   # a cooperative layout: from L2
            operand = groups * slices * -(-rows // 16) * 16 * (hidden if forward else 3 * hidden) * itemsize
            assert read == (0 if cluster or split else operand / 2800), what   # at 2800 bytes a clock
            assert layout[5] <= smem_max and read >= 0, what
            assert eligible == (forward or layout[7] > 0 or layout[6] <= 4), what
            shapes[forward, eligible] += 1
    assert shapes[False, False] and shapes[True, True] and shapes[False, True], dict(shapes)


def test_gru_plan_offers_regs_layouts():
    """With the regs kernels loaded (`regs`), _gru_plan ranks either way, where the hidden size is at most 16 times the
    largest of _GRU_REGS, a layout of each batch group from 1 to _GRU_REGS_ROWS rows (a block each, as many blocks as
    that takes), with the least KT that holds the hidden size, no shared memory and no L2 reads; none for a larger
    hidden size, and without `regs` the ranking is as before. At (16, 128) the forward's choice is a row a block (on
    the H200 1.14 us a step against the cluster kernels' best 1.9: PERF_NOTES.md)."""
    for batch, hidden, forward, itemsize in itertools.product((1, 5, 16, 300), (8, 50, 128, 129), (True, False),
                                                              (4, 2)):
        args, ranked, without = (forward, 132, 232448, batch, hidden, itemsize, 1, True, GRU_H200_SPLITS), [], []
        chosen = tl._gru_plan(*args, ranked=ranked, regs=tl._GRU_REGS)
        before = tl._gru_plan(*args, ranked=without)
        what = f'B {batch} H {hidden} {("bwd", "fwd")[forward]} itemsize {itemsize}: {chosen}'
        regs = [e for e in ranked if e[3][10]]
        assert [e for e in ranked if not e[3][10]] == without and not any(e[3][10] for e in without), what
        assert chosen == before or chosen[10], what
        if hidden > 16 * max(tl._GRU_REGS):
            assert not regs, what
            continue
        kt = min(n for n in tl._GRU_REGS if 16 * n >= hidden)
        assert sorted(e[3][3] for e in regs) == list(range(1, min(batch, tl._GRU_REGS_ROWS) + 1)), what
        for _, read, blocks, layout, eligible in regs:
            rows = layout[3]
            assert layout == (-(-batch // rows), 1, hidden, rows, hidden, 0, 0, 0, 0, 0, kt), what
            assert read == 0 and eligible and blocks == layout[0], what
    chosen = tl._gru_plan(True, 132, 232448, 16, 128, 4, 1, True, GRU_H200_SPLITS, regs=tl._GRU_REGS)
    assert chosen == (16, 1, 128, 1, 128, 0, 0, 0, 0, 0, 8), chosen


# ===== default initialisation against PyTorch's =====

INITS = [('linear', lambda nn: nn.Linear(256, 512)), ('conv2d', lambda nn: nn.Conv2d(16, 256, 3)),
         ('embedding', lambda nn: nn.Embedding(100, 32)), ('batchnorm2d', lambda nn: nn.BatchNorm2d(300)),
         ('grucell', lambda nn: nn.GRUCell(16, 128)), ('gru', lambda nn: nn.GRU(16, 128, num_layers=2)),
         ('gru_bidir', lambda nn: nn.GRU(16, 128, num_layers=2, bidirectional=True)),
         ('layernorm', lambda nn: nn.LayerNorm((3, 5))), ('layernorm_nobias', lambda nn: nn.LayerNorm(7, bias=False))]


def check_init(make):
    need_torch()
    tl.manual_seed(0)
    torch.manual_seed(0)
    lm, tm = make(tl), make(torch.nn)
    assert param_shapes(lm) == param_shapes(tm)
    tp = dict(tm.named_parameters())
    for n, p in lm.named_parameters():
        a, b = p.numpy().ravel().astype(np.float64), tp[n].detach().numpy().ravel().astype(np.float64)
        assert p.dtype == np.float32 and isinstance(p, tl.Parameter) and p.requires_grad, n
        if b.std() == 0:
            assert_close(a, b, 0, 0, n)
            continue
        s, tol = b.std(), max(0.1, 8 / np.sqrt(b.size))  # tol: about 4 sigma of two samples' difference
        assert abs(a.std() / s - 1) < tol / 2, f'{n}: std {a.std()} vs torch {s}'
        assert abs(a.mean() - b.mean()) < tol * s, f'{n}: mean {a.mean()} vs torch {b.mean()}'
        for q in (0.1, 0.5, 0.9):
            assert abs(np.quantile(a, q) - np.quantile(b, q)) < tol * s, f'{n}: quantile {q}'
        assert np.abs(a).max() <= 1.25 * np.abs(b).max(), f'{n}: max |w| {np.abs(a).max()} vs {np.abs(b).max()}'
    want = torch_state(tm)
    for k, v in lm.state_dict().items():
        if k not in tp:
            assert_close(v, want[k], 0, 0, f'buffer {k}')


for _name, _make in INITS:
    register(f'test_init_{_name}', lambda mk=_make: check_init(mk))


# ===== layers' device= and dtype= (PyTorch's factory keywords) =====
# A layer built with dtype= / device= equals the default one converted after (tl.manual_seed(0); Linear(3, 4,
# dtype=float64) == Linear(3, 4).double()): the default draws (float32, CPU, NumPy's generator), converted once.
# make(nn, **kw) builds the layer with nn = tl or torch.nn; inputs(r) its input arrays (float64, or indices).

FACTORY_LAYERS = [
    ('linear', lambda nn, **kw: nn.Linear(4, 3, **kw), shapes_in((2, 4))),
    ('conv2d', lambda nn, **kw: nn.Conv2d(2, 3, 3, padding=1, **kw), shapes_in((2, 2, 5, 5))),
    ('batchnorm1d', lambda nn, **kw: nn.BatchNorm1d(3, **kw), shapes_in((6, 3))),
    ('batchnorm2d', lambda nn, **kw: nn.BatchNorm2d(3, **kw), shapes_in((4, 3, 2, 2))),
    ('layernorm', lambda nn, **kw: nn.LayerNorm((2, 3), **kw), shapes_in((4, 2, 3))),
    ('embedding', lambda nn, **kw: nn.Embedding(10, 4, **kw), lambda r: [np.array([[1, 7, 1], [3, 1, 9]])]),
    ('grucell', lambda nn, **kw: nn.GRUCell(3, 4, **kw), shapes_in((2, 3), (2, 4))),
    ('gru', lambda nn, **kw: nn.GRU(3, 4, 2, bidirectional=True, **kw), shapes_in((5, 2, 3))),
]
# torch's arguments tinygrad_lite's constructors lack (signatures compared without them)
FACTORY_SKIPPED = {'Conv2d': {'dilation', 'groups', 'padding_mode'}, 'BatchNorm1d': {'bias'}, 'BatchNorm2d': {'bias'},
                   'GRU': {'proj_size'},
                   'Embedding': {'max_norm', 'norm_type', 'scale_grad_by_freq', 'sparse', '_weight',
                                 '_freeze'}}


def run_layer(m, arrays, dtype):
    """m's outputs (a tuple) and its parameters' gradients after sum(outputs).backward(), the float inputs in dtype."""
    outs = m(*[tl.Tensor(a.astype(dtype) if a.dtype.kind == 'f' else a) for a in arrays])
    outs = outs if isinstance(outs, tuple) else (outs,)
    sum(o.float().sum() for o in outs).backward()
    return outs, {n: p.grad for n, p in m.named_parameters()}


def check_factory_dtype(make, inputs):
    """dtype= as None, NumPy dtypes and names: each parameter and buffer in that dtype (num_batches_tracked int64, as
    PyTorch's) equal to the default layer's converted after, the state dict's keys and dtypes PyTorch's; a forward and
    backward in that dtype give the converted layer's outputs and gradients."""
    need_torch()
    default_keys = list(make(tl).state_dict())
    for dtype in (None, np.float64, 'float64', np.float16, 'float16'):
        tl.manual_seed(0)
        built = make(tl, dtype=dtype)
        tl.manual_seed(0)
        converted = make(tl) if dtype is None else make(tl).to(dtype)
        want_dtype = np.dtype(dtype or np.float32)
        theirs = make(torch.nn, dtype=getattr(torch, want_dtype.name)).state_dict()
        assert list(built.state_dict()) == default_keys == list(theirs), (list(built.state_dict()), list(theirs))
        want = converted.state_dict()
        for k, v in built.state_dict().items():
            assert v.dtype == want[k].dtype == (np.int64 if k == 'num_batches_tracked' else want_dtype), (k, v.dtype)
            assert same_dtype(tl.Tensor(v), theirs[k]) and np.array_equal(v, want[k]), (dtype, k)
        for n, p in built.named_parameters():
            assert isinstance(p, tl.Parameter) and p.requires_grad and p.is_leaf and p.device == 'cpu', n
        arrays = inputs(rng(('factory', default_keys)))
        (outs, grads), (want_outs, want_grads) = run_layer(built, arrays, want_dtype), run_layer(converted, arrays,
                                                                                                 want_dtype)
        for o, w in zip(outs, want_outs, strict=True):
            assert o.dtype == want_dtype and np.array_equal(o.numpy(), w.numpy()), (dtype, o.dtype)
        for n, g in grads.items():
            assert g.dtype == want_dtype and np.isfinite(g.numpy()).all(), (dtype, n)
            assert np.array_equal(g.numpy(), want_grads[n].numpy()), (dtype, n)


for _name, _make, _inputs in FACTORY_LAYERS:
    register(f'test_layer_dtype_keyword_{_name}', lambda mk=_make, i=_inputs: check_factory_dtype(mk, i))


def test_layer_factory_keywords_signatures_as_pytorch():
    """Each layer's arguments are torch.nn's, in torch's order, leaving out those of FACTORY_SKIPPED (GRU's compared
    with torch.nn.RNNBase's, as torch.nn.GRU's signature is (*args, **kwargs)); device and dtype last, None by default;
    our positional arguments are a prefix of torch's (so a positional call means what it means in PyTorch: device and
    dtype keyword-only where torch has an argument before them that we lack)."""
    need_torch()
    for name in ('Linear', 'Conv2d', 'BatchNorm1d', 'BatchNorm2d', 'LayerNorm', 'Embedding', 'GRUCell', 'GRU'):
        ours = inspect.signature(getattr(tl, name)).parameters
        theirs = dict(inspect.signature(torch.nn.RNNBase.__init__ if name == 'GRU' else getattr(torch.nn, name))
                      .parameters)
        for extra in ('self', 'mode') if name == 'GRU' else ():
            del theirs[extra]
        skipped = FACTORY_SKIPPED.get(name, set()) & set(theirs)   # (BatchNorm's bias: PyTorch 2.13's, not 2.11's)
        assert list(ours) == [p for p in theirs if p not in skipped], (name, list(ours), list(theirs))
        assert list(ours)[-2:] == ['device', 'dtype'] and ours['device'].default is ours['dtype'].default is None
        positional = lambda ps: [p for p, v in ps.items() if v.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert positional(ours) == positional(theirs)[:len(positional(ours))], (name, positional(ours))
    raises(TypeError, lambda: tl.Embedding(10, 4, None, 2.0), 'positional')   # torch's max_norm is not our device


def test_error_layer_factory_keywords():
    """A dtype that is not floating-point raises TypeError naming it and the layer (PyTorch refuses it too, with a
    RuntimeError: its parameters cannot require gradients); an unsupported dtype (complex64) TypeError naming it; an
    unknown device ValueError naming it; 'cuda' without CuPy or a GPU RuntimeError naming it and saying how to install
    CuPy."""
    need_torch()
    for name, make, _ in FACTORY_LAYERS:
        layer = type(make(tl)).__name__
        raises(RuntimeError, lambda: make(torch.nn, dtype=torch.int64), 'floating point')
        for dtype in (np.int64, 'int32', np.bool_, np.uint8):
            raises(TypeError, lambda: make(tl, dtype=dtype), layer, np.dtype(dtype).name)
        raises(TypeError, lambda: make(tl, dtype='complex64'), 'complex64')
        for device in ('tpu', 'gpu:0', 3):
            raises(ValueError, lambda: make(tl, device=device), repr(device))
        if not tl.cuda_is_available():
            for device in ('cuda', 'cuda:1'):
                raises(RuntimeError, lambda: make(tl, device=device), repr(device), 'install CuPy')
        m = make(tl, device='cpu:0', dtype=np.float32)   # PyTorch's names for the defaults
        assert {t.device for _, t, _ in m._named_tensors()} == {'cpu'}


def test_gpu_layer_factory_keywords():
    """device='cuda' (and 'cuda:0', with dtype float16): every parameter and buffer on the GPU in the dtype, the values
    those of the default CPU layer (the same draws, moved), and a forward on the GPU giving the CPU layer's outputs (its
    weights copied from the GPU one)."""
    need_cuda()
    for name, make, inputs in FACTORY_LAYERS:
        for device, dtype, tol in (('cuda', None, 1e-4), ('cuda:0', 'float16', 1e-2)):
            tl.manual_seed(0)
            gpu = make(tl, device=device, dtype=dtype)
            tl.manual_seed(0)
            default = make(tl)
            want_dtype = np.dtype(dtype or np.float32)
            for k, t, _ in gpu._named_tensors():
                assert t.device == 'cuda:0', (name, k, t.device)
                assert t.dtype == (np.int64 if k == 'num_batches_tracked' else want_dtype), (name, k, t.dtype)
            want = default.to(want_dtype).state_dict()
            for k, v in gpu.state_dict().items():
                assert np.array_equal(v, want[k]), (name, k)
            cpu = make(tl, dtype=dtype)
            cpu.load_state_dict(gpu.state_dict())
            arrays = [a.astype(want_dtype) if a.dtype.kind == 'f' else a for a in inputs(rng(('factory gpu', name)))]
            with tl.no_grad():
                got = gpu(*[tl.Tensor(a, device='cuda') for a in arrays])
                expected = cpu(*[tl.Tensor(a) for a in arrays])
            for g, w in zip(*(o if isinstance(o, tuple) else (o,) for o in (got, expected)), strict=True):
                assert g.device == 'cuda:0' and g.dtype == want_dtype
                assert_close(g.cpu(), w, tol, tol, f'{name} on {device}')


# ===== tl.init against torch.nn.init =====
# Our draws are not PyTorch's: each random initializer's sample (large tensors, where the bounds and the spread pin the
# fan and the gain) is held to the theoretical distribution, as PyTorch's sample of the same call is.

def truncated_normal(mean, std, a, b):
    """The theory of N(mean, std^2) truncated to [a, b]: its mean, std and bounds."""
    pdf = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = lambda x: (1 + math.erf(x / math.sqrt(2))) / 2
    lo, hi = (a - mean) / std, (b - mean) / std
    z = cdf(hi) - cdf(lo)
    shift = (pdf(lo) - pdf(hi)) / z
    return dict(mean=mean + std * shift, std=std * math.sqrt(1 + (lo * pdf(lo) - hi * pdf(hi)) / z - shift ** 2),
                lo=a, hi=b, density=(pdf(lo) / z / std, pdf(hi) / z / std))


def uniform_theory(bound, lo=None):
    lo = -bound if lo is None else lo
    return dict(mean=(lo + bound) / 2, std=(bound - lo) / math.sqrt(12), lo=lo, hi=bound,
                density=(1 / (bound - lo),) * 2)


def normal_theory(std, mean=0.0):
    return dict(mean=mean, std=std, lo=None, hi=None)


# (name, the call written once for init = tl.init or torch.nn.init, theory(fan_in, fan_out))
INIT_FILLS = [
    ('uniform', lambda I, w: I.uniform_(w, -0.3, 0.7), lambda fi, fo: uniform_theory(0.7, -0.3)),
    ('uniform_default', lambda I, w: I.uniform_(w), lambda fi, fo: uniform_theory(1.0, 0.0)),
    ('normal', lambda I, w: I.normal_(w, 0.5, 2.0), lambda fi, fo: normal_theory(2.0, 0.5)),
    ('normal_default', lambda I, w: I.normal_(w), lambda fi, fo: normal_theory(1.0)),
    ('xavier_uniform', lambda I, w: I.xavier_uniform_(w), lambda fi, fo: uniform_theory(math.sqrt(6 / (fi + fo)))),
    ('xavier_uniform_relu_gain', lambda I, w: I.xavier_uniform_(w, gain=I.calculate_gain('relu')),
     lambda fi, fo: uniform_theory(math.sqrt(2) * math.sqrt(6 / (fi + fo)))),
    ('xavier_normal', lambda I, w: I.xavier_normal_(w), lambda fi, fo: normal_theory(math.sqrt(2 / (fi + fo)))),
    ('xavier_normal_gain', lambda I, w: I.xavier_normal_(w, 0.5),
     lambda fi, fo: normal_theory(0.5 * math.sqrt(2 / (fi + fo)))),
    ('kaiming_uniform', lambda I, w: I.kaiming_uniform_(w),
     lambda fi, fo: uniform_theory(math.sqrt(2) * math.sqrt(3 / fi))),
    ('kaiming_uniform_sqrt5', lambda I, w: I.kaiming_uniform_(w, a=math.sqrt(5)),   # the layers' default
     lambda fi, fo: uniform_theory(1 / math.sqrt(fi))),
    ('kaiming_uniform_fan_out_relu', lambda I, w: I.kaiming_uniform_(w, mode='fan_out', nonlinearity='relu'),
     lambda fi, fo: uniform_theory(math.sqrt(2) * math.sqrt(3 / fo))),
    ('kaiming_normal', lambda I, w: I.kaiming_normal_(w), lambda fi, fo: normal_theory(math.sqrt(2 / fi))),
    ('kaiming_normal_leaky', lambda I, w: I.kaiming_normal_(w, 0.2),
     lambda fi, fo: normal_theory(math.sqrt(2 / 1.04 / fi))),
    ('kaiming_normal_fan_out_tanh', lambda I, w: I.kaiming_normal_(w, mode='fan_out', nonlinearity='tanh'),
     lambda fi, fo: normal_theory(5 / 3 / math.sqrt(fo))),
    ('kaiming_normal_linear', lambda I, w: I.kaiming_normal_(w, nonlinearity='linear'),
     lambda fi, fo: normal_theory(1 / math.sqrt(fi))),
    ('trunc_normal', lambda I, w: I.trunc_normal_(w), lambda fi, fo: truncated_normal(0, 1, -2, 2)),
    ('trunc_normal_vit', lambda I, w: I.trunc_normal_(w, std=0.02, a=-0.04, b=0.04),   # normal draws, redrawn
     lambda fi, fo: truncated_normal(0, 0.02, -0.04, 0.04)),
    ('trunc_normal_tail', lambda I, w: I.trunc_normal_(w, 0.0, 1.0, 1.0, 3.0),   # p < 0.3: uniform draws, accepted
     lambda fi, fo: truncated_normal(0, 1, 1, 3)),
    ('trunc_normal_beyond_b', lambda I, w: I.trunc_normal_(w, 1.0, 0.5, -1.0, 0.5),   # the mode at b
     lambda fi, fo: truncated_normal(1, 0.5, -1, 0.5)),
]
INIT_SHAPES = [(512, 512), (64, 32, 3, 3), (200, 1000)]   # fans (512, 512), (288, 576), (1000, 200)


def fans(shape):
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def check_sample(a, theory, dtype, msg, std_tol=0.03):
    """a (a sample) against theory: mean within 5 sigma, std within std_tol, bounds (rounded to the dtype) held and
    reached within 1% of the half-width (where the density there puts 20 draws in that 1%); a normal's share beyond 2
    std about 4.55%."""
    dtype = np.dtype(dtype)
    a = np.asarray(a).ravel()
    x = a.astype(np.float64)
    mean, std, lo, hi = theory['mean'], theory['std'], theory['lo'], theory['hi']
    assert abs(x.mean() - mean) < 5 * std / math.sqrt(x.size) + 2e-3 * std * (dtype == np.float16), \
        f'{msg}: mean {x.mean()} vs {mean}'
    assert abs(x.std() / std - 1) < std_tol, f'{msg}: std {x.std()} vs {std}'
    if lo is None:
        beyond = np.mean(np.abs(x - mean) > 2 * std)
        assert abs(beyond - 0.0455) < 0.01, f'{msg}: {beyond} beyond 2 std (normal: 0.0455)'
    else:
        width = (hi - lo) / 2
        assert a.min() >= np.asarray(lo).astype(dtype) and a.max() <= np.asarray(hi).astype(dtype), \
            f'{msg}: [{a.min()}, {a.max()}] outside [{lo}, {hi}]'
        reach_lo, reach_hi = (x.size * d * 0.01 * width >= 20 for d in theory['density'])
        assert (x.min() - lo < 0.01 * width or not reach_lo) and (hi - x.max() < 0.01 * width or not reach_hi), \
            f'{msg}: [{x.min()}, {x.max()}] does not reach [{lo}, {hi}] within 1%'


def check_init_fill(call, theory, device='cpu', torch_shapes=INIT_SHAPES):
    """The call on each shape in float32 (and on the conv shape in float16 and float64) returns its tensor, as it was
    but for the values, which follow theory; PyTorch's sample of the same call (CPU, float32, on torch_shapes) follows
    it too, and ours follows PyTorch's."""
    tl.manual_seed(0)
    cases = [(s, np.float32) for s in INIT_SHAPES] + [(INIT_SHAPES[1], np.float16), (INIT_SHAPES[1], np.float64)]
    for shape, dtype in cases:
        msg = f'{shape} {np.dtype(dtype).name} on {device}'
        w = tl.zeros(*shape, dtype=dtype, device=device)
        assert call(tl.init, w) is w, msg
        assert w.shape == shape and w.dtype == dtype and w.device.startswith(device) and w._version[0] == 1, msg
        check_sample(w.numpy(), theory(*fans(shape)), dtype, msg)
        if torch is not None and dtype == np.float32 and shape in torch_shapes:
            torch.manual_seed(0)
            theirs = call(torch.nn.init, torch.empty(shape)).numpy()
            check_sample(theirs, theory(*fans(shape)), dtype, f'torch: {msg}')
            ours, theirs, th = w.numpy().astype(np.float64), theirs.astype(np.float64), theory(*fans(shape))
            assert abs(ours.mean() - theirs.mean()) < 5 * th['std'] * math.sqrt(2 / ours.size), f'{msg}: mean vs torch'
            kurtosis = lambda v: np.mean((v - v.mean()) ** 4) / v.var() ** 2   # the std's standard error, two samples:
            se = math.sqrt((kurtosis(ours) + kurtosis(theirs) - 2) / (4 * ours.size))
            assert abs(ours.std() / theirs.std() - 1) < max(0.03, 5 * se), f'{msg}: std {ours.std()} vs torch {theirs.std()}'
            if th['lo'] is not None and (ours.size * min(th['density']) * 0.01 * (th['hi'] - th['lo']) / 2 >= 20):
                tol = 0.01 * (th['hi'] - th['lo']) / 2
                assert abs(ours.min() - theirs.min()) < tol and abs(ours.max() - theirs.max()) < tol, \
                    f'{msg}: [{ours.min()}, {ours.max()}] vs torch [{theirs.min()}, {theirs.max()}]'


for _name, _call, _theory in INIT_FILLS:   # (PyTorch's trunc_normal_ redraws whole tensors: seconds on the large
    # shapes, on which its distribution, free of fans, says nothing more)
    register(f'test_init_{_name}_distribution', lambda c=_call, t=_theory, trunc=_name.startswith('trunc'):
             check_init_fill(c, t, torch_shapes=INIT_SHAPES[1:2] if trunc else INIT_SHAPES))


def test_init_wrong_fan_or_gain_caught():
    """The checks above fail a fan taken from the wrong axis, a wrong gain, or a bound 2% off."""
    cases = [('kaiming_uniform', (64, 32, 3, 3), lambda fi, fo: uniform_theory(math.sqrt(2) * math.sqrt(3 / fo))),
             ('kaiming_uniform_fan_out_relu', (200, 1000),
              lambda fi, fo: uniform_theory(math.sqrt(2) * math.sqrt(3 / fi))),
             ('xavier_normal', (200, 1000), lambda fi, fo: normal_theory(math.sqrt(1 / fi))),
             ('xavier_normal', (64, 32, 3, 3), lambda fi, fo: normal_theory(math.sqrt(2 / (fi + fo) / 9))),
             ('xavier_uniform', (512, 512), lambda fi, fo: uniform_theory(math.sqrt(2) * math.sqrt(6 / (fi + fo)))),
             ('kaiming_uniform_sqrt5', (512, 512), lambda fi, fo: uniform_theory(1.02 / math.sqrt(fi))),
             ('kaiming_normal', (512, 512), lambda fi, fo: normal_theory(5 / 3 / math.sqrt(fi)))]
    for name, shape, wrong in cases:
        call, = [f[1] for f in INIT_FILLS if f[0] == name]
        w = tl.zeros(*shape)
        call(tl.init, w)
        raises(AssertionError, lambda: check_sample(w.numpy(), wrong(*fans(shape)), np.float32, name))


def check_orthogonal(device='cpu'):
    """W W^T = gain^2 I where rows <= cols (the sizes after the first flattened), else W^T W; uniform over the
    orthogonal matrices (a 512x512 one's trace is about N(0, 1): without the sign fix of R's diagonal it is far off)."""
    tl.manual_seed(0)
    for shape, gain, dtype in (((512, 512), 1, np.float32), ((64, 32, 3, 3), 1, np.float32),
                               ((300, 20), 2.5, np.float32), ((20, 300), 0.5, np.float64),
                               ((7, 3, 2, 2), 1, np.float64), ((50, 2, 3), 3, np.float32),
                               ((64, 32, 3, 3), 2, np.float16), ((96, 32), 1, np.float16), ((1, 5), 1, np.float32)):
        w = tl.zeros(*shape, dtype=dtype, device=device)
        assert tl.init.orthogonal_(w, gain) is w and w.dtype == dtype and w.shape == shape and w._version[0] == 1
        flat = w.numpy().astype(np.float64).reshape(shape[0], -1)
        gram = flat @ flat.T if flat.shape[0] <= flat.shape[1] else flat.T @ flat
        tol = {np.float16: 3e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype] * gain ** 2
        assert_close(gram, gain ** 2 * np.eye(len(gram)), 0, tol, f'orthogonal_ {shape} gain {gain} {np.dtype(dtype)}')
        if flat.size > 1000:
            check_sample(flat, normal_theory(gain / math.sqrt(max(flat.shape))), dtype, f'orthogonal_ {shape}')
        if shape == (512, 512):
            assert abs(np.trace(flat)) < 5, f'orthogonal_: trace {np.trace(flat)}, not about N(0, 1)'
            if torch is not None:   # PyTorch's is the same
                t = torch.nn.init.orthogonal_(torch.empty(shape)).numpy().astype(np.float64)
                assert_close(t @ t.T, np.eye(512), 0, 1e-5, 'torch')
                assert abs(np.trace(t)) < 5 and abs(t.std() / flat.std() - 1) < 0.03


def test_init_orthogonal():
    check_orthogonal()


def test_init_orthogonal_gru_weight_hh_and_transposed_view():
    """nn.init.orthogonal_(gru.weight_hh_l0), ported: (3H, H) gets orthonormal columns, the GRU still runs and learns;
    a transposed view writes through to its base (one version counter)."""
    gru = tl.GRU(8, 16)
    w = gru.weight_hh_l0
    assert tl.init.orthogonal_(w) is w and w.requires_grad and w.is_leaf and w.grad is None
    assert_close(w.numpy().T @ w.numpy(), np.eye(16), 0, 1e-5, 'W^T W')
    out, h = gru(tl.randn(5, 2, 8))
    out.sum().backward()
    assert w.grad is not None and w.grad.shape == (48, 16)
    base = tl.zeros(4, 6)
    view = base.T
    tl.init.orthogonal_(view)   # (6, 4): orthonormal columns, so base has orthonormal rows
    assert_close(base.numpy() @ base.numpy().T, np.eye(4), 0, 1e-5, 'base of the view')
    assert base._version[0] == view._version[0] == 1


def test_init_fixed_fills_exact_like_torch():
    """constant_, zeros_, ones_, eye_: PyTorch's values and dtype exactly, in every dtype, on every shape."""
    need_torch()
    for dtype in (np.float16, np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_):
        tdtype = getattr(torch, np.dtype(dtype).name if dtype is not np.bool_ else 'bool')
        for shape in ((3, 5), (5, 3), (4, 4), (2, 3, 4), ()):
            for name, args in (('constant_', (0.75 if np.dtype(dtype).kind == 'f' else 3,)), ('constant_', (2.7,)),
                               ('constant_', (-0.0,)), ('zeros_', ()), ('ones_', ()), ('eye_', ())):
                if name == 'eye_' and len(shape) != 2:
                    continue
                if dtype is np.uint8 and args == (-0.0,):
                    continue
                w = tl.zeros(*shape, dtype=dtype) + 7 if dtype is not np.bool_ else tl.zeros(*shape, dtype=dtype)
                tw = torch.full(shape, 7, dtype=tdtype) if dtype is not np.bool_ else torch.zeros(shape, dtype=tdtype)
                assert getattr(tl.init, name)(w, *args) is w
                getattr(torch.nn.init, name)(tw, *args)
                msg = f'{name}{args} {shape} {np.dtype(dtype).name}'
                assert w.dtype == dtype and w._version[0] == 1, msg
                assert np.array_equal(w.numpy(), tw.numpy()) and np.array_equal(np.signbit(w.numpy()),
                                                                                  np.signbit(tw.numpy())), msg
    w = tl.zeros(2, 3)
    assert tl.init.constant_(w, tl.tensor(1.5)) is w and (w.numpy() == 1.5).all()   # a one-element tensor, as fill_
    e = tl.zeros(3).expand(2, 3)   # as PyTorch's fill: one value into shared memory is fine
    assert (tl.init.constant_(e, 2.0).numpy() == 2).all() and (tl.init.zeros_(e).numpy() == 0).all()


def test_init_calculate_gain_as_torch():
    need_torch()
    names = ['linear', 'conv1d', 'conv2d', 'conv3d', 'conv_transpose1d', 'conv_transpose2d', 'conv_transpose3d',
             'sigmoid', 'tanh', 'relu', 'leaky_relu', 'selu']
    for name in names:
        for param in ((None, 0, 0.2, 1, 3, -0.5, 0.01) if name == 'leaky_relu' else (None, 0.3)):
            ours, theirs = tl.init.calculate_gain(name, param), torch.nn.init.calculate_gain(name, param)
            assert ours == theirs and type(ours) is type(theirs), (name, param, ours, theirs)
    assert tl.init.calculate_gain('leaky_relu') == torch.nn.init.calculate_gain('leaky_relu')
    for name, param in (('gelu', None), ('Relu', None), ('leaky_relu', '0.2'), ('leaky_relu', True),
                        ('leaky_relu', np.float32(0.2)), ('leaky_relu', np.int64(1))):
        theirs = raises(ValueError, lambda: torch.nn.init.calculate_gain(name, param))
        assert raises(ValueError, lambda: tl.init.calculate_gain(name, param)) == theirs, (name, param)


def test_init_fan_helpers_as_torch():
    """init._calculate_fan_in_and_fan_out and _calculate_correct_fan, which ported reset_parameters() code calls."""
    need_torch()
    for shape in ((3, 4), (4, 3), (5, 4, 3), (6, 5, 3, 2), (2, 3, 1, 1, 4), (0, 3), (3, 0, 2)):
        ours, theirs = tl.zeros(*shape), torch.zeros(shape)
        assert tl.init._calculate_fan_in_and_fan_out(ours) == torch.nn.init._calculate_fan_in_and_fan_out(theirs)
        for mode in ('fan_in', 'fan_out', 'FAN_OUT'):
            assert tl.init._calculate_correct_fan(ours, mode) == torch.nn.init._calculate_correct_fan(theirs, mode)
    for shape in ((3,), ()):
        msg = raises(ValueError, lambda: torch.nn.init._calculate_fan_in_and_fan_out(torch.zeros(shape)))
        assert raises(ValueError, lambda: tl.init._calculate_fan_in_and_fan_out(tl.zeros(*shape))) == msg


def test_init_errors_as_torch():
    """The same error (type and message) as torch.nn.init's; the tensor and its version as they were."""
    need_torch()
    cases = [
        ('xavier_uniform_ 1-D', lambda I, m: I.xavier_uniform_(m.zeros(5)), ValueError),
        ('xavier_normal_ 0-D', lambda I, m: I.xavier_normal_(m.zeros(())), ValueError),
        ('kaiming_uniform_ 1-D', lambda I, m: I.kaiming_uniform_(m.zeros(5)), ValueError),
        ('kaiming_normal_ 1-D', lambda I, m: I.kaiming_normal_(m.zeros(5)), ValueError),
        ('kaiming_uniform_ nonlinearity', lambda I, m: I.kaiming_uniform_(m.zeros(3, 4), nonlinearity='gelu'),
         ValueError),
        ('kaiming_normal_ mode', lambda I, m: I.kaiming_normal_(m.zeros(3, 4), mode='fan_avg'), ValueError),
        ('kaiming_normal_ slope', lambda I, m: I.kaiming_normal_(m.zeros(3, 4), a='0.1'), ValueError),
        ('eye_ 3-D', lambda I, m: I.eye_(m.zeros(2, 2, 2)), ValueError),
        ('eye_ 1-D', lambda I, m: I.eye_(m.zeros(2)), ValueError),
        ('orthogonal_ 1-D', lambda I, m: I.orthogonal_(m.zeros(4)), ValueError),
        ('uniform_ from > to', lambda I, m: I.uniform_(m.zeros(4), 1.0, 0.5), RuntimeError),
        ('normal_ std < 0', lambda I, m: I.normal_(m.zeros(4), 0.0, -1.0), RuntimeError),
        ('xavier_uniform_ 0x0', lambda I, m: I.xavier_uniform_(m.zeros(0, 0)), ZeroDivisionError),
    ]
    for what, call, exc in cases:
        theirs = raises(exc, lambda: call(torch.nn.init, torch))
        assert raises(exc, lambda: call(tl.init, tl)) == theirs, what
    # errors of our own wording: the tensor stays as it was
    w = tl.ones(4, 3)
    for call, exc, needle in ((lambda: tl.init.uniform_(w, 0, float('inf')), RuntimeError, 'range of float32'),
                              (lambda: tl.init.uniform_(w.half(), 0, 1e5), RuntimeError, 'range of float16'),
                              (lambda: tl.init.trunc_normal_(w, 0, 1, 2, 1), RuntimeError, 'a <= b'),
                              (lambda: tl.init.constant_(tl.zeros(3, dtype=np.int64), 1e30), RuntimeError, 'overflow'),
                              (lambda: tl.init.constant_(tl.zeros(2, dtype=np.int8), 300), RuntimeError, 'overflow'),
                              (lambda: tl.init.constant_(tl.zeros(2, dtype=np.int32), np.nan), RuntimeError,
                               'overflow'),
                              (lambda: tl.init.normal_(np.zeros((2, 2))), TypeError, 'expected a Tensor')):
        raises(exc, call, needle)
    assert w._version[0] == 0 and (w.numpy() == 1).all()
    for name in ('uniform_', 'normal_', 'trunc_normal_', 'xavier_uniform_', 'xavier_normal_', 'kaiming_uniform_',
                 'kaiming_normal_', 'orthogonal_'):
        i = tl.ones(3, 3, dtype=np.int64)   # PyTorch: NotImplementedError; ours the TypeError of an unsupported dtype
        raises(TypeError, lambda: getattr(tl.init, name)(i), 'floating-point')
        raises(NotImplementedError, lambda: getattr(torch.nn.init, name)(torch.ones(3, 3, dtype=torch.long)))
        assert (i.numpy() == 1).all() and i._version[0] == 0, name
        e = tl.ones(3).expand(3, 3)   # distinct values cannot go into shared memory, as PyTorch
        raises(RuntimeError, lambda: getattr(tl.init, name)(e), 'more than one element')
        raises(RuntimeError, lambda: getattr(torch.nn.init, name)(torch.ones(3).expand(3, 3)), 'more than one element')
        assert (e.numpy() == 1).all() and e._version[0] == 0, name
    raises(RuntimeError, lambda: tl.init.eye_(tl.ones(3).expand(2, 3)), 'more than one element')   # PyTorch's resizes


def test_init_zero_elements_and_warnings_as_torch():
    need_torch()
    for name in ('kaiming_uniform_', 'kaiming_normal_'):
        for shape in ((0, 5), (0,), (3, 0, 2)):
            for m, I in ((tl, tl.init), (torch, torch.nn.init)):
                w = m.zeros(*shape) if m is tl else torch.zeros(shape)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter('always')
                    assert getattr(I, name)(w) is w
                assert [str(c.message) for c in caught] == ['Initializing zero-element tensors is a no-op'], caught
                assert w._version == ([0] if m is tl else 0), (name, shape)
    for name in ('orthogonal_', 'xavier_uniform_', 'uniform_', 'trunc_normal_', 'eye_', 'constant_'):
        w = tl.zeros(0, 4)
        assert (getattr(tl.init, name)(w, *((1.0,) if name == 'constant_' else ())) is w and w.shape == (0, 4))
    for m, I in ((tl, tl.init), (torch, torch.nn.init)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            w = I.trunc_normal_(m.zeros(1000), mean=5.0, std=1.0)   # more than 2 std above b = 2: a warning
        assert len(caught) == 1 and 'mean is more than 2 std from [a, b]' in str(caught[0].message)
        assert float(w.min()) >= -2 and float(w.max()) <= 2 and float(w.mean()) > 1.5


def test_init_trunc_normal_within_bounds():
    """Every draw within [a, b] (in the dtype), for intervals of every mass, narrow ones and one-sided tails too."""
    tl.manual_seed(1)
    for dtype in (np.float16, np.float32, np.float64):
        for mean, std, a, b in ((0, 1, -2, 2), (0, 1, -0.01, 0.01), (0, 1, 2.5, 2.6), (0, 1, -1e4, 0), (3, 2, -1, 1),
                                (0, 0.02, -0.04, 0.04), (0, 1, 0.5, 0.5)):
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')   # (2.5 to 2.6: more than 2 std from the mean)
                w = tl.init.trunc_normal_(tl.zeros(300, 100, dtype=dtype), mean, std, a, b)
            x = w.numpy()
            lo, hi = np.asarray(a).astype(dtype), np.asarray(b).astype(dtype)
            assert x.dtype == dtype and x.min() >= lo and x.max() <= hi, (dtype, mean, std, a, b)
            if b - a > 0.1 and b - a < 100:
                assert x.max() - x.min() > 0.9 * (b - a) * (dtype != np.float16 or abs(a) < 10), (mean, std, a, b)


def test_init_in_place_on_a_parameter_unrecorded():
    """On a Parameter that requires grad, with grad mode on: nothing recorded (still a leaf, no grad), the values
    written; a backward that saved the old values raises, as PyTorch's; gradients flow as before after it."""
    calls = [('uniform_', ()), ('normal_', ()), ('trunc_normal_', ()), ('constant_', (0.5,)), ('zeros_', ()),
             ('ones_', ()), ('eye_', ()), ('xavier_uniform_', ()), ('xavier_normal_', ()), ('kaiming_uniform_', ()),
             ('kaiming_normal_', ()), ('orthogonal_', ())]
    libraries = [(tl, tl.init)] + ([(torch, torch.nn.init)] if torch is not None else [])
    for name, args in calls:
        for m, I in libraries:
            p = tl.Parameter(tl.ones(4, 6) * 3) if m is tl else torch.nn.Parameter(torch.ones(4, 6) * 3)
            version = p._version[0] if m is tl else p._version
            y = (p * p).sum()   # saves p
            assert getattr(I, name)(p, *args) is p
            assert p.requires_grad and p.is_leaf and p.grad is None
            assert p._ctx is None if m is tl else p.grad_fn is None
            assert not (p.detach().numpy() == 3).all(), name
            assert (p._version[0] if m is tl else p._version) > version, name
            raises(RuntimeError, y.backward, 'modified by an in')
            (p * 2).sum().backward()   # grad mode still on: recorded as ever
            assert (p.grad.numpy() == 2).all(), name


def test_init_seeded_and_layers_stream_kept():
    """tl.manual_seed fixes every random initializer's values; the layers' defaults (drawn through init.uniform_ and
    normal_) are the NumPy draws they always were, at version 1 as PyTorch's."""
    for name, args in (('uniform_', (-1, 2)), ('normal_', ()), ('trunc_normal_', (0, 1, 0.5, 3)), ('orthogonal_', ()),
                       ('kaiming_normal_', ()), ('xavier_uniform_', ())):
        runs = []
        for seed in (4, 4, 5):
            tl.manual_seed(seed)
            runs.append(getattr(tl.init, name)(tl.zeros(30, 20), *args).numpy())
        assert np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[0], runs[2]), name
    tl.manual_seed(7)
    lin, emb, conv = tl.Linear(3, 4), tl.Embedding(5, 2), tl.Conv2d(2, 3, 2)
    np.random.seed(7)
    u = lambda shape, fan: np.random.uniform(-1 / math.sqrt(fan), 1 / math.sqrt(fan), shape).astype(np.float32)
    expected = [u((4, 3), 3), u((4,), 3), np.random.standard_normal((5, 2)).astype(np.float32), u((3, 2, 2, 2), 8),
                u((3,), 8)]
    for p, e in zip([lin.weight, lin.bias, emb.weight, conv.weight, conv.bias], expected):
        assert np.array_equal(p.numpy(), e) and p.dtype == np.float32 and p._version[0] == 1
    if torch is not None:
        assert torch.nn.Linear(3, 4).weight._version == 1


def test_init_model_apply_ported():
    """model.apply(init_weights), as PyTorch code writes it: every Linear xavier-uniform with zero bias, the convs
    kaiming-normal (fan_out, relu); then a training step runs."""
    def init_weights(m):
        if isinstance(m, tl.Linear):
            tl.init.xavier_uniform_(m.weight)
            tl.init.zeros_(m.bias)
        elif isinstance(m, tl.Conv2d):
            tl.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            tl.init.constant_(m.bias, 0.1)
    tl.manual_seed(0)
    model = tl.Sequential(tl.Conv2d(3, 64, 3), tl.ReLU(), tl.Flatten(), tl.Linear(64 * 4, 300), tl.ReLU(),
                          tl.Linear(300, 10))
    assert model.apply(init_weights) is model
    lin = [m for m in model.modules() if isinstance(m, tl.Linear)]
    for m in lin:
        bound = math.sqrt(6 / sum(m.weight.shape))
        assert np.abs(m.weight.numpy()).max() <= bound and np.abs(m.weight.numpy()).max() > 0.97 * bound
        assert (m.bias.numpy() == 0).all() and m.bias.requires_grad
    conv = model[0]
    assert abs(conv.weight.numpy().std() / math.sqrt(2 / (64 * 9)) - 1) < 0.1
    assert (conv.bias.numpy() == np.float32(0.1)).all()
    opt = tl.SGD(model.parameters(), lr=0.1)
    loss = tl.cross_entropy(model(tl.randn(8, 3, 4, 4)), tl.Tensor(np.arange(8)))
    loss.backward()
    opt.step()
    assert all(p.grad is not None for p in model.parameters())


def test_gpu_init_on_cuda():
    """Every initializer on the GPU (CuPy's generator): the tensor returned, its device and dtype kept, the statistics
    of the CPU's checks; orthogonal_ orthogonal, the fixed fills exact; manual_seed repeats the draws."""
    need_cuda()
    for name, call, theory in INIT_FILLS:
        check_init_fill(call, theory, device='cuda')
    check_orthogonal('cuda')
    for dtype in (np.float16, np.float32, np.float64, np.int64):
        w = tl.zeros(3, 5, dtype=dtype, device='cuda')
        assert tl.init.eye_(w) is w and w.device == 'cuda:0' and w.dtype == dtype
        assert np.array_equal(w.numpy(), np.eye(3, 5, dtype=dtype))
        assert np.array_equal(tl.init.constant_(w, 2).numpy(), np.full((3, 5), 2, dtype))
        assert (tl.init.ones_(w).numpy() == 1).all() and (tl.init.zeros_(w).numpy() == 0).all() and w._version[0] == 4
    runs = []
    for seed in (3, 3):
        tl.manual_seed(seed)
        runs.append([getattr(tl.init, name)(tl.zeros(64, 32, device='cuda')).numpy()
                     for name in ('uniform_', 'normal_', 'trunc_normal_', 'orthogonal_')])
    assert all(np.array_equal(a, b) for a, b in zip(*runs))
    p = tl.Parameter(tl.ones(4, 6, device='cuda'))
    y = (p * p).sum()
    assert tl.init.kaiming_uniform_(p) is p and p.is_leaf and p.grad is None and p.device == 'cuda:0'
    raises(RuntimeError, y.backward, 'modified by an in')


# ===== Module machinery =====

def build_net(nn):
    """A nested model written once for tl and torch: lists of modules, Sequential, a bare Parameter."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(3, 4)
            blocks = [nn.Linear(4, 4), nn.Linear(4, 4, bias=False)]
            self.blocks = blocks if nn is tl else nn.ModuleList(blocks)
            self.head = nn.Sequential(nn.BatchNorm1d(4), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4, 2))
            self.scale = nn.Parameter(make(tl if nn is tl else TH, np.array([1.5, -0.5], np.float32)))

        def forward(self, x):
            x = self.stem(x)
            for b in self.blocks:
                x = b(x).relu()
            return self.head(x) * self.scale
    return Net()


def net_input():
    return sample(rng('net_x'), (6, 3)).astype(np.float32)


def test_module_named_parameters_like_torch():
    net = build_net(tl)
    names = [n for n, _ in net.named_parameters()]
    assert sorted(names) == sorted(['stem.weight', 'stem.bias', 'blocks.0.weight', 'blocks.0.bias',
                                    'blocks.1.weight', 'head.0.weight', 'head.0.bias', 'head.3.weight',
                                    'head.3.bias', 'scale']), names
    assert len(list(net.parameters())) == 10 and all(isinstance(p, tl.Parameter) for p in net.parameters())
    if torch is not None:
        assert sorted(param_shapes(net)) == sorted(param_shapes(build_net(torch.nn)))


def test_module_buffers_and_state_dict_keys():
    net = build_net(tl)
    assert len(list(net.buffers())) == 3
    sd = net.state_dict()
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    assert {'head.0.running_mean', 'head.0.running_var', 'head.0.num_batches_tracked'} <= set(sd)
    if torch is not None:
        want = build_net(torch.nn).state_dict()
        assert sorted(sd) == sorted(want)
        assert all(sd[k].shape == tuple(want[k].shape) for k in want)


def test_module_children():
    layers = [tl.Linear(2, 3), tl.ReLU(), tl.Linear(3, 1)]
    seq = tl.Sequential(*layers)
    kids = list(seq.children())
    assert len(kids) == 3 and all(a is b for a, b in zip(kids, layers))


def test_sequential_takes_modules_or_an_ordered_dict_as_pytorch():
    """As torch.nn.Sequential: a function, None or a plain dict among the arguments raises TypeError naming its type
    (it was dropped silently); one OrderedDict of name -> module names the children, so the parameters, state dict
    and modules carry those names and the output and gradients are PyTorch's on random input (weights copied);
    a name with '.' or of an attribute raises KeyError."""
    need_torch()
    for bad, what in ((tl.relu, 'function'), (None, 'NoneType'), ({'fc': tl.Linear(2, 2)}, 'dict')):
        raises(TypeError, lambda: tl.Sequential(tl.Linear(2, 2), bad), what, "'1'")
    raises(TypeError, lambda: torch.nn.Sequential(torch.nn.Linear(2, 2), torch.relu), 'Module')
    spec = lambda nn: collections.OrderedDict([('fc', nn.Linear(3, 4)), ('act', nn.GELU()), ('out', nn.Linear(4, 2))])
    ours, theirs = tl.Sequential(spec(tl)), torch.nn.Sequential(spec(torch.nn))
    perturb_torch(theirs, rng('seq_dict'))
    ours.load_state_dict(theirs.state_dict())
    names = lambda pairs: [n for n, _ in pairs]
    want = ['fc.weight', 'fc.bias', 'out.weight', 'out.bias']
    assert names(ours.named_parameters()) == names(theirs.named_parameters()) == want
    assert list(ours.state_dict()) == list(theirs.state_dict()) and len(ours) == len(theirs) == 3
    assert names(ours.named_modules()) == names(theirs.named_modules()) and ours[1] is ours.act
    x = sample(rng('seq_dict x'), (5, 3))
    out = ours.double()(tl.Tensor(x, requires_grad=True))
    out_t = theirs.double()(torch.tensor(x, requires_grad=True))
    assert_close(out, out_t, 1e-12, 1e-12)
    w = upstream(0, out.shape)
    (out * tl.Tensor(w)).sum().backward()
    (out_t * torch.tensor(w)).sum().backward()
    for (n, p), (_, p_t) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert_close(p.grad, p_t.grad, 1e-12, 1e-12, n)
    for key, exc, needle in (('a.b', KeyError, 'a.b'), ('forward', KeyError, 'forward'),
                             ('training', KeyError, 'training'), ('', KeyError, 'empty'), (1, TypeError, 'string')):
        raises(exc, lambda: torch.nn.Sequential(collections.OrderedDict([(key, torch.nn.ReLU())])))
        raises(exc, lambda: tl.Sequential(collections.OrderedDict([(key, tl.ReLU())])), needle)


def test_sequential_list_methods_as_pytorch():
    """tl.Sequential's append, insert, extend, pop, item assignment and deletion (items and slices), +, +=, * and *=
    as torch.nn.Sequential's, the same steps on both: the same modules in order under PyTorch's names (a deletion
    renumbers every name '0', '1', ..., an OrderedDict's too; insert shifts the names from the index on; append names
    by the count; item assignment keeps the name), parameter names, state dict keys, len, repr, return values, and
    the output of the result. Bad input raises PyTorch's kind of error and changes nothing (a non-Module: TypeError,
    PyTorch's insert an AssertionError; all of an extend checked first, where PyTorch adds those before)."""
    need_torch()
    sizes = [(2, 3), (3, 3), (3, 4), (4, 4), (4, 2), (2, 2), (2, 2)]
    ours_layers, their_layers = [tl.Linear(*s) for s in sizes], [torch.nn.Linear(*s) for s in sizes]
    for o, t in zip(ours_layers, their_layers):
        o.load_state_dict(t.state_dict())
    named = lambda nn, ls: collections.OrderedDict([('fc', ls[0]), ('act', (tl if nn is tl else nn).ReLU())])
    ours, theirs = tl.Sequential(named(tl, ours_layers)), torch.nn.Sequential(named(torch.nn, their_layers))
    steps = [('append', lambda m, ls: m.append(ls[1])),
             ('extend', lambda m, ls: m.extend([ls[2], ls[3]])),
             ('insert at the end', lambda m, ls: m.insert(len(m), ls[4])),
             ('setitem', lambda m, ls: m.__setitem__(1, ls[5])),
             ('setitem negative', lambda m, ls: m.__setitem__(-1, ls[4])),
             ('del', lambda m, ls: m.__delitem__(1)),
             ('insert', lambda m, ls: m.insert(1, ls[6])),
             ('insert negative', lambda m, ls: m.insert(-2, ls[5])),
             ('insert at 0', lambda m, ls: m.insert(0, ls[6])),
             ('pop', lambda m, ls: m.pop(-1)),
             ('pop slice', lambda m, ls: m.pop(slice(4, None))),
             ('del slice', lambda m, ls: m.__delitem__(slice(0, 3, 2))),
             ('+=', lambda m, ls: m.__iadd__(type(m)(ls[4], ls[5]))),
             ('*=', lambda m, ls: m.__imul__(2))]
    for what, step in steps:
        got, want = step(ours, ours_layers), step(theirs, their_layers)
        assert (got is ours) == (want is theirs) and (got is None) == (want is None), what
        if isinstance(want, torch.nn.Sequential) and want is not theirs:
            check_same_structure(got, want, f'{what}: returned')
        elif want is not theirs and want is not None:   # a module popped
            assert ours_layers.index(got) == their_layers.index(want), what
        assert [ours_layers.index(m) if m in ours_layers else type(m).__name__ for m in ours] == \
            [their_layers.index(m) if m in their_layers else type(m).__name__ for m in theirs], what
        check_same_structure(ours, theirs, what)
    head, head_t = tl.Sequential(ours_layers[4], ours_layers[5]), torch.nn.Sequential(their_layers[4], their_layers[5])
    for what, a, b in (('+', ours + head, theirs + head_t), ('*', head * 3, head_t * 3),
                       ('2 *', 2 * head, 2 * head_t)):
        assert type(a) is tl.Sequential and list(a.children()) != [], what
        check_same_structure(a, b, what)
    x = sample(rng('sequential list methods'), (5, 3)).astype(np.float32)
    body, body_t = tl.Sequential(*ours_layers[2:4]) * 1, torch.nn.Sequential(*their_layers[2:4]) * 1
    assert_close((body + head)(tl.Tensor(x)), (body_t + head_t)(torch.tensor(x)), 1e-5, 1e-6, 'output')
    fresh = lambda: torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    ours = tl.Sequential(tl.Linear(2, 2), tl.ReLU())
    state, children = list(ours.state_dict()), list(ours)
    cases = [(TypeError, lambda m: m.append(3), ('int', "'2'")),
             (TypeError, lambda m: m.extend([m[1], tl.relu if m is ours else torch.relu]), ('function',)),
             (TypeError, lambda m: m.extend(3), ('iterable', 'int')),
             (TypeError, lambda m: m.__setitem__(0, 2.5), ('float', "'0'")),
             (TypeError, lambda m: m.__setitem__(slice(0, 1), m[0]), ('slice',)),
             (IndexError, lambda m: m.__setitem__(2, m[0]), ('index 2',)),
             (IndexError, lambda m: m.__delitem__(-3), ('index -3',)),
             (IndexError, lambda m: m.pop(2), ('index 2',)),
             (IndexError, lambda m: m.insert(3, m[0]), ('insert', '3')),
             (IndexError, lambda m: m.insert(-3, m[0]), ('insert', '-3')),
             (ValueError, lambda m: m + [m[0]], ('Sequential',)),
             (ValueError, lambda m: m.__iadd__([m[0]]), ('Sequential',)),
             (ValueError, lambda m: m * 0, ('Non-positive',)),
             (TypeError, lambda m: m * 1.5, ('float',))]
    for exc, call, needles in cases:
        raises(exc, lambda: call(fresh()))
        raises(exc, lambda: call(ours), *needles)
        assert list(ours) == children and list(ours.state_dict()) == state, needles
    raises(AssertionError, lambda: fresh().insert(0, 'relu'))
    raises(TypeError, lambda: ours.insert(0, 'relu'), 'str')
    pair = lambda nn: nn.Sequential(collections.OrderedDict([('fc', nn.Linear(2, 2)), ('act', nn.ReLU())]))
    named = pair(tl)
    raises(KeyError, lambda: pair(torch.nn).insert(0, torch.nn.ReLU()))
    raises(KeyError, lambda: named.insert(0, tl.ReLU()), 'insert', "'1'")   # names that are no positions to shift
    assert [n for n, _ in named.named_children()] == ['fc', 'act']
    assert list(ours) == children and list(ours.state_dict()) == state


def as_torch_prints(ours, theirs):
    """repr(ours) as the installed PyTorch prints the same tree (theirs): PyTorch before 2.13 (the GPU machine's 2.11)
    shows no bias= setting of LayerNorm and BatchNorm, which tinygrad_lite's reprs (2.13's) do."""
    ours, theirs = repr(ours), repr(theirs)
    if re.search(r'(?:LayerNorm|BatchNorm[12]d)\([^\n]*bias=', theirs):
        return ours
    return re.sub(r'((?:LayerNorm|BatchNorm[12]d)\([^\n]*?), bias=(?:True|False)', r'\1', ours)


def check_same_structure(ours, theirs, what):
    """ours (tl) and theirs (torch) hold the same tree: parameter and module names, state dict keys, len and repr."""
    names = lambda pairs: [n for n, _ in pairs]
    assert names(ours.named_parameters()) == names(theirs.named_parameters()), what
    assert names(ours.named_modules()) == names(theirs.named_modules()), what
    assert list(ours.state_dict()) == list(theirs.state_dict()), what
    assert len(ours) == len(theirs), what
    assert as_torch_prints(ours, theirs) == repr(theirs), f'{what}:\n{ours!r}\n-- PyTorch --\n{theirs!r}'


def test_module_list_as_pytorch():
    """tl.ModuleList as torch.nn.ModuleList, the same operations on both (and on a plain list, for which modules):
    indexing (negative too), slices (a ModuleList), iteration, append, extend, insert, +=, +, item assignment, pop and
    deletion of items and slices (the rest renumbered '0', '1', ...) give the same parameter names, state dict keys,
    len and repr (a run of equal children shown once, '(0-2): 3 x Linear(...)'). A model holding a plain list of the
    same modules has the same parameter names and state dict."""
    need_torch()
    sizes = [(2, 3), (3, 3), (3, 3), (3, 3), (3, 4), (4, 1), (1, 2), (2, 5)]
    ours_layers, their_layers = [tl.Linear(*s) for s in sizes], [torch.nn.Linear(*s) for s in sizes]
    ours, theirs = tl.ModuleList(ours_layers[:5]), torch.nn.ModuleList(their_layers[:5])
    plain = ours_layers[:5]
    check_same_structure(ours, theirs, 'built')
    assert '(1-3): 3 x Linear(in_features=3, out_features=3, bias=True)' in repr(ours), repr(ours)
    assert ours[0] is ours_layers[0] and ours[-1] is ours_layers[4] and ours[-5] is ours[0]
    assert list(ours) == plain and [m for m in ours] == plain
    for sl in (slice(1, 3), slice(None, None, -2), slice(4, 1), slice(-2, None)):
        part, part_t = ours[sl], theirs[sl]
        assert type(part) is tl.ModuleList and list(part) == plain[sl], sl
        check_same_structure(part, part_t, f'slice {sl}')
    steps = [('append', lambda m, ls: m.append(ls[5]), lambda ls: plain.append(ls[5])),
             ('extend', lambda m, ls: m.extend(ls[6:7]), lambda ls: plain.extend(ls[6:7])),
             ('insert', lambda m, ls: m.insert(2, ls[7]), lambda ls: plain.insert(2, ls[7])),
             ('insert at the end', lambda m, ls: m.insert(len(m), ls[0]), lambda ls: plain.append(ls[0])),
             ('+=', lambda m, ls: m.__iadd__([ls[1], ls[2]]), lambda ls: plain.extend([ls[1], ls[2]])),
             ('setitem', lambda m, ls: m.__setitem__(-3, ls[5]), lambda ls: plain.__setitem__(-3, ls[5])),
             ('del', lambda m, ls: m.__delitem__(1), lambda ls: plain.__delitem__(1)),
             ('del negative', lambda m, ls: m.__delitem__(-2), lambda ls: plain.__delitem__(-2)),
             ('del slice', lambda m, ls: m.__delitem__(slice(1, 6, 2)), lambda ls: plain.__delitem__(slice(1, 6, 2))),
             ('pop', lambda m, ls: m.pop(0), lambda ls: plain.pop(0))]
    for what, step, on_plain in steps:
        got, want = step(ours, ours_layers), step(theirs, their_layers)
        on_plain(ours_layers)
        assert (got is ours) == (want is theirs), what
        assert list(ours) == plain, what
        check_same_structure(ours, theirs, what)
    total, total_t = ours + [ours_layers[3]], theirs + [their_layers[3]]
    assert type(total) is tl.ModuleList and list(total) == plain + [ours_layers[3]] and list(ours) == plain
    check_same_structure(total, total_t, '+')
    check_same_structure(tl.ModuleList(), torch.nn.ModuleList(), 'empty')

    def holder(nn, layers):
        net = nn.Module()
        net.layers, net.head = layers, nn.Linear(2, 2)
        return net
    nets = holder(tl, tl.ModuleList(plain)), holder(tl, list(plain)), holder(torch.nn, torch.nn.ModuleList(theirs))
    assert len({tuple(n for n, _ in net.named_parameters()) for net in nets}) == 1
    assert len({tuple(net.state_dict()) for net in nets}) == 1 and 'layers.0.weight' in nets[0].state_dict()

def test_module_list_errors_change_nothing():
    """Bad input to a tl.ModuleList raises what torch.nn.ModuleList raises and changes nothing: a non-Module (TypeError
    naming its type and position; all of an extend or += checked before any is added, where PyTorch adds those
    before), a non-iterable to extend (TypeError), an index out of range (IndexError) or not an int (TypeError).
    Calling a ModuleList raises NotImplementedError (no forward). Differences kept: None is refused (PyTorch holds it
    as a child); insert refuses a non-Module (PyTorch stores it) and an index beyond either end (PyTorch stores it
    under that number, or fails half-done on a negative one, which here counts from the end as a list's)."""
    need_torch()
    a, b = tl.Linear(2, 2), tl.ReLU()
    ours, fresh = tl.ModuleList([a, b]), lambda: torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.ReLU()])
    state = ours.state_dict()
    cases = [(TypeError, lambda m: m.append(3), ('int', "'2'")),
             (TypeError, lambda m: m.extend([m[1], tl.relu]), ('function', "'3'")),
             (TypeError, lambda m: m.extend(3), ('iterable', 'int')),
             (TypeError, lambda m: m.__setitem__(0, np.ones(2)), ('ndarray', "'0'")),
             (TypeError, lambda m: m + [3], ('int',)),
             (IndexError, lambda m: m[2], ('index 2', 'out of range')),
             (IndexError, lambda m: m[-3], ('index -3',)),
             (IndexError, lambda m: m.__setitem__(5, m[0]), ('index 5',)),
             (IndexError, lambda m: m.__delitem__(-3), ('index -3',)),
             (IndexError, lambda m: m.pop(2), ('index 2',)),
             (TypeError, lambda m: m['0'], ('str',)),
             (TypeError, lambda m: m[1.0], ('float',)),
             (TypeError, lambda m: type(m)(5), ('iterable', 'int')),
             (NotImplementedError, lambda m: m(tl.ones(2)), ('ModuleList', 'forward'))]
    for exc, call, needles in cases:
        raises(exc, lambda: call(fresh()))
        raises(exc, lambda: call(ours), *needles)
        assert list(ours) == [a, b] and list(ours.state_dict()) == list(state), needles
    theirs = fresh()
    theirs += [None]   # PyTorch takes None (and shows it in the list); tinygrad_lite refuses it, as Sequential does
    assert len(theirs) == 3
    raises(TypeError, lambda: ours.__iadd__([b, None]), 'NoneType', "'3'")
    for index in (3, -4):
        raises(IndexError, lambda: ours.insert(index, tl.ReLU()), 'insert', str(index))
    raises(TypeError, lambda: ours.insert(0, 'relu'), 'str')
    assert list(ours) == [a, b] and list(ours.state_dict()) == list(state)
    ours.insert(-1, a)   # a negative index counts from the end, as a list's
    assert list(ours) == [a, a, b]

def test_module_dict_as_pytorch():
    """tl.ModuleDict as torch.nn.ModuleDict, the same operations on both: built from a dict, a list of pairs or
    nothing; item access, assignment (a new key last, a replaced one in its place), deletion, len, iteration over
    the keys, `in`, keys/values/items, update from a dict, a ModuleDict or pairs, pop and clear give the same keys,
    values, parameter names, state dict keys and repr."""
    need_torch()
    sizes = {'enc': (2, 3), 'mid': (3, 3), 'dec': (3, 2), 'aux': (2, 1), 'x-1': (1, 4)}
    ol, tl_ = {k: tl.Linear(*v) for k, v in sizes.items()}, {k: torch.nn.Linear(*v) for k, v in sizes.items()}
    for ours, theirs in ((tl.ModuleDict({k: ol[k] for k in ('enc', 'mid')}),
                          torch.nn.ModuleDict({k: tl_[k] for k in ('enc', 'mid')})),
                         (tl.ModuleDict([('enc', ol['enc']), ('mid', ol['mid'])]),
                          torch.nn.ModuleDict([('enc', tl_['enc']), ('mid', tl_['mid'])]))):
        check_same_structure(ours, theirs, 'built')
        assert ours['enc'] is ol['enc'] and ours.mid is ol['mid'] and list(ours) == ['enc', 'mid']
    check_same_structure(tl.ModuleDict(), torch.nn.ModuleDict(), 'empty')
    steps = [('setitem', lambda d, ls: d.__setitem__('dec', ls['dec'])),
             ('replace', lambda d, ls: d.__setitem__('enc', ls['aux'])),
             ('update dict', lambda d, ls: d.update({'x-1': ls['x-1'], 'mid': ls['enc']})),
             ('update pairs', lambda d, ls: d.update([['aux', ls['mid']], ('0', ls['dec'])])),
             ('delitem', lambda d, ls: d.__delitem__('mid')),
             ('pop', lambda d, ls: d.pop('enc')),
             ('set again', lambda d, ls: d.__setitem__('enc', ls['enc'])),
             ('update ModuleDict', lambda d, ls: d.update(type(d)({'mid': ls['mid'], 'aux': ls['aux']})))]
    key_of, key_of_t = {id(m): k for k, m in ol.items()}, {id(m): k for k, m in tl_.items()}
    for what, step in steps:
        got, want = step(ours, ol), step(theirs, tl_)
        assert key_of.get(id(got)) == key_of_t.get(id(want)), what   # pop's module, or None
        check_same_structure(ours, theirs, what)
        assert list(ours) == list(theirs) == list(ours.keys()) == list(theirs.keys()), what
        assert [key_of[id(m)] for m in ours.values()] == [key_of_t[id(m)] for m in theirs.values()], what
        assert all(ours[k] is v for k, v in ours.items()) and all(k in ours for k in theirs), what
    assert 'nothing' not in ours and 'training' not in ours and 'keys' not in ours
    ours.clear(), theirs.clear()
    check_same_structure(ours, theirs, 'clear')
    assert list(ours) == [] and len(ours) == 0


def test_module_dict_errors_change_nothing():
    """Bad input to a tl.ModuleDict raises what torch.nn.ModuleDict raises and changes nothing: a key that is not a
    string (TypeError), empty or with '.' or an attribute's name (KeyError, as add_module); a value that is not a
    Module (TypeError naming its type); update of a non-iterable or of elements that are not pairs (TypeError, or
    ValueError for a wrong length), checked in full before anything is added (PyTorch adds the good ones before);
    a missing key to [], del or pop (KeyError). Calling a ModuleDict raises NotImplementedError (no forward)."""
    need_torch()
    a = tl.Linear(2, 2)
    ours, fresh = tl.ModuleDict({'a': a}), lambda: torch.nn.ModuleDict({'a': torch.nn.Linear(2, 2)})
    for key, exc, needle in (('a.b', KeyError, 'a.b'), ('forward', KeyError, 'forward'), ('keys', KeyError, 'keys'),
                             ('training', KeyError, 'training'), ('', KeyError, 'empty'), (1, TypeError, 'string')):
        raises(exc, lambda: fresh().__setitem__(key, torch.nn.ReLU()))
        raises(exc, lambda: ours.__setitem__(key, tl.ReLU()), needle)
        raises(exc, lambda: tl.ModuleDict({key: tl.ReLU()}), needle)
    cases = [(TypeError, lambda d: d.__setitem__('b', 3), ('int', "'b'")),
             (TypeError, lambda d: d.__setitem__('a', tl.relu), ('function', "'a'")),
             (TypeError, lambda d: d.update(3), ('iterable', 'int')),
             (TypeError, lambda d: d.update([('b', d['a']), 3]), ('#1', 'int')),
             (ValueError, lambda d: d.update([('b', d['a']), ('c', d['a'], 1)]), ('#1', 'length 3')),
             (TypeError, lambda d: d.update({'b': d['a'], 'c': np.ones(2)}), ('ndarray', "'c'")),
             (KeyError, lambda d: d['b'], ('b',)),
             (KeyError, lambda d: d.__delitem__('training'), ('training',)),
             (KeyError, lambda d: d.pop('b'), ('b',)),
             (NotImplementedError, lambda d: d(tl.ones(2)), ('ModuleDict', 'forward'))]
    for exc, call, needles in cases:
        raises(exc, lambda: call(fresh()))
        raises(exc, lambda: call(ours), *needles)
        assert list(ours.items()) == [('a', a)] and list(ours.state_dict()) == ['a.weight', 'a.bias'], needles
    assert ours.training and hasattr(ours, 'keys')

def build_container_net(nn):
    """A model for tl and torch whose layers sit in a ModuleList (one of them twice) and a ModuleDict, with a
    non-persistent buffer."""
    m = tl if nn is tl else TH

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(3, 5), nn.Linear(5, 5)])
            self.layers.append(self.layers[1]).insert(1, nn.GELU())
            self.heads = nn.ModuleDict({'score': nn.Linear(5, 1), 'logits': nn.Linear(5, 4)})
            self.register_buffer('scale', make(m, np.array([0.5, 1.0, 2.0, -1.0], np.float32)), persistent=False)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x).tanh()
            return self.heads['logits'](x) * self.scale + self.heads['score'](x)
    return Net()


def test_module_containers_model_trains_as_pytorch():
    """A model built on ModuleList and ModuleDict, weights copied from PyTorch's (float64): the same output, the same
    gradient of every parameter (a layer held twice gathers both uses), and after five SGD steps (momentum) the same
    parameters and losses."""
    need_torch()
    ours, theirs = build_container_net(tl).double(), build_container_net(torch.nn).double()
    check_same_structure(ours.layers, theirs.layers, 'layers')
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    perturb_torch(theirs, rng('container net'))
    ours.load_state_dict(theirs.state_dict())
    r = rng('container net data')
    x, y = sample(r, (8, 3)), r.integers(0, 4, 8)
    opt, opt_t = tl.SGD(ours.parameters(), lr=0.1, momentum=0.9), torch.optim.SGD(theirs.parameters(), lr=0.1,
                                                                                   momentum=0.9)
    for step in range(5):
        opt.zero_grad(), opt_t.zero_grad()
        out, out_t = ours(tl.Tensor(x)), theirs(torch.tensor(x))
        assert_close(out, out_t, 1e-12, 1e-12, f'step {step}')
        loss, loss_t = tl.cross_entropy(out, tl.Tensor(y)), F.cross_entropy(out_t, torch.tensor(y))
        loss.backward(), loss_t.backward()
        for (n, p), p_t in zip(ours.named_parameters(), theirs.parameters(), strict=True):
            assert_close(p.grad, p_t.grad, 1e-12, 1e-12, f'step {step}: gradient of {n}')
        opt.step(), opt_t.step()
    for (n, p), p_t in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert_close(p, p_t, 1e-12, 1e-12, n)
    assert abs(loss.item() - loss_t.item()) < 1e-12 and ours.scale.dtype == np.float64

def build_shared_net(nn):
    """A nested model for tl and torch with a buffer of its own, a bare Parameter and a submodule held twice (as
    `block` and inside `body`), no lists (PyTorch's ModuleList would be a module of its own)."""
    m = tl if nn is tl else TH

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.register_buffer('scale', make(m, np.array([2.0, -1.0, 0.5], np.float32)))
            self.bn = nn.BatchNorm1d(3)

        def forward(self, x):
            return self.bn(self.fc(x)) * self.scale

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.gain = nn.Parameter(make(m, np.array([1.5, -0.5, 1.0], np.float32)))
            self.block = Block()
            self.body = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), self.block)
            self.head = nn.Linear(3, 2)

        def forward(self, x):
            return self.head(self.body(x) * self.gain)
    return Net()


def test_module_and_tensor_repr_as_pytorch():
    """print(model) shows PyTorch's tree: each layer's settings, children indented under their names; a tensor shows
    its values, and its device, dtype, size, grad_fn or requires_grad where they are not the defaults."""
    need_torch()
    def build(nn):
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.GELU('tanh'), nn.MaxPool2d(2),
            nn.AvgPool2d(2, 1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(8, 2), nn.Embedding(5, 3),
            nn.GRU(3, 4, 2, batch_first=True, bias=False), nn.GRU(3, 4), nn.GRUCell(3, 4, bias=False),
            nn.BatchNorm1d(4, affine=False, momentum=None), nn.Conv2d(3, 8, (3, 2), stride=(2, 1)),
            nn.Conv2d(2, 2, 3, padding='same'), nn.Sequential(), nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU())))
    ours, theirs = as_torch_prints(build(tl), build(torch.nn)), repr(build(torch.nn))
    assert ours == theirs, f'{ours}\n-- PyTorch --\n{theirs}'
    a = sample(rng('repr'), (2, 3))
    x = tl.tensor(a, requires_grad=True)
    text = repr(x * 2)
    assert text.startswith('tensor([[') and 'grad_fn=<Mul>' in text and f'{2 * a[0, 0]:.4f}' in text, text
    assert repr(x).endswith('requires_grad=True)') and repr(tl.tensor(3.0)) == 'tensor(3.)'
    assert repr(tl.zeros(0, 3)) == 'tensor([], size=(0, 3))' and repr(tl.zeros(0)) == 'tensor([])'
    assert repr(tl.ones(2, dtype=np.float16)) == 'tensor([1., 1.], dtype=float16)'
    for value in ([0.5, 0.25], 3.5, [1e-5, 1.0], [True, True], [True, False], [float('nan'), 1.5], 3.0,
                  [[1.2345, -2.5], [3.0, 4.0]], np.zeros(0, np.int64), np.zeros((0, 3), np.int32),
                  np.arange(3, dtype=np.int8), np.float16([1.5, 2.25]), sample(rng('repr values'), (3, 2))):
        assert repr(tl.tensor(value)) == repr(torch.tensor(value)).replace('torch.', ''), value
    assert repr(tl.tensor([1, 2], dtype=np.int32)) == 'tensor([1, 2], dtype=int32)' == repr(torch.tensor(
        [1, 2], dtype=torch.int32)).replace('torch.', '')

def test_module_traversal_as_pytorch():
    """On a model with a shared submodule, as torch.nn.Module: named_parameters / named_buffers with prefix and
    recurse=False, parameters / buffers (recurse=False), named_modules (dotted names, '' or the prefix for the root,
    the shared one once), modules, children of Sequential(a, a) (a once; len 2), apply (children first, then the
    module; returns it) give the same names, order and calls; state_dict keeps PyTorch's keys in order. Weights
    rescaled through apply give PyTorch's forward output on random input."""
    need_torch()
    ours, theirs = build_shared_net(tl), build_shared_net(torch.nn)
    perturb_torch(theirs, rng('traversal'))
    ours.load_state_dict(theirs.state_dict())
    assert list(ours.state_dict()) == list(theirs.state_dict())
    names = lambda pairs: [n for n, _ in pairs]
    for kw in ({}, dict(prefix='net'), dict(recurse=False), dict(prefix='net', recurse=False)):
        assert names(ours.named_parameters(**kw)) == names(theirs.named_parameters(**kw)), kw
        assert names(ours.block.named_buffers(**kw)) == names(theirs.block.named_buffers(**kw)), kw
        assert names(ours.named_buffers(**kw)) == names(theirs.named_buffers(**kw)), kw
    assert len(list(ours.parameters(recurse=False))) == len(list(theirs.parameters(recurse=False))) == 1
    assert len(list(ours.block.buffers(recurse=False))) == len(list(theirs.block.buffers(recurse=False))) == 1
    assert len(list(ours.buffers())) == len(list(theirs.buffers())) == 4
    for kw in ({}, dict(prefix='net')):
        assert names(ours.named_modules(**kw)) == names(theirs.named_modules(**kw)), kw
    assert [type(m).__name__ for m in ours.modules()] == [type(m).__name__ for m in theirs.modules()]
    assert all(a is b for a, b in zip(ours.modules(), (m for _, m in ours.named_modules())))
    bn, bn_t = tl.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    pair, pair_t = tl.Sequential(bn, bn), torch.nn.Sequential(bn_t, bn_t)
    assert names(pair.named_children()) == names(pair_t.named_children()) == ['0'] and len(pair) == len(pair_t) == 2
    calls, calls_t = [], []
    assert ours.apply(calls.append) is ours and theirs.apply(calls_t.append) is theirs
    assert [type(m).__name__ for m in calls] == [type(m).__name__ for m in calls_t], (calls, calls_t)

    def halve(m):
        if isinstance(m, (tl.Linear, torch.nn.Linear)):
            m.weight.data *= 0.5
    with torch.no_grad():
        ours.apply(halve), theirs.apply(halve)
    x = sample(rng('traversal x'), (5, 3))   # in float64: float32's rounding, through BatchNorm's batch statistics of
    # 5 rows, differed from PyTorch's by up to 1e-4 (relative) for some of torch's initial weights
    assert_close(ours.double()(tl.Tensor(x)), theirs.double()(torch.tensor(x)), 1e-10, 1e-12)


def test_module_repr_of_a_multiline_extra_repr_as_pytorch():
    """A module whose extra_repr has several lines prints them one a line, indented, as torch.nn.Module does (alone and
    as a child); one line stays on the module's own line."""
    need_torch()
    def build(nn, text):
        class Settings(nn.Module):
            def extra_repr(self):
                return text
        return Settings(), nn.Sequential(Settings(), nn.ReLU())
    for text in ('a=1\nb=2', 'a=1', 'a=1\nb=2\nc=3'):
        for ours, theirs in zip(build(tl, text), build(torch.nn, text)):
            assert repr(ours) == repr(theirs), f'{ours!r}\n-- PyTorch --\n{theirs!r}'


def test_module_iterators_are_generators_as_pytorch():
    """parameters, buffers, children, modules and their named_* versions are generators, as torch.nn.Module's:
    next() takes the first item (PyTorch's), each call starts afresh, and an optimizer takes one."""
    need_torch()
    ours, theirs = build_shared_net(tl), build_shared_net(torch.nn)
    for name in ('parameters', 'buffers', 'children', 'modules', 'named_parameters', 'named_buffers',
                 'named_children', 'named_modules'):
        got, want = getattr(ours, name)(), getattr(theirs, name)()
        assert isinstance(got, types.GeneratorType) and isinstance(want, types.GeneratorType), name
        assert len(list(got)) == len(list(want)) and not list(got), name   # used up, as PyTorch's
    assert next(ours.parameters()) is ours.gain and next(ours.buffers()) is ours.block.scale
    assert next(ours.children()) is ours.block and next(ours.modules()) is ours
    opt = tl.SGD(ours.parameters(), lr=0.1)
    assert len(opt.param_groups[0]['params']) == len(list(theirs.parameters())) == 9

def test_module_train_eval():
    net = build_net(tl)
    x = tl.Tensor(net_input())
    assert net.eval() is net and not net.training and not net.head.training
    a, b = net(x).numpy(), net(x).numpy()
    assert np.array_equal(a, b), 'eval mode must be deterministic (no dropout, running stats)'
    assert net.train() is net and net.training and net.head.training
    tl.manual_seed(0)
    assert not np.allclose(net(x).numpy(), a)


def test_module_train_mode_must_be_bool():
    """As PyTorch: train(mode) with a mode that is not a bool (an int, a string, a NumPy bool) raises ValueError and
    leaves every module's mode as it was; eval() and train(False) still switch."""
    need_torch()
    net, net_t = build_net(tl), build_net(torch.nn)
    for mode in (0, 1, 'eval', np.bool_(False), None):
        raises(ValueError, lambda: net_t.train(mode), 'boolean')
        raises(ValueError, lambda: net.train(mode), 'boolean', type(mode).__name__)
        assert net.training and net.head.training and net.head[0].training
    assert not net.train(False).head[0].training and net.train(True).head[0].training and not net.eval().training


def test_module_zero_grad():
    net = build_net(tl)
    net(tl.Tensor(net_input())).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None or not p.grad.numpy().any() for p in net.parameters())


def test_module_requires_grad_as_pytorch():
    """Module.requires_grad_(False) freezes every parameter (no .grad after a backward), requires_grad_() unfreezes
    them; each returns the module. A flag that is not a bool (a tensor's too), or True with an integer parameter, raises
    TypeError and changes no parameter."""
    net = build_net(tl)
    assert net.requires_grad_(False) is net and not any(p.requires_grad for p in net.parameters())
    x = tl.Tensor(net_input(), requires_grad=True)
    net(x).sum().backward()
    assert x.grad is not None and all(p.grad is None for p in net.parameters())
    assert net.requires_grad_() is net and all(p.requires_grad for p in net.parameters())
    if torch is not None:
        raises(TypeError, lambda: torch.nn.Linear(2, 3).requires_grad_(1), 'bool')
    raises(TypeError, lambda: net.requires_grad_(0), 'bool')
    assert all(p.requires_grad for p in net.parameters())
    for make in (lambda: tl.zeros(2, requires_grad=1), lambda: tl.randn(2).requires_grad_(1),
                 lambda: tl.Parameter(tl.randn(2), requires_grad='yes')):   # tensors too, as PyTorch's
        raises(TypeError, make, 'bool')
    net.requires_grad_(False)
    net.steps = tl.Parameter(tl.tensor([1, 2]), requires_grad=False)
    raises(TypeError, lambda: net.requires_grad_(True), 'steps', 'int64')
    assert not any(p.requires_grad for p in net.parameters())


def test_module_registration_and_lookup_as_pytorch():
    """register_parameter (None: a slot only a Parameter fills), add_module and register_module, get_submodule,
    get_parameter and get_buffer (AttributeError naming the part missing), named_parameters and named_buffers with
    remove_duplicate=False, a module graph with a cycle (parameters, buffers, zero_grad and to walk it once), and a
    one-element value loaded into a 0-d buffer (older checkpoints' count), each as PyTorch's."""
    need_torch()
    def build(nn):
        m = nn.Module()
        m.register_parameter('w', None)
        m.add_module('body', nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)))
        m.register_module('head', nn.Linear(3, 1))
        m.add_module('spare', None)
        return m
    ours, theirs = build(tl), build(torch.nn)
    assert as_torch_prints(ours, theirs) == repr(theirs), (repr(ours), repr(theirs))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for nn, m in ((torch.nn, theirs), (tl, ours)):
        m.register_parameter('w', None)   # (a slot set to None takes its kind again)
        m.add_module('spare', None)
        raises(TypeError, lambda: setattr(m, 'w', nn.Linear(1, 1).weight.detach() * 1))
        raises(KeyError, lambda: m.register_parameter('body', None), 'exists')
        raises(KeyError, lambda: m.add_module('a.b', None))
        one = nn.Parameter((tl if nn is tl else torch).ones(1))
        m.register_buffer('held', one)   # a buffer holding a Parameter stays a buffer: no parameter of its name
        raises(KeyError, lambda: m.register_parameter('held', one))
        del m.held
        m.w = nn.Parameter(m.head.weight.detach().clone())
        m.body[0].weight = m.head.weight   # shared
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_parameters(remove_duplicate=False)] == \
        [n for n, _ in theirs.named_parameters(remove_duplicate=False)]
    assert [n for n, _ in ours.named_buffers(remove_duplicate=False)] == \
        [n for n, _ in theirs.named_buffers(remove_duplicate=False)]
    assert ours.get_submodule('body.1') is ours.body[1] and ours.get_submodule('') is ours
    assert ours.get_parameter('body.0.bias') is ours.body[0].bias and ours.get_buffer('body.1.running_var') is \
        ours.body[1].running_var
    for call in (lambda m: m.get_submodule('body.7'), lambda m: m.get_parameter('body.1.running_mean'),
                 lambda m: m.get_buffer('head.weight')):
        raises(AttributeError, lambda: call(theirs))
        raises(AttributeError, lambda: call(ours))
    layer = tl.Linear(2, 2)
    loop = tl.Sequential(layer, tl.BatchNorm1d(2))
    layer.owner = loop   # a cycle
    assert len(list(loop.parameters())) == 4 and len(list(loop.buffers())) == 3
    loop.zero_grad()
    assert loop.double() is loop and layer.weight.dtype == np.float64
    state = tl.BatchNorm1d(3).state_dict()
    state['num_batches_tracked'] = np.array([5])
    norm = tl.BatchNorm1d(3)
    norm.load_state_dict(state)
    assert norm.num_batches_tracked.shape == () and norm.num_batches_tracked.item() == 5


def test_module_forward_hooks_as_pytorch():
    """register_forward_pre_hook and register_forward_hook as PyTorch's: each hook sees the module, its args (and
    output), in the order registered (prepend=True: first); a result other than None replaces the args (one value or a
    tuple; with_kwargs=True, an (args, kwargs) pair, anything else a RuntimeError) or the output; handle.remove() takes
    a hook off; the values against PyTorch's with copied weights (float64)."""
    need_torch()
    x = sample(rng('forward hooks'), (4, 2))
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1)).double()
    ours = tl.Sequential(tl.Linear(2, 3), tl.ReLU(), tl.Linear(3, 1)).double()
    ours.load_state_dict(theirs.state_dict())
    runs = []
    for lib, net in ((tl, ours), (torch, theirs)):
        seen = []
        handles = [net[1].register_forward_hook(lambda m, args, out: seen.append((type(m).__name__, tuple(out.shape)))),
                   net[1].register_forward_hook(lambda m, args, out: out * 2),
                   net[0].register_forward_pre_hook(lambda m, args: args[0] + 1),
                   net[2].register_forward_pre_hook(lambda m, args: (args[0] - 0.5,))]
        hooked = net(lib.tensor(x)).detach().numpy()
        for h in handles[1:]:
            h.remove()
        runs.append((hooked, net(lib.tensor(x)).detach().numpy(), seen))
    (a, a2, a_seen), (b, b2, b_seen) = runs
    assert_close(a, b, 1e-12, 1e-12, 'hooked')
    assert_close(a2, b2, 1e-12, 1e-12, 'hooks removed')
    assert a_seen == b_seen == [('ReLU', (4, 3))] * 2, (a_seen, b_seen)
    orders = []   # prepend= and with_kwargs= (the kwargs passed, a pre-hook's (args, kwargs) pair replacing them)
    for lib, net in ((tl, ours), (torch, theirs)):
        order = []
        net[2].register_forward_hook(lambda m, args, out: order.append('last'))
        net[2].register_forward_hook(lambda m, args, out: order.append('first'), prepend=True)
        net[2].register_forward_hook(lambda m, args, kwargs, out: order.append(sorted(kwargs)), with_kwargs=True)
        net[0].register_forward_pre_hook(lambda m, args, kwargs: ((args[0] * 0,), kwargs), with_kwargs=True)
        zeroed = net(lib.tensor(x)).detach().numpy()
        orders.append((order, zeroed))
        handle = net[0].register_forward_pre_hook(lambda m, args, kwargs: 5, with_kwargs=True)
        raises(RuntimeError, lambda: net(lib.tensor(x)), *(['pre-hook'] if lib is tl else []))
        handle.remove()
    assert orders[0][0] == orders[1][0] == ['first', 'last', []], orders
    assert_close(orders[0][1], orders[1][1], 1e-12, 1e-12, 'args replaced by a with_kwargs pre-hook')


def test_module_to_gives_changed_buffers_new_tensors():
    """Module.to/.double()/.half() gives a buffer whose dtype or device changes a new tensor, as PyTorch's: the
    tensor the caller registered (a loss's weight=) stays as it was and still serves the module it was given to;
    parameters change in place (their identity kept, as PyTorch's); a buffer that does not change keeps its tensor,
    a parameter that does not its memory; a renewed buffer keeps requires_grad, as PyTorch's (and its grad)."""
    need_torch()
    logits, target, losses = np.array([[0.2, -1.0, 0.5]]), np.array([2]), []
    for m, loss in ((tl, tl.CrossEntropyLoss), (torch, torch.nn.CrossEntropyLoss)):
        w = m.tensor([1.0, 2.0, 3.0])
        kept, doubled = loss(weight=w), loss(weight=w).double()
        assert str(w.dtype).endswith('float32') and str(doubled.weight.dtype).endswith('float64'), m.__name__
        assert str(doubled(m.tensor(logits), m.tensor(target)).dtype).endswith('float64'), m.__name__
        losses.append(float(kept(m.tensor(logits.astype(np.float32)), m.tensor(target)).item()))   # still float32
    assert abs(losses[0] - losses[1]) < 1e-6, losses
    bn = tl.BatchNorm1d(3)
    weight, mean = bn.weight, bn.running_mean
    bn.double()
    assert bn.weight is weight and bn.weight.dtype == np.float64 and bn.running_mean is not mean, 'identities'
    assert bn.running_mean.dtype == np.float64 and mean.dtype == np.float32 and bn.num_batches_tracked.dtype == np.int64
    counter, mean, memory = bn.num_batches_tracked, bn.running_mean, bn.weight.data
    bn.double()
    assert bn.running_mean.dtype == np.float64 and bn.num_batches_tracked is counter, 'an unchanged buffer replaced'
    assert bn.running_mean is mean and bn.weight.data is memory, 'a float64 module copied by .double()'
    for m in (torch, tl):   # a renewed buffer keeps requires_grad, as PyTorch's (and here its grad, converted)
        module = (tl if m is tl else torch.nn).Module()
        module.register_buffer('b', m.ones(2, requires_grad=True))
        module.b.grad = m.ones(2)
        module.double()
        assert module.b.dtype == m.float64 and module.b.requires_grad, m.__name__
    assert module.b.grad.dtype == np.float64 and np.array_equal(module.b.grad.numpy(), [1, 1])


def test_audit_survivors_pinned():
    """Behaviours a mutation audit (twenty-fifth session) found no test would notice going wrong, each against PyTorch:
    SGD's momentum buffer is its own memory (with zero_grad(set_to_none=False) zeroing the gradients in place, an
    aliased buffer lost the momentum); load_state_dict between a forward and its backward bumps the versions (the
    backward raises, not a wrong gradient); a cast's backward casts back (float16 overflow before a .float() stays
    inf, as loss scaling relies on); mean, var and std of nothing are NaN; a module's and an optimizer's state_dict
    are copies (this project's contract: PyTorch's share memory), unchanged by a later step."""
    need_torch()
    results = []
    for m, optim in ((tl, tl), (torch, torch.optim)):
        p = m.tensor(np.array([1.0, -2.0]), requires_grad=True)
        opt = optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True)
        for step in range(3):
            opt.zero_grad(set_to_none=False)
            (p * p * (step + 1)).sum().backward()
            opt.step()
        results.append(p.detach().numpy().copy())
        if m is tl:
            assert not np.shares_memory(opt.state[p]['momentum_buffer'].data, p.grad.data)
    assert np.allclose(results[0], results[1], 1e-12, 1e-12), results
    for m in (tl, torch):
        lin = (tl.Linear if m is tl else torch.nn.Linear)(2, 1).double()
        state = {k: np.asarray(v) * 2 for k, v in (lin.state_dict() if m is tl else
                                                   {k: v.detach().numpy() for k, v in lin.state_dict().items()}).items()}
        y = (m.tensor(np.ones((1, 2)), requires_grad=True) @ lin.weight.T).sum()
        lin.load_state_dict(state if m is tl else {k: torch.tensor(v) for k, v in state.items()})
        raises(RuntimeError, lambda: y.backward())
    grads = []
    for m in (tl, torch):
        x = m.tensor(np.array([300.0, 1.0], np.float16), requires_grad=True)
        w = m.tensor(np.array([250.0, 0.5], np.float16), requires_grad=True)
        with np.errstate(over='ignore'):   # (300 * 250 is inf in float16, as meant)
            ((x * w).float() * 1e5).sum().backward()
        grads.append((x.grad.numpy(), w.grad.numpy()))
    for ours, theirs in zip(*grads):
        assert ours.dtype == np.float16 and np.array_equal(ours, theirs), (ours, theirs)
    for name in ('mean', 'var', 'std'):
        for shape, axis in (((0,), None), ((2, 0), 1)):
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')   # (PyTorch warns of the degrees of freedom)
                got, want = (getattr(m.zeros(*shape), name)(*(() if axis is None else (axis,))) for m in (tl, torch))
            assert got.shape == tuple(want.shape) and np.isnan(got.numpy()).all() and np.isnan(want.numpy()).all()
    model = tl.Linear(2, 2)
    opt = tl.Adam(model.parameters(), lr=0.1)
    model(tl.ones(1, 2)).sum().backward()
    opt.step()
    saved, saved_opt = model.state_dict(), opt.state_dict()
    before = {k: v.copy() for k, v in saved.items()}
    steps = [np.array(s['step']).copy() for s in saved_opt['state'].values()]
    model(tl.ones(1, 2)).sum().backward()
    opt.step()
    assert all(np.array_equal(saved[k], before[k]) for k in saved), 'a later step changed a saved state_dict'
    assert [np.array(s['step']) for s in saved_opt['state'].values()] == steps, 'a later step changed a saved step'


def test_state_dict_round_trip():
    tl.manual_seed(0)
    a, b = build_net(tl), build_net(tl)
    a(tl.Tensor(net_input()))  # moves the running statistics
    b.load_state_dict(a.state_dict())
    a.eval(), b.eval()
    assert_close(a(tl.Tensor(net_input())), b(tl.Tensor(net_input())), 0, 0)
    for k, v in a.state_dict().items():
        assert np.array_equal(v, b.state_dict()[k]), k


def test_load_state_dict_from_torch_tensors_lists_and_numbers():
    need_torch()
    torch.manual_seed(0)
    tm, lm = build_net(torch.nn), build_net(tl)
    perturb_torch(tm, rng('sd_torch'))
    lm.load_state_dict(tm.state_dict())  # torch tensors, some requiring grad
    for k, v in lm.state_dict().items():
        assert_close(v, torch_state(tm)[k], 0, 0, k)
    sd = {k: v.tolist() for k, v in lm.state_dict().items()}  # nested lists, and a Python int
    sd['head.0.num_batches_tracked'] = 7
    lm.load_state_dict(sd)
    assert lm.state_dict()['head.0.num_batches_tracked'] == 7 and lm.head[0].num_batches_tracked.dtype == np.int64
    assert_close(lm.stem.weight, torch_state(tm)['stem.weight'], 0, 0)


def test_save_load_npz_round_trip():
    tl.manual_seed(0)
    a, b = build_net(tl), build_net(tl)
    a(tl.Tensor(net_input()))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'model.npz')
        tl.save(a.state_dict(), path)
        assert os.listdir(d) == ['model.npz'], os.listdir(d)  # written atomically: no temporary left behind
        with np.load(path, allow_pickle=False) as z:  # plain arrays, no pickled code
            assert all(z[f].dtype != object for f in z.files)
        loaded = tl.load(path)
        b.load_state_dict(loaded)
    for k, v in a.state_dict().items():
        assert_close(to_np(loaded[k]), v, 0, 0, k)
    a.eval(), b.eval()
    assert_close(a(tl.Tensor(net_input())), b(tl.Tensor(net_input())), 0, 0)


def test_error_save_object_array_writes_nothing():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'model.npz')
        tl.save({'w': np.ones(2)}, path)
        bad = {'model': {'w': np.zeros(2), 'meta': np.array([None, 1], dtype=object)}}
        raises(TypeError, lambda: tl.save(bad, path), "['model']['meta']", 'object')
        assert os.listdir(d) == ['model.npz'], os.listdir(d)
        assert_close(tl.load(path)['w'], np.ones(2), 0, 0, 'the earlier file was overwritten')


def test_error_load_of_other_files_and_save_into_missing_folder():
    """load() of a file save() did not write (NumPy's .npz of other arrays, a .npy, bytes of neither) says so, not
    NumPy's KeyError or its advice to unpickle, nor does one cut short, emptied or with an altered tree (BadZipFile,
    EOFError, KeyError, JSONDecodeError before); save() into a folder that does not exist, or onto a folder, names the
    path given, not its temporary file."""
    with tempfile.TemporaryDirectory() as d:
        np.savez(os.path.join(d, 'plain.npz'), x=np.ones(2))
        np.save(os.path.join(d, 'one.npy'), np.ones(2))
        with open(os.path.join(d, 'junk.bin'), 'wb') as f:
            f.write(bytes(range(256)) * 4)
        for name, why in (('plain.npz', "no 'tree' entry"), ('one.npy', "no 'tree' entry"), ('junk.bin', 'not an .npz')):
            raises(ValueError, lambda: tl.load(os.path.join(d, name)), name, 'not a file that save() wrote', why)
        path = os.path.join(d, 'missing', 'model.npz')
        msg = raises(FileNotFoundError, lambda: tl.save({'w': np.ones(2)}, path), path, 'no such folder')
        assert '.tmp' not in msg, msg
        msg = raises(IsADirectoryError, lambda: tl.save({'w': np.ones(2)}, d), d, 'folder')
        assert '.tmp' not in msg and sorted(os.listdir(d)) == ['junk.bin', 'one.npy', 'plain.npz'], (msg, os.listdir(d))
        good = os.path.join(d, 'good.npz')   # a save() file cut short, emptied, or with a tree its arrays do not fit
        tl.save({'w': np.arange(50000.0), 'b': [1, 2]}, good)
        whole = open(good, 'rb').read()
        np.savez(os.path.join(d, 'tree.npz'), tree=np.array('{"array": 3}'))
        np.savez(os.path.join(d, 'text.npz'), tree=np.array('{not json'))
        for name, data in (('half.npz', whole[:len(whole) // 2]), ('empty.npz', b''), ('tail.npz', whole[:-10])):
            with open(os.path.join(d, name), 'wb') as f:
                f.write(data)
        for name in ('half.npz', 'empty.npz', 'tail.npz', 'tree.npz', 'text.npz'):
            raises(ValueError, lambda: tl.load(os.path.join(d, name)), name, 'not a file that save() wrote')


def test_save_file_mode_fsync_and_tensor_keys():
    """tl.save: the file gets the mode a new file gets under the umask (not mkstemp's 0600), it is fsynced before it is
    renamed into place, and a dict keyed by a Tensor (load() would read an array, unhashable) is refused when saving."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'model.npz')
        old = os.umask(0o022)
        try:
            for umask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
                os.umask(umask)
                tl.save({'w': np.ones(2)}, path)
                assert os.stat(path).st_mode & 0o777 == mode, (oct(umask), oct(os.stat(path).st_mode))
        finally:
            os.umask(old)
        calls, replace = [], os.replace
        def renamed(src, dst):
            calls.append('replace')
            replace(src, dst)
        with mock.patch.object(os, 'fsync', lambda fd: calls.append('fsync')), \
                mock.patch.object(os, 'replace', renamed):
            tl.save({'w': np.zeros(3)}, path)
        assert calls == ['fsync', 'replace'], calls
        t = tl.Tensor([1.0])
        raises(TypeError, lambda: tl.save({t: 1}, path), 'a key of obj', 'Tensor')
        raises(TypeError, lambda: tl.save({'a': {(1, t): 2}}, path), "a key of obj['a']", 'Tensor')
        assert os.listdir(d) == ['model.npz'] and np.array_equal(tl.load(path)['w'], np.zeros(3)), os.listdir(d)


def test_module_to_dtype():
    net = build_net(tl)
    assert net.double() is net
    sd = net.state_dict()
    assert all(sd[k].dtype == np.float64 for k in sd if 'num_batches' not in k)
    assert net(tl.Tensor(net_input().astype(np.float64))).dtype == np.float64
    assert net.to(np.float16) is net and all(p.dtype == np.float16 for p in net.parameters())
    assert net.float() is net and all(p.dtype == np.float32 for p in net.parameters())
    assert net.half() is net and net.head.state_dict()['0.running_var'].dtype == np.float16
    assert net.to('cpu') is net and net.cpu() is net


def test_module_to_failing_midway_changes_nothing():
    """Module.to converts every parameter, buffer and gradient before it assigns any: a conversion that fails after
    some succeeded (here a move that runs out of memory at the third tensor) leaves every dtype and value as it was;
    one that succeeds converts them all."""
    net = build_net(tl)
    net(tl.Tensor(net_input())).sum().backward()
    before = {n: (t.dtype, t.numpy().copy()) for n, t, _ in net._named_tensors()}
    grads = {n: p.grad.numpy().copy() for n, p in net.named_parameters()}
    moves = []

    def failing_move(array, device):
        moves.append(device)
        if len(moves) == 3:
            raise MemoryError('out of memory (simulated)')
        return array
    with mock.patch.object(tl, '_move', failing_move):
        raises(MemoryError, lambda: net.to('cpu', dtype=np.float64), 'simulated')
    assert len(moves) == 3
    for n, t, _ in net._named_tensors():
        assert t.dtype == before[n][0] and np.array_equal(t.numpy(), before[n][1]), n
    for n, p in net.named_parameters():
        assert p.grad.dtype == np.float32 and np.array_equal(p.grad.numpy(), grads[n]), n
    assert net.to('cpu', dtype=np.float64) is net
    for n, t, _ in net._named_tensors():
        assert t.dtype == (before[n][0] if 'num_batches' in n else np.float64), n
        assert np.array_equal(t.numpy(), before[n][1]), n
    assert all(p.grad.dtype == np.float64 for p in net.parameters())


# ===== optimizers: several steps against torch.optim =====

OPTIMS = [
    ('sgd', 'SGD', dict(lr=0.1), None),
    ('sgd_momentum', 'SGD', dict(lr=0.1, momentum=0.9), None),
    ('sgd_nesterov', 'SGD', dict(lr=0.1, momentum=0.9, nesterov=True), None),
    ('sgd_weight_decay', 'SGD', dict(lr=0.1, momentum=0.5, weight_decay=0.1), None),
    ('sgd_nesterov_wd', 'SGD', dict(lr=0.05, momentum=0.85, nesterov=True, weight_decay=0.02), None),
    ('adam', 'Adam', dict(lr=0.01), None),
    ('adam_betas_eps', 'Adam', dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6), None),
    ('adam_weight_decay', 'Adam', dict(lr=0.01, weight_decay=0.1), None),
    ('adamw', 'AdamW', dict(lr=0.01), None),
    ('adamw_weight_decay', 'AdamW', dict(lr=0.01, weight_decay=0.3), None),
    ('adam_decoupled', 'Adam', dict(lr=0.01, weight_decay=0.3, decoupled_weight_decay=True), None),
    ('sgd_groups', 'SGD', dict(lr=0.1, momentum=0.9), [('0.', {}), ('2.', {'lr': 0.01, 'weight_decay': 0.05})]),
    ('adam_groups', 'Adam', dict(lr=0.01), [('0.', {'lr': 0.05}), ('2.', {'betas': (0.5, 0.9)})]),
    ('adamw_groups', 'AdamW', dict(lr=0.01), [('0.', {'weight_decay': 0.0}), ('2.', {'lr': 0.03})]),
    ('adam_decoupled_groups', 'Adam', dict(lr=0.01, weight_decay=0.2),
     [('0.', {'decoupled_weight_decay': True}), ('2.', {'lr': 0.03})]),
]


def optim_model(nn):
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))


def make_optimizer(cls, module, kw, groups):
    params = list(module.parameters()) if groups is None else [
        dict(params=[p for n, p in module.named_parameters() if n.startswith(prefix)], **opts)
        for prefix, opts in groups]
    return cls(params, **kw)


def train_steps(m, module, opt, steps=6):
    """Full-batch MSE steps; halves the first group's lr after step 3. Returns the parameters after each step."""
    r = rng('optim_data')
    p0 = next(iter(module.parameters()))
    device = p0.device if m is tl else None
    x, y = (make(m, sample(r, s).astype(to_np(p0).dtype), device=device) for s in ((8, 3), (8, 2)))
    history = []
    for step in range(steps):
        opt.zero_grad()
        m.mse_loss(module(x), y).backward()
        opt.step()
        if step == 2:
            opt.param_groups[0]['lr'] *= 0.5
        history.append([to_np(p).copy() for p in module.parameters()])
    return history


def check_optim(cls_name, kw, groups):
    need_torch()
    tl.manual_seed(0)
    torch.manual_seed(0)
    tm = optim_model(torch.nn).double()
    lm = optim_model(tl)
    lm.load_state_dict(torch_state(tm))
    lm = lm.double()
    got = train_steps(tl, lm, make_optimizer(getattr(tl, cls_name), lm, kw, groups))
    want = train_steps(TH, tm, make_optimizer(getattr(torch.optim, cls_name), tm, kw, groups))
    for step, (g, w) in enumerate(zip(got, want)):
        for k, (a, b) in enumerate(zip(g, w)):
            assert_close(a, b, 1e-8, 1e-10, f'step {step} parameter {k}')
    assert all(not np.allclose(a, b) for a, b in zip(got[0], got[-1])), 'some parameter never moved'


def check_optim_gpu(cls_name, kw, groups, dtype=np.float32):
    """The GPU's steps against the CPU's; float16: the fused SGD kernel rounds once per step where the CPU rounds as
    torch.optim's ops do, so within a few float16 steps."""
    need_cuda()
    tl.manual_seed(0)
    cpu, gpu = optim_model(tl).to(dtype), optim_model(tl).to(dtype)
    gpu.load_state_dict(cpu.state_dict())
    gpu = gpu.cuda()
    got = train_steps(tl, gpu, make_optimizer(getattr(tl, cls_name), gpu, kw, groups))
    want = train_steps(tl, cpu, make_optimizer(getattr(tl, cls_name), cpu, kw, groups))
    for a, b in zip(got[-1], want[-1]):
        assert a.dtype == b.dtype == dtype
        assert_close(a, b, *((1e-4, 1e-5) if dtype == np.float32 else (1e-2, 1e-2)))


for _name, _cls, _kw, _groups in OPTIMS:
    register(f'test_optim_{_name}', lambda c=_cls, kw=_kw, g=_groups: check_optim(c, kw, g))


def test_optim_state_keyed_by_parameter_as_pytorch():
    """opt.state[p] is the state of parameter p (the tensor itself, two of equal values apart), as torch.optim's: a
    dict of tensors (SGD's 'momentum_buffer'; Adam's 'step', a float32 count on the CPU, 'exp_avg', 'exp_avg_sq'),
    PyTorch's after the same steps, and {} for a parameter not stepped yet; the next step reads its tensors as edited
    in place; state_dict() / load_state_dict() carry it into another optimizer."""
    need_torch()
    r = rng('optim_state_by_parameter')
    w0, grads = r.standard_normal((2, 3)), [r.standard_normal((2, 3)) for _ in range(3)]
    for name, kw, keys in (('SGD', dict(lr=0.1, momentum=0.9), ['momentum_buffer']),
                           ('Adam', dict(lr=0.05), ['exp_avg', 'exp_avg_sq', 'step']),
                           ('AdamW', dict(lr=0.05, weight_decay=0.1), ['exp_avg', 'exp_avg_sq', 'step'])):
        ours = [tl.Parameter(w0.copy()) for _ in range(3)]
        theirs = [torch.nn.Parameter(torch.tensor(w0)) for _ in range(3)]
        opt, ref = getattr(tl, name)(ours, **kw), getattr(torch.optim, name)(theirs, **kw)

        def step(g):
            for k in range(2):   # the third parameter gets no gradient
                ours[k].grad, theirs[k].grad = tl.Tensor(g * (k + 1)), torch.tensor(g * (k + 1))
            opt.step()
            ref.step()
        for g in grads:
            step(g)
        for p, q in zip(ours[:2], theirs):
            assert sorted(opt.state[p]) == sorted(ref.state[q]) == keys, (name, list(opt.state[p]), list(ref.state[q]))
            for k in keys:
                v, want = opt.state[p][k], ref.state[q][k]
                assert isinstance(v, tl.Tensor) and same_dtype(v, want) and v.device == 'cpu', (name, k, type(v))
                assert_close(v, want, 1e-12, 1e-12, f'{name} state {k}')
        assert opt.state[ours[2]] == {} == ref.state[theirs[2]]
        edited = keys[0]
        opt.state[ours[0]][edited] *= 0.5
        ref.state[theirs[0]][edited].mul_(0.5)
        step(grads[0])
        for p, q in zip(ours, theirs):
            assert_close(p, q, 1e-12, 1e-12, f'{name} after the state was edited')
        copies = [tl.Parameter(p.numpy().copy()) for p in ours]
        again = getattr(tl, name)(copies, **kw)
        again.load_state_dict(opt.state_dict())
        for p, q in zip(ours[:2], copies):
            for k in keys:
                assert isinstance(again.state[q][k], tl.Tensor) and again.state[q][k] is not opt.state[p][k]
                assert np.array_equal(again.state[q][k].numpy(), opt.state[p][k].numpy()), (name, k)


def float16_ulps(a, b):
    """How many float16 values lie between a and b, elementwise (0 where equal, -0 and +0 as one)."""
    key = lambda x: (lambda u: np.where(u & 0x8000, -(u & 0x7fff), u))(to_np(x).view(np.uint16).astype(np.int64))
    return np.abs(key(a) - key(b))


def float16_as_pytorch(ours, theirs, exact, size=0):
    """float16 results of float32 sums rounded once, as PyTorch's: each element within one float16 step of PyTorch's
    (theirs), or no farther from the exact (float64) one than PyTorch's is, give or take float32's rounding of a sum of
    up to 128 terms (2^-17 of `size`, the sum of the terms' magnitudes). Where a sum nearly cancels, float32's rounding
    can pass a float16 step, and the order of PyTorch's CPU sums is not the same on every host."""
    if ours.shape != theirs.shape:
        return False
    error, error_t = (np.abs(a.astype(np.float64) - exact) for a in (ours, theirs))
    return bool(((float16_ulps(ours, theirs) <= 1) | (error <= error_t + 2 ** -17 * size)).all())


def test_optim_float16_as_pytorch():
    """float16 parameters step as torch.optim's: each of its ops computes in float32 and rounds once to float16 (an
    add's alpha, SGD's lr for one, rounded to float16 first), the state float16 as PyTorch's. After six steps every
    element of the parameter and the state is within one float16 ulp of PyTorch's and all but 0.1% are identical (all
    are here; a CPU's fused multiply-adds may round otherwise). 1024 elements: PyTorch's CPU kernels compute those
    past the last whole vector another way, with float16 products."""
    need_torch()
    cases = [('SGD', dict(lr=0.1)), ('SGD', dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
             ('SGD', dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1)),
             ('SGD', dict(lr=0.05, momentum=0.85, nesterov=True, weight_decay=0.02)),
             ('Adam', dict(lr=0.01)), ('Adam', dict(lr=0.02, betas=(0.8, 0.99), eps=1e-4, weight_decay=0.1)),
             ('AdamW', dict(lr=0.01)), ('AdamW', dict(lr=0.02, weight_decay=0.3))]
    for name, kw in cases:
        r = rng(('optim_float16', name, tuple(kw.items())))
        w0 = r.standard_normal((16, 64)).astype(np.float16)
        # gradients of 0.1 to 2 in size: Adam's float16 exp_avg_sq underflows to 0 for smaller ones (then p is inf)
        grads = [(r.choice([-1, 1], w0.shape) * r.uniform(0.1, 2, w0.shape)).astype(np.float16) for _ in range(6)]
        w, wt = tl.Parameter(w0.copy()), torch.nn.Parameter(torch.tensor(w0))
        ours, theirs = getattr(tl, name)([w], **kw), getattr(torch.optim, name)([wt], **kw)
        for g in grads:
            w.grad, wt.grad = tl.Tensor(g), torch.tensor(g)
            ours.step()
            theirs.step()
        assert w.dtype == np.float16 and all(same_dtype(ours.state[w][k], v) for k, v in theirs.state[wt].items())
        assert 'step' not in ours.state[w] or ours.state[w]['step'].item() == theirs.state[wt]['step'].item() == 6
        for k, v in [('parameter', (w, wt))] + [(k, (ours.state[w][k], v)) for k, v in theirs.state[wt].items()
                                                 if k != 'step']:
            ulps = float16_ulps(*v)
            assert ulps.max() <= 1 and (ulps > 0).mean() <= 1e-3, \
                f'{name} {kw} {k}: {(ulps > 0).sum()} of {ulps.size} differ, by up to {ulps.max()} ulps'


def test_adam_exp_avg_lerp_forms_as_pytorch():
    """Adam's and AdamW's exp_avg is PyTorch's m.lerp_(g, 1 - beta1), whose form switches at a weight of 0.5: with
    beta1 = 0 it is the gradient itself (m + 1 * (g - m) loses a small g after a large one); float32 and float64,
    gradients of sizes 1e-6 to 1e2. After five steps exp_avg equals torch.optim's at beta1 0 and 0.5 (products exact),
    elsewhere within a few ulps of the largest gradient (PyTorch's CPU kernel fuses the multiply-add), and the
    parameters are within 2 ulps."""
    need_torch()
    for dtype in (np.float32, np.float64):
        for betas in ((0.0, 0.99), (0.3, 0.999), (0.5, 0.9), (0.9, 0.999)):
            for name in ('Adam', 'AdamW'):
                r = rng(('adam lerp', np.dtype(dtype).name, betas, name))
                w0 = r.standard_normal(256).astype(dtype)
                w, wt = tl.Parameter(w0.copy()), torch.nn.Parameter(torch.tensor(w0))
                ours, theirs = getattr(tl, name)([w], lr=0.01, betas=betas), getattr(torch.optim, name)([wt], lr=0.01,
                                                                                                          betas=betas)
                for k in range(5):
                    g = (r.standard_normal(256) * 10.0 ** (2 - 8 * (k % 2))).astype(dtype)   # large, tiny, ...
                    w.grad, wt.grad = tl.tensor(g), torch.tensor(g)
                    ours.step()
                    theirs.step()
                m, m_t = ours.state[w]['exp_avg'].numpy(), theirs.state[wt]['exp_avg'].numpy()
                what = f'{name} {np.dtype(dtype).name} betas {betas}'
                if betas[0] in (0, 0.5):
                    assert np.array_equal(m, m_t) and (betas[0] or np.array_equal(m, g)), what
                assert np.all(np.abs(m - m_t) <= 8 * np.spacing(dtype(100))), what
                assert np.all(np.abs(w.numpy() - wt.detach().numpy()) <= 2 * np.spacing(np.abs(w0) + 1)), what


def test_optim_skips_params_without_grad():
    tl.manual_seed(0)
    used, unused = tl.Linear(2, 2), tl.Linear(2, 2)
    before = [p.numpy().copy() for p in unused.parameters()]
    w0 = used.weight.numpy().copy()
    opt = tl.AdamW(list(used.parameters()) + list(unused.parameters()), lr=0.1, weight_decay=0.5)
    used(tl.Tensor(sample(rng('skip'), (3, 2)).astype(np.float32))).sum().backward()
    opt.step()
    for a, b in zip(unused.parameters(), before):
        assert np.array_equal(a.numpy(), b), 'a parameter without grad moved'
    assert not np.allclose(used.weight.numpy(), w0), 'a parameter with grad did not move'


def test_optim_zero_grad_and_state_dict():
    tl.manual_seed(0)
    lin = tl.Linear(3, 2)
    opt = tl.Adam(lin.parameters(), lr=0.01)
    lin(tl.Tensor(sample(rng('zg'), (4, 3)).astype(np.float32))).sum().backward()
    opt.step()
    sd = opt.state_dict()
    assert isinstance(sd, dict) and 'state' in sd and 'param_groups' in sd
    assert opt.param_groups[0]['lr'] == 0.01 and len(opt.param_groups[0]['params']) == 2
    opt.zero_grad()
    assert all(p.grad is None or not p.grad.numpy().any() for p in lin.parameters())
    # a rate held in a one-element tensor (train_cifar's CUDA graph reads it) saves as a 0-d array: loaded as a number
    opt.param_groups[0]['lr'] = tl.tensor(np.float32(0.02))
    with tempfile.TemporaryDirectory() as d:
        tl.save(opt.state_dict(), os.path.join(d, 'opt.npz'))
        again = tl.Adam(lin.parameters(), lr=0.5)
        again.load_state_dict(tl.load(os.path.join(d, 'opt.npz')))
    assert float(again.param_groups[0]['lr']) == np.float32(0.02)


def test_optim_lr_zero_keeps_params():
    tl.manual_seed(0)
    lin = tl.Linear(3, 2)
    before = [p.numpy().copy() for p in lin.parameters()]
    opt = tl.SGD(lin.parameters(), lr=0.5)
    opt.param_groups[0]['lr'] = 0.0
    lin(tl.Tensor(sample(rng('lr0'), (4, 3)).astype(np.float32))).sum().backward()
    opt.step()
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(lin.parameters(), before))


def test_optim_load_state_dict_from_torch():
    """Adam's state from torch.optim (tensors, a float step) continues exactly as torch.optim does."""
    need_torch()
    torch.manual_seed(0)
    tm, lm = optim_model(torch.nn).double(), optim_model(tl).double()
    x, y = (sample(rng('optim_from_torch'), s) for s in ((8, 3), (8, 2)))
    topt, lopt = torch.optim.Adam(tm.parameters(), lr=0.05), tl.Adam(lm.parameters(), lr=0.5)

    def steps(m, module, opt, n):
        for _ in range(n):
            opt.zero_grad()
            m.mse_loss(module(make(m, x)), make(m, y)).backward()
            opt.step()
    steps(TH, tm, topt, 2)
    lm.load_state_dict(tm.state_dict())
    lopt.load_state_dict(topt.state_dict())
    steps(TH, tm, topt, 3)
    steps(tl, lm, lopt, 3)
    for (k, v), w in zip(lm.state_dict().items(), torch_state(tm).values()):
        assert_close(v, w, 1e-10, 1e-12, k)


def test_error_optim_invalid_options():
    """torch.optim's ValueError and message; tinygrad_lite also checks each group's own options."""
    need_torch()
    cases = [('SGD', dict(lr=-0.1)), ('SGD', dict(lr=0.1, momentum=-0.1)), ('SGD', dict(lr=0.1, weight_decay=-1)),
             ('Adam', dict(lr=-1e-3)), ('Adam', dict(eps=-1)), ('Adam', dict(weight_decay=-0.5)),
             ('Adam', dict(betas=(1.0, 0.999))), ('Adam', dict(betas=(0.9, -0.1))), ('AdamW', dict(betas=(0.9, 1.5))),
             ('AdamW', dict(eps=-1e-8))]
    for cls, kw in cases:
        want = raises(ValueError, lambda: getattr(torch.optim, cls)([torch.nn.Parameter(torch.ones(2))], **kw))
        raises(ValueError, lambda: getattr(tl, cls)([tl.Parameter(np.ones(2))], **kw), want)
    raises(ValueError, lambda: tl.SGD([{'params': [tl.Parameter(np.ones(2))], 'momentum': -0.5}], lr=0.1),
           'Invalid momentum value: -0.5')
    for cls, kw in (('SGD', dict(lr=0.0, momentum=0.0, weight_decay=0.0)), ('Adam', dict(lr=0.0, betas=(0.0, 0.0), eps=0.0))):
        getattr(tl, cls)([tl.Parameter(np.ones(2))], **kw), getattr(torch.optim, cls)([torch.nn.Parameter(torch.ones(2))], **kw)


def test_optim_positional_arguments_as_pytorch():
    """Each positional argument means what it does in torch.optim (SGD: params, lr, momentum; Adam / AdamW: params, lr,
    betas, eps, weight_decay), the rest are keyword-only: SGD([p], 0.1, 0.9, 0.5), where torch.optim reads dampening
    0.5, raises TypeError. SGD's lr defaults to torch.optim's 1e-3."""
    need_torch()
    positional = lambda cls: [k for k, v in inspect.signature(cls).parameters.items()
                              if v.kind == v.POSITIONAL_OR_KEYWORD]
    for name in ('SGD', 'Adam', 'AdamW'):
        ours, theirs = positional(getattr(tl, name)), positional(getattr(torch.optim, name))
        assert ours == theirs[:len(ours)], (name, ours, theirs)
        assert inspect.signature(getattr(tl, name)).parameters['lr'].default == getattr(torch.optim, name)([
            torch.nn.Parameter(torch.ones(2))]).defaults['lr'], name
    r = rng('optim_positional')
    w0, grads = r.standard_normal((2, 3)), [r.standard_normal((2, 3)) for _ in range(4)]
    for name, args, kw in (('SGD', (0.1, 0.9), dict(dampening=0.5, weight_decay=0.05, nesterov=False)),
                           ('SGD', (0.1, 0.8), dict(weight_decay=0.05, nesterov=True)), ('SGD', (), {}),
                           ('Adam', (0.05, (0.8, 0.9), 1e-6, 0.1), {}), ('AdamW', (0.05, (0.8, 0.9), 1e-6, 0.1), {})):
        w, wt = tl.Parameter(w0.copy()), torch.nn.Parameter(torch.tensor(w0))
        ours, theirs = getattr(tl, name)([w], *args, **kw), getattr(torch.optim, name)([wt], *args, **kw)
        for g in grads:
            w.grad, wt.grad = tl.Tensor(g), torch.tensor(g)
            ours.step()
            theirs.step()
        assert_close(w, wt, 1e-12, 1e-12, f'{name}{args}{kw}')
    p = tl.Parameter(np.ones(2))
    raises(TypeError, lambda: tl.SGD([p], 0.1, 0.9, 0.5), 'positional')
    raises(TypeError, lambda: tl.Adam([p], 1e-3, (0.9, 0.999), 1e-8, 0.0, False), 'positional')


def test_error_optim_param_in_two_groups():
    need_torch()
    tp = torch.nn.Parameter(torch.ones(2))
    want = raises(ValueError, lambda: torch.optim.SGD([{'params': [tp]}, {'params': [torch.nn.Parameter(torch.ones(1)), tp]}],
                                                      lr=0.1))
    p = tl.Parameter(np.ones(2))
    raises(ValueError, lambda: tl.Adam([{'params': [p]}, {'params': [tl.Parameter(np.ones(1)), p]}]), want)


def test_optim_duplicate_parameters_in_a_group_warn_as_pytorch():
    """A parameter listed twice in one group: PyTorch's warning (and none for distinct parameters), and (as
    PyTorch's) each copy is updated."""
    need_torch()
    results = []
    for m, optim in ((tl, tl), (torch, torch.optim)):
        p = (tl.Parameter(np.ones(2, np.float32)) if m is tl else torch.nn.Parameter(torch.ones(2)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            opt = optim.SGD([p, p], lr=0.1)
        assert any('duplicate parameters' in str(w.message) for w in caught), m.__name__
        q = (tl.Parameter(np.ones(2, np.float32)) if m is tl else torch.nn.Parameter(torch.ones(2)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            optim.Adam([q, m.ones(2, requires_grad=True)])   # distinct parameters: no warning
        assert caught == [], (m.__name__, [str(w.message) for w in caught])
        p.grad = m.ones(2)
        opt.step()
        results.append(p.detach().numpy())
    assert_close(results[0], results[1], 1e-6, 0, 'updated twice')


def optim_snapshot(opt):
    """Everything an optimizer's call could change, as flat_values: each parameter's values, gradient and version, the
    state (by parameter index) and the groups (their options, their parameters by identity)."""
    params = [p for g in opt.param_groups for p in g['params']]
    return flat_values({'params': [[p, 'none' if p.grad is None else p.grad, p._version[0]] for p in params],
                        'state': {i: opt.state[p] for i, p in enumerate(params) if p in opt.state},
                        'groups': [{**g, 'params': [id(p) for p in g['params']]} for g in opt.param_groups]})


def assert_optim_unchanged(opt, before, msg):
    """optim_snapshot(opt) is `before`: the same entries, each of the same dtype and values (NaN where NaN was)."""
    after = optim_snapshot(opt)
    assert [k for k, _ in after] == [k for k, _ in before], f'{msg}: {[k for k, _ in after]}'
    for (k, a), (_, b) in zip(after, before):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == 'f'), f'{msg}: {k} changed'


def test_optim_add_param_group_as_pytorch():
    """add_param_group as torch.optim's: the group's options it lacks are the defaults, and the new group steps as
    torch's (after the first group's state exists). Refused, with nothing added and nothing else changed: a parameter
    already in a group (torch's ValueError and message), a non-leaf (ValueError), a non-tensor or a group that is not
    a dict (TypeError), a group without 'params' (KeyError), and (checked as the constructor checks each group; torch
    takes them) options out of range."""
    need_torch()
    r = rng('add_param_group')
    w0, v0, grads = r.standard_normal(3), r.standard_normal((2, 2)), [r.standard_normal(3) for _ in range(4)]
    for name, kw, group_kw in (('SGD', dict(lr=0.1, momentum=0.9), dict(lr=0.05, nesterov=True)),
                               ('Adam', dict(lr=0.05), dict(betas=(0.8, 0.9), weight_decay=0.1)),
                               ('AdamW', dict(lr=0.05), dict(lr=0.01))):
        w, v = tl.Parameter(w0.copy()), tl.Parameter(v0.copy())
        wt, vt = torch.nn.Parameter(torch.tensor(w0)), torch.nn.Parameter(torch.tensor(v0))
        opt, ref = getattr(tl, name)([w], **kw), getattr(torch.optim, name)([wt], **kw)
        for k, g in enumerate(grads):
            if k == 2:
                opt.add_param_group({'params': v, **group_kw})
                ref.add_param_group({'params': vt, **group_kw})
                assert opt.param_groups[1]['params'][0] is v and len(opt.param_groups) == 2
                options = {key: val for key, val in opt.param_groups[1].items() if key != 'params'}
                assert options == {key: ref.param_groups[1][key] for key in options}, (name, options)
            w.grad, wt.grad = tl.Tensor(g), torch.tensor(g)
            v.grad, vt.grad = tl.Tensor(g[:2, None] * g[1:]), torch.tensor(g[:2, None] * g[1:])
            opt.step()
            ref.step()
        assert_close(w, wt, 1e-12, 1e-12, f'{name} first group')
        assert_close(v, vt, 1e-12, 1e-12, f'{name} added group')
        want = raises(ValueError, lambda: ref.add_param_group({'params': [torch.nn.Parameter(torch.ones(2)), wt]}))
        before, n = optim_snapshot(opt), len(opt.param_groups)
        new = lambda: tl.Parameter(np.ones(2))
        for exc, group, needles in ((ValueError, {'params': [new(), w]}, (want,)),
                                    (ValueError, {'params': [w * 2]}, ('non-leaf',)),
                                    (TypeError, {'params': [new(), np.ones(2)]}, ('tensors', 'ndarray')),
                                    (TypeError, [new()], ('dict', 'list')),
                                    (KeyError, {'lr': 0.1}, ('params',)),
                                    (ValueError, {'params': [new()], 'lr': -1.0}, ('learning rate', '-1')),
                                    (ValueError, {'params': [new()], 'weight_decay': math.nan},
                                     ('weight_decay', 'nan'))):
            raises(exc, lambda: opt.add_param_group(group), *needles)
            assert len(opt.param_groups) == n, (name, group)
            assert_optim_unchanged(opt, before, f'{name} add_param_group({group})')
        raises(TypeError, lambda: ref.add_param_group([torch.nn.Parameter(torch.ones(2))]), 'dict')
        raises(KeyError, lambda: ref.add_param_group({'lr': 0.1}), 'params')


def test_error_optim_params_a_tensor_as_pytorch():
    """A tensor given as params (not a list of them): torch's TypeError and message (its rows were taken for the
    parameters, or a parameter's rows refused as non-leaves), for a plain tensor and a parameter alike."""
    need_torch()
    want = raises(TypeError, lambda: torch.optim.SGD(torch.zeros(3, 2), lr=0.1), 'iterable of Tensors or dicts')
    for name in ('SGD', 'Adam', 'AdamW'):
        for params in (tl.zeros(3, 2), tl.Linear(2, 2).weight):
            before, version = params.numpy().copy(), params._version[0]
            raises(TypeError, lambda: getattr(tl, name)(params, lr=0.1), want.split(', but got')[0],
                   f'but got {type(params).__name__}')
            assert np.array_equal(params.numpy(), before) and params.grad is None and params._version[0] == version


def test_error_optim_integer_parameters():
    """Integer and bool parameters are refused (TypeError naming the dtype) by the constructor and add_param_group,
    changing nothing: their updates were rounded (SGD's to 0 at lr 0.5) or failed inside NumPy after Adam's state was
    made. torch.optim takes them, and its step fails on them at a float lr, after the parameters before them moved."""
    need_torch()
    a, b = torch.nn.Parameter(torch.ones(2)), torch.tensor([10, 20])
    a.grad, b.grad = torch.ones(2), torch.tensor([1, 1])
    raises(RuntimeError, torch.optim.SGD([a, b], lr=0.5).step, 'integral')
    assert a.detach().tolist() == [0.5, 0.5]
    for name in ('SGD', 'Adam', 'AdamW'):
        for array in (np.array([10, 20]), np.array([1, 2], np.int32), np.array([True, False]), np.array([3], np.uint8)):
            p = tl.tensor(array)
            raises(TypeError, lambda: getattr(tl, name)([tl.Parameter(np.ones(2)), p], lr=0.5), 'floating-point',
                   str(array.dtype))
            opt = getattr(tl, name)([tl.Parameter(np.ones(2))], lr=0.5)
            before = optim_snapshot(opt)
            raises(TypeError, lambda: opt.add_param_group({'params': [p]}), 'floating-point', str(array.dtype))
            assert_optim_unchanged(opt, before, f'{name}: add_param_group of {array.dtype}')
            assert len(opt.param_groups) == 1 and np.array_equal(p.numpy(), array) and p._version[0] == 0


def test_error_adam_betas_not_a_pair_changes_nothing():
    """Adam's and AdamW's betas must be two numbers, wherever they come from: the constructor (torch's raises
    IndexError for one), a group of it, add_param_group or load_state_dict. Each is refused (ValueError naming betas)
    before anything changes: they were taken, and the first step failed once the groups before had stepped."""
    need_torch()
    raises(IndexError, lambda: torch.optim.Adam([torch.nn.Parameter(torch.ones(2))], betas=(0.9,)))
    new = lambda: tl.Parameter(np.ones(2, np.float32))
    for name in ('Adam', 'AdamW'):
        for betas in ((0.9,), (0.9, 0.99, 0.9), [], 0.9):
            if isinstance(betas, tuple):
                raises(ValueError, lambda: getattr(tl, name)([new()], betas=betas), 'betas', 'pair', repr(betas))
            raises(ValueError, lambda: getattr(tl, name)([{'params': [new()]}, {'params': [new()], 'betas': betas}]),
                   'betas', 'pair', repr(betas))
            a, b = new(), new()
            opt = getattr(tl, name)([{'params': [a]}, {'params': [b]}], lr=0.1)
            a.grad, b.grad = tl.ones(2), tl.ones(2)
            opt.step()
            good = opt.state_dict()
            bad = {**good, 'param_groups': [good['param_groups'][0], {**good['param_groups'][1], 'betas': betas}]}
            before = optim_snapshot(opt)
            raises(ValueError, lambda: opt.add_param_group({'params': [new()], 'betas': betas}), 'betas', repr(betas))
            raises(ValueError, lambda: opt.load_state_dict(bad), 'betas', 'pair', repr(betas))
            assert_optim_unchanged(opt, before, f'{name} betas {betas}')


def test_error_optim_bad_option_or_state_entry_named():
    """An option that is no number (lr='a': a TypeError, as torch's, but naming it) in the constructor, a group or a
    loaded state dict; a state dict's state keyed by something not a parameter's index, or holding a value that is no
    number: refused, naming the option or the entry, before anything changes. A one-element tensor is a number."""
    need_torch()
    raises(TypeError, lambda: torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr='a'))
    for name, kw, key in (('SGD', dict(lr='a'), 'lr'), ('SGD', dict(momentum='x'), 'momentum'),
                          ('SGD', dict(momentum=0.9, dampening='x'), 'dampening'),
                          ('SGD', dict(weight_decay=None), 'weight_decay'), ('Adam', dict(eps='x'), 'eps'),
                          ('Adam', dict(betas=('a', 0.9)), 'betas[0]'), ('AdamW', dict(lr=[0.1]), 'lr'),
                          ('AdamW', dict(betas=(0.9, tl.ones(2))), 'betas[1]'), ('Adam', dict(lr=tl.ones(2)), 'lr')):
        raises(TypeError, lambda: getattr(tl, name)([tl.Parameter(np.ones(2))], **kw), f'option {key} ')
        raises(TypeError, lambda: getattr(tl, name)([{'params': [tl.Parameter(np.ones(2))], **kw}]), f'option {key} ')
    tl.SGD([tl.Parameter(np.ones(2))], lr=tl.tensor(0.1))
    opt = adam_after_one_step()[2]
    good = opt.state_dict()
    before = optim_snapshot(opt)
    for exc, sd, needles in (
            (TypeError, {**good, 'param_groups': [{**good['param_groups'][0], 'lr': 'a'}]}, ('option lr ', "'a'")),
            (ValueError, {**good, 'state': {0: good['state'][0], 'x': good['state'][1]}}, ("parameter 'x'",)),
            (ValueError, {**good, 'state': {0: good['state'][0], 1.0: good['state'][1]}}, ('parameter 1.0',)),
            (TypeError, {**good, 'state': {0: good['state'][0], 1: {**good['state'][1], 'exp_avg': 'abc'}}},
             ("'exp_avg' of parameter 1", 'a str', 'not of numbers')),
            (TypeError, {**good, 'state': {0: good['state'][0], 1: {**good['state'][1], 'step': {}}}},
             ("'step' of parameter 1", 'a dict', 'not of numbers'))):
        raises(exc, lambda: opt.load_state_dict(sd), *needles)
        assert_optim_unchanged(opt, before, str(needles))


def test_error_optim_options_set_between_steps_change_nothing():
    """A group's option set between steps is checked by the step as the constructor checks it, before any parameter
    or state moves: lr None or '1' (TypeError naming it), NaN or negative rates, eps -1, betas (1.5, 0.9) or (0.9,)
    (ValueError, torch.optim's message). Adam's step count, moments and parameters stayed at the first group's update
    (its lr read only where it was used, after the moments); a one-element tensor rate is a number, read where on the
    CPU."""
    new = lambda: tl.Parameter(np.ones(3, np.float32))
    for name, key, value, exc, needle in (
            ('Adam', 'lr', None, TypeError, 'option lr '), ('SGD', 'lr', '1', TypeError, 'option lr '),
            ('Adam', 'lr', float('nan'), ValueError, 'Invalid learning rate'),
            ('SGD', 'lr', tl.tensor(-0.5), ValueError, 'Invalid learning rate'),
            ('AdamW', 'weight_decay', '1', TypeError, 'option weight_decay '),
            ('Adam', 'eps', -1.0, ValueError, 'Invalid epsilon value'),
            ('Adam', 'betas', (1.5, 0.9), ValueError, 'Invalid beta parameter at index 0'),
            ('AdamW', 'betas', (0.9,), ValueError, 'pair'),
            ('SGD', 'momentum', -0.9, ValueError, 'Invalid momentum value')):
        a, b = new(), new()
        momentum = {'momentum': 0.9} if name == 'SGD' else {}
        opt = getattr(tl, name)([{'params': [a]}, {'params': [b]}], lr=0.1, **momentum)
        a.grad, b.grad = tl.ones(3), tl.ones(3)
        opt.step()   # (the state each parameter then has)
        opt.param_groups[1][key] = value
        before = optim_snapshot(opt)
        raises(exc, opt.step, needle)
        assert_optim_unchanged(opt, before, f'{name} {key}={value!r}')


def test_error_optim_step_gradient_of_another_dtype_changes_nothing():
    """A gradient whose dtype is not its parameter's (the grad setter refuses one; an assignment to grad.data does
    not) is refused by the step before any parameter or state moves: a TypeError naming both dtypes (float64 or int64
    for a float32 parameter). Strings and complex numbers (torch refuses the last, where a cast would drop the
    imaginary part) are refused by the assignment to .data itself."""
    for name in ('SGD', 'Adam'):
        for bad in (np.ones(3), np.ones(3, np.int64), np.array(['a'] * 3), np.ones(3, np.complex64) * 1j):
            a, b = tl.Parameter(np.ones(3, np.float32)), tl.Parameter(np.ones(3, np.float32))
            opt = getattr(tl, name)([a, b], lr=0.1, **({'momentum': 0.9} if name == 'SGD' else {}))
            a.grad, b.grad = tl.ones(3), tl.ones(3)
            opt.step()
            if bad.dtype.kind in 'Uc':
                raises(TypeError, lambda: setattr(b.grad, 'data', bad), 'unsupported dtype', str(bad.dtype))
                continue
            b.grad.data = bad
            before = optim_snapshot(opt)
            raises(TypeError, opt.step, f'dtype {bad.dtype}', 'dtype float32')
            assert_optim_unchanged(opt, before, f'{name}, a gradient of {bad.dtype}')


def test_optim_load_state_dict_replaces_the_groups_as_pytorch():
    """load_state_dict replaces each group by the saved one (its parameters kept), as torch.optim's: a key the saved
    group lacks goes, such as the 'initial_lr' a scheduler made before the load, so that a scheduler made after it
    starts from the loaded rate (torch's the same)."""
    need_torch()
    rates = []
    for lib, make in ((tl, lambda: tl.Parameter(np.ones(2, np.float32))),
                      (torch, lambda: torch.nn.Parameter(torch.ones(2)))):
        optim = lib.optim if lib is torch else lib
        sched = torch.optim.lr_scheduler if lib is torch else lib
        saved = optim.SGD([make()], lr=0.5).state_dict()
        opt = optim.SGD([make()], lr=0.1)
        sched.StepLR(opt, 5)
        opt.load_state_dict(saved)
        assert 'initial_lr' not in opt.param_groups[0], lib.__name__
        sched.LambdaLR(opt, lambda epoch: 1.0)
        rates.append((opt.param_groups[0]['lr'], opt.param_groups[0]['initial_lr']))
    assert rates[0] == rates[1] == (0.5, 0.5), rates


def test_error_optim_step_unwritable_parameter_changes_nothing():
    """step() with a parameter that it could not update element by element: expanded (Parameter(x.expand(...)), rows
    sharing memory: each row's update overwrote the last) is torch's RuntimeError; read-only memory (np.load's
    mmap_mode='r') a RuntimeError too, where NumPy's error came after the parameters before it and their state moved;
    the same for a state tensor. Each names the parameter, and nothing changes."""
    need_torch()
    tp = torch.nn.Parameter(torch.zeros(1, 2).expand(3, 2))
    tp.grad = torch.ones(3, 2)
    torch_words = raises(RuntimeError, torch.optim.SGD([tp], lr=1.0).step, 'clone()').split(': ', 1)[1].split('.')[0]

    def readonly(shape):
        a = np.zeros(shape, np.float32)
        a.flags.writeable = False
        return tl.Tensor(a)
    unwritable = {'expanded': (lambda shape: tl.zeros(1, *shape[1:]).expand(*shape), torch_words),
                  'read-only': (readonly, 'read-only')}
    for name, kw, key in (('SGD', dict(lr=0.1, momentum=0.9), 'momentum_buffer'), ('Adam', dict(lr=0.1), 'exp_avg'),
                          ('AdamW', dict(lr=0.1), 'exp_avg_sq')):
        for what, (make, words) in unwritable.items():
            a, b, c = (tl.Parameter(t) for t in (np.ones(2, np.float32), np.ones(2, np.float32), make((3, 2))))
            opt = getattr(tl, name)([{'params': [a]}, {'params': [b, c]}], **kw)
            a.grad, b.grad = tl.ones(2), tl.ones(2)
            opt.step()   # (c, without a gradient, is not updated: no error)
            c.grad = tl.ones(3, 2)
            before = optim_snapshot(opt)
            raises(RuntimeError, opt.step, words, f"{name}.step of param_groups[1]['params'][1]")
            assert_optim_unchanged(opt, before, f'{name}, {what} parameter')
            c.grad = None
            opt.state[b][key] = make((2,))
            before = optim_snapshot(opt)
            raises(RuntimeError, opt.step, words, f"state '{key}' of parameter 1")
            assert_optim_unchanged(opt, before, f'{name}, {what} {key}')


# ===== gradient clipping: against torch.nn.utils =====

CLIP_SHAPES = [(16, 8), (8,), (3, 5, 7), (1,), (4, 4)]   # the last parameter gets no gradient
CLIP_NORMS = [1, 2.0, 3.5, math.inf, 'inf', 0, -math.inf]
CLIP_DTYPES = {'float64': [np.float64] * 5, 'float32': [np.float32] * 5, 'float16': [np.float16] * 5,
               'float16_float32': [np.float16, np.float32] * 2 + [np.float16],
               'float32_float64': [np.float32, np.float64] * 3}


def clip_params(arrays, device=None):
    """Parameters whose gradients are copies of `arrays` (None: a parameter without gradient)."""
    params = [tl.Parameter(tl.zeros(*(a.shape if a is not None else (1,)), dtype=a.dtype if a is not None else None,
                                    device=device)) for a in arrays]
    for a, p in zip(arrays, params):
        if a is not None:
            p.grad = tl.Tensor(a.copy(), device=device)
    return params


def clip_pair(arrays):
    """clip_params(arrays) and torch's parameters with the same gradients."""
    theirs = [torch.nn.Parameter(torch.zeros(1 if a is None else a.shape, dtype=getattr(torch, (a.dtype if a is not None
              else np.dtype(np.float32)).name))) for a in arrays]
    for a, q in zip(arrays, theirs):
        if a is not None:
            q.grad = torch.tensor(a.copy())
    return clip_params(arrays), theirs


def unchanged(arrays):
    """Stand-ins for parameters whose gradients are `arrays` as given, for assert_grads_equal."""
    return [collections.namedtuple('P', 'grad')(None if a is None else tl.Tensor(a)) for a in arrays]


def clip_arrays(key, dtypes, scale=1.0):
    r = rng(key)
    return [(r.standard_normal(s) * scale).astype(d) for s, d in zip(CLIP_SHAPES[:-1], dtypes)] + [None]


def assert_grads_equal(ours, theirs, msg, rtol=0.0):
    """Every gradient as the other's, torch's or tinygrad_lite's (None where it is None): bit for bit (NaN where the
    other's is NaN), or within rtol."""
    for k, (p, q) in enumerate(zip(ours, theirs)):
        assert (p.grad is None) == (q.grad is None), f'{msg}: grad {k} is {p.grad}, the other {q.grad}'
        if p.grad is not None:
            a, b = p.grad.numpy(), q.grad.numpy()
            assert same_dtype(p.grad, q.grad) and a.shape == b.shape, f'{msg}: grad {k} {a.dtype} {a.shape}'
            if rtol:
                assert_close(a, b, rtol, 0, f'{msg}: grad {k}')
            else:
                assert np.array_equal(a, b, equal_nan=True), f'{msg}: grad {k} {a} != {b}'


def test_clip_grad_norm_as_pytorch():
    """clip_grad_norm_, get_total_norm and clip_grads_with_norm_ on identical random gradients (float64, float32,
    float16, and mixed float16/float32, float32/float64: the norm's dtype promoted as torch's), norm types 1, 2, 3.5,
    inf ('inf' too), 0, -inf, with max_norm 0.3 times the norm (clipped to max_norm) and four times it (gradients
    unchanged, bit for bit), a parameter without gradient: the returned norm (a 0-d tensor on the CPU, torch's dtype,
    no grad) as torch's within a reduction's rounding, and the gradients; torch's own norm given to
    clip_grads_with_norm_ scales the gradients bit for bit as torch's clip_grad_norm_."""
    need_torch()
    rtols = {np.float64: 1e-12, np.float32: 2e-6, np.float16: 1e-3}
    for name, dtypes in CLIP_DTYPES.items():
        for norm_type in CLIP_NORMS:
            arrays = clip_arrays(('clip_norm', name, str(norm_type)), dtypes)
            ref = torch.nn.utils.get_total_norm([torch.tensor(a) for a in arrays if a is not None], norm_type)
            rtol = rtols[min(dtypes, key=lambda d: np.dtype(d).itemsize)]   # the narrowest gradient's
            for factor in (0.3, 4.0):
                msg = f'{name} norm {norm_type} max_norm {factor} x the norm'
                max_norm = factor * ref.item()
                ours, theirs = clip_pair(arrays)
                total, want = tl.clip_grad_norm_(ours, max_norm, norm_type), torch.nn.utils.clip_grad_norm_(
                    theirs, max_norm, norm_type)
                assert isinstance(total, tl.Tensor) and total.shape == () and total.device == 'cpu', msg
                assert same_dtype(total, want) and not total.requires_grad, (msg, total.dtype, want.dtype)
                assert_close(total, want, rtol, 0, msg)
                assert_grads_equal(ours, theirs, msg, 2 * rtol)
                if factor > 1:
                    assert_grads_equal(ours, unchanged(arrays), f'{msg}: not clipped')
                elif norm_type != 0:   # (the count of nonzero elements does not scale)
                    clipped = max_norm * ref.item() / (ref.item() + 1e-6)   # (the coefficient's 1e-6)
                    assert_close(tl.get_total_norm([p.grad for p in ours[:-1]], norm_type), clipped, 2 * rtol, 0, msg)
                got = tl.get_total_norm([tl.Tensor(a) for a in arrays if a is not None], norm_type)
                assert same_dtype(got, ref) and got.shape == (), msg
                assert_close(got, ref, rtol, 0, f'{msg}: get_total_norm')
                ours, theirs = clip_pair(arrays)
                torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
                assert tl.clip_grads_with_norm_(ours, max_norm, tl.Tensor(ref.numpy())) is None
                assert_grads_equal(ours, theirs, f'{msg}: clip_grads_with_norm_ given torch\'s norm')


def test_clip_grad_norm_arguments_as_pytorch():
    """parameters as one tensor, a generator (read once), a list without gradients (a float32 0, as torch's), an empty
    generator (torch's warning); each clipped gradient's version counter moves, as torch's: a backward that saved it
    raises in both."""
    need_torch()
    arrays = clip_arrays('clip_args', [np.float32] * 4)
    ours, theirs = clip_pair(arrays)
    total, want = tl.clip_grad_norm_(ours[0], 0.5), torch.nn.utils.clip_grad_norm_(theirs[0], 0.5)
    assert_close(total, want, 1e-6, 0, 'one tensor')
    assert_grads_equal(ours[:1], theirs[:1], 'one tensor', 1e-6)
    assert_grads_equal(ours[1:], unchanged(arrays[1:]), 'the other tensors')
    ours, theirs = clip_pair(arrays)
    total = tl.clip_grad_norm_((p for p in ours), 1.0, 'inf')
    want = torch.nn.utils.clip_grad_norm_((q for q in theirs), 1.0, 'inf')
    assert_close(total, want, 1e-6, 0, 'a generator')
    assert_grads_equal(ours, theirs, 'a generator', 1e-6)
    for params in ([], [tl.Parameter(np.ones(3))], ours[-1]):
        total = tl.clip_grad_norm_(params, 1.0)
        assert total.dtype == np.float32 and total.shape == () and total.item() == 0 and total.device == 'cpu'
    for lib in (tl, torch.nn.utils):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            lib.clip_grad_norm_((p for p in []), 1.0)
        assert [str(w.message) for w in caught] == ['`parameters` is an empty generator, no gradient clipping will '
                                                    'occur.'], (lib, [str(w.message) for w in caught])
    for lib, fn in ((tl, lambda ps: tl.clip_grad_norm_(ps, 0.1)), (tl, lambda ps: tl.clip_grad_value_(ps, 0.1)),
                    (torch, lambda ps: torch.nn.utils.clip_grad_norm_(ps, 0.1)),
                    (torch, lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.1))):
        ours, theirs = clip_pair(arrays)
        p = ours[0] if lib is tl else theirs[0]
        x = (tl.Tensor if lib is tl else torch.tensor)(np.ones(arrays[0].shape, np.float32), requires_grad=True)
        version = lambda: p.grad._version[0] if lib is tl else p.grad._version
        saved, before = x * p.grad, version()
        fn([p])
        assert version() > before, lib
        raises(RuntimeError, lambda: saved.sum().backward(), 'modified by an inplace operation'
               if lib is torch else 'modified by an in-place operation')


def test_clip_grad_norm_nonfinite_as_pytorch():
    """Gradients holding inf or NaN: the norm inf or NaN and the gradients scaled by its coefficient (NaN where inf
    times 0, all NaN for a NaN norm), as torch's bit for bit; error_if_nonfinite=True raises torch's RuntimeError
    and changes no gradient and no version; finite gradients pass it."""
    need_torch()
    for norm_type in (2.0, 1, math.inf):
        for bad in (math.inf, -math.inf, math.nan):
            for dtype in (np.float32, np.float16):
                arrays = clip_arrays(('clip_nonfinite', norm_type, dtype), [dtype] * 4)
                arrays[2].flat[5] = bad
                msg = f'{bad} in a {dtype.__name__} gradient, norm {norm_type}'
                ours, theirs = clip_pair(arrays)
                total = tl.clip_grad_norm_(ours, 1.0, norm_type)
                want = torch.nn.utils.clip_grad_norm_(theirs, 1.0, norm_type)
                assert np.array_equal(total.numpy(), want.numpy(), equal_nan=True) and not np.isfinite(total.item()), \
                    (msg, total, want)
                assert_grads_equal(ours, theirs, msg)
                ours, theirs = clip_pair(arrays)
                versions = [p.grad._version[0] for p in ours[:-1]]
                want = raises(RuntimeError, lambda: torch.nn.utils.clip_grad_norm_(theirs, 1.0, norm_type,
                                                                                   error_if_nonfinite=True))
                got = raises(RuntimeError, lambda: tl.clip_grad_norm_(ours, 1.0, norm_type, error_if_nonfinite=True))
                assert got == want, (got, want)
                assert_grads_equal(ours, theirs, f'{msg}: refused')
                assert_grads_equal(ours, unchanged(arrays), f'{msg}: refused, unchanged')
                assert [p.grad._version[0] for p in ours[:-1]] == versions, msg
    ours, theirs = clip_pair(clip_arrays('clip_finite', [np.float64] * 4))
    total = tl.clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
    assert_close(total, torch.nn.utils.clip_grad_norm_(theirs, 1.0, error_if_nonfinite=True), 1e-12, 0)
    assert_grads_equal(ours, theirs, 'finite, error_if_nonfinite', 1e-12)


def test_clip_grad_value_as_pytorch():
    """clip_grad_value_ clamps each gradient to [-clip_value, clip_value] in place, bit for bit as torch's (float64,
    float32, float16; NaN stays NaN, inf clamped; nothing changes where every element is inside), returns None;
    one tensor and a generator as parameters. A clip_value beyond float16's range raises for float16 gradients, as
    torch's, before any gradient changes."""
    need_torch()
    for dtype in (np.float64, np.float32, np.float16):
        arrays = clip_arrays(('clip_value', dtype), [dtype] * 4, scale=3.0)
        arrays[1][:3] = [math.nan, math.inf, -math.inf]
        for clip_value in (0.5, 1, 6e4):
            ours, theirs = clip_pair(arrays)
            assert tl.clip_grad_value_(ours, clip_value) is None
            torch.nn.utils.clip_grad_value_(theirs, clip_value)
            assert_grads_equal(ours, theirs, f'{dtype.__name__} clip_value {clip_value}')
            ours, theirs = clip_pair(arrays)
            tl.clip_grad_value_((p for p in ours), clip_value)
            torch.nn.utils.clip_grad_value_(theirs[0], clip_value)
            torch.nn.utils.clip_grad_value_(theirs[1], clip_value)
            tl.clip_grad_value_(tl.Parameter(np.ones(2)), clip_value)   # no gradient: nothing to do
            assert_grads_equal(ours[:2], theirs[:2], f'{dtype.__name__} clip_value {clip_value}: a generator')
    ours, theirs = clip_pair(clip_arrays('clip_value_float16', [np.float32, np.float16] * 2))
    raises(RuntimeError, lambda: torch.nn.utils.clip_grad_value_(theirs, 1e6), 'without overflow')
    raises(RuntimeError, lambda: tl.clip_grad_value_(ours, 1e6), 'float16', 'without overflow')
    assert_grads_equal(ours, unchanged(clip_arrays('clip_value_float16', [np.float32, np.float16] * 2)),
                       'clip_value 1e6 refused')
    ours, _ = clip_pair(clip_arrays('clip_value_inside', [np.float32] * 4, scale=0.1))
    before = [p.grad.numpy().copy() for p in ours[:-1]]
    tl.clip_grad_value_(ours, 1.0)
    assert all(np.array_equal(p.grad.numpy(), b) for p, b in zip(ours, before))


def test_error_clip_grad_bad_input_changes_nothing():
    """A negative or NaN max_norm or clip_value (torch takes a negative one and flips the gradients), a NaN norm type,
    'fro' (a ValueError, as torch's), a non-tensor among the parameters, an integer tensor for get_total_norm, a
    total_norm that is no tensor (a TypeError, as torch's), the inf norm of an empty gradient (a RuntimeError, as
    torch's), an expanded gradient and one in read-only memory (NumPy's error came once the gradients before it were
    scaled): a clear error (naming the parameter of an unwritable gradient), before any gradient or version changes."""
    need_torch()
    arrays = clip_arrays('clip_errors', [np.float32] * 4)
    ours, theirs = clip_pair(arrays)
    empty = tl.Parameter(np.ones(0, np.float32))
    empty.grad = tl.zeros(0)
    expanded = tl.Parameter(np.ones((2, 3), np.float32))
    expanded.grad = tl.Tensor(np.arange(3, dtype=np.float32)).expand(2, 3)
    readonly = tl.Parameter(np.ones(3, np.float32))
    readonly.grad = tl.Tensor(np.arange(3, dtype=np.float32))
    readonly.grad.data.flags.writeable = False
    cases = [(ValueError, lambda: tl.clip_grad_norm_(ours, -1.0), 'max_norm', '-1'),
             (ValueError, lambda: tl.clip_grad_norm_(ours, math.nan), 'max_norm', 'nan'),
             (ValueError, lambda: tl.clip_grads_with_norm_(ours, -0.5, tl.tensor(2.0)), 'max_norm'),
             (ValueError, lambda: tl.clip_grad_value_(ours, -0.1), 'clip_value'),
             (ValueError, lambda: tl.clip_grad_value_(ours, math.nan), 'clip_value'),
             (ValueError, lambda: tl.clip_grad_norm_(ours, 1.0, math.nan), 'norm_type'),
             (ValueError, lambda: tl.clip_grad_norm_(ours, 1.0, 'fro'), "'fro'"),
             (TypeError, lambda: tl.clip_grad_norm_(ours + [3], 1.0), 'tensor', 'int'),
             (TypeError, lambda: tl.clip_grad_norm_(2.0, 1.0), 'tensor', 'float'),
             (TypeError, lambda: tl.clip_grad_value_([ours[0], None], 1.0), 'tensor', 'NoneType'),
             (TypeError, lambda: tl.get_total_norm([tl.tensor([1, 2])]), 'floating-point', 'int64'),
             (TypeError, lambda: tl.clip_grads_with_norm_(ours, 1.0, 3.0), 'total_norm'),
             (RuntimeError, lambda: tl.clip_grad_norm_(ours + [empty], 1.0, math.inf), 'empty'),
             (RuntimeError, lambda: tl.clip_grad_norm_(ours + [expanded], 0.1), 'expanded', 'parameter 5'),
             (RuntimeError, lambda: tl.clip_grad_value_(ours + [expanded], 0.1), 'expanded', 'parameter 5'),
             (RuntimeError, lambda: tl.clip_grad_norm_(ours + [readonly], 0.1), 'read-only', 'parameter 5'),
             (RuntimeError, lambda: tl.clip_grad_value_(ours + [readonly], 0.1), 'read-only', 'parameter 5')]
    for exc, fn, *needles in cases:
        versions = [p.grad._version[0] for p in ours[:-1]]
        raises(exc, fn, *needles)
        assert_grads_equal(ours, unchanged(arrays), needles[0])
        assert [p.grad._version[0] for p in ours[:-1]] == versions and expanded.grad.numpy()[1, 2] == 2, needles[0]
    raises(ValueError, lambda: torch.nn.utils.clip_grad_norm_(theirs, 1.0, 'fro'), "'fro'")
    raises(TypeError, lambda: torch.nn.utils.clip_grads_with_norm_(theirs, 1.0, 3.0))
    tempty = torch.nn.Parameter(torch.ones(0))
    tempty.grad = torch.zeros(0)
    raises(RuntimeError, lambda: torch.nn.utils.clip_grad_norm_(theirs + [tempty], 1.0, math.inf), 'empty')
    assert_close(tl.clip_grad_norm_(empty, 1.0), torch.nn.utils.clip_grad_norm_(tempty, 1.0), 0, 0)


# ===== learning-rate schedulers: against torch.optim.lr_scheduler =====

def sched_optimizers(name='SGD', lrs=(0.1, 0.05, 0.3), **kw):
    """Our optimizer `name` and torch's, one group per lr, each over one float64 parameter (equal in both)."""
    arrays = [rng(('sched', i)).standard_normal(i + 2) for i in range(len(lrs))]
    groups = lambda param: [{'params': [param(a.copy())], 'lr': lr} for a, lr in zip(arrays, lrs)]
    return (getattr(tl, name)(groups(tl.Parameter), **kw),
            getattr(torch.optim, name)(groups(lambda a: torch.nn.Parameter(torch.tensor(a))), **kw))


class WarmUp:
    """A callable object as an lr_lambda: LambdaLR's state dict keeps its attributes."""
    def __init__(self, n):
        self.n = n

    def __call__(self, epoch):
        return min(1.0, (epoch + 1) / self.n)


SCHED_KEYS = ('lr', 'initial_lr', 'max_lr', 'min_lr', 'momentum', 'betas', 'max_momentum', 'base_momentum')


def sched_snapshot(opt, sched):
    """What a scheduler sets: its last_epoch, get_last_lr(), and the keys of SCHED_KEYS each group holds."""
    groups = [{k: np.array(g[k], float) for k in SCHED_KEYS if k in g} for g in opt.param_groups]
    return sched.last_epoch, np.array([float(lr) for lr in sched.get_last_lr()]), groups


def assert_snapshots_close(got, want, msg):
    """Two sched_snapshots agree: last_epoch equal, the same keys in every group, the rates within 1e-12."""
    assert got[0] == want[0], f'{msg}: last_epoch {got[0]} != {want[0]}'
    assert_close(got[1], want[1], 1e-12, 0, f'{msg}: get_last_lr()')
    assert len(got[2]) == len(want[2]), msg
    for i, (g, w) in enumerate(zip(got[2], want[2])):
        assert g.keys() == w.keys(), f'{msg}: group {i} holds {sorted(g)}, torch\'s {sorted(w)}'
        for k in g:
            assert_close(g[k], w[k], 1e-12, 0, f'{msg}: group {i} {k}')


def assert_sched_state_dicts_equal(ours, theirs, msg):
    """Our state dict has torch's keys (less its flag of the get_lr() warning, not kept here) and values (rates within
    1e-12, the rest equal)."""
    theirs = {k: v for k, v in theirs.items() if k != '_get_lr_called_within_step'}
    assert ours.keys() == theirs.keys(), f'{msg}: keys {sorted(ours)} != {sorted(theirs)}'
    for k, v in ours.items():
        if k in ('base_lrs', '_last_lr'):
            assert_close(np.array(v, float), np.array(theirs[k], float), 1e-12, 0, f'{msg}: {k}')
        else:
            assert v == theirs[k], f'{msg}: {k} {v!r} != {theirs[k]!r}'


SCHEDULERS = [   # (test name, class, arguments, optimizer, its options, steps)
    ('lambda', 'LambdaLR', dict(lr_lambda=lambda e: 0.95 ** e), 'SGD', {}, 12),
    ('lambda_per_group', 'LambdaLR', dict(lr_lambda=[lambda e: 1 / (e + 1), WarmUp(4), lambda e: e % 3]), 'SGD', {},
     12),
    ('step', 'StepLR', dict(step_size=3, gamma=0.5), 'SGD', {}, 13),
    ('step_adam', 'StepLR', dict(step_size=4), 'Adam', {}, 13),
    ('multistep', 'MultiStepLR', dict(milestones=[9, 2, 5, 5], gamma=0.3), 'SGD', {}, 12),   # 5 twice: gamma ** 2
    ('exponential', 'ExponentialLR', dict(gamma=0.9), 'SGD', {}, 10),
    ('cosine', 'CosineAnnealingLR', dict(T_max=7), 'SGD', {}, 36),   # past T_max: up again at 2 T_max, down at 3
    ('cosine_eta_min', 'CosineAnnealingLR', dict(T_max=5, eta_min=0.01), 'AdamW', {}, 26),
    ('linear', 'LinearLR', {}, 'SGD', {}, 8),
    ('linear_down', 'LinearLR', dict(start_factor=1.0, end_factor=0.1, total_iters=8), 'SGD', {}, 11),
    ('onecycle', 'OneCycleLR', dict(max_lr=[1.0, 0.5, 2.0], total_steps=20), 'SGD', dict(momentum=0.9), 20),
    ('onecycle_three_phase', 'OneCycleLR', dict(max_lr=0.8, total_steps=25, pct_start=0.25, three_phase=True), 'SGD',
     dict(momentum=0.9, nesterov=True), 25),
    ('onecycle_linear', 'OneCycleLR', dict(max_lr=0.8, epochs=3, steps_per_epoch=7, anneal_strategy='linear'), 'SGD',
     dict(momentum=0.5), 21),
    ('onecycle_linear_three_phase', 'OneCycleLR', dict(max_lr=(0.3, 0.6, 0.9), total_steps=17, anneal_strategy='linear',
     three_phase=True, div_factor=10.0, final_div_factor=100.0), 'SGD', dict(momentum=0.9), 17),
    ('onecycle_adam', 'OneCycleLR', dict(max_lr=0.01, total_steps=15, base_momentum=[0.8, 0.85, 0.9],
     max_momentum=(0.95, 0.96, 0.97)), 'Adam', dict(betas=(0.9, 0.99)), 15),
    ('onecycle_adamw_three_phase', 'OneCycleLR', dict(max_lr=0.02, total_steps=12, three_phase=True), 'AdamW', {}, 12),
    ('onecycle_no_momentum', 'OneCycleLR', dict(max_lr=0.5, total_steps=10, cycle_momentum=False), 'SGD', {}, 10),
]


def check_scheduler(cls, kw, opt_name, opt_kw, steps):
    """Our scheduler and torch's over equal optimizers (three groups, different lrs), stepped after optimizer.step()
    through every phase: last_epoch, get_last_lr(), each group's lr, initial_lr (and OneCycleLR's keys, momentum or
    betas) after construction and after every step, within 1e-12; the state dict torch's. Saved halfway (optimizer and
    scheduler, through tl.save) and loaded into a fresh optimizer and scheduler, or torch's scheduler state dict loaded
    into ours, the rest of the schedule is torch's. A scheduler made with last_epoch=k on groups holding initial_lr
    resumes as torch's. OneCycleLR past total_steps: torch's ValueError, and nothing changes."""
    need_torch()
    opt, topt = sched_optimizers(opt_name, **opt_kw)
    sched, tsched = getattr(tl, cls)(opt, **kw), getattr(torch.optim.lr_scheduler, cls)(topt, **kw)
    assert isinstance(sched, tl.LRScheduler)
    assert_close(np.array(sched.base_lrs), np.array(tsched.base_lrs), 1e-12, 0, 'base_lrs')
    want = [sched_snapshot(topt, tsched)]
    assert_snapshots_close(sched_snapshot(opt, sched), want[0], 'constructed')
    half = steps // 2
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'checkpoint.npz')
        for step in range(1, steps + 1):
            for stepper in (opt, topt, sched, tsched):
                stepper.step()
            want.append(sched_snapshot(topt, tsched))
            assert_snapshots_close(sched_snapshot(opt, sched), want[-1], f'step {step}')
            if step == half:
                tl.save({'optimizer': opt.state_dict(), 'scheduler': sched.state_dict()}, path)
                theirs_half = dict(tsched.state_dict())
                assert_sched_state_dicts_equal(sched.state_dict(), theirs_half, f'state dict at step {step}')
        saved = tl.load(path)
    if cls == 'OneCycleLR':
        message = raises(ValueError, tsched.step)
        assert raises(ValueError, sched.step, str(steps + 1), str(kw.get('total_steps', steps))) == message
        assert_snapshots_close(sched_snapshot(opt, sched), want[-1], 'a step past total_steps refused')
    for source, which in ((saved['scheduler'], 'ours through tl.save'), (theirs_half, "torch's")):
        again, _ = sched_optimizers(opt_name, **opt_kw)
        resumed = getattr(tl, cls)(again, **kw)   # (made before the optimizer's state is loaded, as torch advises)
        again.load_state_dict(saved['optimizer'])
        resumed.load_state_dict(source)
        assert_snapshots_close(sched_snapshot(again, resumed), want[half], f'{which} state dict loaded')
        for step in range(half + 1, steps + 1):
            again.step()
            resumed.step()
            assert_snapshots_close(sched_snapshot(again, resumed), want[step], f'{which} state dict, step {step}')
    pair = sched_optimizers(opt_name, **opt_kw)
    scheds = [getattr(lib, cls)(o, **kw) for lib, o in zip((tl, torch.optim.lr_scheduler), pair)]
    for _ in range(3):
        for stepper in (*pair, *scheds):
            stepper.step()
    scheds = [getattr(lib, cls)(o, **kw, last_epoch=3) for lib, o in zip((tl, torch.optim.lr_scheduler), pair)]
    for step in range(5):
        assert_snapshots_close(*(sched_snapshot(o, s) for o, s in zip(pair, scheds)), f'last_epoch=3, step {step}')
        for stepper in (*pair, *scheds):
            stepper.step()


for _name, _cls, _kw, _opt, _opt_kw, _steps in SCHEDULERS:
    register(f'test_lr_scheduler_{_name}_as_pytorch',
             lambda c=_cls, kw=_kw, o=_opt, okw=_opt_kw, n=_steps: check_scheduler(c, kw, o, okw, n))


def test_lr_scheduler_lambda_state_dict_as_pytorch():
    """LambdaLR's state dict holds None in place of a function or lambda (not saved, as torch's) and a callable
    object's attributes, which load_state_dict puts back into the loading scheduler's object."""
    need_torch()
    got = []
    for lib, opt in zip((tl, torch.optim.lr_scheduler), sched_optimizers()):
        sched = lib.LambdaLR(opt, [lambda e: 0.5, WarmUp(3), WarmUp(5)])
        state = sched.state_dict()
        assert state['lr_lambdas'] == [None, {'n': 3}, {'n': 5}], state['lr_lambdas']
        fresh = lib.LambdaLR(opt, [lambda e: 0.5, WarmUp(7), WarmUp(8)])
        fresh.load_state_dict(state)
        assert [f.n for f in fresh.lr_lambdas[1:]] == [3, 5] and 'lr_lambdas' in state
        opt.step()
        fresh.step()
        got.append(fresh.get_last_lr())
    assert_close(np.array(got[0]), np.array(got[1]), 1e-12, 0)


def test_lr_scheduler_tensor_lr_as_pytorch():
    """A group's lr held in a one-element float64 tensor (as train_cifar's captured steps hold theirs): every scheduler
    writes into that tensor in place (a CUDA graph reads the new value), get_last_lr() and base_lrs hold copies, and
    the values are torch's."""
    need_torch()
    cases = [('CosineAnnealingLR', dict(T_max=4)), ('StepLR', dict(step_size=2)), ('LinearLR', {}),
             ('OneCycleLR', dict(max_lr=0.5, total_steps=8)), ('ReduceLROnPlateau', dict(patience=0, factor=0.5))]
    for cls, kw in cases:
        opt, topt = sched_optimizers(momentum=0.9)
        ours, theirs = tl.Tensor(np.float64(0.1)), torch.tensor(0.1, dtype=torch.float64)
        opt.param_groups[0]['lr'], topt.param_groups[0]['lr'] = ours, theirs
        sched, tsched = getattr(tl, cls)(opt, **kw), getattr(torch.optim.lr_scheduler, cls)(topt, **kw)
        for step in range(8):
            opt.step()
            topt.step()
            if cls == 'ReduceLROnPlateau':
                sched.step(1.0)
                tsched.step(1.0)
            else:
                sched.step()
                tsched.step()
            assert opt.param_groups[0]['lr'] is ours and isinstance(sched.get_last_lr()[0], tl.Tensor), cls
            assert sched.get_last_lr()[0] is not ours and getattr(sched, 'base_lrs', [None])[0] is not ours, cls
            assert_close(ours, theirs, 1e-12, 0, f'{cls} step {step}')
            assert_close(np.array([float(v) for v in sched.get_last_lr()]),
                         np.array([float(v) for v in tsched.get_last_lr()]), 1e-12, 0, f'{cls} step {step}')


PLATEAU_METRICS = [1.0, 0.9, 0.9, 0.95, 0.91, 0.89995, 0.9, 1.2, 0.5, 0.5, 0.5, 0.5, 0.5, 0.49, 0.7, 0.7, 0.7, 0.7,
                   0.7, 0.7, 0.7, 0.7, 0.3, 0.3, 0.3, 0.3, 0.3, 0.31, 0.3, 1.5, 1.6, 1.55, 1.6, 1.6, 1.6]
PLATEAUS = [dict(patience=2), dict(patience=1, cooldown=2, factor=0.5), dict(mode='max', patience=1, factor=0.3),
            dict(threshold_mode='abs', threshold=0.05, patience=1),
            dict(mode='max', threshold_mode='abs', threshold=0.01, patience=0, cooldown=1),
            dict(patience=0, factor=0.2, min_lr=[0.01, 0.002, 0.05]),
            dict(patience=0, factor=0.5, min_lr=0.02, eps=0.02), dict()]


def test_reduce_lr_on_plateau_as_pytorch():
    """ReduceLROnPlateau against torch's on one sequence of metrics (floats, 0-d tensors, NumPy scalars), in modes min
    and max, thresholds rel and abs, with patience, cooldown, min_lr (one, or one per group) and eps: the groups' lrs,
    get_last_lr(), last_epoch, best, num_bad_epochs, cooldown_counter and in_cooldown after every step; no initial_lr
    in the groups and no base_lrs (as torch's); the state dict torch's, and saved halfway (through tl.save) and loaded
    into a fresh scheduler, the rest is torch's."""
    need_torch()
    attrs = ('last_epoch', 'best', 'num_bad_epochs', 'cooldown_counter', 'in_cooldown')
    for kw in PLATEAUS:
        opt, topt = sched_optimizers()
        sched, tsched = tl.ReduceLROnPlateau(opt, **kw), torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **kw)
        assert isinstance(sched, tl.LRScheduler) and not hasattr(sched, 'base_lrs')
        assert all('initial_lr' not in g for g in opt.param_groups)
        history, lrs = [], []
        with tempfile.TemporaryDirectory() as d:
            for step, metric in enumerate(PLATEAU_METRICS):
                ours = [metric, tl.tensor(metric), np.float64(metric)][step % 3]
                sched.step(ours)
                tsched.step(torch.tensor(metric) if step % 3 == 1 else metric)
                history.append([getattr(tsched, a) for a in attrs])
                lrs.append([g['lr'] for g in topt.param_groups])
                assert [getattr(sched, a) for a in attrs] == history[-1], (kw, step)
                assert_close(np.array([g['lr'] for g in opt.param_groups]), np.array(lrs[-1]), 1e-12, 0, f'{kw} {step}')
                assert_close(np.array(sched.get_last_lr()), np.array(tsched.get_last_lr()), 1e-12, 0, f'{kw} {step}')
                if step == 15:
                    assert_sched_state_dicts_equal(sched.state_dict(), tsched.state_dict(), str(kw))
                    tl.save({'optimizer': opt.state_dict(), 'scheduler': sched.state_dict()}, os.path.join(d, 's.npz'))
            saved = tl.load(os.path.join(d, 's.npz'))
        again, _ = sched_optimizers()
        again.load_state_dict(saved['optimizer'])
        resumed = tl.ReduceLROnPlateau(again)
        resumed.load_state_dict(saved['scheduler'])
        for step in range(16, len(PLATEAU_METRICS)):
            resumed.step(tl.tensor(PLATEAU_METRICS[step]) if step % 3 == 1 else PLATEAU_METRICS[step])   # (float32)
            assert [getattr(resumed, a) for a in attrs] == history[step], (kw, 'resumed', step)
            assert_close(np.array([g['lr'] for g in again.param_groups]), np.array(lrs[step]), 1e-12, 0, f'{kw} {step}')
        assert len(set(map(tuple, lrs))) > 1, f'{kw}: the lr never moved'


def test_reduce_lr_on_plateau_groups_added_as_pytorch():
    """A group added to the optimizer after the scheduler was made: one min_lr for all extends to it (its lr reduced as
    torch's); a list of min_lrs is torch's RuntimeError where an lr is due to be reduced (a step that reduces nothing
    goes on), raised here before anything changes (torch's after it counted the epoch)."""
    need_torch()
    for min_lr in (0.001, [0.001] * 3):
        opt, topt = sched_optimizers()
        sched = tl.ReduceLROnPlateau(opt, patience=0, min_lr=min_lr)
        tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, patience=0, min_lr=min_lr)
        sched.step(1.0)
        tsched.step(1.0)
        opt.add_param_group({'params': [tl.Parameter(np.zeros(2))], 'lr': 0.2})
        topt.add_param_group({'params': [torch.nn.Parameter(torch.zeros(2))], 'lr': 0.2})
        if isinstance(min_lr, list):
            for s in (sched, tsched):   # a better metric: no reduction due, so no error (it raised at every step)
                s.step(0.5)
            assert sched.best == tsched.best == 0.5 and sched.num_bad_epochs == tsched.num_bad_epochs == 0
            want = raises(RuntimeError, lambda: tsched.step(2.0))
            before = sched.state_dict().copy()
            assert raises(RuntimeError, lambda: sched.step(2.0)) == want
            assert sched.state_dict() == before and [g['lr'] for g in opt.param_groups] == [0.1, 0.05, 0.3, 0.2]
        else:
            sched.step(2.0)
            tsched.step(2.0)
            assert_close(np.array(sched.get_last_lr()), np.array(tsched.get_last_lr()), 1e-12, 0)
            assert sched.min_lrs == tsched.min_lrs == [0.001] * 4


def test_optimizer_loaded_tensor_rates_are_its_own_and_groups_added_later_refused():
    """load_state_dict gives the optimizer its own copy of a rate held in a tensor (as torch.optim's deep copy): a
    scheduler stepping the loaded optimizer leaves the saved one's rate as it was (they shared the tensor); through
    tl.save / tl.load the rate comes back a tensor (an array before). A scheduler stepped after a group was added to
    its optimizer raises ValueError naming both counts (PyTorch's zip raises; here the new group was left out)."""
    need_torch()
    for lib in (tl, torch):
        nn = tl if lib is tl else torch.nn
        source = lib.optim.SGD if lib is torch else tl.SGD
        scheduler = lib.optim.lr_scheduler.StepLR if lib is torch else tl.StepLR
        a = source([nn.Parameter(lib.ones(2))], lr=lib.tensor(0.1))
        scheduler(a, 1, 0.5)
        b = source([nn.Parameter(lib.ones(2))], lr=lib.tensor(0.1))
        b.load_state_dict(a.state_dict())
        step = scheduler(b, 1, 0.5, last_epoch=0)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')   # (the scheduler stepped before the optimizer)
            for _ in range(3):
                step.step()
        rates = float(a.param_groups[0]['lr']), float(b.param_groups[0]['lr'])
        assert np.allclose(rates, (0.1, 0.00625), 1e-6, 0), (lib.__name__, rates)
    with tempfile.TemporaryDirectory() as d:
        opt = tl.SGD([tl.Parameter(tl.ones(2))], lr=tl.tensor(0.1))
        tl.save(opt.state_dict(), os.path.join(d, 'opt.npz'))
        other = tl.SGD([tl.Parameter(tl.ones(2))], lr=tl.tensor(0.3))
        other.load_state_dict(tl.load(os.path.join(d, 'opt.npz')))
        assert isinstance(other.param_groups[0]['lr'], tl.Tensor) and float(other.param_groups[0]['lr']) == \
            float(np.float32(0.1))
    for lib, nn, optim in ((tl, tl, tl), (torch, torch.nn, torch.optim)):
        opt = optim.SGD([nn.Parameter(lib.ones(2))], lr=0.1)
        sched = (optim.lr_scheduler if lib is torch else tl).CosineAnnealingLR(opt, 2)
        opt.add_param_group({'params': [nn.Parameter(lib.ones(2))], 'lr': 0.2})
        opt.step()

        def steps():   # (PyTorch's zip raises at the first step whose rates zip over the groups)
            for _ in range(5):
                sched.step()
        raises(ValueError, steps, *(['param_groups', '2', '1'] if lib is tl else []))


def test_lr_scheduler_step_order_warnings_as_pytorch():
    """scheduler.step() before any optimizer.step(): torch's UserWarning (its first words); optimizer.step() first:
    none; optimizer.step replaced after the scheduler was made: torch's other warning. The wrapped optimizer.step
    (wrapped once, however many schedulers) returns the closure's loss; ReduceLROnPlateau never warns, as torch's."""
    need_torch()
    def caught(fn):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter('always')
            fn()
        return [str(w.message)[:60] for w in seen if issubclass(w.category, UserWarning)]
    got = {}
    for lib, sched_lib in ((tl, tl), (torch.optim, torch.optim.lr_scheduler)):
        opt = sched_optimizers()[lib is not tl]
        sched = sched_lib.StepLR(opt, 2)
        early = caught(lambda: (sched.step(), sched.step()))
        opt = sched_optimizers()[lib is not tl]
        sched, second = sched_lib.StepLR(opt, 2), sched_lib.ExponentialLR(opt, 0.5)
        wrapped = opt.step
        assert opt.step(lambda: 3.5) == 3.5
        in_order = caught(lambda: (sched.step(), second.step(), opt.step(), sched.step()))
        assert opt.step is wrapped
        sched = sched_lib.StepLR(opt, 2)
        opt.step = lambda: None
        replaced = caught(lambda: (opt.step(), sched.step()))
        plateau = caught(lambda: sched_lib.ReduceLROnPlateau(opt).step(1.0))
        got[lib] = early, in_order, replaced, plateau
    assert got[tl] == got[torch.optim], got
    early, in_order, replaced, plateau = got[tl]
    assert len(early) == 1 and early[0].startswith('Detected call of `lr_scheduler.step()` before'), got
    assert in_order == plateau == [] and replaced == ['Seems like `optimizer.step()` has been overridden after lear']


def test_error_lr_scheduler_arguments_as_pytorch():
    """Bad arguments raise torch's exception with torch's message (where it names no value, the value follows) and
    leave the optimizer's groups as they were (torch's OneCycleLR has set initial_lr, max_lr and min_lr in them before
    it refuses an optimizer without momentum). Where torch takes an argument and fails later (step_size or T_max 0:
    ZeroDivisionError at the first step) or takes NaN (in any argument that is a number: gamma, eta_min, max_lr, a
    momentum, min_lr, threshold, ...; it schedules NaN rates, or never changes them), a ValueError here, before any
    group changes; a scheduler made for something not an Optimizer (torch's LambdaLR: AttributeError) is a TypeError;
    a state dict of another number of groups is a ValueError."""
    need_torch()
    S = torch.optim.lr_scheduler
    plain = lambda lib, o: (tl.Optimizer if lib is tl else torch.optim.Optimizer)(
        [o.param_groups[0]['params'][0]], dict(lr=0.1))
    cases = [
        (TypeError, lambda lib, o: lib.StepLR('sgd', 3)),
        (KeyError, lambda lib, o: lib.StepLR(o, 3, last_epoch=2)),
        (KeyError, lambda lib, o: lib.CosineAnnealingLR(o, 3, last_epoch=0)),
        (ValueError, lambda lib, o: lib.LambdaLR(o, [lambda e: 1.0] * 2)),
        (ValueError, lambda lib, o: lib.LinearLR(o, start_factor=0)),
        (ValueError, lambda lib, o: lib.LinearLR(o, start_factor=1.5)),
        (ValueError, lambda lib, o: lib.LinearLR(o, end_factor=-0.5)),
        (ValueError, lambda lib, o: lib.LinearLR(o, end_factor=1.5)),
        (ValueError, lambda lib, o: lib.ReduceLROnPlateau(o, factor=1.0)),
        (ValueError, lambda lib, o: lib.ReduceLROnPlateau(o, min_lr=[0.0, 0.1])),
        (ValueError, lambda lib, o: lib.ReduceLROnPlateau(o, mode='avg')),
        (ValueError, lambda lib, o: lib.ReduceLROnPlateau(o, threshold_mode='relative')),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=0)),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=2.5)),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, 1.0, epochs=0, steps_per_epoch=5)),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, 1.0, epochs=2, steps_per_epoch=-1)),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, 1.0, epochs=2)),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=10, pct_start=1.5)),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=10, pct_start=1)),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=10, anneal_strategy='exp')),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, [1.0, 2.0], total_steps=10)),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=10, base_momentum=[0.8] * 4)),
        (ValueError, lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=10, max_momentum=(0.9,))),
        (ValueError, lambda lib, o: lib.OneCycleLR(plain(lib, o), 1.0, total_steps=10)),
    ]
    for exc, make_sched in cases:
        opt, topt = sched_optimizers(momentum=0.9)
        want = raises(exc, lambda: make_sched(S, topt))
        before = [dict(g) for g in opt.param_groups]
        got = raises(exc, lambda: make_sched(tl, opt))
        first = want.strip('"\'').split('\\n')[0].rstrip('.')   # (a KeyError's message is its repr)
        assert first in got, (got, want)
        assert opt.param_groups == before, got
    for make_sched, needle, torch_fails in (
            (lambda lib, o: lib.StepLR(o, 0), 'step_size', True),
            (lambda lib, o: lib.CosineAnnealingLR(o, 0), 'T_max', True),
            (lambda lib, o: lib.ReduceLROnPlateau(o, factor=math.nan), 'Factor', False),
            (lambda lib, o: lib.LinearLR(o, start_factor=math.nan), 'Starting', False),
            (lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=10, pct_start=math.nan), 'pct_start', False),
            (lambda lib, o: lib.StepLR(o, 2, gamma=math.nan), 'gamma', False),
            (lambda lib, o: lib.MultiStepLR(o, [1], gamma=math.nan), 'gamma', False),
            (lambda lib, o: lib.ExponentialLR(o, math.nan), 'gamma', False),
            (lambda lib, o: lib.CosineAnnealingLR(o, 3, eta_min=math.nan), 'eta_min', False),
            (lambda lib, o: lib.LinearLR(o, total_iters=math.nan), 'total_iters', False),
            (lambda lib, o: lib.OneCycleLR(o, math.nan, total_steps=10), 'max_lr', False),
            (lambda lib, o: lib.OneCycleLR(o, [1.0, math.nan, 1.0], total_steps=10), 'max_lr', False),
            (lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=10, div_factor=math.nan), 'div_factor', False),
            (lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=10, final_div_factor=math.nan), 'final_div_factor',
             False),
            (lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=10, base_momentum=math.nan), 'base_momentum', False),
            (lambda lib, o: lib.OneCycleLR(o, 1.0, total_steps=10, max_momentum=math.nan), 'max_momentum', False),
            (lambda lib, o: lib.ReduceLROnPlateau(o, min_lr=math.nan), 'min_lr', False),
            (lambda lib, o: lib.ReduceLROnPlateau(o, min_lr=[0.0, math.nan, 0.0]), 'min_lr', False),
            (lambda lib, o: lib.ReduceLROnPlateau(o, threshold=math.nan), 'threshold', False),
            (lambda lib, o: lib.ReduceLROnPlateau(o, eps=math.nan), 'eps', False),
            (lambda lib, o: lib.ReduceLROnPlateau(o, patience=math.nan), 'patience', False),
            (lambda lib, o: lib.ReduceLROnPlateau(o, cooldown=math.nan), 'cooldown', False)):
        opt, topt = sched_optimizers(momentum=0.9)
        tsched = make_sched(S, topt)
        if torch_fails:
            topt.step()
            raises(ZeroDivisionError, tsched.step)
        before = [dict(g) for g in opt.param_groups]
        raises(ValueError, lambda: make_sched(tl, opt), needle)
        assert opt.param_groups == before, needle
    for cls, args in (('LambdaLR', [lambda e: 1.0]), ('StepLR', [3]), ('MultiStepLR', [[2]]), ('ExponentialLR', [0.5]),
                      ('CosineAnnealingLR', [3]), ('LinearLR', []), ('OneCycleLR', [1.0, 10]),
                      ('ReduceLROnPlateau', [])):
        raises(TypeError, lambda: getattr(tl, cls)(sched_optimizers()[1], *args), 'SGD is not an Optimizer')
    opt, _ = sched_optimizers()
    sched = tl.StepLR(opt, 2)
    state = {**sched.state_dict(), 'base_lrs': [0.1, 0.2]}
    raises(ValueError, lambda: tl.StepLR(sched_optimizers()[0], 2).load_state_dict(state), 'base_lrs', '2')


def sched_state(opt, sched):
    """A copy of what loading a scheduler's state dict could change: its state dict, and its optimizer's options."""
    return copy.deepcopy(sched.state_dict()), [{k: v for k, v in g.items() if k != 'params'} for g in opt.param_groups]


def test_error_lr_scheduler_load_state_dict_changes_nothing():
    """A state dict that the scheduler's constructor would refuse (ReduceLROnPlateau's mode or threshold_mode unknown,
    StepLR's step_size or CosineAnnealingLR's T_max 0, LinearLR's start_factor 0), a last_epoch that is no int,
    LambdaLR's without lr_lambdas or with the wrong number of them, and a list (a TypeError, as torch's): refused,
    naming the entry, before anything changes (torch's loads every entry, then raises or fails at a later step).
    Plateau's, refused, then steps as torch's scheduler that never saw it: its lr is not cut while the metric
    improves."""
    need_torch()
    metrics = [1.0, 0.5, 0.25, 0.1, 0.05, 0.01, 0.001]
    cases = [('ReduceLROnPlateau', dict(patience=0), dict(mode='maximum', patience=5), ValueError, ('mode maximum',)),
             ('ReduceLROnPlateau', dict(patience=0), dict(threshold_mode='relative'), ValueError, ('relative',)),
             ('ReduceLROnPlateau', dict(patience=0), dict(factor=2.0), ValueError, ('Factor', '2.0')),
             ('StepLR', dict(step_size=2), dict(step_size=0, last_epoch=5), ValueError, ('step_size', '0')),
             ('StepLR', dict(step_size=2), dict(last_epoch='a'), TypeError, ('last_epoch', "'a'")),
             ('StepLR', dict(step_size=2), None, TypeError, ('expected a dict', 'list')),
             ('CosineAnnealingLR', dict(T_max=4), dict(T_max=0), ValueError, ('T_max', '0')),
             ('LinearLR', {}, dict(start_factor=0.0), ValueError, ('Starting multiplicative factor', '0.0')),
             ('LambdaLR', dict(lr_lambda=[lambda e: 0.5, WarmUp(3), WarmUp(5)]), dict(lr_lambdas=None), ValueError,
              ('lr_lambdas', 'None')),
             ('LambdaLR', dict(lr_lambda=[lambda e: 0.5, WarmUp(3), WarmUp(5)]), dict(lr_lambdas=[None, {'n': 9}]),
              ValueError, ('lr_lambdas', '3 entries'))]
    for cls, kw, bad, exc, needles in cases:
        opt, topt = sched_optimizers()
        sched, tsched = getattr(tl, cls)(opt, **kw), getattr(torch.optim.lr_scheduler, cls)(topt, **kw)
        state = [1, 2] if bad is None else {**sched.state_dict(), **bad}
        if cls == 'LambdaLR' and bad['lr_lambdas'] is None:
            del state['lr_lambdas']
        before = sched_state(opt, sched)
        raises(exc, lambda: sched.load_state_dict(state), *needles)
        after = sched_state(opt, sched)
        assert after[1] == before[1], (cls, bad, after[1])
        assert after[0].keys() == before[0].keys() and all(
            np.array_equal(after[0][k], before[0][k]) for k in before[0]), (cls, bad, after[0])
        for metric in metrics:
            for o in (opt, topt):
                o.step()
            for s in (sched, tsched):
                s.step(metric) if cls == 'ReduceLROnPlateau' else s.step()
            assert_close(np.array(sched.get_last_lr()), np.array(tsched.get_last_lr()), 1e-12, 0, f'{cls} {bad}')
        if cls == 'ReduceLROnPlateau':
            assert sched.get_last_lr() == [0.1, 0.05, 0.3], sched.get_last_lr()


def test_error_one_cycle_phase_of_no_steps_changes_nothing():
    """OneCycleLR where pct_start * total_steps is 1 (or pct_start 1.0, or three_phase's second end at the last step)
    leaves a phase no steps, and div_factor or final_div_factor 0 divide by zero: torch raises ZeroDivisionError at
    construction or at a later step (its groups already rewritten); here a ValueError naming the arguments, before any
    group changes. A torch state dict with such a phase (pct_start 1.0: torch fails only at the last step) is refused
    too, changing nothing."""
    need_torch()
    cases = [(dict(total_steps=10, pct_start=0.1), ('pct_start', 'total_steps=10', 'phase 1 of 2')),
             (dict(epochs=1, steps_per_epoch=4, pct_start=0.25), ('pct_start', 'total_steps=4', 'phase 1 of 2')),
             (dict(total_steps=20, pct_start=0.05), ('pct_start', 'total_steps=20')),
             (dict(total_steps=10, pct_start=0.1, three_phase=True), ('pct_start', 'total_steps=10', 'phase 1 of 3')),
             (dict(total_steps=10, pct_start=1.0), ('pct_start', 'total_steps=10', 'phase 2 of 2')),
             (dict(total_steps=9, pct_start=5 / 9, three_phase=True), ('pct_start', 'total_steps=9', 'phase 3 of 3')),
             (dict(total_steps=10, final_div_factor=0), ('final_div_factor', 'positive', '0')),
             (dict(total_steps=10, div_factor=0.0), ('div_factor', 'positive', '0.0'))]
    for kw, needles in cases:
        for name, opt_kw in (('SGD', dict(momentum=0.9)), ('Adam', {})):
            opt, topt = sched_optimizers(name, **opt_kw)
            with contextlib.suppress(ZeroDivisionError):   # (raised at construction, or at a later step below)
                tsched = torch.optim.lr_scheduler.OneCycleLR(topt, 1.0, **kw)
                for _ in range(tsched.total_steps):
                    topt.step()
                    tsched.step()
                raise AssertionError(f'torch took {kw}')
            before = [{k: v for k, v in g.items() if k != 'params'} for g in opt.param_groups]
            raises(ValueError, lambda: tl.OneCycleLR(opt, 1.0, **kw), *needles)
            assert [{k: v for k, v in g.items() if k != 'params'} for g in opt.param_groups] == before, (kw, name)
    opt, topt = sched_optimizers(momentum=0.9)
    sched = tl.OneCycleLR(opt, 1.0, total_steps=10)
    state = torch.optim.lr_scheduler.OneCycleLR(topt, 1.0, total_steps=10, pct_start=1.0).state_dict()
    before = sched_state(opt, sched)
    raises(ValueError, lambda: sched.load_state_dict(state), 'pct_start', 'phase 2 of 2')
    after = sched_state(opt, sched)
    assert after[1] == before[1] and after[0].keys() == before[0].keys()
    assert all(np.array_equal(after[0][k], before[0][k]) for k in before[0] if k != '_schedule_phases')
    assert after[0]['_schedule_phases'] == before[0]['_schedule_phases']


def test_error_lr_scheduler_failed_constructor_restores_groups():
    """A scheduler's constructor that fails once it has written to the groups (its first step: a gamma that is no
    number, a lambda that raises; OneCycleLR's max_lr or momentum that is none) puts every group back as it was:
    torch's leaves initial_lr (and OneCycleLR's keys) behind, so that a scheduler made after the lr was changed
    started from the stale initial_lr. Here that later scheduler's rates are those of torch's on an optimizer that
    saw no failure."""
    need_torch()
    cases = [(lambda o: tl.MultiStepLR(o, [1], gamma='x'), TypeError),
             (lambda o: tl.LambdaLR(o, lambda e: 1 / 0), ZeroDivisionError),
             (lambda o: tl.LambdaLR(o, [lambda e: 1.0, lambda e: 1.0, lambda e: [][e]]), IndexError),
             (lambda o: tl.OneCycleLR(o, [1.0, 'x', 1.0], total_steps=10), TypeError),
             (lambda o: tl.OneCycleLR(o, 1.0, total_steps=10, base_momentum='x'), TypeError)]
    for make_sched, exc in cases:
        for name, opt_kw in (('SGD', dict(momentum=0.9)), ('Adam', {})):
            opt, _ = sched_optimizers(name, **opt_kw)
            before = [dict(g) for g in opt.param_groups]
            raises(exc, lambda: make_sched(opt))
            assert opt.param_groups == before, (name, [sorted(g) for g in opt.param_groups])
            _, topt = sched_optimizers(name, **opt_kw)
            for o in (opt, topt):
                o.param_groups[0]['lr'] = 0.5
            sched, tsched = tl.StepLR(opt, 2, 0.5), torch.optim.lr_scheduler.StepLR(topt, 2, 0.5)
            assert_close(np.array(sched.base_lrs), np.array(tsched.base_lrs), 1e-12, 0, 'base_lrs')
            for _ in range(3):
                for stepper in (opt, topt, sched, tsched):
                    stepper.step()
            assert_snapshots_close(sched_snapshot(opt, sched), sched_snapshot(topt, tsched), f'{name} after {exc}')


def test_lr_scheduler_one_cycle_training_as_pytorch():
    """A small MLP trained under OneCycleLR, one scheduler step per batch, by Nesterov SGD with weight decay (momentum
    cycled) and by Adam (betas[0] cycled), in float64 from torch's weights: every parameter as torch's after every
    step."""
    need_torch()
    for name, kw in (('SGD', dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)), ('Adam', dict(lr=1e-3))):
        torch.manual_seed(0)
        tm = optim_model(torch.nn).double()
        lm = optim_model(tl)
        lm.load_state_dict(torch_state(tm))
        lm = lm.double()
        r = rng(('onecycle_training', name))
        xs, ys = r.standard_normal((4, 8, 3)), r.standard_normal((4, 8, 2))
        runs, used, before = [], [], [p.numpy().copy() for p in lm.parameters()]
        for m, module, lib, sched_lib in ((tl, lm, tl, tl), (TH, tm, torch.optim, torch.optim.lr_scheduler)):
            opt = getattr(lib, name)(module.parameters(), **kw)
            runs.append((m, module, opt, sched_lib.OneCycleLR(opt, max_lr=0.2 if name == 'SGD' else 0.05,
                                                              epochs=3, steps_per_epoch=4, three_phase=True)))
        for step in range(12):
            used.append(runs[0][2].param_groups[0]['lr'])
            for m, module, opt, sched in runs:
                opt.zero_grad()
                m.mse_loss(module(make(m, xs[step % 4])), make(m, ys[step % 4])).backward()
                opt.step()
                sched.step()
            for k, (a, b) in enumerate(zip(lm.parameters(), tm.parameters())):
                assert_close(a, b, 1e-10, 1e-12, f'{name} step {step} parameter {k}')
        assert used[-1] == runs[0][2].param_groups[0]['min_lr'] < 1e-5 < max(used), used
        assert all(not np.allclose(p.numpy(), b) for p, b in zip(lm.parameters(), before)), 'a parameter never moved'


# ===== errors: clear exceptions, nothing changed =====

def test_error_broadcast_names_both_shapes():
    a, b = tl.Tensor(sample(rng('e1'), (2, 3))), tl.Tensor(sample(rng('e2'), (4,)))
    assert_names_shapes(raises(ValueError, lambda: a + b), (2, 3), (4,))
    assert_names_shapes(raises(ValueError, lambda: a * b), (2, 3), (4,))


def test_error_matmul_names_both_shapes():
    a, b = tl.Tensor(sample(rng('e3'), (2, 3))), tl.Tensor(sample(rng('e4'), (4, 5)))
    assert_names_shapes(raises(ValueError, lambda: a @ b), (2, 3), (4, 5))


def test_error_cat_reshape_linear_conv_shapes():
    r = rng('e5')
    a, b = tl.Tensor(sample(r, (2, 3))), tl.Tensor(sample(r, (2, 4)))
    assert_names_shapes(raises(ValueError, lambda: tl.cat([a, b], 0)), (2, 3), (2, 4))
    assert_names_shapes(raises(ValueError, lambda: a.reshape(4, 2)), (2, 3), (4, 2))
    w = tl.Tensor(sample(r, (5, 4)))
    assert_names_shapes(raises(ValueError, lambda: tl.linear(a, w)), (2, 3), (5, 4))
    for shape, bias in (((5, 3), (2,)), ((5, 3), (1, 2, 5)), ((1, 3), (2,))):   # a bias must fit the output as it is
        assert_names_shapes(raises(ValueError, lambda: tl.linear(a, tl.ones(*shape, dtype=a.dtype),
                                                                 tl.ones(*bias, dtype=a.dtype)), 'linear'), bias)
    if torch is not None:   # a 1-d weight: x @ weight, as PyTorch's
        for xs in ((2, 3), (3,), (0, 2, 3), (4, 2, 3)):
            x0, w0 = sample(r, xs), sample(r, (3,))
            got, want = tl.linear(tl.tensor(x0), tl.tensor(w0)), F.linear(torch.tensor(x0), torch.tensor(w0))
            assert got.shape == tuple(want.shape) and np.allclose(got.numpy(), want.numpy(), 1e-12, 1e-12), xs
    a32, w32 = a.float(), tl.Tensor(sample(r, (5, 3))).float()
    for weight, bias, names in ((w32.double(), None, ('float32', 'float64')), (w32, w32[:, 0].double(), ('float64',)),
                                (w32.half(), w32[:, 0], ('float16',))):   # no promotion, as PyTorch's
        if torch is not None:
            raises(RuntimeError, lambda: F.linear(torch.tensor(a32.numpy()), torch.tensor(weight.numpy()),
                                                  None if bias is None else torch.tensor(bias.numpy())))
        raises(TypeError, lambda: tl.linear(a32, weight, bias), 'linear', *names)
    x, k = tl.Tensor(sample(r, (1, 3, 5, 5))), tl.Tensor(sample(r, (2, 2, 3, 3)))
    assert_names_shapes(raises(ValueError, lambda: tl.conv2d(x, k)), (1, 3, 5, 5), (2, 2, 3, 3))
    # PyTorch rejects no output channels and an empty window; no input channels match none
    for empty in ((0, 3, 3, 3), (2, 0, 3, 3), (2, 3, 0, 3), (2, 3, 3, 0)):
        assert_names_shapes(raises(ValueError, lambda: tl.conv2d(tl.zeros(1, empty[1], 5, 5), tl.zeros(*empty))), empty)
    raises(TypeError, lambda: tl.conv2d(x, tl.zeros(2, 3, 3, 3), tl.zeros(2, dtype=np.float64)), 'float64', 'bias')
    logits, target = tl.Tensor(sample(r, (4, 3))), tl.Tensor(np.array([0, 1, 2]))
    assert_names_shapes(raises(ValueError, lambda: tl.cross_entropy(logits, target)), (4, 3), (3,))
    assert_names_shapes(raises(ValueError, lambda: tl.cat([tl.tensor(1.), tl.tensor(2.)]), 'zero-dimensional'), ())
    for join in (tl.cat, tl.stack):   # the error names the function called (stack's named cat)
        raises(ValueError, lambda: join([]), join.__name__, 'at least one tensor')
    mask, z = tl.tensor([True, False]), tl.zeros(3)
    assert_names_shapes(raises(ValueError, lambda: tl.where(mask, z, z)), (2,), (3,))
    assert_names_shapes(raises(ValueError, lambda: tl.conv2d(x[0], k)), (3, 5, 5), (2, 2, 3, 3))   # one image
    for bad in (x[0, 0], x[None]):
        assert_names_shapes(raises(ValueError, lambda: tl.conv2d(bad, x)), bad.shape, x.shape)
        for pool in (tl.max_pool2d, tl.avg_pool2d):
            assert_names_shapes(raises(ValueError, lambda: pool(bad, 2), '3-d', '4-d'), bad.shape)


def test_error_dims_out_of_range_like_torch():
    """A dim outside [-ndim, ndim) (unsqueeze and stack: [-ndim-1, ndim]) raises, naming the dim and the range,
    where PyTorch raises, instead of wrapping around."""
    need_torch()
    x, p = tl.zeros(2, 3), torch.zeros(2, 3)
    cases = [lambda m, t: t.permute(0, 3), lambda m, t: t.permute(0, -3), lambda m, t: t.unsqueeze(3),
             lambda m, t: t.unsqueeze(-4), lambda m, t: t.flatten(4), lambda m, t: t.flatten(0, -3),
             lambda m, t: t[0].flatten(1), lambda m, t: m.stack([t, t], 3), lambda m, t: m.stack([t, t], -4),
             lambda m, t: t.transpose(0, 5), lambda m, t: t.transpose(-3, 0), lambda m, t: m.cat([t, t], 2),
             lambda m, t: t.softmax(2), lambda m, t: t.sum(-3)]
    for k, f in enumerate(cases):
        want = raises(IndexError, lambda: f(torch, p))
        msg = raises(IndexError, lambda: f(tl, x))
        bounds, dim = want.split('range of ')[1].rstrip(')').split(', but got ')   # '[-2, 1]', '3'
        assert f'dim {dim} ' in msg and bounds in msg, (k, msg, want)
    for f in (lambda t: t.unsqueeze(2), lambda t: t.unsqueeze(-3), lambda t: t.flatten(-1), lambda t: t.transpose(-1, -2),
              lambda t: t.permute(-1, 0)):
        assert f(x).shape == tuple(f(p).shape)
    raises(ValueError, lambda: tl.zeros(2, 3).flatten(1, 0), 'start_dim')
    raises(RuntimeError, lambda: torch.zeros(3).expand(-1, 3))
    assert_names_shapes(raises(ValueError, lambda: tl.zeros(3).expand(-1, 3)), (3,), (-1, 3))
    assert tl.zeros(3).expand(2, -1).shape == (2, 3)
    y = tl.tensor(3.)
    assert y.transpose(0, -1).shape == () and y.flatten(0).shape == (1,) and y.unsqueeze(-1).shape == (1,)


def test_error_bad_function_arguments():
    """Arguments PyTorch rejects: a clear error naming the argument, not a result or a NumPy message."""
    need_torch()
    r = rng('e-args')
    a, b = sample(r, (2, 3)), sample(r, (2, 3))
    raises(ValueError, lambda: F.mse_loss(torch.tensor(a), torch.tensor(b), reduction='bogus'))
    raises(ValueError, lambda: tl.mse_loss(tl.tensor(a), tl.tensor(b), reduction='bogus'), 'reduction', 'bogus')
    raises(RuntimeError, lambda: F.cross_entropy(torch.tensor(a), torch.tensor([0, 1]), label_smoothing=1.5))
    for ls in (1.5, -0.1):   # PyTorch checks only the upper bound, and silently smooths by nothing below 0
        raises(ValueError, lambda: tl.cross_entropy(tl.tensor(a), tl.tensor([0, 1]), label_smoothing=ls),
               'label_smoothing', str(ls))
    raises(RuntimeError, lambda: torch.ones(2).clamp())
    raises(ValueError, lambda: tl.ones(2).clamp(), 'min', 'max')
    for fn in ('randn', 'rand'):
        raises((RuntimeError, NotImplementedError), lambda: getattr(torch, fn)(2, dtype=torch.int64))
        raises(TypeError, lambda: getattr(tl, fn)(2, dtype=tl.int64), fn, 'int64')
    x, mean = sample(r, (4, 3, 5)), sample(r, (3,))
    for stats in ((mean, None), (None, mean)):   # one running statistic without the other: nothing is updated
        raises(ValueError, lambda: F.batch_norm(torch.tensor(x), *[s if s is None else torch.tensor(s) for s in stats],
                                                training=True))
        given = [s if s is None else tl.tensor(s) for s in stats]
        raises(ValueError, lambda: tl.batch_norm(tl.tensor(x), *given, training=True), 'running_mean', 'running_var')
        assert all(np.array_equal(g.numpy(), mean) for g in given if g is not None), 'a running statistic changed'


def test_error_float_only_ops_reject_integer_tensors():
    """Ops PyTorch computes only in floating point raise a TypeError naming the dtype on integer tensors (they gave
    truncated numbers), and leave every tensor as it was: BatchNorm's running statistics and batch count too."""
    need_torch()
    ints = np.arange(12, dtype=np.int64).reshape(4, 3)
    calls = {'gelu': lambda t: t.gelu(), 'softmax': lambda t: t.softmax(), 'log_softmax': lambda t: t.log_softmax(),
             'mse_loss': lambda t: tl.mse_loss(t, t), 'dropout': lambda t: tl.dropout(t, 0.5),
             'cross_entropy': lambda t: tl.cross_entropy(t, [0, 1, 2, 0])}
    for name, call in calls.items():
        raises(TypeError, lambda: call(tl.tensor(ints)), name, 'int64')
    for theirs in (F.gelu, lambda t: F.softmax(t, -1), lambda t: F.log_softmax(t, -1), lambda t: F.mse_loss(t, t),
                   lambda t: F.dropout(t, 0.5), lambda t: F.cross_entropy(t, torch.tensor([0, 1, 2, 0]))):
        raises((RuntimeError, NotImplementedError), lambda: theirs(torch.tensor(ints)))   # PyTorch raises too
    passed = tl.tensor(ints)   # dropout that drops nothing returns its input, integers too (as PyTorch)
    assert tl.dropout(passed, 0.5, training=False) is passed and tl.dropout(passed, 0.0) is passed
    bn, bn_t = tl.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    raises((RuntimeError, NotImplementedError), lambda: bn_t(torch.tensor(ints)))
    raises(TypeError, lambda: bn(tl.tensor(ints)), 'batch_norm', 'int64')
    assert_close(bn.running_mean, np.zeros(3, np.float32), 0, 0, 'running_mean changed')
    assert int(bn.num_batches_tracked.item()) == 0, 'a batch counted'
    layer = tl.Linear(2, 2)
    before = [p.numpy().copy() for p in layer.parameters()]
    raises(TypeError, lambda: torch.nn.Linear(2, 2).to(torch.int64))
    raises(TypeError, lambda: layer.to(np.int64), 'Module.to', 'int64')
    assert all(p.dtype == np.float32 and np.array_equal(p.numpy(), b) for p, b in zip(layer.parameters(), before))


def test_inplace_ops_compute_in_the_promoted_dtype():
    """a op= b computes a op b in the promoted dtype and stores it in a's: as PyTorch (b was cast to a's dtype first,
    which rounded a float32 operand to float16, and a float64 one to float32, before the op)."""
    need_torch()
    r = rng('inplace promoted')
    for a_dtype, b_dtype in ((np.float16, np.float32), (np.float32, np.float64), (np.int32, np.int64)):
        a = (r.standard_normal((3, 5)) * 100).astype(a_dtype)
        b = (r.standard_normal((5,)) * 10 + 20).astype(b_dtype)
        for op in ('__iadd__', '__isub__', '__imul__', '__itruediv__'):
            if op == '__itruediv__' and a_dtype == np.int32:
                continue   # true division gives a float: no integer tensor takes it in place (tested elsewhere)
            ours, theirs = tl.tensor(a.copy()), torch.tensor(a.copy())
            getattr(ours, op)(tl.tensor(b))
            getattr(theirs, op)(torch.tensor(b))
            assert ours.dtype == a_dtype, (op, ours.dtype)
            assert np.array_equal(ours.numpy(), theirs.numpy()), (a_dtype, b_dtype, op)
    a = (r.standard_normal(9) * 50).astype(np.float16)
    for op in ('__iadd__', '__isub__', '__imul__', '__itruediv__'):   # a number meets float16 in float32, as in a * 0.3
        ours, theirs = tl.tensor(a.copy()), torch.tensor(a.copy())
        getattr(ours, op)(0.3)
        getattr(theirs, op)(0.3)
        assert_close(ours, theirs.numpy(), 2.0 ** -10, 0, f'float16 {op} 0.3')   # one float16 step


def test_zero_dim_operands_promote_as_pytorch():
    """A 0-d tensor does not widen a tensor with dimensions within its kind (float16 (7,) * float32 () is float16),
    and does where its kind is higher (int64 (7,) + float64 () is float64); as PyTorch, in +, -, *, /, where and
    in place. Values equal PyTorch's bit for bit: float16 meets a 0-d float operand rounded to float16 first in + and
    -, unrounded (in float32) as the right operand of * and /, as PyTorch's CPU kernels."""
    need_torch()
    r = rng('zero-d promotion')
    cases = ((np.float16, (7,), np.float32, ()), (np.float32, (7,), np.float64, ()), (np.float16, (7,), np.float64, ()),
             (np.int64, (7,), np.float64, ()), (np.int32, (7,), np.int64, ()), (np.uint8, (7,), np.int64, ()),
             (np.bool_, (7,), np.int32, ()), (np.float16, (), np.float32, (7,)), (np.float16, (7,), np.float32, (7,)))
    for a_dtype, a_shape, b_dtype, b_shape in cases:
        a = (r.standard_normal(a_shape) * 10 + 3).astype(a_dtype)
        b = np.asarray(r.standard_normal(b_shape) * 3 + 7).astype(b_dtype)
        what = f'{np.dtype(a_dtype).name}{a_shape} with {np.dtype(b_dtype).name}{b_shape}'
        pairs = [(getattr(tl.tensor(a), f'__{op}__')(tl.tensor(b)), getattr(torch.tensor(a), f'__{op}__')(torch.tensor(b)))
                 for op in ('add', 'mul', 'truediv') + (('sub',) if a_dtype != np.bool_ else ())]
        pairs.append((tl.where(tl.tensor(a > 3), tl.tensor(a), tl.tensor(b)),
                      torch.where(torch.tensor(a > 3), torch.tensor(a), torch.tensor(b))))
        if a_shape and np.dtype(a_dtype).kind == 'f':
            for op in ('add', 'sub', 'mul', 'truediv'):
                ours, theirs = tl.tensor(a.copy()), torch.tensor(a.copy())
                getattr(ours, f'__i{op}__')(tl.tensor(b))
                getattr(theirs, f'__i{op}__')(torch.tensor(b))
                pairs.append((ours, theirs))
        for ours, theirs in pairs:
            assert same_dtype(ours, theirs), (what, ours.dtype, theirs.dtype)
            assert_close(ours, theirs.numpy(), 0, 0, what)


def test_numbers_with_float16_and_over_tensors_as_pytorch():
    """A Python number with a float16 tensor, bit for bit PyTorch's CPU ops: rounded to float16 first in +, -, %, a
    number // a tensor (and +=, -=), unrounded in float32 in *, / and tensor // number (and *=, /=), the result
    rounded once; a number over a tensor of any dtype is reciprocal() times the number (PyTorch's __rtruediv__: two
    roundings), its float64 gradient too."""
    need_torch()
    r = rng('numbers with float16')
    x0 = (r.standard_normal(3000) * 3).astype(np.float16)
    x0[np.abs(x0) < 1e-2] = 0.5
    ops = {'+': lambda x, s: x + s, 's+': lambda x, s: s + x, '-': lambda x, s: x - s, 's-': lambda x, s: s - x,
           '*': lambda x, s: x * s, 's*': lambda x, s: s * x, '/': lambda x, s: x / s, 's/': lambda x, s: s / x,
           '//': lambda x, s: x // s, 's//': lambda x, s: s // x, '%': lambda x, s: x % s}
    for s in (0.1, 1 / 3, 2.7182818, -0.7, 1e5):
        for name, op in ops.items():
            ours, theirs = op(tl.tensor(x0), s), op(torch.tensor(x0), s)
            assert ours.dtype == np.float16 and np.array_equal(ours.numpy(), theirs.numpy(), equal_nan=True), (s, name)
        for name in ('iadd', 'isub', 'imul', 'itruediv'):
            ours, theirs = tl.tensor(x0.copy()), torch.tensor(x0.copy())
            getattr(ours, f'__{name}__')(s)
            getattr(theirs, f'__{name}__')(s)
            assert np.array_equal(ours.numpy(), theirs.numpy()), (s, name)
    for dtype in (np.float32, np.float64, np.int32, np.uint8, np.bool_):
        x1 = r.integers(1, 200, 500).astype(dtype) if dtype != np.float32 else r.standard_normal(500).astype(dtype)
        for s in (2.5, 0.7, 3):
            ours, theirs = s / tl.tensor(x1), s / torch.tensor(x1)
            assert same_dtype(ours, theirs) and np.array_equal(ours.numpy(), theirs.numpy()), (dtype, s)
    x, x_t = tl.tensor(r.standard_normal(50) + 3, requires_grad=True), torch.tensor(r.standard_normal(50) + 3,
                                                                                      requires_grad=True)
    x_t.data[...] = torch.tensor(x.numpy())
    (2.5 / x).sum().backward()
    (2.5 / x_t).sum().backward()
    assert_close(x.grad, x_t.grad.numpy(), 1e-14, 0, 'number / tensor gradient')
    assert 'grad_fn=<Div>' in repr(1 / x) and 'grad_fn=<Div>' in repr(x.reciprocal())   # one op, no * 1


def test_integer_with_float16_rounds_the_integers_first():
    """An integer tensor with a float16 one: the integers are rounded to float16 first, as PyTorch does (2049
    becomes 2048), then the op runs as float16 with float16; in both orders, 0-d either side, and in place; but a 0-d
    integer, or one of one element, after * or / (PyTorch's CPU scalar) meets the float16 operand unrounded, in
    float32: bit for bit PyTorch's everywhere."""
    need_torch()
    r = rng('int with float16')
    for int_dtype, int_shape, half_shape in ((np.int32, (9,), (9,)), (np.int64, (9,), ()), (np.int16, (), (9,)),
                                             (np.int32, (1,), (9,)), (np.int64, (1, 1), (3, 9))):
        i = np.asarray(r.integers(1025, 8192, int_shape)).astype(int_dtype)
        h = np.asarray(r.uniform(0.5, 7, half_shape)).astype(np.float16)   # products stay below 65504
        for k, f in enumerate((lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b)):
            for first in (0, 1):
                ours = f(*[tl.tensor(h), tl.tensor(i)][::1 - 2 * first])
                theirs = f(*[torch.tensor(h), torch.tensor(i)][::1 - 2 * first])
                assert ours.dtype == np.float16 and np.array_equal(ours.numpy(), theirs.numpy()), (int_dtype, k, first)
        for name in ('maximum', 'minimum'):
            ours = getattr(tl, name)(tl.tensor(h), tl.tensor(i))
            theirs = getattr(torch, name)(torch.tensor(h), torch.tensor(i))
            assert np.array_equal(ours.numpy(), theirs.numpy()), (int_dtype, name)
        if half_shape:
            for op in ('iadd', 'isub', 'imul', 'itruediv'):
                ours, theirs = tl.tensor(h.copy()), torch.tensor(h.copy())
                getattr(ours, f'__{op}__')(tl.tensor(i))
                getattr(theirs, f'__{op}__')(torch.tensor(i))
                assert np.array_equal(ours.numpy(), theirs.numpy()), (int_dtype, op)


def test_reductions_over_no_axes_reduce_every_axis():
    """sum, mean, var, max and min over axis=() reduce every axis, as PyTorch's (NumPy's axis=() reduces none); all and
    any over axis=() or [] reduce none, as PyTorch's."""
    need_torch()
    x = sample(rng('empty axes'), (2, 3, 4))
    xt = torch.tensor(x)
    for name, theirs in (('sum', xt.sum(dim=())), ('mean', xt.mean(dim=())), ('var', xt.var(dim=())),
                         ('max', xt.amax(dim=())), ('min', xt.amin(dim=()))):
        got = getattr(tl.tensor(x), name)(axis=())
        assert got.shape == (), (name, got.shape)
        assert_close(got, theirs.numpy(), 1e-12, 1e-12, f'{name}(axis=())')
    assert tl.tensor(x).squeeze(()).shape == xt.squeeze(()).shape == x.shape, 'squeeze(()) squeezes nothing'
    assert tl.tensor(x).sum([]).shape == xt.sum(dim=[]).shape == ()
    for name, axis in itertools.product(('all', 'any'), ((), [])):
        got, want = getattr(tl.tensor(x) > 0, name)(axis), getattr(xt > 0, name)(dim=axis)
        assert got.shape == tuple(want.shape) == x.shape and got.tolist() == want.tolist(), (name, axis)
    for axis in (np.int64(1), np.array([0, 2])):   # NumPy integers and arrays name axes as ints and tuples do
        assert_close(tl.tensor(x).sum(axis), x.sum(axis=tuple(np.atleast_1d(axis))), 1e-12, 1e-12, f'sum({axis!r})')


def test_pytorch_conveniences():
    """Methods PyTorch code leans on, against PyTorch's: long/int/bool, contiguous, t, pow, neg, std, argmin, all,
    any, full_like, Identity, a tensor as an index and in an f-string; values and gradients."""
    need_torch()
    r = rng('conveniences')
    a = sample(r, (3, 4))
    a[1, 2] = a[0, 1]   # a tie for argmin / argmax
    cases = [lambda nn, x: x.t(), lambda nn, x: x.t().contiguous() * 2, lambda nn, x: x.pow(3),
             lambda nn, x: x.neg(), lambda nn, x: x.std(), lambda nn, x: x.std(dim=1, keepdim=True),
             lambda nn, x: x.std(0, correction=0), lambda nn, x: x[0].t(), lambda nn, x: x.sum().t(),
             lambda nn, x: nn.Identity(3, bias=True)(x) * 1.5]
    for k, f in enumerate(cases):
        results = []
        for m, nn in ((tl, tl), (torch, torch.nn)):
            x = m.tensor(a, requires_grad=True)
            out = f(nn, x)
            out.backward(m.tensor(upstream(k, tuple(out.shape))))
            results.append([out.detach().numpy(), x.grad.numpy()])
        for ours, theirs in zip(*results):
            assert_close(ours, theirs, 1e-12, 1e-12, f'case {k}')
    x, p = tl.tensor(a), torch.tensor(a)
    for axis in (None, 0, 1, -1):
        for name in ('argmin', 'argmax'):
            assert getattr(x, name)(axis).tolist() == getattr(p, name)(axis).tolist(), (name, axis)
    assert x.argmin(dim=0).tolist() == p.argmin(dim=0).tolist()
    raises(ValueError, lambda: tl.zeros(0, 2).argmin(), 'argmin', '(0, 2)')
    mask, pmask = x > 0.2, p > 0.2
    for kw in ({}, {'dim': 1}, {'dim': 0, 'keepdim': True}):
        for name in ('all', 'any'):
            ours, theirs = getattr(mask, name)(**kw), getattr(pmask, name)(**kw)
            assert ours.dtype == np.bool_ and ours.tolist() == theirs.tolist(), (name, kw)
    assert x.any().item() and not tl.zeros(3).any().item() and tl.ones(2, 0).all(dim=1).tolist() == [True, True]
    for name, dtype in (('long', np.int64), ('int', np.int32), ('bool', np.bool_)):
        ours, theirs = getattr(x * 3, name)(), getattr(p * 3, name)()
        assert ours.dtype == dtype and ours.tolist() == theirs.tolist(), name
    assert x.contiguous() is x and x.T.contiguous().data.flags.c_contiguous
    raises(ValueError, lambda: tl.zeros(2, 3, 4).t(), '(2, 3, 4)')
    full = tl.full_like(x, 2.5)
    assert full.shape == x.shape and full.dtype == x.dtype and full.tolist() == torch.full_like(p, 2.5).tolist()
    assert tl.full_like(x.long(), 7).dtype == np.int64
    items = ['a', 'b', 'c', 'd']
    assert items[tl.tensor(2)] == 'c' and list(range(tl.tensor([3]))) == [0, 1, 2]
    raises(TypeError, lambda: items[tl.tensor(1.0)], 'index')
    raises(TypeError, lambda: items[tl.tensor([1, 2])], 'index')
    assert f'{x.sum():.3f}' == f'{p.sum():.3f}' and f'{tl.tensor(7):>4}' == '   7'
    raises(TypeError, lambda: f'{x:.3f}')
    assert x.argmax(1, keepdim=True).tolist() == p.argmax(1, keepdim=True).tolist()
    raises(TypeError, lambda: (x > 0).argmax(), 'bool')
    assert x.argmax(keepdim=True).shape == tuple(p.argmax(keepdim=True).shape) == (1, 1)
    flags, pflags = x > 0.1, p > 0.1   # max of bools is PyTorch's, argmax of them is not
    assert [v.tolist() for v in flags.max(dim=1)] == [v.tolist() for v in pflags.max(dim=1)]
    assert (tl.tensor(np.int8([2, -1, 1])) ** tl.tensor(np.int8([-128, -128, -127]))).tolist() == \
        (torch.tensor(np.int8([2, -1, 1])) ** torch.tensor(np.int8([-128, -128, -127]))).tolist()
    assert (x == None) is False and (x != None) is True   # noqa: E711 (PyTorch's answer)
    u = tl.tensor(np.array([[1, 0], [2, 3]], np.uint8))
    assert u.any().dtype == u.all(dim=1).dtype == np.uint8 and u.all(dim=1).tolist() == [0, 1]
    ties, pties = tl.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, -1.0]], requires_grad=True), torch.tensor(
        [[1.0, 3.0, 3.0], [2.0, 2.0, -1.0]], requires_grad=True)   # the gradient to the index found alone
    for t, name in ((ties, 'max'), (pties, 'max')):
        getattr(t, name)(dim=1).values.sum().backward()
    assert ties.grad.tolist() == pties.grad.tolist() == [[0, 1, 0], [1, 0, 0]]
    flat, pflat = tl.tensor([2.0, 2.0, 2.0], requires_grad=True), torch.tensor([2.0, 2.0, 2.0], requires_grad=True)
    flat.std().backward()
    pflat.std().backward()
    assert flat.grad.tolist() == pflat.grad.tolist() == [0, 0, 0]   # not NaN (0 * inf through the square root)
    base, exponent = [0, 1, -1, -1, 2, -2, 3, -3], [-1, -3, -3, -2, -1, -1, 0, 3]
    assert (tl.tensor(base) ** tl.tensor(exponent)).tolist() == (torch.tensor(base) ** torch.tensor(exponent)).tolist()

def test_pytorch_keyword_names():
    """PyTorch's keyword names work beside API.md's: dim= for axis= (reductions, softmax, shape ops, cat, stack; max
    and min then return PyTorch's (values, indices)), dim0=/dim1= in transpose, gradient= in backward, size= in the
    creation functions, view and expand, shape= in reshape, dims= in permute; values and gradients against PyTorch's.
    Giving both names raises TypeError."""
    need_torch()
    r = rng('keyword names')
    x0, x1 = sample(r, (2, 3, 4)), sample(r, (2, 3, 4))
    cases = [lambda m, x, y: x.sum(dim=1), lambda m, x, y: x.mean(dim=(0, 2), keepdim=True),
             lambda m, x, y: x.var(dim=-1, correction=0), lambda m, x, y: x.softmax(dim=1),
             lambda m, x, y: x.log_softmax(dim=0), lambda m, x, y: m.softmax(x, dim=-1),
             lambda m, x, y: m.log_softmax(x, dim=1), lambda m, x, y: x.unsqueeze(dim=1),
             lambda m, x, y: x[:, :1].squeeze(dim=1), lambda m, x, y: m.cat([x, y], dim=2),
             lambda m, x, y: m.stack([x, y], dim=-1), lambda m, x, y: x.transpose(dim0=0, dim1=2),
             lambda m, x, y: x.max(dim=1).values, lambda m, x, y: x.min(dim=2, keepdim=True).values]
    for k, f in enumerate(cases):
        results = []
        for m in (tl, torch):
            x, y = m.tensor(x0, requires_grad=True), m.tensor(x1, requires_grad=True)
            out = f(m, x, y)
            out.backward(gradient=m.tensor(upstream(k, tuple(out.shape))))
            results.append([out.detach().numpy(), x.grad.numpy(), np.zeros(1) if y.grad is None else y.grad.numpy()])
        for ours, theirs in zip(*results):
            assert_close(ours, theirs, 1e-12, 1e-12, f'case {k}')
    x, p = tl.tensor(x0), torch.tensor(x0)
    assert x.argmax(dim=1).tolist() == p.argmax(dim=1).tolist() and x.size(dim=2) == p.size(dim=2) == 4
    for name in ('max', 'min'):   # with dim=, PyTorch's (values, indices); API.md's axis= gives the values alone
        for kw in ({'dim': 1}, {'dim': -1, 'keepdim': True}):
            (values, indices), theirs = getattr(x, name)(**kw), getattr(p, name)(**kw)
            assert values.tolist() == theirs.values.tolist() and indices.tolist() == theirs.indices.tolist(), name
        assert getattr(x, name)(axis=1).shape == getattr(x, name)(1).shape == (2, 4)
        raises(TypeError, lambda: getattr(x, name)(axis=0, dim=1), 'dim')
    for name in ('zeros', 'ones', 'randn', 'rand'):
        made = getattr(tl, name)(size=(2, 3), dtype=tl.float64)
        assert made.shape == (2, 3) and made.dtype == np.float64, name
        raises(TypeError, lambda: getattr(tl, name)(2, size=(2,)), 'size')
    assert tl.full(size=(2,), fill_value=1.5).tolist() == torch.full(size=(2,), fill_value=1.5).tolist()
    for shaped in (lambda t: t.permute(dims=(2, 0, 1)), lambda t: t.reshape(shape=(4, -1)),
                   lambda t: t.view(size=(8, 3)), lambda t: t[:, :1].expand(size=(3, 2, 3, 4))):   # PyTorch's keywords
        assert shaped(x).tolist() == shaped(p).tolist()
    for both in (lambda: x.sum(axis=0, dim=1), lambda: tl.cat([x], axis=0, dim=1), lambda: x.transpose(0, 1, dim0=1),
                 lambda: x.reshape(24, shape=(4, 6)), lambda: x.view(24, size=(24,)),
                 lambda: x.permute(0, 1, 2, dims=(2, 1, 0)), lambda: x.expand(2, 3, 4, size=(2, 3, 4)),
                 lambda: tl.ones(3, requires_grad=True).sum().backward(tl.tensor(1.), gradient=tl.tensor(1.))):
        raises(TypeError, both)
    assert x.sum(axis=1).shape == (2, 4) and tl.softmax(x, axis=0).shape == x.shape   # API.md's names still


# ===== PyTorch's conveniences: shapes and products, new tensors and factories, in-place methods =====

for _name in ('bmm', 'outer', 'dot', 'einsum_attention', 'einsum_trace', 'einsum_three'):
    _o = next(o for o in OPS if o.name == _name)
    for _dt in (np.float16, np.float32, np.float64):
        register(f'test_dtype_{_name}_{np.dtype(_dt).name}', lambda o=_o, dt=_dt: check_dtype(o, dt))
    register(f'test_gpu_float16_{_name}', lambda o=_o: check_dtype(o, np.float16, device='cuda'))


def torch_dtype(dtype):
    return getattr(torch, np.dtype(dtype).name)


def close_to_torch(ours, theirs, what, tol=0.0):
    """ours (tl) has theirs' (torch) shape and dtype and values (NaNs in the same places)."""
    assert ours.shape == tuple(theirs.shape) and same_dtype(ours, theirs), (what, ours.shape, ours.dtype, theirs.dtype)
    a, b = ours.numpy().astype(np.float64), theirs.detach().numpy().astype(np.float64)
    assert np.allclose(a, b, tol, tol, equal_nan=True), (what, a, b)


def test_shape_conveniences_as_pytorch():
    """expand_as, view_as, reshape_as, type_as (the other's dtype and, as PyTorch's, device), unflatten, swapaxes,
    swapdims, movedim, moveaxis (PyTorch's keyword names), bmm, outer, dot: shapes, dtypes (outer promotes, bmm of
    integers) and values against PyTorch's; where PyTorch raises these raise, naming the shapes or dtypes."""
    need_torch()
    a = sample(rng('shape conveniences'), (2, 3, 4))
    x, p = tl.tensor(a), torch.tensor(a)
    assert x.dim() == p.dim() == 3 and x.size() == tuple(p.size()) and x.size(-1) == p.size(-1) == 4
    cases = [lambda m, t: t.swapaxes(axis0=0, axis1=2), lambda m, t: t.swapdims(dim0=-1, dim1=0),
             lambda m, t: t.movedim(source=(0, 2), destination=(-1, 0)), lambda m, t: t.moveaxis(1, 1),
             lambda m, t: t.movedim([], []), lambda m, t: m.tensor(2.5).movedim(0, -1),
             lambda m, t: t.unflatten(dim=0, sizes=[1, 2, 1]), lambda m, t: t.unflatten(2, (-1, 2)),
             lambda m, t: t[:, :0].unflatten(1, (0, 5)), lambda m, t: t.expand_as(m.zeros(5, 2, 3, 4)),
             lambda m, t: t.view_as(m.zeros(6, 4, dtype=m.int32)), lambda m, t: t.reshape_as(m.zeros(24)),
             lambda m, t: t.type_as(m.zeros(1, dtype=m.int32)), lambda m, t: t.type_as(m.zeros(1, dtype=m.float16)),
             lambda m, t: t[0, 0].outer(t[1, 1, :3]), lambda m, t: t[0, 0].long().outer(t[1, 0]),
             lambda m, t: m.outer(t[0, 0], t[0, 1].float()), lambda m, t: t[0, 0].dot(t[1, 1]),
             lambda m, t: m.dot(t[0, 0].long(), t[1, 1].long()), lambda m, t: m.bmm(t, t.transpose(1, 2)),
             lambda m, t: (t * 4).long().bmm((t * 4).long().transpose(1, 2))]
    for k, f in enumerate(cases):
        close_to_torch(f(tl, x), f(torch, p), f'case {k}', 1e-12)
    errors = [(lambda m, t: t.unflatten(1, (2, 2)), ValueError, ('(2, 2)', '(2, 3, 4)')),
              (lambda m, t: t.unflatten(1, (-1, -1)), ValueError, ()), (lambda m, t: t.unflatten(1, ()), ValueError, ()),
              (lambda m, t: t.unflatten(1, (3, 1.0)), TypeError, ()),
              (lambda m, t: m.tensor(1.0).unflatten(0, (1,)), IndexError, ()),
              (lambda m, t: t.movedim((0, 1), (2,)), ValueError, ()),
              (lambda m, t: t.movedim((0, 0), (2, 1)), ValueError, ('repeated',)),
              (lambda m, t: t.movedim((0, 1), (2, 2)), ValueError, ('repeated',)),
              (lambda m, t: t.movedim(3, 0), IndexError, ()),
              (lambda m, t: t.expand_as(m.zeros(2, 3)), ValueError, ('(2, 3, 4)', '(2, 3)')),
              (lambda m, t: t.view_as(m.zeros(5)), ValueError, ('(2, 3, 4)',)),
              (lambda m, t: t.transpose(0, 1).view_as(m.zeros(24)), RuntimeError, ('reshape',)),
              (lambda m, t: t.bmm(m.zeros(3, 4, 5, dtype=m.float64)), ValueError, ('(2, 3, 4)', '(3, 4, 5)')),
              (lambda m, t: t.bmm(m.zeros(2, 5, 5, dtype=m.float64)), ValueError, ('(2, 3, 4)', '(2, 5, 5)')),
              (lambda m, t: t[0].bmm(t), ValueError, ('(3, 4)', '(2, 3, 4)')),
              (lambda m, t: t.bmm(m.zeros(2, 4, 5)), TypeError, ('float64', 'float32')),
              (lambda m, t: t[0].outer(t[0, 0]), ValueError, ('(3, 4)', '(4,)')),
              (lambda m, t: t[0, 0].outer(t[0, 0, 0]), ValueError, ('(4,)', '()')),
              (lambda m, t: t[0, 0].dot(t[0, 0, :3]), ValueError, ('(4,)', '(3,)')),
              (lambda m, t: t[0].dot(t[0]), ValueError, ('(3, 4)',)),
              (lambda m, t: t[0, 0].dot(t[0, 0].float()), TypeError, ('float64', 'float32'))]
    for k, (f, exc, needles) in enumerate(errors):
        raises(exc, lambda: f(tl, x), *needles)
        raises(Exception, lambda: f(torch, p))
    assert np.array_equal(x.numpy(), a)


def test_einsum_as_pytorch():
    """tl.einsum beyond the op table, against torch.einsum: operands in a list, spaces, one tensor twice, implicit
    output in PyTorch's order (capitals first), integer operands (their dtype kept), float16 accumulated in float32, a
    permutation of one operand a view as PyTorch's (a write shows through) and a diagonal a copy; a backward that read
    an operand changed in place raises as PyTorch's; what PyTorch refuses raises here, naming the problem."""
    need_torch()
    r = rng('einsum')
    a, b, v = sample(r, (3, 4)), sample(r, (4, 2)), sample(r, (4,))
    cases = [lambda m, x, y, w: m.einsum('ij,jk->ik', [x, y]), lambda m, x, y, w: m.einsum(' i j , j k -> k i ', x, y),
             lambda m, x, y, w: m.einsum('i,i->', w, w), lambda m, x, y, w: m.einsum('i,i,j->j', w, w, w),
             lambda m, x, y, w: m.einsum('bA', x), lambda m, x, y, w: m.einsum('Ab,bA', x, x.T),
             lambda m, x, y, w: m.einsum('...j,j', x, w), lambda m, x, y, w: m.einsum('i...->...', x),
             lambda m, x, y, w: m.einsum('ij,jk,k->i', x, y, y[0])]
    for k, f in enumerate(cases):
        results = []
        for m in (tl, torch):
            ts = [m.tensor(t, requires_grad=True) for t in (a, b, v)]
            out = f(m, *ts)
            out.backward(m.tensor(upstream(k, tuple(out.shape))))
            results.append([out] + [t.grad if t.grad is not None else m.zeros(t.shape, dtype=m.float64) for t in ts])
        for n, (ours, theirs) in enumerate(zip(*results)):
            close_to_torch(ours, theirs, f'case {k}, result {n}', 1e-12)
    ints = r.integers(-50, 50, (3, 4))
    for dtype in (np.int32, np.int64):
        for eq, ops in (('ij,kj->ik', (ints, ints)), ('ij->j', (ints,)), ('ii->i', (ints[:, :3],))):
            close_to_torch(tl.einsum(eq, *[tl.tensor(o.astype(dtype)) for o in ops]),
                          torch.einsum(eq, *[torch.tensor(o.astype(dtype)) for o in ops]), eq)
    ones = np.ones(3000, np.float16)   # float16 sums stop at 2048 (2049 rounds back); float32's reach 3000
    for eq in ('i,i->', 'i->'):
        close_to_torch(tl.einsum(eq, *[tl.tensor(ones)] * len(eq.split(','))),
                      torch.einsum(eq, *[torch.tensor(ones)] * len(eq.split(','))), eq)
    for m in (tl, torch):   # a permutation is a view, as PyTorch's
        x = m.tensor(a.copy())
        y = m.einsum('ij->ji', x)
        y += 1
        assert np.array_equal(x.numpy(), a + 1), m.__name__
    x = tl.tensor(a[:, :3].copy())
    d = tl.einsum('ii->i', x)   # PyTorch's diagonal is a view; a copy here
    d += 1
    assert np.array_equal(x.numpy(), a[:, :3])
    def bump_w(m, w, x, y):
        with m.no_grad():
            w += 1.0
    cases = {'an operand the other gradient reads changed': (lambda m, w, x: m.einsum('ij,kj->ik', w, x),
                                                             lambda m, w, x, y: x.__iadd__(1.0)),
             'its own operand changed (its gradient reads the other)': (lambda m, w, x: m.einsum('ij,kj->ik', w, x),
                                                                        bump_w),
             'a square reads both': (lambda m, w, x: m.einsum('ij,ij->i', w, w), bump_w)}
    for name, (build, change) in cases.items():
        assert_same_outcome(name, check_version_case(build, change, tl), check_version_case(build, change, torch),
                            1e-12, ('modified by an in-place operation', 'expected version'))
    errors = [(lambda m: m.einsum('ij,jk->ik', m.ones(2, 2), m.ones(3, 4)), ValueError, ('(2, 2)', '(3, 4)')),
              (lambda m: m.einsum('ij,jk->ik', m.ones(2, 3), m.ones(3, 4, dtype=m.float64)), TypeError,
               ('float32', 'float64')),
              (lambda m: m.einsum('ii->i', m.ones(3, 4)), ValueError, ('(3, 4)', 'repeated')),
              (lambda m: m.einsum('ij->ii', m.ones(3, 3)), ValueError, ('more than once',)),
              (lambda m: m.einsum('ij->k', m.ones(3, 3)), ValueError, ('for no operand',)),
              (lambda m: m.einsum('ij,jk->ik', m.ones(3, 3)), ValueError, ('2 operand',)),
              (lambda m: m.einsum('i,i', m.ones(2), m.ones(2), m.ones(2)), ValueError, ('2 operand',)),
              (lambda m: m.einsum('ijk->ik', m.ones(3, 3)), ValueError, ('(3, 3)', "'ijk'")),
              (lambda m: m.einsum('i...jk', m.ones(3, 3)), ValueError, ('(3, 3)',)),
              (lambda m: m.einsum('i1->i', m.ones(3, 3)), ValueError, ('invalid',)),
              (lambda m: m.einsum('i..', m.ones(2)), ValueError, ('invalid',)),
              (lambda m: m.einsum('i'), (TypeError, RuntimeError), ())]
    for k, (f, exc, needles) in enumerate(errors):
        raises(exc, lambda: f(tl), *needles)
        raises(Exception, lambda: f(torch))
    raises(TypeError, lambda: tl.einsum('i->', tl.ones(3, dtype=tl.bool_)), 'bool')   # (PyTorch's sums them as int64)


def test_new_tensors_as_pytorch():
    """new_zeros, new_ones, new_full, new_empty (zeros here), new_tensor: the tensor's dtype and device unless given,
    requires_grad as asked, the size as separate ints, a tuple or size=; as PyTorch's."""
    need_torch()
    for dtype in (np.float64, np.float16, np.int32, np.bool_):
        x, p = tl.zeros(2, dtype=dtype), torch.zeros(2, dtype=torch_dtype(dtype))
        cases = [lambda t, m: t.new_zeros(2, 3), lambda t, m: t.new_zeros((2, 3)), lambda t, m: t.new_ones(size=(1, 2)),
                 lambda t, m: t.new_ones([3], dtype=m.int64), lambda t, m: t.new_full((2,), 2.5),
                 lambda t, m: t.new_full(size=(2, 1), fill_value=-1, dtype=m.float32), lambda t, m: t.new_zeros(()),
                 lambda t, m: t.new_tensor([1, 0, 3]), lambda t, m: t.new_tensor(np.array([1.5, 0.0, -2])),
                 lambda t, m: t.new_tensor(4), lambda t, m: t.new_tensor([[1, 2]], dtype=m.float16),
                 lambda t, m: t.new_ones(2, dtype=m.float32, requires_grad=True),
                 lambda t, m: t.new_tensor(m.tensor([2.5, 1.0]))]
        for k, f in enumerate(cases):
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')   # PyTorch's about new_tensor(tensor)
                ours, theirs = f(x, tl), f(p, torch)
            close_to_torch(ours, theirs, (np.dtype(dtype).name, k))
            assert ours.device == 'cpu' and ours.requires_grad == theirs.requires_grad and ours.is_leaf, k
        assert tuple(x.new_empty(2, 3).shape) == tuple(p.new_empty(2, 3).shape) and x.new_empty(2).dtype == dtype
        assert not x.new_empty(4).numpy().any()
    raises(TypeError, lambda: tl.zeros(2, dtype=tl.int64).new_zeros(2, requires_grad=True), 'floating')
    raises(TypeError, lambda: tl.zeros(2).new_zeros(2, size=(2,)), 'size')


def test_creation_factories_as_pytorch():
    """tl.eye, linspace (PyTorch's values: exactly for integer dtypes, within a float32 rounding of its), empty and
    empty_like (zeros here), randint (both signatures, [low, high), int64 or dtype), randn_like and rand_like (the
    tensor's shape, dtype and device unless given); their argument errors as PyTorch's."""
    need_torch()
    for args, kw in [((3,), {}), ((2, 4), {}), ((4, 2), {'dtype': np.int64}), ((0,), {}), ((2,), {'dtype': np.bool_}),
                     ((3,), {'m': 1, 'dtype': np.float16})]:
        tkw = {k: torch_dtype(v) if k == 'dtype' else v for k, v in kw.items()}
        close_to_torch(tl.eye(*args, **kw), torch.eye(*args, **tkw), (args, kw))
    assert tl.eye(2, requires_grad=True).requires_grad
    for args, kw in [((0, 1, 5), {}), ((0, 1, 1), {}), ((0, 1, 0), {}), ((5, 1, 3), {}), ((-2.5, 7.25, 50), {}),
                     ((0.1, 0.7, 13), {'dtype': np.float64}), ((-1, 1, 9), {'dtype': np.float16}),
                     ((0, 10, 4), {'dtype': np.int64}), ((-3.7, 10.2, 7), {'dtype': np.int64}),
                     ((100, -7, 23), {'dtype': np.int32}), ((tl.tensor(0.5), tl.tensor(1.5), 3), {})]:
        tkw = {k: torch_dtype(v) for k, v in kw.items()}
        targs = tuple(torch.tensor(v.item()) if isinstance(v, tl.Tensor) else v for v in args)
        ours, theirs = tl.linspace(*args, **kw), torch.linspace(*targs, **tkw)
        dtype = np.dtype(kw.get('dtype', np.float32))
        tol = float(np.finfo(dtype).eps) * 16 if dtype.kind == 'f' else 0.0
        close_to_torch(ours, theirs, (args, kw), tol)
    assert tl.linspace(start=0, end=1, steps=3, requires_grad=True).requires_grad
    for m in (tl, torch):
        raises(Exception, lambda: m.linspace(0, 1, -1))
        raises(TypeError, lambda: m.linspace(0, 1, 2.0))
        raises(Exception, lambda: m.linspace(0, 1, 3, dtype=m.bool))
        raises(Exception, lambda: m.eye(-1))
        raises(Exception, lambda: m.eye(2, -1))
        raises(TypeError, lambda: m.eye(2.0))
    for made in (tl.empty(2, 3), tl.empty((2, 3), dtype=tl.int32), tl.empty(size=(2, 3)),
                 tl.empty_like(tl.ones(2, 3, dtype=tl.int32))):
        assert made.shape == (2, 3) and not made.numpy().any()
    assert tl.empty(2, dtype=tl.float16, requires_grad=True).requires_grad
    tl.manual_seed(5)
    for args, kw, low, high in [((10, (1000,)), {}, 0, 10), ((3, 10, (20, 50)), {}, 3, 10),
                                ((10,), {'size': (500,)}, 0, 10), ((), {'high': 4, 'size': [300]}, 0, 4),
                                ((), {'low': -5, 'high': 5, 'size': (400,)}, -5, 5),
                                ((0, 256, (2000,)), {'dtype': np.uint8}, 0, 256), ((0, 10, (100,)), {'dtype': np.float32}, 0, 10),
                                ((0, 2, (100,)), {'dtype': np.bool_}, 0, 2), ((-2**40, 2**40, (100,)), {}, -2**40, 2**40)]:
        ours = tl.randint(*args, **kw)
        theirs = torch.randint(*args, **{k: torch_dtype(v) if k == 'dtype' else v for k, v in kw.items()})
        assert ours.shape == tuple(theirs.shape) and same_dtype(ours, theirs), (args, kw)
        values = ours.numpy().astype(np.int64)
        assert values.min() >= low and values.max() < high and (values == np.round(values)).all(), (args, kw)
        if values.size >= 100:
            assert len(np.unique(values)) == min(high - low, values.size) or high - low > 100, (args, kw)
    assert tl.randint(0, 10, ()).shape == () and tl.randint(5, (0, 3)).shape == (0, 3)
    tl.manual_seed(7)
    first = tl.randint(1000, (50,)).numpy()
    tl.manual_seed(7)
    assert np.array_equal(first, tl.randint(1000, (50,)).numpy()), 'manual_seed does not reproduce randint'
    for bad in (lambda m: m.randint(10, 3), lambda m: m.randint(10), lambda m: m.randint(0.5, 10.7, (3,))):
        raises(TypeError, lambda: bad(tl))
        raises(TypeError, lambda: bad(torch))
    for bad in (lambda m: m.randint(5, 5, (3,)), lambda m: m.randint(5, 3, (3,)),
                lambda m: m.randint(0, 300, (3,), dtype=m.uint8), lambda m: m.randint(-1, 3, (3,), dtype=m.uint8),
                lambda m: m.randint(0, 10, (3,), requires_grad=True)):
        raises((ValueError, RuntimeError, TypeError), lambda: bad(tl))
        raises(RuntimeError, lambda: bad(torch))
    x = tl.zeros(3, 2, dtype=tl.float64)
    for like in (tl.randn_like, tl.rand_like, tl.empty_like):
        made = like(x)
        assert made.shape == (3, 2) and made.dtype == np.float64 and made.device == 'cpu' and not made.requires_grad
        made = like(x, dtype=tl.float16, requires_grad=True)
        assert made.dtype == np.float16 and made.requires_grad
    u = tl.rand_like(tl.zeros(20000)).numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    n = tl.randn_like(tl.zeros(20000)).numpy()
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1) < 0.03
    for like in ('randn_like', 'rand_like'):   # integer tensors: PyTorch raises NotImplementedError
        raises(TypeError, lambda: getattr(tl, like)(tl.zeros(2, dtype=tl.int64)), 'floating')
        raises(NotImplementedError, lambda: getattr(torch, like)(torch.zeros(2, dtype=torch.int64)))
        assert getattr(tl, like)(tl.zeros(2, dtype=tl.int64), dtype=tl.float64).dtype == np.float64


def test_gpu_factories_and_copies_on_cuda():
    """The factories and new_* make their tensors on the device asked for (new_* on the tensor's), randint's values in
    range there; type_as and copy_ move across devices (copy_'s gradient comes back), fill_ takes a 0-d tensor from
    the CPU; in-place methods on the GPU give the CPU's values."""
    need_cuda()
    made = [tl.eye(3, device='cuda'), tl.linspace(0, 1, 5, device='cuda'), tl.empty(2, device='cuda'),
            tl.randint(3, 9, (500,), device='cuda'), tl.randn_like(tl.zeros(2, device='cuda')),
            tl.rand_like(tl.zeros(2), device='cuda'), tl.empty_like(tl.zeros(2, device='cuda')),
            tl.zeros(2, device='cuda').new_ones(3), tl.zeros(2, device='cuda').new_tensor([1, 2]),
            tl.zeros(2).new_full((2,), 3.0, device='cuda'), tl.zeros(2, device='cuda', dtype=tl.float16).new_empty(2),
            tl.ones(2).type_as(tl.zeros(1, device='cuda', dtype=tl.float64))]
    for k, t in enumerate(made):
        assert t.device == 'cuda:0' and t.data.__class__.__module__.startswith('cupy'), (k, t.device)
    assert_close(made[0], np.eye(3), 0, 0)
    assert_close(made[1], np.linspace(0, 1, 5), 1e-7, 0)
    values = made[3].numpy()
    assert values.dtype == np.int64 and values.min() >= 3 and values.max() < 9 and len(np.unique(values)) == 6
    assert made[-1].dtype == np.float64 and made[-2].dtype == np.float16
    src = tl.tensor(np.arange(3.0), requires_grad=True)
    dst = tl.zeros(2, 3, device='cuda', dtype=tl.float16) * 1
    dst.copy_(src)
    (dst.float() * tl.tensor([[1.0], [2.0]], device='cuda')).sum().backward()
    assert dst.device == 'cuda:0' and dst.dtype == np.float16 and np.array_equal(dst.numpy(), np.tile(np.arange(3.0), (2, 1)))
    assert src.grad.device == 'cpu' and np.array_equal(src.grad.numpy(), [3.0, 3.0, 3.0])
    back = tl.zeros(3).copy_(tl.tensor([1.5, 2.5, 3.5], device='cuda'))
    assert back.device == 'cpu' and back.tolist() == [1.5, 2.5, 3.5]
    assert tl.zeros(2, device='cuda').fill_(tl.tensor(2.5)).tolist() == [2.5, 2.5]
    a, b = sample(rng('gpu inplace methods'), (2, 3)), sample(rng('gpu inplace methods'), (3,), 'pos')

    def chain(d):
        t = tl.tensor(a, device=d)
        return t.add_(tl.tensor(b, device=d), alpha=0.5).sub_(1.5, alpha=2).mul_(2).div_(tl.tensor(b, device=d)) \
            .clamp_(min=-1.0).clamp_(max=tl.tensor(b, device=d)).pow_(2)
    assert_close(chain('cuda').numpy(), chain('cpu').numpy(), 1e-12, 1e-12)


def _inplace_method_outcome(m, start, other, call):
    """call(t, other) on t, a tensor of `start` in framework m: t's values afterwards, or the exception's type (then
    t and its version must be as they were)."""
    t = m.tensor(start.copy())
    version = t._version if m is torch else t._version[0]
    try:
        assert call(t, other) is t
    except (TypeError, RuntimeError, ValueError, NotImplementedError) as e:
        assert np.array_equal(t.numpy(), start, equal_nan=True) and \
            (t._version if m is torch else t._version[0]) == version, 'a failed in-place method changed the tensor'
        return type(e)
    return t


INPLACE_METHODS = [('add_', lambda t, o: t.add_(o)), ('add_alpha2', lambda t, o: t.add_(o, alpha=2)),
                   ('add_alpha_half', lambda t, o: t.add_(o, alpha=0.5)), ('sub_', lambda t, o: t.sub_(o)),
                   ('sub_alpha3', lambda t, o: t.sub_(o, alpha=3)), ('mul_', lambda t, o: t.mul_(o)),
                   ('div_', lambda t, o: t.div_(o)), ('pow_', lambda t, o: t.pow_(o)),
                   ('clamp_min', lambda t, o: t.clamp_(min=o)), ('clamp_max', lambda t, o: t.clamp_(None, o)),
                   ('copy_', lambda t, o: t.copy_(o)), ('fill_', lambda t, o: t.fill_(o.flatten()[0] if hasattr(o, 'shape') else o))]


def test_float16_add_sub_alpha_round_as_pytorch():
    """float16 add_/sub_ with alpha, as PyTorch's: alpha and the other operand rounded to float16, a + alpha * b in
    float32 rounded once. Random operands and inexact alphas (a tensor, integers, a number, 0-d float16 and float32
    tensors): within one float16 step of PyTorch's everywhere, equal in all but 0.2% of elements (a CPU's fused
    multiply-add rounds otherwise at times); before, alpha stayed float32 and 15-40% differed. 4096 elements:
    PyTorch's CPU kernels compute those past the last whole vector in float16 (as in test_optim_float16_as_pytorch)."""
    need_torch()
    r = rng('float16 alpha')
    a0, b0 = ((r.standard_normal(4096) * 3).astype(np.float16) for _ in range(2))   # (whole vectors: see below)
    others = {'float16': lambda m: m.tensor(b0), 'int32': lambda m: m.tensor((b0 * 10).astype(np.int32)),
              'number': lambda m: 1.7, '0-d float16': lambda m: m.tensor(np.float16(1.7)),
              '0-d float32': lambda m: m.tensor(np.float32(1.7))}
    for alpha in (0.3, 1 / 3, -2.7, 3):
        for name in ('add_', 'sub_'):
            for kind, other in others.items():
                if kind == 'int32' and not float(alpha).is_integer():
                    continue
                ours, theirs = tl.tensor(a0.copy()), torch.tensor(a0.copy())
                getattr(ours, name)(other(tl), alpha=alpha)
                getattr(theirs, name)(other(torch), alpha=alpha)
                ulps = float16_ulps(ours.numpy(), theirs.numpy())
                assert ours.dtype == np.float16 and ulps.max() <= 1 and (ulps > 0).mean() <= 2e-3, \
                    (alpha, name, kind, (ulps > 0).sum())


def test_inplace_methods_values_as_pytorch():
    """add_/sub_ (alpha), mul_, div_, pow_, clamp_, copy_, fill_ on float16/32/64, int32/64 and bool tensors with
    tensors of each dtype and Python numbers: PyTorch's values in the tensor's dtype (float16 rounded once), or an
    error where PyTorch raises (a result type of a higher kind, a float alpha for integers, a bool alpha for floats,
    bool subtraction, integer division), leaving the tensor and its version as they were."""
    need_torch()
    r = rng('inplace methods')
    start0, other0 = np.round(r.uniform(-4, 4, 6) * 8) / 8, np.round(r.uniform(0.5, 4, 6) * 8) / 8
    dtypes = (np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_)
    for dtype in dtypes:
        start = start0.astype(dtype)
        for name, call in INPLACE_METHODS:
            for k, make in enumerate([lambda m, d=d: m.tensor(other0.astype(d)) for d in dtypes] +
                                     [lambda m: 3, lambda m: 1.5, lambda m: True]):
                if dtype == np.bool_ and name.startswith('clamp') and k == len(dtypes) + 2:
                    continue   # PyTorch's clamp of bools by a bool number is not implemented (by bool tensors it is)
                if name == 'fill_' and k < len(dtypes):   # fill_ takes a 0-d tensor
                    make = lambda m, d=dtypes[k]: m.tensor(other0[0].astype(d))
                with np.errstate(invalid='ignore'):   # (negative numbers to fractional powers: NaN)
                    ours, theirs = [_inplace_method_outcome(m, start, make(m), call) for m in (tl, torch)]
                what = (np.dtype(dtype).name, name, k)
                if isinstance(theirs, type):
                    assert isinstance(ours, type), f'{what}: PyTorch raised {theirs.__name__}, ours gave {ours}'
                else:
                    assert not isinstance(ours, type), f'{what}: ours raised {ours.__name__}, PyTorch gave {theirs}'
                    close_to_torch(ours, theirs, what, {np.float16: 1e-3, np.float32: 1e-6}.get(dtype, 1e-12))
    t = tl.tensor([1.0, 2.0])
    raises(TypeError, lambda: t.add_(1.0, 2), 'positional')   # alpha is keyword-only, as PyTorch's
    raises(TypeError, lambda: t.add_(1.0, alpha=tl.tensor(2.0)), 'number')
    raises(ValueError, lambda: t.clamp_(), 'min')
    raises(TypeError, lambda: t.copy_([1.0, 2.0]), 'Tensor')   # (a number it takes, as PyTorch's)
    raises(ValueError, lambda: t.copy_(tl.ones(2, 2)), '(2,)', '(2, 2)')
    raises(ValueError, lambda: t.copy_(tl.ones(1, 2)), '(2,)', '(1, 2)')   # as PyTorch's: no leading size-1 axis dropped
    raises(ValueError, lambda: t.clamp_(tl.zeros(3, 2), tl.ones(3, 2)), '(2,)', '(3, 2)')
    raises(ValueError, lambda: t.fill_(tl.ones(1)), '(1,)')
    raises(RuntimeError, lambda: tl.zeros(2, dtype=tl.uint8).fill_(300), '300', 'uint8')
    raises(RuntimeError, lambda: tl.zeros(2, dtype=tl.int64).fill_(math.nan), 'int64')
    assert t.tolist() == [1.0, 2.0]
    u = tl.zeros(2, dtype=tl.int64)
    u.copy_(tl.tensor([math.nan, 2.7]))   # as PyTorch: no error, no warning (the NaN's integer is undefined)
    assert u.tolist()[1] == 2
    base = tl.zeros(1, 3)
    wide = base.expand(2, 3)
    wide.fill_(1.25)   # as PyTorch's fill_ (and zero_): elements sharing memory take one value
    assert base.tolist() == [[1.25] * 3]
    for write in (lambda w: w.copy_(tl.ones(2, 3)), lambda w: w.clamp_(0, 1), lambda w: w.add_(1.0), lambda w: w.mul_(2)):
        raises(RuntimeError, lambda: write(wide), 'single memory location')
    assert base.tolist() == [[1.25] * 3]
    x = tl.tensor(np.arange(6.0).reshape(2, 3))
    assert x.copy_(x).tolist() == np.arange(6.0).reshape(2, 3).tolist() and x._version[0] == 1


def _recorded_methods(m, x, y, b):
    """The in-place methods recorded on non-leaves: arithmetic with alpha, clamp_ with numbers and a tensor bound,
    copy_ and fill_ (their gradients: to the source, none to the overwritten history)."""
    h = x * 2
    h.add_(y, alpha=0.5).sub_(b, alpha=2)
    h.mul_(y).div_(x + 3).pow_(2)
    h.clamp_(0.01, 1.2).clamp_(min=b * 0.2)
    g = x * 1
    g.copy_(y * b)
    k = x * 1
    k.fill_(b[0] * 2)
    c = y.sum() * 1
    c.fill_(4.0)
    return [(h * h).sum() + (g * x).sum() + (k * y).sum() + c]


def test_inplace_methods_recorded_as_pytorch():
    """In grad mode, in-place methods on non-leaves are recorded as PyTorch records them (the same gradients), on a
    tensor that required none too (a buffer taking a parameter's values); on a leaf that requires grad they raise as
    PyTorch's, changing nothing; a backward that saved a tensor they changed raises as PyTorch's."""
    need_torch()
    x0, y0, b0 = _inplace_inputs('inplace methods recorded')
    assert_same_outcome('chain', outcome(tl, lambda m: _backward_of(_recorded_methods, m, x0, y0, b0)),
                        outcome(torch, lambda m: _backward_of(_recorded_methods, m, x0, y0, b0)), 1e-12, ())

    def buffer(m, x, y, b):
        acc = m.zeros(2, 3, dtype=m.float64)
        acc.copy_(x)
        acc.mul_(b).add_(y, alpha=-0.5)
        return [(acc * acc).sum()]
    assert_same_outcome('buffer', outcome(tl, lambda m: _backward_of(buffer, m, x0, y0, b0)),
                        outcome(torch, lambda m: _backward_of(buffer, m, x0, y0, b0)), 1e-12, ())
    for name, call in INPLACE_METHODS:
        for m in (tl, torch):
            w = m.tensor(x0, requires_grad=True)
            raises(RuntimeError, lambda: call(w, m.tensor(y0)), *(('leaf', 'in-place') if m is tl else ('leaf',)))
            assert np.array_equal(w.detach().numpy(), x0) and w.is_leaf and w.grad is None, (name, m.__name__)
    changes = {name: (lambda m, w, x, y, call=call: call(x, m.tensor(y0[0]))) for name, call in INPLACE_METHODS}
    changes['fill_'] = lambda m, w, x, y: x.fill_(2.0)
    for name, change in changes.items():
        for build in (lambda m, w, x: w * x, lambda m, w, x: w + x):   # a product saves x, a sum nothing
            assert_same_outcome(name, check_version_case(build, change, tl), check_version_case(build, change, torch),
                                1e-12, ('modified by an in-place operation', 'expected version'))


def test_inplace_methods_update_parameters_under_no_grad_as_pytorch():
    """The parameter updates of training code (an EMA of weights, copies, clamps) under no_grad on Parameters: torch's
    values, nothing recorded, the parameters still leaves requiring grad, each update advancing the version counter as
    PyTorch's does (a backward that saved the parameter then raises)."""
    need_torch()
    r = rng('ema')
    p0, q0 = r.standard_normal((3, 4)), r.standard_normal((3, 4))
    results = []
    for m, nn in ((tl, tl), (torch, torch.nn)):
        p, ema, q = nn.Parameter(m.tensor(p0.copy())), nn.Parameter(m.tensor(p0 * 0)), m.tensor(q0)
        y = (p * p).sum()
        version = lambda t: t._version if m is torch else t._version[0]
        versions = [version(p)]
        with m.no_grad():
            ema.copy_(p)
            for _ in range(3):
                assert ema.mul_(0.99).add_(p, alpha=0.01) is ema
                p.add_(q, alpha=-0.1)
                versions.append(version(p))
            p.clamp_(-1, 1)
            p.sub_(q * 0.1).div_(2).mul_(1.5)
            versions.append(version(p))
        assert p.is_leaf and p.requires_grad and p.grad is None and ema.is_leaf and ema.requires_grad
        raises(RuntimeError, y.backward, 'modified by an in')
        results.append((p.detach().numpy().copy(), ema.detach().numpy().copy(), versions, version(ema)))
    (p_ours, ema_ours, v_ours, e_ours), (p_theirs, ema_theirs, v_theirs, e_theirs) = results
    assert_close(p_ours, p_theirs, 1e-12, 1e-12, 'parameter')
    assert_close(ema_ours, ema_theirs, 1e-12, 1e-12, 'ema')
    assert v_ours == v_theirs and e_ours == e_theirs, (v_ours, v_theirs, e_ours, e_theirs)
    for m, nn in ((tl, tl), (torch, torch.nn)):   # copy_ and fill_ on a parameter (a load, a reset), versions too
        p = nn.Parameter(m.tensor(p0.copy()))
        with m.no_grad():
            p.copy_(m.tensor(q0[0]))
            p.fill_(0.5)
        assert np.array_equal(p.detach().numpy(), np.full((3, 4), 0.5)) and p.is_leaf and p.requires_grad
        assert (p._version if m is torch else p._version[0]) == 2


def test_detach__as_pytorch():
    """detach_() makes a tensor a leaf that requires no gradient and returns it, as PyTorch's: a non-leaf after its
    backward, a leaf (which then gets no gradient); refused (a clear error, nothing changed) on a non-leaf that a
    recorded op still reaches the history through, where PyTorch keeps that op's path."""
    need_torch()
    a = sample(rng('detach_'), (3,))
    for m in (tl, torch):
        x = m.tensor(a, requires_grad=True)
        h = x * 2
        (h * 3).sum().backward()
        assert h.detach_() is h and not h.requires_grad and h.is_leaf
        w = m.tensor(a, requires_grad=True)
        y = (w * 2).sum()
        assert w.detach_() is w and not w.requires_grad and w.is_leaf
        y.backward()
        assert w.grad is None, m.__name__
    x = tl.tensor(a, requires_grad=True)
    h = x * 2
    y = (h * 3).sum()
    raises(RuntimeError, h.detach_, 'recorded op', '.detach()')
    assert h.requires_grad and not h.is_leaf
    y.backward()
    assert np.array_equal(x.grad.numpy(), np.full(3, 6.0))
    assert h.detach_() is h and h.is_leaf


def test_error_window_sizes_name_the_argument():
    """conv2d's stride and padding and the pools' kernel_size and stride: ints or pairs, strides and windows at
    least 1, padding at least 0; otherwise a ValueError naming the function and the argument (a ZeroDivisionError
    or a NumPy broadcast error before; the pools' said MaxPool or AvgPool)."""
    r = rng('window sizes')
    x, w = tl.tensor(sample(r, (2, 3, 6, 6))), tl.tensor(sample(r, (4, 3, 3, 3)))
    for kwargs, needle in (({'stride': 0}, 'stride'), ({'stride': (2, 2, 2)}, 'stride'), ({'padding': -1}, 'padding'),
                           ({'padding': (1, 1, 1)}, 'padding')):
        raises(ValueError, lambda: tl.conv2d(x, w, **kwargs), 'conv2d', needle, str(list(kwargs.values())[0]))
    assert tl.conv2d(x, w, padding=0).shape == (2, 4, 4, 4)
    # one int in a sequence stands for both, as PyTorch's; a pool's stride () or [] is its default (the window)
    assert tl.conv2d(x, w, stride=(2,), padding=[1]).shape == tl.conv2d(x, w, stride=2, padding=1).shape == (2, 4, 3, 3)
    assert tl.max_pool2d(x, [2]).shape == tl.avg_pool2d(x, 2, stride=()).shape == (2, 3, 3, 3)
    assert tl.max_pool2d(x, 2, stride=[]).shape == tl.avg_pool2d(x, (2, 2), stride=[]).shape == (2, 3, 3, 3)
    for fn in ('max_pool2d', 'avg_pool2d'):   # each message names the function (some said MaxPool or AvgPool)
        pool = getattr(tl, fn)
        raises(ValueError, lambda: pool(x, 0), fn, 'kernel_size')
        raises(ValueError, lambda: pool(x, 2, 0), fn, 'stride')
        raises(ValueError, lambda: pool(x, (2, 2, 2)), fn, 'kernel_size')
        raises(ValueError, lambda: pool(x, 7), fn, 'smaller than kernel')
        raises(ValueError, lambda: pool(x[0, 0], 2), fn, '(6, 6)')


def test_error_conv_padding_strings():
    """conv2d's padding 'valid' and 'same' (see the conv_same_* ops); any other string, or 'same' with a stride
    other than 1, raises ValueError naming the padding (and the stride), where PyTorch refuses too (Conv2d as it is
    built); nothing is recorded. A window larger than the padded input names the padded size ('same' pads an even window's extra row
    at the bottom first)."""
    need_torch()
    r = rng('conv padding strings')
    a, wa = sample(r, (1, 2, 5, 5)), sample(r, (3, 2, 2, 3))
    x, w, xt, wt = tl.tensor(a, requires_grad=True), tl.tensor(wa), torch.tensor(a), torch.tensor(wa)
    for padding, stride, needles in (('same', 2, ("'same'", 'stride', '(2, 2)')), ('same', (1, 2), ('(1, 2)',)),
                                     ('foo', 1, ("'foo'", 'valid', 'same')), ('SAME', 1, ("'SAME'",)), ('', 1, ("''",))):
        raises(ValueError, lambda: tl.conv2d(x, w, stride=stride, padding=padding), 'conv2d', 'padding', *needles)
        raises((RuntimeError, ValueError), lambda: F.conv2d(xt, wt, stride=stride, padding=padding))
        raises(ValueError, lambda: tl.Conv2d(2, 3, 2, stride=stride, padding=padding), 'conv2d', *needles)   # built
        raises((RuntimeError, ValueError), lambda: torch.nn.Conv2d(2, 3, 2, stride=stride, padding=padding))
    assert x.grad is None
    short = tl.zeros(1, 2, 0, 5)
    raises(ValueError, lambda: tl.conv2d(short, tl.zeros(3, 2, 2, 2), padding='same'), 'larger', '(1, 6)')
    raises(ValueError, lambda: tl.conv2d(short, tl.zeros(3, 2, 3, 3), padding=(1, 0)), 'larger', '(2, 5)')
    raises(RuntimeError, lambda: F.conv2d(torch.zeros(1, 2, 0, 5), torch.zeros(3, 2, 2, 2), padding='same'), '1 x 6')


def test_error_window_sizes_not_ints():
    """A float or bool stride, padding or kernel_size (alone or in a pair) raises a TypeError naming the function, the
    argument and the value, as PyTorch's TypeError (a float stride gave "'float' object is not iterable", a float in
    a pair was rounded down); a negative stride, as zero, raises ValueError (PyTorch: RuntimeError). NumPy integers
    and lists count as ints and pairs."""
    need_torch()
    r = rng('window types')
    a, wa = sample(r, (2, 3, 6, 6)), sample(r, (4, 3, 3, 3))
    x, w, xt, wt = tl.tensor(a), tl.tensor(wa), torch.tensor(a), torch.tensor(wa)
    for name, value in (('stride', 1.5), ('stride', (1, 1.5)), ('padding', 1.0), ('padding', (0.5, 1)),
                        ('stride', True), ('padding', (1, False))):
        raises(TypeError, lambda: tl.conv2d(x, w, **{name: value}), 'conv2d', name, repr(value))
        if value != (1, False):   # PyTorch takes a bool in a pair as an int (a bool alone it refuses)
            raises(TypeError, lambda: F.conv2d(xt, wt, **{name: value}))
    for fn in ('max_pool2d', 'avg_pool2d'):
        for args, name in (((1.5,), 'kernel_size'), (((2, 2.0),), 'kernel_size'), ((2, 1.5), 'stride')):
            raises(TypeError, lambda: getattr(tl, fn)(x, *args), fn, name, repr(args[-1]))
            raises(TypeError, lambda: getattr(F, fn)(xt, *args))
    raises(TypeError, lambda: tl.Conv2d(3, 4, 2.5), 'kernel_size', '2.5')
    for name, value in (('stride', -1), ('stride', (1, -2)), ('padding', (0, -1))):
        raises(ValueError, lambda: tl.conv2d(x, w, **{name: value}), 'conv2d', name, str(value))
        raises(RuntimeError, lambda: F.conv2d(xt, wt, **{name: value}))
    for args in ((2, np.int64(1)), ([2, 3], [np.int32(1), 2])):
        assert_close(tl.max_pool2d(x, *args), F.max_pool2d(xt, *map(tuple, map(np.atleast_1d, args))), 0, 0, args)


def test_grad_mode_is_per_thread():
    """As PyTorch's, no_grad holds in the thread that entered it: another thread records meanwhile, and two
    threads' no_grad blocks overlapping (entered 1, 2, left 1, 2) leave recording on (a shared flag ended off)."""
    import threading
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    entered, main_entered, left, seen = threading.Event(), threading.Event(), threading.Event(), {}

    def quiet():
        with tl.no_grad():
            seen['quiet'] = (x * 2).requires_grad
            entered.set()
            main_entered.wait(10)
        left.set()
    thread = threading.Thread(target=quiet)
    thread.start()
    entered.wait(10)
    seen['other'] = (x * 2).requires_grad
    with tl.no_grad():
        main_entered.set()
        left.wait(10)
    thread.join(10)
    assert seen == {'quiet': False, 'other': True}, seen
    assert (x * 2).requires_grad, 'recording left off'
    r_in, q_in, r_out, modes = threading.Event(), threading.Event(), threading.Event(), {}

    @tl.no_grad
    def quiet_call(inside, wait_for):   # one decorated function, entered by two threads whose modes differ outside it
        inside.set()
        wait_for.wait(10)

    def recording_thread():   # records outside the call; enters it first and leaves it first
        quiet_call(r_in, q_in)
        modes['recording'] = (x * 2).requires_grad
        r_out.set()

    def quiet_thread():   # calls it inside its own no_grad, entering second and leaving last
        r_in.wait(10)
        with tl.no_grad():
            quiet_call(q_in, r_out)
            modes['quiet'] = (x * 2).requires_grad
    threads = [threading.Thread(target=recording_thread), threading.Thread(target=quiet_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert modes == {'recording': True, 'quiet': False}, modes


def test_module_lists_shared_buffers_once_and_groups_take_one_tensor():
    """A submodule registered twice lists its buffers once (as its parameters, and as PyTorch); an optimizer's
    parameter group may name one tensor as its 'params' (PyTorch accepts it)."""
    need_torch()
    bn, bn_t = tl.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    ours, theirs = tl.Sequential(bn, bn), torch.nn.Sequential(bn_t, bn_t)
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert len(list(ours.buffers())) == len(list(theirs.buffers())) == 3
    p = tl.Parameter(tl.tensor(sample(rng('one tensor group'), (2,))))
    opt = tl.SGD([{'params': p}], lr=0.1)
    assert opt.param_groups[0]['params'] == [p]
    torch.optim.SGD([{'params': torch.nn.Parameter(torch.ones(2))}], lr=0.1)


def test_clamp_tensor_bounds_as_pytorch():
    """clamp with tensor bounds (each alone or both) that broadcast to x's shape, with ties, a low above its
    high, NaNs in x and in the bounds, an integer x with a float bound: PyTorch's values, dtypes and gradients of x
    and of each bound (float64). Bounds of an unbroadcastable shape, a number with a tensor, or an integer bound out
    of an integer tensor's range, raise."""
    need_torch()
    r = rng('clamp_tensors')
    x = np.round(r.uniform(-2, 2, (4, 5)) * 2) / 2   # halves: ties with the bounds below
    low, high = np.round(r.uniform(-2, 1, (5,)) * 2) / 2, np.round(r.uniform(-1, 2, (4, 1)) * 2) / 2
    x[0, 0], low[1], high[2, 0] = np.nan, np.nan, np.nan
    cases = [dict(min=low), dict(max=high), dict(min=low, max=high), dict(min=low[None, :], max=high[0])]
    g = r.standard_normal((4, 5))
    for kwargs in cases:
        ours_in = {k: tl.tensor(v, requires_grad=True) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        theirs_in = {k: torch.tensor(v, requires_grad=True) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        xo, xt = tl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        yo, yt = xo.clamp(**ours_in), torch.clamp(xt, **theirs_in)
        what = {k: getattr(v, 'shape', v) for k, v in kwargs.items()}
        assert yo.shape == tuple(yt.shape) and same_dtype(yo, yt), (what, yo.shape, yo.dtype)
        assert np.array_equal(yo.numpy(), yt.detach().numpy(), equal_nan=True), f'clamp {what}'
        yo.backward(tl.tensor(g))
        yt.backward(torch.tensor(g))
        for name, o, t in [('x', xo, xt)] + [(k, ours_in[k], theirs_in[k]) for k in kwargs if isinstance(kwargs[k], np.ndarray)]:
            assert_close(o.grad, t.grad.numpy(), 1e-12, 1e-12, f'clamp {what}: gradient of {name}')   # sums' order
    ints = tl.tensor(np.array([0, 1, 2, 5]))
    got, want = ints.clamp(min=tl.tensor(np.array([0.5, 0.5, 3.0, 1.0], np.float32))), torch.tensor([0, 1, 2, 5]).clamp(
        min=torch.tensor([0.5, 0.5, 3.0, 1.0]))
    assert same_dtype(got, want) and np.array_equal(got.numpy(), want.numpy()), (got.dtype, got.numpy())
    for x0 in (np.array([True, False]), np.array([1, 4], np.int32)):   # the bounds' dtypes ranked with x's at once
        for low, high in ((np.array([0.5], np.float32), np.array(2.0)), (np.array(0.5), np.array([2.0], np.float32))):
            got, want = (m.tensor(x0).clamp(m.tensor(low), m.tensor(high)) for m in (tl, torch))
            assert same_dtype(got, want) and np.array_equal(got.numpy(), want.numpy()), (x0.dtype, low, got.dtype)
    raises(ValueError, lambda: tl.ones(3).clamp(min=tl.zeros(2)), 'clamp', '(3,)', '(2,)')
    raises(TypeError, lambda: torch.ones(3).clamp(min=0.5, max=torch.ones(3)))   # as PyTorch: numbers or tensors
    raises(TypeError, lambda: tl.ones(3).clamp(min=0.5, max=tl.ones(3)), 'clamp', 'both')
    for dtype, kwargs in ((np.int8, dict(min=-200)), (np.uint8, dict(max=300))):   # not wrapped into range
        raises(RuntimeError, lambda: torch.tensor(np.array([1, 2], dtype)).clamp(**kwargs), 'overflow')
        raises(RuntimeError, lambda: tl.tensor(np.array([1, 2], dtype)).clamp(**kwargs), 'clamp', 'overflow')


def test_clamp_and_nan_extrema_as_pytorch():
    """An integer tensor clamped by a float bound gives float32 (its bounds were truncated); max and min with a NaN
    give the NaN's position the gradient, as PyTorch's max() and min() (NaN == NaN is False: every gradient was
    NaN)."""
    need_torch()
    ints = np.array([0, 1, 2, 5])
    for kwargs in ({'max': 1.5}, {'min': 0.5, 'max': 4}, {'max': 1}):
        got, want = tl.tensor(ints).clamp(**kwargs), torch.tensor(ints).clamp(**kwargs)
        assert same_dtype(got, want), (kwargs, got.dtype, want.dtype)
        assert_close(got, want.numpy(), 0, 0, f'clamp {kwargs}')
    x = np.array([[1.0, np.nan, 3.0], [4.0, -2.0, 0.5]])
    for name in ('max', 'min'):
        for axis in (None, 1):
            ours, theirs = tl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
            getattr(ours, name)(axis=axis).sum().backward()
            (getattr(theirs, name)() if axis is None else getattr(theirs, name)(dim=axis).values).sum().backward()
            assert_close(ours.grad, theirs.grad.numpy(), 0, 0, f'{name}(axis={axis}) gradient with a NaN')


def test_error_argument_checks_name_what_was_wrong():
    """Calls PyTorch refuses get a clear error from tinygrad_lite too, not a NumPy one or a wrong answer: shapes that
    do not broadcast in a comparison, an axis named twice, argmax of nothing or past the last axis, a reshape to a
    negative size other than -1, linear of a 0-d input, batch_norm of a 1-d one, a GRU of no layers."""
    r = rng('argument checks')
    x = tl.tensor(sample(r, (2, 3)))
    assert_names_shapes(raises(ValueError, lambda: x < tl.tensor(sample(r, (4,)))), (2, 3), (4,))
    raises(ValueError, lambda: x.sum((0, 0)), 'more than once')
    raises(ValueError, lambda: tl.tensor(np.zeros(0)).argmax(), 'empty')
    raises(IndexError, lambda: x.argmax(5), 'out of range')
    assert int(x.argmax(-1).numpy()[0]) == int(np.argmax(x.numpy()[0]))
    raises(ValueError, lambda: tl.tensor(sample(r, (12,))).reshape(-2, -6), 'reshape')
    raises(ValueError, lambda: tl.linear(tl.tensor(1.0), tl.tensor(sample(r, (2, 1)))), 'linear')
    raises(ValueError, lambda: tl.batch_norm(tl.ones(3), None, None, training=True), 'batch_norm', '(3,)')
    raises(ValueError, lambda: tl.GRU(2, 3, 0), 'num_layers')


def test_modules_and_optimizers_as_pytorch():
    """Sequential[a:b] is a Sequential; load_state_dict returns the keys it left out (strict=False); Linear(0, n)
    builds (zero bias, as PyTorch's); zero_grad(set_to_none=False) zeroes the gradients in place; step(closure)
    evaluates the loss with gradients recorded (enable_grad, even inside no_grad) and returns it."""
    need_torch()
    seq = tl.Sequential(tl.Linear(2, 3), tl.ReLU(), tl.Linear(3, 1))
    part = seq[0:2]
    assert isinstance(part, tl.Sequential) and len(part) == 2 and part[0] is seq[0]
    theirs_all = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    assert list(seq[1:].state_dict()) == list(theirs_all[1:].state_dict()) == ['2.weight', '2.bias'], 'names kept'
    keys = seq.load_state_dict({'0.weight': seq[0].weight.numpy(), 'extra': np.zeros(1)}, strict=False)
    assert keys.missing_keys == ['0.bias', '2.weight', '2.bias'] and keys.unexpected_keys == ['extra'], keys
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    want = theirs.load_state_dict({'0.weight': theirs[0].weight.detach(), 'extra': torch.zeros(1)}, strict=False)
    assert (keys.missing_keys, keys.unexpected_keys) == (want.missing_keys, want.unexpected_keys)
    empty = tl.Linear(0, 2)
    assert empty.weight.shape == (2, 0) and np.array_equal(empty.bias.numpy(), np.zeros(2, np.float32))
    w = tl.Parameter(tl.tensor(sample(rng('closure'), (3,))))
    opt = tl.SGD([w], lr=0.1)
    (w * w).sum().backward()
    grad = w.grad
    opt.zero_grad(set_to_none=False)
    assert w.grad is grad and not w.grad.numpy().any(), 'zero_grad(set_to_none=False) zeroes in place'
    seq(tl.tensor(sample(rng('module zero_grad'), (4, 2)).astype(np.float32))).sum().backward()
    grads = [p.grad for p in seq.parameters()]
    seq.zero_grad(set_to_none=False)
    assert all(p.grad is g and not g.numpy().any() for p, g in zip(seq.parameters(), grads))
    seq.zero_grad()
    assert all(p.grad is None for p in seq.parameters())
    start = w.numpy().copy()

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss
    with tl.no_grad():
        loss = opt.step(closure)
    assert_close(loss, (start * start).sum(), 1e-6, 1e-6, 'the closure loss')
    assert_close(w, start - 0.1 * 2 * start, 1e-6, 1e-6, 'the step after the closure')


def test_cross_entropy_shapes_as_pytorch():
    """cross_entropy takes PyTorch's shapes: logits (C,) with a 0-d target, (N, C) with (N,), (N, C, d1, ...) with
    (N, d1, ...) (classes on axis 1); values and gradients against PyTorch in float64, each reduction, with and
    without label smoothing (only (N, C) was taken before)."""
    need_torch()
    r = rng('cross entropy shapes')
    for shape in ((5,), (4, 5), (3, 5, 6), (2, 5, 3, 4)):
        x = sample(r, shape)
        t = r.integers(0, 5, () if len(shape) == 1 else shape[:1] + shape[2:])
        for reduction in ('mean', 'sum', 'none'):
            for smoothing in (0.0, 0.2):
                ours, theirs = tl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
                got = tl.cross_entropy(ours, tl.tensor(t), smoothing, reduction)
                want = F.cross_entropy(theirs, torch.tensor(t), label_smoothing=smoothing, reduction=reduction)
                what = f'cross_entropy {shape} {reduction} smoothing {smoothing}'
                assert_close(got, want.detach().numpy(), 1e-10, 1e-12, what)
                got.sum().backward()
                want.sum().backward()
                assert_close(ours.grad, theirs.grad.numpy(), 1e-10, 1e-12, what + ' gradient')
    raises(ValueError, lambda: tl.cross_entropy(tl.tensor(sample(r, (3, 5, 6))), tl.tensor(np.zeros((3, 5), np.int64))),
           '(3, 6)', '(3, 5)')
    x = sample(r, (5,))   # a (C,) input also takes a (1,) target, as a 0-d one (PyTorch's)
    for reduction in ('mean', 'none'):
        for ours_fn, theirs_fn in ((tl.cross_entropy, F.cross_entropy), (tl.nll_loss, F.nll_loss)):
            got = ours_fn(tl.tensor(x), tl.tensor(np.array([3])), reduction=reduction)
            want = theirs_fn(torch.tensor(x), torch.tensor(np.array([3])), reduction=reduction)
            assert got.shape == tuple(want.shape) == () and abs(got.item() - want.item()) < 1e-12, reduction
    for shape in ((3, 5), (3, 5, 2)):   # but a batched input refuses a (1,) target, as PyTorch's
        for ours_fn, theirs_fn in ((tl.cross_entropy, F.cross_entropy), (tl.nll_loss, F.nll_loss)):
            raises(ValueError, lambda: theirs_fn(torch.tensor(sample(r, shape)), torch.tensor(np.array([1]))))
            raises(ValueError, lambda: ours_fn(tl.tensor(sample(r, shape)), tl.tensor(np.array([1]))), '(1,)')


def test_cross_entropy_ignore_index_as_pytorch():
    """Targets equal to ignore_index (PyTorch's default -100, or a class) lose 0, get zero gradients and leave the
    mean to the other rows; with every row ignored the mean is NaN and the gradients zero. Values and gradients
    against PyTorch in float64, each reduction, with and without label smoothing; a target outside [0, C) that is
    not ignore_index still raises, and ignore_index must be an int."""
    need_torch()
    r = rng('cross entropy ignore_index')
    for shape, ignore in (((6, 5), -100), ((3, 5, 4), -100), ((6, 5), 2), ((4, 5), 'all')):
        x = sample(r, shape)
        t = r.integers(0, 5, shape[:1] + shape[2:])
        index = -100 if ignore == 'all' else ignore
        if ignore == 'all':
            t[...] = index
        else:
            t.reshape(-1)[::3] = index
        for reduction in ('mean', 'sum', 'none'):
            for smoothing in (0.0, 0.2):
                what = f'cross_entropy {shape} ignore {ignore} {reduction} smoothing {smoothing}'
                ours, theirs = tl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
                kw = {} if index == -100 else {'ignore_index': index}
                got = tl.cross_entropy(ours, tl.tensor(t), smoothing, reduction, **kw)
                want = F.cross_entropy(theirs, torch.tensor(t), label_smoothing=smoothing, reduction=reduction, **kw)
                assert_matches(got.numpy(), want.detach().numpy(), 1e-12, what)
                got.sum().backward()
                want.sum().backward()
                assert_close(ours.grad, theirs.grad.numpy(), 1e-10, 1e-12, what + ' gradient')
    x, t = sample(r, (4, 5)), np.array([0, -100, 3, -100])
    x[1, 2], x[3, 0] = np.nan, np.inf   # ignored rows: PyTorch's NaN gradients there (0 * NaN), as the fused kernel's
    for reduction in ('mean', 'sum', 'none'):
        ours, theirs = tl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        with np.errstate(invalid='ignore'):   # NumPy warns of the inf - inf that makes the NaN
            tl.cross_entropy(ours, tl.tensor(t), 0.1, reduction).sum().backward()
        F.cross_entropy(theirs, torch.tensor(t), label_smoothing=0.1, reduction=reduction).sum().backward()
        assert_matches(ours.grad.numpy(), theirs.grad.numpy(), 1e-12, f'non-finite ignored rows, {reduction}')
    x = sample(r, (3, 4))
    raises(TypeError, lambda: tl.cross_entropy(tl.tensor(x), tl.tensor([0, 1, 2]), ignore_index=True), 'ignore_index')
    raises(ValueError, lambda: tl.cross_entropy(tl.tensor(x), tl.tensor([0, -1, 2])), 'targets must lie in [0, 4)', '-100')
    raises(ValueError, lambda: tl.cross_entropy(tl.tensor(x), tl.tensor([0, -100, 2]), ignore_index=1), '[0, 4)')
    raises(TypeError, lambda: tl.cross_entropy(tl.tensor(x), tl.tensor([0, 1, 2]), ignore_index=1.5), 'ignore_index')


def loss_against_torch(what, f, arrays, tol=1e-12):
    """f(m, *tensors) with m tl and torch: values and the gradients of every float input, float64."""
    compare_runs(run_op(tl, f, arrays), run_op(TH, f, arrays), tol, tol, what)


def test_loss_functions_as_pytorch():
    """nll_loss, cross_entropy with weights, binary_cross_entropy(_with_logits), l1, smooth_l1, huber and kl_div
    against PyTorch in float64: values and the gradients of input and target (where PyTorch differentiates it), each
    reduction, with and without weights, ignore_index, label smoothing, pos_weight, beta, delta, log_target, class
    dims."""
    need_torch()
    r = rng('loss functions')
    x, t, t_ignoring_2 = sample(r, (2, 5, 3)), np.array([[0, 4, -100], [2, 2, 1]]), np.array([[0, 4, 2], [2, 3, 1]])
    x1, w5, w4, pw4 = sample(r, (5,)), r.uniform(0.5, 2.0, 5), r.uniform(0.5, 2.0, 4), r.uniform(0.5, 3.0, 4)
    p, q, logits = r.uniform(0.02, 0.98, (3, 4)), r.uniform(0.02, 0.98, (3, 4)), 4 * sample(r, (3, 4))
    for red in ('mean', 'sum', 'none'):
        for w in (None, w5):
            kw = lambda m, a, w=w: {} if w is None else {'weight': const(m, w, a)}
            what = f'{red}, weight {w is not None}'
            loss_against_torch('nll_loss ' + what, lambda m, a: m.nll_loss(a, const(m, t, a), reduction=red,
                                                                        **kw(m, a)), [x])
            loss_against_torch('nll_loss ignore_index 2 ' + what, lambda m, a: m.nll_loss(
                a, const(m, t_ignoring_2, a), ignore_index=2, reduction=red, **kw(m, a)), [x])
            loss_against_torch('nll_loss (C,) ' + what, lambda m, a: m.nll_loss(a, const(m, np.array(3), a),
                                                                             reduction=red, **kw(m, a)), [x1])
            for ls in (0.0, 0.3):
                loss_against_torch(f'cross_entropy smoothing {ls} ' + what, lambda m, a: m.cross_entropy(
                    a, const(m, t, a), reduction=red, label_smoothing=ls, **kw(m, a)), [x])
        for w in (None, w4):
            what = f'{red}, weight {w is not None}'
            kw = lambda m, a, w=w: {} if w is None else {'weight': const(m, w, a)}
            loss_against_torch('binary_cross_entropy ' + what, lambda m, a, b: m.binary_cross_entropy(
                a, b, reduction=red, **kw(m, a)), [p, q])
            for pw in (None, pw4):
                loss_against_torch(f'binary_cross_entropy_with_logits pos_weight {pw is not None} ' + what,
                                   lambda m, a, b: m.binary_cross_entropy_with_logits(
                                       a, b, reduction=red, pos_weight=None if pw is None else const(m, pw, a),
                                       **kw(m, a)), [logits, q])
        loss_against_torch(f'l1_loss {red}', lambda m, a, b: m.l1_loss(a, b, reduction=red), [logits, p])
        for beta in (1.0, 0.3, 0.0):
            loss_against_torch(f'smooth_l1_loss {red} beta {beta}', lambda m, a, b: m.smooth_l1_loss(
                a, b, reduction=red, beta=beta), [logits, p])
        for delta in (1.0, 0.3, 2.5):
            loss_against_torch(f'huber_loss {red} delta {delta}', lambda m, a, b: m.huber_loss(
                a, b, reduction=red, delta=delta), [logits, p])
    for red in ('mean', 'batchmean', 'sum', 'none'):
        for log_target in (False, True):
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')   # 'mean' warns (test_kl_div_mean_warns_as_pytorch)
                loss_against_torch(f'kl_div {red} log_target {log_target}', lambda m, a, b: m.kl_div(
                    a, b.log() if log_target else b, reduction=red, log_target=log_target), [logits, q])


def test_loss_functions_extremes_as_pytorch():
    """binary_cross_entropy_with_logits at logits of +-30, +-100 and +-1e4: finite, PyTorch's values and gradients in
    float16, float32 and float64; binary_cross_entropy at probabilities 0 and 1: PyTorch's -100 clamp (losses of 100)
    and its gradients (+-1e12 where the target disagrees); every row ignored, or zero weights: NaN means, 0 sums."""
    need_torch()
    x = np.array([100., -100., 1e4, -1e4, 100., -100., 30., -30.])
    t = np.array([0., 1., 0.3, 0.7, 1., 0., 0.5, 0.5])
    for dtype in (np.float16, np.float32, np.float64):
        for red in ('mean', 'sum', 'none'):
            for pw in (None, np.full(8, 3.0)):
                what = f'bce_with_logits {np.dtype(dtype).name} {red} pos_weight {pw is not None}'
                ours, theirs = (m.tensor(x.astype(dtype), requires_grad=True) for m in (tl, torch))
                got, want = (f(o, m.tensor(t.astype(dtype)), reduction=red,
                               pos_weight=None if pw is None else m.tensor(pw.astype(dtype)))
                             for f, o, m in ((tl.binary_cross_entropy_with_logits, ours, tl),
                                             (F.binary_cross_entropy_with_logits, theirs, torch)))
                got.sum().backward()
                want.sum().backward()
                assert same_dtype(got, want) and np.isfinite(got.numpy()).all(), what
                assert np.isfinite(ours.grad.numpy()).all(), what
                assert_close(got, want, *DTYPE_TOL[dtype], what)
                assert_close(ours.grad, theirs.grad, *DTYPE_TOL[dtype], what + ' gradient')
    p, t = np.array([0., 1., 0., 1., 0.5, 1e-30]), np.array([0., 1., 1., 0., 0.3, 1.])
    for dtype in (np.float32, np.float64):
        for red in ('mean', 'sum', 'none'):
            ours, theirs = (m.tensor(p.astype(dtype), requires_grad=True) for m in (tl, torch))
            got = tl.binary_cross_entropy(ours, tl.tensor(t.astype(dtype)), reduction=red)
            want = F.binary_cross_entropy(theirs, torch.tensor(t.astype(dtype)), reduction=red)
            got.sum().backward()
            want.sum().backward()
            what = f'binary_cross_entropy at 0 and 1, {np.dtype(dtype).name} {red}'
            assert_close(got, want.detach().numpy(), 1e-6, 0, what)   # (each element to its own scale: 0.8 beside 1e12)
            assert_close(ours.grad, theirs.grad.numpy(), 1e-6, 0, what + ' gradient')
    x = sample(rng('all ignored'), (3, 4))
    for red in ('mean', 'sum'):
        for call, target, kw in (('nll_loss', [-100, -100, -100], {}),
                                 ('nll_loss', [0, 1, 1], {'weight': np.zeros(4)}),
                                 ('cross_entropy', [0, 2, 2], {'weight': np.array([0., 1, 0, 1])}),
                                 ('cross_entropy', [3, 2, 3], {'weight': np.array([1., 1, 0, 0])})):
            got = getattr(tl, call)(tl.tensor(x), tl.tensor(target), reduction=red,
                                    **{k: tl.tensor(v) for k, v in kw.items()})
            want = getattr(F, call)(torch.tensor(x), torch.tensor(target), reduction=red,
                                    **{k: torch.tensor(v) for k, v in kw.items()})
            assert_matches(got.numpy(), want.numpy(), 1e-12, f'{call} {red} {target} {kw}')


def test_loss_functions_dtypes_as_pytorch():
    """Result dtypes as PyTorch's for inputs and targets of two float dtypes (huber_loss: input's,
    binary_cross_entropy_with_logits: target's), float16 kept, and
    the values close to PyTorch's on the same values."""
    need_torch()
    r = rng('loss dtypes')
    a, b = r.uniform(0.05, 0.95, (3, 4)), r.uniform(0.05, 0.95, (3, 4))
    calls = {'l1_loss': {}, 'mse_loss': {}, 'smooth_l1_loss': {'beta': 0.5}, 'huber_loss': {'delta': 0.5},
             'kl_div': {'reduction': 'batchmean'}, 'binary_cross_entropy_with_logits': {}, 'cosine_similarity': {}}
    for name, kw in calls.items():
        for dtypes in ((np.float16, np.float16), (np.float16, np.float32), (np.float32, np.float64),
                       (np.float64, np.float32), (np.float32, np.float32)):
            if name == 'mse_loss' and dtypes[0] != dtypes[1]:
                continue   # (tinygrad_lite's mse_loss computes in the promoted dtype too, PyTorch's in input's)
            got = getattr(tl, name)(tl.tensor(a.astype(dtypes[0])), tl.tensor(b.astype(dtypes[1])), **kw)
            want = getattr(F, name)(torch.tensor(a.astype(dtypes[0])), torch.tensor(b.astype(dtypes[1])), **kw)
            what = f'{name} {[np.dtype(d).name for d in dtypes]}'
            assert same_dtype(got, want), f'{what}: {got.dtype}, PyTorch {want.dtype}'
            assert_close(got, want, *DTYPE_TOL[np.dtype(min(dtypes, key=lambda d: np.dtype(d).itemsize)).type], what)


def test_kl_div_mean_warns_as_pytorch():
    """kl_div's reduction='mean' (KLDivLoss's default) warns with PyTorch's words; 'batchmean' does not."""
    need_torch()
    x, t = sample(rng('kl warn'), (2, 3)), rng('kl warn t').uniform(0.1, 1, (2, 3))
    for ours, theirs in ((lambda: tl.kl_div(tl.tensor(x), tl.tensor(t)),
                          lambda: F.kl_div(torch.tensor(x), torch.tensor(t))),
                         (lambda: tl.KLDivLoss()(tl.tensor(x), tl.tensor(t)),
                          lambda: torch.nn.KLDivLoss()(torch.tensor(x), torch.tensor(t)))):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter('always')
            ours()
        with warnings.catch_warnings(record=True) as want:
            warnings.simplefilter('always')
            theirs()
        assert [str(w.message) for w in got] == [str(w.message) for w in want] and len(got) == 1, (got, want)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        tl.kl_div(tl.tensor(x), tl.tensor(t), reduction='batchmean')


def test_one_hot_normalize_cosine_similarity_as_pytorch():
    """one_hot: PyTorch's int64 result without a gradient (num_classes -1: the largest index + 1); normalize and
    cosine_similarity at vectors shorter than eps and of zeros: PyTorch's values and gradients (cosine_similarity's
    clamp passing the norm's gradient on)."""
    need_torch()
    for index, classes in (([0, 2, 1], -1), ([[1, 0], [3, 1]], 5), (2, 4), (np.zeros((0, 2), np.int64), 3)):
        got, want = (f(m.tensor(np.asarray(index)), classes) for f, m in ((tl.one_hot, tl), (F.one_hot, torch)))
        assert got.dtype == np.int64 and not got.requires_grad and np.array_equal(got.numpy(), want.numpy()), index
    tiny = np.array([[1e-10, 2e-10, -1e-10], [1., 2., 3.], [0., 0., 0.]])
    other = np.array([[1., -1., 2.], [0., 0., 0.], [0.5, 1., 2.]])
    loss_against_torch('cosine_similarity at tiny and zero vectors', lambda m, a, b: m.cosine_similarity(a, b),
                       [tiny, other])
    loss_against_torch('normalize at tiny and zero vectors', lambda m, a: m.normalize(a, eps=1e-8), [tiny])
    loss_against_torch('normalize p=3 dim=0', lambda m, a: m.normalize(a, 3, 0), [other + 0.25])


def test_error_loss_functions_as_pytorch():
    """Bad input to the losses gets a clear error where PyTorch raises: shapes named, a bad reduction named, integer
    inputs (TypeError naming the dtype), targets out of range, weights of a wrong shape, dtype or requiring grad,
    probabilities outside [0, 1], a negative beta, a delta of 0, one_hot's bad indices."""
    need_torch()
    r = rng('loss errors')
    a, b, ints = r.uniform(0.1, 0.9, (3, 4)), r.uniform(0.1, 0.9, (4,)), np.arange(12).reshape(3, 4)
    elementwise = ('mse_loss', 'l1_loss', 'smooth_l1_loss', 'huber_loss', 'kl_div', 'binary_cross_entropy',
                   'binary_cross_entropy_with_logits')
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', "reduction: 'mean' divides")   # (PyTorch's kl_div warns before its error)
        for name in elementwise:
            ours, theirs = getattr(tl, name), getattr(F, name)
            if name == 'binary_cross_entropy' or name == 'binary_cross_entropy_with_logits':
                raises(ValueError, lambda: theirs(torch.tensor(a), torch.tensor(b)))   # (others broadcast, warning)
            assert_names_shapes(raises(ValueError, lambda: ours(tl.tensor(a), tl.tensor(b)), name), (3, 4), (4,))
            raises(ValueError, lambda: theirs(torch.tensor(a), torch.tensor(a), reduction='bogus'))
            raises(ValueError, lambda: ours(tl.tensor(a), tl.tensor(a), reduction='bogus'), name, 'reduction',
                   'bogus')
            raises((RuntimeError, NotImplementedError), lambda: theirs(torch.tensor(ints), torch.tensor(ints)))
            raises(TypeError, lambda: ours(tl.tensor(ints), tl.tensor(ints), reduction='sum'), name, 'int64')
    for name in ('kl_div', 'binary_cross_entropy', 'binary_cross_entropy_with_logits'):   # float targets only
        raises(RuntimeError, lambda: getattr(F, name)(torch.tensor(a), torch.tensor(ints), reduction='sum'))
        raises(TypeError, lambda: getattr(tl, name)(tl.tensor(a), tl.tensor(ints), reduction='sum'), name,
               'int64')
    x, t = sample(r, (3, 4)), np.array([0, 1, 3])
    for bad in ([0, 4, 1], [0, -1, 1]):
        raises(IndexError, lambda: F.nll_loss(torch.tensor(x), torch.tensor(bad)))
        raises(ValueError, lambda: tl.nll_loss(tl.tensor(x), tl.tensor(bad)), 'nll_loss', '[0, 4)')
    assert_names_shapes(raises(ValueError, lambda: tl.nll_loss(tl.tensor(x), tl.tensor([0, 1]))), (3, 4), (2,))
    raises(RuntimeError, lambda: F.nll_loss(torch.tensor(x), torch.tensor(t), weight=torch.ones(3).double()))
    assert_names_shapes(raises(ValueError, lambda: tl.nll_loss(tl.tensor(x), tl.tensor(t), tl.ones(3).double()),
                               'weight'), (3,), (4,))
    raises(RuntimeError, lambda: F.cross_entropy(torch.tensor(x), torch.tensor(t), weight=torch.ones(4)))
    raises(TypeError, lambda: tl.cross_entropy(tl.tensor(x), tl.tensor(t), weight=tl.ones(4)), 'float32', 'float64')
    raises((RuntimeError, NotImplementedError), lambda: F.nll_loss(torch.tensor(ints), torch.tensor(t)))
    raises(TypeError, lambda: tl.nll_loss(tl.tensor(ints), tl.tensor(t)), 'nll_loss', 'int64')
    raises(RuntimeError, lambda: F.nll_loss(torch.tensor(x), torch.tensor(t.astype(np.float64))))
    raises(TypeError, lambda: tl.nll_loss(tl.tensor(x), tl.tensor(t.astype(np.float64))), 'integer')
    raises(ValueError, lambda: tl.nll_loss(tl.tensor(x), tl.tensor(t), reduction='batchmean'), 'reduction')
    w = torch.ones(4, dtype=torch.float64, requires_grad=True)
    for name, args in (('nll_loss', (x, t)), ('binary_cross_entropy', (a, a))):
        raises(RuntimeError, lambda: getattr(F, name)(*map(torch.tensor, args), weight=w))
        needing = tl.ones(4, dtype=tl.float64, requires_grad=True)
        raises(RuntimeError, lambda: getattr(tl, name)(*map(tl.tensor, args), weight=needing), 'weight')
        with tl.no_grad():   # (nothing to differentiate)
            getattr(tl, name)(*map(tl.tensor, args), weight=tl.ones(4, dtype=tl.float64, requires_grad=True))
    for p, q, which in ((a * 2, a, 'input'), (a, a - 0.5, 'target')):
        raises(RuntimeError, lambda: F.binary_cross_entropy(torch.tensor(p), torch.tensor(q)))
        raises(ValueError, lambda: tl.binary_cross_entropy(tl.tensor(p), tl.tensor(q)), which, '[0, 1]')
    raises(RuntimeError, lambda: F.binary_cross_entropy(torch.tensor(a), torch.tensor(a.astype(np.float32))))
    raises(TypeError, lambda: tl.binary_cross_entropy(tl.tensor(a), tl.tensor(a.astype(np.float32))), 'float64',
           'float32')
    for kw, shape in (({'weight': np.ones(5)}, (5,)), ({'pos_weight': np.ones((2, 3, 4))}, (2, 3, 4))):
        raises(RuntimeError, lambda: F.binary_cross_entropy_with_logits(
            torch.tensor(a), torch.tensor(a), **{k: torch.tensor(v) for k, v in kw.items()}))
        assert_names_shapes(raises(ValueError, lambda: tl.binary_cross_entropy_with_logits(
            tl.tensor(a), tl.tensor(a), **{k: tl.tensor(v) for k, v in kw.items()}), *kw), (3, 4), shape)
    raises(RuntimeError, lambda: F.smooth_l1_loss(torch.tensor(a), torch.tensor(a), beta=-1.0))
    raises(ValueError, lambda: tl.smooth_l1_loss(tl.tensor(a), tl.tensor(a), beta=-1.0), 'beta', '-1.0')
    raises(RuntimeError, lambda: F.huber_loss(torch.tensor(a), torch.tensor(a), delta=0.0))
    raises(ValueError, lambda: tl.huber_loss(tl.tensor(a), tl.tensor(a), delta=0.0), 'delta')
    raises(RuntimeError, lambda: F.cosine_similarity(torch.tensor(ints), torch.tensor(ints)))
    raises(TypeError, lambda: tl.cosine_similarity(tl.tensor(ints), tl.tensor(ints)), 'int64')
    raises(RuntimeError, lambda: F.cosine_similarity(torch.tensor(a), torch.tensor(a[:2, :3])))
    assert_names_shapes(raises(ValueError, lambda: tl.cosine_similarity(tl.tensor(a), tl.tensor(a[:2, :3]))),
                        (3, 4), (2, 3))
    raises(RuntimeError, lambda: F.normalize(torch.tensor(ints)))
    raises(TypeError, lambda: tl.normalize(tl.tensor(ints)), 'normalize', 'int64')
    for index, classes, error, needle in (([0., 1.], -1, TypeError, 'float64'), ([0, -1], 3, ValueError, '-1'),
                                          ([0, 3], 3, ValueError, '[0, 3)'),
                                          (np.zeros(0, np.int64), -1, ValueError, 'empty'),
                                          ([0, 1], 2.0, TypeError, 'num_classes'), ([True], -1, TypeError, 'bool')):
        raises((RuntimeError, TypeError), lambda: F.one_hot(torch.tensor(np.asarray(index)), classes))
        raises(error, lambda: tl.one_hot(tl.tensor(np.asarray(index)), classes), 'one_hot', needle)


def test_settings_signature_only_for_the_class_as_built():
    """The settings' signature (_Settings) is the class's alone: an instance's is its call's (*args, **kwargs), as
    torch.nn's, not the constructor's; a subclass with its own __init__ shows that __init__'s; copies and pickles keep
    the settings."""
    for name in ('GELU', 'Softplus', 'MSELoss', 'CrossEntropyLoss'):
        cls = getattr(tl, name)
        assert list(inspect.signature(cls()).parameters) == ['args', 'kwargs'], (name, inspect.signature(cls()))

    class Scaled(tl.MSELoss):
        def __init__(self, scale, reduction='sum'):
            super().__init__(reduction=reduction)
            self.scale = scale
    assert list(inspect.signature(Scaled).parameters) == ['scale', 'reduction'], inspect.signature(Scaled)
    m = Scaled(2.0)
    assert m.reduction == 'sum' and float(m(tl.tensor([1.0, 2.0]), tl.tensor([0.0, 0.0])).data) == 5.0
    for copied in (copy.deepcopy(m), pickle.loads(pickle.dumps(tl.Softplus(2, 10)))):
        assert repr(copied) in ('Scaled()', 'Softplus(beta=2, threshold=10)'), repr(copied)


LOSS_MODULES = ['CrossEntropyLoss', 'NLLLoss', 'MSELoss', 'L1Loss', 'SmoothL1Loss', 'HuberLoss', 'BCELoss',
                'BCEWithLogitsLoss', 'KLDivLoss']


def test_loss_modules_as_pytorch():
    """The loss modules take PyTorch's arguments (names, order, defaults), keep its attributes, show its reprs, hold
    weight and pos_weight as buffers under its state_dict keys (None ones left out), cast them with .double(), and
    refuse the deprecated size_average and reduce unless None."""
    need_torch()
    for name in LOSS_MODULES:
        ours, theirs = inspect.signature(getattr(tl, name)), inspect.signature(getattr(torch.nn, name))
        assert [(p.name, p.default) for p in ours.parameters.values()] == \
            [(p.name, p.default) for p in theirs.parameters.values()], (name, ours, theirs)
        assert repr(getattr(tl, name)()) == repr(getattr(torch.nn, name)()) == f'{name}()'
        for k in ('size_average', 'reduce'):
            if k in ours.parameters:
                raises(ValueError, lambda: getattr(tl, name)(**{k: False}), name, k, 'reduction')
    w, pw = np.array([0.5, 2.0, 1.0], np.float32), np.array([3.0, 1.0, 0.5], np.float32)
    for name, kw in (('CrossEntropyLoss', {'weight': w}), ('NLLLoss', {'weight': w}), ('BCELoss', {'weight': w}),
                     ('BCEWithLogitsLoss', {'pos_weight': pw}),
                     ('BCEWithLogitsLoss', {'weight': w, 'pos_weight': pw}),
                     ('CrossEntropyLoss', {})):
        ours = getattr(tl, name)(**{k: tl.tensor(v) for k, v in kw.items()})
        theirs = getattr(torch.nn, name)(**{k: torch.tensor(v) for k, v in kw.items()})
        assert list(ours.state_dict()) == list(theirs.state_dict()), (name, list(ours.state_dict()))
        assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()], name
        assert repr(ours) == repr(theirs), name
        assert all(getattr(ours, k).dtype == np.float64 for k in kw if ours.double() is ours), name
    ours = tl.CrossEntropyLoss(tl.tensor(w), None, 2, None, 'sum', 0.1)
    theirs = torch.nn.CrossEntropyLoss(torch.tensor(w), None, 2, None, 'sum', 0.1)
    assert (ours.ignore_index, ours.reduction, ours.label_smoothing) == (theirs.ignore_index, theirs.reduction,
                                                                         theirs.label_smoothing)
    for name, kw in (('SmoothL1Loss', {'beta': 0.3}), ('HuberLoss', {'delta': 0.3}),
                     ('KLDivLoss', {'log_target': True})):
        ours, theirs = getattr(tl, name)(**kw), getattr(torch.nn, name)(**kw)
        assert all(getattr(ours, k) == getattr(theirs, k) for k in [*kw, 'reduction']), name
    raises(TypeError, lambda: torch.nn.HuberLoss(beta=0.5))
    raises(TypeError, lambda: tl.HuberLoss(beta=0.5), 'beta')
    raises(TypeError, lambda: tl.CrossEntropyLoss(weight=[1.0, 2.0]), 'weight')
    x, t = sample(rng('loss module forward'), (4, 3)), np.array([0, 2, 1, 2])
    got, want = (nn.CrossEntropyLoss(m.tensor(w.astype(np.float64)), label_smoothing=0.2)(m.tensor(x), m.tensor(t))
                 for nn, m in ((tl, tl), (torch.nn, torch)))
    assert_close(got, want, 1e-12, 1e-12, 'CrossEntropyLoss forward')


def test_retain_grad_as_pytorch():
    """retain_grad() on a non-leaf fills its .grad in each later backward (accumulating; float64, against PyTorch),
    retains_grad says so; on a leaf it is a no-op (retains_grad False), on a tensor that needs no gradient a
    RuntimeError; a retained gradient never shares memory with a leaf's (clone's backward passes g on as it is)."""
    need_torch()
    x = sample(rng('retain grad'), (3, 4))
    grads = []
    for lib in (tl, torch):
        leaf = lib.tensor(x, requires_grad=True)
        y = leaf * 2
        y.retain_grad()
        leaf.retain_grad()
        z = (y * y).sum() + y.tanh().sum()
        z.backward(retain_graph=True)
        first = y.grad.numpy().copy()
        z.backward()
        grads.append((first, y.grad.numpy(), leaf.grad.numpy(), y.retains_grad, leaf.retains_grad))
    (a1, a2, al, ar, alr), (b1, b2, bl, br, blr) = grads
    assert_close(a1, b1, 1e-12, 1e-12, 'first backward')
    assert_close(a2, b2, 1e-12, 1e-12, 'accumulated')
    assert_close(al, bl, 1e-12, 1e-12, 'leaf')
    assert (ar, alr) == (br, blr) == (True, False)
    raises(RuntimeError, lambda: tl.randn(3).retain_grad(), 'requires_grad=False')
    for lib in (tl, torch):   # a retained gradient accumulates into a new tensor (a leaf's in place), as PyTorch's
        leaf = lib.tensor([1.0, 2.0], requires_grad=True)
        y = leaf * 3
        y.retain_grad()
        s = (y * lib.tensor([1.0, 2.0])).sum()
        s.backward(retain_graph=True)
        first, leaf_first = y.grad, leaf.grad
        s.backward()
        assert first is not y.grad and first.tolist() == [1.0, 2.0] and leaf_first is leaf.grad, lib.__name__
    w = tl.randn(3, requires_grad=True)
    c = w.clone()
    c.retain_grad()
    c.sum().backward()
    assert np.array_equal(c.grad.numpy(), np.ones(3)) and not np.shares_memory(c.grad.data, w.grad.data)


def test_register_hook_as_pytorch():
    """register_hook on a leaf and on a non-leaf as PyTorch's: each hook sees the gradient, one returning a tensor
    replaces it (float64 gradients against PyTorch's), handle.remove() takes it off; a hook returning another shape or
    dtype raises RuntimeError and leaves .grad as it was; a tensor that needs no gradient takes no hook."""
    need_torch()
    x = sample(rng('hooks'), (3, 4))
    results = []
    for lib in (tl, torch):
        leaf, seen = lib.tensor(x, requires_grad=True), []
        y = leaf * 2
        y.register_hook(lambda g: g * 10)
        leaf.register_hook(lambda g: seen.append(g.numpy().copy()))
        handle = leaf.register_hook(lambda g: g + 1)
        (y * y).sum().backward(retain_graph=True)
        handle.remove()
        (y * y).sum().backward()
        results.append((leaf.grad.numpy(), seen))
    (ours, our_seen), (theirs, their_seen) = results
    assert_close(ours, theirs, 1e-12, 1e-12, 'gradients through hooks')
    assert len(our_seen) == len(their_seen) == 2
    for a, b in zip(our_seen, their_seen):
        assert_close(a, b, 1e-12, 1e-12, 'the gradient a hook saw')
    w = tl.tensor(x, requires_grad=True)
    (w * 3).sum().backward()
    before = w.grad.numpy().copy()
    for bad in (lambda g: tl.ones(5), lambda g: g.double() if g.dtype != np.float64 else g.float()):
        handle = w.register_hook(bad)
        raises(RuntimeError, lambda: (w * 3).sum().backward(), 'hook', 'changed')
        handle.remove()
        assert np.array_equal(w.grad.numpy(), before)
    raises(RuntimeError, lambda: tl.randn(3).register_hook(print), 'require')
    handle = w.register_hook(lambda g: 1.0)
    raises(TypeError, lambda: (w * 3).sum().backward(), 'hook', 'float')
    handle.remove()
    # a hook writing into its gradient changes that tensor's alone (Add passes one array to both inputs), and a hook
    # put on a tensor before an in-place op sees the gradient of the value it was put on, as PyTorch's
    grads = []
    for lib in (tl, torch):
        a, c, x = (lib.tensor(v, requires_grad=True) for v in ([1.0, 2.0], [1.0, 2.0], [3.0, -1.0]))
        b = c * 2
        b.register_hook(lambda g: g.mul_(10))
        ((a + b) * lib.tensor([1.0, 2.0])).sum().backward()
        y, seen = x * 3, []
        y.register_hook(lambda g: seen.append(g.numpy().copy()))
        y.register_hook(lambda g: g + 1)
        y.mul_(2)
        (y * lib.tensor([1.0, 2.0])).sum().backward()
        grads.append([a.grad.numpy(), c.grad.numpy(), x.grad.numpy(), seen[0]])
    for ours, theirs in zip(*grads):
        assert_close(ours, theirs, 0, 0, 'hooks writing in place, hooks before an in-place op')


def test_set_grad_enabled_and_is_grad_enabled_as_pytorch():
    """tl.set_grad_enabled(mode) sets grad mode by the call itself and, as a context manager, restores the mode before
    it on exit; as a decorator it sets the mode for each call; is_grad_enabled() reads it; a mode that is not a bool
    raises TypeError, as PyTorch's."""
    x = tl.ones(2, requires_grad=True)
    assert tl.is_grad_enabled()
    with tl.set_grad_enabled(False):
        assert not tl.is_grad_enabled() and not (x * 2).requires_grad
        with tl.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not tl.is_grad_enabled()
    assert tl.is_grad_enabled()
    try:
        tl.set_grad_enabled(False)
        assert not tl.is_grad_enabled() and not (x * 2).requires_grad
        with tl.no_grad():
            assert not tl.is_grad_enabled()
    finally:
        tl.set_grad_enabled(True)
    raises(TypeError, lambda: tl.set_grad_enabled(1), 'bool')
    assert tl.is_grad_enabled()

    @tl.set_grad_enabled(False)   # a decorator: the mode for each call, not from the decoration on
    def doubled(t):
        return t * 2
    assert tl.is_grad_enabled() and not doubled(x).requires_grad and tl.is_grad_enabled()
    off = tl.set_grad_enabled(False)
    tl.set_grad_enabled(True)
    assert not off(tl.is_grad_enabled)() and tl.is_grad_enabled()   # (its own mode, not the one current)
    if torch is not None:
        raises(TypeError, lambda: torch.set_grad_enabled(1))


def test_tensor_methods_amax_clip_mm_conversions_as_pytorch():
    """amax and amin (ties sharing the gradient evenly), clip and clip_ (clamp's names), mm and mv (2-D and 1-D only),
    byte, char and short, to(copy=True) (a copy even where nothing changes) and to(non_blocking=True), each as PyTorch's
    with the function forms; Parameter's repr."""
    need_torch()
    r = rng('tensor methods')
    x = np.round(sample(r, (3, 4)), 1)
    x[0, :2] = x[0].max() + 1   # a tie
    for text, f in (('amax', lambda m, a: m.amax(a, 1)), ('amin', lambda m, a: a.amin(dim=(0, 1), keepdim=True)),
                    ('amax all', lambda m, a: a.amax()), ('clip', lambda m, a: m.clip(a, -0.5, 0.5)),
                    ('mm', lambda m, a: m.mm(a, a.T)), ('mv', lambda m, a: a.mv(a[0]))):
        (got, want), (ours, theirs) = run_both(f, x, grad=True)
        same_as_torch(got, want, text, 1e-12, 1e-12)
        got.sum().backward(), want.sum().backward()
        same_as_torch(ours[0].grad, theirs[0].grad, f'{text} gradient', 1e-12, 1e-12)
    raises(ValueError, lambda: tl.tensor(x).mm(tl.tensor(x)), 'mm', '(3, 4)')
    raises(ValueError, lambda: tl.tensor(x).mv(tl.tensor(x)), 'mv', '(3, 4)')
    t = tl.tensor(x * 100)
    for name in ('byte', 'char', 'short'):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')   # (NumPy's note on the negative values' wrap)
            got, want = getattr(t, name)(), getattr(torch.tensor(x * 100), name)()
        assert str(got.dtype) == str(want.dtype).replace('torch.', ''), (name, got.dtype)
    t.clip_(-1, 1)
    assert t.numpy().min() == -1 and t.numpy().max() == 1
    assert t.to('cpu', copy=True) is not t and t.to('cpu') is t
    assert t.to(tl.float64, non_blocking=True).dtype == np.float64
    assert repr(tl.Parameter(tl.ones(2))) == repr(torch.nn.Parameter(torch.ones(2)))


def test_tile_mT_sum_dtype_unflatten_from_numpy_as_pytorch():
    """tile (fewer dims than axes, and more), mT, sum(dtype=) and mean(dtype=) (the tensor converted first: an int32
    mean in float32), the Unflatten module and its repr, from_numpy (the array's memory; a list refused) and as_tensor
    (a tensor itself where nothing changes), each as PyTorch's, values and float64 gradients."""
    need_torch()
    r = rng('tile and co')
    x = sample(r, (2, 3, 4))
    for text, f in (('tile', lambda m, a: a.tile(2)), ('tile more', lambda m, a: a.tile((2, 1, 1, 3))),
                    ('mT', lambda m, a: a.mT * 2), ('sum dtype', lambda m, a: a.sum(1, dtype=m.float32)),
                    ('mean dtype', lambda m, a: a.float().mean(dim=0, dtype=m.float64)),
                    ('Unflatten', lambda m, a: (torch.nn if m is torch else m).Unflatten(2, (2, 2))(a))):
        (got, want), (ours, theirs) = run_both(f, x, grad=True)
        same_as_torch(got, want, text, 1e-6, 1e-6)
        got.sum().backward(), want.sum().backward()
        same_as_torch(ours[0].grad, theirs[0].grad, f'{text} gradient', 1e-12, 1e-12)
    ints = np.arange(6, dtype=np.int32)
    same_as_torch(tl.tensor(ints).mean(dtype=tl.float32), torch.tensor(ints).mean(dtype=torch.float32), 'int32 mean')
    same_as_torch(tl.tensor(ints).sum(dtype=tl.float64), torch.tensor(ints).sum(dtype=torch.float64), 'int32 sum')
    for dtype in ('int8', 'uint8', 'int16', 'bool'):   # (an integer sum in a narrower dtype: wrapped, as PyTorch's)
        big = np.array([100, 100, 7], np.int64)
        same_as_torch(tl.tensor(big).sum(dtype=getattr(tl, dtype if dtype != 'bool' else 'bool_')),
                      torch.tensor(big).sum(dtype=getattr(torch, dtype)), f'sum(dtype={dtype})')
    assert repr(tl.Unflatten(1, (2, 5))) == repr(torch.nn.Unflatten(1, (2, 5)))
    a = np.ones(3)
    t = tl.from_numpy(a)
    t += 1
    assert a.tolist() == [2.0, 2.0, 2.0] and torch.from_numpy(a).tolist() == a.tolist()
    raises(TypeError, lambda: torch.from_numpy([1, 2]))
    raises(TypeError, lambda: tl.from_numpy([1, 2]), 'NumPy array', 'list')
    assert tl.as_tensor(t) is t and tl.as_tensor(t, dtype=tl.float32).dtype == np.float32
    assert tl.as_tensor([1, 2]).dtype == np.int64


def test_no_grad_decorates_bare():
    """@tl.no_grad without parentheses decorates as @tl.no_grad() does (PyTorch 2 allows both); enable_grad records
    inside no_grad."""
    x = tl.tensor([1.0, 2.0], requires_grad=True)

    @tl.no_grad
    def bare(t):
        return t * 2

    @tl.no_grad()
    def called(t):
        return t * 2
    assert not bare(x).requires_grad and not called(x).requires_grad
    assert bare.__name__ == 'bare'
    with tl.no_grad():
        with tl.enable_grad():
            assert (x * 2).requires_grad
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad


def test_error_backward_non_scalar():
    x = tl.Tensor(sample(rng('e6'), (2, 3)), requires_grad=True)
    raises(RuntimeError, (x * 2).backward)
    assert x.grad is None


def test_error_backward_grad_shape_leaves_grads():
    a = sample(rng('e7'), (2, 3))
    x = tl.Tensor(a, requires_grad=True)
    (x * x).sum().backward()
    y = x * 3
    assert_names_shapes(raises(ValueError, lambda: y.backward(tl.Tensor(sample(rng('e8'), (3, 2))))), (2, 3), (3, 2))
    assert_close(x.grad, 2 * a, 0, 0, 'grad changed by a failed backward')


def test_grad_accumulates_in_place_as_pytorch():
    """A leaf's gradient accumulates into its .grad's array, as PyTorch's: a view, detach() or NumPy array of .grad,
    and a buffer that .grad views, see the sum; an op that saved .grad refuses its backward after it changed; a
    backward into an expanded .grad raises before any .grad changes, as PyTorch's, and zero_grad zeroes one; a
    read-only .grad (np.load's memory map) takes the sum as a new array."""
    need_torch()
    x0 = sample(rng('grad in place'), (2, 3))
    seen = []
    for lib in (tl, torch):
        x = lib.tensor(x0, requires_grad=True)
        (x * 3).sum().backward()
        view, detached, array = x.grad[0], x.grad.detach(), x.grad.numpy()
        (x * x).sum().backward()
        buffer = lib.zeros(4, 3, dtype=lib.float64)
        w = lib.tensor(x0, requires_grad=True)
        w.grad = buffer[1:3]
        (w * 2).sum().backward()
        seen.append([view.numpy().copy(), detached.numpy().copy(), array.copy(), buffer.numpy().copy()])
    for ours, theirs in zip(*seen):
        assert_close(ours, theirs, 1e-12, 1e-12, 'what views of .grad see after a second backward')
    x, w = tl.tensor(x0, requires_grad=True), tl.tensor(x0, requires_grad=True)
    (x * 3).sum().backward()
    saved = (w * x.grad).sum()   # Mul keeps x.grad for w's gradient
    (x * 3).sum().backward()
    raises(RuntimeError, saved.backward, 'modified')
    for lib in (tl, torch):
        e, f = lib.tensor(x0, requires_grad=True), lib.tensor(x0, requires_grad=True)
        e.grad, f.grad = lib.tensor(np.float64(1)).expand(2, 3), lib.ones(2, 3, dtype=lib.float64)
        raises(RuntimeError, lambda: (e * f).sum().backward(), 'single memory location')
        assert np.array_equal(f.grad.numpy(), np.ones((2, 3))) and np.array_equal(e.grad.numpy(), np.ones((2, 3)))
        (lib.optim if lib is torch else lib).SGD([e], lr=0.1).zero_grad(set_to_none=False)
        assert not e.grad.numpy().any(), lib.__name__
    r = tl.tensor(x0, requires_grad=True)
    frozen = np.ones((2, 3))
    frozen.flags.writeable = False
    r.grad = tl.tensor(frozen)
    (r * 2).sum().backward()
    assert np.array_equal(r.grad.numpy(), np.full((2, 3), 3.0)) and np.array_equal(frozen, np.ones((2, 3)))


def test_non_leaf_grad_read_warns_as_pytorch():
    """Reading .grad of a non-leaf that does not retain its gradient warns (UserWarning, as PyTorch's: backward never
    fills it); a leaf's, a retained non-leaf's and a filled one's do not."""
    need_torch()
    for lib in (tl, torch):
        x = lib.ones(2, requires_grad=True)
        y, kept = x * 2, x * 3
        kept.retain_grad()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            assert y.grad is None
        assert [w.category for w in caught] == [UserWarning] and 'retain_grad' in str(caught[0].message), lib
        (y + kept).sum().backward()
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            assert x.grad is not None and kept.grad is not None and lib.ones(2).grad is None


def test_failed_updates_leave_hooks_grads_and_data_as_they_were():
    """A failed in-place update keeps the tensor's hooks; zero_grad(set_to_none=False) zeroes a read-only .grad (by
    replacing it), none left half done; a backward whose gradient no longer fits a .grad (.data replaced) raises
    before any .grad changes; .data takes a Tensor or an array (PyTorch's idiom; NumPy's scalar of a 0-d one), with
    its shape, dtype and device, and refuses anything else, and an integer array for a tensor that requires grad."""
    need_torch()
    x0 = sample(rng('failed updates'), (2,))
    grads = []
    for lib in (tl, torch):
        x = lib.tensor(x0, requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: g * 10)
        raises(IndexError, lambda: y.__setitem__(5, 1.0))
        raises(ValueError if lib is tl else RuntimeError, lambda: y.clamp_(min=lib.zeros(3, dtype=lib.float64)))
        (y * 1).sum().backward()
        grads.append(x.grad.numpy())
    assert_close(grads[0], grads[1], 0, 0, 'a hook kept through failed in-place updates')
    params = [tl.tensor(x0, requires_grad=True) for _ in range(3)]
    frozen = np.full(2, 5.0)
    frozen.flags.writeable = False
    for p, g in zip(params, (tl.tensor(x0), tl.tensor(frozen), tl.tensor(x0))):
        p.grad = g
    tl.SGD(params, lr=0.1).zero_grad(set_to_none=False)
    assert all(np.array_equal(p.grad.numpy(), np.zeros(2)) for p in params)
    a, b = tl.tensor(x0, requires_grad=True), tl.tensor(x0, requires_grad=True)
    loss = (a * b).sum()
    b.data = np.zeros(3)
    a.grad, b.grad = tl.ones(2, dtype=tl.float64), tl.ones(3, dtype=tl.float64)
    raises(RuntimeError, loss.backward, '(2,)', '(3,)', '.data')
    assert np.array_equal(a.grad.numpy(), [1, 1]) and np.array_equal(b.grad.numpy(), [1, 1, 1])
    t = tl.tensor(x0, requires_grad=True)
    t.data = tl.tensor([5.0, 6.0, 7.0], dtype=tl.float32)
    assert t.shape == (3,) and t.dtype == np.float32 and t.numpy().tolist() == [5, 6, 7] and t.requires_grad
    for bad, kind, needle in (([1.0], TypeError, 'list'), (np.array([1, 2]), TypeError, 'int64'),
                              (np.array(['a']), TypeError, 'dtype')):
        raises(kind, lambda: setattr(t, 'data', bad), needle)
        assert t.numpy().tolist() == [5, 6, 7] and t.dtype == np.float32
    u = tl.tensor([1.0, 2.0])
    u.data = np.array([3, 4])
    assert u.dtype == np.int64 and u.numpy().tolist() == [3, 4]
    w = tl.Parameter(tl.tensor(2.0))   # PyTorch's manual update of a 0-d parameter (NumPy gives a scalar)
    w.grad = tl.tensor(1.0)
    w.data = w.data - 0.5 * w.grad.data
    assert w.shape == () and w.item() == 1.5 and w.requires_grad


def test_gradients_through_infinities_and_nan_gradients_as_pytorch():
    """lerp's gradients where an operand is infinite (inf and -inf, as PyTorch's: not NaN through the unselected
    side of its two forms), and a NaN gradient through pow and nan_to_num where their masks apply (NaN, as
    PyTorch's multiplies the mask in, not 0); the product of a 0-d inf has gradient 1; lerp of 0-d tensors takes the
    weight's wider dtype (float16's too), and keeps end and start only for the weight's gradient, as PyTorch's."""
    need_torch()
    r, inf, nan = rng('gradients through inf'), np.inf, np.nan
    start, end, weight = sample(r, (6,)), sample(r, (6,)), np.array([0.25, 0.75, -0.3, 2.0, 0.25, inf])
    end[[0, 2]], end[3] = inf, -inf
    (got, want), (ours, theirs) = run_both(lambda m, a, b, w: a.lerp(b, w), start, end, weight, grad=True)
    same_as_torch(got, want, 'lerp with infinities')
    got.sum().backward(), want.sum().backward()
    for a, b, name in zip(ours, theirs, ('start', 'end', 'weight')):
        same_as_torch(a.grad, b.grad, f'lerp {name} gradient', 1e-12)
    nans = np.full(4, nan)
    for name, f, arrays in (
            ('pow', lambda m, b, e: b ** e, (np.array([0.0, 0.0, 2.0, 1.5]), np.array([0.5, 0.0, 1.0, 2.0]))),
            ('nan_to_num', lambda m, x: x.nan_to_num(), (np.array([inf, nan, -inf, 1.5]),))):
        (got, want), (ours, theirs) = run_both(f, *arrays, grad=True)
        got.backward(tl.tensor(nans)), want.backward(torch.tensor(nans))
        for a, b in zip(ours, theirs):
            same_as_torch(a.grad, b.grad, f'{name}: a NaN gradient')
    for lib in (tl, torch):   # the product of a 0-d inf: its gradient 1, as PyTorch's (not inf / inf)
        x = lib.tensor(inf, requires_grad=True)
        x.prod().backward()
        assert x.grad.item() == 1.0, lib.__name__
    zero_d = [tl.tensor(1.0).lerp(tl.tensor(0.0), tl.tensor(0.3, dtype=dtype)) for dtype in (tl.float64, tl.float16)]
    zero_d.append(tl.tensor(1.0, dtype=tl.float16).lerp(tl.tensor(0.0, dtype=tl.float16), tl.tensor(0.3)))
    assert [t.dtype for t in zero_d] == [np.float64, np.float32, np.float32]
    grads = []   # lerp keeps start and end only for the weight's gradient: end changed after the forward, as PyTorch's
    for lib in (tl, torch):
        a, b, w = lib.tensor(start, requires_grad=True), lib.tensor(end), lib.tensor(np.full(6, 0.3))
        out = a.lerp(b, w)
        with lib.no_grad():
            b += 1
        out.sum().backward()
        grads.append(a.grad.numpy())
    assert_close(grads[0], grads[1], 1e-12, 0, 'lerp gradient after end changed in place')
    assert zero_d[0].item() == torch.tensor(1.0).lerp(torch.tensor(0.0), torch.tensor(0.3, dtype=torch.float64)).item()


def test_pad_value_the_dtype_cannot_hold_raises_as_pytorch():
    """pad's constant value is checked as PyTorch's fill: one an integer dtype cannot hold (-1 or 300 for uint8, NaN
    for int32) or beyond a float dtype's range (1e5 for float16) raises RuntimeError, leaving nothing padded (NumPy
    wrapped -1 to 255); a float for an integer dtype is truncated, and inf fills a float tensor."""
    need_torch()
    torch_zeros = lambda dtype: torch.zeros(2, dtype=getattr(torch, np.dtype(dtype).name))
    for dtype, value in ((np.uint8, -1), (np.uint8, 300), (np.int32, float('nan')), (np.float16, 1e5),
                         (np.float32, 1e300)):
        raises(RuntimeError, lambda: torch.nn.functional.pad(torch_zeros(dtype), (1, 1), value=value), 'overflow')
        raises(RuntimeError, lambda: tl.zeros(2, dtype=dtype).pad((1, 1), value=value), 'pad', 'overflow')
    for dtype, value in ((np.int64, 2.5), (np.float32, float('inf'))):
        ours = tl.zeros(2, dtype=dtype).pad((1, 1), value=value)
        theirs = torch.nn.functional.pad(torch_zeros(dtype), (1, 1), value=value)
        same_as_torch(ours, theirs, f'pad {np.dtype(dtype).name} with {value}')


def test_error_unsupported_dtype():
    raises(TypeError, lambda: tl.Tensor(np.array(['a', 'b'])))
    raises(TypeError, lambda: tl.Tensor(['a', 'b']))
    raises(TypeError, lambda: tl.Tensor(np.array([object()])))


def test_error_cuda_without_cupy():
    if tl.cuda_is_available():
        raise Skip('a GPU is present')
    a = sample(rng('e9'), (2,)).astype(np.float32)
    raises(RuntimeError, lambda: tl.Tensor(a, device='cuda'), 'cupy')
    raises(RuntimeError, lambda: tl.Tensor(a).to('cuda'), 'cupy')
    raises(RuntimeError, lambda: tl.Tensor(a).cuda(), 'cupy')
    raises(RuntimeError, lambda: tl.zeros(2, device='cuda:0'), 'cupy')
    raises(RuntimeError, lambda: tl.Linear(2, 2).cuda(), 'cupy')
    raises(RuntimeError, tl.CUDAGraph, 'CUDAGraph', 'pip install cupy')


def test_error_inplace_shape_leaves_tensor():
    a = sample(rng('e10'), (3,))
    t = tl.Tensor(a.copy())
    with tl.no_grad():
        assert_names_shapes(raises(ValueError, lambda: t.__iadd__(tl.Tensor(sample(rng('e11'), (2, 3))))),
                            (3,), (2, 3))
    assert np.array_equal(t.numpy(), a) and t.shape == (3,)


def test_error_inplace_result_type_cannot_be_cast():
    """As PyTorch: an in-place op whose result type (float for an int tensor, int for a bool one) cannot
    be cast to the tensor's dtype raises and changes nothing; integer / always gives a float."""
    need_torch()
    cases = [(np.array([1, 2]), lambda t: t.__iadd__(1.5)), (np.array([1, 2]), lambda t: t.__isub__(np.float32(0.5))),
             (np.array([1, 2], np.uint8), lambda t: t.__imul__(tl.tensor([0.7, 0.7]) if isinstance(t, tl.Tensor)
                                                               else torch.tensor([0.7, 0.7]))),
             (np.array([1, 2]), lambda t: t.__itruediv__(2)), (np.array([True, False]), lambda t: t.__iadd__(1))]
    for a, f in cases:
        want = raises(RuntimeError, lambda: f(torch.tensor(a)), "can't be cast")
        t = tl.tensor(a.copy())
        msg = raises(TypeError, lambda: f(t), "can't be cast", str(a.dtype))
        assert np.array_equal(t.numpy(), a) and t.dtype == a.dtype, (want, msg)
    for a, f in [(np.array([1, 2], np.int32), lambda t: t.__iadd__(t.to(tl.int64) if isinstance(t, tl.Tensor) else t.long())),
                 (np.array([1, 200], np.uint8), lambda t: t.__iadd__(300)), (np.array([1., 2.], np.float16), lambda t: t.__itruediv__(3)),
                 (np.array([3, 4]), lambda t: t.__imul__(True))]:
        t, p = tl.tensor(a.copy()), torch.tensor(a.copy())
        f(t), f(p)
        assert t.dtype == a.dtype and np.array_equal(t.numpy(), p.numpy()), (t, p)


def outcome(m, run):
    """run(m) -> the tensors whose gradients to compare; returns their gradients, or the RuntimeError's message."""
    try:
        leaves = run(m)
    except RuntimeError as e:
        return str(e)
    return [t.grad.numpy() if m is tl else t.grad.detach().numpy() for t in leaves]


def assert_same_outcome(what, ours, theirs, tol, needles):
    """outcome()s: ours raised (its message holding every needle) exactly where PyTorch raised, else gave its
    gradients within tol."""
    if isinstance(theirs, str):
        assert isinstance(ours, str), f'{what}: PyTorch raised ({theirs}); ours gave a gradient'
        assert all(n in ours for n in needles), (what, ours)
    else:
        assert not isinstance(ours, str), f'{what}: ours raised ({ours}); PyTorch gave a gradient'
        for o, t in zip(ours, theirs):
            assert_close(o, t, tol, tol, what)


def check_version_case(build, change, m):
    """outcome() in framework m (tl or torch) of: leaves w (needs a gradient) and x (data), y = build(m, w, x), then
    change(m, w, x, y) in place, then y.sum().backward(), whose failure must leave w's gradient as it was."""
    def run(m):
        r = rng('versions')
        w0, x0 = r.uniform(0.5, 1.5, (2, 3)), r.uniform(0.5, 1.5, (2, 3))
        w = m.tensor(w0, requires_grad=True)
        x = m.tensor(x0)
        y = build(m, w, x)
        change(m, w, x, y)
        grad = lambda: None if w.grad is None else np.array(w.grad.tolist())
        before = grad()
        try:
            y.sum().backward()
        except RuntimeError:
            after = grad()
            assert (before is None and after is None) or np.array_equal(before, after), \
                'a failed backward changes no gradient'
            raise
        return [w]
    return outcome(m, run)


def test_inplace_change_of_saved_tensor_raises():
    """As PyTorch's version counters: changing in place a tensor that a backward reads (an input it saved, its output,
    the memory of either through a view or detach()) makes that backward raise instead of giving a wrong gradient;
    changes to tensors no backward reads, to copies (advanced indexing) and steps after the backward are fine."""
    need_torch()

    def bump(t):
        t += 1

    def under_no_grad(fn):
        def run(m, *ts):
            with m.no_grad():
                fn(m, *ts)
        return run
    cases = {
        'x saved by a product': (lambda m, w, x: w * x, lambda m, w, x, y: bump(x)),
        'w changed, its product with data keeps x only': (lambda m, w, x: w * x, under_no_grad(lambda m, w, x, y: bump(w))),
        'w changed, its square saved it': (lambda m, w, x: w * w, under_no_grad(lambda m, w, x, y: bump(w))),
        'a sum saves nothing': (lambda m, w, x: w + x, lambda m, w, x, y: bump(x)),
        'exp saves its output': (lambda m, w, x: (w * 2).exp(), under_no_grad(lambda m, w, x, y: bump(y))),
        'a view of x changed': (lambda m, w, x: w * x, lambda m, w, x, y: bump(x.reshape(-1))),
        'a slice of x changed': (lambda m, w, x: w @ x.T, lambda m, w, x, y: bump(x[0])),
        'detach() of x changed': (lambda m, w, x: w.log() * x, lambda m, w, x, y: bump(x.detach())),
        'a copy of x (advanced index) changed': (lambda m, w, x: w * x, lambda m, w, x, y: bump(x[[0, 1]])),
        'x assigned to': (lambda m, w, x: (w * x).tanh(), lambda m, w, x, y: x.__setitem__(0, 5.0)),
        'x zeroed': (lambda m, w, x: w / x, lambda m, w, x, y: x.zero_()),
        'relu output changed': (lambda m, w, x: (w - x).relu(), under_no_grad(lambda m, w, x, y: bump(y))),
        'an optimizer stepped w': (lambda m, w, x: (w * w).sum(0),
                                   lambda m, w, x, y: (setattr(w, 'grad', m.ones_like(w)), m.optim.SGD([w], lr=0.1).step()
                                                       if m is torch else tl.SGD([w], lr=0.1).step())),
    }
    for name, (build, change) in cases.items():
        assert_same_outcome(name, check_version_case(build, change, tl), check_version_case(build, change, torch),
                            1e-12, ('modified by an in-place operation', 'expected version'))


def test_inplace_arithmetic_recorded_as_pytorch():
    """In grad mode, in-place arithmetic where an operand requires grad is recorded as PyTorch records it: on a
    non-leaf (+=, -=, *=, /=, numbers, a broadcast operand, a float16 tensor updated by a float32 one) and on a tensor
    that required none (an accumulator), the same gradients; a leaf that requires grad raises as in PyTorch. A tensor
    or memory something else holds raises here (PyTorch rebases views and keeps earlier ops' histories; this library
    does not), leaving the tensor's values and history as they were, however the update is called; a logged
    accumulator, h += h and updates through another name work as in PyTorch."""
    need_torch()
    x0, y0, b0 = _inplace_inputs('inplace recorded')

    def accumulate(m, x, y, b):
        acc = m.zeros((2, 3), dtype=m.float64)
        acc += x
        acc *= b
        acc += y * y
        return [acc.sum()]

    def half(m, x, y, b):
        h = x.half() * 2
        h += y.float()
        h *= b.float()
        h *= 0.5
        return [h.float().sum() * 3]
    for name, build in (('chain', _recorded_chain), ('accumulator', accumulate), ('float16', half)):
        got = outcome(tl, lambda m: _backward_of(build, m, x0, y0, b0))
        want = outcome(torch, lambda m: _backward_of(build, m, x0, y0, b0))
        assert_same_outcome(name, got, want, 2e-3 if name == 'float16' else 1e-12, ())
    for m in (tl, torch):
        x = m.tensor(x0, requires_grad=True)
        raises(RuntimeError, lambda: x.__iadd__(m.tensor(y0)), 'leaf', 'in-place')
    # refused where this library cannot keep PyTorch's semantics (each update written as code writes it, on a tensor
    # that one name holds): the update would not reach memory shared with a view, NumPy or an op's saved value, or an
    # op that already took the tensor would see the new history; the tensor keeps its values and history
    x, y = tl.tensor(x0, requires_grad=True), tl.tensor(y0, requires_grad=True)
    for case, reason in (('a view kept', 'view'), ('a detach() kept', 'detach'), ('exp keeps its output', 'saved'),
                         ('a view updated', 'view'), ('taken by an op', 'op'), ('a transpose updated', 'view')):
        message, values, ctx_kept = _refused_update(case, x, y)
        assert message is not None and 'held elsewhere' in message, (case, message)
        assert ctx_kept and np.array_equal(values, np.exp(2 * x0) if case == 'exp keeps its output' else 2 * x0), case
    h = x * 2
    total = h.sum()
    del h   # the sum still holds it
    (total * 1).backward()
    assert np.array_equal(x.grad.numpy(), np.full((2, 3), 2.0))
    for build in (_logged_accumulator, _self_update, _aliased_update):
        assert_same_outcome(build.__name__, outcome(tl, lambda m: build(m, x0)), outcome(torch, lambda m: build(m, x0)),
                            1e-12, ())
    h, y = x * 1, tl.tensor(y0, requires_grad=True)
    total = h.sum()
    for update in (lambda: h.__iadd__(y), lambda: Tensor_iadd(h, y), lambda: h.__setitem__(0, h.sum())):
        raises(RuntimeError, update, 'held elsewhere')   # however called: the sum (an op alive) took h
    assert np.array_equal(h.numpy(), x0) and total.item() == x0.sum()
    foreign = tl.Tensor(np.frombuffer(bytearray(24)))   # memory a bytes buffer owns: refused with a message
    raises(RuntimeError, lambda: foreign.__iadd__(tl.tensor(y0[0], requires_grad=True)), 'held elsewhere')


def _refused_update(case, x, y):
    """(the error's message or None, the updated tensor's values afterwards, whether it kept its op) of `case`."""
    h = (x * 2).exp() if case == 'exp keeps its output' else x * 2
    ctx = h._ctx
    kept = h[0:1] if case == 'a view kept' else h.detach() if case == 'a detach() kept' else \
        h.sum() if case == 'taken by an op' else None   # held through the update
    target = h.reshape(3, 2) if case == 'a view updated' else h.T if case == 'a transpose updated' else None
    try:
        if target is None:
            h += y
        else:
            target += tl.ones(target.shape, dtype=tl.float64, requires_grad=True)
    except RuntimeError as e:
        return str(e), h.numpy(), h._ctx is ctx
    return None, h.numpy(), kept is None


def _logged_accumulator(m, x0):
    """A running total read between updates (as a training loop logs its loss), then differentiated."""
    x = m.tensor(x0, requires_grad=True)
    running = m.zeros((), dtype=m.float64)
    for i in range(3):
        running += (x * (i + 1)).sum()
        (running / (i + 1)).item()
    running.backward()
    return [x]


def test_recorded_update_counts_live_ops():
    """The count of live recorded ops that took a tensor (what refuses a recorded in-place update of it): an op that a
    finalizer revives after the collector counted it out, and a custom Function whose forward sets an attribute
    named `versions` unrecorded, leave the count right, so neither lets an update change a history still in use."""
    kept = []

    class Keeper:
        def __del__(self):
            kept.append(self)   # revives itself, and the op it holds, after the collector ran the op's finalizer

    x = tl.tensor(np.array([1., 2.]), requires_grad=True)
    t = x * 1
    keeper = Keeper()
    keeper.loss, keeper.me = t + 1, keeper
    del keeper
    gc.collect()
    t *= 3   # no live op reaches t's history now
    raises(RuntimeError, lambda: kept[0].loss.sum().backward(), 'second time')   # not a gradient through t *= 3

    class Scale(tl.Function):
        saves = ()

        def forward(self, a):
            self.versions = 'mine'
            return a * 2

        def backward(self, g):
            return g * 2
    t = x * 1
    loss = (t + 1).sum()
    with tl.no_grad():
        Scale.apply(t)
    raises(RuntimeError, lambda: _multiply_in_place(t, 3.0), 'held elsewhere')   # the sum still takes t
    x.grad = None
    loss.backward()
    assert np.array_equal(x.grad.numpy(), [1.0, 1.0])


def _multiply_in_place(t, k):
    t *= tl.tensor(np.full(t.shape, k), requires_grad=True)


def Tensor_iadd(t, other):
    return tl.Tensor.__iadd__(t, other)


def _self_update(m, x0):
    """h += h: the op reads h as it was."""
    x = m.tensor(x0, requires_grad=True)
    h = x * 3
    h += h
    (h * h).sum().backward()
    return [x]


def _aliased_update(m, x0):
    """An update through one name shows through every other (a list, a function's argument): the same tensor."""
    x, b = m.tensor(x0, requires_grad=True), m.tensor(x0[0], requires_grad=True)
    h = x * 2
    kept = [h]

    def add(t):
        t += b
    add(h)
    (kept[0] * h).sum().backward()
    return [x, b]


def test_item_assignment_recorded_as_pytorch():
    """In grad mode, item assignment where the tensor or the value requires grad is recorded as PyTorch records it
    (CopySlices): gradients to the tensor's earlier history (zero where overwritten) and to the value (the written
    elements' gradients, summed where the value broadcasts or an index repeats), for slices, integers with arrays
    apart, masks, repeated indices, a broadcast 0-d value, float32 into float16, and building a result in a tensor
    that required none; against PyTorch in float64."""
    need_torch()
    r = rng('setitem recorded')
    x0, v0 = r.standard_normal((3, 4, 5)), r.standard_normal((4, 5))
    mask = r.uniform(size=(3, 4, 5)) > 0.5
    cases = {
        'slice of a non-leaf': lambda m, x, v: _assigned(m, x * 2, (slice(1, 3),), v[None, :, :] * 3),
        'integer and array apart': lambda m, x, v: _assigned(m, x.exp(), (0, slice(None), [0, 1, 3]), v[:, :3]),
        'a number through a mask': lambda m, x, v: _assigned(m, x + v.sum(), (m.tensor(mask),), 0.5),
        'repeated rows': lambda m, x, v: _assigned(m, x * x, ([1, 1],), v[None].expand(2, 4, 5) * 1.5),
        'a 0-d value broadcast': lambda m, x, v: _assigned(m, x * 3, (2,), v.sum()),
        'float16 tensor, float32 value': lambda m, x, v: _assigned(m, x.half() * 2, (1, 2), v[0].float()).double(),
        'into a tensor requiring none': lambda m, x, v: _assigned(m, m.zeros((2, 4, 5), dtype=m.float64), (0,), v * x[0]),
        'a 0-d index tensor beside an array': lambda m, x, v: _assigned(m, x * 1, (m.tensor(np.array(1)), [0, 2]), v[:2]),
        'a value with a leading size-1 axis': lambda m, x, v: _assigned(m, x * 1, (0,), v[None]),
        'a 0-d tensor': lambda m, x, v: _assigned(m, (x * 2).sum(), (Ellipsis,), v.sum()),
        'an output built step by step': _built_step_by_step,
    }
    for name, build in cases.items():
        got, want = (outcome(m, lambda m: _assignment_leaves(build, m, x0, v0)) for m in (tl, torch))
        assert_same_outcome(name, got, want, 2e-3 if 'float16' in name else 1e-12, ())
    x, v = tl.tensor(x0, requires_grad=True), tl.tensor(v0, requires_grad=True)
    wide = tl.zeros((1, 5), dtype=tl.float64).expand(4, 5)   # PyTorch writes the shared row; refused here
    raises(RuntimeError, lambda: _assign(wide, v[0]), 'single memory location')
    t = x * 2
    raises(RuntimeError, lambda: _assign(t, t[0]), 'held elsewhere')   # t[0] took t
    assert np.array_equal(t.numpy(), 2 * x0) and np.array_equal(wide.numpy(), np.zeros((4, 5)))


def _assign(target, value):
    target[0] = value


def _built_step_by_step(m, x, v):
    """An RNN's outputs written into a preallocated tensor, one step at a time."""
    out, h = m.zeros((3, 4, 5), dtype=m.float64), v[0] * 0
    for t in range(4):
        h = (h + x[:, t].sum(0) * v[t]).tanh()
        out[:, t] = h
    return out


def _assigned(m, target, index, value):
    target[index] = value
    return target


def _assignment_leaves(build, m, x0, v0):
    x, v = m.tensor(x0, requires_grad=True), m.tensor(v0, requires_grad=True)
    out = build(m, x, v)
    (out * m.tensor(np.arange(out.numel()).reshape(out.shape) % 7 - 3.0)).sum().backward()
    return [x, v]


def _inplace_inputs(key):
    """x0, y0 (2, 3) and b0 (3,) in [0.5, 1.5] for the recorded in-place tests."""
    r = rng(key)
    return r.uniform(0.5, 1.5, (2, 3)), r.uniform(0.5, 1.5, (2, 3)), r.uniform(0.5, 1.5, 3)


def _recorded_chain(m, x, y, b):
    """Every recorded in-place update on one non-leaf: arithmetic with tensors and numbers, item assignment."""
    h = x * 2
    h += y
    h -= b
    h *= y
    h /= x + 3
    h += 1.5
    h[1, [0, 2]] = b[:2] * 2
    h[0] = 0.5
    return [(h * h).sum()]


def _backward_of(build, m, x0, y0, b0, **where):
    """Leaves x, y, b (requiring grad; `where`: tl's device) in framework m, build(m, x, y, b)[0].backward(); the
    leaves."""
    x, y, b = (m.tensor(a, requires_grad=True, **where) for a in (x0, y0, b0))
    build(m, x, y, b)[0].backward()
    return [x, y, b]


def test_gpu_optimizer_state_on_another_device_changes_nothing():
    """A state tensor on the CPU for a parameter on the GPU is found before any parameter moves."""
    need_cuda()
    a, b = tl.Parameter(tl.ones(3, device='cuda')), tl.Parameter(tl.ones(2, device='cuda'))
    opt = tl.Adam([a, b], lr=0.1)
    a.grad, b.grad = tl.ones(3, device='cuda'), tl.ones(2, device='cuda')
    opt.step()
    opt.state[b]['exp_avg'] = tl.zeros(2)
    before = a.numpy().copy()
    raises(RuntimeError, opt.step, 'parameter 1', 'exp_avg', 'cpu', 'cuda')
    assert np.array_equal(a.numpy(), before)


def test_gpu_sgd_step_bits_as_cpu():
    """SGD's step on the GPU (one kernel: sgd_step) gives the CPU's bits in float16, float32 and float64: each op
    rounded where the composed path rounds (float16 after every op, each factor of a.add(b, alpha) rounded first),
    no fused multiply-adds; with weight decay or none, dampening, Nesterov, a learning rate in a tensor, and a
    momentum buffer laid out apart from its parameter (the kernel read it in the parameter's order)."""
    need_cuda()
    assert 'sgd_step' in tl.fused_kernels(), 'the kernel under test did not load'
    r = rng('gpu sgd bits')
    p0 = sample(r, (37, 29))
    grads = [sample(r, (37, 29)) for _ in range(3)]
    options = [dict(momentum=0.9, weight_decay=0.01), dict(momentum=0.8, dampening=0.1),
               dict(momentum=0.9, weight_decay=1e-3, nesterov=True), dict(weight_decay=0.01), dict(momentum=0.5)]
    for dtype in (np.float16, np.float32, np.float64):
        for k, opts in enumerate(options):
            results = []
            for device in ('cuda', 'cpu'):
                p = tl.Parameter(tl.tensor(p0.astype(dtype), device=device))
                lr = tl.tensor([0.05], device=device) if k == 1 else 0.05
                opt = tl.SGD([p], lr=lr, **opts)
                for step, g in enumerate(grads):
                    p.grad = tl.tensor(g.astype(dtype), device=device)
                    opt.step()
                    if step == 0 and k == 4:   # the buffer made anew in the other layout (F order on both)
                        kept = opt.state[p]['momentum_buffer'].numpy()
                        opt.state[p]['momentum_buffer'] = tl.tensor(kept.T.copy(), device=device).T
                state = opt.state[p].get('momentum_buffer')
                results.append([p] + ([state] if state is not None else []))
            for name, gpu, cpu in zip(('parameter', 'momentum buffer'), *results):
                same = float_bits(gpu) == float_bits(cpu)
                assert same.all(), f'{np.dtype(dtype).name} SGD({opts}): {name} differs at {(~same).sum()} elements'


def test_gpu_item_assignment_of_overlapping_memory_as_cpu():
    """Item assignment and copy_ on the GPU whose value views the tensor's own memory (x[1:] = x[:-1], a shift by an
    index array or a mask) give the CPU's result, as if the value were copied first (CuPy's copies and scatters read
    and write at once: about 1 in 400 elements of a 4M-element shift came out wrong on an H100; a race, which the old
    code could pass by luck)."""
    need_cuda()
    n = 2 ** 22
    mask = np.arange(n) > 0
    cases = [('x[1:] = x[:-1]', lambda x: x.__setitem__(slice(1, None), x[:-1])),
             ('x[arange(1, n)] = x[:-1]', lambda x: x.__setitem__(tl.arange(1, n, device=x.device), x[:-1])),
             ('x[mask] = x[:-1]', lambda x: x.__setitem__(tl.tensor(mask, device=x.device), x[:-1])),
             ('x[(arange(n) + 1) % n] = x', lambda x: x.__setitem__((tl.arange(n, device=x.device) + 1) % n, x)),
             ('x[1:].copy_(x[:-1])', lambda x: x[1:].copy_(x[:-1]))]
    for text, write in cases:
        results = []
        for device in ('cuda', 'cpu'):
            x = tl.arange(n, dtype=tl.float32, device=device)
            write(x)
            results.append(x.numpy())
        assert np.array_equal(*results), f'{text}: {(results[0] != results[1]).sum()} elements differ'


def test_gpu_expand_shares_its_input_version():
    """An expanded view on the GPU shares its input's version counter (CuPy's broadcast_to keeps a base): an
    in-place change through it makes a backward that needs the input raise, as on the CPU."""
    need_cuda()
    for device in ('cpu', 'cuda'):
        x = tl.Tensor(np.ones((3, 1), np.float32), requires_grad=True, device=device)
        y = x * 1
        z = y * y
        e = y.expand(3, 1)
        with tl.no_grad():
            e += 1
        raises(RuntimeError, lambda: z.sum().backward(), 'modified by an in-place operation')


def test_gpu_tensor_api_matches_cpu():
    """The PyTorch-compatible operations added in the twenty-second session on the GPU (CuPy arrays) against the
    CPU's: comparisons in the common dtype, bitwise operators, % and //, max / min with dim=, argmin, all / any, std,
    float16 meeting integers, writes through expanded views, item assignment with leading size-1 axes, iteration,
    the dtype conversions, an empty batch norm; values, dtypes and gradients."""
    need_cuda()
    r = rng('gpu tensor api')
    a, b = sample(r, (3, 4)), sample(r, (4,), 'pos')
    ints, half = r.integers(-3000, 3000, (3, 4)), r.uniform(0.5, 3, (3, 4)).astype(np.float16)
    cases = [lambda d: tl.tensor(ints, device=d) == tl.tensor(ints.astype(np.float32), device=d),
             lambda d: (tl.tensor(ints, device=d) & 7) | ~tl.tensor(ints.astype(np.int32), device=d),
             lambda d: (tl.tensor(a, device=d) > 0) ^ (tl.tensor(b, device=d) > 1),
             lambda d: tl.tensor(ints, device=d) % 7 + tl.tensor(ints, device=d) // -5,
             lambda d: tl.tensor(a, device=d) % tl.tensor(b, device=d), lambda d: 2.5 // tl.tensor(b, device=d),
             lambda d: tl.tensor(a, device=d).max(dim=1).indices, lambda d: tl.tensor(a, device=d).min(dim=0)[0],
             lambda d: tl.tensor(a, device=d).argmin(1), lambda d: (tl.tensor(a, device=d) > 0).all(dim=1),
             lambda d: (tl.tensor(a, device=d) > 0).any(), lambda d: tl.tensor(a, device=d).std(dim=0),
             lambda d: tl.tensor(half, device=d) * tl.tensor(np.int64(2049), device=d),
             lambda d: tl.tensor(half, device=d) + tl.tensor(ints[0], device=d),
             lambda d: tl.tensor(a, device=d).long() + tl.tensor(a, device=d).int() + tl.tensor(a, device=d).bool(),
             lambda d: tl.stack(list(tl.tensor(a, device=d))) * 2]

    def expand_write(d):
        base = tl.tensor(a.copy(), device=d)   # (a tensor of a NumPy array shares its memory: the CPU run would write a)
        view = base[0].expand(1, 1, 4)
        view += 1.5
        base[1:2] = tl.tensor(b.reshape(1, 1, 4), device=d)   # a value with a leading size-1 axis
        return base

    def grads(d):
        x = tl.tensor(a, requires_grad=True, device=d)
        y = tl.tensor(b, requires_grad=True, device=d)
        ((x % y) * x.max(dim=1, keepdim=True).values + x.std(dim=1, keepdim=True)).sum().backward()
        return tl.cat([x.grad, y.grad.reshape(1, 4)])

    def empty_batch_norm(d):
        x = tl.zeros(0, 3, 2, 2, device=d, requires_grad=True)
        w = tl.ones(3, device=d, requires_grad=True)
        y = tl.batch_norm(x, tl.zeros(3, device=d), tl.ones(3, device=d), w, None, training=True)
        y.sum().backward()
        return tl.cat([w.grad, tl.tensor([float(y.numel())], device=d)])

    for k, f in enumerate(cases + [expand_write, grads, empty_batch_norm]):
        cpu, gpu = f('cpu'), f('cuda')
        assert gpu.device.startswith('cuda') and gpu.dtype == cpu.dtype, (k, gpu.device, gpu.dtype, cpu.dtype)
        assert_close(gpu.numpy().astype(np.float64), cpu.numpy().astype(np.float64), 1e-12, 1e-12, f'case {k}')

def test_gpu_inplace_arithmetic_recorded():
    """The recorded in-place arithmetic and item assignment on the GPU (CuPy arrays: views and saved outputs hold the
    memory as NumPy's do): the CPU's gradients, and the same refusal of a view's memory."""
    need_cuda()
    x0, y0, b0 = _inplace_inputs('inplace recorded gpu')
    cpu, gpu = (outcome(tl, lambda m: _backward_of(_recorded_chain, m, x0, y0, b0, device=d)) for d in ('cpu', 'cuda'))
    assert_same_outcome('gpu against cpu', gpu, cpu, 1e-12, ())
    x, y = tl.tensor(x0, requires_grad=True, device='cuda'), tl.tensor(y0, requires_grad=True, device='cuda')
    h = x * 2
    view = h[0:1]
    raises(RuntimeError, lambda: h.__iadd__(y), 'memory', 'out of place')
    assert np.array_equal(view.numpy(), 2 * x0[0:1])
    h = x * 2   # one that no view or op holds
    h += y
    assert_close(h.numpy(), 2 * x0 + y0, 1e-12, 1e-12)


def floor_divmod_grid(dtype):
    """Dividends (a column) and divisors (a row) of dtype: tenths, where a / b rounds up to a whole number (1 // 0.1 is
    9, 1 % 0.1 about 0.1; CuPy's own floor(a / b) gives 10 and 0), random ones, zeros, infinities and NaNs."""
    r = rng('floor divmod grid')
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, 3e4, -6.0, 3.0]
    a = np.concatenate([np.arange(-60, 61) / 10, r.standard_normal(200) * 20, specials])[:, None]
    b = np.concatenate([[0.1, -0.1, 0.3, -0.7, 1.1, -3.0], r.standard_normal(10), specials])[None, :]
    with np.errstate(over='ignore'):
        return a.astype(dtype), b.astype(dtype)


def test_remainder_and_floor_division_bits_as_pytorch():
    """Float % and // give PyTorch's bits, signed zeros and NaNs too, over floor_divmod_grid in float16, float32 and
    float64: a zero remainder keeps the dividend's sign (-6. % 3. is -0.; NumPy's and Python's +0.). (float16 //
    within one whole number: PyTorch's CPU rounds its intermediates to float16, ours compute them in float32.)"""
    need_torch()
    assert 1 // 0.1 == 9 and torch.tensor(1.0, dtype=torch.float64) // 0.1 == 9
    for dtype in (np.float16, np.float32, np.float64):
        a, b = floor_divmod_grid(dtype)
        for name, op in (('%', lambda x, y: x % y), ('//', lambda x, y: x // y)):
            ours, theirs = op(tl.tensor(a), tl.tensor(b)), op(torch.tensor(a), torch.tensor(b))
            wrong = float_bits(ours) != float_bits(theirs)
            if dtype == np.float16 and name == '//':   # PyTorch's CPU rounds (a - fmod) / b to float16 first, ours
                with np.errstate(invalid='ignore'):   # not: a quotient may land one whole number off (inf - inf: NaN)
                    wrong &= np.abs(to_np(ours) - to_np(theirs)) != 1
            assert not wrong.any(), f'{np.dtype(dtype).name} {name}: {wrong.sum()} of {wrong.size} differ, e.g. ' \
                f'{a[np.nonzero(wrong)[0][0], 0]} {name} {b[0, np.nonzero(wrong)[1][0]]}: {to_np(ours)[wrong][0]}, ' \
                f'PyTorch {to_np(theirs)[wrong][0]}'


def test_gpu_remainder_and_floor_division_bits_as_cpu():
    """Float % and // on the GPU give the CPU's (PyTorch's) bits over floor_divmod_grid, signed zeros and NaNs too, in
    float16, float32 and float64; and %'s gradient of the divisor (-a // b)."""
    need_cuda()
    for dtype in (np.float16, np.float32, np.float64):
        a, b = floor_divmod_grid(dtype)
        for name, op in (('%', lambda x, y: x % y), ('//', lambda x, y: x // y)):
            gpu, cpu = (op(tl.tensor(a, device=d), tl.tensor(b, device=d)) for d in ('cuda', 'cpu'))
            wrong = float_bits(gpu) != float_bits(cpu)
            assert not wrong.any(), f'{np.dtype(dtype).name} {name}: {wrong.sum()} of {wrong.size} differ, ' \
                f'e.g. {a[np.nonzero(wrong)[0][0], 0]} {name} {b[0, np.nonzero(wrong)[1][0]]}: ' \
                f'{gpu.numpy()[wrong][0]} (GPU), {cpu.numpy()[wrong][0]} (CPU)'
        grads = []
        for d in ('cuda', 'cpu'):   # (a divisor of a's shape: no sum, whose order differs)
            divisor = tl.tensor(np.broadcast_to(b, (a.size, b.size)).copy(), device=d, requires_grad=True)
            (tl.tensor(a, device=d) % divisor).sum().backward()
            grads.append(divisor.grad)
        assert (float_bits(grads[0]) == float_bits(grads[1])).all(), f'{np.dtype(dtype).name}: % divisor gradient'


def test_gpu_pow_number_exponents_bits_as_cpu():
    """x ** number on the GPU gives the CPU's bits where PyTorch has an exact form (0.5, -0.5, -1, 2, 3, -2: CuPy's pow
    differs from them in the last bit, and at -0 and -inf), in float64 and float32, and their gradients' where the
    power x^(b-1) has one; elsewhere (pow: CuPy's against libm's) and in float16, within 4 ulps."""
    need_cuda()
    for dtype, e, x0 in pow_cases():
        for k, (gpu, cpu) in enumerate(zip(pow_results(x0, e, 'cuda'), pow_results(x0, e))):
            differ = float_bits(gpu) != float_bits(cpu)
            if dtype == np.float16 or (e, e - 1)[k] not in POW_FORMS + (1,):   # by pow: CuPy's and libm's
                differ &= ~np.isclose(gpu, cpu, 4 * np.finfo(dtype).eps, 0)
            assert not differ.any(), f'{np.dtype(dtype).name} x ** {e}: {("value", "gradient")[k]} differs at ' \
                f'{x0[differ][:3]}: {gpu[differ][:3]} (GPU) vs {cpu[differ][:3]} (CPU)'


def test_gpu_inplace_remainder_floor_division_and_power():
    """%=, //= and **= on the GPU (CuPy arrays) against the CPU: float64 with tensors and numbers, recorded (the
    gradients), integers, and float16 with numbers; values, dtypes and gradients."""
    need_cuda()
    r = rng('gpu inplace mod pow')
    x0, y0 = r.uniform(0.5, 3, (3, 4)), r.uniform(0.5, 1.5, 4)
    ints, half = r.integers(-3000, 3000, (3, 4)), r.uniform(0.5, 3, (3, 4)).astype(np.float16)

    def run(d):
        x, y = tl.tensor(x0, requires_grad=True, device=d), tl.tensor(y0, requires_grad=True, device=d)
        h = x * 2
        h %= y
        h **= 1.5
        h **= y
        h.sum().backward()
        i, f = tl.tensor(ints, device=d), tl.tensor(half, device=d)
        i //= 7
        i %= -5
        i **= 2
        f **= 1.7
        f %= 0.3
        return [h, x.grad, y.grad, i, f]
    for k, (gpu, cpu) in enumerate(zip(run('cuda'), run('cpu'))):
        assert gpu.device.startswith('cuda') and gpu.dtype == cpu.dtype, (k, gpu.device, gpu.dtype, cpu.dtype)
        assert_close(gpu.numpy(), cpu.numpy(), 1e-12 if cpu.dtype != np.float16 else 1e-3, 0, f'result {k}')


def test_inplace_change_of_saved_index_target_or_bias_as_pytorch():
    """Version counters where an op reads a tensor that needs no gradient (a cross-entropy target, an index tensor,
    Embedding's indices), a Parameter made from a tensor (same memory, one counter), and ops whose backward does not
    read some input or output (a quotient's numerator, a power's output, conv, BatchNorm and GRU biases): ours
    raises exactly where PyTorch does, and otherwise gives PyTorch's gradients."""
    need_torch()
    r = rng('versions2')
    x0, t0 = r.standard_normal((4, 5)), np.array([0, 3, 1, 4])

    def ce(m):
        x, t = m.tensor(x0, requires_grad=True), m.tensor(t0)
        loss = (tl.cross_entropy if m is tl else F.cross_entropy)(x, t)
        t[0] = 2
        loss.backward()
        return [x]

    def indexed(m):
        w, i = m.tensor(x0[0], requires_grad=True), m.tensor(np.array([0, 1, 1]))
        y = w[i] * m.tensor(np.array([1.0, 10.0, 100.0]))
        i[0] = 3
        y.sum().backward()
        return [w]

    def embedding(m):
        m.manual_seed(0)
        emb = (tl.Embedding if m is tl else torch.nn.Embedding)(5, 3)
        i = m.tensor(np.array([[0, 1], [1, 4]]))
        y = emb(i)
        i[0, 0] = 3
        y.sum().backward()
        return [emb.weight]

    def parameter(m):
        t = m.tensor(np.array([1.0, 2.0]))
        p = (tl.Parameter if m is tl else torch.nn.Parameter)(t)
        y = p * p
        with m.no_grad():
            t += 1
        y.sum().backward()
        return [p]

    def numerator(m):
        x = m.tensor(x0, requires_grad=True)
        y = x / 2
        with m.no_grad():
            x += 1
        y.sum().backward()
        return [x]

    def power_output(m):
        x = m.tensor(np.abs(x0) + 0.5, requires_grad=True)
        y = x ** 2
        with m.no_grad():
            y += 1
        y.sum().backward()
        return [x]

    def biases(m):
        torch.manual_seed(0)
        modules = [torch.nn.Conv2d(2, 3, 3, padding=1).double(), torch.nn.BatchNorm2d(3).double(), torch.nn.GRU(4, 3).double()]
        if m is tl:   # the same weights
            ours = [tl.Conv2d(2, 3, 3, padding=1), tl.BatchNorm2d(3), tl.GRU(4, 3)]
            for o, t in zip(ours, modules):
                o.to(np.float64).load_state_dict(t.state_dict())
            modules = ours
        conv, norm, gru = modules
        y = norm(conv(m.tensor(r2.standard_normal((2, 2, 4, 4))))).sum() + gru(m.tensor(r2.standard_normal((2, 1, 4))))[0].sum()
        with m.no_grad():
            for b in (conv.bias, norm.bias, gru.bias_ih_l0, gru.bias_hh_l0):
                b += 1
        y.backward()
        return [conv.bias, norm.bias, gru.bias_hh_l0]

    for run in (ce, indexed, embedding, parameter, numerator, power_output, biases):
        r2 = rng(('versions2', run.__name__))
        ours = outcome(tl, run)
        r2 = rng(('versions2', run.__name__))
        theirs = outcome(torch, run)
        assert_same_outcome(run.__name__, ours, theirs, 1e-5, ('modified by an in-place operation',))


def test_retained_graph_after_inplace_change_raises():
    """A second backward through a retained graph checks the versions again: the first passes, the change in
    between makes the second raise, and the first's gradient stays."""
    w = tl.Tensor(sample(rng('retain_versions'), (3,)), requires_grad=True)
    x = tl.Tensor(sample(rng('retain_versions_x'), (3,)))
    y = (w * x).sum()
    y.backward(retain_graph=True)
    first = w.grad.numpy().copy()
    x += 1
    raises(RuntimeError, lambda: y.backward(), 'in-place', 'Mul', 'input 1', 'version 1', 'expected version 0')
    assert_close(w.grad, first, 0, 0)


def test_error_inplace_on_leaf_requiring_grad():
    p = tl.Parameter(sample(rng('e12'), (3,)))

    def bump():
        p.__iadd__(1.0)
    before = p.numpy().copy()
    raises(RuntimeError, bump)
    raises(RuntimeError, p.zero_, 'requires grad')   # as PyTorch's zero_() of a leaf requiring grad
    assert_close(p, before, 0, 0)
    with tl.no_grad():
        p.zero_()
    assert not p.numpy().any()


def check_load_state_dict_error(edit, needle):
    tl.manual_seed(0)
    net = build_net(tl)
    before = {k: v.copy() for k, v in net.state_dict().items()}
    sd = {k: v + 1 for k, v in net.state_dict().items()}  # valid changes that must not be applied
    edit(sd)
    raises((KeyError, ValueError, RuntimeError), lambda: net.load_state_dict(sd), needle)
    for k, v in net.state_dict().items():
        assert np.array_equal(v, before[k]), f'{k} changed by a failed load_state_dict'


def test_error_load_state_dict_missing_key():
    check_load_state_dict_error(lambda sd: sd.pop('blocks.1.weight'), 'blocks.1.weight')


def test_error_load_state_dict_unexpected_key():
    check_load_state_dict_error(lambda sd: sd.update({'head.9.weight': np.ones(2, np.float32)}), 'head.9.weight')


def test_error_load_state_dict_wrong_shape():
    check_load_state_dict_error(lambda sd: sd.update({'stem.weight': np.ones((3, 4), np.float32)}), 'stem.weight')


def test_error_load_state_dict_unconvertible_value():
    check_load_state_dict_error(lambda sd: sd.update({'head.0.running_var': np.array(['a', 'b', 'c', 'd'])}),
                                'head.0.running_var')


def test_error_messages_name_the_argument_as_pytorch():
    """Arguments of the wrong kind get a TypeError (ValueError for values) naming what was wrong, where PyTorch also
    refuses them (before: NumPy's or Python's errors from deep inside, "unsupported dtype 'tpu'", or no error: x.to(a,
    dtype=b) took a, sum(0.5) reduced over axis 0.5, cat(x) concatenated x's rows, full((2,), [1]) filled a list)."""
    need_torch()
    x, xt = tl.ones(2, 3), torch.ones(2, 3)
    cases = [
        ('load_state_dict of a list', lambda m: (tl.Linear(2, 2) if m is tl else torch.nn.Linear(2, 2)).load_state_dict(
            [1, 2]), TypeError, 'dict-like'),
        ('cat with a number', lambda m: m.cat([x if m is tl else xt, 1]), TypeError, 'element 1'),
        ('cat of one tensor', lambda m: m.cat(x if m is tl else xt), TypeError, 'sequence'),
        ('stack with a string', lambda m: m.stack([x if m is tl else xt, 'a']), TypeError, 'element 1'),
        ('to an unknown device', lambda m: (x if m is tl else xt).to('tpu'), (TypeError, RuntimeError), "'tpu'"),
        ('Module.to an unknown device', lambda m: (tl.Linear(2, 2) if m is tl else torch.nn.Linear(2, 2)).to('bogus'),
         (TypeError, RuntimeError), "'bogus'"),
        ('to two dtypes', lambda m: (x if m is tl else xt).to(*((np.float16,) if m is tl else (torch.float16,)),
                                                            dtype=np.float64 if m is tl else torch.float64),
         TypeError, 'dtype given twice'),
        ('full with a string', lambda m: m.full((2,), 'a'), TypeError, 'fill_value'),
        ('full with a list', lambda m: m.full((2,), [1]), TypeError, 'fill_value'),
        ('sum over axis 0.5', lambda m: (x if m is tl else xt).sum(0.5), TypeError, 'int'),
        ('sum over a string', lambda m: (x if m is tl else xt).sum('a'), TypeError, 'int'),
        ('transpose of dims 0.5', lambda m: (x if m is tl else xt).transpose(0.5, 1), TypeError, 'dim'),
        ('randn of a string', lambda m: m.randn('a'), TypeError, 'size'),
        ('zeros of a float size', lambda m: m.zeros(2.5), TypeError, 'size'),
        ('GRU of no inputs', lambda m: (tl.GRU if m is tl else torch.nn.GRU)(0, 4), ValueError, 'input_size'),
    ]
    for what, call, error, needle in cases:
        raises(Exception, lambda: call(torch))   # PyTorch refuses it too
        raises(error, lambda: call(tl), needle)
    assert x.to(None).dtype == np.float32 and x.to(tl.zeros(1, dtype=np.float16)).dtype == np.float16
    assert tl.full((2,), tl.tensor(2.5)).tolist() == torch.full((2,), torch.tensor(2.5)).tolist()
    assert tl.Linear(2, 2).to(tl.zeros(1, dtype=np.float64)).weight.dtype == np.float64


def test_pytorch_forms_numpy_of_grad_tensors_max_of_tensor_pad_mode_requires_grad_keyword():
    """.numpy() of a CPU tensor that requires grad is read-only (PyTorch refuses numpy() there: a write through it
    reached the backward unseen, w.grad 14 for 2), of any other the tensor's own memory, as PyTorch's; t.max(other) and
    t.min(other) are the elementwise forms, as PyTorch's (an error naming axis before); pad takes PyTorch's mode
    ('reflect' was read as the fill value); requires_grad_(requires_grad=) as PyTorch's keyword."""
    need_torch()
    w = tl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = w * 1
    z = y * y
    for t in (w, y):
        raises(ValueError, lambda: t.numpy().__setitem__(0, 7.0), 'read-only')
    z.sum().backward()
    assert w.grad.tolist() == [2.0, 4.0, 6.0]
    raises(RuntimeError, lambda: torch.ones(2, requires_grad=True).numpy(), 'requires grad')
    plain = tl.tensor([1.0, 2.0])
    plain.numpy()[0] = 9.0
    assert plain.tolist() == [9.0, 2.0]
    a0, b0 = sample(rng('max other a'), (3, 4)), sample(rng('max other b'), (3, 4))
    for name in ('max', 'min'):
        assert_close(getattr(tl.tensor(a0), name)(tl.tensor(b0)),
                     getattr(torch.tensor(a0), name)(torch.tensor(b0)).numpy(), 0, 0, name)
    x0 = sample(rng('pad mode'), (2, 3))
    assert_close(tl.tensor(x0).pad((1, 2), 'constant', 0.5), F.pad(torch.tensor(x0), (1, 2), 'constant', 0.5).numpy(),
                 0, 0, 'pad')
    assert_close(tl.pad(tl.tensor(x0), (1, 1), value=None), F.pad(torch.tensor(x0), (1, 1), value=None).numpy(), 0, 0)
    assert_close(tl.pad(tl.tensor(x0), (1, 1), 'reflect'), F.pad(torch.tensor(x0), (1, 1), 'reflect').numpy(), 0, 0)
    assert tl.zeros(2).requires_grad_(requires_grad=True).requires_grad
    assert not tl.zeros(2).requires_grad_(False).requires_grad


def test_warnings_name_the_callers_line():
    """Each of tinygrad_lite's warnings names the line that called into it (the user's), however many of the library's
    functions lie between (aliases, modules, constructors, add_param_group): the duplicate-parameter warning had
    pointed into the library since the constructor's checks moved into add_param_group."""
    p, x = tl.Parameter(np.ones(2, np.float32)), tl.tensor(sample(rng('warn lines'), (2, 3)).astype(np.float32))
    calls = [lambda: tl.SGD([p, p], lr=0.1), lambda: tl.Adam([p, p], lr=0.1),
             lambda: tl.SGD([tl.Parameter(np.ones(2, np.float32))], lr=0.1).add_param_group({'params': [p, p]}),
             lambda: tl.Softmax()(x), lambda: tl.softmax(x, dim=None), lambda: tl.KLDivLoss()(x, x),
             lambda: tl.GRU(2, 3, dropout=0.5), lambda: x[tl.tensor(np.array([1, 0], np.uint8))],
             lambda: tl.where(tl.tensor(np.array([1, 0, 1], np.uint8)), x, x), lambda: tl.init.kaiming_uniform_(tl.zeros(0, 2))]
    for k, call in enumerate(calls):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            call()
        assert caught and all(w.filename == __file__ for w in caught), (k, [(w.filename, w.lineno) for w in caught])


def test_error_load_state_dict_into_expanded_or_read_only():
    """A parameter or buffer that cannot take the values element by element (an expanded view: its rows share
    memory, or read-only memory such as np.load(mmap_mode='r')'s) is named in the error, before any key changes;
    PyTorch refuses the expanded one too."""
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, 'w.npy'), sample(rng('lsd-ro'), (4, 4)).astype(np.float32))
        for name, make, needle in (
                ('buffer', lambda: tl.tensor(sample(rng('lsd-x'), (1, 4)).astype(np.float32)).expand(3, 4),
                 'single memory location'),
                ('weight', lambda: tl.Parameter(np.load(os.path.join(d, 'w.npy'), mmap_mode='r')), 'read-only')):
            net = tl.Sequential(tl.Linear(4, 4), tl.Linear(4, 4))
            if name == 'buffer':
                net[1].register_buffer('buffer', make())
            else:
                net[1].weight = make()
            before = {k: v.copy() for k, v in net.state_dict().items()}
            versions = [t._version[0] for t in net.parameters()]
            sd = {k: v + 1 for k, v in before.items()}
            raises(RuntimeError, lambda: net.load_state_dict(sd), f'1.{name}', needle)
            assert all(np.array_equal(v, before[k]) for k, v in net.state_dict().items())
            assert [t._version[0] for t in net.parameters()] == versions
    if torch is not None:
        m = torch.nn.Module()
        m.register_buffer('buffer', torch.zeros(1, 4).expand(3, 4))
        raises(RuntimeError, lambda: m.load_state_dict({'buffer': torch.ones(3, 4)}), 'single memory location')


def flat_values(obj, path=''):
    """[(path, copy of value)] for every leaf of nested dicts / lists / tensors."""
    if isinstance(obj, dict):
        return [kv for k in obj for kv in flat_values(obj[k], f'{path}.{k}')]
    if isinstance(obj, (list, tuple)):
        return [kv for i, v in enumerate(obj) for kv in flat_values(v, f'{path}.{i}')]
    return [(path, to_np(obj).copy())]


def check_step_error_keeps_state(cls_name, kw):
    tl.manual_seed(0)
    lin = tl.Linear(3, 2)
    opt = getattr(tl, cls_name)(lin.parameters(), **kw)
    x = tl.Tensor(sample(rng('e13'), (4, 3)).astype(np.float32))
    lin(x).sum().backward()
    opt.step()  # builds momentum / moment state
    lin(x).sum().backward()
    lin.bias.grad.data = np.ones(5, np.float32)   # (assigning .grad itself is refused: the step's own check is tested)
    params = [p.numpy().copy() for p in lin.parameters()]
    state = flat_values(opt.state_dict())
    assert_names_shapes(raises(ValueError, opt.step), (2,), (5,))
    after = flat_values(opt.state_dict())
    assert [k for k, _ in after] == [k for k, _ in state], 'optimizer state changed by a failed step'
    for (k, a), (_, b) in zip(after, state):
        assert np.array_equal(a, b), f'optimizer state {k} changed by a failed step'
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(lin.parameters(), params)), 'a parameter moved'


def test_error_sgd_step_bad_grad_changes_nothing():
    check_step_error_keeps_state('SGD', dict(lr=0.1, momentum=0.9))


def test_error_adam_step_bad_grad_changes_nothing():
    check_step_error_keeps_state('Adam', dict(lr=0.1))


def adam_after_one_step():
    a, b = tl.Parameter(np.ones(3)), tl.Parameter(np.ones(2))
    opt = tl.Adam([a, b], lr=0.1)
    a.grad, b.grad = tl.Tensor(np.ones(3)), tl.Tensor(np.ones(2))
    opt.step()
    return a, b, opt


def test_error_optim_load_state_dict_bad_state_changes_nothing():
    a, b, opt = adam_after_one_step()
    before = flat_values(opt.state_dict())
    good = opt.state_dict()
    bad_state = [({1: {**good['state'][1], 'exp_avg': np.zeros(5)}}, ('parameter 1', 'exp_avg', '(5,)', '(2,)')),
                 ({1: {'step': 1, 'exp_avg': np.zeros(2)}}, ('parameter 1', 'exp_avg_sq')),
                 ({1: {**good['state'][1], 'step': np.ones(3)}}, ('parameter 1', 'step', '(3,)', '()')),
                 ({5: good['state'][1]}, ('parameter 5', '2 parameters')),
                 ({-1: good['state'][1]}, ('parameter -1',))]
    for state, needles in bad_state:
        sd = {'state': {0: good['state'][0], **state}, 'param_groups': [{**good['param_groups'][0], 'lr': 0.5}]}
        raises(ValueError, lambda: opt.load_state_dict(sd), *needles)
    raises(ValueError, lambda: opt.load_state_dict({**good, 'param_groups': [{**good['param_groups'][0], 'eps': -1}]}),
           'Invalid epsilon value')
    two = tl.SGD([{'params': [a]}, {'params': [b]}], lr=0.1, momentum=0.9)   # a second group's option that cannot load
    sd = two.state_dict()
    sd['param_groups'][0]['lr'], sd['param_groups'][1]['note'] = 0.5, np.array(['text'])
    raises(TypeError, lambda: two.load_state_dict(sd), 'dtype')
    assert two.param_groups[0]['lr'] == 0.1 and 'note' not in two.param_groups[1]
    after = flat_values(opt.state_dict())
    assert [k for k, _ in after] == [k for k, _ in before], 'optimizer state changed by a failed load'
    for (k, u), (_, v) in zip(after, before):
        assert np.array_equal(u, v), f'{k} changed by a failed load'


def test_optim_pytorch_state_dict_options_and_checks():
    """A PyTorch optimizer's state dict with an option these updates lack switched on (amsgrad, maximize) is refused,
    leaving the state as it was; switched off (PyTorch's defaults, as every torch.optim state dict carries them) it
    loads and the trajectory continues as PyTorch's. The constructor's options are checked even where every group
    has its own (as torch.optim), a non-leaf parameter raises ValueError and a non-tensor TypeError, as PyTorch."""
    need_torch()
    r = rng('optim_torch_sd')
    w0, grads = r.standard_normal(4), [r.standard_normal(4) for _ in range(5)]
    for options in (dict(amsgrad=True), dict(maximize=True), dict()):
        wt = torch.nn.Parameter(torch.tensor(w0))
        ot = torch.optim.Adam([wt], lr=0.1, **options)
        for g in grads[:2]:
            wt.grad = torch.tensor(g)
            ot.step()
        w = tl.Parameter(wt.detach().numpy().copy())
        ours = tl.Adam([w], lr=0.1)
        if options:
            before = flat_values(ours.state_dict())
            raises(ValueError, lambda: ours.load_state_dict(ot.state_dict()), *[f'{k}=True' for k in options])
            assert [(k, v.tolist() if hasattr(v, 'tolist') else v) for k, v in flat_values(ours.state_dict())] == \
                [(k, v.tolist() if hasattr(v, 'tolist') else v) for k, v in before], 'a refused load changed the state'
            continue
        ours.load_state_dict(ot.state_dict())
        for g in grads[2:]:
            wt.grad, w.grad = torch.tensor(g), tl.Tensor(g)
            ot.step()
            ours.step()
        assert_close(w, wt.detach().numpy(), 1e-12, 1e-12, 'Adam continued from a PyTorch state dict')
    p = tl.Parameter(np.ones(2))
    for cls, group, kw in (('SGD', {'lr': 0.1}, dict(lr=-1.0)), ('Adam', {'betas': (0.5, 0.9)}, dict(betas=(1.5, 0.9)))):
        raises(ValueError, lambda: getattr(torch.optim, cls)([{'params': [torch.nn.Parameter(torch.ones(2))], **group}], **kw))
        raises(ValueError, lambda: getattr(tl, cls)([{'params': [p], **group}], **kw), 'Invalid')
    raises(ValueError, lambda: torch.optim.SGD([torch.nn.Parameter(torch.ones(2)) * 2], lr=0.1), 'non-leaf')
    raises(ValueError, lambda: tl.SGD([p * 2], lr=0.1), 'non-leaf')
    raises(TypeError, lambda: tl.SGD([np.ones(2)], lr=0.1), 'tensors')


def torch_optim_state(sd):
    """tinygrad_lite's optimizer state dict (NumPy arrays) as torch.optim's load_state_dict takes it (tensors)."""
    return {'state': {i: {k: torch.tensor(v) for k, v in st.items()} for i, st in sd['state'].items()},
            'param_groups': [dict(g) for g in sd['param_groups']]}


def test_optim_pytorch_adam_and_adamw_state_dicts():
    """decoupled_weight_decay as torch.optim's: a group option that Adam's and AdamW's state dicts carry (AdamW's
    True). Each of torch.optim.Adam's and AdamW's state dicts loads into tl.Adam and tl.AdamW and the steps after are
    those of the torch.optim class that loaded it: Adam takes the saved option (an AdamW dict makes it decoupled),
    AdamW is always decoupled, a group saved without the option (older PyTorch) loads it False into Adam; ours load
    into torch.optim's the same way and step on as they do. A constructor's group may set it either way in both. A
    value that is not a bool raises TypeError; SGD (which has no such option) refuses True, changing nothing."""
    need_torch()
    r = rng('optim_adamw_torch_sd')
    w0, grads = r.standard_normal((3, 4)), [r.standard_normal((3, 4)) for _ in range(6)]
    for saver in ('AdamW', 'Adam'):
        for loader in ('AdamW', 'Adam'):
            for drop in (False, True):   # drop: the option left out of the saved groups, as older PyTorch saved them
                wt = torch.nn.Parameter(torch.tensor(w0))
                ot = getattr(torch.optim, saver)([wt], lr=0.05, betas=(0.8, 0.95), weight_decay=0.1)
                for g in grads[:3]:
                    wt.grad = torch.tensor(g)
                    ot.step()
                saved = ot.state_dict()
                if drop:
                    saved['param_groups'] = [{k: v for k, v in g.items() if k != 'decoupled_weight_decay'}
                                             for g in saved['param_groups']]
                w, wl = tl.Parameter(wt.detach().numpy().copy()), torch.nn.Parameter(wt.detach().clone())
                ours = getattr(tl, loader)([w], lr=0.5)   # the options come with the state dict
                theirs = getattr(torch.optim, loader)([wl], lr=0.5)
                ours.load_state_dict(saved)
                theirs.load_state_dict(saved)
                what = f'{saver} saved{" without the option" if drop else ""}, {loader} loaded'
                option = lambda opt: opt.param_groups[0]['decoupled_weight_decay']
                assert option(ours) == option(theirs), what
                for g in grads[3:]:
                    wl.grad, w.grad = torch.tensor(g), tl.Tensor(g)
                    theirs.step()
                    ours.step()
                assert_close(w, wl, 1e-12, 1e-12, what)
                wb = torch.nn.Parameter(torch.tensor(w.numpy().copy()))   # ours saved, loaded into torch.optim's
                back = getattr(torch.optim, saver)([wb], lr=0.5)
                back.load_state_dict(torch_optim_state(ours.state_dict()))
                decoupled = saver == 'AdamW' or ours.param_groups[0]['decoupled_weight_decay']
                assert back.param_groups[0]['decoupled_weight_decay'] == decoupled, what
                if back.param_groups[0]['decoupled_weight_decay'] == ours.param_groups[0]['decoupled_weight_decay']:
                    for g in grads[:2]:
                        wb.grad, w.grad = torch.tensor(g), tl.Tensor(g)
                        back.step()
                        ours.step()
                    assert_close(w, wb, 1e-12, 1e-12, f'{what}, saved again and loaded into torch.optim.{saver}')
    for cls in ('Adam', 'AdamW'):
        for flag in (True, False):
            p, pt = tl.Parameter(w0.copy()), torch.nn.Parameter(torch.tensor(w0))
            ours = getattr(tl, cls)([{'params': [p], 'decoupled_weight_decay': flag}], lr=0.05, weight_decay=0.2)
            theirs = getattr(torch.optim, cls)([{'params': [pt], 'decoupled_weight_decay': flag}], lr=0.05,
                                               weight_decay=0.2)
            assert ours.param_groups[0]['decoupled_weight_decay'] is flag
            assert ours.defaults['decoupled_weight_decay'] == theirs.defaults['decoupled_weight_decay'] == \
                (cls == 'AdamW')
            for g in grads:
                p.grad, pt.grad = tl.Tensor(g), torch.tensor(g)
                ours.step()
                theirs.step()
            assert_close(p, pt, 1e-12, 1e-12, f'{cls} with a group decoupled_weight_decay={flag}')
    p = tl.Parameter(np.ones(2))
    raises(TypeError, lambda: tl.Adam([p], decoupled_weight_decay='yes'), 'bool', "'yes'")
    raises(TypeError, lambda: tl.Adam([{'params': [p], 'decoupled_weight_decay': 1}]), 'bool')
    raises(TypeError, lambda: tl.AdamW([p], decoupled_weight_decay=True))   # as torch.optim.AdamW: no such argument
    raises(ValueError, lambda: tl.SGD([{'params': [p], 'decoupled_weight_decay': True}], lr=0.1),
           'decoupled_weight_decay=True')
    sgd, adamw = tl.SGD([p], lr=0.1, momentum=0.9), tl.AdamW([tl.Parameter(np.ones(2))])
    before = sgd.state_dict()
    raises(ValueError, lambda: sgd.load_state_dict(adamw.state_dict()), 'decoupled_weight_decay=True')
    assert sgd.state_dict() == before


def test_module_parameter_assignment_and_batchnorm_old_state_dict():
    """As PyTorch: assigning a plain tensor over a module's parameter raises TypeError (it would drop out of
    parameters() and state_dict), a Parameter or None is taken; a BatchNorm state dict without num_batches_tracked
    (older checkpoints) loads with the count kept, other missing keys still raise."""
    need_torch()
    lin, lin_t = tl.Linear(2, 3), torch.nn.Linear(2, 3)
    raises(TypeError, lambda: setattr(lin_t, 'weight', torch.ones(3, 2)))
    raises(TypeError, lambda: setattr(lin, 'weight', tl.ones(3, 2)), "parameter 'weight'", 'Linear')
    assert [n for n, _ in lin.named_parameters()] == ['weight', 'bias']
    lin.weight = tl.Parameter(np.zeros((3, 2), np.float32))
    assert not lin.weight.numpy().any()
    lin.bias, lin_t.bias = None, None
    assert [n for n, _ in lin.named_parameters()] == [n for n, _ in lin_t.named_parameters()] == ['weight']
    net, net_t = tl.Sequential(tl.Linear(3, 3), tl.BatchNorm1d(3)), torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    net(tl.Tensor(rng('bn_old').standard_normal((4, 3)).astype(np.float32)))
    old = {k: v for k, v in net_t.state_dict().items() if k != '1.num_batches_tracked'}
    theirs, ours = net_t.load_state_dict(old), net.load_state_dict(old)
    assert list(ours.missing_keys) == list(theirs.missing_keys) == [] and not ours.unexpected_keys, (ours, theirs)
    assert int(net[1].num_batches_tracked.item()) == 1, 'the count is kept'
    assert_close(net[1].running_mean, net_t[1].running_mean.numpy(), 0, 0)
    raises(RuntimeError, lambda: net.load_state_dict({k: v for k, v in old.items() if k != '1.running_var'}),
           'missing', '1.running_var')


def test_module_register_buffer_checks_as_pytorch():
    """register_buffer as torch.nn.Module's: a non-Tensor value (TypeError), a name with '.', empty, or of another
    attribute (KeyError), a name that is not a string (TypeError) raise and change nothing; a buffer registered
    again or as None keeps one name. A float assigned to a buffer raises TypeError; a Parameter assigned to a buffer
    makes it a parameter only, a Module a submodule, a Parameter registered as a buffer stays a buffer: the names of
    parameters, buffers and state_dict are PyTorch's, and so are the output and the new parameter's gradient."""
    need_torch()
    ours, theirs = build_shared_net(tl), build_shared_net(torch.nn)
    perturb_torch(theirs, rng('register_buffer'))
    ours.load_state_dict(theirs.state_dict())
    before = ours.state_dict()
    for name, value, exc, needles in [('scale2', 3.0, TypeError, ("'float'", 'scale2')),
                                      ('scale2', np.ones(3), TypeError, ("'ndarray'",)),
                                      ('a.b', None, KeyError, ("'.'", 'a.b')), ('', None, KeyError, ('empty',)),
                                      ('gain', None, KeyError, ('gain', 'exists')),
                                      ('block', None, KeyError, ('block',)),
                                      ('training', None, KeyError, ('training',)), (1, None, TypeError, ('string',))]:
        raises(exc, lambda: theirs.register_buffer(name, value))
        raises(exc, lambda: ours.register_buffer(name, value), *needles)
    raises(TypeError, lambda: setattr(theirs.block, 'scale', 3.0))
    raises(TypeError, lambda: setattr(ours.block, 'scale', 3.0), "buffer 'scale'", 'float')
    after = ours.state_dict()
    assert list(after) == list(before) and all(np.array_equal(after[k], before[k]) for k in before)
    r = rng('register_buffer values')
    extra, step = sample(r, (3,)).astype(np.float32), sample(r, (3,)).astype(np.float32)
    for net, m in ((ours, tl), (theirs, TH)):
        net.block.register_buffer('scale', make(m, extra))       # again: replaced, one name
        net.register_buffer('empty', None)                         # None: listed nowhere
        net.register_buffer('frozen', (tl.Parameter if m is tl else torch.nn.Parameter)(make(m, step)))
        net.block.scale = (tl.Parameter if m is tl else torch.nn.Parameter)(make(m, step))   # now a parameter
        net.head.register_buffer('sub', make(m, extra))
        net.head.sub = (tl if m is tl else torch.nn).ReLU()     # now a submodule
    names = lambda pairs: [n for n, _ in pairs]
    assert names(ours.named_parameters()) == names(theirs.named_parameters())
    assert names(ours.named_buffers()) == names(theirs.named_buffers())
    assert 'frozen' in names(ours.named_buffers()) and 'block.scale' in names(ours.named_parameters())
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert names(ours.named_modules()) == names(theirs.named_modules())
    x = sample(r, (4, 3)).astype(np.float32)
    out, out_t = ours(tl.Tensor(x)), theirs(torch.tensor(x))
    assert_close(out, out_t, 1e-5, 1e-6)
    w = upstream(0, out.shape, np.float32)
    (out * tl.Tensor(w)).sum().backward()
    (out_t * torch.tensor(w)).sum().backward()
    assert_close(ours.block.scale.grad, theirs.block.scale.grad, 1e-5, 1e-6)


def test_module_non_persistent_buffers_as_pytorch():
    """register_buffer(persistent=False) as torch.nn.Module's: the buffer is in buffers()/named_buffers() (in order)
    and moves and casts with .to(dtype)/.half()/.double(), but is not in state_dict(); load_state_dict (strict) does
    not expect it and calls it unexpected if given, changing nothing; registered again persistent, it is back in the
    state dict. A model using it gives PyTorch's output once the state dict is copied over."""
    need_torch()
    r = rng('non-persistent')
    mask, shift = (sample(r, (3,)).astype(np.float32) for _ in range(2))
    def build(nn):
        m = tl if nn is tl else TH
        net = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
        net[0].register_buffer('mask', make(m, mask), persistent=False)
        net.register_buffer('shift', make(m, shift), persistent=False)
        net.register_buffer('kept', make(m, shift))
        return net
    ours, theirs = build(tl), build(torch.nn)
    names = lambda pairs: [n for n, _ in pairs]
    assert names(ours.named_buffers()) == names(theirs.named_buffers()) == [
        'shift', 'kept', '0.mask', '1.running_mean', '1.running_var', '1.num_batches_tracked']
    assert len(list(ours.buffers())) == 6
    assert list(ours.state_dict()) == list(theirs.state_dict()) == [
        'kept', '0.weight', '0.bias', '1.weight', '1.bias', '1.running_mean', '1.running_var', '1.num_batches_tracked']
    perturb_torch(theirs, rng('non-persistent weights'))
    assert ours.load_state_dict(theirs.state_dict()) == ([], [])
    x = sample(r, (4, 3)).astype(np.float32)
    out = ours.eval()(tl.Tensor(x)) * ours[0].mask + ours.shift
    out_t = theirs.eval()(torch.tensor(x)) * theirs[0].mask + theirs.shift
    assert_close(out, out_t, 1e-5, 1e-6)
    extra = dict(theirs.state_dict(), **{'0.mask': torch.zeros(3)})
    raises(RuntimeError, lambda: theirs.load_state_dict(extra), '0.mask')
    raises(RuntimeError, lambda: ours.load_state_dict(extra), 'unexpected', '0.mask')
    assert np.array_equal(ours[0].mask.numpy(), mask), 'a failed load changed the buffer'
    keys, keys_t = ours.load_state_dict(extra, strict=False), theirs.load_state_dict(extra, strict=False)
    assert keys == keys_t == ([], ['0.mask']) and np.array_equal(ours[0].mask.numpy(), mask), keys
    for cast, dtype in (('double', np.float64), ('half', np.float16)):
        getattr(ours, cast)(), getattr(theirs, cast)()
        assert ours[0].mask.dtype == ours.shift.dtype == dtype == theirs[0].mask.numpy().dtype, cast
    assert ours.to(np.float32) is ours and ours[0].mask.dtype == np.float32
    assert_close(ours[0].mask, mask.astype(np.float16), 0, 0)
    ours[0].register_buffer('mask', tl.tensor(mask))
    theirs[0].register_buffer('mask', torch.tensor(mask))
    assert list(ours.state_dict()) == list(theirs.state_dict()) and '0.mask' in ours.state_dict()

def test_module_delattr_as_pytorch():
    """del of a buffer (persistent or not), a parameter, a submodule (held twice: under its other name it stays) or
    a None slot removes it from every listing as torch.nn.Module's __delattr__ does: named_parameters, named_buffers,
    named_modules and state_dict keys are PyTorch's after each deletion, state_dict loads both ways, and the name is
    then free (a tensor assigned is no buffer); deleting a missing attribute raises AttributeError, changing
    nothing."""
    need_torch()
    ours, theirs = build_shared_net(tl), build_shared_net(torch.nn)
    perturb_torch(theirs, rng('delattr'))
    ours.load_state_dict(theirs.state_dict())
    for net, m in ((ours, tl), (theirs, TH)):
        net.register_buffer('offset', make(m, np.ones(3, np.float32)), persistent=False)
        net.head.bias = None
    names = lambda pairs: [n for n, _ in pairs]
    steps = [lambda net: delattr(net.block, 'scale'), lambda net: delattr(net, 'offset'),
             lambda net: delattr(net, 'gain'), lambda net: delattr(net, 'block'), lambda net: delattr(net.head, 'bias'),
             lambda net: delattr(net.body[2].fc, 'bias'), lambda net: delattr(net.body, '1')]
    for k, step in enumerate(steps):
        step(ours), step(theirs)
        for listing in ('named_parameters', 'named_buffers', 'named_modules'):
            assert names(getattr(ours, listing)()) == names(getattr(theirs, listing)()), (k, listing)
        assert list(ours.state_dict()) == list(theirs.state_dict()), (k, list(ours.state_dict()))
        assert all(np.array_equal(v, theirs.state_dict()[n].numpy()) for n, v in ours.state_dict().items()), k
        assert ours.load_state_dict(theirs.state_dict()) == ([], [])
        theirs.load_state_dict({n: torch.from_numpy(v) for n, v in ours.state_dict().items()})
    before = list(ours.state_dict())
    for net in (ours, theirs):
        raises(AttributeError, lambda: delattr(net, 'gain'))
        raises(AttributeError, lambda: delattr(net.body[1], 'scale'))   # the block, deleted above
    assert list(ours.state_dict()) == before
    for net, m in ((ours, tl), (theirs, TH)):
        net.body[1].scale = make(m, np.ones(3, np.float32))   # a plain attribute now, as in PyTorch
        net.body[1].register_buffer('offset', make(m, np.zeros(3, np.float32)))
    assert names(ours.named_buffers()) == names(theirs.named_buffers()) and 'body.2.offset' in ours.state_dict()
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_module_assignment_over_a_submodule_as_pytorch():
    """As torch.nn.Module's __setattr__: a value that is not a Module, a Parameter or None (a number, a tensor, a
    string) assigned over a submodule raises TypeError, changing nothing; None is taken and the name stays a
    submodule's (and a parameter's set to None a parameter's: a number, a tensor or a module then still raises) until
    a Module, a Parameter (the name a parameter's then) or del; a Parameter or a Module taking over a buffer's, a
    submodule's or a plain attribute's name comes last among its kind, as in PyTorch's registries."""
    need_torch()
    ours, theirs = build_shared_net(tl), build_shared_net(torch.nn)
    names = lambda pairs: [n for n, _ in pairs]
    for value in (3, 'relu', (tl.ones(2), torch.ones(2)), ([tl.Linear(3, 3)], [torch.nn.Linear(3, 3)])):
        for net, v in ((ours, value[0]), (theirs, value[1])) if isinstance(value, tuple) else \
                ((ours, value), (theirs, value)):
            raises(TypeError, lambda: setattr(net, 'head', v), *(('child module', 'head') if net is ours else ()))
    assert isinstance(ours.head, tl.Linear) and list(ours.state_dict()) == list(theirs.state_dict())
    for net, nn, m in ((ours, tl, tl), (theirs, torch.nn, TH)):
        net.head = None
        raises(TypeError, lambda: setattr(net, 'head', 3))
        net.gain = None
        for v in (2.0, make(m, np.ones(3, np.float32)), nn.ReLU()):
            raises(TypeError, lambda: setattr(net, 'gain', v))
    assert ours.head is None and ours.gain is None
    assert list(ours.state_dict()) == list(theirs.state_dict()) and names(ours.named_children()) == \
        names(theirs.named_children())
    raises(TypeError, lambda: setattr(ours, 'head', 3), "child module 'head'", 'int', 'Net')
    raises(TypeError, lambda: setattr(ours, 'gain', tl.ReLU()), "parameter 'gain'", 'ReLU')
    for net, nn, m in ((ours, tl, tl), (theirs, torch.nn, TH)):
        net.head = nn.Parameter(make(m, np.ones(2, np.float32)))   # a parameter's name now, placed last
        net.gain = nn.Parameter(make(m, np.ones(3, np.float32)))   # where it was
        net.block.scale = nn.Parameter(make(m, np.ones(3, np.float32)))   # a buffer's name: last among parameters
        net.block.note = 'plain'
        net.block.note = nn.ReLU()   # a plain attribute's name: last among submodules
        net.block.bn = nn.Parameter(make(m, np.ones(1, np.float32)))
    for listing in ('named_parameters', 'named_buffers', 'named_modules', 'named_children'):
        assert names(getattr(ours, listing)()) == names(getattr(theirs, listing)()), listing
    assert list(ours.state_dict()) == list(theirs.state_dict())
    raises(TypeError, lambda: setattr(ours, 'head', tl.Linear(3, 2)), "parameter 'head'")
    del ours.head
    ours.head = 3   # del frees the name, as in PyTorch
    assert ours.head == 3


def test_dropout_module_checks_p_at_construction():
    """As PyTorch: Dropout(p) outside [0, 1] raises ValueError when made (it raised only at a training forward)."""
    need_torch()
    for p in (-0.1, 1.5):
        raises(ValueError, lambda: torch.nn.Dropout(p))
        raises(ValueError, lambda: tl.Dropout(p), 'Dropout', str(p))
    assert tl.Dropout(0.0).p == 0.0 and tl.Dropout(1.0).p == 1.0


def test_indexing_as_pytorch():
    """Indexing as PyTorch where it differs from NumPy: integers apply first as selects, so an integer and an array
    apart keep the array's axes in place (values, shapes and float64 gradients against PyTorch, tensors and 0-d
    tensors as indices too); an Ellipsis stands for whole axes, so that one of no axes between two arrays leaves them
    side by side (NumPy sends their axes to the front); an empty list selects nothing; a negative step raises
    ValueError. Item assignment follows the same order, refuses (as PyTorch) a leaf that requires grad in grad mode
    and numbers an integer tensor cannot hold (as tl.full does), leaving the tensor as it was."""
    need_torch()
    r = rng('indexing_torch')
    x0 = r.standard_normal((3, 4, 5))
    cases = [lambda m, x: x[0, :, [0, 1, 0]], lambda m, x: x[0, :, m.tensor(np.array([[0, 1], [1, 2]]))],
             lambda m, x: x[m.tensor(np.array(1)), :, [0, 1]], lambda m, x: x[[0, 1], 2, 1:3],
             lambda m, x: x[..., 1, [0, 2]], lambda m, x: x[None, 0, :, [1, 2]], lambda m, x: x[1, [True, False, True, True]],
             lambda m, x: x[[]], lambda m, x: x[0, [1, 2], [0, 4]], lambda m, x: x[2, ..., [0, 1]],
             lambda m, x: x[1:, 0, None, [2, 3]], lambda m, x: x[:, [0, 1, 2], ..., [1, 2, 3]],
             lambda m, x: x[[0, 1], ..., [1, 2]], lambda m, x: x[[True, False, True], ..., [0, 4]],
             lambda m, x: x[[0, 2], ..., None, [1, 3]]]
    for k, index in enumerate(cases):
        xo, xt = tl.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        yo, yt = index(tl, xo), index(torch, xt)
        assert yo.shape == tuple(yt.shape), (k, yo.shape, tuple(yt.shape))
        assert_close(yo, yt.detach().numpy(), 0, 0, f'case {k}')
        g = r.standard_normal(yo.shape)
        yo.backward(tl.tensor(g))
        yt.backward(torch.tensor(g))
        assert_close(xo.grad, xt.grad.numpy(), 1e-12, 1e-12, f'case {k} gradient')
    raises(ValueError, lambda: torch.tensor(x0)[::-1])
    raises(ValueError, lambda: tl.tensor(x0)[::-1], 'step')
    ours, theirs = tl.tensor(x0.copy()), torch.tensor(x0.copy())
    value = r.standard_normal((4, 3))   # PyTorch's shape of x[0, :, [0, 1, 3]]
    ours[0, :, [0, 1, 3]] = tl.tensor(value)
    theirs[0, :, [0, 1, 3]] = torch.tensor(value)
    assert_close(ours, theirs.numpy(), 0, 0, 'assignment through an integer and an array apart')
    value = r.standard_normal((3, 3))   # PyTorch's shape of x[:, [0, 1, 2], ..., [1, 2, 3]]
    ours[:, [0, 1, 2], ..., [1, 2, 3]] = tl.tensor(value)
    theirs[:, [0, 1, 2], ..., [1, 2, 3]] = torch.tensor(value)
    assert_close(ours, theirs.numpy(), 0, 0, 'assignment through two arrays about an Ellipsis of no axes')
    before = ours.numpy().copy()
    for m in (tl, torch):
        leaf = m.tensor(x0.copy(), requires_grad=True)
        raises(RuntimeError, lambda: leaf.__setitem__((0, 0), m.tensor(np.ones(5))), 'leaf')
        assert np.array_equal(leaf.detach().numpy(), x0)
    ints = tl.tensor(np.zeros(3, np.int8))
    for bad in (300, float('nan'), -129):
        raises(RuntimeError, lambda: torch.zeros(3, dtype=torch.int8).__setitem__(0, bad))
        raises(RuntimeError, lambda: ints.__setitem__(0, bad), 'int8', 'overflow')
    raises(RuntimeError, lambda: tl.full((2,), 300, dtype=np.int8), 'full', 'overflow')
    assert_close(ours, before, 0, 0, 'a refused assignment changes nothing')
    assert not ints.numpy().any(), 'refused fills change nothing'


def test_uint8_index_is_a_mask_as_pytorch():
    """A uint8 index tensor or array is a mask (nonzero: True), as PyTorch's (with its deprecation warning where it has
    axes): values, shapes and float64 gradients against PyTorch, 0-d and next to an integer too; item assignment
    through one writes the masked elements (with a tensor's values, as PyTorch; PyTorch refuses a number there)."""
    need_torch()
    r = rng('uint8 masks')
    x0, rows, cols = sample(r, (2, 3)), np.array([1, 0], np.uint8), np.array([2, 0, 1], np.uint8)
    cases = [lambda m, x: x[m.tensor(rows)], lambda m, x: x[:, m.tensor(cols)], lambda m, x: x[0, m.tensor(cols)],
             lambda m, x: x[m.tensor(np.array([[1, 0, 3], [0, 1, 0]], np.uint8))], lambda m, x: x[rows],
             lambda m, x: x[m.tensor(np.array(1, np.uint8))], lambda m, x: x[m.tensor(np.array(0, np.uint8))],
             lambda m, x: x[np.uint8(1)]]   # a NumPy uint8 scalar: an integer
    for k, index in enumerate(cases):
        (xo, xt), outs = (tl.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)), []
        for x, m in ((xo, tl), (xt, torch)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter('always')
                outs.append(index(m, x))
            assert any('uint8' in str(w.message) for w in caught) == (k < 5), (k, m.__name__)
        (yo, yt), g = outs, r.standard_normal(tuple(outs[1].shape))
        assert yo.shape == tuple(yt.shape) and np.array_equal(yo.detach().numpy(), yt.detach().numpy()), k
        yo.backward(tl.tensor(g))
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')   # PyTorch's backward warns again
            yt.backward(torch.tensor(g))
        assert_close(xo.grad, xt.grad.numpy(), 1e-12, 1e-12, f'case {k} gradient')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for index, value in (((rows,), sample(r, (3,))), ((0, cols), sample(r, (2,)))):
            ours, theirs = tl.tensor(x0.copy()), torch.tensor(x0.copy())
            ours[tuple(tl.tensor(i) if isinstance(i, np.ndarray) else i for i in index)] = tl.tensor(value)
            theirs[tuple(torch.tensor(i) if isinstance(i, np.ndarray) else i for i in index)] = torch.tensor(value)
            assert np.array_equal(ours.numpy(), theirs.numpy()), index


def test_item_assignment_shape_mismatch_names_both_shapes():
    """A value that does not broadcast to the indexed elements raises ValueError naming both shapes (PyTorch:
    RuntimeError) before anything is written, recorded or not; a value with extra leading size-1 axes fits, as in
    PyTorch (values against it)."""
    need_torch()
    r = rng('setitem shapes')
    x0 = sample(r, (2, 3))
    mask = np.array([[True, False, True], [False, True, True]])
    cases = [((0,), (2,), (3,)), ((np.array([1, 0]),), (2,), (2, 3)), ((mask,), (2,), (4,)),
             ((slice(None), 1), (2, 1), (2,)), ((Ellipsis,), (3, 3), (2, 3)), ((1, 2), (2,), ())]
    for index, shape, indexed in cases:
        value = sample(r, shape)
        raises(RuntimeError, lambda: torch.tensor(x0).__setitem__(index, torch.tensor(value)))
        for grad in (False, True):
            v = tl.tensor(value, requires_grad=grad)
            x = tl.tensor(x0) * 1 if grad else tl.tensor(x0)
            version = x._version[0]
            assert_names_shapes(raises(ValueError, lambda: x.__setitem__(index, v)), shape, indexed)
            assert np.array_equal(x.numpy(), x0) and x._version[0] == version and x.shape == (2, 3), (index, grad)
    for index, shape in (((0,), (1, 1, 3)), ((slice(None), 1), (1, 2)), ((mask,), (1, 4)), ((1, 2), (1, 1))):
        value = sample(r, shape)
        ours, theirs = tl.tensor(x0.copy()), torch.tensor(x0.copy())
        ours[index], theirs[index] = tl.tensor(value), torch.tensor(value)
        assert np.array_equal(ours.numpy(), theirs.numpy()), (index, shape)


def test_single_element_index_is_a_view_as_pytorch():
    """x[i] (and x[i, j], and x[t] for a 0-d integer tensor t) selecting one element or row is a view, as in PyTorch:
    an in-place change of either shows in the other (NumPy's scalar, and its advanced index, were copies), and a
    backward that read it raises after x changes."""
    need_torch()
    for m in (tl, torch):
        t = m.tensor(np.array([[1., 2.], [3., 4.]]))
        v, w = t[1, 0], t[0]
        t *= 2
        with m.no_grad():
            v += 10
        assert v.item() == 16.0 and t.numpy()[1, 0] == 16.0 and w[1].item() == 4.0, m.__name__
        row = t[m.tensor(np.array(1))]   # a 0-d index tensor selects as its int: a view too
        with m.no_grad():
            row += 100
        assert t.numpy()[1].tolist() == [116.0, 108.0], m.__name__
    outcomes = []
    for m in (tl, torch):
        x = m.tensor(np.array([1., 2., 3.]), requires_grad=True)
        h = x * 1
        y = h[1] * h[1]   # Mul saves h[1]
        with m.no_grad():
            h += 1
        outcomes.append(outcome(m, lambda m: (y.backward(), [x])[1]))
    assert_same_outcome('a saved element changed through its tensor', *outcomes, 0, ('modified by an in-place',))


def test_view_shapes_pads_and_float16_gelu_as_pytorch():
    """view refuses memory it cannot view without a copy (RuntimeError, as PyTorch) and shares it where it can;
    negative pads crop (torch.nn.functional.pad's values and gradients), crops past an axis raise; mean and var of
    integer tensors raise TypeError (PyTorch: RuntimeError, no dtype to infer); softmax and log_softmax of empty
    tensors give empty ones; float16 gelu and its gradient compute in float32 and round once (PyTorch's values);
    'cpu:0' is the CPU; arange with a step that cannot reach its end, or bounds not finite, raises ValueError, of bools
    TypeError, and takes 0-d tensors as their numbers (an int one gives int64); linspace of an integer dtype refuses
    bounds it cannot hold; view(dtype) (PyTorch's reinterpretation of the memory) and relu of a bool tensor raise
    TypeError."""
    need_torch()
    x = tl.zeros(3, 4)
    raises(RuntimeError, lambda: torch.zeros(3, 4).T.view(12))
    raises(RuntimeError, lambda: x.T.view(12), 'view', 'reshape')
    v = x.view(2, 6)
    v[0, 0] = 9.0
    assert float(x[0, 0].item()) == 9.0, 'view shares memory'
    r = rng('pads_torch')
    x0 = r.standard_normal((2, 3, 4))
    for pad in ((-1, 0), (1, -2), (-1, -1, 2, 0), (0, 0, -2, 1)):
        xo, xt = tl.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        yo, yt = xo.pad(pad), F.pad(xt, pad)
        assert_close(yo, yt.detach().numpy(), 0, 0, f'pad {pad}')
        g = r.standard_normal(tuple(yt.shape))
        yo.backward(tl.tensor(g))
        yt.backward(torch.tensor(g))
        assert_close(xo.grad, xt.grad.numpy(), 0, 0, f'pad {pad} gradient')
    raises(ValueError, lambda: tl.tensor(x0).pad((-3, -2)), 'pad')
    for op in ('mean', 'var'):
        raises(RuntimeError, lambda: getattr(torch.tensor([1, 2, 4]), op)())
        raises(TypeError, lambda: getattr(tl.tensor(np.array([1, 2, 4])), op)(), op, 'int64')
    for op in ('softmax', 'log_softmax'):
        empty = tl.zeros(0, 3, requires_grad=True)
        y = getattr(empty, op)(0)
        y.sum().backward()
        assert y.shape == (0, 3) and empty.grad.shape == (0, 3), op
    h = np.linspace(-10, 10, 2001).astype(np.float16)
    g = rng('gelu float16').standard_normal(h.shape).astype(np.float16)
    for approximate in ('none', 'tanh'):
        x, x32, x_t, exact = (m.tensor(h.astype(d), requires_grad=True) for m, d in (
            (tl, h.dtype), (tl, np.float32), (torch, h.dtype), (torch, np.float64)))
        ours, wide, theirs, want = (m.gelu(t, approximate=approximate) for m, t in ((tl, x), (tl, x32), (F, x_t),
                                                                                   (F, exact)))
        for y, grad in ((ours, tl.tensor(g)), (wide, tl.tensor(g.astype(np.float32))), (theirs, torch.tensor(g)),
                        (want, torch.tensor(g.astype(np.float64)))):
            y.backward(grad)
        for what, a, a32, b, c in (('values', ours, wide, theirs, want), ('gradients', x.grad, x32.grad, x_t.grad,
                                                                          exact.grad)):
            a, b = to_np(a), to_np(b)
            assert float16_as_pytorch(a, b, to_np(c), size=1), f'{approximate} {what}'   # (size: 1 + tanh near 0)
            assert (a == to_np(a32).astype(np.float16)).all(), f'{approximate} {what}: not float32 rounded once'
        assert (np.signbit(to_np(ours)) == np.signbit(to_np(theirs))).all(), f'{approximate}: small negative outputs ' \
                                                                            'rounded to -0'
    assert tl.ones(2).to('cpu:0').device == 'cpu' and tl.ones(2, device='cpu:0').device == 'cpu'
    for bounds in ((5, 0), (0, 5, -1), (0, 5, 0)):   # a step that cannot reach the end: an error, not an empty range
        raises(RuntimeError, lambda: torch.arange(*bounds))
        raises(ValueError, lambda: tl.arange(*bounds), 'arange')
    assert tl.arange(0, 0).shape == (0,) and tl.arange(5, 0, -1).tolist() == [5, 4, 3, 2, 1]
    for bounds in ((0, math.inf), (0, math.nan), (math.inf, 1, -1)):   # NumPy's own errors before
        raises((RuntimeError, ValueError), lambda: torch.arange(*bounds))
        raises(ValueError, lambda: tl.arange(*bounds), 'arange', 'finite')
    raises((RuntimeError, NotImplementedError), lambda: torch.arange(3, dtype=torch.bool))
    raises(TypeError, lambda: tl.arange(3, dtype=tl.bool_), 'arange', 'bool')   # (it gave bools)
    raises(RuntimeError, lambda: torch.linspace(0, 300, 3, dtype=torch.uint8))
    raises(RuntimeError, lambda: tl.linspace(0, 300, 3, dtype=tl.uint8), 'linspace', '300')   # (it wrapped)
    for bounds, dtype in (((0, 127.9), 'int8'), ((-128.7, 0), 'int8'), ((0, 1e6), 'float16')):
        raises(RuntimeError, lambda: torch.linspace(*bounds, 3, dtype=getattr(torch, dtype)))
        raises(RuntimeError, lambda: tl.linspace(*bounds, 3, dtype=getattr(tl, dtype)), 'linspace', dtype)
    for bounds in ((3,), (3.0,), (0, 4, 1), (1, 4, 0.5), (np.int64(1), 3)):
        ours = tl.arange(*[tl.tensor(b) for b in bounds])
        theirs = torch.arange(*[torch.tensor(b) for b in bounds])
        assert same_dtype(ours, theirs) and ours.tolist() == theirs.tolist(), bounds
    for dtype in (np.int64, np.dtype(np.float32), 'float16'):
        raises(TypeError, lambda: tl.ones(2).view(dtype), 'view', 'dtype', '.to(dtype)')
    raises(RuntimeError, lambda: torch.relu(torch.tensor([True, False])))
    for relu in (tl.relu, lambda x: x.relu(), tl.ReLU()):
        raises(TypeError, lambda: relu(tl.tensor([True, False])), 'relu', 'bool')


def test_number_range_power_arange_and_pad_checks_as_pytorch():
    """As PyTorch: tl.full and clamp refuse a finite float beyond a float dtype's range (item assignment writes inf);
    a Python int outside [-2**63, 2**64) raises OverflowError in any op; an integer tensor ** a negative int raises
    RuntimeError; arange of an integer dtype truncates its bounds and step first (a step truncated to 0 raises
    ValueError); pad widths must be ints (TypeError), and pad(()) of a 0-d tensor is a copy."""
    need_torch()
    r = rng('small checks')
    for value, dtype in ((1e10, 'float16'), (-7e4, 'float16'), (65519.0, 'float16'), (1e39, 'float32'),
                         (float('inf'), 'float16'), (65504.0, 'float16'), (-3e38, 'float32'), (1e300, 'float64')):
        try:
            want = torch.full((2,), value, dtype=getattr(torch, dtype)).numpy()
        except RuntimeError:
            raises(RuntimeError, lambda: tl.full((2,), value, dtype=dtype), 'full', 'overflow')
            raises(RuntimeError, lambda: torch.zeros(2, dtype=getattr(torch, dtype)).clamp(max=value))
            raises(RuntimeError, lambda: tl.zeros(2, dtype=dtype).clamp(max=value), 'clamp', 'overflow')
        else:
            assert np.array_equal(tl.full((2,), value, dtype=dtype).numpy(), want), (value, dtype)
    ours, theirs = tl.tensor(sample(r, (3,)).astype(np.float16)), torch.tensor(sample(r, (3,)).astype(np.float16))
    with np.errstate(over='ignore'):   # NumPy warns of the inf
        ours[0], theirs[0] = 1e10, 1e10
    assert ours.numpy()[0] == theirs.numpy()[0] == np.inf
    ints, floats = r.integers(-50, 50, 4), sample(r, (4,)).astype(np.float32)
    for f in (lambda m: m.tensor(ints) + 2 ** 70, lambda m: m.tensor(floats) * 2 ** 64,
              lambda m: m.tensor(ints) == -2 ** 64, lambda m: 2 ** 70 - m.tensor(ints),
              lambda m: m.full((2,), 2 ** 70, dtype=m.float32),
              lambda m: m.where(m.tensor(ints) > 0, m.tensor(floats), 2 ** 65)):
        raises(OverflowError, lambda: f(torch))
        raises(OverflowError, lambda: f(tl), 'int too big')
    for f in (lambda m: m.tensor(ints) + 2 ** 63, lambda m: m.tensor(floats) * (2 ** 64 - 1),
              lambda m: m.tensor(ints) < 2 ** 63):
        ours, theirs = f(tl), f(torch)
        assert same_dtype(ours, theirs) and np.array_equal(ours.numpy(), theirs.numpy())
    for dtype in (np.uint8, np.int32, np.int64, np.bool_):
        a = r.integers(1, 4, 5).astype(dtype)
        for exponent in (-1, np.int64(-2)):
            raises(RuntimeError, lambda: torch.tensor(a) ** exponent)
            raises(RuntimeError, lambda: tl.tensor(a) ** exponent, 'negative integer powers', str(np.dtype(dtype)))
        for exponent in (0, 3) if dtype != np.bool_ else ():
            ours, theirs = tl.tensor(a) ** exponent, torch.tensor(a) ** exponent
            assert same_dtype(ours, theirs) and np.array_equal(ours.numpy(), theirs.numpy()), (dtype, exponent)
    for bounds, dtype in (((0.5, 5, 1.5), 'int64'), ((0, 3.5, 1.2), 'int32'), ((-0.5, 3), 'int64'), ((0.7,), 'int64'),
                          ((1.9, 5.9), 'uint8'), ((7.8, 0.5, -2.5), 'int64'), ((0.5, 5, 1.5), 'float64')):
        ours, theirs = tl.arange(*bounds, dtype=dtype), torch.arange(*bounds, dtype=getattr(torch, dtype))
        assert same_dtype(ours, theirs) and np.array_equal(ours.numpy(), theirs.numpy()), (bounds, ours, theirs)
    for bounds in ((1, 2.5, 0.5), (0, 3, 0.9), (3, 0, -0.99)):
        if torch_at_least(2, 13):   # PyTorch 2.11 divides by the truncated step (SIGFPE)
            raises(ValueError, lambda: torch.arange(*bounds, dtype=torch.int64))
        raises(ValueError, lambda: tl.arange(*bounds, dtype=tl.int64), 'arange', 'step 0', 'int64')
    x0 = sample(r, (2, 3))
    for widths in ((1.5, 1), (1, 0, 2.0, 1), (True, 1)):
        raises(TypeError, lambda: F.pad(torch.tensor(x0), widths))
        raises(TypeError, lambda: tl.tensor(x0).pad(widths), 'pad', 'int')
    assert tl.tensor(x0).pad((np.int64(1), 0)).shape == (2, 4)
    outs = []
    for m in (tl, torch):
        x = m.tensor(x0[0, 0], requires_grad=True)
        y = x.pad(()) if m is tl else F.pad(x, ())
        (y * 3).backward()
        outs.append((y.detach().numpy(), x.grad.numpy(), np.shares_memory(y.detach().numpy(), x.detach().numpy())))
    assert outs[0][0] == outs[1][0] and outs[0][1] == outs[1][1] == 3 and not outs[0][2], outs


def test_save_load_tuples_and_numpy_scalars():
    """tl.save / tl.load: NumPy scalars come back as NumPy scalars of their dtype (as torch.save keeps them, not as
    Python numbers), a namedtuple (as a dict key too) as a plain tuple: loadable, where it raised on load."""
    point = collections.namedtuple('point', 'x y')
    obj = {'f32': np.float32(0.1), 'i64': np.int64(7), 'f16': np.float16(1.5), 'nt': point(1, np.arange(2)),
           point(1, 2): 'key', 'nested': [np.bool_(True), (np.uint8(3),)]}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'obj.npz')
        tl.save(obj, path)
        back = tl.load(path)
    for k in ('f32', 'i64', 'f16'):
        assert type(back[k]) is type(obj[k]) and back[k] == obj[k], (k, type(back[k]), back[k])
    assert type(back['nt']) is tuple and back['nt'][0] == 1 and np.array_equal(back['nt'][1], np.arange(2))
    assert back[(1, 2)] == 'key'
    assert type(back['nested'][0]) is np.bool_ and type(back['nested'][1][0]) is np.uint8


def test_error_optim_step_bad_state_changes_nothing():
    """A state that step() cannot use (edited by hand) is found before any parameter moves."""
    a, b, opt = adam_after_one_step()
    opt.state[b]['exp_avg'] = tl.zeros(5, dtype=tl.float64)
    before = [to_np(a).copy(), opt.state[a]['step'].item(), opt.state[b]['step'].item()]
    assert_names_shapes(raises(ValueError, opt.step, 'parameter 1'), (5,), (2,))
    opt.state[b]['exp_avg'] = np.zeros(2)
    raises(TypeError, opt.step, 'parameter 1', 'exp_avg', 'ndarray', 'Tensor')
    opt.state[b]['exp_avg'] = tl.zeros(2, dtype=tl.float32)   # the parameter's shape, not its dtype
    raises(ValueError, opt.step, 'parameter 1', 'exp_avg', 'float32', 'float64')
    assert np.array_equal(a.numpy(), before[0])
    assert [opt.state[a]['step'].item(), opt.state[b]['step'].item()] == before[1:]


# ===== small models that must learn =====

def spirals(n, r):
    """Two interleaved 1.5-turn spirals in the plane: not linearly separable."""
    t = np.sqrt(r.uniform(0, 1, n)) * 3 * np.pi
    y = r.integers(0, 2, n)
    radius, angle = t / (1.5 * np.pi), t + y * np.pi
    x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1) + r.normal(0, 0.03, (n, 2))
    return x.astype(np.float32), y


def learn_spirals(device=None):
    x, y = spirals(400, rng('spirals'))
    tl.manual_seed(0)
    model = tl.Sequential(tl.Linear(2, 64), tl.ReLU(), tl.Linear(64, 64), tl.ReLU(), tl.Linear(64, 2))
    if device:
        model = model.to(device)
    opt = tl.Adam(model.parameters(), lr=0.01)
    xt, yt = tl.Tensor(x, device=device), tl.Tensor(y, device=device)
    accuracy = lambda: float((model(xt).argmax(axis=1).numpy() == y).mean())
    start = accuracy()
    for _ in range(300):
        opt.zero_grad()
        tl.cross_entropy(model(xt), yt).backward()
        opt.step()
    assert start < 0.75 and accuracy() > 0.95, (start, accuracy())


def test_learn_two_spirals_mlp_adam():
    learn_spirals()


def bars(n, r):
    """8x8 noisy images with one bright row (class 0) or column (class 1)."""
    y = r.integers(0, 2, n)
    x = r.normal(0, 0.3, (n, 1, 8, 8))
    pos = r.integers(1, 7, n)
    for i in range(n):
        if y[i]:
            x[i, 0, :, pos[i]] += 1.0
        else:
            x[i, 0, pos[i], :] += 1.0
    return x.astype(np.float32), y


def test_learn_conv_net_sgd_nesterov():
    (x, y), (xv, yv) = bars(128, rng('bars')), bars(128, rng('bars_val'))
    tl.manual_seed(0)
    model = tl.Sequential(tl.Conv2d(1, 8, 3, padding=1), tl.BatchNorm2d(8), tl.GELU(), tl.MaxPool2d(2),
                          tl.Flatten(), tl.Linear(128, 2))
    opt = tl.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = tl.cross_entropy(model(tl.Tensor(x)), tl.Tensor(y), label_smoothing=0.1)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    val = float((model(tl.Tensor(xv)).argmax(axis=1).numpy() == yv).mean())
    assert losses[-1] < losses[0] / 3 and val > 0.95, (losses[0], losses[-1], val)


# ===== GPU: the same computations on 'cuda' and 'cpu' =====

for _o in OPS:
    register(f'test_gpu_{_o.name}', lambda o=_o: check_op_gpu(o))
for _name in DTYPE_OPS:
    _o = next(o for o in OPS if o.name == _name)
    register(f'test_gpu_float16_{_name}', lambda o=_o: check_dtype(o, np.float16, device='cuda'))
for _l in LAYERS:
    register(f'test_gpu_layer_{_l.name}', lambda s=_l: check_layer_gpu(s))
for _name, _cls, _kw, _groups in OPTIMS:
    register(f'test_gpu_optim_{_name}', lambda c=_cls, kw=_kw, g=_groups: check_optim_gpu(c, kw, g))
    if _cls == 'SGD':   # (Adam's float16 squares underflow here, as PyTorch's do: eps 1e-8 is 0 in float16)
        register(f'test_gpu_optim_{_name}_float16',
                 lambda c=_cls, kw=_kw, g=_groups: check_optim_gpu(c, kw, g, np.float16))


def test_gpu_clip_grad_matches_cpu():
    """clip_grad_norm_ (norm types 1, 2, 3.5, inf; clipping and not), get_total_norm and clip_grad_value_ on the GPU
    against the CPU (float64, float32, float16, mixed): the norm a 0-d tensor on the GPU in the CPU's dtype, norms and
    gradients within a reduction's rounding. Gradients on the CPU and on the GPU together: the norm on the first
    one's device, the CPU's numbers, each gradient clipped where it is."""
    need_cuda()
    rtols = {np.float64: 1e-12, np.float32: 2e-6, np.float16: 1e-3}
    for name, dtypes in CLIP_DTYPES.items():
        rtol = rtols[min(dtypes, key=lambda d: np.dtype(d).itemsize)]
        for norm_type in (1, 2.0, 3.5, math.inf):
            arrays = clip_arrays(('clip_gpu', name, norm_type), dtypes)
            for max_norm in (0.3, 1e3):
                msg = f'{name} norm {norm_type} max_norm {max_norm}'
                cpu, gpu = clip_params(arrays), clip_params(arrays, 'cuda')
                want, total = tl.clip_grad_norm_(cpu, max_norm, norm_type), tl.clip_grad_norm_(gpu, max_norm, norm_type)
                assert total.device == 'cuda:0' and total.shape == () and total.dtype == want.dtype, msg
                assert_close(total, want, rtol, 0, msg)
                assert all(p.grad is None or p.grad.device == 'cuda:0' for p in gpu), msg
                assert_grads_equal(gpu, cpu, msg, 2 * rtol)
                got = tl.get_total_norm([p.grad for p in gpu[:-1]], norm_type)
                assert_close(got, tl.get_total_norm([p.grad for p in cpu[:-1]], norm_type), rtol, 0, msg)
            cpu, gpu = clip_params(arrays), clip_params(arrays, 'cuda')
            for params in (cpu, gpu):
                tl.clip_grad_value_(params, 0.5)
            assert_grads_equal(gpu, cpu, f'{name} clip_grad_value_')
    arrays = clip_arrays('clip_two_devices', [np.float32] * 4)
    for first in ('cpu', 'cuda:0'):
        second = 'cuda:0' if first == 'cpu' else 'cpu'
        cpu = clip_params(arrays)
        mixed = clip_params(arrays[:2], first) + clip_params(arrays[2:], second)
        want, total = tl.clip_grad_norm_(cpu, 0.3), tl.clip_grad_norm_(mixed, 0.3)
        assert total.device == first and [p.grad.device for p in mixed[:-1]] == [first] * 2 + [second] * 2, first
        assert_close(total, want, 2e-6, 0, first)
        assert_grads_equal(mixed, cpu, f'first on {first}', 4e-6)


def test_gpu_device_attributes():
    need_cuda()
    a = sample(rng('g1'), (2, 3)).astype(np.float32)
    t = tl.Tensor(a, device='cuda:0')
    assert t.device == 'cuda:0' and tl.Tensor(a, device='cuda').device == 'cuda:0'
    assert type(t.data).__module__.startswith('cupy') and isinstance(t.numpy(), np.ndarray)
    assert_close(t.numpy(), a, 0, 0)
    assert tl.zeros(2, 3, device='cuda').device == 'cuda:0' and tl.randn(4, device='cuda').device == 'cuda:0'
    assert t.cpu().device == 'cpu' and t.cpu().cuda().device == 'cuda:0'
    tl.manual_seed(5)
    r1 = tl.randn(8, device='cuda').numpy()
    tl.manual_seed(5)
    assert np.array_equal(r1, tl.randn(8, device='cuda').numpy())


def test_gpu_to_cuda_keeps_autograd_link():
    need_cuda()
    a, w = sample(rng('g2'), (3, 2)), upstream(0, (3, 2))
    x = tl.Tensor(a, requires_grad=True)
    (x.to('cuda').exp() * tl.Tensor(w, device='cuda')).sum().backward()
    assert x.grad.device == 'cpu'
    assert_close(x.grad, np.exp(a) * w, 1e-10, 1e-12)
    g = tl.Tensor(a, requires_grad=True, device='cuda')
    (g.cpu() * tl.Tensor(w)).sum().backward()
    assert g.grad.device == 'cuda:0'
    assert_close(g.grad, w, 0, 0)


def test_gpu_mixing_devices_raises():
    need_cuda()
    a, b = tl.Tensor(sample(rng('g3'), (3,))), tl.Tensor(sample(rng('g4'), (3,)), device='cuda')
    for fn in (lambda: a + b, lambda: b * a, lambda: tl.cat([a, b]), lambda: tl.where(a > 0, a, b)):
        raises(RuntimeError, fn, 'cpu', 'cuda')


def test_gpu_fused_kernels_listed():
    """fused_kernels() names kernels.cu's loaded kernels: relu_fwd (just used) and relu_bwd among them, each name
    a function of kernels.cu, none twice."""
    need_cuda()
    tl.Tensor(sample(rng('g5'), (1024,)).astype(np.float32), device='cuda').relu().sum().item()
    names = tl.fused_kernels()
    with open(os.path.join(os.path.dirname(os.path.abspath(tl.__file__)), 'kernels.cu')) as f:
        source = f.read()
    assert {'relu_fwd', 'relu_bwd'} <= set(names) and len(set(names)) == len(names), names
    assert all(re.search(rf'\b{name}\s*\(', source) for name in names), names


def test_gpu_save_load():
    need_cuda()
    tl.manual_seed(0)
    net = build_net(tl).cuda()
    net(tl.Tensor(net_input(), device='cuda'))
    sd = net.state_dict()
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'gpu.npz')
        tl.save(sd, path)
        back = build_net(tl).cuda()
        back.load_state_dict(tl.load(path, device='cuda'))
    net.eval(), back.eval()
    x = tl.Tensor(net_input(), device='cuda')
    assert_close(back(x), net(x), 1e-6, 1e-6)


def test_gpu_module_containers_cuda():
    """.cuda() moves the children of a ModuleList and a ModuleDict and a non-persistent buffer (and .cpu() back); the
    model gives the CPU's output and gradients there, and its state dict still leaves the buffer out."""
    need_cuda()
    tl.manual_seed(0)
    net, cpu = build_container_net(tl), build_container_net(tl)
    cpu.load_state_dict(net.state_dict())
    assert net.cuda() is net
    tensors = list(net.parameters()) + list(net.buffers())
    assert len(tensors) == 9 and all(t.device == 'cuda:0' for t in tensors), [t.device for t in tensors]
    assert net.layers[3] is net.layers[2] and net.heads['logits'].weight.device == net.scale.device == 'cuda:0'
    x = sample(rng('gpu containers'), (8, 3)).astype(np.float32)
    out, out_c = net(tl.Tensor(x, device='cuda')), cpu(tl.Tensor(x))
    assert out.device == 'cuda:0'
    assert_close(out, out_c, 1e-5, 1e-6)
    out.sum().backward(), out_c.sum().backward()
    for (n, p), p_c in zip(net.named_parameters(), cpu.parameters(), strict=True):
        assert p.grad.device == 'cuda:0'
        assert_close(p.grad, p_c.grad, 1e-5, 1e-6, n)
    assert 'scale' not in net.state_dict() and list(net.state_dict()) == list(cpu.state_dict())
    assert net.half().scale.dtype == np.float16 and net.cpu().scale.device == 'cpu'
    assert all(t.device == 'cpu' for t in net.parameters())

def test_gpu_dropout():
    need_cuda()
    tl.manual_seed(0)
    x = tl.ones(20000, device='cuda', requires_grad=True)
    y = tl.dropout(x, 0.25)
    y.sum().backward()
    kept = y.numpy() != 0
    assert y.device == 'cuda:0' and abs(1 - kept.mean() - 0.25) < 0.015
    assert_close(x.grad, np.where(kept, 1 / 0.75, 0), 1e-6, 0)


def test_gpu_learn_two_spirals():
    need_cuda()
    learn_spirals('cuda')


# ===== fused kernels (kernels.cu): each against its composed CuPy path and the CPU path =====
# A 'fused' test runs an op with kernels.cu's kernels and again composed (the kernels hidden), a
# 'composed' test only composed, as when kernels.cu is missing; both compare with the CPU. On the
# GPU every new allocation starts as 0xFF bytes (NaN in each float dtype), so an element a kernel
# leaves unwritten fails.

cp = tl.cp   # CuPy, None where it is not importable
FLOATS = (np.float16, np.float32, np.float64)
BN_KERNELS = ('bn_fwd_stats', 'bn_fwd_apply', 'bn_bwd_reduce', 'bn_bwd_dx')
BN_TRAIN_KERNELS = ('bn_fwd_train', 'bn_bwd_train')   # training's fused passes, where the layout allows
FUSED_TOL = {np.dtype(np.float16): 4e-3, np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-9}  # of max |ref|


@contextlib.contextmanager
def poisoned():
    """Every CuPy allocation inside starts as 0xFF bytes: NaN in float16, float32 and float64."""
    base = cp.cuda.get_allocator()

    def malloc(size):
        memory = base(size)
        memory.memset_async(0xFF, size)
        return memory
    with cp.cuda.using_allocator(malloc):
        yield


@contextlib.contextmanager
def kernels_hidden(names=None):
    """tinygrad_lite as if kernels.cu lacked the kernels `names` (None: as if it were missing) on the current GPU."""
    device = cp.cuda.runtime.getDevice()
    loaded = tl._load_kernels()
    tl._loaded_kernels[device] = {} if names is None else {e: k for e, k in loaded.items() if e.split('<')[0] not in names}
    forget_kernels()
    try:
        yield
    finally:
        tl._loaded_kernels[device] = loaded
        forget_kernels()


def forget_kernels():
    """Clears tinygrad_lite's caches of looked-up kernels: the lookups and the launch configurations holding them."""
    tl._kernels.clear()
    tl._bn_config.cache_clear()
    tl._bn_train_config.cache_clear()
    tl._gru_layouts.clear()
    tl._pool_configs.clear()


def composed_only():
    """tinygrad_lite as if kernels.cu were missing on the current GPU: every op composes CuPy ops."""
    return kernels_hidden()


SM90A_CONVS = ('conv_implicit_tma', 'conv_implicit_wg', 'conv_implicit_wg_dw')


def without_wgmma(names=SM90A_CONVS):
    """The implicit-GEMM convs without the sm_90a kernels `names` where the GPU has them: without all three, on
    conv_implicit_fwd and conv_implicit_dw (mma.sync); without conv_implicit_tma, the forward on conv_implicit_wg at
    every channel count. Tests run each; a GPU without sm_90a's kernels skips these runs."""
    need_cuda()
    if 'conv_implicit_wg' not in tl.fused_kernels():
        raise Skip('no sm_90a kernels on this GPU: the mma.sync kernels are what the other tests ran')
    return kernels_hidden(set(names))


def run_without_wgmma(fn, names=SM90A_CONVS):
    with without_wgmma(names):
        fn()


@contextlib.contextmanager
def gpu_path(path, kernels=()):
    """The body on the 'fused' path (kernels.cu loaded, with every name in `kernels`) or the 'composed'
    one, every allocation poisoned."""
    if path == 'fused':
        missing = sorted(set(kernels) - set(tl.fused_kernels()))
        assert not missing, f'kernels.cu did not load {missing}'
        with poisoned():
            yield
    else:
        with composed_only(), poisoned():
            assert tl.fused_kernels() == [], 'composed_only() left kernels loaded'
            yield


def run_on(path, kernels, fn):
    with gpu_path(path, kernels):
        return fn()


def gpu_paths(mode, kernels, fn):
    """{path: fn()} for each GPU path a `mode` ('fused' or 'composed') test checks."""
    return {path: run_on(path, kernels, fn) for path in (('fused', 'composed') if mode == 'fused' else ('composed',))}


def host(a):
    return cp.asnumpy(a) if cp is not None and isinstance(a, cp.ndarray) else np.asarray(a)


def on_gpu(a, layout='contiguous'):
    """A copy of NumPy array a on the GPU, in memory `layout`: 'contiguous'; 'offset1', 'offset3' (that
    many elements into a larger buffer: not 16-byte aligned); 'channels_last' (4-d, NHWC memory);
    'channels_last_offset1' (that, one element into a larger buffer);
    'step' (every other element of a wider buffer); 'reversed' (the last axis in reverse memory order: a negative
    stride)."""
    if layout.startswith('offset'):
        k = int(layout[6:])
        flat = cp.zeros(a.size + k, a.dtype)
        flat[k:] = cp.asarray(a.reshape(-1))
        return flat[k:].reshape(a.shape)
    if layout == 'channels_last':
        return cp.ascontiguousarray(cp.asarray(a).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    if layout == 'channels_last_offset1':
        return channels_last_at(a, 1)
    if layout == 'step':
        wide = cp.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        wide[..., ::2] = cp.asarray(a)
        return wide[..., ::2]
    if layout == 'reversed':
        return cp.asarray(np.ascontiguousarray(a[..., ::-1]))[..., ::-1]
    assert layout == 'contiguous', layout
    return cp.asarray(a)


def channels_last_at(a, offset):
    """NCHW-shaped NumPy a on the GPU in channels-last memory starting `offset` elements into a buffer."""
    flat = cp.zeros(a.size + offset, a.dtype)
    flat[offset:] = cp.asarray(a.transpose(0, 2, 3, 1)).reshape(-1)
    n, c, h, w = a.shape
    return flat[offset:].reshape(n, h, w, c).transpose(0, 3, 1, 2)


def assert_matches(got, want, tol, what):
    """got has want's dtype and shape, NaN exactly where want has NaN (an unwritten element reads as
    NaN), want's infinities, and elsewhere max |got - want| <= tol * max |want| (tol 0: equal values)."""
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f'{what}: {got.dtype} {got.shape}, expected {want.dtype} {want.shape}'
    nan = np.isnan(got) != np.isnan(want)
    assert not nan.any(), (f'{what}: NaN mismatch at {nan.sum()}/{nan.size} elements (left unwritten?), '
                           f'first at {np.argwhere(nan)[0].tolist()}')
    inf = np.isinf(got) | np.isinf(want)
    assert (got[inf] == want[inf]).all(), f'{what}: infinities differ: {got[inf][:4]} vs {want[inf][:4]}'
    known = np.isfinite(want)
    g, w = got[known].astype(np.float64), want[known].astype(np.float64)
    if tol == 0:
        bad = g != w
        assert not bad.any(), f'{what}: {bad.sum()}/{bad.size} elements differ, e.g. {g[bad][:3]} vs {w[bad][:3]}'
    else:
        err, scale = np.abs(g - w).max(initial=0.0), np.abs(w).max(initial=0.0)
        assert err <= tol * scale, f'{what}: max error {err:.3g} > {tol:g} x max |expected| {scale:.3g}'


def compare_paths(got, want, tol, what):
    """Each GPU path's results against the CPU's and the fused path's against the composed path's;
    tol(array) gives the tolerance of assert_matches."""
    pairs = [(path, res, 'cpu', want) for path, res in got.items()]
    if 'fused' in got:
        pairs.append(('fused', got['fused'], 'composed', got['composed']))
    for path, res, ref_path, ref in pairs:
        for k, v in ref.items():
            assert_matches(res[k], v, tol(v), f'{what}: {k} of the {path} path vs the {ref_path} path')


# ReLU: forward, and backward through the op itself, whose gradient may have another dtype than its output

def relu_case(shape, layout='contiguous', grad_layout=None):
    """The shape, and the layouts of x and of the gradient on the GPU (see on_gpu)."""
    return shape, layout, grad_layout or layout


RELU_FAMILIES = {
    'odd': [relu_case((1,)), relu_case((7,)), relu_case((4099,)), relu_case((3, 5, 7, 11))],
    'misaligned': [relu_case((4099,), 'offset1'), relu_case((65537,), 'offset3', 'contiguous'),
                   relu_case((65537,), 'contiguous', 'offset1'), relu_case((3, 5, 7, 11), 'offset1')],
    'strided': [relu_case((3, 5, 7, 11), 'channels_last'), relu_case((3, 5, 7, 11), 'channels_last', 'contiguous'),
                relu_case((5, 3, 9, 7), 'step')],
    'large': [relu_case((3_000_017,))],   # several rounds of the grid-stride loop
}


def with_specials(a):
    """Contiguous a with NaN, infinities and signed zeros sprinkled through it, except in the first and
    the last 16 elements (where a NaN would hide an element left unwritten)."""
    f = a.reshape(-1)[16:-16]
    f[::97], f[5::101], f[7::103], f[9::107], f[11::109] = np.nan, -0.0, np.inf, -np.inf, 0.0
    return a


def relu_results(x, g=None):
    op = tl.Relu([])
    out = {'output': host(op.forward(x))}
    if g is not None:
        out['dx'] = host(op.backward(g))
    return out


def check_relu(mode, family, dtype, grad_dtype=None):
    need_cuda()
    kernels = ('relu_fwd',) if grad_dtype is None else ('relu_fwd', 'relu_bwd')
    for shape, layout, grad_layout in RELU_FAMILIES[family]:
        r = rng(('relu', np.dtype(dtype).name, grad_dtype and np.dtype(grad_dtype).name, shape, layout, grad_layout))
        x = with_specials(r.standard_normal(shape).astype(dtype))
        g = None if grad_dtype is None else np.roll(with_specials(r.standard_normal(shape).astype(grad_dtype)), 5)
        want = relu_results(x, g)
        assert g is None or want['dx'].dtype == grad_dtype, f'CPU gradient of dtype {want["dx"].dtype}'
        on = on_gpu(x, layout), None if g is None else on_gpu(g, grad_layout)
        what = f'{shape}, x {layout}' + ('' if g is None else f', gradient {grad_layout}')
        compare_paths(gpu_paths(mode, kernels, lambda: relu_results(*on)), want, lambda a: 0, what)


RELU_NAN_X = [-2.0, -0.0, 0.0, 1.5, np.inf, np.nan, -1.0, 3.0]
RELU_NAN_G = [np.nan, np.nan, np.nan, np.nan, np.nan, 5.0, np.inf, 4.0]
RELU_NAN_Y = [0.0, 0.0, 0.0, 1.5, np.inf, np.nan, 0.0, 3.0]
RELU_NAN_DX = [0.0, 0.0, 0.0, np.nan, np.nan, 5.0, 0.0, 4.0]   # out <= 0 gives 0 whatever the gradient


def check_relu_nan_grad(path, dtype):
    """Hand-written values on the CPU or a GPU path: through the Tensor API, then through the op with a
    gradient of each float dtype (the gradient's dtype is kept)."""
    device = 'cpu' if path == 'cpu' else 'cuda'
    if device == 'cuda':
        need_cuda()
    x, results = np.array(RELU_NAN_X, dtype), []
    with contextlib.nullcontext() if path == 'cpu' else gpu_path(path, ('relu_fwd', 'relu_bwd')):
        t = tl.Tensor(x, requires_grad=True, device=device)
        y = t.relu()
        y.backward(tl.Tensor(np.array(RELU_NAN_G, dtype), device=device))
        results.append(('Tensor.relu', y.numpy(), t.grad.numpy(), dtype))
        for grad_dtype in FLOATS:
            op = tl.Relu([])
            y = host(op.forward(tl.Tensor(x, device=device).data))
            dx = host(op.backward(tl.Tensor(np.array(RELU_NAN_G, grad_dtype), device=device).data))
            results.append((f'Relu op, {np.dtype(grad_dtype).name} gradient', y, dx, grad_dtype))
    for how, y, dx, grad_dtype in results:
        assert_matches(y, np.array(RELU_NAN_Y, dtype), 0, f'{how}: output')
        assert_matches(dx, np.array(RELU_NAN_DX, grad_dtype), 0, f'{how}: gradient')


# BatchNorm, plain and fused with ReLU or GELU, training and eval, through tl.batch_norm

def bn_case(shape, layout='contiguous', stats='same', grad_layout=None):
    """x's shape, the layouts of x and of dy on the GPU, and the running statistics' dtype: 'same' as the
    statistics' (float64 for float64 x, else float32) or 'other'."""
    return shape, layout, grad_layout or layout, stats


BN_FAMILIES = {
    'nc': [bn_case((37, 11)), bn_case((300, 70))],   # S = 1
    'ncl': [bn_case((7, 5, 13)), bn_case((1000, 6, 5)), bn_case((3, 4, 40)), bn_case((5, 3, 45))],
    '2d_small': [bn_case((5, 6, 3, 3)), bn_case((6, 7, 1, 1)), bn_case((200, 5, 3, 3))],   # S < 32
    '2d': [bn_case((5, 3, 7, 9)), bn_case((4, 6, 8, 8))],   # S >= 32: odd, and in 16-byte packs
    'layouts': [bn_case((4, 6, 8, 8), 'offset1'), bn_case((5, 6, 3, 3), 'offset1'), bn_case((37, 11), 'offset1'),
                bn_case((3, 4, 40), 'offset3'), bn_case((4, 6, 5, 7), 'channels_last'),
                bn_case((3, 6, 5, 7), 'channels_last', grad_layout='contiguous'), bn_case((5, 6, 7, 9), 'step')],
    'stats_dtype': [bn_case((7, 5, 13), stats='other'), bn_case((4, 6, 8, 8), stats='other')],
    'large': [bn_case((64, 40, 33, 33)), bn_case((32, 8, 32, 32)), bn_case((9, 4, 48, 48))],   # several chunks per
    # channel; segments of more 16-byte packs than a block has threads, chunks starting inside them
    # S = 1 with rows of whole 16-byte packs (kernels.cu's rows mode where aligned): pack columns that
    # divide a block or not (idle threads), more channels than a block has threads, several chunks
    'rows': [bn_case((300, 48)), bn_case((50, 264)), bn_case((64, 32, 9, 9), 'channels_last'),
             bn_case((6, 24, 5, 7), 'channels_last'), bn_case((9, 64, 3, 5), 'channels_last', grad_layout='contiguous'),
             bn_case((40, 48), 'offset1')],
}


def bn_arrays(key, shape, dtype, stats, training, act):
    """x (per-channel means in [-3, 3], 20 for channel 0, spreads in [0.5, 2]), weight (some negative),
    bias, running statistics near the batch's, and dy: 0 where a ReLU's pre-activation is so near 0 that
    rounding could flip its mask between two implementations."""
    r, c = rng(key), shape[1]
    acc = np.float64 if dtype == np.float64 else np.float32
    stat = acc if stats == 'same' else np.float32 if acc == np.float64 else np.float64
    along = (1, c) + (1,) * (len(shape) - 2)
    centre, spread = r.uniform(-3, 3, c), r.uniform(0.5, 2, c)
    centre[0] = 20
    x = (r.standard_normal(shape) * spread.reshape(along) + centre.reshape(along)).astype(dtype)
    w = (r.uniform(0.5, 1.5, c) * np.where(np.arange(c) % 3 == 1, -1, 1)).astype(acc)
    b = r.uniform(-0.5, 0.5, c).astype(acc)
    rm, rv = (centre + r.uniform(-0.3, 0.3, c)).astype(stat), (spread ** 2 * r.uniform(0.7, 1.3, c)).astype(stat)
    dy = r.standard_normal(shape)
    if act == 'relu':
        x64, axes = x.astype(np.float64), (0,) + tuple(range(2, len(shape)))
        mean, var = (x64.mean(axes), x64.var(axes)) if training else (rm.astype(np.float64), rv.astype(np.float64))
        pre = (x64 - mean.reshape(along)) / np.sqrt(var.reshape(along) + 1e-5) * w.reshape(along) + b.reshape(along)
        dy[np.abs(pre) < 1e-3] = 0
    return x, w, b, rm, rv, dy.astype(dtype)


def bn_results(x, w, b, rm, rv, dy, training, act):
    """batch_norm forward and backward on the arrays' device: output, gradients and running statistics."""
    xt, wt, bt = (tl.Tensor(a, requires_grad=True) for a in (x, w, b))
    rmt, rvt = tl.Tensor(rm.copy()), tl.Tensor(rv.copy())
    y = tl.batch_norm(xt, rmt, rvt, wt, bt, training=training, momentum=0.1, eps=1e-5, activation=act)
    y.backward(tl.Tensor(dy))
    return {'output': y.numpy(), 'dx': xt.grad.numpy(), 'dweight': wt.grad.numpy(), 'dbias': bt.grad.numpy(),
            'running_mean': rmt.numpy(), 'running_var': rvt.numpy()}


def check_bn(mode, act, training, dtype, family):
    need_cuda()
    acc = np.dtype(np.float64 if dtype == np.float64 else np.float32)
    kernels = BN_KERNELS if training else BN_KERNELS[1:]
    for shape, layout, grad_layout, stats in BN_FAMILIES[family]:
        key = ('bn', act, training, np.dtype(dtype).name, shape, layout, grad_layout, stats)
        x, w, b, rm, rv, dy = bn_arrays(key, shape, dtype, stats, training, act)
        want = bn_results(x, w, b, rm, rv, dy, training, act)
        on = on_gpu(x, layout), cp.asarray(w), cp.asarray(b), cp.asarray(rm), cp.asarray(rv), on_gpu(dy, grad_layout)
        got = gpu_paths(mode, kernels, lambda: bn_results(*on, training, act))
        if mode == 'fused' and training:   # the two-kernel passes where the fused training passes would run
            with kernels_hidden(BN_TRAIN_KERNELS), poisoned():
                got['fused, two kernels a pass'] = bn_results(*on, training, act)
        what = f'{shape}, x {layout}, dy {grad_layout}, running statistics {rm.dtype}'
        if not training:
            for path, res in dict(got, cpu=want).items():
                assert_matches(res['running_mean'], rm, 0, f'{what}: running_mean of the {path} path (eval)')
                assert_matches(res['running_var'], rv, 0, f'{what}: running_var of the {path} path (eval)')
        compare_paths(got, want, lambda a: max(FUSED_TOL[a.dtype], FUSED_TOL[acc]), what)


for _mode in ('fused', 'composed'):
    for _dt in FLOATS:
        _n = np.dtype(_dt).name
        register(f'test_gpu_{_mode}_relu_nan_grad_{_n}', lambda m=_mode, dt=_dt: check_relu_nan_grad(m, dt))
        for _fam in RELU_FAMILIES:
            register(f'test_gpu_{_mode}_relu_fwd_{_n}_{_fam}', lambda m=_mode, f=_fam, dt=_dt: check_relu(m, f, dt))
            for _gdt in FLOATS:
                register(f'test_gpu_{_mode}_relu_bwd_grad_{np.dtype(_gdt).name}_out_{_n}_{_fam}',
                         lambda m=_mode, f=_fam, dt=_dt, g=_gdt: check_relu(m, f, dt, g))
    for _act in (None, 'relu', 'gelu'):
        for _training in (True, False):
            for _dt in FLOATS:
                for _fam in BN_FAMILIES:
                    register(f'test_gpu_{_mode}_bn{"_" + _act if _act else ""}_{"train" if _training else "eval"}'
                             f'_{np.dtype(_dt).name}_{_fam}',
                             lambda m=_mode, a=_act, t=_training, dt=_dt, f=_fam: check_bn(m, a, t, dt, f))
for _dt in FLOATS:
    register(f'test_relu_nan_grad_cpu_{np.dtype(_dt).name}', lambda dt=_dt: check_relu_nan_grad('cpu', dt))


def bn_train_config(name, dtype, act, shape):
    """tinygrad_lite's launch configuration of fused training pass `name` for an NCHW x of `shape`."""
    rows = (shape[0], shape[1], math.prod(shape[2:]))
    config = tl._bn_train_config(name, np.dtype(dtype), act, rows, cp.cuda.runtime.getDevice())
    assert config is not None, f'{name} does not run at {shape}'
    return config


@contextlib.contextmanager
def bn_fused_passes_only():
    """Inside, BatchNorm's two-kernel passes raise: what runs there ran on the fused training passes."""
    def refused(name, *args, **kwargs):
        raise AssertionError(f'{name} launched where the fused training passes should run')
    with mock.patch.object(tl, '_bn_launch', refused):
        yield


def check_bn_train_against_two_kernels(shape, dtype, act):
    """batch_norm's training fwd+bwd on the fused training passes (asserted), on the two-kernel passes and on the
    CPU; the two GPU paths also against each other, closely (the same arithmetic but for the order of the folds)."""
    x, w, b, rm, rv, dy = bn_arrays(('bn train', shape, np.dtype(dtype).name, act), shape, dtype, 'same', True, act)
    want = bn_results(x, w, b, rm, rv, dy, True, act)
    on = cp.asarray(x), cp.asarray(w), cp.asarray(b), cp.asarray(rm), cp.asarray(rv), cp.asarray(dy)
    with bn_fused_passes_only():
        got = {'fused passes': run_on('fused', BN_KERNELS + BN_TRAIN_KERNELS, lambda: bn_results(*on, True, act))}
    with kernels_hidden(BN_TRAIN_KERNELS), poisoned():
        got['two kernels a pass'] = bn_results(*on, True, act)
    what = f'{shape} {act}'
    compare_paths(got, want, lambda a: max(FUSED_TOL[a.dtype], FUSED_TOL[np.dtype(np.float32)]), what)
    for k, v in got['two kernels a pass'].items():
        assert_matches(got['fused passes'][k], v, 2e-3 if v.dtype == np.float16 else 1e-5,
                       f'{what}: {k} of the fused passes vs the two-kernel passes')


def check_bn_train_beyond_chip(dtype, act):
    """The fused training passes over a tensor larger than their blocks keep on chip (the batch doubled until so,
    asserted): each thread's last units come from memory again, the first from registers and shared memory."""
    need_cuda()
    shape, width = (32, 64, 32, 32), 16 // np.dtype(dtype).itemsize

    def kept_all(name):
        chunks, su = bn_train_config(name, dtype, act, shape)[4:]
        units = shape[0] * shape[2] * shape[3] // width
        return -(-units // (chunks * tl._BLOCK)) <= tl._BN_KEPT_REGS[name][tl._C_TYPES[np.dtype(dtype)]] + su
    while any(kept_all(name) for name in BN_TRAIN_KERNELS):
        shape = (2 * shape[0],) + shape[1:]
    check_bn_train_against_two_kernels(shape, dtype, act)


def check_bn_train_many_channels(dtype, act):
    """The fused training passes with more channels than resident blocks (asserted): blocks take several channels
    one after another."""
    need_cuda()
    shape = (3, 2000, 8, 8)
    for name in BN_TRAIN_KERNELS:
        blocks, chunks = bn_train_config(name, dtype, act, shape)[1:5:3]
        assert blocks < shape[1] and chunks == 1, f'{name}: {blocks} blocks of {chunks} chunks for {shape[1]} channels'
    check_bn_train_against_two_kernels(shape, dtype, act)


for _dt in (np.float16, np.float32):
    for _act in (None, 'relu'):
        _name = f'{np.dtype(_dt).name}{"_" + _act if _act else ""}'
        register(f'test_gpu_bn_train_beyond_chip_{_name}', lambda dt=_dt, a=_act: check_bn_train_beyond_chip(dt, a))
        register(f'test_gpu_bn_train_many_channels_{_name}', lambda dt=_dt, a=_act: check_bn_train_many_channels(dt, a))


# Pooling and cross-entropy, forward and backward, in the layouts their kernels meet
POOL_CASES = [   # x's shape, kernel, stride, layout on the GPU
    ((2, 16, 9, 9), 2, 2, 'channels_last'),   # 16-byte packs; odd size: the last row and column feed no window
    ((1, 24, 7, 10), 3, 2, 'channels_last'),   # 3x3 windows (the forward's run-time window), overlapping
    ((3, 5, 7, 7), 2, 1, 'channels_last'),     # overlapping windows; 5 channels: no packs
    ((2, 8, 6, 7), 2, 1, 'channels_last'),     # overlapping 2x2 windows in packs: max-pool's 2-bit taps
    ((2, 3, 11, 8), (2, 3), (1, 2), 'contiguous'),   # NCHW
    ((1, 8, 8, 9), 2, 3, 'channels_last'),     # stride > kernel: rows and columns between windows
    ((1, 8, 6, 6), 2, 2, 'offset1'),           # NCHW memory at an odd offset
    ((2, 3, 6, 7), 2, 2, 'step'),              # neither layout: the forward runs on a contiguous copy
    ((2, 3, 6, 7), 2, 2, 'reversed'),          # a negative stride: the same
    ((2, 16, 6, 6), 2, 2, 'channels_last'),    # 16-byte packs, remembered for this shape ...
    ((2, 16, 6, 6), 2, 2, 'channels_last_offset1')]   # ... and not taken for the same shape off 16-byte boundaries


def pool_results(op, x, dy, kernel, stride):
    xt = tl.Tensor(x, requires_grad=True)
    y = getattr(tl, op)(xt, kernel, stride)
    y.backward(tl.Tensor(dy))
    with tl.no_grad():   # the forward that keeps nothing for a backward
        unrecorded = getattr(tl, op)(tl.Tensor(x), kernel, stride)
    return {'output': y.numpy(), 'dx': xt.grad.numpy(), 'output without recording': unrecorded.numpy()}


def check_pool(mode, op, dtype):
    need_cuda()
    for shape, kernel, stride, layout in POOL_CASES:
        r = rng(('pool', op, np.dtype(dtype).name, shape))
        (kh, kw), (sh, sw) = tl._pair(kernel), tl._pair(stride)
        x = r.standard_normal(shape).astype(dtype)
        dy = r.standard_normal(shape[:2] + ((shape[2] - kh) // sh + 1, (shape[3] - kw) // sw + 1)).astype(dtype)
        want = pool_results(op, x, dy, kernel, stride)
        on = on_gpu(x, layout), on_gpu(dy, layout)
        got = gpu_paths(mode, (op + '_fwd', op + '_bwd'), lambda: pool_results(op, *on, kernel, stride))
        compare_paths(got, want, lambda a: FUSED_TOL[a.dtype], f'{op} {shape} kernel {kernel} stride {stride} {layout}')


def test_gpu_max_pool2d_taps_read_by_a_narrower_backward():
    """max_pool2d's forward stores 2-bit window taps when it runs packs of 4 or more elements; a gradient at
    an odd offset (channels-last) makes the backward run element by element, reading them one by one."""
    need_cuda()
    r = rng('pool taps')
    x, dy = r.standard_normal((2, 16, 6, 7)).astype(np.float16), r.standard_normal((2, 16, 3, 3)).astype(np.float16)
    want = pool_results('max_pool2d', x, dy, 2, 2)
    dy_odd = channels_last_at(dy, 1)   # 2 bytes past alignment
    got = gpu_paths('fused', ('max_pool2d_fwd', 'max_pool2d_bwd'),
                    lambda: pool_results('max_pool2d', on_gpu(x, 'channels_last'), dy_odd, 2, 2))
    compare_paths(got, want, lambda a: FUSED_TOL[a.dtype], 'max_pool2d with a gradient at an odd offset')


CONV_CASES = [   # x's shape, weight's shape, stride, padding, bias, x's layout on the GPU
    ((3, 3, 9, 9), (24, 3, 2, 2), 1, 0, True, 'contiguous'),    # train_cifar's whitening conv: NCHW images, odd size
    ((2, 3, 7, 7), (5, 3, 3, 3), 2, 1, True, 'channels_last'),  # direct kernels (windows of <= 32): stride 2, 5 outputs
    ((1, 2, 6, 5), (20, 2, 4, 4), 1, 2, False, 'offset1'),      # direct, a window of 32, unaligned x, 20 outputs
    ((2, 24, 7, 7), (16, 24, 3, 3), 1, 1, False, 'channels_last'),   # its 3x3 convs: 16-byte packs in float16
    ((1, 16, 5, 5), (8, 16, 3, 3), 1, 1, False, 'channels_last'),    # batch 1
    ((2, 5, 7, 6), (3, 5, 3, 3), 2, 1, True, 'channels_last'),       # stride 2; 5 channels: no packs
    ((2, 8, 6, 6), (8, 8, 1, 1), 1, 0, False, 'channels_last'),      # 1x1
    ((4, 5, 64, 64), (6, 5, 3, 3), 1, 1, False, 'channels_last'),    # 16384 rows unfolded: dW in 4 chunks, folded
    # float16 with channels in multiples of 8 (and larger than 1x1): the implicit-GEMM kernels
    ((3, 16, 12, 11), (72, 16, 3, 3), 1, 1, True, 'contiguous'),   # NCHW x, 4 blocks of rows, a part-filled 128-wide tile
    ((2, 8, 9, 9), (16, 8, 3, 3), 2, 0, False, 'channels_last'),   # stride 2: dx from col2im
    ((9, 8, 17, 17), (8, 8, 3, 3), 1, 1, False, 'channels_last'),  # 2601 rows: dW in 5 splits
    ((2, 16, 6, 6), (24, 16, 2, 2), 1, 0, True, 'channels_last'),  # 2x2: dx as a conv of dy padded by 1
    ((2, 16, 5, 5), (136, 16, 3, 3), 1, 1, True, 'channels_last'),  # 3 blocks of 64 outputs, the last part-filled
    ((2, 72, 5, 5), (16, 72, 3, 3), 1, 1, False, 'channels_last'),  # dx with 72 outputs; dW with 3 k-tiles of 256
    ((4, 40, 16, 16), (72, 40, 3, 3), 1, 1, False, 'channels_last'),  # dW: 2 splits of 512 rows, 2 k-tiles, 72 of 128 o
    ((2, 40, 6, 5), (24, 40, 3, 3), 2, 4, True, 'channels_last'),   # C=40, padding past the kernel, stride 2
    ((2, 12, 7, 7), (20, 12, 3, 3), 1, 1, True, 'channels_last'),   # 12 and 20 channels: TF32's 4-float granules
    ((3, 8, 1, 9), (8, 8, 3, 3), 1, 1, False, 'channels_last'),     # images of one row
    ((2, 16, 3, 3), (8, 16, 3, 3), 1, 0, False, 'channels_last'),   # a 1x1 output: dx padded by 2
    # channels filling 128-byte rows (64 in float16, 32 in TF32): conv_implicit_tma's im2col loads on 9.0 GPUs
    ((2, 64, 5, 7), (128, 64, 3, 3), 1, 1, True, 'channels_last'),  # 70 rows of one part-filled tile; dx of 128 channels
    ((3, 64, 9, 9), (64, 64, 3, 3), 2, 1, False, 'channels_last'),  # stride 2
    ((2, 32, 6, 6), (40, 32, 3, 3), 1, 1, True, 'channels_last'),   # TF32's rows; dx of 40 channels on conv_implicit_wg
    ((2, 64, 7, 9), (64, 64, 3, 2), (1, 2), (1, 0), False, 'channels_last')]   # 3x2, unequal strides and paddings
CONV_TOL = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-9}   # of max |ref|
CONV_KERNELS = ('im2col_nhwc', 'col2im_nhwc', 'conv_direct_fwd', 'conv_direct_dx', 'conv_direct_dw', 'conv_direct_dw_fold',
                'conv_implicit_fwd', 'conv_implicit_dw', 'conv_dw_fold')


def conv_results(x, w, b, stride, padding, dy):
    xt, wt = tl.Tensor(x, requires_grad=True), tl.Tensor(w, requires_grad=True)
    bt = None if b is None else tl.Tensor(b, requires_grad=True)
    y = tl.conv2d(xt, wt, bt, stride, padding)
    y.backward(tl.Tensor(dy))
    out = {'output': y.numpy(), 'dx': xt.grad.numpy(), 'dweight': wt.grad.numpy()}
    return out if b is None else dict(out, dbias=bt.grad.numpy())


@contextlib.contextmanager
def tf32(allowed):
    saved, tl.allow_tf32 = tl.allow_tf32, allowed
    try:
        yield
    finally:
        tl.allow_tf32 = saved


TF32_TOL = 5e-3   # of max |ref|: TF32 keeps 10 of float32's 23 mantissa bits


def check_conv(path, dtype, allow_tf32=False):
    """tl.conv2d forward and every gradient: the CPU path against float64 PyTorch, the GPU paths (im2col,
    col2im and cuBLAS, or composed CuPy) against the CPU path; allow_tf32: float32 products on TF32 (the
    composed path, CuPy's matmul, stays exact float32), compared at TF32's tolerance."""
    if path != 'cpu':
        need_cuda()
    for xs, ws, stride, padding, bias, layout in CONV_CASES:
        r = rng(('conv', np.dtype(dtype).name, xs, ws))
        x, w = r.standard_normal(xs).astype(dtype), (r.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(dtype)
        b = r.standard_normal(ws[0]).astype(dtype) if bias else None
        ho, wo = ((size + 2 * p - k) // s + 1
                  for size, k, s, p in zip(xs[2:], ws[2:], tl._pair(stride), tl._pair(padding, least=0)))
        dy = r.standard_normal((xs[0], ws[0], ho, wo)).astype(dtype)
        want = conv_results(x, w, b, stride, padding, dy)
        what = f'conv2d x {xs} weight {ws} stride {stride} padding {padding} {layout}'
        if path == 'cpu':
            need_torch()
            xt, wt = (torch.tensor(a.astype(np.float64), requires_grad=True) for a in (x, w))
            bt = None if b is None else torch.tensor(b.astype(np.float64), requires_grad=True)
            y = F.conv2d(xt, wt, bt, stride, padding)
            y.backward(torch.tensor(dy.astype(np.float64)))
            ref = {'output': y, 'dx': xt.grad, 'dweight': wt.grad, 'dbias': None if b is None else bt.grad}
            for k, v in want.items():
                assert_matches(v, ref[k].detach().numpy().astype(dtype), CONV_TOL[np.dtype(dtype)], f'{what}: {k} vs PyTorch')
            continue
        on = on_gpu(x, layout), cp.asarray(w), None if b is None else cp.asarray(b), on_gpu(dy, 'channels_last')
        if path == 'fused':
            assert tl._direct_conv(on[0], ws) == (np.prod(ws[1:]) <= 32), f'{what}: direct kernels or not'
            granule = 8 if dtype == np.float16 else 4
            implicit = (dtype == np.float16 or dtype == np.float32 and allow_tf32) and ws[0] % granule == 0 \
                and ws[1] % granule == 0 and ws[2] * ws[3] > 1
            assert tl._implicit_conv(on[0], ws, xs[0] * ho * wo, allow_tf32) == implicit, f'{what}: implicit GEMM or not'
        with tf32(allow_tf32):
            got = gpu_paths(path, CONV_KERNELS, lambda: conv_results(*on[:3], stride, padding, on[3]))
        compare_paths(got, want, lambda a: TF32_TOL if allow_tf32 else CONV_TOL[a.dtype], what)


CE_CASES = [   # logits' shape, layout, label smoothing, reduction, ignore_index given to every 3rd row (None: none)
    ((37, 1000), 'contiguous', 0.2, 'sum', None),     # 16-byte packs, a row in one round: some lanes' rounds partial
    ((3, 2048), 'contiguous', 0.0, 'mean', None),     # two whole rounds per lane
    ((300, 10), 'contiguous', 0.1, 'none', None),     # a few lanes per row, several rows per warp
    ((1003, 1000), 'contiguous', 0.1, 'mean', None),  # 126 blocks' partial sums folded, the last block part-filled
    ((5, 7), 'offset1', 0.3, 'mean', None),           # element by element
    ((1003, 1000), 'contiguous', 0.1, 'mean', -100),  # the mean over the rows kept, counted across blocks
    ((37, 1000), 'contiguous', 0.0, 'sum', 5),        # a class ignored
    ((300, 10), 'contiguous', 0.2, 'none', -100)]


def ce_results(logits, target, smoothing, reduction, dy, ignore_index=-100):
    xt = tl.Tensor(logits, requires_grad=True)
    loss = tl.cross_entropy(xt, tl.Tensor(target), label_smoothing=smoothing, reduction=reduction,
                            ignore_index=ignore_index)
    loss.backward(tl.Tensor(dy))
    return {'loss': loss.numpy(), 'dlogits': xt.grad.numpy()}


def check_cross_entropy(mode, dtype):
    need_cuda()
    for shape, layout, smoothing, reduction, ignore in CE_CASES:
        r = rng(('ce', np.dtype(dtype).name, shape, ignore))
        logits = (3 * r.standard_normal(shape)).astype(dtype)
        target = r.integers(0, shape[1], shape[0])
        if ignore is not None:
            target[::3] = ignore
        index = -100 if ignore is None else ignore
        dy = r.uniform(0.5, 2, shape[:1] if reduction == 'none' else ()).astype(dtype)
        want = ce_results(logits, target, smoothing, reduction, dy, index)
        on = on_gpu(logits, layout), cp.asarray(target), cp.asarray(dy)
        got = gpu_paths(mode, ('cross_entropy_fwd', 'cross_entropy_bwd'),
                        lambda: ce_results(*on[:2], smoothing, reduction, on[2], index))
        compare_paths(got, want, lambda a: FUSED_TOL[a.dtype], f'cross_entropy {shape} {layout} {reduction} ignore {ignore}')


def ce_nonfinite_case(dtype):
    """Logits with -inf away from the targets (row 0: a few; row 1: the first 512, which in float32 is each
    lane's whole first round of packs in kernels.cu) and a NaN (row 2), targets, and the loss's gradient."""
    r = rng(('ce_nonfinite', np.dtype(dtype).name))
    x = (2 * r.standard_normal((3, 1024))).astype(dtype)
    x[0, [0, 3, 800]] = -np.inf
    x[1, :512] = -np.inf
    x[2, 40] = np.nan
    return x, np.array([5, 700, 9]), r.uniform(0.5, 2, 3).astype(dtype)


def check_cross_entropy_nonfinite(path, dtype):
    """PyTorch's values: without smoothing the -inf rows' losses are finite, with it +inf; the NaN row's loss
    and gradient are NaN; the other gradients are finite (softmax - q)."""
    x, target, dy = ce_nonfinite_case(dtype)
    for smoothing in (0.0, 0.2):
        want = ce_results(x, target, smoothing, 'none', dy)
        if path == 'cpu':
            need_torch()
            xt = torch.tensor(x.astype(np.float64), requires_grad=True)
            loss = F.cross_entropy(xt, torch.tensor(target), label_smoothing=smoothing, reduction='none')
            loss.backward(torch.tensor(dy.astype(np.float64)))
            ref = {'loss': loss.detach().numpy().astype(dtype), 'dlogits': xt.grad.numpy().astype(dtype)}
            for k, v in ref.items():
                assert_matches(want[k], v, FUSED_TOL[np.dtype(dtype)], f'cross_entropy smoothing {smoothing}: {k} vs PyTorch')
            continue
        need_cuda()
        on = cp.asarray(x), cp.asarray(target), cp.asarray(dy)
        got = gpu_paths(path, ('cross_entropy_fwd', 'cross_entropy_bwd'), lambda: ce_results(*on[:2], smoothing, 'none', on[2]))
        compare_paths(got, want, lambda a: FUSED_TOL[a.dtype], f'cross_entropy of non-finite logits, smoothing {smoothing}')


def conv_grads_of(grads, x, w, b, dy, padding=0):
    """tl.conv2d's output and the gradients of the inputs named in `grads` (of 'x', 'w', 'b'; the others need none)
    for output gradient dy (None: the gradient of y.sum(), broadcast from a scalar)."""
    ts = {k: tl.Tensor(a, requires_grad=k in grads) for k, a in zip('xwb', (x, w, b))}
    y = tl.conv2d(ts['x'], ts['w'], ts['b'], padding=padding)
    (y.sum() if dy is None else y).backward(None if dy is None else tl.Tensor(dy))
    return dict(output=y.numpy(), **{'d' + k: ts[k].grad.numpy() for k in grads})


def check_conv_direct_grads(dtype):
    """The direct kernels (windows of <= 32 values) where CONV_CASES do not reach: gradients of any layout
    (NCHW, broadcast from a sum, channels-last), only some of the inputs needing gradients (train_cifar's
    whitening conv: the bias alone), and enough pixels for several blocks of dW partials (33 at 24x19x19
    pixels: the fold's rounds of four per warp) and several rounds of each thread's loop."""
    need_cuda()
    r = rng(('conv_direct', np.dtype(dtype).name))
    for xs, grads, dy_layout in (((24, 3, 20, 20), 'xwb', 'contiguous'), ((9, 3, 20, 20), 'b', 'channels_last'),
                                 ((4, 3, 9, 9), 'w', 'sum'), ((4, 3, 9, 9), 'xb', 'step')):
        x, w, b = r.standard_normal(xs).astype(dtype), (r.standard_normal((24, 3, 2, 2)) / 3).astype(dtype), \
            r.standard_normal(24).astype(dtype)
        dy = None if dy_layout == 'sum' else r.standard_normal((xs[0], 24, xs[2] - 1, xs[3] - 1)).astype(dtype)
        want = conv_grads_of(grads, x, w, b, dy)
        on = cp.asarray(x), cp.asarray(w), cp.asarray(b), None if dy is None else on_gpu(dy, dy_layout)
        got = gpu_paths('fused', CONV_KERNELS, lambda: conv_grads_of(grads, *on))
        compare_paths(got, want, lambda a: CONV_TOL[a.dtype], f'direct conv x {xs}, gradients of {grads}, dy {dy_layout}')


def test_gpu_conv_implicit_edges():
    """The implicit-GEMM kernels (float16 and TF32, channels in multiples of 8 and 4) where CONV_CASES do not reach:
    x and dy in channels-last memory off a 16-byte boundary (the kernels copy 16-byte pieces: they get aligned copies),
    each gradient alone, an empty batch (dW and db zeros), and in TF32 12 channels (a multiple of 4, not of 8)."""
    check_conv_implicit_edges()


def test_gpu_conv_implicit_edges_without_wgmma():
    run_without_wgmma(check_conv_implicit_edges)


def test_gpu_conv_implicit_edges_without_tma():
    run_without_wgmma(check_conv_implicit_edges, ('conv_implicit_tma',))


def tma_results(fn):
    """What tl._tma_products returned during fn() (True: conv_implicit_tma ran)."""
    results, original = [], tl._tma_products
    tl._tma_products = lambda *args: results.append(original(*args)) or results[-1]
    try:
        fn()
    finally:
        tl._tma_products = original
    return results


def check_conv_implicit_edges():
    need_cuda()
    r = rng('conv_implicit_edges')
    for dtype in (np.float16, np.float32):
        row = 128 // np.dtype(dtype).itemsize   # channels filling 128-byte rows: conv_implicit_tma's, where loaded
        cases = (((2, 16, 6, 6), 'xwb', 1), ((3, 8, 7, 7), 'x', 0), ((3, 8, 7, 7), 'w', 3), ((3, 8, 7, 7), 'b', 0),
                 ((0, 16, 5, 5), 'xwb', 0), ((2, row, 5, 7), 'xwb', 1)) + \
            ((((2, 12, 6, 6), 'xwb', 1),) if dtype == np.float32 else ())
        tol = TF32_TOL if dtype == np.float32 else CONV_TOL[np.dtype(dtype)]
        for xs, grads, offset in cases:
            c, what = xs[1], f'implicit conv {np.dtype(dtype).name} x {xs}, gradients of {grads}, offset {offset}'
            cout = row if c == row else 24   # dx, the conv of dy, on conv_implicit_tma too where C_out fills rows
            x, b = r.standard_normal(xs).astype(dtype), r.standard_normal(cout).astype(dtype)
            w = (r.standard_normal((cout, c, 3, 3)) / (3 * c ** 0.5)).astype(dtype)
            dy = r.standard_normal((xs[0], cout) + xs[2:]).astype(dtype)
            want = conv_grads_of(grads, x, w, b, dy, padding=1)
            on = channels_last_at(x, offset), cp.asarray(w), cp.asarray(b), channels_last_at(dy, offset)
            assert tl._implicit_conv(on[0], w.shape, xs[0] * xs[2] * xs[3], True), f'{what}: not the implicit GEMM'
            run = lambda: conv_grads_of(grads, *on, padding=1)
            with tf32(True):
                paths = gpu_paths('fused', CONV_KERNELS, run) if xs[0] else {'fused': run_on('fused', CONV_KERNELS, run)}
            for path, res in paths.items():
                for k, v in want.items():
                    assert_matches(res[k], v, tol, f'{what}: {k} of the {path} path vs the CPU path')
            if xs[0] == 0:
                assert not want['dw'].any() and not want['db'].any(), 'an empty batch gives zero dW and db'
            if xs[1] == row and tl._kernel('conv_implicit_tma', dtype, *tl._IMPLICIT_TMA[0]) is not None:
                with tf32(True):
                    assert tma_results(run) == [True, True], f'{what}: conv_implicit_tma did not run (forward and dx)'


def test_gpu_conv_implicit_empty_image():
    """An image of no rows whose padding still gives output pixels (the bias; dW zero, db the sums of dy), on the
    implicit GEMM at channel counts that fill 128-byte rows (the TMA forward's, which takes no empty tensor)."""
    need_cuda()
    r = rng('conv_empty_image')
    for dtype in (np.float16, np.float32):
        c = 128 // np.dtype(dtype).itemsize
        x, w = np.zeros((1, c, 0, 4), dtype), r.standard_normal((8, c, 2, 2)).astype(dtype)
        b, dy = r.standard_normal(8).astype(dtype), r.standard_normal((1, 8, 1, 5)).astype(dtype)
        want = conv_grads_of('xwb', x, w, b, dy, padding=1)
        on = channels_last_at(x, 0), cp.asarray(w), cp.asarray(b), channels_last_at(dy, 0)
        with tf32(True):
            got = conv_grads_of('xwb', *on, padding=1)
        for k, v in want.items():
            assert_matches(got[k], v, CONV_TOL[np.dtype(dtype)], f'empty image {np.dtype(dtype).name}: {k} vs the CPU path')


def ce_logits(dtype, shape, key):
    """Logits and targets in range."""
    r = rng(('ce_logits', np.dtype(dtype).name, shape, key))
    return (3 * r.standard_normal(shape)).astype(dtype), r.integers(0, shape[1], shape[0])


def test_cross_entropy_target_out_of_range():
    """The CPU (as the composed GPU path) refuses a target outside [0, C), through cross_entropy or the Function."""
    x = rng('ce_range').standard_normal((4, 3))
    for bad in (3, -1):
        target = np.array([0, 1, bad, 2])
        raises(ValueError, lambda: tl.cross_entropy(tl.Tensor(x), tl.Tensor(target)), 'targets must lie in [0, 3)')
        raises(ValueError, lambda: tl.CrossEntropy.apply(tl.Tensor(x), target=target, smoothing=0.0, reduction='sum'),
               'targets must lie in [0, 3)')


def test_cross_entropy_weight_passed_as_label_smoothing_is_named():
    """A class-weight tensor passed third (PyTorch's weight, our label_smoothing) raises TypeError saying so; a 0-d
    tensor, a NumPy number or a bool there is a smoothing, as PyTorch takes them (True as 1.0), its value PyTorch's."""
    need_torch()
    r = rng('ce third')
    x, y, w = r.standard_normal((5, 3)), r.integers(0, 3, 5), r.random(3)
    raises(TypeError, lambda: tl.cross_entropy(tl.tensor(x), tl.tensor(y), tl.tensor(w)), 'label_smoothing',
           'weight=', '(3,)')
    for smoothing in (tl.tensor(0.25), np.float32(0.25), True):
        given = smoothing.item() if isinstance(smoothing, tl.Tensor) else smoothing
        ours = tl.cross_entropy(tl.tensor(x), tl.tensor(y), smoothing)
        theirs = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(y), label_smoothing=float(given))
        assert_close(ours, theirs.numpy(), 1e-12, 0, f'label_smoothing {smoothing!r}')


def test_gpu_fused_cross_entropy_target_out_of_range():
    """The fused kernel gives a target outside [0, C) a NaN loss, and so the sum and the mean, rather than check
    on the host and wait for the GPU every call."""
    need_cuda()
    x = rng('ce_range').standard_normal((4, 3))
    on = tl.Tensor(cp.asarray(x)), tl.Tensor(cp.asarray(np.array([0, 1, 3, 2])))
    with gpu_path('fused', ('cross_entropy_fwd',)):
        for reduction, nan in (('none', [False, False, True, False]), ('sum', True), ('mean', True)):
            assert np.isnan(host(tl.cross_entropy(*on, reduction=reduction).data)).tolist() == nan, reduction


def cross_entropy_float64(x, target, smoothing=0.0, reduction='mean'):
    """The loss and its sum's gradient in float64: PyTorch's where it is installed, else the CPU path's."""
    m = TH if torch is not None else tl
    logits = make(m, x.astype(np.float64), requires_grad=True)
    loss = m.cross_entropy(logits, make(m, target), label_smoothing=smoothing, reduction=reduction)
    loss.sum().backward()
    return to_np(loss), to_np(logits.grad)


def test_gpu_cross_entropy_reductions_vs_float64():
    """The fused forward's 'none', 'sum' and 'mean' (float32 and float16, smoothing 0 and 0.1, 1003 rows: no block
    holds a whole number of them) against float64 (PyTorch's, or the CPU path's without PyTorch); the same bits
    whether lse is kept for a backward (a leaf that requires grad) or not (no_grad)."""
    need_cuda()
    for dtype in (np.float32, np.float16):
        x, y = ce_logits(dtype, (1003, 1000), 'torch')
        on = tl.Tensor(cp.asarray(x)), tl.Tensor(cp.asarray(y))
        for smoothing in (0.0, 0.1):
            for reduction in ('none', 'sum', 'mean'):
                want = cross_entropy_float64(x, y, smoothing, reduction)[0].astype(dtype)
                with gpu_path('fused', ('cross_entropy_fwd',)):
                    with tl.no_grad():
                        plain = host(tl.cross_entropy(*on, smoothing, reduction).data)
                    kept = host(tl.cross_entropy(tl.Tensor(on[0].data, requires_grad=True), on[1], smoothing, reduction).data)
                what = f'{np.dtype(dtype).name} smoothing {smoothing} {reduction}'
                assert_matches(plain, want, FUSED_TOL[np.dtype(dtype)], f'{what}: vs float64')
                assert plain.tobytes() == kept.tobytes(), f'{what}: the loss changes when lse is kept'


def test_gpu_cross_entropy_ignore_index_vs_float64():
    """The fused kernels with ignored rows against float64 (PyTorch's, or the CPU path's without PyTorch; float32,
    1003 rows over several blocks): each reduction's loss and gradient, and with every row ignored the mean's NaN
    and zero gradients."""
    need_cuda()
    x, y = ce_logits(np.float32, (1003, 1000), 'torch')
    y[::4] = -100
    for target, reductions in ((y, ('none', 'sum', 'mean')), (np.full_like(y, -100), ('mean',))):
        for reduction in reductions:
            want_loss, want_grad = cross_entropy_float64(x, target, reduction=reduction)
            with gpu_path('fused', ('cross_entropy_fwd', 'cross_entropy_bwd')):
                ours = tl.Tensor(cp.asarray(x), requires_grad=True)
                got = tl.cross_entropy(ours, tl.Tensor(cp.asarray(target)), reduction=reduction)
                got.sum().backward()
            what = f'{reduction}, {int((target == -100).sum())} of 1003 rows ignored'
            assert_matches(host(got.data), want_loss.astype(np.float32), 1e-4, f'{what}: loss vs float64')
            assert_matches(host(ours.grad.data), want_grad.astype(np.float32), 1e-4, f'{what}: gradient vs float64')


def test_gpu_reduction_scratch_grows():
    """The reductions' shared scratch (partial sums and ticket counters) made larger than any case needs, as a case
    asking for more would: BatchNorm and cross-entropy then read and write the new one and still give the CPU's
    results; the outgrown pair stays referenced (a captured CUDA graph may still use it), the counters at zero."""
    need_cuda()
    x, w, b, rm, rv, dy = bn_arrays('scratch', (6, 5, 7, 9), np.float32, 'same', True, None)
    logits, target = ce_logits(np.float32, (300, 17), 'scratch')
    want = bn_results(x, w, b, rm, rv, dy, True, None), tl.cross_entropy(tl.Tensor(logits), tl.Tensor(target)).numpy()
    old = tl._reduction_scratch(1, 0)
    new = tl._reduction_scratch(old[1].size + 1, old[0].nbytes + 1)
    assert new[0].nbytes > old[0].nbytes and new[1].size > old[1].size and any(p is old[0] for p, _ in tl._retired)
    with gpu_path('fused', BN_KERNELS + ('cross_entropy_fwd',)):
        got = (bn_results(*(cp.asarray(a) for a in (x, w, b, rm, rv, dy)), True, None),
               host(tl.cross_entropy(tl.Tensor(cp.asarray(logits)), tl.Tensor(cp.asarray(target))).data))
    assert tl._reduction_scratch(1, 0)[0] is new[0], 'the grown scratch is the one in use'
    compare_paths({'fused (scratch grown)': got[0]}, want[0], lambda a: FUSED_TOL[a.dtype], 'BatchNorm after the scratch grew')
    assert_matches(got[1], want[1], FUSED_TOL[np.dtype(np.float32)], 'cross-entropy after the scratch grew')
    assert not cp.any(new[1]), 'ticket counters re-armed'


def test_gpu_sums_over_leading_axes():
    """Sums and means over the leading axes of arrays of 64 rows or more (on the GPU one product with a row of ones,
    _sum: _gemm's) against NumPy in float64, in float16, float32 and float64, with and without keepdim, each taking
    that path; a strided array and a sum over trailing axes take CuPy's; a Linear's bias gradient over 300 rows."""
    need_cuda()
    r, products = rng('leading sums'), []
    gemm = tl._gemm

    def counted(*args, **kwargs):
        products.append(args[1].shape)
        return gemm(*args, **kwargs)
    tol = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-13}
    for dtype in (np.float16, np.float32, np.float64):
        x = r.standard_normal((70, 3, 5)).astype(dtype)
        t = tl.Tensor(x, device='cuda')
        for name, axis, keep in (('sum', 0, False), ('sum', (0, 1), True), ('mean', 0, True), ('mean', (0, 1), False),
                                 ('sum', (1, 2), False)):
            want = getattr(x.astype(np.float64), name)(axis=axis, keepdims=keep).astype(dtype)
            products.clear()
            with mock.patch.object(tl, '_gemm', counted):
                got = getattr(t, name)(axis=axis, keepdim=keep).numpy()
            rows = 210 if axis == (0, 1) else 70   # the (rows, columns) matrix of a sum over leading axes
            assert products == ([] if axis == (1, 2) else [(rows, x.size // rows)]), \
                f'{name} {axis} {np.dtype(dtype).name}: products {products}'
            assert_matches(got, want, tol[np.dtype(dtype)], f'{name} over {axis} (keepdim {keep}) {np.dtype(dtype).name}')
        products.clear()
        with mock.patch.object(tl, '_gemm', counted):
            got = tl.Tensor(cp.asarray(x)[:, ::2], device='cuda').sum(0).numpy()   # strided: CuPy's reduction
        assert products == [], 'a strided array takes CuPy\'s reduction'
        assert_matches(got, x[:, ::2].astype(np.float64).sum(0).astype(dtype), tol[np.dtype(dtype)], 'strided sum')
    # a Linear's bias gradient over 300 rows, from a random upstream gradient (a constant one arrives as a broadcast
    # view, which is not C-contiguous: CuPy's reduction)
    lin, xs, ws = tl.Linear(8, 4), r.standard_normal((300, 8)).astype(np.float32), r.standard_normal((300, 4))
    (lin(tl.Tensor(xs)) * tl.Tensor(ws.astype(np.float32))).sum().backward()
    want = lin.bias.grad.numpy()
    lin.zero_grad()
    lin.to('cuda')
    products.clear()
    with mock.patch.object(tl, '_gemm', counted):
        (lin(tl.Tensor(xs, device='cuda')) * tl.Tensor(ws.astype(np.float32), device='cuda')).sum().backward()
    assert (300, 4) in products, f"the Linear's bias gradient: products {products}"
    assert_matches(lin.bias.grad.numpy(), want, 1e-6, "Linear's bias gradient over 300 rows")


def test_gpu_small_products_as_one_launch():
    """_gemm's small products (k <= _GEMM_SMALL_K, at most _GEMM_SMALL_BLOCKS blocks) run as gemm_small or, past k
    = 128, gemm_split's clusters of 2, 4 or 8 blocks, cuBLAS untouched: against NumPy in float64 and against cuBLAS's
    result (the same call with _GEMM_SMALL_BLOCKS 0), in float16 (to float16 and to float32) and float32 (also with
    tf32 asked: exact float32 here), at odd sizes, one row or column, the GRU's (16, 32) x (32, 384) and (16, 384) x
    (384, 32), the bounds themselves, with either operand transposed, a strided view or a stack of matrices, or a
    negative row step, and into a given array (the same bits as the call before); a block past the bound, k past
    _GEMM_SMALL_K, float64, or a product of k past 128 captured in a CUDA graph goes to cuBLAS."""
    need_cuda()
    if 'gemm_small' not in tl.fused_kernels():
        raise Skip('no gemm_small kernel')
    r = rng('small products')
    tol = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 2e-6}

    def layouts(shape, dtype):   # (what, host values rounded to dtype, a CuPy array of them in that layout)
        x = r.standard_normal(shape).astype(dtype)
        yield 'packed', x, cp.asarray(x)
        yield 'transposed', x, cp.swapaxes(cp.asarray(np.ascontiguousarray(np.swapaxes(x, -1, -2))), -1, -2)
        wide = np.full(shape[:-1] + (2 * shape[-1],), np.nan, dtype)   # x in every other column, NaN between
        wide[..., ::2] = x
        yield 'strided', x, cp.asarray(wide)[..., ::2]
        yield 'reversed', x, cp.asarray(np.ascontiguousarray(x[..., ::-1, :]))[..., ::-1, :]   # a negative row step

    def refuse(*args):
        raise AssertionError('cuBLAS was called for a small product')
    cases = [(1, 1, 1), (3, 5, 7), (33, 65, 17), (16, 384, 32), (1, 2048, 128), (2, 1, 31, 40), (3, 17, 9, 33),
             (2, 40, 3, 100), (64, 4096, 9),   # (64, 4096, 9): the block bound itself; then k past 128, in clusters
             (3, 5, 129), (3, 5, 256), (2, 33, 3, 200), (3, 5, 257), (16, 32, 384), (33, 65, 300), (31, 33, 512),
             (2, 17, 9, 513), (5, 7, 1600), (2, 40, 3, 700), (32, 1024, 1024), (2, 33, 2048)]   # of 2, 4, 8 blocks
    if 'gemm_split' not in tl.fused_kernels():   # (built for 9.0 GPUs alone: elsewhere cuBLAS takes k past 128)
        cases = [shape for shape in cases if shape[-1] <= 128]
    for (dtype, out_dtype), shape in itertools.product(((np.float16, np.float16), (np.float16, np.float32),
                                                        (np.float32, np.float32)), cases):
        *stack, m, n, k = shape
        for (wa, a, a_gpu), (wb, b, b_gpu) in itertools.product(layouts((*stack, m, k), dtype),
                                                                layouts((*stack, k, n), dtype)):
            want = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(out_dtype)
            what = f'{np.dtype(dtype).name} -> {np.dtype(out_dtype).name} {shape}, a {wa}, b {wb}'
            kind = ('gemm_small',) if k <= 128 else ('gemm_split', 2 if k <= 256 else 4 if k <= 512 else 8)
            for tf32 in (False, True) if dtype == np.float32 else (False,):
                asked = []   # the kernels _gemm looks up: (name, its blocks a tile where split)
                spy = lambda name, *args, real=tl._kernel: asked.append((name, *args[2:])) or real(name, *args)
                with mock.patch.object(tl, '_cublas_handle', refuse), mock.patch.object(tl, '_kernel', spy):
                    got = tl._gemm(a_gpu, b_gpu, out_dtype, tf32).get()
                assert asked == [kind], f'{what}: kernels {asked}, expected {kind}'
                assert_matches(got, want, tol[np.dtype(out_dtype)] * max(1, k) ** 0.5, f'{what}, tf32 {tf32}')
            if wa == wb == 'packed':   # into a given array (the GRU fallback's per-step products)
                into = cp.full(got.shape, np.nan, out_dtype)
                with mock.patch.object(tl, '_cublas_handle', refuse):
                    tl._gemm(a_gpu, b_gpu, out_dtype, out=into)
                assert_matches(into.get(), got, 0, f'{what} into out=')
            with mock.patch.object(tl, '_GEMM_SMALL_BLOCKS', 0):
                cublas = tl._gemm(a_gpu, b_gpu, out_dtype).get()
            assert_matches(got, cublas, 2 * tol[np.dtype(out_dtype)] * max(1, k) ** 0.5, f'{what} against cuBLAS')
    # past the bound: cuBLAS
    assert (tl._GEMM_SMALL_BLOCKS, tl._GEMM_SMALL_K) == (256, 2048), 'the cases assume these bounds'
    for m, n, k, dtype in ((1, 8193, 16, np.float32), (65, 4096, 9, np.float32), (33, 1024, 1024, np.float32),
                           (1, 1, 2049, np.float32), (3, 5, 7, np.float64)):
        a, b = cp.asarray(r.standard_normal((m, k)), dtype), cp.asarray(r.standard_normal((k, n)), dtype)
        with mock.patch.object(tl, '_cublas_handle', refuse):
            raises(AssertionError, lambda: tl._gemm(a, b, dtype), 'cuBLAS was called')
        want = (a.get().astype(np.float64) @ b.get()).astype(dtype)
        assert_matches(tl._gemm(a, b, dtype).get(), want, 1e-5, f'{np.dtype(dtype).name} ({m}, {k}) x ({k}, {n})')
    # captured in a CUDA graph: gemm_small's products stay, gemm_split's go to cuBLAS
    for m, n, k in ((3, 5, 7), (3, 5, 300)):
        a, b = cp.asarray(r.standard_normal((m, k)), np.float32), cp.asarray(r.standard_normal((k, n)), np.float32)
        calls = []
        graph = tl.CUDAGraph()
        with mock.patch.object(tl, '_cublas_handle', lambda real=tl._cublas_handle: calls.append(1) or real()):
            with graph.capture():
                got = tl._gemm(a, b, np.float32)
        graph.replay()
        assert len(calls) == (k > 128), f'({m}, {k}) x ({k}, {n}) captured: {len(calls)} cuBLAS calls'
        want = (a.get().astype(np.float64) @ b.get()).astype(np.float32)
        assert_matches(got.get(), want, 1e-5, f'({m}, {k}) x ({k}, {n}) replayed')


def test_gpu_cross_entropy_grids():
    """The fused forward on grids of at most 1 and 3 blocks (each looping over many rows) and its own, the blocks'
    partial sums folded by the last one to finish: the CPU's losses, the same bits on each call (the fold's order
    is fixed), and the ticket back at zero after each."""
    need_cuda()
    x, y = ce_logits(np.float32, (777, 300), 'grids')
    want = {red: tl.cross_entropy(tl.Tensor(x), tl.Tensor(y), 0.1, red).numpy() for red in ('none', 'sum', 'mean')}
    on = tl.Tensor(cp.asarray(x)), tl.Tensor(cp.asarray(y))
    saved = tl._CE_MAX_BLOCKS
    try:
        for cap in (1, 3, saved):
            tl._CE_MAX_BLOCKS = cap
            with gpu_path('fused', ('cross_entropy_fwd',)):
                for red, w in want.items():
                    got = [host(tl.cross_entropy(*on, 0.1, red).data) for _ in range(3)]
                    what = f'at most {cap} blocks, {red}'
                    assert_matches(got[0], w, FUSED_TOL[np.dtype(np.float32)], what)
                    assert got[0].tobytes() == got[1].tobytes() == got[2].tobytes(), f'{what}: calls differ'
                    assert int(tl._reduction_scratch(1, 0)[1][0]) == 0, f'{what}: ticket not re-armed'
    finally:
        tl._CE_MAX_BLOCKS = saved


def test_conv_cpu_empty_image():
    """An image of no rows whose padding still gives output pixels, on the CPU (stride 1: dx and dW from the
    unfolded dy, which is empty; stride 2: from the unfolded x): the output is the bias, dx empty, dW zero, db the
    sums of dy. A batch of no images, each gradient alone and both: empty output and dx, zero dW (as PyTorch)."""
    r = rng('conv_cpu_empty_image')
    x, w, b = np.zeros((2, 6, 0, 4)), r.standard_normal((5, 6, 2, 2)), r.standard_normal(5)
    for stride, out in ((1, (1, 5)), (2, (1, 3))):
        dy = r.standard_normal((2, 5) + out)
        got = conv_results(x, w, b, stride, 1, dy)
        assert_matches(got['output'], np.broadcast_to(b[:, None, None], (2, 5) + out), 0, f'stride {stride}: output')
        assert got['dx'].shape == x.shape, f'stride {stride}: dx {got["dx"].shape}'
        assert_matches(got['dweight'], np.zeros_like(w), 0, f'stride {stride}: dweight')
        assert_matches(got['dbias'], dy.sum((0, 2, 3)), 1e-12, f'stride {stride}: dbias')
    for stride, out in ((1, (6, 6)), (2, (3, 3))):
        for wanted in ('x', 'w', 'xw'):
            xt = tl.Tensor(np.zeros((0, 6, 5, 5)), requires_grad='x' in wanted)
            wt = tl.Tensor(w, requires_grad='w' in wanted)
            y = tl.conv2d(xt, wt, stride=stride, padding=1)
            y.backward(tl.Tensor(np.zeros(y.shape)))
            what = f'batch 0, stride {stride}, gradients of {wanted}'
            assert y.shape == (0, 5) + out, f'{what}: output {y.shape}'
            assert ('x' not in wanted) == (xt.grad is None) and ('x' not in wanted or xt.grad.shape == xt.shape), what
            assert ('w' not in wanted) == (wt.grad is None), what
            if 'w' in wanted:
                assert_matches(wt.grad.numpy(), np.zeros_like(w), 0, f'{what}: dweight')


def test_avg_pool_integers_as_pytorch():
    """avg_pool2d of int64 gives int64 means rounded toward zero, as PyTorch's (it gave float64); pooling a bool
    tensor raises TypeError, as PyTorch's NotImplementedError for Bool."""
    need_torch()
    x = rng('avg_int').integers(-9, 9, (2, 3, 5, 6))
    for kernel, stride in ((2, None), (3, 2), ((2, 3), (1, 2))):
        got, want = tl.avg_pool2d(tl.tensor(x), kernel, stride), F.avg_pool2d(torch.tensor(x), kernel, stride)
        assert same_dtype(got, want) and np.array_equal(got.numpy(), want.numpy()), (kernel, stride, got.dtype)
    for fn in (tl.avg_pool2d, tl.max_pool2d):
        raises(TypeError, lambda: fn(tl.tensor(x > 0), 2), 'pool2d', 'bool')


def test_pad_reflect_replicate_circular_as_pytorch():
    """pad with mode 'reflect', 'replicate' and 'circular' as PyTorch's F.pad: the last 1, 2 or 3 axes of tensors with
    one or two more, negative widths cropping (circular wrapping the cropped axis), values and float64 gradients (on a
    GPU as on the CPU); widths past PyTorch's limits, a value, another mode or too many axes raise ValueError."""
    need_torch()
    r = rng('pad modes')
    cases = [((1, 3, 4), (2, 1)), ((2, 3, 4, 5), (1, 2, 3, 0)), ((2, 3, 4, 5, 6), (1, 1, 2, 2, 0, 3)), ((3, 4), (3, 2)),
             ((1, 3, 4), (-1, 2)), ((1, 3, 4), (2, -1)), ((2, 3, 4, 5), (-2, 1, 1, -1)), ((1, 5), (-2, 3))]
    for shape, pad in cases:
        for mode in ('reflect', 'replicate', 'circular'):
            x, what = sample(r, shape), f'{shape} {pad} {mode}'
            xs, xt = tl.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
            got, want = tl.pad(xs, pad, mode=mode), F.pad(xt, pad, mode=mode)
            assert_close(got, want, 0, 0, what)
            w = upstream(0, got.shape)
            (got * tl.Tensor(w)).sum().backward(), (want * torch.tensor(w)).sum().backward()
            assert_close(xs.grad, xt.grad, 1e-12, 1e-12, f'{what}: gradient')
            if tl.cuda_is_available():
                xg = tl.Tensor(x, device='cuda', requires_grad=True)
                got = xg.pad(pad, mode=mode)
                assert_close(got, want, 0, 0, f'{what} on the GPU')
                (got * tl.Tensor(w, device='cuda')).sum().backward()
                assert_close(xg.grad, xt.grad, 1e-12, 1e-12, f'{what}: gradient on the GPU')
    x = tl.Tensor(sample(r, (2, 3, 4, 5)))
    for pad, mode in (((0, 5), 'reflect'), ((0, 1, 4, 0), 'reflect'), ((0, 6), 'circular'), ((1,) * 8, 'reflect'),
                      ((1,), 'replicate')):
        raises((RuntimeError, ValueError, NotImplementedError), lambda: F.pad(torch.tensor(x.numpy()), pad, mode=mode))
        raises(ValueError, lambda: x.pad(pad, mode=mode), 'pad', mode)
    raises(ValueError, lambda: x.pad((1, 1), mode='reflect', value=2.0), 'value')
    raises(ValueError, lambda: x.pad((1, 1), mode='mirror'), 'mirror')


def test_pool_padding_and_nan_windows_as_pytorch():
    """max_pool2d and avg_pool2d (and their modules) with padding as PyTorch's (max: the padding never wins, in
    float64 and int64; average: zeros counted, count_include_pad), outputs and float64 gradients; padding over half
    the kernel or negative raises ValueError; the module reprs; a window of several NaNs sends the gradient to the last
    (PyTorch's and kernels.cu's choice); on a GPU the same as on the CPU. conv2d refuses bool tensors (TypeError)."""
    need_torch()
    r = rng('pool padding')
    x = sample(r, (2, 3, 7, 6))
    for name, args in (('max_pool2d', (3, 2, 1)), ('avg_pool2d', (3, 2, 1)), ('max_pool2d', ((3, 2), 1, (1, 0))),
                       ('avg_pool2d', (2, None, 1))):
        xs, xt = tl.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, want = getattr(tl, name)(xs, *args), getattr(F, name)(xt, *args)
        assert_close(out, want, 1e-12, 1e-12, f'{name}{args}')
        w = upstream(0, out.shape)
        (out * tl.Tensor(w)).sum().backward(), (want * torch.tensor(w)).sum().backward()
        assert_close(xs.grad, xt.grad, 1e-12, 1e-12, f'{name}{args} gradient')
        module = getattr(tl, 'MaxPool2d' if name == 'max_pool2d' else 'AvgPool2d')(*args)
        assert_close(module(tl.Tensor(x)), want, 1e-12, 1e-12, f'{module}')
        assert repr(module) == repr(getattr(torch.nn, type(module).__name__)(*args)), repr(module)
        if tl.cuda_is_available():
            xg = tl.Tensor(x, device='cuda', requires_grad=True)
            out_gpu = getattr(tl, name)(xg, *args)
            assert_close(out_gpu, out, 1e-12, 1e-12, f'{name} GPU')
            (out_gpu * tl.Tensor(w, device='cuda')).sum().backward()
            assert_close(xg.grad, xs.grad, 1e-12, 1e-12, f'{name}{args} gradient on the GPU')
    ints = r.integers(-5, 5, (1, 2, 4, 4))
    assert np.array_equal(tl.max_pool2d(tl.tensor(ints), 3, 1, 1).numpy(), F.max_pool2d(torch.tensor(ints), 3, 1, 1))
    for bad in ((3, 2, 2), (3, 1, -1)):
        raises(RuntimeError, lambda: F.max_pool2d(torch.tensor(x), *bad))
        raises(ValueError, lambda: tl.max_pool2d(tl.Tensor(x), *bad), 'padding')
    nan = np.array([[[[1.0, np.nan, 3.0], [np.nan, 2.0, 0.5]]]])
    for device in ('cpu', 'cuda') if tl.cuda_is_available() else ('cpu',):
        xs, xt = tl.Tensor(nan, requires_grad=True, device=device), torch.tensor(nan, requires_grad=True)
        tl.max_pool2d(xs, 2, 1).sum().backward(), F.max_pool2d(xt, 2, 1).sum().backward()
        assert np.array_equal(xs.grad.numpy(), xt.grad.numpy()), (device, xs.grad, xt.grad)
    flags = tl.tensor(np.ones((1, 2, 3, 3), bool))
    raises(TypeError, lambda: tl.conv2d(flags, flags), 'conv2d', 'bool')


def test_pool_cpu_empty_batch():
    """max_pool2d and avg_pool2d of a batch of no images on the CPU: empty output and gradient (as PyTorch)."""
    for name in ('max_pool2d', 'avg_pool2d'):
        x = tl.Tensor(np.zeros((0, 3, 4, 5)), requires_grad=True)
        y = getattr(tl, name)(x, 2)
        y.backward(tl.Tensor(np.zeros(y.shape)))
        assert y.shape == (0, 3, 2, 2) and x.grad.shape == x.shape, f'{name}: {y.shape}, {x.grad.shape}'


def test_conv_cpu_blocks_of_one_image():
    """The CPU conv unfolds a few images at a time into one reused buffer: with a buffer of one image, every
    block reuses it, and the results (stride 2: col2im for dx; stride 1: the flipped-weight conv) equal one block's."""
    r = rng('conv_blocks')
    x, w = r.standard_normal((3, 8, 6, 7)), r.standard_normal((5, 8, 3, 3))
    for stride, dy_shape in ((2, (3, 5, 3, 4)), (1, (3, 5, 6, 7))):
        dy = r.standard_normal(dy_shape)
        one_block = conv_results(x, w, None, stride, 1, dy)
        saved, tl._CPU_BLOCK_BYTES = tl._CPU_BLOCK_BYTES, 1
        try:
            blocks = conv_results(x, w, None, stride, 1, dy)
        finally:
            tl._CPU_BLOCK_BYTES = saved
        for k, v in one_block.items():
            assert_matches(blocks[k], v, 1e-12, f'stride {stride} {k}: blocks of one image vs one block')


for _dt in FLOATS:
    register(f'test_cross_entropy_nonfinite_cpu_{np.dtype(_dt).name}', lambda dt=_dt: check_cross_entropy_nonfinite('cpu', dt))
    register(f'test_conv_cases_cpu_{np.dtype(_dt).name}', lambda dt=_dt: check_conv('cpu', dt))
for _mode in ('fused', 'composed'):
    for _dt in FLOATS:
        _n = np.dtype(_dt).name
        register(f'test_gpu_{_mode}_conv_cases_{_n}', lambda m=_mode, dt=_dt: check_conv(m, dt))
        if _mode == 'fused':
            register(f'test_gpu_fused_conv_direct_grads_{_n}', lambda dt=_dt: check_conv_direct_grads(dt))
        register(f'test_gpu_{_mode}_cross_entropy_nonfinite_{_n}', lambda m=_mode, dt=_dt: check_cross_entropy_nonfinite(m, dt))
        for _op in ('max_pool2d', 'avg_pool2d'):
            register(f'test_gpu_{_mode}_{_op}_{_n}', lambda m=_mode, o=_op, dt=_dt: check_pool(m, o, dt))
        register(f'test_gpu_{_mode}_cross_entropy_{_n}', lambda m=_mode, dt=_dt: check_cross_entropy(m, dt))
register('test_gpu_fused_conv_cases_float32_tf32', lambda: check_conv('fused', np.float32, allow_tf32=True))
for _dt, _tf32 in ((np.float16, False), (np.float32, True)):
    for _hidden, _names in (('wgmma', SM90A_CONVS), ('tma', ('conv_implicit_tma',))):
        register(f'test_gpu_fused_conv_cases_{np.dtype(_dt).name}{"_tf32" * _tf32}_without_{_hidden}',
                 lambda dt=_dt, t=_tf32, h=_names: run_without_wgmma(lambda: check_conv('fused', dt, allow_tf32=t), h))



def test_gpu_conv_weight_layouts():
    """conv_weight_layouts (the products' weight matrix and its flip for a stride-1 dx, in one launch) against the
    composed layouts (_nhwc and _flipped) on the GPU and the CPU's, for weights of any strides: equal values."""
    need_cuda()
    assert on_gpu(np.ones((2, 3)), 'reversed').strides[1] < 0
    for dtype in FLOATS:
        for shape, layout in (((5, 3, 3, 2), 'contiguous'), ((64, 32, 3, 3), 'channels_last'), ((7, 4, 1, 5), 'step'),
                              ((16, 8, 3, 3), 'offset1'), ((6, 5, 2, 3), 'reversed')):
            w = rng(('weight layouts', shape, np.dtype(dtype).name)).standard_normal(shape).astype(dtype)
            want = tl._weight_layouts(w, True)
            for path in ('fused', 'composed'):
                got = run_on(path, ('conv_weight_layouts',),
                             lambda: [host(a) for a in tl._weight_layouts(on_gpu(w, layout), True)])
                for name, g, v in zip(('flat', 'flipped'), got, want):
                    assert_matches(g, v, 0, f'{shape} {layout} {np.dtype(dtype).name} {path}: {name}')
            flat, flipped = tl._weight_layouts(on_gpu(w, layout), False)
            assert flipped is None and (host(flat) == want[0]).all(), f'{shape} {layout}: without the flip'


def check_conv_keeps_no_flip_without_recording(device):
    """A stride-1 conv's forward builds the flipped weight for its dx (on the CPU, and on the GPU's implicit GEMM)
    only when the op is recorded: not under no_grad, nor for an input that needs no gradient; y is the same either
    way, and a backward of an unrecorded forward says it has nothing kept."""
    r = rng(('conv flip', device))
    dtype = np.float16 if device == 'gpu' else np.float32
    x, w = r.standard_normal((2, 16, 6, 6)).astype(dtype), r.standard_normal((16, 16, 3, 3)).astype(dtype)
    xd, wd = (on_gpu(x, 'channels_last'), on_gpu(w)) if device == 'gpu' else (x, w)
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1))),
                                                       (3, 3), axis=(2, 3))
    want = np.einsum('nchwij,ocij->nohw', windows, w.astype(np.float64))
    for grad_mode, requires_grad in ((True, True), (False, True), (True, False)):
        ctx = tl.Convolution([tl.Tensor(xd, requires_grad=requires_grad), tl.Tensor(wd, requires_grad=requires_grad)])
        with contextlib.nullcontext() if grad_mode else tl.no_grad():
            y = host(ctx.forward(xd, wd, stride=(1, 1), padding=(1, 1)))
        what = f'{device}: grad mode {grad_mode}, requires_grad {requires_grad}'
        assert_close(y, want, 2e-2 if dtype == np.float16 else 1e-4, 2e-2 if dtype == np.float16 else 1e-4, what)
        recorded = grad_mode and requires_grad
        assert (ctx.flipped is not None) == (recorded and ctx.dx_as_conv), what
        if ctx.dx_as_conv and requires_grad and not grad_mode:   # (needing no gradient, backward computes none)
            raises(RuntimeError, lambda: ctx.backward(y if device == 'cpu' else cp.asarray(y)),
                   'Convolution.backward', 'ran unrecorded')
    assert ctx.dx_as_conv, f'{device}: a stride-1 dx as a conv (the GPU: float16 with 16 channels, the implicit GEMM)'


def test_conv_keeps_no_flip_without_recording_cpu():
    check_conv_keeps_no_flip_without_recording('cpu')


def test_gpu_conv_keeps_no_flip_without_recording():
    need_cuda()
    check_conv_keeps_no_flip_without_recording('gpu')


def test_gpu_kernel_scalars():
    """Launches pass their scalar arguments as CuPy 14's CScalar objects, made once per list (_scalars); before CuPy
    14, as NumPy scalars: ReLU (an int64 size), max-pool (int32 sizes) and BatchNorm (int32, int64 and float64
    arguments) give equal results both ways."""
    need_cuda()
    made = tl._scalars(np.int32, 7, -3) + tl._scalars(np.float64, 0.25)
    if tl._CScalar is not None:   # CuPy 14 and later
        assert [type(a).__name__ for a in made] == ['CScalar'] * 3, made
        assert [(a.value, a.get_numpy_type()) for a in made] == [(7, np.int32), (-3, np.int32), (0.25, np.float64)]
    assert tl._scalars(np.int32, 7, -3) is tl._scalars(np.int32, 7, -3), 'not remembered'
    r = rng('kernel scalars')
    x = on_gpu(r.standard_normal((3, 8, 7, 9)).astype(np.float32), 'channels_last')
    w, b = tl.Tensor(on_gpu(r.uniform(0.5, 1.5, 8).astype(np.float32))), tl.Tensor(on_gpu(r.standard_normal(8).astype(np.float32)))

    def results():
        mean, var = tl.zeros(8, device='cuda'), tl.ones(8, device='cuda')
        y = tl.batch_norm(tl.Tensor(x), mean, var, w, b, training=True)
        return [host(a) for a in (tl.relu(tl.Tensor(x)).data, tl.max_pool2d(tl.Tensor(x), 2).data, y.data, mean.data,
                                  var.data)]
    want = results()
    # the remembered launch configurations keep their size arguments: made anew too
    forgotten = (tl._scalars.cache_clear, tl._bn_config.cache_clear, tl._pool_configs.clear)
    for forget in forgotten:
        forget()
    try:   # as before CuPy 14
        with mock.patch.object(tl, '_CScalar', None):
            assert type(tl._scalars(np.int32, 7)[0]) is np.int32
            got = results()
    finally:
        for forget in forgotten:
            forget()
    for name, g, v in zip(('relu', 'max_pool2d', 'batch_norm', 'running mean', 'running var'), got, want):
        assert_matches(g, v, 0, f'{name}: NumPy scalar arguments')


def test_gpu_cross_entropy_backward_of_unrecorded_forward_raises():
    """The fused cross-entropy keeps lse only for a recorded forward: a backward of an unrecorded one says so (it
    would hand the kernel a null pointer)."""
    need_cuda()
    logits = on_gpu(rng('ce unrecorded').standard_normal((5, 7)).astype(np.float32))
    ctx = tl.CrossEntropy([tl.Tensor(logits, requires_grad=True)])
    with tl.no_grad():
        ctx.forward(logits, target=cp.arange(5) % 7, smoothing=0.1, reduction='sum')
    assert ctx.fused, 'the fused path'
    raises(RuntimeError, lambda: ctx.backward(cp.ones((), np.float32)), 'CrossEntropy.backward', 'ran unrecorded')


def test_gpu_max_pool2d_keeps_no_taps_without_recording():
    """max_pool2d's forward keeps its window taps for a backward only when the op is recorded: under no_grad, and
    for an input that needs no gradient, it allocates no tap buffer (the kernel writes none) and y is unchanged; a
    backward of such a forward says it has nothing kept."""
    need_cuda()
    x_host = rng('pool taps').standard_normal((2, 8, 6, 6)).astype(np.float16)
    x = on_gpu(x_host, 'channels_last')
    want = x_host.reshape(2, 8, 3, 2, 3, 2).max(axis=(3, 5))
    kept = {}
    for grad_mode, requires_grad in ((True, True), (False, True), (True, False)):
        ctx = tl.MaxPool([tl.Tensor(x, requires_grad=requires_grad)])
        with contextlib.nullcontext() if grad_mode else tl.no_grad():
            y = ctx.forward(x, kernel=(2, 2), stride=(2, 2))
        assert_matches(host(y), want, 0, f'grad mode {grad_mode}, requires_grad {requires_grad}')
        kept[grad_mode, requires_grad] = ctx.kept[0] is not None
        if not kept[grad_mode, requires_grad]:
            raises(RuntimeError, lambda: ctx.backward(cp.ones_like(y)), 'MaxPool.backward', 'ran unrecorded')
    assert kept == {(True, True): True, (False, True): False, (True, False): False}, kept


def test_gpu_allow_tf32_switches_conv_products():
    """allow_tf32 True: a float32 conv's products round to TF32 (so they differ from exact float32, by
    about TF32's resolution); False: exact float32, as the CPU."""
    need_cuda()
    r = rng('tf32 switch')
    x, w = r.standard_normal((4, 128, 6, 6)).astype(np.float32), r.standard_normal((32, 128, 3, 3)).astype(np.float32)
    want = tl.conv2d(tl.Tensor(x), tl.Tensor(w), padding=1).numpy()
    got = {}
    for allowed in (True, False):
        with tf32(allowed):
            got[allowed] = tl.conv2d(tl.Tensor(x, device='cuda'), tl.Tensor(w, device='cuda'), padding=1).numpy()
    err = {k: np.abs(v - want).max() / np.abs(want).max() for k, v in got.items()}
    assert err[False] < 1e-5 and 1e-5 < err[True] < TF32_TOL, f'relative errors against the CPU: {err}'


# GRU on the GPU: each path forced (persistent kernels, cuBLAS per step + fused gates, composed CuPy loop),
# float32 exact and TF32, float16, against the CPU path in float64 (outputs, h_n, every gradient)
GRU_CASES = [   # name, module, input shapes (x[, h]), dtypes[, the inputs needing no gradient]
    ('t1_b1_h50', lambda: tl.GRU(7, 50), [(1, 1, 7), (1, 1, 50)], (np.float32,)),
    ('2layers_batch_first_h50', lambda: tl.GRU(7, 50, 2, batch_first=True), [(3, 5, 7), (2, 3, 50)], (np.float32,)),
    # (these two of tl._GRU_SIDE_STEPS steps or more: their backward's products side by side, check_gru_gpu making
    # tl._GRU_SIDE_MACS 0)
    ('nobias_no_h0_b16_h128', lambda: tl.GRU(32, 128, bias=False), [(20, 16, 32)], (np.float32,)),
    ('b200_h64', lambda: tl.GRU(16, 64), [(16, 200, 16), (1, 200, 64)], (np.float32,)),
    ('b64_h1024', lambda: tl.GRU(64, 1024), [(3, 64, 64), (1, 64, 1024)], (np.float32,)),
    ('b64_h1024_h0_no_grad', lambda: tl.GRU(64, 1024), [(3, 64, 64), (1, 64, 1024)], (np.float32,), (1,)),   # (no
    # dh0 written: its buffer null in every backward kernel)
    ('b8_h256', lambda: tl.GRU(16, 256), [(3, 8, 16), (1, 8, 256)], (np.float32, np.float16)),   # H200, TF32:
    # forward in clusters of 8, backward cooperative
    ('b4_h8', lambda: tl.GRU(5, 8), [(4, 4, 5), (1, 4, 8)], (np.float32, np.float16)),   # clusters of one block
    ('cell_b5_h50', lambda: tl.GRUCell(7, 50), [(5, 7), (5, 50)], (np.float32, np.float16)),
    ('b40_h72', lambda: tl.GRU(16, 72), [(4, 40, 16), (1, 40, 72)], (np.float16,)),
    ('2layers_batch_first_h512', lambda: tl.GRU(128, 512, 2, batch_first=True), [(64, 10, 128), (2, 64, 512)],
     (np.float16, np.float32)),
    ('cell_no_h_b3_h64', lambda: tl.GRUCell(16, 64), [(3, 16)], (np.float16, np.float32)),
    ('bidir_2layers_dropout_eval_h50', lambda: tl.GRU(7, 50, 2, dropout=0.3, bidirectional=True).eval(),
     [(4, 6, 7), (4, 6, 50)], (np.float32,))]
GRU_RAN = {'persistent': {'_gru_forward_fused', 'gru_fwd_persistent', 'gru_bwd_persistent'},
           'fallback': {'_gru_forward_fused'}, 'composed': {'_gru_forward_loop'}}   # what each path calls
GRU_CLUSTER_KERNELS = ('gru_fwd_cluster', 'gru_bwd_cluster')
GRU_SPLIT_KERNELS = ('gru_fwd_split', 'gru_bwd_split', 'gru_fwd_split_h')
GRU_REGS_KERNELS = ('gru_fwd_regs', 'gru_bwd_regs')   # W_hh in registers, on f16 operands, hidden up to 128


def gru_case_plan(case, dtype, tc, forward, splits):
    """_gru_plan's layout for a case's layers on this GPU, the cluster kernels loaded, and the k-split ones and
    the regs ones (W_hh in registers) where `splits` says so."""
    m, shape = case[1](), case[2][0]
    batch = shape[0] if len(shape) == 2 or m.batch_first else shape[1]
    extra = splits and tc
    return tl._gru_plan(forward, *tl._gru_device()[:2], batch, m.hidden_size, np.dtype(dtype).itemsize, tc, True,
                        tl._gru_splits(forward, np.dtype(dtype)) if extra else (),
                        regs=tl._gru_regs(forward, np.dtype(dtype)) if extra else ())


def gru_split_kernel(direction, dtype, wgmma):
    """The k-split kernel of `direction` ('fwd' or 'bwd') a run of `dtype` launches, its products on wgmma or not (the
    float32 forward's wgmma on f16 operands: gru_fwd_split_h, as tl._gru_wgmma_kernel picks)."""
    half = wgmma and tl._gru_half_wgmma(direction == 'fwd', dtype)
    return f'gru_{direction}_split' + ('_h' if half else '')


def gru_split_kernels(dtype, wgmma):
    """The k-split kernels, forward and backward, a run of `dtype` launches (gru_split_kernel)."""
    return {gru_split_kernel(d, dtype, wgmma) for d in ('fwd', 'bwd')}


def gru_kernels_planned(case, dtype, allow_tf32, splits):
    """The persistent kernels (gru_{fwd,bwd}_{persistent,cluster,split,regs}) the layouts choose for a case on this
    GPU."""
    tc = int(dtype == np.float16 or allow_tf32)
    plans = {d: gru_case_plan(case, dtype, tc, d == 'fwd', splits) for d in ('fwd', 'bwd')}
    return {f'gru_{d}_regs' if plan[10] else gru_split_kernel(d, dtype, plan[8]) if plan[7] else
            f'gru_{d}_' + ('cluster' if plan[6] else 'persistent') for d, plan in plans.items()}


def test_gpu_gru_cases_take_clusters():
    """GRU_CASES run the cluster kernels of every size _gru_plan offers (forward 1 to 8 blocks, backward 1 to 4) where
    the GPU has them (their 'cluster' path hides the k-split kernels), so that their tests check each; and with the
    k-split kernels, at least one case a k-split forward and backward (test_gpu_gru_split_sizes forces each size)."""
    need_cuda()
    if not set(GRU_CLUSTER_KERNELS) <= set(tl.fused_kernels()):
        raise Skip('no GRU cluster kernels on this GPU (Hopper only)')
    plans = {(forward, splits): [gru_case_plan(case, dt, tc, forward, splits) for case in GRU_CASES for dt in case[3]
                                 for tc in {int(dt == np.float16 or a) for a in (False, True)}]
             for forward in (True, False) for splits in (False, True)}
    taken = {(forward, plan[6]) for (forward, splits), ps in plans.items() if not splits for plan in ps}
    offered = {(True, n) for n in tl._GRU_CLUSTERS} | {(False, n) for n in tl._GRU_CLUSTERS if n <= 4}
    assert offered <= taken, f'cluster sizes no case takes: {sorted(offered - taken)}'
    if set(GRU_SPLIT_KERNELS) <= set(tl.fused_kernels()):
        for forward in (True, False):
            assert any(plan[7] for plan in plans[forward, True]), \
                f'no case takes a k-split {("backward", "forward")[forward]}'


def test_gpu_gru_split_sizes():
    """The k-split kernels of every cluster size forced both ways (float32 in TF32, float16) against the CPU in float64,
    at sizes that leave padding everywhere (units, rows and k-slices not filled, cells not a multiple of the cluster):
    in the layouts chosen for this GPU (batch groups of 10 rows: warp tiles of 16 rows), in those of at most two
    clusters (batch groups of 20 or 40 rows: warp tiles of 32 rows, and of 16 at the end), and in those staging the
    operand in k-chunks of 32 columns (k-slices of 48 or more: the last chunk part-filled in some). float32 also with
    the products on wgmma wherever a layout fits (_gru_wgmma 'only'), with the operand's rows padded to each of
    _GRU_WG (batch groups of 14, 20 and 40 rows: at most 4 clusters gives 20) and in chunks, the forward's on TF32 and
    on f16 operands (_gru_half_operands; test_gpu_gru_half_operands takes them further)."""
    need_cuda()
    if not set(GRU_SPLIT_KERNELS) <= set(tl.fused_kernels()):
        raise Skip('no GRU k-split kernels on this GPU (Hopper only)')
    make, shapes = lambda: tl.GRU(12, 68), [(3, 40, 12), (1, 40, 68)]
    r = rng('gru split')
    arrays = [r.uniform(-1, 1, s) for s in shapes]
    tl.manual_seed(0)
    state = {k: 1.5 * v.astype(np.float64) for k, v in make().state_dict().items()}
    want = gru_results(make, state, arrays, np.float64, 'cpu')
    plan = tl._gru_plan
    chunked, wgmma_sizes = set(), set()
    runs = [(size, at_most, wgmma, dtype, half) for size in tl._GRU_SPLITS
            for at_most, wgmma, dtypes in [(None, False, (np.float32, np.float16)), (2, False, (np.float32, np.float16)),
                                           ('chunks', False, (np.float32, np.float16))] +
            [(at_most, 'only', (np.float32,)) for at_most in (None, 2, 4, 'chunks')] for dtype in dtypes
            for half in ((False, True) if wgmma else (True,))]
    for size, at_most, wgmma, dtype, half in runs:
        # no unsplit layout fits 0 SMs; the splits of `size` only, at most `at_most` clusters
        def split_only(forward, sms, smem, batch, hidden, itemsize, tc, clusters, splits=(), ranked=None, regs=()):
            splits = tuple((p, n if at_most in (None, 'chunks') else min(n, at_most), *rest)
                           for p, n, *rest in splits if p == size)
            layout = plan(forward, 0, smem, batch, hidden, itemsize, tc, False, splits)
            assert layout is not None and layout[7] and layout[6] == size, f'no k-split layout of {size}: {layout}'
            assert bool(layout[8]) == bool(wgmma), f'wgmma {wgmma}: layout {layout}'
            if layout[7] < layout[4]:
                chunked.add((size, forward, layout[8]))
            wgmma_sizes.add(layout[8])
            return layout
        what = f'GRU k-split {size} (clusters at most {at_most}, wgmma {wgmma}, f16 {half}) {np.dtype(dtype).name}'
        with mock.patch.object(tl, '_gru_plan', split_only), gru_autotuned(False), gru_calls() as calls, tf32(True), \
                poisoned(), mock.patch.object(tl, '_gru_chunk_cap', 32 if at_most == 'chunks' else None), \
                mock.patch.object(tl, '_gru_wgmma', wgmma), mock.patch.object(tl, '_gru_half_operands', half):
            got = gru_results(make, state, arrays, dtype, 'cuda')
            kernels = gru_split_kernels(dtype, wgmma)
        assert calls == {'_gru_forward_fused', *kernels}, f'{what}: {sorted(calls)} ran'
        for k, (g, w) in enumerate(zip(got, want)):
            assert_matches(g, w, 2e-2 if dtype == np.float16 else TF32_TOL, f'{what}: result {k}')
    assert {(2, True, 0), (2, False, 0), (4, False, 0), (2, True, 16), (2, False, 16)} <= chunked, \
        f'k-chunked layouts: {sorted(chunked)}'
    assert wgmma_sizes == {0, *tl._GRU_WG}, f'wgmma sizes run: {sorted(wgmma_sizes)}'


def gru_forward_reference(xg, w, b_ih, b_hh, h0, keep=lambda h: h):
    """The persistent forward's out and gates (r, z, n, hn) from precomputed input projections xg (T, B, 3H), in
    float64; h0 None: zeros; keep(h_t): h_t as the kernel keeps it for the next step (float16: rounded)."""
    steps, batch, hidden = xg.shape[0], xg.shape[1], w.shape[1]
    sigmoid = lambda v: 1 / (1 + np.exp(-v))
    h, out, gates = np.zeros((batch, hidden)) if h0 is None else h0, [], []
    for t in range(steps):
        s = h @ w.T
        rz = sigmoid(xg[t, :, :2 * hidden] + b_ih[:2 * hidden] + b_hh[:2 * hidden] + s[:, :2 * hidden])
        hn = s[:, 2 * hidden:] + b_hh[2 * hidden:]
        n = np.tanh(xg[t, :, 2 * hidden:] + b_ih[2 * hidden:] + rz[:, :hidden] * hn)
        h = keep(n + rz[:, hidden:] * (h - n))
        out.append(h)
        gates.append(np.concatenate((rz, n, hn), axis=1))
    return np.stack(out), np.stack(gates)


def gru_scaled_inputs(r, steps, batch, hidden, h0_kind, spread=True):
    """(xg, w, b_ih, b_hh, h0) for the tests of the forward kernels on f16 operands: W_hh's rows spanning 1e-12 to 1
    times PyTorch's scale (spread; else 1), its column 7 (the last, below 8 units) 0, b_hn 0, xg in (-2, 2); h0 None
    ('absent'), at most 1e-3 ('small'), uniform, or uniform with that column 1e5 ('large')."""
    column = min(7, hidden - 1)
    w = r.uniform(-1, 1, (3 * hidden, hidden)) * (10.0 ** r.integers(-12, 1, (3 * hidden, 1)) if spread else 1) \
        / hidden ** 0.5
    w[:, column] = 0
    b_ih, b_hh = r.uniform(-1, 1, 3 * hidden), r.uniform(-1, 1, 3 * hidden)
    b_hh[2 * hidden:] = 0
    xg = r.uniform(-2, 2, (steps, batch, 3 * hidden))
    h0 = None if h0_kind == 'absent' else r.uniform(-1, 1, (batch, hidden)) * (1e-3 if h0_kind == 'small' else 1)
    if h0_kind == 'large':
        h0[:, column] = 1e5
    return xg, w, b_ih, b_hh, h0


def assert_forward_columns(what, got, want, w, h0, tol):
    """The forward kernels' (out, gates) `got` on the GPU against `want`, gru_forward_reference's from W_hh `w` and
    `h0`: no NaN, and each unit's column (the last axis) within tol of its own largest value. hg_n's columns are bare
    products, whose f16 operands' rounding is relative to the terms' magnitudes, not to the value (cancellation can make
    that as small as it likes: a column of one step and one row has a single value): they are within tol of the
    largest |W_hh's n rows| |h_{t-1}| over their steps and rows where that is larger."""
    hidden, w, out = w.shape[1], np.asarray(w, np.float64), want[0]
    h_prev = np.concatenate((np.zeros_like(out[:1]) if h0 is None else np.asarray(h0, np.float64)[None], out[:-1]))
    terms = np.concatenate((np.zeros(3 * hidden), (np.abs(h_prev) @ np.abs(w[2 * hidden:]).T).max(axis=(0, 1))))
    for name, result, wanted, floor in (('out', got[0], want[0], 0), ('gates', got[1], want[1], terms)):
        result = cp.asnumpy(result).astype(np.float64)
        assert not np.isnan(result).any(), f'{what}: {name} has NaN'
        off, top = np.abs(result - wanted).max(axis=(0, 1)), np.maximum(np.abs(wanted).max(axis=(0, 1)), floor)
        worst = int(np.argmax(off - tol * top))   # the column furthest past its tolerance
        assert (off <= tol * top).all(), f'{what}: {name} column {worst} off {off[worst]:.3g} of {top[worst]:.3g}'


def gru_group_sizes(wn, group):
    """(hidden, batch) of a batch group as one cluster of `group` blocks in which layouts of WN's most rows fit: two
    batch groups of WN rows, the second a row short, of 24 units a block (8 blocks, hidden 190; 5 cells a thread at 48
    rows) or 16 (16 blocks, hidden 250)."""
    return {8: 190, 16: 250}[group], 2 * wn - 1


def gru_group_layout(fits, batch, wn, cells, chunked, tag):
    """Of `fits` (_gru_plan's ranked entries that fit) for a batch group as one cluster, the layout of the most rows:
    its operand's top rows used (checked, where the batch has them) and the most cells a thread. Adds its cells a
    thread to `cells` and, where it stages in k-chunks, `tag` to `chunked`."""
    layout = max(fits, key=lambda e: (e[3][3], -e[0]))[3]
    assert batch < wn - 8 or layout[3] > wn - 8, f'{layout}: rows short of WN {wn}\'s last 8'
    cells.add(-(-layout[3] * layout[2] // 256))
    if layout[7] < layout[4]:
        chunked.add(tag)
    return layout


def test_gpu_gru_half_operands():
    """gru_fwd_split_h (the float32 forward's wgmma products on f16 operands, each weight row and the batch group's h
    scaled by powers of two) launched on its own against a float64 recurrence of the same inputs, out and every gate,
    each unit's column to TF32's tolerance of its own largest value. Hidden size 136 at every cluster size, with the
    operand's rows padded to each of _GRU_WG, whole and in k-chunks of 64 (k-slices of 136, 68, 34 and 17, padded to
    192, 128 and 64); 522 in clusters of 1, 2 and 4 (K not a multiple of 4 floats or 8 halves: the element-wise loads
    and staging; at P = 1 a k-slice of 576 columns, past the 512 that stage_scaled_weights keeps in registers; of 8, no
    layout of 16 rows fits); each batch group one cluster of 8 or 16 blocks meeting at the cluster's barrier, at the
    most rows each of _GRU_GROUP_WG holds (gru_group_sizes: its top 8 rows used, up to 5 cells a thread), its operand
    whole (pushed between the blocks' shared memory; _gru_plan offers no k-chunks there). W_hh's rows span 1e-12 to 1
    times PyTorch's scale (one scale for a block's rows would lose the small ones to f16's subnormals) and b_hn is 0, so
    that the hn gate is the product alone. h0 is absent; or its column 7 is 1e5 (past f16's largest value, an infinity
    unscaled) where W_hh's column 7 is 0 (infinity times 0: NaN); or it is at most 1e-3 (the operand's scale floored at
    1's, which leaves h_t, up to 1, in range)."""
    need_cuda()
    if 'gru_fwd_split_h' not in tl.fused_kernels():
        raise Skip('no f16-operand GRU kernels on this GPU (Hopper only)')
    steps, r = 3, rng('gru half operands')
    chunked, smem = set(), tl._gru_device()[1]
    runs = [(136, 40, wn, size, cap, h0, 0) for wn, size, cap, h0 in itertools.product(
        tl._GRU_WG, tl._GRU_SPLITS_HALF, (None, 32), ('absent', 'large', 'small'))]
    runs += [(522, 40, 16, size, None, 'large', 0) for size in (1, 2, 4)]
    # a batch group as one cluster of 8 or 16 blocks, the most rows WN holds: gru_group_sizes
    runs += [(*gru_group_sizes(wn, group), wn, 1, None, h0, group) for wn, group, h0 in itertools.product(
        tl._GRU_GROUP_WG, tl._GRU_GROUPS, ('absent', 'large', 'small'))]
    cells = set()
    for hidden, batch, wn, size, cap, h0_kind, group in runs:
        splits, ranked = tuple((p, n, (wn,), *g) for p, n, _, *g in tl._gru_splits(True, np.float32)
                               if p == size and g == ([group] if group else [])), []
        with mock.patch.object(tl, '_gru_chunk_cap', cap):
            tl._gru_plan(True, 0, smem, batch, hidden, 4, 1, False, splits, ranked=ranked)
        fits = [entry for entry in ranked if entry[3][8] == wn and entry[3][9] == group and entry[4]]
        assert fits, f'no wgmma layout of {size} blocks, {wn} rows, group {group} at hidden size {hidden}'
        if group:
            layout = gru_group_layout(fits, batch, wn, cells, chunked, (size, group))
        else:   # the cheapest
            layout = min(fits)[3]
            if layout[7] < layout[4]:
                chunked.add((size, group))
        xg, w, b_ih, b_hh, h0 = gru_scaled_inputs(r, steps, batch, hidden, h0_kind)
        want_out, want_gates = gru_forward_reference(xg, w, b_ih, b_hh, h0)
        arrays = [None if a is None else cp.asarray(a, np.float32) for a in (xg, w, b_ih, b_hh, h0)]
        out = cp.full((steps, batch, hidden), np.nan, np.float32)
        gates = cp.full((steps, batch, 4 * hidden), np.nan, np.float32)
        with gru_calls(with_args=True) as calls, mock.patch.object(tl, '_gru_half_operands', True):
            tl._gru_launch('fwd', layout, True, tuple(arrays) + (out, gates), steps, batch, hidden)
        assert calls == {('gru_fwd_split_h', (size, wn, group) if group else (size, wn))}, calls
        assert_forward_columns(f'hidden {hidden}, layout {layout}, h0 {h0_kind}', (out, gates), (want_out, want_gates),
                               w, h0, TF32_TOL)
    assert {size for size, group in chunked if not group}, f'layouts in k-chunks (P, group): {chunked}'
    assert max(cells) == 5, f'cells a thread of the group layouts: {cells}'
    chunked_group = layout[:7] + (64,) + layout[8:]   # the last group layout, its operand in k-chunks of 64
    raises(RuntimeError, lambda: tl._gru_launch('fwd', chunked_group, True, tuple(arrays) + (out, gates), steps, batch,
                                                hidden), 'k-chunks', str(chunked_group))


def gru_regs_runs(forward):
    """The regs kernels' tests' runs (k, dtype, hidden, batch, steps, layout): float32 and float16, hidden 8, 50, 100
    and 128 (each KT; units and k-tiles part-filled below 128), batches of 1, 6, 13 and 21 rows in _gru_plan's regs
    layouts of blocks of 1, 1, 3 and 8 rows (the last block part-filled; blocks of one row spread their cells: the
    kernels' SPREAD), 1 and 5 steps."""
    smem = tl._gru_device()[1]
    runs = itertools.product((np.float32, np.float16), (8, 50, 100, 128), ((1, 1), (6, 1), (13, 3), (21, 8)), (1, 5))
    for k, (dtype, hidden, (batch, rows), steps) in enumerate(runs):
        ranked = []
        tl._gru_plan(forward, 132, smem, batch, hidden, np.dtype(dtype).itemsize, 1, False, ranked=ranked,
                     regs=tl._GRU_REGS)
        yield k, dtype, hidden, batch, steps, next(e[3] for e in ranked if e[3][10] and e[3][3] == rows)


def test_gpu_gru_regs_kernel():
    """gru_fwd_regs (the forward with all of W_hh in each block's registers, on f16 operands) in _gru_plan's layouts,
    launched on its own against a float64 recurrence of the same inputs: out and every gate, each unit's column within
    TF32's tolerance of its own largest value (float16: 2e-2, h_t rounded to float16 as it goes), and its out without
    gates (inference) bitwise the same, in gru_regs_runs' runs. float32 as in test_gpu_gru_half_operands: W_hh's rows
    spanning 1e-12 to 1 times PyTorch's scale, b_hn 0, and h0 absent, or with a column of 1e5 where W_hh's is 0 (an
    infinity in f16 unscaled), or at most 1e-3; float16 h0 absent or uniform."""
    need_cuda()
    if not set(GRU_REGS_KERNELS) <= set(tl.fused_kernels()):
        raise Skip('no gru_fwd_regs kernels on this GPU')
    r = rng('gru regs')
    for k, dtype, hidden, batch, steps, layout in gru_regs_runs(True):
        half = dtype == np.float16
        h0_kind = ('absent', 'uniform')[k % 2] if half else ('absent', 'large', 'small')[k % 3]
        inputs = [None if a is None else a.astype(dtype)
                  for a in gru_scaled_inputs(r, steps, batch, hidden, h0_kind, spread=not half)]
        keep = (lambda h: h.astype(np.float16).astype(np.float64)) if half else (lambda h: h)
        want_out, want_gates = gru_forward_reference(*(None if a is None else a.astype(np.float64) for a in inputs),
                                                     keep=keep)
        arrays = tuple(None if a is None else cp.asarray(a) for a in inputs)
        out, gates = cp.full((steps, batch, hidden), np.nan, dtype), cp.full((steps, batch, 4 * hidden), np.nan, dtype)
        with gru_calls(with_args=True) as calls:
            tl._gru_launch('fwd', layout, True, arrays + (out, gates), steps, batch, hidden)
        assert calls == {('gru_fwd_regs', (np.dtype(dtype), layout[10], 0, int(layout[3] == 1)))}, calls
        what = f'{np.dtype(dtype).name} hidden {hidden}, batch {batch}, {steps} steps, layout {layout}, h0 {h0_kind}'
        assert_forward_columns(what, (out, gates), (want_out, want_gates), inputs[1], inputs[4],
                               2e-2 if half else TF32_TOL)
        alone = cp.full((steps, batch, hidden), np.nan, dtype)
        tl._gru_launch('fwd', layout, True, arrays + (alone, None), steps, batch, hidden)
        assert cp.array_equal(alone, out), f'{what}: out without gates differs'


def tf32_rounded(a):
    """float64 a's float32 values rounded to TF32 as the tensor cores' operands are (cvt.rna: 10 mantissa bits, ties
    away from zero)."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xffffe000)).view(np.float32).astype(np.float64)


def test_gpu_gru_regs_projection():
    """gru_fwd_regs<T, KT, P, S> projecting x itself (x W_ih^T on TF32, 16 steps at a time, into shared memory) launched
    on its own against a float64 recurrence of x W_ih^T (x and W_ih rounded to TF32, the product to the dtype): out and
    every gate within TF32's tolerance of its largest value (float16: 2e-2, h_t rounded to float16 as it goes; not each
    unit's column: a run of one row and one step has columns of one value, some near 0), in gru_regs_runs' layouts with
    1, 16, 33 and 37 steps (one chunk part-filled, one whole, two and one step, three), 5, 20 and 64 inputs (a k-tile
    part-filled; fewer where the block's rows times the k-tiles pass _GRU_REGS_X_TILES), x as made (T, B, in) and as the
    transpose of a batch-first (B, T, in) array; and _gru_projects_inside routing there only a regs layout's eager runs
    of unit-strided, non-reversed x of at most _GRU_REGS_PROJ_STEPS steps."""
    need_cuda()
    if not set(GRU_REGS_KERNELS) <= set(tl.fused_kernels()):
        raise Skip('no gru_fwd_regs kernels on this GPU')
    r = rng('gru regs projection')
    for k, dtype, hidden, batch, _, layout in gru_regs_runs(True):
        steps, inputs, half = (1, 16, 33, 37)[k % 4], (5, 20, 64)[k // 3 % 3], dtype == np.float16
        while layout[3] * -(-inputs // 8) > tl._GRU_REGS_X_TILES:
            inputs -= 8
        rounded = lambda a: a.astype(dtype).astype(np.float64)
        _, w, b_ih, b_hh, h0 = gru_scaled_inputs(r, steps, batch, hidden, ('absent', 'uniform')[k % 2], spread=False)
        x = rounded(r.uniform(-1, 1, (batch, steps, inputs) if k % 2 else (steps, batch, inputs)))
        w_ih = rounded(r.uniform(-1, 1, (3 * hidden, inputs)) / inputs ** 0.5)
        x_gpu = cp.asarray(x, dtype).transpose(1, 0, 2) if k % 2 else cp.asarray(x, dtype)
        x = x.transpose(1, 0, 2) if k % 2 else x   # (T, B, in) either way
        keep = (lambda h: h.astype(np.float16).astype(np.float64)) if half else (lambda h: h)
        want_out, want_gates = gru_forward_reference(rounded(tf32_rounded(x) @ tf32_rounded(w_ih).T),
                                                     *(None if a is None else rounded(a) for a in (w, b_ih, b_hh, h0)),
                                                     keep=keep)
        arrays = tuple(None if a is None else cp.asarray(a, dtype) for a in (w, b_ih, b_hh, h0))
        out, gates = cp.full((steps, batch, hidden), np.nan, dtype), cp.full((steps, batch, 4 * hidden), np.nan, dtype)
        with gru_calls(with_args=True) as calls:
            tl._gru_launch('fwd', layout, True, (None,) + arrays + (out, gates, x_gpu, cp.asarray(w_ih, dtype)),
                           steps, batch, hidden)
        projects = 1 + (layout[3] == tl._GRU_REGS_ROWS)   # (P 2: 8 rows a block)
        assert calls == {('gru_fwd_regs', (np.dtype(dtype), layout[10], projects, int(layout[3] == 1)))}, calls
        what = (f'{np.dtype(dtype).name} hidden {hidden}, batch {batch}, {steps} steps, {inputs} inputs, '
                f'layout {layout}, x strides {x_gpu.strides}')
        for name, got, want in (('out', out, want_out), ('gates', gates, want_gates)):
            off, top = np.abs(cp.asnumpy(got).astype(np.float64) - want).max(), np.abs(want).max()
            assert off <= (2e-2 if half else TF32_TOL) * top, f'{what}: {name} off {off:.3g} of {top:.3g}'
        assert tl._gru_projects_inside(layout, x_gpu), what
        assert not tl._gru_projects_inside(layout, x_gpu[..., ::2]), f'{what}: x strided within a row'
        assert steps == 1 or not tl._gru_projects_inside(layout, x_gpu[::-1]), f'{what}: x reversed'
    layout, x = next(e for e in gru_regs_runs(True) if e[3] == 13)[5], cp.zeros((16, 13, 8), np.float32)
    assert tl._gru_projects_inside(layout, x) and tl._gru_projects_inside([layout], x[:15]), 'a run too short to time'
    assert not tl._gru_projects_inside(layout, cp.zeros((16, 13, 24), np.float32)), '3 rows of 3 k-tiles'
    assert not tl._gru_projects_inside(layout, cp.zeros((16, 13, 0), np.float32)), 'no inputs'
    assert not tl._gru_projects_inside(layout[:10] + (0,), x), 'not a regs layout'
    assert not tl._gru_projects_inside([layout], x), 'a timing run (its candidates not timed yet)'
    assert not tl._gru_projects_inside(layout, cp.zeros((tl._GRU_REGS_PROJ_STEPS + 1, 13, 8), np.float32)), 'steps'
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            captured = tl._gru_projects_inside(layout, x)
        finally:
            stream.end_capture()
    assert not captured, 'a CUDA graph captured'


def test_gpu_gru_regs_backward_kernel():
    """gru_bwd_regs (the backward with all of W_hh in each block's registers, on f16 operands) in _gru_plan's layouts,
    launched on its own against the float64 backward loop on the same inputs (the forward's gates and out, float64's
    rounded to the dtype): dg_ih, dg_hh, dh0 and the bias sums, each batch row within TF32's tolerance of its own
    largest value (float16: 2e-2), and without bias sums (and by turns without dh0: null) bitwise the same. dout's
    rows span 1e-4 to 1e4 (float32: each row's f16 operand scaled by its own power of two), W_hh's rows 1e-12 to 1 times
    PyTorch's scale (float32), h0 absent or given; gru_regs_runs' runs."""
    need_cuda()
    if not set(GRU_REGS_KERNELS) <= set(tl.fused_kernels()):
        raise Skip('no gru_bwd_regs kernels on this GPU')
    r = rng('gru regs backward')
    for k, dtype, hidden, batch, steps, layout in gru_regs_runs(False):
        half = dtype == np.float16
        h0_kind = ('absent', 'uniform')[k % 2]
        rounded = lambda a: None if a is None else a.astype(dtype).astype(np.float64)
        xg, w, b_ih, b_hh, h0 = map(rounded, gru_scaled_inputs(r, steps, batch, hidden, h0_kind, spread=not half))
        out, gates = map(rounded, gru_forward_reference(xg, w, b_ih, b_hh, h0))
        g = rounded(r.uniform(-1, 1, (steps, batch, hidden)) * 10.0 ** r.integers(-4, 5, (1, batch, 1)))
        want_ih, want_hh = np.empty((steps, batch, 3 * hidden)), np.empty((steps, batch, 3 * hidden))
        gates_by_kind = gates.reshape(steps, batch, 4, hidden).transpose(0, 2, 1, 3)   # the loop's (T, 4, B, H)
        want_dh0 = tl._gru_backward_loop(g, w, h0, out, gates_by_kind, want_ih, want_hh)
        want_bias = np.concatenate((want_ih.sum((0, 1)), want_hh.sum((0, 1))))
        arrays = tuple(None if a is None else cp.asarray(np.ascontiguousarray(a, dtype))
                       for a in (g, gates, out, h0, w))
        results = []
        for bias in (True, False):   # without bias sums, dh0 asked for or not by turns (each layout both ways)
            with_dh0 = bias or (k // 2 + k // 8) % 2 == 0
            grads = tuple(cp.full(shape, np.nan, dtype) for shape in ((steps, batch, 3 * hidden),) * 2)
            grads += (cp.full((batch, hidden), np.nan, dtype) if with_dh0 else None,)
            parts = cp.full((batch, 6 * hidden), np.nan, np.float32) if bias else None
            with gru_calls(with_args=True) as calls:
                tl._gru_launch('bwd', layout, True, arrays + grads + (parts,), steps, batch, hidden)
            assert calls == {('gru_bwd_regs', (np.dtype(dtype), layout[10], int(layout[3] == 1)))}, calls
            results.append((grads, parts))
        (dg_ih, dg_hh, dh0), parts = results[0]
        what = f'{np.dtype(dtype).name} hidden {hidden}, batch {batch}, {steps} steps, layout {layout}, h0 {h0_kind}'
        tol = 2e-2 if half else TF32_TOL
        for name, got, want, rows_axis in (('dg_ih', dg_ih, want_ih, 1), ('dg_hh', dg_hh, want_hh, 1),
                                           ('dh0', dh0, want_dh0, 0)):
            got = cp.asnumpy(got).astype(np.float64)
            other = tuple(a for a in range(got.ndim) if a != rows_axis)
            off, top = np.abs(got - want).max(axis=other), np.abs(want).max(axis=other)
            assert not np.isnan(got).any() and (off <= tol * top).all(), \
                f'{what}: {name} rows off {off} of {top}'
        bias_sums = cp.asnumpy(parts).sum(0)
        assert np.abs(bias_sums - want_bias).max() <= tol * np.abs(want_bias).max(), f'{what}: bias sums'
        assert all(cp.array_equal(a, b) for a, b in zip(*(grads for grads, _ in results)) if b is not None), \
            f'{what}: gradients without the bias sums (dh0 {"asked for" if with_dh0 else "null"}) differ'


def test_gpu_gru_saturated_gates():
    """The float32 forward kernels on the tensor cores (their cells on fast_sigmoid and fast_tanh), in the layouts of
    every kind _gru_candidates offers at batch 5 and hidden 72, each launched on its own with r near 0 and z near 1 in
    every cell (b_ir -12, b_iz 12) against the float64 recurrence: r and z within 1e-6, and over 40 steps that keep
    h_{t-1} out within 1e-5 (sigmoid as 0.5 + 0.5 tanh.approx(x / 2) is bound only to 2^-12 of 1, tanh.approx's 2^-11
    halved, and h could drift by that a step)."""
    need_cuda()
    steps, batch, hidden, r = 40, 5, 72, rng('gru saturated gates')
    xg, w, b_ih, b_hh, h0 = gru_scaled_inputs(r, steps, batch, hidden, 'uniform', spread=False)
    b_ih[:hidden], b_ih[hidden:2 * hidden] = -12, 12
    want_out, want_gates = gru_forward_reference(xg, w, b_ih, b_hh, h0)
    key, ranked = tl._gru_key(batch, hidden, np.float32, 1), []
    choice = tl._gru_model_choice(True, key, np.float32, ranked)
    arrays = tuple(cp.asarray(a, np.float32) for a in (xg, w, b_ih, b_hh, h0))
    kernels = set()
    for layout in dict.fromkeys(entry[3] for entry in tl._gru_candidates(ranked, choice, 0, 99)):
        out, gates = cp.full((steps, batch, hidden), np.nan, np.float32), cp.full((steps, batch, 4 * hidden), np.nan,
                                                                               np.float32)
        with gru_calls() as calls:
            tl._gru_launch('fwd', layout, True, arrays + (out, gates), steps, batch, hidden)
        kernels |= calls
        got = cp.asnumpy(gates).astype(np.float64)
        off = {'r': np.abs(got[..., :hidden] - want_gates[..., :hidden]).max(),
               'z': np.abs(got[..., hidden:2 * hidden] - want_gates[..., hidden:2 * hidden]).max(),
               'out': np.abs(cp.asnumpy(out) - want_out).max()}
        assert off['r'] <= 1e-6 and off['z'] <= 1e-6 and off['out'] <= 1e-5, f'{layout} ({calls}): off by {off}'
    assert 'gru_fwd_regs' in kernels or not set(GRU_REGS_KERNELS) <= set(tl.fused_kernels()), kernels
    assert len(kernels) > 1, kernels


def test_gpu_gru_group_clusters_float16():
    """The float16 forward with a batch group as one cluster of 8 or 16 blocks (gru_fwd_split<__half, 1, WN, G>: wgmma
    products on the f16 values as they are, the cluster's barrier instead of flags, up to 5 cells a thread) launched
    on its own against a float64 recurrence of the same f16 inputs, out and every gate to float16's tolerance of each
    unit's largest value: gru_group_sizes' hidden and batch (the most rows each of _GRU_GROUP_WG holds: its top 8 rows
    used, up to 5 cells a thread) and batch 5 (rows padded), whole and in k-chunks of 64, h0 absent or given, 4
    steps."""
    need_cuda()
    if not tl._gru_wgmma or not any(len(entry) == 4 for entry in tl._gru_splits(True, np.float16)):
        raise Skip('no float16 GRU kernels of a batch group as one cluster on this GPU (Hopper only)')
    steps, r = 4, rng('gru group clusters float16')
    half = lambda a: a.astype(np.float16).astype(np.float64)   # the inputs as the kernel reads them
    smem, tol, cells, chunked = tl._gru_device()[1], FUSED_TOL[np.dtype(np.float16)], set(), set()
    for few, wn, group, cap, with_h0 in itertools.product((False, True), tl._GRU_GROUP_WG, tl._GRU_GROUPS, (None, 32),
                                                          (False, True)):
        hidden, batch = gru_group_sizes(wn, group)
        batch = 5 if few else batch
        splits, ranked = tuple(e for e in tl._gru_splits(True, np.float16) if e[3:] == (group,)), []
        with mock.patch.object(tl, '_gru_chunk_cap', cap):
            tl._gru_plan(True, 0, smem, batch, hidden, 2, 1, False, tuple((p, n, (wn,), g) for p, n, _, g in splits),
                         ranked=ranked)
        fits = [entry for entry in ranked if entry[3][9] == group and entry[4]]
        assert fits, f'no layout of groups of {group}, {wn} rows, batch {batch}'
        layout = gru_group_layout(fits, batch, wn, cells, chunked, group)
        w = half(r.uniform(-1, 1, (3 * hidden, hidden)) / hidden ** 0.5)
        b_ih, b_hh = half(r.uniform(-1, 1, 3 * hidden)), half(r.uniform(-1, 1, 3 * hidden))
        xg = half(r.uniform(-2, 2, (steps, batch, 3 * hidden)))
        h0 = half(r.uniform(-1, 1, (batch, hidden))) if with_h0 else None
        want_out, want_gates = gru_forward_reference(xg, w, b_ih, b_hh, h0, keep=half)   # h_t kept in f16
        arrays = [None if a is None else cp.asarray(a, np.float16) for a in (xg, w, b_ih, b_hh, h0)]
        out = cp.full((steps, batch, hidden), np.nan, np.float16)
        gates = cp.full((steps, batch, 4 * hidden), np.nan, np.float16)
        with gru_calls(with_args=True) as calls:
            tl._gru_launch('fwd', layout, False, tuple(arrays) + (out, gates), steps, batch, hidden)
        assert calls == {('gru_fwd_split', (np.dtype(np.float16), 1, wn, group))}, calls
        assert_forward_columns(f'batch {batch}, layout {layout}, h0 {with_h0}', (out, gates), (want_out, want_gates),
                               w, h0, tol)
    assert max(cells) == 5 and chunked == set(tl._GRU_GROUPS), f'cells a thread {cells}, groups in k-chunks {chunked}'


def gru_results(make, state, arrays, dtype, device, no_grad=()):
    """Outputs, input gradients and parameter gradients (float64, on the host) of make() with weights `state`; the
    inputs at the indices `no_grad` need no gradient (and get none)."""
    m = make().to(dtype)
    m.load_state_dict(state)
    m = m.to(device)
    ins = [tl.Tensor(a.astype(dtype), device=device, requires_grad=k not in no_grad) for k, a in enumerate(arrays)]
    outs = m(*ins)
    outs = outs if isinstance(outs, tuple) else (outs,)
    weights = [tl.Tensor(upstream(k, o.shape, dtype), device=device) for k, o in enumerate(outs)]
    sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    assert all(ins[k].grad is None for k in no_grad), 'an input needing no gradient got one'
    grads = tuple(t.grad for k, t in enumerate(ins) if k not in no_grad)
    return [t.numpy().astype(np.float64) for t in outs + grads + tuple(p.grad for p in m.parameters())]


@contextlib.contextmanager
def gru_calls(with_args=False):
    """The set of GRU host functions and persistent kernels (the kernels _gru_launch looked up; with_args: each as
    (name, its template arguments)) that ran inside."""
    calls, saved = set(), {name: getattr(tl, name) for name in ('_gru_launch', '_gru_forward_loop', '_gru_forward_fused')}
    lookup = tl._kernel

    def looked_up(name, *args):
        calls.add((name, args) if with_args else name)
        return lookup(name, *args)

    def spy(name, inner):
        def wrapped(*args, **kwargs):
            if name != '_gru_launch':
                calls.add(name)
                return inner(*args, **kwargs)
            with mock.patch.object(tl, '_kernel', looked_up):
                return inner(*args, **kwargs)
        return wrapped
    for name, inner in saved.items():
        setattr(tl, name, spy(name, inner))
    try:
        yield calls
    finally:
        for name, inner in saved.items():
            setattr(tl, name, inner)


@contextlib.contextmanager
def gru_autotuned(on):
    """tl.gru_autotune set to `on` inside, with no layouts kept from outside or kept after."""
    tl._gru_layouts.clear()
    try:
        with mock.patch.object(tl, 'gru_autotune', on):
            yield
    finally:
        tl._gru_layouts.clear()


def check_gru_gpu(case, dtype, path, allow_tf32):
    """The GRU on the GPU path `path` forced against the CPU in float64: 'persistent' (the cooperative kernels: the
    cluster and k-split kernels hidden), 'cluster' (the persistent kernels as the layouts choose, the k-split ones
    hidden: clusters where they fit), 'split' (as the layouts choose, every kernel loaded), 'fallback' or 'composed'."""
    need_cuda()
    name, make, shapes = case[:3]
    if path == 'cluster' and not set(GRU_CLUSTER_KERNELS) <= set(tl.fused_kernels()):
        raise Skip('no GRU cluster kernels on this GPU (Hopper only)')
    if path == 'split' and not set(GRU_SPLIT_KERNELS) <= set(tl.fused_kernels()):
        raise Skip('no GRU k-split kernels on this GPU (Hopper only)')
    hidden = {'persistent': GRU_CLUSTER_KERNELS + GRU_SPLIT_KERNELS + GRU_REGS_KERNELS,
              'cluster': GRU_SPLIT_KERNELS + GRU_REGS_KERNELS}.get(path)
    r = rng(('gru', name))
    arrays = [r.uniform(-1, 1, s) for s in shapes]
    tl.manual_seed(0)
    state = {k: 1.5 * v.astype(np.float64) for k, v in make().state_dict().items()}   # 1.5 x PyTorch's init
    no_grad = case[4] if len(case) > 4 else ()
    want = gru_results(make, state, arrays, np.float64, 'cpu', no_grad)
    saved, tl._gru_path = tl._gru_path, 'persistent' if path in ('cluster', 'split') else path
    try:   # 'cluster' and 'split' run the model's choices (the kernels they check), 'persistent' the autotuned ones
        with (kernels_hidden(hidden) if hidden else contextlib.nullcontext()), \
                gru_autotuned(path == 'persistent'), gru_calls() as calls, tf32(allow_tf32), poisoned(), \
                mock.patch.object(tl, '_GRU_SIDE_MACS', 0):
            got = gru_results(make, state, arrays, dtype, 'cuda', no_grad)
    finally:
        tl._gru_path = saved
    if path in ('cluster', 'split'):
        planned = {'_gru_forward_fused'} | gru_kernels_planned(case, dtype, allow_tf32, path == 'split')
        assert calls == planned, f'{sorted(planned)} planned, but {sorted(calls)} ran'
    else:
        assert calls == GRU_RAN[path], f'{path} forced, but {sorted(calls)} ran'
    tol = 2e-2 if dtype == np.float16 else TF32_TOL if allow_tf32 and path != 'composed' else 1e-5
    for k, (g, w) in enumerate(zip(got, want)):
        assert_matches(g, w, tol, f'GRU {name} {np.dtype(dtype).name} {path}: result {k}')


for _case in GRU_CASES:
    for _dt in _case[3]:
        for _path in ('persistent', 'cluster', 'split', 'fallback', 'composed'):
            for _tf32 in (False, True) if _dt == np.float32 and _path != 'composed' else (False,):
                if _path == 'split' and _dt == np.float32 and not _tf32:   # no k-split kernels in exact float32: the
                    continue   # 'cluster' path's run
                register(f'test_gpu_gru_{_case[0]}_{np.dtype(_dt).name}_{_path}{"_tf32" if _tf32 else ""}',
                         lambda c=_case, dt=_dt, p=_path, a=_tf32: check_gru_gpu(c, dt, p, a))


GRU_FORWARD_MODES = ('no_grad', 'frozen', 'recorded')   # only the last records the forward for a backward


def gru_forward_in_mode(model, arrays, mode, dtype, device='cpu'):
    """model's outputs (host arrays) on `arrays`: under tl.no_grad, with the inputs and every parameter needing no
    gradient ('frozen'), or recorded (all needing one); the parameters need gradients again after."""
    ins = [tl.tensor(a.astype(dtype), device=device, requires_grad=mode == 'recorded') for a in arrays]
    try:
        for p in model.parameters():
            p.requires_grad_(mode != 'frozen')
        with tl.no_grad() if mode == 'no_grad' else contextlib.nullcontext():
            return [a.numpy() for a in model(*ins)]
    finally:
        for p in model.parameters():
            p.requires_grad_(True)


def test_gru_cpu_inference_keeps_no_gates():
    """On the CPU (the xp loop) a GRU forward where no backward will run (under tl.no_grad, or with nothing needing a
    gradient) keeps no gates, one step's reused as its workspace: out and h_n bitwise those of the recorded forward,
    which keeps all T steps' (and whose backward then matches finite differences elsewhere), in float32 and float64."""
    r = rng('gru cpu inference')
    x, h0 = r.uniform(-1, 1, (6, 3, 5)), r.uniform(-1, 1, (2, 3, 7))
    loop, kept = tl._gru_forward_loop, []

    def spy(*args):
        out, gates = loop(*args)
        kept.append(gates)
        return out, gates
    for dtype in (np.float32, np.float64):
        tl.manual_seed(0)
        model, results = tl.GRU(5, 7, 2).to(dtype), {}
        with mock.patch.object(tl, '_gru_forward_loop', spy):
            for mode in GRU_FORWARD_MODES:
                results[mode] = gru_forward_in_mode(model, (x, h0), mode, dtype)
                assert len(kept) == 2 and all((g is not None) == (mode == 'recorded') for g in kept), \
                    f'{np.dtype(dtype).name} {mode}: gates kept {[None if g is None else g.shape for g in kept]}'
                if mode == 'recorded':
                    assert all(g.shape == (6, 4, 3, 7) for g in kept), [g.shape for g in kept]
                kept.clear()
        for mode in ('no_grad', 'frozen'):
            for k, (got, want) in enumerate(zip(results[mode], results['recorded'])):
                assert got.dtype == dtype and np.array_equal(got, want), \
                    f'{np.dtype(dtype).name} {mode}: result {k} differs from the recorded forward\'s'


def test_gpu_gru_inference_keeps_no_gates():
    """Where no backward will run (under tl.no_grad, or with no input or parameter needing a gradient) the GRU forward
    on the GPU allocates and writes no gates (what only the backward reads), in each forward kernel (cooperative,
    cluster, k-split on mma.sync, on TF32 wgmma and on wgmma with f16 operands) and in the fallback's gru_gates_fwd:
    each launch gets a null gates pointer, and out and h_n are bitwise those of the recorded forward, whose launches get
    a gates array, and within TF32's tolerance of the CPU's (poisoned memory: an element left unwritten reads as NaN)."""
    need_cuda()
    r = rng('gru inference')
    x, h0 = r.uniform(-1, 1, (5, 40, 12)), r.uniform(-1, 1, (1, 40, 68))
    tl.manual_seed(0)
    model = tl.GRU(12, 68).to(np.float64)
    want = [a.numpy() for a in model(tl.tensor(x), tl.tensor(h0))]   # on the CPU
    model = model.to(np.float32).to('cuda')
    plan, launch, flat = tl._gru_plan, tl._gru_launch, tl._launch_flat

    def split_only(forward, sms, smem, batch, hidden, itemsize, tc, clusters, splits=(), ranked=None, regs=()):
        return plan(forward, 0, smem, batch, hidden, itemsize, tc, False, splits)   # no unsplit layout fits 0 SMs
    others = GRU_SPLIT_KERNELS + GRU_REGS_KERNELS
    runs = [('persistent', GRU_CLUSTER_KERNELS + others, True, plan, True, 'gru_fwd_persistent'),
            ('fallback', (), True, plan, True, 'gru_gates_fwd')]
    if set(GRU_REGS_KERNELS) <= set(tl.fused_kernels()):   # the model's choice at (40, 68) where it loaded
        runs += [('persistent', (), True, plan, True, 'gru_fwd_regs')]
    if set(GRU_CLUSTER_KERNELS + GRU_SPLIT_KERNELS) <= set(tl.fused_kernels()):
        runs += [('persistent', others, True, plan, True, 'gru_fwd_cluster'),
                 ('persistent', (), False, split_only, True, 'gru_fwd_split'),
                 ('persistent', (), 'only', split_only, False, 'gru_fwd_split'),
                 ('persistent', (), 'only', split_only, True, 'gru_fwd_split_h')]
    for path, hidden, wgmma, planner, half, kernel in runs:
        results, gates = {}, []   # gates: each forward launch's gates argument

        def gru_launch(direction, layout, allow, arrays, *rest):
            if direction == 'fwd':
                gates.append(arrays[6])
            return launch(direction, layout, allow, arrays, *rest)

        def launch_flat(fn, n, per_thread, args):
            if fn is tl._kernel('gru_gates_fwd', np.float32):
                gates.append(args[6])
            return flat(fn, n, per_thread, args)
        saved, tl._gru_path = tl._gru_path, path
        try:   # gru_fwd_regs' layouts offered (where its kernels are not hidden)
            with kernels_hidden(hidden), gru_autotuned(False), tf32(True), poisoned(), \
                    mock.patch.object(tl, '_gru_regs_offered', True), \
                    mock.patch.object(tl, '_gru_wgmma', wgmma), mock.patch.object(tl, '_gru_half_operands', half), \
                    mock.patch.object(tl, '_gru_plan', planner), mock.patch.object(tl, '_gru_launch', gru_launch), \
                    mock.patch.object(tl, '_launch_flat', launch_flat), gru_calls() as calls:
                for mode in GRU_FORWARD_MODES:
                    results[mode] = gru_forward_in_mode(model, (x, h0), mode, np.float32, 'cuda')
                    assert gates and all((g is not None) == (mode == 'recorded') for g in gates), \
                        f'{path} {kernel}, {mode}: gates passed {[type(g).__name__ for g in gates]}'
                    gates.clear()
        finally:
            tl._gru_path = saved
        what = f'GRU inference, {path} ({kernel})'
        assert kernel in calls if path != 'fallback' else calls == GRU_RAN[path], f'{what}: {sorted(calls)} ran'
        for mode in ('no_grad', 'frozen'):
            for k, (got, rec, ref) in enumerate(zip(results[mode], results['recorded'], want)):
                assert np.array_equal(got, rec), f'{what}, {mode}: result {k} differs from the recorded forward\'s'
                assert_matches(got.astype(np.float64), ref, TF32_TOL, f'{what}, {mode}: result {k}')


def test_gpu_gru_bias_gradients_from_the_kernel():
    """On the persistent path the backward kernel sums the bias gradients of its cells over the steps
    (BwdCells::store_bias) and gru_bias_sums sums their B rows: no column sum over the (T B, 3H) gradients runs, and
    none on the host at all (with gru_bias_sums hidden, the host's _sum of the B rows). b_ih's and b_hh's gradients
    (each requiring grad alone, and both) match the CPU's in float64, the other parameters' too: in the kernels the
    layouts choose (a cluster one on Hopper), in the cooperative ones (the others hidden), and so without
    gru_bias_sums."""
    need_cuda()
    r = rng('gru kernel bias sums')
    x0, h0 = r.uniform(-1, 1, (7, 5, 12)), r.uniform(-1, 1, (1, 5, 40))
    tl.manual_seed(0)
    state = {k: 1.5 * v.astype(np.float64) for k, v in tl.GRU(12, 40).state_dict().items()}

    def gradients(alone, dtype, device, hidden=None):   # (parameter gradients, shapes of the bias sums' inputs)
        m, rows, summed = tl.GRU(12, 40).to(dtype), [], tl._sum
        m.load_state_dict(state)
        m = m.to(device)
        for name in ('bias_ih_l0', 'bias_hh_l0'):
            getattr(m, name).requires_grad = alone in (None, name)

        def spy(a, *args, **kwargs):   # the bias gradients' sums: of (rows, 3H) or (rows, 6H)
            if a.ndim == 2 and a.shape[1] in (120, 240):
                rows.append(a.shape)
            return summed(a, *args, **kwargs)
        with mock.patch.object(tl, '_sum', spy), tf32(False), kernels_hidden(hidden) if hidden else \
                contextlib.nullcontext(), poisoned() if device == 'cuda' else contextlib.nullcontext():
            out, h_n = m(tl.tensor(x0.astype(dtype), device=device), tl.tensor(h0.astype(dtype), device=device))
            ((out * tl.tensor(upstream(0, out.shape, dtype), device=device)).sum() + h_n.sum()).backward()
        return {n: p.grad.numpy().astype(np.float64) for n, p in m.named_parameters() if p.grad is not None}, rows
    for alone in ('bias_ih_l0', 'bias_hh_l0', None):
        want, rows = gradients(alone, np.float64, 'cpu')
        assert len(want) == 2 + (2 if alone is None else 1) and (7 * 5, 120) in rows, (alone, rows)
        for hidden, summed in ((None, []), (GRU_CLUSTER_KERNELS + GRU_SPLIT_KERNELS, []),
                               (('gru_bias_sums',), [(5, 240)])):
            got, rows = gradients(alone, np.float32, 'cuda', hidden)
            what = f'{alone or "both biases"} requiring grad, kernels hidden: {hidden}'
            assert got.keys() == want.keys() and rows == summed, f'{what}: the GPU summed {rows}'
            for name in want:
                assert_matches(got[name], want[name], 1e-5, f'{name} ({what})')


def test_gpu_gru_backward_products_side_by_side():
    """From tl._GRU_SIDE_STEPS steps on, where its products take tl._GRU_SIDE_MACS multiply-adds or more (here made 0;
    as it is, this GRU's 1.3M run one after another) or a CUDA graph captures it, a GPU backward runs its products side
    by side (dW_hh on the current stream, dx and dW_ih each on a side stream, joined back into it): the gradients are
    bitwise those of the products one after another (the steps' bound set past the steps), with h0 (dW_hh's second
    product) and without, float32 and float16. The graph captures the fork and the join (every product on cuBLAS
    there, the side streams' on handles of their own): its replays on new inputs give the eager gradients within
    float32's rounding."""
    need_cuda()
    r = rng('gru side by side')
    tl.manual_seed(0)
    state = tl.GRU(24, 40).state_dict()
    xs, h0s = [r.uniform(-1, 1, (20, 6, 24)) for _ in range(2)], [r.uniform(-1, 1, (1, 6, 40)) for _ in range(2)]

    def run(m, x, h0, g):   # copies of the gradients of x, h0 and every parameter
        m.zero_grad()
        x.grad = None
        if h0 is not None:
            h0.grad = None
        out, h_n = m(x, h0)
        ((out * g).sum() + h_n.sum()).backward()
        return [t.grad.data.copy() for t in (x, h0, *m.parameters()) if t is not None]

    def counted(fn):   # fn's result, and the number of works of each _side_by_side call in it
        ran = []
        with mock.patch.object(tl, '_side_by_side', lambda *w, real=tl._side_by_side: ran.append(len(w)) or real(*w)):
            return fn(), ran

    def inputs(dtype, with_h0=True):
        m = tl.GRU(24, 40)
        m.load_state_dict(state)
        return (m.to('cuda', dtype), tl.tensor(xs[0].astype(dtype), device='cuda', requires_grad=True),
                tl.tensor(h0s[0].astype(dtype), device='cuda', requires_grad=True) if with_h0 else None,
                tl.tensor(upstream(0, (20, 6, 40), dtype), device='cuda'))
    with tf32(False):
        _, ran = counted(lambda: run(*inputs(np.float32)))
        assert ran == [], f'products of {3 * 40 * 20 * 6 * (2 * 24 + 40)} multiply-adds ran side by side: {ran}'
        with mock.patch.object(tl, '_GRU_SIDE_MACS', 0):
            for dtype in (np.float32, np.float16):
                for with_h0 in (True, False):
                    args = inputs(dtype, with_h0)
                    beside, ran = counted(lambda: run(*args))
                    with mock.patch.object(tl, '_GRU_SIDE_STEPS', 21):
                        serial, ran_serial = counted(lambda: run(*args))
                    assert ran == [3] and ran_serial == [], (ran, ran_serial)
                    for k, (a, b) in enumerate(zip(beside, serial)):
                        assert bool((a == b).all()), f'{np.dtype(dtype).name}, h0 {with_h0}: gradient {k} differs'
        args = inputs(np.float32)   # (tl._GRU_SIDE_MACS as it is: a capture runs them side by side at any size)
        x, h0 = args[1:3]
        run(*args)   # (a warm-up: the capture makes nothing new)
        graph = tl.CUDAGraph()
        with graph.capture():
            grads, ran = counted(lambda: run(*args))
        assert ran == [3], ran
        x.data[...], h0.data[...] = (tl.cp.asarray(a[1].astype(np.float32)) for a in (xs, h0s))
        graph.replay()
        want = run(*args)
    for k, (got, w) in enumerate(zip(grads, want)):
        assert_matches(got.get(), w.get(), 1e-5, f'replayed gradient {k}')


def test_gpu_gru_backward_with_fewer_than_two_products():
    """A GPU backward that wants one of its three products (the weights frozen: dx alone) or none (the weights and x
    frozen: h0's and the biases' gradients alone) forks no side streams, where the bound (here made 0) would run them
    side by side; its gradients are bitwise those of the backward that wants them all (and ran them side by side)."""
    need_cuda()
    r = rng('gru fewer products')
    tl.manual_seed(0)
    m = tl.GRU(24, 40).to('cuda')
    x = tl.tensor(r.uniform(-1, 1, (20, 6, 24)).astype(np.float32), device='cuda', requires_grad=True)
    h0 = tl.tensor(r.uniform(-1, 1, (1, 6, 40)).astype(np.float32), device='cuda', requires_grad=True)
    g = tl.tensor(upstream(0, (20, 6, 40), np.float32), device='cuda')
    tensors = (x, h0, *m.parameters())

    def grads():
        for t in tensors:
            t.grad = None
        out, h_n = m(x, h0)
        ((out * g).sum() + h_n.sum()).backward()
        return [None if t.grad is None else t.grad.data.copy() for t in tensors]
    ran = []
    with mock.patch.object(tl, '_GRU_SIDE_MACS', 0), tf32(False), \
            mock.patch.object(tl, '_side_by_side', lambda *w, real=tl._side_by_side: ran.append(len(w)) or real(*w)):
        everything = grads()
        assert ran == [3], ran
        for frozen in ((m.weight_ih_l0, m.weight_hh_l0), (m.weight_ih_l0, m.weight_hh_l0, x)):
            ran.clear()
            try:
                for t in frozen:
                    t.requires_grad_(False)
                some = grads()
            finally:
                for t in frozen:
                    t.requires_grad_(True)
            what = f'{len(frozen)} frozen'
            assert ran == [], f'{what}: side by side {ran}'
            for k, (t, got, want) in enumerate(zip(tensors, some, everything)):
                if any(t is f for f in frozen):
                    assert got is None, f'{what}: gradient {k} of a frozen tensor'
                else:
                    assert got is not None and bool((got == want).all()), f'{what}: gradient {k} differs'


def test_gpu_gru_falls_back_where_a_backward_kernel_is_missing():
    """kernels.cu's kernels load one module each, so one may fail alone. Without the cooperative backward (the cluster,
    k-split and regs kernels hidden too, so that the planner would take the cooperative ones) the GRU runs the fallback
    both ways (per step a product and the gate kernels), and without the fallback's backward gate kernel the xp loop,
    rather than fail at the backward's launch: outputs and gradients match the CPU's in float64. Forced onto the
    persistent path it says why it cannot."""
    need_cuda()
    make, shapes = next(c for c in GRU_CASES if c[0] == 'b200_h64')[1:3]
    r = rng('gru backward kernel missing')
    arrays = [r.uniform(-1, 1, s) for s in shapes]
    tl.manual_seed(0)
    state = {k: v.astype(np.float64) for k, v in make().state_dict().items()}
    want = gru_results(make, state, arrays, np.float64, 'cpu')
    others = GRU_CLUSTER_KERNELS + GRU_SPLIT_KERNELS + GRU_REGS_KERNELS
    for missing, path in (('gru_bwd_persistent', 'fallback'), ('gru_gates_bwd', 'composed')):
        with kernels_hidden(others + (missing,)), gru_autotuned(False), tf32(False):
            with gru_calls() as calls:
                got = gru_results(make, state, arrays, np.float32, 'cuda')
            saved, tl._gru_path = tl._gru_path, 'persistent'
            try:   # (without gru_gates_bwd the xp loop runs, forced or not, as without gru_gates_fwd)
                if path == 'fallback':
                    raises(ValueError, lambda: gru_results(make, state, arrays, np.float32, 'cuda'),
                           'cooperative kernels did not load')
            finally:
                tl._gru_path = saved
        assert calls == GRU_RAN[path], f'{missing} missing: {sorted(calls)} ran'
        for k, (a, b) in enumerate(zip(got, want)):
            assert_matches(a, b, 1e-5, f'{missing} missing: result {k}')


def test_gpu_gru_plans_follow_their_switches():
    """_gru_plans keeps the layouts of a shape per the switches that decide them: after a first run with the defaults
    (tl.gru_autotune: lists of candidates to time; the regs kernels, W_hh in registers, offered and among them),
    tl.gru_autotune False gives the model's choice each way, and _gru_regs_offered False layouts without regs
    kernels."""
    need_cuda()
    x = tl.cp.asarray(rng('gru plans switches').uniform(-1, 1, (20, 16, 32)).astype(np.float32))
    flat = lambda plans: [layout for p in plans for layout in (p if isinstance(p, list) else [p])]
    with gru_autotuned(True), mock.patch.object(tl, '_gru_regs_offered', True):
        tuned = tl._gru_plans(x, 128, True)
        with mock.patch.object(tl, 'gru_autotune', False):
            fixed = tl._gru_plans(x, 128, True)
        with mock.patch.object(tl, '_gru_regs_offered', False):
            plain = tl._gru_plans(x, 128, True)
        key = tl._gru_key(16, 128, np.float32, 1)
        assert fixed == [tl._gru_model_choice(forward, key, np.float32) for forward in (True, False)], (tuned, fixed)
    assert any(isinstance(p, list) for p in tuned) and any(layout[10] for layout in flat(tuned)), tuned
    assert None not in plain and not any(layout[10] for layout in flat(plain)), plain


def test_gpu_gru_autotune_keeps_the_fastest_layout():
    """tl.gru_autotune: the first run of a shape launches each direction's candidates (_gru_plans' lists) three times
    (one to load, two timed by events) and then the fastest, kept for later runs, which launch only it; the times here
    are made up (the last candidate fastest), so the choice is the tuner's, not the GPU's. Results match the CPU's in
    float64 (TF32), the first run's and the second's alike. A run of fewer than _GRU_TUNE_STEPS steps, and a first run
    inside a CUDA-graph capture, time nothing: they launch the model's choice (the replay's results match too)."""
    need_cuda()
    r = rng('gru autotune')
    x0, h0 = r.uniform(-1, 1, (tl._GRU_TUNE_STEPS + 3, 5, 12)), r.uniform(-1, 1, (1, 5, 40))
    tl.manual_seed(0)
    state = {k: 1.5 * v.astype(np.float64) for k, v in tl.GRU(12, 40).state_dict().items()}

    def run(device, dtype=np.float32, steps=len(x0)):
        m = tl.GRU(12, 40).to(dtype)
        m.load_state_dict(state)
        m = m.to(device)
        x = tl.tensor(x0[:steps].astype(dtype), device=device, requires_grad=True)
        out, h_n = m(x, tl.tensor(h0.astype(dtype), device=device))
        ((out * tl.tensor(upstream(0, out.shape, dtype), device=device)).sum() + h_n.sum()).backward()
        return [t.numpy().astype(np.float64) for t in (out, h_n, x.grad, *(p.grad for p in m.parameters()))]
    want, short = run('cpu', np.float64), tl._GRU_TUNE_STEPS - 1
    want_short = run('cpu', np.float64, short)
    launched, launch, elapsed = [], tl._gru_launch, cp.cuda.get_elapsed_time

    def spy(direction, layout, *args):
        launched.append((direction, layout))
        return launch(direction, layout, *args)
    rank = {}   # made-up times: a candidate's place from the end of its list, so the last one is the fastest

    def made_up(start, stop):
        elapsed(start, stop)
        return float(rank[launched[-1]])
    with gru_autotuned(True), tf32(True):
        with mock.patch.object(tl, '_gru_launch', spy), mock.patch.object(cp.cuda, 'get_elapsed_time', made_up), \
                poisoned():
            plans = tl._gru_plans(cp.zeros((7, 5, 12), np.float32), 40, True)
            candidates = {d: list(plans[i]) for i, d in enumerate(('fwd', 'bwd')) if isinstance(plans[i], list)}
            assert candidates, f'one candidate each way: {plans}'
            rank.update({(d, layout): len(ls) - i for d, ls in candidates.items() for i, layout in enumerate(ls)})
            got_short = run('cuda', steps=short)
            untimed = [candidates.get(d, [plans[i]])[0] for i, d in enumerate(('fwd', 'bwd'))]
            assert launched == [('fwd', untimed[0]), ('bwd', untimed[1])], f'{short} steps: launched {launched}'
            assert all(plans[i] == candidates[d] for i, d in enumerate(('fwd', 'bwd')) if d in candidates), plans
            launched.clear()
            first = run('cuda')
            kept = {d: plans[i] for i, d in enumerate(('fwd', 'bwd'))}
            for d, ls in candidates.items():
                assert kept[d] == ls[-1], f'{d}: kept {kept[d]}, candidates {ls}'
                assert [layout for e, layout in launched if e == d] == [l for l in ls for _ in range(3)] + [ls[-1]], \
                    f'{d}: launched {launched}'
            launched.clear()
            second = run('cuda')
            assert launched == [('fwd', kept['fwd']), ('bwd', kept['bwd'])], launched
        for k, (a, b, w) in enumerate(zip(first, second, want)):
            assert_matches(a, w, TF32_TOL, f'first run, result {k}')
            assert_matches(b, w, TF32_TOL, f'second run, result {k}')
        for k, (g, w) in enumerate(zip(got_short, want_short)):
            assert_matches(g, w, TF32_TOL, f'{short} steps, result {k}')
        tl._gru_layouts.clear()   # a first run inside a capture
        m = tl.GRU(12, 40)
        m.load_state_dict(state)
        m, x, h = m.to('cuda'), *(tl.tensor(a.astype(np.float32), device='cuda') for a in (x0, h0))   # enough steps
        with tl.no_grad(), mock.patch.object(tl, '_gru_launch', spy):
            launched.clear()
            graph = tl.CUDAGraph()
            with graph.capture():
                out, _ = m(x, h)
            graph.replay()
            plans = tl._gru_plans(x.data, 40, True)
        untimed = candidates.get('fwd', kept['fwd'])
        assert plans[0] == untimed and launched == [('fwd', candidates.get('fwd', [untimed])[0])], (plans, launched)
        assert_matches(out.numpy().astype(np.float64), want[0], TF32_TOL, 'output replayed from a CUDA graph')


def test_gpu_fused_kernels_relu_batchnorm_listed():
    need_cuda()
    missing = sorted({'relu_fwd', 'relu_bwd', *BN_KERNELS, *BN_TRAIN_KERNELS} - set(tl.fused_kernels()))
    assert not missing, f'tl.fused_kernels() = {tl.fused_kernels()} lacks {missing}'


def test_gpu_poison_and_composed_only_restore_state():
    need_cuda()
    device, allocator, loaded = cp.cuda.runtime.getDevice(), cp.cuda.get_allocator(), tl._load_kernels()
    like = cp.ones((5, 3), np.float16).T
    with gpu_path('composed'):
        fresh = [cp.empty(7, dt) for dt in FLOATS] + [cp.empty_like(like), cp.empty((3, 1000), np.float32)]
        assert tl.fused_kernels() == []
    assert all(np.isnan(host(a)).all() for a in fresh), 'a poisoned allocation holds a number'
    assert cp.cuda.get_allocator() == allocator and tl._loaded_kernels[device] is loaded


FALLBACK_CHILD = '''
import os, warnings
import numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    import tinygrad_lite as tl
    names = [tl.fused_kernels(), tl.fused_kernels()]
    r = np.random.default_rng(0)
    x, g = r.standard_normal((2, 6, 5, 3, 3)).astype(np.float32)
    results = {}
    for device in ('cpu', 'cuda'):
        t = tl.Tensor(x, requires_grad=True, device=device)
        rm, rv = tl.zeros(5, device=device), tl.ones(5, device=device)
        y = tl.batch_norm(t, rm, rv, training=True, activation='relu').relu() + t.relu()
        y.backward(tl.Tensor(g, device=device))
        results[device] = [a.numpy() for a in (y, t.grad, rm, rv)]
    names.append(tl.fused_kernels())
ours = [str(w.message) for w in caught if 'tinygrad_lite' in str(w.message) + w.filename]
assert len(ours) == 1, ours
assert names == [[], [], []], names
for name, a, b in zip(('output', 'grad', 'running_mean', 'running_var'), results['cuda'], results['cpu']):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)
print('fallback ok')
'''


def run_with_kernels_cu(child_code, path, ok):
    """child_code in a fresh process whose TINYGRAD_LITE_KERNELS is `path`; it must end by printing `ok`."""
    child = subprocess.run([sys.executable, '-c', child_code], cwd=os.path.dirname(os.path.abspath(__file__)),
                           env=dict(os.environ, TINYGRAD_LITE_KERNELS=path), capture_output=True, text=True, timeout=600)
    assert child.returncode == 0 and child.stdout.strip().endswith(ok), \
        f'exit {child.returncode}\n{child.stdout[-2000:]}\n{child.stderr[-4000:]}'


def test_gpu_fallback_without_kernels_cu():
    """A process whose TINYGRAD_LITE_KERNELS names no file: one warning, no kernels, and ReLU and
    BatchNorm(+ReLU) on the GPU still match the CPU."""
    need_cuda()
    with tempfile.TemporaryDirectory() as d:
        run_with_kernels_cu(FALLBACK_CHILD, os.path.join(d, 'missing', 'kernels.cu'), 'fallback ok')


BROKEN_KERNEL_CHILD = '''
import warnings
import numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    import tinygrad_lite as tl
    names = tl.fused_kernels()
    r = np.random.default_rng(1)
    weights = {}
    for device in ('cpu', 'cuda'):
        p = tl.Tensor(r.standard_normal(7).astype(np.float32), device=device, requires_grad=True) if not weights else \
            tl.Tensor(weights['cpu'][0], device=device, requires_grad=True)
        p.grad = tl.Tensor(np.linspace(-1, 1, 7, dtype=np.float32), device=device)
        opt = tl.SGD([p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
        start = p.numpy().copy()   # (on the CPU, numpy() is the parameter's own array, which the steps update)
        opt.step()
        opt.step()
        weights[device] = (start, p.numpy().copy())
ours = [str(w.message) for w in caught if 'tinygrad_lite' in str(w.message) + w.filename]
assert len(ours) == 1 and 'sgd_step' in ours[0] and 'broken on purpose' in ours[0], ours
expected = sorted(n for n in tl._KERNEL_INSTANCES if n != 'sgd_step' and (n not in tl._SM90A or
                  __import__('cupy').cuda.Device().compute_capability == '90'))
assert names == expected, (names, expected)
np.testing.assert_allclose(weights['cuda'][1], weights['cpu'][1], rtol=1e-6, atol=1e-6)
assert not np.allclose(weights['cuda'][1], weights['cuda'][0])
print('partial ok')
'''


def test_gpu_kernel_that_fails_to_compile_alone_falls_back():
    """A kernels.cu whose sgd_step alone fails to compile (a static_assert in its body): one warning naming it and
    NVRTC's message, every other kernel loaded (a module per kernel name), and SGD's composed step on the GPU as
    the CPU's."""
    need_cuda()
    with open(tl._KERNEL_PATH) as f:
        source = f.read()
    head = source.index('__global__ void sgd_step(')
    body = source.index('{', head) + 1
    broken = source[:body] + '\n    static_assert(sizeof(T) == 0, "broken on purpose");' + source[body:]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'kernels.cu')
        with open(path, 'w') as f:
            f.write(broken)
        run_with_kernels_cu(BROKEN_KERNEL_CHILD, path, 'partial ok')


# ===== CUDA graphs =====

def test_gpu_cuda_graph_replays_training_steps():
    """Steps replayed from a captured graph (new batches copied in, a new learning rate each step) give
    the parameters that eager steps give; the captured GEMMs, kernels and optimizer all replay."""
    need_cuda()
    rs = np.random.RandomState(11)
    batches = [(rs.randn(16, 3, 8, 8).astype(np.float32), rs.randint(0, 10, 16)) for _ in range(4)]
    rates = [0.1, 0.05, 0.2, 0.07]
    def run(captured):
        np.random.seed(5)
        model = tl.Sequential(tl.Conv2d(3, 8, 3, padding=1), tl.BatchNorm2d(8), tl.GELU(), tl.MaxPool2d(2),
                              tl.Flatten(), tl.Linear(8 * 4 * 4, 10)).cuda()
        rate = tl.Tensor(np.float32(rates[0]), device='cuda')
        opt = tl.SGD(model.parameters(), lr=rate if captured else rates[0], momentum=0.9, nesterov=True, weight_decay=5e-4)
        x, y = tl.Tensor(batches[0][0], device='cuda'), tl.Tensor(batches[0][1], device='cuda')
        def step():
            loss = tl.cross_entropy(model(x), y, label_smoothing=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        losses = [step().item()]   # eager: creates the momentum buffers
        graph = None
        for (bx, by), lr in zip(batches[1:], rates[1:]):
            if not captured:
                x, y = tl.Tensor(bx, device='cuda'), tl.Tensor(by, device='cuda')
                opt.param_groups[0]['lr'] = lr
                losses.append(step().item())
                continue
            x.data[...] = tl.cp.asarray(bx)
            y.data[...] = tl.cp.asarray(by)
            rate.data.fill(lr)
            if graph is None:
                graph = tl.CUDAGraph()
                with graph.capture():
                    loss = step()
            graph.replay()
            losses.append(loss.item())
        return losses, [p.numpy() for p in model.parameters()] + [b.numpy() for b in model.buffers()]
    (eager_losses, eager_state), (graph_losses, graph_state) = run(False), run(True)
    assert_close(np.array(graph_losses), np.array(eager_losses), rtol=1e-5, atol=1e-6)
    for a, b in zip(graph_state, eager_state):
        assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_gpu_cuda_graph_replays_batchnorm_training():
    """BatchNorm2d's training fwd+bwd captured once and replayed on new batches gives eager's outputs, gradients
    and running statistics, in NCHW memory (the fused training passes: their counters re-arm within each replay),
    large enough for several chunks a channel, and channels-last (the two-kernel passes)."""
    need_cuda()
    rs = np.random.RandomState(3)
    shape = (256, 6, 16, 16)
    batches = [(rs.randn(*shape).astype(np.float32) * 2 + 1, rs.randn(*shape).astype(np.float32)) for _ in range(4)]

    def run(captured, layout):
        bn = tl.BatchNorm2d(6).cuda()
        x, g = tl.Tensor(on_gpu(batches[0][0], layout), requires_grad=True), tl.Tensor(on_gpu(batches[0][1], layout))

        def step():
            x.grad = bn.weight.grad = bn.bias.grad = None
            y = bn(x)
            y.backward(g)
            return y
        if captured:   # an eager step of another module first: the kernels' scratch is made outside the capture
            tl.BatchNorm2d(6).cuda()(x).backward(g)
        graph, results = None, []
        for bx, bg in batches:
            x.data[...], g.data[...] = cp.asarray(bx), cp.asarray(bg)
            with bn_fused_passes_only() if layout == 'contiguous' else contextlib.nullcontext():
                if not captured:
                    y = step()
                else:
                    if graph is None:
                        graph = tl.CUDAGraph()
                        with graph.capture():
                            y = step()
                    graph.replay()
            results.append([t.numpy() for t in (y, x.grad, bn.weight.grad, bn.bias.grad, bn.running_mean, bn.running_var)])
        return results
    for name in BN_TRAIN_KERNELS:
        assert bn_train_config(name, np.float32, None, shape)[4] > 1, f'{name}: one chunk a channel'
    runs = {(layout, captured): run(captured, layout) for layout in ('contiguous', 'channels_last')
            for captured in (False, True)}
    for (layout, captured), results in runs.items():   # each against the eager fused passes
        for step, (got, want) in enumerate(zip(results, runs['contiguous', False])):
            for what, a, b in zip(('y', 'dx', 'dweight', 'dbias', 'running_mean', 'running_var'), got, want):
                assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f'{layout} {"replayed" if captured else "eager"} step {step}: {what}')


def test_gpu_cuda_graph_replays_clip_grad_norm():
    """clip_grad_norm_ between backward and step, captured once in a CUDA graph (nothing in it waits for the GPU)
    and replayed with new batches and a new loss scale each step (so some steps clip and some do not), gives the
    norms, losses and parameters of eager steps, for the 2-norm and the inf norm. More than 8 parameters: CuPy joins
    more than 8 arrays (cupy.stack) with a pointer table copied from the host, which a capture cannot hold."""
    need_cuda()
    rs = np.random.RandomState(12)
    batches = [(rs.randn(16, 3, 8, 8).astype(np.float32), rs.randint(0, 10, 16)) for _ in range(5)]
    scales, max_norm = [1.0, 30.0, 1e-3, 50.0, 0.01], 1.0

    def run(captured, norm_type):
        np.random.seed(6)
        model = tl.Sequential(tl.Conv2d(3, 8, 3, padding=1), tl.BatchNorm2d(8), tl.GELU(), tl.MaxPool2d(2),
                              tl.Flatten(), tl.Linear(8 * 4 * 4, 32), tl.GELU(), tl.Linear(32, 16), tl.GELU(),
                              tl.Linear(16, 10)).cuda()
        assert len(list(model.parameters())) == 10
        opt = tl.SGD(model.parameters(), lr=0.05, momentum=0.9)
        x, y = tl.Tensor(batches[0][0], device='cuda'), tl.Tensor(batches[0][1], device='cuda')
        scale = tl.Tensor(np.float32(scales[0]), device='cuda')

        def step():
            loss = tl.cross_entropy(model(x), y) * scale
            opt.zero_grad()
            loss.backward()
            norm = tl.clip_grad_norm_(model.parameters(), max_norm, norm_type)
            opt.step()
            return loss, norm
        loss, norm = step()   # eager: the kernels compile, the momentum buffers appear
        results, graph = [(loss.item(), norm.item())], None
        for (bx, by), s in zip(batches[1:], scales[1:]):
            x.data[...], y.data[...] = tl.cp.asarray(bx), tl.cp.asarray(by)
            scale.data.fill(s)
            if not captured:
                loss, norm = step()
            else:
                if graph is None:
                    graph = tl.CUDAGraph()
                    with graph.capture():
                        loss, norm = step()
                graph.replay()
            assert norm.device == 'cuda:0' and norm.shape == ()
            results.append((loss.item(), norm.item()))
        return np.array(results), [p.numpy() for p in model.parameters()]
    for norm_type in (2.0, math.inf):
        (eager, eager_params), (replayed, replayed_params) = run(False, norm_type), run(True, norm_type)
        norms = eager[:, 1]
        assert (norms > max_norm).any() and (norms < max_norm).any(), (norm_type, norms)
        assert_close(replayed, eager, rtol=1e-5, atol=1e-6, msg=f'norm {norm_type}: losses and norms')
        for a, b in zip(replayed_params, eager_params):
            assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f'norm {norm_type}: parameters')


# ===== train_cifar.py: data, augmentation, model, resume =====

def _tiny_cifar(n_train=40, n_test=20, seed=0):
    """Learnable CIFAR-shaped data: each class has its own colour, plus noise."""
    rng = np.random.default_rng(seed)
    palette = rng.integers(30, 226, (10, 3))
    def make(n):
        y = np.arange(n) % 10
        x = palette[y][:, :, None, None] + rng.normal(0, 25, (n, 3, 32, 32))
        return np.clip(x, 0, 255).astype(np.uint8), y
    return (*make(n_train), *make(n_test))


def _write_batches(folder, x_train, y_train, x_test, y_test):
    """The official python layout: data_batch_1..5 and test_batch, pickled dicts of bytes keys."""
    os.makedirs(folder, exist_ok=True)
    def dump(name, x, y):
        with open(os.path.join(folder, name), 'wb') as f:
            pickle.dump({b'batch_label': name.encode(), b'labels': y.tolist(), b'data': x.reshape(len(x), -1)}, f)
    for k, part in enumerate(np.array_split(np.arange(len(x_train)), 5)):
        dump(f'data_batch_{k + 1}', x_train[part], y_train[part])
    dump('test_batch', x_test, y_test)


def _args(data, *extra):
    return tc.parse_args(['--data', data, '--device', 'cpu', '--widths', '8,16,16', '--batch-size', '20', *extra])


def _train(args):
    """tc.train(args) with its printing kept out of the test output."""
    with contextlib.redirect_stdout(io.StringIO()):
        return tc.train(args)


def test_cifar_load_official_layout():
    data = _tiny_cifar()
    with tempfile.TemporaryDirectory() as root:
        _write_batches(os.path.join(root, 'cifar-10-batches-py'), *data)
        for where in (root, os.path.join(root, 'cifar-10-batches-py')):   # the parent or the batches folder
            loaded = (*tc.load_cifar(where, 'train', download=False), *tc.load_cifar(where, 'test', download=False))
            for got, want in zip(loaded, data):
                assert got.shape == want.shape and np.array_equal(got, want), (got.shape, want.shape)
            assert loaded[0].dtype == np.uint8 and loaded[1].dtype == np.int64


def test_cifar_corrupt_file_is_named():
    with tempfile.TemporaryDirectory() as root:
        folder = os.path.join(root, 'cifar-10-batches-py')
        _write_batches(folder, *_tiny_cifar())
        path = os.path.join(folder, 'data_batch_3')
        with open(path, 'rb') as f:
            head = f.read(200)
        with open(path, 'wb') as f:   # truncated
            f.write(head)
        def expect_error(word, what):
            try:
                tc.load_cifar(root, 'train', download=False)
            except tc.DataError as e:
                assert 'data_batch_3' in str(e) and word in str(e), str(e)
            else:
                raise AssertionError(f'{what} loaded without error')
        expect_error('truncated', 'a truncated batch')
        with open(path, 'wb') as f:   # readable, but not CIFAR-shaped
            pickle.dump({b'data': np.zeros((2, 10), np.uint8), b'labels': [0, 1]}, f)
        expect_error('3072', 'a batch of the wrong shape')


def test_cifar_download_md5_and_unpack():
    data = _tiny_cifar()
    with tempfile.TemporaryDirectory() as root:
        _write_batches(os.path.join(root, 'src', 'cifar-10-batches-py'), *data)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode='w:gz') as t:
            t.add(os.path.join(root, 'src', 'cifar-10-batches-py'), arcname='cifar-10-batches-py')
        archive = buf.getvalue()
        def urlopen(*a, **k):
            r = io.BytesIO(archive)
            r.headers = {'Content-Length': str(len(archive))}
            return r
        target = os.path.join(root, 'data')
        with mock.patch.object(urllib.request, 'urlopen', urlopen):
            try:   # the real MD5 does not match the fake archive
                tc.load_cifar(target, 'train')
            except tc.DataError as e:
                assert 'MD5' in str(e), str(e)
            else:
                raise AssertionError('an archive with the wrong MD5 was accepted')
            with mock.patch.object(tc, 'MD5', hashlib.md5(archive).hexdigest()):
                loaded = (*tc.load_cifar(target, 'train'), *tc.load_cifar(target, 'test', download=False))
        assert all(np.array_equal(a, b) for a, b in zip(loaded, data))
        assert os.path.exists(os.path.join(target, 'cifar-10-python.tar.gz'))


def test_cifar_no_network_says_how_to_point_data():
    def offline(*a, **k):
        raise urllib.error.URLError('Temporary failure in name resolution')
    with tempfile.TemporaryDirectory() as root, mock.patch.object(urllib.request, 'urlopen', offline):
        try:
            tc.load_cifar(root, 'train')
        except tc.DataError as e:
            msg = str(e)
            assert 'no network' in msg and '--data' in msg and 'shared/tools/cifar_jpeg_to_batches.py' in msg, msg
        else:
            raise AssertionError('no error without network')
        try:
            tc.main(['--data', root, '--device', 'cpu'])
        except SystemExit as e:   # sys.exit(message): status 1
            assert e.code not in (0, None) and 'no network' in str(e.code), e.code
        else:
            raise AssertionError('main() did not exit')
        assert os.listdir(root) == [], os.listdir(root)   # root existed before: kept, and nothing left in it
    class CutOff(io.BytesIO):   # the connection drops after the first chunk
        headers = {}
        def read(self, n=-1):
            chunk = super().read(n)
            if not chunk:
                raise ConnectionResetError('reset by peer')
            return chunk
    def cut_off(*a, **k):
        return CutOff(b'x' * (1 << 20))
    for urlopen in (offline, cut_off):
        with tempfile.TemporaryDirectory() as root, mock.patch.object(urllib.request, 'urlopen', urlopen):
            made = os.path.join(root, 'data')
            raises(tc.DataError, lambda: tc.load_cifar(made, 'train'), 'no network')
            assert not os.path.exists(made), os.listdir(made)   # no empty ./data, no .part left behind


def test_cifar_data_folder_that_cannot_be_made_named():
    """--data naming a folder that cannot be made (an empty path, a file on the way): main() exits with an error naming
    it, where os.makedirs's traceback ended the run."""
    with tempfile.TemporaryDirectory() as root:
        blocked = os.path.join(root, 'a_file')
        open(blocked, 'w').close()
        for data in ('', os.path.join(blocked, 'data')):
            raises(tc.DataError, lambda: tc.load_cifar(data, 'train'), 'cannot be made', repr(data))
            try:
                tc.main(['--data', data, '--device', 'cpu'])
            except SystemExit as e:
                assert e.code not in (0, None) and 'cannot be made' in str(e.code), e.code
            else:
                raise AssertionError('main() did not exit')


def test_cifar_missing_batches_named_not_downloaded():
    """A batches folder lacking some files is an error naming them: the archive is downloaded (and unpacked over
    the folder) only where the folder is absent."""
    def urlopen(*a, **k):
        raise AssertionError('downloaded although the batches folder exists')
    with tempfile.TemporaryDirectory() as root, mock.patch.object(urllib.request, 'urlopen', urlopen):
        for folder in (os.path.join(root, 'a', 'cifar-10-batches-py'), os.path.join(root, 'b')):   # both layouts
            _write_batches(folder, *_tiny_cifar())
            for name in ('data_batch_1', 'data_batch_4'):
                os.remove(os.path.join(folder, name))
            where = os.path.dirname(folder) if folder.endswith('py') else folder
            msg = raises(tc.DataError, lambda: tc.load_cifar(where, 'train'), folder, 'data_batch_1, data_batch_4')
            assert 'data_batch_2' not in msg and 'test_batch' not in msg, msg
            assert len(tc.load_cifar(where, 'test')[0]) == 20   # the test split is all there


def test_cifar_empty_batches_refused():
    """Batches without images are a DataError naming them, not a ZeroDivisionError (training) or "0.00%" (testing)."""
    def empty(folder, name):
        with open(os.path.join(folder, name), 'wb') as f:
            pickle.dump({b'labels': [], b'data': np.zeros((0, 3072), np.uint8)}, f)
    with tempfile.TemporaryDirectory() as root:
        folder = os.path.join(root, 'cifar-10-batches-py')
        _write_batches(folder, *_tiny_cifar(n_train=40, n_test=20))
        empty(folder, 'test_batch')
        raises(tc.DataError, lambda: tc.load_cifar(root, 'test'), 'test_batch', 'no images')
        raises(tc.DataError, lambda: _train(_args(root, '--epochs', '1')), 'test_batch', 'no images')   # after training
        for k in range(1, 6):
            empty(folder, f'data_batch_{k}')
        raises(tc.DataError, lambda: _train(_args(root, '--epochs', '1')), 'data_batch_1', 'data_batch_5', 'no images')


def _cli_error(*argv):
    """The argparse error (exit status 2) that train_cifar.py prints for argv."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            tc.parse_args(list(argv))
    except SystemExit as e:
        assert e.code == 2, e.code
        return err.getvalue()
    raise AssertionError(f'{argv} accepted')


def test_cifar_cli_refuses_bad_values():
    """Each bad value is an argparse error naming the option (and the user's path), before any data is read."""
    with tempfile.TemporaryDirectory() as d:
        a_file, missing = os.path.join(d, 'file'), os.path.join(d, 'nope', 'out')
        open(a_file, 'w').close()
        cases = [(['--train-limit', '-5'], '--train-limit'), (['--train-limit', '0'], '--train-limit'),
                 (['--val', '0'], '--val'), (['--seed', str(2 ** 64)], '--seed', '2**64'),
                 (['--epochs', '1e300'], '--epochs', '10000'),
                 (['--stop-after', '0'], '--stop-after'), (['--seed', '-1'], '--seed'),
                 (['--batch-size', '0'], '--batch-size'), (['--weight-decay', 'nan'], '--weight-decay'),
                 *[(['--epochs', v], '--epochs') for v in ('nan', 'inf', '0', '-1')],
                 *[(['--lr', v], '--lr') for v in ('nan', '-inf', '0')],
                 *[(['--widths', v], f"'{v}'", 'three positive integers') for v in ('8,8', '8,8,8,8', '8,0,8', '8,-2,8',
                                                                                    'a,b,c', '8,,8', '')],
                 (['--data', a_file], a_file), (['--save', missing], missing, 'does not exist'),
                 (['--log', missing], missing, 'does not exist'), (['--save', d], d, 'folder'),
                 *[(['--device', v], v, "'cpu', 'cuda' or 'cuda:N'") for v in ('gpu', 'cuda:x', 'cuda1', 'CPU')]]
        if not tl.cuda_is_available():
            cases.append((['--device', 'cuda:0'], 'needs CuPy'))
        if os.path.isdir('/proc'):   # a folder that takes no new file, even for root
            cases += [(['--save', '/proc/ck.npz'], '/proc/ck.npz', 'cannot write'),
                      (['--log', '/proc/x.jsonl'], '/proc/x.jsonl', 'cannot write')]
        for argv, *needles in cases:
            msg = _cli_error('--device', 'cpu', *argv)
            for needle in needles:
                assert needle in msg, (argv, needle, msg)
        args = tc.parse_args(['--device', 'cpu', '--widths', '8,16,16', '--weight-decay', '0', '--seed', '0',
                              '--save', os.path.join(d, 'ck.npz'), '--log', 'log.jsonl', '--data', missing])
        assert args.widths == (8, 16, 16) and tc.parse_args([]).widths == tc.WIDTHS, args.widths


def test_cifar_augment_matches_numpy_and_is_seeded():
    x = np.random.default_rng(0).integers(0, 256, (6, 3, 32, 32), dtype=np.uint8)
    images = tc.DeviceImages(x, 'cpu', np.dtype(np.float32))
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)), mode='reflect')
    flip0 = np.random.default_rng(1).random(6) < 0.5
    plans = [tc.epoch_plan(np.random.default_rng(7), 6, flip0, epoch=0) for _ in range(2)]
    assert all(np.array_equal(a, b) for a, b in zip(*plans)), 'the same seed gave different plans'
    index, shifts, flips = plans[0]
    crops = images.crops(*images.offsets(index, shifts, flips))
    assert crops.shape == (6, 3, 32, 32) and crops.dtype == np.uint8, (crops.shape, crops.dtype)
    for k, (i, (dy, dx), f) in enumerate(zip(index, shifts, flips)):
        want = padded[i, :, 2 + dy:34 + dy, 2 + dx:34 + dx]
        assert np.array_equal(crops.numpy()[k], want[:, :, ::-1] if f else want), (k, dy, dx, f)
    # flips alternate between epochs; shifts and order are drawn anew
    odd = tc.epoch_plan(np.random.default_rng(7), 6, flip0, epoch=1)
    assert np.array_equal(odd[2], ~flip0[odd[0]]) and np.array_equal(flips, flip0[index])
    batch = images.batch(*images.offsets(np.arange(6), np.zeros((6, 2), int), np.zeros(6)))
    want = (x - tc.MEAN[:, None, None]) / tc.STD[:, None, None]
    assert batch.dtype == np.float32 and np.allclose(batch.numpy(), want, atol=1e-4)


def test_cifar_whitening_filters_whiten_patches():
    x = _tiny_cifar(n_train=200)[0]
    w = tc.whitening_filters(tc.DeviceImages(x, 'cpu', np.dtype(np.float32)), eps=0.0)
    assert w.shape == (24, 3, 2, 2) and np.array_equal(w[12:], -w[:12])
    z = (x - tc.MEAN[:, None, None]) / tc.STD[:, None, None]
    patches = np.stack([z[:, :, i:i + 31, j:j + 31] for i in (0, 1) for j in (0, 1)], axis=2)
    patches = patches.transpose(0, 3, 4, 1, 2).reshape(-1, 12)
    out = patches @ w[:12].reshape(12, -1).T.astype(np.float64)
    assert np.allclose(out.T @ out / len(out), np.eye(12), atol=1e-3)


def test_cifar_short_run_loss_falls():
    with tempfile.TemporaryDirectory() as root:
        _write_batches(os.path.join(root, 'cifar-10-batches-py'), *_tiny_cifar(n_train=200, n_test=50))
        # batch 20 instead of 1024: a larger lr per example keeps the steps as large
        result = _train(_args(root, '--epochs', '4', '--tta', 'flip', '--lr', '100'))
    losses = [r['train_loss'] for r in result['epochs']]
    assert len(losses) == 4 and all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.85 * losses[0], losses
    assert result['test_acc'] >= 0.4, result['test_acc']


def test_cifar_float64_run_trains():
    """--dtype float64 trains: its BatchNorms take float64 copies of their float32 parameters (batch_norm refuses a
    float32 weight for float64 activations, as PyTorch's), the loss falls and the accuracies are numbers."""
    with tempfile.TemporaryDirectory() as root:
        _write_batches(os.path.join(root, 'cifar-10-batches-py'), *_tiny_cifar(n_train=80, n_test=20))
        result = _train(_args(root, '--epochs', '3', '--dtype', 'float64', '--lr', '100'))
    losses = [r['train_loss'] for r in result['epochs']]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0] and 0 <= result['test_acc'] <= 1, losses
    assert result['model'].state_dict()['blocks.0.norm1.weight'].dtype == np.float32, 'master weights float32'


def test_cifar_resume_equals_uninterrupted():
    with tempfile.TemporaryDirectory() as root:
        _write_batches(os.path.join(root, 'cifar-10-batches-py'), *_tiny_cifar(n_train=80, n_test=20))
        ck, log = os.path.join(root, 'ck.npz'), os.path.join(root, 'log.jsonl')
        whole = _train(_args(root, '--epochs', '2.5', '--seed', '3'))
        first = _train(_args(root, '--epochs', '2.5', '--seed', '3', '--save', ck, '--stop-after', '1'))
        assert first['steps'] == 4 and os.path.exists(ck) and not os.path.exists(ck + '.tmp')
        assert first['test_acc'] is None and first['eval_time'] is None   # stopped early: not tested
        rest = _train(_args(root, '--epochs', '2.5', '--seed', '3', '--resume', ck, '--log', log))
        assert rest['steps'] == whole['steps'] == 10, (rest['steps'], whole['steps'])
        a, b = whole['model'].state_dict(), rest['model'].state_dict()
        for k in a:
            assert np.array_equal(a[k], b[k]), f'{k} differs after resuming'
        assert rest['test_acc'] == whole['test_acc']
        assert [r['train_loss'] for r in rest['epochs']] == [r['train_loss'] for r in whole['epochs'][1:]]
        with open(log) as f:   # a line per epoch, then the final evaluation's
            records = [json.loads(line) for line in f]
        assert [r.get('epoch') for r in records] == [2, 3, None] and 'test_acc' not in records[0], records
        assert records[-1]['test_acc'] == rest['test_acc'] and records[-1]['steps'] == 10, records[-1]
        assert records[-1]['test_acc_no_tta'] == rest['test_acc_no_tta'], records[-1]
        try:   # other settings than the checkpoint's are refused
            _train(_args(root, '--epochs', '3', '--seed', '3', '--resume', ck))
        except ValueError as e:
            assert 'same settings' in str(e), str(e)
        else:
            raise AssertionError('resumed with different settings')


def test_cifar_test_batch_read_only_after_training():
    """The held-back split (test_batch) is read and evaluated once, after the last training step; a --stop-after
    run that ends before the schedule does not read it at all (it trains with test_batch unreadable), and a
    full run checks before training that test_batch is there."""
    with tempfile.TemporaryDirectory() as root:
        folder = os.path.join(root, 'cifar-10-batches-py')
        _write_batches(folder, *_tiny_cifar(n_train=60, n_test=20))
        events, read_batch, train_step, evaluate = [], tc.read_batch, tc.train_step, tc.evaluate
        def read(path):
            events.append(os.path.basename(path))
            return read_batch(path)
        def step(*a):
            events.append('step')
            return train_step(*a)
        def test(*a):
            events.append('evaluate')
            return evaluate(*a)
        log = os.path.join(root, 'log.jsonl')
        with mock.patch.object(tc, 'read_batch', read), mock.patch.object(tc, 'train_step', step), \
                mock.patch.object(tc, 'evaluate', test):
            result = _train(_args(root, '--epochs', '2', '--log', log))
        last_step = max(i for i, e in enumerate(events) if e == 'step')
        assert events.count('test_batch') == 1 and events.index('test_batch') > last_step, events
        assert events.count('evaluate') == 1 and events.index('evaluate') > last_step, events
        assert result['test_acc'] is not None and all('test_acc' not in r for r in result['epochs']), result
        with open(log) as f:
            assert [json.loads(line).get('test_acc') is None for line in f] == [True, True, False]
        with open(os.path.join(folder, 'test_batch'), 'wb') as f:   # unreadable: reading it raises DataError
            f.write(b'not a batch')
        ck = os.path.join(root, 'ck.npz')
        first = _train(_args(root, '--epochs', '2', '--stop-after', '1', '--save', ck))
        assert first['steps'] == 3 and first['test_acc'] is None, first
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            tc.main(['--data', root, '--device', 'cpu', '--widths', '8,16,16', '--batch-size', '20', '--epochs', '2',
                     '--stop-after', '1'])
        assert 'no test evaluation' in out.getvalue() and 'test accuracy' not in out.getvalue(), out.getvalue()
        with mock.patch.object(tc, 'train_step', step):   # the rest trains, then the final evaluation fails
            events.clear()
            raises(tc.DataError, lambda: _train(_args(root, '--epochs', '2', '--resume', ck)), 'test_batch')
            assert events == ['step'] * 3, events
            os.remove(os.path.join(folder, 'test_batch'))   # missing: a full run stops before it trains
            events.clear()
            raises(tc.DataError, lambda: _train(_args(root, '--epochs', '2')), 'test_batch')
            assert events == [], events
            assert _train(_args(root, '--epochs', '2', '--stop-after', '1'))['steps'] == 3
    assert 'does not evaluate on the test set' in _help(), 'the --help text does not say so'


def test_cifar_validation_split_never_reads_test_batch():
    """--val N trains on all but the last N training images and evaluates on those after training, in place of
    test_batch, which it never reads (here unreadable, then missing); the result and the log's last line give val_acc (with TTA)
    and val_acc_no_tta, the accuracy of a plain evaluation of the model on the held-back images; a --val leaving no
    training images is a DataError, and a checkpoint of another --val does not resume."""
    with tempfile.TemporaryDirectory() as root:
        folder = os.path.join(root, 'cifar-10-batches-py')
        _write_batches(folder, *_tiny_cifar(n_train=70, n_test=20))
        with open(os.path.join(folder, 'test_batch'), 'wb') as f:   # unreadable: reading it raises DataError
            f.write(b'not a batch')
        opened, read_batch = [], tc.read_batch
        def read(path):
            opened.append(os.path.basename(path))
            return read_batch(path)
        log, ck = os.path.join(root, 'log.jsonl'), os.path.join(root, 'ck.npz')
        with mock.patch.object(tc, 'read_batch', read):
            result = _train(_args(root, '--epochs', '2', '--val', '30', '--log', log, '--tta', 'off', '--save', ck))
        assert 'test_batch' not in opened and result['steps'] == 4, (opened, result['steps'])   # 40 images, batch 20
        assert 'test_acc' not in result and 0 <= result['val_acc'] == result['val_acc_no_tta'] <= 1, result
        x, y = tc.load_cifar(root, 'train')
        plain, _ = tc.evaluate(result['model'], tc.DeviceImages(x[-30:], 'cpu', np.float32), y[-30:], 'off')
        assert plain == result['val_acc'], (plain, result['val_acc'])
        with open(log) as f:
            last = json.loads(f.read().splitlines()[-1])
        assert last['val_acc'] == result['val_acc'] and last['val_acc_no_tta'] == result['val_acc_no_tta'], last
        raises(tc.DataError, lambda: _train(_args(root, '--val', '70')), '--val 70', '70 training images')
        raises(tc.ResumeError, lambda: _train(_args(root, '--epochs', '2', '--val', '20', '--resume', ck)), 'val')
        os.remove(os.path.join(folder, 'test_batch'))   # nor needs it there
        assert 0 <= _train(_args(root, '--epochs', '1', '--val', '30', '--tta', 'off'))['val_acc'] <= 1
    assert 'validation' in _help() and 'never reads' in _help()


def test_cifar_cpu_duration_note():
    """A CPU run whose steps left take over 0.2 h at 50 images/s says so before it trains; one resumed near the end of
    such a schedule does not (the steps left count, not the schedule's). One that will evaluate says what the
    evaluation takes (per 1,000 images, by its views); one stopped before the end does not."""
    with tempfile.TemporaryDirectory() as root:
        _write_batches(os.path.join(root, 'cifar-10-batches-py'), *_tiny_cifar(n_train=20, n_test=20))
        ck, load_checkpoint = os.path.join(root, 'ck.npz'), tc.load_checkpoint
        def printed(*extra):   # 2000 epochs of one step of 20 images: 0.22 h
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                tc.train(_args(root, '--epochs', '2000', '--tta', 'off', *extra))
            return out.getvalue()
        out = printed('--stop-after', '1', '--save', ck)
        assert 'note: about 0.2 h on a CPU of 2 cores' in out and 'evaluation takes' not in out, out
        near_end = lambda path, config: {**load_checkpoint(path, config), 'epoch': 1999, 'step': 1999}
        with mock.patch.object(tc, 'load_checkpoint', near_end):
            out = printed('--resume', ck)
        assert 'step 1999 of 2000' in out and 'h on a CPU' not in out, out
        assert 'the final evaluation takes about 7 s per 1,000 images' in out, out   # (--tta off: one view)


def test_cifar_finished_checkpoint_resumed_with_stop_after_tests():
    """A checkpoint at the end of the schedule, resumed with a --stop-after below its epoch, trains no more and
    runs the final evaluation (it said 'stopped after epoch 2 of 2: no test evaluation')."""
    with tempfile.TemporaryDirectory() as root:
        _write_batches(os.path.join(root, 'cifar-10-batches-py'), *_tiny_cifar(n_train=60, n_test=20))
        ck = os.path.join(root, 'ck.npz')
        done = _train(_args(root, '--epochs', '2', '--save', ck))
        again = _train(_args(root, '--epochs', '2', '--resume', ck, '--stop-after', '1'))
        assert again['steps'] == done['steps'] and again['epochs'] == [], again
        assert again['test_acc'] == done['test_acc'] is not None, (again, done)

def _help():
    """train_cifar.py's --help text, its whitespace runs as single spaces."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        tc.parse_args(['--help'])
    return ' '.join(out.getvalue().split())


def test_cifar_resume_errors_name_the_checkpoint():
    """--resume of a missing, truncated or foreign file, or of a folder, is a ResumeError naming the path (main()
    prints it and exits with 1); a checkpoint made with another weight decay or dtype is refused as other settings."""
    with tempfile.TemporaryDirectory() as root:
        _write_batches(os.path.join(root, 'cifar-10-batches-py'), *_tiny_cifar(n_train=40, n_test=20))
        ck = os.path.join(root, 'ck.npz')
        _train(_args(root, '--epochs', '2', '--stop-after', '1', '--save', ck))
        with open(ck, 'rb') as f:
            whole = f.read()
        bad = {name: os.path.join(root, name) for name in ('truncated.npz', 'text.npz', 'other.npz')}
        with open(bad['truncated.npz'], 'wb') as f:
            f.write(whole[:len(whole) // 2])
        with open(bad['text.npz'], 'w') as f:
            f.write('not a checkpoint')
        tl.save({'model': {}}, bad['other.npz'])
        cases = [(os.path.join(root, 'missing.npz'), 'FileNotFoundError'), (root, 'cannot read'),
                 (bad['truncated.npz'], 'cannot read'), (bad['text.npz'], 'cannot read'),
                 (bad['other.npz'], 'not a checkpoint')]
        for path, needle in cases:
            raises(tc.ResumeError, lambda: _train(_args(root, '--epochs', '2', '--resume', path)), f'--resume {path}:',
                   needle)
        try:
            tc.main(['--data', root, '--device', 'cpu', '--widths', '8,16,16', '--batch-size', '20', '--epochs', '2',
                     '--resume', bad['truncated.npz']])
        except SystemExit as e:
            assert str(e.code).startswith(f"error: --resume {bad['truncated.npz']}:"), e.code
        else:
            raise AssertionError('main() did not exit')
        for extra, setting in ((['--weight-decay', '0.01'], "'weight_decay': 0.01"),
                               (['--dtype', 'float64'], "'dtype': 'float64'")):
            raises(tc.ResumeError, lambda: _train(_args(root, '--epochs', '2', '--resume', ck, *extra)),
                   'same settings', setting)
        assert _train(_args(root, '--epochs', '2', '--resume', ck))['steps'] == 4


def test_cifar_net_and_optimizer_match_pytorch():
    """The same net written in PyTorch, loaded with our initial weights, gives the same logits and the
    same weights after three steps of the same optimizer settings (need_torch, torch, F: test_all.py's)."""
    need_torch()
    widths, n = (8, 16, 16), 16
    x = np.random.default_rng(0).integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
    y = np.arange(n) % 10
    images = tc.DeviceImages(x, 'cpu', np.dtype(np.float32))
    tl.manual_seed(0)
    model = tc.make_model(tc.whitening_filters(images), widths)
    opt, lrs = tc.make_optimizer(model, 11.5, 0.0153, n)

    def group(c_in, c_out):
        return torch.nn.ModuleDict(dict(
            conv1=torch.nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
            norm1=torch.nn.BatchNorm2d(c_out, eps=1e-12, momentum=0.4),
            conv2=torch.nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
            norm2=torch.nn.BatchNorm2d(c_out, eps=1e-12, momentum=0.4)))
    net = torch.nn.ModuleDict(dict(whiten=torch.nn.Conv2d(3, 24, 2), head=torch.nn.Linear(widths[2], 10, bias=False),
                                   blocks=torch.nn.ModuleList([group(24, widths[0]), group(widths[0], widths[1]),
                                                               group(widths[1], widths[2])])))
    def forward(x):
        x = F.gelu(net['whiten'](x))
        for b in net['blocks']:
            x = F.gelu(b['norm2'](b['conv2'](F.gelu(b['norm1'](F.max_pool2d(b['conv1'](x), 2))))))
        return net['head'](F.max_pool2d(x, 3).flatten(1)) / 9
    net.load_state_dict({k: torch.tensor(v) for k, v in model.state_dict().items()})
    named = dict(net.named_parameters())
    shifts = [p for k, p in named.items() if 'norm' in k and k.endswith('bias')]
    others = [p for k, p in named.items() if 'norm' not in k and not k.startswith('whiten')]
    momentum = 0.85
    scale = 1024 * (1 + 1 / (1 - momentum))
    lr, decay = 11.5 / scale, 0.0153 * n / scale
    topt = torch.optim.SGD([dict(params=shifts, lr=64 * lr, weight_decay=decay / (64 * lr)),
                            dict(params=others, lr=lr, weight_decay=decay / lr),
                            dict(params=[named['whiten.bias']], lr=lr, weight_decay=decay / lr)],
                           momentum=momentum, nesterov=True)
    offsets = images.offsets(np.arange(n), np.zeros((n, 2), int), np.zeros(n, bool))
    xb = images.batch(*offsets)
    for multiplier in (0.2, 0.5, 1.0):
        for g, h, base in zip(opt.param_groups, topt.param_groups, lrs):
            g['lr'] = h['lr'] = base * multiplier
        logits, loss = tc.train_step(model, opt, xb, tl.Tensor(y))
        tlogits = forward(torch.tensor(xb.numpy()))
        tloss = F.cross_entropy(tlogits, torch.tensor(y), label_smoothing=0.2, reduction='sum')
        topt.zero_grad()
        tloss.backward()
        topt.step()
        assert np.allclose(logits.numpy(), tlogits.detach().numpy(), atol=1e-5), 'logits differ from PyTorch'
    ours, theirs = model.state_dict(), net.state_dict()
    for k in ours:
        if k.endswith('num_batches_tracked'):   # tc's functional BatchNorm+GELU leaves the unused counter alone
            continue
        assert np.allclose(ours[k], theirs[k].numpy(), atol=1e-5), f'{k} differs from PyTorch after three steps'


def test_cifar_gpu_matches_cpu():
    """A short float32 run gives the CPU's losses on the GPU; float16 trains too (need_cuda: test_all.py's)."""
    need_cuda()
    with tempfile.TemporaryDirectory() as root:
        _write_batches(os.path.join(root, 'cifar-10-batches-py'), *_tiny_cifar(n_train=200, n_test=50))
        runs = [_train(tc.parse_args(['--data', root, '--device', device, '--dtype', dtype, '--widths', '8,16,16',
                                        '--batch-size', '40', '--epochs', '2', '--lr', '100', '--tta', 'flip']))
                for device, dtype in (('cpu', 'float32'), ('cuda', 'float32'), ('cuda', 'float16'))]
    cpu, gpu, half = ([r['train_loss'] for r in run['epochs']] for run in runs)
    # at lr 100 rounding differences (cuBLAS against NumPy summation order) grow from step to step:
    # the first epoch must agree closely, the second within the growth seen on the H200 (3e-3)
    assert np.allclose(cpu[0], gpu[0], rtol=2e-4) and np.allclose(cpu[1], gpu[1], rtol=1e-2), (cpu, gpu)
    assert np.all(np.isfinite(half)) and half[-1] < half[0], half


# ===== bench.py =====

def test_bench_out_folder_checked_before_timing():
    """bench.py --out in a missing folder (or naming a folder), and a negative --gru-sweep, are argparse errors before
    any table is timed."""
    import bench
    def timed():
        raise AssertionError('a table was timed before --out was checked')
    with tempfile.TemporaryDirectory() as d:
        for args, needle in ((['--out', os.path.join(d, 'nope', 'tables.md')], 'does not exist'),
                             (['--out', d], 'a folder'), (['--gru-sweep', '-1'], 'at least 0')):
            err = io.StringIO()
            with mock.patch.object(sys, 'argv', ['bench.py', '--only', 'cpu', *args]), \
                    mock.patch.object(bench, 'bench_cpu', timed), contextlib.redirect_stderr(err), \
                    contextlib.redirect_stdout(io.StringIO()):
                try:
                    bench.main()
                except SystemExit as e:
                    assert e.code == 2 and ' '.join(args) in err.getvalue() and needle in err.getvalue(), err.getvalue()
                else:
                    raise AssertionError(f'{args} accepted')



def test_bench_full_run_note_reads_train_cifar_log():
    """bench.py's time-to-accuracy note reads train_cifar.py's last --log record as it is written: test_acc with TTA,
    test_acc_no_tta without (cifar_full_run mocked to return a tiny run's record, whose two accuracies differ)."""
    import bench
    with tempfile.TemporaryDirectory() as root:
        _write_batches(os.path.join(root, 'cifar-10-batches-py'), *_tiny_cifar(n_train=60, n_test=40))
        log = os.path.join(root, 'log.jsonl')
        _train(_args(root, '--epochs', '2', '--seed', '2', '--tta', 'flip', '--lr', '100', '--log', log))
        with open(log) as f:
            record = json.loads(f.read().splitlines()[-1])
    assert record['test_acc'] != record['test_acc_no_tta'], record
    notes = []
    with mock.patch.object(bench, 'cifar_full_run', lambda args: record):
        bench._full_run_note(types.SimpleNamespace(note=notes.append), ['--data', 'DIR'])
    tta, plain = (f'{100 * record[k]:.2f}%' for k in ('test_acc', 'test_acc_no_tta'))
    assert f'{tta} test accuracy with TTA ({plain} without)' in notes[0], notes


def test_bench_gru_layout_sweep_logs_each_timed_layout():
    """bench.py's gru_parts (launches mocked on NumPy arrays): each direction times the planner's choice first (the
    only record marked chosen), then tl._gru_candidates' other picks (near-ties, other kinds until GRU_LAYOUT_KINDS
    kinds are in), in its order, and with --gru-sweep N at least the model's N best-ranked
    layouts, once each; every timed layout is a JSON line in the log (a failed launch too); a layout that leaves a
    cell unwritten (NaN) counts as a failure."""
    import bench
    class Table:
        failures, note, markdown = 0, lambda self, line: None, lambda self: ''
    seen = []   # main() sets GRU_LAYOUT_SWEEP from --gru-sweep while the tables run (with PyTorch: else it times none)
    with mock.patch.object(sys, 'argv', ['bench.py', '--only', 'cpu', '--gru-sweep', '5']), \
            mock.patch.dict(os.environ, {'OUT': ''}), mock.patch.object(bench, 'GRU_LAYOUT_SWEEP', 0), \
            mock.patch.object(bench, 'bench_cpu', lambda: seen.append(bench.GRU_LAYOUT_SWEEP) or Table()), \
            contextlib.redirect_stdout(io.StringIO()):
        assert bench.main() == 0 and seen == ([5] if torch is not None else []), seen
    splits = tuple((p, n, tl._GRU_WG) for p, n in ((2, 66), (4, 30), (8, 15)))
    kind = lambda layout: (layout[6], layout[7] > 0, layout[8], layout[1], layout[9])   # cluster, split, WN, nu, G
    keys = (132, 232448, 16, 128, 4, 1, True), (132, 232448, 200, 528, 4, 1, False)   # (the second: L2 reads rank)
    for key, forward, sweep in itertools.product(keys, (True, False), (0, 40)):
        chosen, log, table = tl._gru_plan(forward, *key, splits), io.StringIO(), Table()
        def launch(layout, results):
            if layout[6] == 8:
                raise RuntimeError('no such kernel')
            results[0][...] = 1 if layout[0] != 4 else np.nan   # four batch groups leave cells unwritten
        with mock.patch.object(bench, 'cp', np), mock.patch.object(bench, '_log_file', log), \
                mock.patch.object(bench, 'GRU_LAYOUT_SWEEP', sweep), mock.patch.object(tl, '_gru_splits', lambda *a: splits), \
                mock.patch.object(tl, '_gru_regs', lambda *a: ()), \
                mock.patch.object(bench, 'cuda_time', lambda fn, *a, **k: (fn(), [0.25])[1]):
            bench._layout_notes(table, 'GRU ' + ('fwd' if forward else 'bwd'), key, chosen, launch,
                                lambda: (np.full((3, 4), np.nan, np.float32),), (np.ones((3, 4), np.float32),), 1e-3)
        records = [json.loads(line.split(' ', 1)[1]) for line in log.getvalue().splitlines()]
        layouts = [tuple(r['layout']) for r in records]
        what = f'{key} forward {forward} sweep {sweep}: {layouts}'
        assert layouts[0] == chosen and len(set(layouts)) == len(layouts), what
        assert [r['chosen'] for r in records] == [True] + [False] * (len(records) - 1), what
        ranked = []
        tl._gru_plan(forward, *key, splits, ranked=ranked)
        picked = tl._gru_candidates(ranked, chosen, bench.GRU_LAYOUT_TIES, bench.GRU_LAYOUT_KINDS, sweep)
        assert layouts == [e[3] for e in picked], what
        ranked.sort(key=lambda e: (e[0] + e[1], e[2]))   # by clocks and L2 reads, then blocks
        assert set(e[3] for e in ranked[:sweep]) <= set(layouts), what
        kinds = len({kind(e[3]) for e in ranked})   # the choice's kind and others, GRU_LAYOUT_KINDS in all at most
        assert sweep or len({kind(layout) for layout in layouts}) == min(kinds, bench.GRU_LAYOUT_KINDS), what
        for r in records:
            assert ('failed' in r) == (r['layout'][6] == 8), r
            assert 'failed' in r or r['ms'] == 0.25 and (r['off'] == 0) == (r['layout'][0] != 4), r
        assert table.failures == sum(r['layout'][0] == 4 and r['layout'][6] != 8 for r in records) > 0, what


# ===== runner =====

def main(argv):
    verbose = '-v' in argv
    pattern = next((a for a in argv if a != '-v'), '')
    tests = [(n, f) for n, f in list(globals().items()) if n.startswith('test_') and callable(f) and pattern in n]
    counts = {'passed': 0, 'failed': 0, 'skipped': 0}
    for name, fn in tests:
        t0 = time.perf_counter()
        try:
            fn()
            result = 'passed'
        except Skip:
            result = 'skipped'
        except Exception as e:
            result = 'failed'
            print(f'FAIL {name}: {type(e).__name__}: {e}\n{traceback.format_exc()}', flush=True)
        counts[result] += 1
        if verbose:
            print(f'{result:8s} {time.perf_counter() - t0:7.3f}s {name}', flush=True)
    print(f'{counts["passed"]} passed, {counts["failed"]} failed, {counts["skipped"]} skipped')
    return 1 if counts['failed'] else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
