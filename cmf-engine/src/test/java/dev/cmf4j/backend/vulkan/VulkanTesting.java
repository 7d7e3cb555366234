package dev.cmf4j.backend.vulkan;

import org.junit.jupiter.api.Assumptions;

/**
 * The Vulkan device the tests run on: lavapipe in CI (.ci/run installs libvulkan1 and mesa-vulkan-drivers), a GPU where
 * there is one. Without a loader or device the tests skip with the reason, except under CMF_CI=1, where that is a failure
 * (CI installs them, so their absence is a broken CI image, not a machine without Vulkan).
 */
final class VulkanTesting {
    private VulkanTesting() {}

    static VulkanContext context() {
        try {
            return VulkanContext.get();
        } catch (VulkanUnavailableException e) {
            if ("1".equals(System.getenv("CMF_CI")))
                throw new AssertionError("CMF_CI=1 but no Vulkan device (.ci/run installs libvulkan1 and mesa-vulkan-drivers): " + e.getMessage(), e);
            Assumptions.abort("no Vulkan device: " + e.getMessage());
            throw e;
        }
    }
}
