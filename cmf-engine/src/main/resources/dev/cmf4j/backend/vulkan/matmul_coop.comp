#version 450
// cmf4j Vulkan prompt product on cooperative matrices (VK_KHR_cooperative_matrix) for f16 and int8 (q8_row, q8_2f)
// weights: matmul.comp's y[yOff + t*yStride + r] = rs[row0+r] * sum_c W[row0+r, c] * (cf[c] * x[t*cols + c]), same push
// constants and layout. Built into matmul_coop.spv by tools/build-vulkan-shaders.sh with a glslc that knows
// GL_KHR_cooperative_matrix (docs/VULKAN.md). The engine uses it only where the device has f16 × f16 → f32 16×16×16
// matrices at subgroup scope and 32-invocation subgroups.
//
// Precision as the CUDA prefill's (resident_gemm.cu): the weights are exact in f16; an activation v = x·cf goes in as two
// f16 parts of u = v/s (s = 2^e just above the token's largest |v|, so |u| < 1): p0 = u rounded to 11 significant bits,
// p1 = (u - p0)·2^11, so u = p0 + p1·2^-11 within 2^-22 of u. p0 is rounded by masking bits, so no compiler can fold a
// round trip through f16 into nothing. Each part has its own accumulators: the matrix units' sums need not keep a
// product's bits far below the accumulator's leading ones, so a low part added into p0's sums can be lost (docs/VULKAN.md).
//
// A workgroup of 256 invocations (8 subgroups) takes BN tokens and, in turn, tiles of 128 rows; each subgroup 32 rows ×
// BN/2 tokens (MI × 2 matrices of 16 × 16 per part). Per step of BK columns the weights (as f16) and the
// activations' parts go into shared memory; the next step's global loads are issued before this step's products. The
// sums go through shared memory a 16 × 16 matrix at a time to be scaled and written with the bounds checked.

#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x = 256) in;
// 2 f16, 3 int8 (q8_row / q8_2f): matvec.comp's numbering
layout(constant_id = 0) const uint KIND = 3u;
const uint WG = 256u;
// columns a step: 32 or 64 (VulkanContext.coopColumns, -Dcmf.vulkan.coopColumns)
layout(constant_id = 1) const uint BK = 32u;
// tokens a workgroup takes: 64 or 128 (VulkanContext.coopTokens, -Dcmf.vulkan.coopTokens)
layout(constant_id = 2) const uint BN = 64u;
const uint BM = 128u;   // VulkanContext.COOP_ROWS
const uint SK = BK + 8u;   // row stride of the operand tiles in f16 (16-byte aligned rows, off one bank)
const uint TPT = WG / BN;   // invocations a token's activations take
const uint MI = BN / 32u;   // matrices of 16 tokens a subgroup takes (and 2 of 16 rows)
const uint KW = BK / 2u, KX = BK / TPT;   // columns of a step an invocation loads: of one row's weights, of one token's activations
const float LOW = 2048.0;  // p1's scale

