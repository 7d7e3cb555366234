package dev.cmf4j.backend.cuda;

import java.util.ArrayList;
import java.util.List;

/**
 * One sequence's full-layer KV caches backed page by page: each cache's address range (a row per position of the whole
 * context) is reserved at once, and physical pages of the driver's granularity are mapped into it as the sequence's
 * positions reach them, so a sequence holds device memory for the positions it has used, not for its context. The
 * kernels see the same contiguous rows as before (row j at base + j·rowBytes), and captured graphs stay valid since
 * addresses never move. Pages stay mapped until the sequence is freed (a rewind or a new prompt reuses them); a freed
 * sequence's ranges, pages and all, can go to the next sequence of the same shape ({@link #reuse}), since mapping costs
 * driver calls per cache (vAttention's deferred reclamation). Owner thread only.
 */
final class KvPages {
    /** A reserved cache range, {@code mapped} bytes of it backed from its start. */
    private static final class Range {
        final long base, size, rowBytes;
        long mapped;

        Range(long base, long size, long rowBytes) { this.base = base; this.size = size; this.rowBytes = rowBytes; }
    }

    /** One mapping: {@code bytes} of physical memory {@code handle} at {@code at}. */
    private record Mapping(long at, long bytes, long handle) {}

    private final CudaDriver cu;
    private final int device;
    private final long granule;
    private final List<Range> ranges = new ArrayList<>();
    private final List<Mapping> mappings = new ArrayList<>();
    private long mappedBytes;
    /** Rows every cache has backed ({@link #ensureRows}'s fast path: a decode step usually needs no new page). */
    private int rowsBacked;
    /** While reused: the next of {@link #ranges} a {@link #reserve} hands out again. */
    private int replay = -1;

    /**
     * Whether caches on {@code device} can be paged: the driver and device manage virtual memory and
     * {@code -Dcmf.cuda.kvPages} is not false (else the caches are allocated whole).
     */
    static boolean supported(CudaDriver cu, int device) {
        return !"false".equals(System.getProperty("cmf.cuda.kvPages")) && cu.hasVirtualMemory()
                && cu.attribute(CudaDriver.ATTR_VIRTUAL_MEMORY, device) != 0;
    }

    /** Pages for a new sequence's caches on {@code device}, which must be {@link #supported}. */
    static KvPages create(CudaDriver cu, int device) {
        return new KvPages(cu, device, cu.allocationGranularity(device));
    }

    private KvPages(CudaDriver cu, int device, long granule) {
        this.cu = cu;
        this.device = device;
        this.granule = granule;
    }

    /**
     * A cache of {@code bytes} whose row j lies at j·{@code rowBytes}: its address, with nothing mapped yet (or, while
     * reused, the same cache of the sequence before, with the pages it had).
     */
    long reserve(long bytes, long rowBytes) {
        if (rowBytes <= 0) throw new IllegalArgumentException("a paged cache of " + rowBytes + "-byte rows");
        long size = Math.max(granule, (bytes + granule - 1) / granule * granule);
        if (replay >= 0) {
            Range r = ranges.get(replay++);
            if (r.size != size || r.rowBytes != rowBytes)
                throw new IllegalStateException("reused KV pages of another shape: " + r.size + " / " + r.rowBytes + " bytes, asked "
                        + size + " / " + rowBytes);
            if (replay == ranges.size()) replay = -1;
            return r.base;
        }
        long base = cu.addressReserve(size, granule);
        ranges.add(new Range(base, size, rowBytes));
        return base;
    }

    /**
     * Backs rows [0, {@code rows}) of every cache. A failure (no device memory left) leaves what was mapped before it
     * mapped and throws; the caches' earlier rows are untouched.
     */
    void ensureRows(int rows) {
        if (rows <= rowsBacked) return;
        for (Range r : ranges) {
            long need = Math.min(r.size, ((long) rows * r.rowBytes + granule - 1) / granule * granule);
            if (need <= r.mapped) continue;
            long at = r.base + r.mapped, bytes = need - r.mapped;
            long handle;
            try {
                handle = cu.memCreate(bytes, device);
            } catch (CudaException e) {   // (a CudaException still, so the prefill's kept copies can give way and retry)
                throw new CudaException("the KV cache of positions up to " + rows + " (" + bytes + " more bytes; " + mappedBytes
                        + " held by this sequence's caches; fewer concurrent sequences or shorter ones need less): "
                        + e.call(), e.status(), null, null);
            }
            try {
                cu.memMap(at, bytes, handle, device);
            } catch (RuntimeException e) {
                cu.memRelease(handle);
                throw e;
            }
            mappings.add(new Mapping(at, bytes, handle));
            r.mapped = need;
            mappedBytes += bytes;
        }
        int backed = Integer.MAX_VALUE;   // (a range mapped to its end backs every row it has)
        for (Range r : ranges) backed = Math.min(backed, r.mapped == r.size ? Integer.MAX_VALUE : (int) (r.mapped / r.rowBytes));
        rowsBacked = backed;
    }

    /** These ranges for a new sequence whose caches are reserved in the same order and sizes (the same model and context). */
    KvPages reuse() {
        replay = ranges.isEmpty() ? -1 : 0;
        return this;
    }

    /** The reserved bytes, which identify a sequence's shape of caches for {@link #reuse}. */
    long reservedBytes() {
        long b = 0;
        for (Range r : ranges) b += r.size;
        return b;
    }

    /** Device memory mapped into the caches. */
    long mappedBytes() { return mappedBytes; }

    /** The driver's page size here. */
    long granule() { return granule; }

    /** Unmaps and gives back every page and range (the stream must be idle). */
    void free() {
        for (Mapping m : mappings) {
            cu.memUnmap(m.at(), m.bytes());
            cu.memRelease(m.handle());
        }
        mappings.clear();
        for (Range r : ranges) cu.addressFree(r.base, r.size);
        ranges.clear();
        mappedBytes = 0;
        rowsBacked = 0;
    }
}
