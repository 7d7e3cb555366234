package dev.cmf4j.backend.vulkan;

/**
 * No usable Vulkan device: the loader ({@code libvulkan.so.1}) is missing, no driver answers, no device has a compute
 * queue, or the shipped shaders cannot be loaded. The message says which and what to do; {@code --device auto} turns it
 * into a fallback to the CPU backend.
 */
public final class VulkanUnavailableException extends RuntimeException {
    public VulkanUnavailableException(String message) { super(message); }

    public VulkanUnavailableException(String message, Throwable cause) { super(message, cause); }
}
