package dev.cmf4j.chat.jinja;

/** A Python {@code range}. Length is bounded by the sandbox's MAX_RANGE when created. */
record PyRange(long start, long stop, long step) {
    long length() {
        if (step > 0) return start < stop ? (stop - start - 1) / step + 1 : 0;
        return start > stop ? (start - stop - 1) / (-step) + 1 : 0;
    }

    long get(long i) {
        return start + i * step;
    }
}
