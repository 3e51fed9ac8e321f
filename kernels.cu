// tinygrad_lite's fused GPU kernels, compiled by cupy.RawModule (NVRTC) from tinygrad_lite.py, which lists
// every template instance it needs (_KERNEL_INSTANCES). Sections follow the Python file's fused-ops order.
#include <cuda_fp16.h>

// ===== Helpers =====

// Arithmetic type: float for __half and float, double for double.
template <typename T> struct AccOf { typedef float type; };
template <> struct AccOf<double> { typedef double type; };
template <typename T> using acc_t = typename AccOf<T>::type;

// N consecutive elements moved as one load/store (16 bytes when N * sizeof(T) >= 16).
template <typename T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Pack { T v[N]; };

template <int N, typename T>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) { return *reinterpret_cast<const Pack<T, N>*>(p); }

template <int N, typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& v) { *reinterpret_cast<Pack<T, N>*>(p) = v; }

__device__ __forceinline__ bool aligned16(const void* p)
{
    return (reinterpret_cast<unsigned long long>(p) & 15) == 0;
}

__device__ __forceinline__ float fma_acc(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fma_acc(double a, double b, double c) { return fma(a, b, c); }
__device__ __forceinline__ float norm_cdf(float z) { return normcdff(z); }
__device__ __forceinline__ double norm_cdf(double z) { return normcdf(z); }
__device__ __forceinline__ float norm_pdf(float z) { return 0.3989422804014327f * expf(-0.5f * z * z); }
__device__ __forceinline__ double norm_pdf(double z) { return 0.3989422804014327 * exp(-0.5 * z * z); }

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_GELU = 2 };

template <int ACT, typename A>
__device__ __forceinline__ A act_fwd(A z)
{
    if (ACT == ACT_RELU) return z < A(0) ? A(0) : z;   // NaN passes, as in PyTorch
    if (ACT == ACT_GELU) return z * norm_cdf(z);        // exact GELU: z * Phi(z)
    return z;
}

// g * act'(z). ReLU as PyTorch's threshold_backward: z <= 0 selects 0, so a NaN gradient at an
// inactive unit becomes 0.
template <int ACT, typename A>
__device__ __forceinline__ A act_grad(A z, A g)
{
    if (ACT == ACT_RELU) return z <= A(0) ? A(0) : g;
    if (ACT == ACT_GELU) return g * (norm_cdf(z) + z * norm_pdf(z));
    return g;
}

// A plain integer type of B bytes: im2col only copies bits.
template <int B> struct Bits;
template <> struct Bits<16> { using type = uint4; };
template <> struct Bits<8> { using type = uint2; };
template <> struct Bits<4> { using type = unsigned int; };
template <> struct Bits<2> { using type = unsigned short; };

