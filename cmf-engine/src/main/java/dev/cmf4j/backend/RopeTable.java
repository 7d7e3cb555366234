package dev.cmf4j.backend;

/**
 * Rotary position embedding as the operators apply it: the first {@code rotaryDim} dims of each head rotated by
 * position·invFreq[i] (NeoX halves), cos and sin scaled by {@code attentionScaling}; rotaryDim 0 = no rotation.
 */
public record RopeTable(int rotaryDim, float[] invFreq, float attentionScaling) {}
