#version 450
// cmf4j Vulkan prompt product on cooperative matrices (VK_KHR_cooperative_matrix): matmul.comp's product
// y[yOff + t*yStride + r] = rs[row0+r] * sum_c W[row0+r, c] * (cf[c] * x[t*cols + c]), same push constants, layout, tile
// (64 rows × 64 tokens a workgroup) and grid-stride loops, for the kinds 0-3 (f32, bf16, f16, int8).
// Built into matmul_coop.spv by tools/build-vulkan-shaders.sh with a glslc that knows GL_KHR_cooperative_matrix
// (shaderc 2023.8 or newer; docs/VULKAN.md). The engine uses it only where the device has f16 × f16 → f32 16×16×16
// matrices at subgroup scope and 32-invocation subgroups.
//
// Operands are split into three f16 parts so the products keep f32 precision (session 23): an activation times its
// column scale times its token's power of two 2^s_t (chosen so the token's largest |x·cf| lies in [2^14, 2^15): nothing
// overflows f16, nothing that matters is subnormal) is v = h + m + l + e with h = f16(v), m = f16(v - h), l = f16(v - h - m)
// (both differences exact in f32), |e| <= 2^-30|v| (conversions to nearest or toward zero); int8 and f16 weights are one
// f16 part (exact), bf16 and f32 weights are first multiplied by their row's power of two 2^s_r (a second pre-pass: the
// row's largest |w| in [2^14, 2^15)), then bf16 is one part (exact down to 2^-28 of the row's largest) and f32 three
// parts like the activations. Per 16-column slice the matrix units add the parts' products whose orders sum
// to at most 2 (X_l·W_h + X_m·W_h + X_h·W_h, and for f32 weights X_h·W_l + X_m·W_m + X_h·W_m + ...) into f32 sums; the
// dropped ones are below 2^-30 of their term; the sum times 2^-(s_t + s_r) (exact) times the row scale is the output.
// Per step of BK columns the workgroup decodes the tile's weights and activations into shared memory as f16 parts (the next step's
// global loads are issued before the current step's products); each of its 4 subgroups multiplies a 32 × 32 quarter of
// the tile (2 × 2 matrices of 16 × 16) and the sums go through shared memory to be scaled and written with the bounds
// checked (partial tiles).

#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x = 128) in;
// 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row / q8_2f): matvec.comp's numbering
layout(constant_id = 0) const uint KIND = 0u;
const uint WG = 128u;
const uint BM = 64u, BN = 64u, BK = 32u;
const uint SK = BK + 8u;   // row stride of the operand tiles in f16 (80 bytes: 16-byte aligned rows, off one bank)
const uint SC = BM + 4u;   // row stride of the sums' tile in f32

layout(std430, set = 0, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint rows, cols, tokens, row0, yOff, yStride, rsOff, cfOff, flags;   // as matvec.comp's
    uint pOff, eps, biasOff;   // matvec_decode.comp's (the pipelines share one layout); unused here
} p;

const bool SPLIT_W = KIND == 0u;   // f32 weights: three f16 parts
const bool SCALE_W = KIND < 2u;    // f32 and bf16 weights: a power of two a row
shared float16_t ws[BM * SK];   // [row][k] of the step: B, read column-major (the weights' f16 part, or their h)
shared float16_t wm[SPLIT_W ? BM * SK : 1u];   // [row][k]: f32 weights' m
shared float16_t wl[SPLIT_W ? BM * SK : 1u];   // [row][k]: f32 weights' l
shared float16_t xs[BN * SK];   // [token][k] of the step: A, row-major (the activations' h)
shared float16_t xm[BN * SK];   // [token][k]: the activations' m
shared float16_t xl[BN * SK];   // [token][k]: the activations' l
shared int tsh[BN];             // s_t of the tile's tokens
shared int rsh[BM];             // s_r of the tile's rows (f32, bf16)
shared float cs[BN * SC];       // [token][row]: the tile's sums (and, before, the pre-passes' partial maxima)

// element e of the weights (any alignment)
float w1(uint e) {
    if (KIND == 0u) return uintBitsToFloat(w[e]);
    if (KIND == 1u) { uint v = w[e >> 1]; return uintBitsToFloat((e & 1u) == 0u ? v << 16 : v & 0xffff0000u); }
    if (KIND == 2u) { vec2 h = unpackHalf2x16(w[e >> 1]); return (e & 1u) == 0u ? h.x : h.y; }
    return float(bitfieldExtract(int(w[e >> 2]), int((e & 3u) * 8u), 8));
}

// elements e .. e+3 (e a multiple of 4)
vec4 w4(uint e) {
    if (KIND == 0u) return vec4(uintBitsToFloat(w[e]), uintBitsToFloat(w[e + 1u]), uintBitsToFloat(w[e + 2u]), uintBitsToFloat(w[e + 3u]));
    if (KIND == 1u) {
        uint a = w[e >> 1], b = w[(e >> 1) + 1u];
        return vec4(uintBitsToFloat(a << 16), uintBitsToFloat(a & 0xffff0000u), uintBitsToFloat(b << 16), uintBitsToFloat(b & 0xffff0000u));
    }
    if (KIND == 2u) return vec4(unpackHalf2x16(w[e >> 1]), unpackHalf2x16(w[(e >> 1) + 1u]));
    int v = int(w[e >> 2]);
    return vec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8), bitfieldExtract(v, 24, 8));
}