__device__ __forceinline__ float erf_(float x) { return erff(x); }
__device__ __forceinline__ double erf_(double x) { return erf(x); }
__device__ __forceinline__ float exp_(float x) { return expf(x); }
__device__ __forceinline__ double exp_(double x) { return exp(x); }
__device__ __forceinline__ float log_(float x) { return logf(x); }
__device__ __forceinline__ double log_(double x) { return log(x); }
__device__ __forceinline__ float tanh_(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_(double x) { return tanh(x); }

template <typename A> __device__ __forceinline__ A neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ double neg_inf<double>() {
    return __longlong_as_double(0xfff0000000000000ULL);
}
template <typename A> __device__ __forceinline__ A quiet_nan();
template <> __device__ __forceinline__ float quiet_nan<float>() { return __int_as_float(0x7fc00000); }
template <> __device__ __forceinline__ double quiet_nan<double>() {
    return __longlong_as_double(0x7ff8000000000000ULL);
}

__device__ __forceinline__ long long global_id() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long global_threads() { return (long long)gridDim.x * blockDim.x; }

// ===== ReLU =====

template <typename T>
__device__ __forceinline__ T relu_of(T v)
{
    return static_cast<acc_t<T>>(v) < acc_t<T>(0) ? T(0.0f) : v;   // NaN passes
}

template <typename G, typename O>
__device__ __forceinline__ G relu_grad_of(O out, G grad)
{
    return static_cast<acc_t<O>>(out) <= acc_t<O>(0) ? G(0.0f) : grad;
}

// y = max(x, 0) keeping NaN. 16-byte packs when both pointers allow, then a scalar tail.
template <typename T>
__global__ void relu_fwd(const T* __restrict__ x, T* __restrict__ y, long long n)
{
    constexpr int V = 16 / sizeof(T);
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long done = 0;
    if (aligned16(x) && aligned16(y)) {
        const long long packs = n / V;
        for (long long p = i; p < packs; p += stride) {
            Pack<T, V> v = load_pack<V>(x + p * V);
#pragma unroll
            for (int k = 0; k < V; ++k) v.v[k] = relu_of(v.v[k]);
            store_pack<V>(y + p * V, v);
        }
        done = packs * V;
    }
    for (long long e = done + i; e < n; e += stride) y[e] = relu_of(x[e]);
}

// dx = out <= 0 ? 0 : grad, one select; grad and dx of type G, the saved output of type O.
template <typename G, typename O>
__global__ void relu_bwd(const O* __restrict__ out, const G* __restrict__ grad, G* __restrict__ dx, long long n)
{
    constexpr int V = 16 / (sizeof(G) < sizeof(O) ? sizeof(G) : sizeof(O));
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long done = 0;
    if (aligned16(out) && aligned16(grad) && aligned16(dx)) {
        const long long packs = n / V;
        for (long long p = i; p < packs; p += stride) {
            const Pack<O, V> o = load_pack<V>(out + p * V);
            Pack<G, V> g = load_pack<V>(grad + p * V);
#pragma unroll
            for (int k = 0; k < V; ++k) g.v[k] = relu_grad_of(o.v[k], g.v[k]);
            store_pack<V>(dx + p * V, g);
        }
        done = packs * V;
    }
    for (long long e = done + i; e < n; e += stride) dx[e] = relu_grad_of(out[e], grad[e]);
}

// ===== GELU =====
// erf form:  y = x Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2,  y' = Phi(x) + x exp(-x^2 / 2) / sqrt(2 pi)
// tanh form: y = x (1 + tanh u) / 2,  u = sqrt(2 / pi) (x + 0.044715 x^3),
//            y' = (1 + tanh u) / 2 + x (1 - tanh^2 u) sqrt(2 / pi) (1 + 3 * 0.044715 x^2) / 2
template <typename A, int TANH> __device__ __forceinline__ A gelu_val(A x) {
    if (TANH) {
        const A u = A(0.7978845608028654) * (x + A(0.044715) * x * x * x);
        return A(0.5) * x * (A(1) + tanh_(u));
    }
    return A(0.5) * x * (A(1) + erf_(x * A(0.7071067811865476)));
}

template <typename A, int TANH> __device__ __forceinline__ A gelu_grad(A x) {
    if (TANH) {
        const A x2 = x * x;
        const A t = tanh_(A(0.7978845608028654) * x * (A(1) + A(0.044715) * x2));
        return A(0.5) * (A(1) + t) +
               A(0.5) * x * (A(1) - t * t) * A(0.7978845608028654) * (A(1) + A(0.134145) * x2);
    }
    return A(0.5) * (A(1) + erf_(x * A(0.7071067811865476))) +
           x * A(0.3989422804014327) * exp_(A(-0.5) * x * x);
}

// y = gelu(x) over n elements: V-wide packs, then the scalar tail.
template <typename T, int V, int TANH>
__global__ void gelu_fwd(const T* __restrict__ x, T* __restrict__ y, long long n) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const long long nv = n / V;
    for (long long t = global_id(); t < nv; t += global_threads()) {
        P a = reinterpret_cast<const P*>(x)[t];
#pragma unroll
        for (int e = 0; e < V; ++e) a.v[e] = T(gelu_val<A, TANH>(A(a.v[e])));
        reinterpret_cast<P*>(y)[t] = a;
    }
    for (long long t = nv * V + global_id(); t < n; t += global_threads())
        y[t] = T(gelu_val<A, TANH>(A(x[t])));
}

// dx = dy * gelu'(x)
template <typename T, int V, int TANH>
__global__ void gelu_bwd(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                         long long n) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const long long nv = n / V;
    for (long long t = global_id(); t < nv; t += global_threads()) {
        const P a = reinterpret_cast<const P*>(x)[t];
        P g = reinterpret_cast<const P*>(dy)[t];
#pragma unroll
        for (int e = 0; e < V; ++e) g.v[e] = T(A(g.v[e]) * gelu_grad<A, TANH>(A(a.v[e])));
        reinterpret_cast<P*>(dx)[t] = g;
    }
    for (long long t = nv * V + global_id(); t < n; t += global_threads())
        dx[t] = T(A(dy[t]) * gelu_grad<A, TANH>(A(x[t])));
}

// ===== BatchNorm =====
// x is read as (N, C, S): S = H*W for 2d, L for (N, C, L), 1 for (N, C). Every kernel runs
// groups x chunks blocks (blockIdx = group * chunks + chunk):
// - segment mode (cpg == 0, for S >= 32): a group is one channel; its N*S elements (N segments of
//   S contiguous ones, in 16-byte packs when S and the pointers allow) are cut into `chunks`
//   equal, contiguous ranges, one per block.
// - column mode (cpg > 0, for S < 32): x is the (N, C*S) matrix, a group is cpg = 32 / S whole
//   channels, i.e. cpg*S adjacent columns, one per lane, so every row read is contiguous; the N
//   rows are cut into `chunks`, and the 8 warps of a block take every 8th row of its range.
// The host picks chunks so that one wave of blocks fills every SM. The reductions write one
// partial per block (per lane in column mode); the last block of a group to finish, counted in
// ticket[group], folds the group's partials in double and finalizes its channels.

// Calls f(e) for each unit of W elements (W divides S) of channel c in chunk k, e = offset of the
// unit's first element, stepping blockDim.x units at a time; REV walks the chunk from its end. The
// trip count is known up front so that the unrolled loop keeps several loads in flight.
template <int W, bool REV, typename F>
__device__ __forceinline__ void for_units(int N, int C, long long S, int c, int k, int chunks, F f)
{
    const long long spv = S / W, P = (long long)N * spv;   // units per segment, per channel
    const long long p0 = P * k / chunks, p1 = P * (k + 1) / chunks;
    const int step = blockDim.x;
    const long long p = REV ? p1 - 1 - threadIdx.x : p0 + threadIdx.x;
    const long long left = REV ? p - p0 : p1 - 1 - p;   // units after this thread's first one
    if (left < 0) return;
    const int count = int(left / step) + 1, dn = int(step / spv);
    const long long ds = step % spv, row = (long long)C * S;
    int n = int(p / spv);
    long long s = p - n * spv;   // unit p is unit s of segment (n, c)
#pragma unroll 4
    for (int i = 0; i < count; ++i) {
        f((long long)n * row + (long long)c * S + s * W);
        if (REV) {
            n -= dn; s -= ds;
            if (s < 0) { s += spv; --n; }
        } else {
            n += dn; s += ds;
            if (s >= spv) { s -= spv; ++n; }
        }
    }
}

