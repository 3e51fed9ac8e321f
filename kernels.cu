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

template <typename P> struct Two { P a, b; };   // two loads carried together

__device__ __forceinline__ bool aligned16(const void* p)
{
    return (reinterpret_cast<unsigned long long>(p) & 15) == 0;
}

__device__ __forceinline__ float fma_acc(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fma_acc(double a, double b, double c) { return fma(a, b, c); }
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
__device__ __forceinline__ float fast_exp(float x) { return __expf(x); }   // a few ulp: for sums of exponentials
__device__ __forceinline__ double fast_exp(double x) { return exp(x); }
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

// Flat index t of an (N, H, W, CV) array as its (n, h, w, cv): the NHWC kernels' thread-to-pixel map,
// in 32-bit arithmetic where t fits (each 64-bit division costs several 32-bit ones).
struct Pixel { int n, h, w, cv; };
__device__ __forceinline__ Pixel pixel_of(long long t, int H, int W, int CV)
{
    Pixel q;
    if (t <= 0xffffffffLL) {
        unsigned p = (unsigned)t;
        q.cv = (int)(p % CV);
        p /= CV;
        q.w = (int)(p % W);
        p /= W;
        q.h = (int)(p % H);
        q.n = (int)(p / H);
        return q;
    }
    q.cv = (int)(t % CV);
    long long p = t / CV;
    q.w = (int)(p % W);
    p /= W;
    q.h = (int)(p % H);
    q.n = (int)(p / H);
    return q;
}

// Pixel (n, ho, wo) of an (N, Ho, Wo) grid, from flat index p, moved `step` pixels on at a time by additions (a
// division per step would cost more than the step's other work): im2col's rows, conv_direct_dw's pixels.
struct PixelWalk {
    int n, ho, wo, dn, dho, dwo;
    PixelWalk() = default;
    __device__ __forceinline__ PixelWalk(long long p, int step, int Ho, int Wo)
    {
        const Pixel q = pixel_of(p, Ho, Wo, 1);
        n = q.n, ho = q.h, wo = q.w;
        dwo = step % Wo, dho = step / Wo % Ho, dn = step / (Wo * Ho);
    }
    __device__ __forceinline__ void advance(int Ho, int Wo)
    {
        wo += dwo;
        if (wo >= Wo) { wo -= Wo; ++ho; }
        ho += dho;
        if (ho >= Ho) { ho -= Ho; ++n; }
        n += dn;
    }
};

// store(i, load(i)) for i = global_id(), + global_threads(), ... < count, in rounds of U: a round issues its
// U loads before its first store, so a thread keeps U loads in flight (one is too few to reach the copy rate).
template <int U, typename L, typename S>
__device__ __forceinline__ void grid_stride_rounds(long long count, L load, S store)
{
    const long long stride = global_threads();
    long long i = global_id();
    for (; i + (U - 1) * stride < count; i += U * stride) {
        decltype(load(i)) v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = load(i + u * stride);
#pragma unroll
        for (int u = 0; u < U; ++u) store(i + u * stride, v[u]);
    }
    for (; i < count; i += stride) store(i, load(i));
}

// ----- Tensor cores and asynchronous copies (sm_80 and later), for the GRU's and the implicit-GEMM conv's
// warp tiles. mma m16n8k16 (D = A B + C, A 16x16, B 16x8), lane = 4 g + t: A's register r holds
// A[g + 8 (r & 1)][2 t + 8 (r >> 1) + {0, 1}], B's register r B[2 t + 8 r + {0, 1}][g], C's c C[g + 8 (c >> 1)][2 t + (c & 1)].
__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(dst)), "l"(src) : "memory");
}
// 16 bytes from src, or zeros where !ok (src is not read then)
__device__ __forceinline__ void cp_async16_or_zero(void* dst, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING> __device__ __forceinline__ void cp_async_wait_groups() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Four 8x8 matrices of 16-bit values from shared memory, lanes 8 i .. 8 i + 7 giving matrix i's row addresses;
// lane 4 g + t receives r[i] = (M_i[g][2 t], M_i[g][2 t + 1]), or with TRANS (M_i[2 t][g], M_i[2 t + 1][g]).
template <bool TRANS> __device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(shared_address(row)));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(shared_address(row)));
}

// Two such matrices (lanes 0-15 give the row addresses; the others' are not read).
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(shared_address(row)));
}

__device__ __forceinline__ unsigned tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ----- Hopper's warpgroup products (wgmma, sm_90a), for the implicit-GEMM conv and the GRU's k-split kernels. The
// loader builds the kernels that use them in modules of their own with NVRTC's -arch=sm_90a -DTL_SM90A on devices of
// compute capability 9.0 (with TL_SM90A, a compiler that drops sm_90a's features fails the build, and the loader falls
// back; not for nvcc, whose generic preprocessing pass lacks the feature macro); compiled for anything else (as CI's
// sm_90 check does) their bodies trap. A warpgroup (4 warps) multiplies a 64-row tile of A by an N-column tile of B,
// both read from shared memory through descriptors, asynchronously: d (64 x N in the mma.m16n8 C layout repeated
// over N: warp w, lane 4 g + t holds d[4 i + 2 h + e] = D[16 w + g + 8 h][8 i + 2 t + e]) += A B of one k-step of
// 16 values (8 in TF32). Tiles are 1024-byte aligned, in the 128-byte swizzle (16-byte granule c of a 128-byte row
// r at c ^ (r % 8)); descriptor: start address, LBO, SBO = 1024 (8 rows), swizzle mode 1 (bits 62-63). K-major tiles
// (rows of A and B along k; the only layout TF32 has): LBO unused, a k-step starts 32 bytes further into the rows.
// MN-major tiles (float16 only; the rows run along m or n, 64 values each): LBO steps between 64-column blocks of
// rows, a k-step starts 16 rows (2048 bytes) further down.
#if defined(TL_SM90A) && defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "built for the wgmma kernels (TL_SM90A) without sm_90a's features: they would trap"
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace hopper {

// a wgmma operand's shared memory descriptor: by default K-major k-tiles of 128 bytes a row in the 128-byte swizzle
// (8-row groups 1024 bytes apart); swizzle false: core matrices of 8 rows x 16 bytes, lbo bytes apart along k and sbo
// along the rows
__device__ __forceinline__ unsigned long long operand(unsigned address, unsigned lbo = 16, unsigned sbo = 1024,
                                                      bool swizzle = true) {
    return ((address & 0x3FFFF) >> 4) | (unsigned long long)(lbo >> 4) << 16 | (unsigned long long)(sbo >> 4) << 32 |
           (unsigned long long)swizzle << 62;
}

#define TL_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define TL_D16(i) TL_D4(i), TL_D4(i + 4), TL_D4(i + 8), TL_D4(i + 12)
#define TL_R8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define TL_R12 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}"
#define TL_R16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define TL_R20 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
               " %16, %17, %18, %19}"
#define TL_R24 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
               " %16, %17, %18, %19, %20, %21, %22, %23}"
#define TL_R32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
               " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define TL_R64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
               " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
               " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
               " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define TL_WGMMA(INSTR, REGS, A, B, SCALE, TAIL, ...)                                                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\n" INSTR " " REGS ", " A ", " B ", p, 1, 1" TAIL ";\n}\n" \
                 : __VA_ARGS__ : "l"(a), "l"(b), "r"(int(accumulate)), "n"(MN) : "memory")

// d (+)= A B of one k-step: accumulate false overwrites d (the first step: d needs no zeros, whose writes would
// make ptxas serialize the asynchronous products). MN: both tiles MN-major (float16 only)
template <typename T, int N, int MN = 0> struct Wgmma;
// f16 (K-major, or MN-major both): N columns, N / 2 registers; TRANS: the MN operand's number, for both tiles
#define TL_WGMMA_F16(N, REGS, A, B, SCALE, TRANS, ...)                                                                \
    template <int MN> struct Wgmma<__half, N, MN> {                                                                    \
        __device__ static void mma(float (&d)[N / 2], unsigned long long a, unsigned long long b, bool accumulate) {   \
            TL_WGMMA("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16", REGS, A, B, SCALE,                      \
                     ", " TRANS ", " TRANS, __VA_ARGS__);                                                              \
        }                                                                                                              \
    };
TL_WGMMA_F16(16, TL_R8, "%8", "%9", "%10", "%11", TL_D4(0), TL_D4(4))
TL_WGMMA_F16(24, TL_R12, "%12", "%13", "%14", "%15", TL_D4(0), TL_D4(4), TL_D4(8))
TL_WGMMA_F16(32, TL_R16, "%16", "%17", "%18", "%19", TL_D16(0))
TL_WGMMA_F16(40, TL_R20, "%20", "%21", "%22", "%23", TL_D16(0), TL_D4(16))
TL_WGMMA_F16(48, TL_R24, "%24", "%25", "%26", "%27", TL_D16(0), TL_D4(16), TL_D4(20))
TL_WGMMA_F16(64, TL_R32, "%32", "%33", "%34", "%35", TL_D16(0), TL_D16(16))
TL_WGMMA_F16(128, TL_R64, "%64", "%65", "%66", "%67", TL_D16(0), TL_D16(16), TL_D16(32), TL_D16(48))
#undef TL_WGMMA_F16
// TF32 (K-major tiles only): the low 13 bits of each float are ignored (truncation). N columns, N / 2 registers
#define TL_WGMMA_TF32(N, REGS, A, B, SCALE, ...)                                                                      \
    template <int MN> struct Wgmma<float, N, MN> {                                                                     \
        static_assert(!MN, "TF32 tiles are K-major");                                                                 \
        __device__ static void mma(float (&d)[N / 2], unsigned long long a, unsigned long long b, bool accumulate) {   \
            TL_WGMMA("wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32", REGS, A, B, SCALE, "", __VA_ARGS__);   \
        }                                                                                                              \
    };
TL_WGMMA_TF32(16, TL_R8, "%8", "%9", "%10", TL_D4(0), TL_D4(4))
TL_WGMMA_TF32(32, TL_R16, "%16", "%17", "%18", TL_D16(0))
TL_WGMMA_TF32(64, TL_R32, "%32", "%33", "%34", TL_D16(0), TL_D16(16))
TL_WGMMA_TF32(128, TL_R64, "%64", "%65", "%66", TL_D16(0), TL_D16(16), TL_D16(32), TL_D16(48))
#undef TL_WGMMA_TF32
#undef TL_WGMMA
#undef TL_R64
#undef TL_R32
#undef TL_R24
#undef TL_R20
#undef TL_R16
#undef TL_R12
#undef TL_R8
#undef TL_D16
#undef TL_D4

// mbarriers in shared memory (8 bytes each): a phase completes after `count` arrivals; waits name its parity
__device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned bar) {
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {   // until the phase of that parity completed
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
__device__ __forceinline__ void bar_expect_bytes(unsigned bar, unsigned bytes) {   // the producer's arrival
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// `bytes` (a multiple of 16) of this block's shared memory at `address` into the same address of block `rank` of the
// cluster, counted on that block's mbarrier at bar (an address in this block's terms too)
__device__ __forceinline__ void bulk_to_block(unsigned address, unsigned bytes, unsigned bar, unsigned rank) {
    asm volatile("{\n.reg .b32 d, b;\nmapa.shared::cluster.u32 d, %0, %3;\nmapa.shared::cluster.u32 b, %2, %3;\n"
                 "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [d], [%0], %1, [b];\n}\n"
                 ::"r"(address), "r"(bytes), "r"(bar), "r"(rank) : "memory");
}

}  // namespace hopper
#endif

// Thread-block clusters (sm_90): every thread of the cluster's blocks meets here, the blocks' writes to one
// another's shared memory (and to global memory) before it visible to all after it; during() runs between the
// arrival and the wait (the next step's loads, in flight while the block waits).
template <typename During>
__device__ __forceinline__ void cluster_sync(During during) {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    during();
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
    cluster_sync([] {});
}

// The address of *p (this block's shared memory) in the shared memory of the cluster's block `rank`.
template <typename T>
__device__ __forceinline__ T* in_block(T* p, unsigned rank) {
    unsigned long long q;
    asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(q) : "l"(p), "r"(rank));
    return reinterpret_cast<T*>(q);
}

// ===== Matrix products =====

// c = a b for small products (_gemm's of k <= _GEMM_SMALL_K in at most _GEMM_SMALL_BLOCKS blocks), where cuBLAS's
// own host time per call is most of the product's time. A block takes a 32 x 32 tile of c, its 8 warps splitting k:
// warp w multiplies the k-steps of KS columns w, w + 8, ... (the next step's loads in flight while it multiplies
// one), each lane a 4 x 8 piece of the tile; then the warps' sums are added in a fixed order, a tree through shared
// memory (the same bits every run). gemm_split: a cluster of CL blocks takes the tile, block r the steps r 8 + w,
// r 8 + w + 8 CL, ...; the blocks' sums are then added in rank order, each block adding and writing 1 / CL of the
// tile. a's element (i, p) is at a[i sa_i + p sa_p] (either layout, or a view), b's (p, j) at b[p sb_p + j sb_j];
// matrix z of a stack (grid z) at z sa_z and z sb_z; c packed (m, n) matrices. T: __half or float (float arithmetic).
template <typename T, typename C, int CL>
__device__ __forceinline__ void gemm_tile(const T* __restrict__ a, const T* __restrict__ b, C* __restrict__ c, int m,
                                          int n, int k, long long sa_i, long long sa_p, long long sa_z, long long sb_p,
                                          long long sb_j, long long sb_z) {
    using A = acc_t<T>;
    constexpr int KS = 16, LD = 36, STAGE = 2 * KS * LD;   // a warp's step: a's [p][i], then b's [p][j]
    __shared__ A smem[8 * STAGE];   // the warps' steps, then their sums (4 tiles of 32 x 32)
    static_assert(8 * STAGE >= 4 * 1024, "the sums fit where the steps were");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ty = lane >> 2, tx = lane & 3;   // rows 4 ty + r,
    const int rank = blockIdx.x % CL, i0 = 32 * blockIdx.y, j0 = 32 * (blockIdx.x / CL);         // columns 8 tx + s
    a += blockIdx.z * sa_z;
    b += blockIdx.z * sb_z;
    c += static_cast<long long>(blockIdx.z) * m * n;
    A* const as = smem + warp * STAGE;
    A* const bs = as + KS * LD;
    // a step's copies (v = 0 .. 15 a lane), consecutive lanes along an operand's contiguous axis: a's (row, k) is
    // (lane / 16 + 2 v, lane % 16) along k (16 lanes a row) or (lane, v) along the rows; b's (column, k) likewise
    const bool a_along_k = sa_p == 1, b_along_k = sb_j != 1;
    const int ai = a_along_k ? lane / 16 : lane, ap = a_along_k ? lane % 16 : 0, bj = b_along_k ? lane / 16 : lane,
              bq = b_along_k ? lane % 16 : 0;
    T ra[KS], rb[KS];   // a step's values, loaded while the warp multiplies the step before
    const auto load = [&](int p0) {
#pragma unroll
        for (int v = 0; v < KS; ++v) {
            const int i = a_along_k ? ai + 2 * v : ai, p = a_along_k ? ap : v;
            const int j = b_along_k ? bj + 2 * v : bj, q = b_along_k ? bq : v;
            ra[v] = i0 + i < m && p0 + p < k ? a[(i0 + i) * sa_i + (p0 + p) * sa_p] : T(0.0f);
            rb[v] = p0 + q < k && j0 + j < n ? b[(p0 + q) * sb_p + (j0 + j) * sb_j] : T(0.0f);
        }
    };
    A sum[4][8] = {};
    load((rank * 8 + warp) * KS);
    for (int p0 = (rank * 8 + warp) * KS; p0 < k; p0 += CL * 8 * KS) {
#pragma unroll
        for (int v = 0; v < KS; ++v) {
            as[(a_along_k ? ap : v) * LD + (a_along_k ? ai + 2 * v : ai)] = static_cast<A>(ra[v]);
            bs[(b_along_k ? bq : v) * LD + (b_along_k ? bj + 2 * v : bj)] = static_cast<A>(rb[v]);
        }
        __syncwarp();
        if (p0 + CL * 8 * KS < k) load(p0 + CL * 8 * KS);
#pragma unroll
        for (int p = 0; p < KS; ++p) {
            A av[4], bv[8];
#pragma unroll
            for (int r = 0; r < 4; ++r) av[r] = as[p * LD + 4 * ty + r];
#pragma unroll
            for (int s = 0; s < 8; ++s) bv[s] = bs[p * LD + 8 * tx + s];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int s = 0; s < 8; ++s) sum[r][s] = fma_acc(av[r], bv[s], sum[r][s]);
        }
        __syncwarp();
    }
    for (int half = 4; half > 0; half /= 2) {   // warps [half, 2 half) hand their sums to warps [0, half)
        __syncthreads();
        A* const red = smem + (warp % half) * 1024 + 4 * ty * 32 + 8 * tx;
        if (warp >= half && warp < 2 * half)
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int s = 0; s < 8; ++s) red[r * 32 + s] = sum[r][s];
        __syncthreads();
        if (warp < half)
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int s = 0; s < 8; ++s) sum[r][s] += red[r * 32 + s];
    }
    if constexpr (CL == 1) {
        if (warp == 0)
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int s = 0; s < 8; ++s) {
                    const int i = i0 + 4 * ty + r, j = j0 + 8 * tx + s;
                    if (i < m && j < n) c[static_cast<long long>(i) * n + j] = static_cast<C>(sum[r][s]);
                }
    } else {
        if (warp == 0)   // the block's sums as the tile (row-major) at smem (warp 0 read its last addend there)
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int s = 0; s < 8; ++s) smem[(4 * ty + r) * 32 + 8 * tx + s] = sum[r][s];
        cluster_sync();
        for (int e = rank * (1024 / CL) + threadIdx.x; e < (rank + 1) * (1024 / CL); e += blockDim.x) {
            A total = A(0);
#pragma unroll
            for (int q = 0; q < CL; ++q) total += *in_block(smem + e, q);
            const int i = i0 + e / 32, j = j0 + e % 32;
            if (i < m && j < n) c[static_cast<long long>(i) * n + j] = static_cast<C>(total);
        }
        cluster_sync();   // no block leaves while another reads its shared memory
    }
}

template <typename T, typename C>
__global__ void __launch_bounds__(256, 1) gemm_small(const T* __restrict__ a, const T* __restrict__ b,
                                                     C* __restrict__ c, int m, int n, int k, long long sa_i,
                                                     long long sa_p, long long sa_z, long long sb_p, long long sb_j,
                                                     long long sb_z) {
    gemm_tile<T, C, 1>(a, b, c, m, n, k, sa_i, sa_p, sa_z, sb_p, sb_j, sb_z);
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900   // (clusters: as gru_fwd_cluster)
template <typename T, typename C, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(256, 1)
gemm_split(const T* __restrict__ a, const T* __restrict__ b, C* __restrict__ c, int m, int n, int k, long long sa_i,
           long long sa_p, long long sa_z, long long sb_p, long long sb_j, long long sb_z) {
    gemm_tile<T, C, CL>(a, b, c, m, n, k, sa_i, sa_p, sa_z, sb_p, sb_j, sb_z);
}
#endif

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

// y = max(x, 0) keeping NaN. 16-byte packs, 4 in flight per thread, when both pointers allow; then a scalar tail.
template <typename T>
__global__ void relu_fwd(const T* __restrict__ x, T* __restrict__ y, long long n)
{
    constexpr int V = 16 / sizeof(T);
    long long done = 0;
    if (aligned16(x) && aligned16(y)) {
        grid_stride_rounds<4>(n / V, [&](long long p) { return load_pack<V>(x + p * V); },
                              [&](long long p, Pack<T, V> v) {
#pragma unroll
                                  for (int k = 0; k < V; ++k) v.v[k] = relu_of(v.v[k]);
                                  store_pack<V>(y + p * V, v);
                              });
        done = n / V * V;
    }
    for (long long e = done + global_id(); e < n; e += global_threads()) y[e] = relu_of(x[e]);
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

// y = gelu(x) over n elements: V-wide packs, 4 in flight per thread, then the scalar tail.
template <typename T, int V, int TANH>
__global__ void gelu_fwd(const T* __restrict__ x, T* __restrict__ y, long long n) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const long long nv = n / V;
    grid_stride_rounds<4>(nv, [&](long long t) { return reinterpret_cast<const P*>(x)[t]; }, [&](long long t, P a) {
#pragma unroll
        for (int e = 0; e < V; ++e) a.v[e] = T(gelu_val<A, TANH>(A(a.v[e])));
        reinterpret_cast<P*>(y)[t] = a;
    });
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
// The activation a fused BatchNorm applies to its output: act_fwd(z), and g * act'(z). ReLU's derivative
// as PyTorch's threshold_backward: z <= 0 selects 0, so a NaN gradient at an inactive unit becomes 0.
enum { ACT_NONE = 0, ACT_RELU = 1, ACT_GELU = 2 };

template <int ACT, typename A>
__device__ __forceinline__ A act_fwd(A z)
{
    if (ACT == ACT_RELU) return relu_of(z);
    if (ACT == ACT_GELU) return gelu_val<A, 0>(z);
    return z;
}

template <int ACT, typename A>
__device__ __forceinline__ A act_grad(A z, A g)
{
    if (ACT == ACT_RELU) return relu_grad_of(z, g);
    if (ACT == ACT_GELU) return g * gelu_grad<A, 0>(z);
    return g;
}

// x is read as (N, C, S): S = H*W for 2d, L for (N, C, L), 1 for (N, C). Every kernel runs
// groups x chunks blocks (blockIdx = group * chunks + chunk, or see bn_block):
// - segment mode (cpg == 0, for S >= 32): a group is one channel; its N*S elements (N segments of
//   S contiguous ones, in 16-byte packs when S and the pointers allow) are cut into `chunks`
//   equal, contiguous ranges, one per block.
// - column mode (cpg > 0, for S < 32): x is the (N, C*S) matrix, a group is cpg = 32 / S whole
//   channels, i.e. cpg*S adjacent columns, one per lane, so every row read is contiguous; the N
//   rows are cut into `chunks`, and the 8 warps of a block take every 8th row of its range.
// - rows mode (cpg < 0, for S == 1 with C a multiple of the 16-byte pack): a group is a tile of up to
//   8 packs of channels, its N rows cut into `chunks`, each thread reading 16-byte packs of one fixed
//   set of channels (see Rows below).
// The host picks chunks so that one wave of blocks fills every SM (two blocks per SM in rows mode),
// except for the elementwise kernels (apply, dx) in segment mode: one round of 4 units per thread (dx
// in `split` parts of each chunk of the backward reduction, in the order of bn_block below).
// The reductions write one partial per block (per lane in column mode, per channel in rows mode);
// the last block of a group to finish, counted in ticket[group], folds the group's partials in
// double and finalizes its channels.

// This block's (group, chunk). With split > 1 (dx, after the backward reduction's chunks / split chunks
// per group over the same x and dy), each of the reduction's chunks is cut in `split` parts, and the
// blocks run the last parts first: what the reduction read last, from its chunks' ends, is still in L2
// (dx walks each part from its end too).
__device__ __forceinline__ int2 bn_block(int chunks, int split)
{
    const int coarse = chunks / split, per_part = gridDim.x / split, part = split - 1 - blockIdx.x / per_part;
    const int rest = blockIdx.x % per_part;
    return make_int2(rest / coarse, rest % coarse * split + part);
}

// Calls use(e, load(e)) for each unit of W elements (W divides S) of channel c in chunk k, e = offset
// of the unit's first element, stepping blockDim.x units at a time; REV walks the chunk from its end.
// Rounds of U units issue their U loads before the first use, so that each thread keeps U in flight.
template <int W, bool REV, int U = 4, typename L, typename F>
__device__ __forceinline__ void for_units(int N, int C, long long S, int c, int k, int chunks, L load, F use)
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
    auto next = [&]() {   // this unit's offset, then on to the next one
        const long long e = (long long)n * row + (long long)c * S + s * W;
        if (REV) {
            n -= dn; s -= ds;
            if (s < 0) { s += spv; --n; }
        } else {
            n += dn; s += ds;
            if (s >= spv) { s -= spv; ++n; }
        }
        return e;
    };
    int i = 0;
    for (; i + U <= count; i += U) {
        long long e[U];
        decltype(load(0LL)) v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) e[u] = next();
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = load(e[u]);
#pragma unroll
        for (int u = 0; u < U; ++u) use(e[u], v[u]);
    }
    for (; i < count; ++i) {
        const long long e = next();
        use(e, load(e));
    }
}

// Segment mode runs in 16-byte packs where S and the pointers allow, else element by element:
// body(Width<V>()) or body(Width<1>()), body a generic lambda reading the width as decltype(w)::value.
template <int N> struct Width { static constexpr int value = N; };

template <int V, typename F>
__device__ __forceinline__ void by_width(bool packs, F body)
{
    if (packs) body(Width<V>());
    else body(Width<1>());
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

// After each block of a group has stored (and fenced) its partials: counts this block in *ticket and
// returns true in the group's last block to arrive, once every partial of the group is visible to it;
// that block also re-arms *ticket for the next call.
__device__ __forceinline__ bool last_to_finish(int* ticket, int chunks)
{
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1) == chunks - 1;
    __syncthreads();
    if (!last) return false;
    __threadfence();
    if (threadIdx.x == 0) *ticket = 0;
    return true;
}

// Reduces (s1, s2) over the block, stores the block's partial (32 per block in column mode, one
// per lane) and counts the block in ticket[g]. Returns true in the group's last block, after which
// every partial of the group is visible to it; that block also re-arms ticket[g] for the next call.
template <typename A>
__device__ __forceinline__ bool publish(A s1, A s2, A* part, int* ticket, int g, int k, int chunks, int cpg)
{
    block_sum2(s1, s2, cpg > 0);
    if (threadIdx.x < 32) {
        const long long slot = cpg ? ((long long)g * chunks + k) * 32 + threadIdx.x : (long long)g * chunks + k;
        if (cpg || threadIdx.x == 0) {
            part[2 * slot] = s1;
            part[2 * slot + 1] = s2;
        }
        __threadfence();
    }
    return last_to_finish(ticket + g, chunks);
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

// Rows mode (cpg < 0), for S == 1 (channels-last activations, BatchNorm1d) with C a multiple of
// V = 16 / sizeof(T) and 16-byte aligned arrays: x is the (N, C) matrix read in 16-byte packs of V
// channels, P = C / V packs a row. Group g is the tile of pack columns [g Pt, g Pt + Pt), Pt = min(P, 8);
// thread t of a block owns pack column q = g Pt + t % Pt and every R-th row (R = blockDim / Pt) of
// the block's chunk of rows, from row t / Pt on, so its V channels never change: their constants and
// sums stay in registers. Threads past R Pt, or past the last column, idle. Tiles keep each group's
// partials (Pt V channels x chunks) few enough for its last block to fold quickly.
struct Rows {
    int q, r, R, n0, n1;
    bool active;
};

__device__ __forceinline__ int rows_tile(int C, int V) { return min(C / V, 8); }

__device__ __forceinline__ Rows rows_of(int N, int C, int V, int g, int k, int chunks)
{
    Rows L;
    const int Pt = rows_tile(C, V), q = g * Pt + threadIdx.x % Pt;
    L.R = blockDim.x / Pt;
    L.r = threadIdx.x / Pt;
    L.active = L.r < L.R && q < C / V;
    L.q = L.active ? q : g * Pt;   // idle threads keep a valid column for their (unused) constants
    L.n0 = int((long long)N * k / chunks);
    L.n1 = L.active ? int((long long)N * (k + 1) / chunks) : L.n0;
    return L;
}

// Calls use(e, load(e)) for the offset e of this thread's pack in each of its rows, REV from the
// chunk's end, in rounds of 4 rows whose loads are all issued before the first use: a thread keeps 4
// loads in flight, as few resident threads need to (the compiler does not hoist loads past the stores
// and arithmetic of a lambda).
template <bool REV, typename L, typename F>
__device__ __forceinline__ void for_row_packs(const Rows& rows, int C, int V, L load, F use)
{
    constexpr int U = 4;
    const int count = rows.n1 - rows.n0 > rows.r ? (rows.n1 - rows.n0 - rows.r + rows.R - 1) / rows.R : 0;
    auto at = [&](int i) {
        return (long long)(REV ? rows.n1 - 1 - rows.r - i * rows.R : rows.n0 + rows.r + i * rows.R) * C + (long long)rows.q * V;
    };
    int i = 0;
    for (; i + U <= count; i += U) {
        decltype(load(0LL)) v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = load(at(i + u));
#pragma unroll
        for (int u = 0; u < U; ++u) use(at(i + u), v[u]);
    }
    for (; i < count; ++i) use(at(i), load(at(i)));
}

// Rows mode's publish + group_totals: sums each thread's V pairs over the block's threads of the same
// pack column, stores the block's pair per channel of tile g at part[2 ((g chunks + k) Ct + j)]
// (Ct = Pt V, j the channel in the tile), and in the tile's last block to finish (counted in
// ticket[g], re-armed there) folds the tile's chunks in double and calls f(c, t1, t2) per channel.
template <typename A, int V, typename F>
__device__ __forceinline__ void rows_publish(const A (&s1)[V], const A (&s2)[V], const Rows& L, A* part, int* ticket,
                                             int g, int k, int chunks, int C, F f)
{
    __shared__ A red[2][256 * V];   // the host launches 256-thread blocks
    __shared__ double tot[2][256];
    const int t = threadIdx.x, Pt = rows_tile(C, V), Ct = Pt * V, c0 = g * Ct, Cg = min(Ct, C - c0);
#pragma unroll
    for (int u = 0; u < V; ++u) {
        red[0][t * V + u] = s1[u];
        red[1][t * V + u] = s2[u];
    }
    __syncthreads();
    A* mine = part + 2 * ((long long)g * chunks + k) * Ct;
    if (t < Cg) {
        A a = 0, b = 0;
        for (int r = 0; r < L.R; ++r) {
            a += red[0][(r * Pt + t / V) * V + t % V];
            b += red[1][(r * Pt + t / V) * V + t % V];
        }
        mine[2 * t] = a;
        mine[2 * t + 1] = b;
        __threadfence();
    }
    if (!last_to_finish(ticket + g, chunks)) return;
    // subs threads per channel (Cg <= 64 <= blockDim / 4), each summing every subs-th chunk, 8 loads at a time
    const int subs = blockDim.x / Cg, j = t % Cg, sub = t / Cg;
    const A* tile = part + 2 * (long long)g * chunks * Ct;
    double a = 0, b = 0;
    if (sub < subs)
        for (int k0 = sub; k0 < chunks; k0 += 8 * subs) {
            A pa[8], pb[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int kk = k0 + i * subs;
                pa[i] = kk < chunks ? __ldcg(tile + 2 * ((long long)kk * Ct + j)) : A(0);
                pb[i] = kk < chunks ? __ldcg(tile + 2 * ((long long)kk * Ct + j) + 1) : A(0);
            }
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                a += double(pa[i]);
                b += double(pb[i]);
            }
        }
    tot[0][t] = a;
    tot[1][t] = b;
    __syncthreads();
    if (t < Cg) {
        for (int s = 1; s < subs; ++s) {
            a += tot[0][s * Cg + t];
            b += tot[1][s * Cg + t];
        }
        f(c0 + t, a, b);
    }
}

