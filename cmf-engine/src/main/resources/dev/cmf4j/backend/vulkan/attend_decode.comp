#version 450
// cmf4j Vulkan decode attention of one query row, folded (the resident forward's OP 9: ops.comp's bindings, push
// constants and partial-sum layout): q rotated (and the step's own key), the key and value appended to the caches,
// the keys lo .. pos attended in chunks of SPLIT by u11 workgroups per head with an online softmax, and the head's last
// workgroup to finish combining the partial sums exactly as ops.comp's OP 8 does. Built into attend_decode.spv by
// tools/build-vulkan-shaders.sh. Every sum is in f32.
//
// Why a shader of its own: ops.comp's 64 invocations walked a chunk's 64 keys one key an invocation and its values 8
// keys at a time, ~20 memory latencies a chunk one after another (21 µs a layer on the H200). Here 256 invocations
// take a chunk's key rows 4 invocations a key and its values (keys by groups of G, 16 bytes of dims each), so a
// chunk's keys and its values each arrive in one batch of loads (head dims up to 128; two batches at 256). Partial
// sums meet in shared memory in a fixed order, so the result does not depend on the device's subgroup size.

#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_EXT_control_flow_attributes : enable   // [[unroll]]: the loads in flight together

layout(local_size_x = 256) in;
const uint WG = 256u;
const uint MAX_HEAD_DIM = 256u;
const uint SPLIT = 64u;        // keys a chunk (VulkanResidentForward.ATTENTION_SPLIT)
const uint KP = WG / SPLIT;    // invocations a key in the scores
const uint LOADS = 8u;         // loads of 16 bytes in flight per invocation
// 1: the KV cache holds IEEE halves, two a word (--kv f16's pipeline; a layer reading an earlier layer's caches is not
// folded then: u9 = 0 always); 0: f32
layout(constant_id = 1) const uint KV_HALF = 0u;

// (q, the step's key and value read past the caches: a chained dispatch reads what the products before it wrote
// without a barrier between them)
layout(std430, set = 0, binding = 0) coherent readonly buffer A { float a[]; };   // the raw q rows, head h at h*hd
layout(std430, set = 0, binding = 1) buffer B { float b[]; };                  // key cache, row j at j*u7
layout(std430, set = 0, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };                  // value cache
layout(std430, set = 0, binding = 2) readonly buffer C4 { vec4 c4[]; };
layout(std430, set = 0, binding = 1) buffer BH { uint kh[]; };                 // KV_HALF: the caches' words, 4 halves at a time
layout(std430, set = 0, binding = 1) readonly buffer BH2 { uvec2 kh2[]; };
layout(std430, set = 0, binding = 2) buffer CH { uint vh[]; };
layout(std430, set = 0, binding = 2) readonly buffer CH2 { uvec2 vh2[]; };
// the output (head h at h*hd) and the partial sums from u10 (written by other workgroups of the same dispatch)
layout(std430, set = 0, binding = 3) coherent buffer D { float d[]; };
// the step's position, then a counter per head: zero before the dispatch and left zero by it
layout(std430, set = 0, binding = 4) buffer S { uint pos0; uint pad0; uint pad1; uint pad2; uint count[]; } st;
layout(std430, set = 0, binding = 5) coherent readonly buffer E { float kNew[]; };   // the step's raw key row
layout(std430, set = 0, binding = 6) coherent readonly buffer F { float vNew[]; };   // the step's value row
layout(std430, set = 0, binding = 7) readonly buffer G { float gt[]; };        // the rotary tables
layout(std430, set = 0, binding = 8) readonly buffer P { float prm[]; };       // the forward's parameters (sinks)
// chained phases (VulkanResidentForward): counters of workgroups done, zeroed at the start of each submission
layout(std430, set = 0, binding = 9) coherent buffer Sync { uint done[]; };

