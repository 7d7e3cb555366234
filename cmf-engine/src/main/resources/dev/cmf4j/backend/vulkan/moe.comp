#version 450
// cmf4j Vulkan mixture of experts of the resident forward (VulkanResidentForward.moe), one pipeline per (OP, KIND):
// the router's product, the routing, each chosen expert's gate and up through the GLU, and the chosen experts' down
// products weighted and summed into the output. The expert ids and weights stay in buffer C (no host read-back), so a
// decode step is recorded once and replayed. Weights are read from an expert stack (VulkanResidentForward.Stack): a
// product's rows for every expert back to back in one buffer in their stored dtype, then (int8) an f32 scale per row,
// then (q8_2f) an f32 column-scale vector per run of u7 rows; q4_block's nibbles (rows of whole groups of 32) with an
// f32 scale per group from word u3; q4tp's nibbles, each row's {exp2(lo), exp2(step)} from word u3 and its 5-bit group
// codes from word u4 (matvec.comp's layout, rows of whole groups). Every row's dot product is one workgroup's, the same
// whatever the number of rows in the step, so a row's result does not depend on the batch around it. Built into
// moe.spv by tools/build-vulkan-shaders.sh. Every sum is in f32. Bindings are ops.comp's layout (4..7 unused here).

#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable

layout(local_size_x = 64) in;
// 0 route, 1 gate/up + GLU, 2 down + weighted sum, 3 plain product (router); for chunks, by expert: 4 gate/up + GLU,
// 5 down per pick, 6 the picks' weighted sum; input-major experts ([in, out] pieces): 7 gate/up + GLU, 8 down + sum
layout(constant_id = 0) const uint OP = 0u;
layout(constant_id = 1) const uint KIND = 0u;   // the stack's weights: 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row, q8_2f), 4 q4_block, 5 q4tp
const uint WG = 64u;
const uint MAX_EXPERTS = 1024u, MAX_TOP_K = 32u;   // DecoderPlan.MAX_EXPERTS, MAX_TOP_K
const uint NONE = 0xffffffffu;
const uint TT = 8u;   // picks of one expert a workgroup takes together (OPs 4, 5): each weight read once for them

layout(std430, set = 0, binding = 0) readonly buffer A { uint w[]; };       // the expert stack
layout(std430, set = 0, binding = 1) readonly buffer B { float x[]; };      // input rows (route: the router's logits)
layout(std430, set = 0, binding = 2) buffer C { uint route[]; };           // per slot t*k + j: expert id, weight (f32 bits)
layout(std430, set = 0, binding = 3) buffer D { float y[]; };              // output rows
layout(std430, set = 0, binding = 8) readonly buffer P { float prm[]; };    // the forward's parameters (expert biases)

// u0 outputs a row (route: experts), u1 columns (route: k), u2 k (route: bit 0 renormalise the k, bit 1 top-k of the
// logits then softmax over them), u3 word offset of the row scales, u4 word offset of the column scales, u5 bit 0 row
// scales, bit 1 column scales, u6 the biases' offset in P + 1 (0: none; indexed by the stack row), u7 rows a
// column-scale vector covers, u8 stack rows an expert, u9 (gate/up) 1: gate and up interleaved (2r, 2r + 1), 0: halves
// (r, rows + r); (down) 1: add into y; u10 (gate/up) the GLU: 0 SiLU, 1 GELU tanh, 2 GELU, 3 gpt-oss's clamped SwiGLU
// with alpha u11 and limit u12 (f32 bits); u13 (OPs 4, 5) the step's picks T·k; u14 (OPs 7, 8) the stack's columns
layout(push_constant) uniform Push { uint u[16]; } p;

shared float red[WG];
shared float pv[MAX_EXPERTS];
shared uint taken[MAX_EXPERTS];
shared float bestV[WG];
shared uint bestI[WG];
shared uint picked[MAX_TOP_K];
shared float pw[MAX_TOP_K];
shared uint order[MAX_TOP_K];
shared uint list[WG];   // OPs 4, 5: the picks of the workgroup's expert among a window of WG
shared uint listN;
shared float rung[32];   // q4tp: the ladder of the row being read

