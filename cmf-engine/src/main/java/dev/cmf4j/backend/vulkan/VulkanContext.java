package dev.cmf4j.backend.vulkan;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import static dev.cmf4j.backend.vulkan.Vk.PTR;
import static dev.cmf4j.backend.vulkan.Vk.U32;
import static dev.cmf4j.backend.vulkan.Vk.U64;

/**
 * One opened Vulkan device: the instance, the chosen physical device, a logical device with one compute queue, the
 * memory types buffers come from, and the shipped compute pipelines. One per process ({@link #get}), shared by every
 * open model; per-model state (weight buffers, command buffers) lives in {@link VulkanMatMul}. The queue is the one
 * thing that needs external synchronisation: {@link #submit} takes this object's lock.
 */
public final class VulkanContext implements AutoCloseable {
    /** {@code -Dcmf.vulkan.device=N}: the physical device to use (index of {@code cmf devices}); default the best one. */
    static final String DEVICE_PROPERTY = "cmf.vulkan.device";
    /** VK_SUBGROUP_FEATURE_ARITHMETIC_BIT and VK_SUBGROUP_FEATURE_SHUFFLE_BIT: the shaders add and shuffle across subgroups. */
    static final int SUBGROUP_ARITHMETIC = 4, SUBGROUP_SHUFFLE = 16;

    final Vk vk;
    private final MemorySegment instance;
    final MemorySegment device, queue;
    final VulkanDeviceInfo info;
    /** Memory type for weights (device-local), and for staging (host-visible and coherent); whether weights map directly. */
    final int weightType, stagingType;
    final boolean weightsMappable;
    /** The products' layout: four storage buffers (weights, x, y, and matvec_decode.comp's P), {@link MatvecPush}'s constants. */
    final long descriptorSetLayout, pipelineLayout;
    /**
     * One matvec pipeline per weight kind (see matvec.comp's KIND), the one-token ones of kinds 0-3 (matvec_decode.comp),
     * and the tiled ones for GEMM_MIN_TOKENS tokens or more (matmul.comp, every kind).
     */
    final long[] matvec, matvecDecode, matvecDecodeTiles, matvecDecodeDirect, matvecDecodeTokens, matvecDecodeGlu, gemm, gemmNarrow;
    /** The product sets' bindings: weights, x, y, P, the chained phases' counters, the gated-MLP pipeline's up and down weights. */
    static final int PRODUCT_BUFFERS = 7;
    /**
     * Columns the gated-MLP pipeline (matvec_decode.comp's TILES = 4) stages, two rows of x' in shared memory: a decode
     * tile where the device has the shared memory ({@link #gluShared}), else the largest power of two that fits.
     */
    final int gluTile;
    /** matvec_decode.comp's shared memory in bytes for the gated-MLP pipeline staging {@code tile} columns: two rows of x', the sums. */
    static int gluShared(int tile) { return 2 * 4 * tile + 4 * 2 * (256 / 4) * 17; }
    /**
     * matmul.comp's tiles: rows and tokens a workgroup takes; products of fewer than GEMM_WIDE_TOKENS tokens take the
     * narrow pipeline's rows (twice the workgroups where there is one tile of tokens); matmul_coop.comp's: COOP_ROWS rows.
     */
    static final int GEMM_ROWS = 128, GEMM_ROWS_NARROW = 64, GEMM_TOKENS = 64, GEMM_WIDE_TOKENS = 128, COOP_ROWS = 128;
    /**
     * Tokens from which a product takes matmul.comp's tiles (-Dcmf.vulkan.gemmMinTokens): a tile computes its 64 tokens
     * whether there are so many or not, so few tokens stay with matvec.comp's tiles of 8.
     */
    final int gemmMinTokens = Math.max(2, Integer.getInteger("cmf.vulkan.gemmMinTokens", 32));
    /** Rows per block of the one-token pipelines (matvec_decode.comp's), and the columns it stages at a time (its TILE). */
    static final int DECODE_ROWS = 8, DECODE_TILE = 4096;
    /**
     * Workgroups (about) a one-token product of at most DECODE_TILE columns is spread over (-Dcmf.vulkan.decodeGroups): each
     * stages x' once and takes its blocks of 8 rows in turn, the next block's weights loading while the last one's
     * sums are taken. More rows mean more blocks a workgroup. 256 was the fastest of 128-1024 on an H200 (docs/VULKAN.md).
     */
    final int decodeGroups = Math.max(1, Integer.getInteger("cmf.vulkan.decodeGroups", 256));
    /** The device's maxComputeSharedMemorySize, bytes. */
    private final int sharedMemory;
    /**
     * matmul_coop.comp's columns a step (-Dcmf.vulkan.coopColumns: 32 or 64) and tokens a workgroup (-Dcmf.vulkan.coopTokens:
     * 64 or 128), as asked where the device has the shared memory they take ({@link #coopShared}; most devices have 48 KiB,
     * lavapipe 32), else 32 and 64.
     */
    private final int coopColumns, coopTokens;

    /** matmul_coop.comp's shared memory in bytes: the operand tiles (f16 rows of columns + 8), its sums, maxima and scales. */
    static int coopShared(int columns, int tokens) { return 2 * (COOP_ROWS + 2 * tokens) * (columns + 8) + 4 * (8 * 256 + 256 + tokens); }