// Column mode: calls f(e) for column j in every row of chunk k that this thread's warp takes.
template <bool REV, typename F>
__device__ __forceinline__ void for_rows(int N, long long W, long long j, int k, int chunks, F f)
{
    const int warps = blockDim.x >> 5, r = threadIdx.x >> 5;
    const int n0 = int((long long)N * k / chunks), n1 = int((long long)N * (k + 1) / chunks);
    if (REV) {
#pragma unroll 4
        for (int n = n1 - 1 - r; n >= n0; n -= warps) f((long long)n * W + j);
    } else {
#pragma unroll 4
        for (int n = n0 + r; n < n1; n += warps) f((long long)n * W + j);
    }
}

// Per-channel constants: the pre-activation is (x - mean) * scale + shift, scale = invstd * w.
template <typename A>
struct Chan {
    A mean, invstd, scale, shift;
    __device__ __forceinline__ A pre(A xc) const { return fma_acc(xc, scale, shift); }   // xc = x - mean
};

template <typename A>
__device__ __forceinline__ Chan<A> load_chan(const A* mean, A invstd, const A* w, const A* b, int c)
{
    Chan<A> ch;
    ch.mean = mean[c];
    ch.invstd = invstd;
    ch.scale = w ? invstd * w[c] : invstd;
    ch.shift = b ? b[c] : A(0);
    return ch;
}

// Sums (a, b) over the block (segment mode) or, per lane, over the block's warps (column mode);
// the result is in warp 0.
template <typename A>
__device__ __forceinline__ void block_sum2(A& a, A& b, bool cols)
{
    __shared__ A sh[2][16][32];   // blocks of up to 512 threads
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (!cols)
        for (int o = 16; o > 0; o >>= 1) {
            a += __shfl_xor_sync(0xffffffffu, a, o);
            b += __shfl_xor_sync(0xffffffffu, b, o);
        }
    sh[0][warp][lane] = a;
    sh[1][warp][lane] = b;
    __syncthreads();
    if (warp == 0) {
        a = A(0);
        b = A(0);
        for (int r = 0; r < (blockDim.x >> 5); ++r) {
            a += sh[0][r][lane];
            b += sh[1][r][lane];
        }
    }
}

// Reduces (s1, s2) over the block, stores the block's partial (32 per block in column mode, one
// per lane) and counts the block in ticket[g]. Returns true in the group's last block, after which
// every partial of the group is visible to it; that block also re-arms ticket[g] for the next call.
template <typename A>
__device__ __forceinline__ bool publish(A s1, A s2, A* part, int* ticket, int g, int k, int chunks, int cpg)
{
    __shared__ bool last;
    block_sum2(s1, s2, cpg > 0);
    if (threadIdx.x < 32) {
        const long long slot = cpg ? ((long long)g * chunks + k) * 32 + threadIdx.x : (long long)g * chunks + k;
        if (cpg || threadIdx.x == 0) {
            part[2 * slot] = s1;
            part[2 * slot + 1] = s2;
        }
        __threadfence();
    }
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket + g, 1) == chunks - 1;
    __syncthreads();
    if (!last) return false;
    __threadfence();
    if (threadIdx.x == 0) ticket[g] = 0;
    return true;
}

// In the last block of group g: folds in double the partials of each of the group's channels (one
// warp per channel) and calls f(c, total1, total2) on lane 0.
template <typename A, typename F>
__device__ __forceinline__ void group_totals(const A* part, int g, int chunks, int cpg, long long S, int C, F f)
{
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int nch = cpg ? min(cpg, C - g * cpg) : 1;
    const long long per = cpg ? chunks * S : chunks;   // partials per channel
    for (int i = threadIdx.x >> 5; i < nch; i += warps) {
        double t1 = 0, t2 = 0;
        for (long long q = lane; q < per; q += 32) {
            const long long slot = cpg ? ((long long)g * chunks + q / S) * 32 + i * S + q % S
                                       : (long long)g * chunks + q;
            t1 += double(__ldcg(part + 2 * slot));
            t2 += double(__ldcg(part + 2 * slot + 1));
        }
        for (int o = 16; o > 0; o >>= 1) {
            t1 += __shfl_xor_sync(0xffffffffu, t1, o);
            t2 += __shfl_xor_sync(0xffffffffu, t2, o);
        }
        if (lane == 0) f(cpg ? g * cpg + i : g, t1, t2);
    }
}

