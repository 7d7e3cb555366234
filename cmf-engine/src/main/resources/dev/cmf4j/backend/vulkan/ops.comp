#version 450
// cmf4j Vulkan element-wise and attention operators of the resident forward (VulkanResidentForward), one pipeline
// per OP (specialization constant 0). Buffers A..D and the push constants u[] mean what each OP below says; offsets
// and strides are in floats. The step's first position is read from buffer S (written by the host before each
// submission and copied to device memory by it), not pushed, so a decode step's command buffer is recorded once and
// replayed. Built into ops.spv by tools/build-vulkan-shaders.sh. Every sum is in f32. Buffers E..G are attend_decode.comp's
// (OP 9, the folded decode attention, is that shader's) and, E and F, the f16 cache's chunk rows here (KV_HALF); every
// set binds all nine: where an OP reads none of them they stand in with A.
// Buffer P is the forward's parameters (norm weights, biases, attention sinks), bound to every set.

#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_EXT_control_flow_attributes : enable   // [[unroll]]: OP 7's loads in flight together

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint OP = 0u;
// 1: the KV cache holds IEEE halves, two a word (--kv f16: OPs 1, 2, 4 and 7 of a second set of pipelines); 0: f32
layout(constant_id = 1) const uint KV_HALF = 0u;
const uint WG = 64u;
const uint MAX_HEAD_DIM = 256u;

layout(std430, set = 0, binding = 0) buffer A { float a[]; };
layout(std430, set = 0, binding = 1) buffer B { float b[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(std430, set = 0, binding = 4) readonly buffer S { uint pos0; } st;
layout(std430, set = 0, binding = 8) readonly buffer P { float prm[]; };
// B and C 16 bytes at a time (OP 7's keys and values, where the head dim and the cache row are multiples of 4)
layout(std430, set = 0, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(std430, set = 0, binding = 0) buffer AU { uint au[]; };   // A's words as ids (OP 19's routing)
layout(std430, set = 0, binding = 2) readonly buffer C4 { vec4 c4[]; };
// KV_HALF: the caches' words (B, C; D the key cache of OP 1), 4 halves at a time (OP 7's loads), and the chunk's own
// keys (rotated) and values in f32, E and F rows from S.pos0 on: attention reads those unrounded, as the CPU's cache
// reads its pending chunk (rounded to f16 only in the store)
layout(std430, set = 0, binding = 1) buffer BH { uint kh[]; };
layout(std430, set = 0, binding = 1) readonly buffer BH2 { uvec2 kh2[]; };
layout(std430, set = 0, binding = 2) readonly buffer CH { uint vh[]; };
layout(std430, set = 0, binding = 2) readonly buffer CH2 { uvec2 vh2[]; };
layout(std430, set = 0, binding = 3) buffer DH { uint dh[]; };
layout(std430, set = 0, binding = 5) buffer E { float e[]; };
layout(std430, set = 0, binding = 5) readonly buffer E4 { vec4 e4[]; };
layout(std430, set = 0, binding = 6) readonly buffer F { float f[]; };
layout(std430, set = 0, binding = 6) readonly buffer F4 { vec4 f4[]; };

layout(push_constant) uniform Push { uint u[16]; } p;

shared float red[WG];
const uint SPLIT = WG;   // keys per workgroup of the split decode attention (OP 7): one an invocation
shared float qs[MAX_HEAD_DIM];
shared float ps[SPLIT];

// the workgroup's sum or max of v; every invocation gets it: each subgroup's by the subgroup operation, then those
// over the subgroups in order (two barriers, where a tree over shared memory took one per halving; the barriers also
// publish what the invocations wrote to shared memory before the call)
float reduce(float v, bool isMax) {
    float s = isMax ? subgroupMax(v) : subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = s;
    barrier();
    float r = red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) r = isMax ? max(r, red[i]) : r + red[i];
    barrier();
    return r;
}

// Numerical Recipes' erfc fit, as the CPU's Activation.GELU
float erf1(float x) {
    float z = abs(x);
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
            + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
    return x >= 0.0 ? 1.0 - r : r - 1.0;
}

// x's f16 bits rounded to nearest even, as Java's Float.floatToFloat16 (the CPU cache's store): packHalf2x16 leaves
// the rounding to the driver
uint f16Bits(float x) {
    uint w = floatBitsToUint(x), s = (w >> 16u) & 0x8000u, m = w & 0x7fffffffu;
    if (m > 0x7f800000u) return s | 0x7e00u;                       // NaN
    if (m >= 0x477ff000u) return s | 0x7c00u;                      // 65520 and up round to infinity
    if (m >= 0x38800000u) { uint r = m - 0x38000000u; return s | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u); }
    if (m <= 0x33000000u) return s;                                // 2^-25 and below: zero (2^-25 ties to even)
    uint sh = 126u - (m >> 23u), full = (m & 0x7fffffu) | 0x800000u, q = full >> sh;
    uint rem = full & ((1u << sh) - 1u), halfway = 1u << (sh - 1u);
    return s | (q + (rem > halfway || (rem == halfway && (q & 1u) != 0u) ? 1u : 0u));   // a subnormal half
}

uint packHalves(float x, float y) { return f16Bits(x) | (f16Bits(y) << 16u); }

// KV_HALF: element i (row and head offsets included) of the f16 key / value cache
float keyHalf(uint i) { vec2 h = unpackHalf2x16(kh[i >> 1u]); return (i & 1u) == 0u ? h.x : h.y; }
float valueHalf(uint i) { vec2 h = unpackHalf2x16(vh[i >> 1u]); return (i & 1u) == 0u ? h.x : h.y; }
vec4 halves4(uvec2 w) { return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); }

