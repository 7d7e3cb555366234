package dev.cmf4j.backend.cuda;

import java.util.Map;

/**
 * A CUDA driver or NVRTC call that returned an error status: names the call, the numeric status and the
 * library's own name and description of it (from {@code cuGetErrorName}/{@code cuGetErrorString}, or a
 * built-in table of the common codes when the library cannot describe it), plus the compiler log for
 * NVRTC compile errors.
 */
public final class CudaException extends RuntimeException {
    private final String call;
    private final int status;

    public CudaException(String call, int status, String name, String detail) {
        super(call + " failed: " + (name == null ? knownName(status) : name) + " (" + status + ")"
                + (detail == null || detail.isBlank() ? "" : ": " + detail));
        this.call = call;
        this.status = status;
    }

    /** The binding name of the failed call (e.g. {@code cuMemAlloc_v2}). */
    public String call() { return call; }

    /** The status the call returned ({@code CUresult} or {@code nvrtcResult}). */
    public int status() { return status; }

    /** CUresult names of the codes a user is likely to meet, for when the driver cannot be asked. */
    private static final Map<Integer, String> KNOWN = Map.ofEntries(
            Map.entry(1, "CUDA_ERROR_INVALID_VALUE"), Map.entry(2, "CUDA_ERROR_OUT_OF_MEMORY"),
            Map.entry(3, "CUDA_ERROR_NOT_INITIALIZED"), Map.entry(4, "CUDA_ERROR_DEINITIALIZED"),
            Map.entry(100, "CUDA_ERROR_NO_DEVICE"), Map.entry(101, "CUDA_ERROR_INVALID_DEVICE"),
            Map.entry(200, "CUDA_ERROR_INVALID_IMAGE"), Map.entry(201, "CUDA_ERROR_INVALID_CONTEXT"),
            Map.entry(209, "CUDA_ERROR_NO_BINARY_FOR_GPU"), Map.entry(218, "CUDA_ERROR_INVALID_PTX"),
            Map.entry(222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"), Map.entry(400, "CUDA_ERROR_INVALID_HANDLE"),
            Map.entry(500, "CUDA_ERROR_NOT_FOUND"), Map.entry(700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
            Map.entry(701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"), Map.entry(702, "CUDA_ERROR_LAUNCH_TIMEOUT"),
            Map.entry(719, "CUDA_ERROR_LAUNCH_FAILED"), Map.entry(803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
            Map.entry(804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"), Map.entry(999, "CUDA_ERROR_UNKNOWN"));

    /** The CUresult name of {@code status} from the built-in table, or {@code CUDA_ERROR_<n>}. */
    public static String knownName(int status) {
        return status == 0 ? "CUDA_SUCCESS" : KNOWN.getOrDefault(status, "CUDA_ERROR_" + status);
    }
}
