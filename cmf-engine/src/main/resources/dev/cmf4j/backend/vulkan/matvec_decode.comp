#version 450
// cmf4j Vulkan one-token product of f32, bf16, f16 and int8 (q8_row / q8_2f) weights, the decode step's:
//   y[yOff + r] (+)= rs[row0+r] · inv · Σ_c W[row0+r, c] · cf[c] · x'[c] (+ bias[r])   for r < rows
// where x' = x, or act(x)·P[...] (flags 64: the GLU folded in), times the norm weight (flags 8, 16: 1 + weight), and
// inv = 1 / sqrt(mean(x²) + eps) (flags 4: the RMSNorm folded in) or 1. rs with flags bit 0, cf with bit 1 (f32 words
// in the weight buffer), bias (flags 32) and norm weight in P, += with flags 128. Built into matvec_decode.spv by
// tools/build-vulkan-shaders.sh. Every sum is in f32.
//
// The pattern of the CUDA resident kernels' r_rows8 (resident.cu): a workgroup of 256 invocations takes blocks of 8
// rows; it stages x' of a tile of up to TILE columns in shared memory (once for all its blocks when the row is one
// tile, so each activation is read from memory once per workgroup), and takes each block as 8 groups of 32 invocations: group g takes rows 4(g/4) .. +3 over the quarter g%4 of every
// 512 columns, invocation l the 4 weights at 4l + 128(g%4) + 512j, so a group's weight loads are contiguous (128
// bytes of int8, 256 of 16-bit, 512 of f32 per row) and one vec4 read of x' from shared memory (conflict-free) serves
// 4 rows; U such loads per row are in flight before any is used, and a block's first batch is issued before the
// previous block's sums are taken. The dispatch sizes the grid (VulkanContext.matvecGroups). The groups need not be subgroups: a
// subgroup whose invocations all take the same 4 rows sums them by a transposing butterfly of shuffles (2 + 1 + log2(S) - 2
// of them; its lanes then hold one row's sum each), any other with one subgroup add per row of the 8 (each invocation
// adding 0 to the rows it does not take); then one fixed-order sum over the subgroups, whatever the device's subgroup
// size and however it maps invocations to subgroups.

#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#extension GL_EXT_control_flow_attributes : enable   // [[unroll]]: the weights in flight stay in registers

layout(local_size_x = 256) in;
// 0 f32, 1 bf16, 2 f16, 3 int8: set per pipeline (matvec.comp's numbering)
layout(constant_id = 0) const uint KIND = 0u;
const uint WG = 256u;
// columns staged at a time: 16 KiB of shared memory at 4096 (the one-tile pipeline's; VulkanContext.DECODE_TILE), more
// for rows of several tiles with -Dcmf.vulkan.decodeTile
layout(constant_id = 3) const uint TILE = 4096u;
// blocks a workgroup takes together when a row spans several tiles: each tile's x' is staged once for all of them
// (VulkanContext.decodeBlocks, -Dcmf.vulkan.decodeBlocks)
layout(constant_id = 1) const uint NB = 2u;
// 0: rows of one tile (x' staged once for all of a workgroup's blocks), 1: rows of several tiles, 2: x' read from memory
// where it is x itself (no norm, GLU or column scales to fold: a wide row whose x was prepared by the step before), 3:
// up to NT tokens (several sequences' decode rows, a short chunk), each row's sum of each token in the order the one-token
// paths take it, so a token's result does not depend on the rows beside it; 4: gate and up of a gated MLP together
// (rows of one tile), writing act(gate·x')·(up·x') times the down product's column scales (gluMain); a pipeline
// each, so no path's registers count against another's (VulkanContext.matvecPipeline picks)
layout(constant_id = 2) const uint TILES = 0u;
// loads per row in flight: a 4096-column row of int8 in one batch; f32 fewer (16 bytes each)
const uint U = KIND == 3u ? 8u : KIND == 0u ? 2u : 4u;
const uint SV = TILE / (4u * WG);   // staging steps of 4 columns per invocation
// TILES = 4: loads per row of each matrix in flight (the two matrices' batches together hold as many as U)
const uint UG = U > 1u ? U / 2u : 1u;

