package dev.cmf4j.backend;

import java.util.List;

/**
 * A file's task masks for a device that applies them per row (CMF_FORMAT.md §1.6), by task slot − 1 (slot 0 is none):
 * per layer whether it runs, which FFN neurons and attention heads are off (zero before the down and o projections),
 * which experts may not be routed to (router logit −∞). A null mask is all ones (nothing to do).
 *
 * @param names the masks' names, slot i + 1 is names.get(i)
 * @param masks per mask its bits, or null
 */
public record DeviceTasks(List<String> names, List<Mask> masks) {
    public DeviceTasks {
        if (masks.size() != names.size()) throw new IllegalArgumentException("one mask per name");
        names = List.copyOf(names);
        masks = java.util.Collections.unmodifiableList(new java.util.ArrayList<>(masks));   // (nulls allowed)
    }

    /**
     * @param layerOff  per layer, true when it is skipped (its residual rows pass through unchanged)
     * @param ffnOff    per layer the FFN neuron indices that are off, or null
     * @param headsOff  per layer the attention head indices that are off, or null
     * @param expertOff per layer, expert e off, or null
     * @param heads     the mask's geometry: heads, FFN width and experts per layer it was made for
     */
    public record Mask(boolean[] layerOff, int[][] ffnOff, int[][] headsOff, boolean[][] expertOff, int heads, int ffnWidth,
                       int experts) {}
}