// Training statistics. Each thread sums v = x - K and v*v, K = the channel's first element x[0, c, 0]
// (a shift that keeps a large mean from cancelling the variance in float); the finalizing block
// writes mean, invstd = 1/sqrt(var + eps) (biased var) and updates the running statistics
// (running_var with the unbiased var) when they are given.
template <typename T>
__global__ void bn_fwd_stats(const T* __restrict__ x, acc_t<T>* __restrict__ part, int* __restrict__ ticket,
                             acc_t<T>* __restrict__ mean, acc_t<T>* __restrict__ invstd,
                             acc_t<T>* __restrict__ running_mean, acc_t<T>* __restrict__ running_var,
                             double momentum, double eps, int N, int C, long long S, int chunks, int cpg)
{
    typedef acc_t<T> A;
    constexpr int V = 16 / sizeof(T);
    const int g = blockIdx.x / chunks, k = blockIdx.x % chunks, lane = threadIdx.x & 31;
    const long long W = (long long)C * S, j = (long long)g * cpg * S + lane;   // column mode
    const bool active = !cpg || (lane < cpg * S && j < W);
    const A K = active ? A(x[(cpg ? j / S : g) * S]) : A(0);
    A s1 = 0, s2 = 0;
    auto add = [&](A v) {
        v -= K;
        s1 += v;
        s2 = fma_acc(v, v, s2);
    };
    auto elem = [&](long long e) { add(A(x[e])); };
    if (cpg) {
        if (active) for_rows<false>(N, W, j, k, chunks, elem);
    } else if (S % V == 0 && aligned16(x)) {
        for_units<V, false>(N, C, S, g, k, chunks, [&](long long e) {
            const Pack<T, V> p = load_pack<V>(x + e);
#pragma unroll
            for (int u = 0; u < V; ++u) add(A(p.v[u]));
        });
    } else {
        for_units<1, false>(N, C, S, g, k, chunks, elem);
    }
    if (!publish(s1, s2, part, ticket, g, k, chunks, cpg)) return;
    group_totals(part, g, chunks, cpg, S, C, [&](int c, double t1, double t2) {
        const double M = double(N) * double(S), d = t1 / M, var = fmax(t2 / M - d * d, 0.0);
        const double mu = double(x[(long long)c * S]) + d;
        mean[c] = A(mu);
        invstd[c] = A(1.0 / sqrt(var + eps));
        if (running_mean) {
            running_mean[c] = A((1.0 - momentum) * double(running_mean[c]) + momentum * mu);
            running_var[c] = A((1.0 - momentum) * double(running_var[c]) + momentum * var * M / (M - 1.0));
        }
    });
}

// y = act((x - mean) * invstd * w + b). Training: stat holds invstd. Eval (invstd_out given): mean and
// stat are the running mean and variance, invstd = 1/sqrt(var + eps), and the first chunk saves
// mean and invstd for backward. w and b may be null (no affine).
template <typename T, int ACT>
__global__ void bn_fwd_apply(const T* __restrict__ x, T* __restrict__ y,
                             const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ stat,
                             const acc_t<T>* __restrict__ w, const acc_t<T>* __restrict__ b,
                             acc_t<T>* __restrict__ mean_out, acc_t<T>* __restrict__ invstd_out,
                             double eps, int N, int C, long long S, int chunks, int cpg)
{
    typedef acc_t<T> A;
    constexpr int V = 16 / sizeof(T);
    const int g = blockIdx.x / chunks, k = blockIdx.x % chunks, lane = threadIdx.x & 31;
    const long long W = (long long)C * S, j = (long long)g * cpg * S + lane;   // column mode
    if (cpg && (lane >= cpg * S || j >= W)) return;
    const int c = cpg ? int(j / S) : g;
    const A inv = invstd_out ? A(1.0 / sqrt(double(stat[c]) + eps)) : stat[c];
    const Chan<A> ch = load_chan(mean, inv, w, b, c);
    if (invstd_out && k == 0 && (cpg ? j % S == 0 : threadIdx.x == 0)) {
        mean_out[c] = ch.mean;
        invstd_out[c] = inv;
    }
    auto f = [&](A v) { return act_fwd<ACT>(ch.pre(v - ch.mean)); };
    auto elem = [&](long long e) { y[e] = T(f(A(x[e]))); };
    if (cpg)
        for_rows<true>(N, W, j, k, chunks, elem);
    else if (S % V == 0 && aligned16(x) && aligned16(y))
        for_units<V, true>(N, C, S, g, k, chunks, [&](long long e) {
            const Pack<T, V> p = load_pack<V>(x + e);
            Pack<T, V> q;
#pragma unroll
            for (int u = 0; u < V; ++u) q.v[u] = T(f(A(p.v[u])));
            store_pack<V>(y + e, q);
        });
    else
        for_units<1, true>(N, C, S, g, k, chunks, elem);
}