    /** The tokens a workgroup of {@link #matvecPipeline}'s prompt products takes. */
    int gemmTokens(int kind, int tokens) { return coopProduct(kind, tokens) ? coopTokens : GEMM_TOKENS; }
    /**
     * Blocks of 8 rows a workgroup takes together in a one-token product of more than DECODE_TILE columns
     * (-Dcmf.vulkan.decodeBlocks, matvec_decode.comp's NB): each tile of x' is staged once for all of them.
     */
    final int decodeBlocks = Math.max(1, Math.min(8, Integer.getInteger("cmf.vulkan.decodeBlocks", 2)));
    /**
     * Columns of x' the several-tiles pipeline stages at a time (-Dcmf.vulkan.decodeTile: 4096 or 8192; 8192 takes 37 KB
     * of shared memory a workgroup).
     */
    final int decodeTile = Integer.getInteger("cmf.vulkan.decodeTile", DECODE_TILE) >= 2 * DECODE_TILE ? 2 * DECODE_TILE : DECODE_TILE;
    /**
     * ops.comp: ten storage buffers (A..D, the step's S, E..G, which the folded decode attention OP 9 reads, E and F also the f16 cache's OPs, P,
     * the forward's parameters: norm weights, biases, sinks, and the chained phases' counters OP 9 counts into), 64 bytes of push constants, one pipeline per OP (OP 9's from
     * attend_decode.comp, OPs 24-31 from gdn.comp, OPs 32-36 from embryo.comp where the device computes in 64-bit floats:
     * else those are 0).
     */
    final long opsSetLayout, opsPipelineLayout;
    final long[] ops;
    static final int OPS = 37, OPS_PUSH_BYTES = 64, OPS_BUFFERS = 10;
    private final long shaderModule, decodeModule, gemmModule, opsModule, attendModule, gdnModule, embryoModule, gemmCoopModule;
    /** The OP whose pipeline is attend_decode.comp's (same bindings and push constants as ops.comp's): the folded decode attention. */
    static final int OP_ATTEND_DECODE = 9;
    /** gdn.comp's OPs (Qwen3-Next): the delta net's unfuse, conv, gates, rule and gated norm, the output gate's split and product, the gated add. */
    static final int OP_GDN_UNFUSE = 24, OP_GDN_CONV = 25, OP_GDN_GATES = 26, OP_GDN_RULE = 27, OP_GDN_NORM = 28, OP_SPLIT_GATE = 29,
            OP_SIGMOID_MUL = 30, OP_GATED_ADD = 31;
    /** Whether the device was opened with 64-bit floats in shaders, so embryo.comp's OPs exist (else they are 0). */
    final boolean float64;
    /** embryo.comp's OPs (the Embryo family): the anchor's ring attend and commit, the resonance router, the clustered head's two log-softmaxes. */
    static final int OP_ANCHOR_ATTEND = 32, OP_ANCHOR_COMMIT = 33, OP_RESONANCE_ROUTE = 34, OP_CLUSTER_LOGSOFTMAX = 35, OP_HEAD_FINISH = 36;
    /**
     * matmul_coop.comp's pipelines, indexed by kind, for f16 and int8 weights (the kinds exact in f16; 0 for the others):
     * null where the device cannot run them ({@link VulkanDeviceInfo#coopMatmul}) or -Dcmf.vulkan.coopmat=false turns them off.
     */
    final long[] gemmCoop;
    /**
     * Prompt products of f16 and int8 weights take matmul_coop.comp where the device has cooperative matrices;
     * -Dcmf.vulkan.coopmat=false keeps them on matmul.comp (docs/VULKAN.md).
     */
    static final String COOPMAT_PROPERTY = "cmf.vulkan.coopmat";
    /**
     * -Dcmf.vulkan.profile=true, where the device has VK_KHR_pipeline_executable_properties: the pipelines keep the
     * driver's statistics (registers, shared memory, …), printed for the decode step's hot pipelines when the device opens.
     */
    private final boolean statistics;
    private boolean closed;

    private static VulkanContext shared;
    private static RuntimeException sharedFailure;

    /** The process's Vulkan device, opened on first use; a {@link VulkanUnavailableException} says why there is none. */
    public static synchronized VulkanContext get() {
        if (shared != null) return shared;
        if (sharedFailure != null) throw sharedFailure;
        try {
            shared = new VulkanContext(Integer.getInteger(DEVICE_PROPERTY, -1));
            Runtime.getRuntime().addShutdownHook(new Thread(() -> { synchronized (VulkanContext.class) { shared.close(); } }));
            return shared;
        } catch (VulkanUnavailableException | VulkanException e) {
            sharedFailure = e instanceof VulkanUnavailableException u ? u : new VulkanUnavailableException("Vulkan: " + e.getMessage(), e);
            throw sharedFailure;
        }
    }

    /** Every Vulkan device the loader finds (an instance made and destroyed for the listing); empty list when none. */
    public static List<VulkanDeviceInfo> list() {
        Vk vk = Vk.load();
        try (Arena a = Arena.ofConfined()) {
            MemorySegment inst = createInstance(vk, a);
            try {
                List<VulkanDeviceInfo> out = new ArrayList<>();
                for (MemorySegment pd : physicalDevices(vk, inst, a)) out.add(describe(vk, inst, pd, out.size(), a));
                return out;
            } finally {
                vk.call("vkDestroyInstance", inst, MemorySegment.NULL);
            }
        }
    }

    private VulkanContext(int wanted) { this(wanted, true); }

