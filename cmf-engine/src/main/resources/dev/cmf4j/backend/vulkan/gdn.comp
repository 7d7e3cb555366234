#version 450
// cmf4j Vulkan operators of Qwen3-Next's layers on the resident forward (VulkanResidentForward): the gated delta net
// (unfuse, causal conv, gates, the delta rule, the gated norm), the attention output gate and the shared expert's gated
// add. Same bindings and push constants as ops.comp (one pipeline per OP, specialization constant 0, OPs 24-31 of
// VulkanContext.ops); offsets in floats. The span's first position is read from S (0: its recurrent state starts from
// zeros), so a decode step's commands are recorded once. Built into gdn.spv by tools/build-vulkan-shaders.sh. The
// semantics are the CPU's DeltaNetStep (token by token, as its decode step; CUDA's resident_arch.cu ra_gdn_* likewise).

#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint OP = 24u;
const uint WG = 64u;
const uint MAX_CONV = 8u;   // DecoderPlans.MAX_CONV_KERNEL

layout(std430, set = 0, binding = 0) buffer A { float a[]; };
layout(std430, set = 0, binding = 1) buffer B { float b[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(std430, set = 0, binding = 4) readonly buffer S { uint pos0; } st;
layout(std430, set = 0, binding = 5) buffer E { float e[]; };
layout(std430, set = 0, binding = 6) buffer F { float f[]; };
layout(std430, set = 0, binding = 7) buffer G { float g[]; };

layout(push_constant) uniform Push { uint u[16]; } p;

shared float red[WG];

// the workgroup's sum of v, every invocation gets it (ops.comp's reduce: subgroups, then over them in order)
float sum(float v) {
    float s = subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = s;
    barrier();
    float r = red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) r += red[i];
    barrier();
    return r;
}

float sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }

void main() {
    uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupID.x;
    if (OP == 24u) {
        // unfuse row t = wg of the fused projections: A qkvz [T, 2·qk + 2·vd], B ba [T, 2·nv] into C mixed [T, 2·qk + vd]
        // ([q; k; v]), D z [T, vd], E b [T, nv], F a [T, nv]. Per key head h, qkvz holds q_h (dk), k_h (dk), v (rep·dv),
        // z (rep·dv), and ba holds b (rep), a (rep); rep = nv / nk. u0 nk, u1 nv, u2 dk, u3 dv
        uint nk = p.u[0], nv = p.u[1], dk = p.u[2], dv = p.u[3], rep = nv / nk, qk = nk * dk, vd = nv * dv;
        uint group = 2u * dk + 2u * rep * dv, src = wg * (2u * qk + 2u * vd), dst = wg * (2u * qk + vd);
        for (uint i = tid; i < nk * group; i += WG) {
            uint h = i / group, j = i - h * group;
            float v = a[src + i];
            if (j < dk) c[dst + h * dk + j] = v;
            else if (j < 2u * dk) c[dst + qk + h * dk + j - dk] = v;
            else if (j < 2u * dk + rep * dv) c[dst + 2u * qk + h * rep * dv + j - 2u * dk] = v;
            else d[wg * vd + h * rep * dv + j - 2u * dk - rep * dv] = v;
        }
        for (uint i = tid; i < 2u * nv; i += WG) {
            uint h = i / (2u * rep), j = i - h * 2u * rep;
            float v = b[wg * 2u * nv + i];
            if (j < rep) e[wg * nv + h * rep + j] = v;
            else f[wg * nv + h * rep + j - rep] = v;
        }
    } else if (OP == 25u) {
        // the depthwise causal conv + SiLU of one span's u0 rows of A [rows, channels] from row u3, in place, an invocation
        // per channel, over the span's carried kernel−1 previous inputs C [channels, kernel−1] (oldest first; zeros when
        // the span starts at position 0), which it updates. B: weights [channels, kernel] from u4 (tap kernel−1 is the
        // current token), bias from u5 (u6 = 1). u1 channels, u2 kernel
        uint ch = wg * WG + tid, tokens = p.u[0], channels = p.u[1], kernel = p.u[2], hist = kernel - 1u;
        if (ch >= channels) return;
        float win[MAX_CONV];
        bool fresh = st.pos0 == 0u;
        for (uint j = 0u; j < hist; j++) win[j] = fresh ? 0.0 : c[ch * hist + j];
        for (uint t = 0u; t < tokens; t++) {
            uint xi = (p.u[3] + t) * channels + ch;
            win[hist] = a[xi];
            float s = p.u[6] != 0u ? b[p.u[5] + ch] : 0.0;
            for (uint j = 0u; j < kernel; j++) s += b[p.u[4] + ch * kernel + j] * win[j];
            a[xi] = s / (1.0 + exp(-s));
            for (uint j = 0u; j < hist; j++) win[j] = win[j + 1u];
        }
        for (uint j = 0u; j < hist; j++) c[ch * hist + j] = win[j];
    } else if (OP == 26u) {
        // workgroup wg = t·nv + h (value head h of row t): q and k of its key head from A mixed [T, convDim] L2-normed
        // (q · dk^-½) into E q, F k [T, nv, dk]; B b → β = σ(b) and C a → g = negA·softplus(a + dtBias), both in place
        // [T, nv]; D: negA from u4, dtBias from u5. u0 nk, u1 nv, u2 dk, u3 convDim
        uint nk = p.u[0], nv = p.u[1], dk = p.u[2], convDim = p.u[3];
        uint t = wg / nv, h = wg - t * nv, kh = h / (nv / nk);
        uint xq = t * convDim + kh * dk, xk = xq + nk * dk, o = wg * dk;
        float sq = 0.0, sk = 0.0;
        for (uint i = tid; i < dk; i += WG) { sq += a[xq + i] * a[xq + i]; sk += a[xk + i] * a[xk + i]; }
        sq = sum(sq);
        sk = sum(sk);
        float iq = 1.0 / sqrt(sq + 1e-6) * (1.0 / sqrt(float(dk))), ik = 1.0 / sqrt(sk + 1e-6);
        for (uint i = tid; i < dk; i += WG) { e[o + i] = a[xq + i] * iq; f[o + i] = a[xk + i] * ik; }
        if (tid == 0u) {
            float x = c[wg] + d[p.u[5] + h];
            b[wg] = sigmoid(b[wg]);
            c[wg] = d[p.u[4] + h] * (x > 20.0 ? x : log(1.0 + exp(x)));
        }
    } else if (OP == 27u) {
        // the gated delta rule of one span's u0 rows from row u6, token by token, workgroup = value head h, an invocation
        // per value column c of the span's state F [nv, dk, dv] (zeroed when the span starts at position 0):
        // S ← S·e^g; δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq. A q, B k [T, nv, dk]; C: v at mixed[t·convDim + u5 + h·dv];
        // D g, E β [T, nv]; G out [T, nv·dv]. u1 nv, u2 dk, u3 dv, u4 convDim
        uint h = wg, nv = p.u[1], dk = p.u[2], dv = p.u[3], convDim = p.u[4];
        for (uint col = tid; col < dv; col += WG) {
            uint s0 = h * dk * dv + col;
            if (st.pos0 == 0u) for (uint i = 0u; i < dk; i++) f[s0 + i * dv] = 0.0;
            for (uint t = p.u[6]; t < p.u[6] + p.u[0]; t++) {
                uint gi = t * nv + h, kt = gi * dk;
                float decay = exp(d[gi]), bt = e[gi], mem = 0.0;
                for (uint i = 0u; i < dk; i++) { float v = f[s0 + i * dv] * decay; f[s0 + i * dv] = v; mem += b[kt + i] * v; }
                float delta = (c[t * convDim + p.u[5] + h * dv + col] - mem) * bt, o = 0.0;
                for (uint i = 0u; i < dk; i++) { float v = f[s0 + i * dv] + b[kt + i] * delta; f[s0 + i * dv] = v; o += a[kt + i] * v; }
                g[gi * dv + col] = o;
            }
        }
    } else if (OP == 28u) {
        // row wg (a value head of a row) of A core [rows, dv]: RMSNorm · (w | 1 + w) · silu(z) with B z, in place; C: the
        // weight from u2 (u3: 1 weight, 3 offset weight, 0 none). u1 dv, u4 eps bits
        uint dv = p.u[1], r = wg * dv;
        float ss = 0.0;
        for (uint i = tid; i < dv; i += WG) ss += a[r + i] * a[r + i];
        ss = sum(ss);
        float inv = 1.0 / sqrt(ss / float(dv) + uintBitsToFloat(p.u[4]));
        for (uint i = tid; i < dv; i += WG) {
            float v = a[r + i] * inv;
            if ((p.u[3] & 1u) != 0u) v = (p.u[3] & 2u) != 0u ? v * (1.0 + c[p.u[2] + i]) : c[p.u[2] + i] * v;
            float z = b[r + i];
            a[r + i] = v * (z / (1.0 + exp(-z)));
        }
    } else if (OP == 29u) {
        // the attention output gate's q projection A [rows = T·heads, 2·hd] (per head q, then gate) into B q and C gate
        // [rows, hd]. u0 n = rows·hd, u1 hd
        uint i = wg * WG + tid, hd = p.u[1];
        if (i >= p.u[0]) return;
        uint r = i / hd, j = i - r * hd;
        b[i] = a[r * 2u * hd + j];
        c[i] = a[r * 2u * hd + hd + j];
    } else if (OP == 30u) {
        // A ·= σ(B) over u0 elements (the attention output gate)
        uint i = wg * WG + tid;
        if (i < p.u[0]) a[i] *= sigmoid(b[i]);
    } else if (OP == 31u) {
        // A[t, i] += σ(C[t]) · B[t, i] over u0 = T·hidden elements (u2 = 0: weight 1), u1 hidden: the shared expert
        uint i = wg * WG + tid;
        if (i >= p.u[0]) return;
        float w = p.u[2] != 0u ? sigmoid(c[i / p.u[1]]) : 1.0;
        a[i] += w * b[i];
    }
}