// The batch's mean and biased variance of a channel from the sums t1, t2 of v = x - K and v*v over its M elements.
__device__ __forceinline__ double2 shifted_moments(double t1, double t2, double K, double M)
{
    const double d = t1 / M;
    return make_double2(K + d, fmax(t2 / M - d * d, 0.0));
}

// Folds a channel's batch mean and biased variance (mv, over M elements) into its running statistics, whose values
// were rm and rv: running_var takes the unbiased variance, as PyTorch's.
template <typename A>
__device__ __forceinline__ void update_running(A* running_mean, A* running_var, int c, A rm, A rv, double2 mv, double M,
                                               double momentum)
{
    running_mean[c] = A((1.0 - momentum) * double(rm) + momentum * mv.x);
    running_var[c] = A((1.0 - momentum) * double(rv) + momentum * mv.y * M / (M - 1.0));
}

// Training statistics. Each thread sums v = x - K and v*v, K = the channel's first element x[0, c, 0]
// (a shift that keeps a large mean from cancelling the variance in float); the finalizing block
// writes stats = [mean | invstd] (2 x C), invstd = 1/sqrt(var + eps) (biased var), and updates the running
// statistics (running_var with the unbiased var) when they are given.
template <typename T>
__global__ void bn_fwd_stats(const T* __restrict__ x, acc_t<T>* __restrict__ part, int* __restrict__ ticket,
                             acc_t<T>* __restrict__ stats, acc_t<T>* __restrict__ running_mean,
                             acc_t<T>* __restrict__ running_var, double momentum, double eps, int N, int C,
                             long long S, int chunks, int cpg, int split)
{
    typedef acc_t<T> A;
    constexpr int V = 16 / sizeof(T);
    A* const mean = stats;
    A* const invstd = stats + C;
    const int2 gk = bn_block(chunks, split);
    const int g = gk.x, k = gk.y, lane = threadIdx.x & 31;
    const long long W = (long long)C * S, j = (long long)g * cpg * S + lane;   // column mode
    const bool active = cpg == 0 || (cpg > 0 && lane < cpg * S && j < W);
    const A K = active ? A(x[(cpg ? j / S : g) * S]) : A(0);
    // segment mode finalizes channel g alone: its running statistics are loaded now, off the finishing block's path
    const bool prefetched = cpg == 0 && running_mean;
    const A rm = prefetched ? running_mean[g] : A(0), rv = prefetched ? running_var[g] : A(0);
    auto finalize = [&](int c, double t1, double t2) {
        const double M = double(N) * double(S);   // the shift is x[c * S], which K holds in segment mode
        const double2 mv = shifted_moments(t1, t2, cpg ? double(x[(long long)c * S]) : double(K), M);
        mean[c] = A(mv.x);
        invstd[c] = A(1.0 / sqrt(mv.y + eps));
        if (running_mean)
            update_running(running_mean, running_var, c, prefetched ? rm : running_mean[c],
                           prefetched ? rv : running_var[c], mv, M, momentum);
    };
    if (cpg < 0) {
        const Rows L = rows_of(N, C, V, g, k, chunks);
        const Pack<T, V> Ks = load_pack<V>(x + L.q * V);   // row 0
        A s1[V] = {}, s2[V] = {};
        for_row_packs<false>(L, C, V, [&](long long e) { return load_pack<V>(x + e); }, [&](long long, const Pack<T, V>& p) {
#pragma unroll
            for (int u = 0; u < V; ++u) {
                const A v = A(p.v[u]) - A(Ks.v[u]);
                s1[u] += v;
                s2[u] = fma_acc(v, v, s2[u]);
            }
        });
        rows_publish<A, V>(s1, s2, L, part, ticket, g, k, chunks, C, finalize);
        return;
    }
    A s1 = 0, s2 = 0;
    auto add = [&](A v) {
        v -= K;
        s1 += v;
        s2 = fma_acc(v, v, s2);
    };
    if (cpg) {
        if (active) for_rows<false>(N, W, j, k, chunks, [&](long long e) { add(A(x[e])); });
    } else {
        by_width<V>(S % V == 0 && aligned16(x), [&](auto w) {
            constexpr int U = decltype(w)::value;
            for_units<U, false, 8>(N, C, S, g, k, chunks, [&](long long e) { return load_pack<U>(x + e); },
                                [&](long long, const Pack<T, U>& p) {
#pragma unroll
                                    for (int u = 0; u < U; ++u) add(A(p.v[u]));
                                });
        });
    }
    if (!publish(s1, s2, part, ticket, g, k, chunks, cpg)) return;
    group_totals(part, g, chunks, cpg, S, C, finalize);
}

// y = act((x - mean) * invstd * w + b). Training (running_var null): mean and invstd from stats = [mean |
// invstd] (2 x C). Eval: mean and var are the running ones, invstd = 1/sqrt(var + eps), and the first chunk
// saves mean and invstd in stats for backward. w and b may be null (no affine).
template <typename T, int ACT>
__global__ void bn_fwd_apply(const T* __restrict__ x, T* __restrict__ y, acc_t<T>* __restrict__ stats,
                             const acc_t<T>* __restrict__ running_mean, const acc_t<T>* __restrict__ running_var,
                             const acc_t<T>* __restrict__ w, const acc_t<T>* __restrict__ b,
                             double eps, int N, int C, long long S, int chunks, int cpg, int split)
{
    typedef acc_t<T> A;
    constexpr int V = 16 / sizeof(T);
    const int2 gk = bn_block(chunks, split);
    const int g = gk.x, k = gk.y, lane = threadIdx.x & 31;
    const bool eval = running_var != nullptr;
    // the channel's constants; eval: the first chunk saves mean and invstd
    auto chan = [&](int c, bool saves) {
        const A inv = eval ? A(1.0 / sqrt(double(running_var[c]) + eps)) : stats[C + c];
        const Chan<A> ch = load_chan(eval ? running_mean : stats, inv, w, b, c);
        if (eval && k == 0 && saves) {
            stats[c] = ch.mean;
            stats[C + c] = inv;
        }
        return ch;
    };
    if (cpg < 0) {
        const Rows L = rows_of(N, C, V, g, k, chunks);
        Chan<A> ch[V];
#pragma unroll
        for (int u = 0; u < V; ++u) ch[u] = chan(L.q * V + u, L.active && L.r == 0);
        for_row_packs<true>(L, C, V, [&](long long e) { return load_pack<V>(x + e); }, [&](long long e, Pack<T, V> p) {
#pragma unroll
            for (int u = 0; u < V; ++u) p.v[u] = T(act_fwd<ACT>(ch[u].pre(A(p.v[u]) - ch[u].mean)));
            store_pack<V>(y + e, p);
        });
        return;
    }
    const long long W = (long long)C * S, j = (long long)g * cpg * S + lane;   // column mode
    if (cpg && (lane >= cpg * S || j >= W)) return;
    const Chan<A> ch = chan(cpg ? int(j / S) : g, cpg ? j % S == 0 : threadIdx.x == 0);
    auto f = [&](A v) { return act_fwd<ACT>(ch.pre(v - ch.mean)); };
    if (cpg) {
        for_rows<true>(N, W, j, k, chunks, [&](long long e) { y[e] = T(f(A(x[e]))); });
        return;
    }
    by_width<V>(S % V == 0 && aligned16(x) && aligned16(y), [&](auto w) {
        constexpr int U = decltype(w)::value;
        for_units<U, true>(N, C, S, g, k, chunks, [&](long long e) { return load_pack<U>(x + e); },
                           [&](long long e, Pack<T, U> p) {
#pragma unroll
                               for (int u = 0; u < U; ++u) p.v[u] = T(f(A(p.v[u])));
                               store_pack<U>(y + e, p);
                           });
    });
}

// Backward reductions, per channel: sum_g[c] = sum(g) (= dbias) and sum_gxhat[c] = sum(g * xhat)
// (= dweight), g = dy * act'(pre) with the pre-activation recomputed from x exactly as forward
// computed it (g = dy without an activation). Two arrays, so that each becomes a parameter's .grad
// as it is.
template <typename T, int ACT>
__global__ void bn_bwd_reduce(const T* __restrict__ x, const T* __restrict__ dy, const acc_t<T>* __restrict__ stats,
                              const acc_t<T>* __restrict__ w, const acc_t<T>* __restrict__ b,
                              acc_t<T>* __restrict__ part, int* __restrict__ ticket,
                              acc_t<T>* __restrict__ sum_g, acc_t<T>* __restrict__ sum_gxhat,
                              int N, int C, long long S, int chunks, int cpg, int split)
{
    typedef acc_t<T> A;
    constexpr int V = 16 / sizeof(T);
    const A* const mean = stats;
    const A* const invstd = stats + C;
    const int2 gk = bn_block(chunks, split);
    const int g = gk.x, k = gk.y, lane = threadIdx.x & 31;
    auto store_sums = [&](int c, double t1, double t2) {
        sum_g[c] = A(t1);
        sum_gxhat[c] = A(t2);
    };
    if (cpg < 0) {
        const Rows L = rows_of(N, C, V, g, k, chunks);
        Chan<A> ch[V];
        A s1[V] = {}, s2[V] = {};
#pragma unroll
        for (int u = 0; u < V; ++u) ch[u] = load_chan(mean, invstd[L.q * V + u], w, b, L.q * V + u);
        auto load = [&](long long e) { return Two<Pack<T, V>>{load_pack<V>(x + e), load_pack<V>(dy + e)}; };
        for_row_packs<false>(L, C, V, load, [&](long long, const Two<Pack<T, V>>& p) {
#pragma unroll
            for (int u = 0; u < V; ++u) {
                const A xc = A(p.a.v[u]) - ch[u].mean, gr = act_grad<ACT>(ch[u].pre(xc), A(p.b.v[u]));
                s1[u] += gr;
                s2[u] = fma_acc(gr, xc, s2[u]);
            }
        });
#pragma unroll
        for (int u = 0; u < V; ++u) s2[u] *= ch[u].invstd;
        rows_publish<A, V>(s1, s2, L, part, ticket, g, k, chunks, C, store_sums);
        return;
    }
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
    if (cpg) {
        if (active) for_rows<false>(N, W, j, k, chunks, [&](long long e) { add(A(x[e]), A(dy[e])); });
    } else {
        by_width<V>(S % V == 0 && aligned16(x) && aligned16(dy), [&](auto w) {
            constexpr int U = decltype(w)::value;
            for_units<U, false>(N, C, S, g, k, chunks,
                                [&](long long e) { return Two<Pack<T, U>>{load_pack<U>(x + e), load_pack<U>(dy + e)}; },
                                [&](long long, const Two<Pack<T, U>>& p) {
#pragma unroll
                                    for (int u = 0; u < U; ++u) add(A(p.a.v[u]), A(p.b.v[u]));
                                });
        });
    }
    s2 *= ch.invstd;
    if (!publish(s1, s2, part, ticket, g, k, chunks, cpg)) return;
    group_totals(part, g, chunks, cpg, S, C, store_sums);
}

// The packs of x (where needed, else zeros) and dy at offset e.
template <int U, typename T>
__device__ __forceinline__ Two<Pack<T, U>> load_x_dy(const T* x, const T* dy, long long e, bool need_x)
{
    Two<Pack<T, U>> p = {};
    if (need_x) p.a = load_pack<U>(x + e);
    p.b = load_pack<U>(dy + e);
    return p;
}

// dx. Training (sum_g and sum_gxhat given): dx = w*invstd * (g - sum(g)/M - xhat * sum(g*xhat)/M),
// M = N*S, written as scale*g + bx*(x - mean) + e0 with per-channel bx, e0. Eval: dx = w*invstd * g,
// where x is read only to recompute the activation's derivative.
template <typename T, int ACT>
__global__ void bn_bwd_dx(const T* __restrict__ x, const T* __restrict__ dy, const acc_t<T>* __restrict__ stats,
                          const acc_t<T>* __restrict__ w, const acc_t<T>* __restrict__ b,
                          const acc_t<T>* __restrict__ sum_g, const acc_t<T>* __restrict__ sum_gxhat, T* __restrict__ dx,
                          int N, int C, long long S, int chunks, int cpg, int split)
{
    typedef acc_t<T> A;
    constexpr int V = 16 / sizeof(T);
    const A* const mean = stats;
    const A* const invstd = stats + C;
    const int2 gk = bn_block(chunks, split);
    const int g = gk.x, k = gk.y, lane = threadIdx.x & 31;
    const bool need_x = sum_g || ACT != ACT_NONE;
    const A M = A(double(N) * double(S));
    struct DxChan {   // dx = scale * act'(...) * dy + bx * (x - mean) + e0
        Chan<A> ch;
        A bx, e0;
        __device__ A operator()(bool need_x, A xv, A dv) const {   // xv is ignored unless need_x
            const A xc = need_x ? xv - ch.mean : A(0);
            return fma_acc(ch.scale, act_grad<ACT>(ch.pre(xc), dv), fma_acc(bx, xc, e0));
        }
    };
    auto chan = [&](int c) {
        const Chan<A> ch = load_chan(mean, invstd[c], w, b, c);
        return DxChan{ch, sum_g ? -ch.scale * ch.invstd * (sum_gxhat[c] / M) : A(0), sum_g ? -ch.scale * (sum_g[c] / M) : A(0)};
    };
    if (cpg < 0) {
        const Rows L = rows_of(N, C, V, g, k, chunks);
        DxChan d[V];
#pragma unroll
        for (int u = 0; u < V; ++u) d[u] = chan(L.q * V + u);
        for_row_packs<true>(L, C, V, [&](long long e) { return load_x_dy<V>(x, dy, e, need_x); },
                            [&](long long e, const Two<Pack<T, V>>& p) {
            Pack<T, V> out;
#pragma unroll
            for (int u = 0; u < V; ++u) out.v[u] = T(d[u](need_x, A(p.a.v[u]), A(p.b.v[u])));
            store_pack<V>(dx + e, out);
        });
        return;
    }
    const long long W = (long long)C * S, j = (long long)g * cpg * S + lane;   // column mode
    if (cpg && (lane >= cpg * S || j >= W)) return;
    const DxChan dc = chan(cpg ? int(j / S) : g);
    auto f = [&](A xv, A dv) { return dc(need_x, xv, dv); };
    if (cpg) {
        for_rows<true>(N, W, j, k, chunks, [&](long long e) { dx[e] = T(f(need_x ? A(x[e]) : A(0), A(dy[e]))); });
        return;
    }
    by_width<V>(S % V == 0 && aligned16(x) && aligned16(dy) && aligned16(dx), [&](auto w) {
        constexpr int U = decltype(w)::value;
        for_units<U, true>(N, C, S, g, k, chunks, [&](long long e) { return load_x_dy<U>(x, dy, e, need_x); },
                           [&](long long e, const Two<Pack<T, U>>& p) {
                               Pack<T, U> out;
#pragma unroll
                               for (int u = 0; u < U; ++u) out.v[u] = T(f(A(p.a.v[u]), A(p.b.v[u])));
                               store_pack<U>(dx + e, out);
                           });
    });
}

// ----- Training passes fused into one cooperative launch (segment mode in 16-byte packs): the blocks, all resident
// at once, form gridDim.x / chunks groups of `chunks`; group i takes channels i, i + groups, ... and block k of a group
// chunk k of each. A block sums over its chunk, meets the group's other blocks (group_meet), then runs the elementwise
// pass over the same chunk. Of the units it reads first it keeps RC per thread in registers and su per thread in
// shared memory, so that the elementwise pass reads only the rest again, from its end: what the reduction read last,
// most of it still in L2. (On the H200 at 256x64x32x32 float32 the forward took 46 us against 67 for bn_fwd_stats +
// bn_fwd_apply, forward + backward 124 against 158.)

// This thread's units of chunk k of channel c: unit i < count is the chunk's unit threadIdx.x + i * blockDim.x,
// at offset at() while the walk stands on it (next / prev step one unit of this thread on or back).
template <int V>
struct Walk {
    long long row, base;   // C S, c S
    int spv, count, n, s, dn, ds;   // units per segment; this thread's units; the current one's (segment, unit)

    __device__ Walk(int N, int C, long long S, int c, int k, int chunks) : row((long long)C * S), base((long long)c * S)
    {
        spv = int(S / V);
        const long long P = (long long)N * spv, p0 = P * k / chunks, p1 = P * (k + 1) / chunks;
        const long long first = p0 + threadIdx.x;
        count = first < p1 ? int((p1 - 1 - first) / blockDim.x) + 1 : 0;
        n = int(first / spv);
        s = int(first - (long long)n * spv);
        dn = blockDim.x / spv;
        ds = blockDim.x % spv;
    }
    __device__ __forceinline__ long long at() const { return n * row + base + (long long)s * V; }
    __device__ __forceinline__ void next() { n += dn; s += ds; if (s >= spv) { s -= spv; ++n; } }
    __device__ __forceinline__ void prev() { n -= dn; s -= ds; if (s < 0) { s += spv; --n; } }
};

// The reduction's walk over this thread's units, use(load(e)) for each, in rounds of U loads issued before the first
// use; the first RC loads are kept in reg (RC + 1 long: RC may be 0), the next su in kept[(i - RC) blockDim +
// threadIdx.x]. Ends one past the last.
template <int RC, int U, typename P, typename V, typename L, typename F>
__device__ __forceinline__ void walk_keeping(V& w, P (&reg)[RC + 1], P* kept, int su, L load, F use)
{
#pragma unroll
    for (int i = 0; i < RC; ++i)
        if (i < w.count) {
            reg[i] = load(w.at());
            w.next();
        }
#pragma unroll
    for (int i = 0; i < RC; ++i)
        if (i < w.count) use(reg[i]);
    const int stash = RC + su;
    int i = RC;
    for (; i + U <= w.count; i += U) {
        P v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            v[u] = load(w.at());
            w.next();
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (i + u < stash) kept[(i + u - RC) * blockDim.x + threadIdx.x] = v[u];
            use(v[u]);
        }
    }
    for (; i < w.count; ++i) {
        const P v = load(w.at());
        w.next();
        if (i < stash) kept[(i - RC) * blockDim.x + threadIdx.x] = v;
        use(v);
    }
}

// The elementwise pass back over the same units, from the last: put(e, unit) for each, the unit loaded again where
// walk_keeping kept it nowhere (U loads a round), else taken from where it was kept.
template <int RC, int U, typename P, typename V, typename L, typename F>
__device__ __forceinline__ void walk_back(V& w, const P (&reg)[RC + 1], const P* kept, int su, L load, F put)
{
    const int stash = min(w.count, RC + su);
    int i = w.count;
    for (; i - U >= stash; i -= U) {
        long long e[U];
        P v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            w.prev();
            e[u] = w.at();
        }
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = load(e[u]);
#pragma unroll
        for (int u = 0; u < U; ++u) put(e[u], v[u]);
    }
    for (; i > stash; --i) {
        w.prev();
        const long long e = w.at();
        put(e, load(e));
    }
    for (; i > RC; --i) {
        w.prev();
        put(w.at(), kept[(i - 1 - RC) * blockDim.x + threadIdx.x]);
    }
#pragma unroll
    for (int r = RC - 1; r >= 0; --r)
        if (r < w.count) {
            w.prev();
            put(w.at(), reg[r]);
        }
}