// Backward reductions, per channel: sums[c] = sum(g) (= dbias) and sums[C + c] = sum(g * xhat)
// (= dweight), g = dy * act'(pre) with the pre-activation recomputed from x exactly as forward
// computed it (g = dy without an activation).
template <typename T, int ACT>
__global__ void bn_bwd_reduce(const T* __restrict__ x, const T* __restrict__ dy,
                              const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ invstd,
                              const acc_t<T>* __restrict__ w, const acc_t<T>* __restrict__ b,
                              acc_t<T>* __restrict__ part, int* __restrict__ ticket, acc_t<T>* __restrict__ sums,
                              int N, int C, long long S, int chunks, int cpg)
{
    typedef acc_t<T> A;
    constexpr int V = 16 / sizeof(T);
    const int g = blockIdx.x / chunks, k = blockIdx.x % chunks, lane = threadIdx.x & 31;
    const long long W = (long long)C * S, j = (long long)g * cpg * S + lane;   // column mode
    const bool active = !cpg || (lane < cpg * S && j < W);
    const int c = cpg ? int(j / S) : g;
    const Chan<A> ch = active ? load_chan(mean, invstd[c], w, b, c) : Chan<A>{};
    A s1 = 0, s2 = 0;   // sum(g), sum(g * (x - mean)); the second times invstd is sum(g * xhat)
    auto add = [&](A xv, A dv) {
        const A xc = xv - ch.mean, gr = act_grad<ACT>(ch.pre(xc), dv);
        s1 += gr;
        s2 = fma_acc(gr, xc, s2);
    };
    auto elem = [&](long long e) { add(A(x[e]), A(dy[e])); };
    if (cpg) {
        if (active) for_rows<false>(N, W, j, k, chunks, elem);
    } else if (S % V == 0 && aligned16(x) && aligned16(dy)) {
        for_units<V, false>(N, C, S, g, k, chunks, [&](long long e) {
            const Pack<T, V> px = load_pack<V>(x + e), pd = load_pack<V>(dy + e);
#pragma unroll
            for (int u = 0; u < V; ++u) add(A(px.v[u]), A(pd.v[u]));
        });
    } else {
        for_units<1, false>(N, C, S, g, k, chunks, elem);
    }
    s2 *= ch.invstd;
    if (!publish(s1, s2, part, ticket, g, k, chunks, cpg)) return;
    group_totals(part, g, chunks, cpg, S, C, [&](int c, double t1, double t2) {
        sums[c] = A(t1);
        sums[C + c] = A(t2);
    });
}

// dx. Training (sums given): dx = w*invstd * (g - sum(g)/M - xhat * sum(g*xhat)/M), M = N*S, written as
// scale*g + bx*(x - mean) + e0 with per-channel bx, e0. Eval: dx = w*invstd * g, where x is read
// only to recompute the activation's derivative.
template <typename T, int ACT>
__global__ void bn_bwd_dx(const T* __restrict__ x, const T* __restrict__ dy,
                          const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ invstd,
                          const acc_t<T>* __restrict__ w, const acc_t<T>* __restrict__ b,
                          const acc_t<T>* __restrict__ sums, T* __restrict__ dx,
                          int N, int C, long long S, int chunks, int cpg)
{
    typedef acc_t<T> A;
    constexpr int V = 16 / sizeof(T);
    const int g = blockIdx.x / chunks, k = blockIdx.x % chunks, lane = threadIdx.x & 31;
    const long long W = (long long)C * S, j = (long long)g * cpg * S + lane;   // column mode
    if (cpg && (lane >= cpg * S || j >= W)) return;
    const int c = cpg ? int(j / S) : g;
    const Chan<A> ch = load_chan(mean, invstd[c], w, b, c);
    const bool need_x = sums || ACT != ACT_NONE;
    const A M = A(double(N) * double(S));
    const A bx = sums ? -ch.scale * ch.invstd * (sums[C + c] / M) : A(0);
    const A e0 = sums ? -ch.scale * (sums[c] / M) : A(0);
    auto f = [&](A xv, A dv) {   // xv is ignored unless need_x
        const A xc = need_x ? xv - ch.mean : A(0);
        return fma_acc(ch.scale, act_grad<ACT>(ch.pre(xc), dv), fma_acc(bx, xc, e0));
    };
    auto elem = [&](long long e) { dx[e] = T(f(need_x ? A(x[e]) : A(0), A(dy[e]))); };
    if (cpg)
        for_rows<true>(N, W, j, k, chunks, elem);
    else if (S % V == 0 && aligned16(x) && aligned16(dy) && aligned16(dx))
        for_units<V, true>(N, C, S, g, k, chunks, [&](long long e) {
            Pack<T, V> px = {};
            if (need_x) px = load_pack<V>(x + e);
            Pack<T, V> pd = load_pack<V>(dy + e);
#pragma unroll
            for (int u = 0; u < V; ++u) pd.v[u] = T(f(A(px.v[u]), A(pd.v[u])));
            store_pack<V>(dx + e, pd);
        });
    else
        for_units<1, true>(N, C, S, g, k, chunks, elem);
}

// ===== conv (im2col/col2im) =====
// cols[m, (i*kw + j)*C + c] = x[n, ho*sh - ph + i, wo*sw - pw + j, c] (0 outside the image),
// m = (n*Ho + ho)*Wo + wo, so the forward conv is cols @ W2^T with W2 = w.transpose(0,2,3,1)
// reshaped (C_out, kh*kw*C). A thread owns one V-wide column slot kv of the KV = kh*kw*C/V slots
// and walks the rows m = r, r + R, r + 2R, ... (the launch has R*KV threads, R <= rows), so its
// (i, j, c) never changes and (n, ho, wo) advance by additions; the writes of consecutive
// threads are consecutive 16-byte words. Four rows are loaded before any is stored.
template <typename T, int V>
__global__ void im2col_nhwc(const T* __restrict__ x, T* __restrict__ cols, int N, int H, int W,
                            int C, int Ho, int Wo, int kh, int kw, int sh, int sw, int ph, int pw,
                            int R) {
    using U = typename Bits<sizeof(T) * V>::type;
    constexpr int B = 4;
    const int CV = C / V, KV = kh * kw * CV;
    const long long tid = global_id();
    if (tid >= (long long)R * KV) return;
    const int kv = (int)(tid % KV), r = (int)(tid / KV);
    const int cv = kv % CV, j = (kv / CV) % kw, i = kv / (CV * kw);
    int wo = r % Wo, ho = (r / Wo) % Ho, n = r / (Wo * Ho);
    const int dwo = R % Wo, dho = (R / Wo) % Ho, dn = R / (Wo * Ho);
    const long long rows = (long long)N * Ho * Wo;
    const U* __restrict__ src = reinterpret_cast<const U*>(x);
    U* __restrict__ dst = reinterpret_cast<U*>(cols);
    for (long long m0 = r; m0 < rows; m0 += (long long)B * R) {
        U v[B];
#pragma unroll
        for (int u = 0; u < B; ++u) {
            const int hi = ho * sh - ph + i, wi = wo * sw - pw + j;
            v[u] = U{};
            if (m0 + (long long)u * R < rows && (unsigned)hi < (unsigned)H && (unsigned)wi < (unsigned)W)
                v[u] = src[(((long long)n * H + hi) * W + wi) * CV + cv];
            wo += dwo;
            if (wo >= Wo) { wo -= Wo; ++ho; }
            ho += dho;
            if (ho >= Ho) { ho -= Ho; ++n; }
            n += dn;
        }
#pragma unroll
        for (int u = 0; u < B; ++u)
            if (m0 + (long long)u * R < rows) dst[(m0 + (long long)u * R) * KV + kv] = v[u];
    }
}