    /**
     * Device {@code wanted} (-1: the best); {@code useFloat64} false opens it without 64-bit floats in shaders even where
     * it has them (a test's stand-in for MoltenVK and the drivers without them).
     */
    VulkanContext(int wanted, boolean useFloat64) {
        vk = Vk.load();
        MemorySegment dev = null;
        try (Arena a = Arena.ofConfined()) {
            instance = createInstance(vk, a);
            try {
                List<MemorySegment> pds = physicalDevices(vk, instance, a);
                List<VulkanDeviceInfo> infos = new ArrayList<>();
                for (MemorySegment pd : pds) infos.add(describe(vk, instance, pd, infos.size(), a));
                if (infos.isEmpty())
                    throw new VulkanUnavailableException("the Vulkan loader found no device (install your GPU's Vulkan driver, or mesa-vulkan-drivers for lavapipe)");
                VulkanDeviceInfo chosen;
                if (wanted >= 0) {
                    if (wanted >= infos.size())
                        throw new VulkanUnavailableException("-D" + DEVICE_PROPERTY + "=" + wanted + ": only " + infos.size() + " Vulkan device(s)");
                    chosen = infos.get(wanted);
                } else {
                    chosen = infos.stream().filter(i -> i.computeQueueFamily() >= 0 && i.subgroupArithmetic())
                            .min(Comparator.comparingInt(VulkanContext::preference)).orElse(null);
                }
                if (chosen == null || chosen.computeQueueFamily() < 0)
                    throw new VulkanUnavailableException("no Vulkan device has a compute queue with subgroup adds and shuffles: " + infos.stream().map(VulkanDeviceInfo::name).toList());
                if (!chosen.subgroupArithmetic())
                    throw new VulkanUnavailableException(chosen.name() + " cannot add and shuffle across a subgroup in compute shaders, which the shaders need");
                if (chosen.subgroupSize() < 4)   // matvec_decode.comp keeps one partial sum per subgroup, at most 64 of them
                    throw new VulkanUnavailableException(chosen.name() + " has subgroups of " + chosen.subgroupSize() + " invocations; the shaders need at least 4");
                info = chosen;
                float64 = chosen.shaderFloat64() && useFloat64;
                MemorySegment pd = pds.get(chosen.index());
                MemorySegment props = Vk.struct(a, 840, Vk.ST_PHYSICAL_DEVICE_PROPERTIES_2);
                vk.call("vkGetPhysicalDeviceProperties2", pd, props);
                int storageBuffers = props.get(U32, 16 + 296 + 76);   // VkPhysicalDeviceLimits.maxPerStageDescriptorStorageBuffers
                sharedMemory = props.get(U32, 16 + 296 + 216);          // VkPhysicalDeviceLimits.maxComputeSharedMemorySize
                int columns = Integer.getInteger("cmf.vulkan.coopColumns", 64) >= 64 ? 64 : 32;
                int tokens = Integer.getInteger("cmf.vulkan.coopTokens", 64) >= 128 ? 128 : 64;
                boolean fits = coopShared(columns, tokens) <= sharedMemory;
                coopColumns = fits ? columns : 32;
                coopTokens = fits ? tokens : 64;
                if (storageBuffers < OPS_BUFFERS)
                    throw new VulkanUnavailableException(chosen.name() + " binds " + storageBuffers + " storage buffers a shader; ops.comp needs " + OPS_BUFFERS);
                statistics = Boolean.getBoolean("cmf.vulkan.profile")
                        && deviceExtensions(vk, pd, a).contains("VK_KHR_pipeline_executable_properties");
                boolean wantCoop = chosen.coopMatmul() && !"false".equalsIgnoreCase(System.getProperty(COOPMAT_PROPERTY));
                dev = createDevice(vk, pd, chosen, a, statistics, wantCoop, float64);
                device = dev;
                MemorySegment q = a.allocate(PTR);
                vk.call("vkGetDeviceQueue", device, chosen.computeQueueFamily(), 0, q);
                queue = q.get(PTR, 0);
                // memory types
                MemorySegment mp = Vk.plain(a, 520);
                vk.call("vkGetPhysicalDeviceMemoryProperties", pd, mp);
                int n = mp.get(U32, 0);
                int[] flags = new int[n];
                for (int i = 0; i < n; i++) flags[i] = mp.get(U32, 4 + 8L * i);
                memoryFlags = flags;
                weightType = firstType(flags, Vk.MEMORY_DEVICE_LOCAL, -1);
                int cached = firstType(flags, Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT | Vk.MEMORY_HOST_CACHED, -1);
                stagingType = cached >= 0 ? cached : firstType(flags, Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, -1);
                if (stagingType < 0) throw new VulkanUnavailableException(chosen.name() + " has no host-visible coherent memory");
                weightsMappable = weightType < 0 || (flags[weightType] & (Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT))
                        == (Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT);
                // pipelines
                descriptorSetLayout = createSetLayout(a, PRODUCT_BUFFERS);
                pipelineLayout = createPipelineLayout(a, descriptorSetLayout, MatvecPush.BYTES);
                shaderModule = createShaderModule(a, Shaders.load("matvec"));
                matvec = new long[Shaders.MATVEC_KINDS];
                for (int k = 0; k < matvec.length; k++) matvec[k] = createPipeline(a, shaderModule, pipelineLayout, k);
                matvecDecode = new long[Shaders.KIND_I8 + 1];
                decodeModule = createShaderModule(a, Shaders.load("matvec_decode"));
                matvecDecodeTiles = new long[matvecDecode.length];
                matvecDecodeDirect = new long[matvecDecode.length];
                matvecDecodeTokens = new long[matvecDecode.length];
                matvecDecodeGlu = new long[matvecDecode.length];
                int tile = DECODE_TILE;
                while (tile > 512 && gluShared(tile) > sharedMemory) tile /= 2;
                gluTile = tile;
                // one pipeline for rows of one tile, one for longer rows, one reading x' from memory and one for several
                // tokens, so no path holds another's registers
                for (int k = 0; k < matvecDecode.length; k++) {
                    matvecDecode[k] = createPipeline(a, decodeModule, pipelineLayout, k, decodeBlocks, 0, DECODE_TILE);
                    matvecDecodeTiles[k] = createPipeline(a, decodeModule, pipelineLayout, k, decodeBlocks, 1, decodeTile);
                    matvecDecodeDirect[k] = createPipeline(a, decodeModule, pipelineLayout, k, decodeBlocks, 2, DECODE_TILE);
                    matvecDecodeTokens[k] = createPipeline(a, decodeModule, pipelineLayout, k, decodeBlocks, 3, DECODE_TILE);
                    matvecDecodeGlu[k] = createPipeline(a, decodeModule, pipelineLayout, k, decodeBlocks, 4, gluTile);
                }
                gemm = new long[Shaders.MATVEC_KINDS];
                gemmModule = createShaderModule(a, Shaders.load("matmul"));
                gemmNarrow = new long[gemm.length];
                for (int k = 0; k < gemm.length; k++) {
                    gemm[k] = createPipeline(a, gemmModule, pipelineLayout, k, 8);
                    gemmNarrow[k] = createPipeline(a, gemmModule, pipelineLayout, k, 4);
                }
                long coopModule = 0;
                long[] coop = null;
                if (wantCoop) {
                    // a driver that refuses the pipelines leaves the prompts on matmul.comp, said once
                    try {
                        coopModule = createShaderModule(a, Shaders.load("matmul_coop"));
                        coop = new long[Shaders.KIND_I8 + 1];
                        for (int k = Shaders.KIND_F16; k < coop.length; k++) coop[k] = createPipeline(a, coopModule, pipelineLayout, k, coopColumns, coopTokens);
                    } catch (VulkanException e) {
                        System.err.println("vulkan: cooperative-matrix prompt products unavailable (" + e.getMessage() + "); matmul.comp used");
                        if (coop != null) for (long pl : coop) if (pl != 0) vk.call("vkDestroyPipeline", dev, pl, MemorySegment.NULL);
                        if (coopModule != 0) vk.call("vkDestroyShaderModule", dev, coopModule, MemorySegment.NULL);
                        coopModule = 0;
                        coop = null;
                    }
                }
                gemmCoopModule = coopModule;
                gemmCoop = coop;
                opsSetLayout = createSetLayout(a, OPS_BUFFERS);
                opsPipelineLayout = createPipelineLayout(a, opsSetLayout, OPS_PUSH_BYTES);
                opsModule = createShaderModule(a, Shaders.load("ops"));
                attendModule = createShaderModule(a, Shaders.load("attend_decode"));
                gdnModule = createShaderModule(a, Shaders.load("gdn"));
                // (its SPIR-V declares Float64: a device without the feature must not see it)
                embryoModule = float64 ? createShaderModule(a, Shaders.load("embryo")) : 0;
                ops = new long[OPS];
                for (int k = 0; k < OPS; k++) {
                    long module = k == OP_ATTEND_DECODE ? attendModule : k >= OP_ANCHOR_ATTEND ? embryoModule : k >= OP_GDN_UNFUSE ? gdnModule : opsModule;
                    ops[k] = module == 0 ? 0 : createPipeline(a, module, opsPipelineLayout, k);
                }
                if (statistics) {
                    System.err.println("vulkan statistics: matvec_decode int8: " + pipelineStatistics(matvecDecode[Shaders.KIND_I8]));
                    System.err.println("vulkan statistics: matvec_decode bf16: " + pipelineStatistics(matvecDecode[Shaders.KIND_BF16]));
                    System.err.println("vulkan statistics: matvec_decode int8, several tiles: " + pipelineStatistics(matvecDecodeTiles[Shaders.KIND_I8]));
                    System.err.println("vulkan statistics: matvec_decode int8, x' from memory: " + pipelineStatistics(matvecDecodeDirect[Shaders.KIND_I8]));
                    System.err.println("vulkan statistics: matvec_decode int8, gate and up: " + pipelineStatistics(matvecDecodeGlu[Shaders.KIND_I8]));
                    System.err.println("vulkan statistics: matvec int8: " + pipelineStatistics(matvec[Shaders.KIND_I8]));
                    System.err.println("vulkan statistics: ops split attention: " + pipelineStatistics(ops[7]));
                    System.err.println("vulkan statistics: ops folded decode attention: " + pipelineStatistics(ops[OP_ATTEND_DECODE]));
                    System.err.println("vulkan statistics: ops chunk attention: " + pipelineStatistics(ops[2]));
                    System.err.println("vulkan statistics: matmul int8: " + pipelineStatistics(gemm[Shaders.KIND_I8]));
                    if (gemmCoop != null) System.err.println("vulkan statistics: matmul_coop int8: " + pipelineStatistics(gemmCoop[Shaders.KIND_I8]));
                }
            } catch (RuntimeException e) {
                if (dev != null) vk.call("vkDestroyDevice", dev, MemorySegment.NULL);
                vk.call("vkDestroyInstance", instance, MemorySegment.NULL);
                throw e;
            }
        }
    }