// KV_HALF: column i of position j's key (value) in a cache of rows of `stride`: the f16 store before S.pos0, the
// chunk's own f32 rows (E, F) from it
float keyAt(uint j, uint i, uint stride) { return j >= st.pos0 ? e[(j - st.pos0) * stride + i] : keyHalf(j * stride + i); }
float valueAt(uint j, uint i, uint stride) { return j >= st.pos0 ? f[(j - st.pos0) * stride + i] : valueHalf(j * stride + i); }

float act(float x, uint kind) {
    if (kind == 0u) return x / (1.0 + exp(-x));                                                        // SiLU
    if (kind == 1u) return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));   // GELU tanh
    return 0.5 * x * (1.0 + erf1(x * 0.7071067811865476));                                              // GELU
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    if (OP == 0u || OP == 20u) {
        // RMSNorm of rows: b[u3 + r*u8 + i] = a[u2 + r*u7 + i] / sqrt(mean + eps) * s_i, s = c[u4 + i] (u5 bit 0),
        // 1 + c[u4 + i] (bit 1 too) or 1; rows u0, width u1, eps bits u6. OP 20 adds it to b instead, then multiplies
        // by u9 (f32 bits): a sandwich norm's output into the residual (and a layer scalar) in one phase
        uint rows = p.u[0], n = p.u[1];
        float eps = uintBitsToFloat(p.u[6]);
        bool weight = (p.u[5] & 1u) != 0u, offset = (p.u[5] & 2u) != 0u;
        for (uint r = gl_WorkGroupID.x; r < rows; r += gl_NumWorkGroups.x) {
            uint src = p.u[2] + r * p.u[7], dst = p.u[3] + r * p.u[8];
            float ss = 0.0;
            for (uint i = tid; i < n; i += WG) { float v = a[src + i]; ss += v * v; }
            float inv = 1.0 / sqrt(reduce(ss, false) / float(n) + eps);
            for (uint i = tid; i < n; i += WG) {
                float v = a[src + i] * inv;
                if (weight) v = offset ? v * (1.0 + c[p.u[4] + i]) : c[p.u[4] + i] * v;
                if (OP == 20u) v = (b[dst + i] + v) * uintBitsToFloat(p.u[9]);
                b[dst + i] = v;
            }
            barrier();
        }
    } else if (OP == 1u) {
        // rotary (rotate-hl): q rows r = t*heads + h in place on a[u6 + r*u2] (r < u0), dims i < u3/2 paired with
        // i + u3/2 (hl = u3/2); then u7 k rows rk = t*u8 + h of b[rk*u2] rotated into the cache d at position
        // S.pos0 + t (rows of u9 floats, head h at h*u2; dims past u3 copied); cos at c[u4 + t*hl + i], sin at
        // c[u4 + u5*hl + t*hl + i] (u5 = tokens); heads u1, head dim u2, kv heads u8. KV_HALF: the rotated k rows also
        // into E at their place in B, the cache d taking them as halves
        uint rows = p.u[0], heads = p.u[1], hd = p.u[2], hl = p.u[3] / 2u, tokens = p.u[5], kRows = p.u[7], kvHeads = p.u[8];
        for (uint r = gl_WorkGroupID.x; r < rows + kRows; r += gl_NumWorkGroups.x) {
            bool isQ = r < rows;
            uint rk = r - rows, t = isQ ? r / heads : rk / kvHeads;
            uint src = isQ ? p.u[6] + r * hd : rk * hd;
            uint dst = isQ ? src : (st.pos0 + t) * p.u[9] + (rk % kvHeads) * hd;
            for (uint i = tid; i < hl; i += WG) {
                float co = c[p.u[4] + t * hl + i], si = c[p.u[4] + tokens * hl + t * hl + i];
                float x1 = isQ ? a[src + i] : b[src + i], x2 = isQ ? a[src + i + hl] : b[src + i + hl];
                float y1 = x1 * co - x2 * si, y2 = x2 * co + x1 * si;
                if (isQ) { a[dst + i] = y1; a[dst + i + hl] = y2; }
                else if (KV_HALF != 0u) { e[src + i] = y1; e[src + i + hl] = y2; }
                else { d[dst + i] = y1; d[dst + i + hl] = y2; }
            }
            if (!isQ && KV_HALF != 0u) {
                // the rotated row in f32 into E (the chunk's keys attention reads; E may be B itself), then its
                // halves into the cache by pairs (u9 and hd even)
                for (uint i = 2u * hl + tid; i < hd; i += WG) e[src + i] = b[src + i];
                memoryBarrierBuffer();
                barrier();
                for (uint i = tid; i < hd / 2u; i += WG) dh[dst / 2u + i] = packHalves(e[src + 2u * i], e[src + 2u * i + 1u]);
                barrier();
            } else if (!isQ) for (uint i = 2u * hl + tid; i < hd; i += WG) d[dst + i] = b[src + i];
        }
    } else if (OP == 2u) {
        // causal GQA attention of query row r = t*heads + h (a[t*u9 + h*hd]) over cached keys b and values c
        // [position, u7 floats]; position pos = S.pos0 + t sees keys lo..pos (lo = pos - u5 + 1 with a window u5 > 0);
        // output d[t*u9 + h*hd]; scores in d[u10 + r*u8 + j]. tokens u0, heads u1, kv heads u2, head dim u3, scale u6;
        // u12 > 0: head h's sink logit P[u12 - 1 + h] joins the softmax's denominator (gpt-oss), as the CPU's: the max
        // taken over it too, exp(sink - max) added to the sum. KV_HALF: keys and values by keyAt and valueAt
        uint tokens = p.u[0], heads = p.u[1], kvHeads = p.u[2], hd = p.u[3], window = p.u[5], kvStride = p.u[7];
        float scale = uintBitsToFloat(p.u[6]);
        for (uint r = gl_WorkGroupID.x; r < tokens * heads; r += gl_NumWorkGroups.x) {
            uint t = r / heads, h = r % heads, g = h / (heads / kvHeads);
            uint pos = st.pos0 + t, lo = window > 0u && pos + 1u > window ? pos + 1u - window : 0u;
            uint q0 = t * p.u[9] + h * hd, k0 = g * hd, s0 = p.u[10] + r * p.u[8];
            for (uint i = tid; i < hd; i += WG) qs[i] = a[q0 + i];
            barrier();
            float m = -3.4e38;
            for (uint j = lo + tid; j <= pos; j += WG) {
                float s = 0.0;
                if (KV_HALF != 0u) for (uint i = 0u; i < hd; i++) s += qs[i] * keyAt(j, k0 + i, kvStride);
                else for (uint i = 0u; i < hd; i++) s += qs[i] * b[j * kvStride + k0 + i];
                s *= scale;
                d[s0 + j] = s;
                m = max(m, s);
            }
            m = reduce(m, true);
            float sink = p.u[12] != 0u ? prm[p.u[12] - 1u + h] : 0.0;
            if (p.u[12] != 0u) m = max(m, sink);
            float l = 0.0;
            for (uint j = lo + tid; j <= pos; j += WG) {
                float e = exp(d[s0 + j] - m);
                d[s0 + j] = e;
                l += e;
            }
            l = reduce(l, false);
            if (p.u[12] != 0u) l += exp(sink - m);
            memoryBarrierBuffer();
            barrier();
            for (uint i = tid; i < hd; i += WG) {
                float acc = 0.0;
                if (KV_HALF != 0u) for (uint j = lo; j <= pos; j++) acc += d[s0 + j] * valueAt(j, k0 + i, kvStride);
                else for (uint j = lo; j <= pos; j++) acc += d[s0 + j] * c[j * kvStride + k0 + i];
                d[q0 + i] = acc / l;
            }
            barrier();
        }
    } else if (OP == 7u) {
        // one query row's attention (a decode step: position S.pos0, query a[h*hd]) by u11 workgroups per head: the
        // keys lo .. pos (lo as OP 2) in chunks of SPLIT, workgroup h*u11 + w taking chunks w, w + u11, ... with an
        // online softmax; its max score, its sum of exp(score - max) and its sum of exp(score - max)·v written to
        // d[u10 + (h*u11 + w)*(hd + 2)]: hd sums, then max and sum. heads u1, kv heads u2, head dim u3, window u5,
        // scale u6, cache row u7. (The folded decode step's OP 9, which also rotates, appends and combines, is
        // attend_decode.comp.) KV_HALF: keys and values by keyAt and valueAt (the step's own from E's and F's row 0)
        uint heads = p.u[1], kvHeads = p.u[2], hd = p.u[3], window = p.u[5], kvStride = p.u[7], per = p.u[11];
        float scale = uintBitsToFloat(p.u[6]);
        uint pos = st.pos0, lo = window > 0u && pos + 1u > window ? pos + 1u - window : 0u;
        uint chunks = (pos - lo) / SPLIT + 1u;
        bool vec = (hd & 3u) == 0u && (kvStride & 3u) == 0u;
        for (uint wg = gl_WorkGroupID.x; wg < heads * per; wg += gl_NumWorkGroups.x) {
            uint h = wg / per, w0 = wg % per;
            if (w0 >= chunks) continue;   // no keys for it at this position (the dispatch covers the whole context)
            uint group = heads / kvHeads, k0 = (h / group) * hd;
            for (uint i = tid; i < hd; i += WG) qs[i] = a[h * hd + i];
            barrier();
            float m = -3.4e38, l = 0.0;
            float acc[MAX_HEAD_DIM / WG];
            for (uint k = 0u; k < MAX_HEAD_DIM / WG; k++) acc[k] = 0.0;
            for (uint ch = w0; ch < chunks; ch += per) {
                uint j0 = lo + ch * SPLIT, n = min(SPLIT, pos + 1u - j0);
                float sc = -3.4e38;
                if (tid < n) {
                    float dt = 0.0;
                    uint kb = (j0 + tid) * kvStride + k0;
                    if (vec) {
                        // the key's row: 8 loads of 16 bytes in flight at a time where it is 16-byte aligned
                        for (uint i = 0u; i < hd; i += 32u) {
                            vec4 kv[8];
                            if (KV_HALF == 0u) {
                                [[unroll]] for (uint u = 0u; u < 8u; u++) kv[u] = i + 4u * u < hd ? b4[(kb + i) / 4u + u] : vec4(0.0);
                            } else if (j0 + tid >= pos) {   // the step's own key (E's row 0)
                                [[unroll]] for (uint u = 0u; u < 8u; u++) kv[u] = i + 4u * u < hd ? e4[(k0 + i) / 4u + u] : vec4(0.0);
                            } else {
                                [[unroll]] for (uint u = 0u; u < 8u; u++) kv[u] = i + 4u * u < hd ? halves4(kh2[(kb + i) / 4u + u]) : vec4(0.0);
                            }
                            [[unroll]] for (uint u = 0u; u < 8u; u++) {
                                uint e = min(i + 4u * u, hd - 4u);
                                dt += dot(vec4(qs[e], qs[e + 1u], qs[e + 2u], qs[e + 3u]), kv[u]);
                            }
                        }
                    } else {
                        if (KV_HALF != 0u) for (uint i = 0u; i < hd; i++) dt += qs[i] * keyAt(j0 + tid, k0 + i, kvStride);
                        else for (uint i = 0u; i < hd; i++) dt += qs[i] * b[kb + i];
                    }
                    sc = dt * scale;
                }
                float mn = max(m, reduce(sc, true));
                float e = tid < n ? exp(sc - mn) : 0.0;
                ps[tid] = e;
                float corr = exp(m - mn);   // 0 before the first chunk
                l = l * corr + reduce(e, false);   // its barriers publish ps
                for (uint k = 0u; k < MAX_HEAD_DIM / WG; k++) {
                    uint i = tid + k * WG;
                    if (i < hd) {
                        // 8 values in flight at a time (ps is 0 past the chunk's n keys)
                        float sv = 0.0;
                        for (uint j = 0u; j < n; j += 8u) {
                            float cv[8];
                            if (KV_HALF != 0u) {
                                [[unroll]] for (uint u = 0u; u < 8u; u++) cv[u] = j + u < n ? valueAt(j0 + j + u, k0 + i, kvStride) : 0.0;
                            } else {
                                [[unroll]] for (uint u = 0u; u < 8u; u++) cv[u] = j + u < n ? c[(j0 + j + u) * kvStride + k0 + i] : 0.0;
                            }
                            [[unroll]] for (uint u = 0u; u < 8u; u++) sv += ps[j + u] * cv[u];
                        }
                        acc[k] = acc[k] * corr + sv;
                    }
                }
                m = mn;
                barrier();   // ps is read before the next chunk writes it
            }
            uint o = p.u[10] + wg * (hd + 2u);
            for (uint k = 0u; k < MAX_HEAD_DIM / WG; k++) if (tid + k * WG < hd) d[o + tid + k * WG] = acc[k];
            if (tid == 0u) { d[o + hd] = m; d[o + hd + 1u] = l; }
        }
    } else if (OP == 8u) {
        // OP 7's partial sums of head h (workgroup h) combined into the output d[h*hd + i]: each one's sums scaled by
        // exp(its max - the max over them all), divided by the scaled sum. heads u1, head dim u3, window u5, u10, u11 as OP 7;
        // u12 > 0: the head's sink logit P[u12 - 1 + h] joins the max and the sum (as OP 2's)
        uint heads = p.u[1], hd = p.u[3], window = p.u[5], per = p.u[11];
        uint pos = st.pos0, lo = window > 0u && pos + 1u > window ? pos + 1u - window : 0u;
        uint used = min(per, (pos - lo) / SPLIT + 1u);
        for (uint h = gl_WorkGroupID.x; h < heads; h += gl_NumWorkGroups.x) {
            uint o = p.u[10] + h * per * (hd + 2u);
            float m = -3.4e38;
            for (uint w0 = 0u; w0 < used; w0++) m = max(m, d[o + w0 * (hd + 2u) + hd]);
            float sink = p.u[12] != 0u ? prm[p.u[12] - 1u + h] : 0.0;
            if (p.u[12] != 0u) m = max(m, sink);
            float l = 0.0;
            for (uint w0 = 0u; w0 < used; w0++) l += d[o + w0 * (hd + 2u) + hd + 1u] * exp(d[o + w0 * (hd + 2u) + hd] - m);
            if (p.u[12] != 0u) l += exp(sink - m);
            for (uint i = tid; i < hd; i += WG) {
                float acc = 0.0;
                for (uint w0 = 0u; w0 < used; w0++) acc += d[o + w0 * (hd + 2u) + i] * exp(d[o + w0 * (hd + 2u) + hd] - m);
                d[h * hd + i] = acc / l;
            }
        }
    } else if (OP == 16u) {
        // gemma4's per-layer inputs, row r = t*layers + l (u0 rows of width u1): a = (RMSNorm(a * u5) * s + b[u7 + ...]) * u6,
        // a the model projection's slice, b the table's row slice (already times its scale, gathered by the host);
        // s = c[u2 + i] (u3 bit 0), 1 + c[u2 + i] (bit 1 too) or 1; eps u4; u4..u6 f32 bits
        uint rows = p.u[0], n = p.u[1];
        float eps = uintBitsToFloat(p.u[4]), projScale = uintBitsToFloat(p.u[5]), combine = uintBitsToFloat(p.u[6]);
        bool weight = (p.u[3] & 1u) != 0u, offset = (p.u[3] & 2u) != 0u;
        for (uint r = gl_WorkGroupID.x; r < rows; r += gl_NumWorkGroups.x) {
            float ss = 0.0;
            for (uint i = tid; i < n; i += WG) { float v = a[r * n + i] * projScale; ss += v * v; }
            float inv = 1.0 / sqrt(reduce(ss, false) / float(n) + eps);
            for (uint i = tid; i < n; i += WG) {
                float v = a[r * n + i] * projScale * inv;
                if (weight) v = offset ? v * (1.0 + c[p.u[2] + i]) : c[p.u[2] + i] * v;
                a[r * n + i] = (v + b[p.u[7] + r * n + i]) * combine;
            }
            barrier();
        }
    } else if (OP >= 17u && OP <= 18u) {
        // element-wise over i < u0, grid-stride: 17 a = act_u1(a) * b[u2 + (i / u3)*u4 + i mod u3] (gemma4's per-layer
        // gate times layer l's slice: u2 = l*dim, u3 dim, u4 the row's width); 18 a *= u1 (f32 bits: a layer scalar)
        uint n = p.u[0];
        for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
            if (OP == 17u) a[i] = act(a[i], p.u[1]) * b[p.u[2] + (i / p.u[3]) * p.u[4] + i % p.u[3]];
            else a[i] *= uintBitsToFloat(p.u[1]);
        }
    } else if (OP == 19u) {
        // gemma4's per-expert scales: slot i < u0 of a routing (moe.comp's pairs of expert id, weight bits in A) has its
        // weight times c[u1 + id]
        for (uint i = gl_GlobalInvocationID.x; i < p.u[0]; i += gl_NumWorkGroups.x * WG)
            au[2u * i + 1u] = floatBitsToUint(uintBitsToFloat(au[2u * i + 1u]) * c[p.u[1] + au[2u * i]]);
    } else {
        // element-wise over i < u0, grid-stride: 3 a = act_u1(a) * b (* c[u2 + i mod u4] where u3 != 0: rows of width u4);
        // 4 b[u2 + S.pos0*u3 + i] = a[u1 + i] (KV_HALF: as halves, see below); 5 a += b;
        // 6 a[i] += c[u1 + i mod u2] (a bias of width u2 on every row)
        uint n = p.u[0];
        for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
            if (OP == 3u) { float h = act(a[i], p.u[1]) * b[i]; a[i] = p.u[3] != 0u ? h * c[p.u[2] + i % p.u[4]] : h; }
            else if (OP == 4u && KV_HALF != 0u) {
                // by pairs (i < u0/2; u0, u2 and u3 even), the f32 rows copied into E too where u4 != 0
                if (2u * i < n) kh[(p.u[2] + st.pos0 * p.u[3]) / 2u + i] = packHalves(a[p.u[1] + 2u * i], a[p.u[1] + 2u * i + 1u]);
                if (2u * i < n && p.u[4] != 0u) { e[2u * i] = a[p.u[1] + 2u * i]; e[2u * i + 1u] = a[p.u[1] + 2u * i + 1u]; }
            }
            else if (OP == 4u) b[p.u[2] + st.pos0 * p.u[3] + i] = a[p.u[1] + i];
            else if (OP == 5u) a[i] += b[i];
            else a[i] += c[p.u[1] + i % p.u[2]];
        }
    }
}