__device__ __forceinline__ int load_acquire(const int* p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The `chunks` blocks of group g meet: each stores its block's sums (s1, s2) at part[2 (g chunks + k)] and counts
// itself in ticket[2 g]; once all have, every block folds the group's sums in double, in one order (the same totals
// in each), and returns them. group_leave, at the block's end, re-arms the group's two counters after the last block.
template <typename A>
__device__ __forceinline__ double2 group_meet(A s1, A s2, A* part, int* ticket, int g, int k, int chunks)
{
    __shared__ double2 totals;
    block_sum2(s1, s2, false);
    if (threadIdx.x == 0) {
        A* const mine = part + 2 * ((long long)g * chunks + k);
        mine[0] = s1;
        mine[1] = s2;
        __threadfence();
        atomicAdd(ticket + 2 * g, 1);
        while (load_acquire(ticket + 2 * g) < chunks) {
        }
        double t1 = 0, t2 = 0;
        const A* const group = part + 2 * (long long)g * chunks;
        for (int q = 0; q < chunks; ++q) {
            t1 += double(__ldcg(group + 2 * q));
            t2 += double(__ldcg(group + 2 * q + 1));
        }
        totals = make_double2(t1, t2);
    }
    __syncthreads();
    return totals;
}

__device__ __forceinline__ void group_leave(int* ticket, int g, int chunks)
{
    if (threadIdx.x == 0 && atomicAdd(ticket + 2 * g + 1, 1) == chunks - 1) {   // every block is past the meeting
        ticket[2 * g] = 0;
        ticket[2 * g + 1] = 0;
    }
}

// bn_fwd_stats then bn_fwd_apply (training), as one launch of su * blockDim.x packs of dynamic shared memory.
template <typename T, int ACT, int RC>
__global__ void __launch_bounds__(256) bn_fwd_train(const T* __restrict__ x, T* __restrict__ y, acc_t<T>* __restrict__ part,
                             int* __restrict__ ticket, acc_t<T>* __restrict__ stats, acc_t<T>* __restrict__ running_mean,
                             acc_t<T>* __restrict__ running_var, const acc_t<T>* __restrict__ w,
                             const acc_t<T>* __restrict__ b, double momentum, double eps, int N, int C, long long S,
                             int chunks, int su)
{
    typedef acc_t<T> A;
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    extern __shared__ __align__(16) uint4 bn_kept[];
    P reg[RC + 1], *const kept = reinterpret_cast<P*>(bn_kept);
    auto load = [&](long long e) { return load_pack<V>(x + e); };
    const int k = blockIdx.x % chunks;
    for (int g = blockIdx.x / chunks; g < C; g += gridDim.x / chunks) {
        const A K = A(x[(long long)g * S]), wg = w ? w[g] : A(1), bg = b ? b[g] : A(0);
        Walk<V> walk(N, C, S, g, k, chunks);
        A s1 = 0, s2 = 0;
        walk_keeping<RC, 8>(walk, reg, kept, su, load, [&](const P& p) {
#pragma unroll
            for (int u = 0; u < V; ++u) {
                const A v = A(p.v[u]) - K;
                s1 += v;
                s2 = fma_acc(v, v, s2);
            }
        });
        const double2 t = group_meet(s1, s2, part, ticket, g, k, chunks);
        const double M = double(N) * double(S);
        const double2 mv = shifted_moments(t.x, t.y, double(K), M);
        Chan<A> ch;
        ch.mean = A(mv.x);
        ch.invstd = A(1.0 / sqrt(mv.y + eps));
        ch.scale = ch.invstd * wg;
        ch.shift = bg;
        if (k == 0 && threadIdx.x == 0) {
            stats[g] = ch.mean;
            stats[C + g] = ch.invstd;
            if (running_mean) update_running(running_mean, running_var, g, running_mean[g], running_var[g], mv, M, momentum);
        }
        walk_back<RC, 4>(walk, reg, kept, su, load, [&](long long e, P p) {
#pragma unroll
            for (int u = 0; u < V; ++u) p.v[u] = T(act_fwd<ACT>(ch.pre(A(p.v[u]) - ch.mean)));
            store_pack<V>(y + e, p);
        });
        group_leave(ticket, g, chunks);
    }
}

// bn_bwd_reduce then bn_bwd_dx (training), as one launch of su * blockDim.x pairs of packs of dynamic shared memory.
template <typename T, int ACT, int RC>
__global__ void __launch_bounds__(256) bn_bwd_train(const T* __restrict__ x, const T* __restrict__ dy,
                             const acc_t<T>* __restrict__ stats, const acc_t<T>* __restrict__ w,
                             const acc_t<T>* __restrict__ b, acc_t<T>* __restrict__ part, int* __restrict__ ticket,
                             acc_t<T>* __restrict__ sum_g, acc_t<T>* __restrict__ sum_gxhat, T* __restrict__ dx,
                             int N, int C, long long S, int chunks, int su)
{
    typedef acc_t<T> A;
    constexpr int V = 16 / sizeof(T);
    typedef Two<Pack<T, V>> P;
    extern __shared__ __align__(16) uint4 bn_kept[];
    P reg[RC + 1], *const kept = reinterpret_cast<P*>(bn_kept);
    auto load = [&](long long e) { return P{load_pack<V>(x + e), load_pack<V>(dy + e)}; };
    const int k = blockIdx.x % chunks;
    for (int g = blockIdx.x / chunks; g < C; g += gridDim.x / chunks) {
        const Chan<A> ch = load_chan(stats, stats[C + g], w, b, g);
        Walk<V> walk(N, C, S, g, k, chunks);
        A s1 = 0, s2 = 0;   // sum(g), sum(g * (x - mean))
        walk_keeping<RC, 4>(walk, reg, kept, su, load, [&](const P& p) {
#pragma unroll
            for (int u = 0; u < V; ++u) {
                const A xc = A(p.a.v[u]) - ch.mean, gr = act_grad<ACT>(ch.pre(xc), A(p.b.v[u]));
                s1 += gr;
                s2 = fma_acc(gr, xc, s2);
            }
        });
        const double2 t = group_meet(s1, s2 * ch.invstd, part, ticket, g, k, chunks);
        const A sg = A(t.x), sgx = A(t.y), M = A(double(N) * double(S));
        if (k == 0 && threadIdx.x == 0) {
            sum_g[g] = sg;
            sum_gxhat[g] = sgx;
        }
        const A bx = -ch.scale * ch.invstd * (sgx / M), e0 = -ch.scale * (sg / M);
        walk_back<RC, 4>(walk, reg, kept, su, load, [&](long long e, const P& p) {
            Pack<T, V> out;
#pragma unroll
            for (int u = 0; u < V; ++u) {
                const A xc = A(p.a.v[u]) - ch.mean;
                out.v[u] = T(fma_acc(ch.scale, act_grad<ACT>(ch.pre(xc), A(p.b.v[u])), fma_acc(bx, xc, e0)));
            }
            store_pack<V>(dx + e, out);
        });
        group_leave(ticket, g, chunks);
    }
}

// ===== GRU =====
// One layer of torch.nn.GRU over every step, gates r, z, n. The host computes xg = x W_ih^T for all
// steps with one matmul; with hg = h W_hh^T + b_hh:
//   r = sigmoid(xg_r + b_ir + hg_r), z = sigmoid(xg_z + b_iz + hg_z),
//   n = tanh(xg_n + b_in + r hg_n),  h' = n + z (h - n).
// Forward saves gates[t] = [r | z | n | hg_n] (T, B, 4H), where a backward will run (else gates is null).
// Backward, with dh the gradient reaching h_t:
//   da_z = dh (h_prev - n) z (1 - z),  da_n = dh (1 - z) (1 - n^2),  da_r = da_n hg_n r (1 - r)
//   dg_ih[t] = [da_r | da_z | da_n],  dg_hh[t] = [da_r | da_z | da_n r],  dh_prev = dg_hh[t] W_hh + dh z.
//
// Persistent kernels (a cooperative launch: every block resident): block (ib, iu) = (blockIdx.x / nu,
// blockIdx.x % nu) owns batch rows [ib BB, +BB) and hidden units [iu J, +J). It keeps the W_hh rows of
// its units in shared memory for the whole sequence (forward: the r, z, n rows of its units; backward:
// its columns of W_hh, i.e. rows of W_hh^T) and per step multiplies them by the previous h (backward:
// by dg_hh[t]) of its rows, staged from L2 in k-chunks of KC. The nu blocks of a batch group meet at a
// flag barrier in global memory after every step. The cluster kernels (gru_fwd_cluster, gru_bwd_cluster; sm_90,
// nu = CL blocks a cluster, no cooperative launch) keep that operand whole in shared memory instead, in two
// buffers by step parity: each block writes its cells of the next step's operand into every block of its cluster
// (distributed shared memory), and the cluster meets at its hardware barrier. The k-split kernels (gru_fwd_split,
// gru_bwd_split; gru::Split) also split the product's k extent across a cluster's blocks, for large sizes.
// Warps compute the product on tiles of 16 batch rows by 8 units (forward: by 8 units of each of the
// 3 gates) in the mma.sync C layout: SIMT float FMAs (float, TC = 0), TF32 mma (float, TC = 1) or f16
// mma (__half). The k extent is split across the warps of a tile; partial sums meet in shared memory,
// then every thread finishes up to 4 (row, unit) cells: gates, outputs, and what the next step reads.
// The fallback runs per step: the product from cuBLAS, then gru_gates_fwd / gru_gates_bwd.
namespace gru {

enum { NT = 256, NW = NT / 32, CPT = 4 };   // threads (tinygrad_lite's _BLOCK), warps, (row, unit) cells per thread

__host__ __device__ constexpr int round_up(int a, int b) { return (a + b - 1) / b * b; }
template <int V> struct Const { static constexpr int value = V; };   // an int as a type (a generic lambda's count)

// Row stride in elements of a shared tile of k-extent n: 16 bytes past a multiple of 128 bytes, so that
// 8 consecutive rows read at one k fall into 8 distinct 16-byte bank groups; it covers round_up(n, 16).
template <typename T>
__device__ __forceinline__ int smem_ld(int n) {
    constexpr int E = 16 / sizeof(T);
    return round_up(n, 8 * E) + E;
}

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

// The block zeroes `count` values from p (16-byte aligned), 16 bytes a store (a value a store, the GRU's f16 forward's
// first step took 6-7 us longer at (50, 256, 512, 512) and (100, 64, 1024, 1024) on the H100)
template <typename T>
__device__ void zero_block(T* p, int count) {
    constexpr int E = 16 / sizeof(T);
    for (int i = threadIdx.x; i < count / E; i += blockDim.x) reinterpret_cast<uint4*>(p)[i] = make_uint4(0, 0, 0, 0);
    for (int i = count / E * E + threadIdx.x; i < count; i += blockDim.x) p[i] = from_f<T>(0.f);
}

// Global loads: read-only (ld_nc) or bypassing L1 (ld_cg). cuda_fp16.hpp's __half overloads of __ldg and
// __ldcg are asm without volatile, which the compiler treats as pure and executes speculatively: it hoisted
// gru_bwd_persistent's guarded h0 loads above their null check and the cell bound (an illegal address with
// h0 null). The unsigned short overloads are volatile asm, ordered and never speculated.
__device__ __forceinline__ float ld_nc(const float* p) { return __ldg(p); }
__device__ __forceinline__ __half ld_nc(const __half* p) {
    return __ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ float ld_cg(const float* p) { return __ldcg(p); }
__device__ __forceinline__ __half ld_cg(const __half* p) {
    return __ushort_as_half(__ldcg(reinterpret_cast<const unsigned short*>(p)));
}

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }
// For the GRU kernels whose products run on the tensor cores (TF32 or f16 operands, 11 significant bits): sigmoid
// from ex2.approx and rcp.approx alone (__expf, __fdividef: 0 where the divisor passes 2^126, the limit), within about
// 1e-6 of 1, and tanh as tanh.approx.f32 (one instruction from sm_75, about 2^-11 relative). sigmoid's IEEE division
// and tanhf took 0.45 us of a regs step's 1.11 on the H100 (0.70 with these; 0.67 with sigmoid from tanh.approx too,
// which keeps only 2^-12 of 1 where r or z nears 0 or 1, in a cell that then keeps or drops h_{t-1} for many steps).
__device__ __forceinline__ float fast_sigmoid(float x) { return __fdividef(1.f, 1.f + __expf(-x)); }
__device__ __forceinline__ float fast_tanh(float x) {
#if __CUDA_ARCH__ >= 750
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return __fdividef(2.f, 1.f + __expf(-2.f * x)) - 1.f;
#endif
}

// A forward cell's r, z, n and hg_n at gates[at], H apart, for the backward; gates null (inference): none kept
template <typename T>
__device__ __forceinline__ void keep_gates(T* gates, size_t at, int H, float r, float z, float n, float hn) {
    if (gates == nullptr) return;
    T* g = gates + at;
    g[0] = from_f<T>(r);
    g[H] = from_f<T>(z);
    g[2 * H] = from_f<T>(n);
    g[3 * H] = from_f<T>(hn);
}

// f16 operands for float32 in TF32's place (gru_fwd_split_h): values scaled by powers of two into f16's range,
// exactly. half_scale(m): s with m s in [2^14, 2^15) for a largest magnitude m (1 where m is 0 or not finite, which
// then stays so), so that the values down to 2^-29 m are f16 normals with 11 significant bits (TF32 keeps 11,
// truncated); its exponent within +-100. A weight row's scale times the operand's (at most 2^14) has a finite float
// inverse unless the row's and h0's largest magnitudes multiply past about 2^150. Both s and half_unscale's 1 / s are
// built from m's exponent bits: frexpf, ldexpf and a division put 0.23 us on a gru_bwd_regs step's chain (H100).
__device__ __forceinline__ int half_scale_exponent(float m) {
    if (!(m > 0.f) || isinf(m)) return 0;
    return max(-100, min(100, 141 - (__float_as_int(m) >> 23)));   // 15 - e for m < 2^e (subnormals: 100 either way)
}
__device__ __forceinline__ float half_scale(float m) { return __int_as_float((127 + half_scale_exponent(m)) << 23); }
__device__ __forceinline__ float half_unscale(float m) { return __int_as_float((127 - half_scale_exponent(m)) << 23); }

// The scale of a batch group's f16 operand h, the same in every block of the group: half_scale of the larger of 1 and
// the largest magnitude in h0's rows [b0, b0 + bn) (h0 null: zeros). |h_t| stays below that for t > 0 (h_t lies
// between n_t in (-1, 1) and h_{t-1}). `top`: a word of shared memory nothing else uses meanwhile.
__device__ float operand_scale(const float* h0, int b0, int bn, int H, unsigned* top) {
    constexpr int U = 8;   // loads in flight a thread
    float part[U];
#pragma unroll
    for (int u = 0; u < U; ++u) part[u] = 1.f;
    const float* rows = h0 + static_cast<size_t>(b0) * H;
    for (int i = threadIdx.x; h0 != nullptr && i < bn * H; i += U * blockDim.x)
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (i + u * blockDim.x < bn * H) part[u] = fmaxf(part[u], fabsf(rows[i + u * blockDim.x]));
    float m = part[0];
#pragma unroll
    for (int u = 1; u < U; ++u) m = fmaxf(m, part[u]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) *top = 0u;
    __syncthreads();
    if (threadIdx.x % 32 == 0) atomicMax(top, __float_as_uint(m));   // non-negative floats order as their bits
    __syncthreads();
    const float s = half_scale(__uint_as_float(*top));
    __syncthreads();
    return s;
}

// Calls f(r, v) for this thread's cells of an nrows x n grid: cells t, t + blockDim.x, ... in row-major order
// for thread t, (r, v) stepped without an integer division per cell.
template <typename F>
__device__ __forceinline__ void for_cells(int nrows, int n, F f) {
    const int dr = blockDim.x / n, dv = blockDim.x - dr * n;
    for (int r = threadIdx.x / n, v = threadIdx.x - r * n; r < nrows; r += dr) {
        f(r, v);
        if ((v += dv) >= n) {
            v -= n;
            ++r;
        }
    }
}

// *at(r, k) = row(r)[k] for r < nrows, k < round_up(ncols, PAD); a null row and k >= ncols read as zero. vec:
// ncols and every row start are multiples of 16 bytes (16-byte async copies; at(r, k) for k a multiple of 16 bytes
// then starts 16 bytes that are row r's k .. k + 15). Reads bypass L1 (other blocks write these rows during the
// kernel). Waits for its own copies (WAIT), or commits them as one group of cp.async (an empty one where there are
// none) for the caller to wait for; the caller puts a __syncthreads() between that and any reader.
template <typename T, bool WAIT = true, int PAD = 16, typename At, typename RowFn>
__device__ __forceinline__ void copy_rows_to(At at, int nrows, int ncols, bool vec, RowFn row) {
    const int kpad = round_up(ncols, PAD);
    if (kpad > 0 && vec) {   // kpad 0: nothing to copy (a k-split's slice past K; for_cells needs n > 0)
        constexpr int E = 16 / sizeof(T);
        for_cells(nrows, kpad / E, [&](int r, int v) {
            const T* s = row(r);
            const int k = v * E;
            T* d = at(r, k);
            if (s != nullptr && k < ncols)
                cp_async16(d, s + k);
            else
                *reinterpret_cast<float4*>(d) = make_float4(0.f, 0.f, 0.f, 0.f);
        });
    } else if (kpad > 0) {
        for_cells(nrows, kpad, [&](int r, int k) {
            const T* s = row(r);
            *at(r, k) = (s != nullptr && k < ncols) ? ld_cg(s + k) : from_f<T>(0.f);
        });
    }
    if (!WAIT)
        cp_async_commit();
    else if (vec)
        cp_async_wait();
}

// copy_rows_to a row-major tile: dst[r * ldd + k]
template <bool WAIT = true, typename T, typename RowFn>
__device__ __forceinline__ void copy_rows(T* dst, int ldd, int nrows, int ncols, bool vec, RowFn row) {
    copy_rows_to<T, WAIT>([&](int r, int k) { return dst + r * ldd + k; }, nrows, ncols, vec, row);
}

// Rounds the block's weight rows (n values at w, just staged by copy_rows; the rows' unread padding too) to TF32 in
// place, once per launch, for TC float kernels: TileMma<float, true> then feeds them to the mma as they are. A no-op
// otherwise. The caller puts a __syncthreads() between this and any reader (step_product starts with one).
template <typename T, int TC>
__device__ __forceinline__ void weights_to_tf32(T* w, int n) {
    if constexpr (TC != 0 && sizeof(T) == 4) {
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) w[i] = __uint_as_float(tf32(w[i]));
    }
}

__device__ __forceinline__ void flag_store(unsigned long long* p, unsigned long long v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long flag_load(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long flag_peek(const unsigned long long* p) {   // relaxed: no ordering
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Barrier flags (1 + multiprocessors, zeroed once per GPU): flags[0] holds the launch epoch e,
// flags[1 + b] the last value block b published, (e << 32) | count. A launch reads e at its start and
// block 0 advances it once every block is done, so flags of earlier launches always compare lower
// (also when a captured CUDA graph replays the launch) and nothing needs resetting. One such kernel
// runs at a time.
struct Flags {
    unsigned long long* f;
    unsigned long long e;

    // flags null: a kernel that meets otherwise (clusters) and never calls these
    __device__ explicit Flags(unsigned long long* flags) : f(flags), e(flags != nullptr ? flag_load(flags) << 32 : 0) {}

    // barrier of the n blocks [b0, b0 + n): publish `count`, call during() (the next step's loads, in flight while the
    // block waits), wait until all of them published it
    template <typename During>
    __device__ void sync(int b0, int n, unsigned count, During during) const {
        const unsigned long long v = e | count;
        __syncthreads();
        if (threadIdx.x == 0) flag_store(f + 1 + blockIdx.x, v);
        during();
        if (threadIdx.x < 32) wait_all(b0, n, v);
        __syncthreads();
    }

    // Warp 0: until the n blocks [b0, b0 + n) have published v (or later). Each lane polls up to F flags at once,
    // relaxed loads all in flight together, and the acquire fence after them makes what those blocks wrote before
    // publishing visible (ld.relaxed then fence.acq_rel: PTX's acquire pattern). Polling with acquire loads, one
    // at a time, took a round trip to L2 for every 32 blocks.
    __device__ void wait_all(int b0, int n, unsigned long long v) const {
        constexpr int F = 5;   // 160 blocks a round
        for (int base = 0; base < n; base += 32 * F) {   // the same trips in every lane (__any_sync)
            const int first = base + static_cast<int>(threadIdx.x);
            bool pending[F], any;
#pragma unroll
            for (int r = 0; r < F; ++r) pending[r] = first + 32 * r < n;
            do {
                unsigned long long seen[F];
#pragma unroll
                for (int r = 0; r < F; ++r)
                    if (pending[r]) seen[r] = flag_peek(f + 1 + b0 + first + 32 * r);
                any = false;
#pragma unroll
                for (int r = 0; r < F; ++r) {
                    if (pending[r]) pending[r] = static_cast<long long>(seen[r] - v) < 0;
                    any = any || pending[r];
                }
            } while (__any_sync(0xffffffffu, any));
        }
        asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    }

    __device__ void finish() const {
        const unsigned long long done = e | 0xffffffffull;
        __syncthreads();
        if (threadIdx.x == 0) flag_store(f + 1 + blockIdx.x, done);
        if (blockIdx.x == 0) {
            if (threadIdx.x < 32) wait_all(0, gridDim.x, done);
            __syncthreads();
            if (threadIdx.x == 0) flag_store(f, (e >> 32) + 1);
        }
    }
};

// ----- warp tile products: acc[q][c] += sum_k A[row][k] W_q[col][k] over k-steps s = s0, s0 + ds, ...
// below ns, where lane = 4 g + t holds row = g + 8 (c >> 1), col = 2 t + (c & 1) (the mma C layout).
// A points at row 0 of the 16-row tile, W[q] at row 0 of n-tile q (8 rows); both at the same k.
template <typename T, bool TC> struct TileMma;

template <> struct TileMma<float, false> {   // SIMT, exact float
    static constexpr int STEP = 4;
    template <int NQ>
    __device__ static void run(float (&acc)[3][4], const float* A, int lda, const float* const (&W)[3], int ldw,
                               int s0, int ns, int ds) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        const float* a0 = A + g * lda;
        const float* a1 = a0 + 8 * lda;
        const float* w[NQ];
#pragma unroll
        for (int q = 0; q < NQ; ++q) w[q] = W[q] + 2 * t * ldw;
#pragma unroll 2
        for (int s = s0; s < ns; s += ds) {
            const int k = s * STEP;
            const float4 x0 = *reinterpret_cast<const float4*>(a0 + k);
            const float4 x1 = *reinterpret_cast<const float4*>(a1 + k);
#pragma unroll
            for (int q = 0; q < NQ; ++q) {
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const float4 v = *reinterpret_cast<const float4*>(w[q] + u * ldw + k);
                    acc[q][u] = fmaf(x0.x, v.x, fmaf(x0.y, v.y, fmaf(x0.z, v.z, fmaf(x0.w, v.w, acc[q][u]))));
                    acc[q][2 + u] = fmaf(x1.x, v.x, fmaf(x1.y, v.y, fmaf(x1.z, v.z, fmaf(x1.w, v.w, acc[q][2 + u]))));
                }
            }
        }
    }
};

// Runs step(s, d) over the k-steps s = s0, s0 + ds, ... below ns, d alternating between acc and a second set of
// sums added into acc at the end: two independent mma chains per n-tile, where one waits out the mma's latency at
// every step.
template <typename Step>
__device__ __forceinline__ void two_chains(float (&acc)[3][4], int s0, int ns, int ds, Step step) {
    float odd[3][4] = {};
    int s = s0;
    for (; s + ds < ns; s += 2 * ds) {
        step(s, acc);
        step(s + ds, odd);
    }
    if (s < ns) step(s, acc);
#pragma unroll
    for (int q = 0; q < 3; ++q)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[q][c] += odd[q][c];
}

template <> struct TileMma<float, true> {    // TF32 tensor cores, m16n8k8; W already rounded (weights_to_tf32)
    static constexpr int STEP = 8;
    template <int NQ>
    __device__ static void run(float (&acc)[3][4], const float* A, int lda, const float* const (&W)[3], int ldw,
                               int s0, int ns, int ds) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        const float* a0 = A + g * lda + t;
        const float* a1 = a0 + 8 * lda;
        const float* w[NQ];
#pragma unroll
        for (int q = 0; q < NQ; ++q) w[q] = W[q] + g * ldw + t;
        two_chains(acc, s0, ns, ds, [&](int s, float (&d)[3][4]) {
            const int k = s * STEP;
            const unsigned a[4] = {tf32(a0[k]), tf32(a1[k]), tf32(a0[k + 4]), tf32(a1[k + 4])};
#pragma unroll
            for (int q = 0; q < NQ; ++q) mma_tf32(d[q], a, __float_as_uint(w[q][k]), __float_as_uint(w[q][k + 4]));
        });
    }
};

template <> struct TileMma<__half, true> {   // f16 tensor cores, m16n8k16, float accumulation
    static constexpr int STEP = 16;
    template <int NQ>
    __device__ static void run(float (&acc)[3][4], const __half* A, int lda, const __half* const (&W)[3], int ldw,
                               int s0, int ns, int ds) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        const __half* a0 = A + g * lda + 2 * t;
        const __half* a1 = a0 + 8 * lda;
        const __half* w[NQ];
#pragma unroll
        for (int q = 0; q < NQ; ++q) w[q] = W[q] + g * ldw + 2 * t;
        auto pair = [](const __half* p) { return *reinterpret_cast<const unsigned*>(p); };
        two_chains(acc, s0, ns, ds, [&](int s, float (&d)[3][4]) {
            const int k = s * STEP;
            const unsigned a[4] = {pair(a0 + k), pair(a1 + k), pair(a0 + k + 8), pair(a1 + k + 8)};
#pragma unroll
            for (int q = 0; q < NQ; ++q) mma_f16(d[q], a, pair(w[q] + k), pair(w[q] + k + 8));
        });
    }
};

// What a block of a batch group owns: units [j0, j0 + jn) of H (slice iu of J units, Jp rounded up to 8) for batch
// rows [b0, b0 + bn) of B (group ib of BB rows, MTp rounded up to 16); K the product's k extent (forward H, backward
// 3H). Block and Split build on it.
struct Owned {
    int j0, jn, b0, bn, Jp, MTp, K;

    __device__ Owned(int iu, int ib, int B, int H, int J, int BB, bool forward)
        : j0(iu * J), jn(max(0, min(J, H - iu * J))), b0(ib * BB), bn(max(0, min(BB, B - ib * BB))),
          Jp(round_up(J, 8)), MTp(round_up(BB, 16)), K(forward ? H : 3 * H) {}
};

// The block's layout in shared memory and its warp tiles. Weight rows: forward 3 Jp (gate-major, row
// q Jp + u), backward Jp (row u = unit). Operand tile A: MTp rows of k-extent KC. red: the partial sums
// of the k-split, cell-major. A warp tile is 16 rows by 8 units (forward: by 8 units x 3 gates), so
// both directions have (MTp / 16) (Jp / 8) tiles; the host keeps that at most NW.
template <typename T, bool FWD>
struct Block : Owned {
    static constexpr int NQ = FWD ? 3 : 1;   // n-tiles per warp tile
    int kc, ldw, lda, tasks, kwn, ncell;
    T* Ws;
    T* As;
    float* red;

    __device__ Block(int B, int H, int nu, int J, int BB, int KC, int buffers = 1)
        : Owned(blockIdx.x % nu, blockIdx.x / nu, B, H, J, BB, FWD) {
        kc = KC;
        ldw = smem_ld<T>(K);
        lda = smem_ld<T>(kc);
        tasks = (MTp / 16) * (Jp / 8);
        kwn = NW / tasks;   // warps per tile
        ncell = bn * jn;
        extern __shared__ __align__(16) unsigned char gru_smem[];
        Ws = reinterpret_cast<T*>(gru_smem);
        As = Ws + NQ * Jp * ldw;
        red = reinterpret_cast<float*>(As + buffers * MTp * lda);
    }
    // index in red of cell (row, unit), n-tile q, for the k-split part kw
    __device__ int red_at(int kw, int q, int row, int unit) const {
        return kw * tasks * 128 * NQ + (q * MTp + row) * Jp + unit;
    }
    // the blocks of this block's batch group: the barrier's members
    template <typename During>
    __device__ void sync(const Flags& fl, int nu, unsigned count, During during) const {
        fl.sync(blockIdx.x - blockIdx.x % nu, nu, count, during);
    }
};

// Accumulates the block's warp tiles over the operand tile A (k-chunk starting at k0, length len).
template <typename T, bool TC, bool FWD>
__device__ __forceinline__ void tile_products(const Block<T, FWD>& bk, const T* A, int k0, int len,
                                              float (&acc)[3][4]) {
    using M = TileMma<T, TC>;
    const int warp = threadIdx.x >> 5;
    if (warp >= bk.tasks * bk.kwn) return;
    const int task = warp % bk.tasks, kw = warp / bk.tasks;
    const int mt = task / (bk.Jp / 8), ut = task % (bk.Jp / 8);
    const T* W[3];
#pragma unroll
    for (int q = 0; q < Block<T, FWD>::NQ; ++q) W[q] = bk.Ws + (q * bk.Jp + ut * 8) * bk.ldw + k0;
    M::template run<Block<T, FWD>::NQ>(acc, A + mt * 16 * bk.lda, bk.lda, W, bk.ldw, kw,
                                       (len + M::STEP - 1) / M::STEP, bk.kwn);
}

template <typename T, bool FWD>
__device__ __forceinline__ void store_partials(const Block<T, FWD>& bk, const float (&acc)[3][4]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp >= bk.tasks * bk.kwn) return;
    const int task = warp % bk.tasks, kw = warp / bk.tasks;
    const int mt = task / (bk.Jp / 8), ut = task % (bk.Jp / 8);
#pragma unroll
    for (int q = 0; q < Block<T, FWD>::NQ; ++q)
#pragma unroll
        for (int c = 0; c < 4; ++c)
            bk.red[bk.red_at(kw, q, mt * 16 + (lane >> 2) + 8 * (c >> 1), ut * 8 + 2 * (lane & 3) + (c & 1))] = acc[q][c];
}

// The product of the current step for the block: the A tile is h_{t-1} (forward) or dg_hh[t] (backward)
// rows [b0, b0 + bn) of src (row stride K, null: zeros), staged here in k-chunks. Leaves the partial
// sums in red, then synchronises.
template <typename T, bool TC, bool FWD>
__device__ __forceinline__ void step_product(const Block<T, FWD>& bk, const T* src) {
    float acc[3][4] = {};
    const bool vec = bk.K % (16 / sizeof(T)) == 0;
    for (int k0 = 0; k0 < bk.K; k0 += bk.kc) {
        const int len = min(bk.kc, bk.K - k0);
        __syncthreads();
        copy_rows(bk.As, bk.lda, bk.MTp, len, vec, [&](int r) -> const T* {
            return (src != nullptr && r < bk.bn) ? src + static_cast<size_t>(bk.b0 + r) * bk.K + k0 : nullptr;
        });
        __syncthreads();
        tile_products<T, TC>(bk, bk.As, k0, len, acc);
    }
    store_partials(bk, acc);
    __syncthreads();
}

// The product of the current step on an operand tile A already in shared memory (all K columns: cluster kernels).
template <typename T, bool TC, bool FWD>
__device__ __forceinline__ void kept_product(const Block<T, FWD>& bk, const T* A) {
    float acc[3][4] = {};
    tile_products<T, TC>(bk, A, 0, bk.K, acc);
    store_partials(bk, acc);
    __syncthreads();
}

// Cluster kernels keep the step's operand tile A whole in shared memory, in two buffers (step parity), zeroed
// first: rows past the batch group and columns past K stay zero. Each block writes what it computes of the next
// step's A into buffer `next` of every block of the cluster (itself included), then the cluster meets.
template <typename T, bool FWD>
__device__ __forceinline__ void zero_operands(const Block<T, FWD>& bk) {
    zero_block(bk.As, 2 * bk.MTp * bk.lda);
}

template <int CL, typename T, bool FWD>
__device__ __forceinline__ void share_operand(const Block<T, FWD>& bk, int next, int row, int k, T v) {
    T* const at = bk.As + (next * bk.MTp + row) * bk.lda + k;
#pragma unroll
    for (int rank = 0; rank < CL; ++rank) *in_block(at, rank) = v;
}

// ----- k-split kernels (gru_fwd_split, gru_bwd_split; sm_90, tensor cores): a batch group's blocks also split the
// product's k extent K (forward H, backward 3H) in P slices of KP, the P blocks of a (batch group, units) pair being a
// cluster. A block keeps W_hh's rows of its units over its k-slice only, so its units are P times as many for the same
// shared memory and it stages only its k-slice of the step's operand: the operand's traffic from L2, every block
// reading its rows whole (the kernels above), is what bounds those at large sizes. Each block finishes 1/P of its
// cluster's cells, summing the P blocks' partial products over distributed shared memory. Where the operand's slice
// does not fit beside the weights, it is staged in k-chunks of KC into two buffers, the next chunk's copies in flight
// while the warps multiply the current one.
// WN > 0 (sm_90a): the products run on wgmma, TF32 (T = float) or f16 (T = __half: the float32 forward's f16 operands,
// gru_fwd_split_h). W's N rows are the A operand in m-tiles of 64 (the block's two warpgroups take them alternately, at
// most MB each) and the operand's rows the WN-column B operand (BB <= WN), both in K-major k-tiles of KT values (128
// bytes a row) in the 128-byte swizzle (a pushed operand: in columns of 8, unswizzled; push_piece), KP and KC multiples
// of KT, the tiles 1024-byte aligned (the host adds 1024 bytes). The last m-tile reaches past row N into the next
// k-tile's rows (past the last k-tile, into `tail` zeroed rows): its products of those rows are not kept. A warpgroup
// keeps its tiles' sums over the chunks in registers and writes them into red (WN rows) once the last chunk is
// multiplied, times inv[n] where the weights were scaled (stage_scaled_weights). TF32: the operand is multiplied as
// staged, the tensor cores truncating it (the weights are rounded when staged).
template <typename T, bool FWD, int WN = 0>
struct Split : Owned {
    static constexpr int NQ = FWD ? 3 : 1;        // gates per unit in the weight rows
    static constexpr int NTW = FWD ? 3 : 4;       // n-tiles of 8 per warp tile
    static constexpr int KT = 128 / sizeof(T);    // a k-tile of the wgmma layout: 128 bytes of a row
    static constexpr int MB = 2;                  // wgmma: m-tiles a warpgroup at most (N <= 256)
    static_assert(WN == 0 || (WN % 8 == 0 && WN >= 16 && WN <= 64), "wgmma: a B operand of 16 to 64 rows, 8 a step");
    int k0, kn, kc, chunks, N, ldw, lda, ldc, c0, c1, a_rows, mtiles, tail;
    bool vec;   // K a multiple of 16 bytes: 16-byte copies
    T* Ws;
    T* As;
    float* red;
    float* inv = nullptr;   // scaled weights: 1 / (row n's scale times the operand's), after red (N floats)