layout(std430, set = 0, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, set = 0, binding = 0) readonly buffer Weights4 { uvec4 w4[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint rows, cols, tokens, row0, yOff, yStride, rsOff, cfOff, flags;   // as matvec.comp's
    uint pOff, eps, biasOff;   // matvec_decode.comp's (the pipelines share one layout); unused here
} p;

shared float16_t ws[BM * SK];    // [row][k] of the step: B, read column-major
shared float16_t xh[BN * SK];    // [token][k]: p0, A row-major
shared float16_t xl[BN * SK];    // [token][k]: p1
shared float scale[BN];          // s of the tile's tokens
shared float red[WG];            // the pre-pass's partial maxima
shared float cs[8u * 256u];      // per subgroup one 16 × 16 matrix of sums

float colScale(uint c) { return uintBitsToFloat(w[p.cfOff + c]); }

// element e of the weights as f16 (any alignment)
float16_t w1(uint e) {
    if (KIND == 2u) { f16vec2 h = unpackFloat2x16(w[e >> 1]); return (e & 1u) == 0u ? h.x : h.y; }
    return float16_t(bitfieldExtract(int(w[e >> 2]), int((e & 3u) * 8u), 8));
}

// activation c of token t times its column scale (0 past the row's end)
float act1(uint t, uint c, bool colScales) {
    if (c >= p.cols) return 0.0;
    float v = x[t * p.cols + c];
    return colScales ? v * colScale(c) : v;
}

// uvec4s an invocation loads a step: KW int8 weights (16 a vector) or f16 (8), and KX activations (4 a vector)
const uint WV = KIND == 3u ? KW / 16u : KW / 8u, XV = KX / 4u;

// the KW weights of row sr from column c as loaded, raw; a row of 16s lies in the buffer
void loadW(uint sr, uint c, bool wideW, out uvec4 v[WV]) {
    [[unroll]] for (uint q = 0u; q < WV; q++) v[q] = uvec4(0u);
    if (wideW) {
        uint e = sr * p.cols + c;
        [[unroll]] for (uint q = 0u; q < WV; q++)
            if (c + q * (KIND == 3u ? 16u : 8u) < p.cols) v[q] = KIND == 3u ? w4[(e >> 4) + q] : w4[(e >> 3) + q];
    }
}

// 4 int8 weights (one word) as f16: each byte made offset binary under the f16 exponent of 1024, less 1152 (exact)
void int8Halves(uint v, out f16vec2 even, out f16vec2 odd) {
    uint u = v ^ 0x80808080u;
    even = unpackFloat2x16((u & 0x00ff00ffu) | 0x64006400u) - f16vec2(1152.0);
    odd = unpackFloat2x16(((u >> 8) & 0x00ff00ffu) | 0x64006400u) - f16vec2(1152.0);
}

// the weights of row lr, columns lk .. lk+KW-1 of the step at k0 into ws (from the raw loads, or element by element)
void storeW(uint lr, uint lk, uint sr, uint k0, bool wideW, uvec4 v[WV]) {
    uint at = lr * SK + lk;
    if (wideW) {
        [[unroll]] for (uint q = 0u; q < WV; q++)
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                if (KIND == 3u) {
                    f16vec2 e, o;
                    int8Halves(v[q][i], e, o);
                    uint b = at + 16u * q + 4u * i;
                    ws[b] = e.x; ws[b + 1u] = o.x; ws[b + 2u] = e.y; ws[b + 3u] = o.y;
                } else {
                    f16vec2 h = unpackFloat2x16(v[q][i]);
                    uint b = at + 8u * q + 2u * i;
                    ws[b] = h.x; ws[b + 1u] = h.y;
                }
            }
    } else {
        [[unroll]] for (uint j = 0u; j < KW; j++) {
            uint c = k0 + lk + j;
            ws[at + j] = c < p.cols ? w1(sr * p.cols + c) : float16_t(0.0);
        }
    }
}

// token xt's activations c .. c+KX-1 times their column scales (zeros past the end)
void loadX(uint xt, uint c, bool wideX, bool colScales, out vec4 v[XV]) {
    [[unroll]] for (uint q = 0u; q < XV; q++) {
        uint cq = c + 4u * q;
        v[q] = vec4(0.0);
        if (wideX) {
            if (cq < p.cols) {   // (a width of 4s may end within the step)
                v[q] = x4[(xt * p.cols + cq) >> 2];
                if (colScales)
                    v[q] *= (p.cfOff & 3u) == 0u ? uintBitsToFloat(w4[(p.cfOff + cq) >> 2])
                            : vec4(colScale(cq), colScale(cq + 1u), colScale(cq + 2u), colScale(cq + 3u));
            }
        } else {
            [[unroll]] for (uint j = 0u; j < 4u; j++) v[q][j] = act1(xt, cq + j, colScales);
        }
    }
}