// The taps k of a kernel of size `ksize`, stride s, over output size `osize` that reach padded
// input position q (= h + padding): k = q - o*s with 0 <= o < osize, so k runs from `first` to
// below `end` in steps of s.
__device__ __forceinline__ void taps_over(int q, int ksize, int s, int osize, int& first, int& end) {
    const int lo = max(0, q - s * osize + 1);
    first = lo + (q - lo) % s;
    end = min(ksize, q + 1);
}

// The adjoint of im2col, as a gather (no atomics): dx[n, h, w, c] = sum of dcols[m, (i*kw + j)*C + c]
// over the (ho, wo, i, j) with h = ho*sh - ph + i and w = wo*sw - pw + j. One thread per V
// channels; the taps of one kernel row are loaded four at a time before they are summed.
template <typename T, int V>
__global__ void col2im_nhwc(const T* __restrict__ dcols, T* __restrict__ dx, int N, int H, int W,
                            int C, int Ho, int Wo, int kh, int kw, int sh, int sw, int ph, int pw) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    constexpr int B = 4;
    const int CV = C / V;
    const long long K = (long long)kh * kw * C, total = (long long)N * H * W * CV;
    for (long long t = global_id(); t < total; t += global_threads()) {
        const int cv = (int)(t % CV);
        long long p = t / CV;
        const int w = (int)(p % W);
        p /= W;
        const int h = (int)(p % H), n = (int)(p / H);
        const int hp = h + ph, wp = w + pw;
        int i0, iend, j0, jend;
        taps_over(hp, kh, sh, Ho, i0, iend);
        taps_over(wp, kw, sw, Wo, j0, jend);
        A acc[V];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = A(0);
        for (int i = i0; i < iend; i += sh) {
            const T* row = dcols + ((long long)n * Ho + (hp - i) / sh) * Wo * K + (long long)i * kw * C + cv * V;
            for (int jb = j0; jb < jend; jb += B * sw) {
                P v[B];
#pragma unroll
                for (int u = 0; u < B; ++u) {
                    const int j = jb + u * sw;
                    if (j < jend) v[u] = *reinterpret_cast<const P*>(row + ((wp - j) / sw) * K + j * C);
                }
#pragma unroll
                for (int u = 0; u < B; ++u)
                    if (jb + u * sw < jend)
#pragma unroll
                        for (int e = 0; e < V; ++e) acc[e] += A(v[u].v[e]);
            }
        }
        P o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.v[e] = T(acc[e]);
        reinterpret_cast<P*>(dx)[t] = o;
    }
}

// out[b, s, r] = in[b, r, s]: NCHW -> NHWC is (b, r, s) = (n, c, h*w), NHWC -> NCHW is (n, h*w, c).
// 32x32 tiles through shared memory, block (32, 8), grid (ceil(S/32), ceil(R/32), B).
template <typename T>
__global__ void batch_transpose(const T* __restrict__ in, T* __restrict__ out, int R, int S) {
    __shared__ T tile[32][33];
    const long long base = (long long)blockIdx.z * R * S;
    const int r0 = blockIdx.y * 32, s0 = blockIdx.x * 32;
    for (int k = threadIdx.y; k < 32; k += 8) {
        const int r = r0 + k, s = s0 + threadIdx.x;
        if (r < R && s < S) tile[k][threadIdx.x] = in[base + (long long)r * S + s];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += 8) {
        const int s = s0 + k, r = r0 + threadIdx.x;
        if (r < R && s < S) out[base + (long long)s * R + r] = tile[threadIdx.x][k];
    }
}

// ===== pooling =====
// Windows kh x kw with stride (sh, sw), no padding; Ho = (H - kh)/sh + 1. NHWC with C channels;
// NCHW data runs as NHWC with (N*C, H, W, 1). One thread per output (forward) or input (backward)
// V-wide channel group.

// The range of ho whose window [ho*s, ho*s + k) holds h.
__device__ __forceinline__ void windows_over(int h, int k, int s, int Ho, int& lo, int& hi) {
    lo = h < k ? 0 : (h - k) / s + 1;
    hi = min(h / s, Ho - 1);
}