    __device__ Split(int B, int H, int P, int nu, int J, int BB, int KP, int KC, bool pushes = false)
        : Owned(blockIdx.x / P % nu, blockIdx.x / (P * nu), B, H, J, BB, FWD) {
        const int kp = blockIdx.x % P;
        vec = K % (16 / sizeof(T)) == 0;
        k0 = kp * KP;
        kn = max(0, min(KP, K - k0));
        kc = KC;   // KP and KC: multiples of 16 (wgmma: of 32); KC = KP: one chunk, one buffer
        chunks = max(1, (kn + kc - 1) / kc);
        N = round_up(NQ * Jp, WN ? 8 : 8 * NTW);
        mtiles = (N + 63) / 64;   // wgmma's
        tail = WN ? 64 * mtiles - N : 0;
        ldw = WN ? KP : smem_ld<T>(KP);   // the wgmma layout's k-tiles: a tile's rows times KT per k-tile
        lda = WN ? KC : smem_ld<T>(KC);
        a_rows = WN ? WN : MTp;
        // partial sums' row stride: rows 8 floats apart in the banks where N is a multiple of 32; wgmma's writes (rows
        // 2 apart in a lane quad): 2 ldc = 8 (mod 32)
        ldc = WN ? round_up(N, 32) + 4 : N + 8;
        const int per = (bn * jn + P - 1) / P;   // this block finishes cells [c0, c1) of bn x jn, row-major
        c0 = min(kp * per, bn * jn);
        c1 = min(c0 + per, bn * jn);
        extern __shared__ __align__(16) unsigned char gru_smem[];
        Ws = reinterpret_cast<T*>(WN ? gru_smem + ((1024 - shared_address(gru_smem) % 1024) % 1024) : gru_smem);
        As = Ws + weight_count();
        red = reinterpret_cast<float*>(As + (KC < KP || pushes ? 2 : 1) * a_rows * lda);
    }
    // The offset of element (r, k) in a staged tile of `rows` rows and row stride ld: row-major, or the wgmma layout's
    // k-tiles of KT columns (rows KT apart, 16-byte granule c of row r at c ^ (r % 8)); at: its address in `tile`
    __device__ int offset(int ld, int rows, int r, int k) const {
        if constexpr (WN != 0) {
            constexpr int E = 16 / sizeof(T);
            return (k / KT) * rows * KT + r * KT + (((k % KT) / E) ^ (r & 7)) * E + k % E;
        } else {
            return r * ld + k;
        }
    }
    __device__ T* at(T* tile, int ld, int rows, int r, int k) const { return tile + offset(ld, rows, r, k); }
    __device__ int weight_count() const { return N * ldw + tail * KT; }   // W's staged values, padding included
    // Row n = q Jp + u of the block's weights in w: W_hh's row q H + j0 + u (forward) or W_hh^T's row j0 + u
    // (backward, q = 0), from column k0; null for a padding row (past NQ gates or jn units).
    template <typename S>
    __device__ const S* weight_row(const S* w, int H, int n) const {
        const int q = n / Jp, u = n - q * Jp;
        return q < NQ && u < jn ? w + static_cast<size_t>(q * H + j0 + u) * K + k0 : nullptr;
    }
    // Zeroes W, so that its padding stays zero once the rows are staged
    __device__ void zero_weights() const {
        zero_block(Ws, weight_count());
        __syncthreads();
    }
    // Stages the weight rows (weight_row), columns [k0, k0 + kn).
    __device__ void stage_weights(const T* w, int H) const {
        zero_weights();
        copy_rows_to<T>([&](int n, int k) { return at(Ws, ldw, N, n, k); }, N, kn, vec,
                        [&](int n) { return weight_row(w, H, n); });
    }
    // f16 operands (T = __half, WN > 0) for float32 weights w: the rows stage_weights stages, each scaled by half_scale
    // of its largest magnitude over the block's k-slice, and inv[n] = 1 / (that scale times hs, the operand's scale),
    // which store_sums applies before the cluster adds its blocks' sums. A warp takes R rows at once, each lane 4
    // columns in 128, up to CH columns of the R rows in registers (16-byte loads where K allows), so that the loads are
    // in flight together and (k-slices of CH or fewer) read once: a row at a time, read twice, the first step took 51
    // us against TF32's 22 at (50, 256, 512, 512) on the H100.
    __device__ void stage_scaled_weights(const float* w, int H, float hs) {
        zero_weights();
        inv = red + a_rows * ldc;
        constexpr int R = 2, KV = 4, CH = 128 * KV;
        const int lane = threadIdx.x % 32;
        for (int n0 = threadIdx.x / 32 * R; n0 < N; n0 += NW * R) {
            const float* row[R];
            float m[R];
            float4 v[R][KV];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                row[r] = n0 + r < N ? weight_row(w, H, n0 + r) : nullptr;
                m[r] = 0.f;
            }
            const auto fetch = [&](int kb) {   // columns kb + 128 i + 4 lane .. + 3 of the rows (zeros past kn)
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int i = 0; i < KV; ++i) {
                        const int k = kb + 128 * i + 4 * lane;
                        const auto at_k = [&](int c) { return row[r] != nullptr && c < kn ? row[r][c] : 0.f; };
                        v[r][i] = row[r] != nullptr && K % 4 == 0 && k + 3 < kn
                                      ? *reinterpret_cast<const float4*>(row[r] + k)
                                      : make_float4(at_k(k), at_k(k + 1), at_k(k + 2), at_k(k + 3));
                    }
            };
            for (int kb = 0; kb < kn; kb += CH) {
                fetch(kb);
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int i = 0; i < KV; ++i)
                        m[r] = fmaxf(fmaxf(m[r], fmaxf(fabsf(v[r][i].x), fabsf(v[r][i].y))),
                                     fmaxf(fabsf(v[r][i].z), fabsf(v[r][i].w)));
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                for (int o = 16; o > 0; o >>= 1) m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], o));
                m[r] = half_scale(m[r]);   // now the row's scale
                if (lane == r && n0 + r < N) inv[n0 + r] = 1.f / (m[r] * hs);
            }
            for (int kb = 0; kb < kn; kb += CH) {
                if (kn > CH) fetch(kb);
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int i = 0; i < KV; ++i) {
                        const int k = kb + 128 * i + 4 * lane;
                        if (row[r] == nullptr || k >= kn) continue;
                        // 4 values of one 16-byte granule of the swizzled row
                        const __half2 lo = __floats2half2_rn(v[r][i].x * m[r], v[r][i].y * m[r]);
                        const __half2 hi = __floats2half2_rn(v[r][i].z * m[r], v[r][i].w * m[r]);
                        *reinterpret_cast<uint2*>(at(Ws, ldw, N, n0 + r, k)) = make_uint2(
                            *reinterpret_cast<const unsigned*>(&lo), *reinterpret_cast<const unsigned*>(&hi));
                    }
            }
        }
    }
    // A batch group as one cluster of G blocks (P = 1, J a multiple of 8) with its operand in one chunk, pushed: As
    // holds two buffers of the operand (step t multiplies h_{t-1} from buffer (t + 1) & 1), each in columns of 8 k
    // (core matrices of 8 rows by 16 bytes, unswizzled: pushed_offset), so that the block's units [j0, j0 + J) are one
    // piece of it. The block writes its cells' values there, then copies the piece into every other block of the
    // cluster (push_piece), each block's mbarrier of that buffer (8 bytes each from `bars`) counting the others' bytes.
    __device__ int pushed_offset(int r, int k) const { return (k / 8) * a_rows * 8 + r * 8 + k % 8; }
    __device__ T* buffer(int b) const { return As + b * a_rows * lda; }
    // Zeroes both buffers (their padding stays zero) and sets up their mbarriers; the cluster must meet after it,
    // before any block pushes
    __device__ void init_pushes(unsigned bars) const {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        zero_block(As, 2 * a_rows * lda);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // the zeros, before any block's copies
        if (threadIdx.x < 2) hopper::bar_init(bars + 8 * threadIdx.x, 1);
        if (threadIdx.x == 0) asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
        __trap();
#endif
    }
    __device__ void push_piece(int b, unsigned bars, int G, int J) const {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // this thread's stores, for the copies
        __syncthreads();
        const int piece = max(0, min(J, lda - j0)), all = min(G * J, lda);   // columns: the block's, the cluster's
        const unsigned src = shared_address(buffer(b) + pushed_offset(0, j0)), bar = bars + 8 * b;
        if (threadIdx.x == 0) hopper::bar_expect_bytes(bar, (all - piece) * a_rows * sizeof(T));
        if (threadIdx.x < G && threadIdx.x != blockIdx.x % G && piece > 0)
            hopper::bulk_to_block(src, piece * a_rows * sizeof(T), bar, threadIdx.x);
#else
        __trap();
#endif
    }
    // The step's partial products: rows [b0, b0 + bn) of src (row stride K; null: zeros) over the block's k-slice,
    // times its weight rows, into red (rows of N, stride ldc: MTp of them, wgmma WN); then the cluster meets (meet
    // false: the block alone, where no other block reads red). Chunk c (buffer c & 1) holds columns [c kc, + kc) of
    // the slice; the copies of chunk c + 1 are in flight while the warps multiply chunk c. PUSHED: src is the buffer of
    // As that the cluster's blocks push into (push_piece), used once the phase `parity` of the mbarrier at bar
    // completed (bar 0: no wait).
    template <bool PUSHED = false>
    __device__ void product(const T* src, bool meet = true, unsigned bar = 0, unsigned parity = 0) const {
        auto stage = [&](int c) {   // commits one group of copies
            T* const buffer = As + (c & 1) * a_rows * lda;
            copy_rows_to<T, false, WN ? KT : 16>([&](int r, int k) { return at(buffer, lda, a_rows, r, k); }, a_rows,
                                                 min(kc, kn - c * kc), vec, [&](int r) -> const T* {
                return src != nullptr && r < bn ? src + static_cast<size_t>(b0 + r) * K + k0 + c * kc : nullptr;
            });
        };
        float d[MB][WN ? WN / 2 : 1];   // wgmma: the warpgroup's sums (written by the first k-step)
        __syncthreads();
        if constexpr (!PUSHED) stage(0);
        for (int c = 0; c < chunks; ++c) {
            if constexpr (PUSHED) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
                if (bar != 0) hopper::bar_wait(bar, parity);
#endif
            } else if (c + 1 < chunks) {
                stage(c + 1);   // into the buffer chunk c - 1 was read from: the loop's last barrier came after that
                cp_async_wait_groups<1>();
            } else {
                cp_async_wait_groups<0>();
            }
            // k-steps of 32 bytes over the chunk's columns (zero past them up to a multiple of 16, for wgmma of 32; none
            // for kn = 0)
            const int ksteps = (max(0, min(kc, kn - c * kc)) * static_cast<int>(sizeof(T)) + 31) / 32;
            if constexpr (WN != 0) {
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // this thread's stores, for wgmma
                __syncthreads();
                wg_products<PUSHED>(d, PUSHED ? src : As + (c & 1) * a_rows * lda, c * kc, ksteps, c == 0);
            } else {
                __syncthreads();
                block_gemm(As + (c & 1) * a_rows * lda, Ws + c * kc, ksteps, c > 0);
            }
            __syncthreads();
        }
        if constexpr (WN != 0) store_sums(d);
        if (meet)
            cluster_sync();
        else
            __syncthreads();
    }
    // wgmma: the warpgroup's m-tiles (2 i + its index) times the B tile A over `ksteps` k-steps of 32 bytes from W's
    // column k0 (a multiple of KT), in whole k-tiles of 4 (staged zeros past the chunk); first: the first chunk (its
    // first k-step overwrites d). Returns once they are done. No wgmma runs under a condition of its own, and each
    // k-tile's are fenced as CUTLASS's mainloops do (the sums' registers fenced around wgmma.fence, commit and wait):
    // else ptxas (CUDA 13) merges the registers between them and serializes the products (its warnings C7519, C7520).
    // PUSHED: A in push_piece's columns of 8 (a k-step two of them).
    template <bool PUSHED>
    __device__ void wg_products(float (&d)[MB][WN ? WN / 2 : 1], const T* A, int k0w, int ksteps, bool first) const {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        if constexpr (WN != 0) {
            // the warpgroup and its m-tiles, from lane 0: values ptxas sees as the same for the warp (.aligned)
            const int group = __shfl_sync(0xffffffffu, threadIdx.x >> 7, 0), mine = (mtiles - group + 1) / 2;
            const unsigned w_base = shared_address(Ws) + (k0w / KT) * N * 128 + group * 64 * 128,
                           a_base = shared_address(A);
            const auto issue = [&](auto tiles) {   // d[i] for i < tiles, over the chunk's k-tiles
                for (int kt = 0; kt < (ksteps + 3) / 4; ++kt) {   // a group a k-tile, the one before still running
                    fence_sums(d);
                    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                    for (int k = 0; k < 4; ++k)
#pragma unroll
                        for (int i = 0; i < decltype(tiles)::value; ++i)
                            hopper::Wgmma<T, WN>::mma(
                                d[i], hopper::operand(w_base + kt * N * 128 + i * 2 * 64 * 128 + 32 * k),
                                PUSHED ? hopper::operand(a_base + (4 * kt + k) * WN * 32, WN * 16, 128, false)
                                       : hopper::operand(a_base + kt * WN * 128 + 32 * k),
                                !first || kt > 0 || k > 0);
                    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                    fence_sums(d);
                }
                asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
                fence_sums(d);
            };
            if (mine == MB)
                issue(Const<MB>());
            else if (mine > 0)
                issue(Const<1>());
        }
#else
        __trap();   // built without sm_90a's features: the loader never launches it so
#endif
    }
    // the sums' registers: no access moves across (around the asynchronous products)
    __device__ static void fence_sums(float (&d)[MB][WN ? WN / 2 : 1]) {
#pragma unroll
        for (int i = 0; i < MB; ++i)
#pragma unroll
            for (int v = 0; v < (WN ? WN / 2 : 1); ++v) asm volatile("" : "+f"(d[i][v])::"memory");
    }
    // wgmma: red[n][m] = D[m][n] for the warpgroup's m-tiles' rows m < N (lane 4 g + t of warp w holds
    // d[i][4 j + 2 h + e] = D[64 (2 i + group) + 16 w + g + 8 h][8 j + 2 t + e]); zeros where the block's k-slice is
    // empty (no products). The rows' factors inv[m] are read before the first store: read at each store (red might
    // alias inv, so the compiler reloaded it after every store), the stores took 1210 clocks of a 7840-clock step at
    // (50, 256, 512, 512) on the H100; 500 now.
    __device__ void store_sums(const float (&d)[MB][WN ? WN / 2 : 1]) const {
        const int group = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
        const auto row = [&](int i, int h) { return 64 * (group + 2 * i) + 16 * warp + (lane >> 2) + 8 * h; };
        const auto mine = [&](int i, int h) { return group + 2 * i < mtiles && row(i, h) < N; };
        float factor[MB][2];
#pragma unroll
        for (int i = 0; i < MB; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) factor[i][h] = inv != nullptr && mine(i, h) ? inv[row(i, h)] : 1.f;
#pragma unroll
        for (int i = 0; i < MB; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (mine(i, h))
#pragma unroll
                    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            red[(8 * j + 2 * (lane & 3) + e) * ldc + row(i, h)] =
                                kn > 0 ? d[i][4 * j + 2 * h + e] * factor[i][h] : 0.f;
    }
    // red = As Ws^T in warp tiles of 32 rows (16 at an odd end) by 8 NTW columns, dealt to the warps in turn:
    // 2 NTW independent mma chains a warp. TF32 m16n8k8 or f16 m16n8k16, a k-step 32 bytes of a row either way;
    // fragments by ldmatrix, A's rounded to TF32 in registers (the weights were rounded when staged).
    __device__ void block_gemm(const T* A, const T* W, int ksteps, bool accumulate) const {
        const int ntiles = N / (8 * NTW), tasks = (MTp + 31) / 32 * ntiles;
        for (int task = threadIdx.x >> 5; task < tasks; task += NW) {
            const int m0 = task / ntiles * 32, n0 = task % ntiles * 8 * NTW;
            if (m0 + 16 < MTp)
                warp_tile<2>(A, W, m0, n0, ksteps, accumulate);
            else
                warp_tile<1>(A, W, m0, n0, ksteps, accumulate);
        }
    }
    // (accumulate: red += the tile's products; each warp owns its tiles' cells of red)
    template <int MT>
    __device__ __forceinline__ void warp_tile(const T* A, const T* W, int m0, int n0, int ksteps, bool accumulate) const {
        constexpr int KS = 32 / sizeof(T);
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        // ldmatrix rows: A's four matrices are (rows +8, bytes +16) by lane bits 3 and 4, W's two bytes +16 by bit 3
        const T* a = A + (m0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * lda + (lane >> 4) * (KS / 2);
        const T* w = W + (n0 + (lane & 7)) * ldw + ((lane >> 3) & 1) * (KS / 2);
        float acc[MT][NTW][4] = {};
#pragma unroll 2
        for (int s = 0; s < ksteps; ++s) {
            unsigned af[MT][4];
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) {
                ldmatrix_x4<false>(af[mi], a + mi * 16 * lda + s * KS);
                if constexpr (sizeof(T) == 4)
#pragma unroll
                    for (int r = 0; r < 4; ++r) af[mi][r] = tf32(__uint_as_float(af[mi][r]));
            }
#pragma unroll
            for (int j = 0; j < NTW; ++j) {
                unsigned bf[2];
                ldmatrix_x2(bf, w + j * 8 * ldw + s * KS);
#pragma unroll
                for (int mi = 0; mi < MT; ++mi) {
                    if constexpr (sizeof(T) == 4)
                        mma_tf32(acc[mi][j], af[mi], bf[0], bf[1]);
                    else
                        mma_f16(acc[mi][j], af[mi], bf[0], bf[1]);
                }
            }
        }
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int j = 0; j < NTW; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float2* at = reinterpret_cast<float2*>(red + (m0 + 16 * mi + g + 8 * h) * ldc + n0 + 8 * j + 2 * t);
                    const float2 before = accumulate ? *at : make_float2(0.f, 0.f);
                    *at = make_float2(before.x + acc[mi][j][2 * h], before.y + acc[mi][j][2 * h + 1]);
                }
    }
    // The cluster's sum of the partial products at (row r, weight row n): of its P blocks (clusters of G > P: of the P
    // blocks of this block's k-split, consecutive ranks; P = 1: this block's own, without the cluster's window).
    template <int P, int G = P>
    __device__ float cluster_sum(int r, int n) const {
        float* at = red + r * ldc + n;
        if constexpr (P == 1) {
            return *at;
        } else {
            const unsigned first = G == P ? 0u : blockIdx.x % G - blockIdx.x % P;
            float v[P];   // all P remote loads in flight before the first use
#pragma unroll
            for (int rank = 0; rank < P; ++rank) v[rank] = *in_block(at, first + rank);
            float sum = 0.f;
#pragma unroll
            for (int rank = 0; rank < P; ++rank) sum += v[rank];
            return sum;
        }
    }
};

// The (row, unit) cells [c0, c1) of a batch group's rows by a block's units (jn of them, row-major; batch row b0 and
// unit j0 first) that this thread finishes: c0 + threadIdx.x + i NT for i < C (CPT; a batch group as one cluster:
// CPT + 1), local row r[i] and unit u[i].
template <int C = CPT>
struct Cells {
    int c0, c1, b0, j0, r[C], u[C];
    __device__ Cells(int first, int end, int jn, int row0, int unit0) : c0(first), c1(end), b0(row0), j0(unit0) {
#pragma unroll
        for (int i = 0; i < C; ++i) {
            const int c = c0 + threadIdx.x + i * NT;
            r[i] = jn > 0 ? c / jn : 0;
            u[i] = c - r[i] * jn;
        }
    }
    __device__ bool has(int i) const { return c0 + threadIdx.x + i * NT < c1; }
    __device__ int b(int i) const { return b0 + r[i]; }   // batch row
    __device__ int j(int i) const { return j0 + u[i]; }   // hidden unit
};

// A forward cell's biases for unit u: (b_ir + b_hr, b_iz + b_hz, b_in, b_hn); b_ih, b_hh may be null (zeros)
template <typename T>
__device__ __forceinline__ void unit_biases(float (&bias)[4], const T* b_ih, const T* b_hh, int H, int u) {
#pragma unroll
    for (int q = 0; q < 3; ++q) bias[q] = b_ih != nullptr ? to_f(b_ih[q * H + u]) : 0.f;
    bias[3] = b_hh != nullptr ? to_f(b_hh[2 * H + u]) : 0.f;
    if (b_hh != nullptr) {
        bias[0] += to_f(b_hh[u]);
        bias[1] += to_f(b_hh[H + u]);
    }
}

// A forward cell's step from its xg values x, its products s (h_{t-1} times W_hh's r, z and n rows) and unit_biases:
// sets r, z, n and hn (hg_n) and returns h_t before rounding to the output's type, hp being h_{t-1}; FAST: fast_sigmoid
// and fast_tanh. x comes as loaded: the kernels keep it in its type and convert it only here, so that no wait for the
// loads comes where they are issued, often before a barrier (float16's regs forward step: 0.96 us with x converted
// there, 0.67 without; H100).
template <bool FAST, typename T>
__device__ __forceinline__ float cell_step(const T (&xt)[3], const float (&s)[3], const float (&bias)[4], float hp,
                                           float& r, float& z, float& n, float& hn) {
    const float x[3] = {to_f(xt[0]), to_f(xt[1]), to_f(xt[2])};
    r = FAST ? fast_sigmoid(x[0] + s[0] + bias[0]) : sigmoid(x[0] + s[0] + bias[0]);
    z = FAST ? fast_sigmoid(x[1] + s[1] + bias[1]) : sigmoid(x[1] + s[1] + bias[1]);
    hn = s[2] + bias[3];
    n = FAST ? fast_tanh(x[2] + bias[2] + r * hn) : tanhf(x[2] + bias[2] + r * hn);
    return n + z * (hp - n);
}

// Forward, the thread's cells: bias = unit_biases, hp = h_{t-1} (h0 may be null: zeros), in = step t's xg values;
// FAST: cell_step's (the products on the tensor cores).
template <typename T, bool FAST, int C = CPT>
struct FwdCells : Cells<C> {
    using Cells<C>::has;
    using Cells<C>::b;
    using Cells<C>::j;
    struct Inputs {
        T xv[C][3];   // as loaded (cell_step converts them)
    };
    float bias[C][4], hp[C];
    Inputs in;

    __device__ FwdCells(int first, int end, int jn, int row0, int unit0, const T* b_ih, const T* b_hh, const T* h0,
                        int H)
        : Cells<C>(first, end, jn, row0, unit0) {
#pragma unroll
        for (int i = 0; i < C; ++i)
            if (has(i)) {
                unit_biases(bias[i], b_ih, b_hh, H, j(i));
                hp[i] = h0 != nullptr ? to_f(h0[static_cast<size_t>(b(i)) * H + j(i)]) : 0.f;
            }
    }
    // step t's xg values into `to` (in, or a set loaded further ahead), loaded ahead of the products (most kernels:
    // while waiting at the barrier before step t; the k-split forward: a step earlier)
    __device__ void load(Inputs& to, const T* xg, int t, int B, int H) const {
#pragma unroll
        for (int i = 0; i < C; ++i)
            if (has(i)) {
                const T* p = xg + (static_cast<size_t>(t) * B + b(i)) * 3 * H + j(i);
#pragma unroll
                for (int q = 0; q < 3; ++q) to.xv[i][q] = ld_nc(p + q * H);
            }
    }
    // Step t's gates from the products sum(i, s) puts in s (h_{t-1} times W_hh's r, z and n rows): writes out and
    // gates (unless null), keeps h_t, then share(i, h_t).
    template <typename Sum, typename Share>
    __device__ void finish(Sum sum, Share share, T* out, T* gates, int t, int B, int H) {
#pragma unroll
        for (int i = 0; i < C; ++i)
            if (has(i)) {
                float s[3], r, z, n, hn;
                sum(i, s);
                const T h = from_f<T>(cell_step<FAST>(in.xv[i], s, bias[i], hp[i], r, z, n, hn));
                hp[i] = to_f(h);
                out[(static_cast<size_t>(t) * B + b(i)) * H + j(i)] = h;
                keep_gates(gates, (static_cast<size_t>(t) * B + b(i)) * 4 * H + j(i), H, r, z, n, hn);
                share(i, h);
            }
    }
};

// Backward, the thread's cells: in = what step t's gates need (g = r, z, n, hg_n; hp = h_{t-1}; dout[t]), loaded
// ahead of use; dh, the gradient reaching h_t; carry = dh z of the step after.
// A backward cell's step t: from its gates g (r, z, n, hg_n), h_{t-1} h_prev (both as loaded, as cell_step's x) and
// d = dL/dh_t, writes dg_hh's r, z and n values hh at dg_ih + o and dg_hh + o, H apart (dg_ih's r and z the same, its
// n dan), adds the values written to bias (float16: as rounded), and returns d z, the share of dh_{t-1} that skips
// W_hh
template <typename T>
__device__ __forceinline__ float cell_grads(const T (&g)[4], T h_prev, float d, T (&hh)[3], float (&bias)[4],
                                            T* __restrict__ dg_ih, T* dg_hh, size_t o, int H) {
    const float r = to_f(g[0]), z = to_f(g[1]), n = to_f(g[2]), hn = to_f(g[3]), hp = to_f(h_prev);
    const float daz = d * (hp - n) * z * (1.f - z);
    const float dan = d * (1.f - z) * (1.f - n * n);
    const float dar = dan * hn * r * (1.f - r);
    hh[0] = from_f<T>(dar);
    hh[1] = from_f<T>(daz);
    hh[2] = from_f<T>(dan * r);
    const T ih_n = from_f<T>(dan);
    dg_ih[o] = dg_hh[o] = hh[0];
    dg_ih[o + H] = dg_hh[o + H] = hh[1];
    dg_ih[o + 2 * H] = ih_n;
    dg_hh[o + 2 * H] = hh[2];
    bias[0] += to_f(hh[0]);
    bias[1] += to_f(hh[1]);
    bias[2] += to_f(ih_n);
    bias[3] += to_f(hh[2]);
    return d * z;
}

// A cell's bias gradient sums over the steps (cell_grads' bias) into row b of parts (B, 6H): db_ih's r, z, n then
// db_hh's r, z, n (r and z twice), for gru_bias_sums to sum over the rows
__device__ __forceinline__ void store_bias_sums(float* parts, int b, int u, int H, const float (&bias)[4]) {
    float* p = parts + static_cast<size_t>(b) * 6 * H + u;
    p[0] = p[3 * H] = bias[0];
    p[H] = p[4 * H] = bias[1];
    p[2 * H] = bias[2];
    p[5 * H] = bias[3];
}

template <typename T>
struct BwdCells : Cells<> {
    struct Inputs {
        T g[CPT][4], hp[CPT], dout[CPT];   // as loaded (converted where used, as cell_step's x)
    };
    Inputs in;
    float dh[CPT], carry[CPT], bias[CPT][4];   // bias: the sums over the steps of dg_ih's r, z, n and dg_hh's n

    using Cells<>::Cells;
    // step t's inputs into `to` (in, or a set loaded further ahead)
    __device__ void load(Inputs& to, const T* gates, const T* out, const T* h0, const T* dout_, int t, int B,
                         int H) const {
#pragma unroll
        for (int i = 0; i < CPT; ++i)
            if (has(i)) {
                const size_t bj = static_cast<size_t>(b(i)) * H + j(i);
                const T* p = gates + (static_cast<size_t>(t) * B + b(i)) * 4 * H + j(i);
#pragma unroll
                for (int q = 0; q < 4; ++q) to.g[i][q] = ld_nc(p + q * H);
                to.hp[i] = t > 0 ? ld_nc(out + static_cast<size_t>(t - 1) * B * H + bj)
                                 : (h0 != nullptr ? ld_nc(h0 + bj) : from_f<T>(0.f));
                to.dout[i] = ld_nc(dout_ + static_cast<size_t>(t) * B * H + bj);
            }
    }
    // Writes dg_ih[t] and dg_hh[t] from dh, keeps dh z (dh_{t-1}'s share that skips W_hh), then share(i, hh) with
    // dg_hh[t]'s three values.
    template <typename Share>
    __device__ void grads(T* dg_ih, T* dg_hh, int t, int B, int H, Share share) {
#pragma unroll
        for (int i = 0; i < CPT; ++i)
            if (has(i)) {
                T hh[3];
                carry[i] = cell_grads(in.g[i], in.hp[i], dh[i], hh, bias[i], dg_ih, dg_hh,
                                      (static_cast<size_t>(t) * B + b(i)) * 3 * H + j(i), H);
                share(i, hh);
            }
    }
    // dh_{t-1} = sum(i, carry): the carry plus the products of dg_hh[t] and W_hh, and dout[t - 1] where `more`
    template <typename Sum>
    __device__ void gather(Sum sum, bool more) {
#pragma unroll
        for (int i = 0; i < CPT; ++i)
            if (has(i)) dh[i] = sum(i, carry[i]) + (more ? to_f(in.dout[i]) : 0.f);
    }
    __device__ void start() {   // the last step: dh = dout[T - 1]
#pragma unroll
        for (int i = 0; i < CPT; ++i) {
            dh[i] = to_f(in.dout[i]);
#pragma unroll
            for (int q = 0; q < 4; ++q) bias[i][q] = 0.f;
        }
    }
    __device__ void store_dh0(T* dh0, int H) const {   // (dh0 null: none wanted)
        if (dh0 == nullptr) return;
#pragma unroll
        for (int i = 0; i < CPT; ++i)
            if (has(i)) dh0[static_cast<size_t>(b(i)) * H + j(i)] = from_f<T>(dh[i]);
    }
    // The bias gradients' sums over the steps, by batch row (store_bias_sums); parts may be null (no bias gradients)
    __device__ void store_bias(float* parts, int H) const {
        if (parts == nullptr) return;
#pragma unroll
        for (int i = 0; i < CPT; ++i)
            if (has(i)) store_bias_sums(parts, b(i), j(i), H, bias[i]);
    }
};

}  // namespace gru

// xg (T, B, 3H) = x W_ih^T without bias; w_hh (3H, H); b_ih, b_hh, h0 may be null. Writes out (T, B, H)
// and gates (T, B, 4H), unless null. nb * nu blocks of gru::NT threads; CL = 0: a cooperative launch, the nu blocks
// of a batch group meeting at flags; CL = nu: the batch group is a cluster (gru_fwd_cluster), h passed on in shared
// memory.
template <typename T, int TC, int CL>
__device__ __forceinline__ void gru_fwd_body(const T* __restrict__ xg, const T* __restrict__ w_hh,
                                             const T* __restrict__ b_ih, const T* __restrict__ b_hh,
                                             const T* __restrict__ h0, T* out, T* __restrict__ gates,
                                             unsigned long long* flags, int steps, int B, int H, int nu, int J,
                                             int BB, int KC) {
    using namespace gru;
    const Block<T, true> bk(B, H, nu, J, BB, KC, CL ? 2 : 1);
    const Flags fl(CL == 0 ? flags : nullptr);
    const bool vec = H % (16 / sizeof(T)) == 0;
    copy_rows(bk.Ws, bk.ldw, 3 * bk.Jp, H, vec, [&](int r) -> const T* {
        const int q = r / bk.Jp, u = r - q * bk.Jp;
        return u < bk.jn ? w_hh + static_cast<size_t>(q * H + bk.j0 + u) * H : nullptr;
    });
    weights_to_tf32<T, TC>(bk.Ws, 3 * bk.Jp * bk.ldw);
    if constexpr (CL != 0) {   // buffer 0 holds h0's rows of the batch group
        zero_operands(bk);
        __syncthreads();
        copy_rows(bk.As, bk.lda, bk.MTp, H, vec, [&](int r) -> const T* {
            return (h0 != nullptr && r < bk.bn) ? h0 + static_cast<size_t>(bk.b0 + r) * H : nullptr;
        });
        cluster_sync();
    }
    FwdCells<T, TC != 0> cells(0, bk.ncell, bk.jn, bk.b0, bk.j0, b_ih, b_hh, h0, H);
    typename FwdCells<T, TC != 0>::Inputs ahead;   // step t + 1's xg while step t runs: loaded a step before it is used
    cells.load(cells.in, xg, 0, B, H);
    if (steps > 1) cells.load(ahead, xg, 1, B, H);
    for (int t = 0; t < steps; ++t) {
        if constexpr (CL != 0)
            kept_product<T, TC != 0>(bk, bk.As + (t & 1) * bk.MTp * bk.lda);
        else
            step_product<T, TC != 0>(bk, t == 0 ? h0 : out + static_cast<size_t>(t - 1) * B * H);
        const bool shares = CL != 0 && t + 1 < steps;
        cells.finish([&](int i, float (&s)[3]) {   // the warps' partial sums over k
            s[0] = s[1] = s[2] = 0.f;
            for (int kw = 0; kw < bk.kwn; ++kw)
#pragma unroll
                for (int q = 0; q < 3; ++q) s[q] += bk.red[bk.red_at(kw, q, cells.r[i], cells.u[i])];
        }, [&](int i, T h) {
            if (shares) share_operand<CL>(bk, (t + 1) & 1, cells.r[i], cells.j(i), h);
        }, out, gates, t, B, H);
        const auto load_next = [&] {
            cells.in = ahead;
            if (t + 2 < steps) cells.load(ahead, xg, t + 2, B, H);
        };
        if constexpr (CL != 0) {
            if (shares) cluster_sync(load_next);
        } else if (t + 1 < steps) {
            bk.sync(fl, nu, t + 1, load_next);
        }
    }
    if constexpr (CL == 0) fl.finish();
}

template <typename T, int TC>
__global__ void __launch_bounds__(gru::NT, 1)
gru_fwd_persistent(const T* __restrict__ xg, const T* __restrict__ w_hh, const T* __restrict__ b_ih,
                   const T* __restrict__ b_hh, const T* __restrict__ h0, T* out, T* __restrict__ gates,
                   unsigned long long* flags, int steps, int B, int H, int nu, int J, int BB, int KC) {
    gru_fwd_body<T, TC, 0>(xg, w_hh, b_ih, b_hh, h0, out, gates, flags, steps, B, H, nu, J, BB, KC);
}

// Clusters need sm_90: compilers reject __cluster_dims__ for earlier targets, even uninstantiated (the loader builds
// the cluster kernels on 9.0 devices only; every module compiles the whole file). The arguments are
// gru_fwd_persistent's; the layout's nu and KC are CL and H, whatever the host passes.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
template <typename T, int TC, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(gru::NT, 1)
gru_fwd_cluster(const T* __restrict__ xg, const T* __restrict__ w_hh, const T* __restrict__ b_ih,
                const T* __restrict__ b_hh, const T* __restrict__ h0, T* out, T* __restrict__ gates,
                unsigned long long* flags, int steps, int B, int H, int nu, int J, int BB, int KC) {
    gru_fwd_body<T, TC, CL>(xg, w_hh, b_ih, b_hh, h0, out, gates, flags, steps, B, H, CL, J, BB, H);
}

