package dev.cmf4j.backend.vulkan;

/** A Vulkan call that failed (its {@code VkResult} named), after the device was opened. */
public final class VulkanException extends RuntimeException {
    public VulkanException(String message) { super(message); }

    public VulkanException(String message, Throwable cause) { super(message, cause); }
}
