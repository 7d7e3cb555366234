package dev.cmf4j.backend.vulkan;

import dev.cmf4j.backend.BuildStamp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Map;

/**
 * The compute shaders shipped in the jar: {@code NAME.comp} (GLSL) built by tools/build-vulkan-shaders.sh into
 * {@code NAME.spv} (SPIR-V) with {@code NAME.spv.stamp} recording the source's SHA-256. The engine loads the .spv;
 * ShippedShadersTest keeps the three in step.
 */
final class Shaders {
    private Shaders() {}

    /** matvec.comp's weight kinds (specialization constant 0): f32, bf16, f16, int8, q4_block, q4tp. */
    static final int MATVEC_KINDS = 6;
    static final int KIND_F32 = 0, KIND_BF16 = 1, KIND_F16 = 2, KIND_I8 = 3, KIND_Q4_BLOCK = 4, KIND_Q4TP = 5;

    /** SPIR-V's magic word, little-endian. */
    static final int SPIRV_MAGIC = 0x07230203;

    /** The SPIR-V of {@code NAME.spv}, checked for the magic word and a whole number of words. */
    static byte[] load(String name) {
        byte[] spv = VulkanContext.resource(name + ".spv");
        if (spv.length < 20 || spv.length % 4 != 0
                || ByteBuffer.wrap(spv).order(ByteOrder.LITTLE_ENDIAN).getInt(0) != SPIRV_MAGIC)
            throw new VulkanUnavailableException(name + ".spv is not SPIR-V (rebuild with tools/build-vulkan-shaders.sh)");
        return spv;
    }

    /** Why {@code name}'s shipped SPIR-V does not match its source (null when it does); {@code spv} or {@code stamp} null when absent. */
    static String problem(String name, String source, byte[] spv, Map<String, String> stamp) {
        if (spv == null) return name + ".spv is missing";
        if (stamp == null || stamp.isEmpty()) return name + ".spv.stamp is missing";
        if (!BuildStamp.sourceSha256(source).equals(stamp.get("source-sha256"))) return name + ".spv was built from another " + name + ".comp";
        if (!BuildStamp.sha256(spv).equals(stamp.get("spv-sha256"))) return name + ".spv is not the file its stamp records";
        return null;
    }
}