layout(std430, set = 0, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, set = 0, binding = 0) readonly buffer Weights2 { uvec2 w2[]; };
layout(std430, set = 0, binding = 0) readonly buffer Weights4 { uvec4 w4[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer X4 { vec4 x4[]; };
// x as the staging reads it: past the non-coherent caches, so a chained product (below) sees what the phase before
// it wrote without a barrier between them
layout(std430, set = 0, binding = 1) coherent readonly buffer XC { float xc[]; };
layout(std430, set = 0, binding = 1) coherent readonly buffer XC4 { vec4 xc4[]; };
layout(std430, set = 0, binding = 2) coherent buffer Y { float y[]; };
// chained phases (VulkanResidentForward): counters of workgroups done, zeroed at the start of each submission
layout(std430, set = 0, binding = 4) coherent buffer Sync { uint done[]; };
layout(std430, set = 0, binding = 3) readonly buffer P { float prm[]; };
layout(std430, set = 0, binding = 3) readonly buffer P4 { vec4 prm4[]; };
// P as the staging reads the GLU's up values (flags 64): past the caches, as x (a chained product's up is the product
// before it's result)
layout(std430, set = 0, binding = 3) coherent readonly buffer PC { float prmc[]; };
layout(std430, set = 0, binding = 3) coherent readonly buffer PC4 { vec4 prmc4[]; };

// TILES = 4: the up matrix's weights (binding 0 holds gate's), and the buffer of the down product's column scales
layout(std430, set = 0, binding = 5) readonly buffer WeightsU { uint wu[]; };
layout(std430, set = 0, binding = 5) readonly buffer WeightsU2 { uvec2 wu2[]; };
layout(std430, set = 0, binding = 5) readonly buffer WeightsU4 { uvec4 wu4[]; };
layout(std430, set = 0, binding = 6) readonly buffer WeightsD { uint wd[]; };

// matvec.comp's nine words, then the folded operators'
layout(push_constant) uniform Push {
    uint rows;     // rows of this product (in this buffer)
    uint cols;
    uint tokens;   // 1
    uint row0;     // first row of the product within the buffer's rows
    uint yOff;     // floats: where this product's output starts
    uint yStride;  // (unused: one token)
    uint rsOff;    // word offset of the f32 row scales (indexed by row0 + r)
    uint cfOff;    // word offset of the f32 column scales
    uint flags;    // 1 row scales, 2 column scales, 4 RMSNorm, 8 norm weight, 16 offset norm weight, 32 bias, 64 GLU, 128 add
    uint pOff;     // P: the norm weight's first float (flags 8), or the GLU's up values' (flags 64)
    uint eps;      // the RMSNorm's epsilon, f32 bits; the GLU's activation (0 SiLU, 1 GELU tanh, 2 GELU)
    uint biasOff;  // P: the bias's first float (flags 32)
    uint spins;    // chained: polls before a wait gives up (0: SPIN_LIMIT; tests make it small)
    uint wait;     // chained: 1 + the counter of the phase before, whose workgroups this product waits for (0: none)
    uint waitFor;  // chained: that phase's workgroups
    uint signal;   // chained: 1 + the counter this product's workgroups add 1 to when done (0: none); a wait is
                   // taken by the one-tile pipeline only (it reads x past the caches), a signal also by the direct one
    // TILES = 4 (gate's rows, scales and norm in the words above; up's by the same flags):
    uint uRow0;    // up's first row within binding 5
    uint uRsOff;   // word offset of up's row scales
    uint uCfOff;   // word offset of up's column scales
    uint dCfOff;   // word offset of the down product's column scales in binding 6 (flags 256)
    uint act;      // the GLU's activation (0 SiLU, 1 GELU tanh, 2 GELU)
} p;

// polls of a chained wait before it gives up rather than hang the device: it sets the counter's top bit (so the
// phases after it go on too) and goes on, its results then wrong; the forward reads the counters back after the step
// and fails it
const uint SPIN_LIMIT = 1u << 24;

// a chained product's wait (after its first weight loads are out) for the phase before it to be done
void waitPhase(uint tid) {
    if (p.wait == 0u) return;
    if (tid == 0u) {
        uint spins = 0u;
        uint limit = p.spins != 0u ? p.spins : SPIN_LIMIT;
        while (atomicAdd(done[p.wait - 1u], 0u) < p.waitFor) {
            if (++spins == limit) { atomicOr(done[p.wait - 1u], 0x80000000u); break; }
        }
    }
    barrier();
    memoryBarrierBuffer();
}

// a chained phase's workgroup done: its results visible, then counted
void signalPhase(uint tid) {
    if (p.signal == 0u) return;
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) atomicAdd(done[p.signal - 1u], 1u);
}

// TILES = 4: gate's x' then up's
shared vec4 xs[TILES == 4u ? TILE / 2u : TILE / 4u];
// per subgroup (at least 4 invocations each): the 8 rows' sums and the sum of squares, two sets: a block writes one
// while the previous block's may still be read; TILES = 4: gate's 8 rows, up's 8, the sum of squares
const uint SLOTS = TILES == 4u ? 17u : 9u;
const uint PARTS = WG / 4u * SLOTS;
shared float part[TILES == 3u ? 1u : 2u * PARTS];
// TILES = 3: tokens a workgroup takes (its staged tile: NT tokens × 512 columns, TILE floats), and per token and
// subgroup (of at least 8 invocations: VulkanContext takes this pipeline only then) the 8 rows' sums
const uint NT = TILE / 512u;
const uint SGMAX = WG / 8u;
shared float partT[TILES == 3u ? NT * SGMAX * 8u : 1u];
shared float ssT[TILES == 3u ? NT * SGMAX : 1u];   // TILES = 3 with the RMSNorm: each token's sum of squares by subgroup

// Numerical Recipes' erfc fit, as the CPU's Activation.GELU (ops.comp's)
float erf1(float v) {
    float z = abs(v);
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
            + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
    return v >= 0.0 ? 1.0 - r : r - 1.0;
}

float act(float v, uint kind) {
    if (kind == 0u) return v / (1.0 + exp(-v));
    if (kind == 1u) return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    return 0.5 * v * (1.0 + erf1(v * 0.7071067811865476));
}

// x'[c] and x[c] (for the sum of squares) of column c, one element
vec2 stage1(uint c) {
    float v = xc[c], s = v;
    if ((p.flags & 64u) != 0u) s = v = act(v, p.eps) * prmc[p.pOff + c];
    if ((p.flags & 8u) != 0u) { float nw = prm[p.pOff + c]; s *= (p.flags & 16u) != 0u ? 1.0 + nw : nw; }
    if ((p.flags & 2u) != 0u) s *= uintBitsToFloat(w[p.cfOff + c]);
    return vec2(s, v);
}

// element e of the weight plane
float w1(uint e) {
    if (KIND == 0u) return uintBitsToFloat(w[e]);
    if (KIND == 1u) { uint v = w[e >> 1]; return uintBitsToFloat((e & 1u) == 0u ? v << 16 : v & 0xffff0000u); }
    if (KIND == 2u) { vec2 h = unpackHalf2x16(w[e >> 1]); return (e & 1u) == 0u ? h.x : h.y; }
    return float(bitfieldExtract(int(w[e >> 2]), int((e & 3u) * 8u), 8));
}

// the 4 weights at element e (a multiple of 4) as loaded: 4 bytes of int8, 8 of 16-bit, 16 of f32
uvec4 load4(uint e) {
    if (KIND == 0u) return w4[e >> 2];
    if (KIND == 3u) return uvec4(w[e >> 2], 0u, 0u, 0u);
    return uvec4(w2[e >> 2], 0u, 0u);
}

// acc + Σ widen(v)·xv by an fma chain; int8 widened exactly without integer-to-float conversion: each byte, made
// offset binary, under the exponent of 2^23, less 2^23 + 128
float fma4(uvec4 v, vec4 xv, float acc) {
    vec4 f;
    if (KIND == 0u) f = uintBitsToFloat(v);
    else if (KIND == 1u) f = vec4(uintBitsToFloat(v.x << 16), uintBitsToFloat(v.x & 0xffff0000u), uintBitsToFloat(v.y << 16), uintBitsToFloat(v.y & 0xffff0000u));
    else if (KIND == 2u) f = vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y));
    else {
        uint u = v.x ^ 0x80808080u;
        f = uintBitsToFloat(uvec4(u & 0xffu, (u >> 8) & 0xffu, (u >> 16) & 0xffu, u >> 24) | 0x4B000000u) - 8388736.0;
    }
    acc = fma(f.x, xv.x, acc);
    acc = fma(f.y, xv.y, acc);
    acc = fma(f.z, xv.z, acc);
    return fma(f.w, xv.w, acc);
}