float colScale(uint c) { return uintBitsToFloat(w[p.cfOff + c]); }

// element c .. c+3 of token xt's activations times their column scales (zeros past the end)
void load(uint sr, uint xt, uint c, bool wide, bool colScales, out vec4 wv, out vec4 xv) {
    wv = vec4(0.0); xv = vec4(0.0);
    if (wide) {
        if (c < p.cols) {
            wv = w4(sr * p.cols + c);
            uint xi = xt * p.cols + c;
            xv = vec4(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u]);
            if (colScales) xv *= vec4(colScale(c), colScale(c + 1u), colScale(c + 2u), colScale(c + 3u));
        }
    } else {
        for (uint j = 0u; j < 4u; j++) {
            if (c + j < p.cols) {
                wv[j] = w1(sr * p.cols + c + j);
                float v = x[xt * p.cols + c + j];
                xv[j] = colScales ? v * colScale(c + j) : v;
            }
        }
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint lr = tid >> 1, lk = (tid & 1u) * 16u;   // what it loads: row (and token) lr, the step's columns lk .. lk+15
    uint sg = gl_SubgroupID;
    uint qt = (sg >> 1) * 32u, qr = (sg & 1u) * 32u;   // this subgroup's quarter: tokens qt.., rows qr..
    bool wide = (p.cols & 3u) == 0u, colScales = (p.flags & 2u) != 0u, rowScales = (p.flags & 1u) != 0u;
    for (uint rt = gl_WorkGroupID.x * BM; rt < p.rows; rt += gl_NumWorkGroups.x * BM) {
        uint sr = p.row0 + min(rt + lr, p.rows - 1u);   // rows past the end reread the last (never written)
        float wsc = 1.0;
        if (SCALE_W) {
            // pre-pass: row sr's largest |w| (the pair of invocations lr takes alternate 4-column chunks)
            float m = 0.0;
            for (uint c = 4u * (tid & 1u); c < p.cols; c += 8u) {
                vec4 wv, xv;
                load(sr, 0u, c, wide, false, wv, xv);
                m = max(m, max(max(abs(wv.x), abs(wv.y)), max(abs(wv.z), abs(wv.w))));
            }
            barrier();   // the previous tiles' sums and rsh have been read
            cs[tid] = m;
            barrier();
            m = max(cs[tid & ~1u], cs[tid | 1u]);
            int e = 0;
            if (m > 0.0) frexp(m, e);
            int sh = clamp(15 - e, -126, 127);
            wsc = ldexp(1.0, sh);
            if ((tid & 1u) == 0u) rsh[lr] = sh;
        }
        for (uint t0 = gl_WorkGroupID.y * BN; t0 < p.tokens; t0 += gl_NumWorkGroups.y * BN) {
            uint xt = min(t0 + lr, p.tokens - 1u);   // tokens past the end reread the last (never written)
            // pre-pass: token xt's largest |x·cf| (the pair of invocations lr takes alternate 4-column chunks)
            float m = 0.0;
            for (uint c = 4u * (tid & 1u); c < p.cols; c += 8u) {
                vec4 wv, xv;
                load(sr, xt, c, wide, colScales, wv, xv);
                m = max(m, max(max(abs(xv.x), abs(xv.y)), max(abs(xv.z), abs(xv.w))));
            }
            barrier();   // the previous tile's tsh and sums have been read
            cs[tid] = m;
            barrier();
            m = max(cs[tid & ~1u], cs[tid | 1u]);
            int e = 0;
            if (m > 0.0) frexp(m, e);   // m = f·2^e, f in [0.5, 1)
            int sh = clamp(15 - e, -126, 127);   // m·2^sh in [2^14, 2^15)
            float ts = ldexp(1.0, sh);
            if ((tid & 1u) == 0u) tsh[lr] = sh;
            coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[2][2];
            [[unroll]] for (uint i = 0u; i < 2u; i++)
                [[unroll]] for (uint j = 0u; j < 2u; j++) acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
            vec4 wv[4], xv[4];
            [[unroll]] for (uint q = 0u; q < 4u; q++) load(sr, xt, lk + 4u * q, wide, colScales, wv[q], xv[q]);
            for (uint k0 = 0u; k0 < p.cols; k0 += BK) {
                barrier();   // the previous step's tiles have been read
                // columns past the end are zeros: they add 0·0 to every sum, which changes none
                [[unroll]] for (uint q = 0u; q < 4u; q++) {
                    uint at = lr * SK + lk + 4u * q;
                    vec4 v = xv[q] * ts;
                    f16vec4 h = f16vec4(v);
                    vec4 r = v - vec4(h);
                    f16vec4 m = f16vec4(r);
                    f16vec4 l = f16vec4(r - vec4(m));
                    xs[at] = h.x; xs[at + 1u] = h.y; xs[at + 2u] = h.z; xs[at + 3u] = h.w;
                    xm[at] = m.x; xm[at + 1u] = m.y; xm[at + 2u] = m.z; xm[at + 3u] = m.w;
                    xl[at] = l.x; xl[at + 1u] = l.y; xl[at + 2u] = l.z; xl[at + 3u] = l.w;
                    vec4 wq = wv[q] * wsc;
                    f16vec4 g = f16vec4(wq);
                    ws[at] = g.x; ws[at + 1u] = g.y; ws[at + 2u] = g.z; ws[at + 3u] = g.w;
                    if (SPLIT_W) {
                        vec4 gr = wq - vec4(g);
                        f16vec4 gm = f16vec4(gr);
                        f16vec4 gl = f16vec4(gr - vec4(gm));
                        wm[at] = gm.x; wm[at + 1u] = gm.y; wm[at + 2u] = gm.z; wm[at + 3u] = gm.w;
                        wl[at] = gl.x; wl[at + 1u] = gl.y; wl[at + 2u] = gl.z; wl[at + 3u] = gl.w;
                    }
                }
                barrier();
                // the next step's loads go out before this step's products
                if (k0 + BK < p.cols)
                    [[unroll]] for (uint q = 0u; q < 4u; q++) load(sr, xt, k0 + BK + lk + 4u * q, wide, colScales, wv[q], xv[q]);
                [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> ah[2], am[2], al[2];
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b[2];
                    [[unroll]] for (uint i = 0u; i < 2u; i++) {
                        uint at = (qt + 16u * i) * SK + kk;
                        coopMatLoad(ah[i], xs, at, SK, gl_CooperativeMatrixLayoutRowMajor);
                        coopMatLoad(am[i], xm, at, SK, gl_CooperativeMatrixLayoutRowMajor);
                        coopMatLoad(al[i], xl, at, SK, gl_CooperativeMatrixLayoutRowMajor);
                    }
                    if (SPLIT_W) {
                        // the smaller products first: X_h·W_l, X_m·W_m, X_h·W_m (W_m's), X_m·W_h's turn below
                        [[unroll]] for (uint j = 0u; j < 2u; j++)
                            coopMatLoad(b[j], wl, (qr + 16u * j) * SK + kk, SK, gl_CooperativeMatrixLayoutColumnMajor);
                        [[unroll]] for (uint i = 0u; i < 2u; i++)
                            [[unroll]] for (uint j = 0u; j < 2u; j++) acc[i][j] = coopMatMulAdd(ah[i], b[j], acc[i][j]);
                        [[unroll]] for (uint j = 0u; j < 2u; j++)
                            coopMatLoad(b[j], wm, (qr + 16u * j) * SK + kk, SK, gl_CooperativeMatrixLayoutColumnMajor);
                        [[unroll]] for (uint i = 0u; i < 2u; i++)
                            [[unroll]] for (uint j = 0u; j < 2u; j++) {
                                acc[i][j] = coopMatMulAdd(am[i], b[j], acc[i][j]);
                                acc[i][j] = coopMatMulAdd(ah[i], b[j], acc[i][j]);
                            }
                    }
                    [[unroll]] for (uint j = 0u; j < 2u; j++)
                        coopMatLoad(b[j], ws, (qr + 16u * j) * SK + kk, SK, gl_CooperativeMatrixLayoutColumnMajor);
                    [[unroll]] for (uint i = 0u; i < 2u; i++)
                        [[unroll]] for (uint j = 0u; j < 2u; j++) {
                            acc[i][j] = coopMatMulAdd(al[i], b[j], acc[i][j]);
                            acc[i][j] = coopMatMulAdd(am[i], b[j], acc[i][j]);
                            acc[i][j] = coopMatMulAdd(ah[i], b[j], acc[i][j]);
                        }
                }
            }
            barrier();   // the previous tile's sums have been written out
            [[unroll]] for (uint i = 0u; i < 2u; i++)
                [[unroll]] for (uint j = 0u; j < 2u; j++)
                    coopMatStore(acc[i][j], cs, (qt + 16u * i) * SC + qr + 16u * j, SC, gl_CooperativeMatrixLayoutRowMajor);
            barrier();
            // consecutive invocations write consecutive rows of one token; 2^-(s_t + s_r) undoes the scales exactly
            for (uint i = tid; i < BM * BN; i += WG) {
                uint t = t0 + i / BM, r = rt + i % BM;
                if (t < p.tokens && r < p.rows) {
                    float s = ldexp(cs[(i / BM) * SC + i % BM], -(tsh[i / BM] + (SCALE_W ? rsh[i % BM] : 0)));
                    y[p.yOff + t * p.yStride + r] = rowScales ? s * uintBitsToFloat(w[p.rsOff + p.row0 + r]) : s;
                }
            }
        }
    }
}
