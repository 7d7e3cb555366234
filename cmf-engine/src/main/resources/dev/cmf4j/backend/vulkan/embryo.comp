#version 450
// cmf4j Vulkan operators of the Embryo family on the resident forward (VulkanResidentForward): the bounded anchor
// swa_sink_v1 (the ring attend and the ring commit), the resonance router and the hierarchical head's cluster
// log-softmax and finish. Same bindings and push constants as ops.comp (one pipeline per OP, specialization constant 0,
// OPs 32-36 of VulkanContext.ops; P the forward's parameters: sinks, rotation tables, descriptors); offsets in floats.
// Its sums of the router's errors and of the head's exponentials are in 64-bit floats, as the CPU's (ResonanceRouter,
// HierarchicalHead): a device without shaderFloat64 does not create this module and such models run hybrid. The span's
// first position and its head gate are read from S, so a decode step's commands are recorded once. Built into
// embryo.spv by tools/build-vulkan-shaders.sh. CUDA's resident_embryo.cu is the same operators.

#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint OP = 32u;
const uint WG = 64u;
const uint MAX_SCORES = 160u;     // sinks + window of one anchor (the format's bound; VulkanResidentForward checks it)
const uint MAX_HEAD_DIM = 256u;
const uint MAX_EXPERTS = 1024u;   // DecoderPlan.MAX_EXPERTS

layout(std430, set = 0, binding = 0) buffer A { float a[]; };
layout(std430, set = 0, binding = 1) buffer B { float b[]; };
layout(std430, set = 0, binding = 1) buffer BU { uint bu[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
// the span's first position, then (8 bytes in) its head gate: clusters whose log-probability is below it are dropped
layout(std430, set = 0, binding = 4) readonly buffer S { uint pos0; uint unused; double gate; } st;
layout(std430, set = 0, binding = 5) buffer E { float e[]; };
layout(std430, set = 0, binding = 7) buffer G { float g[]; };
layout(std430, set = 0, binding = 8) readonly buffer P { float prm[]; };

layout(push_constant) uniform Push { uint u[16]; } p;

shared float red[WG];
shared double dred[WG];
shared float sc[MAX_SCORES];
shared float qs[MAX_HEAD_DIM];
shared double score[MAX_EXPERTS];

// the workgroup's sum or max of v, every invocation gets it (ops.comp's reduce)
float reduce(float v, bool isMax) {
    float s = isMax ? subgroupMax(v) : subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = s;
    barrier();
    float r = red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) r = isMax ? max(r, red[i]) : r + red[i];
    barrier();
    return r;
}

double reduceD(double v) {
    dred[gl_LocalInvocationID.x] = v;
    barrier();
    double r = 0.0;
    for (uint i = 0u; i < WG; i++) r += dred[i];
    barrier();
    return r;
}

// logsumexp of n floats of A from at: the max in float, the sum of exponentials in double (HierarchicalHead's)
float lse(uint at, uint n) {
    float m = uintBitsToFloat(0xff800000u);
    for (uint i = gl_LocalInvocationID.x; i < n; i += WG) m = max(m, a[at + i]);
    m = reduce(m, true);
    double s = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < n; i += WG) s += double(exp(a[at + i] - m));
    return m + log(float(reduceD(s)));
}