// y = window max, idx = i*kw + j of the first maximum (a NaN wins, as in PyTorch).
template <typename T, int V>
__global__ void max_pool2d_fwd(const T* __restrict__ x, T* __restrict__ y,
                               unsigned char* __restrict__ idx, int N, int H, int W, int C, int Ho,
                               int Wo, int kh, int kw, int sh, int sw) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    using I = Pack<unsigned char, V>;
    const int CV = C / V;
    const long long total = (long long)N * Ho * Wo * CV;
    for (long long t = global_id(); t < total; t += global_threads()) {
        const int cv = (int)(t % CV);
        long long p = t / CV;
        const int wo = (int)(p % Wo);
        p /= Wo;
        const int ho = (int)(p % Ho), n = (int)(p / Ho);
        const T* base = x + (((long long)n * H + ho * sh) * W + wo * sw) * C + cv * V;
        A best[V];
        I arg;
        const P first = *reinterpret_cast<const P*>(base);
#pragma unroll
        for (int e = 0; e < V; ++e) { best[e] = A(first.v[e]); arg.v[e] = 0; }
        for (int i = 0; i < kh; ++i)
            for (int j = 0; j < kw; ++j) {
                const P v = *reinterpret_cast<const P*>(base + ((long long)i * W + j) * C);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const A a = A(v.v[e]);
                    if (a > best[e] || a != a) { best[e] = a; arg.v[e] = (unsigned char)(i * kw + j); }
                }
            }
        P o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.v[e] = T(best[e]);
        reinterpret_cast<P*>(y)[t] = o;
        reinterpret_cast<I*>(idx)[t] = arg;
    }
}

// dx[n, h, w, c] = sum of dy over the windows whose recorded maximum is (h, w).
template <typename T, int V>
__global__ void max_pool2d_bwd(const T* __restrict__ dy, const unsigned char* __restrict__ idx,
                               T* __restrict__ dx, int N, int H, int W, int C, int Ho, int Wo,
                               int kh, int kw, int sh, int sw) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    using I = Pack<unsigned char, V>;
    const int CV = C / V;
    const long long total = (long long)N * H * W * CV;
    for (long long t = global_id(); t < total; t += global_threads()) {
        const int cv = (int)(t % CV);
        long long p = t / CV;
        const int w = (int)(p % W);
        p /= W;
        const int h = (int)(p % H), n = (int)(p / H);
        int hlo, hhi, wlo, whi;
        windows_over(h, kh, sh, Ho, hlo, hhi);
        windows_over(w, kw, sw, Wo, wlo, whi);
        A acc[V];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = A(0);
        for (int ho = hlo; ho <= hhi; ++ho)
            for (int wo = wlo; wo <= whi; ++wo) {
                const long long o = (((long long)n * Ho + ho) * Wo + wo) * CV + cv;
                const P g = reinterpret_cast<const P*>(dy)[o];
                const I a = reinterpret_cast<const I*>(idx)[o];
                const int k = (h - ho * sh) * kw + (w - wo * sw);
#pragma unroll
                for (int e = 0; e < V; ++e)
                    if (a.v[e] == k) acc[e] += A(g.v[e]);
            }
        P o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.v[e] = T(acc[e]);
        reinterpret_cast<P*>(dx)[t] = o;
    }
}

// y = window mean.
template <typename T, int V>
__global__ void avg_pool2d_fwd(const T* __restrict__ x, T* __restrict__ y, int N, int H, int W,
                               int C, int Ho, int Wo, int kh, int kw, int sh, int sw) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int CV = C / V;
    const A scale = A(1) / A(kh * kw);
    const long long total = (long long)N * Ho * Wo * CV;
    for (long long t = global_id(); t < total; t += global_threads()) {
        const int cv = (int)(t % CV);
        long long p = t / CV;
        const int wo = (int)(p % Wo);
        p /= Wo;
        const int ho = (int)(p % Ho), n = (int)(p / Ho);
        const T* base = x + (((long long)n * H + ho * sh) * W + wo * sw) * C + cv * V;
        A acc[V];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = A(0);
        for (int i = 0; i < kh; ++i)
            for (int j = 0; j < kw; ++j) {
                const P v = *reinterpret_cast<const P*>(base + ((long long)i * W + j) * C);
#pragma unroll
                for (int e = 0; e < V; ++e) acc[e] += A(v.v[e]);
            }
        P o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.v[e] = T(acc[e] * scale);
        reinterpret_cast<P*>(y)[t] = o;
    }
}

// dx[n, h, w, c] = sum of dy over the windows that hold (h, w), / (kh*kw).
template <typename T, int V>
__global__ void avg_pool2d_bwd(const T* __restrict__ dy, T* __restrict__ dx, int N, int H, int W,
                               int C, int Ho, int Wo, int kh, int kw, int sh, int sw) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int CV = C / V;
    const A scale = A(1) / A(kh * kw);
    const long long total = (long long)N * H * W * CV;
    for (long long t = global_id(); t < total; t += global_threads()) {
        const int cv = (int)(t % CV);
        long long p = t / CV;
        const int w = (int)(p % W);
        p /= W;
        const int h = (int)(p % H), n = (int)(p / H);
        int hlo, hhi, wlo, whi;
        windows_over(h, kh, sh, Ho, hlo, hhi);
        windows_over(w, kw, sw, Wo, wlo, whi);
        A acc[V];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = A(0);
        for (int ho = hlo; ho <= hhi; ++ho)
            for (int wo = wlo; wo <= whi; ++wo) {
                const P g = reinterpret_cast<const P*>(dy)[(((long long)n * Ho + ho) * Wo + wo) * CV + cv];
#pragma unroll
                for (int e = 0; e < V; ++e) acc[e] += A(g.v[e]);
            }
        P o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.v[e] = T(acc[e] * scale);
        reinterpret_cast<P*>(dx)[t] = o;
    }
}

