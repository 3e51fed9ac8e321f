"""Benchmarks of tinygrad_lite against PyTorch, in one process, on the same inputs.

    python bench.py                      # every table (the GPU ones only where CuPy finds a GPU)
    python bench.py --only elementwise   # one table
    python bench.py --out tables.md      # also write the markdown tables to tables.md
    python bench.py --only train_step --cifar DIR   # with a full CIFAR-10 run's time to accuracy
    python bench.py --only gru_parts --gru-sweep 40  # also time the GRU planner's 40 best-ranked layouts each way

GPU times: medians of per-call CUDA events, each framework's events recorded on its own current
stream (CuPy's for tinygrad_lite, PyTorch's for PyTorch), after warm-up, with the inputs rotated
among enough copies to overflow the 50 MB L2. "ours GB/s" counts the bytes the op must read and
write at least; "% of copy" compares that rate with a large device-to-device copy measured here.
CPU times: medians of wall-clock calls. Before timing, every row compares our result with PyTorch's
once; a mismatch is flagged under its table. With $OUT set, the full log (the spread of every
timing, the checks) goes to $OUT/bench.log and the tables to $OUT/bench.md.

Tables: elementwise (ReLU, BatchNorm), conv (train_cifar.py's convolutions, max-pool, cross-entropy),
gru (tl.GRU against cuDNN's), gru_parts (the GRU's products and sums against PyTorch's, its kernels' layouts
against the alternatives the planner ranked), train_step (train_cifar.py's training step against the same net in
PyTorch eager), cpu. Slow GPU rows (the GRU) take fewer calls, at least 3.

A new table is a function returning a Table and one line in main's list.
"""
import argparse
import contextlib
import functools
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback

import numpy as np

import tinygrad_lite as tl

try:
    import cupy as cp
except ImportError:
    cp = None
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

L2_BYTES = 50e6               # H200's L2: rotated inputs must overflow it
GPU_WARMUP, GPU_REPS = 10, 50
CPU_BUDGET_S = 1.0            # per CPU timing: as many calls as fit, 3 to 20
_log_file = None


def log(msg='', echo=True):
    if echo:
        print(msg, flush=True)
    if _log_file:
        _log_file.write(msg + '\n')
        _log_file.flush()


# ================================================================ timing

def cuda_sync():
    cp.cuda.runtime.deviceSynchronize()


def cuda_time(fn, sets, framework, warmup=GPU_WARMUP, reps=GPU_REPS):
    """Per-call ms of fn(*sets[i % len(sets)]) from CUDA events on the current stream of `framework`:
    'tl' (CuPy's, where tinygrad_lite launches) or 'torch'."""
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    cuda_sync()
    if framework == 'tl':
        new_event, elapsed = cp.cuda.Event, cp.cuda.get_elapsed_time
    else:
        new_event, elapsed = functools.partial(torch.cuda.Event, enable_timing=True), lambda a, b: a.elapsed_time(b)
    events = [(new_event(), new_event()) for _ in range(reps)]
    for i, (start, end) in enumerate(events):
        start.record()
        fn(*sets[i % len(sets)])
        end.record()
    cuda_sync()
    return [elapsed(start, end) for start, end in events]


def graph_time(fn, sets, framework):
    """cuda_time of fn replayed from a CUDA graph per input set (each framework's own graphs): the GPU's
    time alone, without the Python and launch overhead that an eager call may add."""
    side = torch.cuda.Stream()   # PyTorch's advice: warm up on a side stream (autograd and cuDNN state per stream)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side) if framework == 'torch' else contextlib.nullcontext():
        for _ in range(3):   # warm-up: compiles, cuDNN's choices, memory pools
            for args in sets:
                fn(*args)
    cuda_sync()
    graphs = []
    for args in sets:
        if framework == 'tl':
            graph = tl.CUDAGraph()
            with graph.capture():
                fn(*args)
        else:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):   # the stream warmed up (its cuDNN/cuBLAS handles made)
                fn(*args)
        graphs.append((graph,))
    cuda_sync()
    return cuda_time(lambda graph: graph.replay(), graphs, framework)


def cpu_time(fn, budget_s=CPU_BUDGET_S):
    """Per-call ms of fn() by wall clock (call it once before, as warm-up): calls until budget_s is
    spent, at least 3 and at most 20."""
    times, begin = [], time.perf_counter()
    while len(times) < 3 or (len(times) < 20 and time.perf_counter() - begin < budget_s):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def copies(nbytes):
    """How many input sets of nbytes each to rotate among so that one round overflows L2 twice (no more
    than the timed calls read)."""
    return min(GPU_REPS, max(2, math.ceil(2 * L2_BYTES / nbytes)))