void main() {
    uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupID.x;
    if (OP == 32u) {
        // workgroup wg = t·heads + h: query head h of row t (the span's row u7 + t, position pos0 + t): one softmax over
        // the S sinks of its KV group (scored unrotated) and the window max(0, p − W + 1) … p, the query rotated by the
        // distance d = p − j (rotate-half pairs i, i + half; cos/sin [W, half] in P; dims past the rotary span
        // unrotated). A key of this step is the span's own row (B k, C v [rows, kvDim]), an earlier one the ring's slot
        // j mod W (D ringK, E ringV [W, kvDim]). A q [rows, heads·hd], G out likewise. u0 heads, u1 kvHeads, u2 hd,
        // u3 W, u4 S, u5 half (hr), u6 scale bits, u7 row0; P: sinkK [kvHeads, S, hd] at u9, sinkV at u10, cos at u11, sin at u12
        uint heads = p.u[0], kvh = p.u[1], hd = p.u[2], W = p.u[3], S = p.u[4], hr = p.u[5], row0 = p.u[7];
        uint t = wg / heads, h = wg - t * heads, grp = h / (heads / kvh), qDim = heads * hd, kvDim = kvh * hd;
        uint p0 = st.pos0, pos = p0 + t, first = pos + 1u > W ? pos + 1u - W : 0u, n = S + pos - first + 1u;
        for (uint i = tid; i < hd; i += WG) qs[i] = a[(row0 + t) * qDim + h * hd + i];
        barrier();
        for (uint s = tid; s < n; s += WG) {
            float acc = 0.0;
            if (s < S) {
                uint kk = p.u[9] + (grp * S + s) * hd;
                for (uint i = 0u; i < hd; i++) acc += qs[i] * prm[kk + i];
            } else {
                uint dist = s - S, j = pos - dist, cs = p.u[11] + dist * hr, sn = p.u[12] + dist * hr;
                bool own = j >= p0;
                uint kk = own ? (row0 + j - p0) * kvDim + grp * hd : (j % W) * kvDim + grp * hd;
                for (uint i = 0u; i < hr; i++) {
                    float x0 = qs[i], x1 = qs[i + hr], co = prm[cs + i], si = prm[sn + i];
                    float k0 = own ? b[kk + i] : d[kk + i], k1 = own ? b[kk + i + hr] : d[kk + i + hr];
                    acc += k0 * (x0 * co - x1 * si) + k1 * (x0 * si + x1 * co);
                }
                for (uint i = 2u * hr; i < hd; i++) acc += qs[i] * (own ? b[kk + i] : d[kk + i]);
            }
            sc[s] = acc * uintBitsToFloat(p.u[6]);
        }
        barrier();
        float m = uintBitsToFloat(0xff800000u);
        for (uint s = tid; s < n; s += WG) m = max(m, sc[s]);
        m = reduce(m, true);
        float sum = 0.0;
        for (uint s = tid; s < n; s += WG) { float ex = exp(sc[s] - m); sc[s] = ex; sum += ex; }
        float inv = 1.0 / reduce(sum, false);   // (its barriers also publish sc)
        for (uint i = tid; i < hd; i += WG) {
            float acc = 0.0;
            for (uint s = 0u; s < S; s++) acc += sc[s] * prm[p.u[10] + (grp * S + s) * hd + i];
            for (uint dist = 0u; dist + S < n; dist++) {
                uint j = pos - dist;
                acc += sc[S + dist] * (j >= p0 ? c[(row0 + j - p0) * kvDim + grp * hd + i] : e[(j % W) * kvDim + grp * hd + i]);
            }
            g[(row0 + t) * qDim + h * hd + i] = acc * inv;
        }
    } else if (OP == 33u) {
        // after the span's attend: its last min(tokens, W) rows of A k and B v [rows, kvDim] (from row u3) into the ring
        // slots (pos0 + t) mod W of C ringK and D ringV; workgroup wg = the wg-th of those rows. u0 tokens, u1 W, u2 kvDim
        uint tokens = p.u[0], W = p.u[1], kvDim = p.u[2], keep = min(tokens, W), t = tokens - keep + wg;
        uint slot = (st.pos0 + t) % W;
        for (uint i = tid; i < kvDim; i += WG) {
            c[slot * kvDim + i] = a[(p.u[3] + t) * kvDim + i];
            d[slot * kvDim + i] = b[(p.u[3] + t) * kvDim + i];
        }
    } else if (OP == 34u) {
        // the resonance router of row t = wg of A y [T, dim]: r = y − μ_e, err_e = ‖r‖² − Σ_i (r·u_ei)² in double,
        // score_e = b_e − err_e; into B route (moe.comp's: per row its expert id, then its weight's f32 bits) the first
        // maximum (a tie to the lower id) with weight 1. u0 experts, u1 rank, u2 dim; P: mu [E, dim] at u3,
        // u [E, rank, dim] at u4, bias [E] at u5
        uint experts = p.u[0], rank = p.u[1], dim = p.u[2], y = wg * dim;
        for (uint ex = tid; ex < experts; ex += WG) {
            uint mu = p.u[3] + ex * dim;
            double sq = 0.0;
            for (uint j = 0u; j < dim; j++) { double r = double(a[y + j]) - double(prm[mu + j]); sq += r * r; }
            for (uint i = 0u; i < rank; i++) {
                uint ui = p.u[4] + (ex * rank + i) * dim;
                double pr = 0.0;
                for (uint j = 0u; j < dim; j++) pr += (double(a[y + j]) - double(prm[mu + j])) * double(prm[ui + j]);
                sq -= pr * pr;
            }
            score[ex] = double(prm[p.u[5] + ex]) - sq;
        }
        barrier();
        if (tid == 0u) {
            uint best = 0u;
            for (uint ex = 1u; ex < experts; ex++) if (score[ex] > score[best]) best = ex;
            bu[2u * wg] = best;
            bu[2u * wg + 1u] = floatBitsToUint(1.0);
        }
    } else if (OP == 35u) {
        // row wg of A lc [rows, clusters]: lc − logsumexp(lc), in place. u0 clusters
        uint at = wg * p.u[0];
        float l = lse(at, p.u[0]);
        for (uint i = tid; i < p.u[0]; i += WG) a[at + i] -= l;
    } else if (OP == 36u) {
        // workgroup wg = r·clusters + cl: cluster cl of head row u4 + r of A out [rows, vocab] holding z = head·x, with
        // B lc [rows, clusters] the cluster log-probabilities: kept (lp ≥ the span's gate): log p = z − logsumexp of the
        // cluster's z + lp; dropped: every token of it lp − spread (ln size), so the row still sums to 1.
        // u0 vocab, u1 clusters, u2 size, u3 spread bits
        uint clusters = p.u[1], size = p.u[2], r = p.u[4] + wg / clusters, cl = wg - (wg / clusters) * clusters;
        float lp = b[r * clusters + cl];
        uint at = r * p.u[0] + cl * size;
        if (double(lp) < st.gate) {
            for (uint i = tid; i < size; i += WG) a[at + i] = lp - uintBitsToFloat(p.u[3]);
            return;
        }
        float l = lse(at, size);
        for (uint i = tid; i < size; i += WG) a[at + i] = a[at + i] - l + lp;
    }
}
