package dev.cmf4j.backend;

/**
 * One operator of a device checked against the CPU's on random inputs: its largest difference normalized by the
 * reference's largest magnitude, and the bound it must stay within.
 *
 * @param op    the operator (a kernel family and its variant)
 * @param shape the inputs' sizes, for people
 */
public record OpResult(String op, String shape, double error, double bound) {
    public boolean ok() { return error <= bound; }
}
