#version 450
// cmf4j Vulkan matvec: y[yOff + t*yStride + r] = rs[row0+r] * sum_c W[row0+r, c] * cf[c] * x[t*cols + c]
// for r < rows, t < tokens (rs with flags bit 0, cf with bit 1; both f32 words in the weight buffer); the 4-bit kinds
// carry their scales themselves (q4_block: an f32 per flat group of 32 at rsOff; q4tp: per row {exp2(lo), exp2(step)}
// as f32 at rsOff and the row's 5-bit group codes as stored at word cfOff).
// Built into matvec.spv by tools/build-vulkan-shaders.sh (rerun it after every edit and commit the .spv and
// .spv.stamp with this file). GLSL 450 and subgroup arithmetic only: no 8/16-bit storage or float16 features
// needed, so any Vulkan 1.1 device with subgroup adds in compute shaders (desktop GPUs, MoltenVK, lavapipe) runs it;
// narrow weights are unpacked from 32-bit words. Every sum is in f32.
//
// One workgroup per (row, tile of TT tokens): its invocations stride over the row's columns, each keeping TT
// sums, so a weight is read once per TT tokens; a subgroup add and one shared-memory step across the subgroups
// add the invocations' sums. Rows and token
// tiles beyond the dispatch's workgroup counts are taken in grid-stride loops (the dispatch stays within
// maxComputeWorkGroupCount). One-token products of kinds 0-3 take matvec_decode.comp instead.

#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable

layout(local_size_x = 64) in;
// 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row / q8_2f), 4 q4_block, 5 q4tp: set per pipeline
layout(constant_id = 0) const uint KIND = 0u;
const uint WG = 64u;
const uint TT = 8u;

layout(std430, set = 0, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint rows;     // rows of this product (in this buffer)
    uint cols;
    uint tokens;
    uint row0;     // first row of the product within the buffer's rows
    uint yOff;     // floats: where this product's output starts
    uint yStride;  // floats between one token's outputs and the next's
    uint rsOff;    // word offset of the f32 row scales (indexed by row0 + r)
    uint cfOff;    // word offset of the f32 column scales
    uint flags;    // bit 0: row scales, bit 1: column scales
    uint pOff, eps, biasOff;   // matvec_decode.comp's (the pipelines share one layout); unused here
} p;

shared float red[TT * WG];
shared float rung[32];   // q4tp: the ladder of the current row

// nibble e of the weight plane, centred (q - 8)
float q4(uint e) { return float((w[e >> 3] >> ((e & 7u) * 4u)) & 15u) - 8.0; }

// byte b of the buffer
uint byteAt(uint b) { return (w[b >> 2] >> ((b & 3u) * 8u)) & 255u; }

// q4tp: the scale of group g of stored row sr, from the row's LSB-first 5-bit code stream (CMF_FORMAT.md §2)
float tpScale(uint sr, uint g) {
    uint gpr = (p.cols + 31u) >> 5, bytes = (gpr * 5u + 7u) >> 3;
    uint base = p.cfOff * 4u + sr * bytes, bit = g * 5u, at = bit >> 3;
    uint v = byteAt(base + at);
    if (at + 1u < bytes) v |= byteAt(base + at + 1u) << 8;
    return rung[(v >> (bit & 7u)) & 31u];
}

// element e of the weight plane (any alignment); sr its stored row, c its column
float w1(uint e, uint sr, uint c) {
    if (KIND == 4u) return q4(e) * uintBitsToFloat(w[p.rsOff + (e >> 5)]);
    if (KIND == 5u) return q4(e) * tpScale(sr, c >> 5);
    if (KIND == 0u) return uintBitsToFloat(w[e]);
    if (KIND == 1u) {
        uint v = w[e >> 1];
        return uintBitsToFloat((e & 1u) == 0u ? v << 16 : v & 0xffff0000u);
    }
    if (KIND == 2u) {
        vec2 h = unpackHalf2x16(w[e >> 1]);
        return (e & 1u) == 0u ? h.x : h.y;
    }
    return float(bitfieldExtract(int(w[e >> 2]), int((e & 3u) * 8u), 8));
}

// elements e .. e+3 (e a multiple of 4: one group of the 4-bit kinds)
vec4 w4(uint e, uint sr, uint c) {
    if (KIND >= 4u) {
        uint v = w[e >> 3] >> ((e & 7u) * 4u);
        vec4 q = vec4(float(v & 15u), float((v >> 4) & 15u), float((v >> 8) & 15u), float((v >> 12) & 15u)) - 8.0;
        return q * (KIND == 4u ? uintBitsToFloat(w[p.rsOff + (e >> 5)]) : tpScale(sr, c >> 5));
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
    bool colScales = (p.flags & 2u) != 0u;
    for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
        uint sr = p.row0 + r, base = sr * p.cols;
        if (KIND == 5u) {
            // rung k = exp2(lo) * exp2(step)^k by k sequential f32 products, as the CPU builds the ladder
            if (tid < 32u) {
                float v = uintBitsToFloat(w[p.rsOff + 2u * sr]), ratio = uintBitsToFloat(w[p.rsOff + 2u * sr + 1u]);
                for (uint k = 0u; k < tid; k++) v *= ratio;
                rung[tid] = v;
            }
            barrier();
        }
        for (uint t0 = gl_WorkGroupID.y * TT; t0 < p.tokens; t0 += gl_NumWorkGroups.y * TT) {
            uint nt = min(TT, p.tokens - t0);
            float acc[TT];
            for (uint t = 0u; t < TT; t++) acc[t] = 0.0;
            if ((p.cols & 3u) == 0u) {
                for (uint c = tid * 4u; c < p.cols; c += WG * 4u) {
                    vec4 wv = w4(base + c, sr, c);
                    if (colScales) wv *= vec4(uintBitsToFloat(w[p.cfOff + c]), uintBitsToFloat(w[p.cfOff + c + 1u]),
                                              uintBitsToFloat(w[p.cfOff + c + 2u]), uintBitsToFloat(w[p.cfOff + c + 3u]));
                    for (uint t = 0u; t < TT; t++) {
                        if (t < nt) {
                            uint xi = (t0 + t) * p.cols + c;
                            acc[t] += dot(wv, vec4(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u]));
                        }
                    }
                }
            } else {
                for (uint c = tid; c < p.cols; c += WG) {
                    float wv = w1(base + c, sr, c);
                    if (colScales) wv *= uintBitsToFloat(w[p.cfOff + c]);
                    for (uint t = 0u; t < TT; t++)
                        if (t < nt) acc[t] += wv * x[(t0 + t) * p.cols + c];
                }
            }
            // only the tile's nt tokens are added up (a decode step: one, not TT): each subgroup's sum, then theirs
            for (uint t = 0u; t < TT; t++) {
                if (t < nt) {
                    float v = subgroupAdd(acc[t]);
                    if (subgroupElect()) red[t * WG + gl_SubgroupID] = v;
                }
            }
            barrier();
            if (tid < nt) {
                float v = 0.0;
                for (uint g = 0u; g < gl_NumSubgroups; g++) v += red[tid * WG + g];
                if ((p.flags & 1u) != 0u) v *= uintBitsToFloat(w[p.rsOff + p.row0 + r]);
                y[p.yOff + (t0 + tid) * p.yStride + r] = v;
            }
            barrier();
        }
    }
}