    private int[] memoryFlags;

    /** Discrete before integrated before virtual before other before software. */
    private static int preference(VulkanDeviceInfo i) {
        return switch (i.type()) {
            case "discrete" -> 0;
            case "integrated" -> 1;
            case "virtual" -> 2;
            case "other" -> 3;
            default -> 4;
        };
    }

    /** The first memory type whose flags include {@code want} and whose bit is set in {@code allowed}, or -1. */
    private static int firstType(int[] flags, int want, int allowed) {
        for (int i = 0; i < flags.length; i++)
            if ((flags[i] & want) == want && ((allowed >>> i) & 1) == 1) return i;
        return -1;
    }

    /** A memory type for {@code want} within a buffer's {@code allowed} bits; a clear failure when none fits. */
    int memoryType(int want, int allowed, String what) {
        int t = firstType(memoryFlags, want, allowed);
        if (t < 0) throw new VulkanException(info.name() + ": no memory type with flags 0x" + Integer.toHexString(want) + " for " + what);
        return t;
    }

    int memoryFlags(int type) { return memoryFlags[type]; }

    /**
     * Memory flags for a buffer the host reads back (logits, products' outputs): host-cached where a type has it, since
     * the host's reads of uncached (write-combined) memory are slow, else host-visible and coherent.
     */
    int readbackFlags() {
        int cached = Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT | Vk.MEMORY_HOST_CACHED;
        return firstType(memoryFlags, cached, -1) >= 0 ? cached : Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT;
    }

    public VulkanDeviceInfo info() { return info; }

    /**
     * The product pipeline for weights of {@code kind} with rows of {@code cols} over {@code tokens} rows: one token of
     * kinds 0-3 takes matvec_decode.comp's (one of two, by whether a row is one tile), gemmMinTokens or more
     * matmul_coop.comp's (kinds 0-3, where the device has them) or matmul.comp's, the rest matvec.comp's.
     */
    long matvecPipeline(int kind, int cols, int tokens) {
        if (tokens >= gemmMinTokens) return coopProduct(kind, tokens) ? gemmCoop[kind] : plainGemm(kind, tokens);
        if (tokens == 1 && kind < matvecDecode.length) return cols <= DECODE_TILE ? matvecDecode[kind] : matvecDecodeTiles[kind];
        if (tokenProducts(kind, cols, tokens)) return matvecDecodeTokens[kind];
        return matvec[kind];
    }

    /**
     * -Dcmf.vulkan.tokenProducts=false: products of 2 to gemmMinTokens - 1 tokens by matvec.comp (its sums in another
     * order than a one-token product's) instead of matvec_decode.comp's several-token pipeline.
     */
    private final boolean tokenProducts = !"false".equalsIgnoreCase(System.getProperty("cmf.vulkan.tokenProducts"));
    /**
     * Workgroups (at most) over a several-token product's rows (-Dcmf.vulkan.tokenGroups), each taking its blocks in
     * turn: a folded RMSNorm's sums of squares are taken once per workgroup.
     */
    final int tokenGroups = Math.max(1, Integer.getInteger("cmf.vulkan.tokenGroups", 128));
    /** Tokens a workgroup of matvec_decode.comp's several-token pipeline takes (its TILE / 512). */
    static final int DECODE_TOKENS = DECODE_TILE / 512;

    /**
     * Whether a product of {@code tokens} (2 … gemmMinTokens - 1) takes matvec_decode.comp's several-token pipeline,
     * which gives each token the bits a one-token product gives it: kinds 0-3, rows a multiple of 4 wide (the one-token
     * paths' vector order), subgroups of at least 8 (its shared sums).
     */
    boolean tokenProducts(int kind, int cols, int tokens) {
        return tokenProducts && tokens > 1 && tokens < gemmMinTokens && kind < matvecDecode.length && (cols & 3) == 0 && info.subgroupSize() >= 8;
    }

    /** Whether {@link #matvecPipeline} takes matmul_coop.comp's (f16 operands) for {@code kind} at {@code tokens}. */
    boolean coopProduct(int kind, int tokens) {
        return tokens >= gemmMinTokens && gemmCoop != null && kind < gemmCoop.length && gemmCoop[kind] != 0;
    }

    /** matmul.comp's pipeline of {@code kind} whatever the device has (the op checks compare the two). */
    long plainGemm(int kind, int tokens) { return tokens >= GEMM_WIDE_TOKENS ? gemm[kind] : gemmNarrow[kind]; }

    /**
     * The one-token pipeline that reads x' from memory (matvec_decode.comp's TILES = 2): for weights of {@code kind} with
     * nothing folded into x' (no norm, GLU or column scales) and a width that is a multiple of 4; {@link #matvecGroups}'s
     * count of a row of one tile.
     */
    long matvecDecodeDirect(int kind) { return matvecDecodeDirect[kind]; }

    /**
     * The one-token pipeline taking a gated MLP's gate and up products together (matvec_decode.comp's TILES = 4), for
     * weights of {@code kind} with rows of at most {@link #gluTile} columns, a multiple of 4; {@link #matvecGroups}'s
     * count of a row of one tile.
     */
    long matvecDecodeGlu(int kind) { return matvecDecodeGlu[kind]; }

    /** The workgroups {@link #matvecPipeline} needs for {@code rows} rows of {@code cols} columns and {@code tokens} tokens: x and y counts. */
    int[] matvecGroups(int kind, int rows, int cols, int tokens, int tokenTile) {
        if (tokens >= gemmMinTokens) {
            int tileRows = coopProduct(kind, tokens) ? COOP_ROWS : tokens >= GEMM_WIDE_TOKENS ? GEMM_ROWS : GEMM_ROWS_NARROW;
            return new int[] {(int) Math.min((rows + tileRows - 1) / tileRows, Integer.toUnsignedLong(info.maxGroupCount()[0])),
                    (int) Math.min((tokens + gemmTokens(kind, tokens) - 1) / gemmTokens(kind, tokens), Integer.toUnsignedLong(info.maxGroupCount()[1]))};
        }
        long gx = rows;
        if (tokenProducts(kind, cols, tokens))
            return new int[] {(int) Math.min(Math.min((rows + DECODE_ROWS - 1) / DECODE_ROWS, tokenGroups), Integer.toUnsignedLong(info.maxGroupCount()[0])),
                    (int) Math.min((tokens + DECODE_TOKENS - 1) / DECODE_TOKENS, Integer.toUnsignedLong(info.maxGroupCount()[1]))};
        if (tokens == 1 && kind < matvecDecode.length) {
            long blocks = (rows + DECODE_ROWS - 1) / DECODE_ROWS;
            // blocks spread evenly: ceil(blocks / per) workgroups of per blocks (the last fewer)
            long per = cols <= DECODE_TILE ? (blocks + decodeGroups - 1) / decodeGroups : decodeBlocks;
            gx = (blocks + per - 1) / per;
        }
        return new int[] {(int) Math.min(gx, Integer.toUnsignedLong(info.maxGroupCount()[0])),
                (int) Math.min((tokens + tokenTile - 1) / tokenTile, Integer.toUnsignedLong(info.maxGroupCount()[1]))};
    }

