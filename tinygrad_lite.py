"""tinygrad_lite: a tape-based autograd framework in one file.

NumPy on the CPU, CuPy on the GPU (optional), fused GPU kernels from kernels.cu beside this file.
The public interface follows PyTorch's names and semantics: see README.md.
"""
import collections
import collections.abc
import contextlib
import ctypes
import functools
import inspect
import itertools
import json
import math
import operator
import os
import sys
import threading
import types
import warnings
import weakref
import zipfile
import zlib

from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

try:
    import cupy as cp
    import cupyx
    import cupyx.scipy.special
except ImportError:
    cp = None
_CScalar = None   # CuPy 14's CScalar(value): a scalar kernel argument it passes on as it is (older CuPy's takes none)
if cp is not None and int(cp.__version__.split('.')[0]) >= 14:
    from cupy._core._scalar import CScalar as _CScalar

# ================================================================ dtype and device helpers

float16, float32, float64 = np.float16, np.float32, np.float64
uint8, int8, int16, int32, int64, bool_ = np.uint8, np.int8, np.int16, np.int32, np.int64, np.bool_
# PyTorch's other dtype names, those of Python's builtins (tl.float, tl.int, ...): module __getattr__ answers for them,
# so that this file's own float(), int(), ... stay Python's
_DTYPE_ALIASES = {'half': np.float16, 'float': np.float32, 'double': np.float64, 'short': np.int16, 'int': np.int32,
                  'long': np.int64, 'bool': np.bool_}
_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_FLOAT16_MAX = float(np.finfo(np.float16).max)   # the narrowest float range: a number past it may overflow a cast
_SUPPORTED = _FLOATS + tuple(np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64))


def _dtype(dtype):
    """A NumPy dtype from a dtype, type or name; TypeError for anything tinygrad_lite cannot hold."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"unsupported dtype {dtype!r}") from None
    if dt not in _SUPPORTED:
        raise TypeError(f"unsupported dtype {dt}: use one of {', '.join(str(d) for d in _SUPPORTED)}")
    return dt


def cuda_is_available():
    """CuPy importable and at least one GPU present."""
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


_NEEDS_CUPY = ("needs CuPy and an NVIDIA GPU: install CuPy with 'pip install cupy-cuda12x' (or cupy-cuda13x, matching "
               "your CUDA)")


def _parse_device(device):
    """'cpu' or 'cuda:N' from None, 'cpu' (or 'cpu:0', as PyTorch takes it), 'cuda' or 'cuda:N'."""
    if device is None or device in ('cpu', 'cpu:0'):
        return 'cpu'
    if not isinstance(device, str) or not (device == 'cuda' or device.startswith('cuda:')):
        raise ValueError(f"unknown device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    if not cuda_is_available():
        raise RuntimeError(f"device {device!r} {_NEEDS_CUPY}")
    index = int(device[5:]) if device.startswith('cuda:') else 0
    if not 0 <= index < cp.cuda.runtime.getDeviceCount():
        raise RuntimeError(f"device {device!r} does not exist: {cp.cuda.runtime.getDeviceCount()} GPU(s) present")
    return f'cuda:{index}'


def _device_and_dtype(args, device, dtype):
    """(device, dtype) of a .to(*args, device=, dtype=) call, as PyTorch's: among args a device string, a dtype, or a
    tensor (its device and dtype), each said at most once."""
    given = {'device': device, 'dtype': dtype}
    for a in args:
        if a is None:   # (as PyTorch's: nothing said)
            continue
        if isinstance(a, Tensor):
            said = {'device': a.device, 'dtype': a.dtype}
        elif isinstance(a, str) and a.split(':')[0] in ('cpu', 'cuda'):
            said = {'device': a}
        else:
            try:
                said = {'dtype': np.dtype(a)}
            except TypeError:
                raise TypeError(f"to: {a!r} is neither a device ('cpu', 'cuda', 'cuda:N'), a dtype nor a "
                                "tensor") from None
        for key, value in said.items():
            if given[key] is not None:
                raise TypeError(f"to: the {key} given twice ({given[key]!r} and {value!r})")
            given[key] = value
    return given['device'], given['dtype']


def _xp(array):
    """The array module (NumPy or CuPy) that owns `array`."""
    return np if cp is None or isinstance(array, (np.ndarray, np.generic)) else cp


def _stacklevel():
    """warnings.warn's stacklevel, for the function that calls it, of the first caller outside this file: the user's
    line, however many of this file's functions (aliases, modules, constructors) lie between."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level


_NO_CONTEXT = contextlib.nullcontext()   # a context that does nothing (reentrant: made once)


def _on(device):
    """The context in which arrays are made on `device` ('cpu' or 'cuda:N')."""
    return _NO_CONTEXT if device == 'cpu' else cp.cuda.Device(int(device[5:]))


def _move(array, device):
    """`array` as an array on `device` (no copy where it is already there)."""
    if device == 'cpu':
        return array if isinstance(array, (np.ndarray, np.generic)) else cp.asnumpy(array)
    with _on(device):
        return cp.asarray(array)


def _sum(a, axis=None, keepdims=False, scale=1):
    """scale * sum, accumulated and scaled in float32 for float16 input (a float16 mean of many values
    never overflows), in int64 for integers and bool (as PyTorch); always an array. On the GPU a sum over the
    leading axes of a C-contiguous float array of many rows (a bias gradient: the rows of a (rows, columns) matrix)
    is one product (_gemm), a row of ones times the matrix: CuPy's reduction gives such a sum blocks of 32 columns whose
    threads walk down the rows one dependent load at a time (for the GRU's bias gradients at (T B, 3H) = (12800,
    1536): 48 blocks, 800 loads a thread)."""
    xp = _xp(a)
    if xp is not np and a.dtype in _CUDA_TYPES and a.flags.c_contiguous and a.size:
        axes = _axes(axis, a.ndim)
        rows = math.prod(a.shape[:len(axes)])
        if 0 < len(axes) < a.ndim and axes == tuple(range(len(axes))) and rows >= 64:
            total = _gemm(cp.ones((1, rows), a.dtype), a.reshape(rows, a.size // rows), _acc_dtype(a.dtype))
            total = total.reshape((1,) * len(axes) * keepdims + a.shape[len(axes):])
            return (total if scale == 1 else total * total.dtype.type(scale)).astype(a.dtype, copy=False)
    if a.dtype == np.float16:
        return xp.asarray(a.sum(axis=axis, dtype=np.float32, keepdims=keepdims) * scale).astype(np.float16)
    total = xp.asarray(a.sum(axis=axis, keepdims=keepdims, dtype=None if a.dtype.kind == 'f' else np.int64))
    return total if scale == 1 else total * a.dtype.type(scale)   # (a scale comes with float input only)


def _matmul(a, b, out_dtype=None, tf32=False):
    """np.matmul; float16 on the CPU multiplies in float32 (NumPy has no float16 GEMM). On the GPU, matrices and
    equal-sized stacks of them go to _gemm (cuBLAS, or gemm_small or gemm_split), which a CUDA graph can capture;
    tf32: float32 may run on the TF32 tensor cores (the convolutions and GRUs do where allow_tf32 says)."""
    if _xp(a) is np:
        if a.dtype == np.float16:
            return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(out_dtype or np.float16)
        return np.matmul(a, b).astype(out_dtype or a.dtype, copy=False)
    if a.ndim == b.ndim and a.ndim in (2, 3) and a.shape[:-2] == b.shape[:-2] and a.dtype == b.dtype in _CUDA_TYPES:
        return _gemm(a, b, out_dtype or a.dtype, tf32)
    return cp.matmul(a, b).astype(out_dtype or a.dtype, copy=False)


# float32 convolutions and GRUs on the GPU may run their products on the TF32 tensor cores (10-bit
# mantissa), as PyTorch's torch.backends.cudnn.allow_tf32 (True by default) lets cuDNN; matmul stays exact
# float32 (as PyTorch's torch.backends.cuda.matmul.allow_tf32, False by default). Set False for exact float32.
allow_tf32 = True
_CUDA_TYPES = {np.dtype(np.float16): 2, np.dtype(np.float32): 0, np.dtype(np.float64): 1}   # cudaDataType
# _gemm's products of k <= _GEMM_SMALL_K (float16, float32) whose tiles of 32 x 32 take at most _GEMM_SMALL_BLOCKS
# blocks (about two a multiprocessor on an H100) run as kernels.cu's gemm_small or, past k = 128 (a block's 8 warps'
# steps), as clusters of gemm_split: one launch, about half of cuBLAS's host time a call, for 0.8-1.5 times cuBLAS's
# GPU time, up to 2.6 in float16 (cuBLAS's on the tensor cores), 2.1 for a vector (cuBLAS's GEMV), 1.9 for a ones-row
# bias sum of 1600 rows (H100; PERF_NOTES.md section 6)
_GEMM_SMALL_BLOCKS, _GEMM_SMALL_K = 256, 2048
_cublas = {}   # GPU index, or (GPU index, side stream pointer) of _side_by_side -> (libcublas, handle)


def _mapped_libraries(name):
    """Paths of the shared libraries loaded into this process whose path contains `name`, read from
    /proc/self/maps (none where it cannot be read)."""
    try:
        with open('/proc/self/maps') as maps:
            return sorted({line.split(None, 5)[5].strip() for line in maps if name in line})
    except OSError:
        return []


def _cublas_handle():
    """A cuBLAS handle of our own, called through ctypes: CuPy's cuBLAS wrappers refuse to run while a stream is
    captured into a CUDA graph, the C API records into the graph. The current GPU's, or on a side stream of
    _side_by_side its own (cuBLAS's advice for products on streams at once, a handle each: their choices of workspace
    then stay apart, and their results the same bits run to run)."""
    index = cp.cuda.runtime.getDevice()
    side = _cublas.get((index, cp.cuda.get_current_stream().ptr))
    if side is not None:
        return side
    if index not in _cublas:
        _cublas[index] = _new_cublas_handle()
    return _cublas[index]


def _new_cublas_handle():
    cp.cuda.device.get_cublas_handle()   # CuPy loads libcublas into the process: use the same library
    lib, handle = ctypes.CDLL(next(iter(_mapped_libraries('libcublas.so')))), ctypes.c_void_p()
    if lib.cublasCreate_v2(ctypes.byref(handle)):
        raise RuntimeError("cuBLAS: cannot create a handle")
    return lib, handle


def _gemm(a, b, out_dtype, tf32=False, out=None):
    """a @ b for CuPy matrices (m, k) @ (k, n), or stacks (s, m, k) @ (s, k, n), in one call of cuBLAS, into
    `out` (C-contiguous) if given; tf32: float32 on the TF32 tensor cores. cuBLAS is column-major, so it
    computes c^T = b^T a^T: a C-contiguous row-major matrix is its own transpose there, an F-contiguous
    one needs the transpose flag. A small product (_GEMM_SMALL_BLOCKS, _GEMM_SMALL_K) is one launch of gemm_small or
    gemm_split (9.0 GPUs; not while a CUDA graph is captured, so a replay's results may differ from an eager call's in
    rounding) instead, on the operands as they are laid out (in float32 arithmetic for float32, never TF32)."""
    (m, k), n, batch = a.shape[-2:], b.shape[-1], a.shape[0] if a.ndim == 3 else 1
    c = cp.empty(a.shape[:-2] + (m, n), out_dtype) if out is None else out
    if 0 in (m, n, k, batch):
        c.fill(0)
        return c
    split, small = min(8, 1 << (-(-k // 128) - 1).bit_length()), None   # a tile's blocks: 128 of k a block at once
    if -(-m // 32) * -(-n // 32) * batch * split <= _GEMM_SMALL_BLOCKS and k <= _GEMM_SMALL_K:
        if split == 1:
            small = _kernel('gemm_small', a.dtype, c.dtype)
        elif not cp.cuda.get_current_stream().is_capturing():   # (replays spend no host time; cuBLAS, less GPU time)
            small = _kernel('gemm_split', a.dtype, c.dtype, split)
    if small is not None:
        (a_i, a_p), (b_p, b_j) = ([step // x.itemsize for step in x.strides[-2:]] for x in (a, b))
        a_z, b_z = (x.strides[0] // x.itemsize if x.ndim == 3 else 0 for x in (a, b))
        small((split * -(-n // 32), -(-m // 32), batch), (_BLOCK,),
              (a, b, c) + _int32s(m, n, k) + _int64s(a_i, a_p, a_z, b_p, b_j, b_z))
        return c
    lib, handle = _cublas_handle()

    def operand(x):   # (transpose flag, leading dimension, batch stride, array)
        inner, packed = x.strides[-2:], x.ndim == 2 or x.strides[0] == x.shape[-1] * x.shape[-2] * x.itemsize
        if packed and inner == (x.shape[-1] * x.itemsize, x.itemsize):
            return 0, x.shape[-1], x.size // batch, x
        if packed and inner == (x.itemsize, x.shape[-2] * x.itemsize):
            return 1, x.shape[-2], x.size // batch, x
        return operand(x.copy())   # a fresh C-contiguous copy has the canonical strides

    (flag_a, ld_a, stride_a, a), (flag_b, ld_b, stride_b, b) = operand(a), operand(b)
    scalar = ctypes.c_double if a.dtype == np.float64 else ctypes.c_float
    one, zero = scalar(1), scalar(0)
    # CUBLAS_COMPUTE_64F, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F
    compute = 70 if a.dtype == np.float64 else 77 if tf32 and a.dtype == np.float32 else 68
    t_ab, t_c, ptr = _CUDA_TYPES[a.dtype], _CUDA_TYPES[np.dtype(out_dtype)], lambda x: ctypes.c_void_p(x.data.ptr)
    # the handle's stream, on every call (CuPy's current stream is per thread; 1.2 us of host time on an H100's host);
    # setting it also resets the handle's workspace to cuBLAS's default pool, which the GEMMs then use
    if lib.cublasSetStream_v2(handle, ctypes.c_void_p(cp.cuda.get_current_stream().ptr)):
        raise RuntimeError("cuBLAS: cannot set the handle's stream")
    if batch == 1 and a.ndim == 2:
        status = lib.cublasGemmEx(handle, flag_b, flag_a, n, m, k, ctypes.byref(one), ptr(b), t_ab, ld_b, ptr(a), t_ab, ld_a,
                                  ctypes.byref(zero), ptr(c), t_c, n, compute, -1)
    else:
        status = lib.cublasGemmStridedBatchedEx(
            handle, flag_b, flag_a, n, m, k, ctypes.byref(one), ptr(b), t_ab, ld_b, ctypes.c_longlong(stride_b),
            ptr(a), t_ab, ld_a, ctypes.c_longlong(stride_a), ctypes.byref(zero), ptr(c), t_c, n, ctypes.c_longlong(m * n),
            batch, compute, -1)
    if status:
        raise RuntimeError(f"cuBLAS GEMM of {a.shape} and {b.shape} failed with status {status}")
    return c


_sides = {}   # GPU index -> (fork event, [(side stream, its join event), ...]) of _side_by_side, made as it needs them


def _side_by_side(*works):
    """[work() for work in works] on the GPU, the first on the current stream and each other on a side stream of its
    own: each side stream first waits for the current stream's work so far, and the current stream then waits for
    every side stream's (a CUDA graph captures the fork and the join), so that products which each fill a fraction of
    the GPU run at once. What a work allocates comes from its stream's part of CuPy's pool, and what the current
    stream then allocates is ordered after the join."""
    main, device = cp.cuda.get_current_stream(), cp.cuda.runtime.getDevice()
    if device not in _sides:
        _sides[device] = cp.cuda.Event(disable_timing=True), []
    fork, sides = _sides[device]
    while len(sides) < len(works) - 1:   # (not inside a capture, where creating a cuBLAS handle would break it)
        stream = cp.cuda.Stream(non_blocking=True)
        _cublas[device, stream.ptr] = _new_cublas_handle()
        sides.append((stream, cp.cuda.Event(disable_timing=True)))
    fork.record(main)
    results = [works[0]()]
    for work, (stream, join) in zip(works[1:], sides):
        stream.wait_event(fork)
        with stream:
            results.append(work())
        join.record(stream)
        main.wait_event(join)
    return results


def _unbroadcast(grad, shape):
    """Sum `grad` down to `shape`, undoing NumPy broadcasting."""
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1)
    return _sum(grad, axes, keepdims=True).reshape(shape)


def _dim(d, ndim, new=False):
    """d as a non-negative dim of a tensor of ndim dims; new: a position for an added dim (unsqueeze, stack).
    As in PyTorch, 0 and -1 are valid on a 0-d tensor."""
    n = max(ndim + new, 1)
    if not _is_int(d):
        raise TypeError(f"dim must be an int, got {d!r}")
    if not -n <= d < n:
        raise IndexError(f"dim {d} is out of range [{-n}, {n - 1}] for a tensor of {ndim} dimension(s)")
    return d % n


def _fill(values, given, missing=None):
    """`values` placed in the True slots of `given`, `missing` in the others (a Function's optional inputs: Clamp's
    bounds, LayerNormOp's weight and bias, GRULayer's biases and h0)."""
    values = iter(values)
    return [next(values) if g else missing for g in given]


def _aliases(**names):
    """A decorator: the function also takes PyTorch's keyword names (dim= for axis=; a name for *shape gives the
    shape), a TypeError where a call gives both."""
    def decorate(fn):
        params = list(inspect.signature(fn).parameters.values())
        star = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
        bound = int(bool(params) and params[0].name == 'self')   # (a method's self comes before the shape)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if not kwargs:
                return fn(*args)
            for theirs, ours in names.items():
                if theirs in kwargs:
                    value = kwargs.pop(theirs)
                    if ours in kwargs or ours == star and args[bound:]:
                        raise TypeError(f"{fn.__name__}() got both {ours} and {theirs}= (PyTorch's name for it)")
                    if ours == star:
                        args = args[:bound] + (value,)
                    else:
                        kwargs[ours] = value
            return fn(*args, **kwargs)
        return call
    return decorate


def _reduced_axes(axis, ndim, keepdim):
    """The axes a reduction over `axis` runs on: PyTorch's reductions read None, () and [] as every axis; keepdim
    checked to be a bool."""
    _check_keepdim(keepdim)
    return _axes(None if isinstance(axis, (tuple, list)) and not axis else axis, ndim)


def _check_keepdim(keepdim):
    if not isinstance(keepdim, bool):   # (a truthy string or 2 would pass silently; NumPy's bool PyTorch refuses too)
        raise TypeError(f"keepdim must be a bool, not {type(keepdim).__name__} (as PyTorch's)")


def _axes(axis, ndim):
    """A tuple of non-negative axes from None, an int or a tuple; () on a 0-d tensor."""
    if axis is None:
        return tuple(range(ndim))
    if not isinstance(axis, (int, np.integer, tuple, list, np.ndarray)):
        raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r}")
    axes = sorted(_dim(a, ndim) for a in ((axis,) if isinstance(axis, (int, np.integer)) else axis))
    if len(set(axes)) < len(axes):
        raise ValueError(f"axes {axis} name an axis more than once")
    return tuple(axes) if ndim else ()


_KIND_RANK = {'b': 0, 'u': 1, 'i': 1, 'f': 2}
_NUMBERS = (bool, int, float, np.generic)   # Python numbers, and NumPy scalars treated as they are
_REALS = (int, float, np.integer, np.floating)   # a number an option or hyperparameter may be (bools are ints)
_ARRAYS = (np.ndarray,) if cp is None else (np.ndarray, cp.ndarray)


def _promote(*dtypes, divide=False):
    """PyTorch's result dtype of tensors: the float ones decide where there are any (int64 and float32 give
    float32), else all of them; divide: true division, which gives float32 where that would be an integer."""
    floats = [d for d in dtypes if d.kind == 'f']
    result = np.result_type(*(floats or dtypes))
    return np.dtype(np.float32) if divide and result.kind != 'f' else result


def _check_broadcast(what, *shapes):
    """The shapes' broadcast shape; a ValueError naming `what` and the shapes where they do not broadcast together
    (NumPy's names neither)."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"{what}: shapes {' and '.join(map(str, shapes))} cannot be broadcast together") from None


def _need_tensor(t, what):
    """t, which must be a Tensor (an array or a list: a TypeError naming `what`, as PyTorch's functions raise)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{what}: expected a tensor, got a {type(t).__name__}")
    return t


def _need_float(t, what):
    """t, which must be a floating-point tensor: PyTorch's float-only ops raise for integer and bool ones (they
    would give truncated results and, for BatchNorm, update the running statistics)."""
    if _need_tensor(t, what).dtype.kind != 'f':
        raise TypeError(f"{what}: expected a floating-point tensor, got {t.dtype}")
    return t


def _result_dtype(*tensors, divide=False):
    """PyTorch's result dtype of an op on `tensors` (two for a binary op): as _promote, except that 0-d tensors do not
    widen tensors with dimensions within their kind (bool < integer < float): float16 (3,) * float32 () is float16,
    and int64 (3,) * float64 () float64."""
    shaped, scalars = [t.dtype for t in tensors if t.ndim], [t.dtype for t in tensors if not t.ndim]
    if shaped and scalars and max(_KIND_RANK[d.kind] for d in scalars) <= max(_KIND_RANK[d.kind] for d in shaped):
        return _promote(*shaped, divide=divide)
    return _promote(*shaped, *scalars, divide=divide)


def _opmath(dtype):
    """The dtype an op of result `dtype` computes in where its operands' dtypes differ: float32 for float16 (the
    operands are not rounded to float16 first, the result once, as PyTorch's CPU * and /; its + and - round a 0-d
    operand first), else the dtype itself."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _wide(a):
    """a, float16 as float32 (_opmath's rule for one array: PyTorch's float16 running sums and products, and
    torch.optim's float16 ops, compute in float32, each result rounded once)."""
    return a.astype(np.float32) if a.dtype == np.float16 else a


def _as_dtype(a, dtype):
    """a in `dtype`, itself where it is already (CuPy's astype(copy=False) costs a few microseconds of host time even
    then, a dozen times in a GRU layer's fwd+bwd); None stays None."""
    return a if a is None or a.dtype == dtype else a.astype(dtype)


def _acc_dtype(dtype):
    """The dtype sums, statistics and per-channel arithmetic accumulate in: float64 for float64 input, float32
    otherwise (kernels.cu's acc_t)."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _is_int(v):
    """Whether v is a Python or NumPy integer, not a bool (which PyTorch refuses where it wants an int)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _device_of(array):
    return 'cpu' if isinstance(array, (np.ndarray, np.generic)) else f'cuda:{array.device.id}'


def _expanded(a):
    """Whether elements of array a share memory (expand()'s stride-0 views)."""
    return a.size > 1 and any(step == 0 and size > 1 for step, size in zip(a.strides, a.shape))


def _unaliased(value, target):
    """value (an array, or a number's NumPy scalar) to write into target: a copy of a CuPy array that may share
    target's memory (CuPy's copies and scatters read and write them at once, where NumPy's assignment reads the value
    first, as if copied)."""
    if cp is not None and isinstance(value, cp.ndarray) and cp.may_share_memory(value, target):
        return value.copy()
    return value


def _unwritable_memory(a):
    """Whether array a's memory is read-only (NumPy's flag; CuPy's arrays have none: writable)."""
    return isinstance(a, np.ndarray) and not a.flags.writeable


def _unwritable(a):
    """Why array a cannot take an elementwise write, or None."""
    if _expanded(a):
        return ("more than one element of the written-to tensor refers to a single memory location (an expanded "
                "tensor): clone() it first")
    if _unwritable_memory(a):
        return "the tensor's memory is read-only (as np.load(..., mmap_mode='r') gives): copy it first"
    return None


def _refuse_unwritable(t, what, *args):
    """Before an update in place of tensor t (an optimizer's, a clipping's), where the tensors before it would be
    updated first: a RuntimeError naming `what` (a str.format template of args, formatted only then: a step checks
    every parameter) if t cannot take it element by element."""
    why = _unwritable(t.data)
    if why:
        raise RuntimeError(f"in-place {what.format(*args)}: {why}")


def _is_dense(a):
    """a's elements fill its memory without gaps, in some axis order (so a kernel can run over it flat)."""
    expect = a.itemsize
    for stride, n in sorted((s, n) for s, n in zip(a.strides, a.shape) if n > 1):
        if stride != expect:
            return False
        expect *= n
    return True


def _number_dtype(value):
    """The dtype PyTorch gives a Python number on its own: bool, int64 or float32; OverflowError, as PyTorch's, for an
    int it cannot convert (outside [-2**63, 2**64): NumPy makes it an object); TypeError for a complex one."""
    kind = np.asarray(value).dtype.kind
    if kind == 'O':
        raise OverflowError(f"int too big to convert: {value}")
    if kind == 'c':
        raise TypeError(f"complex numbers are not supported: {value}")
    return np.dtype({'b': np.bool_, 'i': np.int64, 'u': np.int64}.get(kind, np.float32))


_ERF_SERIES = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(10))


def _erf(x):
    """erf elementwise, erf(-0) = -0: CuPy's on the GPU. On the CPU, float64 gets double precision from a positive
    series for |x| < 3 (A&S 7.1.6: erf x = 2/sqrt(pi) e^-x^2 sum 2^n x^(2n+1) / (1*3*...*(2n+1))) and the
    erfc continued fraction beyond (A&S 7.1.14); float32 and float16 get (in float32) the Maclaurin series
    2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)) to 10 terms for |x| < 1 (relative accuracy near 0) and A&S 7.1.26
    beyond (|error| < 1.5e-7): within 2.1e-7 of erf relatively, several times cheaper than float64's."""
    if _xp(x) is not np:
        return cupyx.scipy.special.erf(x.astype(np.promote_types(x.dtype, np.float32))).astype(x.dtype)
    if x.dtype != np.float64:
        z = x.astype(np.float32)
        a = np.abs(z)
        t = 1 / (1 + 0.3275911 * a)
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        near = a < 1
        s = np.where(near, z, 0)   # (0 where the series is not used: no inf - inf there)
        series, s2 = 0, s * s
        for c in reversed(_ERF_SERIES):
            series = series * s2 + c
        return np.where(near, s * series, np.copysign(1 - poly * np.exp(-a * a), z)).astype(x.dtype)
    a, out = np.abs(x), np.empty(x.shape)
    near = a < 3
    s = a[near]
    term, total, two_s2 = s.copy(), s.copy(), 2 * s * s
    for n in range(1, 60):
        term = term * two_s2 / (2 * n + 1)
        total += term
    out[near] = 2 / math.sqrt(math.pi) * np.exp(-s * s) * total
    b = a[~near]
    f = b.copy()
    for k in range(60, 0, -1):
        f = b + (k / 2) / f
    out[~near] = 1 - np.exp(-b * b) / (math.sqrt(math.pi) * f)
    return np.copysign(out, x)


def _capturing(t):
    """Whether t is on a GPU whose stream captures a CUDA graph: a check reading values back (a sync) cannot run."""
    return t.device != 'cpu' and cp.cuda.get_current_stream().is_capturing()


# ================================================================ the kernel loader

_KERNEL_PATH = os.environ.get('TINYGRAD_LITE_KERNELS') or os.path.join(os.path.dirname(os.path.abspath(__file__)), 'kernels.cu')
_C_TYPES = {np.dtype(np.float16): '__half', np.dtype(np.float32): 'float', np.dtype(np.float64): 'double',
            np.dtype(np.int64): 'long long'}
_FLOAT_C = ('__half', 'float', 'double')
_PACK = {'__half': ('1', '8'), 'float': ('1', '4'), 'double': ('1', '2')}   # elements per load: 1 or 16 bytes
_ACTIVATIONS = {None: 0, 'relu': 1, 'gelu': 2}   # the ACT template argument of the BatchNorm kernels
_GRU_CLUSTERS = (1, 2, 4, 8)   # the GRU's cluster kernels' blocks per cluster (8: the portable most)
_GRU_SPLITS = (2, 4, 8)   # the GRU's k-split kernels' blocks per cluster: slices of the product's k extent
_GRU_SPLITS_HALF = (1,) + _GRU_SPLITS   # gru_fwd_split_h's (1: a block takes all of k, no cluster)
_GRU_WG = (16, 32, 64)   # their float32 products on wgmma: the operand's rows (the B operand's) padded to one of these
_GRU_GROUPS = (8, 16)   # the forward's batch groups as one cluster (f16 wgmma): its blocks (16: a non-portable size)
_GRU_GROUP_WG = (16, 24, 32, 40, 48)   # and their operand's rows (wgmma's n: 8 a step)
_GRU_CELLS = 4   # (row, unit) cells a thread of the persistent kernels at most (kernels.cu's CPT; groups: 5)
_GRU_REGS = (2, 4, 8)   # the regs kernels' k-tiles of 16 (W_hh in a block's registers: hidden up to 16 KT)
_GRU_REGS_ROWS = 8   # and its batch group's rows at most (the mma's n)
# gru_fwd_regs<T, KT, P, S> (P 1, or 2 at 8 rows a block) projects x itself (kernels.cu) where a block's rows times x's
# k-tiles of 8 are at most _GRU_REGS_X_TILES (the B fragments a step: REGS_XK), in eager runs of at most
# _GRU_REGS_PROJ_STEPS steps: it saves the projection's call (24 us of host time at (100, 16, 32, 128) on an H100's
# host) for about 0.05 us of GPU time a step and 4 a launch (H100: at (100, 16, 32, 128) 64.8 us in the fifty-seventh
# session, against 59.8 on xg and 4 for the projection in the fifty-sixth). Eager, H100 (fifty-third session): 4-17%
# less time a call at 1 and 100 steps, 2% more at (200, 8, 32, 64) (PERF_NOTES.md)
_GRU_REGS_X_TILES, _GRU_REGS_PROJ_STEPS = 8, 100
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14   # the CUDA driver's CUfunction_attribute
# The fused BatchNorm training passes' packs kept in registers per thread (their RC template argument), per C type
# (none for float64: the two-kernel passes serve it): the fastest measured on the H200 (PERF_NOTES.md)
_BN_KEPT_REGS = {'bn_fwd_train': {'__half': 4, 'float': 16}, 'bn_bwd_train': {'__half': 4, 'float': 4}}
_CE_UNROLL = {'__half': 4, 'float': 8, 'double': 4}   # cross_entropy_fwd's U: packs of 16 bytes a lane loads at once
# kernels.cu's implicit:: k-step (bytes of a row), stages in flight and dW's rows a step. The tiles (a probe's picks
# at train_cifar.py's shapes in float16): a block's BM x BN of y in warps' TM x TN, for at most 32 output channels
# and for more; WO x WK of dW, per type, for at most 64 output channels and for more
_IMPLICIT_BK_BYTES, _IMPLICIT_STAGES, _IMPLICIT_WM = 64, 4, 32
_IMPLICIT_TILES = ((128, 32, 32, 32), (128, 64, 64, 32))
_IMPLICIT_DW_TILES = {'__half': ((64, 256), (128, 128)), 'float': ((64, 128), (64, 128))}   # TF32: twice the bytes
# On 9.0 GPUs (wgmma, sm_90a; sweeps at train_cifar.py's shapes): conv_implicit_wg's (BN output channels,
# MT x 128 rows m, k-steps in shared memory) and conv_implicit_wg_dw's (BO output channels, BKC columns, stages,
# whole waves of blocks over the splits of the rows), for at most 64 output channels and for more
_IMPLICIT_WG = ((64, 1, 4), (256, 1, 4))
_IMPLICIT_WG_DW = {'__half': ((64, 256, 4, 1), (128, 256, 4, 1)), 'float': ((64, 128, 6, 1), (128, 128, 4, 2))}
# conv_implicit_tma's (BN, MT, STAGES) where x's channels fill whole 128-byte rows, for at most 64 output channels
# and for more (on the H200, 4 stages of the 64-wide tile, two blocks an SM, were the fastest: PERF_NOTES.md)
_IMPLICIT_TMA = ((64, 1, 4), (256, 1, 4))
# kernel name -> the template arguments it is instantiated with (C type names, integers)
_KERNEL_INSTANCES = {
    'relu_fwd': [(t,) for t in _FLOAT_C],
    'relu_bwd': [(g, o) for g in _FLOAT_C for o in _FLOAT_C],
    **{name: [(t, v, tanh) for t in _FLOAT_C for v in _PACK[t] for tanh in '01'] for name in ('gelu_fwd', 'gelu_bwd')},
    'bn_fwd_stats': [(t,) for t in _FLOAT_C],
    **{name: [(t, str(act)) for t in _FLOAT_C for act in _ACTIVATIONS.values()]
       for name in ('bn_fwd_apply', 'bn_bwd_reduce', 'bn_bwd_dx')},
    **{name: [(t, str(act), str(rc)) for t, rc in kept.items() for act in _ACTIVATIONS.values()]
       for name, kept in _BN_KEPT_REGS.items()},
    # GRU: (T, TC), TC = 1 for the tensor cores (float16, and float32 as TF32 where allow_tf32 says so)
    **{name: [('float', '0'), ('float', '1'), ('__half', '1')] for name in ('gru_fwd_persistent', 'gru_bwd_persistent')},
    **{name: [(t, tc, str(cl)) for t, tc in (('float', '0'), ('float', '1'), ('__half', '1')) for cl in _GRU_CLUSTERS]
       for name in ('gru_fwd_cluster', 'gru_bwd_cluster')},
    # (T, P, WN); float16's forward on wgmma only with a batch group as one cluster: (T, 1, WN, G)
    **{name: [(t, str(p), '0') for t in ('float', '__half') for p in _GRU_SPLITS] +
             [('float', str(p), str(n)) for p in _GRU_SPLITS for n in _GRU_WG] +
             [('__half', '1', str(n), str(g)) for n in _GRU_GROUP_WG for g in _GRU_GROUPS if name == 'gru_fwd_split']
       for name in ('gru_fwd_split', 'gru_bwd_split')},
    # (P, WN) and (1, WN, G): a batch group as one cluster of G blocks (_GRU_GROUPS, with _GRU_GROUP_WG's WN)
    'gru_fwd_split_h': [(str(p), str(n)) for p in _GRU_SPLITS_HALF for n in _GRU_WG] +
                       [('1', str(n), str(g)) for n in _GRU_GROUP_WG for g in _GRU_GROUPS],
    # (T, KT, SPREAD) and (T, KT, PROJ, SPREAD): PROJ 1 projects x itself, 2 at 8 rows a block; SPREAD 1 for blocks of
    # one row (so not with PROJ 2)
    'gru_bwd_regs': [(t, str(kt), s) for t in ('float', '__half') for kt in _GRU_REGS for s in '01'],
    'gru_fwd_regs': [(t, str(kt), p, s) for t in ('float', '__half') for kt in _GRU_REGS for p in '012' for s in '01'
                     if p + s != '21'],
    **{name: [('float',), ('__half',)] for name in ('gru_gates_fwd', 'gru_gates_bwd', 'gru_bias_sums')},
    **{name: [(t,) for t in _FLOAT_C]
       for name in ('batch_transpose', 'conv_weight_layouts', 'conv_direct_fwd', 'conv_direct_dx', 'conv_direct_dw',
                    'conv_direct_dw_fold')},
    **{name: [(t, v) for t in _FLOAT_C for v in _PACK[t]]
       for name in ('im2col_nhwc', 'col2im_nhwc', 'max_pool2d_fwd', 'max_pool2d_bwd', 'avg_pool2d_fwd', 'avg_pool2d_bwd')},
    'conv_implicit_fwd': [(t, *map(str, tile)) for t in ('__half', 'float') for tile in _IMPLICIT_TILES],
    'conv_implicit_wg': [(t, *map(str, tile)) for t in ('__half', 'float') for tile in _IMPLICIT_WG],
    'conv_implicit_tma': [(t, *map(str, tile)) for t in ('__half', 'float') for tile in _IMPLICIT_TMA],
    'conv_implicit_wg_dw': [(t, *map(str, tile[:3])) for t, tiles in _IMPLICIT_WG_DW.items() for tile in tiles],
    'conv_implicit_dw': [(t, *map(str, tile)) for t, tiles in _IMPLICIT_DW_TILES.items() for tile in sorted(set(tiles))],
    'conv_dw_fold': [('__half',), ('float',)],
    'cross_entropy_fwd': [(t, 'long long', v, str(_CE_UNROLL[t])) for t in _FLOAT_C for v in _PACK[t]],
    'cross_entropy_bwd': [(t, 'long long', v) for t in _FLOAT_C for v in _PACK[t]],
    'sgd_step': [(t,) for t in _FLOAT_C],
    'gemm_small': [('__half', '__half'), ('__half', 'float'), ('float', 'float')],
    'gemm_split': [(t, c, str(split)) for t, c in (('__half', '__half'), ('__half', 'float'), ('float', 'float'))
                   for split in (2, 4, 8)],
}
# launched as cooperative grids
_COOPERATIVE = {'gru_fwd_persistent', 'gru_bwd_persistent', 'bn_fwd_train', 'bn_bwd_train'}
# Hopper's wgmma (and TMA), and the GRU's thread-block clusters: built with -arch=sm_90a, on 9.0 devices only
_SM90A = {'conv_implicit_wg', 'conv_implicit_wg_dw', 'conv_implicit_tma', 'gru_fwd_cluster', 'gru_bwd_cluster',
          'gru_fwd_split', 'gru_bwd_split', 'gru_fwd_split_h', 'gemm_split'}
# threads per block of every kernel but the implicit-GEMM convs', which set their own (128, 256, 384, or 512 for
# TF32's conv_implicit_wg_dw, its warpgroups specialized)
_BLOCK = 256
_loaded_kernels = {}   # GPU index -> {name expression: RawKernel}, {} when kernels.cu is missing or broken
_kernels = {}   # (name, template arguments, GPU index) -> RawKernel or None, as _kernel found it


def _name_expressions(name):
    return [f"{name}<{', '.join(args)}>" for args in _KERNEL_INSTANCES[name]]


def _kernel_name_expressions():
    return [e for name in _KERNEL_INSTANCES for e in _name_expressions(name)]


def _module_options(name):
    """NVRTC's options for kernel `name`'s module (the name too: CuPy's disk cache keys a binary by source and
    options)."""
    return ('-std=c++17', f'-DTL_MODULE_{name}') + (('-arch=sm_90a', '-DTL_SM90A') if name in _SM90A else ())


def _load_kernels():
    """Compile kernels.cu once per GPU (CuPy caches the binaries on disk) as a module per kernel name, the modules in
    parallel threads (NVRTC lets go of the GIL). With an empty cache the H200 machine's 16 CPUs loaded every kernel
    so in 10.2 s, and as three modules compiled one after another in 38.2 s (most of it the BatchNorm kernels).
    Warn once, and fall back to composed CuPy ops for whatever does not load."""
    index = cp.cuda.runtime.getDevice()
    if index in _loaded_kernels:
        return _loaded_kernels[index]
    _loaded_kernels[index] = kernels = {}
    try:
        with open(_KERNEL_PATH) as f:
            source = f.read()
    except Exception as e:   # a missing file: the composed CuPy paths serve instead
        warnings.warn(f"tinygrad_lite: fused kernels unavailable ({type(e).__name__}: {e}); using composed CuPy ops")
        return kernels
    hopper = cp.cuda.Device().compute_capability == '90'

    def build(name):
        expressions = _name_expressions(name)
        with cp.cuda.Device(index):   # a thread starts on GPU 0
            module = cp.RawModule(code=source, options=_module_options(name), name_expressions=expressions,
                                  enable_cooperative_groups=name in _COOPERATIVE)
            return {e: module.get_function(e) for e in expressions}
    names = [name for name in _KERNEL_INSTANCES if hopper or name not in _SM90A]
    with ThreadPoolExecutor(min(len(names), os.cpu_count() or 1)) as pool:
        built = [(name, pool.submit(build, name)) for name in names]
    failed = []
    for name, future in built:
        try:
            kernels.update(future.result())
        except Exception as e:   # a compile error: the composed CuPy paths serve instead
            failed.append((name, e))
    if failed:
        name, e = failed[0]
        detail = next((line for line in str(e).splitlines() if 'error' in line), str(e))[:300]   # NVRTC's first error
        warnings.warn(f"tinygrad_lite: fused kernels unavailable ({type(e).__name__} in {name}: {detail}); "
                      f"using composed CuPy ops for {', '.join(name for name, _ in failed)}")
    return kernels


def _kernel(name, *args):
    """The compiled kernel name<args...> (dtypes given as dtypes, integers as ints), or None where it
    is not available: then the caller composes. Remembered per GPU: ops look kernels up on every call."""
    key = (name, args, cp.cuda.runtime.getDevice())
    if key not in _kernels:
        if any(not isinstance(a, int) and np.dtype(a) not in _C_TYPES for a in args):
            _kernels[key] = None
        else:
            c_args = [str(a) if isinstance(a, int) else _C_TYPES[np.dtype(a)] for a in args]
            _kernels[key] = _load_kernels().get(f"{name}<{', '.join(c_args)}>")
    return _kernels[key]


def _fused(array, name, *args):
    """The kernel for `array`'s op on the GPU; None for a NumPy array or a kernel kernels.cu lacks."""
    return None if _xp(array) is np else _kernel(name, *args)


def fused_kernels():
    """Names of the kernels of kernels.cu loaded on the current GPU ([] on the CPU or without kernels.cu)."""
    if not cuda_is_available():
        return []
    return sorted({e.split('<')[0] for e in _load_kernels()})


_resident, _sm_counts = {}, {}   # (kernel, GPU) -> blocks the GPU holds at once; GPU -> multiprocessors
_smem_allowed = {}   # kernel -> the dynamic shared memory it is allowed
_nonportable = set()   # kernels allowed clusters of more than 8 blocks


def _multiprocessors():
    device = cp.cuda.runtime.getDevice()
    if device not in _sm_counts:   # CuPy's Device.attributes queries every attribute: slow for each launch
        _sm_counts[device] = cp.cuda.Device().attributes['MultiProcessorCount']
    return _sm_counts[device]


def _resident_blocks(kernel, smem=0, threads=_BLOCK):
    """Blocks of `threads` threads of `kernel` (with `smem` bytes of dynamic shared memory) resident on the whole
    GPU at once: SMs x occupancy."""
    key = (id(kernel), smem, threads, cp.cuda.runtime.getDevice())
    if key not in _resident:
        per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, smem)
        _resident[key] = max(1, per_sm) * _multiprocessors()
    return _resident[key]


def _allow_smem(kernel, smem):
    """kernel, allowed `smem` bytes of dynamic shared memory (over 48 KB takes its consent, asked once; the
    occupancy of a kernel without it counts no blocks)."""
    if _smem_allowed.get(kernel, 0) < smem:   # the attribute's getter is a driver call
        kernel.max_dynamic_shared_size_bytes = _smem_allowed[kernel] = max(smem, kernel.max_dynamic_shared_size_bytes)
    return kernel


def _launch_with_smem(kernel, grid, threads, args, smem):
    _allow_smem(kernel, smem)(grid, (threads,), args, shared_mem=smem)


@functools.lru_cache(maxsize=4096)
def _scalars(kind, *values):
    """values (Python or NumPy numbers) as a tuple of scalar kernel arguments of NumPy type `kind`, made once per
    list as the objects CuPy passes on as they are (CuPy 14's CScalar; before 14, the NumPy scalars): CuPy converts
    a NumPy scalar at every launch, about 0.4 us of Python each on the H200's host, and a training step launches
    with the same sizes each time."""
    return tuple(_CScalar(kind(v)) if _CScalar else kind(v) for v in values)


def _int32s(*values):
    return _scalars(np.int32, *values)


def _int64s(*values):
    return _scalars(np.int64, *values)


def _launch_flat(kernel, n, per_thread, args):
    """An elementwise launch of a grid-stride kernel with a thread per `per_thread` of the n elements: on the
    H200 that reads at 95% of the copy rate where one wave of resident blocks looping reached 87%."""
    if n:
        kernel((min(2 ** 31 - 1, -(-n // (per_thread * _BLOCK))),), (_BLOCK,), args)


# ================================================================ the autograd core

class _GradModeState(threading.local):
    enabled = True   # per thread, as PyTorch's grad mode: each thread starts recording


_GradMode = _GradModeState()


class _GradSwitch(contextlib.ContextDecorator):
    """Grad mode `enabled` inside: `with ...:` or as a decorator, called (`@tl.no_grad()`) or bare (`@tl.no_grad`).
    Re-entrant: one instance may be entered again before it exits; a decorated function enters a fresh one per
    call, so that threads calling it at once keep their own modes."""

    def __new__(cls, func=None):
        self = super().__new__(cls)
        self.previous = []
        return self if func is None else self(func)   # used bare: the decorated function

    def _recreate_cm(self):   # contextlib.ContextDecorator's hook: the context each decorated call enters
        return type(self)()

    def __call__(self, func):
        if not inspect.isgeneratorfunction(func):
            return super().__call__(func)

        @functools.wraps(func)
        def generator(*args, **kwargs):
            """As PyTorch's: the mode holds each time the generator runs, not around where its caller resumes it."""
            inner, sent, thrown = func(*args, **kwargs), None, None
            while True:
                try:
                    with type(self)():
                        value = inner.send(sent) if thrown is None else inner.throw(thrown)
                except StopIteration as stop:
                    return stop.value
                sent, thrown = None, None
                try:
                    sent = yield value
                except GeneratorExit:
                    with type(self)():
                        inner.close()
                    raise
                except BaseException as error:   # thrown in by the caller: into the inner generator
                    thrown = error
        return generator

    def __enter__(self):
        self.previous.append(_GradMode.enabled)
        _GradMode.enabled = self.enabled

    def __exit__(self, *exc):
        _GradMode.enabled = self.previous.pop()


class no_grad(_GradSwitch):
    """Record nothing inside."""
    enabled = False


class enable_grad(_GradSwitch):
    """Record inside, even within no_grad (as PyTorch's): an optimizer's closure runs so."""
    enabled = True


class set_grad_enabled:
    """As PyTorch's: grad mode set to `mode` by the call itself (tl.set_grad_enabled(False) turns recording off), and
    as a context manager (`with tl.set_grad_enabled(training):`) the mode before it restored on exit."""

    def __init__(self, mode):
        if not isinstance(mode, (bool, np.bool_)):
            raise TypeError(f"set_grad_enabled: mode must be a bool, not {type(mode).__name__}")
        self.mode, self.previous = bool(mode), _GradMode.enabled
        _GradMode.enabled = self.mode

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _GradMode.enabled = self.previous

    def __call__(self, func):
        """As a decorator (as PyTorch's): this mode for each call of func; the mode before the constructor restored."""
        _GradMode.enabled = self.previous
        return (enable_grad if self.mode else no_grad)(func)


def is_grad_enabled():
    """Whether ops record for a backward (grad mode, per thread), as PyTorch's."""
    return _GradMode.enabled


class Function:
    """One recorded op. `forward` maps input arrays to an output array and saves what `backward` needs;
    `backward` maps the output's gradient to one gradient per input (None where nobody asked).
    As PyTorch checks its saved tensors, a backward whose saved values were changed in place since the forward
    raises rather than give a wrong gradient: a subclass says what its backward reads, `saves` (indices of inputs,
    None for all, 'others' where each input's gradient reads the other input, as in a product) and `saves_output`
    (its forward may set either for the case at hand, as an attribute of the instance). An op whose output may be a
    view of its first input says `may_view`: the two then share one version counter."""
    saves, saves_output, may_view = None, False, False

    def __init__(self, inputs):
        self.inputs = inputs
        self.needs_grad = tuple([t._requires_grad for t in inputs])

    @classmethod
    def apply(cls, *inputs, **params):
        device = getattr(inputs[0], 'device', None)
        for t in inputs:
            if not isinstance(t, Tensor):   # (the check inline: apply is every op's host path)
                _need_tensor(t, cls.__name__)
            if t.device != device:
                raise RuntimeError(f"{cls.__name__}: expected all tensors on one device, got {device} and {t.device}")
        ctx = cls(inputs)
        with _quiet(device):
            out = ctx.forward(*[t._data for t in inputs], **params)
        recording = ctx.recording and out.dtype.kind == 'f'   # integer results need none
        result = Tensor._wrap(out, ctx.output_device(device), ctx if recording else None)
        if cls.may_view and _memory_owner(out) is _memory_owner(inputs[0].data):
            result._version = inputs[0]._version   # a view: an in-place change to either changes both
        if recording:
            ctx.versions = ctx._versions(result)
            for t in inputs:   # each input's count of live ops whose backward reaches its history (_recorded_update)
                t._held += 1
            ctx._holding = True
        return result

    def _release(self):
        """Drops what this op keeps (a backward without retain_graph is done with it), its inputs' counts first."""
        if self.__dict__.pop('_holding', False):
            for t in self.inputs:
                t._held -= 1
        self.__dict__.clear()

    def __del__(self):
        if '_holding' in self.__dict__:   # a recorded op that no backward released (a revived one then says so)
            self._release()

    def _versions(self, out):
        """(version counter, its count now, which: an input's index or 'output') of each tensor backward reads."""
        saves, inputs = self.saves, self.inputs
        if saves is None:
            kept = [(t._version, t._version[0], i) for i, t in enumerate(inputs)]
        else:
            if saves == 'others':
                saves = [1 - i for i in (0, 1) if self.needs_grad[i]]
            kept = [(inputs[i]._version, inputs[i]._version[0], i) for i in saves]
        if self.saves_output:
            kept.append((out._version, out._version[0], 'output'))
        return kept

    def output_device(self, device):
        return device

    @property
    def recording(self):
        """Whether apply records this op for a backward (forward keeps what backward needs only then): grad mode on
        and an input needing a gradient (apply records a float output only; an integer one needs no backward)."""
        return _GradMode.enabled and any(self.needs_grad)

    def _saved(self, value):
        """value, kept by forward for backward; a clear error where that forward did not record (then it kept none)."""
        if value is None:
            raise RuntimeError(f"{type(self).__name__}.backward: its forward ran unrecorded (under tl.no_grad() or "
                               "with no input needing a gradient) and kept nothing for a backward")
        return value


def _add_hook(hooks, hook, prepend=False):
    """hook added to `hooks` (a dict, in order: last, or first where prepend); returns PyTorch's handle: its remove()
    takes the hook off."""
    key = object()
    hooks[key] = hook
    if prepend:
        for other in [k for k in hooks if k is not key]:   # (each moved behind it, in order)
            hooks[other] = hooks.pop(other)
    return types.SimpleNamespace(remove=lambda: hooks.pop(key, None))


def _memory_owner(array):
    """The array that owns `array`'s memory (itself, or the base at the end of its chain of views)."""
    while getattr(array, 'base', None) is not None:
        array = array.base
    return array


def _quiet(device):
    """NumPy's floating-point warnings off for an op's arithmetic on `device`: inf and NaN are results, silently as
    PyTorch's (CuPy warns of none: for the GPU a context that does nothing, made once)."""
    return np.errstate(all='ignore') if device == 'cpu' else _NO_CONTEXT


def _version_error(t, counter, version, which):
    """The error for a tensor that the op which made `t` saved for its backward, changed in place since then."""
    saved = t if which == 'output' else t._ctx.inputs[which]
    what = 'its output' if which == 'output' else f'its input {which}'
    return RuntimeError(f"one of the tensors needed for gradient computation has been modified by an in-place "
                        f"operation: {what} of {type(t._ctx).__name__} ({saved.dtype} of shape {saved.shape}) is at "
                        f"version {counter[0]}; expected version {version} instead")


def _topological_order(root):
    """Tensors needing gradients reachable from `root`, inputs before outputs; iterative, so a chain
    of any length fits."""
    order, visited, stack = [], set(), [(root, False)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            order.append(t)
        elif id(t) not in visited:
            visited.add(id(t))
            if t._ctx is None:   # a leaf: no inputs to wait for
                order.append(t)
                continue
            stack.append((t, True))
            # a freed graph keeps no inputs: _backward then says so
            stack.extend([(p, False) for p in getattr(t._ctx, 'inputs', ())
                          if p._requires_grad and id(p) not in visited])
    return order


def _hooked(t, g):
    """The gradient `g` of `t` through t's hooks (register_hook), in order: each given g in memory of its own (one
    written in place changes t's alone), a tensor it returns replacing g."""
    for hook in list(t._hooks.values()):
        given = Tensor._wrap(g.copy(), t.device)
        replaced = hook(given)
        if replaced is not None and not isinstance(replaced, Tensor):
            raise TypeError(f"hook {getattr(hook, '__name__', hook)!r} returned a {type(replaced).__name__}, not a "
                            "tensor (or None)")
        if replaced is not None and (replaced.shape, replaced.dtype, replaced.device) != (g.shape, g.dtype, t.device):
            raise RuntimeError(f"hook {getattr(hook, '__name__', hook)!r} has changed the size or type of value "
                               f"(PyTorch's words): it returned {replaced.dtype} {replaced.shape} on "
                               f"{replaced.device} for a gradient {g.dtype} {g.shape} on {t.device}")
        g = given.data if replaced is None else replaced.data
    return g


def _leaf_gradients(root, grad, order):
    """(leaf, its gradient) pairs of a backward pass from `root` with gradient `grad` through `order`.
    A function of its own, so that no local variable of it still holds a gradient when the leaves get them."""
    grads, leaves = {id(root): grad}, []
    for t in reversed(order):
        g = grads.pop(id(t), None)
        if g is None:
            continue
        if '_hooks' in t.__dict__:   # (register_hook's)
            g = _hooked(t, g)
        ctx = t._ctx
        if ctx is None or t._retains_grad:   # (a non-leaf's, retain_grad() asked for, given as a leaf's is)
            leaves.append((t, g))
        if ctx is None:
            continue
        if not hasattr(ctx, 'inputs'):
            raise RuntimeError("trying to backward through the graph a second time: its saved values were "
                               "freed by the first backward(); pass retain_graph=True to keep them")
        for counter, version, which in ctx.versions:
            if counter[0] != version:
                raise _version_error(t, counter, version, which)
        in_grads = ctx.backward(g)
        for inp, needs, ig in zip(ctx.inputs, ctx.needs_grad, in_grads if isinstance(in_grads, tuple) else (in_grads,)):
            if needs and ig is not None:
                grads[id(inp)] = ig if id(inp) not in grads else grads[id(inp)] + ig
    return leaves


def _references_alone():
    """sys.getrefcount of a gradient that nothing but _backward's list of leaves holds, read as _backward reads
    it, of the base of a view that nothing but the view holds, and of an object's attribute that nothing else
    holds (a tensor's .data, read as _recorded_update reads it): larger counts mean that something else holds the
    array. Measured rather than assumed (3, 2 and 2 on CPython 3.11 and 3.12; an interpreter that borrows
    references counts fewer)."""
    view, holder = np.empty(2)[1:], types.SimpleNamespace(data=np.empty(1))
    for _, g in [(None, np.empty(1))]:
        return sys.getrefcount(g), sys.getrefcount(view.base), sys.getrefcount(holder.data)


_ALONE, _BASE_ALONE, _DATA_ALONE = _references_alone()


@np.errstate(all='ignore')   # as each op's forward (_quiet): inf and NaN gradients, silently as PyTorch's
def _backward(root, grad, retain_graph):
    order = _topological_order(root)
    leaves = _leaf_gradients(root, grad, order)   # every gradient before any leaf is touched: a failure changes nothing
    for t, g in leaves:
        if t.grad is None:
            continue
        if (t.grad.shape, t.grad.dtype, t.grad.device) != (g.shape, t.dtype, t.device):
            raise RuntimeError(f"a gradient of shape {g.shape} ({t.dtype}, {t.device}) cannot accumulate into .grad of "
                               f"shape {t.grad.shape} ({t.grad.dtype}, {t.grad.device}): the tensor's .data or its "
                               ".grad's .data was replaced after .grad was set; set .grad = None first")
        if _expanded(t.grad.data):   # (as PyTorch's in-place accumulation)
            raise RuntimeError(f"backward into .grad of shape {t.grad.shape}: {_unwritable(t.grad.data)}")
    for t, g in leaves:
        # as PyTorch, a gradient that nothing else holds becomes .grad itself: a writable array held by this loop
        # alone, owning its memory or a view of the whole of an array that only it holds, each element once (a
        # reshape or transpose of a fresh result). Any other is copied, so that gradients never alias each
        # other, a saved value or the caller's array. (A CuPy array made on another's memory without a base,
        # as cupy.ndarray(memptr=...) makes, looks free: a custom Function must not return one.)
        shared = sys.getrefcount(g) > _ALONE or _unwritable_memory(g) or g.base is not None and (
            not isinstance(g.base, type(g)) or g.base.base is not None or g.base.size != g.size or
            sys.getrefcount(g.base) > _BASE_ALONE or not _is_dense(g))
        if g.dtype != t.dtype or shared:
            g = g.astype(t.dtype)
        if t.grad is None:   # (not through the .grad setter's checks: g is the leaf's gradient, cast to its dtype)
            t._grad = Tensor._wrap(g, t.device)
        elif t._ctx is not None:   # a retained non-leaf's: a new tensor, as PyTorch's
            t._grad = Tensor._wrap(t.grad.data + g, t.device)
        elif _unwritable_memory(t.grad.data):   # (a read-only .grad that the caller set: np.load(mmap_mode='r'))
            t.grad.data = _xp(g).asarray(t.grad.data + g)
        else:   # a leaf's accumulates in place, as PyTorch's: views and arrays of .grad see the sum
            t.grad.data += g
            t.grad._version[0] += 1
    if not retain_graph:
        for t in order:
            if t._ctx is not None:
                t._ctx._release()


# ================================================================ primitive ops: unary

class Neg(Function):
    saves = ()

    def forward(self, x):
        return -x

    def backward(self, g):
        return -g


class Exp(Function):
    saves, saves_output = (), True

    def forward(self, x):
        self.out = _xp(x).exp(x)
        return self.out

    def backward(self, g):
        return g * self.out


class Log(Function):
    saves = (0,)

    def forward(self, x):
        self.x = x
        return _xp(x).log(x)

    def backward(self, g):
        return g / self.x


class Sqrt(Function):
    saves, saves_output = (), True

    def forward(self, x):
        self.out = _xp(x).sqrt(x)
        return self.out

    def backward(self, g):
        return g / (2 * self.out)


def _sign(a):
    """PyTorch's sign: 0 at NaN (NumPy's gives NaN) and at -0."""
    return (a > 0).astype(a.dtype) - (a < 0).astype(a.dtype)


class Abs(Function):
    saves = (0,)

    def forward(self, x):
        self.x = x
        return _xp(x).abs(x)

    def backward(self, g):   # (0 at NaN, as PyTorch's)
        return g * _sign(self.x)


# (Op where torch.nn's module takes the name: tl.Tanh, tl.Sigmoid, tl.Softmax, tl.LogSoftmax, tl.LayerNorm are modules)
class TanhOp(Function):
    saves, saves_output = (), True

    def forward(self, x):
        self.out = _xp(x).tanh(x)
        return self.out

    def backward(self, g):   # (float16 in float32, rounded once, as PyTorch's)
        ct = _opmath(g.dtype)
        out = self.out.astype(ct, copy=False)
        return (g.astype(ct, copy=False) * (1 - out * out)).astype(g.dtype, copy=False)


class SigmoidOp(Function):
    """1 / (1 + e^-x); float16 computed in float32 and rounded once (as PyTorch's)."""
    saves, saves_output = (), True

    def forward(self, x):
        xp, z = _xp(x), x.astype(_opmath(x.dtype), copy=False)
        e = xp.exp(-xp.abs(z))   # 1 / (1 + e^-x) without overflow, and e^x / (1 + e^x) for x < 0: the small values kept
        s = 1 / (1 + e)
        self.out = xp.where(z >= 0, s, e * s).astype(x.dtype, copy=False)
        return self.out

    def backward(self, g):   # (in float16 arithmetic for float16, as PyTorch's CPU kernel)
        return g * (1 - self.out) * self.out


class _Unary(Function):
    """y = f(x) elementwise and its gradient grad(g, x), NaN and inf where PyTorch gives them."""
    saves = (0,)

    def forward(self, x):
        self.x = x
        return self.f(x)

    def backward(self, g):
        return self.grad(g, self.x)


class Sin(_Unary):
    f, grad = lambda self, x: _xp(x).sin(x), lambda self, g, x: g * _xp(x).cos(x)


class Cos(_Unary):
    f, grad = lambda self, x: _xp(x).cos(x), lambda self, g, x: -g * _xp(x).sin(x)


class Log1p(_Unary):   # log(1 + x), exact where x is tiny (1 + x would round it away)
    f, grad = lambda self, x: _xp(x).log1p(x), lambda self, g, x: g / (1 + x)


class Expm1(_Unary):   # e^x - 1, exact where x is tiny; the derivative e^x from x (PyTorch's y + 1 is 0 beyond -37)
    f, grad = lambda self, x: _xp(x).expm1(x), lambda self, g, x: g * _xp(x).exp(x)


class Erf(_Unary):
    f = lambda self, x: _erf(x)
    grad = lambda self, g, x: g * (_xp(x).exp(-x * x) * x.dtype.type(2 / math.sqrt(math.pi)))


class Step(Function):
    """A piecewise-constant fn(x) (floor, ceil, round, trunc, sign): the gradient 0 everywhere, as PyTorch's."""
    saves = ()

    def forward(self, x, fn):
        return fn(x)

    def backward(self, g):
        return _xp(g).zeros_like(g)


class Clamp(Function):
    """x clamped to [low, high], as PyTorch's clamp: the bounds (inputs after x, `given` says which of low and high
    there are) broadcast with x, a NaN anywhere gives NaN, and where low > high the result is high. The gradient
    goes to x where low <= x <= high, to low where x < low < high, to high where x > high or high < low."""
    def forward(self, x, *bounds, given):
        self.x, (self.low, self.high) = x, _fill(bounds, given)
        out = x if self.low is None else _xp(x).maximum(x, self.low)
        return out if self.high is None else _xp(x).minimum(out, self.high)

    def backward(self, g):
        xp, x, low, high, zero = _xp(g), self.x, self.low, self.high, g.dtype.type(0)
        above, below = (x >= low) if low is not None else True, (x <= high) if high is not None else True
        grads = [xp.where(above & below, g, zero)]
        if low is not None:
            grads.append(xp.where((x < low) & (low < high) if high is not None else x < low, g, zero))
        if high is not None:
            grads.append(xp.where((x > high) | (high < low) if low is not None else x > high, g, zero))
        return tuple(_unbroadcast(d, a.shape) if needs else None
                     for d, a, needs in zip(grads, (x,) + tuple(b for b in (low, high) if b is not None), self.needs_grad))


class NanToNum(Function):
    """NaN, +inf and -inf replaced by nan, posinf and neginf (None: the dtype's largest finite values); the gradient
    g times whether x is finite, as PyTorch's (a NaN g stays NaN where x is not finite)."""
    saves = ()

    def forward(self, x, nan, posinf, neginf):
        self.finite = _xp(x).isfinite(x)
        return _xp(x).nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)

    def backward(self, g):
        return g * self.finite


class Cast(Function):
    saves = ()

    def forward(self, x, dtype):
        self.source = x.dtype
        return x.astype(dtype)

    def backward(self, g):
        return g.astype(self.source)


class ToDevice(Function):
    saves = ()

    def forward(self, x, device):
        self.source, self.target = _device_of(x), device
        return _move(x, device)

    def backward(self, g):
        return _move(g, self.source)

    def output_device(self, device):
        return self.target


# ================================================================ primitive ops: binary

class Add(Function):
    saves = ()

    def forward(self, a, b):
        self.shapes = a.shape, b.shape
        return a + b

    def backward(self, g):
        return (_unbroadcast(g, self.shapes[0]) if self.needs_grad[0] else None,
                _unbroadcast(g, self.shapes[1]) if self.needs_grad[1] else None)


class Sub(Function):
    saves = ()

    def forward(self, a, b):
        self.shapes = a.shape, b.shape
        return a - b

    def backward(self, g):
        return (_unbroadcast(g, self.shapes[0]) if self.needs_grad[0] else None,
                _unbroadcast(-g, self.shapes[1]) if self.needs_grad[1] else None)


class Mul(Function):
    saves = 'others'

    def forward(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, g):
        return (_unbroadcast(g * self.b, self.a.shape) if self.needs_grad[0] else None,
                _unbroadcast(g * self.a, self.b.shape) if self.needs_grad[1] else None)


class Div(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        self.saves = (0, 1) if self.needs_grad[1] else (1,)   # a's gradient reads b; b's reads both
        return a / b

    def backward(self, g):
        return (_unbroadcast(g / self.b, self.a.shape) if self.needs_grad[0] else None,   # b's: PyTorch's order
                _unbroadcast(-g * (self.a / self.b / self.b), self.b.shape) if self.needs_grad[1] else None)


def _power(a, exponent):
    """a ** exponent, a Python number, as PyTorch's float32 and float64: its exact forms where it has one (sqrt at 0.5,
    1 / sqrt at -0.5, products at 2, 3 and -2, 1 / a at -1: pow's result differs in the last bit, and pow(-0, -0.5)
    is inf where 1 / sqrt gives -inf), pow elsewhere and in float16 (as PyTorch's); at 1 a copy in every dtype, as
    PyTorch's (CuPy's float64 pow(x, 1) is off in the last bit: the gradient of x ** 2 reads it)."""
    xp = _xp(a)
    if exponent == 1:
        return a.copy()
    forms = {0.5: xp.sqrt, -0.5: lambda a: 1 / xp.sqrt(a), -1: lambda a: 1 / a, 2: lambda a: a * a,
             3: lambda a: a * a * a, -2: lambda a: 1 / (a * a)}
    if a.dtype in (np.float32, np.float64) and exponent in forms:
        return forms[exponent](a)
    return a ** a.dtype.type(exponent)


class Pow(Function):
    """a ** b; a number exponent (number, b holding it too) through _power, PyTorch's forms."""
    def forward(self, a, b, number=None):
        xp, self.a, self.b, self.number = _xp(a), a, b, number
        if a.dtype == np.bool_:   # (NumPy would give int8)
            raise TypeError("**: not defined for two bool operands (as in PyTorch)")
        if a.dtype.kind == 'i' and (b < 0).any():   # as PyTorch: 1 / a^|b| truncated (NumPy refuses negative powers)
            reciprocal = xp.where(a == 1, 1, xp.where(a == -1, 1 - 2 * (b % 2 != 0), 0))
            out = xp.where(b >= 0, a ** xp.where(b >= 0, b, 0), reciprocal).astype(a.dtype)
        elif number is not None and a.dtype.kind == 'f':
            out = _power(a, number)
        else:
            out = a ** b
        self.saves_output = self.needs_grad[1]   # the exponent's gradient reads the output (kept for it alone)
        self.out = out if self.saves_output else None
        return out

    def backward(self, g):
        # PyTorch's masks: none for a where b == 0 (b a^(b-1) at a == 0 would be 0 * inf), even where g is NaN; for
        # b, on the factor that multiplies g (a NaN g stays NaN) where a == 0 and b >= 0 (a^b log a: 0 * -inf or -inf)
        xp, zero, da, db = _xp(g), g.dtype.type(0), None, None
        if self.needs_grad[0]:   # PyTorch's order: g (b a^(b-1))
            if self.number is None:
                da = xp.where(self.b == 0, zero, g * (self.b * self.a ** (self.b - 1)))
            elif self.number == 0:
                da = xp.zeros_like(g)
            else:   # a number unrounded (float16: times it in float32), the power by _power's forms
                power = _power(self.a, self.number - 1)
                wide = _opmath(power.dtype)
                da = g * (power.astype(wide, copy=False) * wide.type(self.number)).astype(power.dtype, copy=False)
            da = _unbroadcast(da, self.a.shape)
        if self.needs_grad[1]:
            db = _unbroadcast(g * xp.where((self.a == 0) & (self.b >= 0), zero, self.out * xp.log(self.a)),
                              self.b.shape)
        return da, db


def _floor_divmod(a, b, floor):
    """a // b (floor) or a % b, as PyTorch's; floats in one form for both devices: CuPy's own take floor(a / b), one
    too many where a / b rounds up to a whole number (1 // 0.1: 10, not 9; 1 % 0.1: 0, not 0.1), and NumPy's % gives a
    zero remainder b's sign (PyTorch's keeps fmod's: -6. % 3. is -0.). The exact fmod(a, b) moved to b's sign where it
    is not 0, the quotient (a - fmod) / b snapped to the nearest whole number."""
    xp = _xp(a)
    if a.dtype.kind != 'f':
        return xp.floor_divide(a, b) if floor else xp.remainder(a, b)
    dtype = a.dtype
    a, b = a.astype(_opmath(dtype), copy=False), b.astype(_opmath(dtype), copy=False)   # float16 via float32
    mod = xp.fmod(a, b)   # (x % 0: NaN)
    moved = (mod != 0) & ((b < 0) != (mod < 0))   # fmod has a's sign; Python's remainder b's
    if not floor:
        out = xp.where(moved, mod + b, mod)
    else:
        quotient, ratio = (a - mod) / b - moved, a / b
        whole = xp.floor(quotient)
        whole += quotient - whole > 0.5
        whole = xp.where(quotient == 0, xp.copysign(0, ratio), whole)   # -0 where a and b differ in sign
        out = xp.where(b == 0, ratio, whole)   # (x // 0: inf, or NaN at 0)
    return out.astype(dtype, copy=False)


class Remainder(Function):
    """a - floor(a / b) b, with b's sign (Python's % and PyTorch's remainder), or (floor) floor(a / b), Python's //,
    whose backward PyTorch does not define."""
    def forward(self, a, b, floor=False):
        self.a, self.b, self.floor = a, b, floor
        self.saves = (0, 1) if self.needs_grad[1] else ()   # b's gradient reads both; a's neither (it is g)
        if a.dtype == np.bool_:
            raise TypeError(f"{'//' if floor else '%'}: not defined for bool tensors (as in PyTorch)")
        # (NumPy would give 0 and a warning; an empty result divides by nothing)
        if a.dtype.kind in 'iu' and math.prod(np.broadcast_shapes(a.shape, b.shape)) and (b == 0).any():
            raise RuntimeError(f"ZeroDivisionError: integer {'//' if floor else '%'} by zero (as in PyTorch)")
        return _floor_divmod(a, b, floor)

    def backward(self, g):
        if self.floor:
            raise RuntimeError("the derivative of floor_divide (//) is not implemented (as in PyTorch)")
        db = None
        if self.needs_grad[1]:
            db = _unbroadcast(-g * _floor_divmod(self.a, self.b, True), self.b.shape)
        return _unbroadcast(g, self.a.shape) if self.needs_grad[0] else None, db


class Maximum(Function):
    """Elementwise max (min where least); at ties each side gets half the gradient, at a NaN both all of it, as in
    PyTorch."""
    def forward(self, a, b, least=False):
        self.a, self.b, self.least = a, b, least
        return (_xp(a).minimum if least else _xp(a).maximum)(a, b)

    def backward(self, g):
        # as PyTorch's: each side all of g but where it loses (at a NaN neither does), half at ties; the loser's 0
        # selected, not multiplied in (an inf or NaN g stays where it belongs)
        xp, zero = _xp(g), g.dtype.type(0)
        a_loses, b_loses = (self.a > self.b, self.a < self.b) if self.least else (self.a < self.b, self.a > self.b)
        share = xp.where(self.a == self.b, g * g.dtype.type(0.5), g)
        return (_unbroadcast(xp.where(a_loses, zero, share), self.a.shape),
                _unbroadcast(xp.where(b_loses, zero, share), self.b.shape))


class Where(Function):
    saves = ()

    def forward(self, a, b, condition):
        self.condition, self.shapes = condition, (a.shape, b.shape)
        return _xp(condition).where(condition, a, b)

    def backward(self, g):
        zero = g.dtype.type(0)
        return (_unbroadcast(_xp(g).where(self.condition, g, zero), self.shapes[0]),
                _unbroadcast(_xp(g).where(self.condition, zero, g), self.shapes[1]))


class Lerp(Function):
    """start + weight (end - start), PyTorch's form: end + (weight - 1) (end - start) where |weight| >= 0.5. Its
    gradients are g (1 - weight), g weight and g (end - start), as PyTorch's (not through the selection, whose other
    side would give 0 * inf = NaN where an operand is infinite)."""
    def forward(self, start, end, weight):
        self.start, self.end, self.weight = start, end, weight
        self.saves = [2] * (self.needs_grad[0] or self.needs_grad[1]) + [0, 1] * self.needs_grad[2]
        span = end - start
        return _xp(start).where(abs(weight) < 0.5, start + weight * span, end + (weight - 1) * span)

    def backward(self, g):
        start, end, weight = self.start, self.end, self.weight
        return (_unbroadcast(g * (1 - weight), start.shape) if self.needs_grad[0] else None,
                _unbroadcast(g * weight, end.shape) if self.needs_grad[1] else None,
                _unbroadcast(g * (end - start), weight.shape) if self.needs_grad[2] else None)


class MatMul(Function):
    """np.matmul semantics: 1-D operands are promoted to matrices and the added axis dropped again; out_dtype: the
    result's (float32 keeps a float16 product unrounded), its gradient taken back to the operands' dtype."""
    saves = 'others'

    def forward(self, a, b, out_dtype=None):
        self.a, self.b = a, b
        return _matmul(a, b, out_dtype)

    def backward(self, g):
        xp, g = _xp(g), g.astype(self.a.dtype, copy=False)
        a = self.a[None, :] if self.a.ndim == 1 else self.a
        b = self.b[:, None] if self.b.ndim == 1 else self.b
        if self.b.ndim == 1:
            g = xp.expand_dims(g, -1)
        if self.a.ndim == 1:
            g = xp.expand_dims(g, -2)
        da = _product_to(g, xp.swapaxes(b, -1, -2), a.shape).reshape(self.a.shape) if self.needs_grad[0] else None
        db = _product_to(xp.swapaxes(a, -1, -2), g, b.shape).reshape(self.b.shape) if self.needs_grad[1] else None
        return da, db


def _product_to(x, y, shape):
    """x @ y summed down to `shape` (a broadcast operand's gradient), in x's dtype: float16 products summed in float32
    and rounded once, as PyTorch's (which folds the batch into one product)."""
    if np.broadcast_shapes(x.shape[:-2], y.shape[:-2]) + (x.shape[-2], y.shape[-1]) == shape:
        return _matmul(x, y)
    return _unbroadcast(_matmul(x, y, _opmath(x.dtype)), shape).astype(x.dtype, copy=False)


# Tensor._inplace's op -> the NumPy ufunc that updates in place where the dtypes allow (%=, //= and **= have none)
_INPLACE_UFUNCS = {operator.add: 'add', operator.sub: 'subtract', operator.mul: 'multiply', operator.truediv: 'divide'}


_LETTERS = ''.join(c for c in map(chr, range(65, 123)) if c.isalpha())   # einsum's subscripts: A-Z, a-z


def _einsum(equation, *arrays):
    """xp.einsum as a fresh array (NumPy's and CuPy's may return a view of an operand); NumPy's contraction order
    optimised (BLAS where it can), float16 computed in float32 and rounded once (NumPy's accumulates in float16)."""
    xp, half = _xp(arrays[0]), arrays[0].dtype == np.float16
    out = xp.asarray(xp.einsum(equation, *[a.astype(np.float32) for a in arrays] if half else arrays,
                               **({'optimize': True} if xp is np else {})))
    if half:
        return out.astype(np.float16)
    return out.copy() if any(_memory_owner(out) is _memory_owner(a) for a in arrays) else out


class Einsum(Function):
    """xp.einsum of operands whose subscripts are letters alone, each of one size everywhere (tl.einsum writes out
    ellipses and broadcast dims). Operand k's gradient is the einsum of g with the other operands into k's subscripts,
    where an identity matrix puts it on the diagonal of a repeated subscript and a ones vector spreads it along a
    subscript of k's alone."""
    def forward(self, *arrays, terms, output):
        self.terms, self.output, self.shapes = terms, output, [a.shape for a in arrays]
        self.saves = sorted({j for k, needs in enumerate(self.needs_grad) if needs for j in range(len(arrays)) if j != k})
        self.arrays = [a if j in self.saves else None for j, a in enumerate(arrays)]
        return _einsum(','.join(terms) + '->' + output, *arrays)

    def backward(self, g):
        xp, grads = _xp(g), []
        for k, (term, shape) in enumerate(zip(self.terms, self.shapes)):
            if not self.needs_grad[k]:
                grads.append(None)
                continue
            terms = [self.output] + [t for j, t in enumerate(self.terms) if j != k]
            arrays = [g] + [a for j, a in enumerate(self.arrays) if j != k]
            fresh, written = iter(c for c in _LETTERS if c not in ''.join(self.terms)), ''
            for c, n in zip(term, shape):
                if c in written:   # a repeated subscript: a new one, tied to it by an identity matrix
                    terms.append(c + next(fresh))
                    arrays.append(xp.eye(n, dtype=g.dtype))
                    c = terms[-1][1]
                elif term.count(c) == 1 and all(c not in t for t in terms):
                    terms.append(c)
                    arrays.append(xp.ones(n, g.dtype))
                written += c
            grads.append(_einsum(','.join(terms) + '->' + written, *arrays))
        return tuple(grads)


# ================================================================ primitive ops: reduce

class Sum(Function):
    """scale * sum over axes (mean and var use the scale)."""
    saves = ()

    def forward(self, x, axes, keepdim, scale=1):
        self.shape, self.axes, self.scale = x.shape, axes, scale
        return _sum(x, axes, keepdims=keepdim, scale=scale)

    def backward(self, g):
        kept = tuple(1 if i in self.axes else n for i, n in enumerate(self.shape))
        g = g.reshape(kept)
        if self.scale != 1:   # (float16 scaled in float32, rounded once, as PyTorch's)
            ct = _opmath(g.dtype)
            g = (g.astype(ct, copy=False) * ct.type(self.scale)).astype(g.dtype, copy=False)
        return _xp(g).broadcast_to(g, self.shape)


class Max(Function):
    """Max (min where least) over axes; ties share the gradient evenly (PyTorch's amax and amin), NaNs counting as
    tied maxima (a lone NaN takes the gradient, as in PyTorch's max() and min()); the rest get 0, selected (an inf or
    NaN gradient reaches the maxima alone, as PyTorch's max(); its amax multiplies by its mask)."""
    saves, saves_output = (0,), True

    def forward(self, x, axes, keepdim, least=False):
        if any(x.shape[a] == 0 for a in axes):
            raise ValueError(f"{'min' if least else 'max'} over axes {axes} of a tensor of shape {x.shape}: "
                             "a reduced axis is empty")
        self.x, self.axes = x, axes
        self.out = (x.min if least else x.max)(axis=axes, keepdims=True)
        return self.out if keepdim else self.out.reshape([n for i, n in enumerate(x.shape) if i not in axes])

    def backward(self, g):
        hit = self.x == self.out
        if self.x.dtype.kind == 'f':   # a NaN result: the NaNs take its gradient (NaN == NaN is False)
            hit |= _xp(hit).isnan(self.x) & _xp(hit).isnan(self.out)
        share = g.reshape(self.out.shape) / _sum(hit.astype(g.dtype), self.axes, keepdims=True)
        return _xp(g).where(hit, share, g.dtype.type(0))   # selected: an inf or NaN g reaches the hits alone


class Cumsum(Function):
    """Running sums along axis; the gradient is g's running sums taken from the far end."""
    saves = ()

    def forward(self, x, axis):
        self.axis = axis
        return _wide(x).cumsum(axis).astype(x.dtype, copy=False)

    def backward(self, g):
        reverse = (slice(None),) * self.axis + (slice(None, None, -1),)
        return _wide(g[reverse]).cumsum(self.axis).astype(g.dtype, copy=False)[reverse]


class Prod(Function):
    """The product over axes. Its gradient, the product of the other elements, as PyTorch's: out / x where x holds no
    zero; else exactly, from the products before and after each element along its slice (no division: a zero's is
    the product of the rest, an infinity beside a zero gets 0), and, for the product of all elements, 0 throughout
    where two or more are zero; a 0-d x's is 1, as PyTorch's (out / x would be NaN at inf)."""
    saves, saves_output = (0,), True

    def forward(self, x, axes, keepdim):
        self.x, self.axes = x, axes
        self.out = _wide(x).prod(axis=axes, keepdims=True)
        out = self.out.astype(x.dtype, copy=False)
        return out if keepdim else out.reshape([n for i, n in enumerate(x.shape) if i not in axes])

    def backward(self, g):
        x, xp = _wide(self.x), _xp(self.x)
        if not x.ndim:
            return xp.asarray(g).reshape(())
        if not x.size:
            return xp.zeros(x.shape, g.dtype)
        axes = list(self.axes)
        order = [i for i in range(x.ndim) if i not in axes] + axes   # the reduced axes last: a slice a row
        rows = x.transpose(order).reshape(-1, math.prod(x.shape[i] for i in axes))
        ones = xp.ones((len(rows), 1), x.dtype)
        before = xp.cumprod(xp.concatenate([ones, rows[:, :-1]], 1), 1)
        after = xp.cumprod(xp.concatenate([ones, rows[:, :0:-1]], 1), 1)[:, ::-1]
        exact = before * after
        if len(axes) == x.ndim:   # (PyTorch's product of all elements)
            exact = xp.where((rows == 0).sum() > 1, x.dtype.type(0), exact)
        exact = exact.reshape([x.shape[i] for i in order]).transpose(sorted(range(x.ndim), key=order.__getitem__))
        others = xp.where((x == 0).any(), exact, self.out / x)
        return (g.reshape(self.out.shape) * others).astype(g.dtype, copy=False)


# ================================================================ primitive ops: movement

class Reshape(Function):
    saves, may_view = (), True

    def forward(self, x, shape):
        self.shape = x.shape
        return x.reshape(shape)

    def backward(self, g):
        return g.reshape(self.shape)


class Permute(Function):
    saves, may_view = (), True

    def forward(self, x, dims):
        self.dims = dims
        return x.transpose(dims)

    def backward(self, g):
        return g.transpose(np.argsort(self.dims))


class Flip(Function):
    """x reversed along dims, a copy as PyTorch's; the gradient is g reversed along them. (Slices, not xp.flip: CuPy's
    refuses a 0-d array; the Ellipsis keeps NumPy's 0-d result an array.)"""
    saves = ()

    def forward(self, x, dims):
        self.index = tuple(slice(None, None, -1 if i in dims else 1) for i in range(x.ndim)) + (Ellipsis,)
        return x[self.index].copy()

    def backward(self, g):
        return g[self.index]


class Expand(Function):
    """A view of x with its size-1 axes repeated and axes added in front (stride 0): writable, as PyTorch's (NumPy's
    broadcast_to is read-only); in-place ops refuse it where elements share memory (Tensor._refuse_expanded)."""
    saves, may_view = (), True

    def forward(self, x, shape):
        self.shape = x.shape
        if _xp(x) is not np:   # CuPy's broadcast_to is writable, and its view keeps x as its base (its as_strided not)
            return cp.broadcast_to(x, shape)
        lead = len(shape) - x.ndim
        strides = (0,) * lead + tuple(s if n == m else 0 for s, n, m in zip(x.strides, x.shape, shape[lead:]))
        return np.lib.stride_tricks.as_strided(x, shape, strides)

    def backward(self, g):
        return _unbroadcast(g, self.shape)


def _index_array(items, xp):
    """A list index as an array (an empty list as an empty integer array, as PyTorch takes it)."""
    array = xp.asarray(items)
    return array.astype(np.int64) if array.size == 0 else array


def _is_select(i):
    """Whether index entry i is an integer (a Python or NumPy one, or a 0-d integer array or tensor)."""
    if isinstance(i, Tensor):
        i = i.data
    return (_is_int(i) or
            getattr(i, 'ndim', None) == 0 and i.dtype.kind in 'iu')


def _as_select(i):
    """Index entry i, or its int where it is a 0-d integer array or tensor: a select (NumPy and CuPy would index with
    the array as a copy; PyTorch gives a view)."""
    return int(i.data if isinstance(i, Tensor) else i) if _is_select(i) and not isinstance(i, (int, np.integer)) else i


def _index_dims(i):
    """The axes an array index entry i takes (a mask's ndim, 1 for integers), None for a basic entry."""
    a = i.data if isinstance(i, Tensor) else i
    if isinstance(a, (bool, np.bool_)):
        return 0   # a 0-d mask: adds an axis, takes none
    if getattr(a, 'ndim', 0) == 0 and getattr(a, 'dtype', None) != bool:
        return None
    return a.ndim if a.dtype == bool else 1


def _is_basic_index(index):
    return all(i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice)) for i in index)


def _check_gpu_index(shape, index):
    """NumPy's IndexError for an integer array in `index` (a step of Tensor._index_steps: no Ellipsis beside arrays)
    past its axis's ends, where CuPy wraps it around (x[[3]] of 3 elements is x[0] there): the first such index, none
    where the arrays broadcast to no element (as NumPy's). One read back; none inside a CUDA graph capture."""
    if cp.cuda.get_current_stream().is_capturing():
        return
    axis, arrays = 0, []
    for i in (index if isinstance(index, tuple) else (index,)):
        if i is not None:
            if isinstance(i, cp.ndarray) and i.dtype.kind in 'iu' and axis < len(shape):   # (too many: CuPy's error)
                arrays.append((i, shape[axis], axis))
            axis += 1 if _index_dims(i) is None else _index_dims(i)   # (an int or a slice takes one axis)
    try:
        if not arrays or 0 in np.broadcast_shapes(*(i.shape for i, _, _ in arrays)):
            return
    except ValueError:   # arrays of shapes that do not broadcast: CuPy's indexing says so
        return
    outside = [((i >= n) | (i < -n) if i.dtype.kind == 'i' else i >= n).ravel() for i, n, _ in arrays]
    if bool(cp.stack([o.any() for o in outside]).any()):
        (i, n, a), o = next(((i, n, a), o) for (i, n, a), o in zip(arrays, outside) if bool(o.any()))
        raise IndexError(f"index {int(i.ravel()[int(o.argmax())])} is out of bounds for axis {a} with size {n}")


_INDEX_INPUT = object()   # in GetItem's index: the place of the next input after x (an index tensor's array)


class GetItem(Function):
    """x[index]; the gradient scatter-adds back, so repeated integer indices accumulate. Index tensors come as
    inputs after x (their places in `index` marked _INDEX_INPUT), so that changing one in place is caught."""
    may_view = True

    def forward(self, x, *index_arrays, index):
        arrays = iter(index_arrays)
        index = tuple(next(arrays) if i is _INDEX_INPUT else i for i in index)
        self.shape, self.dtype, self.index = x.shape, x.dtype, index
        self.saves = tuple(range(1, 1 + len(index_arrays)))   # backward scatters through the index arrays
        if _xp(x) is not np:
            _check_gpu_index(x.shape, index)
        out = x[index]   # NumPy gives a scalar (a copy) where integers select one element: a 0-d view, as PyTorch's
        if not isinstance(out, type(x)):
            return x[(index if isinstance(index, tuple) else (index,)) + (Ellipsis,)]
        # an advanced index's copy made row-major, as PyTorch's (NumPy may order it otherwise: x[:, [2, 0]] was not
        # viewable as one axis)
        return out if _is_basic_index(index) else _xp(x).ascontiguousarray(out)

    def backward(self, g):
        xp = _xp(g)
        grad = xp.zeros(self.shape, self.dtype)
        if _is_basic_index(self.index):
            grad[self.index] = g
        else:
            _index_add(grad, self.index, g)
        return (grad,) + (None,) * (len(self.inputs) - 1)   # none for the index tensors


def _index_add(a, index, values):
    """a[index] += values in place, repeated indices adding up (np.add.at; on the GPU cupyx.scatter_add, whose atomics
    take floats, int32 and unsigned ints: other integers and bools add as uint64, whose wrapping sum has the bits of
    int64's)."""
    if _xp(a) is np:
        np.add.at(a, index, values)
    elif a.dtype.char in 'efdiILQ':
        cupyx.scatter_add(a, index, values)
    else:
        wide = a.astype(np.int64).view(np.uint64)
        cupyx.scatter_add(wide, index, cp.asarray(values).astype(np.int64).view(np.uint64))
        a[...] = wide.view(np.int64).astype(a.dtype)


def _along(axis, index, xp=np):
    """NumPy's take_along_axis / put_along_axis index: `index` (an array or a tensor) on axis and, on every other axis,
    the positions of index's own shape (index may be smaller than the indexed tensor there, as PyTorch's gather's)."""
    grids = [xp.arange(n).reshape([-1 if k == i else 1 for k in range(index.ndim)]) for i, n in enumerate(index.shape)]
    grids[axis] = index
    return tuple(grids)


class IndexPut(Function):
    """x with values (broadcast) written at index (a tuple of index arrays, copies), or added there where accumulate
    (repeated indices adding up), out of place: PyTorch's index_put, the primitive of scatter and scatter_add. x's
    gradient is g (accumulate) or g with the written elements zeroed; values' is g at index, GetItem's forward (gather
    and scatter_add are adjoint: GetItem's backward is this forward)."""
    saves = ()   # backward reads only the index

    def forward(self, x, values, index, accumulate):
        self.index, self.accumulate, self.shape = index, accumulate, values.shape
        out = x.copy()
        if accumulate:
            _index_add(out, index, values)
        else:
            out[index] = values
        return out

    def backward(self, g):
        dx = None
        if self.needs_grad[0]:
            dx = g if self.accumulate else g.copy()
            if not self.accumulate:
                dx[self.index] = 0
        return dx, _unbroadcast(g[self.index], self.shape) if self.needs_grad[1] else None


class Pad(Function):
    """Constant padding with PyTorch's order: (left, right) of the last axis, then of the one before, ..."""
    saves = ()

    def forward(self, x, pad, value):
        widths = [(0, 0)] * (x.ndim - len(pad) // 2) + [tuple(pad[i:i + 2]) for i in range(len(pad) - 2, -1, -2)]
        # a negative width crops (as torch.nn.functional.pad): x's kept part, then `value` around it
        self.shape = x.shape
        self.kept = tuple(slice(-min(lo, 0), n + min(hi, 0)) for (lo, hi), n in zip(widths, x.shape))
        self.window = tuple(slice(max(lo, 0), max(lo, 0) + k.stop - k.start) for (lo, _), k in zip(widths, self.kept))
        return _xp(x).pad(x[self.kept], [(max(lo, 0), max(hi, 0)) for lo, hi in widths], constant_values=value)

    def backward(self, g):
        if all(k.stop - k.start == n for k, n in zip(self.kept, self.shape)):
            return g[self.window]
        dx = _xp(g).zeros(self.shape, g.dtype)
        dx[self.kept] = g[self.window]
        return dx


class Cat(Function):
    saves = ()

    def forward(self, *xs, axis):
        self.axis, self.sizes = axis, [x.shape[axis] for x in xs]
        if len(xs) == 1:
            return _fresh_copy(xs[0])
        out = _xp(xs[0]).concatenate(xs, axis=axis)
        # NumPy follows its inputs' order: made row-major (channels-last kept), as PyTorch's
        return out if out.flags.c_contiguous or _channels_last(out) else _xp(out).ascontiguousarray(out)

    def backward(self, g):
        edges = np.cumsum(self.sizes)[:-1].tolist()
        return tuple(_xp(g).split(g, edges, axis=self.axis))


def _fresh_copy(x):
    """A copy of x in the layout Cat gives: on the GPU a C-contiguous one as one memcpy (host time on an H100's host:
    11-13 us; CuPy's copy() 18-23, concatenate 28)."""
    if _xp(x) is not np and x.flags.c_contiguous:
        out = cp.empty(x.shape, x.dtype)
        out.data.copy_from_device_async(x.data, x.nbytes)   # (on the current stream)
        return out
    return x.copy(order='K' if _channels_last(x) else 'C')


class LastSteps(Function):
    """The last step of each of the sequences xs (T_i, ...), stacked (len(xs), ...) in memory of its own: a GRU's
    h_n, one op where x[-1:] and cat were two (an op's host time is a few microseconds)."""
    saves = ()

    def forward(self, *xs):
        self.shapes = [x.shape for x in xs]
        return _fresh_copy(xs[0][-1:]) if len(xs) == 1 else _xp(xs[0]).stack([x[-1] for x in xs])

    def backward(self, g):
        grads = [_xp(g).zeros(shape, g.dtype) for shape in self.shapes]
        for grad, last in zip(grads, g):
            grad[-1] = last
        return tuple(grads)


class Clone(Function):
    saves = ()

    def forward(self, x):
        return x.copy()

    def backward(self, g):
        return g


def _written(a, steps):
    """The view of `a` that the last of the index `steps` (Tensor._index_steps) indexes: the earlier steps are selects,
    views."""
    for step in steps[:-1]:
        a = a[step]
    return a


class SetItem(Function):
    """x with value (broadcast) written at the index `steps` select one after another (Tensor._index_steps, as
    arrays), in x's memory: item assignment that autograd records (Tensor._recorded_update: nothing else reads that
    memory). x's gradient is g with the written elements zeroed; value's is g at the written elements, summed down to
    value's shape."""
    saves = ()   # backward reads only the index, copied here

    def forward(self, x, value, steps):
        self.steps, self.value_shape, self.value_dtype = steps, value.shape, value.dtype
        _written(x, steps)[steps[-1]] = _unaliased(value.astype(x.dtype, copy=False), x)
        return x

    def backward(self, g):
        g = _xp(g).asarray(g)   # NumPy gives a 0-d result as a scalar
        dx = g.copy() if self.needs_grad[0] else None
        if dx is not None:
            _written(dx, self.steps)[self.steps[-1]] = 0
        dvalue = None
        if self.needs_grad[1]:   # the written elements' gradients
            dvalue = _unbroadcast(_written(g, self.steps)[self.steps[-1]], self.value_shape).astype(self.value_dtype)
        return dx, dvalue


# ================================================================ fused ops
# Each op's formula is written once with xp (NumPy or CuPy); where kernels.cu has a kernel for the
# dtype, the GPU calls it instead of the composed CuPy code. On the GPU, convolutions return
# NCHW-shaped arrays in channels-last memory (PyTorch's channels_last), which the next conv, pool,
# BatchNorm and elementwise kernel read without a copy.

def _channels_last(x):
    return x.ndim == 4 and _strides_in_order(x.shape, x.strides, x.itemsize, (0, 2, 3, 1))


def _strides_in_order(shape, strides, itemsize, axes):
    """Whether the axes of this shape and strides, taken in the order `axes`, are C-contiguous (as NumPy's flags:
    the strides of axes of length 1 do not count): (0, 2, 3, 1) asks for channels-last memory."""
    expect = itemsize
    for axis in reversed(axes):
        if shape[axis] != 1 and strides[axis] != expect:
            return False
        expect *= shape[axis]
    return True


def _nhwc(x):
    """The C-contiguous (N, H, W, C) array of NCHW-shaped x: a view of channels-last x, else one
    transpose (a kernel on the GPU)."""
    xh = x.transpose(0, 2, 3, 1)
    if xh.flags.c_contiguous:
        return xh
    kernel = _fused(x, 'batch_transpose', x.dtype) if x.flags.c_contiguous and x.shape[0] <= 65535 else None
    if kernel is None:
        return _xp(x).ascontiguousarray(xh)
    n, c, h, w = x.shape
    out = cp.empty(xh.shape, x.dtype)
    kernel((-(-h * w // 32), -(-c // 32), n), (32, 8, 1), (x, out) + _int32s(c, h * w))
    return out


def _dense(a):
    return a if _is_dense(a) else cp.ascontiguousarray(a)


def _in_layout_of(a, ref):
    """a's values in ref's memory layout (ref dense), so the two can be walked as one flat buffer."""
    if a.strides == tuple(s // ref.itemsize * a.itemsize for s in ref.strides):
        return a
    out = cp.empty_like(ref, dtype=a.dtype)
    out[...] = a
    return out


def _width(dtype, n, *arrays):
    """Elements per 16-byte pack where a row of n elements (0: flat data) and every pointer allow, else 1."""
    v = 16 // np.dtype(dtype).itemsize
    return v if n % v == 0 and all(a.data.ptr % 16 == 0 for a in arrays) else 1


class Relu(Function):
    saves, saves_output = (), True

    def forward(self, x):
        kernel = _fused(x, 'relu_fwd', x.dtype)
        if kernel is None:
            self.out = _relu(x)
        else:
            x = _dense(x)
            self.out = cp.empty_like(x)
            _launch_flat(kernel, x.size, 16 // x.itemsize, (x, self.out) + _int64s(x.size))
        return self.out

    def backward(self, g):
        kernel = _fused(g, 'relu_bwd', g.dtype, self.out.dtype)
        if kernel is None:
            return _relu_grad(self.out, g)
        g = _in_layout_of(g, self.out)
        dx = cp.empty_like(g)
        _launch_flat(kernel, g.size, 16 // min(g.itemsize, self.out.itemsize), (self.out, g, dx) + _int64s(g.size))
        return dx


def _relu(x):
    return _xp(x).where(x < 0, x.dtype.type(0), x)   # NaN stays NaN, as in PyTorch


def _relu_grad(out, g):
    """One select with PyTorch's threshold rule: an inactive unit gets 0 even where g is NaN."""
    return _xp(g).where(out <= 0, g.dtype.type(0), g)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


class Gelu(Function):
    """x * Phi(x) (approximate='none') or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ('tanh')."""
    saves = (0,)

    def forward(self, x, approximate):
        self.tanh = int(approximate == 'tanh')
        if _xp(x) is not np:
            x = _dense(x)
            width = _width(x.dtype, 0, x)
            kernel = _kernel('gelu_fwd', x.dtype, width, self.tanh)
            if kernel is not None:
                self.x, y = x, cp.empty_like(x)
                _launch_flat(kernel, x.size // width + 1, 1, (x, y) + _int64s(x.size))
                return y
        self.x, z = x, x.astype(_opmath(x.dtype), copy=False)   # float16 in float32, rounded once (as PyTorch)
        return _gelu(z, self.tanh).astype(x.dtype, copy=False)

    def backward(self, g):
        x = self.x
        if _xp(g) is not np:
            g = _in_layout_of(g.astype(x.dtype, copy=False), x)
            width = _width(x.dtype, 0, x, g)
            kernel = _kernel('gelu_bwd', x.dtype, width, self.tanh)
            if kernel is not None:
                dx = cp.empty_like(x)
                _launch_flat(kernel, x.size // width + 1, 1, (x, g, dx) + _int64s(x.size))
                return dx
        z, dy = x.astype(_opmath(x.dtype), copy=False), g.astype(_opmath(x.dtype), copy=False)
        return _gelu_grad(z, dy, self.tanh).astype(g.dtype, copy=False)


def _gelu(z, tanh=False):
    if tanh:
        return 0.5 * z * (1 + _xp(z).tanh(_SQRT_2_OVER_PI * (z + 0.044715 * z * z * z)))
    return z * _normal_cdf(z)


def _gelu_grad(z, g, tanh=False):
    """g times GELU's derivative at z: Phi(z) + z phi(z), or the tanh form's."""
    if tanh:
        t = _xp(z).tanh(_SQRT_2_OVER_PI * (z + 0.044715 * z * z * z))
        return g * (0.5 * (1 + t) + 0.5 * z * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * z * z))
    return g * (_normal_cdf(z) + z * _normal_pdf(z))


def _normal_cdf(x):
    return 0.5 * (1 + _erf(x * x.dtype.type(1 / math.sqrt(2))))


def _normal_pdf(x):
    return _xp(x).exp(-0.5 * x * x) * x.dtype.type(1 / math.sqrt(2 * math.pi))


class BatchNorm(Function):
    """y = act((x - mean) / sqrt(var + eps) * weight + bias) per channel (axis 1), act None, 'relu' or
    'gelu'. Training uses the batch's statistics (biased variance) and updates the running ones in
    place (unbiased variance). x is handled as (N, C, S), S the product of the trailing axes."""
    def forward(self, x, weight, bias, running_mean, running_var, training, momentum, eps, act):
        self.x, self.weight, self.bias, self.training, self.act = x, weight, bias, training, act
        self.saves = (0, 1, 2) if act else (0, 1)   # the bias only to recompute the activation's input
        if x.size == 0:   # as PyTorch: an empty y, the running statistics unchanged, zero gradients for weight and bias
            self.stats = None
            return _xp(x).empty_like(x)
        self.fused = _fused(x, 'bn_fwd_stats', x.dtype) is not None
        y, self.stats = (_bn_forward_fused if self.fused else _bn_forward)(
            x, weight, bias, running_mean, running_var, training, momentum, eps, act)
        return y

    def backward(self, g):
        if self.stats is None:
            return tuple(_xp(g).zeros_like(a) for a in (self.x, self.weight, self.bias))
        dx, dweight, dbias = (_bn_backward_fused if self.fused else _bn_backward)(
            self.x, self.stats, self.weight, self.bias, g.astype(self.x.dtype, copy=False), self.training, self.act)
        return dx, dweight.astype(self.weight.dtype, copy=False), dbias.astype(self.bias.dtype, copy=False)


def _activation(z, act):
    return _relu(z) if act == 'relu' else _gelu(z) if act == 'gelu' else z


def _activation_grad(z, g, act):
    return _relu_grad(z, g) if act == 'relu' else _gelu_grad(z, g) if act == 'gelu' else g


_BN_CPU_BLOCK_BYTES = 1 << 20   # a block of the composed BatchNorm on the CPU: images of about 1 MB in float32


def _bn_blocks(x3, fn):
    """[fn(images) for slices `images` of the (N, C, S) array x3]: on the CPU blocks of about 1 MB on _cpu_parallel's
    threads, so that every temporary stays in cache (whole-tensor temporaries cost a pass over memory each, and
    their page faults); on the GPU one block. The results come in order of the images: their sums do not depend
    on the thread count."""
    n = x3.shape[0]
    if _xp(x3) is not np:
        return [fn(slice(0, n))]
    step = max(1, _BN_CPU_BLOCK_BYTES // max(1, x3.shape[1] * x3.shape[2] * 4))
    blocks = [slice(i, i + step) for i in range(0, n, step)]
    return [r for part in _cpu_parallel(lambda part: [fn(images) for images in part], blocks) for r in part]


def _bn_forward(x, weight, bias, running_mean, running_var, training, momentum, eps, act):
    xp, (n, c), a = _xp(x), x.shape[:2], _acc_dtype(x.dtype)
    x3 = x.reshape(n, c, -1)
    if training:
        def moments(images):   # a block's count, mean and sum of squared deviations
            xb = x3[images].astype(a, copy=False)
            mb = xb.mean(axis=(0, 2))
            d = xb - mb[:, None]
            return xb.shape[0] * xb.shape[2], mb, xp.einsum('ncs,ncs->c', d, d)
        parts = _bn_blocks(x3, moments)
        count = sum(p[0] for p in parts)
        mean = sum(p[0] * p[1] for p in parts) / count
        # the blocks' moments combined exactly: M2 = sum of (M2_b + n_b (mean_b - mean)^2)
        var = sum(p[2] + p[0] * (p[1] - mean) ** 2 for p in parts) / count
        if running_mean is not None:
            running_mean[...] = (1 - momentum) * running_mean + momentum * mean
            running_var[...] = (1 - momentum) * running_var + momentum * var * (count / max(count - 1, 1))
    else:
        mean, var = running_mean.astype(a), running_var.astype(a)
    invstd = 1 / xp.sqrt(var + eps)
    scale = invstd * weight.astype(a)
    shift = bias.astype(a) - mean * scale
    y = xp.empty_like(x3, x.dtype)   # x's memory layout (channels-last stays so)

    def apply(images):
        z = x3[images] * scale[:, None]
        z += shift[:, None]
        y[images] = _activation(z, act)
    _bn_blocks(x3, apply)
    return y.reshape(x.shape), (mean, invstd)


def _bn_backward(x, stats, weight, bias, g, training, act):
    (mean, invstd), xp, (n, c) = stats, _xp(x), x.shape[:2]
    a = mean.dtype
    x3, g3, w, b = x.reshape(n, c, -1), g.reshape(n, c, -1), weight.astype(a), bias.astype(a)
    scale = w * invstd

    def normalized(images):   # a block's x-hat (a fresh array) and the gradient reaching it
        xhat = x3[images].astype(a)
        xhat -= mean[:, None]
        xhat *= invstd[:, None]
        gb = g3[images].astype(a, copy=False)
        if act is not None:   # the activation's derivative, at the pre-activation recomputed from x
            gb = _activation_grad(xhat * w[:, None] + b[:, None], gb, act)
        return xhat, gb

    def sums(images):
        xhat, gb = normalized(images)
        return gb.sum(axis=(0, 2)), xp.einsum('ncs,ncs->c', gb, xhat)
    parts = _bn_blocks(x3, sums)
    sum_g, sum_g_xhat = (sum((p[k] for p in parts), xp.zeros(c, a)) for k in (0, 1))
    m, dx = x3.size // c, xp.empty_like(x3, x.dtype)

    def grad(images):
        xhat, gb = normalized(images)
        if training:   # dx = scale (g - (sum_g + xhat sum_g_xhat) / M)
            xhat *= (-sum_g_xhat / m)[:, None]
            xhat += gb
            xhat -= (sum_g / m)[:, None]
            gb = xhat
        xp.multiply(gb, scale[:, None], out=dx[images])
    _bn_blocks(x3, grad)
    return dx.reshape(x.shape), sum_g_xhat, sum_g


# The fused path: kernels.cu's BatchNorm section explains the (group, chunk) grid of these kernels.
_scratch = {}   # GPU index -> (partial sums, ticket counters) of kernels.cu's reductions; outgrown ones in _retired
_retired = []


def _reduction_scratch(groups, partial_bytes):
    """(partials, tickets) on the current GPU for a reduction of kernels.cu: at least partial_bytes for its blocks'
    partial sums (any dtype: kernels take the pointer) and `groups` int32 counters in which it counts its finished
    blocks, each zero between kernels (a reduction's last block re-arms its own). Made once and shared by every
    reduction: one stream runs them one after another (as for the counters, two streams running reductions at once
    would race). An outgrown pair is kept, never freed: a captured CUDA graph may still use it. Made by the first
    reduction, which a warm-up runs before any capture (a capture would record the counters' zeroing, not run it).
    BatchNorm's fused training passes take two counters per channel: their first call with more than 512 channels
    grows the pair (so it too belongs before a capture). A counter left nonzero (two streams at once) would hang
    them: their blocks wait on it."""
    device = cp.cuda.runtime.getDevice()
    partials, tickets = _scratch.get(device, (None, None))
    if partials is None or partials.nbytes < partial_bytes or tickets.size < groups:
        if partials is not None:
            _retired.append((partials, tickets))
            partial_bytes, groups = max(partial_bytes, partials.nbytes), max(groups, tickets.size)
        partials, tickets = cp.empty(max(partial_bytes, 1 << 20), np.uint8), cp.zeros(max(groups, 1024), np.int32)
        _scratch[device] = partials, tickets
    return partials, tickets


@functools.lru_cache(maxsize=4096)
def _bn_layout(shape, strides, itemsize):
    """(rows, channels_last) for an x of this shape and strides: rows, the (N, C, S) shape the kernels read an array
    shaped like x as ((N, C, H*W) for NCHW memory, (N*H*W, C, 1) for channels-last memory); channels_last, whether
    it is the latter (arrays in any other layout are copied to NCHW)."""
    n, c, spatial = shape[0], shape[1], math.prod(shape[2:])
    nhwc = len(shape) == 4 and _strides_in_order(shape, strides, itemsize, (0, 2, 3, 1))
    channels_last = nhwc and not _strides_in_order(shape, strides, itemsize, (0, 1, 2, 3))
    return ((n * spatial, c, 1) if channels_last else (n, c, spatial)), channels_last


def _bn_dense(a, channels_last):
    """a's memory in the layout the kernels read for x (a itself where it is so: the kernels take its pointer)."""
    return _nhwc(a) if channels_last else cp.ascontiguousarray(a)


def _bn_empty(shape, dtype, channels_last):
    if channels_last:
        return cp.empty((shape[0], shape[2], shape[3], shape[1]), dtype).transpose(0, 3, 1, 2)
    return cp.empty(shape, dtype)


@functools.lru_cache(maxsize=4096)
def _bn_config(name, template, shape, dtype, packed_rows, reduces, follows, device):
    """(kernel, blocks, groups, partial pairs per block, the kernel's trailing size arguments N, C, S, chunks,
    channels per group and split) of BatchNorm kernel name<dtype, *template> over (N, C, S) arrays on the current
    GPU (`device`, its index, keys the cache), made once per case (a training step asks the same each time): each
    channel (or group of 32 // S channels when S < 32) cut into chunks of at least 4 units of work per thread; where
    packed_rows allows (S == 1 with 16-byte aligned arrays) and C fits one block's packs, kernels.cu's rows mode
    (per_group -1): tiles of channels times chunks of rows for two blocks per SM. Otherwise a reduction runs one
    wave of resident blocks, so that its partials stay few (on the H200, 2 and 4 waves made the float32 statistics
    6% and 29% slower), and an elementwise kernel as many blocks as give each thread one round of 4 units (on the
    H200, NCHW float32: the forward apply took 50 us in one wave of looping blocks, 64% of the copy rate; rows mode
    ran 10% slower so), in segment mode after the reduction `follows` ((name, template)) as parts of its chunks
    (kernels.cu's bn_block). On the H200 at 256x64x32x32, CUDA-graph replays of the fwd+bwd with dx so: 2-4% faster
    in float32 and float16, and with ReLU in float16; 3% slower with ReLU in float32. The forward apply so gained
    nothing (0-2% slower), and runs its own chunks."""
    kernel = _kernel(name, dtype, *template)
    (n, c, s), itemsize, split = shape, dtype.itemsize, 1
    packed_rows = packed_rows and c * itemsize // 16 <= _BLOCK
    resident = _resident_blocks(kernel) if reduces else 2 ** 31 - 1
    if packed_rows:   # tiles of up to 8 packs of channels, each a group
        packs = c * itemsize // 16
        tile = min(packs, 8)
        groups, per_group, partials = -(-packs // tile), -1, tile * 16 // itemsize   # a tile's channels
        chunks = max(1, min(2 * _multiprocessors() // groups, n // (4 * (_BLOCK // tile))))
    elif s < 32:
        per_group, partials = 32 // s, 32   # one per lane
        groups = -(-c // per_group)
        chunks = max(1, min(resident // groups, n // (4 * _BLOCK // 32)))
    else:
        per_group, groups, width, partials = 0, c, 16 // itemsize, 1
        units = n * (s // width if s % width == 0 else s)
        chunks = max(1, min(resident // groups, units // (4 * _BLOCK)))
        if follows is not None:
            blocks, reduced_groups = _bn_config(*follows, shape, dtype, False, True, None, device)[1:3]
            split = -(-chunks * reduced_groups // blocks)   # no fewer chunks: a 5th unit per thread cost more
            chunks = blocks // reduced_groups * split
    sizes = _int32s(n, c) + _int64s(s) + _int32s(chunks, per_group, split)
    return kernel, groups * chunks, groups, partials, sizes


def _bn_launch(name, rows, dtype, args, template, scratch_at=None, follows=None):
    """Launch BatchNorm kernel name<dtype, *template> over arrays read as the (N, C, S) shape `rows` with `args`,
    then the sizes and grid. A reduction gets its partial sums and ticket counters inserted at args[scratch_at]; an
    elementwise pass right after the reduction `follows` ((name, template)) reads first what that one read last."""
    n, c, s = rows
    packed_rows = s == 1 and _width(dtype, c, *[a for a in args
                                                if isinstance(a, cp.ndarray) and a.size == n * c * s]) > 1
    kernel, blocks, groups, per_block, sizes = _bn_config(name, template, rows, dtype, packed_rows,
                                                          scratch_at is not None, follows, cp.cuda.runtime.getDevice())
    if scratch_at is not None:
        scratch = _reduction_scratch(groups, blocks * per_block * 2 * _acc_dtype(dtype).itemsize)
        args = args[:scratch_at] + scratch + args[scratch_at:]
    kernel((blocks,), (_BLOCK,), args + sizes)


@functools.lru_cache(maxsize=4096)
def _bn_train_config(name, dtype, act, shape, device):
    """(kernel, blocks, dynamic shared memory bytes, sizes N, C, S, chunks, su as arguments, chunks, su) of the fused
    training pass name<dtype, act, RC> (kernels.cu's bn_fwd_train / bn_bwd_train) over (N, C, S) arrays in 16-byte
    packs on the current GPU (`device` keys the cache), None without the kernel. As many blocks an SM as its
    registers allow, all resident (a cooperative launch), each with an equal share of the SM's shared memory for the
    packs it keeps; each channel cut into chunks of at least 4 packs a thread, fewer where the channels would need
    more blocks than are resident (one chunk each where there are more channels than blocks: groups of blocks take
    several channels one after another)."""
    rc = _BN_KEPT_REGS[name].get(_C_TYPES[dtype])
    kernel = None if rc is None else _kernel(name, dtype, _ACTIVATIONS[act], rc)
    if kernel is None or not cp.cuda.Device(device).attributes['CooperativeLaunch']:
        return None
    props = cp.cuda.runtime.getDeviceProperties(device)
    (n, c, s), width = shape, 16 // dtype.itemsize
    occupancy = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor
    per_sm = occupancy(kernel.kernel.ptr, _BLOCK, 0)
    if per_sm < 1:
        return None
    pack = 16 * (2 if name == 'bn_bwd_train' else 1)   # bytes a thread keeps per unit (x, and dy backward)
    free = min(props['sharedMemPerMultiprocessor'] // per_sm - props['reservedSharedMemPerBlock'],
               props['sharedMemPerBlockOptin']) - kernel.shared_size_bytes
    units, resident = n * (s // width), per_sm * _multiprocessors()   # packs per channel
    chunks = max(1, min(resident // c, units // (4 * _BLOCK)))
    su = max(0, min(free // (pack * _BLOCK), -(-units // (chunks * _BLOCK)) - rc))
    smem = su * pack * _BLOCK
    if occupancy(_allow_smem(kernel, smem).kernel.ptr, _BLOCK, smem) < per_sm:   # all resident, or no launch
        return None
    return kernel, min(c, resident // chunks) * chunks, smem, _int32s(n, c) + _int64s(s) + _int32s(chunks, su), chunks, su


def _bn_train_pass(name, rows, dtype, act, args, scratch_at, packed):
    """Launch fused training pass `name` over arrays read as the (N, C, S) shape `rows`, their 16-byte packs
    `packed` (pointers included), with args (the reduction scratch inserted at args[scratch_at]). False where the
    pass does not run so (channels-last or S < 32, no packs, no kernel): the caller launches its two kernels."""
    n, c, s = rows
    if s < 32 or _width(dtype, s, *packed) == 1 or s >= 2 ** 31:   # kernels.cu's Walk counts packs in int
        return False
    config = _bn_train_config(name, dtype, act, rows, cp.cuda.runtime.getDevice())
    if config is None:
        return False
    kernel, blocks, smem, sizes, chunks = config[:5]
    scratch = _reduction_scratch(2 * c, c * chunks * 2 * _acc_dtype(dtype).itemsize)   # a pair per channel's chunk
    kernel((blocks,), (_BLOCK,), args[:scratch_at] + scratch + args[scratch_at:] + sizes, shared_mem=smem)
    return True


def _bn_forward_fused(x, weight, bias, running_mean, running_var, training, momentum, eps, act):
    """y and stats = [mean | invstd] ((2, C)) as the BatchNorm kernels read them."""
    c, a = x.shape[1], _acc_dtype(x.dtype)
    rows, channels_last = _bn_layout(x.shape, x.strides, x.itemsize)
    xd, y = _bn_dense(x, channels_last), _bn_empty(x.shape, x.dtype, channels_last)
    w, b = cp.ascontiguousarray(weight, a), cp.ascontiguousarray(bias, a)
    own = lambda t: None if t is None else cp.ascontiguousarray(t, a)
    rm, rv = own(running_mean), own(running_var)
    stats = cp.empty((2, c), a)
    if training:
        fused = _bn_train_pass('bn_fwd_train', rows, x.dtype, act, (xd, y, stats, rm, rv, w, b)
                               + _scalars(np.float64, float(momentum), float(eps)), 2, (xd, y))
        if not fused:
            _bn_launch('bn_fwd_stats', rows, x.dtype,
                       (xd, stats, rm, rv) + _scalars(np.float64, float(momentum), float(eps)), (), scratch_at=1)
        for given, used in ((running_mean, rm), (running_var, rv)):
            if used is not given:   # the buffers were of another dtype: copy the update back
                given[...] = used
        if fused:
            return y, stats
        rm = rv = None   # the apply kernel reads the batch's statistics
    _bn_launch('bn_fwd_apply', rows, x.dtype, (xd, y, stats, rm, rv, w, b) + _scalars(np.float64, float(eps)),
               (_ACTIVATIONS[act],))
    return y, stats


def _bn_backward_fused(x, stats, weight, bias, g, training, act):
    c, a = x.shape[1], stats.dtype
    rows, channels_last = _bn_layout(x.shape, x.strides, x.itemsize)
    xd, gd = _bn_dense(x, channels_last), _bn_dense(g, channels_last)
    w, b = cp.ascontiguousarray(weight, a), cp.ascontiguousarray(bias, a)
    sums = cp.empty(c, a), cp.empty(c, a)   # per channel: sum(g) = dbias and sum(g * xhat) = dweight, g = dy * act'
    template = (_ACTIVATIONS[act],)
    dx = _bn_empty(x.shape, x.dtype, channels_last)
    if training and _bn_train_pass('bn_bwd_train', rows, x.dtype, act, (xd, gd, stats, w, b) + sums + (dx,), 5,
                                   (xd, gd, dx)):
        return dx, sums[1], sums[0]
    _bn_launch('bn_bwd_reduce', rows, x.dtype, (xd, gd, stats, w, b) + sums, template, scratch_at=5)
    _bn_launch('bn_bwd_dx', rows, x.dtype, (xd, gd, stats, w, b) + (sums if training else (None, None)) + (dx,),
               template, follows=('bn_bwd_reduce', template))
    return dx, sums[1], sums[0]


class LayerNormOp(Function):
    """y = (x - mean) / sqrt(var + eps) [* weight] [+ bias] over the trailing axes `axes` (the biased variance), as
    torch.nn.functional.layer_norm; `given` says which of weight and bias are there. float16 is computed in float32
    and rounded once. Keeps x itself and each row's mean and 1 / std (as PyTorch); backward recomputes x-hat and,
    with gh = g * weight and the means over `axes`, gives dx = (gh - mean(gh) - x-hat mean(gh x-hat)) / std, and
    dweight = sum of g x-hat, dbias = sum of g over the other axes."""
    def forward(self, x, *affine, given, axes, eps):
        (weight, bias), a = _fill(affine, given), _opmath(x.dtype)
        self.x, self.weight, self.given, self.axes = x, weight, given, axes
        self.saves = (0, 1) if weight is not None else (0,)   # backward reads x and the weight, never the bias
        z = x.astype(a)   # a fresh array, normalised in place
        self.mean = self._mean(z)
        z -= self.mean
        self.rstd = 1 / _xp(x).sqrt(self._mean(z * z) + eps)
        z *= self.rstd
        if weight is not None:
            z *= weight.astype(a, copy=False)
        if bias is not None:
            z += bias.astype(a, copy=False)
        return z.astype(x.dtype, copy=False)

    def backward(self, g):
        a, weight = self.mean.dtype, self.weight
        xhat = self.x.astype(a)
        xhat -= self.mean
        xhat *= self.rstd
        g = g.astype(a, copy=False)
        need_x, need_weight, need_bias = _fill(self.needs_grad, (True,) + self.given, False)
        rows = tuple(range(g.ndim - len(self.axes)))
        dx = None
        if need_x:
            gh = g if weight is None else g * weight.astype(a, copy=False)
            dx = gh - self._mean(gh) - xhat * self._mean(gh * xhat)
            dx *= self.rstd
        grads = (dx, _sum(g * xhat, rows) if need_weight else None, _sum(g, rows) if need_bias else None)
        grads = [d for d, there in zip(grads, (True,) + self.given) if there]
        return tuple(None if d is None else d.astype(t.dtype, copy=False) for d, t in zip(grads, self.inputs))

    def _mean(self, v):   # over the normalised axes, kept (0 where they hold no element)
        return v.sum(axis=self.axes, keepdims=True) / max(1, math.prod(v.shape[i] for i in self.axes))


# GRU, one layer over every step, gates r, z, n as in torch.nn.GRU. With xg = x W_ih^T + b_ih (all steps in
# one product) and hg = h W_hh^T + b_hh:
#   r = sigmoid(xg_r + hg_r), z = sigmoid(xg_z + hg_z), n = tanh(xg_n + r hg_n), h' = n + z (h - n),
# keeping r, z, n and hg_n of every step. Backward, dh the gradient reaching h_t (dout[t] plus what flows
# back from step t + 1):
#   da_z = dh (h_prev - n) z (1 - z), da_n = dh (1 - z) (1 - n^2), da_r = da_n hg_n r (1 - r),
#   dG_ih[t] = [da_r | da_z | da_n], dG_hh[t] = [da_r | da_z | da_n r], dh_prev = dG_hh[t] W_hh + dh z,
# then over all steps at once: dx = dG_ih W_ih, dW_ih = dG_ih^T x, dW_hh = dG_hh^T h_prev, db = column sums (the
# persistent backward kernels sum their cells over the steps as they write them, leaving B rows, not T B).
# The recurrence runs as the xp loop below (NumPy on the CPU; composed CuPy for float64 or without
# kernels.cu), else in kernels.cu: one persistent kernel per direction where _gru_plan finds a layout
# that fits on chip, or the fallback, per step a product (_gemm) and one gate kernel. The loop keeps xg and
# the gates as contiguous (B, H) planes (NumPy runs 2-5x slower on strided rows), the kernels as rows
# (T, B, 3H) and (T, B, 4H); both give dG_ih and dG_hh as (T, B, 3H) to the common all-steps products.
_gru_path = None   # None: choose; 'persistent', 'fallback' or 'composed' forces that path on the GPU (tests)
_gru_chunk_cap = None   # None, or the k-split kernels' staging chunk at most this many columns (tests)
# the k-split kernels' products on wgmma where the model picks it; False: never, 'only': wherever a wgmma layout fits
# (tests, probes)
_gru_wgmma = True
# the float32 forward's wgmma products on f16 operands, scaled by powers of two (gru_fwd_split_h); False: on TF32
_gru_half_operands = True
# gru_fwd_regs' and gru_bwd_regs' layouts offered to _gru_plan (W_hh in registers, hidden up to 128)
_gru_regs_offered = True
gru_autotune = True   # a persistent GRU kernel's first run at a shape times _gru_candidates' layouts, keeps the fastest
_GRU_TUNE_TIES, _GRU_TUNE_KINDS = 4, 8   # the candidates: at most this many near-ties of the choice, kinds in all
_GRU_TUNE_STEPS = 16   # the fewest steps of a run that times them (in shorter ones the fixed costs rank the layouts)
# the fewest steps of a GPU backward whose three products (dx, dW_ih, dW_hh) run side by side (_side_by_side): the
# recurrence's kernel then outlasts the fork's and join's host time, 7-12 us (H200's and H100's hosts; at T = 1 the
# call is host-bound). By replay, (100, 16, 32, 128) fwd+bwd 259 -> 253 us, (50, 256, 512, 512) 1210 -> 1170 (H100).
# And, in an eager run, the fewest multiply-adds of the products (3H T B (2 in + H)): below, the fork and join cost
# more than the overlap saves. Eager fwd+bwd, H100, median of 6 rounds, side by side -> one after another, ms:
# (100, 16, 32, 128) 118M 0.343 -> 0.323; (100, 32, 64, 128) 315M 0.344 -> 0.296; (16, 64, 256, 256) 604M
# 0.372 -> 0.355; (200, 8, 256, 256) 944M 1.067 -> 1.058; (100, 64, 256, 256) 3.8G 0.694 -> 0.685; (100, 64, 512,
# 512) 15G 1.036 -> 1.043; (50, 256, 512, 512) 30G 1.186 -> 1.215; (100, 64, 1024, 1024) 60G 2.343 -> 2.336 (a tie)
_GRU_SIDE_STEPS, _GRU_SIDE_MACS = 16, 1 << 33
_GRU_MACS = {(4, 0): 96, (4, 1): 512, (2, 1): 1024}   # multiply-adds per clock and SM: FMA, TF32 mma, f16 mma
# _gru_plan's clocks a step saved where a batch group meets at its cluster's barrier instead of flags: at (50, 256,
# 512, 512) on the H100, 6.22 -> 4.92 us a step, a fifth of the model's 4725 clocks for that layout (the model's clocks
# run about half the GPU's)
_GRU_GROUP_BARRIER = 1000
_gru_devices = {}   # GPU index -> (multiprocessors, shared memory per block, the persistent kernels' barrier flags)
# ((multiprocessors, shared memory, B, H, itemsize, TC, clusters loaded), (_gru_half_operands, _gru_wgmma,
# _gru_chunk_cap, _gru_regs_offered, gru_autotune, whether the forward keeps gates)) -> [forward, backward]
_gru_layouts = {}


class GRULayer(Function):
    """One GRU layer: (x (T, B, in), w_ih, w_hh[, b_ih][, b_hh][, h0 (B, H)]) -> out (T, B, H); `given` says
    which of (x, w_ih, w_hh, b_ih, b_hh, h0) are there. float16 runs in float32 on the xp loop."""
    saves_output = True

    def forward(self, *arrays, given):
        x, w_ih, w_hh, b_ih, b_hh, h0 = _fill(arrays, given)
        positions = [i for i, g in enumerate(given) if g]   # inputs' positions among (x, w_ih, w_hh, b_ih, b_hh, h0)
        self.saves = tuple(k for k, i in enumerate(positions) if i not in (3, 4))   # backward reads no bias
        tf32 = allow_tf32 and x.dtype == np.float32
        self.given, self.dtype, self.plans = given, x.dtype, _gru_plans(x, w_hh.shape[1], tf32, self.recording)
        self.tf32 = tf32 and self.plans is not None   # the xp loop (CPU, composed) stays exact
        ct = _acc_dtype(x.dtype) if self.plans is None else x.dtype
        x, w_ih, w_hh, b_ih, b_hh, h0 = (_as_dtype(a, ct) for a in (x, w_ih, w_hh, b_ih, b_hh, h0))
        if self.plans is None:
            out, gates = _gru_forward_loop(x, w_ih, w_hh, b_ih, b_hh, h0, self.recording)
        else:
            w_hh, b_ih, b_hh, h0 = (_aligned(a) for a in (w_hh, b_ih, b_hh, h0))
            out, gates = _gru_forward_fused(x, w_ih, w_hh, b_ih, b_hh, h0, self.plans, self.tf32, self.recording)
        self.saved = x, w_ih, w_hh, h0, out, gates
        return _as_dtype(out, self.dtype)

    def backward(self, g):
        x, w_ih, w_hh, h0, out, gates = self.saved
        gates = self._saved(gates)
        (steps, batch, hidden), xp = out.shape, _xp(out)
        dg_ih, dg_hh = xp.empty((steps, batch, 3 * hidden), out.dtype), xp.empty((steps, batch, 3 * hidden), out.dtype)
        g = _as_dtype(g, out.dtype)
        need = _fill(self.needs_grad, self.given, False)
        if self.plans is None:
            dh0, db = _gru_backward_loop(g, w_hh, h0, out, gates, dg_ih, dg_hh), None
        else:
            dh0, db = _gru_backward_fused(_aligned(g), w_hh, h0, out, gates, dg_ih, dg_hh, self.plans, self.tf32,
                                          want_bias=need[3] or need[4], want_dh0=need[5])
        gi, gh = dg_ih.reshape(steps * batch, 3 * hidden), dg_hh.reshape(steps * batch, 3 * hidden)
        if db is None:   # the xp loop and the fallback: the column sums of dG
            db = _sum(gi, 0) if need[3] else None, _sum(gh, 0) if need[4] else None
        tf32 = self.tf32

        def dw_hh():   # sum over the steps of dG_hh[t]^T h_{t-1}; h_{-1} = h0 (without one: no term)
            if steps == 1:
                return xp.zeros((3 * hidden, hidden), out.dtype) if h0 is None else _matmul(gh.T, h0, tf32=tf32)
            dw = _matmul(gh[batch:].T, out[:-1].reshape((steps - 1) * batch, hidden), tf32=tf32)
            if h0 is not None:
                dw += _matmul(gh[:batch].T, h0, tf32=tf32)
            return dw
        products = {2: dw_hh, 0: lambda: _matmul(gi, w_ih, tf32=tf32).reshape(x.shape),
                    1: lambda: _matmul(gi.T, x.reshape(steps * batch, x.shape[-1]), tf32=tf32)}
        wanted = [i for i in products if need[i]]   # dW_hh, dx, dW_ih: side by side, the first on the current stream
        macs = 3 * hidden * steps * batch * (2 * x.shape[-1] + hidden)   # the three products'
        side = len(wanted) > 1 and self.plans is not None and steps >= _GRU_SIDE_STEPS and (
            macs >= _GRU_SIDE_MACS or cp.cuda.get_current_stream().is_capturing())
        run = _side_by_side if side else lambda *fs: [f() for f in fs]
        done = dict(zip(wanted, run(*(products[i] for i in wanted))))
        grads = (*map(done.get, range(3)), db[0] if need[3] else None, db[1] if need[4] else None,
                 dh0 if need[5] else None)
        return tuple(_as_dtype(d, self.dtype) for d, given in zip(grads, self.given) if given)


def _gru_forward_loop(x, w_ih, w_hh, b_ih, b_hh, h0, keep_gates):
    """out (T, B, H) and gates (T, 4, B, H) = r, z, n, hg_n, step by step with in-place xp ops; keep_gates False:
    gates None, one step's reused."""
    xp, (steps, batch, _), hidden = _xp(x), x.shape, w_hh.shape[1]
    xs = x.reshape(steps * batch, x.shape[-1])
    xg = _matmul(xs, w_ih.reshape(3, hidden, x.shape[-1]).transpose(0, 2, 1)).reshape(3, steps, batch, hidden)
    if b_ih is not None:
        xg += b_ih.reshape(3, 1, 1, hidden)
    if b_hh is not None:   # b_hr and b_hz add to the input side; b_hn stays inside r * (.)
        xg[:2] += b_hh[:2 * hidden].reshape(2, 1, 1, hidden)
    b_hn = 0 if b_hh is None else b_hh[2 * hidden:]
    w_hh_t = xp.ascontiguousarray(w_hh.T)
    out, gates = xp.empty((steps, batch, hidden), x.dtype), xp.empty((steps if keep_gates else 1, 4, batch, hidden),
                                                                     x.dtype)
    hg = xp.empty((batch, 3 * hidden), x.dtype)
    h = xp.zeros((batch, hidden), x.dtype) if h0 is None else h0
    for t in range(steps):
        xp.matmul(h, w_hh_t, out=hg)
        step = gates[t if keep_gates else 0]
        rz, n, hn = step[:2], step[2], step[3]
        xp.add(xg[:2, t], hg[:, :2 * hidden].reshape(batch, 2, hidden).transpose(1, 0, 2), out=rz)
        rz *= 0.5   # sigmoid(a) = (tanh(a / 2) + 1) / 2
        xp.tanh(rz, out=rz)
        rz += 1
        rz *= 0.5
        xp.add(hg[:, 2 * hidden:], b_hn, out=hn)
        xp.multiply(rz[0], hn, out=n)
        n += xg[2, t]
        xp.tanh(n, out=n)
        xp.subtract(h, n, out=out[t])
        h = out[t]
        h *= rz[1]
        h += n
    return out, gates if keep_gates else None


def _gru_backward_loop(g, w_hh, h0, out, gates, dg_ih, dg_hh):
    """Fill dg_ih and dg_hh step by step with in-place xp ops; returns the gradient of h0."""
    xp, (steps, batch, hidden) = _xp(g), out.shape
    dh, a = xp.zeros((batch, hidden), g.dtype), xp.empty((batch, hidden), g.dtype)
    dar, daz, dan, dnr = xp.empty((4, batch, hidden), g.dtype)
    for t in range(steps - 1, -1, -1):
        dh += g[t]
        r, z, n, hn = gates[t]
        h_prev = out[t - 1] if t else h0
        if h_prev is None:   # da_z = dh (h_prev - n) z (1 - z)
            xp.negative(n, out=daz)
        else:
            xp.subtract(h_prev, n, out=daz)
        daz *= dh
        xp.subtract(1, z, out=a)
        daz *= a
        daz *= z
        xp.multiply(dh, a, out=dan)   # da_n = dh (1 - z) (1 - n^2)
        xp.multiply(n, n, out=a)
        xp.subtract(1, a, out=a)
        dan *= a
        xp.subtract(1, r, out=a)   # da_r = da_n hg_n r (1 - r)
        a *= r
        xp.multiply(dan, hn, out=dar)
        dar *= a
        xp.multiply(dan, r, out=dnr)
        xp.concatenate((dar, daz, dan), axis=1, out=dg_ih[t])
        xp.concatenate((dar, daz, dnr), axis=1, out=dg_hh[t])
        dh *= z   # dh_prev = dG_hh[t] W_hh + dh z
        xp.matmul(dg_hh[t], w_hh, out=a)
        dh += a
    return dh


def _gru_forward_fused(x, w_ih, w_hh, b_ih, b_hh, h0, plans, tf32, keep_gates):
    """out (T, B, H) and gates (T, B, 4H) on the GPU: the persistent kernel with the forward layout of `plans`
    (_gru_plans'), or (that None) per step a product (_gemm) and gru_gates_fwd; the projection x W_ih^T first, as one
    product, unless gru_fwd_regs makes it (_gru_projects_inside). The kernels add the biases; tf32: float32 products
    on TF32; keep_gates False (no backward will run): gates None, the kernels write none."""
    xp, (steps, batch, _), hidden = _xp(x), x.shape, w_hh.shape[1]
    out = xp.empty((steps, batch, hidden), x.dtype)
    gates = xp.empty((steps, batch, 4 * hidden), x.dtype) if keep_gates else None
    if _gru_projects_inside(plans[0], x):
        _gru_run('fwd', plans, tf32, (None, w_hh, b_ih, b_hh, h0, out, gates, x, _aligned(w_ih)), steps, batch, hidden)
        return out, gates
    xg = _matmul(x.reshape(steps * batch, x.shape[-1]), w_ih.T, tf32=tf32).reshape(steps, batch, 3 * hidden)
    if plans[0] is not None:
        _gru_run('fwd', plans, tf32, (xg, w_hh, b_ih, b_hh, h0, out, gates), steps, batch, hidden)
        return out, gates
    hg, kernel = xp.empty((batch, 3 * hidden), x.dtype), _kernel('gru_gates_fwd', x.dtype)
    for t in range(steps):
        h_prev = out[t - 1] if t else h0
        if h_prev is None:
            hg.fill(0)
        else:
            _gemm(h_prev, w_hh.T, x.dtype, tf32, out=hg)
        _launch_flat(kernel, batch * hidden, 1,
                     (xg[t], hg, b_ih, b_hh, h_prev, out[t], gates if gates is None else gates[t]) +
                     _int32s(batch, hidden))
    return out, gates


def _gru_backward_fused(g, w_hh, h0, out, gates, dg_ih, dg_hh, plans, tf32, want_bias, want_dh0):
    """Fill dg_ih and dg_hh on the GPU as _gru_forward_fused does; returns the gradient of h0 where `want_dh0` asks
    for it (else None) and, where the persistent kernel ran and `want_bias` asks for them, the bias gradients (b_ih's,
    b_hh's, in g's dtype), else None. The kernel sums each of its (row, unit) cells over the steps as it writes them,
    so that only B rows are left to sum, not T B."""
    xp, (steps, batch, hidden) = _xp(g), out.shape
    if plans[1] is not None:
        dh0 = xp.empty((batch, hidden), g.dtype) if want_dh0 else None
        parts = xp.empty((batch, 6 * hidden), np.float32) if want_bias else None
        _gru_run('bwd', plans, tf32, (g, gates, out, h0, w_hh, dg_ih, dg_hh, dh0, parts), steps, batch, hidden)
        return dh0, parts if parts is None else _gru_bias_sums(parts, g.dtype)
    carry, dh_mm = xp.zeros((batch, hidden), np.float32), xp.empty((batch, hidden), g.dtype)
    kernel = _kernel('gru_gates_bwd', g.dtype)
    for t in range(steps - 1, -1, -1):   # dh_mm holds dG_hh[t + 1] W_hh, carry dh z of step t + 1
        _launch_flat(kernel, batch * hidden, 1, (g[t], dh_mm if t < steps - 1 else None, carry, gates[t],
                                                 out[t - 1] if t else h0, dg_ih[t], dg_hh[t]) + _int32s(batch, hidden))
        _gemm(dg_hh[t], w_hh, g.dtype, tf32, out=dh_mm)
    return (carry + dh_mm).astype(g.dtype) if want_dh0 else None, None


def _gru_projects_inside(plan, x):
    """Whether the forward's launch with `plan` (_gru_plans' entry) is gru_fwd_regs projecting x itself: its layout,
    not a timing run's (_gru_tunes: those launch on the projection), in an eager run (a CUDA graph's replay spends no
    host time: the projection apart takes less GPU time) of at most _GRU_REGS_PROJ_STEPS steps, x's rows unit-strided,
    the block's rows times the inputs' k-tiles of 8 at most _GRU_REGS_X_TILES, and _gru_projection_bytes within the
    block's shared memory besides 4608 bytes (the kernel's own, h's copies: 4.4 KB); not for an input of no features."""
    layout = _gru_used(plan)
    if layout is None or not layout[10] or x.shape[0] > _GRU_REGS_PROJ_STEPS:   # (no driver call for others)
        return False
    rows = layout[3]
    return x.strides[-1] == x.itemsize and min(x.strides) >= 0 and \
        0 < rows * -(-x.shape[-1] // 8) <= _GRU_REGS_X_TILES and \
        _gru_projection_bytes(rows, x.shape[-1]) + 4608 <= _gru_device()[1] and \
        not cp.cuda.get_current_stream().is_capturing() and not _gru_tunes(plan, x.shape[0])


def _gru_projecting(rows):
    """gru_fwd_regs' PROJ where it projects x itself, at `rows` rows a block: 2 at _GRU_REGS_ROWS (its chunks padded
    less, for the block to fit in shared memory), else 1 (kernels.cu traps where the two disagree)."""
    return 1 + int(rows == _GRU_REGS_ROWS)


def _gru_projection_bytes(rows, inputs):
    """gru_fwd_regs<T, KT, P, S>'s dynamic shared memory: each of its 8 warps' W_ih fragments (3 gates, a k-tile of 8
    512 bytes) and chunks of x W_ih^T (16 steps, 52 floats a step and row: 48 and the padding; 50 for P 2), and the
    block's chunk of x (16 steps, 68 floats a step)."""
    xs_row = 50 if _gru_projecting(rows) == 2 else 52
    return 8 * (3 * -(-inputs // 8) * 512 + 16 * rows * xs_row * 4) + 16 * 68 * 4


def _gru_bias_sums(parts, dtype):
    """(b_ih's gradient, b_hh's) in `dtype` from the backward kernel's per-row sums `parts` (B, 6H): one launch of
    gru_bias_sums writing each into memory of its own: on an H100's host 9 us, against 33 us for CuPy's sum at B = 16
    (77 for tl._sum's ones-row product at 256 rows) and 21 for each copy of its halves that the leaves' gradients then
    took."""
    kernel, size = _kernel('gru_bias_sums', dtype), parts.shape[1] // 2
    if kernel is None:
        return _as_dtype(_sum(parts, 0), dtype).reshape(2, size)
    db_ih, db_hh = cp.empty(size, dtype), cp.empty(size, dtype)
    _launch_flat(kernel, 2 * size, 1, (parts, db_ih, db_hh) + _int32s(parts.shape[0], size // 3))
    return db_ih, db_hh


def _aligned(a):
    """a C-contiguous and starting on a 16-byte boundary (the GRU's persistent kernels and the implicit-GEMM conv
    copy 16-byte pieces)."""
    if a is None:
        return None
    a = a if a.flags.c_contiguous else cp.ascontiguousarray(a)   # (the call costs host time even where a is)
    return a if a.data.ptr % 16 == 0 else a.copy()


def _gru_run(direction, plans, tf32, arrays, steps, batch, hidden):
    """_gru_launch with the layout of `direction` in `plans` (_gru_plans'). Where that is still a list of candidates
    (gru_autotune: the first run at this shape), each is first launched on these arrays and timed, and the fastest is
    kept for every later run (their results differ only in rounding); not in a run of fewer than _GRU_TUNE_STEPS steps
    (at (1, 16, 32, 128) on the H200 the layout fastest over one step was 1.6 times the fastest over 100) or while a
    CUDA graph is being captured: those take the model's choice and leave the timing to a later run."""
    index = int(direction == 'bwd')
    if _gru_tunes(plans[index], steps):
        plans[index] = _gru_fastest(direction, plans[index], tf32, arrays, steps, batch, hidden)
    _gru_launch(direction, _gru_used(plans[index]), tf32, arrays, steps, batch, hidden)


def _gru_tunes(plan, steps):
    """Whether a run of `steps` with `plan` (an entry of _gru_plans) times its candidates first (_gru_run)."""
    return isinstance(plan, list) and steps >= _GRU_TUNE_STEPS and not cp.cuda.get_current_stream().is_capturing()


def _gru_used(plan):
    """The layout a run launches for one direction's entry of _gru_plans: the entry, or (candidates not timed yet)
    the model's choice."""
    return plan[0] if isinstance(plan, list) else plan


def _gru_fastest(direction, layouts, tf32, arrays, steps, batch, hidden):
    """Of `layouts`, the one whose launches on `arrays` took the least time: each launched once (loading its kernel)
    and then timed over two launches by events; one the kernels or the GPU refuse is passed over."""
    start, stop, times = cp.cuda.Event(), cp.cuda.Event(), []
    for layout in layouts:
        launch = functools.partial(_gru_launch, direction, layout, tf32, arrays, steps, batch, hidden)
        try:
            launch()
        except (RuntimeError, cp.cuda.driver.CUDADriverError):
            continue
        start.record()
        launch()
        launch()
        stop.record()
        stop.synchronize()
        times.append((cp.cuda.get_elapsed_time(start, stop), layout))
    return min(times, default=(0, layouts[0]))[1]


def _gru_launch(direction, plan, tf32, arrays, steps, batch, hidden):
    """One launch of the persistent kernel of `direction` ('fwd' or 'bwd') with layout `plan` (_gru_plan): a
    cooperative one (gru_*_persistent), clusters of its slices (gru_*_cluster) or of its k-slices (gru_*_split; the
    float32 forward's wgmma layouts on f16 operands: gru_fwd_split_h, with its scratch for h's f16 copies), with a
    batch group as one cluster (the forward's gru_fwd_split_h or, for float16, gru_fwd_split, of group G), or blocks
    each holding all of W_hh (gru_fwd_regs, gru_bwd_regs: a batch group a block, no barrier between blocks). The
    forward's arrays: (xg, w_hh, b_ih, b_hh, h0, out, gates), or for gru_fwd_regs projecting x itself xg None and
    then x and w_ih."""
    groups, slices, units, rows, chunk, smem, cluster, split, wn, group, regs = plan
    dtype = arrays[1].dtype   # (w_hh's, or the backward's gates': the forward's xg may be None)
    tc, extra, scratch, forward = int(dtype == np.float16 or tf32), (), (), direction == 'fwd'
    if regs:
        projects = 0 if arrays[0] is not None else _gru_projecting(rows)   # (kernels.cu: PROJ)
        kernel = _kernel(f'gru_{direction}_regs', dtype, regs, *(projects,) * forward, int(rows == 1))
        if kernel is None or 16 * regs < hidden or rows > _GRU_REGS_ROWS or groups * rows < batch:
            raise RuntimeError(f"GRU: layout {plan} is not one of gru_{direction}_regs' (hidden at most {16 * regs}, "
                               f"at most {_GRU_REGS_ROWS} rows a block, blocks enough for batch {batch}, its kernel "
                               "loaded)")
        if not forward:
            kernel((groups,), (_BLOCK,), arrays + _int32s(steps, batch, hidden, rows))
        elif arrays[0] is not None:   # gru_fwd_regs on xg
            kernel((groups,), (_BLOCK,), arrays + (None, None) + _int32s(steps, batch, hidden, rows, 0, 0, 0))
        else:   # xg None: x and w_ih follow, and gru_fwd_regs<T, KT, P, S> projects x in chunks in shared memory
            x = arrays[7]
            sizes = _int32s(steps, batch, hidden, rows, x.shape[-1], *(step // x.itemsize for step in x.strides[:2]))
            _launch_with_smem(kernel, (groups,), _BLOCK, arrays + sizes, _gru_projection_bytes(rows, x.shape[-1]))
        return
    if not forward:   # the other backward kernels stage W_hh^T's rows (gru_bwd_regs reads W_hh as it is)
        arrays = arrays[:4] + (cp.ascontiguousarray(arrays[4].T),) + arrays[5:]
    if split:
        half = wn and _gru_half_wgmma(forward, dtype)
        granule = 128 // (2 if half else dtype.itemsize) if wn else 16   # wgmma: a k-tile, 128 bytes of a row
        if split % granule or split > chunk:
            raise RuntimeError(f"GRU: layout {plan}'s staging chunk is not a multiple of {granule} within the k-slice")
        weight_rows = -(-units // 8) * 8 * (3 if forward else 1)
        if wn and (chunk % granule or rows > wn or -(-weight_rows // 64) * 64 > 256):
            raise RuntimeError(f"GRU: layout {plan} exceeds the wgmma products' tiles (k-slice a multiple of "
                               f"{granule}, batch rows at most {wn}, weight rows at most 256)")
        if group and group != slices * cluster:
            raise RuntimeError(f"GRU: layout {plan}'s batch group is not one cluster of {group} blocks")
        if not _gru_cells_fit(rows, units, cluster, group):
            raise RuntimeError(f"GRU: layout {plan} gives a thread more cells than its kernel keeps")
        extra = _int32s(split)   # the k-split's staging chunk
        kernel = _gru_wgmma_kernel(forward, cluster, wn, group, dtype) if wn else \
            _kernel(f'gru_{direction}_split', dtype, cluster, 0)
        blocks = groups * slices * cluster
        if half:   # h's f16 copies: in this scratch, or (batch groups) pushed between the blocks (kernels.cu)
            if group and split < hidden:   # (the kernel would trap)
                raise RuntimeError(f"GRU: layout {plan} stages the operand in k-chunks, which float32's batch groups, "
                                   "pushing it whole, do not")
            # (a batch group's kernel reads no scratch: the flags' array stands in for the pointer)
            scratch = (_gru_device()[2] if group else cp.empty((2, batch, hidden), np.float16),)
    elif cluster:
        kernel, blocks = _kernel(f'gru_{direction}_cluster', dtype, tc, slices), groups * slices
    else:
        kernel, blocks = _kernel(f'gru_{direction}_persistent', dtype, tc), groups * slices
    flags = _gru_device()[2]
    if kernel is None:
        raise RuntimeError(f"GRU: layout {plan}'s kernel did not load")
    if blocks >= flags.size:   # a block each SM (the layouts' shared memory); the flags hold one a block
        raise RuntimeError(f"GRU: layout {plan} takes {blocks} blocks, more than the GPU's multiprocessors")
    sizes = _int32s(steps, batch, hidden, slices, units, rows, chunk) + extra
    _launch_with_smem(kernel, (blocks,), _BLOCK, arrays + (flags,) + scratch + sizes, smem)


def _gru_device():
    index = cp.cuda.runtime.getDevice()
    if index not in _gru_devices:
        sms = _multiprocessors()
        smem = cp.cuda.runtime.getDeviceProperties(index)['sharedMemPerBlockOptin']
        _gru_devices[index] = sms, smem, cp.zeros(1 + sms, np.uint64)
    return _gru_devices[index]


def _gru_plans(x, hidden, tf32, keep_gates=True):
    """How the recurrence of x runs: None for the xp loop (NumPy; on the GPU an empty batch, float64, no kernels.cu,
    or 'composed'), else [forward, backward] layouts of the persistent kernels, None each for the fallback, or
    (gru_autotune, until the first run times them: _gru_run) a list of candidate layouts, the model's choice first;
    on the tensor cores for float16, and for float32 as TF32 where tf32 says so. keep_gates False: for a forward that
    keeps no gates (tuned apart: without the gates' stores another layout may be the fastest)."""
    if _xp(x) is np or x.shape[1] == 0 or _gru_path == 'composed' or _kernel('gru_gates_fwd', x.dtype) is None or \
            _kernel('gru_gates_bwd', x.dtype) is None:
        return None
    tc, plans = int(x.dtype == np.float16 or tf32), [None, None]
    if _gru_path != 'fallback' and _kernel('gru_fwd_persistent', x.dtype, tc) is not None and \
            _kernel('gru_bwd_persistent', x.dtype, tc) is not None:
        key = _gru_key(x.shape[1], hidden, x.dtype, tc)
        # a layout fits the kernels the first four select; gru_autotune: a list to time or the model's choice
        switches = (_gru_half_operands, _gru_wgmma, _gru_chunk_cap, _gru_regs_offered, gru_autotune, keep_gates)
        if (key, switches) not in _gru_layouts:
            _gru_layouts[key, switches] = [_gru_choice(forward, key, x.dtype) for forward in (True, False)]
        plans = _gru_layouts[key, switches]
    if _gru_path == 'persistent' and None in plans:
        raise ValueError(f"GRU: no persistent kernels for batch {x.shape[1]} and hidden size {hidden} (they do not "
                         "fit on chip, or kernels.cu's cooperative kernels did not load)")
    return plans


def _gru_key(batch, hidden, dtype, tc):
    """_gru_plans' key of a run on the current GPU: (multiprocessors, shared memory a block may take, batch, hidden,
    itemsize, tc, whether the cluster kernels loaded)."""
    clusters = all(_kernel(f'gru_{d}_cluster', dtype, tc, 1) is not None for d in ('fwd', 'bwd'))
    return _gru_device()[:2] + (batch, hidden, np.dtype(dtype).itemsize, tc, clusters)


def _gru_model_choice(forward, key, dtype, ranked=None):
    """_gru_plan's layout at _gru_plans' key, the k-split and regs kernels loaded for `dtype` offered on the tensor
    cores; `ranked` as _gru_plan's."""
    tc = key[5]
    return _gru_plan(forward, *key, _gru_splits(forward, dtype) if tc else (), ranked=ranked,
                     regs=_gru_regs(forward, dtype) if tc else ())


def _gru_choice(forward, key, dtype):
    """_gru_model_choice, or with gru_autotune the list of layouts to time (_gru_candidates)."""
    ranked = [] if gru_autotune else None
    choice = _gru_model_choice(forward, key, dtype, ranked)
    if choice is None or ranked is None:
        return choice
    candidates = [entry[3] for entry in _gru_candidates(ranked, choice, _GRU_TUNE_TIES, _GRU_TUNE_KINDS)]
    return candidates if len(candidates) > 1 else choice


def _gru_candidates(ranked, choice, ties, kinds, top=0):
    """The entries of _gru_plan's `ranked` worth timing against its `choice`, each once: the choice's first, then its
    near-ties (within 2% of its cost: other batch groups, rows and clusters; at most `ties`, those of the most blocks
    first: the model breaks a tie towards fewer blocks, and on the H200 more were up to 1.4 times faster), then for
    other kinds (cluster size, k-split, wgmma WN, slices, group, regs) in the model's order until `kinds` kinds are
    in, each kind's cheapest layouts of the fewest blocks, of the most and of the median count (at (100, 16, 32, 128)
    the fastest on the H100 and near it on the H200: clusters of 8 in 4 batch groups of 4 rows); then the `top`
    best-ranked. The cheapest kind of each family (unsplit, k-split, batch group as one cluster, W_hh in registers)
    comes first among the other kinds: the model's f16 k-split layouts, ranked above every unsplit one at (200, 8,
    256, 256), would crowd out its fastest, clusters of 8; at (100, 64, 512, 512) its groups as clusters of 16, 3.56 us
    a step on the H100 against the flags' 4.51, ranked below eight other kinds."""
    kind = lambda layout: (layout[6], layout[7] > 0, layout[8], layout[1], layout[9], layout[10])
    cost = lambda entry: entry[0] + entry[1]
    fewest = sorted(ranked, key=lambda entry: (cost(entry), entry[2]))
    most = sorted(ranked, key=lambda entry: (cost(entry), -entry[2]))
    picks = [entry for entry in fewest if entry[3] == choice][:1]
    picks += [entry for entry in most if cost(entry) <= 1.02 * cost(picks[0]) and entry[3] != choice][:ties]
    seen = {kind(entry[3]) for entry in picks}
    # unsplit 0, k-split 1, a group as a cluster 2, W_hh in registers 3
    family = lambda entry: (entry[3][7] > 0) + (entry[3][9] > 0) + 3 * (entry[3][10] > 0)
    leaders = [next(entry for entry in fewest if family(entry) == f) for f in range(4)
               if any(family(entry) == f for entry in fewest)]
    for entry in leaders + fewest:
        if kind(entry[3]) not in seen and len(seen) < kinds:
            seen.add(kind(entry[3]))
            cheapest = [other for other in fewest if kind(other[3]) == kind(entry[3]) and cost(other) == cost(entry)]
            picks += [cheapest[0], cheapest[-1], cheapest[len(cheapest) // 2]]
    unique = {}
    for entry in picks + fewest[:top]:
        unique.setdefault(entry[3], entry)
    return list(unique.values())


def _gru_splits(forward, dtype):
    """((P, clusters, wgmma[, G]), ...): for each size P of _GRU_SPLITS whose k-split kernel (forward or backward)
    loaded, how many clusters of P blocks the GPU holds at once at the most shared memory a block may take (less holds
    no fewer), and the sizes of _GRU_WG whose wgmma kernels of P loaded (float32; none where _gru_wgmma is False; the
    forward's f16 ones where _gru_half_operands, also of P = 1, which has no mma.sync kernel: _gru_plan offers it on
    wgmma only). Then, for the forward on f16 wgmma (float16, or float32 where _gru_half_operands), (1, clusters, wgmma,
    G) for each G of _GRU_GROUPS whose kernels of a batch group as one cluster of G blocks loaded: clusters of G the GPU
    holds, and the sizes of _GRU_GROUP_WG."""
    smem_max, splits, name = _gru_device()[1], [], f"gru_{'fwd' if forward else 'bwd'}_split"
    for size in _GRU_SPLITS_HALF if _gru_half_wgmma(forward, dtype) else _GRU_SPLITS:
        wgmma = tuple(n for n in _GRU_WG if _gru_wgmma and np.dtype(dtype) == np.float32
                      and _gru_wgmma_kernel(forward, size, n) is not None)
        kernel = _kernel(name, dtype, size, 0) if size > 1 else _gru_wgmma_kernel(forward, size, wgmma[0]) if wgmma \
            else None
        if kernel is not None:
            splits.append((size, _resident_clusters(_allow_smem(kernel, smem_max), size, smem_max), wgmma))
    for group in _GRU_GROUPS if _gru_wgmma else ():
        wgmma = tuple(n for n in _GRU_GROUP_WG if _gru_wgmma_kernel(forward, 1, n, group, dtype) is not None)
        if wgmma:   # (float32's kernels keep an mbarrier in static shared memory)
            kernel = _gru_wgmma_kernel(forward, 1, wgmma[0], group, dtype)
            room = smem_max - kernel.shared_size_bytes
            splits.append((1, _resident_clusters(_allow_smem(kernel, room), group, room), wgmma, group))
    return tuple(splits)


def _gru_regs(forward, dtype):
    """The KT of _GRU_REGS whose gru_fwd_regs or gru_bwd_regs kernels loaded, on f16 operands: float16's, and
    float32's where _gru_half_operands (its products in TF32's place); () otherwise or without _gru_regs_offered."""
    if not _gru_regs_offered or (np.dtype(dtype) == np.float32 and not _gru_half_operands):
        return ()
    name = f"gru_{'fwd' if forward else 'bwd'}_regs"
    return tuple(kt for kt in _GRU_REGS if _kernel(name, dtype, kt, *(0,) * forward, 0) is not None)


def _gru_half_wgmma(forward, dtype):
    """Whether a direction's float32 wgmma products run on f16 operands (the forward's, where _gru_half_operands)."""
    return forward and _gru_half_operands and np.dtype(dtype) == np.float32


def _gru_wgmma_kernel(forward, size, wn, group=0, dtype=np.float32):
    """The k-split kernel of a direction on wgmma, clusters of `size`, B operands of `wn` rows: float32's (None for
    another dtype); with group, the forward's on f16 wgmma (float16's, or float32's where _gru_half_operands; else None)
    of a batch group as one cluster of `group` blocks (past 8, a non-portable size: allowed here)."""
    if group:
        kernel = None
        if forward and np.dtype(dtype) == np.float16:
            kernel = _kernel('gru_fwd_split', dtype, size, wn, group)
        elif _gru_half_wgmma(forward, dtype):
            kernel = _kernel('gru_fwd_split_h', size, wn, group)
        if kernel is not None and group > 8 and kernel not in _nonportable:
            cp.cuda.driver.funcSetAttribute(kernel.kernel.ptr, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
            _nonportable.add(kernel)
        return kernel
    if np.dtype(dtype) != np.float32:
        return None
    if _gru_half_wgmma(forward, np.float32):
        return _kernel('gru_fwd_split_h', size, wn)
    return _kernel(f"gru_{'fwd' if forward else 'bwd'}_split", np.float32, size, wn)


class _LaunchConfig(ctypes.Structure):   # the CUDA driver's CUlaunchConfig
    _fields_ = [('grid', ctypes.c_uint * 3), ('block', ctypes.c_uint * 3), ('smem', ctypes.c_uint),
                ('stream', ctypes.c_void_p), ('attrs', ctypes.c_void_p), ('attr_count', ctypes.c_uint)]


def _resident_clusters(kernel, size, smem):
    """Clusters of `size` blocks of `_BLOCK` threads of `kernel` (cluster size compiled in), with `smem` bytes of
    dynamic shared memory, that the GPU holds at once: cuOccupancyMaxActiveClusters (CuPy has no wrapper), through
    the driver library CuPy loaded; 0 where it cannot tell."""
    try:
        driver = ctypes.CDLL(next(iter(_mapped_libraries('libcuda.so'))))
        config, count = _LaunchConfig((size, 1, 1), (_BLOCK, 1, 1), smem), ctypes.c_int()
        if driver.cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(kernel.kernel.ptr),
                                               ctypes.byref(config)):
            return 0
        return count.value
    except (StopIteration, OSError, AttributeError):
        return 0


def _gru_cells_fit(rows, units, size=1, group=0):
    """Whether a batch group's rows by a block's units, the (row, unit) cells its `size` blocks (a k-split's cluster)
    share, give a thread no more than the kernel keeps: _GRU_CELLS, one more with a batch group as one cluster."""
    cells = -(-rows * units // _BLOCK)   # a thread's cells where one block finishes them all
    return -(-cells // size) <= _GRU_CELLS + (group > 0)


def _gru_plan(forward, sms, smem_max, batch, hidden, itemsize, tc, clusters, splits=(), ranked=None, regs=()):
    """The layout (nb, nu, J, BB, KC, shared memory bytes, cluster, split, wn, group, regs) of a persistent kernel
    with the least estimated clocks per step, None where none fits: nb batch groups of BB rows times nu slices of J
    units, all resident at once. Unsplit (split False), a block each (nb nu <= SMs) holds its units' rows of W_hh in
    shared memory (3J of H forward, J of 3H backward), owns at most 4 (row, unit) cells per thread and at most one warp
    tile of 16 rows by 8 units per warp (kernels.cu's Block). The cooperative kernel (cluster 0) stages the step's
    operand rows from L2 in k-chunks of KC, its batch groups meeting at flags; where `clusters` (the cluster kernels
    loaded) and nu is one of _GRU_CLUSTERS, a batch group can be a cluster (cluster nu) that keeps the whole operand in
    shared memory, twice (KC = K), and passes it on there. On the H200 clusters were faster than the cooperative kernel
    at every shape timed, the backward's only up to 4 blocks (its operand is 3H wide, written into every block of the
    cluster each step; PERF_NOTES.md), so the backward takes clusters of at most 4 (larger ones are only ranked). Split
    (the tensor cores only; `splits` = ((P, clusters resident, wgmma sizes), ...) of the k-split kernels loaded): a
    cluster of P blocks (cluster P) shares a (batch group, J units) pair, each block holding its units' weights over KC
    = KP of the k extent and staging only that slice of the operand (kernels.cu's Split), whole or (where it does not
    fit beside the weights) in two buffers of k-chunks of `split` columns (split = KP: whole; unsplit layouts: split 0);
    every block of a batch group resident. Its products run on mma.sync (wn 0), or (float32, where wgmma kernels of P
    loaded) on wgmma, the operand's rows padded to wn. The forward on f16 wgmma (float32's f16 operands, float16) also
    comes with a batch group as one cluster of `group` blocks (splits' entries (1, clusters resident, wgmma sizes,
    group); else group 0): nu = group, its blocks meeting at the cluster's barrier, cheaper than flags by
    _GRU_GROUP_BARRIER clocks, with up to 5 cells a thread (fewer, larger groups: only so many clusters fit at once).
    On f16 operands either way also comes W_hh in every block's registers (`regs`: the KT of _GRU_REGS whose
    gru_fwd_regs or gru_bwd_regs loaded; the layout's regs the least KT with 16 KT >= H, else 0): nb batch groups of BB
    <= _GRU_REGS_ROWS rows, a block each, none waiting for another (nb may pass the SMs: waves), at a cost set from the
    H200's forward steps at B 16, H 128 (1.14 us a row a block, 1.65 for 2 to 8; the autotuned layout there about 1.9
    us, the model's choice without these costed 805), the backward's costed the same (its steps about as fast as the
    others' there: PERF_NOTES.md section 6). The k-split's model was fitted to the H200's times of 7 shapes each way on
    mma.sync (P = 2, 4, 8 against the unsplit layouts) and picks the fastest there (wgmma's rate in it is a guess); it
    is compared with the unsplit layout chosen as before plus that layout's time to read its operand rows from L2 (about
    2800 bytes a clock on the H200: the bound the k-split lifts). `ranked`, a list, gets (clocks, L2 read clocks,
    blocks, layout, eligible) of every layout that fits (gru_autotune times the best of them against the choice:
    _gru_candidates; so does bench.py's gru_parts table, and with --gru-sweep N the N best-ranked: the data for a
    refit)."""
    up = lambda a, b: -(-a // b) * b
    row_bytes = lambda n: (up(n, 128 // itemsize) + 16 // itemsize) * itemsize   # kernels.cu's smem_ld
    k = hidden if forward else 3 * hidden
    partials = _BLOCK // 32 * 384 * 4   # the warps' partial sums over k (Block::red)
    best = {False: None, True: None}   # unsplit, split: ((cost, blocks), layout)

    def read(layout):   # an unsplit cooperative layout's operand rows from L2, the others' none
        groups, slices, _, rows, _, _, cluster, split, _, _, regs = layout
        return 0 if cluster or split or regs else groups * slices * up(rows, 16) * k * itemsize / 2800

    def consider(cost, blocks, layout, eligible=True):
        split = bool(layout[7])
        if layout[5] > smem_max:
            return
        if ranked is not None:
            ranked.append((cost, read(layout), blocks, layout, eligible))
        if eligible and (best[split] is None or (cost, blocks) < best[split][0]):
            best[split] = (cost, blocks), layout
    for units in sorted({min(hidden, j) for j in range(8, hidden + 8, 8)}):
        slices, w_rows = -(-hidden // units), up(units, 8) * (3 if forward else 1)
        weights = w_rows * row_bytes(k)
        for rows in sorted({-(-batch // n) for n in range(1, batch + 1)}):
            groups, m_rows = -(-batch // rows), up(rows, 16)
            cells = -(-rows * units // _BLOCK)
            for size, resident, wgmma, *group in splits:
                group = group[0] if group else 0   # the batch group as one cluster of `group` (P = 1): nu = group
                if group not in (0, slices) or (group and not forward) or not _gru_cells_fit(rows, units, size, group) \
                        or (groups if group else groups * slices) > resident:
                    continue
                # Split's products: mma.sync (wn 0), or wgmma on W's rows in m-tiles of 64 (at most 4; the last one's
                # rows past N read from the next k-tile or, past the last, from zeroed tail rows) and the operand's rows
                # padded to wn (_GRU_WG's, _GRU_GROUP_WG's); (KP and KC granule, N, rows multiplied, tail bytes, operand
                # rows, bytes of a staged row of n values, multiply-adds a clock and SM, wn, bytes an operand value,
                # bytes past the partial sums). wgmma's rate is a guess, not measured: the tensor cores' 1024 TF32
                # multiply-adds a clock, or the shared memory's 128 bytes a clock for both operands' reads; twice that
                # on f16 operands (the float32 forward's, with N floats of scales: _gru_half_wgmma)
                variants = [(16, up(w_rows, 24 if forward else 32), up(w_rows, 24 if forward else 32), 0, m_rows,
                             row_bytes, 0.75 * _GRU_MACS[itemsize, tc], 0, itemsize, 0)][size == 1:]   # P = 1: wgmma
                wn = next((n for n in wgmma if n >= rows), 0)   # (every WN a multiple of 8, as wgmma's n)
                if wn and up(w_rows, 64) <= 256:
                    ob = 2 if _gru_half_wgmma(forward, np.float32) else itemsize   # float16: only as groups
                    variants = variants[_gru_wgmma == 'only':] + [
                        (128 // ob, w_rows, up(w_rows, 64), (up(w_rows, 64) - w_rows) * 128, wn,
                         lambda n, ob=ob: n * ob, 0.75 * min(1024, 64 * wn * 8 * 128 / (2048 + 32 * wn)) * 4 / ob, wn,
                         ob, w_rows * 4 if ob < itemsize else 0)]
                for granule, n_cols, m_cols, tail, a_rows, staged, rate, wn, ob, scales in variants:
                    kp, ldc = up(-(-k // size), granule), up(n_cols, 32) + 4 if wn else n_cols + 8   # Split's KP, ldc
                    # the weights and partial sums (wgmma: and the tiles' alignment); the operand's slice whole
                    # (KC = KP) or in two buffers of k-chunks of KC
                    fixed = (1024 if wn else 0) + n_cols * staged(kp) + tail + a_rows * ldc * 4 + scales
                    kc = min(kp, up(_gru_chunk_cap or kp, granule))
                    while kc > max(32, granule) and fixed + a_rows * staged(kc) * (1 if kc == kp else 2) > smem_max:
                        kc -= granule
                    kc = up(-(-kp // -(-kp // kc)), granule)   # as many chunks, evened out
                    # float32's groups push the operand between their blocks in one chunk, into two buffers, beside
                    # two mbarriers (16 bytes of static shared memory)
                    pushed = group and itemsize == 4
                    buffers = 2 if kc < kp or pushed else 1
                    if pushed and (kc < kp or fixed + 2 * a_rows * staged(kp) > smem_max - 16):
                        continue
                    # clocks: products, staging the operand's slice (pushed: 0.3 of the term, about what a multicast
                    # from L2 saved at (50, 256, 512, 512) and (100, 64, 512, 512) on the H100), the cluster's sums
                    # (remote loads), the rest of a step (fitted, see above), each chunk past the first (a guess)
                    staging = m_rows * kp * ob / 28 * (0.3 if pushed else 1)
                    consider(a_rows * m_cols * kp / rate + staging
                             + 15 * size * (3 if forward else 1) * -(-cells // size) + 1400 + 400 * (-(-kp // kc) - 1)
                             - (_GRU_GROUP_BARRIER if group else 0), groups * slices * size,
                             (groups, slices, units, rows, kp, fixed + a_rows * staged(kc) * buffers, size, kc, wn,
                              group, 0))
            if m_rows // 16 * up(units, 8) // 8 > _BLOCK // 32 or not _gru_cells_fit(rows, units) or \
                    groups * slices > sms:
                continue
            products = m_rows * w_rows * up(k, 16) / _GRU_MACS[itemsize, tc]
            chunk = up(k, 64)
            while chunk > 64 and weights + m_rows * row_bytes(chunk) + partials > smem_max:
                chunk -= 64
            smem = weights + m_rows * row_bytes(chunk) + partials
            consider(products + m_rows * k * itemsize / 64 + 800 * -(-k // chunk) + 8 * slices + 2100 + 200 * cells,
                     groups * slices, (groups, slices, units, rows, chunk, smem, 0, 0, 0, 0, 0))
            # clusters: no staging, a cheaper barrier, writes into every block of the cluster
            if clusters and slices in _GRU_CLUSTERS:
                consider(products + 600 + 200 * cells * (1 + slices // 4), groups * slices,
                         (groups, slices, units, rows, k, weights + 2 * m_rows * row_bytes(k) + partials, slices, 0, 0,
                          0, 0),
                         forward or slices <= 4)
    kt = next((n for n in regs if 16 * n >= hidden), 0)
    for rows in range(1, min(batch, _GRU_REGS_ROWS) + 1) if kt else ():
        groups = -(-batch // rows)
        consider((480 if rows == 1 else 700) * (-(-groups // sms) if sms else 1), groups,
                 (groups, 1, hidden, rows, hidden, 0, 0, 0, 0, 0, kt))
    unsplit, split = best[False], best[True]
    if unsplit is not None and split is not None and unsplit[0][0] + read(unsplit[1]) <= split[0][0]:
        split = None
    chosen = split or unsplit
    return chosen and chosen[1]


def _conv_output(h, w, kernel, stride, padding):
    """(Ho, Wo) of a conv or pooling window `kernel` over an H x W image padded by `padding` on each side."""
    return tuple((size + 2 * p - k) // s + 1 for size, k, s, p in zip((h, w), kernel, stride, padding))


def _windows(x, kh, kw, stride):
    """The (N, Ho, Wo, kh, kw, C) sliding windows of an (N, H, W, C) array, as a view."""
    n, h, w, c = x.shape
    sn, sh, sw, sc = x.strides
    shape = (n, *_conv_output(h, w, (kh, kw), stride, (0, 0)), kh, kw, c)
    return _xp(x).lib.stride_tricks.as_strided(x, shape, (sn, sh * stride[0], sw * stride[1], sh, sw, sc))


def _col2im(dwindows, shape, stride):
    """The adjoint of _windows: window gradients (N, Ho, Wo, kh, kw, C) summed into an (N, H, W, C)
    array, one strided add per kernel offset, a few images at a time so each chunk stays in cache."""
    xp, (ho, wo, kh, kw) = _xp(dwindows), dwindows.shape[1:5]
    out = xp.zeros(shape, dwindows.dtype)
    step = max(1, (256 << 10) // max(math.prod(shape[1:]) * out.itemsize, 1) if xp is np else shape[0])
    for n in range(0, shape[0], step):
        for i in range(kh):
            for j in range(kw):
                out[n:n + step, i:i + stride[0] * (ho - 1) + 1:stride[0], j:j + stride[1] * (wo - 1) + 1:stride[1]] += \
                    dwindows[n:n + step, :, :, i, j]
    return out


def _padded_nhwc(x, ph, pw):
    """NCHW-shaped x as a zero-padded (N, H + 2 ph, W + 2 pw, C) array."""
    n, c, h, w = x.shape
    padded = _xp(x).zeros((n, h + 2 * ph, w + 2 * pw, c), x.dtype)
    padded[:, ph:ph + h, pw:pw + w] = x.transpose(0, 2, 3, 1)
    return padded


def _im2col(x, kh, kw, stride, padding):
    """cols (N*Ho*Wo, kh*kw*C) of NCHW-shaped x, columns in (i, j, c) order:
    cols[(n, ho, wo), (i, j, c)] = x[n, c, ho*sh - ph + i, wo*sw - pw + j], zero outside the image."""
    n, c, h, w = x.shape
    (sh, sw), (ph, pw) = stride, padding
    ho, wo = _conv_output(h, w, (kh, kw), stride, padding)
    if (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0):
        return _nhwc(x).reshape(-1, c)
    if _fused(x, 'im2col_nhwc', x.dtype, 1) is None:
        return _windows(_padded_nhwc(x, ph, pw), kh, kw, stride).reshape(n * ho * wo, kh * kw * c)
    xh = _nhwc(x)
    cols = cp.empty((n * ho * wo, kh * kw * c), x.dtype)
    width = _width(x.dtype, c, xh, cols)
    kernel = _kernel('im2col_nhwc', x.dtype, width)
    slots = kh * kw * c // width   # each thread owns one column slot and walks `rows` rows
    rows = max(1, min(n * ho * wo, _resident_blocks(kernel) * _BLOCK // slots))
    kernel((-(-rows * slots // _BLOCK),), (_BLOCK,),
           (xh, cols) + _int32s(n, h, w, c, ho, wo, kh, kw, sh, sw, ph, pw, rows))
    return cols


def _col2im_image(dcols, shape, kh, kw, stride, padding):
    """The adjoint of _im2col: dx (NCHW-shaped, channels-last memory) summing dcols into x's pixels."""
    n, c, h, w = shape
    (sh, sw), (ph, pw) = stride, padding
    ho, wo = _conv_output(h, w, (kh, kw), stride, padding)
    if (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0):
        return dcols.reshape(n, h, w, c).transpose(0, 3, 1, 2)
    if _fused(dcols, 'col2im_nhwc', dcols.dtype, 1) is None:
        dx = _col2im(dcols.reshape(n, ho, wo, kh, kw, c), (n, h + 2 * ph, w + 2 * pw, c), stride)
        return dx[:, ph:ph + h, pw:pw + w].transpose(0, 3, 1, 2)
    dx = cp.empty((n, h, w, c), dcols.dtype)
    width = _width(dcols.dtype, c, dcols, dx)
    _launch_flat(_kernel('col2im_nhwc', dcols.dtype, width), n * h * w * c // width, 1,
                 (dcols, dx) + _int32s(n, h, w, c, ho, wo, kh, kw, sh, sw, ph, pw))
    return dx.transpose(0, 3, 1, 2)


_CPU_BLOCK_BYTES = 8 << 20   # _cpu_col_blocks' buffer, one per thread


def _openblas_threads():
    """(get, set) of the thread count of the OpenBLAS that NumPy loaded (a path naming numpy first: SciPy's
    wheels bring one of their own), None where none is found (another BLAS, or no /proc/self/maps). Builds
    name them openblas_get_num_threads, with suffix 64_ for 64-bit integers, or
    scipy_openblas_get_num_threads64_ (NumPy 2's wheels)."""
    for path in sorted(_mapped_libraries('openblas'), key=lambda path: 'numpy' not in path):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (('scipy_openblas', '64_'), ('openblas', '64_'), ('openblas', '')):
            get, put = (getattr(lib, f'{prefix}_{op}_num_threads{suffix}', None) for op in ('get', 'set'))
            if get and put:
                return get, put
    return None


_OPENBLAS = _openblas_threads()
_OPENBLAS_LOCK = threading.Lock()   # _cpu_parallel changes OpenBLAS's thread count: one at a time
_cpu_pool = {}   # threads -> the one ThreadPoolExecutor _cpu_parallel keeps (starting a thread took ~1 ms here)
if hasattr(os, 'register_at_fork'):   # a forked child has none of the pool's threads
    os.register_at_fork(after_in_child=_cpu_pool.clear)


def _cpu_parallel(fn, items):
    """[fn(chunk) for chunk in contiguous chunks of the sequence items], one chunk per OpenBLAS thread (and
    per item at most), each on a thread of its own while OpenBLAS runs single-threaded; all on this thread
    where NumPy's OpenBLAS was not found. The thread count is the process's: products on other threads
    meanwhile run single-threaded too. On 2 cores, OpenBLAS's two threads ran the conv products at
    200 GFLOP/s, two single-threaded products at once at 234, and the unfolding copies (one core
    otherwise) run in parallel too: a 3x3 conv 64->64 at 64x64x32x32 took 130 ms fwd+bwd with the blocks
    on one thread, 100 this way."""
    with _OPENBLAS_LOCK:
        threads = _OPENBLAS[0]() if _OPENBLAS else 1
        parts = min(threads, len(items))
        if parts <= 1:
            return [fn(items)]
        bounds = [len(items) * k // parts for k in range(parts + 1)]
        _OPENBLAS[1](1)
        try:
            pool = _cpu_pool.get(threads)
            if pool is None:   # the first call, or OpenBLAS's thread count changed
                for old in _cpu_pool.values():
                    old.shutdown(wait=False)
                _cpu_pool.clear()
                pool = _cpu_pool[threads] = ThreadPoolExecutor(threads)
            futures = [pool.submit(fn, items[a:b]) for a, b in zip(bounds, bounds[1:])]
            wait(futures)   # all of them, also when one raises
            return [f.result() for f in futures]
        finally:
            _OPENBLAS[1](threads)


def _cpu_col_blocks(x, kh, kw, stride, padding, dtype, fn, zero=None):
    """fn(images, cols) for blocks of a few images of NCHW-shaped NumPy x (any memory layout), images a
    slice of them and cols their (images*Ho*Wo, kh*kw*C) unfolded rows in `dtype`; returns the sum of fn's
    results from `zero`, an array of zeros (None: fn returns None). Each block is zero-padded
    channels-last into a reused buffer (only its interior is rewritten, so the border stays zero) and
    unfolded into another of about 8 MB, both staying in cache; _cpu_parallel's threads take the blocks,
    with buffers of their own. On the CPU the whole unfolded matrix (kh*kw times the activations) costs
    more in memory traffic than the products: a 3x3 conv 64->64 at 64x32x32 took 57 ms forward, 30 in
    blocks on one thread (2 cores; 1 MB blocks 34 ms, 16 MB 29)."""
    n, c, h, w = x.shape
    ph, pw = padding
    ho, wo = _conv_output(h, w, (kh, kw), stride, padding)
    step = max(1, min(n, _CPU_BLOCK_BYTES // max(1, ho * wo * kh * kw * c * dtype.itemsize)))

    def run(starts):
        padded = np.zeros((step, h + 2 * ph, w + 2 * pw, c), dtype)
        buffer = np.empty((step * ho * wo, kh * kw * c), dtype)
        total = zero
        for n0 in starts:
            m = min(step, n - n0)
            padded[:m, ph:ph + h, pw:pw + w] = x[n0:n0 + m].transpose(0, 2, 3, 1)
            cols = buffer[:m * ho * wo]
            cols.reshape(m, ho, wo, kh, kw, c)[...] = _windows(padded[:m], kh, kw, stride)
            result = fn(slice(n0, n0 + m), cols)
            total = None if zero is None else total + result
        return total
    totals = _cpu_parallel(run, range(0, n, step))
    return None if zero is None else sum(totals, zero)


def _cpu_conv(x, flat_weight, kh, kw, stride, padding, bias):
    """im2col(x) flat_weight^T + bias as (N, Ho*Wo, C_out) rows, through _cpu_col_blocks."""
    n, _, h, w = x.shape
    out = np.empty((n, math.prod(_conv_output(h, w, (kh, kw), stride, padding)), flat_weight.shape[0]), flat_weight.dtype)

    def product(images, cols):
        y = out[images].reshape(len(cols), -1)
        np.matmul(cols, flat_weight.T, out=y)
        if bias is not None:
            y += bias   # while the block is in cache
    _cpu_col_blocks(x, kh, kw, stride, padding, flat_weight.dtype, product)
    return out


def _compute_dtype(x):
    """Matrix products run in x's dtype, except float16 on the CPU (NumPy has no float16 GEMM)."""
    return np.dtype(np.float32) if x.dtype == np.float16 and _xp(x) is np else x.dtype


def _weight_grad(cols, dy, weight_shape, tf32):
    """dW (C_out, C, kh, kw) = dy^T cols on the GPU: a reduction over N*Ho*Wo rows, which cuBLAS runs slowly as one
    product when the result is small (the whitening conv: 12 x 24 over a million rows), so it runs as a stack of
    products over row chunks in float32, which conv_dw_fold sums in order, also reordering (C_out, kh*kw*C) to dW's
    axes and rounding to dy's dtype (CuPy's sum over the chunks, cast and transposing copy took 45-50 us of 256->256
    at 7x7's backward on the H200). The chunks' products as (C_out, K) in float16, (K, C_out) in float32: cuBLAS's
    picks for train_cifar.py's 64->256 and 256->256 at 7x7 ran 5-10% faster so in float16, 12-15% slower in TF32."""
    (rows, k), cout = cols.shape, weight_shape[0]
    chunks = 1
    while chunks < 64 and rows % (2 * chunks) == 0 and rows // (2 * chunks) >= 4096:
        chunks *= 2
    dy_chunks, col_chunks, k_major = dy.reshape(chunks, -1, cout), cols.reshape(chunks, -1, k), dy.dtype == np.float32
    a, b = (col_chunks.transpose(0, 2, 1), dy_chunks) if k_major else (dy_chunks.transpose(0, 2, 1), col_chunks)
    return _folded_weight_grad(_matmul(a, b, out_dtype=_acc_dtype(dy.dtype), tf32=tf32), weight_shape, dy.dtype, k_major)


def _folded_weight_grad(parts, weight_shape, dtype, k_major=False):
    """dW (C_out, C, kh, kw) in dtype from a stack of float partial sums on the GPU, (splits, C_out, K) or, k_major,
    (splits, K, C_out), K in (i, j, c) order: summed in order of the splits by conv_dw_fold, composed without it
    (float64, or no kernels.cu)."""
    cout, c, kh, kw = weight_shape
    fold = _kernel('conv_dw_fold', dtype)
    if fold is None:
        flat = parts.sum(axis=0).T if k_major else parts.sum(axis=0)
        return cp.ascontiguousarray(flat.reshape(cout, kh, kw, c).transpose(0, 3, 1, 2), dtype)
    dw = cp.empty(weight_shape, dtype)
    args = (parts, *_int32s(len(parts)), dw) + _int32s(c, cout, kh, kw, k_major)
    _launch_flat(fold, parts[0].size, 1, args)
    return dw


# kernels.cu's direct:: limits (KMAX window values, COMAX output channels) and work per thread (CT output
# channels forward, a KT x CT tile of dW's sums, CI channels of dx)
_DIRECT_WINDOW, _DIRECT_OUTPUTS, _DIRECT_KT, _DIRECT_CT, _DIRECT_CI = 32, 128, 4, 8, 4


def _direct_conv(x, weight_shape):
    """Whether the GPU runs this conv on kernels.cu's direct kernels: windows of at most 32 values, whose
    products are too thin for cuBLAS (the whitening conv's 12-wide forward product took 295 us in TF32 on the
    H200, for 94 MB written), and at most 128 output channels."""
    cout, c, kh, kw = weight_shape
    return c * kh * kw <= _DIRECT_WINDOW and cout <= _DIRECT_OUTPUTS and _fused(x, 'conv_direct_fwd', x.dtype) is not None


def _element_strides(a):
    return _int64s(*(step // a.itemsize for step in a.strides))


def _implicit_conv(x, weight_shape, pixels, tf32):
    """Whether the GPU runs this conv on kernels.cu's implicit GEMM (float16, or float32 as TF32 where tf32 allows it,
    on the tensor cores; im2col's matrix, 9x the activations of a 3x3 conv, is never written): channel counts that
    are multiples of a 16-byte granule (copies within one tap), windows larger than 1x1 (a 1x1 conv's matrix is x
    itself), arrays of fewer than 2^31 elements (32-bit offsets). Its kernels reach 250-450 TFLOP/s in float16 where
    cuBLAS's products reach 500-700, so they win where the unfolding costs more than that; where they measured faster
    in bench.py's fwd+bwd on the H200 with each route forced (PERF_NOTES.md): float16 with at most 64 output channels
    or few pixels (64->64 at 15x15, 256->256 at 3x3), and on wgmma with reductions of 2048 or more (256->256 at 7x7,
    not 64->256 at 15x15); TF32 on wgmma at every shape, on mma.sync as float16."""
    cout, c, kh, kw = weight_shape
    granule = 16 // x.dtype.itemsize
    wgmma = _fused(x, 'conv_implicit_wg', x.dtype, *_IMPLICIT_WG[1]) is not None
    return ((x.dtype == np.float16 or x.dtype == np.float32 and tf32) and c % granule == 0 and cout % granule == 0
            and kh * kw > 1
            and (cout <= 64 or pixels <= 16384 or wgmma and (x.dtype == np.float32 or c * kh * kw >= 2048))
            and max(x.size, pixels * cout, cout * c * kh * kw) < 2 ** 31
            and _fused(x, 'conv_implicit_fwd', x.dtype, *_IMPLICIT_TILES[0]) is not None)


_driver = []   # [the driver library, the kernel-argument dtype of a CUtensorMap], or [None, None]
_u32, _u64, _i32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int
_ENCODE_ARGUMENTS = {   # the C types of cuTensorMapEncode<name>'s arguments after the map (a tuple: an array of them)
    'Tiled': (_i32, _u32, ctypes.c_void_p, _u64, _u64, _u32, _u32, _i32, _i32, _i32, _i32),
    'Im2col': (_i32, _u32, ctypes.c_void_p, _u64, _u64, _i32, _i32, _u32, _u32, _u32, _i32, _i32, _i32, _i32)}


@functools.lru_cache(maxsize=512)
def _tensor_map(encode, *args):
    """A CUtensorMap (128 opaque bytes, 64-byte aligned) from the driver's cuTensorMapEncode<encode>(map, *args) (ints,
    and tuples of ints for its arrays) through ctypes, as a kernel argument passed by value; None where the driver or
    CuPy cannot. A map encodes only an address and a layout, so one is remembered per argument list: a training
    step's arrays come back at the same addresses, and encoding took about 10 us of Python a map."""
    if not _driver:   # one assignment: threads racing here set the same pair
        try:
            opaque = np.dtype([('opaque', np.uint64, (16,))])
            _driver[:] = ctypes.CDLL('libcuda.so.1'), cp.make_aligned_dtype(opaque, alignment=64)
        except (OSError, AttributeError):
            _driver[:] = None, None
    driver, map_dtype = _driver
    if driver is None:
        return None
    buffer = np.zeros(24, np.uint64)
    tensor_map = buffer[(-buffer.ctypes.data % 64) // 8:][:16]
    c_args = [(kind * len(a))(*a) if isinstance(a, tuple) else kind(a)
              for kind, a in zip(_ENCODE_ARGUMENTS[encode], args, strict=True)]
    status = getattr(driver, 'cuTensorMapEncode' + encode)(ctypes.c_void_p(tensor_map.ctypes.data), *c_args)
    if status:
        raise RuntimeError(f"cuTensorMapEncode{encode}: CUDA driver error {status}")
    return np.frombuffer(tensor_map.tobytes(), map_dtype)[0]


def _tma_products(xh, w2, kernel_size, stride, padding, bias, y):
    """y = im2col(xh) w2^T (+ bias) on conv_implicit_tma, where the GPU has it and x's channels fill whole 128-byte
    rows (a k-step in one tap), within the TMA's limits (strides up to 8, window corners within 127 pixels, no empty
    dimension): its im2col loads (x as (C, W, H, N): BM pixels at a tap, the padding read as zeros) and tiled loads of
    w2 (as (K, C_out)) come from tensor maps. False where it does not run."""
    n, h, w, c = xh.shape
    (kh, kw), (cout, k), size = kernel_size, w2.shape, xh.itemsize
    tile_n, m_tiles, stages = tile = _IMPLICIT_TMA[cout > 64]
    kernel = _kernel('conv_implicit_tma', xh.dtype, *tile)
    if kernel is None or not xh.size or c % (128 // size) or max(stride) > 8 or max(kh, kw) + max(padding) >= 128:
        return False
    common = (0, 3, 2, 0)   # no interleave, the 128-byte swizzle, L2 lines of 128 bytes, zeros
    element = {2: 6, 4: 7}[size]   # CU_TENSOR_MAP_DATA_TYPE_FLOAT16, _FLOAT32
    x_map = _tensor_map('Im2col', element, 4, xh.data.ptr, (c, w, h, n), (c * size, w * c * size, h * w * c * size),
                        (-padding[1], -padding[0]), (padding[1] - kw + 1, padding[0] - kh + 1), 128 // size,
                        128 * m_tiles, (1, stride[1], stride[0], 1), *common)
    w_map = _tensor_map('Tiled', element, 2, w2.data.ptr, (k, cout), (k * size,), (128 // size, tile_n), (1, 1),
                        *common)
    if x_map is None:
        return False
    ho, wo = y.shape[1:3]
    _launch_with_smem(kernel, (-(-n * ho * wo // (128 * m_tiles)), -(-cout // tile_n)), 384,
                      (x_map, w_map, bias, y) + _int32s(n, h, w, c, cout, ho, wo, kh, kw, *stride, *padding),
                      stages * (128 * m_tiles + tile_n) * 128 + 1024 + 16 * stages)
    return True


def _implicit_products(xh, flat_weight, kernel_size, stride, padding, bias=None):
    """im2col(xh) flat_weight^T (+ bias) as an (N, Ho, Wo, C_out) array, for channels-last xh, on conv_implicit_tma or
    conv_implicit_wg (wgmma) where the GPU has them, else conv_implicit_fwd."""
    n, h, w, c = xh.shape
    (kh, kw), cout = kernel_size, flat_weight.shape[0]
    ho, wo = _conv_output(h, w, kernel_size, stride, padding)
    y = cp.empty((n, ho, wo, cout), xh.dtype)
    if not y.size:
        return y
    xh, flat_weight = _aligned(xh), _aligned(flat_weight)
    if _tma_products(xh, flat_weight, kernel_size, stride, padding, bias, y):
        return y
    args = (xh, flat_weight, bias, y) + _int32s(n, h, w, c, cout, ho, wo, kh, kw, *stride, *padding)
    tile_n, m_tiles, stages = tile = _IMPLICIT_WG[cout > 64]
    hopper = _kernel('conv_implicit_wg', xh.dtype, *tile)
    if hopper is not None:   # 128-byte k-steps in 1024-byte aligned tiles (conv2d refuses C = 0: no k-steps)
        _launch_with_smem(hopper, (-(-n * ho * wo // (128 * m_tiles)), -(-cout // tile_n)), 256, args,
                          stages * (128 * m_tiles + tile_n) * 128 + 1024)
        return y
    tile_m, tile_n, warp_m, warp_n = tile = _IMPLICIT_TILES[cout > 32]
    _launch_with_smem(_kernel('conv_implicit_fwd', xh.dtype, *tile), (-(-n * ho * wo // tile_m), -(-cout // tile_n)),
                      32 * (tile_m // warp_m) * (tile_n // warp_n), args,   # 16-byte copies from 16-byte boundaries
                      _IMPLICIT_STAGES * (tile_m + tile_n) * _IMPLICIT_BK_BYTES)
    return y


def _implicit_weight_grad(xh, dy, weight_shape, stride, padding):
    """dW (C_out, C, kh, kw) from channels-last xh and dy (N, Ho, Wo, C_out): float sums over splits of the rows
    (waves of blocks, at least 512 rows each) by conv_implicit_wg_dw (wgmma) where the GPU has it, else by
    conv_implicit_dw (two waves), folded in order by conv_dw_fold."""
    (cout, c, kh, kw), (n, h, w, _), (ho, wo) = weight_shape, xh.shape, dy.shape[1:3]
    rows, k = n * ho * wo, kh * kw * c
    if rows == 0:
        return cp.zeros(weight_shape, xh.dtype)
    tile_o, tile_k, stages, waves = _IMPLICIT_WG_DW[_C_TYPES[xh.dtype]][cout > 64]
    kernel, threads = _kernel('conv_implicit_wg_dw', xh.dtype, tile_o, tile_k, stages), _BLOCK
    if kernel is not None:   # 128-byte rows in 1024-byte aligned tiles; TF32: its mbarriers, 512 threads
        smem = stages * (tile_o + tile_k) * 128 + 1024
        if xh.dtype == np.float32:
            smem, threads = smem + 16 * stages, 2 * _BLOCK
    else:
        (tile_o, tile_k), waves = _IMPLICIT_DW_TILES[_C_TYPES[xh.dtype]][cout > 64], 2
        smem = _IMPLICIT_STAGES * _IMPLICIT_WM * (tile_o + tile_k) * xh.itemsize
        kernel = _kernel('conv_implicit_dw', xh.dtype, tile_o, tile_k)
    tiles = (-(-k // tile_k), -(-cout // tile_o))
    resident = _resident_blocks(_allow_smem(kernel, smem), smem, threads)
    # whole waves (rounded down): no last wave of a few blocks
    splits = max(1, min(waves * resident // (tiles[0] * tiles[1]), rows // 512))
    rows_per_split = -(-rows // splits)
    splits = -(-rows // rows_per_split)
    part = cp.empty((splits, cout, k), np.float32)
    kernel(tiles + (splits,), (threads,), (_aligned(xh), _aligned(dy), part) + _int64s(rows_per_split)
           + _int32s(n, h, w, c, cout, ho, wo, kh, kw, *stride, *padding), shared_mem=smem)
    return _folded_weight_grad(part, weight_shape, xh.dtype)


def _flipped(flat_weight, kh, kw):
    """The weight of a stride-1 conv's input gradient as a conv of dy: flipped[c, (i, j, o)] = W[o, c, kh - 1 - i,
    kw - 1 - j], from flat_weight[o, (i, j, c)]."""
    cout, c = flat_weight.shape[0], flat_weight.shape[1] // (kh * kw)
    return _xp(flat_weight).ascontiguousarray(
        flat_weight.reshape(cout, kh, kw, c)[:, ::-1, ::-1].transpose(3, 1, 2, 0).reshape(c, -1))


def _weight_layouts(weight, with_flip):
    """A conv weight (C_out, C, kh, kw) as the products' (C_out, (i, j, c)) matrix and, where `with_flip`, also as
    the stride-1 input gradient's (C, (i, j, o)) matrix (_flipped), else None. On the GPU one conv_weight_layouts
    launch writes both (the flip as CuPy's strided copy took about 30 us of Python a backward on the H200's host)."""
    cout, c, kh, kw = weight.shape
    kernel = _fused(weight, 'conv_weight_layouts', weight.dtype)
    if kernel is None:
        flat = _nhwc(weight).reshape(cout, -1)
        return flat, _flipped(flat, kh, kw) if with_flip else None
    flat = cp.empty((cout, kh * kw * c), weight.dtype)
    flip = cp.empty((c, kh * kw * cout), weight.dtype) if with_flip else None
    _launch_flat(kernel, weight.size, 1, (weight, *_element_strides(weight), flat, flip)
                 + _int32s(*weight.shape))
    return flat, flip


def _direct_launch(name, count, args):
    """conv_direct_<name> over `count` threads' work, at most four waves of resident blocks looping."""
    kernel = _kernel('conv_direct_' + name, args[0].dtype)
    kernel((max(1, min(-(-count // _BLOCK), 4 * _resident_blocks(kernel))),), (_BLOCK,), args)


class Convolution(Function):
    """Cross-correlation as a matrix product over the unfolded input, channels-last: cols
    (N*Ho*Wo, kh*kw*C) times the weight as (C_out, kh*kw*C); the output is NCHW-shaped in channels-last
    memory. Backward: dx = col2im(dy W), dW = cols^T dy, db = sum dy. The GPU unfolds once and keeps cols
    for dW, or for small windows (_direct_conv) reads x and dy in place, or in float16 (float32 as TF32) where
    it measured faster (_implicit_conv) multiplies without unfolding: the forward, a stride-1 dx as the forward
    of dy with the flipped weight, and dW each in one implicit-GEMM kernel. The CPU unfolds a few images at a
    time (_cpu_col_blocks), again for dW, except with stride 1 (_cpu_stride1_backward): it unfolds dy instead,
    padded by k - 1 - p, for dx (col2im's strided adds and the K = C_out product took 70 ms of a 3x3 conv's
    180 on 2 cores) and dW both."""
    saves = 'others'   # dx reads the weight, dW reads x; no gradient reads the bias

    def forward(self, x, weight, bias=None, *, stride, padding):
        n, c, h, w = x.shape
        cout, _, kh, kw = weight.shape
        self.shape, self.dtype, self.kernel, self.stride, self.padding = x.shape, x.dtype, (kh, kw), stride, padding
        self.tf32 = allow_tf32   # as at the forward, for the backward too
        ho, wo = _conv_output(h, w, (kh, kw), stride, padding)
        self.direct = _xp(x) is not np and _direct_conv(x, weight.shape)
        if self.direct:
            self.weight, self.x, self.pixels = cp.ascontiguousarray(weight), x if self.needs_grad[1] else None, n * ho * wo
            self.channels_last = _channels_last(x) and not x.flags.c_contiguous   # dx's layout
            self.sizes = _int32s(n, c, h, w, cout, ho, wo, kh, kw, *stride, *padding)
            y = cp.empty((n, ho, wo, cout), x.dtype)
            bias = None if bias is None else cp.ascontiguousarray(bias, x.dtype)
            _direct_launch('fwd', n * ho * wo * -(-cout // _DIRECT_CT), (x, *_element_strides(x), self.weight, bias, y) + self.sizes)
            return y.transpose(0, 3, 1, 2)
        ct, cpu = _compute_dtype(x), _xp(x) is np
        self.implicit = not cpu and _implicit_conv(x, weight.shape, n * ho * wo, self.tf32)
        # dx = dy, padded by k - 1 - p, conv the flipped W (on the CPU and the implicit GEMM)
        self.dx_as_conv = stride == (1, 1) and padding[0] < kh and padding[1] < kw and (cpu or self.implicit)
        self.flat_weight, self.flipped = _weight_layouts(weight.astype(ct, copy=False),
                                                         self.dx_as_conv and self.recording and self.needs_grad[0])
        if self.implicit:
            xh = _nhwc(x)
            self.x = xh if self.needs_grad[1] else None
            return _implicit_products(xh, self.flat_weight, (kh, kw), stride, padding,
                                      None if bias is None else cp.ascontiguousarray(bias)).transpose(0, 3, 1, 2)
        if cpu:
            self.x = x if self.needs_grad[1] else None
            y = _cpu_conv(x, self.flat_weight, kh, kw, stride, padding,
                          None if bias is None else bias.astype(ct, copy=False))
            bias = None   # added by _cpu_conv, a block at a time
        else:
            cols = _im2col(x.astype(ct, copy=False), kh, kw, stride, padding)
            self.cols = cols if self.needs_grad[1] else None
            y = _matmul(cols, self.flat_weight.T, tf32=self.tf32)
        if bias is not None:
            y += bias.astype(ct, copy=False)
        return y.astype(x.dtype, copy=False).reshape(n, ho, wo, cout).transpose(0, 3, 1, 2)

    def backward(self, g):
        if self.direct:
            return self._direct_backward(g.astype(self.dtype, copy=False))
        (kh, kw), (n, c, _, _), cout = self.kernel, self.shape, self.flat_weight.shape[0]
        (ph, pw), cpu = self.padding, _xp(g) is np
        if cpu and self.needs_grad[0] and self.dx_as_conv:
            return self._cpu_stride1_backward(g)
        dy_image = _nhwc(g.astype(self.flat_weight.dtype, copy=False))
        dy = dy_image.reshape(-1, cout)
        dx = dw = db = None
        if self.needs_grad[0]:
            if self.dx_as_conv:   # on the implicit GEMM (the CPU's returned above)
                dx = _implicit_products(dy_image, self._saved(self.flipped), (kh, kw), (1, 1),
                                        (kh - 1 - ph, kw - 1 - pw)).transpose(0, 3, 1, 2)
            else:
                dx = _col2im_image(_matmul(dy, self.flat_weight, tf32=self.tf32), self.shape, kh, kw, self.stride, self.padding).astype(self.dtype, copy=False)
        if self.needs_grad[1] and self.implicit:
            dw = _implicit_weight_grad(self.x, dy_image, (cout, c, kh, kw), self.stride, self.padding)
        elif self.needs_grad[1]:
            if cpu:
                dy_images = dy.reshape(n, g.shape[2] * g.shape[3], cout)
                flat = _cpu_col_blocks(self.x, kh, kw, self.stride, self.padding, dy.dtype,
                                       lambda images, cols: cols.T @ dy_images[images].reshape(len(cols), cout),
                                       np.zeros((kh * kw * c, cout), dy.dtype))
                dw = flat.reshape(kh, kw, c, cout).transpose(3, 2, 0, 1).astype(self.dtype)
            else:
                dw = _weight_grad(self.cols, dy, (cout, c, kh, kw), self.tf32).astype(self.dtype, copy=False)
        if len(self.needs_grad) > 2 and self.needs_grad[2]:
            # a column sum over N*Ho*Wo rows as a product with ones: CuPy's reduction would run it on
            # as few blocks as there are channels (8.7 ms against 0.04 ms for the whitening conv on the H200)
            ones = _xp(dy).ones((1, dy.shape[0]), dy.dtype)
            db = _matmul(ones, dy, out_dtype=_acc_dtype(dy.dtype))[0].astype(self.dtype)
        return dx, dw, db

    def _direct_backward(self, g):
        """dx from conv_direct_dx, in x's memory layout; dW and db from conv_direct_dw's partial sums per block
        (db alone: Kw = 0), folded by conv_direct_dw_fold."""
        (n, c, h, w), (cout, _, kh, kw) = self.shape, self.weight.shape
        wants_db = len(self.needs_grad) > 2 and self.needs_grad[2]
        dx = dw = db = None
        g_strides = _element_strides(g)
        if self.needs_grad[0]:
            dx = cp.empty((n, h, w, c) if self.channels_last else (n, c, h, w), self.dtype)
            _direct_launch('dx', n * h * w * -(-c // _DIRECT_CI), (g, *g_strides, self.weight, dx) + _int32s(self.channels_last) + self.sizes)
            dx = dx.transpose(0, 3, 1, 2) if self.channels_last else dx
        if self.needs_grad[1] or wants_db:
            window = c * kh * kw if self.needs_grad[1] else 0
            per_block = (window // _DIRECT_KT + 1) * -(-cout // _DIRECT_CT) * _DIRECT_KT * _DIRECT_CT
            kernel = _kernel('conv_direct_dw', self.dtype)
            blocks = max(1, min(_resident_blocks(kernel), self.pixels // _BLOCK))
            partials = cp.empty(blocks * per_block, _acc_dtype(self.dtype))
            x = self.x if self.needs_grad[1] else g   # for db alone the kernel reads no window value
            kernel((blocks,), (_BLOCK,), (x, *_element_strides(x), g, *g_strides, partials) + _int32s(window)
                   + self.sizes)
            dw = cp.empty(self.weight.shape, self.dtype) if self.needs_grad[1] else None
            db = cp.empty(cout, self.dtype) if wants_db else None
            _kernel('conv_direct_dw_fold', self.dtype)((-(-per_block // 32),), (_BLOCK,), (
                partials, *_int32s(blocks), dw, db) + _int32s(window, c, cout, kh, kw))
        return dx, dw, db

    def _cpu_stride1_backward(self, g):
        """dx, dW and db of a stride-1 conv on the CPU (where dx is wanted: otherwise unfolding x, C channels
        to dy's C_out, is the cheaper way to dW) from one unfolding of dy padded by k - 1 - p,
        cols[(n, h, w), (i, j, o)] = dy[n, o, h + i - (k - 1 - p), w + j - (k - 1 - p)]: dx = cols flipped^T
        with flipped[c, (i, j, o)] = W[o, c, k - 1 - i, k - 1 - j], and dW[o, c, k - 1 - i, k - 1 - j] =
        (cols^T x)[(i, j, o), c], x as (H*W, C) rows per image (a view of NCHW or channels-last memory: a
        product per image costs less than copying x channels-last)."""
        (kh, kw), (n, c, h, w), (ph, pw) = self.kernel, self.shape, self.padding
        cout, ct, flipped = self.flat_weight.shape[0], self.flat_weight.dtype, self._saved(self.flipped)
        dx = np.empty((n, h * w, c), ct)

        def products(images, cols):
            np.matmul(cols, flipped.T, out=dx[images].reshape(len(cols), c))
            if self.needs_grad[1]:
                x = self.x[images].astype(ct, copy=False)
                rows = x.transpose(0, 2, 3, 1).reshape(len(x), h * w, c)
                return np.matmul(cols.reshape(len(x), h * w, kh * kw * cout).transpose(0, 2, 1), rows).sum(axis=0)
        dw = _cpu_col_blocks(g, kh, kw, (1, 1), (kh - 1 - ph, kw - 1 - pw), ct, products,
                             np.zeros((kh * kw * cout, c), ct) if self.needs_grad[1] else None)
        if dw is not None:
            dw = dw.reshape(kh, kw, cout, c)[::-1, ::-1].transpose(2, 3, 0, 1).astype(self.dtype)
        dx = dx.astype(self.dtype, copy=False).reshape(n, h, w, c).transpose(0, 3, 1, 2)
        db = _sum(g, (0, 2, 3)) if len(self.needs_grad) > 2 and self.needs_grad[2] else None
        return dx, dw, db


def _pool_rows(a, channels_last):
    """An NCHW-shaped array's memory as the (N', H, W, C') array the pooling kernels read, (N, H, W, C)
    for channels-last and (N*C, H, W, 1) for NCHW memory, and the inverse for a result of that layout."""
    n, c = a.shape[:2]
    if channels_last:
        return _nhwc(a), lambda r: r.transpose(0, 3, 1, 2)
    return cp.ascontiguousarray(a).reshape(n * c, *a.shape[2:], 1), lambda r: r.reshape(n, c, *r.shape[1:3])


_pool_configs = {}   # see _Pool._forward_config


class _Pool(Function):
    """Pooling over windows. Composed: the windows as a view (_windows) and their adjoint (_col2im). On
    the GPU: one kernel forward (name_fwd: x, y, outputs kept for backward) and one backward
    (name_bwd: dy, what forward kept, dx), run on x's own memory layout."""
    saves = ()

    def forward(self, x, kernel, stride):
        n, c, h, w = x.shape
        self.shape, self.kernel, self.stride = x.shape, kernel, stride
        self.sizes = *_conv_output(h, w, kernel, stride, (0, 0)), *kernel, *stride
        self.fused = kernel[0] * kernel[1] < 256 and _fused(x, self.name + '_fwd', x.dtype, 1) is not None
        if not self.fused:
            return self.composed_forward(_windows(x.transpose(0, 2, 3, 1), *kernel, stride)).transpose(0, 3, 1, 2)
        self.channels_last, dense, y_rows, width, forward, sizes = self._forward_config(x)
        y = cp.empty(y_rows, x.dtype)
        self.kept = self.kept_for_backward(y, width, kernel)
        xk = x if dense else cp.ascontiguousarray(x)   # the kernel reads x's memory as the image, whatever its shape
        _launch_flat(forward, y.size // width, 1, (xk, y) + self.kept + sizes)
        return y.transpose(0, 3, 1, 2) if self.channels_last else y.reshape(n, c, *self.sizes[:2])

    def backward(self, g):
        n, c, h, w = self.shape
        if not self.fused:
            dwin = self.composed_backward(g.transpose(0, 2, 3, 1))                 # N, Ho, Wo, kh, kw, C
            return _col2im(dwin, (n, h, w, c), self.stride).transpose(0, 3, 1, 2)
        kept = tuple(self._saved(a) for a in self.kept)
        gk, shaped = _pool_rows(g, self.channels_last)
        dx = cp.empty((gk.shape[0], h, w, gk.shape[3]), g.dtype)
        tiles = all(s >= k for s, k in zip(self.stride, self.kernel))   # kernels.cu: a thread per gk pack
        self._launch('_bwd', dx, (gk,) + kept + (dx,), gk if tiles else dx)
        return shaped(dx)

    def _forward_config(self, x):
        """(channels-last, whether x's memory is the (N', H, W, C') image as it is (else a C-contiguous copy is), y's
        shape as (N', Ho, Wo, C'), the pack width, the kernel and its size arguments) of the forward over an x of
        this shape, layout, dtype and 16-byte alignment: made once per case, as a training step asks the same each
        time (with x handed to the kernel as it is: the public forward's Python 30.8 -> 23.4 us a call on an H200
        host)."""
        key = (self.name, x.shape, x.strides, x.dtype, x.data.ptr % 16, self.kernel, self.stride,
               cp.cuda.runtime.getDevice())
        if key not in _pool_configs:
            if len(_pool_configs) >= 4096:   # inputs of ever new shapes: start over rather than grow without bound
                _pool_configs.clear()
            channels_last, (n, c, h, w) = _channels_last(x), x.shape
            dense = channels_last or x.flags.c_contiguous
            image = (n, h, w, c) if channels_last else (n * c, h, w, 1)
            v = 16 // x.itemsize
            # y and a copy are fresh allocations (CuPy's pool hands out 512-byte aligned blocks)
            width = v if image[3] % v == 0 and (x.data.ptr % 16 == 0 or not dense) else 1
            _pool_configs[key] = (channels_last, dense, (image[0], *self.sizes[:2], image[3]), width,
                                  _kernel(self.name + '_fwd', x.dtype, width), _int32s(*image, *self.sizes))
        return _pool_configs[key]

    def kept_for_backward(self, y, width, kernel):
        return ()

    def _launch(self, suffix, image, args, out):
        """One thread per 16-byte pack of `out` (as many elements as `args` allow); `image` is the (N', H, W, C')
        input-sized array."""
        width = _width(out.dtype, image.shape[3], *[a for a in args if a.dtype == out.dtype])
        sizes = _int32s(*image.shape, *self.sizes)
        _launch_flat(_kernel(self.name + suffix, out.dtype, width), out.size // width, 1, args + sizes)


class MaxPool(_Pool):
    """Window maxima; the gradient goes to each window's first maximum, or its last NaN (PyTorch's choice)."""
    name = 'max_pool2d'

    def kept_for_backward(self, y, width, kernel):
        """The index buffer of each output's window tap (kernels.cu: 2 bits each where windows have at most 4
        taps and the forward runs packs of 4 or more), and that choice; no buffer (a null pointer: the forward
        writes no taps) where nothing records."""
        packed = kernel[0] * kernel[1] <= 4 and width >= 4
        taps = cp.empty(-(-y.size // 4) if packed else y.size, np.uint8) if self.recording else None
        return (taps,) + _int32s(packed)

    def composed_forward(self, win):
        n, ho, wo, kh, kw, c = win.shape
        flat = win.transpose(0, 1, 2, 5, 3, 4).reshape(n, ho, wo, c, kh * kw)
        xp = _xp(win)
        self.offset = flat.argmax(axis=-1)   # the first largest; as PyTorch's (and kernels.cu's), the last NaN
        out = xp.take_along_axis(flat, self.offset[..., None], axis=-1)[..., 0]
        if flat.dtype.kind == 'f' and (xp is not np or np.isnan(out).any()):   # (the CPU's NaN-free case spared)
            nan = xp.isnan(flat)
            self.offset = xp.where(nan.any(-1), kh * kw - 1 - nan[..., ::-1].argmax(-1), self.offset)
        return out

    def composed_backward(self, g):
        kh, kw = self.kernel
        hit = _xp(g).arange(kh * kw) == self.offset[..., None]
        return (hit * g[..., None]).reshape(g.shape + (kh, kw)).transpose(0, 1, 2, 4, 5, 3)


class AvgPool(_Pool):
    name = 'avg_pool2d'

    def composed_forward(self, win):
        count = self.kernel[0] * self.kernel[1]
        if win.dtype.kind == 'f':
            return _sum(win, (3, 4), scale=1 / count)
        total = _sum(win, (3, 4))   # integers: the mean in their own dtype, rounded toward zero (as PyTorch's int64)
        return (_xp(total).sign(total) * (abs(total) // count)).astype(win.dtype)

    def composed_backward(self, g):
        share = g / g.dtype.type(self.kernel[0] * self.kernel[1])
        return _xp(g).broadcast_to(share[:, :, :, None, None, :], g.shape[:3] + self.kernel + g.shape[3:])


def _log_softmax(x, axis):
    """log_softmax computed in at least float32."""
    xp = _xp(x)
    z = x.astype(np.promote_types(x.dtype, np.float32)) if x.dtype == np.float16 else x
    if z.size == 0:   # nothing to normalise (as PyTorch: an empty result, not an error)
        return z
    z = z - z.max(axis=axis, keepdims=True)
    return z - xp.log(xp.exp(z).sum(axis=axis, keepdims=True))


class LogSoftmaxOp(Function):
    saves, saves_output = (), True

    def forward(self, x, axis):
        self.axis = axis
        self.out = _log_softmax(x, axis).astype(x.dtype)
        return self.out

    def backward(self, g):   # float16 in float32, rounded once (as PyTorch's)
        wide = _wide(g)
        return (wide - _xp(g).exp(_wide(self.out)) * _sum(wide, self.axis, keepdims=True)).astype(g.dtype, copy=False)


class SoftmaxOp(Function):
    saves, saves_output = (), True

    def forward(self, x, axis):
        self.axis = axis
        self.out = _xp(x).exp(_log_softmax(x, axis)).astype(x.dtype)
        return self.out

    def backward(self, g):   # float16 in float32, rounded once (as PyTorch's)
        out, wide = _wide(self.out), _wide(g)
        return (out * (wide - _sum(wide * out, self.axis, keepdims=True))).astype(g.dtype, copy=False)


_CE_MAX_BLOCKS = 2 ** 16   # cross_entropy_fwd's grid at most (a test narrows it)
_CE_REDUCTIONS = {'none': 0, 'sum': 1, 'mean': 2}


class CrossEntropy(Function):
    """Softmax cross-entropy over axis 1 with label smoothing s: the target distribution is
    q = (1 - s) one_hot(target) + s / C, the loss -sum(q log softmax) = lse - (1 - s) x[target] - s mean(x),
    and d loss / d logits = softmax - q. Rows whose target is ignore_index lose 0 and get no gradient, and 'mean'
    averages over the other rows (NaN where none is left), as PyTorch. On the GPU one kernel each way (a warp's
    lanes per row); the forward's kernel also sums the losses (and counts the rows kept) for 'sum' and 'mean' and
    keeps lse only for a backward to come. The target (int64) comes as the second input (or as a parameter)."""
    def forward(self, logits, target, smoothing, reduction, ignore_index=-100):
        xp, (n, classes) = _xp(logits), logits.shape
        self.target, self.smoothing, self.reduction, self.dtype = target, smoothing, reduction, logits.dtype
        self.ignore_index = ignore_index
        kernel = None
        if xp is not np and n:
            logits = cp.ascontiguousarray(logits)
            width = _width(logits.dtype, classes, logits)
            kernel = _kernel('cross_entropy_fwd', logits.dtype, np.int64, width, _CE_UNROLL[_C_TYPES[logits.dtype]])
        self.fused = kernel is not None
        # backward reads the target, and the fused one the logits too (the composed one its own probabilities)
        self.saves = ((0,) if self.fused else ()) + ((1,) if len(self.inputs) > 1 else ())
        if self.fused:
            return self._forward_fused(kernel, logits, width)
        # the fused kernel gives a NaN loss for a target out of range instead of a check that would stall the
        # GPU pipeline every step (PyTorch's CUDA kernel asserts asynchronously)
        self.kept = target != ignore_index
        if bool((((target < 0) | (target >= classes)) & self.kept).any()):
            raise ValueError(f"cross_entropy: targets must lie in [0, {classes}) or be ignore_index ({ignore_index})")
        self.count = int(self.kept.sum())
        logp = _log_softmax(logits, 1)
        self.probs = xp.exp(logp)
        rows = -(1 - smoothing) * xp.take_along_axis(logp, xp.where(self.kept, target, 0)[:, None], axis=1)[:, 0]
        if smoothing:   # not 0 * -inf where a logit is -inf
            rows = rows - smoothing * logp.mean(axis=1)
        rows = xp.where(self.kept, rows, 0)
        if reduction == 'none':
            return rows.astype(self.dtype)
        if reduction == 'mean' and not self.count:   # PyTorch's mean over no rows: NaN
            return xp.full((), np.nan, self.dtype)
        return xp.asarray(rows.sum() / (self.count if reduction == 'mean' else 1)).astype(self.dtype)

    def backward(self, g):
        xp, n = _xp(g), self.target.shape[0]
        a = _acc_dtype(self.dtype)
        if self.fused:
            classes = self.logits.shape[1]
            dx = cp.empty(self.logits.shape, self.dtype)
            _launch_flat(_kernel('cross_entropy_bwd', self.dtype, np.int64, self.width), n * self.lanes, 1,
                         (self.logits, self.target, self._saved(self.lse), cp.ascontiguousarray(g, a).reshape(-1))
                         + _int64s(self.reduction == 'none') + (self.count, dx) + _int32s(n, classes)
                         + _scalars(a.type, self.smoothing) + _int32s(self.lanes) + _int64s(self.ignore_index))
            return dx, None
        d = self.probs - self.smoothing / self.probs.shape[1]
        d[xp.arange(n), xp.where(self.kept, self.target, 0)] -= (1 - self.smoothing) * self.kept
        scale = 1 / max(self.count, 1) if self.reduction == 'mean' else 1.0
        weight = (g.astype(d.dtype) if self.reduction == 'none' else g.astype(d.dtype) * scale) * self.kept
        return (d * weight[:, None]).astype(self.dtype), None   # ignored rows: 0 (NaN logits: NaN, as PyTorch)

    def _forward_fused(self, kernel, logits, width):
        (n, classes), a = logits.shape, _acc_dtype(logits.dtype)
        self.logits, self.target, self.width = logits, cp.ascontiguousarray(self.target, np.int64), width
        self.lanes = min(32, 1 << (max(1, classes // width) - 1).bit_length())   # a power of two >= the row's packs
        self.lse = cp.empty(n, a) if self.recording else None
        # the rows kept, counted by the kernel where a backward of the mean needs it
        self.count = cp.empty((), np.float64) if self.recording and self.reduction == 'mean' else None
        out = cp.empty(n if self.reduction == 'none' else (), logits.dtype)
        # one wave of resident blocks looping over the rows: 94% of the copy rate at 65536x1000 float32 on the
        # H200, a block per 8 rows 83%
        blocks = min(_CE_MAX_BLOCKS, _resident_blocks(kernel), -(-n * self.lanes // _BLOCK))
        kernel((blocks,), (_BLOCK,), (logits, self.target, out, self.lse, self.count) + _reduction_scratch(1, 16 * blocks)
               + _int32s(n, classes) + _scalars(a.type, self.smoothing) + _int32s(self.lanes, _CE_REDUCTIONS[self.reduction])
               + _int64s(self.ignore_index))
        return out


class BinaryCrossEntropy(Function):
    """-(t log x + (1 - t) log(1 - x)) elementwise, each log at least -100, and PyTorch's gradients: (x - t) /
    max(x (1 - x), 1e-12) for x (finite at 0 and 1, where the clamped logs have none), log(1 - x) - log(x) for t.
    float16 computes in float32, rounded once."""
    saves = None

    def forward(self, x, t):
        xp, self.x, self.t = _xp(x), x, t
        w, tw = x.astype(_opmath(x.dtype)), t.astype(_opmath(x.dtype))
        out = (tw - 1) * xp.maximum(xp.log1p(-w), -100) - tw * xp.maximum(xp.log(w), -100)   # log(0): -inf, clamped
        return out.astype(x.dtype)

    def backward(self, g):
        xp, x, t = _xp(g), self.x.astype(_opmath(g.dtype)), self.t.astype(_opmath(g.dtype))
        g = g.astype(x.dtype)
        eps = x.dtype.type(np.float32(1e-12))   # (PyTorch's is a float32 constant in every dtype)
        dx = g * (x - t) / xp.maximum(x * (1 - x), eps) if self.needs_grad[0] else None
        dt = g * (xp.log1p(-x) - xp.log(x)) if self.needs_grad[1] else None
        return tuple(None if d is None else d.astype(self.x.dtype) for d in (dx, dt))


# ================================================================ the Tensor

# pad's modes but 'constant': the position in an axis of n elements that output position i (0 at the axis's start;
# negative in the left padding) reads, i an array
_PAD_READS = {'reflect': lambda i, n: (n - 1) - np.abs((n - 1) - np.abs(i)),
              'replicate': lambda i, n: np.clip(i, 0, n - 1), 'circular': lambda i, n: i % n}

_ValuesIndices = collections.namedtuple('ValuesIndices', 'values indices')   # PyTorch's max(dim=) and min(dim=)


class Tensor:
    """An array (NumPy or CuPy) with the gradient machinery: see README.md's API in brief."""
    __array_ufunc__ = None   # NumPy defers to Tensor's reflected operators

    def __init__(self, data, requires_grad=False, device=None, dtype=None):
        if isinstance(data, Tensor):
            array = data.data.copy()
        elif isinstance(data, (np.ndarray, np.generic)) or (cp is not None and isinstance(data, cp.ndarray)):
            array = _xp(data).asarray(data)   # a NumPy scalar becomes a 0-d array: .data is always an array
            if isinstance(data, np.generic) and dtype is not None:   # checked as a number is (arrays wrap, as PyTorch's)
                _check_data_fits(array, _dtype(dtype))
        else:
            array = _python_data(data, dtype)
        if dtype is not None:
            with np.errstate(over='ignore', invalid='ignore'):   # (past float16's range: inf; NaN to an int: as
                array = array.astype(_dtype(dtype), copy=False)     # PyTorch's, silently)
        _dtype(array.dtype)
        if device is None:
            device = _device_of(array)
        self._data = _move(array, _parse_device(device))
        self.device = _device_of(self._data)
        self._grad, self._ctx, self._requires_grad, self._version, self._held = None, None, False, [0], 0
        self.requires_grad = requires_grad

    @classmethod
    def _wrap(cls, array, device, ctx=None):
        """A tensor of `array`. NumPy ops on 0-d arrays return scalars: on the CPU they become 0-d arrays again
        (in-place ops need one); on the GPU a NumPy scalar is an op's Python-number operand, a kernel argument."""
        t = cls.__new__(cls)
        t._data = np.asarray(array) if device == 'cpu' else array
        t.device, t._grad, t._ctx, t._requires_grad, t._version, t._held = device, None, ctx, ctx is not None, [0], 0
        return t

    # ---- attributes
    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, value):
        """As PyTorch's `x.data = y`: x takes y's array (a Tensor's, or a NumPy or CuPy array itself) with its shape,
        dtype and device, and keeps its history and gradient (a backward refuses a .grad that then no longer fits)."""
        array = value.data if isinstance(value, Tensor) else value
        if isinstance(array, np.generic):   # (NumPy's arithmetic on 0-d arrays gives scalars: p.data - lr * g.data)
            array = np.asarray(array)
        if not isinstance(array, np.ndarray) and not (cp is not None and isinstance(array, cp.ndarray)):
            raise TypeError(f"data must be a Tensor or a NumPy or CuPy array, not {type(value).__name__}")
        if _dtype(array.dtype) not in _FLOATS and self._requires_grad:   # (_dtype: TypeError for one not held)
            raise TypeError(f"data of a tensor that requires grad must be floating point, not {array.dtype}")
        self._data, self.device = array, _device_of(array)

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if not isinstance(flag, (bool, np.bool_)):   # (as PyTorch's: 1 or a tensor is refused)
            raise TypeError(f"requires_grad must be a bool, not {type(flag).__name__}")
        if flag and self.dtype not in _FLOATS:
            raise TypeError(f"only floating-point tensors can require gradients, not {self.dtype}")
        if not flag and self._ctx is not None:
            raise RuntimeError("requires_grad can only be switched off on leaf tensors: use .detach()")
        self._requires_grad = bool(flag)

    @_aliases(requires_grad='flag')
    def requires_grad_(self, flag=True):
        self.requires_grad = flag
        return self

    @property
    def grad(self):
        if self._grad is None and self._ctx is not None and not self._retains_grad:
            warnings.warn("the .grad of a tensor that is not a leaf is being read: backward() does not fill it (as "
                          "PyTorch's); call .retain_grad() on it before the backward, or read the leaf's",
                          UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, grad):   # as PyTorch, checked here: a backward then never meets a .grad it cannot add to
        if grad is not None:
            if not isinstance(grad, Tensor):
                raise TypeError(f"assigned grad must be a Tensor or None, not {type(grad).__name__}")
            for what in ('shape', 'dtype', 'device'):
                if getattr(grad, what) != getattr(self, what):
                    raise RuntimeError(f"assigned grad has a different {what}: {getattr(grad, what)} for a tensor of "
                                       f"{what} {getattr(self, what)}")
        self._grad = grad

    shape = property(lambda self: tuple(self.data.shape))
    ndim = property(lambda self: self.data.ndim)
    dtype = property(lambda self: self.data.dtype)
    is_leaf = property(lambda self: self._ctx is None)
    retains_grad = property(lambda self: self._retains_grad)
    _retains_grad = False   # (retain_grad() sets it on the tensor)
    T = property(lambda self: self.permute(*reversed(range(self.ndim))))
    mT = property(lambda self: self.transpose(-2, -1))   # (PyTorch's: each matrix of a stack transposed)

    def register_hook(self, hook):
        """As PyTorch's: hook(grad) runs when a backward computes this tensor's gradient, before it goes on (to the
        inputs' gradients, or into a leaf's .grad); a tensor it returns (of the gradient's shape) replaces it. Returns
        a handle whose remove() takes the hook off. A hook that raises, or returns another shape, dtype or device,
        stops the backward before any .grad changes."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        return _add_hook(self.__dict__.setdefault('_hooks', {}), hook)

    def retain_grad(self):
        """As PyTorch's: this non-leaf's .grad filled by later backward passes (accumulating, as a leaf's); on a leaf, a
        no-op."""
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._ctx is not None:
            self._retains_grad = True

    def t(self):   # as PyTorch's: the transpose of a matrix; a vector or a number as it is
        if self.ndim > 2:
            raise ValueError(f"t() expects a tensor of at most 2 dimensions, got shape {self.shape}")
        return self.T

    def numel(self):
        return int(self.data.size)

    @_aliases(dim='axis')
    def size(self, axis=None):
        return self.shape if axis is None else self.shape[axis]

    def dim(self):
        return self.ndim

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):   # the rows, as views (PyTorch's unbind)
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __bool__(self):
        return bool(self.item())

    __float__ = lambda self: float(self.item())
    __int__ = lambda self: int(self.item())

    def __index__(self):   # as PyTorch's: range(t), a list indexed by t
        if self.dtype.kind not in 'iu' or self.numel() != 1:
            raise TypeError(f"only integer tensors of a single element can be converted to an index, not {self.dtype} "
                            f"of shape {self.shape}")
        return int(self.item())

    def __format__(self, spec):   # as PyTorch's: f'{loss:.3f}' formats a 0-d tensor's number
        return format(self.item(), spec) if self.ndim == 0 else super().__format__(spec)

    def __array__(self, dtype=None, copy=None):
        return self.numpy() if dtype is None else self.numpy().astype(dtype)

    def __repr__(self):
        """As PyTorch's: 4 decimals (none for whole numbers); the size, device and dtype only where they are not
        the defaults."""
        a = self.numpy()
        notes = [f"size={self.shape}"] if a.size == 0 and a.ndim != 1 else []
        notes += [f"device='{self.device}'"] if self.device != 'cpu' else []
        default = (np.float32,) if a.size == 0 else (np.float32, np.int64, np.bool_)
        notes += [f"dtype={a.dtype}"] if a.dtype not in default else []
        if self._ctx is not None:
            notes.append(f"grad_fn=<{type(self._ctx).__name__}>")
        elif self.requires_grad:
            notes.append('requires_grad=True')
        finite = a[np.isfinite(a)] if a.dtype.kind == 'f' else a
        whole = a.dtype.kind != 'f' or np.all(finite == np.round(finite))
        width = 5 if a.dtype == np.bool_ and not a.all() else 4   # PyTorch pads True only beside a False
        values = np.array2string(a, separator=', ', prefix='tensor(', precision=4, floatmode='maxprec' if whole else
                                 'fixed', formatter={'bool': lambda v: f"{v!s:>{width}}"})
        return f"tensor({', '.join([values] + notes)})"

    # ---- conversion
    def numpy(self):
        """The data as a NumPy array: on the CPU the tensor's own memory (as PyTorch's), read-only where the tensor
        requires grad (PyTorch refuses numpy() there: a write would reach the backward unseen by version counters)."""
        if self.device != 'cpu':
            return cp.asnumpy(self.data)
        if not self._requires_grad:
            return self.data
        view = self.data.view()
        view.flags.writeable = False
        return view

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(f"a tensor with {self.numel()} elements cannot be converted to a Python number")
        return self.numpy().item()

    def tolist(self):
        return self.numpy().tolist()

    def to(self, *args, device=None, dtype=None, non_blocking=False, copy=False):
        """As PyTorch's: this tensor itself where nothing changes, unless copy; non_blocking is taken (copies between
        devices are made in order here)."""
        device, dtype = _device_and_dtype(args, device, dtype)
        out = self
        if dtype is not None and _dtype(dtype) != self.dtype:
            out = Cast.apply(out, dtype=_dtype(dtype))
        if device is not None and _parse_device(device) != self.device:
            out = ToDevice.apply(out, device=_parse_device(device))
        return out.clone() if copy and out is self else out

    def cuda(self, device=None):
        return self.to('cuda' if device is None else f'cuda:{device}')

    def cpu(self):
        return self.to('cpu')

    half = lambda self: self.to(np.float16)
    float = lambda self: self.to(np.float32)
    double = lambda self: self.to(np.float64)
    long = lambda self: self.to(np.int64)
    int = lambda self: self.to(np.int32)
    short = lambda self: self.to(np.int16)
    char = lambda self: self.to(np.int8)
    byte = lambda self: self.to(np.uint8)
    bool = lambda self: self.to(np.bool_)

    def contiguous(self):   # as PyTorch's: itself where its memory is already in row-major order, else a copy
        return self if self.data.flags.c_contiguous else self.clone()

    def detach(self):
        t = Tensor._wrap(self.data, self.device)
        t._version = self._version   # the same memory: in-place changes through either count for both
        return t

    def clone(self):
        return Clone.apply(self)

    # ---- autograd
    @_aliases(gradient='grad')
    def backward(self, grad=None, retain_graph=False):
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad and has no grad_fn")
        if grad is None:
            if self.numel() != 1:
                raise RuntimeError(f"backward() without a gradient needs a one-element tensor; this one has shape "
                                   f"{self.shape}: pass grad= of the same shape")
            grad = _xp(self.data).ones(self.shape, self.dtype)
        else:
            grad = grad if isinstance(grad, Tensor) else Tensor(grad, device=self.device)
            if grad.shape != self.shape:
                raise ValueError(f"backward(): grad of shape {grad.shape} for a tensor of shape {self.shape}")
            if grad.device != self.device:
                raise RuntimeError(f"backward(): grad on {grad.device} for a tensor on {self.device}")
            grad = _as_dtype(grad.data, self.dtype)
        _backward(self, grad, retain_graph)

    def zero_(self):
        """fill_(0): recorded in grad mode where the tensor requires grad (a leaf refused), as PyTorch's."""
        return self.fill_(0)

    # ---- operand plumbing
    def _operand(self, other):
        """`other` as a tensor on this device. As PyTorch promotes, a Python number takes this tensor's dtype,
        or its own (int64, float32) where it is of a higher kind (bool < int < float); an integer out of
        range wraps, a number past a float dtype's range becomes inf (silently, as PyTorch's)."""
        if isinstance(other, Tensor):
            return other
        if isinstance(other, _NUMBERS):
            own = _number_dtype(other)
            dtype = self.dtype if _KIND_RANK[own.kind] <= _KIND_RANK[self.dtype.kind] else own
            # (NumPy warns of the overflow; errstate costs a microsecond, spared where no dtype's range is passed)
            with np.errstate(over='ignore') if abs(other) > _FLOAT16_MAX else _NO_CONTEXT:
                return Tensor._wrap(np.asarray(other).astype(dtype)[()], self.device)
        return Tensor(other, device=self.device)

    def _no_bool_subtraction(self, other):
        """As PyTorch: no - of a bool tensor or a Python bool, with its messages (~ or ^ is what such code means)."""
        bools = self.dtype == np.bool_, isinstance(other, bool) or isinstance(other, Tensor) and other.dtype == bool
        if all(bools):
            raise TypeError("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                            "`logical_xor()` operator instead (as in PyTorch).")
        if any(bools):
            raise TypeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to "
                            "invert a mask, use the `~` or `logical_not()` operator instead (as in PyTorch).")

    def _binary(self, fn, other, reflected=False, **params):
        if fn is Sub:
            self._no_bool_subtraction(other)
        # *, / and //: PyTorch's CPU scalar (the right operand) kept as it is; a number times a tensor is tensor * it
        in_float32 = fn is Mul or (fn is Div or params.get('floor', False)) and not reflected
        if isinstance(other, _NUMBERS) and (self.dtype == np.float16 and in_float32 or
                                            fn is Div and self.dtype.kind != 'f'):
            # as PyTorch's CPU ops: float16 meets a Python number in float32 after *, / and // and rounds the result
            # once (the other ops round the number to float16 first), and an integer tensor is divided by one in
            # float32 (not by the number cast to the tensor's dtype)
            out = self.float()._binary(fn, other, reflected, **params)
            return out.half() if self.dtype == np.float16 else out
        other = self._operand(other)
        a, b = (other, self) if reflected else (self, other)
        _check_broadcast(fn.__name__, a.shape, b.shape)
        if a.dtype == b.dtype and not (fn is Div and a.dtype.kind != 'f'):
            return fn.apply(a, b, **params)
        common = _result_dtype(a, b, divide=fn is Div)
        # as PyTorch, the other operand (0-d, or of integers or bools) is rounded to float16 first, but a
        # one-element right operand of *, / or // (PyTorch's CPU scalar there) meets it in float32
        if common == np.float16:
            scalar = in_float32 and b.numel() == 1
            a, b = (t if t.dtype == common or t is b and scalar else t.to(common) for t in (a, b))
        compute = _opmath(common)   # float16 meets the scalar kept (wider) in float32
        return fn.apply(a.to(compute), b.to(compute), **params).to(common)

    __add__ = lambda self, o: self._binary(Add, o)
    __radd__ = lambda self, o: self._binary(Add, o, True)
    __sub__ = lambda self, o: self._binary(Sub, o)
    __rsub__ = lambda self, o: self._binary(Sub, o, True)
    __mul__ = lambda self, o: self._binary(Mul, o)
    __rmul__ = lambda self, o: self._binary(Mul, o, True)
    __truediv__ = lambda self, o: self._binary(Div, o)

    def __rtruediv__(self, other):
        """other / self; a number over a tensor as PyTorch's: reciprocal() times the number (two roundings)."""
        if not isinstance(other, _NUMBERS):
            return self._binary(Div, other, True)
        inverse = self._binary(Div, 1, True)
        return inverse if other == 1 else inverse * other

    def __pow__(self, other):
        if self.dtype.kind in 'biu' and isinstance(other, (int, np.integer)) and other < 0:   # NumPy would wrap it
            raise RuntimeError(f"{self.dtype} tensor ** {other}: integers to negative integer powers are not allowed")
        if self.dtype == np.bool_ and isinstance(other, bool):   # as PyTorch: x ** True is x, x ** False all True
            return Tensor._wrap(self.data.copy() if other else _xp(self.data).ones_like(self.data), self.device)
        if isinstance(other, _NUMBERS) and not isinstance(other, (bool, np.bool_)):   # Pow's exact forms of numbers
            number = other.item() if isinstance(other, np.generic) else other   # (a NumPy scalar as PyTorch reads it)
            return self._binary(Pow, other, number=number)
        return self._binary(Pow, other)

    __rpow__ = lambda self, o: self._binary(Pow, o, True)
    __mod__ = lambda self, o: self._binary(Remainder, o)
    __rmod__ = lambda self, o: self._binary(Remainder, o, True)
    __floordiv__ = lambda self, o: self._binary(Remainder, o, floor=True)
    __rfloordiv__ = lambda self, o: self._binary(Remainder, o, True, floor=True)

    def __neg__(self):
        if self.dtype == np.bool_:
            raise TypeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                            "invert a mask, use the `~` or `logical_not()` operator instead (as in PyTorch).")
        return Neg.apply(self)

    __abs__ = lambda self: self.abs()

    def __pos__(self):
        if self.dtype == np.bool_:
            raise TypeError("+: not defined for bool tensors (as in PyTorch)")
        return self

    def __matmul__(self, other):
        other = self._operand(other)
        if self.ndim == 0 or other.ndim == 0:
            raise ValueError(f"matmul: both operands need at least one dimension, got shapes {self.shape} and {other.shape}")
        inner_a, inner_b = self.shape[-1], other.shape[-2] if other.ndim > 1 else other.shape[0]
        try:
            np.broadcast_shapes(self.shape[:-2], other.shape[:-2])
        except ValueError:
            inner_b = None
        if inner_a != inner_b:
            raise ValueError(f"matmul: shapes {self.shape} and {other.shape} do not match")
        if self.dtype != other.dtype:
            raise TypeError(f"matmul: dtypes {self.dtype} and {other.dtype} differ")
        if self.dtype == np.bool_:
            raise TypeError("matmul: bool tensors are not supported (as in PyTorch)")
        return MatMul.apply(self, other)

    __rmatmul__ = lambda self, o: self._operand(o).__matmul__(self)
    matmul = __matmul__

    def _inplace(self, op, other):
        """self op= other (op: operator.add, sub, mul, truediv, mod, floordiv or pow), as PyTorch's in-place ops: the
        result in the tensor's dtype (refused where its type is of a higher kind), recorded where autograd records."""
        given, ufunc = other, _INPLACE_UFUNCS.get(op)
        if op is operator.sub:
            self._no_bool_subtraction(other)
        # as in _binary: *= and /= keep a number or one-element operand (PyTorch's CPU scalar) unrounded; += and -=
        # round it to float16 first
        keeps_scalar = op in (operator.mul, operator.truediv)
        number = other if isinstance(other, _NUMBERS) and self.dtype == np.float16 and keeps_scalar else None
        other = self._operand(other)
        result = _result_dtype(self, other, divide=op is operator.truediv)
        if _KIND_RANK[result.kind] > _KIND_RANK[self.dtype.kind]:
            raise TypeError(f"in-place op: result type {result} can't be cast to the tensor's dtype {self.dtype}")
        if other.device != self.device:
            raise RuntimeError(f"in-place op: tensors on {self.device} and {other.device}")
        if _check_broadcast('in-place op', self.shape, other.shape) != self.shape:
            raise ValueError(f"in-place op: shape {other.shape} cannot update a tensor of shape {self.shape}")
        if _GradMode.enabled and (self._requires_grad or other._requires_grad):   # refuses an expanded tensor too
            return self._recorded_update('op', lambda before: op(before, before if given is self else given).to(
                self.dtype))
        self._refuse_expanded('op')
        if ufunc is None:   # %, //, **: the op's own result (its checks: integer division by zero, negative powers)
            self.data[...] = op(self, given).data
        elif other.dtype == self.dtype and number is None:
            with _quiet(self.device):
                getattr(_xp(self.data), ufunc)(self.data, other.data, out=self.data)
        else:   # as PyTorch: both operands in the result's arithmetic dtype, rounded once into the tensor's
            compute = _opmath(result)
            rounded = other.data if keeps_scalar and other.numel() == 1 else other.data.astype(result)
            with np.errstate(all='ignore'):   # (the number's cast is NumPy's on either device)
                operand = compute.type(number) if number is not None else rounded.astype(compute)
                self.data[...] = getattr(_xp(self.data), ufunc)(self.data.astype(compute), operand)
        self._version[0] += 1
        return self

    def _recorded_update(self, what, update):
        """An in-place `what` that autograd records (grad mode, a tensor involved requires grad): update(before),
        made from `before` (this tensor as it was; update reads `before` where it reads this tensor), becomes this
        tensor's data and history. As PyTorch, a leaf that requires grad is refused. That is the in-place update only
        where no live op reaches the tensor's old history through it (`_held`) and nothing else holds its memory, so
        (where PyTorch would keep the old history for such ops and rebase views) this refuses a tensor that a
        recorded op took as an input, that views memory held elsewhere, or whose memory a view, detach(), NumPy array
        or an op's saved value holds (sys.getrefcount of its array against the counts measured at import)."""
        if self._ctx is None and self._requires_grad:
            raise RuntimeError(f"a leaf tensor that requires grad is used in an in-place {what}: wrap it in "
                               "tl.no_grad(), or build the result out of place")
        self._refuse_expanded(what)
        grand = getattr(self.data.base, 'base', None) if self.data.base is not None else None   # its base's base
        if self._held or sys.getrefcount(self.data) > _DATA_ALONE or self.data.base is not None and (
                grand is not None or not isinstance(self.data.base, type(self.data))
                or sys.getrefcount(self.data.base) > _BASE_ALONE):   # the counts: no local holds either array
            raise RuntimeError(f"in-place {what} on a tensor of shape {self.shape} that autograd records, where its "
                               "history or memory is held elsewhere (a recorded op that took it as an input, a view "
                               "of another tensor, a view, detach() or NumPy array of it, an op that keeps it for its "
                               "backward): build the result out of place (x = x + y, tl.where, tl.cat)")
        before = Tensor._wrap(self.data, self.device, self._ctx)
        before._version = self._version
        if '_hooks' in self.__dict__:   # as PyTorch's: a tensor's hooks see the gradient of the value they were put on
            before._hooks = self._hooks
        out = update(before)
        self.__dict__.pop('_hooks', None)   # (only now: a failed update leaves them here)
        if out.data is before.data:   # written in place (SetItem): the graph's `before` keeps the shape, not the memory
            xp = _xp(out.data)
            before.data = xp.broadcast_to(xp.zeros((), out.dtype), out.shape)
        self.data, self._ctx, self._requires_grad, self._version = out.data, out._ctx, out._requires_grad, out._version
        return self

    def _refuse_expanded(self, what, written=None):
        """As PyTorch: no in-place update of a tensor (or of its `written` view) whose elements share memory
        (expand()'s views)."""
        a = self.data if written is None else written
        if _expanded(a):
            raise RuntimeError(f"in-place {what}: {_unwritable(a)}")

    __iadd__ = lambda self, o: self._inplace(operator.add, o)
    __isub__ = lambda self, o: self._inplace(operator.sub, o)
    __imul__ = lambda self, o: self._inplace(operator.mul, o)
    __itruediv__ = lambda self, o: self._inplace(operator.truediv, o)
    __imod__ = lambda self, o: self._inplace(operator.mod, o)
    __ifloordiv__ = lambda self, o: self._inplace(operator.floordiv, o)
    __ipow__ = lambda self, o: self._inplace(operator.pow, o)

    def _untracked(self, what, op, other, integral=False):
        """op(self, other), no gradient, on both operands in the dtype PyTorch computes in, _result_dtype's (int32 ==
        float16 compares in float16; NumPy would in float32); integral: integer and bool tensors only (bitwise ops)."""
        other = self._operand(other)
        if other.device != self.device:
            raise RuntimeError(f"{what} of tensors on {self.device} and {other.device}")
        _check_broadcast(what, self.shape, other.shape)
        common = self.dtype if self.dtype == other.dtype else _result_dtype(self, other)
        if integral and common.kind == 'f':
            raise TypeError(f"{what}: only integer and bool tensors, not {self.dtype} with {other.dtype}")
        with _quiet(self.device):   # (a value past float16's range cast to it: inf, silently)
            a, b = (t.data.astype(common, copy=False) for t in (self, other))
            return Tensor._wrap(op(a, b), self.device)

    def _compare(self, op, other):
        """op(self, other), a bool tensor, where other is a tensor, a number or an array. As PyTorch's, anything else
        (None, a str, a list) is NotImplemented: Python then makes == False, != True and < a TypeError."""
        if not isinstance(other, (Tensor,) + _ARRAYS + _NUMBERS):
            return NotImplemented
        return self._untracked('comparison', op, other)

    __gt__ = lambda self, o: self._compare(operator.gt, o)
    __ge__ = lambda self, o: self._compare(operator.ge, o)
    __lt__ = lambda self, o: self._compare(operator.lt, o)
    __le__ = lambda self, o: self._compare(operator.le, o)
    __eq__ = lambda self, o: self._compare(operator.eq, o)
    __ne__ = lambda self, o: self._compare(operator.ne, o)
    __hash__ = object.__hash__
    __and__ = __rand__ = lambda self, o: self._untracked('&', lambda a, b: a & b, o, integral=True)
    __or__ = __ror__ = lambda self, o: self._untracked('|', lambda a, b: a | b, o, integral=True)
    __xor__ = __rxor__ = lambda self, o: self._untracked('^', lambda a, b: a ^ b, o, integral=True)

    def __invert__(self):
        if self.dtype.kind == 'f':
            raise TypeError(f"~: only integer and bool tensors, not {self.dtype}")
        return Tensor._wrap(~self.data, self.device)

    # ---- elementwise
    _floating = lambda self: self if self.dtype.kind == 'f' else self.float()   # float-only ops take ints as float32
    exp = lambda self: Exp.apply(self._floating())
    log = lambda self: Log.apply(self._floating())
    sqrt = lambda self: Sqrt.apply(self._floating())
    neg = lambda self: -self
    pow = lambda self, exponent: self ** exponent
    tanh = lambda self: TanhOp.apply(self._floating())
    sigmoid = lambda self: SigmoidOp.apply(self._floating())

    def relu(self):
        if self.dtype == np.bool_:
            raise TypeError("relu: bool tensors are not supported (as in PyTorch)")
        return Relu.apply(self)

    # PyTorch's elementwise math: integer and bool tensors give float32, but floor, ceil, round, trunc, sign, square
    # and nan_to_num keep their dtype (square of bools: int64), and isnan, isinf and isfinite give bools
    sin = lambda self: Sin.apply(self._floating())
    cos = lambda self: Cos.apply(self._floating())
    log1p = lambda self: Log1p.apply(self._floating())
    expm1 = lambda self: Expm1.apply(self._floating())
    erf = lambda self: Erf.apply(self._floating())
    reciprocal = lambda self: 1 / self
    # float16 in float32, rounded once, as PyTorch's; x ** -0.5 would give +inf at -0 and 0 at -inf, not -inf and NaN
    rsqrt = lambda self: self.float().rsqrt().half() if self.dtype == np.float16 else 1 / self.sqrt()
    square = lambda self: self ** 2
    floor = lambda self: self._rounded('floor', _xp(self.data).floor)
    ceil = lambda self: self._rounded('ceil', _xp(self.data).ceil)
    trunc = lambda self: self._rounded('trunc', _xp(self.data).trunc)
    isnan = lambda self: Tensor._wrap(_xp(self.data).isnan(self.data), self.device)
    isinf = lambda self: Tensor._wrap(_xp(self.data).isinf(self.data), self.device)
    isfinite = lambda self: Tensor._wrap(_xp(self.data).isfinite(self.data), self.device)
    addcmul = lambda self, tensor1, tensor2, *, value=1: self._addc('addcmul', tensor1, tensor2, value)
    addcdiv = lambda self, tensor1, tensor2, *, value=1: self._addc('addcdiv', tensor1, tensor2, value)

    def _rounded(self, what, fn):
        """fn(x) with no gradient (floor, ceil, round, trunc); integer tensors as they are, bool ones refused, as
        PyTorch's."""
        if self.dtype == np.bool_:
            raise TypeError(f"{what}: not defined for bool tensors (as in PyTorch)")
        return Step.apply(self, fn=fn) if self.dtype.kind == 'f' else self.clone()

    def _addc(self, what, tensor1, tensor2, value):
        """self + value tensor1 * tensor2 (addcmul) or / tensor2 (addcdiv), as PyTorch's: in the three tensors' result
        dtype (value takes no part in it), float16 computed in float32 and rounded once; of integer and bool tensors
        alone, refused for bools and a value that is no int (PyTorch refuses the first, truncates it); addcdiv of two
        integer tensors refused (PyTorch's refusal of integer division), whatever self's dtype."""
        tensor1, tensor2 = self._operand(tensor1), self._operand(tensor2)
        tensors = self, tensor1, tensor2
        floats = [t.dtype.kind == 'f' for t in tensors]
        if what == 'addcdiv' and not (floats[1] or floats[2]) or not any(floats) and (
                not _is_int(value) or all(t.dtype == np.bool_ for t in tensors)):
            raise TypeError(f"{what}: not defined for {self.dtype}, {tensor1.dtype} and {tensor2.dtype} tensors with "
                            f"value={value!r} (PyTorch refuses integer division and bools, and truncates a value that "
                            "is no int)")
        dtype = _result_dtype(*tensors)
        a, b, c = (t.to(_opmath(dtype)) for t in tensors)
        return (a + (value * b * c if what == 'addcmul' else value * b / c)).to(dtype)

    def round(self, *, decimals=0):
        """Half to even, as PyTorch's: at `decimals` places (negative: left of the point) x 10^d rounded, / 10^d
        (float16 in float32); integer tensors only with decimals=0 (PyTorch refuses any given decimals)."""
        if not _is_int(decimals):
            raise TypeError(f"round: decimals must be an int, not {type(decimals).__name__} (as in PyTorch)")
        if decimals != 0 and self.dtype.kind != 'f':
            raise TypeError(f"round: decimals={decimals} for {self.dtype} tensors: floating-point ones only (as in "
                            "PyTorch)")
        scale = math.inf if abs(decimals) > 308 else 10.0 ** abs(decimals)   # (past float64's range: NaN, as PyTorch)

        def rounded(a):   # in the tensor's dtype (CuPy's own round scales float32 in float64)
            xp, z = _xp(a), a.astype(_opmath(a.dtype), copy=False)
            with np.errstate(over='ignore'):
                ten = z.dtype.type(scale)
            return (xp.rint(z * ten) / ten if decimals >= 0 else xp.rint(z / ten) * ten).astype(a.dtype)
        return self._rounded('round', rounded)

    def sign(self):   # as PyTorch's: 0 at NaN and at -0, a bool tensor as it is
        if self.dtype == np.bool_:
            return self.clone()
        return Step.apply(self, fn=_sign)

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        """NaN, +inf and -inf replaced (by default with 0 and the dtype's largest finite values), their gradient 0, as
        PyTorch's; integer and bool tensors as they are."""
        if self.dtype.kind != 'f':
            return self.clone()
        return NanToNum.apply(self, nan=nan, posinf=posinf, neginf=neginf)   # (beyond the dtype's range: inf)

    def lerp(self, end, weight):
        """self + weight (end - self), as PyTorch's: end + (weight - 1) (end - self) where |weight| >= 0.5 (end itself
        at weight 1), float16 in float32 and rounded once; end of this tensor's dtype, and a weight tensor too unless
        it is 0-d (a number weight gets no gradient)."""
        end = self._operand(end)
        _check_broadcast('lerp', self.shape, end.shape, *[w.shape for w in [weight] if isinstance(w, Tensor)])
        _need_float(self, 'lerp')
        if end.dtype != self.dtype or isinstance(weight, Tensor) and weight.ndim and weight.dtype != self.dtype:
            raise TypeError(f"lerp: end and a weight tensor must be of the input's dtype {self.dtype}, got "
                            f"{end.dtype} and {getattr(weight, 'dtype', type(weight).__name__)}")
        if isinstance(weight, Tensor) and self.ndim == end.ndim == weight.ndim == 0 and _promote(
                self.dtype, weight.dtype) != self.dtype:   # (all 0-d: PyTorch's result takes the weight's wider dtype)
            return self.to(weight.dtype).lerp(end.to(weight.dtype), weight)
        if self.dtype == np.float16:
            return self.float().lerp(end.float(), weight.float() if isinstance(weight, Tensor) else weight).half()
        if not isinstance(weight, Tensor):
            return self + weight * (end - self) if -0.5 < weight < 0.5 else end + (weight - 1) * (end - self)
        return Lerp.apply(self, end, weight.to(self.dtype))

    def abs(self):
        if self.dtype == np.bool_:
            raise TypeError("abs: not defined for bool tensors (as in PyTorch)")
        return Abs.apply(self)

    def gelu(self, approximate='none'):
        if approximate not in ('none', 'tanh'):
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
        return Gelu.apply(_need_float(self, 'gelu'), approximate=approximate)

    def clamp(self, min=None, max=None):
        """min and max numbers or tensors (broadcast), as PyTorch's; clip is its other name."""
        if min is None and max is None:
            raise ValueError("clamp: at least one of min and max must be given")
        if self.dtype.kind != 'f' and any(isinstance(b, (float, np.floating)) for b in (min, max)):
            return self.float().clamp(min, max)   # as PyTorch: a float bound makes the result float32
        if isinstance(min, Tensor) != isinstance(max, Tensor) and min is not None and max is not None:
            raise TypeError("clamp: min and max must both be numbers or both be tensors (as PyTorch's)")
        for b in (min, max):   # as PyTorch: an integer bound is not wrapped into the tensor's range
            _check_fits(b, self.dtype, 'clamp')
        bounds = [self._operand(b) for b in (min, max) if b is not None]   # numbers: 0-d, of this tensor's dtype
        _same_device([self] + bounds, 'clamp')
        _check_broadcast('clamp', self.shape, *[b.shape for b in bounds])
        dtype = _result_dtype(self, *bounds)   # all three at once (a 0-d bound ranks below a shaped one of its kind)
        x, *bounds = [t if t.dtype == dtype else t.to(dtype) for t in [self] + bounds]
        return Clamp.apply(x, *bounds, given=(min is not None, max is not None))

    clip = clamp

    def maximum(self, other):
        return self._binary(Maximum, other)

    def minimum(self, other):
        return self._binary(Maximum, other, least=True)

    # ---- reductions
    @_aliases(dim='axis')
    def sum(self, axis=None, keepdim=False, *, dtype=None):
        """As PyTorch's; dtype given, the tensor is first converted to it (here and in mean)."""
        x = self if dtype is None else self.to(dtype)
        out = Sum.apply(x, axes=_reduced_axes(axis, self.ndim, keepdim), keepdim=keepdim)
        return out if dtype is None else out.to(dtype)   # (an integer sum is int64 unless dtype says otherwise)

    @_aliases(dim='axis')
    def mean(self, axis=None, keepdim=False, *, dtype=None):
        x = _need_float(self if dtype is None else self.to(dtype), 'mean')   # as PyTorch: no mean of integers or bools
        axes = _reduced_axes(axis, self.ndim, keepdim)
        count = math.prod(self.shape[a] for a in axes)
        return Sum.apply(x, axes=axes, keepdim=keepdim, scale=1 / count if count else math.nan)

    def _extreme(self, least, axis, keepdim, dim):
        """The maximum (least: minimum) over axis, the values alone (the interface's max and min, README.md); with
        PyTorch's dim= (one int), PyTorch's (values, indices), so that code written for it reads the same."""
        if dim is None:
            return Max.apply(self, axes=_reduced_axes(axis, self.ndim, keepdim), keepdim=keepdim, least=least)
        if axis is not None or not _is_int(dim):
            raise TypeError(f"{'min' if least else 'max'}: dim= takes one int (PyTorch's), without axis=; got "
                            f"axis={axis}, dim={dim}")
        if self.ndim == 0:   # as PyTorch: dim 0 or -1 of a number is itself, at index 0
            _dim(dim, 1)
            return _ValuesIndices(self.clone(), Tensor._wrap(_xp(self.data).zeros((), np.int64), self.device))
        counted = self.to(np.uint8) if self.dtype == np.bool_ else self   # (max of bools: PyTorch's, argmax's not)
        index = counted._index_of('argmin' if least else 'argmax', dim, keepdim=True)
        values = self._take_along(dim, index)   # as PyTorch's: the gradient to that element alone, ties or not
        if not keepdim:
            values, index = values.squeeze(dim), index.squeeze(dim)
        return _ValuesIndices(values, index)

    def max(self, axis=None, keepdim=False, *, dim=None):   # (max(other): PyTorch's elementwise maximum)
        return maximum(self, axis) if isinstance(axis, Tensor) else self._extreme(False, axis, keepdim, dim)

    def min(self, axis=None, keepdim=False, *, dim=None):
        return minimum(self, axis) if isinstance(axis, Tensor) else self._extreme(True, axis, keepdim, dim)

    @_aliases(dim='axis')
    def amax(self, axis=(), keepdim=False):
        """PyTorch's amax: max's values over axis (every axis where () or None), ties sharing the gradient evenly."""
        return self._extreme(False, axis, keepdim, None)

    @_aliases(dim='axis')
    def amin(self, axis=(), keepdim=False):
        return self._extreme(True, axis, keepdim, None)

    @_aliases(dim='axis')
    def var(self, axis=None, keepdim=False, correction=None, *, unbiased=None):
        """The variance over axis with `correction` (default 1), or PyTorch's unbiased (True: 1, False: 0) by keyword
        or alone (var(False): PyTorch's var(unbiased), a bool being no axis). A second positional argument is keepdim,
        in the interface's order (PyTorch's var(dim, unbiased, keepdim) reads it as unbiased: pass unbiased=)."""
        if isinstance(axis, (bool, np.bool_)):
            axis, unbiased = None, axis if unbiased is None else 'given twice'
        if unbiased is not None:
            if correction is not None or not isinstance(unbiased, (bool, np.bool_)):
                raise TypeError(f"var/std: unbiased must be one bool, given without correction (as PyTorch's); got "
                                f"unbiased={unbiased!r}, correction={correction!r}")
            correction = int(unbiased)
        correction = 1 if correction is None else correction
        if not isinstance(correction, _REALS):
            raise TypeError(f"var/std: correction must be a number, not {type(correction).__name__}")
        _need_float(self, 'var')
        if self.dtype == np.float16:   # in float32, as PyTorch: the squares overflow float16 long before the variance
            return self.float().var(axis, keepdim, correction).half()
        axes = _reduced_axes(axis, self.ndim, keepdim)
        count = math.prod(self.shape[a] for a in axes)
        mean = self.mean(axes, keepdim=True)
        mean = mean + (self - mean).mean(axes, keepdim=True)   # its rounding taken out (float32 sums of values near 1e4
        centred = self - mean                                    # miss their mean by ~1e-2, 1e-4 of a unit variance)
        scale = 1 / (count - correction) if count > correction else math.inf if count else math.nan
        return Sum.apply(centred * centred, axes=axes, keepdim=keepdim, scale=scale)

    @_aliases(dim='axis')
    def std(self, axis=None, keepdim=False, correction=None, *, unbiased=None):
        if self.dtype == np.float16:   # in float32, rounded once, as PyTorch (not the float16 variance's root)
            return self.float().std(axis, keepdim, correction, unbiased=unbiased).half()
        variance = self.var(axis, keepdim, correction, unbiased=unbiased)
        nonzero = variance != 0   # as PyTorch: 0, not NaN (0 * inf from sqrt), the gradient where the variance is 0
        return where(nonzero, where(nonzero, variance, 1).sqrt(), 0)

    def _index_of(self, which, axis, keepdim=False):
        """The index (the flat one where axis is None) of the first largest (argmax) or smallest (argmin) element;
        no gradient."""
        if self.dtype == np.bool_:
            raise TypeError(f"{which}: not defined for bool tensors (as in PyTorch)")
        _check_keepdim(keepdim)
        if self.numel() == 0 and (axis is None or self.shape[_dim(axis, self.ndim)] == 0):
            raise ValueError(f"{which} of an empty tensor of shape {self.shape}")
        along = {} if axis is None else {'axis': _dim(axis, self.ndim), 'keepdims': keepdim}
        index = _xp(self.data).asarray(getattr(self.data, which)(**along)).astype(np.int64)
        if axis is None and keepdim:   # as PyTorch: the flat index with every axis kept, of size 1
            index = index.reshape((1,) * self.ndim)
        return Tensor._wrap(index, self.device)

    def _take_along(self, axis, index):
        """self's elements at `index` (integers, of self's number of dims, no larger but on axis) on axis, as NumPy's
        take_along_axis and PyTorch's gather; the gradient goes back to them alone."""
        return self[_along(_dim(axis, self.ndim), index)]

    @_aliases(dim='axis')
    def argmax(self, axis=None, keepdim=False):
        return self._index_of('argmax', axis, keepdim)

    @_aliases(dim='axis')
    def argmin(self, axis=None, keepdim=False):
        return self._index_of('argmin', axis, keepdim)

    def _truth(self, test, axis, keepdim):
        """Whether every element (test 'all') or some element ('any') is nonzero, a bool tensor (uint8 for uint8, as
        PyTorch's); no gradient. Unlike sum's, an empty axis tuple reduces no axis (as PyTorch's)."""
        _check_keepdim(keepdim)
        truth = self.data.astype(bool, copy=False)
        result = getattr(truth, test)(axis=_axes(axis, self.ndim), keepdims=keepdim)
        dtype = np.uint8 if self.dtype == np.uint8 else np.bool_
        return Tensor._wrap(_xp(self.data).asarray(result).astype(dtype), self.device)

    @_aliases(dim='axis')
    def all(self, axis=None, keepdim=False):
        return self._truth('all', axis, keepdim)

    @_aliases(dim='axis')
    def any(self, axis=None, keepdim=False):
        return self._truth('any', axis, keepdim)

    # ---- indexing and reductions as PyTorch's (gather, scatter, sort, ...)
    def _index_tensor(self, what, index):
        """index as a tensor of integers on this device; TypeError for another dtype (PyTorch takes int32 and int64)."""
        index = index if isinstance(index, Tensor) else Tensor(index, device=self.device)
        if index.dtype not in (np.int32, np.int64):
            raise TypeError(f"{what}: index must be int32 or int64, not {index.dtype}")
        if index.device != self.device:
            raise RuntimeError(f"{what}: index on {index.device} for a tensor on {self.device}")
        return index

    @staticmethod
    def _check_range(what, index, size, axis, error=RuntimeError):
        """As PyTorch's: `error` where index (a tensor) holds one outside [0, size) (no negative ones counted from the
        end). Not checked inside a CUDA graph capture (reading the indices back is a sync it cannot hold)."""
        if index.numel() and not _capturing(index):
            lo, hi = _xp(index.data).stack([index.data.min(), index.data.max()]).tolist()   # (one read back)
            if lo < 0 or hi >= size:
                raise error(f"{what}: index {lo if lo < 0 else hi} is out of bounds for dimension {axis} with size "
                            f"{size}")

    def _gather_check(self, what, axis, index, src=None):
        """axis as a dim and index as a tensor for gather (src None) and scatter: PyTorch's rules on their shapes."""
        index = self._index_tensor(what, index)
        axis = _dim(axis, self.ndim)
        shapes = [('input', self)] + [('index', index)] + ([('src', src)] if src is not None else [])
        if len({max(t.ndim, 1) for _, t in shapes}) > 1:
            raise ValueError(f"{what}: {', '.join(f'{n} of shape {t.shape}' for n, t in shapes)} must have as many "
                             "dimensions (as PyTorch's)")
        if (self.ndim and any(i > n for k, (i, n) in enumerate(zip(index.shape, self.shape)) if k != axis) or
                src is not None and src.ndim and any(i > n for i, n in zip(index.shape, src.shape))):
            raise ValueError(f"{what}: index of shape {index.shape} must be no larger than the input of shape "
                             f"{self.shape} apart from dimension {axis}" +
                             ("" if src is None else f", nor than src of shape {src.shape}"))
        self._check_range(what, index, self.shape[axis] if self.ndim else 1, axis)
        return axis, index

    @_aliases(dim='axis')
    def gather(self, axis, index, *, sparse_grad=False):
        """out[i][j] = self[index[i][j]][j] for axis 0 (and so on), as PyTorch's; the gradient scatter-adds back."""
        if sparse_grad:
            raise ValueError("gather: sparse_grad=True is not supported (tinygrad_lite has no sparse tensors)")
        axis, index = self._gather_check('gather', axis, index)
        if self.ndim and index.ndim:
            return self._take_along(axis, index)
        return self.reshape(-1)._take_along(0, index.reshape(-1)).reshape(index.shape)

    def _scatter(self, what, axis, index, src, accumulate):
        """self with src's elements (src cut to index's shape, or a number) written (accumulate: added) where index
        puts them on axis: IndexPut's out-of-place update."""
        if isinstance(src, Tensor):
            if src.dtype != self.dtype:
                raise TypeError(f"{what}: src of dtype {src.dtype} for a tensor of dtype {self.dtype} (PyTorch "
                                "wants them equal)")
            if src.device != self.device:
                raise RuntimeError(f"{what}: src on {src.device} for a tensor on {self.device}")
        elif accumulate or not isinstance(src, _NUMBERS):
            raise TypeError(f"{what}: src must be a tensor{'' if accumulate else ' or a number'}, not "
                            f"{type(src).__name__}")
        axis, index = self._gather_check(what, axis, index, src if isinstance(src, Tensor) else None)
        if not self.ndim or not index.ndim:
            x, i = self.reshape(-1), index.reshape(-1)
            s = src.reshape(-1) if isinstance(src, Tensor) else src
            return x._scatter(what, 0, i, s, accumulate).reshape(self.shape)
        if isinstance(src, Tensor):
            values = src[tuple(slice(0, n) for n in index.shape)]
        else:
            _check_fits(src, self.dtype, what)
            values = Tensor._wrap(_xp(self.data).asarray(src).astype(self.dtype), self.device)
        along = _along(axis, index.data.astype(np.int64), _xp(self.data))   # (a copy of the index: IndexPut keeps it)
        return IndexPut.apply(self, values, index=along, accumulate=accumulate)

    @_aliases(dim='axis')
    def scatter(self, axis, index, src=None, *, value=None, reduce=None):
        """Out of place, as PyTorch's scatter: src (a tensor, or a number as value=) written where index puts it on
        axis. Where index repeats a position, one of the values written there wins (PyTorch leaves which open)."""
        if reduce is not None:
            raise ValueError("scatter: reduce= is not supported (PyTorch deprecates it): use scatter_add")
        if (src is None) == (value is None):
            raise TypeError("scatter: give src (a tensor or a number) or value= (a number), not both")
        return self._scatter('scatter', axis, index, value if src is None else src, False)

    @_aliases(dim='axis')
    def scatter_add(self, axis, index, src):
        """Out of place, as PyTorch's scatter_add: src's elements added where index puts them on axis, repeated
        positions adding up."""
        return self._scatter('scatter_add', axis, index, src, True)

    @_aliases(dim='axis')
    def index_select(self, axis, index):
        """The entries at index (a vector of int32 or int64) along axis; the gradient scatter-adds back."""
        index = self._index_tensor('index_select', index)
        if index.ndim > 1:
            raise IndexError(f"index_select: index must be a vector, not of shape {index.shape}")
        axis = _dim(axis, self.ndim)
        if self.ndim == 0:
            if index.numel() != 1:
                raise IndexError(f"index_select: the index into a 0-d tensor must hold one value, got {index.numel()}")
            return self.reshape(1).index_select(0, index).reshape(())
        self._check_range('index_select', index, self.shape[axis], axis, IndexError)   # (PyTorch's, for dim 0)
        return self[(slice(None),) * axis + (index.reshape(-1),)]

    def _mask(self, what, mask):
        if not isinstance(mask, Tensor) or mask.dtype != np.bool_:
            raise TypeError(f"{what}: mask must be a bool tensor, not "
                            f"{mask.dtype if isinstance(mask, Tensor) else type(mask).__name__}")
        return mask

    def masked_fill(self, mask, value):
        """self with value where mask (bool, broadcast with self) is True; value is a number or a 0-d tensor, cast
        to self's dtype (its gradient: the sum of the filled elements')."""
        mask = self._mask('masked_fill', mask)
        if isinstance(value, Tensor):
            if value.ndim:
                raise ValueError(f"masked_fill: value must be a number or a 0-d tensor, not of shape {value.shape}")
            value = value.to(self.device).to(self.dtype)
        else:
            _check_fits(value, self.dtype, 'masked_fill')
            value = Tensor._wrap(_xp(self.data).asarray(value).astype(self.dtype), self.device)
        return where(mask, value, self).contiguous()   # row-major, as PyTorch's

    def masked_select(self, mask):
        """A vector of self's elements where mask (bool) is True, the two broadcast together."""
        shape = _check_broadcast('masked_select', self.shape, self._mask('masked_select', mask).shape)
        return self.expand(shape).reshape(-1)[mask.expand(shape).reshape(-1)]

    def repeat(self, *sizes):
        """self tiled sizes[i] times along each axis (more sizes than axes add leading axes), as PyTorch's."""
        sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
        if not all(map(_is_int, sizes)):
            raise TypeError(f"repeat: sizes must be ints, got {sizes}")
        if len(sizes) < self.ndim or min(sizes, default=0) < 0:
            raise ValueError(f"repeat: sizes {sizes} must be at least as many as the dimensions of shape {self.shape} "
                             "and none negative")
        shape = (1,) * (len(sizes) - self.ndim) + self.shape
        tiles = self.reshape([k for n in shape for k in (1, n)])   # a size-1 axis before each, expanded to its count
        tiles = tiles.expand([k for r, n in zip(sizes, shape) for k in (r, n)])
        out = tiles.reshape([r * n for r, n in zip(sizes, shape)])
        # a view of self where no size tiles anything: copied, as PyTorch's repeat always is
        return out.clone() if _memory_owner(out.data) is _memory_owner(self.data) else out

    def tile(self, *dims):
        """repeat, fewer dims than axes counting from the last (the others 1), as PyTorch's."""
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        return self.repeat((1,) * (self.ndim - len(dims)) + dims)

    @_aliases(dim='axis')
    def repeat_interleave(self, repeats, axis=None, *, output_size=None):
        """Each entry along axis repeated (repeats: an int, or an int tensor of one count per entry); axis None: of the
        flattened tensor."""
        if axis is not None and self.ndim == 0:
            raise IndexError(f"repeat_interleave: dim {axis} of a 0-d tensor (as PyTorch's)")
        x, axis = (self.reshape(-1), 0) if axis is None else (self, _dim(axis, self.ndim))
        if isinstance(repeats, Tensor):
            if repeats.dtype not in (np.int32, np.int64) or repeats.ndim > 1:
                raise TypeError(f"repeat_interleave: repeats must be an int or a 0-d or 1-d int32 or int64 tensor, not "
                                f"{repeats.dtype} of shape {repeats.shape}")
            if repeats.numel() not in (1, x.shape[axis]):
                raise ValueError(f"repeat_interleave: {repeats.numel()} repeats for {x.shape[axis]} entries along dim "
                                 f"{axis} of shape {x.shape}")
            repeats = repeats.numpy().reshape(-1)
        elif not _is_int(repeats):
            raise TypeError(f"repeat_interleave: repeats must be an int or an int tensor, not {type(repeats).__name__}")
        if np.min(repeats, initial=0) < 0:
            raise ValueError(f"repeat_interleave: repeats must not be negative, got {repeats}")
        index = np.repeat(np.arange(x.shape[axis]), repeats)
        if output_size is not None and output_size != index.size:
            raise ValueError(f"repeat_interleave: output_size {output_size}, but the repeats make {index.size}")
        return x[(slice(None),) * axis + (index,)]

    @_aliases(dim='axis', split_size='split_size_or_sections')
    def split(self, split_size_or_sections, axis=0):
        """Views of pieces along axis: of split_size_or_sections entries each (the last one smaller), or of the sizes
        in a list of them."""
        sizes = split_size_or_sections
        if self.ndim == 0:
            raise ValueError("split: expects a tensor of at least one dimension, got a 0-d one")
        axis = _dim(axis, self.ndim)
        n = self.shape[axis]
        if _is_int(sizes):
            if sizes < 0 or sizes == 0 and n:
                raise ValueError(f"split: split_size {sizes} for dimension {axis} of size {n} (it must be positive, or "
                                 "0 for a size of 0)")
            sizes = [sizes] * (n // sizes) + [n % sizes] * bool(n % sizes) if n else [0]
        elif isinstance(sizes, (tuple, list)) and all(map(_is_int, sizes)):
            if min(sizes, default=0) < 0 or sum(sizes) != n:
                raise ValueError(f"split: sizes {list(sizes)} must be non-negative and sum to {n}, the size of "
                                 f"dimension {axis} of shape {self.shape}")
        else:
            raise TypeError(f"split: split_size_or_sections must be an int or a list of ints, got {sizes!r}")
        starts = itertools.accumulate(sizes, initial=0)
        return tuple(self[(slice(None),) * axis + (slice(a, a + k),)] for a, k in zip(starts, sizes))

    @_aliases(dim='axis')
    def chunk(self, chunks, axis=0):
        """split into `chunks` pieces of ceil(size / chunks) entries (so maybe fewer pieces), as PyTorch's."""
        if not _is_int(chunks):
            raise TypeError(f"chunk: chunks must be an int, not {type(chunks).__name__}")
        if chunks <= 0 or self.ndim == 0:
            raise ValueError(f"chunk: chunks must be positive and the tensor not 0-d, got {chunks} for shape "
                             f"{self.shape}")
        n = self.shape[_dim(axis, self.ndim)]
        return self.split(-(-n // chunks) if n else [0] * chunks, axis)

    @_aliases(dim='axis')
    def unbind(self, axis=0):
        """The views self[..., i, ...] along axis, a tuple."""
        if self.ndim == 0:
            raise IndexError("unbind: dim specified on a 0-d tensor")
        axis = _dim(axis, self.ndim)
        return tuple(self[(slice(None),) * axis + (i,)] for i in range(self.shape[axis]))

    @_aliases(dim='axis')
    def narrow(self, axis, start, length):
        """The view of `length` entries from `start` (negative: from the end) along axis."""
        if self.ndim == 0:
            raise ValueError("narrow: cannot be applied to a 0-d tensor")
        start = int(start) if isinstance(start, Tensor) and _is_select(start) else start
        if not _is_int(start) or not _is_int(length):
            raise TypeError(f"narrow: start and length must be ints, got {start!r} and {length!r}")
        axis = _dim(axis, self.ndim)
        n = self.shape[axis]
        if not -n <= start <= n:
            raise IndexError(f"narrow: start {start} is out of range [{-n}, {n}] for dimension {axis} of size {n}")
        start += n if start < 0 else 0
        if length < 0 or start + length > n:
            raise ValueError(f"narrow: start ({start}) + length ({length}) exceeds dimension {axis} of size {n} (or "
                             "length is negative)")
        return self[(slice(None),) * axis + (slice(start, start + length),)]

    def roll(self, shifts, dims=None):
        """Entries shifted along dims (each by its shift), those past the end coming round to the front; dims None:
        of the flattened tensor, shape kept."""
        shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
        if dims is None and len(shifts) == 1:
            return self.reshape(-1).roll(shifts, 0).reshape(self.shape)
        dims = () if dims is None else tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        if not all(map(_is_int, shifts + dims)):
            raise TypeError(f"roll: shifts and dims must be ints, got {shifts} and {dims}")
        if not shifts or len(shifts) != len(dims):
            raise ValueError(f"roll: shifts {shifts} and dims {dims} must align")
        if self.ndim == 0:
            raise IndexError("roll: dims specified on a 0-d tensor")
        out = self
        for shift, axis in zip(shifts, dims):
            axis = _dim(axis, self.ndim)
            cut = self.shape[axis] - shift % self.shape[axis] if self.shape[axis] else 0
            if 0 < cut < self.shape[axis]:
                out = cat([out[(slice(None),) * axis + part] for part in ((slice(cut, None),), (slice(0, cut),))], axis)
        return self.clone() if out is self else out

    def _triangle(self, what, diagonal, upper):
        """self with the elements below (upper) or above the diagonal-th diagonal zeroed, on the last two axes."""
        if not _is_int(diagonal):
            raise TypeError(f"{what}: diagonal must be an int, not {type(diagonal).__name__}")
        if self.ndim < 2:
            raise ValueError(f"{what}: expects a tensor of at least 2 dimensions, got shape {self.shape}")
        xp = _xp(self.data)
        keep = xp.tri(*self.shape[-2:], k=diagonal - upper, dtype=bool)
        return where(Tensor._wrap(~keep if upper else keep, self.device), self,
                     Tensor._wrap(xp.zeros((), self.dtype), self.device))

    tril = lambda self, diagonal=0: self._triangle('tril', diagonal, False)
    triu = lambda self, diagonal=0: self._triangle('triu', diagonal, True)

    def _reduced_dtype(self, dtype):
        """self in dtype, or, for integers and bools, in int64 (PyTorch's sums and products of them)."""
        return self.to(dtype) if dtype is not None else self.long() if self.dtype.kind in 'biu' else self

    @_aliases(dim='axis')
    def cumsum(self, axis, *, dtype=None):
        """Running sums along axis (float16 accumulated in float32, as PyTorch's)."""
        x = self._reduced_dtype(dtype)
        axis = _dim(axis, x.ndim)
        return Cumsum.apply(x, axis=axis) if x.ndim else x.clone()

    @_aliases(dim='axis')
    def prod(self, axis=None, keepdim=False, *, dtype=None):
        """The product over one axis (an int) or all of them; the gradient holds where elements are 0 (Prod)."""
        if axis is not None and not _is_int(axis):
            raise TypeError(f"prod: dim must be an int or None (as PyTorch's), not {axis!r}")
        x = self._reduced_dtype(dtype)
        return Prod.apply(x, axes=_reduced_axes(axis, x.ndim, keepdim), keepdim=keepdim)

    @_aliases(dim='axis')
    def logsumexp(self, axis, keepdim=False):
        """log(sum(exp(self))) over axis, shifted by the (detached) maximum, an infinite one by 0, as PyTorch's: the
        gradient is the softmax."""
        x = self._floating()
        axes = _reduced_axes(axis, x.ndim, keepdim)
        shift = 0
        if all(x.shape[a] for a in axes):   # (nothing to shift by where an axis is empty: the sum is 0, its log -inf)
            shift = x.detach().max(axes, keepdim=True)
            shift = where(shift.abs() == math.inf, 0, shift)
        out = (x - shift).exp().sum(axes, keepdim=True).log() + shift   # (log 0, and past float16's range: -inf)
        return out if keepdim else out.squeeze(axes)

    @_aliases(dim='axis')
    def norm(self, p='fro', axis=None, keepdim=False, dtype=None):
        """The vector p-norm over axis (all axes where None): p a number (inf, -inf and 0 too) or 'fro' (2). A norm of 0
        has the gradient 0 (PyTorch's subgradient); float16 runs in float32 (the powers overflow float16)."""
        if dtype is not None and np.promote_types(self.dtype, _dtype(dtype)) != _dtype(dtype):
            raise TypeError(f"norm: {self.dtype} cannot be narrowed to dtype={_dtype(dtype)} (as PyTorch's)")
        x = _need_float(self if dtype is None else self.to(dtype), 'norm')
        if x.dtype == np.float16:
            return x.float().norm(p, axis, keepdim).half()
        p = 2 if p == 'fro' else p
        if not isinstance(p, _NUMBERS):
            raise ValueError(f"norm: p must be a number or 'fro', not {p!r} (no matrix norms)")
        axes = _reduced_axes(axis, x.ndim, keepdim)
        if p == 0:   # the count of nonzero elements, recorded with the gradient 0 (as PyTorch's)
            return Step.apply(x, fn=lambda a: (a != 0).astype(a.dtype)).sum(axes, keepdim)
        if p in (1, math.inf, -math.inf):
            return getattr(x.abs(), {1: 'sum', math.inf: 'max', -math.inf: 'min'}[p])(axes, keepdim)
        nonzero = x != 0   # |x|^p of 0 taken apart: 0 (inf for p < 0) with the gradient 0, not 0 * inf
        total = where(nonzero, where(nonzero, x, 1).abs() ** p, 0 if p > 0 else math.inf).sum(axes, keepdim)
        zero = total == 0   # (a NaN stays NaN)
        root = where(zero, 1, total)
        return where(zero, 0, root.sqrt() if p == 2 else root ** (1 / p))

    def _sorted_index(self, axis, descending):
        """The int64 indices that sort self along axis, stably (ties keep their order), NaN as the largest value, as
        PyTorch's sort; descending: ascending of the flipped entries, flipped back (so ties still keep their order)."""
        a, xp = self.data, _xp(self.data)
        if a.ndim == 0:
            return Tensor._wrap(xp.zeros((), np.int64), self.device)
        flip = (slice(None),) * axis + (slice(None, None, -1),)
        a = a[flip] if descending else a
        index = np.argsort(a, axis, kind='stable') if xp is np else a.argsort(axis)   # (CuPy's sort is stable)
        index = a.shape[axis] - 1 - index[flip] if descending else index
        return Tensor._wrap(index.astype(np.int64, copy=False), self.device)

    @_aliases(dim='axis')
    def sort(self, axis=-1, descending=False, *, stable=False):
        """(values, indices) sorted along axis, stable whatever `stable` says; the values' gradient goes back to the
        elements they came from."""
        index = self._sorted_index(_dim(axis, self.ndim), descending)
        return _ValuesIndices(self._take_along(axis, index) if self.ndim else self.clone(), index)

    @_aliases(dim='axis')
    def argsort(self, axis=-1, descending=False, *, stable=False):
        return self._sorted_index(_dim(axis, self.ndim), descending)

    @_aliases(dim='axis')
    def topk(self, k, axis=-1, largest=True, sorted=True):
        """(values, indices) of the k largest (smallest where not largest) entries along axis, in order (also where
        sorted is False, PyTorch leaving the order open then)."""
        if not _is_int(k):
            raise TypeError(f"topk: k must be an int, not {type(k).__name__}")
        if self.dtype == np.bool_:
            raise TypeError("topk: not defined for bool tensors (as PyTorch's)")
        axis = _dim(axis, self.ndim)
        n = self.shape[axis] if self.ndim else 1
        if not 0 <= k <= n:
            raise ValueError(f"topk: k {k} is out of range for dimension {axis} of size {n}")
        if self.ndim == 0:
            return self.sort()
        index = self._sorted_index(axis, largest)[(slice(None),) * axis + (slice(0, k),)]
        return _ValuesIndices(self._take_along(axis, index), index)

    @_aliases(dim='axis')
    def softmax(self, axis=-1, dtype=None):
        """As PyTorch's: dtype given, the input is first converted to it (float16 logits to a float32 softmax)."""
        x = _need_float(self if dtype is None else self.to(dtype), 'softmax')
        return SoftmaxOp.apply(x, axis=_dim(axis, self.ndim))

    @_aliases(dim='axis')
    def log_softmax(self, axis=-1, dtype=None):
        x = _need_float(self if dtype is None else self.to(dtype), 'log_softmax')
        return LogSoftmaxOp.apply(x, axis=_dim(axis, self.ndim))

    # ---- shape
    @_aliases(shape='shape')
    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        known = int(np.prod([n for n in shape if n != -1]))
        if any(n < -1 for n in shape) or shape.count(-1) > 1 or \
                (-1 in shape and (known == 0 or self.numel() % known)) or \
                (-1 not in shape and known != self.numel()):
            raise ValueError(f"reshape: cannot view a tensor of shape {self.shape} as {shape}")
        return Reshape.apply(self, shape=shape)

    @_aliases(size='shape')
    def view(self, *shape):
        """reshape where the memory allows it without a copy; as PyTorch's view, an error where it does not."""
        if len(shape) == 1 and isinstance(shape[0], (type, np.dtype, str)):
            raise TypeError(f"view: a dtype ({shape[0]!r}) would reinterpret the memory (PyTorch's view(dtype)), which "
                            "is not supported: use .to(dtype) to convert the values")
        out = self.reshape(*shape)
        if out.numel() and _memory_owner(out.data) is not _memory_owner(self.data):
            raise RuntimeError(f"view: shape {out.shape} is not compatible with the memory layout of a tensor of shape "
                               f"{self.shape} (a copy would be needed): use .reshape(...) instead")
        return out

    def flatten(self, start_dim=0, end_dim=-1):
        start, end = _dim(start_dim, self.ndim), _dim(end_dim, self.ndim)
        if start > end:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {self.shape}")
        if self.ndim == 0:
            return self.reshape(1)
        return self.reshape(self.shape[:start] + (math.prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

    @_aliases(dims='dims')
    def permute(self, *dims):
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        order = tuple(_dim(d, self.ndim) for d in dims)
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"permute: {dims} is not a permutation of the axes of a tensor of shape {self.shape}")
        return Permute.apply(self, dims=order)

    @_aliases(dim0='a', dim1='b')
    def transpose(self, a, b):
        a, b, dims = _dim(a, self.ndim), _dim(b, self.ndim), list(range(self.ndim))
        if dims:   # a 0-d tensor is its own transpose
            dims[a], dims[b] = dims[b], dims[a]
        return self.permute(*dims)

    def flip(self, dims, *more):
        """A copy with the elements in reverse order along dims (an int, ints, or a tuple or list of ints), as PyTorch's."""
        dims = (dims, *more) if more or not isinstance(dims, (tuple, list)) else tuple(dims)
        if not all(map(_is_int, dims)):
            raise TypeError(f"flip: dims must be ints, got {dims}")
        return Flip.apply(self, dims=_axes(dims, self.ndim))

    @_aliases(dim='axis')
    def unsqueeze(self, axis):
        axis = _dim(axis, self.ndim, new=True)
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    @_aliases(dim='axis')
    def squeeze(self, axis=None):
        axes = _axes(axis, self.ndim) if axis is not None else range(self.ndim)
        return self.reshape(tuple(n for i, n in enumerate(self.shape) if not (i in axes and n == 1)))

    @_aliases(size='shape')
    def expand(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        lead = len(shape) - self.ndim
        target = tuple(self.shape[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(shape))
        if lead < 0 or min(target, default=0) < 0 or any(s not in (1, t) for s, t in zip(self.shape, target[lead:])):
            raise ValueError(f"expand: a tensor of shape {self.shape} cannot expand to {shape}")
        return Expand.apply(self, shape=target)

    def pad(self, pad, mode='constant', value=None):
        """torch.nn.functional.pad: 'constant' (value None: 0), or 'reflect', 'replicate' and 'circular' (_pad_read)."""
        if mode != 'constant':
            return self._pad_read(pad, mode, value)
        value = 0.0 if value is None else value
        _check_fits(value, self.dtype, 'pad')   # (as PyTorch's fill: -1 for uint8 raises, not wraps)
        pairs = [pad[i:i + 2] for i in range(0, len(pad), 2)]   # from the last axis back
        if len(pad) % 2 or len(pairs) > self.ndim or any(n + lo + hi < 0 or n + min(lo, 0) + min(hi, 0) < 0
                                                         for (lo, hi), n in zip(pairs, reversed(self.shape))):
            raise ValueError(f"pad: {tuple(pad)} must hold (left, right) pairs for at most {self.ndim} axes of shape "
                             f"{self.shape}, negative ones (crops) taking no more than an axis has")
        if not all(map(_is_int, pad)):
            raise TypeError(f"pad: widths must be ints, got {tuple(pad)}")
        return Pad.apply(self, pad=tuple(int(p) for p in pad), value=value) if pad else self.clone()

    def _pad_read(self, pad, mode, value):
        """pad's 'reflect' (mirrored about the edge, the edge once), 'replicate' (the edge repeated) and 'circular' (the
        other end's elements) modes, as PyTorch's: each padded axis read at PyTorch's positions (_PAD_READS) by
        index_select (its gradient adds back), for the last 1, 2 or 3 axes of a tensor with one or two more. A negative
        width crops: reflect and replicate read about the axis's own edges, circular wraps the cropped axis (as
        PyTorch's)."""
        if mode not in _PAD_READS:
            raise ValueError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
        if value is not None and value != 0:
            raise ValueError(f"pad: mode {mode!r} takes no value (got {value})")
        axes = len(pad) // 2
        if len(pad) % 2 or axes not in (1, 2, 3) or self.ndim not in (axes + 1, axes + 2):
            raise ValueError(f"pad: mode {mode!r} pads the last 1, 2 or 3 axes of a tensor with one or two more "
                             f"(widths (left, right) for each), got widths {tuple(pad)} for shape {self.shape}")
        if not all(map(_is_int, pad)):
            raise TypeError(f"pad: widths must be ints, got {tuple(pad)}")
        out = self
        for k in range(axes):
            axis, (lo, hi) = self.ndim - 1 - k, pad[2 * k:2 * k + 2]
            first, n = 0, self.shape[axis]
            if mode == 'circular':   # (the axis cropped first)
                first, n, lo, hi = max(-lo, 0), n - max(-lo, 0) - max(-hi, 0), max(lo, 0), max(hi, 0)
            limit = {'reflect': n - 1, 'circular': n}.get(mode, math.inf if n > 0 else -1)   # (replicate: n > 0)
            if max(lo, hi) > limit or n + lo + hi < 0:
                raise ValueError(f"pad: mode {mode!r} with widths ({pad[2 * k]}, {pad[2 * k + 1]}) for an axis of size "
                                 f"{self.shape[axis]} (reflect: less than the size; circular: at most the size; "
                                 "replicate: a non-empty axis)")
            index = first + _PAD_READS[mode](np.arange(-lo, n + hi), n).astype(np.int64)
            out = out.index_select(axis, Tensor(index, device=self.device))
        return out

    # ---- PyTorch's conveniences, composed of the ops above
    expand_as = lambda self, other: self.expand(other.shape)
    view_as = lambda self, other: self.view(other.shape)
    reshape_as = lambda self, other: self.reshape(other.shape)
    type_as = lambda self, other: self.to(device=other.device, dtype=other.dtype)   # PyTorch's: its device too

    def swapaxes(self, axis0, axis1):
        return self.transpose(axis0, axis1)

    def swapdims(self, dim0, dim1):
        return self.transpose(dim0, dim1)

    def unflatten(self, dim, sizes):
        """dim split into `sizes` (one of them may be -1), as PyTorch's."""
        if self.ndim == 0:
            raise IndexError(f"unflatten: a 0-d tensor has no dim {dim}")
        d, sizes = _dim(dim, self.ndim), tuple(sizes)
        if not all(map(_is_int, sizes)):
            raise TypeError(f"unflatten: sizes must be ints, got {sizes}")
        known, n = math.prod(s for s in sizes if s != -1), self.shape[d]
        if not sizes or sizes.count(-1) > 1 or min(sizes) < -1 or (
                n % known if -1 in sizes and known else n != known or -1 in sizes):
            raise ValueError(f"unflatten: sizes {sizes} (non-empty, at most one -1) don't multiply up to the size of "
                             f"dim {dim} ({n}) of a tensor of shape {self.shape}")
        return self.reshape(self.shape[:d] + tuple(n // known if s == -1 else s for s in sizes) + self.shape[d + 1:])

    def movedim(self, source, destination):
        """The dims `source` (an int or a sequence) moved to the places `destination`, the others keeping their order."""
        source, destination = ((tuple(x) if isinstance(x, (tuple, list)) else (x,)) for x in (source, destination))
        if len(source) != len(destination):
            raise ValueError(f"movedim: source {source} and destination {destination} name different numbers of dims")
        source, destination = ([_dim(d, self.ndim) for d in x] for x in (source, destination))
        for name, dims in (('source', source), ('destination', destination)):
            if len(set(dims)) < len(dims):
                raise ValueError(f"movedim: repeated dim in {name} {dims}")
        rest = iter(d for d in range(self.ndim) if d not in source)
        placed = dict(zip(destination, source))
        return self.permute(*[placed[i] if i in placed else next(rest) for i in range(self.ndim)])

    moveaxis = movedim

    def bmm(self, mat2):
        """Batched matrix product of two 3-D tensors, (b, n, m) @ (b, m, p), as PyTorch's (no broadcasting)."""
        if self.ndim != 3 or mat2.ndim != 3 or self.shape[0] != mat2.shape[0] or self.shape[2] != mat2.shape[1]:
            raise ValueError(f"bmm: expected 3-D tensors (b, n, m) and (b, m, p), got shapes {self.shape} and "
                             f"{mat2.shape}")
        return self @ mat2

    def mm(self, mat2):
        """The product of two 2-D tensors, (n, m) @ (m, p), as PyTorch's (no broadcasting)."""
        if self.ndim != 2 or _need_tensor(mat2, 'mm').ndim != 2 or self.shape[1] != mat2.shape[0]:
            raise ValueError(f"mm: expected 2-D tensors (n, m) and (m, p), got shapes {self.shape} and {mat2.shape}")
        return self @ mat2

    def mv(self, vec):
        """The product of a 2-D tensor and a 1-D one, (n, m) @ (m,), as PyTorch's."""
        if self.ndim != 2 or _need_tensor(vec, 'mv').ndim != 1 or self.shape[1] != vec.shape[0]:
            raise ValueError(f"mv: expected a 2-D tensor (n, m) and a 1-D one (m,), got shapes {self.shape} and "
                             f"{vec.shape}")
        return self @ vec

    def outer(self, vec2):
        """The outer product of two 1-D tensors (their dtypes promoted), as PyTorch's."""
        if self.ndim != 1 or vec2.ndim != 1:
            raise ValueError(f"outer: expected 1-D tensors, got shapes {self.shape} and {vec2.shape}")
        return self.unsqueeze(1) * vec2

    def dot(self, tensor):
        """The inner product of two 1-D tensors of one size and dtype, as PyTorch's."""
        if self.ndim != 1 or tensor.ndim != 1 or self.shape != tensor.shape:
            raise ValueError(f"dot: expected 1-D tensors of one size, got shapes {self.shape} and {tensor.shape}")
        return self @ tensor

    # new tensors of this one's dtype and device unless given, as PyTorch's new_*
    def _new(self, factory, *args, device=None, dtype=None, requires_grad=False, **size):
        return factory(*args, device=device or self.device, dtype=dtype or self.dtype, requires_grad=requires_grad, **size)

    new_zeros = lambda self, *size, **kw: self._new(zeros, *size, **kw)
    new_ones = lambda self, *size, **kw: self._new(ones, *size, **kw)
    new_empty = lambda self, *size, **kw: self._new(empty, *size, **kw)
    new_full = lambda self, size, fill_value, **kw: self._new(full, size, fill_value, **kw)
    new_tensor = lambda self, data, **kw: self._new(tensor, data, **kw)   # (a tensor's values copied, as PyTorch's)

    # in-place methods, on the in-place operators' and item assignment's machinery: the same checks, recorded where
    # autograd records (a leaf that requires grad refused), else written into the tensor's memory, its version advanced
    def _alpha_scaled(self, other, alpha):
        """other * alpha for add_ and sub_, alpha checked as PyTorch's; other itself for alpha 1. For a float16 result,
        as PyTorch's, alpha and other are rounded to float16 and multiplied in float32, so the update rounds once."""
        result = _result_dtype(self, self._operand(other))
        if not isinstance(alpha, _NUMBERS):
            raise TypeError(f"alpha must be a number, not {type(alpha).__name__}")
        if isinstance(alpha, (bool, np.bool_)) and result != np.bool_:
            raise TypeError(f"a bool alpha is only supported for bool results, not {result} (as PyTorch's)")
        if isinstance(alpha, (float, np.floating)) and result.kind != 'f':
            raise TypeError(f"for integral input tensors ({result}), alpha must not be a floating point number "
                            "(as PyTorch's)")
        if alpha == 1 or result == np.bool_:   # (bools: alpha taken as a bool, as PyTorch's)
            return other if alpha else other & False
        if result != np.float16:
            return other * alpha
        scaled = self._operand(other).to(np.float16).float() * float(np.float16(alpha))
        return scaled.expand(self.shape) if scaled.ndim == 0 else scaled   # (0-d: += would round it to float16 again)

    add_ = lambda self, other, *, alpha=1: self.__iadd__(self._alpha_scaled(other, alpha))
    mul_ = lambda self, other: self.__imul__(other)
    div_ = lambda self, other: self.__itruediv__(other)
    pow_ = lambda self, exponent: self.__ipow__(exponent)

    def sub_(self, other, *, alpha=1):
        self._no_bool_subtraction(other)
        return self.__isub__(self._alpha_scaled(other, alpha))

    def _update_with(self, what, fn, *others):
        """This tensor's values replaced by fn(this tensor), in place (clamp_, relu_, modules' inplace=True): recorded
        where autograd records (this tensor or a tensor of `others`, which fn reads, requires grad). A result of a
        dtype of a higher kind or of another shape is refused, as the in-place operators refuse theirs."""
        def checked(t):
            out = fn(t)
            if _KIND_RANK[out.dtype.kind] > _KIND_RANK[self.dtype.kind]:
                raise TypeError(f"{what}: result type {out.dtype} can't be cast to the tensor's dtype {self.dtype}")
            if out.shape != self.shape:
                raise ValueError(f"{what}: a result of shape {out.shape}, not the tensor's {self.shape}")
            return out.to(self.dtype)
        if _GradMode.enabled and any(t._requires_grad for t in (self, *others) if isinstance(t, Tensor)):
            return self._recorded_update(what, checked)
        self._refuse_expanded(what)
        self.data[...] = checked(self).data
        self._version[0] += 1
        return self

    def clamp_(self, min=None, max=None):
        """clamp in place (tensor bounds broadcasting wider than this tensor refused)."""
        return self._update_with('clamp_', lambda t: t.clamp(min, max), min, max)

    clip_ = clamp_

    def relu_(self):
        return self._update_with('relu_', Tensor.relu)

    def _assign(self, what, value, shared=False):
        """Every element set to `value` (a tensor, moved to this device, broadcast to this shape and cast to this dtype,
        as PyTorch's copy_ and fill_ take it): item assignment's SetItem where autograd records, else a write into
        this tensor's memory (shared: also where its elements share memory, as PyTorch's fill_ writes an expand())."""
        value = value.to(self.device)
        if _check_broadcast(what, self.shape, value.shape) != self.shape:
            raise ValueError(f"{what}: a value of shape {value.shape} cannot be broadcast to the tensor's shape "
                             f"{self.shape}")
        if _GradMode.enabled and (self._requires_grad or value._requires_grad):
            return self._recorded_update(what, lambda before: SetItem.apply(
                before, before if value is self else value, steps=[(Ellipsis,)]))
        if not shared:
            self._refuse_expanded(what)
        with np.errstate(invalid='ignore'):   # NaN or inf cast to an integer: as PyTorch, no warning
            self.data[...] = _unaliased(value.data, self.data)
        self._version[0] += 1
        return self

    def copy_(self, src, non_blocking=False):
        """src's values (a tensor broadcast, cast to this dtype, from any device; or a number), as PyTorch's copy_;
        differentiable to src."""
        if not isinstance(src, (Tensor,) + _NUMBERS):
            raise TypeError(f"copy_: src must be a Tensor or a number, not {type(src).__name__}")
        return self._assign('copy_', self._operand(src))

    def fill_(self, value):
        """Every element `value` (a number, or a 0-d tensor from any device), as PyTorch's fill_."""
        if isinstance(value, Tensor) and value.ndim:
            raise ValueError(f"fill_: the value must be a number or a 0-d tensor, got one of shape {value.shape}")
        _check_fits(value, self.dtype, 'fill_')
        return self._assign('fill_', value if isinstance(value, Tensor) else self._operand(value), shared=True)

    def detach_(self):
        """This tensor made a leaf that requires no gradient, as PyTorch's detach_. Refused where a recorded op still
        reaches its history through it: that op's backward would lose the way (PyTorch's keeps it)."""
        if self._ctx is not None and self._held:
            raise RuntimeError(f"detach_() on a tensor of shape {self.shape} that a recorded op took as an input (its "
                               "backward would lose the path through it): use .detach(), or detach_() after the backward")
        self._ctx, self._requires_grad = None, False
        return self

    def _index_steps(self, index):
        """`index` (lists as arrays, uint8 arrays as masks) as the index tuples to apply one after another: itself, or,
        where it mixes integers with arrays, the integers first (PyTorch applies them as selects, so that an integer
        and an array apart do not send the array's axes to the front as NumPy would), then the rest."""
        index = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, slice) and i.step is not None and i.step <= 0 for i in index):
            raise ValueError(f"index {index}: a slice's step must be greater than zero (as in PyTorch)")
        index = tuple(_index_array(i, _xp(self.data)) if isinstance(i, list) else i for i in index)
        # uint8 arrays and tensors are masks, as PyTorch's (a NumPy uint8 scalar is an integer there)
        masks = [isinstance(i, (Tensor,) + _ARRAYS) and i.dtype == np.uint8 for i in index]
        if any(mask and i.ndim for mask, i in zip(masks, index)):
            warnings.warn("indexing with dtype uint8 is deprecated (as in PyTorch), please use a dtype bool instead",
                          UserWarning, stacklevel=_stacklevel())
        index = tuple(i != 0 if mask else i for mask, i in zip(masks, index))
        dims = [_index_dims(i) for i in index]   # (None: a basic entry)
        ellipses = [k for k, i in enumerate(index) if i is Ellipsis]
        if len(ellipses) == 1 and any(d is not None for d in dims):   # as whole axes, as PyTorch takes it
            # (to NumPy an Ellipsis of no axes still parts the arrays beside it, sending their axes to the front)
            taken = sum(1 if d is None else d for i, d in zip(index, dims) if i is not None and i is not Ellipsis)
            at, whole = ellipses[0], max(self.ndim - taken, 0)
            index = index[:at] + (slice(None),) * whole + index[at + 1:]
            dims = dims[:at] + [None] * whole + dims[at + 1:]
        selects = [_is_select(i) for i in index]
        if not any(selects) or all(selects) or all(d is None for d in dims):
            return [index]
        first = []   # the integers, every other axis whole
        for i, d, select in zip(index, dims, selects):
            if select or i is Ellipsis:
                first.append(i)
            elif i is not None:   # None adds an axis: in the second step only
                first += [slice(None)] * (1 if d is None else d)
        return [tuple(first), tuple(i for i, select in zip(index, selects) if not select)]

    def __getitem__(self, index):
        steps = self._index_steps(index)
        if len(steps) > 1:
            return self[steps[0]][steps[1]]
        converted, index_tensors = [], []
        for i in map(_as_select, steps[0]):
            if isinstance(i, Tensor):
                if i.device != self.device:
                    raise RuntimeError(f"indexing a tensor on {self.device} with one on {i.device}")
                index_tensors.append(i)
                i = _INDEX_INPUT
            elif isinstance(i, np.ndarray) and self.device != 'cpu':
                i = _move(i, self.device)
            converted.append(i)
        try:
            return GetItem.apply(self, *index_tensors, index=tuple(converted))
        except IndexError as e:
            raise IndexError(f"index {index} is invalid for a tensor of shape {self.shape}: {e}") from None

    def __setitem__(self, index, value):
        if self.dtype != np.float16:   # (float16 takes a number beyond its range as inf, as PyTorch's)
            _check_fits(value, self.dtype, 'item assignment')
        value = self._operand(value)
        if value.device != self.device:
            raise RuntimeError(f"item assignment of a tensor on {value.device} into one on {self.device}")

        def arrays(step):   # index tensors as their arrays (copies: a recorded backward keeps them), on this device
            return tuple(_move(i.data if isinstance(i, Tensor) else i, self.device).copy()
                         if isinstance(i, (Tensor, np.ndarray)) else i for i in map(_as_select, step))
        steps = [arrays(step) for step in self._index_steps(index)]
        if self.device != 'cpu':
            _check_gpu_index(_written(self.data, steps).shape, steps[-1])
        extra = 0
        if value.ndim:   # (a number always fits: no gather of the indexed elements for their shape)
            indexed = _written(self.data, steps)[steps[-1]].shape   # (no local keeps a view: see _recorded_update)
            fitted = _check_broadcast('item assignment (indexed elements, value)', indexed, value.shape)
            if fitted != (1,) * (len(fitted) - len(indexed)) + indexed:
                raise ValueError(f"item assignment: a value of shape {value.shape} cannot be broadcast to the indexed "
                                 f"shape {indexed}")
            extra = value.ndim - len(indexed)   # leading size-1 axes beyond the indexed ones: dropped (masks refuse)
        fit = lambda v: v.reshape(v.shape[extra:]) if extra > 0 else v
        if _GradMode.enabled and (self._requires_grad or value._requires_grad):
            self._recorded_update('item assignment', lambda before: SetItem.apply(
                before, fit(before if value is self else value), steps=steps))
            return
        target = _written(self.data, steps)
        # as PyTorch: a slice's elements must not share memory (e[0] of an expand may be written); an index array's
        # tensor's not at all (PyTorch deprecates such writes)
        self._refuse_expanded('item assignment', target[steps[-1]] if _is_basic_index(steps[-1]) else None)
        target[steps[-1]] = _unaliased(fit(value).data.astype(self.dtype, copy=False), self.data)
        self._version[0] += 1


# ================================================================ functions

def tensor(data, requires_grad=False, device=None, dtype=None):
    return Tensor(data, requires_grad=requires_grad, device=device, dtype=dtype)


def as_tensor(data, dtype=None, device=None):
    """As PyTorch's: a tensor itself where dtype and device do not change it; else as tl.tensor (which keeps an array's
    memory where it can)."""
    if isinstance(data, Tensor):
        return data if dtype is None and device is None else data.to(device=device, dtype=dtype)
    return Tensor(data, device=device, dtype=dtype)


def from_numpy(array):
    """A CPU tensor on a NumPy array's memory, as PyTorch's: a write to either shows in the other."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a NumPy array, got {type(array).__name__}")
    return Tensor(array)


def _factory(make, shape, device, dtype, requires_grad):
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    if not all(map(_is_int, shape)):
        raise TypeError(f"size must be ints, got {shape!r}")
    if any(n < 0 for n in shape):
        raise ValueError(f"size must be non-negative, got {shape!r}")
    device = _parse_device(device)
    with _on(device):
        array = make(np if device == 'cpu' else cp, shape, _dtype(dtype or np.float32))
    return Tensor(array, requires_grad=requires_grad)


@_aliases(size='shape')
def zeros(*shape, device=None, dtype=None, requires_grad=False):
    return _factory(lambda xp, s, d: xp.zeros(s, d), shape, device, dtype, requires_grad)


@_aliases(size='shape')
def ones(*shape, device=None, dtype=None, requires_grad=False):
    return _factory(lambda xp, s, d: xp.ones(s, d), shape, device, dtype, requires_grad)


def _python_data(data, dtype):
    """Python numbers (nested lists of them) as a NumPy array typed as PyTorch types them (int64, float32, bool) where
    dtype is None, with NumPy scalars among them keeping their dtypes, promoted with those. As PyTorch's: an int beyond
    int64 raises (NumPy makes it uint64 or an object) unless dtype is a float one, and so does a value an integer dtype
    cannot hold (NumPy would wrap it)."""
    array, dtype = np.array(data), dtype and _dtype(dtype)
    kind = array.dtype.kind   # NumPy makes ints beyond int64 uint64, objects, or (with smaller ones) float64
    big = kind == 'O' or kind in 'uf' and array.size and np.abs(array).max() >= 2 ** 63
    ints = (int, np.integer)   # (NumPy's integers too: a uint64 one beyond int64 wrapped)
    if big and array.size and all(isinstance(v, ints) for v in np.array(data, dtype=object).flat) and (
            dtype is None or dtype.kind in 'iu'):
        raise ValueError(f"tensor: an int beyond int64's range cannot be converted (overflow), in {data!r}"[:200])
    if dtype is not None:
        _check_data_fits(array, dtype)
        return array
    if array.dtype in (np.bool_, np.int64):   # (Python's bools or ints, NumPy's among them too: PyTorch's the same)
        return array
    if array.dtype.kind not in 'iuf':
        return array
    types = set(map(type, np.array(data, dtype=object).ravel()))
    typed = [np.dtype(t if issubclass(t, np.generic) else bool if issubclass(t, bool) else
                      np.int64 if issubclass(t, int) else np.float32) for t in types]
    return array.astype(_promote(*typed) if typed else np.float32)   # ([]: float32)


def _check_data_fits(array, dtype):
    """tensor()'s numbers in an integer dtype: the least and the greatest (any NaN) must fit (_check_fits)."""
    if dtype.kind in 'iu' and array.dtype.kind in 'iuf' and array.size:
        for value in (array.min(), array.max()):
            _check_fits(value.item(), dtype, 'tensor')


def _check_fits(value, dtype, what):
    """As PyTorch's fills: a number that an integer dtype cannot hold (out of range, NaN, inf) raises, not wraps (a
    negative one for uint8 too, which PyTorch wraps), and a finite one beyond a float dtype's range (1e10 in float16)
    raises, not overflows to inf."""
    kind = np.dtype(dtype).kind
    if not isinstance(value, _NUMBERS) or isinstance(value, (bool, np.bool_)):
        return
    if kind in 'iu':   # (inf tested apart: NumPy compares a float16 one with the bounds rounded to float16, inf)
        inf_or_nan = isinstance(value, (float, np.floating)) and not math.isfinite(value)
        overflows = inf_or_nan or not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max
    else:
        overflows = kind == 'f' and math.isfinite(value) and abs(value) > float(np.finfo(dtype).max)
    if overflows:
        raise RuntimeError(f"{what}: {value} cannot be converted to {np.dtype(dtype)} without overflow")


@_aliases(size='shape')
def full(shape, fill_value, device=None, dtype=None, requires_grad=False):
    if isinstance(fill_value, Tensor) and fill_value.ndim == 0:   # as PyTorch: a 0-d tensor's number
        fill_value = fill_value.item()
    if not isinstance(fill_value, _NUMBERS):
        raise TypeError(f"full: fill_value must be a number, not {type(fill_value).__name__}")
    own = _number_dtype(fill_value)   # (an int PyTorch cannot convert raises, whatever the dtype)
    dtype = _dtype(dtype or own)
    _check_fits(fill_value, dtype, 'full')
    return _factory(lambda xp, s, d: xp.full(s, fill_value, d), (shape,), device, dtype, requires_grad)


def _float_dtype(dtype, what):
    if dtype is not None and _dtype(dtype).kind != 'f':
        raise TypeError(f"{what}: dtype must be a floating-point type, not {_dtype(dtype)}")
    return dtype


@_aliases(size='shape')
def randn(*shape, device=None, dtype=None, requires_grad=False):
    return _factory(lambda xp, s, d: xp.random.standard_normal(s).astype(d), shape, device,
                    _float_dtype(dtype, 'randn'), requires_grad)


@_aliases(size='shape')
def rand(*shape, device=None, dtype=None, requires_grad=False):
    """Uniform on [0, 1) as PyTorch's: float64 draws cut down to the dtype's steps of 2^-(mantissa + 1) (rounded,
    float16's and float32's largest draws would be 1)."""
    def draw(xp, s, d):
        steps = 2.0 ** (np.finfo(d).nmant + 1)
        return (xp.floor(xp.random.random(s) * steps) / steps).astype(d)
    return _factory(draw, shape, device, _float_dtype(dtype, 'rand'), requires_grad)


def zeros_like(t, device=None, dtype=None, requires_grad=False):
    return zeros(*t.shape, device=device or t.device, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t, device=None, dtype=None, requires_grad=False):
    return ones(*t.shape, device=device or t.device, dtype=dtype or t.dtype, requires_grad=requires_grad)


def full_like(t, fill_value, device=None, dtype=None, requires_grad=False):
    return full(t.shape, fill_value, device=device or t.device, dtype=dtype or t.dtype, requires_grad=requires_grad)


def arange(start, end=None, step=1, device=None, dtype=None, requires_grad=False):
    start, end = (0, start) if end is None else (start, end)
    start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))   # 0-d tensors: numbers
    integral = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    dtype = _dtype(dtype or (np.int64 if integral else np.float32))
    if dtype == np.bool_:
        raise TypeError("arange: not defined for bool (as in PyTorch)")
    if not all(map(math.isfinite, (start, end, step))):   # (PyTorch's infinite step gives no element; NumPy's one)
        raise ValueError(f"arange: start, end and step must be finite, got {start}, {end} and {step}")
    if dtype.kind in 'iu':   # as PyTorch, an integer range truncates its bounds and step to integers first
        start, end, step = int(start), int(end), int(step)
    if step == 0 or (end - start) * step < 0:   # as PyTorch's RuntimeError, not an empty range
        raise ValueError(f"arange: step {step} cannot go from {start} to {end} in {dtype}")
    return _factory(lambda xp, s, d: xp.arange(start, end, step).astype(d), ((),), device, dtype, requires_grad)


@_aliases(size='shape')
def empty(*shape, device=None, dtype=None, requires_grad=False):
    """zeros: PyTorch leaves the values unspecified; zeros make every read of them reproducible."""
    return zeros(*shape, device=device, dtype=dtype, requires_grad=requires_grad)


def eye(n, m=None, device=None, dtype=None, requires_grad=False):
    """The n x m (n x n) matrix of ones on the diagonal, as PyTorch's."""
    m = n if m is None else m
    for name, v in (('n', n), ('m', m)):
        if not _is_int(v):
            raise TypeError(f"eye: {name} must be an int, not {type(v).__name__}")
        if v < 0:
            raise ValueError(f"eye: {name} must be greater or equal to 0, got {v}")
    return _factory(lambda xp, s, d: xp.eye(n, m, dtype=d), ((),), device, dtype, requires_grad)


def linspace(start, end, steps, device=None, dtype=None, requires_grad=False):
    """steps values from start to end, float32 by default, with PyTorch's formula: the first half start + step * i,
    the second end - step * (steps - 1 - i), here in float64 rounded once to dtype (PyTorch's computes in dtype: the
    values may differ from its in the last bit); an integer dtype truncates start and end first, then each value."""
    if not _is_int(steps):
        raise TypeError(f"linspace: steps must be an int, not {type(steps).__name__}")
    if steps < 0:
        raise ValueError(f"linspace: the number of steps must be non-negative, got {steps}")
    dtype = _dtype(dtype or np.float32)
    if dtype == np.bool_:
        raise TypeError("linspace: not defined for bool (as in PyTorch)")
    for v in (start, end):   # (as PyTorch: NumPy's cast would wrap an integer, make a float16 inf)
        _check_fits(v, dtype, 'linspace')
    start, end = (int(v) if dtype.kind in 'iu' else float(v) for v in (start, end))
    i, step = np.arange(steps), (end - start) / max(steps - 1, 1)
    values = np.where(i < max(steps // 2, 1), start + step * i, end - step * (steps - 1 - i))
    return _factory(lambda xp, s, d: xp.asarray(values).astype(d), ((),), device, dtype, requires_grad)


def randint(low=0, high=None, size=None, device=None, dtype=None, requires_grad=False):
    """Integers drawn uniformly from [low, high), int64 unless dtype says, as PyTorch's randint(high, size) and
    randint(low, high, size), size a tuple."""
    if size is None:   # randint(high, size)
        low, high, size = 0, low, high
    elif high is None:   # randint(high, size=size)
        low, high = 0, low
    if not (_is_int(low) and _is_int(high) and isinstance(size, (tuple, list))):
        raise TypeError(f"randint: expected (low, high, size) or (high, size), ints and a tuple, got low={low!r}, "
                        f"high={high!r}, size={size!r}")
    if low >= high:
        raise ValueError(f"randint: low must be less than high, got low={low} >= high={high}")
    dtype = _dtype(dtype or np.int64)
    for bound in (low, high - 1):
        _check_fits(bound, dtype, 'randint')
    return _factory(lambda xp, s, d: xp.random.randint(low, high, s, np.int64).astype(d), (size,), device, dtype,
                    requires_grad)


def randn_like(t, device=None, dtype=None, requires_grad=False):
    return randn(*t.shape, device=device or t.device, dtype=dtype or t.dtype, requires_grad=requires_grad)


def rand_like(t, device=None, dtype=None, requires_grad=False):
    return rand(*t.shape, device=device or t.device, dtype=dtype or t.dtype, requires_grad=requires_grad)


def empty_like(t, device=None, dtype=None, requires_grad=False):
    return zeros_like(t, device, dtype, requires_grad)


def manual_seed(seed):
    """Seed NumPy's global generator and, where present, CuPy's. As PyTorch's: any integer in [-2**63, 2**64), a
    negative one taken modulo 2**64, and what int() takes (NumPy takes seeds of 32 bits or more as 32-bit words)."""
    seed = int(seed)
    if not -2 ** 63 <= seed < 2 ** 64:
        raise ValueError(f"manual_seed: the seed must lie in [-2**63, 2**64), got {seed}")
    seed %= 2 ** 64
    np.random.seed(seed if seed < 2 ** 32 else [seed & 0xFFFFFFFF, seed >> 32])
    if cuda_is_available():
        cp.random.seed(seed)


def _same_device(tensors, what):
    devices = {_need_tensor(t, what).device for t in tensors}
    if len(devices) > 1:
        raise RuntimeError(f"{what}: expected all tensors on one device, got {', '.join(sorted(devices))}")


def _tensor_sequence(tensors, what):
    """cat's and stack's tensors as a list, as PyTorch's: a sequence (not one tensor) of at least one tensor."""
    if isinstance(tensors, Tensor):
        raise TypeError(f"{what}: expected a sequence of tensors, got one tensor")
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what}: needs at least one tensor")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: expected a tensor as element {i}, got {type(t).__name__}")
    return tensors


@_aliases(dim='axis')
def cat(tensors, axis=0):
    tensors = _tensor_sequence(tensors, 'cat')
    _same_device(tensors, 'cat')
    if any(t.ndim == 0 for t in tensors):
        raise ValueError(f"cat: a zero-dimensional tensor cannot be concatenated (shapes {[t.shape for t in tensors]})")
    axis = _dim(axis, tensors[0].ndim)
    for t in tensors[1:]:
        if t.ndim != tensors[0].ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, tensors[0].shape)) if i != axis):
            raise ValueError(f"cat: shapes {tensors[0].shape} and {t.shape} differ outside axis {axis}")
    common = _promote(*[t.dtype for t in tensors])
    return Cat.apply(*[t.to(common) for t in tensors], axis=axis)


@_aliases(dim='axis')
def stack(tensors, axis=0):
    tensors = _tensor_sequence(tensors, 'stack')
    for t in tensors[1:]:
        if t.shape != tensors[0].shape:
            raise ValueError(f"stack: shapes {tensors[0].shape} and {t.shape} differ")
    axis = _dim(axis, tensors[0].ndim, new=True)
    return cat([t.unsqueeze(axis) for t in tensors], axis)


def _method(name):
    """tl.name(input, ...) as torch.name: input.name(...)."""
    def function(input, *args, **kwargs):
        return getattr(_need_tensor(input, name), name)(*args, **kwargs)
    function.__name__ = function.__qualname__ = name
    return function


(gather, scatter, scatter_add, index_select, masked_fill, masked_select, repeat_interleave, split, chunk, unbind,
 narrow, roll, tril, triu, cumsum, prod, logsumexp, norm, sort, argsort, topk, relu, sigmoid, tanh, gelu, exp, log,
 sqrt, neg, clamp, sin, cos, log1p, expm1, erf, reciprocal, rsqrt, square, floor, ceil, trunc, sign, isnan, isinf,
 isfinite, nan_to_num, lerp, addcmul, addcdiv, maximum, minimum, pad, flip, bmm, outer, dot, mean, var, std, argmax,
 argmin, reshape, flatten, unflatten, transpose, swapaxes, permute, movedim, unsqueeze, squeeze, matmul, clone, t,
 detach, clamp_, fill_, zero_, detach_, clip, amax, amin, mm, mv, tile, moveaxis, swapdims, numel, relu_,
 clip_) = map(_method, (
    'gather', 'scatter', 'scatter_add', 'index_select', 'masked_fill', 'masked_select', 'repeat_interleave',
    'split', 'chunk', 'unbind', 'narrow', 'roll', 'tril', 'triu', 'cumsum', 'prod', 'logsumexp', 'norm', 'sort',
    'argsort', 'topk', 'relu', 'sigmoid', 'tanh', 'gelu', 'exp', 'log', 'sqrt', 'neg', 'clamp', 'sin', 'cos',
    'log1p', 'expm1', 'erf', 'reciprocal', 'rsqrt', 'square', 'floor', 'ceil', 'trunc', 'sign', 'isnan', 'isinf',
    'isfinite', 'nan_to_num', 'lerp', 'addcmul', 'addcdiv', 'maximum', 'minimum', 'pad', 'flip', 'bmm', 'outer',
    'dot', 'mean', 'var', 'std', 'argmax', 'argmin', 'reshape', 'flatten', 'unflatten', 'transpose', 'swapaxes',
    'permute', 'movedim', 'unsqueeze', 'squeeze', 'matmul', 'clone', 't', 'detach', 'clamp_', 'fill_', 'zero_',
    'detach_', 'clip', 'amax', 'amin', 'mm', 'mv', 'tile', 'moveaxis', 'swapdims', 'numel', 'relu_', 'clip_'))


def _builtin_form(name):
    """torch.name for a Tensor method named as a Python builtin (see __getattr__): as torch's, max and min of two
    tensors are maximum and minimum, pow takes a number for input where exponent is a tensor."""
    if name == 'pow':
        def function(input, exponent):
            if not isinstance(input, Tensor) and not isinstance(exponent, Tensor):
                raise TypeError(f"pow: input or exponent must be a tl.Tensor, got {type(input).__name__} and "
                                f"{type(exponent).__name__}")
            return input.pow(exponent) if isinstance(input, Tensor) else exponent.__rpow__(input)
    elif name in ('max', 'min'):
        method, pairwise = _method(name), maximum if name == 'max' else minimum

        def function(input, *args, **kwargs):
            if len(args) == 1 and not kwargs and isinstance(args[0], Tensor):
                return pairwise(input, *args)
            return method(input, *args, **kwargs)
    else:
        return _method(name)
    function.__name__ = function.__qualname__ = name
    return function


_BUILTIN_FORMS = {name: _builtin_form(name) for name in ('abs', 'all', 'any', 'max', 'min', 'pow', 'round', 'sum')}


def __getattr__(name):
    """tl.sum, tl.max, ... (_BUILTIN_FORMS): torch.X's forms of the Tensor methods named as Python's builtins, and
    tl.float, tl.int, ... (_DTYPE_ALIASES), found here (a module's __getattr__ answers for names it lacks) so that this
    file's own sum(), float(), ... stay Python's."""
    if name in _BUILTIN_FORMS or name in _DTYPE_ALIASES:
        return _BUILTIN_FORMS.get(name) or _DTYPE_ALIASES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    """dir(tl): the module's names and __getattr__'s."""
    return sorted({*globals(), *_BUILTIN_FORMS, *_DTYPE_ALIASES})


def where(condition, a, b):
    condition = condition if isinstance(condition, Tensor) else Tensor(condition)
    if condition.dtype == np.uint8:   # PyTorch's deprecation, as for a uint8 index
        warnings.warn("where received a uint8 condition tensor: deprecated (as in PyTorch), use a bool one",
                      UserWarning, stacklevel=_stacklevel())
    elif condition.dtype != np.bool_:
        raise TypeError(f"where: the condition must be a bool tensor, not {condition.dtype} (as PyTorch's)")
    numbers = [v for v in (a, b) if isinstance(v, _NUMBERS)]
    if not isinstance(a, Tensor):
        a = b._operand(a) if isinstance(b, Tensor) else Tensor(a, device=condition.device)
    b = a._operand(b)
    if a.dtype == b.dtype != np.float16:   # as PyTorch: a number the dtype cannot hold raises (float16's: inf)
        for v in numbers:
            _check_fits(v, a.dtype, 'where')
    if a.dtype != b.dtype:
        common = _result_dtype(a, b)
        a, b = a.to(common), b.to(common)
    _same_device([condition, a, b], 'where')
    _check_broadcast('where (condition, a, b)', condition.shape, a.shape, b.shape)
    return Where.apply(a, b, condition=condition.data.astype(bool))


# (silu and leaky_relu: torch.nn.functional's; PyTorch has no Tensor.silu nor Tensor.leaky_relu)
def silu(x):
    """x sigmoid(x), float16 in float32 (rounded once), as PyTorch's."""
    if _need_float(x, 'silu').dtype == np.float16:
        return silu(x.float()).half()
    return x * x.sigmoid()


leaky_relu = lambda x, negative_slope=0.01: where(_need_float(x, 'leaky_relu') > 0, x, x * negative_slope)


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + e^(beta x)) / beta, and x itself where beta x > threshold, as PyTorch's (float16 in float32, rounded
    once). The other branch sees 0 there, so that an e^(beta x) overflowing in it gives no NaN gradient."""
    if _need_float(x, 'softplus').dtype == np.float16:
        return softplus(x.float(), beta, threshold).half()
    z = x * beta
    linear = z > threshold
    return where(linear, x, where(linear, 0, z).exp().log1p() / beta)


def elu(x, alpha=1.0):
    """x where x > 0, else alpha (e^x - 1), as PyTorch's: its gradient alpha at 0 and 1 at NaN, float16 in float32
    (rounded once)."""
    if _need_float(x, 'elu').dtype == np.float16:
        return elu(x.float(), alpha).half()
    negative = x <= 0
    return where(negative, where(negative, x, 0).expm1() * alpha, x)


def _implicit_axis(fn, x, axis):
    """axis, or where None PyTorch's legacy choice for softmax and log_softmax, with its warning."""
    if axis is not None:
        return axis
    warnings.warn(f"Implicit dimension choice for {fn} has been deprecated. Change the call to include dim=X as an "
                  "argument.", stacklevel=_stacklevel())
    return 0 if x.ndim in (0, 1, 3) else 1


@_aliases(dim='axis')
def softmax(x, axis=-1, dtype=None):
    return _need_tensor(x, 'softmax').softmax(_implicit_axis('softmax', x, axis), dtype)


@_aliases(dim='axis')
def log_softmax(x, axis=-1, dtype=None):
    return _need_tensor(x, 'log_softmax').log_softmax(_implicit_axis('log_softmax', x, axis), dtype)


def einsum(equation, *operands):
    """torch.einsum: the sum of products an equation names, with a subscript (a letter) for each dim of each operand,
    '...' for the dims of an ellipsis, and '->' before the output's subscripts (else the ellipsis's dims, then the
    subscripts named once, in alphabetical order); operands separate or in a list; size-1 dims broadcast. One dtype for
    every operand (not bool). A permutation of one operand's dims is a view of it (as PyTorch's; its diagonals are
    copies here). Ellipses and broadcast dims are written out here: Einsum sees letters alone."""
    operands = tuple(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else operands
    if not isinstance(equation, str) or not operands or not all(isinstance(t, Tensor) for t in operands):
        raise TypeError("einsum: expected an equation string and one or more tensors")
    lhs, arrow, rhs = equation.replace(' ', '').partition('->')
    terms = lhs.split(',')
    named = lhs.replace('...', '').replace(',', '') + rhs.replace('...', '')
    if not all(c in _LETTERS for c in named) or any(t.count('...') > 1 for t in terms + [rhs]):
        raise ValueError(f"einsum: invalid equation {equation!r}: subscripts are letters (a-z, A-Z), '...' (once per "
                         "operand) an ellipsis, ',' between operands, '->' before the output")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: the equation {equation!r} names {len(terms)} operand(s), {len(operands)} given")
    if len({t.dtype for t in operands}) > 1 or operands[0].dtype == np.bool_:
        raise TypeError(f"einsum: expected operands of one dtype, not bool, got {', '.join(str(t.dtype) for t in operands)}")
    for i, (term, t) in enumerate(zip(terms, operands)):
        if len(term) - 3 * ('...' in term) > t.ndim or '...' not in term and len(term) != t.ndim:
            raise ValueError(f"einsum: operand {i} of shape {t.shape} has {t.ndim} dims, its subscripts {term!r} do "
                             "not name them")
    ellipsis = [t.ndim - len(term) + 3 for term, t in zip(terms, operands) if '...' in term]
    dots = ''.join(c for c in _LETTERS if c not in equation)[:max(ellipsis, default=0)]   # the ellipsis's dims
    terms = [term.replace('...', dots[len(dots) - t.ndim + len(term) - 3:]) for term, t in zip(terms, operands)]
    once = sorted(c for c in named if ''.join(terms).count(c) == 1)
    output = rhs.replace('...', dots) if arrow else dots + ''.join(once)
    for c in output:
        if output.count(c) > 1 or c not in ''.join(terms):
            raise ValueError(f"einsum: output subscript {c} of {equation!r} appears "
                             f"{'more than once' if output.count(c) > 1 else 'for no operand'}")
    size = {}   # each subscript's size (the one not 1), with the shape of an operand where it has it
    for i, (term, t) in enumerate(zip(terms, operands)):
        for c, n in zip(term, t.shape):
            if n != t.shape[term.index(c)]:
                raise ValueError(f"einsum: subscript {c} is repeated in operand {i} of shape {t.shape} with sizes "
                                 f"{t.shape[term.index(c)]} and {n}")
            if n != 1 and size.setdefault(c, (n, t.shape))[0] != n:
                raise ValueError(f"einsum: subscript {c} has size {n} in operand {i} of shape {t.shape}, {size[c][0]} "
                                 f"in one of shape {size[c][1]}")
    kept = [[k for k, (c, n) in enumerate(zip(term, t.shape)) if n != 1 or c not in size]
            for term, t in zip(terms, operands)]   # size-1 dims broadcast against larger ones: squeezed out
    operands = [t if len(k) == t.ndim else t.reshape(tuple(t.shape[i] for i in k)) for t, k in zip(operands, kept)]
    terms = tuple(''.join(term[i] for i in k) for term, k in zip(terms, kept))
    if operands[0].dtype.kind in 'iu' and any(c not in output and ''.join(terms).count(c) == term.count(c)
                                               for term in terms for c in term):
        operands = [t.long() for t in operands]   # as PyTorch's: a dim of one operand alone is summed first, into int64
    if len(terms) == 1 and len(output) == len(terms[0]) == len(set(terms[0])):   # a permutation: a view, as PyTorch's
        return operands[0].permute([terms[0].index(c) for c in output])
    return Einsum.apply(*operands, terms=terms, output=output)


def linear(x, weight, bias=None):
    _same_device([t for t in (x, weight, bias) if t is not None], 'linear')
    if x.ndim == 0 or x.shape[-1] != weight.shape[-1]:
        raise ValueError(f"linear: input of shape {x.shape} does not match weight of shape {weight.shape}")
    if weight.dtype != x.dtype or bias is not None and bias.dtype != x.dtype:   # as PyTorch's: no promotion
        raise TypeError(f"linear: input of dtype {x.dtype} with weight of dtype {weight.dtype}"
                        + ('' if bias is None else f" and bias of dtype {bias.dtype}") + " (convert them to one dtype)")
    out_shape = x.shape[:-1] + weight.shape[:-1]   # a 1-d weight: x @ weight, as PyTorch's
    if bias is not None and bias.shape != out_shape[-1:] and _check_broadcast(
            'linear (output, bias)', out_shape, bias.shape) != out_shape:
        raise ValueError(f"linear: a bias of shape {bias.shape} does not fit the output of shape {out_shape}")
    if bias is not None and bias.shape != out_shape[-1:]:   # one broadcast over leading axes too: added to the result
        return linear(x, weight) + bias
    if weight.ndim == 1:
        y = x @ weight
        return y if bias is None else y + bias
    # every leading axis in one product, as PyTorch's (its dW one product, not one a batch summed)
    rows = x if x.ndim == 2 else x.reshape(-1, x.shape[-1])
    if bias is None or x.dtype != np.float16:
        y = rows @ weight.T
        y = y if bias is None else y + bias
    else:   # the bias added to the unrounded product, one rounding (as PyTorch's addmm; twice was up to 2x its error)
        y = (MatMul.apply(rows, weight.T, out_dtype=np.float32) + bias).to(np.float16)
    return y if x.ndim == 2 else y.reshape(out_shape)


def _pair(v, what='kernel_size', least=1):
    """(a, b) from an int, a pair of ints or one int in a sequence, each at least `least`: a clear error naming `what`
    otherwise (TypeError for what is not ints, bools and floats included, as PyTorch's)."""
    pair = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    pair = pair * 2 if len(pair) == 1 else pair   # (k,): both, as PyTorch's
    if not all(map(_is_int, pair)):
        raise TypeError(f"{what} must be an int or a pair of ints, got {v!r}")
    if len(pair) != 2 or min(pair) < least:
        raise ValueError(f"{what} must be an int or a pair of ints, each at least {least}; got {v!r}")
    return tuple(int(i) for i in pair)


def _check_padding_string(padding, stride):
    if padding not in ('valid', 'same'):
        raise ValueError(f"conv2d: padding must be an int, a pair of ints, 'valid' or 'same'; got {padding!r}")
    if padding == 'same' and stride != (1, 1):
        raise ValueError(f"conv2d: padding='same' needs stride 1 (as PyTorch's, which refuses it for strided "
                         f"convolutions), got stride {stride}")


def conv2d(x, weight, bias=None, stride=1, padding=0):
    _same_device([t for t in (x, weight, bias) if t is not None], 'conv2d')
    if x.ndim not in (3, 4) or weight.ndim != 4 or x.shape[-3] != weight.shape[1]:
        raise ValueError(f"conv2d: input {x.shape} ((N,) C, H, W) and weight {weight.shape} (C_out, C_in, kh, kw) "
                         "do not match")
    if x.ndim == 3:   # one image, as PyTorch's: a batch of one
        return conv2d(x.unsqueeze(0), weight, bias, stride, padding).squeeze(0)
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"conv2d: bias of shape {bias.shape} for {weight.shape[0]} output channels")
    if 0 in weight.shape:
        raise ValueError(f"conv2d: weight {weight.shape} (C_out, C_in, kh, kw) needs at least one output channel, "
                         "one input channel and a window of at least 1x1")
    if x.dtype != weight.dtype or (bias is not None and bias.dtype != x.dtype):
        raise TypeError(f"conv2d: input dtype {x.dtype}, weight dtype {weight.dtype} and bias dtype "
                        f"{None if bias is None else bias.dtype} differ")
    if x.dtype == np.bool_:
        raise TypeError("conv2d: not defined for bool tensors (as in PyTorch)")
    stride = _pair(stride, 'conv2d: stride')
    if isinstance(padding, str):   # PyTorch's 'valid' (none) and 'same' (stride 1: an output of the input's size)
        _check_padding_string(padding, stride)
        total = [k - 1 if padding == 'same' else 0 for k in weight.shape[2:]]
        if total[0] % 2 or total[1] % 2:   # an even window: the odd row / column at the bottom / right, as PyTorch
            x = x.pad((0, total[1] % 2, 0, total[0] % 2))
        padding = (total[0] // 2, total[1] // 2)
    padding = _pair(padding, 'conv2d: padding', least=0)
    padded = tuple(n + 2 * p for n, p in zip(x.shape[2:], padding))
    if padded[0] < weight.shape[2] or padded[1] < weight.shape[3]:
        raise ValueError(f"conv2d: kernel {weight.shape[2:]} is larger than the padded input {padded}")
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Convolution.apply(*inputs, stride=stride, padding=padding)


def _pool(fn, x, kernel_size, stride, padding, fill):
    """fn (MaxPool or AvgPool) over x, `padding` of `fill` (max: the dtype's least; average: 0, PyTorch's
    count_include_pad) around each image first, as PyTorch's."""
    kernel = _pair(kernel_size, f'{fn.name}: kernel_size')
    empty = isinstance(stride, (tuple, list)) and not stride   # (): PyTorch's None
    stride = kernel if stride is None or empty else _pair(stride, f'{fn.name}: stride')
    padding = _pair(padding, f'{fn.name}: padding', least=0)
    if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:   # (so that no window is padding alone)
        raise ValueError(f"{fn.name}: padding {padding} must be at most half of kernel {kernel}")
    if _need_tensor(x, fn.name).ndim not in (3, 4):
        raise ValueError(f"{fn.name}: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape {x.shape}")
    if x.dtype == bool:
        raise TypeError(f"{fn.name}: not defined for bool tensors (as in PyTorch)")
    if any(padding):
        x = x.pad((padding[1], padding[1], padding[0], padding[0]), value=fill(x.dtype))
    if x.shape[-2] < kernel[0] or x.shape[-1] < kernel[1]:
        raise ValueError(f"{fn.name}: input of shape {x.shape} ((N,) C, H, W) is smaller than kernel {kernel}")
    if x.ndim == 3:   # one image, as PyTorch's: a batch of one
        return fn.apply(x.unsqueeze(0), kernel=kernel, stride=stride).squeeze(0)
    return fn.apply(x, kernel=kernel, stride=stride)


def max_pool2d(x, kernel_size, stride=None, padding=0):
    least = lambda dtype: -math.inf if dtype.kind == 'f' else np.iinfo(dtype).min
    return _pool(MaxPool, x, kernel_size, stride, padding, least)


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    return _pool(AvgPool, x, kernel_size, stride, padding, lambda dtype: 0)


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5,
               activation=None):
    """PyTorch's batch_norm; `activation` ('relu' or 'gelu') applies that activation in the same pass
    (one fused kernel on the GPU), for conv blocks."""
    if activation not in _ACTIVATIONS:
        raise ValueError(f"batch_norm: activation must be None, 'relu' or 'gelu', not {activation!r}")
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected an input of shape (N, C, ...), got shape {x.shape}")
    channels = x.shape[1]
    for name, t in (('running_mean', running_mean), ('running_var', running_var), ('weight', weight), ('bias', bias)):
        if t is not None and t.shape != (channels,):
            raise ValueError(f"batch_norm: {name} of shape {t.shape} for input of shape {x.shape}")
    if (running_mean is None) != (running_var is None):
        raise ValueError("batch_norm: running_mean and running_var must both be given or both be None")
    _need_float(x, 'batch_norm')
    for name, t in (('running_mean', running_mean), ('running_var', running_var)):
        if t is not None and t.dtype.kind != 'f':   # (their update would be truncated into them)
            raise TypeError(f"batch_norm: {name} of dtype {t.dtype}: a floating-point one is needed (as PyTorch's)")
        if t is not None and t.requires_grad and _GradMode.enabled:   # (updated in place, not differentiated)
            raise RuntimeError(f"batch_norm is not differentiable with respect to {name}, which requires grad")
    # weight and bias as PyTorch's: one dtype, x's or float32 for a float16 x (mixed precision); the running statistics
    # any floating-point dtype (PyTorch's: the parameters')
    affine = [(name, t) for name, t in (('weight', weight), ('bias', bias)) if t is not None]
    if len({t.dtype for _, t in affine}) > 1 or any(t.dtype not in (x.dtype, _opmath(x.dtype)) for _, t in affine):
        raise TypeError(f"batch_norm: input of dtype {x.dtype} with " + ', '.join(f"{name} of dtype {t.dtype}"
                        for name, t in affine) + f": weight and bias must share one dtype, {x.dtype}"
                        + (" or float32" if x.dtype == np.float16 else ""))
    if not isinstance(momentum, _REALS):
        raise TypeError(f"batch_norm: momentum must be a number, got {momentum!r}")
    if not training and running_mean is None:
        raise ValueError("batch_norm: evaluation mode needs running_mean and running_var")
    if training and x.shape[0] * math.prod(x.shape[2:]) == 1:
        raise ValueError(f"batch_norm: training needs more than one value per channel, got input of shape {x.shape}")
    if not (eps > 0 if training else eps >= 0):   # PyTorch's messages
        raise ValueError(f"batch_norm eps must be {'positive during training' if training else 'non-negative'}, but "
                         f"got {eps}")
    dtype = np.float32 if x.dtype == np.float16 else x.dtype
    weight = weight if weight is not None else ones(channels, device=x.device, dtype=dtype)
    bias = bias if bias is not None else zeros(channels, device=x.device, dtype=dtype)
    _same_device([t for t in (x, weight, bias, running_mean, running_var) if t is not None], 'batch_norm')
    stat = lambda t: None if t is None else t.data
    return BatchNorm.apply(x, weight, bias, running_mean=stat(running_mean), running_var=stat(running_var),
                           training=training, momentum=momentum, eps=eps, act=activation)


def _normalized_shape(shape, what):
    """normalized_shape (an int or a sequence of ints) as a tuple of ints."""
    shape = shape if isinstance(shape, (tuple, list)) else (shape,)
    if not all(map(_is_int, shape)):
        raise TypeError(f"{what}: normalized_shape must be an int or a tuple of ints, got {shape!r}")
    return tuple(map(int, shape))


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """PyTorch's layer_norm over the last len(normalized_shape) axes (also taking an int, as LayerNorm does)."""
    shape = _normalized_shape(normalized_shape, 'layer_norm')
    _need_float(x, 'layer_norm')
    if not shape:
        raise ValueError("layer_norm: normalized_shape must hold at least one dimension, got ()")
    if x.shape[-len(shape):] != shape:
        raise ValueError(f"layer_norm: normalized_shape {shape} must be the last dimensions of the input, got input "
                         f"of shape {x.shape}")
    for name, t in (('weight', weight), ('bias', bias)):
        if t is not None and t.shape != shape:
            raise ValueError(f"layer_norm: {name} of shape {t.shape} for normalized_shape {shape}")
        if t is not None and t.dtype != x.dtype and (x.dtype, t.dtype) != (np.float16, np.float32):   # as PyTorch
            raise TypeError(f"layer_norm: {name} of dtype {t.dtype} for input of dtype {x.dtype}")
    affine = [t for t in (weight, bias) if t is not None]
    _same_device([x] + affine, 'layer_norm')
    return LayerNormOp.apply(x, *affine, given=(weight is not None, bias is not None), eps=eps,
                             axes=tuple(range(x.ndim - len(shape), x.ndim)))


def _class_targets(what, input, target, ignore_index):
    """input and its target of class indices as PyTorch's cross_entropy and nll_loss take them: input (C,) with a 0-d
    (or (1,)) target, (N, C) with (N,), or (N, C, d1, ...) with (N, d1, ...) (checked); returns input as the (rows, C)
    matrix of every position's scores, classes last, the int64 target (rows,), and the shape of a loss per position."""
    if not _is_int(ignore_index) or not -2 ** 63 <= ignore_index < 2 ** 63:
        raise TypeError(f"{what}: ignore_index must be an int64 class index, got {ignore_index!r}")
    target = target if isinstance(target, Tensor) else Tensor(np.asarray(target), device=input.device)
    expected = () if input.ndim == 1 else input.shape[:1] + input.shape[2:]
    if input.ndim == 0 or target.shape != expected and not (input.ndim == 1 and target.shape == (1,)):
        raise ValueError(f"{what}: input of shape {input.shape} ((C,), (N, C) or (N, C, d1, ...)) needs "
                         f"targets of shape {expected if input.ndim else '(N, d1, ...)'}, got {target.shape}")
    if target.dtype.kind not in 'iu':
        raise TypeError(f"{what}: targets must be integer class indices, not {target.dtype}" + (
            " (cross_entropy's class probabilities: a target of the input's shape)" if what == 'cross_entropy' else ''))
    _need_float(input, what)
    _same_device([input, target], what)
    if input.ndim != 2:
        classes_last = input.permute(0, *range(2, input.ndim), 1) if input.ndim > 2 else input
        input, target = classes_last.reshape(-1, input.shape[1 if input.ndim > 1 else 0]), target.reshape(-1)
    target = target if target.dtype == np.int64 else Tensor._wrap(target.data.astype(np.int64), target.device)
    return input, target, expected


_LOSS_REDUCTIONS = ('mean', 'sum', 'none')


def _check_reduction(what, reduction, reductions=_LOSS_REDUCTIONS):
    if reduction not in reductions:
        raise ValueError(f"{what}: reduction must be {', '.join(map(repr, reductions))}, not {reduction!r}")


def cross_entropy(logits, target, label_smoothing=0.0, reduction='mean', ignore_index=-100, weight=None):
    """PyTorch's cross_entropy of class indices; with a weight per class (composed: log_softmax, then nll_loss's
    weighted rows), 'mean' divides by the kept rows' weights, label smoothing weighting each class's share too. A
    floating-point target of the input's shape holds class probabilities (_soft_cross_entropy)."""
    _check_reduction('cross_entropy', reduction)
    if isinstance(label_smoothing, Tensor) and label_smoothing.ndim:
        raise TypeError(f"cross_entropy: label_smoothing (the third positional argument here; PyTorch's third is "
                        f"weight: pass weight=) must be a number, got a tensor of shape {label_smoothing.shape}")
    if not 0 <= label_smoothing <= 1:
        raise ValueError(f"cross_entropy: label_smoothing must lie in [0, 1], got {label_smoothing}")
    probabilities = isinstance(target, Tensor) and target.dtype.kind == 'f'
    if probabilities and target.shape == _need_tensor(logits, 'cross_entropy').shape:
        return _soft_cross_entropy(logits, target, label_smoothing, reduction, ignore_index, weight)
    rows, target, shape = _class_targets('cross_entropy', logits, target, ignore_index)
    if weight is not None:
        weight = _loss_weight('cross_entropy', 'weight', weight, logits, (rows.shape[1],))
        loss = _nll('cross_entropy', rows.log_softmax(1), target, weight, ignore_index, reduction, label_smoothing)
    else:
        loss = CrossEntropy.apply(rows, target, smoothing=float(label_smoothing), reduction=reduction,
                                  ignore_index=int(ignore_index))
    return loss.reshape(shape) if reduction == 'none' and loss.shape != shape else loss


def _soft_cross_entropy(logits, target, smoothing, reduction, ignore_index, weight):
    """PyTorch's cross_entropy of class probabilities (the target of the input's shape, classes on axis 1, on axis 0
    of a (C,) input): -sum_c w_c t_c log softmax(x)_c, the target first smoothed to t (1 - s) + s / C; 'mean' over the
    positions (not the weights)."""
    if ignore_index != -100:
        raise ValueError("cross_entropy: ignore_index is not supported for a target of class probabilities (as in "
                         "PyTorch)")
    _need_float(logits, 'cross_entropy')
    _same_device([logits, target], 'cross_entropy')
    axis = min(1, logits.ndim - 1)
    classes = logits.shape[axis]
    if smoothing:
        target = target * (1 - smoothing) + smoothing / classes
    products = logits.log_softmax(axis) * target
    if weight is not None:
        weight = _loss_weight('cross_entropy', 'weight', weight, logits, (classes,))
        products = products * weight.reshape(classes, *[1] * (logits.ndim - axis - 1))
    return _apply_reduction(-products.sum(axis), reduction)


# ---- losses as torch.nn.functional's (cross_entropy above), composed from the differentiable ops; float16
# computes in float32 (rounded once) where several ops follow each other

_KL_MEAN_WARNING = ("reduction: 'mean' divides the total loss by both the batch size and the support size.'batchmean' "
                    "divides only by the batch size, and aligns with the KL div math definition.'mean' will be changed "
                    "to behave the same as 'batchmean' in the next major release.")   # PyTorch's, word for word


def _apply_reduction(loss, reduction):
    return loss.mean() if reduction == 'mean' else loss.sum() if reduction == 'sum' else loss


def _pair_loss(what, input, target, reduction, float_target=False, reductions=_LOSS_REDUCTIONS):
    """target (made a tensor on input's device) for an elementwise loss: the reduction one of `reductions`, input of
    a float dtype (and target where `float_target`, as PyTorch's), of one shape (PyTorch broadcasts with a warning)."""
    _check_reduction(what, reduction, reductions)
    target = target if isinstance(target, Tensor) else Tensor(target, device=input.device)
    if input.shape != target.shape:
        raise ValueError(f"{what}: input of shape {input.shape} and target of shape {target.shape} differ")
    _need_float(input, what)
    if float_target:
        _need_float(target, what)
    _same_device([input, target], what)
    return target


def _loss_weight(what, name, weight, input, shape=None, dtype=None):
    """A loss's weight (None, or a tensor on input's device, taking no gradient, as PyTorch's): of `shape` and input's
    dtype (nll_loss's, as PyTorch's), else broadcasting to input's shape, cast to `dtype` (PyTorch's in-place
    product)."""
    if weight is None:
        return None
    if not isinstance(weight, Tensor):
        raise TypeError(f"{what}: {name} must be a tl.Tensor or None, not {type(weight).__name__}")
    if weight.requires_grad and _GradMode.enabled:
        raise RuntimeError(f"{what} is not differentiable with respect to {name} (as PyTorch's): pass {name}.detach()")
    _need_float(weight, f"{what}'s {name}")
    _same_device([input, weight], what)
    if shape is not None:
        if weight.shape != shape:
            raise ValueError(f"{what}: {name} of shape {weight.shape} for input of shape {input.shape}: one per class, "
                             f"{shape}, expected")
        if weight.dtype != input.dtype:
            raise TypeError(f"{what}: {name} of dtype {weight.dtype} for input of dtype {input.dtype} (as PyTorch, "
                            "one dtype)")
        return weight.detach()
    if _check_broadcast(f"{what} (input, {name})", input.shape, weight.shape) != input.shape:
        raise ValueError(f"{what}: {name} of shape {weight.shape} does not broadcast to input's shape {input.shape}")
    return weight.detach().to(dtype)


def _nll(what, logp, target, weight, ignore_index, reduction, smoothing=0.0):
    """PyTorch's nll_loss of (rows, C) log-probabilities: row i loses -w[t_i] logp[i, t_i], 0 where t_i is ignore_index,
    and 'mean' divides by the kept rows' weights (NaN where they sum to 0). cross_entropy's label smoothing s: (1 - s)
    of that plus s / C of each kept row's -sum_c w_c logp[i, c], under the same divisor."""
    xp, classes, dtype = _xp(logp.data), logp.shape[1], logp.dtype
    kept = target.data != ignore_index
    if not _capturing(target) and bool((((target.data < 0) | (target.data >= classes)) & kept).any()):
        raise ValueError(f"{what}: targets must lie in [0, {classes}) or be ignore_index ({ignore_index})")
    index = xp.where(kept, target.data, 0)
    rows_weight = kept.astype(dtype) if weight is None else xp.where(kept, weight.data[index], 0).astype(dtype)
    kept = Tensor._wrap(kept, logp.device)
    picked = logp.gather(1, Tensor._wrap(index[:, None], logp.device))[:, 0]
    parts = [where(kept, -picked * Tensor._wrap(rows_weight, logp.device), 0)]
    if smoothing:
        parts.append(where(kept, -(logp if weight is None else logp * weight).sum(1), 0))
    if reduction == 'mean':   # as PyTorch's: each part over the kept rows' weight (0 / 0 where none: NaN)
        total = Tensor._wrap(rows_weight.sum(dtype=_opmath(dtype)).astype(dtype), logp.device)
        parts = [part.sum() / total for part in parts]
    else:
        parts = [_apply_reduction(part, reduction) for part in parts]
    return parts[0] if not smoothing else parts[0] * (1 - smoothing) + parts[1] * (smoothing / classes)


def nll_loss(input, target, weight=None, ignore_index=-100, reduction='mean'):
    _check_reduction('nll_loss', reduction)
    rows, target, shape = _class_targets('nll_loss', input, target, ignore_index)
    weight = _loss_weight('nll_loss', 'weight', weight, input, (rows.shape[1],))
    loss = _nll('nll_loss', rows, target, weight, ignore_index, reduction)
    return loss.reshape(shape) if reduction == 'none' and loss.shape != shape else loss


def binary_cross_entropy(input, target, weight=None, reduction='mean'):
    """PyTorch's: each log at least -100 (so probabilities of 0 and 1 give finite losses), its gradients (see
    BinaryCrossEntropy); input and target probabilities of one dtype."""
    target = _pair_loss('binary_cross_entropy', input, target, reduction, float_target=True)
    if input.dtype != target.dtype:
        raise TypeError(f"binary_cross_entropy: input of dtype {input.dtype} with target of dtype {target.dtype} "
                        "(as PyTorch, one dtype)")
    for name, t in (('input', input), ('target', target)):
        if not _capturing(t) and not bool(((t.data >= 0) & (t.data <= 1)).all()):
            raise ValueError(f"binary_cross_entropy: every element of {name} must lie in [0, 1]")
    loss = BinaryCrossEntropy.apply(input, target)
    weight = _loss_weight('binary_cross_entropy', 'weight', weight, input, dtype=input.dtype)
    return _apply_reduction(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction='mean', pos_weight=None):
    """PyTorch's: (1 - t) x + (1 + (pos_weight - 1) t) log(1 + e^-x), the softplus as max(-x, 0) + log1p(e^-|x|), finite
    at any logit; the result of target's dtype (PyTorch's in-place ops on 1 - target)."""
    what = 'binary_cross_entropy_with_logits'
    target = _pair_loss(what, input, target, reduction, float_target=True)
    dtype, wide = target.dtype, _opmath(_promote(input.dtype, target.dtype))
    weight, pos_weight = (_loss_weight(what, name, w, input, dtype=wide)
                          for name, w in (('weight', weight), ('pos_weight', pos_weight)))
    x, t = input.to(wide), target.to(wide)
    softplus = (-x.abs()).exp().log1p() - x.minimum(0)   # -log sigmoid(x); x = 0 takes half of each side's gradient
    loss = (1 - t) * x + (softplus if pos_weight is None else softplus * ((pos_weight - 1) * t + 1))
    return _apply_reduction(loss if weight is None else loss * weight, reduction).to(dtype)


def mse_loss(input, target, reduction='mean'):
    target = _pair_loss('mse_loss', input, target, reduction)
    diff = input - target
    return _apply_reduction(diff * diff, reduction)


def l1_loss(input, target, reduction='mean'):
    target = _pair_loss('l1_loss', input, target, reduction)
    return _apply_reduction((input - target).abs(), reduction)


def _smooth_l1(what, input, target, reduction, beta, huber):
    """smooth_l1_loss (huber: huber_loss, delta = beta): 0.5 d^2 / beta (huber: 0.5 d^2) where |d| < beta, else
    |d| - 0.5 beta (huber: beta (|d| - 0.5 beta)), d = input - target; huber's result of input's dtype (PyTorch's)."""
    target = _pair_loss(what, input, target, reduction)
    dtype = input.dtype if huber else _promote(input.dtype, target.dtype)
    d = input.to(_opmath(dtype)) - target.to(_opmath(dtype))
    z = d.abs()
    small, finite = ~(z >= beta), not math.isinf(beta)   # (a NaN d small: its gradient d / beta NaN, as PyTorch's)
    # each branch on the values it keeps (elsewhere an inf, whose gradient the where's 0 would make NaN); for an
    # infinite beta (huber's delta) the quadratic part alone, on every d (no linear part: its gradient beta would meet
    # the 0)
    dq = where(small, d, 0) if finite else d
    loss = dq * dq * 0.5 if huber else dq * dq * 0.5 / beta
    if finite:
        zl = where(small, beta, z)
        loss = where(small, loss, (zl - 0.5 * beta) * beta if huber else zl - 0.5 * beta)
    return _apply_reduction(loss, reduction).to(dtype)


def smooth_l1_loss(input, target, reduction='mean', beta=1.0):
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must not be negative, got {beta}")
    if beta == 0:   # as PyTorch's: l1_loss (the quadratic part is empty)
        return l1_loss(input, target, reduction)
    return _smooth_l1('smooth_l1_loss', input, target, reduction, beta, huber=False)


def huber_loss(input, target, reduction='mean', delta=1.0):
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    return _smooth_l1('huber_loss', input, target, reduction, delta, huber=True)


def kl_div(input, target, reduction='mean', log_target=False):
    """PyTorch's: target (log target) times its log minus input (log-probabilities), 0 where the target is 0;
    'batchmean' divides the sum by the batch size, 'mean' (with PyTorch's warning) by the number of elements."""
    target = _pair_loss('kl_div', input, target, reduction, float_target=True,
                        reductions=_LOSS_REDUCTIONS + ('batchmean',))
    if reduction == 'mean':
        warnings.warn(_KL_MEAN_WARNING, stacklevel=_stacklevel())
    dtype = _promote(input.dtype, target.dtype)
    x, t = input.to(_opmath(dtype)), target.to(_opmath(dtype))
    if log_target:
        loss = t.exp() * (t - x)
    else:
        zero = t == 0   # xlogy(t, t): 0 there, the log's gradient kept out (not 0 * inf)
        loss = where(zero, 0, t * where(zero, 1, t).log()) - t * x
    if reduction == 'batchmean':
        return (loss.sum() / (input.shape[0] if input.ndim else 1)).to(dtype)
    return _apply_reduction(loss, reduction).to(dtype)


def one_hot(tensor, num_classes=-1):
    """int64 (*tensor.shape, num_classes) with a 1 at each index, as PyTorch's (-1: the largest index + 1); no
    gradient."""
    if _need_tensor(tensor, 'one_hot').dtype.kind not in 'iu':
        raise TypeError(f"one_hot: expected a tensor of integer class indices, got {tensor.dtype}")
    if not _is_int(num_classes):
        raise TypeError(f"one_hot: num_classes must be an int, not {type(num_classes).__name__}")
    empty = not tensor.numel()
    if num_classes == -1:
        if empty:
            raise ValueError("one_hot: cannot infer the number of classes from an empty tensor (give num_classes)")
        num_classes = int(tensor.data.max()) + 1
    if num_classes < 1:
        raise ValueError(f"one_hot: num_classes must be positive or -1, got {num_classes}")
    if not empty and not _capturing(tensor):
        lo, hi = int(tensor.data.min()), int(tensor.data.max())
        if lo < 0 or hi >= num_classes:
            raise ValueError(f"one_hot: class values must lie in [0, {num_classes}), got {lo if lo < 0 else hi}")
    xp = _xp(tensor.data)
    return Tensor._wrap((tensor.data[..., None] == xp.arange(num_classes)).astype(np.int64), tensor.device)


@_aliases(axis='dim')
def normalize(input, p=2.0, dim=1, eps=1e-12):
    """input / max(||input||_p over dim, eps), as PyTorch's."""
    return input / _need_float(input, 'normalize').norm(p, dim, keepdim=True).clamp(min=eps)


@_aliases(axis='dim')
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """PyTorch 2's: sum over dim of (x1 / ||x1||) (x2 / ||x2||) (normalised first: the result stays in [-1, 1]), the
    inputs broadcast, each norm at least eps, the clamp passing the norm's gradient on (PyTorch clamps in place
    under no_grad)."""
    dtype = _promote(x1.dtype, x2.dtype)
    if dtype.kind != 'f':
        raise TypeError(f"cosine_similarity: expected floating-point tensors, got {x1.dtype} and {x2.dtype}")
    _same_device([x1, x2], 'cosine_similarity')
    shape = _check_broadcast('cosine_similarity (x1, x2)', x1.shape, x2.shape)

    def unit(x):
        x = x.to(_opmath(dtype)).expand(*shape)
        norm = x.norm(2, dim, keepdim=True)
        return x / (norm + where(norm < eps, norm.clamp(min=eps) - norm, 0).detach())   # (an inf norm: inf, not NaN)
    return (unit(x1) * unit(x2)).sum(dim).to(dtype)


def dropout(x, p=0.5, training=True, inplace=False):
    """As PyTorch's: inplace=True writes the result into x and returns x."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout: probability must lie in [0, 1], got {p}")
    if not training or p == 0:
        return x
    if inplace:
        return x._update_with('dropout(inplace=True)', lambda t: dropout(t, p))
    _need_float(x, 'dropout')
    xp = _xp(x.data)
    keep = xp.random.random(x.shape) >= p
    # the scale 1 / (1 - p) as PyTorch's on the CPU: in float32 for float16, rounded once to float16 (its CUDA kernel
    # multiplies by the float32 scale: a float16 step apart where 1 / (1 - p) is inexact); the mask made in float32
    # and then rounded, so that a dropped element stays 0 where the scale overflows float16 (p near 1), as torch's
    ct = _opmath(x.dtype).type
    mask = keep * ct(ct(1) / ct(1 - p)) if p < 1 else keep
    return x * Tensor._wrap(mask.astype(x.dtype), x.device)


def _gru_layer(x, w_ih, w_hh, b_ih, b_hh, h0, module='GRU', h0_name='h0'):
    """GRULayer over x and the given ones of the optional biases and h0; a dtype apart from x's named in the error
    (`module`'s, h0 by `h0_name`)."""
    inputs = (x, w_ih, w_hh, b_ih, b_hh, h0)
    for name, t in zip(('weight_ih', 'weight_hh', 'bias_ih', 'bias_hh', h0_name), inputs[1:]):
        if t is not None and t.dtype != x.dtype:
            raise TypeError(f"{module}: input of dtype {x.dtype} with {name} of dtype {t.dtype}")
    return GRULayer.apply(*[t for t in inputs if t is not None], given=tuple(t is not None for t in inputs))


# ================================================================ modules

class Parameter(Tensor):
    """A tensor that modules register as a parameter (requires_grad=True)."""
    def __init__(self, data, requires_grad=True):
        super().__init__(data.data if isinstance(data, Tensor) else data, requires_grad=requires_grad)
        if isinstance(data, Tensor) and self.data is data.data:   # the same memory: one version counter
            self._version = data._version

    def __repr__(self):   # as PyTorch's
        return 'Parameter containing:\n' + super().__repr__()


def _zero_grads(params, set_to_none):
    """As PyTorch's zero_grad: each gradient dropped (set_to_none), or zeroed in place (a read-only one that the caller
    set: replaced by zeros)."""
    for p in params:
        if set_to_none or p.grad is None:
            p.grad = None
        elif _unwritable_memory(p.grad.data):
            p.grad.data = _xp(p.grad.data).zeros_like(p.grad.data)
        else:
            p.grad.data[...] = 0


def _dotted(prefix, name):
    return f'{prefix}.{name}' if prefix else name


_IncompatibleKeys = collections.namedtuple('_IncompatibleKeys', 'missing_keys unexpected_keys')   # PyTorch's


class Module:
    """Base class: parameters, buffers and submodules are found through attributes (and lists or tuples
    of modules), named with PyTorch's dotted names."""
    _optional_buffers = ()   # buffers a state dict may lack (as PyTorch's older checkpoints): kept as they are

    def __init__(self):
        self.training = True
        self._buffer_names = []
        self._non_persistent = set()   # buffers left out of the state dict

    def __setattr__(self, name, value):
        """As torch.nn.Module's: a buffer's name takes a Tensor, a parameter's a Parameter, a submodule's a Module or a
        Parameter, each None too (the name keeps its kind then, as PyTorch keeps the slot), a Parameter or a Module
        any name, placed last among its kind where the name was of another (as PyTorch's registries order them)."""
        buffers = self.__dict__.get('_buffer_names', [])
        empty = self.__dict__.get('_empty_slots', {})   # name -> 'parameter' or 'child module', where set to None
        old = self.__dict__.get(name)
        kind = 'buffer' if name in buffers else 'parameter' if isinstance(old, Parameter) else \
            'child module' if isinstance(old, Module) else empty.get(name)
        new = 'parameter' if isinstance(value, Parameter) else 'child module' if isinstance(value, Module) else None
        takes = {'buffer': ((Tensor, Module), 'tl.Tensor'), 'parameter': (Parameter, 'tl.Parameter'),
                 'child module': ((Module, Parameter), 'tl.Module')}
        if kind and value is not None and not isinstance(value, takes[kind][0]):
            raise TypeError(f"cannot assign '{type(value).__name__}' as {kind} '{name}' of {type(self).__name__} "
                            f"(a {takes[kind][1]} or None expected, as in PyTorch)")
        if new and new != kind:
            if kind == 'buffer':
                buffers.remove(name)
            self.__dict__.pop(name, None)
        if value is None and kind in ('parameter', 'child module'):
            self.__dict__.setdefault('_empty_slots', {})[name] = kind
        else:
            empty.pop(name, None)
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        """As torch.nn.Module's: a buffer, parameter or submodule deleted is gone from every listing (state_dict,
        named_buffers, ...); the name is then free for any value."""
        object.__delattr__(self, name)
        if name in self.__dict__.get('_buffer_names', ()):
            self._buffer_names.remove(name)
            self._non_persistent.discard(name)
        self.__dict__.get('_empty_slots', {}).pop(name, None)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def extra_repr(self):
        """The module's own settings, shown by repr (PyTorch's hook: a subclass says more)."""
        return ''

    def _child_reprs(self):   # (an empty child slot as "(name): None", as PyTorch's)
        return [f"({name}): " + repr(m).replace('\n', '\n  ') for name, m in self._named_submodules(empty=True)]

    def __repr__(self):   # as PyTorch's: the settings (a line each), then each child under its name, indented
        extra = self.extra_repr()
        settings, children = extra.split('\n') if extra else [], self._child_reprs()
        if not children and len(settings) <= 1:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n  " + '\n  '.join(settings + children) + "\n)"

    def __call__(self, *args, **kwargs):
        if '_forward_hooks' not in self.__dict__:   # (none ever registered: forward alone)
            return self.forward(*args, **kwargs)
        for hook, with_kwargs in list(self._forward_pre_hooks.values()):   # as PyTorch's: a result replaces the args
            if with_kwargs:
                changed = hook(self, args, kwargs)
                if changed is not None and not (isinstance(changed, tuple) and len(changed) == 2):
                    raise RuntimeError(f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but "
                                       f"got {changed!r}")
                args, kwargs = (args, kwargs) if changed is None else changed
            else:
                changed = hook(self, args)
                if changed is not None:
                    args = changed if isinstance(changed, tuple) else (changed,)
        out = self.forward(*args, **kwargs)
        for hook, with_kwargs in list(self._forward_hooks.values()):   # and here the output
            changed = hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
            out = out if changed is None else changed
        return out

    def _hooks(self, kind):
        """The module's dict of `kind` hooks ('_forward_hooks' or '_forward_pre_hooks'), both made at the first."""
        for name in ('_forward_hooks', '_forward_pre_hooks'):
            self.__dict__.setdefault(name, {})
        return self.__dict__[kind]

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """As PyTorch's: hook(module, args) before each forward (with_kwargs: hook(module, args, kwargs)); a result
        other than None replaces args (a tuple, or one value; with_kwargs, the pair (args, kwargs)); prepend: before
        the hooks already there. Returns a handle whose remove() takes it off."""
        return _add_hook(self._hooks('_forward_pre_hooks'), (hook, with_kwargs), prepend)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False):
        """As PyTorch's: hook(module, args, output) after each forward (with_kwargs: hook(module, args, kwargs,
        output)); a result other than None replaces the output."""
        return _add_hook(self._hooks('_forward_hooks'), (hook, with_kwargs), prepend)

    def _check_new_name(self, kind, name, existing=()):
        """As PyTorch's register_buffer and add_module: a non-empty string without '.', not yet an attribute unless
        one of `existing` (a buffer registered again, a ModuleDict's key given a new module)."""
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if not name or '.' in name:
            raise KeyError(f"{kind} name can't be empty or contain '.', got {name!r}")
        if hasattr(self, name) and name not in existing:
            raise KeyError(f"attribute '{name}' already exists")

    def register_buffer(self, name, tensor, persistent=True):
        """As PyTorch's: a non-persistent buffer moves and casts with the module but is not in its state dict."""
        buffers = self.__dict__.setdefault('_buffer_names', [])
        self._check_new_name('buffer', name, existing=buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(a tl.Tensor or None required, as in PyTorch)")
        if name not in buffers:
            buffers.append(name)
        non_persistent = self.__dict__.setdefault('_non_persistent', set())
        (non_persistent.discard if persistent else non_persistent.add)(name)
        object.__setattr__(self, name, tensor)   # a buffer even if a Parameter (setattr would make it a parameter)

    def _register(self, kind, name, value, cls):
        """register_parameter's and add_module's: `value` (a `cls`, or None: a slot that only a `cls` fills) under
        `name`, a new name or one of this kind (a slot set to None too)."""
        if value is not None and not isinstance(value, cls):
            raise TypeError(f"cannot assign '{type(value).__name__}' object as {kind} '{name}' (a tl.{cls.__name__} "
                            "or None required, as in PyTorch)")
        slots, buffers = self.__dict__.setdefault('_empty_slots', {}), self.__dict__.get('_buffer_names', [])
        same = [n for n, v in vars(self).items() if isinstance(v, cls) and n not in buffers] + \
            [n for n, k in slots.items() if k == kind]
        self._check_new_name(kind, name, existing=same)
        if value is None:
            slots[name] = kind
        setattr(self, name, value)

    def register_parameter(self, name, param):
        """As PyTorch's: `param` (a Parameter, or None: a slot that only a Parameter fills) under `name`."""
        self._register('parameter', name, param, Parameter)

    def add_module(self, name, module):
        """As PyTorch's: `module` (a Module, or None: a slot that only a Module fills) as a child under `name`."""
        self._register('child module', name, module, Module)

    register_module = add_module

    def get_submodule(self, target):
        """The module under the dotted name `target` (this one for ''), as PyTorch's; AttributeError naming the part
        not found."""
        module, rest = self, target
        while rest:
            children = dict(module._named_submodules())   # (a list's modules are named 'name.i')
            name = next((n for n in children if rest == n or rest.startswith(n + '.')), None)
            if name is None:
                raise AttributeError(f"{type(module).__name__} has no submodule '{rest.split('.')[0]}' (looking for "
                                     f"'{target}')")
            module, rest = children[name], rest[len(name) + 1:]
        return module

    def get_parameter(self, target):
        """The parameter under the dotted name `target`, as PyTorch's."""
        path, _, name = target.rpartition('.')
        module = self.get_submodule(path)
        if not isinstance(module.__dict__.get(name), Parameter) or name in module._buffer_names:
            raise AttributeError(f"{type(module).__name__} has no parameter '{name}' (looking for '{target}')")
        return module.__dict__[name]

    def get_buffer(self, target):
        """The buffer under the dotted name `target`, as PyTorch's."""
        path, _, name = target.rpartition('.')
        module = self.get_submodule(path)
        if name not in module._buffer_names:
            raise AttributeError(f"{type(module).__name__} has no buffer '{name}' (looking for '{target}')")
        return getattr(module, name)

    def _named_submodules(self, empty=False):
        """(name, module) of each attribute that is a module and each module of an attribute's list or tuple ('name.i');
        a module held twice comes under each of its names; `empty`: (name, None) of each child slot set to None too."""
        slots = self.__dict__.get('_empty_slots', {})
        for name, value in vars(self).items():
            if isinstance(value, Module) or empty and value is None and slots.get(name) == 'child module':
                yield name, value
            elif isinstance(value, (list, tuple)):
                yield from ((f'{name}.{i}', m) for i, m in enumerate(value) if isinstance(m, Module))

    def named_children(self):
        """Each child module once, under its first name (as PyTorch)."""
        seen = set()
        for name, m in self._named_submodules():
            if id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):   # generators, as PyTorch's (here and below)
        return (m for _, m in self.named_children())

    def named_modules(self, memo=None, prefix='', remove_duplicate=True):
        """(dotted name, module) of this module (named prefix) and every module within it, parents first, each once
        unless remove_duplicate is False (state_dict's walk), as PyTorch."""
        memo = set() if memo is None else memo
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, child in self._named_submodules():
            yield from child.named_modules(memo, _dotted(prefix, name), remove_duplicate)

    def modules(self):
        return (m for _, m in self.named_modules())

    def apply(self, fn):
        """fn applied to every module within (each child's apply), then to this one, as PyTorch; returns the module."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def _named_tensors(self, prefix='', recurse=True, state=False, remove_duplicate=False):
        """(name, tensor, is_buffer) in PyTorch's order: module by module, parents first, its parameters then its
        buffers; a module held twice under each of its names (as state_dict lists it) unless remove_duplicate (then
        once: a module that holds its parent is walked once); with `state`, only what the state dict holds (no
        non-persistent buffer)."""
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_name, m in modules:
            buffers = m.__dict__.get('_buffer_names', [])
            left_out = m.__dict__.get('_non_persistent', ()) if state else ()
            for name, value in vars(m).items():
                if isinstance(value, Parameter) and name not in buffers:
                    yield _dotted(module_name, name), value, False
            for name in buffers:
                if getattr(m, name) is not None and name not in left_out:
                    yield _dotted(module_name, name), getattr(m, name), True

    def _named(self, buffers, prefix, recurse, remove_duplicate):
        """(name, tensor) of each parameter (or buffer) once, the first name of one registered twice, as PyTorch; not
        remove_duplicate: under each of its names."""
        seen = set()
        for name, t, is_buffer in self._named_tensors(prefix, recurse, remove_duplicate=remove_duplicate):
            if is_buffer == buffers and (id(t) not in seen or not remove_duplicate):
                seen.add(id(t))
                yield name, t

    def named_parameters(self, prefix='', recurse=True, remove_duplicate=True):
        return self._named(False, prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix='', recurse=True, remove_duplicate=True):
        return self._named(True, prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        return (t for _, t in self.named_buffers(recurse=recurse))

    def train(self, mode=True):
        if not isinstance(mode, bool):   # as PyTorch: train('eval') or train(0) is a mistake, not a mode
            raise ValueError(f"training mode is expected to be boolean, got {type(mode).__name__} {mode!r}")
        self.training = mode
        for child in self.children():
            child.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        _zero_grads(self.parameters(), set_to_none)

    def requires_grad_(self, requires_grad=True):
        """Every parameter's requires_grad set (as PyTorch's, to freeze or unfreeze the module); returns the module. A
        flag that is not a bool, or True with a parameter of an integer dtype, changes none."""
        if not isinstance(requires_grad, (bool, np.bool_)):
            raise TypeError(f"requires_grad_(): requires_grad must be a bool, not {type(requires_grad).__name__}")
        named = list(self.named_parameters())
        for name, p in named:
            if requires_grad and p.dtype not in _FLOATS:
                raise TypeError(f"requires_grad_(): parameter '{name}' of dtype {p.dtype} cannot require gradients "
                                "(only floating-point tensors can)")
        for _, p in named:
            p.requires_grad = requires_grad
        return self

    def to(self, *args, device=None, dtype=None, non_blocking=False):
        """Move and/or cast every parameter and buffer in place (floating-point ones only change dtype); non_blocking
        taken as Tensor.to takes it."""
        return self._to(*_device_and_dtype(args, device, dtype), 'Module.to')

    def _to(self, device, dtype, what, recurse=True):
        """to()'s work, `what` naming the caller in errors; recurse=False: this module's own tensors alone (a layer's
        device= and dtype=, see _apply_device_dtype)."""
        device = None if device is None else _parse_device(device)
        dtype = None if dtype is None else _dtype(dtype)
        if dtype is not None and dtype.kind != 'f':
            raise TypeError(f"{what}: only floating-point dtypes, got {dtype}")
        converted, tensors = [], list(self._named_tensors(recurse=recurse, remove_duplicate=True))
        for u in {id(u): u for _, t, _ in tensors for u in (t, t._grad) if u is not None}.values():
            data = u.data.astype(dtype, copy=False) if dtype is not None and u.dtype.kind == 'f' else u.data
            converted.append((u, data if device is None else _move(data, device)))
        buffers = {id(t) for _, t, is_buffer in tensors if is_buffer}
        renewed = {}   # a buffer that changes becomes a new tensor, as PyTorch's (the caller's own stays as it was)
        for u, data in converted:   # only once all are converted: a failure leaves the module as it was
            if id(u) in buffers and data is not u.data:
                new = renewed[id(u)] = Tensor._wrap(data, device or u.device)
                new.requires_grad, new._grad = u.requires_grad, u._grad   # (its grad converted in this loop too)
            else:
                u.data = data
        for _, m in self.named_modules() if recurse else [('', self)]:
            for name in m.__dict__.get('_buffer_names', []):
                if id(getattr(m, name)) in renewed:
                    object.__setattr__(m, name, renewed[id(getattr(m, name))])
        return self

    cuda = lambda self, device=None: self.to('cuda' if device is None else f'cuda:{device}')
    cpu = lambda self: self.to('cpu')
    half = lambda self: self.to(np.float16)
    float = lambda self: self.to(np.float32)
    double = lambda self: self.to(np.float64)

    def state_dict(self):
        return {name: t.numpy().copy() for name, t, _ in self._named_tensors(state=True)}

    def load_state_dict(self, state_dict, strict=True):
        """Copy values in place; every key, shape and value is checked and converted before anything changes."""
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"load_state_dict: expected a dict-like state_dict, got {type(state_dict).__name__}")
        own = {name: t for name, t, _ in self._named_tensors(state=True)}
        values = {k: _as_array(v) for k, v in state_dict.items()}
        for k, t in own.items():   # as PyTorch's: a one-element 1-d value for a 0-d tensor (older checkpoints' counts)
            if k in values and t.ndim == 0 and values[k].shape == (1,):
                values[k] = values[k].reshape(())
        optional = {_dotted(prefix, name) for prefix, m in self.named_modules(remove_duplicate=False)
                    for name in m._optional_buffers}
        missing = [k for k in own if k not in values and k not in optional]
        unexpected = [k for k in values if k not in own]
        wrong = [f"{k}: expected shape {own[k].shape}, got {tuple(values[k].shape)}"
                 for k in own if k in values and tuple(values[k].shape) != own[k].shape]
        converted, unconvertible = {}, []
        for k, t in own.items():
            if k in values:
                try:
                    converted[k] = _move(values[k].astype(t.dtype, copy=False), t.device)
                except (TypeError, ValueError):
                    unconvertible.append(f"{k}: {values[k].dtype} to {t.dtype}")
        unwritable = [f"{k}: {why}" for k in converted for why in [_unwritable(own[k].data)] if why]
        problems = ([f"missing keys {missing}"] if missing and strict else []) + \
                   ([f"unexpected keys {unexpected}"] if unexpected and strict else []) + \
                   ([f"size mismatch: {'; '.join(wrong)}"] if wrong else []) + \
                   ([f"cannot convert {'; '.join(unconvertible)}"] if unconvertible else []) + \
                   ([f"cannot write into {'; '.join(unwritable)}"] if unwritable else [])
        if problems:
            raise RuntimeError(f"load_state_dict for {type(self).__name__}: " + '; '.join(problems))
        for k, value in converted.items():
            own[k].data[...] = value
            own[k]._version[0] += 1
        return _IncompatibleKeys(missing, unexpected)


def _as_array(value):
    """A state-dict value as a NumPy or CuPy array: a Tensor's, a torch tensor's, or whatever np.asarray takes."""
    if isinstance(value, Tensor):
        return value.numpy()
    if cp is not None and isinstance(value, cp.ndarray):
        return value
    if hasattr(value, 'detach') and hasattr(value, 'cpu'):   # a torch tensor (torch is not imported here)
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _empty_parameter(*shape):
    """A float32 Parameter for a layer's reset_parameters() to fill (in its constructor, as PyTorch's)."""
    return Parameter(np.empty(shape, np.float32))


def _check_sizes(what, **sizes):
    """A layer's sizes: each a non-negative int (as PyTorch's constructors; a TypeError or ValueError naming it)."""
    for name, size in sizes.items():
        if not _is_int(size):
            raise TypeError(f"{what}: {name} must be an int, got {size!r}")
        if size < 0:
            raise ValueError(f"{what}: {name} must not be negative, got {size}")


def _reset_uniform(params, fan):
    """PyTorch's default initialisation of Linear, Conv2d and the GRUs (their reset_parameters): each of `params` (None
    skipped), in order, uniform within +-1/sqrt(fan) (for weights kaiming_uniform(a=sqrt(5)) is that); zeros for a fan
    of 0, where PyTorch leaves the (bias) tensor as torch.empty made it. Drawn by init.uniform_ (on the CPU NumPy's
    float64 draws rounded: the stream these layers always drew), at version 1 as PyTorch's."""
    bound = 1 / math.sqrt(fan) if fan else 0.0
    for p in params:
        if p is not None:
            init.uniform_(p, -bound, bound)


def _apply_device_dtype(module, device, dtype):
    """PyTorch's device= and dtype= of a layer, applied at the end of its __init__: its own parameters and buffers, drawn
    and filled as by default (float32, on the CPU, from NumPy's generator), converted once to `dtype` (floating-point
    tensors only: num_batches_tracked stays int64) and moved to `device`. So a layer built with them equals one built
    without them and then .to(device, dtype): the same values from the same random stream on every device and in every
    dtype (PyTorch draws on the device, with its generator, in the dtype). A dtype that is not floating-point raises
    TypeError naming it (PyTorch's RuntimeError: only floating-point tensors can require gradients); a device as
    Tensor's (RuntimeError for 'cuda' without CuPy or a GPU)."""
    module._to(device, dtype, type(module).__name__, recurse=False)


# tl.init, as torch.nn.init: each initializer writes its tensor in place as PyTorch's do under no_grad (nothing
# recorded, even for a Parameter; the version bumped, so a backward that saved the tensor raises), on the tensor's device
# and in its dtype, and returns the tensor. Draws come from NumPy's global generator on the CPU (float64, rounded to the
# dtype), from CuPy's on the GPU (float32, float64 for float64 tensors), both seeded by manual_seed: distributions are
# PyTorch's, values are not.

def _init_write(t, what, make, floating=True, distinct=True):
    """t.data[...] = make(xp, shape, dtype) (which may refuse its arguments first) on t's device; the version bumped.
    floating: a float tensor only (random draws); distinct: not an expand() view (distinct values into shared memory)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"init.{what}: expected a Tensor, got {type(t).__name__}")
    if floating and t.dtype.kind != 'f':
        raise TypeError(f"init.{what}: expected a floating-point tensor, got {t.dtype}")
    if distinct:
        t._refuse_expanded(f'init.{what}')
    with _on(t.device):
        t.data[...] = make(_xp(t.data), t.shape, t.dtype)
    t._version[0] += 1
    return t


def _draw(xp, dtype, dist, *args):
    """xp.random.<dist>(*args, size) for a tensor of `dtype`: NumPy's legacy generator draws float64, CuPy's float32
    (float64 for float64 tensors); assigning them rounds them to the dtype."""
    if xp is np:
        return getattr(np.random, dist)(*args)
    return getattr(cp.random, dist)(*args, dtype=np.float64 if dtype == np.float64 else np.float32)


class init:
    """torch.nn.init as a namespace: tl.init.xavier_uniform_(w), or `from tinygrad_lite import init`. Also its fan
    helpers, which ported reset_parameters() code calls (init._calculate_fan_in_and_fan_out(self.weight))."""

    @staticmethod
    def calculate_gain(nonlinearity, param=None):
        """PyTorch's recommended gain: 1 (linear, conv*, sigmoid), 5/3 (tanh), sqrt(2) (relu), 3/4 (selu),
        sqrt(2 / (1 + slope^2)) (leaky_relu, the negative slope param, 0.01 by default)."""
        linear = ('linear', 'conv1d', 'conv2d', 'conv3d', 'conv_transpose1d', 'conv_transpose2d', 'conv_transpose3d')
        if nonlinearity in linear or nonlinearity == 'sigmoid':
            return 1
        if nonlinearity == 'tanh':
            return 5.0 / 3
        if nonlinearity == 'relu':
            return math.sqrt(2.0)
        if nonlinearity == 'leaky_relu':
            if param is not None and not (isinstance(param, int) and not isinstance(param, bool)
                                          or isinstance(param, float)):
                raise ValueError(f"negative_slope {param} not a valid number")
            return math.sqrt(2.0 / (1 + (0.01 if param is None else param) ** 2))
        if nonlinearity == 'selu':
            return 3.0 / 4
        raise ValueError(f"Unsupported nonlinearity {nonlinearity}")

    @staticmethod
    def _calculate_fan_in_and_fan_out(tensor):
        """(size(1), size(0)), each times the product of the sizes after them (a conv's kernel)."""
        shape = tensor.shape
        if len(shape) < 2:
            raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
        receptive = math.prod(shape[2:])
        return shape[1] * receptive, shape[0] * receptive

    @staticmethod
    def _calculate_correct_fan(tensor, mode):
        mode = mode.lower()
        if mode not in ('fan_in', 'fan_out'):
            raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
        fan_in, fan_out = init._calculate_fan_in_and_fan_out(tensor)
        return fan_in if mode == 'fan_in' else fan_out

    @staticmethod
    def uniform_(tensor, a=0.0, b=1.0):
        """U(a, b)."""
        def make(xp, shape, dtype):
            top = float(np.finfo(dtype).max)
            if a > b:
                raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={a:g} > to={b:g}")
            if not (-top <= a and b <= top and b - a <= top):
                raise RuntimeError(f"uniform_: from={a} and to={b} (and to - from) must lie within the range of {dtype}")
            return _draw(xp, dtype, 'uniform', a, b, shape)
        return _init_write(tensor, 'uniform_', make)

    @staticmethod
    def normal_(tensor, mean=0.0, std=1.0):
        """N(mean, std^2)."""
        def make(xp, shape, dtype):
            if std < 0:
                raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
            return _draw(xp, dtype, 'normal', mean, std, shape)
        return _init_write(tensor, 'normal_', make)

    @staticmethod
    def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
        """N(mean, std^2) truncated to [a, b], by PyTorch's rejection sampling: where [a, b] holds more than 0.3 of the
        normal's mass, normal draws outside it are drawn again; else draws from U(a, b), each kept with probability
        pdf(x) / pdf(the mode in [a, b]). Draws in range stay in [a, b] rounded to the dtype (rounding is monotonic)."""
        cdf = lambda x: (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0
        if mean < a - 2 * std or mean > b + 2 * std:
            warnings.warn("mean is more than 2 std from [a, b] in init.trunc_normal_. The distribution of values may "
                          "be incorrect.", stacklevel=_stacklevel())
        p = cdf((b - mean) / std) - cdf((a - mean) / std)
        peak = -0.5 * ((max(a, min(mean, b)) - mean) / std) ** 2

        def make(xp, shape, dtype):
            if a > b:
                raise RuntimeError(f"trunc_normal_ expects a <= b, but found a={a} > b={b}")
            if p > 0.3:
                draw, kept = (lambda n: _draw(xp, dtype, 'normal', mean, std, n)), lambda x: (a <= x) & (x <= b)
            else:
                draw = lambda n: _draw(xp, dtype, 'uniform', a, b, n)
                kept = lambda x: xp.log(_draw(xp, dtype, 'random_sample', x.size)) <= -0.5 * ((x - mean) / std) ** 2 - peak
            x = draw(math.prod(shape))
            redo = xp.flatnonzero(~kept(x))
            while redo.size:
                y = draw(redo.size)
                x[redo] = y
                redo = redo[~kept(y)]
            return x.reshape(shape)
        return _init_write(tensor, 'trunc_normal_', make)

    @staticmethod
    def constant_(tensor, val):
        """Every element val (a number, or a one-element Tensor), any dtype; as PyTorch's fill, an expand() too."""
        val = val.item() if isinstance(val, Tensor) else val
        if isinstance(tensor, Tensor):
            _check_fits(val, tensor.dtype, 'init.constant_')
        return _init_write(tensor, 'constant_', lambda xp, shape, dtype: val, floating=False, distinct=False)

    @staticmethod
    def zeros_(tensor):
        return init.constant_(tensor, 0)

    @staticmethod
    def ones_(tensor):
        return init.constant_(tensor, 1)

    @staticmethod
    def eye_(tensor):
        """The identity matrix of a 2-D tensor's shape (ones on the main diagonal), any dtype."""
        if tensor.ndim != 2:
            raise ValueError("Only tensors with 2 dimensions are supported")
        return _init_write(tensor, 'eye_', lambda xp, shape, dtype: xp.eye(*shape, dtype=dtype), floating=False)

    @staticmethod
    def xavier_uniform_(tensor, gain=1.0):
        """U(-bound, bound), bound = gain sqrt(6 / (fan_in + fan_out)) (Glorot)."""
        fan_in, fan_out = init._calculate_fan_in_and_fan_out(tensor)
        bound = math.sqrt(3.0) * (gain * math.sqrt(2.0 / float(fan_in + fan_out)))
        return init.uniform_(tensor, -bound, bound)

    @staticmethod
    def xavier_normal_(tensor, gain=1.0):
        """N(0, std^2), std = gain sqrt(2 / (fan_in + fan_out)) (Glorot)."""
        fan_in, fan_out = init._calculate_fan_in_and_fan_out(tensor)
        return init.normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)))

    @staticmethod
    def _kaiming_std(tensor, a, mode, nonlinearity):
        """gain / sqrt(fan), or None (PyTorch's warning given) for a tensor without elements, which stays as it is."""
        if 0 in tensor.shape:
            warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=_stacklevel())
            return None
        fan = init._calculate_correct_fan(tensor, mode)
        return init.calculate_gain(nonlinearity, a) / math.sqrt(fan)

    @staticmethod
    def kaiming_uniform_(tensor, a=0, mode='fan_in', nonlinearity='leaky_relu'):
        """U(-bound, bound), bound = gain sqrt(3 / fan), the fan of `mode`, the gain of `nonlinearity` (He)."""
        std = init._kaiming_std(tensor, a, mode, nonlinearity)
        return tensor if std is None else init.uniform_(tensor, -math.sqrt(3.0) * std, math.sqrt(3.0) * std)

    @staticmethod
    def kaiming_normal_(tensor, a=0, mode='fan_in', nonlinearity='leaky_relu'):
        """N(0, std^2), std = gain / sqrt(fan), the fan of `mode`, the gain of `nonlinearity` (He)."""
        std = init._kaiming_std(tensor, a, mode, nonlinearity)
        return tensor if std is None else init.normal_(tensor, 0.0, std)

    @staticmethod
    def orthogonal_(tensor, gain=1):
        """A (semi-)orthogonal matrix times gain, the sizes after the first flattened (rows <= cols: W W^T = gain^2 I,
        else W^T W): the QR decomposition of a normal matrix, Q's columns signed by R's diagonal (then Q is uniform
        over the orthogonal matrices, arXiv math-ph/0609050). float16 decomposes in float32 (PyTorch's has no float16)."""
        if tensor.ndim < 2:
            raise ValueError("Only tensors with 2 or more dimensions are supported")
        if tensor.numel() == 0:
            return tensor

        def make(xp, shape, dtype):
            rows = shape[0]
            cols = math.prod(shape) // rows
            flat = _draw(xp, dtype, 'normal', 0.0, 1.0, (rows, cols))
            q, r = xp.linalg.qr(flat.T if rows < cols else flat)
            q *= xp.sign(xp.diagonal(r))
            return ((q.T if rows < cols else q) * gain).reshape(shape)
        return _init_write(tensor, 'orthogonal_', make)


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        _check_sizes('Linear', in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = _empty_parameter(out_features, in_features)
        self.bias = _empty_parameter(out_features) if bias else None
        self.reset_parameters()
        _apply_device_dtype(self, device, dtype)

    def reset_parameters(self):
        _reset_uniform([self.weight, self.bias], self.in_features)

    def forward(self, x):
        return linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Conv2d(Module):
    # bias keyword-only: PyTorch's 6th argument is dilation, which a positional bias would silently stand for
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, *, bias=True, device=None,
                 dtype=None):
        super().__init__()
        _check_sizes('Conv2d', in_channels=in_channels, out_channels=out_channels)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(kernel_size, 'Conv2d: kernel_size')
        if isinstance(padding, str):   # as PyTorch: a bad padding string refused here, not at the first forward
            _check_padding_string(padding, _pair(stride, 'Conv2d: stride'))
        # as PyTorch's: pairs (a number given twice), unchecked (a bad stride or padding fails in forward)
        pair = lambda v: v if isinstance(v, str) else tuple(v) if isinstance(v, (tuple, list)) else (v, v)
        self.stride, self.padding = pair(stride), pair(padding)
        self.weight = _empty_parameter(out_channels, in_channels, *self.kernel_size)
        self.bias = _empty_parameter(out_channels) if bias else None
        self.reset_parameters()
        _apply_device_dtype(self, device, dtype)

    def reset_parameters(self):
        _reset_uniform([self.weight, self.bias], self.in_channels * math.prod(self.kernel_size))

    def forward(self, x):
        return conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
                + (f", padding={self.padding}" if self.padding != (0, 0) else '')
                + (", bias=False" if self.bias is None else ''))


class _BatchNorm(Module):
    input_dims = ()
    _optional_buffers = ('num_batches_tracked',)   # as PyTorch: a state dict without it keeps the count

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, *, device=None,
                 dtype=None):
        super().__init__()
        _check_sizes(type(self).__name__, num_features=num_features)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = _empty_parameter(num_features) if affine else None
        self.bias = _empty_parameter(num_features) if affine else None
        # without track_running_stats, as PyTorch's: None buffers, and the batch's statistics in evaluation too
        buffers = (('running_mean', num_features, np.float32), ('running_var', num_features, np.float32),
                   ('num_batches_tracked', (), np.int64))
        for name, shape, buffer_dtype in buffers:   # (reset_running_stats fills them)
            self.register_buffer(name, Tensor(np.empty(shape, buffer_dtype)) if track_running_stats else None)
        self.reset_parameters()
        _apply_device_dtype(self, device, dtype)

    def reset_running_stats(self):
        """As PyTorch's: mean 0, variance 1 and no batches counted, where tracked."""
        if self.track_running_stats:
            for t, value in ((self.running_mean, 0), (self.running_var, 1), (self.num_batches_tracked, 0)):
                init.constant_(t, value)

    def reset_parameters(self):
        """As PyTorch's: reset_running_stats(), and (affine) weight 1, bias 0."""
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, x):
        if x.ndim not in self.input_dims:
            raise ValueError(f"{type(self).__name__}: expected a {' or '.join(map(str, self.input_dims))}-D input, "
                             f"got shape {x.shape}")
        # as PyTorch's: the running statistics updated in training where tracked, read in evaluation where there
        counting = self.training and self.track_running_stats and self.num_batches_tracked is not None
        momentum = self.momentum
        if momentum is None:   # the cumulative average, counting this batch
            momentum = 1 / (float(self.num_batches_tracked.item()) + 1) if counting else 0.0
        read = self.track_running_stats or not self.training
        mean, var = (self.running_mean, self.running_var) if read else (None, None)
        training = self.training or mean is None and var is None
        out = batch_norm(x, mean, var, self.weight, self.bias, training, momentum, self.eps)
        if counting:   # counted only once batch_norm has accepted the input
            self.num_batches_tracked.data += 1
        return out

    def extra_repr(self):   # (PyTorch 2.13's, whose bias follows affine here)
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    input_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    input_dims = (4,)


class Identity(Module):
    """Its input, as it is (a placeholder where a layer is taken out)."""
    def __init__(self, *args, **kwargs):   # as PyTorch's: any arguments, ignored
        super().__init__()

    forward = staticmethod(lambda x: x)


class Tanh(Module):
    forward = staticmethod(tanh)


class Sigmoid(Module):
    forward = staticmethod(sigmoid)


class _ClassSignature:
    """_Settings's __signature__ (what inspect.signature and help() read): the settings' signature on the class itself,
    None (inspect then looks further, as for any class or callable) on an instance, whose signature is its call's, and
    on a subclass with an __init__ of its own, whose signature is that __init__'s."""

    def __get__(self, obj, cls):
        return cls._signature if obj is None and cls.__init__ is _Settings.__init__ else None


class _Settings(Module):
    """A module whose constructor takes settings named, ordered and defaulted as PyTorch's (`defaults`, which make the
    class's signature), by position or by name, each kept by _keep (as an attribute, unless a subclass says more)."""
    defaults = {}
    __signature__ = _ClassSignature()

    def __init_subclass__(cls):
        super().__init_subclass__()
        cls._signature = inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                              default=value) for name, value in cls.defaults.items()])

    def __init__(self, *args, **kwargs):
        super().__init__()
        settings = self._signature.bind(*args, **kwargs)   # (a TypeError for other arguments)
        settings.apply_defaults()
        for name, value in settings.arguments.items():
            self._keep(name, value)

    def _keep(self, name, value):
        setattr(self, name, value)


class _Activation(_Settings):
    """An activation with settings: fn(x, *settings), shown by repr as PyTorch's; where PyTorch's takes inplace, the
    result written into x (x returned) with inplace=True."""

    def forward(self, x):
        settings = [getattr(self, name) for name in self.defaults if name != 'inplace']
        if getattr(self, 'inplace', False):
            return x._update_with(f'{type(self).__name__}(inplace=True)', lambda t: self.fn(t, *settings))
        return self.fn(x, *settings)

    def extra_repr(self):   # (as PyTorch's: inplace shown only where True)
        shown = [f"{name}={getattr(self, name)!r}" for name in self.defaults if name != 'inplace']
        return ', '.join(shown + ['inplace=True'] * bool(getattr(self, 'inplace', False)))


class ReLU(_Activation):
    fn, defaults = staticmethod(relu), {'inplace': False}


class SiLU(_Activation):
    fn, defaults = staticmethod(silu), {'inplace': False}


class GELU(_Activation):
    fn, defaults = staticmethod(gelu), {'approximate': 'none'}


class LeakyReLU(_Activation):
    fn, defaults = staticmethod(leaky_relu), {'negative_slope': 0.01, 'inplace': False}


class ELU(_Activation):
    fn, defaults = staticmethod(elu), {'alpha': 1.0, 'inplace': False}


class Softplus(_Activation):
    fn, defaults = staticmethod(softplus), {'beta': 1.0, 'threshold': 20.0}


class _Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return self.fn(x, _implicit_axis(self.fn.__name__, x, self.dim))

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax(_Softmax):
    fn = staticmethod(softmax)


class LogSoftmax(_Softmax):
    fn = staticmethod(log_softmax)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape, 'LayerNorm')
        _check_sizes('LayerNorm', **{f'normalized_shape[{i}]': n for i, n in enumerate(self.normalized_shape)})
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = _empty_parameter(*self.normalized_shape) if elementwise_affine else None
        self.bias = _empty_parameter(*self.normalized_shape) if elementwise_affine and bias else None
        self.reset_parameters()
        _apply_device_dtype(self, device, dtype)

    def reset_parameters(self):   # as PyTorch's: weight 1, bias 0
        for p, value in ((self.weight, 1), (self.bias, 0)):
            if p is not None:
                init.constant_(p, value)

    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class _Pool2d(Module):
    """MaxPool2d's and AvgPool2d's: fn(x, kernel_size, stride, padding), the stride kernel_size where not given (as
    PyTorch's); PyTorch's other settings as attributes at their defaults (the only values here), repr showing
    `shown`."""
    dilation, ceil_mode = 1, False

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, kernel_size if stride is None else stride, padding

    def forward(self, x):
        return self.fn(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self):
        return ', '.join(f"{name}={getattr(self, name)}" for name in self.shown)


class MaxPool2d(_Pool2d):
    fn, shown = staticmethod(max_pool2d), ('kernel_size', 'stride', 'padding', 'dilation', 'ceil_mode')


class AvgPool2d(_Pool2d):
    fn, shown = staticmethod(avg_pool2d), ('kernel_size', 'stride', 'padding')


class Unflatten(Module):
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x):
        return x.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0 <= p <= 1:   # as PyTorch: at construction, not at the first training forward
            raise ValueError(f"Dropout: probability must lie in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return dropout(x, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class _Loss(_Settings):
    """A loss as torch.nn's: forward(input, target) calls fn with the module's settings, their names, order and defaults
    PyTorch's (`defaults`, which make the class's signature); a weight is a buffer (out of the state dict where None,
    as PyTorch's). PyTorch's deprecated size_average and reduce are taken only as None (give reduction instead)."""

    def _keep(self, name, value):
        if name in ('size_average', 'reduce'):
            if value is not None:
                raise ValueError(f"{type(self).__name__}: {name} (deprecated in PyTorch) is not supported; give "
                                 "reduction='mean', 'sum' or 'none'")
        elif name in ('weight', 'pos_weight'):
            self.register_buffer(name, value)
        else:
            setattr(self, name, value)

    def forward(self, input, target):
        return self.fn(input, target, **{name: getattr(self, name) for name in self.defaults
                                         if name not in ('size_average', 'reduce')})


_LEGACY_REDUCTION = {'size_average': None, 'reduce': None}   # PyTorch's deprecated arguments, in its order


class CrossEntropyLoss(_Loss):
    fn = staticmethod(cross_entropy)
    defaults = {'weight': None, 'size_average': None, 'ignore_index': -100, 'reduce': None, 'reduction': 'mean',
                'label_smoothing': 0.0}


class NLLLoss(_Loss):
    fn = staticmethod(nll_loss)
    defaults = {'weight': None, 'size_average': None, 'ignore_index': -100, 'reduce': None, 'reduction': 'mean'}


class MSELoss(_Loss):
    fn, defaults = staticmethod(mse_loss), {**_LEGACY_REDUCTION, 'reduction': 'mean'}


class L1Loss(_Loss):
    fn, defaults = staticmethod(l1_loss), {**_LEGACY_REDUCTION, 'reduction': 'mean'}


class SmoothL1Loss(_Loss):
    fn, defaults = staticmethod(smooth_l1_loss), {**_LEGACY_REDUCTION, 'reduction': 'mean', 'beta': 1.0}


class HuberLoss(_Loss):
    fn, defaults = staticmethod(huber_loss), {'reduction': 'mean', 'delta': 1.0}


class BCELoss(_Loss):
    fn, defaults = staticmethod(binary_cross_entropy), {'weight': None, **_LEGACY_REDUCTION, 'reduction': 'mean'}


class BCEWithLogitsLoss(_Loss):
    fn = staticmethod(binary_cross_entropy_with_logits)
    defaults = {'weight': None, **_LEGACY_REDUCTION, 'reduction': 'mean', 'pos_weight': None}


class KLDivLoss(_Loss):
    fn, defaults = staticmethod(kl_div), {**_LEGACY_REDUCTION, 'reduction': 'mean', 'log_target': False}


class Embedding(Module):
    """As PyTorch's: padding_idx (negative: from the end) names a row that starts as zeros and gets no gradient."""
    # device and dtype keyword-only: PyTorch's 4th argument is max_norm (not here)
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, *, device=None, dtype=None):
        super().__init__()
        _check_sizes('Embedding', num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if padding_idx is not None and not (_is_int(padding_idx) and -num_embeddings <= padding_idx < num_embeddings):
            raise ValueError(f"Embedding: padding_idx must be an int within num_embeddings ({num_embeddings}), got "
                             f"{padding_idx!r}")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        self.weight = _empty_parameter(num_embeddings, embedding_dim)
        self.reset_parameters()
        _apply_device_dtype(self, device, dtype)

    def reset_parameters(self):   # as PyTorch's: N(0, 1), the padding row zeros
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0

    def forward(self, index):   # (int32 or int64 indices in [0, num_embeddings), as PyTorch's)
        index = self.weight._index_tensor('Embedding', index)
        Tensor._check_range('Embedding', index, self.weight.shape[0], 0, IndexError)
        rows = self.weight[index]
        if self.padding_idx is None:
            return rows
        padding = (index == self.padding_idx).unsqueeze(-1)   # its rows as they are, their gradient 0
        return where(padding, rows.detach(), rows)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}" + (
            f", padding_idx={self.padding_idx}" if self.padding_idx is not None else '')


class _Container(Module):
    """Sequential's, ModuleList's and ModuleDict's: the children are the module attributes, in order, named by their
    keys (as any module's), so named_parameters, state_dict and repr treat them as any submodules."""
    def _items(self):
        return [(name, m) for name, m in vars(self).items() if isinstance(m, Module)]

    def _set_items(self, items):
        """Make (name, module) pairs, their names already checked, the children in this order; nothing changes unless
        each is a Module."""
        items = list(items)
        for name, m in items:
            if not isinstance(m, Module):   # as PyTorch: a function needs a Module around it
                raise TypeError(f"{type(self).__name__}: module {name!r} is a {type(m).__name__}, "
                                "not a Module subclass")
        for name, _ in self._items():
            del self.__dict__[name]
        self.__dict__.update(items)

    def _position(self, i):
        """PyTorch's check of an index into the children: an int in -len..len-1, made non-negative."""
        i, n = operator.index(i), len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range")
        return i % n

    def __len__(self):
        return len(self._items())

    def __iter__(self):
        return iter([m for _, m in self._items()])


class _ModuleSequence(_Container):
    """Sequential's and ModuleList's list methods, as PyTorch's (which the two share): item assignment keeps the
    name, a deletion renumbers the rest '0', '1', ..., insert shifts the names from the index on by one, append and
    extend name each new module by the count so far; each checks every module before any is added."""
    def __setitem__(self, i, module):
        items, i = self._items(), self._position(i)
        items[i] = items[i][0], module
        self._set_items(items)

    def __delitem__(self, i):
        items = self._items()
        del items[i if isinstance(i, slice) else self._position(i)]
        self._set_items((str(k), m) for k, (_, m) in enumerate(items))

    def insert(self, index, module):
        """Before position index (a negative one counts from the end, as a list's; beyond the ends is an error)."""
        items, n, index = dict(self._items()), len(self), operator.index(index)
        if not -n <= index <= n:
            raise IndexError(f"{type(self).__name__}.insert: index {index} is out of range for {n} modules")
        index += n if index < 0 else 0
        try:   # PyTorch's shift, the names from index on being positions ('3' -> '4', ...)
            for k in range(n, index, -1):
                items[str(k)] = items[str(k - 1)]
        except KeyError as e:
            raise KeyError(f"{type(self).__name__}.insert: no module named {e} to shift (as PyTorch's insert, it "
                           f"renames the modules from position {index} on by number)") from None
        items[str(index)] = module
        self._set_items(items.items())
        return self

    def append(self, module):
        return self.extend([module])

    def extend(self, modules):
        if not isinstance(modules, collections.abc.Iterable):
            raise TypeError(f"{type(self).__name__}.extend should be called with an iterable, but got "
                            f"{type(modules).__name__}")
        items = dict(self._items())
        for m in modules:
            items[str(len(items))] = m
        self._set_items(items.items())
        return self

    def pop(self, i):
        module = self[i]
        del self[i]
        return module


class Sequential(_ModuleSequence):
    """Submodules named '0', '1', ..., or by the names of one OrderedDict of modules, as in PyTorch."""
    def __init__(self, *modules):
        super().__init__()
        ordered = len(modules) == 1 and isinstance(modules[0], collections.OrderedDict)
        items = list(modules[0].items() if ordered else ((str(i), m) for i, m in enumerate(modules)))
        for name, _ in items:
            self._check_new_name('module', name)
        self._set_items(items)

    def __getitem__(self, i):
        if isinstance(i, slice):   # their names kept, as PyTorch's
            return type(self)(collections.OrderedDict(self._items()[i]))
        return self._items()[self._position(i)][1]

    def _joined(self, other):   # as PyTorch's + and +=: another Sequential only
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        return other

    def __add__(self, other):
        return Sequential(*self, *self._joined(other))

    def __iadd__(self, other):
        return self.extend(self._joined(other))

    def __mul__(self, count):   # as PyTorch's: the modules themselves, repeated, numbered afresh
        if not isinstance(count, int):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(count)}")
        if count <= 0:
            raise ValueError(f"Non-positive multiplication factor {count} for {type(self)}")
        return Sequential(*list(self) * count)

    __rmul__ = __mul__

    def __imul__(self, count):
        return self.extend(list(self * count)[len(self):])

    def forward(self, x):
        for m in self:
            x = m(x)
        return x


class ModuleList(_ModuleSequence):
    """A list of modules named '0', '1', ... (renumbered after an insertion or a deletion), as PyTorch's; no forward."""
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, i):
        return type(self)(list(self)[i]) if isinstance(i, slice) else list(self)[self._position(i)]

    def insert(self, index, module):   # (returning None, as PyTorch's; Sequential's returns itself)
        super().insert(index, module)

    __iadd__ = _ModuleSequence.extend

    def __add__(self, other):
        return ModuleList(list(self) + list(other))

    def _child_reprs(self):   # as PyTorch's: a run of equal children shown once, as '(i-j): n x child'
        lines, i = [], 0
        for text, run in itertools.groupby(repr(m).replace('\n', '\n  ') for m in self):
            n = len(list(run))
            lines.append((f"({i}): " if n == 1 else f"({i}-{i + n - 1}): {n} x ") + text)
            i += n
        return lines


class ModuleDict(_Container):
    """Modules by name (each key checked as PyTorch's add_module checks it), in the order added; no forward. keys(),
    values() and items() show the modules as they are when called (PyTorch's views follow later changes)."""
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return dict(self._items())[key]

    def __setitem__(self, key, module):
        self.update([(key, module)])

    def __delitem__(self, key):
        items = dict(self._items())
        del items[key]
        self._set_items(items.items())

    def __iter__(self):
        return iter(self.keys())

    def __contains__(self, key):
        return key in self.keys()

    def keys(self):
        return dict(self._items()).keys()

    def values(self):
        return dict(self._items()).values()

    def items(self):
        return dict(self._items()).items()

    def pop(self, key):
        module = self[key]
        del self[key]
        return module

    def clear(self):
        self._set_items([])

    def update(self, modules):
        """From a mapping, a ModuleDict or an iterable of (key, module) pairs; a key already here keeps its place."""
        if not isinstance(modules, collections.abc.Iterable):
            raise TypeError(f"ModuleDict.update should be called with an iterable of key/value pairs, "
                            f"but got {type(modules).__name__}")
        mapping = isinstance(modules, (collections.abc.Mapping, ModuleDict))
        items = dict(self._items())
        for j, pair in enumerate(modules.items() if mapping else modules):
            if not isinstance(pair, collections.abc.Iterable):
                raise TypeError(f"ModuleDict.update: sequence element #{j} should be a (key, module) pair, "
                                f"got {type(pair).__name__}")
            if len(pair := tuple(pair)) != 2:
                raise ValueError(f"ModuleDict.update: sequence element #{j} has length {len(pair)}; 2 is required")
            self._check_new_name('module', pair[0], existing=items)
            items[pair[0]] = pair[1]
        self._set_items(items.items())


def _gru_parameters(module, suffix, input_size, hidden_size, bias):
    """A GRU layer's (or GRUCell's) parameters, unfilled (the module's reset_parameters draws them)."""
    setattr(module, f'weight_ih{suffix}', _empty_parameter(3 * hidden_size, input_size))
    setattr(module, f'weight_hh{suffix}', _empty_parameter(3 * hidden_size, hidden_size))
    setattr(module, f'bias_ih{suffix}', _empty_parameter(3 * hidden_size) if bias else None)
    setattr(module, f'bias_hh{suffix}', _empty_parameter(3 * hidden_size) if bias else None)


def _gru_reset_parameters(module):
    """A GRU's or GRUCell's reset_parameters, as PyTorch's: every parameter (a subclass's too, as PyTorch's) uniform
    within +-1/sqrt(hidden_size)."""
    _reset_uniform(module.parameters(), module.hidden_size)


def _gru_repr(m):
    """A GRU's or GRUCell's extra_repr, as PyTorch's: the sizes, then the settings that are not the defaults."""
    bias = getattr(m, 'bias_ih', getattr(m, 'bias_ih_l0', None)) is not None
    layers, dropout = getattr(m, 'num_layers', 1), getattr(m, 'dropout', 0.0)
    return (f"{m.input_size}, {m.hidden_size}" + (f", num_layers={layers}" if layers != 1 else '') +
            ('' if bias else ', bias=False') + (', batch_first=True' if getattr(m, 'batch_first', False) else '') +
            (f', dropout={dropout}' if dropout else '') +
            (', bidirectional=True' if getattr(m, 'bidirectional', False) else ''))


class GRUCell(Module):
    extra_repr, reset_parameters = _gru_repr, _gru_reset_parameters

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__()
        _check_sizes('GRUCell', input_size=input_size, hidden_size=hidden_size)
        self.input_size, self.hidden_size = input_size, hidden_size
        _gru_parameters(self, '', input_size, hidden_size, bias)
        self.reset_parameters()
        _apply_device_dtype(self, device, dtype)

    @_aliases(hx='h')
    def forward(self, x, h=None):
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:   # as PyTorch: (B, in) or one unbatched (in,)
            raise ValueError(f"GRUCell: expected input of shape (B, {self.input_size}) or ({self.input_size},), "
                             f"got {x.shape}")
        if h is not None and h.shape != x.shape[:-1] + (self.hidden_size,):
            raise ValueError(f"GRUCell: hidden state of shape {h.shape} for input of shape {x.shape}")
        rows = math.prod(x.shape[:-1])   # one step of a GRU layer over them
        out = _gru_layer(x.reshape(1, rows, self.input_size), self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh,
                         None if h is None else h.reshape(rows, self.hidden_size), 'GRUCell', 'h')
        return out.reshape(*x.shape[:-1], self.hidden_size)


class GRU(Module):
    """As torch.nn.GRU. dropout: applied (in training) to each layer's output but the last's. bidirectional: each layer
    also runs over the steps in reverse order (parameters suffixed '_reverse'), its output concatenated after the
    forward one's; h0 and h_n hold layer 0 forward, layer 0 reverse, layer 1 forward, ..."""
    extra_repr, reset_parameters = _gru_repr, _gru_reset_parameters

    # device and dtype keyword-only: PyTorch's 8th argument is proj_size (LSTM's alone: GRU refuses it)
    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, *, device=None, dtype=None):
        super().__init__()
        if hidden_size <= 0 or input_size <= 0:
            raise ValueError(f"GRU: input_size and hidden_size must be greater than zero, got {input_size} and "
                             f"{hidden_size}")
        if num_layers < 1:
            raise ValueError(f"GRU: num_layers must be at least 1, got {num_layers}")
        if not (isinstance(dropout, _REALS) and not isinstance(dropout, bool)
                and 0 <= dropout <= 1):
            raise ValueError(f"GRU: dropout must be a number in [0, 1] (the probability of an element being zeroed), "
                             f"got {dropout!r}")
        if dropout > 0 and num_layers == 1:   # PyTorch's warning, word for word
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects "
                          f"num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          stacklevel=_stacklevel())
        self.input_size, self.hidden_size, self.num_layers, self.batch_first = input_size, hidden_size, num_layers, batch_first
        self.dropout, self.bidirectional = float(dropout), bidirectional
        for k in range(num_layers):
            for suffix in self._suffixes():   # PyTorch's order: layer by layer, forward before reverse
                size = input_size if k == 0 else hidden_size * len(self._suffixes())
                _gru_parameters(self, f'_l{k}{suffix}', size, hidden_size, bias)
        self.reset_parameters()
        _apply_device_dtype(self, device, dtype)

    def _suffixes(self):
        """The directions' parameter name suffixes."""
        return ('', '_reverse') if self.bidirectional else ('',)

    def flatten_parameters(self):
        """A no-op, for code written for PyTorch (where it packs the weights for cuDNN): ours are used as they are."""

    @_aliases(hx='h0')
    def forward(self, x, h0=None):
        """x (T, B, in), (B, T, in) with batch_first, or unbatched (T, in) with h0 (D * num_layers, H), as PyTorch;
        D = 2 where bidirectional, else 1; h0 also as PyTorch's keyword hx=. Returns output (T, B, D * H) and h_n (D *
        num_layers, B, H)."""
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            steps = 'B, T' if self.batch_first else 'T, B'
            raise ValueError(f"GRU: expected input of shape ({steps}, {self.input_size}) or unbatched "
                             f"(T, {self.input_size}), got {x.shape}")
        batched = x.ndim == 3
        if x.shape[1 if self.batch_first and batched else 0] == 0:   # as PyTorch: no steps, no h_n
            raise ValueError(f"GRU: input of shape {x.shape} has a sequence length of 0")
        if self.batch_first and batched:
            x = x.transpose(0, 1)
        suffixes = self._suffixes()
        directions = len(suffixes)
        expected = (directions * self.num_layers, *x.shape[1:-1], self.hidden_size)
        if h0 is not None and h0.shape != expected:
            raise ValueError(f"GRU: h0 of shape {h0.shape}, expected {expected}")
        if not batched:   # a batch of one, removed from the results
            x, h0 = x.unsqueeze(1), None if h0 is None else h0.unsqueeze(1)
        layer_outs = []
        for k in range(self.num_layers):
            if k:   # on the output of every layer but the last
                x = dropout(x, self.dropout, self.training)
            outs = []
            for d, suffix in enumerate(suffixes):   # the reverse direction: the same layer over x flipped in time
                params = (getattr(self, f'{n}_l{k}{suffix}') for n in ('weight_ih', 'weight_hh', 'bias_ih', 'bias_hh'))
                out = _gru_layer(x.flip(0) if d else x, *params, None if h0 is None else h0[directions * k + d])
                layer_outs.append(out)
                outs.append(out.flip(0) if d else out)
            x = outs[0] if directions == 1 else cat(outs, -1)
        h_n = LastSteps.apply(*layer_outs)   # its own memory, as PyTorch's
        if not batched:
            return x.squeeze(1), h_n.squeeze(1)
        return (x.transpose(0, 1) if self.batch_first else x), h_n


# ================================================================ optimizers

class Optimizer:
    """Parameter groups, per-parameter state, and a step() that checks every gradient and state before it changes
    anything. As torch.optim's, `state` maps each parameter (the tensor itself) to a dict of tensors."""
    state_keys = ()   # what the state of a parameter holds once it is not empty

    def __init__(self, params, defaults):
        if isinstance(params, Tensor):   # (list() would take its rows for the parameters)
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, but got "
                            f"{type(params).__name__}")
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        self.defaults, self.param_groups, self.state = defaults, [], collections.defaultdict(dict)
        # as torch.optim: the constructor's options, even where every group has its own
        _check_options(defaults, defaults)
        for group in params if isinstance(params[0], dict) else [{'params': params}]:
            self.add_param_group(group)

    def add_param_group(self, param_group):
        """As torch.optim's: a group (a dict holding 'params'; the options it lacks are the defaults) added after the
        others, once its options and parameters are checked (floating-point leaf tensors, none in another group)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        given = param_group['params']
        group = {**self.defaults, **param_group, 'params': [given] if isinstance(given, Tensor) else list(given)}
        name = type(self).__name__
        for p in group['params']:
            if not isinstance(p, Tensor):
                raise TypeError(f"{name} can only optimize tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError(f"{name} can't optimize a non-leaf tensor")
            if p.dtype.kind != 'f':   # (torch.optim's step fails on one at a float lr, after the parameters before it)
                raise TypeError(f"{name} can only optimize floating-point tensors, got one of dtype {p.dtype}")
        ids = {id(p) for p in group['params']}
        if len(ids) < len(group['params']):   # PyTorch's warning (each copy is updated, as in PyTorch)
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information",
                          UserWarning, stacklevel=_stacklevel())
        if ids & {id(p) for p in self._params()}:
            raise ValueError("some parameters appear in more than one parameter group")
        _check_options(group, self.defaults)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none=True):
        _zero_grads(self._params(), set_to_none)

    def step(self, closure=None):
        """One update of every parameter with a gradient; closure (optional, as PyTorch's) re-evaluates the loss
        first, with gradients recorded, and its loss is returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        work, i, name = [], -1, type(self).__name__
        for g, group in enumerate(self.param_groups):
            _check_options(group, self.defaults, read_gpu=False)   # (a group's options may be set between steps)
            for j, p in enumerate(group['params']):
                i += 1   # p's index in state_dict()
                if p.grad is None:
                    continue
                if p.grad.shape != p.shape:
                    raise ValueError(f"{name}.step: gradient of shape {p.grad.shape} for a parameter of shape "
                                     f"{p.shape}")
                if p.grad.device != p.device:
                    raise RuntimeError(f"{name}.step: gradient on {p.grad.device} for a parameter on {p.device}")
                if p.grad.dtype != p.dtype:   # (the grad setter checks it; an assignment to grad.data does not)
                    raise TypeError(f"{name}.step: gradient of dtype {p.grad.dtype} for a parameter of dtype {p.dtype}")
                _refuse_unwritable(p, "{}.step of param_groups[{}]['params'][{}]", name, g, j)
                self._check_state(i, p, self.state.get(p, {}))
                work.append((p, group))
        with np.errstate(all='ignore'):   # (an overflow gives inf or NaN, silently as PyTorch's)
            for p, group in work:
                self._update(p.data, p.grad.data, group, self.state[p])
                p._version[0] += 1   # updated in place, as PyTorch's optimizers count it
        return loss

    def _check_state(self, i, p, state):
        """An error naming parameter i unless `state` has every one of state_keys, each a tensor of p's shape, dtype
        and device (the step count: 0-d, anywhere)."""
        missing = [k for k in self.state_keys if state and k not in state]
        if missing:
            raise ValueError(f"{type(self).__name__}: the state of parameter {i} lacks {missing}")
        for k, v in state.items():
            name = f"{type(self).__name__}: state '{k}' of parameter {i}"
            if not isinstance(v, Tensor):
                raise TypeError(f"{name} is a {type(v).__name__}, not a Tensor")
            _refuse_unwritable(v, "{} update of state '{}' of parameter {}", type(self).__name__, k, i)
            if k == 'step':
                if v.shape != ():
                    raise ValueError(f"{name} has shape {v.shape}, not () (a count)")
            elif (v.shape, v.dtype) != (p.shape, p.dtype):
                raise ValueError(f"{name} is {v.dtype} of shape {v.shape}; the parameter {p.dtype} of shape {p.shape}")
            elif v.device != p.device:
                raise RuntimeError(f"{name} is on {v.device}, the parameter on {p.device}")

    def _params(self):
        return [p for group in self.param_groups for p in group['params']]

    def state_dict(self):
        """As torch.optim's, with each state tensor a NumPy copy (a group's option held in a tensor, as it is: as
        torch.optim's, load_state_dict copies it)."""
        index = {p: i for i, p in enumerate(self._params())}
        state = {index[p]: {k: v.numpy().copy() for k, v in s.items()} for p, s in self.state.items() if p in index}
        groups = [{**{k: v for k, v in g.items() if k != 'params'}, 'params': [index[p] for p in g['params']]}
                  for g in self.param_groups]
        return {'state': state, 'param_groups': groups}

    def load_state_dict(self, state_dict):
        """Replace the state and the groups' options; all of it is checked before anything changes."""
        params = self._params()
        groups = state_dict['param_groups']
        if [len(g['params']) for g in groups] != [len(g['params']) for g in self.param_groups]:
            raise ValueError(f"{type(self).__name__}.load_state_dict: parameter groups of sizes "
                             f"{[len(g['params']) for g in groups]} for an optimizer with "
                             f"{[len(g['params']) for g in self.param_groups]}")
        state, name = collections.defaultdict(dict), type(self).__name__
        for i, s in state_dict['state'].items():
            if not isinstance(i, (int, np.integer)) or not 0 <= i < len(params):
                raise ValueError(f"{name}.load_state_dict: state for parameter {i!r} of an optimizer with "
                                 f"{len(params)} parameters (the state's keys are their indices)")
            p = params[i]
            # None is no state (PyTorch's absent momentum buffer)
            arrays = {k: _as_array(v) for k, v in s.items() if v is not None}
            for k, a in arrays.items():
                if a.dtype.kind not in 'biuf':
                    raise TypeError(f"{name}.load_state_dict: state '{k}' of parameter {i} is a {type(s[k]).__name__} "
                                    f"of {a.dtype}, not of numbers")
            # 'step' is a count, float32 on the CPU as PyTorch's
            state[p] = {k: Tensor(a.astype(np.float32), device='cpu') if k == 'step' else
                        Tensor(a.astype(p.dtype), device=p.device) for k, a in arrays.items()}
            self._check_state(i, p, state[p])
        for saved in groups:
            _check_options(saved, self.defaults)
        options = [{k: _saved_option(v) for k, v in saved.items() if k != 'params'} for saved in groups]
        for group, loaded in zip(self.param_groups, options):   # replaced, as torch.optim's: none of its keys kept
            params = group['params']
            group.clear()
            group.update({**self.defaults, **loaded, 'params': params})
        self.state = state


def _saved_option(value):
    """A state dict's group option as load_state_dict keeps it, as torch.optim's (which deep-copies them): a list
    (betas) a tuple, a tensor (a rate a CUDA graph reads) a copy of its own, an array (save() writes tensors as arrays)
    a tensor again."""
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, (Tensor,) + _ARRAYS):
        return Tensor(_as_array(value).copy())
    return value


# torch.optim's options which the updates here do not implement
_UNSUPPORTED_OPTIONS = ('amsgrad', 'maximize', 'foreach', 'capturable', 'differentiable', 'fused')


def _check_options(group, defaults, read_gpu=True):
    """ValueError, with torch.optim's message, for a hyperparameter out of its range, and for a torch.optim option
    these updates do not implement set to anything but its off value (a loaded PyTorch state dict may carry them):
    decoupled_weight_decay too where the optimizer's defaults lack it (SGD's); where they have it (Adam's), a bool.
    read_gpu False (every step): an option in GPU memory is checked for its type and size, its value left unread (a
    read waits for the GPU, and cannot run inside a CUDA graph's capture)."""
    has_decoupling = 'decoupled_weight_decay' in defaults
    for key in _UNSUPPORTED_OPTIONS + (() if has_decoupling else ('decoupled_weight_decay',)):
        if group.get(key):
            raise ValueError(f"optimizer option {key}={group[key]!r} is not supported (only its default, off)")
    if not isinstance(group.get('decoupled_weight_decay', False), (bool, np.bool_)):
        raise TypeError(f"decoupled_weight_decay must be a bool, got {group['decoupled_weight_decay']!r}")
    _option_number(group.get('dampening', 0), 'dampening', read_gpu)   # (any number, as torch's)
    for key, what in (('lr', 'learning rate'), ('momentum', 'momentum value'), ('eps', 'epsilon value'),
                      ('weight_decay', 'weight_decay value')):
        if key in group and not 0 <= _option_number(group[key], key, read_gpu):
            raise ValueError(f"Invalid {what}: {group[key]}")
    if 'betas' in group:
        betas = group['betas']
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        for i, beta in enumerate(betas):
            if not 0 <= _option_number(beta, f'betas[{i}]', read_gpu) < 1:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")


def _option_number(value, key, read_gpu=True):
    """Option `key`'s value as a number; TypeError naming it where it is none (a one-element tensor or array is one: a
    rate that a CUDA graph reads, and its state dict's array). read_gpu False: 0 for one in GPU memory, unread."""
    if isinstance(value, Tensor):
        value = value.data
    if isinstance(value, _ARRAYS) and value.size == 1 and value.dtype.kind in 'iuf':
        value = value.item() if read_gpu or _xp(value) is np else 0
    if not isinstance(value, _REALS):
        raise TypeError(f"optimizer option {key} must be a number, got {value!r}")
    return value


def _add(a, b, alpha, out=None):
    """torch's a.add(b, alpha=alpha), into out where given: float16 computes in float32 and rounds once, with alpha
    first rounded to a's dtype as torch does."""
    alpha = alpha.astype(a.dtype) if hasattr(alpha, 'astype') else a.dtype.type(alpha)
    if out is None and a.dtype == np.float16:   # (rounded once, into float16)
        out = _xp(a).empty_like(a)
    return _xp(a).add(_wide(a), _wide(alpha) * _wide(b), out=out)


def _rate(group):
    """A group's learning rate: a number, or a one-element tensor (which a CUDA graph reads anew each replay)."""
    return group['lr'].data if isinstance(group['lr'], Tensor) else group['lr']


class SGD(Optimizer):
    # torch.optim.SGD's order is (params, lr, momentum, dampening, weight_decay, nesterov): the rest keyword-only
    def __init__(self, params, lr=1e-3, momentum=0.0, *, nesterov=False, weight_decay=0.0, dampening=0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                                      dampening=dampening))
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening 0")

    def _update(self, p, g, group, state):
        momentum = group['momentum']
        buffer = state.get('momentum_buffer')   # (the kernel reads it in p's order: one of another layout, composed)
        dense = p.flags.c_contiguous and (buffer is None or buffer.data.flags.c_contiguous)
        rate32 = not isinstance(group['lr'], Tensor) or group['lr'].dtype == np.float32   # (the kernel reads float32)
        kernel = _fused(p, 'sgd_step', p.dtype) if dense and rate32 else None
        if kernel is not None:   # the whole step in one kernel, with the composed path's roundings
            first = momentum and 'momentum_buffer' not in state
            if first:
                state['momentum_buffer'] = Tensor(cp.empty_like(p))
            lr = group['lr']
            on_device = cp.ascontiguousarray(lr.data, np.float32) if isinstance(lr, Tensor) else None
            factors = [0.0 if k == 'lr' and on_device is not None else float(group[k])
                       for k in ('lr', 'weight_decay', 'momentum', 'dampening')]
            buf = state['momentum_buffer'].data if 'momentum_buffer' in state else p
            _launch_flat(kernel, p.size, 1, (p, _in_layout_of(g, p), buf) + _int64s(p.size)
                         + (on_device,) + _scalars(np.float64, *factors) + _int32s(group['nesterov'], bool(first)))
            return
        if group['weight_decay']:   # torch.optim's ops, in torch's float16 arithmetic
            g = _add(g, p, group['weight_decay'])
        if momentum:
            if 'momentum_buffer' in state:
                buf = state['momentum_buffer'].data
                _xp(p).multiply(_wide(buf), momentum, out=buf)
                _add(buf, g, 1 - group['dampening'], out=buf)
            else:
                buf = g.copy()
                state['momentum_buffer'] = Tensor(buf)   # the tensor of buf itself, no copy
            g = _add(g, buf, momentum) if group['nesterov'] else buf
        _add(p, g, -_rate(group), out=p)


class Adam(Optimizer):
    """torch.optim.Adam's update; with decoupled_weight_decay (a group's option, as torch's) AdamW's."""
    state_keys = ('step', 'exp_avg', 'exp_avg_sq')
    always_decoupled = False   # AdamW's: True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 decoupled_weight_decay=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def load_state_dict(self, state_dict):
        """As torch.optim's: a group saved without decoupled_weight_decay (older PyTorch) loads it False into Adam;
        AdamW's groups load it True whatever was saved."""
        groups = [{**g, 'decoupled_weight_decay': self.always_decoupled or g.get('decoupled_weight_decay', False)}
                  for g in state_dict['param_groups']]
        super().load_state_dict({**state_dict, 'param_groups': groups})

    def _update(self, p, g, group, state):
        xp, (beta1, beta2), lr, decay = _xp(p), group['betas'], _rate(group), group['weight_decay']
        if not state:   # as torch.optim's: the step a float32 count on the CPU
            state.update(step=Tensor(np.float32(0)), exp_avg=Tensor(xp.zeros_like(p)),
                         exp_avg_sq=Tensor(xp.zeros_like(p)))
        state['step'].data += 1
        f = _wide   # torch.optim's ops in torch's float16 arithmetic: each result rounds once to float16
        if decay and group['decoupled_weight_decay']:
            xp.multiply(f(p), 1 - lr * decay, out=p)
        elif decay:
            g = _add(g, p, decay)
        m, v, g = state['exp_avg'].data, state['exp_avg_sq'].data, f(g)
        w = _acc_dtype(m.dtype).type(1 - beta1)   # m.lerp_(g, w) in PyTorch's two forms (g itself at w = 1)
        if abs(w) < 0.5:
            xp.add(f(m), w * (g - f(m)), out=m)
        else:
            xp.subtract(g, (g - f(m)) * (1 - w), out=m)
        xp.multiply(f(v), beta2, out=v)
        xp.add(f(v), (1 - beta2) * g * g, out=v)
        step = state['step'].item()
        denom = xp.sqrt(v, out=xp.empty_like(v))   # out: an array where v is 0-d
        xp.divide(f(denom), math.sqrt(1 - beta2 ** step), out=denom)
        xp.add(f(denom), group['eps'], out=denom)
        xp.add(f(p), -(lr / (1 - beta1 ** step)) * f(m) / f(denom), out=p)   # p.addcdiv_(m, denom, value=-step_size)


class AdamW(Adam):
    always_decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, lr, betas, eps, weight_decay, decoupled_weight_decay=True)


# Gradient clipping, as torch.nn.utils': in place on the gradients, between backward() and step(). Nothing here
# waits for the GPU (the norm stays a device array; only error_if_nonfinite reads it, and gradients on several
# devices move their norms), so a CUDA graph can capture it. `foreach` is taken for PyTorch's signature: one path
# serves all, with foreach's results.

def _tensor_list(tensors, what):
    """A tensor or an iterable of tensors (a generator read once) as a list; TypeError naming anything else."""
    items = list(tensors) if hasattr(tensors, '__iter__') and not isinstance(tensors, Tensor) else [tensors]
    for t in items:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what} takes a tensor or an iterable of tensors, got {type(t).__name__}")
    return items


def _nonnegative(value, what):
    """value as a float; ValueError unless it is >= 0 (PyTorch takes a negative one and flips the gradients)."""
    value = float(value)
    if not value >= 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return value


def _vector_norm(a, p):
    """torch.linalg.vector_norm(a, p) of a float array: computed in _opmath (float32 for float16), rounded to a's
    dtype, a 0-d array on a's device."""
    xp, x = _xp(a), _wide(a)
    if x.size == 0 and (p < 0 or p == math.inf):
        raise RuntimeError(f"linalg.vector_norm cannot compute the {p} norm on an empty tensor because the operation "
                           "does not have an identity")
    if p == 2:
        norm = xp.sqrt((x * x).sum())
    elif p == 1:
        norm = xp.abs(x).sum()
    elif p == math.inf:
        norm = xp.abs(x).max()
    elif p == -math.inf:
        norm = xp.abs(x).min()
    elif p == 0:
        norm = (x != 0).sum(dtype=x.dtype)
    else:
        norm = (xp.abs(x) ** x.dtype.type(p)).sum() ** x.dtype.type(1 / p)
    return xp.asarray(norm).astype(a.dtype, copy=False)


@np.errstate(all='ignore')   # inf and NaN norms are results, as PyTorch's (error_if_nonfinite refuses them)
def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """torch.nn.utils.get_total_norm: the norm of the tensors' norms, as if they were one vector; a 0-d tensor on the
    first tensor's device, of their dtypes promoted (float16 alone stays float16), float32 0 for no tensors."""
    tensors, p = _tensor_list(tensors, 'get_total_norm'), float(norm_type)
    if math.isnan(p):
        raise ValueError("norm_type must be a number or 'inf', got nan")
    for t in tensors:
        _need_float(t, 'get_total_norm')
    if not tensors:
        return Tensor(np.float32(0))
    device = tensors[0].device
    norms = [_move(_vector_norm(t.data, p), device) for t in tensors]   # (on the device of each, as PyTorch)
    dtype = _promote(*(n.dtype for n in norms))
    # the norms side by side, each copied into its place: not xp.stack, which on CuPy joins more than 8 arrays by
    # one kernel fed a pointer table copied from the host (cupy.array), which a CUDA graph capture cannot hold
    with _on(device):
        joined = _xp(norms[0]).empty(len(norms), dtype)
        for i, n in enumerate(norms):
            joined[i] = n
        total = _vector_norm(joined, p)
    if error_if_nonfinite and not bool(_xp(total).isfinite(total)):   # (this reads the GPU's result)
        raise RuntimeError(f"The total norm of order {p} for gradients from `parameters` is non-finite, so it cannot "
                           "be clipped. To disable this error and scale the gradients by the non-finite norm anyway, "
                           "set `error_if_nonfinite=False`")
    return Tensor._wrap(total, device)


@np.errstate(all='ignore')   # as PyTorch: a gradient of inf times 0 is NaN, silently
def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """torch.nn.utils.clip_grads_with_norm_: each gradient times min(max_norm / (total_norm + 1e-6), 1), in place
    (even by 1, as PyTorch: no comparison that would wait for the GPU)."""
    grads = {k: p.grad for k, p in enumerate(_tensor_list(parameters, 'clip_grads_with_norm_')) if p.grad is not None}
    max_norm = _nonnegative(max_norm, 'max_norm')
    if not isinstance(total_norm, Tensor) or total_norm.numel() != 1 or total_norm.dtype not in _FLOATS:
        raise TypeError("total_norm must be a one-element float tensor (as get_total_norm returns)")
    for k, g in grads.items():
        _refuse_unwritable(g, 'gradient clipping of parameter {}', k)
    total, dtype = total_norm.data.reshape(()), total_norm.dtype
    xp, f = _xp(total), _opmath(dtype).type   # torch's ops on the norm: each computes in f and rounds to dtype
    rounded = lambda a: xp.asarray(a).astype(dtype, copy=False)
    shifted = rounded(_wide(total) + f(1e-6))
    coef = rounded(_wide(rounded(xp.reciprocal(_wide(shifted)))) * f(max_norm))   # max_norm / x: 1 / x * max_norm
    coef = xp.minimum(coef, dtype.type(1))   # (NaN stays NaN)
    for g in grads.values():   # g * coef: float16 times the coefficient in float32, rounded once, as PyTorch
        c = _move(coef, g.device).astype(_opmath(g.dtype))
        _xp(g.data).multiply(_wide(g.data), c, out=g.data)
        g._version[0] += 1


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """torch.nn.utils.clip_grad_norm_: scales the gradients of `parameters` (those without one skipped) so that their
    total norm (get_total_norm) is at most max_norm, in place; returns the total norm before clipping."""
    params = _tensor_list(parameters, 'clip_grad_norm_')
    if isinstance(parameters, types.GeneratorType) and not params:
        warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.", stacklevel=_stacklevel())
    _nonnegative(max_norm, 'max_norm')   # (before an error_if_nonfinite wait)
    total = get_total_norm([p.grad for p in params if p.grad is not None], norm_type, error_if_nonfinite)
    clip_grads_with_norm_(params, max_norm, total)
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """torch.nn.utils.clip_grad_value_: each gradient of `parameters` clamped to [-clip_value, clip_value] in place
    (NaN stays NaN)."""
    grads = {k: p.grad for k, p in enumerate(_tensor_list(parameters, 'clip_grad_value_')) if p.grad is not None}
    clip_value = _nonnegative(clip_value, 'clip_value')
    for k, g in grads.items():
        _refuse_unwritable(g, 'gradient clipping of parameter {}', k)
        _check_fits(clip_value, g.dtype, 'clip_grad_value_')   # (1e6 for float16 raises, as PyTorch)
    for g in grads.values():
        bound = g.dtype.type(clip_value)
        _xp(g.data).clip(g.data, -bound, bound, out=g.data)
        g._version[0] += 1


# Learning-rate schedulers, as torch.optim.lr_scheduler's: each step() computes the groups' rates with torch's own
# expressions, in torch's order (its recursive forms where its step() uses them), so the rates are torch's to the last
# bit. A rate is written to group['lr'], into a one-element tensor in place where the group holds one (which a CUDA
# graph reads anew each replay). Call step() after optimizer.step(), once per epoch (OneCycleLR: once per batch).

def _check_optimizer(optimizer):
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
    return optimizer


def _copied(value):
    """value, a tensor copied (a rate kept apart from the group's, as torch's)."""
    return value.clone() if isinstance(value, Tensor) else value


def _group_values(optimizer, key):
    return [_copied(group[key]) for group in optimizer.param_groups]


def _set_group_value(group, key, value):
    """group[key] = value, written into the group's tensor where it holds one (its version advanced, as PyTorch's
    fill_: a backward that saved the rate then raises rather than read the new one)."""
    if isinstance(group[key], Tensor):
        group[key].data[...] = value.data if isinstance(value, Tensor) else value
        group[key]._version[0] += 1
    else:
        group[key] = value


def _refuse_nan(**arguments):
    """ValueError naming the first argument that is NaN or holds one (torch takes it, and schedules NaN rates or
    none at all)."""
    for name, value in arguments.items():
        if any(v != v for v in (value if isinstance(value, (list, tuple)) else [value])):
            raise ValueError(f"{name} must not be NaN, got {value}")


def _per_group(name, optimizer, value):
    """A list or tuple of one value per group, or one value for every group (torch's _format_param)."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)) and len(value) != n:
        raise ValueError(f"{name} must have the same length as optimizer.param_groups. {name} has {len(value)} values, "
                         f"param_groups has {n}.")
    return [_copied(v) for v in (value if isinstance(value, (list, tuple)) else [value] * n)]


@contextlib.contextmanager
def _groups_restored_on_error(optimizer):
    """The optimizer's groups put back as they were (every key) where the body raises: a scheduler's constructor that
    fails (in its first step, say) leaves no 'initial_lr' behind, which the next scheduler would start from."""
    saved = [dict(group) for group in optimizer.param_groups]
    try:
        yield
    except BaseException:
        for group, keys in zip(optimizer.param_groups, saved):
            group.clear()
            group.update(keys)
        raise


def _note_optimizer_steps(optimizer):
    """Wrap optimizer.step, once, on the instance (as torch does) to note that it ran: LRScheduler.step warns if not."""
    if hasattr(optimizer.step, '_wrapped_by_lr_sched'):
        return
    owner, step = weakref.ref(optimizer), optimizer.step.__func__   # (a weak reference: no cycle keeps it alive)

    @functools.wraps(step)
    def wrapper(*args, **kwargs):
        opt = owner()
        opt._opt_called = True
        return step(opt, *args, **kwargs)
    wrapper._wrapped_by_lr_sched = True
    optimizer.step = wrapper


class LRScheduler:
    """torch.optim.lr_scheduler.LRScheduler: a subclass's get_lr() gives the groups' rates at last_epoch, called by
    step() once last_epoch has moved on (and by the constructor, with _is_initial set: the rates it starts from).
    last_epoch=-1 starts the schedule (each group's 'initial_lr' set to its lr unless there); another value resumes it
    from groups that hold 'initial_lr' (an optimizer's loaded state)."""

    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = _check_optimizer(optimizer)
        with _groups_restored_on_error(optimizer):
            for i, group in enumerate(optimizer.param_groups):
                if last_epoch == -1:
                    group.setdefault('initial_lr', _copied(group['lr']))
                elif 'initial_lr' not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming scheduler "
                                   "with last_epoch >= 0 (load the optimizer's state first, or start with "
                                   "last_epoch=-1)")
            self.base_lrs = _group_values(optimizer, 'initial_lr')
            self.last_epoch = last_epoch
            _note_optimizer_steps(optimizer)
            self._step_count, self._is_initial = 0, True
            try:
                self.step()
            finally:
                self._is_initial = False

    def get_lr(self):
        raise NotImplementedError

    def _check(self):
        """A subclass's: its constructor's checks, run on its attributes (a state dict's too, before it loads)."""

    def _scaled(self, factor):
        """Each group's lr as it is now times factor (1: unchanged, exactly)."""
        return [group['lr'] * factor for group in self.optimizer.param_groups]

    def step(self):
        if self._step_count == 1 and not hasattr(self.optimizer.step, '_wrapped_by_lr_sched'):
            warnings.warn("Seems like `optimizer.step()` has been overridden after learning rate scheduler "
                          "initialization. Please, make sure to call `optimizer.step()` before `lr_scheduler.step()`",
                          UserWarning, stacklevel=_stacklevel())
        elif self._step_count == 1 and not getattr(self.optimizer, '_opt_called', False):
            warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`: call `optimizer.step()` "
                          "first, or the first value of the learning rate schedule is skipped", UserWarning,
                          stacklevel=_stacklevel())
        if len(self.base_lrs) != len(self.optimizer.param_groups):   # (PyTorch's zip(strict=True) raises here too)
            raise ValueError(f"{type(self).__name__}.step: the optimizer has {len(self.optimizer.param_groups)} "
                             f"param_groups, the scheduler was made for {len(self.base_lrs)} (a group added since?)")
        counts = self._step_count, self.last_epoch
        self._step_count, self.last_epoch = self._step_count + 1, self.last_epoch + 1
        try:
            values = self.get_lr()
        except BaseException:   # (torch leaves the counts moved on)
            self._step_count, self.last_epoch = counts
            raise
        for group, value in zip(self.optimizer.param_groups, values):
            _set_group_value(group, 'lr', value)
        self._last_lr = _group_values(self.optimizer, 'lr')

    def get_last_lr(self):
        """The groups' rates as the last step() left them."""
        return self._last_lr

    def state_dict(self):
        """As torch's: every attribute but the optimizer (not copied)."""
        return {k: v for k, v in self.__dict__.items() if k != 'optimizer'}

    def load_state_dict(self, state_dict):
        """As torch's, once checked: loaded onto a copy of the scheduler, which must pass _check() (the constructor's
        checks), so a refused state dict changes nothing."""
        name, n = type(self).__name__, len(self.optimizer.param_groups)
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"{name}.load_state_dict: expected a dict, got {type(state_dict).__name__}")
        for key in ('base_lrs', '_last_lr'):
            if key in state_dict and len(state_dict[key]) != n:
                raise ValueError(f"{name}.load_state_dict: {key} has {len(state_dict[key])} values for an optimizer "
                                 f"with {n} param_groups")
        if not isinstance(state_dict.get('last_epoch', 0), (int, np.integer)):
            raise TypeError(f"{name}.load_state_dict: last_epoch must be an int, got {state_dict['last_epoch']!r}")
        loaded = object.__new__(type(self))
        loaded.__dict__.update({**self.__dict__, **state_dict})
        loaded._check()
        self.__dict__.update(loaded.__dict__)


class LambdaLR(LRScheduler):
    """Each group's initial lr times lr_lambda(last_epoch): one function, or a list of one per group."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(_check_optimizer(optimizer).param_groups)
        if isinstance(lr_lambda, (list, tuple)) and len(lr_lambda) != n:
            raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base_lr * f(self.last_epoch) for f, base_lr in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self):
        """As torch's: in place of a function (or lambda) None, of a callable object its attributes."""
        return {**super().state_dict(), 'lr_lambdas': [None if isinstance(f, types.FunctionType) else
                                                       f.__dict__.copy() for f in self.lr_lambdas]}

    def load_state_dict(self, state_dict):
        """As torch's: each callable object's saved attributes put back into it (a function's entry is None)."""
        saved = state_dict.get('lr_lambdas')
        if not (isinstance(saved, (list, tuple)) and len(saved) == len(self.lr_lambdas) and
                all(s is None or isinstance(s, dict) for s in saved)):
            raise ValueError(f"LambdaLR.load_state_dict: lr_lambdas must be a list of {len(self.lr_lambdas)} entries "
                             f"(one per group: None or a dict of attributes), got {saved!r}")
        super().load_state_dict({k: v for k, v in state_dict.items() if k != 'lr_lambdas'})
        for f, attributes in zip(self.lr_lambdas, saved):
            if attributes is not None:
                f.__dict__.update(attributes)


class StepLR(LRScheduler):
    """The lr times gamma every step_size epochs."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        self._check()
        super().__init__(optimizer, last_epoch)

    def _check(self):
        if not self.step_size > 0:   # (torch divides by zero at the first step)
            raise ValueError(f"step_size must be positive, got {self.step_size}")
        _refuse_nan(gamma=self.gamma)

    def get_lr(self):
        return self._scaled(self.gamma if self.last_epoch != 0 and self.last_epoch % self.step_size == 0 else 1)


class MultiStepLR(LRScheduler):
    """The lr times gamma at each milestone (times gamma ** k at one given k times)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = collections.Counter(milestones), gamma
        self._check()
        super().__init__(optimizer, last_epoch)

    def _check(self):
        _refuse_nan(gamma=self.gamma)

    def get_lr(self):   # (.get: a loaded state dict may hold a plain dict)
        return self._scaled(self.gamma ** self.milestones.get(self.last_epoch, 0))


class ExponentialLR(LRScheduler):
    """The lr times gamma every epoch."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        self._check()
        super().__init__(optimizer, last_epoch)

    def _check(self):
        _refuse_nan(gamma=self.gamma)

    def get_lr(self):
        return self._scaled(1 if self._is_initial else self.gamma)


class CosineAnnealingLR(LRScheduler):
    """eta_min + (initial lr - eta_min) (1 + cos(pi last_epoch / T_max)) / 2 in torch's recursive form, which runs on
    past T_max: back up to the initial lr at 2 T_max, and so on."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        self._check()
        super().__init__(optimizer, last_epoch)

    def _check(self):
        if not self.T_max > 0:   # (torch divides by zero at the first step)
            raise ValueError(f"T_max must be positive, got {self.T_max}")
        _refuse_nan(eta_min=self.eta_min)

    def get_lr(self):
        groups, e, T, eta_min = self.optimizer.param_groups, self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return _group_values(self.optimizer, 'lr')
        if (e - 1 - T) % (2 * T) == 0:   # the step up from eta_min, where the ratio below would divide by 0
            return [group['lr'] + (base_lr - eta_min) * (1 - math.cos(math.pi / T)) / 2
                    for base_lr, group in zip(self.base_lrs, groups)]
        ratio = (1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T))
        return [ratio * (group['lr'] - eta_min) + eta_min for group in groups]


class LinearLR(LRScheduler):
    """The lr times a factor going linearly from start_factor to end_factor over total_iters epochs, then kept."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        self._check()
        super().__init__(optimizer, last_epoch)

    def _check(self):
        if not 0 < self.start_factor <= 1:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and less or equal to 1, "
                             f"got {self.start_factor}")
        if not 0 <= self.end_factor <= 1:
            raise ValueError(f"Ending multiplicative factor expected to be between 0 and 1, got {self.end_factor}")
        _refuse_nan(total_iters=self.total_iters)

    def get_lr(self):
        e, start, end = self.last_epoch, self.start_factor, self.end_factor
        if e == 0:
            return self._scaled(start)
        if self._is_initial or e > self.total_iters:
            return self._scaled(1)
        return self._scaled(1.0 + (end - start) / (self.total_iters * start + (e - 1) * (end - start)))


def _anneal(strategy, start, end, pct):
    """From start (pct 0) to end (pct 1): 'cos' or 'linear', as torch's OneCycleLR."""
    if strategy == 'cos':
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
    return (end - start) * pct + start


class OneCycleLR(LRScheduler):
    """The 1cycle policy, stepped once per batch: from max_lr / div_factor up to max_lr over the first pct_start of
    total_steps, then down to that / final_div_factor (three_phase: down to the start first, symmetrically, then on
    down); the momentum (SGD's momentum, Adam's betas[0]) the other way, between max_momentum and base_momentum.
    max_lr, base_momentum and max_momentum: one value, or a list of one per group. The groups keep 'initial_lr',
    'max_lr', 'min_lr', 'max_momentum' and 'base_momentum', as torch's."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy='cos', cycle_momentum=True, base_momentum=0.85, max_momentum=0.95, div_factor=25.0,
                 final_div_factor=1e4, three_phase=False, last_epoch=-1):
        _check_optimizer(optimizer)   # every argument is checked before a group changes
        if total_steps is not None:
            if not isinstance(total_steps, int) or total_steps <= 0:
                raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        elif epochs is not None and steps_per_epoch is not None:
            for name, value in (('epochs', epochs), ('steps_per_epoch', steps_per_epoch)):
                if not isinstance(value, int) or value <= 0:
                    raise ValueError(f"Expected positive integer {name}, but got {value}")
            total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ('cos', 'linear'):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        for name, value in (('div_factor', div_factor), ('final_div_factor', final_div_factor)):
            if not value > 0:   # (torch divides by it, or schedules negative rates)
                raise ValueError(f"{name} must be positive, got {value}")
        _refuse_nan(max_lr=max_lr, base_momentum=base_momentum, max_momentum=max_momentum)
        max_lrs = _per_group('max_lr', optimizer, max_lr)
        max_momenta = base_momenta = None
        if cycle_momentum:
            if 'momentum' not in optimizer.defaults and 'betas' not in optimizer.defaults:
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
            max_momenta = _per_group('max_momentum', optimizer, max_momentum)
            base_momenta = _per_group('base_momentum', optimizer, base_momentum)
            self.use_beta1 = 'betas' in optimizer.defaults
        self.total_steps, self._anneal_func_type, self.cycle_momentum = total_steps, anneal_strategy, cycle_momentum
        # each phase runs from the previous one's end_step to its own, from the groups' [start_*] to their [end_*]
        phase = lambda end_step, keys: dict(end_step=end_step, **dict(zip(
            ('start_lr', 'end_lr', 'start_momentum', 'end_momentum'), keys.split())))
        up = phase(float(pct_start * total_steps) - 1, 'initial_lr max_lr max_momentum base_momentum')
        self._schedule_phases = [
            up, phase(float(2 * pct_start * total_steps) - 2, 'max_lr initial_lr base_momentum max_momentum'),
            phase(total_steps - 1, 'initial_lr min_lr max_momentum max_momentum')] if three_phase else [
            up, phase(total_steps - 1, 'max_lr min_lr base_momentum max_momentum')]
        self._check()
        with _groups_restored_on_error(optimizer):
            if last_epoch == -1:
                for i, group in enumerate(optimizer.param_groups):
                    group['initial_lr'] = max_lrs[i] / div_factor
                    group['max_lr'] = max_lrs[i]
                    group['min_lr'] = group['initial_lr'] / final_div_factor
                    if cycle_momentum:
                        self._set_momentum(group, max_momenta[i])
                        group['max_momentum'], group['base_momentum'] = max_momenta[i], base_momenta[i]
            super().__init__(optimizer, last_epoch)

    def _check(self):
        start = 0.0
        for i, phase in enumerate(self._schedule_phases):   # (get_lr divides by each one's length)
            if phase['end_step'] == start:
                raise ValueError(f"OneCycleLR: with total_steps={self.total_steps}, pct_start leaves phase {i + 1} of "
                                 f"{len(self._schedule_phases)} no steps (it starts and ends at step {start:g}), which "
                                 "torch's schedule divides by: choose another pct_start")
            start = phase['end_step']

    def _set_momentum(self, group, value):
        if self.use_beta1:
            group['betas'] = (value, *group['betas'][1:])
        else:
            group['momentum'] = value

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps is {self.total_steps}")
        start_step = 0.0
        for i, phase in enumerate(self._schedule_phases):
            if step <= phase['end_step'] or i == len(self._schedule_phases) - 1:
                pct = (step - start_step) / (phase['end_step'] - start_step)
                break
            start_step = phase['end_step']
        lrs = []
        for group in self.optimizer.param_groups:
            lrs.append(_anneal(self._anneal_func_type, group[phase['start_lr']], group[phase['end_lr']], pct))
            if self.cycle_momentum:
                self._set_momentum(group, _anneal(self._anneal_func_type, group[phase['start_momentum']],
                                                  group[phase['end_momentum']], pct))
        return lrs


class ReduceLROnPlateau(LRScheduler):
    """step(metrics) once per epoch: the lr times factor (not below min_lr, one value or a list of one per group, and
    only by more than eps) once the metric has not improved on its best (by threshold, relative or absolute) for more
    than patience epochs; then cooldown epochs in which bad epochs are not counted. mode 'min': lower is better."""

    def __init__(self, optimizer, mode='min', factor=0.1, patience=10, threshold=1e-4, threshold_mode='rel', cooldown=0,
                 min_lr=0, eps=1e-8):
        self.optimizer = _check_optimizer(optimizer)
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)) and len(min_lr) != n:
            raise ValueError(f"expected {n} min_lrs, got {len(min_lr)}")
        self.default_min_lr = None if isinstance(min_lr, (list, tuple)) else min_lr
        self.min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * n
        self.factor, self.patience, self.cooldown, self.eps, self.last_epoch = factor, patience, cooldown, eps, 0
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self._check()
        self._last_lr = _group_values(optimizer, 'lr')
        self.best, self.cooldown_counter, self.num_bad_epochs = self.mode_worse, 0, 0

    def _check(self):   # (and mode_worse from mode, as torch's _init_is_better)
        if not self.factor < 1.0:
            raise ValueError(f"Factor should be < 1.0, got {self.factor}")
        _refuse_nan(min_lr=self.min_lrs, threshold=self.threshold, eps=self.eps, patience=self.patience,
                    cooldown=self.cooldown)
        if self.mode not in ('min', 'max'):
            raise ValueError(f"mode {self.mode} is unknown!")
        if self.threshold_mode not in ('rel', 'abs'):
            raise ValueError(f"threshold mode {self.threshold_mode} is unknown!")
        self.mode_worse = math.inf if self.mode == 'min' else -math.inf

    @property
    def in_cooldown(self):
        return self.cooldown_counter > 0

    def _is_better(self, a, best):
        if self.mode == 'min':
            return a < best * (1.0 - self.threshold) if self.threshold_mode == 'rel' else a < best - self.threshold
        return a > best * (self.threshold + 1.0) if self.threshold_mode == 'rel' else a > best + self.threshold

    def step(self, metrics):
        current, groups = float(metrics), self.optimizer.param_groups
        better = self._is_better(current, self.best)
        bad = 0 if better or self.in_cooldown else self.num_bad_epochs + 1   # (bad epochs in cooldown are not counted)
        # groups added since: as PyTorch's, a concern only where this step reduces (checked before anything changes)
        if bad > self.patience and len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(f"The number of param groups in the `optimizer` ({len(groups)}) differs from when "
                                   f"`ReduceLROnPlateau` was initialized ({len(self.min_lrs)}), usually due to a new "
                                   "param group being added to the optimizer. Please modify the `min_lrs` field to "
                                   "match the length of the `optimizer` param groups.")
            self.min_lrs = [self.default_min_lr] * len(groups)
        self.last_epoch += 1
        if better:
            self.best = current
        if self.in_cooldown:
            self.cooldown_counter -= 1
        self.num_bad_epochs = bad
        if self.num_bad_epochs > self.patience:
            for group, min_lr in zip(groups, self.min_lrs):
                old_lr = float(group['lr'])
                new_lr = max(old_lr * self.factor, min_lr)
                if old_lr - new_lr > self.eps:
                    _set_group_value(group, 'lr', new_lr)
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = _group_values(self.optimizer, 'lr')


# ================================================================ CUDA graphs

class CUDAGraph:
    """GPU work recorded once and replayed with one launch, like torch.cuda.CUDAGraph: Python and
    launch overhead vanish from a replayed training step. Warm up first (kernels compile, optimizer
    state appears), then

        graph = tl.CUDAGraph()
        with graph.capture():
            loss = step(static_x, static_y)   # recorded, not run
        ...
        static_x.data[...] = next_batch; graph.replay()   # runs it; loss.data holds the new value

    A replay reads and writes the very arrays the capture saw: refill the inputs in place, and give
    an optimizer learning rates as one-element tensors to change them between replays. Inside a
    capture nothing may wait for the GPU (no .item(), .numpy() or printing of values). Arrays the
    capture allocates come from a memory pool of the graph's own, so no later allocation overwrites
    them."""
    def __init__(self):
        if not cuda_is_available():
            raise RuntimeError(f"CUDAGraph {_NEEDS_CUPY}")
        self.graph, self.pool = None, cp.cuda.MemoryPool()

    @contextlib.contextmanager
    def capture(self):
        stream = cp.cuda.Stream(non_blocking=True)   # the legacy default stream cannot be captured
        cp.cuda.get_current_stream().synchronize()
        with stream, cp.cuda.using_allocator(self.pool.malloc):
            stream.begin_capture()
            try:
                yield self
            finally:
                self.graph = stream.end_capture()

    def replay(self):
        """Run the recorded work on the current stream, after the work queued there before."""
        self.graph.launch(cp.cuda.get_current_stream())


# ================================================================ save and load

def _encode(obj, arrays, where='obj', key=False):
    """A JSON-able tree of `obj` with every array replaced by its index in `arrays`; `where` names obj in errors;
    `key`: obj is (in) a dict key, which cannot be a Tensor (load() would read an array, which it cannot hash)."""
    if key and isinstance(obj, Tensor):
        raise TypeError(f"save: {where} is a {type(obj).__name__}, which load() could not use as a key "
                        "(numbers, strings and tuples of them only)")
    if isinstance(obj, Tensor):
        obj = obj.numpy()
    if cp is not None and isinstance(obj, cp.ndarray):
        obj = cp.asnumpy(obj)
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:   # np.savez would pickle it, and load() refuses pickles
            raise TypeError(f"save: {where} is an array of dtype {obj.dtype}, which holds Python objects "
                            "(numeric, bool and string arrays only)")
        arrays.append(obj)
        return {'array': len(arrays) - 1}
    if isinstance(obj, np.generic):   # a 0-d array, read back as the NumPy scalar it was
        return {'scalar': _encode(np.asarray(obj), arrays, where)['array']}
    if isinstance(obj, dict):
        return {'dict': [[_encode(k, arrays, f'a key of {where}', True), _encode(v, arrays, f'{where}[{k!r}]')]
                         for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):   # a namedtuple or other subclass as a plain tuple or list (no code is stored)
        items = [_encode(v, arrays, f'{where}[{i}]', key) for i, v in enumerate(obj)]
        return {'tuple' if isinstance(obj, tuple) else 'list': items}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"save: cannot store {where}, an object of type {type(obj).__name__} (arrays, numbers, "
                    "strings, lists and dicts only)")


def _decode(node, arrays, device):
    if not isinstance(node, dict):
        return node
    (kind, value), = node.items()
    if kind == 'array':
        return _move(arrays[f'a{value}'], device)
    if kind == 'scalar':
        return arrays[f'a{value}'][()]
    if kind == 'dict':
        return {_decode(k, arrays, device): _decode(v, arrays, device) for k, v in value}
    items = [_decode(v, arrays, device) for v in value]
    return tuple(items) if kind == 'tuple' else items


def save(obj, path):
    """Write a state dict (nested dicts and lists of arrays and numbers) to an .npz file atomically:
    a temporary file beside `path`, on disk (fsync) before it is renamed over `path`."""
    arrays, folder = [], os.path.dirname(os.path.abspath(path))
    tree = json.dumps(_encode(obj, arrays))
    if not os.path.isdir(folder):   # (else the error would name the temporary file)
        raise FileNotFoundError(f"save: {path}: no such folder {folder}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"save: {path} is a folder, not a file name")
    tmp = os.path.join(folder, f'.{os.path.basename(path)}.{os.urandom(6).hex()}.tmp')
    # a new file, as open() makes one (mode 0666 less the umask; tempfile.mkstemp's would be 0600)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, 'wb') as f:
            np.savez(f, tree=np.array(tree), **{f'a{i}': a for i, a in enumerate(arrays)})
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load(path, device='cpu'):
    """Read what save() wrote; arrays land on `device`. No pickled code is ever loaded."""
    device = _parse_device(device)
    try:
        arrays = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile):   # (ValueError: NumPy's "pickled data", bytes of no .npy)
        raise ValueError(f"load: {path} is not a file that save() wrote (not an .npz archive)") from None
    if 'tree' not in getattr(arrays, 'files', ()):   # a .npy array, or an .npz of other arrays
        getattr(arrays, 'close', lambda: None)()
        raise ValueError(f"load: {path} is not a file that save() wrote (no 'tree' entry)")
    with arrays:
        try:
            return _decode(json.loads(str(arrays['tree'])), arrays, device)
        except (ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error) as e:   # cut or altered
            raise ValueError(f"load: {path} is not a file that save() wrote, or it was cut short or altered "
                             f"({type(e).__name__}: {e})") from None