// the workgroup's sum or max of v, every invocation gets it (as ops.comp's; the barriers also publish shared memory)
float reduce(float v, bool isMax) {
    float s = isMax ? subgroupMax(v) : subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = s;
    barrier();
    float r = red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) r = isMax ? max(r, red[i]) : r + red[i];
    barrier();
    return r;
}

// Numerical Recipes' erfc fit, as the CPU's Activation.GELU (ops.comp's)
float erf1(float v) {
    float z = abs(v);
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
            + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
    return v >= 0.0 ? 1.0 - r : r - 1.0;
}

// the GLU of a gate and an up value (Glu.Gated's activations, Glu.ClampedSwiglu)
float glu(float g, float u, uint kind) {
    if (kind == 0u) return g / (1.0 + exp(-g)) * u;
    if (kind == 1u) return 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
    if (kind == 2u) return 0.5 * g * (1.0 + erf1(g * 0.7071067811865476)) * u;
    float alpha = uintBitsToFloat(p.u[11]), limit = uintBitsToFloat(p.u[12]);
    float gc = min(g, limit), uc = max(-limit, min(u, limit));
    return (uc + 1.0) * (gc / (1.0 + exp(-gc * alpha)));
}

// byte b of the stack
uint byteAt(uint b) { return (w[b >> 2] >> ((b & 3u) * 8u)) & 255u; }

// q4tp: the scale of group g of stack row sr, from the row's LSB-first 5-bit code stream (as matvec.comp's)
float tpScale(uint sr, uint g) {
    uint gpr = (p.u[1] + 31u) >> 5, bytes = (gpr * 5u + 7u) >> 3;
    uint base = p.u[4] * 4u + sr * bytes, bit = g * 5u, at = bit >> 3;
    uint v = byteAt(base + at);
    if (at + 1u < bytes) v |= byteAt(base + at + 1u) << 8;
    return rung[(v >> (bit & 7u)) & 31u];
}

// q4tp: rung k = exp2(lo) · exp2(step)^k of stack row sr by k sequential f32 products (as the CPU builds the ladder);
// then a barrier. The previous row's rungs were last read before its sums' barriers.
void ladder(uint sr) {
    if (KIND != 5u) return;
    uint tid = gl_LocalInvocationID.x;
    if (tid < 32u) {
        float v = uintBitsToFloat(w[p.u[3] + 2u * sr]), ratio = uintBitsToFloat(w[p.u[3] + 2u * sr + 1u]);
        for (uint k = 0u; k < tid; k++) v *= ratio;
        rung[tid] = v;
    }
    barrier();
}

