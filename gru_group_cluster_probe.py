"""Branch gru-group-cluster's probe (not part of the library): gru_fwd_split_h with a batch group as one thread-block
cluster of G blocks meeting at the cluster's barrier (kernels.cu, G > P) against the same layout meeting at flags.
Checks out and h_n bitwise equal (the same arithmetic in the same order; only the barrier differs), with and without
h0, then times each alone: us a step = (time at T steps - time at 1) / (T - 1), events over 20 launches, best of 3.
Run on the GPU machine from the repository root: python gru_group_cluster_probe.py"""
import numpy as np
import cupy as cp
import tinygrad_lite as tl


def timed(f, reps=20):
    best = 1e9
    for _ in range(3):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(reps):
            f()
        stop.record()
        stop.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, stop) / reps)
    return best * 1000


def group_cluster_launch(kernel, scratch, layout, arrays, steps, batch, hidden):
    """gru_fwd_split_h<1, WN, G> (`kernel`) on `layout` (P = 1, G = slices): as _gru_launch, the kernel swapped;
    scratch: hh, (2, batch, hidden) float16."""
    groups, slices, units, rows, chunk, smem, cluster, split, wn = layout
    assert cluster == 1, layout
    sizes = tl._int32s(steps, batch, hidden, slices, units, rows, chunk, split)
    tl._launch_with_smem(kernel, (groups * slices,), tl._BLOCK, arrays + (tl._gru_device()[2], scratch) + sizes, smem)


rng = np.random.default_rng(0)
for (steps, batch, hidden), layout in (((50, 256, 512), (16, 8, 64, 16, 512, 227328, 1, 512, 16)),
                                       ((50, 256, 512), (8, 16, 32, 32, 512, 149376, 1, 512, 32))):
    group = layout[1]
    kernel = tl._kernel('gru_fwd_split_h', 1, layout[8], group)
    if kernel is None:
        print(f'{layout}: no gru_fwd_split_h<1, {layout[8]}, {group}>')
        continue
    if group > 8:   # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        cp.cuda.driver.funcSetAttribute(kernel.kernel.ptr, 14, 1)
    clusters = tl._resident_clusters(tl._allow_smem(kernel, layout[5]), group, layout[5])
    if 0 < clusters < layout[0]:   # in waves the cluster kernel would time slow: both on as many groups as fit
        print(f'{layout}: {clusters} clusters of {group} resident at once, {layout[0]} groups: {clusters} groups run')
        layout = (clusters,) + layout[1:]
        batch = clusters * layout[3]
    xg = cp.asarray(rng.standard_normal((steps, batch, 3 * hidden)), np.float32)
    w_hh = cp.asarray(rng.uniform(-1, 1, (3 * hidden, hidden)) / hidden ** 0.5, np.float32)
    b_ih, b_hh = (cp.asarray(rng.uniform(-0.1, 0.1, 3 * hidden), np.float32) for _ in range(2))
    h0 = cp.asarray(rng.uniform(-1, 1, (batch, hidden)), np.float32)
    scratch = cp.empty((2, batch, hidden), np.float16)
    for start in (None, h0):
        outs = []
        for launch in (lambda a, s: tl._gru_launch('fwd', layout, True, a, s, batch, hidden),
                       lambda a, s: group_cluster_launch(kernel, scratch, layout, a, s, batch, hidden)):
            out = cp.full((steps, batch, hidden), np.nan, np.float32)
            launch((xg, w_hh, b_ih, b_hh, start, out, None), steps)
            outs.append(cp.asnumpy(out))
        same = np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
        print(f'{layout}, h0 {"given" if start is not None else "absent"}: clusters of {group}; out bitwise equal '
              f'{same}, NaN {np.isnan(outs[0]).sum()} (flags) and {np.isnan(outs[1]).sum()} (cluster), max diff '
              f'{np.nanmax(np.abs(outs[0] - outs[1])):.3g}', flush=True)
    out = cp.empty((steps, batch, hidden), np.float32)
    arrays = (xg, w_hh, b_ih, b_hh, None, out, None)
    for name, launch in (('flags', lambda s: tl._gru_launch('fwd', layout, True, arrays, s, batch, hidden)),
                         (f'cluster {group}', lambda s: group_cluster_launch(kernel, scratch, layout, arrays, s, batch,
                                                                            hidden))):
        t = {s: timed(lambda: launch(s)) for s in (1, steps)}
        print(f'{layout} {name:10s}: T=1 {t[1]:.1f} us, T={steps} {t[steps]:.1f} us, a step '
              f'{(t[steps] - t[1]) / (steps - 1):.2f} us', flush=True)
