package dev.cmf4j.format;

/**
 * One region of a CMF file as the envelope declares it: absolute byte offset and length. A length of
 * 0 means the section is absent (masks, vocab and index are optional).
 */
public record Section(String name, long offset, long length) {
    public boolean present() { return length != 0; }

    /** First byte after the section. */
    public long end() { return offset + length; }

    @Override public String toString() { return name + "[" + offset + ", +" + length + "]"; }
}