// element e of the weight plane (any alignment)
float w1(uint e) {
    if (KIND == 5u) {
        uint sr = e / p.u[1];
        return (float((w[e >> 3] >> ((e & 7u) * 4u)) & 15u) - 8.0) * tpScale(sr, (e - sr * p.u[1]) >> 5);
    }
    if (KIND == 4u) return (float((w[e >> 3] >> ((e & 7u) * 4u)) & 15u) - 8.0) * uintBitsToFloat(w[p.u[3] + (e >> 5)]);
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

// elements e .. e+3 (e a multiple of 4: within one group of 32)
vec4 w4(uint e) {
    if (KIND >= 4u) {   // (nibble e first, low nibbles first, as matvec.comp's)
        uint v = w[e >> 3] >> ((e & 7u) * 4u);
        vec4 q = vec4(float(v & 15u), float((v >> 4) & 15u), float((v >> 8) & 15u), float((v >> 12) & 15u)) - 8.0;
        if (KIND == 4u) return q * uintBitsToFloat(w[p.u[3] + (e >> 5)]);
        uint sr = e / p.u[1];
        return q * tpScale(sr, (e - sr * p.u[1]) >> 5);
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

// stack row sr · x[xo, xo + cols): rs[sr] · Σ_c W[sr, c]·cf[c]·x[c] (as matvec.comp), by the whole workgroup
float rowDot(uint sr, uint xo) {
    ladder(sr);
    uint tid = gl_LocalInvocationID.x, n = p.u[1], base = sr * n;
    bool colScales = (p.u[5] & 2u) != 0u;
    uint cf = p.u[4] + (sr / p.u[7]) * n;
    float acc = 0.0;
    if ((n & 3u) == 0u) {
        for (uint c = tid * 4u; c < n; c += WG * 4u) {
            vec4 wv = w4(base + c);
            if (colScales) wv *= vec4(uintBitsToFloat(w[cf + c]), uintBitsToFloat(w[cf + c + 1u]), uintBitsToFloat(w[cf + c + 2u]),
                                      uintBitsToFloat(w[cf + c + 3u]));
            acc += dot(wv, vec4(x[xo + c], x[xo + c + 1u], x[xo + c + 2u], x[xo + c + 3u]));
        }
    } else {
        for (uint c = tid; c < n; c += WG) {
            float wv = w1(base + c);
            if (colScales) wv *= uintBitsToFloat(w[cf + c]);
            acc += wv * x[xo + c];
        }
    }
    float s = reduce(acc, false);
    return (p.u[5] & 1u) != 0u ? s * uintBitsToFloat(w[p.u[3] + sr]) : s;
}

float bias(uint sr) { return p.u[6] != 0u ? prm[p.u[6] - 1u + sr] : 0.0; }

// stack row sr · x[xo[t] ..] for t < nt, each as rowDot gives it (the same sums in the same order), the row read once
void rowDots(uint sr, uint nt, uint xo[TT], inout float res[TT]) {
    ladder(sr);
    uint tid = gl_LocalInvocationID.x, n = p.u[1], base = sr * n;
    bool colScales = (p.u[5] & 2u) != 0u;
    uint cf = p.u[4] + (sr / p.u[7]) * n;
    float acc[TT];
    for (uint t = 0u; t < TT; t++) acc[t] = 0.0;
    if ((n & 3u) == 0u) {
        for (uint c = tid * 4u; c < n; c += WG * 4u) {
            vec4 wv = w4(base + c);
            if (colScales) wv *= vec4(uintBitsToFloat(w[cf + c]), uintBitsToFloat(w[cf + c + 1u]), uintBitsToFloat(w[cf + c + 2u]),
                                      uintBitsToFloat(w[cf + c + 3u]));
            for (uint t = 0u; t < TT; t++)
                if (t < nt) acc[t] += dot(wv, vec4(x[xo[t] + c], x[xo[t] + c + 1u], x[xo[t] + c + 2u], x[xo[t] + c + 3u]));
        }
    } else {
        for (uint c = tid; c < n; c += WG) {
            float wv = w1(base + c);
            if (colScales) wv *= uintBitsToFloat(w[cf + c]);
            for (uint t = 0u; t < TT; t++)
                if (t < nt) acc[t] += wv * x[xo[t] + c];
        }
    }
    for (uint t = 0u; t < TT; t++) {
        if (t < nt) {
            float s = reduce(acc[t], false);
            res[t] = (p.u[5] & 1u) != 0u ? s * uintBitsToFloat(w[p.u[3] + sr]) : s;
        }
    }
}

// OPs 4, 5: lists into `list` the picks among slots [base, base + WG) that chose expert e (in slot order)
void listPicks(uint base, uint slots, uint e) {
    barrier();   // the previous window's list is read
    if (gl_LocalInvocationID.x == 0u) {
        uint n = 0u;
        for (uint i = 0u; i < WG && base + i < slots; i++) if (route[2u * (base + i)] == e) list[n++] = base + i;
        listN = n;
    }
    barrier();
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    if (OP == 0u) {
        // token t = workgroup: softmax over the experts' logits x[t*E ..] and the top k by probability (largest first,
        // ties to the lower index: the CPU's Softmax.topK), renormalised over the k with bit 0; or (bit 1, gpt-oss) the
        // top k logits and a softmax over those k. Tokens u3.
        uint experts = p.u[0], k = p.u[1], tokens = p.u[3];
        bool renorm = (p.u[2] & 1u) != 0u, logitsFirst = (p.u[2] & 2u) != 0u;
        for (uint t = gl_WorkGroupID.x; t < tokens; t += gl_NumWorkGroups.x) {
            uint lo = t * experts;
            float m = -3.4e38;
            for (uint e = tid; e < experts; e += WG) { m = max(m, x[lo + e]); taken[e] = 0u; }
            m = reduce(m, true);
            if (logitsFirst) {
                for (uint e = tid; e < experts; e += WG) pv[e] = x[lo + e];
            } else {
                float s = 0.0;
                for (uint e = tid; e < experts; e += WG) { float v = exp(x[lo + e] - m); pv[e] = v; s += v; }
                s = reduce(s, false);
                for (uint e = tid; e < experts; e += WG) pv[e] = pv[e] / s;
            }
            barrier();
            for (uint j = 0u; j < k; j++) {
                // this invocation's best not yet picked (ascending, so a tie keeps the lower index), then the
                // workgroup's: the larger value, else the lower index
                float bv = 0.0;
                uint bi = NONE;
                for (uint e = tid; e < experts; e += WG)
                    if (taken[e] == 0u && (bi == NONE || pv[e] > bv)) { bv = pv[e]; bi = e; }
                bestV[tid] = bv;
                bestI[tid] = bi;
                barrier();
                for (uint st = WG / 2u; st > 0u; st >>= 1) {
                    if (tid < st) {
                        float ov = bestV[tid + st];
                        uint oi = bestI[tid + st], ci = bestI[tid];
                        if (oi != NONE && (ci == NONE || ov > bestV[tid] || (ov == bestV[tid] && oi < ci))) { bestV[tid] = ov; bestI[tid] = oi; }
                    }
                    barrier();
                }
                if (tid == 0u) { picked[j] = bestI[0]; pw[j] = bestV[0]; taken[bestI[0]] = 1u; }
                barrier();
            }
            if (tid == 0u) {
                if (logitsFirst) {   // Softmax.apply over the k picked logits, in pick order
                    float mx = -3.4e38, sum = 0.0;
                    for (uint j = 0u; j < k; j++) mx = max(mx, pw[j]);
                    for (uint j = 0u; j < k; j++) { pw[j] = exp(pw[j] - mx); sum += pw[j]; }
                    for (uint j = 0u; j < k; j++) pw[j] = pw[j] / sum;
                } else if (renorm) {
                    float sum = 0.0;
                    for (uint j = 0u; j < k; j++) sum += pw[j];
                    for (uint j = 0u; j < k; j++) pw[j] = pw[j] / sum;
                }
                for (uint j = 0u; j < k; j++) {
                    route[2u * (t * k + j)] = picked[j];
                    route[2u * (t * k + j) + 1u] = floatBitsToUint(pw[j]);
                }
            }
            barrier();
        }
    } else if (OP == 1u) {
        // slot = t*k + j (workgroup y): y[slot*u0 + r] = glu(G_e[r]·x_t + gb, U_e[r]·x_t + ub), e its expert, x_t at
        // x[t*u1]; gate and up rows of stack row e*u8 + (2r, 2r + 1) interleaved, else (r, u0 + r)
        uint rows = p.u[0], k = p.u[2], slot = gl_WorkGroupID.y, t = slot / k, e = route[2u * slot];
        bool inter = p.u[9] != 0u;
        for (uint r = gl_WorkGroupID.x; r < rows; r += gl_NumWorkGroups.x) {
            uint gr = e * p.u[8] + (inter ? 2u * r : r), ur = e * p.u[8] + (inter ? 2u * r + 1u : rows + r);
            float g = rowDot(gr, t * p.u[1]) + bias(gr);
            float u = rowDot(ur, t * p.u[1]) + bias(ur);
            if (tid == 0u) y[slot * rows + r] = glu(g, u, p.u[10]);
        }
    } else if (OP == 2u) {
        // token t (workgroup y): y[t*u0 + r] (+)= Σ_j w_j·(D_e[r]·h_j + db[e, r]) over its k slots j (h_j at
        // x[(t*k + j)*u1], e = its expert, stack row e*u8 + r) in ascending expert order, as the CPU adds them
        uint rows = p.u[0], k = p.u[2], t = gl_WorkGroupID.y;
        if (tid == 0u) {
            for (uint j = 0u; j < k; j++) order[j] = j;
            for (uint j = 1u; j < k; j++)
                for (uint q = j; q > 0u && route[2u * (t * k + order[q])] < route[2u * (t * k + order[q - 1u])]; q--) {
                    uint o = order[q]; order[q] = order[q - 1u]; order[q - 1u] = o;
                }
        }
        barrier();
        for (uint r = gl_WorkGroupID.x; r < rows; r += gl_NumWorkGroups.x) {
            float acc = 0.0;
            for (uint q = 0u; q < k; q++) {
                uint slot = t * k + order[q], sr = route[2u * slot] * p.u[8] + r;
                float v = rowDot(sr, slot * p.u[1]) + bias(sr);
                acc += v * uintBitsToFloat(route[2u * slot + 1u]);
            }
            if (tid == 0u) {
                uint o = t * rows + r;
                y[o] = p.u[9] != 0u ? y[o] + acc : acc;
            }
        }
    } else if (OP == 7u) {
        // OP 1 over input-major pieces (slot: workgroup y; outputs r: invocations, so a warp reads consecutive columns):
        // a piece's element (c, col) at stack row b*u1 + c, column col of u14; gate and up: pieces 2e and 2e + 1 at
        // column r (u9 = 0), or piece e at columns 2r, 2r + 1 (u9 = 1) or r, u0 + r (u9 = 2). Row scales (int8) are the
        // inputs' (x[c] times them), column scales the outputs'; biases [e][2·u0] by the halves' column
        uint rows = p.u[0], cols = p.u[1], k = p.u[2], outs = p.u[14], slot = gl_WorkGroupID.y, t = slot / k, e = route[2u * slot];
        uint r = gl_WorkGroupID.x * WG + tid;
        if (r < rows) {
            uint lay = p.u[9];
            uint gb = lay == 0u ? 2u * e : e, ub = lay == 0u ? 2u * e + 1u : e;
            uint gc = lay == 1u ? 2u * r : r, uc = lay == 1u ? 2u * r + 1u : lay == 2u ? rows + r : r;
            float g = 0.0, u = 0.0;
            for (uint c = 0u; c < cols; c++) {
                float xv = x[t * cols + c];
                float xg = (p.u[5] & 1u) != 0u ? xv * uintBitsToFloat(w[p.u[3] + gb * cols + c]) : xv;
                float xu = (p.u[5] & 1u) != 0u ? xv * uintBitsToFloat(w[p.u[3] + ub * cols + c]) : xv;
                g += w1((gb * cols + c) * outs + gc) * xg;
                u += w1((ub * cols + c) * outs + uc) * xu;
            }
            if ((p.u[5] & 2u) != 0u) {
                g *= uintBitsToFloat(w[p.u[4] + gb * outs + gc]);
                u *= uintBitsToFloat(w[p.u[4] + ub * outs + uc]);
            }
            uint bg = e * 2u * rows + (lay == 1u ? 2u * r : r), bu = e * 2u * rows + (lay == 1u ? 2u * r + 1u : rows + r);
            y[slot * rows + r] = glu(g + bias(bg), u + bias(bu), p.u[10]);
        }
    } else if (OP == 8u) {
        // OP 2 over input-major pieces (token t: workgroup y; outputs r: invocations): expert e's piece e, element (c, r)
        // at stack row e*u1 + c, column r of u14 (= u0); biases [e][u0]
        uint rows = p.u[0], cols = p.u[1], k = p.u[2], t = gl_WorkGroupID.y;
        if (tid == 0u) {
            for (uint j = 0u; j < k; j++) order[j] = j;
            for (uint j = 1u; j < k; j++)
                for (uint q = j; q > 0u && route[2u * (t * k + order[q])] < route[2u * (t * k + order[q - 1u])]; q--) {
                    uint o = order[q]; order[q] = order[q - 1u]; order[q - 1u] = o;
                }
        }
        barrier();
        uint r = gl_WorkGroupID.x * WG + tid;
        if (r < rows) {
            float acc = 0.0;
            for (uint q = 0u; q < k; q++) {
                uint slot = t * k + order[q], e = route[2u * slot];
                float v = 0.0;
                for (uint c = 0u; c < cols; c++) {
                    float xv = x[slot * cols + c];
                    if ((p.u[5] & 1u) != 0u) xv *= uintBitsToFloat(w[p.u[3] + e * cols + c]);
                    v += w1((e * cols + c) * rows + r) * xv;
                }
                if ((p.u[5] & 2u) != 0u) v *= uintBitsToFloat(w[p.u[4] + e * rows + r]);
                acc += (v + bias(e * rows + r)) * uintBitsToFloat(route[2u * slot + 1u]);
            }
            uint o = t * rows + r;
            y[o] = p.u[9] != 0u ? y[o] + acc : acc;
        }
    } else if (OP == 4u) {
        // OP 1 by expert (workgroup y), for chunks: its picks among the step's u13 taken TT at a time, each weight row
        // read once for them; h as OP 1 writes it, bit for bit
        uint rows = p.u[0], k = p.u[2], e = gl_WorkGroupID.y, slots = p.u[13];
        bool inter = p.u[9] != 0u;
        for (uint base = 0u; base < slots; base += WG) {
            listPicks(base, slots, e);
            uint n = listN;
            for (uint r = gl_WorkGroupID.x; r < rows && n > 0u; r += gl_NumWorkGroups.x) {
                uint gr = e * p.u[8] + (inter ? 2u * r : r), ur = e * p.u[8] + (inter ? 2u * r + 1u : rows + r);
                for (uint s0 = 0u; s0 < n; s0 += TT) {
                    uint nt = min(TT, n - s0), xo[TT];
                    for (uint t = 0u; t < TT; t++) xo[t] = t < nt ? (list[s0 + t] / k) * p.u[1] : 0u;
                    float g[TT], u[TT];
                    rowDots(gr, nt, xo, g);
                    rowDots(ur, nt, xo, u);
                    if (tid == 0u)
                        for (uint t = 0u; t < nt; t++) y[list[s0 + t] * rows + r] = glu(g[t] + bias(gr), u[t] + bias(ur), p.u[10]);
                }
            }
        }
    } else if (OP == 5u) {
        // OP 2's products by expert (workgroup y), for chunks: y[slot*u0 + r] = D_e[r]·h_slot + db[e, r] for each of its
        // picks, TT at a time (OP 6 weighs and adds them)
        uint rows = p.u[0], e = gl_WorkGroupID.y, slots = p.u[13];
        for (uint base = 0u; base < slots; base += WG) {
            listPicks(base, slots, e);
            uint n = listN;
            for (uint r = gl_WorkGroupID.x; r < rows && n > 0u; r += gl_NumWorkGroups.x) {
                uint sr = e * p.u[8] + r;
                for (uint s0 = 0u; s0 < n; s0 += TT) {
                    uint nt = min(TT, n - s0), xo[TT];
                    for (uint t = 0u; t < TT; t++) xo[t] = t < nt ? list[s0 + t] * p.u[1] : 0u;
                    float v[TT];
                    rowDots(sr, nt, xo, v);
                    if (tid == 0u)
                        for (uint t = 0u; t < nt; t++) y[list[s0 + t] * rows + r] = v[t] + bias(sr);
                }
            }
        }
    } else if (OP == 6u) {
        // token t (workgroup y), output i (invocations): y[t*u0 + i] (+)= Σ_j w_j·x[(t*k + j)*u0 + i] in ascending
        // expert order (OP 2's sum over OP 5's products)
        uint rows = p.u[0], k = p.u[2], t = gl_WorkGroupID.y;
        if (tid == 0u) {
            for (uint j = 0u; j < k; j++) order[j] = j;
            for (uint j = 1u; j < k; j++)
                for (uint q = j; q > 0u && route[2u * (t * k + order[q])] < route[2u * (t * k + order[q - 1u])]; q--) {
                    uint o = order[q]; order[q] = order[q - 1u]; order[q - 1u] = o;
                }
        }
        barrier();
        for (uint i = gl_WorkGroupID.x * WG + tid; i < rows; i += gl_NumWorkGroups.x * WG) {
            float acc = 0.0;
            for (uint q = 0u; q < k; q++) {
                uint slot = t * k + order[q];
                acc += x[slot * rows + i] * uintBitsToFloat(route[2u * slot + 1u]);
            }
            uint o = t * rows + i;
            y[o] = p.u[9] != 0u ? y[o] + acc : acc;
        }
    } else {
        // token t (workgroup y): y[t*u0 + r] = W[r]·x_t + b[r] (the router's logits)
        uint rows = p.u[0], t = gl_WorkGroupID.y;
        for (uint r = gl_WorkGroupID.x; r < rows; r += gl_NumWorkGroups.x) {
            float v = rowDot(r, t * p.u[1]) + bias(r);
            if (tid == 0u) y[t * rows + r] = v;
        }
    }
}