// u1 heads, u2 kv heads, u3 head dim, u4 the tables' offset (cos at u4 + i, sin at u4 + u8/2 + i), u5 window (0: none),
// u6 scale (f32 bits), u7 cache row stride, u8 rotary dims (0: no rotary), u9 1 where the caches hold the step's key
// already, u10 the partial sums' offset, u11 workgroups per head, u12 > 0: head h's sink logit at P[u12 - 1 + h] joins
// the combine's max and sum (as OP 8's); chained: u13 1 + the counter its workgroups count themselves into when done,
// u14 1 + the counter whose u15 workgroups (the q/k/v products') it waits for first (0: none)
layout(push_constant) uniform Push { uint u[16]; } p;

// as matvec_decode.comp's: polls of a chained wait before it gives up (setting the counter's top bit: the phases after
// it go on too)
const uint SPIN_LIMIT = 1u << 24;

shared float qs[MAX_HEAD_DIM];   // q rotated
shared float ks[MAX_HEAD_DIM];   // the step's own key, rotated
shared float ps[SPLIT];          // exp(score - max) of the chunk's keys
shared float sp[WG];             // the scores' partial dot products, KP a key
shared vec4 vp[WG];              // the values' partial sums, a group of keys × the head's vec4s
shared float red[WG];
shared bool lastOfHead;

// the workgroup's sum or max of v; every invocation gets it (the barriers also publish shared memory written before)
float reduce(float v, bool isMax) {
    float s = isMax ? subgroupMax(v) : subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = s;
    barrier();
    float r = red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) r = isMax ? max(r, red[i]) : r + red[i];
    barrier();
    return r;
}

// x's f16 bits rounded to nearest even, as Java's Float.floatToFloat16 (the CPU cache's store; ops.comp's f16Bits)
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
vec4 halves4(uvec2 w) { return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); }
float half1(uint w, uint i) { vec2 h = unpackHalf2x16(w); return (i & 1u) == 0u ? h.x : h.y; }

vec4 q4(uint i) { return vec4(qs[4u * i], qs[4u * i + 1u], qs[4u * i + 2u], qs[4u * i + 3u]); }
vec4 k4(uint i) { return vec4(ks[4u * i], ks[4u * i + 1u], ks[4u * i + 2u], ks[4u * i + 3u]); }

