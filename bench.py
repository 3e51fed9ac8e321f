"""Benchmarks of tinygrad_lite against PyTorch, in one process, on the same inputs.

    python bench.py                      # every table (the GPU ones only where CuPy finds a GPU)
    python bench.py --only elementwise   # one table
    python bench.py --out tables.md      # also write the markdown tables to tables.md

GPU times: medians of per-call CUDA events, each framework's events recorded on its own current
stream (CuPy's for tinygrad_lite, PyTorch's for PyTorch), after warm-up, with the inputs rotated
among enough copies to overflow the 50 MB L2. "ours GB/s" counts the bytes the op must read and
write at least; "% of copy" compares that rate with a large device-to-device copy measured here.
CPU times: medians of wall-clock calls. Before timing, every row compares our result with PyTorch's
once; a mismatch is flagged under its table. With $OUT set, the full log (the spread of every
timing, the checks) goes to $OUT/bench.log and the tables to $OUT/bench.md.

A new table is a function returning a Table and one line in main's list.
"""
import argparse
import functools
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
    """How many input sets of nbytes each to rotate among so that one round overflows L2 twice."""
    return max(2, math.ceil(2 * L2_BYTES / nbytes))


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

    def add(self, op, ours, theirs, nbytes=None, target=None):
        """ours, theirs: per-call ms; nbytes: bytes the op moves at least; target: ('copy', f) for at
        least f of the copy rate, ('torch', r) for at most r times PyTorch's time."""
        self.rows.append((op, statistics.median(ours), statistics.median(theirs), nbytes, target))
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
        lines = [f'### {self.title}', '',
                 '| op | ours ms | torch ms | ours/torch | ours GB/s | % of copy | target | met? |',
                 '| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |']
        for op, ours, theirs, nbytes, target in self.rows:
            gbs = nbytes / ours / 1e6 if nbytes else None
            of_copy = gbs / self.ceiling if gbs and self.ceiling else None
            goal, met = '', ''
            if target and target[0] == 'copy':
                goal, met = f'>= {target[1]:.0%} of copy', of_copy is not None and of_copy >= target[1]
            elif target:
                goal, met = f'<= {target[1]}x torch', ours <= target[1] * theirs
            lines.append(f'| {op} | {ours:.4f} | {theirs:.4f} | {ours / theirs:.2f} | '
                         f'{"-" if gbs is None else f"{gbs:.0f}"} | {"-" if of_copy is None else f"{of_copy:.0%}"} | '
                         f'{goal} | {"" if not goal else "yes" if met else "NO"} |')
        return '\n'.join(lines + [''] + [f'- {n}' for n in self.notes])


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
    target = None if act else ('torch', 0.3 if dtype == np.float32 else 0.5)
    with tl.no_grad(), torch.no_grad():
        table.add(f'{label} fwd (training) {size}', cuda_time(ours_fwd, ours, 'tl'),
                  cuda_time(theirs_fwd, theirs, 'torch'), 3 * xbytes)
    function_ms = cuda_time(ours_function, ours, 'tl')
    table.add(f'{label} fwd+bwd, Function {size}', function_ms, cuda_time(theirs_function, theirs, 'torch'),
              8 * xbytes, target)
    table.add(f'{label} fwd+bwd, y.backward(g) {size}', cuda_time(ours_graph, ours, 'tl'),
              cuda_time(theirs_graph, theirs, 'torch'), 8 * xbytes, target)
    if dtype == np.float16:   # PyTorch's fastest float16 layout, for reference
        channels_last = [(x.detach().to(memory_format=torch.channels_last).requires_grad_(),
                          g.contiguous(memory_format=torch.channels_last)) for x, g in theirs]
        ms = statistics.median(cuda_time(theirs_function, channels_last, 'torch'))
        table.note(f'torch {label} fwd+bwd {size} in channels_last (autograd.grad): {ms:.4f} ms; '
                   f'ours (Function) / that = {statistics.median(function_ms) / ms:.2f}')


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
    table.add('conv 3x3 64->64 fwd+bwd 64x64x32x32', cpu_time(ours), cpu_time(theirs))


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
    table.add('GRU (T=100, B=64, 256->256) fwd+bwd', cpu_time(ours), cpu_time(theirs))


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
        ('cpu', bench_cpu, False),
    ]
    parser = argparse.ArgumentParser(description='tinygrad_lite against PyTorch, side by side.')
    parser.add_argument('--only', choices=[name for name, _, _ in tables], help='run this table alone')
    parser.add_argument('--out', help='also write the markdown tables to this file')
    args = parser.parse_args()
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
