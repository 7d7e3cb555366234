#version 450
// cmf4j Vulkan tiled product for prompt chunks: y[yOff + t*yStride + r] = rs[row0+r] * sum_c W[row0+r, c] * cf[c] * x[t*cols + c]
// for r < rows, t < tokens: matvec.comp's product (same push constants, weight kinds and scales), for many tokens.
// Built into matmul.spv by tools/build-vulkan-shaders.sh. GLSL 450 only. Every sum is in f32.
//
// A workgroup of 256 invocations takes a tile of BM rows × BN tokens: per step of BK columns it decodes the tile's
// weights (times the column scales) and copies the tokens' activations into shared memory, and each invocation adds
// the products of its TM rows × 4 tokens, reading them as vec4s (TM = 8: 3 a column), so a weight is read from memory
// once per BN tokens (matvec.comp: once per 8) and a shared-memory read serves 4 or 8 products; the next step's
// weights and activations are loaded into registers while this step's products run. TM = 8 (128-row tiles) for
// prompts, 4 (64 rows, twice the workgroups) for steps of few tokens (VulkanContext.matvecPipeline). An output's sum runs over the columns in
// order, one fma at a time. Row and token tiles beyond the dispatch's workgroup counts are taken in grid-stride loops.

#extension GL_EXT_control_flow_attributes : enable   // [[unroll]]: the tile of sums stays in registers

layout(local_size_x = 256) in;
// 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row / q8_2f), 4 q4_block, 5 q4tp: matvec.comp's numbering
layout(constant_id = 0) const uint KIND = 0u;
const uint WG = 256u;
// rows an invocation takes: 8 or 4
layout(constant_id = 1) const uint TM = 8u;
const uint BM = 16u * TM, BN = 64u, BK = 16u;   // VulkanContext.GEMM_ROWS or GEMM_ROWS_NARROW, GEMM_TOKENS
const uint PAD = 4u;   // keeps the loaders' column-major stores off one bank, and the vec4 reads aligned

layout(std430, set = 0, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint rows, cols, tokens, row0, yOff, yStride, rsOff, cfOff, flags;   // as matvec.comp's
    uint pOff, eps, biasOff;   // matvec_decode.comp's (the pipelines share one layout); unused here
} p;

const uint WS = (BM + PAD) / 4u, XS = (BN + PAD) / 4u;   // vec4s a column of the tiles
shared vec4 ws[BK * WS];   // [k][row] of the step
shared vec4 xs[BK * XS];   // [k][token]
shared float rung[KIND == 5u ? BM * 32u : 1u];   // q4tp: the ladder of each row of the tile

// byte b of the buffer
uint byteAt(uint b) { return (w[b >> 2] >> ((b & 3u) * 8u)) & 255u; }

// q4tp: the scale of group g of stored row sr (the tile's row lr), from the row's LSB-first 5-bit code stream
float tpScale(uint sr, uint lr, uint g) {
    uint gpr = (p.cols + 31u) >> 5, bytes = (gpr * 5u + 7u) >> 3;
    uint base = p.cfOff * 4u + sr * bytes, bit = g * 5u, at = bit >> 3;
    uint v = byteAt(base + at);
    if (at + 1u < bytes) v |= byteAt(base + at + 1u) << 8;
    return rung[lr * 32u + ((v >> (bit & 7u)) & 31u)];
}

// element e (column c) of stored row sr, the tile's row lr; any alignment
float w1(uint e, uint sr, uint lr, uint c) {
    if (KIND >= 4u) {
        float q = float((w[e >> 3] >> ((e & 7u) * 4u)) & 15u) - 8.0;
        return q * (KIND == 4u ? uintBitsToFloat(w[p.rsOff + (e >> 5)]) : tpScale(sr, lr, c >> 5));
    }
    if (KIND == 0u) return uintBitsToFloat(w[e]);
    if (KIND == 1u) { uint v = w[e >> 1]; return uintBitsToFloat((e & 1u) == 0u ? v << 16 : v & 0xffff0000u); }
    if (KIND == 2u) { vec2 h = unpackHalf2x16(w[e >> 1]); return (e & 1u) == 0u ? h.x : h.y; }
    return float(bitfieldExtract(int(w[e >> 2]), int((e & 3u) * 8u), 8));
}

// elements e .. e+3 (e a multiple of 4: within one group of the 4-bit kinds)
vec4 w4(uint e, uint sr, uint lr, uint c) {
    if (KIND >= 4u) {
        uint v = w[e >> 3] >> ((e & 7u) * 4u);
        vec4 q = vec4(float(v & 15u), float((v >> 4) & 15u), float((v >> 8) & 15u), float((v >> 12) & 15u)) - 8.0;
        return q * (KIND == 4u ? uintBitsToFloat(w[p.rsOff + (e >> 5)]) : tpScale(sr, lr, c >> 5));
    }
    if (KIND == 0u) return vec4(uintBitsToFloat(w[e]), uintBitsToFloat(w[e + 1u]), uintBitsToFloat(w[e + 2u]), uintBitsToFloat(w[e + 3u]));
    if (KIND == 1u) {
        uint a = w[e >> 1], b = w[(e >> 1) + 1u];
        return vec4(uintBitsToFloat(a << 16), uintBitsToFloat(a & 0xffff0000u), uintBitsToFloat(b << 16), uintBitsToFloat(b & 0xffff0000u));
    }
    if (KIND == 2u) return vec4(unpackHalf2x16(w[e >> 1]), unpackHalf2x16(w[(e >> 1) + 1u]));
    int v = int(w[e >> 2]);
    return vec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8), bitfieldExtract(v, 24, 8));
}