// the batch of U loads per row from column c of the tile at k0 (width tc) for the 4 rows at base; unchecked when it
// lies inside the tile (a branch per load kept the driver from having them all in flight at once)
void loadBatch(inout uvec4 v[4][U], uint base[4], uint k0, uint c, uint tc) {
    if (c + (U - 1u) * 512u < tc) {
        [[unroll]] for (uint u = 0u; u < U; u++)
            [[unroll]] for (uint i = 0u; i < 4u; i++) v[i][u] = load4(base[i] + k0 + c + u * 512u);
    } else {
        [[unroll]] for (uint u = 0u; u < U; u++)
            if (c + u * 512u < tc)
                [[unroll]] for (uint i = 0u; i < 4u; i++) v[i][u] = load4(base[i] + k0 + c + u * 512u);
    }
}

void useBatch(uvec4 v[4][U], uint c, uint tc, inout float acc[4]) {
    if (c + (U - 1u) * 512u < tc) {
        [[unroll]] for (uint u = 0u; u < U; u++) {
            vec4 xv = xs[(c + u * 512u) >> 2];
            [[unroll]] for (uint i = 0u; i < 4u; i++) acc[i] = fma4(v[i][u], xv, acc[i]);
        }
    } else {
        [[unroll]] for (uint u = 0u; u < U; u++)
            if (c + u * 512u < tc) {
                vec4 xv = xs[(c + u * 512u) >> 2];
                [[unroll]] for (uint i = 0u; i < 4u; i++) acc[i] = fma4(v[i][u], xv, acc[i]);
            }
    }
}

// useBatch with x' = x read from memory (the direct pipeline): the batch's U vectors of x loaded together, then used
void useBatchDirect(uvec4 v[4][U], uint c, uint cols, inout float acc[4]) {
    vec4 xv[U];
    if (c + (U - 1u) * 512u < cols) {
        [[unroll]] for (uint u = 0u; u < U; u++) xv[u] = x4[(c + u * 512u) >> 2];
        [[unroll]] for (uint u = 0u; u < U; u++)
            [[unroll]] for (uint i = 0u; i < 4u; i++) acc[i] = fma4(v[i][u], xv[u], acc[i]);
    } else {
        [[unroll]] for (uint u = 0u; u < U; u++)
            if (c + u * 512u < cols) {
                vec4 xu = x4[(c + u * 512u) >> 2];
                [[unroll]] for (uint i = 0u; i < 4u; i++) acc[i] = fma4(v[i][u], xu, acc[i]);
            }
    }
}