// The k-split forward (gru::Split; WN > 0: its products on wgmma): nb * nu * P blocks, clusters of P, KP of the K = H
// columns a block; the nu P blocks of a batch group meet at flags after every step, so all must be resident at once. Not
// a cooperative launch: the host takes residency from the driver's count of clusters the GPU holds, so nothing else
// may hold SMs meanwhile (as the flags' one kernel at a time). O: the operands' type in shared memory, T but for
// gru_fwd_split_h (T = float, O = __half): the weights scaled (Split::stage_scaled_weights), h_{t-1} staged from hh (2,
// B, H), where finish keeps an f16 copy of h_t scaled by the batch group's operand_scale, in buffer t & 1 (h0's in
// buffer 1, behind a first barrier, before step 0). G > P (gru_fwd_split_h, and gru_fwd_split for __half): clusters
// of G = nu P blocks, a batch group each, meeting at the cluster's barrier instead of flags (no residency needed
// across groups; at (50, 256, 512, 512) on the H100 a step took 4.92 us against 6.22), with CPT + 1 cells a thread (the
// GPU holds fewer clusters of 8 or 16 than it holds blocks: larger groups); the k-split's partial sums then summed
// over P consecutive ranks. gru_fwd_split_h's groups pass h's f16 copies on in shared memory instead (hh unused):
// each block's copies pushed into every block of the cluster (Split::push_piece), no barrier between the steps.
template <typename T, typename O, int P, int WN, int G = P>
__device__ __forceinline__ void gru_fwd_split_body(const T* __restrict__ xg, const T* __restrict__ w_hh,
                                                   const T* __restrict__ b_ih, const T* __restrict__ b_hh,
                                                   const T* __restrict__ h0, T* out, T* __restrict__ gates,
                                                   unsigned long long* flags, O* hh, int steps, int B, int H, int nu,
                                                   int J, int BB, int KP, int KC) {
    using namespace gru;
    constexpr bool scaled = sizeof(O) != sizeof(T);
    // A batch group as one cluster (gru_fwd_split_h, its operand in one chunk): h's f16 copies pushed between its
    // blocks' shared memory, each block waiting only for the copies it needs (Split::push_piece). With the copies in
    // hh (global memory) multicast to the cluster after its barrier, the barrier and the multicast's wait took 2300 of
    // a step's 7040 clocks at (50, 256, 512, 512) on the H100; pushed, the forward took 0.2679 ms against 0.2716 there
    // by replay, at (100, 64, 512, 512) 0.2951 against 0.3290, at (200, 8, 256, 256) 0.3602 against 0.4194.
    constexpr bool pushes = scaled && G > P;
    Split<O, true, WN> bk(B, H, P, nu, J, BB, KP, KC, pushes);
    const Flags fl(G == P ? flags : nullptr);
    const int members = nu * P, first = blockIdx.x - blockIdx.x % members;   // the batch group's blocks
    static_assert(G % P == 0, "a cluster holds whole k-splits");
    constexpr int C = G > P ? CPT + 1 : CPT;   // cells a thread: the larger groups of fewer clusters
    if ((G > P && nu * P != G) || bk.c1 - bk.c0 > C * NT) __trap();   // a group across clusters would meet nowhere
    constexpr bool meet = G == P || P > 1;   // the products end at the cluster's barrier (the k-split's sums)
    unsigned barriers = 0;   // flag barriers so far
    unsigned bars = 0, parities = 0;   // pushes: the buffers' mbarriers, and bit b the parity of buffer b's next phase
    if constexpr (pushes) {
        __shared__ __align__(8) unsigned long long push_bars[2];
        // the host's layouts keep the operand of these in one chunk, and a block's units in whole columns of 8
        if (bk.chunks != 1 || J % 8 != 0) __trap();
        bars = shared_address(push_bars);
        bk.init_pushes(bars);
        cluster_sync();
    }
    // the batch group's blocks meet. The cluster's barrier orders memory accesses but not asynchronous copies: every
    // cp.async of the step's operand (hh or out) must be complete before it (product waits for all of its groups), none
    // prefetched in during
    const auto group_sync = [&](auto during) {
        if constexpr (G > P) {
            cluster_sync(during);
        } else {
            fl.sync(first, members, ++barriers, during);
        }
    };
    float hs = 1.f;   // the operand's scale
    if constexpr (scaled) {
        hs = operand_scale(h0, bk.b0, bk.bn, H, reinterpret_cast<unsigned*>(bk.red));
        bk.stage_scaled_weights(w_hh, H, hs);
    } else {
        bk.stage_weights(w_hh, H);
        weights_to_tf32<T, 1>(bk.Ws, bk.weight_count());
    }
    FwdCells<T, true, C> cells(bk.c0, bk.c1, bk.jn, bk.b0, bk.j0, b_ih, b_hh, h0, H);
    const auto keep_half = [&](int buffer, int i, float h) {   // cell i's f16 copy of h into the buffer, scaled
        if constexpr (pushes)
            bk.buffer(buffer)[bk.pushed_offset(cells.r[i], cells.j(i))] = from_f<O>(h * hs);
        else
            hh[static_cast<size_t>(buffer * B + cells.b(i)) * H + cells.j(i)] = from_f<O>(h * hs);
    };
    if (scaled && h0 != nullptr) {
#pragma unroll
        for (int i = 0; i < C; ++i)
            if (cells.has(i)) keep_half(1, i, cells.hp[i]);
        if constexpr (pushes)
            bk.push_piece(1, bars, G, J);
        else
            group_sync([] {});
    }
    cells.load(cells.in, xg, 0, B, H);
    // step t + 1's xg values, loaded after step t's barrier: in flight during the product (the cluster barrier after
    // it may wait for them). Loaded while waiting at the barrier, the float32 forward took 15% longer at H = 512 and
    // 1024 on the H200: the compiler put the loads above the flag store, whose release then waited for them.
    typename FwdCells<T, true, C>::Inputs xn;
    for (int t = 0; t < steps; ++t) {
        if (t + 1 < steps) cells.load(xn, xg, t + 1, B, H);
        if constexpr (scaled) {
            if constexpr (pushes) {   // buffer 1 holds zeros where h0 is null, till step 1 writes it
                const int b = (t + 1) & 1;
                const bool pushed = t > 0 || h0 != nullptr;
                bk.template product<true>(bk.buffer(b), meet, pushed ? bars + 8 * b : 0u, (parities >> b) & 1);
                if (pushed) parities ^= 1u << b;
            } else {
                bk.product(t == 0 && h0 == nullptr ? nullptr : hh + static_cast<size_t>((t + 1) & 1) * B * H, meet);
            }
        } else {
            bk.product(t == 0 ? h0 : out + static_cast<size_t>(t - 1) * B * H, meet);
        }
        // every cell's sums before finish stores to out (which the loads from the cluster's shared memory might
        // alias): the loads in flight together, not a round trip a cell (at (50, 256, 512, 512) on the H100, 8.2 ->
        // 7.9 us a step; in finish itself, for every forward kernel, the cluster kernels' steps took up to 9% longer)
        float sums[C][3];
#pragma unroll
        for (int i = 0; i < C; ++i)
#pragma unroll
            for (int q = 0; q < 3; ++q)
                sums[i][q] = cells.has(i) ? bk.template cluster_sum<P, G>(cells.r[i], q * bk.Jp + cells.u[i]) : 0.f;
        cells.finish([&](int i, float (&s)[3]) {
#pragma unroll
            for (int q = 0; q < 3; ++q) s[q] = sums[i][q];
        }, [&](int i, T h) {
            if constexpr (scaled) keep_half(t & 1, i, to_f(h));
        }, out, gates, t, B, H);
        if (t + 1 < steps) {
            cells.in = xn;
            if constexpr (pushes)   // (its barrier also keeps red until the block's cells have read it)
                bk.push_piece(t & 1, bars, G, J);
            else
                group_sync([] {});   // also keeps red until the cluster's blocks have read it
        }
    }
    cluster_sync();   // no block leaves while another may read its red or its copies land in it
    if constexpr (G == P) fl.finish();
}

template <typename T, int P, int WN, int G = P>
__global__ void __cluster_dims__(G, 1, 1) __launch_bounds__(gru::NT, 1)
gru_fwd_split(const T* __restrict__ xg, const T* __restrict__ w_hh, const T* __restrict__ b_ih,
              const T* __restrict__ b_hh, const T* __restrict__ h0, T* out, T* __restrict__ gates,
              unsigned long long* flags, int steps, int B, int H, int nu, int J, int BB, int KP, int KC) {
    gru_fwd_split_body<T, T, P, WN, G>(xg, w_hh, b_ih, b_hh, h0, out, gates, flags, nullptr, steps, B, H, nu, J, BB,
                                       KP, KC);
}

// gru_fwd_split on f16 wgmma for float32: hh, (2, B, H) f16 values the kernel writes and reads (the host's scratch)
template <int P, int WN, int G = P>
__global__ void __cluster_dims__(G, 1, 1) __launch_bounds__(gru::NT, 1)
gru_fwd_split_h(const float* __restrict__ xg, const float* __restrict__ w_hh, const float* __restrict__ b_ih,
                const float* __restrict__ b_hh, const float* __restrict__ h0, float* out, float* __restrict__ gates,
                unsigned long long* flags, __half* hh, int steps, int B, int H, int nu, int J, int BB, int KP, int KC) {
    gru_fwd_split_body<float, __half, P, WN, G>(xg, w_hh, b_ih, b_hh, h0, out, gates, flags, hh, steps, B, H, nu, J,
                                                BB, KP, KC);
}
#endif

namespace gru {
// mma.sync A fragments of 16 rows of a matrix of `width` columns, its element (i, k) at rows[i row_step + k k_step]
// (row-major: row_step = width, k_step = 1; or the transpose of one), rows from `valid` on and the columns past
// `width` read as zeros, KN k-tiles, into registers: lane 4 g + tq's a[kt][e + 2 r]
// holds the values at row g + 8 e, columns 16 kt + 2 tq + 8 r and the next, times half_scale of the row's largest
// magnitude (its columns lie in the lane's quad), returned in scale[e] (exact for f16 values, which it keeps from f16's
// subnormals). A row's loads are all issued before any is used: reading them twice, for the scale and then the
// fragments, one step of loads waiting on the last, took about 10 us at hidden 128 on the H200.
template <int KN, typename T>
__device__ __forceinline__ void a_fragments(unsigned (&a)[KN][4], float (&scale)[2], const T* rows, int valid,
                                            int width, int row_step, int k_step) {
    const int g = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3;
    const auto at = [&](const T* row, int k) { return to_f(ld_nc(row + static_cast<size_t>(k) * k_step)); };
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const T* row = rows + static_cast<size_t>(g + 8 * e) * row_step;
        float2 v[KN][2];
        float m = 0.f;
#pragma unroll
        for (int kt = 0; kt < KN; ++kt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int k = 16 * kt + 2 * tq + 8 * r;
                v[kt][r] = g + 8 * e >= valid ? make_float2(0.f, 0.f)
                           : make_float2(k < width ? at(row, k) : 0.f, k + 1 < width ? at(row, k + 1) : 0.f);
                m = fmaxf(m, fmaxf(fabsf(v[kt][r].x), fabsf(v[kt][r].y)));
            }
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        const float s = half_scale(fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2)));
#pragma unroll
        for (int kt = 0; kt < KN; ++kt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const __half2 h = __floats2half2_rn(v[kt][r].x * s, v[kt][r].y * s);
                a[kt][e + 2 * r] = *reinterpret_cast<const unsigned*>(&h);
            }
        scale[e] = s;
    }
}

// gru_fwd_regs' projection in the kernel: steps a chunk, the (row, k-tile) pairs of B fragments a step at most, and the
// floats a step of the block's copy of x's chunk (8 REGS_XK, and 4 more: the B fragments' loads, at 4 g + tq,
// conflict-free)
enum { REGS_CHUNK = 16, REGS_XK = 8, REGS_XB = 8 * REGS_XK + 4 };

// gru_fwd_regs' and gru_bwd_regs' cells: lane 4 g + tq's C values c of an m16n8 tile, unit u0 + g + 8 (c >> 1) of the
// block's batch row 2 tq + (c & 1), bn rows and H units being there. SPREAD (blocks of one row): twice the lanes
// finish a cell each, lane 4 g + tq (tq < 2) the cell of unit u0 + g + 8 tq (as c = 0): lane 4 g's C value 2 moves to
// lane 4 g + 1 (spread), and own() gives that lane the values of A's row g + 8. Otherwise the warp runs the cells'
// code twice, over 8 lanes each time: the H100's (100, 16, 128) float32 kernels took 82 us forward and 154 backward,
// not 60 and 108 (PERF_NOTES.md; tested at run time instead of compiled in, the choice made both slower).
template <int SPREAD>
struct RegsCells {
    int u0, g, tq, bn, H;
    __device__ int row(int c) const { return SPREAD ? 0 : 2 * tq + (c & 1); }
    __device__ int unit(int c) const { return u0 + g + 8 * (SPREAD ? tq : c >> 1); }
    __device__ bool has(int c) const { return (SPREAD ? c == 0 && tq < 2 : row(c) < bn) && unit(c) < H; }
    __device__ void spread(float (&v)[4]) const {   // C values: after the product (every lane of the warp)
        if (!SPREAD) return;
        const float moved = __shfl_sync(0xffffffffu, v[2], (threadIdx.x & 31) & ~3);
        if (tq == 1) v[0] = moved;
    }
    __device__ void own(float (&v)[2]) const {   // a value of A's rows g, g + 8 (at cell c: v[c >> 1])
        if (SPREAD && tq == 1) v[0] = v[1];
    }
};
}  // namespace gru

// The forward with W_hh in registers (H <= 16 KT, KT <= 8): a block holds all of W_hh as mma.sync f16 A fragments, so a
// batch group of BB <= 8 rows is one block that waits for no other: ceil(B / BB) blocks of gru::NT threads, any number
// of them. hg^T = W_hh h^T: warp w owns units [16 w, 16 w + 16), their r, z and n rows being its m-tiles q = gate over
// all KT k-tiles; the batch rows are the n = 8 columns of the B operand, h_{t-1} read from shared memory by ldmatrix;
// one __syncthreads() a step. Lane 4 g + tq holds A rows g and g + 8 of each m-tile and finishes the cells (unit 16 w +
// g + 8 (c >> 1), row 2 tq + (c & 1)) of C, or with SPREAD (BB 1) those of RegsCells<1>. W_hh's rows are scaled each by
// its own power of two (a_fragments); float32 runs on f16 operands, as gru_fwd_split_h, h scaled by the batch group's
// operand_scale. On the H100 at B 16, H 128: a step 0.67 us with a row a block in float32 and float16 (float32 0.49
// with SPREAD), 1.03 and 1.16 with 8 (float32 1.11 and 1.60 with tanhf and IEEE division in the cells; PERF_NOTES.md).
// PROJ 1 or 2 (xg unread): the kernel projects x (T, B, IN; a step x_step elements apart, a row x_row, unit-strided
// within a row) itself, x_t W_ih^T for REGS_CHUNK steps at a time on TF32 mma.sync (m-tiles: the warp's units of each
// gate; n: 8 steps of a batch row; BB ceil(IN / 8) <= REGS_XK), into the warp's own part of the dynamic shared memory:
// W_ih's A fragments (3 ceil(IN / 8) 512 bytes a warp, staged once) and the chunk (REGS_CHUNK BB XS floats a warp). XS
// holds a (step, row)'s three gates of the warp's units and 4 floats more, so that the cells' loads of a step (rows 2
// tq (+1), units g (+8)) fall in 32 distinct banks; PROJ 2 (BB 8) pads by 2, two lanes a bank, for the block to fit in
// 227 KB (tinygrad_lite's _gru_projection_bytes). XS is a compile-time constant: known only at run time, it made the
// kernel 20% slower at (100, 256, 8, 128), BB 2 (H100). After the warps' parts comes x's chunk (REGS_CHUNK REGS_XB
// floats), which the block's threads load together a chunk ahead and store a step before the warps project it. No
// projection's launch; on the H100 the kernel at (100, 16, 32, 128) takes 64.8 us in float32 and 70.9 in float16,
// against 68.8 and 82.0 when each warp loaded its own copy of x into registers (PERF_NOTES.md).
template <typename T, int KT, int PROJ, int SPREAD>
__global__ void __launch_bounds__(gru::NT, 1)
gru_fwd_regs(const T* __restrict__ xg, const T* __restrict__ w_hh, const T* __restrict__ b_ih,
             const T* __restrict__ b_hh, const T* __restrict__ h0, T* out, T* __restrict__ gates,
             const T* __restrict__ x, const T* __restrict__ w_ih, int steps, int B, int H, int BB, int IN, int x_step,
             int x_row) {
    using namespace gru;
    constexpr bool SCALED = sizeof(T) == 4;
    constexpr int LDA = 16 * KT + 8;   // h's row stride, 16 bytes past a multiple of 32: ldmatrix's 8 rows, 8 banks
    __shared__ __align__(16) __half hs[2][8][LDA];
    __shared__ unsigned top;
    extern __shared__ __align__(16) float xs_all[];   // PROJ: W_ih's fragments, then the chunks
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3, u0 = 16 * (threadIdx.x >> 5);
    const int b0 = BB * blockIdx.x, bn = min(BB, B - b0);
    float h_scale = 1.f;
    if constexpr (SCALED) h_scale = operand_scale(h0, b0, bn, H, &top);
    if (SPREAD && BB != 1) __trap();   // (RegsCells<1>: blocks of one row)
    const RegsCells<SPREAD> cells{u0, g, tq, bn, H};
    unsigned wf[3][KT][4];   // gate q's A fragments: rows q H + u0 + g (+8) of W_hh
    float inv[3][2];         // 1 / (row scale times h's) of rows u0 + g + 8 e (RegsCells::own)
#pragma unroll
    for (int q = 0; q < 3; ++q) {
        float scale[2];
        a_fragments<KT>(wf[q], scale, w_hh + static_cast<size_t>(q * H + u0) * H, H - u0, H, H, 1);
#pragma unroll
        for (int e = 0; e < 2; ++e) inv[q][e] = 1.f / (scale[e] * h_scale);
        cells.own(inv[q]);
    }
    float bias[2][4] = {}, hp[4];   // bias[e]: unit_biases of the unit of cells 2 e and 2 e + 1
    T xv[4][3];   // step t's xg, as loaded (cell_step converts them)
#pragma unroll
    for (int e = 0; e < 2 - SPREAD; ++e)   // (SPREAD: a lane's one cell is c = 0)
        if (cells.unit(2 * e) < H) unit_biases(bias[e], b_ih, b_hh, H, cells.unit(2 * e));
    for (int i = threadIdx.x; i < 2 * 8 * LDA; i += blockDim.x) (&hs[0][0][0])[i] = __float2half_rn(0.f);
    __syncthreads();
    for (int i = threadIdx.x; i < bn * H && h0 != nullptr; i += blockDim.x)
        hs[0][i / H][i % H] = __float2half_rn(to_f(h0[static_cast<size_t>(b0) * H + i]) * h_scale);
#pragma unroll
    for (int c = 0; c < 4; ++c)
        hp[c] = cells.has(c) && h0 != nullptr
                    ? to_f(h0[static_cast<size_t>(b0 + cells.row(c)) * H + cells.unit(c)]) : 0.f;
    const int chunk_tiles = (IN + 7) / 8;   // PROJ: x's k-tiles of 8
    if (PROJ && bn * chunk_tiles > REGS_XK) __trap();   // (more B fragments than a lane holds)
    if (PROJ && (PROJ == 2) != (BB == 8)) __trap();   // (_gru_projection_bytes: XS 50 exactly at 8 rows)
    const int warp = threadIdx.x >> 5;
    uint4* ws = reinterpret_cast<uint4*>(xs_all) + warp * 3 * chunk_tiles * 32;   // W_ih's A fragments: [q][kt][lane]
    constexpr int xs_row = PROJ == 2 ? 50 : 52;
    float* xs = xs_all + NW * 3 * chunk_tiles * 128 + warp * REGS_CHUNK * BB * xs_row;   // [step][row][16 q + u - u0]
    // x's chunk, xb[step][8 (row chunk_tiles + kt) + k % 8]: thread i's column i % COLS at the chunk's steps i / COLS +
    // s NT / COLS, loaded into staged[s]
    unsigned* xb = reinterpret_cast<unsigned*>(xs_all) + NW * (3 * chunk_tiles * 128 + REGS_CHUNK * BB * xs_row);
    constexpr int COLS = 8 * REGS_XK, STAGED = REGS_CHUNK * COLS / NT;
    static_assert(NT % COLS == 0 && STAGED * NT == REGS_CHUNK * COLS, "x's chunk split unevenly");
    const auto chunk_step = [](int s) { return static_cast<int>(threadIdx.x) / COLS + s * (NT / COLS); };
    const int x_col = threadIdx.x % COLS, x_j = x_col / 8 / chunk_tiles, x_k = x_col % (8 * chunk_tiles);
    const bool x_has = PROJ && x_j < bn && x_k < IN;
    const T* x_at = x + (x_has ? static_cast<size_t>(b0 + x_j) * x_row + x_k : 0);
    T staged[STAGED];   // x's next chunk, as loaded
    const auto fetch = [&](int t0) {   // the chunk at steps [t0, t0 + REGS_CHUNK)
#pragma unroll
        for (int s = 0; s < STAGED; ++s) {
            const int t = t0 + chunk_step(s);
            staged[s] = x_has && t < steps ? ld_nc(x_at + static_cast<size_t>(t) * x_step) : from_f<T>(0.f);
        }
    };
    const auto stash = [&]() {   // into xb, as TF32
#pragma unroll
        for (int s = 0; s < STAGED; ++s) xb[chunk_step(s) * REGS_XB + x_col] = tf32(to_f(staged[s]));
    };
    const auto project = [&]() {   // xs = x W_ih^T at the chunk in xb, the warp's units, on TF32
        float acc[2][3][4] = {};   // [n-tile: 8 steps][gate]
#pragma unroll
        for (int m = 0; m < REGS_XK; ++m) {
            const int j = m / chunk_tiles, kt = m % chunk_tiles;
            if (j >= bn) break;
            unsigned a[3][4];
#pragma unroll
            for (int q = 0; q < 3; ++q) {
                const uint4 f = ws[(q * chunk_tiles + kt) * 32 + lane];
                a[q][0] = f.x, a[q][1] = f.y, a[q][2] = f.z, a[q][3] = f.w;
            }
#pragma unroll
            for (int e = 0; e < 2; ++e) {   // B: (k 8 kt + tq (+4), step 8 e + g)
                const unsigned* b = xb + (8 * e + g) * REGS_XB + 8 * m + tq;
#pragma unroll
                for (int q = 0; q < 3; ++q) mma_tf32(acc[e][q], a[q], b[0], b[4]);
            }
            if (kt < chunk_tiles - 1) continue;
#pragma unroll
            for (int e = 0; e < 2; ++e)
#pragma unroll
                for (int q = 0; q < 3; ++q)
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        xs[((8 * e + 2 * tq + (c & 1)) * BB + j) * xs_row + 16 * q + g + 8 * (c >> 1)] = acc[e][q][c];
                        acc[e][q][c] = 0.f;
                    }
        }
        __syncwarp();   // (every step of the chunk before was read a barrier ago)
    };
    if (PROJ && u0 < H) {   // W_ih's A fragments, TF32: (unit g (+8), k 8 kt + tq (+4)) of gate q
        for (int kt = 0; kt < chunk_tiles; ++kt)
#pragma unroll
            for (int q = 0; q < 3; ++q) {
                unsigned a[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int u = u0 + g + 8 * (i & 1), k = 8 * kt + tq + 4 * (i >> 1);
                    a[i] = tf32(u < H && k < IN ? to_f(ld_nc(w_ih + static_cast<size_t>(q * H + u) * IN + k)) : 0.f);
                }
                ws[(q * chunk_tiles + kt) * 32 + lane] = make_uint4(a[0], a[1], a[2], a[3]);
            }
        __syncwarp();
    }
    const auto load = [&](int t) {   // step t's xg of the thread's cells (issued a step ahead of their use)
        if constexpr (PROJ) {   // (x's next chunk loaded as soon as this one is projected: a chunk of steps ahead)
            if (t % REGS_CHUNK == 0) {
                if (u0 < H) project();
                if (t + REGS_CHUNK < steps) fetch(t + REGS_CHUNK);
            }
        }
#pragma unroll
        for (int c = 0; c < 4; ++c)
            if (cells.has(c)) {
                if constexpr (PROJ) {
                    const float* v = xs + ((t % REGS_CHUNK) * BB + cells.row(c)) * xs_row + cells.unit(c) - u0;
#pragma unroll
                    for (int q = 0; q < 3; ++q) xv[c][q] = from_f<T>(v[16 * q]);
                } else {
                    const T* p = xg + (static_cast<size_t>(t) * B + b0 + cells.row(c)) * 3 * H + cells.unit(c);
#pragma unroll
                    for (int q = 0; q < 3; ++q) xv[c][q] = ld_nc(p + q * H);
                }
            }
    };
    if constexpr (PROJ) {
        fetch(0);
        stash();
        __syncthreads();
    }
    if (steps > 0) load(0);
    __syncthreads();
    for (int t = 0; t < steps; ++t) {
        float acc[3][4] = {};
        if (u0 < H) {
#pragma unroll
            for (int kt = 0; kt < KT; ++kt) {
                unsigned hb[2];   // lanes 0-7: rows 0-7 at column 16 kt, lanes 8-15 at 16 kt + 8
                ldmatrix_x2(hb, &hs[t & 1][lane & 7][16 * kt + 8 * ((lane >> 3) & 1)]);
#pragma unroll
                for (int q = 0; q < 3; ++q) mma_f16(acc[q], wf[q][kt], hb[0], hb[1]);
            }
#pragma unroll
            for (int q = 0; q < 3; ++q) cells.spread(acc[q]);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c)
            if (cells.has(c)) {
                const int e = c >> 1;
                const float s[3] = {acc[0][c] * inv[0][e], acc[1][c] * inv[1][e], acc[2][c] * inv[2][e]};
                float r, z, n, hn;
                const T h = from_f<T>(cell_step<true>(xv[c], s, bias[e], hp[c], r, z, n, hn));
                hp[c] = to_f(h);
                const size_t cell = static_cast<size_t>(t) * B + b0 + cells.row(c);
                out[cell * H + cells.unit(c)] = h;
                keep_gates(gates, cell * 4 * H + cells.unit(c), H, r, z, n, hn);
                hs[(t + 1) & 1][cells.row(c)][cells.unit(c)] = __float2half_rn(hp[c] * h_scale);
            }
        if (PROJ && (t + 2) % REGS_CHUNK == 0 && t + 2 < steps) stash();   // (read at step t + 1, past the barrier)
        if (t + 1 < steps) load(t + 1);
        __syncthreads();
    }
}

// The backward with W_hh in registers (H <= 16 KT), as gru_fwd_regs: dh_{t-1}^T = W_hh^T dg_hh[t]^T, warp w's m-tile
// being units [16 w, 16 w + 16) over the 3H columns of dg_hh in 3 KT k-tiles (W_hh^T's rows), a lane's cells
// gru_fwd_regs'. dg_hh[t] reaches the product through shared memory as f16: float16 as written; float32 scaled by a
// power of two per batch row and step, half_scale of the row's largest magnitude, gathered by atomicMax into one of
// three sets of words (each cleared after the barrier two steps before its next use): each thread keeps its cells'
// values in registers till the step's barrier has gathered them, then stores them scaled, behind a second barrier (the
// B fragments converted from float32 values in the k loop instead: the H100's (100, 16, 32, 128) fwd+bwd took 287 us by
// replay, not 268; at hidden 64, KT 4, 379 against 385). W_hh^T's rows are scaled each by its own (a_fragments). (dg's
// magnitudes are not bounded as h's are, and a row's own scale keeps its small values from f16's subnormals when
// another row is large.) Arguments as gru_bwd_persistent's, but W_hh as it is (3H, H), not transposed; ceil(B / BB)
// blocks of gru::NT threads.
template <typename T, int KT, int SPREAD>
__global__ void __launch_bounds__(gru::NT, 1)
gru_bwd_regs(const T* __restrict__ dout, const T* __restrict__ gates, const T* __restrict__ out,
             const T* __restrict__ h0, const T* __restrict__ w_hh, T* __restrict__ dg_ih, T* __restrict__ dg_hh,
             T* __restrict__ dh0, float* __restrict__ bias_parts, int steps, int B, int H, int BB) {
    using namespace gru;
    constexpr bool SCALED = sizeof(T) == 4;
    constexpr int K = 3 * KT, LD = 48 * KT + 8;   // k-tiles; dg's row stride (16 bytes past 32 f16 ones; 8 banks)
    __shared__ __align__(16) __half ds[2][8][LD];
    __shared__ unsigned top[3][8];   // float32: the rows' largest magnitudes, by step modulo 3
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3, u0 = 16 * (threadIdx.x >> 5);
    const int b0 = BB * blockIdx.x, bn = min(BB, B - b0);
    if (SPREAD && BB != 1) __trap();   // (RegsCells<1>: blocks of one row)
    const RegsCells<SPREAD> cells{u0, g, tq, bn, H};
    unsigned wf[K][4];   // A fragments: W_hh^T's rows u0 + g (+8)
    float inv[2];        // 1 / their scales (RegsCells::own)
    a_fragments<K>(wf, inv, w_hh + u0, H - u0, 3 * H, 1, H);   // W_hh^T's rows: W_hh's columns
#pragma unroll
    for (int e = 0; e < 2; ++e) inv[e] = 1.f / inv[e];
    cells.own(inv);
    for (int i = threadIdx.x; i < 2 * 8 * LD; i += blockDim.x) (&ds[0][0][0])[i] = __float2half_rn(0.f);
    if (threadIdx.x < 3 * 8) (&top[0][0])[threadIdx.x] = 0u;
    T gv[4][4], hp[4], dv[4];   // step t - 1's inputs, as loaded (converted where used, as cell_step's x)
    float dh[4], carry[4], bias[4][4] = {}, kept[4][3];   // kept: float32's dg_hh values, till their rows' scales
    const auto load = [&](int t) {   // step t's gates, h_{t-1} and dout of the thread's cells
#pragma unroll
        for (int c = 0; c < 4; ++c)
            if (cells.has(c)) {
                const size_t cell = static_cast<size_t>(t) * B + b0 + cells.row(c);
#pragma unroll
                for (int q = 0; q < 4; ++q) gv[c][q] = ld_nc(gates + cell * 4 * H + q * H + cells.unit(c));
                hp[c] = t > 0 ? ld_nc(out + (cell - B) * H + cells.unit(c))
                        : h0 != nullptr ? ld_nc(h0 + static_cast<size_t>(b0 + cells.row(c)) * H + cells.unit(c))
                                        : from_f<T>(0.f);
                dv[c] = ld_nc(dout + cell * H + cells.unit(c));
            }
    };
    const auto grads = [&](int t, int s) {   // step t's: to dg_ih, dg_hh, ds[s & 1] and (float32) top[s % 3]
        float m[2] = {};   // rows 2 tq and 2 tq + 1
#pragma unroll
        for (int c = 0; c < 4; ++c)
            if (cells.has(c)) {
                T hh[3];
                const size_t cell = static_cast<size_t>(t) * B + b0 + cells.row(c);
                carry[c] = cell_grads(gv[c], hp[c], dh[c], hh, bias[c], dg_ih, dg_hh, cell * 3 * H + cells.unit(c), H);
#pragma unroll
                for (int q = 0; q < 3; ++q) {
                    if constexpr (SCALED) {
                        kept[c][q] = hh[q];
                        m[c & 1] = fmaxf(m[c & 1], fabsf(hh[q]));
                    } else {
                        ds[s & 1][cells.row(c)][q * H + cells.unit(c)] = hh[q];
                    }
                }
            }
        if constexpr (SCALED) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {   // over the lanes of the same tq, then one atomic a row and warp
                for (int o = 4; o < 32; o <<= 1) m[e] = fmaxf(m[e], __shfl_xor_sync(0xffffffffu, m[e], o));
                if (g == 0) atomicMax(&top[s % 3][cells.row(e)], __float_as_uint(m[e]));   // floats >= 0 order as bits
            }
        }
    };
    __syncthreads();   // ds and top zeroed
    if (steps > 0) {
        load(steps - 1);
#pragma unroll
        for (int c = 0; c < 4; ++c) dh[c] = to_f(dv[c]);
        grads(steps - 1, 0);
    }
    for (int s = 0; s < steps; ++s) {
        const int t = steps - 1 - s;   // this iteration: dh_{t-1} = dg_hh[t] W_hh + dh_t z (+ dout[t - 1])
        __syncthreads();
        if (threadIdx.x < 8) top[(s + 2) % 3][threadIdx.x] = 0u;
        if (t > 0) load(t - 1);   // used after the product
        float unscale[2] = {1.f, 1.f};   // float32: the inverse scales of rows 2 tq and 2 tq + 1
        if constexpr (SCALED) {   // the cells' kept values into ds, scaled (their rows' largest magnitudes gathered)
            float scale[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float m = __uint_as_float(top[s % 3][cells.row(e)]);
                scale[e] = half_scale(m);
                unscale[e] = half_unscale(m);
            }
#pragma unroll
            for (int c = 0; c < 4; ++c)
                if (cells.has(c)) {
#pragma unroll
                    for (int q = 0; q < 3; ++q)
                        ds[s & 1][cells.row(c)][q * H + cells.unit(c)] = __float2half_rn(kept[c][q] * scale[c & 1]);
                }
            __syncthreads();
        }
        float acc[3][4] = {};   // three chains of K products
        if (u0 < H) {
#pragma unroll
            for (int kt = 0; kt < K; ++kt) {
                unsigned hb[2];   // lanes 0-7: dg's rows 0-7 at column 16 kt, lanes 8-15 at 16 kt + 8
                ldmatrix_x2(hb, &ds[s & 1][lane & 7][16 * kt + 8 * ((lane >> 3) & 1)]);
                mma_f16(acc[kt % 3], wf[kt], hb[0], hb[1]);
            }
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[0][c] = acc[0][c] + acc[1][c] + acc[2][c];
            cells.spread(acc[0]);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c)
            if (cells.has(c)) {
                const float v = acc[0][c] * unscale[c & 1] * inv[c >> 1] + carry[c];
                dh[c] = t > 0 ? v + to_f(dv[c]) : v;
                if (t == 0 && dh0 != nullptr)
                    dh0[static_cast<size_t>(b0 + cells.row(c)) * H + cells.unit(c)] = from_f<T>(dh[c]);
            }
        if (t > 0) grads(t - 1, s + 1);
    }