    // ---- instance and device ----

    private static MemorySegment createInstance(Vk vk, Arena a) {
        MemorySegment ver = a.allocate(U32);
        vk.check("vkEnumerateInstanceVersion", ver);
        if (Integer.compareUnsigned(ver.get(U32, 0), Vk.apiVersion(1, 1)) < 0)
            throw new VulkanUnavailableException("the Vulkan loader is version " + Vk.versionString(ver.get(U32, 0)) + "; 1.1 or newer is needed");
        List<String> exts = new ArrayList<>();
        int flags = 0;
        if (instanceExtensions(vk, a).contains("VK_KHR_portability_enumeration")) {
            exts.add("VK_KHR_portability_enumeration");   // MoltenVK lists its devices only when asked to
            flags = 1;
        }
        MemorySegment app = Vk.struct(a, 48, Vk.ST_APPLICATION_INFO);
        app.set(PTR, 16, a.allocateFrom("cmf4j"));
        app.set(PTR, 32, a.allocateFrom("cmf4j"));
        app.set(U32, 44, Vk.apiVersion(1, 1));
        MemorySegment ci = Vk.struct(a, 64, Vk.ST_INSTANCE_CREATE_INFO);
        ci.set(U32, 16, flags);
        ci.set(PTR, 24, app);
        ci.set(U32, 48, exts.size());
        ci.set(PTR, 56, Vk.names(a, exts));
        MemorySegment out = a.allocate(PTR);
        int r = vk.result("vkCreateInstance", ci, MemorySegment.NULL, out);
        if (r != 0)
            throw new VulkanUnavailableException("vkCreateInstance failed: " + Vk.resultName(r)
                    + (r == -9 ? " (no Vulkan driver installed: your GPU's, or mesa-vulkan-drivers for lavapipe)" : ""));
        return out.get(PTR, 0);
    }