// the element offsets of the 4 rows of block r0 this invocation's group takes (rows past the end reread the last)
void rowBase(uint r0, uint rb, out uint base[4]) {
    [[unroll]] for (uint i = 0u; i < 4u; i++) base[i] = (p.row0 + min(r0 + rb + i, p.rows - 1u)) * p.cols;
}

// x' of the tile at k0 (width tc) into xs, adding x's squares to ss
void stage(uint tid, uint k0, uint tc, bool vectors, inout float ss) {
    if (vectors) {
        // one step of 4 columns at a time (all steps' loads in flight took 107 registers against 63, and with x'
        // staged once per workgroup its latency is paid once)
        [[dont_unroll]] for (uint q = 0u; q < SV; q++) {
            uint j = tid * 4u + q * WG * 4u, cc = (k0 + j) >> 2;
            if (j < tc) {
                vec4 v = xc4[cc], nw = vec4(0.0), cf = vec4(1.0);
                if ((p.flags & 64u) != 0u) nw = prmc4[(p.pOff >> 2) + cc];
                else if ((p.flags & 8u) != 0u) nw = prm4[(p.pOff >> 2) + cc];
                if ((p.flags & 2u) != 0u) cf = uintBitsToFloat(w4[(p.cfOff >> 2) + cc]);
                if ((p.flags & 64u) != 0u) v = vec4(act(v.x, p.eps), act(v.y, p.eps), act(v.z, p.eps), act(v.w, p.eps)) * nw;
                ss += dot(v, v);
                if ((p.flags & 8u) != 0u) v *= (p.flags & 16u) != 0u ? 1.0 + nw : nw;
                if ((p.flags & 2u) != 0u) v *= cf;
                xs[j >> 2] = v;
            }
        }
    } else {
        for (uint j = tid; j < tc; j += WG) {
            vec2 sv = stage1(k0 + j);
            ss += sv.y * sv.y;
            xs[j >> 2][j & 3u] = sv.x;
        }
    }
}

// a subgroup's sum of row slot i: into part[], or partT[] for TILES = 3
void putSum(uint i, float v) {
    if (TILES == 3u) partT[i] = v; else part[i] = v;
}

// the 4 rows' sums of this invocation's group into the subgroup's 8 row slots from `at` (of part[] or partT[]): by the
// butterfly, or one subgroup add per row
void blockSums(float acc[4], uint rb, uint at, bool butterfly, bool hi, bool hi2) {
    uint S = gl_SubgroupSize, sl = gl_SubgroupInvocationID;
    if (butterfly) {
        float k0 = (hi ? acc[2] : acc[0]) + subgroupShuffleXor(hi ? acc[0] : acc[2], S >> 1u);
        float k1 = (hi ? acc[3] : acc[1]) + subgroupShuffleXor(hi ? acc[1] : acc[3], S >> 1u);
        float s = (hi2 ? k1 : k0) + subgroupShuffleXor(hi2 ? k0 : k1, S >> 2u);
        for (uint m = S >> 3u; m > 0u; m >>= 1u) s += subgroupShuffleXor(s, m);
        if ((sl & ((S >> 2u) - 1u)) == 0u) putSum(at + rb + (hi ? 2u : 0u) + (hi2 ? 1u : 0u), s);
    } else {
        [[unroll]] for (uint row = 0u; row < 8u; row++) {
            uint i = row - rb;   // (wraps past 3 for rows below rb)
            float s = subgroupAdd(i == 0u ? acc[0] : i == 1u ? acc[1] : i == 2u ? acc[2] : i == 3u ? acc[3] : 0.0);
            if (subgroupElect()) putSum(at + row, s);
        }
    }
}

// after the barrier: invocation tid < 8 sums row r0 + tid over the subgroups in order and writes it with the epilogue;
// `norm`: this set holds the sum of squares, whose 1/rms it keeps in inv for the blocks after
// 1/rms from a row's sum of squares
float invRms(float sq) { return 1.0 / sqrt(sq / float(p.cols) + uintBitsToFloat(p.eps)); }

// row r's sum v finished into y[yi]: times 1/rms (flags 4), the row scale, plus the bias, plus y[yi] (flags 128); one
// function for every path, so a token's result is the same bits whichever pipeline took it
void epilogue(float v, uint r, float inv, uint yi) {
    if ((p.flags & 4u) != 0u) v *= inv;
    if ((p.flags & 1u) != 0u) v *= uintBitsToFloat(w[p.rsOff + p.row0 + r]);
    if ((p.flags & 32u) != 0u) v += prm[p.biasOff + r];
    if ((p.flags & 128u) != 0u) v += y[yi];
    y[yi] = v;
}

void finish(uint tid, uint r0, uint set, bool norm, inout float inv) {
    uint r = r0 + tid;
    if (tid < 8u && r < p.rows) {
        float v = 0.0;
        for (uint g = 0u; g < gl_NumSubgroups; g++) v += part[set + g * 9u + tid];
        if (norm) {
            float sq = 0.0;
            for (uint g = 0u; g < gl_NumSubgroups; g++) sq += part[set + g * 9u + 8u];
            inv = invRms(sq);
        }
        epilogue(v, r, inv, p.yOff + r);
    }
}