#pragma unroll
    for (int c = 0; c < 4; ++c)
        if (cells.has(c) && bias_parts != nullptr)
            store_bias_sums(bias_parts, b0 + cells.row(c), cells.unit(c), H, bias[c]);
}

// dout (T, B, H); h0 may be null; w_hhT = W_hh^T (H, 3H). Writes dg_ih, dg_hh (T, B, 3H), dh0 (B, H) unless null and,
// where bias_parts is not null, the bias gradients' per-row sums (BwdCells::store_bias).
// nb * nu blocks of gru::NT threads, CL as for the forward (dg_hh[t] passed on in shared memory).
template <typename T, int TC, int CL>
__device__ __forceinline__ void gru_bwd_body(const T* __restrict__ dout, const T* __restrict__ gates,
                                             const T* __restrict__ out, const T* __restrict__ h0,
                                             const T* __restrict__ w_hhT, T* __restrict__ dg_ih, T* dg_hh,
                                             T* __restrict__ dh0, float* __restrict__ bias_parts,
                                             unsigned long long* flags, int steps, int B, int H, int nu, int J, int BB,
                                             int KC) {
    using namespace gru;
    const Block<T, false> bk(B, H, nu, J, BB, KC, CL ? 2 : 1);
    const Flags fl(CL == 0 ? flags : nullptr);
    const bool vec = H % (16 / sizeof(T)) == 0;
    copy_rows(bk.Ws, bk.ldw, bk.Jp, 3 * H, vec, [&](int u) -> const T* {
        return u < bk.jn ? w_hhT + static_cast<size_t>(bk.j0 + u) * 3 * H : nullptr;
    });
    weights_to_tf32<T, TC>(bk.Ws, bk.Jp * bk.ldw);
    if constexpr (CL != 0) {
        zero_operands(bk);
        cluster_sync();   // every block's buffers zeroed before any block writes into them
    }
    BwdCells<T> cells(0, bk.ncell, bk.jn, bk.b0, bk.j0);
    auto share = [&](int next) {   // after grads: the cluster kernels write dg_hh[t] into buffer `next` of every block
        return [&, next](int i, const T (&hh)[3]) {
            if constexpr (CL != 0)
#pragma unroll
                for (int q = 0; q < 3; ++q) share_operand<CL>(bk, next, cells.r[i], q * H + cells.j(i), hh[q]);
        };
    };
    typename BwdCells<T>::Inputs ahead;   // step t - 1's inputs while step t runs: loaded a step before they are used
    cells.load(cells.in, gates, out, h0, dout, steps - 1, B, H);
    if (steps > 1) cells.load(ahead, gates, out, h0, dout, steps - 2, B, H);
    cells.start();
    cells.grads(dg_ih, dg_hh, steps - 1, B, H, share(0));
    for (int s = 0; s < steps; ++s) {
        const int t = steps - 1 - s;   // this iteration: dh_{t-1} = dg_hh[t] W_hh + carry (+ dout[t-1])
        const auto load_next = [&] {
            if (t > 0) cells.in = ahead;
            if (t > 1) cells.load(ahead, gates, out, h0, dout, t - 2, B, H);
        };
        if constexpr (CL != 0)
            cluster_sync(load_next);
        else
            bk.sync(fl, nu, s + 1, load_next);
        if constexpr (CL != 0)
            kept_product<T, TC != 0>(bk, bk.As + (s & 1) * bk.MTp * bk.lda);
        else
            step_product<T, TC != 0>(bk, dg_hh + static_cast<size_t>(t) * B * 3 * H);
        cells.gather([&](int i, float v) {   // the warps' partial sums over k
            for (int kw = 0; kw < bk.kwn; ++kw) v += bk.red[bk.red_at(kw, 0, cells.r[i], cells.u[i])];
            return v;
        }, t > 0);
        if (t > 0)
            cells.grads(dg_ih, dg_hh, t - 1, B, H, share((s + 1) & 1));
        else
            cells.store_dh0(dh0, H);
    }
    cells.store_bias(bias_parts, H);
    if constexpr (CL == 0) fl.finish();
}

template <typename T, int TC>
__global__ void __launch_bounds__(gru::NT, 1)
gru_bwd_persistent(const T* __restrict__ dout, const T* __restrict__ gates, const T* __restrict__ out,
                   const T* __restrict__ h0, const T* __restrict__ w_hhT, T* __restrict__ dg_ih, T* dg_hh,
                   T* __restrict__ dh0, float* __restrict__ bias_parts, unsigned long long* flags, int steps, int B,
                   int H, int nu, int J, int BB, int KC) {
    gru_bwd_body<T, TC, 0>(dout, gates, out, h0, w_hhT, dg_ih, dg_hh, dh0, bias_parts, flags, steps, B, H, nu, J, BB,
                           KC);
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900   // as gru_fwd_cluster (nu and KC: CL and 3H)
template <typename T, int TC, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(gru::NT, 1)
gru_bwd_cluster(const T* __restrict__ dout, const T* __restrict__ gates, const T* __restrict__ out,
                const T* __restrict__ h0, const T* __restrict__ w_hhT, T* __restrict__ dg_ih, T* dg_hh,
                T* __restrict__ dh0, float* __restrict__ bias_parts, unsigned long long* flags, int steps, int B,
                int H, int nu, int J, int BB, int KC) {
    gru_bwd_body<T, TC, CL>(dout, gates, out, h0, w_hhT, dg_ih, dg_hh, dh0, bias_parts, flags, steps, B, H, CL, J, BB,
                            3 * H);
}

// The k-split backward (as gru_fwd_split; K = 3H): dh_{t-1}'s products over the block's k-slice of dg_hh[t].
template <typename T, int P, int WN>
__global__ void __cluster_dims__(P, 1, 1) __launch_bounds__(gru::NT, 1)
gru_bwd_split(const T* __restrict__ dout, const T* __restrict__ gates, const T* __restrict__ out,
              const T* __restrict__ h0, const T* __restrict__ w_hhT, T* __restrict__ dg_ih, T* dg_hh,
              T* __restrict__ dh0, float* __restrict__ bias_parts, unsigned long long* flags, int steps, int B, int H,
              int nu, int J, int BB, int KP, int KC) {
    using namespace gru;
    const Split<T, false, WN> bk(B, H, P, nu, J, BB, KP, KC);
    const Flags fl(flags);
    bk.stage_weights(w_hhT, H);
    weights_to_tf32<T, 1>(bk.Ws, bk.weight_count());
    BwdCells<T> cells(bk.c0, bk.c1, bk.jn, bk.b0, bk.j0);
    const auto no_share = [](int, const T (&)[3]) {};
    cells.load(cells.in, gates, out, h0, dout, steps - 1, B, H);
    cells.start();
    cells.grads(dg_ih, dg_hh, steps - 1, B, H, no_share);
    for (int s = 0; s < steps; ++s) {
        const int t = steps - 1 - s;
        fl.sync(blockIdx.x - blockIdx.x % (nu * P), nu * P, s + 1, [&] {   // also keeps red until the cluster read it
            if (t > 0) cells.load(cells.in, gates, out, h0, dout, t - 1, B, H);
        });
        bk.product(dg_hh + static_cast<size_t>(t) * B * 3 * H);
        cells.gather([&](int i, float v) { return v + bk.template cluster_sum<P>(cells.r[i], cells.u[i]); }, t > 0);
        if (t > 0)
            cells.grads(dg_ih, dg_hh, t - 1, B, H, no_share);
        else
            cells.store_dh0(dh0, H);
    }
    cells.store_bias(bias_parts, H);
    cluster_sync();
    fl.finish();
}
#endif

// Fallback, one step forward: hg = h_{t-1} W_hh^T (no bias) from cuBLAS; hprev (zeros) and gates may be null.
template <typename T>
__global__ void gru_gates_fwd(const T* __restrict__ xg, const T* __restrict__ hg, const T* __restrict__ b_ih,
                              const T* __restrict__ b_hh, const T* __restrict__ hprev, T* __restrict__ out,
                              T* __restrict__ gates, int B, int H) {
    using namespace gru;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < B * H; i += gridDim.x * blockDim.x) {
        const int b = i / H, j = i - b * H;
        const T* x = xg + static_cast<size_t>(b) * 3 * H + j;
        const T* h = hg + static_cast<size_t>(b) * 3 * H + j;
        float bi[3] = {0.f, 0.f, 0.f}, bh[3] = {0.f, 0.f, 0.f};
        for (int q = 0; q < 3; ++q) {
            if (b_ih != nullptr) bi[q] = to_f(b_ih[q * H + j]);
            if (b_hh != nullptr) bh[q] = to_f(b_hh[q * H + j]);
        }
        const float r = sigmoid(to_f(x[0]) + bi[0] + to_f(h[0]) + bh[0]);
        const float z = sigmoid(to_f(x[H]) + bi[1] + to_f(h[H]) + bh[1]);
        const float hn = to_f(h[2 * H]) + bh[2];
        const float n = tanhf(to_f(x[2 * H]) + bi[2] + r * hn);
        const float hp = hprev != nullptr ? to_f(hprev[i]) : 0.f;
        out[i] = from_f<T>(n + z * (hp - n));
        keep_gates(gates, static_cast<size_t>(b) * 4 * H + j, H, r, z, n, hn);
    }
}

// Fallback, one step backward: dh = carry + dout_t + dh_mm (dh_mm = dg_hh[t+1] W_hh from cuBLAS, null at
// the last step); writes dg_ih[t], dg_hh[t] and carry = dh z (float, in place). hprev may be null.
template <typename T>
__global__ void gru_gates_bwd(const T* __restrict__ dout_t, const T* __restrict__ dh_mm, float* __restrict__ carry,
                              const T* __restrict__ gates, const T* __restrict__ hprev, T* __restrict__ dg_ih,
                              T* __restrict__ dg_hh, int B, int H) {
    using namespace gru;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < B * H; i += gridDim.x * blockDim.x) {
        const int b = i / H, j = i - b * H;
        const T* g = gates + static_cast<size_t>(b) * 4 * H + j;
        const float r = to_f(g[0]), z = to_f(g[H]), n = to_f(g[2 * H]), hn = to_f(g[3 * H]);
        const float d = carry[i] + to_f(dout_t[i]) + (dh_mm != nullptr ? to_f(dh_mm[i]) : 0.f);
        const float hp = hprev != nullptr ? to_f(hprev[i]) : 0.f;
        const float daz = d * (hp - n) * z * (1.f - z);
        const float dan = d * (1.f - z) * (1.f - n * n);
        const float dar = dan * hn * r * (1.f - r);
        carry[i] = d * z;
        const size_t o = static_cast<size_t>(b) * 3 * H + j;
        dg_ih[o] = dg_hh[o] = from_f<T>(dar);
        dg_ih[o + H] = dg_hh[o + H] = from_f<T>(daz);
        dg_ih[o + 2 * H] = from_f<T>(dan);
        dg_hh[o + 2 * H] = from_f<T>(dan * r);
    }
}

// The bias gradients from the persistent backward's per-row sums (BwdCells::store_bias): column c of parts (B, 6H)
// summed over its B rows into db_ih[c] (c < 3H) or db_hh[c - 3H], a thread a column.
template <typename T>
__global__ void gru_bias_sums(const float* __restrict__ parts, T* __restrict__ db_ih, T* __restrict__ db_hh, int B,
                              int H) {
    using namespace gru;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < 6 * H; c += gridDim.x * blockDim.x) {
        float sum = 0.f;
        for (int b = 0; b < B; ++b) sum += parts[static_cast<size_t>(b) * 6 * H + c];
        (c < 3 * H ? db_ih[c] : db_hh[c - 3 * H]) = from_f<T>(sum);
    }
}

// ===== conv: layouts, im2col/col2im, direct, implicit GEMM (mma.sync, wgmma, TMA) =====
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
    PixelWalk at(r, R, Ho, Wo);
    const long long rows = (long long)N * Ho * Wo;
    const U* __restrict__ src = reinterpret_cast<const U*>(x);
    U* __restrict__ dst = reinterpret_cast<U*>(cols);
    for (long long m0 = r; m0 < rows; m0 += (long long)B * R) {
        U v[B];
#pragma unroll
        for (int u = 0; u < B; ++u) {
            const int hi = at.ho * sh - ph + i, wi = at.wo * sw - pw + j;
            v[u] = U{};
            if (m0 + (long long)u * R < rows && (unsigned)hi < (unsigned)H && (unsigned)wi < (unsigned)W)
                v[u] = src[(((long long)at.n * H + hi) * W + wi) * CV + cv];
            at.advance(Ho, Wo);
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
        const auto [n, h, w, cv] = pixel_of(t, H, W, CV);
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

// A conv weight w (C_out, C, kh, kw), read through its element strides, as the products' matrix flat (C_out,
// (i, j, c)) and, where flipped is not null, as the stride-1 input gradient's (C, (i, j, o)) matrix of w flipped
// in both window axes: flipped[c, (kh-1-i, kw-1-j, o)] = w[o, c, i, j]. A thread per element, in flat's order.
template <typename T>
__global__ void conv_weight_layouts(const T* __restrict__ w, long long so, long long sc, long long si, long long sj,
                                    T* __restrict__ flat, T* __restrict__ flipped, int cout, int c, int kh, int kw) {
    const long long total = (long long)cout * c * kh * kw;
    for (long long t = global_id(); t < total; t += global_threads()) {
        const int ci = t % c, j = t / c % kw, i = t / c / kw % kh, o = t / c / kw / kh;
        const T v = w[o * so + ci * sc + i * si + j * sj];
        flat[t] = v;
        if (flipped) flipped[(((long long)ci * kh + kh - 1 - i) * kw + kw - 1 - j) * cout + o] = v;
    }
}

// Direct convolution. A conv whose window holds few values (K = C kh kw <= KMAX: the whitening conv's 12) makes
// products too thin for cuBLAS (a million rows of 12), so its passes run directly on x and dy, read through
// their element strides (sn, sc, sh, sw) in any layout. k = (i kw + j) C + c orders a window's values as
// im2col's columns; window value k of the window whose corner is (h0, w0) = (ho sy - py, wo sx - px) lies at
// offset (h0 sh + w0 sw) + Tap::off of image n, inside the image where its tap (i, j) is. A window wholly
// inside the image (every window of an unpadded conv) reads its values without checks.
namespace direct {
constexpr int KMAX = 32, COMAX = 128;   // the host's limits for this path
constexpr int CT = 8, KT = 4, CI = 4;   // per thread: output channels (forward, dW), window values (dW), dx channels
}

struct Window {
    int h0, w0;
    long long corner;   // the offset of (n, h0, w0) in x
    bool whole;         // every tap inside the image
};

__device__ __forceinline__ Window window_at(int n, int ho, int wo, long long sn, long long sh, long long sw,
                                            int H, int W, int kh, int kw, int sy, int sx, int py, int px)
{
    Window q;
    q.h0 = ho * sy - py;
    q.w0 = wo * sx - px;
    q.corner = n * sn + q.h0 * sh + q.w0 * sw;
    q.whole = q.h0 >= 0 && q.w0 >= 0 && q.h0 + kh <= H && q.w0 + kw <= W;
    return q;
}

// Tap (i, j) and offset from the corner of window value k.
struct Tap {
    int i, j;
    long long off;
};

__device__ __forceinline__ Tap tap_of(int k, int C, int kw, long long sc, long long sh, long long sw)
{
    Tap t;
    t.i = k / (C * kw);
    t.j = (k / C) % kw;
    t.off = (k % C) * sc + t.i * sh + t.j * sw;
    return t;
}

template <typename T, typename A>
__device__ __forceinline__ A window_value(const T* x, const Window& q, const Tap& t, int H, int W)
{
    const bool inside = q.whole || ((unsigned)(q.h0 + t.i) < (unsigned)H && (unsigned)(q.w0 + t.j) < (unsigned)W);
    return inside ? A(x[q.corner + t.off]) : A(0);
}

// The weight (C_out, C, kh, kw) in shared memory as ws[k * COMAX + co], zero past C_out.
template <typename T, typename A>
__device__ __forceinline__ void load_weights(const T* w, A* ws, int C, int kh, int kw, int Co)
{
    const int K = C * kh * kw;
    for (int t = threadIdx.x; t < K * direct::COMAX; t += blockDim.x) {
        const int k = t / direct::COMAX, co = t % direct::COMAX, c = k % C, j = (k / C) % kw, i = k / (C * kw);
        ws[t] = co < Co ? A(w[(((long long)co * C + c) * kh + i) * kw + j]) : A(0);
    }
}

// y[n, ho, wo, co] (NHWC memory) = bias[co] + sum_k window_k(n, ho, wo) w[co, k]: a thread per pixel and CT
// output channels, the window's values loaded four at a time before their products.
template <typename T>
__global__ void conv_direct_fwd(const T* __restrict__ x, long long sn, long long sc, long long sh, long long sw,
                                const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ y, int N, int C,
                                int H, int W, int Co, int Ho, int Wo, int kh, int kw, int sy, int sx, int py, int px)
{
    using A = acc_t<T>;
    using namespace direct;
    __shared__ __align__(16) A ws[KMAX * COMAX];
    __shared__ Tap taps[KMAX];
    const int K = C * kh * kw, G = (Co + CT - 1) / CT;
    load_weights(w, ws, C, kh, kw, Co);
    for (int k = threadIdx.x; k < K; k += blockDim.x) taps[k] = tap_of(k, C, kw, sc, sh, sw);
    __syncthreads();
    const long long total = (long long)N * Ho * Wo * G;
    for (long long t = global_id(); t < total; t += global_threads()) {
        const auto [n, ho, wo, q] = pixel_of(t, Ho, Wo, G);
        const int co0 = q * CT;
        const Window win = window_at(n, ho, wo, sn, sh, sw, H, W, kh, kw, sy, sx, py, px);
        Pack<A, CT> acc;
#pragma unroll
        for (int u = 0; u < CT; ++u) acc.v[u] = bias && co0 + u < Co ? A(bias[co0 + u]) : A(0);
        for (int k0 = 0; k0 < K; k0 += 4) {
            A v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) v[u] = k0 + u < K ? window_value<T, A>(x, win, taps[k0 + u], H, W) : A(0);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                if (k0 + u >= K) break;
                const Pack<A, CT> wv = load_pack<CT>(ws + (k0 + u) * COMAX + co0);
#pragma unroll
                for (int e = 0; e < CT; ++e) acc.v[e] = fma_acc(v[u], wv.v[e], acc.v[e]);
            }
        }
        T* yp = y + (((long long)n * Ho + ho) * Wo + wo) * Co + co0;
        if (co0 + CT <= Co && aligned16(yp)) {
            Pack<T, CT> out;
#pragma unroll
            for (int u = 0; u < CT; ++u) out.v[u] = T(acc.v[u]);
            store_pack<CT>(yp, out);
        } else {
#pragma unroll
            for (int u = 0; u < CT; ++u)
                if (co0 + u < Co) yp[u] = T(acc.v[u]);
        }
    }
}

// v[e] = d[(co + e) dc] for e < 4 (0 past C_out): one load where d is channels-last and aligned.
template <typename T, typename A>
__device__ __forceinline__ void load_four(const T* d, long long dc, int co, int Co, A (&v)[4])
{
    if (dc == 1 && co + 4 <= Co && (reinterpret_cast<unsigned long long>(d + co) % alignof(Pack<T, 4>)) == 0) {
        const Pack<T, 4> p = load_pack<4>(d + co);
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = A(p.v[e]);
    } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = co + e < Co ? A(d[(co + e) * dc]) : A(0);
    }
}

// dx[n, c, h, w] = sum over the windows (ho, wo) holding pixel (h, w) at tap (i, j) of
// sum_co dy[n, co, ho, wo] w[co, c, i, j]: a thread per pixel and CI channels, each load of dy serving them
// all. dx's memory is NCHW or, where channels_last, NHWC; consecutive threads take consecutive pixels.
template <typename T>
__global__ void conv_direct_dx(const T* __restrict__ dy, long long gn, long long gc, long long gh, long long gw,
                               const T* __restrict__ w, T* __restrict__ dx, int channels_last, int N, int C,
                               int H, int W, int Co, int Ho, int Wo, int kh, int kw, int sy, int sx, int py, int px)
{
    using A = acc_t<T>;
    using namespace direct;
    __shared__ __align__(16) A ws[KMAX * COMAX];
    load_weights(w, ws, C, kh, kw, Co);
    __syncthreads();
    const int CG = (C + CI - 1) / CI;
    const long long total = (long long)N * H * W * CG;
    for (long long t = global_id(); t < total; t += global_threads()) {
        int n, h, wx, g;
        if (channels_last) {
            const Pixel p = pixel_of(t, H, W, CG);
            n = p.n, h = p.h, wx = p.w, g = p.cv;
        } else {
            const Pixel p = pixel_of(t, CG, H, W);   // (n, g, h, w) read as (n, h, w, cv)
            n = p.n, g = p.h, h = p.w, wx = p.cv;
        }
        const int c0 = g * CI, nc = min(CI, C - c0);
        int i0, iend, j0, jend;
        taps_over(h + py, kh, sy, Ho, i0, iend);
        taps_over(wx + px, kw, sx, Wo, j0, jend);
        A acc[CI] = {};
        for (int i = i0; i < iend; i += sy)
            for (int j = j0; j < jend; j += sx) {
                const T* d = dy + n * gn + ((h + py - i) / sy) * gh + ((wx + px - j) / sx) * gw;
                const A* wk = ws + ((i * kw + j) * C + c0) * COMAX;
                for (int co = 0; co < Co; co += 4) {
                    A dv[4];
                    load_four(d, gc, co, Co, dv);
#pragma unroll
                    for (int cc = 0; cc < CI; ++cc) {
                        if (cc >= nc) break;
                        const Pack<A, 4> wv = load_pack<4>(wk + cc * COMAX + co);
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[cc] = fma_acc(dv[e], wv.v[e], acc[cc]);
                    }
                }
            }
#pragma unroll
        for (int cc = 0; cc < CI; ++cc) {
            if (cc >= nc) break;
            const long long at = channels_last ? (((long long)n * H + h) * W + wx) * C + c0 + cc
                                               : (((long long)n * C + c0 + cc) * H + h) * W + wx;
            dx[at] = T(acc[cc]);
        }
    }
}

// The (Kw + 1) x C_out sums S[k, co] = sum over pixels of window_k dy[.., co], row Kw the bias's (window_Kw =
// 1): dW = S[:Kw] (Kw = K, or 0 for db alone), db = S[Kw]. A thread owns a KT x CT tile (slot) of S; the
// block's threads are lanes of `slots` threads, each lane taking every lanes-th pixel of the block's range
// (a PixelWalk), two pixels' loads issued before their products. The lanes' tiles are
// summed in a tree through shared memory and the block's partial stored at part[block][slot][KT][CT], for
// conv_direct_dw_fold.
template <typename T>
__global__ void __launch_bounds__(256, sizeof(T) > 4 ? 1 : 2)   // float, __half: 2 blocks per SM (8-12 bytes spill)
conv_direct_dw(const T* __restrict__ x, long long sn, long long sc, long long sh, long long sw,
               const T* __restrict__ dy, long long gn, long long gc, long long gh, long long gw,
               acc_t<T>* __restrict__ part, int Kw, int N, int C, int H, int W, int Co, int Ho, int Wo,
               int kh, int kw, int sy, int sx, int py, int px)
{
    using A = acc_t<T>;
    using namespace direct;
    constexpr int U = 2, TILE = KT * CT;
    const int CB = (Co + CT - 1) / CT, slots = (Kw / KT + 1) * CB, lanes = blockDim.x / slots;
    const int s = threadIdx.x % slots, lane = threadIdx.x / slots, k0 = s / CB * KT, co0 = s % CB * CT;
    Tap tap[KT];
#pragma unroll
    for (int u = 0; u < KT; ++u) tap[u] = tap_of(min(k0 + u, Kw), C, kw, sc, sh, sw);
    A acc[KT][CT] = {};
    const long long P = (long long)N * Ho * Wo, p1 = P * (blockIdx.x + 1) / gridDim.x;
    long long p = P * blockIdx.x / gridDim.x + lane;
    PixelWalk at(p, lanes, Ho, Wo);
    for (; lane < lanes && p < p1; p += U * lanes) {
        A v[U][KT], d[U][CT];
#pragma unroll
        for (int r = 0; r < U; ++r) {
            const bool in = p + r * lanes < p1;
            const Window win = window_at(at.n, at.ho, at.wo, sn, sh, sw, H, W, kh, kw, sy, sx, py, px);
            const T* dp = dy + at.n * gn + at.ho * gh + at.wo * gw + co0 * gc;
            if (in && gc == 1 && co0 + CT <= Co && aligned16(dp)) {
                const Pack<T, CT> dv = load_pack<CT>(dp);
#pragma unroll
                for (int e = 0; e < CT; ++e) d[r][e] = A(dv.v[e]);
            } else {
#pragma unroll
                for (int e = 0; e < CT; ++e) d[r][e] = in && co0 + e < Co ? A(dp[e * gc]) : A(0);
            }
#pragma unroll
            for (int u = 0; u < KT; ++u)
                v[r][u] = !in || k0 + u > Kw ? A(0) : k0 + u == Kw ? A(1) : window_value<T, A>(x, win, tap[u], H, W);
            at.advance(Ho, Wo);
        }
#pragma unroll
        for (int r = 0; r < U; ++r)
#pragma unroll
            for (int u = 0; u < KT; ++u)
#pragma unroll
                for (int e = 0; e < CT; ++e) acc[u][e] = fma_acc(v[r][u], d[r][e], acc[u][e]);
    }
    // the lanes' tiles summed in a tree: the upper half of the remaining lanes hands its tiles to the lower
    __shared__ A half[(256 / 2) * TILE];   // blocks of up to 256 threads
    for (int live = lanes; live > 1;) {
        const int keep = (live + 1) / 2;
        if (lane >= keep && lane < live)
#pragma unroll
            for (int u = 0; u < KT; ++u)
#pragma unroll
                for (int e = 0; e < CT; ++e) half[((lane - keep) * slots + s) * TILE + u * CT + e] = acc[u][e];
        __syncthreads();
        if (lane < live - keep)
#pragma unroll
            for (int u = 0; u < KT; ++u)
#pragma unroll
                for (int e = 0; e < CT; ++e) acc[u][e] += half[(lane * slots + s) * TILE + u * CT + e];
        __syncthreads();
        live = keep;
    }
    if (lane == 0)
#pragma unroll
        for (int u = 0; u < KT; ++u)
#pragma unroll
            for (int e = 0; e < CT; ++e) part[((long long)blockIdx.x * slots + s) * TILE + u * CT + e] = acc[u][e];
}

// dw (C_out, C, kh, kw) and db (where given) from conv_direct_dw's partials of `blocks` blocks: each block of
// this kernel takes 32 of the sums, its warps every 8th partial of each, added in double in a fixed order.
template <typename T>
__global__ void conv_direct_dw_fold(const acc_t<T>* __restrict__ part, int blocks, T* __restrict__ dw,
                                    T* __restrict__ db, int Kw, int C, int Co, int kh, int kw)
{
    using namespace direct;
    constexpr int TILE = KT * CT;
    __shared__ double sums[8][32];
    const int CB = (Co + CT - 1) / CT, per_block = (Kw / KT + 1) * CB * TILE;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int o = blockIdx.x * 32 + lane;
    double a[4] = {};
    if (o < per_block) {
        int b = warp;
        for (; b + 3 * warps < blocks; b += 4 * warps)
#pragma unroll
            for (int r = 0; r < 4; ++r) a[r] += double(part[(long long)(b + r * warps) * per_block + o]);
        for (; b < blocks; b += warps) a[0] += double(part[(long long)b * per_block + o]);
    }
    sums[warp][lane] = (a[0] + a[1]) + (a[2] + a[3]);
    __syncthreads();
    if (warp != 0 || o >= per_block) return;
    double total = 0;
    for (int r = 0; r < warps; ++r) total += sums[r][lane];
    const int so = o / TILE, k = so / CB * KT + o % TILE / CT, co = so % CB * CT + o % CT;
    if (co >= Co || k > Kw) return;
    if (k < Kw)
        dw[(((long long)co * C + k % C) * kh + k / (C * kw)) * kw + (k / C) % kw] = T(total);
    else if (db)
        db[co] = T(total);
}