// v/s's two parts into xh, xl at `at`
void storeX(uint at, vec4 v, float inv) {
    vec4 u = v * inv;
    // to 11 significant bits, to nearest (a carry into the exponent is right); exact in f16 from 2^-14 up, and |u| < 1
    vec4 h = uintBitsToFloat((floatBitsToUint(u) + 0x1000u) & 0xffffe000u);
    f16vec4 p0 = f16vec4(h), p1 = f16vec4((u - h) * LOW);
    xh[at] = p0.x; xh[at + 1u] = p0.y; xh[at + 2u] = p0.z; xh[at + 3u] = p0.w;
    xl[at] = p1.x; xl[at + 1u] = p1.y; xl[at + 2u] = p1.z; xl[at + 3u] = p1.w;
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    uint qr = (sg & 3u) * 32u, qt = (sg >> 2) * (BN / 2u);   // this subgroup's rows qr.. and tokens qt.. of the tile
    uint lr = tid >> 1, lk = (tid & 1u) * KW;           // weights it loads: row lr, the step's columns lk .. lk+KW-1
    uint lt = tid / TPT, lx = (tid % TPT) * KX;         // activations it loads: token lt, columns lx .. lx+KX-1
    bool colScales = (p.flags & 2u) != 0u, rowScales = (p.flags & 1u) != 0u;
    bool wideW = (p.cols & 15u) == 0u, wideX = (p.cols & 3u) == 0u;
    for (uint t0 = gl_WorkGroupID.y * BN; t0 < p.tokens; t0 += gl_NumWorkGroups.y * BN) {
        uint xt = min(t0 + lt, p.tokens - 1u);   // tokens past the end reread the last (never written)
        // pre-pass: token xt's largest |x·cf| (its TPT invocations take alternate chunks of KX columns)
        float m = 0.0;
        for (uint c = lx; c < p.cols; c += BK) {
            vec4 v[XV];
            loadX(xt, c, wideX, colScales, v);
            [[unroll]] for (uint q = 0u; q < XV; q++) {
                vec4 mv = abs(v[q]);
                m = max(m, max(max(mv.x, mv.y), max(mv.z, mv.w)));
            }
        }
        barrier();   // the previous token tile's scales have been read
        red[tid] = m;
        barrier();
        [[unroll]] for (uint i = 0u; i < TPT; i++) m = max(m, red[lt * TPT + i]);
        int e = 0;
        if (m > 0.0) frexp(m, e);   // m = f·2^e, f in [0.5, 1)
        e = clamp(e, -125, 126);     // 2^-e finite and normal
        float inv = ldexp(1.0, -e);
        if (tid % TPT == 0u) scale[lt] = ldexp(1.0, e);
        for (uint rt = gl_WorkGroupID.x * BM; rt < p.rows; rt += gl_NumWorkGroups.x * BM) {
            uint sr = p.row0 + min(rt + lr, p.rows - 1u);   // rows past the end reread the last (never written)
            coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc0[MI][2], acc1[MI][2];
            [[unroll]] for (uint i = 0u; i < MI; i++)
                [[unroll]] for (uint j = 0u; j < 2u; j++) {
                    acc0[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
                    acc1[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
                }
            uvec4 wv[WV];
            vec4 xv[XV];
            loadW(sr, lk, wideW, wv);
            loadX(xt, lx, wideX, colScales, xv);
            for (uint k0 = 0u; k0 < p.cols; k0 += BK) {
                barrier();   // the previous step's tiles (and the previous row tile's sums) have been read
                storeW(lr, lk, sr, k0, wideW, wv);
                [[unroll]] for (uint q = 0u; q < XV; q++) storeX(lt * SK + lx + 4u * q, xv[q], inv);
                barrier();
                // the next step's loads go out before this step's products
                if (k0 + BK < p.cols) {
                    loadW(sr, k0 + BK + lk, wideW, wv);
                    loadX(xt, k0 + BK + lx, wideX, colScales, xv);
                }
                [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> ah[MI], al[MI];
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b[2];
                    [[unroll]] for (uint i = 0u; i < MI; i++) {
                        coopMatLoad(ah[i], xh, (qt + 16u * i) * SK + kk, SK, gl_CooperativeMatrixLayoutRowMajor);
                        coopMatLoad(al[i], xl, (qt + 16u * i) * SK + kk, SK, gl_CooperativeMatrixLayoutRowMajor);
                    }
                    [[unroll]] for (uint j = 0u; j < 2u; j++)
                        coopMatLoad(b[j], ws, (qr + 16u * j) * SK + kk, SK, gl_CooperativeMatrixLayoutColumnMajor);
                    [[unroll]] for (uint i = 0u; i < MI; i++)
                        [[unroll]] for (uint j = 0u; j < 2u; j++) {
                            acc0[i][j] = coopMatMulAdd(ah[i], b[j], acc0[i][j]);
                            acc1[i][j] = coopMatMulAdd(al[i], b[j], acc1[i][j]);
                        }
                }
            }
            // each of the subgroup's 4 matrices of sums, p0's + p1's·2^-11, through its own corner of cs, times s and rs
            uint base = sg * 256u;
            [[unroll]] for (uint i = 0u; i < MI; i++)
                [[unroll]] for (uint j = 0u; j < 2u; j++) {
                    coopMatStore(acc0[i][j] + acc1[i][j] * (1.0 / LOW), cs, base, 16u, gl_CooperativeMatrixLayoutRowMajor);
                    subgroupMemoryBarrierShared();
                    subgroupBarrier();
                    [[unroll]] for (uint q = 0u; q < 8u; q++) {
                        uint el = lane + 32u * q, ti = qt + 16u * i + el / 16u, ri = qr + 16u * j + el % 16u;
                        uint t = t0 + ti, r = rt + ri;
                        if (t < p.tokens && r < p.rows) {
                            float v = cs[base + el] * scale[ti];
                            y[p.yOff + t * p.yStride + r] = rowScales ? v * uintBitsToFloat(w[p.rsOff + p.row0 + r]) : v;
                        }
                    }
                    subgroupMemoryBarrierShared();
                    subgroupBarrier();
                }
        }
    }
}