// the block's weights of columns [k0, k0 + tc) against the staged x' (the first batch already loaded into v)
void blockTile(inout uvec4 v[4][U], uint base[4], uint k0, uint tc, uint c0, uint kq, uint lane, bool wide, inout float acc[4]) {
    if (wide) {
        for (uint c = c0;;) {
            useBatch(v, c, tc, acc);
            c += U * 512u;
            if (c >= tc) break;
            loadBatch(v, base, k0, c, tc);
        }
    } else {
        for (uint cc = kq * 32u + lane; cc < tc; cc += 128u) {
            float xv = xs[cc >> 2][cc & 3u];
            [[unroll]] for (uint i = 0u; i < 4u; i++) acc[i] = fma(w1(base[i] + k0 + cc), xv, acc[i]);
        }
    }
}

// TILES = 3: the products of up to NT tokens, with what a decode step folds into its products (the RMSNorm, its weight,
// the GLU act(x)·up with up's rows in P one per token, the bias, the add into y). Per block of 8 rows, the row's columns
// in steps of 512: the step's x' of the tokens staged (as stage makes x'), the step's weight loads (issued before the
// staging), each weight widened once and used for every token by fma4 into that token's chain; so each (row, token)
// chain is the one-token paths' (invocation l of group g: columns 4l + 128(g%4) + 512j, j ascending), its sum the same
// butterfly and the same fixed-order sum over the subgroups (slots of rows a subgroup does not take hold 0, as there),
// and a token's sum of squares is taken over the same columns per invocation, subgroup add and order as stage and
// finish take it. x' is staged for every block (its NT × 512-column tiles from memory: L2-resident, 4 × the int8
// weights' bytes at 8 tokens).
void tokensMain(uint tid, uint rb, uint kq, uint lane, bool butterfly, bool hi, bool hi2) {
    uint c0 = kq * 128u + lane * 4u;
    uint sg = gl_SubgroupID, sl = gl_SubgroupInvocationID;
    bool glu = (p.flags & 64u) != 0u, nweight = (p.flags & 8u) != 0u, norm = (p.flags & 4u) != 0u;
    // as main's: x' 4 columns at a time where every source of it is 16-byte aligned, else one (which changes the sums
    // of squares' order, so it follows the same rule)
    bool vectors = ((p.flags & 2u) == 0u || (p.cfOff & 3u) == 0u) && ((p.flags & 72u) == 0u || (p.pOff & 3u) == 0u);
    for (uint t0 = gl_WorkGroupID.y * NT; t0 < p.tokens; t0 += gl_NumWorkGroups.y * NT) {
        uint nt = min(NT, p.tokens - t0);
        if (norm) {
            [[unroll]] for (uint t = 0u; t < NT; t++) {
                if (t >= nt) break;
                uint xt = (t0 + t) * p.cols, ut = p.pOff + (t0 + t) * p.cols;
                float ss = 0.0;
                if (vectors) {
                    for (uint j = tid * 4u; j < p.cols; j += WG * 4u) {
                        vec4 v = x4[(xt + j) >> 2];
                        if (glu) v = vec4(act(v.x, p.eps), act(v.y, p.eps), act(v.z, p.eps), act(v.w, p.eps))
                                * vec4(prm[ut + j], prm[ut + j + 1u], prm[ut + j + 2u], prm[ut + j + 3u]);
                        ss += dot(v, v);
                    }
                } else {
                    for (uint j = tid; j < p.cols; j += WG) {
                        float v = x[xt + j];
                        if (glu) v = act(v, p.eps) * prm[ut + j];
                        ss += v * v;
                    }
                }
                float s = subgroupAdd(ss);
                if (subgroupElect()) ssT[t * SGMAX + sg] = s;
            }
        }
        for (uint r0 = gl_WorkGroupID.x * 8u; r0 < p.rows; r0 += gl_NumWorkGroups.x * 8u) {
            uint base[4];
            rowBase(r0, rb, base);
            float acc[4][NT];
            [[unroll]] for (uint i = 0u; i < 4u; i++) [[unroll]] for (uint t = 0u; t < NT; t++) acc[i][t] = 0.0;
            uvec4 v[4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) v[i] = c0 < p.cols ? load4(base[i] + c0) : uvec4(0u);
            for (uint k0 = 0u; k0 < p.cols; k0 += 512u) {
                uint tc = min(512u, p.cols - k0);
                barrier();   // the previous step's x' has been read
                for (uint j = tid; j < nt * 128u; j += WG) {
                    uint t = j >> 7, c = k0 + (j & 127u) * 4u;
                    if (c < k0 + tc) {
                        // stage's operations on the column's 4 values (stage1's on each: the same per value)
                        vec4 xv = x4[((t0 + t) * p.cols + c) >> 2];
                        uint pc = glu ? p.pOff + (t0 + t) * p.cols + c : p.pOff + c;
                        vec4 nw = glu || nweight ? vec4(prm[pc], prm[pc + 1u], prm[pc + 2u], prm[pc + 3u]) : vec4(0.0);
                        if (glu) xv = vec4(act(xv.x, p.eps), act(xv.y, p.eps), act(xv.z, p.eps), act(xv.w, p.eps)) * nw;
                        if (nweight) xv *= (p.flags & 16u) != 0u ? 1.0 + nw : nw;
                        if ((p.flags & 2u) != 0u) xv *= uintBitsToFloat(w4[(p.cfOff + c) >> 2]);
                        xs[j] = xv;
                    }
                }
                barrier();
                uvec4 cur[4] = v;
                uint cn = k0 + 512u + c0;
                if (cn < p.cols) [[unroll]] for (uint i = 0u; i < 4u; i++) v[i] = load4(base[i] + cn);
                if (c0 < tc)
                    [[unroll]] for (uint t = 0u; t < NT; t++)
                        if (t < nt) {
                            vec4 xv = xs[t * 128u + (c0 >> 2)];
                            [[unroll]] for (uint i = 0u; i < 4u; i++) acc[i][t] = fma4(cur[i], xv, acc[i][t]);
                        }
            }
            // the non-owned slots 0 (the butterfly writes only its 4 rows), then each token's sums as blockSums
            if (butterfly && sl < 4u)
                [[unroll]] for (uint t = 0u; t < NT; t++) partT[(t * SGMAX + sg) * 8u + (rb ^ 4u) + sl] = 0.0;
            [[unroll]] for (uint t = 0u; t < NT; t++)
                blockSums(float[4](acc[0][t], acc[1][t], acc[2][t], acc[3][t]), rb, (t * SGMAX + sg) * 8u, butterfly, hi, hi2);
            barrier();
            // invocation tid < 8·nt: row r0 + tid % 8 of token t0 + tid / 8, finished as finish finishes it
            uint r = r0 + (tid & 7u), t = tid >> 3;
            if (t < nt && r < p.rows) {
                float s = 0.0, inv = 1.0;
                for (uint g = 0u; g < gl_NumSubgroups; g++) s += partT[(t * SGMAX + g) * 8u + (tid & 7u)];
                if (norm) {
                    float sq = 0.0;
                    for (uint g = 0u; g < gl_NumSubgroups; g++) sq += ssT[t * SGMAX + g];
                    inv = invRms(sq);
                }
                epilogue(s, r, inv, p.yOff + (t0 + t) * p.yStride + r);
            }
            barrier();   // partT is read before the next block writes it
        }
    }
}

