#version 450
// cmf4j Vulkan tiled product for prompt chunks: y[yOff + t*yStride + r] = rs[row0+r] * sum_c W[row0+r, c] * cf[c] * x[t*cols + c]
// for r < rows, t < tokens: matvec.comp's product (same push constants, weight kinds and scales), for many tokens.
// Built into matmul.spv by tools/build-vulkan-shaders.sh. GLSL 450 only. Every sum is in f32.
//
// A workgroup of 256 invocations takes a tile of BM rows × BN tokens: per step of BK columns it decodes the tile's
// weights (times the column scales) and copies the tokens' activations into shared memory, and each invocation adds
// the products of its 4 rows × 4 tokens, so a weight is read from memory once per BN tokens (matvec.comp: once per 8)
// and each shared-memory read serves 4 products. An output's sum runs over the columns in order, one fma at a time.
// Row and token tiles beyond the dispatch's workgroup counts are taken in grid-stride loops.

#extension GL_EXT_control_flow_attributes : enable   // [[unroll]]: the tile of sums stays in registers

layout(local_size_x = 256) in;
// 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row / q8_2f), 4 q4_block, 5 q4tp: matvec.comp's numbering
layout(constant_id = 0) const uint KIND = 0u;
const uint WG = 256u;
const uint BM = 64u, BN = 64u, BK = 16u;
const uint PAD = 4u;   // keeps the loaders' column-major stores off one bank, and the vec4 reads aligned

layout(std430, set = 0, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint rows, cols, tokens, row0, yOff, yStride, rsOff, cfOff, flags;   // as matvec.comp's
    uint pOff, eps, biasOff;   // matvec_decode.comp's (the pipelines share one layout); unused here
} p;

shared float ws[BK * (BM + PAD)];   // [k][row] of the step
shared float xs[BK * (BN + PAD)];   // [k][token]
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

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint tr = (tid & 15u) * 4u, tt = (tid >> 4) * 4u;   // this invocation's 4 rows and 4 tokens within the tile
    uint lr = tid >> 2, lk = (tid & 3u) * 4u;          // what it loads: row (and token) lr, the step's columns lk .. lk+3
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
            uint xt = min(t0 + lr, p.tokens - 1u);   // tokens past the end reread the last (never written)
            float acc[4][4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
            for (uint k0 = 0u; k0 < p.cols; k0 += BK) {
                uint c = k0 + lk;
                // columns past the end are zeros: they add 0·0 to every sum, which changes none
                vec4 wv = vec4(0.0), xv = vec4(0.0);
                if (wide) {
                    if (c < p.cols) {
                        wv = w4(sr * p.cols + c, sr, lr, c);
                        if (colScales) wv *= vec4(uintBitsToFloat(w[p.cfOff + c]), uintBitsToFloat(w[p.cfOff + c + 1u]),
                                                  uintBitsToFloat(w[p.cfOff + c + 2u]), uintBitsToFloat(w[p.cfOff + c + 3u]));
                        uint xi = xt * p.cols + c;
                        xv = vec4(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u]);
                    }
                } else {
                    for (uint j = 0u; j < 4u; j++) {
                        if (c + j < p.cols) {
                            float v = w1(sr * p.cols + c + j, sr, lr, c + j);
                            wv[j] = colScales ? v * uintBitsToFloat(w[p.cfOff + c + j]) : v;
                            xv[j] = x[xt * p.cols + c + j];
                        }
                    }
                }
                barrier();   // the previous step's tiles have been read
                [[unroll]] for (uint j = 0u; j < 4u; j++) {
                    ws[(lk + j) * (BM + PAD) + lr] = wv[j];
                    xs[(lk + j) * (BN + PAD) + lr] = xv[j];
                }
                barrier();
                [[unroll]] for (uint k = 0u; k < BK; k++) {
                    vec4 a = vec4(ws[k * (BM + PAD) + tr], ws[k * (BM + PAD) + tr + 1u], ws[k * (BM + PAD) + tr + 2u], ws[k * (BM + PAD) + tr + 3u]);
                    vec4 b = vec4(xs[k * (BN + PAD) + tt], xs[k * (BN + PAD) + tt + 1u], xs[k * (BN + PAD) + tt + 2u], xs[k * (BN + PAD) + tt + 3u]);
                    [[unroll]] for (uint i = 0u; i < 4u; i++)
                        [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = fma(a[i], b[j], acc[i][j]);
                }
            }
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint r = rt + tr + i;
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