// ----- Implicit GEMM (float16, and float32 as TF32, on the tensor cores): im2col's products without its matrix.
// Forward y[m, o] = sum_k cols[m, k] w2[o, k] with x channels-last and cols as im2col's: a block computes a
// BM x BN tile of y; per k-step of BK it copies the BM x BK slice of cols straight from x (cp.async, zeros
// outside the image; through L1 it measured no faster) and w2's BN x BK slice into shared memory, STAGES
// steps in flight, and its warps, each owning a TM x TN tile of y, multiply them with mma (m16n8k16 for float16,
// m16n8k8 TF32 for float) accumulating in float.
// The input gradient of a stride-1 conv is this forward run on dy with the flipped weight (C and C_out
// swapped, padding k - 1 - p). Weight gradient dw2[o, k] = sum_m dy[m, o] cols[m, k]: a block owns a
// WO x WK tile of (o, k) and a range of m (its split), WM rows a step, with 8 warps as 2 x 4; its float sums
// go to part[split], which conv_dw_fold adds up in order (deterministic). Channels (C, and C_out
// for the gradients) are multiples of E = 16 / sizeof(T): a 16-byte granule of cols lies in one tap. Shared
// tiles are rows of 16-byte granules, granule g of row r stored at g ^ swizzle(r), so that ldmatrix's 8 rows
// at one granule fall in 8 distinct bank groups. A k-step of the forward is BK_BYTES of a row whatever T: the
// same granules and ldmatrix addresses serve float16 (m16n8k16) and TF32 (m16n8k8, whose fragments ldmatrix
// reads as pairs of 16-bit halves); dW's transposed fragments need 16-bit elements, so TF32 loads them one by one.
namespace implicit {

enum { NT = 256, BK_BYTES = 64, STAGES = 4, WM = 32 };

// index of granule g of row r in a tile of G granules per row: 64-byte rows (G = 4) pair up in 128 bytes
template <int G> __device__ __forceinline__ int granule_at(int r, int g) {
    return r * G + (G >= 8 ? g ^ (r & 7) : g ^ ((r >> 1) & 3));
}

// A granule's tap (i, j) and channel c of cols' column k, moved on by `step` columns at a time.
struct TapWalk {
    int c, i, j;
    TapWalk() = default;
    __device__ __forceinline__ TapWalk(int k, int C, int kw) : c(k % C), i(k / C / kw), j(k / C % kw) {}
    __device__ __forceinline__ void advance(int step, int C, int kw) {
        for (c += step; c >= C; c -= C)
            if (++j == kw) { j = 0; ++i; }
    }
};

// The forward's copies (conv_implicit_fwd's and conv_implicit_wg's): thread tid copies granule g = tid % G of tile
// rows tid / G + ROWS a of x's tile (their window's corner (top, left), as an offset into x that may lie outside the
// image: only pixels inside are read), and granule g of w2's rows o0 + tid / G + ROWS b, at k = s BK + E g in step
// s, into tiles of rows of G granules (granule_at<G>). 32-bit offsets: the host keeps x and w2 below 2^31.
template <typename T, int G, int ROWS, int BM, int BN> struct ForwardCopies {
    static constexpr int E = 16 / sizeof(T), BK = G * E, AR = BM / ROWS, BR = (BN + ROWS - 1) / ROWS;
    static_assert(BM % ROWS == 0, "whole passes over the rows of x's tile");
    int g, row, corner[AR], top[AR], left[AR], w_row[BR];
    TapWalk tap;
    __device__ __forceinline__ ForwardCopies(int tid, long long m0, long long M, int o0, int Co, int K, int H, int W,
                                             int C, int Ho, int Wo, int kw, int sh, int sw, int ph, int pw)
        : g(tid % G), row(tid / G), tap(tid % G * E, C, kw) {
#pragma unroll
        for (int a = 0; a < AR; ++a) {
            const long long m = m0 + row + ROWS * a;
            const Pixel p = pixel_of(m < M ? m : 0, Ho, Wo, 1);
            top[a] = p.h * sh - ph, left[a] = p.w * sw - pw;
            corner[a] = ((p.n * H + top[a]) * W + left[a]) * C;
            top[a] = m < M ? top[a] : -(1 << 29);   // a row past M reads zeros
        }
#pragma unroll
        for (int b = 0; b < BR; ++b) {
            const int o = o0 + row + ROWS * b;
            w_row[b] = o < Co ? o * K + g * E : -(1 << 30);   // a row past C_out reads zeros
        }
    }
    // step s into a_tile and b_tile (the steps in order: the tap walks on)
    __device__ __forceinline__ void load(uint4* a_tile, uint4* b_tile, int s, const T* x, const T* w2, int K, int H,
                                         int W, int C, int kw) {
        const bool k_ok = s * BK + g * E < K;
        const int at_tap = (tap.i * W + tap.j) * C + tap.c;
#pragma unroll
        for (int a = 0; a < AR; ++a) {
            const bool ok = k_ok && (unsigned)(top[a] + tap.i) < (unsigned)H && (unsigned)(left[a] + tap.j) < (unsigned)W;
            cp_async16_or_zero(a_tile + granule_at<G>(row + ROWS * a, g), x + (ok ? corner[a] + at_tap : 0), ok);
        }
#pragma unroll
        for (int b = 0; b < BR; ++b) {
            const bool ok = k_ok && w_row[b] >= 0;
            if (BN % ROWS == 0 || row + ROWS * b < BN)
                cp_async16_or_zero(b_tile + granule_at<G>(row + ROWS * b, g), w2 + (ok ? w_row[b] + s * BK : 0), ok);
        }
        tap.advance(BK, C, kw);
    }
};

// The tensor-core product of T: d += a b on fragments of 32-bit registers, an mma's k extent K.
template <typename T> struct TensorOp;
template <> struct TensorOp<__half> {
    static constexpr int K = 16;
    __device__ static void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { mma_f16(d, a, b0, b1); }
};
template <> struct TensorOp<float> {   // fragments rounded to TF32 (PyTorch's allow_tf32)
    static constexpr int K = 8;
    __device__ static void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
        const unsigned r[4] = {tf32(__uint_as_float(a[0])), tf32(__uint_as_float(a[1])), tf32(__uint_as_float(a[2])),
                               tf32(__uint_as_float(a[3]))};
        mma_tf32(d, r, tf32(__uint_as_float(b0)), tf32(__uint_as_float(b1)));
    }
};

// acc[mi][ni] += A B over KSTEPS mma k-steps of T: A's rows from a(mi, lane, kk) and B's pairs of n-tiles from
// b(nj, lane, kk), each giving the shared address of the lane's ldmatrix row.
template <typename T, bool TRANS, int MI, int NI, int KSTEPS, typename FA, typename FB>
__device__ __forceinline__ void tile_products(float (&acc)[MI][NI][4], FA a, FB b) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        unsigned af[MI][4], bf[NI][2];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) ldmatrix_x4<TRANS>(af[mi], a(mi, lane, kk));
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {
            unsigned r[4];
            ldmatrix_x4<TRANS>(r, b(nj, lane, kk));
            bf[2 * nj][0] = r[0], bf[2 * nj][1] = r[1], bf[2 * nj + 1][0] = r[2], bf[2 * nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) TensorOp<T>::mma(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
    }
}

__device__ __forceinline__ void store_pair(__half* p, float a, float b) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ void store_pair(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }

// conv_implicit_dw's products in TF32 over WM rows m: acc[mi][ni] += dy^T cols, with dy's tile (WM rows of GO
// granules, 4 floats each) and cols' (GK granules) read value by value: lane 4 g + t takes A[o][m] = dy[m][o] at
// (o, m) = (wo + 16 mi + g + 8 (r & 1), 8 kk + t + 4 (r >> 1)) and B[m][k] = cols[m][k] at (8 kk + t + 4 r, wk + 8 ni + g).
template <int MI, int NI, int GO, int GK>
__device__ __forceinline__ void tf32_transposed_products(float (&acc)[MI][NI][4], const float* d, const float* c, int wo,
                                                         int wk) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    auto d_at = [&](int row, int col) { return d[granule_at<GO>(row, col / 4) * 4 + col % 4]; };
    auto c_at = [&](int row, int col) { return c[granule_at<GK>(row, col / 4) * 4 + col % 4]; };
#pragma unroll
    for (int kk = 0; kk < WM / 8; ++kk) {
        unsigned af[MI][4], bf[NI][2];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int r = 0; r < 4; ++r) af[mi][r] = __float_as_uint(d_at(8 * kk + t + 4 * (r >> 1), wo + 16 * mi + g + 8 * (r & 1)));
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int r = 0; r < 2; ++r) bf[ni][r] = __float_as_uint(c_at(8 * kk + t + 4 * r, wk + 8 * ni + g));
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) TensorOp<float>::mma(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
    }
}

// The k-steps of a block: load(stage, s) copies step s into a stage, compute(stage) multiplies one;
// STAGES - 1 steps in flight while one is multiplied.
template <typename FL, typename FC>
__device__ __forceinline__ void pipeline(int steps, FL load, FC compute) {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < steps) load(s, s);
        cp_async_commit();
    }
    for (int s = 0; s < steps; ++s) {
        cp_async_wait_groups<STAGES - 2>();
        __syncthreads();   // step s has landed; every warp is done with step s - 1's stage, refilled next
        if (s + STAGES - 1 < steps) load((s + STAGES - 1) % STAGES, s + STAGES - 1);
        cp_async_commit();
        compute(s % STAGES);
    }
    cp_async_wait();
}

}  // namespace implicit

// A block of (BM / TM) x (BN / TN) warps, each owning a TM x TN tile of y: 32 threads per warp. Dynamic shared
// memory: STAGES x (BM + BN) x BK_BYTES.
template <typename T, int BM, int BN, int TM, int TN>
__global__ void __launch_bounds__(32 * (BM / TM) * (BN / TN), 2)
conv_implicit_fwd(const T* __restrict__ x, const T* __restrict__ w2, const T* __restrict__ bias, T* __restrict__ y,
                  int N, int H, int W, int C, int Co, int Ho, int Wo, int kh, int kw, int sh, int sw, int ph, int pw)
{
    using namespace implicit;
    constexpr int E = 16 / sizeof(T), BK = BK_BYTES / sizeof(T);   // values per granule, per k-step
    constexpr int WARPS_M = BM / TM, THREADS = 32 * WARPS_M * (BN / TN);
    constexpr int G = BK / E, ROWS = THREADS / G;   // granules per tile row; rows one pass of the threads covers
    constexpr int MI = TM / 16, NI = TN / 8;        // a warp's tile in mma tiles
    extern __shared__ __align__(128) uint4 implicit_smem[];
    uint4* const As = implicit_smem;                  // [STAGES][BM * G]
    uint4* const Bs = implicit_smem + STAGES * BM * G;   // [STAGES][BN * G]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long M = (long long)N * Ho * Wo, m0 = (long long)blockIdx.x * BM;
    const int K = kh * kw * C, o0 = blockIdx.y * BN;
    ForwardCopies<T, G, ROWS, BM, BN> copies(tid, m0, M, o0, Co, K, H, W, C, Ho, Wo, kw, sh, sw, ph, pw);
    auto load = [&](int stage, int s) { copies.load(As + stage * BM * G, Bs + stage * BN * G, s, x, w2, K, H, W, C, kw); };

    float acc[MI][NI][4] = {};
    const int wm = warp % WARPS_M * TM, wn = warp / WARPS_M * TN;
    pipeline((K + BK - 1) / BK, load, [&](int stage) {
        const uint4* a_tile = As + stage * BM * G;
        const uint4* b_tile = Bs + stage * BN * G;
        tile_products<T, false, MI, NI, BK_BYTES / 32>(
            acc, [&](int mi, int l, int kk) { return &a_tile[granule_at<G>(wm + mi * 16 + (l & 15), 2 * kk + (l >> 4))]; },
            [&](int nj, int l, int kk) {
                return &b_tile[granule_at<G>(wn + nj * 16 + (l & 7) + (l >> 4) * 8, 2 * kk + (l >> 3 & 1))];
            });
    });

    const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
        const int o = o0 + wn + ni * 8 + 2 * tq;
        const float b0 = bias && o < Co ? float(bias[o]) : 0.f, b1 = bias && o < Co ? float(bias[o + 1]) : 0.f;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const long long m = m0 + wm + mi * 16 + gq + 8 * half;
                if (m >= M || o >= Co) continue;
                store_pair(y + m * Co + o, acc[mi][ni][2 * half] + b0, acc[mi][ni][2 * half + 1] + b1);   // C_out is even
            }
    }
}

// ----- The implicit-GEMM conv on Hopper's warpgroup products (wgmma, sm_90a: the helpers' hopper::), in modules
// built as the helpers say.

// Blocks an SM for the wgmma kernels' launch bounds: two where STAGES stages of `rows` 128-byte rows (+ 1024 bytes
// to align them) fit twice in the SM's 227 KB of shared memory
constexpr int wg_blocks(int rows, int stages) { return 2 * (stages * rows * 128 + 1024) <= 232448 ? 2 : 1; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The products and output of conv_implicit_wg and conv_implicit_tma: multiplying warpgroup `group` (0 or 1) of a block
// owns the m-tiles of 64 rows 2 t + group of the block's MT x 128 rows m by BN output channels (products of NN = 64
// or 128 columns), from K-major tiles of 128-byte rows in the 128-byte swizzle.
template <typename T, int BN, int MT> struct ForwardTile {
    static constexpr int NN = BN < 128 ? BN : 128, NT = BN / NN, REGS = NN / 2;
    float d[MT][NT][REGS];   // written by the first step's products

    // d (+)= a k-step's products (the A rows at a_tile, B at b_tile); returns once the previous step's are done
    __device__ __forceinline__ void products(unsigned a_tile, unsigned b_tile, bool first) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int k = 0; k < 4; ++k)   // k-steps of 32 bytes a row
#pragma unroll
            for (int t = 0; t < MT; ++t)
#pragma unroll
                for (int n = 0; n < NT; ++n)
                    hopper::Wgmma<T, NN>::mma(d[t][n], hopper::operand(a_tile + t * 128 * 128 + 32 * k),
                                              hopper::operand(b_tile + n * NN * 128 + 32 * k), !first || k);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");   // the previous step's products are done
    }

    // once the last products are done: y rows m0 + ... (below M) = d (+ bias)
    __device__ __forceinline__ void store(T* y, const T* bias, long long m0, long long M, int o0, int Co, int group) {
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
        for (int t = 0; t < MT; ++t)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int i = 0; i < REGS; ++i) asm volatile("" : "+f"(d[t][n][i])::"memory");   // no read above the wait
        const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, gq = lane >> 2, tq = lane & 3;
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < NN / 8; ++i) {
                const int o = o0 + n * NN + 8 * i + 2 * tq;
                const float b0 = bias && o < Co ? float(bias[o]) : 0.f, b1 = bias && o < Co ? float(bias[o + 1]) : 0.f;
#pragma unroll
                for (int t = 0; t < MT; ++t)
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const long long m = m0 + (2 * t + group) * 64 + warp * 16 + gq + 8 * half;
                        if (m < M && o < Co)   // C_out is even
                            implicit::store_pair(y + m * Co + o, d[t][n][4 * i + 2 * half] + b0,
                                                 d[t][n][4 * i + 2 * half + 1] + b1);
                    }
            }
    }
};
#endif

// A block of two warpgroups owns MT x 128 rows m of y (warpgroup w the m-tiles of 64 rows 2 t + w) by BN output
// channels (products of 64 or 128 columns). The staging is conv_implicit_fwd's (implicit::ForwardCopies with 8 granules,
// a k-step of 128 bytes a row) in a ring of STAGES stages: while step s is multiplied, steps s + 1 .. s + STAGES - 2
// are being copied and step s - 1's products may still run (one wgmma group in flight), so the stage refilled after
// step s's barrier is step s - 2's. Each thread fences its landed copies for the asynchronous proxy before the
// barrier. Dynamic shared memory: STAGES x (128 MT + BN) x 128 bytes + 1024 (to align the tiles to 1024 bytes);
// two blocks an SM where that fits twice.
template <typename T, int BN, int MT, int STAGES>
__global__ void __launch_bounds__(256, wg_blocks(128 * MT + BN, STAGES))
conv_implicit_wg(const T* __restrict__ x, const T* __restrict__ w2, const T* __restrict__ bias, T* __restrict__ y,
                 int N, int H, int W, int C, int Co, int Ho, int Wo, int kh, int kw, int sh, int sw, int ph, int pw)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace implicit;
    constexpr int BM = 128 * MT, BK = 128 / sizeof(T), G = 8, ROWS = 256 / G;   // conv_implicit_fwd's copies
    extern __shared__ uint4 hopper_smem[];
    const unsigned base = (shared_address(hopper_smem) + 1023) & ~1023u;
    uint4* const As = hopper_smem + (base - shared_address(hopper_smem)) / 16;   // [STAGES][BM * G]
    uint4* const Bs = As + STAGES * BM * G;                                      // [STAGES][BN * G]
    const int tid = threadIdx.x, group = tid / 128;
    const long long M = (long long)N * Ho * Wo, m0 = (long long)blockIdx.x * BM;
    const int K = kh * kw * C, o0 = blockIdx.y * BN;
    ForwardCopies<T, G, ROWS, BM, BN> copies(tid, m0, M, o0, Co, K, H, W, C, Ho, Wo, kw, sh, sw, ph, pw);
    auto load = [&](int stage, int s) { copies.load(As + stage * BM * G, Bs + stage * BN * G, s, x, w2, K, H, W, C, kw); };

    ForwardTile<T, BN, MT> tile;
    const int steps = (K + BK - 1) / BK;
    constexpr int AHEAD = STAGES - 2;   // steps being copied
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < steps) load(s, s);
        cp_async_commit();
    }
    for (int s = 0; s < steps; ++s) {
        cp_async_wait_groups<AHEAD - 1>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // this thread's copies, for wgmma's reads
        __syncthreads();   // step s has landed; step s - 2's products are done (waited below): its stage is free
        if (s + AHEAD < steps) load((s + AHEAD) % STAGES, s + AHEAD);
        cp_async_commit();
        const int stage = s % STAGES;
        tile.products(base + (stage * BM + group * 64) * 128, base + (STAGES * BM + stage * BN) * 128, s == 0);
    }
    cp_async_wait();
    tile.store(y, bias, m0, M, o0, Co, group);
#else
    __trap();   // built without sm_90a's features: the loader never launches it so
#endif
}

// conv_implicit_wg fed by the Tensor Memory Accelerator, for channel counts that fill 128-byte rows (the library's
// forward and stride-1 dx there): warpgroup 0's first thread issues, per k-step, one im2col load of BM pixels by 128
// bytes of channels (x's rows at tap (i, j), zeros outside the image, from the tensor map x_map) and one tiled load of
// BN rows of w2 (w_map), both in the 128-byte swizzle wgmma reads; warpgroups 1 and 2 multiply as conv_implicit_wg's.
// Per stage an mbarrier `full` (the producer's arrival with the stage's byte count; the loads complete it) and
// `empty` (8 arrivals: each multiplying warp once the stage's products are done). C must be a multiple of 128 bytes
// (a k-step lies in one tap). The maps (host: cuTensorMapEncodeIm2col over x as (C, W, H, N) with the box's corners
// at (-pw, -ph) and (pw - kw + 1, ph - kh + 1), strides (1, sw, sh, 1); cuTensorMapEncodeTiled over w2 as (K, Co))
// come as __grid_constant__ parameters. Dynamic shared memory: STAGES x (BM + BN) x 128 + 1024 + 16 STAGES.
namespace hopper {
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

__device__ __forceinline__ void tma_im2col(unsigned dst, const TensorMap* map, int c, int w, int h, int n,
                                           unsigned short dj, unsigned short di, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n"
                 ::"r"(dst), "l"(map), "r"(c), "r"(w), "r"(h), "r"(n), "r"(bar), "h"(dj), "h"(di) : "memory");
}
__device__ __forceinline__ void tma_tile(unsigned dst, const TensorMap* map, int k, int row, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(map), "r"(k), "r"(row), "r"(bar) : "memory");
}
}  // namespace hopper

template <typename T, int BN, int MT, int STAGES>
__global__ void __launch_bounds__(384, 1)
conv_implicit_tma(const __grid_constant__ hopper::TensorMap x_map, const __grid_constant__ hopper::TensorMap w_map,
                  const T* __restrict__ bias, T* __restrict__ y,
                  int N, int H, int W, int C, int Co, int Ho, int Wo, int kh, int kw, int sh, int sw, int ph, int pw)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace implicit;
    constexpr int BM = 128 * MT, BK = 128 / sizeof(T);
    extern __shared__ uint4 hopper_smem[];
    const unsigned base = (shared_address(hopper_smem) + 1023) & ~1023u;
    const unsigned full = base + STAGES * (BM + BN) * 128, empty = full + 8 * STAGES;   // mbarriers, 8 bytes each
    const int tid = threadIdx.x, group = tid / 128;
    const long long M = (long long)N * Ho * Wo, m0 = (long long)blockIdx.x * BM;
    const int K = kh * kw * C, o0 = blockIdx.y * BN, steps = K / BK, chunks = C / BK;
    if (tid == 0) {
        for (int st = 0; st < STAGES; ++st) hopper::bar_init(full + 8 * st, 1), hopper::bar_init(empty + 8 * st, 8);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");   // the inits, for the TMA unit too
    }
    __syncthreads();

    if (group == 0) {   // the producer: one thread
        if (tid == 0) {
            const int n = (int)(m0 / (Ho * Wo)), p = (int)(m0 % (Ho * Wo)), h = p / Wo * sh - ph, w = p % Wo * sw - pw;
            for (int s = 0; s < steps; ++s) {
                const int stage = s % STAGES, tap = s / chunks;
                if (s >= STAGES) hopper::bar_wait(empty + 8 * stage, (s / STAGES - 1) & 1);   // s - STAGES multiplied
                hopper::bar_expect_bytes(full + 8 * stage, (BM + BN) * 128);
                hopper::tma_im2col(base + stage * BM * 128, &x_map, s % chunks * BK, w, h, n, tap % kw, tap / kw,
                                   full + 8 * stage);
                hopper::tma_tile(base + (STAGES * BM + stage * BN) * 128, &w_map, s * BK, o0, full + 8 * stage);
            }
        }
        return;
    }

    ForwardTile<T, BN, MT> tile;
    const int c = group - 1;   // the multiplying warpgroups: 0 and 1
    for (int s = 0; s < steps; ++s) {
        const int stage = s % STAGES;
        hopper::bar_wait(full + 8 * stage, (s / STAGES) & 1);
        __syncwarp();   // converged for the .aligned wgmma instructions
        tile.products(base + (stage * BM + c * 64) * 128, base + (STAGES * BM + stage * BN) * 128, s == 0);
        if (s > 0 && tid % 32 == 0) hopper::bar_arrive(empty + 8 * ((s - 1) % STAGES));   // step s - 1's are done
    }
    tile.store(y, bias, m0, M, o0, Co, c);
#else
    __trap();
#endif
}

// conv_implicit_dw on wgmma: part[z][o][k] = the sum over split z's rows m of dy[m][o] cols[m][k] for a block's
// BO x BKC of (o, k): two warpgroups, each 64 rows o by all BKC columns k (BO = 128), or the same 64 rows o and half
// the columns each (BO = 64). A stage holds RM rows m (a k-step of 128 bytes) of dy's BO columns and of cols' BKC.
// float16 (256 threads): MN-major tiles (64-column blocks of RM = 64 rows of 128 bytes), copied by cp.async as
// conv_implicit_dw copies, in conv_implicit_wg's ring of STAGES. TF32 (K-major only; 512 threads, warpgroups
// specialized): tiles of BO and BKC rows of RM = 32 floats m, threads 0-255 loading 4 x 4 blocks (4 rows m by a
// 16-byte piece) into registers two steps ahead and storing them transposed; threads 256-511 multiply. No block
// barrier: per stage an mbarrier `full` (256 arrivals: each copying thread once its stores are fenced for wgmma's
// reads) and `empty` (8 arrivals: each multiplying warp once the stage's products are done), phases counted by
// step / STAGES. On the H200 at train_cifar.py's shapes the specialized TF32 took 256->256 at 7x7 from 604 to 555 us
// and 64->256 at 15x15 from 779 to 689; float16's (a copying warpgroup issuing cp.async) gained nothing. Every split
// has rows (the first step's products write d).
// Dynamic shared memory: STAGES x (BO + BKC) x 128 + 1024 (+ 16 STAGES for TF32's mbarriers).
template <typename T, int BO, int BKC, int STAGES>   // as wg_blocks, where d needs 32 registers (TF32: 512 threads)
constexpr int wg_dw_blocks() {
    return sizeof(T) == 4 || BO * BKC / 256 > 32 ? 1 : wg_blocks(BO + BKC, STAGES);
}

template <typename T, int BO, int BKC, int STAGES>
__global__ void __launch_bounds__(sizeof(T) == 2 ? 256 : 512, wg_dw_blocks<T, BO, BKC, STAGES>())
conv_implicit_wg_dw(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ part, long long m_split,
                    int N, int H, int W, int C, int Co, int Ho, int Wo, int kh, int kw, int sh, int sw, int ph, int pw)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace implicit;
    constexpr bool MN = sizeof(T) == 2;
    constexpr int E = 16 / sizeof(T), RM = 128 / sizeof(T), GO = BO / E, GK = BKC / E;
    constexpr int SPLIT = 128 / BO, COLS = BKC / SPLIT, NN = COLS < 128 ? COLS : 128, NS = COLS / NN;
    static_assert(STAGES >= (MN ? 3 : 2), "the rings' stage counts");
    static_assert(!MN || RM == 64, "float16's tile offsets below count 64-column blocks of RM rows as RM x 128 bytes");
    extern __shared__ uint4 hopper_smem[];
    const unsigned base = (shared_address(hopper_smem) + 1023) & ~1023u;
    uint4* const Ds = hopper_smem + (base - shared_address(hopper_smem)) / 16;   // [STAGES][BO * 8]
    uint4* const Xs = Ds + STAGES * BO * 8;                                       // [STAGES][BKC * 8]
    const int tid = threadIdx.x, group = (MN ? tid : tid - 256) / 128;   // the multiplying warpgroups: 0 and 1
    const long long M = (long long)N * Ho * Wo, m_begin = blockIdx.z * m_split;
    const long long m_end = min(M, m_begin + m_split);
    const int K = kh * kw * C, k0 = blockIdx.x * BKC, o0 = blockIdx.y * BO;
    const int steps = (int)((m_end - m_begin + RM - 1) / RM);
    const unsigned full = base + STAGES * (BO + BKC) * 128, empty = full + 8 * STAGES;   // TF32's mbarriers
    if (!MN) {
        if (tid == 0)
            for (int st = 0; st < STAGES; ++st) hopper::bar_init(full + 8 * st, 256), hopper::bar_init(empty + 8 * st, 8);
        __syncthreads();
    }

    float d[NS][NN / 2];
    auto products = [&](int s) {   // d (+)= step s's tiles (float16: k-steps of 16 rows; TF32: of 32 bytes)
        const int stage = s % STAGES;
        const unsigned d_tile = base + (stage * BO + (SPLIT == 1 ? group * 64 : 0)) * 128;
        const unsigned x_tile = base + (STAGES * BO + stage * BKC + (SPLIT == 1 ? 0 : group * COLS)) * 128;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
            for (int n = 0; n < NS; ++n)
                hopper::Wgmma<T, NN, MN>::mma(d[n], hopper::operand(d_tile + k * (MN ? 2048 : 32), MN ? RM * 128 : 16),
                                              hopper::operand(x_tile + n * NN * 128 + k * (MN ? 2048 : 32), MN ? RM * 128 : 16),
                                              s || k);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");   // step s - 1's products are done
    };

    if constexpr (MN) {
        constexpr int DA = RM * GO / 256, XA = RM * GK / 256, AHEAD = STAGES - 2;
        auto mn_at = [](int r, int c) { return (c / 8 * RM + r) * 8 + ((c % 8) ^ (r & 7)); };   // granule c of row r
        const int gd = tid % GO, gx = tid % GK;   // as conv_implicit_dw's copies
        const bool o_ok = o0 + gd * E < Co, k_ok = k0 + gx * E < K;
        const TapWalk tap(k_ok ? k0 + gx * E : 0, C, kw);
        PixelWalk at[XA];
#pragma unroll
        for (int a = 0; a < XA; ++a) at[a] = PixelWalk(min(m_begin + tid / GK + 256 / GK * a, M - 1), RM, Ho, Wo);
        auto load = [&](int stage, int s) {
            const long long mb = m_begin + (long long)s * RM;
#pragma unroll
            for (int a = 0; a < DA; ++a) {
                const long long m = mb + tid / GO + 256 / GO * a;
                const bool ok = o_ok && m < m_end;
                cp_async16_or_zero(Ds + stage * BO * 8 + mn_at(tid / GO + 256 / GO * a, gd), dy + (ok ? (int)m * Co + o0 + gd * E : 0), ok);
            }
#pragma unroll
            for (int a = 0; a < XA; ++a) {
                const int h = at[a].ho * sh - ph + tap.i, w = at[a].wo * sw - pw + tap.j;
                const bool ok = k_ok && mb + tid / GK + 256 / GK * a < m_end && (unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W;
                cp_async16_or_zero(Xs + stage * BKC * 8 + mn_at(tid / GK + 256 / GK * a, gx),
                                   x + (ok ? ((at[a].n * H + h) * W + w) * C + tap.c : 0), ok);
                at[a].advance(Ho, Wo);
            }
        };
#pragma unroll
        for (int s = 0; s < AHEAD; ++s) {
            if (s < steps) load(s, s);
            cp_async_commit();
        }
        for (int s = 0; s < steps; ++s) {   // conv_implicit_wg's ring
            cp_async_wait_groups<AHEAD - 1>();
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            __syncthreads();
            if (s + AHEAD < steps) load((s + AHEAD) % STAGES, s + AHEAD);
            cp_async_commit();
            products(s);
        }
        cp_async_wait();
    } else {
        // A warp's unit: 16 rows m (half of a step's 32) by 8 granules of a tile's rows; unit u = warp + 8 p of a
        // tile of G granules (2 G / 8 units) takes rows 16 (u % 2) + 4 mq + r (r = 0..3) and granule 8 (u / 2) + g
        // (lane = 8 ... : mq = lane % 4, g = lane / 4): four 16-byte loads (whole 128-byte lines a load), whose
        // transposes are four 16-byte stores of 4 rows m into tile rows 4 granule + j (no bank conflicts)
        constexpr int UD = 2 * GO / 8, UX = 2 * GK / 8, PD = (UD + 7) / 8, PX = (UX + 7) / 8;
        const int warp = tid / 32, mq = tid % 4, g = tid / 4 % 8, m_row = 16 * (warp % 2) + 4 * mq;
        TapWalk taps[PX];
        bool k_ok[PX];
#pragma unroll
        for (int p = 0; p < PX; ++p) {
            const int k = k0 + 4 * ((warp + 8 * p) / 2 * 8 + g);
            k_ok[p] = warp + 8 * p < UX && k < K;
            taps[p] = TapWalk(k_ok[p] ? k : 0, C, kw);
        }
        PixelWalk at[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) at[r] = PixelWalk(min(m_begin + m_row + r, M - 1), RM, Ho, Wo);
        struct Pieces { float4 d[PD][4], x[PX][4]; } ra, rb;
        auto fetch = [&](Pieces& pc, int s) {   // step s (in order: the walks move on)
            const long long mb = m_begin + (long long)s * RM + m_row;
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const bool m_ok = mb + r < m_end;
#pragma unroll
                for (int p = 0; p < PD; ++p) {
                    const int o = o0 + 4 * ((warp + 8 * p) / 2 * 8 + g);
                    pc.d[p][r] = m_ok && warp + 8 * p < UD && o < Co ? *reinterpret_cast<const float4*>(dy + (int)(mb + r) * Co + o)
                                                                     : make_float4(0, 0, 0, 0);
                }
#pragma unroll
                for (int p = 0; p < PX; ++p) {
                    const int hh = at[r].ho * sh - ph + taps[p].i, ww = at[r].wo * sw - pw + taps[p].j;
                    const bool ok = m_ok && k_ok[p] && (unsigned)hh < (unsigned)H && (unsigned)ww < (unsigned)W;
                    pc.x[p][r] = ok ? *reinterpret_cast<const float4*>(x + ((at[r].n * H + hh) * W + ww) * C + taps[p].c)
                                    : make_float4(0, 0, 0, 0);
                }
                at[r].advance(Ho, Wo);
            }
        };
        auto put = [&](const Pieces& pc, int stage) {   // rows m of tile row j: granule (m / 4) ^ (j % 8) of the row
            auto store = [&](uint4* tile, int units, int p, const float4 (&v)[4]) {
                const int row = 4 * ((warp + 8 * p) / 2 * 8 + g);
                if (warp + 8 * p < units) {
                    tile[(row + 0) * 8 + ((m_row / 4) ^ ((row + 0) & 7))] = make_uint4(__float_as_uint(v[0].x), __float_as_uint(v[1].x), __float_as_uint(v[2].x), __float_as_uint(v[3].x));
                    tile[(row + 1) * 8 + ((m_row / 4) ^ ((row + 1) & 7))] = make_uint4(__float_as_uint(v[0].y), __float_as_uint(v[1].y), __float_as_uint(v[2].y), __float_as_uint(v[3].y));
                    tile[(row + 2) * 8 + ((m_row / 4) ^ ((row + 2) & 7))] = make_uint4(__float_as_uint(v[0].z), __float_as_uint(v[1].z), __float_as_uint(v[2].z), __float_as_uint(v[3].z));
                    tile[(row + 3) * 8 + ((m_row / 4) ^ ((row + 3) & 7))] = make_uint4(__float_as_uint(v[0].w), __float_as_uint(v[1].w), __float_as_uint(v[2].w), __float_as_uint(v[3].w));
                }
            };
#pragma unroll
            for (int p = 0; p < PD; ++p) store(Ds + stage * BO * 8, UD, p, pc.d[p]);
#pragma unroll
            for (int p = 0; p < PX; ++p) store(Xs + stage * BKC * 8, UX, p, pc.x[p]);
        };
        if (tid < 256) {   // copy: store step s once its stage is free, say so, then fetch step s + 2 into the set
            auto produce = [&](int s, Pieces& pc) {
                if (s >= STAGES) hopper::bar_wait(empty + 8 * (s % STAGES), (s / STAGES - 1) & 1);   // s - STAGES done
                put(pc, s % STAGES);
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // this thread's stores, for wgmma's reads
                hopper::bar_arrive(full + 8 * (s % STAGES));
                if (s + 2 < steps) fetch(pc, s + 2);
            };
            fetch(ra, 0);
            if (steps > 1) fetch(rb, 1);
            for (int s = 0; s < steps; s += 2) {
                produce(s, ra);
                if (s + 1 < steps) produce(s + 1, rb);
            }
            return;
        }
        for (int s = 0; s < steps; ++s) {   // multiply, releasing step s - 1's stage once its products are done
            hopper::bar_wait(full + 8 * (s % STAGES), (s / STAGES) & 1);
            __syncwarp();   // converged for the .aligned wgmma instructions
            products(s);
            if (s > 0 && tid % 32 == 0) hopper::bar_arrive(empty + 8 * ((s - 1) % STAGES));
        }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int n = 0; n < NS; ++n)