// the step's weights at column c of stored row sr (the tile's row lr): 4 from c (zeros past the end), times the column scales
vec4 weights4(uint c, uint sr, uint lr, bool wide, bool colScales) {
    vec4 wv = vec4(0.0);
    if (wide) {
        if (c < p.cols) {
            wv = w4(sr * p.cols + c, sr, lr, c);
            if (colScales) wv *= vec4(uintBitsToFloat(w[p.cfOff + c]), uintBitsToFloat(w[p.cfOff + c + 1u]),
                                      uintBitsToFloat(w[p.cfOff + c + 2u]), uintBitsToFloat(w[p.cfOff + c + 3u]));
        }
    } else {
        for (uint j = 0u; j < 4u; j++)
            if (c + j < p.cols) {
                float v = w1(sr * p.cols + c + j, sr, lr, c + j);
                wv[j] = colScales ? v * uintBitsToFloat(w[p.cfOff + c + j]) : v;
            }
    }
    return wv;
}

// the activations of token row xt at columns c .. c+3 (zeros past the end)
vec4 acts4(uint xt, uint c, bool wide) {
    vec4 xv = vec4(0.0);
    uint xi = xt * p.cols + c;
    if (wide) {
        if (c < p.cols) xv = vec4(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u]);
    } else {
        for (uint j = 0u; j < 4u; j++) if (c + j < p.cols) xv[j] = x[xi + j];
    }
    return xv;
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    // this invocation's rows tr .. tr+3 (and tr+64 .. tr+67 when TM = 8), tokens tt .. tt+3 within the tile
    uint tr = (tid & 15u) * 4u, tt = (tid >> 4) * 4u;
    // what it loads: the weights of row lr at the step's columns lk .. lk+3 (.. lk+7 when TM = 8), the activations of
    // token lt at lx .. lx+3
    uint lr = TM == 8u ? tid >> 1 : tid >> 2, lk = TM == 8u ? (tid & 1u) * 8u : (tid & 3u) * 4u, lt = tid >> 2, lx = (tid & 3u) * 4u;
    bool wide = (p.cols & 3u) == 0u, colScales = (p.flags & 2u) != 0u;
    for (uint rt = gl_WorkGroupID.x * BM; rt < p.rows; rt += gl_NumWorkGroups.x * BM) {
        uint sr = p.row0 + min(rt + lr, p.rows - 1u);   // rows past the end reread the last (never written)
        if (KIND == 5u) {
            // rung k = exp2(lo) * exp2(step)^k by k sequential f32 products, as the CPU builds the ladder
            barrier();   // the previous row tile's ladders have been read
            for (uint i = tid; i < BM * 32u; i += WG) {
                uint r = p.row0 + min(rt + i / 32u, p.rows - 1u), k = i & 31u;
                float v = uintBitsToFloat(w[p.rsOff + 2u * r]), ratio = uintBitsToFloat(w[p.rsOff + 2u * r + 1u]);
                for (uint j = 0u; j < k; j++) v *= ratio;
                rung[i] = v;
            }
            barrier();
        }
        for (uint t0 = gl_WorkGroupID.y * BN; t0 < p.tokens; t0 += gl_NumWorkGroups.y * BN) {
            uint xt = min(t0 + lt, p.tokens - 1u);   // tokens past the end reread the last (never written)
            float acc[TM][4];
            [[unroll]] for (uint i = 0u; i < TM; i++) [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
            // columns past the end are zeros: they add 0·0 to every sum, which changes none
            vec4 wa = weights4(lk, sr, lr, wide, colScales), wb = TM == 8u ? weights4(lk + 4u, sr, lr, wide, colScales) : vec4(0.0);
            vec4 xv = acts4(xt, lx, wide);
            for (uint k0 = 0u; k0 < p.cols; k0 += BK) {
                barrier();   // the previous step's tiles have been read
                [[unroll]] for (uint j = 0u; j < 4u; j++) {
                    ws[(lk + j) * WS + (lr >> 2)][lr & 3u] = wa[j];
                    if (TM == 8u) ws[(lk + 4u + j) * WS + (lr >> 2)][lr & 3u] = wb[j];
                    xs[(lx + j) * XS + (lt >> 2)][lt & 3u] = xv[j];
                }
                barrier();
                if (k0 + BK < p.cols) {
                    wa = weights4(k0 + BK + lk, sr, lr, wide, colScales);
                    if (TM == 8u) wb = weights4(k0 + BK + lk + 4u, sr, lr, wide, colScales);
                    xv = acts4(xt, k0 + BK + lx, wide);
                }
                [[unroll]] for (uint k = 0u; k < BK; k++) {
                    vec4 a0 = ws[k * WS + (tr >> 2)], b = xs[k * XS + (tt >> 2)];
                    vec4 a1 = TM == 8u ? ws[k * WS + (tr >> 2) + 16u] : vec4(0.0);
                    [[unroll]] for (uint j = 0u; j < 4u; j++) {
                        [[unroll]] for (uint i = 0u; i < 4u; i++) acc[i][j] = fma(a0[i], b[j], acc[i][j]);
                        if (TM == 8u) [[unroll]] for (uint i = 0u; i < 4u; i++) acc[4u + i][j] = fma(a1[i], b[j], acc[4u + i][j]);
                    }
                }
            }
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                uint r = rt + tr + (i < 4u ? i : 60u + i);
                if (r < p.rows) {
                    float s = (p.flags & 1u) != 0u ? uintBitsToFloat(w[p.rsOff + p.row0 + r]) : 1.0;
                    [[unroll]] for (uint j = 0u; j < 4u; j++) {
                        uint t = t0 + tt + j;
                        if (t < p.tokens) y[p.yOff + t * p.yStride + r] = (p.flags & 1u) != 0u ? acc[i][j] * s : acc[i][j];
                    }
                }
            }
        }
    }
}