// TILES = 4: up's 4 weights at element e (load4's, from binding 5)
uvec4 load4u(uint e) {
    if (KIND == 0u) return wu4[e >> 2];
    if (KIND == 3u) return uvec4(wu[e >> 2], 0u, 0u, 0u);
    return uvec4(wu2[e >> 2], 0u, 0u);
}

// TILES = 4: the batch of UG loads per row of gate (g) and of up (u) from column c, unchecked when it lies in the row
void loadBatchGlu(inout uvec4 g[4][UG], inout uvec4 u[4][UG], uint bg[4], uint bu[4], uint c) {
    if (c + (UG - 1u) * 512u < p.cols) {
        [[unroll]] for (uint k = 0u; k < UG; k++)
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                g[i][k] = load4(bg[i] + c + k * 512u);
                u[i][k] = load4u(bu[i] + c + k * 512u);
            }
    } else {
        [[unroll]] for (uint k = 0u; k < UG; k++)
            if (c + k * 512u < p.cols)
                [[unroll]] for (uint i = 0u; i < 4u; i++) {
                    g[i][k] = load4(bg[i] + c + k * 512u);
                    u[i][k] = load4u(bu[i] + c + k * 512u);
                }
    }
}

// TILES = 4: the batch's products against gate's and up's x' (each row's chain in useBatch's order)
void useBatchGlu(uvec4 g[4][UG], uvec4 u[4][UG], uint c, inout float ag[4], inout float au[4]) {
    [[unroll]] for (uint k = 0u; k < UG; k++)
        if (c + k * 512u < p.cols) {
            uint j = (c + k * 512u) >> 2;
            vec4 xg = xs[j], xu = xs[TILE / 4u + j];
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                ag[i] = fma4(g[i][k], xg, ag[i]);
                au[i] = fma4(u[i][k], xu, au[i]);
            }
        }
}

// TILES = 4: gate's and up's x' of the row (one tile, 4 columns at a time: the host takes this path only where every
// source is 16-byte aligned) into xs, each as stage makes it with its own column scales; x's squares into ss
void stageGlu(uint tid, inout float ss) {
    [[dont_unroll]] for (uint q = 0u; q < SV; q++) {
        uint j = tid * 4u + q * WG * 4u, cc = j >> 2;
        if (j < p.cols) {
            vec4 v = xc4[cc], nw = vec4(0.0);
            if ((p.flags & 8u) != 0u) nw = prm4[(p.pOff >> 2) + cc];
            ss += dot(v, v);
            if ((p.flags & 8u) != 0u) v *= (p.flags & 16u) != 0u ? 1.0 + nw : nw;
            vec4 vg = v, vu = v;
            if ((p.flags & 2u) != 0u) {
                vg *= uintBitsToFloat(w4[(p.cfOff >> 2) + cc]);
                vu *= uintBitsToFloat(wu4[(p.uCfOff >> 2) + cc]);
            }
            xs[cc] = vg;
            xs[TILE / 4u + cc] = vu;
        }
    }
}