void main() {
    uint tid = gl_LocalInvocationID.x;
    if (p.u[14] != 0u) {
        if (tid == 0u) {
            uint spins = 0u;
            while (atomicAdd(done[p.u[14] - 1u], 0u) < p.u[15])
                if (++spins == SPIN_LIMIT) { atomicOr(done[p.u[14] - 1u], 0x80000000u); break; }
        }
        barrier();
        memoryBarrierBuffer();
    }
    uint heads = p.u[1], kvHeads = p.u[2], hd = p.u[3], window = p.u[5], kvStride = p.u[7], per = p.u[11];
    uint tables = p.u[4], hl = p.u[8] / 2u;
    float scale = uintBitsToFloat(p.u[6]);
    uint pos = st.pos0, lo = window > 0u && pos + 1u > window ? pos + 1u - window : 0u;
    uint chunks = (pos - lo) / SPLIT + 1u, used = min(per, chunks);
    bool vec = (hd & 3u) == 0u && (kvStride & 3u) == 0u;
    // the values: invocation tid takes vec4 tid % nq of the keys g, g + groups, ... (g = tid / nq)
    uint nq = hd >> 2, groups = vec ? min(WG / nq, SPLIT) : 1u, vq = tid % max(nq, 1u), vg = tid / max(nq, 1u);
    // the scores: invocation tid takes key tid / KP, its vec4s (or dims) tid % KP, + KP, ...
    uint key = tid / KP, part = tid % KP;
    for (uint wg = gl_WorkGroupID.x; wg < heads * per; wg += gl_NumWorkGroups.x) {
        uint h = wg / per, w0 = wg % per;
        if (w0 >= chunks) continue;   // no keys for it at this position (the dispatch covers the whole context)
        uint group = heads / kvHeads, k0 = (h / group) * hd;
        // it takes the last chunk, whose last key is the step's own (u9 = 1: a layer reading an earlier layer's
        // caches, which already hold the step's key and value: nothing rotated or appended, every key from the caches)
        bool cur = p.u[9] == 0u && w0 == (chunks - 1u) % per;
        // rotate-hl: dims i < hl paired with i + hl, dims past 2·hl copied
        for (uint i = tid; i < hl; i += WG) {
            float co = gt[tables + i], si = gt[tables + hl + i];
            float x1 = a[h * hd + i], x2 = a[h * hd + i + hl];
            qs[i] = x1 * co - x2 * si;
            qs[i + hl] = x2 * co + x1 * si;
            if (cur) {
                float y1 = kNew[k0 + i], y2 = kNew[k0 + i + hl];
                ks[i] = y1 * co - y2 * si;
                ks[i + hl] = y2 * co + y1 * si;
            }
        }
        for (uint i = 2u * hl + tid; i < hd; i += WG) {
            qs[i] = a[h * hd + i];
            if (cur) ks[i] = kNew[k0 + i];
        }
        barrier();
        if (cur && h % group == 0u) {
            // the first head of the kv group stores the step's key and value for later steps (no workgroup of this
            // dispatch reads that row of the caches)
            uint row = pos * kvStride + k0;
            if (KV_HALF != 0u) {
                for (uint i = tid; i < hd / 2u; i += WG) {   // by pairs (the row and hd even)
                    kh[row / 2u + i] = packHalves(ks[2u * i], ks[2u * i + 1u]);
                    vh[row / 2u + i] = packHalves(vNew[k0 + 2u * i], vNew[k0 + 2u * i + 1u]);
                }
            } else {
                for (uint i = tid; i < hd; i += WG) { b[row + i] = ks[i]; c[row + i] = vNew[k0 + i]; }
            }
        }
        float m = -3.4e38, l = 0.0, acc = 0.0;   // acc: dim tid's sum
        for (uint ch = w0; ch < chunks; ch += per) {
            uint j0 = lo + ch * SPLIT, n = min(SPLIT, pos + 1u - j0);
            bool own = cur && ch == chunks - 1u;   // the chunk's last key is the step's: from ks and vNew, not the caches
            uint nc = own ? n - 1u : n;            // keys read from the caches
            float dt = 0.0;
            if (key < n) {
                if (key == nc) {
                    if (vec) for (uint i = part; i < nq; i += KP) dt += dot(q4(i), k4(i));
                    else for (uint i = part; i < hd; i += KP) dt += qs[i] * ks[i];
                } else if (vec) {
                    uint kb = ((j0 + key) * kvStride + k0) >> 2;
                    for (uint i = part; i < nq; i += LOADS * KP) {
                        vec4 kv[LOADS];
                        if (KV_HALF != 0u) {
                            [[unroll]] for (uint u = 0u; u < LOADS; u++) kv[u] = i + u * KP < nq ? halves4(kh2[kb + i + u * KP]) : vec4(0.0);
                        } else {
                            [[unroll]] for (uint u = 0u; u < LOADS; u++) kv[u] = i + u * KP < nq ? b4[kb + i + u * KP] : vec4(0.0);
                        }
                        [[unroll]] for (uint u = 0u; u < LOADS; u++) if (i + u * KP < nq) dt += dot(q4(i + u * KP), kv[u]);
                    }
                } else {
                    uint kb = (j0 + key) * kvStride + k0;
                    if (KV_HALF != 0u) for (uint i = part; i < hd; i += KP) dt += qs[i] * half1(kh[(kb + i) >> 1u], kb + i);
                    else for (uint i = part; i < hd; i += KP) dt += qs[i] * b[kb + i];
                }
            }
            sp[tid] = dt;
            barrier();
            // invocation tid < n now holds key tid's score: its KP parts in order
            float sc = -3.4e38;
            if (tid < n) {
                float s = sp[tid * KP];
                for (uint k = 1u; k < KP; k++) s += sp[tid * KP + k];
                sc = s * scale;
            }
            float mn = max(m, reduce(sc, true));
            float e = tid < n ? exp(sc - mn) : 0.0;
            if (tid < SPLIT) ps[tid] = e;
            float corr = exp(m - mn);             // 0 before the first chunk
            l = l * corr + reduce(e, false);      // its barriers publish ps
            float sv = 0.0;
            if (vec) {
                if (vg < groups) {
                    vec4 s4 = vec4(0.0);
                    uint cb = (k0 >> 2) + vq;
                    for (uint j = vg; j < nc; j += LOADS * groups) {
                        vec4 cv[LOADS];
                        [[unroll]] for (uint u = 0u; u < LOADS; u++) {
                            uint jj = j + u * groups;
                            if (KV_HALF != 0u) cv[u] = jj < nc ? halves4(vh2[(((j0 + jj) * kvStride) >> 2) + cb]) : vec4(0.0);
                            else cv[u] = jj < nc ? c4[(((j0 + jj) * kvStride) >> 2) + cb] : vec4(0.0);
                        }
                        [[unroll]] for (uint u = 0u; u < LOADS; u++) s4 += ps[min(j + u * groups, SPLIT - 1u)] * cv[u];
                    }
                    vp[vg * nq + vq] = s4;
                }
                barrier();
                if (tid < hd)
                    for (uint g = 0u; g < groups; g++) sv += vp[g * nq + (tid >> 2)][tid & 3u];
            } else if (tid < hd) {
                if (KV_HALF != 0u) for (uint j = 0u; j < nc; j++) sv += ps[j] * half1(vh[((j0 + j) * kvStride + k0 + tid) >> 1u], k0 + tid);
                else for (uint j = 0u; j < nc; j++) sv += ps[j] * c[(j0 + j) * kvStride + k0 + tid];
            }
            if (tid < hd) {
                if (own) sv += ps[nc] * vNew[k0 + tid];
                acc = acc * corr + sv;
            }
            m = mn;
            barrier();   // ps, sp and vp are read before the next chunk writes them
        }
        uint o = p.u[10] + wg * (hd + 2u);
        if (tid < hd) d[o + tid] = acc;
        if (tid == 0u) { d[o + hd] = m; d[o + hd + 1u] = l; }
        // every invocation's partial sums out before the count says this workgroup is done (release before the count,
        // acquire after it, the barriers for the others)
        memoryBarrierBuffer();
        barrier();
        if (tid == 0u) {
            memoryBarrierBuffer();
            lastOfHead = atomicAdd(st.count[h], 1u) == used - 1u;
            memoryBarrierBuffer();
        }
        barrier();
        if (lastOfHead) {
            // OP 8 for head h, its operations in its order: the partial sums by workgroup, whichever finished first
            uint ob = p.u[10] + h * per * (hd + 2u);
            float mx = -3.4e38;
            for (uint w = 0u; w < used; w++) mx = max(mx, d[ob + w * (hd + 2u) + hd]);
            float sink = p.u[12] != 0u ? prm[p.u[12] - 1u + h] : 0.0;
            if (p.u[12] != 0u) mx = max(mx, sink);
            float ls = 0.0;
            for (uint w = 0u; w < used; w++) ls += d[ob + w * (hd + 2u) + hd + 1u] * exp(d[ob + w * (hd + 2u) + hd] - mx);
            if (p.u[12] != 0u) ls += exp(sink - mx);
            for (uint i = tid; i < hd; i += WG) {
                float sum = 0.0;
                for (uint w = 0u; w < used; w++) sum += d[ob + w * (hd + 2u) + i] * exp(d[ob + w * (hd + 2u) + hd] - mx);
                d[h * hd + i] = sum / ls;
            }
            if (tid == 0u) atomicExchange(st.count[h], 0u);   // for the next layer's dispatch and the next replay
        }
    }
    if (p.u[13] != 0u) {
        memoryBarrierBuffer();
        barrier();
        if (tid == 0u) atomicAdd(done[p.u[13] - 1u], 1u);
    }
}