    private static List<String> instanceExtensions(Vk vk, Arena a) {
        MemorySegment n = a.allocate(U32);
        vk.check("vkEnumerateInstanceExtensionProperties", MemorySegment.NULL, n, MemorySegment.NULL);
        int count = n.get(U32, 0);
        MemorySegment props = a.allocate(260L * Math.max(1, count), 4);
        vk.check("vkEnumerateInstanceExtensionProperties", MemorySegment.NULL, n, props);
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n.get(U32, 0); i++) out.add(Vk.chars(props, 260L * i, 256));
        return out;
    }

    private static List<MemorySegment> physicalDevices(Vk vk, MemorySegment inst, Arena a) {
        MemorySegment n = a.allocate(U32);
        vk.check("vkEnumeratePhysicalDevices", inst, n, MemorySegment.NULL);
        int count = n.get(U32, 0);
        MemorySegment arr = a.allocate(PTR.byteSize() * Math.max(1, count), 8);
        vk.check("vkEnumeratePhysicalDevices", inst, n, arr);
        List<MemorySegment> out = new ArrayList<>();
        for (int i = 0; i < n.get(U32, 0); i++) out.add(arr.getAtIndex(PTR, i));
        return out;
    }

    private static List<String> deviceExtensions(Vk vk, MemorySegment pd, Arena a) {
        MemorySegment n = a.allocate(U32);
        vk.check("vkEnumerateDeviceExtensionProperties", pd, MemorySegment.NULL, n, MemorySegment.NULL);
        int count = n.get(U32, 0);
        MemorySegment props = a.allocate(260L * Math.max(1, count), 4);
        vk.check("vkEnumerateDeviceExtensionProperties", pd, MemorySegment.NULL, n, props);
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n.get(U32, 0); i++) out.add(Vk.chars(props, 260L * i, 256));
        return out;
    }

    private static VulkanDeviceInfo describe(Vk vk, MemorySegment instance, MemorySegment pd, int index, Arena a) {
        // properties with the subgroup, maintenance3 and (1.2+) driver structs chained
        MemorySegment sub = Vk.struct(a, 32, Vk.ST_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
        MemorySegment m3 = Vk.struct(a, 32, Vk.ST_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
        MemorySegment drv = Vk.struct(a, 536, Vk.ST_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
        MemorySegment p2 = Vk.struct(a, 840, Vk.ST_PHYSICAL_DEVICE_PROPERTIES_2);
        p2.set(PTR, 8, sub);
        sub.set(PTR, 8, m3);
        vk.call("vkGetPhysicalDeviceProperties2", pd, p2);
        int api = p2.get(U32, 16);
        boolean v12 = Integer.compareUnsigned(api, Vk.apiVersion(1, 2)) >= 0;
        if (v12) {
            m3.set(PTR, 8, drv);
            vk.call("vkGetPhysicalDeviceProperties2", pd, p2);
        }
        MemorySegment props = p2.asSlice(16);
        long limits = 296;
        String name = Vk.chars(props, 20, 256);
        int type = props.get(U32, 16);
        long maxRange = Integer.toUnsignedLong(props.get(U32, limits + 28));
        int[] groups = {props.get(U32, limits + 220), props.get(U32, limits + 224), props.get(U32, limits + 228)};
        // features: shaderFloat16 / shaderInt8
        // (and, where the extensions are listed, the Vulkan memory model and cooperative matrices: matmul_coop.comp's)
        List<String> exts = deviceExtensions(vk, pd, a);
        boolean coopExt = exts.contains("VK_KHR_cooperative_matrix");
        // named as extensions: the instance asks for Vulkan 1.1, where neither is core
        boolean modelExt = exts.contains("VK_KHR_vulkan_memory_model") && exts.contains("VK_KHR_shader_float16_int8");
        MemorySegment f16 = Vk.struct(a, 24, Vk.ST_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
        MemorySegment model = Vk.struct(a, 32, Vk.ST_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES);
        MemorySegment coopF = Vk.struct(a, 24, Vk.ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES);
        MemorySegment f2 = Vk.struct(a, 240, Vk.ST_PHYSICAL_DEVICE_FEATURES_2);
        f2.set(PTR, 8, f16);
        if (coopExt && modelExt) {
            f16.set(PTR, 8, model);
            model.set(PTR, 8, coopF);
        }
        vk.call("vkGetPhysicalDeviceFeatures2", pd, f2);
        boolean coopMatmul = coopExt && modelExt && coopF.get(U32, 16) != 0 && model.get(U32, 16) != 0 && f16.get(U32, 16) != 0
                && sub.get(U32, 16) == 32 && hasCoopShape(vk, instance, pd, a);
        // queues: the first family with compute
        MemorySegment n = a.allocate(U32);
        vk.call("vkGetPhysicalDeviceQueueFamilyProperties", pd, n, MemorySegment.NULL);
        MemorySegment qf = a.allocate(24L * Math.max(1, n.get(U32, 0)), 4);
        vk.call("vkGetPhysicalDeviceQueueFamilyProperties", pd, n, qf);
        int compute = -1;
        for (int i = 0; i < n.get(U32, 0) && compute < 0; i++)
            if ((qf.get(U32, 24L * i) & Vk.QUEUE_COMPUTE) != 0) compute = i;
        // VkPhysicalDeviceLimits.timestampPeriod, if the family's timestampValidBits say it writes them
        float tick = compute >= 0 && qf.get(U32, 24L * compute + 8) != 0 ? props.get(ValueLayout.JAVA_FLOAT, limits + 424) : 0f;
        // heaps
        MemorySegment mp = Vk.plain(a, 520);
        vk.call("vkGetPhysicalDeviceMemoryProperties", pd, mp);
        List<VulkanDeviceInfo.Heap> heaps = new ArrayList<>();
        for (int i = 0; i < mp.get(U32, 260); i++)
            heaps.add(new VulkanDeviceInfo.Heap(mp.get(U64, 264 + 16L * i), (mp.get(U32, 264 + 16L * i + 8) & 1) != 0));
        return new VulkanDeviceInfo(index, name, VulkanDeviceInfo.typeName(type), props.get(U32, 8), props.get(U32, 12),
                Vk.versionString(api), v12 ? Vk.chars(drv, 20, 256) : "", v12 ? Vk.chars(drv, 276, 256) : "", List.copyOf(heaps),
                sub.get(U32, 16), (sub.get(U32, 20) & Vk.STAGE_COMPUTE) != 0 && (sub.get(U32, 24) & (SUBGROUP_ARITHMETIC | SUBGROUP_SHUFFLE)) == (SUBGROUP_ARITHMETIC | SUBGROUP_SHUFFLE),
                f16.get(U32, 16) != 0, f16.get(U32, 20) != 0, coopExt, coopMatmul,
                compute, maxRange, m3.get(U64, 24), groups, exts.contains("VK_KHR_portability_subset"), tick,
                f2.get(U32, 16 + 4 * FEATURE_SHADER_FLOAT64) != 0);
    }

    /**
     * Whether vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR lists f16 × f16 + f32 → f32 matrices of 16 × 16 × 16 at
     * subgroup scope, matmul_coop.comp's shape.
     */
    private static boolean hasCoopShape(Vk vk, MemorySegment instance, MemorySegment pd, Arena a) {
        java.lang.invoke.MethodHandle get = vk.instanceCommand(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR",
                java.lang.foreign.FunctionDescriptor.of(U32, PTR, PTR, PTR));
        if (get == null) return false;
        try {
            MemorySegment n = a.allocate(U32);
            if ((int) get.invokeWithArguments(pd, n, MemorySegment.NULL) != 0) return false;
            int count = n.get(U32, 0);
            if (count == 0) return false;
            // VkCooperativeMatrixPropertiesKHR: sType, pNext, M N K at 16, A B C Result types at 28, saturating at 44, scope at 48
            MemorySegment props = a.allocate(56L * count, 8);
            for (int i = 0; i < count; i++) props.set(U32, 56L * i, Vk.ST_COOPERATIVE_MATRIX_PROPERTIES);
            int r = (int) get.invokeWithArguments(pd, n, props);
            if (r != 0 && r != 5) return false;
            for (int i = 0; i < n.get(U32, 0); i++) {
                long at = 56L * i;
                if (props.get(U32, at + 16) == 16 && props.get(U32, at + 20) == 16 && props.get(U32, at + 24) == 16
                        && props.get(U32, at + 28) == Vk.COMPONENT_FLOAT16 && props.get(U32, at + 32) == Vk.COMPONENT_FLOAT16
                        && props.get(U32, at + 36) == Vk.COMPONENT_FLOAT32 && props.get(U32, at + 40) == Vk.COMPONENT_FLOAT32
                        && props.get(U32, at + 48) == Vk.SCOPE_SUBGROUP) return true;
            }
            return false;
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new VulkanException("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR: " + t, t);
        }
    }

    /** VkPhysicalDeviceFeatures.shaderFloat64: the index of its VkBool32 in the struct (55 of them). */
    private static final int FEATURE_SHADER_FLOAT64 = 39, FEATURES = 55;

    private static MemorySegment createDevice(Vk vk, MemorySegment pd, VulkanDeviceInfo info, Arena a, boolean statistics, boolean coop,
                                              boolean float64) {
        MemorySegment prio = a.allocate(ValueLayout.JAVA_FLOAT);
        prio.set(ValueLayout.JAVA_FLOAT, 0, 1f);
        MemorySegment q = Vk.struct(a, 40, Vk.ST_DEVICE_QUEUE_CREATE_INFO);
        q.set(U32, 20, info.computeQueueFamily());
        q.set(U32, 24, 1);
        q.set(PTR, 32, prio);
        List<String> exts = new ArrayList<>();
        if (info.portabilitySubset()) exts.add("VK_KHR_portability_subset");
        MemorySegment ci = Vk.struct(a, 72, Vk.ST_DEVICE_CREATE_INFO);
        if (statistics) {
            exts.add("VK_KHR_pipeline_executable_properties");
            MemorySegment feature = Vk.struct(a, 24, Vk.ST_PIPELINE_EXECUTABLE_FEATURES);
            feature.set(U32, 16, 1);
            feature.set(PTR, 8, ci.get(PTR, 8));
            ci.set(PTR, 8, feature);
        }
        if (coop) {
            // matmul_coop.comp: cooperative matrices, f16 arithmetic and the Vulkan memory model (its SPIR-V's capabilities);
            exts.add("VK_KHR_cooperative_matrix");
            exts.add("VK_KHR_shader_float16_int8");
            exts.add("VK_KHR_vulkan_memory_model");
            MemorySegment coopF = Vk.struct(a, 24, Vk.ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES);
            coopF.set(U32, 16, 1);
            MemorySegment f16 = Vk.struct(a, 24, Vk.ST_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
            f16.set(U32, 16, 1);
            MemorySegment model = Vk.struct(a, 32, Vk.ST_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES);
            model.set(U32, 16, 1);
            coopF.set(PTR, 8, f16);
            f16.set(PTR, 8, model);
            model.set(PTR, 8, ci.get(PTR, 8));
            ci.set(PTR, 8, coopF);
        }
        if (float64) {   // pEnabledFeatures: 64-bit floats (embryo.comp), nothing else
            MemorySegment features = Vk.plain(a, 4L * FEATURES);
            features.set(U32, 4L * FEATURE_SHADER_FLOAT64, 1);
            ci.set(PTR, 64, features);
        }
        ci.set(U32, 20, 1);
        ci.set(PTR, 24, q);
        ci.set(U32, 48, exts.size());
        ci.set(PTR, 56, Vk.names(a, exts));
        MemorySegment out = a.allocate(PTR);
        vk.check("vkCreateDevice", pd, ci, MemorySegment.NULL, out);
        return out.get(PTR, 0);
    }

    // ---- pipelines ----

    /** {@code n} storage buffers (the products: the weights, the activations, the outputs, the folded operators' P). */
    private long createSetLayout(Arena a, int n) {
        MemorySegment b = Vk.plain(a, 24L * n);
        for (int i = 0; i < n; i++) {
            b.set(U32, 24L * i, i);
            b.set(U32, 24L * i + 4, Vk.DESCRIPTOR_STORAGE_BUFFER);
            b.set(U32, 24L * i + 8, 1);
            b.set(U32, 24L * i + 12, Vk.STAGE_COMPUTE);
        }
        MemorySegment ci = Vk.struct(a, 32, Vk.ST_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
        ci.set(U32, 20, n);
        ci.set(PTR, 24, b);
        MemorySegment out = Vk.out(a);
        vk.check("vkCreateDescriptorSetLayout", device, ci, MemorySegment.NULL, out);
        return out.get(U64, 0);
    }

    private long createPipelineLayout(Arena a, long setLayout, int pushBytes) {
        MemorySegment range = Vk.plain(a, 12);
        range.set(U32, 0, Vk.STAGE_COMPUTE);
        range.set(U32, 8, pushBytes);
        MemorySegment layouts = a.allocate(U64);
        layouts.set(U64, 0, setLayout);
        MemorySegment ci = Vk.struct(a, 48, Vk.ST_PIPELINE_LAYOUT_CREATE_INFO);
        ci.set(U32, 20, 1);
        ci.set(PTR, 24, layouts);
        ci.set(U32, 32, 1);
        ci.set(PTR, 40, range);
        MemorySegment out = Vk.out(a);
        vk.check("vkCreatePipelineLayout", device, ci, MemorySegment.NULL, out);
        return out.get(U64, 0);
    }

    private long createShaderModule(Arena a, byte[] spirv) {
        MemorySegment code = a.allocate(spirv.length, 4);
        code.copyFrom(MemorySegment.ofArray(spirv));
        MemorySegment ci = Vk.struct(a, 40, Vk.ST_SHADER_MODULE_CREATE_INFO);
        ci.set(U64, 24, spirv.length);
        ci.set(PTR, 32, code);
        MemorySegment out = Vk.out(a);
        vk.check("vkCreateShaderModule", device, ci, MemorySegment.NULL, out);
        return out.get(U64, 0);
    }

    /**
     * The shader's {@code main} with specialization constants 0, 1, … set to {@code values} (constant 0: matvec's weight
     * kind, ops' OP; matvec's constant 1: rows per workgroup, matvec_decode's: blocks taken together, then its path and
     * tile).
     */
    private long createPipeline(Arena a, long module, long layout, int... values) {
        MemorySegment entries = Vk.plain(a, 16L * values.length);
        MemorySegment data = a.allocate(4L * values.length, 4);
        for (int i = 0; i < values.length; i++) {
            entries.set(U32, 16L * i, i);
            entries.set(U32, 16L * i + 4, 4 * i);
            entries.set(U64, 16L * i + 8, 4);
            data.set(U32, 4L * i, values[i]);
        }
        MemorySegment spec = Vk.plain(a, 32);
        spec.set(U32, 0, values.length);
        spec.set(PTR, 8, entries);
        spec.set(U64, 16, 4L * values.length);
        spec.set(PTR, 24, data);
        MemorySegment ci = Vk.struct(a, 96, Vk.ST_COMPUTE_PIPELINE_CREATE_INFO);
        MemorySegment stage = ci.asSlice(24, 48);
        stage.set(U32, 0, Vk.ST_PIPELINE_SHADER_STAGE_CREATE_INFO);
        stage.set(U32, 20, Vk.STAGE_COMPUTE);
        stage.set(U64, 24, module);
        stage.set(PTR, 32, a.allocateFrom("main"));
        stage.set(PTR, 40, spec);
        ci.set(U64, 72, layout);
        ci.set(U32, 88, -1);
        if (statistics) ci.set(U32, 16, 0x40);   // VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
        MemorySegment out = Vk.out(a);
        vk.check("vkCreateComputePipelines", device, 0L, 1, ci, MemorySegment.NULL, out);
        return out.get(U64, 0);
    }

    /** The driver's statistics of {@code pipeline}'s executables, "name value" each (with the profile; see {@link #statistics}). */
    String pipelineStatistics(long pipeline) {
        try (Arena a = Arena.ofConfined()) {
            java.lang.foreign.FunctionDescriptor fd = java.lang.foreign.FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR);
            java.lang.invoke.MethodHandle executables = vk.deviceCommand(device, "vkGetPipelineExecutablePropertiesKHR", fd);
            java.lang.invoke.MethodHandle stats = vk.deviceCommand(device, "vkGetPipelineExecutableStatisticsKHR", fd);
            MemorySegment pi = Vk.struct(a, 24, Vk.ST_PIPELINE_INFO);
            pi.set(U64, 16, pipeline);
            MemorySegment n = a.allocate(U32);
            executables.invokeWithArguments(device, pi, n, MemorySegment.NULL);
            StringBuilder b = new StringBuilder();
            for (int e = 0; e < n.get(U32, 0); e++) {
                MemorySegment ei = Vk.struct(a, 32, Vk.ST_PIPELINE_EXECUTABLE_INFO);
                ei.set(U64, 16, pipeline);
                ei.set(U32, 24, e);
                MemorySegment m = a.allocate(U32);
                stats.invokeWithArguments(device, ei, m, MemorySegment.NULL);
                int count = m.get(U32, 0);
                // VkPipelineExecutableStatisticKHR: sType, pNext, name[256] at 16, description[256], format at 528, value at 536
                MemorySegment out = a.allocate(544L * Math.max(1, count), 8);
                for (int i = 0; i < count; i++) out.set(U32, 544L * i, Vk.ST_PIPELINE_EXECUTABLE_STATISTIC);
                stats.invokeWithArguments(device, ei, m, out);
                for (int i = 0; i < m.get(U32, 0); i++) {
                    long at = 544L * i;
                    int format = out.get(U32, at + 528);
                    String value = switch (format) {
                        case 0 -> out.get(U32, at + 536) != 0 ? "yes" : "no";
                        case 3 -> String.valueOf(out.get(ValueLayout.JAVA_DOUBLE, at + 536));
                        default -> String.valueOf(out.get(U64, at + 536));
                    };
                    b.append(b.isEmpty() ? "" : ", ").append(Vk.chars(out, at + 16, 256)).append(' ').append(value);
                }
            }
            return b.toString();
        } catch (RuntimeException e) {
            return "(none: " + e.getMessage() + ")";
        } catch (Throwable t) {
            return "(none: " + t + ")";
        }
    }

    // ---- buffers ----

    /** A buffer with its own memory; {@code mapped} is the host view when the memory is host-visible, else null. */
    record Buffer(long buffer, long memory, long bytes, MemorySegment mapped) {}

    /** A storage (and transfer) buffer of {@code bytes} in memory with flags {@code want}, mapped when host-visible. */
    Buffer buffer(long bytes, int want, String what) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ci = Vk.struct(a, 56, Vk.ST_BUFFER_CREATE_INFO);
            ci.set(U64, 24, Math.max(bytes, 16));
            ci.set(U32, 32, Vk.BUFFER_STORAGE | Vk.BUFFER_TRANSFER_SRC | Vk.BUFFER_TRANSFER_DST);
            MemorySegment out = Vk.out(a);
            vk.check("vkCreateBuffer", device, ci, MemorySegment.NULL, out);
            long buf = out.get(U64, 0);
            try {
                MemorySegment req = Vk.plain(a, 24);
                vk.call("vkGetBufferMemoryRequirements", device, buf, req);
                int type = memoryType(want, req.get(U32, 16), what);
                MemorySegment ai = Vk.struct(a, 32, Vk.ST_MEMORY_ALLOCATE_INFO);
                ai.set(U64, 16, req.get(U64, 0));
                ai.set(U32, 24, type);
                vk.check("vkAllocateMemory", device, ai, MemorySegment.NULL, out);
                long mem = out.get(U64, 0);
                vk.check("vkBindBufferMemory", device, buf, mem, 0L);
                MemorySegment mapped = null;
                if ((memoryFlags[type] & Vk.MEMORY_HOST_VISIBLE) != 0) {
                    MemorySegment p = a.allocate(PTR);
                    vk.check("vkMapMemory", device, mem, 0L, Vk.WHOLE_SIZE, 0, p);
                    mapped = p.get(PTR, 0).reinterpret(bytes);
                }
                return new Buffer(buf, mem, bytes, mapped);
            } catch (RuntimeException e) {
                vk.call("vkDestroyBuffer", device, buf, MemorySegment.NULL);
                throw e;
            }
        }
    }

    void free(Buffer b) {
        if (b == null) return;
        vk.call("vkDestroyBuffer", device, b.buffer(), MemorySegment.NULL);
        vk.call("vkFreeMemory", device, b.memory(), MemorySegment.NULL);   // unmaps it
    }

    /** Submits the one command buffer of {@code submitInfo} (a VkSubmitInfo) to the queue, which every model shares. */
    synchronized void submit(MemorySegment submitInfo, long fence) {
        if (closed) throw new IllegalStateException("Vulkan context closed");
        vk.queueSubmit(queue, submitInfo, fence);
    }

    /**
     * moe.comp's OPs (VulkanResidentForward.moe): route, gate/up with the GLU, down with the weighted sum, the router's
     * product; for chunks, by expert: gate/up with the GLU, down per pick, the picks' weighted sum; input-major experts:
     * gate/up with the GLU, down with the weighted sum.
     */
    static final int MOE_ROUTE = 0, MOE_GATE_UP = 1, MOE_DOWN = 2, MOE_PRODUCT = 3, MOE_GATE_UP_BY_EXPERT = 4, MOE_DOWN_BY_EXPERT = 5,
            MOE_SUM = 6, MOE_GATE_UP_INPUT_MAJOR = 7, MOE_DOWN_INPUT_MAJOR = 8, MOE_OPS = 9;
    /** moe.comp's pipelines by OP and weight kind (f32, bf16, f16, int8, q4_block, q4tp), made when a forward first records one; ops.comp's layout. */
    private final long[] moe = new long[MOE_OPS * (Shaders.KIND_Q4TP + 1)];
    private long moeModule;

    synchronized long moePipeline(int op, int kind) {
        if (closed) throw new IllegalStateException("Vulkan context closed");
        if (kind < 0 || kind > Shaders.KIND_Q4TP) throw new IllegalArgumentException("moe.comp reads no weight kind " + kind);
        int at = op * (Shaders.KIND_Q4TP + 1) + kind;
        if (moe[at] == 0) {
            try (Arena a = Arena.ofConfined()) {
                if (moeModule == 0) moeModule = createShaderModule(a, Shaders.load("moe"));
                moe[at] = createPipeline(a, moeModule, opsPipelineLayout, op, kind);
            }
        }
        return moe[at];
    }

    /** One line for people. */
    public String describe() { return info.describe(); }

    /** The OPs that read or write the KV cache (ops.comp's 1, 2, 4, 7; attend_decode.comp's 9): those with an f16 twin. */
    static boolean readsKvCache(int op) { return op == 1 || op == 2 || op == 4 || op == 7 || op == OP_ATTEND_DECODE; }

    /** Their pipelines over an f16 cache (specialization constant 1, KV_HALF), made when a forward first records one. */
    private final long[] opsKvHalf = new long[OPS];

    synchronized long opKvHalf(int op) {
        if (closed) throw new IllegalStateException("Vulkan context closed");
        if (!readsKvCache(op)) throw new IllegalArgumentException("OP " + op + " reads no KV cache");
        if (opsKvHalf[op] == 0)
            try (Arena a = Arena.ofConfined()) {
                opsKvHalf[op] = createPipeline(a, op == OP_ATTEND_DECODE ? attendModule : opsModule, opsPipelineLayout, op, 1);
            }
        return opsKvHalf[op];
    }

    @Override public synchronized void close() {
        if (closed) return;
        closed = true;
        vk.result("vkDeviceWaitIdle", device);
        for (long p : matvec) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        for (long p : matvecDecode) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        for (long p : matvecDecodeTiles) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        for (long p : matvecDecodeDirect) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        for (long p : matvecDecodeGlu) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        for (long p : matvecDecodeTokens) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        for (long p : gemm) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        for (long p : gemmNarrow) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        if (gemmCoop != null) for (long p : gemmCoop) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        if (gemmCoopModule != 0) vk.call("vkDestroyShaderModule", device, gemmCoopModule, MemorySegment.NULL);
        for (long p : ops) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        for (long p : opsKvHalf) if (p != 0) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        for (long p : moe) if (p != 0) vk.call("vkDestroyPipeline", device, p, MemorySegment.NULL);
        if (moeModule != 0) vk.call("vkDestroyShaderModule", device, moeModule, MemorySegment.NULL);
        vk.call("vkDestroyShaderModule", device, shaderModule, MemorySegment.NULL);
        vk.call("vkDestroyShaderModule", device, decodeModule, MemorySegment.NULL);
        vk.call("vkDestroyShaderModule", device, gemmModule, MemorySegment.NULL);
        vk.call("vkDestroyShaderModule", device, opsModule, MemorySegment.NULL);
        vk.call("vkDestroyShaderModule", device, attendModule, MemorySegment.NULL);
        vk.call("vkDestroyShaderModule", device, gdnModule, MemorySegment.NULL);
        if (embryoModule != 0) vk.call("vkDestroyShaderModule", device, embryoModule, MemorySegment.NULL);
        vk.call("vkDestroyPipelineLayout", device, opsPipelineLayout, MemorySegment.NULL);
        vk.call("vkDestroyDescriptorSetLayout", device, opsSetLayout, MemorySegment.NULL);
        vk.call("vkDestroyPipelineLayout", device, pipelineLayout, MemorySegment.NULL);
        vk.call("vkDestroyDescriptorSetLayout", device, descriptorSetLayout, MemorySegment.NULL);
        vk.call("vkDestroyDevice", device, MemorySegment.NULL);
        vk.call("vkDestroyInstance", instance, MemorySegment.NULL);
    }

    /** Reads a resource of this package fully. */
    static byte[] resource(String name) {
        try (InputStream in = VulkanContext.class.getResourceAsStream(name)) {
            if (in == null) throw new VulkanUnavailableException("the jar lacks dev/cmf4j/backend/vulkan/" + name + " (rebuild with tools/build-vulkan-shaders.sh)");
            return in.readAllBytes();
        } catch (IOException e) {
            throw new VulkanUnavailableException("reading " + name + ": " + e.getMessage(), e);
        }
    }
}