// TILES = 4: gate's and up's product of one-tile rows with what a decode step folds into them (the RMSNorm, its
// weight), a block being the same 8 rows of each, then h = act(g)·u (times the down product's column scales, flags
// 256) into y: what the gate and up products, then ops.comp's OP 3, write, bit for bit (the same sums in the same
// order, the same epilogue). As TILES = 0 otherwise: x' staged once per workgroup, each block's first batch issued
// before anything else of the block.
void gluMain(uint tid, uint rb, uint kq, uint lane, bool butterfly, bool hi, bool hi2) {
    uint c0 = kq * 128u + lane * 4u, sg = gl_SubgroupID, sl = gl_SubgroupInvocationID;
    if (butterfly && sl < 4u) {
        // the slots of the rows this subgroup does not take, in both sets
        part[sg * 17u + (rb ^ 4u) + sl] = 0.0;
        part[sg * 17u + 8u + (rb ^ 4u) + sl] = 0.0;
        part[PARTS + sg * 17u + (rb ^ 4u) + sl] = 0.0;
        part[PARTS + sg * 17u + 8u + (rb ^ 4u) + sl] = 0.0;
    }
    uint first = gl_WorkGroupID.x * 8u, stride = gl_NumWorkGroups.x * 8u, set = 0u;
    uvec4 vg[4][UG], vu[4][UG];
    uint bg[4], bu[4];
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        uint r = min(first + rb + i, p.rows - 1u);
        bg[i] = (p.row0 + r) * p.cols;
        bu[i] = (p.uRow0 + r) * p.cols;
    }
    if (first < p.rows) loadBatchGlu(vg, vu, bg, bu, c0);
    waitPhase(tid);
    float ss = 0.0, inv = 1.0;
    if (first < p.rows) {
        stageGlu(tid, ss);
        barrier();
    }
    for (uint r0 = first; r0 < p.rows; r0 += stride, set ^= PARTS) {
        float ag[4] = float[4](0.0, 0.0, 0.0, 0.0), au[4] = float[4](0.0, 0.0, 0.0, 0.0);
        for (uint c = c0;;) {
            useBatchGlu(vg, vu, c, ag, au);
            c += UG * 512u;
            if (c >= p.cols) break;
            loadBatchGlu(vg, vu, bg, bu, c);
        }
        if (r0 + stride < p.rows) {
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint r = min(r0 + stride + rb + i, p.rows - 1u);
                bg[i] = (p.row0 + r) * p.cols;
                bu[i] = (p.uRow0 + r) * p.cols;
            }
            loadBatchGlu(vg, vu, bg, bu, c0);
        }
        blockSums(ag, rb, set + sg * 17u, butterfly, hi, hi2);
        blockSums(au, rb, set + sg * 17u + 8u, butterfly, hi, hi2);
        bool norm = (p.flags & 4u) != 0u && r0 == first;
        if (norm) {
            float s = subgroupAdd(ss);
            if (subgroupElect()) part[set + sg * 17u + 16u] = s;
        }
        barrier();
        uint r = r0 + tid;
        if (tid < 8u && r < p.rows) {
            float g = 0.0, u = 0.0;
            for (uint k = 0u; k < gl_NumSubgroups; k++) g += part[set + k * 17u + tid];
            for (uint k = 0u; k < gl_NumSubgroups; k++) u += part[set + k * 17u + 8u + tid];
            if (norm) {
                float sq = 0.0;
                for (uint k = 0u; k < gl_NumSubgroups; k++) sq += part[set + k * 17u + 16u];
                inv = invRms(sq);
            }
            // epilogue's operations on each, then OP 3's
            if ((p.flags & 4u) != 0u) { g *= inv; u *= inv; }
            if ((p.flags & 1u) != 0u) {
                g *= uintBitsToFloat(w[p.rsOff + p.row0 + r]);
                u *= uintBitsToFloat(wu[p.uRsOff + p.uRow0 + r]);
            }
            float h = act(g, p.act) * u;
            if ((p.flags & 256u) != 0u) h *= uintBitsToFloat(wd[p.dCfOff + r]);
            y[p.yOff + r] = h;
        }
    }
    signalPhase(tid);
}