def cuda_time_within(fn, sets, framework, budget_s):
    """cuda_time with as many calls as fit in about budget_s (3 to GPU_REPS timed), for slow ops: two
    untimed calls first (the first may compile or allocate), the second by wall clock."""
    fn(*sets[0])
    cuda_sync()
    start = time.perf_counter()
    fn(*sets[1 % len(sets)])
    cuda_sync()
    reps = max(3, min(GPU_REPS, int(budget_s / (time.perf_counter() - start))))
    return cuda_time(fn, sets, framework, warmup=min(GPU_WARMUP, max(1, reps // 5)), reps=reps)


@functools.lru_cache(maxsize=None)
def copy_rate():
    """The device copy rate in GB/s (bytes read + written), the ceiling of every elementwise kernel:
    the better of cudaMemcpyAsync and PyTorch's copy_, device to device, 256 MiB."""
    nbytes = 256 << 20
    src = cp.random.standard_normal(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    stream = cp.cuda.get_current_stream().ptr
    memcpy = lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes,
                                                  cp.cuda.runtime.memcpyDeviceToDevice, stream)
    src_t, dst_t = torch.from_dlpack(src), torch.from_dlpack(dst)
    rates = {'cudaMemcpyAsync': 2 * nbytes / statistics.median(cuda_time(memcpy, [()], 'tl')) / 1e6,
             'torch copy_': 2 * nbytes / statistics.median(cuda_time(dst_t.copy_, [(src_t,)], 'torch')) / 1e6}
    return max(rates.values()), ', '.join(f'{k} {v:.0f}' for k, v in rates.items())


# ================================================================ tables

def shared(array, requires_grad=False):
    """A NumPy or CuPy array as a tl.Tensor and a torch tensor, both on its memory."""
    return tl.Tensor(array, requires_grad=requires_grad), torch.from_dlpack(array).requires_grad_(requires_grad)


def spread(times):
    return f'median {statistics.median(times):.4f} ms (min {min(times):.4f}, max {max(times):.4f}, n={len(times)})'


class Table:
    """One markdown table: a row per op, our time against PyTorch's, and notes under it."""
    def __init__(self, title, ceiling=None):
        self.title, self.ceiling, self.rows, self.notes, self.failures = title, ceiling, [], [], 0

    def add(self, op, ours, theirs, nbytes=None, target=None, flops=None):
        """ours, theirs: per-call ms; nbytes: bytes the op moves at least; flops: floating-point operations
        per call; target: ('copy', f) for at least f of the copy rate, ('torch', r) for at most r times
        PyTorch's time."""
        self.rows.append((op, statistics.median(ours), statistics.median(theirs), nbytes, flops, target))
        log(f'  {op}: ours {spread(ours)}; torch {spread(theirs)}', echo=False)

    def note(self, line):
        self.notes.append(line)
        log(f'  note: {line}', echo=False)

    def guard(self, label, fn, *args):
        """fn(*args), a group of rows; an exception becomes a note and the other rows still run."""
        try:
            fn(*args)
        except Exception as e:
            self.failures += 1
            self.note(f'FAILED {label}: {type(e).__name__}: {str(e)[:200]}')
            log(traceback.format_exc(), echo=False)

    def check(self, what, ours, theirs, tol):
        """Compare our array with PyTorch's tensor (same device) once: more than 1e-5 of the elements
        off by more than tol * max|theirs| is flagged."""
        xp = np if isinstance(ours, np.ndarray) else cp
        ref = xp.from_dlpack(theirs.detach().contiguous()).astype(np.float32)
        diff = xp.abs(ours.astype(np.float32) - ref)
        scale = max(float(xp.abs(ref).max()), 1e-30)
        off = float((diff > tol * scale).mean())
        log(f'  check {what}: max |ours - torch| / max |torch| = {float(diff.max()) / scale:.2e}, '
            f'{off:.1e} of elements beyond {tol:g}', echo=False)
        if not off <= 1e-5:
            self.failures += 1
            self.note(f'CHECK FAILED {what}: {off:.1e} of elements differ from PyTorch '
                      f'by more than {tol:g} x max|torch|')

    def markdown(self):
        """The table; the GB/s and TFLOP/s columns only where some row has bytes or flops."""
        with_bytes, with_flops = any(r[3] for r in self.rows), any(r[4] for r in self.rows)
        head = ['op', 'ours ms', 'torch ms', 'ours/torch'] + ['ours GB/s', '% of copy'] * with_bytes + \
               ['ours TFLOP/s', 'torch TFLOP/s'] * with_flops + ['target', 'met?']
        lines = [f'### {self.title}', '', f'| {" | ".join(head)} |',
                 '| --- | ' + '---: | ' * (len(head) - 3) + '--- | --- |']
        shown = lambda v, spec: '-' if v is None else format(v, spec)
        for op, ours, theirs, nbytes, flops, target in self.rows:
            gbs = nbytes / ours / 1e6 if nbytes else None
            of_copy = gbs / self.ceiling if gbs and self.ceiling else None
            goal, met = '', ''
            if target and target[0] == 'copy':
                goal, met = f'>= {target[1]:.0%} of copy', of_copy is not None and of_copy >= target[1]
            elif target:
                goal, met = f'<= {target[1]}x torch', ours <= target[1] * theirs
            cells = [op, f'{ours:.4f}', f'{theirs:.4f}', f'{ours / theirs:.2f}']
            if with_bytes:
                cells += [shown(gbs, '.0f'), shown(of_copy, '.0%')]
            if with_flops:
                cells += [shown(flops and flops / ours / 1e9, '.1f'), shown(flops and flops / theirs / 1e9, '.1f')]
            cells += [goal, '' if not goal else 'yes' if met else 'NO']
            lines.append(f'| {" | ".join(cells)} |')
        return '\n'.join(lines + [''] + [f'- {n}' for n in self.notes])


def function_fwd_bwd(cls, inputs, g, **params):
    """(y, gradients) of tinygrad_lite Function `cls` on tl tensors `inputs`: its forward, then its
    backward of g, as a training step runs the op inside its graph (without the copy that y.backward()
    makes of a leaf's gradient into .grad)."""
    ctx = cls(inputs)
    y = ctx.forward(*[t.data for t in inputs], **params)
    grads = ctx.backward(g)
    return (y,) + (grads if isinstance(grads, tuple) else (grads,))


def gpu_randn(shape, dtype, scale=1.0):
    return (cp.random.standard_normal(shape, dtype=cp.float32) * scale).astype(dtype)


def channels_last(a):
    """NCHW-shaped a in channels-last memory, the layout tinygrad_lite's GPU convs return."""
    return cp.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def torch_channels_last(a, requires_grad=False):
    """The torch tensor of NCHW-shaped a in PyTorch's channels_last format: on a's memory where a is
    channels-last, else a channels-last copy."""
    return torch.from_dlpack(a).contiguous(memory_format=torch.channels_last).requires_grad_(requires_grad)


# ================================================================ GPU: ReLU and BatchNorm (issue 3)

def bench_elementwise():
    copy_gbs, copy_detail = copy_rate()
    table = Table('GPU: ReLU, BatchNorm2d and the fused BatchNorm2d+ReLU', ceiling=copy_gbs)
    table.note(f'copy rate {copy_gbs:.0f} GB/s (read + written, D2D 256 MiB: {copy_detail} GB/s)')
    table.guard('ReLU', _relu_rows, table)
    for act in (None, 'relu'):
        for dtype in (np.float32, np.float16):
            table.guard(f'BatchNorm act={act} {np.dtype(dtype).name}', _bn_rows, table, dtype, act)
    return table


def _relu_rows(table):
    """ReLU at 256x128x32x32 float32: tl.relu, and the backward kernel alone through the Relu Function
    (against PyTorch's relu backward through torch.autograd.grad)."""
    shape = (256, 128, 32, 32)
    nbytes = 4 * math.prod(shape)
    xs = [cp.random.standard_normal(shape, dtype=cp.float32) for _ in range(copies(nbytes))]
    gs = [cp.random.standard_normal(shape, dtype=cp.float32) for _ in xs]
    pairs = [shared(x) for x in xs]
    ours, theirs = [(x,) for x, _ in pairs], [(xt,) for _, xt in pairs]
    with tl.no_grad(), torch.no_grad():
        table.check('ReLU fwd', tl.relu(*ours[0]).data, torch.relu(*theirs[0]), 0)
        table.add('ReLU fwd 256x128x32x32 float32', cuda_time(tl.relu, ours, 'tl'),
                  cuda_time(torch.relu, theirs, 'torch'), 2 * nbytes, ('copy', 0.9))

    ours, theirs = [], []
    for x, g in zip(xs, gs):
        (xl, xt), (_, gt) = shared(x, True), shared(g)
        ctx = tl.Relu((xl,))
        ctx.forward(x)
        ours.append((ctx, g))
        theirs.append((torch.relu(xt), xt, gt))
    ours_bwd = lambda ctx, g: ctx.backward(g)
    theirs_bwd = lambda y, x, g: torch.autograd.grad(y, x, g, retain_graph=True)[0]
    table.check('ReLU bwd', ours_bwd(*ours[0]), theirs_bwd(*theirs[0]), 0)
    table.add('ReLU bwd 256x128x32x32 float32', cuda_time(ours_bwd, ours, 'tl'),
              cuda_time(theirs_bwd, theirs, 'torch'), 3 * nbytes, ('copy', 0.9))


def _bn_rows(table, dtype, act):
    """BatchNorm2d training at 256x64x32x32 (with act: the fused BatchNorm+act block), float32 weight,
    bias and running statistics. Rows: forward; forward + backward through the BatchNorm Function
    (against torch.autograd.grad); forward + y.backward(g) of a graph, the training path (x a leaf,
    so ours also pays the leaf's gradient copy)."""
    shape, c = (256, 64, 32, 32), 64
    xbytes = np.dtype(dtype).itemsize * math.prod(shape)
    xs = [cp.random.standard_normal(shape, dtype=cp.float32).astype(dtype) for _ in range(copies(2 * xbytes))]
    gs = [cp.random.standard_normal(shape, dtype=cp.float32).astype(dtype) for _ in xs]
    (w, wt), (b, bt) = (shared(cp.random.uniform(0.5, 1.5, c, dtype=cp.float32), True),
                        shared(cp.random.uniform(-0.5, 0.5, c, dtype=cp.float32), True))
    rm, rv = tl.zeros(c, device='cuda'), tl.ones(c, device='cuda')
    rmt, rvt = torch.zeros(c, device='cuda'), torch.ones(c, device='cuda')
    pairs = [(shared(x, True), shared(g)) for x, g in zip(xs, gs)]
    ours = [(x, g) for (x, _), (g, _) in pairs]
    theirs = [(xt, gt) for (_, xt), (_, gt) in pairs]
    torch_act = {None: lambda z: z, 'relu': F.relu, 'gelu': F.gelu}[act]

    def ours_fwd(x, g):
        return tl.batch_norm(x, rm, rv, w, b, training=True, activation=act)

    def theirs_fwd(x, g):
        return torch_act(F.batch_norm(x, rmt, rvt, wt, bt, training=True))

    def ours_function(x, g):
        ctx = tl.BatchNorm((x, w, b))
        y = ctx.forward(x.data, w.data, b.data, rm.data, rv.data, True, 0.1, 1e-5, act)
        return (y,) + ctx.backward(g.data)

    def theirs_function(x, g):
        y = theirs_fwd(x, g)
        return (y,) + torch.autograd.grad(y, (x, wt, bt), g)

    def ours_graph(x, g):
        x.grad = w.grad = b.grad = None
        ours_fwd(x, g).backward(g)

    def theirs_graph(x, g):
        x.grad = wt.grad = bt.grad = None
        theirs_fwd(x, g).backward(g)

    label = {None: 'BN2d', 'relu': 'BN2d+ReLU', 'gelu': 'BN2d+GELU'}[act]
    size = f'256x64x32x32 {np.dtype(dtype).name}'
    tol = 1e-3 if dtype == np.float32 else 1e-2
    (y, dx), (yt, dxt) = ours_function(*ours[0])[:2], theirs_function(*theirs[0])[:2]
    table.check(f'{label} {size} y', y, yt, tol)
    table.check(f'{label} {size} dx', dx, dxt, tol)
    # a live torch graph (yt's) keeps x's AccumulateGrad node, made on the default stream, alive: PyTorch warns that
    # this can break a later CUDA-graph capture, and graph_time's capture of this op failed on the H200
    del y, dx, yt, dxt
    target = None if act else ('torch', 0.3 if dtype == np.float32 else 0.5)
    with tl.no_grad(), torch.no_grad():
        table.add(f'{label} fwd (training) {size}', cuda_time(ours_fwd, ours, 'tl'),
                  cuda_time(theirs_fwd, theirs, 'torch'), 3 * xbytes)
    function_ms = cuda_time(ours_function, ours, 'tl')
    table.add(f'{label} fwd+bwd, Function {size}', function_ms, cuda_time(theirs_function, theirs, 'torch'),
              8 * xbytes, target)
    table.add(f'{label} fwd+bwd, y.backward(g) {size}', cuda_time(ours_graph, ours, 'tl'),
              cuda_time(theirs_graph, theirs, 'torch'), 8 * xbytes, target)
    table.add(f'{label} fwd+bwd, Function, CUDA-graph replay {size}', graph_time(ours_function, ours, 'tl'),
              graph_time(theirs_function, theirs, 'torch'), 8 * xbytes)
    if dtype == np.float16:   # PyTorch's fastest float16 layout, for reference
        channels_last = [(x.detach().to(memory_format=torch.channels_last).requires_grad_(),
                          g.contiguous(memory_format=torch.channels_last)) for x, g in theirs]
        ms = statistics.median(cuda_time(theirs_function, channels_last, 'torch'))
        table.note(f'torch {label} fwd+bwd {size} in channels_last (autograd.grad): {ms:.4f} ms; '
                   f'ours (Function) / that = {statistics.median(function_ms) / ms:.2f}')


# ================================================================ GPU: convolution, pooling, cross-entropy (issue 5)

CIFAR_BATCH = 1024
CIFAR_DATA = None   # bench.py --cifar DIR: the data for train_step's full run
# train_cifar.py's convs: (C_in, C_out, input height = width, kernel, padding, bias). The whitening conv
# reads the augmented images (NCHW, from the gather); each block's first conv runs before its 2x2
# max-pool (31 -> 15 -> 7 -> 3); 256->256 at 7x7 is both block 2's second conv and block 3's first.
CIFAR_CONVS = [(3, 24, 32, 2, 0, True), (24, 64, 31, 3, 1, False), (64, 64, 15, 3, 1, False),
               (64, 256, 15, 3, 1, False), (256, 256, 7, 3, 1, False), (256, 256, 3, 3, 1, False)]
CROSS_ENTROPY_SHAPES = [(1024, 10), (65536, 1000)]


def bench_conv():
    torch.backends.cudnn.benchmark = True
    copy_gbs, copy_detail = copy_rate()
    table = Table(f"GPU: train_cifar.py's convolutions (batch {CIFAR_BATCH}), max-pool and cross-entropy",
                  ceiling=copy_gbs)
    table.note(f'copy rate {copy_gbs:.0f} GB/s (read + written, D2D 256 MiB: {copy_detail} GB/s)')
    table.note('fwd: the public op (tl.conv2d, tl.max_pool2d, tl.cross_entropy) without recording; fwd+bwd: '
               "the op's Function forward then backward (as inside a training step's graph), against "
               'torch.autograd.grad; every gradient (input, weight, bias) computed on both sides (in the net, '
               'the whitening conv needs its bias gradient only)')
    table.note(f'convs: ours get the layout the previous layer gives them (the images NCHW, later inputs and '
               f'all output gradients channels-last); PyTorch channels_last throughout (weights too), '
               f'cudnn.benchmark on, cudnn.allow_tf32 = {torch.backends.cudnn.allow_tf32} (float32 convs may use '
               f'TF32), ours tl.allow_tf32 = {tl.allow_tf32} (its default, the same meaning); '
               'TFLOP/s counts 2 N Ho Wo C_out C_in kh kw per pass, 3 passes for fwd+bwd')
    table.note('the fwd rows call the public ops (argument checks and conversions in Python each call); the fwd+bwd '
               'rows run the Functions')
    for dtype in (np.float16, np.float32):
        for spec in CIFAR_CONVS:
            table.guard(f'conv {spec[0]}->{spec[1]} at {spec[2]}x{spec[2]} {np.dtype(dtype).name}', _conv_rows,
                        table, spec, dtype)
    table.guard('max_pool2d', _max_pool_rows, table)
    for n, classes in CROSS_ENTROPY_SHAPES:
        table.guard(f'cross-entropy {n}x{classes}', _cross_entropy_rows, table, n, classes)
    return table


def _conv_rows(table, spec, dtype):
    c_in, c_out, size, k, pad, has_bias = spec
    n, out = CIFAR_BATCH, size + 2 * pad - k + 1
    itemsize = np.dtype(dtype).itemsize
    layout = (lambda a: a) if c_in == 3 else channels_last
    xs = [layout(gpu_randn((n, c_in, size, size), dtype))
          for _ in range(copies(itemsize * n * (c_in * size * size + c_out * out * out)))]
    gs = [channels_last(gpu_randn((n, c_out, out, out), dtype)) for _ in xs]
    w = gpu_randn((c_out, c_in, k, k), dtype, scale=1 / math.sqrt(c_in * k * k))
    params = [tl.Tensor(w, requires_grad=True)]
    params_t = [torch_channels_last(w, requires_grad=True)]
    if has_bias:
        b, bt = shared(gpu_randn((c_out,), dtype, scale=0.1), True)
        params, params_t = params + [b], params_t + [bt]
    ours = [(tl.Tensor(x, requires_grad=True), g) for x, g in zip(xs, gs)]
    theirs = [(torch_channels_last(x, requires_grad=True), torch.from_dlpack(g)) for x, g in zip(xs, gs)]

    def ours_fwd(x, g):
        return tl.conv2d(x, *params, padding=pad)

    def theirs_fwd(x, g):
        return F.conv2d(x, *params_t, padding=pad)

    def ours_fwd_bwd(x, g):
        return function_fwd_bwd(tl.Convolution, [x] + params, g, stride=(1, 1), padding=(pad, pad))

    def theirs_fwd_bwd(x, g):
        y = theirs_fwd(x, g)
        return (y,) + torch.autograd.grad(y, [x] + params_t, g)

    label = f'conv {k}x{k} {c_in}->{c_out}{" +bias" if has_bias else ""} at {size}x{size} {np.dtype(dtype).name}'
    tol = 1e-2 if dtype == np.float16 else 5e-3
    for what, a, t in zip(('y', 'dx', 'dweight', 'dbias'), ours_fwd_bwd(*ours[0]), theirs_fwd_bwd(*theirs[0])):
        table.check(f'{label} {what}', a, t, tol)
    flops = 2 * n * out * out * c_out * c_in * k * k
    with tl.no_grad(), torch.no_grad():
        table.add(f'{label} fwd', cuda_time(ours_fwd, ours, 'tl'), cuda_time(theirs_fwd, theirs, 'torch'), flops=flops)
    table.add(f'{label} fwd+bwd', cuda_time(ours_fwd_bwd, ours, 'tl'), cuda_time(theirs_fwd_bwd, theirs, 'torch'),
              flops=3 * flops, target=('torch', 1.5))


def _max_pool_rows(table):
    """max_pool2d(2) where train_cifar.py's largest one runs: after the first block's conv, float16,
    channels-last (the conv's output layout) on both sides."""
    n, c, size = CIFAR_BATCH, 64, 31
    xbytes, ybytes = 2 * n * c * size * size, 2 * n * c * (size // 2) ** 2
    xs = [channels_last(gpu_randn((n, c, size, size), np.float16)) for _ in range(copies(xbytes + ybytes))]
    gs = [channels_last(gpu_randn((n, c, size // 2, size // 2), np.float16)) for _ in xs]
    ours = [(tl.Tensor(x, requires_grad=True), g) for x, g in zip(xs, gs)]
    theirs = [(torch.from_dlpack(x).requires_grad_(), torch.from_dlpack(g)) for x, g in zip(xs, gs)]

    def ours_fwd_bwd(x, g):
        return function_fwd_bwd(tl.MaxPool, [x], g, kernel=(2, 2), stride=(2, 2))

    def theirs_fwd_bwd(x, g):
        y = F.max_pool2d(x, 2)
        return y, torch.autograd.grad(y, x, g)[0]

    label = f'max_pool2d(2) {n}x{c}x{size}x{size} float16 channels-last'
    (y, dx), (yt, dxt) = ours_fwd_bwd(*ours[0]), theirs_fwd_bwd(*theirs[0])
    table.check(f'{label} y', y, yt, 0)
    table.check(f'{label} dx', dx, dxt, 0)
    del y, dx, yt, dxt   # as in _bn_rows: a live torch graph would break graph_time's capture
    with tl.no_grad(), torch.no_grad():
        table.add(f'{label} fwd', cuda_time(lambda x, g: tl.max_pool2d(x, 2), ours, 'tl'),
                  cuda_time(lambda x, g: F.max_pool2d(x, 2), theirs, 'torch'), xbytes + ybytes, ('copy', 0.8))
        table.add(f'{label} fwd, CUDA-graph replay', graph_time(lambda x, g: tl.max_pool2d(x, 2), ours, 'tl'),
                  graph_time(lambda x, g: F.max_pool2d(x, 2), theirs, 'torch'), xbytes + ybytes, ('copy', 0.8))
    table.add(f'{label} fwd+bwd', cuda_time(ours_fwd_bwd, ours, 'tl'), cuda_time(theirs_fwd_bwd, theirs, 'torch'),
              2 * (xbytes + ybytes), ('copy', 0.8))
    table.add(f'{label} fwd+bwd, CUDA-graph replay', graph_time(ours_fwd_bwd, ours, 'tl'),
              graph_time(theirs_fwd_bwd, theirs, 'torch'), 2 * (xbytes + ybytes), ('copy', 0.8))


def _cross_entropy_rows(table, n, classes):
    """Softmax cross-entropy of float32 logits, label smoothing 0.2, summed (train_cifar.py's loss)."""
    xbytes, tbytes = 4 * n * classes, 8 * n
    xs = [gpu_randn((n, classes), np.float32, scale=2.0) for _ in range(copies(xbytes))]
    ts = [cp.random.randint(0, classes, n, dtype=np.int64) for _ in xs]
    one = cp.ones((), np.float32)
    ours = [(tl.Tensor(x, requires_grad=True), tl.Tensor(t)) for x, t in zip(xs, ts)]
    theirs = [(torch.from_dlpack(x).requires_grad_(), torch.from_dlpack(t)) for x, t in zip(xs, ts)]

    def ours_fwd(x, t):
        return tl.cross_entropy(x, t, label_smoothing=0.2, reduction='sum')

    def theirs_fwd(x, t):
        return F.cross_entropy(x, t, label_smoothing=0.2, reduction='sum')

    def ours_fwd_bwd(x, t):
        return function_fwd_bwd(tl.CrossEntropy, [x], one, target=t.data, smoothing=0.2, reduction='sum')[:2]

    def theirs_fwd_bwd(x, t):
        loss = theirs_fwd(x, t)
        return loss, torch.autograd.grad(loss, x)[0]

    label = f'cross-entropy {n}x{classes} float32, smoothing 0.2, sum'
    (loss, dx), (loss_t, dx_t) = ours_fwd_bwd(*ours[0]), theirs_fwd_bwd(*theirs[0])
    table.check(f'{label} loss', loss, loss_t, 1e-4)
    table.check(f'{label} dlogits', dx, dx_t, 1e-4)
    del loss, dx, loss_t, dx_t   # as in _bn_rows: a live torch graph would break graph_time's capture
    # the small case is launch-bound (40 KB): no copy-rate target there
    target = ('copy', 0.8) if xbytes >= L2_BYTES else None
    with tl.no_grad(), torch.no_grad():
        table.add(f'{label} fwd', cuda_time(ours_fwd, ours, 'tl'), cuda_time(theirs_fwd, theirs, 'torch'),
                  xbytes + tbytes, target)
    table.add(f'{label} fwd+bwd', cuda_time(ours_fwd_bwd, ours, 'tl'), cuda_time(theirs_fwd_bwd, theirs, 'torch'),
              3 * xbytes + 2 * tbytes, target)
    table.add(f'{label} fwd+bwd, CUDA-graph replay', graph_time(ours_fwd_bwd, ours, 'tl'),
              graph_time(theirs_fwd_bwd, theirs, 'torch'), 3 * xbytes + 2 * tbytes, target)


# ================================================================ GPU: GRU (issue 4)

GRU_SHAPES = [   # (T, B, input, hidden, dtype)
    (1, 16, 32, 128, np.float32), (100, 16, 32, 128, np.float32), (100, 64, 256, 256, np.float32),
    (100, 64, 512, 512, np.float32), (100, 64, 1024, 1024, np.float32), (50, 256, 512, 512, np.float32),
    (200, 8, 256, 256, np.float32), (100, 64, 512, 512, np.float16)]
GRU_BUDGET_S = 1.0   # per timing: slow paths get fewer calls


def bench_gru():
    table = Table('GPU: tl.GRU against torch.nn.GRU (cuDNN), one layer, (T, B, input, hidden)')
    table.note(f'torch.backends.cudnn.allow_tf32 = {torch.backends.cudnn.allow_tf32} and tl.allow_tf32 = '
               f'{tl.allow_tf32}, as each library sets it by default: with True, float32 GRUs may run in TF32')
    table.note('fwd: inference (tl.no_grad / torch.no_grad); fwd+bwd: output.backward(g) with the input and every '
               'parameter requiring gradients (ours also copies each leaf\'s gradient into .grad); each timing '
               f'takes as many calls as fit in about {GRU_BUDGET_S:g} s (3 to {GPU_REPS})')
    for shape in GRU_SHAPES:
        table.guard(f'GRU {shape}', _gru_rows, table, *shape)
    return table


def _gru_rows(table, steps, batch, n_in, hidden, dtype):
    itemsize = np.dtype(dtype).itemsize
    xs = [gpu_randn((steps, batch, n_in), dtype) for _ in range(copies(itemsize * steps * batch * (n_in + hidden)))]
    pairs = [(shared(x, True), shared(gpu_randn((steps, batch, hidden), dtype))) for x in xs]
    ours = [(x, g) for (x, _), (g, _) in pairs]
    theirs = [(xt, gt) for (_, xt), (_, gt) in pairs]
    gru, gru_t = tl.GRU(n_in, hidden), torch.nn.GRU(n_in, hidden)
    for name, p in gru.named_parameters():
        p.data[...] = getattr(gru_t, name).detach().numpy()
    gru.to(ours[0][0].device, dtype)
    gru_t.to(theirs[0][0].device, getattr(torch, np.dtype(dtype).name))

    def fwd_bwd(model):   # the same step for either framework's GRU
        def run(x, g):
            model.zero_grad()
            x.grad = None
            out = model(x)[0]
            out.backward(g)
            return out
        return run

    ours_fwd_bwd, theirs_fwd_bwd = fwd_bwd(gru), fwd_bwd(gru_t)

    label = f'GRU T={steps} B={batch} {n_in}->{hidden} {np.dtype(dtype).name}'
    tol = 2e-2 if dtype == np.float16 else 1e-2
    (x, _), (xt, _) = ours[0], theirs[0]
    table.check(f'{label} output', ours_fwd_bwd(*ours[0]).data, theirs_fwd_bwd(*theirs[0]), tol)
    table.check(f'{label} dx', x.grad.data, xt.grad, tol)
    table.check(f'{label} dweight_hh', gru.weight_hh_l0.grad.data, gru_t.weight_hh_l0.grad, tol)
    ours_fwd, theirs_fwd = (lambda x, g: gru(x)), (lambda x, g: gru_t(x))
    with tl.no_grad(), torch.no_grad():
        table.add(f'{label} fwd', cuda_time_within(ours_fwd, ours, 'tl', GRU_BUDGET_S),
                  cuda_time_within(theirs_fwd, theirs, 'torch', GRU_BUDGET_S), target=('torch', 0.33))
    table.add(f'{label} fwd+bwd', cuda_time_within(ours_fwd_bwd, ours, 'tl', GRU_BUDGET_S),
              cuda_time_within(theirs_fwd_bwd, theirs, 'torch', GRU_BUDGET_S), target=('torch', 0.5))
    with tl.no_grad(), torch.no_grad():   # the eager times above include each library's Python and launches
        replayed = [graph_time(ours_fwd, ours[:2], 'tl'), graph_time(theirs_fwd, theirs[:2], 'torch')]
    replayed += [graph_time(ours_fwd_bwd, ours[:2], 'tl'), graph_time(theirs_fwd_bwd, theirs[:2], 'torch')]
    f, ft, fb, fbt = (statistics.median(times) for times in replayed)
    table.note(f'{label} by CUDA-graph replay (the GPU alone; two input sets), ms ours / torch: fwd {f:.4f} / '
               f'{ft:.4f} ({f / ft:.2f}), fwd+bwd {fb:.4f} / {fbt:.4f} ({fb / fbt:.2f})')
    tf32 = tl.allow_tf32 and dtype == np.float32
    plans, inference = (tl._gru_plans(x.data, hidden, tf32, keep_gates) for keep_gates in (True, False))
    table.note(f'{label}: our layouts (batch groups, slices, units, rows, KC, shared bytes, cluster, k-chunk, wgmma '
               f'WN, batch group as one cluster, KT of W_hh in registers) '
               f'fwd {inference and tl._gru_used(inference[0])} '
               f'(fwd+bwd: {plans and tl._gru_used(plans[0])}), bwd {plans and tl._gru_used(plans[1])}')


# ================================================================ GPU: the GRU's parts and layouts (issue 4)

GRU_LAYOUT_KINDS = 9   # per direction: the layout used, its model's near-ties (at most GRU_LAYOUT_TIES) and other
GRU_LAYOUT_TIES = 8    # kinds' cheapest layouts until GRU_LAYOUT_KINDS kinds are in (tl._gru_candidates)
GRU_LAYOUT_SWEEP = 0   # bench.py --gru-sweep N: at least the N best-ranked layouts each way (a refit's data)


def bench_gru_parts():
    table = Table("GPU: the GRU's parts, our cuBLAS products and column sums against PyTorch's on the same arrays")
    table.note('the products of a GRU layer\'s fwd+bwd at each GRU shape (float32 in TF32 for both: torch.backends.'
               'cuda.matmul.allow_tf32 set as tl.allow_tf32 while they run), eager by events, and by CUDA-graph '
               'replay in the notes, with the kernels each runs; then the persistent kernels: the planner\'s layout '
               'each way against its model\'s near-ties (within 2%) and the best-ranked layout of each other kind '
               '(cluster size, k-split, wgmma WN, slices, group, W_hh in registers), events around one launch (all T '
               'steps), checked against the chosen layout\'s results')
    allowed = torch.backends.cuda.matmul.allow_tf32
    try:
        for shape in GRU_SHAPES:
            table.guard(f'GRU parts {shape}', _gru_part_rows, table, *shape)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    return table


def cuda_kernels(fn):
    """The names of the GPU kernels one call of fn runs (any library's: CUPTI through torch.profiler), or why not."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    cuda_sync()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            cuda_sync()
        return sorted({e.name[:60] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    except Exception as e:   # the profiler is a diagnosis here, not a row
        return [f'kernels unknown: {type(e).__name__}: {str(e)[:60]}']


def _gru_part_rows(table, steps, batch, n_in, hidden, dtype):
    tf32 = tl.allow_tf32 and dtype == np.float32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    scale, rows = hidden ** -0.5, steps * batch
    x, w_ih, w_hh = (gpu_randn(s, dtype, c) for s, c in (((steps, batch, n_in), 1), ((3 * hidden, n_in), scale),
                                                              ((3 * hidden, hidden), scale)))
    b_ih, b_hh, h0 = gpu_randn((3 * hidden,), dtype, scale), gpu_randn((3 * hidden,), dtype, scale), \
        gpu_randn((batch, hidden), dtype)
    g, dg_ih, dg_hh = gpu_randn((steps, batch, hidden), dtype), gpu_randn((steps, batch, 3 * hidden), dtype, 0.1), \
        gpu_randn((steps, batch, 3 * hidden), dtype, 0.1)
    out = gpu_randn((steps, batch, hidden), dtype)
    label = f'GRU T={steps} B={batch} {n_in}->{hidden} {np.dtype(dtype).name}'
    x2, gi, gh = x.reshape(rows, n_in), dg_ih.reshape(rows, 3 * hidden), dg_hh.reshape(rows, 3 * hidden)
    products = [('input projection', x2, w_ih.T), ('dx', gi, w_ih), ('dW_ih', gi.T, x2)]
    if steps > 1:
        products.append(('dW_hh', gh[batch:].T, out[:-1].reshape(rows - batch, hidden)))
    for name, a, b in products:
        at, bt = torch.from_dlpack(a), torch.from_dlpack(b)
        ours, theirs = (lambda: tl._matmul(a, b, tf32=tf32)), (lambda: torch.matmul(at, bt))
        table.check(f'{label} {name}', ours(), theirs(), 1e-2)
        what = f'{label} {name} ({a.shape[0]} x {a.shape[1]}) ({b.shape[0]} x {b.shape[1]})'
        table.add(what, cuda_time(ours, [()], 'tl'), cuda_time(theirs, [()], 'torch'),
                  flops=2 * a.shape[0] * a.shape[1] * b.shape[1])
        _replay_note(table, what, ours, theirs)
    git = torch.from_dlpack(gi)
    ours, theirs, cupys = (lambda: tl._sum(gi, 0)), (lambda: git.sum(0)), (lambda: gi.sum(0))
    table.check(f'{label} bias sum', ours(), theirs(), 1e-3)
    what = f'{label} bias sum ({rows} x {3 * hidden}) over rows'
    table.add(what, cuda_time(ours, [()], 'tl'), cuda_time(theirs, [()], 'torch'), nbytes=gi.nbytes)
    table.note(f'{what}: CuPy\'s sum(0) {statistics.median(cuda_time(cupys, [()], "tl")):.4f} ms eager')
    _replay_note(table, what, ours, theirs)
    plans = tl._gru_plans(x, hidden, tf32)
    if plans is None or None in plans:
        table.note(f'{label}: no persistent layouts ({plans}): the fallback runs')
        return
    xg = tl._matmul(x2, w_ih.T, tf32=tf32).reshape(steps, batch, 3 * hidden)
    gates = cp.empty((steps, batch, 4 * hidden), dtype)
    tl._gru_run('fwd', plans, tf32, (xg, w_hh, b_ih, b_hh, h0, out, gates), steps, batch, hidden)
    tc = int(dtype == np.float16 or tf32)
    key = next(k for k, _ in tl._gru_layouts if k[2:6] == (batch, hidden, np.dtype(dtype).itemsize, tc))   # _gru_plans'
    tol = 2e-2 if dtype == np.float16 else 5e-3 if tf32 else 1e-3   # the GRU tests' (TF32: wgmma truncates, mma.sync
    new = lambda: tuple(cp.full_like(a, np.nan) for a in (out, gates))   # rounds); NaN: a cell left unwritten shows
    _layout_notes(table, f'{label} fwd', key, tl._gru_used(plans[0]), lambda layout, res: tl._gru_launch(
        'fwd', layout, tf32, (xg, w_hh, b_ih, b_hh, h0) + res, steps, batch, hidden), new, (out, gates), tol)
    # parts: the bias gradients' sums by row (the kernels' last write)
    dh0, parts = cp.empty((batch, hidden), dtype), cp.empty((batch, 6 * hidden), np.float32)
    new = lambda: tuple(cp.full_like(a, np.nan) for a in (dg_ih, dg_hh, dh0, parts))
    bwd = lambda layout, res: tl._gru_launch('bwd', layout, tf32, (g, gates, out, h0, w_hh) + res, steps, batch,
                                             hidden)
    tl._gru_run('bwd', plans, tf32, (g, gates, out, h0, w_hh, dg_ih, dg_hh, dh0, parts), steps, batch, hidden)
    _layout_notes(table, f'{label} bwd', key, tl._gru_used(plans[1]), bwd, new, (dg_ih, dg_hh, dh0, parts), tol)


def _json_number(value):
    """json.dumps's fallback for NumPy's scalars."""
    return value.item()


def _replay_note(table, what, ours, theirs):
    times = [statistics.median(graph_time(fn, [()], framework)) for fn, framework in ((ours, 'tl'), (theirs, 'torch'))]
    table.note(f'{what} by CUDA-graph replay: ours {times[0]:.4f} ms ({", ".join(cuda_kernels(ours))}), torch '
               f'{times[1]:.4f} ms ({", ".join(cuda_kernels(theirs))})')


def _layout_notes(table, label, key, chosen, launch, new_results, reference, tol):
    """One note: the chosen layout of a direction (label ends 'fwd' or 'bwd'), the model's near-ties and the best-ranked
    layout of each other kind, each launched into fresh arrays (new_results(): NaN), timed, and compared with
    `reference` (the chosen layout's results) to `tol` of its largest value; key: _gru_plans' key (multiprocessors,
    shared memory, B, H, itemsize, TC, clusters loaded)."""
    ranked, forward, dtype = [], label.endswith('fwd'), reference[0].dtype
    planned = tl._gru_model_choice(forward, key, dtype, ranked)
    if planned != chosen:
        table.note(f'{label}: the model\'s choice {planned} is not the layout used (tl.gru_autotune timed it '
                   f'slower), {chosen}')
    picks = tl._gru_candidates(ranked, chosen, GRU_LAYOUT_TIES, GRU_LAYOUT_KINDS, GRU_LAYOUT_SWEEP)
    lines, fastest, chosen_ms = [], None, None
    for clocks, read, _, layout, eligible in picks:
        results = new_results()
        record = dict(label=label, key=key, layout=layout, clocks=clocks, read=read, eligible=eligible,
                      chosen=layout == chosen)   # one JSON line each in the log: what a refit of the model reads
        try:
            ms = statistics.median(cuda_time(lambda: launch(layout, results), [()], 'tl', warmup=3, reps=15))
        except Exception as e:   # a layout the kernels refuse: said, and the next one timed
            lines.append(f'{layout} FAILED {type(e).__name__}: {str(e)[:80]}')
            log('gru-layout ' + json.dumps(dict(record, failed=f'{type(e).__name__}: {e}'), default=_json_number),
                echo=False)
            continue
        off = float(np.max([float(cp.abs(r.astype(np.float32) - w.astype(np.float32)).max()) /   # NaN kept
                            max(float(cp.abs(w.astype(np.float32)).max()), 1e-30) for r, w in zip(results, reference)]))
        beyond = not off <= tol
        table.failures += beyond
        fastest, chosen_ms = min(fastest or (ms, layout), (ms, layout)), ms if layout == chosen else chosen_ms
        lines.append(f'{layout} {ms:.4f} ms (model {clocks:.0f}+{read:.0f}{"" if eligible else ", not eligible"}, '
                     f'off {off:.1e}{" BEYOND TOLERANCE" if beyond else ""})')
        log('gru-layout ' + json.dumps(dict(record, ms=ms, off=off), default=_json_number), echo=False)
    table.note(f'{label} layouts (chosen first): ' + '; '.join(lines) +
               (f'; fastest {fastest[1]}, {fastest[0] / chosen_ms:.2f} of the choice\'s time' if chosen_ms else ''))


# ================================================================ GPU: the training step (issue 6)

def bench_train_step():
    import train_cifar   # here, so that the other tables run without its dependencies (tqdm)
    torch.backends.cudnn.benchmark = True
    table = Table(f"GPU: one training step of train_cifar.py's net (batch {CIFAR_BATCH}, float16 activations, "
                  'float32 master weights)')
    table.guard('training step', _train_step_rows, table, train_cifar)
    if CIFAR_DATA:
        table.guard('full run', _full_run_note, table, ['--data', CIFAR_DATA, '--seed', '0'])
    else:
        table.note('time to accuracy: give bench.py --cifar DIR (CIFAR-10 in the cifar-10-batches-py layout) to add '
                   'a full run of train_cifar.py')
    return table


def cifar_full_run(args):
    """The last --log record of `python train_cifar.py *args`, run in a fresh process as a user runs it."""
    import json
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'run.jsonl')
        done = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'train_cifar.py'),
                               *args, '--log', path], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f'train_cifar.py {" ".join(args)} failed: {done.stderr.strip()[-500:]}')
        with open(path) as f:
            return json.loads(f.read().splitlines()[-1])


def _full_run_note(table, args):
    r = cifar_full_run(args)
    table.note(f'time to accuracy, python train_cifar.py {" ".join(args)}: {100 * r["test_acc"]:.2f}% test '
               f'accuracy with TTA ({100 * r["test_acc_no_tta"]:.2f}% without) after {r["train_time"]:.2f} s of '
               f'training; warm-up {r["warmup_time"]:.2f} s and the final evaluation {r["eval_time"]:.2f} s apart '
               '(targets: 90.5% mean over 5 seeds, training within 4.1 s: 2x airbench94 on the H200)')


def torch_twin(model):
    """train_cifar.Net `model` in PyTorch: the same layers under the same names, its weights, buffers and
    frozen parameters copied."""
    nn = torch.nn

    class ConvGroup(nn.Module):
        def __init__(self, group):
            super().__init__()
            c_out, c_in = group.conv1.weight.shape[:2]
            self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
            self.norm1 = nn.BatchNorm2d(c_out, eps=group.norm1.eps, momentum=group.norm1.momentum)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
            self.norm2 = nn.BatchNorm2d(c_out, eps=group.norm2.eps, momentum=group.norm2.momentum)

        def forward(self, x):
            x = F.gelu(self.norm1(F.max_pool2d(self.conv1(x), 2)))
            return F.gelu(self.norm2(self.conv2(x)))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            c_out, c_in, k = model.whiten.weight.shape[:3]
            self.whiten = nn.Conv2d(c_in, c_out, k, bias=True)
            self.blocks = nn.ModuleList([ConvGroup(group) for group in model.blocks])
            self.head = nn.Linear(*reversed(model.head.weight.shape), bias=False)

        def forward(self, x):
            x = F.gelu(self.whiten(x))
            for block in self.blocks:
                x = block(x)
            x = F.max_pool2d(x, x.shape[2:]).flatten(1)
            return self.head(x) * model.logit_scale

    twin = Net()
    twin.load_state_dict({name: torch.from_numpy(np.asarray(a)) for name, a in model.state_dict().items()})
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    for name, p in twin.named_parameters():
        p.requires_grad_(name not in frozen)
    return twin


def torch_optimizer(opt, model, twin):
    """torch.optim.SGD with tl optimizer `opt`'s groups (lr, momentum, Nesterov, weight decay) over the
    twin's parameters of the same names."""
    names = {id(p): name for name, p in model.named_parameters()}
    params = dict(twin.named_parameters())
    groups = [{'params': [params[names[id(p)]] for p in g['params']], 'lr': g['lr'], 'momentum': g['momentum'],
               'nesterov': g['nesterov'], 'weight_decay': g['weight_decay']} for g in opt.param_groups]
    return torch.optim.SGD(groups, lr=opt.defaults['lr'])


def _train_step_rows(table, tc):
    args = tc.parse_args([])   # train_cifar.py's defaults: lr, weight decay
    batch = CIFAR_BATCH
    model = tc.make_model()
    twin = torch_twin(model)
    xs = [gpu_randn((batch, 3, 32, 32), np.float16) for _ in range(2)]   # the gather's NCHW images
    ys = [cp.random.randint(0, 10, batch, dtype=np.int64) for _ in xs]
    ours = [(tl.Tensor(x), tl.Tensor(y)) for x, y in zip(xs, ys)]
    theirs = [(torch_channels_last(x), torch.from_dlpack(y)) for x, y in zip(xs, ys)]
    model.to(ours[0][0].device)
    opt, _ = tc.make_optimizer(model, args.lr, args.weight_decay, batch)
    twin.to(theirs[0][0].device, memory_format=torch.channels_last)
    opt_t = torch_optimizer(opt, model, twin)

    def ours_step(x, y):
        return tc.train_step(model, opt, x, y)

    def theirs_step(x, y):
        with torch.autocast(x.device.type, dtype=torch.float16):
            logits = twin(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=tc.LABEL_SMOOTHING, reduction='sum')
        opt_t.zero_grad()
        loss.backward()
        opt_t.step()
        return logits, loss

    def first_step(step, sets):
        start = time.perf_counter()
        out = step(*sets[0])
        cuda_sync()
        return out, time.perf_counter() - start

    (logits, loss), ours_first_s = first_step(ours_step, ours)
    (logits_t, loss_t), theirs_first_s = first_step(theirs_step, theirs)
    # the two nets start from the same weights, so the first step's forward pass must agree
    table.check('first step logits', logits.data, logits_t, 3e-2)
    table.check('first step loss', loss.data, loss_t, 1e-2)
    ours_ms, theirs_ms = cuda_time(ours_step, ours, 'tl'), cuda_time(theirs_step, theirs, 'torch')
    table.add(f'training step, batch {batch} float16, eager', ours_ms, theirs_ms)
    captured = tc.CapturedStep(model, opt, ours[0][0].device)   # as train_cifar.py runs it by default
    rates = [g['lr'] for g in opt.param_groups]   # floats until CapturedStep turns them into tensors
    graph_ms = cuda_time(lambda x, y: captured(x, y, rates), ours, 'tl')
    table.add(f'training step, batch {batch} float16, ours replayed from a CUDA graph (train_cifar.py\'s default) '
              'against torch eager', graph_ms, theirs_ms, target=('torch', 1.2))
    table.note(f'first step of a fresh net: ours {ours_first_s:.2f} s, torch {theirs_first_s:.2f} s (ours: '
               'lazy CuPy compiles, from its disk cache after the first run ever, and memory-pool growth; '
               "kernels.cu was loaded at start-up, see the header; torch: cuDNN's autotuning). Tables run "
               'before this one in the same process warm some caches: --only train_step gives the cold figure')
    table.note(f'{batch * 1e3 / statistics.median(ours_ms):.0f} images/s ours, '
               f'{batch * 1e3 / statistics.median(theirs_ms):.0f} torch; the step is train_cifar.train_step '
               '(forward, summed label-smoothed cross-entropy, backward, Nesterov SGD in 3 groups), without '
               "the per-step lr assignment and the Lookahead update every 5 steps")
    table.note('torch: the same net and weights (torch_twin), eager, autocast float16 over float32 master weights, '
               'channels_last, cudnn.benchmark on, torch.optim.SGD (foreach) with the same groups')


# ================================================================ CPU: BatchNorm2d, conv, GRU

def bench_cpu():
    table = Table(f'CPU ({os.cpu_count()} cores, torch {torch.get_num_threads()} threads), float32')
    rng = np.random.default_rng(0)
    table.guard('BatchNorm2d', _cpu_bn_rows, table, rng)
    table.guard('conv', _cpu_conv_rows, table, rng)
    table.guard('GRU', _cpu_gru_rows, table, rng)
    return table


def _randn(rng, *shape, scale=1.0):
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)


def _cpu_bn_rows(table, rng):
    c = 64
    (x, xt), (g, gt) = shared(_randn(rng, 64, c, 32, 32), True), shared(_randn(rng, 64, c, 32, 32))
    (w, wt), (b, bt) = shared(rng.uniform(0.5, 1.5, c).astype(np.float32), True), shared(_randn(rng, c), True)
    rm, rv, rmt, rvt = tl.zeros(c), tl.ones(c), torch.zeros(c), torch.ones(c)

    def ours():
        x.grad = w.grad = b.grad = None
        y = tl.batch_norm(x, rm, rv, w, b, training=True)
        y.backward(g)
        return y

    def theirs():
        xt.grad = wt.grad = bt.grad = None
        y = F.batch_norm(xt, rmt, rvt, wt, bt, training=True)
        y.backward(gt)
        return y

    table.check('CPU BN2d y', ours().data, theirs(), 1e-3)
    table.check('CPU BN2d dx', x.grad.data, xt.grad, 1e-3)
    table.add('BN2d fwd+bwd, y.backward(g) 64x64x32x32', cpu_time(ours), cpu_time(theirs))


def _cpu_conv_rows(table, rng):
    (x, xt), (g, gt) = shared(_randn(rng, 64, 64, 32, 32), True), shared(_randn(rng, 64, 64, 32, 32))
    (w, wt), (b, bt) = shared(_randn(rng, 64, 64, 3, 3, scale=0.05), True), shared(_randn(rng, 64, scale=0.1), True)
    conv = lambda: tl.conv2d(x, w, b, padding=1)
    conv_t = lambda: F.conv2d(xt, wt, bt, padding=1)
    with tl.no_grad(), torch.no_grad():
        table.check('CPU conv y', conv().data, conv_t(), 1e-4)
        table.add('conv 3x3 64->64 fwd 64x64x32x32', cpu_time(conv), cpu_time(conv_t))

    def ours():
        x.grad = w.grad = b.grad = None
        conv().backward(g)

    def theirs():
        xt.grad = wt.grad = bt.grad = None
        conv_t().backward(gt)

    ours(), theirs()
    table.check('CPU conv dx', x.grad.data, xt.grad, 1e-4)
    table.check('CPU conv dweight', w.grad.data, wt.grad, 1e-4)
    table.add('conv 3x3 64->64 fwd+bwd 64x64x32x32', cpu_time(ours), cpu_time(theirs), target=('torch', 2))


def _cpu_gru_rows(table, rng):
    gru, gru_t = tl.GRU(256, 256), torch.nn.GRU(256, 256)
    for name, p in gru.named_parameters():
        p.data[...] = getattr(gru_t, name).detach().numpy()
    (x, xt), (g, gt) = shared(_randn(rng, 100, 64, 256)), shared(_randn(rng, 100, 64, 256))
    with tl.no_grad(), torch.no_grad():
        table.check('CPU GRU out', gru(x)[0].data, gru_t(xt)[0], 1e-3)
        table.add('GRU (T=100, B=64, 256->256) fwd', cpu_time(lambda: gru(x)), cpu_time(lambda: gru_t(xt)))

    def ours():
        gru.zero_grad()
        gru(x)[0].backward(g)

    def theirs():
        gru_t.zero_grad()
        gru_t(xt)[0].backward(gt)

    ours(), theirs()
    table.check('CPU GRU dweight_hh', gru.weight_hh_l0.grad.data, gru_t.weight_hh_l0.grad, 1e-3)
    table.add('GRU (T=100, B=64, 256->256) fwd+bwd', cpu_time(ours), cpu_time(theirs), target=('torch', 1.5))


# ================================================================ main

def gpu_unavailable():
    """Why the GPU tables cannot run here, or None."""
    if not tl.cuda_is_available():
        return 'no CuPy or no GPU here'
    if not torch.cuda.is_available():
        return f'this PyTorch ({torch.__version__}) has no CUDA'
    return None


def header(gpu):
    lines = [f'command: python bench.py {" ".join(sys.argv[1:])}'.rstrip(),
             f'python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}'
             + (f', cupy {cp.__version__}' if cp else ''),
             f'CPU: {os.cpu_count()} cores, torch threads {torch.get_num_threads()}']
    if gpu:
        lines.append(f'GPU: {torch.cuda.get_device_name()}, {cp.cuda.Device().attributes["MultiProcessorCount"]} SMs, '
                     f'CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}, torch CUDA {torch.version.cuda}')
        start = time.perf_counter()
        kernels = tl.fused_kernels()
        lines.append(f'fused kernels (loaded in {time.perf_counter() - start:.1f} s): {", ".join(kernels)}' if kernels
                     else 'fused kernels: NONE loaded (kernels.cu missing or broken): the GPU rows time the '
                          'composed CuPy paths')
    return lines


def main():
    global _log_file
    tables = [   # name, function, needs the GPU
        ('elementwise', bench_elementwise, True),
        ('conv', bench_conv, True),
        ('gru', bench_gru, True),
        ('gru_parts', bench_gru_parts, True),
        ('train_step', bench_train_step, True),
        ('cpu', bench_cpu, False),
    ]
    parser = argparse.ArgumentParser(description='tinygrad_lite against PyTorch, side by side.')
    parser.add_argument('--only', choices=[name for name, _, _ in tables], help='run this table alone')
    parser.add_argument('--out', help='also write the markdown tables to this file')
    parser.add_argument('--cifar', metavar='DIR', help="CIFAR-10 for train_step's time-to-accuracy run")
    parser.add_argument('--gru-sweep', type=int, default=0, metavar='N',
                        help="gru_parts: time at least the N layouts of each persistent GRU kernel that the planner's "
                             'model ranks best (JSON lines "gru-layout ..." in $OUT/bench.log)')
    args = parser.parse_args()
    if args.out is not None and os.path.isdir(args.out):   # checked now, not after all the timing
        parser.error(f'--out {args.out}: a folder; give a file path')
    if args.out is not None and not os.path.isdir(os.path.dirname(args.out) or '.'):
        parser.error(f'--out {args.out}: its folder {os.path.dirname(args.out)} does not exist')
    if args.gru_sweep < 0:
        parser.error(f'--gru-sweep {args.gru_sweep}: a number of layouts, at least 0')
    global CIFAR_DATA, GRU_LAYOUT_SWEEP
    CIFAR_DATA, GRU_LAYOUT_SWEEP = args.cifar, args.gru_sweep
    out_dir = os.environ.get('OUT')
    if out_dir:
        _log_file = open(os.path.join(out_dir, 'bench.log'), 'w')
    if torch is None:
        log('bench.py needs PyTorch as the reference (pip install torch); nothing timed.')
        return 0

    selected = [t for t in tables if args.only in (None, t[0])]
    why_no_gpu = gpu_unavailable() if any(needs_gpu for _, _, needs_gpu in selected) else None
    lines = header(why_no_gpu is None and any(needs_gpu for _, _, needs_gpu in selected))
    log('\n'.join(lines) + '\n')
    markdown, failures = ['```', *lines, '```', ''], 0
    for name, bench, needs_gpu in selected:
        if needs_gpu and why_no_gpu:
            log(f'GPU table {name!r} skipped: {why_no_gpu}\n')
            markdown.append(f'GPU table {name!r} skipped: {why_no_gpu}\n')
            continue
        start = time.perf_counter()
        log(f'[{name}]', echo=False)
        try:
            table = bench()
        except Exception as e:
            failures += 1
            log(f'table {name!r} FAILED: {type(e).__name__}: {e}\n')
            log(traceback.format_exc(), echo=False)
            continue
        failures += table.failures
        log(f'{table.markdown()}\n({name}: {time.perf_counter() - start:.0f} s)\n')
        markdown.append(table.markdown() + '\n')
    for path in [args.out] + ([os.path.join(out_dir, 'bench.md')] if out_dir else []):
        if path:
            with open(path, 'w') as f:
                f.write('\n'.join(markdown))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