// ===== cross-entropy =====
// Softmax cross-entropy with label smoothing eps over K classes, targets q = eps/K + (1 - eps)[k == y]:
//   loss_r = lse_r - (1 - eps) x[r, y_r] - (eps / K) sum_k x[r, k],   lse_r = log sum_k exp x[r, k]
//   dx[r, k] = (exp(x[r, k] - lse_r) - q[r, k]) * g[r * gstride] * scale
// A group of `lanes` threads (a power of two <= 32) owns a row; the rows of one warp advance
// together so every lane reaches the shuffles. A target outside [0, K) gives a NaN loss.
// (m, s) = (running max, sum of exp(x - m)); an empty side has m = -inf and s = 0.
template <typename A>
__device__ __forceinline__ void merge_lse(A& m, A& s, A om, A os) {
    const A nm = m > om ? m : om;
    const A ninf = neg_inf<A>();
    s = (m == ninf ? A(0) : s * exp_(m - nm)) + (om == ninf ? A(0) : os * exp_(om - nm));
    m = nm;
}

template <typename T, typename I, int V>
__global__ void cross_entropy_fwd(const T* __restrict__ x, const I* __restrict__ target,
                                  acc_t<T>* __restrict__ loss,
                                  acc_t<T>* __restrict__ lse, int N, int K,
                                  acc_t<T> eps, int lanes) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int lane = threadIdx.x & (lanes - 1);
    const long long warp_row0 = (global_id() & ~31LL) / lanes;
    const long long row_step = global_threads() / lanes;
    const int KV = K / V;
    for (long long r0 = warp_row0; r0 < N; r0 += row_step) {
        const long long row = r0 + (threadIdx.x & 31) / lanes;
        const bool valid = row < N;
        const long long y = valid ? (long long)target[row] : -1;
        A m = neg_inf<A>(), s = A(0), sx = A(0), xy = A(0), found = A(0);
        for (int pv = lane; valid && pv < KV; pv += lanes) {
            const P v = reinterpret_cast<const P*>(x + row * K)[pv];
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const A a = A(v.v[e]);
                if (a > m) { s = s * exp_(m - a) + A(1); m = a; }
                else s += exp_(a - m);
                sx += a;
                if (pv * V + e == y) { xy = a; found = A(1); }
            }
        }
        for (int off = lanes / 2; off > 0; off >>= 1) {
            const A om = __shfl_xor_sync(0xffffffffu, m, off, lanes);
            const A os = __shfl_xor_sync(0xffffffffu, s, off, lanes);
            merge_lse(m, s, om, os);
            sx += __shfl_xor_sync(0xffffffffu, sx, off, lanes);
            xy += __shfl_xor_sync(0xffffffffu, xy, off, lanes);
            found += __shfl_xor_sync(0xffffffffu, found, off, lanes);
        }
        if (valid && lane == 0) {
            const A l = m + log_(s);
            lse[row] = l;
            loss[row] = found > A(0) ? l - (A(1) - eps) * xy - eps / A(K) * sx : quiet_nan<A>();
        }
    }
}

template <typename T, typename I, int V>
__global__ void cross_entropy_bwd(const T* __restrict__ x, const I* __restrict__ target,
                                  const acc_t<T>* __restrict__ lse,
                                  const acc_t<T>* __restrict__ g, long long gstride,
                                  acc_t<T> scale, T* __restrict__ dx, int N, int K,
                                  acc_t<T> eps, int lanes) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int lane = threadIdx.x & (lanes - 1);
    const long long row_step = global_threads() / lanes;
    const int KV = K / V;
    const A off = eps / A(K), on = A(1) - eps + eps / A(K);
    for (long long row = global_id() / lanes; row < N; row += row_step) {
        const long long y = (long long)target[row];
        const A l = lse[row], gs = g[row * gstride] * scale;
        for (int pv = lane; pv < KV; pv += lanes) {
            P v = reinterpret_cast<const P*>(x + row * K)[pv];
#pragma unroll
            for (int e = 0; e < V; ++e)
                v.v[e] = T((exp_(A(v.v[e]) - l) - (pv * V + e == y ? on : off)) * gs);
            reinterpret_cast<P*>(dx + row * K)[pv] = v;
        }
    }
}

// ===== optimizers =====
// One SGD step in place, PyTorch's rule: d = g + wd p; with momentum, buf = d on the first step, else
// momentum buf + (1 - dampening) d, and d = d + momentum buf (Nesterov) or buf; then p -= lr d.
template <typename T>
__global__ void sgd_step(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, long long n, double lr,
                         double weight_decay, double momentum, double dampening, int nesterov, int first)
{
    using A = acc_t<T>;
    for (long long i = global_id(); i < n; i += global_threads()) {
        A d = A(g[i]) + A(weight_decay) * A(p[i]);
        if (momentum != 0) {
            const A b = first ? d : A(momentum) * A(buf[i]) + A(1 - dampening) * d;
            buf[i] = T(b);
            d = nesterov ? d + A(momentum) * b : b;
        }
        p[i] = T(A(p[i]) - A(lr) * d);
    }
}