void main() {
    uint tid = gl_LocalInvocationID.x, grp = tid >> 5, lane = tid & 31u;
    uint rb = (grp >> 2) * 4u, kq = grp & 3u;
    bool wide = (p.cols & 3u) == 0u;
    // x' staged 4 columns at a time where every source of it is 16-byte aligned
    bool vectors = wide && ((p.flags & 2u) == 0u || (p.cfOff & 3u) == 0u) && ((p.flags & 72u) == 0u || (p.pOff & 3u) == 0u);
    uint c0 = kq * 128u + lane * 4u;
    float ss = 0.0, inv = 1.0;
    uvec4 v[4][U];
    uint base[4];
    // the butterfly needs the subgroup's invocations on one set of 4 rows (so on every usual device); its lanes write
    // only their 4 rows' sums, the other 4 slots stay 0
    bool butterfly = subgroupMin(rb) == subgroupMax(rb);
    uint sl = gl_SubgroupInvocationID;
    bool hi = (sl & (gl_SubgroupSize >> 1u)) != 0u, hi2 = (sl & (gl_SubgroupSize >> 2u)) != 0u;
    if (TILES < 3u && butterfly && sl < 4u) {
        part[gl_SubgroupID * 9u + (rb ^ 4u) + sl] = 0.0;
        part[PARTS + gl_SubgroupID * 9u + (rb ^ 4u) + sl] = 0.0;
    }
    // no barrier after a block's sums are read: the next block writes the other set, which nobody reads then, and
    // this set again only after the next block's barrier, which the readers reach after reading
    uint set = 0u;
    if (TILES == 3u) {
        tokensMain(tid, rb, kq, lane, butterfly, hi, hi2);
        return;
    }
    if (TILES == 4u) {
        gluMain(tid, rb, kq, lane, butterfly, hi, hi2);
        return;
    }
    if (TILES == 2u) {
        // x' is x: no staging and no barrier before the sums; each invocation walks its columns in the order the
        // staged paths take them (so the sums are the same), the next block's first batch issued before the sums
        uint first = gl_WorkGroupID.x * 8u, stride = gl_NumWorkGroups.x * 8u;
        rowBase(first, rb, base);
        if (first < p.rows) loadBatch(v, base, 0u, c0, p.cols);
        for (uint r0 = first; r0 < p.rows; r0 += stride, set ^= PARTS) {
            float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
            for (uint c = c0;;) {
                useBatchDirect(v, c, p.cols, acc);
                c += U * 512u;
                if (c >= p.cols) break;
                loadBatch(v, base, 0u, c, p.cols);
            }
            if (r0 + stride < p.rows) {
                rowBase(r0 + stride, rb, base);
                loadBatch(v, base, 0u, c0, p.cols);
            }
            blockSums(acc, rb, set + gl_SubgroupID * 9u, butterfly, hi, hi2);
            barrier();
            finish(tid, r0, set, false, inv);
        }
        signalPhase(tid);
        return;
    }
    if (TILES == 0u) {
        if (p.cols > TILE) return;   // (the other pipeline's rows)
        // a row of one tile: x' (and its sum of squares) staged once for every block of 8 rows the workgroup takes;
        // each block's first batch goes out before anything else of the block: for the first block before x' is
        // staged (their latencies overlap), for the others before the previous block's sums are taken
        uint first = gl_WorkGroupID.x * 8u, stride = gl_NumWorkGroups.x * 8u;
        rowBase(first, rb, base);
        if (wide && first < p.rows) loadBatch(v, base, 0u, c0, p.cols);
        waitPhase(tid);
        if (first < p.rows) {
            stage(tid, 0u, p.cols, vectors, ss);
            barrier();
        }
        for (uint r0 = first; r0 < p.rows; r0 += stride, set ^= PARTS) {
            float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
            blockTile(v, base, 0u, p.cols, c0, kq, lane, wide, acc);
            if (r0 + stride < p.rows) {
                rowBase(r0 + stride, rb, base);
                if (wide) loadBatch(v, base, 0u, c0, p.cols);
            }
            blockSums(acc, rb, set + gl_SubgroupID * 9u, butterfly, hi, hi2);
            bool norm = (p.flags & 4u) != 0u && r0 == first;
            if (norm) {
                float s = subgroupAdd(ss);
                if (subgroupElect()) part[set + gl_SubgroupID * 9u + 8u] = s;
            }
            barrier();
            finish(tid, r0, set, norm, inv);
        }
        signalPhase(tid);
        return;
    }
    // a row of several tiles: the workgroup takes NB consecutive blocks together, tile by tile, each tile's x' staged
    // once for them all; each block's sums stay in registers across the tiles (in the same order as one block alone)
    for (uint r0 = gl_WorkGroupID.x * 8u * NB; r0 < p.rows; r0 += gl_NumWorkGroups.x * 8u * NB) {
        float acc[NB][4];
        [[unroll]] for (uint b = 0u; b < NB; b++) acc[b] = float[4](0.0, 0.0, 0.0, 0.0);
        ss = 0.0;
        for (uint k0 = 0u; k0 < p.cols; k0 += TILE) {
            uint tc = min(TILE, p.cols - k0);
            rowBase(r0, rb, base);
            if (wide) loadBatch(v, base, k0, c0, tc);
            barrier();   // the previous tile has been read
            stage(tid, k0, tc, vectors, ss);
            barrier();
            [[unroll]] for (uint b = 0u; b < NB; b++) {
                if (r0 + 8u * b >= p.rows) break;
                blockTile(v, base, k0, tc, c0, kq, lane, wide, acc[b]);
                if (b + 1u < NB && r0 + 8u * (b + 1u) < p.rows) {
                    rowBase(r0 + 8u * (b + 1u), rb, base);
                    if (wide) loadBatch(v, base, k0, c0, tc);
                }
            }
        }
        [[unroll]] for (uint b = 0u; b < NB; b++, set ^= PARTS) {
            if (r0 + 8u * b >= p.rows) break;
            blockSums(acc[b], rb, set + gl_SubgroupID * 9u, butterfly, hi, hi2);
            bool norm = (p.flags & 4u) != 0u && b == 0u;
            if (norm) {
                float s = subgroupAdd(ss);
                if (subgroupElect()) part[set + gl_SubgroupID * 9u + 8u] = s;
            }
            barrier();
            finish(tid, r0 + 8u * b, set, norm, inv);
        }
    }
}