#pragma unroll
        for (int i = 0; i < NN / 2; ++i) asm volatile("" : "+f"(d[n][i])::"memory");   // no read of d above the wait

    const int lane = tid & 31, warp = (tid >> 5) & 3, gq = lane >> 2, tq = lane & 3;
    float* const out = part + (long long)blockIdx.z * Co * K;
#pragma unroll
    for (int n = 0; n < NS; ++n)
#pragma unroll
        for (int i = 0; i < NN / 8; ++i) {
            const int k = k0 + (SPLIT == 1 ? 0 : group * COLS) + n * NN + 8 * i + 2 * tq;   // K is even
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int o = o0 + (SPLIT == 1 ? group * 64 : 0) + warp * 16 + gq + 8 * half;
                if (o < Co && k < K)
                    *reinterpret_cast<float2*>(out + (long long)o * K + k) = make_float2(d[n][4 * i + 2 * half], d[n][4 * i + 2 * half + 1]);
            }
        }
#else
    __trap();
#endif
}

// Partial sums of dw2 over the split's rows m in [z m_split, (z + 1) m_split): part[z][o][k] (float).
// Dynamic shared memory: STAGES x WM x (WO + WK) values of T.
template <typename T, int WO, int WK>
__global__ void __launch_bounds__(implicit::NT, 2)
conv_implicit_dw(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ part, long long m_split,
                 int N, int H, int W, int C, int Co, int Ho, int Wo, int kh, int kw, int sh, int sw, int ph, int pw)
{
    using namespace implicit;
    constexpr int E = 16 / sizeof(T), GO = WO / E, GK = WK / E;   // values per granule; granules per row of the tiles
    constexpr int MI = WO / 32, NI = WK / 32;    // a warp's WO/2 x WK/4 tile of (o, k) in mma tiles
    constexpr int DA = WM * GO / NT, XA = WM * GK / NT;   // granules a thread copies a step
    static_assert(DA >= 1 && XA >= 1, "a granule of each tile per thread");
    extern __shared__ __align__(128) uint4 implicit_smem[];
    uint4* const Ds = implicit_smem;                   // [STAGES][WM * GO]
    uint4* const Xs = implicit_smem + STAGES * WM * GO;   // [STAGES][WM * GK]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long M = (long long)N * Ho * Wo, m_begin = blockIdx.z * m_split;
    const long long m_end = min(M, m_begin + m_split);
    const int K = kh * kw * C, k0 = blockIdx.x * WK, o0 = blockIdx.y * WO;

    // copies: dy granule gd of rows tid / GO + NT / GO a; cols granule gx (a fixed column k, so a fixed tap)
    // of rows tid / GK + NT / GK a, whose pixels walk on by WM rows a step
    const int gd = tid % GO, gx = tid % GK;
    const bool o_ok = o0 + gd * E < Co, k_ok = k0 + gx * E < K;
    const TapWalk tap(k_ok ? k0 + gx * E : 0, C, kw);
    PixelWalk at[XA];
#pragma unroll
    for (int a = 0; a < XA; ++a) at[a] = PixelWalk(min(m_begin + tid / GK + NT / GK * a, M - 1), WM, Ho, Wo);
    auto load = [&](int stage, int s) {
        const long long mb = m_begin + (long long)s * WM;
#pragma unroll
        for (int a = 0; a < DA; ++a) {
            const long long m = mb + tid / GO + NT / GO * a;
            const bool ok = o_ok && m < m_end;
            cp_async16_or_zero(&Ds[stage * WM * GO + granule_at<GO>(tid / GO + NT / GO * a, gd)], dy + (ok ? (int)m * Co + o0 + gd * E : 0), ok);
        }
#pragma unroll
        for (int a = 0; a < XA; ++a) {
            const int h = at[a].ho * sh - ph + tap.i, w = at[a].wo * sw - pw + tap.j;
            const bool ok = k_ok && mb + tid / GK + NT / GK * a < m_end && (unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W;
            cp_async16_or_zero(&Xs[stage * WM * GK + granule_at<GK>(tid / GK + NT / GK * a, gx)],
                         x + (ok ? ((at[a].n * H + h) * W + w) * C + tap.c : 0), ok);
            at[a].advance(Ho, Wo);
        }
    };

    float acc[MI][NI][4] = {};
    const int wo = warp % 2 * (WO / 2), wk = warp / 2 * (WK / 4);
    pipeline(m_end > m_begin ? (int)((m_end - m_begin + WM - 1) / WM) : 0, load, [&](int stage) {
        const uint4* d_tile = Ds + stage * WM * GO;
        const uint4* x_tile = Xs + stage * WM * GK;
        // A = dy^T, (o, m) from dy's (m, o) rows; B = cols, (m, k) rows: both transposed
        if constexpr (sizeof(T) == 2)   // by ldmatrix
            tile_products<T, true, MI, NI, WM / 16>(
                acc, [&](int mi, int l, int kk) {
                    return &d_tile[granule_at<GO>(16 * kk + (l & 7) + (l >> 4) * 8, (wo + mi * 16) / 8 + (l >> 3 & 1))];
                },
                [&](int nj, int l, int kk) { return &x_tile[granule_at<GK>(16 * kk + (l & 15), (wk + nj * 16) / 8 + (l >> 4))]; });
        else
            tf32_transposed_products<MI, NI, GO, GK>(acc, reinterpret_cast<const float*>(d_tile),
                                                     reinterpret_cast<const float*>(x_tile), wo, wk);
    });

    const int gq = lane >> 2, tq = lane & 3;
    float* out = part + (long long)blockIdx.z * Co * K;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int o = o0 + wo + mi * 16 + gq + 8 * half, k = k0 + wk + ni * 8 + 2 * tq;
                if (o < Co && k < K)   // K is even
                    *reinterpret_cast<float2*>(out + (long long)o * K + k) = make_float2(acc[mi][ni][2 * half], acc[mi][ni][2 * half + 1]);
            }
}

// dw[o, c, i, j] = sum over the splits z, in order, of part[z][o][k], k = (i kw + j) C + c, or of part[z][k][o]
// where k_major (the unfolded path's float32 products: tinygrad_lite's _weight_grad); a thread per element of a split.
template <typename T>
__global__ void conv_dw_fold(const float* __restrict__ part, int splits, T* __restrict__ dw, int C, int Co,
                             int kh, int kw, int k_major)
{
    const int K = kh * kw * C;
    const long long e = global_id();
    if (e >= (long long)Co * K) return;
    const int o = (int)(k_major ? e % Co : e / K), k = (int)(k_major ? e / Co : e % K), c = k % C, tap = k / C;
    float total = 0.f;
    for (int z = 0; z < splits; ++z) total += part[(long long)z * Co * K + e];
    dw[((long long)o * C + c) * kh * kw + tap] = T(total);
}

// ===== pooling =====
// Windows kh x kw with stride (sh, sw), no padding; Ho = (H - kh)/sh + 1. NHWC with C channels;
// NCHW data runs as NHWC with (N*C, H, W, 1). One thread per output V-wide channel group (forward,
// and backward where windows do not overlap), else per input group (backward).

// Backward where windows do not overlap (stride >= kernel): the thread of output group o writes dx in
// o's tile, rows [ho sh, ho sh + sh) and columns [wo sw, wo sw + sw) (to the edge for the last window
// of a row or column): tap(k) at window tap k = i kw + j, 0 between windows.
template <typename T, int V, typename F>
__device__ __forceinline__ void write_tile(T* dx, const Pixel& o, int H, int W, int C, int Ho, int Wo,
                                           int kh, int kw, int sh, int sw, F tap) {
    const int h0 = o.h * sh, w0 = o.w * sw;
    const int h1 = o.h == Ho - 1 ? H : h0 + sh, w1 = o.w == Wo - 1 ? W : w0 + sw;
    Pack<T, V> zero;
#pragma unroll
    for (int e = 0; e < V; ++e) zero.v[e] = T(0.0f);
    for (int h = h0; h < h1; ++h)
        for (int w = w0; w < w1; ++w)
            store_pack<V>(dx + (((long long)o.n * H + h) * W + w) * C + o.cv * V,
                          h - h0 < kh && w - w0 < kw ? tap((h - h0) * kw + w - w0) : zero);
}

// The range of ho whose window [ho*s, ho*s + k) holds h.
__device__ __forceinline__ void windows_over(int h, int k, int s, int Ho, int& lo, int& hi) {
    lo = h < k ? 0 : (h - k) / s + 1;
    hi = min(h / s, Ho - 1);
}

// Backward where windows overlap: the thread of input group t writes dx[t] = scale * the sum over the windows
// holding its pixel of add's terms: add(o, g, tap, acc) adds to acc those of window o (dy's pack index, g dy's
// pack there) whose tap i kw + j, tap(), is this pixel (a function: computed after add's own loads).
template <typename T, int V, typename F>
__device__ __forceinline__ void gather_windows(const T* dy, T* dx, int N, int H, int W, int C, int Ho, int Wo,
                                               int kh, int kw, int sh, int sw, acc_t<T> scale, F add) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int CV = C / V;
    const long long total = (long long)N * H * W * CV;
    for (long long t = global_id(); t < total; t += global_threads()) {
        const Pixel x = pixel_of(t, H, W, CV);   // (not a structured binding: NVRTC's C++17 lambdas cannot capture one)
        int hlo, hhi, wlo, whi;
        windows_over(x.h, kh, sh, Ho, hlo, hhi);
        windows_over(x.w, kw, sw, Wo, wlo, whi);
        A acc[V];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = A(0);
        for (int ho = hlo; ho <= hhi; ++ho)
            for (int wo = wlo; wo <= whi; ++wo) {
                const long long o = (((long long)x.n * Ho + ho) * Wo + wo) * CV + x.cv;
                const P g = reinterpret_cast<const P*>(dy)[o];
                add(o, g, [&] { return (x.h - ho * sh) * kw + (x.w - wo * sw); }, acc);
            }
        P out;
#pragma unroll
        for (int e = 0; e < V; ++e) out.v[e] = T(acc[e] * scale);
        reinterpret_cast<P*>(dx)[t] = out;
    }
}

// best = the window's maximum, arg = its tap i*kw + j (the first maximum; a NaN wins, as in PyTorch),
// per element of a pack: KH x KW taps known at compile time, so that all their loads issue at once, or
// (KH = KW = 0) kh x kw at run time.
template <int KH, int KW, typename T, int V>
__device__ __forceinline__ void window_max(const T* base, int W, int C, int kh, int kw, acc_t<T> (&best)[V],
                                           Pack<unsigned char, V>& arg) {
    using A = acc_t<T>;
    const int rows = KH ? KH : kh, cols = KW ? KW : kw;
#pragma unroll
    for (int e = 0; e < V; ++e) { best[e] = neg_inf<A>(); arg.v[e] = 0; }
#pragma unroll
    for (int i = 0; i < rows; ++i)
#pragma unroll
        for (int j = 0; j < cols; ++j) {
            const Pack<T, V> v = load_pack<V>(base + ((long long)i * W + j) * C);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const A a = A(v.v[e]);
                if (a > best[e] || a != a) { best[e] = a; arg.v[e] = (unsigned char)(i * cols + j); }
            }
        }
}

// The index buffer holds each output element's window tap: a byte each, or where windows have at most 4
// taps and the forward runs 4 or more elements a thread (`packed`), 2 bits each, element i's in byte i / 4
// at bit 2 (i % 4) (on the H200 at 1024x64x31x31 float16 the bytes were 2.4% of the kernels' traffic).
template <int V>
__device__ __forceinline__ void store_taps(unsigned char* idx, long long t, const Pack<unsigned char, V>& arg, int packed)
{
    if (!idx) return;   // a forward that nothing records
    if constexpr (V >= 4) {
        if (packed) {
            unsigned bits = 0;
#pragma unroll
            for (int e = 0; e < V; ++e) bits |= unsigned(arg.v[e]) << (2 * e);
            if constexpr (V == 8) reinterpret_cast<unsigned short*>(idx)[t] = (unsigned short)bits;
            else idx[t] = (unsigned char)bits;   // V == 4: one byte a pack
            return;
        }
    }
    reinterpret_cast<Pack<unsigned char, V>*>(idx)[t] = arg;
}

// The taps of pack t's V elements as store_taps wrote them, in one word (with any V the backward runs):
// tap_of(word, e, packed) is element e's.
template <int V>
__device__ __forceinline__ unsigned long long load_taps(const unsigned char* idx, long long t, int packed)
{
    if (!packed) {
        if constexpr (V == 8) return *reinterpret_cast<const unsigned long long*>(idx + 8 * t);
        else if constexpr (V == 4) return *reinterpret_cast<const unsigned*>(idx + 4 * t);
        else if constexpr (V == 2) return *reinterpret_cast<const unsigned short*>(idx + 2 * t);
        else return idx[t];
    }
    if constexpr (V == 8) return *reinterpret_cast<const unsigned short*>(idx + 2 * t);
    else if constexpr (V == 4) return idx[t];
    unsigned long long word = 0;
#pragma unroll
    for (int e = 0; e < V; ++e) {
        const long long i = t * V + e;
        word |= (unsigned long long)((idx[i >> 2] >> (2 * (i & 3))) & 3) << (2 * e);
    }
    return word;
}

__device__ __forceinline__ int tap_of(unsigned long long word, int e, int packed)
{
    return packed ? int(word >> (2 * e)) & 3 : int(word >> (8 * e)) & 255;
}

// y = window max, idx = its tap (window_max); 2x2 windows unrolled. Both max-pool kernels are held to 48
// registers (5 blocks of 256 per SM, 4 at their natural 56-64): on the H200 at 1024x64x31x31 float16,
// forward 49.6 -> 46.8 us, backward 49.1 -> 46.1 us (6 blocks spill a little, 8 spill more and run slower;
// at 5 the float32 backward spills 4 bytes).
template <typename T, int V>
__global__ void __launch_bounds__(256, 5) max_pool2d_fwd(const T* __restrict__ x, T* __restrict__ y,
                               unsigned char* __restrict__ idx, int packed, int N, int H, int W, int C, int Ho,
                               int Wo, int kh, int kw, int sh, int sw) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    using I = Pack<unsigned char, V>;
    const int CV = C / V;
    const long long total = (long long)N * Ho * Wo * CV;
    for (long long t = global_id(); t < total; t += global_threads()) {
        const auto [n, ho, wo, cv] = pixel_of(t, Ho, Wo, CV);
        const T* base = x + (((long long)n * H + ho * sh) * W + wo * sw) * C + cv * V;
        A best[V];
        I arg;
        if (kh == 2 && kw == 2) window_max<2, 2>(base, W, C, kh, kw, best, arg);
        else window_max<0, 0>(base, W, C, kh, kw, best, arg);
        P o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.v[e] = T(best[e]);
        reinterpret_cast<P*>(y)[t] = o;
        store_taps<V>(idx, t, arg, packed);
    }
}

// dx[n, h, w, c] = sum of dy over the windows whose recorded maximum is (h, w).
template <typename T, int V>
__global__ void __launch_bounds__(256, 5) max_pool2d_bwd(const T* __restrict__ dy, const unsigned char* __restrict__ idx,
                               int packed, T* __restrict__ dx, int N, int H, int W, int C, int Ho, int Wo,
                               int kh, int kw, int sh, int sw) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int CV = C / V;
    if (sh >= kh && sw >= kw) {
        for (long long t = global_id(); t < (long long)N * Ho * Wo * CV; t += global_threads()) {
            const P g = reinterpret_cast<const P*>(dy)[t];
            const unsigned long long a = load_taps<V>(idx, t, packed);
            write_tile<T, V>(dx, pixel_of(t, Ho, Wo, CV), H, W, C, Ho, Wo, kh, kw, sh, sw, [&](int k) {
                P v;
#pragma unroll
                for (int e = 0; e < V; ++e) v.v[e] = tap_of(a, e, packed) == k ? g.v[e] : T(0.0f);
                return v;
            });
        }
        return;
    }
    gather_windows<T, V>(dy, dx, N, H, W, C, Ho, Wo, kh, kw, sh, sw, A(1),
                         [&](long long o, const P& g, auto tap, A* acc) {
        const unsigned long long a = load_taps<V>(idx, o, packed);
        const int k = tap();
#pragma unroll
        for (int e = 0; e < V; ++e)
            if (tap_of(a, e, packed) == k) acc[e] += A(g.v[e]);
    });
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
        const auto [n, ho, wo, cv] = pixel_of(t, Ho, Wo, CV);
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
    if (sh >= kh && sw >= kw) {
        for (long long t = global_id(); t < (long long)N * Ho * Wo * CV; t += global_threads()) {
            P g = reinterpret_cast<const P*>(dy)[t];
#pragma unroll
            for (int e = 0; e < V; ++e) g.v[e] = T(A(g.v[e]) * scale);
            write_tile<T, V>(dx, pixel_of(t, Ho, Wo, CV), H, W, C, Ho, Wo, kh, kw, sh, sw, [&](int) { return g; });
        }
        return;
    }
    gather_windows<T, V>(dy, dx, N, H, W, C, Ho, Wo, kh, kw, sh, sw, scale,
                         [](long long, const P& g, auto, A* acc) {
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] += A(g.v[e]);
    });
}

// ===== cross-entropy =====
// Softmax cross-entropy with label smoothing eps over K classes, targets q = eps/K + (1 - eps)[k == y]:
//   loss_r = lse_r - (1 - eps) x[r, y_r] - (eps / K) sum_k x[r, k],   lse_r = log sum_k exp x[r, k]
//   dx[r, k] = (exp(x[r, k] - lse_r) - q[r, k]) * g[r * gstride] * scale
// A group of `lanes` threads (a power of two <= 32) owns a row; the rows of one warp advance
// together so every lane reaches the shuffles. A row whose target is `ignore` loses 0, gets a zero
// gradient and is not counted in the mean; any other target outside [0, K) gives a NaN loss.

// A lane's packs of a row (lane, lane + lanes, ... < count) in rounds of U: use(p0, v) gets the round's
// first pack index and its U packs, all loaded before the first is used (those past count are not loaded).
template <int U, typename P, typename F>
__device__ __forceinline__ void lane_rounds(const P* row, int lane, int lanes, int count, F use)
{
    for (int p0 = lane; p0 < count; p0 += U * lanes) {
        P v[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (p0 + u * lanes < count) v[u] = row[p0 + u * lanes];
        use(p0, v);
    }
}

// e^(a - b) for one b, as a term of a sum of exponentials: in float one FMA and the ex2 unit (a few ulp).
template <typename A> struct ExpLess;
template <> struct ExpLess<float> {
    float b2;   // b log2(e)
    __device__ explicit ExpLess(float b) : b2(b * 1.44269504f) {}
    __device__ float operator()(float a) const {   // ex2.approx.ftz: exp2f adds 3 instructions for denormal results
        float r;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(fmaf(a, 1.44269504f, -b2)));
        return r;
    }
};
template <> struct ExpLess<double> {
    double b;
    __device__ explicit ExpLess(double b) : b(b) {}
    __device__ double operator()(double a) const { return exp(a - b); }
};

// max(top, the pack's elements); fmax skips a NaN. __half pairs compare in half2 (exact), so that the
// pack's float conversions are not all made at once and kept for the exponentials.
template <typename A, typename T, int V>
__device__ __forceinline__ A pack_max(const Pack<T, V>& p, A top)
{
#pragma unroll
    for (int e = 0; e < V; ++e) top = fmax(top, A(p.v[e]));
    return top;
}
template <int V>
__device__ __forceinline__ float pack_max(const Pack<__half, V>& p, float top)
{
    if constexpr (V == 1) {
        return fmax(top, __half2float(p.v[0]));
    } else {
        const __half2* h = reinterpret_cast<const __half2*>(p.v);
        __half2 m = h[0];
#pragma unroll
        for (int e = 1; e < V / 2; ++e) m = __hmax2(m, h[e]);
        return fmax(top, fmax(__low2float(m), __high2float(m)));
    }
}

// The block's sum of v, in thread 0, added in a fixed order.
__device__ __forceinline__ double block_total(double v)
{
    __shared__ double warp_sums[32];
    const int warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int w = 1; w < warps; ++w) v += warp_sums[w];
    return v;
}

// The sum of part[0, count) in thread 0, in double and in an order fixed by count and the block size,
// 8 loads at a time per thread.
__device__ __forceinline__ double fold_partials(const double* part, int count)
{
    double t = 0;
    for (int i0 = threadIdx.x; i0 < count; i0 += 8 * blockDim.x) {
        double p[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = i0 + u * blockDim.x;
            p[u] = i < count ? __ldcg(part + i) : 0.0;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) t += p[u];
    }
    return block_total(t);
}

// Forward, reduction 0 ('none'): out[r] = loss_r; 1 ('sum') / 2 ('mean'): out[0] = the sum / mean of the
// losses over the rows kept: each block stores the sum of its rows' losses in part[blockIdx.x] and their count
// in part[gridDim.x + blockIdx.x], and the last block to finish (counted in *ticket, re-armed there) folds
// them in double, storing the count in *kept where given. lse_r is stored where lse is given (backward).
// A lane takes U packs a round: for 1000 float32 classes (250 packs, 32 lanes) U = 8 loads a whole row
// at once, so a row costs one memory latency. Each round rescales the lane's sum once, to the round's
// max; the row's lanes then agree on the row's max and rescale once more.
template <typename T, typename I, int V, int U>
__global__ void __launch_bounds__(256, sizeof(acc_t<T>) == 4 ? 4 : 2)   // float: 64 registers, 4 blocks per SM
cross_entropy_fwd(const T* __restrict__ x, const I* __restrict__ target, T* __restrict__ out, acc_t<T>* __restrict__ lse,
                  double* __restrict__ kept, double* __restrict__ part, int* __restrict__ ticket, int N, int K,
                  acc_t<T> eps, int lanes, int reduction, I ignore)
{
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int lane = threadIdx.x & (lanes - 1), log_lanes = __ffs(lanes) - 1;
    const long long warp_row0 = (global_id() & ~31LL) / lanes;
    const long long row_step = global_threads() / lanes;
    const int KV = K / V;
    const A on = A(1) - eps, off = eps / A(K);   // the weights of x[y] and of each x[k] in the loss
    double total = 0, count = 0;   // the losses and the number of the kept rows whose lane 0 this thread is
    for (long long r0 = warp_row0; r0 < N; r0 += row_step) {
        const long long row = r0 + (threadIdx.x & 31) / lanes;
        const bool valid = row < N;
        const long long y = valid ? (long long)target[row] : -1;
        A m = neg_inf<A>(), s = A(0), sx = A(0);
        const P* xr = reinterpret_cast<const P*>(x + row * K);
        for (int p0 = lane; p0 < (valid ? KV : 0); p0 += U * lanes) {
            const int n = (KV - p0 + lanes - 1) >> log_lanes;   // v[u] for u < n hold packs of the row
            P v[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (u < n) v[u] = xr[p0 + u * lanes];
            A top = m;   // a NaN logit is skipped here: it reaches the loss through s
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (u < n) top = pack_max(v[u], top);
            const ExpLess<A> less(top == neg_inf<A>() ? A(0) : top);   // so that exp(-inf - shift) = 0
            s *= less(m);
            m = top;
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int e = 0; e < V; ++e)
                    if (u < n) s += less(A(v[u].v[e]));
            if (eps > A(0))
#pragma unroll
                for (int u = 0; u < U; ++u)
#pragma unroll
                    for (int e = 0; e < V; ++e)
                        if (u < n) sx += A(v[u].v[e]);
        }
        // Lane 0 reads the target's logit again once the row is in (from L1 or L2): no register of the row
        // has to be picked out, and nothing waits for y before the row's loads are issued. The condition
        // m == m (always true: fmax never keeps a NaN) keeps ptxas from hoisting this read, and so the wait
        // for y, above those loads.
        const bool known = y >= 0 && y < K;
        const A xy = lane == 0 && known && m == m ? A(x[row * K + y]) : A(0);
        A top = m;   // the row's max; each lane's s rescaled to it, then summed over the lanes
        for (int o = lanes / 2; o > 0; o >>= 1) top = fmax(top, __shfl_xor_sync(0xffffffffu, top, o, lanes));
        const A shift = top == neg_inf<A>() ? A(0) : top;
        s *= ExpLess<A>(shift)(m);
        A smooth = eps > A(0) ? off * sx : A(0);   // without 0 * -inf
        for (int o = lanes / 2; o > 0; o >>= 1) {
            s += __shfl_xor_sync(0xffffffffu, s, o, lanes);
            smooth += __shfl_xor_sync(0xffffffffu, smooth, o, lanes);
        }
        if (valid && lane == 0) {
            const bool ignored = y == (long long)ignore;
            const A l = shift + log_(s), loss = ignored ? A(0) : known ? l - on * xy - smooth : quiet_nan<A>();
            if (lse) lse[row] = l;
            if (reduction == 0) {
                out[row] = T(loss);
            } else {
                total += double(loss);
                count += ignored ? 0.0 : 1.0;
            }
        }
    }
    if (reduction == 0) return;
    const double block = block_total(total);
    __syncthreads();   // thread 0 has read block_total's shared sums: they may be written again
    const double block_count = block_total(count);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = block;
        part[gridDim.x + blockIdx.x] = block_count;
        __threadfence();
    }
    if (!last_to_finish(ticket, gridDim.x)) return;
    const double sum = fold_partials(part, gridDim.x);
    __syncthreads();
    const double rows = fold_partials(part + gridDim.x, gridDim.x);
    if (threadIdx.x == 0) {
        out[0] = T(A(reduction == 2 ? sum / rows : sum));   // no row kept: 0 / 0, NaN, as PyTorch
        if (kept) *kept = rows;
    }
}

// Backward: g[r * gstride] is the loss's gradient reaching row r (gstride 0 for 'sum' and 'mean'); 'mean'
// divides it by the count of kept rows that the forward stored in *kept (null otherwise).
template <typename T, typename I, int V>
__global__ void cross_entropy_bwd(const T* __restrict__ x, const I* __restrict__ target,
                                  const acc_t<T>* __restrict__ lse,
                                  const acc_t<T>* __restrict__ g, long long gstride,
                                  const double* __restrict__ kept, T* __restrict__ dx, int N, int K,
                                  acc_t<T> eps, int lanes, I ignore) {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    constexpr int U = 4;   // packs a lane loads per round
    const int lane = threadIdx.x & (lanes - 1);
    const long long row_step = global_threads() / lanes;
    const int KV = K / V;
    const A off = eps / A(K), on = A(1) - eps + eps / A(K), scale = kept ? A(1.0 / *kept) : A(1);
    for (long long row = global_id() / lanes; row < N; row += row_step) {
        const long long y = (long long)target[row];
        const A l = lse[row], gs = y == (long long)ignore ? A(0) : g[row * gstride] * scale;
        const P* xr = reinterpret_cast<const P*>(x + row * K);
        P* dr = reinterpret_cast<P*>(dx + row * K);
        lane_rounds<U>(xr, lane, lanes, KV, [&](int p0, P (&v)[U]) {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int pv = p0 + u * lanes;
                if (pv >= KV) continue;
#pragma unroll
                for (int e = 0; e < V; ++e)
                    v[u].v[e] = T((fast_exp(A(v[u].v[e]) - l) - (pv * V + e == y ? on : off)) * gs);
                dr[pv] = v[u];
            }
        });
    }
}

// ===== optimizers =====
// products and sums rounded one by one (no fused multiply-add), as the composed path's NumPy and CuPy ops
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// One SGD step in place, PyTorch's rule: d = g + wd p; with momentum, buf = d on the first step, else
// momentum buf + (1 - dampening) d, and d = d + momentum buf (Nesterov) or buf; then p -= lr d. The
// learning rate is read from device memory where lr_on_device is given (a CUDA graph replays the step
// with each new rate).
template <typename T>
__global__ void sgd_step(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, long long n,
                         const float* __restrict__ lr_on_device, double lr, double weight_decay, double momentum,
                         double dampening, int nesterov, int first)
{
    // The composed path's ops (torch.optim's), each rounded to T (float16: after every op), the factor alpha of each
    // a.add(b, alpha) rounded to T first (momentum as buf's multiplier is not: only the product is): the CPU's bits.
    using A = acc_t<T>;
    const A wd = A(T(weight_decay)), keep = A(T(1 - dampening)), mom = A(T(momentum));
    const A step = A(T(-(lr_on_device ? double(*lr_on_device) : lr)));
    const auto rounded = [](A x) { return A(T(x)); };
    for (long long i = global_id(); i < n; i += global_threads()) {
        A d = weight_decay != 0 ? rounded(add_rn(A(g[i]), mul_rn(wd, A(p[i])))) : A(g[i]);
        if (momentum != 0) {
            const A kept = rounded(mul_rn(A(buf[i]), A(momentum)));
            const A b = first ? d : rounded(add_rn(kept, mul_rn(keep, d)));
            buf[i] = T(b);
            d = nesterov ? rounded(add_rn(d, mul_rn(mom, b))) : b;
        }
        p[i] = T(add_rn(A(p[i]), mul_rn(step, d)));
    }
}
