package dev.cmf4j.backend.cuda;

/**
 * No usable NVIDIA GPU: the driver library ({@code libcuda.so.1}) is missing, {@code cuInit} failed, no
 * device is present, or the kernels cannot be loaded (the shipped fatbin is stale or does not fit the GPU, and
 * NVRTC, needed to compile them instead, is absent). The message says which and
 * what to do; {@code --device auto} turns it into a fallback to the CPU backend.
 */
public final class CudaUnavailableException extends RuntimeException {
    public CudaUnavailableException(String message) { super(message); }

    public CudaUnavailableException(String message, Throwable cause) { super(message, cause); }
}
